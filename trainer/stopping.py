"""Stopping a training run cleanly on Ctrl-C or SIGTERM: the step under way finishes and its checkpoint is saved; a
Ctrl-C in the run's validation, after its training, says that the same command validates without training again.

    spanseek train phrase --train squad-train.json.gz --out runs/phrase   (Ctrl-C: "interrupted: stopped at step N")
"""

from __future__ import annotations

import contextlib
import logging
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from spanseek.indexer.interrupt import taking_stops


def trained_message(step: int, checkpoint: Path, after_loop: str) -> str:
    """What a run stopped once its training was done (its last ``step`` saved as ``checkpoint``) says: the same
    command does what the run does ``after_loop``, training no step."""
    return (f"stopped after the last step ({step}), saved as {checkpoint}; the same command {after_loop} without "
            "training again")


@contextlib.contextmanager
def after_training(step: int, checkpoint: Path, after_loop: str) -> Iterator[None]:
    """What a run does after its training (its validation): a Ctrl-C there says, as one in the last step does, that
    the training is done and what the same command does (``trained_message``); it said "interrupted" alone. So does
    a stop of the validation's own job (the build of its index of the held-out articles, which takes SIGTERM too):
    the job's line spoke of its index only, as if the same command would train again."""
    try:
        yield
    except KeyboardInterrupt as e:
        how = "stopped by SIGTERM; " if str(e).startswith(("SIGTERM", "stopped by SIGTERM")) else ""
        raise KeyboardInterrupt(f"{how}{trained_message(step, checkpoint, after_loop)}") from None


class StopAfterStep:
    """Ctrl-C (SIGINT) or SIGTERM (what ``kill``, ``docker stop`` and a scheduler send) in a training loop: the step
    under way finishes, the loop saves its checkpoint and stops (``requested``; ``stop_here`` raises
    KeyboardInterrupt saying where the run resumes, which the CLI reports as ``interrupted: ...``, status 130), so an
    interrupted run loses no finished step; a second signal stops at once. Only where Python takes signals (the main
    thread), and only the signals a job was not started to ignore, nor whose handler was set outside Python
    (``indexer.interrupt.taking_stops``); elsewhere nothing changes.

    A stop in the run's ``last_step`` stops before what the run does after its loop (``after_loop``: its validation,
    its summary), which the same command does when run again, training no step: the message says so."""

    def __init__(self, last_step: int | None = None, after_loop: str = "") -> None:
        self.requested = False
        self.last_step, self.after_loop = last_step, after_loop
        self._taking = contextlib.ExitStack()

    def __enter__(self) -> StopAfterStep:
        self._taking.enter_context(taking_stops(self._interrupt))  # (the main thread only; not a signal ignored)
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
            raise KeyboardInterrupt(trained_message(step, checkpoint, self.after_loop))
        raise KeyboardInterrupt(f"stopped at step {step}; the same command resumes from {checkpoint}")

    def __exit__(self, *exc: object) -> None:
        self._taking.close()
