"""Exact MIPS over a flat (exhaustive) inner-product faiss index: one matrix product per batch, kept for its rounds.

``DenseLeg`` (``core.dense``) searches a batch's 2B queries (q_start, then q_end) once for the first k and again,
deeper, for the questions whose candidates hold too few units. faiss's ``IndexFlat`` recomputes every inner
product for each of those searches and keeps its k best in a heap. Here the (2B, N) scores are one matrix product
over the index's own vectors (``IndexFlat.get_xb``, not copied; ``scores_into``), held for the batch (within
``FLAT_SCORES_BYTES``; larger batches are scored a block of queries at a time, and again for each round), and each
round ranks the rows it asks for: only each row's best blocks of columns (``top_values``), not every column.

Order and ties are faiss's: best score first and, among equal scores, the larger token id first (faiss's min-heap
for inner products breaks ties on the id, ``CMin::cmp2``); the tokens tied at the k-th place that are kept are the
ones faiss's heap keeps (``faiss_ties``), so duplicated passages, whose tokens tie exactly, come back as from faiss. The scores are float32 inner products as faiss's, computed by another BLAS:
they may differ from faiss's in the last bits, and two tokens within that of each other may then swap places.
Tokens a selection does not allow score -inf and are returned as -1 after the allowed ones, as faiss does with
a selector.

The held scores are written into a buffer each thread keeps (``Scratch``) rather than a new tensor per batch: a new
(128, 146k) float32 tensor is fresh pages, and faulting them in took a third of the matrix product's time (57 ms
with the buffer, 88 without, 2-core Xeon). A scan whose buffer a later scan on the same thread took scores again.
The buffer stays at the largest batch's size, at most ``FLAT_SCORES_BYTES`` a thread.

The product is numpy's (OpenBLAS) on pieces of ``PRODUCT_COLUMNS`` token columns, its BLAS held to one thread and
the pieces shared among torch's number of threads (``scores_into``). On a 2-core AMD EPYC (Zen 3, AVX2) the
(128 x 384) x (384 x 146k) product took 118 ms this way against 171 ms for torch's (MKL) and 116-135 ms for
OpenBLAS's own two threads, whose workers then busy-wait on the cores the next steps need. A few query rows (one to
four questions: ``SMALL_ROWS``) are the other way round: the scan is bound by reading the index, and torch's
tall product ``xb @ queries.T`` reads it once, where OpenBLAS's wide one reads it about twice as slowly (146k
tokens, same EPYC, medians of 15 interleaved: 2 rows 20.1 against 41.2 ms, 4 rows 20.4 against 38.8, 8 rows 37.1
against 43.9, 10 rows 50.9 against 46.5).

    .venv/bin/python -m pytest -q tests/core/test_flat_search.py
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np

from spanseek.core.spans import numpy_blas

# (2B, N) float32 scores held for one batch's rounds; a batch over more is scored a block of queries at a time
FLAT_SCORES_BYTES = 512 << 20
# columns per block of the block maxima a scan finds once for its rounds (top_values): torch finds maxima of 32 or
# more columns 4.7x faster than of 8 or 16 (4.5 against 21 ms for 128 rows of 146k scores, 2-core EPYC)
MAXIMA_WIDTH = 32
PRODUCT_COLUMNS = 2048  # token columns of one piece of the product (its output fits a core's L2 at 128 rows)
SMALL_ROWS = 8  # query rows up to which the scan is torch's tall product (see the module docstring)
_pool: tuple[int, ThreadPoolExecutor] | None = None  # (its number of threads, the pool)
_pool_lock = threading.Lock()


def _share(workers: int, run: Callable[[int, int], None], runs: list[tuple[int, int]]) -> list[Future]:
    """``run(a, b)`` for each of ``runs`` on the threads that share products: one pool for the process, remade (the
    old one's threads let go once their work is done) when torch's thread count changes (the service sets it at
    start); the work is handed over under the same lock, so no search submits to a pool being let go."""
    global _pool
    with _pool_lock:
        if _pool is None or _pool[0] != workers:
            if _pool is not None:
                _pool[1].shutdown(wait=False)
            _pool = (workers, ThreadPoolExecutor(max_workers=workers, thread_name_prefix="spanseek-flat-scan"))
        return [_pool[1].submit(run, a, b) for a, b in runs]


def scores_into(queries: np.ndarray, xb: np.ndarray, out: np.ndarray, workers: int | None = None) -> np.ndarray:
    """``out[:] = queries @ xb.T`` ((R, d) x (N, d) -> (R, N) float32) in pieces of ``PRODUCT_COLUMNS`` columns,
    each piece numpy's single-threaded product, ``workers`` threads (default: torch's thread count) each taking
    one contiguous run of pieces. The pieces are cut at the same columns however many threads share them, so the
    scores have the same bits for any thread count (float rounding does depend on the cut, and on the number of
    rows, as with any BLAS). Up to ``SMALL_ROWS`` rows, torch's tall product ``xb @ queries.T`` instead (torch's
    threads; the same bits for any thread count too)."""
    import torch

    if len(queries) <= SMALL_ROWS:
        out[:] = torch.matmul(torch.from_numpy(xb), torch.from_numpy(queries).T).numpy().T
        return out
    n = len(xb)
    workers = max(1, min(workers or torch.get_num_threads(), -(-n // PRODUCT_COLUMNS)))

    def run(a: int, b: int) -> None:
        for lo in range(a, b, PRODUCT_COLUMNS):
            hi = min(b, lo + PRODUCT_COLUMNS)
            np.matmul(queries, xb[lo:hi].T, out=out[:, lo:hi])

    pieces = -(-n // PRODUCT_COLUMNS)
    bounds = [min(n, (pieces * w // workers) * PRODUCT_COLUMNS) for w in range(workers + 1)]
    with numpy_blas().limit(limits=1):  # no BLAS worker threads to wake (and leave spinning) on top of these
        if workers == 1:
            run(0, n)
        else:
            for f in _share(workers, run, list(zip(bounds[:-1], bounds[1:], strict=True))):
                f.result()
    return out


def flat_vectors(faiss_index: Any) -> np.ndarray | None:
    """The (N, d) float32 vectors of a flat inner-product faiss index (a view, not a copy); None for any other
    index (IVF, PQ, an id map, a segmented index), which faiss searches."""
    import faiss

    if type(faiss_index) not in (faiss.IndexFlat, faiss.IndexFlatIP):
        return None
    if faiss_index.metric_type != faiss.METRIC_INNER_PRODUCT or faiss_index.ntotal == 0:
        return None
    n, d = faiss_index.ntotal, faiss_index.d
    return faiss.rev_swig_ptr(faiss_index.get_xb(), n * d).reshape(n, d)


class Scratch(threading.local):
    """Each thread's buffer for the held scores of its latest ``FlatScan``: ``take(owner, rows, n)`` gives ``owner``
    a (rows, n) float32 view of it (grown when too small), and ``holds(owner)`` says whether that view is still
    ``owner``'s (no later scan on this thread took the buffer)."""

    def __init__(self) -> None:
        self.buffer: Any = None
        self.owner: object | None = None

    def take(self, owner: object, rows: int, n: int) -> Any:
        import torch

        if self.buffer is None or self.buffer.numel() < rows * n:
            self.buffer = None  # the old one is freed before the new one is made
            self.buffer = torch.empty(rows * n, dtype=torch.float32)
        self.owner = owner
        return self.buffer[: rows * n].view(rows, n)

    def holds(self, owner: object) -> bool:
        return self.owner is owner


