"""A PDF page's text boxes -> its paragraphs in reading order, for ``indexer.documents`` (``extract_pdf``).

pdfminer.six's layout analysis groups a page's characters into lines and its lines into text boxes; this module
puts the boxes in reading order (a column after the one on its left, the rows of a table left to right), joins the
boxes that are one paragraph (a heading cut first from the box of the paragraph under it: ``split_headings``; a
list's items from each other: ``split_items``), finds the lines repeated at the top or bottom of many pages (running
headers and footers), finds the tables whose first row is a header (``tables``), undoes the hyphenation of words at
line ends and spells out typographic ligatures. It works on anything with pdfminer's coordinates (``x0``, ``x1``,
``y0``, ``y1``: points, y upwards) and ``get_text()``.
"""

from __future__ import annotations

import itertools
import math
import re
import unicodedata
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

SENTENCE_END = re.compile(r"[.!?:][\"')\]»”’]*$")
# a gap between two text boxes of at most this many of the page's line pitches is a line break, not a paragraph's
LINE_PITCH_SLACK = 1.25
# ... and at most this many times the line's height (triple spacing): a page of two lines (a running head and a page
# number, over an empty page) has one gap, which is its own "pitch"
LINE_GAP_HEIGHTS = 3.0
# a line that ends within this share of its column's width from the column's right edge is full: the text wrapped
FULL_LINE_SLACK = 0.2
# ... and spans at least this share of the column's width
WRAPPED_WIDTH = 0.5
# a line wrapped early when the next line's first word would not have fit after it (a word processor's test, with a
# space this many times the line's height: less than a space of most fonts, so a doubtful word fits); the line starts
# within this share of its column's width from the column's left edge (a paragraph's first line may be indented; a
# head set flush right over the text wraps nothing)
SPACE_HEIGHTS = 0.2
WRAPPED_INDENT = 0.1
# a list item's line starts with a bullet glyph ("•", "▪", a Symbol font's private-use bullet, a glyph without a
# Unicode map set apart from the word after it: one joined to it is a letter, say a ligature "fi" the font does not
# map), with a dash that at least this many lines of its page start with (one line that starts with a dash is
# prose, and so is one under a line of its box that wrapped mid-sentence: the dash is set in that sentence), or
# with a number or letter ("1. ", "(a) ", "(ii) ") that another line of its page starts with in that form, one
# more or one less: a list counts its items, where prose whose lines start "8. " and "2) " (a formula's subscripts
# on lines of their own, a year at a line's start) counts nothing
_BULLET = (r"[\u2022\u2023\u2043\u2219\u00b7\u25a0\u25a1\u25aa\u25ab\u25b6\u25b8\u25b9\u25ba\u25c6\u25c7\u25cb"
           r"\u25cf\u25e6\u2666\u2756\u2794\u27a2\u27a4\u2713\u2714\u2717\uf000-\uf0ff]\s*|\(cid:\d+\)\s+")
_ITEM = re.compile(rf"\s*(?:(?P<glyph>{_BULLET})|(?P<mark>[-\u2013\u2014*]|\(?\d{{1,2}}[.)]|\(\d{{1,2}}\)|"
                   r"\(?[a-z]\)|\([ivx]{1,4}\))\s+)\S")
LIST_ITEMS = 2
_DASHES = {"-", "\u2013", "\u2014", "*"}
_CLAUSE_END = re.compile(r"[.!?:;,][\"')\]»”’]*$")
# a column holds running text: the median line of each side of a gutter has at least this many characters (a table's
# cells have fewer, and are read row by row instead)
COLUMN_LINE_CHARS = 20
# the lines that cross a gutter (a title or a footnote over both columns) are at most this share of the region's
CROSSING_LINES = 0.25
# a running header or footer lies in this share of the page's height from its top or bottom edge, and repeats on at
# least this many pages (or on every page of a shorter document) at one distance from that edge (give or take this
# share of its type size)
MARGIN_BAND = 0.15
RUNNING_PAGES = 3
RUNNING_DRIFT = 0.5
# a head that takes turns with others stands this many times its type size from the page's text, or more: a book's
# heads two lines and more, a table's header row less than one from the rows under it
HEAD_GAP = 1.5
# a footnote is set in type at most this share of the body's size
FOOTNOTE_SIZE = 0.9
# a heading is set in type at least this many times the body's size (or in bold), in at most this many lines and words
HEADING_SIZE = 1.15
HEADING_LINES = 3
HEADING_WORDS = 25
# typographic ligatures (Unicode's Alphabetic Presentation Forms) as their letters: "ﬁnancial" is not "financial"
# to the tokenizer or the lexical index
LIGATURES = str.maketrans({"\ufb00": "ff", "\ufb01": "fi", "\ufb02": "fl", "\ufb03": "ffi", "\ufb04": "ffl",
                           "\ufb05": "st", "\ufb06": "st"})
# a word broken over two lines: "infor-\nmation" (the hyphen may be a soft one, U+00AD, or U+2010). Each match starts
# at a word's start ((?<!\w)) and takes whole words (\w++): otherwise a line of one long word (50,000 letters) was
# tried from each of its letters, each try running to its end, and took minutes
_LINE_HYPHEN = re.compile(r"(?<!\w)(\w++)[-\u00ad\u2010][ \t]*\n\s*(\w++)")
_COMPOUND = re.compile(r"(?<!\w)\w++(?:[-\u2010]\w++)+")
# a share of line breaks that end in a hyphenated word at least this high: the document was set with hyphenation on
HYPHENATED_SHARE = 0.03
# a bold font's name: "Helvetica-Bold", "ABCDEF+DejaVuSans-Bold", "Arial,Bold", "Roboto-Black", "Inter-Heavy"
_BOLD_FONT = re.compile(r"bold|black|heavy", re.I)


