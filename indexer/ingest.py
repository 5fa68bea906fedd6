"""Documents -> a JSONL corpus: text, Markdown, HTML, PDF, Word, PowerPoint, EPUB, OpenDocument (text, presentation
and spreadsheet), Excel, CSV, e-mail and RTF files and directories, chunked into passages.

    spanseek corpus from-files DOCS/ notes.md page.html --out corpus.jsonl [--max-tokens 200 --overlap 40]
        [--tokenizer model|words] [--id-field KEY] [--meta KEY=VALUE ...] [--strict]

Directories are walked recursively (hidden files and folders skipped) for ``.txt``, ``.md``/``.markdown``,
``.html``/``.htm``, ``.pdf``, ``.docx``, ``.pptx``, ``.epub``, ``.odt``, ``.odp``, ``.fodt``, ``.fodp``,
``.xlsx``/``.xlsm``, ``.ods``/``.fods``, ``.csv``, ``.tsv``, ``.eml`` and ``.rtf`` files; other files in them are
ignored, while a file named on the command line must have one of those suffixes. Each file is one document:

- **id**: its path relative to the directory given (``guide/install.md``), or, for a file given by name, its path
  as given, in Unicode's composed form (NFC: ``café.md`` whether the file system spells the accent as one character
  or, as macOS's HFS+, a combining one); with ``id_field`` the value of that metadata field instead, as the file writes
  it (front matter's ``id: 1.10`` is "1.10", not YAML's 1.1; a file without it is an error).
- **title**: Markdown front matter's ``title`` (as written: ``title: 2024`` is "2024"), else the first heading
  (Markdown ``#``, HTML ``<title>`` then ``<h1>`` then any; PDF: see ``indexer.documents``, Word: ``indexer.word``),
  else the file name without its suffix.
- **paragraphs**: text files split at blank lines; Markdown is rendered (markdown-it-py) and split at block
  elements (p, li, h1-h6, div, pre, tr, ...); HTML is reduced to its main content by trafilatura (navigation, headers,
  footers, asides, cookie banners and other boilerplate dropped) and split at its paragraphs, headings, list items,
  table rows and code blocks, or, when trafilatura finds no main content, split at block elements like Markdown;
  script, style, template and the like are always dropped, as are elements a browser hides (the ``hidden``
  attribute but "until-found", an inline ``display: none``; but for a tab's panel, ``role="tabpanel"``, and a page
  whose text is mostly hidden so, which its scripts show) and text marked deleted (``<del>``, as Word's tracked
  deletions; ``<ins>`` and struck ``<s>`` text read); text around a block inside another (a <p> in a
  <blockquote>) reads in the page's order, before and after it. In Markdown and HTML:

  - a **table row** is one paragraph, each cell after its column's name in the header row: "Flag: --max-tokens;
    Default: 200; What: passage budget". The header row (its cells all <th>, or in <thead>) is no paragraph of its
    own while rows follow it; a cell whose column has no name stands alone, an empty cell is left out, and a table
    without a header row reads its cells spaced. In a page's main content (trafilatura) only <th> cells name columns,
    those of the first row that has them; a <thead> of <td> cells reads as a row. A header cell spanning columns
    (colspan) names each of them ("Tide: high; Tide: 06:10"), unless it is the only name of its row (a title over
    the table), which names the first column only. A table in a list item, whose rows trafilatura does not keep,
    reads its cells spaced in the item's text, and a table in the cell of a table with header cells in that cell's
    text, as Word's does (one in a cell of a page's layout table, which has none, reads as a table).
    A body cell spanning rows (rowspan) reads in each row it spans (once
    per row, whatever columns it spans), so each row reads whole as a passage, as Word's do; so does a header cell
    spanning rows of the body (a row's label, <th rowspan> beside cells), not one spanning header rows.
    A span reaches no further than the table: a cell's columns end at the table's width (the most cells a row of it
    has), its rows at the table's last.
  - a **code block** (``<pre>``, a fenced or indented Markdown block) keeps its lines: one paragraph, its lines one
    "\\n" apart, indented as written (tabs as four spaces, less what every line shares), the spacing inside a line
    collapsed, blank lines dropped (a blank line reads as a paragraph break,
    which an answer never crosses); chunking cuts one over the budget after a line, and a passage that starts with
    an indented line keeps its indentation. Every ``<pre>`` of a page reads as code, whether or not its text looks
    like code to trafilatura (a configuration file, a shell session).
  - a **heading** opens a section, and each paragraph has ``section``, the heading path ("Install > Linux"): a
    heading of level n closes the open ones of level n and deeper; its own path includes it; text before the first
    heading has none, and a heading followed at once by another joins that one's paragraph ("Install\n\nLinux": its
    words stay in the text). Unlike a Word file's, the path leaves out the title heading (the first heading, when it
    is the document's only h1 and front matter names no other title): it would begin every path, and a hit carries
    the title. In trafilatura's main content the sections come from the headings it keeps (a short page it reads as
    paragraphs only has none).

  PDF files: ``indexer.documents`` (and ``indexer.pdf_layout``); Word files: ``indexer.word``, whose table rows read
  as above; PowerPoint files: ``indexer.slides``; EPUB e-books: ``indexer.epub``, each document of the book's spine
  read as an HTML file's blocks are; OpenDocument files (packaged or flat): ``indexer.opendocument``, text as Word files are,
  presentations as PowerPoint files are; spreadsheets and tables: ``indexer.spreadsheet``, a paragraph a row
  ("Item: Tea; Price: 3.2"); e-mail messages: ``indexer.mail``, the subject the title, the text part (or the HTML
  part, as an HTML file) the body, attachments named in ``meta`` and not read; RTF files: ``indexer.rtf``, as Word
  files are. Then ``indexer.chunking`` makes passages of them, never mixing two pages of a PDF, two slides, two
  chapters, two sections or two rows of a sheet.
- **meta**: ``source`` (the path), Markdown front matter (YAML), HTML ``<meta name|property=... content=...>``
  tags and a page's ``author`` and ``date`` (its byline as trafilatura reads it; the date ISO-8601), a PDF's page count (``pages``) or a deck's slide count (``slides``),
  an e-book's ``title``, ``author``, ``language`` and chapter count (``chapters``), an OpenDocument file's ``title``, ``author`` and ``language`` (and a
  presentation's ``slides``), a workbook's ``title``, ``author`` and ``sheets``, a message's ``from``, ``to``, ``cc``, ``date``
  and ``attachments``, and the fixed ``extra_meta`` given; all of it is stored in the index and
  comes back with hits. Passages of a PDF carry their ``page`` (and ``page_end`` when a paragraph runs onto the
  next page, and ``section``, the path of its bookmarks, where it has an outline), those of a PowerPoint file or an OpenDocument presentation their ``slide`` and ``section`` (the slide's
  title), those of an e-book their ``chapter`` and ``section``, those of a spreadsheet their ``sheet`` and ``row``, those of a Word, OpenDocument, Markdown or HTML file their ``section`` (the heading path, "Intro > Scope"); hits return them in ``meta`` too.

Text files are read as UTF-8 (a BOM is allowed; any line ends), or as UTF-16 or UTF-32 when they begin with that
encoding's byte order mark; an HTML page that is not UTF-8 in the encoding its ``<meta charset>`` declares. A file that is binary (has NUL bytes, anywhere), not valid
UTF-8, or without text, a PDF without a text layer, a PDF, Word or PowerPoint file that cannot be read (damaged,
truncated, encrypted, another kind of file renamed), an EPUB or OpenDocument file that cannot be read (the same,
or DRM-protected, or password-protected), an old Word ``.doc``, PowerPoint ``.ppt`` or Excel ``.xls`` file in a folder
(``UNREAD``), and a file or folder
this process may not read are skipped with a warning naming it and the reason, and the other files are read
(``strict`` makes a skip an error). Errors naming the file (and the line): front matter that is not valid YAML, that uses aliases (they
can expand without bound), gives a key twice, holds a number JSON cannot store (``.nan``, ``.inf``) or a ``title``
that is a list or mapping; a document the corpus reader would refuse (``core.io.document_from_json``: metadata over
16 KiB, a lone surrogate); duplicate ids. Keys, dates and numbers in forms JSON has not (``01234``, ``1:30``) in
front matter are kept as written. The corpus is written atomically.
"""

