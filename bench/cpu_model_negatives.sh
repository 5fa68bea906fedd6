#!/usr/bin/env bash
# The "+ model hard negatives" ablation run on a CPU host, resumable step by step:
#
#   bench/cpu_model_negatives.sh PREV_MODEL OUT_RUN [PARTIAL_MINED.jsonl.gz]
#
# 1. an IVF4096,SQ8 index of the training file's corpus built with PREV_MODEL (the previous model);
# 2. `train mine --miner model` (top 10 passages, 4 kept per question). PARTIAL_MINED, a file mined earlier with
#    the same miner (e.g. by bench/gpu_model_negatives.sh cut short), seeds the mining chunks of 2,000 questions
#    it covers, so mining resumes after them;
# 3. one epoch of the ablation recipe (the BM25 row's flags) with the mined file, into OUT_RUN;
# 4. `spanseek eval` on the held-out articles ($VALIDATION, as `train phrase` writes it), reading comprehension
#    included, into OUT_RUN/val-full.json.
# Each step is skipped when its output exists; `train phrase` resumes from its last checkpoint. Relative paths
# are taken from the repository root. FACTORY and NPROBE set the index (a small corpus needs a smaller nlist);
# TRAIN_FLAGS are added to (and override) the training flags.
set -eu
cd "$(dirname "$0")/.."  # paths below are relative to the repository root
PREV_MODEL=${1:?usage: bench/cpu_model_negatives.sh PREV_MODEL OUT_RUN [PARTIAL_MINED.jsonl.gz]}
OUT_RUN=${2:?out run}
PARTIAL=${3:-}
WORK=${WORK:-work/model-negatives}
TRAIN=${TRAIN:-../shared/data/squad-v1.1-train.json.gz}
VALIDATION=${VALIDATION:-runs/validation.json.gz}
FACTORY=${FACTORY:-IVF4096,SQ8}
NPROBE=${NPROBE:-8}
export OMP_WAIT_POLICY=PASSIVE TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
S=${SPANSEEK:-.venv/bin/spanseek}
T0=$SECONDS
mkdir -p "$WORK"
[ -f "$WORK/corpus.jsonl" ] || $S corpus from-squad "$TRAIN" --out "$WORK/corpus.jsonl"
if [ ! -f "$WORK/index/manifest.json" ]; then
  $S index build --corpus "$WORK/corpus.jsonl" --model "$PREV_MODEL" --out "$WORK/index" \
     --factory "$FACTORY" --nprobe "$NPROBE" --no-gpu --quiet
fi
echo "index at $((SECONDS - T0)) s"
if [ ! -f "$WORK/hard-model.jsonl" ]; then
  mkdir -p "$WORK/hard-model.jsonl.parts"
  if [ -n "$PARTIAL" ] && [ -z "$(ls -A "$WORK/hard-model.jsonl.parts")" ]; then
    gzip -t "$PARTIAL" || { echo "$PARTIAL is not a readable .gz file" >&2; exit 1; }
    # whole chunks only (a last partial chunk would be taken for a finished one); split into a scratch folder
    # and move the chunks in at once, so an interrupted split leaves no cut-off chunk behind
    lines=$(zcat "$PARTIAL" | wc -l)
    rm -rf "$WORK/seed.tmp" && mkdir -p "$WORK/seed.tmp"
    zcat "$PARTIAL" | head -n $((lines / 2000 * 2000)) \
      | split -l 2000 -d -a 5 --additional-suffix=.jsonl - "$WORK/seed.tmp/"
    mv "$WORK"/seed.tmp/*.jsonl "$WORK/hard-model.jsonl.parts/" && rmdir "$WORK/seed.tmp"
  fi
  $S train mine --train "$TRAIN" --out "$WORK/hard-model.jsonl" --miner model --index "$WORK/index" \
     --model "$PREV_MODEL" --top-k 10 --keep 4
fi
echo "mined $(wc -l < "$WORK/hard-model.jsonl") questions at $((SECONDS - T0)) s"
if ! gzip -t "$WORK/hard-model.jsonl.gz" 2>/dev/null; then  # missing or cut short: write it again
  gzip -c "$WORK/hard-model.jsonl" > "$WORK/hard-model.jsonl.gz.tmp" && mv "$WORK/hard-model.jsonl.gz.tmp" "$WORK/hard-model.jsonl.gz"
fi
$S train phrase --train "$TRAIN" --out "$OUT_RUN" --val-questions 0 --checkpoint-every 50 --seed 0 \
   --loss unified --lora-r 16 --lambda-inb 256 --batch-windows 24 --lr 1e-3 --prebatch 2 --hard-per-batch 8 \
   --epochs 1 --hard-negatives "$WORK/hard-model.jsonl.gz" ${TRAIN_FLAGS:-}  # word-split on purpose
echo "trained at $((SECONDS - T0)) s"
[ -f "$OUT_RUN/val-full.json" ] || $S eval --questions "$VALIDATION" --model "$OUT_RUN/last" \
   --reading-comprehension --quiet --out "$OUT_RUN/val-full.json"
