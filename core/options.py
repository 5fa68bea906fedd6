"""Command-line flags generated from config dataclasses (training: trainer.arguments; indexing: indexer.build).

    spanseek train phrase --help
    spanseek index build --help

A field ``batch_windows: int = option(24, "passage windows per step")`` becomes the flag ``--batch-windows`` with
that default and help (as tevatron's argument dataclasses and Hugging Face's ``HfArgumentParser`` do), so a new
option is one line. ``bool`` fields become ``--name/--no-name``; ``Literal`` types give the choices; ``bool |
Literal`` fields ``--name [CHOICE]/--no-name`` (``OptionsParser`` reads the choice after the flag); ``X | None`` parses
as X; a field without a default is a required flag. A field whose value is a dataclass (the loss) gives
one flag per field of that dataclass; a field with ``options=`` (a new model's encoder) is built by the ``build()``
of a flat options dataclass. A subclass may redeclare a field only to change its default: its help, flag name and
group are inherited. Fields with ``cli=False`` are set by the command itself (the data-parallel rank).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import types
import typing
from collections.abc import Collection, Sequence
from dataclasses import MISSING, dataclass, field, fields, is_dataclass
from typing import Any, Literal


def option(
    default: Any = MISSING,
    help: str = "",
    *,
    factory: Any = None,
    flag: str | None = None,
    metavar: str | None = None,
    options: type | None = None,
    cli: bool = True,
    http: bool = True,
) -> Any:
    """A dataclass field that is also a command-line flag (see the module docstring). No default: required.
    ``http`` False: not a field of the HTTP request built from the class (``service.schemas``)."""
    given = {"help": help, "flag": flag, "metavar": metavar, "options": options, "cli": cli, "http": http}
    metadata = {k: v for k, v in given.items() if v not in ("", None, True)}  # unset keys are inherited
    if factory is not None:
        return field(default_factory=factory, metadata=metadata)
    return field(default=default, metadata=metadata)


@dataclass(frozen=True)
class Flag:
    """One generated flag: ``dest`` is its key in the parsed namespace ("loss.kind" for a nested field)."""

    flag: str
    dest: str
    type: Any
    default: Any  # MISSING: required
    help: str
    metavar: str | None
    group: str


def _metadata(cls: type, name: str) -> dict[str, Any]:
    """The metadata of field ``name``, each key from the nearest class in the MRO that set it."""
    merged: dict[str, Any] = {}
    for klass in reversed(cls.__mro__):
        f = getattr(klass, "__dataclass_fields__", {}).get(name)
        if f is not None:
            merged.update(f.metadata)
    return merged


def _group(cls: type, name: str) -> str:
    """The help section of a field: the first paragraph of the docstring of the base-most class that declares it, as
    one line (a summary wrapped onto a second line was cut at the wrap) in the help's own quotes (`x`, not ``x``)."""
    owner = next(k for k in reversed(cls.__mro__) if name in getattr(k, "__dataclass_fields__", {}))
    summary = (owner.__doc__ or owner.__name__).strip().split("\n\n")[0]
    return " ".join(summary.split()).replace("``", "`").rstrip(".")


def _default(f: dataclasses.Field) -> Any:
    if f.default is not MISSING:
        return f.default
    if f.default_factory is not MISSING:
        return f.default_factory()
    return MISSING


def flags(cls: type, only: Collection[str] | None = None) -> list[Flag]:
    """The flags of a config dataclass, in field order (nested dataclasses and options classes expanded); ``only``:
    those of these fields."""
    hints = typing.get_type_hints(cls)
    out: list[Flag] = []
    for f in fields(cls):
        meta = _metadata(cls, f.name)
        if not meta.get("cli", True) or (only is not None and f.name not in only):
            continue
        default = _default(f)
        nested = meta.get("options") or (hints[f.name] if is_dataclass(hints[f.name]) else None)
        if nested is not None:
            for sub in flags(nested):
                # a nested dataclass's flags default to this field's default value (QSFT's loss has its own)
                sub_default = sub.default if meta.get("options") else getattr(default, sub.dest)
                out.append(dataclasses.replace(sub, dest=f"{f.name}.{sub.dest}", default=sub_default))
            continue
        out.append(Flag(flag=meta.get("flag") or "--" + f.name.replace("_", "-"), dest=f.name, type=hints[f.name],
                        default=default, help=meta.get("help", ""), metavar=meta.get("metavar"),
                        group=_group(cls, f.name)))
    return out