def lines(box: Any) -> list[Any]:
    """A text box's lines (a box without lines is its own one)."""
    return [line for line in box if hasattr(line, "y0")] or [box]


def text(box: Any) -> str:
    """A box's text, its lines "\\n" apart, each in logical order (``logical``)."""
    return "".join(_line_text(line) for line in lines(box))


def _line_text(line: Any) -> str:
    plain = line.get_text()
    return logical(_glyphs(line)) if _RTL_LETTER.search(plain) else plain


def _glyphs(line: Any) -> list[str]:
    """A line's text, a string per glyph (a ligature's glyph may stand for two letters, in their reading order), as
    the PDF places them from left to right. Glyphs placed from right to left (the PDF holds a right-to-left line in
    reading order already) are one string: ``logical`` leaves it as it is."""
    children = [c for c in line if hasattr(c, "get_text")] if hasattr(line, "__iter__") else []
    placed = [c.x0 for c in children if hasattr(c, "x0")]
    if not children or (len(placed) > 1 and placed[-1] < placed[0]):
        return [line.get_text()]
    return [c.get_text() for c in children]


_MIRRORED = str.maketrans("()[]{}<>", ")(][}{><")
# the blocks of the right-to-left scripts (Hebrew, Arabic, Syriac, Thaana, NKo, ...) and their presentation forms
_RTL_LETTER = re.compile("[\u0590-\u08ff\ufb1d-\ufdff\ufe70-\ufefc]")


def _ltr(c: str) -> bool:
    return unicodedata.bidirectional(c[:1]) in ("L", "EN", "AN")


def _rtl(line: str) -> bool:
    """Whether a line as shown is one of a right-to-left script (Arabic, Hebrew, ...): its letters at both ends are
    of such a script (where it starts and where it ends), or, where one end's is not, most of its letters are."""
    if not _RTL_LETTER.search(line):
        return False
    strong = [c for c in map(unicodedata.bidirectional, line) if c in ("L", "R", "AL")]
    ends = (strong[0] != "L") + (strong[-1] != "L")
    return ends == 2 or (ends == 1 and 2 * sum(c != "L" for c in strong) > len(strong))


def logical(glyphs: Sequence[str]) -> str:
    """A line's text from its glyphs' texts, a line of a right-to-left script in the order it is read. A PDF holds
    such a line as it is shown (left to right: "ةيلامشلا" for "الشمالية"), so its glyphs are reversed, except its
    runs of left-to-right text (Latin words, numbers), which are shown in reading order already; brackets are
    mirrored back. Presentation forms (a letter's shape at the start, middle or end of a word) become the letters
    they show. Other lines are their glyphs' texts as they are."""
    line = "".join(glyphs)
    if len(glyphs) < 2 or not _rtl(line):
        return line
    body = [g.translate(_MIRRORED) for g in reversed(glyphs) if g.strip() or g == " "]
    while body and body[0] == " ":
        body.pop(0)
    while body and body[-1] == " ":
        body.pop()
    out, i = [], 0
    while i < len(body):
        if not _ltr(body[i]):
            out.append(body[i])
            i += 1
            continue
        end = j = i  # a left-to-right run: from i to its last left-to-right glyph, neutrals inside it
        while j < len(body) and (_ltr(body[j]) or body[j] in (" ", ".", ",", ":", "/", "-", "+", "%")):
            end = j if _ltr(body[j]) else end
            j += 1
        out += [g.translate(_MIRRORED) for g in reversed(body[i:end + 1])]
        i = end + 1
    text = "".join(unicodedata.normalize("NFKC", c) if "\ufb50" <= c <= "\ufdff" or "\ufe70" <= c <= "\ufeff"
                   else c for c in "".join(out))
    return text + "\n" if line.endswith("\n") else text


def reading_order(boxes: Sequence[Any]) -> list[Any]:
    """A page's text boxes in reading order. A gutter (an upright strip that no box crosses, with running text on
    both sides) splits a region into columns, read left to right; the few boxes that cross it (a title or a figure
    caption over two columns, a centred footer) cut the region into bands, read top to bottom, each split again.
    A region without a gutter is read in rows: top to bottom, a row's boxes (a table's cells) left to right."""
    texts = {id(b): b.get_text() for b in boxes}
    return _order(boxes, texts, {i: [len(line.strip()) for line in t.split("\n")[:-1] or [t]] for i, t in texts.items()})


def _order(boxes: Sequence[Any], texts: dict[int, str], sizes: dict[int, list[int]]) -> list[Any]:
    """``reading_order`` of a region, given each box's text and its lines' lengths (characters)."""
    if len(boxes) < 2:
        return list(boxes)
    cut = _gutter(boxes, sizes)
    if cut is None:
        return _rows(boxes)
    x, crossing = cut
    if not crossing:
        sides = [[b for b in boxes if b.x1 <= x], [b for b in boxes if b.x1 > x]]
        if _rtl("".join(texts[id(b)] for b in boxes)):  # the columns of an Arabic or Hebrew page: right first
            sides.reverse()
        return _order(sides[0], texts, sizes) + _order(sides[1], texts, sizes)
    separators = sorted(crossing, key=lambda b: -b.y1)
    middles = [(s.y0 + s.y1) / 2 for s in separators]
    bands: list[list[Any]] = [[] for _ in range(len(separators) + 1)]
    for box in boxes:
        if not any(box is s for s in separators):
            bands[sum((box.y0 + box.y1) / 2 < m for m in middles)].append(box)
    ordered = _order(bands[0], texts, sizes)
    for separator, band in zip(separators, bands[1:], strict=True):
        ordered += [separator, *_order(band, texts, sizes)]
    return ordered


