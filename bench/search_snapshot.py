"""Every unit x mode's hits for a question file, written to JSON and compared with an earlier snapshot.

    python bench/search_snapshot.py --index runs/val-index --model default \
        --questions runs/validation.json.gz --out runs/snapshot-before.json
    python bench/search_snapshot.py ... --out runs/snapshot-after.json --compare runs/snapshot-before.json

A refactoring of the search path keeps behaviour when the two snapshots agree: per question, unit and mode, the
same hits (passage, character span, text) with the same scores and confidences (to ``SCORE_TOLERANCE``). Copies
of one passage (a corpus may hold the same text twice) tie exactly, and float rounding may put either first: a
question whose only change is such a swap is counted apart (``tied_duplicates_reordered``), not as differing. The question vectors are
encoded once and shared by every search, so the snapshot isolates the search stage from encoder noise. Phrases are
also searched with ``merge_answers`` (``phrase+merged/MODE``).
"""

from __future__ import annotations

import os

os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import argparse  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

from spanseek.core.io import load_squad, squad_questions, write_json_atomic  # noqa: E402
from spanseek.core.loading import open_searcher  # noqa: E402
from spanseek.core.params import MODES, UNITS, SearchParams  # noqa: E402


def snapshot(index: str, model: str, questions_file: str, top_k: int, limit: int | None,
             batch_size: int = 64) -> dict[str, list]:
    searcher = open_searcher(index, model, precision="fp32")
    questions = [q.question for q in squad_questions(load_squad(questions_file))][:limit]
    assert searcher.encoder is not None
    q_start, q_end = searcher.encoder.encode(questions)
    out: dict[str, list] = {}
    runs = [(unit, mode, False) for unit in UNITS for mode in MODES] + [("phrase", mode, True) for mode in MODES]
    for unit, mode, merge in runs:
        params = SearchParams(unit=unit, mode=mode, top_k=top_k, merge_answers=merge)
        rows = []
        for i in range(0, len(questions), batch_size):
            j = i + batch_size
            hits = searcher.search_vectors(q_start[i:j], q_end[i:j], params, None, questions[i:j])
            rows += [[[h.passage_id, h.start, h.end, h.text, round(h.score, 4),
                       None if h.confidence is None else round(h.confidence, 4)] for h in q] for q in hits]
        out[f"{unit}{'+merged' if merge else ''}/{mode}"] = rows
    return out


SCORE_TOLERANCE = 2e-4  # scores are kept to 4 decimals; float32 products summed by another BLAS move them ~1e-5


def compare(now: dict[str, list], before: dict[str, list]) -> dict[str, dict[str, int]]:
    """Per unit/mode: questions compared, how many differ (hits, order, span, or a score or confidence beyond
    SCORE_TOLERANCE), and how many give the same answers in another order only among tied copies (the same text at
    the same score from duplicated passages, whose order float rounding decides), or the same span of another copy
    of its passage where only one copy makes the page."""

    def close(x: list, y: list) -> bool:
        return abs(x[4] - y[4]) <= SCORE_TOLERANCE and (x[5] is None) == (y[5] is None) and (
            x[5] is None or abs(x[5] - y[5]) <= SCORE_TOLERANCE)

    report = {}
    for key, rows in now.items():
        old = before.get(key, [])
        differ = tied = 0
        for a, b in zip(rows, old, strict=False):
            if len(a) != len(b) or not all(close(x, y) for x, y in zip(a, b, strict=True)):
                differ += 1
            elif any(x[:4] != y[:4] for x, y in zip(a, b, strict=True)):
                same_answers = ([x[3] for x in a] == [y[3] for y in b]
                                and (sorted(x[:4] for x in a) == sorted(y[:4] for y in b)  # copies swapped
                                     or [x[1:4] for x in a] == [y[1:4] for y in b]))  # one copy for the other
                tied += same_answers
                differ += not same_answers
        report[key] = {"questions": len(rows), "compared": min(len(rows), len(old)), "differ": differ,
                       "tied_duplicates_reordered": tied}
    return report


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--index", required=True)
    ap.add_argument("--model", default="default")
    ap.add_argument("--questions", required=True, help="SQuAD-format file")
    ap.add_argument("--top-k", type=int, default=10)
    ap.add_argument("--limit", type=int, default=None)
    ap.add_argument("--batch-size", type=int, default=64,
                    help="questions searched together (small batches take the paths of single requests)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--compare", default=None, help="an earlier snapshot: report the questions whose hits differ")
    args = ap.parse_args()
    now = snapshot(args.index, args.model, args.questions, args.top_k, args.limit, args.batch_size)
    write_json_atomic(args.out, now)
    if args.compare:
        report = compare(now, json.loads(Path(args.compare).read_text()))
        json.dump(report, sys.stdout, indent=2)
        return 1 if any(r["differ"] or r["compared"] != r["questions"] for r in report.values()) else 0
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
