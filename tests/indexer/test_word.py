"""Word files as people write them, through ``indexer.word.extract_docx`` and ``corpus from-files``: tables named
by their header row, text boxes, footnotes, tracked changes, content controls, nested tables, and files that are
no .docx.

    OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/indexer/test_word.py
"""

from __future__ import annotations

import logging
import zipfile
from pathlib import Path

import pytest

from spanseek.indexer.ingest import IngestError, from_files
from spanseek.indexer.word import extract_docx

docx = pytest.importorskip("docx")
from docx.oxml import parse_xml  # noqa: E402
from docx.oxml.ns import nsdecls  # noqa: E402

W = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"


def table(document, rows, style: str | None = None, bold: bool = False, repeat_header: bool = False):
    t = document.add_table(rows=len(rows), cols=len(rows[0]))
    if style:
        t.style = style
    for r, cells in enumerate(rows):
        for c, text in enumerate(cells):
            if bold and r == 0:
                t.cell(r, c).paragraphs[0].add_run(text).bold = True
            else:
                t.cell(r, c).text = text
    if repeat_header:  # Word's "Repeat as header row at the top of each page"
        t.rows[0]._tr.get_or_add_trPr().append(parse_xml(f"<w:tblHeader {nsdecls('w')}/>"))
    return t


def paragraphs(document, tmp_path: Path) -> list[str]:
    document.save(str(tmp_path / "d.docx"))
    return extract_docx(tmp_path / "d.docx").paragraphs


def test_table_rows_are_named_by_the_header_row_as_in_markdown_and_html(tmp_path):
    """Rows read "Header: cell; Header: cell" when the first row is a header: marked to repeat on every page, set
    apart by the table's style, or bold. A plain grid whose first row looks like the others (a list of names and
    values) reads its cells spaced, as a table without a header row does in HTML."""
    document = docx.Document()
    table(document, [("Route", "Departure"), ("Kellerton to Kirkwall", "09:15")], style="Table Grid",
          repeat_header=True)
    table(document, [("Port", "Tonnage"), ("Kellerton", "4.2 million")], style="Light Grid Accent 1")
    table(document, [("Port", "Tonnage"), ("Lerwick", "1.1 million"), ("Wick", "")], style="Table Grid", bold=True)
    table(document, [("Name", "Ingrid Solberg"), ("Rank", "Master")], style="Table Grid")
    merged = table(document, [("Crossing", "", "Time"), ("Kellerton", "Stromness", "2 h")], style="Light Grid Accent 1")
    merged.cell(0, 0).merge(merged.cell(0, 1))
    table(document, [("Only", "a header")], style="Light Grid Accent 1")
    assert paragraphs(document, tmp_path) == [
        "Route: Kellerton to Kirkwall; Departure: 09:15",  # was "Kellerton to Kirkwall 09:15", names lost
        "Port: Kellerton; Tonnage: 4.2 million",
        "Port: Lerwick; Tonnage: 1.1 million", "Port: Wick",  # an empty cell is left out
        "Name Ingrid Solberg", "Rank Master",
        "Crossing: Kellerton; Crossing: Stromness; Time: 2 h",  # a header cell over two columns names both, as colspan
        "Only a header",
    ]


def test_a_header_of_two_levels_names_each_column_by_both(tmp_path):
    """Two header rows, a group's name merged over two columns above theirs, read as in HTML ("Tide / high"): the
    group named only its first column ("Tide / high", then "low"), and a cell merged over both rows once."""
    document = docx.Document()
    t = table(document, [("Port", "Tide", "", "Depth"), ("", "high", "low", ""), ("Dover", "06:10", "12:40", "12 m")],
              style="Table Grid", repeat_header=True)
    t.rows[1]._tr.get_or_add_trPr().append(parse_xml(f"<w:tblHeader {nsdecls('w')}/>"))
    t.cell(0, 1).merge(t.cell(0, 2))
    t.cell(0, 0).merge(t.cell(1, 0))
    t.cell(0, 3).merge(t.cell(1, 3))
    assert paragraphs(document, tmp_path) == ["Port: Dover; Tide / high: 06:10; Tide / low: 12:40; Depth: 12 m"]


@pytest.mark.parametrize("header", ["bold", "style"])
def test_a_first_row_whose_cells_span_two_rows_is_a_header_of_two_levels(tmp_path, header):
    """A header row not marked to repeat (bold, or set apart by the table's style) whose cells merged over rows span
    the row of a group's columns: both rows are the header, as an HTML rowspan makes them ("Tide / high: 3.2 m"; it
    read "Port: Port; Tide: high; Tide: low" and named the body's cells "Tide" alone). A cell merged over rows of
    the body (a label) does not make the rows it spans a header."""
    document = docx.Document()
    style = "Light Grid Accent 1" if header == "style" else "Table Grid"
    t = table(document, [("Port", "Tide", "", "Wind"), ("", "high", "low", ""), ("Brest", "3.2 m", "0.4 m", "NW"),
                         ("Vigo", "2.9 m", "0.6 m", "W")], style=style, bold=header == "bold")
    if header == "bold":
        for c in (1, 2):
            t.cell(1, c).paragraphs[0].runs[0].bold = True
    t.cell(0, 1).merge(t.cell(0, 2))
    t.cell(0, 0).merge(t.cell(1, 0))
    t.cell(0, 3).merge(t.cell(1, 3))
    label = table(document, [("Region", "Port"), ("North", "Ayr"), ("", "Bute")], style=style, bold=header == "bold")
    label.cell(1, 0).merge(label.cell(2, 0))
    side = table(document, [("Ferries", "Port"), ("", "Ayr"), ("", "Bute")], style=style, bold=header == "bold")
    side.cell(0, 0).merge(side.cell(2, 0))  # over the whole table, beside no group: its rows stay the body's
    read = paragraphs(document, tmp_path)
    assert read[:4] == [
        "Port: Brest; Tide / high: 3.2 m; Tide / low: 0.4 m; Wind: NW",
        "Port: Vigo; Tide / high: 2.9 m; Tide / low: 0.6 m; Wind: W",
        "Region: North; Port: Ayr", "Region: North; Port: Bute"]
    assert read[4:] == ["Port: Ayr", "Port: Bute"]  # (the header cell names its column, as HTML's <th rowspan>)


