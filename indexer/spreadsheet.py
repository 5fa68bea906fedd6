"""Spreadsheets and tables -> one paragraph a row, for ``indexer.ingest``: Excel workbooks (.xlsx, .xlsm),
OpenDocument spreadsheets (.ods, and flat .fods) and delimited text (.csv, .tsv).

    spanseek corpus from-files prices.xlsx stock.ods orders.csv DOCS/ --out corpus.jsonl

Each row of a sheet is one paragraph, and so one passage of its own (a row longer than a passage is cut into
windows, as any paragraph is): its cells after their column's name, as a table row of every other format reads
(``extracted.row_text``: "Item: Tea; Price: 3.2; Stock: 40"), with the sheet's name before it where a workbook has
more than one sheet shown ("Prices 2024 — Item: Tea; ..."). A passage of one row keeps a question about a cell with
the row's other cells and its column's name, and with no other row's values for the phrase model to take for its
answer; its metadata has its ``sheet`` and ``row`` (the row's number as the application shows it, 1 for the first;
a CSV file's first record is row 1), as a PDF's passages have their ``page``. A sheet's first row (its first with a
value) names the columns when rows follow it and each of its cells is text (not a number, date or truth value), and
is then no paragraph itself; otherwise every row reads its cells spaced. A first row of one cell over a wider row,
the cell at the table's left edge (or left of it), is a title over the table ("Price list 2024"): a paragraph of its
own, and the row under it is the one that may name the columns; a one-cell first row further right names its column
(the "Score" over B of a table whose A holds the rows' names).

A cell reads as the application shows it where that is text the phrase model can read: a formula's cached value (the
value the application computed when it saved the file; a formula never computed reads as an empty cell, as does a
formula's error such as ``#DIV/0!``), a number in its shortest form (``3.2``, ``40``), a date or time in ISO 8601
(``2024-03-05``, ``2024-03-05 14:30``, ``14:30``), a percentage with its sign (``12.5%``), a truth value as
``TRUE``/``FALSE``. Hidden sheets, rows and columns (and a workbook's charts) are left out. A file's first
``MAX_ROWS`` rows and ``MAX_CELLS`` cells are read, the rest left out with a warning naming the file and the sheet
and row where reading stopped.

A workbook's parts are read under the limits of every zipped format (``indexer.packaged``: zip bombs, entity
expansion, nesting), its shared strings and sheets streamed; a damaged one is ``Unreadable`` naming the part (and, for XML
that is not well-formed, the line). A CSV file is text (``indexer.ingest`` decodes it: UTF-8 with or without a BOM,
UTF-16 or UTF-32 with theirs); its delimiter (comma, semicolon, tab or bar: ``_delimiter``) is told from its first
64 KiB (a .tsv's is a tab), cells are quoted with double quotes as Excel writes them, and a quoted cell that is
never closed or a stray quote is named with the line its record starts on.
"""

from __future__ import annotations

import csv
import io
import itertools
import logging
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from spanseek.indexer.extracted import Extracted, Unreadable, error_text, row_text
from spanseek.indexer.opendocument import _OFFICE, _STYLE, _TABLE, _body, _int, _OdfText, _rows
from spanseek.indexer.packaged import Package

log = logging.getLogger(__name__)

# the most rows and non-empty cells read of one file (all its sheets); the rest is left out, with a warning
MAX_ROWS = 100_000
MAX_CELLS = 1_000_000
# the widest sheet Excel and LibreOffice make: an OpenDocument row's cells past it (cells repeated further) are not read
MAX_COLUMNS = 16_384
XLSX_KIND = "Excel workbook (.xlsx) file"
ODS_KIND = "OpenDocument spreadsheet (.ods) file"
CSV_SAMPLE = 64 << 10  # the characters of a CSV file its delimiter is told from
CSV_DELIMITERS = ",;\t|"  # those it may have, the likeliest first
_DASH = " \u2014 "  # between a sheet's name and a row's text


@dataclass(frozen=True)
class Cell:
    """A non-empty cell: its column (0 first), its text, and whether it is text that may name a column (not a
    number, a date or a truth value)."""

    column: int
    text: str
    label: bool


Row = tuple[int, list[Cell]]  # a row's number as the application shows it (1 first) and its non-empty cells


