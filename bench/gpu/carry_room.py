"""What one device call can carry beside the checkout that travels with it: the size of a staged piece.

    python bench/gpu/carry_room.py              # MB a piece may take beside this checkout, as it is now
    python bench/gpu/carry_room.py --explain    # and the sizes behind it

A device call sends the checkout (its tracked files and the untracked ones git does not ignore) and the folders it
carries, 64 MiB in all. ``bench/gpu/host.sh stage`` and ``bench/gpu/train_base.sh stage`` cut what they stage into
pieces of this size, so each call carries one folder of them beside the checkout; run
``bench/gpu/slim_checkout.sh on`` first, or the bundled weights leave little room.
"""

from __future__ import annotations

import argparse
import subprocess
from pathlib import Path

CALL_LIMIT = 64 << 20  # bytes a device call carries: the checkout and the carried folders together
MARGIN = 2_000_000  # a piece folder's small files (checksums, manifest, the prebuilt shim) and edits after staging
MIN_PIECE_MB = 10  # below this, too many calls: the checkout needs slimming


def travelling_bytes(repo: Path) -> int:
    """The bytes of the checkout a device call sends: tracked files present on disk and untracked, unignored ones."""
    names = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=repo,
                           check=True, capture_output=True).stdout.decode().split("\0")
    paths = {repo / n for n in names if n}
    return sum(p.lstat().st_size for p in paths if p.is_file() or p.is_symlink())


def room_mb(checkout: int) -> int:
    """Whole MB a carried piece may take beside a travelling checkout of ``checkout`` bytes."""
    return max(0, (CALL_LIMIT - checkout - MARGIN) // 1_000_000)


def piece_mb(repo: Path) -> int:
    """``room_mb`` beside ``repo``'s travelling checkout (SystemExit when under ``MIN_PIECE_MB``)."""
    checkout = travelling_bytes(repo)
    room = room_mb(checkout)
    if room < MIN_PIECE_MB:
        raise SystemExit(f"the checkout that travels is {checkout / 1e6:.1f} MB, leaving {room} MB of the "
                         f"{CALL_LIMIT / 1e6:.1f} MB a device call carries: run bench/gpu/slim_checkout.sh on first")
    return int(room)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repo", type=Path, default=Path("."), help="the checkout (default: here)")
    ap.add_argument("--explain", action="store_true", help="also print the checkout's size and the limit")
    args = ap.parse_args()
    if args.explain:
        checkout = travelling_bytes(args.repo)
        print(f"the checkout that travels: {checkout} bytes; beside it, of the {CALL_LIMIT} a call carries "
              f"({MARGIN} kept spare), a piece may take {room_mb(checkout)} MB")
    else:
        print(piece_mb(args.repo))


if __name__ == "__main__":
    main()
