"""Hits from an index: ``HitBuilder`` turns token ids into hits (``core.params.Hit``, the hit's one definition),
and the overlap rules of phrase hits."""

from __future__ import annotations

import bisect
import unicodedata
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from spanseek.core.chained import derived
from spanseek.core.params import HIT_FIELDS, Hit, Hits
from spanseek.core.phrase_index import PhraseIndex
from spanseek.core.spans import Spans

if TYPE_CHECKING:
    from spanseek.core.plan import Plan

NON_OVERLAP_CHUNK = 32  # candidates non_overlapping_spans reads at a time
SIGNS = "-−+$€£¥"  # a sign or currency written against a number belongs to it: "-84", "$5"
# punctuation a span never ends with (a reader's "Canberra,"), with the full-width and ideographic forms and the full
# stops of Chinese and Japanese ("下令修建。")
TRAILING = ",;:，；：、。｡！？"
# punctuation a span never starts with (". open_searcher": a sentence's end read with it)
LEADING = ".,;:!?)]}，；：、。｡！？）」』】》〉"
# closing brackets and quotation marks, each with its opener: a span keeps one only with its partner ("200)" of
# "(at most 200)." reads "200"; "「東京」" keeps its quotes)
CLOSERS = {")": "(", "]": "[", "}": "{", "）": "（", "」": "「", "』": "『", "】": "【", "》": "《", "〉": "〈"}
OPENERS = {o: c for c, o in CLOSERS.items()}
# guillemets open in French (« … ») and close in German (» … «): a span keeps one only beside another of its kind
GUILLEMETS = ("«»", "‹›")
# words whose full stop is their own, not a sentence's ("Acme Corp.", "Smith Jr."); single letters ("J.") and words
# with another stop inside ("U.S.") keep theirs too
ABBREVIATIONS = frozenset({"co", "corp", "inc", "ltd", "jr", "sr", "mr", "mrs", "ms", "dr", "st", "bros", "etc",
                           "vs", "no", "mt", "ft", "gen", "col", "lt", "sgt", "capt", "prof", "rev", "ave", "blvd"})


def tidy_span(text: str, a: int, b: int) -> tuple[int, int]:
    """Characters [a, b) of ``text`` as an answer reads: with the combining marks of its last letter ("René" written
    with a combining accent; tokenizers leave them out of the token), with the sign or currency symbol written against
    a number it starts with ("84 degrees" of "-84 degrees" is another temperature; spans start at a word, and "-" is
    one), without punctuation it starts with (". open_searcher") or an opening bracket or quotation mark it does not
    close ("« La Fée du lac"), and without trailing commas, semicolons, colons, a closing one it does not open ("200)",
    "open_searcher)", "La Fée du lac »") or a sentence's full stop ("Ed Snider.", "scored 42.", "pdfminer.six.",
    "下令修建。"; "U.S.", "J." and "Acme Corp." keep theirs)."""
    while b < len(text) and unicodedata.category(text[b]) in ("Mn", "Me"):
        b += 1
    while b > a + 1 and (text[a] in LEADING or text[a].isspace() or unclosed(text, a, b) or lone_guillemet(text, a, b, a)):
        a += 1
    if 0 < a < b and text[a].isdigit() and text[a - 1] in SIGNS and (a == 1 or not text[a - 2].isalnum()):
        a -= 1
    before = None
    while before != b:  # "200)." loses its full stop, then its bracket
        before = b
        while b > a + 1 and (text[b - 1] in TRAILING or text[b - 1].isspace() or unopened(text, a, b)
                             or lone_guillemet(text, a, b, b - 1)):
            b -= 1
        word = text[a:b].rsplit(maxsplit=1)[-1][:-1] if b > a + 1 and text[b - 1] == "." else ""
        dotted = "." in word and any(len(part) > 1 for part in word.split("."))  # "pdfminer.six", not "U.S"
        if dotted or word.endswith((")", "]", "}")) or (
                (word.isdigit() or (len(word) > 1 and word.isalpha() and word.lower() not in ABBREVIATIONS))
                and "." not in word):
            b -= 1
        while b > a + 1 and text[b - 1].isspace():
            b -= 1
    return a, b


def unclosed(text: str, a: int, b: int) -> bool:
    """Whether the span [a, b) starts with an opening bracket or quotation mark that it does not close (matched as
    nested pairs: "(1999) and Jones (2001" closes its first)."""
    opener = text[a]
    closer = OPENERS.get(opener)
    if closer is None:
        return False
    depth = 0
    for c in text[a:b]:
        depth += (c == opener) - (c == closer)
        if depth == 0:
            return False
    return True


