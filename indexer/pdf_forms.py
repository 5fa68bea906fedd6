"""A PDF form's filled-in fields (AcroForm) -> glyphs on their page, for ``indexer.pdf_file``'s aggregator, so that a
filled form reads as a reader sees it: each value where its field's widget is, in the page's reading order
("Name: Ada Lovelace"), not the empty form. pdfminer draws a page's content only, and a viewer draws a field's value
over it (the widget annotation's appearance), so the values a user typed in, ticked or chose were lost.

    spanseek corpus from-files form.pdf --out corpus.jsonl

What reads: a text field's value as a viewer shows it: the text its appearance (the widget's /AP stream, which the
program that filled it in drew: "$1,000.00", "07/12/2026") shows, unless the form asks viewers to draw their own
(/NeedAppearances); else its value formatted by the field's format action, as Acrobat's ``AFNumber_Format``,
``AFPercent_Format`` and ``AFSpecial_Format`` format it ("1000" shows "$1,000.00"); its lines one under the other, a multi-line field's wrapped at its width as a viewer wraps them), a ticked check box or the chosen radio button as
"☒" (a mark in the box beside its printed label; boxes left empty read as nothing), a list or combo box's chosen
options as they are shown (their display text, several ", " apart). Fields hidden from view or placed off their page
(outside its crop box: a viewer does not show them), password fields (shown as dots), push buttons and signatures
read as nothing. An XFA form (Adobe LiveCycle) that also holds its data as AcroForm fields (most do: a form made to
open in any viewer) reads from those; a form of XFA alone, whose fields are drawn only by a viewer that runs XFA,
reads its filled-in values from its XFA data after the pages' text (``xfa_values``), or instead of it where its pages
are drawn by XFA when it opens (``drawn_by_xfa``: what they hold is a message for viewers that cannot).
"""

from __future__ import annotations

import functools
import itertools
import logging
import math
import re
import textwrap
from collections.abc import Iterator
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation
from typing import Any

from spanseek.indexer.pdf_blocks import text_string

log = logging.getLogger(__name__)

CHECKED = "\u2612"  # ☒: a ticked check box or a chosen radio button
_DEFAULT_SIZE = 10.0  # the value's type size where its field names none (or "auto", 0)
_HIDDEN_FLAGS = 0b10_0010  # an annotation's /F: Hidden (2) or NoView (32)
_MULTILINE, _PASSWORD, _PUSH_BUTTON = 1 << 12, 1 << 13, 1 << 16  # a field's /Ff: multi-line, password, push button
_CENTRE = (0.718 - 0.207) / 2  # the middle of a line's glyphs above its baseline, in type sizes (Helvetica's)
_MOST_PARENTS = 32  # a field's ancestors an inherited attribute is looked up in (a loop of /Parent ends there)
_COMBO = 1 << 17  # a choice field's /Ff: a combo box (one chosen option shown), not a list box (all its options shown)
_MOST_GLYPHS = 4096  # the glyphs of a field's appearance read for its text: an appearance of more is read as its value
_MOST_SCRIPT = 4096  # the characters of a field's format action read for the formatting it calls
# a format action's call of Acrobat's number, percent and special formats, with its arguments
_FORMAT = re.compile(r'\b(AFNumber|AFPercent|AFSpecial)_Format\s*\(\s*(\d{1,2})\s*(?:,\s*(\d)\s*,\s*(\d)\s*,\s*(\d)'
                     r'\s*,\s*"((?:[^"\\]|\\.){0,16})"\s*,\s*(true|false)\s*)?(?:,\s*(\d)\s*(?:,\s*(true|false)\s*)?)?\)')
# the separators of AFNumber_Format's sepStyle: thousands and decimal ("1,234.56", "1234.56", "1.234,56",
# "1234,56", "1'234.56")
_SEPARATORS = {0: (",", "."), 1: ("", "."), 2: (".", ","), 3: ("", ","), 4: ("'", ".")}


