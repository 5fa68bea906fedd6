"""Calibration of hit confidence and abstention, on questions searched with their gold article present and absent.

    # validation articles (never fitted on); the model's calibrator (spanseek train calibrate) is the one measured
    python bench/confidence.py --index VAL_INDEX --questions validation.json.gz --model default \
        --cache runs/val-questions.npz --out bench/results/confidence.json

Every question is searched over the whole index and over the index without its gold article
(``trainer.calibrate.without_documents``: an exact index of the rest, BM25 rebuilt over it), with the default search
options, per unit and mode. Reported per unit/mode, on each question's best hit: expected calibration error (10
equal-width confidence bins, weighted by their share of hits) over both conditions together and apart, the AUROC of
the confidence for answer present vs absent and for correct vs wrong, accuracy and coverage at a few thresholds, and
the abstention curve, once per ``--priors`` value (the share of unanswerable questions the confidences assume:
at 0 the answer-present ECE is the one that matters, at 0.5 the ECE over both conditions); ``t80`` is the threshold that keeps 80% of the questions whose answer is present, and
``absent_dropped_at_t80`` the share of answer-absent questions it abstains on.

``--forms question keywords`` asks every question in each of these forms (``core.query_form``: as it is, as a search
box's keywords, as keywords in an order drawn from its id) in the same collection (each index without an article
serves every form) and reports each form apart (``by_form``; ``by_unit_mode`` and ``by_prior`` are the first form's);
a keyword form's hits are judged by the calibrator's keyword models where it has them, as a search does.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import sys
import time
from pathlib import Path

import numpy as np

from spanseek.core.confidence import Calibrator, load_calibrator
from spanseek.core.evaluate import sample_questions
from spanseek.core.io import load_squad, squad_questions
from spanseek.core.loading import open_searcher
from spanseek.core.metrics import calibration_error as ece
from spanseek.core.metrics import reliability
from spanseek.core.model import model_fingerprint, resolve_model
from spanseek.core.params import MODES, UNITS
from spanseek.core.query_form import QUERY_FORMS, in_form
from spanseek.trainer.calibrate import collect, encode_questions, load_meta, load_runs, save_runs

BINS = 10
THRESHOLDS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)


def auroc(pos: np.ndarray, neg: np.ndarray) -> float:
    """P(score of a random positive > a random negative), ties counting half (Mann-Whitney)."""
    if not len(pos) or not len(neg):
        return float("nan")
    from scipy.stats import rankdata

    r = rankdata(np.concatenate([pos, neg]))
    return float((r[: len(pos)].sum() - len(pos) * (len(pos) + 1) / 2) / (len(pos) * len(neg)))


def top1(runs: list) -> tuple[np.ndarray, np.ndarray]:
    """Each question's best-hit confidence (0 with no hit) and whether that hit is correct."""
    conf = np.asarray([r.confidence[0] if r.confidence is not None and len(r.confidence) else 0.0 for r in runs])
    ok = np.asarray([bool(r.labels[0]) if len(r.labels) else False for r in runs])
    return conf, ok


def report(runs: dict) -> dict:
    out = {}
    for unit, mode in sorted({(u, m) for u, m, _ in runs}):
        pres_all = runs[(unit, mode, "present")]
        if pres_all[0].confidence is None and all(r.confidence is None for r in pres_all):
            continue
        cp, yp = top1(pres_all)
        ca, ya = top1(runs[(unit, mode, "absent")])
        both_c, both_y = np.concatenate([cp, ca]), np.concatenate([yp, ya])
        every = [r for cond in ("present", "absent") for r in runs[(unit, mode, cond)]]
        hit_c = np.concatenate([r.confidence for r in every if r.confidence is not None])
        hit_y = np.concatenate([r.labels for r in every if r.confidence is not None])
        t80 = float(np.quantile(cp, 0.2))
        curve = []
        for t in np.round(np.arange(0.0, 1.0001, 0.05), 2):
            keep_p, keep_a = cp >= t, ca >= t
            answered = np.concatenate([keep_p, keep_a])
            curve.append({"threshold": float(t), "present_kept": float(keep_p.mean()), "absent_kept": float(keep_a.mean()),
                          "accuracy_answered": float(both_y[answered].mean()) if answered.any() else None,
                          "coverage": float(answered.mean())})
        out[f"{unit}/{mode}"] = {
            "questions": len(cp), "accuracy_present": float(yp.mean()), "accuracy_absent": float(ya.mean()),
            "ece_top1": ece(both_c, both_y), "ece_top1_present": ece(cp, yp), "ece_top1_absent": ece(ca, ya),
            "reliability_top1_present": reliability(cp, yp, BINS), "ece_all_hits": ece(hit_c, hit_y), "mean_conf_top1": float(both_c.mean()), "accuracy_top1": float(both_y.mean()),
            "auroc_present_vs_absent": auroc(cp, ca), "auroc_correct_vs_wrong": auroc(both_c[both_y], both_c[~both_y]),
            "t80": t80, "present_kept_at_t80": float((cp >= t80).mean()), "absent_dropped_at_t80": float((ca < t80).mean()),
            "at_thresholds": {str(t): next(c for c in curve if abs(c["threshold"] - t) < 1e-9) for t in THRESHOLDS},
            "curve": curve,
        }
    return out


