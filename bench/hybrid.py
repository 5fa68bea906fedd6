"""Hybrid retrieval: BM25 alone, dense alone and the two fusions, on one index and one question set.

Also fits the fusion weights on training questions.

    # measure (validation articles; the index is `spanseek index build` of the file's paragraphs)
    python bench/hybrid.py run --index INDEX --questions validation.json.gz --model default --out bench/results/hybrid.json
    # fit the weights on TRAINING questions over an index of their paragraphs: prints the chosen lexical weights and
    # phrase re-ranking weights, and --out writes them with the grid; the index is not changed (the shipped weights
    # are core.lexical.DEFAULT_FUSION, which a new index records; `run --weights` measures others)
    python bench/hybrid.py fit --index TRAIN_INDEX --questions train-articles.json.gz --model default \
        --out bench/results/hybrid_fit.json
    # compare indexes of the same passages (one lexical part against another, each with its recorded weights) on the
    # same questions: each one's metrics and each later one's per-question difference from the first
    python bench/hybrid.py compare --index VAL_INDEX VAL_INDEX_2 --questions validation.json.gz --model default \
        --configs hybrid_score bm25 --out bench/results/compare.json

``run`` reports, for the modes dense, lexical (BM25: bm25s with stemming and stop words over title + passage),
hybrid with reciprocal rank fusion and hybrid with score fusion: passage acc@1/5/20 and MRR@20, phrase EM@1 and
F1@1 (top phrase), doc acc@1, and phrase-search questions/s at batch 64 for dense and hybrid, timed in one run on
the same index with batches interleaved (search only, questions encoded beforehand; and end to end with encoding).
Questions are encoded once; every mode searches the same vectors. ``compare`` reports, per configuration and index,
the same metrics and, for each index after the first, its difference from the first with a 95% bootstrap interval
over articles (questions of one article move together: ``bench/paired_models.py``), the questions it gets right that
the first misses and the reverse, and McNemar's z.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from pathlib import Path

import numpy as np
from machine import cpu_name  # bench/ is on sys.path when run as a script
from paired_models import paired

from spanseek.core.evaluate import answer_scores, document_groups, sample_questions
from spanseek.core.io import Question, load_squad, squad_questions, write_json_atomic
from spanseek.core.loading import open_searcher
from spanseek.core.metrics import accuracy_at, exact_match, mrr_at, passage_has_answer, pct
from spanseek.core.params import SearchParams
from spanseek.core.rerank import RERANK_DEPTH, RERANK_FEATURES, rerank_features, rerank_scores

BATCH = 64
UNITS = ("phrase", "passage", "doc")
CONFIGS = {  # name -> the SearchParams fields that make it
    "bm25": {"mode": "lexical"},
    "dense": {"mode": "dense"},
    "hybrid_rrf": {"mode": "hybrid", "fusion": "rrf"},
    "hybrid_score": {"mode": "hybrid", "fusion": "score"},
}
PHRASE_WEIGHTS = (0.5, 1.0, 2.0, 4.0, 8.0)
UNIT_WEIGHTS = (0.25, 0.5, 1.0, 2.0, 4.0)


def search_all(searcher, texts: list[str], q_start: np.ndarray, q_end: np.ndarray, params: SearchParams) -> list:
    return [h for a in range(0, len(texts), BATCH)
            for h in searcher.search_vectors(q_start[a : a + BATCH], q_end[a : a + BATCH], params, None,
                                             texts[a : a + BATCH])]


def question_values(searcher, qs: list[Question], q_start, q_end, base: SearchParams, units=UNITS,
                    weights: dict[str, float] | None = None) -> dict[str, list[float]]:
    """Each question's phrase EM@1/F1@1 ("phrase.em@1", ...), passage acc@1/5/20 and MRR@20 and doc acc@1 under one
    configuration (``weights``: per-unit lexical weights instead of the index's, for the hybrid modes)."""
    texts = [q.question for q in qs]
    out: dict[str, list[float]] = {}

    def params(unit: str, top_k: int) -> SearchParams:
        weight = (weights or {}).get(unit) if base.mode == "hybrid" else None
        return dataclasses.replace(base, unit=unit, top_k=top_k, **({} if weight is None else {"lexical_weight": weight}))

    if "phrase" in units:
        hits = search_all(searcher, texts, q_start, q_end, params("phrase", 1))
        scores = [answer_scores(h[0].text if h else None, q.answers) for h, q in zip(hits, qs, strict=True)]
        out["phrase.em@1"], out["phrase.f1@1"] = [s[0] for s in scores], [s[1] for s in scores]
    if "passage" in units:
        hits = search_all(searcher, texts, q_start, q_end, params("passage", 20))
        ok = [[passage_has_answer(h.passage, q.answers) for h in row] for row, q in zip(hits, qs, strict=True)]
        out |= {f"passage.acc@{k}": [accuracy_at([row], k) for row in ok] for k in (1, 5, 20)}
        out["passage.mrr@20"] = [mrr_at([row], 20) for row in ok]
    if "doc" in units:
        hits = search_all(searcher, texts, q_start, q_end, params("doc", 1))
        out["doc.acc@1"] = [accuracy_at([[h.title == q.title for h in row]], 1) for row, q in zip(hits, qs, strict=True)]
    return out


def unit_metrics(searcher, qs: list[Question], q_start, q_end, base: SearchParams, units=UNITS,
                 weights: dict[str, float] | None = None) -> dict:
    """Phrase EM@1/F1@1, passage acc@1/5/20 + MRR@20 and doc acc@1 of one configuration (``question_values``, each
    the mean over the questions)."""
    out: dict = {}
    for name, values in question_values(searcher, qs, q_start, q_end, base, units, weights).items():
        unit, metric = name.split(".")
        out.setdefault(unit, {})[metric] = pct(float(np.mean(values)))
    return out


def phrase_qps(searcher, texts: list[str], q_start, q_end, n: int, batch: int = BATCH) -> dict:
    """Phrase search q/s at ``batch``, dense vs hybrid, batches interleaved so both see the same machine load."""
    modes = {"dense": SearchParams(mode="dense"), "hybrid": SearchParams(mode="hybrid")}
    n = min(n, len(texts)) // batch * batch
    if not n:
        raise SystemExit(f"the q/s comparison needs a whole batch of {batch} questions; there are {len(texts)}")
    search = dict.fromkeys(modes, 0.0)
    e2e = dict.fromkeys(modes, 0.0)
    for p in modes.values():  # warm-up
        searcher.search_vectors(q_start[:batch], q_end[:batch], p, None, texts[:batch])
    for a in range(0, n, batch):
        for name, p in modes.items():
            t0 = time.perf_counter()
            searcher.search_vectors(q_start[a : a + batch], q_end[a : a + batch], p, None, texts[a : a + batch])
            search[name] += time.perf_counter() - t0
            t0 = time.perf_counter()
            searcher.search(texts[a : a + batch], p)
            e2e[name] += time.perf_counter() - t0
    out = {f"{name}_search_qps": round(n / s, 1) for name, s in search.items()}
    out |= {f"{name}_end_to_end_qps": round(n / s, 1) for name, s in e2e.items()}
    out["hybrid_vs_dense_search"] = round(search["dense"] / search["hybrid"], 3)
    out["hybrid_vs_dense_end_to_end"] = round(e2e["dense"] / e2e["hybrid"], 3)
    out["questions"], out["batch"] = n, batch
    return out


def encode(searcher, qs: list[Question]) -> tuple[np.ndarray, np.ndarray]:
    parts = [searcher.encoder.encode([q.question for q in qs[a : a + BATCH]]) for a in range(0, len(qs), BATCH)]
    return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])


