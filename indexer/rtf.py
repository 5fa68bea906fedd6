"""RTF files (.rtf: WordPad's, TextEdit's, Word's "Rich Text Format") -> paragraphs with their heading paths, for
``indexer.ingest``.

    spanseek corpus from-files letter.rtf DOCS/ --out corpus.jsonl

The body's paragraphs are read in order (``\\par``; a line break, ``\\line``, and a tab read as spaces). A paragraph
in a heading style (a style named "heading N" in the file's style sheet) or with an outline level opens a section
(``extracted.Sections``), as a Word file's does. A table's rows are paragraphs (``\\cell``, ``\\row``): the cells of
a row named by those of a first row marked as a header row (``\\trhdr``: "Route: Kellerton; Departure: 09:15"), as
a Word file's are, else spaced; a table inside a cell reads in that cell. Characters are decoded as the file says:
``\\uN`` (Unicode, its ``\\ucN`` fallback characters skipped; two of them a surrogate pair; a number no
character has reads as U+FFFD), ``\\'hh`` in the code
page of the font in use (its ``\\fcharset``) or of the document (``\\ansicpgN``; Windows-1252 by default; two bytes
a character in the East Asian ones), ``\\~`` and the typographic symbols (``\\emdash``, ``\\rquote``). Left out:
the font, colour, style and list tables, pictures and objects, page headers and footers, footnotes, comments,
fields' instructions (a field's result is read), hidden text (``\\v``) and tracked deletions. The ``\\info`` group
gives the ``title`` (else the first heading) and the ``author``. The file is read as a list of tokens, not by
recursion: groups nested past ``MAX_DEPTH`` (no editor writes them) are refused; a file that ends with groups still
open (cut short) is read up to its end, with a warning. A file that does not begin with ``{\\rtf`` is
``Unreadable``, saying what it is where its first bytes tell.
"""

from __future__ import annotations

import codecs
import logging
import re
from dataclasses import dataclass, field, replace
from pathlib import Path

from spanseek.indexer.extracted import MAX_INFLATED, OLE, Extracted, Sections, Unreadable, table_rows

log = logging.getLogger(__name__)

KIND = "RTF (.rtf) file"
MAX_DEPTH = 1_000  # groups nested in one another: Word writes some ten
# a control word (its letters, its number, the space that ends it), a byte in hex, a control symbol, a brace, line
# ends (no text in RTF), and plain text
_TOKEN = re.compile(rb"\\([a-zA-Z]{1,32})(-?\d{1,10})? ?|\\'([0-9a-fA-F]{2})|\\([^a-zA-Z'])|([{}])|[\r\n]+|([^\\{}\r\n]+)")
# groups whose text is no text of the document (the font, colour and style tables, info, pictures, headers ...)
_SKIPPED = {"colortbl", "pict", "object", "header", "headerl", "headerr", "headerf", "footer", "footerl", "footerr",
            "footerf", "footnote", "annotation", "fldinst", "xe", "tc", "bkmkstart", "bkmkend", "datafield",
            "themedata", "colorschememapping", "listtable", "listoverridetable", "rsidtbl", "generator",
            "latentstyles", "pgdsctbl", "mmathPr", "xmlnstbl", "revtbl", "nonshppict", "shppict", "private", "info",
            "filetbl", "atnid", "atnauthor", "objdata", "xmlopen", "template", "userprops", "docvar", "pn"}
_SYMBOLS = {"emdash": "\u2014", "endash": "\u2013", "bullet": "\u2022", "lquote": "\u2018", "rquote": "\u2019",
            "ldblquote": "\u201c", "rdblquote": "\u201d", "tab": " ", "line": " ", "emspace": " ", "enspace": " ",
            "qmspace": " ", "nestcell": " ", "zwj": "", "zwnj": "", "ltrmark": "", "rtlmark": ""}
_CONTROL_SYMBOLS = {"~": "\u00a0", "_": "\u2011", "-": "", "\\": "\\", "{": "{", "}": "}"}
# a font's \fcharset -> its Windows code page
_CHARSETS = {0: 1252, 1: 1252, 2: 1252, 77: 10000, 128: 932, 129: 949, 130: 1361, 134: 936, 136: 950, 161: 1253,
             162: 1254, 163: 1258, 177: 1255, 178: 1256, 186: 1257, 204: 1251, 222: 874, 238: 1250}
_HEADING_STYLE = re.compile(r"heading\s*(\d)", re.IGNORECASE)


@dataclass(frozen=True)
class _Group:
    """What a group sets, undone when it ends: where its text goes, its fallback count, font and hidden text."""

    dest: str = ""  # "" the body; "skip"; "fonttbl", "stylesheet", "title", "author"
    uc: int = 1
    font: int = -1
    hidden: bool = False