def _inherited(widget: dict[str, Any], key: str) -> Any:
    """A field's attribute (its type, value, flags, options, appearance) from the widget or the nearest field above it
    (a field's widgets and its kids share the parent's)."""
    from pdfminer.pdftypes import resolve1

    node: Any = widget
    for _ in range(_MOST_PARENTS):
        if not isinstance(node, dict):
            return None
        if key in node:
            return resolve1(node[key])
        node = resolve1(node.get("Parent"))
    return None


def _text(value: Any) -> str:
    """A PDF text string (``pdf_blocks.text_string``) or name as text."""
    from pdfminer.psparser import PSLiteral

    if isinstance(value, PSLiteral):
        return str(value.name)
    return text_string(value) if isinstance(value, bytes) else ""


def _chosen(widget: dict[str, Any]) -> str:
    """A list or combo box's chosen options as shown: an option given as [export value, display text] shows its text."""
    from pdfminer.pdftypes import resolve1

    value = _inherited(widget, "V")
    chosen = [_text(resolve1(v)) for v in value] if isinstance(value, list) else [_text(value)]
    shown: dict[str, str] = {}
    options = _inherited(widget, "Opt")
    for option in options if isinstance(options, list) else []:
        option = resolve1(option)
        if isinstance(option, list) and len(option) == 2:
            shown.setdefault(_text(resolve1(option[0])), _text(resolve1(option[1])))
    return ", ".join(shown.get(v, v) for v in chosen if v)


def field_value(widget: dict[str, Any], drawn: Any = None) -> str:
    """What a field's widget shows filled in (see the module's docstring), "" for an empty or unread one. ``drawn``:
    the text of an appearance stream (``appearance_text``), where its appearance is read."""
    from pdfminer.psparser import PSLiteral

    kind, flags = _inherited(widget, "FT"), _inherited(widget, "Ff")
    kind, flags = kind.name if isinstance(kind, PSLiteral) else None, flags if isinstance(flags, int) else 0
    shown = drawn(widget) if drawn is not None and (kind == "Tx" or (kind == "Ch" and flags & _COMBO)) else None
    if kind == "Tx" and not flags & _PASSWORD:
        return shown if shown else formatted(_text(_inherited(widget, "V")), _format_script(widget))
    if kind == "Ch":
        return shown if shown else _chosen(widget)
    if kind == "Btn" and not flags & _PUSH_BUTTON:  # a check box or a radio button: ticked where its state is on
        state = widget.get("AS", _inherited(widget, "V"))
        return CHECKED if isinstance(state, PSLiteral) and state.name != "Off" else ""
    return ""


def _format_script(widget: dict[str, Any]) -> str:
    """The JavaScript of a field's format action (its /AA's /F), "" where it has none."""
    from pdfminer.pdftypes import PDFStream, resolve1

    actions = _inherited(widget, "AA")
    action = resolve1(actions.get("F")) if isinstance(actions, dict) else None
    script = resolve1(action.get("JS")) if isinstance(action, dict) else None
    if isinstance(script, PDFStream):
        try:
            script = script.get_data()[:_MOST_SCRIPT * 2]
        except Exception:  # a damaged stream: the value reads as stored
            return ""
    return _text(script)[:_MOST_SCRIPT] if isinstance(script, bytes) else ""