def test_a_header_of_two_levels_ends_below_its_group_beside_a_cell_merged_down_the_table(tmp_path):
    """A first-row cell merged down the whole table ("Source" over every row) beside a two-level header ("Tide"
    over "high" and "low") does not take the body's rows into the header: it ends one row below the group. It took
    every row but the last ("Port / Brest: Vigo; Tide / high / 3.2 m: 2.9 m"), and the Brest row was lost. The
    header cell names its column in the body's rows, which read nothing of it ("Source: Source"), as HTML's."""
    document = docx.Document()
    t = table(document, [("Port", "Tide", "", "Source"), ("", "high", "low", ""), ("Brest", "3.2 m", "0.4 m", ""),
                         ("Vigo", "2.9 m", "0.6 m", "")], style="Light Grid Accent 1")
    t.cell(0, 1).merge(t.cell(0, 2))
    t.cell(0, 0).merge(t.cell(1, 0))
    t.cell(0, 3).merge(t.cell(3, 3))
    assert paragraphs(document, tmp_path) == [
        "Port: Brest; Tide / high: 3.2 m; Tide / low: 0.4 m", "Port: Vigo; Tide / high: 2.9 m; Tide / low: 0.6 m"]


def test_a_header_cell_merged_down_into_the_body_names_its_column_and_reads_as_html_does(tmp_path):
    """A header cell merged down over body rows (w:vMerge) is the column's name, not each row's text: the rows read
    as an HTML <th rowspan> makes them ("Port: Brest", not "Port: Brest; Ferries: Ferries"), and a body cell below
    the merge reads again; a body cell merged over rows still reads in each of them."""
    from spanseek.indexer.markup import extract_markdown

    document = docx.Document()
    t = table(document, [("Port", "Ferries", "Tide"), ("Brest", "", "3.2 m"), ("Vigo", "", "2.9 m"),
                         ("Ayr", "2", "1.1 m")], style="Table Grid", repeat_header=True)
    t.cell(0, 1).merge(t.cell(2, 1))
    t.cell(2, 2).merge(t.cell(3, 2)).text = "2.9 m"
    expected = ["Port: Brest; Tide: 3.2 m", "Port: Vigo; Tide: 2.9 m", "Port: Ayr; Ferries: 2; Tide: 2.9 m"]
    assert paragraphs(document, tmp_path) == expected
    html = ("<table><tr><th>Port</th><th rowspan='3'>Ferries</th><th>Tide</th></tr><tr><td>Brest</td><td>3.2 m</td>"
            "</tr><tr><td>Vigo</td><td rowspan='2'>2.9 m</td></tr><tr><td>Ayr</td><td>2</td></tr></table>")
    assert extract_markdown(f"Tides\n\n{html}\n").paragraphs[1:] == expected


def test_cells_merged_over_rows_are_placed_by_the_xml_grid(tmp_path):
    """Cells are read from the table's XML by Word's grid: a row starting late (w:gridBefore) puts its cells under
    their own columns' names, and a cell continuing a merge with no cell above it (a damaged file's w:vMerge in the
    first row) reads as a cell of its own rather than making the file unreadable."""
    document = docx.Document()
    t = table(document, [("Port", "Berth", "Tide"), ("Brest", "4", "3.2 m"), ("", "7", "2.9 m")], style="Table Grid",
              repeat_header=True)
    late = t.rows[2]._tr
    late.remove(late.tc_lst[0])
    late.get_or_add_trPr().append(parse_xml(f"<w:gridBefore {nsdecls('w')} w:val='1'/>"))
    odd = table(document, [("Alone", "Ayr")], style="Table Grid")
    odd.cell(0, 0)._tc.get_or_add_tcPr().append(parse_xml(f"<w:vMerge {nsdecls('w')}/>"))
    assert paragraphs(document, tmp_path) == ["Port: Brest; Berth: 4; Tide: 3.2 m", "Berth: 7; Tide: 2.9 m",
                                              "Alone Ayr"]


def test_a_row_starting_before_the_grid_reads_from_its_first_column(tmp_path):
    """A damaged file's negative w:gridBefore ("-5") put a row's cells before the grid's first column, and naming
    them by the header made the whole file unreadable (IndexError); the row starts at the first column."""
    document = docx.Document()
    t = table(document, [("Port", "Tide"), ("Brest", "3.2 m")], repeat_header=True)
    t.rows[1]._tr.get_or_add_trPr().append(parse_xml(f"<w:gridBefore {nsdecls('w')} w:val='-5'/>"))
    document.add_paragraph("After.")
    assert paragraphs(document, tmp_path) == ["Port: Brest; Tide: 3.2 m", "After."]

def test_nested_tables_text_boxes_footnotes_tracked_changes_and_content_controls_are_read(tmp_path):
    """python-docx's paragraph and cell text leaves these out: a nested table's cells, a text box's paragraphs,
    footnotes, text inserted with tracked changes on, and the paragraphs of a content control (but for a table of
    contents and a placeholder's prompt)."""
    document = docx.Document()
    crew = table(document, [("Role", "Certificate"), ("Chief engineer", "STCW III/2")], style="Light Grid Accent 1")
    nested = crew.cell(1, 1).add_table(rows=1, cols=2)
    nested.cell(0, 0).text, nested.cell(0, 1).text = "Valid until", "March 2027"
    box = document.add_paragraph("The muster stations are shown on the deck plan.")
    box._p.append(parse_xml(
        f'<w:r {nsdecls("w", "wp", "a")} xmlns:wps="http://schemas.microsoft.com/office/word/2010/wordprocessingShape"'
        ' xmlns:mc="http://schemas.openxmlformats.org/markup-compatibility/2006" xmlns:v="urn:schemas-microsoft-com:vml">'
        '<mc:AlternateContent><mc:Choice Requires="wps"><w:drawing><wp:inline><a:graphic><a:graphicData><wps:wsp>'
        '<wps:txbx><w:txbxContent><w:p><w:r><w:t>The generator is tested every Tuesday.</w:t></w:r></w:p>'
        '</w:txbxContent></wps:txbx></wps:wsp></a:graphicData></a:graphic></wp:inline></w:drawing></mc:Choice>'
        '<mc:Fallback><w:pict><v:shape><v:textbox><w:txbxContent><w:p><w:r><w:t>The generator is tested every '
        'Tuesday.</w:t></w:r></w:p></w:txbxContent></v:textbox></v:shape></w:pict></mc:Fallback>'
        '</mc:AlternateContent></w:r>'))
    drill = document.add_paragraph("A fire drill is held every ")
    drill._p.append(parse_xml(f'<w:del {nsdecls("w")} w:id="1" w:author="A"><w:r><w:delText>six</w:delText></w:r>'
                              '</w:del>'))
    drill._p.append(parse_xml(f'<w:ins {nsdecls("w")} w:id="2" w:author="A"><w:r><w:t>eight</w:t></w:r></w:ins>'))
    drill.add_run(" weeks.")
    noted = document.add_paragraph("The ferry was built at the Harland yard.")
    noted._p.append(parse_xml(f'<w:r {nsdecls("w")}><w:footnoteReference w:id="1"/></w:r>'))
    body = document.element.body
    for properties, text in [('<w:alias w:val="Policy"/>', "No alcohol on duty."),
                             ('<w:docPartObj><w:docPartGallery w:val="Table of Contents"/></w:docPartObj>',
                              "Safety 3"),  # the headings again: left out
                             ("<w:showingPlcHdr/>", "Click or tap here to enter text.")]:  # a prompt: left out
        body.insert(len(body) - 1, parse_xml(
            f'<w:sdt {nsdecls("w")}><w:sdtPr>{properties}</w:sdtPr><w:sdtContent><w:p><w:r><w:t>{text}</w:t>'
            '</w:r></w:p></w:sdtContent></w:sdt>'))
    document.sections[0].header.paragraphs[0].text = "Crew handbook - internal"  # page furniture: left out
    document.save(str(tmp_path / "h.docx"))
    add_footnote(tmp_path / "h.docx", "1", "The Harland yard closed in 2015.")
    assert extract_docx(tmp_path / "h.docx").paragraphs == [
        "Role: Chief engineer; Certificate: STCW III/2 Valid until March 2027",  # was "... STCW III/2"
        "The muster stations are shown on the deck plan.", "The generator is tested every Tuesday.",  # once
        "A fire drill is held every eight weeks.",  # was "every weeks."
        "The ferry was built at the Harland yard.", "The Harland yard closed in 2015.",
        "No alcohol on duty.",
    ]


