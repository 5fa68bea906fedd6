"""OpenDocument text files (.odt: LibreOffice Writer's) -> paragraphs with their heading paths, and presentations
(.odp: Impress's) -> paragraphs with their slide, for ``indexer.ingest``; flat files (.fodt, .fodp: the package's
parts in one XML document) read as their package does.

    spanseek corpus from-files minutes.odt talk.odp DOCS/ --out corpus.jsonl

``content.xml``'s body is read in order, as a Word file's is (``indexer.word``): paragraphs, headings (``text:h``,
opening a section at their outline level: ``extracted.Sections``; after the number the outline style gives them,
"2.1 Berths"), list items after the number or bullet their list
style shows ("2. Configure", "1.2 Scope", "• Item"), the rows of tables (one paragraph each, the cells named by the
header rows: "Route: Kellerton to Kirkwall; Departure: 09:15"; a cell merged over rows in each of them) and the
contents of sections; a paragraph's footnotes, endnotes, text boxes and shapes' text follow it as paragraphs of
their own. Left out: generated indexes (a table of contents, an alphabetical index), tracked deletions, comments, hidden paragraphs and
sections, and text in a style that hides it. ``meta.xml`` gives the ``title`` (else the first paragraph in the
"Title" style, else the first heading), the ``author`` (the initial creator, else the last one to save it) and the
``language``. A presentation (``extract_odp``) reads as a PowerPoint file does (``indexer.slides``): each slide's
title, its other shapes top to bottom and left to right, their paragraphs, lists and tables as a text's, then its
notes; each paragraph with its ``slide`` and ``section`` (the slide's title). A password-protected file, a damaged one and another kind of file renamed are ``Unreadable``, saying
which (``indexer.packaged``, which bounds zip bombs and XML entities as the Office readers do).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from spanseek.indexer.extracted import MAX_INFLATED, Extracted, Sections, Unreadable, header_names, row_text
from spanseek.indexer.html_shown import counted
from spanseek.indexer.packaged import Package, xml_of

KIND = "OpenDocument text (.odt) file"
PRESENTATION_KIND = "OpenDocument presentation (.odp) file"
_OFFICE = "{urn:oasis:names:tc:opendocument:xmlns:office:1.0}"
_TEXT = "{urn:oasis:names:tc:opendocument:xmlns:text:1.0}"
_TABLE = "{urn:oasis:names:tc:opendocument:xmlns:table:1.0}"
_DRAW = "{urn:oasis:names:tc:opendocument:xmlns:drawing:1.0}"
_STYLE = "{urn:oasis:names:tc:opendocument:xmlns:style:1.0}"
_META = "{urn:oasis:names:tc:opendocument:xmlns:meta:1.0}"
_MANIFEST = "{urn:oasis:names:tc:opendocument:xmlns:manifest:1.0}"
_DC = "{http://purl.org/dc/elements/1.1/}"
_PRESENTATION = "{urn:oasis:names:tc:opendocument:xmlns:presentation:1.0}"
_SVG = "{urn:oasis:names:tc:opendocument:xmlns:svg-compatible:1.0}"
# a slide's placeholders that are not read: its number, date, footer and header (the deck repeats them), and the
# notes page's picture of the slide
_NOT_READ = {"page-number", "date-time", "footer", "header", "page"}
# a shape's position ("2.5cm") and its unit's length in centimetres
_LENGTH = re.compile(r"\s*(-?\d+(?:\.\d*)?|-?\.\d+)\s*([a-z]*)\s*")
_UNITS = {"cm": 1.0, "mm": 0.1, "in": 2.54, "pt": 2.54 / 72, "pc": 2.54 / 6, "px": 2.54 / 96}
# body elements that hold no text of the document's own: generated indexes (the headings again, with page numbers),
# the tracked changes' record (deleted text), declarations, forms
_SKIPPED = {f"{_TEXT}{tag}" for tag in (
    "table-of-content", "alphabetical-index", "illustration-index", "table-index", "object-index", "user-index",
    "bibliography", "tracked-changes", "sequence-decls", "variable-decls", "user-field-decls", "dde-connection-decls",
    "note-citation")} | {f"{_OFFICE}{tag}" for tag in ("annotation", "forms")}
_SPACES = {f"{_TEXT}s", f"{_TEXT}tab", f"{_TEXT}line-break"}
_BOX_TEXT = {f"{_TEXT}p", f"{_TEXT}h", f"{_TEXT}list"}  # a box's or a shape's own text
_ROWS = {f"{_TABLE}table-header-rows", f"{_TABLE}table-rows", f"{_TABLE}table-row-group"}


def _int(value: str | None, default: int = 1) -> int:
    return int(value) if value and value.isdecimal() and len(value) < 6 else default


def _line(text: str) -> str:
    return " ".join(text.split())


# the key of the outline style (``text:outline-style``: the numbering of headings by their outline level) among the
# list styles: no style's name (names are XML names, without brackets)
_OUTLINE = "(outline)"
# the elements that define a numbered level: a list style's, and the outline style's
_NUMBERED_LEVELS = {f"{_TEXT}list-level-style-number", f"{_TEXT}outline-level-style"}


class _Styles:
    """A document's styles by name (``content.xml``'s automatic ones, then ``styles.xml``'s): their parents, the list
    styles (the outline style, which numbers headings, among them as ``_OUTLINE``), and which hide their text
    (``text:display="none"``)."""

    def __init__(self, *roots: Any) -> None:
        self.parents: dict[str, str] = {}
        self.lists: dict[str, Any] = {}
        self.hidden: set[str] = set()
        for root in roots:
            for style in root.iter(f"{_STYLE}style"):
                name = style.get(f"{_STYLE}name", "")
                self.parents.setdefault(name, style.get(f"{_STYLE}parent-style-name", ""))
                props = style.find(f"{_STYLE}text-properties")
                if props is not None and props.get(f"{_TEXT}display") == "none":
                    self.hidden.add(name)
            for lists in root.iter(f"{_TEXT}list-style"):
                self.lists.setdefault(lists.get(f"{_STYLE}name", ""), lists)
            for outline in root.iter(f"{_TEXT}outline-style"):
                self.lists.setdefault(_OUTLINE, outline)

    def chain(self, name: str | None) -> Iterator[str]:
        """A style's name and its parents' (at most 16: a loop of parents ends)."""
        for _ in range(16):
            if not name:
                return
            yield name
            name = self.parents.get(name)

    def hides(self, element: Any) -> bool:
        return any(name in self.hidden for name in self.chain(element.get(f"{_TEXT}style-name")))

    def is_title(self, element: Any) -> bool:
        return "Title" in self.chain(element.get(f"{_TEXT}style-name"))


class _Lists:
    """The numbers list items show: each list style's counters by level, so a list that continues another
    (``text:continue-numbering``) counts on."""

    def __init__(self, styles: _Styles) -> None:
        self.styles = styles
        self.counters: dict[str, list[int]] = {}

    def label(self, style: str, counters: list[int], level: int, start: str | None) -> str:
        """The label of the next item at ``level`` (1 outermost) of a list of ``style``: a bullet's character, or its
        number formatted as the style's level says (prefix, format "1", "a", "A", "i", "I", suffix, and the numbers of
        the levels above it that it displays: "1.2"); "" for a level that shows none."""
        del counters[level:]  # an item ends the numbering of the levels below it
        counters += [0] * (level - len(counters))
        definition = self._level(style, level)
        if start is not None:  # the item's own start value
            counters[level - 1] = _int(start)
        elif counters[level - 1]:
            counters[level - 1] += 1
        else:  # the level's first item: the level's start value
            counters[level - 1] = _int(definition.get(f"{_TEXT}start-value") if definition is not None else None)
        if definition is None:
            return ""
        if definition.tag == f"{_TEXT}list-level-style-bullet":
            return definition.get(f"{_TEXT}bullet-char", "\u2022")
        if definition.tag not in _NUMBERED_LEVELS or not self._format(style, level):
            return ""  # (an image's bullet, a level numbered with no number shown)
        shown = [counted(counters[lv - 1], self._format(style, lv))
                 for lv in range(max(1, level - _int(definition.get(f"{_TEXT}display-levels")) + 1), level + 1)]
        return (definition.get(f"{_STYLE}num-prefix", "") + ".".join(shown)
                + definition.get(f"{_STYLE}num-suffix", ""))

    def _level(self, style: str, level: int) -> Any:
        lists = self.styles.lists.get(style)
        if lists is None:
            return None
        return next((d for d in lists if _int(d.get(f"{_TEXT}level")) == level), None)

    def _format(self, style: str, level: int) -> str:
        """A level's number format ("1", "a", "I"; "" for none); a list's level without one counts in "1", the outline
        style's shows no number (Writer's headings are unnumbered unless their level says)."""
        definition = self._level(style, level)
        default = "" if style == _OUTLINE else "1"
        return definition.get(f"{_STYLE}num-format", default) if definition is not None else default

    def heading(self, h: Any, level: int) -> str:
        """The number the outline style gives a heading at ``level`` ("2.1"; "" where its level shows none, or the
        heading is marked as no item of the outline's list, ``text:is-list-header``); counted whether shown or not,
        from its own start value where it restarts the numbering (``text:restart-numbering``)."""
        if h.get(f"{_TEXT}is-list-header") == "true":
            return ""
        counters = self.counters.setdefault(_OUTLINE, [])
        start = None
        if h.get(f"{_TEXT}restart-numbering") == "true":
            definition = self._level(_OUTLINE, level)
            start = h.get(f"{_TEXT}start-value") or (
                definition.get(f"{_TEXT}start-value") if definition is not None else None) or "1"
        return self.label(_OUTLINE, counters, level, start)


class _OdfText:
    """An OpenDocument text's body in reading order (``Sections``), as ``indexer.word._WordText`` reads Word's."""

    def __init__(self, styles: _Styles) -> None:
        self.styles = styles
        self.lists = _Lists(styles)
        self.sections = Sections()
        self.title: str | None = None
        self.first_heading: str | None = None

    def blocks(self, container: Any, list_style: str = "", counters: list[int] | None = None, level: int = 0,
               label: str = "") -> str:
        """Reads a container's paragraphs, headings, lists, tables and sections in order; ``label``, a list item's
        number, goes before its first paragraph (it is returned where the item has none)."""
        for child in container:
            tag = child.tag
            if tag in _SKIPPED or not isinstance(tag, str) or self.styles.hides(child):
                continue
            if tag in (f"{_TEXT}p", f"{_TEXT}h"):
                self.paragraph(child, label)
                label = ""
            elif tag == f"{_TEXT}list":
                self.list(child, list_style, counters, level)
            elif tag == f"{_TABLE}table":
                self.table(child)
            elif tag == f"{_TEXT}section" and child.get(f"{_TEXT}display") != "none":
                self.blocks(child)
            elif tag == f"{_TEXT}numbered-paragraph":  # a list item outside a list (ODF 1.2), its number written
                shown = child.find(f"{_TEXT}number")
                self.blocks(child, label=_line(shown.text or "") if shown is not None else "")
            elif tag == f"{_TEXT}soft-page-break":
                continue
            else:  # frames and shapes anchored to the page, text boxes, a slide's shapes
                for box in [child] if _is_box(child) else _boxes(child):
                    self.blocks(box)
        return label

    def list(self, element: Any, outer: str, counters: list[int] | None, level: int) -> None:
        """A list's items, each after its label; a list nested in an item counts its own level."""
        style = element.get(f"{_TEXT}style-name") or outer
        if counters is None:  # an outermost list: it counts anew unless it continues the last of its style
            counters = self.lists.counters.setdefault(style, [])
            if element.get(f"{_TEXT}continue-numbering") != "true" and not element.get(f"{_TEXT}continue-list"):
                counters.clear()
        for item in element:
            if item.tag == f"{_TEXT}list-item":
                label = self.lists.label(style, counters, level + 1, item.get(f"{_TEXT}start-value"))
                if (shown := item.find(f"{_TEXT}number")) is not None:  # the label as the application wrote it
                    label = _line(shown.text or "")
                if left := self.blocks(item, style, counters, level + 1, label):
                    self.sections.add(left)  # an item with no paragraph of its own: its number alone
            elif item.tag == f"{_TEXT}list-header":  # a paragraph of the list without a number
                self.blocks(item, style, counters, level + 1)

    def paragraph(self, p: Any, label: str = "") -> None:
        """A paragraph or heading: its text after its list label, then its notes and text boxes."""
        if any(h.get(f"{_TEXT}is-hidden") == "true" for h in p.iter(f"{_TEXT}hidden-paragraph")):
            return  # a paragraph its condition hides
        extras: list[Any] = []
        text = _line(self.inline(p, extras))
        level = _int(p.get(f"{_TEXT}outline-level")) if p.tag == f"{_TEXT}h" else 0
        if level and not label:  # its outline number ("2.1 Berths"), unless the file wrote it (text:number)
            numbered = self.lists.heading(p, level)
            label = "" if p.find(f"{_TEXT}number") is not None else numbered
        if p.tag == f"{_TEXT}p" and self.styles.is_title(p) and text and self.title is None:
            self.title = text  # the title is the document's, not a passage's
        else:
            self.first_heading = self.first_heading or (text if level else None)
            self.sections.add(f"{label} {text}" if label and text else text, level)
        self.extras(extras)

    def inline(self, element: Any, extras: list[Any]) -> str:
        """An element's text with its spans', links' and fields'; spaces, tabs and line breaks as spaces; notes and
        text boxes to ``extras``; hidden text, comments and note marks left out."""
        parts = [element.text or ""]
        for child in element:
            tag = child.tag
            if not isinstance(tag, str) or tag in _SKIPPED or self.styles.hides(child) or (
                    tag == f"{_TEXT}hidden-text" and child.get(f"{_TEXT}is-hidden") != "false"):
                pass
            elif tag in _SPACES:
                parts.append(" ")
            elif tag == f"{_TEXT}number":  # a numbered heading's number as the application wrote it ("1.2")
                parts.append(f"{child.text or ''} ")
            elif tag == f"{_TEXT}note":
                extras += child.findall(f"{_TEXT}note-body")
            elif tag.startswith(_DRAW):  # a frame's text boxes, a shape's text (a callout): paragraphs of their own
                extras += [child] if _is_box(child) else _boxes(child)
            else:
                parts.append(self.inline(child, extras))
            parts.append(child.tail or "")
        return "".join(parts)

    def extras(self, extras: list[Any]) -> None:
        for body in extras:
            self.blocks(body)

    def cell(self, cell: Any, extras: list[Any]) -> str:
        """A table cell's text on one line: its paragraphs, lists' items and nested tables' cells, a space apart."""
        return _line(" ".join(self.inline(p, extras) for p in self.cell_paragraphs(cell)))

    def cell_paragraphs(self, element: Any) -> Iterator[Any]:
        """The paragraphs and headings in a cell, those of its lists and nested tables too (not its notes': they
        follow the row), hidden ones left out."""
        for child in element:
            if not isinstance(child.tag, str) or child.tag in _SKIPPED or self.styles.hides(child):
                continue
            if child.tag in (f"{_TEXT}p", f"{_TEXT}h"):
                yield child
            else:
                yield from self.cell_paragraphs(child)

    def table(self, table: Any) -> None:
        """A table's rows, each one paragraph whose cells are named by the header rows (``table:table-header-rows``,
        else a first row in the "Table Heading" style): a cell merged over columns read once (a header cell so merged
        names each of them, ``header_names``), one merged over rows in each of its rows."""
        rows = list(_rows(table))
        heads = sum(head for head, _ in rows)
        first = [p.get(f"{_TEXT}style-name") for p in rows[0][1].iter(f"{_TEXT}p")] if rows else []
        if not heads and first and all("Table_20_Heading" in self.styles.chain(name) for name in first):
            heads = 1
        heads = heads if heads < len(rows) else 0
        spanning: dict[int, tuple[int, str]] = {}  # a column -> (the last row a cell merged over rows spans, its text)
        grid: list[list[tuple[int, int, str]]] = []
        extras: list[list[Any]] = []
        for r, (_, row) in enumerate(rows):
            cells, row_extras, column = [], [], 0
            for cell in row:
                repeated = _int(cell.get(f"{_TABLE}number-columns-repeated"))
                if cell.tag == f"{_TABLE}covered-table-cell":
                    if column in spanning and spanning[column][0] >= r:
                        cells.append((column, column + 1, spanning[column][1]))
                    column += repeated
                    continue
                if cell.tag != f"{_TABLE}table-cell":
                    continue
                span = _int(cell.get(f"{_TABLE}number-columns-spanned"))
                text = self.cell(cell, row_extras)
                if (down := _int(cell.get(f"{_TABLE}number-rows-spanned"))) > 1 and r >= heads:
                    spanning[column] = (r + down - 1, text)
                if text:
                    cells.append((column, column + span, text))
                column += span if repeated == 1 else repeated  # (empty cells repeated to the table's edge)
            grid.append(cells)
            extras.append(row_extras)
        # the columns renumbered to those a cell starts or ends at: a few bytes repeat or merge a cell over 99,999
        # columns, and a list of the names of every column took gigabytes for a file of a few kilobytes
        edges = {edge: i for i, edge in enumerate(sorted({e for cells in grid for start, end, _ in cells
                                                          for e in (start, end)}))}
        grid = [[(edges[start], edges[end], text) for start, end, text in cells] for cells in grid]
        width = max(len(edges) - 1, 0)
        names = header_names(grid[:heads], width) if heads else [""] * width
        for cells, row_extras in zip(grid[heads:], extras[heads:], strict=True):
            self.sections.add(row_text([text for _, _, text in cells], [names[start] for start, _, _ in cells]))
            self.extras(row_extras)


def _is_box(element: Any) -> bool:
    """Whether an element holds paragraphs of a box's: a text box, or a shape with text of its own (a rectangle, a
    callout: ``draw:custom-shape`` and the other shapes hold their paragraphs themselves)."""
    return element.tag == f"{_DRAW}text-box" or (element.tag.startswith(_DRAW) and element.tag != f"{_DRAW}frame" and any(
        child.tag in _BOX_TEXT for child in element))


def _boxes(element: Any) -> Iterator[Any]:
    """The text boxes and shapes with text in an element, not those inside them (read with the box around them)."""
    for child in element:
        if not isinstance(child.tag, str):
            continue
        if _is_box(child):
            yield child
        else:
            yield from _boxes(child)


def _rows(table: Any) -> Iterator[tuple[bool, Any]]:
    """A table's rows in order, each with whether it is a header row (in ``table:table-header-rows``)."""
    def walk(element: Any, head: bool) -> Iterator[tuple[bool, Any]]:
        for child in element:
            if child.tag == f"{_TABLE}table-row":
                yield head, child
            elif child.tag in _ROWS:
                yield from walk(child, head or child.tag == f"{_TABLE}table-header-rows")

    return walk(table, False)


def _metadata(root: Any) -> dict[str, Any]:
    """``title``, ``author`` (the initial creator, else the last to save it) and ``language`` from the ``office:meta``
    of ``root`` (``meta.xml``'s, or a flat file's document); {} where there is none."""
    meta = root.find(f"{_OFFICE}meta") if root is not None else None
    if meta is None:
        return {}

    def first(*tags: str) -> str:
        return next((text for tag in tags for e in meta.iterfind(tag) if (text := _line("".join(e.itertext())))), "")

    found = {"title": first(f"{_DC}title"), "author": first(f"{_META}initial-creator", f"{_DC}creator"),
             "language": first(f"{_DC}language")}
    return {key: value for key, value in found.items() if value}


def _refuse_password(package: Package) -> None:
    """Unreadable for a password-protected file: its manifest records content.xml as encrypted."""
    name = "META-INF/manifest.xml"
    if name not in package.names:
        return
    for entry in package.xml(name).iter(f"{_MANIFEST}file-entry"):
        if entry.get(f"{_MANIFEST}full-path") == "content.xml" and entry.find(f"{_MANIFEST}encryption-data") is not None:
            raise Unreadable(f"a password-protected {package.kind} (its content.xml is encrypted); remove the password (in "
                             "LibreOffice: File > Properties > General, or save a copy without it) and ingest the result")


def _body(path: Path, kind: str, mimetype: str, body: str) -> tuple[Any, _Styles, dict[str, Any]]:
    """An OpenDocument file's body (office:``body``: "text", "presentation", "spreadsheet"), its styles and its
    metadata; Unreadable, saying why, for a file that cannot be read as one of ``kind``. A flat file (``.fodt``,
    ``.fodp``, ``.fods``: the package's parts in one XML document, ``office:document``) is read as its package is."""
    if path.suffix.lower() in FLAT:
        kind = FLAT[path.suffix.lower()][1]
        content = _flat_document(path, kind, mimetype)
        styles, meta, where = _Styles(content), _metadata(content), "it"
    else:
        package = Package(path, kind, mimetype)
        try:
            _refuse_password(package)
            content = package.xml("content.xml")
            styles = _Styles(content, *([package.xml("styles.xml")] if "styles.xml" in package.names else []))
            meta = _metadata(package.xml("meta.xml")) if "meta.xml" in package.names else {}
        finally:
            package.close()
        where = "its content.xml"
    found = content.find(f"{_OFFICE}body/{_OFFICE}{body}")
    if found is None:
        raise Unreadable(f"not a readable {kind}: {where} has no office:{body} body")
    return found, styles, meta


# the flat OpenDocument suffixes: the package's suffix, and what a file of each is called
FLAT = {".fodt": (".odt", "flat OpenDocument text (.fodt) file"),
        ".fodp": (".odp", "flat OpenDocument presentation (.fodp) file"),
        ".fods": (".ods", "flat OpenDocument spreadsheet (.fods) file")}
# what a flat file's ``office:mimetype`` says it is: the suffix to give it
_FLAT_SUFFIXES = {f"application/vnd.oasis.opendocument.{kind}": suffix
                  for kind, suffix in (("text", ".fodt"), ("presentation", ".fodp"), ("spreadsheet", ".fods"))}


def _flat_document(path: Path, kind: str, mimetype: str) -> Any:
    """A flat OpenDocument file's ``office:document`` element, parsed as a package's parts are (``xml_of``: no entity
    expanded, nesting bounded) from at most ``MAX_INFLATED`` bytes; Unreadable naming what the file is instead (a
    zip package: the suffix to rename it to; XML of another kind; XML that is not well-formed, with the line)."""
    from lxml import etree

    if (size := path.stat().st_size) > MAX_INFLATED:
        raise Unreadable(f"{size:,} bytes, more than the {MAX_INFLATED >> 20:,} MiB a file's reader may hold; not read")
    data = path.read_bytes()
    if data.startswith(b"PK"):  # a package named as a flat file
        raise Unreadable(f"a zip archive (an OpenDocument package, or another kind of file), not a {kind}: a flat "
                         f"file is one XML document; if it is a package, rename it to {FLAT[path.suffix.lower()][0]}")
    try:
        root = xml_of(data)
    except etree.XMLSyntaxError as e:
        what = "an empty file (0 bytes)" if not data.strip() else f"not well-formed XML ({e.msg})"
        raise Unreadable(f"not a readable {kind}: {what}") from None
    if root.tag != f"{_OFFICE}document":
        raise Unreadable(f"not a {kind}: its root element is {etree.QName(root).localname!r}, not office:document")
    declared = root.get(f"{_OFFICE}mimetype", "")
    if declared != mimetype:
        own = _FLAT_SUFFIXES.get(declared)
        raise Unreadable(f"a flat OpenDocument file of type {declared or '(none given)'!r}, not a {kind}"
                         + (f"; rename it to {own}" if own else ""))
    return root


def extract_odt(path: Path) -> Extracted:
    """The body's paragraphs, list items and table rows in order, each with its ``section`` when it has one; the
    title, author and language from meta.xml."""
    body, styles, meta = _body(path, KIND, "application/vnd.oasis.opendocument.text", "text")
    reader = _OdfText(styles)
    reader.blocks(body)
    return reader.sections.extracted(meta.get("title") or reader.title or reader.first_heading, meta)


def _length(value: str | None) -> float:
    """A position ("2.5cm", "1in", "72pt") in centimetres; 0 for none, or one in a unit not known."""
    return _measure(value, _UNITS)


def _measure(value: str | None, units: dict[str, float]) -> float:
    """A number with its unit ("2.5cm", "0.52rad") in the unit ``units`` measure others by; 0 for none, or one in a
    unit not among them."""
    found = _LENGTH.fullmatch(value or "")
    return float(found.group(1)) * units.get(found.group(2), 0.0) if found else 0.0


# one transformation of a shape's ``draw:transform`` ("rotate (0.5236) translate (5cm 3cm)"): its name and arguments
_TRANSFORM = re.compile(r"\s*([a-zA-Z]+)\s*\(([^()]*)\)\s*,?")
# an angle's unit, in radians (a number without one is in radians, as LibreOffice writes it); a scale's, none
_ANGLES = {"": 1.0, "rad": 1.0, "deg": math.pi / 180, "grad": math.pi / 200}
_PLAIN = {"": 1.0}


def _place(shape: Any) -> tuple[float, float]:
    """Where a shape is on its slide, (top, left) in centimetres: its ``svg:y`` and ``svg:x``; for a shape turned or
    moved by ``draw:transform`` (a rotated shape has no ``svg:x`` or ``svg:y``, only "rotate (a) translate (x y)"),
    the top left of its box before it turned about its centre, as a PowerPoint shape's position is (it sorted as if at
    the slide's top left corner, before the title's other shapes)."""
    left, top = _length(shape.get(f"{_SVG}x")), _length(shape.get(f"{_SVG}y"))
    if not (transform := shape.get(f"{_DRAW}transform")):
        return top, left
    half_width, half_height = _length(shape.get(f"{_SVG}width")) / 2, _length(shape.get(f"{_SVG}height")) / 2
    x, y = left + half_width, top + half_height  # its centre, carried through the transformations in turn
    for name, arguments in _TRANSFORM.findall(transform):
        values = arguments.replace(",", " ").split()
        if name == "translate" and values:
            x, y = x + _length(values[0]), y + (_length(values[1]) if len(values) > 1 else 0.0)
        elif name == "rotate" and values:  # counter-clockwise on the slide (whose y axis runs down)
            turn = _measure(values[0], _ANGLES)
            x, y = x * math.cos(turn) + y * math.sin(turn), y * math.cos(turn) - x * math.sin(turn)
        elif name == "scale" and values:
            scale = [_measure(v, _PLAIN) for v in values[:2]]
            x, y = x * scale[0], y * scale[-1]
    return y - half_height, x - half_width


def _shapes(container: Any) -> list[Any]:
    """A slide's (or a group's) shapes in reading order, top to bottom then left to right (``_place``), a group's
    shapes in its place (at its first shape's); the slide number, date and footer placeholders and the notes page's picture of the
    slide left out."""
    placed: list[tuple[tuple[float, float], list[Any]]] = []
    for shape in container:
        if not isinstance(shape.tag, str) or not shape.tag.startswith(_DRAW):
            continue
        if shape.get(f"{_PRESENTATION}class") in _NOT_READ:
            continue
        inner = _shapes(shape) if shape.tag == f"{_DRAW}g" else [shape]
        if inner:
            first = inner[0]
            placed.append((_place(first), inner))
    return [shape for _, shapes in sorted(placed, key=lambda p: p[0]) for shape in shapes]


def _slide_text(reader: _OdfText, page: Any) -> tuple[str, list[str]]:
    """(a slide's title, its paragraphs: the title, its other shapes' in reading order, its notes)."""
    reader.sections = Sections()
    shapes = _shapes(page)
    titles = [s for s in shapes if s.get(f"{_PRESENTATION}class") == "title"]
    for shape in titles:
        reader.blocks(shape)
    title = " ".join(reader.sections.texts)
    for shape in shapes:
        if shape.get(f"{_PRESENTATION}class") != "title":  # (not "shape in titles": a slide of many titles)
            reader.blocks(shape)
    notes = page.find(f"{_PRESENTATION}notes")
    for shape in _shapes(notes) if notes is not None else []:
        reader.blocks(shape)
    return title, reader.sections.texts


def extract_odp(path: Path) -> Extracted:
    """Each slide's paragraphs in order (its title first, its notes last), each with its ``slide`` and ``section``
    (the slide's title); the title, author and language from meta.xml, and ``slides``, the count."""
    body, styles, meta = _body(path, PRESENTATION_KIND, "application/vnd.oasis.opendocument.presentation",
                               "presentation")
    reader = _OdfText(styles)
    paragraphs: list[str] = []
    metas: list[dict[str, Any]] = []
    first_title = ""
    pages = body.findall(f"{_DRAW}page")
    for number, page in enumerate(pages, start=1):
        title, texts = _slide_text(reader, page)
        first_title = first_title or title
        paragraphs += texts
        metas += [{"slide": number, **({"section": title} if title else {})}] * len(texts)
    return Extracted(meta.get("title") or first_title or None, paragraphs, {**meta, "slides": len(pages)}, metas)
