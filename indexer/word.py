"""Word files (.docx) -> paragraphs with their heading paths, for ``indexer.ingest`` (python-docx and the XML).

    spanseek corpus from-files handbook.docx DOCS/ --out corpus.jsonl

The body is read in order: paragraphs, the rows of tables and the contents of content controls (not a table of
contents, nor a placeholder's prompt). A paragraph's text is its runs' (hyperlinks, fields' results, tracked
insertions, equations; not tracked deletions, field codes, comments or hidden text; a paragraph whose mark is
deleted runs on into the next), after its list number or bullet as Word shows it ("2. Configure", "1.2 Scope", "•
Item": ``Numbering``), and its text boxes, footnotes and endnotes follow it as paragraphs of their own, as do its
SmartArt diagrams' boxes and its charts' titles and labels (``indexer.drawings``); a phonetic guide (ruby) follows
its base text in brackets; a symbol (w:sym) reads as the Unicode character it shows (``_symbol``). A table row is
one paragraph whose cells are named by the header row ("Route: Kellerton to Kirkwall; Departure: 09:15"), as
Markdown's and HTML's are. A paragraph in a "Heading N" style, or with an outline level (its own or its style's), opens a section
(``extracted.Sections``). Page headers
and footers are left out. A file python-docx cannot open is ``Unreadable``, with what it is instead where its first
bytes tell (an OLE file: a password-protected .docx or an old .doc; a PDF, RTF or OpenDocument file renamed; a
truncated zip).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spanseek.indexer.drawings import DRAWINGS, drawing_ids, related_texts
from spanseek.indexer.extracted import (
    HEADER_LEVELS,
    Extracted,
    IngestError,
    Sections,
    Unreadable,
    error_text,
    header_depth,
    header_names,
    not_office_file,
    row_text,
    zip_bomb,
)
from spanseek.indexer.word_numbering import ON, Numbering, Styles, W, flag, val

_HEADING = re.compile(r"heading\s*(\d)", re.I)
_MC = "{http://schemas.openxmlformats.org/markup-compatibility/2006}"
# an equation's text (Office Math: m:oMath, m:oMathPara) is in m:t elements, as a run's is in w:t
_TEXT = {f"{W}t", "{http://schemas.openxmlformats.org/officeDocument/2006/math}t"}
# a paragraph's parts that hold no text of the document: deleted or moved-away text (tracked changes), a field's
# code (its result is text), properties, a content control's settings, and the older copy of a drawing (mc:Fallback,
# which repeats mc:Choice's text box)
_NOT_TEXT = {f"{W}{tag}" for tag in ("del", "moveFrom", "delText", "instrText", "delInstrText", "pPr", "rPr",
                                       "sdtPr", "sdtEndPr", "tblPr", "trPr", "tcPr")} | {f"{_MC}Fallback"}
# (a ptab: a tab to a margin or the middle, "Contents<ptab/>Page" between the two sides of a line)
_CHARACTERS = {f"{W}tab": " ", f"{W}ptab": " ", f"{W}br": " ", f"{W}cr": " ", f"{W}noBreakHyphen": "-"}
# the Symbol font's characters by their code (0x20-0xFE; Word sets them as w:sym w:char="F0B4", the private-use code
# point U+F000 + the code) -> Unicode, after the Adobe Symbol encoding; the pieces of large brackets and integrals and
# the arrow and radical extenders, glyphs of no text, are left out
_SYMBOL = dict(zip(range(0x20, 0x7F), (
    " !\u2200#\u2203%&\u220b()\u2217+,\u2212./0123456789:;<=>?"
    "\u2245\u0391\u0392\u03a7\u0394\u0395\u03a6\u0393\u0397\u0399\u03d1\u039a\u039b\u039c\u039d\u039f"
    "\u03a0\u0398\u03a1\u03a3\u03a4\u03a5\u03c2\u03a9\u039e\u03a8\u0396[\u2234]\u22a5_\0"
    "\u03b1\u03b2\u03c7\u03b4\u03b5\u03c6\u03b3\u03b7\u03b9\u03d5\u03ba\u03bb\u03bc\u03bd\u03bf"
    "\u03c0\u03b8\u03c1\u03c3\u03c4\u03c5\u03d6\u03c9\u03be\u03c8\u03b6{|}\u223c"), strict=True))
_SYMBOL |= dict(zip(range(0xA0, 0xE6), (
    "\u20ac\u03d2\u2032\u2264\u2044\u221e\u0192\u2663\u2666\u2665\u2660\u2194\u2190\u2191\u2192\u2193"
    "\u00b0\u00b1\u2033\u2265\u00d7\u221d\u2202\u2022\u00f7\u2260\u2261\u2248\u2026\0\0\u21b5"
    "\u2135\u2111\u211c\u2118\u2297\u2295\u2205\u2229\u222a\u2283\u2287\u2284\u2282\u2286\u2208\u2209"
    "\u2220\u2207\u00ae\u00a9\u2122\u220f\u221a\u22c5\u00ac\u2227\u2228\u21d4\u21d0\u21d1\u21d2\u21d3"
    "\u25ca\u2329\u00ae\u00a9\u2122\u2211"), strict=True)) | {0xF1: "\u232a", 0xF2: "\u222b"}
_SYMBOL = {code: text for code, text in _SYMBOL.items() if text != "\0"}  # (\0: an extender, no text)
# the Wingdings characters with a standard Unicode character (the check marks and ballot boxes of lists, shapes,
# faces); the others (icons with none) give no text
_WINGDINGS = {0x22: "\u2702", 0x28: "\u260e", 0x4A: "\u263a", 0x4C: "\u2639", 0x4E: "\u2620", 0x6C: "\u25cf",
              0x6E: "\u25a0", 0x6F: "\u25a1", 0x76: "\u2756", 0xA7: "\u25aa", 0xE8: "\u2794", 0xFB: "\u2718",
              0xFC: "\u2714", 0xFD: "\u2612", 0xFE: "\u2611"}
_SYMBOL_FONTS = {"symbol": _SYMBOL, "wingdings": _WINGDINGS}
class _WordText:
    """A Word document's text in reading order (``Sections``): paragraphs, each after its list number or bullet
    (``Numbering``), with those of their text boxes and their footnotes and endnotes after them; table rows
    ("Header: cell; ..."); the contents of content controls. Tracked changes read as accepted (inserted text in,
    deleted text out); hidden text (``hidden``), comments, page headers and footers are left out."""

    def __init__(self, document: Any) -> None:
        from docx.text.paragraph import Paragraph

        self.document = document
        self.styles = Styles(document)
        self.parts: dict[str, Any] = {}  # the parts read by ``_part``, by relationship
        self.part = document.part  # the part being read: its relationships name the drawings' parts
        self.numbering = Numbering(self._part("numbering"), self.styles)
        self.sections = Sections()
        self.title: str | None = None
        self.first_heading: str | None = None
        self.notes = {kind: self._notes(kind) for kind in ("footnote", "endnote")}
        self.read_notes: set[tuple[str, str]] = set()  # each note read once: one that refers to itself looped
        self._paragraph = lambda p: Paragraph(p, document.part)

    def _part(self, name: str) -> Any:
        """The XML of the document's part of this relationship ("footnotes", "numbering"); None when it has none."""
        from docx.oxml.parser import parse_xml

        for rel in self.document.part.rels.values():
            if rel.reltype.endswith(f"/{name}") and not rel.is_external:
                self.parts[name] = rel.target_part
                return parse_xml(rel.target_part.blob)
        return None

    def _notes(self, kind: str) -> dict[str, Any]:
        """The document's footnotes or endnotes by id (the separators Word keeps among them have negative ids)."""
        root = self._part(f"{kind}s")
        if root is None:
            return {}
        return {n.get(f"{W}id"): n for n in root.iter(f"{W}{kind}") if n.get(f"{W}type") is None}

    def blocks(self, container: Any, level_allowed: bool = True) -> None:
        """The paragraphs and tables of a body, a text box or a content control, in order."""
        joined = ""  # the text of paragraphs whose mark is a tracked deletion, running on into the next paragraph
        for child in container:
            if child.tag == f"{W}p":
                joined = self.paragraph(child, level_allowed, joined)
                continue
            if joined and (child.tag == f"{W}tbl" or _wrapper(child)):  # no paragraph to run on into
                self.sections.add(joined)
                joined = ""
            if child.tag == f"{W}tbl":
                self.table(child)
            elif _wrapper(child):
                self.blocks(child, level_allowed)
        if joined:
            self.sections.add(joined)

    def inline(self, element: Any, extras: list[tuple[str, Any]], hidden: bool = False) -> str:
        """The text of a paragraph's runs but the hidden ones (``hidden``: whether its style hides them); its text
        boxes and note references go to ``extras`` (kind, element)."""
        parts: list[str] = []
        for child in element:
            tag = child.tag
            if tag in _NOT_TEXT or not isinstance(tag, str) or (tag == f"{W}sdt" and not _content(child)):
                continue
            if tag == f"{W}r" and self.hidden(child, hidden):
                continue
            if tag in _TEXT:
                parts.append(child.text or "")
            elif tag in _CHARACTERS:
                parts.append(_CHARACTERS[tag])
            elif tag == f"{W}sym":
                parts.append(_symbol(child))
            elif tag == f"{W}txbxContent":
                extras.append(("box", child))
            elif tag in DRAWINGS:  # a SmartArt diagram or a chart: its text, in a part of its own, after the paragraph
                extras += [("drawing", rid) for rid in drawing_ids(child)]
            elif tag in (f"{W}footnoteReference", f"{W}endnoteReference"):
                extras.append((tag[len(W):-len("Reference")], child.get(f"{W}id")))
            elif tag == f"{W}ruby":  # a phonetic guide over its base text: the base, the guide after it in brackets,
                # as Word saves it as plain text ("漢字(かんじ)"; the guide comes first in the XML)
                base, guide = (self.inline(part, extras, hidden) if (part := child.find(f"{W}{name}")) is not None
                               else "" for name in ("rubyBase", "rt"))
                parts.append(f"{base}({guide})" if guide.strip() else base)
            else:  # runs, hyperlinks, inserted text, fields, content controls, drawings (for their text boxes)
                parts.append(self.inline(child, extras, hidden))
        return "".join(parts)

    def hidden(self, run: Any, paragraph_hidden: bool) -> bool:
        """Whether a run is hidden text (w:vanish: Word neither prints nor shows it, nor saves it as plain text), set
        on the run, else on its character style, else on its paragraph's style (``paragraph_hidden``). A paragraph
        mark's w:specVanish (a run-in heading's: the paragraph shows on one line with the next) hides no text."""
        properties = run.find(f"{W}rPr")
        style = val(properties.find(f"{W}rStyle")) if properties is not None else None
        found = _vanish([properties, *(s.find(f"{W}rPr") for s in self.styles.chain(style))])
        return paragraph_hidden if found is None else found

    def line(self, p: Any, extras: list[tuple[str, Any]]) -> tuple[str, str]:
        """A paragraph's visible text on one line, and its list number or bullet ("" when none). An empty paragraph
        in a list is counted, as Word shows its number ("2." on a line of its own), unless its paragraph mark is hidden
        too (Word then shows no line for it) or a tracked deletion (the list's next item takes its number)."""
        style_hidden = _vanish(s.find(f"{W}rPr") for s in self.styles.chain(self.styles.paragraph_style(p)))
        text = " ".join(self.inline(p, extras, bool(style_hidden)).split())
        mark_hidden = _vanish([p.find(f"{W}pPr/{W}rPr")])
        # a paragraph whose mark is a tracked deletion or moved away is gone once the changes are accepted: not counted
        deleted = _mark_gone(p)
        shown = not deleted and (bool(text) or not (style_hidden if mark_hidden is None else mark_hidden))
        return text, self.numbering.label(p) if shown else ""

    def paragraph(self, p: Any, level_allowed: bool = True, before: str = "") -> str:
        """Reads a paragraph, the text of those before it whose mark is a tracked deletion (``before``) first: once
        the changes are accepted they are one paragraph, of this one's style and list (their texts a space apart). A
        paragraph whose own mark is a tracked deletion (``_mark_gone``) is not read: its text is returned, to run on
        into the next."""
        extras: list[tuple[str, Any]] = []
        line, label = self.line(p, extras)
        line = " ".join(filter(None, (before, line)))
        if _mark_gone(p):
            self.extras(extras)
            return line
        style = self._paragraph(p).style if level_allowed else None
        name = (style.name if style is not None else "") or ""
        named = _HEADING.fullmatch(name)
        level = int(named.group(1)) if named else self.outline_level(p) if level_allowed else 0
        if name == "Title" and line:
            self.title = self.title or line  # the title is the document's, not a passage's
        else:
            self.first_heading = self.first_heading or (line if level else None) or None  # a name: no number
            self.sections.add(_labelled(line, label), level)
        self.extras(extras)
        return ""

    def outline_level(self, p: Any) -> int:
        """A paragraph's heading level (1-9) by its outline level (w:outlineLvl 0-8: what Word's navigation pane
        lists), its own or its style's: a heading in a style of another name ("Chapter"; "Heading" as Pages names
        it; a LibreOffice heading style of its own); 0 for body text (outline level 9, or none)."""
        for props in [p.find(f"{W}pPr"), *(s.find(f"{W}pPr") for s in self.styles.chain(self.styles.paragraph_style(p)))]:
            value = val(props.find(f"{W}outlineLvl")) if props is not None else None
            if value is not None:
                return int(value) + 1 if value.isdecimal() and int(value) < 9 else 0
        return 0

    def extras(self, extras: list[tuple[str, Any]]) -> None:
        """A paragraph's (or a table row's) text boxes and notes, as paragraphs after it."""
        for kind, item in extras:
            if kind == "box":
                self.blocks(item, level_allowed=False)
            elif kind == "drawing":
                for text in related_texts(self.part, item):
                    self.sections.add(text)
            elif (kind, item) not in self.read_notes and (note := self.notes[kind].get(item)) is not None:
                self.read_notes.add((kind, item))
                self.part, part = self.parts[f"{kind}s"], self.part
                self.blocks(note, level_allowed=False)
                self.part = part

    def cell(self, tc: Any, extras: list[tuple[str, Any]]) -> str:
        """A table cell's text on one line: its paragraphs and its nested tables' rows, a space apart."""
        if _prompt(tc):
            return ""
        return " ".join(filter(None, (_labelled(*self.line(p, extras)) for p in _cell_paragraphs(tc))))

    def table(self, tbl: Any) -> None:
        """A table's rows, each one paragraph whose cells are named by the header rows (``header_rows``, and the rows
        a first row's cells merged over rows span: ``header_depth``; several: ``header_names``). A cell merged over
        columns is read once (a header cell so merged names each of them, as an HTML colspan does, where its row has
        other names), a body cell merged over rows in each of its rows, and a header cell merged down into the body
        names its column there (as an HTML ``<th rowspan>`` does), not a body row's text ("Source: Source")."""
        grid = _grid(tbl)
        heads = self.header_rows(tbl, grid)
        if heads == 1:  # a first row whose cells merged over rows span the rows of a second level ("high", "low")
            heads = header_depth([(_rows_spanned(grid, cell), cell.span) for cell in grid[0].cells], len(grid))
        width = max((cell.column + cell.span for row in grid for cell in row.cells), default=0)
        names = header_names([[(cell.column, cell.column + cell.span, self.cell(cell.tc, [])) for cell in row.cells]
                              for row in grid[:heads]], width)
        for row in grid[heads:]:
            extras: list[tuple[str, Any]] = []
            texts = ["" if cell.top < heads else self.cell(cell.tc, extras) for cell in row.cells]
            self.sections.add(row_text(texts, [names[cell.column] for cell in row.cells]))
            self.extras(extras)

    def header_rows(self, tbl: Any, grid: list[_Row]) -> int:
        """How many rows of a table are its header, naming the columns: the leading rows marked "Repeat as header
        row", else the first row when it looks like a header: the table's style sets its first row apart (and the
        table shows that: Word's "Header Row" option) or its text is bold. None in a table of no other rows."""
        heads = 0
        while heads < len(grid) and flag(grid[heads].tr.find(f"{W}trPr"), "tblHeader"):
            heads += 1
        if not heads and len(grid) > 1 and (self.styled_first_row(tbl)
                                             or self.bold(grid[0])):
            heads = 1
        return heads if heads < len(grid) else 0

    def styled_first_row(self, tbl: Any) -> bool:
        properties = tbl.find(f"{W}tblPr")
        look = properties.find(f"{W}tblLook") if properties is not None else None
        if look is None:
            return False
        first = look.get(f"{W}firstRow")
        if not (first in ON if first is not None else int(look.get(f"{W}val") or "0", 16) & 0x0020):
            return False
        return any(p.get(f"{W}type") == "firstRow" for style in self.styles.chain(val(properties.find(f"{W}tblStyle")))
                   for p in style.findall(f"{W}tblStylePr"))

    def bold(self, row: _Row) -> bool:
        """Whether every run with text in a row is bold (set on the run, its character style or its paragraph's)."""
        from docx.text.paragraph import Paragraph

        bold: list[bool] = []
        for cell in row.cells:
            for p in _cell_paragraphs(cell.tc):
                paragraph = Paragraph(p, self.document.part)
                styled = bool(paragraph.style is not None and paragraph.style.font.bold)
                bold += [run.bold if run.bold is not None else styled or bool(run.style and run.style.font.bold)
                         for run in paragraph.runs if run.text.strip()]
        return bool(bold) and all(bold)