def add_footnote(path: Path, note_id: str, text: str) -> None:
    """Adds a footnotes part holding one footnote (python-docx writes none)."""
    with zipfile.ZipFile(path) as z:
        parts = {name: z.read(name) for name in z.namelist()}
    w = 'xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"'
    parts["word/footnotes.xml"] = (
        f'<w:footnotes {w}><w:footnote w:type="separator" w:id="-1"><w:p><w:r><w:separator/></w:r></w:p></w:footnote>'
        f'<w:footnote w:id="{note_id}"><w:p><w:r><w:footnoteRef/></w:r><w:r><w:t>{text}</w:t></w:r></w:p>'
        '</w:footnote></w:footnotes>').encode()
    rels = "word/_rels/document.xml.rels"
    parts[rels] = parts[rels].replace(b"</Relationships>", b'<Relationship Id="rIdNotes" Type="http://schemas.'
                                      b'openxmlformats.org/officeDocument/2006/relationships/footnotes" '
                                      b'Target="footnotes.xml"/></Relationships>')
    parts["[Content_Types].xml"] = parts["[Content_Types].xml"].replace(
        b"</Types>", b'<Override PartName="/word/footnotes.xml" ContentType="application/vnd.openxmlformats-'
                     b'officedocument.wordprocessingml.footnotes+xml"/></Types>')
    with zipfile.ZipFile(path, "w") as z:
        for name, data in parts.items():
            z.writestr(name, data)


def test_a_file_that_is_no_docx_is_named_for_what_it_is(tmp_path, caplog):
    """A .docx that is another kind of file got "not a readable Word (.docx) file (PackageNotFoundError: Package not
    found at ...); ... or an old .doc renamed"; an old .doc in a folder was passed over without a word."""
    files = tmp_path / "in"
    files.mkdir()
    document = docx.Document()
    document.add_paragraph("The ferry leaves at nine.")
    document.save(str(files / "good.docx"))
    (files / "report.docx").write_bytes(b"%PDF-1.4\n%...")
    (files / "letter.docx").write_bytes(b"{\\rtf1\\ansi Hello}")
    (files / "empty.docx").write_bytes(b"")
    (files / "cut.docx").write_bytes((files / "good.docx").read_bytes()[:3000])
    with zipfile.ZipFile(files / "notes.docx", "w") as z:
        z.writestr("mimetype", "application/vnd.oasis.opendocument.text")
        z.writestr("content.xml", "<x/>")
    with zipfile.ZipFile(files / "novel.docx", "w") as z:
        z.writestr("mimetype", "application/epub+zip")
        z.writestr("META-INF/container.xml", "<container/>")
    (files / "old.doc").write_bytes(b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + bytes(504))
    with caplog.at_level(logging.WARNING):
        report = from_files([files], tmp_path / "c.jsonl")
    reasons = {Path(p).name: why for p, why in report.skipped}
    assert report.documents == 1
    assert reasons == {
        "report.docx": "a PDF file, not a Word (.docx) file; rename it to .pdf",
        "letter.docx": "an RTF file, not a Word (.docx) file; rename it to .rtf",
        "empty.docx": "an empty file (0 bytes), not a Word (.docx) file",
        "cut.docx": "not a readable Word (.docx) file: its zip archive is truncated or damaged",
        "notes.docx": "an OpenDocument file (application/vnd.oasis.opendocument.text), not a Word (.docx) file; "
                      "rename it to .odt",
        "novel.docx": "an EPUB e-book, not a Word (.docx) file; rename it to .epub",
        "old.doc": "an old Word (.doc) file, which from-files does not read; save it as .docx (in Word, or "
                   "`soffice --headless --convert-to docx FILE`) and ingest the result",
    }
    assert all(str(files / name) in " ".join(r.getMessage() for r in caplog.records) for name in reasons)
    with pytest.raises(IngestError, match=r"old\.doc: an old Word \(\.doc\) file, which from-files does not read"):
        from_files([files / "old.doc"], tmp_path / "c2.jsonl")


def test_a_note_that_refers_to_itself_or_a_damaged_notes_part_does_not_stop_the_others(tmp_path):
    """A footnote holding a reference to itself was read again and again (RecursionError: from-files stopped, PUT
    /files answered 500); a notes part that is not XML escaped as a traceback. The first is read once, the second is
    a damaged file, skipped with its reason."""
    files = tmp_path / "in"
    files.mkdir()
    for name, note in (("self.docx", 'x</w:t></w:r><w:r><w:footnoteReference w:id="1"/></w:r><w:r><w:t>y'),
                       ("bad.docx", "<<<")):
        document = docx.Document()
        noted = document.add_paragraph("The ferry leaves at nine.")
        noted._p.append(parse_xml(f'<w:r {nsdecls("w")}><w:footnoteReference w:id="1"/></w:r>'))
        document.save(str(files / name))
        add_footnote(files / name, "1", note)
    document = docx.Document()
    document.add_paragraph("The bus leaves at ten.")
    document.save(str(files / "good.docx"))
    report = from_files([files], tmp_path / "c.jsonl")
    reasons = {Path(p).name: why for p, why in report.skipped}
    assert report.documents == 2 and set(reasons) == {"bad.docx"}
    assert reasons["bad.docx"].startswith("not a readable Word (.docx) file")
    looped = extract_docx(files / "self.docx").paragraphs
    assert looped[0] == "The ferry leaves at nine." and sum(p.count("x") for p in looped) == 1  # its note, once


