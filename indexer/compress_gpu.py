"""GPU training and adding for compressed faiss indexes (faiss GPU build: the `gpu` extra, faiss-gpu).

Used by ``indexer.faiss_index.train_index`` / ``add_vectors`` when ``faiss.get_num_gpus() > 0``. The index itself
stays a CPU index, so the stored format is identical to a CPU build; only the heavy k-means steps run on the GPU:

- the IVF coarse quantiser's k-means (``IndexIVF.clustering_index`` = a GPU flat index);
- the PQ codebooks' k-means (``ProductQuantizer.assign_index``), for IVF-PQ, IVF-PQ fast-scan and OPQ's PQ;
- at add time, the assignment of vectors to inverted lists and their residuals (the coarse quantiser is swapped
  for a GPU copy while adding, then put back).

faiss does not take ownership of these GPU helpers, so they are kept referenced here and detached afterwards.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator

import numpy as np

from spanseek.core.faiss_spec import ivf_of

log = logging.getLogger(__name__)


def train_on_gpu(index, sample: np.ndarray, opq_pqs: list = (), device: int = 0) -> None:
    """Train ``index`` (a CPU index) on ``sample`` with its k-means steps on GPU ``device``.

    ``opq_pqs``: the PQs attached to the index's OPQ transforms (``faiss_index.attach_opq_quantizers``).
    """
    import faiss

    res = faiss.StandardGpuResources()
    keep = []  # GPU helpers referenced until training ends (faiss holds raw pointers)

    def gpu_flat(d: int):
        g = faiss.index_cpu_to_gpu(res, device, faiss.IndexFlatL2(d))
        keep.append(g)
        return g

    ivf = ivf_of(index)
    pqs = []
    if ivf is not None:
        ivf.clustering_index = gpu_flat(ivf.d)
        if getattr(ivf, "pq", None) is not None:
            pqs.append(ivf.pq)
    pqs += list(opq_pqs)
    for pq in pqs:
        pq.assign_index = gpu_flat(pq.dsub)
    try:
        index.train(sample)
    finally:
        if ivf is not None:
            ivf.clustering_index = None
        for pq in pqs:
            pq.assign_index = None
    log.info("trained %s on GPU %d", type(index).__name__, device)


@contextlib.contextmanager
def gpu_quantizer(index, device: int = 0) -> Iterator[None]:
    """While open, ``index``'s IVF coarse quantiser is a GPU copy (fast list assignment for ``add``)."""
    import faiss

    ivf = ivf_of(index)
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