def _gutter(boxes: Sequence[Any], sizes: dict[int, list[int]]) -> tuple[float, list[Any]] | None:
    """The best column gutter of a region: (its left edge, the boxes that cross it), or None. Each candidate is a
    box's right edge away from the region's sides; it needs running text on both sides and few lines crossing it
    (the fewest win, then the widest gap). ``sizes``: the characters of each box's lines."""
    left_edge, right_edge = min(b.x0 for b in boxes), max(b.x1 for b in boxes)
    margin = 0.1 * (right_edge - left_edge)
    total = sum(len(sizes[id(b)]) for b in boxes)
    best: tuple[tuple[int, float], float, list[Any]] | None = None
    for x in sorted({b.x1 for b in boxes}):
        if not left_edge + margin < x < right_edge - margin:
            continue
        left = [b for b in boxes if b.x1 <= x]
        right = [b for b in boxes if b.x0 > x]
        if not left or not right:
            continue
        crossing = [b for b in boxes if b.x0 <= x < b.x1]
        crossed = sum(len(sizes[id(b)]) for b in crossing)
        if crossed > CROSSING_LINES * total or not all(
                float(np.median([n for b in side for n in sizes[id(b)]])) >= COLUMN_LINE_CHARS for side in (left, right)):
            continue
        key = (crossed, -(min(b.x0 for b in right) - x))
        if best is None or key < best[0]:
            best = (key, x, crossing)
    return None if best is None else (best[1], best[2])


def _rows(boxes: Sequence[Any]) -> list[Any]:
    """Boxes top to bottom; boxes whose first lines share a row (their tops within half a line), left to right."""
    ordered = sorted(boxes, key=lambda b: -b.y1)
    rows: list[list[Any]] = []
    for box in ordered:
        if rows:
            first = lines(rows[-1][0])[0]
            if box.y1 >= rows[-1][0].y1 - 0.5 * (first.y1 - first.y0):
                rows[-1].append(box)
                continue
        rows.append([box])
    return [box for row in rows for box in sorted(row, key=lambda b: b.x0)]


def same_row(a: Any, b: Any) -> bool:
    """Whether box ``b`` goes on the row of one-line box ``a``: a one-line box to its right on its baseline, in type
    of its size (the next cell of a table's row)."""
    height = a.y1 - a.y0
    return (len(lines(a)) == len(lines(b)) == 1 and b.x0 >= a.x1 - 0.1 * height
            and abs(a.y0 - b.y0) <= 0.3 * height and abs(height - (b.y1 - b.y0)) <= 0.3 * height)


def paragraphs(boxes: Sequence[Any]) -> list[list[Any]]:
    """A page's text boxes (in reading order) in runs that are one paragraph each. Layout analysis puts two lines in
    one box when the space between them is under half a line: at 1.5 or double line spacing every line is a box of
    its own, and a paragraph was cut into passages mid-sentence. Here the page's line pitch is the median distance
    between consecutive baselines (within boxes and from one box to the next); a box whose first line follows the
    last one of the box before it by at most ``LINE_PITCH_SLACK`` pitches, in the same column and the same size of
    type, goes on with its paragraph when the line before it is full (reaches the column's right edge within
    ``FULL_LINE_SLACK`` of its width, and spans ``WRAPPED_WIDTH`` of it: the text wrapped) or wrapped early (the
    box's first word would not have fit after it: a long address or word came next) and does not end a sentence
    (or is both, and ends a sentence but for a colon, with the box's first line flush left: the sentence ended where
    the text wrapped); a short line (a heading, a list item, a contents line, a head set flush right) ends its
    paragraph, and so does a heading cut from its paragraph (``split_headings``); a list's item starts one
    (``split_items``). A gap wider than that (the extra space between paragraphs, at any line spacing), or than
    ``LINE_GAP_HEIGHTS`` times the line's height, starts a new one. Boxes of one line each on one baseline (the cells
    of a table's row) are one, and a paragraph of their own."""
    def follows(a: Any, b: Any) -> float | None:  # baseline distance from line a down to line b, same column
        overlap = min(a.x1, b.x1) - max(a.x0, b.x0)
        return a.y0 - b.y0 if overlap > 0 and a.y0 > b.y0 else None

    pitches = [d for box in boxes for a, b in itertools.pairwise(lines(box)) if (d := follows(a, b))]
    pitches += [d for a, b in itertools.pairwise(boxes) if (d := follows(lines(a)[-1], lines(b)[0]))]
    pitch = float(np.median(pitches)) if pitches else 0.0
    every = [line for box in boxes for line in lines(box)]

    def column(line: Any) -> tuple[float, float]:  # the left and right edges of the lines over and under it
        over = [o for o in every if min(o.x1, line.x1) - max(o.x0, line.x0) > 0]
        return min(o.x0 for o in over), max(o.x1 for o in over)

    def full(line: Any) -> bool:  # reaches (nearly) the right edge of its column, across most of it: the text
        # wrapped there (a running head set to the right, over the text, wraps nothing)
        left, right = column(line)
        width = right - left
        return line.x1 >= right - FULL_LINE_SLACK * width and line.x1 - line.x0 >= WRAPPED_WIDTH * width

    def wrapped(line: Any, below: Any) -> bool:  # the first word of line ``below`` would not have fit after ``line``
        left, right = column(line)
        word = _first_word(below)
        return (word is not None and line.x0 - left <= WRAPPED_INDENT * (right - left)
                and line.x1 + SPACE_HEIGHTS * line.height + word > right)

    runs: list[list[Any]] = []
    rows = [False] + [same_row(a, b) for a, b in itertools.pairwise(boxes)]  # box i is on the row of box i - 1
    for i, box in enumerate(boxes):
        if runs:
            before = runs[-1][-1]
            last, first = lines(before)[-1], lines(box)[0]
            if rows[i]:
                runs[-1].append(box)
                continue
            if rows[i - 1] or (i + 1 < len(boxes) and rows[i + 1]) or getattr(box, "item", False):  # a row of
                runs.append([box])  # cells, and a list's item (``split_items``), is a paragraph of its own
                continue
            d = follows(last, first)
            ending = " ".join(text(before).split())
            open_end = not SENTENCE_END.search(ending)
            # a sentence that ends on a line the text wrapped at goes on (the next line, flush left, is no new
            # paragraph's indented first line); a colon introduces what follows (a list, code, a quotation)
            flowed = (full(last) and wrapped(last, first) and not ending.endswith(":")
                      and first.x0 - column(first)[0] <= 0.5 * first.height)
            if ((flowed or (open_end and (full(last) or wrapped(last, first)))) and not getattr(before, "head", False)
                    and d is not None and d <= min(LINE_PITCH_SLACK * pitch, LINE_GAP_HEIGHTS * last.height)
                    and abs(last.height - first.height) <= 0.2 * last.height):
                runs[-1].append(box)
                continue
        runs.append([box])
    return runs


