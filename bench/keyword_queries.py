"""Keyword queries: questions rewritten as a search box's keywords, and what each search mode makes of them.

    # the keyword version of a question file (JSON Lines: the same ids, answers and titles)
    python bench/keyword_queries.py make --questions fit.json.gz --out fit-keywords.jsonl
    python bench/keyword_queries.py make --questions fit.json.gz --shuffled --out fit-shuffled.jsonl
    # questions against their keywords, in each mode, over an index of the questions' articles
    python bench/keyword_queries.py run --index fit-index --questions fit.json.gz --model default --limit 1000 \
        --out bench/results/keyword_queries_fit.json

The rule (``core.query_form.keywords``) is deterministic: a question's words in order, less wh-words, auxiliary
verbs, articles, pronouns, prepositions and other stop words (``DROPPED``), its punctuation and possessive 's; "What
is the Grotto at Notre Dame?" reads "Grotto Notre Dame". ``--shuffled`` also puts each question's keywords in an order
drawn from its id. A question with no word left keeps its words as they were (counted in the output).

``run`` evaluates every variant (``question``: the file as it is; ``keywords``; ``shuffled``) in every mode with
``core.evaluate.evaluate``, what ``spanseek eval --mode MODE`` runs, on the same sample of questions (``--limit``
samples as eval does): phrase EM@1, passage acc@1/5/20, doc acc@1, with 95% intervals over articles, and each
variant's paired difference from the questions in the same mode (``vs_question``: phrase EM@1 and passage acc@5,
with a 95% interval over articles). Each text is encoded once. ``--lexical-weight`` sets the hybrid weight of every unit (default: the index's per unit);
``--weight-factors 2 4`` also measures hybrid mode with every unit's default weight doubled, then quadrupled (more
BM25); ``--encode-template "what {}?"`` has the encoder read each keyword query in that template (BM25 reads the
query as it is).
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch: spin-waiting OpenMP crawls on shared CPUs
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import argparse  # noqa: E402
import json  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
from machine import cpu_name  # noqa: E402  (bench/ is on sys.path when run as a script)

from spanseek.core.evaluate import evaluate, sample_questions  # noqa: E402
from spanseek.core.io import write_json_atomic  # noqa: E402
from spanseek.core.metrics import cluster_bootstrap_ci  # noqa: E402
from spanseek.core.query_form import DROPPED, QUERY_FORMS, as_keywords, in_form, is_keyword_query, words  # noqa: E402
from spanseek.core.questions import read_questions  # noqa: E402

VARIANTS = QUERY_FORMS
MODES = ("hybrid", "dense", "lexical")


def make(args: argparse.Namespace) -> dict:
    questions = read_questions(args.questions).questions
    rewritten = as_keywords(questions, args.shuffled)
    kept_whole = sum(not any(w.casefold() not in DROPPED for w in words(q.question)) for q in questions)
    out = Path(args.out)
    tmp = out.with_name(out.name + ".tmp")
    with tmp.open("w", encoding="utf-8") as f:
        for q in rewritten:
            record = {"id": q.id, "question": q.question, "answers": list(q.answers), "title": q.title}
            if q.doc_id is not None:
                record["doc_id"] = q.doc_id
            f.write(json.dumps(record, ensure_ascii=False) + "\n")
    tmp.replace(out)
    summary = {"questions": len(questions), "kept_whole": kept_whole,
               "words_per_question": round(float(np.mean([len(words(q.question)) for q in questions])), 2),
               "keywords_per_question": round(float(np.mean([len(q.question.split()) for q in rewritten])), 2)}
    print(json.dumps(summary))
    return summary


class CachedEncoder:
    """A question encoder that encodes each text once (every mode and unit searches the same vectors); with
    ``template`` (e.g. "what {}?"), a keyword query is encoded as the template filled with it."""

    def __init__(self, encoder, template: str | None = None):
        self.encoder, self.template = encoder, template
        self.model = getattr(encoder, "model", None)  # evaluate reads the model's training record through it
        self.cache: dict[str, tuple[np.ndarray, np.ndarray]] = {}

    def encode(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        new = [t for t in dict.fromkeys(texts) if t not in self.cache]
        if new:
            shown = [self.template.format(t) if self.template and is_keyword_query(t) else t for t in new]
            q_start, q_end = self.encoder.encode(shown)
            self.cache.update({t: (s, e) for t, s, e in zip(new, q_start, q_end, strict=True)})
        return (np.stack([self.cache[t][0] for t in texts]), np.stack([self.cache[t][1] for t in texts]))


def headline(metrics: dict) -> dict:
    """The numbers the report compares: phrase EM@1, passage acc@1/5/20, doc acc@1 and the 95% intervals."""
    ci = metrics["ci95"]
    return {"phrase_em@1": metrics["phrase"]["em@1"], **{f"passage_{k}": metrics["passage"][k]
                                                          for k in ("acc@1", "acc@5", "acc@20")},
            "doc_acc@1": metrics.get("doc", {}).get("acc@1"),
            "ci95": {"by": ci["by"], "phrase_em@1": ci["phrase.em@1"], "passage_acc@5": ci["passage.acc@5"]}}


def paired(per: dict, base: dict) -> dict:
    """The difference of a variant from the questions (points, the same questions and mode), and its 95% interval
    over articles: phrase EM@1 and passage acc@5."""
    out = {}
    for name, key in (("phrase_em@1", "phrase.em@1"), ("passage_acc@5", "passage.acc@5")):
        diff = np.subtract(per[key], base[key])
        out[name] = {"diff": round(100 * float(diff.mean()), 1), "ci95": list(cluster_bootstrap_ci(diff, per["title"]))}
    return out


def run(args: argparse.Namespace) -> dict:
    from spanseek.core.loading import open_searcher
    from spanseek.core.params import SearchParams

    searcher = open_searcher(args.index, args.model)
    searcher.encoder = CachedEncoder(searcher.encoder, args.encode_template)
    questions = sample_questions(read_questions(args.questions).questions, args.limit)
    variants = {name: in_form(questions, name) for name in VARIANTS}
    results: dict = {}
    per: dict = {}  # each run's per-question values, for the paired differences
    defaults = dict(searcher.lexical_weights)
    runs = [(mode, None) for mode in args.modes] + [("hybrid", f) for f in args.weight_factors or ()]
    for mode, factor in runs:
        weight = args.lexical_weight if mode == "hybrid" else None
        searcher.lexical_weights = {u: w * (factor or 1.0) for u, w in defaults.items()}  # each unit's, scaled
        for name in args.variants:
            key = f"{mode}/{name}" if factor is None else f"hybrid weights x{factor:g}/{name}"
            t0 = time.perf_counter()
            m = evaluate(searcher, variants[name], progress=False, per_question=True,
                         params=SearchParams(mode=mode, lexical_weight=weight))
            per[key] = m.pop("per_question")
            results[key] = {**headline(m), "seconds": round(time.perf_counter() - t0, 1)}
            question = per.get(key.rsplit("/", 1)[0] + "/question")
            if name != "question" and question is not None:
                results[key]["vs_question"] = paired(per[key], question)
            print(key, json.dumps(results[key]), flush=True)
    print(f"{'mode/variant':<40}{'EM@1':>7}{'p@1':>7}{'p@5':>7}{'p@20':>7}{'doc@1':>7}")
    for key, r in results.items():
        print(f"{key:<40}{r['phrase_em@1']:>7}{r['passage_acc@1']:>7}{r['passage_acc@5']:>7}"
              f"{r['passage_acc@20']:>7}{r['doc_acc@1']!s:>7}")
    report = {"questions": str(args.questions), "n_questions": len(questions), "index": str(args.index),
              "model": args.model, "lexical_weight": args.lexical_weight, "encode_template": args.encode_template,
              "keyword_queries": {name: sum(is_keyword_query(q.question) for q in qs) for name, qs in variants.items()},
              "fusion_defaults": searcher.index.fusion_defaults,
              "examples": [{"question": q.question, "keywords": k.question, "shuffled": s.question}
                           for q, k, s in list(zip(questions, variants["keywords"], variants["shuffled"],
                                                   strict=True))[:5]],
              "results": results, "cpu": cpu_name()}
    if args.out:
        write_json_atomic(args.out, report)
    return report


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("command", choices=["make", "run"])
    ap.add_argument("--questions", required=True, help="a question file with answers (SQuAD JSON, JSON Lines, CSV)")
    ap.add_argument("--out", default=None, help="make: the keyword JSON Lines file; run: the results JSON")
    ap.add_argument("--shuffled", action="store_true", help="make: keywords in an order drawn from each id")
    ap.add_argument("--index", type=Path, help="run: the index of the questions' articles")
    ap.add_argument("--model", default=None, help="run: the model (default: the one that built --index)")
    ap.add_argument("--limit", type=int, default=None, help="run: a fixed random sample of N questions, as eval's")
    ap.add_argument("--modes", nargs="*", default=list(MODES), choices=MODES,
                    help="run: the modes to measure (none: only --weight-factors)")
    ap.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=VARIANTS,
                    help="run: the question variants to measure")
    ap.add_argument("--lexical-weight", type=float, default=None,
                    help="run: the hybrid lexical weight of every unit (default: the index's per unit)")
    ap.add_argument("--weight-factors", nargs="+", type=float, default=None,
                    help="run: also hybrid mode with every unit's default lexical weight times each of these")
    ap.add_argument("--encode-template", default=None,
                    help='run: the text the encoder sees for a keyword query, e.g. "what {}?" (BM25 sees the query)')
    args = ap.parse_args()
    if args.command == "make":
        if args.out is None:
            ap.error("make needs --out")
        make(args)
    else:
        if args.index is None:
            ap.error("run needs --index")
        run(args)


if __name__ == "__main__":
    main()
