"""Word files (.docx) -> paragraphs with their heading paths, for ``indexer.ingest`` (python-docx and the XML).

    spanseek corpus from-files handbook.docx DOCS/ --out corpus.jsonl

The body is read in order: paragraphs, the rows of tables and the contents of content controls (not a table of
contents, nor a placeholder's prompt). A paragraph's text is its runs' (hyperlinks, fields' results, tracked
insertions; not tracked deletions, field codes or comments), and its text boxes, footnotes and endnotes follow it as
paragraphs of their own. A table row is one paragraph whose cells are named by the header row ("Route: Kellerton to
Kirkwall; Departure: 09:15"), as Markdown's and HTML's are. A paragraph in a "Heading N" style opens a section
(``documents.Sections``). Page headers and footers are left out. A file python-docx cannot open is ``Unreadable``,
with what it is instead where its first bytes tell (an OLE file: a password-protected .docx or an old .doc; a PDF,
RTF or OpenDocument file renamed; a truncated zip).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from spanseek.indexer.documents import Extracted, IngestError, Sections, Unreadable, error_text, row_text

_HEADING = re.compile(r"heading\s*(\d)", re.I)
_OLE = b"\xd0\xcf\x11\xe0"  # how an OLE (Compound File) file starts: an old .doc, or an encrypted .docx
_W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"
_MC = "{http://schemas.openxmlformats.org/markup-compatibility/2006}"
# a paragraph's parts that hold no text of the document: deleted or moved-away text (tracked changes), a field's
# code (its result is text), properties, a content control's settings, and the older copy of a drawing (mc:Fallback,
# which repeats mc:Choice's text box)
_NOT_TEXT = {f"{_W}{tag}" for tag in ("del", "moveFrom", "delText", "instrText", "delInstrText", "pPr", "rPr",
                                       "sdtPr", "sdtEndPr", "tblPr", "trPr", "tcPr")} | {f"{_MC}Fallback"}
_CHARACTERS = {f"{_W}tab": " ", f"{_W}br": " ", f"{_W}cr": " ", f"{_W}noBreakHyphen": "-"}
_ON = {"1", "true", "on"}


class _WordText:
    """A Word document's text in reading order (``Sections``): paragraphs, with those of their text boxes and their
    footnotes and endnotes after them; table rows ("Header: cell; ..."); the contents of content controls. Tracked
    changes read as accepted (inserted text in, deleted text out); comments, page headers and footers are left
    out."""

    def __init__(self, document: Any) -> None:
        from docx.text.paragraph import Paragraph

        self.document = document
        self.sections = Sections()
        self.title: str | None = None
        self.first_heading: str | None = None
        self.notes = {kind: self._notes(kind) for kind in ("footnote", "endnote")}
        self.read_notes: set[tuple[str, str]] = set()  # each note read once: one that refers to itself looped
        self._paragraph = lambda p: Paragraph(p, document.part)

    def _notes(self, kind: str) -> dict[str, Any]:
        """The document's footnotes or endnotes by id (the separators Word keeps among them have negative ids)."""
        from docx.oxml.parser import parse_xml

        for rel in self.document.part.rels.values():
            if rel.reltype.endswith(f"/{kind}s") and not rel.is_external:
                root = parse_xml(rel.target_part.blob)
                return {n.get(f"{_W}id"): n for n in root.iter(f"{_W}{kind}") if n.get(f"{_W}type") is None}
        return {}

    def blocks(self, container: Any, level_allowed: bool = True) -> None:
        """The paragraphs and tables of a body, a text box or a content control, in order."""
        for child in container:
            if child.tag == f"{_W}p":
                self.paragraph(child, level_allowed)
            elif child.tag == f"{_W}tbl":
                self.table(child)
            elif child.tag in (f"{_W}sdtContent", f"{_W}customXml") or (child.tag == f"{_W}sdt" and _content(child)):
                self.blocks(child, level_allowed)

    def inline(self, element: Any, extras: list[tuple[str, Any]]) -> str:
        """The text of a paragraph's runs; its text boxes and note references go to ``extras`` (kind, element)."""
        parts: list[str] = []
        for child in element:
            tag = child.tag
            if tag in _NOT_TEXT or not isinstance(tag, str) or (tag == f"{_W}sdt" and not _content(child)):
                continue
            if tag == f"{_W}t":
                parts.append(child.text or "")
            elif tag in _CHARACTERS:
                parts.append(_CHARACTERS[tag])
            elif tag == f"{_W}txbxContent":
                extras.append(("box", child))
            elif tag in (f"{_W}footnoteReference", f"{_W}endnoteReference"):
                extras.append((tag[len(_W):-len("Reference")], child.get(f"{_W}id")))
            else:  # runs, hyperlinks, inserted text, fields, content controls, drawings (for their text boxes)
                parts.append(self.inline(child, extras))
        return "".join(parts)

    def paragraph(self, p: Any, level_allowed: bool = True) -> None:
        extras: list[tuple[str, Any]] = []
        line = " ".join(self.inline(p, extras).split())
        style = self._paragraph(p).style if level_allowed else None
        name = (style.name if style is not None else "") or ""
        level = _HEADING.fullmatch(name)
        if name == "Title" and line:
            self.title = self.title or line  # the title is the document's, not a passage's
        else:
            self.first_heading = self.first_heading or (line if level else None) or None
            self.sections.add(line, int(level.group(1)) if level else 0)
        self.extras(extras)

    def extras(self, extras: list[tuple[str, Any]]) -> None:
        """A paragraph's (or a table row's) text boxes and notes, as paragraphs after it."""
        for kind, item in extras:
            if kind == "box":
                self.blocks(item, level_allowed=False)
            elif (kind, item) not in self.read_notes and (note := self.notes[kind].get(item)) is not None:
                self.read_notes.add((kind, item))
                self.blocks(note, level_allowed=False)

    def cell(self, tc: Any, extras: list[tuple[str, Any]]) -> str:
        """A table cell's text on one line: its paragraphs and its nested tables' rows, a space apart."""
        return " ".join(filter(None, (" ".join(self.inline(p, extras).split()) for p in _cell_paragraphs(tc))))

    def table(self, tbl: Any) -> None:
        """A table's rows, each one paragraph whose cells are named by the header row (``header_rows``). A cell
        merged over columns is read once, one merged over rows in each of its rows."""
        from docx.table import Table


        rows = Table(tbl, self.document.part).rows
        heads = self.header_rows(tbl, rows)
        names = [""] * max((len(row.cells) for row in rows), default=0)
        for row in rows[:heads]:  # a header cell merged over columns names the first (as an HTML colspan does)
            for column, cell in _cells(row):
                text = self.cell(cell._tc, [])
                if text and text not in names[column].split(" / "):
                    names[column] = f"{names[column]} / {text}" if names[column] else text
        for row in rows[heads:]:
            extras: list[tuple[str, Any]] = []
            cells = _cells(row)
            self.sections.add(row_text([self.cell(cell._tc, extras) for _, cell in cells], [names[c] for c, _ in cells]))
            self.extras(extras)

    def header_rows(self, tbl: Any, rows: Any) -> int:
        """How many rows of a table are its header, naming the columns: the leading rows marked "Repeat as header
        row", else the first row when it looks like a header: the table's style sets its first row apart (and the
        table shows that: Word's "Header Row" option) or its text is bold. None in a table of no other rows."""
        heads = 0
        while heads < len(rows) and _flag(rows[heads]._tr.trPr, "tblHeader"):
            heads += 1
        if not heads and len(rows) > 1 and (self.styled_first_row(tbl) or self.bold(rows[0])):
            heads = 1
        return heads if heads < len(rows) else 0

    def styled_first_row(self, tbl: Any) -> bool:
        properties = tbl.tblPr
        look = properties.find(f"{_W}tblLook") if properties is not None else None
        if look is None:
            return False
        first = look.get(f"{_W}firstRow")
        if not (first in _ON if first is not None else int(look.get(f"{_W}val") or "0", 16) & 0x0020):
            return False
        style = properties.find(f"{_W}tblStyle")
        styles = self.document.styles.element
        seen: set[str] = set()
        while style is not None and (style_id := style.get(f"{_W}val")) and style_id not in seen:
            seen.add(style_id)
            found = next((s for s in styles.iterchildren(f"{_W}style") if s.get(f"{_W}styleId") == style_id), None)
            if found is None:
                return False
            if any(p.get(f"{_W}type") == "firstRow" for p in found.findall(f"{_W}tblStylePr")):
                return True
            style = found.find(f"{_W}basedOn")
        return False

    def bold(self, row: Any) -> bool:
        """Whether every run with text in a row is bold (set on the run, its character style or its paragraph's)."""
        from docx.text.paragraph import Paragraph

        bold: list[bool] = []
        for cell in row.cells:
            for p in _cell_paragraphs(cell._tc):
                paragraph = Paragraph(p, self.document.part)
                styled = bool(paragraph.style is not None and paragraph.style.font.bold)
                bold += [run.bold if run.bold is not None else styled or bool(run.style and run.style.font.bold)
                         for run in paragraph.runs if run.text.strip()]
        return bool(bold) and all(bold)


