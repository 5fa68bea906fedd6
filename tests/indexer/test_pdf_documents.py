"""PDF files as they come from typesetters and scanners, through ``indexer.documents.extract_pdf``: two columns,
running headers and footers, words hyphenated at line ends, ligatures, tables, pages of only an image, page content
in a form XObject, fonts without a Unicode map, a right-to-left script, the title.

    OMP_NUM_THREADS=1 .venv/bin/python -m pytest -q tests/indexer/test_pdf_documents.py
"""

from __future__ import annotations

import logging
import re
import time
from pathlib import Path

import pytest

from spanseek.indexer import pdf_layout
from spanseek.indexer.documents import Unreadable, extract_pdf
from spanseek.indexer.ingest import from_files
from spanseek.indexer.pdf_file import glyph_character
from tests.indexer.test_documents import pdf_of_objects

fpdf = pytest.importorskip("fpdf")

DEJAVU = Path("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf")  # ligature and Hebrew glyphs; fpdf2's own fonts
needs_dejavu = pytest.mark.skipif(not DEJAVU.exists(), reason="needs the DejaVu Sans font")  # are Latin-1 only


def lines_pdf(path: Path, pages: list[list[tuple[float, float, str]]], font: Path | None = None, size: float = 10,
              title: str | None = None, header: bool = False) -> Path:
    """A PDF whose pages hold these lines, each (x, y, text) in millimetres from the top left, as a typesetter
    places them; ``header`` adds a running header (two parts) and a footer "Page n of N" to every page."""
    pdf = fpdf.FPDF(unit="mm", format="A4")
    if font:
        pdf.add_font("body", fname=str(font))
    if title:
        pdf.set_title(title)
    for number, lines in enumerate(pages, start=1):
        pdf.add_page()
        if header:
            pdf.set_font("helvetica", size=8)
            pdf.text(20, 12, "Kellerton Harbour Authority")
            pdf.text(150, 12, "Annual Report 2023")
            pdf.text(95, 287, f"Page {number} of {len(pages)}")
        pdf.set_font("body" if font else "helvetica", size=size)
        for x, y, text in lines:
            pdf.text(x, y, text)
    pdf.output(str(path))
    return path


def column(x: float, top: float, paragraphs: list[list[str]]) -> list[tuple[float, float, str]]:
    """Paragraphs of pre-broken lines, 5 mm apart, 3 mm more between paragraphs."""
    placed, y = [], top
    for lines in paragraphs:
        for line in lines:
            placed.append((x, y, line))
            y += 5
        y += 3
    return placed


A = ["The Kellerton Harbour Authority handled a", "record volume of cargo during the year, with", "container traffic up for the third year."]
B = ["Two new ship-to-shore cranes were added at", "the northern terminal, where the authority", "now operates fourteen cranes that were"]
B2 = ["commissioned in June by the harbour master", "and are controlled from the operations centre."]
C = ["The lighthouse at the mouth of the estuary", "has guided ships since 1854 and it was fully", "automated in 1987, when the last keeper, who"]
C2 = ["retired to the village, handed over the keys", "to the authority's northern workshop team."]
D = ["The fishing fleet landed 23,800 tonnes of fish", "at the market, most of it mackerel and herring", "caught in the waters north of the islands."]
E = ["Revenue rose to 186 million pounds, while the", "operating costs were held at 121 million and", "a dividend of 14 million pounds was paid."]


def text_of(lines: list[str]) -> str:
    return " ".join(lines)


def test_two_columns_are_read_column_by_column_without_running_headers_or_footers(tmp_path):
    """pdfminer put the right column's boxes among the left column's, and the running header and footer were
    paragraphs of every page: a paragraph running onto the next page took in the header ("... the last keeper, who
    Kellerton Harbour Authority Annual Report 2023 ...")."""
    pages = [column(20, 30, [A, B]) + column(110, 30, [B2, C]),
             column(20, 30, [C2, D]) + column(110, 30, [E]),
             column(20, 30, [D]) + column(110, 30, [A])]
    extracted = extract_pdf(lines_pdf(tmp_path / "report.pdf", pages, header=True))
    assert extracted.paragraphs == [text_of(A), text_of(B + B2), text_of(C + C2), text_of(D), text_of(E),
                                    text_of(D), text_of(A)]
    assert extracted.paragraph_meta[2] == {"page": 1, "page_end": 2}
    assert not any("Annual Report" in p or "Page" in p for p in extracted.paragraphs)


@pytest.mark.parametrize("header", [False, True], ids=["bare", "running-header"])
def test_a_paragraph_runs_on_from_the_foot_of_a_column_to_the_top_of_the_next(tmp_path, header):
    """A paragraph that went on at the top of the next column with a capital ("... cranes that were" | "Siemens in
    June, ...") was cut in two: on one page both had to hold, an open end and a lower-case start. The top of a
    column is judged as the top of a page is (also under a running header that heads the column); a paragraph that
    ends a sentence at a column's foot stays apart from the capital under it."""
    siemens = ["Siemens in June, and they are run from the", "operations centre on the quay."]
    pages = [column(20, 30, [A, B]) + column(110, 30, [siemens, C]), column(20, 30, [D, A]) + column(110, 30, [E]),
             column(20, 30, [D]) + column(110, 30, [E])]
    extracted = extract_pdf(lines_pdf(tmp_path / "columns.pdf", pages, header=header))
    assert extracted.paragraphs == [text_of(A), text_of(B + siemens), text_of(C + D), text_of(A), text_of(E),
                                    text_of(D), text_of(E)]


def test_a_header_on_fewer_pages_or_in_the_body_stays(tmp_path):
    """Only text repeated in the top or bottom margin of three pages (or of every page of two) is a running header
    or footer; the same words once, or in the body, are text."""
    pages = [[(20, 12, "Kellerton Harbour Authority"), *column(20, 30, [A])], column(20, 30, [D]),
             [(20, 150, "Kellerton Harbour Authority"), *column(20, 160, [E])]]
    extracted = extract_pdf(lines_pdf(tmp_path / "once.pdf", pages))
    assert extracted.paragraphs.count("Kellerton Harbour Authority") == 2


@needs_dejavu
def test_words_hyphenated_at_line_ends_are_whole_and_ligatures_spelled_out(tmp_path):
    lines = ["The authority's ﬁnancial infor-", "mation systems were re-", "placed by an ofﬁcial port commu-",
             "nity system from a well-", "known supplier; a well-known name.", "The ﬂeet has more information."]
    pdf = lines_pdf(tmp_path / "set.pdf", [[(20, 30 + 5 * i, line) for i, line in enumerate(lines)]], font=DEJAVU)
    assert extract_pdf(pdf).paragraphs == [
        "The authority's financial information systems were replaced by an official port community system from a "
        "well-known supplier; a well-known name. The fleet has more information."]  # was "infor-mation", "ﬁnancial"


def table_pdf(path: Path, tables: list[tuple[str, list[tuple[str, ...]], bool]], repeat_header: bool = True) -> Path:
    """A page of tables, each after a line of text: (the line, the rows, whether the first row is a header, set in
    bold as fpdf2 sets it); a table over pages repeats its header row at the top of each (``repeat_header``)."""
    pdf = fpdf.FPDF()
    pdf.add_page()
    pdf.set_font("helvetica", size=11)
    for line, rows, header in tables:
        pdf.multi_cell(0, 6, line)
        pdf.ln(4)
        with pdf.table(col_widths=(60, 30, 30)[:len(rows[0])], first_row_as_headings=header,
                       repeat_headings=int(repeat_header)) as table:
            for cells in rows:
                row = table.row()
                for cell in cells:
                    row.cell(cell)
        pdf.ln(4)
    pdf.output(str(path))
    return path


def test_a_table_is_read_row_by_row_and_its_numbers_are_kept(tmp_path):
    """A table's cells were read column by column, and a cell holding only a number was dropped as a page number.
    A table without a header row reads each row's cells, spaced."""
    pdf = table_pdf(tmp_path / "table.pdf", [("Opening hours of the port office.",
                                              [("Monday", "08:00", "18:00"), ("Saturday", "09:00", "12:00")], False)])
    assert extract_pdf(pdf).paragraphs == [
        "Opening hours of the port office.", "Monday 08:00 18:00", "Saturday 09:00 12:00"]


def test_a_table_s_cells_are_named_by_its_header_row_as_in_word_and_html(tmp_path):
    """A PDF table's rows read "Terminal Berths Cranes", "Northern container 4 14", "Ferry 0": the numbers had no
    names, and an empty cell made "0" the ferry's berths. Under a header row (bold, as typesetters set it) each row
    names its cells as Word's, HTML's and Markdown's rows do, an empty cell left out; the header row is no paragraph
    of its own."""
    pdf = table_pdf(tmp_path / "table.pdf", [
        ("The terminals of the port are listed below.",
         [("Terminal", "Berths", "Cranes"), ("Northern container", "4", "14"), ("Ferry", "", "0")], True),
        ("Opening hours of the port office.", [("Monday", "08:00", "18:00")], False)])
    assert extract_pdf(pdf).paragraphs == [
        "The terminals of the port are listed below.", "Terminal: Northern container; Berths: 4; Cranes: 14",
        "Terminal: Ferry; Cranes: 0", "Opening hours of the port office.", "Monday 08:00 18:00"]


def test_a_page_of_only_an_image_is_named_in_a_warning(tmp_path, caplog):
    from PIL import Image

    Image.new("RGB", (60, 40), "gray").save(tmp_path / "scan.png")
    pdf = fpdf.FPDF()
    for page in range(4):
        pdf.add_page()
        if page in (1, 3):
            pdf.image(str(tmp_path / "scan.png"), x=10, y=10, w=150)
        else:
            pdf.set_font("helvetica", size=12)
            pdf.multi_cell(0, 6, f"Text of page {page + 1}.")
    pdf.output(str(tmp_path / "mixed.pdf"))
    with caplog.at_level(logging.WARNING):
        report = from_files([tmp_path / "mixed.pdf"], tmp_path / "c.jsonl")
    assert report.documents == 1 and not report.skipped
    (warning,) = [r.getMessage() for r in caplog.records]
    assert warning.startswith(f"{tmp_path / 'mixed.pdf'}: pages 2, 4 of 4 hold only images") and "OCR" in warning


def stream(data: bytes, extra: bytes = b"") -> bytes:
    return b"<< %s /Length %d >>\nstream\n%s\nendstream" % (extra, len(data), data)


def form_page_pdf(path: Path, content: bytes, form: bytes) -> Path:
    """A one-page PDF of this content stream, which may draw a form XObject (/Fm1) of ``form``; both may set text in
    Helvetica (/F1)."""
    return pdf_of_objects(path, [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
        b"/Resources << /XObject << /Fm1 6 0 R >> /Font << /F1 5 0 R >> >> >>",
        stream(content),
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
        stream(form, b"/Type /XObject /Subtype /Form /BBox [0 0 612 792] /Resources << /Font << /F1 5 0 R >> >>"),
    ])


def test_a_page_whose_content_is_a_form_xobject_is_read(tmp_path):
    """Tools that impose or stamp pages wrap a page's content in a form XObject: its text was left out, and the PDF
    was skipped as having no text layer."""
    text = b"BT /F1 12 Tf 72 700 Td (The castle was built in 1250 by the count.) Tj ET"
    path = form_page_pdf(tmp_path / "form.pdf", b"q /Fm1 Do Q", text)
    assert extract_pdf(path).paragraphs == ["The castle was built in 1250 by the count."]


@pytest.mark.parametrize("in_form", [True, False])
def test_a_stamp_up_the_margin_of_a_short_page_does_not_turn_it(tmp_path, in_form):
    """A publisher's stamp up every page's margin ("Downloaded from ... by guest") has more glyphs than a page of a
    few short lines, or than a page whose content is a form XObject (whose glyphs were not counted): the page was
    read turned, its text read as a note after the stamp, or lost. The turned glyphs must also be in more lines
    than the upright ones, those of the page's forms counted: the page reads upright, the stamp as a note after it."""
    body = b"BT /F1 11 Tf 72 700 Td 14 TL (The harbour at Kellerton was built in 1852 by the county.) ' (Tides) ' ET"
    margin = (b"BT /F1 8 Tf 0 1 -1 0 30 200 Tm (Downloaded from https://journals.example.org by guest on 12 May 2024)"
              b" Tj ET")
    path = form_page_pdf(tmp_path / "stamped.pdf", (b"q /Fm1 Do Q" if in_form else body) + b" " + margin,
                         body if in_form else b"")
    assert extract_pdf(path).paragraphs == ["The harbour at Kellerton was built in 1852 by the county. Tides",
                                            "Downloaded from https://journals.example.org by guest on 12 May 2024"]


def glyph_pdf(path: Path, pages: list[bytes], unicode_map: bool) -> Path:
    """A PDF in a two-byte font whose codes are Unicode code points, with or without the map (ToUnicode) that says
    so: without it pdfminer knows only glyph numbers. Each page one line of text, its codes in the order given."""
    cmap = (b"/CIDInit /ProcSet findresource begin 12 dict begin begincmap /CIDSystemInfo << /Registry (Adobe) "
            b"/Ordering (UCS) /Supplement 0 >> def /CMapName /Adobe-Identity-UCS def /CMapType 2 def "
            b"1 begincodespacerange <0000> <FFFF> endcodespacerange 1 beginbfrange <0000> <FFFF> <0000> endbfrange "
            b"endcmap CMapName currentdict /CMap defineresource pop end end")
    n = len(pages)
    objects = [b"<< /Type /Catalog /Pages 2 0 R >>",
               b"<< /Type /Pages /Kids [%s] /Count %d >>" % (b" ".join(b"%d 0 R" % (6 + 2 * i) for i in range(n)), n),
               b"<< /Type /Font /Subtype /Type0 /BaseFont /Body /Encoding /Identity-H /DescendantFonts [4 0 R]%s >>"
               % (b" /ToUnicode 5 0 R" if unicode_map else b""),
               b"<< /Type /Font /Subtype /CIDFontType2 /BaseFont /Body /CIDSystemInfo << /Registry (Adobe) "
               b"/Ordering (Identity) /Supplement 0 >> /DW 500 >>",
               stream(cmap)]
    for line in pages:
        codes = "".join(f"{ord(c):04x}" for c in line.decode()).encode()
        objects += [b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents %d 0 R "
                    b"/Resources << /Font << /F1 3 0 R >> >> >>" % (len(objects) + 2),
                    stream(b"BT /F1 12 Tf 72 700 Td <%s> Tj ET" % codes)]
    return pdf_of_objects(path, objects)


def test_text_in_fonts_without_a_unicode_map_is_not_indexed_as_glyph_numbers(tmp_path, caplog):
    """pdfminer writes such text as "(cid:87)(cid:107)...": it was indexed as that."""
    path = glyph_pdf(tmp_path / "glyphs.pdf", [b"The castle was built in 1250."], unicode_map=False)
    with pytest.raises(Unreadable, match=r"its text cannot be read: page 1 of 1 use fonts without a Unicode map"):
        extract_pdf(path)
    readable = glyph_pdf(tmp_path / "mapped.pdf", [b"The castle was built in 1250."], unicode_map=True)
    assert extract_pdf(readable).paragraphs == ["The castle was built in 1250."]


@needs_dejavu
def test_a_right_to_left_script_reads_in_its_order(tmp_path):
    """A PDF holds a Hebrew (or Arabic) line as it is shown, left to right: pdfminer gave it backwards, and a
    sentence's full stop came first (so the paragraph ran on into the next page's)."""
    shown = [".1854 תנשב הנבנ רולדגמה", ".1987 תנשב היצמוטוא רבע אוה"]  # as drawn, left to right
    pdf = lines_pdf(tmp_path / "he.pdf", [[(20, 30, line)] for line in shown], font=DEJAVU)
    extracted = extract_pdf(pdf)
    assert extracted.paragraphs == ["המגדלור נבנה בשנת 1854.", "הוא עבר אוטומציה בשנת 1987."]
    assert extracted.paragraph_meta == [{"page": 1}, {"page": 2}]


