"""The lexical (BM25) leg of hybrid search at 100k and 1M passages: CPU time a batch of real questions, three ways:
over every passage ((B, P) arrays, as search once did: ``core.lexical_reference``), from every match of the
questions' postings added up (``Matches``, as search did next), and pruned (``Postings``, MaxScore: what search
does now).

    python bench/lexical_scale.py --train /work/shared/data/squad-v1.1-train.json.gz \\
        --questions runs/validation.json.gz --sizes 100000,1000000 --workdir work/lexical-scale \\
        --index work/demo-index --out bench/results/lexical_scale.json

No corpus of a million passages is at hand, so the index of N passages replicates the SQuAD train paragraphs
(``--train``, each after its article's title; tokenised once): replica r of a paragraph is a passage of its own, in
the replica of its article (a document of its own), its terms the paragraph's and 1 to 5 copies of the mark "r<r>"
(r mod 5 + 1), so that lengths, and so BM25 scores, differ between replicas. Each size's lexical index is built with
``LexicalIndex.of_terms`` once and kept under ``--workdir`` (a rerun loads it).

For a batch of ``--batch`` validation questions (``--questions``), each stage is timed in CPU seconds
(``time.process_time``, the least of ``--repeats`` rounds), each way: the BM25 scores (``scores``: bm25s'
``get_scores`` per question into a (B, P) array; ``matches``: the questions' postings summed; ``pruned``: the
postings found, nothing summed yet), the lexical leg's units as hybrid search takes them (the best 20 passages; the
best 5 documents; the BM25 scores of 25 candidate documents, as fusion reads those the dense leg brings: here the
same random ones for every question), and the same under a filter that allows a tenth of the documents
(``filtered``). Each way's results are checked equal (the scores to the bit) before anything is timed. ``--index
DIR``: a built index's lexical part too, with its documents (the demo index).
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from machine import cpu_name  # (bench/ is on sys.path when run as a script)

from spanseek.core.fusion import FUSION_DEPTH, LexicalFusion
from spanseek.core.io import write_json_atomic
from spanseek.core.lexical import LEXICAL_DIR, LexicalIndex, passage_text, tokenize
from spanseek.core.lexical_reference import (
    dense_lexical_units,
    dense_scores,
    dense_unit_scores,
    dense_within,
)
from spanseek.core.postings import Matches, Postings, matched_units, scores_of, top_found

CANDIDATES = 25  # documents a question's dense leg brings to hybrid fusion, whose BM25 scores fusion reads


def replicated(train: Path, n: int) -> tuple[list[list[str]], np.ndarray]:
    """The terms of ``n`` passages, the train paragraphs replicated (module docstring; each paragraph tokenised once,
    its replicas' terms those plus their mark), and each one's document (a replica of an article)."""
    data = json.loads(gzip.open(train, "rt", encoding="utf-8").read())["data"]
    paragraphs = [(a, passage_text(article["title"], p["context"]))
                  for a, article in enumerate(data) for p in article["paragraphs"]]
    terms = tokenize([text for _, text in paragraphs])
    marks = tokenize([f"r{r}" for r in range(n // len(paragraphs) + 1)])
    out, doc_of = [], np.zeros(n, np.int64)
    for i in range(n):
        replica, at = divmod(i, len(paragraphs))
        out.append(terms[at] + marks[replica] * (replica % 5 + 1))
        doc_of[i] = replica * len(data) + paragraphs[at][0]
    return out, doc_of


def lexical_index(workdir: Path, train: Path, n: int) -> LexicalIndex:
    """The lexical index of ``n`` replicated passages, built once under ``workdir``."""
    where = workdir / f"lexical-{n}"
    if not (where / "spanseek.json").exists():
        started = time.perf_counter()
        LexicalIndex.of_terms(replicated(train, n)[0]).save(where)
        print(f"built {n:,} passages in {time.perf_counter() - started:.0f} s")  # noqa: T201
    return LexicalIndex.load(where)


def least(run: Callable[[], Any], repeats: int) -> tuple[float, Any]:
    """The least CPU seconds of ``repeats`` runs, and the last run's result."""
    best, out = float("inf"), None
    for _ in range(repeats):
        start = time.process_time()
        out = run()
        best = min(best, time.process_time() - start)
    return best, out


def same(a: list[tuple[np.ndarray, ...]], b: list[tuple[np.ndarray, ...]]) -> bool:
    return [[x.tolist() for x in row] for row in a] == [[x.tolist() for x in row] for row in b]


def measure(lexical: LexicalIndex, questions: list[str], doc_of: np.ndarray, repeats: int) -> dict[str, Any]:
    """Each stage's CPU seconds for the batch, three ways (module docstring): over the (B, P) array, from every
    match, and pruned."""
    terms = lexical.tokenize(questions)
    n_docs = int(doc_of.max()) + 1
    fusion = LexicalFusion(lexical, None, None, {"passage": np.arange(len(doc_of)), "doc": doc_of},  # type: ignore
                           None)
    allowed = np.zeros(n_docs, bool)
    allowed[np.random.default_rng(0).choice(n_docs, n_docs // 10, replace=False)] = True
    allowed = allowed[doc_of]
    n_passage, n_doc = FUSION_DEPTH["passage"], FUSION_DEPTH["doc"]
    candidates = np.random.default_rng(1).choice(n_docs, min(CANDIDATES, n_docs), replace=False)

    def dense_units(scores: np.ndarray) -> tuple[Any, Any, Any]:
        return (dense_lexical_units(scores, np.arange(len(doc_of)), True, n_passage),
                dense_lexical_units(scores, doc_of, False, n_doc),
                [row[candidates] for row in dense_unit_scores(scores, doc_of, n_docs)])

    def units(matches: Matches) -> tuple[Any, Any, Any]:
        docs = matched_units(matches, doc_of)  # (what fusion read a candidate document's BM25 score from)
        return (top_found(matched_units(matches), n_passage), top_found(docs, n_doc),
                [scores_of(d, best, candidates) for d, best, _ in docs])

    def pruned_units(postings: Postings) -> tuple[Any, Any, Any]:
        return (postings.top_units(n_passage), postings.top_units(n_doc, doc_of),
                [fusion.unit_scores(postings, b, "doc", candidates) for b in range(len(postings))])

    fusion.unit_runs("doc")  # (made once an index)
    lexical.term_bounds  # noqa: B018  (likewise)
    out: dict[str, Any] = {}
    t_scores, dense = least(lambda: dense_scores(lexical, terms), repeats)
    t_matches, matches = least(lambda: lexical.matches(questions, terms), repeats)
    t_postings, postings = least(lambda: lexical.postings(questions, terms), repeats)
    assert matches.dense().view(np.uint32).tolist() == dense.view(np.uint32).tolist(), "scores differ"
    out["scores"] = {"dense": t_scores, "matches": t_matches, "pruned": t_postings}
    for name, dense_in, matches_in, postings_in in (
            ("unfiltered", lambda: dense, lambda: matches, lambda: postings),
            ("filtered", lambda: dense_within(dense, allowed), lambda: matches.within(allowed),
             lambda: postings.within(allowed))):
        t_dense, (passages, docs, doc_scores) = least(lambda d=dense_in: dense_units(d()), repeats)
        t_sparse, got = least(lambda m=matches_in: units(m()), repeats)
        t_pruned, quick = least(lambda p=postings_in: pruned_units(p()), repeats)
        untied = [b for b, row in enumerate(dense_in())  # (ties at the array's cut: whichever a partition picked)
                  if n_passage >= len(row) or np.sort(row)[-n_passage] != np.sort(row)[-n_passage - 1]]
        assert same([passages[b] for b in untied], [got[0][b] for b in untied]) and same(docs, got[1])
        assert same(got[0], quick[0]) and same(got[1], quick[1]), "pruned units differ"
        for want, *others in zip(doc_scores, got[2], quick[2], strict=True):
            assert all(want.astype(np.float32).tolist() == o.tolist() for o in others), "document scores differ"
        out[name] = {"dense": t_dense, "matches": t_sparse, "pruned": t_pruned}
    out["total"] = {way: out["scores"][way] + out["unfiltered"][way] for way in ("dense", "matches", "pruned")}
    out["matched_per_question"] = float(np.diff(matches.indptr).mean())
    out["array_mb"] = dense.nbytes / 2**20
    out["matches_mb"] = (matches.passages.nbytes + matches.scores.nbytes) / 2**20
    return out


def passage_counts(text: str) -> list[int]:
    """``--sizes``: comma-separated positive passage counts; empty (``--sizes ""``) for none, measuring ``--index``
    alone. An ``argparse.ArgumentTypeError`` naming what is not a count."""
    counts = []
    for part in (s.strip() for s in text.split(",")):
        if not part:
            continue
        if not part.isdigit() or int(part) < 1:
            raise argparse.ArgumentTypeError(f"{part!r} is not a positive number of passages")
        counts.append(int(part))
    return counts


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--train", type=Path, required=True, help="SQuAD train json(.gz) whose paragraphs are replicated")
    p.add_argument("--questions", type=Path, required=True, help="SQuAD json(.gz) whose questions are searched")
    p.add_argument("--sizes", type=passage_counts, default="100000,1000000",
                   help='passages of each replicated index, comma-separated ("": none, --index alone)')
    p.add_argument("--workdir", type=Path, required=True, help="where each size's lexical index is built once")
    p.add_argument("--batch", type=int, default=64, help="questions a batch")
    p.add_argument("--repeats", type=int, default=3, help="rounds; the least CPU time of each stage is kept")
    p.add_argument("--index", type=Path, action="append", default=[],
                   help="also a built index's lexical part, its passages' documents as they are (repeatable)")
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args()
    asked = json.loads(gzip.open(args.questions, "rt", encoding="utf-8").read())["data"]
    questions = [q["question"] for a in asked for par in a["paragraphs"] for q in par["qas"]]
    questions = random.Random(0).sample(questions, args.batch)
    results = {}
    for index in args.index:
        doc_of = np.asarray([json.loads(line)["doc"] for line in (index / "passages.jsonl").open()], np.int64)
        results[str(index)] = measure(LexicalIndex.load(index / LEXICAL_DIR), questions, doc_of, args.repeats)
        print(index, json.dumps(results[str(index)]))  # noqa: T201
    if not args.sizes and not args.index:
        p.error("nothing to measure: give --sizes or --index")
    for n in args.sizes:
        lexical = lexical_index(args.workdir, args.train, n)
        results[str(n)] = measure(lexical, questions, replicated(args.train, n)[1], args.repeats)
        print(n, json.dumps(results[str(n)]))  # noqa: T201
    write_json_atomic(args.out, {"cpu": cpu_name(), "batch": args.batch, "repeats": args.repeats,
                                 "seconds": "CPU (process_time), least of the repeats, for the batch",
                                 "results": results})


if __name__ == "__main__":
    main()
