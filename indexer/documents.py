"""PDF and Word files -> paragraphs with their page or heading path, for ``indexer.ingest``.

    spanseek corpus from-files report.pdf handbook.docx DOCS/ --out corpus.jsonl

**PDF** (pdfminer.six): each page's layout analysis gives text boxes in reading order, and a box is a paragraph.
``char_margin`` 4 (pdfminer's default is 2) keeps the words of a justified line together: with the default, wide
justified spaces split lines into pieces that are put back out of order (on the held-out SQuAD articles rendered as
PDF, 0.9988 of the words kept their order against 0.99999; pypdf keeps the order as well but gives no paragraphs).
A paragraph is continued on the next page when its page's last box does not end a sentence or the next page's first
box starts in lower case; it is then one paragraph with ``page`` (where it starts, 1-based) and ``page_end``. Every
other paragraph has its ``page``. Boxes that are only a page number are dropped; a hyphen at a line end is kept
with no space ("well-\\nknown" reads "well-known"). A PDF without a text layer (scanned pages, images only) is
skipped with a warning that says so; it needs OCR first.

**Word** (.docx, python-docx): paragraphs and table rows (a row's cells on one line) in document order. A paragraph
in a "Heading N" style opens a section, and every paragraph has ``section``, the heading path ("Intro > Scope"),
the heading's own included. The title is the document's title property, else its "Title" paragraph, else its first
heading.

A file either library cannot read (damaged, truncated, encrypted) raises ``Unreadable`` with the reason, which
``ingest`` reports as a skipped file naming it: an encrypted PDF is named as one that needs a password, and a
password-protected .docx (an OLE file, as an old .doc is) as one.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from spanseek.core.io import CorpusError

_SENTENCE_END = re.compile(r"[.!?:][\"')\]»”’]*$")
_PAGE_NUMBER = re.compile(r"(page\s+)?\d{1,4}(\s*(/|of)\s*\d{1,4})?|[-–—]\s*\d{1,4}\s*[-–—]", re.I)
_HEADING = re.compile(r"heading\s*(\d)", re.I)
_LINE_HYPHEN = re.compile(r"(?<=\w)-\s*\n\s*(?=\w)")
_OLE = b"\xd0\xcf\x11\xe0"  # how an OLE (Compound File) file starts: an old .doc, or an encrypted .docx


class IngestError(CorpusError):
    """A file cannot be turned into a document; the message names it."""


class Unreadable(Exception):
    """A file that is skipped (with a warning) rather than refused: the message is the reason."""


@dataclass
class Extracted:
    """A file's text before chunking; ``paragraph_meta`` (one per paragraph, or empty) goes to its passages."""

    title: str | None
    paragraphs: list[str]
    meta: dict[str, Any] = field(default_factory=dict)
    paragraph_meta: list[dict[str, Any]] = field(default_factory=list)


class Sections:
    """Paragraphs in order, each with its ``section``: the heading path ("Intro > Scope"). A heading of level n
    closes the open ones of level n and deeper and opens its own; it is in its own path, and text before the first
    heading has none. A heading followed at once by another (a section without text of its own) joins that one's
    paragraph ("Install\n\nLinux", in the section of the second): its words stay searchable, and no passage is a
    lone heading. ``title_heading`` is left out of the paths where it is the first heading and the only one of level
    1: Markdown and HTML, whose title is that heading, would begin every path with it, and a hit carries the title
    already."""

    def __init__(self) -> None:
        self.texts: list[str] = []
        self.paths: list[tuple[tuple[int, str], ...]] = []  # each paragraph's open headings (level, text)
        self._open: tuple[tuple[int, str], ...] = ()
        self._last_level = 0  # the heading level of the last paragraph; 0 when it is no heading
        self._level_ones = 0

    def add(self, text: str, level: int = 0) -> None:
        """The next paragraph, a heading of that ``level`` (1 outermost) when it is not 0; empty text is skipped."""
        if not text:
            return
        if level:
            self._open = (*(h for h in self._open if h[0] < level), (level, text))
            self._level_ones += level == 1
            if self._last_level:
                self.paths.pop()
                text = f"{self.texts.pop()}\n\n{text}"
        self._last_level = level
        self.texts.append(text)
        self.paths.append(self._open)

    def extracted(self, title: str | None, meta: dict[str, Any], title_heading: str | None = None) -> Extracted:
        first = next((path[0] for path in self.paths if path), None)
        skip = int(first is not None and first == (1, title_heading) and self._level_ones == 1)
        metas = [{"section": " > ".join(h for _, h in path[skip:])} if path[skip:] else {} for path in self.paths]
        return Extracted(title, self.texts, meta, metas if any(metas) else [])


def _clean(text: str) -> str:
    """One line of text: a hyphen at a line end joins the words, other whitespace runs become one space."""
    return " ".join(_LINE_HYPHEN.sub("-", text).split())