def test_the_title_is_the_first_page_s_large_type_when_the_property_is_a_placeholder(tmp_path):
    def paper(name: str, title: str | None, heading_size: float) -> Path:
        pdf = fpdf.FPDF()
        if title:
            pdf.set_title(title)
        pdf.add_page()
        pdf.set_font("helvetica", "B", size=heading_size)
        pdf.multi_cell(0, heading_size / 2, "Summer speed-up of the Storbre glacier", new_x="LMARGIN", new_y="NEXT")
        pdf.set_font("helvetica", size=10)
        pdf.multi_cell(0, 5, "Astrid Nilsen and Jonas Berg", new_x="LMARGIN", new_y="NEXT")
        pdf.ln(5)
        pdf.multi_cell(0, 5, "We report two years of velocity measurements on the glacier. " * 4)
        pdf.output(str(tmp_path / name))
        return tmp_path / name

    assert extract_pdf(paper("a.pdf", "Microsoft Word - draft3.docx", 18)).title == "Summer speed-up of the Storbre glacier"
    assert extract_pdf(paper("b.pdf", None, 18)).title == "Summer speed-up of the Storbre glacier"
    assert extract_pdf(paper("c.pdf", "Glacier report", 18)).title == "Glacier report"
    assert extract_pdf(paper("d.pdf", "untitled", 11)).title is None  # no title stands out: the file name is used


def vessels_pdf(path: Path, repeat_header: bool) -> Path:
    """A line of text, then a table over three pages: a bold header row (on every page, or on the first only) and
    71 rows "Vessel i", "1000 + i"."""
    rows = [("Vessel", "Tonnage"), *((f"Vessel {i}", str(1000 + i)) for i in range(71))]
    table_pdf(path, [("The vessels registered at the port are listed below.", rows, True)], repeat_header)
    assert extract_pdf(path).meta["pages"] == 3
    return path


def test_the_rows_at_the_tops_of_a_long_table_s_pages_are_kept(tmp_path):
    """The first rows on each page ("Vessel 32 1032", "Vessel 65 1065": the same words, other numbers, at the top
    of three pages) were left out as a running header: 63 rows of 71 were kept."""
    for repeat_header in (True, False):
        text = " ".join(extract_pdf(vessels_pdf(tmp_path / "vessels.pdf", repeat_header)).paragraphs)
        assert sorted(map(int, re.findall(r"Vessel (\d+)", text))) == list(range(71))


def test_a_table_s_row_is_no_paragraph_that_runs_onto_the_next_page(tmp_path):
    """A row has no full stop, so a page's last row took in the next page's first row as one paragraph ("Vessel:
    Vessel 31; Tonnage: 1031 Vessel 32 1032"). A table whose header row is on its first page only names the rows
    of the pages after it too (they read "Vessel 32 1032")."""
    for repeat_header in (True, False):
        extracted = extract_pdf(vessels_pdf(tmp_path / "vessels.pdf", repeat_header))
        assert extracted.paragraphs == ["The vessels registered at the port are listed below.",
                                        *(f"Vessel: Vessel {i}; Tonnage: {1000 + i}" for i in range(71))]
        assert not any("page_end" in meta for meta in extracted.paragraph_meta)


def journal(n: int) -> list[tuple[float, float, str]]:
    """A journal's running heads: verso and recto, its own page numbers from 231."""
    return [(20, 12, f"{n + 230}   Journal of Glaciology") if n % 2 == 0 else (100, 12, f"Nilsen and Berg: Storbre {n + 230}")]


def report(n: int) -> list[tuple[float, float, str]]:
    """A report's chapter heads, two pages each, and a confidential footer of an excerpt from its page 12."""
    return [(20, 12, f"Chapter {(n + 1) // 2} - Harbours"), (70, 287, f"Company confidential - {n + 11} of 40")]


@pytest.mark.parametrize("margins", [journal, report])
def test_running_heads_of_journals_and_reports_are_left_out(tmp_path, margins):
    bodies = [A, D, E, D, A, E]  # each a whole paragraph, on a page of its own
    pages = [[*margins(n), *column(20, 30, [body])] for n, body in enumerate(bodies, start=1)]
    extracted = extract_pdf(lines_pdf(tmp_path / "paper.pdf", pages))
    assert extracted.paragraphs == [text_of(body) for body in bodies]


def book(n: int) -> list[tuple[float, float, str]]:
    """A short book's heads: the title on left pages and the chapter on right ones, roman page numbers below."""
    return [(20, 12, "Tides of the North Sea") if n % 2 == 0 else (120, 12, "Chapter One: Harbours"),
            (100, 287, ["i", "ii", "iii", "iv", "v"][n - 1])]


def chapters(n: int) -> list[tuple[float, float, str]]:
    """Chapter heads that change with the chapter: two pages, one page (chapter 2), two pages."""
    return [(20, 12, ["Chapter 1 - Harbours", "Chapter 1 - Harbours", "Chapter 2 - Lighthouses", "Chapter 3 - Fleets",
                      "Chapter 3 - Fleets"][n - 1])]


@pytest.mark.parametrize(("margins", "count"), [(book, 4), (book, 5), (chapters, 5)])
def test_heads_that_take_turns_and_roman_page_numbers_are_left_out(tmp_path, margins, count):
    """Under three pages a head had to be on every page: a short book's left and right heads (each on every other
    page) stayed, as did its roman page numbers, glued to the next page's first paragraph ("i The fishing
    fleet ..."), and a one-page chapter's head, whose words are on no other page."""
    bodies = [A, D, E, D, A][:count]
    pages = [[*margins(n), *column(20, 30, [body])] for n, body in enumerate(bodies, start=1)]
    assert extract_pdf(lines_pdf(tmp_path / "book.pdf", pages)).paragraphs == [text_of(body) for body in bodies]


def test_first_lines_at_the_top_of_short_files_stay(tmp_path):
    """A page's first line where running heads would be is text when no two heads take turns there: headings that
    differ (one on two pages), a roman-looking word in the body; and on a page without the book's head, a first line
    below where the head is."""
    headings = ["Harbours", "Harbours", "Lighthouses", "Fleets"]
    pages = [[(20, 12, heading), *column(20, 30, [body])] for heading, body in zip(headings, [A, D, E, D], strict=True)]
    extracted = extract_pdf(lines_pdf(tmp_path / "headed.pdf", pages))
    assert extracted.paragraphs == [p for h, b in zip(headings, [A, D, E, D], strict=True) for p in (h, text_of(b))]
    pages = [[*book(n), *column(20, 30, [body])] for n, body in enumerate([A, D, E, D, A], start=1)]
    pages[2] = [(20, 20, "Chapter Two: Lighthouses"), *column(20, 30, [["Vi Nguyen kept the light for", "forty years."]])]
    extracted = extract_pdf(lines_pdf(tmp_path / "opener.pdf", pages))
    assert extracted.paragraphs == [text_of(A), text_of(D), "Chapter Two: Lighthouses",
                                    "Vi Nguyen kept the light for forty years.", text_of(D), text_of(A)]


def test_section_headings_that_repeat_in_a_heads_place_stay(tmp_path):
    """Section headings in body type, standing well clear of the text at the tops of their pages, were left out as
    running heads: one name on both pages of a two-page report under its own running header (a head of two lines,
    to the rule), and two names, each on two pages that no head would fall on (pages 1 and 3, 2 and 5), as heads that
    take turns. A running head is the page's outermost line, or sits on the one that is; and a head that takes turns
    runs over its pages or every other one. The report's header and footer are still left out."""
    pages = [[(20, 25, "Summary"), *column(20, 40, [body])] for body in (A, D)]
    assert extract_pdf(lines_pdf(tmp_path / "two.pdf", pages, header=True)).paragraphs == [
        p for body in (A, D) for p in ("Summary", text_of(body))]
    headings, bodies = ["Summary", "Harbours", "Summary", "Outlook", "Harbours"], [A, D, E, D, A]
    pages = [[(20, 20, heading), *column(20, 34, [body])] for heading, body in zip(headings, bodies, strict=True)]
    assert extract_pdf(lines_pdf(tmp_path / "five.pdf", pages)).paragraphs == [
        p for heading, body in zip(headings, bodies, strict=True) for p in (heading, text_of(body))]
    # a footer well above the page number, on both pages of two, is still left out with it
    pages = [[*column(20, 30, [body]), (20, 265, "Kellerton Harbour Authority - confidential"), (100, 287, str(n))]
             for n, body in enumerate((A, D), start=1)]
    assert extract_pdf(lines_pdf(tmp_path / "footer.pdf", pages)).paragraphs == [text_of(A), text_of(D)]


def test_a_paragraph_runs_on_past_the_footnotes_at_the_foot_of_its_page_or_column(tmp_path):
    """A paragraph that runs onto the next page went on after the page's footnote, glued to it ("[1] The cranes were
    built in Shanghai. commissioned in June ..."), and one that runs into the next column was cut in two by the
    footnote at the foot of the first. A footnote (smaller type, nothing in the body's type below it in its column)
    follows the paragraph that runs past it."""
    note = "[1] The cranes were built in Shanghai and shipped in 2022."
    cited = [*B[:-1], B[-1] + " [1]"]
    pdf = fpdf.FPDF(unit="mm", format="A4")
    for lines in ([*column(20, 30, [A, cited]), (20, 280, note, 7)], column(20, 30, [B2, D]),
                  [*column(20, 30, [A, cited]), (20, 200, note, 7), *column(110, 30, [B2, D])]):
        pdf.add_page()
        for x, y, text, *size in lines:
            pdf.set_font("helvetica", size=size[0] if size else 10)
            pdf.text(x, y, text)
    pdf.output(str(tmp_path / "notes.pdf"))
    extracted = extract_pdf(tmp_path / "notes.pdf")
    assert extracted.paragraphs == [text_of(A), text_of(cited + B2), note, text_of(D)] * 2
    assert [meta.get("page_end", meta["page"]) for meta in extracted.paragraph_meta] == [1, 2, 1, 2, 3, 3, 3, 3]
    # references in small type at the foot of a page, the last going on at the top of the next: read in order, each
    # one whole
    references = [f"[{k}] Ada Lind, Tides of the harbour, Journal of Ports {k} (2020)." for k in (1, 2)]
    pdf = fpdf.FPDF(unit="mm", format="A4")
    first, rest = references[1].split(" Journal")
    for lines in ([*column(20, 30, [A]), (20, 200, references[0], 7), (20, 203.5, first, 7)],
                  [(20, 30, f"Journal{rest}", 7)]):
        pdf.add_page()
        for x, y, text, *size in lines:
            pdf.set_font("helvetica", size=size[0] if size else 10)
            pdf.text(x, y, text)
    pdf.output(str(tmp_path / "references.pdf"))
    assert extract_pdf(tmp_path / "references.pdf").paragraphs == [text_of(A), *references]


def test_slide_titles_that_repeat_on_some_slides_stay(tmp_path):
    """Slides saved as PDF, each title in large type at the top, two of them on two slides each: they were taken for
    heads that take turns, and every slide's title was left out, those on one slide too. Running heads are set no
    larger than the text; these are headings."""
    titles = ["Results", "Results", "Method", "Method", "Outlook", "Thanks"]
    bodies = [A, D, E, D, A, E]
    pdf = fpdf.FPDF(unit="mm", format="A4")
    for title, body in zip(titles, bodies, strict=True):
        pdf.add_page()
        pdf.set_font("helvetica", size=20)
        pdf.text(20, 20, title)
        pdf.set_font("helvetica", size=10)
        for k, line in enumerate(body):
            pdf.text(20, 60 + 5 * k, line)
    pdf.output(str(tmp_path / "slides.pdf"))
    assert extract_pdf(tmp_path / "slides.pdf").paragraphs == [
        p for title, body in zip(titles, bodies, strict=True) for p in (title, text_of(body))]


def test_header_rows_of_tables_that_run_onto_a_second_page_stay(tmp_path):
    """Two tables, each running onto a second page with its header row repeated at the top: the header rows were
    taken for heads that take turns (two lines, each on two pages, in one place), and left out, with the headings at
    the tops of the other pages. A head stands apart from the text; a header row sits on the rows under it."""

    def table(head: tuple[str, ...], rows: list[tuple[str, ...]]) -> list[tuple[float, float, str]]:
        return [(x, 20 + 7 * k, cell) for k, row in enumerate([head, *rows]) for x, cell in zip((20, 80, 140), row,
                                                                                               strict=True)]

    vessels, ports = ("Vessel", "Tonnage", "Year"), ("Port", "Arrivals", "Departures")
    pages = [[(20, 20, "Fleet"), *column(20, 30, [A])],
             table(vessels, [("Ada", "500", "1990"), ("Bea", "700", "1995")]),
             table(vessels, [("Cy", "900", "2001"), ("Di", "650", "2004")]),
             [(20, 20, "Ports"), *column(20, 30, [D])],
             table(ports, [("Dover", "12", "14"), ("Hull", "8", "9")]),
             table(ports, [("Leith", "5", "6"), ("Wick", "3", "2")])]
    assert extract_pdf(lines_pdf(tmp_path / "tables.pdf", pages)).paragraphs == [
        "Fleet", text_of(A), "Vessel Tonnage Year", "Ada 500 1990", "Bea 700 1995", "Vessel Tonnage Year",
        "Cy 900 2001", "Di 650 2004", "Ports", text_of(D), "Port Arrivals Departures", "Dover 12 14", "Hull 8 9",
        "Port Arrivals Departures", "Leith 5 6", "Wick 3 2"]


def test_a_parts_roman_heading_at_the_top_of_a_page_stays(tmp_path):
    """A line of only a roman numeral near the top or foot of a page was left out as a page number, in any case: the
    part headings of a poem or an essay ("I", "II"), and a drop cap, when they came first on a page. A page number in
    lower case is left out, and one in upper case that runs through the pages is a running head."""
    parts = [["The tide came in across the bar,", "and every boat was home."],
             ["The lamps were lit along the quay,", "the gulls had gone to sleep."]]
    pages = [[(100, 20, "I"), *column(20, 30, [parts[0]]), (100, 120, "II"), *column(20, 130, [parts[1]])]]
    assert extract_pdf(lines_pdf(tmp_path / "poem.pdf", pages)).paragraphs == [
        "I", text_of(parts[0]), "II", text_of(parts[1])]
    for numbers in (["iv"], ["I", "II", "III", "IV", "V"]):
        bodies = [A, D, E, D, A][: len(numbers)]
        pages = [[*column(20, 30, [body]), (100, 287, number)] for body, number in zip(bodies, numbers, strict=True)]
        extracted = extract_pdf(lines_pdf(tmp_path / "numbered.pdf", pages))
        assert extracted.paragraphs == [text_of(body) for body in bodies], numbers


def test_log_lines_at_the_tops_of_pages_are_kept(tmp_path):
    """Lines that differ only in their numbers at the top of each page are text, not a running header."""
    pages = [[(20, 15 + 5 * i, f"2024-05-0{n} 12:{10 * n + i:02d}:03 crane {i + n} stopped") for i in range(3)]
             for n in range(1, 5)]
    words = " ".join(extract_pdf(lines_pdf(tmp_path / "log.pdf", pages)).paragraphs).split()
    assert words == [w for page in pages for _, _, line in page for w in line.split()]


@pytest.mark.parametrize("style,size", [("B", 10), ("", 14)])
def test_a_heading_at_the_foot_of_a_page_is_apart_from_the_text_around_it(tmp_path, style, size):
    """A heading set apart (in bold, or in larger type) at the foot of a page ends the paragraph before it, though
    that one ends no sentence, and goes with the next page's text a paragraph break apart (no answer runs from it
    into that text), not as one sentence ("Section 9 iPods with ..."). A heading on the page's own text stays apart
    from its paragraph too."""
    pdf = fpdf.FPDF(unit="mm", format="A4")
    body = ["iPods with colour screens sold well across", "the product line in many markets that year."]
    for lines in ([*column(20, 30, [A[:2]]), (20, 270, "Section 9", style, size)],
                  [*column(20, 30, [body]), (20, 60, "Section 10", style, size), *column(20, 70, [["iPods sold."]])]):
        pdf.add_page()
        for x, y, text, *font in lines:
            pdf.set_font("helvetica", *font or ("", 10))
            pdf.text(x, y, text)
    pdf.output(str(tmp_path / "heading.pdf"))
    extracted = extract_pdf(tmp_path / "heading.pdf")
    assert extracted.paragraphs == [text_of(A[:2]), f"Section 9\n\n{text_of(body)}", "Section 10", "iPods sold."]
    assert extracted.paragraph_meta == [{"page": 1}, {"page": 1, "page_end": 2}, {"page": 2}, {"page": 2}]


