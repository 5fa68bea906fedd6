"""Flat OpenDocument files (.fodt, .fodp: the package's parts in one XML document, as LibreOffice saves "Flat XML"),
made here from the packaged tests' parts, through ``indexer.opendocument`` and ``corpus from-files``: they read as
the same document's package does; damaged, renamed and hostile files are named with what is wrong.

    OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/indexer/test_flat_opendocument.py
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from spanseek.core.io import read_corpus
from spanseek.indexer.extracted import Unreadable
from spanseek.indexer.ingest import from_files
from spanseek.indexer.opendocument import extract_odp, extract_odt
from tests.indexer.test_opendocument import BODY, META, NS, SLIDES, STYLES, write_odp, write_odt

PRESENTATION_NS = ('xmlns:presentation="urn:oasis:names:tc:opendocument:xmlns:presentation:1.0" '
                   'xmlns:svg="urn:oasis:names:tc:opendocument:xmlns:svg-compatible:1.0"')


def write_flat(path: Path, body: str = f"<office:text>{BODY}</office:text>", meta: str = META,
               mimetype: str = "application/vnd.oasis.opendocument.text", head: str = "") -> Path:
    path.write_text(f'<?xml version="1.0" encoding="UTF-8"?>{head}<office:document {NS} {PRESENTATION_NS} '
                    f'office:version="1.3" office:mimetype="{mimetype}">{meta}{STYLES}<office:body>{body}'
                    "</office:body></office:document>", encoding="utf-8")
    return path


def test_a_flat_text_reads_as_its_package_does(tmp_path):
    flat, packaged = extract_odt(write_flat(tmp_path / "g.fodt")), extract_odt(write_odt(tmp_path / "g.odt"))
    assert flat.paragraphs == packaged.paragraphs and len(flat.paragraphs) == 16
    assert flat.paragraph_meta == packaged.paragraph_meta and flat.paragraph_meta[12] == {"section": "Crossings"}
    assert (flat.title, flat.meta) == (packaged.title, packaged.meta) == (
        "Harbour guide 2026", {"title": "Harbour guide 2026", "author": "Ann Gala", "language": "en-GB"})


def test_a_flat_presentation_reads_as_its_package_does(tmp_path):
    flat = extract_odp(write_flat(tmp_path / "t.fodp", f"<office:presentation>{SLIDES}</office:presentation>",
                                  "<office:meta><dc:language>en</dc:language></office:meta>",
                                  "application/vnd.oasis.opendocument.presentation"))
    packaged = extract_odp(write_odp(tmp_path / "t.odp"))
    assert (flat.paragraphs, flat.paragraph_meta, flat.meta) == (
        packaged.paragraphs, packaged.paragraph_meta, packaged.meta)
    assert flat.paragraph_meta[0] == {"slide": 1, "section": "The bridge"} and flat.meta["slides"] == 2


def test_from_files_reads_flat_files_in_a_folder(tmp_path):
    folder = tmp_path / "docs"
    folder.mkdir()
    write_flat(folder / "guide.fodt")
    write_flat(folder / "talk.fodp", f"<office:presentation>{SLIDES}</office:presentation>", "",
               "application/vnd.oasis.opendocument.presentation")
    report = from_files([folder], tmp_path / "c.jsonl")
    docs = {doc.id: doc for doc in read_corpus(tmp_path / "c.jsonl")}
    assert report.documents == 2 and sorted(docs) == ["guide.fodt", "talk.fodp"]
    assert docs["guide.fodt"].meta["author"] == "Ann Gala" and docs["talk.fodp"].title == "The bridge"
    assert {m["slide"] for m in docs["talk.fodp"].passage_meta} == {1, 2}


def why(read, path: Path) -> str:  # type: ignore[no-untyped-def]
    with pytest.raises(Unreadable) as e:
        read(path)
    return str(e.value)


def test_damaged_renamed_and_hostile_flat_files_are_named_with_what_is_wrong(tmp_path):
    cut = tmp_path / "cut.fodt"
    cut.write_bytes(write_flat(tmp_path / "whole.fodt").read_bytes()[:500])
    assert why(extract_odt, cut).startswith("not a readable flat OpenDocument text (.fodt) file: not well-formed XML (")
    (tmp_path / "empty.fodt").write_bytes(b"")
    assert why(extract_odt, tmp_path / "empty.fodt") == (
        "not a readable flat OpenDocument text (.fodt) file: an empty file (0 bytes)")
    packaged = tmp_path / "zipped.fodt"
    packaged.write_bytes(write_odt(tmp_path / "z.odt").read_bytes())
    assert why(extract_odt, packaged).endswith("a flat file is one XML document; if it is a package, rename it to .odt")
    assert why(extract_odp, write_flat(tmp_path / "text.fodp")) == (
        "a flat OpenDocument file of type 'application/vnd.oasis.opendocument.text', not a flat OpenDocument "
        "presentation (.fodp) file; rename it to .fodt")
    (tmp_path / "page.fodt").write_text("<html><body><p>hi</p></body></html>", encoding="utf-8")
    assert why(extract_odt, tmp_path / "page.fodt") == (
        "not a flat OpenDocument text (.fodt) file: its root element is 'html', not office:document")
    assert why(extract_odt, write_flat(tmp_path / "nobody.fodt", "<office:spreadsheet/>")) == (
        "not a readable flat OpenDocument text (.fodt) file: it has no office:text body")
    laughs = ('<!DOCTYPE lolz [<!ENTITY lol "lol">' + "".join(
        f'<!ENTITY lol{i} "{("&lol" + str(i - 1) + ";") * 10 if i else "&lol;" * 10}">' for i in range(10)) + "]>")
    start = time.process_time()
    assert "amplification" in why(extract_odt, write_flat(tmp_path / "laughs.fodt", "<office:text><text:p>&lol9;"
                                                         "</text:p></office:text>", head=laughs))
    assert time.process_time() - start < 1
    report = from_files([cut, tmp_path / "whole.fodt"], tmp_path / "c.jsonl")
    assert report.documents == 1 and report.skipped[0][0] == str(cut)
