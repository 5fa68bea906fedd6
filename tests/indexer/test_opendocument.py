"""OpenDocument text files as LibreOffice Writer saves them, made here with zipfile, through
``indexer.opendocument.extract_odt`` and ``corpus from-files``: headings and sections, numbered and bulleted lists,
tables named by their header rows, footnotes and text boxes, what Writer hides or generates, meta.xml's metadata,
and damaged, protected and hostile files.

    OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/indexer/test_opendocument.py
"""

from __future__ import annotations

import time
import zipfile
from pathlib import Path

import pytest

from spanseek.core.io import read_corpus
from spanseek.indexer.extracted import Unreadable
from spanseek.indexer.ingest import IngestOptions, from_files
from spanseek.indexer.opendocument import extract_odp, extract_odt

NS = ('xmlns:office="urn:oasis:names:tc:opendocument:xmlns:office:1.0" '
      'xmlns:text="urn:oasis:names:tc:opendocument:xmlns:text:1.0" '
      'xmlns:table="urn:oasis:names:tc:opendocument:xmlns:table:1.0" '
      'xmlns:draw="urn:oasis:names:tc:opendocument:xmlns:drawing:1.0" '
      'xmlns:style="urn:oasis:names:tc:opendocument:xmlns:style:1.0" '
      'xmlns:fo="urn:oasis:names:tc:opendocument:xmlns:xsl-fo-compatible:1.0" '
      'xmlns:meta="urn:oasis:names:tc:opendocument:xmlns:meta:1.0" '
      'xmlns:dc="http://purl.org/dc/elements/1.1/"')
STYLES = ('<office:automatic-styles>'
          '<style:style style:name="P1" style:family="paragraph" style:parent-style-name="Title"/>'
          '<style:style style:name="P2" style:family="paragraph" style:parent-style-name="Table_20_Heading"/>'
          '<style:style style:name="T1" style:family="text"><style:text-properties text:display="none"/></style:style>'
          '<text:list-style style:name="L1"><text:list-level-style-number text:level="1" style:num-suffix="." '
          'style:num-format="1"/><text:list-level-style-number text:level="2" style:num-suffix="" style:num-format="1" '
          'text:display-levels="2"/></text:list-style>'
          '<text:list-style style:name="L2"><text:list-level-style-bullet text:level="1" text:bullet-char="\u2022"/>'
          '</text:list-style></office:automatic-styles>')
BODY = (
    '<text:p text:style-name="P1">Harbour guide</text:p>'
    '<text:table-of-content><text:index-body><text:p>The bridge 1</text:p></text:index-body></text:table-of-content>'
    '<text:h text:outline-level="1">The bridge</text:h>'
    '<text:p>In 1450 Gala<text:s text:c="3"/>built the<text:line-break/>harbour bridge.<text:note text:note-class='
    '"footnote"><text:note-citation>1</text:note-citation><text:note-body><text:p>Rebuilt in 1702.</text:p>'
    '</text:note-body></text:note> <text:span text:style-name="T1">A hidden remark.</text:span></text:p>'
    '<office:annotation><text:p>Check the year.</text:p></office:annotation>'
    '<text:h text:outline-level="2">Works</text:h>'
    '<text:list text:style-name="L1"><text:list-item><text:p>Lay the piers</text:p><text:list><text:list-item>'
    '<text:p>Drive the piles</text:p></text:list-item><text:list-item><text:p>Fill the caissons</text:p>'
    '</text:list-item></text:list></text:list-item><text:list-item><text:p>Raise the arches</text:p></text:list-item>'
    '</text:list>'
    '<text:p>Materials:</text:p>'
    '<text:list text:style-name="L2"><text:list-item><text:p>Granite</text:p></text:list-item></text:list>'
    '<text:list text:style-name="L1" text:continue-numbering="true"><text:list-item><text:p>Open the bridge'
    '</text:p></text:list-item></text:list>'
    '<text:h text:outline-level="1">Crossings</text:h>'
    '<table:table><table:table-column table:number-columns-repeated="3"/><table:table-header-rows><table:table-row>'
    '<table:table-cell><text:p>Route</text:p></table:table-cell><table:table-cell table:number-columns-spanned="2">'
    '<text:p>Departure</text:p></table:table-cell><table:covered-table-cell/></table:table-row>'
    '</table:table-header-rows><table:table-row><table:table-cell table:number-rows-spanned="2"><text:p>Kellerton'
    '</text:p></table:table-cell><table:table-cell><text:p>09:15</text:p></table:table-cell><table:table-cell>'
    '<text:p>daily</text:p></table:table-cell></table:table-row><table:table-row><table:covered-table-cell/>'
    '<table:table-cell><text:p>17:40</text:p></table:table-cell><table:table-cell table:number-columns-repeated="1">'
    '</table:table-cell></table:table-row></table:table>'
    '<text:p><draw:frame><draw:text-box><text:p>Tide tables in the office.</text:p></draw:text-box></draw:frame>'
    'See the box.</text:p>'
    '<text:section text:name="Old" text:display="none"><text:p>Withdrawn plan.</text:p></text:section>'
    '<text:tracked-changes><text:changed-region><text:deletion><text:p>Deleted text.</text:p></text:deletion>'
    '</text:changed-region></text:tracked-changes>'
)
META = ('<office:meta><dc:title>Harbour guide 2026</dc:title><meta:initial-creator>Ann Gala</meta:initial-creator>'
        '<dc:creator>Hugo Berg</dc:creator><dc:language>en-GB</dc:language></office:meta>')


