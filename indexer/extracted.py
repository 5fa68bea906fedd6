"""A file's text as a reader extracts it, and what every reader shares: ``Extracted`` (title, paragraphs, their
metadata), ``Sections`` (paragraphs under their heading path), a table row's text (``row_text``, ``table_rows``,
``stacked_names``, ``header_depth``, ``header_names``), the errors (``IngestError``, ``Unreadable``, ``error_text``)
and the limits on what a file's compressed parts may expand to (``zip_bomb``). The readers: ``indexer.documents`` (PDF), ``indexer.word``,
``indexer.slides`` and ``indexer.markup``, called by ``indexer.ingest``.

    spanseek corpus from-files report.pdf DOCS/ --out corpus.jsonl
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from spanseek.core.io import CorpusError

# two paragraphs in one: a heading and the text after it (an answer never crosses it; ``core.hits``)
PARAGRAPH_BREAK = "\n\n"


class IngestError(CorpusError):
    """A file cannot be turned into a document; the message names it."""


class Unreadable(Exception):
    """A file that is skipped (with a warning) rather than refused: the message is the reason."""


@dataclass
class Extracted:
    """A file's text before chunking; ``paragraph_meta`` (one per paragraph, or empty) goes to its passages;
    ``written``: the metadata values the file writes as text but its format reads as something else (front matter's
    ``id: 1.10``, the number 1.1, is "1.10" there), for a document id taken from them."""

    title: str | None
    paragraphs: list[str]
    meta: dict[str, Any] = field(default_factory=dict)
    paragraph_meta: list[dict[str, Any]] = field(default_factory=list)
    written: dict[str, str] = field(default_factory=dict)


def row_text(cells: Sequence[str], names: Sequence[str]) -> str:
    """A table row as one line (every format's: Markdown, HTML, Word): "Name: cell; Name: cell" with the names of
    the header row, a cell whose column has no name alone; empty cells left out. A row of a table without a header row: its cells, spaced."""
    if not any(names):
        return " ".join(filter(None, cells))
    named = []
    for i, cell in enumerate(cells):
        name = names[i].rstrip(":") if i < len(names) else ""
        if cell:
            named.append(f"{name}: {cell}" if name else cell)
    return "; ".join(named)


# the most header rows of an HTML or Markdown table that name its columns together ("Tide / high"); a table with more
# reads its header rows as it would without this (a grid of header cells names nothing in this way)
HEADER_LEVELS = 4


def stacked_names(rows: Sequence[Sequence[str]]) -> list[str]:
    """The column names of a table's header rows, one over another (every format's: Word, Markdown, HTML): each
    column's names top down, joined by " / " ("Tide / high" under a "Tide" over two columns), a name the rows above
    give it already (a cell spanning rows) once. ``rows`` give each column its name, "" where a row names none."""
    names: list[dict[str, None]] = [{} for _ in range(max(map(len, rows), default=0))]  # each column's, in order
    for row in rows:
        for column, text in enumerate(row):
            if text:
                names[column][text] = None
    return [" / ".join(column) for column in names]


def header_depth(spans: Sequence[tuple[int, int]], rows: int) -> int:
    """How many rows of a table of ``rows`` rows, whose first row is its header, are its header: the first and the rows
    its cells merged over rows span (``spans``: each first-row cell's rows and columns), where one of its cells is a
    group merged over columns, so a header of two levels ("Port" over two rows beside "Tide" over "high" and "low")
    is one, as an HTML ``rowspan`` makes it (without a group, a cell over rows below is a label of the body); at most
    ``HEADER_LEVELS`` rows, one row less than the table (the rows it names), and one row below its tallest group (the
    group's columns' names: a cell beside merged further down, "Source" over the whole table, takes no body row)."""
    groups = [down for down, columns in spans if columns > 1]
    if not groups:
        return 1
    return max(1, min(max(down for down, _ in spans), max(groups) + 1, HEADER_LEVELS, rows - 1))


def header_names(rows: Sequence[Sequence[tuple[int, int, str]]], width: int) -> list[str]:
    """The column names of a table's header rows (Word's, PowerPoint's), ``width`` columns: each row is its cells,
    (the grid column a cell starts in, the one after the last it spans, its text), a cell merged over columns once.
    Such a cell names each column it spans where its row has other names (a group's name over its columns, as an
    HTML ``colspan``: "Tide / high", "Tide / low"), only its first where it is its row's one name (the table's title
    over it); the rows' names are stacked (``stacked_names``)."""
    grid = [[""] * width for _ in rows]
    for line, cells in zip(grid, rows, strict=True):
        several = sum(bool(text) for _, _, text in cells) > 1
        for start, end, text in cells:
            for column in range(start, min(end, width) if several else start + 1):
                line[column] = text
    return stacked_names(grid) or [""] * width


