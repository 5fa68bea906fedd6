"""The rules of a document's own style sheets that hide elements, for the HTML reader (``indexer.html_reader``): an
e-book's (``indexer.epub``) linked style sheets and ``<style>`` elements, whose ``display: none`` or
``visibility: hidden`` on a simple selector (an element's name, a class, an id, or one of each: ``p.answer``,
``#solutions``) leaves such elements out, as an inline style's does (``hiding_declaration``).

    spanseek corpus from-files novel.epub --out corpus.jsonl

Only what can be matched to an element as it is read, one element at a time, is applied: a selector with a
combinator, an attribute or a pseudo-class, and the rules inside an at-rule (``@media print``: a book's print-only
rules would hide text a reader sees), are passed over. A later rule for one selector overrides an earlier one
(``.note { display: none }`` then ``.note { display: block }`` shows the notes). Reading a sheet takes time linear in
its length, and matching an element time linear in its classes.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

__all__ = ["StyleRules", "display_none", "hiding_declaration", "shown_again"]

# a declaration of these values ("... !important" too)
_DECLARATION = r"(?:^|;)\s*(?:{})\s*(?:!\s*important\s*)?(?:;|$)"
# one that hides an element and its text: "display: none", "visibility: hidden"
_HIDING = re.compile(_DECLARATION.format(r"display\s*:\s*none|visibility\s*:\s*(?:hidden|collapse)"), re.I)
_DISPLAY_NONE = re.compile(_DECLARATION.format(r"display\s*:\s*none"), re.I)
_VISIBLE = re.compile(_DECLARATION.format(r"visibility\s*:\s*visible"), re.I)
# a declaration that sets the same properties to show the element (a later rule overriding a hiding one)
_SHOWING = re.compile(r"(?:^|;)\s*(?:display|visibility)\s*:", re.I)
_COMMENT = re.compile(r"/\*.*?(?:\*/|\Z)", re.S)
# a simple selector: an element's name, then classes and ids ("p", ".answer", "p.answer", "#solutions", "div.a.b")
_SIMPLE = re.compile(r"(?P<tag>[a-zA-Z][\w-]*|\*)?(?P<rest>(?:[.#][\w-]+)*)")
_PARTS = re.compile(r"([.#])([\w-]+)")


def hiding_declaration(declarations: str) -> bool:
    """Whether a rule's declarations (or an inline ``style``) hide the element: ``display: none`` or
    ``visibility: hidden``."""
    return bool(_HIDING.search(declarations))


def shown_again(declarations: str) -> bool:
    """Whether an inline ``style`` shows its element inside one that ``visibility: hidden`` hides: visibility is
    inherited, and ``visibility: visible`` shows the element again (``display: none`` around it hides it whatever it
    says)."""
    return bool(_VISIBLE.search(declarations)) and not _HIDING.search(declarations)


def display_none(declarations: str) -> bool:
    """Whether declarations hide the element whatever its descendants say: ``display: none``."""
    return bool(_DISPLAY_NONE.search(declarations))


class StyleRules:
    """The rules of style sheets that hide elements by simple selectors (read with ``add``, in the order the document
    links them), and whether an element is hidden by one (``hides``)."""

    def __init__(self) -> None:
        # each simple selector (element name or "", classes, ids) -> its last ruling: whether it hides, and the
        # ruling's place in the order read; by the key it is looked up by (its first class as ".name", else its
        # first id as "#name", else its element name)
        self._rules: dict[str, dict[tuple[str, frozenset[str], frozenset[str]], tuple[bool, int]]] = {}
        self._read = 0  # the rulings read

    def add(self, css: str) -> None:
        """Reads a style sheet's rules at its top level (those inside an at-rule's block passed over)."""
        css = _COMMENT.sub(" ", css)
        depth, start = 0, 0
        for found in re.finditer(r"[{}]", css):
            at = found.start()
            if found.group() == "}":
                depth = max(depth - 1, 0)
                start = at + 1 if depth == 0 else start
                continue
            # a selector, after an "@import ...;" before it, read at the top level only (read at every brace inside
            # an at-rule's block, from the block's start, it took time quadratic in the block's length)
            if depth == 0 and not (prelude := css[start:at].rsplit(";", 1)[-1].strip()).startswith("@"):
                end = css.find("}", at)
                self._rule(prelude, css[at + 1:end if end >= 0 else len(css)])
            depth += 1

    def _rule(self, selectors: str, declarations: str) -> None:
        hidden = hiding_declaration(declarations)
        if not hidden and not _SHOWING.search(declarations):
            return
        for selector in selectors.split(","):
            simple = _SIMPLE.fullmatch(selector.strip())
            if simple is None or not selector.strip():
                continue
            tag = (simple.group("tag") or "").lower().replace("*", "")
            parts = _PARTS.findall(simple.group("rest"))
            classes = frozenset(name for mark, name in parts if mark == ".")
            ids = frozenset(name for mark, name in parts if mark == "#")
            key = next((f"{mark}{name}" for mark, name in sorted(parts, key=lambda p: p[0] == "#")), tag)
            self._rules.setdefault(key, {})[tag, classes, ids] = (hidden, self._read)
            self._read += 1

    def hides(self, tag: str, attrs: Mapping[str, str | None]) -> bool:
        """Whether the sheets' rules hide an element (its name and attributes): of the selectors that match it, the
        most specific one's last ruling (ids over classes over an element's name), the later one where they tie."""
        if not self._rules:
            return False
        classes = frozenset((attrs.get("class") or "").split())
        ident = attrs.get("id") or ""
        keys = [tag, "", *(f".{name}" for name in classes), *([f"#{ident}"] if ident else [])]
        ruled = [((len(ids), len(rule_classes), bool(rule_tag), order), hidden)
                 for key in keys for (rule_tag, rule_classes, ids), (hidden, order) in self._rules.get(key, {}).items()
                 if rule_tag in ("", tag) and rule_classes <= classes and ids <= {ident}]
        return bool(ruled) and max(ruled)[1]