def _first_word(line: Any) -> float | None:
    """The width of a line's first word (its glyphs up to the first space), or None when its glyphs are not placed."""
    glyphs = [g for g in line if hasattr(g, "get_text")] if hasattr(line, "__iter__") else []
    word = list(itertools.takewhile(lambda g: not g.get_text().isspace(),
                                    itertools.dropwhile(lambda g: g.get_text().isspace(), glyphs)))
    if not word or not all(hasattr(g, "x0") and hasattr(g, "x1") for g in word):
        return None
    return float(max(g.x1 for g in word) - min(g.x0 for g in word))


@dataclass
class Block:
    """One paragraph of a page as extracted: its raw text (lines "\\n" apart), where it lies and its type size."""

    text: str
    x0: float
    y0: float
    x1: float
    y1: float
    size: float  # the height of its tallest line: about its type size, in points
    large: str  # its first lines in that size (a title's, where the lines after it are its authors')
    cells: tuple[tuple[str, float, float], ...] = ()  # a table row's cells (text, x0, x1), left to right; else ()
    bold: bool = False  # every glyph of it is in a bold font
    item: bool = False  # it opens a list's item (``split_items``)

    @classmethod
    def of(cls, run: Sequence[Any]) -> Block:
        """The block of a run of boxes (``paragraphs``): a row's cells one space apart, a box's lines one line."""
        joined = text(run[0])
        for a, b in itertools.pairwise(run):
            joined = f"{joined.rstrip()} {text(b)}" if same_row(a, b) else joined + text(b)
        every = [line for box in run for line in lines(box)]
        size = max(line.y1 - line.y0 for line in every)
        large = itertools.takewhile(lambda line: line.y1 - line.y0 >= 0.85 * size,
                                    itertools.dropwhile(lambda line: line.y1 - line.y0 < 0.85 * size, every))
        row = len(run) > 1 and all(same_row(a, b) for a, b in itertools.pairwise(run))
        return cls(joined, min(b.x0 for b in run), min(b.y0 for b in run), max(b.x1 for b in run),
                   max(b.y1 for b in run), size, "".join(_line_text(line) for line in large),
                   tuple((" ".join(text(b).split()), b.x0, b.x1) for b in run) if row else (),
                   _bold(every), getattr(run[0], "item", False))


def _bold(lines_: Iterable[Any]) -> bool:
    """Whether every glyph of these lines is in a bold font (and there is one)."""
    glyphs = [g for line in lines_ if hasattr(line, "__iter__") for g in line if g.get_text().strip()]
    return bool(glyphs) and all(_BOLD_FONT.search(getattr(g, "fontname", "")) for g in glyphs)


@dataclass
class Part:
    """Some of a text box's lines, as a box of their own: a heading cut from the paragraph under it
    (``split_headings``, ``head`` set), or that paragraph; a list's item (``split_items``)."""

    lines: list[Any]
    head: bool = False
    item: bool = False  # it opens a list's item (``split_items``)
    x0: float = field(init=False)
    y0: float = field(init=False)
    x1: float = field(init=False)
    y1: float = field(init=False)

    def __iter__(self) -> Iterator[Any]:
        return iter(self.lines)

    def get_text(self) -> str:
        return "".join(line.get_text() for line in self.lines)

    def __post_init__(self) -> None:  # its box: the one around its lines
        self.x0, self.x1 = min(line.x0 for line in self.lines), max(line.x1 for line in self.lines)
        self.y0, self.y1 = min(line.y0 for line in self.lines), max(line.y1 for line in self.lines)


def split_headings(boxes: Sequence[Any]) -> list[Any]:
    """Text boxes with a heading set right above its paragraph cut from it: layout analysis puts a heading in its
    paragraph's box when the space under it is under half a line, as word processors set one. A box's first lines
    (``HEADING_LINES`` at most, ``HEADING_WORDS`` words at most, with a letter) are a heading when each is in bold
    and the line under them is not, or each is in type (``_type_size``) ``HEADING_SIZE`` times that line's or
    larger; the heading and the rest of the box are then a ``Part`` each. A paragraph that opens with words in bold
    ("Note: ...") is left whole: its first line is not bold throughout; so is one whose bold first line runs on in
    lower case."""
    out: list[Any] = []
    for box in boxes:
        every = lines(box)
        k = _heading_lines(every)
        out += [Part(every[:k], head=True), Part(every[k:])] if k else [box]
    return out


