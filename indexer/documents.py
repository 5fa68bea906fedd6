"""PDF files -> paragraphs with their pages, for ``indexer.ingest``. What every reader shares (``Extracted``,
``Sections``, the errors, a table row's text, the limits on what a file may expand to) is in
``indexer.extracted``, and named here too. Word files: ``indexer.word``; PowerPoint: ``indexer.slides``; Markdown
and HTML: ``indexer.markup``. The file is opened and its glyphs read by ``indexer.pdf_file`` (pdfminer hardened
against hostile files: references that loop, decompression bombs; glyphs a font's Unicode map leaves out;
subscripts and superscripts set on their lines; a filled form's values drawn where its fields are,
``indexer.pdf_forms``), its pages laid out by ``indexer.pdf_layout``.

    spanseek corpus from-files report.pdf DOCS/ --out corpus.jsonl

**PDF** (pdfminer.six): each page's layout analysis gives text boxes (a justified line it cut in pieces at wide
spaces made one again: ``pdf_layout.whole_lines``), which ``indexer.pdf_layout`` puts in reading order (columns one
after the other, a table's rows left to right) and joins into paragraphs; a table's rows
under a bold header row are named by it, as Word's and HTML's are (``table_rows``). ``char_margin`` 4
(pdfminer's default is 2) keeps the words of a justified line together: with the default, wide justified spaces
split lines into pieces that are put back out of order (on the held-out SQuAD articles rendered as PDF, 0.9988 of
the words kept their order against 0.99999; pypdf keeps the order as well but gives no paragraphs). Running headers
and footers (the same words in the same place at the top or bottom of at least three pages, their numbers the same
or the page's, or heads that take turns in one place: ``pdf_layout.running``) and page numbers in the margins
(digits or lower-case roman numerals) are left out; a word hyphenated at a line
end is made whole ("infor-\\nmation" reads "information", "well-\\nknown" "well-known": ``pdf_layout.Hyphenation``;
also where its paragraph goes on in the next column or page, ``_run_on``),
ligatures are spelled out ("ﬁ" reads "fi"; a glyph the font's Unicode map leaves out, often a ligature, is read
as its character where the font numbers its glyphs by code point: ``pdf_file.self_coded``), and lines in a
right-to-left script are put in reading order. A page whose text is mostly turned from upright (by its /Rotate, or
set sideways: a landscape table), in more lines than its upright text (its form XObjects' too) is, is read turned
upright; text turned on an upright page (an arXiv identifier up the margin, a label up a table's side) reads as
lines in order, set aside as footnotes are, and left out where the same is on three pages or more or is a page
number (``pdf_file.turned_text``). A paragraph
is continued on the next page (or at the top of the next column) when its page's (column's) last box does not end a
sentence, the next page's (column's) first box starts in lower case, or the text wrapped there on a page filled to
its foot (``pdf_layout.flows``: a full last line, on a justified page one that reaches the edge, and the next page's
first word, flush left, would not have fit on it) (unless either is a table's row or a heading: ``pdf_layout.heading``, or the next opens a list's item:
``pdf_layout.split_items``; a heading set right above its
paragraph, in one text box with it, is cut from it first: ``pdf_layout.split_headings``; a heading at a page's foot goes
with the next page's first paragraph, ``PARAGRAPH_BREAK`` apart), past the footnotes at the foot of the page or column
(``pdf_layout.footnotes``), which follow it; it is then one paragraph with ``page`` (where it starts,
1-based) and ``page_end``. Every other paragraph has its ``page``; and its ``section`` where the PDF has bookmarks (the
path of those it falls under: ``pdf_outline``). The title is the title property unless a program
filled it in ("Microsoft Word - report.docx"), else the first page's text in the largest type when it stands out.
A PDF without text (scanned pages, images only; or fonts without a Unicode map) is skipped with a warning that says
so, and a warning names the pages without text of one that has some; they need OCR first. A blank PDF (neither text
nor images on any page, nor shapes but straight lines and rectangles) is skipped as one without text, not as one that
needs OCR; one whose lettering is drawn as outlines needs OCR.

A file the library cannot read (damaged, truncated, encrypted) raises ``Unreadable`` with the reason, which
``ingest`` reports as a skipped file naming it: an encrypted PDF is named as one that needs a password.
"""

from __future__ import annotations

