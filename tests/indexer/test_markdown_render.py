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
    t0 = time.process_time()  # CPU time: other work on the machine does not count
    for src in ("[" * 100_000, "![" * 100_000, "[" * 100_000 + "]"):  # 4-18 s, 34-60 s and 4-12 s before
        assert extract_markdown(src).paragraphs == [src]
    assert time.process_time() - t0 < 20


def test_quotes_nested_past_the_limit_keep_their_lines_apart_and_in_order():
    """Past the parser's limit a quote's lines were read again with every quote marker removed, so the lines of 60
    quotes nested inside one another ran into one paragraph; now each keeps the quotes it opens past the limit."""
    levels = "".join(">" * d + f" line {d}\n" for d in range(1, 161))
    md = extract_markdown(f"{levels}\nAfter the quotes.\n\n{'>' * 1000} the deepest line\n\nThe end.\n")
    assert md.paragraphs == [f"line {d}" for d in range(1, 161)] + ["After the quotes.", "the deepest line",
                                                                    "The end."]


# pieces of Markdown tables: pipes, escaped pipes, cells, delimiter rows, and the lines that end a table
TABLE_PIECES = ["|", "|", "|", "a", " b ", "\\|", "-", ":-:", "|-|", "\n", "\n", "\n\n", "# h\n", "> q\n", "`|`"]


def test_tables_read_as_markdown_it_reads_them():
    """The oracle for the table rule that counts filled cells: markdown-it's own, on random table soup (headers,
    delimiter rows, rows short of cells and past them, escaped pipes, lines that end a table)."""
    plain = MarkdownIt("commonmark", {"maxNesting": 100}).enable("table")
    ours = markdown_parser("test.md")
    rng = random.Random(7)
    for _ in range(1500):
        header = "|".join(rng.choice(["a", "b", " ", "c"]) for _ in range(rng.randrange(1, 6)))
        src = f"{header}\n{'|'.join('-' * (header.count('|') + 1))}\n" + "".join(
            rng.choice(TABLE_PIECES) for _ in range(rng.randrange(0, 40)))
        assert ours.render(src) == plain.render(src), src


def filled_table(columns: int, rows: list[str]) -> str:
    return "|" + "h|" * columns + "\n|" + "-|" * columns + "\n" + "".join(f"{row}\n" for row in rows) + "\n"


def test_a_file_whose_tables_fill_more_empty_cells_than_the_limit_is_skipped_and_named(monkeypatch, tmp_path):
    """markdown-it fills a row shorter than its header with empty cells, up to 65,536 a table: a 20 KB file of a
    wide header over rows of "|" took 7-9 s to read, and such tables over and over took minutes. A file's tables may
    fill ``MARKDOWN_FILLED_CELLS`` (counted over all its tables; rows with their cells count none); past it the file
    is skipped, the reason named, before its tables are rendered."""
    from spanseek.indexer import markdown_render
    from spanseek.indexer.extracted import Unreadable
    from spanseek.indexer.ingest import from_files

    monkeypatch.setattr(markdown_render, "MARKDOWN_FILLED_CELLS", 50)
    full = filled_table(11, ["|".join(["c"] * 11)] * 200)  # rows with their cells: any number
    assert len(extract_markdown(full).paragraphs) == 200
    at_limit = filled_table(11, ["x"] * 5)  # each row one cell of 11: 10 filled, 50 in all
    assert extract_markdown(full + at_limit).paragraphs[-1] == "h: x"
    for past in (filled_table(11, ["x"] * 6), filled_table(11, ["x"] * 3) * 2):  # in one table or over two
        with pytest.raises(Unreadable, match=r"lack at least 60 of their header's cells .* 11 columns .*more than the "
                                             r"50 a Markdown file is read with.*give the rows their cells"):
            extract_markdown(past)
    (tmp_path / "wide.md").write_text(filled_table(11, ["x"] * 6))
    (tmp_path / "fine.md").write_text(at_limit)
    report = from_files([tmp_path], tmp_path / "c.jsonl")
    assert report.documents == 1 and [(p.rsplit("/", 1)[-1], "lack at least 60" in why) for p, why in report.skipped
                                      ] == [("wide.md", True)]


def test_tables_in_quotes_nested_past_the_limit_count_toward_the_files_filled_cells(monkeypatch):
    """A quote nested past the parser's limit is read again apart (``render_markdown``): its tables' filled cells
    count toward the file's, as the tables outside such quotes do. Each reading counted its own, so a file of deep
    quotes, each holding a table just under the limit, was read whole (3 quotes of 15,000 filled cells: 3 s)."""
    from spanseek.indexer import markdown_render
    from spanseek.indexer.extracted import Unreadable

    monkeypatch.setattr(markdown_render, "MARKDOWN_FILLED_CELLS", 50)
    deep = ">" * 120 + " "

    def quoted(rows: int) -> str:  # a quote past the limit holding a table of 11 columns: 10 filled cells a row
        return "".join(deep + line + "\n" for line in filled_table(11, ["x"] * rows).splitlines()) + "\nbetween\n\n"

    assert extract_markdown(quoted(5)).paragraphs == ["h: x"] * 5 + ["between"]  # 50: at the limit, read
    assert extract_markdown(filled_table(11, ["x"] * 3) + quoted(2)).paragraphs[-1] == "between"  # 30 + 20
    for past in (quoted(3) * 2, filled_table(11, ["x"] * 3) + quoted(3), quoted(3) + filled_table(11, ["x"] * 3)):
        with pytest.raises(Unreadable, match="lack at least 60 of their header's cells"):
            extract_markdown(past)


