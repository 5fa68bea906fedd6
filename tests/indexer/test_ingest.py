"""Files -> corpus (indexer.ingest, `spanseek corpus from-files`): HTML, Markdown and text extraction, ids, titles
and metadata, skipped and refused files, and `index build` pointing at the right converter.

    .venv/bin/python -m pytest -q tests/indexer/test_ingest.py
"""

from __future__ import annotations

import codecs
import json
import logging
import os
import re
import shutil
import time
from pathlib import Path

import pytest

from spanseek.cli import main
from spanseek.core.io import CorpusError, Document, read_corpus, write_corpus
from spanseek.indexer.build import BuildError, build_index
from spanseek.indexer.chunking import ChunkOptions
from spanseek.indexer.ingest import (
    IngestError,
    IngestOptions,
    corpus_problem,
    extract_html,
    extract_markdown,
    extract_text,
    from_files,
)

HTML = """<!doctype html><html><head><title> Rotterdam  history </title>
<meta name="Author" content="Ann"><meta property="og:url" content="https://example.org/r">
<style>p { color: red }</style><script>var secret = "no";</script></head>
<body><nav>Home</nav><h1>Rotterdam</h1><p>In 1340 Rotterdam was <b>granted</b> city&nbsp;rights &amp; a seal.</p>
<div>Second block<br>after a break<script>alert("x")</script></div>
<table><tr><td>cell a</td><td>cell b</td></tr></table><noscript>enable js</noscript></body></html>"""

MARKDOWN = """---
title: Install guide
date: 2024-05-01
tags: [setup, linux]
---
# Installing

Run the **installer** and read [the manual](https://x.y/manual). The `castle` was built in 1340.

- first item
- second item

```
code block
```
"""


PAGE = """<html><head><title>Install guide - ACME</title></head><body>
<nav><ul><li><a href="/">Home</a></li><li><a href="/about">About us</a></li></ul></nav>
<header><div class="logo">ACME</div></header>
<main><article><h1>Installing the tool</h1>
<p>Run the installer and follow the steps on the screen. It takes about five minutes on a laptop.</p>
<h2>Requirements</h2><p>You need Python 3.11 or newer, and 2 GB of free disk space for the models.</p>
<ul><li>Linux or macOS</li><li>an internet connection</li></ul>
</article></main>
<aside><h3>Related</h3><p>See also our blog post about speed and the newsletter.</p></aside>
<footer><p>Copyright 2024 ACME Inc. All rights reserved. Privacy policy. Cookie settings.</p></footer>
</body></html>"""


def test_html_drops_scripts_and_styles_and_splits_at_blocks():
    ext = extract_html(HTML)
    assert ext.title == "Rotterdam history"
    assert ext.meta == {"author": "Ann", "og:url": "https://example.org/r"}
    assert ext.paragraphs == ["In 1340 Rotterdam was granted city rights & a seal.", "Second block after a break",
                              "cell a cell b"]  # the <nav> went too
    text = " ".join(ext.paragraphs)
    assert "secret" not in text and "color" not in text and "alert" not in text and "enable js" not in text


def test_html_keeps_the_main_content_and_drops_navigation_footers_and_asides():
    ext = extract_html(PAGE)
    assert ext.title == "Install guide - ACME"
    assert ext.paragraphs == [
        "Installing the tool",
        "Run the installer and follow the steps on the screen. It takes about five minutes on a laptop.",
        "Requirements", "You need Python 3.11 or newer, and 2 GB of free disk space for the models.",
        "Linux or macOS", "an internet connection",
    ]
    text = " ".join(ext.paragraphs)
    assert not any(word in text for word in ("Home", "About us", "ACME", "Related", "newsletter", "Copyright"))


@pytest.mark.parametrize("head,byline,meta", [
    ("", "<p class='byline'>By Jane Roe, 4 May 2026</p>", {"author": "Jane Roe", "date": "2026-05-04"}),
    ("", "<p>By <span class='author'>Jane Roe</span>, <time datetime='2026-05-04'>4 May 2026</time></p>",
     {"author": "Jane Roe", "date": "2026-05-04"}),
    ("<meta name='author' content='jane roe'><meta property='article:published_time' content='2026-05-04T10:00:00Z'>",
     "", {"author": "jane roe", "article:published_time": "2026-05-04T10:00:00Z", "date": "2026-05-04"}),
    ("<meta name='date' content='May 4, 2026'>", "", {"date": "2026-05-04"}),
    ("", "", {}),  # no date guessed from the text or the footer's copyright year
])
def test_an_html_pages_byline_is_kept_as_its_author_and_date(head, byline, meta):
    """Main-content extraction takes a byline out of the text; its author and date stay with the page as metadata
    (the page's own meta tags as written, the date as an ISO-8601 date, which filters compare)."""
    text = "Kellerton harbour opened in 1872 and grew through the next century. " * 8
    page = (f"<html><head><title>Harbour</title>{head}</head><body><main><article><h1>Harbour news</h1>{byline}"
            f"<p>{text}</p></article></main><footer>Copyright 2026 Example News</footer></body></html>")
    assert extract_html(page).meta == meta


def test_html_title_falls_back_to_the_first_h1_and_an_open_head_ends_at_the_body():
    ext = extract_html("<html><head><meta name=x content=1><body><h2>Sub</h2><h1>Main</h1><p>text</p>")
    assert (ext.title, ext.paragraphs, ext.meta) == ("Main", ["text"], {"x": "1"})


def test_markdown_front_matter_title_and_plain_text():
    ext = extract_markdown(MARKDOWN)
    assert ext.title == "Install guide"
    assert ext.meta == {"title": "Install guide", "date": "2024-05-01", "tags": ["setup", "linux"]}
    assert ext.paragraphs == ["Installing", "Run the installer and read the manual. The castle was built in 1340.",
                              "first item", "second item", "code block"]
    assert extract_markdown("Intro line\n\n## Usage\n\ntext").title == "Usage"  # the first heading of any level
    assert extract_markdown("no heading at all").title is None


def test_bad_front_matter_names_the_file():
    with pytest.raises(IngestError, match=r"notes\.md:2: front matter is not valid YAML \(expected ',' or '\]'"):
        extract_markdown("---\ntitle: [unclosed\n---\ntext", "notes.md")
    with pytest.raises(IngestError, match=r"notes\.md:3: front matter is not valid YAML \(mapping values are not"):
        extract_markdown("---\na: 1\n b: 2\n---\ntext", "notes.md")  # the line of the file, not of the YAML
    with pytest.raises(IngestError, match=r"notes\.md: front matter must be a YAML mapping .*, got list"):
        extract_markdown("---\n- a\n- b\n---\ntext", "notes.md")


def test_front_matter_keys_and_dates_stay_as_written(tmp_path):
    source = ("---\n2024-01-01: new year\nyes: 1\n1.10: v\nwhen: 2024-05-01T10:00:00Z\nbad_day: 2024-02-30\n"
              "blob: !!binary aGVs\n  bG8=\ntags: !!set {b, a}\n---\ntext")
    meta = {"2024-01-01": "new year", "yes": 1, "1.10": "v", "when": "2024-05-01T10:00:00Z", "bad_day": "2024-02-30",
            "blob": "aGVsbG8=", "tags": ["b", "a"]}
    assert extract_markdown(source, "notes.md").meta == meta  # a date key was a TypeError, 2024-02-30 a ValueError
    (tmp_path / "notes.md").write_text(source)
    from_files([tmp_path / "notes.md"], tmp_path / "c.jsonl")
    assert next(read_corpus(tmp_path / "c.jsonl")).meta == {"source": (tmp_path / "notes.md").as_posix(), **meta}


LAUGHS = "".join(f"{n}: &{n} [{', '.join([f'*{p}'] * 9)}]\n" for p, n in zip("abc", "bcd", strict=True))