from __future__ import annotations

import codecs
import errno
import itertools
import logging
import os
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePath
from typing import Any

from tqdm.auto import tqdm

from spanseek.core.ids import new_id
from spanseek.core.io import (
    CorpusError,
    Document,
    check_writable,
    document_from_json,
    document_json,
    has_text,
    read_head,
    write_corpus,
)
from spanseek.indexer.chunking import ChunkOptions, TokenCounter, chunk_sections, word_token_counter
from spanseek.indexer.documents import extract_pdf
from spanseek.indexer.epub import extract_epub
from spanseek.indexer.extracted import Extracted, IngestError, Unreadable
from spanseek.indexer.mail import extract_eml
from spanseek.indexer.markup import extract_html, extract_markdown, extract_text, text_codec
from spanseek.indexer.opendocument import extract_odp, extract_odt
from spanseek.indexer.rtf import extract_rtf
from spanseek.indexer.slides import extract_pptx
from spanseek.indexer.spreadsheet import extract_csv, extract_ods, extract_xlsx
from spanseek.indexer.word import extract_docx

log = logging.getLogger(__name__)
# reads one file (its path, its id, the options) as a Document, or the reason it is skipped (``read_document``'s)
Reader = Callable[[Path, str, "IngestOptions"], "Document | str"]

