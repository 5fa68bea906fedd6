"""Two or more phrase models on the same questions, each against the first: a training change measured with its
95% interval over articles.

    python bench/paired_models.py --questions runs/validation.json.gz \
        --models runs/twin/last runs/distilled/last --out bench/results/distillation.json

Each model answers every question of the file over its own exact index of the file's paragraphs (built
temporarily, as `spanseek eval --questions F --model M --reading-comprehension` does) in the index's default
(hybrid) mode. Reported per model: RC EM, phrase EM@1 and passage acc@5; and for each model after the first, its
difference from the first on every question, with a 95% bootstrap interval over articles (questions of one article
move together), how many questions it gets right that the first misses and the other way round, and McNemar's z
of those two counts.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch/faiss: spin-waiting OpenMP crawls on shared CPUs
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import argparse  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402
from machine import cpu_name  # noqa: E402  (bench/ is on sys.path when run as a script)

from spanseek.core.io import write_json_atomic  # noqa: E402
from spanseek.core.metrics import cluster_bootstrap_ci, mcnemar_z, pct  # noqa: E402

METRICS = ("rc.em", "phrase.em@1", "passage.acc@5")


def paired(reference: dict[str, Any], other: dict[str, Any], metrics: tuple[str, ...] = METRICS) -> dict[str, Any]:
    """``other``'s per-question differences from ``reference`` (the same questions, in the same order) in each of
    ``metrics``, the intervals resampling each question's document (``core.evaluate.document_groups``, as ``spanseek
    eval``)."""
    a, b = reference["per_question"], other["per_question"]
    if a["id"] != b["id"]:
        raise ValueError("the two evaluations asked different questions")
    out: dict[str, Any] = {}
    for name in metrics:
        x, y = np.asarray(a[name], dtype=np.float64), np.asarray(b[name], dtype=np.float64)
        gained, lost = int(((y > 0) & (x == 0)).sum()), int(((x > 0) & (y == 0)).sum())
        out[name] = {"difference": pct(float(np.mean(y - x))),
                     "ci95_over_articles": list(cluster_bootstrap_ci(y - x, a["document"])),
                     "gained": gained, "lost": lost, "mcnemar_z": mcnemar_z(gained, lost)}
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--questions", required=True, help="SQuAD-format questions (their paragraphs are indexed)")
    ap.add_argument("--models", nargs="+", required=True, help="model directories (or default); the first is the "
                    "reference")
    ap.add_argument("--limit", type=int, default=None, help="a fixed random sample of N questions")
    ap.add_argument("--precision", default="auto", choices=("auto", "fp32", "bf16"))
    ap.add_argument("--out", help="JSON results")
    args = ap.parse_args(argv)
    if len(args.models) < 2:
        ap.error("--models needs at least two models: a reference and one to compare with it")
    from spanseek.indexer.evaluate import run_eval

    runs = [run_eval(args.questions, m, reading_comprehension=True, limit=args.limit, precision=args.precision,
                     per_question=True, progress=False) for m in args.models]
    result: dict[str, Any] = {
        "questions": args.questions, "n_questions": runs[0]["n_questions"], "mode": runs[0]["mode"],
        "cpu": cpu_name(),
        "models": [{"model": m, "rc_em": r["rc"]["em"], "phrase_em@1": r["phrase"]["em@1"],
                    "passage_acc@5": r["passage"]["acc@5"]} for m, r in zip(args.models, runs, strict=True)],
        "against_first": {m: paired(runs[0], r) for m, r in zip(args.models[1:], runs[1:], strict=True)},
    }
    if args.out:
        write_json_atomic(args.out, result)
    print(result)
    return result


if __name__ == "__main__":
    main()
