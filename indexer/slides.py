"""PowerPoint files (.pptx) -> paragraphs with their slide, for ``indexer.ingest`` (python-pptx).

    spanseek corpus from-files talk.pptx DOCS/ --out corpus.jsonl

Each slide is read in turn: its title first, then its other shapes top to bottom and left to right (a group's shapes
in place of the group, and those of alternative content, mc:AlternateContent, in its place; hidden shapes, the
slide number and date, and a footer that other slides repeat left out), each paragraph of a text frame one paragraph (after the number it shows where it is numbered, by the slide or by its
layout or master; its line breaks as spaces,
its fields' and equations' text, as a title's and a table cell's), a table's rows as Markdown's and Word's are ("Header: cell; Header: cell",
``extracted.row_text``; a cell merged over rows in each of them), then the text of its SmartArt diagrams and charts
(each box of a diagram, a chart's title with its category labels, its axis titles and the series' names it shows
(legend, data labels), one paragraph each: ``indexer.drawings``), then the speaker's notes. Every paragraph carries
its ``slide`` (numbered from 1, hidden slides included) and, when the slide has a title, ``section`` (the title), so
that chunking never mixes two slides. The document's title is its title property, else the first slide's title; its
metadata has ``slides``, the count. A file python-pptx cannot open is ``Unreadable``.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from spanseek.indexer.drawings import drawing_ids, related_texts
from spanseek.indexer.extracted import (
    Extracted,
    IngestError,
    Unreadable,
    error_text,
    header_depth,
    header_names,
    not_office_file,
    row_text,
    table_rows,
    zip_bomb,
)
from spanseek.indexer.html_shown import counted

_MC = "{http://schemas.openxmlformats.org/markup-compatibility/2006}"
_P = "{http://schemas.openxmlformats.org/presentationml/2006/main}"
_A = "{http://schemas.openxmlformats.org/drawingml/2006/main}"
# the elements of a paragraph that hold its text: a run's or a field's (a:t), an equation's (m:t)
_TEXT = {f"{_A}t", "{http://schemas.openxmlformats.org/officeDocument/2006/math}t"}


def _line(text: str) -> str:
    return " ".join(text.split())


def _shapes(shapes: Any, running: frozenset[str] = frozenset()) -> Iterator[Any]:
    """A slide's shapes in reading order, top to bottom then left to right; a group's shapes in its place; a hidden
    shape's (``_hidden``, ``running`` the deck's running footers) left out."""
    def place(shape: Any) -> tuple[int, int]:
        return (shape.top or 0, shape.left or 0)

    _unwrap_alternatives(shapes.element)
    for shape in sorted(shapes, key=place):
        if _hidden(shape, running):
            continue
        if hasattr(shape, "shapes"):  # a group
            yield from _shapes(shape.shapes, running)
        else:
            yield shape


def _hidden(shape: Any, running: frozenset[str] = frozenset()) -> bool:
    """Whether a shape is not read: hidden (the Selection Pane's eye, cNvPr's ``hidden``: the slide show does not
    show it), or the slide's number or date, or a footer the deck repeats (``running``, ``_running_footers``)
    (Insert > Header & Footer), left out as Word's footers and a PDF's running footers and page numbers are. A
    footer of one slide's own (a source under its chart) is read."""
    from pptx.enum.shapes import PP_PLACEHOLDER

    properties = shape.element.find(f"./*/{_P}cNvPr")
    if properties is not None and properties.get("hidden") in ("1", "true"):
        return True
    kind = shape.placeholder_format.type if shape.is_placeholder else None
    return kind in (PP_PLACEHOLDER.SLIDE_NUMBER, PP_PLACEHOLDER.DATE) or (
        kind == PP_PLACEHOLDER.FOOTER and _footer_text(shape) in running)


def _footer_text(shape: Any) -> str:
    """A footer placeholder's text on one line."""
    return " ".join(_paragraph_texts(shape))


