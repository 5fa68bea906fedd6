"""A PDF's page furniture, for ``indexer.documents`` through ``indexer.pdf_layout``: the running headers and footers
that repeat in the margins of many pages (``running``, ``margin_edge``), page numbers (arabic or roman) among them,
and the footnotes at the foot of a page or column (``footnotes``). ``spanseek corpus from-files`` runs it on each
PDF.
"""

from __future__ import annotations

import itertools
import math
import re
from collections import Counter
from collections.abc import Iterable, Sequence

import numpy as np

from spanseek.indexer.pdf_blocks import Block, body_size

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
# a page's number: digits, or a roman numeral up to 399 (front matter's "iv"; without d and m, which end words)
ROMAN = r"\b(?=[ivxlc]+\b)c{0,3}(?:xc|xl|l?x{0,3})(?:ix|iv|v?i{0,3})(?<=[ivxlc])\b"
_NUMBER = re.compile(rf"\d+|{ROMAN}")
_ROMAN_DIGITS = {"i": 1, "v": 5, "x": 10, "l": 50, "c": 100}
# a number longer than this is no page's: compared whole (int() refuses strings of more than 4,300 digits)
PAGE_NUMBER_DIGITS = 9


def margin_edge(block: Block, bottom: float, top: float) -> str | None:
    """"top" or "bottom" where a block lies within ``MARGIN_BAND`` of the page's top or bottom edge (``bottom``,
    ``top``: the page's edges), else None."""
    band = MARGIN_BAND * (top - bottom)
    return "top" if block.y0 >= top - band else "bottom" if block.y1 <= bottom + band else None


def numeral_value(number: str) -> int:
    """A number's value: its digits', or its roman numeral's (lower case), or a long one's hash (equal where the
    digits are)."""
    if not number.isdigit():
        values = [_ROMAN_DIGITS[c] for c in number]
        return sum(-v if v < w else v for v, w in zip(values, [*values[1:], 0], strict=True))
    return int(number) if len(number) <= PAGE_NUMBER_DIGITS else hash(number)


def _numbers(text: str) -> tuple[int, ...]:
    """The numbers of a (case-folded) text as values (``numeral_value``)."""
    return tuple(numeral_value(n) for n in _NUMBER.findall(text))


def running(pages: Sequence[tuple[Sequence[Block], float, float]]) -> list[set[int]]:
    """The running headers and footers of a document's pages (each its blocks, its bottom and top edges): for each
    page, the indices of its blocks that are one. Such blocks lie in a margin (``margin_edge``) at one distance from
    its edge (within ``RUNNING_DRIFT`` of their type size) on at least ``RUNNING_PAGES`` pages (on every page of a
    document of two pages or more but fewer than that), in that size of type and with the same words (case, spacing
    and numbers, roman ones too, aside); and on each of at least two pages, each of its numbers is either the same
    ("Annual Report 2023", "Chapter 3", "of 40") or the page's own number give or take a fixed offset ("Page 3", a
    journal's "231" on the file's first page). Rows at the tops of the pages of a long table ("Vessel 32 1032",
    "Vessel 65 1065"), or the lines of a log, differ in their numbers otherwise: they are text. A number that goes up
    with the pages may be the page's or the text's ("In 1903 the harbour froze" on page 3, "In 1904 ..." on page 4:
    a timeline's), however many there are ("Page 3 (sheet 5)", a court filing's "Page 3 of 40 PageID #: 563"): such
    a line is a head only where it is set as one on most of its pages, apart from the text in type no larger than
    the body's (``_set_as_head``), and on each the page's outermost line or on one that is (``_at_edge``).

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
    body = body_size(pages)
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
    sure: list[set[int]] = [set() for _ in pages]  # of those, the heads on ``RUNNING_PAGES`` pages or more (but
    # those with a number that goes up with the pages: ``_set_as_head``)
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
        # a number that goes up with the pages: the page's, or a date of the text's ("In 1901 the harbour froze" on
        # page 1, "In 1902 ..." on page 2): the line is a head where it is set as one on most of its pages (on a page
        # whose text runs down to it, a table's, it still is)
        if any(by_page) and 2 * sum(_set_as_head(pages[page][0], i, pages[page][1], pages[page][2], body)
                                    for page, i, *_ in placed) < len(placed):
            continue
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
                    sure[page].update([i] if many and not any(by_page)
                                      and len({p for p, _ in same}) >= RUNNING_PAGES else [])
    for slot in _slots(pages, body):  # heads that take turns: two repeats or more in one place, on half
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


def _set_as_head(blocks: Sequence[Block], i: int, bottom: float, top: float, body: int) -> bool:
    """Whether a margin's line (``blocks[i]``, on a page of those blocks and edges) is set as a running head is, rather
    than as the page's text: in type no larger than the body's (``body``; a year set large at the top of each page of
    a chronicle is its heading) and apart from the text (``_apart``: a line a paragraph's spacing over the text under
    it is the text's first). (Whether it is the page's outermost line, ``_at_edge`` asks of it on each page: a head
    with such a number is never sure.)"""
    block = blocks[i]
    edge = margin_edge(block, bottom, top)
    return round(block.size) <= body and edge is not None and _apart(blocks, block, edge)


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