@pytest.mark.parametrize(("yaml", "line"), [
    ("a: &a [*a]", 2),  # holds itself: json.dumps said "Circular reference detected", naming no file
    ("x: 1\na: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + LAUGHS, 4),  # expands 9-fold a line
    ("base: &b {x: 1}\nmine:\n  <<: *b", 4),
])
def test_front_matter_aliases_are_refused_naming_the_file_and_line(yaml, line):
    with pytest.raises(IngestError, match=rf"notes\.md:{line}: front matter uses the YAML alias \*\w; aliases are "
                                          "not allowed"):
        extract_markdown(f"---\n{yaml}\n---\ntext", "notes.md")
    assert extract_markdown("---\nkept: &k 1\n---\ntext").meta == {"kept": 1}  # an anchor no alias uses is harmless


@pytest.mark.parametrize("number", [".nan", ".NaN", ".inf", "-.inf", "1.0e+400"])
def test_front_matter_numbers_json_cannot_store_are_refused_and_nothing_is_written(tmp_path, number):
    (tmp_path / "notes.md").write_text(f"---\ntitle: T\nscore: {number}\n---\ntext")
    with pytest.raises(IngestError, match=rf"notes\.md:3: front matter holds {re.escape(number)}, a number that is "
                                          "not finite.* quote it"):
        from_files([tmp_path / "notes.md"], tmp_path / "c.jsonl")
    assert not (tmp_path / "c.jsonl").exists()  # it was written, and index build refused it
    assert extract_markdown(f"---\nscore: '{number}'\n---\ntext").meta == {"score": number}


def test_the_corpus_writer_refuses_what_the_corpus_reader_refuses(tmp_path):
    (tmp_path / "big.md").write_text(f"---\nbody: {'x' * 20000}\n---\ntext")
    (tmp_path / "lone.md").write_text('---\nnote: "\\ud800"\n---\ntext')
    with pytest.raises(IngestError, match=r"big\.md: document .*'meta' is \d+ bytes as JSON, over the limit"):
        from_files([tmp_path / "big.md"], tmp_path / "c.jsonl")
    with pytest.raises(IngestError, match=r"lone\.md: document .*'meta' holds an unpaired surrogate"):
        from_files([tmp_path / "lone.md"], tmp_path / "c.jsonl")
    assert not (tmp_path / "c.jsonl").exists()


@pytest.mark.parametrize(("yaml", "message"), [
    ("title: A\ndate: 1\ntitle: B", r"notes\.md:4: front matter gives the key 'title' twice \(first on line 2\)"),
    ("1: a\n'1': b", r"notes\.md:3: front matter gives the key '1' twice"),
    ("? [a, b]\n: x", r"notes\.md:2: front matter has a key that is a list"),
    ("n: " + "9" * 5000,
     r"notes\.md:2: front matter holds a value that cannot be read \(9{37}\.\.\.: Exceeds the limit"),
    ("n: " + "[" * 2000 + "]" * 2000, r"notes\.md: front matter is nested too deeply to read"),
])
def test_front_matter_that_is_read_wrong_or_not_at_all_is_an_error(yaml, message):
    with pytest.raises(IngestError, match=message):  # B won silently; the rest were tracebacks naming no file
        extract_markdown(f"---\n{yaml}\n---\ntext", "notes.md")


@pytest.mark.parametrize(("title", "expected"), [
    ("2024", "2024"), ("1.10", "1.10"), ("2024-05-01", "2024-05-01"), ("yes", "yes"),
    ('"  Two\\n  lines "', "Two lines"), ("~", "Heading"), ("''", "Heading"),
])
def test_a_front_matter_title_is_its_text_as_written(title, expected):
    assert extract_markdown(f"---\ntitle: {title}\n---\n# Heading\n\ntext").title == expected


@pytest.mark.parametrize(("title", "kind"),
                         [("[a, b]", "a list"), ("\n  - a\n  - b", "a list"), ("{a: 1}", "a mapping")])
def test_a_front_matter_title_that_is_a_list_or_mapping_is_an_error(title, kind):
    with pytest.raises(IngestError, match=rf"notes\.md:3: front matter 'title' must be text, got {kind}"):
        extract_markdown(f"---\ndate: 1\ntitle: {title}\n---\n# Heading", "notes.md")


@pytest.mark.parametrize("encode", [
    lambda text: text.replace("\n", "\r\n").encode(),  # Windows
    lambda text: b"\xef\xbb\xbf" + text.replace("\n", "\r\n").encode(),  # and a BOM
    lambda text: text.replace("\n", "\r").encode(),  # old Mac: the front matter was read as text
])
def test_front_matter_with_any_line_ends_or_a_bom(tmp_path, encode):
    (tmp_path / "notes.md").write_bytes(encode("---\ntitle: Guide\n---\nFirst.\n\nSecond.\n"))
    from_files([tmp_path / "notes.md"], tmp_path / "c.jsonl", opts=IngestOptions(chunk=ChunkOptions(min_tokens=0)))
    (doc,) = read_corpus(tmp_path / "c.jsonl")
    assert (doc.title, doc.paragraphs, doc.meta["title"]) == ("Guide", ("First.", "Second."), "Guide")
    (tmp_path / "notes.txt").write_bytes(encode("First.\n\nSecond.\n"))
    assert extract_text((tmp_path / "notes.txt").read_bytes().decode("utf-8-sig")).paragraphs == ["First.", "Second."]


def test_front_matter_without_its_closing_line_is_read_as_text_with_a_warning(caplog):
    with caplog.at_level(logging.WARNING):
        ext = extract_markdown("---\ntitle: Guide\n\nSome text.", "notes.md")
    assert ext.paragraphs == ["title: Guide", "Some text."] and ext.meta == {}
    assert any("notes.md: the front matter opened on line 1 has no closing ---" in r.getMessage()
               for r in caplog.records)
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        extract_markdown("---\n\nA thematic break first.", "notes.md")
    assert not caplog.records


def test_text_paragraphs_at_blank_lines():
    assert extract_text("one\nline wrapped\n\n \n\ntwo\r\n\r\nthree").paragraphs == ["one line wrapped", "two", "three"]


def test_a_text_file_s_words_hyphenated_at_line_ends_are_whole():
    """A hard-wrapped text (as pdftotext and typewriter-style files write it) read a word broken at a line's end as
    two, the hyphen left before a space ("infor- mation"): it is made whole as a PDF's is, the document deciding (a
    word found whole elsewhere is joined, a compound found with its hyphen keeps it, a hyphen before a digit stays)."""
    text = ("The infor-\nmation on the well-\nknown port: the well-known port is COVID-\n19 free.\n\n"
            "The information is old.")
    assert extract_text(text).paragraphs == [
        "The information on the well-known port: the well-known port is COVID-19 free.", "The information is old."]


def test_a_long_hard_wrapped_text_file_is_made_whole_in_linear_time():
    """A text file of one paragraph hyphenated on every line (1.7 MB, 100,000 breaks) took a copy of the rest of the
    text at each break, seconds of CPU growing with the square of its size: it is read in a fraction of one."""
    text = "an infor-\nmation " * 100_000
    start = time.process_time()
    (paragraph,) = extract_text(text).paragraphs
    assert time.process_time() - start < 1.0
    assert paragraph == " ".join(["an information"] * 100_000)


@pytest.fixture
def docs_dir(tmp_path):
    root = tmp_path / "docs"
    (root / "sub").mkdir(parents=True)
    (root / ".git").mkdir()
    (root / "guide.md").write_text(MARKDOWN)
    (root / "sub" / "page.html").write_text(HTML)
    (root / "notes.txt").write_text("First note about the harbour.\n\nSecond note about the bridge.")
    (root / ".git" / "HEAD.txt").write_text("hidden")
    (root / "image.png").write_bytes(b"\x89PNG\x00\x00")
    (root / "binary.txt").write_bytes(b"abc\x00def")
    (root / "latin1.md").write_bytes("caf\xe9".encode("latin-1"))
    (root / "empty.html").write_text("<html><script>x</script><p>\u200b&shy;</p></html>")  # nothing visible
    return root


def test_a_directory_becomes_documents_with_ids_titles_and_metadata(docs_dir, tmp_path, caplog):
    out = tmp_path / "corpus.jsonl"
    with caplog.at_level(logging.WARNING):
        report = from_files([docs_dir], out, opts=IngestOptions(extra_meta={"collection": "handbook"}))
    docs = {d.id: d for d in read_corpus(out)}
    assert sorted(docs) == ["guide.md", "notes.txt", "sub/page.html"]
    assert (report.documents, report.passages) == (3, sum(len(d.paragraphs) for d in docs.values()))
    assert docs["guide.md"].title == "Install guide"
    assert docs["sub/page.html"].title == "Rotterdam history"
    assert docs["notes.txt"].title == "notes"  # no heading: the file name
    assert docs["guide.md"].meta == {"source": "guide.md", "title": "Install guide", "date": "2024-05-01",
                                     "tags": ["setup", "linux"], "collection": "handbook"}
    assert docs["sub/page.html"].meta["author"] == "Ann"
    # the short heading joins its paragraph; the short list items join one another
    assert docs["guide.md"].paragraphs[0].startswith("Installing\n\nRun the installer")
    skipped = dict(report.skipped)
    assert set(skipped) == {str(docs_dir / n) for n in ("binary.txt", "latin1.md", "empty.html")}
    assert skipped[str(docs_dir / "binary.txt")].startswith("binary")
    assert "not UTF-8 (byte 0xe9 at offset 3)" in skipped[str(docs_dir / "latin1.md")]
    assert skipped[str(docs_dir / "empty.html")] == "no text"
    for name in ("binary.txt", "latin1.md", "empty.html"):  # each warning names its file
        assert any(str(docs_dir / name) in r.getMessage() for r in caplog.records)



def test_utf16_files_and_html_in_its_declared_encoding_are_read(tmp_path):
    """A UTF-16 file with its byte order mark (Notepad's "Unicode") was skipped as "binary", and an HTML page in the
    encoding its <meta charset> declares as "not UTF-8"; a Latin-1 text file with nothing declared still is."""
    root = tmp_path / "docs"
    root.mkdir()
    (root / "notes.txt").write_bytes("Café opens at nine.\n\nThe bakery on the corner sells bread.".encode("utf-16"))
    (root / "old.html").write_bytes('<html><head><meta charset="iso-8859-1"><title>Caf\xe9</title></head><body>'
                                    '<p>Le caf\xe9 ouvre \xe0 neuf heures, pr\xe8s du march\xe9.</p></body></html>'
                                    .encode("latin-1"))
    (root / "http.htm").write_bytes('<meta http-equiv="Content-Type" content="text/html; charset=windows-1251">'
                                    '<p>Москва — столица России.</p>'.encode("cp1251"))
    (root / "plain.txt").write_bytes("Caf\xe9 without a declaration.".encode("latin-1"))
    (root / "undefined.html").write_bytes(b'<meta charset="iso-8859-1"><p>Caf\xe9 \x81 ouvert.</p>')  # no cp1252 0x81
    (root / "escape.html").write_bytes(b'<meta charset="unicode_escape"><p>\xff\\u0041</p>')
    (root / "junk.txt").write_bytes(codecs.BOM_UTF16_LE + b"A\x00\x00\x00" * 8)  # a BOM, then NUL characters
    report = from_files([root], tmp_path / "c.jsonl")
    docs = {d.id: d for d in read_corpus(tmp_path / "c.jsonl")}
    assert docs["notes.txt"].paragraphs[0].startswith("Café opens at nine.")
    assert docs["old.html"].title == "Café" and "près du marché" in docs["old.html"].paragraphs[0]
    assert "Москва — столица России." in docs["http.htm"].paragraphs[0]
    assert "Café" in docs["undefined.html"].paragraphs[0]
    skipped = dict(report.skipped)
    assert skipped.pop(str(root / "plain.txt")) == "not UTF-8 (byte 0xe9 at offset 3); convert it to UTF-8 first"
    assert "which is no character encoding this reader knows" in skipped.pop(str(root / "escape.html"))
    assert skipped.pop(str(root / "junk.txt")).startswith("binary file") and not skipped

def test_strict_refuses_what_would_be_skipped(docs_dir, tmp_path):
    with pytest.raises(IngestError, match=r"binary\.txt: binary file"):
        from_files([docs_dir], tmp_path / "c.jsonl", opts=IngestOptions(strict=True))
    assert not (tmp_path / "c.jsonl").exists()  # nothing half-written


def test_files_given_by_name_and_duplicates(docs_dir, tmp_path):
    out = tmp_path / "c.jsonl"
    from_files([docs_dir / "notes.txt", docs_dir / "sub", docs_dir / "sub" / "page.html"], out)
    assert [d.id for d in read_corpus(out)] == [(docs_dir / "notes.txt").as_posix(), "page.html"]  # each file once
    with pytest.raises(IngestError, match=r"image\.png: unsupported file type '\.png'"):
        from_files([docs_dir / "image.png"], out)
    with pytest.raises(IngestError, match="nowhere: no such file or directory"):
        from_files([tmp_path / "nowhere"], out)
    with pytest.raises(IngestError, match="no documents in"):
        from_files([docs_dir / "binary.txt"], tmp_path / "none.jsonl")


def test_ids_from_a_metadata_field(tmp_path):
    root = tmp_path / "d"
    root.mkdir()
    (root / "a.md").write_text("---\nslug: alpha\n---\ntext a")
    (root / "b.md").write_text("---\nslug: alpha\n---\ntext b")
    (root / "c.md").write_text("text c")
    opts = IngestOptions(id_field="slug")
    with pytest.raises(IngestError, match=r"b\.md and .*a\.md have the same document id 'alpha'"):
        from_files([root / "a.md", root / "b.md"], tmp_path / "c.jsonl", opts=opts)
    with pytest.raises(IngestError, match=r"c\.md: no usable 'slug' field for the document id"):
        from_files([root / "c.md"], tmp_path / "c.jsonl", opts=opts)
    (root / "d.md").write_text("---\nslug: ' '\n---\ntext d")  # a blank id, which index build refuses
    with pytest.raises(IngestError, match=r"d\.md: no usable 'slug' field for the document id"):
        from_files([root / "d.md"], tmp_path / "c.jsonl", opts=opts)
    from_files([root / "a.md"], tmp_path / "c.jsonl", opts=opts)
    assert [d.id for d in read_corpus(tmp_path / "c.jsonl")] == ["alpha"]


def test_front_matter_numbers_in_forms_json_has_not_stay_as_written(tmp_path):
    """YAML 1.1 read `zip: 01234` as the octal 668, `time: 1:30` as 90 (base 60), `n: 1_000` as 1000 and `hex: 0x1F`
    as 31: a code lost its zeros and a time became a number. They stay as written; decimal numbers stay numbers."""
    (tmp_path / "a.md").write_text("---\nzip: 01234\ntime: 1:30\nlap: 1:30.5\nn: 1_000\nhex: 0x1F\nplain: 42\n"
                                   "signed: -7\nzero: 0\nratio: 1.5\nbig: 1e3\n---\ntext a")
    from_files([tmp_path / "a.md"], tmp_path / "c.jsonl")
    (doc,) = read_corpus(tmp_path / "c.jsonl")
    assert {k: v for k, v in doc.meta.items() if k != "source"} == {
        "zip": "01234", "time": "1:30", "lap": "1:30.5", "n": "1_000", "hex": "0x1F", "plain": 42, "signed": -7,
        "zero": 0, "ratio": 1.5, "big": "1e3"}


def test_an_id_field_that_yaml_reads_as_a_number_or_boolean_is_the_id_as_written(tmp_path):
    """Front matter's `slug: 1.10` was the id "1.1" and `true` "True": the id is the value as the file writes it; the
    metadata keeps YAML's value, and a field given by --meta is the id as given."""
    written = {"a.md": "010", "b.md": "1.10", "c.md": "true", "d.md": "-7", "e.md": "'quoted 1'", "f.md": "0x1F"}
    for name, value in written.items():
        (tmp_path / name).write_text(f"---\nslug: {value}\n---\ntext of {name}")
    from_files([tmp_path], tmp_path / "c.jsonl", opts=IngestOptions(id_field="slug"))
    docs = list(read_corpus(tmp_path / "c.jsonl"))
    assert [d.id for d in docs] == ["010", "1.10", "true", "-7", "quoted 1", "0x1F"]
    assert [d.meta["slug"] for d in docs] == ["010", 1.1, True, -7, "quoted 1", "0x1F"]
    from_files([tmp_path / "a.md"], tmp_path / "m.jsonl", opts=IngestOptions(id_field="slug",
                                                                             extra_meta={"slug": "given"}))
    assert [d.id for d in read_corpus(tmp_path / "m.jsonl")] == ["given"]


def test_long_files_are_chunked_within_the_budget(tmp_path):
    path = tmp_path / "long.txt"
    path.write_text(" ".join(f"word{i}." for i in range(500)))
    from_files([path], tmp_path / "c.jsonl", opts=IngestOptions(chunk=ChunkOptions(max_tokens=60, overlap=10)))
    (doc,) = read_corpus(tmp_path / "c.jsonl")
    assert len(doc.paragraphs) > 8 and all(len(p.split()) <= 60 for p in doc.paragraphs)


def test_meta_round_trips_and_bad_meta_names_the_line(tmp_path):
    docs = [Document("a", "A", ("x",), {"url": "https://a", "n": [1, 2]}), Document("b", "B", ("y",))]
    write_corpus(tmp_path / "c.jsonl", docs)
    assert list(read_corpus(tmp_path / "c.jsonl")) == docs
    assert "meta" not in (tmp_path / "c.jsonl").read_text().splitlines()[1]  # no metadata: no key
    (tmp_path / "bad.jsonl").write_text('{"id": "a", "paragraphs": ["x"]}\n{"id": "b", "paragraphs": ["y"], "meta": [1]}\n')
    with pytest.raises(CorpusError, match=r"bad\.jsonl:2: 'meta' must be a JSON object, got list"):
        list(read_corpus(tmp_path / "bad.jsonl"))


def test_index_build_names_the_converter(docs_dir, tmp_path, tiny_squad, tiny_corpus, tiny_model_dir):
    assert corpus_problem(tiny_corpus) is None
    cases = {docs_dir: f"spanseek corpus from-files {docs_dir} --out {tmp_path}/docs.jsonl",
             docs_dir / "guide.md": f"spanseek corpus from-files {docs_dir}/guide.md --out {docs_dir}/guide.jsonl",
             tiny_squad: f"spanseek corpus from-squad {tiny_squad} --out {tiny_squad.parent}/tiny-squad.jsonl"}
    for path, command in cases.items():
        with pytest.raises(BuildError) as e:
            build_index(path, tiny_model_dir, tmp_path / "index")
        assert command in str(e.value) and "spanseek index build --corpus" in str(e.value)
    (tmp_path / "table.dat").write_text("a,b\n")
    assert "is not a JSONL corpus" in corpus_problem(tmp_path / "table.dat")
    (tmp_path / "table.csv").write_text("a,b\n")  # a table from-files reads
    assert f"is a csv file, not a JSONL corpus; convert it with `spanseek corpus from-files {tmp_path}/table.csv" in (
        corpus_problem(tmp_path / "table.csv"))
    assert not (tmp_path / "index").exists()  # refused before anything was made


def test_a_corpus_with_a_utf8_bom_is_accepted(tmp_path):
    path = tmp_path / "bom.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps({"id": "a", "title": "A", "paragraphs": ["x"]}).encode() + b"\n")
    assert corpus_problem(path) is None
    assert [d.id for d in read_corpus(path)] == ["a"]


def test_bytes_that_are_not_utf8_near_the_start_name_the_line(tmp_path):
    good = json.dumps({"id": "1", "title": "A", "paragraphs": ["ok"]}).encode() + b"\n"
    path = tmp_path / "latin1.jsonl"
    path.write_bytes(good * 100 + '{"id": "x", "title": "Caf\u00e9", "paragraphs": ["x"]}\n'.encode("latin-1"))
    assert corpus_problem(path) == f"{path}:101: not UTF-8 (byte 25 of the line, 0xe9); save the file as UTF-8"
    path.write_bytes(b"\xef\xbb\xbf" + b'{"title": "\xe9"}\n')  # the BOM is not counted in the line
    assert corpus_problem(path).startswith(f"{path}:1: not UTF-8 (byte 11 of the line, 0xe9)")


def test_a_character_cut_by_the_64kb_sniff_is_not_an_error(tmp_path):
    path = tmp_path / "long.jsonl"
    prefix = b'{"id": "a", "title": "A", "paragraphs": ["'
    path.write_bytes(prefix + b"x" * (65535 - len(prefix)) + "é".encode() + b'"]}\n')  # é spans bytes 65535-65536
    assert corpus_problem(path) is None


def test_cli_from_files(docs_dir, tmp_path, capsys):
    out = tmp_path / "c.jsonl"
    argv = ["corpus", "from-files", str(docs_dir), "--out", str(out), "--tokenizer", "words", "--max-tokens", "50",
            "--meta", "team=docs"]
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert "wrote 3 documents" in err and "/6 [" in err  # a bar of the 6 files read (a long PDF takes a while)
    corpus = out.read_text()
    assert all(json.loads(line)["meta"]["team"] == "docs" for line in corpus.splitlines())
    assert main([*argv, "--quiet"]) == 0
    err = capsys.readouterr().err
    assert "wrote 3 documents" in err and "/6 [" not in err and out.read_text() == corpus  # the same corpus
    assert main([*argv[:-1], "nokey"]) == 2
    assert "--meta takes KEY=VALUE" in capsys.readouterr().err
    assert main([*argv, "--meta", "team=web"]) == 2  # the last one won, silently
    assert "--meta team given twice ('docs' and 'web')" in capsys.readouterr().err
    assert main([*argv, "--overlap", "40"]) == 2
    assert "overlap must be between 0 and max_tokens / 2" in capsys.readouterr().err


SECTIONS = """Before any heading.

# Guide

Intro text of the guide.

## Install

### Linux

Run the installer on Linux.

## Usage

Call the command.

### Empty part

## Last

The end.
"""


def test_markdown_and_html_headings_give_each_paragraph_its_section(tmp_path):
    """Markdown and HTML headings gave no ``section`` (Word headings did), so a passage packed a heading with the
    section before it; now each paragraph has its heading path, as a Word file's has, less the title heading."""
    ext = extract_markdown(SECTIONS)
    sections = [m.get("section") for m in ext.paragraph_meta]
    assert list(zip(ext.paragraphs, sections, strict=True)) == [
        # "Guide", the only h1 and the first heading, is the title: it is in no path (the hit has the title)
        ("Before any heading.", None), ("Guide", None), ("Intro text of the guide.", None),
        # "Install" has no text of its own: it joins the heading that follows it at once
        ("Install\n\nLinux", "Install > Linux"), ("Run the installer on Linux.", "Install > Linux"),
        ("Usage", "Usage"), ("Call the command.", "Usage"),
        ("Empty part\n\nLast", "Last"),  # a section without text, before a heading of a higher level: the same
        ("The end.", "Last")]
    (tmp_path / "guide.md").write_text(SECTIONS)
    from_files([tmp_path / "guide.md"], tmp_path / "c.jsonl")
    (doc,) = read_corpus(tmp_path / "c.jsonl")
    assert [(p, doc.paragraph_meta(i).get("section")) for i, p in enumerate(doc.paragraphs)] == [
        ("Before any heading.\n\nGuide\n\nIntro text of the guide.", None),
        ("Install\n\nLinux\n\nRun the installer on Linux.", "Install > Linux"), ("Usage\n\nCall the command.", "Usage"),
        ("Empty part\n\nLast\n\nThe end.", "Last")]  # each short passage took in the next section's text before
    skipped = extract_markdown("## Sub\n\none\n\n#### Deep\n\ntwo\n\n### Mid\n\nthree\n\n## Next\n\nfour")
    assert [m["section"] for m in skipped.paragraph_meta] == [  # a level is closed by its own or a higher one
        "Sub", "Sub", "Sub > Deep", "Sub > Deep", "Sub > Mid", "Sub > Mid", "Next", "Next"]
    parts = extract_markdown("# One\n\ntext\n\n# Two\n\n## Detail\n\nmore")  # two h1s: parts, not a title
    assert [(p, m["section"]) for p, m in zip(parts.paragraphs, parts.paragraph_meta, strict=True)] == [
        ("One", "One"), ("text", "One"), ("Two\n\nDetail", "Two > Detail"), ("more", "Two > Detail")]
    assert extract_markdown("no heading at all").paragraph_meta == []
    assert extract_markdown("# Title\n\nonly text under the title").paragraph_meta == []
    other = extract_markdown("---\ntitle: Handbook\n---\n# Castle\n\ntext")  # front matter names another title
    assert other.title == "Handbook" and [m["section"] for m in other.paragraph_meta] == ["Castle", "Castle"]
    html = extract_html(PAGE)  # trafilatura's main content: its headings too
    assert [m.get("section") for m in html.paragraph_meta] == [None, None, *["Requirements"] * 4]


TABLE = """# Options

| Flag | Default | What |
|---|--:|---|
| `--max-tokens` | 200 | passage budget |
| `--tokenizer` |  | *model* or words |
"""


def test_table_rows_read_as_header_and_cell_pairs():
    """A table row read "--max-tokens 200 passage budget": the header row's names were lost (a paragraph of its own,
    far from most rows); now each row names its cells, and an empty cell is left out."""
    rows = ["Flag: --max-tokens; Default: 200; What: passage budget", "Flag: --tokenizer; What: model or words"]
    assert extract_markdown(TABLE).paragraphs == ["Options", *rows]
    html = ("<table><tr><th>Flag</th><th>Default</th><th>What</th></tr>"  # HTML in Markdown: no <thead>, cells
            "<tr><td><code>--max-tokens</code></td><td>200</td><td>passage <p>budget</td>"  # left open, a block
            "<tr><td>--tokenizer</td><td> </td><td>model or words</td><td>extra</td></tr></table>")
    assert extract_markdown(html).paragraphs == [rows[0], rows[1] + "; extra"]  # no name: the cell stays bare
    page = PAGE.replace("<ul>", "<table><thead><tr><th>Flag</th><th>Default</th><th>What</th></tr></thead><tbody>"
                        "<tr><td>--max-tokens</td><td>200</td><td>passage budget</td></tr><tr><td>--tokenizer</td>"
                        "<td></td><td>model or words</td></tr></tbody></table><table><tr><td>plain</td><td>row</td>"
                        "</tr></table><ul>")
    main = extract_html(page).paragraphs  # trafilatura's main content: its rows likewise, each table by its own
    assert main[main.index(rows[0]):][:3] == [*rows, "plain row"]
    only = extract_markdown("| Flag | Default |\n|---|---|\n")  # a header without rows is kept as it reads
    assert only.paragraphs == ["Flag Default"]
    assert extract_markdown("<table><tr><td>a</td><td>b</td></tr></table>").paragraphs == ["a b"]  # no header


CODE = """## Build

Make the corpus, then the index:

```bash
spanseek corpus from-files   docs/ \\
    --out work/docs.jsonl

spanseek index build --corpus work/docs.jsonl
```
"""


def test_code_blocks_keep_their_lines(tmp_path):
    """A code block was one line ("... docs/ \\ --out work/docs.jsonl spanseek index build ..."); now its lines are
    kept (their spacing collapsed, blank lines dropped), in one paragraph, with their indentation (a Python function
    read flush left, its body indistinguishable from what follows)."""
    code = "spanseek corpus from-files docs/ \\\n    --out work/docs.jsonl\nspanseek index build --corpus work/docs.jsonl"
    assert extract_markdown(CODE).paragraphs == ["Build", "Make the corpus, then the index:", code]
    pre = "<p>Run:</p>\n\n<pre>make  install<br>make test\n\n  make lint</pre>\n\n<p>Done.</p>"  # HTML in Markdown
    assert extract_markdown(pre).paragraphs == ["Run:", "make install\nmake test\n  make lint", "Done."]
    (tmp_path / "build.md").write_text(CODE)
    from_files([tmp_path / "build.md"], tmp_path / "c.jsonl", opts=IngestOptions(chunk=ChunkOptions(min_tokens=0)))
    (doc,) = read_corpus(tmp_path / "c.jsonl")
    assert doc.paragraphs[-1] == code  # one passage, its lines kept: no "\n\n" (a break answers never cross)
    indented = code.replace("\n", "\n  ")  # the lines after the first indented by two spaces
    page = PAGE.replace("<ul>", f"<pre><code>{indented}</code></pre><ul>")
    assert indented in extract_html(page).paragraphs  # trafilatura's main content: its code likewise
    python = "```python\ndef area(r):\n\tif r < 0:\n        raise ValueError(r)\n    return  3.14 * r * r\n```\n"
    assert extract_markdown(python).paragraphs == [
        "def area(r):\n    if r < 0:\n        raise ValueError(r)\n    return 3.14 * r * r"]  # tabs as 4 spaces
    shared = "<pre>\n    x = 1\n      y = 2\n</pre>"  # what every line shares is left out
    assert extract_markdown(shared).paragraphs == ["x = 1\n  y = 2"]


@pytest.mark.skipif(shutil.which("setpriv") is None, reason="needs setpriv (util-linux) to read as a process that may not")
def test_files_and_folders_that_cannot_be_read_are_skipped_naming_them(tmp_path):
    """A file the process may not read stopped the whole run ("Permission denied", nothing written), and a folder it
    may not read was left out without a word. Run without root's right to read anything (setpriv)."""
    import subprocess
    import sys

    (tmp_path / "d" / "sub").mkdir(parents=True)
    (tmp_path / "d" / "a.txt").write_text("The harbour was built in 1620.")
    (tmp_path / "d" / "sub" / "b.txt").write_text("Hidden from the reader.")
    for locked in (tmp_path / "d" / "locked.txt", tmp_path / "d" / "locked.pdf"):
        locked.write_text("x")
        locked.chmod(0)
    (tmp_path / "d" / "sub").chmod(0)
    script = ("import json, sys; from spanseek.indexer.ingest import from_files; "
              "r = from_files([sys.argv[1]], sys.argv[2]); print(json.dumps([r.documents, r.skipped]))")
    try:
        done = subprocess.run(["setpriv", "--bounding-set=-dac_override,-dac_read_search", sys.executable, "-c",
                               script, str(tmp_path / "d"), str(tmp_path / "out.jsonl")],
                              capture_output=True, text=True, timeout=120)
    finally:
        (tmp_path / "d" / "sub").chmod(0o755)
    assert done.returncode == 0, done.stderr
    documents, skipped = json.loads(done.stdout.splitlines()[-1])
    reasons = {Path(p).name: why for p, why in skipped}
    assert documents == 1 and reasons == {"sub": "unreadable folder (Permission denied)",
                                          "locked.txt": "unreadable (Permission denied)",
                                          "locked.pdf": "unreadable (Permission denied)"}


def test_deeply_nested_pages_keep_all_their_text():
    """libxml2 stopped parsing a page nested past 255 elements (a template leaving a <div> open per item) and
    markdown-it stopped rendering past 20 nested blocks (a list 10 deep): the rest of the file was lost, silently."""
    items = "".join(f"<div class=item><h2>Product {i}</h2><p>Product {i} costs {i} euro in the shop.</p>"
                    for i in range(300))
    page = extract_html(f"<html><body><main>{items}</main></body></html>")
    assert "Product 299 costs 299 euro in the shop." in page.paragraphs
    outline = "".join("  " * d + f"- level {d} of the outline\n" for d in range(12))
    md = extract_markdown(f"# Plan\n\nIntro.\n\n{outline}\nThe budget is 40,000 euro.\n\n## Risks\n\nSupplier delay.\n")
    assert "level 11 of the outline" in md.paragraphs and md.paragraphs[-1] == "Supplier delay."


def test_markdown_nested_past_the_parser_limit_keeps_its_text_and_the_rest_of_the_file():
    """Past MARKDOWN_NESTING (indexer.markdown_render) markdown-it skips a block's lines, for a list item the rest
    of the file: a list 60 deep lost its deep items and every section after it, a quote 150 deep its line. Both are
    read again, flatter."""
    outline = "".join("  " * d + f"- level {d} of the outline\n" for d in range(60))
    quote = ">" * 150 + " the quoted line\n"
    mixed = "".join("  " * d + "> - " for d in range(40)) + "the mixed line\n"  # quotes in lists in quotes ...
    md = extract_markdown(f"# Plan\n\n{outline}\nThe budget is 40,000 euro.\n\n## Risks\n\n{quote}\n{mixed}\n"
                          "Supplier delay.\n")
    text = "\n".join(md.paragraphs)
    for d in range(60):
        assert f"level {d} of the outline" in md.paragraphs
    assert "the quoted line" in text and "the mixed line" in text and "The budget is 40,000 euro." in md.paragraphs
    sections = dict(zip(md.paragraphs, (m.get("section") for m in md.paragraph_meta), strict=True))
    assert sections["Supplier delay."] == "Risks" and sections["level 59 of the outline"] is None


def test_sloppy_html_keeps_its_headings_lists_and_tables_apart():
    """A page without <main> whose paragraphs are left open before a list (an unclosed <b>) came out of trafilatura
    as run-on paragraphs ("... bold first item 0second item 0 Part 1"), without its headings."""
    sections = "".join(f"<h2>Part {i}</h2><p>Paragraph {i} of the text. <b>bold<ul><li>first item {i}"
                       f"<li>second item {i}</ul>" for i in range(3))
    page = extract_html(f"<html><head><title>T</title></head><body><h1>T</h1>{sections}<h2>Prices</h2><table>"
                        "<tr><th>Item</th><th>Price</th></tr><tr><td>Apple</td><td>3 euro</td></tr></table></body></html>")
    assert "first item 1" in page.paragraphs and "second item 1" in page.paragraphs
    assert "Item: Apple; Price: 3 euro" in page.paragraphs
    sections_of = {p: m["section"] for p, m in zip(page.paragraphs, page.paragraph_meta, strict=True)}
    assert sections_of["first item 2"] == "Part 2" and sections_of["Item: Apple; Price: 3 euro"] == "Prices"


def test_a_header_cell_spanning_columns_names_each_of_them():
    """trafilatura pads a column a header cell spans with an empty header cell (and the reader of Markdown's HTML
    did the same), so "Tide" over two columns named only the first: "Port: Dover; Tide: high; 06:10". A header row of
    one name over the whole table (its title) still names nothing but the first column."""
    fill = "<p>The harbour authority publishes its tide tables every spring for the pilots and the ferry crews.</p>"
    table = ("<table><tr><th>Port</th><th colspan=2>Tide</th><th>Depth</th></tr><tr><td>Dover</td><td>high</td>"
             "<td>06:10</td><td>12 m</td></tr><tr><td>Deal</td><td colspan=2>none</td><td>9 m</td></tr></table>")
    title = ("<table><tr><th colspan=3>Channel ports</th></tr><tr><td>Dover</td><td>06:10</td><td>12 m</td></tr>"
             "</table>")
    expected = ["Port: Dover; Tide: high; Tide: 06:10; Depth: 12 m", "Port: Deal; Tide: none; Depth: 9 m",
                "Channel ports: Dover; 06:10; 12 m"]
    page = extract_html(f"<html><body><main><h1>T</h1>{fill}{table}{fill}{title}{fill}</main></body></html>")
    assert [p for p in page.paragraphs if p != fill[3:-4]][1:] == expected
    assert extract_markdown(f"# T\n\n{table}\n\n{title}\n").paragraphs[1:] == expected


def test_a_header_of_two_levels_names_each_column_by_both():
    """A header row of groups ("Tide" over two columns) over a row of their columns' names, with a cell spanning both
    rows beside them ("Port"): trafilatura marked only the first row a header, so the second read as a row named by
    the groups ("Tide: high; Tide: low") and the rows below as "Tide: 3.2 m"; the reader of Markdown's HTML kept the
    second row's names alone and, not counting the cell spanning rows, named each cell after the next column's
    ("high: Dover"). A title row over the header and a header spanning rows over a header-only table read alike."""
    fill = "<p>The harbour authority publishes its tide tables every spring for the pilots and the ferry crews.</p>"
    table = ("<table><thead><tr><th rowspan=2>Port</th><th colspan=2>Tide</th><th colspan=2>Wind</th></tr>"
             "<tr><th>high</th><th>low</th><th>speed</th><th>from</th></tr></thead><tbody><tr><td>Dover</td>"
             "<td>3.2 m</td><td>0.4 m</td><td>12 kn</td><td>SW</td></tr><tr><td>Deal</td><td>3.1 m</td>"
             "<td></td><td>9 kn</td><td>W</td></tr></tbody></table>")
    titled = ("<table><tr><th colspan=3>Channel ports</th></tr><tr><th>Port</th><th>high</th><th>low</th></tr>"
              "<tr><td>Dover</td><td>3.2 m</td><td>0.4 m</td></tr></table>")
    alone = "<table><tr><th rowspan=2>Port</th><th colspan=2>Tide</th></tr><tr><th>high</th><th>low</th></tr></table>"
    expected = ["Port: Dover; Tide / high: 3.2 m; Tide / low: 0.4 m; Wind / speed: 12 kn; Wind / from: SW",
                "Port: Deal; Tide / high: 3.1 m; Wind / speed: 9 kn; Wind / from: W",
                "Channel ports", "Port: Dover; high: 3.2 m; low: 0.4 m", "Port Tide / high Tide / low"]
    page = extract_html(f"<html><body><main><h1>T</h1>{fill}{table}{fill}{titled}{fill}{alone}</main></body></html>")
    assert [p for p in page.paragraphs if p != fill[3:-4]][1:] == expected
    assert extract_markdown(f"# T\n\n{table}\n\n{titled}\n\n{alone}\n").paragraphs[1:] == expected


def test_a_group_over_the_header_beside_an_empty_corner_names_its_columns():
    """A group's name over two columns beside an empty corner cell (a header row of one name) was read as the table's
    title: a paragraph of its own, its columns named by the row under it alone ("high: 3.2 m"); in an HTML page's
    <thead> of <td> cells, trafilatura named nothing ("Dover 3.2 m 0.4 m")."""
    fill = "<p>The harbour authority publishes its tide tables every spring for the pilots and the ferry crews.</p>"
    for cell in ("td", "th"):
        table = (f"<table><thead><tr><{cell}></{cell}><{cell} colspan=2>Tide</{cell}></tr><tr><{cell}>Port</{cell}>"
                 f"<{cell}>high</{cell}><{cell}>low</{cell}></tr></thead><tbody><tr><td>Dover</td><td>3.2 m</td>"
                 "<td>0.4 m</td></tr></tbody></table>")
        expected = ["Port: Dover; Tide / high: 3.2 m; Tide / low: 0.4 m"]
        page = extract_html(f"<html><body><main><h1>T</h1>{fill}{table}{fill}</main></body></html>")
        assert [p for p in page.paragraphs if p != fill[3:-4]][1:] == expected
        assert extract_markdown(f"# T\n\n{table}\n").paragraphs[1:] == expected


def test_a_cell_spanning_rows_keeps_the_cells_beside_it_in_their_columns():
    """The reader of Markdown's HTML did not count a body cell spanning rows in the rows below it, so their cells
    took the names of the columns before theirs ("Port: Tue; Day: 3.3"); it reads in each of its rows, as in a
    page's main content and in Word."""
    table = ("<table><tr><th>Port</th><th>Day</th><th>High</th></tr><tr><td rowspan=2>Dover</td><td>Mon</td>"
             "<td>3.2</td></tr><tr><td>Tue</td><td>3.3</td></tr></table>")
    expected = ["Port: Dover; Day: Mon; High: 3.2", "Port: Dover; Day: Tue; High: 3.3"]
    assert extract_markdown(f"# T\n\n{table}\n").paragraphs[1:] == expected


def test_a_layout_table_spanning_rows_reads_its_cells_once():
    """A table of plain cells (no <th>, no <thead>) is mostly a page's layout: a DocBook manual's navigation footer
    spans its previous and next links over two rows, and reading them in each row gave every page of the manual its
    links twice. Only a table with a header reads a cell spanning rows in each of them (its rows are named)."""
    nav = ("<table class='nav'><tr><td rowspan='2'>&lt;&lt; 1. Introduction</td><td>Up</td>"
           "<td rowspan='2'>3. Advanced Topics &gt;&gt;</td></tr><tr><td>Home</td></tr></table>")
    fill = "<p>" + "The harbour authority publishes its tide tables every spring for the ferry crews. " * 4 + "</p>"
    expected = ["<< 1. Introduction Up 3. Advanced Topics >>", "Home"]
    assert extract_html(f"<html><body><main><h1>T</h1>{fill}{nav}</main></body></html>").paragraphs[2:] == expected
    assert extract_markdown(f"# T\n\n{nav}\n").paragraphs[1:] == expected
    headed = nav.replace("<table class='nav'>", "<table><thead><tr><th>Back</th><th>Up</th><th>Next</th></tr></thead>")
    named = ["Back: << 1. Introduction; Up: Home; Next: 3. Advanced Topics >>"]
    assert extract_html(f"<html><body><main><h1>T</h1>{fill}{headed}</main></body></html>").paragraphs[3:] == named
    assert extract_markdown(f"# T\n\n{headed}\n").paragraphs[2:] == named


def test_the_text_of_a_figure_in_main_content_is_kept():
    """trafilatura removes a <figure> whole, as media: a figure's caption, a quotation or a code listing set in one
    was lost from a page's main content (the reader of Markdown's HTML kept them)."""
    fill = "<p>The harbour authority publishes its tide tables every spring for the pilots and the ferry crews.</p>"
    figures = ("<figure><img src='map.png' alt='Map'><figcaption>Figure 1: The north terminal.</figcaption></figure>"
               "<figure><blockquote><p>Every harbour is different.</p></blockquote><figcaption>Vi Nguyen, harbour "
               "master</figcaption></figure><figure><pre><code>tide --port kellerton</code></pre></figure>")
    page = extract_html(f"<html><body><main><h1>T</h1>{fill}{figures}{fill}</main></body></html>")
    assert page.paragraphs == ["T", fill[3:-4], "Figure 1: The north terminal.", "Every harbour is different.",
                               "Vi Nguyen, harbour master", "tide --port kellerton", fill[3:-4]]


def test_a_private_use_character_of_a_page_is_kept_and_names_no_spanned_column():
    """The reader marked the columns a header cell spans with U+E000, a private-use character that icon fonts draw
    glyphs with: a page's U+E000 was removed from its text, and a header cell holding only it took the name of the
    column before it. The mark is now a noncharacter, which no text holds."""
    fill = "<p>The harbour authority publishes its tide tables every spring for the pilots and the ferry crews.</p>"
    table = ("<table><tr><th>Port</th><th>\ue000</th></tr><tr><td>Dover</td><td>open</td></tr></table>"
             "<pre>\ue000 ferry\n  on time</pre>")
    page = extract_html(f"<html><body><main><h1>T</h1>{fill}{table}{fill}</main></body></html>")
    assert [p for p in page.paragraphs if p != fill[3:-4]][1:] == ["Port: Dover; \ue000: open", "\ue000 ferry\n  on time"]


def test_html_pre_keeps_its_lines_and_indentation_as_code_does():
    """trafilatura reads a <pre> as code only when its text looks like code to it ("{", an indented line after a
    line break): a configuration file or a shell session in <pre> read as one line."""
    fill = "<p>The harbour authority publishes its tide tables every spring for the pilots and the ferry crews.</p>"
    config = "server:\n  port: 8080\n  host: example.org\nlogging:\n  level: debug"
    shell = "$ spanseek serve --port 8080\nstarted on port 8080"
    page = f"<html><body><main><h1>T</h1>{fill}<pre>{config}</pre>{fill}<pre>{shell}</pre>{fill}</main></body></html>"
    texts = extract_html(page).paragraphs
    assert config in texts and shell in texts


def test_html_text_after_a_block_inside_another_reads_after_it():
    """trafilatura keeps a <p> inside a <blockquote> inside it: the quote's text after the paragraph read before the
    paragraph, and text it left loose in its body (the rest of a <div> around a <p>) was lost."""
    fill = "<p>The harbour authority publishes its tide tables every spring for the pilots and the ferry crews.</p>"
    page = (f"<html><body><main><h1>Tides</h1>{fill}<blockquote>The pilots said <p>the spring tide runs at four "
            "knots</p> and the ferry waits for slack water.</blockquote><div>Loose text <p>the inner paragraph of the "
            "div</p> and the loose text after it.</div><ul><li>Speed at the mouth: <table><tr><th>Tide</th><th>Knots"
            f"</th></tr><tr><td>spring</td><td>4</td></tr></table></li></ul>{fill}</main></body></html>")
    texts = extract_html(page).paragraphs
    assert texts[2:7] == ["The pilots said", "the spring tide runs at four knots", "and the ferry waits for slack water.",
                          "the inner paragraph of the div", "and the loose text after it."]
    # the table's cells, which trafilatura leaves loose in the list item, read spaced ("TideKnotsspring4" before)
    assert texts[7] == "Speed at the mouth: Tide Knots spring 4" and texts[-1] == texts[1]


def test_html_inline_code_comments_and_markdown_asides_stay_in_their_text(tmp_path):
    """Inline code and quotes are read in their paragraph or heading (they came out as paragraphs of their own,
    leaving "The flag" as a heading); an HTML comment no longer cuts the text after it; a Markdown file's raw
    <aside> is text (only an HTML page's asides are boilerplate); a page whose only heading is its site title is
    read through trafilatura, without its cookie banner."""
    page = ("<html><body><main><h1>CLI reference</h1><p>The tool has flags that change how files are written and "
            "read by the service.</p><h2>The <code>--force</code> flag</h2><p>Run <code>tool build</code> before "
            "<code>tool deploy</code> in every pipeline.<!-- note --> Then check the logs.</p>"
            "<h2>Other</h2><p>Nothing else to say about this tool today, really nothing at all.</p></main></body></html>")
    ext = extract_html(page)
    assert "Run tool build before tool deploy in every pipeline. Then check the logs." in ext.paragraphs
    assert {m.get("section") for m in ext.paragraph_meta} >= {"The --force flag"}
    md = extract_markdown("# Setup\n\nInstall it.\n\n<aside>Note: Windows needs administrator rights.</aside>\n")
    assert "Note: Windows needs administrator rights." in md.paragraphs
    blog = ("<html><body><div class='site-header'><h1>Crumb Journal</h1><p>Baking notes</p></div>"
            "<div class='post'><p>My sourdough starter is fed twice a day with equal weights of rye flour and water, "
            "and it doubles in about five hours.</p><p>For the loaf I mix 500 g of bread flour with 350 g of water "
            "and rest it for an hour.</p></div><div class='cookie'>We use cookies. Accept</div></body></html>")
    assert not any("cookies" in p for p in extract_html(blog).paragraphs)


def test_links_to_folders_are_not_followed(tmp_path):
    """A folder is walked as it is: a link to another folder (inside it, or a loop back up) is not followed, so ids
    stay the files' own paths and nothing outside the folder is read; a link to a file outside it is not read."""
    root = tmp_path / "docs"
    (root / "sub").mkdir(parents=True)
    (root / "a.md").write_text("The harbour opened in 1620.")
    (root / "sub" / "b.md").write_text("The castle was built in 1250.")
    (tmp_path / "outside.md").write_text("Not in the folder.")
    (root / "alias").symlink_to(root / "sub")
    (root / "sub" / "loop").symlink_to(root)
    (root / "ext").symlink_to(tmp_path)
    (root / "c.md").symlink_to(tmp_path / "outside.md")
    report = from_files([root], tmp_path / "c.jsonl")
    assert sorted(d.id for d in read_corpus(tmp_path / "c.jsonl")) == ["a.md", "sub/b.md"]
    assert [p for p, _ in report.skipped] == [str(root / "c.md")]


def test_a_loop_of_links_is_named_as_a_loop_and_a_tree_of_any_depth_is_walked(tmp_path):
    """Two links to each other were each named "a link to l2.txt, which does not exist", and a tree 1,100 folders
    deep stopped the run with "maximum recursion depth exceeded" (os.walk recursed per folder). The walk keeps no
    frame per folder: here a tree 400 deep under a recursion limit of 250 frames more than the test's own (the
    kernel's cost of a path grows with its depth: a deeper tree makes a slow test)."""
    import inspect
    import sys

    root = tmp_path / "docs"
    root.mkdir()
    (root / "l1.txt").symlink_to("l2.txt")
    (root / "l2.txt").symlink_to("l1.txt")
    deep = root
    for _ in range(400):
        deep /= "d"
        deep.mkdir()
    (deep / "x.txt").write_text("The lighthouse was lit in 1850.")
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(len(inspect.stack(0)) + 250)
    try:
        report = from_files([root], tmp_path / "c.jsonl")
    finally:
        sys.setrecursionlimit(limit)
    assert [d.id for d in read_corpus(tmp_path / "c.jsonl")] == ["d/" * 400 + "x.txt"]
    assert dict((Path(p).name, why) for p, why in report.skipped) == {
        "l1.txt": "a link in a loop of links (l1.txt -> l2.txt -> l1.txt), which leads to no file; not read",
        "l2.txt": "a link in a loop of links (l2.txt -> l1.txt -> l2.txt), which leads to no file; not read"}


def test_a_hard_link_is_read_as_a_file_of_its_own_and_a_link_to_a_file_read_is_not(tmp_path):
    """Files were told apart by device and inode, so of a file and a hard link to it (a folder copied with ``cp -al``)
    only the first was read, the other skipped as "the same file"; a hard link is a file under its own name, as it
    was before, while a symbolic link to a file read is still skipped."""
    root = tmp_path / "docs"
    (root / "copy").mkdir(parents=True)
    (root / "a.txt").write_text("The mill was built in 1650.")
    os.link(root / "a.txt", root / "copy" / "a.txt")
    (root / "link.txt").symlink_to("copy/a.txt")
    report = from_files([root], tmp_path / "c.jsonl")
    assert [d.id for d in read_corpus(tmp_path / "c.jsonl")] == ["a.txt", "copy/a.txt"]
    assert report.skipped == [(str(root / "link.txt"), f"the same file as {root / 'copy' / 'a.txt'}, which is read; "
                                                       "not read twice")]


def test_an_out_that_is_a_directory_is_refused_before_any_file_is_read(tmp_path, monkeypatch):
    """``corpus from-files DOCS --out DIR`` read every file, then ended with "DIR: Is a directory"."""
    import spanseek.indexer.ingest as ingest

    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.txt").write_text("The mill was built in 1650.")
    monkeypatch.setattr(ingest, "read_document", lambda *a: pytest.fail("a file was read"))
    with pytest.raises(IngestError, match=re.escape(f"--out {tmp_path}: a directory; give the corpus file to write "
                                                    f"({tmp_path / 'corpus.jsonl'})")):
        from_files([tmp_path / "docs"], tmp_path)


def test_a_link_to_a_file_outside_the_folder_is_skipped_and_named_unless_links_are_followed(tmp_path):
    """A link to a file was read wherever it led: one planted in a shared folder put its target (~/.ssh/id_rsa) in
    the corpus. Now a link leading outside the folder is skipped and named (``follow_links`` reads it), a link inside
    it is read under its own name, and of a file and a link to it the file keeps the id, the link named as skipped
    (it was dropped without a word, and the link kept the id when it sorted first); a link to nothing is named."""
    root = tmp_path / "shared"
    (root / ".drafts").mkdir(parents=True)
    (tmp_path / "id_rsa.txt").write_text("PRIVATE KEY material")
    (root / "guide.md").write_text("The ferry leaves at nine.")
    (root / ".drafts" / "plan.md").write_text("The bridge opens in May.")
    (root / "key.txt").symlink_to(tmp_path / "id_rsa.txt")
    (root / "plan.md").symlink_to(".drafts/plan.md")  # inside the folder (a hidden one, not walked): read as plan.md
    (root / "a-latest.md").symlink_to("guide.md")  # sorts before its file
    (root / "gone.md").symlink_to("nowhere.md")
    report = from_files([root], tmp_path / "c.jsonl")
    docs = {d.id: d.paragraphs for d in read_corpus(tmp_path / "c.jsonl")}
    assert docs == {"guide.md": ("The ferry leaves at nine.",), "plan.md": ("The bridge opens in May.",)}
    skipped = {Path(p).name: why for p, why in report.skipped}
    assert skipped == {
        "key.txt": f"a link to {tmp_path / 'id_rsa.txt'}, outside the folder {root}; not read (--follow-links reads "
                   f"it)",
        "a-latest.md": f"the same file as {root / 'guide.md'}, which is read; not read twice",
        "gone.md": "a link to nowhere.md, which does not exist; not read"}
    with pytest.raises(IngestError, match="id_rsa.txt is one of the files to read"):  # followed, never overwritten
        from_files([root], tmp_path / "id_rsa.txt", opts=IngestOptions(follow_links=True))
    report = from_files([root], tmp_path / "e.jsonl", opts=IngestOptions(follow_links=True))
    assert {d.id for d in read_corpus(tmp_path / "e.jsonl")} == {"guide.md", "plan.md", "key.txt"}
    assert sorted(Path(p).name for p, _ in report.skipped) == ["a-latest.md", "gone.md"]
    # a file named on the command line is read wherever it leads; reached again, it is named, not read twice
    report = from_files([root / "key.txt", root / "guide.md", root], tmp_path / "f.jsonl")
    assert sorted(d.id for d in read_corpus(tmp_path / "f.jsonl")) == [f"{root}/guide.md", f"{root}/key.txt", "plan.md"]
    assert sorted(Path(p).name for p, _ in report.skipped) == ["a-latest.md", "gone.md", "guide.md", "key.txt"]
    (root / "gone.md").unlink()
    with pytest.raises(IngestError, match="key.txt: a link to .*id_rsa.txt, outside the folder"):
        from_files([root], tmp_path / "d.jsonl", opts=IngestOptions(strict=True))


def test_a_nul_past_the_first_8_kib_skips_the_file_naming_its_offset(tmp_path):
    """Only a file's first 8 KiB were looked at for NULs: one later passed into a text file's passages as it was, and
    into a Markdown or HTML file's as U+FFFD."""
    root = tmp_path / "docs"
    root.mkdir()
    late = b"The bridge was built in 1450. " * 400 + b"then\x00binary"  # 12,000 bytes of text, then a NUL
    for name in ("late.txt", "late.md", "late.html"):
        (root / name).write_bytes(late)
    (root / "wide.txt").write_bytes(codecs.BOM_UTF16_LE + ("Text. " * 2000 + "\x00").encode("utf-16-le"))
    (root / "fine.txt").write_bytes(late.replace(b"\x00", b" "))
    report = from_files([root], tmp_path / "c.jsonl")
    assert [d.id for d in read_corpus(tmp_path / "c.jsonl")] == ["fine.txt"]
    skipped = dict(report.skipped)
    for name in ("late.txt", "late.md", "late.html"):
        assert skipped[str(root / name)] == "binary data in the text (a NUL at offset 12,004)"
    assert skipped[str(root / "wide.txt")] == "binary data in the text (a NUL at offset 12,000)"


def test_trafilaturas_notes_on_its_own_extraction_stay_out_of_the_log(tmp_path, caplog):
    """trafilatura logged "discarding data: None" at warning level for a page it found no main content in, which
    showed among from-files' warnings; the skip's own warning stays, and trafilatura's records outside our reading."""
    root = tmp_path / "docs"
    root.mkdir()
    (root / "image.html").write_bytes(b'<html><body><img src="harbour.png"></body></html>')
    (root / "nav.html").write_bytes(b"<html><body><nav>Ferry times</nav></body></html>")
    with caplog.at_level(logging.DEBUG):
        report = from_files([root], tmp_path / "c.jsonl")
        logging.getLogger("trafilatura.core").warning("its own use")
    assert dict(report.skipped) == {str(root / "image.html"): "no text"}
    trafilatura = [r.getMessage() for r in caplog.records if r.name.startswith("trafilatura")]
    assert trafilatura == ["its own use"]
    assert any("skipped" in r.getMessage() and "image.html" in r.getMessage() for r in caplog.records)


def test_memory_running_out_in_a_reader_is_no_damaged_file(tmp_path, monkeypatch):
    """A reader that takes any error for a damaged file (pdfminer, python-docx and python-pptx raise many types) said
    so of a MemoryError too: a file too large for the memory its reading may take was skipped as damaged."""
    from spanseek.indexer import ingest
    from spanseek.indexer.documents import Unreadable

    def short_of_memory(path):
        try:
            raise MemoryError
        except Exception as e:
            raise Unreadable(f"damaged ({e!r})") from None

    monkeypatch.setitem(ingest._BINARY, "pdf", short_of_memory)
    (tmp_path / "big.pdf").write_bytes(b"%PDF-1.4")
    with pytest.raises(MemoryError):
        ingest.read_document(tmp_path / "big.pdf", "big.pdf", lambda words: [1] * len(words), IngestOptions())


def test_a_file_name_spelled_nfd_is_an_nfc_id(tmp_path):
    """from-files named a file as the file system spelled it: café.md from macOS's HFS+ (a combining accent, NFD)
    and from elsewhere (one character, NFC) were two ids that look alike; PUT /files/{name} and sync take NFC."""
    root = tmp_path / "docs"
    root.mkdir()
    (root / "cafe\u0301.md").write_text("In 1450 Gala built the bridge.", encoding="utf-8")
    from_files([root], tmp_path / "c.jsonl")
    assert [(d.id, d.meta["source"]) for d in read_corpus(tmp_path / "c.jsonl")] == [("caf\u00e9.md", "caf\u00e9.md")]


def test_a_link_outside_the_folder_to_nothing_or_a_fifo_is_not_said_to_be_read_with_follow_links(tmp_path):
    """A link to a file that does not exist, or to a FIFO, outside the folder, was named as one --follow-links reads,
    which reads neither: a link to nothing is named as such, with or without --follow-links, and a link to a FIFO
    outside the folder as outside it, without the hint."""
    root = tmp_path / "shared"
    root.mkdir()
    (root / "guide.md").write_text("The ferry leaves at nine.")
    (root / "old.md").symlink_to(tmp_path / "moved" / "old.md")
    os.mkfifo(tmp_path / "pipe.txt")
    (root / "pipe.txt").symlink_to(tmp_path / "pipe.txt")
    for follow in (False, True):
        report = from_files([root], tmp_path / "c.jsonl", opts=IngestOptions(follow_links=follow))
        skipped = dict(report.skipped)
        assert skipped[str(root / "old.md")] == f"a link to {tmp_path / 'moved' / 'old.md'}, which does not exist; not read"
        assert "--follow-links" not in skipped[str(root / "pipe.txt")]


def test_hidden_html_is_not_read_in_a_page_or_in_markdown():
    """An element a browser does not show (the ``hidden`` attribute, an inline ``display: none``) was read, in a
    page's main content and in Markdown's HTML: a closed menu's or dialog's text, an old copy kept out of sight. Its
    text is left out, the text around it read; ``hidden="until-found"`` (shown by find in page) and a page hidden
    whole until its scripts run are read."""
    fill = "<p>The harbour authority publishes its tide tables every spring for the pilots and the ferry crews.</p>"
    page = ("<html><body style='display:none'><main><h1>Tides</h1>" + fill + "<p hidden>Draft: do not publish.</p>"
            "<div style='color: red; display: none !important'><div>Old table</div><p>Withdrawn in 2019.</p></div>"
            "<p>The spring tide runs at <span hidden>five</span>four knots.</p>"
            "<details hidden='until-found'><p>Slack water lasts twenty minutes.</p></details>" + fill + "</main></body></html>")
    assert extract_html(page).paragraphs == [
        "Tides", fill[3:-4], "The spring tide runs at four knots.", "Slack water lasts twenty minutes.", fill[3:-4]]
    sloppy = "<p>First shown.<p hidden>Not shown.<p>Shown after an unclosed hidden paragraph.<div hidden><div>x</div>y</div>End."
    for read in (extract_html, extract_markdown):  # (a page's main content; Markdown's HTML, read as a whole page is)
        assert read(sloppy).paragraphs == ["First shown.", "Shown after an unclosed hidden paragraph.", "End."]
    markdown = ("Shown.\n\n<div hidden>\n\nNot shown.\n\n</div>\n\n<p style=\"display: none\">Also not shown.</p>\n\n"
                "The tide runs at <span hidden>five</span>four knots.\n")
    assert extract_markdown(markdown).paragraphs == ["Shown.", "The tide runs at four knots."]


def test_soft_hyphens_in_html_and_markdown_are_dropped():
    """A soft hyphen (``&shy;``, U+00AD: shown only where a line breaks there) stayed in the text, inside the word
    ("Donau\\xaddampf\\xadschiff"), so it matched no search for the word; it is dropped, as a PDF's are, in a page's
    main content, in a page read whole and in Markdown."""
    words = "The Donau&shy;dampf&shy;schiff sails at nine from the landing stage by the old town."
    page = f"<html><body><main><h1>Sailings</h1><p>{words}</p><p>It returns at five in the evening.</p></main></body></html>"
    expected = "The Donaudampfschiff sails at nine from the landing stage by the old town."
    assert extract_html(page).paragraphs[1] == expected
    assert extract_html(f"<p>{words}").paragraphs == [expected]
    assert extract_markdown(words.replace("&shy;", "\u00ad") + "\n\n| Ship | Time |\n|---|---|\n| Donau\u00adkönigin | 9 |\n"
                            ).paragraphs == [expected, "Ship: Donaukönigin; Time: 9"]


def test_a_table_in_a_table_s_cell_reads_in_that_cell_as_in_word():
    """A table inside a cell read as paragraphs of its own, away from its cell: after the table around it in a
    page's main content, before it in Markdown, and the cell lost that text ("Info: Open"). It reads in its cell's
    text, its cells spaced, as Word reads one, the same in a page, a page read whole and Markdown."""
    fill = "<p>The harbour authority publishes its tide tables every spring for the pilots and the ferry crews.</p>"
    table = ("<table><tr><th>Port</th><th>Info</th></tr><tr><td>Wick</td><td>Open <table><tr><th>Berth</th>"
             "<th>Depth</th></tr><tr><td>C1</td><td>9 m<table><tr><td>at low water</td></tr></table></td></tr></table>"
             "</td></tr><tr><td>Ayr</td><td>Closed</td></tr></table>")
    rows = ["Port: Wick; Info: Open Berth Depth C1 9 m at low water", "Port: Ayr; Info: Closed"]
    page = f"<html><body><main><h1>Ports</h1>{fill}{table}{fill}</main></body></html>"
    assert extract_html(page).paragraphs == ["Ports", fill[3:-4], *rows, fill[3:-4]]
    assert extract_html(table).paragraphs == rows
    assert extract_markdown(f"# Ports\n\n{table}\n").paragraphs == ["Ports", *rows]


def test_text_marked_deleted_is_not_read_and_inserted_text_is(tmp_path):
    """HTML's edits, <del> and <ins>, are its tracked changes: the removed text was read with the new ("fares are
    ten twelve pounds"); as in Word, inserted text reads and deleted text does not, in a page and in Markdown. Struck
    text that is no edit (<s>, Markdown's ~~) still reads: it is shown, only no longer true."""
    fill = "<p>The harbour authority publishes its tide tables every spring for the pilots and the ferry crews.</p>"
    edit = "<p>Fares are <del>ten</del> <ins>twelve</ins> pounds, <s>cash only</s>.</p><del><p>Old timetable.</p></del>"
    page = f"<html><body><main><h1>Fares</h1>{fill}{edit}{fill}</main></body></html>"
    assert extract_html(page).paragraphs == ["Fares", fill[3:-4], "Fares are twelve pounds, cash only.", fill[3:-4]]
    assert extract_markdown(f"# Fares\n\n{edit}\n").paragraphs == ["Fares", "Fares are twelve pounds, cash only."]


def test_a_hidden_cell_or_list_item_left_open_ends_where_a_browser_ends_it():
    """A hidden <td>, <th> or <li> left open (their end tags may be left out) hid the rest of the file: "</tr>" and
    "</ul>" did not end it, nor did the cells and rows after a hidden header cell, so a Markdown file's table and
    every paragraph after it were lost. Each ends where a browser ends it; a list inside a hidden item stays hidden."""
    table = ("<table><tr><th>Route<th>Time<th style='display:none'>id</tr><tr><td>Kellerton<td>09:15"
             "<td style='display: none'>17</tr><tr><td>Kirkwall<td>17:40<td hidden>18</tr></table>")
    lists = "<ul><li>Monday<li hidden>Old Tuesday<ul><li>Old noon</ul><li>Wednesday<li hidden>Old Friday</ul>"
    md = extract_markdown(f"# Ferries\n\n{table}\n\n{lists}\n\nSailings may be cancelled in a gale.\n")
    assert md.paragraphs == ["Ferries", "Route: Kellerton; Time: 09:15", "Route: Kirkwall; Time: 17:40", "Monday",
                             "Wednesday", "Sailings may be cancelled in a gale."]


def test_a_page_whose_text_is_all_hidden_until_its_scripts_run_is_read():
    """A page that keeps its content in a hidden wrapper until its scripts show it (``<div id="app" style="display:
    none">``, as a hidden <body> does) read as no text at all once hidden elements were left out. Where all of a
    page's text is hidden it is read; a page with shown text still leaves its hidden text out."""
    fill = "<p>The harbour authority publishes its tide tables every spring for the pilots and the ferry crews.</p>"
    content = f"<main><h1>Tides</h1>{fill}<p hidden>Draft: do not publish.</p></main>"
    script = "<script>document.getElementById('app').style.display = 'block'</script>"
    page = extract_html(f"<html><head><title>Tides</title></head><body><div id=app style='display: none'>{content}"
                        f"</div>{script}</body></html>")
    assert page.paragraphs == ["Tides", fill[3:-4], "Draft: do not publish."] and page.title == "Tides"
    assert extract_html(f"<html><body>{content}</body></html>").paragraphs == ["Tides", fill[3:-4]]


def test_a_table_in_a_layout_tables_cell_reads_as_a_table():
    """A page laid out with a table (no header cells: a menu's column beside the content's) holds its data tables in
    a cell. Those read as the cell's text, their header and cells run together with the page's paragraphs ("...
    route. Route Departure Kellerton to Kirkwall 09:15 ..."); they read as tables, each row named by its header."""
    fill = "<p>The harbour authority publishes its ferry timetable every spring for the pilots and the crews.</p>"
    data = ("<table><tr><th>Route</th><th>Departure</th></tr><tr><td>Kellerton to Kirkwall</td><td>09:15</td></tr>"
            "<tr><td>Kirkwall to Kellerton</td><td>17:40</td></tr></table>")
    page = (f"<html><body><table width='100%'><tr><td><a href='/'>Home</a></td><td><h1>Timetable</h1>{fill}{data}"
            f"{fill}</td></tr></table></body></html>")
    rows = ["Route: Kellerton to Kirkwall; Departure: 09:15", "Route: Kirkwall to Kellerton; Departure: 17:40"]
    for read in (extract_html, extract_markdown):
        paragraphs = read(page).paragraphs
        assert [p for p in paragraphs if p in rows] == rows and not any("Departure Kellerton" in p for p in paragraphs)


def test_a_hidden_inline_element_left_open_ends_with_the_element_around_it():
    """A hidden <span> left open ("<span hidden>old</p>") stayed open to the end of Markdown's HTML or a page read
    whole, so the rest of the file was lost. It ends where the paragraph, or the inline element, around it ends."""
    html = ("<p>Call the harbour office<span style='display:none'> (old number 0123)</p><p>Ferries leave at nine.</p>"
            "<p>Tickets are <b>sold <span hidden>only</b> on board.</p><div><p>Last line.</p></div>")
    assert extract_markdown(html).paragraphs == [
        "Call the harbour office", "Ferries leave at nine.", "Tickets are sold on board.", "Last line."]


def test_a_hidden_tab_panel_is_read():
    """Tabbed content (sphinx-tabs, ARIA's tabs pattern) hides every panel but the first with the ``hidden``
    attribute until its tab is clicked: the other tabs' text was left out with text a browser never shows. A tab's
    panel (``role="tabpanel"``) is read; other hidden elements are not."""
    fill = "<p>The harbour authority publishes its tide tables every spring for the pilots and the ferry crews.</p>"
    tabs = ('<div class="sphinx-tabs"><div role="tablist"><button role="tab">Windows</button><button role="tab">'
            'Linux</button></div><div class="sphinx-tabs-panel" role="tabpanel"><p>Run the installer as an '
            'administrator.</p></div><div class="sphinx-tabs-panel" hidden="true" role="tabpanel"><p>Install the '
            'package with apt.</p></div></div><p hidden>Draft: do not publish.</p>')
    expected = ["Run the installer as an administrator.", "Install the package with apt."]
    page = extract_html(f"<html><body><main><h1>Install</h1>{fill}{tabs}{fill}</main></body></html>").paragraphs
    assert [p for p in page if p in expected] == expected and "Draft: do not publish." not in page
    assert extract_markdown(f"# Install\n\n{tabs}\n").paragraphs[-2:] == expected
