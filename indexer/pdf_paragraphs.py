"""A page's text boxes (in reading order) -> the runs of them that are one paragraph each, for ``indexer.documents``
through ``indexer.pdf_layout``.

Layout analysis puts lines closer than half a line in one box: at wider line spacing each line is a box of its own,
and a heading set right over its paragraph, or a list's items, share one. ``split_headings`` cuts a heading from its
paragraph's box, ``split_items`` each list item (a bullet, a dash, a counter, a hanging indent's entry) from the
lines above it, and ``paragraphs`` joins the boxes a paragraph's text runs on through (a full line, or one that
wrapped early before a long word). ``spanseek corpus from-files`` runs it on each page of a PDF.
"""

from __future__ import annotations

import bisect
import itertools
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, overload

import numpy as np

from spanseek.indexer.pdf_blocks import (
    HEADING_LINES,
    HEADING_SIZE,
    HEADING_WORDS,
    all_bold,
    contents,
    line_text,
    lines,
    monospaced,
    run_lines,
    same_row,
    text,
)
from spanseek.indexer.pdf_furniture import ROMAN, numeral_value

# a sentence's end: its stop, closing quotes and brackets, and notes in brackets after it (Wikipedia's "[citation
# needed]", a reference's "[12]": a paragraph that ends in one was joined to the next one's indented first line)
SENTENCE_END = re.compile(r"[.!?:][\"')\]»”’]*(?:\[[^\[\]]{1,40}\])*$")
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
# prose, and so is one under a line that wrapped mid-sentence: the dash is set in that sentence), or with a number
# or letter ("1. ", "(a) ", "(ii) ", a reference's "[12] ") that another line of its page starts with in that form,
# one more or one less: a list counts its items, where prose whose lines start "8. " and "2) " (a formula's
# subscripts on lines of their own, a year at a line's start) counts nothing; a citation ("[12]") under a line that
# wrapped mid-sentence is in that sentence, as a dash is
_BULLET = (r"[\u2022\u2023\u2043\u2219\u00b7\u25a0\u25a1\u25aa\u25ab\u25b6\u25b8\u25b9\u25ba\u25c6\u25c7\u25cb"
           r"\u25cf\u25e6\u2666\u2756\u2794\u27a2\u27a4\u2713\u2714\u2717\uf000-\uf0ff]\s*|\(cid:\d+\)\s+")
_ITEM = re.compile(rf"\s*(?:(?P<glyph>{_BULLET})|(?P<mark>[-\u2013\u2014*]|\(?\d{{1,2}}[.)]|\(\d{{1,2}}\)|"
                   r"\(?[a-z]\)|\([ivx]{1,4}\)|\[\d{1,3}\])\s+)\S")
LIST_ITEMS = 2
_IN_SENTENCE = {"-", "\u2013", "\u2014", "*", "[1]"}  # the forms prose also sets mid-sentence
# a paragraph whose last line is in this share of its page's height at the foot may run on onto the next page: a
# page that ends higher up was not filled
PAGE_FOOT = 0.25
# a page is justified when more than this share of the lines its paragraphs wrap at (this many at least) end within
# this many points of their column's right edge: a ragged page's end where their last word did
JUSTIFIED_SHARE = 0.6
JUSTIFIED_LINES = 5
JUSTIFIED_SLACK = 1.0
_CLAUSE_END = re.compile(r"[.!?:;,][\"')\]»”’]*$")