def sheets_extracted(path: Path, sheets: Sequence[tuple[str, Iterable[Row]]], title: str | None,
                     meta: dict[str, Any]) -> Extracted:
    """A file's sheets (name, rows) as paragraphs, one a row with a value, each with its ``sheet`` and ``row``.
    Reading stops, with a warning naming the file and where, at ``MAX_ROWS`` rows or ``MAX_CELLS`` cells."""
    paragraphs: list[str] = []
    metas: list[dict[str, Any]] = []
    several = len(sheets) > 1
    rows = cells = 0
    stopped = False
    for name, sheet in sheets:
        names: dict[int, str] | None = None  # the columns' names, once a second row shows whether the first names them
        first: Row | None = None
        for number, found in sheet:
            if not found:
                continue
            if rows >= MAX_ROWS or cells + len(found) > MAX_CELLS:
                log.warning("%s: more than %s rows or %s cells; sheet %r from row %d on, and the sheets after it, are "
                            "left out", path, f"{MAX_ROWS:,}", f"{MAX_CELLS:,}", name, number)
                stopped = True
                break
            rows, cells = rows + 1, cells + len(found)
            if first is None:
                first = (number, found)
                continue
            if names is None and len(first[1]) == 1 < len(found) and first[1][0].column <= min(
                    c.column for c in found):  # a title over the table (not a column's name over its column B)
                _add(paragraphs, metas, name, first, {}, several)
                first = (number, found)
                continue
            if names is None:
                names = {c.column: c.text for c in first[1]} if all(c.label for c in first[1]) else {}
                if not names:
                    _add(paragraphs, metas, name, first, {}, several)
            _add(paragraphs, metas, name, (number, found), names, several)
        if first is not None and names is None:  # a sheet of one row, or one cut off after its first
            _add(paragraphs, metas, name, first, {}, several)
        if stopped:
            break
    return Extracted(title, paragraphs, meta, metas)


def _add(paragraphs: list[str], metas: list[dict[str, Any]], sheet: str, row: Row, names: dict[int, str],
         several: bool) -> None:
    number, cells = row
    text = row_text([c.text for c in cells], [names.get(c.column, "") for c in cells])
    paragraphs.append(f"{sheet}{_DASH}{text}" if several and sheet else text)
    metas.append({"sheet": sheet, "row": number})


def _whole(value: str | None, default: int) -> int:
    """A row's number or a repeat count as written (a sheet has at most some million rows); ``default`` for none."""
    return int(value) if value and value.isdecimal() and len(value) < 9 else default


def _repeated(value: str | None) -> int:
    """An OpenDocument row's or cell's repeat count."""
    return _whole(value, 1)


def _line(text: str) -> str:
    return " ".join(text.split())


def number_text(value: float) -> str:
    """A number as a spreadsheet's General format shows it, shortest: 40, 3.2, 0.3 (not 0.30000000000000004)."""
    if value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return f"{value:.15g}"


# CSV and TSV files


def _is_number(text: str) -> bool:
    try:
        float(text.replace(",", ""))
    except ValueError:
        return False
    return True


def _delimiter(sample: str) -> str:
    """The delimiter of a CSV file's first records (``sample``): of comma, semicolon, tab and bar, the one that cuts
    the most of them into the same number of cells, more than one (the most cells where two do); a comma where none
    does (a file of one column)."""
    best: tuple[int, int, int] = (0, 0, 0)
    for rank, delimiter in enumerate(reversed(CSV_DELIMITERS)):
        try:
            widths = [len(r) for r in itertools.islice(csv.reader(io.StringIO(sample, newline=""), delimiter=delimiter),
                                                       100) if r]
        except csv.Error:
            continue
        common = max(set(widths), key=widths.count, default=0)
        if common > 1:
            best = max(best, (widths.count(common), common, rank))
    return CSV_DELIMITERS[-1 - best[2]] if best[0] else ","


def extract_csv(source: str, path: Path) -> Extracted:
    """A CSV or TSV file's records as a sheet named after the file (``sheets_extracted``); Unreadable naming the
    line of a quoted cell never closed, a stray quote or a cell past the csv module's limit."""
    delimiter = "\t" if path.suffix.lower() == ".tsv" else _delimiter(source[:CSV_SAMPLE])
    return sheets_extracted(path, [(path.stem, _records(source, delimiter))], None, {})


def _records(source: str, delimiter: str) -> Iterator[Row]:
    """A CSV file's records with a value, read as they are asked for: those past ``sheets_extracted``'s limits are
    never parsed (they were, up to ``MAX_ROWS`` of any width, before the limits applied)."""
    reader = csv.reader(io.StringIO(source, newline=""), delimiter=delimiter, strict=True)
    start = 1  # the line the record being read starts on (a quoted cell may hold line breaks)
    try:
        for number, record in enumerate(reader, start=1):
            cells = [Cell(i, text, not _is_number(text)) for i, cell in enumerate(record) if (text := _line(cell))]
            if cells:
                yield number, cells
            start = reader.line_num + 1
    except csv.Error as e:
        raise Unreadable(f"not a readable CSV file: the record from line {start}: {e}") from None


