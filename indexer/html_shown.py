"""What a browser shows of an HTML element that the page's text does not hold, for both HTML readers (the streaming
one, ``indexer.markup``, and the tree made ready for trafilatura, ``indexer.html_tree``): an ordered list's item
numbers (``list_start``, ``item_number``, ``list_marker``), a check box's state (``check_box``), a <q>'s quotation
marks (``quote_marks``) and a ruby annotation's brackets (``RUBY_BRACKETS``); and the passes that write them into a
page's tree (``list_numbers``, ``check_boxes_as_text``, ``quotes_and_ruby_as_text``).

    spanseek corpus from-files page.html --out corpus.jsonl
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from spanseek.indexer.markdown_render import TASK_MARKS
from spanseek.indexer.word_numbering import roman


def list_start(attrs: Mapping[str, str | None], items: int | None) -> int | None:
    """The number before an ordered list's first item (<ol>'s ``start``, less one; counting down from its
    ``items`` where it is ``reversed``), None where it cannot be known (reversed, its items not counted yet)."""
    given = html_integer(attrs.get("start"))
    if "reversed" in attrs:
        return None if given is None and items is None else (items if given is None else given) + 1
    return (1 if given is None else given) - 1


def item_number(attrs: Mapping[str, str | None], list_attrs: Mapping[str, str | None], before: int | None) -> int | None:
    """An ordered list's item's number: its ``value``, else one more than the number ``before`` it (``list_start``
    for the first item), one less where the list (``list_attrs``) is ``reversed``; None where neither is known."""
    value = html_integer(attrs.get("value"))
    if value is not None or before is None:
        return value
    return before + (-1 if "reversed" in list_attrs else 1)


# an <ol>'s start or an <li>'s value as a browser reads an integer (HTML's rules for parsing integers): spaces, a
# sign, digits, and whatever follows them ignored (" 3rd" is 3); none ("--5", "x") or more than 9 digits is no number
_HTML_INTEGER = re.compile(r"[ \t\n\f\r]*([-+]?[0-9]{1,9})(?![0-9])")


def html_integer(value: str | None) -> int | None:
    """An attribute's value as HTML reads an integer (``_HTML_INTEGER``), None where it holds none."""
    found = _HTML_INTEGER.match(value or "")
    return int(found.group(1)) if found else None


def list_marker(number: int, attrs: Mapping[str, str | None]) -> str:
    """An ordered list's item's marker as a browser shows it: its ``number`` in the list's ``type`` ("3.", "c.",
    "C.", "iii.", "III."; ``counted``), and the space after it."""
    return f"{counted(number, (attrs.get('type') or '1').strip())}. "


def counted(number: int, kind: str) -> str:
    """``number`` as a list counts it in ``kind``: "1" decimal, "a" or "A" letters (a to z, then aa, ab, ...), "i" or
    "I" roman numerals; decimal for any other kind, and for a number no letter or numeral stands for."""
    shown = str(number)
    if number > 0 and kind in ("a", "A"):
        shown, left = "", number
        while left:
            left, letter = divmod(left - 1, 26)
            shown = chr(ord("a") + letter) + shown
    elif 0 < number < 4000 and kind in ("i", "I"):
        shown = roman(number)
    return shown.upper() if kind.isupper() else shown


# the quotation marks a browser sets around a <q>'s text (its default style's, English's): double, single inside them
QUOTE_MARKS = (("\u201c", "\u201d"), ("\u2018", "\u2019"))
# a ruby annotation's text (<rt>: the reading over its base text, "漢字" over "かんじ") reads after its base in these
# brackets, "漢字(かんじ)", as Word's phonetic guides read (and as a browser shows ruby where it cannot set it above,
# with <rp>); an <rp>'s own brackets are not read
RUBY_BRACKETS = ("(", ")")


def quote_marks(depth: int) -> tuple[str, str]:
    """The quotation marks around a <q> inside ``depth`` others (``QUOTE_MARKS``, taking turns)."""
    return QUOTE_MARKS[depth % len(QUOTE_MARKS)]


def _around(element: Any, before: str, after: str) -> None:
    """``before`` and ``after`` set around ``element``'s text, which is then its parent's (its tag dropped)."""
    element.text = before + (element.text or "")
    if len(element):
        element[-1].tail = (element[-1].tail or "") + after
    else:
        element.text += after
    element.drop_tag()


def quotes_and_ruby_as_text(tree: Any) -> None:
    """A <q>'s text read in its quotation marks (``quote_marks``) and a ruby annotation's after its base in brackets
    (``RUBY_BRACKETS``): trafilatura dropped the marks ("He said yes") and the annotation (the reading of "漢字")."""
    for rp in list(tree.iter("rp")):  # its text; not what libxml2 puts in one whose end tag is left out (an <rt>)
        rp.text = None
        rp.drop_tag()
    for rt in list(tree.iter("rt")):
        if rt.text_content().strip():
            _around(rt, *RUBY_BRACKETS)
        else:
            rt.drop_tree()
    for q in reversed(list(tree.iter("q"))):  # innermost first: the <q>s around each are still there to count
        _around(q, *quote_marks(sum(1 for _ in q.iterancestors("q"))))


def list_numbers(tree: Any) -> None:
    """Each item of an ordered list (<ol>) numbered as a browser shows it ("1. Open the valve"), from the list's
    ``start``, down where it is ``reversed``, an item's ``value`` setting its number; trafilatura drops the numbers."""
    for ol in tree.iter("ol"):
        items = [li for li in ol.iterchildren("li")]
        number = list_start(ol.attrib, len(items))
        for li in items:
            number = item_number(li.attrib, ol.attrib, number)
            _before_text(li, list_marker(number, ol.attrib))


def _before_text(element: Any, marker: str) -> None:
    """``marker`` set before the first text in ``element`` (a list item's paragraph's: "1." read alone, apart from
    the text of a <p> in its item), or in it where it has none."""
    from lxml import etree

    for event, el in etree.iterwalk(element, events=("start", "end")):
        if event == "start" and (el.text or "").strip():
            el.text = marker + el.text
            return
        if event == "end" and el is not element and (el.tail or "").strip():
            el.tail = marker + el.tail
            return
    element.text = marker + (element.text or "")


def check_box(attrs: Mapping[str, str | None]) -> str:
    """The text an <input> shows where it is a check box (a task list's, as GitHub and MkDocs render "- [x] item"):
    "☒ " ticked, "☐ " not, as a Markdown task list item's mark reads; "" for any other input."""
    if (attrs.get("type") or "").strip().lower() != "checkbox":
        return ""
    return TASK_MARKS["x" if "checked" in attrs else " "] + " "


def check_boxes_as_text(tree: Any) -> None:
    """Each check box read as the box shown (``check_box``): trafilatura drops inputs, and a rendered task list's
    items read without their state."""
    for box in [el for el in tree.iter("input") if check_box(el.attrib)]:
        box.tail = check_box(box.attrib) + (box.tail or "").lstrip()
        box.drop_tree()  # (its tail stays)
