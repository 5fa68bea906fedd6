"""A training run's output directory (--out): held by one run at a time, and resumed only by a run of the same
kind (`spanseek train phrase`, `qsft` or `reader`), model settings, recipe and training examples as the one that
started it.

    spanseek train phrase --train squad-train.json.gz --out runs/phrase   (OUT/train.lock, OUT/train_config.json)

Each check runs before the run writes anything but its lock, and names what differs and what to do instead.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
from collections.abc import Collection, Iterable, Iterator
from pathlib import Path
from typing import Any, Literal

from spanseek.core.config import EncoderConfig
from spanseek.core.evaluate import trained_questions
from spanseek.core.integrity import writer_lock
from spanseek.core.model import CONFIG_NAME, WEIGHTS_NAME
from spanseek.core.reader import READER_CONFIG_NAME
from spanseek.trainer.checkpoints import check_checkpoint, resume_point
from spanseek.trainer.data import TrainWindow

RUN_LOCK = "train.lock"  # a training run's lock in its --out (core.integrity.writer_lock)


@contextlib.contextmanager
def run_lock(out: Path, hold: bool = True) -> Iterator[None]:
    """Make ``out`` (and its missing parents) and hold its lock for a run's life (``hold`` False: a data-parallel
    rank that writes nothing): a second run into the same directory is refused at its start instead of mixing
    checkpoints with the first. A run that ends in an error before it wrote anything but the lock (a refused
    --backbone, say) leaves nothing it made: its lock file and the directories it made are removed; an --out that
    was there before is kept as it was."""
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {out} is a file, not a run directory: give a new directory (or a run's, to resume it)")
    made = [p for p in (out, *out.parents) if not p.exists()]  # deepest first
    out.mkdir(parents=True, exist_ok=True)
    if not hold:
        yield
        return
    there = {p.name for p in out.iterdir()}
    with writer_lock(out, name=RUN_LOCK) as locked:
        if not locked:
            if not os.access(out, os.W_OK):
                raise ValueError(f"--out {out} is not writable")
            raise ValueError(f"--out {out}: another run holds it (lock {out / RUN_LOCK}); wait for it to end or use "
                             "a new --out")
        try:
            yield
        except BaseException:
            if RUN_LOCK not in there:
                _remove_unused(out, there, made)
            raise


def _remove_unused(out: Path, there: set[str], made: list[Path]) -> None:
    """Remove the lock of a run that added nothing else to ``out`` (whose entries were ``there``), then the
    directories of ``made`` (deepest first) that are empty; while the lock is held, so no other run has taken it."""
    with contextlib.suppress(OSError):  # the run's own error is the one to report
        if {p.name for p in out.iterdir()} - there != {RUN_LOCK}:
            return
        (out / RUN_LOCK).unlink()
        for directory in made:
            directory.rmdir()  # OSError (not empty: another job wrote there meanwhile) ends the removal


Trained = tuple[list[str], str, str]  # what a checkpoint records of its training: questions, file, examples' digest


def examples_digest(examples: Iterable[Any]) -> str:
    """SHA-1 of what a run trains on, one JSON value per example, in order (a resumed run must train on the same)."""
    h = hashlib.sha1()
    for example in examples:
        h.update(json.dumps(example).encode("utf-8"))
    return h.hexdigest()


def trained_windows(windows: list[TrainWindow], train: str) -> Trained:
    """What a phrase model's checkpoint records of its training (``check_resume_data``): its windows' questions,
    the training file, and the digest of each window's passage and place, and its questions with their gold tokens
    and answers."""
    return ([q for w in windows for q in w.questions], str(train),
            examples_digest([w.passage, w.first, w.questions, w.starts, w.ends, w.answers] for w in windows))


def check_resume_data(out: Path, trained: Trained) -> None:
    """Refuse to resume the run in ``out`` on other training examples than its checkpoint was trained on
    (``trained``: this run's, as its checkpoints record them; an edited training file, or another one): it would go
    on from the old run's step, or, finished, change nothing while its summary named the new file. The same examples
    in a moved file resume. A checkpoint without the record (older runs) is resumed as before."""
    point = resume_point(out)
    record = trained_questions(point) if point is not None else None
    questions, train, digest = trained
    if record is None or not record.get("examples") or record["examples"] == digest:
        return
    raise ValueError(f"--out {out} holds a run trained on other questions ({record['questions']} of "
                     f"{record.get('source')}; this run has {len(questions)} of {train}): use a new --out for a run on these "
                     f"questions, or remove {out} to start over")


def check_resume(out: Path, config: EncoderConfig) -> None:
    """Refuse to resume the run in ``out`` with a model of another encoder config than its checkpoint's (its
    weights would not fit), naming the settings that differ, or from a checkpoint whose files are cut short
    (``check_checkpoint``); before the run writes anything but its lock."""
    point = resume_point(out)
    if point is None:
        return
    check_checkpoint(point, WEIGHTS_NAME, out)

    def settings(c: EncoderConfig) -> dict[str, Any]:  # nested settings by their dotted name ("lora.r")
        flat: dict[str, Any] = {}
        for k, v in c.to_dict().items():
            flat |= {f"{k}.{sub}": w for sub, w in v.items()} if isinstance(v, dict) else {k: v}
        return flat

    ours, theirs = settings(config), settings(EncoderConfig.load(point / CONFIG_NAME))
    differ = [f"{k} {theirs.get(k)!r} (this run: {ours.get(k)!r})" for k in sorted(ours.keys() | theirs.keys())
              if ours.get(k) != theirs.get(k)]
    if differ:
        raise ValueError(f"--out {out} holds a run with other settings: {'; '.join(differ)}; use a new --out (or "
                         "resume with the same settings)")


TRAIN_CONFIG = "train_config.json"  # the settings a phrase or reader run was last started with, in its --out
QSFT_CONFIG = "qsft_config.json"  # the same for a QSFT run

RunKind = Literal["phrase", "qsft", "reader"]  # the `spanseek train` command a run directory is of


def run_kind(out: Path) -> RunKind | None:
    """The kind of training run ``out`` holds, from its files: a QSFT run's settings, else its checkpoint's config
    (a reader's or a phrase model's), else the settings of a run stopped before its first checkpoint (a reader's
    batches are ``batch_size`` windows, a phrase run's ``batch_windows``). None where it holds no run."""
    if (out / QSFT_CONFIG).is_file():
        return "qsft"
    point = resume_point(out)
    if point is not None and (point / READER_CONFIG_NAME).is_file():
        return "reader"
    if point is not None and (point / CONFIG_NAME).is_file():
        return "phrase"
    settings = _settings(out / TRAIN_CONFIG) if (out / TRAIN_CONFIG).is_file() else {}
    return "reader" if "batch_size" in settings else "phrase" if "batch_windows" in settings else None


def check_run_kind(out: Path, kind: RunKind) -> None:
    """Refuse a ``kind`` run into an ``out`` that holds a run of another kind (it would resume that run's checkpoint
    with another model, or write its files among that run's), or that is a model directory (a run's OUT/last, say:
    the run's own checkpoints would replace it, and a run inside it with it), before the run writes anything but its
    lock."""
    for name in (CONFIG_NAME, READER_CONFIG_NAME):
        if (out / name).is_file():
            raise ValueError(f"--out {out} is a model directory ({name}), not a run directory: a run writes its model "
                             "to OUT/last; it is left as it is: use a new --out")
    theirs = run_kind(out)
    if theirs is not None and theirs != kind:
        raise ValueError(f"--out {out} holds a `spanseek train {theirs}` run, not a {kind} run; it is left as it is: "
                         f"use a new --out for this {kind} run")


# recorded settings an earlier run took for "unset" and that are now refused as out of range (a reader's
# --limit-questions 0 trained on every question): such a run resumes with the setting left out, as it means the same
UNSET_BEFORE = {"limit_questions": 0}


def recorded(cfg: Any) -> dict[str, Any]:
    """The settings a phrase or QSFT run records and resumes by: its options, the loss's pre-batch weight resolved
    (``LossConfig.resolved``). A dict, not a config built again: that is checked again, and the resolved weight of
    a run with --prebatch 0 was refused there as a flag it leaves unused."""
    return {**dataclasses.asdict(cfg), "loss": dataclasses.asdict(cfg.loss.resolved())}


def check_same_recipe(out: Path, now: dict[str, Any], recipe: tuple[str, ...], name: str = TRAIN_CONFIG,
                      unused: Collection[str] = ()) -> None:
    """Refuse to resume the run in ``out`` with other ``recipe`` settings than it was started with (its settings
    file ``name``; ``now``: this run's settings by name), naming them; resuming with another --lr ran on at the
    first one while the run's files recorded the second. A run without the file (older runs) resumes as before.
    The settings this run leaves ``unused`` (``trainer.unused.left_unused``: ``loss.lambda_hard`` without hard
    negatives) are not compared: a run started with one at another value (before such flags were refused) resumes."""
    path = out / name
    if resume_point(out) is None or not path.is_file():
        return
    before = {key: None if key in UNSET_BEFORE and value == UNSET_BEFORE[key] else value
              for key, value in _settings(path).items()}
    for dotted in unused:  # (the options that leave them unused are in the recipe: compared as they are)
        key, _, field = dotted.partition(".")
        if not field and key in before:
            before[key] = now.get(key)
        elif isinstance(before.get(key), dict) and isinstance(now.get(key), dict):
            before[key] = {**before[key], field: now[key].get(field)}
    differ = [f"{key} {before[key]!r} (this run: {now[key]!r})" for key in recipe
              if key in before and json.loads(json.dumps(now[key])) != before[key]]
    if differ:
        raise ValueError(f"--out {out} holds a run started with other settings: {'; '.join(differ)}; resume with "
                         "the same ones (--epochs and --max-steps may change), or use a new --out")


def _settings(path: Path) -> dict[str, Any]:
    """A run's settings file, read back; ValueError naming it where it is not the JSON object a run writes."""
    try:
        settings = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"{path}: not a run's settings ({e}); remove it to resume the run without checking that its "
                         "settings are the same") from None
    if not isinstance(settings, dict):
        raise ValueError(f"{path}: not a run's settings (a JSON object); remove it to resume the run without "
                         "checking that its settings are the same")
    return settings