def _running_footers(slides: Any) -> frozenset[str]:
    """The texts of footer placeholders on two slides or more, and the empty text: the deck's running footers."""
    from pptx.enum.shapes import PP_PLACEHOLDER

    counts = Counter(text for slide in slides for text in {_footer_text(shape) for shape in slide.placeholders
                                                          if shape.placeholder_format.type == PP_PLACEHOLDER.FOOTER})
    return frozenset({"", *(text for text, n in counts.items() if n > 1)})


def _unwrap_alternatives(tree: Any) -> None:
    """Put the shapes of a shape tree's alternative content (mc:AlternateContent: PowerPoint saves so a text box
    holding an equation, with a picture of it for older readers) in its place, the choice's shapes, which hold the
    text, rather than the fallback's: python-pptx reads no shape inside one, and the text box was lost. The deck is
    changed in memory only."""
    for alternatives in tree.findall(f"{_MC}AlternateContent"):
        chosen = alternatives.find(f"{_MC}Choice")
        chosen = chosen if chosen is not None else alternatives.find(f"{_MC}Fallback")
        for shape in list(chosen) if chosen is not None else []:
            alternatives.addprevious(shape)
        tree.remove(alternatives)


def _table_rows(table: Any) -> list[str]:
    """A table's rows, the cells named by its header (a slide table's first row, as PowerPoint styles it by default,
    and the rows its cells merged over rows span: a header of two levels, ``header_depth``, whose names stack:
    "Tide / high"); a table of one row reads its cells. A cell merged over rows reads in each of them (each row
    whole as a passage, as Word's, HTML's and Markdown's), but a header cell merged down into the body names its
    column there and is no row's text; one merged over columns reads once in its row (a header cell so merged names
    each column, ``header_names``)."""
    rows = [list(row.cells) for row in table.rows]
    spans = [(cell.span_height, cell.span_width) if cell.is_merge_origin else (1, 1) for cell in rows[0]] if rows else []
    heads = header_depth(spans, len(rows)) if table.first_row and len(rows) > 1 else 0
    # each cell's (grid column it starts in, the one after its last, text), a cell merged over columns once; one
    # merged over rows again in each row below (where it starts: its other columns are its own row's span), but a
    # header cell merged down into the body, which names its column there (as an HTML <th rowspan>), not a row's text
    cells: list[list[tuple[int, int, str]]] = [[] for _ in rows]
    for r, row in enumerate(rows):
        for c, cell in enumerate(row):
            if cell.is_merge_origin:
                text = _cell_text(cell)
                for below in range(r, min(r + cell.span_height, len(rows))):
                    cells[below].append((c, c + cell.span_width, "" if r < heads <= below else text))
            elif not cell.is_spanned:
                cells[r].append((c, c + 1, _cell_text(cell)))
    grid = [[""] * len(row) for row in rows]
    for line, row_cells in zip(grid, cells, strict=True):
        for start, _, text in row_cells:
            if start < len(line):
                line[start] = text
    if heads < 2:
        return table_rows(grid, table.first_row)
    names = header_names([sorted(row_cells) for row_cells in cells[:heads]], max(map(len, rows)))
    return [text for line in grid[heads:] if (text := row_text(line, names))]


def _paragraph_texts(shape: Any) -> list[str]:
    """A shape's text frame's paragraphs, each on one line (``_inline_text``); empty ones left out."""
    return _frame_texts(shape.element.find(f"{_P}txBody"), _inherited_styles(shape))


# the master's text style (p:txStyles) a placeholder of each type takes what its own levels do not set from (the
# others' is p:otherStyle); a notes master's is p:notesStyle
_MASTER_STYLES = {"title": "titleStyle", "ctrTitle": "titleStyle", "body": "bodyStyle", "obj": "bodyStyle",
                  "subTitle": "bodyStyle"}


