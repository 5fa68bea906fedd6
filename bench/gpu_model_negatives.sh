#!/usr/bin/env bash
# Model-mined hard negatives on a CUDA host, then the "+ model hard negatives" ablation run.
#
#   bench/gpu_model_negatives.sh OUT_DIR MODEL [TRAIN_FLAGS...]
#
# 1. `corpus from-squad` of the training file, 2. an IVF4096,SQ8 index of it built with MODEL (the previous model;
# encoding on the GPU, faiss on the CPU), 3. `train mine --miner model` (top 10 passages, 4 hard negatives kept per
# question; cut at MINE_S seconds, when the chunks mined so far are used and counted), 4. bench/gpu_training.sh
# with the run "abl-model" = TRAIN_FLAGS plus the mined file. OUT_DIR gets hard-model.jsonl.gz and the run.
set -u
OUT_DIR=${1:?usage: bench/gpu_model_negatives.sh OUT_DIR MODEL [TRAIN_FLAGS...]}
MODEL=${2:?model}
shift 2
DATA=${DATA:-.gpu}
MINE_S=${MINE_S:-270}
T0=$SECONDS
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
spanseek() { python3 -c "import sys; from spanseek.cli import main; sys.exit(main())" "$@"; }
mkdir -p "$OUT_DIR" /tmp/mine
spanseek corpus from-squad "$DATA/squad-v1.1-train.json.gz" --out /tmp/mine/train-corpus.jsonl || exit 1
spanseek index build --corpus /tmp/mine/train-corpus.jsonl --model "$MODEL" --out /tmp/mine/index \
    --factory IVF4096,SQ8 --nprobe 8 --no-gpu --quiet || exit 1
echo "index built at $((SECONDS - T0)) s"; cat /tmp/mine/index/manifest.json | head -c 600; echo
timeout "$MINE_S" python3 -c "import sys; from spanseek.cli import main; sys.exit(main())" train mine \
    --train "$DATA/squad-v1.1-train.json.gz" --out /tmp/mine/hard-model.jsonl --miner model --index /tmp/mine/index \
    --model "$MODEL" --top-k 10 --keep 4 2>&1 | tr '\r' '\n' | grep -v '^\s*$' | tail -2
if [ ! -f /tmp/mine/hard-model.jsonl ]; then  # cut short: use the chunks mined so far
    cat /tmp/mine/hard-model.jsonl.parts/*.jsonl > /tmp/mine/hard-model.jsonl
fi
echo "mined $(wc -l < /tmp/mine/hard-model.jsonl) questions at $((SECONDS - T0)) s"
gzip -c /tmp/mine/hard-model.jsonl > "$OUT_DIR/hard-model.jsonl.gz"
SMOKE=0 DEADLINE_S=${DEADLINE_S:-$((570 - SECONDS + T0))} bench/gpu_training.sh "$OUT_DIR" \
    "abl-model|$* --hard-negatives $OUT_DIR/hard-model.jsonl.gz"
