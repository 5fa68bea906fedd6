"""The most one question's near-copy comparisons cost (``collapse_duplicates="near"``), in question-equivalents.

    python bench/near_copies_cost.py --index work/demo-index --questions runs/validation.json.gz \
        --out runs/bench/near_copies_cost.json

Each case is a ranking whose every hit past the page's first ``top_k - 1`` is a near copy of its last kept hit (a
text with a word in 50 changed, or 3 words of a passage), so each hit is compared with every kept one, as 64 x
``top_k`` hits deep as a page left short is ranked (``core.ranking``), collapsed four times, each ranking 4 times
deeper, with one budget (``core.duplicates.NearBudget``) as a search does. The texts are the index's: its longest
passage, and its first 2,000 or 6,000 words as one document. A question-equivalent is the time of one default phrase
question (top_k 10) in a batch of 64 validation questions (a file of fewer than 128 questions: its second half, after
its first half warmed the searcher; ``timed_questions`` in the JSON), measured before and after each case in the same
process (their mean).
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch: spin-waiting OpenMP crawls on shared CPUs
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import argparse  # noqa: E402
import random  # noqa: E402
import time  # noqa: E402
from types import SimpleNamespace  # noqa: E402

import numpy as np  # noqa: E402
from machine import cpu_name  # noqa: E402  (bench/ is on sys.path when run as a script)

from spanseek.core.duplicates import NEAR_WORK, Copies, NearBudget, collapse_near, hash_passages  # noqa: E402
from spanseek.core.io import load_squad, squad_questions, write_json_atomic  # noqa: E402
from spanseek.core.loading import open_searcher  # noqa: E402
from spanseek.core.params import Hit, SearchParams  # noqa: E402

CASES = (("passage", 10), ("passage", 100), ("doc-2000", 10), ("doc-2000", 100), ("doc-6000", 10))


def edited(words: list[str], n: int, rng: random.Random) -> str:
    out = list(words)
    for _ in range(n):
        out[rng.randrange(len(out))] = f"edit{rng.randrange(10**6)}"
    return " ".join(out)


def ranking(texts: list[str], kind: str, k: int, rng: random.Random) -> list[str]:
    """``k - 1`` distinct passages, then the case's text, then 64 x ``k`` near copies of it."""
    if kind == "passage":
        text = max(texts, key=lambda t: len(t.split())).split()
        changes = 3
    else:
        text = " ".join(texts).split()[: int(kind.split("-")[1])]
        changes = len(text) // 50
    return texts[: k - 1] + [" ".join(text)] + [edited(text, changes, rng) for _ in range(64 * k - k)]


def timing_batches(questions: list[str]) -> tuple[list[str], list[str]]:
    """The questions that warm the searcher and those timed for a question-equivalent: 64 of each, or each half of
    fewer than 128 (one question: itself twice)."""
    if not questions:
        raise ValueError("--questions: the file holds no questions")
    half = min(64, max(1, len(questions) // 2))
    return questions[:half], questions[half:2 * half] or questions[:half]


def collapsed_time(ranked: list[str], k: int) -> tuple[float, int]:
    """Seconds to collapse ``ranked`` at a page of ``k`` over the four rankings of a question, and the work spent."""
    index = SimpleNamespace(passages=[{"text": t} for t in ranked], docs=[{"id": str(i)} for i in range(len(ranked))])
    copies = Copies(index, hash_passages(index.passages), np.arange(len(ranked)))  # type: ignore[arg-type]
    selection = SimpleNamespace(passages=None, docs=None)
    budget = NearBudget.for_page(k)
    t0 = time.perf_counter()
    for depth in (k, 4 * k, 16 * k, 64 * k):
        hits = [Hit(text="x", score=-i, start=0, end=1, passage_id=i, passage="", doc_id=str(i), title="")
                for i in range(depth)]
        collapse_near(hits, k, "passage", copies, selection, budget)  # type: ignore[arg-type]
    return time.perf_counter() - t0, NEAR_WORK * k - budget.left


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--index", required=True)
    ap.add_argument("--model", default=None, help="default: the one that built the index")
    ap.add_argument("--questions", required=True, help="SQuAD-format questions (the phrase batch's)")
    ap.add_argument("--top-k", default="10,100", help="the pages' top_k, comma-separated (default: %(default)s)")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    pages = {int(k) for k in args.top_k.split(",")}
    try:
        warm, timed = timing_batches([q.question for q in squad_questions(load_squad(args.questions))])
    except ValueError as e:
        ap.error(str(e))
    if len(timed) < 64:
        print(f"note: --questions holds {len(warm) + len(timed)} questions: a question-equivalent is timed in a batch "
              f"of {len(timed)}, not 64", flush=True)  # noqa: T201
    searcher = open_searcher(args.index, args.model, device="cpu")
    searcher.search(warm, SearchParams("phrase", 10))  # warm

    def question_equivalent() -> float:
        t0 = time.perf_counter()
        searcher.search(timed, SearchParams("phrase", 10))
        return (time.perf_counter() - t0) / len(timed)

    texts = [p["text"] for p in searcher.index.passages]
    cases = []
    for kind, k in (case for case in CASES if case[1] in pages):
        ranked = ranking(texts, kind, k, random.Random(0))
        before = question_equivalent()
        seconds, work = collapsed_time(ranked, k)
        qeq = (before + question_equivalent()) / 2
        cases.append({"case": kind, "top_k": k, "hits": 64 * k, "seconds": round(seconds, 3), "work": work,
                      "question_equivalent_ms": round(qeq * 1e3, 2), "question_equivalents": round(seconds / qeq, 1),
                      "per_page_hit": round(seconds / qeq / k, 3)})
        print(cases[-1], flush=True)  # noqa: T201
    write_json_atomic(args.out, {"cpu": cpu_name(), "near_work": NEAR_WORK, "timed_questions": len(timed),
                                 "cases": cases})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