import logging
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spanseek.indexer import pdf_file, pdf_forms, pdf_layout, pdf_notes, pdf_outline
from spanseek.indexer.extracted import (
    HEADER_LEVELS,
    INFLATE_RATIO_FROM,
    MAX_INFLATE_RATIO,
    MAX_INFLATED,
    MAX_INFLATED_STREAM,
    PARAGRAPH_BREAK,
    Extracted,
    IngestError,
    Sections,
    Unreadable,
    decompression_bomb,
    error_text,
    row_text,
    stacked_names,
    table_rows,
    zip_bomb,
)
from spanseek.indexer.pdf_blocks import text_string
from spanseek.indexer.pdf_layout import Block

# the PDF reader, and (as before they moved to ``indexer.extracted``) what every reader shares
__all__ = ["HEADER_LEVELS", "INFLATE_RATIO_FROM", "MAX_INFLATED", "MAX_INFLATED_STREAM", "MAX_INFLATE_RATIO",
           "PARAGRAPH_BREAK", "Extracted", "IngestError", "Sections", "Unreadable", "decompression_bomb", "error_text",
           "extract_pdf", "row_text", "stacked_names", "table_rows", "zip_bomb"]

log = logging.getLogger(__name__)

# a page number: digits or a lower-case roman numeral ("iv", "Page 3", "3 of 12", "- 3 -"). Front matter numbers its
# pages in lower case; an upper-case one alone on a line is a part's heading or a drop cap ("I", "IV" at the top of a
# page), and a page number in upper case that runs through the pages is left out as a running head (``running``)
_PAGE_NUMBER = re.compile(rf"((?i:page)\s+)?(\d{{1,4}}|{pdf_layout.ROMAN})(\s*(/|(?i:of))\s*\d{{1,4}})?|[-–—]\s*(\d{{1,4}}|"
                          rf"{pdf_layout.ROMAN})\s*[-–—]")
_CID = re.compile(r"\(cid:\d+\)")  # how pdfminer writes a glyph whose font maps it to no character
# a title property that a program filled in, not a title: "Microsoft Word - report.docx", a file name, "Untitled"
_PLACEHOLDER_TITLE = re.compile(r"(microsoft\s+\w+\s+-\s+.*|untitled.*|document\d*|.*\.(docx?|pdf|rtf|odt|pptx?|"
                                r"xlsx?|indd|tex|dvi|ps|txt|html?))", re.I)


@dataclass
class _Page:
    """A PDF page as read: its paragraphs (``pdf_layout.Block``), its bottom and top edges, whether it has images and
    whether it draws shapes other than straight lines and rectangles (``shapes``)."""

    blocks: list[Block]
    bottom: float
    top: float
    images: bool
    shapes: bool  # curves or polygons: lettering set as outlines (a print export's text), which OCR reads, or a drawing
    turned: list[str]  # the paragraphs of its text set turned from the page's (``pdf_file.turned_text``)


def _page_boxes(layout: Any, laparams: Any) -> list[Any]:
    """A page's text boxes. Text inside a form XObject (a figure to pdfminer) is left out, as a chart's labels
    should be, unless the page has no other text: then the page's whole content is such an object (some tools write
    every page so) and its boxes are the page's."""
    from pdfminer.layout import LTFigure, LTLayoutContainer, LTTextBox

    boxes = [el for el in layout if isinstance(el, LTTextBox)]
    if boxes:
        return boxes
    for figure in (el for el in layout if isinstance(el, LTFigure)):
        LTLayoutContainer.analyze(figure, laparams)  # LTFigure.analyze does nothing unless all_texts is set
        boxes += _page_boxes(figure, laparams)
    return boxes


def _whole_lines(boxes: list[Any], laparams: Any) -> list[Any]:
    """A page's text boxes with the pieces of each line that layout analysis cut at wide justified spaces made one
    line again (``pdf_layout.whole_lines``); a box with none is as it was."""
    from pdfminer.layout import LTChar, LTTextBoxHorizontal, LTTextLineHorizontal

    out = []
    for box, groups in zip(boxes, pdf_layout.whole_lines(boxes), strict=True):
        if all(len(pieces) == 1 for pieces in groups) and len(groups) == len(pdf_layout.lines(box)):
            out.append(box)
            continue
        if not groups:  # its lines all went to another box's
            continue
        rebuilt = LTTextBoxHorizontal()
        for pieces in groups:
            if len(pieces) == 1:
                rebuilt.add(pieces[0])
                continue
            line = LTTextLineHorizontal(laparams.word_margin)
            for glyph in (g for piece in pieces for g in piece if isinstance(g, LTChar)):
                line.add(glyph)  # a space where the gap is one (the pieces' own spaces, and between them)
            line.analyze(laparams)
            rebuilt.add(line)
        out.append(rebuilt)
    return out


