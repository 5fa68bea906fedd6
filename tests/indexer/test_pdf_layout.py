"""A PDF page's text boxes -> paragraphs in reading order (indexer.pdf_layout), on boxes placed by hand: columns,
tables, running headers, words hyphenated at line ends, right-to-left lines.

    .venv/bin/python -m pytest -q tests/indexer/test_pdf_layout.py
"""

from __future__ import annotations

import math

import pytest

from spanseek.indexer import pdf_layout
from spanseek.indexer.pdf_layout import Block, dehyphenate, logical, reading_order, running


class Glyph:
    def __init__(self, text: str, x0: float) -> None:
        self.text, self.x0 = text, x0

    def get_text(self) -> str:
        return self.text


class Line:
    """A line of text as pdfminer gives it: its box (points, y upwards) and its glyphs, 5 points apart."""

    def __init__(self, text: str, x0: float, y0: float, x1: float | None = None, size: float = 10) -> None:
        self.text, self.x0, self.y0, self.size = text, x0, y0, size
        self.x1 = x1 if x1 is not None else x0 + 5 * len(text)
        self.y1, self.height = y0 + size, size

    def get_text(self) -> str:
        return self.text + "\n"

    def __iter__(self):
        return iter([Glyph(c, self.x0 + 5 * i) for i, c in enumerate(self.text)] + [Glyph("\n", self.x1)])


class PlacedRightToLeft(Line):
    def __iter__(self):
        return iter([Glyph(c, self.x1 - 5 * i) for i, c in enumerate(self.text)])


class Box:
    """A text box: its lines, 12 points apart, from the top one down."""

    def __init__(self, texts: list[str], x0: float, top: float, width: float = 200, size: float = 10) -> None:
        self.lines = [Line(t, x0, top - 12 * i - size, x0 + width if i < len(texts) - 1 else None, size)
                      for i, t in enumerate(texts)]
        self.x0, self.x1 = x0, max(line.x1 for line in self.lines)
        self.y0, self.y1 = self.lines[-1].y0, self.lines[0].y1
        self.height = self.y1 - self.y0

    def get_text(self) -> str:
        return "".join(line.get_text() for line in self.lines)

    def __iter__(self):
        return iter(self.lines)


PROSE = "the lines of a column of running text are long"  # 47 characters


def column(x0: float, top: float, names: list[str]) -> list[Box]:
    """Paragraphs of three lines each, 12 points apart, one under the other; each paragraph's first line its name."""
    return [Box([name, PROSE, PROSE], x0, top - 48 * i) for i, name in enumerate(names)]


def texts(boxes) -> list[str]:
    return [b.get_text().split("\n")[0] for b in boxes]


def test_columns_are_read_one_after_the_other_under_a_title_and_over_a_footer():
    """A title over both columns, two columns whose paragraphs and headings lie side by side, a centred footer
    across the gutter: each column is read whole, the left one first (pdfminer put the right column's short heading
    among the left column's paragraphs)."""
    title = Box(["A title over both columns of the page, set in large type"], 50, 760, size=16)
    left = column(50, 720, ["left 1", "left 2", "left 3"])
    right = column(300, 720, ["right 1", "right 2"]) + [Box(["Heading"], 300, 624)]
    footer = Box(["Page 1 of 9"], 250, 40)
    page = [footer, *right, *left, title]
    assert texts(reading_order(page)) == [title.get_text().strip(), "left 1", "left 2", "left 3", "right 1", "right 2",
                                          "Heading", "Page 1 of 9"]


def test_three_columns_and_a_caption_across_them_cut_the_page_into_bands():
    above = column(40, 700, ["a1", "a2"]) + column(210, 700, ["b1", "b2"]) + column(380, 700, ["c1", "c2"])
    caption = Box(["Figure 1: a caption that runs across all three of the columns"], 40, 590)
    caption.x1 = caption.lines[0].x1 = 530
    below = column(40, 560, ["a3"]) + column(210, 560, ["b3"]) + column(380, 560, ["c3"])
    for box in above + below:
        box.x1 = box.x0 + 150
        for line in box.lines:
            line.x1 = min(line.x1, box.x0 + 150)
    order = texts(reading_order([*below, caption, *reversed(above)]))
    assert order == ["a1", "a2", "b1", "b2", "c1", "c2", caption.get_text().strip(), "a3", "b3", "c3"]


