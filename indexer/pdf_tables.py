"""The tables of a PDF page whose first row is a header (``tables``), for ``indexer.documents`` through
``indexer.pdf_layout``: each run of table rows (``Block.cells``) under a bold header row, each cell put in its
header's column, and the rows that go on with a table from the page before. ``spanseek corpus from-files`` runs it on
each PDF.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from spanseek.indexer.pdf_blocks import Block


def tables(blocks: Sequence[Block], continued: Block | None = None, first: int = 0
           ) -> list[tuple[int, list[list[str]]]]:
    """The tables of a page's blocks (in reading order) whose first row is a header: (where the header is, the rows'
    cells, the header's first), for each run of table rows (``Block.cells``: one-line cells on one baseline) whose
    first row is bold, as a header row is set, with at least one row under it. Each row's cells are put in the
    header's columns (the gap between two headers splits them), "" where a row has none (an empty cell); a row with
    two cells in one column, or a block that is no row, ends the table. A table without a bold first row is found
    by nothing here: its rows read their cells, spaced. ``continued``: the header row of a table that ended the page
    before; the rows from block ``first`` (the first of the page's body) that fit its columns are that table's, where
    is -1, unless they have a bold header row of their own."""
    found: list[tuple[int, list[list[str]]]] = []
    i = 0
    if continued is not None and first < len(blocks) and not blocks[first].bold:
        if rows := _rows_under(continued, blocks[first:]):
            found.append((-1, [[cell for cell, _, _ in continued.cells], *rows]))
            i = first + len(rows)
    while i < len(blocks):
        head = blocks[i]
        if not (head.cells and head.bold):
            i += 1
            continue
        rows = [[cell for cell, _, _ in head.cells], *_rows_under(head, blocks[i + 1:])]
        if len(rows) > 1:
            found.append((i, rows))
        i += len(rows)
    return found


def _rows_under(head: Block, blocks: Sequence[Block]) -> list[list[str]]:
    """The rows of ``head``'s table among the first ``blocks``, each cell in its header's column (``tables``)."""
    edges = [(a[2] + b[1]) / 2 for a, b in itertools.pairwise(head.cells)]  # the gaps' middles
    rows: list[list[str]] = []
    for block in blocks:
        columns = [sum(x0 + x1 > 2 * edge for edge in edges) for _, x0, x1 in block.cells]
        if not block.cells or len(set(columns)) < len(columns):
            break
        row = [""] * len(head.cells)
        for (cell, _, _), column in zip(block.cells, columns, strict=True):
            row[column] = cell
        rows.append(row)
    return rows