def run(args: argparse.Namespace) -> dict:
    searcher = open_searcher(args.index, args.model)
    qs = sample_questions(squad_questions(load_squad(args.questions)), args.limit)
    q_start, q_end = encode(searcher, qs)
    results = {}
    for name in [] if args.speed_only else args.configs:
        fields = CONFIGS[name]
        t0 = time.perf_counter()
        results[name] = unit_metrics(searcher, qs, q_start, q_end, SearchParams(**fields), tuple(args.units),
                                     weights=args.weights)
        results[name]["seconds"] = round(time.perf_counter() - t0, 1)
        print(name, json.dumps(results[name]), flush=True)
    report = {
        "questions": args.questions, "n_questions": len(qs), "index": str(args.index), "model": args.model,
        "passages": len(searcher.index.passages), "tokens": searcher.index.num_tokens,
        "fusion_defaults": searcher.index.fusion_defaults, "weights_override": args.weights, "units": args.units,
        "results": results,
        "cpu": cpu_name(),
    }
    if args.speed_questions:
        report["throughput_batch64"] = phrase_qps(searcher, [q.question for q in qs], q_start, q_end,
                                                  args.speed_questions, args.speed_batch)
    if results and set(args.units) == set(UNITS):  # the table needs every unit
        print(f"{'mode':<14}{'p@1':>7}{'p@5':>7}{'p@20':>7}{'mrr':>7}{'EM@1':>7}{'F1@1':>7}{'doc@1':>7}")
        for name, r in results.items():
            p = r["passage"]
            print(f"{name:<14}{p['acc@1']:>7}{p['acc@5']:>7}{p['acc@20']:>7}{p['mrr@20']:>7}"
                  f"{r['phrase']['em@1']:>7}{r['phrase']['f1@1']:>7}{r['doc']['acc@1']:>7}")
    print(json.dumps(report.get("throughput_batch64")))
    if args.out:
        write_json_atomic(args.out, report)
    return report