def _content(sdt: Any) -> bool:
    """Whether a content control holds the document's text: not a table of contents (the headings again, with page
    numbers), nor a placeholder's prompt ("Click or tap here to enter text.")."""
    properties = sdt.find(f"{_W}sdtPr")
    if properties is None:
        return True
    gallery = properties.find(f"{_W}docPartObj/{_W}docPartGallery")
    return properties.find(f"{_W}showingPlcHdr") is None and (
        gallery is None or gallery.get(f"{_W}val") != "Table of Contents")


def _cells(row: Any) -> list[tuple[int, Any]]:
    """A table row's cells with the grid column each starts in; python-docx gives a cell merged over columns once
    for each of them, here it is once."""
    cells: list[tuple[int, Any]] = []
    for column, cell in enumerate(row.cells):
        if not cells or cell._tc is not cells[-1][1]._tc:
            cells.append((column, cell))
    return cells


def _cell_paragraphs(container: Any) -> Iterator[Any]:
    """A table cell's paragraphs in order, those of the tables nested in it too (not those of its text boxes)."""
    for child in container:
        if child.tag == f"{_W}p":
            yield child
        elif child.tag == f"{_W}tbl":
            for tc in (tc for tr in child.iterchildren(f"{_W}tr") for tc in tr.iterchildren(f"{_W}tc")):
                yield from _cell_paragraphs(tc)
        elif child.tag in (f"{_W}sdtContent", f"{_W}customXml") or (child.tag == f"{_W}sdt" and _content(child)):
            yield from _cell_paragraphs(child)


