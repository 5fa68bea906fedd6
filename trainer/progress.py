"""A training run's progress bar: its steps (with a total, so there is an ETA), the loss's moving average and the
questions trained per second; and the time and questions of this part of the run, which its summary adds up.

    spanseek train phrase --train squad-train.json.gz --out runs/phrase   (train: 12%|█▏  | 120/1000 [loss=3.2 ...])
"""

from __future__ import annotations

import time

from tqdm.auto import tqdm

from spanseek.trainer.summary import RunSoFar


class Progress:
    """What a run shows while it trains (``show``) and counts for its summary, from ``step`` of ``total``."""

    def __init__(self, name: str, total: int, step: int, show: bool) -> None:
        self.questions, self.t0, self.loss_ema = 0, time.perf_counter(), None
        self.bar = tqdm(total=total, initial=step, desc=name, unit="step", disable=not show)

    def step_done(self, loss: float, questions: int) -> None:
        """A step of ``questions`` questions ended with ``loss``."""
        self.questions += questions
        self.loss_ema = loss if self.loss_ema is None else 0.98 * self.loss_ema + 0.02 * loss
        self.bar.set_postfix(loss=f"{self.loss_ema:.3f}", qps=f"{self.questions / (time.perf_counter() - self.t0):.1f}")
        self.bar.update(1)

    def run(self, before: RunSoFar) -> RunSoFar:
        """The run so far: the parts ``before`` this one, and this one's time and questions up to now."""
        return before.plus(time.perf_counter() - self.t0, self.questions)

    def close(self) -> None:
        self.bar.close()
