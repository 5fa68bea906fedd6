"""What the PDF layout modules share (``indexer.pdf_layout``): a text box's lines and their text, and ``Block``.

A line's text is its glyphs' in reading order: a line of a right-to-left script (Hebrew, Arabic), which a PDF holds
as it is shown, is turned back (``logical``). ``Block`` is one paragraph of a page as extracted (``Block.of`` a run
of boxes, ``pdf_paragraphs.paragraphs``); ``body_size``, ``bold_body`` and ``heading`` measure the type of a
document's blocks; ``text_string`` reads a PDF text string (a title, a bookmark's, a form field's value), for the
other PDF modules too. It works on anything with pdfminer's coordinates (``x0``, ``x1``, ``y0``, ``y1``: points, y
upwards) and ``get_text()``; ``spanseek corpus from-files`` runs it on each PDF.
"""

from __future__ import annotations

import contextlib
import itertools
import re
import unicodedata
import weakref
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

# a bold font's name: "Helvetica-Bold", "ABCDEF+DejaVuSans-Bold", "Arial,Bold", "Roboto-Black", "Inter-Heavy"
_BOLD_FONT = re.compile(r"bold|black|heavy", re.I)
# a monospaced font's name, a code listing's: "Courier", "DejaVuSansMono", "Consolas", "Menlo", "SourceCodePro"
_MONOSPACED_FONT = re.compile(r"mono|courier|consola|menlo|inconsolata|typewriter|sourcecode|lucidaconsole", re.I)
# a heading is set in type at least this many times the body's size (or in bold), in at most this many lines and words
HEADING_SIZE = 1.15
HEADING_LINES = 3
HEADING_WORDS = 25
# a subscript or superscript (``script_shift``) is set in type under this many times the size of the glyph before it,
# at most this many times that size to its right (or overlapping it)
SCRIPT_SIZE = 0.85
SCRIPT_GAP = 0.3


# a PDF text string's byte-order marks and their encodings: UTF-16BE (PDF 1.x), UTF-8 (PDF 2.0), and UTF-16LE (not
# in the standard, but written by some programs, and read by viewers); without one it is in PDFDocEncoding
_TEXT_BOMS = ((b"\xfe\xff", "utf-16-be"), (b"\xef\xbb\xbf", "utf-8"), (b"\xff\xfe", "utf-16-le"))
# a language tag inside a Unicode text string (ESC, the language and country codes, ESC): shown by no viewer
_LANGUAGE_ESCAPE = re.compile("\x1b[^\x1b]{0,8}\x1b")


def text_string(value: bytes) -> str:
    """A PDF text string (a title, a bookmark's, a form field's value) as text: in the encoding its byte-order mark
    names (``_TEXT_BOMS``; pdfminer's ``decode_text`` knew only UTF-16BE's, and a bookmark in UTF-8 read "ï»¿HÃ¤fen"),
    else in PDFDocEncoding; its language tags left out."""
    from pdfminer.utils import decode_text

    for mark, encoding in _TEXT_BOMS:
        if value.startswith(mark):
            return _LANGUAGE_ESCAPE.sub("", value[len(mark):].decode(encoding, "replace"))
    return decode_text(value)


def lines(box: Any) -> list[Any]:
    """A text box's lines (a box without lines is its own one)."""
    return [line for line in box if hasattr(line, "y0")] or [box]


def text(box: Any) -> str:
    """A box's text, its lines "\\n" apart, each in logical order (``logical``)."""
    return "".join(line_text(line) for line in lines(box))


def line_text(line: Any) -> str:
    """A line's text (``text``), a footnote's marks dropped (``_without_marks``). Read once for each line (``_read``):
    the layout's steps each ask for it, and a page of a thousand lines of a thousand glyphs read each glyph some
    five times over."""
    try:
        return _read[line]
    except (KeyError, TypeError):  # (TypeError: an object that cannot be weakly referred to: read each time)
        pass
    plain = line.get_text()
    read = logical(_glyphs(line)) if _RTL_LETTER.search(plain) else _without_marks(line, plain)
    with contextlib.suppress(TypeError):
        _read[line] = read
    return read


