"""Training speed with hard passages encoded every step vs read from a stale phrase cache (``--stale-cache``).

Runs ``train_phrase`` for ``--steps`` steps from ``--model`` once per arm, all in this process and with the same
settings, data order and seed, and reports each arm's questions/s (the training loop only: windows, tokenising
and filling the cache are outside it), the ratio to the first arm, and the stale cache's top-1 agreement with
fresh vectors. The arms:

- ``fresh``: the hard passages are encoded by the phrase encoder with the batch (the default);
- ``stale``: their vectors come from the cache, as they are (``--no-corrector``);
- ``corrected``: from the cache, through the target corrector.

The cache (``--cache``) is filled by ``--model`` if it is not already (about 5 minutes on 2 cores for SQuAD train
with 4 BM25 passages per question), and reused by both cache arms. Each arm writes a run directory under
``--work`` (deleted first), and the JSON goes to ``--out``.

    python bench/stale_cache_training.py --model default --train ../shared/data/squad-v1.1-train.json.gz \\
        --hard-negatives work/hard-bm25.jsonl --cache work/phrase-cache-defc --steps 30 --out runs/bench/stale.json
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import argparse  # noqa: E402
import json  # noqa: E402
import shutil  # noqa: E402
from pathlib import Path  # noqa: E402

from spanseek.core.io import write_json_atomic  # noqa: E402
from spanseek.trainer.losses import LossConfig  # noqa: E402
from spanseek.trainer.train import TrainConfig, train_phrase  # noqa: E402

ARMS = {"fresh": {}, "stale": {"corrector": False}, "corrected": {"corrector": True}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="default")
    ap.add_argument("--train", required=True)
    ap.add_argument("--hard-negatives", required=True)
    ap.add_argument("--cache", required=True, help="phrase cache of --model (filled if missing)")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--batch-windows", type=int, default=32)
    ap.add_argument("--hard-per-batch", type=int, default=8)
    ap.add_argument("--arms", default="fresh,stale,corrected")
    ap.add_argument("--work", default="runs/bench/stale-cache-runs")
    ap.add_argument("--precision", default="auto")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()

    results = {}
    for arm in args.arms.split(","):
        out = Path(args.work) / arm
        shutil.rmtree(out, ignore_errors=True)
        extra = ARMS[arm]
        cfg = TrainConfig(
            train=args.train, out=str(out), init_from=args.model, hard_negatives=args.hard_negatives,
            hard_per_batch=args.hard_per_batch, batch_windows=args.batch_windows, max_steps=args.steps,
            loss=LossConfig(lambda_inb=8.0), prebatch=0, lr=5e-4, val_questions=0,
            checkpoint_every=10**9, precision=args.precision, progress=False,
            stale_cache=args.cache if extra else None, corrector=extra.get("corrector", True),
        )
        summary = train_phrase(cfg)
        results[arm] = {"questions_per_second": summary["questions_per_second"], "seconds": summary["seconds"],
                        "stale_cache": summary.get("stale_cache")}
        print(arm, json.dumps(results[arm]), flush=True)
    first = next(iter(results.values()))["questions_per_second"]
    for r in results.values():
        r["ratio_to_first"] = round(r["questions_per_second"] / first, 3)
    report = {"steps": args.steps, "batch_windows": args.batch_windows, "hard_per_batch": args.hard_per_batch,
              "arms": results}
    write_json_atomic(args.out, report)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