def _pdf_pages(path: Path) -> tuple[list[list[str]], dict[str, Any]]:
    """The text boxes of each page, in reading order, and the document's info dictionary."""
    try:
        from pdfminer.converter import PDFPageAggregator
        from pdfminer.layout import LAParams, LTTextContainer
        from pdfminer.pdfdocument import PDFDocument
        from pdfminer.pdfinterp import PDFPageInterpreter, PDFResourceManager
        from pdfminer.pdfpage import PDFPage
        from pdfminer.pdfparser import PDFParser
        from pdfminer.pdftypes import resolve1
    except ImportError:
        raise IngestError(f"{path}: reading PDF needs pdfminer.six (pip install 'spanseek[index]')") from None

    pages: list[list[str]] = []
    with open(path, "rb") as f:
        document = PDFDocument(PDFParser(f))
        resources = PDFResourceManager()
        device = PDFPageAggregator(resources, laparams=LAParams(char_margin=4.0))
        interpreter = PDFPageInterpreter(resources, device)
        for page in PDFPage.create_pages(document):
            interpreter.process_page(page)
            boxes = [el for el in device.get_result() if isinstance(el, LTTextContainer)]
            texts = (_clean("".join(box.get_text() for box in run)) for run in _spaced_paragraphs(boxes))
            pages.append([b for b in texts if b and not _PAGE_NUMBER.fullmatch(b)])
        # while the file is open: a value may be a reference to an object elsewhere in it (a title often is)
        info = {key: resolve1(value) for key, value in document.info[0].items()} if document.info else {}
    return pages, info


# a gap between two text boxes of at most this many of the page's line pitches is a line break, not a paragraph's
LINE_PITCH_SLACK = 1.25
# a line that ends within this share of its column's width from the column's right edge is full: the text wrapped
FULL_LINE_SLACK = 0.2


def _spaced_paragraphs(boxes: list[Any]) -> list[list[Any]]:
    """pdfminer's text boxes of a page (reading order) in runs that are one paragraph each. Layout analysis puts two
    lines in one box when the space between them is under half a line: at 1.5 or double line spacing every line is a
    box of its own, and a paragraph was cut into passages mid-sentence. Here the page's line pitch is the median
    distance between consecutive baselines (within boxes and from one box to the next); a box whose first line
    follows the last one of the box before it by at most ``LINE_PITCH_SLACK`` pitches, in the same column and the
    same size of type, goes on with its paragraph when the line before it is full (reaches the column's right edge
    within ``FULL_LINE_SLACK`` of its width: the text wrapped) and does not end a sentence; a short line (a heading,
    a list item, a table cell, a contents line) ends its paragraph. A gap wider than that (the extra space between
    paragraphs, at any line spacing) starts a new one."""
    def lines(box: Any) -> list[Any]:
        return [line for line in box if hasattr(line, "y0")] or [box]

    def follows(a: Any, b: Any) -> float | None:  # baseline distance from line a down to line b, same column
        overlap = min(a.x1, b.x1) - max(a.x0, b.x0)
        return a.y0 - b.y0 if overlap > 0 and a.y0 > b.y0 else None

    pitches = [d for box in boxes for a, b in itertools.pairwise(lines(box)) if (d := follows(a, b))]
    pitches += [d for a, b in itertools.pairwise(boxes) if (d := follows(lines(a)[-1], lines(b)[0]))]
    if not pitches:
        return [[box] for box in boxes]
    pitch = float(np.median(pitches))
    every = [line for box in boxes for line in lines(box)]

    def full(line: Any) -> bool:  # reaches (nearly) the right edge of its column: the text wrapped there
        column = [o for o in every if min(o.x1, line.x1) - max(o.x0, line.x0) > 0]
        right, left = max(o.x1 for o in column), min(o.x0 for o in column)
        return line.x1 >= right - FULL_LINE_SLACK * (right - left)

    runs: list[list[Any]] = []
    for box in boxes:
        if runs:
            last, first = lines(runs[-1][-1])[-1], lines(box)[0]
            d = follows(last, first)
            open_end = not _SENTENCE_END.search(_clean(runs[-1][-1].get_text()))
            if (open_end and d is not None and d <= LINE_PITCH_SLACK * pitch and full(last)
                    and abs(last.height - first.height) <= 0.2 * last.height):
                runs[-1].append(box)
                continue
        runs.append([box])
    return runs


def _info_text(value: Any) -> str | None:
    """A PDF info string (bytes in PDFDocEncoding or UTF-16) as text; None when empty or not a string."""
    from pdfminer.utils import decode_text

    if isinstance(value, bytes):
        value = decode_text(value)
    if not isinstance(value, str):
        return None
    return " ".join(value.split()) or None


