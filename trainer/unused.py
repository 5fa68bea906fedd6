"""Flags that act only beside another (``--lambda-hard`` weighs the ``--hard-negatives``), or that another replaces
(``--init``'s reader config replaces ``--max-len``): given where the run would leave them unused, at a value other
than their default, the job is refused naming both, when its options are built (before any data or model is loaded):
a user who sets a flag expects it to act.

    spanseek train phrase --train TRAIN --out RUN --lambda-hard 2
    -> --lambda-hard 2.0 would go unused: it weighs the --hard-negatives, which are not given (give them, or leave
       --lambda-hard out)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol


class Distillation(Protocol):
    """The options of the distillation term (``LossConfig``'s, ``ReaderTrainConfig``'s)."""

    lambda_kl: float
    kl_temperature: float
    kl_level: str


def check_teacher_weight(teacher: str | None, teacher_cache: str | None, kl: Distillation) -> None:
    """The distillation term (weighed by ``kl.lambda_kl``) is on exactly when a teacher is given: a weight without a
    teacher (or the reverse), or a flag of the term's given without a teacher (which the run would leave unused), is a
    ValueError naming what is missing."""
    if teacher is None and kl.lambda_kl != 0:
        raise ValueError(f"--lambda-kl {kl.lambda_kl} weighs a teacher's term, and no --teacher is given (give one, or "
                         "leave --lambda-kl out)")
    if teacher is not None and kl.lambda_kl == 0:
        raise ValueError(f"--teacher {teacher} needs --lambda-kl > 0, the weight of its term (the recipe's: 4)")
    unused = [(flag, value) for flag, value, unset in (("--teacher-cache", teacher_cache, None),
              ("--kl-temperature", kl.kl_temperature, 1.0), ("--kl-level", kl.kl_level, "tokens")) if value != unset]
    if teacher is None and unused:
        raise ValueError(f"{unused[0][0]} {unused[0][1]} is for distilling from a teacher, and no --teacher is given "
                         f"(give one with --lambda-kl, or leave {unused[0][0]} out)")


@dataclasses.dataclass(frozen=True)
class Unused:
    """Options ``fields`` (``loss.lambda_hard`` for a nested one) that a run leaves unused where ``when(options)``
    holds: refused at other than their default ``because`` (formatted with the options as ``o``), with a ``remedy``.
    A config class lists its rules as ``UNUSED``, so that the resume of a run (``trainer.rundir.check_same_recipe``)
    disregards what the run leaves unused, as it was started with (a run started before such flags were refused).
    ``flags`` shows a field whose flag is not its name: ``{"encoder.lora.r": "--lora-r {}"}`` (``{}`` its value; a
    switch, ``"--full"``, has none)."""

    fields: tuple[str, ...]
    when: Callable[[Any], bool]
    because: str
    remedy: str
    flags: Mapping[str, str] = dataclasses.field(default_factory=dict)


# the rules of the training jobs' options (trainer.arguments: each config's UNUSED)
TRAINING = (
    Unused(("loss.lambda_hard", "hard_per_batch"), lambda o: o.hard_negatives is None,
           "it acts on the --hard-negatives, which are not given", "give them"),
    Unused(("prebatch_warmup", "loss.lambda_pre"), lambda o: o.prebatch == 0,
           "--prebatch 0 turns pre-batch negatives off", "give --prebatch N"))
PHRASE = (
    *TRAINING,
    Unused(("widen_lora", "stale_cache"), lambda o: o.init_from is None,
           "it acts on the model of --init-from, which is not given", "give --init-from"),
    # a new model's encoder (EncoderOptions): the model of --init-from keeps its own
    Unused(tuple(f"encoder.{name}" for name in ("backbone", "question_mode", "weights", "lora.r", "max_answer_tokens",
                                                "max_seq_len", "stride")), lambda o: o.init_from is not None,
           "the model of --init-from {o.init_from} keeps its own encoder settings; --widen-lora R widens its "
           "adapters", "leave out --init-from", {"encoder.weights": "--full",
                                                                              "encoder.lora.r": "--lora-r {}"}),
    Unused(("corrector", "corrector_lr"), lambda o: o.stale_cache is None,
           "the corrector corrects the vectors of --stale-cache, which is not given", "give --stale-cache"))
FILTER = (
    Unused(("train_windows", "val_windows", "batch_windows"), lambda o: o.from_index is not None,
           "--from-index {o.from_index} gives every token's vector: no windows are sampled or encoded",
           "leave out --from-index"),)
READER = (
    Unused(("backbone", "max_len", "stride", "max_query_len", "max_answer_tokens"), lambda o: o.init is not None,
           "the config of --init {o.init} replaces it", "leave out --init"),)


def refuse_unused(options: Any, rules: Sequence[Unused]) -> None:
    """ValueError naming the first field of ``rules`` that holds other than its default where its rule leaves it
    unused: ``--lambda-hard 2.0 would go unused: BECAUSE (REMEDY, or leave --lambda-hard out)``. A default given
    explicitly is the run's own value: accepted."""
    for rule in rules:
        if not rule.when(options):
            continue
        for path in rule.fields:
            value = _value(options, path)
            if value != default_of(type(options), path):
                shown = _shown(rule, path, value)
                flag = shown.split(" ")[0]
                raise ValueError(f"{shown} would go unused: {rule.because.format(o=options)} ({rule.remedy}, or "
                                 f"leave {flag} out)")


def left_unused(options: Any) -> list[str]:
    """The fields (dotted, as ``Unused.fields``) that a run of ``options`` leaves unused, by its class's ``UNUSED``."""
    return [path for rule in getattr(type(options), "UNUSED", ()) if rule.when(options) for path in rule.fields]


def _value(options: Any, path: str) -> Any:
    for name in path.split("."):
        options = getattr(options, name)
    return options


def default_of(cls: type, path: str) -> Any:
    """The default of ``cls``'s field ``path`` (a nested one's as the outer field's default holds it)."""
    first, _, rest = path.partition(".")
    field = next(f for f in dataclasses.fields(cls) if f.name == first)
    default = field.default_factory() if field.default_factory is not dataclasses.MISSING else field.default
    return _value(default, rest) if rest else default


def _shown(rule: Unused, path: str, value: Any) -> str:
    """How the command line gave field ``path`` its ``value``: ``--lambda-hard 2.0``, ``--no-corrector``."""
    if path in rule.flags:
        return rule.flags[path].format(value)
    flag = _flag(path.rsplit(".", 1)[-1], value)
    return flag if isinstance(value, bool) else f"{flag} {value}"


def _flag(name: str, value: Any) -> str:
    """The flag that gives an option ``name`` its ``value``: ``--hard-per-batch``; a switch turned off,
    ``--no-corrector``."""
    flag = name.replace("_", "-")
    return f"--no-{flag}" if value is False else f"--{flag}"