def define_list(document, list_id: int, levels: list[tuple[str, ...]], overrides: str = "",
                abstract_id: int | None = None) -> None:
    """Adds a list (w:num ``list_id``) of these levels, each (w:numFmt, w:lvlText[, more of the level's XML])
    counting from 1, on its own definition (w:abstractNum), or on ``abstract_id``'s when given."""
    numbering = document.part.numbering_part.element
    if abstract_id is None:
        abstract_id = list_id
        lvls = "".join(f'<w:lvl w:ilvl="{i}"><w:start w:val="1"/><w:numFmt w:val="{form}"/>{"".join(extra)}'
                       f'<w:lvlText w:val="{text}"/></w:lvl>' for i, (form, text, *extra) in enumerate(levels))
        numbering.insert(0, parse_xml(f'<w:abstractNum {nsdecls("w")} w:abstractNumId="{abstract_id}">{lvls}'
                                      '</w:abstractNum>'))
    numbering.append(parse_xml(f'<w:num {nsdecls("w")} w:numId="{list_id}"><w:abstractNumId w:val="{abstract_id}"/>'
                               f'{overrides}</w:num>'))


def item(document, text: str, list_id: int, level: int = 0, style: str | None = None):
    """A paragraph in list ``list_id`` at ``level`` (its own w:numPr, as Word writes a list made with its buttons)."""
    p = document.add_paragraph(text, style=style)
    p._p.get_or_add_pPr().insert(0, parse_xml(f'<w:numPr {nsdecls("w")}><w:ilvl w:val="{level}"/>'
                                              f'<w:numId w:val="{list_id}"/></w:numPr>'))
    return p


def test_list_items_read_their_numbers_and_bullets_as_word_shows_them(tmp_path):
    """A numbered list read as bare paragraphs ("Install the pump.", "Configure the flow rate."): "what is step 2?"
    had nothing to match and an outline lost its order. Each item now reads after its number as Word shows it: a
    "List Number" or "List Bullet" style's, a legal outline's "1.2", letters and roman numerals, a list that restarts
    (w:startOverride) or continues another on its definition; an unknown format or list reads as before."""
    document = docx.Document()
    document.add_paragraph("Install the pump.", style="List Number")
    document.add_paragraph("Configure the flow rate.", style="List Number")
    document.add_paragraph("Spare seals", style="List Bullet")
    define_list(document, 90, [("decimal", "%1."), ("decimal", "%1.%2"), ("lowerLetter", "(%3)")])
    for text, level in [("Definitions", 0), ("Scope of the policy.", 1), ("Contractors are covered.", 2),
                        ("Visitors are covered.", 2), ("Exclusions apply.", 1), ("Obligations", 0),
                        ("Report incidents.", 1)]:
        item(document, text, 90, level)
    define_list(document, 91, [("upperRoman", "%1."), ("lowerLetter", "%1.%2", "<w:isLgl/>")])
    for text in ("Background", "Findings"):
        item(document, text, 91)
    item(document, "Sampling", 91, 1)  # a legal-style level shows every number in decimal: "2.1", not "II.a"
    define_list(document, 92, [], abstract_id=91)  # another list on the same definition continues it: "III."
    item(document, "Recommendations", 92)
    define_list(document, 93, [], abstract_id=91,
                overrides='<w:lvlOverride w:ilvl="0"><w:startOverride w:val="1"/></w:lvlOverride>')
    item(document, "Annex", 93)  # restarted: "I."
    define_list(document, 94, [("ordinal", "%1")])
    item(document, "An ordinal word is not read", 94)
    item(document, "Nor is a list not defined", 57)
    item(document, "Numbering turned off", 0, style="List Number")  # numId 0 over the style's list
    define_list(document, 95, [("decimal", "%1.")])
    item(document, "Moor the ship.", 95)
    item(document, "", 95)  # an empty item: Word shows "2." on a line of its own, and counts it
    hidden = item(document, "Hidden", 95)  # hidden with its paragraph mark: Word shows no line, and no number
    hidden.runs[0].font.hidden = True
    hidden._p.get_or_add_pPr().append(parse_xml(f'<w:rPr {nsdecls("w")}><w:vanish/></w:rPr>'))
    item(document, "Lower the gangway.", 95).runs[0].font.hidden = True  # its mark shown: "3." on a line of its own
    item(document, "Open the hatch.", 95)
    assert paragraphs(document, tmp_path) == [
        "1. Install the pump.", "2. Configure the flow rate.", "• Spare seals",  # was "Install the pump.", ...
        "1. Definitions", "1.1 Scope of the policy.", "(a) Contractors are covered.", "(b) Visitors are covered.",
        "1.2 Exclusions apply.", "2. Obligations", "2.1 Report incidents.",
        "I. Background", "II. Findings", "2.1 Sampling", "III. Recommendations", "I. Annex",
        "An ordinal word is not read", "Nor is a list not defined", "Numbering turned off",
        "1. Moor the ship.", "4. Open the hatch.",  # was "2. Open the hatch.": the empty items were not counted
    ]


def test_numbered_headings_keep_their_numbers_in_the_section_path(tmp_path):
    """Headings numbered by their style (an outline whose levels are linked to "Heading 1" and "Heading 2") carry
    their numbers into the passages' sections; the title, a name, does not."""
    document = docx.Document()
    define_list(document, 95, [("decimal", "%1"), ("decimal", "%1.%2")])
    for level, style_id in ((0, "Heading1"), (1, "Heading2")):
        lvl = document.part.numbering_part.element.find(
            f'.//{{{W}}}abstractNum[@{{{W}}}abstractNumId="95"]/{{{W}}}lvl[@{{{W}}}ilvl="{level}"]')
        lvl.insert(0, parse_xml(f'<w:pStyle {nsdecls("w")} w:val="{style_id}"/>'))
        style = document.styles[f"Heading {level + 1}"].element
        style.get_or_add_pPr().insert(0, parse_xml(f'<w:numPr {nsdecls("w")}><w:numId w:val="95"/></w:numPr>'))
    document.add_heading("Introduction", 1)
    document.add_heading("Scope", 2)
    document.add_paragraph("The policy covers every site.")
    document.add_heading("Duties", 2)
    document.add_paragraph("Managers keep the register.")
    document.save(str(tmp_path / "d.docx"))
    extracted = extract_docx(tmp_path / "d.docx")
    assert extracted.title == "Introduction"
    assert extracted.paragraphs == ["1 Introduction\n\n1.1 Scope", "The policy covers every site.", "1.2 Duties",
                                    "Managers keep the register."]
    assert [m["section"] for m in extracted.paragraph_meta] == [
        "1 Introduction > 1.1 Scope", "1 Introduction > 1.1 Scope", "1 Introduction > 1.2 Duties",
        "1 Introduction > 1.2 Duties"]


