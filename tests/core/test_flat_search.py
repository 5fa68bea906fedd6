"""Exact MIPS over a flat index (core.flat_search) against faiss's own IndexFlatIP search on synthetic vectors.

faiss is the oracle for the ids and their order, ties included: duplicated vectors tie exactly, and faiss keeps
(and lists first) the larger id among them.

    .venv/bin/python -m pytest -q tests/core/test_flat_search.py
"""

from __future__ import annotations

import numpy as np
import pytest

from spanseek.core.flat_search import (
    SMALL_ROWS,
    FlatScan,
    block_maxima,
    flat_vectors,
    scores_into,
    top_ids,
    top_values,
)


def flat_index(x: np.ndarray):
    import faiss

    index = faiss.IndexFlatIP(x.shape[1])
    index.add(x)
    return index


def vectors_with_duplicates(rng: np.random.Generator, n: int, d: int) -> np.ndarray:
    """``n`` vectors on a coarse grid (many exact score ties), a block of them repeated further on."""
    x = rng.integers(-2, 3, size=(n, d)).astype(np.float32)
    x[n // 2 : n // 2 + 40] = x[10:50]  # a duplicated passage: its tokens tie exactly with the originals
    return x


@pytest.mark.parametrize("k", [1, 5, 37, 300])
def test_top_ids_are_faiss_ids_in_faiss_order_ties_included(k):
    rng = np.random.default_rng(0)
    x = vectors_with_duplicates(rng, 600, 8)
    queries = np.concatenate([x[[12, 20, 33]], rng.integers(-2, 3, size=(5, 8)).astype(np.float32)])
    _, expected = flat_index(x).search(queries, k)
    got = FlatScan(flat_index(x), queries, None).top(np.arange(len(queries)), k)
    np.testing.assert_array_equal(got, expected)


def test_rows_are_any_subset_and_blocks_give_the_same_ids():
    rng = np.random.default_rng(1)
    x = vectors_with_duplicates(rng, 500, 6)
    queries = rng.standard_normal((9, 6)).astype(np.float32)
    index = flat_index(x)
    held = FlatScan(index, queries, None)
    blocked = FlatScan(index, queries, None, max_bytes=3 * 4 * len(x))  # 3 query rows at a time, no batch copy
    rows = np.array([7, 2, 2, 5])
    np.testing.assert_array_equal(held.top(rows, 20), blocked.top(rows, 20))
    np.testing.assert_array_equal(held.top(rows, 20), held.top(np.arange(9), 20)[rows])


def test_not_allowed_tokens_are_skipped_and_short_rows_end_in_minus_one():
    import faiss

    rng = np.random.default_rng(2)
    x = rng.standard_normal((200, 4)).astype(np.float32)
    allowed = np.zeros(200, dtype=bool)
    allowed[rng.choice(200, 15, replace=False)] = True
    queries = rng.standard_normal((4, 4)).astype(np.float32)
    index = flat_index(x)
    params = faiss.SearchParameters(sel=faiss.IDSelectorBatch(np.flatnonzero(allowed)))
    _, expected = index.search(queries, 25, params=params)  # 15 allowed: 10 x -1 at the end of each row
    got = FlatScan(index, queries, allowed).top(np.arange(4), 25)
    np.testing.assert_array_equal(got, expected)
    assert (got[:, 15:] == -1).all()


def test_k_beyond_the_index_lists_every_token_then_minus_one():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((30, 4)).astype(np.float32)
    queries = rng.standard_normal((2, 4)).astype(np.float32)
    _, expected = flat_index(x).search(queries, 40)
    np.testing.assert_array_equal(FlatScan(flat_index(x), queries, None).top(np.arange(2), 40), expected)


def test_only_a_plain_inner_product_flat_index_is_scanned():
    import faiss

    x = np.random.default_rng(4).standard_normal((50, 8)).astype(np.float32)
    index = flat_index(x)
    np.testing.assert_array_equal(flat_vectors(index), x)
    l2 = faiss.IndexFlatL2(8)
    l2.add(x)
    ivf = faiss.index_factory(8, "IVF2,Flat", faiss.METRIC_INNER_PRODUCT)
    ivf.train(x)
    ivf.add(x)
    mapped = faiss.IndexIDMap(faiss.IndexFlatIP(8))
    mapped.add_with_ids(x, np.arange(50) + 100)
    assert flat_vectors(l2) is None and flat_vectors(ivf) is None and flat_vectors(mapped) is None
    assert flat_vectors(faiss.IndexFlatIP(8)) is None  # empty
    with pytest.raises(ValueError, match="not a flat inner-product index"):
        FlatScan(l2, x[:2], None)


def test_top_ids_of_an_empty_selection():
    import torch

    scores = torch.full((2, 10), float("-inf"))
    assert (top_ids(scores, 4) == -1).all()


@pytest.mark.parametrize("seed", range(6))
def test_many_ties_at_many_depths_match_faiss(seed):
    """Vectors of -1/0/1 over 3 dimensions: hundreds of tokens share each score, so every cut falls in a tie."""
    rng = np.random.default_rng(seed)
    x = rng.integers(-1, 2, size=(int(rng.integers(50, 3000)), 3)).astype(np.float32)
    queries = rng.integers(-1, 2, size=(6, 3)).astype(np.float32)
    index = flat_index(x)
    scan = FlatScan(index, queries, None)
    for k in sorted({2, 3, 32, 64, int(rng.integers(2, len(x))), len(x) - 1, len(x)}):
        _, expected = index.search(queries, k)
        np.testing.assert_array_equal(scan.top(np.arange(6), k), expected, err_msg=f"k={k}")


@pytest.mark.parametrize("k", [1, 10, 33, 99, 300, 1000])
def test_block_selection_over_many_tokens_gives_the_ids_of_a_full_ranking(k, monkeypatch):
    """Enough tokens that only the best blocks are ranked (the last block partial), ties and a duplicated passage
    included: the same ids in the same order as faiss (below k = 100, where faiss keeps a heap) and as ranking
    every token with one torch.topk."""
    import torch

    from spanseek.core import flat_search

    rng = np.random.default_rng(k)
    x = vectors_with_duplicates(rng, 40_011, 6)
    queries = np.concatenate([x[[12, 40_000]], rng.integers(-2, 3, size=(6, 6)).astype(np.float32)])
    got = FlatScan(flat_index(x), queries, None).top(np.arange(8), k)
    if k < 100:  # from k = 100 faiss keeps a reservoir, whose choice among ties differs
        np.testing.assert_array_equal(got, flat_index(x).search(queries, k)[1])
    monkeypatch.setattr(flat_search, "top_values", lambda s, m, rows=None, maxima=None: torch.topk(
        s if rows is None else s[rows], m, dim=1, sorted=True))
    np.testing.assert_array_equal(got, FlatScan(flat_index(x), queries, None).top(np.arange(8), k))


@pytest.mark.parametrize("k", [10, 99, 300, 1000])
def test_a_deeper_round_of_some_rows_gives_each_row_its_own_ranking(k):
    """After a first round over every row, a deeper one over some of them (ranked from the blocks' maxima of the held
    scores, the rows not copied; a row asked twice) gives each the ids a scan of that question alone gives, ties and
    a duplicated passage included."""
    rng = np.random.default_rng(k + 1)
    x = vectors_with_duplicates(rng, 40_011, 6)
    queries = np.concatenate([x[[12, 40_000]], rng.integers(-2, 3, size=(6, 6)).astype(np.float32)])
    index = flat_index(x)
    scan = FlatScan(index, queries, None)
    scan.top(np.arange(8), 32)
    rows = np.array([6, 1, 1, 0, 3])
    got = scan.top(rows, k)
    assert scan._maxima is not None  # the deeper round took the maxima's path
    for r, ids in zip(rows, got, strict=True):
        np.testing.assert_array_equal(ids, FlatScan(index, queries[[r]], None).top(np.array([0]), k)[0])


@pytest.mark.parametrize("m", [7, 64, 129, 600])
def test_top_values_of_some_rows_from_the_blocks_maxima_are_topks_values(m):
    import torch

    rng = np.random.default_rng(m + 7)
    scores = torch.from_numpy(rng.integers(-50, 50, size=(5, 60_001)).astype(np.float32))
    scores[1, rng.choice(60_001, 59_990, replace=False)] = float("-inf")
    scores[2, -3:] = 1000.0
    rows = torch.tensor([4, 1, 2, 2])
    values, ids = top_values(scores, m, rows, block_maxima(scores))
    assert torch.equal(values, torch.topk(scores[rows], m, dim=1).values)
    assert torch.equal(torch.gather(scores[rows], 1, ids), values)


@pytest.mark.parametrize("rows", [2, SMALL_ROWS, SMALL_ROWS + 1, 13])
def test_the_product_is_the_same_however_many_threads_share_it(rows):
    """scores_into, on either side of SMALL_ROWS (torch's tall product, numpy's pieces): one thread or several (the
    last piece narrower), the same bits; and they are the inner products."""
    import torch

    rng = np.random.default_rng(3)
    q, x = rng.standard_normal((rows, 384), dtype=np.float32), rng.standard_normal((10_001, 384), dtype=np.float32)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        alone = scores_into(q, x, np.empty((rows, len(x)), np.float32), workers=1)
        np.testing.assert_allclose(alone, q.astype(np.float64) @ x.T.astype(np.float64), rtol=1e-4, atol=1e-4)
        for workers in (2, 3):
            torch.set_num_threads(workers)
            assert np.array_equal(scores_into(q, x, np.empty_like(alone), workers=workers), alone)
    finally:
        torch.set_num_threads(threads)


@pytest.mark.parametrize("m", [1, 2, 7, 64, 129, 600])
def test_top_values_are_topks_values(m):
    """Any row, -inf and exact ties included: the m best values equal torch.topk's, and the ids hold them."""
    import torch

    rng = np.random.default_rng(m)
    scores = torch.from_numpy(rng.integers(-50, 50, size=(5, 60_001)).astype(np.float32))
    scores[1, rng.choice(60_001, 59_990, replace=False)] = float("-inf")  # a row with few allowed tokens
    scores[2, -3:] = 1000.0  # the best values in the partial last block
    values, ids = top_values(scores, m)
    assert torch.equal(values, torch.topk(scores, m, dim=1).values)
    assert torch.equal(torch.gather(scores, 1, ids), values)
    assert all(len(set(row.tolist())) == m for row in ids)


def test_a_scan_whose_buffer_a_later_scan_took_scores_again():
    """Scans on one thread share a buffer for their held scores: the first scan, asked again after a second one
    wrote over it, gives its own scores and ids, not the second's."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal((300, 8)).astype(np.float32)
    index = flat_index(x)
    q1, q2 = rng.standard_normal((4, 8)).astype(np.float32), rng.standard_normal((6, 8)).astype(np.float32)
    first, second = FlatScan(index, q1, None), FlatScan(index, q2, None)
    ids1 = first.top(np.arange(4), 5)
    np.testing.assert_allclose(second.held(), q2 @ x.T, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(first.held(), q1 @ x.T, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(first.top(np.arange(4), 5), ids1)
    np.testing.assert_allclose(second.held(), q2 @ x.T, rtol=1e-5, atol=1e-5)