def test_a_table_is_read_row_by_row_and_a_row_is_one_paragraph():
    """A table's columns of short cells are no text columns: the rows are read top to bottom, a row's cells left
    to right, and each row is one paragraph (the cells a space apart)."""
    cells = [Box([text], x, 700 - 14 * r) for r, row in enumerate([("Terminal", "Berths", "Cranes"),
                                                                   ("Northern", "4", "14"), ("Ferry", "2", "0")])
             for x, text in zip((50, 200, 300), row, strict=True)]
    runs = pdf_layout.paragraphs(reading_order(list(reversed(cells))))
    assert [Block.of(run).text for run in runs] == ["Terminal Berths Cranes\n", "Northern 4 14\n", "Ferry 2 0\n"]


def test_a_single_column_with_a_short_line_on_the_right_is_not_cut():
    body = [Box([PROSE * 2, PROSE * 2], 50, 700 - 40 * i, width=470) for i in range(4)]
    date = Box(["12 May 2024"], 460, 740)
    assert reading_order([*body, date]) == [date, *body]


def margin(text: str, top: float = 812, size: float = 8) -> Block:
    """A one-line block whose top is ``top`` points up an A4 page (842 high): by default in its top margin."""
    return Block(text + "\n", 50, top - size, 300, top, size, text)


def running_texts(pages: list[list[Block]]) -> list[list[str]]:
    """The texts of each page's blocks that ``running`` finds to be running headers or footers."""
    found = running([(blocks, 0, 842) for blocks in pages])
    return [[blocks[i].text.strip() for i in sorted(indices)] for blocks, indices in zip(pages, found, strict=True)]


def test_running_headers_and_footers_repeat_on_three_pages_or_on_every_page_of_two():
    assert pdf_layout.margin_edge(margin("Annual report"), 0, 842) == "top"
    assert pdf_layout.margin_edge(margin("Annual report", top=40), 0, 842) == "bottom"
    assert pdf_layout.margin_edge(margin("body", top=400), 0, 842) is None
    header, other = margin("Annual report"), margin("Chapter 2", top=780)
    assert running_texts([[header], [header, other], [header], [other], []]) == [
        ["Annual report"], ["Annual report"], ["Annual report"], [], []]  # on 3 pages of 5; the other on 2
    assert running_texts([[header], [header]]) == [["Annual report"], ["Annual report"]]
    assert running_texts([[header]]) == [[]]


@pytest.mark.parametrize("head", [
    "Annual Report 2023 | Page {n} of 8",  # a page number that follows the pages, a year and a count that stay
    "Journal of Glaciology 64 (2019) {n230}",  # the journal's page 231 on the file's first page
    "Company confidential - {n11} of 40",  # the footer of an excerpt that starts on its document's page 12
    "{n}",  # a bare page number
    "Kellerton Harbour Authority",
    "Chapter {c} - Harbours and Lighthouses",  # the chapter's number changes at page 5, its title does not
    "Chapter {c}",
])
def test_running_heads_are_found_with_their_page_numbers_and_chapters(head):
    """A running head or foot repeats its words in one place on every page, and each of its numbers either stays
    ("2023", "of 40", the chapter's number within a chapter) or follows the pages ("Page 3", a journal's page 233
    on the file's page 3)."""
    pages = []
    for n in range(1, 9):
        text = head.format(n=n, n230=n + 230, n11=n + 11, c=3 if n < 5 else 4)
        pages.append([margin(text), margin(f"Body text of page {n + 1}", top=600), margin(text, top=40)])
    assert running_texts(pages) == [[blocks[0].text.strip(), blocks[2].text.strip()] for blocks in pages]