def test_hidden_text_is_left_out_as_word_shows_and_prints_the_document(tmp_path):
    """Text formatted as hidden (an editor's note) was read into the corpus. Hidden runs are left out, hidden by the
    run, its character style or its paragraph's style, unless the run turns hiding off again; a paragraph mark's
    w:specVanish (a run-in heading) hides no text; a list item hidden with its paragraph mark takes no number."""
    document = docx.Document()
    note = document.add_paragraph("The valve opens at 4 bar.")
    note.add_run(" [Editor: check this figure with the supplier.]").font.hidden = True
    note.add_run(" It closes at 2 bar.")
    hidden_style = document.styles.add_style("Editorial", 2)  # a character style that hides
    hidden_style.font.hidden = True
    styled = document.add_paragraph("The pump weighs 40 kg.")
    styled.add_run(" Confirm with engineering.").style = hidden_style
    shown = styled.add_run(" It runs on 230 V.")
    shown.style = hidden_style
    shown.font.hidden = False  # set off on the run: shown
    notes_style = document.styles.add_style("Reviewer notes", 1)
    notes_style.font.hidden = True
    document.add_paragraph("Delete this paragraph before sending.", style=notes_style)
    run_in = document.add_paragraph("Scope.", style="Heading 2")
    run_in._p.get_or_add_pPr().append(parse_xml(f'<w:rPr {nsdecls("w")}><w:specVanish/></w:rPr>'))
    document.add_paragraph("The policy covers every site.")
    document.add_paragraph("Open the valve.", style="List Number")
    old = document.add_paragraph("Old step.", style="List Number")  # hidden with its mark, as Word hides a selection
    old.runs[0].font.hidden = True
    old._p.get_or_add_pPr().append(parse_xml(f'<w:rPr {nsdecls("w")}><w:vanish/></w:rPr>'))
    document.add_paragraph("Start the pump.", style="List Number")
    assert paragraphs(document, tmp_path) == [
        "The valve opens at 4 bar. It closes at 2 bar.",  # was "... [Editor: check this figure ...] It closes ..."
        "The pump weighs 40 kg. It runs on 230 V.",
        "Scope.", "The policy covers every site.",
        "1. Open the valve.", "2. Start the pump.",
    ]


def test_a_list_number_out_of_range_or_not_a_number_reads_without_it(tmp_path):
    """A level that starts at 10**9 in letters spelled a 38-million-letter label (10**12: 38 GB), and a level "²"
    (a digit to str.isdigit, not to int) failed the file. Neither is a number Word writes: the item reads as a list
    without that value (the level's own start, the first level)."""
    document = docx.Document()
    define_list(document, 90, [("lowerLetter", "%1.")],
                overrides='<w:lvlOverride w:ilvl="0"><w:startOverride w:val="1000000000"/></w:lvlOverride>')
    item(document, "Install the pump.", 90)
    define_list(document, 91, [("decimal", "%1.")])
    p = item(document, "Configure the flow rate.", 91)
    p._p.pPr.numPr.ilvl.set(f"{{{W}}}val", "²")
    assert paragraphs(document, tmp_path) == ["a. Install the pump.", "1. Configure the flow rate."]


def test_a_cell_spanning_rows_reads_in_each_of_its_rows_in_word_html_and_markdown(tmp_path):
    """A body cell merged over rows (Word's vertical merge, HTML's rowspan, an HTML table in Markdown) reads in each
    row it spans, so each row is whole as a passage ("Region: North" with Bute's row too), in every format alike; one
    merged over columns too reads once in each row, not once per column."""
    from spanseek.indexer.markup import extract_html, extract_markdown

    rows = [["Region", "City", "Population", "Note"], ["North", "Ayr", "100", "Old"], ["", "Bute", "200", ""],
            ["South", "Cove", "300", "New"]]
    document = docx.Document()
    t = table(document, rows, bold=True)
    t.cell(1, 0).merge(t.cell(2, 0)).text = "North"
    t.cell(1, 3).merge(t.cell(2, 3)).text = "Old"
    document.save(tmp_path / "spans.docx")
    expected = ["Region: North; City: Ayr; Population: 100; Note: Old", "Region: North; City: Bute; Population: 200; Note: Old",
                "Region: South; City: Cove; Population: 300; Note: New"]
    assert extract_docx(tmp_path / "spans.docx").paragraphs == expected
    html = ("<table><tr><th>Region</th><th>City</th><th>Population</th><th>Note</th></tr><tr><td rowspan='2'>North</td>"
            "<td>Ayr</td><td>100</td><td rowspan='2'>Old</td></tr><tr><td>Bute</td><td>200</td></tr>"
            "<tr><td>South</td><td>Cove</td><td>300</td><td>New</td></tr></table>")
    text = "<p>" + "Kellerton harbour opened in 1872 and grew through the next century. " * 8 + "</p>"
    assert extract_html(f"<html><body><main><article><h1>Towns</h1>{text}{html}</article></main></body></html>"
                        ).paragraphs[2:] == expected  # main content (trafilatura)
    assert extract_markdown(f"Towns\n\n{html}\n").paragraphs[1:] == expected
    wide = html.replace("<td rowspan='2'>North</td><td>Ayr</td>", "<td rowspan='2' colspan='2'>North</td>").replace(
        "<td>Bute</td>", "")  # a cell over two rows and two columns
    spanned = ["Region: North; Population: 100; Note: Old", "Region: North; Population: 200; Note: Old", expected[2]]
    assert extract_markdown(f"Towns\n\n{wide}\n").paragraphs[1:] == spanned
    assert extract_html(f"<html><body><main><article><h1>Towns</h1>{text}{wide}</article></main></body></html>"
                        ).paragraphs[2:] == spanned


