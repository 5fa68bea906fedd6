r"""RTF files as WordPad, TextEdit and Word write them, made here as text, through ``indexer.rtf`` and
``corpus from-files``: paragraphs, headings by style or outline level, tables, \uN and code-page escapes, what is
left out (font and style tables, pictures, hidden text, headers), the info group's metadata; files that are no
RTF, cut short or nested without bound.

    OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/indexer/test_rtf.py
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

import pytest

from spanseek.core.io import read_corpus
from spanseek.indexer.extracted import Unreadable
from spanseek.indexer.ingest import from_files
from spanseek.indexer.rtf import extract_rtf
from tests.indexer.test_hostile_files import deadline

HEAD = (r"{\rtf1\ansi\ansicpg1252\deff0{\fonttbl{\f0\fswiss\fcharset0 Arial;}{\f1\fcharset204 Arial Cyr;}"
        r"{\f2\fcharset128 MS Mincho;}}{\colortbl;\red255\green0\blue0;}"
        r"{\stylesheet{\ql Normal;}{\s1\ql\outlinelevel0 Heading One;}{\s2 heading 2;}{\*\cs10 Default Paragraph Font;}}"
        r"{\info{\title Harbour guide}{\author Ann Gala}{\creatim\yr2024}}{\header Page header\par}" "\n")
BODY = (
    r"\pard\plain\s1 The bridge\par" "\n"
    r"\pard In 1450 Gala built the caf\'e9 \u8364?5 bridge,\line then rested.\par" "\n"
    r"\pard\s2 Works\par\pard{\f1 \'cf\'f0\'e8\'e2\'e5\'f2} {\f2 \'93\'fa\'96\'7b}{\v hidden note}\par" "\n"
    r"\trowd\trhdr\cellx1000\cellx2000\pard\intbl Route\cell Departure\cell\row" "\n"
    r"\trowd\cellx1000\cellx2000\pard\intbl Kellerton\cell 09:15\par daily\cell\row" "\n"
    r"\pard After the table{\*\shppict{\pict junk}}{\pict\bin4 {{{{}, \uc2\u-10180??\u-8439??x a bridge emoji.\par"
    r"{\field{\*\fldinst HYPERLINK http://x}{\fldrslt the harbour site}}\par}"
)


def write_rtf(path: Path, text: str = HEAD + BODY) -> Path:
    path.write_bytes(text.encode("latin-1"))
    return path


def test_paragraphs_headings_tables_and_escapes_read_as_word_shows_them(tmp_path):
    ext = extract_rtf(write_rtf(tmp_path / "g.rtf"))
    assert ext.title == "Harbour guide" and ext.meta == {"title": "Harbour guide", "author": "Ann Gala"}
    assert list(zip(ext.paragraphs, [m.get("section") for m in ext.paragraph_meta], strict=True)) == [
        ("The bridge", "The bridge"),
        ("In 1450 Gala built the caf\u00e9 \u20ac5 bridge, then rested.", "The bridge"),
        ("Works", "The bridge > Works"),
        ("\u041f\u0440\u0438\u0432\u0435\u0442 \u65e5\u672c", "The bridge > Works"),
        ("Route: Kellerton; Departure: 09:15 daily", "The bridge > Works"),
        ("After the table, \U0001f309x a bridge emoji.", "The bridge > Works"),
        ("the harbour site", "The bridge > Works"),
    ]


def test_a_table_without_a_header_row_reads_its_cells_spaced_and_the_title_falls_back_to_the_first_heading(
        tmp_path):
    text = (r"{\rtf1\ansi{\stylesheet{\s1 heading 1;}}\pard\s1 Crossings\par\trowd\pard\intbl Kellerton\cell 09:15"
            r"\cell\row\trowd\pard\intbl Kirkwall\cell 17:40\cell\row}")
    ext = extract_rtf(write_rtf(tmp_path / "t.rtf", text))
    assert ext.title == "Crossings" and ext.paragraphs == ["Crossings", "Kellerton 09:15", "Kirkwall 17:40"]


def test_files_that_are_no_rtf_or_are_damaged_are_named(tmp_path, caplog):
    def why(data: bytes) -> str:
        (tmp_path / "x.rtf").write_bytes(data)
        with pytest.raises(Unreadable) as e:
            extract_rtf(tmp_path / "x.rtf")
        return str(e.value)

    assert why(b"") == "an empty file (0 bytes), not an RTF (.rtf) file"
    assert why(b"%PDF-1.4") == "a PDF file, not an RTF (.rtf) file; rename it to .pdf"
    assert why(b"PK\x03\x04") == ("a zip archive (a Word .docx file, or another), not an RTF (.rtf) file; rename it to "
                                  "its own suffix")
    assert why(b"Dear Hugo,") == r"not an RTF (.rtf) file: it does not begin with {\rtf"
    start = time.process_time()
    assert why(b"{\\rtf1 " + b"{" * 200_000 + b"deep") == (
        "not a readable RTF (.rtf) file: its groups nest deeper than 1,000 (at byte 1,006)")
    assert time.process_time() - start < 1
    with caplog.at_level(logging.WARNING, logger="spanseek.indexer.rtf"):
        ext = extract_rtf(write_rtf(tmp_path / "cut.rtf", (HEAD + BODY)[:-60]))
    assert ext.paragraphs[-1] == "After the table, \U0001f309x a bridge emoji." and "cut.rtf: it ends inside 3 groups (cut short?); read up to its end" in (
        caplog.text)


def test_a_negative_binary_count_reads_no_data(tmp_path):
    r"""``\bin-7`` moved the reader back over its own control word, which it then read again, for ever."""
    with deadline(1):
        ext = extract_rtf(write_rtf(tmp_path / "b.rtf", r"{\rtf1 Before \bin-7 after\par\bin0 Next\par}"))
    assert ext.paragraphs == ["Before after", "Next"]


def test_a_unicode_escape_no_character_has_reads_as_a_replacement_character(tmp_path):
    r"""``\u99999999`` (past U+10FFFF) and ``\u-99999`` (below a signed 16-bit number) stopped the reader with an
    OverflowError or a ValueError; the characters around them, and a 16-bit one written negative, read as before."""
    text = r"{\rtf1 a\u99999999?b\u9999999999?c\u-99999?d\u-3913?e\u1114111?f\par}"
    assert extract_rtf(write_rtf(tmp_path / "u.rtf", text)).paragraphs == [
        "a\ufffdb\ufffdc\ufffdd\uf0b7e\U0010fffff"]


def test_from_files_reads_rtf_files_in_a_folder(tmp_path):
    folder = tmp_path / "docs"
    folder.mkdir()
    write_rtf(folder / "guide.rtf")
    (folder / "fake.rtf").write_bytes(b"%PDF-1.4")
    report = from_files([folder], tmp_path / "c.jsonl")
    (doc,) = list(read_corpus(tmp_path / "c.jsonl"))
    assert doc.id == "guide.rtf" and doc.title == "Harbour guide" and doc.meta["author"] == "Ann Gala"
    assert report.skipped == [(str(folder / "fake.rtf"), "a PDF file, not an RTF (.rtf) file; rename it to .pdf")]