# each line's text (``line_text``), as long as the line is in memory: a page's lines, once laid out, do not change
_read: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()


# a footnote's mark: a superscript (``script_shift``) of digits or reference signs, set right after a word of three
# letters or more, after punctuation or after a number no power is written of (``_MARKED_NUMBER``), and before no
# letter or digit: "Gala¹," read "Gala1," and a search for the word missed it. A superscript after a shorter word, a
# small number or a bracket, or before an operator, is an exponent, kept: "m²", "km²", "10⁵", "2¹⁶", "(a+b)² = c",
# "GeV² = 1"; after a number or a bracket it reads with a caret, as plain text writes a power ("10^5", "(a+b)^2":
# "105" was another number), after a letter as it is set ("km2", as Wikipedia's text has it); a superscript of letters
# (an ordinal's "1st") is part of its word. Type size and height tell a mark from an exponent nothing: word
# processors, LaTeX and fpdf2 set both alike
_MARKS = frozenset("0123456789*\u2020\u2021\u00a7")
_MARKED = re.compile(r"(?:(?<![^\W\d_])[^\W\d_]{3,}|[.,;:%\"'\u201d\u2019])$")
# a number a superscript after which is a footnote's mark: one of three digits or more or with thousands separators
# (a year, an amount: "in 1990¹", "23,800¹ tonnes"; a power's base is 10 or a small number: "10⁵", "2¹⁶", "3²"),
# a number of 100 or more before an operator aside ("100² = 10,000"); and any number before a reference sign
# ("1854†"), which no power is
_MARKED_NUMBER = re.compile(r"(?<![\w.,^])(?:(?:\d{1,3}(?:,\d{3})+|\d{3,})(?:\.\d+)?|\d+\.\d+)$")
_SIGNS = frozenset("*\u2020\u2021\u00a7")
_OPERATORS = frozenset("=+\u2212\u00d7\u00b7/<>\u2264\u2265")
_POWER = re.compile(r"[-+\u2212]?\d+")
_POWER_BASE = frozenset("0123456789)]")


def _marked(before: str) -> bool:
    """Whether a superscript after this text (a line's up to it) is a footnote's mark by what it follows: a word,
    punctuation (``_MARKED``) or a number no power is written of (``_MARKED_NUMBER``)."""
    return bool(_MARKED.search(before[-4:]) or _MARKED_NUMBER.search(before))


def _without_marks(line: Any, plain: str) -> str:
    """A line's text ``plain`` without its footnotes' marks (``_MARKS``), where its glyphs are placed."""
    glyphs = [c for c in line if hasattr(c, "get_text")] if hasattr(line, "__iter__") else []
    ups, base = [], None  # whether each glyph is a superscript's; the glyph of the line's type before it
    for glyph in glyphs:
        up = base is not None and hasattr(glyph, "size") and (getattr(glyph, "script_shift", 0.0) < 0 or (
            glyph.size < SCRIPT_SIZE * base.size and glyph.y0 - base.y0 > 0.2 * base.size))
        ups.append(up)
        base = base if up or not hasattr(glyph, "size") else glyph
    if not any(ups):
        return plain
    texts, k = [g.get_text() for g in glyphs], 0
    raised = [up and t in _MARKS for up, t in zip(ups, texts, strict=True)]
    while k < len(texts):
        end = next((j for j in range(k, len(texts)) if not raised[j]), len(texts))
        after, before = "".join(texts[end:end + 3]), "".join(texts[max(0, k - 16):k])
        anchored = (_marked(before) or (before[-1:].isdigit() and all(t in _SIGNS for t in texts[k:end]))
                    or (before[-1:] == ")" and _marked(before[:-1])))
        if end > k and anchored and not after[:1].isalnum() and after.lstrip()[:1] not in _OPERATORS:
            texts[k:end] = [""] * (end - k)
        k = end + 1
    for up, run in itertools.groupby(range(len(texts)), key=lambda j: ups[j]):  # the exponents kept
        first = next(run)
        if (up and first and texts[first - 1][-1:] in _POWER_BASE
                and _POWER.fullmatch("".join(texts[j] for j in (first, *run)))):
            texts[first] = "^" + texts[first]
    return "".join(texts)