# Excel workbooks (Office Open XML)

_S = "{http://schemas.openxmlformats.org/spreadsheetml/2006/main}"
_R = "{http://schemas.openxmlformats.org/officeDocument/2006/relationships}"
_RELS = "{http://schemas.openxmlformats.org/package/2006/relationships}"
_CORE = {"title": "{http://purl.org/dc/elements/1.1/}title", "author": "{http://purl.org/dc/elements/1.1/}creator"}
# Excel's built-in number formats that show a date or time, and those that show a percentage
_DATE_FORMATS = {*range(14, 23), *range(27, 37), *range(45, 48), *range(50, 59)}
_PERCENT_FORMATS = {9, 10}
_QUOTED = re.compile(r'"[^"]*"|\[[^\]]*\]|\\.')  # a format code's literal text, colours and conditions
_COLUMN = re.compile(r"[A-Z]+")
# other Office files renamed .xlsx: a part only they have, and their suffix
_OTHER_OFFICE = {"word/document.xml": "a Word file, not an {kind}; rename it to .docx",
                 "ppt/presentation.xml": "a PowerPoint file, not an {kind}; rename it to .pptx"}


def _shown_as(code: str, number_format: int) -> str:
    """How a number format shows a number: "date", "time" (a date with no day), "percent" or "" (as a number)."""
    if number_format in _PERCENT_FORMATS:
        return "percent"
    if number_format in _DATE_FORMATS:
        return "time" if number_format in (18, 19, 20, 21, 45, 46, 47) else "date"
    code = _QUOTED.sub("", code).lower()
    if "%" in code:
        return "percent"
    if "y" in code or "d" in code:
        return "date"
    return "time" if "h" in code or "s" in code else ""