FORMATS = {".txt": "text", ".text": "text", ".md": "markdown", ".markdown": "markdown", ".html": "html",
           ".htm": "html", ".pdf": "pdf", ".docx": "word", ".pptx": "powerpoint", ".epub": "epub",
           ".odt": "opendocument", ".odp": "opendocument presentation", ".fodt": "opendocument",
           ".fodp": "opendocument presentation", ".xlsx": "excel", ".xlsm": "excel", ".ods": "opendocument spreadsheet",
           ".fods": "opendocument spreadsheet", ".csv": "csv", ".tsv": "csv", ".eml": "e-mail",
           ".rtf": "rtf"}
# from-files' suffixes as messages list them
LISTED = "/".join(FORMATS)
# formats read from bytes, not decoded as UTF-8 text
_BINARY = {"pdf": extract_pdf, "word": extract_docx, "powerpoint": extract_pptx, "epub": extract_epub,
           "opendocument": extract_odt, "opendocument presentation": extract_odp, "excel": extract_xlsx,
           "opendocument spreadsheet": extract_ods, "e-mail": extract_eml,
           "rtf": extract_rtf}
# document formats that are not read, each with what to do instead: a folder's files of these are named as skipped
UNREAD = {".doc": "an old Word (.doc) file, which from-files does not read; save it as .docx (in Word, or "
                  "`soffice --headless --convert-to docx FILE`) and ingest the result",
          ".ppt": "an old PowerPoint (.ppt) file, which from-files does not read; save it as .pptx (in PowerPoint, "
                  "or `soffice --headless --convert-to pptx FILE`) and ingest the result",
          ".xls": "an old Excel (.xls) file, which from-files does not read; save it as .xlsx (in Excel, or "
                  "`soffice --headless --convert-to xlsx FILE`) and ingest the result"}


