"""A run's checkpoint files: OUT/last written atomically, the one a killed run resumes from, and the files it reads
back with one-line errors naming the file.

    spanseek train phrase --train squad-train.json.gz --out runs/phrase   (resumes from runs/phrase/last)
    spanseek train average RUN/snapshots/step-* --out runs/averaged

A checkpoint is complete in ``NAME.saving`` before it replaces ``NAME`` (``save_checkpoint``), so a run killed at
any point resumes from a whole one (``resume_point``). A weights file (safetensors: ``core.model.read_weights``) or
a training state (``torch.save``) that a full disk, a killed copy or a stray edit cut short is refused as
``PATH: cannot be read (...)`` instead of the library's traceback; a run's damaged ``OUT/last`` is found by
``check_checkpoint`` before the run tokenises its data.
"""

from __future__ import annotations

import errno
import logging
import os
import pickle
import shutil
import zipfile
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError, safe_open

from spanseek.core.evaluate import write_trained_questions
from spanseek.core.integrity import fsync_path
from spanseek.core.io import atomic_path, no_space
from spanseek.core.model import PhraseModel, damaged

log = logging.getLogger(__name__)

STATE = "trainer_state.pt"  # the optimizer, schedule and step of a run's checkpoint, beside its weights


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



def resume_point(out: Path, name: str = "last") -> Path | None:
    """The checkpoint a run into ``out`` resumes from: out/name if it holds a training state; where out/name is
    missing, what a run killed between the renames of ``save_checkpoint`` left: name.saving (complete once its state
    is there, as that is written last) or else name.old. None for a new run."""
    candidates = [out / name] if (out / name).exists() else [out / f"{name}.saving", out / f"{name}.old"]
    return next((path for path in candidates if (path / STATE).is_file()), None)


def recover_checkpoint(out: Path, name: str = "last") -> None:
    """Put the checkpoint ``resume_point`` picks at out/name when a run was killed between the renames of
    ``save_checkpoint`` (out/name missing), so that the next save does not remove it."""
    point = resume_point(out, name)
    if point is not None and point != out / name:
        log.warning("%s is missing (a run was killed while saving it); resuming from %s", out / name, point)
        point.rename(out / name)


CARD = "README.md"  # a checkpoint's model card (trainer.summary.model_card), as a bundled model has one


def save_snapshot(model: Any, out: Path, step: int, trained: tuple[list[str], str, str] | None = None,
                  card: str | None = None) -> Path:
    """Keep a copy of ``model`` (a phrase model or a reader) at ``step`` in OUT/snapshots/step-N, with the questions
    it was ``trained`` on and its model ``card`` (README.md: what it is, as OUT/last's says). A save that is stopped
    (a second Ctrl-C stops at once) or fails removes what it wrote of the copy (step-N.tmp: ``core.io.atomic_dir``),
    which ``spanseek train average RUN/snapshots/step-*`` would take for a snapshot."""
    path = model.save(out / "snapshots" / f"step-{step:06d}")
    if trained is not None:
        write_trained_questions(path, *trained)
    if card is not None:
        with atomic_path(path / CARD) as tmp:
            tmp.write_text(card, encoding="utf-8")
    return path


def save_checkpoint(model: PhraseModel, out: Path, name: str, state: dict | None,
                    trained: tuple[list[str], str, str] | None = None, card: str | None = None) -> None:
    """Save a checkpoint (and the optimizer state) to out/name, replacing it atomically; ``trained`` (the questions,
    the training file, the examples' digest) is recorded with it (``core.evaluate.TRAINED_QUESTIONS``), and ``card``
    (the model card: how it was trained) as its README.md.

    The new checkpoint is complete in out/name.saving (its state written last, by a rename, and flushed to disk)
    before the old one is moved aside, so a run killed between the two renames resumes from it (``resume_point``).
    A save that fails (a full disk) removes what it wrote, keeping the old checkpoint as it was; a full disk is an
    OSError naming out/name, "No space left on device", and that the run resumes from the checkpoint kept.
    """
    tmp = out / f"{name}.saving"
    final = out / name
    partial = (tmp, tmp.with_name(f"{tmp.name}.tmp"))  # (model.save writes name.saving.tmp, then renames it)
    for path in partial:
        shutil.rmtree(path, ignore_errors=True)
    try:
        model.save(tmp)
        if trained is not None:
            write_trained_questions(tmp, trained[0], trained[1], trained[2])
        if card is not None:
            (tmp / CARD).write_text(card, encoding="utf-8")
        if state is not None:
            # into a file object: its write raises the OSError (torch.save to a path turns a full disk into
            # "[enforce fail at inline_container.cc:672] . unexpected pos 90112 vs 90000")
            with open(tmp / f"{STATE}.tmp", "wb") as f:
                torch.save(state, f)
            (tmp / f"{STATE}.tmp").rename(tmp / STATE)
        fsync_path(tmp)
    except BaseException as e:
        for path in partial:  # neither holding the room the next save needs nor taken for a checkpoint
            shutil.rmtree(path, ignore_errors=True)
        if not no_space(e):
            raise
        kept = ("the checkpoint there before is kept: free some space and run the same command to resume from it"
                if resume_point(out, name) else "free some space and run the same command")
        raise OSError(errno.ENOSPC, f"{os.strerror(errno.ENOSPC)} while saving the checkpoint; {kept}",
                      str(final)) from None
    old = out / f"{name}.old"
    shutil.rmtree(old, ignore_errors=True)
    if final.exists():
        final.rename(old)
    tmp.rename(final)
    shutil.rmtree(old, ignore_errors=True)
