"""Word's styles and list numbering, for ``indexer.word``: each paragraph's style chain (``Styles``) and its list number
or bullet as Word shows it ("2.", "1.2", "b)", "iv.", "•": ``Numbering``), and the WordprocessingML values they
are read from (``val``, ``count``, ``flag``).

    spanseek corpus from-files handbook.docx --out corpus.jsonl
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any

W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"
ON = {"1", "true", "on"}
_ROMAN = ((1000, "m"), (900, "cm"), (500, "d"), (400, "cd"), (100, "c"), (90, "xc"), (50, "l"), (40, "xl"), (10, "x"),
          (9, "ix"), (5, "v"), (4, "iv"), (1, "i"))


def roman(n: int) -> str:
    """``n`` in lower-case Roman numerals ("iv"), as list numbers are shown."""
    out = ""
    for value, letters in _ROMAN:
        out += letters * (n // value)
        n %= value
    return out


def _letter(n: int) -> str:
    """Word's list letters: a to z, then aa, bb, ... (the letter repeated, not a spreadsheet's column names)."""
    return chr(ord("a") + (n - 1) % 26) * ((n - 1) // 26 + 1)


# the list number formats read (w:numFmt); a list in another (ordinal words, East Asian counting, ...) gets no number
_FORMATS: dict[str, Callable[[int], str]] = {
    "decimal": str, "decimalZero": lambda n: f"{n:02d}", "lowerLetter": _letter, "upperLetter": lambda n: _letter(n).upper(),
    "lowerRoman": roman, "upperRoman": lambda n: roman(n).upper(), "none": lambda n: ""}


class Styles:
    """A document's styles by id, each with the styles it is based on (``chain``)."""

    def __init__(self, document: Any) -> None:
        self.by_id = {s.get(f"{W}styleId"): s for s in document.styles.element.iterchildren(f"{W}style")}
        self.default = next((i for i, s in self.by_id.items() if s.get(f"{W}type") == "paragraph"
                             and s.get(f"{W}default") in ON), None)

    def chain(self, style_id: str | None) -> Iterator[Any]:
        """The style of this id, then the one it is based on, and so on (each once)."""
        seen: set[str] = set()
        while style_id and style_id not in seen and (style := self.by_id.get(style_id)) is not None:
            seen.add(style_id)
            yield style
            style_id = val(style.find(f"{W}basedOn"))

    def paragraph_style(self, p: Any) -> str | None:
        """A paragraph's style id: its own, else the document's default paragraph style."""
        return val(p.find(f"{W}pPr/{W}pStyle")) or self.default


