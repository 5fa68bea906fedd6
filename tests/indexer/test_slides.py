"""PowerPoint files (indexer.slides through `corpus from-files`): each slide's title, text in reading order, tables
named by their header row and notes, every passage with its slide and section, no passage over two slides; damaged,
password-protected and old .ppt files named.

    .venv/bin/python -m pytest -q tests/indexer/test_slides.py
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from spanseek.core.io import read_corpus
from spanseek.indexer.chunking import ChunkOptions
from spanseek.indexer.drawings import drawing_texts
from spanseek.indexer.ingest import IngestError, IngestOptions, from_files
from spanseek.indexer.slides import extract_pptx

pptx = pytest.importorskip("pptx")
from pptx.util import Inches  # noqa: E402


def write_deck(path: Path, title: str | None = "Harbour report") -> Path:
    deck = pptx.Presentation()
    if title:
        deck.core_properties.title = title
    first = deck.slides.add_slide(deck.slide_layouts[1])  # title and content
    first.shapes.title.text = "Opening hours"
    body = first.placeholders[1].text_frame
    body.text = "The harbour office opens at nine."
    body.add_paragraph().text = "It closes at five on Fridays."
    first.notes_slide.notes_text_frame.text = "Mention the winter hours."
    second = deck.slides.add_slide(deck.slide_layouts[5])  # title only
    second.shapes.title.text = "Ferries"
    low = second.shapes.add_textbox(Inches(1), Inches(5), Inches(4), Inches(1))
    low.text_frame.text = "Tickets are sold on board."
    group = second.shapes.add_group_shape()
    high = group.shapes.add_textbox(Inches(1), Inches(1.5), Inches(4), Inches(1))
    high.text_frame.text = "Two routes leave from the north pier."
    table = second.shapes.add_table(3, 2, Inches(1), Inches(3), Inches(6), Inches(1.5)).table
    for r, row in enumerate([["Route", "Departure"], ["Kellerton to Kirkwall", "09:15"], ["Kirkwall to Stroma", "14:40"]]):
        for c, text in enumerate(row):
            table.cell(r, c).text = text
    deck.save(str(path))
    return path


def test_slides_read_in_order_with_their_slide_and_section(tmp_path):
    ext = extract_pptx(write_deck(tmp_path / "report.pptx"))
    assert ext.title == "Harbour report" and ext.meta == {"slides": 2}
    assert ext.paragraphs == [
        "Opening hours", "The harbour office opens at nine.", "It closes at five on Fridays.",
        "Mention the winter hours.",  # the notes after the slide's own text
        "Ferries", "Two routes leave from the north pier.",  # a group's shapes in their place, top to bottom
        "Route: Kellerton to Kirkwall; Departure: 09:15", "Route: Kirkwall to Stroma; Departure: 14:40",
        "Tickets are sold on board."]
    assert [m["slide"] for m in ext.paragraph_meta] == [1] * 4 + [2] * 5
    assert {m["section"] for m in ext.paragraph_meta[:4]} == {"Opening hours"}
    assert extract_pptx(write_deck(tmp_path / "untitled.pptx", title=None)).title == "Opening hours"


def test_from_files_never_mixes_two_slides_and_hits_carry_the_slide(tmp_path):
    (tmp_path / "docs").mkdir()
    write_deck(tmp_path / "docs" / "report.pptx")
    from_files([tmp_path / "docs"], tmp_path / "c.jsonl", opts=IngestOptions(chunk=ChunkOptions(min_tokens=64)))
    (doc,) = read_corpus(tmp_path / "c.jsonl")
    assert doc.id == "report.pptx" and doc.meta["slides"] == 2 and len(doc.paragraphs) == 2  # packed, per slide
    assert [m["slide"] for m in doc.passage_meta] == [1, 2] and "Kirkwall to Stroma" in doc.paragraphs[1]


def test_damaged_protected_and_old_decks_are_named(tmp_path, caplog):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "broken.pptx").write_bytes(b"PK\x03\x04 not a zip")
    (docs / "locked.pptx").write_bytes(b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + bytes(512))
    (docs / "old.ppt").write_bytes(b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + bytes(512))
    write_deck(docs / "good.pptx")
    report = from_files([docs], tmp_path / "c.jsonl")
    skipped = {Path(p).name: why for p, why in report.skipped}
    assert report.documents == 1 and set(skipped) == {"broken.pptx", "locked.pptx", "old.ppt"}
    assert "truncated or damaged" in skipped["broken.pptx"] and "password-protected" in skipped["locked.pptx"]
    assert "save it as .pptx" in skipped["old.ppt"]
    with pytest.raises(IngestError, match="save it as .pptx"):
        from_files([docs / "old.ppt"], tmp_path / "d.jsonl")


def test_a_file_that_is_no_pptx_is_named_for_what_it_is(tmp_path):
    """A .pptx that is another kind of file, or a zip cut short, got "(PackageNotFoundError: Package not found at
    ...)" though the file is there: it is named for what it is, as a .docx is."""
    import zipfile

    import docx

    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "cut.pptx").write_bytes(write_deck(docs / "good.pptx").read_bytes()[:3000])
    (docs / "report.pptx").write_bytes(b"%PDF-1.4\n%...")
    (docs / "empty.pptx").write_bytes(b"")
    (docs / "text.pptx").write_bytes(b"The ferry leaves at nine.")
    with zipfile.ZipFile(docs / "talk.pptx", "w") as z:
        z.writestr("mimetype", "application/vnd.oasis.opendocument.presentation")
    docx.Document().save(str(docs / "letter.pptx"))
    report = from_files([docs], tmp_path / "c.jsonl")
    assert report.documents == 1
    assert {Path(p).name: why for p, why in report.skipped} == {
        "cut.pptx": "not a readable PowerPoint (.pptx) file: its zip archive is truncated or damaged",
        "report.pptx": "a PDF file, not a PowerPoint (.pptx) file; rename it to .pdf",
        "empty.pptx": "an empty file (0 bytes), not a PowerPoint (.pptx) file",
        "text.pptx": "not a PowerPoint (.pptx) file: a .pptx is a zip archive, and this is none",
        "talk.pptx": "an OpenDocument file (application/vnd.oasis.opendocument.presentation), not a PowerPoint (.pptx) "
                     "file; rename it to .odp",
        "letter.pptx": "not a PowerPoint (.pptx) document: content type is "
                       "'application/vnd.openxmlformats-officedocument.wordprocessingml.document.main+xml'",
    }