def _glyphs(line: Any) -> list[str]:
    """A line's text, a string per glyph (a ligature's glyph may stand for two letters, in their reading order), as
    the PDF places them from left to right. Glyphs placed from right to left (the PDF holds a right-to-left line in
    reading order already) are one string: ``logical`` leaves it as it is."""
    children = [c for c in line if hasattr(c, "get_text")] if hasattr(line, "__iter__") else []
    placed = [c.x0 for c in children if hasattr(c, "x0")]
    if not children or (len(placed) > 1 and placed[-1] < placed[0]):
        return [line.get_text()]
    return [c.get_text() for c in children]


_MIRRORED = str.maketrans("()[]{}<>", ")(][}{><")
# the blocks of the right-to-left scripts (Hebrew, Arabic, Syriac, Thaana, NKo, ...) and their presentation forms
_RTL_LETTER = re.compile("[\u0590-\u08ff\ufb1d-\ufdff\ufe70-\ufefc]")


def _ltr(c: str) -> bool:
    return unicodedata.bidirectional(c[:1]) in ("L", "EN", "AN")


def right_to_left(line: str) -> bool:
    """Whether a line as shown is one of a right-to-left script (Arabic, Hebrew, ...): its letters at both ends are
    of such a script (where it starts and where it ends), or, where one end's is not, most of its letters are."""
    if not _RTL_LETTER.search(line):
        return False
    strong = [c for c in map(unicodedata.bidirectional, line) if c in ("L", "R", "AL")]
    ends = (strong[0] != "L") + (strong[-1] != "L")
    return ends == 2 or (ends == 1 and 2 * sum(c != "L" for c in strong) > len(strong))


def logical(glyphs: Sequence[str]) -> str:
    """A line's text from its glyphs' texts, a line of a right-to-left script in the order it is read. A PDF holds
    such a line as it is shown (left to right: "ةيلامشلا" for "الشمالية"), so its glyphs are reversed, except its
    runs of left-to-right text (Latin words, numbers), which are shown in reading order already; brackets are
    mirrored back. Presentation forms (a letter's shape at the start, middle or end of a word) become the letters
    they show. Other lines are their glyphs' texts as they are."""
    line = "".join(glyphs)
    if len(glyphs) < 2 or not right_to_left(line):
        return line
    body = [g.translate(_MIRRORED) for g in reversed(glyphs) if g.strip() or g == " "]
    while body and body[0] == " ":
        body.pop(0)
    while body and body[-1] == " ":
        body.pop()
    out, i = [], 0
    while i < len(body):
        if not _ltr(body[i]):
            out.append(body[i])
            i += 1
            continue
        end = j = i  # a left-to-right run: from i to its last left-to-right glyph, neutrals inside it
        while j < len(body) and (_ltr(body[j]) or body[j] in (" ", ".", ",", ":", "/", "-", "+", "%")):
            end = j if _ltr(body[j]) else end
            j += 1
        out += [g.translate(_MIRRORED) for g in reversed(body[i:end + 1])]
        i = end + 1
    text = "".join(unicodedata.normalize("NFKC", c) if "\ufb50" <= c <= "\ufdff" or "\ufe70" <= c <= "\ufeff"
                   else c for c in "".join(out))
    return text + "\n" if line.endswith("\n") else text


# the explicit overrides of Unicode's bidirectional algorithm: text after LRO shown left to right, after RLO right to
# left, whatever its script, each to its PDF ("pop") or the text's end; HTML's <bdo dir="ltr"> and <bdo dir="rtl">
LTR_OVERRIDE, RTL_OVERRIDE, POP_OVERRIDE = "\u202d", "\u202e", "\u202c"
MOST_OVERRIDES = 125  # the deepest level the algorithm nests them to (its max_depth): those deeper are ignored


