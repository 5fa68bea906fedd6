"""Exact MIPS over a flat index (core.flat_search) against faiss's own IndexFlatIP search on synthetic vectors.

faiss is the oracle for the ids and their order, ties included: duplicated vectors tie exactly, and faiss keeps
(and lists first) the larger id among them. A scan ranking from fp16 products has the float32 scan as its oracle:
the same ids, rows with a certificate and rows without.

    .venv/bin/python -m pytest -q tests/core/test_flat_search.py
"""

from __future__ import annotations

import numpy as np
import pytest

from spanseek.core import flat_search
from spanseek.core.flat_search import (
    HALF_ROWS,
    SMALL_ROWS,
    FlatScan,
    HalfVectors,
    block_maxima,
    candidates,
    flat_vectors,
    half_error,
    half_product,
    probe_half,
    rounds_once,
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
def test_the_product_is_the_same_however_many_threads_share_it(rows, monkeypatch):
    """scores_into, on either side of SMALL_ROWS (torch's tall product, numpy's pieces): one thread or several (the
    last piece narrower), the same bits; and they are the inner products."""
    import torch

    monkeypatch.setattr(flat_search, "PRODUCT", "pieces")
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


@pytest.mark.parametrize("transposed", [False, True])
def test_a_rows_scores_are_the_same_bits_however_many_rows_share_the_product(monkeypatch, transposed):
    """With OpenBLAS's pieces (AMD), a query row's scores are the same bits among any number of rows past
    SMALL_ROWS (up to which torch's tall product, faster there, sums them otherwise), at any place: a question's
    token scores do not depend on which or how many questions past four were searched with it."""
    monkeypatch.setattr(flat_search, "PRODUCT", "pieces")
    rng = np.random.default_rng(23)
    q, x = rng.standard_normal((40, 384), dtype=np.float32), rng.standard_normal((10_001, 384), dtype=np.float32)
    xt = flat_search.transposed(x) if transposed else None
    many = scores_into(q, x, np.empty((len(q), len(x)), np.float32), xt=xt)
    for rows in (list(range(SMALL_ROWS + 1)), list(range(5, 15)), list(range(20, 33)), list(range(39, 2, -3))):
        few = scores_into(q[rows], x, np.empty((len(rows), len(x)), np.float32), xt=xt)
        if bits_independent_of_place():
            assert np.array_equal(few, many[rows]), rows
        else:  # the same sums, rounded by place: last bits apart (scores of about 20: 4e-6 measured)
            np.testing.assert_allclose(few, many[rows], rtol=0, atol=2e-5 * np.abs(many[rows]).max())


@pytest.mark.parametrize("rows", [SMALL_ROWS + 1, 64])
def test_the_transposed_copy_gives_the_same_bits_and_the_same_ids(rows, monkeypatch):
    """Pieces by the (d, N) copy ``transposed`` keeps are the pieces by the index's rows, bit for bit, for any
    thread count, and a scan with the copy ranks the same ids; the copy is kept only for the pieces product, within
    TRANSPOSED_BYTES, and one of another shape is refused."""
    import torch

    monkeypatch.setattr(flat_search, "PRODUCT", "pieces")
    rng = np.random.default_rng(7)
    q, x = rng.standard_normal((rows, 96), dtype=np.float32), rng.standard_normal((9_001, 96), dtype=np.float32)
    xt = flat_search.transposed(x)
    assert xt is not None and xt.flags.c_contiguous and np.array_equal(xt, x.T)
    threads = torch.get_num_threads()
    try:
        for workers in (1, 2, 3):
            torch.set_num_threads(workers)
            by_rows = scores_into(q, x, np.empty((rows, len(x)), np.float32), workers=workers)
            assert np.array_equal(scores_into(q, x, np.empty_like(by_rows), workers=workers, xt=xt), by_rows)
    finally:
        torch.set_num_threads(threads)
    index = flat_index(x)
    want = FlatScan(index, q, None).top(np.arange(rows), 50)
    np.testing.assert_array_equal(FlatScan(index, q, None, transposed=xt).top(np.arange(rows), 50), want)
    with pytest.raises(ValueError, match="transposed vectors of shape"):
        FlatScan(index, q, None, transposed=xt[:, :-1])
    monkeypatch.setattr(flat_search, "TRANSPOSED_BYTES", x.nbytes - 1)
    assert flat_search.transposed(x) is None
    monkeypatch.setattr(flat_search, "TRANSPOSED_BYTES", x.nbytes)
    monkeypatch.setattr(flat_search, "PRODUCT", "mkl")
    assert flat_search.transposed(x) is None


@pytest.mark.parametrize("product", ["pieces", "mkl"])
@pytest.mark.parametrize("rows", [SMALL_ROWS + 1, 64])
def test_either_blas_gives_the_inner_products(product, rows, monkeypatch):
    """Both products of more than SMALL_ROWS rows are the inner products, into ``out`` itself, contiguous or not (a
    non-contiguous ``out`` takes OpenBLAS's pieces); and "auto" picks MKL exactly on Intel CPUs."""
    import torch

    monkeypatch.setattr(flat_search, "PRODUCT", product)
    rng = np.random.default_rng(5)
    q, x = rng.standard_normal((rows, 384), dtype=np.float32), rng.standard_normal((5_003, 384), dtype=np.float32)
    want = q.astype(np.float64) @ x.T.astype(np.float64)
    out = np.full((rows, len(x)), np.nan, np.float32)
    assert scores_into(q, x, out) is out
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4)
    wide = np.full((rows, 2 * len(x)), np.nan, np.float32)
    scores_into(q, x, wide[:, ::2])
    np.testing.assert_allclose(wide[:, ::2], want, rtol=1e-4, atol=1e-4)
    monkeypatch.setattr(flat_search, "PRODUCT", "auto")
    for vendor, blas in (("GenuineIntel", "mkl" if torch.backends.mkl.is_available() else "pieces"),
                         ("AuthenticAMD", "pieces"), ("", "pieces")):
        monkeypatch.setattr(flat_search, "cpu_vendor", lambda vendor=vendor: vendor)
        assert flat_search.wide_product() == blas


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


