"""The streaming reader of HTML (``HTMLText``): paragraphs with their sections, the <title>, the first heading and <h1>,
and <meta> tags of an HTML page read whole, or of the HTML that Markdown renders to, for ``indexer.markup``: a table
row one paragraph of its cells (``indexer.html_tables``), a <pre> one of its lines, an ordered list's items after
their numbers, text a browser hides or does not show left out, as a browser's parser reads sloppy HTML.

    spanseek corpus from-files page.html notes.md --out corpus.jsonl
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from html.parser import HTMLParser

from spanseek.indexer.extracted import Sections
from spanseek.indexer.html_shown import (
    RUBY_BRACKETS,
    check_box,
    item_number,
    list_marker,
    list_start,
    quote_marks,
)
from spanseek.indexer.html_styles import StyleRules, shown_again
from spanseek.indexer.html_tables import Table
from spanseek.indexer.html_tree import (
    BLOCK,
    CELL,
    FIELDS,
    FORMULA,
    SHOWN_LATER,
    TABLE,
    bdo_override,
    cell_span,
    code_lines,
    formula_image,
    hidden_element,
    one_line,
    unread_link,
)
from spanseek.indexer.pdf_blocks import (
    MOST_OVERRIDES,
    POP_OVERRIDE,
)

# Elements whose text is not content: code and media; and in an HTML page (not Markdown's HTML) its navigation,
# asides and footer (boilerplate, as trafilatura drops it, where its main content is not read)
# (and text marked as deleted, <del>: an edit's removed text, as Word's tracked deletions are left out)
# (and a ruby annotation's <rp>, the brackets a browser shows around it where it cannot set it above its base: it reads
# in ``RUBY_BRACKETS`` whether or not the page gives them)
# (and a MathML formula's annotations, <annotation>: its TeX source, which a browser does not show)
_SKIP = {"script", "style", "noscript", "template", "svg", "canvas", "iframe", "object", "head", "del", "rp",
         "annotation", "annotation-xml"}
_BOILERPLATE = {"nav", "aside", "footer"}
# elements that have no end tag (nothing is inside them)
_VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "param", "source", "track", "wbr"}
# elements a browser's parser ends where another element starts ("<p>a<p>b", "<td>a<td>b"): each with the start
# tags that end it (a block ends a <p>) and the elements that, open inside it, keep it open (a list in a list item:
# its own items do not end it); where one is left open, the end of an element around it ends it ("</ul>", "</tr>")
_CELL_ENDS = frozenset({"td", "th", "tr", "thead", "tbody", "tfoot"})
_SELF_ENDING: dict[str, tuple[frozenset[str], frozenset[str]]] = {
    "p": (frozenset(BLOCK - {"br"}), frozenset()),
    "li": (frozenset({"li"}), frozenset({"ul", "ol", "menu"})),
    **dict.fromkeys(("dt", "dd"), (frozenset({"dt", "dd"}), frozenset({"dl"}))),
    **dict.fromkeys(("td", "th"), (_CELL_ENDS, frozenset({"table"}))),
    "tr": (_CELL_ENDS - {"td", "th"}, frozenset({"table"})),
    "option": (frozenset({"option", "optgroup"}), frozenset({"select", "datalist"})),
}
# the end tags of elements that hold blocks, items and cells: one that is not of an element open inside a hidden
# element is of one around it, and ends it where it is left open ("<li hidden>a</ul>")
_HOLDERS = frozenset(BLOCK | {"menu", "select", "datalist", "optgroup", "td", "th"})
# controls a reader sees apart, side by side: tabs ("Windows", "Linux"), buttons and their labels; written with no
# space between them, their words ran together ("WindowsLinux")
_APART = {"button", "label"}
_APART_ROLES = {"tab", "button"}
_HEADINGS = {"h1": 1, "h2": 2, "h3": 3, "h4": 4, "h5": 5, "h6": 6}


# an item's marker in a reversed list with no ``start``, which counts down from its number of items, known only at its
# end: held in the text as the marker's index between two of this noncharacter (which no text holds: the page's own
# are dropped), and filled in when the list ends (``HTMLText.close``)
_PENDING = "\ufdd1"
_PENDING_MARKER = re.compile(f"{_PENDING}(\\d+){_PENDING}")


@dataclass
class _OrderedList:
    """An open ordered list (<ol>) of the streaming reader: its attributes, its last item's number (None where it
    cannot be known yet: reversed, with no start), its items so far and the indexes of its items' pending markers
    (``_PENDING``: its first items, before any with a ``value``)."""

    attrs: Mapping[str, str | None]
    number: int | None
    items: int = 0
    pending: list[int] = field(default_factory=list)


def _apart(tag: str, attrs: Mapping[str, str | None]) -> bool:
    """Whether an element is a control a reader sees apart from the text beside it (``_APART``)."""
    return tag in _APART or bool(_APART_ROLES.intersection((attrs.get("role") or "").lower().split()))


class HTMLText(HTMLParser):
    """Collects paragraphs with their sections, the <title>, the first heading and <h1>, and <meta> tags of an HTML
    document: a table row is a paragraph of its cells (named by the header row), a <pre> one of its lines."""

    def __init__(self, page: bool = False, hidden: bool = False, styles: StyleRules | None = None) -> None:
        super().__init__(convert_charrefs=True)
        self.read_hidden = hidden  # whether elements a browser hides (``hidden_element``) are read too
        self.styles = styles  # the document's style sheets' rules that hide elements (an e-book's), if any
        self.skipped = _SKIP | _BOILERPLATE if page else _SKIP  # what an HTML page drops, not Markdown's HTML
        self.text = Sections()
        self.meta: dict[str, str] = {}
        self.title: str | None = None
        self.first_heading: str | None = None
        self.first_h1: str | None = None
        # the headings read inside a <form> (a comment form's "Leave a reply", a search box's): a form's, which
        # trafilatura drops with it as boilerplate, not a section of the page's own; and the <form>s open
        self.form_headings: set[str] = set()
        self._forms = 0
        # the first paragraph in a title's style (<p class="title">: a Google Docs export's title, which has no
        # <title>), and whether it is being read
        self.title_paragraph: str | None = None
        self._in_title_paragraph = False
        self._buf: list[str] = []
        self._skip: list[str] = []  # open elements whose text is dropped
        self._in_title = False
        self._title_buf: list[str] = []
        self._heading: str | None = None  # the heading element being read, if any
        self._tables: list[Table] = []  # the open tables, outermost first
        self._pre = 0  # open <pre> elements
        self._inline = 0  # open tables in a table's cell, read as its text
        self._hidden: list[str] = []  # a hidden element (``hidden_element``) being read, and the elements open inside it
        # where in ``_hidden`` an element hides all inside it (``display: none``, the ``hidden`` attribute, a sheet's
        # rule), None where ``visibility: hidden`` alone hides them: an element in it may show again (``_hide``)
        self._cut_at: int | None = None
        # each element shown again inside elements ``visibility: hidden`` hides, innermost last: the hidden elements
        # open around it (``_hidden`` when it started), and it with the elements open in it
        self._islands: list[tuple[list[str], list[str]]] = []
        self._apart: dict[str, int] = {}  # the open controls read apart (``_apart``): how many of each tag
        # where the last such control ended: the text it is in and that text's length then, so that the next one set
        # right after it reads apart from it
        self._control_end: tuple[list[str], int] | None = None
        # each open <a>: its attributes, the text it is in and from where, whether it holds or is in a <sup>; what
        # is read of it is dropped (``unread_link``) at its end
        self._links: list[tuple[Mapping[str, str | None], list[str], int, list[bool]]] = []
        # each open <bdo>'s override (``bdo_override``): its text is marked with it and read as shown (``one_line``); the
        # paragraphs and lines of a <bdo> that a block or <br> inside it starts are laid out as it lays them out,
        # marked with the overrides open (those the bidirectional algorithm nests: the rest are ignored there, and a
        # <br> in each of 100,000 nested <bdo> elements copied them all into each line); each open <bdo>'s override,
        # and whether it is one of those
        self._overrides: list[str] = []
        self._bdo: list[tuple[str, bool]] = []
        self._sup = 0  # open <sup> elements
        self._quotes = 0  # open <q> elements (``quote_marks``)
        self._guide: tuple[list[str], int] | None = None  # an open <rt>: the text it is in and where it starts
        self._lists: list[_OrderedList | None] = []  # the open lists, innermost last (None: an unordered one)
        self._marker = ""  # an ordered list's item's marker ("2. "), read before the item's first text
        self._markers: list[str] = []  # the markers of reversed lists' items (``_PENDING``), known at their lists' ends
        self.hidden_text = 0  # the characters (but spaces) of text not read because a browser hides it
        # the MathML formulas read, and how many had been where the formula (``FORMULA``) being read began: its image
        # (``formula_image``) reads where its MathML did not
        self._maths = 0
        self._formula: int | None = None

    def _flush(self, level: int = 0) -> None:
        raw = "".join(self._buf)
        self._buf = self._overrides.copy()
        self._links.clear()  # (none goes on into the next paragraph: see ``handle_endtag``)
        self._sup = 0  # nor a <sup> left open ("m<sup>2</p>"): the next paragraph's links are not in it
        self._quotes = 0  # (nor a <q>: its marks are not nested in the next paragraph's)
        self.text.add(code_lines(raw) if self._pre else one_line(raw), level)

    def _cell(self) -> list[str] | None:
        """The open cell's text of the innermost table, if a cell is open."""
        return self._tables[-1].cell if self._tables else None

    def _text(self) -> list[str]:
        """Where text read now goes: the open cell's, else the paragraph's."""
        cell = self._cell()
        return self._buf if cell is None else cell

    def _emit(self, rows: list[str]) -> None:
        for row in rows:
            self.text.add(row)

    def _table_tag(self, tag: str, start: bool, attrs: list[tuple[str, str | None]]) -> None:
        """A table, row or cell opening or closing: a row or cell left open ends where the next one starts, and text
        in a table outside its cells (a caption) is a paragraph of its own."""
        if tag not in CELL:
            self._flush()
        if (cell := self._cell()) is not None and (
                self._inline or (tag == "table" and start and self._tables[-1].headed)):
            # a table in a cell of a table with header cells (not a page's layout) reads in that cell's line, its
            # cells spaced, as Word reads one (and as ``html_tree._nested_tables_inline`` has trafilatura read one)
            self._inline += (tag == "table") * (1 if start else -1)
            cell.append(" ")
            return
        if tag == "table" and start:
            self._tables.append(Table())
            return
        if not self._tables:  # a row or cell outside any table: a line, its cells spaced
            if tag in CELL:
                self._buf.append(" ")
            return
        table = self._tables[-1]
        if tag == "table":
            self._tables.pop()
            self._emit(table.end_row() + table.rows.end())
        elif tag in CELL:
            table.end_cell()
            if start:
                table.cell, table.head = [], tag == "th" or table.in_thead
                table.span, table.rowspan = (cell_span(dict(attrs).get(name)) for name in ("colspan", "rowspan"))
        else:  # tr, thead, tbody, tfoot
            self._emit(table.end_row())
            if tag != "tr":
                table.in_thead = start and tag == "thead"

    def _shown(self, tag: str, attrs: Mapping[str, str | None]) -> bool:
        """Whether an element is read: hidden elements are read too (``read_hidden``), or it is not hidden, by its
        attributes (``hidden_element``) or by the document's style sheets (``styles``)."""
        return self.read_hidden or not (hidden_element(attrs) or (self.styles is not None and self.styles.hides(
            tag, attrs)))

    def _hide(self, tag: str, attrs: list[tuple[str, str | None]]) -> bool:
        """Whether a start tag is in a hidden element (``hidden_element``) or opens one, keeping count of the elements open
        in it: its text is not read. A tag that ends it as a browser would (``_SELF_ENDING``) ends it, as does (in
        ``handle_endtag``) the end of an element around it where it is left open."""
        named = dict(attrs)
        if self._hidden and self._hidden[0] in _SELF_ENDING:
            ends, keeps = _SELF_ENDING[self._hidden[0]]
            if tag in ends and keeps.isdisjoint(self._hidden[1:]):
                self._close_hidden(0)
        cuts = hidden_element(named, visibility=False) or (self.styles is not None and self.styles.hides(tag, named))
        if (self._hidden and self._cut_at is None and tag not in _VOID and not cuts
                and shown_again(named.get("style") or "")):  # visibility: visible inside visibility: hidden
            self._islands.append((self._hidden, []))
            self._hidden = []
        if tag not in _VOID and (self._hidden or (tag not in SHOWN_LATER and not self._shown(tag, named))):
            if cuts and self._cut_at is None:
                self._cut_at = len(self._hidden)
            self._hidden.append(tag)
        elif tag not in _VOID and self._islands:
            self._islands[-1][1].append(tag)
        return bool(self._hidden)

    def _close_hidden(self, keep: int) -> None:
        """Ends the hidden elements open in ``_hidden`` from its ``keep``-th on."""
        del self._hidden[keep:]
        if self._cut_at is not None and self._cut_at >= keep:
            self._cut_at = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        shown = not self._hidden
        if self._hide(tag, attrs):
            if shown and tag in BLOCK and self._cell() is None:  # a hidden block still ends the paragraph before it
                self._flush()
            return
        named = dict(attrs)
        if tag in FIELDS:
            self._text().append(" ")
        if _apart(tag, named):
            self._apart[tag] = self._apart.get(tag, 0) + 1
            text = self._text()
            if self._control_end is not None and self._control_end[0] is text and self._control_end[1] == len(text):
                text.append(" ")  # right after another control, nothing between them: "Windows Linux"
        if tag == "a":
            self._links.append((named, self._text(), len(self._text()), [self._sup > 0]))
        elif tag == "bdo":
            override = bdo_override(named)
            self._bdo.append((override, bool(override) and len(self._overrides) <= MOST_OVERRIDES))
            self._overrides += [override] if self._bdo[-1][1] else []
            self._text().append(override)
        if tag in ("rt", "rp"):  # each ends an <rt> or <rp> left open before it
            self._end_guide()
        if tag == "q" and not self._skip:
            self._put(quote_marks(self._quotes)[0])
            self._quotes += 1
        elif tag == "rt" and not self._skip:
            self._guide = (self._text(), len(self._text()))
            self._text().append(RUBY_BRACKETS[0])
        if tag == "sup":
            self._sup += 1
            for _, _, _, superscript in self._links[-1:]:
                superscript[0] = True
        if tag == "meta":
            key, content = named.get("name") or named.get("property"), named.get("content")
            if key and content is not None:
                self.meta[key.lower()] = content
        elif tag == "title":
            self._in_title = True
        elif tag == "body" and "head" in self._skip:  # a <head> left open ends where the body starts
            self._skip.remove("head")
        elif tag in self.skipped:
            self._skip.append(tag)
        elif tag in TABLE or tag in CELL:
            self._table_tag(tag, True, attrs)
        elif tag in BLOCK and (cell := self._cell()) is not None:  # a block in a cell: a space in its line
            cell.append(" ")
        elif tag == "br" and self._pre:
            self._buf.append("\n")
        elif tag in BLOCK:
            self._flush()
            if tag in _HEADINGS:
                self._heading = tag
            self._pre += tag == "pre"
            self._in_title_paragraph = tag == "p" and self.title_paragraph is None and "title" in (
                named.get("class") or "").split()
        self._forms += tag == "form"
        if tag in ("ol", "ul", "menu"):
            self._lists.append(_OrderedList(named, list_start(named, None)) if tag == "ol" else None)
        elif tag == "input" and (box := check_box(named)) and not self._skip and self._shown(
                tag, named):  # (a void element: ``_hide`` passes it)
            self.handle_data(box)
        elif tag == "img" and (formula := formula_image(named)) is not None and not self._skip and self._shown(
                tag, named):
            if self._formula is None or self._formula == self._maths:  # its formula's MathML not read
                self.handle_data(formula)
            self._formula = None
        elif tag == "math" and not self._skip:
            self._maths += 1
        elif FORMULA in (named.get("class") or "").split():
            self._formula = self._maths
        elif tag == "li" and self._lists and (ordered := self._lists[-1]) is not None:
            ordered.number = item_number(named, ordered.attrs, ordered.number)
            ordered.items += 1
            if self._skip:
                self._marker = ""
            elif ordered.number is not None:
                self._marker = list_marker(ordered.number, ordered.attrs)
            else:  # counting down from its list's items, not all read yet
                ordered.pending.append(len(self._markers))
                self._marker = f"{_PENDING}{len(self._markers)}{_PENDING}"
                self._markers.append("")

    def _end_list(self) -> None:
        """The innermost open list ends: the markers of its items that count down from its number of items are known
        (as a browser numbers them, the first item that number, each next one less)."""
        ordered = self._lists.pop()
        if ordered is not None:
            for k, index in enumerate(ordered.pending):
                self._markers[index] = list_marker(ordered.items - k, ordered.attrs)

    def _end_guide(self) -> None:
        """An open ruby annotation (<rt>) or <rp> ends: the annotation's bracket closed, or the bracket dropped where it
        read nothing."""
        if "rp" in self._skip:
            self._skip.remove("rp")
        if self._guide is not None:
            within, start = self._guide
            if within is self._text() and not "".join(within[start + 1:]).strip():
                del within[start:]
            else:
                self._text().append(RUBY_BRACKETS[1])
            self._guide = None

    def _put(self, text: str) -> None:
        """``text`` read into the paragraph or cell, after the list item's marker where it is the item's first."""
        if self._marker and text.strip():
            self._text().append(self._marker)
            self._marker = ""
        self._text().append(text)

    def handle_endtag(self, tag: str) -> None:
        if self._islands and not self._hidden:  # in an element shown again inside hidden ones (``_hide``)
            around, open_ = self._islands[-1]
            if tag in open_:
                del open_[len(open_) - 1 - open_[::-1].index(tag):]
            if not open_ or tag in around:  # its end (or, left open, the end of a hidden one around it)
                self._islands.pop()
                if open_:  # (the hidden element's end is read as such)
                    self._hidden = around
                else:
                    self._end(tag)
                    self._hidden = around
                    return
        self._end(tag)

    def _end(self, tag: str) -> None:
        if self._hidden:
            if tag in self._hidden:  # close up to the matching element, as ``_skip`` does
                self._close_hidden(len(self._hidden) - 1 - self._hidden[::-1].index(tag))
                return
            if tag not in _HOLDERS and self._hidden[0] in BLOCK:
                return
            # a hidden element left open ("<li hidden>a</ul>", "<span hidden>a</p>") ends with the element around
            # it; an inline one ("<b><span hidden>a</b>") with any element around it
            self._close_hidden(0)
        self._sup -= tag == "sup" and self._sup > 0
        self._forms -= tag == "form" and self._forms > 0
        if tag in FIELDS:
            self._text().append(" ")
        if tag in ("rt", "rp", "ruby"):
            self._end_guide()
        elif tag == "q" and self._quotes and not self._skip:
            self._quotes -= 1
            self._text().append(quote_marks(self._quotes)[1])
        if tag in ("ol", "ul", "menu", "li"):
            self._marker = ""  # (an item with no text)
            if tag != "li" and self._lists:
                self._end_list()
        if tag == "a" and self._links:
            attrs, within, start, (superscript,) = self._links.pop()
            if within is self._text() and unread_link(attrs, "".join(within[start:]), superscript):
                del within[start:]  # (a block inside it ended the paragraph: its lines are read)
        elif tag == "bdo" and self._bdo:
            override, kept = self._bdo.pop()
            del self._overrides[len(self._overrides) - kept:]
            self._text().append(POP_OVERRIDE if override else "")
        if self._apart.get(tag):  # (after its text is joined, above: the length compared is the one it keeps)
            self._apart[tag] -= 1
            self._control_end = (self._text(), len(self._text()))
        if tag == "title":
            self._in_title = False
            self.title = self.title or one_line("".join(self._title_buf)) or None
        elif tag in self.skipped:
            if tag in self._skip:  # close up to the matching element (HTML in the wild is not always nested)
                del self._skip[len(self._skip) - 1 - self._skip[::-1].index(tag):]
        elif tag == "math":  # an annotation left open ends with its formula
            self._skip = [open_ for open_ in self._skip if not open_.startswith("annotation")]
        elif tag in TABLE or tag in CELL:
            self._table_tag(tag, False, [])
        elif tag in BLOCK and (cell := self._cell()) is not None:
            cell.append(" ")
        elif tag in BLOCK and not (tag == "br" and self._pre):  # <br/> is a start and an end: in <pre>, a new line
            level = 0
            if tag in _HEADINGS and self._heading == tag:
                text = one_line("".join(self._buf))
                self.first_heading = self.first_heading or text or None
                if tag == "h1":
                    self.first_h1 = self.first_h1 or text or None
                if self._forms:
                    self.form_headings.add(text)
                self._heading, level = None, _HEADINGS[tag]
            if tag == "p" and self._in_title_paragraph:
                self.title_paragraph, self._in_title_paragraph = one_line("".join(self._buf)) or None, False
            self._flush(level)
            if tag == "pre" and self._pre:
                self._pre -= 1

    def handle_data(self, data: str) -> None:
        if self._in_title:
            self._title_buf.append(data)
        elif not self._skip and not self._hidden:
            self._put(data.replace(_PENDING, "") if _PENDING in data else data)
        elif not self._skip and self.cdata_elem is None:  # hidden text (not a hidden <script>'s code)
            self.hidden_text += len(data) - sum(map(data.count, " \t\n\r\f"))

    def parse_html_declaration(self, i: int) -> int:
        try:
            return super().parse_html_declaration(i)
        except AssertionError:  # "<![" not followed by a name: Python's parser asserts; a browser skips it to its ">"
            end = self.rawdata.find(">", i)
            return -1 if end < 0 else end + 1

    def close(self) -> None:
        # after the page's last ">", every "<" opens a construct never closed ("<!--", "<?", "<p title=...), which
        # Python's parser gives as text, searching to the page's end once for each: 200 KB of "<?" took 16 s
        tail = self.rawdata.rfind(">") + 1
        self.rawdata = self.rawdata[:tail] + self.rawdata[tail:].replace("<", "&lt;")
        super().close()
        while self._tables:  # tables left open end with the document
            self._table_tag("table", False, [])
        self._flush()
        while self._lists:  # as do lists
            self._end_list()
        if self._markers:
            def filled(text: str) -> str:
                return _PENDING_MARKER.sub(lambda found: self._markers[int(found.group(1))], text)

            self.text.rewrite(filled)
            self.first_heading, self.first_h1, self.title_paragraph = (
                None if text is None else filled(text)
                for text in (self.first_heading, self.first_h1, self.title_paragraph))