@pytest.mark.parametrize("rows", [
    ["Vessel {i} {t}"],  # a long table's first row on each page: numbers that follow neither the pages
    ["Vessel {i} {t}", "Vessel {j} {u}"],  # nor one another
    ["{i}", "{j}"],  # a column of numbers
    ["2024-05-01 12:{i}:03 crane {j} stopped"],  # log lines
])
def test_rows_at_the_tops_of_pages_that_differ_in_their_numbers_are_text(rows):
    """Rows at the top of each page whose text differs only in numbers were all left out as a running header: a
    table spanning pages lost its first rows on each page."""
    pages = [[margin(row.format(i=i, j=i + 1, t=1000 + i, u=1001 + i), top=812 - 14 * k) for k, row in enumerate(rows)]
             for i in (0, 33, 66)]  # pages of 33 rows
    assert running_texts(pages) == [[], [], []]


@pytest.mark.parametrize("line", [
    "In {y} the harbour froze.",  # a timeline's: one number that goes up with the pages
    "Season {n} began in {y}",  # two
    "Page {n} (sheet {m})",  # a drawing set's head: two, both the page's
    "{y} - page {n}",
    "Page {n} - Annual Report 2023",  # the page's number goes up, the year stays
    "Annual Report {y}",  # the page's number, give or take an offset
    # a court filing's stamp and a Bates number: the page counted twice, beside numbers that stay
    "Case 1:20-cv-01234-ABC Document 45 Filed 03/01/21 Page {n} of 40 PageID #: {y}",
    "Page {n} of 40 - Bates ABC-{y}",
])
@pytest.mark.parametrize("set_as", ["head", "on the text", "large"])
def test_a_margin_line_whose_numbers_go_up_with_the_pages_is_a_head_only_where_it_is_set_as_one(line, set_as):
    """A line in each page's top margin, the same words but for numbers that go up page by page, is a page's head
    ("Page 3 (sheet 5)") or a line of its text ("In 1903 the harbour froze.", a timeline's): its numbers cannot tell
    (a line with one such number was always a head, and one whose numbers all went up always text: the timeline's
    line was left out, the drawing set's head kept). Its setting tells: apart from the text, in type no larger than
    the body's, it is a head; a paragraph's spacing over the text under it, or in larger type (a chronicle's year),
    it is the page's text."""
    prose = "The text of the page about the {0}, in the type most of the document is set in. " * 3
    found = running_texts([[margin(line.format(n=n, m=n + 2, y=1900 + n), size=12 if set_as == "large" else 8),
                            margin(prose.format(topic), top=800 if set_as == "on the text" else 600)]
                           for n, topic in enumerate(["harbour", "quay", "pier", "dock", "berth"], start=1)])
    assert found == [[line.format(n=n, m=n + 2, y=1900 + n)] if set_as == "head" else [] for n in range(1, 6)]


def test_a_footer_set_as_one_on_most_pages_goes_on_a_page_whose_text_runs_down_to_it():
    """A footer whose page number goes up with the pages, apart from the text on most of its pages, is a footer on
    the page where a table's rows run down to just above it too."""
    prose = "The text of the page about the {0}, in the type most of the document is set in. " * 3
    pages = [[margin(prose.format(topic), top=600 if n < 4 else 52), margin(f"Annual Report 2023 | {n}", top=40)]
             for n, topic in enumerate(["harbour", "quay", "pier", "dock"], start=1)]
    assert running_texts(pages) == [[f"Annual Report 2023 | {n}"] for n in range(1, 5)]


def test_a_literal_hash_sign_or_a_very_long_number_in_a_margin_does_not_stop_the_reading():
    """"Form #" on one page and "Form 2" on the next read alike once numbers are "#"; they were one group, and the
    page with fewer numbers failed the whole file (zip() of unequal lengths). A number of more than 4,300 digits
    failed int(). The first is text; the second, on every page, a running head."""
    pages = [[margin(text), margin(f"Body text of page {n}", top=600)]
             for n, text in enumerate(["Form #", "Form 2", "Form 3", "Form 4"], start=1)]
    assert running_texts(pages) == [[], ["Form 2"], ["Form 3"], ["Form 4"]]
    digits = "3" * 5000
    assert running_texts([[margin(digits)]] * 3) == [[digits]] * 3
    assert running_texts([[margin(f"Id {'1' * 5000}")], [margin(f"Id {'2' * 5000}")], [margin("Id 7")]]) == [
        [], [], []]