def _inherited_styles(shape: Any) -> list[Any]:
    """The list styles (a:lstStyle, each level's paragraph properties) a placeholder's paragraphs take what they do not
    set from, nearest first: its layout's placeholder's, its master's, then the master's text style for its type
    (``_MASTER_STYLES``); none for a shape that is no placeholder."""
    styles: list[Any] = []
    if not shape.is_placeholder:
        return styles
    ph = shape.element.find(f"./*/{_P}nvPr/{_P}ph")
    kind = ph.get("type", "obj") if ph is not None else "obj"
    base, root = shape, None
    while True:
        try:
            base = base._base_placeholder
        except (AttributeError, KeyError, NotImplementedError):  # a master's placeholder, or a type it has none of
            base = None
        if base is None:
            break
        styles.append(base.element.find(f"{_P}txBody/{_A}lstStyle"))
        root = base.element.getroottree().getroot()
    if root is not None:
        masters = root.find(f"{_P}txStyles")
        styles.append(root.find(f"{_P}notesStyle") if masters is None else masters.find(
            f"{_P}{_MASTER_STYLES.get(kind, 'otherStyle')}"))
    return [style for style in styles if style is not None]


def _cell_text(cell: Any) -> str:
    """A table cell's text on one line, its paragraphs spaced, with their equations (python-pptx's ``text`` leaves
    them out, as a shape's)."""
    return " ".join(_frame_texts(cell._tc.find(f"{_A}txBody")))


def _frame_texts(body: Any, inherited: list[Any] | None = None) -> list[str]:
    """A text body's paragraphs (a:p), each on one line (``_inline_text``), after its number where it is numbered
    (``_number``; by its own properties, else its body's list style, else the ``inherited`` ones: a placeholder's
    layout's and master's, ``_inherited_styles``); empty ones left out."""
    texts: list[str] = []
    numbers: dict[int, tuple[str, int]] = {}  # each level's numbering going on: its scheme and its last number
    styles = [style for style in (body.find(f"{_A}lstStyle") if body is not None else None,) if style is not None]
    for p in body.iterchildren(f"{_A}p") if body is not None else ():
        if text := _line(_inline_text(p)):
            number = _number(p.find(f"{_A}pPr"), numbers, styles + (inherited or []))
            texts.append(f"{number} {text}" if number else text)
    return texts


# PowerPoint's automatic numbering (a:buAutoNum's type, "arabicPeriod", "alphaLcParenR", "romanUcParenBoth"): the
# counter, its case and what is set around it; another scheme (circled numbers, East Asian numerals) reads decimal
_SCHEME = re.compile(r"(alpha|arabic|roman)(Lc|Uc)?(ParenBoth|ParenR|Period|Plain)")
_AROUND = {"ParenBoth": "({})", "ParenR": "{})", "Period": "{}.", "Plain": "{}"}


# a paragraph's bullet: none, a number, a character or a picture; the nearest of its properties, its list styles',
# that sets one gives it
_BULLETS = {f"{_A}buNone", f"{_A}buAutoNum", f"{_A}buChar", f"{_A}buBlip"}


def _number(props: Any, numbers: dict[int, tuple[str, int]], styles: list[Any]) -> str:
    """The number PowerPoint shows before a paragraph of these properties (a:pPr, or None) where they, or else the
    nearest of the list ``styles`` (a:lstStyle and the master's text styles) that sets its level's bullet, number it
    (a:buAutoNum: "1.", "b)", "(iii)"), else "": it counts on from the paragraph numbered before it at its level in
    the same scheme, else from its ``startAt`` (1); a paragraph at a level above ends the numbering below it, and
    one not numbered ends its own level's. ``numbers`` (level: scheme, last number) is kept up to date."""
    lvl = props.get("lvl", "0") if props is not None else "0"
    level = int(lvl) if lvl.isdecimal() and len(lvl) < 3 else 0
    for deeper in [k for k in numbers if k > level]:
        del numbers[deeper]
    levels = (props, *(style.find(f"{_A}lvl{level + 1}pPr") for style in styles))
    bullet = next((child for pPr in levels if pPr is not None for child in pPr if child.tag in _BULLETS), None)
    auto = bullet if bullet is not None and bullet.tag == f"{_A}buAutoNum" else None
    if auto is None:
        numbers.pop(level, None)
        return ""
    scheme, start = auto.get("type", "arabicPeriod"), auto.get("startAt", "1")
    before = numbers.get(level)
    number = before[1] + 1 if before is not None and before[0] == scheme else (
        int(start) if start.isdecimal() and len(start) < 6 else 1)
    numbers[level] = (scheme, number)
    counter, case, around = found.groups() if (found := _SCHEME.fullmatch(scheme)) else ("arabic", None, "Period")
    kind = {"alpha": "a", "arabic": "1", "roman": "i"}[counter]
    return _AROUND[around].format(counted(number, kind.upper() if case == "Uc" else kind))