def test_numbered_paragraphs_read_their_numbers_as_shown(tmp_path):
    """PowerPoint's numbered paragraphs (Home > Numbering) were read without their numbers, where Word's and HTML's
    lists read theirs ("1. Open the valve"): each reads the number it shows, counting on at its level in its scheme,
    from its start; a level below counts on its own, ended by a paragraph above it; a paragraph not numbered ends its
    level's numbering."""
    from pptx.oxml.ns import qn

    deck = pptx.Presentation()
    slide = deck.slides.add_slide(deck.slide_layouts[6])  # blank
    frame = slide.shapes.add_textbox(Inches(1), Inches(1), Inches(6), Inches(4)).text_frame
    lines = [("Open the valve", 0, "arabicPeriod", None), ("Check the gauge", 0, "arabicPeriod", None),
             ("Low", 1, "alphaLcParenR", None), ("High", 1, "alphaLcParenR", None),
             ("Close the tap", 0, "arabicPeriod", None), ("Note", 0, None, None),
             ("Part", 0, "romanUcParenBoth", "4"), ("Part", 0, "romanUcParenBoth", "4"), ("", 0, "arabicPeriod", None),
             ("Last", 0, "circleNumDbPlain", None)]
    for k, (text, level, scheme, start) in enumerate(lines):
        p = frame.paragraphs[0] if k == 0 else frame.add_paragraph()
        p.text, p.level = text, level
        if scheme:
            auto = p._p.get_or_add_pPr().makeelement(qn("a:buAutoNum"), {"type": scheme})
            if start:
                auto.set("startAt", start)
            p._p.get_or_add_pPr().append(auto)
    deck.save(str(tmp_path / "steps.pptx"))
    assert extract_pptx(tmp_path / "steps.pptx").paragraphs == [
        "1. Open the valve", "2. Check the gauge", "a) Low", "b) High", "3. Close the tap", "Note", "(IV) Part",
        "(V) Part", "1. Last"]


@pytest.mark.parametrize("name", ["talk.pptx", "letter.docx"])
def test_an_office_file_whose_zip_member_is_damaged_is_skipped_as_damaged(tmp_path, name):
    """A zip whose "mimetype" member fails its CRC check (a damaged OpenDocument file, named .pptx or .docx) stopped
    the whole ingest with BadZipFile while the reason for skipping it was worked out: it is skipped as damaged."""
    import zipfile

    docs = tmp_path / "docs"
    docs.mkdir()
    with zipfile.ZipFile(docs / name, "w", zipfile.ZIP_STORED) as z:
        z.writestr("mimetype", "application/vnd.oasis.opendocument.presentation")
        z.writestr("content.xml", "<office:document-content/>")
    data = bytearray((docs / name).read_bytes())
    data[data.index(b"application/vnd.oasis") + 5] ^= 0xFF  # the member's bytes no longer match its CRC
    (docs / name).write_bytes(bytes(data))
    write_deck(docs / "good.pptx")
    report = from_files([docs], tmp_path / "c.jsonl")
    assert report.documents == 1
    app = "PowerPoint (.pptx)" if name.endswith(".pptx") else "Word (.docx)"
    assert {Path(p).name: why for p, why in report.skipped} == {
        name: f"not a readable {app} file: its zip archive is damaged (BadZipFile: Bad CRC-32 for file 'mimetype')"}


def test_line_breaks_and_cells_merged_over_rows_read_as_on_the_slide(tmp_path):
    """A line break in a paragraph (Shift+Enter) is a space between its words, not nothing ("nine closes", not
    "ninecloses"), in a slide's text and its notes; a table's cell merged over rows reads in each of them, as in
    Word, HTML and Markdown (each row whole as a passage), one merged over columns once."""
    deck = pptx.Presentation()
    slide = deck.slides.add_slide(deck.slide_layouts[5])
    slide.shapes.title.text = "Ferries"
    for frame in (slide.shapes.add_textbox(Inches(1), Inches(1.5), Inches(4), Inches(1)).text_frame,
                  slide.notes_slide.notes_text_frame):
        paragraph = frame.paragraphs[0]
        paragraph.add_run().text = "Opens at nine"
        paragraph.add_line_break()
        paragraph.add_run().text = "closes at five"
    table = slide.shapes.add_table(4, 3, Inches(1), Inches(3), Inches(6), Inches(1.5)).table
    for r, row in enumerate([["Region", "Town", "Ferries"], ["North", "Ayr", "2"], ["", "Bute", "1"],
                             ["South", "Cove", ""]]):
        for c, text in enumerate(row):
            table.cell(r, c).text = text
    table.cell(1, 0).merge(table.cell(2, 0))
    table.cell(3, 1).merge(table.cell(3, 2))
    deck.save(str(tmp_path / "ferries.pptx"))
    assert extract_pptx(tmp_path / "ferries.pptx").paragraphs == [
        "Ferries", "Opens at nine closes at five", "Region: North; Town: Ayr; Ferries: 2",
        "Region: North; Town: Bute; Ferries: 1", "Region: South; Town: Cove", "Opens at nine closes at five"]


