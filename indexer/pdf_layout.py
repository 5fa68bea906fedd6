"""A PDF page's text boxes -> its paragraphs in reading order, for ``indexer.documents`` (``extract_pdf``).

pdfminer.six's layout analysis groups a page's characters into lines and its lines into text boxes; this module
makes the pieces of a line it cut at wide justified spaces one line again (``whole_lines``), puts the boxes in
reading order (a column after the one on its left, the rows of a table left to right), undoes the
hyphenation of words at line ends, spells out typographic ligatures and finds the title on a first page. It is where
the rest of the indexer reads PDF layout from; the work of each other step is in a module of its own:
``pdf_blocks`` (a box's lines and their text; ``Block``, a paragraph as extracted; the document's type sizes and
headings), ``pdf_paragraphs`` (the boxes that are one paragraph, a heading cut first from the box of the paragraph
under it: ``split_headings``; a list's items from each other: ``split_items``), ``pdf_furniture`` (the lines
repeated at the top or bottom of many pages: running headers and footers, page numbers; footnotes) and
``pdf_tables`` (the tables whose first row is a header). It works on anything with pdfminer's coordinates (``x0``,
``x1``, ``y0``, ``y1``: points, y upwards) and ``get_text()``.
"""

from __future__ import annotations

import bisect
import itertools
import math
import re
from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np

from spanseek.indexer.pdf_blocks import (
    HEADING_LINES,
    HEADING_SIZE,
    HEADING_WORDS,
    Block,
    body_size,
    bold_body,
    heading,
    lines,
    logical,
    right_to_left,
    same_row,
    script_shift,
    text,
)
from spanseek.indexer.pdf_furniture import (
    FOOTNOTE_SIZE,
    HEAD_GAP,
    MARGIN_BAND,
    PAGE_NUMBER_DIGITS,
    ROMAN,
    RUNNING_DRIFT,
    RUNNING_PAGES,
    footnotes,
    margin_edge,
    running,
)
from spanseek.indexer.pdf_paragraphs import (
    FULL_LINE_SLACK,
    LINE_GAP_HEIGHTS,
    LINE_PITCH_SLACK,
    LIST_ITEMS,
    SENTENCE_END,
    SPACE_HEIGHTS,
    WRAPPED_INDENT,
    WRAPPED_WIDTH,
    PageLines,
    Part,
    flow_ends,
    flows,
    justified,
    paragraphs,
    split_headings,
    split_items,
    starts_lower,
)
from spanseek.indexer.pdf_tables import tables

__all__ = ["COLUMN_LINE_CHARS", "CROSSING_LINES", "FOOTNOTE_SIZE", "FULL_LINE_SLACK", "HEAD_GAP", "HEADING_LINES",
           "HEADING_SIZE", "HEADING_WORDS", "HYPHENATED_SHARE", "Hyphenation", "LIGATURES", "LINE_GAP_HEIGHTS", "LINE_PITCH_SLACK",
           "LIST_ITEMS", "MARGIN_BAND", "PAGE_NUMBER_DIGITS", "PageLines", "ROMAN", "RUNNING_DRIFT", "RUNNING_PAGES",
           "SENTENCE_END", "SPACE_HEIGHTS", "WRAPPED_INDENT", "WRAPPED_WIDTH", "Block", "Part", "bold_body",
           "body_size", "dehyphenate", "flow_ends", "flows", "footnotes", "heading", "justified", "lines", "logical",
           "margin_edge", "paragraphs", "reading_order", "running", "same_row", "script_shift", "split_headings",
           "split_items", "starts_lower", "tables", "text", "title_block", "whole_lines"]

# a column holds running text: the median line of each side of a gutter has at least this many characters (a table's
# cells have fewer, and are read row by row instead)
COLUMN_LINE_CHARS = 20
# the lines that cross a gutter (a title or a footnote over both columns) are at most this share of the region's
CROSSING_LINES = 0.25
# typographic ligatures (Unicode's Alphabetic Presentation Forms) as their letters: "ﬁnancial" is not "financial"
# to the tokenizer or the lexical index
LIGATURES = str.maketrans({"\ufb00": "ff", "\ufb01": "fi", "\ufb02": "fl", "\ufb03": "ffi", "\ufb04": "ffl",
                           "\ufb05": "st", "\ufb06": "st"})
