"""The flat scan's bf16 screen (core.bf16_scan) against the float32 scan, its oracle: the same ids, to the bit,
for every row, on random and adversarial vectors (exact ties, near-ties at the k-th score, large-norm outliers,
rows that must fall back), and the same scores of any (token, query row) pair.

    .venv/bin/python -m pytest -q tests/core/test_bf16_scan.py
"""

from __future__ import annotations

import numpy as np
import pytest

from spanseek.core import bf16_scan, flat_search
from spanseek.core.bf16_scan import (
    BF16_MIN_ROWS,
    BF16_ROWS,
    BF16_UNIT,
    Bf16Vectors,
    bf16_candidates,
    bf16_error,
    bf16_product,
    keeps_bf16,
    probe_bf16,
    scores_as_scanned,
)
from spanseek.core.flat_search import SMALL_ROWS, FlatScan, rounds_once
from tests.core.test_flat_search import assert_tight_bound, summed_in


def flat_index(x: np.ndarray):
    import faiss

    index = faiss.IndexFlatIP(x.shape[1])
    index.add(x)
    return index


def rounded_once(queries, vectors, out):
    """The reference bf16 product: the products of bf16 numbers summed in float64 (exact enough), rounded once."""
    return out.copy_((queries.bfloat16().double() @ vectors.double().T).bfloat16())


@pytest.fixture(autouse=True)
def reference_product(monkeypatch):
    """bf16 scans multiply with ``rounded_once`` (this CPU's product is tested in test_bf16_error_bounds_...)."""
    monkeypatch.setattr(bf16_scan, "bf16_product", rounded_once)


def bf16_vectors(x: np.ndarray) -> Bf16Vectors:
    """``x``'s bf16 copy as a scan ranks from it (not this machine's rule)."""
    import torch

    return Bf16Vectors(torch.from_numpy(x).bfloat16(), float(np.linalg.norm(x.astype(np.float64), axis=1).max()), True)


def as_scanned_here() -> bool:
    """Whether this CPU's BLAS gives a token's float32 score the same bits at any place (AVX-512 CPUs; OpenBLAS's
    AVX2 kernel sums by place, and there the probe keeps scans in float32)."""
    return "avx512f" in flat_search.cpu_flags()


def both_scans(x: np.ndarray, queries: np.ndarray, allowed: np.ndarray | None = None) -> tuple[FlatScan, FlatScan]:
    index = flat_index(x)
    return FlatScan(index, queries, allowed), FlatScan(index, queries, allowed, half=bf16_vectors(x))