def formatted(value: str, script: str) -> str:
    """A text field's ``value`` as its format action's ``script`` shows it: Acrobat's AFNumber_Format(decimals,
    separators, negative style, currency style, currency, currency first) ("1000" shows "$1,000.00"; a negative
    number shown in red reads with its minus sign, one in parentheses in them), AFPercent_Format(decimals,
    separators, percent sign first) ("0.25" shows "25.00%") and AFSpecial_Format (0: a ZIP code, 1: ZIP+4, 2: a telephone number, 3: a
    social security number); as stored where it calls none of them, or the value is not one it formats."""
    found = _FORMAT.search(script) if value.strip() else None
    if found is None:
        return value
    kind, first = found.group(1), int(found.group(2))
    if kind == "AFSpecial":
        return _special(value, first)
    # (its separators: the second of AFNumber_Format's six arguments, or of AFPercent_Format's two or three)
    separators = _SEPARATORS.get(int(found.group(3) or found.group(8) or 0), _SEPARATORS[0])
    number = _number(value, separators[1])
    if number is None:
        return value
    if kind == "AFPercent":  # (its third argument: the percent sign first)
        percent = _grouped(number * 100, first, separators)
        return f"%{percent}" if found.group(9) == "true" else f"{percent}%"
    negative, style = number < 0, int(found.group(4) or 0)
    shown = _grouped(abs(number), first, separators)
    currency = _JS_ESCAPE.sub(_unescaped, found.group(6) or "")
    shown = currency + shown if found.group(7) != "false" else shown + currency
    return f"({shown})" if negative and style in (2, 3) else f"-{shown}" if negative else shown


# an escape in a JavaScript string: "\\u20AC" (€), "\\xA3" (£), or a character escaped ("\\"" is '"')
_JS_ESCAPE = re.compile(r"\\(?:u([0-9a-fA-F]{4})|x([0-9a-fA-F]{2})|(.))", re.S)


def _unescaped(escape: re.Match[str]) -> str:
    """The character a JavaScript string's escape (``_JS_ESCAPE``) stands for: a currency written as it is shows as
    written ("€", "Kč"; decoded as escapes, its UTF-8 bytes read "â\\x82¬")."""
    code = escape.group(1) or escape.group(2)
    return chr(int(code, 16)) if code else {"n": "\n", "r": "\r", "t": "\t"}.get(escape.group(3), escape.group(3))


def _number(value: str, point: str) -> Decimal | None:
    """A field's value as a number (Acrobat's AFMakeNumber: its decimal ``point``, separators and currency signs left
    out), None where it is none (it holds a letter: "B12")."""
    if any(c.isalpha() for c in value):
        return None
    digits = "".join(c for c in value.replace(point, ".") if c.isdigit() or c in ".-")
    try:
        return Decimal(digits) if digits.lstrip("-") and "-" not in digits[1:] else None
    except InvalidOperation:
        return None


def _grouped(number: Decimal, decimals: int, separators: tuple[str, str]) -> str:
    """``number`` rounded to ``decimals`` places, its thousands and decimal point as ``separators`` set them."""
    text = f"{number.quantize(Decimal(1).scaleb(-decimals), rounding=ROUND_HALF_UP):f}"
    whole, _, fraction = text.partition(".")
    sign, whole = ("-", whole[1:]) if whole.startswith("-") else ("", whole)
    whole = f"{int(whole):,}".replace(",", separators[0])
    return sign + whole + (separators[1] + fraction if fraction else "")


def _special(value: str, style: int) -> str:
    """A value in AFSpecial_Format's ``style``, as stored where its digits are not of that form."""
    digits = "".join(c for c in value if c.isdigit())
    if style == 0 and len(digits) == 5:
        return digits
    if style == 1 and len(digits) == 9:
        return f"{digits[:5]}-{digits[5:]}"
    if style == 2 and len(digits) in (7, 10):
        return f"({digits[:3]}) {digits[3:6]}-{digits[6:]}" if len(digits) == 10 else f"{digits[:3]}-{digits[3:]}"
    if style == 3 and len(digits) == 9:
        return f"{digits[:3]}-{digits[3:5]}-{digits[5:]}"
    return value