def _flag(properties: Any, tag: str) -> bool:
    """Whether an on/off property (``<w:tblHeader/>``, ``w:val="true"``) is set in these properties."""
    element = properties.find(f"{_W}{tag}") if properties is not None else None
    return element is not None and element.get(f"{_W}val", "true") in _ON


def _not_docx(path: Path, e: Exception) -> str:
    """Why python-docx cannot open a file: what the file is, by its first bytes, and what to do with it."""
    import zipfile

    with open(path, "rb") as f:
        head = f.read(8)
    if not head:
        return "an empty file (0 bytes), not a Word (.docx) file"
    if head.startswith(_OLE):  # not a zip: Word stores a password-protected .docx, like an old .doc, in an OLE file
        return ("not a readable Word (.docx) file (an OLE file: a password-protected .docx, or an old .doc renamed); "
                "remove the password, or save it as .docx, and ingest the result")
    if head.startswith(b"%PDF"):
        return "a PDF file, not a Word (.docx) file; rename it to .pdf"
    if head.startswith(b"{\\rtf"):
        return "an RTF file, not a Word (.docx) file; save it as .docx (in Word, or `soffice --convert-to docx`)"
    if zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as z:
            if "mimetype" in z.namelist() and z.read("mimetype").startswith(b"application/vnd.oasis.opendocument"):
                return (f"an OpenDocument file ({z.read('mimetype').decode('ascii', 'replace')}), not a Word (.docx) "
                        "file; save it as .docx (in LibreOffice, or `soffice --convert-to docx`)")
        if isinstance(e, ValueError) and "content type is" in str(e):  # another Office file (a workbook, ...)
            return f"not a Word (.docx) document: {str(e).split(', ', 1)[-1]}"
    elif head.startswith(b"PK"):
        return "not a readable Word (.docx) file: its zip archive is truncated or damaged"
    else:
        return "not a Word (.docx) file: a .docx is a zip archive, and this is none"
    return f"not a readable Word (.docx) file ({error_text(e)}); the file may be truncated or damaged"


def extract_docx(path: Path) -> Extracted:
    """Paragraphs and table rows of a Word file in order, each with its ``section`` (the heading path) when it has
    one; the title from the document's properties, its "Title" paragraph or its first heading."""
    try:
        import docx
    except ImportError:
        raise IngestError(f"{path}: reading Word files needs python-docx (pip install 'spanseek[index]')") from None
    try:
        document = docx.Document(str(path))
        words = _WordText(document)  # it parses the notes parts: a damaged one is a damaged file
    except Exception as e:  # a .docx is a zip of XML parts; any of them may be missing or damaged
        raise Unreadable(_not_docx(path, e)) from None
    words.blocks(document.element.body)
    title = " ".join((document.core_properties.title or "").split()) or words.title or words.first_heading
    return words.sections.extracted(title, {})
