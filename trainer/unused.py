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
from collections.abc import Sequence
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


def refuse_unused(options: Any, fields: Sequence[str], unused: bool, because: str, remedy: str) -> None:
    """ValueError naming the first of ``fields`` (options' fields, ``loss.lambda_hard`` for a nested one) that holds
    other than its default where the run leaves them ``unused``: ``--lambda-hard 2.0 would go unused: BECAUSE
    (REMEDY, or leave --lambda-hard out)``. A default given explicitly is the run's own value: accepted."""
    if not unused:
        return
    for path in fields:
        value = _value(options, path)
        if value != default_of(type(options), path):
            flag = _flag(path.rsplit(".", 1)[-1], value)
            shown = flag if isinstance(value, bool) else f"{flag} {value}"
            raise ValueError(f"{shown} would go unused: {because} ({remedy}, or leave {flag} out)")


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


def _flag(name: str, value: Any) -> str:
    """The flag that gives an option ``name`` its ``value``: ``--hard-per-batch``; a switch turned off,
    ``--no-corrector``."""
    flag = name.replace("_", "-")
    return f"--no-{flag}" if value is False else f"--{flag}"