def test_a_wide_header_over_rows_of_pipes_is_refused_at_the_limit():
    """At the real limit: a header of 1,000 columns over 20 rows of "|" (20 KB of cells for 2 KB) is refused."""
    from spanseek.indexer.extracted import Unreadable

    with pytest.raises(Unreadable, match="1,000 columns over 20 rows"):
        extract_markdown(filled_table(1000, ["|"] * 20))
    assert extract_markdown(filled_table(1000, ["x"] * 16)).paragraphs == ["h: x"] * 16  # 15,984 filled: read


def test_a_line_whose_own_markers_nest_past_the_limit_is_parsed_again_once():
    """A line that nests past the limit by the markers on it ("- > - > ..."), not by indentation, reads the same
    again with its indentation and quote markers removed: it was parsed again for each of the eight readings (24 s
    for 100 KB of such lines), and now once, read as its text as it was."""
    from spanseek.indexer.markdown_render import render_markdown

    md = markdown_parser("test.md")
    parse, calls = md.parse, []
    md.parse = lambda src, env=None: calls.append(src) or parse(src, env)
    line = "- > " * 60 + "a"
    render_markdown(md, f"{line}\n" * 3)
    assert len(calls) == 1 + 3
    assert extract_markdown(f"{line}\n" * 3).paragraphs == [line] * 3
    nested = "".join("  " * k + f"- *{k}*\n" for k in range(120))  # nested by indentation: read flat, as before
    assert extract_markdown(nested).paragraphs == [str(k) for k in range(120)]


# pieces of Markdown documents: blocks, inline markup, raw HTML (complete, and left open), entities, breaks
BLOCK_PIECES = ["# ", "## ", "- ", "1. ", "> ", "    ", "```\n", "~~~py\n", "a|b\n-|-\n", "|c|d|\n", "\n", "\n\n", "---\n",
                "word ", "*em* ", "**strong** ", "`code` ", "[l](u) ", "![alt](i.png) ", "  \n", "\\\n", "&amp; ",
                "&#35; ", "<div>", "</div>", "<b>", "</b>", "<br>", "<table><tr><td>x</td></tr></table>", "<!-- c -->",
                "<script>s</script>", "<span", "<", "&", "<pre>", "</pre>", "\t", "| ", "1) ", "* "]


def _read_both(src: str):
    """``src``'s paragraphs and section paths read from markdown-it's tokens (``markup._read_parts``: None where it
    declines) and from the HTML they render to."""
    from spanseek.indexer import markup
    from spanseek.indexer.html_reader import HTMLText
    from spanseek.indexer.markdown_render import markdown_parts, render_markdown

    md = markdown_parser("test.md")
    tokens = HTMLText()
    read = markup._read_parts(tokens, markdown_parts(md, src))
    tokens.close()
    html = HTMLText()
    html.feed(render_markdown(md, src))
    html.close()
    return ((tokens.text.texts, tokens.text.paths, tokens.first_heading) if read else None,
            (html.text.texts, html.text.paths, html.first_heading))


def test_markdown_read_from_its_tokens_reads_as_its_html():
    """The oracle: Markdown read from markdown-it's tokens gives the paragraphs, sections and first heading that its
    rendered HTML gives, on random documents of blocks, inline markup, breaks and raw HTML; HTML that reads across
    tokens (a tag left open, a <script>'s text) is declined, and read from the HTML."""
    rng = random.Random(7)
    declined = 0
    for _ in range(400):
        src = "".join(rng.choice(BLOCK_PIECES) for _ in range(rng.randrange(1, 40)))
        from_tokens, from_html = _read_both(src)
        declined += from_tokens is None
        assert from_tokens in (None, from_html), src
    assert 0 < declined < 200  # (both ways taken)
    for src in ["- a\n  > q\n- b\n\n  c\n", "x <span\nclass=y> z", "<script>\n# not a heading\n"]:  # hidden paragraphs
        from_tokens, from_html = _read_both(src)
        assert from_tokens in (None, from_html), src
    deep = "".join(f"{'  ' * i}- item {i}\n" for i in range(120))  # nested past the limit: read again, as HTML parts
    assert _read_both(deep)[0] == _read_both(deep)[1]


def test_markdown_is_read_without_rendering_it_to_html(monkeypatch):
    """Rendering Markdown to HTML and parsing the HTML again took over half a file's time (table rows: 2.4 s of 5.4 s
    for 100 KB); a file without raw HTML that reads across tokens is read from the tokens alone."""
    import markdown_it.renderer

    def refused(*args, **kwargs):
        raise AssertionError("rendered to HTML")

    monkeypatch.setattr(markdown_it.renderer.RendererHTML, "render", refused)
    extracted = extract_markdown("# Flags\n\n| Flag | Default |\n|---|---|\n| --max-tokens | 200 |\n\nSee <b>below</b>.\n")
    assert extracted.title == "Flags"
    assert extracted.paragraphs == ["Flags", "Flag: --max-tokens; Default: 200", "See below."]


def test_struck_text_reads_without_its_tildes_as_github_shows_it():
    """GitHub's strikethrough (``~~struck~~``), common in READMEs and changelogs, read with its tildes ("~~ten~~"),
    which no search for the word matched; it reads as the HTML it renders to (``<s>``), its text in place, as an HTML
    page's <s> does (it is shown, not an edit's deletion). A single tilde is text."""
    extracted = extract_markdown("The fare is ~~ten~~ twelve pounds, ~about~ ~~~x~~~.\n\n| Old | New |\n|---|---|\n"
                                 "| ~~9:00~~ | 9:30 |\n")
    assert extracted.paragraphs == ["The fare is ten twelve pounds, ~about~ ~x~.", "Old: 9:00; New: 9:30"]