def write_odt(path: Path, body: str = BODY, meta: str | None = META, styles: str = STYLES,
              manifest: str = "", mimetype: str = "application/vnd.oasis.opendocument.text",
              content: str | None = None) -> Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as z:
        z.writestr("mimetype", mimetype, compress_type=zipfile.ZIP_STORED)
        z.writestr("content.xml", content if content is not None else (
            f'<?xml version="1.0" encoding="UTF-8"?><office:document-content {NS} office:version="1.3">{styles}'
            f"<office:body><office:text>{body}</office:text></office:body></office:document-content>"))
        if meta is not None:
            z.writestr("meta.xml", f'<office:document-meta {NS}>{meta}</office:document-meta>')
        z.writestr("META-INF/manifest.xml", '<manifest:manifest xmlns:manifest="urn:oasis:names:tc:opendocument:'
                   f'xmlns:manifest:1.0"><manifest:file-entry manifest:full-path="/" />{manifest}</manifest:manifest>')
    return path


def test_paragraphs_headings_lists_tables_and_notes_read_in_order_as_writer_shows_them(tmp_path):
    """As a .docx is read: the Title paragraph is the title, not a passage; a table of contents, a comment, hidden
    text, a hidden section and tracked deletions are left out; a footnote and a text box follow their paragraph;
    list items after their numbers (a nested level "1.1", a list that continues another counting on); table rows
    named by the header row (a header cell over two columns names both, a cell merged over rows reads in each)."""
    ext = extract_odt(write_odt(tmp_path / "g.odt"))
    assert ext.title == "Harbour guide 2026"
    assert ext.meta == {"title": "Harbour guide 2026", "author": "Ann Gala", "language": "en-GB"}
    assert list(zip(ext.paragraphs, [m.get("section") for m in ext.paragraph_meta], strict=True)) == [
        ("The bridge", "The bridge"),
        ("In 1450 Gala built the harbour bridge.", "The bridge"),
        ("Rebuilt in 1702.", "The bridge"),
        ("Works", "The bridge > Works"),
        ("1. Lay the piers", "The bridge > Works"),
        ("1.1 Drive the piles", "The bridge > Works"),
        ("1.2 Fill the caissons", "The bridge > Works"),
        ("2. Raise the arches", "The bridge > Works"),
        ("Materials:", "The bridge > Works"),
        ("\u2022 Granite", "The bridge > Works"),
        ("3. Open the bridge", "The bridge > Works"),
        ("Crossings", "Crossings"),
        ("Route: Kellerton; Departure: 09:15; Departure: daily", "Crossings"),
        ("Route: Kellerton; Departure: 17:40", "Crossings"),
        ("See the box.", "Crossings"),
        ("Tide tables in the office.", "Crossings"),
    ]


def test_the_title_falls_back_to_the_title_paragraph_then_the_first_heading(tmp_path):
    assert extract_odt(write_odt(tmp_path / "a.odt", meta=None)).title == "Harbour guide"
    plain = write_odt(tmp_path / "b.odt", body='<text:h text:outline-level="1">Bridge</text:h><text:p>x</text:p>',
                      meta="<office:meta/>")
    ext = extract_odt(plain)
    assert ext.title == "Bridge" and ext.meta == {}