def lone_guillemet(text: str, a: int, b: int, i: int) -> bool:
    """Whether ``text[i]`` (the first or last character of the span [a, b)) is a guillemet with no other of its kind
    in the span ("« La Fée du lac", "La Fée du lac »"; "»Faust«" and "« Rosa »" keep theirs)."""
    kind = next((g for g in GUILLEMETS if text[i] in g), None)
    return kind is not None and sum(text.count(g, a, b) for g in kind) == 1


def unopened(text: str, a: int, b: int) -> bool:
    """Whether the span [a, b) ends with a closing bracket that it does not open ("200)" of "(up to 200)"; matched as
    nested pairs from the end: "1999) and (2001)" opens its last)."""
    close = text[b - 1]
    opener = CLOSERS.get(close)
    if opener is None:
        return False
    depth = 0
    for c in reversed(text[a:b]):
        depth += (c == close) - (c == opener)
        if depth == 0:
            return False
    return True


__all__ = ["HIT_FIELDS", "Hit", "HitBuilder", "Hits", "distinct", "first_per_unit", "non_overlapping",
           "non_overlapping_spans", "tidy_span"]


def _wide_gaps(index: Any) -> np.ndarray:
    """``HitBuilder.wide_gaps`` of a token map: tokens whose next token in the same passage starts at least two
    characters after them (a span never crosses passages)."""
    off, passage = index.token_offsets, np.asarray(index.token_passage)
    gap = (np.asarray(off[1:, 0]) - np.asarray(off[:-1, 1]) >= 2) & (passage[1:] == passage[:-1])
    return np.flatnonzero(gap)


