#!/usr/bin/env bash
# The base-size phrase model (`--model base`) trained on one GPU in two calls (probe, then train), each carrying
# under 64 MiB.
#
#   bench/gpu/train_base.sh probe        # call 1 carries .gpu/a: backbone piece 1, the data, the tokenizer
#   TRAIN_S=480 bench/gpu/train_base.sh train   # call 2 carries .gpu/b: backbone piece 2 (piece 1 stays there)
#
# Made here (see core/models/base/README.md):
#   python bench/gpu/carry_backbone.py pack --out .gpu/pack --weights int8 --piece-mb 52
#   .gpu/a: the first piece, manifest.json, squad-v1.1-train.json.gz, hard-bm25.jsonl.gz, skeleton/ (the
#   backbone's config and tokenizer files); .gpu/b: the second piece and manifest.json.
#
# probe: trains PROBE_STEPS steps of the recipe below on a randomly initialised MPNet-base (same shapes, same data,
# so the same speed) and writes .gpu/a/probe.json: steps/s and the seconds before the first step (data, model).
# train: joins the backbone, sizes the run to TRAIN_S seconds from the probe (at most MAX_EPOCHS), trains with a
# checkpoint every 100 steps under a hard deadline, and packs the model into $OUT in pieces of at most 15 MB, so a
# cut run still returns the last checkpoint. EXTRA adds flags to both (small local dry runs). INIT_FROM (a model
# directory in the checkout, such as core/models/base) continues training from that model instead of the bare
# backbone. Its adapters travel with the checkout (13 MB for core/models/base), so the 112 MB backbone no longer
# fits two calls: pack three pieces (--piece-mb 40,50 beside the slimmed checkout: bench/gpu/slim_checkout.sh on),
# carry the middle one in a call of its own between probe and train (a warm machine keeps carried folders) and
# name that folder in PIECES_FROM.
# TEACHER_S (seconds) first trains a cross-attention reader on the same backbone (a full fine-tune: the teacher) and
# then distils it into the phrase model (DensePhrases' Eq. 7, --lambda-kl LAMBDA_KL, default 4): its logits of every
# window the run visits are computed once, timed, before the run is sized to the time left. The probe then also
# times READER_PROBE_STEPS reader steps and that teacher's logits on a random MPNet-base. The reader's summary (with
# its reading comprehension of every held-out question, read on the GPU) comes back beside the phrase model. On an
# H200 the reader started in about 70 s (tokenising 87k windows on one core: 30 s of it in the tokenizer's batch
# call, which now gets every core) and runs 7.4 steps/s of 32 windows (bf16), and the
# teacher's logits of all 80.5k training pairs take about 95 s: a teacher and a 2-epoch phrase run do not fit one
# call, so `TEACHER_S=520 ... train_base.sh reader` trains it in a call of its own (it stays on the warm machine) and
# the next call, `REUSE_TEACHER=1 ... train_base.sh train`, distils from it. `train_base.sh teach` has that reader
# read the default phrase model's training pairs instead (`TEACH_FOR=reader`: the default reader's training windows;
# bench/gpu/teacher_cache.py, the MiniLM tokenizer files in .gpu/a/skeleton-minilm) and returns them as a teacher
# cache in 16 MB pieces, to distil the default model (or reader) from it on a CPU.
set -u
PHASE=${1:?usage: bench/gpu/train_base.sh probe|reader|teach|train}
A=.gpu/a B=.gpu/b
OUT=${OUT:-/tmp/out}
# a new model's encoder; a run from INIT_FROM keeps that model's own (train phrase refuses these beside --init-from)
ENCODER="--question-mode shared --lora-r 16"
RECIPE="--batch-windows 32 --lr 1e-3 --lambda-inb 16 --prebatch 0 --lambda-span 1
 --hard-negatives $A/hard-bm25.jsonl.gz --seed 0 --val-questions 0 --no-progress ${EXTRA:-}"
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 TRANSFORMERS_VERBOSITY=error
mkdir -p "$OUT"
if ! python3 -c "import spanseek.trainer" 2>/dev/null; then  # not installed there: the checkout as the package
    PKG=/tmp/spanseek-pkg
    rm -rf "$PKG" && mkdir -p "$PKG/spanseek" && cp spanseek/*.py "$PKG/spanseek/"
    for d in core indexer trainer service; do ln -s "$PWD/$d" "$PKG/spanseek/$d"; done
    export PYTHONPATH="$PKG${PYTHONPATH:+:$PYTHONPATH}" PYTHONSAFEPATH=1  # not ./spanseek, which lacks core/ etc.
fi
SPANSEEK=(python3 -c "import sys; from spanseek.cli import main; sys.exit(main())")
spanseek() { "${SPANSEEK[@]}" "$@"; }
now() { date +%s.%N; }
READER="--batch-size 32 --lr ${READER_LR:-5e-5} --checkpoint-every 200 --seed 0 --no-progress ${READER_EXTRA:-}"
reader_run() {  # OUT BACKBONE [flags]: the cross-attention reader on this backbone
    local out=$1 backbone=$2
    shift 2
    # shellcheck disable=SC2086
    TOKENIZERS_PARALLELISM=true spanseek train reader --train "$A/squad-v1.1-train.json.gz" --out "$out" \
        --backbone "$backbone" $READER "$@"
}

if [ "$PHASE" = probe ]; then
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || echo "no nvidia-smi"
    python3 -c "import torch, transformers, peft; print('torch', torch.__version__, 'transformers',
transformers.__version__, 'peft', peft.__version__, 'cuda', torch.cuda.is_available())" || exit 1
    python3 - "$A/skeleton" /tmp/mpnet-random <<'PY' || exit 1
import shutil, sys
from pathlib import Path
from transformers import AutoConfig, AutoModel
src, dst = Path(sys.argv[1]), Path(sys.argv[2])
AutoModel.from_config(AutoConfig.from_pretrained(src)).save_pretrained(dst)  # random weights, the real shapes
for f in src.iterdir():
    if f.name != "config.json":
        shutil.copy(f, dst / f.name)
PY
    rm -rf /tmp/probe /tmp/reader-probe /tmp/probe-fill /tmp/probe-tcache
    TEACH_PROBE="" fill_s=0
    if [ "${READER_PROBE_STEPS:-0}" -gt 0 ]; then  # the reader's steps, then its logits of the probe's windows
        r0=$(now)
        # shellcheck disable=SC2086
        reader_run /tmp/reader-probe /tmp/mpnet-random --max-steps "$READER_PROBE_STEPS" --val-questions 0 \
            2>&1 | tail -3
        echo "reader probe: $(python3 -c "print(round($(now) - $r0, 1))") s in all"
        TEACH_PROBE="--teacher /tmp/reader-probe/last --lambda-kl ${LAMBDA_KL:-4} --teacher-cache /tmp/probe-tcache"
        f0=$(now)
        # shellcheck disable=SC2086
        spanseek train phrase --train "$A/squad-v1.1-train.json.gz" --out /tmp/probe-fill \
            --backbone /tmp/mpnet-random --max-steps "${PROBE_STEPS:-60}" --stop-after 1 --checkpoint-every 1000 \
            $ENCODER $RECIPE $TEACH_PROBE 2>&1 | tail -3
        fill_s=$(python3 -c "print(round($(now) - $f0, 1))")
    fi
    t0=$(now)
    # shellcheck disable=SC2086  # the recipe is word-split on purpose
    spanseek train phrase --train "$A/squad-v1.1-train.json.gz" --out /tmp/probe --backbone /tmp/mpnet-random \
        --max-steps "${PROBE_STEPS:-60}" --checkpoint-every 1000 $ENCODER $RECIPE $TEACH_PROBE 2>&1 | tail -5
    t1=$(now)
    python3 - "$t0" "$t1" "$A/probe.json" "$fill_s" <<'PY' || exit 1
import json, sys
from pathlib import Path
t0, t1, out, fill_wall = float(sys.argv[1]), float(sys.argv[2]), sys.argv[3], float(sys.argv[4])
s = json.load(open("/tmp/probe/summary.json"))
probe = {"steps": s["steps"], "loop_s": s["seconds"], "wall_s": round(t1 - t0, 1),
         "steps_per_s": round(s["steps"] / s["seconds"], 3), "before_first_step_s": round(t1 - t0 - s["seconds"], 1),
         "questions_per_s": s["questions_per_second"], "precision": s["precision"], "device": s["device"],
         "steps_per_epoch": -(-s["train_windows"] // 32)}
if Path("/tmp/reader-probe/summary.json").exists():  # the teacher's probe: its steps and its logits' fill
    r = json.load(open("/tmp/reader-probe/summary.json"))
    pairs = len(json.load(open("/tmp/probe-tcache/cache.json"))["keys"])
    fill = max(1.0, fill_wall - probe["before_first_step_s"])  # the fill run less a run's start-up (its 1 step: noise)
    probe |= {"reader_steps_per_s": round(r["steps"] / r["seconds"], 3), "reader_windows": r["train_windows"],
              "fill_pairs": pairs, "fill_s": round(fill, 1), "fill_pairs_per_s": round(pairs / fill, 1)}
json.dump(probe, open(out, "w"), indent=1)
print(json.dumps(probe))
PY
    cp "$A/probe.json" "$OUT/"
    exit 0
fi

if [ "$PHASE" = teach ]; then  # the reader of a `reader` call reads the default model's (or reader's) training pairs
    [ -f /tmp/reader/last/reader_config.json ] || { echo "no reader in /tmp/reader/last: run the reader phase first"; exit 1; }
    t0=$(now)
    FOR=${TEACH_FOR:-phrase}
    # shellcheck disable=SC2086
    python3 bench/gpu/teacher_cache.py fill --for "$FOR" --reader /tmp/reader/last --train "$A/squad-v1.1-train.json.gz" \
        --model default --tokenizer "$A/skeleton-minilm" --out "/tmp/tcache-$FOR" ${TEACH_EXTRA:-} || exit 1
    python3 bench/gpu/teacher_cache.py pack "/tmp/tcache-$FOR" --out "$OUT" --piece-mb 16 || exit 1
    echo "teach $FOR: $(python3 -c "print(round($(now) - $t0))") s"; ls -la "$OUT"
    python3 -c "import json; print(json.dumps(json.load(open('/tmp/reader/summary.json')).get('validation')))"
    exit 0
fi
case $PHASE in train | reader) ;; *) echo "unknown phase $PHASE"; exit 2 ;; esac
[ "$PHASE" = train ] && : "${TRAIN_S:?TRAIN_S: seconds this call may train}"
t0=$(now)
elapsed() { python3 -c "print(round($(now) - $t0))"; }
python3 bench/gpu/carry_backbone.py unpack "$B" --pieces-from "$A" ${PIECES_FROM:+--pieces-from "$PIECES_FROM"} || exit 1
if [ "${TEACHER_S:-0}" -gt 0 ]; then
    RSTEPS=$(python3 -c "import json; p = json.load(open('$A/probe.json')); print(max(1, int(($TEACHER_S - 90) * p['reader_steps_per_s'])))")
    echo "reader: $RSTEPS steps"  # 90 s of TEACHER_S: its start-up (70 s on an H200) and the held-out reading
    # shellcheck disable=SC2086
    TOKENIZERS_PARALLELISM=true timeout "$((TEACHER_S + 30))" "${SPANSEEK[@]}" train reader --train "$A/squad-v1.1-train.json.gz" --out /tmp/reader \
        --backbone package:all-mpnet-base-v2 --max-steps "$RSTEPS" --val-questions 100000 $READER > /tmp/reader.log 2>&1
    echo "reader exit $? at $(elapsed) s"; tail -3 /tmp/reader.log
fi
if [ "$PHASE" = reader ]; then  # the teacher alone: it stays on the warm machine for a train call with REUSE_TEACHER=1
    cp /tmp/reader/summary.json /tmp/reader.log "$OUT/" 2>/dev/null
    ls -la "$OUT"
    exit 0
fi
TEACH=""
# shellcheck disable=SC2206  # the encoder flags are word-split on purpose
if [ -n "${INIT_FROM:-}" ]; then START=(--init-from "$INIT_FROM")
else START=(--backbone package:all-mpnet-base-v2 $ENCODER); fi
if [ "${TEACHER_S:-0}" -gt 0 ] || [ "${REUSE_TEACHER:-0}" = 1 ]; then
    if [ -f /tmp/reader/last/reader_config.json ]; then
        TEACH="--teacher /tmp/reader/last --lambda-kl ${LAMBDA_KL:-4} --teacher-cache /tmp/tcache"
    else
        echo "no reader checkpoint: the phrase model trains without a teacher"
    fi
fi
size() {  # steps that fit the time left: at most MAX_EPOCHS epochs, at least AT_LEAST
    python3 - "$A/probe.json" "$TRAIN_S" "$(elapsed)" "${1:-0}" "${2:-1}" <<'PY'
import json, os, sys
p, budget, spent, fill, at_least = json.load(open(sys.argv[1])), *map(float, sys.argv[2:])
train_s = budget - spent - fill - p["before_first_step_s"] - 30  # 30 s: the last checkpoint and the packing
epochs = float(os.environ.get("MAX_EPOCHS", 5))
print(int(max(at_least, min(train_s * p["steps_per_s"], epochs * p["steps_per_epoch"]))))
PY
}
if [ -n "$TEACH" ]; then  # the teacher's logits of every window an epoch visits, before the run is sized again
    FILL_S=$(python3 -c "import json; p = json.load(open('$A/probe.json'))
print(round(p['fill_pairs'] / min(p['steps'], p['steps_per_epoch']) * p['steps_per_epoch'] / p['fill_pairs_per_s']
            + p['before_first_step_s']))")
    STEPS=$(size "$FILL_S")
    echo "teacher logits (about $FILL_S s), then $STEPS steps"
    # shellcheck disable=SC2086
    timeout "$((TRAIN_S - $(elapsed) - 20))" "${SPANSEEK[@]}" train phrase --train "$A/squad-v1.1-train.json.gz" \
        --out /tmp/fill "${START[@]}" --max-steps "$STEPS" --stop-after 1 --checkpoint-every 1000 \
        $RECIPE $TEACH > /tmp/fill.log 2>&1
    echo "fill exit $? at $(elapsed) s"; tail -2 /tmp/fill.log
    spe=$(python3 -c "import json; print(json.load(open('$A/probe.json'))['steps_per_epoch'])")
    [ "$STEPS" -ge "$spe" ] && STEPS=$(size 0 "$spe")  # any run of an epoch or more visits every window: same cache
else
    STEPS=$(size 0)
fi
echo "training $STEPS steps at $(elapsed) s"
left=$(python3 -c "print(max(10, int($TRAIN_S - ($(now) - $t0) - 20)))")
# shellcheck disable=SC2086
timeout "$left" "${SPANSEEK[@]}" train phrase \
    --train "$A/squad-v1.1-train.json.gz" --out /tmp/base-run "${START[@]}" \
    --max-steps "$STEPS" --checkpoint-every 100 $RECIPE $TEACH \
    > /tmp/base-run.log 2>&1
echo "exit $? at $(elapsed) s" | tee -a /tmp/base-run.log
tail -5 /tmp/base-run.log
cd /tmp/base-run || exit 1
python3 -c "import torch; print(torch.load('last/trainer_state.pt', weights_only=False)['step'])" > step.txt
cp /tmp/base-run.log train.log
files="last/weights.safetensors last/spanseek_config.json train_config.json step.txt train.log"
[ -f summary.json ] && files="$files summary.json"
for f in reader.log fill.log reader/summary.json; do  # the teacher's run, when there was one
    [ -f "/tmp/$f" ] && mkdir -p teacher && cp "/tmp/$f" "teacher/${f//\//-}" && files="$files teacher/${f//\//-}"
done
# shellcheck disable=SC2086
tar czf /tmp/base.tgz $files && split -b 15000000 -d /tmp/base.tgz "$OUT/base.tgz."
ls -la "$OUT"; cat step.txt