def test_the_shared_buffer_keeps_no_scan_and_so_no_index_alive():
    """A thread's score buffer named its last scan, which holds its faiss index and transposed vectors: a service
    whose reload replaced the index kept the first one (439 MB of the demo index) for good. Once the scan and the
    index are let go they are freed; the buffer stays for the thread's next scan."""
    import gc
    import weakref

    rng = np.random.default_rng(6)
    x = rng.standard_normal((300, 8)).astype(np.float32)
    transposed = np.ascontiguousarray(x.T)
    scan = FlatScan(flat_index(x), rng.standard_normal((4, 8)).astype(np.float32), None, transposed=transposed)
    scan.top(np.arange(4), 5)
    assert scan.held() is not None and flat_search.SCRATCH.holds(scan)
    gone_scan, gone_vectors = weakref.ref(scan), weakref.ref(transposed)
    del scan, transposed
    gc.collect()
    assert gone_scan() is None and gone_vectors() is None
    assert flat_search.SCRATCH.buffer is not None


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



def test_a_filtered_scan_takes_over_the_unfiltered_scans_products(monkeypatch):
    """A scan of the same queries with fewer allowed tokens takes over the held products of the scan without the
    filter (masked to its tokens, none computed again): the ids a scan of its own gives. The unfiltered scan then
    scores again if asked; a scan of other queries, or one whose source's buffer a later scan took, computes its own."""
    rng = np.random.default_rng(6)
    x = rng.standard_normal((300, 8)).astype(np.float32)
    index = flat_index(x)
    queries = rng.standard_normal((4, 8)).astype(np.float32)
    allowed = rng.random(300) < 0.1
    want = FlatScan(index, queries, allowed).top(np.arange(4), 12)
    source = FlatScan(index, queries, None)
    everything = source.top(np.arange(4), 12)
    computed = []
    score = FlatScan._score
    monkeypatch.setattr(FlatScan, "_score", lambda self, *a: computed.append(self) or score(self, *a))
    taker = FlatScan(index, queries, allowed, products_of=source)
    np.testing.assert_array_equal(taker.top(np.arange(4), 12), want)
    assert computed == []
    np.testing.assert_array_equal(source.top(np.arange(4), 12), everything)  # scored again: its buffer was taken
    assert computed == [source]
    other = FlatScan(index, queries[::-1].copy(), allowed, products_of=source)
    np.testing.assert_array_equal(other.top(np.arange(4), 12), want[::-1])
    late = FlatScan(index, queries, allowed, products_of=source)  # source's buffer is now other's
    np.testing.assert_array_equal(late.top(np.arange(4), 12), want)
    assert computed == [source, other, late]