SCRATCH = Scratch()


def block_width(m: int) -> int:
    """Columns per block of ``top_values`` for the m best: wide blocks for a shallow search (fewer candidates to
    gather per block kept), narrow ones for a deep one (m blocks of fewer columns). Measured on 128 rows of 146k
    scores (2-core Xeon): 3.8x faster than one ``torch.topk`` at m = 33, 2.6x at 81, 1.7x at 321, 1.6x at 1,281."""
    return 64 if m <= 128 else 32 if m <= 512 else 8


def block_maxima(scores: Any, width: int = MAXIMA_WIDTH) -> Any:
    """(R, N // width) maximum of each whole block of ``width`` columns of each row of ``scores`` (R, N)."""
    whole = scores.shape[1] // width
    return scores[:, : whole * width].unflatten(1, (whole, width)).amax(dim=2)


def top_values(scores: Any, m: int, rows: Any = None, maxima: Any = None) -> tuple[Any, Any]:
    """(values, ids) of the m best columns of each row ``rows`` (a LongTensor; default every row) of ``scores`` (R, N),
    best first: the same values as ``torch.topk`` (ids may differ among equal values), found without ordering every
    column.

    The columns are cut into blocks; a row's m best values lie in its m blocks of highest maximum (fewer than m
    values beat the m-th best, and each block ranked above a block holding one of them has a maximum at least as
    high), so only those blocks, and the columns after the last whole block, are ranked. ``maxima``
    (``block_maxima(scores)`` of every row), when given, has the blocks' maxima already: the rows are then ranked
    without reading (or copying) their scores again, only their candidate blocks."""
    import torch

    n = scores.shape[1]
    width = block_width(m)
    whole = n // width
    if m * width * 4 >= n or whole == 0:  # no fewer candidates than columns worth it
        return torch.topk(scores if rows is None else scores[rows], m, dim=1, sorted=True)
    if maxima is None or width % MAXIMA_WIDTH:
        tops = block_maxima(scores if rows is None else scores[rows], width)
    else:  # blocks of ``width`` are runs of ``width // MAXIMA_WIDTH`` blocks of the maxima
        per = width // MAXIMA_WIDTH
        tops = block_maxima((maxima if rows is None else maxima[rows])[:, : whole * per], per)
    kept = torch.topk(tops, m, dim=1, sorted=False).indices  # (r, m)
    ids = (kept.unsqueeze(2) * width + torch.arange(width)).flatten(1)  # (r, m * width)
    if whole * width < n:  # the last, partial block is always a candidate
        ids = torch.cat([ids, torch.arange(whole * width, n).expand(len(ids), -1)], dim=1)
    first = torch.arange(len(scores)) if rows is None else rows
    candidates = torch.take(scores, first.unsqueeze(1) * n + ids)
    values, at = torch.topk(candidates, m, dim=1, sorted=True)
    return values, torch.gather(ids, 1, at)


