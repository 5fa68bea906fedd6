#!/usr/bin/env bash
# The checkout that a device call sends, slimmed: the bundled weights leave it for a while, and come back.
#
#   bench/gpu/slim_checkout.sh on [PATH ...]    # untrack them (git rm --cached) and ignore them (.git/info/exclude)
#   bench/gpu/slim_checkout.sh off              # track them again, as before; the files never move
#
# A device call sends the tracked files with it, 64 MiB in all, and the bundled weights are 47 MB of them. While
# slimmed, the working tree keeps every file; `git status` shows the weights as deleted from the index, so commit
# nothing then. Default PATHs: the reader's and the base model's weights (a call that indexes with the default model
# keeps its 12 MB); .gpu/ is always ignored.
set -eu
MODE=${1:?usage: bench/gpu/slim_checkout.sh on [PATH ...] | off}
shift
EXCLUDE=$(git rev-parse --git-path info/exclude)
SLIMMED=$(git rev-parse --git-path slim_checkout)  # the paths slimmed, one a line
mkdir -p "$(dirname "$EXCLUDE")" && touch "$EXCLUDE"
grep -qx "/.gpu/" "$EXCLUDE" || echo "/.gpu/" >> "$EXCLUDE"
case $MODE in
on)
    [ $# -gt 0 ] || set -- core/models/reader/weights.safetensors core/models/base/weights.safetensors
    for p in "$@"; do
        git ls-files --error-unmatch -- "$p" > /dev/null
        git rm -q --cached -- "$p"
        echo "/$p" >> "$EXCLUDE" && echo "$p" >> "$SLIMMED"
    done
    echo "slimmed: $*; the checkout that travels is now $(git ls-files -z | xargs -0 du -cb | tail -1 | cut -f1) bytes"
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
