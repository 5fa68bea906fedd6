"""A PDF's outline (its bookmarks, the contents pane of a viewer) -> the section of each paragraph, for
``indexer.documents`` (``extract_pdf``): a paragraph of a PDF with bookmarks has ``section``, the path of the bookmarks
it falls under ("2 Harbours > 2.1 Berths"), as a Word, Markdown or HTML file's paragraph has its heading path.

    spanseek corpus from-files report.pdf --out corpus.jsonl
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from spanseek.indexer.pdf_blocks import Block, text_string

__all__ = ["MAX_BOOKMARKS", "MAX_DEPTH", "Bookmark", "Outline", "bookmarks"]

# a file's outline is read up to this many bookmarks (a hostile file's could be endless, or loop); the rest are left out
MAX_BOOKMARKS = 10_000
# and to this many levels, as a Word file's headings have (Heading 1-9): a bookmark nested deeper falls in the section
# of its ancestor at the last level (an outline nested 10,000 deep gave each paragraph a section of 355,000
# characters, and took 412 MB to read)
MAX_DEPTH = 9


@dataclass(frozen=True)
class Bookmark:
    """A bookmark of a PDF's outline: its path (its own title last), the page it leads to (1-based), the height on
    that page (points from the page's foot, as the layout's) its view starts at (None for the page's top) and its
    left edge, where the view gives one (None where it does not, or gives the page's edge, 0)."""

    path: tuple[str, ...]
    page: int
    top: float | None
    left: float | None = None


def bookmarks(document: Any, pages: dict[int, tuple[int, float, int]]) -> list[Bookmark]:
    """The bookmarks of a PDF (pdfminer's document) that lead to one of its ``pages`` (each page's object number ->
    its number, 1-based, the foot of its media box and its rotation), in the outline's order; none where it has no
    outline, or one that cannot be read; to ``MAX_DEPTH`` levels; a single bookmark at the top, over all the others,
    is the document's title, left out of its children's paths (``_under_one_root``). A bookmark leads to a page by
    its destination (``/Dest``, or a ``/GoTo`` action's ``/D``; either may be a name the document's destinations
    give); one that leads elsewhere (a link to another file, a script) is passed over, and its children are read
    under its parent's path. Titles are read in any encoding a file gives (``pdf_blocks.text_string``)."""
    from pdfminer.pdftypes import PDFObjRef, resolve1

    root = resolve1(document.catalog.get("Outlines"))
    if not isinstance(root, dict):
        return []
    found: list[Bookmark] = []
    seen: set[int] = set()
    named = _named_destinations(document)
    # (entry, its parent's path) to read, the next last: an entry's children are read before its next sibling
    todo: list[tuple[Any, tuple[str, ...]]] = [(root.get("First"), ())]
    while todo and len(found) < MAX_BOOKMARKS:
        ref, parent = todo.pop()
        if isinstance(ref, PDFObjRef):
            if ref.objid in seen:  # (an outline that loops: each entry is read once)
                continue
            seen.add(ref.objid)
        try:  # (its title may be held in another object, as an info dictionary's often is)
            entry = resolve1(ref)
            title = resolve1(entry.get("Title")) if isinstance(entry, dict) else None
        except Exception:  # (a damaged entry: pdfminer raises many types; it and those after it are passed over)
            continue
        if not isinstance(entry, dict):
            continue
        title = " ".join(text_string(title).split()) if isinstance(title, bytes) else ""
        place = _destination(named, entry, pages)
        path = (*parent, title) if title and place is not None else parent
        if title and place is not None:
            found.append(Bookmark(path, *place))
        todo.append((entry.get("Next"), parent))
        todo += [(entry.get("First"), path)] if len(path) < MAX_DEPTH else []
    return _under_one_root(found)


def _under_one_root(found: list[Bookmark]) -> list[Bookmark]:
    """Bookmarks whose outline has one bookmark at its top, the others under it (the document's own title, as many
    programs write it: "Annual Report 2023 > 2 Harbours > 2.1 Berths" began every path), with its title left out of
    its children's paths; the text under it before its first child keeps it as its section."""
    roots = [mark for mark in found if len(mark.path) == 1]
    if len(roots) != 1 or len(found) == 1:
        return found
    return [mark if len(mark.path) == 1 else Bookmark(mark.path[1:], mark.page, mark.top, mark.left) for mark in found]


def _named_destinations(document: Any) -> dict[str | bytes, Any]:
    """A PDF's named destinations, each name -> its destination (unresolved): its name tree's (the catalog's ``/Names
    /Dests``; names are strings) and its catalog's ``/Dests`` (PDF 1.1; names are names), read once through (an
    outline of thousands of bookmarks looked each name up through pdfminer's ``get_dest``, which reads a node's
    names afresh each time: minutes), each node of the tree once (a tree that loops is read once through)."""
    from pdfminer.pdftypes import PDFObjRef, resolve1

    found: dict[str | bytes, Any] = {}
    seen: set[int] = set()
    try:
        names = resolve1(document.catalog.get("Names"))
        todo = [names.get("Dests")] if isinstance(names, dict) else []
        while todo:
            ref = todo.pop()
            if isinstance(ref, PDFObjRef):
                if ref.objid in seen:
                    continue
                seen.add(ref.objid)
            node = resolve1(ref)
            if not isinstance(node, dict):
                continue
            pairs = resolve1(node.get("Names"))
            if isinstance(pairs, list):
                for key, value in zip(pairs[::2], pairs[1::2], strict=False):
                    key = resolve1(key)
                    if isinstance(key, (bytes, str)):
                        found.setdefault(key, value)
            kids = resolve1(node.get("Kids"))
            todo += reversed(kids) if isinstance(kids, list) else []  # (the first kid read first)
        old = resolve1(document.catalog.get("Dests"))
        for key, value in old.items() if isinstance(old, dict) else ():
            found.setdefault(key, value)
    except Exception:  # (a damaged node: pdfminer raises many types; the names read before it are kept)
        pass
    return found


def _destination(named: dict[str | bytes, Any], entry: dict[str, Any], pages: dict[int, tuple[int, float, int]]
                 ) -> tuple[int, float | None, float | None] | None:
    """Where an outline entry leads: its page (1-based), the height its view starts at (None: the page's top) and its
    left edge (None: none given, or the page's); None where it leads to no page of the document. ``named``: the document's named destinations
    (``_named_destinations``)."""
    from pdfminer.pdftypes import PDFObjRef, resolve1
    from pdfminer.psparser import PSLiteral

    try:
        target = resolve1(entry.get("Dest"))
        action = resolve1(entry.get("A"))
        if target is None and isinstance(action, dict) and getattr(action.get("S"), "name", None) == "GoTo":
            target = resolve1(action.get("D"))
        if isinstance(target, (bytes, str, PSLiteral)):  # a named destination
            target = resolve1(named.get(target.name if isinstance(target, PSLiteral) else target))
        if isinstance(target, dict):  # (a named destination may be a dictionary holding it)
            target = resolve1(target.get("D"))
    except Exception:  # (a name no destination has, a damaged object: the bookmark leads nowhere)
        return None
    if not isinstance(target, list) or not target or not isinstance(target[0], PDFObjRef):
        return None
    if (placed := pages.get(target[0].objid)) is None:
        return None
    number, foot, rotate = placed
    kind = getattr(target[1], "name", None) if len(target) > 1 else None
    at = 3 if kind == "XYZ" else 2 if kind in ("FitH", "FitBH") else None
    top = resolve1(target[at]) if at is not None and len(target) > at else None
    left = resolve1(target[2]) if kind == "XYZ" and len(target) > 2 else None
    left = float(left) if isinstance(left, (int, float)) and math.isfinite(left) and left > 0 else None
    # (a turned page's layout turns its heights too: its bookmarks lead to its top)
    if not isinstance(top, (int, float)) or not math.isfinite(top) or rotate % 360:
        return number, None, None
    return number, float(top) - foot, left


class Outline:
    """A document's bookmarks by where they lead in its reading order (``bookmarks``, ``place``), so that a
    paragraph's section is the path of the last one that leads to it or to a paragraph read before it
    (``section``)."""

    def __init__(self, marks: list[Bookmark]) -> None:
        self.marks = marks
        self.keys: list[tuple[int, int, float, int]] = []  # each bookmark's place in reading order (``place``)
        self.placed: list[Bookmark] = []  # the bookmarks in that order

    def place(self, pages: Sequence[Sequence[Block]]) -> None:
        """Places each bookmark at the paragraph its view lands on (``_Landings``), in the reading order of the
        document's ``pages`` (each its paragraphs in reading order): on a page of two columns, a bookmark to the top
        of the right one (its section's heading) heads none of the left one's paragraphs, read before it (each took
        the right column's section where it lay lower on the page)."""
        landings = {page: _Landings(pages[page - 1]) for page in {mark.page for mark in self.marks}
                    if page <= len(pages)}
        keyed = sorted(((mark.page, landings[mark.page].at(mark) if mark.page in landings else 0,
                         -(math.inf if mark.top is None else mark.top), order), mark)
                       for order, mark in enumerate(self.marks))
        self.keys, self.placed = [key for key, _ in keyed], [mark for _, mark in keyed]

    def section(self, page: int, index: int) -> str | None:
        """The section of the paragraph ``index`` (its place in its page's reading order; the number of the page's
        paragraphs for what follows them) on ``page`` (1-based): the path of the last bookmark placed at it or
        before it (``place``), " > " apart; None before the first."""
        at = bisect.bisect_right(self.keys, (page, index, math.inf, math.inf))
        return " > ".join(self.placed[at - 1].path) if at else None


# the left edges of views on one page that choose a column (``_Landings``): past these, a view's left edge is passed
# over (a page has a few columns; a hostile file's thousands of bookmarks, each at its own edge, would each cost a
# pass over the page's paragraphs)
MAX_COLUMN_EDGES = 16


class _Landings:
    """Where on a page (its paragraphs, ``blocks``, in reading order) a bookmark's view lands (``at``), found in time
    logarithmic in its paragraphs: their tops (less a line, as a view that starts up to a line below a paragraph's
    top still shows it) in order, with the first paragraph read among those under each; the paragraphs by their text
    and first line; and, for each left edge views give (to ``MAX_COLUMN_EDGES``), the same tops of the paragraphs
    whose column it lies in."""

    def __init__(self, blocks: Sequence[Block]) -> None:
        self.blocks = blocks
        self.count = len(blocks)
        self.tops, self.first = self._under(range(len(blocks)))
        self.titled: dict[str, list[int]] = {}
        for i, block in enumerate(blocks):
            text = block.text.strip()
            for said in {" ".join(text.split()).casefold(), " ".join(text.split("\n", 1)[0].split()).casefold()}:
                self.titled.setdefault(said, []).append(i)
        self.columns: dict[float, tuple[list[float], list[int]]] = {}

    def _under(self, indices: Iterable[int]) -> tuple[list[float], list[int]]:
        """The paragraphs' tops, less a line, in order, and the first paragraph read among those up to each."""
        placed = sorted((self.blocks[i].y1 - self.blocks[i].size, i) for i in indices)
        first = list(itertools.accumulate((i for _, i in placed), min))
        return [top for top, _ in placed], first

    def at(self, mark: Bookmark) -> int:
        """The index of the paragraph a bookmark's view lands on, among those at or under its top (all of the page's
        where it gives none): the first that is the bookmark's title (its heading: the whole paragraph or its first
        line), else the first read in the column its view's left edge lies in, else the first read; after the page's
        paragraphs where none is under it."""
        top = math.inf if mark.top is None else mark.top
        for i in self.titled.get(" ".join(mark.path[-1].split()).casefold(), []):
            if self.blocks[i].y1 - self.blocks[i].size <= top:
                return i
        left = mark.left
        if left is not None and (left in self.columns or len(self.columns) < MAX_COLUMN_EDGES):
            if left not in self.columns:
                self.columns[left] = self._under(i for i, b in enumerate(self.blocks) if b.x0 - b.size <= left <= b.x1)
            tops, first = self.columns[left]
            if under := bisect.bisect_right(tops, top):
                return first[under - 1]
        under = bisect.bisect_right(self.tops, top)
        return self.first[under - 1] if under else self.count
