"""docs/service.md lists every setting, error type and route the service has, and the pages name every command.

    .venv/bin/python -m pytest -q tests/service/test_docs_tables.py

A setting added to ``service/settings.py`` without its row in the settings table, an error type added to
``ERROR_TYPES`` without its row in the errors table, a route added without a word in docs/service.md, or a CLI
command no page names, fails here: these tables are where users look for them.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from spanseek.cli import build_parser
from spanseek.service import files, routes, writes
from spanseek.service.errors import ERROR_TYPES
from spanseek.service.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
SERVICE_PAGE = ROOT / "docs" / "service.md"
PAGES = [ROOT / "README.md", *sorted(ROOT.glob("docs/*.md"))]
SETTING_ROW = re.compile(r"^\| `SPANSEEK_(\w+)` \| `(--[\w-]+)` \| `([^`]*)` \| (.+) \|$", re.M)
ERROR_ROW = re.compile(r"^\| (\d{3}) \| `(\w+)` \| (.+) \|$", re.M)


def setting_rows(text: str) -> dict[str, tuple[str, str]]:
    """{setting name: (flag, default)} of the settings table's rows."""
    return {m.group(1).lower(): (m.group(2), m.group(3)) for m in SETTING_ROW.finditer(text)}


def missing_settings(text: str) -> list[str]:
    """The settings whose row is missing from ``text``, or names another flag or default than the code's, and the
    rows that name no setting (one renamed or removed)."""
    rows = setting_rows(text)
    problems = [f"SPANSEEK_{name.upper()}: a row, but no such setting" for name in rows
                if name not in Settings.model_fields]
    for name, field in Settings.model_fields.items():
        flag = "--no-warmup" if name == "warmup" else "--" + name.replace("_", "-")
        if name not in rows:
            problems.append(f"SPANSEEK_{name.upper()}: no row")
        elif rows[name][0] != flag:
            problems.append(f"SPANSEEK_{name.upper()}: flag {rows[name][0]}, not {flag}")
        elif field.is_required():
            if rows[name][1] != "(required)":
                problems.append(f"SPANSEEK_{name.upper()}: required, not {rows[name][1]}")
        else:
            default = field.get_default(call_default_factory=True)
            if rows[name][1] != str(default):
                problems.append(f"SPANSEEK_{name.upper()}: default {rows[name][1]}, not {default}")
    return problems


def missing_errors(text: str) -> list[str]:
    """The error types with no row in the errors table of ``text``."""
    listed = {m.group(2) for m in ERROR_ROW.finditer(text)}
    return [error for error in ERROR_TYPES if error not in listed]


def route_names() -> list[str]:
    """'METHOD /path' of every route of the service's routers, a path parameter written ``{id}`` as the pages do."""
    names = []
    for module in (routes, writes, files):
        for route in module.router.routes:
            path = re.sub(r"\{(\w+)(:\w+)?\}", lambda m: "{id}" if m.group(1) == "doc_id" else "{" + m.group(1) + "}",
                          route.path)  # type: ignore[attr-defined]
            names += [f"{method} {path}" for method in sorted(route.methods)]  # type: ignore[attr-defined]
    return names


def commands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> list[str]:
    """'spanseek ...' of every command that runs something (``index build``, ``sync``), not the groups."""
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        return [" ".join(("spanseek", *path))]
    return [c for name, sub in subs[0].choices.items() for c in commands(sub, (*path, name))]


def test_every_setting_has_its_row_with_its_flag_and_default():
    assert not missing_settings(SERVICE_PAGE.read_text(encoding="utf-8"))


def test_every_error_type_has_its_row():
    assert not missing_errors(SERVICE_PAGE.read_text(encoding="utf-8"))


def test_every_route_is_named():
    text = SERVICE_PAGE.read_text(encoding="utf-8")
    assert [name for name in route_names() if name not in text] == []


def test_every_command_is_named():
    text = "".join(page.read_text(encoding="utf-8") for page in PAGES)
    found = commands(build_parser())
    assert "spanseek sync" in found and "spanseek index build" in found
    assert [c for c in found if not re.search(re.escape(c) + r"\b", text)] == []


@pytest.mark.parametrize("row", ["SPANSEEK_MAX_FILE_UPLOADS", "SPANSEEK_FORWARDED_ALLOW_IPS", "SPANSEEK_INDEX"])
def test_a_missing_setting_row_is_caught(row: str):
    text = SERVICE_PAGE.read_text(encoding="utf-8")
    cut = "\n".join(line for line in text.splitlines() if not line.startswith(f"| `{row}` |"))
    assert missing_settings(cut) == [f"{row}: no row"]


def test_a_wrong_default_is_caught():
    text = SERVICE_PAGE.read_text(encoding="utf-8").replace("| `--max-file-tokens` | `500000` |",
                                                          "| `--max-file-tokens` | `100000` |")
    assert missing_settings(text) == ["SPANSEEK_MAX_FILE_TOKENS: default 100000, not 500000"]


def test_a_row_of_a_setting_that_is_gone_is_caught():
    text = SERVICE_PAGE.read_text(encoding="utf-8")
    text += "\n| `SPANSEEK_KEEPALIVE_S` | `--keepalive-s` | `5` | a setting of that name no longer exists |\n"
    assert missing_settings(text) == ["SPANSEEK_KEEPALIVE_S: a row, but no such setting"]


def test_a_missing_error_row_is_caught():
    text = SERVICE_PAGE.read_text(encoding="utf-8")
    cut = "\n".join(line for line in text.splitlines() if "`insufficient_storage` |" not in line)
    assert missing_errors(cut) == ["insufficient_storage"]
