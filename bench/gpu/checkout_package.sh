# Sourced by the GPU scripts (bench/gpu/host.sh, bench/gpu/train_base.sh, bench/gpu_training.sh): on a machine where
# spanseek is not installed (a GPU host), `checkout_as_package SCRATCH` makes the checkout the package, SCRATCH/spanseek-pkg
# first on PYTHONPATH: its spanseek/ holds spanseek/*.py and links to core, indexer, trainer, service and data, as
# the installed package maps them (./spanseek alone lacks core and the rest).
checkout_as_package() {
    python3 -c "import spanseek.trainer" 2>/dev/null && return 0
    local pkg=$1/spanseek-pkg d
    [ -f spanseek/cli.py ] && [ -d core ] || { echo "no spanseek checkout in $PWD: run from its root" >&2; return 1; }
    rm -rf "$pkg" && mkdir -p "$pkg/spanseek" && cp spanseek/*.py "$pkg/spanseek/" || return 1
    for d in core indexer trainer service data; do ln -s "$PWD/$d" "$pkg/spanseek/$d" || return 1; done
    export PYTHONPATH="$pkg${PYTHONPATH:+:$PYTHONPATH}" PYTHONSAFEPATH=1
}