def parse_meta(items: Sequence[str], flag: str = "--meta") -> dict[str, str]:
    """``KEY=VALUE`` items (``--meta``, a query's ``meta``) as metadata; ValueError naming ``flag`` for an item
    without ``=`` or with a blank key, and for a key given twice (the last would silently win)."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"{flag} takes KEY=VALUE, got {item!r}")
        if key in out:
            raise ValueError(f"{flag} {key} given twice ({out[key]!r} and {value!r}); give each key once")
        out[key] = value
    return out


@dataclass(frozen=True)
class IngestOptions:
    """How files become documents: passage sizes, where ids come from, fixed metadata, strictness, links."""

    chunk: ChunkOptions = ChunkOptions()
    id_field: str | None = None
    extra_meta: dict[str, Any] = field(default_factory=dict)
    strict: bool = False
    follow_links: bool = False  # read the files links in a folder lead to outside it (``_walk``)


@dataclass
class IngestReport:
    """What ``from_files`` wrote and what it skipped (path, reason)."""

    documents: int = 0
    passages: int = 0
    skipped: list[tuple[str, str]] = field(default_factory=list)


# byte order marks of the UTF encodings other than UTF-8, longest first (UTF-32 LE's begins with UTF-16 LE's)
_BOMS = ((codecs.BOM_UTF32_LE, "utf-32"), (codecs.BOM_UTF32_BE, "utf-32"), (codecs.BOM_UTF16_LE, "utf-16"),
         (codecs.BOM_UTF16_BE, "utf-16"))
# an HTML page's declared encoding: <meta charset="..."> or <meta http-equiv="Content-Type" content="...; charset=...">
_HTML_CHARSET = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?\s*([A-Za-z0-9._:-]+)""", re.IGNORECASE)
# labels browsers read as another encoding (the WHATWG Encoding Standard): Latin-1 and ASCII pages are windows-1252
_HTML_ALIASES = {"iso-8859-1": "cp1252", "latin1": "cp1252", "us-ascii": "cp1252", "ascii": "cp1252"}


def _nul_problem(data: str | bytes, what: str) -> str:
    """Why a file holding a NUL is skipped: binary, or text with binary data in it (the offset of its first NUL)."""
    at = data.index("\x00") if isinstance(data, str) else data.index(b"\x00")
    return f"binary file (NUL {what})" if at < 8192 else f"binary data in the text (a NUL at offset {at:,})"


def _decode(path: Path, html: bool = False) -> tuple[str | None, str]:
    """(text, "") or (None, why the file is skipped). UTF-8 (a BOM allowed), UTF-16 or UTF-32 with their BOM (what
    Windows editors save as "Unicode"), and for an ``html`` page the encoding its first 1,024 bytes declare."""
    data = path.read_bytes()
    for bom, name in _BOMS:
        if data.startswith(bom):
            try:
                text = data.decode(name)
            except UnicodeDecodeError as e:
                return None, f"not valid {name.upper()} after its byte order mark ({e.reason} at offset {e.start})"
            return (None, _nul_problem(text, "characters")) if "\x00" in text else (text, "")
    if b"\x00" in data:  # anywhere: past the start, the HTML and Markdown readers turned one into U+FFFD, text kept it
        return None, _nul_problem(data, "bytes")
    try:
        return data.decode("utf-8-sig"), ""
    except UnicodeDecodeError as e:
        why = f"not UTF-8 (byte 0x{data[e.start]:02x} at offset {e.start}); convert it to UTF-8 first"
    declared = _HTML_CHARSET.search(data[:1024]) if html else None
    if declared is None:
        return None, why
    label = declared.group(1).decode("ascii").lower()
    try:
        codec = text_codec(_HTML_ALIASES.get(label, label))
    except LookupError:
        return None, f"{why} (it declares charset {label!r}, which is no character encoding this reader knows)"
    try:
        return data.decode(codec), ""
    except UnicodeDecodeError as e:
        if codec == "cp1252":  # the five bytes windows-1252 leaves undefined: Latin-1's control characters
            return data.decode("latin-1"), ""
        return None, f"not valid {label} as it declares (byte 0x{data[e.start]:02x} at offset {e.start})"


# a FIFO or a device (a link to /dev/zero) is never read: its reading may not end
_NOT_REGULAR = "not a regular file (a FIFO, a socket or a device); not read"