def split_items(boxes: Sequence[Any]) -> list[Any]:
    """Text boxes with each list item cut from the lines above it: layout analysis puts a list's items in one box
    when they are closer than half a line, and a slide's bullets read as one sentence. A line opens an item when it
    starts with a bullet glyph, or with a dash or a counter that other lines of the page start with in that form
    ("- ", "1. ", "(a) ": ``_item_lines``); the lines of a box from one such line to the next are a ``Part``
    (an item's lines that wrap, under it, stay with it), ``item`` set where it opens one."""
    items = _item_lines(boxes)
    out: list[Any] = []
    for box in boxes:
        every = lines(box)
        cuts = [0, *(k for k in range(1, len(every)) if id(every[k]) in items), len(every)]
        if len(cuts) == 2 and id(every[0]) not in items:
            out.append(box)
            continue
        out += [Part(every[a:b], head=getattr(box, "head", False) and a == 0, item=id(every[a]) in items)
                for a, b in itertools.pairwise(cuts)]
    return out


def _item_lines(boxes: Sequence[Any]) -> set[int]:
    """The ids of a page's lines that open a list's item (``split_items``)."""
    items: set[int] = set()
    marks: dict[str, list[tuple[int, set[int]]]] = {}  # each form ("1.", "(a)", "-") -> its lines, with their counts
    for box in boxes:
        every = lines(box)
        matches = [_ITEM.match(_line_text(line)) for line in every]
        for k, (line, m) in enumerate(zip(every, matches, strict=True)):
            if not m:
                continue
            if m["glyph"]:
                items.add(id(line))
                continue
            form = re.sub(r"\d+", "1", re.sub(r"[a-z]+", "a", m["mark"]))
            if form in _DASHES and k and not matches[k - 1] and _runs_on(every[k - 1], every):
                continue  # a dash set in a sentence that wrapped before it ("the cranes / – all fourteen –")
            counter = re.sub(r"[^\da-z]", "", m["mark"])
            marks.setdefault(form, []).append((id(line), _counts(counter)))
    for form, found in marks.items():
        counted = {n for _, counts in found for n in counts}
        if any(c.isalnum() for c in form):  # a counter: the lines one up or one down from another
            items.update(i for i, counts in found if any(n - 1 in counted or n + 1 in counted for n in counts))
        elif len(found) >= LIST_ITEMS:  # a dash
            items.update(i for i, _ in found)
    return items


def _runs_on(line: Any, box: Sequence[Any]) -> bool:
    """Whether the text goes on after ``line``, one of ``box``'s lines: it reaches (nearly) the box's right edge
    (``FULL_LINE_SLACK``: the text wrapped there) and ends no sentence or clause."""
    left, right = min(o.x0 for o in box), max(o.x1 for o in box)
    ending = _line_text(line).rstrip()
    return line.x1 >= right - FULL_LINE_SLACK * (right - left) and not _CLAUSE_END.search(ending)


def _counts(counter: str) -> set[int]:
    """What a list's counter may count: a number's value; a letter's place in the alphabet, and a roman numeral's
    value ("i" is the first or the ninth)."""
    if counter.isdigit():
        return {int(counter)}
    values = {ord(counter) - ord("a") + 1} if len(counter) == 1 else set()
    return values | ({_value(counter)} if re.fullmatch(ROMAN, counter) else set())


def _type_size(line: Any) -> float:
    """A line's type size: its glyphs' median height (pdfminer's ``size``), else the line's. One tall glyph (a
    bracket, a symbol from another font) makes a line's box taller than its type."""
    sizes = [g.size for g in line if hasattr(g, "size")] if hasattr(line, "__iter__") else []
    return float(np.median(sizes)) if sizes else float(line.y1 - line.y0)


def _heading_lines(every: Sequence[Any]) -> int:
    """How many of a box's first lines are a heading over the rest (``split_headings``); 0 when none are."""
    bold = [_bold([line]) for line in every]
    height = [_type_size(line) for line in every]

    def apart(k: int) -> bool:  # the first k lines are a heading over line k
        return all(height[j] >= HEADING_SIZE * height[k] or (bold[j] and not bold[k]) for j in range(k))

    k = next((k for k in range(1, min(HEADING_LINES, len(every) - 1) + 1) if apart(k)), 0)
    head = "".join(_line_text(line) for line in every[:k])
    if k and (len(head.split()) > HEADING_WORDS or not any(c.isalpha() for c in head)
              or every[k].get_text().lstrip()[:1].islower()):
        return 0
    return k


def tables(blocks: Sequence[Block], continued: Block | None = None, first: int = 0
           ) -> list[tuple[int, list[list[str]]]]:
    """The tables of a page's blocks (in reading order) whose first row is a header: (where the header is, the rows'
    cells, the header's first), for each run of table rows (``Block.cells``: one-line cells on one baseline) whose
    first row is bold, as a header row is set, with at least one row under it. Each row's cells are put in the
    header's columns (the gap between two headers splits them), "" where a row has none (an empty cell); a row with
    two cells in one column, or a block that is no row, ends the table. A table without a bold first row is found
    by nothing here: its rows read their cells, spaced. ``continued``: the header row of a table that ended the page
    before; the rows from block ``first`` (the first of the page's body) that fit its columns are that table's, where
    is -1, unless they have a bold header row of their own."""
    found: list[tuple[int, list[list[str]]]] = []
    i = 0
    if continued is not None and first < len(blocks) and not blocks[first].bold:
        if rows := _rows_under(continued, blocks[first:]):
            found.append((-1, [[cell for cell, _, _ in continued.cells], *rows]))
            i = first + len(rows)
    while i < len(blocks):
        head = blocks[i]
        if not (head.cells and head.bold):
            i += 1
            continue
        rows = [[cell for cell, _, _ in head.cells], *_rows_under(head, blocks[i + 1:])]
        if len(rows) > 1:
            found.append((i, rows))
        i += len(rows)
    return found


