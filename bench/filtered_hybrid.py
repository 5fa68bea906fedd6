"""Whether a filter selects without re-scoring: phrase, passage and document searches of held-out questions in each
mode (dense, lexical, hybrid), each filtered to two documents that do not hold its answer and to the one that does,
against the same search unfiltered.

    python bench/filtered_hybrid.py --index work/demo-index --questions runs/validation.json.gz --out OUT.json

For each mode and unit (``--modes``, ``--units``) it reports the mean confidence of the first hit under each
filter (and unfiltered); how many filtered lists begin with the unfiltered list (every document, or the first
``--passage-depth`` passages or phrases, a phrase compared by its span) restricted to the filter, as far as it goes,
and the largest difference between a filtered hit's score and the same unit's unfiltered score (the filtered search
ranked as deep as the unfiltered one: a hybrid score depends on the depth of the list it is fused in); and the CPU
time of a batch of 64 encoded questions with and without a filter (CPU time: the machines are shared) and their
ratio. A document's questions are those of its article (the corpus is the SQuAD articles of the questions).
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import argparse  # noqa: E402
import dataclasses  # noqa: E402
import gzip  # noqa: E402
import json  # noqa: E402
import random  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

from spanseek.core.filters import SearchFilter  # noqa: E402
from spanseek.core.io import write_json_atomic  # noqa: E402
from spanseek.core.loading import open_searcher  # noqa: E402
from spanseek.core.params import SearchParams  # noqa: E402

BATCH = 64


def questions_of(path: str, titles: dict[str, str], n: int, seed: int) -> list[tuple[str, str]]:
    """``n`` (question, its document's id) pairs, sampled with ``seed``."""
    with (gzip.open(path, "rt") if path.endswith(".gz") else open(path)) as f:
        data = json.load(f)["data"]
    pairs = [(qa["question"], titles[a["title"]]) for a in data if a["title"] in titles
             for p in a["paragraphs"] for qa in p["qas"]]
    return random.Random(seed).sample(pairs, min(n, len(pairs)))


def key(hit, unit: str):
    if unit == "phrase":
        return hit.passage_id, hit.start, hit.end
    return hit.passage_id if unit == "passage" else hit.doc_id


def run(args: argparse.Namespace) -> dict:
    searcher = open_searcher(args.index, args.model, device="cpu", search_device="cpu")
    docs = [d["id"] for d in searcher.index.docs]
    titles = {d["title"]: d["id"] for d in searcher.index.docs}
    asked = questions_of(args.questions, titles, args.n, args.seed)
    rng = random.Random(args.seed)
    texts = [q for q, _ in asked]
    filters = {"two without the answer": [rng.sample([d for d in docs if d != gold], 2) for _, gold in asked],
               "the answer's": [[gold] for _, gold in asked]}
    out: dict = {"index": args.index, "questions": len(asked)}
    for mode, unit in ((m, u) for m in args.modes.split(",") for u in args.units.split(",")):
        deep = len(docs) if unit == "doc" else args.passage_depth
        base = SearchParams(unit=unit, mode=mode, top_k=args.top_k)
        full = [h for i in range(0, len(texts), BATCH)
                for h in searcher.search(texts[i:i + BATCH], dataclasses.replace(base, top_k=deep))]
        shallow = searcher.search(texts, base)
        row: dict = {"unfiltered first-hit confidence": statistics.fmean(h[0].confidence or 0.0
                                                                           for h in shallow if h)}
        for name, ids in filters.items():
            got = [searcher.search([q], SearchParams(unit=unit, mode=mode, top_k=args.top_k,
                                                       filter=SearchFilter(doc_ids=tuple(d))))[0]
                   for q, d in zip(texts, ids, strict=True)]
            ranked = [searcher.search([q], SearchParams(unit=unit, mode=mode, top_k=args.top_k,
                                                          rank_window=max(deep, args.top_k),
                                                          filter=SearchFilter(doc_ids=tuple(d))))[0]
                      for q, d in zip(texts, ids, strict=True)]  # as deep as the unfiltered list
            same, diff = 0, 0.0
            for f, u, d in zip(ranked, full, ids, strict=True):
                allowed = [h for h in u if h.doc_id in d][: args.top_k]  # a prefix of the whole list's
                same += [key(h, unit) for h in f][: len(allowed)] == [key(h, unit) for h in allowed]
                score = {key(h, unit): h.score for h in u}
                diff = max([diff] + [abs(h.score - score[key(h, unit)]) for h in f if key(h, unit) in score])
            row[name] = {"first-hit confidence": statistics.fmean(h[0].confidence or 0.0 for h in got if h),
                         "confidence >= 0.5": statistics.fmean((h[0].confidence or 0.0) >= 0.5
                                                               for h in got if h),
                         "order = unfiltered restricted": f"{same}/{len(got)}", "max |score diff|": round(diff, 4)}
        flt = [SearchParams(unit=unit, mode=mode, top_k=args.top_k, filter=SearchFilter(doc_ids=tuple(d)))
               for d in filters["two without the answer"][:1]][0]
        batch = texts[:BATCH]
        q_start, q_end = searcher.encoder.encode(batch)
        took: dict[str, list[float]] = {"no filter": [], "two-document filter": []}
        for i in range(args.repeat + 1):  # alternately, the first round a warm-up
            for name, params in (("no filter", base), ("two-document filter", flt)):
                t = time.process_time()
                searcher.search_vectors(q_start, q_end, params, questions=batch)
                if i:
                    took[name].append(time.process_time() - t)
        times = {name: round(statistics.median(t) * 1000, 1) for name, t in took.items()}
        row["batch CPU ms (64 questions, median)"] = {**times, "ratio": round(times["two-document filter"]
                                                                                / times["no filter"], 2)}
        out[f"{mode} {unit}"] = row
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--index", default="work/demo-index")
    ap.add_argument("--model", default=None, help="the phrase model (default: the index's)")
    ap.add_argument("--questions", default="runs/validation.json.gz")
    ap.add_argument("--n", type=int, default=300, help="questions sampled")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--top-k", type=int, default=5)
    ap.add_argument("--passage-depth", type=int, default=100, help="the unfiltered passage list compared against")
    ap.add_argument("--modes", default="dense,lexical,hybrid", help="the modes searched, comma-separated")
    ap.add_argument("--units", default="phrase,passage,doc", help="the units searched, comma-separated")
    ap.add_argument("--repeat", type=int, default=5, help="timed batches per setting")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    out = run(args)
    if args.out:
        write_json_atomic(args.out, out)
    json.dump(out, os.sys.stdout, indent=1)


if __name__ == "__main__":
    main()