def rounded_once(queries, half, out):
    """A float32 product of the fp16 numbers, rounded once to fp16: a product the bound holds for, on any CPU."""
    return out.copy_((queries.half().float() @ half.float().T).half())


@pytest.fixture(autouse=True)
def reference_product(monkeypatch):
    """fp16 scans multiply with ``rounded_once`` (this CPU's product is tested in test_half_error_bounds_...)."""
    monkeypatch.setattr(flat_search, "half_product", rounded_once)


def half_vectors(x: np.ndarray, used: bool = True) -> HalfVectors:
    """``x`` (exact in fp16) as a scan's fp16 vectors, ranked from or not as ``used`` says (not this machine's rule)."""
    import torch

    return HalfVectors(torch.from_numpy(x.astype(np.float16)), float(np.linalg.norm(x, axis=1).max()), used)


def fp16_vectors(rng: np.random.Generator, n: int, d: int) -> np.ndarray:
    """``n`` random vectors exact in fp16, a block of them repeated further on (a duplicated passage: exact ties)."""
    x = rng.standard_normal((n, d)).astype(np.float16).astype(np.float32)
    x[n // 2 : n // 2 + 40] = x[10:50]
    return x


def brute_force_top(x: np.ndarray, queries: np.ndarray, k: int, allowed: np.ndarray | None = None) -> np.ndarray:
    """The oracle: each row's k best tokens by float32 sums whose bits do not depend on a token's place (one
    ``np.einsum`` a query), best first and, among equal scores, the larger id first (faiss's order)."""
    ids = np.arange(len(x)) if allowed is None else np.flatnonzero(allowed)
    top = [ids[np.lexsort((-ids, -np.einsum("ij,j->i", x[ids], q)))[:k]] for q in queries]
    return np.stack(top)


def bits_independent_of_place() -> bool:
    """Whether this CPU's BLAS gives a token's and a row's product the same bits at any place in a product: measured
    on AVX-512 CPUs (Zen 4, Xeon); OpenBLAS's AVX2 kernel (Zen 3) sums by place (a row's place among tiles of 12
    rows, a token's column), last bits apart."""
    return "avx512f" in flat_search.cpu_flags()


def both_scans(x: np.ndarray, queries: np.ndarray, allowed: np.ndarray | None = None) -> tuple[FlatScan, FlatScan]:
    """A float32 scan and a fp16 one of the same queries."""
    index = flat_index(x)
    return FlatScan(index, queries, allowed), FlatScan(index, queries, allowed, half=half_vectors(x))


@pytest.mark.parametrize("k", [1, 2, 5, 37, 300, 1000])
@pytest.mark.parametrize("selected", [False, True])
def test_a_fp16_scan_gives_the_float32_scans_ids(k, selected, monkeypatch):
    """Random fp16 vectors over enough tokens that the best blocks are ranked, a duplicated passage, questions aimed at
    duplicated tokens (exact ties at the top) and random ones: every row has its certificate and the ids of the
    float32 scan, in order, ties included; over the allowed tokens when some are."""
    monkeypatch.setattr(flat_search, "EXACT_SHARE", float("inf"))  # however many candidates
    rng = np.random.default_rng(k)
    x = fp16_vectors(rng, 20_011, 16)
    queries = np.concatenate([x[[12, 20, 10_020]], rng.standard_normal((9, 16)).astype(np.float32)])
    allowed = rng.random(len(x)) < 0.7 if selected else None
    exact, fp16 = both_scans(x, queries, allowed)
    got = fp16.top(np.arange(12), k)
    assert fp16.half is not None and fp16.held() is None and not fp16.fell_back
    best = brute_force_top(x, queries, k, allowed)

    def scored(ids: np.ndarray) -> np.ndarray:
        return np.stack([np.einsum("ij,j->i", x[row], q) for row, q in zip(ids, queries, strict=True)])

    # the k best scores, in order, on any CPU; exactly tied tokens (the duplicated passage) may come in either order
    # below k = 100, where the scans keep a heap (a Zen 4 EPYC gives 12 before 10,007 for a query tied with both)
    np.testing.assert_array_equal(scored(got), scored(best))
    if bits_independent_of_place():  # and the float32 scan's ids, ties included, where bits do not depend on place
        np.testing.assert_array_equal(got, exact.top(np.arange(12), k))
        if k >= 100:
            np.testing.assert_array_equal(got, best)
    # faiss keeps a heap below k = 100 too; at k = 1 its maximum may come from either of two exactly tied tokens
    if not selected and 1 < k < 100:
        np.testing.assert_array_equal(got, flat_index(x).search(queries, k)[1])


def test_a_fp16_scans_deeper_round_gives_each_row_the_float32_ids():
    """A first round over every row, then a deeper one over some (one asked twice), from the held fp16 products."""
    rng = np.random.default_rng(8)
    x = fp16_vectors(rng, 40_011, 8)
    queries = np.concatenate([x[[12, 40_000]], rng.standard_normal((6, 8)).astype(np.float32)])
    exact, fp16 = both_scans(x, queries)
    np.testing.assert_array_equal(fp16.top(np.arange(8), 32), exact.top(np.arange(8), 32))
    rows = np.array([6, 1, 1, 0, 3])
    for k in (99, 1000):
        np.testing.assert_array_equal(fp16.top(rows, k), exact.top(rows, k))
    assert fp16.half is not None and not fp16.fell_back


def test_rows_without_a_certificate_are_ranked_by_the_float32_product():
    """500 copies of one vector among random ones, a question aimed at it (500 tokens tie at the top) and a zero
    question (every token ties): the tie runs past the candidates, so those rows have no certificate, and they get
    the float32 scan's (and faiss's) ids; a random question keeps its certificate."""
    rng = np.random.default_rng(9)
    x = fp16_vectors(rng, 5000, 8)
    x[1000:1500] = x[3]
    queries = np.concatenate([np.zeros((1, 8), np.float32), 10 * x[[3]], rng.standard_normal((1, 8)).astype(np.float32)])
    for k in (1, 32, 256):
        exact, fp16 = both_scans(x, queries)
        got = fp16.top(np.arange(3), k)
        np.testing.assert_array_equal(got, exact.top(np.arange(3), k))
        if k < 100:  # from k = 100 faiss keeps a reservoir, whose choice among ties differs
            np.testing.assert_array_equal(got, flat_index(x).search(queries, k)[1])
        alone = both_scans(x, queries[2:])[1]
        alone.top(np.array([0]), k)
        assert fp16.fell_back and not alone.fell_back


def test_a_margin_no_row_meets_sends_every_row_to_the_float32_product(monkeypatch):
    rng = np.random.default_rng(10)
    x = fp16_vectors(rng, 5000, 16)
    queries = rng.standard_normal((6, 16)).astype(np.float32)
    monkeypatch.setattr(flat_search, "half_error", lambda norms, max_norm, d: np.full(len(norms), 1e9))
    exact, fp16 = both_scans(x, queries)
    calls = []
    real = fp16._score
    monkeypatch.setattr(fp16, "_score", lambda q, out=None: calls.append(len(q)) or real(q, out))
    np.testing.assert_array_equal(fp16.top(np.arange(6), 20), exact.top(np.arange(6), 20))
    assert fp16.fell_back and calls == [6]  # every row, in one float32 product


@pytest.mark.parametrize("k", [250, 299, 300, 305])
def test_k_near_the_number_of_tokens_scores_every_token_exactly(k, monkeypatch):
    """Candidates would be every token: no token is outside them, every row is exact, -1 past the index."""
    monkeypatch.setattr(flat_search, "EXACT_SHARE", float("inf"))
    rng = np.random.default_rng(k)
    x = fp16_vectors(rng, 300, 8)
    queries = np.concatenate([x[[12]], rng.standard_normal((3, 8)).astype(np.float32)])
    exact, fp16 = both_scans(x, queries)
    np.testing.assert_array_equal(fp16.top(np.arange(4), k), exact.top(np.arange(4), k))
    assert candidates(k) >= len(x) and not fp16.fell_back


def test_a_round_with_more_candidates_than_its_share_is_ranked_by_the_float32_product():
    """8 rows x candidates(1000) pairs, over ``EXACT_SHARE`` of the tokens: the round is ranked by the float32
    product; a shallow round of two of the rows, on a scan of its own, ranks from the fp16 products."""
    rng = np.random.default_rng(16)
    x = fp16_vectors(rng, 20_000, 8)
    queries = rng.standard_normal((8, 8)).astype(np.float32)
    exact, fp16 = both_scans(x, queries)
    assert 2 * candidates(32) < flat_search.EXACT_SHARE * len(x) < 8 * candidates(1000)
    np.testing.assert_array_equal(fp16.top(np.arange(8), 1000), exact.top(np.arange(8), 1000))
    assert fp16.fell_back
    again = FlatScan(flat_index(x), queries, None, half=half_vectors(x))
    np.testing.assert_array_equal(again.top(np.array([3, 5]), 32), exact.top(np.array([3, 5]), 32))
    assert not again.fell_back


def test_a_fp16_scan_skips_tokens_not_allowed_and_ends_short_rows_in_minus_one():
    """15 allowed tokens: they are all among the candidates (nothing allowed outside), -1 after them."""
    rng = np.random.default_rng(2)
    x = fp16_vectors(rng, 2000, 4)
    allowed = np.zeros(len(x), dtype=bool)
    allowed[rng.choice(len(x), 15, replace=False)] = True
    queries = rng.standard_normal((4, 4)).astype(np.float32)
    exact, fp16 = both_scans(x, queries, allowed)
    got = fp16.top(np.arange(4), 25)
    np.testing.assert_array_equal(got, exact.top(np.arange(4), 25))
    assert (got[:, 15:] == -1).all() and not fp16.fell_back


def test_the_fp16_path_is_for_few_rows_only_and_can_be_switched_off(monkeypatch):
    rng = np.random.default_rng(11)
    x = fp16_vectors(rng, 500, 8)
    index, half = flat_index(x), half_vectors(x)
    assert FlatScan(index, x[:HALF_ROWS], None, half=half).half is half
    assert FlatScan(index, x[: HALF_ROWS + 1], None, half=half).half is None
    assert FlatScan(index, x[:2], None, half=half_vectors(x, used=False)).half is None  # not natively fp16 here
    assert FlatScan(index, 1e5 * x[:2], None, half=half).half is None  # beyond fp16's range
    monkeypatch.setattr(flat_search, "APPROXIMATE", False)
    assert FlatScan(index, x[:2], None, half=half).half is None


def test_exact_scores_have_the_same_bits_however_the_pairs_are_asked_for():
    """``FlatScan.exact``: each (token, query row) pair scored alone, among others, in other groupings and past a chunk
    boundary has one float32 value (the certificate and the batch's spans rely on it), near the float64 product."""
    rng = np.random.default_rng(12)
    x = fp16_vectors(rng, 3000, 384)
    queries = rng.standard_normal((4, 384)).astype(np.float32)
    scan = FlatScan(flat_index(x), queries, None, half=half_vectors(x))
    ids, rows = rng.integers(0, 3000, 5000), rng.integers(0, 4, (5000, 2))
    together = scan.exact(ids, rows)
    alone = np.stack([scan.exact(ids[i : i + 1], rows[i : i + 1]) for i in range(0, 5000, 37)])[:, 0]
    np.testing.assert_array_equal(alone, together[::37])
    np.testing.assert_array_equal(scan.exact(ids[::-1], rows[::-1, ::-1]), together[::-1, ::-1])
    np.testing.assert_allclose(together, np.einsum("ij,ikj->ik", x[ids].astype(np.float64), queries[rows]), atol=1e-4)


@pytest.mark.parametrize("product", ["reference", "this CPU's"])
@pytest.mark.parametrize("scale", [1.0, 1e-3, 300.0])
def test_half_error_bounds_the_fp16_scores_distance_from_the_exact_ones(scale, product):
    """On random vectors, and questions aimed at some of them (scores near |q| |h|, where fp16's steps are widest) or
    random (down to fp16's subnormal range), every fp16 score is within half_error of the exact score, and the bound
    is within 10x of the largest distance seen (not needlessly loose): for a product that sums in float32 and rounds
    once, and for this CPU's fp16 product where the probe would rank from it."""
    import torch

    multiply = rounded_once if product == "reference" else half_product  # this module's: torch's, not the fixture's
    rng = np.random.default_rng(13)
    x = (scale * rng.standard_normal((4000, 384))).astype(np.float16).astype(np.float32)
    aimed = x[:16] / scale + 0.1 * rng.standard_normal((16, 384))
    queries = np.concatenate([aimed, rng.standard_normal((HALF_ROWS - 16, 384))]).astype(np.float32)
    queries *= np.float32(1e-2 if scale > 100 else 1.0)
    half = half_vectors(x)
    fp16 = multiply(torch.from_numpy(queries), half.vectors, torch.empty(HALF_ROWS, len(x))).numpy()
    exact_in_fp16 = queries[:8].astype(np.float16).astype(np.float32)
    if product != "reference" and not rounds_once(multiply(torch.from_numpy(exact_in_fp16), half.vectors,
                                                           torch.empty(8, len(x))).numpy(), exact_in_fp16, x):
        pytest.skip("this CPU's fp16 product does not round once: the probe keeps scans in float32")
    exact = FlatScan(flat_index(x), queries, None, half=half).exact(
        np.repeat(np.arange(len(x)), HALF_ROWS), np.tile(np.arange(HALF_ROWS), len(x))[:, None]).reshape(len(x), -1).T
    assert_tight_bound(fp16, exact, half_error(np.linalg.norm(queries.astype(np.float64), axis=1), half.max_norm, 384))


def assert_tight_bound(reduced: np.ndarray, exact: np.ndarray, bound: np.ndarray) -> None:
    """Every reduced score (R, n) is within its row's ``bound`` (R,) of the exact one, and the bound is within 10x of
    the largest distance seen (not needlessly loose)."""
    distance = np.abs(reduced.astype(np.float64) - exact)
    assert (distance <= bound[:, None]).all()
    assert distance.max() > bound.max() / 10


def summed_in(dtype: str):
    """A product whose running sum is rounded to ``dtype`` ("float16", "bfloat16") after every term (a kernel
    accumulating in that precision), for the probes to refuse."""
    import torch

    def product(queries, vectors, out):
        q = queries.to(getattr(torch, dtype))
        acc = torch.zeros(len(q), len(vectors), dtype=q.dtype)
        for i in range(q.shape[1]):
            acc = acc + q[:, i : i + 1] * vectors[:, i]
        return out.copy_(acc)

    return product


summed_in_fp16 = summed_in("float16")


def test_the_probe_refuses_a_product_that_sums_in_fp16(monkeypatch):
    rng = np.random.default_rng(14)
    x = rng.standard_normal((3000, 64)).astype(np.float16).astype(np.float32)
    half = half_vectors(x).vectors
    monkeypatch.setattr(flat_search, "half_product", rounded_once)
    assert probe_half(half, x) is True
    monkeypatch.setattr(flat_search, "half_product", summed_in_fp16)
    assert probe_half(half, x) is False


@pytest.mark.parametrize("flags, used", [
    ("fpu sse2 avx2 avx512f avx512bw avx512_bf16", False),  # AVX-512 without FP16 (an AMD EPYC, Zen 4): float32
    ("fpu sse2 avx2 avx512f avx512bw avx512_bf16 avx512_fp16 amx_tile amx_bf16", True),  # a Xeon from Sapphire Rapids
    ("fpu sse2 avx2 amx_fp16", True),
    ("fpu sse2 avx2", False),
])
def test_fp16_scans_are_decided_by_the_cpus_features_never_a_timing(monkeypatch, flags, used):
    """Whether a scan ranks from fp16 products follows the CPU's flags alone: a start-up timing could find the same
    CPU faster in one process and slower in the next, and two replicas then ranked by differently rounded scores.
    However slow or fast the product is timed, the decision is the same, and equal in every process."""
    import time

    rng = np.random.default_rng(15)
    x = rng.standard_normal((3000, 64)).astype(np.float16).astype(np.float32)
    monkeypatch.setattr(flat_search, "cpu_info", lambda: {"vendor_id": "GenuineIntel", "flags": flags})
    monkeypatch.setattr(flat_search, "HALF_MIN_TOKENS", len(x))
    decided = []
    for delay in (0.0, 0.05):
        def product(queries, half, out, delay=delay):
            time.sleep(delay)  # a slow product (another job on the cores) decides nothing
            return rounded_once(queries, half, out)

        monkeypatch.setattr(flat_search, "half_product", product)
        half = HalfVectors.of(x.astype(np.float16), x)
        assert half.max_norm == pytest.approx(np.linalg.norm(x, axis=1).max())
        decided.append((half.used, FlatScan(flat_index(x), x[:2], None, half=half).half is not None))
    assert decided == [(used, used)] * 2
    monkeypatch.setattr(flat_search, "half_product", summed_in_fp16)  # natively fp16, but it rounds its sums
    assert HalfVectors.of(x.astype(np.float16), x).used is False
    monkeypatch.setattr(flat_search, "HALF_MIN_TOKENS", len(x) + 1)  # too few tokens: not even checked
    monkeypatch.setattr(flat_search, "half_product", lambda *a: pytest.fail("checked a small index"))
    assert HalfVectors.of(x.astype(np.float16), x).used is False


def test_vectors_the_flat_index_does_not_hold_exactly_are_not_ranked_from(monkeypatch):
    rng = np.random.default_rng(17)
    x = rng.standard_normal((3000, 16)).astype(np.float16).astype(np.float32)
    monkeypatch.setattr(flat_search, "cpu_scans_fp16_faster", lambda: True)
    monkeypatch.setattr(flat_search, "HALF_MIN_TOKENS", 0)
    assert HalfVectors.of(x.astype(np.float16), x).used is True
    other = x.astype(np.float16)
    other[2500, 3] += np.float16(0.5)  # one component of one row, past the first and last rows
    assert HalfVectors.of(other, x).used is False