def appearance_text(rsrcmgr: Any, widget: dict[str, Any]) -> str | None:
    """The text a widget's normal appearance (its /AP's /N stream: what a viewer draws for it) shows, its lines top
    first, as pdfminer reads the stream with the fonts it names (``rsrcmgr``: the document's resource manager); None
    where it has no such stream, or one that shows no text, or more than ``_MOST_GLYPHS`` glyphs, or is damaged."""
    from pdfminer.pdfdevice import PDFTextDevice
    from pdfminer.pdfinterp import PDFPageInterpreter
    from pdfminer.pdftypes import PDFStream, resolve1

    appearances = resolve1(widget.get("AP"))
    stream = resolve1(appearances.get("N")) if isinstance(appearances, dict) else None
    if not isinstance(stream, PDFStream):  # (a check box's /N is a dictionary of its states' appearances)
        return None
    glyphs: list[tuple[float, float, str]] = []  # (baseline, left, text) of each glyph drawn

    class Glyphs(PDFTextDevice):  # type: ignore[misc]
        def render_char(self, matrix: Any, font: Any, fontsize: float, scaling: float, rise: float, cid: int,
                        *_: Any) -> float:
            if len(glyphs) >= _MOST_GLYPHS:
                raise OverflowError
            # its baseline and its place along it, in the direction it is drawn (a field a program turned, /MK's
            # /R, draws its text turned: read by the page's up and left, a line of it read one glyph a line)
            a, b, _, _, e, f = matrix
            run = math.hypot(a, b) or 1.0
            try:
                glyphs.append((round((f * a - e * b) / run, 0), (e * a + f * b) / run, font.to_unichr(cid)))
            except Exception:  # a glyph of no character
                pass
            return float(font.char_width(cid) * fontsize * scaling)

    try:
        resources = resolve1(stream.get("Resources"))
        PDFPageInterpreter(rsrcmgr, Glyphs(rsrcmgr)).render_contents(
            resources if isinstance(resources, dict) else {}, [stream])
    except Exception:  # (a damaged stream, too many glyphs, forms drawing each other: its value is read)
        return None
    lines: dict[float, list[tuple[float, str]]] = {}
    for baseline, left, text in glyphs:
        lines.setdefault(baseline, []).append((left, text))
    text = "\n".join("".join(t for _, t in sorted(lines[y])).strip() for y in sorted(lines, reverse=True))
    return text if text.strip() else None


def filled_fields(page: Any, drawn: Any = None) -> list[tuple[tuple[float, float, float, float], str, float]]:
    """A page's filled-in fields as (its widget's rectangle on the page, x0 y0 x1 y1; the value shown; its type
    size), in the order the page lists them; widgets hidden from view, or placed off the page (outside its crop
    box, which a viewer shows), left out. ``drawn``: a widget's appearance's text, where it is read (``field_value``)."""
    from pdfminer.pdftypes import resolve1

    out = []
    shown = [v if isinstance(v, (int, float)) else 0 for v in (getattr(page, "cropbox", None) or [])]
    left, bottom, right, top = (min(shown[0], shown[2]), min(shown[1], shown[3]), max(shown[0], shown[2]),
                                max(shown[1], shown[3])) if len(shown) == 4 else (-1e9, -1e9, 1e9, 1e9)
    annotations = resolve1(page.annots)
    for annotation in annotations if isinstance(annotations, list) else []:
        widget = resolve1(annotation)
        subtype = isinstance(widget, dict) and resolve1(widget.get("Subtype"))
        flags = isinstance(widget, dict) and resolve1(widget.get("F"))
        if getattr(subtype, "name", None) != "Widget" or (isinstance(flags, int) and flags & _HIDDEN_FLAGS):
            continue
        rect = resolve1(widget.get("Rect"))
        rect = [resolve1(v) for v in rect] if isinstance(rect, list) else []
        if len(rect) != 4 or not all(isinstance(v, (int, float)) for v in rect):
            continue
        value = field_value(widget, drawn)
        if not value.strip():
            continue
        points = _type_size(_inherited(widget, "DA"))
        x0, y0, x1, y1 = min(rect[0], rect[2]), min(rect[1], rect[3]), max(rect[0], rect[2]), max(rect[1], rect[3])
        if x1 <= left or x0 >= right or y1 <= bottom or y0 >= top:
            continue
        size = points if 0 < points < 100 else min(_DEFAULT_SIZE, (y1 - y0) * 0.7)
        multiline = _inherited(widget, "Ff")
        if isinstance(multiline, int) and multiline & _MULTILINE and size > 0:
            value = _wrapped(value, x1 - x0 - 4, size)
        out.append(((x0, y0, x1, y1), value, size))
    return out


