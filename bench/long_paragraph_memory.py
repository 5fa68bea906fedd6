"""Peak memory of `spanseek index build` on a corpus whose only document is one very long paragraph.

    python bench/long_paragraph_memory.py --kib 256 512 1024 --out /tmp/long-paragraph.json

For each size, a corpus with one paragraph of about that many KiB of prose (seeded random sentences) is written
and indexed with ``spanseek index build`` (Flat, fp32, the default model) in a child process; the child's peak
RSS (``ru_maxrss``) and wall time are reported with the paragraph's token count. A long paragraph is encoded in
overlapping windows; memory should grow about linearly with its length, not with its square.
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

WORDS = ("river mountain castle king queen city empire battle treaty music painter novel science physics engine "
         "railway harbour island village church bridge festival poet language").split()


def paragraph(kib: int, seed: int = 0) -> str:
    rng = random.Random(seed)
    out, size = [], 0
    while size < kib * 1024:
        s = f"In {rng.randint(1000, 2000)} {rng.choice(['Alba', 'Borin', 'Cato'])} built the " \
            + " ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 9))) + "."
        out.append(s)
        size += len(s) + 1
    return " ".join(out)


def run(kib: int, model: str, work: Path) -> dict:
    corpus = work / f"long-{kib}.jsonl"
    corpus.write_text(json.dumps({"id": "long", "title": "Long", "paragraphs": [paragraph(kib)]}) + "\n")
    out = work / f"index-{kib}"
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "spanseek.cli", "index", "build", "--corpus", str(corpus), "--model", model,
                    "--out", str(out), "--precision", "fp32", "--quiet"], check=True, stdout=subprocess.DEVNULL)
    seconds = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss  # KiB, max over the children so far
    manifest = json.loads((out / "manifest.json").read_text())
    return {"kib": kib, "tokens": manifest["tokens"], "peak_rss_mib": round(peak / 1024),
            "peak_is_new": peak > before, "seconds": round(seconds, 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kib", type=int, nargs="+", default=[256, 512, 1024], help="paragraph sizes, ascending")
    ap.add_argument("--model", default="default")
    ap.add_argument("--out", default=None, help="results JSON")
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for kib in sorted(args.kib):  # ascending: ru_maxrss of the children is a running maximum
            rows.append(run(kib, args.model, Path(tmp)))
            print(json.dumps(rows[-1]), flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
