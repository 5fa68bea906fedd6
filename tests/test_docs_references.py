"""Every Python name the pages cite exists: the imports of their snippets and the dotted names in backticks; every
flag a page gives a ``spanseek`` command is one that command takes; and every link between the pages reaches a file,
and a heading where it names one.

    .venv/bin/python -m pytest -q tests/test_docs_references.py

A page that says ``from spanseek.core.io import split_articles`` after the function moved, or points readers at
`core.search.best_span` after a refactoring, fails here. Pages: README.md, docs/*.md, the packages' READMEs and
the model cards. Names in backticks count when they start with ``spanseek.`` or one of the Python packages
(``core.``, ``indexer.``, ``trainer.``); ``service.`` in prose is also a JSON field of /info, so only
``spanseek.service.`` is checked.
"""

from __future__ import annotations

import argparse
import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted({ROOT / "README.md", *ROOT.glob("docs/*.md"), *ROOT.glob("*/README.md"),
                *ROOT.glob("core/models/*/README.md")})
IMPORT = re.compile(r"from (spanseek(?:\.\w+)+) import \(?([\w, ]+)")
REFERENCE = re.compile(r"`((?:spanseek\.(?:core|indexer|trainer|service|bench)|core|indexer|trainer)(?:\.\w+)+)(?:\(\))?`")


def resolve(dotted: str) -> None:
    """Import the longest module prefix of ``dotted`` (``spanseek.`` added when missing) and read the rest as
    attributes; raises when any part does not exist."""
    parts = dotted.split(".")
    if parts[0] != "spanseek":
        parts = ["spanseek", *parts]
    for cut in range(len(parts), 1, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for name in parts[cut:]:
            obj = getattr(obj, name)
        return
    raise ModuleNotFoundError(f"no module of {dotted}")


def cited(page: Path) -> list[tuple[int, str]]:
    """(line, dotted name) of every name ``page`` imports in a snippet or cites in backticks."""
    text = page.read_text(encoding="utf-8")
    names = []
    for m in IMPORT.finditer(text):
        line = text.count("\n", 0, m.start()) + 1
        names += [(line, f"{m.group(1)}.{n}") for n in re.split(r"[,\s]+", m.group(2)) if n]
    names += [(text.count("\n", 0, m.start()) + 1, m.group(1)) for m in REFERENCE.finditer(text)]
    return names


def test_the_pages_cite_names():
    assert sum(len(cited(p)) for p in PAGES) > 20  # the patterns still match how the pages cite code


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_cited_name_exists(page: Path):
    missing = []
    for line, name in cited(page):
        try:
            resolve(name)
        except (ImportError, AttributeError) as e:
            missing.append(f"{page.relative_to(ROOT)}:{line}: {name} ({e})")
    assert not missing, "\n".join(missing)


def test_a_moved_name_is_caught(tmp_path: Path):
    with pytest.raises(AttributeError):
        resolve("spanseek.core.io.split_articles")  # it lives in core.holdout
    with pytest.raises(ModuleNotFoundError):
        resolve("spanseek.nowhere.thing")
    resolve("core.holdout.split_articles")
    page = tmp_path / "page.md"
    page.write_text("Run\n\n    python -c 'from spanseek.core.io import load_squad, split_articles'\n\nsee "
                    "`core.spans.best_span()`.\n")
    assert cited(page) == [(3, "spanseek.core.io.load_squad"), (3, "spanseek.core.io.split_articles"),
                           (5, "core.spans.best_span")]


LINK = re.compile(r"\]\(([^)\s]+)\)")  # [text](target)
FENCED = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)


def heading_anchors(text: str) -> set[str]:
    """The anchors a Markdown renderer gives the headings of ``text`` (GitHub's: lower case, punctuation but ``-``
    and ``_`` dropped, spaces to ``-``, a repeated one numbered)."""
    anchors: set[str] = set()
    seen: dict[str, int] = {}
    for m in re.finditer(r"^#{1,6} (.+)$", FENCED.sub("", text), re.MULTILINE):
        anchor = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-")
        anchors.add(f"{anchor}-{seen[anchor]}" if anchor in seen else anchor)
        seen[anchor] = seen.get(anchor, 0) + 1
    return anchors