def test_the_same_words_in_other_places_are_no_running_head():
    pages = [[margin("Kellerton Harbour Authority", top=812 - 30 * n)] for n in range(3)]
    assert running_texts(pages) == [[], [], []]


@pytest.mark.parametrize(("texts", "expected"), [
    (["the infor-\nmation is here\n", "more information\n"], "the information is here\n"),  # the word is known whole
    (["a well-\nknown port\n", "the well-known port\n"], "a well-known port\n"),  # the compound is known
    (["COVID-\n19 cases\n", "Anglo-\nSaxon kings\n"], "COVID-19 cases\n"),  # a digit or capital keeps it
    (["soft\u00ad\nhyphen\n"], "softhyphen\n"),
])
def test_words_broken_at_line_ends_are_whole_by_the_document_s_own_words(texts, expected):
    assert dehyphenate(texts)[0] == expected


def test_a_hyphen_at_a_line_end_before_a_conjunction_is_a_suspended_one():
    """A line-end hyphen before "and", "or", "und" (and a word after it) leaves the word's second part to the word
    after the conjunction: "trans-\\nand intercontinental" read "transand intercontinental" in a document set with
    hyphenation. It keeps its hyphen and a space; a word the document holds whole ("thousand") is still joined."""
    text = ("the trans-\nand intercontinental ferries, the pre-\nor post-war cranes, the Ein-\nund Ausgang and\n"
            "a thous-\nand ships, a thousand more and some appro-\nval\n")
    assert dehyphenate([text])[0] == ("the trans- and intercontinental ferries, the pre- or post-war cranes, the Ein- "
                                     "und Ausgang and\na thousand ships, a thousand more and some approval\n")


def test_a_line_end_hyphen_before_a_conjunction_and_a_hyphen_is_a_compound_s():
    """A compound through a conjunction broken at a line end ("rock-\\nand-roll") read "rockand-roll" in a document
    set with hyphenation: the hyphen is kept. Before "or" or "nor" hyphenation breaks words ("gover-\\nnor-general",
    "col-\\nor-coded" outnumber "more-or-less"), which are joined there as before; without hyphenation both keep it."""
    prose = "a line that ends in a whole word\n" * 20
    text = "rock-\nand-roll, black-\nand-white, gover-\nnor-general, col-\nor-coded, some appro-\nval, some deli-\nvery\n"
    assert dehyphenate([prose + text])[0] == prose + (
        "rock-and-roll, black-and-white, governor-general, color-coded, some approval, some delivery\n")
    assert dehyphenate([prose * 4 + "rock-\nand-roll, all-\nor-nothing\n"])[0].endswith("rock-and-roll, all-or-nothing\n")


def test_an_unknown_broken_word_follows_the_document_s_hyphenation():
    """A word found nowhere else is joined in a document set with hyphenation (many line ends break a word) and
    keeps its hyphen in one that is not (a line end then breaks a compound at its own hyphen)."""
    prose = "a line that ends in a whole word\n" * 20
    hyphenated = [prose + "some appro-\nval and\nsome deli-\nvery and\nsome tran-\nsit\n"]
    plain = [prose * 3 + "a snow-\nmobile\n"]
    assert dehyphenate(hyphenated)[0].endswith("some approval and\nsome delivery and\nsome transit\n")
    assert dehyphenate(plain)[0].endswith("a snow-mobile\n")


def test_right_to_left_lines_are_put_in_reading_order():
    """A PDF holds an Arabic or Hebrew line as it is shown, left to right: it is reversed, except its numbers and
    Latin words; a glyph standing for two letters (lam-alef) keeps their order; presentation forms become letters."""
    assert logical(list(".1854 תנשב הנבנ רולדגמה\n")) == "המגדלור נבנה בשנת 1854.\n"
    assert logical(list("ןוטרלק Harland yard לש")) == "של Harland yard קלרטון"
    assert logical(["ة", "ث", "\u0644\u0627", "ث"]) == "ثلاثة"  # one glyph for lam-alef: not reversed inside
    assert logical(list("\ufee2\ufee0\ufecb")) == "علم"  # final, medial and initial forms
    assert logical(list("(1) קרפ")) == "פרק (1)"  # a bracket is shown mirrored in right-to-left text
    assert logical(list("an ordinary line\n")) == "an ordinary line\n"