def overrides_read(text: str) -> str:
    """Text holding explicit direction overrides (``LTR_OVERRIDE`` ... ``POP_OVERRIDE``, nested as <bdo> elements
    nest; "\\n" a line break) as a reader reads it, the overrides left out: each line's overridden runs shown as
    Unicode's bidirectional algorithm lays them out (its rules X1-X10 for overrides, L2 and L4: a run inside
    another reversed, or not, as its level says; brackets mirrored where shown right to left), then read from
    left to right as shown, so a word of a left-to-right script shown right to left reads backwards ("olleh"
    shows "hello"), while a line of a right-to-left script reads as written (``logical``, which reads a line as
    shown). Spacing at either end of a run stays where it is. Text outside any override is read as written."""
    if LTR_OVERRIDE not in text and RTL_OVERRIDE not in text:
        return text.replace(POP_OVERRIDE, "")
    pieces: list[tuple[str, int]] = []  # the text between overrides and line breaks, each at its embedding level
    stack, overflow = [0], 0  # (levels: 0 outside any override; odd, shown right to left)
    for piece in _OVERRIDE_OR_LINE.split(text):
        if piece in (LTR_OVERRIDE, RTL_OVERRIDE):
            level = stack[-1] + 2 - stack[-1] % 2 if piece == LTR_OVERRIDE else stack[-1] + 1 + stack[-1] % 2
            if level <= MOST_OVERRIDES and not overflow:
                stack.append(level)
            else:
                overflow += 1
        elif piece == POP_OVERRIDE:
            if overflow:
                overflow -= 1
            elif len(stack) > 1:
                stack.pop()
        elif piece:
            pieces.append((piece, stack[-1] if piece != "\n" else 0))
    out, i = [], 0
    while i < len(pieces):  # runs of text outside overrides, and inside them (on one line)
        j = i + 1
        while j < len(pieces) and (pieces[j][1] > 0) == (pieces[i][1] > 0):
            j += 1
        out.append(_shown_run(pieces[i:j]) if pieces[i][1] else "".join(piece for piece, _ in pieces[i:j]))
        i = j
    return "".join(out)


_OVERRIDE_OR_LINE = re.compile(f"([{POP_OVERRIDE}{LTR_OVERRIDE}{RTL_OVERRIDE}\n])")


def _shown_run(pieces: list[tuple[str, int]]) -> str:
    """A run of overridden text, pieces at their levels (all above 0), read as shown (``overrides_read``)."""
    order = list(range(len(pieces)))
    # rule L2: from the highest level down to 1, each stretch of pieces that high reversed; between two levels the
    # run has, each pass reverses the same stretches, so an odd number of them reverses them once, an even none
    levels = sorted({level for _, level in pieces}, reverse=True)
    for high, low in itertools.pairwise([*levels, 0]):
        if (high - low) % 2 == 0:
            continue
        i = 0
        while i < len(order):
            j = i
            while j < len(order) and pieces[order[j]][1] >= high:
                j += 1
            order[i:j] = order[i:j][::-1]
            i = j + 1
    # a piece's characters are reversed once for each level up to its own (L2), and mirrored at odd levels (L4)
    shown = [pieces[k][0][::-1].translate(_MIRRORED) if pieces[k][1] % 2 else pieces[k][0] for k in order]
    core, written = "".join(shown).strip(), "".join(piece for piece, _ in pieces)
    lead, trail = written[:len(written) - len(written.lstrip())], written[len(written.rstrip()):]
    return lead + logical(list(core)) + trail if core else written


# a contents page's entry: its title, a leader (four dots or more, spaced or not; "…") and its page's number. A
# match starts where a run of spaces and dots does ((?<!...)) and takes them possessively: tried from each dot of a
# line of dots, each try running to its end, a line of 100,000 took minutes
_LEADER = re.compile(r"(?<![\s.\u2024\u00b7\u2026])\s*+(?:[.\u2024\u00b7\u2026]\s*+){4,}+(\d{1,4}|[ivxlc]{1,6})\s*$")