def _content(sdt: Any) -> bool:
    """Whether a content control holds the document's text: not a table of contents (the headings again, with page
    numbers), nor a placeholder's prompt ("Click or tap here to enter text.")."""
    properties = sdt.find(f"{W}sdtPr")
    if properties is None:
        return True
    gallery = properties.find(f"{W}docPartObj/{W}docPartGallery")
    return properties.find(f"{W}showingPlcHdr") is None and (
        gallery is None or gallery.get(f"{W}val") != "Table of Contents")


def _mark_gone(p: Any) -> bool:
    """Whether a paragraph's mark is a tracked deletion, or moved away with its text (w:moveFrom): once the changes
    are accepted, the paragraph is no more (its text, if any, runs on into the next)."""
    mark = p.find(f"{W}pPr/{W}rPr")
    return mark is not None and (mark.find(f"{W}del") is not None or mark.find(f"{W}moveFrom") is not None)


def _wrapper(element: Any) -> bool:
    """Whether an element wraps the document's text without being text itself: a content control holding it
    (``_content``), its contents, or a custom XML element."""
    return element.tag in (f"{W}sdtContent", f"{W}customXml") or (element.tag == f"{W}sdt" and _content(element))


def _wrapped(container: Any, tag: str) -> Iterator[Any]:
    """A table's rows (``tag`` "tr") or a row's cells ("tc") in order, those wrapped in content controls or custom
    XML too (a form's repeating section wraps rows; a drop-down list, a cell). The rows and cells of a control that
    shows its placeholder are read as well, as they take their place in the table; their text is the prompt's, left
    out (``_prompt``)."""
    for child in container:
        if child.tag == f"{W}{tag}":
            yield child
        elif child.tag in (f"{W}sdt", f"{W}sdtContent", f"{W}customXml"):
            yield from _wrapped(child, tag)