def test_a_right_to_left_line_the_pdf_holds_in_reading_order_is_left_as_it_is():
    shown = Box([".1854 תנשב הנבנ רולדגמה"], 100, 700)  # glyphs placed left to right, as shown
    held = Box(["המגדלור נבנה בשנת 1854."], 100, 700)
    held.lines[0].__class__ = PlacedRightToLeft  # the glyphs in reading order, each to the left of the one before
    assert pdf_layout.text(shown) == pdf_layout.text(held) == "המגדלור נבנה בשנת 1854.\n"


def test_the_title_is_the_first_page_s_largest_type_when_it_stands_out():
    body = [Block("text\n" * 3, 50, 500 - 50 * i, 500, 540 - 50 * i, 10, "text\n" * 3) for i in range(5)]
    title = Block("A History of the Harbour\nby its Authority\n", 50, 700, 500, 760, 18, "A History of the Harbour\n")
    assert pdf_layout.title_block([title, *body], 0, 842) is title
    small = Block("Introduction\n", 50, 700, 500, 711, 11, "Introduction\n")  # a heading barely larger than text
    assert pdf_layout.title_block([small, *body], 0, 842) is None


def test_tables_put_cells_in_the_header_s_columns_and_end_at_a_row_that_does_not_fit():
    """``tables`` finds a run of rows under a bold first row, places each cell in the header's column by where it
    lies (an empty cell is ""), and ends the table at a row with two cells in one column or a block that is no row;
    a first row not in bold is no header."""
    def row(cells, bold=False):
        return Block(" ".join(t for t, _, _ in cells), 50, 0, 400, 10, 10, "", tuple(cells), bold)

    head = row([("Terminal", 50, 100), ("Berths", 200, 240), ("Cranes", 300, 340)], bold=True)
    blocks = [row([("Ferry", 50, 80), ("0", 330, 336)]), head,
              row([("Northern", 50, 100), ("4", 230, 236), ("14", 324, 336)]),
              row([("Ferry", 50, 80), ("0", 330, 336)]),
              row([("Notes", 50, 80), ("one", 190, 210), ("two", 215, 245)]),  # two cells under "Berths": ends it
              row([("Wick", 50, 80), ("2", 230, 236)])]
    assert pdf_layout.tables(blocks) == [(1, [["Terminal", "Berths", "Cranes"], ["Northern", "4", "14"],
                                              ["Ferry", "", "0"]])]
    assert pdf_layout.tables([head, Block("Text after the header.", 50, 0, 400, 10, 10, "")]) == []
    assert pdf_layout.tables([row(head.cells), blocks[2]]) == []  # not bold: no header


def test_a_table_row_of_blank_cells_reads_as_nothing_and_the_page_is_read():
    """A row under a header whose cells are all blank named nothing, so the rows named were one fewer than the
    blocks they replace, and the pairing of the two (zip, strict) stopped the whole file."""
    from spanseek.indexer.documents import _named_rows

    def row(cells, bold=False):
        return Block(" ".join(t for t, _, _ in cells) + "\n", 50, 0, 400, 10, 10, "", tuple(cells), bold)

    head = row([("Terminal", 50, 100), ("Berths", 200, 240)], bold=True)
    blocks, ending = _named_rows([head, row([("Ferry", 50, 80), ("2", 230, 236)]), row([("", 50, 80), ("", 230, 236)]),
                                  row([("Wick", 50, 80), ("4", 230, 236)])], None, -1000, 1000)
    assert [b.text for b in blocks] == ["Terminal: Ferry; Berths: 2\n", "\n", "Terminal: Wick; Berths: 4\n"]
    assert ending is head  # the table ends the page: the next page's first rows may go on with it
    following, _ = _named_rows([row([("Kirkwall", 50, 80), ("6", 230, 236)])], ending, -1000, 1000)
    assert [b.text for b in following] == ["Terminal: Kirkwall; Berths: 6\n"]


