"""A call's questions are encoded and searched a chunk at a time: memory bounded by a chunk, hits as in one batch.

    .venv/bin/python -m pytest -q tests/core/test_search_chunks.py
"""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from spanseek.core.params import MODES, UNITS, SearchFilter, SearchParams
from spanseek.core.plan import StageTimes


def questions(n: int) -> list[str]:
    words = ("bridge", "tower", "hall", "road", "mill", "church", "school", "harbour")
    asked = [f"who built the {words[i % len(words)]} in {1900 + 7 * i}?" for i in range(n)]
    asked[3] = asked[n // 2] = "  "  # blank ones get no hits wherever they fall
    return asked


def same_hits(found, expected) -> None:
    """The same hits in the same order, abstentions and all; the same scores to float32 rounding (the flat index's
    token scores come from one matrix product per batch, whose rounding depends a little on the batch's size)."""
    def rows(hits_lists):
        return [[(h.passage_id, h.start, h.end, h.text, h.lexical is None, h.confidence is None) for h in hits]
                + [hits.no_answer] for hits in hits_lists]

    def scores(hits_lists):
        return np.asarray([[np.nan if x is None else x for x in (h.score, h.dense, h.lexical, h.confidence)]
                           for hits in hits_lists for h in hits], dtype=np.float64).reshape(-1, 4)

    assert rows(found) == rows(expected)
    np.testing.assert_allclose(scores(found), scores(expected), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("unit", UNITS)
@pytest.mark.parametrize("mode", MODES)
def test_a_chunked_call_gives_every_question_the_hits_of_one_batch(tiny_searcher, monkeypatch, unit, mode):
    """The oracle: the same call with every question in one chunk (a filter, and a page past the first, too)."""
    asked = questions(23)
    filtered = SearchFilter(doc_ids=tuple(d["id"] for d in tiny_searcher.index.docs[::2]))
    for params in (SearchParams(unit=unit, mode=mode, top_k=4), SearchParams(unit=unit, mode=mode, top_k=3,
                                                                             filter=filtered, offset=1)):
        monkeypatch.setattr(tiny_searcher, "chunk_size", 10_000)
        whole = tiny_searcher.search(asked, params)
        q_start, q_end = tiny_searcher.encoder.encode(asked)
        whole_vectors = tiny_searcher.search_vectors(q_start, q_end, params, None, asked)
        monkeypatch.setattr(tiny_searcher, "chunk_size", 5)
        same_hits(tiny_searcher.search(asked, params), whole)
        same_hits(tiny_searcher.search_vectors(q_start, q_end, params, None, asked), whole_vectors)


def test_no_part_of_a_call_encodes_or_searches_more_than_a_chunk(tiny_searcher, monkeypatch):
    """One call encoded all its questions as one batch and searched them as one, so its memory grew with the call."""
    encoded, searched = [], []
    encode, deep = tiny_searcher.encoder.encode, tiny_searcher.ranking.deep
    monkeypatch.setattr(tiny_searcher.encoder, "encode", lambda qs: encoded.append(len(qs)) or encode(qs))
    monkeypatch.setattr(tiny_searcher.ranking, "deep", lambda plan, q_start, *a: searched.append(len(q_start))
                        or deep(plan, q_start, *a))
    monkeypatch.setattr(tiny_searcher, "chunk_size", 8)
    timings = StageTimes()
    found = tiny_searcher.search(questions(30), SearchParams(unit="passage", top_k=2), timings)
    assert len(found) == 30 and [len(hits) for hits in found].count(0) == 2
    assert encoded == [8, 8, 8, 4] and searched == [8, 8, 8, 4]  # the 28 non-blank questions
    assert len([stage for stage, *_ in timings.intervals if stage == "encode"]) == 4  # every chunk's time counted
    assert timings.encode > 0 and timings.search > 0


def test_the_working_memory_of_a_call_is_bounded_by_a_chunk_not_by_the_questions(tiny_searcher, monkeypatch):
    """Peak memory traced while searching 8 times as many questions (numpy's arrays are traced), less the hits it
    returns (they grow with the questions, as they must)."""
    monkeypatch.setattr(tiny_searcher, "chunk_size", 16)
    q_start, q_end = tiny_searcher.encoder.encode(questions(256))
    params = SearchParams(unit="phrase", top_k=10, mode="dense")

    def working(n: int) -> int:
        tracemalloc.start()
        try:
            found = tiny_searcher.search_vectors(q_start[:n], q_end[:n], params)
            kept, peak = tracemalloc.get_traced_memory()
            assert len(found) == n
            return peak - kept
        finally:
            tracemalloc.stop()

    small, large = working(32), working(256)
    assert large < 2 * small, (small, large)