def _prompt(tc: Any) -> bool:
    """Whether a table cell is inside a content control of its row or table that shows no text of the document (a
    placeholder's prompt: ``_content``)."""
    parent = tc.getparent()
    while parent is not None and parent.tag != f"{W}tbl":
        if parent.tag == f"{W}sdt" and not _content(parent):
            return True
        parent = parent.getparent()
    return False


@dataclass(frozen=True)
class _Cell:
    """A cell of a table's row as Word lays it out: the grid column it starts in, the columns it spans (w:gridSpan),
    the w:tc whose text it shows (a cell merged over rows, w:vMerge, shows its first row's) and that row's index."""

    column: int
    span: int
    tc: Any
    top: int


@dataclass(frozen=True)
class _Row:
    tr: Any  # the w:tr
    cells: list[_Cell]


def _grid(tbl: Any) -> list[_Row]:
    """A table's rows (w:tr) and their cells (w:tc) in Word's layout grid, read from the XML: each cell once (a cell
    merged over columns too), in the column it starts in (after the row's w:gridBefore and the spans before it), a
    cell continuing a merge over rows (w:vMerge without "restart") showing the cell above it in its column, or itself
    where none is (a damaged file's). Linear in the table's cells: a merge down 10,000 rows is looked up, not walked,
    and a span past the grid's last column (w:gridSpan or w:gridBefore of a billion: a damaged or hostile file's)
    counts as the rest of the grid (its w:gridCol, or its most cells in a row where those are more)."""
    trs = [(tr, list(_wrapped(tr, "tc"))) for tr in _wrapped(tbl, "tr")]
    width = max([len(tbl.findall(f"{W}tblGrid/{W}gridCol")), *(len(tcs) for _, tcs in trs)])
    rows: list[_Row] = []
    above: dict[int, _Cell] = {}  # each grid column's cell in the row above
    for r, (tr, tcs) in enumerate(trs):
        column = _columns(tr.find(f"{W}trPr/{W}gridBefore"), 0, width)
        cells: list[_Cell] = []
        for tc in tcs:
            span = _columns(tc.find(f"{W}tcPr/{W}gridSpan"), 1, width - column)
            merge = tc.find(f"{W}tcPr/{W}vMerge")
            origin = above.get(column) if merge is not None and val(merge) in (None, "continue") else None
            cells.append(_Cell(column, span, origin.tc, origin.top) if origin is not None else _Cell(column, span, tc, r))
            column += span
        above = {cell.column: cell for cell in cells}
        rows.append(_Row(tr, cells))
    return rows