def table_rows(rows: Sequence[Sequence[str]], header: bool) -> list[str]:
    """A table's rows as paragraphs (``row_text``): when the first row is its header (``header``) and rows follow it,
    they are named by it and it is no paragraph itself; otherwise every row reads its cells, spaced. Empty rows give
    no paragraph."""
    if not header or len(rows) < 2:
        return [text for r in rows if (text := row_text(r, []))]
    return [text for r in rows[1:] if (text := row_text(r, rows[0]))]


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
        self.heading_chars = 0  # the characters of the headings' text

    def add(self, text: str, level: int = 0) -> None:
        """The next paragraph, a heading of that ``level`` (1 outermost) when it is not 0; empty text is skipped."""
        if not text:
            return
        if level:
            self._open = (*(h for h in self._open if h[0] < level), (level, text))
            self._level_ones += level == 1
            self.heading_chars += len(text)
            if self._last_level:
                self.paths.pop()
                text = f"{self.texts.pop()}{PARAGRAPH_BREAK}{text}"
        self._last_level = level
        self.texts.append(text)
        self.paths.append(self._open)

    def rewrite(self, change: Callable[[str], str]) -> None:
        """Each paragraph's and heading's text changed by ``change`` (a text that could not be read where it was added,
        filled in when it is known)."""
        self.texts = [change(text) for text in self.texts]
        self.paths = [tuple((level, change(heading)) for level, heading in path) for path in self.paths]

    def extracted(self, title: str | None, meta: dict[str, Any], title_heading: str | None = None) -> Extracted:
        first = next((path[0] for path in self.paths if path), None)
        skip = int(first is not None and first == (1, title_heading) and self._level_ones == 1)
        metas = [{"section": " > ".join(h for _, h in path[skip:])} if path[skip:] else {} for path in self.paths]
        return Extracted(title, self.texts, meta, metas if any(metas) else [])


# a file's compressed parts may expand to at most this together (what its reader holds in memory): a PDF's
# compressed streams, an Office file's zipped parts
MAX_INFLATED = 1 << 30
# a PDF's compressed (FlateDecode) stream may expand to at most this: a 1 MB file whose page expanded to 1 GiB took 2
# GiB of memory to read, and one of 32 MB would have taken the machine's (a real page's content, a font, is some
# megabytes at most; pdfminer does not expand images)
MAX_INFLATED_STREAM = 256 << 20
# a compressed part that expands past INFLATE_RATIO_FROM and more than MAX_INFLATE_RATIO times is a decompression
# bomb: a 1 MB .docx whose part expanded to 1 GiB took 2 GiB of memory and 30 s before the XML parser gave up on it, a
# 150 KB PDF whose page expanded to 100 MB of drawing operators was still being read after minutes. Smaller parts
# may compress better than that and be ordinary: a mostly empty 4,000-row table (2.9 MB of XML, 138 times), a
# screenshot stored as a BMP (6.2 MB, 212 times), a scanned page's one-bit image inline in its content (1 MB, 102
# times); a bomb worth the name expands a thousand times and more.
MAX_INFLATE_RATIO = 100
INFLATE_RATIO_FROM = 64 << 20


def decompression_bomb(packed: int, size: int) -> str | None:
    """How a compressed part of ``packed`` bytes that expands to ``size`` (or more) is a decompression bomb: it
    expands past ``MAX_INFLATE_RATIO`` times; None when it does not."""
    if size > INFLATE_RATIO_FROM and size > MAX_INFLATE_RATIO * max(packed, 1):
        return f"expands from {packed:,} bytes to {size:,} or more (over {MAX_INFLATE_RATIO} times)"
    return None


