"""An HTML page's element tree (lxml) made ready for trafilatura, for ``indexer.html_main`` (``main_content``), which
reads the page's main content from it: what trafilatura would read otherwise than a reader sees it, rewritten
first. Tables: header rows stacked under a group's name (``_stack_header_rows``), spans clamped and split so that
each cell keeps its column (``_clamp_spans``, ``_split_header_spans``, ``_split_row_spans``), a table nested in a
cell read in its line (``_nested_tables_inline``); tabs, figures, <pre>, <time>, MathML and formulas' images read as
text and code (``_tabs_as_text``, ``_figures_as_text``, ``_pre_as_code``, ``_times_as_text``, ``_math_as_text``,
``_formula_images_as_text``); a <bdo>'s text as shown (``_bdo_as_shown``); an ordered list's items numbered, a check
box's state, a <q>'s quotation marks and a ruby annotation set in the text as a browser shows them
(``indexer.html_shown``). ``ready_for_main_content`` runs them in
order. Also the element rules both HTML readers share: tables' parts (``CELL``, ``ROW_GROUPS``, ``TABLE``,
``cell_span``), a <bdo>'s override (``bdo_override``), a formula's image (``formula_image``, ``FORMULA``), what a
browser hides (``hidden_element``, ``SHOWN_LATER``), the links a reader passes over (``unread_link``), text as one line
(``one_line``) and a code block's lines (``code_lines``).

    spanseek corpus from-files page.html --out corpus.jsonl
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from spanseek.indexer.extracted import HEADER_LEVELS, stacked_names
from spanseek.indexer.html_shown import check_boxes_as_text, list_numbers, quotes_and_ruby_as_text
from spanseek.indexer.html_styles import display_none, hiding_declaration
from spanseek.indexer.pdf_blocks import LTR_OVERRIDE, POP_OVERRIDE, RTL_OVERRIDE, overrides_read

# Elements that end a paragraph where they start and where they end (and a line a <bdo> lays out: ``_bdo_as_shown``).
BLOCK = {
    "p", "div", "section", "article", "main", "header", "footer", "nav", "aside", "li", "ul", "ol", "dl", "dt",
    "dd", "h1", "h2", "h3", "h4", "h5", "h6", "pre", "blockquote", "table", "thead", "tbody", "tr", "caption",
    "br", "hr", "figure", "figcaption", "form", "fieldset", "legend", "address", "details", "summary", "body", "html",
}
CELL = {"td", "th"}  # a table cell: its text is one of its row's cells
ROW_GROUPS = {"thead", "tbody", "tfoot"}  # a table's parts that hold rows
TABLE = {"table", "thead", "tbody", "tfoot", "tr"}  # a table's structure: rows end where these start and end
# a form's fields: each a box of its own that the text beside it does not run into ("Card [Visa]" read "CardVisa"), a
# list's options each on a line of their own in it ("Visa Mastercard")
FIELDS = {"input", "select", "option", "optgroup", "textarea", "output"}


def one_line(text: str) -> str:
    """Text as one line: whitespace runs become one space, soft hyphens (``&shy;``: a hyphen shown only where a line
    breaks there) are dropped, as a PDF's are, and text a <bdo> lays out (``OVERRIDES``) reads as shown (its spaces
    made one again: a space before the override that ends it and one after it met where the text was reversed)."""
    return " ".join(overrides_read(" ".join(text.replace("\u00ad", "").split())).split())


# ... but a page hidden whole until its scripts have run is read
SHOWN_LATER = {"html", "body"}
def code_lines(text: str) -> str:
    """A code block's text: its lines kept (one "\\n" apart, so the block stays one paragraph) with their indentation
    (tabs as 4 spaces, less what every line shares), the spacing inside each line collapsed, blank lines dropped (a
    blank line would read as a paragraph break, which answers never cross)."""
    lines = [line.expandtabs(4) for line in overrides_read(text).split("\n") if line.strip()]
    shared = min((len(line) - len(line.lstrip(" ")) for line in lines), default=0)
    return "\n".join(" " * (len(line) - len(line.lstrip(" ")) - shared) + one_line(line) for line in lines)


def hidden_element(attrs: Mapping[str, str | None], visibility: bool = True) -> bool:
    """Whether an element is not shown, its text with it: it has the ``hidden`` attribute (but "until-found", which
    a browser's find in page reveals) or an inline style that hides it (``display: none``, ``visibility: hidden``:
    ``html_styles.hiding_declaration``; with ``visibility`` False, only what hides all inside it whatever they say,
    not ``visibility: hidden``); but a tab's panel (``role="tabpanel"``: sphinx-tabs and ARIA's tabs hide all but the
    first), which its tab shows, is read."""
    if "tabpanel" in (attrs.get("role") or "").lower().split():
        return False
    shown = "hidden" not in attrs or (attrs["hidden"] or "").strip().lower() == "until-found"
    return not shown or (hiding_declaration if visibility else display_none)(attrs.get("style") or "")


# an in-page link whose text is only a symbol: a heading's permalink (Sphinx's and MkDocs' "¶"), a footnote's link
# back to its mark ("↩"); and a link's text that is a note's mark ("1", "[1]", "*") where it is set in <sup>
_PERMALINK = re.compile(r"[¶§#↩↑⬆🔗⚓][\ufe0e\ufe0f]?")
_MARK = re.compile(r"\[?(?:\d{1,4}|[*†‡])\]?")
_NOTE_LINKS = {"headerlink", "footnote-ref", "footnote-back", "footnote-backref", "doc-noteref", "doc-backlink",
               "noteref", "backlink"}  # (the last two an e-book's epub:type)


def unread_link(attrs: Mapping[str, str | None], text: str, superscript: bool) -> bool:
    """Whether a link (<a>) is one a reader passes over: an in-page link that is a heading's permalink, a footnote's
    mark ("high<sup><a href="#fn1">1</a></sup> today" reads "high today", as Markdown's ``[^1]``) or a footnote's
    link back to it (Pandoc's, Sphinx's, MkDocs', Google Docs', Wikipedia's): its text was read into the heading
    ("Install¶") or the sentence ("high1 today"); or one with no text (MkDocs' anchor on each line of code, which
    made trafilatura drop the code block). A link to a place in another document is passed over where it is a
    note's mark too (an e-book's endnotes, "froze<sup><a href="notes.xhtml#n1">1</a></sup> in" read "froze1 in"):
    in a <sup>, or marked as a note's link (``epub:type="noteref"``, ``role="doc-noteref"``). ``superscript``: the
    link is in a <sup> or holds one."""
    href = attrs.get("href") or ""
    named = {*(attrs.get("class") or "").split(), *(attrs.get("role") or "").split(),
             *(attrs.get("epub:type") or "").split()}
    mark = text.strip()
    if not href.startswith("#"):
        return "#" in href and (superscript or bool(_NOTE_LINKS & named)) and bool(
            _MARK.fullmatch(mark) or _PERMALINK.fullmatch(mark))
    return not mark or bool(_NOTE_LINKS & named) or bool(_PERMALINK.fullmatch(mark)) or (superscript and bool(_MARK.fullmatch(mark)))


# a table's cells spanning rows are read in each of them unless that takes more copies than this many times the
# table's own cells (spans that push every row's cells past the last: a hostile page's, which took minutes), and
# only in a table with header cells: one of plain cells is mostly a page's layout (a DocBook manual's navigation
# footer, "<< Previous | Up/Home | Next >>" over two rows, read its links twice on every page)
SPAN_COPIES = 1
# the text of a cell that stands for a column the header cell before it spans (``_split_header_spans``): a Unicode
# noncharacter, which no text holds (a private-use one, U+E000, is a glyph of an icon font: a page's own was lost)
SPANNED = "\ufdd0"


# where a <bdo> element's text starts: the override that lays it out in its direction whatever its script
# (``pdf_blocks.overrides_read``); "" for one of no direction, which lays nothing out
OVERRIDES = {"ltr": LTR_OVERRIDE, "rtl": RTL_OVERRIDE}


def bdo_override(attrs: Mapping[str, str | None]) -> str:
    """The override a <bdo> element's text starts with (``OVERRIDES``)."""
    return OVERRIDES.get((attrs.get("dir") or "").strip().lower(), "")


def cell_span(value: str | None) -> int:
    """A cell's ``colspan`` or ``rowspan``: 1 unless it is a whole number, at most 100 (as trafilatura reads it)."""
    value = value or "1"
    return min(int(value), 100) if value.isdecimal() and len(value) < 9 and int(value) > 0 else 1


def _rows(table: Any) -> list[Any]:
    """A table's rows as trafilatura reads them: its own and those of its <thead>, <tbody> and <tfoot>."""
    return [row for part in table for row in ((part,) if part.tag == "tr" else
                                              part.iterchildren("tr") if part.tag in ROW_GROUPS else ())]


def _stack_header_rows(tree: Any) -> None:
    """A table's leading header rows (their cells <th>, or in <thead>), two or more under a first of several names,
    made one row of a <th> for each column, named by them all (``stacked_names``: "Tide / high"): trafilatura marks
    only the first as a header, so the next level's names ("high" under "Tide") read as a row of cells. Left as it
    is when a header cell spans rows past them. A first row of one name over a header row, no empty cell beside it
    (the table's title; a group beside an empty corner is a level), is made its caption, which trafilatura reads
    first, not as the header. Run after ``_clamp_spans``."""
    from lxml import etree

    for table in tree.iter("table"):
        heads: list[Any] = []
        levels: list[list[str]] = []  # each header row's names by column
        spanned: dict[int, int] = {}  # the columns a cell above spans into the next rows: its last row
        for row in _rows(table):
            cells = [cell for cell in row if cell.tag in CELL]
            in_thead = row.getparent().tag == "thead"
            if not cells or not all(cell.tag == "th" or in_thead for cell in cells) or len(heads) > HEADER_LEVELS:
                break
            names: list[str] = []
            for cell in cells:
                while len(names) in spanned:  # its name is the one above it
                    names.append(levels[-1][len(names)])
                text = one_line(" ".join(cell.itertext()))
                width, depth = cell_span(cell.get("colspan")), cell_span(cell.get("rowspan"))
                spanned.update({column: len(heads) + depth - 1 for column in range(len(names), len(names) + width)})
                names += [text] * width
            while len(names) in spanned:
                names.append(levels[-1][len(names)])
            spanned = {column: last for column, last in spanned.items() if last > len(heads)}
            heads.append(row)
            levels.append(names)
        named = [sum(map(bool, {*names})) for names in levels]  # how many names each header row gives
        title = len(heads) > 1 and named[0] == 1 and all(levels[0])  # one name, no empty cell beside it (a corner's)
        if title and named[1] > 1:  # a title over the header: read first, as a caption
            caption = etree.Element("caption")
            caption.text = next(filter(None, levels[0]))
            table.insert(0, caption)
            heads[0].getparent().remove(heads[0])
            del heads[0], levels[0], named[0]
        if not 2 <= len(heads) <= HEADER_LEVELS or spanned or title or not named[0]:
            continue
        for cell in list(heads[0]):
            heads[0].remove(cell)
        for name in stacked_names(levels):
            etree.SubElement(heads[0], "th").text = name
        for row in heads[1:]:
            row.getparent().remove(row)


def _clamp_spans(tree: Any) -> None:
    """Cuts the spans of a table's cells (the cells trafilatura reads: of the table's own rows and of its <thead>,
    <tbody> and <tfoot>) to what the table holds: a cell's ``colspan`` to the columns left of the table's width (the
    most cells a row of it has, with the cells of rows above that span into it) where it starts, and its ``rowspan``
    to the rows left in the table. trafilatura adds an empty cell for each column spanned (up to 100) and counts a
    row's cells again at each cell: a row of 5,000 cells spanning 100 took it 30-45 s. The cells of a table whose
    rows span alike stay in line."""
    for table in tree.iter("table"):
        rows = _rows(table)
        cells = [[cell for cell in row if cell.tag in CELL] for row in rows]
        width, reach = 1, list[int]()  # the last row each cell spanning rows reaches
        for i, row in enumerate(cells):
            reach = [last for last in reach if last >= i]
            width = max(width, len(row) + len(reach))
            reach += [i + cell_span(cell.get("rowspan")) - 1 for cell in row if cell_span(cell.get("rowspan")) > 1]
        for i, row in enumerate(cells):
            column = 0
            for cell in row:
                for attr, most in (("colspan", max(1, width - column)), ("rowspan", len(rows) - i)):
                    span = cell.get(attr, "")  # (read as trafilatura reads it: digits only)
                    if span.isdecimal() and (len(span) > 6 or int(span) > most):
                        cell.set(attr, span := str(most))
                    if attr == "colspan":
                        column += int(span) if span.isdecimal() else 1


def _split_header_spans(tree: Any) -> None:
    """Each header cell (<th>) spanning columns made that many cells, the ones after it holding ``SPANNED`` and its
    text: trafilatura pads a spanned column with an empty cell, so the header named only the first column it spans
    ("Port: Dover; Tide: high; 06:10" under a "Tide" over two columns). Run after ``_clamp_spans``."""
    from lxml import etree

    for th in tree.iter("th"):
        span = th.get("colspan", "")
        if not (span.isdecimal() and int(span) > 1) or th.getparent() is None or th.getparent().tag != "tr":
            continue
        th.set("colspan", "1")
        for _ in range(int(span) - 1):
            spanned = etree.Element("th")
            spanned.text = SPANNED
            th.addnext(spanned)


def _split_row_spans(tree: Any) -> None:
    """Each body cell (<td>) spanning rows made a cell of one row, and a copy of it put in its columns in each row
    it spans: trafilatura reads such a cell in its first row only, so the rows under it lost it ("City: Bute;
    Population: 200" under a "Region: North" over two rows), where each row should read whole, as a passage of its
    own ("Region: North; City: Bute; ..."), as Word's do; so is a header cell spanning rows in a row of the body, a
    row's label (<th rowspan> "North" beside the cells of two towns). Header rows' cells are left to
    ``_stack_header_rows``. A
    table without header cells (<th>, <thead>: a page's layout, ``SPAN_COPIES``) or whose copies would outnumber its
    own cells (spans that push each row's cells past the last, a hostile page's) is left as it is. Run after
    ``_clamp_spans``."""
    import copy

    for table in tree.iter("table"):
        spanned: dict[int, tuple[int, Any]] = {}  # column -> (rows it still reaches, the cell spanning it)
        copies: list[tuple[Any, Any, bool]] = []  # (the cell to copy, where: a cell or a row, before it or at its end)
        own = 0
        headed = any(part.tag == "thead" for part in table)
        for row in _rows(table):
            column = 0
            cells = [cell for cell in row if cell.tag in CELL]
            own += len(cells)
            headed = headed or any(cell.tag == "th" for cell in cells)
            body = any(cell.tag == "td" for cell in cells)  # (a header cell in it is a row's label)
            for cell in [*cells, None]:  # None: the row's end
                while column in spanned and len(copies) <= SPAN_COPIES * own:  # the cells rows above span into it
                    left, spanning = spanned[column]
                    copies.append((spanning, cell if cell is not None else row, cell is not None))
                    width = cell_span(spanning.get("colspan"))
                    for k in range(column, column + width):
                        if left > 1:
                            spanned[k] = (left - 1, spanning)
                        else:
                            spanned.pop(k, None)
                    column += width
                if cell is None:
                    break
                if (cell.tag == "td" or body) and (depth := cell_span(cell.get("rowspan"))) > 1:
                    spanned.update(dict.fromkeys(range(column, column + cell_span(cell.get("colspan"))), (depth - 1, cell)))
                column += cell_span(cell.get("colspan"))
        if not copies or not headed or len(copies) > SPAN_COPIES * own:
            continue
        for spanning, _, _ in copies:
            spanning.set("rowspan", "1")
        for spanning, where, before in copies:
            twin = copy.deepcopy(spanning)
            twin.tail = None
            where.addprevious(twin) if before else where.append(twin)


def _nested_tables_inline(tree: Any) -> None:
    """Each table in the cell of a table with header cells (<th>, <thead>) made inline text of that cell, its cells
    spaced, as Word reads one: trafilatura read its rows as paragraphs of their own after the table around it ("Info:
    Open" there, "Berth C1" after it). A table in a cell of a table without them (a page's layout, as
    ``_split_row_spans`` has it) is a table of its own: its rows read named by its header."""
    from lxml import etree

    cells = 0  # the cells open around the element, of tables with header cells
    opened: list[bool] = []  # whether each open element is such a cell
    headed: list[bool] = [False]  # whether each open table (not made inline) has header cells
    for event, el in etree.iterwalk(tree, events=("start", "end")):  # (not recursive: tables nested 10,000 deep)
        if event == "end":
            cells -= opened.pop()
            if el.tag == "table":
                headed.pop()
            continue
        opened.append(el.tag in CELL and headed[-1])
        if cells and el.tag in TABLE | CELL | {"caption"}:
            el.tag, el.text, el.tail = "span", " " + (el.text or ""), " " + (el.tail or "")
        elif el.tag == "table":
            headed.append(any(part.tag == "thead" for part in el) or any(
                cell.tag == "th" for row in _rows(el) for cell in row))
        cells += opened[-1]


def _tabs_as_text(tree: Any) -> None:
    """Each tab's label made a paragraph where a reader meets it: at the top of the panel it shows (an ARIA tab's,
    ``aria-controls``: sphinx-tabs), or in its place where it is the <label> of a radio button (the tabs of
    sphinx-design and MkDocs, made of CSS; MkDocs' set apart in a row over the panels, each at the top of its
    panel). trafilatura drops buttons and labels, so a page's panels read without
    the tabs that say what each is for ("Run setup.exe." under no "Windows")."""
    from lxml import etree

    panels = {el.get("id"): el for el in tree.iter() if isinstance(el.tag, str) and el.get("id")}
    radios = {el.get("id") for el in tree.iter("input") if (el.get("type") or "").lower() == "radio" and el.get("id")}
    spans: dict[Any, list[int]] = {}  # each element's place in the page, and the place after its last descendant
    for event, el in etree.iterwalk(tree, events=("start", "end")):  # (not recursive: a page nested 10,000 deep)
        if event == "start":
            spans[el] = [len(spans), 0]
        else:
            spans[el][1] = len(spans)
    for tab in [el for el in tree.iter() if isinstance(el.tag, str) and "tab" in (el.get("role") or "").split()]:
        panel = panels.get(tab.get("aria-controls"))
        text = one_line(tab.text_content())
        # (a panel inside its tab stays where it is: the tab, dropped, would take it along)
        if panel is not None and text and not spans[tab][0] < spans[panel][0] < spans[tab][1]:
            label = etree.Element("p")
            label.text = text
            panel.insert(0, label)
            tab.drop_tree()
    for label in [label for label in tree.iter("label") if label.get("for") in radios]:
        if label.tag != "label":  # (moved with its row's first label)
            continue
        label.tag = "p"
        row = label.getparent()
        # labels in a row of their own (MkDocs': "tabbed-labels"), the panels in the next element, in the same order:
        # each label at the top of its panel
        blocks = row.getnext() if row is not None and row[0] is label else None
        if blocks is not None and all(child.tag == "label" or child.get("for") in radios for child in row) and len(
                blocks) == len(row):
            for child, block in zip(list(row), list(blocks), strict=True):
                child.tag = "p"
                block.insert(0, child)


def _controls_as_text(tree: Any) -> None:
    """The text of the controls a page sets in its content (not in a <form>, which trafilatura drops whole as
    boilerplate: a site's search box, a sign-up or comment form) read as a reader sees it: a <fieldset>'s <legend> a
    paragraph, a label's, a button's and a list's options' text (``FIELDS``), apart from the text around them.
    trafilatura drops controls, gluing the words beside them ("Pick <select>...</select> now" read "Picknow")."""
    for el in list(tree.iter("fieldset", "legend", "label", "button", *FIELDS)):
        if el.tag in ("fieldset", "legend"):
            el.tag = "div" if el.tag == "fieldset" else "p"
            continue
        el.tail = " " + (el.tail or "")
        if el.tag == "input":
            el.drop_tree()  # (its tail stays)
        else:
            el.tag, el.text = "span", " " + (el.text or "")


def _figures_as_text(tree: Any) -> None:
    """Each <figure> made a <div> and its <figcaption> a <p>: trafilatura removes a figure whole (as media) unless it
    holds a table, so a caption ("Figure 1: ..."), a code listing or a quotation set in a figure was lost."""
    for figure in tree.iter("figure"):
        figure.tag = "div"
    for caption in tree.iter("figcaption"):
        caption.tag = "p"


def _times_as_text(tree: Any) -> None:
    """A copy of each <time>'s text set before it, in a <span>: trafilatura removes a <time> whole (as it removes a
    form's controls), so a date or time in a sentence was lost ("The meeting is on at noon."). The <time> itself is
    left for trafilatura to find the page's date in (``datetime``) and remove."""
    import copy

    from lxml import etree

    for time in list(tree.iter("time")):
        shown = etree.Element("span")
        shown.text = time.text
        shown.extend(copy.deepcopy(child) for child in time)
        time.addprevious(shown)


def _math_as_text(tree: Any) -> None:
    """Each MathML formula (<math>) made a <span> of the text it shows ("E=mc2"), its annotations (<annotation>: its
    TeX source, which a browser does not show) left out: trafilatura removes a formula whole, so "the energy E=mc2
    of a body" read "the energy of a body"."""
    for annotation in [el for el in tree.iter("annotation", "annotation-xml") if any(
            up.tag == "math" for up in el.iterancestors())]:
        annotation.drop_tree()  # (its tail stays)
    for math in tree.iter("math"):
        math.tag = "span"


# the classes of a formula's image that stands for its MathML where a browser does not show that (MediaWiki's:
# Wikipedia's formulas), and the TeX style its alt text wraps the formula in ("{\\displaystyle x^{2}}")
_FORMULA_IMAGES = {"mwe-math-fallback-image-inline", "mwe-math-fallback-image-display"}
_TEX_STYLE = re.compile(r"\{\\(?:display|text|script|scriptscript)style\s*(.*)\}", re.S)
FORMULA = "mwe-math-element"  # the class of the element that holds a formula's MathML and its image


def formula_image(attrs: Mapping[str, str | None]) -> str | None:
    """The text of a formula's image (``_FORMULA_IMAGES``): its alt text, the formula's TeX, out of the style it is
    wrapped in ("x^{2}+y^{2}=z^{2}"); None for any other image. Wikipedia's MathML is hidden (``display: none``) and
    its image shown, so the alt text is the formula's only text a reader sees."""
    if _FORMULA_IMAGES.isdisjoint((attrs.get("class") or "").split()):
        return None
    alt = " ".join((attrs.get("alt") or "").split())
    return (styled.group(1) if (styled := _TEX_STYLE.fullmatch(alt)) else alt).strip()


def _formula_images_as_text(tree: Any) -> None:
    """Each formula's image (``formula_image``) made a <span> of its alt text where its formula (``FORMULA``) shows
    no MathML: trafilatura removes images, so a Wikipedia formula whose MathML a browser hides was lost ("The
    identity holds"); where the MathML is read (``_math_as_text``), the image is left out, as a browser shows one."""
    for image in list(tree.iter("img")):
        text = formula_image(image.attrib)
        if text is None:
            continue
        formula = next((up for up in image.iterancestors() if FORMULA in (up.get("class") or "").split()), None)
        if formula is not None and formula.find(".//math") is not None:
            continue
        image.tag, image.text = "span", text
        image.attrib.clear()


def _pre_as_code(tree: Any) -> None:
    """Wraps the content of each <pre> without a <code> in one: trafilatura reads a <pre> as code (its lines and
    indentation kept) only when its text looks like code to it ("{", "(\"", an indented line), and any other as a
    quotation on one line, so a configuration file, a shell session or a table set in <pre> lost its lines."""
    from lxml import etree

    for pre in tree.iter("pre"):
        if any(child.tag == "code" for child in pre):
            continue
        code = etree.SubElement(pre, "code")
        code.text, pre.text = pre.text, None
        code.extend(child for child in list(pre) if child is not code)


# elements that hold no text (their text is never shown)
_EMPTY = {"br", "hr", "img", "input", "wbr"}


def _bdo_as_shown(tree: Any) -> None:
    """Each <bdo>'s text as a reader reads it (``pdf_blocks.overrides_read``), before trafilatura reads the page,
    each line laid out on its own (a <br>, a <pre>'s line end and each block in it, ``BLOCK``, start one): a <bdo>
    inside it (its own direction) is marked with its override, so it is laid out as a browser lays it out. Each
    line's text is set in the first text of the line, the rest emptied: the elements stay, the blocks' paragraphs
    and headings too (the <bdo>'s text was made one line: "<p>cba</p><p>fed</p>" read "defabc"). One inside
    another is read with it, from the outer one (listed first: removed while the tree was walked, a <bdo> in a <bdo>
    ended the walk, the page's later ones left backwards)."""
    from lxml import etree

    inside: set[Any] = set()
    for bdo in list(tree.iter("bdo")):
        if bdo in inside:
            continue
        marked: list[str] = []
        slots: list[tuple[Any, str, int, int]] = []  # each text and tail in it: its element, which, its lines
        pre, line = int(any(up.tag == "pre" for up in bdo.iterancestors())), 0
        for event, el in etree.iterwalk(bdo, events=("start", "end")):
            start, override = event == "start", bdo_override(el.attrib) if el.tag == "bdo" else ""
            inside.add(el)
            pre += (el.tag == "pre") * (1 if start else -1)
            marked.append(("\n" if el.tag in BLOCK | CELL and (start or el.tag != "br") else "") + (
                override if start else POP_OVERRIDE if override else ""))
            line += marked[-1].count("\n")
            if (start and el.tag not in _EMPTY) or not (start or el is bdo):
                which = "text" if start else "tail"
                marked.append(_spaced(getattr(el, which), pre > 0))
                slots.append((el, which, line, line + marked[-1].count("\n")))
                line = slots[-1][3]
        text = "".join(marked)
        if text == overrides_read(text):
            continue
        lines, taken = overrides_read(text).split("\n"), 0
        for el, which, first, last in slots:  # each line's text in the first text on it, the others emptied
            shown = "\n".join(lines[taken:last + 1])
            setattr(el, which, "\n" + shown if first < taken <= last else shown)
            taken = max(taken, last + 1)
        for el in reversed(list(bdo.iterdescendants())):  # (an emptied link kept, trafilatura dropped its paragraph)
            if el.tag not in BLOCK | CELL | _EMPTY and not el.text and not len(el):
                el.drop_tree()  # (its tail stays)


def _spaced(text: str | None, pre: bool = False) -> str:
    """An element's text or tail, its line ends spaces (a <br> breaks a line; a new line in the source does not),
    but in a <pre> (``pre``), whose lines are shown as they are written."""
    text = (text or "").replace("\r\n", "\n").replace("\r", "\n")
    return text if pre else text.replace("\n", " ")


def ready_for_main_content(tree: Any) -> None:
    """``tree`` rewritten for trafilatura (the module's docstring), in place."""
    _bdo_as_shown(tree)
    _nested_tables_inline(tree)
    _clamp_spans(tree)
    _stack_header_rows(tree)
    _split_header_spans(tree)
    _split_row_spans(tree)
    _pre_as_code(tree)
    _times_as_text(tree)
    _formula_images_as_text(tree)
    _math_as_text(tree)
    _figures_as_text(tree)
    _tabs_as_text(tree)
    check_boxes_as_text(tree)
    _controls_as_text(tree)
    quotes_and_ruby_as_text(tree)
    list_numbers(tree)