def _outside(link: Path, real_root: str) -> str | None:
    """Why the link ``link`` is not read: its file is outside the folder whose real path is ``real_root``; None
    when it is inside (or not a link)."""
    if not link.is_symlink():
        return None
    target = os.path.realpath(link)
    if os.path.commonpath([target, real_root]) == real_root or os.path.isdir(target):  # a folder is never followed
        return None
    followed = " (--follow-links reads it)" if os.path.isfile(target) else ""  # (a FIFO or a device never is)
    return f"a link to {target}, outside the folder {real_root}; not read{followed}"


def _dead_link(link: Path) -> str | None:
    """Why the link ``link`` leads to no file: to a name that does not exist, round a loop of links back to itself,
    or through a folder this process may not read; None when it leads to something."""
    try:
        os.stat(link)
        return None
    except OSError as e:
        if e.errno != errno.ELOOP:
            return f"a link to {os.readlink(link)}, which " + (
                "does not exist; not read" if e.errno == errno.ENOENT else f"cannot be reached ({e.strerror}); not read")
    chain, at, seen = [link.name], link, {link}
    while len(chain) <= 40:  # the kernel's own limit on links followed is 40
        at = Path(os.path.normpath(at.parent / os.readlink(at)))
        chain.append(os.path.relpath(at, link.parent))
        if at in seen or not at.is_symlink():
            break
        seen.add(at)
    return f"a link in a loop of links ({' -> '.join(chain)}), which leads to no file; not read"


def _walk(root: Path, problems: list[tuple[Path, str]], follow_links: bool = False) -> list[Path]:
    """The files of a format ``FORMATS`` knows under ``root``, hidden files and folders left out, sorted; links to
    folders are not followed, and a link to a file is read when that file is inside ``root`` (any file with
    ``follow_links``). A link to a file outside ``root``, a link to nothing (or round a loop of links), a folder that
    cannot be read, and a FIFO or device named like a file to read are added to ``problems``. The folders to read are
    kept on a list, not in Python's call stack: a tree of any depth is walked (as deep as the system's paths go; a
    folder past that is named as unreadable)."""
    found: list[Path] = []
    walked: set[tuple[int, int]] = set()  # the folders read, by (device, inode): a bind mount is read once
    real_root = os.path.realpath(root)
    folders = [root]  # those still to read, the next one last: sorted order, depth first
    while folders:
        folder = folders.pop()
        try:
            stat = os.stat(folder)
            with os.scandir(folder) as listing:
                entries = sorted(listing, key=lambda entry: entry.name)
        except OSError as e:
            problems.append((Path(e.filename or folder), f"unreadable folder ({e.strerror or e})"))
            continue
        if (stat.st_dev, stat.st_ino) in walked:
            continue
        walked.add((stat.st_dev, stat.st_ino))
        subfolders = []
        for entry in (e for e in entries if not e.name.startswith(".")):
            if _is_dir(entry):  # a link to a folder is not followed
                if not entry.is_symlink():
                    subfolders.append(folder / entry.name)
                continue
            p = folder / entry.name
            suffix = p.suffix.lower()
            if suffix not in FORMATS and suffix not in UNREAD:
                continue
            if entry.is_symlink() and (why := _dead_link(p) or (
                    None if follow_links else _outside(p, real_root))) is not None:
                problems.append((p, why))
            elif suffix in UNREAD:
                if entry.is_file():
                    problems.append((p, UNREAD[suffix]))
            elif entry.is_file():
                found.append(p)
            else:
                problems.append((p, _NOT_REGULAR))
        folders += reversed(subfolders)
    return sorted(found)


def _is_dir(entry: os.DirEntry[str]) -> bool:
    """Whether a folder's entry is a folder or a link to one (False for a link that leads nowhere)."""
    try:
        return entry.is_dir()
    except OSError:
        return False


