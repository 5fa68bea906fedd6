"""Stopping a training run cleanly on Ctrl-C or SIGTERM: the step under way finishes and its checkpoint is saved.

    spanseek train phrase --train squad-train.json.gz --out runs/phrase   (Ctrl-C: "interrupted: stopped at step N")
"""

from __future__ import annotations

import logging
import signal
import threading
from pathlib import Path
from typing import Any


class StopAfterStep:
    """Ctrl-C (SIGINT) or SIGTERM (what ``kill``, ``docker stop`` and a scheduler send) in a training loop: the step
    under way finishes, the loop saves its checkpoint and stops (``requested``; ``stop_here`` raises
    KeyboardInterrupt saying where the run resumes, which the CLI reports as ``interrupted: ...``, status 130), so an
    interrupted run loses no finished step; a second signal stops at once. Only where Python takes signals (the main
    thread), and only the signals a job was not started to ignore; elsewhere nothing changes.

    A stop in the run's ``last_step`` stops before what the run does after its loop (``after_loop``: its validation,
    its summary), which the same command does when run again, training no step: the message says so."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self, last_step: int | None = None, after_loop: str = "") -> None:
        self.requested = False
        self.last_step, self.after_loop = last_step, after_loop
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> StopAfterStep:
        if threading.current_thread() is threading.main_thread():
            for signum in self.SIGNALS:
                if signal.getsignal(signum) is not signal.SIG_IGN:  # (a job started to ignore it still does)
                    self._previous[signum] = signal.signal(signum, self._interrupt)
        return self

    def _interrupt(self, signum: int, frame: Any) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True
        again = "Ctrl-C" if signum == signal.SIGINT else signal.Signals(signum).name
        logging.getLogger("spanseek.trainer").warning("stopping after this step, once its checkpoint is saved "
                                                      "(%s again to stop at once)", again)

    def stop_here(self, step: int, checkpoint: Path) -> None:
        """Stop (KeyboardInterrupt), saying where the run resumes: called after the step whose checkpoint was saved
        because ``requested`` was read True before the save (a signal that comes during the save stops the run
        after the next step, not before its checkpoint)."""
        if step == self.last_step:
            raise KeyboardInterrupt(f"stopped after the last step ({step}), saved as {checkpoint}; the same command "
                                    f"{self.after_loop} without training again")
        raise KeyboardInterrupt(f"stopped at step {step}; the same command resumes from {checkpoint}")

    def __exit__(self, *exc: object) -> None:
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)
