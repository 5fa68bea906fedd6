"""Markdown rendering (``indexer.markdown_render``): link labels scanned in linear time, with markdown-it's result."""

from __future__ import annotations

import random
import time

import pytest

pytest.importorskip("markdown_it")

from markdown_it import MarkdownIt  # noqa: E402

from spanseek.indexer.markdown_render import markdown_parser  # noqa: E402
from spanseek.indexer.markup import extract_markdown  # noqa: E402

# pieces of Markdown that links, images and the tokens inside their labels are made of
PIECES = ["[", "]", "[", "]", "(", ")", "!", "a", " ", "\n", "`", "<", ">", "\\", "*", "_", "x]", "[y", "<http://a.b>",
          "](u)", "]: /u", "&amp;", "\n\n", "    ", "|"]


@pytest.mark.parametrize("nesting", [3, 20, 100])
def test_link_labels_parse_as_markdown_it_parses_them(nesting):
    """The oracle: markdown-it's own label scan, on random bracket soup (nested, unclosed, with code spans,
    autolinks, escapes and reference definitions in the labels), at a nesting limit that cuts the nesting short and
    at ours."""
    plain = MarkdownIt("commonmark", {"maxNesting": nesting}).enable("table")
    fast = markdown_parser("test.md")
    fast.options["maxNesting"] = nesting
    rng = random.Random(nesting)
    for _ in range(1500):
        src = "".join(rng.choice(PIECES) for _ in range(rng.randrange(1, 60)))
        assert fast.render(src) == plain.render(src), src


def skip_tokens(md: MarkdownIt, src: str) -> int:
    """The steps markdown-it's inline parser takes (``skipToken`` calls) to parse ``src``."""
    calls, inner = [0], md.inline.skipToken

    def counted(state):
        calls[0] += 1
        inner(state)

    md.inline.skipToken = counted
    md.parse(src)
    return calls[0]


@pytest.mark.parametrize("unit", ["[", "![", "[ ", "[[a]", "[[]"])
def test_runs_of_open_brackets_take_a_few_steps_each(unit):
    """markdown-it scanned from each "[" through up to a hundred others (maxNesting): 100-400 steps each."""
    n = 5000
    for src in (unit * n, unit * n + "]", unit * n + "]" * n):
        assert skip_tokens(markdown_parser("test.md"), src) <= 6 * n, src[-8:]


def test_a_hundred_thousand_open_brackets_read_in_seconds():
    t0 = time.perf_counter()
    for src in ("[" * 100_000, "![" * 100_000, "[" * 100_000 + "]"):  # 4-18 s, 34-60 s and 4-12 s before
        assert extract_markdown(src).paragraphs == [src]
    assert time.perf_counter() - t0 < 20


def test_quotes_nested_past_the_limit_keep_their_lines_apart_and_in_order():
    """Past the parser's limit a quote's lines were read again with every quote marker removed, so the lines of 60
    quotes nested inside one another ran into one paragraph; now each keeps the quotes it opens past the limit."""
    levels = "".join(">" * d + f" line {d}\n" for d in range(1, 161))
    md = extract_markdown(f"{levels}\nAfter the quotes.\n\n{'>' * 1000} the deepest line\n\nThe end.\n")
    assert md.paragraphs == [f"line {d}" for d in range(1, 161)] + ["After the quotes.", "the deepest line",
                                                                    "The end."]