def fit(args: argparse.Namespace) -> dict:
    """On (training) questions: a grid search of the lexical weight per unit (phrase by EM@1, passage by acc@1 then
    acc@5, doc by acc@1), with phrase re-ranking off; then the re-ranking weights under the chosen phrase weight
    (``fit_rerank``, on ``--rerank-limit`` questions). ``--rerank-only`` keeps the index's lexical weights (or
    ``--weights``)."""
    searcher = open_searcher(args.index, args.model)
    searcher.phrase_rerank = None  # the weights are fitted for the fused ranking the re-ranking starts from
    grid: dict = {"phrase": {}, "passage": {}, "doc": {}}
    weights = {**searcher.lexical_weights, **(args.weights or {})}
    if not args.rerank_only:
        qs = sample_questions(squad_questions(load_squad(args.questions)), args.limit)
        q_start, q_end = encode(searcher, qs)
        for w in PHRASE_WEIGHTS:
            m = unit_metrics(searcher, qs, q_start, q_end, SearchParams(mode="hybrid", lexical_weight=w), ("phrase",))
            grid["phrase"][w] = m["phrase"]
            print("phrase", w, m["phrase"], flush=True)
        for w in UNIT_WEIGHTS:
            m = unit_metrics(searcher, qs, q_start, q_end,
                             SearchParams(mode="hybrid", fusion="score", lexical_weight=w), ("passage", "doc"))
            grid["passage"][w], grid["doc"][w] = m["passage"], m["doc"]
            print("passage/doc", w, m["passage"], m["doc"], flush=True)
        weights = {
            "phrase": max(grid["phrase"], key=lambda w: (grid["phrase"][w]["em@1"], grid["phrase"][w]["f1@1"])),
            "passage": max(grid["passage"], key=lambda w: (grid["passage"][w]["acc@1"], grid["passage"][w]["acc@5"])),
            "doc": max(grid["doc"], key=lambda w: grid["doc"][w]["acc@1"]),
        }
        print(json.dumps(weights), flush=True)
    qs = sample_questions(squad_questions(load_squad(args.questions)), args.rerank_limit)
    q_start, q_end = encode(searcher, qs)
    rerank = fit_rerank(searcher, qs, q_start, q_end, weights["phrase"])
    print(json.dumps(rerank))
    report = {"questions": args.questions, "n_questions": args.limit, "index": str(args.index),
              "grid": {u: {str(w): m for w, m in g.items()} for u, g in grid.items()}, "weights": weights,
              "phrase_rerank": {"n_questions": len(qs), **rerank}}
    if args.out:
        write_json_atomic(args.out, report)
    return report


def fit_rerank(searcher, qs: list[Question], q_start: np.ndarray, q_end: np.ndarray, weight: float) -> dict:
    """Weights of the hybrid phrase re-ranking (``core.rerank``): a logistic regression of "exact answer" on the
    features of each question's first RERANK_DEPTH fused candidates (phrase lexical weight ``weight``), with
    re-ranking off: the list the searcher re-ranks. Returned per raw feature (a ranking needs no intercept), with
    EM@1 of the fused and the re-ranked first candidate on the same questions."""
    from sklearn.linear_model import LogisticRegression

    hits = search_all(searcher, [q.question for q in qs], q_start, q_end, SearchParams(
        mode="hybrid", unit="phrase", top_k=RERANK_DEPTH, allow_overlap=True, lexical_weight=weight))
    terms = searcher.index.lexical.tokenize  # the index's analyzer, as the searcher's re-ranking has it
    rows = [(rerank_features([h.score for h in row], [h.text for h in row], q.question,
                             (terms([h.text for h in row]), terms([q.question])[0])),
             np.asarray([exact_match(h.text, q.answers) for h in row], dtype=int))
            for row, q in zip(hits, qs, strict=True) if row]
    x = np.concatenate([f for f, _ in rows])
    scale = x.std(axis=0)
    scale[scale < 1e-9] = 1.0  # a feature that never varies gets weight 0
    lr = LogisticRegression(C=1.0, max_iter=2000).fit(x / scale, np.concatenate([lab for _, lab in rows]))
    weights = {f: round(float(c), 4) for f, c in zip(RERANK_FEATURES, lr.coef_[0] / scale, strict=True)}
    fused = sum(int(lab[0]) for _, lab in rows)
    reranked = sum(int(lab[int(np.argmax(rerank_scores(f, weights)))]) for f, lab in rows)
    return {"weights": weights, "em@1_fused": pct(fused / len(qs)), "em@1_reranked": pct(reranked / len(qs)),
            "candidates": len(x)}