def top_ids(scores: Any, k: int, rows: np.ndarray | None = None, maxima: Any = None) -> np.ndarray:
    """(r, k) int64 ids of the k best columns of each row ``rows`` (default every row) of ``scores`` (a (R, N)
    float32 contiguous torch tensor), best first, ties to the larger id; -1 for -inf scores (not allowed) and past N.
    ``maxima``: as ``top_values``'s."""
    import torch

    n = scores.shape[1]
    picked = None if rows is None else torch.from_numpy(np.asarray(rows, dtype=np.int64))
    r_count = len(scores) if rows is None else len(rows)
    out = np.full((r_count, k), -1, dtype=np.int64)
    kk = min(k, n)
    if kk == 0 or r_count == 0:
        return out
    # one more than k: a row whose (k+1)-th value equals its k-th has a tie across the cut, settled below
    top_vals, top_idx = top_values(scores, min(kk + 1, n), picked, maxima)
    vals, ids = top_vals.numpy(), top_idx.numpy()
    cut = np.flatnonzero(vals[:, kk - 1] == vals[:, kk]) if kk < n else np.zeros(0, np.int64)
    for r in cut:
        row = scores[r if rows is None else int(rows[r])].numpy()
        above, tied = np.flatnonzero(row > vals[r, kk - 1]), np.flatnonzero(row == vals[r, kk - 1])
        ids[r, :kk] = np.concatenate([above, faiss_ties(above, tied, kk)])
        vals[r, :kk] = row[ids[r, :kk]]
    vals, ids = vals[:, :kk], ids[:, :kk].astype(np.int64)
    # best first (topk's order), the larger id first among ties: only rows with a tie inside, or settled at the cut
    # above (in id order), are sorted again; most rows have neither
    again = np.union1d(cut, np.flatnonzero((vals[:, 1:] == vals[:, :-1]).any(axis=1)))
    if len(again):
        order = np.lexsort((-ids[again], -vals[again]), axis=1)
        ids[again] = np.take_along_axis(ids[again], order, axis=1)
        vals[again] = np.take_along_axis(vals[again], order, axis=1)
    out[:, :kk] = np.where(np.isneginf(vals), -1, ids)
    return out