@dataclass
class _Read:
    """A PDF as read (``_pdf_pages``): its pages, its info dictionary, the values of its form of XFA alone
    (``pdf_forms.xfa_values``; no paragraphs where that form draws the pages, ``pdf_forms.drawn_by_xfa``), how the
    file is damaged (``pdf_file.damage``: its pages that can be read are read), if it is, and that with what the
    reader passed over as it read (``pdf_notes.reader_notes``), for the warning of a file read; and its outline
    (``pdf_outline``: the sections of its paragraphs)."""

    pages: list[_Page]
    info: dict[str, Any]
    form: list[str]
    damaged: str | None
    warned: str | None
    outline: pdf_outline.Outline


def _pdf_pages(path: Path) -> _Read:
    """Each page's paragraphs in reading order, and what else ``_Read`` holds of a PDF."""
    try:
        from pdfminer.converter import PDFPageAggregator
        from pdfminer.layout import LAParams, LTCurve, LTFigure, LTImage, LTLine, LTRect
        from pdfminer.pdfinterp import PDFPageInterpreter, PDFResourceManager
        from pdfminer.pdftypes import resolve1
    except ImportError:
        raise IngestError(f"{path}: reading PDF needs pdfminer.six (pip install 'spanseek[index]')") from None

    pages: list[_Page] = []
    # boxes_flow None: pdfminer leaves the boxes' order to pdf_layout.reading_order (its own puts a column's short
    # boxes, such as headings, among the other column's, and costs time growing with the square of the boxes)
    laparams = LAParams(char_margin=4.0, boxes_flow=None)
    with open(path, "rb") as f, pdf_notes.reader_notes() as notes:
        document = pdf_file.pdf_document().of_file(f)
        if document.xref_loop is not None:
            log.warning("%s: %s (a loop); read with the sections before it", path, document.xref_loop)
        resources = PDFResourceManager()
        device = pdf_file.aggregator(PDFPageAggregator)(resources, laparams=laparams)
        interpreter = PDFPageInterpreter(resources, device)
        header: Block | None = None  # the header row of a table that ends the page before
        broken: list[int] = []  # the pages whose content is damaged (``pdf_file.damage``)
        placed: dict[int, tuple[int, float, int]] = {}  # each page's object -> its number, foot and turn
        # the page being read, for pdfminer's warnings: it warns of a page's size as it makes the page, before the
        # loop's body runs, so the next page's number is set as the last one ends
        notes.page = 1
        for page in pdf_file.pdf_pages(document):
            streams = len(document.broken)
            interpreter.process_page(page)
            if (turn := pdf_file.upright_turn(device, page.rotate)) is not None:  # most of its text turned: read
                page.rotate = turn  # it turned upright (a landscape page; a page rotated in a viewer), once
                interpreter.process_page(page)
            layout = device.get_result()
            # a heading is cut from its box once the boxes are in order, so that it stays right above its paragraph
            # (cut first, it could fall a row apart from it: a box of the next column level with it came between);
            # a list's items are cut from each other too
            tops: list[Any] = []  # the boxes that open a column after the first: a paragraph may run on there
            ordered = pdf_layout.reading_order(_whole_lines(_page_boxes(layout, laparams), laparams), tops)
            boxes = pdf_layout.split_items(pdf_layout.split_headings(ordered))
            runs = pdf_layout.paragraphs(boxes)
            images = any(isinstance(el, (LTFigure, LTImage)) for el in layout)
            shapes = any(isinstance(el, LTCurve) and not isinstance(el, (LTLine, LTRect)) for el in layout)
            opening = {id(pdf_layout.lines(box)[0]) for box in tops}  # (a box cut in parts: its first part's line)
            every = pdf_layout.PageLines(boxes)
            justified = pdf_layout.justified(runs, every)
            flows = [pdf_layout.flow_ends(run, every, layout.y0, layout.y1, justified) for run in runs]
            blocks, header = _named_rows([Block.of(run, id(pdf_layout.lines(run[0])[0]) in opening, flow)
                                          for run, flow in zip(runs, flows, strict=True)], header, layout.y0, layout.y1)
            pages.append(_Page(blocks, layout.y0, layout.y1, images, shapes, pdf_file.turned_text(device.turned)))
            placed[page.pageid] = (len(pages), page.mediabox[1], page.rotate)
            broken += [len(pages)] if len(document.broken) > streams else []
            notes.page = len(pages) + 1
        notes.page = None  # (what is read after the pages, its info and outline, is on none of them)
        # while the file is open: a value may be a reference to an object elsewhere in it (a title often is)
        info = {key: resolve1(value) for key, value in document.info[0].items()} if document.info else {}
        form = pdf_forms.xfa_values(document, path)
        if form and pdf_forms.drawn_by_xfa(document):  # its pages only ask for a viewer that runs XFA
            pages = [_Page([], page.bottom, page.top, False, False, []) for page in pages]
        # (what the reader passed over is named in the warning of a file read, not as why a file without text is
        # skipped: a page of fonts without a Unicode map is that, whatever else it holds)
        damaged = pdf_file.damage(document, len(pages), pdf_notes.page_list(broken) if broken else "")
        warned = pdf_file.damage(document, len(pages), pdf_notes.page_list(broken) if broken else "", notes.described())
        outline = pdf_outline.Outline(pdf_outline.bookmarks(document, placed))
    return _Read(pages, info, form, damaged, warned, outline)


