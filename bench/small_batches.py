"""Small batches: ms per batch and per question of ``Searcher.search_vectors`` by batch size, unit and mode.

    python bench/small_batches.py --index work/demo-index --questions runs/validation.json.gz \
        --out bench/results/small_batches.json --hits-out runs/bench/small_batches_hits.json
    python bench/small_batches.py ... --compare runs/bench/small_batches_hits.json   (after a change: same hits?)

The questions (the first --n-questions of a SQuAD-format file) are encoded once, untimed; each timed batch is
``search_vectors`` on pre-encoded questions (the service's tail: a few requests in one micro-batch). For each unit,
mode and batch size, the first --timed-questions questions are searched in batches of that size, --repeats times,
and the fastest round is kept (a shared machine's slow spells hit the later rounds as often as the first); the flat
scan's share (``flat_search.scores_into``, the product of the queries by the index) is timed in the same rounds.

``--hits-out`` writes every question's hits (passage, characters, score as a float's hex) searched in batches of
each size; ``--compare`` reads such a file and counts, per unit, mode and batch size, the questions whose hits are
identical (same passages, spans and score bits), and how many of them searched alone and in their batch agree.

``--scan-rows`` times the flat scan's products alone at those query rows (two per question), in turn, each
``--scan-runs`` times (medians): torch's tall product ``xb @ q.T`` (what ``SMALL_ROWS`` rows take), numpy's
pieces (``scores_into`` beyond ``SMALL_ROWS``, over the transposed copy where this CPU keeps one) and torch's product
by that copy, with each one's largest difference from the tall product and the summation its bits follow
(``summation``: a faster kernel keeps today's scores to the bit only if it adds in the same order).
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch: spin-waiting OpenMP crawls on shared CPUs
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import argparse  # noqa: E402
import itertools  # noqa: E402
import json  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
from machine import cpu_name  # noqa: E402  (bench/ is on sys.path when run as a script)

from spanseek.core import flat_search  # noqa: E402
from spanseek.core.io import load_squad, squad_questions, write_json_atomic  # noqa: E402
from spanseek.core.loading import open_searcher  # noqa: E402
from spanseek.core.params import MODES, UNITS, SearchParams  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SUMMATION_TOKENS = 64  # tokens whose scores ``summation`` reproduces, for each product of --scan-rows


class ScanClock:
    """Seconds spent in ``flat_search.scores_into`` while installed (the module's attribute, which scans call)."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.product = flat_search.scores_into

    def __call__(self, *args, **kwargs):
        t0 = time.perf_counter()
        try:
            return self.product(*args, **kwargs)
        finally:
            self.seconds += time.perf_counter() - t0


def hit_keys(hits) -> list[list]:
    """A question's hits as comparable rows: passage, characters, score bits (float hex)."""
    return [[h.passage_id, h.start, h.end, float(h.score).hex()] for h in hits]


def batched(searcher, q_start, q_end, texts, params: SearchParams, size: int, n: int) -> list:
    """Hits of the first ``n`` questions searched ``size`` at a time."""
    out: list = []
    for a in range(0, n, size):
        out += searcher.search_vectors(q_start[a:a + size], q_end[a:a + size], params, None, texts[a:a + size])
    return out


def against_alone(alone: list, batched_rows: list) -> dict:
    """How many questions' hits in batches are those searched alone: identical (score bits too), the same
    passages and spans, and the largest score difference between them."""
    same = [[h[:3] for h in a] == [h[:3] for h in b] for a, b in zip(alone, batched_rows, strict=True)]
    diffs = [abs(float.fromhex(x[3]) - float.fromhex(y[3])) for a, b, ok in zip(alone, batched_rows, same, strict=True)
             if ok for x, y in zip(a, b, strict=True)]
    return {"identical": sum(a == b for a, b in zip(alone, batched_rows, strict=True)), "same_spans": sum(same),
            "questions": len(alone), "max_score_diff": max(diffs, default=0.0)}


def compare(before: dict, after: dict) -> dict:
    """Per "unit/mode/batch", how many questions' hits are identical in both files, and of how many."""
    counts = {}
    for key, rows in after.items():
        old = before.get(key)
        if old is not None:
            counts[key] = {"identical": sum(a == b for a, b in zip(old, rows, strict=True)), "questions": len(rows)}
    return counts


def summation(scores: np.ndarray, queries: np.ndarray, x: np.ndarray) -> str:
    """The float32 summation whose bits each row of ``scores`` ((R, n) products of ``queries`` (R, d) by the tokens
    ``x`` (n, d)) has, to the bit: "fma" (a score's d products added one after another, each product and addition
    rounded once: a fused multiply-add, as OpenBLAS's kernels add), "L lanes" (the products rounded, then added round
    robin into L partial sums, k into sum k mod L, and the sums halved pairwise: MKL's tall product on a Zen 4 EPYC),
    or "other"; runs of rows alike as "4 lanes x4 + 8 lanes x2". Another kernel gives the same scores to the bit only
    if it adds in the same order."""
    q, x64 = queries.astype(np.float64), x.astype(np.float64)
    fused = np.zeros(scores.shape, np.float32)
    for k in range(x.shape[1]):  # a float32 product is exact in float64: one rounding to float32 after the add
        fused = (fused + q[:, k, None] * x64[None, :, k]).astype(np.float32)
    ways = {"fma": fused}
    products = queries[:, None, :] * x[None, :, :]  # (R, n, d) float32, each product rounded
    for lanes in (4, 8, 16):
        if x.shape[1] % lanes == 0:
            sums = np.zeros(scores.shape + (lanes,), np.float32)
            for k in range(0, x.shape[1], lanes):
                sums += products[:, :, k : k + lanes]
            while sums.shape[2] > 1:
                sums = sums[:, :, : sums.shape[2] // 2] + sums[:, :, sums.shape[2] // 2 :]
            ways[f"{lanes} lanes"] = sums[:, :, 0]
    labels = [next((name for name, way in ways.items() if np.array_equal(way[r], scores[r])), "other")
              for r in range(len(scores))]
    runs = [(label, len(list(group))) for label, group in itertools.groupby(labels)]
    return runs[0][0] if len(runs) == 1 else " + ".join(f"{label} x{n}" for label, n in runs)


def scan_products(xb: np.ndarray, queries: np.ndarray, rows: list[int], runs: int) -> dict:
    """Median ms of each way to make the (rows, N) scores of ``rows`` query rows, timed in turn."""
    import statistics

    xt = flat_search.transposed(xb)
    xt = xt if xt is not None else np.ascontiguousarray(xb.T)

    def tall(q: np.ndarray, out: np.ndarray) -> None:
        out[:] = torch.matmul(torch.from_numpy(xb), torch.from_numpy(q).T).numpy().T

    def pieces(q: np.ndarray, out: np.ndarray) -> None:
        small, flat_search.SMALL_ROWS, product, flat_search.PRODUCT = flat_search.SMALL_ROWS, 0, flat_search.PRODUCT, "pieces"
        try:
            flat_search.scores_into(q, xb, out, xt=xt)
        finally:
            flat_search.SMALL_ROWS, flat_search.PRODUCT = small, product

    def by_transposed(q: np.ndarray, out: np.ndarray) -> None:
        torch.mm(torch.from_numpy(q), torch.from_numpy(xt), out=torch.from_numpy(out))

    ways = {"tall": tall, "pieces": pieces, "mm_transposed": by_transposed}
    found = {}
    for r in rows:
        q = np.ascontiguousarray(np.resize(queries, (r, queries.shape[1])))
        outs = {name: np.empty((r, len(xb)), np.float32) for name in ways}
        for name, way in ways.items():
            way(q, outs[name])
        times: dict[str, list[float]] = {name: [] for name in ways}
        for _ in range(runs):
            for name, way in ways.items():
                t0 = time.perf_counter()
                way(q, outs[name])
                times[name].append(time.perf_counter() - t0)
        sample = np.linspace(0, len(xb) - 1, SUMMATION_TOKENS).astype(np.int64)
        found[str(r)] = {name: {"median_ms": round(1e3 * statistics.median(t), 2),
                                "max_diff_from_tall": float(np.abs(outs[name] - outs["tall"]).max()),
                                "summation": summation(outs[name][:, sample], q, xb[sample])}
                         for name, t in times.items()}
    return found


def run(args: argparse.Namespace) -> dict:
    load_before = os.getloadavg()
    searcher = open_searcher(args.index, args.model)
    texts = [q.question for q in squad_questions(load_squad(args.questions))][: args.n_questions]
    q_start, q_end = searcher.encoder.encode(texts)
    clock = ScanClock()
    flat_search.scores_into = clock
    timed_n = min(args.timed_questions, len(texts))
    result: dict = {"benchmark": "small_batches", "index": str(args.index), "cpu": cpu_name(),
                    "cpu_count": os.cpu_count(), "torch_threads": torch.get_num_threads(),
                    "indexed_tokens": int(searcher.index.faiss.ntotal), "questions": len(texts),
                    "timed_questions": timed_n, "repeats": args.repeats, "top_k": args.top_k, "runs": {}}
    hits: dict[str, list] = {}
    for unit in args.units:
        for mode in args.modes:
            params = SearchParams(unit=unit, mode=mode, top_k=args.top_k)
            batched(searcher, q_start, q_end, texts, params, max(args.batch_sizes), max(args.batch_sizes))  # warm
            for size in args.batch_sizes:
                best, scan = float("inf"), 0.0
                for _ in range(args.repeats):
                    clock.seconds, t0 = 0.0, time.perf_counter()
                    batched(searcher, q_start, q_end, texts, params, size, timed_n)
                    if (seconds := time.perf_counter() - t0) < best:
                        best, scan = seconds, clock.seconds
                batches = -(-timed_n // size)
                result["runs"][f"{unit}/{mode}/{size}"] = {
                    "unit": unit, "mode": mode, "batch_size": size, "ms_per_batch": round(1e3 * best / batches, 2),
                    "ms_per_question": round(1e3 * best / timed_n, 2), "scan_ms_per_batch": round(1e3 * scan / batches, 2)}
                if args.hits_out or args.compare:
                    hits[f"{unit}/{mode}/{size}"] = [hit_keys(h) for h in batched(
                        searcher, q_start, q_end, texts, params, size, len(texts))]
    flat_search.scores_into = clock.product
    if args.scan_rows:
        xb = flat_search.flat_vectors(searcher.index.faiss)
        if xb is None:
            raise SystemExit(f"--scan-rows: {args.index} is not a flat index")
        result["scan_runs"] = args.scan_runs
        result["scan_products"] = scan_products(xb, np.concatenate([q_start, q_end]), args.scan_rows, args.scan_runs)
    result["load_average"] = {"before": [round(x, 2) for x in load_before],
                              "after": [round(x, 2) for x in os.getloadavg()]}
    if hits:
        result["batch_vs_alone"] = {key: against_alone(hits[key.rsplit("/", 1)[0] + "/1"], rows)
                                    for key, rows in hits.items() if key.rsplit("/", 1)[0] + "/1" in hits}
    if args.hits_out:
        write_json_atomic(args.hits_out, hits)
    if args.compare:
        result["identical_to"] = {"file": args.compare, "counts": compare(
            json.loads(Path(args.compare).read_text(encoding="utf-8")), hits)}
    return result


def search_arguments(p: argparse.ArgumentParser, batch_sizes: list[int], modes: tuple[str, ...], repeats: int
                     ) -> None:
    """The options of a benchmark that times ``search_vectors`` on an index's pre-encoded questions by batch size,
    unit and mode, and writes or compares their hits (this one's and ``batch_overheads.py``'s)."""
    p.add_argument("--index", default=str(ROOT / "work" / "demo-index"), help="index directory")
    p.add_argument("--model", default=None, help="model directory or 'default' (default: the index's)")
    p.add_argument("--questions", default=str(ROOT / "runs" / "validation.json.gz"), help="SQuAD-format questions")
    p.add_argument("--n-questions", type=int, default=256, help="questions whose hits --hits-out/--compare cover")
    p.add_argument("--timed-questions", type=int, default=64, help="questions searched in each timed round")
    p.add_argument("--batch-sizes", type=int, nargs="+", default=batch_sizes)
    p.add_argument("--units", nargs="+", default=list(UNITS), choices=UNITS)
    p.add_argument("--modes", nargs="+", default=list(modes), choices=MODES)
    p.add_argument("--top-k", type=int, default=10)
    p.add_argument("--repeats", type=int, default=repeats, help="timed rounds of each; the fastest is kept")
    p.add_argument("--hits-out", default=None, help="write every question's hits here (JSON), for --compare")
    p.add_argument("--compare", default=None, help="a --hits-out file of an earlier run: count identical hits")


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    search_arguments(p, [1, 2, 4, 8, 16], ("hybrid", "dense"), 3)
    p.add_argument("--scan-rows", type=int, nargs="*", default=[], help="also time the scan's products at these rows")
    p.add_argument("--scan-runs", type=int, default=15, help="timed runs of each product (medians)")
    p.add_argument("--out", required=True, help="JSON results")
    args = p.parse_args(argv)
    if not Path(args.questions).is_file():
        p.error(f"--questions {args.questions}: no such file; give a SQuAD-format file of questions")
    if args.compare and not Path(args.compare).is_file():
        p.error(f"--compare {args.compare}: no such file; write one with --hits-out first")
    result = run(args)
    write_json_atomic(args.out, result)
    print(f"{'unit/mode':<16} " + " ".join(f"{'b=' + str(b):>14}" for b in args.batch_sizes)
          + "   (ms per batch / of it the scan)")
    for unit in args.units:
        for mode in args.modes:
            cells = [result["runs"][f"{unit}/{mode}/{b}"] for b in args.batch_sizes]
            print(f"{unit + '/' + mode:<16} " + " ".join(
                f"{c['ms_per_batch']:>7.1f} /{c['scan_ms_per_batch']:>5.1f}" for c in cells))
    for r, ways in result.get("scan_products", {}).items():
        print(f"scan {r:>3} rows: " + "  ".join(f"{name} {w['median_ms']:.1f} ms ({w['summation']})"
                                                 for name, w in ways.items()))
    if "identical_to" in result:
        print(json.dumps(result["identical_to"]["counts"]))
    for key, c in result.get("batch_vs_alone", {}).items():
        if not key.endswith("/1"):
            print(f"{key}: {c['same_spans']}/{c['questions']} the spans searched alone, {c['identical']} the score bits "
                  f"too (largest difference {c['max_score_diff']:.2g})")
    print(f"load average before {result['load_average']['before']} after {result['load_average']['after']}")
    return result


if __name__ == "__main__":
    main()