def faiss_ties(above: np.ndarray, tied: np.ndarray, k: int) -> np.ndarray:
    """Which of the tokens ``tied`` (ascending ids), tied at the k-th score with ``above`` (ascending ids) scoring
    higher, faiss keeps in its k best. faiss reads the tokens in id order into a heap of k: a tied token enters
    only while fewer than k tokens at or above the tie have been read (the heap's least must be strictly worse), and
    a better token that comes later pushes out the least, the smaller id first among equal scores. So it keeps the
    largest ids among the tied tokens that entered; with k = 1 (a plain maximum) the first one."""
    want = k - len(above)
    if k == 1:
        return tied[:want]
    read_before = np.searchsorted(above, tied) + np.arange(len(tied))  # tokens at or above the tie read before it
    entered = tied[read_before < k]
    return entered[len(entered) - want :]


class FlatScan:
    """One batch's exact MIPS over a flat inner-product faiss index (``flat_vectors`` not None): ``top(rows, k)``
    gives the k best allowed tokens of the query rows ``rows``; the scores are computed once for the batch when they
    fit ``max_bytes``.

    queries: (Q, d) float32; allowed: (N,) bool of the tokens a search may return, or None for all.
    """

    def __init__(self, faiss_index: Any, queries: np.ndarray, allowed: np.ndarray | None,
                 max_bytes: int = FLAT_SCORES_BYTES):
        import torch

        xb = flat_vectors(faiss_index)
        if xb is None:
            raise ValueError(f"not a flat inner-product index: {type(faiss_index).__name__}")
        self.faiss_index = faiss_index  # holds the memory xb views
        self.xb = torch.from_numpy(xb)
        self.queries = torch.from_numpy(np.ascontiguousarray(queries, dtype=np.float32))
        self.allowed = None if allowed is None else torch.from_numpy(np.ascontiguousarray(allowed, dtype=bool))
        self.block = max(1, max_bytes // (4 * max(1, len(xb))))  # query rows whose scores fit the budget
        self._all: Any = None
        self._maxima: Any = None  # block_maxima of the held scores, for every round

    def held(self) -> np.ndarray | None:
        """(Q, N) float32 scores of every query row (computed once, -inf where a token is not allowed), or None when
        they are over the byte budget and are scored a block at a time."""
        if self._all is not None and not SCRATCH.holds(self):
            self._all = self._maxima = None  # a later scan on this thread wrote over them: score again
        if self._all is None and len(self.queries) <= self.block:
            self._all = self._score(self.queries, SCRATCH.take(self, len(self.queries), len(self.xb)))
        return None if self._all is None else self._all.numpy()

    def scores(self, rows: np.ndarray) -> Any:
        """(len(rows), N) torch float32 scores of query rows ``rows``; -inf where a token is not allowed."""
        import torch

        self.held()
        if self._all is not None:
            if len(rows) == len(self._all) and (rows == np.arange(len(rows))).all():
                return self._all  # the first round: every row, not copied
            return self._all[torch.from_numpy(np.asarray(rows, dtype=np.int64))]
        return self._score(self.queries[torch.from_numpy(np.asarray(rows, dtype=np.int64))])

    def _score(self, queries: Any, out: Any = None) -> Any:
        import torch

        if out is None:
            out = torch.empty(len(queries), len(self.xb), dtype=torch.float32)
        scores_into(queries.numpy(), self.xb.numpy(), out.numpy())  # (R, N)
        if self.allowed is not None:
            out.masked_fill_(~self.allowed, float("-inf"))
        return out

    def top(self, rows: np.ndarray, k: int) -> np.ndarray:
        """(len(rows), k) ids of the k best allowed tokens of each query row, best first; -1 after them."""
        rows = np.asarray(rows, dtype=np.int64)
        if self.held() is not None:  # the blocks' maxima of every row are found once; a round's rows not copied
            if self._maxima is None:
                self._maxima = block_maxima(self._all)
            every = len(rows) == len(self._all) and (rows == np.arange(len(rows))).all()  # the first round
            return top_ids(self._all, k, None if every else rows, self._maxima)
        parts = [top_ids(self.scores(rows[a : a + self.block]), k) for a in range(0, len(rows), self.block)]
        return np.concatenate(parts) if parts else np.zeros((0, k), np.int64)
