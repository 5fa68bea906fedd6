"""How many unanswerable questions a fit of reading should see, chosen on the fit's own training articles.

    spanseek train fit-reading ... --absent-questions 500 --reads FIT_READS      # keeps its reads
    python bench/reading_absent_share.py --reads FIT_READS --absent 0 125 250 500 \
        --out bench/results/reading_absent_share.json

From the reads of ``spanseek train fit-reading --reads`` (its questions of the reserved articles, and its
--absent-questions of other training articles, whose answers its index does not hold), for each --absent count, in
two folds split by article, the fit of one fold (``trainer.fit_reading.fit_depth`` at --depth passages, with the
first that many unanswerable questions of the fold) is measured on the other fold: the first hit's calibration
error on the answerable questions (prior 0), the mean confidence of every unanswerable question's first hit, and
the AUROC of that confidence for answerable against not, per unit. Nothing is read, and no validation article.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import argparse  # noqa: E402

import numpy as np  # noqa: E402
from sklearn.metrics import roc_auc_score  # noqa: E402

from spanseek.core.io import write_json_atomic  # noqa: E402
from spanseek.core.metrics import calibration_error  # noqa: E402
from spanseek.core.reading import READ_FEATURES  # noqa: E402
from spanseek.trainer.fit_reading import (  # noqa: E402
    Read,
    examples,
    first_hit_confidences,
    fit,
    fit_depth,
    load_reads,
)


def measure(train: list[Read], test: list[Read], depth: int, features) -> dict:
    """A fit on ``train`` measured on ``test``, per unit."""
    models, calibration, _ = fit_depth(train, depth, fit(*examples(train, "phrase", depth)[:2], "phrase", features),
                                       features)
    out = {}
    for unit in ("phrase", "passage", "doc"):
        here = [r for r in test if not r.absent]
        conf_p, right = first_hit_confidences(models[unit], calibration[unit], here, unit, depth)
        conf_a, _ = first_hit_confidences(models[unit], calibration[unit], [r for r in test if r.absent], unit, depth)
        out[unit] = {"ece_answerable": calibration_error(conf_p, right), "n_answerable": len(conf_p),
                     "confidence_answerable": float(conf_p.mean()), "confidence_unanswerable": float(conf_a.mean()),
                     "auroc": float(roc_auc_score(np.r_[np.ones(len(conf_p)), np.zeros(len(conf_a))],
                                                  np.r_[conf_p, conf_a]))}
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reads", required=True, help="the --reads file of a `spanseek train fit-reading`")
    ap.add_argument("--absent", type=int, nargs="+", default=[0, 125, 250, 500])
    ap.add_argument("--depth", type=int, default=3, help="passages read")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()

    try:
        window, reads = next(iter(load_reads(args.reads)[1].items()))
    except (OSError, ValueError) as e:  # (no file, or not one of reads: named, with why)
        ap.error(str(e))
    titles = sorted({r.question.title for r in reads})
    fold = {t: i % 2 for i, t in enumerate(titles)}
    present = [r for r in reads if not r.absent]
    absent_all = [r for r in reads if r.absent]
    result: dict = {"reads": args.reads, "questions": len(present), "absent_questions": len(absent_all),
                    "depth": args.depth, "window_chars": window, "by_absent": {}}
    for n in args.absent:
        folds = [measure([r for r in present + absent_all[:n] if fold[r.question.title] != k],
                         [r for r in reads if fold[r.question.title] == k], args.depth, READ_FEATURES)
                 for k in (0, 1)]
        result["by_absent"][str(n)] = {unit: {m: round(float(np.mean([f[unit][m] for f in folds])), 4)
                                              for m in folds[0][unit]} for unit in folds[0]}
        print(n, result["by_absent"][str(n)])  # noqa: T201
    write_json_atomic(args.out, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
