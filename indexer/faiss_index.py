"""Choose, validate, create, train and fill the faiss index over token vectors.

``spanseek index build --factory F`` accepts any faiss factory string (inner-product metric) or ``auto``:

- ``Flat`` (exact) below ``FLAT_MAX`` vectors;
- ``IVF{nlist},SQ8`` below ``SQ8_MAX`` (1 byte per dimension: the accuracy point);
- ``OPQ{M},IVF{nlist},PQ{M}`` below ``PQ8_MAX`` and ``OPQ{M},IVF{nlist},PQ{M}x4fs`` (fast-scan, 4-bit codes)
  above it (the size points), with M = dim / 4.

nlist grows as ~4·sqrt(N) (a power of two) and is clipped so that every centroid gets at least
``MIN_POINTS_PER_CENTROID`` (39, the faiss guidance) training vectors; PQ codebooks need the same per code
(2^nbits codes per sub-quantiser). ``validate_factory`` parses nlist / M / nbits from any factory string and
raises a ``FactoryError`` naming the fix when a corpus is too small, instead of a faiss assertion. ``nprobe`` is a
search-time parameter (given per search: ``PhraseIndex.search_parameters``). Vectors are read in chunks from the memory-mapped fine store,
so memory stays bounded; training uses a sample (``training_size``). With a GPU (``faiss.get_num_gpus() > 0``)
training and adding run through ``indexer.compress_gpu`` and the index comes back to the CPU for storage.
"""

from __future__ import annotations

import logging
import math

import numpy as np
from tqdm.auto import tqdm

from spanseek.core.faiss_spec import (  # noqa: F401  (FactorySpec, parse_factory: re-exported for the indexer)
    MIN_POINTS_PER_CENTROID,
    FactoryError,
    FactorySpec,
    faiss_reason,
    ivf_of,
    parse_factory,
    unwrapped,
)
from spanseek.core.gpu import gpu_unusable_reason  # noqa: F401  (re-exported: builds and searches share the probe)
from spanseek.core.io import write_faiss  # noqa: F401  (re-exported: the indexer writes faiss files through it)
from spanseek.core.stopping import checkpoint

log = logging.getLogger(__name__)

ADD_CHUNK = 65536
MAX_POINTS_PER_CENTROID = 256  # faiss subsamples above this many anyway
FLAT_MAX = 100_000
SQ8_MAX = 5_000_000
PQ8_MAX = 50_000_000
AUTO = "auto"
OPQ_NITER = 20  # faiss default 50; the rotation changes little after ~20 alternations
OPQ_MAX_TRAIN = 32_768  # OPQ trains on at most this many of the sample's vectors


def auto_nlist(n: int) -> int:
    """A power of two near 4·sqrt(n), at most n / 39 (so k-means is well fed), between 1 and 65536."""
    target = 4 * math.sqrt(max(n, 1))
    nlist = 2 ** max(0, round(math.log2(target)))
    while nlist > 1 and nlist * MIN_POINTS_PER_CENTROID > n:
        nlist //= 2
    return int(min(nlist, 65536))