class _Workbook:
    """An Excel workbook's parts a sheet's cells need: its shared strings, how each cell style shows a number, and
    its date system."""

    def __init__(self, package: Package, workbook: Any) -> None:
        self.package = package
        self.strings: list[str] = []
        if "xl/sharedStrings.xml" in package.names:  # streamed: a 160 KB file's 63 MiB table took 1.5 GB as a tree
            # a string's text: its own t, or its runs' (not its phonetic guide's, rPh)
            self.strings = [_line((si.findtext(f"{_S}t") or "") + "".join(
                r.findtext(f"{_S}t") or "" for r in si.iterfind(f"{_S}r")))
                for si in self.stream("xl/sharedStrings.xml", (f"{_S}si",))]
        self.shown: list[str] = []
        if "xl/styles.xml" in package.names:
            styles = package.xml("xl/styles.xml")
            codes = {_int(f.get("numFmtId"), 0): f.get("formatCode", "") for f in styles.iter(f"{_S}numFmt")}
            xfs = styles.find(f"{_S}cellXfs")
            self.shown = [_shown_as(codes.get(n := _int(xf.get("numFmtId"), 0), ""), n)
                          for xf in (xfs if xfs is not None else [])]
        properties = workbook.find(f"{_S}workbookPr")
        date1904 = properties is not None and properties.get("date1904") in ("1", "true")
        self.epoch = datetime(1904, 1, 1) if date1904 else datetime(1899, 12, 30)

    def value(self, cell: Any) -> tuple[str, bool]:
        """A cell's text as Excel shows it, and whether it is text."""
        kind = cell.get("t", "n")
        if kind == "inlineStr":
            return _line("".join(t.text or "" for t in cell.iter(f"{_S}t"))), True
        value = cell.findtext(f"{_S}v")
        if value is None or kind == "e":  # a formula never computed, or its error (#DIV/0!)
            return "", False
        if kind == "s":
            index = _int(value, -1)
            return (self.strings[index] if 0 <= index < len(self.strings) else ""), True
        if kind in ("str", "d"):
            return _line(value), kind == "str"
        if kind == "b":
            return ("TRUE" if value.strip() in ("1", "true") else "FALSE"), False
        try:
            number = float(value)
        except ValueError:
            return _line(value), True
        style = _int(cell.get("s"), 0)
        return self.number(number, self.shown[style] if style < len(self.shown) else ""), False

    def number(self, number: float, shown: str) -> str:
        if shown == "percent":
            return f"{number * 100:.15g}%"
        if shown in ("date", "time"):
            try:
                moment = self.epoch + timedelta(seconds=round(number * 86400))
            except (OverflowError, ValueError):  # (past a date's years, or NaN)
                return number_text(number)
            clock = moment.strftime("%H:%M:%S" if moment.second else "%H:%M")
            if shown == "time" and number < 1:
                return clock
            return moment.date().isoformat() + (f" {clock}" if moment.time() != datetime.min.time() else "")
        return number_text(number)

    def rows(self, part: str) -> Iterator[Row]:
        """A worksheet's shown rows, streamed (``stream``)."""
        number = 0
        hidden = _Columns()  # the hidden columns (``cols``, before the rows)
        for row in self.stream(part, (f"{_S}col", f"{_S}row")):
            if row.tag == f"{_S}col":
                if row.get("hidden") in ("1", "true"):
                    hidden.hide(_int(row.get("min"), 0) - 1, _int(row.get("max"), 0))
                continue
            number = _whole(row.get("r"), number + 1)  # (Excel's go to 1,048,576)
            if row.get("hidden") not in ("1", "true"):
                yield number, hidden.shown(self.cells(row))

    def stream(self, part: str, tags: tuple[str, ...]) -> Iterator[Any]:
        """A part's elements of ``tags`` in order, each dropped (with what came before it) once the caller has read
        it, so a part is never held whole; Unreadable naming the part where it is damaged or not well-formed XML."""
        from lxml import etree

        try:
            with self.package.zip.open(part) as stream:
                for _, element in etree.iterparse(stream, events=("end",), tag=tags, resolve_entities=False,
                                                  no_network=True, load_dtd=False):
                    yield element
                    element.clear()
                    while element.getprevious() is not None:
                        del element.getparent()[0]
        except etree.XMLSyntaxError as e:
            raise Unreadable(f"not a readable {XLSX_KIND}: its part {part} is not well-formed XML ({e.msg})") from None
        except KeyError:
            raise Unreadable(f"not a readable {XLSX_KIND}: it has no part {part}") from None
        except (OSError, EOFError, ValueError, RuntimeError) as e:  # (BadZipFile, zlib.error: a damaged member)
            raise Unreadable(f"not a readable {XLSX_KIND}: its part {part} is damaged ({error_text(e)})") from None

    def cells(self, row: Any) -> list[Cell]:
        found: list[Cell] = []
        column = -1
        for cell in row.iterfind(f"{_S}c"):
            letters = _COLUMN.match(cell.get("r", ""))
            column = _column(letters.group()) if letters else column + 1
            text, label = self.value(cell)
            if text:
                found.append(Cell(column, text, label))
        return found


def _column(letters: str) -> int:
    """A column's index from its letters: A 0, Z 25, AA 26."""
    index = 0
    for letter in letters[:4]:  # (XFD, the last Excel has, is three)
        index = index * 26 + ord(letter) - 64
    return index - 1


def _part(target: str) -> str:
    """A relationship's target in xl/workbook.xml.rels as a part's name ("worksheets/sheet1.xml" is under xl/)."""
    return target.lstrip("/") if target.startswith("/") else f"xl/{target}"


def extract_xlsx(path: Path) -> Extracted:
    """An Excel workbook's shown worksheets in order, one paragraph a shown row (``sheets_extracted``); the title
    and author from docProps/core.xml."""
    package = Package(path, XLSX_KIND, None)
    try:
        if "xl/workbook.xml" not in package.names:
            other = next((why for part, why in _OTHER_OFFICE.items() if part in package.names),
                         "not a readable {kind}: it has no part xl/workbook.xml")
            raise Unreadable(other.format(kind=XLSX_KIND))
        workbook = package.xml("xl/workbook.xml")
        rels = "xl/_rels/workbook.xml.rels"
        targets = {rel.get("Id"): _part(rel.get("Target", "")) for rel in package.xml(rels).iter(f"{_RELS}Relationship")
                   } if rels in package.names else {}
        book = _Workbook(package, workbook)
        shown = [(sheet.get("name", ""), targets.get(sheet.get(f"{_R}id"), ""))
                 for sheet in workbook.iter(f"{_S}sheet") if sheet.get("state", "visible") == "visible"]
        sheets = [(name, book.rows(part)) for name, part in shown if "/worksheets/" in part]  # (not a chart sheet)
        meta: dict[str, Any] = {}
        if "docProps/core.xml" in package.names:
            core = package.xml("docProps/core.xml")
            meta = {key: text for key, tag in _CORE.items() if (text := _line(core.findtext(tag) or ""))}
        return sheets_extracted(path, sheets, meta.get("title"), {**meta, "sheets": len(sheets)})
    finally:
        package.close()


