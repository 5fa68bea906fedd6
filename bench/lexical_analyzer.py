"""The lexical analyzers' rules, measured: BM25 alone on training articles (to choose the rules), then BM25 and hybrid
search on the validation articles (to check the choice).

    # choose: BM25 passage acc@1/5 of training questions over a BM25 index of their articles' paragraphs, for an
    # analyzer (--against), each rule of a newer one (--analyzer) added to it alone, the newer one whole, and the newer
    # one less each rule (folded3's against folded2; folded2's were measured with --analyzer folded2 --against folded)
    python bench/lexical_analyzer.py choose --train ../shared/data/squad-v1.1-train.json.gz --articles 300 \
        --analyzer folded3 --against folded2 --out bench/results/lexical_analyzer.json
    # check: `spanseek eval` (hybrid and lexical) of a built index as it is and with its lexical part rebuilt by
    # each analyzer (`spanseek index add-lexical --analyzer`), on copies of it
    python bench/lexical_analyzer.py check --index work/demo-index --questions runs/validation.json.gz \
        --analyzers folded,folded2 --out bench/results/lexical_analyzer.json

``choose`` takes the training articles of the project's split (``core.holdout``) only, never the held-out ones; a
passage counts as correct for a question when it holds one of its answers (``core.metrics.passage_has_answer``), as
``spanseek eval`` counts it. Both write into ``--out``, keeping what it holds under other keys.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from machine import cpu_name  # bench/ is on sys.path when run as a script

from spanseek.core.holdout import split_articles
from spanseek.core.io import load_squad, write_json_atomic
from spanseek.core.lexical import ANALYSES, ANALYZERS, Analysis, LexicalIndex, passage_text, tokenize
from spanseek.core.metrics import accuracy_at, answers_in, normalized_passage, pct

BATCH = 256
RULES = ("digits", "letters", "acronyms", "question_words", "symbols", "labels")
OTHER_VALUES = {"labels": ("any",)}  # values of a rule measured beside the analyzer's own


def variants(old_name: str = "folded2", new_name: str = "folded3") -> dict[str, Analysis]:
    """The analyzers measured: ``old_name``, it with each rule of ``new_name`` that it lacks (and that rule's other
    values), ``new_name``, and it less each such rule."""
    old, new, off = ANALYSES[old_name], ANALYSES[new_name], Analysis()
    rules = [rule for rule in RULES if getattr(new, rule) != getattr(old, rule)]
    out = {old_name: old}
    for rule in rules:
        for value in (getattr(new, rule), *OTHER_VALUES.get(rule, ())):
            label = f"+{rule}" if isinstance(value, bool) else f"+{rule}={value}"
            out[f"{old_name} {label}"] = dataclasses.replace(old, **{rule: value})
    out[new_name] = new
    out |= {f"{new_name} -{rule}": dataclasses.replace(new, **{rule: getattr(off, rule)}) for rule in rules}
    return out


def bm25_correct(texts: list[str], questions: list[str], answers: list[list[str]], analysis: Analysis,
                 k: int = 5) -> list[list[bool]]:
    """Per question, whether each of BM25's top ``k`` passages over ``texts`` by ``analysis`` holds an answer."""
    normed = [normalized_passage(t) for t in texts]
    index = LexicalIndex.of_terms(tokenize(texts, analysis))
    out = []
    for a in range(0, len(questions), BATCH):
        ids, _ = index.postings(questions[a : a + BATCH], tokenize(questions[a : a + BATCH], analysis)).top(k)
        out += [[p >= 0 and answers_in(normed[p], ans) for p in row]
                for row, ans in zip(ids.tolist(), answers[a : a + BATCH], strict=True)]
    return out


def against(correct: list[list[bool]], other: list[list[bool]]) -> dict[str, int]:
    """Questions that ``correct`` finds at 1 (at 5) and ``other`` does not, and the reverse."""
    return {f"{name}@{k}": sum(any(a[:k]) and not any(b[:k]) for a, b in zip(x, y, strict=True))
            for k in (1, 5) for name, x, y in (("gained", correct, other), ("lost", other, correct))}