def test_a_header_cell_spanning_body_rows_labels_each_of_them_in_html_and_markdown(tmp_path):
    """A row label (<th rowspan> in a body row's first column, "North" beside two towns) names each row it spans, as
    a body cell spanning rows does, so each row reads whole; a column's header cell spanning the header rows
    ("Region" beside "Town" over "City" and "Population") still names its column once, not as a row's text."""
    from spanseek.indexer.markup import extract_html, extract_markdown

    html = ("<table><tr><th rowspan='2'>Region</th><th colspan='2'>Town</th></tr><tr><th>City</th><th>Population</th>"
            "</tr><tr><th rowspan='2'>North</th><td>Ayr</td><td>100</td></tr><tr><td>Bute</td><td>200</td></tr>"
            "<tr><th>South</th><td>Cove</td><td>300</td></tr></table>")
    expected = ["Region: North; Town / City: Ayr; Town / Population: 100",
                "Region: North; Town / City: Bute; Town / Population: 200",
                "Region: South; Town / City: Cove; Town / Population: 300"]
    assert extract_markdown(f"Towns\n\n{html}\n").paragraphs[1:] == expected
    text = "<p>" + "Kellerton harbour opened in 1872 and grew through the next century. " * 8 + "</p>"
    page = extract_html(f"<html><body><main><article><h1>Towns</h1>{text}{html}</article></main></body></html>")
    assert page.paragraphs[2:] == expected  # main content (trafilatura)


def test_a_list_item_deleted_with_tracked_changes_takes_no_number(tmp_path):
    """A list item deleted with tracked changes on (its text and its paragraph mark) is gone once the changes are
    accepted, as the document is read: the items after it keep the numbers Word then shows ("2. Third", not
    "3. Third"), and no deleted word is read."""
    document = docx.Document()
    for text in ["First", "Second", "Third"]:
        document.add_paragraph(text, style="List Number")
    p = document.paragraphs[1]._p
    for run in p.findall(f"{{{W}}}r"):
        run.find(f"{{{W}}}t").tag = f"{{{W}}}delText"
        deletion = parse_xml(f'<w:del {nsdecls("w")} w:id="1" w:author="Ann" w:date="2026-01-01T00:00:00Z"/>')
        run.addprevious(deletion)
        deletion.append(run)
    p.get_or_add_pPr().append(parse_xml(
        f'<w:rPr {nsdecls("w")}><w:del w:id="2" w:author="Ann" w:date="2026-01-01T00:00:00Z"/></w:rPr>'))
    document.save(tmp_path / "deleted.docx")
    assert extract_docx(tmp_path / "deleted.docx").paragraphs == ["1. First", "2. Third"]


def test_a_position_tab_spaces_words_and_a_phonetic_guide_follows_its_base(tmp_path):
    """A position tab (a tab to the right margin: "Contents .... Page") parts the words beside it, which read as one
    ("ContentsPage"); a phonetic guide (ruby) reads after its base text in brackets, as Word saves it as plain text,
    not before it as the XML holds it ("かんじ漢字")."""
    document = docx.Document()
    document.add_paragraph()._p.append(parse_xml(
        f'<w:r {nsdecls("w")}><w:t>Contents</w:t><w:ptab w:relativeTo="margin" w:alignment="right" w:leader="dot"/>'
        "<w:t>Page</w:t></w:r>"))
    document.add_paragraph("Written ")._p.append(parse_xml(
        f'<w:r {nsdecls("w")}><w:ruby><w:rubyPr/><w:rt><w:r><w:t>かんじ</w:t></w:r></w:rt><w:rubyBase><w:r><w:t>漢字'
        "</w:t></w:r></w:rubyBase></w:ruby></w:r>"))
    document.save(tmp_path / "guides.docx")
    assert extract_docx(tmp_path / "guides.docx").paragraphs == ["Contents Page", "Written 漢字(かんじ)"]


def test_symbols_read_as_the_unicode_characters_they_show(tmp_path):
    """Insert > Symbol's characters (w:sym) read as they show: a Symbol font's code (the private-use U+F0xx Word writes)
    as the Adobe Symbol encoding's character ("×", "α", "≤"), a Wingdings one with a standard character (a check
    mark) as it, another font's code as the code point it names; a Wingdings icon of no Unicode character, a
    private-use code of another font, and a code that is no number give no text and stop nothing."""
    def sym(font: str, char: str) -> str:
        return f'<w:r><w:sym w:font="{font}" w:char="{char}"/></w:r>'

    document = docx.Document()
    for runs in (["Price", sym("Symbol", "F0B4"), "two"],
                 [sym("Symbol", "F061"), sym("Symbol", "F0A3"), sym("Symbol", "F062"), "holds"],
                 [sym("Wingdings", "F0FC"), "Done", sym("Wingdings", "F021"), sym("Calibri", "F0B4")],
                 ["Cost", sym("Times New Roman", "20AC"), "5", sym("Arial", "zz"), sym("Arial", "D800")]):
        xml = "".join(r if r.startswith("<") else f"<w:r><w:t xml:space=\"preserve\"> {r} </w:t></w:r>" for r in runs)
        document.add_paragraph()._p.append(parse_xml(f'<w:hyperlink {nsdecls("w")}>{xml}</w:hyperlink>'))
    assert paragraphs(document, tmp_path) == ["Price × two", "α≤β holds", "✔ Done", "Cost € 5"]


def add_drawing(document, paragraph, name: str, content_type: str, reltype: str, xml: str, graphic: str) -> None:
    """A drawing in ``paragraph`` whose text is in a part of its own (``name``, holding ``xml``), as Word saves a
    SmartArt diagram or a chart (python-docx makes neither); ``graphic`` is its graphicData with ``{rid}``."""
    from docx.opc.packuri import PackURI
    from docx.opc.part import Part

    rid = document.part.relate_to(Part(PackURI(name), content_type, xml.encode(), document.part.package), reltype)
    paragraph._p.append(parse_xml(
        f'<w:r {nsdecls("w", "a", "r", "wp")}><w:drawing><wp:inline><a:graphic>{graphic.format(rid=rid)}'
        "</a:graphic></wp:inline></w:drawing></w:r>"))