def test_a_page_of_only_a_head_and_a_page_number_is_two_paragraphs():
    """The page's one gap between lines is its own line pitch; a gap of many lines' heights is still no line
    break: a running head and the page's number over an empty page are two paragraphs (which ``running`` and the
    page-number rule can leave out), not one."""
    head, foot = Box(["Kellerton Harbour Annual Report"], 240, 809, size=8), Box(["Page 7"], 285, 32, size=8)
    runs = pdf_layout.paragraphs(reading_order([foot, head]))
    assert [Block.of(run).text for run in runs] == ["Kellerton Harbour Annual Report\n", "Page 7\n"]


class TypeSized(Line):
    """A line whose glyphs carry their type size, as pdfminer's do, ``size`` points (its box may be taller)."""

    def __init__(self, text: str, y0: float, size: float, height: float) -> None:
        super().__init__(text, 50, y0, 50 + 5 * len(text), height)
        self.glyph_size = size

    def __iter__(self):
        for glyph in super().__iter__():
            glyph.size = self.glyph_size
            yield glyph


@pytest.mark.parametrize("first_size,first_height,split", [(14, 14, True), (9, 10.5, False)])
def test_a_first_line_in_larger_type_is_cut_from_its_box_and_a_taller_line_box_is_not(first_size, first_height, split):
    """A first line in type 1.15 times the next one's is a heading cut from the box; a line whose box is taller only
    for one glyph (a code listing's bracket) is in the type of the lines under it, and the box stays whole."""
    box = Box([PROSE, PROSE], 50, 700, size=9)
    prose = PROSE.capitalize()  # a paragraph's first line: a heading's own lines do not run on in lower case
    box.lines = [TypeSized("Moorings and buoys", 710, first_size, first_height),
                 *(TypeSized(prose, 698 - 12 * i, 9, 9) for i in range(2))]
    cut = pdf_layout.split_headings([box])
    assert [part.get_text() for part in cut] == (["Moorings and buoys\n", f"{prose}\n{prose}\n"] if split
                                                 else [box.get_text()])
    assert [getattr(part, "head", False) for part in cut] == ([True, False] if split else [False])


def test_a_running_head_set_to_the_right_over_the_text_is_not_its_first_line():
    """A head set flush right over the page's text (a manual's title on each page) ends at the column's right edge
    as a wrapped line does, a line's pitch above the text; it spans a quarter of the column, so it wrapped nothing
    and the text under it is no line of it."""
    line = "Each magic rule is written on a line of its own, with its offset and its value."  # 80 characters
    head = Box(["Shared MIME-info Database"], 295, 741)  # x 295-420, as the lines under it end
    body = [Box([line], 20, 716 - 25 * i) for i in range(4)]  # x 20-420
    runs = pdf_layout.paragraphs(reading_order([head, *body]))
    assert [Block.of(run).text for run in runs] == ["Shared MIME-info Database\n", *[f"{line}\n"] * 4]


class CountedLine(Line):
    """A line that counts the reads of its left edge, and fails past ``budget`` of them: the work a page takes."""

    reads, budget = 0, math.inf

    @property
    def x0(self) -> float:
        CountedLine.reads += 1
        assert CountedLine.reads <= CountedLine.budget, "the page's lines were compared with each other"
        return self._x0

    @x0.setter
    def x0(self, value: float) -> None:
        self._x0 = value