def adversarial(rng: np.random.Generator, n: int, d: int) -> np.ndarray:
    """Random vectors with a duplicated block (exact ties), a cluster of near-copies of one vector (scores within
    bf16's rounding of each other, near the k-th of a question aimed at it) and a few large-norm outliers."""
    x = rng.standard_normal((n, d)).astype(np.float32)
    x[n // 2 : n // 2 + 40] = x[10:50]
    x[1000:1400] = x[7] + 1e-5 * rng.standard_normal((400, d)).astype(np.float32)
    x[[3000, 3001]] *= 40
    return x


@pytest.mark.parametrize("rows", [BF16_MIN_ROWS, SMALL_ROWS + 2, 16, BF16_ROWS])
@pytest.mark.parametrize("k", [1, 5, 37, 300])
@pytest.mark.parametrize("selected", [False, True])
def test_a_bf16_scan_gives_the_float32_scans_ids_to_the_bit(rows, k, selected, monkeypatch):
    """Queries aimed at duplicated tokens, at the near-copies (near-ties at the k-th score), at an outlier and
    random ones: the ids of the float32 scan, in order, ties included, for every row, whether the row had its
    certificate or fell back; over the allowed tokens when some are."""
    monkeypatch.setattr(flat_search, "EXACT_SHARE", float("inf"))
    rng = np.random.default_rng(rows * 1000 + k)
    x = adversarial(rng, 20_011, 32)
    aimed = x[[12, 7, 1005, 3000, 10_020]]
    queries = np.concatenate([aimed, rng.standard_normal((rows - len(aimed), 32)).astype(np.float32)])
    allowed = rng.random(len(x)) < 0.7 if selected else None
    exact, bf16 = both_scans(x, queries, allowed)
    assert bf16.half is not None and bf16.held() is None
    got = bf16.top(np.arange(rows), k)
    if not as_scanned_here():
        pytest.skip("this CPU's float32 scores depend on their place: the probe keeps scans in float32")
    np.testing.assert_array_equal(got, exact.top(np.arange(rows), k))
    deeper = np.array([rows - 1, 1, 1, 0])  # a later round of some rows (one asked twice), from the held products
    np.testing.assert_array_equal(bf16.top(deeper, 2 * k), exact.top(deeper, 2 * k))


def test_random_rows_have_their_certificate_and_outliers_widen_every_margin():
    """Plain random vectors: every row's certificate holds (no float32 product); one large-norm token widens the
    margin of every row past any gap, and every row falls back, still with the float32 scan's ids."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((20_000, 32)).astype(np.float32)
    queries = rng.standard_normal((BF16_ROWS, 32)).astype(np.float32)
    exact, bf16 = both_scans(x, queries)
    got = bf16.top(np.arange(BF16_ROWS), 32)
    assert not bf16.fell_back
    if as_scanned_here():
        np.testing.assert_array_equal(got, exact.top(np.arange(BF16_ROWS), 32))
    x[5] *= 1e4
    exact, bf16 = both_scans(x, queries)
    calls = []
    real = bf16._score
    bf16._score = lambda q, out=None: calls.append(len(q)) or real(q, out)  # type: ignore[method-assign]
    got = bf16.top(np.arange(BF16_ROWS), 32)
    assert bf16.fell_back and calls == [BF16_ROWS]  # every row's float32 product, once, as the float32 scan's
    bf16.top(np.arange(4), 64)
    assert calls == [BF16_ROWS]  # and kept for the later rounds
    if as_scanned_here():
        np.testing.assert_array_equal(got, exact.top(np.arange(BF16_ROWS), 32))


def test_rows_whose_ties_run_past_the_candidates_fall_back():
    """500 copies of one vector and a question aimed at them, and a zero question (every token ties): no
    certificate, so the float32 scan's (and faiss's) ids; the random rows beside them keep theirs."""
    rng = np.random.default_rng(9)
    x = rng.standard_normal((5000, 8)).astype(np.float32)
    x[1000:1500] = x[3]
    queries = np.concatenate([np.zeros((1, 8), np.float32), 10 * x[[3]],
                              rng.standard_normal((BF16_MIN_ROWS - 2, 8)).astype(np.float32)])
    for k in (1, 32, 256):
        exact, bf16 = both_scans(x, queries)
        got = bf16.top(np.arange(len(queries)), k)
        assert bf16.fell_back
        if as_scanned_here():
            np.testing.assert_array_equal(got, exact.top(np.arange(len(queries)), k))
        if k < 100:  # from k = 100 faiss keeps a reservoir, whose choice among ties differs
            np.testing.assert_array_equal(got[:2], flat_index(x).search(queries, k)[1][:2])


def test_the_bf16_screen_is_for_its_row_counts_only_and_can_be_switched_off(monkeypatch):
    rng = np.random.default_rng(11)
    x = rng.standard_normal((500, 8)).astype(np.float32)
    index, half = flat_index(x), bf16_vectors(x)
    assert FlatScan(index, x[:BF16_MIN_ROWS], None, half=half).half is half
    assert FlatScan(index, x[:BF16_ROWS], None, half=half).half is half
    assert FlatScan(index, x[: BF16_MIN_ROWS - 2], None, half=half).half is None  # the tall product is as fast
    assert FlatScan(index, x[: BF16_ROWS + 2], None, half=half).half is None
    assert FlatScan(index, 1e20 * x[:BF16_MIN_ROWS], None, half=half).half is half  # bf16 has float32's range
    monkeypatch.setattr(flat_search, "APPROXIMATE", False)
    assert FlatScan(index, x[:BF16_MIN_ROWS], None, half=half).half is None


@pytest.mark.parametrize("count", [2, 6, SMALL_ROWS, SMALL_ROWS + 1, 16, BF16_ROWS])
def test_pairs_are_scored_with_the_float32_scans_bits(count):
    """``scores_as_scanned``: any (token, query row) pairs, one alone or thousands, have the bits of the float32 scan
    of every row (its held product), near the float64 products everywhere."""
    rng = np.random.default_rng(count)
    x = rng.standard_normal((9000, 384)).astype(np.float32)
    queries = rng.standard_normal((count, 384)).astype(np.float32)
    ids, rows = rng.integers(0, len(x), 3000), rng.integers(0, count, (3000, 2))
    got = scores_as_scanned(queries, x, ids, rows)
    np.testing.assert_allclose(got, np.einsum("ij,ikj->ik", x[ids].astype(np.float64), queries[rows]), atol=1e-3)
    if not as_scanned_here():
        pytest.skip("this CPU's float32 scores depend on their place")
    held = FlatScan(flat_index(x), queries, None, transposed=flat_search.transposed(x)).held()
    np.testing.assert_array_equal(got, held[rows, ids[:, None]])
    np.testing.assert_array_equal(scores_as_scanned(queries, x, ids[:1], rows[:1, :1]), held[rows[:1, :1], ids[:1]])


@pytest.mark.parametrize("product", ["reference", "this CPU's"])
@pytest.mark.parametrize("scale", [1.0, 1e-3, 300.0])
def test_bf16_error_bounds_the_bf16_scores_distance_from_the_exact_ones(scale, product):
    """Random vectors and questions aimed at some of them (scores near |q| |h|, where bf16's steps are widest) or
    random: every bf16 score is within bf16_error of the float32 scan's, and the bound is within 10x of the largest
    distance seen; for the reference product and for this CPU's where it rounds once."""
    import torch

    multiply = rounded_once if product == "reference" else bf16_product  # this module's: torch's, not the fixture's
    rng = np.random.default_rng(13)
    x = (scale * rng.standard_normal((4000, 384))).astype(np.float32)
    aimed = x[:16] / scale + 0.1 * rng.standard_normal((16, 384))
    queries = np.concatenate([aimed, rng.standard_normal((BF16_ROWS - 16, 384))]).astype(np.float32)
    half = bf16_vectors(x)
    scores = multiply(torch.from_numpy(queries), half.vectors, torch.empty(BF16_ROWS, len(x))).numpy()
    rounded = torch.from_numpy(queries[:8]).bfloat16()
    if product != "reference" and not rounds_once(
            multiply(rounded.float(), half.vectors, torch.empty(8, len(x))).numpy(), rounded.float().numpy(),
            half.vectors.float().numpy(), BF16_UNIT):
        pytest.skip("this CPU's bf16 product does not round once: the probe keeps scans in float32")
    exact = FlatScan(flat_index(x), queries, None).held()
    assert_tight_bound(scores, exact, bf16_error(np.linalg.norm(queries.astype(np.float64), axis=1), half.max_norm,
                                                 384))


def test_the_probe_refuses_a_product_that_sums_in_bf16_or_pairs_scored_otherwise(monkeypatch):
    rng = np.random.default_rng(14)
    x = rng.standard_normal((5000, 64)).astype(np.float32)
    vectors = bf16_vectors(x).vectors
    if as_scanned_here():
        assert probe_bf16(vectors, x) is True
    monkeypatch.setattr(bf16_scan, "bf16_product", summed_in("bfloat16"))
    assert probe_bf16(vectors, x) is False
    monkeypatch.setattr(bf16_scan, "bf16_product", rounded_once)
    monkeypatch.setattr(bf16_scan, "scores_as_scanned",
                        lambda q, xb, ids, rows: np.einsum("ij,ikj->ik", xb[ids], q[rows]).astype(np.float32))
    assert probe_bf16(vectors, x) is False  # einsum sums otherwise than the scan's BLAS


@pytest.mark.parametrize("flags, kept", [
    ("fpu sse2 avx2 avx512f avx512bw avx512_bf16", True),  # an AMD EPYC, Zen 4
    ("fpu sse2 avx2 avx512f avx512bw avx512_bf16 avx512_fp16 amx_bf16", False),  # fp16 natively: its tighter screen
    ("fpu sse2 avx2", False),
])
def test_the_bf16_copy_is_decided_by_the_cpus_features_and_its_bound(monkeypatch, flags, kept):
    """Whether scans keep a bf16 copy follows the CPU's flags and ``BF16_BYTES``, never a timing; none below
    ``HALF_MIN_TOKENS`` tokens. Where it is not kept, no copy is made."""
    rng = np.random.default_rng(15)
    x = rng.standard_normal((3000, 64)).astype(np.float32)
    monkeypatch.setattr(flat_search, "cpu_info", lambda: {"vendor_id": "AuthenticAMD", "flags": flags})
    monkeypatch.setattr(bf16_scan, "HALF_MIN_TOKENS", len(x))
    monkeypatch.setattr(bf16_scan, "BF16_BYTES", 1 << 30)
    monkeypatch.setattr(bf16_scan, "probe_bf16", lambda vectors, xb: True)
    assert keeps_bf16(x) is kept
    made = Bf16Vectors.of_vectors(x)
    assert (made is not None) is kept
    if made is not None:
        assert made.used and made.max_norm == pytest.approx(np.linalg.norm(x, axis=1).max())
        np.testing.assert_array_equal(made.vectors.float().numpy(), bf16_vectors(x).vectors.float().numpy())
    monkeypatch.setattr(bf16_scan, "BF16_BYTES", x.nbytes - 1)
    assert keeps_bf16(x) is False and Bf16Vectors.of_vectors(x) is None
    monkeypatch.setattr(bf16_scan, "BF16_BYTES", x.nbytes)
    monkeypatch.setattr(bf16_scan, "HALF_MIN_TOKENS", len(x) + 1)
    assert keeps_bf16(x) is False


def test_candidates_grow_with_k_past_the_fp16_screens():
    assert all(bf16_candidates(k) >= flat_search.candidates(k) for k in (1, 32, 256, 1024))