def tides(tmp_path, rows: list[list[str]], merges: list[tuple[int, int, int, int]]) -> list[str]:
    """The paragraphs of a slide titled "Tides" holding a table of ``rows``, its cells merged as ``merges`` say
    (first row and column, last row and column)."""
    deck = pptx.Presentation()
    slide = deck.slides.add_slide(deck.slide_layouts[5])
    slide.shapes.title.text = "Tides"
    table = slide.shapes.add_table(len(rows), len(rows[0]), Inches(1), Inches(2), Inches(6), Inches(2)).table
    for r, row in enumerate(rows):
        for c, text in enumerate(row):
            table.cell(r, c).text = text
    for r0, c0, r1, c1 in merges:
        table.cell(r0, c0).merge(table.cell(r1, c1))
    deck.save(str(tmp_path / "tides.pptx"))
    return extract_pptx(tmp_path / "tides.pptx").paragraphs


def test_a_header_whose_cells_span_two_rows_names_each_column_by_both_levels(tmp_path):
    """A first row whose cells merged over rows span a second header row (a group's name over two columns) is a
    header of two levels, read as HTML's rowspan and colspan and Word's merged cells are: "Tide / high: 3.2 m" (it
    read "Port: Port; Tide: high; low" as a row, and the body's cells "Tide: 3.2 m; 0.4 m")."""
    assert tides(tmp_path, [["Port", "Tide", "", "Wind"], ["", "high", "low", ""], ["Brest", "3.2 m", "0.4 m", "NW"],
                            ["Vigo", "2.9 m", "", "W"]], [(0, 0, 1, 0), (0, 1, 0, 2), (0, 3, 1, 3)]) == [
        "Tides", "Port: Brest; Tide / high: 3.2 m; Tide / low: 0.4 m; Wind: NW", "Port: Vigo; Tide / high: 2.9 m; Wind: W"]


def test_a_header_of_two_levels_ends_below_its_group_beside_a_cell_merged_down_the_table(tmp_path):
    """A first-row cell merged down the whole table ("Source") beside a two-level header does not take the body's
    rows into the header, as in Word: it took the Brest row ("Port / Brest: Vigo; Tide / high / 3.2 m: 2.9 m"). It
    names its column in the body's rows, which read nothing of it ("Source: Source"), as Word's and HTML's."""
    assert tides(tmp_path, [["Port", "Tide", "", "Source"], ["", "high", "low", ""], ["Brest", "3.2 m", "0.4 m", ""],
                            ["Vigo", "2.9 m", "0.6 m", ""]], [(0, 0, 1, 0), (0, 1, 0, 2), (0, 3, 3, 3)]) == [
        "Tides", "Port: Brest; Tide / high: 3.2 m; Tide / low: 0.4 m", "Port: Vigo; Tide / high: 2.9 m; Tide / low: 0.6 m"]


def test_a_header_cell_merged_down_into_the_body_names_its_column_as_in_word_and_html(tmp_path):
    """A one-level header's cell merged down over body rows is their column's name, not their text (it read
    "Ferries: Ferries" in each); a body cell merged over rows below it still reads in each of its rows."""
    assert tides(tmp_path, [["Port", "Ferries", "Tide"], ["Brest", "", "3.2 m"], ["Vigo", "", "2.9 m"],
                            ["Ayr", "2", ""]], [(0, 1, 2, 1), (2, 2, 3, 2)]) == [
        "Tides", "Port: Brest; Tide: 3.2 m", "Port: Vigo; Tide: 2.9 m", "Port: Ayr; Ferries: 2; Tide: 2.9 m"]


DIAGRAM_DATA = """<dgm:dataModel xmlns:dgm="http://schemas.openxmlformats.org/drawingml/2006/diagram"
 xmlns:a="http://schemas.openxmlformats.org/drawingml/2006/main"><dgm:ptLst>
<dgm:pt modelId="0" type="doc"><dgm:t><a:bodyPr/><a:p><a:r><a:t>not a box</a:t></a:r></a:p></dgm:t></dgm:pt>
<dgm:pt modelId="3"><dgm:t><a:bodyPr/><a:p><a:r><a:t>Sail</a:t></a:r></a:p></dgm:t></dgm:pt>
<dgm:pt modelId="1"><dgm:t><a:bodyPr/><a:p><a:r><a:t>Check in</a:t></a:r></a:p></dgm:t></dgm:pt>
<dgm:pt modelId="2"><dgm:t><a:bodyPr/><a:p><a:r><a:t>Board the</a:t></a:r></a:p><a:p><a:r><a:t>ferry</a:t></a:r></a:p></dgm:t></dgm:pt>
<dgm:pt modelId="9" type="sibTrans"><dgm:t><a:bodyPr/><a:p><a:r><a:t>arrow</a:t></a:r></a:p></dgm:t></dgm:pt>
<dgm:pt modelId="8" type="pres"/>
</dgm:ptLst><dgm:cxnLst>
<dgm:cxn modelId="20" srcId="0" destId="3" srcOrd="2"/><dgm:cxn modelId="21" srcId="0" destId="1" srcOrd="0"/>
<dgm:cxn modelId="22" srcId="0" destId="2" srcOrd="1"/><dgm:cxn modelId="23" type="presOf" srcId="1" destId="8"/>
</dgm:cxnLst></dgm:dataModel>"""