def _named_rows(blocks: list[Block], continued: Block | None, bottom: float, top: float
                ) -> tuple[list[Block], Block | None]:
    """A page's blocks with the rows of each table under a header row (``pdf_layout.tables``) named by it, as Word's,
    HTML's and Markdown's are ("Terminal: Ferry; Berths: 2"); the header row is no paragraph of its own. A table that
    ``continued`` heads (it ended the page before) goes on in the rows that start this page's body, below its top
    margin (a running header), without a header row of their own. Also returns the header row of a table that ends
    this page (only blocks in its bottom margin after it: a page number), for the next."""
    def margin(block: Block, edge: str) -> bool:  # a running header or footer, a page number: no table's row
        return not block.cells and pdf_layout.margin_edge(block, bottom, top) == edge

    first = next((i for i, b in enumerate(blocks) if not margin(b, "top")), len(blocks))
    found = pdf_layout.tables(blocks, continued, first)
    last = next((i for i in range(len(blocks), 0, -1) if not margin(blocks[i - 1], "bottom")), 0)
    ending = next(((blocks[start] if start >= 0 else continued) for start, rows in found[-1:]
                   if max(start, first - 1) + len(rows) == last), None)
    for start, rows in reversed(found):
        at = start + 1 if start >= 0 else first
        body = blocks[at:at + len(rows) - 1]
        for block, row in zip(body, rows[1:], strict=True):  # a row of blank cells reads as nothing, not as an error
            block.text = row_text(row, rows[0]) + "\n"
        if start >= 0:
            del blocks[start]
    return blocks, ending


def _info_text(value: Any) -> str | None:
    """A PDF info string (``pdf_blocks.text_string``) as text; None when empty or not a string."""
    if isinstance(value, bytes):
        value = text_string(value)
    if not isinstance(value, str):
        return None
    return " ".join(value.split()) or None


def _continues(before: str, after: str, same_page: bool, wrapped: bool = False) -> bool:
    """Whether text box ``after`` goes on with the paragraph ``before``: on the next page or at the top of the next
    column, when ``before`` does not end a sentence, ``after`` starts in lower case (``starts_lower``), or the text ``wrapped`` there
    (``pdf_layout.flows``: a sentence ended on a full line, and the next line, flush left, starts with a word that
    would not have fit on it); elsewhere on the same page (where layout analysis sometimes splits a paragraph), only
    when both of the first two hold."""
    open_end, lower_start = not pdf_layout.SENTENCE_END.search(before), pdf_layout.starts_lower(after)
    return open_end and lower_start if same_page else open_end or lower_start or wrapped


def _pdf_title(info: dict[str, Any], first: _Page | None) -> str | None:
    """The title property, unless it is a placeholder a program wrote ("Microsoft Word - report.docx", a file name,
    "Untitled"); else the first page's title (``pdf_layout.title_block``: its largest type); else None."""
    title = _info_text(info.get("Title"))
    if title and not _PLACEHOLDER_TITLE.fullmatch(title):
        return title
    block = pdf_layout.title_block(first.blocks, first.bottom, first.top) if first else None
    return _clean(block.large) if block else None


def _clean(text: str) -> str:
    """A paragraph's text on one line: ligatures spelled out, soft hyphens dropped, whitespace runs one space."""
    return " ".join(text.translate(pdf_layout.LIGATURES).replace("\u00ad", "").split())