# a word broken over two lines: "infor-\nmation" (the hyphen may be a soft one, U+00AD, or U+2010). Each match starts
# at a word's start ((?<!\w)) and takes whole words (\w++): otherwise a line of one long word (50,000 letters) was
# tried from each of its letters, each try running to its end, and took minutes
_LINE_HYPHEN = re.compile(r"(?<!\w)(\w++)[-\u00ad\u2010][ \t]*\n\s*(\w++)")
_COMPOUND = re.compile(r"(?<!\w)\w++(?:[-\u2010]\w++)+")
# what follows a line-end hyphen's match, looked at where it ends (not in a copy of the rest of the text: a text file's
# paragraph of megabytes, hyphenated on every line, took a copy of the rest for each break): a word after a space, a
# compound's first part after a space, a hyphen and a word
_WORD_NEXT = re.compile(r"[ \t]+\w")
_COMPOUND_NEXT = re.compile(r"[ \t]+\w+[-\u2010]")
_HYPHEN_NEXT = re.compile(r"[-\u2010]\w")
# a line-end hyphen before one of these words, a word after it, is a suspended hyphen: the first word's second part
# is left to the word after the conjunction ("trans- and intercontinental", "pre- or post-war", "Ein- und
# Ausgang"), and the line break is a space. Hyphenation leaves no such fragment at a line's start ("husb-and" is
# no hyphenation point); a word the document holds whole ("thousand") is joined as any other
SUSPENDED_BEFORE = frozenset({"and", "or", "nor", "und", "oder", "bis", "sowie", "et", "ou", "y", "o", "e"})
# ... but hyphenation does leave these at a line's start ("pri-or", "gov-er-nor", "plan-et", "Kür-bis": en_US and
# de_DE patterns), and words so broken outnumber suspended hyphens before them: in SQuAD's training paragraphs
# 3,255 words have such a hyphenation point ("prior", "color", "governor", "minor", "planet"), 21 phrases are "X- or Y"
# and none "X- nor Y" or "X- et Y". In a document set with hyphenation the hyphen before one of these is suspended
# only before a compound ("pre- or post-war", "iron- or nickel-based", "two- or three-"), as 19 of those 21 are
HYPHENATION_TAILS = frozenset({"or", "nor", "et", "ou", "bis"})
# a share of line breaks that end in a hyphenated word at least this high: the document was set with hyphenation on
HYPHENATED_SHARE = 0.03


def reading_order(boxes: Sequence[Any], tops: list[Any] | None = None) -> list[Any]:
    """A page's text boxes in reading order. A gutter (an upright strip that no box crosses, with running text on
    both sides) splits a region into columns, read left to right; the few boxes that cross it (a title or a figure
    caption over two columns, a centred footer) cut the region into bands, read top to bottom, each split again.
    A region without a gutter is read in rows: top to bottom, a row's boxes (a table's cells) left to right.
    ``tops``, where given, receives the boxes read right after the foot of the column before them: each column's
    first but the first's (a paragraph may run on there, as over a page break)."""
    texts = {id(b): b.get_text() for b in boxes}
    sizes = {i: [len(line.strip()) for line in t.split("\n")[:-1] or [t]] for i, t in texts.items()}
    return _order(boxes, texts, sizes, [] if tops is None else tops)


def _order(boxes: Sequence[Any], texts: dict[int, str], sizes: dict[int, list[int]], tops: list[Any]) -> list[Any]:
    """``reading_order`` of a region, given each box's text and its lines' lengths (characters)."""
    if len(boxes) < 2:
        return list(boxes)
    cut = _gutter(boxes, sizes)
    if cut is None:
        return _rows(boxes)
    x, crossing = cut
    if not crossing:
        sides = [[b for b in boxes if b.x1 <= x], [b for b in boxes if b.x1 > x]]
        if right_to_left("".join(texts[id(b)] for b in boxes)):  # the columns of an Arabic or Hebrew page: right first
            sides.reverse()
        first, second = _order(sides[0], texts, sizes, tops), _order(sides[1], texts, sizes, tops)
        tops.append(second[0])
        return first + second
    separators = sorted(crossing, key=lambda b: -b.y1)
    middles = [(s.y0 + s.y1) / 2 for s in separators]
    bands: list[list[Any]] = [[] for _ in range(len(separators) + 1)]
    for box in boxes:
        if not any(box is s for s in separators):
            bands[sum((box.y0 + box.y1) / 2 < m for m in middles)].append(box)
    ordered = _order(bands[0], texts, sizes, tops)
    for separator, band in zip(separators, bands[1:], strict=True):
        ordered += [separator, *_order(band, texts, sizes, tops)]
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