def broken_links(page: Path) -> list[str]:
    """The relative links of ``page`` whose file is missing, or whose ``#anchor`` is no heading of that page."""
    text = page.read_text(encoding="utf-8")
    broken = []
    for m in LINK.finditer(text):
        url = m.group(1)
        if re.match(r"[a-z]+:", url):  # https:, mailto:
            continue
        target, _, anchor = url.partition("#")
        path = page.parent / target if target else page
        where = f"{page.name}:{text.count(chr(10), 0, m.start()) + 1}: {url}"
        if not path.exists():
            broken.append(f"{where}: no such file")
        elif anchor and path.suffix == ".md" and anchor not in heading_anchors(path.read_text(encoding="utf-8")):
            broken.append(f"{where}: no such heading")
    return broken


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_link_between_the_pages_arrives(page: Path):
    assert broken_links(page) == []


def test_a_broken_link_is_caught(tmp_path: Path):
    (tmp_path / "other.md").write_text("# Results\n\n## Base model (`--model base`), validation\n\n## Notes\n\n"
                                       "## Notes\n\n```bash\n# not a heading\n```\n")
    page = tmp_path / "page.md"
    page.write_text("[a](other.md#base-model---model-base-validation) [b](other.md#notes-1) [c](https://x.org/#y)\n"
                    "[d](missing.md) [e](other.md#not-a-heading) [f](#results)\n")
    assert broken_links(page) == ["page.md:2: missing.md: no such file", "page.md:2: other.md#not-a-heading: no "
                                  "such heading", "page.md:2: #results: no such heading"]


def quoted_commands(text: str) -> list[tuple[int, str]]:
    """(line, words) of each ``spanseek ...`` the page quotes: a line of a fenced block (its continuation lines
    joined, a ``# comment`` dropped) or one span in backticks."""
    quoted = []
    for block in re.finditer(r"^```[^\n]*\n(.*?)^```", text, re.MULTILINE | re.DOTALL):
        first = text.count("\n", 0, block.start(1)) + 1
        lines = block.group(1).replace("\\\n", "  \n").splitlines()  # (a continued line keeps its line count)
        n = 0
        while n < len(lines):
            start, joined = n, lines[n]
            while joined.endswith("  ") and n + 1 < len(lines) and lines[n].rstrip() != lines[n]:
                n += 1
                joined += lines[n]
            quoted += [(first + start, m.group(0)) for m in re.finditer(r"\bspanseek [^#]*", re.split(r"\s#\s", joined)[0])]
            n += 1
    prose = FENCED.sub(lambda b: "\n" * b.group(0).count("\n"), text)
    quoted += [(prose.count("\n", 0, m.start()) + 1, m.group(1)) for m in re.finditer(r"`(spanseek [^`]+)`", prose)]
    return quoted


def unknown_flags(words: str) -> list[str]:
    """The ``--flags`` of ``spanseek CMD [SUB] ...`` that CMD [SUB] does not take (its parser's options); none where
    the words name no command (``spanseek serve: error: ...``, an image ``spanseek:cpu``)."""
    from spanseek.cli import build_parser

    parser = build_parser()
    for word in words.split()[1:]:
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not subs or word not in subs[0].choices:
            break
        parser = subs[0].choices[word]
    if any(isinstance(a, argparse._SubParsersAction) for a in parser._actions):
        return []
    flags = re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*[a-z0-9])(?![\w*-])", words)
    return [flag for flag in flags if flag not in parser._option_string_actions]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_flag_a_page_gives_a_command_is_one_it_takes(page: Path):
    """A flag quoted with its command (`spanseek index build --factory auto`) is one that command takes: a flag
    renamed or moved to another command fails here for every page, not only those whose examples run."""
    wrong = [f"{page.relative_to(ROOT)}:{line}: {words.strip()[:120]}: {flag}"
             for line, words in quoted_commands(page.read_text(encoding="utf-8")) for flag in unknown_flags(words)]
    assert wrong == []


def test_a_flag_of_another_command_is_caught(tmp_path: Path):
    text = ("Run `spanseek search --index x --unit doc \"q\"`, then\n\n```bash\nspanseek index build --corpus c.jsonl \\\n"
            "    --out idx --top-k 3   # see --writes\n```\n\nand `spanseek serve --writes --max-top-k 5`; "
            "`spanseek index build: error: --out x: ...`\n")
    assert [(line, unknown_flags(words)) for line, words in quoted_commands(text)] == [
        (4, ["--top-k"]), (1, []), (8, []), (8, [])]
