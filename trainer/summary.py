"""What a training run reports: the time and questions it trained on, added up over its stopped and resumed parts,
and at its end the validation on held-out questions and OUT/summary.json.

    spanseek train phrase --train squad-train.json.gz --out runs/phrase   (writes runs/phrase/summary.json)
"""

from __future__ import annotations

import dataclasses
import gzip
import json
from pathlib import Path
from typing import Any

from spanseek.core.config import EncoderConfig
from spanseek.core.io import atomic_path, load_squad, squad_questions, write_json_atomic
from spanseek.core.model import CONFIG_NAME
from spanseek.core.reader import READER_CONFIG_NAME
from spanseek.trainer.arguments import (
    EncoderOptions,
    JobOptions,
    QsftConfig,
    ReaderTrainConfig,
    TrainingOptions,
)
from spanseek.trainer.checkpoints import CARD
from spanseek.trainer.stopping import after_training
from spanseek.trainer.unused import default_of

SUMMARY = "summary.json"  # what a training run writes at its end, after its last step




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
class SmoothedLoss:
    """The training loss's exponential moving average over about the last 50 steps, corrected for its start (as
    Adam's moments are): the mean of the steps so far while there are few of them, instead of a value that holds
    the first step's loss at most of its weight for a hundred steps (30 steps showed 9.65 where they went from 10.2
    to 8.7)."""

    total: float = 0.0  # sum of each step's loss times its weight
    weight: float = 0.0  # sum of the weights: 1 - DECAY ** steps

    DECAY = 0.98

    def add(self, loss: float) -> SmoothedLoss:
        """With one more step's ``loss``."""
        return SmoothedLoss(self.DECAY * self.total + (1 - self.DECAY) * loss,
                            self.DECAY * self.weight + (1 - self.DECAY))

    @property
    def value(self) -> float | None:
        """The smoothed loss; None before the first step."""
        return self.total / self.weight if self.weight > 0 else None


@dataclasses.dataclass(frozen=True)
class RunSoFar:
    """What a run's summary adds up over its parts (a run stopped and resumed is trained in several processes): the
    seconds spent in the training loop and the examples trained on (questions; a reader's windows), up to the last
    checkpoint, the steps each resumed part started at, and the smoothed loss at the last checkpoint (which a resumed
    run goes on from). Saved with each checkpoint; a checkpoint written before they were has none (the summary then
    covers the parts since)."""

    seconds: float = 0.0
    examples: int = 0
    resumed_at: tuple[int, ...] = ()
    loss: SmoothedLoss = SmoothedLoss()

    @classmethod
    def of(cls, state: dict[str, Any], step: int | None) -> RunSoFar:
        """The parts before this one, from the checkpoint ``state`` it resumes from ({}: a new run), at ``step``
        (None: a finished run that trains no step)."""
        if not state:
            return cls()
        return cls(float(state.get("run_seconds", 0.0)), int(state.get("run_questions", 0)),
                   (*state.get("resumed_at", ()), *(() if step is None else (step,))),
                   SmoothedLoss(*state.get("run_loss", ())))

    def plus(self, seconds: float, examples: int, loss: SmoothedLoss) -> RunSoFar:
        """With this part's time and examples so far, and the smoothed ``loss`` now."""
        return dataclasses.replace(self, seconds=self.seconds + seconds, examples=self.examples + examples, loss=loss)

    def state(self) -> dict[str, Any]:
        """What a checkpoint keeps of it."""
        return {"run_seconds": self.seconds, "run_questions": self.examples, "resumed_at": list(self.resumed_at),
                "run_loss": [self.loss.total, self.loss.weight]}

    def summary(self, rate: str) -> dict[str, Any]:
        """What a summary says of it: the smoothed loss at the end, the seconds, the examples a second as ``rate``,
        and the steps it resumed at."""
        loss = self.loss.value
        return {"loss": None if loss is None else round(loss, 4), "seconds": round(self.seconds, 1),
                rate: round(self.examples / self.seconds, 2) if self.examples and self.seconds > 0 else None,
                **({"resumed_at": list(self.resumed_at)} if self.resumed_at else {})}