class PageLines(Sequence[Any]):
    """A page's lines, its text boxes' (``boxes``, in reading order) one after another, and the edges of each line's
    column (``column``). Those edges are the extremes of the lines over and under it (overlapping it across the
    page); each is found by a binary search over the lines sorted by one edge, with the other edge's running extreme
    (a line of a page of 2,000 was measured against all of them, and a page's lines against each other took
    seconds)."""

    def __init__(self, boxes: Sequence[Any]) -> None:
        self.boxes = boxes
        self._lines = [line for box in boxes for line in lines(box)]
        placed = [line for line in self._lines if line.x0 < line.x1]  # a line of no width overlaps none
        by_left = sorted(placed, key=lambda line: line.x0)
        by_right = sorted(placed, key=lambda line: -line.x1)
        self._lefts, self._rights = [line.x0 for line in by_left], [line.x1 for line in by_right]
        # the furthest right edge among the lines up to each (by left edge), and the furthest left edge negated among
        # the lines up to each (by right edge, from the right): both ascending, for ``bisect``
        self._reach = list(itertools.accumulate((line.x1 for line in by_left), max))
        self._start = list(itertools.accumulate((-line.x0 for line in by_right), max))

    def __len__(self) -> int:
        return len(self._lines)

    @overload
    def __getitem__(self, k: int) -> Any: ...
    @overload
    def __getitem__(self, k: slice) -> list[Any]: ...
    def __getitem__(self, k: int | slice) -> Any:
        return self._lines[k]

    def column(self, line: Any) -> tuple[float, float]:
        """The left and right edges of the page's lines over and under ``line`` (overlapping it across the page): its
        column's; its own where none does."""
        i = bisect.bisect_right(self._reach, line.x0)  # the line furthest left of those reaching past line's left
        j = bisect.bisect_right(self._start, -line.x1)  # the one furthest right of those starting before its right
        if line.x0 < line.x1 and i < len(self._lefts) and self._lefts[i] < line.x1 and self._rights[j] > line.x0:
            return self._lefts[i], self._rights[j]
        return line.x0, line.x1


def paragraphs(boxes: Sequence[Any]) -> list[list[Any]]:
    """A page's text boxes (in reading order) in runs that are one paragraph each. Layout analysis puts two lines in
    one box when the space between them is under half a line: at 1.5 or double line spacing every line is a box of
    its own, and a paragraph was cut into passages mid-sentence. Here the page's line pitch is the median distance
    between consecutive baselines (within boxes and from one box to the next); a box whose first line follows the
    last one of the box before it by at most ``LINE_PITCH_SLACK`` pitches, in the same column and the same size of
    type, goes on with its paragraph when the line before it is full (reaches the column's right edge within
    ``FULL_LINE_SLACK`` of its width, and spans ``WRAPPED_WIDTH`` of it: the text wrapped) or wrapped early (the
    box's first word would not have fit after it: a long address or word came next) and does not end a sentence
    (or is both, and ends a sentence or a colon's clause, with the box's first line flush left: the sentence ended
    where the text wrapped, unless the page is ``justified`` and the line ends short of the edge; a colon's sentence
    goes on also where the box starts in lower case: ``_introduces``); a short line (a heading, a list item, a
    contents line, a head set flush right) ends its paragraph, and so does a heading cut from its paragraph (``split_headings``); a list's item starts one
    (``split_items``). A gap wider than that (the extra space between paragraphs, at any line spacing), or than
    ``LINE_GAP_HEIGHTS`` times the line's height, starts a new one. Boxes of one line each on one baseline (the cells
    of a table's row) are one, and a paragraph of their own."""
    def follows(a: Any, b: Any) -> float | None:  # baseline distance from line a down to line b, same column
        overlap = min(a.x1, b.x1) - max(a.x0, b.x0)
        return a.y0 - b.y0 if overlap > 0 and a.y0 > b.y0 else None

    pitches = [d for box in boxes for a, b in itertools.pairwise(lines(box)) if (d := follows(a, b))]
    pitches += [d for a, b in itertools.pairwise(boxes) if (d := follows(lines(a)[-1], lines(b)[0]))]
    pitch = float(np.median(pitches)) if pitches else 0.0
    every = PageLines(boxes)
    # on a justified page a line the text wrapped at reaches its column's edge: one that ends short ends its paragraph
    justified_page = justified([[box] for box in boxes], every)

    def wrapped(line: Any, below: Any) -> bool:  # the first word of line ``below`` would not have fit after ``line``
        room, word = _room(line, every), _first_word(below)
        return room is not None and word is not None and word > room

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
            open_end = not SENTENCE_END.search(ending) or _introduces(ending, box)
            # a sentence that ends on a line the text wrapped at goes on (the next line, flush left, is no new
            # paragraph's indented first line), and so does one that ends in a colon
            flowed = (_full(last, every) and flows(_room(last, every), _opening(first, every))
                      and not (justified_page and every.column(last)[1] - last.x1 > JUSTIFIED_SLACK))
            if ((flowed or getattr(box, "hanging", False) or (open_end and (_full(last, every) or wrapped(last, first))))
                    and not getattr(before, "head", False) and d is not None and d <= min(LINE_PITCH_SLACK * pitch, LINE_GAP_HEIGHTS * last.height)
                    and abs(last.height - first.height) <= 0.2 * last.height):
                runs[-1].append(box)
                continue
        runs.append([box])
    return _entries_together(runs, follows)


