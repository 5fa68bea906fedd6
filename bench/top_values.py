"""A round's ranking of held scores (``flat_search.top_values``): the kept blocks gathered whole against column by column.

    python bench/top_values.py --index work/demo-index --model default --questions runs/validation.json.gz \
        --out bench/results/top_values.json

The scores are a batch's real ones: the held float32 product of ``--batch-size`` validation questions (start and
end rows) over the index. Each case is a round the search asks for (rows, m = k + 1, the blocks' maxima found once,
as ``FlatScan.top`` ranks), timed with ``GATHER_WIDTH`` at its default (``whole``) and out of reach (``columns``),
in turn within each repeat (medians and their ratio). The two must give the same values.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch: spin-waiting OpenMP crawls on shared CPUs
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import argparse  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
from machine import cpu_name  # noqa: E402  (bench/ is on sys.path when run as a script)

from spanseek.core import flat_search  # noqa: E402
from spanseek.core.flat_search import FlatScan, block_maxima, block_width, top_values  # noqa: E402
from spanseek.core.io import load_squad, squad_questions, write_json_atomic  # noqa: E402
from spanseek.core.loading import open_searcher  # noqa: E402

ARMS = ("columns", "whole")
# (share of the batch's rows, m): the first rounds of phrase (k 32), doc (80) and hybrid passage (160) searches
# over every row, and deeper rounds over the rows that go on (on the demo index 85% and 29% of a doc search's)
CASES = ((1.0, 33), (1.0, 81), (1.0, 161), (0.85, 321), (0.29, 1281))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--index", required=True)
    ap.add_argument("--model", default="default")
    ap.add_argument("--questions", required=True, help="SQuAD-format file")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=15, help="rounds of every case, the arms in turn")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    searcher = open_searcher(args.index, args.model, precision="fp32")
    assert searcher.encoder is not None
    questions = [q.question for q in squad_questions(load_squad(args.questions))][: args.batch_size]
    q_start, q_end = searcher.encoder.encode(questions)
    scan = FlatScan(searcher.index.faiss, np.concatenate([q_start, q_end]), None)
    held = scan.held()
    assert held is not None, "the batch's scores do not fit the scan's byte budget"
    scores = torch.from_numpy(held)
    maxima = block_maxima(scores)
    n_rows, n = scores.shape
    default = flat_search.GATHER_WIDTH
    cases = {}
    for share, m in CASES:
        m = min(m, n)
        rows = None if share == 1.0 else torch.arange(max(1, round(share * n_rows)))
        times: dict = {a: [] for a in ARMS}
        values = {}
        for r in range(args.repeats):
            for a in ARMS if r % 2 == 0 else ARMS[::-1]:
                flat_search.GATHER_WIDTH = default if a == "whole" else 1 << 30
                t0 = time.perf_counter()
                values[a] = top_values(scores, m, rows, maxima)[0]
                times[a].append(1e3 * (time.perf_counter() - t0))
        flat_search.GATHER_WIDTH = default
        med = {a: statistics.median(times[a]) for a in ARMS}
        cases[f"rows={n_rows if rows is None else len(rows)} m={m}"] = {
            **{f"{a}_ms": round(med[a], 2) for a in ARMS}, "ratio": round(med["columns"] / med["whole"], 3),
            "block_width": block_width(m), "same_values": bool(torch.equal(values["columns"], values["whole"]))}
    report = {"cpu": cpu_name(), "torch_threads": torch.get_num_threads(), "tokens": n, "batch_size": args.batch_size,
              "gather_width": default, "repeats": args.repeats, "cases": cases}
    write_json_atomic(args.out, report)
    for case, v in cases.items():
        print(f"{case} (blocks of {v['block_width']}): columns {v['columns_ms']} ms, whole {v['whole_ms']} ms, "  # noqa: T201
              f"{v['ratio']}x, same values {v['same_values']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
