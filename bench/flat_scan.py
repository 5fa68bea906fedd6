"""The flat scan's reduced-precision screen (fp16 or bf16) against its float32 path: scan and search times, hits.

    python bench/flat_scan.py --index work/demo-index --model default --questions runs/validation.json.gz \
        --out bench/results/flat_scan.json

On an exact fp16 index searched on a CPU that multiplies fp16 natively (``fp16_native``: AVX-512 FP16 or AMX FP16),
a batch of at most ``HALF_ROWS`` query rows ranks from fp16 products, each row's candidates scored again exactly
(``core.flat_search``); on one that multiplies bf16 but not fp16 natively (``bf16_screen``: AVX-512 BF16, AMD Zen
4), a batch of ``BF16_MIN_ROWS`` to ``BF16_ROWS`` rows ranks from bf16 products of a bf16 copy, its candidates
scored with the float32 scan's bits (``core.bf16_scan``). ``half_used`` and ``half_kind``: what the scans do here.
``flat_search.APPROXIMATE = False`` forces the float32 path, the arm compared against (``reduced``: the screen). The questions' vectors are encoded once. Measured, each arm in turn within
every repeat (the machine is shared: ratios, medians):

- product: the (rows x N) product alone, float32 by either BLAS (``flat_search.PRODUCT``) and reduced, ms;
- scan: ``FlatScan(...).top(rows, k)`` for 2..128 query rows (the questions' q_start then q_end rows, as the dense
  leg asks) at k = 32 and 256, ms;
- search: ``Searcher.search`` (encoding included) of 1 and 8 questions, units phrase and passage, ms;
- hits: ``search_vectors`` of every question, in batches of 1 and of 8, for units phrase, passage and doc in modes
  dense and hybrid: the hit lists (passage, span, text) that differ between the arms, with the score gap of the first
  hits that differ (two hits within float32 rounding may swap: the paths sum the same products in another order).
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch: spin-waiting OpenMP crawls on shared CPUs
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import argparse  # noqa: E402
import contextlib  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
from machine import cpu_name  # noqa: E402  (bench/ is on sys.path when run as a script)

from spanseek.core import flat_search  # noqa: E402
from spanseek.core.bf16_scan import cpu_scans_bf16_faster  # noqa: E402
from spanseek.core.flat_search import FlatScan, flat_vectors  # noqa: E402
from spanseek.core.io import load_squad, squad_questions, write_json_atomic  # noqa: E402
from spanseek.core.loading import open_searcher  # noqa: E402
from spanseek.core.params import SearchParams  # noqa: E402

ARMS = ("float32", "reduced")
PRODUCTS = ("pieces", "transposed", "mkl", "reduced")  # transposed: the pieces by the (d, N) copy scans keep
SCAN_ROWS = (2, 8, 16, 32, 64, 128)
SCAN_KS = (32, 256)


@contextlib.contextmanager
def arm(name: str):
    """The reduced-precision screen allowed (``reduced``) or not (``float32``) inside the block."""
    before = flat_search.APPROXIMATE
    flat_search.APPROXIMATE = name == "reduced"
    try:
        yield
    finally:
        flat_search.APPROXIMATE = before


def medians(run, cases: list, repeats: int) -> dict:
    """Per case, each arm's median ms of ``run(case, round)`` over ``repeats`` rounds, the arms in turn in each."""
    times: dict = {(c, a): [] for c in cases for a in ARMS}
    for r in range(repeats):
        for c in cases:
            for a in ARMS:
                with arm(a):
                    t0 = time.perf_counter()
                    run(c, r)
                    times[c, a].append(1e3 * (time.perf_counter() - t0))
    return {c: {**{a: round(statistics.median(times[c, a]), 2) for a in ARMS},
                "ratio": round(statistics.median(times[c, "float32"]) / statistics.median(times[c, "reduced"]), 3)}
            for c in cases}


