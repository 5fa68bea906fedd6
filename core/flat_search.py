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

The product's BLAS depends on the CPU (``PRODUCT``). On AMD it is numpy's (OpenBLAS) on pieces of
``PRODUCT_COLUMNS`` token columns, its BLAS held to one thread and the pieces shared among torch's number of threads
(``scores_into``): on a 2-core AMD EPYC (Zen 3, AVX2) the (128 x 384) x (384 x 146k) product took 118 ms this way
against 171 ms for torch's (MKL) and 116-135 ms for OpenBLAS's own two threads, whose workers then busy-wait on the
cores the next steps need. Where the index's float32 vectors fit ``TRANSPOSED_BYTES``, the scan also keeps them
transposed, (d, N), made once per index (``transposed``, held by the dense leg): the pieces are then products by
its (d, columns) pieces, the same bits as by the rows, and faster (2-core EPYC with AVX-512, Zen 4: 128 rows 80-85
against 95-101 ms; a whole search of 8 questions 1.33-1.47x as fast, of 64 1.06-1.12x). On Intel it is torch's
(MKL) into the held buffer: on a 2-core Xeon with AVX-512 the same
product took 67 ms against 88-100 ms in OpenBLAS's pieces (64 rows: 34 against 54-71 ms; medians of 7). MKL's bits
may depend on the thread count for a few row counts (9 rows of 146k tokens: up to 1e-4 apart), OpenBLAS's pieces'
do not. On CPUs with AVX-512 (Zen 4) OpenBLAS's pieces also give a row the same bits however many rows share the
product (2 to 64 rows of the demo index), and equal tokens equal bits at any column. Its AVX2 kernel (CPUs without
AVX-512: Zen 3) does not: it rounds a row's sums by the row's place among tiles of 12 rows and a token's by its
column (scores of about 20: 2e-6 apart), so there a question's token scores may differ in the last bits with the
questions searched beside it, and the tokens of two copies of a passage may not tie exactly (the copies then come
back in either order; ``collapse_duplicates`` finds them by their text). A few query rows (one to four questions: ``SMALL_ROWS``) take torch's tall product ``xb @
queries.T`` instead, on every CPU: they are bound by reading the index, which the tall product reads once where
OpenBLAS's wide one reads it about twice as slowly (146k tokens, same EPYC, medians of 15 interleaved: 2 rows 20.1
against 41.2 ms, 4 rows 20.4 against 38.8, 8 rows 37.1 against 43.9, 10 rows 50.9 against 46.5; with the transposed
copy on a busy Zen 4, medians of 9: 2 rows 50 against 80 ms, 4 rows 67 against 95, 8 rows 91 against 91). The tall
product's bits differ from the pieces' and with the rows beside a row: on the 2-core Zen 4 EPYC, MKL's kernel adds a
score's products rounded, unfused, in 4 lanes for each group of 4 rows and in 8 lanes for a last pair (2, 6 rows),
where OpenBLAS's pieces add them one by one, fused (``bench/small_batches.py --scan-rows`` names the summation of each
product). So a question's token scores can differ in the last bits (up to 1e-4 on scores of 2-6) between a batch of up
to four questions and a larger one, and one question's from two's; no other kernel there adds in MKL's order, and
none read the index faster at these rows (one thread's CPU time, 146k tokens: MKL's 2, 4, 8 rows 11.5, 16.2, 28.4 ms,
OpenBLAS's pieces 28.5, 30.5, 33.9). Taking the pieces for every batch would remove that at 20-30 ms more for a search
of one question, and no hit list of 200 validation questions changed by it.

A small batch (at most ``HALF_ROWS`` query rows) may rank from half-precision products instead: when the flat index
holds an fp16 fine store exactly, widened (``DenseLeg.flat_holds_fine``), the product of the queries rounded to fp16
with the store reads half the bytes, and on a CPU that multiplies fp16 natively (``cpu_scans_fp16_faster``: AVX-512
FP16 or AMX FP16, from its features, never a timing, so every process ranks alike; torch's product is then oneDNN's
kernel) each row's ``candidates(k)`` best by the fp16 scores are scored
exactly (``FlatScan.exact``) and ranked as ``top_ids`` ranks a row. A certificate per row says the exact k best, and
every token tied with the k-th, are among them: a token outside has an exact score at most its fp16 score plus
``half_error``, so at most the best fp16 score outside plus that bound, and the certificate is that the k-th exact
score is above it. A row without one is scored in float32 as above (``FlatScan.fell_back``). The ids are then the
exact k best by ``exact``'s float32 scores, faiss's order and ties; those scores are another float32 sum than the
product's, so two tokens within rounding of each other may swap places as they may against faiss. On the demo index
(146k tokens, 400 rows of real questions) the fp16 scores lie within 3.1e-4 |q| max|h| of the exact ones against a
bound of 1.5e-3, and every row has its certificate at k = 32, 64, 256 and 1,024. The bound holds for a kernel that
sums in float32 and rounds once; a check at load (``probe_half``) tries that on a sample (``rounds_once``) and leaves
the scans in float32 otherwise. Such a scan's held products are not exact (``held`` is None): the batch's token scores are then
``exact``'s of the pairs asked for (``core.dense.BatchScores``), which cost more than reading the held product
(7 ms for the 12k pairs, two scores each, of completing 8 questions' passage candidates). On CPUs with AVX-512 BF16
but not FP16 (AMD Zen 4) ``core.bf16_scan`` screens the same way from a bf16 copy (``Bf16Vectors``), its exact
scores the float32 scan's own bits.

    .venv/bin/python -m pytest -q tests/core/test_flat_search.py
"""

from __future__ import annotations

import functools
import logging
import threading
import warnings
import weakref
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from spanseek.core.spans import numpy_blas

log = logging.getLogger(__name__)

# (2B, N) float32 scores held for one batch's rounds; a batch over more is scored a block of queries at a time
FLAT_SCORES_BYTES = 512 << 20
# columns per block of the block maxima a scan finds once for its rounds (top_values): torch finds maxima of 32 or
# more columns 4.7x faster than of 8 or 16 (4.5 against 21 ms for 128 rows of 146k scores, 2-core EPYC)
MAXIMA_WIDTH = 32
# blocks at least this wide are gathered whole for top_values (a view of the scores as blocks, indexed by row and
# block), narrower ones column by column (torch.take): 128 rows of 146k scores (2-core Xeon), m = 81 12.0 against
# 18.4 ms, m = 161 17.1 against 21.3; 37 rows at m = 1,281 (blocks of 8) 33.8 against 29.9
GATHER_WIDTH = 32
PRODUCT_COLUMNS = 2048  # token columns of one piece of the product (its output fits a core's L2 at 128 rows)
# the largest flat index (float32 bytes) whose vectors the pieces product also keeps transposed, (d, N): OpenBLAS's
# product of the queries by a (d, columns) piece is faster than by the (columns, d) rows of the index itself (module
# docstring), at the cost of a second copy of the vectors
TRANSPOSED_BYTES = 1 << 30
SMALL_ROWS = 8  # query rows up to which the scan is torch's tall product (see the module docstring)
# the BLAS of the product of more than SMALL_ROWS rows: "mkl" (torch's, into the held buffer), "pieces" (numpy's
# OpenBLAS on pieces shared among threads) or "auto": mkl on Intel CPUs, pieces on others (module docstring)
PRODUCT = "auto"
# query rows (16 questions) up to which a scan may rank from fp16 products. FlatScan.top over the demo index (146k
# tokens, 2-core Xeon with AVX-512 FP16, real questions, medians of 9-15 alternating, a neighbour's load on the
# cores) at k = 32 / 256 was 1.86x / 1.79x as fast at 2 rows, 1.73x / 1.45x at 32, 1.56x / 1.28x at 48, 1.23x /
# 1.00x at 64 and 0.98x / 0.36x at 128
HALF_ROWS = 32
HALF_MIN_TOKENS = 1 << 14  # a smaller index stays in float32: its product takes a few ms at most
APPROXIMATE = True  # False: every scan ranks from float32 products alone (the exact path), for comparisons
EXACT_PAIRS = 2048  # token rows FlatScan.exact gathers at a time (3 MB)
# a fp16 scan's round whose rows x candidates(k) pairs to score exactly exceed this share of the index's tokens is
# ranked from float32 products instead: a pair costs about 0.4 us (FlatScan.exact), a product of a few rows about
# 0.2 us a token (146k tokens, 2-core Xeon)
EXACT_SHARE = 0.5
HALF_CHECK_COLUMNS = 4096  # tokens whose fp16 scores are checked against exact ones at load (probe_half)
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


def scores_into(queries: np.ndarray, xb: np.ndarray, out: np.ndarray, workers: int | None = None,
                xt: np.ndarray | None = None) -> np.ndarray:
    """``out[:] = queries @ xb.T`` ((R, d) x (N, d) -> (R, N) float32) in pieces of ``PRODUCT_COLUMNS`` columns,
    each piece numpy's single-threaded product, ``workers`` threads (default: torch's thread count) each taking
    one contiguous run of pieces. The pieces are cut at the same columns however many threads share them, so the
    scores have the same bits for any thread count (float rounding does depend on the cut), and on AVX-512 CPUs a
    row's bits do not depend on the other rows of a product of more than ``SMALL_ROWS`` rows (module docstring). ``xt`` (``transposed(xb)``, when kept)
    is ``xb.T`` contiguous: the pieces are then products by its (d, columns) pieces, faster and with the same bits.
    Up to ``SMALL_ROWS`` rows (one to four questions), torch's tall product ``xb @ queries.T``, which reads the
    index once where the pieces read it about twice as slowly (the same bits for any thread count too, but summed
    otherwise than the pieces, and for one question's 2 rows otherwise than for more: a question's scores may differ
    in the last bits between it alone, two to four questions together and a larger batch); with ``wide_product()``
    "mkl", more rows are torch's product into ``out`` (torch's threads, ``workers`` and ``xt`` unused)."""
    import torch

    if len(queries) <= SMALL_ROWS:
        out[:] = torch.matmul(torch.from_numpy(xb), torch.from_numpy(queries).T).numpy().T
        return out
    if wide_product() == "mkl" and out.flags.c_contiguous:  # (torch would write a non-contiguous out elsewhere)
        torch.mm(torch.from_numpy(queries), torch.from_numpy(xb).T, out=torch.from_numpy(out))
        return out
    n = len(xb)
    workers = max(1, min(workers or torch.get_num_threads(), -(-n // PRODUCT_COLUMNS)))

    def run(a: int, b: int) -> None:
        for lo in range(a, b, PRODUCT_COLUMNS):
            hi = min(b, lo + PRODUCT_COLUMNS)
            np.matmul(queries, xb[lo:hi].T if xt is None else xt[:, lo:hi], out=out[:, lo:hi])

    pieces = -(-n // PRODUCT_COLUMNS)
    bounds = [min(n, (pieces * w // workers) * PRODUCT_COLUMNS) for w in range(workers + 1)]
    with numpy_blas().limit(limits=1):  # no BLAS worker threads to wake (and leave spinning) on top of these
        if workers == 1:
            run(0, n)
        else:
            for f in _share(workers, run, list(zip(bounds[:-1], bounds[1:], strict=True))):
                f.result()
    return out


def keeps_transposed(xb: np.ndarray) -> bool:
    """Whether a scan of the flat vectors ``xb`` on this CPU keeps them transposed too (``transposed``): for the
    pieces product (``wide_product()``), within ``TRANSPOSED_BYTES``."""
    return wide_product() == "pieces" and xb.nbytes <= TRANSPOSED_BYTES and len(xb) > SMALL_ROWS


def transposed(xb: np.ndarray) -> np.ndarray | None:
    """``xb.T`` as a contiguous (d, N) float32 copy, for ``scores_into``'s pieces, where ``keeps_transposed``; None
    otherwise (the pieces then read ``xb``'s rows)."""
    return np.ascontiguousarray(xb.T) if keeps_transposed(xb) else None


def wide_product() -> str:
    """``PRODUCT`` resolved: "auto" is "mkl" on an Intel CPU whose torch has MKL, else "pieces"."""
    if PRODUCT != "auto":
        return PRODUCT
    import torch

    return "mkl" if cpu_vendor() == "GenuineIntel" and torch.backends.mkl.is_available() else "pieces"


@functools.cache
def cpu_info() -> dict[str, str]:
    """The first CPU's fields of /proc/cpuinfo (``vendor_id``, ``flags`` ...), empty where it cannot be read."""
    fields: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
            for line in f:
                if not line.strip():  # the end of the first CPU's block
                    break
                name, _, value = line.partition(":")
                fields[name.strip()] = value.strip()
    except OSError:
        pass
    return fields


def cpu_vendor() -> str:
    """The CPU's vendor as Linux names it (``GenuineIntel``, ``AuthenticAMD``), "" where /proc/cpuinfo does not say."""
    return cpu_info().get("vendor_id", "")


def cpu_flags() -> frozenset[str]:
    """The CPU's feature flags as Linux names them (``avx512_fp16``, ``amx_tile`` ...); empty where it does not say."""
    return frozenset(cpu_info().get("flags", "").split())


def cpu_scans_fp16_faster() -> bool:
    """Whether a small batch's flat scan ranks from fp16 products on this CPU, from its features alone: where it
    multiplies fp16 natively (AVX-512 FP16, or AMX FP16 tiles: Intel Xeon from Sapphire Rapids), whose product
    torch (oneDNN) runs 1.9x as fast as float32's at 8 query rows, 1.5x at 16 and 1.07-1.9x at 32 (146k tokens,
    2-core Xeon); elsewhere fp16 is widened to float32 first, and slower. Never from a timing: a start-up probe could
    find the same CPU faster in one process and slower in the next, and the two then ranked by differently rounded
    scores."""
    return not cpu_flags().isdisjoint({"avx512_fp16", "amx_fp16"})


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


def candidates(k: int) -> int:
    """Tokens a row's fp16 scores pick for its k best, to be scored exactly: enough for the certificate (module
    docstring) of every one of 400 rows of real questions on the demo index at k = 32, 64, 256 and 1,024, which
    needed at most 48, 80, 296 and 1,160."""
    return k + k // 4 + 16


def half_error(query_norms: np.ndarray, max_norm: float, d: int) -> np.ndarray:
    """Per query row (float64 norms |q|), a bound on |fp16 score - exact score| of any token h, |h| <= ``max_norm``:
    the fp16 score is ``half_product``'s, the exact one ``FlatScan.exact``'s.

    With u = 2^-11 (fp16's unit roundoff), g = d 2^-24 / (1 - d 2^-24) and S = sum |q_i h_i| <= |q| max|h|: rounding q
    to fp16 moves q.h by at most u S (plus 2^-25 sum |h_i| below fp16's normal range); the products of two fp16
    numbers are exact in float32 and their float32 sum, in any order, is within g (1 + u) S of theirs; rounding it to
    fp16 moves it by u times its size, at most (1 + u + g (1 + u)) S, plus 2^-25. So the fp16 score is within
    (2u + g + u^2 + 2ug + u^2 g) S <= (3u + g) |q| max|h| of q.h (for g < 0.4: d below millions), plus
    2^-24 (sqrt(d) max|h| + 1) below the normal range; the exact score, a float32 sum of float32 products, within
    g S. The bound is the sum of the two (the slack of 3u over 2u + u^2 + ... also covers the float64 sum the
    certificate compares with)."""
    u, g = 2.0**-11, d * 2.0**-24 / (1 - d * 2.0**-24)
    return (3 * u + 2 * g) * query_norms * max_norm + 2.0**-24 * (np.sqrt(d) * max_norm + 1)


def half_product(queries: Any, half: Any, out: Any) -> Any:
    """``out[:] = fp16(queries) @ half.T`` ((R, d) float32 torch queries, (N, d) float16 vectors -> (R, N) float32
    ``out``): torch's fp16 product, widened (exactly) for the ranking, as torch's reductions over fp16 are slower
    than over float32 on CPUs (the block maxima of 16 x 146k scores: 9.4 against 1.7 ms, one thread, Xeon; the
    widening 0.9 ms)."""
    import torch

    out.copy_(torch.mm(queries.half(), half.T))
    return out


def rounds_once(scores: np.ndarray, queries: np.ndarray, x: np.ndarray, u: float = 2.0**-11) -> bool:
    """Whether the fp16 scores (R, n) of queries (R, d) by vectors (n, d), all fp16 numbers, are what a float32 sum of
    their products rounded once to fp16 may give: within u |q.x| + 2 g S + 2^-24 of q.x (``half_error``'s terms
    without the queries' rounding). A kernel that sums in fp16, or rounds partial sums, is off by about u times the
    partial sums instead, beyond the bound ``half_error`` relies on. ``u``: the unit roundoff of the scores' type
    (bf16's 2^-8 for ``core.bf16_scan``'s, whose scores, queries and vectors are bf16 numbers)."""
    d = x.shape[1]
    g = d * 2.0**-24 / (1 - d * 2.0**-24)
    q64, x64 = queries.astype(np.float64), x.astype(np.float64)
    exact = q64 @ x64.T  # the products of fp16 numbers and their float64 sum: within d 2^-53 S
    allowed = u * np.abs(exact) + 2 * g * (np.abs(q64) @ np.abs(x64).T) + 2.0**-24
    return bool((np.abs(scores.astype(np.float64) - exact) <= allowed).all())


def probe_half(half: Any, xb: np.ndarray, rows: int = HALF_ROWS) -> bool:
    """Whether ``half_product``'s scores of a sample, for ``rows`` query rows and for one, are what a float32 sum
    rounded once to fp16 gives (``rounds_once``), as ``half_error``'s bound needs. The queries are the index's own
    vectors, exact in fp16, so only the product's rounding counts. A check of the kernel's arithmetic, not a timing:
    the same CPU and torch give the same answer in every process."""
    import torch

    n = len(xb)
    queries = np.ascontiguousarray(xb[np.linspace(0, n - 1, rows).astype(np.int64)])
    q = torch.from_numpy(queries)
    sample = slice(0, min(n, HALF_CHECK_COLUMNS))
    for scores in (half_product(q, half[sample], torch.empty(rows, sample.stop)),
                   half_product(q[:1], half[sample], torch.empty(1, sample.stop))):
        if not rounds_once(scores.numpy(), queries[: len(scores)], xb[sample]):
            log.warning("this CPU's fp16 product is less accurate than a float32 sum rounded once: flat scans stay "
                        "in float32")
            return False
    return True


@dataclass(frozen=True)
class HalfVectors:
    """An index's (N, d) float16 vectors that its flat index holds exactly, widened (an fp16 fine store:
    ``DenseLeg.flat_holds_fine``), and their largest norm (``half_error``'s max|h|). ``used``: whether a scan of at
    most ``HALF_ROWS`` query rows ranks from them, decided once from what the CPU is (``cpu_scans_fp16_faster``) and
    whether its fp16 product rounds once (``probe_half``), never from a timing, so every process on such a CPU
    ranks a batch alike."""

    vectors: Any  # (N, d) torch float16, only read
    max_norm: float
    used: bool
    # the largest |q| max|h| ranked from these vectors: no query element or score beyond fp16's range
    limit: ClassVar[float] = 2.0**15
    # whether ``exact`` gives the float32 scan's own bits, so that a fall-back must be of every query row
    as_scanned: ClassVar[bool] = False

    def rows(self) -> range:
        """The query row counts of the scans that rank from these vectors."""
        return range(1, HALF_ROWS + 1)

    def product(self, queries: Any, out: Any) -> Any:
        """``out[:] =`` the reduced scores of ``queries`` (R, d) float32, (R, N) float32 (``half_product``)."""
        return half_product(queries, self.vectors, out)

    def error(self, query_norms: np.ndarray, d: int) -> np.ndarray:
        """Per query row, a bound on |reduced score - ``exact`` score| (``half_error``)."""
        return half_error(query_norms, self.max_norm, d)

    def candidates(self, k: int) -> int:
        """Tokens a row's reduced scores pick for its k best (``candidates``)."""
        return candidates(k)

    def exact(self, xb: np.ndarray, queries: np.ndarray, ids: np.ndarray, rows: np.ndarray) -> np.ndarray | None:
        """``FlatScan.exact``'s scores where these vectors score pairs otherwise; None: one einsum a query row."""
        return None

    @classmethod
    def of(cls, half: np.ndarray, xb: np.ndarray) -> HalfVectors:
        """From the fp16 vectors ``half`` and the flat index's float32 ``xb``: their norms, and ``used`` where this CPU
        multiplies fp16 natively, every row of ``xb`` is its fp16 row widened (else the certificate's bound would not
        hold), there are ``HALF_MIN_TOKENS`` rows and the product passes ``probe_half``."""
        import torch

        with warnings.catch_warnings():  # a read-only memory map: torch warns that a tensor could write to it
            warnings.simplefilter("ignore", UserWarning)
            vectors = torch.from_numpy(half)
        max_norm, same, step = 0.0, len(half) == len(xb), 8192
        for a in range(0, len(xb) if same else 0, step):
            x = xb[a : a + step]
            same = same and np.array_equal(x, vectors[a : a + step].float().numpy())
            max_norm = max(max_norm, float(np.sqrt(np.square(x, dtype=np.float64).sum(axis=1)).max()))
        if not same:
            log.warning("the flat index does not hold the fp16 vectors exactly: flat scans stay in float32")
            return cls(vectors, max_norm, False)
        used = len(xb) >= HALF_MIN_TOKENS and cpu_scans_fp16_faster() and probe_half(vectors, xb)
        if used:
            log.info("batches of up to %d query rows rank from fp16 products", HALF_ROWS)
        return cls(vectors, max_norm, used)


class Scratch(threading.local):
    """Each thread's buffer for the held scores of its latest ``FlatScan``: ``take(owner, rows, n)`` gives ``owner``
    a (rows, n) float32 view of it (grown when too small), and ``holds(owner)`` says whether that view is still
    ``owner``'s (no later scan on this thread took the buffer).

    The owner is held by a weak reference: a scan holds its faiss index and transposed vectors, and a thread that
    scans no more (the warm-up's, or the search thread of a searcher a reload replaced, until its next scan) kept
    the replaced index alive, 439 MB of the demo index's, for as long as the process ran."""

    def __init__(self) -> None:
        self.buffer: Any = None
        self.owner: weakref.ref[object] | None = None

    def take(self, owner: object, rows: int, n: int) -> Any:
        import torch

        if self.buffer is None or self.buffer.numel() < rows * n:
            self.buffer = None  # the old one is freed before the new one is made
            self.buffer = torch.empty(rows * n, dtype=torch.float32)
        self.owner = weakref.ref(owner)
        return self.buffer[: rows * n].view(rows, n)

    def holds(self, owner: object) -> bool:
        return self.owner is not None and self.owner() is owner


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
    first = torch.arange(len(scores)) if rows is None else rows
    if width >= GATHER_WIDTH:  # the kept blocks gathered whole, as (r, m, width) rows of a view of the blocks
        candidates = scores[:, : whole * width].unflatten(1, (whole, width))[first.unsqueeze(1), kept].flatten(1)
        if whole * width < n:  # the last, partial block is always a candidate
            candidates = torch.cat([candidates, scores[first, whole * width :]], dim=1)
        values, at = torch.topk(candidates, m, dim=1, sorted=True)
        inside = at < m * width
        block = torch.gather(kept, 1, torch.where(inside, at // width, 0))
        return values, torch.where(inside, block * width + at % width, whole * width + at - m * width)
    ids = (kept.unsqueeze(2) * width + torch.arange(width)).flatten(1)  # (r, m * width)
    if whole * width < n:
        ids = torch.cat([ids, torch.arange(whole * width, n).expand(len(ids), -1)], dim=1)
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

    queries: (Q, d) float32; allowed: (N,) bool of the tokens a search may return, or None for all; half: the index's
    fp16 vectors (``HalfVectors``), when the flat index holds them exactly: a scan of at most ``HALF_ROWS`` rows then
    ranks from fp16 products where they are faster (``half`` is kept; module docstring), its held scores are not
    exact (``held`` is None) and ``exact`` gives the scores it ranked by. transposed: the index's vectors as
    ``transposed`` keeps them, for the product's pieces (the same scores, sooner). products_of: a scan of the same
    queries over more allowed tokens (the same search without a filter) whose held products this scan takes over,
    masked to its own allowed tokens, instead of computing them again, if that scan still holds them (no later scan
    on this thread took them); that scan then scores again if it is searched again.
    """

    def __init__(self, faiss_index: Any, queries: np.ndarray, allowed: np.ndarray | None,
                 max_bytes: int = FLAT_SCORES_BYTES, half: HalfVectors | None = None,
                 transposed: np.ndarray | None = None, products_of: FlatScan | None = None):
        import torch

        xb = flat_vectors(faiss_index)
        if xb is None:
            raise ValueError(f"not a flat inner-product index: {type(faiss_index).__name__}")
        self.faiss_index = faiss_index  # holds the memory xb views
        self.xb = torch.from_numpy(xb)
        if transposed is not None and transposed.shape != xb.shape[::-1]:
            raise ValueError(f"transposed vectors of shape {transposed.shape} for an index of {xb.shape}")
        self.xt = transposed
        self.queries = torch.from_numpy(np.ascontiguousarray(queries, dtype=np.float32))
        self.allowed = None if allowed is None else torch.from_numpy(np.ascontiguousarray(allowed, dtype=bool))
        self.block = max(1, max_bytes // (4 * max(1, len(xb))))  # query rows whose scores fit the budget
        self.half: HalfVectors | None = None
        self.fell_back = False  # whether a row was ranked from float32 products (no certificate, or a deep round)
        if (half is not None and half.used and APPROXIMATE and len(self.queries) in half.rows()
                and len(self.queries) <= self.block and len(half.vectors) == len(xb)):
            norms = np.linalg.norm(self.queries.numpy().astype(np.float64), axis=1)
            if norms.max() * max(1.0, half.max_norm) < half.limit:
                self.half, self._margin = half, half.error(norms, xb.shape[1])
        self._all: Any = None  # the held (Q, N) products: exact, or with ``half`` the fp16 ones widened
        self._float32: Any = None  # a reduced scan's float32 (Q, N) products, once a row fell back (``_fall_back``)
        self._maxima: Any = None  # block_maxima of the held scores, for every round
        self._products_of = products_of

    def held(self) -> np.ndarray | None:
        """(Q, N) float32 scores of every query row (computed once, -inf where a token is not allowed), or None when
        they are over the byte budget and are scored a block at a time, or when the scan ranks from fp16 products."""
        products = self._products()
        return None if products is None or self.half is not None else products.numpy()

    def _products(self) -> Any:
        """The held (Q, N) float32 products (exact, or the fp16 ones widened), or None over the byte budget."""
        if self._all is not None and not SCRATCH.holds(self):
            self._all = self._maxima = None  # a later scan on this thread wrote over them: score again
        if self._all is None and len(self.queries) <= self.block:
            taken = self._take_products()
            if taken is not None:
                self._all = self._mask(taken)
                return self._all
            out = SCRATCH.take(self, len(self.queries), len(self.xb))
            self._all = (self._score(self.queries, out) if self.half is None
                         else self._mask(self.half.product(self.queries, out)))
        return self._all

    def _take_products(self) -> Any:
        """``products_of``'s held products, now this scan's (unmasked to its tokens yet), or None where it holds
        none of the same kind for the same queries and vectors."""
        import torch

        source, self._products_of = self._products_of, None
        if (source is None or source._all is None or not SCRATCH.holds(source) or source.half is not self.half
                or source.xb.data_ptr() != self.xb.data_ptr() or not torch.equal(source.queries, self.queries)):
            return None
        taken, source._all, source._maxima = source._all, None, None
        SCRATCH.owner = weakref.ref(self)
        return taken

    def scores(self, rows: np.ndarray) -> Any:
        """(len(rows), N) torch float32 scores of query rows ``rows``; -inf where a token is not allowed."""
        import torch

        if self.held() is not None:
            if len(rows) == len(self._all) and (rows == np.arange(len(rows))).all():
                return self._all  # the first round: every row, not copied
            return self._all[torch.from_numpy(np.asarray(rows, dtype=np.int64))]
        return self._score(self.queries[torch.from_numpy(np.asarray(rows, dtype=np.int64))])

    def exact(self, ids: np.ndarray, rows: np.ndarray) -> np.ndarray:
        """(m, c) float32: token ``ids[i]``'s inner product with query row ``rows[i, j]`` (ids (m,), rows (m, c); list a
        row's pairs together: each run of one row is one ``np.einsum("ij,j->i")``). Each is a float32 sum of the d
        products in the same order, so a pair has the same bits alone or among others, at any place (a BLAS product's
        bits depend on the shape it is given): a fp16 scan ranks by these, and its batch's spans are scored with them
        (``BatchScores``). Tokens are gathered ``EXACT_PAIRS`` at a time: for 12k pairs of 8 questions (two scores
        each) 6.8 ms against 8.5 all at once (medians, 2-core Xeon; sharing the pieces between two threads did not
        help). A bf16 scan's pairs are scored as the float32 scan scores them instead (``HalfVectors.exact``)."""
        xb, q = self.xb.numpy(), self.queries.numpy()
        scored = None if self.half is None else self.half.exact(xb, q, ids, rows)
        if scored is not None:
            return scored
        out = np.empty(rows.shape, np.float32)
        for a in range(0, len(ids), EXACT_PAIRS):
            x = xb[ids[a : a + EXACT_PAIRS]]
            for j in range(rows.shape[1]):
                row = rows[a : a + EXACT_PAIRS, j]
                cut = np.flatnonzero(np.r_[True, row[1:] != row[:-1], True])  # runs of one query row
                for lo, hi in zip(cut[:-1].tolist(), cut[1:].tolist(), strict=True):
                    out[a + lo : a + hi, j] = np.einsum("ij,j->i", x[lo:hi], q[row[lo]])
        return out

    def _score(self, queries: Any, out: Any = None) -> Any:
        import torch

        if out is None:
            out = torch.empty(len(queries), len(self.xb), dtype=torch.float32)
        scores_into(queries.numpy(), self.xb.numpy(), out.numpy(), xt=self.xt)  # (R, N)
        return self._mask(out)

    def _mask(self, out: Any) -> Any:
        if self.allowed is not None:
            out.masked_fill_(~self.allowed, float("-inf"))
        return out

    def top(self, rows: np.ndarray, k: int) -> np.ndarray:
        """(len(rows), k) ids of the k best allowed tokens of each query row, best first; -1 after them."""
        import torch

        rows = np.asarray(rows, dtype=np.int64)
        products = self._products()
        if products is None:
            parts = [top_ids(self.scores(rows[a : a + self.block]), k) for a in range(0, len(rows), self.block)]
            return np.concatenate(parts) if parts else np.zeros((0, k), np.int64)
        if self._maxima is None:  # the blocks' maxima of every row are found once; a round's rows not copied
            self._maxima = block_maxima(products)
        every = len(rows) == len(products) and (rows == np.arange(len(rows))).all()  # the first round
        if self.half is None:
            return top_ids(products, k, None if every else rows, self._maxima)
        return self._certified_top(rows, k, None if every else torch.from_numpy(rows))

    def _certified_top(self, rows: np.ndarray, k: int, picked: Any) -> np.ndarray:
        """``top`` from the held fp16 products: each row's ``candidates(k)`` best by them, ranked by their ``exact``
        scores where the row's certificate holds (module docstring); the other rows, or every row of a round with
        more candidates than ``EXACT_SHARE`` allows, from float32 products."""
        import torch

        n = len(self.xb)
        assert self.half is not None
        m = min(self.half.candidates(k), n)
        if len(rows) * m > EXACT_SHARE * n:
            return self._fall_back(rows, k)
        values, ids = (t.numpy() for t in top_values(self._all, min(m + 1, n), picked, self._maxima))
        cand = np.sort(ids[:, :m], axis=1)  # (r, m) ascending ids: a column's place is its id's, for top_ids's ties
        exact = self.exact(cand.reshape(-1), np.repeat(rows, m)[:, None]).reshape(len(rows), m)
        if self.allowed is not None:
            exact[~self.allowed.numpy()[cand]] = -np.inf
        cols = top_ids(torch.from_numpy(exact), k)  # (r, k) columns of cand, -1 after the allowed ones
        out = np.where(cols >= 0, np.take_along_axis(cand, np.maximum(cols, 0), axis=1), -1)
        if m < n:  # a token outside scores at most the best fp16 score outside (the (m+1)-th) + the margin
            outside = values[:, m].astype(np.float64)
            kth = np.sort(exact, axis=1)[:, m - k].astype(np.float64)
            failed = np.flatnonzero((kth <= outside + self._margin[rows]) & ~np.isneginf(outside))
            if len(failed):
                out[failed] = self._fall_back(rows[failed], k)
        return out

    def _fall_back(self, rows: np.ndarray, k: int) -> np.ndarray:
        """``top`` of query rows ``rows`` from float32 products: of those rows alone, or where the reduced vectors'
        ``exact`` has the float32 scan's bits (``as_scanned``), of every query row, as the float32 scan computes them
        (a row's bits there may depend on the rows beside it), kept for the scan's later rounds."""
        import torch

        self.fell_back = True
        if self.half is None or not self.half.as_scanned:
            return top_ids(self._score(self.queries[torch.from_numpy(rows)]), k)
        if self._float32 is None:
            self._float32 = self._score(self.queries)
        return top_ids(self._float32, k, rows)
