"""Ordering and deduplicating a batch's spans: ``by_group_then_score`` against ``np.lexsort``, and
``dedupe_grouped`` (one integer key a span, or lexsort for indexes too large for it) against a dictionary."""

from __future__ import annotations

import numpy as np
import pytest

from spanseek.core.dense import dedupe_grouped
from spanseek.core.spans import by_group_then_score


def crowded_spans(seed: int, n: int = 400, groups: int = 7, n_tokens: int = 50):
    """Spans of few tokens and few score values (many exact ties and exact duplicates), groups in any order."""
    rng = np.random.default_rng(seed)
    starts = rng.integers(0, n_tokens - 3, n)
    ends = starts + rng.integers(0, 3, n)
    scores = rng.integers(-4, 4, n).astype(np.float32)
    scores[::13] = -0.0  # equal to 0.0
    return rng.integers(0, groups, n), starts, ends, scores


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("offset", [0, (1 << 15) - 3, 1 << 16, 1 << 40],
                         ids=["small-groups", "int16-edge", "past-int16", "large-groups"])
def test_by_group_then_score_is_lexsort(seed, offset):
    """Group numbers small enough to sort as int16, and larger ones: "int16-edge" straddles 2^15 (groups 32765 to
    32771), where a group taken for an int16 would wrap to a negative number and sort first."""
    groups, _, _, scores = crowded_spans(seed)
    groups = groups + offset
    assert by_group_then_score(groups, scores).tolist() == np.lexsort((-scores, groups)).tolist()
    assert by_group_then_score(groups[:0], scores[:0]).tolist() == []


def brute_force_dedupe(groups, starts, ends, scores, n_groups):
    out = []
    for g in range(n_groups):
        mine = np.flatnonzero(groups == g)
        mine = mine[np.argsort(-scores[mine], kind="stable")]
        seen: dict[tuple[int, int], float] = {}
        for i in mine.tolist():
            seen.setdefault((int(starts[i]), int(ends[i])), float(scores[i]))
        out.append(list(seen.items()))
    return out


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("n_tokens", [50, 1 << 31], ids=["integer-key", "lexsort-key"])
def test_dedupe_grouped_keeps_each_spans_best_in_score_order(seed, n_tokens):
    """Each group's spans once, with their best score, best first, ties in their given order; a group without
    spans is empty; the large-index path gives the same."""
    groups, starts, ends, scores = crowded_spans(seed)
    n_groups = int(groups.max()) + 2
    got = dedupe_grouped(groups, starts, ends, scores, n_tokens, n_groups)
    want = brute_force_dedupe(groups, starts, ends, scores, n_groups)
    assert len(got) == n_groups and not len(got[-1].starts)
    for sp, expected in zip(got, want, strict=True):
        assert list(zip(zip(sp.starts.tolist(), sp.ends.tolist(), strict=True), sp.scores.tolist(), strict=True)) == expected
