"""`spanseek index build/add/upsert` flags are generated from their options classes (indexer.options): every
option has a flag with help text, and flags parse into the options, round trip."""

from __future__ import annotations

import argparse
import dataclasses
import re
import typing

import pytest

from spanseek.cli import build_parser
from spanseek.core.options import from_args
from spanseek.indexer.options import BuildOptions, EncodeOptions

COMMANDS = {"build": BuildOptions, "add": EncodeOptions, "upsert": EncodeOptions}
REQUIRED = {"build": ["--corpus", "c.jsonl", "--out", "o"], "add": ["--index", "i", "--corpus", "c.jsonl"],
            "upsert": ["--index", "i", "--corpus", "c.jsonl"]}
OTHER = {bool: lambda d: not d, int: lambda d: (d or 0) + 3, float: lambda d: (d or 0.0) + 0.5,
         str: lambda d: f"{d}-other"}


def subparser(command: str) -> argparse.ArgumentParser:
    index = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)).choices["index"]
    return next(a for a in index._actions if isinstance(a, argparse._SubParsersAction)).choices[command]


def cli_fields(cls: type) -> list[dataclasses.Field]:
    return [f for f in dataclasses.fields(cls) if f.metadata.get("cli", True)]


def other_value(tp, default):
    if typing.get_origin(tp) in (typing.Union, type(int | None)):
        tp = next(a for a in typing.get_args(tp) if a is not type(None))
    if typing.get_origin(tp) is typing.Literal:
        return next(c for c in typing.get_args(tp) if c != default)
    return OTHER[tp](default)


@pytest.mark.parametrize("command", COMMANDS)
def test_every_option_has_a_flag_with_help_text(command):
    actions = {a.dest: a for a in subparser(command)._actions}
    for f in cli_fields(COMMANDS[command]):
        assert f.name in actions, f"--{f.name.replace('_', '-')} missing"
        assert actions[f.name].help and len(actions[f.name].help) > 10, f"{f.name} has no help text"
    assert "progress" not in actions and "quiet" in actions  # progress is set by --quiet


@pytest.mark.parametrize("command", COMMANDS)
def test_flags_parse_into_the_options_round_trip(command):
    cls, parser = COMMANDS[command], subparser(command)
    assert from_args(cls, parser.parse_args(REQUIRED[command]), progress=True) == cls()
    argv, values = list(REQUIRED[command]), {}
    hints = typing.get_type_hints(cls)
    for f in cli_fields(cls):
        value = other_value(hints[f.name], f.default)
        values[f.name] = value
        flag = next(a for a in parser._actions if a.dest == f.name).option_strings[0]
        argv += [flag if value else f"--no-{flag[2:]}"] if isinstance(value, bool) else [flag, str(value)]
    options = from_args(cls, parser.parse_args(argv), progress=False)
    assert {name: getattr(options, name) for name in values} == values and not options.progress


def test_ray_local_starts_a_local_cluster_and_bad_values_are_refused():
    assert BuildOptions(ray="local").ray == "" and BuildOptions(ray="auto").ray == "auto"
    with pytest.raises(ValueError, match="nprobe must be an integer >= 1"):
        BuildOptions(nprobe=0)
    with pytest.raises(ValueError, match="--shard-passages"):
        EncodeOptions(shard_passages=0)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("recall_sample", -1, "recall_sample must be an integer >= 0 (0: skip the recall), got -1"),
        ("recall_sample", 2.5, "recall_sample must be an integer >= 0 (0: skip the recall), got 2.5"),
        ("max_train", 0, "max_train must be an integer >= 1, got 0"),
        ("max_train", -5, "max_train must be an integer >= 1, got -5"),
        ("nprobe", True, "nprobe must be an integer >= 1, got True"),
        ("filter_threshold", 1.5, "filter_threshold must be a probability between 0 and 1, got 1.5"),
        ("filter_threshold", -0.1, "filter_threshold must be a probability between 0 and 1, got -0.1"),
        ("filter_threshold", float("nan"), "filter_threshold must be a probability between 0 and 1, got nan"),
    ],
)
def test_build_options_the_faiss_stage_reads_are_checked_when_made(field, value, message):
    """These are read only after the whole corpus is encoded: a bad value is refused when the options are made."""
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        BuildOptions(**{field: value})
    assert BuildOptions(recall_sample=0, max_train=1, filter_threshold=0.0).recall_sample == 0  # the bounds are allowed
    assert BuildOptions(filter_threshold=1).filter_threshold == 1