def contents(text: str) -> bool:
    """Whether each line of a text (lines "\\n" apart) is an entry of a contents page: its title, a leader of dots
    and its page's number ("Chapter 1 The harbour ........ 3")."""
    entries = text.splitlines()
    return bool(entries) and all(_LEADER.search(entry) for entry in entries)


def run_lines(run: Sequence[Any]) -> str:
    """The lines of a run of boxes (``pdf_paragraphs.paragraphs``) as they are set: a row's cells one space apart, a
    box's lines one line."""
    joined = text(run[0])
    for a, b in itertools.pairwise(run):
        joined = f"{joined.rstrip()} {text(b)}" if same_row(a, b) else joined + text(b)
    return joined


def run_text(run: Sequence[Any]) -> str:
    """The text of a run of boxes: its lines (``run_lines``), the leaders of a contents page's or an index's entries
    dropped; a contents page's entries (``contents``) "; " apart ("Chapter 1 The harbour 3; Chapter 2 The pilots
    7")."""
    joined = run_lines(run)
    entries = [_LEADER.sub(r" \1", line) for line in joined.splitlines()]
    return ("; " if contents(joined) else "\n").join(entries) + "\n" * joined.endswith("\n")

def same_row(a: Any, b: Any) -> bool:
    """Whether box ``b`` goes on the row of one-line box ``a``: a one-line box to its right on its baseline, in type
    of its size (the next cell of a table's row)."""
    height = a.y1 - a.y0
    return (len(lines(a)) == len(lines(b)) == 1 and b.x0 >= a.x1 - 0.1 * height
            and abs(a.y0 - b.y0) <= 0.3 * height and abs(height - (b.y1 - b.y0)) <= 0.3 * height)


@dataclass
class Block:
    """One paragraph of a page as extracted: its raw text (lines "\\n" apart), where it lies and its type size."""

    text: str
    x0: float
    y0: float
    x1: float
    y1: float
    size: float  # the height of its tallest line: about its type size, in points
    large: str  # its first lines in that size (a title's, where the lines after it are its authors')
    cells: tuple[tuple[str, float, float], ...] = ()  # a table row's cells (text, x0, x1), left to right; else ()
    bold: bool = False  # every glyph of it is in a bold font
    item: bool = False  # it opens a list's item (``pdf_paragraphs.split_items``)
    column: bool = False  # it is read right after the foot of the column before it (``pdf_layout.reading_order``)
    # the room at the end of its last line where that is full, and the width of its first line's first word where
    # that starts flush left (``pdf_paragraphs.flow_ends``): whether it runs on over a page's or column's foot
    room: float | None = None
    opening: float | None = None
    entries: bool = False  # it is a contents page's entries (``contents``): a paragraph runs neither into nor out of it

    @classmethod
    def of(cls, run: Sequence[Any], column: bool = False,
           flow: tuple[float | None, float | None] = (None, None)) -> Block:
        """The block of a run of boxes (``pdf_paragraphs.paragraphs``), its text ``run_text``; ``column``: it opens a column after the first; ``flow``: its ``room`` and ``opening``."""
        joined = run_text(run)
        every = [line for box in run for line in lines(box)]
        size = max(line.y1 - line.y0 for line in every)
        large = itertools.takewhile(lambda line: line.y1 - line.y0 >= 0.85 * size,
                                    itertools.dropwhile(lambda line: line.y1 - line.y0 < 0.85 * size, every))
        row = len(run) > 1 and all(same_row(a, b) for a, b in itertools.pairwise(run))
        return cls(joined, min(b.x0 for b in run), min(b.y0 for b in run), max(b.x1 for b in run),
                   max(b.y1 for b in run), size, "".join(line_text(line) for line in large),
                   tuple((" ".join(text(b).split()), b.x0, b.x1) for b in run) if row else (),
                   all_bold(every), getattr(run[0], "item", False), column, *flow, contents(run_lines(run)))