def test_from_files_reads_odt_files_in_folders(tmp_path):
    folder = tmp_path / "docs"
    folder.mkdir()
    write_odt(folder / "guide.odt")
    report = from_files([folder], tmp_path / "c.jsonl")
    (doc,) = list(read_corpus(tmp_path / "c.jsonl"))
    assert report.documents == 1 and doc.id == "guide.odt" and doc.title == "Harbour guide 2026"
    assert doc.meta["author"] == "Ann Gala" and {m["section"] for m in doc.passage_meta} == {
        "The bridge", "The bridge > Works", "Crossings"}


def test_protected_damaged_and_renamed_files_are_named_with_what_is_wrong(tmp_path):
    def why(path: Path) -> str:
        with pytest.raises(Unreadable) as e:
            extract_odt(path)
        return str(e.value)

    locked = write_odt(tmp_path / "locked.odt", manifest='<manifest:file-entry manifest:full-path="content.xml">'
                       '<manifest:encryption-data/></manifest:file-entry>', content="\x93binary")
    assert why(locked).startswith("a password-protected OpenDocument text (.odt) file (its content.xml is encrypted)")
    assert why(write_odt(tmp_path / "bad.odt", content="<office:document-content><oops")).startswith(
        "not a readable OpenDocument text (.odt) file: its part content.xml is not well-formed XML (")
    assert why(write_odt(tmp_path / "sheet.odt", mimetype="application/vnd.oasis.opendocument.spreadsheet")) == (
        "an OpenDocument spreadsheet (.ods), not an OpenDocument text (.odt) file; rename it to .ods")
    (tmp_path / "cut.odt").write_bytes(write_odt(tmp_path / "whole.odt").read_bytes()[:300])
    assert why(tmp_path / "cut.odt").startswith("not a readable OpenDocument text (.odt) file: its zip archive is "
                                                "truncated or damaged")
    report = from_files([tmp_path / "locked.odt", tmp_path / "whole.odt"], tmp_path / "c.jsonl")
    assert report.documents == 1 and report.skipped[0][0] == str(tmp_path / "locked.odt")


def test_entity_bombs_and_zip_bombs_are_refused_in_bounded_time(tmp_path):
    laughs = ('<!DOCTYPE lolz [<!ENTITY lol "lol">' + "".join(
        f'<!ENTITY lol{i} "{("&lol" + str(i - 1) + ";") * 10 if i else "&lol;" * 10}">' for i in range(10)) + "]>")
    content = (f"{laughs}<office:document-content {NS}><office:body><office:text><text:p>&lol9;</text:p>"
               "</office:text></office:body></office:document-content>")
    start = time.process_time()
    with pytest.raises(Unreadable, match="content.xml is not well-formed XML .*amplification"):
        extract_odt(write_odt(tmp_path / "laughs.odt", content=content))
    assert time.process_time() - start < 1
    deep = "<text:p>" + "<text:span>" * 10_000 + "deep" + "</text:span>" * 10_000 + "</text:p>"
    with pytest.raises(Unreadable, match="content.xml is not well-formed XML .Excessive depth in document: 256"):
        extract_odt(write_odt(tmp_path / "deep.odt", body=deep))  # as python-docx's parser refuses it in a .docx
    with pytest.raises(Unreadable, match="a zip bomb: its part content.xml expands from"):
        extract_odt(write_odt(tmp_path / "bomb.odt", body="<text:p>x</text:p>" + " " * (80 << 20)))
    assert from_files([tmp_path / "laughs.odt", write_odt(tmp_path / "ok.odt")], tmp_path / "c.jsonl",
                      opts=IngestOptions()).documents == 1


def frame(cls: str, y: str, x: str, inner: str) -> str:
    return (f'<draw:frame presentation:class="{cls}" svg:x="{x}" svg:y="{y}" svg:width="20cm" svg:height="2cm">'
            f"<draw:text-box>{inner}</draw:text-box></draw:frame>")