def _rows_under(head: Block, blocks: Sequence[Block]) -> list[list[str]]:
    """The rows of ``head``'s table among the first ``blocks``, each cell in its header's column (``tables``)."""
    edges = [(a[2] + b[1]) / 2 for a, b in itertools.pairwise(head.cells)]  # the gaps' middles
    rows: list[list[str]] = []
    for block in blocks:
        columns = [sum(x0 + x1 > 2 * edge for edge in edges) for _, x0, x1 in block.cells]
        if not block.cells or len(set(columns)) < len(columns):
            break
        row = [""] * len(head.cells)
        for (cell, _, _), column in zip(block.cells, columns, strict=True):
            row[column] = cell
        rows.append(row)
    return rows


def margin_edge(block: Block, bottom: float, top: float) -> str | None:
    """"top" or "bottom" where a block lies within ``MARGIN_BAND`` of the page's top or bottom edge (``bottom``,
    ``top``: the page's edges), else None."""
    band = MARGIN_BAND * (top - bottom)
    return "top" if block.y0 >= top - band else "bottom" if block.y1 <= bottom + band else None


# a page's number: digits, or a roman numeral up to 399 (front matter's "iv"; without d and m, which end words)
ROMAN = r"\b(?=[ivxlc]+\b)c{0,3}(?:xc|xl|l?x{0,3})(?:ix|iv|v?i{0,3})(?<=[ivxlc])\b"
_NUMBER = re.compile(rf"\d+|{ROMAN}")
_ROMAN_DIGITS = {"i": 1, "v": 5, "x": 10, "l": 50, "c": 100}
# a number longer than this is no page's: compared whole (int() refuses strings of more than 4,300 digits)
PAGE_NUMBER_DIGITS = 9


def _value(number: str) -> int:
    """A number's value: its digits', or its roman numeral's (lower case), or a long one's hash (equal where the
    digits are)."""
    if not number.isdigit():
        values = [_ROMAN_DIGITS[c] for c in number]
        return sum(-v if v < w else v for v, w in zip(values, [*values[1:], 0], strict=True))
    return int(number) if len(number) <= PAGE_NUMBER_DIGITS else hash(number)


def _numbers(text: str) -> tuple[int, ...]:
    """The numbers of a (case-folded) text as values (``_value``)."""
    return tuple(_value(n) for n in _NUMBER.findall(text))


def running(pages: Sequence[tuple[Sequence[Block], float, float]]) -> list[set[int]]:
    """The running headers and footers of a document's pages (each its blocks, its bottom and top edges): for each
    page, the indices of its blocks that are one. Such blocks lie in a margin (``margin_edge``) at one distance from
    its edge (within ``RUNNING_DRIFT`` of their type size) on at least ``RUNNING_PAGES`` pages (on every page of a
    document of two pages or more but fewer than that), in that size of type and with the same words (case, spacing
    and numbers, roman ones too, aside); and on each of at least two pages, each of its numbers is either the same
    ("Annual Report 2023", "Chapter 3", "of 40") or the page's own number give or take a fixed offset ("Page 3", a
    journal's "231" on the file's first page). Rows at the tops of the pages of a long table ("Vessel 32 1032",
    "Vessel 65 1065"), or the lines of a log, differ in their numbers otherwise: they are text.

    Heads that take turns in one place, in type no larger than the body's and apart from the text, are found together
    (``_slots``): where two heads or more (words and numbers) each repeat on two pages or more in one place (a book's
    left and right pages' heads, each on every other page of a short file; chapter heads that change every few
    pages), on at least half of the pages with a one-line block there and on at least as many pages as above, they
    are running heads, and so is a one-line block in their place on another page (a one-page chapter's head). Larger
    lines that take turns are headings (slides' titles), and lines on the text are text (a table's header row
    repeated on the page it runs onto). Heads that take turns each run over their pages or fall on every other page
    (``_in_turn``), and a head on fewer than ``RUNNING_PAGES`` pages, or one that takes turns, is the page's first or
    last line (``_at_edge``): a section heading that falls in a head's place on two pages is text."""
    needed = max(2, min(RUNNING_PAGES, len(pages)))
    # (edge, size, words with their numbers as "#", how many numbers: "Form #" has none) -> (page, block index, its
    # numbers, distance from the edge)
    groups: dict[tuple[str, int, str, int], list[tuple[int, int, tuple[int, ...], float]]] = {}
    for page, (blocks, bottom, top) in enumerate(pages):
        for i, block in enumerate(blocks):
            if (edge := margin_edge(block, bottom, top)) is None:
                continue
            folded = block.text.casefold()
            words, numbers = " ".join(_NUMBER.sub("#", folded).split()), _numbers(folded)
            inset = top - block.y1 if edge == "top" else block.y0 - bottom
            groups.setdefault((edge, round(block.size), words, len(numbers)), []).append((page, i, numbers, inset))
    found: list[set[int]] = [set() for _ in pages]
    sure: list[set[int]] = [set() for _ in pages]  # of those, the heads on ``RUNNING_PAGES`` pages or more
    # the blocks whose words and numbers repeat on two pages or more -> which repeat (their group's words, their key)
    repeated: dict[tuple[int, int], tuple[str, tuple[int, ...]]] = {}
    for (_, size, words, _), members in groups.items():
        middle = float(np.median([inset for *_, inset in members]))
        placed = [m for m in members if abs(m[3] - middle) <= RUNNING_DRIFT * max(size, 1)]
        if len({page for page, *_ in placed}) < 2:
            continue
        # each number's place: read as a value ("2023") or as an offset from the page ("Page 3" on page 3: 0),
        # whichever leaves more blocks repeating (chapter numbers 1, 1, 2, 3, 3 are values, not offsets 1, 0, 0, 0, -1)
        by_page = [_repeating(n[j] - page for page, _, n, _ in placed) > _repeating(n[j] for _, _, n, _ in placed)
                   for j in range(len(placed[0][2]))]
        keys: dict[tuple[int, ...], list[tuple[int, int]]] = {}
        for page, i, numbers, _ in placed:
            key = tuple(n - page if tracks else n for n, tracks in zip(numbers, by_page, strict=True))
            keys.setdefault(key, []).append((page, i))
        many = len({page for page, *_ in placed}) >= needed
        for key, same in keys.items():
            if len({page for page, _ in same}) >= 2:  # a chapter's head ("Chapter 1") on its two pages, say
                repeated.update(dict.fromkeys(same, (words, key)))
                for page, i in same:
                    found[page].update([i] if many else [])
                    sure[page].update([i] if many and len({p for p, _ in same}) >= RUNNING_PAGES else [])
    for slot in _slots(pages, body_size(pages)):  # heads that take turns: two repeats or more in one place, on half
        # its pages or more, each in runs (``_in_turn``)
        pages_of = {page for page, _ in slot}
        runs: dict[tuple[str, tuple[int, ...]], list[int]] = {}  # each repeat's pages in the slot
        for page, i in slot:
            if (page, i) in repeated:
                runs.setdefault(repeated[page, i], []).append(page)
        turns = {head for head, on in runs.items() if _in_turn(on)}
        heads = {page for head in turns for page in runs[head]}
        if len(turns) >= 2 and len(pages_of) >= needed and 2 * len(heads) >= len(pages_of):
            for page, i in slot:
                if repeated.get((page, i)) in turns or page not in heads:
                    found[page].add(i)
    return [_at_edge(blocks, heads, on, bottom, top)
            for (blocks, bottom, top), heads, on in zip(pages, found, sure, strict=True)]