def _files(paths: Sequence[str | Path], problems: list[tuple[Path, str]] | None = None,
           follow_links: bool = False) -> Iterator[tuple[Path, str]]:
    """(file, its relative id) for every input file, in a stable order; each file once. Folders that cannot be read,
    links to files outside their folder (unless ``follow_links``) and a file reached a second time (a link to it
    beside it, or it given twice) go to ``problems``: of one folder's paths to one file, the file's own keeps the id
    whichever sorts first. An id is in Unicode's composed form (NFC), as PUT /files/{name} makes a name: file
    systems spell "café" with one character or with a combining accent (macOS's HFS+), and a file is one id
    whichever."""
    seen: dict[tuple[int, int] | str, list[Path]] = {}  # a file (``_identity``): the paths it was read by
    problems = problems if problems is not None else []
    for arg in paths:
        root = Path(arg)
        if root.is_dir():
            pairs = [(p, p.relative_to(root).as_posix()) for p in _walk(root, problems, follow_links)]
        elif root.is_file():
            if root.suffix.lower() in UNREAD:
                raise IngestError(f"{root}: {UNREAD[root.suffix.lower()]}")
            if root.suffix.lower() not in FORMATS:
                raise IngestError(f"{root}: unsupported file type {root.suffix or '(no suffix)'!r}; "
                                  f"from-files reads {', '.join(sorted(FORMATS))}")
            pairs = [(root, root.as_posix())]
        elif root.exists():
            raise IngestError(f"{root}: {_NOT_REGULAR}")
        else:
            raise IngestError(f"{root}: no such file or directory")
        kept = set()
        for p, _ in sorted(pairs, key=lambda pair: pair[0].is_symlink()):  # the file itself before links to it
            real = _identity(p)
            if (first := _read_already(p, seen.get(real, []))) is not None:
                problems.append((p, f"the same file as {first}, which is read; not read twice"))
                continue
            seen.setdefault(real, []).append(p)
            kept.add(p)
        for p, rel in pairs:
            if p in kept:
                yield p, new_id(rel)


def _read_already(path: Path, read: list[Path]) -> Path | None:
    """Which of ``read``, the paths a file (``_identity``) was read by, ``path`` leads to as well (a link to it, or it
    given twice); None for a hard link to it, a file of its own under its own name (as every other program takes it:
    a folder copied with ``cp -al``). Asked only of a file met again: its real path costs a system call per folder."""
    real = os.path.realpath(path) if read else None
    return next((p for p in read if os.path.realpath(p) == real), None)


def _identity(path: Path) -> tuple[int, int] | str:
    """What tells one file from another: its device and inode (one system call, whatever the path's depth), or its
    real path when it cannot be asked (gone since the walk: it is refused when read)."""
    try:
        stat = os.stat(path)
    except OSError:
        return os.path.realpath(path)
    return stat.st_dev, stat.st_ino


def extract_file(path: Path) -> Extracted:
    """A file's text by its suffix; Unreadable with the reason when it is skipped (binary, not UTF-8, damaged)."""
    fmt = FORMATS[path.suffix.lower()]
    if fmt in _BINARY:
        return _BINARY[fmt](path)
    source, why = _decode(path, html=fmt == "html")
    if source is None:
        raise Unreadable(why)
    if fmt == "html":
        return extract_html(source, str(path))
    if fmt == "markdown":
        return extract_markdown(source, str(path))
    if fmt == "csv":
        return extract_csv(source, path)
    return extract_text(source)


def _out_of_memory(error: BaseException | None) -> bool:
    """Whether ``error`` is memory running out: a MemoryError, or an error of lxml whose last logged error is libxml2's
    ERR_NO_MEMORY (libxml2 reports an allocation that failed as an XPath error, "unknown error", or a parse error;
    the log holds the thread's earlier errors too)."""
    last = getattr(getattr(error, "error_log", None), "last_error", None)
    return isinstance(error, MemoryError) or getattr(last, "type_name", None) == "ERR_NO_MEMORY"


