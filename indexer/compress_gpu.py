"""GPU training and adding for compressed faiss indexes (faiss GPU build: the `gpu` extra, faiss-gpu-cu12).

Used by ``indexer.faiss_index.train_index`` / ``add_vectors`` when ``faiss.get_num_gpus() > 0``. The index itself
stays a CPU index, so the stored format is identical to a CPU build; only the heavy k-means steps run on the GPU:

- the IVF coarse quantiser's k-means (``IndexIVF.clustering_index`` = a GPU flat index);
- the PQ codebooks' k-means (``ProductQuantizer.assign_index``), for IVF-PQ, IVF-PQ fast-scan and OPQ's inner PQ;
- at add time, the assignment of vectors to inverted lists and their residuals (the coarse quantiser is swapped
  for a GPU copy while adding, then put back).

faiss does not take ownership of these GPU helpers, so they are kept referenced here and detached afterwards.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator

import numpy as np

log = logging.getLogger(__name__)


def _ivf(index):
    import faiss

    try:
        return faiss.downcast_index(faiss.extract_index_ivf(index))
    except RuntimeError:
        return None


def _opq_matrices(index) -> list:
    import faiss

    if not isinstance(index, faiss.IndexPreTransform):
        return []
    chain = [faiss.downcast_VectorTransform(index.chain.at(i)) for i in range(index.chain.size())]
    return [vt for vt in chain if isinstance(vt, faiss.OPQMatrix)]


def train_on_gpu(index, sample: np.ndarray, device: int = 0) -> None:
    """Train ``index`` (a CPU index) on ``sample`` with its k-means steps on GPU ``device``."""
    import faiss

    res = faiss.StandardGpuResources()
    keep = []  # GPU helpers referenced until training ends (faiss holds raw pointers)

    def gpu_flat(d: int):
        g = faiss.index_cpu_to_gpu(res, device, faiss.IndexFlatL2(d))
        keep.append(g)
        return g

    ivf = _ivf(index)
    pqs = []
    if ivf is not None:
        ivf.clustering_index = gpu_flat(ivf.d)
        if getattr(ivf, "pq", None) is not None:
            pqs.append(ivf.pq)
    for opq in _opq_matrices(index):
        opq_pq = faiss.ProductQuantizer(opq.d_out, opq.M, 8)
        keep.append(opq_pq)
        opq.pq = opq_pq
        pqs.append(opq_pq)
    for pq in pqs:
        pq.assign_index = gpu_flat(pq.dsub)
    try:
        index.train(sample)
    finally:
        if ivf is not None:
            ivf.clustering_index = None
        for pq in pqs:
            pq.assign_index = None
        for opq in _opq_matrices(index):
            opq.pq = None
    log.info("trained %s on GPU %d", type(index).__name__, device)


@contextlib.contextmanager
def gpu_quantizer(index, device: int = 0) -> Iterator[None]:
    """While open, ``index``'s IVF coarse quantiser is a GPU copy (fast list assignment for ``add``)."""
    import faiss

    ivf = _ivf(index)
    if ivf is None:
        yield
        return
    res = faiss.StandardGpuResources()
    cpu_quantizer = ivf.quantizer
    gpu_q = faiss.index_cpu_to_gpu(res, device, cpu_quantizer)
    ivf.quantizer = gpu_q
    try:
        yield
    finally:
        ivf.quantizer = cpu_quantizer
        del gpu_q