def script_shift(before: Any, char: Any) -> float:
    """How far to move glyph ``char`` up (points; down where negative) to set it on the line of ``before``, the glyph
    set right before it: a subscript or superscript ("CO₂", a footnote's mark "manual¹²"), in type smaller than
    ``SCRIPT_SIZE`` times ``before``'s and set right after it, less than its size above or below. pdfminer puts
    glyphs on a line only where their boxes overlap by half; a script set further off was a line of its own, and
    the text after it another, which cut the paragraph. A script's next glyph in its type goes with it (``CO₁₂``).
    0 for any other glyph."""
    if not (getattr(before, "upright", False) and getattr(char, "upright", False)):
        return 0.0
    size, gap = before.size, char.x0 - before.x1
    if not -SCRIPT_GAP * size <= gap <= SCRIPT_GAP * size:
        return 0.0
    shifted = getattr(before, "script_shift", 0.0)
    if shifted and abs(char.size - before.size) <= 0.05 * size and abs(char.y0 + shifted - before.y0) <= 0.05 * size:
        return float(shifted)  # the next glyph of a script set on the line already
    overlap = min(before.y1, char.y1) - max(before.y0, char.y0)
    if char.size >= SCRIPT_SIZE * size or overlap >= 0.5 * char.size or not (
            before.y0 - size < char.y0 < before.y1 and before.y0 < char.y1 < before.y1 + size):
        return 0.0
    return float(before.y0 - char.y0)


def all_bold(lines_: Iterable[Any]) -> bool:
    """Whether every glyph of these lines is in a bold font (and there is one)."""
    return _all_in(lines_, _BOLD_FONT)


def monospaced(lines_: Iterable[Any]) -> bool:
    """Whether every glyph of these lines is in a monospaced font (and there is one): a code listing's."""
    return _all_in(lines_, _MONOSPACED_FONT)


def _all_in(lines_: Iterable[Any], font: re.Pattern[str]) -> bool:
    """Whether every glyph of these lines (but spaces) is in a font whose name ``font`` finds (and there is one)."""
    glyphs = [g for line in lines_ if hasattr(line, "__iter__") for g in line if g.get_text().strip()]
    return bool(glyphs) and all(font.search(getattr(g, "fontname", "")) for g in glyphs)


def body_size(pages: Sequence[tuple[Sequence[Block], float, float]]) -> int:
    """The type size (rounded) most of a document's characters are set in: its body text's."""
    sizes = Counter[int]()
    for blocks, _, _ in pages:
        for block in blocks:
            sizes[round(block.size)] += len(block.text)
    return sizes.most_common(1)[0][0] if sizes else 0


def bold_body(pages: Sequence[tuple[Sequence[Block], float, float]]) -> bool:
    """Whether most of a document's characters are in bold type: then bold sets nothing apart (``heading``)."""
    bold = total = 0
    for blocks, _, _ in pages:
        for block in blocks:
            total += len(block.text)
            bold += len(block.text) * block.bold
    return 2 * bold > total


def heading(block: Block, body: int, bold_text: bool = False) -> bool:
    """Whether a block is set apart as a heading: at most ``HEADING_LINES`` lines and ``HEADING_WORDS`` words, not a
    table's row, in type clearly larger than the body's (``HEADING_SIZE`` times ``body``: ``body_size``) or in bold
    where the body is not (``bold_text``: ``bold_body``). A heading is a paragraph of its own: neither the text
    before it (on its page or the one before) nor the text after it goes on into it."""
    lines_ = block.text.strip().count("\n") + 1
    return (not block.cells and lines_ <= HEADING_LINES and len(block.text.split()) <= HEADING_WORDS
            and any(c.isalpha() for c in block.text)
            and (block.size >= HEADING_SIZE * body or (block.bold and not bold_text)))