@pytest.mark.parametrize(("given", "expected"), [(None, "PASSIVE"), ("ACTIVE", "ACTIVE")])
def test_the_command_waits_passively_between_parallel_regions_unless_told(given, expected):
    """OpenMP's spinning threads took the cores from the numpy work between torch's parallel regions (11.7 against
    10.2 s for an index build of the demo corpus on 2 cores): the command sets what the benchmarks measured with,
    before torch is imported, and keeps a value the environment gives."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    if given is not None:
        env["OMP_WAIT_POLICY"] = given
    code = ("import sys, spanseek.cli, os; assert 'torch' not in sys.modules; "
            "print(os.environ['OMP_WAIT_POLICY'])")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == expected


LIVE_DIR_ENVS = [
    [("SPANSEEK_LIVE_DIR", "/upper")], [("spanseek_live_dir", "/lower")], [("Spanseek_Live_Dir", "/mixed")],
    [("spanseek_live_dir", " ")], [], [("spanseek_live_dir", "/first"), ("SPANSEEK_LIVE_DIR", "/last")],
    [("SPANSEEK_LIVE_DIR", "/first"), ("spanseek_live_dir", "/last")],
]


@pytest.mark.parametrize("service_installed", [True, False])
@pytest.mark.parametrize("env", LIVE_DIR_ENVS)
def test_index_commands_read_the_live_directory_that_the_server_reads_from_the_environment(env, service_installed,
                                                                                          monkeypatch):
    """The server's settings read SPANSEEK_LIVE_DIR in any case of letters (the last spelling winning, blank unset):
    the index commands find the same live directory (read by the server's settings source; without the service
    installed, by the same rule), and name the variable as the environment spells it."""
    import os
    import sys

    from spanseek.indexer.cli import _live_dir
    from spanseek.service.settings import Settings

    for name in [n for n in os.environ if n.upper().startswith("SPANSEEK_")]:
        monkeypatch.delenv(name)
    for name, value in env:
        monkeypatch.setenv(name, value)
    served = Settings(index="i").live_dir  # (before pydantic-settings is hidden)
    if not service_installed:
        monkeypatch.setitem(sys.modules, "pydantic_settings", None)  # an install without the service
    live_dir, variable = _live_dir(None)
    assert live_dir == (str(served) if served is not None else None)
    assert variable == (env[-1][0] if served is not None else None)
    assert _live_dir("/flag") == ("/flag", None)  # the flag over the environment, as `spanseek serve` takes it


def test_index_commands_read_the_live_directory_without_loading_the_servers_settings(monkeypatch):
    """The variable is read by the server's rule without importing service.settings (about a second of imports for
    every index command while SPANSEEK_LIVE_DIR is set, and the indexer would import the service): a name that only
    pydantic-settings' lower-casing matches ("K", the Kelvin sign, lowers to "k") is read too, as the server reads it."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    from spanseek.indexer.cli import _live_dir
    from spanseek.service.settings import Settings

    for name in [n for n in os.environ if n.lower().startswith("spanseek_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("SPANSEE\u212a_LIVE_DIR", "/kelvin")
    assert (_live_dir(None)[0], Settings(index="i").live_dir) == ("/kelvin", Path("/kelvin"))
    code = ("import sys; from spanseek.indexer.cli import _live_dir; print(_live_dir(None)[0]); "
            "print(sorted(m for m in sys.modules if m.startswith(('spanseek.service', 'pydantic_settings'))))")
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, "SPANSEEK_LIVE_DIR": "/live"},
                         capture_output=True, text=True, check=True)
    assert out.stdout.split("\n")[:2] == ["/live", "[]"]