def _inline_text(element: Any) -> str:
    """A paragraph's text (a:p): its runs' and fields' (a date, a slide number), line breaks (Shift+Enter) as spaces,
    and its equations' (Office Math, m:t; python-pptx's text leaves them out), not their fallback's."""
    parts = []
    for child in element:
        if child.tag in _TEXT:
            parts.append(child.text or "")
        elif child.tag == f"{_A}br":
            parts.append(" ")
        elif child.tag != f"{_MC}Fallback":
            parts.append(_inline_text(child))
    return "".join(parts)


def _slide_text(slide: Any, running: frozenset[str] = frozenset()) -> tuple[str | None, list[str]]:
    """(the slide's title, its paragraphs in reading order: the title, shapes, diagrams and charts, the notes), but
    the deck's running footers (``running``)."""
    _unwrap_alternatives(slide.shapes.element)  # (the title may be among them)
    title_shape = slide.shapes.title
    shown = title_shape is not None and title_shape.has_text_frame and not _hidden(title_shape)
    title = " ".join(_paragraph_texts(title_shape)) if shown else ""  # (with its equations)
    paragraphs = [title] if title else []
    for shape in _shapes(slide.shapes, running):
        if title_shape is not None and shape.shape_id == title_shape.shape_id:
            continue
        if getattr(shape, "has_table", False) and shape.has_table:
            paragraphs += _table_rows(shape.table)
        elif getattr(shape, "has_text_frame", False) and shape.has_text_frame:
            paragraphs += _paragraph_texts(shape)
    paragraphs += [text for shape in _shapes(slide.shapes, running) for rid in drawing_ids(shape.element)
                   for text in related_texts(slide.part, rid)]
    if slide.has_notes_slide and (notes := slide.notes_slide.notes_placeholder) is not None:
        paragraphs += _paragraph_texts(notes)
    return title or None, paragraphs


def extract_pptx(path: Path) -> Extracted:
    """Each slide's paragraphs in order, each with its ``slide`` and its ``section`` (the slide's title)."""
    try:
        import pptx
    except ImportError:
        raise IngestError(f"{path}: reading PowerPoint files needs python-pptx (pip install 'spanseek[index]')"
                          ) from None
    if (bomb := zip_bomb(path)) is not None:
        raise Unreadable(bomb)
    try:
        deck = pptx.Presentation(str(path))
    except Exception as e:  # a .pptx is a zip of XML parts; any of them may be missing or damaged
        raise Unreadable(not_office_file(path, e, "PowerPoint", ".pptx", ".ppt")) from None
    paragraphs: list[str] = []
    metas: list[dict[str, Any]] = []
    first_title = None
    try:
        running = _running_footers(deck.slides)
        for number, slide in enumerate(deck.slides, start=1):
            title, texts = _slide_text(slide, running)
            first_title = first_title or title
            meta = {"slide": number, **({"section": title} if title else {})}
            paragraphs += texts
            metas += [meta] * len(texts)
        title = _line(deck.core_properties.title or "") or first_title
    except Exception as e:  # XML that breaks PowerPoint's schema (a shape at x="abc"): python-pptx raises many types
        raise Unreadable(f"not a readable PowerPoint (.pptx) file: its XML breaks PowerPoint's rules "
                         f"({error_text(e)})") from None
    return Extracted(title, paragraphs, {"slides": len(deck.slides)}, metas)