def add_diagram(slide, data: bytes, number: int = 1) -> None:
    """A SmartArt graphic frame whose data part holds ``data`` (python-pptx cannot make one)."""
    from pptx.opc.package import Part
    from pptx.opc.packuri import PackURI
    from pptx.oxml import parse_xml

    part = Part(PackURI(f"/ppt/diagrams/data{number}.xml"), "application/vnd.openxmlformats-officedocument.drawingml.diagramData+xml",
                slide.part.package, data)
    rid = slide.part.relate_to(part, "http://schemas.openxmlformats.org/officeDocument/2006/relationships/diagramData")
    slide.shapes._spTree.append(parse_xml(
        '<p:graphicFrame xmlns:p="http://schemas.openxmlformats.org/presentationml/2006/main" '
        'xmlns:a="http://schemas.openxmlformats.org/drawingml/2006/main" '
        'xmlns:r="http://schemas.openxmlformats.org/officeDocument/2006/relationships">'
        '<p:nvGraphicFramePr><p:cNvPr id="40" name="Diagram"/><p:cNvGraphicFramePr/><p:nvPr/></p:nvGraphicFramePr>'
        '<p:xfrm><a:off x="0" y="0"/><a:ext cx="100" cy="100"/></p:xfrm><a:graphic>'
        '<a:graphicData uri="http://schemas.openxmlformats.org/drawingml/2006/diagram">'
        '<dgm:relIds xmlns:dgm="http://schemas.openxmlformats.org/drawingml/2006/diagram" '
        f'r:dm="{rid}" r:lo="{rid}" r:qs="{rid}" r:cs="{rid}"/></a:graphicData></a:graphic></p:graphicFrame>'))


def test_smartart_boxes_and_chart_titles_read_after_the_slides_other_text(tmp_path):
    """A SmartArt diagram's boxes (in its own part) read in the diagram's order, each a paragraph (not the diagram's
    own point, its arrows or how it is drawn), and a chart's title and axis titles, after the slide's other text and
    before its notes; a diagram part of damaged XML reads nothing and stops nothing."""
    from pptx.chart.data import CategoryChartData
    from pptx.enum.chart import XL_CHART_TYPE

    deck = pptx.Presentation()
    slide = deck.slides.add_slide(deck.slide_layouts[5])
    slide.shapes.title.text = "Crossing"
    add_diagram(slide, DIAGRAM_DATA.encode())
    data = CategoryChartData()
    data.categories = ["Mon", "Tue"]
    data.add_series("Cars", (40, 52))
    chart = slide.shapes.add_chart(XL_CHART_TYPE.COLUMN_CLUSTERED, Inches(1), Inches(4), Inches(4), Inches(2), data).chart
    chart.chart_title.text_frame.text = "Cars carried per day"
    chart.value_axis.axis_title.text_frame.text = "Cars"
    slide.shapes.add_textbox(Inches(1), Inches(6), Inches(4), Inches(1)).text_frame.text = "Book ahead in summer."
    slide.notes_slide.notes_text_frame.text = "Mention the queue."
    damaged = deck.slides.add_slide(deck.slide_layouts[5])
    damaged.shapes.title.text = "Damaged"
    add_diagram(damaged, b"<dgm:dataModel", 2)
    deck.save(str(tmp_path / "d.pptx"))
    extracted = extract_pptx(tmp_path / "d.pptx")
    assert extracted.paragraphs == ["Crossing", "Book ahead in summer.", "Check in", "Board the ferry", "Sail",
                                    "Cars carried per day: Mon, Tue", "Cars", "Mention the queue.", "Damaged"]
    assert [m["slide"] for m in extracted.paragraph_meta] == [1] * 8 + [2]