def read_document(path: Path, rel: str, count: TokenCounter, opts: IngestOptions) -> Document | str:
    """One file as a Document, or the reason it is skipped (unreadable, binary, not UTF-8, damaged, no text)."""
    try:
        with open(path, "rb"):  # a file the process may not read is said so, not taken for a damaged one
            pass
        ext = extract_file(path)
    except Unreadable as e:
        if _out_of_memory(e.__context__):  # memory ran out, which a reader took for a damaged file
            raise MemoryError(f"{rel}: memory ran out while reading it") from None
        return str(e)
    except RecursionError:  # a reader's library that recurses into a file's nesting (the readers' own do not)
        return "nested too deeply to read (its elements inside one another past Python's recursion limit)"
    except OSError as e:
        return f"unreadable ({e.strerror or e})"
    except Exception as e:
        if _out_of_memory(e):  # lxml's error for memory that ran out inside libxml2 (trafilatura's XPath searches)
            raise MemoryError(f"{rel}: memory ran out while reading it") from None
        raise
    metas = ext.paragraph_meta or [{}] * len(ext.paragraphs)
    passages = chunk_sections(ext.paragraphs, metas, count, opts.chunk)
    if not any(has_text(text) for text, _ in passages):  # nothing but invisible characters counts as no text
        return "no text"
    meta = {"source": rel, **ext.meta, **opts.extra_meta}
    doc_id: Any = rel
    if opts.id_field is not None:  # a number or a boolean as the file writes it (``id: 1.10`` is "1.10", not "1.1")
        doc_id = meta.get(opts.id_field) if opts.id_field in opts.extra_meta else ext.written.get(
            opts.id_field, meta.get(opts.id_field))
        if doc_id is None or isinstance(doc_id, (dict, list)) or not str(doc_id).strip():
            raise IngestError(f"{path}: no usable {opts.id_field!r} field for the document id "
                              f"(its metadata has {', '.join(sorted(meta)) or 'nothing'})")
    doc = Document(id=str(doc_id), title=ext.title or PurePath(rel).stem, paragraphs=tuple(p for p, _ in passages),
                   meta=meta, passage_meta=tuple(m for _, m in passages) if ext.paragraph_meta else ())
    try:  # the corpus reader's own checks (no NaN, no lone surrogate, metadata under 16 KiB): index build reads it
        document_from_json(document_json(doc), str(path))
    except CorpusError as e:
        raise IngestError(str(e)) from None
    return doc


def iter_documents(paths: Sequence[str | Path], count: TokenCounter = word_token_counter,
                   opts: IngestOptions = IngestOptions(), report: IngestReport | None = None,
                   progress: bool = False, read: Reader | None = None) -> Iterator[Document]:
    """Documents of the files under ``paths``; skipped files (and folders that cannot be read) are logged and listed
    in ``report``. ``progress``: a bar of the files read, naming the one being read (a long PDF takes a while).
    ``read``: what reads a file (``read_process.ReadProcess.read``, in a process whose memory is capped); default
    ``read_document`` with ``count``, here."""
    report = report if report is not None else IngestReport()
    ids: dict[str, Path] = {}
    problems: list[tuple[Path, str]] = []

    def skip(path: Path, why: str) -> None:
        if opts.strict:
            raise IngestError(f"{path}: {why}")
        log.warning("skipped %s: %s", path, why)
        report.skipped.append((str(path), why))

    files = list(_files(paths, problems, opts.follow_links))  # the paths only: counted for the bar's total
    bar = tqdm(total=len(files), desc="read", unit="file", disable=not progress, leave=False)
    try:
        for path, rel in itertools.chain(files, [(None, "")]):
            while problems:  # the folders that could not be read
                skip(*problems.pop(0))
            if path is None:
                break
            bar.set_postfix_str(rel if len(rel) <= 40 else "..." + rel[-37:])
            doc = read_document(path, rel, count, opts) if read is None else read(path, rel, opts)
            bar.update()
            if isinstance(doc, str):
                skip(path, doc)
                continue
            if doc.id in ids:
                raise IngestError(f"{path} and {ids[doc.id]} have the same document id {doc.id!r}")
            ids[doc.id] = path
            report.documents += 1
            report.passages += len(doc.paragraphs)
            yield doc
    finally:
        bar.close()