@dataclass
class _Reader:
    codepage: str = "cp1252"
    fonts: dict[int, str] = field(default_factory=dict)
    styles: dict[int, int] = field(default_factory=dict)  # a style's number -> its heading level (0: none)
    meta: dict[str, str] = field(default_factory=dict)
    sections: Sections = field(default_factory=Sections)
    text: list[str] = field(default_factory=list)  # the paragraph being read
    pending: bytearray = field(default_factory=bytearray)  # \'hh bytes not yet decoded (a character may take two)
    style: int = 0
    level: int = 0  # the paragraph's outline level (\outlinelevel), 0 for none
    in_table: bool = False
    cells: list[str] = field(default_factory=list)
    rows: list[list[str]] = field(default_factory=list)
    header: bool = False  # the table's first row is a header row (\trhdr)
    first_heading: str | None = None
    defined: int = 0  # the style or font a table's entry defines
    name: list[str] = field(default_factory=list)  # that entry's text

    def decode(self, group: _Group) -> None:
        """The \\'hh bytes met, in the code page of the group's font (or the document's), into the text."""
        if self.pending:
            codec = self.fonts.get(group.font, self.codepage)
            self.put(group, bytes(self.pending).decode(codec, "replace"))
            self.pending.clear()

    def put(self, group: _Group, text: str) -> None:
        if group.dest in ("", "title", "author"):
            if not group.hidden:
                self.text.append(text)
        elif group.dest in ("fonttbl", "stylesheet"):
            self.name.append(text)

    def paragraph(self) -> str:
        text = " ".join("".join(self.text).encode("utf-16", "surrogatepass").decode("utf-16", "replace").split())
        self.text.clear()
        return text

    def end_paragraph(self) -> None:
        text = self.paragraph()
        if self.in_table:
            self.cells.append(text)  # (a cell's paragraphs: joined when the cell ends)
            return
        self.flush_table()
        level = self.level or self.styles.get(self.style, 0)
        self.first_heading = self.first_heading or (text if level and text else None)
        self.sections.add(text, level)

    def end_cell(self) -> None:
        self.cells.append(self.paragraph())
        if not self.rows:
            self.rows.append([])
        self.rows[-1].append(" ".join(filter(None, self.cells)))
        self.cells.clear()

    def end_row(self) -> None:
        self.rows.append([])

    def flush_table(self) -> None:
        rows = [row for row in self.rows if row]
        for text in table_rows(rows, self.header):
            self.sections.add(text)
        self.rows.clear()
        self.header = False


# what a file named .rtf is instead, by how it begins
_OTHER_FILES = ((OLE, f"an OLE file (an old Word .doc file, or a password-protected one), not an {KIND}; save it as "
                      ".docx"),
                (b"%PDF", f"a PDF file, not an {KIND}; rename it to .pdf"),
                (b"PK", f"a zip archive (a Word .docx file, or another), not an {KIND}; rename it to its own suffix"))


def _what_instead(data: bytes) -> str:
    """Why a file named .rtf (its bytes) is none, by how it begins."""
    if not data.strip():
        return f"an empty file ({len(data)} bytes), not an {KIND}"
    return next((why for start, why in _OTHER_FILES if data.startswith(start)),
                f"not an {KIND}: it does not begin with {{\\rtf")


