"""Bounded responses: each hit carries a window of its passage around the phrase, and a response has a size cap.

A hit's ``passage`` is at most ``2 * passage_context_chars`` characters plus the phrase itself unless the request
asks for ``full_passage``; a whole answer is refused (400 ``response_too_large``) beyond ``max_response_bytes``
before it is rendered, so neither a huge paragraph, large metadata nor a deep top_k can make the server build a huge
body: the estimate counts every hit's strings and its metadata (as JSON, measured once per metadata object) and
stops as soon as it passes the limit. An answer sure to pass the limit whatever is found (many questions, a deep
page of passages or documents) is refused before it is searched.
Used by the /search route (service/routes.py).
"""

from __future__ import annotations

import json
import unicodedata
from typing import Any

from fastapi import Response

from spanseek.core.hits import Hit
from spanseek.core.params import SearchParams
from spanseek.core.text import has_text
from spanseek.service.cost import CostModel
from spanseek.service.errors import ResponseTooLarge
from spanseek.service.schemas import SearchResponse

# JSON punctuation, field names and numbers of one hit beyond its strings: at least this many bytes (~125 measured)
HIT_OVERHEAD_BYTES = 100


def passage_window(hit: Hit, context_chars: int | None) -> dict[str, Any]:
    """The hit as response fields, its passage cut to ``context_chars`` characters each side of the phrase.

    ``start``/``end`` stay offsets of the phrase in the returned ``passage``; ``passage_offset`` says where that
    window starts in the whole passage. A cut that falls inside a word moves outward to the word's edge only
    if the edge is near (so the window never grows by more than ~32 characters a side), and never falls inside a
    character as read: a letter and its combining marks, an emoji and its variation selector or joined emoji stay
    together (text without spaces, Thai or emoji, is cut between them). ``None`` = whole passage.
    """
    passage = hit.passage
    fields = hit.to_dict()
    fields["passage_chars"] = len(passage)
    if context_chars is None or len(passage) <= hit.end - hit.start + 2 * context_chars:
        fields["passage_offset"] = 0
        return fields
    lo = max(0, hit.start - context_chars)
    hi = min(len(passage), hit.end + context_chars)
    lo = _word_edge_before(passage, lo)
    hi = _word_edge_after(passage, hi)
    fields.update(passage=passage[lo:hi], start=hit.start - lo, end=hit.end - lo, passage_offset=lo)
    return fields


_SNAP = 32  # the farthest a window edge moves to reach a word boundary


_JOINER = "\u200d"  # zero-width joiner: the characters on both sides of it are read as one


def _joined(text: str, i: int) -> bool:
    """Whether a cut before ``text[i]`` would split a character as read (a combining mark, or a zero-width joiner
    on either side)."""
    return 0 < i < len(text) and (unicodedata.category(text[i]) in ("Mn", "Me", "Mc") or _JOINER in text[i - 1 : i + 1])


def _word_edge_before(text: str, i: int) -> int:
    if i == 0 or text[i - 1].isspace():
        return i
    j = text.rfind(" ", max(0, i - _SNAP), i)
    if j >= 0:
        return j + 1
    while _joined(text, i):
        i -= 1
    return i


def _word_edge_after(text: str, i: int) -> int:
    if i >= len(text) or text[i].isspace():
        return i
    j = text.find(" ", i, i + _SNAP)
    if j >= 0:
        return j
    while _joined(text, i):
        i += 1
    return i


def estimated_bytes(hits: list[list[dict[str, Any]]], queries: list[str], limit: int | None = None) -> int:
    """A lower bound of the JSON size of these results: every character of their strings is at least one byte, and
    each hit's metadata is its JSON (hits of one document share their metadata object, measured once).

    With ``limit``, it returns as soon as the bound passes it (a few hits of megabyte metadata are enough).
    """
    total = sum(len(q) for q in queries) + 64 * len(queries)
    meta_bytes: dict[int, int] = {}
    for per_query in hits:
        for h in per_query:
            meta = h.get("meta") or None
            size = 0
            if meta is not None:
                size = meta_bytes.get(id(meta), -1)
                if size < 0:
                    size = meta_bytes[id(meta)] = len(json.dumps(meta, ensure_ascii=False))
            total += (len(h["text"]) + len(h["passage"]) + len(h["doc_id"]) + len(h["title"]) + size
                      + HIT_OVERHEAD_BYTES)
            if limit is not None and total > limit:
                return total
    return total


def check_response_size(size: int, limit: int, *, exact: bool) -> None:
    """Raise ResponseTooLarge (400) naming the size, the limit and what to ask for instead."""
    if size > limit:
        what = f"{size}" if exact else f"at least {size}"
        raise ResponseTooLarge(
            f"the response would be {what} bytes, over this server's limit of {limit} (max_response_bytes); "
            "ask for fewer hits (top_k) or queries, or leave full_passage off"
        )


def least_hits(params: SearchParams, cost: CostModel) -> int:
    """Hits the search is sure to give each question with text, known before it runs: a passage or document search
    fills its page from the index's units (``core.dense``: it deepens until ``depth`` units are found, and a hybrid
    ranking holds the dense one's), unless a filter, abstention (``min_confidence``), collapsing copies or reading may
    leave some out, or the index has a token filter (a passage none of whose tokens it kept is never found); 0
    otherwise (a phrase search may find fewer phrases than asked: overlapping ones are dropped)."""
    mode = params.mode or cost.default_mode
    if (params.unit == "phrase" or mode == "lexical" or params.filter is not None or params.read
            or params.min_confidence is not None or params.collapse_duplicates or not cost.every_token_indexed):
        return 0
    return max(0, min(params.top_k, min(params.depth, cost.units.get(params.unit, 0)) - params.offset))


def check_before_search(questions: list[str], params: SearchParams, cost: CostModel, limit: int) -> None:
    """ResponseTooLarge (400), before searching, when the answer is sure to exceed ``limit`` bytes: ``least_hits``
    per question with text, each at least ``HIT_OVERHEAD_BYTES`` and a character of phrase and of passage. It is
    below ``estimated_bytes`` of whatever the search finds, so it refuses only what ``check_estimate`` would refuse
    once searched: a huge request is refused at once, and one whose answer fits is searched."""
    hits = least_hits(params, cost) * sum(has_text(q) for q in questions)
    check_response_size(estimated_bytes([], questions) + hits * (HIT_OVERHEAD_BYTES + 2), limit, exact=False)


def check_estimate(hits: list[list[dict[str, Any]]], queries: list[str], limit: int) -> None:
    """ResponseTooLarge (400) when the lower bound of the answer's size (``estimated_bytes``) already exceeds
    ``limit``: called before the response is built, so an oversized answer costs no rendering."""
    check_response_size(estimated_bytes(hits, queries, limit), limit, exact=False)


def render_bounded(answer: SearchResponse, limit: int, headers: dict[str, str]) -> Response:
    """The JSON response, or ResponseTooLarge (400) when it exceeds ``limit`` bytes (after ``check_estimate``,
    the rendered bytes are at most a few times the limit)."""
    content = answer.model_dump_json().encode()
    check_response_size(len(content), limit, exact=True)
    return Response(content, media_type="application/json", headers=headers)