def whole_lines(boxes: Sequence[Any]) -> list[list[list[Any]]]:
    """Each text box's lines top to bottom, the pieces of one line together, left to right (a list of them for each
    line; none for a box whose lines all went to another's). A justified line of a narrow column has spaces wide enough (more than
    ``char_margin`` times a glyph's width) that layout analysis cuts it in pieces, and puts them in its box in any
    order, or a piece in a box of its own: "Entertainment on its Weekly put" was read for "Entertainment Weekly put
    it on its". Lines of a box on one baseline, in type of one size, are pieces of one line where each gap between
    them is inside the column: text of the box's ``_NEAR_ROWS`` lines above or below it reaches into the gap (the
    gutter between two columns is empty all the way down); a line of another box on that baseline inside such a gap
    is a piece of it too, and so are boxes whose lines are each a piece (``_join_boxes_on_baselines``)."""
    grouped = [_baselines(lines(box)) for box in boxes]
    gaps = []  # (baseline, box, group, left edge, right edge) of each gap inside a column between a line's pieces
    for b, groups in enumerate(grouped):
        for g, pieces in enumerate(groups):
            gaps += [(pieces[0].y0, b, g, left.x1, right.x0) for left, right in itertools.pairwise(pieces)]
    gaps.sort(key=lambda gap: gap[0])
    baselines = [gap[0] for gap in gaps]
    for b, box in enumerate(boxes):
        for line in lines(box):
            tolerance = _BASELINE * (line.y1 - line.y0)
            for _y, into, g, x0, x1 in gaps[bisect.bisect_left(baselines, line.y0 - tolerance):
                                            bisect.bisect_right(baselines, line.y0 + tolerance)]:
                target = grouped[into][g]
                if (into != b and x0 <= line.x0 + tolerance and line.x1 - tolerance <= x1
                        and not any(piece is line for piece in target) and _one_size(target[0], line)):
                    target.append(line)
                    target.sort(key=lambda piece: piece.x0)
                    for pieces in grouped[b]:  # moved out of its own box
                        pieces[:] = [piece for piece in pieces if piece is not line]
                    break
    _join_boxes_on_baselines(grouped)
    return [[pieces for pieces in groups if pieces] for groups in grouped]