def _pq_m(dim: int) -> int:
    """dim / 4 sub-quantisers (4 dims each), or the largest even divisor of dim below it."""
    for m in range(max(2, dim // 4), 1, -1):
        if dim % m == 0 and m % 2 == 0:
            return m
    return 1


def auto_factory(n: int, dim: int, on_disk: bool = False) -> str:
    """The factory ``--factory auto`` picks for ``n`` vectors of dimension ``dim`` (see the module docstring).

    ``on_disk`` (lists in a file, ``indexer.ondisk``): IVF from 100k tokens (on-disk lists need one), 8-bit PQ
    instead of fast-scan (which on-disk lists cannot hold) and, from SQ8_MAX on, an HNSW coarse quantiser, which
    assigns tens of millions of vectors to lists far faster than a flat one.
    """
    if n < FLAT_MAX:
        return "Flat"
    nlist = auto_nlist(n)
    if n < SQ8_MAX:
        return f"IVF{nlist},SQ8"
    m = _pq_m(dim)
    if on_disk:
        return f"OPQ{m},IVF{nlist}_HNSW32,PQ{m}"
    if n < PQ8_MAX:
        return f"OPQ{m},IVF{nlist},PQ{m}"
    return f"OPQ{m},IVF{nlist},PQ{m}x4fs"


def training_size(spec: FactorySpec, n: int, max_train: int) -> int:
    """How many vectors to train on: at least ``spec.min_train``, about ``max_train``, at most n."""
    if not spec.needs_training:
        return 0
    ks = max(spec.nlist or 1, 2**spec.pq_nbits if spec.pq_m else (256 if spec.opq_m else 1), spec.pca_dim or 1)
    want = max(spec.min_train, min(max_train, MAX_POINTS_PER_CENTROID * ks))
    return int(min(n, want))


def validate_factory(factory: str, dim: int, n: int, max_train: int | None = None) -> FactorySpec:
    """Check a factory string against the dimension and the corpus size before any faiss call.

    ``n`` is the number of vectors that will be indexed (the training pool). Raises FactoryError with the fix.
    """
    if any(part.strip().startswith(("RFlat", "Refine")) for part in factory.split(",")):  # faiss's add refuses it
        raise FactoryError(f"factory {factory!r}: refinement (RFlat, Refine) is not a factory part here: a PQ index's "
                           "candidates are re-scored from the index's fine store at search time already; drop it")
    spec = parse_factory(factory)
    if spec.opq_m and (spec.opq_dim or dim) % spec.opq_m:
        raise FactoryError(f"factory {factory!r}: OPQ{spec.opq_m} needs a dimension divisible by {spec.opq_m} (dim {spec.opq_dim or dim})")
    pq_dim = spec.opq_dim or spec.pca_dim or dim
    if spec.pq_m and pq_dim % spec.pq_m:
        divisors = [m for m in range(2, pq_dim + 1) if pq_dim % m == 0]
        raise FactoryError(f"factory {factory!r}: PQ{spec.pq_m} needs M dividing the dimension {pq_dim}; try one of {divisors}")
    if spec.needs_training and n < spec.min_train:
        reasons, remedies = [], []
        if spec.nlist and n < MIN_POINTS_PER_CENTROID * spec.nlist:
            reasons.append(f"IVF{spec.nlist} needs {MIN_POINTS_PER_CENTROID} per centroid = "
                           f"{MIN_POINTS_PER_CENTROID * spec.nlist}")
            if auto_nlist(n) < spec.nlist and n >= MIN_POINTS_PER_CENTROID * auto_nlist(n):
                remedies.append(f"a smaller nlist (IVF{auto_nlist(n)})")
        bits = spec.pq_nbits if spec.pq_m else (8 if spec.opq_m else 0)
        if bits and n < MIN_POINTS_PER_CENTROID * 2**bits:
            reasons.append(f"{bits}-bit {'OPQ/' if spec.opq_m else ''}PQ codebooks need {MIN_POINTS_PER_CENTROID} "
                           f"per code = {MIN_POINTS_PER_CENTROID * 2**bits}")
            if bits > 4 and n >= MIN_POINTS_PER_CENTROID * 16 and spec.pq_m:
                remedies.append(f"4-bit codes (PQ{spec.pq_m}x4fs)")
        if spec.pca_dim and n < spec.pca_dim:
            reasons.append(f"PCA{spec.pca_dim} needs at least {spec.pca_dim} vectors")
        remedies += ["a larger corpus", f"--factory auto (-> {auto_factory(n, dim)})"]
        fixes = " and ".join(remedies[:-2])  # one for each part that is short of vectors
        raise FactoryError(f"the corpus has {n} vectors, too few to train {factory!r} ({'; '.join(reasons)}); use "
                           + (f"{fixes}, or " if fixes else "") + f"{remedies[-2]} or {remedies[-1]}")
    if max_train is not None and spec.needs_training and max_train < spec.min_train:
        raise FactoryError(f"max_train {max_train} is below the {spec.min_train} training vectors {factory!r} needs")
    return spec


def resolve_factory(factory: str, dim: int, n: int, on_disk: bool = False) -> str:
    """``auto`` -> ``auto_factory(n, dim, on_disk)``; anything else is returned unchanged."""
    return auto_factory(n, dim, on_disk) if factory == AUTO else factory


def nprobe_problem(spec: FactorySpec, nprobe: int | None) -> str | None:
    """What is wrong with ``--nprobe`` for ``spec``: it sets how many IVF lists a search probes, so a factory without
    lists has nothing to set and more than ``nlist`` lists do not exist; None when it fits (or is not given)."""
    if nprobe is None:
        return None
    if not spec.nlist:
        return f"--nprobe {nprobe} sets the IVF lists a search probes; {spec.factory!r} has none"
    if nprobe > spec.nlist:
        return f"--nprobe {nprobe} is more than the {spec.nlist} lists of {spec.factory!r} (--nprobe {spec.nlist} probes them all)"
    return None


def default_nprobe(nlist: int) -> int:
    """The nprobe stored in a new IVF index: ~3% of the lists (at least 8), a speed/recall middle ground."""
    return int(min(nlist, max(8, nlist // 32)))


FACTORY_FORMS = ("'auto' or a faiss factory string such as Flat, IVF256,SQ8 or OPQ32,IVF256,PQ32x4fs "
                 "(docs/compressed-index.md)")


def create_index(factory: str | FactorySpec, dim: int, contiguous_ids: bool):
    """A faiss index for ``factory`` (a string or its parsed spec; inner product); wrapped in IDMap2 when ids are
    not 0..n-1."""
    import faiss

    spec = factory if isinstance(factory, FactorySpec) else None
    factory = factory.factory if isinstance(factory, FactorySpec) else factory
    if factory == AUTO:
        raise FactoryError("resolve 'auto' with resolve_factory(factory, dim, n) before creating the index")
    try:
        index = faiss.index_factory(dim, factory, faiss.METRIC_INNER_PRODUCT)
    except RuntimeError as e:
        raise FactoryError(f"faiss cannot build factory {factory!r} for dim {dim} ({faiss_reason(e)}); --factory "
                           f"takes {FACTORY_FORMS}") from None
    _no_polysemous(index)
    if not contiguous_ids and not (spec or parse_factory(factory)).stores_ids:
        index = faiss.IndexIDMap2(index)
    return index


def _no_polysemous(index) -> None:
    """Switch off polysemous training of PQ codes (an annealing step that costs more than the rest of training
    and only helps Hamming-filtered search, which the phrase searcher does not use)."""
    inner = ivf_of(index)
    if inner is None:
        inner = unwrapped(index)
    if hasattr(inner, "do_polysemous_training"):
        inner.do_polysemous_training = False


def training_sample(vectors: np.ndarray, size: int, seed: int = 0, pool: np.ndarray | None = None) -> np.ndarray:
    """A sorted random sample of ``size`` rows of ``vectors`` (of the ``pool`` rows if given), as float32.

    Sorted reads suit a memory map.
    """
    rng = np.random.default_rng(seed)
    rows = np.arange(len(vectors)) if pool is None else np.asarray(pool)
    take = np.sort(rng.choice(rows, size=min(len(rows), size), replace=False))
    return np.ascontiguousarray(vectors[take], dtype=np.float32)


def use_gpu(gpu: bool | None) -> bool:
    """``None`` (auto) -> whether faiss can build on a GPU here; True when it cannot raises, naming why."""
    if gpu is False:
        return False
    reason = gpu_unusable_reason()
    if gpu and reason:
        raise FactoryError(f"a GPU build was requested but {reason}")
    if reason and gpu is None and "no GPU" not in reason:
        log.warning("building on the CPU: %s", reason)
    return reason is None


def train_index(
    index, vectors: np.ndarray, max_train: int, seed: int = 0, gpu: bool | None = False, pool: np.ndarray | None = None
) -> float:
    """Train on a random sample of at most ``max_train`` vectors (of the ``pool`` rows if given).

    No-op for indexes that need no training. ``gpu=None`` trains on a GPU when faiss has one. Returns seconds.
    """
    import time

    if index.is_trained:
        return 0.0
    sample = training_sample(vectors, max_train, seed, pool)
    log.info("training faiss index on %d vectors%s", len(sample), " (GPU)" if use_gpu(gpu) else "")
    t0 = time.perf_counter()
    opq_pqs = attach_opq_quantizers(index)
    try:
        if use_gpu(gpu):
            from spanseek.indexer.compress_gpu import train_on_gpu

            train_on_gpu(index, sample, opq_pqs)
        else:
            index.train(sample)
    finally:
        for opq in opq_matrices(index):
            opq.pq = None
    return time.perf_counter() - t0


def opq_matrices(index) -> list:
    """The OPQ transforms in front of an index (empty unless it is an IndexPreTransform with OPQ)."""
    import faiss

    if not isinstance(index, faiss.IndexPreTransform):
        return []
    chain = [faiss.downcast_VectorTransform(index.chain.at(i)) for i in range(index.chain.size())]
    return [vt for vt in chain if isinstance(vt, faiss.OPQMatrix)]


def attach_opq_quantizers(index) -> list:
    """Give each OPQ transform a PQ with the final codes' bits, OPQ_NITER iterations, OPQ_MAX_TRAIN points.

    faiss's OPQ otherwise optimises its rotation for an 8-bit PQ with 50 iterations, which took far longer than
    the rest of training for 4-bit fast-scan codes it is not used with. Returns the PQs (the caller keeps them
    referenced while training: faiss holds a raw pointer) and the caller detaches them afterwards.
    """
    import faiss

    inner = ivf_of(index)
    nbits = int(inner.pq.nbits) if inner is not None and hasattr(inner, "pq") else 8
    pqs = []
    for opq in opq_matrices(index):
        pq = faiss.ProductQuantizer(opq.d_out, opq.M, nbits)
        opq.pq = pq
        opq.niter = OPQ_NITER
        opq.max_train_points = OPQ_MAX_TRAIN
        pqs.append(pq)
    return pqs


def accepts_ids(index) -> bool:
    """Whether the index stores explicit ids (IDMap, IVF); a plain index numbers vectors 0..n-1 itself."""
    import faiss

    return isinstance(index, (faiss.IndexIDMap, faiss.IndexIDMap2)) or ivf_of(index) is not None


def add_vectors(
    index, vectors: np.ndarray, ids: np.ndarray, progress: bool = True, gpu: bool | None = False, id_offset: int = 0
) -> None:
    """Add vectors[ids - id_offset] to the index in chunks of ADD_CHUNK, with faiss ids = token ids.

    ``id_offset`` is the token id of ``vectors[0]`` (an incremental add passes only the new vectors).
    ``gpu=None`` assigns vectors to inverted lists on a GPU when faiss has one (the codes stay on the CPU).
    """
    with_ids = accepts_ids(index)
    if not with_ids and not np.array_equal(ids, np.arange(index.ntotal, index.ntotal + len(ids))):
        raise ValueError("this index numbers vectors itself; wrap it in IDMap2 to add arbitrary token ids")
    if use_gpu(gpu):
        from spanseek.indexer.compress_gpu import gpu_quantizer

        ctx = gpu_quantizer(index)
    else:
        import contextlib

        ctx = contextlib.nullcontext()
    with ctx:
        for a in tqdm(range(0, len(ids), ADD_CHUNK), desc="faiss add", unit="chunk", disable=not progress):
            checkpoint()
            chunk = ids[a : a + ADD_CHUNK]
            x = np.ascontiguousarray(vectors[chunk - id_offset], dtype=np.float32)
            if with_ids:
                index.add_with_ids(x, chunk.astype(np.int64))
            else:
                index.add(x)