_HYPHENS = "-\u00ad\u2010"  # a line's end hyphen: a hyphen-minus, a soft hyphen, a hyphen


def _run_on(before: str, after: str, hyphen: str, hyphenation: pdf_layout.Hyphenation) -> str:
    """Paragraph ``before`` going on with ``after``, the text of a block in the next column or page: a space apart,
    but a word broken at the end of ``before`` (``hyphen``: the hyphen its last line ends with, "" for none) made whole
    as a word broken inside a block is (``hyphenation``): "infor-" at a page's foot over "mation" at the next's top
    reads "information" (it read "infor- mation"). A hyphen that ends no word broken there (a dash set apart, "fees -",
    or one before a bracket, "1996-" over "(the") keeps the space."""
    if not hyphen:
        return f"{before} {after}"
    head, _, word = before.rpartition(" ")
    mended = hyphenation.mend(f"{word.rstrip(_HYPHENS)}{hyphen}\n{after}")
    if "\n" in mended:  # (left where ``mend`` finds no word broken across it: a space there, as between any lines)
        return f"{before} {after}"
    return f"{head} {mended}" if head else mended


def _body_text(pages: list[_Page]) -> list[int]:
    """Leaves on each page the blocks of its body: running headers and footers (``pdf_layout.running``), page
    numbers in its margins and text that is only glyph numbers go. Returns the pages whose only text was that."""
    repeated = pdf_layout.running([(p.blocks, p.bottom, p.top) for p in pages])
    undecoded: list[int] = []
    for number, (page, dropped) in enumerate(zip(pages, repeated, strict=True), start=1):
        blocks, coded, column = [], False, False  # column: a block left out opened a column; the next opens it
        for i, block in enumerate(page.blocks):
            column |= block.column
            if i in dropped:
                continue
            margin = pdf_layout.margin_edge(block, page.bottom, page.top)
            glyphs = len(_CID.findall(block.text))  # glyphs of a font without a Unicode map: "(cid:71)"
            block.text = _CID.sub("", block.text)
            if glyphs and glyphs > sum(c.isalnum() for c in block.text):
                coded = True
            elif (text := _clean(block.text)) and not (margin and _PAGE_NUMBER.fullmatch(text)):
                blocks.append(block)  # (a number in the page's body is text: a table's cell, a figure's label)
                block.column, column = column, False
        page.blocks = blocks
        if coded and not blocks:
            undecoded.append(number)
    return undecoded