def _columns(element: Any, least: int, most: int) -> int:
    """A count of grid columns (w:gridBefore, w:gridSpan) from 0 or 1 (``least``) up to those left in the grid
    (``most``, where that is more than ``least``): a damaged file's "-5" or "x" is ``least``."""
    value = val(element) or ""
    if not re.fullmatch(r"[0-9]+", value):
        return least
    digits = value.lstrip("0")
    return max(least, min(int(digits or "0") if len(digits) < 10 else most, most))


def _rows_spanned(grid: list[_Row], cell: _Cell) -> int:
    """The rows from the first down that ``cell``, one of the first row's, is merged over, up to ``HEADER_LEVELS`` +
    1 (as many as ``header_depth`` tells apart)."""
    spanned = 1
    while spanned < min(len(grid), HEADER_LEVELS + 1) and any(other.tc is cell.tc for other in grid[spanned].cells):
        spanned += 1
    return spanned


def _cell_paragraphs(container: Any) -> Iterator[Any]:
    """A table cell's paragraphs in order, those of the tables nested in it too (not those of its text boxes)."""
    for child in container:
        if child.tag == f"{W}p":
            yield child
        elif child.tag == f"{W}tbl":
            for tc in (tc for tr in _wrapped(child, "tr") for tc in _wrapped(tr, "tc")):
                yield from _cell_paragraphs(tc)
        elif _wrapper(child):
            yield from _cell_paragraphs(child)