def test_a_chart_s_automatic_title_categories_and_series_are_read_as_shown(tmp_path):
    """A chart of one series without a title of its own shows the series' name as its title, which was not read,
    nor were its category labels or its legend's series names. A title reads with the categories after it; a
    legend's names follow; a deleted automatic title reads nothing, and dates (serial numbers in the chart's part)
    are not read as numbers. A series' name is read only where the chart shows it: in its legend, its data labels or
    its automatic title. "Trips" was read from a chart that shows it nowhere (no title, no legend, no labels); its
    slide shows only its categories, and a copy with a legend reads the name."""
    import datetime

    from pptx.chart.data import CategoryChartData
    from pptx.enum.chart import XL_CHART_TYPE

    def chart(slide, categories, series: dict[str, tuple[int, ...]]):
        data = CategoryChartData()
        data.categories = categories
        for name, values in series.items():
            data.add_series(name, values)
        return slide.shapes.add_chart(XL_CHART_TYPE.COLUMN_CLUSTERED, Inches(1), Inches(1), Inches(4), Inches(3),
                                      data).chart

    deck = pptx.Presentation()
    chart(deck.slides.add_slide(deck.slide_layouts[6]), ["North", "South"], {"Sales by region": (40, 52)})
    years = chart(deck.slides.add_slide(deck.slide_layouts[6]), ["North", "South"], {"2023": (1, 2), "2024": (3, 4)})
    years.chart_title.text_frame.text = "Sales by year"
    years.has_legend = True
    chart(deck.slides.add_slide(deck.slide_layouts[6]), ["Ferry", "Bus"], {"Trips": (5, 6)}).has_title = False
    legend = chart(deck.slides.add_slide(deck.slide_layouts[6]), ["Ferry", "Bus"], {"Trips": (5, 6)})
    legend.has_title, legend.has_legend = False, True
    chart(deck.slides.add_slide(deck.slide_layouts[6]), [datetime.date(2024, 5, 1)], {"Landings": (7,)})
    unnamed = chart(deck.slides.add_slide(deck.slide_layouts[6]), ["Mon", "Tue"], {"Cars": (1, 2), "Vans": (3, 4)})
    unnamed.chart_title.text_frame.text = "Vehicles"
    labelled = chart(deck.slides.add_slide(deck.slide_layouts[6]), ["Mon", "Tue"], {"Cars": (1, 2), "Vans": (3, 4)})
    labelled.chart_title.text_frame.text = "Vehicles"
    labelled.plots[0].series[1].data_labels.show_series_name = True
    deck.save(str(tmp_path / "charts.pptx"))
    assert extract_pptx(tmp_path / "charts.pptx").paragraphs == [
        "Sales by region: North, South", "Sales by year: North, South", "2023, 2024", "Ferry, Bus", "Ferry, Bus",
        "Trips", "Landings", "Vehicles: Mon, Tue", "Vehicles: Mon, Tue", "Vans"]


def test_a_chart_reads_the_series_names_its_legend_and_data_labels_show():
    """A legend shows each series' name but for entries deleted from it; data labels set on a chart group show its
    series' names unless a series' own labels are deleted or leave the name out."""
    c = "http://schemas.openxmlformats.org/drawingml/2006/chart"

    def ser(index: int, name: str, labels: str = "") -> str:
        return f"<c:ser><c:idx val='{index}'/><c:tx><c:v>{name}</c:v></c:tx>{labels}</c:ser>"

    def chart_part(body: str, legend: str = "") -> bytes:
        return (f"<c:chartSpace xmlns:c='{c}'><c:chart><c:autoTitleDeleted/><c:plotArea><c:barChart>{body}"
                f"</c:barChart></c:plotArea>{legend}</c:chart></c:chartSpace>").encode()

    deleted = "<c:legendEntry><c:idx val='1'/><c:delete val='1'/></c:legendEntry>"
    three = ser(0, "Cars") + ser(1, "Vans") + ser(2, "Buses")
    assert drawing_texts(chart_part(three, f"<c:legend>{deleted}</c:legend>")) == ["Cars, Buses"]
    assert drawing_texts(chart_part(ser(0, "Cars") + ser(1, "Vans"))) == []
    group = "<c:dLbls><c:showSerName val='1'/></c:dLbls>"
    assert drawing_texts(chart_part(ser(0, "Cars") + ser(1, "Vans", "<c:dLbls><c:delete val='1'/></c:dLbls>")
                                    + ser(2, "Buses", "<c:dLbls><c:showSerName val='0'/></c:dLbls>") + group)
                         ) == ["Cars"]


def test_a_chart_reads_every_level_of_its_categories_and_no_series_name_from_a_pie_s_legend(tmp_path):
    """Categories of two levels (quarters under years) read only the innermost ("Q1, Q2, Q1, Q2, Q3"), which says
    nothing of the years the chart groups them by; each outer label now reads with the labels under it. A pie's
    legend names its slices (its categories), not its series: "Trips" was read as a legend's name it never shows."""
    from pptx.chart.data import CategoryChartData
    from pptx.enum.chart import XL_CHART_TYPE

    deck = pptx.Presentation()
    quarters = CategoryChartData()
    for year, names in (("2023", ["Q1", "Q2"]), ("2024", ["Q1", "Q2", "Q3"])):
        category = quarters.add_category(year)
        for name in names:
            category.add_sub_category(name)
    quarters.add_series("Cargo", (1, 2, 3, 4, 5))
    columns = deck.slides.add_slide(deck.slide_layouts[6]).shapes.add_chart(
        XL_CHART_TYPE.COLUMN_CLUSTERED, Inches(1), Inches(1), Inches(4), Inches(3), quarters).chart
    columns.chart_title.text_frame.text = "Cargo by quarter"
    modes = CategoryChartData()
    modes.categories = ["Ferry", "Bus"]
    modes.add_series("Trips", (5, 6))
    pie = deck.slides.add_slide(deck.slide_layouts[6]).shapes.add_chart(
        XL_CHART_TYPE.PIE, Inches(1), Inches(1), Inches(4), Inches(3), modes).chart
    pie.chart_title.text_frame.text = "Trips by mode"
    pie.has_legend = True
    deck.save(str(tmp_path / "charts.pptx"))
    assert extract_pptx(tmp_path / "charts.pptx").paragraphs == [
        "Cargo by quarter: 2023 (Q1, Q2), 2024 (Q1, Q2, Q3)", "Trips by mode: Ferry, Bus"]
    # three levels, and a label under no outer one
    c = "http://schemas.openxmlformats.org/drawingml/2006/chart"

    def level(labels: dict[int, str]) -> str:
        return "<c:lvl>" + "".join(f"<c:pt idx='{i}'><c:v>{v}</c:v></c:pt>" for i, v in labels.items()) + "</c:lvl>"

    cache = (level({0: "Q0", 1: "Q1", 2: "Q2", 3: "Q1"}) + level({1: "2023", 3: "2024"}) + level({1: "North"}))
    part = (f"<c:chartSpace xmlns:c='{c}'><c:chart><c:autoTitleDeleted/><c:plotArea><c:barChart><c:ser>"
            f"<c:cat><c:multiLvlStrRef><c:multiLvlStrCache><c:ptCount val='4'/>{cache}</c:multiLvlStrCache>"
            "</c:multiLvlStrRef></c:cat></c:ser></c:barChart></c:plotArea></c:chart></c:chartSpace>")
    assert drawing_texts(part.encode()) == ["Q0, North (2023 (Q1, Q2), 2024 (Q1))"]