def scan_times(searcher, q_start: np.ndarray, q_end: np.ndarray, repeats: int) -> dict:
    leg = searcher.dense
    half = leg.half_vectors()
    cases = [(rows, k) for rows in SCAN_ROWS for k in SCAN_KS]
    # the first rows // 2 questions (repeated when there are fewer)
    queries = {rows: np.concatenate([np.resize(q_start, (rows // 2, q_start.shape[1])),
                                     np.resize(q_end, (rows // 2, q_end.shape[1]))]) for rows in SCAN_ROWS}
    fell_back = {c: 0 for c in cases}

    def run(case, _round):
        rows, k = case
        scan = FlatScan(leg.index.faiss, queries[rows], None, half=half)
        scan.top(np.arange(rows), k)
        fell_back[case] += scan.fell_back

    out = medians(run, cases, repeats)
    with arm("reduced"):
        ranked = {c: FlatScan(leg.index.faiss, queries[c[0]], None, half=half).half is not None for c in cases}
    return {f"rows={r} k={k}": {**v, "reduced_ranked": ranked[r, k], "fell_back": fell_back[r, k]}
            for (r, k), v in out.items()}


def product_times(searcher, q_start: np.ndarray, repeats: int) -> dict:
    """The product alone per row count, ms (medians, the four in turn): float32 by OpenBLAS's pieces of the index's
    rows, by its pieces of the transposed copy (``flat_search.transposed``) and by MKL (``flat_search.PRODUCT``; up
    to ``SMALL_ROWS`` rows all three are torch's tall product), and reduced (fp16 or bf16: ``HalfVectors.product``)."""
    leg = searcher.dense
    xb, half = flat_vectors(leg.index.faiss), leg.half_vectors()
    xt = np.ascontiguousarray(xb.T)
    times: dict = {(r, a): [] for r in SCAN_ROWS for a in PRODUCTS}
    before = flat_search.PRODUCT
    try:
        for _ in range(repeats):
            for rows in SCAN_ROWS:
                q = np.ascontiguousarray(np.resize(q_start, (rows, q_start.shape[1])), dtype=np.float32)
                out = np.empty((rows, len(xb)), np.float32)
                for a in PRODUCTS:
                    flat_search.PRODUCT = {"reduced": before, "transposed": "pieces"}.get(a, a)
                    t0 = time.perf_counter()
                    if a == "reduced":
                        half.product(torch.from_numpy(q), torch.from_numpy(out))
                    else:
                        flat_search.scores_into(q, xb, out, xt=xt if a == "transposed" else None)
                    times[rows, a].append(1e3 * (time.perf_counter() - t0))
    finally:
        flat_search.PRODUCT = before
    return {f"rows={r}": {a: round(statistics.median(times[r, a]), 2) for a in PRODUCTS} for r in SCAN_ROWS}


def search_times(searcher, questions: list[str], repeats: int) -> dict:
    cases = [(unit, b) for unit in ("phrase", "passage") for b in (1, 8)]

    def run(case, round_):
        unit, b = case
        start = 8 * (round_ % 8) % max(1, len(questions) - b + 1)  # another batch each round, the same for both arms
        searcher.search(questions[start : start + b], SearchParams(unit=unit, top_k=10))

    out = medians(run, cases, repeats)
    return {f"{u} batch={b}": v for (u, b), v in out.items()}


def hit_keys(hits) -> list[tuple]:
    return [(h.passage_id, h.start, h.end, h.text) for h in hits]


def same_hits(searcher, questions: list[str], q_start: np.ndarray, q_end: np.ndarray) -> dict:
    """Per unit/mode/batch size: hit lists compared, how many differ, and for those the first differing place and the
    score gap there (each arm's hit at that place, as scored by its own arm)."""
    report = {}
    for unit in ("phrase", "passage", "doc"):
        for mode in ("dense", "hybrid"):
            params = SearchParams(unit=unit, mode=mode, top_k=10)
            for b in (1, 8):
                got = {}
                for a in ARMS:
                    with arm(a):
                        got[a] = [h for i in range(0, len(questions), b) for h in searcher.search_vectors(
                            q_start[i : i + b], q_end[i : i + b], params, None, questions[i : i + b])]
                differ = []
                for i, (x, y) in enumerate(zip(got["float32"], got["reduced"], strict=True)):
                    kx, ky = hit_keys(x), hit_keys(y)
                    if kx != ky:
                        at = next((j for j, (p, q) in enumerate(zip(kx, ky, strict=False)) if p != q), min(len(kx),
                                                                                                    len(ky)))
                        gap = (abs(x[at].score - y[at].score) if at < min(len(kx), len(ky)) else None)
                        differ.append({"question": i, "place": at, "score_gap": gap,
                                       "same_set": sorted(kx) == sorted(ky)})
                scores = [abs(h.score - g.score) for x, y in zip(got["float32"], got["reduced"], strict=True)
                          for h, g in zip(x, y, strict=False) if hit_keys([h]) == hit_keys([g])]
                report[f"{unit}/{mode} batch={b}"] = {"lists": len(got["reduced"]), "differ": len(differ),
                                                      "max_score_difference": max(scores, default=0.0),
                                                      "differing": differ}
    return report


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--index", required=True)
    ap.add_argument("--model", default="default")
    ap.add_argument("--questions", required=True, help="SQuAD-format file")
    ap.add_argument("--limit-questions", type=int, default=500, help="questions whose hits are compared")
    ap.add_argument("--repeats", type=int, default=15, help="rounds of every timed case, the arms in turn")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    searcher = open_searcher(args.index, args.model, precision="fp32")
    assert searcher.encoder is not None
    questions = [q.question for q in squad_questions(load_squad(args.questions))][: args.limit_questions]
    q_start, q_end = searcher.encoder.encode(questions)
    half = searcher.dense.half_vectors()  # the check of its product, once, before anything is timed
    report = {
        "cpu": cpu_name(), "torch_threads": torch.get_num_threads(), "tokens": searcher.index.num_tokens,
        "half_rows": half.rows().stop - 1, "half_used": half.used, "half_kind": type(half).__name__,
        "fp16_native": flat_search.cpu_scans_fp16_faster(), "bf16_screen": cpu_scans_bf16_faster(),
        "wide_product": flat_search.wide_product(),
        "product_ms": product_times(searcher, q_start, args.repeats),
        "scan_ms": scan_times(searcher, q_start, q_end, args.repeats),
        "search_ms": search_times(searcher, questions, args.repeats),
        "same_hits": same_hits(searcher, questions, q_start, q_end),
    }
    write_json_atomic(args.out, report)
    for case, v in report["product_ms"].items():
        print(f"product_ms {case}: " + " ".join(f"{a} {v[a]}" for a in PRODUCTS))  # noqa: T201
    for name in ("scan_ms", "search_ms"):
        for case, v in report[name].items():
            print(f"{name} {case}: float32 {v['float32']} reduced {v['reduced']} ratio {v['ratio']}")  # noqa: T201
    for case, v in report["same_hits"].items():
        print(f"hits {case}: {v['differ']} of {v['lists']} lists differ")  # noqa: T201
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