def split_forms(runs: dict, forms: list[str], per_form: int) -> dict[str, dict]:
    """The collected runs of questions asked in several forms (form ``k``'s questions at positions ``k * per_form``
    onwards) as one set of runs per form, each numbering its questions from 0."""
    out: dict[str, dict] = {form: {} for form in forms}
    for key, ranked in runs.items():
        for r in ranked:
            k, i = divmod(r.question, per_form)
            out[forms[k]].setdefault(key, []).append(dataclasses.replace(r, question=i))
    return out


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--index", default="")
    ap.add_argument("--questions", default=None)
    ap.add_argument("--from-examples", default=None, help="report on examples written by an earlier --examples run")
    ap.add_argument("--model", default="default")
    ap.add_argument("--calibration", default=None, help="a calibration file (default: the model's)")
    ap.add_argument("--cache", default=None, help="npz of the encoded questions (written once, then read)")
    ap.add_argument("--units", nargs="+", default=list(UNITS), choices=UNITS)
    ap.add_argument("--modes", nargs="+", default=list(MODES), choices=MODES)
    ap.add_argument("--limit", type=int, default=None)
    ap.add_argument("--out", default=None)
    ap.add_argument("--examples", default=None, help="also write the collected features and labels to this npz")
    ap.add_argument("--forms", nargs="+", default=["question"], choices=QUERY_FORMS,
                    help="ask every question in each of these forms (core.query_form) and report each apart")
    ap.add_argument("--priors", type=float, nargs="+", default=[0.0, 0.5],
                    help="shares of unanswerable questions the confidences assume (one report each; the first is "
                         "by_unit_mode)")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    t0 = time.perf_counter()
    forms = list(dict.fromkeys(args.forms))
    if args.from_examples:
        runs = load_runs(args.from_examples)
        meta = load_meta(args.from_examples)
        forms = meta.get("forms", ["question"])
        n_questions = int(meta.get("n_questions") or len({r.question for rs in runs.values() for r in rs}))
        model_dir = resolve_model(args.model)
        calibrator = load_calibrator(model_dir, model_fingerprint(model_dir))
    else:
        searcher = open_searcher(args.index, args.model)
        calibrator = searcher.calibrator
        questions = sample_questions(squad_questions(load_squad(args.questions)), args.limit)
        n_questions = len(questions)
        asked = [q for form in forms for q in in_form(questions, form)]  # form k's at k * n_questions onwards
        q_start, q_end = encode_questions(searcher, asked, cache=args.cache)
        runs = collect(searcher.index, asked, q_start, q_end, args.units, args.modes)
        if args.examples:
            save_runs(runs, args.examples, {"forms": forms, "n_questions": n_questions})
    if args.calibration:
        calibrator = Calibrator.load(args.calibration)
    if calibrator is None:
        sys.exit(f"{args.model} has no calibrator; fit one with `spanseek train calibrate` or pass --calibration")
    by_form: dict[str, dict] = {}
    for form, form_runs in split_forms(runs, forms, n_questions).items():
        by_prior = by_form.setdefault(form, {})
        for prior in args.priors:
            for (unit, mode, _), ranked in form_runs.items():
                key = calibrator.key(unit, mode, keywords=form != "question")  # the keyword models, where fitted
                for r in ranked:
                    known = key in calibrator.models and len(r.features)
                    r.confidence = calibrator.predict(key, r.features, prior) if known else None
            by_prior[f"{prior:g}"] = report(form_runs)
    by_prior = by_form[forms[0]]
    result = {"index": Path(args.index).name, "questions": n_questions,
              "sample": f"{args.limit}, core.evaluate.sample_questions (seed 13)" if args.limit else "all",
              "bins": f"{BINS} equal-width", "calibrator_fitted_on": calibrator.fitted_on,
              "by_unit_mode": by_prior[f"{args.priors[0]:g}"], "by_prior": by_prior,
              "seconds": round(time.perf_counter() - t0, 1)}
    if len(forms) > 1:
        result["by_form"] = by_form
    for form, prior, rows in ((f, p, r) for f, ps in by_form.items() for p, r in ps.items()):
        print(f"{form}, unanswerable_prior {prior}: ECE+ is the calibration where every answer is in the index, ECE "
              "over both conditions (half unanswerable)")
        print(f"{'unit/mode':16} {'acc+':>5} {'ECE':>6} {'ECE+':>6} {'ECE-':>6} {'AUROC+-':>7} {'AUROCok':>7} "
              f"{'t80':>5} {'drop-':>5}")
        for key, r in rows.items():
            print(f"{key:16} {r['accuracy_present']:5.3f} {r['ece_top1']:6.3f} {r['ece_top1_present']:6.3f} "
                  f"{r['ece_top1_absent']:6.3f} {r['auroc_present_vs_absent']:7.3f} "
                  f"{r['auroc_correct_vs_wrong']:7.3f} {r['t80']:5.2f} {r['absent_dropped_at_t80']:5.3f}")
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    return result


if __name__ == "__main__":
    main()