def loop_summary(run: RunSoFar, steps: int, windows: int, questions: int, precision: str, device: str,
                 world: int, rate: str = "questions_per_second") -> dict[str, Any]:
    """The part of a run's summary that the training loop knows: its steps, examples, time (and speed, as ``rate``)
    and where it ran."""
    return {
        "steps": steps,
        "train_questions": questions,
        "train_windows": windows,
        **run.summary(rate),
        "precision": precision,
        "device": device,
        "world_size": world,
    }


def check_validation_split(cfg: JobOptions, data: list[dict], wanted: int, flag: str = "--val-questions",
                           asked: str | None = None) -> None:
    """A run that validates (``wanted`` held-out questions or windows, by ``flag``) needs questions in the held-out
    articles: refused before training (it failed after the whole run). ``asked``: what the message names as asking
    for them, where ``flag`` is not used (default: ``flag`` and ``wanted``)."""
    if wanted and not squad_questions(data, cfg.holdout.held):
        off = "give --val-questions 0, " if flag == "--val-questions" else ""  # (the filter is always validated)
        raise ValueError(f"{asked or f'{flag} {wanted}'}: {cfg.train} has no questions in its held-out articles (every "
                         f"{cfg.holdout.every}th from article {cfg.holdout.offset}: {len(data)} articles); hold out "
                         f"others (--holdout-every N --holdout-offset K: article i is held out when i % N == K), {off}"
                         "or a file with more articles")


def write_holdout(cfg: JobOptions, path: Path) -> Path:
    """Write the held-out articles of the training file as a SQuAD-format .json.gz (the validation set)."""
    _, held = cfg.holdout.split(load_squad(cfg.train))
    with gzip.open(path, "wt", encoding="utf-8") as f:
        json.dump({"version": "spanseek-holdout", "data": held}, f)
    return path


def run_data(cfg: JobOptions) -> dict[str, Any]:
    """What a summary says a run trained on: its training file (a full path) and the seed of its draws."""
    return {"train": str(Path(cfg.train).resolve()), "seed": cfg.seed}


def finish(cfg: TrainingOptions, summary: dict[str, Any], val_index: str | None = None) -> dict[str, Any]:
    """Evaluate OUT/last on ``val_questions`` held-out questions (on ``val_index`` if given, else on an index built
    of the held-out articles) and write OUT/summary.json, which starts with what the run trained on (``run_data``)."""
    out = Path(cfg.out)
    summary = run_data(cfg) | summary
    if cfg.val_questions:
        from spanseek.indexer.evaluate import run_eval

        with after_training(summary["steps"], out / "last", after_loop(out, True)):
            val = write_holdout(cfg, out / "validation.json.gz")
            summary["validation"] = run_eval(val, out / "last", index=val_index, reading_comprehension=True,
                                             limit=cfg.val_questions, progress=cfg.progress)
        write_validated_card(cfg, summary)
    write_json_atomic(out / SUMMARY, summary)
    return summary


def write_validated_card(cfg: JobOptions, summary: dict[str, Any]) -> None:
    """Replace OUT/last's model card by the card of the model validated: with its metrics (``summary["validation"]``)."""
    with atomic_path(Path(cfg.out) / "last" / CARD) as tmp:
        tmp.write_text(model_card(cfg, summary), encoding="utf-8")