SLIDES = (
    '<draw:page draw:name="page1">'
    + frame("outline", "5cm", "2cm", '<text:list text:style-name="L1"><text:list-item><text:p>Lay the piers</text:p>'
            "</text:list-item><text:list-item><text:p>Raise the arches</text:p></text:list-item></text:list>")
    + frame("title", "1cm", "2cm", "<text:p>The bridge</text:p>")
    + '<draw:g><draw:custom-shape svg:x="12cm" svg:y="3cm"><text:p>Built 1450</text:p></draw:custom-shape>'
      '<draw:custom-shape svg:x="12cm" svg:y="3.5cm"><text:p>by Gala</text:p></draw:custom-shape></draw:g>'
    + '<draw:frame svg:x="2cm" svg:y="9cm"><table:table><table:table-header-rows><table:table-row><table:table-cell>'
      "<text:p>Bell</text:p></table:table-cell><table:table-cell><text:p>Cast</text:p></table:table-cell>"
      "</table:table-row></table:table-header-rows><table:table-row><table:table-cell><text:p>Great Tom</text:p>"
      "</table:table-cell><table:table-cell><text:p>1462</text:p></table:table-cell></table:table-row></table:table>"
      "</draw:frame>"
    + frame("page-number", "18cm", "20cm", "<text:p><text:page-number>1</text:page-number></text:p>")
    + frame("footer", "18cm", "2cm", "<text:p>Harbour Trust</text:p>")
    + '<presentation:notes><draw:page-thumbnail presentation:class="page"/>'
    + frame("notes", "12cm", "2cm", "<text:p>Mention the granite.</text:p>") + "</presentation:notes></draw:page>"
    + '<draw:page draw:name="page2">' + frame("subtitle", "4cm", "2cm", "<text:p>No title here</text:p>")
    + "</draw:page>"
)


def write_odp(path: Path, slides: str = SLIDES) -> Path:
    content = (f'<?xml version="1.0" encoding="UTF-8"?><office:document-content {NS} '
               'xmlns:presentation="urn:oasis:names:tc:opendocument:xmlns:presentation:1.0" '
               'xmlns:svg="urn:oasis:names:tc:opendocument:xmlns:svg-compatible:1.0">'
               f"{STYLES}<office:body><office:presentation>{slides}</office:presentation></office:body>"
               "</office:document-content>")
    return write_odt(path, content=content, mimetype="application/vnd.oasis.opendocument.presentation",
                     meta="<office:meta><dc:language>en</dc:language></office:meta>")


def test_a_password_protected_presentation_is_named_as_one(tmp_path):
    locked = write_odt(tmp_path / "locked.odp", manifest='<manifest:file-entry manifest:full-path="content.xml">'
                       '<manifest:encryption-data/></manifest:file-entry>', content="\x93binary",
                       mimetype="application/vnd.oasis.opendocument.presentation")
    with pytest.raises(Unreadable, match=r"^a password-protected OpenDocument presentation \(.odp\) file \(its "):
        extract_odp(locked)


def test_slides_read_title_first_then_shapes_top_to_bottom_then_notes_with_their_slide(tmp_path):
    """As a .pptx is read: the title, the other shapes top to bottom and left to right (a group's in its place), list
    items after their numbers, a table's rows named by its header row, the speaker's notes last; the slide number
    and the footer left out; each paragraph with its slide and the slide's title."""
    ext = extract_odp(write_odp(tmp_path / "talk.odp"))
    assert ext.title == "The bridge" and ext.meta == {"language": "en", "slides": 2}
    one = {"slide": 1, "section": "The bridge"}
    assert list(zip(ext.paragraphs, ext.paragraph_meta, strict=True)) == [
        ("The bridge", one), ("Built 1450", one), ("by Gala", one), ("1. Lay the piers", one),
        ("2. Raise the arches", one), ("Bell: Great Tom; Cast: 1462", one), ("Mention the granite.", one),
        ("No title here", {"slide": 2})]
    report = from_files([tmp_path], tmp_path / "c.jsonl")
    (doc,) = list(read_corpus(tmp_path / "c.jsonl"))
    assert report.documents == 1 and doc.id == "talk.odp" and {m["slide"] for m in doc.passage_meta} == {1, 2}
    with pytest.raises(Unreadable, match=r"^an OpenDocument text \(\.odt\), not an OpenDocument presentation \(\.odp\) "
                       r"file; rename it to \.odt$"):
        extract_odp(write_odt(tmp_path / "text.odp"))