def test_smartart_boxes_and_chart_titles_follow_their_paragraph(tmp_path):
    """A SmartArt diagram's boxes and a chart's title and axis title (its own text, or the cell it shows) are in
    parts of their own, and read as paragraphs after the paragraph that holds them, as its text boxes do."""
    relations = "http://schemas.openxmlformats.org/officeDocument/2006/relationships"
    drawingml = "http://schemas.openxmlformats.org/drawingml/2006"
    document = docx.Document()
    add_drawing(document, document.add_paragraph("Steps:"), "/word/diagrams/data1.xml",
                "application/vnd.openxmlformats-officedocument.drawingml.diagramData+xml", f"{relations}/diagramData",
                f'<dgm:dataModel xmlns:dgm="{drawingml}/diagram" xmlns:a="{drawingml}/main"><dgm:ptLst>'
                '<dgm:pt modelId="0" type="doc"/><dgm:pt modelId="1"><dgm:t><a:p><a:r><a:t>Weigh the catch</a:t>'
                "</a:r></a:p></dgm:t></dgm:pt></dgm:ptLst><dgm:cxnLst/></dgm:dataModel>",
                f'<a:graphicData uri="{drawingml}/diagram"><dgm:relIds xmlns:dgm="{drawingml}/diagram" '
                'r:dm="{rid}"/></a:graphicData>')
    add_drawing(document, document.add_paragraph(), "/word/charts/chart1.xml",
                "application/vnd.openxmlformats-officedocument.drawingml.chart+xml", f"{relations}/chart",
                f'<c:chartSpace xmlns:c="{drawingml}/chart" xmlns:a="{drawingml}/main"><c:chart><c:title><c:tx>'
                "<c:strRef><c:f>Sheet1!$A$1</c:f><c:strCache><c:pt idx=\"0\"><c:v>Landings by month</c:v></c:pt>"
                "</c:strCache></c:strRef></c:tx></c:title><c:plotArea><c:catAx/><c:valAx><c:title><c:tx><c:rich>"
                "<a:p><a:r><a:t>Tonnes</a:t></a:r></a:p></c:rich></c:tx></c:title></c:valAx></c:plotArea></c:chart>"
                "</c:chartSpace>",
                f'<a:graphicData uri="{drawingml}/chart"><c:chart xmlns:c="{drawingml}/chart" r:id="{{rid}}"/>'
                "</a:graphicData>")
    document.add_paragraph("After.")
    assert paragraphs(document, tmp_path) == ["Steps:", "Weigh the catch", "Landings by month", "Tonnes", "After."]


def test_a_cell_merged_down_a_thousand_rows_reads_in_linear_time(tmp_path):
    """A cell merged down 1,000 rows (w:vMerge) reads in each of them, in well under a second of CPU: python-docx
    finds a merged cell's origin by walking up the rows, recursively, once per row (400 rows took 24 s, 800 rows
    89 s, and 1,000 made the file unreadable: RecursionError)."""
    import time

    document = docx.Document()
    t = table(document, [("Region", "Port")], style="Table Grid")
    t.cell(0, 0)._tc.get_or_add_tcPr().append(parse_xml(f"<w:vMerge {nsdecls('w')} w:val='restart'/>"))
    row = (f"<w:tr {nsdecls('w')}><w:tc><w:tcPr><w:vMerge/></w:tcPr><w:p/></w:tc>"
           "<w:tc><w:p><w:r><w:t>Ayr</w:t></w:r></w:p></w:tc></w:tr>")
    for _ in range(1000):
        t._tbl.append(parse_xml(row))
    document.save(str(tmp_path / "d.docx"))
    start = time.process_time()
    read = extract_docx(tmp_path / "d.docx").paragraphs
    assert time.process_time() - start < 2.0
    assert read == ["Region Port"] + ["Region Ayr"] * 1000


def test_rows_and_cells_in_content_controls_are_read_in_their_columns(tmp_path):
    """A form's repeating section wraps table rows in a content control, a drop-down list wraps a cell, and a
    control in a nested table too: their text reads in document order, each cell named by its column's header. A
    cell whose control shows its placeholder keeps its column, its prompt left out."""
    def cell(text: str) -> str:
        return f"<w:tc><w:p><w:r><w:t>{text}</w:t></w:r></w:p></w:tc>"

    def control(xml: str, properties: str = "") -> str:
        return f"<w:sdt><w:sdtPr>{properties}</w:sdtPr><w:sdtContent>{xml}</w:sdtContent></w:sdt>"

    header = '<w:tr><w:trPr><w:tblHeader/></w:trPr>' + cell("Port") + cell("Berth") + cell("Pilot") + "</w:tr>"
    nested = ("<w:tbl><w:tblPr/><w:tblGrid><w:gridCol/></w:tblGrid>"
              + control("<w:tr>" + cell("tug on call") + "</w:tr>") + "</w:tbl>")
    rows = [control("<w:tr>" + cell("Lerwick") + cell("B4") + cell("yes") + "</w:tr>"),
            "<w:tr>" + cell("Wick") + control(cell("C1")) + cell("no") + "</w:tr>",
            "<w:tr>" + cell("Thurso") + control(cell("Choose an item."), "<w:showingPlcHdr/>") + cell("yes") + "</w:tr>",
            "<w:tr>" + cell("Kirkwall") + cell("A2") + "<w:tc><w:p><w:r><w:t>no</w:t></w:r></w:p>" + nested + "</w:tc></w:tr>"]
    document = docx.Document()
    body = document.element.body
    body.insert(len(body) - 1, parse_xml(
        f'<w:tbl {nsdecls("w")}><w:tblPr/><w:tblGrid><w:gridCol/><w:gridCol/><w:gridCol/></w:tblGrid>'
        + header + control("".join(rows)) + "</w:tbl>"))
    assert paragraphs(document, tmp_path) == [
        "Port: Lerwick; Berth: B4; Pilot: yes",  # was lost: a row in a control
        "Port: Wick; Berth: C1; Pilot: no",  # was "Port: Wick; Berth: no": a cell in a control lost
        "Port: Thurso; Pilot: yes",  # the prompt left out, "yes" still the pilot's
        "Port: Kirkwall; Berth: A2; Pilot: no tug on call",  # was "... no": the nested table's row lost
    ]


@pytest.mark.parametrize("huge", ["99999", "1000000000", "0001000000000000000000000"])
def test_a_span_past_the_grid_counts_as_the_rest_of_it_and_reads_at_once(tmp_path, huge):
    """A cell's w:gridSpan or a row's w:gridBefore past the table's grid (a damaged or hostile file's) counts as the
    rest of the grid, whatever its size: 400 header rows spanning 99,999 columns (a 37 kB file) took 3.3 s of CPU and
    390 MB (each row's names laid out column by column), and a span of a billion read as one column, so the cells
    after it took the next columns' names."""
    import time

    def cell(text: str, span: str = "1") -> str:
        return f'<w:tc><w:tcPr><w:gridSpan w:val="{span}"/></w:tcPr><w:p><w:r><w:t>{text}</w:t></w:r></w:p></w:tc>'

    head = '<w:tr><w:trPr><w:tblHeader/></w:trPr>' + cell("Port") + cell("Berth", huge) + cell("Pilot") + "</w:tr>"
    late = f'<w:tr><w:trPr><w:gridBefore w:val="{huge}"/></w:trPr>' + cell("Thurso") + "</w:tr>"
    document = docx.Document()
    body = document.element.body
    body.insert(len(body) - 1, parse_xml(
        f'<w:tbl {nsdecls("w")}><w:tblPr/><w:tblGrid><w:gridCol/><w:gridCol/><w:gridCol/></w:tblGrid>' + head * 400
        + "<w:tr>" + cell("Wick") + cell("C1") + cell("no") + "</w:tr>" + late + "</w:tbl>"))
    document.save(str(tmp_path / "d.docx"))
    start = time.process_time()
    read = extract_docx(tmp_path / "d.docx").paragraphs
    assert time.process_time() - start < 1.0
    # "Berth" names the columns to the grid's end; a row starting past it starts where "Pilot", pushed past it, stands
    assert read == ["Port: Wick; Berth: C1; Berth: no", "Pilot: Thurso"]