def test_a_chart_s_category_count_out_of_all_proportion_is_read_at_the_cost_of_its_labels():
    """Categories of several levels were read by walking every index up to the cache's point count (``c:ptCount``)
    or its highest point index, which a damaged or hostile file sets at will: a count of 10^12 held the indexer for
    hours. The labels are now walked, not the indexes between them."""
    c = "http://schemas.openxmlformats.org/drawingml/2006/chart"
    cache = ("<c:lvl><c:pt idx='0'><c:v>Q1</c:v></c:pt><c:pt idx='999999999998'><c:v>Q2</c:v></c:pt></c:lvl>"
             "<c:lvl><c:pt idx='0'><c:v>2023</c:v></c:pt></c:lvl>")
    part = (f"<c:chartSpace xmlns:c='{c}'><c:chart><c:autoTitleDeleted/><c:plotArea><c:barChart><c:ser>"
            f"<c:cat><c:multiLvlStrRef><c:multiLvlStrCache><c:ptCount val='1000000000000'/>{cache}"
            "</c:multiLvlStrCache></c:multiLvlStrRef></c:cat></c:ser></c:barChart></c:plotArea></c:chart></c:chartSpace>")
    t0 = time.process_time()  # CPU time: other work on the machine does not count
    assert drawing_texts(part.encode()) == ["2023 (Q1, Q2)"]
    assert time.process_time() - t0 < 5


def test_a_text_box_saved_with_alternative_content_is_read_once_in_its_place(tmp_path):
    """PowerPoint saves a text box holding an equation (and other newer shapes) inside mc:AlternateContent: the
    shape itself as the choice, a picture of it as the fallback for older readers. python-pptx reads no shape
    there, and the text box's text was lost; it reads in its place, once, from the choice."""
    from lxml import etree

    mc = "http://schemas.openxmlformats.org/markup-compatibility/2006"
    deck = pptx.Presentation()
    slide = deck.slides.add_slide(deck.slide_layouts[5])
    slide.shapes.title.text = "Tides"
    for top, text in [(1.5, "The tide rises twice a day."), (3, "The range is the height from low to high water."),
                      (4.5, "Spring tides follow a full moon.")]:
        slide.shapes.add_textbox(Inches(1), Inches(top), Inches(6), Inches(1)).text_frame.text = text
    box = slide.shapes[2].element  # the second text box, wrapped as PowerPoint wraps one holding an equation
    alternatives = etree.Element(f"{{{mc}}}AlternateContent", nsmap={"mc": mc})
    box.addprevious(alternatives)
    choice = etree.SubElement(alternatives, f"{{{mc}}}Choice", Requires="a14")
    fallback = etree.SubElement(alternatives, f"{{{mc}}}Fallback")
    picture = etree.fromstring(etree.tostring(box))
    for t in picture.iter("{http://schemas.openxmlformats.org/drawingml/2006/main}t"):
        t.text = ""  # the fallback shows the text as a picture
    choice.append(box)
    fallback.append(picture)
    deck.save(str(tmp_path / "tides.pptx"))
    assert extract_pptx(tmp_path / "tides.pptx").paragraphs == [
        "Tides", "The tide rises twice a day.", "The range is the height from low to high water.",  # was lost
        "Spring tides follow a full moon."]


def _append_equation(paragraph, after: str) -> None:
    """An equation, E=mc2 (Office Math, a14:m, with a fallback for older readers, as PowerPoint saves one), and a run
    of ``after`` appended to a paragraph (a:p)."""
    from lxml import etree

    ns = ('xmlns:a="http://schemas.openxmlformats.org/drawingml/2006/main" '
          'xmlns:mc="http://schemas.openxmlformats.org/markup-compatibility/2006" '
          'xmlns:a14="http://schemas.microsoft.com/office/drawing/2010/main" '
          'xmlns:m="http://schemas.openxmlformats.org/officeDocument/2006/math"')
    for xml in ['<mc:AlternateContent {ns}><mc:Choice Requires="a14"><a14:m><m:oMathPara><m:oMath><m:r><m:t>E=m'
                '</m:t></m:r><m:sSup><m:e><m:r><m:t>c</m:t></m:r></m:e><m:sup><m:r><m:t>2</m:t></m:r></m:sup></m:sSup>'
                '</m:oMath></m:oMathPara></a14:m></mc:Choice><mc:Fallback><a:r><a:t>[equation]</a:t></a:r>'
                '</mc:Fallback></mc:AlternateContent>', '<a:r {ns}><a:t>{after}</a:t></a:r>']:
        paragraph.append(etree.fromstring(xml.format(ns=ns, after=after)))