def _entries_together(runs: list[list[Any]], follows: Any) -> list[list[Any]]:
    """A page's paragraphs (runs of boxes) with the entries of a contents page that follow each other down a column
    in one (``pdf_blocks.contents``): each entry a paragraph of its own was a search's hit for its chapter's title,
    over the chapter."""
    out: list[list[Any]] = []
    for run in runs:
        if (out and contents(run_lines(run)) and contents(run_lines(out[-1]))
                and any(follows(lines(box)[-1], lines(run[0])[0]) is not None for box in out[-1][-2:])):
            out[-1] += run
        else:
            out.append(run)
    return out


def _introduces(ending: str, box: Any) -> bool:
    """Whether a paragraph's text ``ending`` in a colon goes on in ``box``: its first line starts in lower case ("...
    as follows: / the container terminal, ..."); a capital or a list's item under a colon opens a paragraph unless
    the text wrapped at the colon (``flows``)."""
    return ending.endswith(":") and starts_lower(line_text(lines(box)[0]))


def starts_lower(text: str) -> bool:
    """Whether a text's first word starts in lower case, as a sentence that goes on does: a name written with a
    capital inside it ("iTunes", "iPod", "eBay") opens a sentence of its own as a capital does."""
    word = text.lstrip().split(maxsplit=1)[0] if text.strip() else ""
    return word[:1].islower() and not any(c.isupper() for c in word[1:])


def flows(room: float | None, opening: float | None) -> bool:
    """Whether a paragraph whose last line has ``room`` left at its end (``_room``) goes on in a line that starts
    flush left with a word ``opening`` wide (``_opening``): the word did not fit, so the text wrapped there, even
    where a sentence ended or a colon did. A colon's sentence goes on where the text wrapped after it ("... observed
    that:" over a quotation, "... phonemes:" over "/a ɛ e/" each cut a paragraph of the held-out SQuAD articles set
    as PDF at 1.5 line spacing, none of which has a list under a colon); a list introduced on a line that ends short
    stays apart from its items.

    At a page's or column's foot the test cannot tell a paragraph that goes on with a new sentence from one that
    ended on a full line over a new paragraph set flush left (as word processors set paragraphs, space between them):
    both read alike. Joining them errs less than ending a paragraph wherever a sentence ends there. SQuAD paragraphs
    set ragged by fpdf2 with 3 mm between them, counted over their page breaks: A4 with 170 mm lines, 608 breaks, 8
    paragraphs ended at the foot read on against 16 cut where a sentence ended at the foot; A4 with 80 mm lines, 1,232
    breaks, 16 against 36; A6 with 85 mm lines, 1,039 breaks, 10 against 31 (read from the PDF, 399 of its breaks: 0
    against 11). A justified page's last line that ends short of the edge ends its paragraph (``flow_ends``)."""
    return room is not None and opening is not None and opening > room


def flow_ends(run: Sequence[Any], every: PageLines, bottom: float, top: float, justified_page: bool = False
              ) -> tuple[float | None, float | None]:
    """What a paragraph (a run of boxes, ``paragraphs``) of a page whose lines are ``every`` (its edges ``bottom``
    and ``top``) tells of its text going on past the page's foot or a column's (``flows``): the room at the end of its
    last line when that line is full and in the page's lowest ``PAGE_FOOT`` (the text filled the page down to there),
    else None; the width of its first line's first word when that line starts flush left, else None. On a
    ``justified_page`` (``justified``) a line the text wrapped at ends at its column's edge: one that ends short of
    it ends its paragraph."""
    last = lines(run[-1])[-1]
    room = _room(last, every) if _full(last, every) and last.y0 <= bottom + PAGE_FOOT * (top - bottom) else None
    if room is not None and justified_page and every.column(last)[1] - last.x1 > JUSTIFIED_SLACK:
        room = None
    return room, _opening(lines(run[0])[0], every)