# the zip packages from-files reads, by their mimetype part: the suffix to give one named as another kind of file
PACKAGE_SUFFIXES = {"application/epub+zip": ".epub", "application/vnd.oasis.opendocument.text": ".odt",
                    "application/vnd.oasis.opendocument.presentation": ".odp",
                    "application/vnd.oasis.opendocument.spreadsheet": ".ods"}
OLE = b"\xd0\xcf\x11\xe0"  # how an OLE (Compound File) file starts: an old .doc or .ppt, or an encrypted .docx or .pptx


def not_office_file(path: Path, e: Exception, app: str, suffix: str, old: str) -> str:
    """Why python-docx or python-pptx (``e``) cannot open a file meant to be ``app``'s ("Word") of ``suffix`` (".docx";
    ``old``, ".doc", its binary format's): what the file is, by its first bytes, and what to do with it."""
    import zipfile

    kind, convert = f"{app} ({suffix}) file", f"`soffice --convert-to {suffix[1:]}`"
    with open(path, "rb") as f:
        head = f.read(8)
    if not head:
        return f"an empty file (0 bytes), not a {kind}"
    if head.startswith(OLE):  # not a zip: Office stores a password-protected file, like an old binary one, in an OLE file
        return (f"not a readable {kind} (an OLE file: a password-protected {suffix}, or an old {old} renamed); "
                f"remove the password, or save it as {suffix}, and ingest the result")
    if head.startswith(b"%PDF"):
        return f"a PDF file, not a {kind}; rename it to .pdf"
    if head.startswith(b"{\\rtf"):
        return f"an RTF file, not a {kind}; rename it to .rtf"
    if zipfile.is_zipfile(path):
        try:
            with zipfile.ZipFile(path) as z:
                mimetype = z.read("mimetype") if "mimetype" in z.namelist() else b""
        except Exception as damaged:  # the zip reader raises many types on a damaged member (a bad CRC, bad data)
            return f"not a readable {kind}: its zip archive is damaged ({error_text(damaged)})"
        if mimetype == b"application/epub+zip":
            return f"an EPUB e-book, not a {kind}; rename it to .epub"
        if mimetype.startswith(b"application/vnd.oasis.opendocument"):
            declared = mimetype.decode("ascii", "replace")
            own = PACKAGE_SUFFIXES.get(declared)  # one from-files reads under its own suffix
            todo = f"rename it to {own}" if own else f"save it as {suffix} (in LibreOffice, or {convert})"
            return f"an OpenDocument file ({declared}), not a {kind}; {todo}"
        if isinstance(e, ValueError) and "content type is" in str(e):  # another Office file (a workbook, ...)
            return f"not a {app} ({suffix}) document: {str(e).split(', ', 1)[-1]}"
    elif head.startswith(b"PK"):
        return f"not a readable {kind}: its zip archive is truncated or damaged"
    else:
        return f"not a {kind}: a {suffix} is a zip archive, and this is none"
    return f"not a readable {kind} ({error_text(e)}); the file may be truncated or damaged"


def zip_bomb(path: Path) -> str | None:
    """Why an Office file's zip is refused as a decompression bomb (its parts' sizes, as its directory gives them:
    a part that expands past what it declares is a damaged one to the zip reader), or None; None too for a file that
    is no zip (its reader says what it is)."""
    import zipfile

    try:
        with zipfile.ZipFile(path) as z:
            parts = z.infolist()
    except (zipfile.BadZipFile, OSError, ValueError):
        return None
    for part in parts:
        if (why := decompression_bomb(part.compress_size, part.file_size)) is not None:
            return f"a zip bomb: its part {part.filename} {why}; not read"
    if (total := sum(part.file_size for part in parts)) > MAX_INFLATED:
        return (f"its parts expand to {total:,} bytes, more than the {MAX_INFLATED >> 20:,} MiB a file's reader may "
                "hold; not read")
    return None



def error_text(e: Exception) -> str:
    """An exception as "Type: message", or its type alone when the message is empty (pdfminer's often are)."""
    return f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
