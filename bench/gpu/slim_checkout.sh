#!/usr/bin/env bash
# The checkout that a device call sends, slimmed: the bundled weights leave it for a while, and come back.
#
#   bench/gpu/slim_checkout.sh on [PATH ...]    # untrack them (git rm --cached) and ignore them (.git/info/exclude)
#   bench/gpu/slim_checkout.sh off              # track them again, as before; the files never move
#
# A device call sends the checkout with it (tracked files, and untracked ones git does not ignore), 64 MiB in all,
# and the bundled weights are 58 MB of it. While slimmed, the working tree keeps every file; `git status` shows the
# weights as deleted from the index, so commit nothing then. Default PATHs: every bundled model's weights but the
# default model's (a call that indexes with the default model keeps its 12 MB; a run from INIT_FROM=core/models/base
# names the paths itself); .gpu/ is always ignored. `on` prints the MB a carried piece may take beside what is left
# (bench/gpu/carry_room.py), the size `host.sh stage` and `train_base.sh stage` cut their pieces to.
set -eu
MODE=${1:?usage: bench/gpu/slim_checkout.sh on [PATH ...] | off}
shift
EXCLUDE=$(git rev-parse --git-path info/exclude)
SLIMMED=$(git rev-parse --git-path slim_checkout)  # the paths slimmed, one a line
mkdir -p "$(dirname "$EXCLUDE")" && touch "$EXCLUDE"
grep -qx "/.gpu/" "$EXCLUDE" || echo "/.gpu/" >> "$EXCLUDE"
case $MODE in
on)
    # shellcheck disable=SC2046  # one path per word
    [ $# -gt 0 ] || set -- $(git ls-files -- 'core/models/*/weights.safetensors' | grep -v '^core/models/default/')
    for p in "$@"; do
        git ls-files --error-unmatch -- "$p" > /dev/null
        git rm -q --cached -- "$p"
        echo "/$p" >> "$EXCLUDE" && echo "$p" >> "$SLIMMED"
    done
    echo "slimmed: $*"
    python3 "$(dirname "$0")/carry_room.py" --explain
    ;;
off)
    [ -s "$SLIMMED" ] || { echo "nothing slimmed"; exit 0; }
    paths=$(cat "$SLIMMED")
    # shellcheck disable=SC2086  # one path per word
    git reset -q -- $paths
    grep -vxF -f <(sed 's|^|/|' "$SLIMMED") "$EXCLUDE" > "$EXCLUDE.tmp" || true
    mv "$EXCLUDE.tmp" "$EXCLUDE" && rm "$SLIMMED"
    echo "tracked again: $paths"
    ;;
*) echo "usage: bench/gpu/slim_checkout.sh on [PATH ...] | off" >&2; exit 2 ;;
esac