_PARAGRAPH = ".//{http://schemas.openxmlformats.org/drawingml/2006/main}p"


def test_an_equation_reads_in_its_paragraph_and_the_notes_are_read(tmp_path):
    """An equation in a text box (Office Math, a14:m) was left out of its paragraph: "The energy is E=mc2 at rest."
    read "The energy is at rest.". Its text reads in its place; a fallback for older readers is not read again."""
    deck = pptx.Presentation()
    slide = deck.slides.add_slide(deck.slide_layouts[5])
    slide.shapes.title.text = "Energy"
    box = slide.shapes.add_textbox(Inches(1), Inches(2), Inches(6), Inches(1))
    box.text_frame.text = "The energy is "
    _append_equation(box.element.find(_PARAGRAPH), " at rest.")
    slide.notes_slide.notes_text_frame.text = "Mention the speed of light."
    deck.save(str(tmp_path / "energy.pptx"))
    assert extract_pptx(tmp_path / "energy.pptx").paragraphs == [
        "Energy", "The energy is E=mc2 at rest.", "Mention the speed of light."]


def test_an_equation_in_a_table_cell_or_a_title_reads_in_its_text(tmp_path):
    """An equation in a table's cell was lost (python-pptx's cell text leaves it out): "Rest energy: " read alone.
    It reads in the cell's text, as one in a text box does, and so does one in the slide's title."""
    deck = pptx.Presentation()
    slide = deck.slides.add_slide(deck.slide_layouts[5])
    slide.shapes.title.text = "Energy "
    _append_equation(slide.shapes.title.element.find(_PARAGRAPH), " explained")
    table = slide.shapes.add_table(2, 2, Inches(1), Inches(2), Inches(6), Inches(1)).table
    cells = [*table.rows[0].cells, *table.rows[1].cells]
    for cell, text in zip(cells, ["Quantity", "Formula", "Rest energy", "is "], strict=True):
        cell.text = text
    _append_equation(table.cell(1, 1)._tc.find(_PARAGRAPH), " (joules)")
    deck.save(str(tmp_path / "table.pptx"))
    assert extract_pptx(tmp_path / "table.pptx").paragraphs == [
        "Energy E=mc2 explained", "Quantity: Rest energy; Formula: is E=mc2 (joules)"]


def test_a_hidden_shape_is_not_read(tmp_path):
    """A shape hidden in the Selection Pane (an old version kept out of sight, a note to the presenter) is not shown
    in the slide show, but its text was read; a hidden group's shapes too. They are left out, a hidden title too."""
    deck = pptx.Presentation()
    slide = deck.slides.add_slide(deck.slide_layouts[5])
    slide.shapes.title.text = "Timetable"
    shown = slide.shapes.add_textbox(Inches(1), Inches(2), Inches(6), Inches(1))
    shown.text_frame.text = "The ferry leaves at nine."
    old = slide.shapes.add_textbox(Inches(1), Inches(3), Inches(6), Inches(1))
    old.text_frame.text = "The ferry leaves at eight."
    group = slide.shapes.add_group_shape()
    group.shapes.add_textbox(Inches(1), Inches(4), Inches(6), Inches(1)).text_frame.text = "Draft: check the time."
    for shape in (old, group):
        shape.element.find("./*/{http://schemas.openxmlformats.org/presentationml/2006/main}cNvPr").set("hidden", "1")
    hidden_title = deck.slides.add_slide(deck.slide_layouts[1])
    hidden_title.shapes.title.text = "Working title"
    hidden_title.shapes.title.element.find(
        "./*/{http://schemas.openxmlformats.org/presentationml/2006/main}cNvPr").set("hidden", "true")
    hidden_title.placeholders[1].text_frame.text = "Tickets are sold on board."
    deck.save(str(tmp_path / "hidden.pptx"))
    assert extract_pptx(tmp_path / "hidden.pptx").paragraphs == [
        "Timetable", "The ferry leaves at nine.", "Tickets are sold on board."]