def test_an_equation_reads_in_its_sentence(tmp_path):
    """An equation (Office Math, Insert > Equation) was lost: "The energy is E=mc² where ..." read "The energy is
    where ...", and an equation on a line of its own gave no paragraph. Its text reads in its place."""
    math = 'xmlns:m="http://schemas.openxmlformats.org/officeDocument/2006/math"'
    document = docx.Document()
    body = document.element.body
    for xml in ['<w:r><w:t xml:space="preserve">The energy is </w:t></w:r><m:oMath><m:r><m:t>E=m</m:t></m:r><m:sSup>'
                '<m:e><m:r><m:t>c</m:t></m:r></m:e><m:sup><m:r><m:t>2</m:t></m:r></m:sup></m:sSup></m:oMath><w:r>'
                '<w:t xml:space="preserve"> where c is the speed of light.</w:t></w:r>',
                '<m:oMathPara><m:oMath><m:r><m:rPr><m:sty m:val="p"/></m:rPr><m:t>a+b=c</m:t></m:r></m:oMath>'
                '</m:oMathPara>']:
        body.insert(len(body) - 1, parse_xml(f'<w:p {nsdecls("w")} {math}>{xml}</w:p>'))
    assert paragraphs(document, tmp_path) == ["The energy is E=mc2 where c is the speed of light.", "a+b=c"]


def test_a_paragraph_mark_deleted_with_tracked_changes_joins_the_paragraphs(tmp_path):
    """Deleting a paragraph mark with tracked changes on joins the paragraph to the next once the changes are
    accepted, as Word shows it without markup; the two were read as paragraphs of their own, a list item among them
    counted. The text runs on into the next paragraph, in its list; before a table it stays a paragraph."""
    document = docx.Document()
    body = document.element.body
    mark = '<w:pPr>{}<w:rPr><w:del w:id="1" w:author="A"/></w:rPr></w:pPr>'
    for xml in [mark.format("") + "<w:r><w:t>The ferry leaves at nine</w:t></w:r>",
                "<w:r><w:t>and returns at five.</w:t></w:r>",
                mark.format('<w:pStyle w:val="ListNumber"/>') + "<w:r><w:t>Check the moorings</w:t></w:r>",
                '<w:pPr><w:pStyle w:val="ListNumber"/></w:pPr><w:r><w:t>and the lines.</w:t></w:r>',
                '<w:pPr><w:pStyle w:val="ListNumber"/></w:pPr><w:r><w:t>Log the crossing.</w:t></w:r>',
                mark.format("") + "<w:r><w:t>Fares:</w:t></w:r>"]:
        body.insert(len(body) - 1, parse_xml(f'<w:p {nsdecls("w")}>{xml}</w:p>'))
    table(document, [("Adult", "12"), ("Child", "6")])
    assert paragraphs(document, tmp_path) == [
        "The ferry leaves at nine and returns at five.",  # were two paragraphs
        "1. Check the moorings and the lines.", "2. Log the crossing.",  # was "1. Check ...", "2. and the lines."
        "Fares:", "Adult 12", "Child 6"]


def test_a_list_item_moved_with_tracked_changes_is_numbered_where_it_went(tmp_path):
    """A list item moved with tracked changes on leaves its paragraph mark behind marked as moved away (w:moveFrom):
    that empty paragraph was counted, so the items after it read one number on ("3. Charlie" for "2. Charlie").
    Once the move is accepted the item is where it went, and numbered there."""
    numbered = '<w:pPr><w:pStyle w:val="ListNumber"/>{}</w:pPr>'
    document = docx.Document()
    body = document.element.body
    for mark, text in [("", "<w:r><w:t>Alpha</w:t></w:r>"),
                       ('<w:rPr><w:moveFrom w:id="1" w:author="A"/></w:rPr>',
                        '<w:moveFrom w:id="2" w:author="A"><w:r><w:t>Bravo</w:t></w:r></w:moveFrom>'),
                       ("", "<w:r><w:t>Charlie</w:t></w:r>"),
                       ('<w:rPr><w:moveTo w:id="3" w:author="A"/></w:rPr>',
                        '<w:moveTo w:id="4" w:author="A"><w:r><w:t>Bravo</w:t></w:r></w:moveTo>')]:
        body.insert(len(body) - 1, parse_xml(f'<w:p {nsdecls("w")}>{numbered.format(mark)}{text}</w:p>'))
    assert paragraphs(document, tmp_path) == ["1. Alpha", "2. Charlie", "3. Bravo"]


def test_a_heading_by_its_outline_level_opens_a_section_whatever_its_style_is_named(tmp_path):
    """A heading in a style of its own name ("Chapter", Pages' "Heading", a LibreOffice heading style of a user's) read
    as body text: only "Heading N" styles opened sections. Its outline level (the style's, or the paragraph's own,
    as Word's navigation pane lists it) makes it a heading of that level; outline level 9 is body text."""
    document = docx.Document()
    for name, level in (("Chapter", "0"), ("Part Head", "1"), ("Plain", "9")):
        style = document.styles.add_style(name, 1)
        style.element.get_or_add_pPr().append(parse_xml(f'<w:outlineLvl {nsdecls("w")} w:val="{level}"/>'))
    document.add_paragraph("Harbours", style="Chapter")
    document.add_paragraph("Dover", style="Part Head")
    document.add_paragraph("The ferry leaves at nine.", style="Plain")
    own = document.add_paragraph("Calais")
    own._p.get_or_add_pPr().append(parse_xml(f'<w:outlineLvl {nsdecls("w")} w:val="1"/>'))
    document.add_paragraph("The ferry arrives at noon.")
    document.save(str(tmp_path / "h.docx"))
    extracted = extract_docx(tmp_path / "h.docx")
    assert extracted.title == "Harbours"
    assert [m.get("section") for m in extracted.paragraph_meta] == [
        "Harbours > Dover", "Harbours > Dover", "Harbours > Calais", "Harbours > Calais"]
