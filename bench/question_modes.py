"""Both question-encoder modes side by side: accuracy and questions/s of a ``shared`` and a ``separate`` model.

    python bench/question_modes.py --shared runs/shared/last --separate runs/separate/last --out runs/bench/modes.json
    python bench/question_modes.py --shared runs/snap150 --separate runs/sep-snap --limit-articles 2 --limit 50 --out m.json

For each model dir, on the same questions (the held-out SQuAD train articles by default, ``--split all`` for every
article of --questions; --limit-articles caps the articles, hence the size of the index each model builds):

- accuracy: ``spanseek eval`` (``indexer.evaluate.run_eval``) with reading comprehension over an index of those
  articles' paragraphs built with that model: phrase EM/F1, passage acc@k, doc acc@k, RC EM/F1, and its q/s
  (three searches and an RC read per question);
- speed: raw question encoding (``QuestionEncoder.encode``, batch --batch-size) and phrase search
  (``Searcher.search``, top-k 10) over the same question batches, in q/s.

``separate`` runs two question encoders per question, ``shared`` one encoder with two heads, so the shared
model should encode about twice as fast; the table shows what that costs (or not) in accuracy.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch: spin-waiting OpenMP crawls on shared CPUs
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")  # no per-load reports in the benchmark output

import argparse  # noqa: E402
import gzip  # noqa: E402
import json  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

from spanseek.core.config import EncoderConfig  # noqa: E402
from spanseek.core.evaluate import sample_questions  # noqa: E402
from spanseek.core.holdout import split_articles  # noqa: E402
from spanseek.core.io import (  # noqa: E402
    load_squad,
    squad_documents,
    squad_questions,
    write_corpus,
    write_json_atomic,
)
from spanseek.core.loading import open_searcher  # noqa: E402
from spanseek.core.model import CONFIG_NAME, resolve_model  # noqa: E402
from spanseek.core.params import SearchParams  # noqa: E402
from spanseek.indexer.build import BuildOptions, build_index  # noqa: E402
from spanseek.indexer.evaluate import run_eval  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SQUAD_TRAIN = ROOT.parent / "shared" / "data" / "squad-v1.1-train.json.gz"
ROWS = [("phrase", "em@1"), ("phrase", "f1@1"), ("phrase", "em@10"), ("passage", "acc@1"), ("passage", "acc@5"),
        ("passage", "acc@20"), ("doc", "acc@1"), ("rc", "em"), ("rc", "f1"), ("speed", "encode_qps"),
        ("speed", "phrase_search_qps"), ("speed", "eval_qps")]


def evaluate_mode(model: str, questions_file: Path, work: Path, args: argparse.Namespace) -> dict:
    """Accuracy (run_eval over an index of the question file's paragraphs built with the model) and q/s."""
    mode = EncoderConfig.load(resolve_model(model) / CONFIG_NAME).question_mode
    corpus, index_dir = work / "corpus.jsonl", work / "index"
    write_corpus(corpus, squad_documents(load_squad(questions_file)))
    build_index(corpus, model, index_dir, BuildOptions(precision=args.precision, device=args.device, progress=False))
    metrics = run_eval(questions_file, model, index=index_dir, reading_comprehension=True, limit=args.limit,
                       progress=False)
    searcher = open_searcher(index_dir, model, device=args.device, precision=args.precision)
    qs = [q.question for q in sample_questions(squad_questions(load_squad(questions_file)), args.limit)]
    batches = [qs[a : a + args.batch_size] for a in range(0, len(qs), args.batch_size)]
    searcher.search(batches[0], SearchParams(unit="phrase", top_k=10))  # warm-up

    def best_seconds(fn) -> float:  # the fastest of --repeats passes over the batches (shared, noisy CPUs)
        runs = []
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            for b in batches:
                fn(b)
            runs.append(time.perf_counter() - t0)
        return min(runs)

    encode = best_seconds(searcher.encoder.encode)
    search = best_seconds(lambda b: searcher.search(b, SearchParams(unit="phrase", top_k=10)))
    metrics["speed"] = {"encode_qps": round(len(qs) / encode, 1), "phrase_search_qps": round(len(qs) / search, 1),
                        "eval_qps": metrics["questions_per_second"]}
    return {"model": str(model), "question_mode": mode, **metrics}


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shared", required=True, help="model dir trained with --question-mode shared")
    p.add_argument("--separate", required=True, help="model dir trained with --question-mode separate")
    p.add_argument("--questions", default=str(SQUAD_TRAIN), help="SQuAD-format file")
    p.add_argument("--split", default="held", choices=["held", "all"], help="held-out articles only, or all")
    p.add_argument("--limit-articles", type=int, default=None, help="use only the first N articles")
    p.add_argument("--limit", type=int, default=500, help="a fixed random sample of N questions")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--repeats", type=int, default=3, help="timed passes of the speed measurements; the fastest is kept")
    p.add_argument("--precision", default="auto", choices=["auto", "fp32", "bf16"])
    p.add_argument("--device", default="auto")
    p.add_argument("--out", required=True, help="JSON results")
    args = p.parse_args(argv)

    data = load_squad(args.questions)
    articles = (split_articles(data)[1] if args.split == "held" else data)[: args.limit_articles]
    results = {}
    with tempfile.TemporaryDirectory(prefix="spanseek-bench-") as tmp:
        questions_file = Path(tmp) / "questions.json.gz"
        with gzip.open(questions_file, "wt", encoding="utf-8") as f:
            json.dump({"version": "bench", "data": articles}, f)
        for name in ("shared", "separate"):
            model = getattr(args, name)
            results[name] = evaluate_mode(model, questions_file, Path(tmp) / name, args)
            if results[name]["question_mode"] != name:
                print(f"warning: --{name} {model} has question_mode {results[name]['question_mode']!r}")
    out = {"benchmark": "question_modes", "questions": str(args.questions), "split": args.split,
           "articles": len(articles), "n_questions": results["shared"]["n_questions"], **results}
    write_json_atomic(args.out, out)
    print(f"{'metric':<24} {'shared':>9} {'separate':>9}")
    for group, key in ROWS:
        print(f"{group + ' ' + key:<24} {results['shared'][group][key]:>9} {results['separate'][group][key]:>9}")
    print(json.dumps(out))
    return out


if __name__ == "__main__":
    main()