def from_files(paths: Sequence[str | Path], out: str | Path, count: TokenCounter = word_token_counter,
               opts: IngestOptions = IngestOptions(), progress: bool = False, read: Reader | None = None) -> IngestReport:
    """Write the documents of ``paths`` as a JSONL corpus at ``out`` (atomically); returns what was done.

    ``count`` gives the tokens of each word: one per word by default; ``chunking.model_token_counter(tokenizer)``
    counts the model's tokens (what ``spanseek corpus from-files`` uses unless told ``--tokenizer words``). ``read``:
    as ``iter_documents``'s (``spanseek corpus from-files`` reads in a process capped at ``--read-memory-bytes``).
    """
    report = IngestReport()
    target = Path(out).resolve()
    if target.is_dir():  # named before the files are read (it was met at the end: "out: Is a directory")
        raise IngestError(f"--out {out}: a directory; give the corpus file to write ({Path(out) / 'corpus.jsonl'})")
    check_writable(out)
    if any(p.resolve() == target for p, _ in _files(paths, follow_links=opts.follow_links)):  # one given, or in a folder
        raise IngestError(f"{out} is one of the files to read; write the corpus somewhere else")
    docs = iter_documents(paths, count, opts, report, progress, read)
    first = next(docs, None)  # nothing is written (an existing corpus at ``out`` is kept) when there is no document
    if first is not None:
        write_corpus(out, itertools.chain([first], docs))
    if report.documents == 0:
        raise IngestError(f"no documents in {', '.join(map(str, paths))} (from-files reads "
                          f"{', '.join(sorted(FORMATS))}; skipped: {len(report.skipped)})")
    return report


def corpus_problem(path: str | Path) -> str | None:
    """Why ``path`` cannot be read as a JSONL corpus, with the command that makes one; None when it looks like one.

    Directories, text/Markdown/HTML files and SQuAD-format files are recognised (by their type, suffix, or the
    first 64 KB of their content), so ``index build`` can point at ``corpus from-files`` or ``corpus from-squad``.
    """
    path = Path(path)
    stem = path.name.removesuffix(".gz").rsplit(".", 1)[0] if path.is_file() else path.name
    out = (path.parent / f"{stem or 'corpus'}.jsonl").as_posix()
    then = f"; then index it with `spanseek index build --corpus {out} ...`"
    if path.is_dir():
        return (f"{path} is a directory, not a JSONL corpus; make one of its "
                f"{LISTED} files with `spanseek corpus from-files {path} --out {out}`{then}")
    if not path.is_file():
        return f"corpus {path} does not exist"
    suffix = Path(path.name.lower().removesuffix(".gz")).suffix
    if suffix in FORMATS:
        article = "an" if FORMATS[suffix][0] in "aeiou" else "a"  # (an epub, an opendocument file)
        return (f"{path} is {article} {FORMATS[suffix]} file, not a JSONL corpus; "
                f"convert it with `spanseek corpus from-files {path} --out {out}`{then}")
    try:
        head = read_head(path)  # a leading BOM dropped
    except CorpusError as e:
        return str(e)  # names the file, and the line of bytes that are not UTF-8
    if re.search(r'"data"\s*:\s*\[', head) and re.search(r'"(context|qas)"\s*:', head):
        return (f"{path} is a SQuAD-format file, not a JSONL corpus; convert it with "
                f"`spanseek corpus from-squad {path} --out {out}`{then}")
    if head.strip() and not head.lstrip().startswith("{"):
        return (f"{path} is not a JSONL corpus (one JSON object a line: {{\"id\", \"title\", \"paragraphs\"}}); "
                f"`spanseek corpus from-files` converts {LISTED} files and directories of them, "
                "`spanseek corpus from-squad` SQuAD-format files")
    return None