def _continues(before: str, after: str, same_page: bool) -> bool:
    """Whether text box ``after`` goes on with the paragraph ``before``: on the next page, when ``before`` does not
    end a sentence or ``after`` starts in lower case; on the same page (where layout analysis sometimes splits a
    paragraph), only when both hold."""
    open_end, lower_start = not _SENTENCE_END.search(before), after[:1].islower()
    return open_end and lower_start if same_page else open_end or lower_start


def _error(e: Exception) -> str:
    """An exception as "Type: message", or its type alone when the message is empty (pdfminer's often are)."""
    return f"{type(e).__name__}: {e}" if str(e) else type(e).__name__


def _pdf_problem(e: Exception) -> str:
    """Why pdfminer could not read a PDF: it needs a password, its encryption is not supported, or it is damaged."""
    from pdfminer.pdfdocument import PDFEncryptionError, PDFPasswordIncorrect

    if isinstance(e, PDFPasswordIncorrect):  # raised with no message
        return ("encrypted PDF: it needs a password to open; remove the password (for example `qpdf --decrypt "
                "--password=PASSWORD in.pdf out.pdf`) and ingest the result")
    if isinstance(e, PDFEncryptionError):
        return f"encrypted PDF that cannot be decrypted ({_error(e)}); remove the encryption (`qpdf --decrypt`) first"
    return f"not a readable PDF ({_error(e)}); the file may be truncated, damaged or encrypted"


def extract_pdf(path: Path) -> Extracted:
    """Paragraphs of a PDF in reading order, each with its ``page`` (and ``page_end`` when it runs onto the next
    pages); the title from the document's info. Unreadable for a damaged file or one without a text layer."""
    try:
        pages, info = _pdf_pages(path)
    except IngestError:
        raise
    except Exception as e:  # pdfminer raises many types on damaged files; the reason is reported, not hidden
        raise Unreadable(_pdf_problem(e)) from None
    if not any(pages):
        raise Unreadable(f"no text layer in its {len(pages)} page{'s' * (len(pages) != 1)} (a scanned or image-only "
                         "PDF); run OCR on it first, for example with ocrmypdf, and ingest the result")
    paragraphs: list[str] = []
    metas: list[dict[str, Any]] = []
    for number, boxes in enumerate(pages, start=1):
        for i, box in enumerate(boxes):
            last = metas[-1] if metas else {}
            ends_on = last.get("page_end", last.get("page"))  # the page the paragraph before ends on
            if ends_on in (number - 1, number) and _continues(paragraphs[-1], box, same_page=i > 0):
                paragraphs[-1] = f"{paragraphs[-1]} {box}"
                metas[-1] = last if last["page"] == number else {"page": last["page"], "page_end": number}
            else:
                paragraphs.append(box)
                metas.append({"page": number})
    return Extracted(_info_text(info.get("Title")), paragraphs, {"pages": len(pages)}, metas)


def _rows(table) -> list[str]:
    """A Word table's rows as lines, each cell once (python-docx repeats a merged cell in every column it spans)."""
    lines = []
    for row in table.rows:
        cells: list[Any] = []
        for cell in row.cells:
            if not cells or cell._tc is not cells[-1]._tc:
                cells.append(cell)
        lines.append(" ".join(" ".join(c.text.split()) for c in cells).strip())
    return lines


def extract_docx(path: Path) -> Extracted:
    """Paragraphs and table rows of a Word file in order, each with its ``section`` (the heading path) when it has
    one; the title from the document's properties, its "Title" paragraph or its first heading."""
    try:
        import docx
        from docx.table import Table
    except ImportError:
        raise IngestError(f"{path}: reading Word files needs python-docx (pip install 'spanseek[index]')") from None
    try:
        document = docx.Document(str(path))
        blocks = list(document.iter_inner_content())
    except Exception as e:  # a .docx is a zip of XML parts; any of them may be missing or damaged
        with open(path, "rb") as f:
            ole = f.read(4) == _OLE
        if ole:  # not a zip: Word stores a password-protected .docx, like an old .doc, in an OLE file
            raise Unreadable("not a readable Word (.docx) file (an OLE file: a password-protected .docx, or an old "
                             ".doc renamed); remove the password, or save it as .docx, and ingest the result") from None
        raise Unreadable(f"not a readable Word (.docx) file ({_error(e)}); "
                         "the file may be truncated or damaged, or an old .doc renamed") from None
    title = " ".join((document.core_properties.title or "").split()) or None
    first_heading: str | None = None
    text = Sections()
    for block in blocks:
        if isinstance(block, Table):
            for line in _rows(block):
                text.add(line)
            continue
        line = " ".join(block.text.split())
        style = block.style.name if block.style is not None else ""
        level = _HEADING.fullmatch(style or "")
        if style == "Title" and line:
            title = title or line  # the title is the document's, not a passage's
        else:
            first_heading = first_heading or (line if level else None) or None
            text.add(line, int(level.group(1)) if level else 0)
    return text.extracted(title or first_heading, {})