def justified(runs: Sequence[Sequence[Any]], every: PageLines) -> bool:
    """Whether a page's text is justified: of the lines its paragraphs (``runs``, ``paragraphs``; its lines
    ``every``) wrap at, all but each one's last (``JUSTIFIED_LINES`` at least), more than ``JUSTIFIED_SHARE`` end
    within ``JUSTIFIED_SLACK`` of their column's right edge."""
    wrapping = [line for run in runs for line in [line for box in run for line in lines(box)][:-1]]
    flush = sum(every.column(line)[1] - line.x1 <= JUSTIFIED_SLACK for line in wrapping)
    return len(wrapping) >= JUSTIFIED_LINES and flush > JUSTIFIED_SHARE * len(wrapping)


def _room(line: Any, every: PageLines) -> float | None:
    """The room left at the end of a page's line (of ``every``) for the next line's first word, a space before it
    (``SPACE_HEIGHTS`` of the line's height); None when the line is set in from its column's left edge by more than
    ``WRAPPED_INDENT`` of its width (a head set flush right wraps nothing)."""
    left, right = every.column(line)
    if line.x0 - left > WRAPPED_INDENT * (right - left):
        return None
    return float(right - line.x1 - SPACE_HEIGHTS * line.height)


def _opening(line: Any, every: PageLines) -> float | None:
    """The width of a page's line's first word (``_first_word``) when the line starts flush left in its column
    (within half its height: a paragraph's first line indented opens a paragraph); else None."""
    return _first_word(line) if line.x0 - every.column(line)[0] <= 0.5 * line.height else None




def _full(line: Any, every: PageLines) -> bool:
    """Whether ``line`` reaches (nearly) the right edge of its column, across most of it: the text wrapped there (a
    running head set to the right, over the text, wraps nothing)."""
    left, right = every.column(line)
    width = right - left
    return line.x1 >= right - FULL_LINE_SLACK * width and line.x1 - line.x0 >= WRAPPED_WIDTH * width


def _first_word(line: Any) -> float | None:
    """The width of a line's first word (its glyphs up to the first space), or None when its glyphs are not placed."""
    glyphs = [g for g in line if hasattr(g, "get_text")] if hasattr(line, "__iter__") else []
    word = list(itertools.takewhile(lambda g: not g.get_text().isspace(),
                                    itertools.dropwhile(lambda g: g.get_text().isspace(), glyphs)))
    if not word or not all(hasattr(g, "x0") and hasattr(g, "x1") for g in word):
        return None
    return float(max(g.x1 for g in word) - min(g.x0 for g in word))