def test_a_text_box_inside_a_text_box_reads_once(tmp_path):
    inner = '<draw:frame><draw:text-box><text:p>Inner note.</text:p></draw:text-box></draw:frame>'
    body = f'<text:p><draw:frame><draw:text-box><text:p>Outer{inner} box.</text:p></draw:text-box></draw:frame>x</text:p>'
    assert extract_odt(write_odt(tmp_path / "boxes.odt", body=body)).paragraphs == ["x", "Outer box.", "Inner note."]


def test_numbers_the_file_writes_out_read_once_before_their_text(tmp_path):
    """A numbered heading and a list item may hold their number as shown (text:number): it reads before the text,
    apart from it, and in place of the number the list style would give."""
    body = ('<text:h text:outline-level="1"><text:number>2</text:number>Scope</text:h><text:list text:style-name="L1">'
            "<text:list-item><text:number>7.</text:number><text:p>Moor the ferry</text:p></text:list-item></text:list>")
    ext = extract_odt(write_odt(tmp_path / "n.odt", body=body))
    assert ext.paragraphs == ["2 Scope", "7. Moor the ferry"] and ext.paragraph_meta[0] == {"section": "2 Scope"}


def test_cells_repeated_or_merged_over_many_columns_read_in_bounded_time_and_memory(tmp_path):
    """A cell repeated (``table:number-columns-repeated``) or merged over 99,999 columns is a few bytes of the file:
    a table of 300 of them reads as the same table of a few columns does, in bounded time (it took seconds and
    gigabytes)."""
    merged = '<table:table-cell table:number-columns-spanned="99999"><text:p>Tide</text:p></table:table-cell>'
    gap = '<table:table-cell table:number-columns-repeated="99999"/>'
    body = ("<table:table><table:table-header-rows><table:table-row><table:table-cell><text:p>Port</text:p>"
            f"</table:table-cell>{merged * 2}</table:table-row></table:table-header-rows><table:table-row>"
            f"<table:table-cell><text:p>Kirkwall</text:p></table:table-cell>{gap * 300}<table:table-cell><text:p>"
            "high</text:p></table:table-cell></table:table-row><table:table-row><table:table-cell><text:p>Stromness"
            "</text:p></table:table-cell><table:table-cell><text:p>low</text:p></table:table-cell></table:table-row>"
            "</table:table>")
    start = time.process_time()
    ext = extract_odt(write_odt(tmp_path / "wide.odt", body=body))
    assert time.process_time() - start < 0.5
    assert ext.paragraphs == ["Port: Kirkwall; high", "Port: Stromness; Tide: low"]


def test_a_slide_of_many_shapes_reads_in_time_linear_in_their_count(tmp_path):
    """A slide of 8,000 title shapes and 8,000 others (10 KB zipped) reads in bounded time, the titles first."""
    title = '<draw:frame presentation:class="title" svg:y="1cm"><draw:text-box><text:p>T</text:p></draw:text-box></draw:frame>'
    body = '<draw:frame svg:y="2cm"><draw:text-box><text:p>B</text:p></draw:text-box></draw:frame>'
    path = write_odp(tmp_path / "many.odp", f'<draw:page draw:name="p1">{title * 8000}{body * 8000}</draw:page>')
    start = time.process_time()
    ext = extract_odp(path)
    assert time.process_time() - start < 0.6
    assert ext.paragraphs == ["T"] * 8000 + ["B"] * 8000


def test_a_shape_s_text_reads_as_a_paragraph_of_its_own_after_its_paragraph(tmp_path):
    """A rectangle or callout Writer draws holds its paragraphs itself (draw:custom-shape, no text box): its text is
    read after its paragraph, as a text box's is (it was glued into the paragraph's text, "The bridgeBuilt by Gala
    opened"), and a shape anchored to the page before the first paragraph is read too (it was left out)."""
    shape = ('<draw:custom-shape svg:x="1cm" svg:y="1cm" xmlns:svg="urn:oasis:names:tc:opendocument:xmlns:svg-compatible:1.0">'
             '<text:p>Built by Gala</text:p><draw:enhanced-geometry draw:type="rectangle"/></draw:custom-shape>')
    body = f"{shape.replace('Gala', 'Hugo')}<text:p>The bridge{shape} opened in 1450.</text:p>"
    assert extract_odt(write_odt(tmp_path / "shapes.odt", body=body)).paragraphs == [
        "Built by Hugo", "The bridge opened in 1450.", "Built by Gala"]