def _wrapped(value: str, width: float, size: float) -> str:
    """A multi-line field's value in the lines a viewer wraps it into at the field's ``width`` (in points, its type
    ``size``): drawn on one line, a note typed into a box ran on past it, across the text beside it, which then read
    in the middle of the note's line."""
    chars = max(1, int(width / (_value_font().char_width(ord(" ")) * size)))  # (an average character's width)
    return "\n".join(wrapped for line in re.split(r"\r\n?|\n", value) for wrapped in textwrap.wrap(line, chars) or [""])


def _type_size(appearance: Any) -> float:
    """The type size a field's default appearance sets, the operand of its "Tf" ("/Helv 10 Tf 0 g": 10), 0.0 where
    it sets none or one that is no number ("/Helv . Tf"). Read word by word: a search for "digits, then Tf" tried
    again from each digit of a long run of them, a field's string of 20,000 digits took seconds."""
    words = appearance.split() if isinstance(appearance, bytes) else []
    for operand, operator in itertools.pairwise(words):
        if operator == b"Tf":
            try:
                return float(operand)
            except ValueError:
                return 0.0
    return 0.0


def draw_fields(device: Any, page: Any, ctm: Any) -> None:
    """Each filled-in field's value drawn as glyphs into ``device`` (pdfminer's layout analyser, its page open), in
    its widget: a line's baseline where a viewer sets a one-line field's (centred), the lines of a field of several
    from its top down, as a viewer sets them, so that the page's layout analysis puts them in reading order."""
    from pdfminer.pdfcolor import PREDEFINED_COLORSPACE
    from pdfminer.pdfinterp import PDFGraphicState
    from pdfminer.utils import mult_matrix, translate_matrix

    font = _value_font()
    drawn = None if _needs_appearances(page) else functools.partial(appearance_text, device.rsrcmgr)
    for (x0, y0, x1, y1), value, size in filled_fields(page, drawn):
        lines = re.split(r"\r\n?|\n", value)
        # a line's glyphs centred on the widget's middle (its baseline a quarter of the size below it), a check
        # box's mark in the box's middle too
        top = (y0 + y1) / 2 - _CENTRE * size if len(lines) == 1 else y1 - 2 - size
        left = (x0 + x1 - font.char_width(ord(CHECKED)) * size) / 2 if value == CHECKED else x0 + 2
        for n, line in enumerate(lines):
            matrix = mult_matrix((1, 0, 0, 1, left, top - n * size * 1.15), ctm)
            advance = 0.0
            for c in line:
                advance += device.render_char(translate_matrix(matrix, (advance, 0)), font, size, 1.0, 0.0,
                                              ord(c), PREDEFINED_COLORSPACE["DeviceGray"], PDFGraphicState())


def _needs_appearances(page: Any) -> bool:
    """Whether a page's form asks a viewer to draw its fields' appearances itself (its AcroForm's /NeedAppearances),
    from their values: the appearances in the file are then stale, or missing."""
    from pdfminer.pdftypes import resolve1

    catalog = getattr(getattr(page, "doc", None), "catalog", None)
    form = resolve1(catalog.get("AcroForm")) if isinstance(catalog, dict) else None
    return isinstance(form, dict) and resolve1(form.get("NeedAppearances")) is True


@functools.cache
def _value_font() -> Any:
    """The type a value is drawn in: Helvetica's height, an average width, any character (its code point)."""
    from pdfminer.pdffont import PDFFont

    class ValueFont(PDFFont):  # type: ignore[misc]
        def to_unichr(self, cid: int) -> str:
            return chr(cid)

    return ValueFont({"FontName": "Helvetica", "Ascent": 718, "Descent": -207, "FontBBox": [-166, -225, 1000, 931]},
                     {}, 556)


