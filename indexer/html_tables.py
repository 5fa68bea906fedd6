"""An HTML table's rows -> paragraphs, for ``indexer.markup`` and ``indexer.html_main``: a row is one paragraph whose
cells are named by the header row (``TableRows``), and ``Table`` keeps the row and cell that ``html_reader.HTMLText`` has
open, with the cells that rows above span into it.

    spanseek corpus from-files page.html --out corpus.jsonl
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from spanseek.indexer.extracted import HEADER_LEVELS, row_text, stacked_names
from spanseek.indexer.html_tree import SPAN_COPIES, one_line


class TableRows:
    """One table's rows -> paragraphs. A row of header cells only (<th>, or any cell of <thead>) names the columns of
    the rows after it and is no paragraph itself, unless no row uses it (the table ends, or another header row comes
    first): then it is one, its cells spaced. A header cell that spans columns names each of them, as the table shows
    it, where its row has other names (a row of one name over the whole table is its title). A header row under a
    header row of several names (a group's name over its columns') adds its names to theirs (``stacked_names``:
    "Tide / high"). A header row of one name amid the body (a group's label) names nothing and reads as itself."""

    def __init__(self) -> None:
        self.names: list[str] = []
        self.unused: str | None = None  # the header row no row has used yet: a paragraph if none will
        self.grouped = False  # that row has several names: a header row under it stacks its names on them
        self.levels = 0  # the header rows stacked in ``names``

    def row(self, cells: Sequence[tuple[str, bool, str]]) -> list[str]:
        """The paragraphs a row of (text, is a header cell, the column's name: the text, or, in a column a header
        cell spans, that cell's) gives: none (a header row), itself, and an unused header row before it."""
        texts = [text for text, _, _ in cells]
        header = all(head for _, head, _ in cells)
        several = sum(map(bool, texts)) > 1
        if header and any(texts) and (not self.names or several):
            # a row of several names, or of one over some columns beside an empty cell (a group over the header
            # beside an empty corner), is a level of the header; a row of one name alone is the table's title
            grouped = several or any(not name for _, _, name in cells)
            names = [name for _, _, name in cells] if grouped else texts
            if self.unused is not None and self.grouped and several and self.levels < HEADER_LEVELS:  # the next level
                names = stacked_names([self.names, names])
                out, text, self.levels = [], row_text(names, []), self.levels + 1
            else:
                out, text, self.levels = self.end(), row_text(texts, []), 1
            self.names, self.unused, self.grouped = names, text, grouped
            return out
        self.unused = None
        text = row_text(texts, [] if header else self.names)
        return [text] if text else []

    def end(self) -> list[str]:
        """The header row no row used, as a paragraph (its words are kept)."""
        out, self.unused = [self.unused] if self.unused else [], None
        return out


@dataclass
class Table:
    """A table being read by ``html_reader.HTMLText``: its open row and cell."""

    rows: TableRows = field(default_factory=TableRows)
    row: list[tuple[str, bool, str]] | None = None  # (text, is a header cell, its column's name) of the row's cells
    cell: list[str] | None = None  # the open cell's text
    head: bool = False  # the open cell is a header cell
    span: int = 1  # the columns the open cell spans
    rowspan: int = 1  # the rows it spans
    in_thead: bool = False
    # the columns that cells of rows above span into the next rows: rows left, and the cell each row gets
    spanned: dict[int, tuple[int, tuple[str, bool, str]]] = field(default_factory=dict)
    cells: int = 0  # the table's own cells read
    copies: int = 0  # the cells spanning rows read again in the rows below
    headed: bool = False  # a header cell was read: its cells spanning rows are read in each (``SPAN_COPIES``)
    labels: list[int] = field(default_factory=list)  # the columns of the open row's header cells spanning rows
    copied: list[int] = field(default_factory=list)  # where the open row has such a cell again

    def _spanned_cells(self) -> None:
        """The cells that rows above span into the open row at its end, so the cells after them keep their column."""
        assert self.row is not None
        while (column := len(self.row)) in self.spanned:
            left, cell = self.spanned[column]
            if cell[0] and (not self.headed or self.copies >= SPAN_COPIES * self.cells):  # (``html_tree._split_row_spans``)
                cell = ("", *cell[1:])
            self.copies += bool(cell[0])
            if cell[0] and cell[1]:
                self.copied.append(len(self.row))
            self.row.append(cell)
            if left > 1:
                self.spanned[column] = (left - 1, cell)
            else:
                del self.spanned[column]

    def end_cell(self) -> None:
        if self.cell is not None:
            # a cell spanning columns is followed by empty ones, so the cells after it keep their column's name
            self.row = self.row if self.row is not None else []  # added to in place: a row of 5,000 cells took 8 s
            self._spanned_cells()
            text = one_line("".join(self.cell))
            self.cells += 1
            self.headed = self.headed or self.head
            if self.rowspan > 1:  # the rows below have it again in its first column, each row whole in itself (a
                # header cell's name only, unless its row is of the body: ``end_row``), and an empty cell of its name
                # in the others (``html_tree._split_row_spans``)
                for column in range(len(self.row), len(self.row) + self.span):
                    again = text if column == len(self.row) and not self.head else ""
                    self.spanned[column] = (self.rowspan - 1, (again, self.head, text))
                if self.head:
                    self.labels.append(len(self.row))
            self.row += [(text, self.head, text), *[("", self.head, text)] * (self.span - 1)]
            self.cell = None

    def end_row(self) -> list[str]:
        self.end_cell()
        if self.row is not None:
            self._spanned_cells()
        row, self.row = self.row, None
        labels, copied, self.labels, self.copied = self.labels, self.copied, [], []
        if not row:
            return []
        if not all(head for _, head, _ in row):  # a header cell spanning body rows is their label: each row names it
            for column in labels:
                if column in self.spanned:
                    left, (_, head, name) = self.spanned[column]
                    self.spanned[column] = (left, (name, head, name))
        else:  # a header row that a label spans into: the label names no column here
            for at in copied:
                row[at] = ("", *row[at][1:])
        return self.rows.row(row)