def extract_rtf(path: Path) -> Extracted:
    """The body's paragraphs, headings and table rows in order, each with its ``section`` where it has one; the
    title and author from ``\\info``."""
    if (size := path.stat().st_size) > MAX_INFLATED:
        raise Unreadable(f"{size:,} bytes, more than the {MAX_INFLATED >> 20:,} MiB a file's reader may hold; not read")
    data = path.read_bytes()
    if not data.lstrip().startswith(b"{\\rtf"):
        raise Unreadable(_what_instead(data))
    reader = _Reader()
    stack: list[_Group] = []
    group = _Group()
    skip = 0  # fallback characters of a \uN still to skip
    destination = False  # the last token was \*: the next control word names an optional destination
    at = 0
    while at < len(data):
        found = _TOKEN.match(data, at)
        if found is None:  # a backslash at the very end
            break
        start, at = at, found.end()
        if found.lastindex is None:  # line ends: no text in RTF
            continue
        word, number, hexed, symbol, brace, text = found.groups()
        if hexed is None:
            reader.decode(group)
        if skip and brace is None:  # a \uN's fallback: a character, a byte or a control word each count one
            if text and len(text) > skip:
                text, skip = text[skip:], 0
            else:
                skip -= len(text) if text else 1
                continue
        if brace == b"{":
            if len(stack) >= MAX_DEPTH:
                raise Unreadable(f"not a readable {KIND}: its groups nest deeper than {MAX_DEPTH:,} (at byte "
                                 f"{start:,})")
            stack.append(group)
            group, destination, skip = replace(group), False, 0
            if group.dest == "stylesheet":
                reader.defined = 0  # (a style without \s is style 0, Normal)
        elif brace == b"}":
            if group.dest in ("fonttbl", "stylesheet") and reader.name:
                _defined(reader, group)
            if group.dest in ("title", "author") and stack and stack[-1].dest != group.dest:
                reader.meta[group.dest] = reader.paragraph()
            group, skip = (stack.pop() if stack else group), 0
        elif text is not None:
            reader.put(group, text.decode("latin-1"))
        elif hexed is not None:
            reader.pending.append(int(hexed, 16))
        elif symbol is not None:
            char = symbol.decode("latin-1")
            if char == "*":
                destination = True
            elif char in "\r\n" and group.dest == "":  # a backslash before a line end: \par
                reader.end_paragraph()
            else:
                reader.put(group, _CONTROL_SYMBOLS.get(char, ""))
        else:
            value = int(number) if number is not None else None
            group = _control(reader, group, word.decode("ascii"), value, destination)
            destination = False
            if word == b"u" and value is not None:
                skip = group.uc
            elif word == b"bin" and value is not None and value > 0:  # binary data (a picture's), not tokens
                at += value  # (a count of none or fewer is no data: a negative one would read its bytes again)
    reader.decode(group)
    if stack:
        log.warning("%s: it ends inside %d groups (cut short?); read up to its end", path, len(stack))
    reader.end_paragraph()
    reader.flush_table()
    meta = {key: value for key, value in reader.meta.items() if value}
    return reader.sections.extracted(meta.get("title") or reader.first_heading, meta)


def _defined(reader: _Reader, group: _Group) -> None:
    """A font table's or style sheet's entry, ended: its name ("heading 2;") read for a style's heading level."""
    name = "".join(reader.name).strip().rstrip(";")
    reader.name.clear()
    if group.dest == "stylesheet" and (heading := _HEADING_STYLE.fullmatch(name.strip())):
        reader.styles.setdefault(reader.defined, int(heading.group(1)))


def _control(reader: _Reader, group: _Group, word: str, number: int | None, destination: bool) -> _Group:
    """A control word's effect on the reader; the group as it sets it."""
    if group.dest == "skip":
        return group
    if group.dest == "info":
        return replace(group, dest=word if word in ("title", "author") else "skip")
    if word in _SKIPPED or (destination and group.dest in ("", "title", "author")
                            and word not in ("fonttbl", "stylesheet")):
        return replace(group, dest="info" if word == "info" else "skip")
    if word in ("fonttbl", "stylesheet"):
        return replace(group, dest=word)
    if word == "u" and number is not None:
        code = number + 0x10000 if number < 0 else number  # (a signed 16-bit number, as Word writes one)
        reader.put(group, chr(code) if 0 <= code <= 0x10FFFF else "\ufffd")  # (one no character has: U+FFFD)
    elif word == "uc" and number is not None:
        return replace(group, uc=max(number, 0))
    elif word == "ansicpg" and number:
        reader.codepage = _codec(number) or reader.codepage
    elif word == "f" and number is not None:
        if group.dest == "fonttbl":
            reader.defined = number
        return replace(group, font=number)
    elif word == "fcharset" and number is not None and group.dest == "fonttbl":
        if codec := _codec(_CHARSETS.get(number, 0)):
            reader.fonts[reader.defined] = codec
    elif word == "s" and number is not None:
        if group.dest == "stylesheet":
            reader.defined = number
        else:
            reader.style = number
    elif word == "outlinelevel" and number is not None:
        if group.dest == "stylesheet":
            reader.styles[reader.defined] = number + 1 if number < 9 else 0
        else:
            reader.level = number + 1 if number < 9 else 0
    elif word in ("v", "deleted"):
        return replace(group, hidden=number != 0)
    elif group.dest in ("", "title", "author"):
        _body_control(reader, group, word)
    return group


def _body_control(reader: _Reader, group: _Group, word: str) -> None:
    """The control words of the body's text and structure: paragraphs, tables, symbols."""
    if word in ("par", "sect", "page"):
        reader.end_paragraph()
    elif word == "pard":
        reader.style, reader.level, reader.in_table = 0, 0, False
    elif word == "intbl":
        reader.in_table = True
    elif word == "cell":
        reader.end_cell()
    elif word == "row":
        reader.end_row()
    elif word == "trhdr" and not any(reader.rows):
        reader.header = True
    elif word in _SYMBOLS:
        reader.put(group, _SYMBOLS[word])


def _codec(codepage: int) -> str | None:
    """A Windows code page's codec ("cp1252"), or None where Python has none."""
    name = "mac_roman" if codepage == 10000 else f"cp{codepage}"
    try:
        codecs.lookup(name)
    except LookupError:
        return None
    return name