def flowed_pdf(path: Path, parts: list[tuple[str, float, str]], header: str | None = None, pages: int = 1) -> Path:
    """A PDF as a word processor exports one: ``parts`` (style, size, text) set one under the other with the usual
    spacing (a heading right above its paragraph, ``**bold**`` words inline), from page ``pages`` on after
    ``pages - 1`` pages of filler; ``header`` adds a running head and a footer "Page n" to every page."""
    class Report(fpdf.FPDF):
        def header(self) -> None:
            if header:
                self.set_font("helvetica", "I", 8)
                self.cell(0, 6, header, align="C", new_x="LMARGIN", new_y="NEXT")
                self.ln(4)

        def footer(self) -> None:
            if header:
                self.set_y(-15)
                self.set_font("helvetica", "", 8)
                self.cell(0, 10, f"Page {self.page_no()}", align="C")

    pdf = Report()
    for _ in range(pages):
        pdf.add_page()
    for style, size, text in parts:
        pdf.set_font("helvetica", style, size)
        pdf.multi_cell(0, size * 0.5, text, new_x="LMARGIN", new_y="NEXT", markdown=True)
        pdf.ln(0 if style == "B" or size > 11 else 3)  # a heading right above its paragraph
    pdf.output(str(path))
    return path


BODY = ("Buoy moorings were laid along the ferry channel in spring, and the pilots report that vessels now hold "
        "their berths in every weather the harbour sees.")


@pytest.mark.parametrize("heading", [
    ("B", 16, "1 Section on cargo mooring"),  # larger and bold, numbered
    ("", 16, "Cargo mooring"),  # larger only
    ("B", 11, "2.3 Moorings"),  # bold at the body's size
    ("B", 14, "A heading long enough to run over two lines of the page, as the titles of report sections often "
              "do in annual reports"),
])
def test_a_heading_set_right_above_its_paragraph_is_a_paragraph_of_its_own(tmp_path, heading):
    """Layout analysis puts a heading in its paragraph's box when the space under it is small (word processors'
    exports): the heading's lines are cut from the box and read as a paragraph of their own, as a heading in a box
    of its own is."""
    path = flowed_pdf(tmp_path / "report.pdf", [heading, ("", 11, BODY), ("", 11, f"Dredging went on. {BODY}")])
    assert extract_pdf(path).paragraphs == [heading[2], BODY, f"Dredging went on. {BODY}"]


def test_a_heading_cut_from_its_box_stays_above_its_paragraph_beside_a_column_level_with_it(tmp_path):
    """An index's letter headings, each in one box with its first entry, in two columns read row by row: a heading
    cut from its box is read right before its entry, not before the box of the next column that is level with it; the
    entries' leaders are dropped."""
    pdf = fpdf.FPDF(unit="mm", format="A4")
    pdf.add_page()
    for x, letter, entry in ((20, "H", "Header file harbour.h . . . . . . 4"), (110, "T", "tides . . . . . . . . . . . . . . 5")):
        pdf.set_font("helvetica", "B", 12)
        pdf.text(x, 30, letter)
        pdf.set_font("helvetica", "", 10)
        pdf.text(x, 35, entry)
    pdf.output(str(tmp_path / "index.pdf"))
    assert extract_pdf(tmp_path / "index.pdf").paragraphs == ["H", "Header file harbour.h 4", "T tides 5"]


def test_a_paragraph_opening_with_bold_words_stays_whole(tmp_path):
    """Bold words at the start of a paragraph ("Note:", a run-in heading, a first line in bold that runs on in lower
    case) are no heading: the paragraph is one."""
    run_in = ("The moorings laid along the ferry channel in spring by the harbour's own crews and divers and "
              "checked by its pilots")  # over a line and a half: its first line is bold throughout
    path = flowed_pdf(tmp_path / "note.pdf", [("B", 14, "Notes"), ("", 11, f"**Note:** {BODY}"),
                                               ("", 11, f"**{run_in}** {BODY.lower()}")])
    assert extract_pdf(path).paragraphs == ["Notes", f"Note: {BODY}", f"{run_in} {BODY.lower()}"]


def test_a_last_page_of_only_its_running_head_and_number_reads_as_nothing(tmp_path):
    """A page left empty but for its running head and footer ("Page 4") has no paragraph: its two lines, the page's
    only ones, are far apart and no paragraph."""
    path = flowed_pdf(tmp_path / "annual.pdf", [("", 11, BODY)], header="Kellerton Harbour Annual Report", pages=3)
    extracted = extract_pdf(path)
    assert extracted.paragraphs == [BODY]
    assert extracted.meta["pages"] == 3


def test_a_line_that_wrapped_early_before_a_long_word_goes_on_with_its_paragraph(tmp_path):
    """At double spacing every line is a box of its own, and a line that spans under half its column ended its
    paragraph, even where the next line's first word (a long identifier) would not have fit after it: the text
    wrapped there, and the sentence was cut in two. A short line whose next word would have fit still ends it."""
    doi = "10.5281/zenodo.4412-northern-marshes-survey-by-site-1990-2020"
    lines = ["The survey data of the northern marshes, counted each spring by the", "volunteers, are filed as", doi,
             "and may be reused freely by anyone.", "Contents", "Results of the survey"]
    path = lines_pdf(tmp_path / "wrapped.pdf", [[(20, 20 + 9 * k, line) for k, line in enumerate(lines)]])
    assert extract_pdf(path).paragraphs == [text_of(lines[:4]), "Contents", "Results of the survey"]


@pytest.mark.parametrize(("next_line", "indent", "joined"), [
    ("Afterwards the cottages were sold to the harbour authority.", 0, True),
    ("Afterwards the cottages were sold to the harbour authority.", 6, False),  # a new paragraph, indented
    ("A sale of the cottages to the harbour authority followed.", 0, False),  # "A" would have fit
])
def test_a_sentence_that_ends_where_its_line_wrapped_does_not_end_the_paragraph(tmp_path, next_line, indent, joined):
    """At double spacing a line that ended a sentence ended its paragraph, full as it was: 16 of 80 SQuAD
    paragraphs set ragged at 1.5 spacing were cut in two or more. The next line goes on with the paragraph when its
    first word would not have fit on the line, unless it is indented (a new paragraph's first line)."""
    lines = ["The lighthouse at the mouth of the estuary has guided ships since 1854.",
             "Its keepers lived in the cottages below the light until the lamp was",
             "automated in 1987, when the last of the keepers retired to the village.", next_line]
    placed = [(20 + indent * (k == 3), 20 + 9 * k, line) for k, line in enumerate(lines)]
    path = lines_pdf(tmp_path / "flowed.pdf", [placed])
    assert extract_pdf(path).paragraphs == ([text_of(lines)] if joined else [text_of(lines[:3]), next_line])


def deck_pdf(path: Path, slides: list[list[str]], gap: float, titled: bool = True) -> Path:
    """Slides exported as PDF (16:9, in mm): a title in 36 pt (unless not ``titled``), then each line in 24 pt,
    ``gap`` mm apart."""
    pdf = fpdf.FPDF(orientation="L", unit="mm", format=(190.5, 338.7))
    pdf.add_font("body", fname=str(DEJAVU))
    for number, bullets in enumerate(slides, start=1):
        pdf.add_page()
        if titled:
            pdf.set_font("body", size=36)
            pdf.text(25, 30, f"Harbour results {number}")
        pdf.set_font("body", size=24)
        for k, line in enumerate(bullets):
            pdf.text(30, 60 + gap * k, line)
    pdf.output(str(path))
    return path


BULLETS = ["Cargo volume rose by twelve percent", "Two new cranes at the north quay",
           "Ferry berths were rebuilt in May", "The lighthouse was fully automated"]


@needs_dejavu
@pytest.mark.parametrize("gap", [12, 20], ids=["one-box", "boxes"])
@pytest.mark.parametrize("marker", ["\u2022 ", "- ", "{n}. ", "({n}) "])
def test_each_bullet_of_a_slide_deck_is_a_paragraph_of_its_own(tmp_path, marker, gap):
    """Slides saved as PDF: bullets of similar length, far apart, each reached its column's right edge, and all of
    a slide's bullets read as one paragraph ("• Cargo ... percent • Two new cranes ..."), in one text box or in a
    box each. A line that starts with a bullet, or with a dash or number that other lines of the page start with,
    opens a paragraph, as each bullet is one in PowerPoint's and Word's files."""
    items = [marker.format(n=n) + line for n, line in enumerate(BULLETS, start=1)]
    path = deck_pdf(tmp_path / "deck.pdf", [items, items], gap)
    assert extract_pdf(path).paragraphs == ["Harbour results 1", *items, "Harbour results 2", *items]


@needs_dejavu
def test_a_bullet_s_wrapped_lines_stay_with_it_and_a_dash_or_number_in_prose_opens_nothing(tmp_path):
    """The lines of a bullet that wraps go on with it, and an item at the top of a slide without a title is not
    taken for the continuation of the last one of the slide before. Lines of prose that start with a dash (alone on
    its page) or with numbers that count nothing (a formula's subscripts on lines of their own, "(UF" "6) ...")
    start no item."""
    wrapped = ["\u2022 Cargo volume rose by twelve percent, the most", "  since the new quay opened in 1996"]
    prose = ["The harbour authority, which runs the ferries", "\u2013 and the lighthouse \u2013 stores the (UF",
             "6) gas and the (UO", "2) powder apart."]
    path = deck_pdf(tmp_path / "deck.pdf", [[*wrapped, "\u2022 Two new cranes"], ["\u2022 Ferry berths rebuilt."],
                                            prose], 11, titled=False)
    assert extract_pdf(path).paragraphs == [" ".join(" ".join(wrapped).split()), "\u2022 Two new cranes",
                                            "\u2022 Ferry berths rebuilt.", text_of(prose)]


def partly_mapped_pdf(path: Path, lines: list[str], unmapped: str, shift: int = 0) -> Path:
    """A page of lines 14 pt apart in a two-byte font whose map to Unicode (ToUnicode) leaves out one character, as
    fonts that do not map their "fi" ligature do: pdfminer writes that glyph as "(cid:64257)". The font numbers each
    glyph by its character's code point, or (``shift``) that many below it."""
    code = ord(unmapped) - shift
    cmap = (b"/CIDInit /ProcSet findresource begin 12 dict begin begincmap /CIDSystemInfo << /Registry (Adobe) "
            b"/Ordering (UCS) /Supplement 0 >> def /CMapName /Adobe-Identity-UCS def /CMapType 2 def "
            b"1 begincodespacerange <0000> <FFFF> endcodespacerange 2 beginbfrange <0000> <%04X> <%04X> "
            b"<%04X> <%04X> <%04X> endbfrange endcmap CMapName currentdict /CMap defineresource pop end end"
            % (code - 1, shift, code + 1, 0xFFFF - shift, code + 1 + shift))
    shown = b" ".join(b"<%s> Tj T*" % "".join(f"{ord(c) - shift:04x}" for c in line).encode() for line in lines)
    return pdf_of_objects(path, [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [6 0 R] /Count 1 >>",
        b"<< /Type /Font /Subtype /Type0 /BaseFont /Body /Encoding /Identity-H /DescendantFonts [4 0 R] "
        b"/ToUnicode 5 0 R >>",
        b"<< /Type /Font /Subtype /CIDFontType2 /BaseFont /Body /CIDSystemInfo << /Registry (Adobe) "
        b"/Ordering (Identity) /Supplement 0 >> /DW 500 >>",
        stream(cmap),
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 7 0 R "
        b"/Resources << /Font << /F1 3 0 R >> >> >>",
        stream(b"BT /F1 12 Tf 14 TL 72 700 Td %s ET" % shown),
    ])


def test_a_line_that_starts_with_an_unmapped_ligature_opens_no_list_item(tmp_path):
    """A glyph without a Unicode map that opens a line was taken for a bullet even when joined to the word after it
    ("(cid:64257)rst", a "fi" ligature): each line that started with the ligature began a paragraph. One set apart
    from its line's text (a bullet in a font without the map: Word's, a private-use character) still opens an item."""
    prose = ["The castle above the town was built", "\ufb01rst in 1250 by the count, and its",
             "walls were raised in 1480 when the", "\ufb01rst war came to the valley."]
    path = partly_mapped_pdf(tmp_path / "ligature.pdf", prose, "\ufb01", shift=1)
    assert extract_pdf(path).paragraphs == [text_of(prose).replace("\ufb01", "")]
    bullets = partly_mapped_pdf(tmp_path / "bullets.pdf", [f"\uf0b7 {line}" for line in BULLETS], "\uf0b7")
    assert extract_pdf(bullets).paragraphs == BULLETS


@pytest.mark.parametrize("unmapped", ["\ufb01", "\ufb02", "\ufb03", "\u00e9", "\u0153"])
def test_a_glyph_left_out_of_a_map_that_numbers_glyphs_by_code_point_is_read(tmp_path, unmapped):
    """A font whose map to Unicode leaves out its "fi" ligature: pdfminer wrote the glyph as "(cid:64257)", which
    was dropped, and "first" read "rst". Where the map gives every other glyph its own number as code point, the
    glyph's number is its character (a ligature spelled out); in a font that numbers its glyphs otherwise the
    number says nothing and the glyph is still left out, as is a private-use or control code point."""
    prose = ["The castle above the town was built", f"{unmapped}rst in 1250 by the count, and its",
             "walls were raised in 1480 when the", f"{unmapped}rst war came to the valley."]
    path = partly_mapped_pdf(tmp_path / "ligature.pdf", prose, unmapped)
    assert extract_pdf(path).paragraphs == [text_of(prose).translate(pdf_layout.LIGATURES)]
    shifted = partly_mapped_pdf(tmp_path / "shifted.pdf", prose, unmapped, shift=1)
    assert extract_pdf(shifted).paragraphs == [text_of(prose).replace(unmapped, "")]


@pytest.mark.parametrize("code", [0xE000, 0x0007, 0x0378, 0x110000])
def test_only_a_shown_character_is_read_from_a_glyph_s_number(code):
    """A private-use, control or unassigned code point, or none, is no character a glyph's number gives."""
    assert glyph_character(code) is None and glyph_character(0xFB01) == "\ufb01"


@needs_dejavu
@pytest.mark.parametrize("pitch", [5, 8], ids=["single", "double"])
@pytest.mark.parametrize("dash", ["\u2013", "-"])
def test_dashes_set_in_a_sentence_at_the_starts_of_lines_open_no_list_items(tmp_path, dash, pitch):
    """Two lines of a paragraph that started with a spaced dash (" – and the lighthouse – ", the text wrapped
    before it) were taken for a dashed list's items, and the paragraph was cut at each, its lines in one text box
    (single spacing) or each in a box of its own (double spacing). A dash under a line that wrapped mid-sentence goes
    on with the sentence; dashes under an item or a short line still open items."""
    prose = ["The harbour authority, which also runs the ferries to the islands",
             f"{dash} and the lighthouse at the mouth of the estuary {dash} stores the fuel",
             "for its boats in two tanks on the northern quay, where the cranes",
             f"{dash} fourteen of them, all built in Glasgow {dash} load the container ships",
             "that call at the port every week of the year from the continent."]
    items = ["The new quay was opened with:", f"{dash} two cranes for the container ships that call there",
             f"{dash} a berth for the ferries", f"{dash} a store for the fishing fleet"]
    path = lines_pdf(tmp_path / "dashes.pdf", [[(20, 20 + pitch * k, line) for k, line in enumerate(prose)],
                                               [(20, 20 + pitch * k, line) for k, line in enumerate(items)]],
                     font=DEJAVU)
    assert extract_pdf(path).paragraphs == [text_of(prose), *items]


def test_each_numbered_reference_is_a_paragraph_of_its_own_and_a_citation_in_prose_opens_nothing(tmp_path):
    """At 1.5 or double spacing (each line a text box of its own) a reference whose last line was full ran on into
    the next ("... 1-24. [2] Moss, B. ..."): nothing tells a paragraph's end from a wrapped line there but the next
    line's "[2]". A line that starts with a reference's number, counting with another line of its page, opens a
    paragraph; one under a line that wrapped mid-sentence is a citation in that sentence."""
    references = [["[1] Lind, A. Tides of the harbour and the northern quays, with a survey of",
                   "the estuary's sand banks. Journal of Ports and Harbours 12 (2020), 1-24."],
                  ["[2] Moss, B. The lighthouse keepers of Kellerton. Coastal History 3 (2019)."],
                  ["[3] Reid, C. Cargo handled at small ports. Maritime Economics 7 (2021), 5-9."]]
    prose = ["The tides of the harbour were first measured by the authority in 1880, as",
             "[12] describes, and again after the northern quay was built, which the survey",
             "[13] of the estuary records in detail for each of the sand banks that moved."]
    every = [line for reference in references for line in reference]
    path = lines_pdf(tmp_path / "references.pdf", [[(20, 20 + 8 * k, line) for k, line in enumerate(every)],
                                                   [(20, 20 + 8 * k, line) for k, line in enumerate(prose)]])
    assert extract_pdf(path).paragraphs == [*map(text_of, references), text_of(prose)]


