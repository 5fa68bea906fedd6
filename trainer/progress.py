"""A training run's progress bar: its steps (with a total, so there is an ETA), the loss's moving average
(``SmoothedLoss``) and the
examples (questions; a reader's windows) trained per second; and the time and examples of this part of the run, which
its summary adds up.

    spanseek train phrase --train squad-train.json.gz --out runs/phrase   (train: 12%|█▏  | 120/1000 [loss=3.2 ...])
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

from tqdm.auto import tqdm

from spanseek.trainer.summary import RunSoFar

log = logging.getLogger(__name__)


class Progress:
    """What a run shows while it trains (``show``) and counts for its summary, from ``step`` of ``total``, the parts
    of the run ``before`` this one included; the rate of examples a second is shown as ``rate``."""

    def __init__(self, name: str, total: int, step: int, show: bool, before: RunSoFar, rate: str = "qps") -> None:
        self.before, self.rate = before, rate
        self.examples, self.t0, self.loss = 0, time.perf_counter(), before.loss
        self.first, self.total = step, total
        self.bar = tqdm(total=total, initial=step, desc=name, unit="step", disable=not show)

    def step_done(self, loss: float, examples: int) -> None:
        """A step of ``examples`` examples ended with ``loss``."""
        self.examples += examples
        self.loss = self.loss.add(loss)
        self.bar.set_postfix(self._postfix())
        self.bar.update(1)

    def _postfix(self) -> dict[str, str]:
        """The smoothed loss and the rate of examples a second, as the bar shows them."""
        return {"loss": f"{self.loss.value:.3f}", self.rate: f"{self.examples / (time.perf_counter() - self.t0):.1f}"}

    def saved(self, step: int, checkpoint: Path) -> None:
        """The checkpoint of ``step`` was saved to ``checkpoint``: where no bar shows the run (--no-progress: a job
        whose output goes to a log), the log says so with what the bar shows, the step, the loss, the rate and the
        time left."""
        if not self.bar.disable or step == self.first:
            return
        elapsed = time.perf_counter() - self.t0
        left = tqdm.format_interval((self.total - step) * elapsed / (step - self.first))
        shown = " ".join(f"{key}={value}" for key, value in self._postfix().items())
        log.info("step %d/%d: %s, %s left; saved %s", step, self.total, shown, left, checkpoint)

    def run(self) -> RunSoFar:
        """The run so far: the parts before this one, and this one's time, examples and loss up to now."""
        return self.before.plus(time.perf_counter() - self.t0, self.examples, self.loss)

    def close(self) -> None:
        self.bar.close()
