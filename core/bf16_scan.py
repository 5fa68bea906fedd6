"""A flat scan's certified bf16 screen, on CPUs that multiply bf16 natively (AVX-512 BF16: AMD Zen 4, Intel Xeon from
Cooper Lake) but not fp16 (``core.flat_search``'s fp16 screen is tighter where both are).

A batch of ``BF16_MIN_ROWS`` to ``BF16_ROWS`` query rows ranks as ``core.flat_search``'s fp16 scans do: the product
of the queries rounded to bf16 with a bf16 copy of the index's vectors (``Bf16Vectors``: 2 bytes a dimension, half
the float32 vectors' bytes to read) picks each row's ``bf16_candidates(k)`` best tokens, those are scored exactly,
and a certificate (the k-th exact score above the best bf16 score outside plus ``bf16_error``) proves that no token
outside could enter the k best; a row without one is ranked from float32 products. Unlike the fp16 screen, the exact
scores are the float32 scan's own bits (``scores_as_scanned``): a scan ranks, and a batch's spans score, exactly as
without the screen, to the bit, and ``probe_bf16`` checks that at load, with the bf16 product's rounding.

Measured on a 2-core AMD EPYC (Zen 4, AVX-512 BF16, no AVX-512 FP16), the demo index (146k tokens, 384 dims), CPU
time of the product alone, medians of 9 in turn with float32's: 8 rows 19 against 28 ms, 16 rows 26 against 51, 32
rows 33 against 64, 64 rows 66 against 104, 128 rows 124 against 178; at 2 and 4 rows the float32 scan's tall
product is as fast (13 against 17, 19 against 18 ms). The bf16 copy is made once per index and costs 2 bytes a
token dimension (768 bytes a token at 384 dims), within ``BF16_BYTES``; ``spanseek index verify`` counts it.

    .venv/bin/python -m pytest -q tests/core/test_bf16_scan.py
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from spanseek.core.flat_search import (
    HALF_MIN_TOKENS,
    PRODUCT_COLUMNS,
    SMALL_ROWS,
    HalfVectors,
    cpu_flags,
    cpu_scans_fp16_faster,
    keeps_transposed,
    rounds_once,
    scores_into,
)

log = logging.getLogger(__name__)

BF16_UNIT = 2.0**-8  # bf16's unit roundoff (8 significant bits)
# query rows a scan ranks from bf16 products: from 4 questions (at fewer, the float32 scan's tall product reads the
# index as fast) to 16 (module docstring)
BF16_MIN_ROWS = 8
BF16_ROWS = 32
# the largest flat index (float32 bytes) whose scans keep a bf16 copy of its vectors (half as many bytes)
BF16_BYTES = 1 << 30
# first query rows of the pairs of one product of ``scores_as_scanned`` past SMALL_ROWS (with their other rows: a
# question's start and end rows, 16): more rows give each token read more products, fewer read it more often
PAIR_LINES = 8
BF16_CHECK_COLUMNS = 2 * PRODUCT_COLUMNS + 123  # tokens of the check at load: two whole pieces and a partial one


def cpu_scans_bf16_faster() -> bool:
    """Whether a flat scan screens with bf16 products on this CPU, from its features alone (never a timing, so
    every process ranks alike): AVX-512 BF16, where torch's (oneDNN's) bf16 product sums bf16 products in float32,
    and no native fp16, whose screen is tighter."""
    return "avx512_bf16" in cpu_flags() and not cpu_scans_fp16_faster()


def keeps_bf16(xb: np.ndarray) -> bool:
    """Whether scans of the flat vectors ``xb`` on this CPU keep a bf16 copy of them to screen with: a bf16 CPU, at
    least ``HALF_MIN_TOKENS`` tokens and at most ``BF16_BYTES`` of float32 vectors."""
    return cpu_scans_bf16_faster() and len(xb) >= HALF_MIN_TOKENS and xb.nbytes <= BF16_BYTES


def bf16_candidates(k: int) -> int:
    """Tokens a row's bf16 scores pick for its k best, to be scored exactly: enough for the certificate of every one
    of 400 rows of real questions on the demo index at k = 32, 64, 256 and 1,024, which needed at most 73, 132, 448
    and 1,621 (bf16's error is 8x fp16's: ``bf16_error``)."""
    return 2 * k + 32


def bf16_error(query_norms: np.ndarray, max_norm: float, d: int) -> np.ndarray:
    """Per query row (float64 norms |q|), a bound on |bf16 score - exact score| of any token h, |h| <= ``max_norm``:
    the bf16 score is ``bf16_product``'s, the exact one the float32 scan's.

    With u = 2^-8 (bf16's unit roundoff), g = d 2^-24 / (1 - d 2^-24) and S = sum |q_i h_i| <= |q| max|h|: rounding q
    and h to bf16 moves q.h by at most (2u + u^2) S; the products of two bf16 numbers are exact in float32 and their
    float32 sum, in any order, is within g (1 + u)^2 S of theirs; rounding it to bf16 moves it by u times its size, at
    most (1 + u)^2 (1 + g) S. So the bf16 score is within (3u + 3u^2 + u^3 + g (1 + u)^3) S of q.h, and the float32
    scan's within g S: together at most (3u + 4u^2 + 3g) |q| max|h|. bf16 has float32's exponent range: the only
    further error is the kernel's flushing of products below 2^-126 to zero, d 2^-126 at most, covered by 2^-100."""
    u, g = BF16_UNIT, d * 2.0**-24 / (1 - d * 2.0**-24)
    return (3 * u + 4 * u * u + 3 * g) * query_norms * max_norm + 2.0**-100 * (d * max_norm + 1)


def bf16_product(queries: Any, vectors: Any, out: Any) -> Any:
    """``out[:] = bf16(queries) @ vectors.T`` ((R, d) float32 torch queries, (N, d) bf16 vectors -> (R, N) float32
    ``out``): torch's bf16 product (oneDNN's kernel, float32 sums rounded to bf16), widened exactly."""
    import torch

    out.copy_(torch.mm(queries.bfloat16(), vectors.T))
    return out


def scores_as_scanned(queries: np.ndarray, xb: np.ndarray, ids: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """(m, c) float32: token ``ids[i]``'s score for query row ``rows[i, j]`` (ids (m,), rows (m, c)) with the bits
    the float32 scan of every row of ``queries`` gives it (``scores_into``), which a BLAS product gives a token at
    any place among enough others (``probe_bf16`` checks it at load): the tokens are gathered in whole pieces of
    ``PRODUCT_COLUMNS`` and multiplied as the scan does, up to ``SMALL_ROWS`` query rows by every row (the tall
    product's bits depend on the rows beside a row), past them the pairs of ``PAIR_LINES`` first rows at a time by
    their rows (at least ``SMALL_ROWS + 1``: the pieces' bits do not depend on the rows beside a row, but one row is
    a vector product, summed otherwise), so that a token is read about once a line it is asked for."""
    out = np.empty(rows.shape, np.float32)
    if not len(ids):
        return out
    tall = len(queries) <= SMALL_ROWS
    order = np.argsort(rows[:, 0], kind="stable")
    firsts = np.unique(rows[:, 0])
    cuts = np.searchsorted(rows[order, 0], firsts[PAIR_LINES::PAIR_LINES])
    for lines in [order] if tall else np.split(order, cuts):
        tokens = np.unique(ids[lines])
        padded = np.resize(tokens, -(-len(tokens) // PRODUCT_COLUMNS) * PRODUCT_COLUMNS)  # whole pieces (repeats)
        picked = np.arange(len(queries)) if tall else np.unique(rows[lines])
        if len(picked) <= SMALL_ROWS and not tall:  # other rows beside them, for the pieces
            picked = np.concatenate([picked, np.setdiff1d(np.arange(len(queries)), picked)[: SMALL_ROWS + 1
                                                                                            - len(picked)]])
        product = np.empty((len(picked), len(padded)), np.float32)
        scores_into(np.ascontiguousarray(queries[picked]), np.ascontiguousarray(xb[padded]), product)
        place = np.empty(len(queries), np.int64)
        place[picked] = np.arange(len(picked))
        out[lines] = product[place[rows[lines]], np.searchsorted(tokens, ids[lines])[:, None]]
    return out


def probe_bf16(vectors: Any, xb: np.ndarray) -> bool:
    """Whether this CPU's bf16 product rounds as ``bf16_error`` assumes (float32 sums rounded once to bf16:
    ``rounds_once`` with bf16's unit, for ``BF16_ROWS`` query rows and for one), and whether ``scores_as_scanned``
    gives the float32 scan's bits for every row count a bf16 scan may have (a sample of the index's tokens, its own
    vectors as queries). A check of the kernels' arithmetic, not a timing: the same in every process."""
    import torch

    n = len(xb)
    sample = slice(0, min(n, BF16_CHECK_COLUMNS))
    queries = np.ascontiguousarray(xb[np.linspace(0, n - 1, BF16_ROWS).astype(np.int64)])
    rounded = torch.from_numpy(queries).bfloat16()
    exact_q, exact_x = rounded.float().numpy(), vectors[sample].float().numpy()
    for rounded_rows in (rounded.float(), rounded[:1].float()):
        scores = bf16_product(rounded_rows, vectors[sample], torch.empty(len(rounded_rows), sample.stop)).numpy()
        if not rounds_once(scores, exact_q[: len(scores)], exact_x, BF16_UNIT):
            log.warning("this CPU's bf16 product is less accurate than a float32 sum rounded once: flat scans stay "
                        "in float32")
            return False
    part = xb[sample]
    xt = np.ascontiguousarray(part.T) if keeps_transposed(xb) else None
    rng = np.random.default_rng(0)
    for count in sorted({BF16_MIN_ROWS, *range(BF16_MIN_ROWS, SMALL_ROWS + 1, 2), SMALL_ROWS + 2, BF16_ROWS}):
        q = np.ascontiguousarray(queries[:count])
        scanned = scores_into(q, part, np.empty((count, len(part)), np.float32), xt=xt)
        ids = rng.integers(0, len(part), 600)
        rows = rng.integers(0, count, (600, 2))
        if not (np.array_equal(scores_as_scanned(q, xb, ids, rows), scanned[rows, ids[:, None]])
                and np.array_equal(scores_as_scanned(q, xb, ids[:1], rows[:1, :1]), scanned[rows[:1, :1], ids[:1]])):
            log.warning("this CPU's float32 product gives a token's score other bits at another place: flat scans "
                        "stay in float32")
            return False
    return True


@dataclass(frozen=True)
class Bf16Vectors(HalfVectors):
    """A bf16 copy of a flat index's (N, d) float32 vectors (``vectors``: torch bfloat16, made here, 2 bytes a
    dimension), the float32 vectors' largest norm and whether scans of ``BF16_MIN_ROWS`` to ``BF16_ROWS`` query rows
    rank from it (``used``), decided once from what the CPU is and its kernels' arithmetic (``probe_bf16``)."""

    limit: ClassVar[float] = 2.0**100  # bf16 has float32's range
    as_scanned: ClassVar[bool] = True

    def rows(self) -> range:
        return range(BF16_MIN_ROWS, BF16_ROWS + 1)

    def product(self, queries: Any, out: Any) -> Any:
        return bf16_product(queries, self.vectors, out)

    def error(self, query_norms: np.ndarray, d: int) -> np.ndarray:
        return bf16_error(query_norms, self.max_norm, d)

    def candidates(self, k: int) -> int:
        return bf16_candidates(k)

    def exact(self, xb: np.ndarray, queries: np.ndarray, ids: np.ndarray, rows: np.ndarray) -> np.ndarray | None:
        return scores_as_scanned(queries, xb, ids, rows)

    @classmethod
    def of_vectors(cls, xb: np.ndarray) -> Bf16Vectors | None:
        """The bf16 copy of ``xb`` where this CPU's scans keep one (``keeps_bf16``) and its kernels pass
        ``probe_bf16``; None otherwise (no copy is kept)."""
        import torch

        if not keeps_bf16(xb):
            return None
        vectors = torch.from_numpy(xb).bfloat16()
        if not probe_bf16(vectors, xb):
            return None
        max_norm = max((float(np.sqrt(np.square(xb[a : a + 8192], dtype=np.float64).sum(axis=1)).max())
                        for a in range(0, len(xb), 8192)), default=0.0)
        log.info("batches of %d to %d query rows rank from bf16 products", BF16_MIN_ROWS, BF16_ROWS)
        return cls(vectors, max_norm, True)
