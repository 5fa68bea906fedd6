"""Confidence of read hits for questions the index cannot answer, against questions it can.

    python bench/reading_unanswerable.py --index work/demo-index --questions runs/validation.json.gz \
        --train ../shared/data/squad-v1.1-train.json.gz --limit 500 \
        --readings core/models/reader/reading.json NEW/reading.json --out bench/results/reading_unanswerable.json

Each fit of reading (``--readings``, each a ``reading.json`` of the same ``--reader``; every pair of question and
passage is read once and scored by each fit) is measured on the first hit of each unit (phrase, passage, doc), read
at the fit's default depth, as a search with ``read`` serves it:

- ``answerable``: a fixed sample of --limit questions of --questions (every answer in --index), at prior 0: the
  first-hit expected calibration error (10 bins) and mean confidence;
- ``half_removed``: the same questions over --index without every other article of --questions (an exact copy of
  the rest, BM25 rebuilt, ``trainer.calibrate.without_documents``), so that about half have no answer in the index, at
  ``unanswerable_prior`` 0 and 0.5: ECE over all of them (a question without its article is wrong whatever is read),
  the AUROC of the first hit's confidence for answerable against not, and the mean confidence of either set;
- ``out_of_corpus``: --out-of-corpus questions of other articles of --train (none of --questions'), a fixed
  sample, and ``NONSENSE``, over the whole --index at prior 0 and 0.5: their mean first-hit confidence (every hit
  wrong).

The same measures without ``read`` (the phrase model's calibrator alone) are reported under ``unread`` (not with
--no-unread).
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import argparse  # noqa: E402
import json  # noqa: E402
import random  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
from machine import cpu_name  # noqa: E402  (bench/ is on sys.path when run as a script)
from reading import right_hit  # noqa: E402
from sklearn.metrics import roc_auc_score  # noqa: E402

from spanseek.core import reading as reading_module  # noqa: E402
from spanseek.core.evaluate import sample_questions  # noqa: E402
from spanseek.core.io import Question, load_squad, squad_questions, write_json_atomic  # noqa: E402
from spanseek.core.loading import open_searcher  # noqa: E402
from spanseek.core.metrics import calibration_error as ece  # noqa: E402
from spanseek.core.params import UNITS, SearchParams  # noqa: E402
from spanseek.core.search import Searcher  # noqa: E402
from spanseek.trainer.calibrate import without_documents  # noqa: E402

NONSENSE = (
    "what is the airspeed velocity of an unladen swallow", "how many angels can dance on the head of a pin",
    "what colour is the number seven", "who won the world cup of chess boxing on mars",
    "why does the moon taste like cheese", "what is the name of the dog that invented electricity",
    "how tall is the smell of rain", "when did the purple elephant sign the treaty of nowhere",
    "what is the square root of a banana", "who is the king of the underwater pyramids of ohio",
    "xqzvbnm kplrt wqyz", "asdf qwer zxcv", "???", "the", "a b c", "lorem ipsum dolor sit amet",
    "what did the toaster say to the volcano", "how many wheels does a cloud have",
    "which planet do unicorns vote on", "what is the phone number of the wind",
)


def first_hits(searcher: Searcher, questions: list[Question], params: SearchParams, batch: int
               ) -> tuple[np.ndarray, np.ndarray]:
    """Each question's first hit: its confidence (0 without a hit) and whether it is right."""
    conf, right = [], []
    for b in range(0, len(questions), batch):
        part = questions[b:b + batch]
        for q, hits in zip(part, searcher.search([q.question for q in part], params), strict=True):
            h = hits[0] if hits else None
            conf.append(h.confidence or 0.0 if h is not None else 0.0)
            right.append(float(h is not None and bool(q.answers) and right_hit(params.unit, h, q)))
    return np.asarray(conf), np.asarray(right)