def _only_numbers(text: str) -> bool:
    """Whether a text holds numbers and no letters ("12", "iv", "- 3 -")."""
    folded = text.casefold()
    return bool(_NUMBER.search(folded)) and not any(c.isalpha() for c in _NUMBER.sub("", folded))


def _in_turn(pages: Iterable[int]) -> bool:
    """Whether a head on these pages repeats as a running head does: on a run of pages (a chapter's, a page without
    it here and there: a chapter's opener, a figure's page) or on every other page (a book's left or right pages,
    two pages of a chapter's opener apart), not on pages that a section heading of one name falls on ("Summary" on
    the file's pages 1 and 4)."""
    gaps = [b - a for a, b in itertools.pairwise(sorted(set(pages)))]
    return all(gap <= 2 for gap in gaps) or all(gap % 2 == 0 for gap in gaps)


def _at_edge(blocks: Sequence[Block], heads: set[int], sure: set[int], bottom: float, top: float) -> set[int]:
    """The ``heads`` of a page (indices of ``blocks``) that are ``sure`` (the same on three pages or more), or have
    nothing between them and their edge of the page but other heads, the nearest of them closer than ``HEAD_GAP``
    times its type size (a head of two lines; heads side by side on one line are not between each other; a head of
    only a number, a page's, is not between any): a head found on two pages, or taking turns, is the page's first or
    last line, where a heading in its place lies in the text, under the page's own head and apart from it."""
    kept: set[int] = set()
    outward = sorted(heads, key=lambda i: blocks[i].y0 if margin_edge(blocks[i], bottom, top) == "bottom"
                     else -blocks[i].y1)  # the heads from each edge inwards (the others first)
    for i in outward:
        head = blocks[i]
        edge = margin_edge(head, bottom, top)
        gaps = {j: b.y0 - head.y1 if edge == "top" else head.y0 - b.y1 for j, b in enumerate(blocks)}
        between = [j for j, gap in gaps.items() if gap >= 0 and not (j in kept and _only_numbers(blocks[j].text))]
        if i in sure or (all(j in kept for j in between)
                         and min((gaps[j] for j in between), default=0) < HEAD_GAP * head.size):
            kept.add(i)
    return kept


def _repeating(values: Iterable[int]) -> int:
    """How many of ``values`` are equal to another."""
    return sum(n for n in Counter(values).values() if n > 1)


def body_size(pages: Sequence[tuple[Sequence[Block], float, float]]) -> int:
    """The type size (rounded) most of a document's characters are set in: its body text's."""
    sizes = Counter[int]()
    for blocks, _, _ in pages:
        for block in blocks:
            sizes[round(block.size)] += len(block.text)
    return sizes.most_common(1)[0][0] if sizes else 0


def bold_body(pages: Sequence[tuple[Sequence[Block], float, float]]) -> bool:
    """Whether most of a document's characters are in bold type: then bold sets nothing apart (``heading``)."""
    bold = total = 0
    for blocks, _, _ in pages:
        for block in blocks:
            total += len(block.text)
            bold += len(block.text) * block.bold
    return 2 * bold > total


def heading(block: Block, body: int, bold_text: bool = False) -> bool:
    """Whether a block is set apart as a heading: at most ``HEADING_LINES`` lines and ``HEADING_WORDS`` words, not a
    table's row, in type clearly larger than the body's (``HEADING_SIZE`` times ``body``: ``body_size``) or in bold
    where the body is not (``bold_text``: ``bold_body``). A heading is a paragraph of its own: neither the text
    before it (on its page or the one before) nor the text after it goes on into it."""
    lines_ = block.text.strip().count("\n") + 1
    return (not block.cells and lines_ <= HEADING_LINES and len(block.text.split()) <= HEADING_WORDS
            and any(c.isalpha() for c in block.text)
            and (block.size >= HEADING_SIZE * body or (block.bold and not bold_text)))