def test_a_numbered_paragraph_outside_a_list_reads_after_its_number(tmp_path):
    """ODF 1.2's text:numbered-paragraph (a list item with no list around it) was left out, text and all."""
    body = ('<text:p>Steps:</text:p><text:numbered-paragraph text:level="1"><text:number>3.</text:number>'
            "<text:p>Moor the ferry</text:p></text:numbered-paragraph>")
    assert extract_odt(write_odt(tmp_path / "n.odt", body=body)).paragraphs == ["Steps:", "3. Moor the ferry"]


OUTLINE = ('<office:styles><text:outline-style style:name="Outline"><text:outline-level-style text:level="1" '
           'style:num-format="1" style:num-suffix="."/><text:outline-level-style text:level="2" style:num-format="1" '
           'text:display-levels="2"/><text:outline-level-style text:level="3" style:num-format=""/>'
           "</text:outline-style></office:styles>")


def test_headings_numbered_by_the_outline_style_read_with_their_numbers(tmp_path):
    """Writer numbers headings by the outline style (Tools > Heading Numbering) and writes no number in the heading:
    "2.1 Berths" read "Berths", in the text and in the section. Each level counts as Writer shows it (the levels it
    displays, its suffix, a level that shows none, a heading that restarts the count or is no item of it)."""
    headings = ['<text:h text:outline-level="1">Harbours</text:h>', '<text:h text:outline-level="1">Berthing</text:h>',
                '<text:h text:outline-level="2">Berths</text:h>', '<text:h text:outline-level="3">Depths</text:h>',
                '<text:h text:outline-level="2">Cranes</text:h>',
                '<text:h text:outline-level="1" text:is-list-header="true">Appendix</text:h>',
                '<text:h text:outline-level="1" text:restart-numbering="true" text:start-value="7">Ferries</text:h>',
                '<text:h text:outline-level="2"><text:number>7.9</text:number>Routes</text:h>']
    path = tmp_path / "numbered.odt"
    write_odt(path, body="".join(f"{h}<text:p>Text.</text:p>" for h in headings))
    with zipfile.ZipFile(path, "a") as z:
        z.writestr("styles.xml", f'<office:document-styles {NS}>{OUTLINE}</office:document-styles>')
    ext = extract_odt(path)
    assert ext.paragraphs[:2] == ["1. Harbours", "Text."]
    assert [meta["section"] for meta in ext.paragraph_meta[1::2]] == [
        "1. Harbours", "2. Berthing", "2. Berthing > 2.1 Berths", "2. Berthing > 2.1 Berths > Depths",
        "2. Berthing > 2.2 Cranes", "Appendix", "7. Ferries", "7. Ferries > 7.9 Routes"]


def test_a_rotated_shape_reads_in_its_place_on_the_slide(tmp_path):
    """A shape turned on its slide has no svg:x or svg:y, only draw:transform ("rotate (a) translate (x y)"): it
    sorted as if at the slide's top left, before the shapes above it. It reads where it is: by its box's top left
    before it turned about its centre, as a PowerPoint shape's."""
    turned = ('<draw:frame svg:width="10cm" svg:height="2cm" draw:transform="rotate (0.2618) translate (2.2cm 15.5cm)">'
              "<draw:text-box><text:p>Turned at the foot</text:p></draw:text-box></draw:frame>")
    upside = ('<draw:custom-shape svg:width="6cm" svg:height="2cm" draw:transform="rotate (180deg) translate (20cm 11cm)">'
              "<text:p>Upside down in the middle</text:p></draw:custom-shape>")
    slides = ('<draw:page draw:name="page1">' + turned + upside + frame("title", "1cm", "2cm", "<text:p>Tides</text:p>")
              + frame("subtitle", "5cm", "2cm", "<text:p>High water at noon</text:p>") + "</draw:page>")
    assert extract_odp(write_odp(tmp_path / "turned.odp", slides)).paragraphs == [
        "Tides", "High water at noon", "Upside down in the middle", "Turned at the foot"]
