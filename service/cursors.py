"""Paging cursors of ``POST /search``: the rest of a question's ranking, kept for its next pages.

A search with a ``rank_window`` deeper than its page ranks that deep anyway; the hits past the page are kept here,
and the question's result carries ``next``, a cursor for them. ``{"cursor": next}`` answers the next page from the
kept ranking, without searching: pages follow one another exactly (no hit repeated, none skipped) whatever is
written, deleted, merged or reloaded between them, as the first page's index had the ranking. A cursor is a
random id and a position in its ranking, so asking for a page again (a retry) gives the same page. Rankings are
kept ``cursor_ttl_s`` after their last page and within ``cursor_cache_bytes`` (the least recently paged go first);
a cursor whose ranking is gone is refused (410), and the client searches again. Used by service/routes.py.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from spanseek.core.hits import Hit
from spanseek.core.params import Unit
from spanseek.service.errors import CursorExpired

# What a kept hit holds beyond its strings: the Hit and its dict of 17 fields, a few floats and ints
HIT_OBJECT_BYTES = 700


@dataclass(frozen=True)
class Ranking:
    """The kept rest of one question's ranking: its unit, the question as searched (and whether it was cut to
    ``max_query_chars``), the hits past its first page, the page size asked for, and the passage context of its
    hits (``None``: whole passages)."""

    unit: Unit
    query: str
    truncated: bool
    hits: Sequence[Hit]
    top_k: int
    context: int | None

    @property
    def nbytes(self) -> int:
        """About what keeping it holds: its hits' strings (a character a byte at least) and objects."""
        return len(self.query) + sum(len(h.passage) + len(h.text) + len(h.title) + len(h.doc_id) + HIT_OBJECT_BYTES
                                     for h in self.hits)


class Cursors:
    """The rankings kept for their next pages, within ``max_bytes`` (the newest is kept even when it alone is
    larger), each until ``ttl_s`` after it was kept or last paged. Routes use it from the event loop and tests from
    threads: a lock guards it."""

    def __init__(self, max_bytes: int, ttl_s: float, clock: Callable[[], float] = time.monotonic):
        self.max_bytes, self.ttl_s, self.clock = max_bytes, ttl_s, clock
        self._kept: OrderedDict[str, tuple[Ranking, float]] = OrderedDict()  # least recently paged first
        self.nbytes = 0
        self._lock = threading.Lock()

    def cursor(self, ranking: Ranking) -> str | None:
        """A new cursor for ``ranking``'s first hit, which ``keep`` then keeps (None when it has none, or rankings are
        not kept). Named apart from keeping it, so that an answer refused once made (over ``max_response_bytes``)
        keeps no ranking that no client can page, and pushes out none that one is paging."""
        if not ranking.hits or self.max_bytes == 0 or self.ttl_s == 0:
            return None
        return f"{secrets.token_urlsafe(16)}.0"

    def keep(self, cursor: str | None, ranking: Ranking) -> None:
        """Keep ``ranking`` for its ``cursor`` (as ``cursor`` gave it; None: nothing to keep)."""
        if cursor is None:
            return
        with self._lock:
            self._kept[cursor.partition(".")[0]] = (ranking, self.clock() + self.ttl_s)
            self.nbytes += ranking.nbytes
            self._drop_old()

    def page(self, cursor: str, top_k: int | None) -> tuple[Ranking, list[Hit], str | None]:
        """The ranking of ``cursor`` (as ``cursor`` or this method gave it), its next ``top_k`` hits (default: the
        first page's size) and the cursor after them (None at its end); CursorExpired when it is no longer kept.
        The ranking is kept ``ttl_s`` longer."""
        key, _, at = cursor.partition(".")
        with self._lock:
            self._drop_old()
            kept = self._kept.get(key)
            if kept is None:
                raise CursorExpired()
            ranking = kept[0]
            self._kept[key] = (ranking, self.clock() + self.ttl_s)
            self._kept.move_to_end(key)
        start = min(int(at), len(ranking.hits))
        end = start + (top_k or ranking.top_k)
        return ranking, list(ranking.hits[start:end]), f"{key}.{end}" if end < len(ranking.hits) else None

    def __len__(self) -> int:
        return len(self._kept)

    def _drop_old(self) -> None:
        """Drop the expired rankings, then the least recently paged while over the budget (under the lock)."""
        now = self.clock()
        while self._kept:
            key, (ranking, until) = next(iter(self._kept.items()))
            if until > now and (self.nbytes <= self.max_bytes or len(self._kept) == 1):
                return
            del self._kept[key]
            self.nbytes -= ranking.nbytes
