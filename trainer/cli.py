"""CLI for training (registered into `spanseek` as `spanseek train ...`).

    spanseek train phrase --help

The flags of the jobs in ``CONFIG_JOBS`` are generated from their config dataclasses
(core.options), so each option is declared once, with its default and help, in the config.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import os

from spanseek.core.confidence import FEATURES
from spanseek.core.io import check_writable, given_path
from spanseek.core.options import add_options, from_args
from spanseek.core.params import MODES, UNITS
from spanseek.core.query_form import QUERY_FORMS
from spanseek.trainer.arguments import (
    DistInfo,
    FilterConfig,
    FitReadingConfig,
    LengthBiasConfig,
    QsftConfig,
    ReaderLengthBiasConfig,
    ReaderTrainConfig,
    TrainConfig,
)

# The jobs run from a config dataclass: subcommand -> (config, "module:function" of spanseek.trainer, help).
CONFIG_JOBS = {
    "phrase": (TrainConfig, "train:train_phrase",
               "train the phrase and question encoders (resumes from OUT/last)"),
    "qsft": (QsftConfig, "qsft:train_qsft", "query-side fine-tuning: train the question encoder, phrase side frozen "
             "(indexes built with --model stay valid; resumes from OUT/last)"),
    "filter": (FilterConfig, "filter:train_filter", "train the token filter head on a frozen phrase model"),
    "length-bias": (LengthBiasConfig, "length_bias:fit_length_bias", "fit the span length bias of a trained model "
                    "on training questions (writes a copy of the model; its indexes stay valid)"),
    "reader": (ReaderTrainConfig, "reader:train_reader", "train the cross-attention reader (the teacher, and "
               "reading at search time; resumes from OUT/last)"),
    "reader-length-bias": (ReaderLengthBiasConfig, "length_bias:fit_reader_length_bias", "fit the reader's span "
                           "length prior on articles it never trained on (writes a copy of the reader)"),
    "fit-reading": (FitReadingConfig, "fit_reading:fit_reading", "fit how read spans combine with retrieval, on "
                    "training articles the reader never saw (writes OUT/reading.json)"),
}


def _config_job(args: argparse.Namespace) -> int:
    config, target, _ = CONFIG_JOBS[args.train_command]
    module, function = target.split(":")
    run = getattr(importlib.import_module(f"spanseek.trainer.{module}"), function)
    given = {}
    if "dist" in {f.name for f in dataclasses.fields(config)}:
        env = os.environ  # torchrun sets these; a plain run is rank 0 of 1
        given["dist"] = DistInfo(rank=int(env.get("RANK", 0)), world=int(env.get("WORLD_SIZE", 1)),
                                 local_rank=int(env.get("LOCAL_RANK", 0)))
    options = from_args(config, args, **given)  # an option out of range is refused here
    # the files every job reads and writes, checked before it loads a model for minutes
    given_path(options.train, "--train", file=True)
    check_given(options)
    check_writable(options.out)
    print(json.dumps(run(options), indent=2))
    return 0


def check_given(options: object) -> None:
    """The models, readers and indexes a job's options name, each refused naming its flag (``--from-index runs/:
    not an index directory ...``) unless it is one: the phrase models it starts from (``--model``, ``--init-from``),
    the readers (``--reader``, ``--init``) and the indexes it reads (``--index``, ``--from-index``; qsft's
    ``--val-index`` where it validates)."""
    from spanseek.core.model import given_model
    from spanseek.core.phrase_index import given_index
    from spanseek.core.reader import resolve_reader

    for field, given in (("model", given_model), ("init_from", given_model), ("reader", resolve_reader),
                         ("init", resolve_reader), ("index", given_index), ("from_index", given_index)):
        value = getattr(options, field, None)
        if value is not None:
            given(value, "--" + field.replace("_", "-"))


def _mine(args: argparse.Namespace) -> int:
    from spanseek.core.model import given_model
    from spanseek.trainer.mining import mine

    check_writable(args.out)  # named now, not as its OUT.parts folder once the training file is read
    train = given_path(args.train, "--train", file=True)
    given_model(args.model, "--model")
    if args.index is not None:
        from spanseek.core.phrase_index import given_index

        given_index(args.index, "--index")
    out = mine(train, args.out, miner=args.miner, top_k=args.top_k, keep=args.keep, index=args.index,
               model=args.model, limit_questions=args.limit_questions)
    print(f"wrote {out}")
    return 0


def _valsets(args: argparse.Namespace) -> int:
    from spanseek.trainer.validation import build_validation_sets

    print(json.dumps(build_validation_sets(given_path(args.train, "--train", file=True), args.out, n_questions=args.questions, bm25_k=args.bm25_k,
                                           reference_extra=args.reference_extra), indent=2))
    return 0


def _rank(args: argparse.Namespace) -> int:
    from spanseek.trainer.validation import rank_checkpoints

    print(json.dumps(rank_checkpoints(args.valsets, args.checkpoints, args.out), indent=2))
    return 0


def _average(args: argparse.Namespace) -> int:
    import torch

    from spanseek.trainer.average import average_checkpoints

    dtype = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}[args.dtype]
    check_writable(args.out)  # named now, not as the OUT.tmp folder it is written in once the models are read
    print(json.dumps(average_checkpoints(args.checkpoints, args.out, args.weights, dtype).to_dict(), indent=2))
    return 0


def _calibrate(args: argparse.Namespace) -> int:
    from spanseek.trainer.calibrate import calibrate

    if args.from_examples is None and (args.index is None or args.questions is None):
        raise ValueError("give --index and --questions (or --from-examples, to refit on collected examples)")
    calibrator = calibrate(args.index, args.questions, args.model, args.out, args.units, args.modes, args.C, args.limit,
                           args.cache, args.examples, args.features, args.from_examples, args.forms, args.add_to)
    print(json.dumps(calibrator.to_dict(), indent=2))
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    train = sub.add_parser("train", help="train models").add_subparsers(dest="train_command", required=True)
    for name, (config, _, text) in CONFIG_JOBS.items():
        p = train.add_parser(name, help=text)
        add_options(p, config)
        p.set_defaults(func=_config_job)

    p = train.add_parser("mine", help="mine hard negatives for the training split (resumable)")
    p.add_argument("--train", required=True, help="SQuAD-format training file (.json or .json.gz); only its "
                   "training split is mined")
    p.add_argument("--out", required=True, help="hard negatives to write (JSONL; .gz to compress)")
    p.add_argument("--miner", default="bm25", choices=["bm25", "model"],
                   help="bm25: lexical retrieval over the training paragraphs; model: a phrase model's search of "
                   "--index (default: %(default)s)")
    p.add_argument("--index", default=None, help="model miner: index of `corpus from-squad TRAIN`")
    p.add_argument("--model", default=None, help="model miner: the model that built --index")
    p.add_argument("--top-k", type=int, default=20, help="passages retrieved per question (default: %(default)s)")
    p.add_argument("--keep", type=int, default=4, help="hard negatives kept per question (default: %(default)s)")
    p.add_argument("--limit-questions", type=int, default=None, metavar="N",
                   help="mine for the first N training questions only (default: all of them)")
    p.set_defaults(func=_mine)

    p = train.add_parser("valsets", help="build the efficient-validation corpora (hard/gold/random/reference)")
    p.add_argument("--train", required=True, help="SQuAD-format training file; its held-out articles give the "
                   "questions")
    p.add_argument("--out", required=True, help="directory to write: questions.json.gz and hard, gold, random and "
                   "reference corpora (JSONL)")
    p.add_argument("--questions", type=int, default=500,
                   help="held-out questions sampled (all of them when fewer; default: %(default)s)")
    p.add_argument("--bm25-k", type=int, default=5,
                   help="passages BM25 retrieves per question for the hard corpus (default: %(default)s)")
    p.add_argument("--reference-extra", type=int, default=3000,
                   help="training paragraphs added to the reference corpus (all of them when fewer; default: "
                   "%(default)s)")
    p.set_defaults(func=_valsets)

    p = train.add_parser("rank-checkpoints", help="rank checkpoints on each validation corpus vs the reference")
    p.add_argument("--valsets", required=True, help="the --out directory of `spanseek train valsets`")
    p.add_argument("--checkpoints", nargs="+", required=True,
                   help="model directories to rank (or bundled model names)")
    p.add_argument("--out", default=None, help="ranking JSON file to write (it is printed either way)")
    p.set_defaults(func=_rank)

    p = train.add_parser(
        "calibrate", help="fit the hits' confidence (logistic on score features) on training questions, each also "
        "searched without its gold document; writes MODEL_DIR/calibration.json")
    p.add_argument("--index", default=None, help="an index of TRAINING articles (never the held-out ones)")
    p.add_argument("--questions", default=None, help="questions about the index's articles: SQuAD-format JSON, or JSON "
                   "Lines / CSV / TSV with answers and each question's title or doc_id")
    p.add_argument("--model", default="default", help="the model that built --index (its calibrator is written; "
                   "default: %(default)s)")
    p.add_argument("--out", default=None, help="calibration file (default: MODEL_DIR/calibration.json)")
    p.add_argument("--units", nargs="+", default=list(UNITS), choices=UNITS,
                   help="units whose hits get a calibrator (default: all)")
    p.add_argument("--modes", nargs="+", default=list(MODES), choices=MODES,
                   help="search modes whose hits get a calibrator (default: all)")
    p.add_argument("--C", type=float, nargs="+", default=[1.0],
                   help="inverse L2 strength of the logistic regression; several: each unit/mode gets the one with "
                   "the best held-out log loss over 5 folds split by article (default: 1.0)")
    p.add_argument("--limit", type=int, default=None, help="a fixed random sample of this many questions")
    p.add_argument("--cache", default=None, help="npz of the encoded questions (written once, then read)")
    p.add_argument("--examples", default=None, help="also write the collected features and labels to this npz")
    p.add_argument("--from-examples", default=None, help="refit on an earlier --examples file instead of searching")
    p.add_argument("--features", nargs="+", default=list(FEATURES), choices=FEATURES,
                   help="score features the model may use (the others get weight 0; default: all)")
    p.add_argument("--forms", nargs="+", default=["question"], choices=QUERY_FORMS,
                   help="ask every question in each of these forms and fit on all of them: as it is, as a search "
                   "box's keywords, as keywords in a shuffled order (default: question)")
    p.add_argument("--add-to", default=None, metavar="CALIBRATION", help="write this calibration file's models with "
                   "the keyword models of this fit added (its own kept as they are) instead of the fit alone; needs "
                   "--forms question keywords")
    p.set_defaults(func=_calibrate)

    p = train.add_parser("average", help="average checkpoints of one config into a new model (LoRA updates "
                         "averaged and refactored to the rank by SVD), or reader directories into a new reader")
    p.add_argument("checkpoints", nargs="+", help="model directories (or default; one just converts --dtype), or "
                   "reader directories (all of them: the result is a reader, fp16)")
    p.add_argument("--out", required=True, help="model directory to write")
    p.add_argument("--weights", type=float, nargs="+", default=None, help="one weight per checkpoint (default equal)")
    p.add_argument("--dtype", default="float32", choices=["float32", "float16", "bfloat16"],
                   help="store the weights in this type (float16 halves the adapters' size; default: %(default)s)")
    p.set_defaults(func=_average)