def test_a_slide_s_footer_number_and_date_are_left_out(tmp_path):
    """Insert > Header & Footer puts a footer, the slide's number and a date on every slide: they read as passages
    of each slide ("Kellerton Harbour - Confidential", "1", "5 May 2024"). They are left out, as Word's footers and
    a PDF's running footers and page numbers are."""
    from lxml import etree

    ns = ('xmlns:p="http://schemas.openxmlformats.org/presentationml/2006/main" '
          'xmlns:a="http://schemas.openxmlformats.org/drawingml/2006/main"')
    deck = pptx.Presentation()
    for n in (1, 2):
        slide = deck.slides.add_slide(deck.slide_layouts[1])
        slide.shapes.title.text = f"Berths {n}"
        slide.placeholders[1].text_frame.text = f"Berth {n} takes ships up to 120 m."
        for i, (kind, text) in enumerate([("ftr", "<a:r><a:t>Kellerton Harbour - Confidential</a:t></a:r>"),
                                          ("sldNum", f'<a:fld id="{{B6F15528-21DE-4FAA-801E-634DDDAF4B2B}}" '
                                                     f'type="slidenum"><a:t>{n}</a:t></a:fld>'),
                                          ("dt", "<a:r><a:t>5 May 2024</a:t></a:r>")], start=10):
            slide.shapes.element.append(etree.fromstring(
                f'<p:sp {ns}><p:nvSpPr><p:cNvPr id="{i}" name="{kind}"/><p:cNvSpPr/><p:nvPr><p:ph type="{kind}" '
                f'idx="{i}"/></p:nvPr></p:nvSpPr><p:spPr/><p:txBody><a:bodyPr/><a:p>{text}</a:p></p:txBody></p:sp>'))
    deck.save(str(tmp_path / "berths.pptx"))
    assert extract_pptx(tmp_path / "berths.pptx").paragraphs == [
        "Berths 1", "Berth 1 takes ships up to 120 m.", "Berths 2", "Berth 2 takes ships up to 120 m."]


def test_a_footer_of_one_slide_s_own_is_read(tmp_path):
    """A footer placeholder that one slide uses for its own text (the source of its figures) was left out with the
    footer Insert > Header & Footer repeats on every slide. Only footers two slides or more repeat are left out."""
    from lxml import etree

    ns = ('xmlns:p="http://schemas.openxmlformats.org/presentationml/2006/main" '
          'xmlns:a="http://schemas.openxmlformats.org/drawingml/2006/main"')
    deck = pptx.Presentation()
    for n, footer in ((1, "Kellerton Harbour"), (2, "Source: harbour survey, 2023"), (3, "Kellerton Harbour")):
        slide = deck.slides.add_slide(deck.slide_layouts[1])
        slide.shapes.title.text = f"Berths {n}"
        slide.placeholders[1].text_frame.text = f"Berth {n} takes ships up to 120 m."
        slide.shapes.element.append(etree.fromstring(
            f'<p:sp {ns}><p:nvSpPr><p:cNvPr id="10" name="Footer"/><p:cNvSpPr/><p:nvPr><p:ph type="ftr" idx="10"/>'
            f'</p:nvPr></p:nvSpPr><p:spPr/><p:txBody><a:bodyPr/><a:p><a:r><a:t>{footer}</a:t></a:r></a:p></p:txBody>'
            '</p:sp>'))
    deck.save(str(tmp_path / "sources.pptx"))
    assert extract_pptx(tmp_path / "sources.pptx").paragraphs == [
        "Berths 1", "Berth 1 takes ships up to 120 m.", "Berths 2", "Berth 2 takes ships up to 120 m.",
        "Source: harbour survey, 2023", "Berths 3", "Berth 3 takes ships up to 120 m."]


def test_paragraphs_numbered_by_their_layout_or_master_read_their_numbers(tmp_path):
    """A placeholder's paragraphs numbered by its slide layout's list style or its master's text style (a theme's
    numbered list: nothing on the slide says so) were read without their numbers: each reads the number shown, as
    one numbered on the slide does; a bullet set nearer (the paragraph's own, or a level the layout gives a bullet)
    is no number. A text box's own list style numbers its paragraphs too."""
    from pptx.oxml.ns import qn

    def numbered(props, scheme: str) -> None:
        props.append(props.makeelement(qn("a:buAutoNum"), {"type": scheme}))

    deck = pptx.Presentation()
    master = deck.slide_masters[0].element.find(qn("p:txStyles")).find(qn("p:bodyStyle"))
    level = master.find(qn("a:lvl1pPr"))
    level.remove(level.find(qn("a:buChar")))
    numbered(level, "alphaLcParenR")  # the master numbers its first level
    layout = deck.slide_layouts[1].placeholders[1].element.find(qn("p:txBody")).find(qn("a:lstStyle"))
    layout.append(layout.makeelement(qn("a:lvl2pPr"), {}))
    numbered(layout[-1], "arabicPeriod")  # the layout numbers its second
    slide = deck.slides.add_slide(deck.slide_layouts[1])
    slide.shapes.title.text = "Steps"
    frame = slide.placeholders[1].text_frame
    for k, (text, lvl) in enumerate([("Open the valve", 0), ("Low", 1), ("High", 1), ("Close the tap", 0),
                                     ("Note", 0)]):
        p = frame.paragraphs[0] if k == 0 else frame.add_paragraph()
        p.text, p.level = text, lvl
    pPr = frame.paragraphs[-1]._p.get_or_add_pPr()
    pPr.append(pPr.makeelement(qn("a:buNone"), {}))
    box = slide.shapes.add_textbox(Inches(1), Inches(6), Inches(4), Inches(1)).text_frame
    box.text = "Boxed"
    style = box._txBody.find(qn("a:lstStyle"))
    style.append(style.makeelement(qn("a:lvl1pPr"), {}))
    numbered(style[-1], "romanUcPeriod")
    deck.save(str(tmp_path / "themed.pptx"))
    assert extract_pptx(tmp_path / "themed.pptx").paragraphs == [
        "Steps", "a) Open the valve", "1. Low", "2. High", "b) Close the tap", "Note", "I. Boxed"]