def _join_boxes_on_baselines(grouped: list[list[list[Any]]]) -> None:
    """Join the pieces of a line that are each in a box of their own (``grouped``: each box's lines as pieces,
    ``whole_lines``): at 1.5 or double line spacing every line is a box, and a justified line cut at its wide spaces
    is a box a piece ("internationally" | "recognised" | "pilotage,"), with no gap inside any box. Lines of different
    boxes on one baseline, in type of one size, are one line where the text of a row above and of a row below (within
    ``_NEAR_ROWS`` times three line heights: a column beside it puts its own rows between) covers each gap between
    them from end to end, nearer than any row that breaks at the gap's edge with text on both sides of it (``side``):
    a gutter between columns no row crosses, and the rows of a table, or of two short columns, between paragraphs
    above and below them break where their neighbours do. Two passes: a row cut in pieces under it covers its gaps
    once joined."""
    entries = sorted(((b, g) for b, groups in enumerate(grouped) for g, pieces in enumerate(groups) if pieces),
                     key=lambda e: -grouped[e[0]][e[1]][0].y0)
    rows: list[list[tuple[int, int]]] = []
    for entry in entries:
        first = grouped[entry[0]][entry[1]][0]
        if rows and (head := grouped[rows[-1][0][0]][rows[-1][0][1]][0]) and abs(head.y0 - first.y0) <= (
                _BASELINE * (first.y1 - first.y0)) and _one_size(head, first):
            rows[-1].append(entry)
        else:
            rows.append([entry])

    def extents(row: list[tuple[int, int]]) -> list[list[float]]:  # the stretches its text runs over, left to right
        union: list[list[float]] = []
        for left, right in sorted((min(p.x0 for p in grouped[b][g]), max(p.x1 for p in grouped[b][g]))
                                  for b, g in row if grouped[b][g]):
            if union and left <= union[-1][1]:
                union[-1][1] = max(union[-1][1], right)
            else:
                union.append([left, right])
        return union

    spans = [extents(row) for row in rows]

    def covered(row: int, x0: float, x1: float) -> bool:  # the row's text runs over x0 .. x1 without a break
        i = bisect.bisect_right(spans[row], [x0, math.inf]) - 1  # (a binary search: a row may have many pieces)
        return i >= 0 and spans[row][i][1] >= x1

    def reaches(row: int, x0: float, x1: float) -> bool:  # some of the row's text is between x0 and x1
        i = bisect.bisect_left(spans[row], [x1, -math.inf]) - 1  # the last stretch starting before x1
        return i >= 0 and spans[row][i][1] > x0

    def side(k: int, rows_: range, line: tuple[float, float], x0: float, x1: float) -> bool:
        """Whether text of a row of these near row k (within ``_NEAR_ROWS`` times three line heights), nearest first,
        covers the gap x0 .. x1 of a line from ``line[0]`` to ``line[1]`` before a row with text on both sides of the
        gap breaks where it does: the column edges of a table's next row or a column beside this one. A row with text
        on one side only (a paragraph's short last line), or with a wide space of its own across part of the gap, is
        passed over."""
        first = grouped[rows[k][0][0]][rows[k][0][1]][0]
        height = first.y1 - first.y0
        for j in rows_:
            if not (0 <= j < len(rows) and rows[j]) or abs(grouped[rows[j][0][0]][rows[j][0][1]][0].y0 - first.y0) > (
                    3 * _NEAR_ROWS * height):
                continue
            if covered(j, x0, x1):
                return True
            if reaches(j, line[0], x0) and reaches(j, x1, line[1]) and (
                    edge(j, x0, height, 1) or edge(j, x1, height, 0)):
                return False
        return False

    def edge(row: int, x: float, height: float, end: int) -> bool:  # a stretch of the row's text ends (1) or starts at x
        i = bisect.bisect_left(spans[row], x - _BASELINE * height, key=lambda stretch: stretch[end])
        return i < len(spans[row]) and spans[row][i][end] <= x + _BASELINE * height

    for _ in range(2):
        for k, row in enumerate(rows):
            row[:] = sorted((e for e in row if grouped[e[0]][e[1]]), key=lambda e: grouped[e[0]][e[1]][0].x0)
            into = row[0]
            for entry in row[1:]:
                target, pieces = grouped[into[0]][into[1]], grouped[entry[0]][entry[1]]
                x0, x1 = max(p.x1 for p in target), min(p.x0 for p in pieces)
                line = (min(p.x0 for p in target), max(p.x1 for p in pieces))
                if (entry[0] != into[0] and x0 <= x1 and side(k, range(k - 1, k - 4 * _NEAR_ROWS - 1, -1), line, x0, x1)
                        and side(k, range(k + 1, k + 4 * _NEAR_ROWS + 1), line, x0, x1)):
                    target += pieces
                    pieces.clear()
                else:
                    into = entry
            row[:] = [e for e in row if grouped[e[0]][e[1]]]
            spans[k] = extents(row)


# the pieces of one line are on one baseline: within this share of the line's height
_BASELINE = 0.2
# a gap between two pieces is inside the column where text of this many lines above or below reaches into it (two:
# the line right above may have a wide space of its own there)
_NEAR_ROWS = 2


def _one_size(a: Any, b: Any) -> bool:
    """Whether two lines are in type of one size: their heights within ``_BASELINE`` of each other's."""
    return abs((a.y1 - a.y0) - (b.y1 - b.y0)) <= _BASELINE * (a.y1 - a.y0)


def _baselines(box_lines: Sequence[Any]) -> list[list[Any]]:
    """A box's lines top to bottom, those on one baseline in one list left to right, where each gap between them is
    inside the column (``whole_lines``); a gap that the text around it leaves empty (a gutter) cuts them apart."""
    rows: list[list[Any]] = []
    for line in sorted(box_lines, key=lambda line: -line.y0):
        if rows and abs(rows[-1][0].y0 - line.y0) <= _BASELINE * (line.y1 - line.y0) and _one_size(rows[-1][0], line):
            rows[-1].append(line)
        else:
            rows.append([line])
    out: list[list[Any]] = []
    for k, row in enumerate(rows):
        row.sort(key=lambda line: line.x0)
        near = [line for r in rows[max(0, k - _NEAR_ROWS):k + _NEAR_ROWS + 1] if r is not row for line in r]
        out.append([row[0]])
        for left, right in itertools.pairwise(row):
            if left.x1 <= right.x0 and any(n.x0 < right.x0 and left.x1 < n.x1 for n in near):
                out[-1].append(right)
            else:
                out.append([right])
    return out