LIGHTHOUSE = ["The lighthouse at the mouth of the estuary has guided ships since 1854.",
              "Its keepers lived in the cottages below the light until the lamp was",
              "automated in 1987, when the last of the keepers retired to the village."]


@pytest.mark.parametrize(("next_line", "indent", "fillers", "joined"), [
    ("Afterwards the cottages were sold to the harbour authority.", 0, 12, True),
    ("Afterwards the cottages were sold to the harbour authority.", 6, 12, False),  # a new paragraph, indented
    ("A sale of the cottages to the harbour authority followed.", 0, 12, False),  # "A" would have fit
    ("Afterwards the cottages were sold to the harbour authority.", 0, 4, False),  # its page ends half empty
], ids=["wrapped", "indented", "would-fit", "page-not-full"])
def test_a_sentence_that_ends_at_the_foot_of_a_full_page_goes_on_at_the_top_of_the_next(
        tmp_path, next_line, indent, fillers, joined):
    """A paragraph whose sentence ended on the last line of a page was cut in two when the next page went on with a
    capital: across a page break only an open end or a lower-case start joined. As on one page, the text goes on
    when the page's last line is full, the next page's first line is flush left and its first word would not have
    fit on that line; and only when the text filled the page to its foot."""
    body = [A, D, E] * (fillers // 3)
    pages = [column(20, 30, [*body, LIGHTHOUSE]), [(20 + indent, 30, next_line), *column(20, 38, [D])]]
    extracted = extract_pdf(lines_pdf(tmp_path / "foot.pdf", pages))
    split = [text_of(LIGHTHOUSE), next_line]
    assert extracted.paragraphs == [*map(text_of, body), *([" ".join(split)] if joined else split), text_of(D)]
    assert extracted.paragraph_meta[len(body)] == ({"page": 1, "page_end": 2} if joined else {"page": 1})


def test_a_justified_paragraph_that_ends_short_of_the_edge_at_a_page_s_foot_ends_there(tmp_path):
    """On a justified page a line the text wrapped at ends at the column's edge: a paragraph's last line that ends
    short of it, long as it is, ends the paragraph, though the next page's first word would not have fit after it."""
    filler = ("The harbour authority handled a record volume of cargo during the year, with container traffic up for "
              "the third year running and the fishing fleet landing more mackerel and herring than in any year since "
              "the market was rebuilt.")
    last = ("The harbour authority repaired the northern quay in the spring, and the pilots say the channel is deeper "
            "now than it has been for years and the ferry crews are glad of it as the winter storms come in from the "
            "sea every year and again.")  # its last line spans nine tenths of the column
    opening = "Extraordinarily high tides flooded the quay in March and again in April."
    pdf = fpdf.FPDF(unit="mm", format="A4")
    pdf.set_auto_page_break(False)
    pdf.add_page()
    pdf.set_font("helvetica", size=10)
    while pdf.get_y() < 240:
        pdf.multi_cell(0, 5, filler, align="J", new_x="LMARGIN", new_y="NEXT")
        pdf.ln(3)
    pdf.multi_cell(0, 5, last, align="J", new_x="LMARGIN", new_y="NEXT")
    pdf.add_page()
    pdf.multi_cell(0, 5, opening, align="J", new_x="LMARGIN", new_y="NEXT")
    pdf.output(str(tmp_path / "justified.pdf"))
    assert extract_pdf(tmp_path / "justified.pdf").paragraphs[-2:] == [last, opening]


@pytest.mark.parametrize("offset", [1.5, 2.2], ids=["half-line", "further"])
def test_subscripts_and_superscripts_set_off_their_line_keep_the_paragraph_whole(tmp_path, offset):
    """A formula's subscript ("CO₂") or a footnote's mark ("manual¹²"), in small type set further off its line than
    pdfminer's half overlap, was a line of its own and the text after it another: the paragraph was cut in three
    and its lines put out of order ("and some salt, The water ... CO" | "2 and the engineers ..."). A script is set
    on the line of the glyph before it (a footnote's mark is dropped); the next
    paragraph stays apart."""
    lines = [["The water that the harbour takes from the river holds much CO", ("2", offset), " and some salt,"],
             ["and the engineers treat it with NaHCO", ("3", offset), " before the ferries use it in their"],
             ["boilers, as the manual", ("12", -offset), " of the authority sets out for the crews and pilots."]]
    pdf = fpdf.FPDF(unit="mm", format="A4")
    pdf.add_page()
    for k, parts in enumerate([*lines, ["A second paragraph stays apart from the first one here."]]):
        x = 20
        for part in parts:
            script = isinstance(part, tuple)
            pdf.set_font("helvetica", size=7 if script else 10)
            pdf.text(x, 30 + 5 * k + 3 * (k == 3) + (part[1] if script else 0), part[0] if script else part)
            x += pdf.get_string_width(part[0] if script else part)
    pdf.output(str(tmp_path / "scripts.pdf"))
    assert extract_pdf(tmp_path / "scripts.pdf").paragraphs == [
        "The water that the harbour takes from the river holds much CO2 and some salt, and the engineers treat it "
        "with NaHCO3 before the ferries use it in their boilers, as the manual of the authority sets out for the "
        "crews and pilots.", "A second paragraph stays apart from the first one here."]


def test_a_code_listing_s_dashed_and_numbered_lines_stay_one_block(tmp_path):
    """A code listing's lines that start with "- " (a YAML list) or "1." (a Markdown file shown as code) opened list
    items, as a dashed or numbered list's do: the listing was cut into a paragraph a line. Lines in a monospaced
    font open none; the same lines in the text's font are still a list's items."""
    listing = ["steps:", "  - name: build the harbour map", "  - run: make tiles", "notes.md:", "1. Dredge the channel",
               "2. Open the quay"]
    pdf = fpdf.FPDF(unit="mm", format="A4")
    pdf.add_page()
    for font in ("courier", "helvetica"):
        pdf.set_font("helvetica", size=10)
        pdf.text(20, pdf.get_y() + 20, "The build runs these steps:")
        top = pdf.get_y() + 28
        pdf.set_font(font, size=10)
        for k, line in enumerate(listing):
            pdf.text(20, top + 4.5 * k, line)
        pdf.set_y(top + 40)
    pdf.output(str(tmp_path / "listing.pdf"))
    paragraphs = extract_pdf(tmp_path / "listing.pdf").paragraphs
    assert paragraphs[:2] == ["The build runs these steps:", " ".join(" ".join(listing).split())]
    assert paragraphs[2:] == ["The build runs these steps:", "steps:", "- name: build the harbour map",
                              "- run: make tiles notes.md:", "1. Dredge the channel", "2. Open the quay"]




def book_page(paragraphs: list[str]):
    """A page of ``paragraphs`` set as books set them: justified, each first line indented, no space between them."""
    pdf = fpdf.FPDF(unit="mm", format="A4")
    pdf.add_page()
    pdf.set_font("helvetica", size=10)
    with pdf.text_columns(text_align="J", line_height=1.15) as columns:
        for text in paragraphs:
            with columns.paragraph(first_line_indent=6) as paragraph:
                paragraph.write(text)
    return pdf


def test_paragraphs_set_with_an_indented_first_line_and_no_space_between_are_apart(tmp_path):
    """Paragraphs set as books set them, justified, each first line indented and no space between them: where a
    paragraph's last line ends near the right edge, layout analysis puts the next paragraph's first line (which
    ends there too) in its box, and the two were read as one. An indented full line under a line that ends a
    sentence, over a line that is not indented, opens a paragraph; a code listing's indented lines stay one block,
    and a short paragraph's lines stay together."""
    paragraphs = ["The lighthouse at the mouth of the estuary has guided ships since 1854, and its keepers lived in "
                  "the cottages below the light until the lamp was automated in 1987, when the last of the keepers "
                  "retired to the village by the old harbour wall.",  # its last line ends near the right edge
                  "Afterwards the cottages were sold to the harbour authority, which let them to the pilots and their "
                  "families for many years.", "The pilots still meet there."]
    code = ["def tide(height):", "    return height * 2", "print(tide(3))"]
    pdf = book_page(paragraphs)
    pdf.set_font("courier", size=10)
    for k, line in enumerate(code):
        pdf.text(20, 80 + 4.5 * k, line)
    pdf.output(str(tmp_path / "book.pdf"))
    assert extract_pdf(tmp_path / "book.pdf").paragraphs == [*paragraphs, " ".join(" ".join(code).split())]



@pytest.mark.parametrize("pitch", [6, 8], ids=["1.5", "double"])
@pytest.mark.parametrize(("first_line", "next_line", "joined"), [
    ("The harbour authority runs three terminals on the northern quay, as follows:",
     "the container terminal, the ferry terminal and the fish market by the old", True),
    ("The harbour authority runs three terminals on the northern quay, as follows:",
     "The container terminal, the ferry terminal and the fish market by the old", True),
    ("The harbour authority runs three terminals:",
     "The container terminal, the ferry terminal and the fish market by the old", False),
], ids=["lower-case", "capital", "short-line"])
def test_a_sentence_that_goes_on_after_a_colon_at_a_line_s_end_stays_whole(
        tmp_path, pitch, first_line, next_line, joined):
    """At 1.5 or double spacing (each line a text box of its own) a paragraph whose line ended in a colon was cut
    there, though the sentence went on in the next line: a colon ended the paragraph as a full stop does, unless the
    next line started in lower case ("... observed that:" over a quotation, "... phonemes:" over "/a ɛ e/" cut
    paragraphs of SQuAD articles set so). Where the text wrapped at the colon (a full line, and the next line's first
    word would not have fit on it), the sentence goes on, whatever the case of the next line; a colon on a line that
    ends short (a list's introduction) ends its paragraph."""
    lines = [first_line, next_line, "lighthouse, each with its own berths and cranes for the ships that call there."]
    path = lines_pdf(tmp_path / "colon.pdf", [[(20, 20 + pitch * k, line) for k, line in enumerate(lines)]])
    assert extract_pdf(path).paragraphs == ([text_of(lines)] if joined else [lines[0], text_of(lines[1:])])


@pytest.mark.parametrize("pitch", [4.5, 6, 8], ids=["single", "1.5", "double"])
def test_each_reference_set_with_a_hanging_indent_is_a_paragraph_of_its_own(tmp_path, pitch):
    """An unnumbered reference list (APA, Harvard) sets each entry's first line at the margin and the lines it wraps
    onto indented: nothing but the indent tells where an entry ends, and the references ran on into each other as
    one paragraph ("... 1-24. Moss, B. (2019) ..."), or an entry whose first line ended a sentence was cut there at
    wider spacing. Each line at the margin of such a list opens an entry; its indented lines stay with it. The prose
    around the list stays whole."""
    prose = ["The tides of the harbour were first measured by the authority in 1880, and again",
             "after the northern quay was built, which the survey of the estuary records in detail."]
    references = [["Lind, A. (2020). Tides of the harbour and the northern quays, with a survey of the",
                   "estuary's sand banks. Journal of Ports and Harbours, 12(3), 1-24."],
                  ["Moss, B. (2019). The lighthouse keepers of Kellerton. Coastal History, 3, 7-9."],
                  ["Reid, C., & Lind, A. (2021). Cargo handled at the small ports of the north, 1970-2020.",
                   "Maritime Economics, 7, 5-9."],
                  ["Smith, J., Brown, K., & Taylor, M. (2018). Dredging the channel: costs and benefits for",
                   "the fishing fleet and the ferries to the islands, with maps of the estuary and its",
                   "sand banks. Harbour Press."]]
    after = ["The authors thank the harbour master and the pilots of Kellerton for their help with",
             "the survey, and the keepers' families for the letters they lent to the authority."]
    placed = [(20, 20 + pitch * k, line) for k, line in enumerate(prose)]
    y = 20 + pitch * len(prose) + 4
    for reference in references:
        for k, line in enumerate(reference):
            placed.append((20 + 10 * (k > 0), y, line))
            y += pitch
    placed += [(20, y + 4 + pitch * k, line) for k, line in enumerate(after)]
    path = lines_pdf(tmp_path / "references.pdf", [placed])
    assert extract_pdf(path).paragraphs == [text_of(prose), *map(text_of, references), text_of(after)]


def test_a_contents_page_s_entries_are_one_paragraph_without_their_leaders(tmp_path):
    """A contents page ("Chapter 3 The lighthouse keepers ........ 11") read one paragraph per entry: a search for a
    chapter's title found its entry, a few words alone, over the chapter. Its entries on a page are one paragraph,
    "; " apart, the dots of their leaders dropped, and the chapter's text after it is a paragraph of its own; an
    ellipsis in prose is prose."""
    chapters = ["The harbour and its cranes", "Pilots of the estuary", "The lighthouse keepers", "Index"]
    pdf = fpdf.FPDF(unit="mm", format="A4")
    pdf.add_page()
    pdf.set_font("helvetica", "B", 16)
    pdf.cell(0, 10, "Contents", new_x="LMARGIN", new_y="NEXT")
    pdf.set_font("helvetica", size=11)
    for k, chapter in enumerate(chapters):
        title = f"Chapter {k + 1} {chapter} "
        leader = ". " * int((170 - pdf.get_string_width(title)) / pdf.get_string_width(". ")) if k % 2 else "." * int(
            (170 - pdf.get_string_width(title)) / pdf.get_string_width("."))  # spaced and solid leaders
        pdf.cell(170, 7, title + leader, new_x="RIGHT")
        pdf.cell(0, 7, str(3 + 4 * k), align="R", new_x="LMARGIN", new_y="NEXT")
    pdf.add_page()
    pdf.multi_cell(0, 6, "The harbour was built in 1450 by Gala, who brought the cranes from the north and the "
                   "stone from the quarry.... It opened in 1452.")
    pdf.output(str(tmp_path / "book.pdf"))
    assert extract_pdf(tmp_path / "book.pdf").paragraphs == [
        "Contents", "Chapter 1 The harbour and its cranes 3; Chapter 2 Pilots of the estuary 7; Chapter 3 The "
        "lighthouse keepers 11; Chapter 4 Index 15", "The harbour was built in 1450 by Gala, who brought the cranes "
        "from the north and the stone from the quarry.... It opened in 1452."]


def test_footnote_marks_are_dropped_and_exponents_and_subscripts_kept(tmp_path):
    """A footnote's mark set as a superscript ("Gala¹,", "later.¹²") read glued to its word ("Gala1,"), and a search
    for the word missed it. A superscript of digits or reference signs after a word of three letters or more, or
    after punctuation, is dropped; one after a shorter word, a number or a bracket, or before an operator, is an
    exponent ("m²", "10⁵", "(a+b)²", "GeV² = 1"), and a subscript
    ("H₂O") is part of its word: both are kept, as the text reads them. An exponent after a number read glued to it,
    another number ("10⁵" read "105", "10⁻³" "10-3"): after a number or a bracket it reads with a caret, as plain
    text writes a power ("10^5"); after a letter as it is set ("km2"); an ordinal's letters ("1ˢᵗ") as a word."""
    pdf = fpdf.FPDF(unit="mm", format="A4")
    pdf.add_page()
    pdf.set_font("helvetica", size=11)
    for part in ["The harbour was built in 1450 by Gala", ("SUP", "1"), ", who brought the cranes. Its water is H",
                 ("SUB", "2"), "O, its basin 12 km", ("SUP", "2"), " and its dredging 10", ("SUP", "5"),
                 " tonnes a year. The pilots came later.", ("SUP", "12"), " The quay", ("SUP", "*"), " opened in 1452. Its",
                 " area is (a+b)", ("SUP", "2"), " and its energy GeV", ("SUP", "2"), " = 1. Its salt is 10", ("SUP", "-3"),
                 " of its 1", ("SUP", "st"), " basin."]:
        pdf.char_vpos = part[0] if isinstance(part, tuple) else "LINE"
        pdf.write(6, part[1] if isinstance(part, tuple) else part)
    pdf.output(str(tmp_path / "notes.pdf"))
    assert extract_pdf(tmp_path / "notes.pdf").paragraphs == [
        "The harbour was built in 1450 by Gala, who brought the cranes. Its water is H2O, its basin 12 km2 and its "
        "dredging 10^5 tonnes a year. The pilots came later. The quay opened in 1452. Its area is (a+b)^2 and its "
        "energy GeV2 = 1. Its salt is 10^-3 of its 1st basin."]


# (text before, superscript, text after, whether it is a footnote's mark): marks after numbers and exponents
AFTER_NUMBERS = [("The quay opened in 1990", "1", ", after a long wait.", True),
                 ("It landed 23,800", "2", " tonnes of fish.", True),
                 ("Costs rose by 12%", "3", " in the year.", True),
                 ("The light dates from 1854", "*", " and still works.", True),
                 ("Its population was 1,234,567", "4", ".", True),
                 ("The survey of 2023", "5", " found more seals.", True),
                 ("It dredged 10", "5", " tonnes a year.", False),
                 ("Its salt is 10", "-3", " of its water.", False),
                 ("A word holds 2", "16", " values.", False),
                 ("The nine cells are 3", "2", " in all.", False),
                 ("Its speed is 1.5 x 10", "8", " metres a second.", False),
                 ("The cube 5", "3", " = 125 holds.", False),
                 ("The square 100", "2", " = 10,000 holds.", False)]


def test_a_footnote_mark_after_a_year_or_an_amount_is_dropped_and_a_power_s_exponent_kept(tmp_path):
    """A footnote's mark after a number read as a power: "in 1990¹," read "in 1990^1,", "12%³" "12%3". Type size and
    height set a mark and an exponent alike (fpdf2, word processors, LaTeX); the number tells them apart: a power's
    base is 10 or a small number ("10⁵", "2¹⁶", "3²"), a mark follows a year, an amount with separators, a per cent
    sign, and a reference sign any number. A number of 100 or more before an operator keeps its exponent."""
    assert misread_marks(tmp_path, AFTER_NUMBERS) == []


def misread_marks(tmp_path: Path, cases: list[tuple[str, str, str, bool]]) -> list[str]:
    """The cases (text before, superscript, text after, whether it is a footnote's mark) a PDF of them, a line each,
    reads wrong: a mark not dropped, or an exponent not read with a caret."""
    pdf = fpdf.FPDF(unit="mm", format="A4")
    pdf.add_page()
    pdf.set_font("helvetica", size=11)
    for before, script, after, _ in cases:
        for part, position in ((before, "LINE"), (script, "SUP"), (f"{after}\n", "LINE")):
            pdf.char_vpos = position
            pdf.write(6, part)
        pdf.ln(4)
    pdf.output(str(tmp_path / "numbers.pdf"))
    read = " ".join(extract_pdf(tmp_path / "numbers.pdf").paragraphs)
    return [before for before, script, after, mark in cases
            if (before + after if mark else f"{before}^{script}{after}") not in read]


# marks after a closing bracket or a decimal number, and the exponents of brackets and decimals kept
AFTER_BRACKETS = [("Prices rose by 3.5", "1", " per cent.", True),
                  ("The gauge read 0.75", "2", ", then fell.", True),
                  ("The first quay (see Smith)", "3", " was wooden.", True),
                  ("It was rebuilt (in 1852)", "4", ", twice.", True),
                  ("The harbour (Kellerton)", "*", " is deep.", True),
                  ("Its area is (a+b)", "2", " and more.", False),
                  ("The term (x)", "2", " is small.", False),
                  ("Its cost is (log n)", "2", " at most.", False),
                  ("The square 2.5", "2", " = 6.25 holds.", False)]


def test_a_footnote_mark_after_a_bracket_or_a_decimal_is_dropped_and_a_bracket_s_exponent_kept(tmp_path):
    """A mark after a closing bracket or a decimal number read as a power: "(see Smith)³" read "(see Smith)^3",
    "3.5¹ per cent" "3.5^1 per cent". After a bracket, what it closes tells them apart: a word of three letters or
    more, or a number no power is written of, is a note's ("(in 1852)⁴"); a formula's letters a power's ("(a+b)²",
    "(log n)²"). A decimal's superscript is a mark unless an operator follows ("2.5² = 6.25")."""
    assert misread_marks(tmp_path, AFTER_BRACKETS) == []


def test_a_paragraph_that_ends_in_a_note_in_brackets_ends_before_an_indented_one(tmp_path):
    """Paragraphs set as books set them (first lines indented, no space between): one that ends in a note in
    brackets after its full stop (Wikipedia's "[citation needed]", a reference's "[12]") ended no sentence, and
    where its last line ended near the right edge, the next paragraph was read into it."""
    paragraphs = ["The lighthouse at the mouth of the estuary has guided ships since 1854, and its keepers lived in "
                  "the cottages below the light until the lamp was automated when the last of the keepers retired to "
                  "the village by the old.[citation needed]",  # its last line ends near the right edge
                  "Afterwards the cottages were sold to the harbour authority, which let them to the pilots and their "
                  "families for many years.", "The pilots still meet there, and the cottages keep their names."]
    pdf = book_page(paragraphs)
    pdf.output(str(tmp_path / "book.pdf"))
    assert extract_pdf(tmp_path / "book.pdf").paragraphs == paragraphs


def test_a_page_that_opens_with_a_name_like_itunes_opens_a_paragraph(tmp_path):
    """A paragraph runs on over a page break where the next page starts in lower case: "iTunes 7 and above ...",
    opening a paragraph on the next page, was read into the paragraph ending at the page's foot. A first word with
    a capital inside it ("iTunes", "iPod", "eBay") is a name, which opens a sentence as a capital does; a page that
    goes on in lower case still joins its paragraph."""
    full = "the harbour authority keeps the moorings of the ferries and the pilots in good order"
    page = [(20, 30 + 5 * k, full) for k in range(50)]
    last = "and the pilots keep their boats at the quay in the old harbour."
    opening = ["iTunes 7 and above can transfer the harbour's charts to the computers of the", "crews at the quay."]
    pages = [[*page[:-1], (20, 275, last)], [(26, 30, opening[0]), (20, 35, opening[1])]]
    assert extract_pdf(lines_pdf(tmp_path / "pages.pdf", pages)).paragraphs == [
        " ".join([full] * 49 + [last]), " ".join(opening)]
    pages[1] = [(20, 30, "and the crews " + opening[0][7:]), (20, 35, opening[1])]  # the text goes on
    assert extract_pdf(lines_pdf(tmp_path / "on.pdf", pages)).paragraphs == [
        " ".join([full] * 49 + [last, "and the crews " + opening[0][7:], opening[1]])]


@needs_dejavu
@pytest.mark.parametrize("space", [3, 0], ids=["spaced", "unspaced"])
def test_two_columns_set_justified_by_fpdf2_read_in_order_and_a_paragraph_runs_on_into_the_next_column(
        tmp_path, space):
    """fpdf2's text columns, justified, leave spaces so wide in a narrow column that layout analysis cut a line in
    pieces and put them back in any order, a piece in a box of its own ("the authority's pilotage, internationally
    telecommunications" for "... internationally recognised pilotage, telecommunications and"): none of the
    validation articles set so read its words in order. A line's pieces are one line again; each column is read
    top to bottom, the left one first, and the paragraph at the left column's foot goes on at the top of the right.
    Set without space between them (nor an indent), the paragraphs of a column were one text box, read as one
    paragraph: on a justified page a line that ends a sentence short of the column's edge ends its paragraph."""
    paragraphs = [
        "The harbour authority publishes its accounts every spring, and Entertainment Weekly put it on its "
        "end-of-the-decade list of the best-run harbours in the north, saying that the authority's internationally "
        "recognised pilotage, telecommunications and environmental programmes set the standard for the region.",
        "The lighthouse at the mouth of the estuary has guided ships since 1854, and its keepers lived in the "
        "cottages below the light until the lamp was automated in 1987, when the last of the keepers retired to the "
        "village by the old harbour wall.",
        "The pilots still meet in the cottages by the harbour wall, where the keepers once lived."]
    pdf = fpdf.FPDF(unit="mm", format="A4")
    pdf.add_font("body", fname=str(DEJAVU))
    pdf.add_page()
    pdf.set_font("body", size=10)
    with pdf.text_columns(ncols=2, text_align="J", gutter=8) as columns:
        for k in range(14):  # the lighthouse, the fifth time, runs from the left column's foot to the right's top
            with columns.paragraph(bottom_margin=space) as paragraph:
                paragraph.write(paragraphs[k % 3])
    pdf.output(str(tmp_path / "columns.pdf"))
    assert extract_pdf(tmp_path / "columns.pdf").paragraphs == [paragraphs[k % 3] for k in range(14)]


def test_a_table_between_justified_paragraphs_at_1_5_spacing_reads_named_by_its_header(tmp_path):
    """At 1.5 line spacing (each line a text box) a table under a bold header row, with a paragraph over it and one
    under it, read "Ferry Berths Cranes", "Kellerton 4 2": the paragraphs' lines covered the gaps between its cells on
    both sides, and each row was joined into one line as if a justified line's pieces."""
    pdf = fpdf.FPDF(unit="mm", format="A4")
    pdf.add_page()
    pdf.set_font("helvetica", size=10)
    prose = ("The harbour authority publishes its accounts every spring and the pilots meet in the cottages by the "
             "harbour wall where the keepers once lived before the lamp was automated. ") * 2
    pdf.multi_cell(0, 7.5, prose, align="J", new_x="LMARGIN", new_y="NEXT")
    pdf.ln(3)
    for row in (("Ferry", "Berths", "Cranes"), ("Kellerton", "4", "2"), ("Kirkwall", "12", "6")):
        pdf.set_font("helvetica", style="B" if row[0] == "Ferry" else "", size=10)
        for text in row:
            pdf.cell(60, 7.5, text)
        pdf.ln(7.5)
    pdf.set_font("helvetica", size=10)
    pdf.ln(3)
    pdf.multi_cell(0, 7.5, prose, align="J", new_x="LMARGIN", new_y="NEXT")
    pdf.output(str(tmp_path / "table.pdf"))
    assert extract_pdf(tmp_path / "table.pdf").paragraphs == [
        prose.strip(), "Ferry: Kellerton; Berths: 4; Cranes: 2", "Ferry: Kirkwall; Berths: 12; Cranes: 6", prose.strip()]


TURNED_BODY = ("Dense retrieval encodes every passage once and answers a question by a nearest neighbour search over "
               "the vectors, which is fast and scales to millions of documents on one machine.")

TURNED_PAGES = [TURNED_BODY, "The index is built once, compressed on a GPU and served by one process with a queue.",
                "Questions are encoded on arrival and answered in tens of milliseconds each."]


def test_text_turned_on_a_page_reads_in_order_and_set_apart(tmp_path):
    """Glyphs turned a quarter from upright (an arXiv identifier up the margin, a label down a table's side, a note
    set sideways) were read letter by letter out of order ("1 2 0 2 n u", "J", ...), and what was left of them ran
    into the next page's first paragraph. Each reads as a line, its words in order, a paragraph of its own set apart
    as a footnote is (after the paragraph that runs past it); a note up the margin of every page is left out."""
    pdf = fpdf.FPDF(unit="mm", format="A4")
    pdf.set_font("helvetica", size=11)
    for page in range(3):
        pdf.add_page()
        pdf.multi_cell(0, 6, TURNED_PAGES[page])
        with pdf.rotation(90, x=203, y=200):
            pdf.text(203, 200, "Preprint under review")  # on every page: a running note
        if page == 0:
            pdf.set_font("times", size=20)
            with pdf.rotation(90, x=15, y=230):
                pdf.text(15, 230, "arXiv:2012.12624v3  [cs.CL]  1 Jun 2021")
            pdf.set_font("helvetica", size=11)
            with pdf.rotation(270, x=195, y=100):
                pdf.text(195, 100, "Tonnes landed")
            with pdf.rotation(90, x=120, y=220):
                pdf.set_xy(120, 220)
                pdf.multi_cell(60, 5, "A note set sideways over two lines of the page.")
    pdf.output(str(tmp_path / "turned.pdf"))
    assert extract_pdf(tmp_path / "turned.pdf").paragraphs == [
        TURNED_PAGES[0], "arXiv:2012.12624v3 [cs.CL] 1 Jun 2021", "A note set sideways over two lines of the page.",
        "Tonnes landed", *TURNED_PAGES[1:]]


@pytest.mark.parametrize("how", ["rotate-90", "rotate-180", "rotate-270", "content-turned"])
def test_a_page_turned_as_a_whole_reads_as_an_upright_one(tmp_path, how):
    """A page whose text is all turned, by the page's /Rotate (a page rotated in a viewer, a scanner's) or by its
    content (a landscape table set sideways on a portrait page), read "T h e h a r b o u r ..." or one letter a
    line, and one turned upside down its lines from the foot up; it reads as the same page set upright does, its
    page number (upright on the sheet) left out."""
    paragraphs = [f"Paragraph {k}. {TURNED_BODY}" for k in (1, 2)]
    pdf = fpdf.FPDF(unit="mm", format="A4")
    pdf.set_font("helvetica", size=11)
    pdf.set_compression(False)
    pdf.add_page()
    with pdf.rotation(90 if how == "content-turned" else 0, x=105, y=148):
        pdf.set_xy(30, 60)
        for paragraph in paragraphs:
            pdf.multi_cell(150, 6, paragraph)
            pdf.ln(8)
    pdf.text(105, 290, "17")
    data = bytes(pdf.output())
    if how.startswith("rotate"):  # (pdfminer finds the objects again where the cross-reference table's offsets moved)
        data = re.sub(rb"/Type /Page\n", b"/Type /Page\n/Rotate " + how[7:].encode() + b"\n", data, count=1)
    (tmp_path / "turned.pdf").write_bytes(data)
    assert extract_pdf(tmp_path / "turned.pdf").paragraphs == paragraphs


def test_turned_glyphs_at_numbers_past_a_float_s_range_are_read_not_raised():
    """A hostile file's glyph matrix can hold numbers past a float's range (inf, nan once multiplied): its turned
    glyphs are read as text still, and the rest of the page with them, not an error that makes the file unreadable."""
    from types import SimpleNamespace

    from spanseek.indexer.pdf_file import turned_text

    def glyph(matrix: tuple[float, ...], text: str) -> SimpleNamespace:
        return SimpleNamespace(matrix=matrix, x0=0, x1=10, y0=0, y1=10, adv=5, get_text=lambda: text)

    nan, inf = float("nan"), float("inf")
    assert turned_text([glyph((nan, 1, 0, 0, 0, 0), "a"), glyph((0, 1, -1, 0, inf, 3), "b"),
                        glyph((0, 1, -1, 0, 5, 3), "c"), glyph((0, 1, -1, 0, 5, 9), "d")]) == ["ab", "cd"]


LONG = "Fill in this form and send it to the harbour master a week before you arrive."


def test_a_filled_form_reads_its_values_where_a_reader_sees_them(tmp_path):
    """A PDF form's values (AcroForm fields: what a user typed, ticked, chose) were not read, only the empty form's
    labels. Each value reads where its widget is, in reading order: a text field's after its label, a ticked box or
    chosen radio button as ☒ before its label, a chosen option as it is shown; an empty field, a box left empty, a
    password field and a hidden field read as nothing."""
    labels = [(730, "Application for a berth"), (700, LONG), (660, "Name:"), (630, "Vessel length:"),
              (600, "I hold a skipper's licence."), (580, "I need shore power."), (550, "Harbour:"), (520, "Notes:"),
              (430, "Ferry"), (410, "Own boat")]
    text = b" ".join(b"BT /F1 10 Tf %d %d Td (%s) Tj ET" % (90 if y in (600, 580, 430, 410) else 72, y, label.encode())
                     for y, label in labels)
    widget = b"<< /Type /Annot /Subtype /Widget /DA (/Helv 10 Tf 0 g) "
    fields = [
        widget + b"/FT /Tx /T (name) /V (Ada Lovelace) /Rect [110 655 300 673] >>",
        widget + b"/FT /Tx /T (length) /V () /Rect [150 625 300 643] >>",
        widget + b"/FT /Btn /T (licence) /V /Yes /AS /Yes /Rect [72 598 84 610] >>",
        widget + b"/FT /Btn /T (power) /V /Off /AS /Off /Rect [72 578 84 590] >>",
        widget + b"/FT /Ch /Ff 131072 /T (harbour) /V (KW) /Opt [[(RT) (Rotterdam)] [(KW) (Kirkwall)]] "
                 b"/Rect [120 545 300 563] >>",
        widget + b"/FT /Tx /Ff 4096 /T (notes) /V (Arriving late.\\rLeaving at dawn.) /Rect [120 470 400 532] >>",
        widget + b"/FT /Tx /Ff 8192 /T (pin) /V (1234) /Rect [300 655 400 673] >>",  # a password field
        widget + b"/FT /Tx /F 2 /T (clerk) /V (Office use only) /Rect [300 625 400 643] >>",  # a hidden one
        b"<< /FT /Btn /Ff 32768 /T (travel) /V /ferry /Kids [15 0 R 16 0 R] >>",  # a radio group: its buttons
        widget + b"/Parent 14 0 R /AS /ferry /Rect [72 428 84 440] >>",
        widget + b"/Parent 14 0 R /AS /Off /Rect [72 408 84 420] >>",
    ]
    refs = [b"%d 0 R" % n for n in range(6, 17)]  # the fields are objects 6-16; 14 is the radio group, no widget
    path = pdf_of_objects(tmp_path / "form.pdf", [
        b"<< /Type /Catalog /Pages 2 0 R /AcroForm << /Fields [%s] >> >>" % b" ".join(refs[:9]),
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
        b"/Resources << /Font << /F1 5 0 R >> >> /Annots [%s] >>" % b" ".join(refs[:8] + refs[9:]),
        b"<< /Length %d >>\nstream\n%s\nendstream" % (len(text), text),
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
        *fields,
    ])
    paragraphs = extract_pdf(path).paragraphs
    assert paragraphs == ["Application for a berth", LONG, "Name: Ada Lovelace", "Vessel length:",
                          "☒ I hold a skipper’s licence.", "I need shore power.", "Harbour: Kirkwall", "Notes:",
                          "Arriving late. Leaving at dawn.", "☒ Ferry", "Own boat"]


def _form(path: Path, content: bytes, field: bytes) -> Path:
    """A one-page form: page content ``content`` (its font /F1, Helvetica) and a text field's widget of keys ``field``."""
    return pdf_of_objects(path, [
        b"<< /Type /Catalog /Pages 2 0 R /AcroForm << /Fields [6 0 R] >> >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
        b"/Resources << /Font << /F1 5 0 R >> >> /Annots [6 0 R] >>",
        b"<< /Length %d >>\nstream\n%s\nendstream" % (len(content), content),
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
        b"<< /Type /Annot /Subtype /Widget /FT /Tx %s >>" % field,
    ])


def _one_field_form(path: Path, appearance: bytes) -> Path:
    """A one-page form whose one text field, "Ada Lovelace" after "Name:", has the default appearance ``appearance``."""
    text = b"BT /F1 10 Tf 72 700 Td (%s) Tj ET BT /F1 10 Tf 72 660 Td (Name:) Tj ET" % LONG.encode()
    return _form(path, text, b"/T (name) /V (Ada Lovelace) /Rect [110 655 300 673] /DA (%s)" % appearance)


@pytest.mark.parametrize("appearance", [b"/Helv . Tf 0 g", b"/Helv Tf", b"0 g", b"/Helv 1.2.3 Tf"])
def test_a_form_field_whose_type_size_is_no_number_reads_its_value(tmp_path, appearance):
    """A field's default appearance with a type size that is no number ("/Helv . Tf") made the whole file unreadable
    ("not a readable PDF (ValueError ...)"); its value reads in the default size, the rest of the file with it."""
    assert extract_pdf(_one_field_form(tmp_path / "form.pdf", appearance)).paragraphs == [LONG, "Name: Ada Lovelace"]


def test_a_form_field_s_appearance_is_read_in_linear_time(tmp_path):
    """A field's appearance string of 30,000 digits and no "Tf" took seconds (a search for the type size tried again
    from each digit); it is read once, word by word."""
    path = _one_field_form(tmp_path / "form.pdf", b"/Helv " + b"1" * 30_000)
    start = time.process_time()
    assert extract_pdf(path).paragraphs == [LONG, "Name: Ada Lovelace"]
    assert time.process_time() - start < 1.5


def test_a_form_field_reads_as_its_format_action_shows_it(tmp_path):
    """A field's value read as stored ("1000") where a viewer shows it formatted by the field's format action
    ("$1,000.00"): it reads as shown, for Acrobat's number, percent and special formats; a value that is no number
    reads as stored. A currency written as it is ("€", byte 0xA0 in PDFDocEncoding), not as an escape, reads as
    written (it read "â\x82¬"); a percent format's separators and sign read as it sets them, "%1.234,6" (they read
    "1,234.6%")."""
    labels = [(700, "Fee:"), (670, "Share:"), (640, "Phone:"), (610, "Refund:"), (580, "Berth:"), (550, "Toll:"),
              (520, "Rate:")]
    text = b" ".join(b"BT /F1 10 Tf 72 %d Td (%s) Tj ET" % (y, label.encode()) for y, label in labels)
    widget = b"<< /Type /Annot /Subtype /Widget /FT /Tx /DA (/Helv 10 Tf 0 g) "
    script = b"/AA << /F << /S /JavaScript /JS (%s) >> >>"
    fields = [
        widget + b"/V (1000) /Rect [150 695 300 713] " + script % b'AFNumber_Format(2, 0, 0, 0, "$", true);' + b">>",
        widget + b"/V (0.255) /Rect [150 665 300 683] " + script % b"AFPercent_Format(1, 0);" + b">>",
        widget + b"/V (5551234567) /Rect [150 635 300 653] " + script % b"AFSpecial_Format(2);" + b">>",
        widget + b"/V (-1234567,5) /Rect [150 605 300 623] "
                 + script % b'AFNumber_Format(2, 2, 2, 0, " EUR", false);' + b">>",
        widget + b"/V (B12) /Rect [150 575 300 593] " + script % b'AFNumber_Format(0, 0, 0, 0, "", true);' + b">>",
        widget + b"/V (1000) /Rect [150 545 300 563] " + script % b'AFNumber_Format(0, 0, 0, 0, " \xa0", false);' + b">>",
        widget + b"/V (12.3455) /Rect [150 515 300 533] " + script % b"AFPercent_Format(1, 2, true);" + b">>",
    ]
    refs = b" ".join(b"%d 0 R" % n for n in range(6, 6 + len(fields)))
    path = pdf_of_objects(tmp_path / "form.pdf", [
        b"<< /Type /Catalog /Pages 2 0 R /AcroForm << /Fields [%s] >> >>" % refs,
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
        b"/Resources << /Font << /F1 5 0 R >> >> /Annots [%s] >>" % refs,
        b"<< /Length %d >>\nstream\n%s\nendstream" % (len(text), text),
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
        *fields,
    ])
    assert extract_pdf(path).paragraphs == ["Fee: $1,000.00", "Share: 25.5%", "Phone: (555) 123-4567",
                                            "Refund: (1.234.567,50 EUR)", "Berth: B12", "Toll: 1,000 \u20ac",
                                            "Rate: %1.234,6"]


@pytest.mark.parametrize(("needs_appearances", "turn"), [
    (False, b"1 0 0 1 0 0"), (True, b"1 0 0 1 0 0"),
    # a field turned on its page (/MK /R 90, 270, 180), its text drawn turned: each glyph read as a line of its own,
    # from the page's top ("0 0 . 0 0 0 , 1 $"); it reads along the line it is drawn on
    (False, b"0 1 -1 0 18 0"), (False, b"0 -1 1 0 0 18"), (False, b"-1 0 0 -1 150 18")])
def test_a_form_field_reads_as_its_appearance_shows_it(tmp_path, needs_appearances, turn):
    """A field's value read as stored ("1000", "20261207") where the program that filled it in drew it otherwise
    (its appearance stream: "$1,000.00", "07 Dec 2026"): it reads as drawn, unless the form asks viewers to draw
    their own appearances (/NeedAppearances), which then show the value; a field with no appearance reads its value."""
    labels = [(700, "Fee:"), (670, "Date:"), (640, "Name:")]
    text = b" ".join(b"BT /F1 10 Tf 72 %d Td (%s) Tj ET" % (y, label.encode()) for y, label in labels)
    drawn = [b"/Tx BMC q %s cm BT /F1 10 Tf 0 g 2 5 Td (%s) Tj ET Q EMC" % (turn, shown)
             for shown in (b"$1,000.00", b"07 Dec 2026")]
    widget = b"<< /Type /Annot /Subtype /Widget /FT /Tx /DA (/Helv 10 Tf 0 g) "
    path = pdf_of_objects(tmp_path / "form.pdf", [
        b"<< /Type /Catalog /Pages 2 0 R /AcroForm << /Fields [6 0 R 7 0 R 8 0 R] /NeedAppearances %s >> >>"
        % (b"true" if needs_appearances else b"false"),
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
        b"/Resources << /Font << /F1 5 0 R >> >> /Annots [6 0 R 7 0 R 8 0 R] >>",
        b"<< /Length %d >>\nstream\n%s\nendstream" % (len(text), text),
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
        widget + b"/V (1000) /Rect [150 695 300 713] /AP << /N 9 0 R >> >>",
        widget + b"/V (20261207) /Rect [150 665 300 683] /AP << /N 10 0 R >> >>",
        widget + b"/V (Ada Lovelace) /Rect [150 635 300 653] >>",
        *(b"<< /Type /XObject /Subtype /Form /BBox [0 0 150 18] /Resources << /Font << /F1 5 0 R >> >> /Length %d >>"
          b"\nstream\n%s\nendstream" % (len(stream), stream) for stream in drawn),
    ])
    expected = ["Fee: 1000", "Date: 20261207"] if needs_appearances else ["Fee: $1,000.00", "Date: 07 Dec 2026"]
    assert extract_pdf(path).paragraphs == [*expected, "Name: Ada Lovelace"]


@pytest.mark.parametrize("rect", [b"[700 655 900 673]", b"[110 -40 300 -20]", b"[110 655 300 673]"])
def test_a_form_field_placed_off_its_page_is_not_read(tmp_path, rect):
    """A field placed off its page (outside its crop box: a viewer does not show it) read as if it were on it; it
    reads as nothing, and one on the page as ever."""
    text = b"BT /F1 10 Tf 72 700 Td (%s) Tj ET BT /F1 10 Tf 72 660 Td (Name:) Tj ET" % LONG.encode()
    path = _form(tmp_path / "form.pdf", text, b"/T (name) /V (Ada Lovelace) /Rect %s /DA (/Helv 10 Tf 0 g)" % rect)
    on_page = rect == b"[110 655 300 673]"
    assert extract_pdf(path).paragraphs == [LONG, "Name: Ada Lovelace" if on_page else "Name:"]


def test_a_long_note_in_a_multi_line_field_reads_before_the_column_beside_it(tmp_path):
    """A note typed into a multi-line field was drawn on one line, past the field and across the column beside it,
    so it read in the middle of that column ("Office use only ...", the note, "Berth number ..."). It wraps at the
    field's width, as a viewer shows it, and reads after its label, before the column beside it."""
    column = ["Office use only: checked by the clerk", "Berth number assigned on arrival", "Fee paid at the office"]
    labels = [(730, 72, "Application for a berth"), (700, 72, LONG), (660, 72, "Notes:"),
              *((640 - 20 * n, 330, line) for n, line in enumerate(column))]
    text = b" ".join(b"BT /F1 10 Tf %d %d Td (%s) Tj ET" % (x, y, line.encode()) for y, x, line in labels)
    note = "We arrive late on Friday evening with a crew of four and need shore power and a berth for two nights."
    path = _form(tmp_path / "form.pdf", text, b"/DA (/Helv 10 Tf 0 g) /Ff 4096 /T (notes) /V (%s) /Rect [72 590 300 655]"
                 % note.encode())
    assert extract_pdf(path).paragraphs == ["Application for a berth", LONG, "Notes:", note, *column]


XFA_DATA = (b'<xfa:datasets xmlns:xfa="http://www.xfa.org/schema/xfa-data/1.0/"><xfa:data><berth>'
            b'<Name>Ada  Lovelace</Name><Harbour>Kirkwall</Harbour><Notes/><Photo xfa:contentType="image/png">iVBORw0K'
            b'</Photo><Comments xfa:contentType="text/html"><body xmlns="http://www.w3.org/1999/xhtml"><p>Arriving'
            b' <b>late</b>.</p><p>Leaving at dawn.</p></body></Comments><Vessel><Length>12 m</Length><Type>Ketch</Type></Vessel></berth></xfa:data></xfa:datasets>')
XFA_VALUES = ["Name: Ada Lovelace; Harbour: Kirkwall; Comments: Arriving late. Leaving at dawn.", "Length: 12 m; Type: Ketch"]


def xfa_pdf(path: Path, xfa: bytes, data: bytes, text: bytes = b"Application for a berth", fields: bytes = b"",
            catalog: bytes = b"") -> Path:
    """A one-page PDF form whose AcroForm has these ``fields`` (object references) and ``xfa`` (its /XFA: object 6
    is a compressed stream of ``data``), its catalog ``catalog`` too."""
    import zlib

    content = b"BT /F1 12 Tf 72 700 Td (%s) Tj ET" % text if text else b""
    return pdf_of_objects(path, [
        b"<< /Type /Catalog /Pages 2 0 R /AcroForm << /Fields [%s] /XFA %s >> %s >>" % (fields, xfa, catalog),
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
        b"/Resources << /Font << /F1 5 0 R >> >> >>",
        stream(content),
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
        stream(zlib.compress(data), b"/Filter /FlateDecode"),
    ])


def test_a_form_of_xfa_alone_reads_its_values_after_its_pages(tmp_path):
    """A form made with XFA alone (Adobe LiveCycle: its AcroForm lists no fields, and only a viewer that runs XFA
    shows its values) read as its pages show it, empty: the values typed in read after the pages' text, each data
    group's in one paragraph named by its fields (rich text's words too), an image's data not read, as the parts'
    datasets or as the whole XDP
    document in one stream; a page with no text does not make it unreadable. A form that also holds its values as
    AcroForm fields reads them from those, not twice."""
    path = xfa_pdf(tmp_path / "parts.pdf", b"[(preamble) 6 0 R (datasets) 6 0 R (postamble) 6 0 R]", XFA_DATA)
    extracted = extract_pdf(path)
    assert extracted.paragraphs == ["Application for a berth", *XFA_VALUES]
    assert extracted.paragraph_meta == [{"page": 1}, {}, {}]
    xdp = b'<xdp:xdp xmlns:xdp="http://ns.adobe.com/xdp/"><template/>%s</xdp:xdp>' % XFA_DATA
    assert extract_pdf(xfa_pdf(tmp_path / "whole.pdf", b"6 0 R", xdp, text=b"")).paragraphs == XFA_VALUES
    hybrid = xfa_pdf(tmp_path / "hybrid.pdf", b"[(datasets) 6 0 R]", XFA_DATA, fields=b"5 0 R")
    assert extract_pdf(hybrid).paragraphs == ["Application for a berth"]


def test_a_dynamic_xfa_form_reads_its_values_not_the_message_its_pages_hold(tmp_path):
    """A dynamic XFA form's pages are drawn by its XFA when it opens (/NeedsRendering): what they hold is a message
    for viewers that cannot ("Please wait... your PDF viewer may not be able to display this type of document"),
    which every such form read as its text: its values are its text."""
    wait = b"Please wait... If this message is not eventually replaced by the proper contents of the document"
    path = xfa_pdf(tmp_path / "dynamic.pdf", b"[(datasets) 6 0 R]", XFA_DATA, text=wait, catalog=b"/NeedsRendering true")
    extracted = extract_pdf(path)
    assert (extracted.paragraphs, extracted.meta) == (XFA_VALUES, {"pages": 1})
    empty = b'<xfa:datasets xmlns:xfa="http://www.xfa.org/schema/xfa-data/1.0/"><xfa:data/></xfa:datasets>'
    unfilled = xfa_pdf(tmp_path / "unfilled.pdf", b"[(datasets) 6 0 R]", empty, text=wait,
                       catalog=b"/NeedsRendering true")
    assert extract_pdf(unfilled).paragraphs == [wait.decode()]  # (nothing else to read)


@pytest.mark.parametrize(("data", "named"), [
    (b'<xfa:datasets xmlns:xfa="x"><xfa:data><a>unclosed</xfa:data>', True),
    (b"<datasets><data>" + b"<g>" * 300 + b"<v>deep</v>" + b"</g>" * 300 + b"</data></datasets>", True),
    (b'<!DOCTYPE d [<!ENTITY e "%s">]><datasets><data><g><v>&e;</v></g></data></datasets>' % (b"x" * 100), False),
])
def test_xfa_data_that_cannot_be_read_is_named_and_the_pages_still_read(tmp_path, caplog, data, named):
    """XFA data that is not well formed, or nested past libxml2's limit, is named in a warning (the file, the object),
    and the pages' text is read; an entity is not expanded."""
    path = xfa_pdf(tmp_path / "broken.pdf", b"[(datasets) 6 0 R]", data)
    with caplog.at_level(logging.WARNING):
        assert extract_pdf(path).paragraphs == ["Application for a berth"]
    assert (f"{path}: its XFA form data (object 6) cannot be read" in caplog.text) == named


def test_a_damaged_pdf_reads_the_pages_it_holds_whole_and_names_the_damage(tmp_path, caplog):
    """A PDF cut short (its cross-reference table and trailer, at its end, lost) was refused whole ("not a readable
    PDF (PSEOF: Unexpected EOF)", or "No /Root object!"), though a viewer shows its pages, and a page whose object is
    damaged was left out without a word: the pages it holds whole are read, and a warning names the file and the
    damage, with the pages lost to it; a file left without any text is still skipped as damaged."""
    pages = [column(20, 30, [[f"The {word} was the subject of chapter {n}, which the committee read with care."]])
             for n, word in enumerate(["harbour", "lighthouse", "ferry", "market"], start=1)]
    whole = lines_pdf(tmp_path / "whole.pdf", pages).read_bytes()
    expected = [text for page in pages for _, _, text in page]
    cut = tmp_path / "cut.pdf"
    cut.write_bytes(whole[:whole.rindex(b"xref")])
    kids = re.search(rb"/Kids \[(\d+) 0 R\s+(\d+) 0 R", whole)
    assert kids is not None
    lost = tmp_path / "lost.pdf"  # the second page's object damaged where it starts
    lost.write_bytes(whole.replace(b"\n%s 0 obj" % kids.group(2), b"\n%s 0 ###" % kids.group(2)))
    with caplog.at_level(logging.WARNING):
        assert extract_pdf(cut).paragraphs == expected
        assert extract_pdf(lost).paragraphs == expected[:1] + expected[2:]
    warnings = [r.getMessage() for r in caplog.records if r.name.startswith("spanseek")]
    assert warnings[0].startswith(f"{cut}: damaged: its cross-reference table is missing or cannot be read")
    assert warnings[1] == (f"{lost}: damaged: 1 of the 4 pages its page tree lists cannot be read (their objects are "
                           "missing or damaged); the rest of it is read")
    with pytest.raises(Unreadable, match="^damaged: .* no text could be read"):
        (tmp_path / "stub.pdf").write_bytes(whole[:whole.index(b"stream")])
        extract_pdf(tmp_path / "stub.pdf")


@pytest.mark.parametrize(("data", "why"), [
    (b"", "an empty file (0 bytes), not a PDF"),
    (b"<!doctype html><html><body>Sorry, not found</body></html>", "not a PDF but an HTML or XML file: a PDF begins with "
                                                                    "%PDF-"),
    (b"PK\x03\x04" + bytes(60), "not a PDF but a zip archive (a Word, PowerPoint or OpenDocument file renamed?): a PDF "
                                "begins with %PDF-"),
    (b"Hello\tthere\x00\x01" + bytes(40), 'not a PDF: it begins with "Hello\\tthere\\x00\\x01\\x00\\x00\\x00", and '
                                           "a PDF begins with %PDF-"),
])
def test_a_file_that_is_no_pdf_is_named_for_what_it_is(tmp_path, data, why):
    """An empty file or another kind of file named .pdf (a web server's error page saved as the download) was "not a
    readable PDF (PDFSyntaxError: No /Root object! - Is this really a PDF?); the file may be truncated, damaged or
    encrypted": it is named for what it is, as a .docx that is no Word file is."""
    (tmp_path / "report.pdf").write_bytes(data)
    with pytest.raises(Unreadable) as refused:
        extract_pdf(tmp_path / "report.pdf")
    assert str(refused.value) == why


def test_a_word_broken_where_its_paragraph_goes_on_in_the_next_column_or_page_is_whole(tmp_path):
    """A word hyphenated at the foot of a column or page, its paragraph going on at the top of the next, read
    "infor- mation" (a word broken inside a block reads whole): it is made whole by the same rules, the document's
    own words deciding; a compound it writes with its hyphen keeps it."""
    known = [["The information desk and the ferry office are both", "open on weekdays, and the well-known cafe too."]]
    first = ["The harbour authority published its annual", "report in March, and it gave the infor-"]
    second = ["mation that the committee asked for about the", "cranes and the ferry timetable of the well-"]
    third = ["known summer season that ended in September."]
    filler = [["Another paragraph fills the page so that it", "looks like a real page of running text with",
               "several lines of body type set in one column."]] * 27
    page = column(20, 30, known + filler)
    page += [(20, page[-1][1] + 8 + 5 * k, line) for k, line in enumerate(first)]
    columns = column(20, 30, [second]) + column(110, 30, [third])
    extracted = extract_pdf(lines_pdf(tmp_path / "broken.pdf", [page, columns]))
    assert extracted.paragraphs[-1] == (
        "The harbour authority published its annual report in March, and it gave the information that the "
        "committee asked for about the cranes and the ferry timetable of the well-known summer season that ended "
        "in September.")


@pytest.mark.parametrize(("end", "top", "expected"), [
    ("new berth fees for the ferries and trawlers -", "which the fishermen had long asked for.",
     "ferries and trawlers - which the fishermen"),
    ("new berth fees for the years 1996-", "(the last of the old board) in full.",
     "the years 1996- (the last of the old board)")], ids=["dash", "range"])
def test_a_hyphen_that_breaks_no_word_at_a_page_s_foot_keeps_its_space(tmp_path, end, top, expected):
    """A paragraph that goes on at the top of the next page after a line ending in a hyphen that breaks no word there
    (a dash set apart, a range before a bracket) reads as one line, a space after the hyphen: it read a line break
    into the paragraph ("trawlers -\\nwhich")."""
    pages = [column(20, 30, [A, ["The harbour board met in March to settle the", end]]), column(20, 30, [[top]])]
    paragraph = extract_pdf(lines_pdf(tmp_path / "dash.pdf", pages)).paragraphs[-1]
    assert "\n" not in paragraph and expected in paragraph


def test_a_page_whose_compressed_content_is_damaged_is_named(tmp_path, caplog):
    """A page whose compressed content stream is damaged read as nothing without a word, the others read: a warning
    names the file and the page."""
    pages = [column(20, 30, [[f"The {word} was the subject of chapter {n}, which the committee read with care."]])
             for n, word in enumerate(["harbour", "lighthouse", "ferry"], start=1)]
    pdf = fpdf.FPDF(unit="mm", format="A4")
    pdf.set_font("helvetica", size=10)
    for lines in pages:
        pdf.add_page()
        for x, y, text in lines:
            pdf.text(x, y, text)
    whole = bytearray(pdf.output())
    second = [m.end() for m in re.finditer(rb"/Filter /FlateDecode\s*/Length \d+\s*>>\s*stream\r?\n", whole)][1]
    whole[second + 4:second + 24] = b"\x13" * 20
    (tmp_path / "torn.pdf").write_bytes(bytes(whole))
    with caplog.at_level(logging.WARNING):
        assert extract_pdf(tmp_path / "torn.pdf").paragraphs == [pages[0][0][2], pages[2][0][2]]
    assert [r.getMessage() for r in caplog.records if r.name.startswith("spanseek")] == [
        f"{tmp_path / 'torn.pdf'}: damaged: the content of page 2 cannot be expanded whole (its compressed data is "
        "damaged): what could be read of it is read; the rest of it is read"]


def test_a_page_count_given_wrong_is_no_damage(tmp_path, caplog):
    """A page tree whose count is more than the pages it holds (as sloppy writers set it), every page of it read, is
    read without a warning of damage."""
    whole = lines_pdf(tmp_path / "whole.pdf", [column(20, 30, [A]), column(20, 30, [B])]).read_bytes()
    (tmp_path / "counted.pdf").write_bytes(whole.replace(b"/Count 2", b"/Count 3", 1))
    with caplog.at_level(logging.WARNING):
        assert extract_pdf(tmp_path / "counted.pdf").paragraphs == [text_of(A), text_of(B)]
    assert not [r for r in caplog.records if r.name.startswith("spanseek")]


def _one_page_pdf(path: Path, content: bytes, width: float = 612, height: float = 792) -> Path:
    """A one-page PDF drawing ``content`` with Courier as /F1."""
    return pdf_of_objects(path, [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 %g %g] /Contents 4 0 R /Resources << /Font << /F1 5 0 R >> >> "
        b">>" % (width, height),
        b"<< /Length %d >>\nstream\n%s\nendstream" % (len(content), content),
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Courier >>"])


def test_a_page_that_sets_each_glyph_apart_takes_no_more_memory_than_one_that_sets_its_lines(tmp_path):
    """Many programs write a page one "Tj" a glyph; pdfminer gives each such operator a copy of the graphic state,
    which each glyph kept: such a page took 1.6 times the memory of the same glyphs set a line at a time (a page of
    1.44M glyphs, 1.5 GB). A glyph keeps none now."""
    import tracemalloc

    words = "the harbour authority handled a record volume of cargo with cranes on the quay".split()
    lines = [" ".join(words[i % 5:] + words[:i % 5]) for i in range(20)]
    by_line = b"BT /F1 8 Tf 10 TL 20 640 Td " + b" ".join(b"(%s) '" % line.encode() for line in lines) + b" ET"
    by_glyph = b"BT /F1 8 Tf " + b" ".join(
        b"1 0 0 1 20 %d Tm " % (630 - 10 * n) + b" ".join(b"(%s) Tj" % c.encode() for c in line)
        for n, line in enumerate(lines)) + b" ET"
    peaks = []
    for name, content in (("lines.pdf", by_line), ("glyphs.pdf", by_glyph)):
        path = _one_page_pdf(tmp_path / name, content)
        extract_pdf(path)  # (pdfminer's modules imported, its fonts' metrics read, outside the count)
        tracemalloc.start()
        try:
            extracted = extract_pdf(path)
            peaks.append(tracemalloc.get_traced_memory()[1])
        finally:
            tracemalloc.stop()
        assert extracted.paragraphs == [" ".join(lines)]
    assert peaks[1] < 1.4 * peaks[0], peaks  # (was 1.6 times; now 1.2)


def test_a_timeline_s_line_at_the_top_of_each_page_is_read_and_the_running_footer_left_out(tmp_path):
    """A line in each page's top margin whose two numbers go up page by page ("Season 2 began in 1902." on page 2)
    was left out as a running head; it is text. The footer "Page n of 3" still goes."""
    bodies = [A, D, E]
    pages = [[(20, 22, f"Season {n} began in {1900 + n}."), *column(20, 32, [body])]
             for n, body in enumerate(bodies, start=1)]
    extracted = extract_pdf(lines_pdf(tmp_path / "timeline.pdf", pages, header=True))
    assert extracted.paragraphs == [part for n, body in enumerate(bodies, start=1)
                                    for part in (f"Season {n} began in {1900 + n}.", text_of(body))]


def test_damage_the_reader_passes_over_is_named_with_its_file_and_pages_in_plain_words(tmp_path, caplog):
    """pdfminer's own warnings reached users in its words and without the file's name ("Could not get FontBBox from
    font descriptor because None cannot be parsed as 4 floats", "Cannot concatenate matrix ..."), and a file cut
    short was "damaged: ... (PDFSyntaxError: No /Root object! - Is this really a PDF?)". One warning names the file
    and each page's damage in the project's words; the text is read."""
    good = b"BT /F1 12 Tf 72 700 Td (The ferry leaves the harbour at noon.) Tj ET"
    bad = b"1 0 0 (x) 0 0 cm BT /F2 12 Tf 72 700 Td (The lighthouse was built in 1854.) Tj ET"
    path = pdf_of_objects(tmp_path / "worn.pdf", [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R 4 0 R] /Count 2 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 5 0 R /Resources << /Font << /F1 7 0 R >> >> >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 6 0 R "
        b"/Resources << /Font << /F1 7 0 R /F2 8 0 R >> >> >>",
        b"<< /Length %d >>\nstream\n%s\nendstream" % (len(good), good),
        b"<< /Length %d >>\nstream\n%s\nendstream" % (len(bad), bad),
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
        b"<< /Type /Font /Subtype /TrueType /BaseFont /Worn /FirstChar 32 /LastChar 126 /Widths [%s] "
        b"/FontDescriptor 9 0 R >>" % b" ".join([b"550"] * 95),
        b"<< /Type /FontDescriptor /FontName /Worn /FontBBox [0 0] /Flags 32 >>"])
    cut = tmp_path / "cut.pdf"
    cut.write_bytes(path.read_bytes()[:path.read_bytes().rindex(b"xref")])
    with caplog.at_level(logging.WARNING):
        for pdf in (path, cut):
            assert extract_pdf(pdf).paragraphs == ["The ferry leaves the harbour at noon.",
                                                   "The lighthouse was built in 1854."]
    assert not [r for r in caplog.records if r.name.startswith("pdfminer")]
    warnings = [r.getMessage() for r in caplog.records]
    damage = ("on page 2, instructions in its content that cannot be carried out (damaged, missing or of the wrong "
              "kind) are passed over; the rest of it is read")  # (a font without a box is read as any: no damage)
    assert warnings == [f"{path}: damaged: {damage}", (
        f"{cut}: damaged: its cross-reference table is missing or cannot be read (the file is cut short: its "
        f"{len(cut.read_bytes()):,} bytes end without the end-of-file marker (%%EOF) a PDF ends with), so it is read "
        f"from the objects it holds whole; {damage}")]
    (tmp_path / "stub.pdf").write_bytes(b"%PDF-1.7\n1 0 obj\n<< /Type /Catalog")  # (was "not a readable PDF
    with pytest.raises(Unreadable) as refused:  # (PDFSyntaxError: No /Root object! - Is this really a PDF?)")
        extract_pdf(tmp_path / "stub.pdf")
    assert str(refused.value) == (
        "not a readable PDF: no page could be found in it: its cross-reference table and catalog (the root of its "
        "pages) are missing or damaged; the file is cut short: its 34 bytes end without the end-of-file marker "
        "(%%EOF) a PDF ends with")


def test_a_pdf_cut_short_inside_its_trailer_reads_its_pages(tmp_path, caplog):
    """A PDF cut short inside its trailer, after its cross-reference table (every object whole), was refused: "not a
    readable PDF (PDFNoValidXRef: Unexpected EOF - file corrupted)", where one cut before its table was read. It is
    read from the objects it holds, with the warning of a file cut short."""
    pages = [column(20, 30, [[f"The {word} was the subject of chapter {n}, which the committee read with care."]])
             for n, word in enumerate(["harbour", "lighthouse"], start=1)]
    whole = lines_pdf(tmp_path / "whole.pdf", pages).read_bytes()
    cut = tmp_path / "cut.pdf"
    cut.write_bytes(whole[:whole.rindex(b"trailer") + 10])
    with caplog.at_level(logging.WARNING):
        assert extract_pdf(cut).paragraphs == [text for page in pages for _, _, text in page]
    assert [r.getMessage() for r in caplog.records] == [
        f"{cut}: damaged: its cross-reference table is missing or cannot be read (the file is cut short: its "
        f"{len(cut.read_bytes()):,} bytes end without the end-of-file marker (%%EOF) a PDF ends with), so it is read "
        "from the objects it holds whole; the rest of it is read"]


def test_a_pdf_s_bookmarks_give_its_paragraphs_their_sections(tmp_path):
    """A PDF's outline (the bookmarks a viewer lists) was not read: its passages had a page and no section, where a
    Word file's have their heading path. Each paragraph has the path of the bookmarks it falls under (on its page or
    a page before it); text before the first bookmark has none."""
    pdf = fpdf.FPDF(unit="mm", format="A4")
    pdf.set_font("helvetica", size=11)

    def write(text: str) -> None:
        pdf.multi_cell(0, 6, text, new_x="LMARGIN", new_y="NEXT")
        pdf.ln(12)

    pdf.add_page()
    write("Before any bookmark, the preface thanks the harbour staff for their help.")
    pdf.start_section("1 Harbours", level=0)
    write("The harbour has four berths and a ferry terminal on the north quay.")
    pdf.start_section("1.1 Berths", level=1)
    write("Each berth takes a ship of up to two hundred metres.")
    pdf.add_page()
    write("The berths were dredged in 1990 to a depth of twelve metres.")
    pdf.start_section("2 Lighthouses", level=0)
    write("The lighthouse was built in 1854 and automated in 1987.")
    pdf.output(str(tmp_path / "guide.pdf"))
    extracted = extract_pdf(tmp_path / "guide.pdf")
    assert extracted.paragraph_meta == [
        {"page": 1}, {"page": 1, "section": "1 Harbours"}, {"page": 1, "section": "1 Harbours > 1.1 Berths"},
        {"page": 2, "section": "1 Harbours > 1.1 Berths"}, {"page": 2, "section": "2 Lighthouses"}]


def _outlined_pdf(path: Path, outline: list[bytes], text: bytes = b"(The castle was built in 1250.) Tj",
                  catalog: bytes = b"") -> Path:
    """A one-page PDF (its page object 3) of ``text`` set from (72, 700) in Helvetica 12, with an outline: object 6 its
    root (``/First 7 0 R``), ``outline`` the objects from 7 on; ``catalog``, more of the catalog's entries."""
    content = b"BT /F1 12 Tf 72 700 Td %s ET" % text
    return pdf_of_objects(path, [
        b"<< /Type /Catalog /Pages 2 0 R /Outlines 6 0 R %s >>" % catalog,
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R /Resources << /Font << /F1 5 0 R >> >> >>",
        b"<< /Length %d >>\nstream\n%s\nendstream" % (len(content), content),
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
        b"<< /Type /Outlines /First 7 0 R >>",
        *outline])


def test_an_outline_that_loops_or_leads_nowhere_is_read_in_bounded_time(tmp_path):
    """A hostile outline whose entries lead to each other (/Next back to the first) is read once through; a bookmark
    to no page of the file (a missing named destination) gives no section."""
    path = _outlined_pdf(tmp_path / "loop.pdf", [
        b"<< /Title (History) /Parent 6 0 R /Dest [3 0 R /XYZ 0 792 0] /Next 8 0 R /First 7 0 R /Last 7 0 R >>",
        b"<< /Title (Nowhere) /Parent 6 0 R /Dest (missing) /Next 7 0 R >>"])
    start = time.process_time()
    extracted = extract_pdf(path)
    assert time.process_time() - start < 1.5
    assert extracted.paragraphs == ["The castle was built in 1250."]
    assert extracted.paragraph_meta == [{"page": 1, "section": "History"}]


def test_an_outline_of_thousands_of_named_destinations_is_read_in_time_linear_in_its_size(tmp_path):
    """Each bookmark to a named destination was looked up through pdfminer's ``get_dest``, which reads the name tree's
    node afresh each time: 4,000 bookmarks took 3.3 s of CPU, 6,000 in one node 37 s. The names are read once; a name tree
    of several nodes (with their ranges) and a PDF 1.1 catalog's /Dests both give their pages (a /Dests name was not
    found beside a name tree with ranges: pdfminer compared the name with the tree's strings, a TypeError)."""
    count = 4000

    def leaf(numbers: range) -> bytes:
        return b"<< /Limits [(d%05d) (d%05d)] /Names [%s] >>" % (numbers[0], numbers[-1], b" ".join(
            b"(d%05d) [3 0 R /XYZ 0 %d 0]" % (n, 792 - n * 300 // count) for n in numbers))

    entries = [b"<< /Title (Part %d) /Dest (d%05d) /Next %d 0 R >>" % (n, n, 8 + n) for n in range(count)]
    entries.append(b"<< /Title (The moat) /A << /S /GoTo /D /moat >> >>")  # (last: the moat, by the catalog's /Dests)
    path = _outlined_pdf(tmp_path / "named.pdf", [*entries, b"<< /Kids [%d 0 R %d 0 R] >>" % (
        9 + count, 10 + count), leaf(range(0, 3900)), leaf(range(3900, count))],
        b"(The castle was built in 1250.) Tj 0 -400 Td (The moat was dug in 1300.) Tj",
        b"/Names << /Dests %d 0 R >> /Dests << /moat [3 0 R /XYZ 0 320 0] >>" % (8 + count))
    start = time.process_time()
    extracted = extract_pdf(path)
    assert time.process_time() - start < 1.5  # (was 3.3 s; now some 0.5 s)
    # the castle's line (its top at 711) falls under the last bookmark whose view starts up to a line below its top:
    # Part 1266's, at 792 - 1266 * 300 // 4000 = 698
    assert extracted.paragraph_meta == [{"page": 1, "section": "Part 1266"}, {"page": 1, "section": "The moat"}]


def test_an_outline_nested_past_nine_levels_gives_the_path_of_its_first_nine(tmp_path):
    """Bookmarks nested each in the one before gave a path of every level: 10,000 levels gave each paragraph a section
    of 355,000 characters and took 412 MB to read. The path has at most nine levels, as a Word file's headings; a
    bookmark deeper falls in the section of its ancestor at the ninth. (The outline's one top bookmark is its title,
    in no path.)"""
    depth = 12
    path = _outlined_pdf(tmp_path / "deep.pdf", [
        *(b"<< /Title (Level %d) /Dest [3 0 R /XYZ 0 %d 0] %s >>" % (
            n, 792 - n, b"/First %d 0 R" % (8 + n) if n < depth - 1 else b"") for n in range(depth))])
    assert extract_pdf(path).paragraph_meta == [{"page": 1, "section": " > ".join(f"Level {n}" for n in range(1, 9))}]


_US_LETTER = "its page size is missing or damaged: it is read as US Letter"


@pytest.mark.parametrize(("without", "box", "said"), [
    (1, b"", _US_LETTER), (2, b"", _US_LETTER),
    (2, b"/MediaBox [0 0 595 842] /CropBox [0 0 x]",  # (was said to be read as US Letter: it is read at its media box)
     "its crop box (the part of the page a viewer shows) is damaged: the whole page is read")])
def test_a_page_without_its_size_is_named_by_its_own_number(tmp_path, caplog, without, box, said):
    """pdfminer warns of a page without a media box as it makes the page, before it is read: the warning named the
    page before it ("on page 1" for the second), or none for the first. A damaged crop box was said to be read as US
    Letter, where the whole page, its media box, is read."""
    texts = [b"BT /F1 12 Tf 72 700 Td (The ferry leaves the harbour at noon.) Tj ET",
             b"BT /F1 12 Tf 72 700 Td (The lighthouse was built in 1854.) Tj ET"]
    boxes = [box if n == without else b"/MediaBox [0 0 612 792]" for n in (1, 2)]
    path = pdf_of_objects(tmp_path / "sizeless.pdf", [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R 4 0 R] /Count 2 >>",
        *(b"<< /Type /Page /Parent 2 0 R %s /Contents %d 0 R /Resources << /Font << /F1 7 0 R >> >> >>" % (box, 5 + n)
          for n, box in enumerate(boxes)),
        *(b"<< /Length %d >>\nstream\n%s\nendstream" % (len(text), text) for text in texts),
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"])
    with caplog.at_level(logging.WARNING):
        assert extract_pdf(path).paragraphs == ["The ferry leaves the harbour at noon.", "The lighthouse was built in 1854."]
    assert [r.getMessage() for r in caplog.records] == [
        f"{path}: damaged: on page {without}, {said}; the rest of it is read"]


def test_a_bookmark_whose_title_is_held_in_another_object_gives_its_section(tmp_path):
    """A bookmark's /Title may be a reference to a string elsewhere in the file, as an info dictionary's title often
    is: such a bookmark was passed over (no section)."""
    path = _outlined_pdf(tmp_path / "held.pdf", [b"<< /Title 8 0 R /Dest [3 0 R /XYZ 0 792 0] >>", b"(History)"])
    assert extract_pdf(path).paragraph_meta == [{"page": 1, "section": "History"}]


def test_damage_on_many_pages_is_named_by_runs_of_pages(tmp_path, caplog):
    """A file damaged on most of its pages named each of them ("on pages 2, 3, 4, 5, 7, ..."): a run of pages one
    after another is named by its first and last."""
    good = b"BT /F1 12 Tf 72 400 Td (The ferry leaves the harbour at noon.) Tj ET"  # (mid-page: no running head)
    bad = b"1 0 0 (x) 0 0 cm BT /F1 12 Tf 72 400 Td (The lighthouse was built in 1854.) Tj ET"
    contents = [good, bad, bad, bad, good, bad]
    count = len(contents)
    path = pdf_of_objects(tmp_path / "worn.pdf", [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [%s] /Count %d >>" % (b" ".join(b"%d 0 R" % (4 + n) for n in range(count)), count),
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
        *(b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents %d 0 R /Resources << /Font << /F1 3 0 R "
          b">> >> >>" % (4 + count + n) for n in range(count)),
        *(b"<< /Length %d >>\nstream\n%s\nendstream" % (len(content), content) for content in contents)])
    with caplog.at_level(logging.WARNING):
        extract_pdf(path)
    assert [r.getMessage() for r in caplog.records] == [
        f"{path}: damaged: on pages 2-4, 6, instructions in its content that cannot be carried out (damaged, missing "
        "or of the wrong kind) are passed over; the rest of it is read"]


def test_pages_are_named_one_by_one_or_by_runs():
    from spanseek.indexer.pdf_notes import page_list

    assert page_list([7]) == "page 7"
    assert page_list([3, 5]) == "pages 3, 5"
    assert page_list([*range(3, 42), 57]) == "pages 3-41, 57"


@pytest.mark.parametrize(("title", "read"), [
    (b"(\xef\xbb\xbfH\xc3\xa4fen)", "H\u00e4fen"),  # UTF-8 with its mark (PDF 2.0): read "\u00ef\u00bb\u00bfH\u00c3\u00a4fen"
    (b"<fffe4c00650075006300680074007400fc0072006d006500>", "Leuchtt\u00fcrme"),  # UTF-16LE with its mark
    (b"<feff001b656e001b0048006100760065006e>", "Haven"),  # UTF-16BE with a language tag (ESC en ESC)
    (b"(Ha\\374fen)", "Ha\u00fcfen"),  # PDFDocEncoding
])
def test_a_bookmark_s_title_in_utf_8_or_utf_16le_reads_as_written(tmp_path, title, read):
    """pdfminer reads a text string's UTF-16BE mark only: a title in UTF-8 (PDF 2.0) or UTF-16LE with their marks read
    as PDFDocEncoding, "\u00ef\u00bb\u00bfH\u00c3\u00a4fen", "\u00ff\u00feL\\x00e\\x00u..."."""
    path = _outlined_pdf(tmp_path / "marked.pdf", [b"<< /Title %s /Dest [3 0 R /XYZ 0 792 0] >>" % title])
    assert extract_pdf(path).paragraph_meta == [{"page": 1, "section": read}]


def test_the_outline_s_one_top_bookmark_the_document_s_title_begins_no_section(tmp_path):
    """Many programs write the document's title as the outline's one top bookmark, the chapters under it: every
    section began "Castle Guide > ". The text under the title alone keeps it as its section."""
    path = _outlined_pdf(tmp_path / "guide.pdf", [
        b"<< /Title (Castle Guide) /Dest [3 0 R /XYZ 0 792 0] /First 8 0 R /Last 9 0 R >>",
        b"<< /Title (History) /Dest [3 0 R /XYZ 0 600 0] /Next 9 0 R /First 10 0 R /Last 10 0 R >>",
        b"<< /Title (Moat) /Dest [3 0 R /XYZ 0 400 0] >>",
        b"<< /Title (Builders) /Dest [3 0 R /XYZ 0 500 0] >>"],
        b"(A guide for visitors.) Tj 0 -150 Td (The castle was built in 1250.) Tj 0 -100 Td (Masons came from York.) Tj"
        b" 0 -100 Td (The moat was dug in 1300.) Tj")
    assert [meta.get("section") for meta in extract_pdf(path).paragraph_meta] == [
        "Castle Guide", "History", "History > Builders", "Moat"]


def test_a_timeline_s_line_on_the_text_is_read_and_a_drawing_set_s_page_and_sheet_head_left_out(tmp_path):
    """A line at the top of each page's text whose one number goes up page by page ("In 1902 the harbour froze." on
    page 2) was left out as a running head, as "Page 2" is; a head whose two numbers both go up ("Page 2 (sheet 4)")
    was read on every page, glued to the text over the page break. A line set as a head (apart from the text, in the
    margin) goes; one a paragraph's spacing over the text is text."""
    bodies = [A, D, E, D]
    pages = [[(20, 12, f"Page {n} (sheet {n + 2})"), *column(20, 30, [[f"In {1900 + n} the harbour froze."], body])]
             for n, body in enumerate(bodies, start=1)]
    assert extract_pdf(lines_pdf(tmp_path / "timeline.pdf", pages)).paragraphs == [
        part for n, body in enumerate(bodies, start=1) for part in (f"In {1900 + n} the harbour froze.", text_of(body))]


def test_each_column_s_paragraphs_fall_in_the_section_of_the_bookmarks_read_before_them(tmp_path):
    """On a page of two columns, a bookmark to the right column's heading was taken to head every paragraph below
    its height on the page, the left column's (read before it) too: they all fell in the right column's section.
    A bookmark heads the paragraphs read from the one its view lands on: its heading (a paragraph of its title), else
    the first in the column its view's left edge lies in."""
    pdf = fpdf.FPDF(format="A4")
    pdf.set_font("helvetica", size=10)
    pdf.add_page()
    for x, heading, lines in ((20, "1 Harbours", A + D), (110, "2 Lighthouses", C + E)):
        pdf.set_xy(x, 20)
        pdf.start_section(heading)
        pdf.text(x, 25, heading)
        for k, line in enumerate(lines):
            pdf.text(x, 35 + 5 * k, line)
    pdf.output(str(tmp_path / "columns.pdf"))
    extracted = extract_pdf(tmp_path / "columns.pdf")
    assert list(zip(extracted.paragraphs, [m.get("section") for m in extracted.paragraph_meta], strict=True)) == [
        ("1 Harbours", "1 Harbours"), (text_of(A + D), "1 Harbours"),
        ("2 Lighthouses", "2 Lighthouses"), (text_of(C + E), "2 Lighthouses")]
    left, right = (b" ".join(b"(%s) Tj 0 -14 Td" % line.encode() for line in lines) for lines in (A + D, C + E))
    content = b"BT /F1 10 Tf 57 700 Td %s ET BT /F1 10 Tf 312 700 Td %s ET" % (left, right)
    path = pdf_of_objects(tmp_path / "edges.pdf", [
        b"<< /Type /Catalog /Pages 2 0 R /Outlines 6 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R /Resources << /Font << /F1 5 0 R >> >> >>",
        b"<< /Length %d >>\nstream\n%s\nendstream" % (len(content), content),
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
        b"<< /Type /Outlines /First 7 0 R >>",
        b"<< /Title (Ports) /Dest [3 0 R /XYZ 57 712 0] /Next 8 0 R >>",
        b"<< /Title (Lights) /Dest [3 0 R /XYZ 312 712 0] >>"])
    assert [m.get("section") for m in extract_pdf(path).paragraph_meta] == ["Ports", "Lights"]


def test_thousands_of_bookmarks_on_a_page_of_thousands_of_lines_are_placed_in_bounded_time():
    from spanseek.indexer.pdf_blocks import Block
    from spanseek.indexer.pdf_outline import Bookmark, Outline

    blocks = [Block(f"line {i}\n", 50, 10_000 - 2 * i, 300, 10_010 - 2 * i, 10, "") for i in range(5000)]
    outline = Outline([Bookmark((f"Part {n}",), 1, 10_000 - n, 60.0 + n) for n in range(10_000)])
    start = time.process_time()
    outline.place([blocks])
    assert time.process_time() - start < 1.0  # (some 0.06 s; each bookmark scanning the page took 13 s)
    # (block i's top, less a line, is 10,000 - 2i: Part 9999, at 1, is under the last)
    assert outline.section(1, 0) == "Part 0" and outline.section(1, 4999) == "Part 9998"