def choose(args: argparse.Namespace) -> dict[str, Any]:
    train, _ = split_articles(load_squad(args.train))
    articles = train[: args.articles]
    texts = [passage_text(a["title"], p["context"]) for a in articles for p in a["paragraphs"]]
    qas = [qa for a in articles for p in a["paragraphs"] for qa in p["qas"]]
    questions, answers = [qa["question"] for qa in qas], [[x["text"] for x in qa["answers"]] for qa in qas]
    runs: dict[str, dict[str, Any]] = {}
    correct = {}
    analyses = variants(args.against, args.analyzer)
    for name, analysis in analyses.items():
        t0 = time.process_time()
        correct[name] = bm25_correct(texts, questions, answers, analysis)
        runs[name] = {f"acc@{k}": pct(accuracy_at(correct[name], k)) for k in (1, 5)}
        print(f"{name:28s} acc@1 {runs[name]['acc@1']:5.1f}  acc@5 {runs[name]['acc@5']:5.1f}"  # noqa: T201
              f"  ({time.process_time() - t0:.0f} CPU s)")
    new = args.analyzer
    for name in runs:  # each rule's own questions: what the new analyzer finds that it without the rule does not
        if name.startswith(f"{new} -"):
            runs[name][f"{new} against it"] = against(correct[new], correct[name])
    return {f"training_choice{'' if new == 'folded2' else '_' + new}": {
        "command": " ".join(["python", "bench/lexical_analyzer.py", *sys.argv[1:]]),
        "data": f"the first {len(articles)} training articles of {Path(args.train).name} (core.holdout split): "
                f"{len(texts):,} passages, {len(questions):,} questions",
        "metric": "BM25 alone, passage acc@1 / acc@5 (a passage holding an answer)",
        "rules": {name: dataclasses.asdict(a) for name, a in analyses.items()},
        "runs": runs}}


def check(args: argparse.Namespace) -> dict[str, Any]:
    runs = {}
    with tempfile.TemporaryDirectory(dir=args.work) as work:
        for analyzer in args.analyzers.split(","):
            index = Path(work) / f"index-{analyzer}"
            shutil.copytree(args.index, index)
            cli = [sys.executable, "-m", "spanseek.cli"]
            subprocess.run([*cli, "index", "add-lexical", str(index), "--analyzer", analyzer], check=True)
            for mode in ("hybrid", "lexical"):
                out = Path(work) / f"{analyzer}-{mode}.json"
                subprocess.run([*cli, "eval", "--questions", args.questions, "--index", str(index), "--model",
                                args.model, "--mode", mode, "--quiet", "--out", str(out)], check=True)
                metrics = json.loads(out.read_text())
                runs[f"{analyzer}/{mode}"] = {unit: metrics[unit] for unit in ("phrase", "passage", "doc")
                                              if unit in metrics}
            shutil.rmtree(index)
    return {"validation_check": {
        "command": " ".join(["python", "bench/lexical_analyzer.py", *sys.argv[1:]]),
        "questions": args.questions, "index": f"{args.index}, its lexical part rebuilt by each analyzer",
        "cpu": cpu_name(), "runs": runs}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    c = sub.add_parser("choose", help="BM25 accuracy of each rule on training articles")
    c.add_argument("--train", required=True, help="SQuAD-format training file (its training articles are used)")
    c.add_argument("--articles", type=int, default=300, help="how many training articles, from the first")
    c.add_argument("--analyzer", default="folded3", choices=ANALYZERS, help="the analyzer whose rules are measured")
    c.add_argument("--against", default="folded2", choices=ANALYZERS, help="the analyzer they are added to")
    v = sub.add_parser("check", help="spanseek eval of an index with its lexical part rebuilt by each analyzer")
    v.add_argument("--index", required=True, help="a built index (copied; not changed)")
    v.add_argument("--questions", required=True, help="the questions of the index's articles (SQuAD format)")
    v.add_argument("--model", default="default", help="the model to encode questions with")
    v.add_argument("--analyzers", default="folded,folded2", help="comma-separated analyzers to rebuild with")
    v.add_argument("--work", default=None, help="where the copies go (default: the system's temporary folder)")
    for p in (c, v):
        p.add_argument("--out", required=True, help="JSON to write the results into (its other keys are kept)")
    args = parser.parse_args()
    result = choose(args) if args.command == "choose" else check(args)
    out = Path(args.out)
    held = json.loads(out.read_text()) if out.is_file() else {"benchmark": "lexical_analyzer"}
    write_json_atomic(out, {**held, **result})


if __name__ == "__main__":
    main()
