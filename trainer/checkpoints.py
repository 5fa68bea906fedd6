"""Reading the checkpoint files a training job is given or resumes from, with one-line errors naming the file.

    spanseek train phrase --train squad-train.json.gz --out runs/phrase   (resumes from runs/phrase/last)
    spanseek train average RUN/snapshots/step-* --out runs/averaged

A weights file (safetensors: ``core.model.read_weights``) or a training state (``torch.save``) that a full disk, a killed copy or a stray edit
cut short is refused as ``PATH: cannot be read (...)`` instead of the library's traceback; a run's damaged
``OUT/last`` is found by ``check_checkpoint`` before the run tokenises its data.
"""

from __future__ import annotations

import dataclasses
import logging
import pickle
import signal
import threading
import zipfile
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError, safe_open

from spanseek.core.model import damaged

STATE = "trainer_state.pt"  # the optimizer, schedule and step of a run's checkpoint, beside its weights
SUMMARY = "summary.json"  # what a training run writes at its end, after its last step


def read_state(path: str | Path, remedy: str = "") -> dict[str, Any]:
    """A training state written by ``torch.save`` (trusted: the run's own); ModelError naming it when damaged."""
    path = Path(path)
    try:
        state = torch.load(path, weights_only=False, map_location="cpu")
    except (RuntimeError, EOFError, pickle.UnpicklingError, zipfile.BadZipFile) as e:
        raise damaged(path, e, remedy) from None
    if not isinstance(state, dict) or "step" not in state:
        raise damaged(path, "not a training state", remedy)
    return state


def check_weights(path: Path, remedy: str = "") -> None:
    """Refuse a safetensors file that is cut short (its header and length are read, not its tensors)."""
    try:
        with safe_open(str(path), framework="pt"):
            pass
    except (SafetensorError, OSError) as e:
        raise damaged(path, e, remedy) from None


def check_checkpoint(point: Path, weights_name: str, out: Path) -> None:
    """Refuse a run's checkpoint ``point`` whose weights or training state is cut short, naming the file and how to
    start over; cheap (headers and directories are read), so a run checks before it tokenises its data."""
    remedy = f"remove {point} to start the run in {out} over"
    check_weights(point / weights_name, remedy)
    try:
        with zipfile.ZipFile(point / STATE) as z:  # torch.save's format: a zip, its directory written last
            z.infolist()
    except (zipfile.BadZipFile, OSError) as e:
        raise damaged(point / STATE, e, remedy) from None


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


def after_loop(out: Path, validates: bool) -> str:
    """What a training run does after its last step, as ``StopAfterStep`` says it: the validation where it
    ``validates``, and the summary."""
    summary = f"writes {out / SUMMARY}"
    return f"validates it on the held-out questions and {summary}" if validates else summary


def checkpoint_saved(out: Path) -> None:
    """Called once a run saved the checkpoint of a step: a summary of the run's earlier end (a finished run now
    extended with more steps) describes weights no longer there, and would make the run look complete."""
    (out / SUMMARY).unlink(missing_ok=True)


@dataclasses.dataclass(frozen=True)
class RunSoFar:
    """What a run's summary adds up over its parts (a run stopped and resumed is trained in several processes): the
    seconds spent in the training loop and the questions trained on, up to the last checkpoint, and the steps each
    resumed part started at. Saved with each checkpoint; a checkpoint written before they were has none (the
    summary then covers the parts since)."""

    seconds: float = 0.0
    questions: int = 0
    resumed_at: tuple[int, ...] = ()

    @classmethod
    def of(cls, state: dict[str, Any], step: int | None) -> RunSoFar:
        """The parts before this one, from the checkpoint ``state`` it resumes from ({}: a new run), at ``step``
        (None: a finished run that trains no step)."""
        if not state:
            return cls()
        return cls(float(state.get("run_seconds", 0.0)), int(state.get("run_questions", 0)),
                   (*state.get("resumed_at", ()), *(() if step is None else (step,))))

    def plus(self, seconds: float, questions: int) -> RunSoFar:
        """With this part's time and questions so far."""
        return dataclasses.replace(self, seconds=self.seconds + seconds, questions=self.questions + questions)

    def state(self) -> dict[str, Any]:
        """What a checkpoint keeps of it."""
        return {"run_seconds": self.seconds, "run_questions": self.questions, "resumed_at": list(self.resumed_at)}

