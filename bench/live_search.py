"""The search stage after live writes: an index with a segment of written documents against the index alone.

    python bench/live_search.py --index work/demo-index --model default --questions runs/validation.json.gz \
        --out bench/results/live_search_stage.json

A ``LiveIndex`` (``core.segment``) over --index holds --writes new one-passage documents and, with --tombstones,
replaces that many of the base's documents (as ``spanseek serve --writes`` does after such writes). The first
--n-questions of a fixed shuffle of --questions (every article) are encoded once; then, in each of --repeats
rounds, each arm searches them in batches of --batch-size (hybrid, top-k 10), for every unit, timed:

- ``base``: the index without writes;
- ``live, scanned``: the live index, its flat base scanned once a batch (``core.dense.SegmentedScan``);
- ``live, faiss each round``: the live index searched by faiss for each round (``SegmentedFaiss.search``), as it was
  before the scan.

With --compare it also counts, over every unit and mode, the questions whose hit lists (passage, span) differ
between the two live arms (float rounding can swap two hits within about 1e-6 of each other).
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch: spin-waiting OpenMP crawls on shared CPUs
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import argparse  # noqa: E402
import contextlib  # noqa: E402
import random  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
from machine import cpu_name  # noqa: E402  (bench/ is on sys.path when run as a script)

from spanseek.core.io import Document, load_squad, squad_questions, write_json_atomic  # noqa: E402
from spanseek.core.lexical import analyzer_of  # noqa: E402
from spanseek.core.live_lexical import BaseTerms  # noqa: E402
from spanseek.core.loading import open_searcher  # noqa: E402
from spanseek.core.params import MODES, UNITS, SearchParams  # noqa: E402
from spanseek.core.segment import LiveIndex, SegmentedFaiss, empty_like, searcher_over  # noqa: E402
from spanseek.indexer.live import DocumentEncoder  # noqa: E402

WRITTEN = "The zebra crossing on the {n}th street was built in {year} by the city council of Oslo."


@contextlib.contextmanager
def faiss_each_round():
    """Live searches as before the scan: faiss searches the base and the segment for each round."""
    flat_parts = SegmentedFaiss.flat_parts
    SegmentedFaiss.flat_parts = lambda self: None  # type: ignore[method-assign]
    try:
        yield
    finally:
        SegmentedFaiss.flat_parts = flat_parts  # type: ignore[method-assign]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--index", type=Path, required=True, help="an exact (Flat) index")
    p.add_argument("--model", default="default")
    p.add_argument("--questions", required=True, help="SQuAD-format file whose questions are asked")
    p.add_argument("--n-questions", type=int, default=256)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--writes", type=int, default=1, help="one-passage documents written")
    p.add_argument("--tombstones", type=int, default=0, help="base documents replaced (their tokens masked)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--compare", action="store_true", help="count differing hit lists of the two live arms")
    p.add_argument("--precision", default="auto", choices=["auto", "fp32", "bf16"])
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args()

    base = open_searcher(args.index, args.model, device="cpu", precision=args.precision)
    if type(base.index.faiss).__name__ not in ("IndexFlat", "IndexFlatIP"):
        raise SystemExit(f"{args.index}: an exact (Flat) index is needed; this one is {base.index.manifest.factory}")
    encoder = DocumentEncoder(base.encoder.model, base.index.manifest.filter_threshold, precision=args.precision,
                              analyzer=analyzer_of(base.index.manifest.lexical))
    written = [encoder.encode(Document(f"written-{n}", f"Written {n}", (WRITTEN.format(n=n, year=1900 + n),)))
               for n in range(args.writes)]
    tombstones = np.arange(min(args.tombstones, len(base.index.docs)), dtype=np.int64)
    live_index = LiveIndex(base.index, written, tombstones, empty_like(base.index.faiss),
                           BaseTerms.of(base.index) if base.index.lexical is not None else None)
    live = searcher_over(base, live_index)
    questions = [q.question for q in squad_questions(load_squad(args.questions))]
    random.Random(0).shuffle(questions)
    questions = questions[: args.n_questions]
    q_start, q_end = base.encoder.encode(questions)
    batches = [slice(a, a + args.batch_size) for a in range(0, len(questions), args.batch_size)]

    def search(searcher, params: SearchParams) -> list:
        return [hits for b in batches
                for hits in searcher.search_vectors(q_start[b], q_end[b], params, questions=questions[b])]

    arms = {"base": (base, contextlib.nullcontext), "live, scanned": (live, contextlib.nullcontext),
            "live, faiss each round": (live, faiss_each_round)}
    seconds: dict[str, dict[str, list[float]]] = {u: {a: [] for a in arms} for u in UNITS}
    for unit in UNITS:
        params = SearchParams(unit=unit, top_k=10)
        search(live, params)  # warm-up: the held buffers, the spannable tokens
        for _ in range(args.repeats):
            for arm, (searcher, context) in arms.items():
                with context():
                    t0 = time.perf_counter()
                    search(searcher, params)
                    seconds[unit][arm].append(round(time.perf_counter() - t0, 3))
        print(unit, {arm: min(s) for arm, s in seconds[unit].items()}, flush=True)
    result = {
        "benchmark": "live_search", "index": str(args.index), "model": args.model, "writes": args.writes,
        "tombstones": len(tombstones), "questions": len(questions), "batch_size": args.batch_size, "mode": "hybrid",
        "top_k": 10, "repeats": args.repeats, "precision": base.encoder.precision,
        "seconds_search_stage": seconds,
        "best": {u: {arm: min(s) for arm, s in by_arm.items()} for u, by_arm in seconds.items()},
        "cpu": cpu_name(), "cpu_count": os.cpu_count(),
    }
    if args.compare:
        differing = {}
        for unit in UNITS:
            for mode in MODES:
                params = SearchParams(unit=unit, top_k=10, mode=mode)
                scanned = search(live, params)
                with faiss_each_round():
                    searched = search(live, params)
                differing[f"{unit}/{mode}"] = sum(
                    [(h.passage_id, h.start, h.end) for h in a] != [(h.passage_id, h.start, h.end) for h in b]
                    for a, b in zip(scanned, searched, strict=True))
        result["differing"] = differing
        print("differing hit lists:", differing)
    write_json_atomic(args.out, result)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