def test_the_work_on_a_page_grows_with_its_lines_not_with_their_square():
    """Each line's column (the lines over and under it) was found among all of the page's lines, by several rules
    a line: a page of 2,000 lines took seconds. Its lines (500: paragraphs of ten, some lines indented)
    are read by a bounded number of reads of each line's edge (about 180 now, 500 or more when each was compared with
    each), and the columns are the brute force's."""
    boxes = []
    for b in range(50):
        box = Box([PROSE + "." * (k % 3 == 0) for k in range(10)], 50 + 15 * (b % 2), 10_000 - 130 * b)
        box.lines = [CountedLine(line.text, line.x0 + 12 * (k % 4 == 1), line.y0, line.x1)
                     for k, line in enumerate(box.lines)]
        boxes.append(box)
    CountedLine.reads, CountedLine.budget = 0, 400 * 500
    assert all(len(pieces) == 1 for groups in pdf_layout.whole_lines(boxes) for pieces in groups)
    parts = pdf_layout.split_items(pdf_layout.split_headings(boxes))
    runs = pdf_layout.paragraphs(parts)
    every = pdf_layout.PageLines(parts)
    flush = pdf_layout.justified(runs, every)
    [pdf_layout.flow_ends(run, every, 0, 10_000, flush) for run in runs]
    CountedLine.budget = math.inf
    brute = [(min(o.x0 for o in over), max(o.x1 for o in over))  # every 25th line's
             for line in every[::25] for over in [[o for o in every if min(o.x1, line.x1) > max(o.x0, line.x0)]]]
    assert [every.column(line) for line in every[::25]] == brute
    assert len(runs) == 75 and brute[:2] == [(50, 300), (50, 300)]


class Lines(Box):
    """A text box of the lines given, in the order given (pdfminer's order of lines on one baseline is any)."""

    def __init__(self, lines: list[Line]) -> None:
        self.lines = lines
        self.x0, self.x1 = min(line.x0 for line in lines), max(line.x1 for line in lines)
        self.y0, self.y1 = min(line.y0 for line in lines), max(line.y1 for line in lines)


def test_the_pieces_of_a_justified_line_are_one_line_and_a_gutter_keeps_columns_apart():
    """Layout analysis cut a justified line at its wide spaces and put the pieces in its box in any order, one in a
    box of its own: the line read "Entertainment on its Weekly put". Pieces on one baseline whose gaps the text
    above or below reaches into are one line, left to right, the stray piece taken from its box; two columns' lines
    on one baseline in one box stay apart at the gutter, which no text reaches into."""
    pieces = [Line("on its", 240, 688, 285), Line("Entertainment", 50, 688, 115), Line("Weekly put", 125, 688, 190)]
    box = Lines([Line(PROSE, 50, 700), *pieces, Line(PROSE, 50, 676)])
    stray = Lines([Line("it", 200, 688, 210)])
    left, right = [Line(PROSE, 50, y, 285) for y in (600, 588)], [Line(PROSE, 300, y, 535) for y in (600, 588)]
    gutter = Lines([left[0], right[0], right[1], left[1]])
    assert [[[line.text for line in pieces] for pieces in groups] for groups in
            pdf_layout.whole_lines([box, stray, gutter])] == [
        [[PROSE], ["Entertainment", "Weekly put", "it", "on its"], [PROSE]], [], [[PROSE], [PROSE], [PROSE], [PROSE]]]
    assert [pieces[0] for pieces in pdf_layout.whole_lines([gutter])[0]] == [left[0], right[0], left[1], right[1]]


def test_the_pieces_of_a_justified_line_each_in_a_box_of_their_own_are_one_line():
    """At 1.5 line spacing every line is a text box of its own, and a justified line cut at its wide spaces is a box
    a piece: "internationally" | "recognised" | "pilotage," read as three paragraphs. Lines of boxes on one baseline
    are one line where a row above and a row below run over each gap; two ragged columns' lines, each a box, under a
    title across both, stay apart at the gutter, and so do a table's cells under a paragraph."""
    full = [Lines([Line(PROSE, 50, y, 285)]) for y in (715, 700, 670)]
    pieces = [Lines([Line("internationally", 50, 685, 120)]), Lines([Line("recognised", 150, 685, 200)]),
              Lines([Line("pilotage,", 240, 685, 285)])]
    assert [[[line.text for line in pieces] for pieces in groups] for groups in
            pdf_layout.whole_lines([*full[:2], *pieces, full[2]])][2:5] == [
        [["internationally", "recognised", "pilotage,"]], [], []]
    title = Lines([Line("A title across both columns of the page", 50, 615, 535)])
    columns = [Lines([Line(PROSE, x, y, x + width)]) for y in (600, 585, 570) for x, width in ((50, 200), (300, 235))]
    assert all(len(pieces) == 1 for groups in pdf_layout.whole_lines([title, *columns]) for pieces in groups)
    cells = [Lines([Line(text, x, y, x1)]) for y in (685, 670, 655)
             for text, x, x1 in (("Ferry", 50, 100), ("Berths", 150, 200), ("Cranes", 240, 285))]
    assert all(len(pieces) == 1 for groups in pdf_layout.whole_lines([*full[:2], *cells]) for pieces in groups)