def footnotes(blocks: Sequence[Block], bottom: float, top: float, body: int) -> set[int]:
    """The indices of a page's footnotes among its ``blocks`` (its bottom and top edges): blocks in type smaller than
    the body's (``body``: ``body_size``; at most ``FOOTNOTE_SIZE`` of it) in the lower half of the page, under text
    in the body's type and with none below them in their column (the foot of the page, or of a column), not a
    table's rows. (A page of references in small type has none: no text of the body's type stands over them.)"""
    text = [b for b in blocks if b.size >= FOOTNOTE_SIZE * body]

    def over(t: Block, b: Block) -> bool:  # t over b in b's column
        return t.y0 >= b.y1 and t.x0 < b.x1 and t.x1 > b.x0

    return {i for i, b in enumerate(blocks)
            if not b.cells and b.size < FOOTNOTE_SIZE * body and b.y1 <= (bottom + top) / 2
            and any(over(t, b) for t in text) and not any(over(b, t) for t in text)}


def _slots(pages: Sequence[tuple[Sequence[Block], float, float]], most: int) -> list[list[tuple[int, int]]]:
    """The places of a document's margins that one-line blocks share whatever their words: (page, block index) of
    the blocks of one line at one edge in one size of type, at one distance from the edge (each within
    ``RUNNING_DRIFT`` of their type size from the one before). A paragraph's lines are no head, nor is a line in type
    larger than ``most`` (the body's size, ``body_size``): running heads are set no larger than the text, where the
    titles of slides, or a report's section headings at the tops of its pages, are larger, and repeat as they like;
    nor a line closer to the page's text than ``HEAD_GAP`` lines (``_apart``): a head stands apart from the text, where
    a table's header row, repeated on the page a table runs onto, sits on the rows under it."""
    placed: dict[tuple[str, int], list[tuple[float, int, int]]] = {}
    for page, (blocks, bottom, top) in enumerate(pages):
        for i, block in enumerate(blocks):
            if ("\n" not in block.text.strip() and round(block.size) <= most
                    and (edge := margin_edge(block, bottom, top)) is not None and _apart(blocks, block, edge)):
                inset = top - block.y1 if edge == "top" else block.y0 - bottom
                placed.setdefault((edge, round(block.size)), []).append((inset, page, i))
    slots: list[list[tuple[int, int]]] = []
    for (_, size), members in placed.items():
        members.sort()
        for k, (inset, page, i) in enumerate(members):
            if k == 0 or inset - members[k - 1][0] > RUNNING_DRIFT * max(size, 1):
                slots.append([])
            slots[-1].append((page, i))
    return slots


def _apart(blocks: Sequence[Block], block: Block, edge: str) -> bool:
    """Whether ``block``, at the page's ``edge``, is at least ``HEAD_GAP`` times its type size from the nearest of
    ``blocks`` on the side of the page's middle (blocks beside it, on its line, aside)."""
    if edge == "top":
        gaps = [block.y0 - b.y1 for b in blocks if b.y1 <= block.y0]
    else:
        gaps = [b.y0 - block.y1 for b in blocks if b.y0 >= block.y1]
    return min(gaps, default=math.inf) >= HEAD_GAP * block.size


def dehyphenate(texts: Sequence[str]) -> list[str]:
    """Texts (lines "\\n" apart) with each word broken at a line end made whole again: "infor-\\nmation" reads
    "information" and "well-\\nknown" "well-known". The document decides: a word found elsewhere in it whole is
    joined, a compound found elsewhere with its hyphen keeps it; otherwise the hyphen is dropped when the document
    was set with hyphenation (``HYPHENATED_SHARE`` of its line breaks end in a broken word) and kept when not. A
    hyphen before a digit or a capital letter ("COVID-\\n19", "Anglo-\\nSaxon") is always kept, a soft hyphen
    (U+00AD) always dropped."""
    words: set[str] = set()
    compounds: set[str] = set()
    breaks = hyphens = 0
    for text in texts:
        breaks += text.rstrip("\n").count("\n")
        hyphens += len(_LINE_HYPHEN.findall(text))
        flat = _LINE_HYPHEN.sub(" ", text)  # the broken words are no evidence of themselves
        words.update(w.casefold() for w in re.findall(r"\w+", flat))
        for compound in _COMPOUND.findall(flat):
            parts = re.split(r"[-\u2010]", compound.casefold())
            compounds.update(f"{a}-{b}" for a, b in itertools.pairwise(parts))
    hyphenated = breaks > 0 and hyphens / breaks >= HYPHENATED_SHARE

    def join(m: re.Match[str]) -> str:
        before, after = m.group(1), m.group(2)
        soft = m.group(0)[len(before)] == "\u00ad"
        if not soft and (not before[-1].isalpha() or not after[0].isalpha() or after[0].isupper()):
            keep = True
        elif soft or (before + after).casefold() in words:
            keep = False
        elif f"{before}-{after}".casefold() in compounds:
            keep = True
        else:
            keep = not hyphenated
        return f"{before}-{after}" if keep else before + after

    return [_LINE_HYPHEN.sub(join, text) for text in texts]


def title_block(blocks: Sequence[Block], bottom: float, top: float) -> Block | None:
    """The block of a document's first page with its title (the lines of ``Block.large``): the block in the largest
    type, when that is in the page's upper half, clearly larger than the page's running text (1.25 times its most
    common size), and its lines in that type are at most 3 and 25 words; None when there is none."""
    if not blocks:
        return None
    sizes = Counter(round(b.size) for b in blocks for _ in b.text.split())
    body = sizes.most_common(1)[0][0]
    block = max(blocks, key=lambda b: b.size)
    upper = (block.y0 + block.y1) / 2 >= (top + bottom) / 2
    if (upper and block.size >= 1.25 * body and block.large.count("\n") <= 3 and len(block.large.split()) <= 25
            and any(c.isalpha() for c in block.large)):
        return block
    return None