class Numbering:
    """The list numbers and bullets of a document's paragraphs, as Word shows them: "2.", "1.2", "b)", "iv.", "•".

    A paragraph is in a list by its own numbering properties (w:numPr: the list's numId, the level ilvl) or its
    style's (a "List Number" style; a heading style linked to a level of an outline). The lists (w:num) that share
    one definition (w:abstractNum) share its counters, as in Word, unless one restarts a level (w:startOverride) where
    it is first used. A level counts from its w:start and restarts when a level above it is used (w:lvlRestart can
    say which, or never); its w:lvlText ("%1.%2") shows the counters of the levels it names, each in its level's
    w:numFmt (decimal when the level is legal-style, w:isLgl). A level in a format not read here (``_FORMATS``), or
    a list not defined, gives no number: the paragraph reads as it would without one."""

    def __init__(self, root: Any, styles: Styles) -> None:
        self.styles = styles
        self.abstract = {a.get(f"{W}abstractNumId"): a for a in root.iterchildren(f"{W}abstractNum")} if root is not None else {}
        self.nums = {n.get(f"{W}numId"): n for n in root.iterchildren(f"{W}num")} if root is not None else {}
        self.counters: dict[str, dict[int, int]] = {}  # by w:abstractNum: each level's last number
        self.restarted: set[tuple[str, int]] = set()  # (numId, ilvl) whose w:startOverride has been applied

    def definition(self, num_id: str) -> tuple[str, Any] | None:
        """The w:abstractNum of a list (numId), following a numbering style's link to the list it names."""
        for _ in range(3):  # a w:numStyleLink names a style whose list is the definition (once; a loop is broken)
            num = self.nums.get(num_id)
            abstract_id = val(num.find(f"{W}abstractNumId")) if num is not None else None
            abstract = self.abstract.get(abstract_id or "")
            if abstract is None:
                return None
            link = val(abstract.find(f"{W}numStyleLink"))
            linked = next((val(s.find(f"{W}pPr/{W}numPr/{W}numId")) for s in self.styles.chain(link)), None)
            if not linked:
                return abstract_id, abstract
            num_id = linked
        return None

    def level(self, num_id: str, abstract: Any, ilvl: int) -> Any:
        """A list's level ``ilvl`` (w:lvl): the list's own override of it, else its definition's."""
        override = self.nums[num_id].find(f"{W}lvlOverride[@{W}ilvl='{ilvl}']/{W}lvl")
        return override if override is not None else abstract.find(f"{W}lvl[@{W}ilvl='{ilvl}']")

    def list_of(self, p: Any) -> tuple[str, int] | None:
        """(numId, ilvl) of a paragraph in a list, from its numbering properties or its style's; None when in none."""
        direct = p.find(f"{W}pPr/{W}numPr")
        num_id, ilvl = (val(direct.find(f"{W}numId")), val(direct.find(f"{W}ilvl"))) if direct is not None else (None, None)
        carrier = None  # the style whose numbering the paragraph takes
        for style in self.styles.chain(self.styles.paragraph_style(p)):
            if num_id is not None and ilvl is not None:
                break
            numbered = style.find(f"{W}pPr/{W}numPr")
            if numbered is not None:
                carrier = carrier if carrier is not None else style
                num_id = num_id if num_id is not None else val(numbered.find(f"{W}numId"))
                ilvl = ilvl if ilvl is not None else val(numbered.find(f"{W}ilvl"))
        if not num_id or num_id == "0" or (found := self.definition(num_id)) is None:  # numId 0: "no list"
            return None
        if ilvl is None and carrier is not None:  # a style linked to one level of the list (w:lvl/w:pStyle)
            style_id = carrier.get(f"{W}styleId")
            ilvl = next((lvl.get(f"{W}ilvl") for lvl in found[1].iterchildren(f"{W}lvl")
                         if val(lvl.find(f"{W}pStyle")) == style_id), None)
        level = count(ilvl)
        return (num_id, level) if level is not None and level >= 0 else (num_id, 0)

    def label(self, p: Any) -> str:
        """A paragraph's list number or bullet as Word shows it ("2.", "1.2", "•"), counting it; "" when it has none."""
        where = self.list_of(p)
        if where is None:
            return ""
        num_id, ilvl = where
        abstract_id, abstract = self.definition(num_id) or ("", None)
        counts = self.counters.setdefault(abstract_id, {})
        lvl = self.level(num_id, abstract, ilvl)
        if lvl is None:
            return ""
        start = self.start(num_id, abstract, ilvl)
        override = self.nums[num_id].find(f"{W}lvlOverride[@{W}ilvl='{ilvl}']/{W}startOverride")
        if override is not None and (num_id, ilvl) not in self.restarted:
            self.restarted.add((num_id, ilvl))
            counts.pop(ilvl, None)
        counts[ilvl] = counts[ilvl] + 1 if ilvl in counts else start
        for deeper in [k for k in counts if k > ilvl]:
            deeper_lvl = self.level(num_id, abstract, deeper)
            restart = val(deeper_lvl.find(f"{W}lvlRestart")) if deeper_lvl is not None else None
            named = count(restart)
            after = named if named is not None and named >= 0 else deeper  # restarts when a level < it is used
            if ilvl < after:
                del counts[deeper]
        form = val(lvl.find(f"{W}numFmt")) or "decimal"
        text = val(lvl.find(f"{W}lvlText")) or ""
        if form == "bullet":  # a symbol font's glyph (U+F0B7 in Symbol) or a letter ("o" in Courier) shows a bullet
            return text if len(text) == 1 and not text.isalnum() and not "\ue000" <= text <= "\uf8ff" else "•"
        legal = flag(lvl, "isLgl")
        shown = []
        for part in re.split(r"(%[1-9])", text):
            if re.fullmatch(r"%[1-9]", part):
                k = int(part[1]) - 1
                k_lvl = self.level(num_id, abstract, k)
                k_form = "decimal" if legal else val(k_lvl.find(f"{W}numFmt")) if k_lvl is not None else None
                if (k_form or "decimal") not in _FORMATS:
                    return ""
                shown.append(_FORMATS[k_form or "decimal"](counts.get(k, self.start(num_id, abstract, k))))
            else:
                shown.append(part)
        return " ".join("".join(shown).split())

    def start(self, num_id: str, abstract: Any, ilvl: int) -> int:
        """The number a level counts from: the list's w:startOverride, else the level's w:start, else 0 (Word's)."""
        for where, node in ((f"{W}lvlOverride[@{W}ilvl='{ilvl}']/{W}startOverride", self.nums[num_id]),
                            (f"{W}start", self.level(num_id, abstract, ilvl))):
            value = count(val(node.find(where)) if node is not None else None)
            if value is not None:
                return value
        return 0




def count(value: str | None) -> int | None:
    """A numbering value (a level, a start) as a number, None unless it is one of at most 5 digits: a damaged file's
    "²" is none, and a start of 10**12 would spell a list letter a billion times over."""
    return int(value) if value is not None and re.fullmatch(r"-?[0-9]{1,5}", value) else None


def val(element: Any) -> str | None:
    """An element's w:val (None for no element)."""
    return element.get(f"{W}val") if element is not None else None


def flag(properties: Any, tag: str) -> bool:
    """Whether an on/off property (``<w:tblHeader/>``, ``w:val="true"``) is set in these properties."""
    element = properties.find(f"{W}{tag}") if properties is not None else None
    return element is not None and element.get(f"{W}val", "true") in ON