class Hyphenation:
    """How a document's words broken at line ends are made whole again (lines "\\n" apart): "infor-\\nmation" reads
    "information" and "well-\\nknown" "well-known". The document decides: a word found elsewhere in it whole is
    joined, a compound found elsewhere with its hyphen keeps it; otherwise the hyphen is dropped when the document
    was set with hyphenation (``HYPHENATED_SHARE`` of its line breaks end in a broken word) and kept when not. A
    hyphen before a digit or a capital letter ("COVID-\\n19", "Anglo-\\nSaxon") is always kept, a soft hyphen
    (U+00AD) always dropped. A hyphen before a conjunction (``SUSPENDED_BEFORE``) and a word after it is a suspended
    one, a space after it: "trans-\\nand intercontinental" reads "trans- and intercontinental"; in a document set with
    hyphenation, before one that hyphenation also leaves at a line's start (``HYPHENATION_TAILS``: "pri-\\nor"), only
    where a compound follows ("pre-\\nor post-war"). A hyphen before a conjunction that a hyphen follows is a
    compound's, kept: "rock-\\nand-roll" reads "rock-and-roll" (in a document set with hyphenation, not before one of
    ``HYPHENATION_TAILS``: "gover-\\nnor-general" is a word broken). ``mend`` makes a text whole by the evidence of
    the ``texts`` given (a PDF's: a word broken where its paragraph goes on in the next column or page too)."""

    def __init__(self, texts: Sequence[str]) -> None:
        self.words: set[str] = set()
        self.compounds: set[str] = set()
        breaks = hyphens = 0
        for box_text in texts:
            breaks += box_text.rstrip("\n").count("\n")
            hyphens += len(_LINE_HYPHEN.findall(box_text))
            flat = _LINE_HYPHEN.sub(" ", box_text)  # the broken words are no evidence of themselves
            self.words.update(w.casefold() for w in re.findall(r"\w+", flat))
            for compound in _COMPOUND.findall(flat):
                parts = re.split(r"[-\u2010]", compound.casefold())
                self.compounds.update(f"{a}-{b}" for a, b in itertools.pairwise(parts))
        self.hyphenated = breaks > 0 and hyphens / breaks >= HYPHENATED_SHARE

    def mend(self, text: str) -> str:
        """``text`` (lines "\\n" apart) with each word broken at a line's end made whole (the class's docstring)."""
        return _LINE_HYPHEN.sub(self._join, text)

    def _join(self, m: re.Match[str]) -> str:
        before, after, text, end = m.group(1), m.group(2), m.string, m.end()
        soft = m.group(0)[len(before)] == "\u00ad"
        conjunction = after in SUSPENDED_BEFORE and (not self.hyphenated or after not in HYPHENATION_TAILS)
        if not soft and (not before[-1].isalpha() or not after[0].isalpha() or after[0].isupper()):
            keep = True
        elif soft or (before + after).casefold() in self.words:
            keep = False
        elif after in SUSPENDED_BEFORE and _WORD_NEXT.match(text, end) and (
                conjunction or _COMPOUND_NEXT.match(text, end)):
            return f"{before}- {after}"  # a suspended hyphen, a word after its conjunction
        elif conjunction and _HYPHEN_NEXT.match(text, end):  # a compound through its conjunction: "rock-and-roll"
            keep = True
        elif f"{before}-{after}".casefold() in self.compounds:
            keep = True
        else:
            keep = not self.hyphenated
        return f"{before}-{after}" if keep else before + after


def dehyphenate(texts: Sequence[str]) -> list[str]:
    """Texts (lines "\\n" apart) with each word broken at a line end made whole again, by their own evidence
    (``Hyphenation``)."""
    hyphenation = Hyphenation(texts)
    return [hyphenation.mend(box_text) for box_text in texts]


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