def extract_pdf(path: Path) -> Extracted:
    """Paragraphs of a PDF in reading order, each with its ``page`` (and ``page_end`` when it runs onto the next
    pages), running headers, footers and page numbers left out; the title from the document's info or its first
    page. Unreadable for a damaged file or one without text to read; a warning names the pages without it (images
    only, or fonts without a Unicode map)."""
    try:
        read = _pdf_pages(path)
    except (IngestError, Unreadable):
        raise
    except Exception as e:  # pdfminer raises many types on damaged files; the reason is reported, not hidden
        raise Unreadable(pdf_file.pdf_problem(e, path)) from None
    pages, form, damaged, outline = read.pages, read.form, read.damaged, read.outline
    undecoded = _body_text(pages)
    if not form and not any(page.blocks or page.turned for page in pages):
        if damaged:
            raise Unreadable(f"{damaged}; no text could be read from what is left of it")
        if undecoded:
            raise Unreadable(f"its text cannot be read: {pdf_notes.page_list(undecoded)} of {len(pages)} use fonts "
                             "without a Unicode map (pdfminer reads only glyph numbers); run OCR on it first, for "
                             "example `ocrmypdf --force-ocr`, and ingest the result")
        counted = f"{len(pages)} page{'s' * (len(pages) != 1)}"
        # nothing drawn that OCR could read either: no image, no lettering set as outlines (rules and frames aside)
        if not any(page.images or page.shapes for page in pages):
            raise Unreadable(f"no text in its {counted}: {'it is' if len(pages) == 1 else 'they are'} blank (no text "
                             "and no images), so there is nothing to read")
        raise Unreadable(f"no text layer in its {counted} (a scanned or image-only PDF); run OCR on it first, for "
                         "example with ocrmypdf, and ingest the result")
    if read.warned:
        log.warning("%s: %s; the rest of it is read", path, read.warned)
    if undecoded:
        log.warning("%s: the text of %s of %d is in fonts without a Unicode map (pdfminer reads only glyph numbers) "
                    "and is not in the corpus. Run OCR on the file first, for example `ocrmypdf --force-ocr`, to "
                    "include it", path, pdf_notes.page_list(undecoded), len(pages))
    if images := [n for n, page in enumerate(pages, start=1) if page.images and not page.blocks and n not in undecoded]:
        log.warning("%s: %s of %d %s only images, no text layer (scanned?); their text is not in the corpus. Run OCR "
                    "on the file first, for example `ocrmypdf --skip-text`, to include it", path,
                    pdf_notes.page_list(images), len(pages), "holds" if len(images) == 1 else "hold")
    raw = [b.text.translate(pdf_layout.LIGATURES) for p in pages for b in p.blocks]
    hyphenation = pdf_layout.Hyphenation(raw)
    texts = (hyphenation.mend(text) for text in raw)
    paragraphs: list[str] = []
    metas: list[dict[str, Any]] = []
    # whether the paragraph before is a table's row or a heading: it goes on with nothing, and nothing with it
    apart = after_heading = False  # (the paragraph before ends in a heading)
    notes: list[tuple[str, dict[str, Any]]] = []  # footnotes read since that paragraph, with their places: they follow it
    laid_out = [(p.blocks, p.bottom, p.top) for p in pages]
    body, bold_text = pdf_layout.body_size(laid_out), pdf_layout.bold_body(laid_out)

    ends: Block | None = None  # the last block of the paragraph before
    hyphen = ""  # the hyphen its last line ends with ("" for none): a word broken there goes on in the next block

    outline.place([page.blocks for page in pages])  # (the bookmarks in the reading order of the text read)

    def placed(number: int, index: int) -> dict[str, Any]:  # a paragraph's page, and its section
        section = outline.section(number, index)  # where the PDF's bookmarks give one (``pdf_outline``)
        return {"page": number, "section": section} if section else {"page": number}

    def read_notes() -> None:  # the footnotes set aside, after the paragraph that ran past them
        paragraphs.extend(note for note, _ in notes)
        metas.extend(place for _, place in notes)
        notes.clear()

    # text turned from the page's, set aside as footnotes are (a margin's vertical note: an arXiv identifier, a
    # label up a table's column), but for the same text on three pages or more (a margin's running note) and a page
    # number (a landscape page's, turned with its page)
    running_turned = {text for text, n in Counter(t for p in pages for t in set(p.turned)).items()
                      if n >= 3 or _PAGE_NUMBER.fullmatch(_clean(text))}
    for number, page in enumerate(pages, start=1):
        foot = pdf_layout.footnotes(page.blocks, page.bottom, page.top, body)
        for i, block in enumerate(page.blocks):
            mended = next(texts)
            box = _clean(mended)
            if i in foot:
                notes.append((box, placed(number, i)))
                continue
            if block.size < pdf_layout.FOOTNOTE_SIZE * body:  # small type: the notes go on here, not the text
                read_notes()
            last = metas[-1] if metas else {}
            ends_on = last.get("page_end", last.get("page"))  # the page the paragraph before ends on
            heading = pdf_layout.heading(block, body, bold_text)
            text = not block.cells and not heading and not block.entries
            # a heading at the foot of a page goes with the text that opens the next page, a paragraph break apart
            under = text and after_heading and i == 0 and ends_on == number - 1
            wrapped = ends is not None and pdf_layout.flows(ends.room, block.opening)
            if under or (text and not apart and not block.item and ends_on in (number - 1, number)
                         and _continues(paragraphs[-1], box, i > 0 and not block.column, wrapped)):
                paragraphs[-1] = (f"{paragraphs[-1]}{PARAGRAPH_BREAK}{box}" if under else
                                  _run_on(paragraphs[-1], box, hyphen, hyphenation))
                metas[-1] = last if last["page"] == number else {**last, "page_end": number}
            else:
                read_notes()
                paragraphs.append(box)
                metas.append(placed(number, i))
            apart, after_heading, ends = bool(block.cells) or heading or block.entries, heading, block
            hyphen = last if (last := mended.rstrip()[-1:]) in _HYPHENS else ""
        notes.extend((_clean(text), placed(number, len(page.blocks))) for text in page.turned
                     if text not in running_turned)
    read_notes()
    paragraphs += form  # (on no page: a viewer that runs XFA lays them out)
    metas += [{}] * len(form)
    return Extracted(_pdf_title(read.info, pages[0] if pages else None), paragraphs, {"pages": len(pages)}, metas)
