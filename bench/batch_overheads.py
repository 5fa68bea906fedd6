"""Per-batch costs that grow with the index: a search's work besides the scan, with no filter, a filter and deletions.

    python bench/batch_overheads.py --index work/demo-index --questions runs/validation.json.gz \
        --out bench/results/batch_overheads.json --hits-out runs/bench/batch_overheads_hits.json
    python bench/batch_overheads.py ... --compare runs/bench/batch_overheads_hits.json   (after a change: same hits?)

Two parts. On the index (``--index``): ms per batch of ``Searcher.search_vectors`` on pre-encoded questions, for
each unit, mode (dense, hybrid) and batch size, under three selections: none, a filter to every other document
(``doc_ids``), and every third document deleted (set on the opened index in memory: the index on disk is not
changed). The first ``--timed-questions`` are searched in batches of each size, ``--repeats`` times, the fastest
round kept. ``--hits-out`` writes the hits of the first ``--n-questions`` (batches of the largest size) per unit,
mode and selection; ``--compare`` counts the questions whose hits are identical to such a file's (passages, spans
and score bits).

On a synthetic token map (``--scale-tokens`` tokens in ``--scale-passages`` passages of ``--scale-docs``
documents; random lengths and flags, no vectors: a flat index of 10M tokens would not fit a shared machine), the
token-map work one batch's dense leg does besides its scan, with a tenth of the documents deleted, timed through
the library's own code: the selection's allowed-token mask a flat scan is given, the allowed token ids an exact
search of a small selection scores (of the first documents, up to ``EXACT_SELECTED_TOKENS`` tokens: a larger
selection never makes them), and one deepening round's unit count (``DenseLeg.unit_counts``) for a batch of
64 questions' 2 x 256 candidates. Each is the median of ``--scale-runs``. The same script runs on the code before
and after a change: a library without a selection's cached forms makes them the way its searcher did, each batch.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch: spin-waiting OpenMP crawls on shared CPUs
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import argparse  # noqa: E402
import json  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402
from types import SimpleNamespace  # noqa: E402

import numpy as np  # noqa: E402
from machine import cpu_name  # noqa: E402  (bench/ is on sys.path when run as a script)
from small_batches import batched, compare, hit_keys, search_arguments  # noqa: E402

from spanseek.core.dense import DenseLeg, _spannable  # noqa: E402
from spanseek.core.filters import SearchFilter  # noqa: E402
from spanseek.core.io import load_squad, squad_questions, write_json_atomic  # noqa: E402
from spanseek.core.loading import open_searcher  # noqa: E402
from spanseek.core.params import SearchParams  # noqa: E402
from spanseek.core.selection import EXACT_SELECTED_TOKENS, Layout, select  # noqa: E402
from spanseek.core.text import FLAG_END, FLAG_START  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SELECTIONS = ("none", "filter", "deleted")


def searchers(index: str, model: str | None) -> dict:
    """A searcher per selection (``SELECTIONS``): the filter to give it (or None) and the searcher."""
    plain = open_searcher(index, model)
    deleting = open_searcher(index, model)
    deleting.index.deleted_docs = np.arange(0, len(deleting.index.docs), 3, dtype=np.int64)
    every_other = SearchFilter(doc_ids=tuple(d["id"] for d in plain.index.docs[::2]))
    return {"none": (None, plain), "filter": (every_other, plain), "deleted": (None, deleting)}


def on_index(args: argparse.Namespace) -> tuple[dict, dict]:
    """The timings on ``--index`` (keyed "selection/unit/mode/batch") and each selection, unit and mode's hits."""
    by_selection = searchers(args.index, args.model)
    plain = by_selection["none"][1]
    texts = [q.question for q in squad_questions(load_squad(args.questions))][: args.n_questions]
    q_start, q_end = plain.encoder.encode(texts)
    timed_n = min(args.timed_questions, len(texts))
    runs, hits = {}, {}
    for name, (flt, searcher) in by_selection.items():
        for unit in args.units:
            for mode in args.modes:
                params = SearchParams(unit=unit, mode=mode, top_k=args.top_k, filter=flt)
                batched(searcher, q_start, q_end, texts, params, max(args.batch_sizes), timed_n)  # warm
                for size in args.batch_sizes:
                    best = float("inf")
                    for _ in range(args.repeats):
                        t0 = time.perf_counter()
                        batched(searcher, q_start, q_end, texts, params, size, timed_n)
                        best = min(best, time.perf_counter() - t0)
                    runs[f"{name}/{unit}/{mode}/{size}"] = {"ms_per_batch": round(1e3 * best / -(-timed_n // size), 2)}
                if args.hits_out or args.compare:
                    hits[f"{name}/{unit}/{mode}"] = [hit_keys(h) for h in batched(
                        searcher, q_start, q_end, texts, params, max(args.batch_sizes), len(texts))]
    return runs, hits


def synthetic(n_tokens: int, n_passages: int, n_docs: int, seed: int = 0) -> SimpleNamespace:
    """A token map of ``n_tokens`` in ``n_passages`` passages of ``n_docs`` documents (random lengths, a tenth of
    the documents deleted, random start and end flags), with what ``select`` and ``DenseLeg.unit_counts`` read."""
    rng = np.random.default_rng(seed)
    lengths = rng.multinomial(n_tokens - n_passages, np.full(n_passages, 1 / n_passages)) + 1
    passage_tokens = np.r_[0, np.cumsum(lengths)].astype(np.int64)
    flags = rng.choice(np.asarray([0, FLAG_START, FLAG_END, FLAG_START | FLAG_END], np.uint8), n_tokens)
    return SimpleNamespace(
        passage_tokens=passage_tokens, token_passage=np.repeat(np.arange(n_passages, dtype=np.int64), lengths),
        token_flags=flags, token_offsets=np.zeros((n_tokens, 2), np.int32), passage_doc=np.sort(
            rng.integers(0, n_docs, n_passages)), docs=[{}] * n_docs, num_tokens=n_tokens, passages=[{}] * n_passages,
        deleted_docs=np.arange(0, n_docs, 10, dtype=np.int64))


def median_ms(fn, runs: int) -> float:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return round(1e3 * float(np.median(times)), 3)


def at_scale(args: argparse.Namespace) -> dict:
    """ms of each piece of a batch's token-map work on the synthetic token map (see the module docstring)."""
    index = synthetic(args.scale_tokens, args.scale_passages, args.scale_docs)
    units = {"passage": np.arange(args.scale_passages, dtype=np.int64), "doc": index.passage_doc}
    layout = Layout(index, units)  # type: ignore[arg-type]
    sel = select(index, None, layout)  # type: ignore[arg-type]
    # the ids are what an exact search of a small selection scores: one of at most EXACT_SELECTED_TOKENS tokens (a
    # larger one is searched with the selector and never makes them), here the first documents that fit
    small = SimpleNamespace(**{**vars(index), "deleted_docs": np.flatnonzero(
        np.cumsum(layout.tokens_per_doc) > EXACT_SELECTED_TOKENS)})
    few = select(small, None, layout)  # type: ignore[arg-type]
    cached = hasattr(sel, "allowed_tokens")  # else the searcher made them from the token map each batch
    mask = (lambda: sel.allowed_tokens(index)) if cached else (lambda: sel.passages[index.token_passage])
    ids = (lambda: few.allowed_ids(index)) if cached else (lambda: np.flatnonzero(few.passages[index.token_passage]))
    spannable = _spannable(index, 16)
    leg = SimpleNamespace(index=index, spannable=lambda max_tokens: spannable)
    rng = np.random.default_rng(1)
    candidates = rng.integers(0, args.scale_tokens, (2 * 64, 256))
    out = {"tokens": args.scale_tokens, "passages": args.scale_passages, "docs": args.scale_docs,
           "deleted_docs": len(index.deleted_docs), "ids_selection_tokens": int(few.passages[index.token_passage].sum()),
           "runs": args.scale_runs, "selection_cached": cached,
           "ms": {"allowed_token_mask": median_ms(mask, args.scale_runs),
                  "allowed_token_ids": median_ms(ids, args.scale_runs)}}
    for unit, of_passage in units.items():
        out["ms"][f"unit_counts_{unit}"] = median_ms(
            lambda of=of_passage: DenseLeg.unit_counts(leg, candidates, 16, of), args.scale_runs)  # type: ignore
    return out


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    search_arguments(p, [1, 8, 64], ("dense", "hybrid"), 2)
    p.add_argument("--scale-tokens", type=int, default=10_000_000, help="synthetic token map: tokens (0: skip it)")
    p.add_argument("--scale-passages", type=int, default=500_000, help="synthetic token map: passages")
    p.add_argument("--scale-docs", type=int, default=100_000, help="synthetic token map: documents")
    p.add_argument("--scale-runs", type=int, default=15, help="timed runs of each piece (medians)")
    p.add_argument("--out", required=True, help="JSON results")
    args = p.parse_args(argv)
    load_before = os.getloadavg()
    result: dict = {"benchmark": "batch_overheads", "index": str(args.index), "cpu": cpu_name(),
                    "cpu_count": os.cpu_count(), "timed_questions": args.timed_questions, "repeats": args.repeats,
                    "top_k": args.top_k}
    if args.scale_tokens:
        result["synthetic"] = at_scale(args)
    result["runs"], hits = on_index(args)
    result["load_average"] = {"before": [round(x, 2) for x in load_before],
                              "after": [round(x, 2) for x in os.getloadavg()]}
    if args.hits_out:
        write_json_atomic(args.hits_out, hits)
    if args.compare:
        result["identical_to"] = {"file": args.compare, "counts": compare(
            json.loads(Path(args.compare).read_text(encoding="utf-8")), hits)}
    write_json_atomic(args.out, result)
    return result


if __name__ == "__main__":
    main()