def test_a_table_s_cells_and_two_columns_between_paragraphs_stay_apart():
    """Each line a text box of its own (1.5 line spacing): a table's cells, or two short columns, with a paragraph
    above them and another below were joined into one line a row, the paragraphs' lines covering the gaps on both
    sides (a table's cells lost, the columns read across). The nearest row that has text on both sides of a gap and
    breaks at its edge (the table's next row, the column beside) says the gap is no wide space of a justified line;
    a justified line under or over one cut at wide spaces of its own is still joined."""
    above = [Lines([Line(PROSE, 50, y, 285)]) for y in (715, 700)]
    below = [Lines([Line(PROSE, 50, y, 285)]) for y in (640, 625)]
    cells = [Lines([Line(text, x, y, x + width)]) for y, row in ((685, ((50, 50), (150, 50), (240, 45))),
                                                                 (670, ((50, 70), (150, 30), (240, 40))),
                                                                 (655, ((50, 30), (150, 60), (240, 45))))
             for text, (x, width) in zip(("Ferry", "Berths", "Cranes"), row, strict=True)]
    assert all(len(pieces) == 1 for groups in pdf_layout.whole_lines([*above, *cells, *below]) for pieces in groups)
    title = Lines([Line("A title across both columns of the page", 50, 615, 535)])
    columns = [Lines([Line(PROSE, x, y, x + width)]) for y in (600, 585) for x, width in ((50, 200), (300, 235))]
    foot = Lines([Line("A paragraph across both columns of the page under them", 50, 565, 535)])
    assert all(len(pieces) == 1 for groups in pdf_layout.whole_lines([title, *columns, foot]) for pieces in groups)
    rivers = [Lines([Line(text, x0, y, x1)]) for y, row in ((685, ((50, 110), (140, 190), (237, 285))),
                                                            (670, ((50, 150), (159, 175), (207, 285))))
              for text, (x0, x1) in zip(("one", "two", "three"), row, strict=True)]
    assert [len(pieces) for groups in pdf_layout.whole_lines([*above, *rivers, *below]) for pieces in groups] == [
        1, 1, 3, 3, 1, 1]


def test_a_word_hyphenation_broke_before_or_nor_or_et_is_joined_and_a_suspended_hyphen_before_a_compound_kept():
    """Hyphenation leaves "or", "nor", "et" at a line's start ("pri-or", "gov-er-nor", "plan-et"): in a document set
    with hyphenation "pri-\\nor to the war" read "pri- or to the war", a suspended hyphen. There such a word is joined,
    and a hyphen before "or" is suspended where a compound follows ("pre- or post-war", "two- or three-"); "and" is
    no such syllable, and in a document without hyphenation every hyphen before a conjunction is suspended."""
    text = ("the county gover-\nnor of the time, the year pri-\nor to the war, the red plan-\net and its moons, the\n"
            "pre-\nor post-war cranes, two-\nor three- or four-berth quays, trans-\nand intercontinental\n")
    assert dehyphenate([text])[0] == (
        "the county governor of the time, the year prior to the war, the red planet and its moons, the\n"
        "pre- or post-war cranes, two- or three- or four-berth quays, trans- and intercontinental\n")
    plain = "the year pri-\nor to the war, the trans-\nand intercontinental ferries\n" + "a whole line\n" * 80
    assert dehyphenate([plain])[0].startswith("the year pri- or to the war, the trans- and intercontinental ferries")