@dataclass
class Part:
    """Some of a text box's lines, as a box of their own: a heading cut from the paragraph under it
    (``split_headings``, ``head`` set), or that paragraph; a list's item (``split_items``)."""

    lines: list[Any]
    head: bool = False
    item: bool = False  # it opens a list's item (``split_items``)
    hanging: bool = False  # it goes on with the list's entry above it, under a hanging indent (``split_items``)
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
    ("- ", "1. ", "(a) ": ``_item_lines``), unless it is set in a monospaced font (a code listing's line: a YAML
    list, a diff, a Markdown file shown as code stays one block). A paragraph's first line indented under the full
    last line of the one before (``_indented_lines``: paragraphs set without space between them, as books are) is
    cut from it too, and so is each entry of a list set with a hanging indent (``_hanging_lines``: an unnumbered
    reference list's). The lines of a box from one such line to the next are a ``Part`` (an item's lines that wrap,
    under it, stay with it), ``item`` set where it opens an item, ``hanging`` where it goes on with the entry above
    it (``paragraphs`` joins it to that entry at any line spacing)."""
    page = PageLines(boxes)
    entries, wrapped = _hanging_lines(page)
    items = _item_lines(page) | entries
    opening = items | _indented_lines(page) | _after_short_lines(page)
    out: list[Any] = []
    for box in boxes:
        every = lines(box)
        cuts = [0, *(k for k in range(1, len(every)) if id(every[k]) in opening), len(every)]
        if len(cuts) == 2 and id(every[0]) not in items and id(every[0]) not in wrapped:
            out.append(box)
            continue
        out += [Part(every[a:b], head=getattr(box, "head", False) and a == 0, item=id(every[a]) in items,
                     hanging=id(every[a]) in wrapped) for a, b in itertools.pairwise(cuts)]
    return out


def _hanging_lines(every: PageLines) -> tuple[set[int], set[int]]:
    """The ids of a page's lines that open an entry of a list set with a hanging indent (a reference list in APA or
    Harvard style: each entry's first line at its column's left edge, the lines it wraps onto set in), and of the
    entries' wrapped lines. Such a list is a run of the page's lines, each right under the one before (within
    ``LINE_GAP_HEIGHTS`` of its height) in its column, each flush left or set in by one indent (``_indent``), where a
    flush line over a flush line ends a clause or is short (``_runs_on``: in prose the text wraps from one flush line
    to the next; in such a list only onto an indented line), and where ``LIST_ITEMS`` flush lines at least, each
    over an indented line, end no sentence (an entry's first line, wrapped: a paragraph's last line over the next
    one's indented first line ends a sentence). The run starts at its first flush line over an indented line; each
    flush line from there opens an entry, and each indented line is an entry's wrapped line."""
    indents = [_indent(line, every) for line in every]

    def under(k: int) -> bool:  # line k is right under line k - 1, in its column
        a, b = every[k - 1], every[k]
        return (min(a.x1, b.x1) - max(a.x0, b.x0) > 0 and 0 < a.y0 - b.y0 <= LINE_GAP_HEIGHTS * a.height
                and indents[k] is not None and indents[k - 1] is not None
                and (indents[k] == 0 or indents[k - 1] == 0 or abs(indents[k] - indents[k - 1]) <= 0.5 * b.height)
                and not (indents[k] == indents[k - 1] == 0 and _runs_on(a, every)))

    entries: set[int] = set()
    wrapped: set[int] = set()
    start = 0
    for k in range(1, len(every) + 1):
        if k < len(every) and under(k):
            continue
        run = range(start, k)  # lines start .. k - 1, right under each other
        opens = [j for j in run if indents[j] == 0 and j + 1 < k and indents[j + 1]]
        if sum(not SENTENCE_END.search(line_text(every[j]).rstrip()) for j in opens) >= LIST_ITEMS:
            entries.update(id(every[j]) for j in range(opens[0], k) if indents[j] == 0)
            wrapped.update(id(every[j]) for j in range(opens[0], k) if indents[j])
        start = k
    return entries, wrapped


def _indent(line: Any, every: PageLines) -> float | None:
    """How far a page's line (of ``every``) is set in from its column's left edge: 0 within half its height (flush
    left), else the distance, up to ``WRAPPED_INDENT`` of the column's width (a paragraph's first line, a hanging
    indent's wrapped lines); None when it is set in further (centred, flush right)."""
    left, right = every.column(line)
    inset = float(line.x0 - left)
    if inset <= 0.5 * line.height:
        return 0.0
    return inset if inset <= WRAPPED_INDENT * (right - left) else None


def _indented_lines(every: PageLines) -> set[int]:
    """The ids of a page's lines that open an indented paragraph inside a text box (``split_items``): set in from
    their column's left edge by more than half their height and at most ``WRAPPED_INDENT`` of its width, in the
    text's font (a code listing's indented lines are code), full (``_full``), under a line of their box that starts
    at that edge and ends a sentence, and over a line that starts at the edge again: a paragraph's first line
    indented, as books set paragraphs without space between them. Layout analysis puts such a line in the box of
    the paragraph before where that paragraph's last line ends near the right edge, as the indented line does (a
    list's or a reference's wrapped lines under a hanging indent are all indented, or end short)."""
    after = {id(line): under for line, under in itertools.pairwise(every)}  # the page's next line
    opening: set[int] = set()
    for box in every.boxes:
        for above, line in itertools.pairwise(lines(box)):
            if not (_indent(line, every) and _indent(above, every) == 0 and not monospaced([line])):
                continue
            under = after.get(id(line))
            if (SENTENCE_END.search(line_text(above).rstrip()) and _full(line, every) and under is not None
                    and _indent(under, every) == 0):
                opening.add(id(line))
    return opening


def _after_short_lines(every: PageLines) -> set[int]:
    """The ids of a justified page's lines that open a paragraph inside a text box (``split_items``): flush left,
    under a line of their box that ends a sentence short of its column's right edge (by more than twice
    ``JUSTIFIED_SLACK``), as a justified paragraph's last line does. Paragraphs set without space between them and without an indent
    (fpdf2's text columns) are one box to layout analysis, which read as one paragraph. The page is justified when
    the lines its boxes wrap at end at their column's edge (``justified``)."""
    if not justified([[box] for box in every.boxes], every):
        return set()
    opening: set[int] = set()
    for box in every.boxes:
        for above, line in itertools.pairwise(lines(box)):
            if (every.column(above)[1] - above.x1 > 2 * JUSTIFIED_SLACK and _indent(line, every) == 0
                    and SENTENCE_END.search(line_text(above).rstrip()) and not monospaced([line])):
                opening.add(id(line))
    return opening


def _item_lines(every: PageLines) -> set[int]:
    """The ids of a page's lines that open a list's item (``split_items``)."""
    items: set[int] = set()
    marks: dict[str, list[tuple[int, set[int]]]] = {}  # each form ("1.", "(a)", "-") -> its lines, with their counts
    matches = [None if monospaced([line]) else _ITEM.match(line_text(line)) for line in every]
    for k, (line, m) in enumerate(zip(every, matches, strict=True)):
        if not m:
            continue
        if m["glyph"]:
            items.add(id(line))
            continue
        form = re.sub(r"\d+", "1", re.sub(r"[a-z]+", "a", m["mark"]))
        if form in _IN_SENTENCE and k and not matches[k - 1] and _runs_on(every[k - 1], every):
            continue  # a dash or citation set in a sentence that wrapped before it ("the cranes / – all –")
        counter = re.sub(r"[^\da-z]", "", m["mark"])
        marks.setdefault(form, []).append((id(line), _counts(counter)))
    for form, found in marks.items():
        counted = {n for _, counts in found for n in counts}
        if any(c.isalnum() for c in form):  # a counter: the lines one up or one down from another
            items.update(i for i, counts in found if any(n - 1 in counted or n + 1 in counted for n in counts))
        elif len(found) >= LIST_ITEMS:  # a dash
            items.update(i for i, _ in found)
    return items


def _runs_on(line: Any, every: PageLines) -> bool:
    """Whether the text goes on after ``line``, one of a page's lines (``every``, in reading order): it is full
    (``_full``: the text wrapped there) and ends no sentence or clause."""
    return _full(line, every) and not _CLAUSE_END.search(line_text(line).rstrip())


def _counts(counter: str) -> set[int]:
    """What a list's counter may count: a number's value; a letter's place in the alphabet, and a roman numeral's
    value ("i" is the first or the ninth)."""
    if counter.isdigit():
        return {int(counter)}
    values = {ord(counter) - ord("a") + 1} if len(counter) == 1 else set()
    return values | ({numeral_value(counter)} if re.fullmatch(ROMAN, counter) else set())


def _type_size(line: Any) -> float:
    """A line's type size: its glyphs' median height (pdfminer's ``size``), else the line's. One tall glyph (a
    bracket, a symbol from another font) makes a line's box taller than its type."""
    sizes = [g.size for g in line if hasattr(g, "size")] if hasattr(line, "__iter__") else []
    return float(np.median(sizes)) if sizes else float(line.y1 - line.y0)


def _heading_lines(every: Sequence[Any]) -> int:
    """How many of a box's first lines are a heading over the rest (``split_headings``); 0 when none are."""
    bold = [all_bold([line]) for line in every]
    height = [_type_size(line) for line in every]

    def apart(k: int) -> bool:  # the first k lines are a heading over line k
        return all(height[j] >= HEADING_SIZE * height[k] or (bold[j] and not bold[k]) for j in range(k))

    k = next((k for k in range(1, min(HEADING_LINES, len(every) - 1) + 1) if apart(k)), 0)
    head = "".join(line_text(line) for line in every[:k])
    if k and (len(head.split()) > HEADING_WORDS or not any(c.isalpha() for c in head)
              or every[k].get_text().lstrip()[:1].islower()):
        return 0
    return k
