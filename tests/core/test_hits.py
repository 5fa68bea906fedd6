"""The overlap rule of phrase hits: ``non_overlapping_spans`` (token ranges, bisection over the kept spans) against
the brute-force rule, and against ``non_overlapping`` on hits (character ranges within a passage)."""

from __future__ import annotations

import numpy as np
import pytest

from spanseek.core.hits import NON_OVERLAP_CHUNK, non_overlapping, non_overlapping_spans
from spanseek.core.params import Hit


def brute_force(starts: np.ndarray, ends: np.ndarray, order: np.ndarray, k: int) -> list[int]:
    """Greedy, best first: keep a span when it meets no span kept before it (every kept span checked)."""
    kept: list[int] = []
    for i in order.tolist():
        if all(ends[i] < starts[j] or ends[j] < starts[i] for j in kept):
            kept.append(i)
            if len(kept) == k:
                break
    return kept


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("k", [1, 3, 10, NON_OVERLAP_CHUNK + 5, 10_000])
def test_non_overlapping_spans_keeps_what_the_brute_force_rule_keeps(seed, k):
    """Crowded spans (many share tokens, some are single tokens, some repeat exactly), in a random order longer than
    several chunks: the same spans kept, in the same order."""
    rng = np.random.default_rng(seed)
    n = 5 * NON_OVERLAP_CHUNK + 7
    starts = rng.integers(0, 300, n)
    ends = starts + rng.integers(0, 9, n)
    ends[::11] = starts[::11]
    starts[5::17], ends[5::17] = starts[4], ends[4]
    order = rng.permutation(n)
    got = non_overlapping_spans(starts, ends, order, k)
    assert got.dtype == np.int64
    assert got.tolist() == brute_force(starts, ends, order, k)
    if k >= n:  # what is left out meets a kept span
        left = np.setdiff1d(order, got)
        assert all(any(starts[i] <= ends[j] and starts[j] <= ends[i] for j in got) for i in left)


def test_non_overlapping_spans_of_nothing_and_of_a_prefix_of_the_order():
    starts, ends = np.array([0, 2, 4]), np.array([1, 3, 5])
    assert non_overlapping_spans(starts, ends, np.zeros(0, np.int64), 3).tolist() == []
    assert non_overlapping_spans(starts, ends, np.array([2, 0]), 5).tolist() == [2, 0]  # span 1 not in the order
    assert non_overlapping_spans(np.array([3, 3]), np.array([3, 8]), np.array([1, 0]), 2).tolist() == [1]  # touching


def test_non_overlapping_spans_agrees_with_the_rule_on_hits():
    """Tokens as characters of one passage (and a second passage whose tokens come after): the spans kept are the
    hits ``non_overlapping`` keeps."""
    rng = np.random.default_rng(9)
    starts = rng.integers(0, 200, 120)
    passage = (starts >= 100).astype(int)
    ends = np.minimum(starts + rng.integers(0, 6, 120), 100 * passage + 99)  # a span stays in its passage
    hits = [Hit(text="x", score=0.0, start=int(s - 100 * p), end=int(e - 100 * p) + 1, passage_id=int(p), passage="",
                doc_id="d", title="t") for s, e, p in zip(starts, ends, passage, strict=True)]
    kept = non_overlapping(hits, 15)
    spans = non_overlapping_spans(starts, ends, np.arange(120), 15)
    assert [hits[i] for i in spans] == kept


def test_distinct_keeps_the_first_hit_of_each_passages_characters():
    """``distinct`` (overlapping hits): one hit per (passage, characters), the first, up to k; the same characters
    of two passages (every paragraph starting "In 1500") are two hits."""
    from spanseek.core.hits import distinct

    def hit(passage_id, start, end, score):
        return Hit(text="x", score=score, start=start, end=end, passage_id=passage_id, passage="", doc_id="d",
                   title="t")

    hits = [hit(0, 0, 7, 5.0), hit(1, 0, 7, 4.0), hit(0, 0, 7, 3.0), hit(0, 3, 7, 2.0), hit(1, 0, 7, 1.0)]
    assert distinct(hits, 10) == [hits[0], hits[1], hits[3]]
    assert distinct(hits, 2) == hits[:2] and distinct(iter(hits), 0) == [] and distinct([], 3) == []


@pytest.mark.parametrize(("text", "span", "shown"), [
    ("It was -84 degrees.", "84 degrees.", "-84 degrees"),  # another temperature without its sign
    ("cost $5 million", "5 million", "$5 million"),
    ("the B-52 bomber", "52", "52"),  # a hyphen inside a word is no sign
    ("Founded by Ed Snider.", "Ed Snider.", "Ed Snider"),
    ("in the U.S.", "U.S.", "U.S."), ("of Apple Inc.", "Apple Inc.", "Apple Inc."),  # abbreviations keep theirs
    ("by Acme Corp.", "Acme Corp.", "Acme Corp."), ("by John J.", "John J.", "John J."),
    ("It was Tom.", "Tom.", "Tom"), ("He scored 42.", "scored 42.", "scored 42"),
    ("Canberra, the capital", "Canberra,", "Canberra"), ("a; b", "a;", "a"), ("a.", "a.", "a."),
    # a reader's spans over technical text: a bracket or a full stop the answer does not own
    ("(at most 200).", "200).", "200"), ("call open_searcher) here", "open_searcher)", "open_searcher"),
    ("read by pdfminer.six.", "pdfminer.six.", "pdfminer.six"), ("it. open_searcher", ". open_searcher",
                                                                   "open_searcher"),
    ("f(x) is", "f(x)", "f(x)"), ("(see [1])", "[1])", "[1]"), ("J.R.R. Tolkien", "J.R.R.", "J.R.R."),
    ("(born 1950 in Rome)", "(born 1950", "born 1950"),  # an opening bracket the span does not close
    # other scripts' punctuation, and a combining accent the tokenizer left out of the last token
    ("明成祖下令修建。", "下令修建。", "下令修建"), ("巴黎，法国", "巴黎，", "巴黎"), ("（最多200）。", "200）。", "200"),
    ("le roman « La Fée du lac » paru", "« La Fée du lac", "La Fée du lac"),
    ("le roman « La Fée du lac » paru", "La Fée du lac »", "La Fée du lac"),
    ("le roman « La Fée du lac » paru", "« La Fée du lac »", "« La Fée du lac »"),
    ("Goethes »Faust« ist", "»Faust«", "»Faust«"), ("Goethes »Faust« ist", "»Faust", "Faust"),
    ("Smith (1999) and Jones (2001) wrote", "(1999) and Jones (2001", "(1999) and Jones (2001"),
    ("the sculptor Rene\u0301 since 1987", "Rene", "Rene\u0301"), ("Ship it \u2764\ufe0f now", "\u2764", "\u2764\ufe0f"),
])
def test_a_span_shows_as_an_answer_reads(text, span, shown):
    from spanseek.core.hits import tidy_span

    a = text.index(span)
    start, end = tidy_span(text, a, a + len(span))
    assert text[start:end] == shown
