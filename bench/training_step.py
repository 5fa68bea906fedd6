"""A training step's forward and backward on the CPU, with torch's dropout and with the trainer's (``trainer.dropout``).

    python bench/training_step.py --phrase-model default --reader default --out bench/results/training_step.json

Each model runs the shapes of one of its training steps on token ids drawn at random (the cost does not depend on
them): the phrase model encodes --windows passage windows of --seq-len tokens and --questions questions of
--question-len tokens, the reader reads --reader-windows windows; a random projection of the outputs is the loss,
and backward reaches every trainable weight, as in training. Steps alternate between the two dropouts (the model
in one arm has every ``nn.Dropout`` swapped for ``FastDropout``, the other untouched), after a warm-up step of
each, and the median seconds a step of each arm are reported with their ratio. Dropout draws a new mask at every
step in both arms.
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch: spin-waiting OpenMP crawls on shared CPUs
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import argparse  # noqa: E402
import copy  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from pathlib import Path  # noqa: E402

import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench/ helpers when run as a script
from machine import cpu_name  # noqa: E402

from spanseek.core.io import write_json_atomic  # noqa: E402
from spanseek.core.model import load_model  # noqa: E402
from spanseek.core.reader import load_reader_model  # noqa: E402
from spanseek.trainer.dropout import fast_dropout  # noqa: E402


def ids(rows: int, length: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randint(1000, 20000, (rows, length), generator=generator), torch.ones(rows, length, dtype=torch.long)


def phrase_step(args: argparse.Namespace) -> Callable[[torch.nn.Module], None]:
    g = torch.Generator().manual_seed(0)
    passages, questions = ids(args.windows, args.seq_len, g), ids(args.questions, args.question_len, g)

    def step(model: torch.nn.Module) -> None:
        tokens = model.encode_passages(*passages)
        q_start, q_end = model.encode_questions(*questions)
        w = torch.randn(3, tokens.shape[-1], generator=g)
        ((tokens @ w[0]).sum() + (q_start @ w[1]).sum() + (q_end @ w[2]).sum()).backward()
    return step


def reader_step(args: argparse.Namespace) -> Callable[[torch.nn.Module], None]:
    g = torch.Generator().manual_seed(1)
    windows = ids(args.reader_windows, args.seq_len, g)

    def step(model: torch.nn.Module) -> None:
        start, end = model(*windows)
        w = torch.randn(2, start.shape[-1], generator=g)
        ((start @ w[0]).sum() + (end @ w[1]).sum()).backward()
    return step


def compare(model: torch.nn.Module, step: Callable[[torch.nn.Module], None], steps: int) -> dict:
    """Median seconds a step with torch's dropout and with FastDropout, alternating, after a warm-up step of each."""
    model.train()
    fast = copy.deepcopy(model)
    swapped = fast_dropout(fast, "cpu")
    arms = {"torch_dropout": model, "fast_dropout": fast}
    times: dict[str, list[float]] = {name: [] for name in arms}
    for i in range(steps + 1):
        for name, m in arms.items():
            m.zero_grad(set_to_none=True)
            t = time.perf_counter()
            step(m)
            if i:  # the first step of each arm warms up
                times[name].append(time.perf_counter() - t)
    torch_s, fast_s = (statistics.median(times[n]) for n in arms)
    return {"dropout_modules_swapped": swapped, "torch_dropout_seconds": round(torch_s, 5),
            "fast_dropout_seconds": round(fast_s, 5), "speedup": round(torch_s / fast_s, 3),
            "steps": {n: [round(x, 5) for x in v] for n, v in times.items()}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--phrase-model", default="default", help="a phrase model (name or directory); '' skips it")
    ap.add_argument("--reader", default="default", help="a reader (name or directory); '' skips it")
    ap.add_argument("--windows", type=int, default=40, help="passage windows a phrase step encodes (32 + 8 hard)")
    ap.add_argument("--questions", type=int, default=136, help="questions a phrase step encodes")
    ap.add_argument("--question-len", type=int, default=24)
    ap.add_argument("--reader-windows", type=int, default=32)
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--steps", type=int, default=3, help="timed steps of each arm")
    ap.add_argument("--threads", type=int, default=torch.get_num_threads())
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    report: dict = {"benchmark": "training_step", "cpu": cpu_name(), "cpu_count": os.cpu_count(),
                    "torch_threads": args.threads, "precision": "fp32", "seq_len": args.seq_len}
    if args.phrase_model:
        model = load_model(args.phrase_model, for_inference=False)
        report["phrase"] = {"model": args.phrase_model, "windows": args.windows, "questions": args.questions,
                            **compare(model, phrase_step(args), args.steps)}
        del model
    if args.reader:
        reader = load_reader_model(args.reader)  # word embeddings frozen, the rest trained, as in training
        report["reader"] = {"reader": args.reader, "windows": args.reader_windows,
                            **compare(reader, reader_step(args), args.steps)}
    write_json_atomic(args.out, report)
    for part in ("phrase", "reader"):
        if part in report:
            r = report[part]
            print(f"{part}: {r['torch_dropout_seconds']} s a step with torch's dropout, {r['fast_dropout_seconds']} s "
                  f"with FastDropout ({r['speedup']}x)")


if __name__ == "__main__":
    main()
