"""A training run's progress bar: its steps (with a total, so there is an ETA), the loss's moving average and the
examples (questions; a reader's windows) trained per second; and the time and examples of this part of the run, which
its summary adds up.

    spanseek train phrase --train squad-train.json.gz --out runs/phrase   (train: 12%|█▏  | 120/1000 [loss=3.2 ...])
"""

from __future__ import annotations

import time

from tqdm.auto import tqdm

from spanseek.trainer.summary import RunSoFar


class Progress:
    """What a run shows while it trains (``show``) and counts for its summary, from ``step`` of ``total``; the rate
    of examples a second is shown as ``rate``."""

    def __init__(self, name: str, total: int, step: int, show: bool, rate: str = "qps") -> None:
        self.examples, self.t0, self.loss_ema, self.rate = 0, time.perf_counter(), None, rate
        self.bar = tqdm(total=total, initial=step, desc=name, unit="step", disable=not show)

    def step_done(self, loss: float, examples: int) -> None:
        """A step of ``examples`` examples ended with ``loss``."""
        self.examples += examples
        self.loss_ema = loss if self.loss_ema is None else 0.98 * self.loss_ema + 0.02 * loss
        self.bar.set_postfix({"loss": f"{self.loss_ema:.3f}",
                              self.rate: f"{self.examples / (time.perf_counter() - self.t0):.1f}"})
        self.bar.update(1)

    def run(self, before: RunSoFar) -> RunSoFar:
        """The run so far: the parts ``before`` this one, and this one's time and examples up to now."""
        return before.plus(time.perf_counter() - self.t0, self.examples)

    def close(self) -> None:
        self.bar.close()