def measure(searchers: dict[str, Searcher], present: list[Question], removed: set[str], outside: list[Question],
            read: bool, batch: int) -> dict:
    """The three measures of the module docstring for one setting (``read`` or not), per unit."""
    out: dict = {"answerable": {}, "half_removed": {}, "out_of_corpus": {}}
    for unit in UNITS:
        conf, right = first_hits(searchers["whole"], present, SearchParams(unit=unit, top_k=1, read=read), batch)
        out["answerable"][unit] = {"ece": round(ece(conf, right), 4), "mean_confidence": round(float(conf.mean()), 4),
                                   "acc@1": round(100 * float(right.mean()), 2)}
        has = np.asarray([q.title not in removed for q in present])
        for prior in (0.0, 0.5):
            params = SearchParams(unit=unit, top_k=1, read=read, unanswerable_prior=prior)
            conf, right = first_hits(searchers["half"], present, params, batch)
            right = right * has
            out["half_removed"][f"{unit}@{prior:g}"] = {
                "ece": round(ece(conf, right), 4), "auroc_answerable": round(float(roc_auc_score(has, conf)), 4),
                "mean_confidence_answerable": round(float(conf[has].mean()), 4),
                "mean_confidence_unanswerable": round(float(conf[~has].mean()), 4)}
            conf, _ = first_hits(searchers["whole"], outside, params, batch)
            n = len(outside) - len(NONSENSE)
            out["out_of_corpus"][f"{unit}@{prior:g}"] = {
                "mean_confidence": round(float(conf.mean()), 4),
                "other_articles": round(float(conf[:n].mean()), 4), "nonsense": round(float(conf[n:].mean()), 4),
                "max": round(float(conf.max()), 4)}
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--index", required=True, help="index of the articles of --questions")
    ap.add_argument("--questions", required=True, help="SQuAD-format file whose paragraphs the index holds")
    ap.add_argument("--train", required=True, help="SQuAD-format file whose other articles give out-of-corpus questions")
    ap.add_argument("--model", default="default")
    ap.add_argument("--reader", default="default")
    ap.add_argument("--readings", nargs="*", default=[], metavar="FILE",
                    help="reading.json files of --reader to measure (default: the reader's own)")
    ap.add_argument("--limit", type=int, default=500, help="a fixed random sample of N answerable questions")
    ap.add_argument("--out-of-corpus", type=int, default=50, help="questions of other articles of --train")
    ap.add_argument("--no-unread", action="store_true", help="measure searches with read alone")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()

    reading_module.RECENT_READS = 1 << 20  # every pair is read once, whichever fit scores it
    searcher = open_searcher(args.index, args.model, reader=args.reader)
    assert searcher.reading is not None
    val = load_squad(args.questions)
    present = sample_questions([q for q in squad_questions(val) if q.answers], args.limit)
    titles = sorted({a["title"] for a in val})
    removed = set(titles[1::2])
    drop = [d for d, doc in enumerate(searcher.index.docs) if doc["title"] in removed]
    half = without_documents(searcher.index, drop)
    searchers = {"whole": searcher,
                 "half": Searcher(half, searcher.encoder, calibrator=searcher.calibrator,
                                  reading=searcher.reading.over(Searcher(half).hits))}
    others = [q for q in squad_questions(load_squad(args.train)) if q.title not in set(titles) and q.answers]
    outside = random.Random(0).sample(others, args.out_of_corpus)
    outside += [Question(f"nonsense-{i}", t, (), (), "", "", -1, -1) for i, t in enumerate(NONSENSE)]
    t0 = time.time()
    result: dict = {"cpu": cpu_name(), "index": args.index, "questions": len(present), "removed_articles": len(removed),
                    "articles": len(titles), "out_of_corpus": {"other_articles": args.out_of_corpus,
                                                               "nonsense": len(NONSENSE)},
                    "read": {}}
    if not args.no_unread:
        result["unread"] = measure(searchers, present, removed, outside, False, args.batch_size)
    for path in args.readings or [None]:
        if path is not None:
            searcher.reading.reading = searchers["half"].reading.reading = reading_module.Reading.load(path)
        name = path or "reader"
        result["read"][name] = {"read_passages": searcher.reading.reading.read_passages,
                                **measure(searchers, present, removed, outside, True, args.batch_size)}
        print(name, json.dumps(result["read"][name], indent=1))  # noqa: T201
    result["seconds"] = round(time.time() - t0, 1)
    write_json_atomic(args.out, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