# OpenDocument spreadsheets


_ONES = b"\x01" * MAX_COLUMNS


class _Columns:
    """A sheet's hidden columns, a flag a column of the widest sheet (``MAX_COLUMNS``): a cell's is looked up at once,
    however many column definitions hide them (a list of ranges, each tried for each cell, took minutes a sheet)."""

    def __init__(self) -> None:
        self.flags = bytearray(MAX_COLUMNS)
        self.any = False

    def hide(self, first: int, end: int) -> None:
        """Columns ``first`` to ``end`` (not included) are hidden."""
        first, end = max(first, 0), min(end, MAX_COLUMNS)
        if first < end:
            self.flags[first:end] = memoryview(_ONES)[:end - first]
            self.any = True

    def shown(self, cells: list[Cell]) -> list[Cell]:
        """A row's cells but those in hidden columns."""
        if not self.any:
            return cells
        return [c for c in cells if c.column >= MAX_COLUMNS or not self.flags[c.column]]


def _hidden_columns(table: Any) -> _Columns:
    """An OpenDocument table's hidden columns (``table:visibility`` "collapse" or "filter"): a column
    definition may stand for many (``table:number-columns-repeated``)."""
    hidden = _Columns()
    column = 0
    for definition in table.iter(f"{_TABLE}table-column"):
        repeated = _repeated(definition.get(f"{_TABLE}number-columns-repeated"))
        if definition.get(f"{_TABLE}visibility", "visible") != "visible":
            hidden.hide(column, column + repeated)
        column += repeated
    return hidden


def _ods_rows(reader: _OdfText, table: Any) -> Iterator[Row]:
    """A table's shown rows, their cells in shown columns; a row repeated (``table:number-rows-repeated``) read as
    often, an empty one skipped at once (LibreOffice repeats an empty row to the sheet's million-row end)."""
    number = 0
    hidden = _hidden_columns(table)
    for _, row in _rows(table):
        repeated = _repeated(row.get(f"{_TABLE}number-rows-repeated"))
        shown = row.get(f"{_TABLE}visibility", "visible") == "visible"
        cells = hidden.shown(_ods_cells(reader, row)) if shown else []
        if not cells:
            number += repeated
            continue
        for _ in range(repeated):
            number += 1
            yield number, cells


def _ods_cells(reader: _OdfText, row: Any) -> list[Cell]:
    found: list[Cell] = []
    column = 0
    for cell in row:
        if column >= MAX_COLUMNS:  # (a row's cells each repeated to the sheet's edge made millions of cells)
            break
        repeated = _repeated(cell.get(f"{_TABLE}number-columns-repeated"))
        if cell.tag == f"{_TABLE}table-cell":
            kind = cell.get(f"{_OFFICE}value-type")
            text = (cell.get(f"{_OFFICE}date-value", "").replace("T00:00:00", "").replace("T", " ") if kind == "date"
                    else "") or reader.cell(cell, [])
            if text:
                found += [Cell(column + i, text, kind in (None, "string"))
                          for i in range(min(repeated, MAX_COLUMNS - column))]
        if cell.tag in (f"{_TABLE}table-cell", f"{_TABLE}covered-table-cell"):
            column += repeated
    return found


def extract_ods(path: Path) -> Extracted:
    """An OpenDocument spreadsheet's shown sheets in order, one paragraph a shown row (``sheets_extracted``); the
    title and author from its metadata. A packaged (.ods) or flat (.fods) file, read as ``indexer.opendocument``
    reads a text."""
    body, styles, meta = _body(path, ODS_KIND, "application/vnd.oasis.opendocument.spreadsheet", "spreadsheet")
    hidden = {style.get(f"{_STYLE}name") for style in body.getroottree().iter(f"{_STYLE}style")
              if any(p.get(f"{_TABLE}display") == "false" for p in style.iterfind(f"{_STYLE}table-properties"))}
    reader = _OdfText(styles)
    sheets = [(table.get(f"{_TABLE}name", ""), _ods_rows(reader, table)) for table in body.iterfind(f"{_TABLE}table")
              if table.get(f"{_TABLE}style-name") not in hidden]
    return sheets_extracted(path, sheets, meta.get("title"), {**meta, "sheets": len(sheets)})