class HitBuilder:
    """Hits and span texts from an index's token ids."""

    def __init__(self, index: PhraseIndex):
        self.index = index

    def wide_gaps(self) -> np.ndarray:
        """The tokens followed by at least two characters before the next one of their passage (where a paragraph
        break can be), ascending; found once an index, at its first search (tens of ms for 10M tokens; a few in
        SQuAD-like text), and for a live snapshot once its base and in its segment (``core.chained.derived``)."""
        return derived(self.index, "wide_gaps", _wide_gaps, "ids")

    def span_text(self, start_tok: int, end_tok: int) -> str:
        idx = self.index
        text = idx.passages[int(idx.token_passage[start_tok])]["text"]
        return text[int(idx.token_offsets[start_tok, 0]) : int(idx.token_offsets[end_tok, 1])]

    def hit(self, start_tok: int, end_tok: int, score: float, dense: float | None = None,
            lexical: float | None = None) -> Hit:
        """The hit of the span from token ``start_tok`` to ``end_tok`` (inclusive)."""
        idx = self.index
        p = int(idx.token_passage[start_tok])
        a, b = int(idx.token_offsets[start_tok, 0]), int(idx.token_offsets[end_tok, 1])
        return self.passage_hit(p, a, b, score, dense, lexical)

    def ranked(self, sp: Spans, plan: Plan, unit_of_passage: np.ndarray | None) -> list[Hit]:
        """Dense mode's hits of sorted spans: a phrase per span (not overlapping a better one unless the plan allows
        it), or each unit's first (best) span (``unit_of_passage``: each passage's unit): score = max over its
        phrases."""
        if unit_of_passage is not None:
            pick = first_per_unit(unit_of_passage[self.index.token_passage[sp.starts]])[: plan.top_k]
        elif plan.params.allow_overlap:
            return distinct((self.hit(int(sp.starts[i]), int(sp.ends[i]), float(sp.scores[i]), float(sp.scores[i]))
                             for i in self.answers(sp.starts, sp.ends)), plan.top_k)
        else:
            pick = non_overlapping_spans(sp.starts, sp.ends, self.answers(sp.starts, sp.ends), plan.top_k)
        return [self.hit(int(sp.starts[i]), int(sp.ends[i]), float(sp.scores[i]), float(sp.scores[i])) for i in pick]

    def answers(self, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
        """Positions of the spans (token ids, in their order) that can be an answer: not one token that is a single
        character without a letter or digit ("." and "," were phrase hits, below the better ones), nor a span over
        a paragraph break inside a passage ("validation\n\nMPNet-base": a heading and the text after it, or two
        paragraphs a corpus packed into one passage)."""
        offsets = self.index.token_offsets
        single = np.flatnonzero((starts == ends) & (offsets[starts, 1] - offsets[starts, 0] == 1))
        junk = [i for i in single.tolist() if not self.span_text(int(starts[i]), int(ends[i])).isalnum()]
        wide = self.wide_gaps()  # a span over one of these gaps is looked at closer
        gapped = np.flatnonzero(np.searchsorted(wide, starts) < np.searchsorted(wide, ends))
        junk += [i for i in gapped.tolist() if "\n\n" in self.span_text(int(starts[i]), int(ends[i]))]
        keep = np.ones(len(starts), dtype=bool)
        keep[junk] = False
        return np.flatnonzero(keep)

    def passage_hit(self, p: int, a: int, b: int, score: float, dense: float | None = None,
                    lexical: float | None = None, read: float | None = None) -> Hit:
        """The hit of characters [a, b) of passage ``p``, tidied (``tidy_span``)."""
        passage = self.index.passages[p]
        doc = self.index.docs[passage["doc"]]
        meta = doc.get("meta", {})
        if "meta" in passage:  # the passage's own metadata (a page, a heading path) over its document's
            meta = {**meta, **passage["meta"]}
        text = passage["text"]
        a, b = tidy_span(text, a, b)
        return Hit.of_fields({
            "text": text[a:b], "score": score, "start": a, "end": b, "passage_id": p, "passage": text,
            "doc_id": doc["id"], "title": doc["title"], "paragraph": int(passage["para"]), "meta": meta,
            "dense": dense, "lexical": lexical, "confidence": None, "read": read, "copies": None, "copy_doc_ids": None,
        })


def distinct(hits: Iterable[Hit], k: int) -> list[Hit]:
    """The first ``k`` hits of distinct characters: two token spans that tidy to the same ones ("Canberra" and
    "Canberra ,", ``tidy_span``) are one hit, the better one (with ``allow_overlap``; without it they overlap)."""
    kept: list[Hit] = []
    seen: set[tuple[int, int, int]] = set()
    for h in hits:
        if len(kept) == k:
            break
        if (h.passage_id, h.start, h.end) not in seen:
            seen.add((h.passage_id, h.start, h.end))
            kept.append(h)
    return kept


def non_overlapping(hits: Sequence[Hit], k: int) -> list[Hit]:
    """The first ``k`` hits (greedy, best first) whose phrases do not overlap a phrase kept before them: two hits
    overlap when they are in the same passage and their character ranges intersect."""
    kept: list[Hit] = []
    taken: dict[int, list[tuple[int, int]]] = {}
    for h in hits:
        spans = taken.setdefault(h.passage_id, [])
        if any(h.start < e and s < h.end for s, e in spans):
            continue
        spans.append((h.start, h.end))
        kept.append(h)
        if len(kept) == k:
            break
    return kept


def non_overlapping_spans(starts: np.ndarray, ends: np.ndarray, order: np.ndarray, k: int) -> np.ndarray:
    """``non_overlapping`` on spans: the first ``k`` of ``order`` (best first) whose token range does not intersect
    one kept before them. Token ids run through each passage in turn, so intersecting token ranges are exactly
    intersecting character ranges in one passage.

    The kept spans are disjoint, so sorted by start they are sorted by end too: a span [s, e] meets one of them
    exactly when the last kept span starting at or before e ends at or after s (one bisection). The candidates are
    read ``NON_OVERLAP_CHUNK`` at a time, as Python ints (numpy scalars compare 10x slower): most searches keep their
    k among the first few dozen of hundreds."""
    kept: list[int] = []
    first: list[int] = []  # the kept spans' starts and ends, by start
    last: list[int] = []
    for a in range(0, len(order), NON_OVERLAP_CHUNK):
        part = order[a : a + NON_OVERLAP_CHUNK]
        for i, s, e in zip(part.tolist(), starts[part].tolist(), ends[part].tolist(), strict=True):
            j = bisect.bisect_right(first, e)
            if j and last[j - 1] >= s:
                continue
            first.insert(j, s)
            last.insert(j, e)
            kept.append(i)
            if len(kept) == k:
                return np.asarray(kept, dtype=np.int64)
    return np.asarray(kept, dtype=np.int64)


def first_per_unit(units: np.ndarray) -> np.ndarray:
    """Positions of each unit's first occurrence in ``units``, in order of appearance."""
    _, first = np.unique(units, return_index=True)
    return np.sort(first)