def model_card(cfg: JobOptions, run: dict[str, Any], total: int | None = None, snapshot: bool = False) -> str:
    """The model card a run writes with its checkpoint (``OUT/last/README.md``) and with each snapshot
    (``OUT/snapshots/step-N/README.md``, ``snapshot``), as a bundled model has one (core/models/default/README.md):
    how the model (a phrase model, or a reader) was trained, as far as the run knows it: the command (the run's
    options other than their defaults), the training data and held-out split, the steps (of ``total``), the smoothed
    training loss there, the time in the training loop, the device, and the validation metrics once the run has
    validated it (``run["validation"]``; a snapshot is not validated). ``run``: the summary's part the loop knows
    (``loop_summary``)."""
    kind = "qsft" if isinstance(cfg, QsftConfig) else "reader" if isinstance(cfg, ReaderTrainConfig) else "phrase"
    command = " ".join([f"spanseek train {kind}", *_flags(cfg)])
    steps = f"{run['steps']} of {total}" if total is not None and total != run["steps"] else str(run["steps"])
    world = f" x {run['world_size']} processes" if run.get("world_size", 1) > 1 else ""
    # (the held-out articles are written where they validate an index: phrase and qsft runs; a reader reads them)
    written = " (the run's validation.json.gz)" if isinstance(cfg, TrainingOptions) and cfg.val_questions else ""
    rows = [("trained by", f"`{command}`"),
            ("training data", f"{Path(cfg.train).resolve()}: {run['train_questions']} questions in "
                              f"{run['train_windows']} windows; every {cfg.holdout.every}th article from article "
                              f"{cfg.holdout.offset} held out{written}, seed {cfg.seed}"),
            ("steps", steps), *([("training loss", f"{run['loss']} (smoothed over the last steps)")]
                                if run.get("loss") is not None else []),
            ("time", f"{run['seconds']} s in the training loop"),
            ("device", f"{run['device']}{world}, {run['precision']}")]
    validation = run.get("validation")
    rows.append(("validation", "on held-out questions: below" if validation is not None else
                 "none (a snapshot; `spanseek train rank-checkpoints` ranks a run's snapshots on held-out questions)"
                 if snapshot else "none yet (the run validates its last checkpoint at its end)" if cfg.val_questions
                 else "none (--val-questions 0)"))
    table = "\n".join(f"| {k} | {v} |" for k, v in rows)
    measured = ("" if validation is None else
                f"\n## Validation\n\n```json\n{json.dumps(validation, indent=2, sort_keys=True)}\n```\n")
    use = (f"The reader config is `{READER_CONFIG_NAME}` beside this card; `spanseek search --read --reader` this "
           "directory reads the top passages with it." if kind == "reader" else f"The encoder config is `{CONFIG_NAME}` "
           "beside this card; `spanseek eval --model` this directory measures it on other questions.")
    what = f"step {run['steps']} snapshot of " if snapshot else ""
    return (f"# spanseek {'reader' if kind == 'reader' else 'model'}: {what}`spanseek train {kind}` into {cfg.out}\n\n"
            f"## How it was made\n\n| | |\n|---|---|\n{table}\n\n{use}\n{measured}")


def _flags(cfg: Any) -> list[str]:
    """The flags that give ``cfg`` its options other than their defaults (a nested group's, ``--loss``'s fields,
    as their own flags; the encoder of a new model as ``EncoderOptions``' flags, ``--question-mode separate``)."""
    flags = []
    for field in dataclasses.fields(cfg):
        value = getattr(cfg, field.name)
        if field.metadata.get("cli") is False or value == default_of(type(cfg), field.name):
            continue
        if isinstance(value, EncoderConfig):  # (built from EncoderOptions: EncoderOptions.build)
            given = {"backbone": value.backbone, "question_mode": value.question_mode, "full": value.weights == "full",
                     "lora_r": value.lora.r, "max_answer_tokens": value.max_answer_tokens,
                     "max_seq_len": value.max_seq_len, "stride": value.stride}
            flags += [_flag(f, given[f.name]) for f in dataclasses.fields(EncoderOptions) if given[f.name] != f.default]
        elif dataclasses.is_dataclass(value):
            default = default_of(type(cfg), field.name)
            flags += [_flag(f, getattr(value, f.name)) for f in dataclasses.fields(value)
                      if getattr(value, f.name) != getattr(default, f.name)]
        else:
            flags.append(_flag(field, value))
    return flags


def _flag(field: dataclasses.Field, value: Any) -> str:
    """``--name value`` for one option (a switch: ``--name`` or ``--no-name``)."""
    flag = field.metadata.get("flag") or f"--{field.name.replace('_', '-')}"
    if isinstance(value, bool):
        return flag if value else f"--no-{flag[2:]}"
    return f"{flag} {value}"