class BoolOrChoice(argparse.Action):
    """A ``bool | Literal[...]`` option: ``--name`` sets True, ``--no-name`` False; ``--name CHOICE`` and
    ``--name=CHOICE`` the choice, ``--name true``/``false`` and ``--name=true``/``false`` True and False (spelled as
    flags of their own by ``OptionsParser``: the flag takes no value, so a question after ``--name`` that is none of
    these words stays a question)."""

    def __init__(self, option_strings: list[str], dest: str, choices: list[str], **kwargs: Any):
        longs = [s for s in option_strings if s.startswith("--")]
        self.choice_words = tuple(choices)
        self.values = {**{s: True for s in option_strings}, **{"--no-" + s[2:]: False for s in longs}}
        super().__init__(list(self.values), dest, nargs=0, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        setattr(namespace, self.dest, self.values[option_string] if option_string is not None else True)

    def format_usage(self) -> str:
        flag, negated = self.option_strings[0], self.option_strings[-1]
        return f"{flag} [{'|'.join(('true', 'false', *self.choice_words))}] | {negated}"


class OptionsParser(argparse.ArgumentParser):
    """An argument parser that reads a ``bool | Literal`` option's choice as a word after its flag, as the HTTP API
    takes it (``"collapse_duplicates": "near"``): ``--name CHOICE``, ``--name=CHOICE``, ``--name true``,
    ``--name=true``, ``--name false`` and ``--name=false`` (``add_options`` names these flags to it). A word after
    the flag that is none of these is an argument of its own (a question); ``--name -- WORD`` makes one of them a
    question too.

    A long flag may be shortened to any beginning that no other flag shares (``--collapse-dup near``, ``--top 3``),
    as argparse allows, but among the flags the help lists: the flags a choice is spelled as (``--name-CHOICE``)
    are this parser's own, so argparse, which counts them, found every beginning of ``--name`` ambiguous and named
    them. A shortened flag is written out here (``unabbreviated``), before its choice is read, and argparse's own
    abbreviation is off."""

    def __init__(self, *args: Any, **kwargs: Any):
        kwargs.setdefault("allow_abbrev", False)  # `unabbreviated` does it, among the flags a user types
        super().__init__(*args, **kwargs)
        self.choice_flags: dict[str, tuple[str, ...]] = {}  # --name -> its choices
        self.has_commands = False  # add_subparsers was called: its words after the first operand are a command's

    def add_subparsers(self, **kwargs: Any) -> Any:
        self.has_commands = True
        return super().add_subparsers(**kwargs)

    def parse_known_args(self, args: Sequence[str] | None = None,  # type: ignore[override]
                         namespace: argparse.Namespace | None = None) -> tuple[Any, list[str]]:
        words = self.unabbreviated(list(sys.argv[1:] if args is None else args))
        return super().parse_known_args(self.spelled(words) if self.choice_flags else words, namespace)

    def user_flags(self) -> list[str]:
        """The long flags a user types: every one but the flags ``spelled`` writes a choice as (``--name-CHOICE``)."""
        spellings = {self.spell(flag, choice) for flag, choices in self.choice_flags.items() for choice in choices}
        return [s for s in self._option_string_actions if s.startswith("--") and s not in spellings]

    def unabbreviated(self, words: list[str]) -> list[str]:
        """``words`` with each shortened long flag written out (``--collapse-dup=near``: ``--collapse-duplicates=near``)
        where it begins one of the ``user_flags`` and no other; one that begins several is refused, naming them, and
        one that begins none is left for argparse to refuse. Up to ``--``, and in a parser of commands up to its first
        operand (the command, whose own parser writes out its flags)."""
        flags = self.user_flags()
        out: list[str] = []
        for i, word in enumerate(words):
            if word == "--" or (self.has_commands and not word.startswith("-")):
                return out + words[i:]
            name, eq, value = word.partition("=")
            matches: list[str] = []
            if name.startswith("--") and len(name) > 2 and name not in self._option_string_actions:
                matches = [flag for flag in flags if flag.startswith(name)]
            if len(matches) > 1:
                self.error(f"ambiguous option: {name} could match {', '.join(matches)}")
            out.append(matches[0] + eq + value if matches else word)
        return out

    def spelled(self, words: list[str]) -> list[str]:
        """``words`` with each value given to a flag of ``choice_flags`` spelled as a flag of its own: a choice as
        ``--name-CHOICE``, ``true`` as ``--name``, ``false`` as ``--no-name``, whether it follows the flag as the next
        word or after ``=``; up to ``--``, after which every word is an argument (``--name -- true``: the question
        "true"). An ``=`` value that is no value of the flag is refused, naming them; a next word that is none is an
        argument of its own (a question)."""
        out: list[str] = []
        takes_value = False  # the last word was a choice flag with no value yet
        for i, word in enumerate(words):
            if word == "--":
                return out + words[i:]
            flag, eq, value = word.partition("=")
            choices = self.choice_flags.get(flag)
            if choices is not None and eq:
                if value not in self.values_of(flag):
                    self.error(f"argument {flag}: invalid choice: {value!r} (choose from "
                               f"{', '.join(map(repr, self.values_of(flag)))})")
                out.append(self.spell(flag, value))
            elif takes_value and word in self.values_of(out[-1]):
                out[-1] = self.spell(out[-1], word)
            else:
                out.append(word)
            takes_value = word in self.choice_flags
        return out

    def values_of(self, flag: str) -> tuple[str, ...]:
        """The words ``flag`` (of ``choice_flags``) takes as its value: true, false and its choices."""
        return ("true", "false", *self.choice_flags[flag])

    @staticmethod
    def spell(flag: str, value: str) -> str:
        """``flag`` given ``value`` (one of its ``values_of``) as the flag argparse reads."""
        return flag if value == "true" else f"--no-{flag[2:]}" if value == "false" else f"{flag}-{value}"


def _argparse_type(tp: Any) -> dict[str, Any]:
    """argparse keyword arguments for a field type: bool, int, float, str, a Literal of them, one of those | None, or
    bool | a Literal of strings (``BoolOrChoice``)."""
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 2 and bool in args and typing.get_origin(choice := args[1 - args.index(bool)]) is Literal:
            return {"action": BoolOrChoice, "choices": list(typing.get_args(choice))}
        if len(args) != 1:
            raise TypeError(f"an option can be one type or None, got {tp}")
        tp = args[0]
    if tp is bool:
        return {"action": argparse.BooleanOptionalAction}
    if typing.get_origin(tp) is Literal:
        choices = list(typing.get_args(tp))
        return {"choices": choices, "type": type(choices[0])}
    if tp in (int, float, str):
        return {"type": tp}
    raise TypeError(f"options of type {tp} have no flag; use bool, int, float, str or a Literal")


def add_options(parser: argparse.ArgumentParser, cls: type, only: Collection[str] | None = None) -> None:
    """Add a flag for every option of ``cls`` (``only``: of these fields), in help sections by the class that
    declares them."""
    groups: dict[str, argparse._ArgumentGroup] = {}
    for fl in flags(cls, only):
        if fl.group not in groups:
            groups[fl.group] = parser.add_argument_group(fl.group)
        kwargs = _argparse_type(fl.type)
        text = fl.help.replace("%", "%%")
        if fl.default is MISSING:
            kwargs["required"] = True
        else:
            kwargs["default"] = fl.default
            if fl.default is not None and "action" not in kwargs:  # BooleanOptionalAction adds its own
                text += " (default: %(default)s)"
        if "choices" not in kwargs and "action" not in kwargs:
            kwargs["metavar"] = fl.metavar or fl.dest.rsplit(".", 1)[-1].upper()
        choices = kwargs.get("choices", []) if kwargs.get("action") is BoolOrChoice else []
        if choices:
            text = (f"{fl.flag} [{'|'.join(('true', 'false', *choices))}]: {text} (to search for one of these "
                    f"words, give it after `--`: {fl.flag} -- {choices[-1]})")
        groups[fl.group].add_argument(fl.flag, dest=fl.dest, help=text, **kwargs)
        for choice in choices:  # the flags OptionsParser spells a choice as (--name-CHOICE), left out of the help
            groups[fl.group].add_argument(f"{fl.flag}-{choice}", dest=fl.dest, action="store_const", const=choice,
                                          default=argparse.SUPPRESS, help=argparse.SUPPRESS)
        if choices and isinstance(parser, OptionsParser):
            parser.choice_flags[fl.flag] = tuple(choices)


def from_args(cls: type, args: argparse.Namespace, only: Collection[str] | None = None, **given: Any) -> Any:
    """The config ``cls`` from flags parsed with ``add_options(parser, cls, only)``; ``given`` sets non-flag
    fields (the rest keep their defaults)."""
    hints = typing.get_type_hints(cls)
    values = dict(given)
    for f in fields(cls):
        meta = _metadata(cls, f.name)
        if f.name in values or not meta.get("cli", True) or (only is not None and f.name not in only):
            continue
        nested = meta.get("options") or (hints[f.name] if is_dataclass(hints[f.name]) else None)
        if nested is None:
            values[f.name] = getattr(args, f.name)
            continue
        prefix = f.name + "."
        sub = argparse.Namespace(**{k[len(prefix):]: v for k, v in vars(args).items() if k.startswith(prefix)})
        value = from_args(nested, sub)
        values[f.name] = value.build() if meta.get("options") else value
    try:
        return cls(**values)
    except ValueError as e:  # a check of the class names its field ("max_answer_tokens must be ..."): say the flag
        named = [fl for fl in flags(cls, only) if "." not in fl.dest and str(e).startswith(f"{fl.dest} ")]
        if named and e.args and isinstance(e.args[0], str):
            e.args = (named[0].flag + e.args[0][len(named[0].dest):], *e.args[1:])
        raise