def compare(args: argparse.Namespace) -> dict:
    """Each configuration on each of ``--index`` (the same passages, the same model), and each later index's paired
    difference from the first (module docstring)."""
    searchers = [open_searcher(index, args.model) for index in args.index]
    qs = sample_questions(squad_questions(load_squad(args.questions)), args.limit)
    q_start, q_end = encode(searchers[0], qs)  # (one model: every index searches the same vectors)
    names = [str(index) for index in args.index]
    results: dict = {}
    for config in args.configs:
        runs = [{"per_question": {"id": [q.id for q in qs], "document": document_groups(qs),
                                  **question_values(s, qs, q_start, q_end, SearchParams(**CONFIGS[config]),
                                                    tuple(args.units))}} for s in searchers]
        metrics = tuple(k for k in runs[0]["per_question"] if "." in k)
        results[config] = {
            "metrics": {name: {m: pct(float(np.mean(r["per_question"][m]))) for m in metrics}
                        for name, r in zip(names, runs, strict=True)},
            "against_first": {name: paired(runs[0], r, metrics) for name, r in zip(names[1:], runs[1:], strict=True)}}
        print(config, json.dumps(results[config]), flush=True)
    report = {"questions": args.questions, "n_questions": len(qs), "model": args.model, "indexes": {
        name: {"lexical": {k: v for k, v in (s.index.manifest.lexical or {}).items() if k in ("analyzer", "method")},
               "fusion_defaults": s.index.fusion_defaults} for name, s in zip(names, searchers, strict=True)},
        "results": results, "cpu": cpu_name()}
    if args.out:
        write_json_atomic(args.out, report)
    return report


def parse_weights(text: str) -> dict[str, float]:
    """'phrase=2,passage=0.5' -> {'phrase': 2.0, 'passage': 0.5}."""
    try:
        pairs = [item.split("=", 1) for item in text.split(",") if item.strip()]
        return {unit.strip(): float(w) for unit, w in pairs}
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected unit=weight pairs separated by commas, got {text!r}") from None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("command", choices=["run", "fit", "compare"])
    ap.add_argument("--index", required=True, type=Path, nargs="+",
                    help="the index (compare: two or more indexes of the same passages, the first the reference)")
    ap.add_argument("--questions", required=True)
    ap.add_argument("--model", default="default")
    ap.add_argument("--limit", type=int, default=None, help="a fixed random sample of N questions")
    ap.add_argument("--speed-questions", type=int, default=1024, help="questions timed per mode (run; 0: no timing)")
    ap.add_argument("--speed-batch", type=int, default=BATCH, help="batch size of the q/s comparison (run)")
    ap.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=list(CONFIGS), help="modes to measure (run, compare)")
    ap.add_argument("--speed-only", action="store_true", help="run: only the q/s comparison")
    ap.add_argument("--units", nargs="+", default=list(UNITS), choices=UNITS, help="units to measure (run, compare)")
    ap.add_argument("--weights", type=parse_weights, default=None,
                    help="run, fit --rerank-only: per-unit lexical weights instead of the index's, e.g. "
                         "phrase=2,passage=0.5,doc=0.5")
    ap.add_argument("--rerank-limit", type=int, default=4000, help="fit: questions for the phrase re-ranking weights")
    ap.add_argument("--rerank-only", action="store_true", help="fit: only the re-ranking, under the index's weights")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    if args.command != "compare":
        if len(args.index) != 1:
            ap.error(f"{args.command} takes one --index")
        args.index = args.index[0]
    elif len(args.index) < 2:
        ap.error("compare needs two or more indexes: a reference and one to compare with it")
    {"run": run, "fit": fit, "compare": compare}[args.command](args)


if __name__ == "__main__":
    main()