def drawn_by_xfa(document: Any) -> bool:
    """Whether a PDF's pages are drawn by its XFA form when it opens (a dynamic form: its catalog's /NeedsRendering):
    what its pages hold is only what a viewer that cannot run XFA shows instead ("Please wait... If this message is
    not eventually replaced by the proper contents of the document, your PDF viewer may not be able to display this
    type of document.")."""
    from pdfminer.pdftypes import resolve1
    from pdfminer.psparser import PSLiteral

    flag = resolve1(document.catalog.get("NeedsRendering"))
    return flag is True or (isinstance(flag, PSLiteral) and flag.name == "true")


def xfa_values(document: Any, where: object) -> list[str]:
    """The filled-in values of a form of XFA alone (its AcroForm lists no fields: no viewer but one that runs XFA
    shows them), from its XFA data (the ``datasets`` part's ``xfa:data``), as paragraphs: each data group's values
    (its elements that hold text) in one, named by their elements as the form names them ("Name: Ada Lovelace;
    Harbour: Kirkwall"), as a table's row reads; an image's data (its ``contentType`` not text) is not read. The
    data's streams are measured as every stream is (``pdf_file.pdf_document``), and its XML read without entities,
    network or libxml2's limits lifted (256 elements deep, 10 MB of text in one node): data past those, or not well
    formed, is named in a warning (``where``: the file) and the pages' text is read without it."""
    from lxml import etree
    from pdfminer.pdftypes import PDFStream, resolve1

    form = resolve1(document.catalog.get("AcroForm"))
    if not isinstance(form, dict) or resolve1(form.get("Fields")) or "XFA" not in form:
        return []
    xfa = resolve1(form["XFA"])  # one stream of the whole XDP document, or its parts' [name stream ...]
    parts = [resolve1(part) for name, part in zip(xfa[::2], xfa[1::2], strict=False)
             if _text(resolve1(name)) == "datasets"] if isinstance(xfa, list) else [xfa]
    paragraphs: list[str] = []
    for part in parts:
        if not isinstance(part, PDFStream):
            continue
        try:
            root = etree.fromstring(part.get_data(), etree.XMLParser(resolve_entities=False, no_network=True))
        except etree.XMLSyntaxError as e:
            log.warning("%s: its XFA form data (object %s) cannot be read (%s); its values are not in the corpus",
                        where, part.objid, e)
            continue
        for datasets in [root] if etree.QName(root).localname == "datasets" else root.iterchildren("{*}datasets"):
            for data in datasets.iterchildren("{*}data"):
                paragraphs += _xfa_groups(data)
    return paragraphs


_RICH_BLOCKS = ("p", "br", "div", "li")  # the XHTML elements of an XFA rich text value that end a line


def _xfa_groups(data: Any) -> Iterator[str]:
    """The paragraphs of XFA data (``xfa_values``): each data group's values, "name: value" each, "; " apart, then
    the groups inside it, in order (a stack: data nested thousands deep is refused by the parser first). A value is an
    element of text: of no elements, or rich text (``contentType`` "text/html": the text of its XHTML); one whose
    ``contentType`` is no text (an image's data, in base64) is passed over."""
    from lxml import etree

    stack = [data]
    while stack:
        group, values, groups = stack.pop(), [], []
        for field in group.iterchildren(etree.Element):
            kind = next((value for key, value in field.attrib.items() if etree.QName(key).localname == "contentType"),
                        "text/plain").strip().lower()
            if len(field) and kind not in ("text/html", "text/xml"):
                groups.append(field)
                continue
            for block in field.iter(*(f"{{*}}{tag}" for tag in _RICH_BLOCKS)):  # rich text's paragraphs, lines apart
                block.tail = " " + (block.tail or "")
            if kind.startswith("text/") and (text := " ".join("".join(field.itertext()).split())):
                values.append(f"{etree.QName(field).localname}: {text}")
        if values:
            yield "; ".join(values)
        stack += reversed(groups)