def _symbol(sym: Any) -> str:
    """The character a w:sym (Insert > Symbol) shows: a symbol font's (``_SYMBOL_FONTS``; its code as the private-use
    U+F020-U+F0FF Word writes, or as 0x20-0xFF) as Unicode, another font's as the code point it names; "" for a
    character of no Unicode equivalent (a private-use one, an icon) or a code that is no character."""
    code = _count_hex(sym.get(f"{W}char"))
    table = _SYMBOL_FONTS.get(" ".join((sym.get(f"{W}font") or "").lower().split()))
    if code is None:
        return ""
    if table is not None:
        return table.get(code - 0xF000 if 0xF000 <= code <= 0xF0FF else code, "")
    if 0xE000 <= code <= 0xF8FF or 0xD800 <= code <= 0xDFFF or code < 0x20 or code > 0x10FFFF:
        return ""
    return chr(code)


def _count_hex(value: str | None) -> int | None:
    """A hexadecimal code (w:char's "F0B4") as a number; None unless it is one of 1 to 6 hex digits."""
    return int(value, 16) if value is not None and re.fullmatch(r"[0-9A-Fa-f]{1,6}", value) else None


def _labelled(text: str, label: str) -> str:
    return f"{label} {text}" if label and text else text


def _vanish(properties: Iterable[Any]) -> bool | None:
    """Whether the first of these run properties (w:rPr, or None) to set w:vanish hides text; None when none does."""
    return next((flag(p, "vanish") for p in properties if p is not None and p.find(f"{W}vanish") is not None), None)


def extract_docx(path: Path) -> Extracted:
    """Paragraphs and table rows of a Word file in order, each with its ``section`` (the heading path) when it has
    one; the title from the document's properties, its "Title" paragraph or its first heading."""
    try:
        import docx
    except ImportError:
        raise IngestError(f"{path}: reading Word files needs python-docx (pip install 'spanseek[index]')") from None
    if (bomb := zip_bomb(path)) is not None:
        raise Unreadable(bomb)
    try:
        document = docx.Document(str(path))
        words = _WordText(document)  # it parses the notes parts: a damaged one is a damaged file
    except Exception as e:  # a .docx is a zip of XML parts; any of them may be missing or damaged
        raise Unreadable(not_office_file(path, e, "Word", ".docx", ".doc")) from None
    try:
        words.blocks(document.element.body)
        title = " ".join((document.core_properties.title or "").split()) or words.title or words.first_heading
    except Exception as e:  # XML past Word's schema where python-docx reads it (notes, properties): it raises many types
        raise Unreadable(f"not a readable Word (.docx) file: its XML breaks Word's rules ({error_text(e)})") from None
    return words.sections.extracted(title, {})
