"""Search on a CUDA GPU: the token index (or its coarse quantiser) in GPU memory, and the fine vectors there too.

``place(index, device)`` decides what a ``Searcher`` keeps on the GPU, within ``MEMORY_SHARE`` of the memory free
when the index is opened, and copies it there (``OnDevice``):

- **the whole token index** when faiss can clone it (Flat, IVF-Flat, IVF-SQ, IVF-PQ with 8-bit codes; an OPQ
  rotation stays a CPU pre-transform in front of it). Its results are the CPU index's up to float rounding and the
  order of exact ties.
- **the coarse quantiser** of an IVF index faiss cannot clone (fast-scan PQ, on-disk lists that do not fit): its
  centroids go to a GPU flat index, which picks the lists, and the CPU scans them (``search_preassigned``), as
  DensePhrases does. An HNSW coarse quantiser becomes an exact one there, so a question may probe slightly
  different (nearer) lists than on the CPU.
- **the fine vectors** (fp16; compressed stores decoded once) that span completion and refining score: one
  gather and product on the GPU per question instead of page-cache reads and a CPU product.

What does not fit stays on the CPU, with a warning naming the sizes. A search the GPU cannot serve goes to the CPU
index: one with a token selector (deleted documents or a filter: faiss's GPU indexes ignore selectors), or one asking
for more than ``GPU_MAX_K`` neighbours or lists (faiss's GPU k-selection limit).

``gpu_unusable_reason`` probes, once per process and in a child process, whether faiss can run on the GPU at all:
a build without kernels for the card aborts the process on first use instead of raising.
"""

from __future__ import annotations

import functools
import logging
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from spanseek.core.faiss_spec import ivf_of

log = logging.getLogger(__name__)

GPU_MAX_K = 2048  # faiss GPU indexes select at most this many neighbours (k) or lists (nprobe)
MEMORY_SHARE = 0.8  # of the GPU memory free at load, the most the index and the vectors may take
CHUNK_ROWS = 1 << 20  # fine-store rows decoded and copied to the GPU at a time

IndexPlace = Literal["index", "quantizer", "cpu"]

# A GPU flat search in a child process: a faiss GPU build without kernels for the card (e.g. the PyPI
# faiss-gpu-cu12 wheels, which stop at compute capability 8.9, on Hopper) aborts the process on first use
# instead of raising.
_GPU_PROBE = (
    "import faiss, numpy as np\n"
    "index = faiss.GpuIndexFlatIP(faiss.StandardGpuResources(), 8)\n"
    "x = np.eye(8, dtype='float32')\n"
    "index.add(x)\n"
    "assert (index.search(x, 1)[1].ravel() == np.arange(8)).all()\n"
)


@functools.cache
def gpu_unusable_reason() -> str | None:
    """Why faiss cannot run on a GPU here (no GPU build, no GPU, or no kernels for the card), or None."""
    import faiss

    if not hasattr(faiss, "get_num_gpus") or faiss.get_num_gpus() == 0:
        return "faiss sees no GPU (install the `gpu` extra on a CUDA host)"
    try:
        probe = subprocess.run([sys.executable, "-c", _GPU_PROBE], capture_output=True, text=True, timeout=300)
    except subprocess.TimeoutExpired:
        return "a GPU flat search did not finish in 300 s"
    if probe.returncode != 0:
        detail = (probe.stderr.strip().splitlines() or [f"exit code {probe.returncode}"])[-1]
        return ("faiss sees a GPU but cannot run on it; a faiss build with kernels for this card is needed "
                f"(PyPI faiss-gpu>=1.15.1 covers 7.0-9.0, faiss-gpu-cu12 only 7.0-8.9): {detail[-300:]}")
    return None


# --- what goes where -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Placement:
    """What ``place`` puts on the GPU: ``index`` (the token index, its coarse quantiser, or neither) and whether
    the fine ``vectors`` go too; ``notes`` say why anything stays on the CPU."""

    index: IndexPlace
    vectors: bool
    notes: tuple[str, ...] = ()


def plan(index_bytes: int | None, quantizer_bytes: int | None, vector_bytes: int, free: int,
         share: float = MEMORY_SHARE) -> Placement:
    """Fit the token index, else its coarse quantiser, then the fine vectors, into ``share`` of ``free`` bytes.

    ``index_bytes`` None: faiss cannot clone this index type; ``quantizer_bytes`` None: it has no coarse quantiser.
    The index comes first (it is what a search scans); the vectors take what is left.
    """
    budget, notes = int(free * share), []
    place: IndexPlace = "cpu"
    if index_bytes is not None and index_bytes <= budget:
        place = "index"
    else:
        if index_bytes is not None:
            notes.append(f"the token index ({gib(index_bytes)}) does not fit in {gib(budget)} of GPU memory")
        if quantizer_bytes is not None and quantizer_bytes <= budget:
            place = "quantizer"
        elif quantizer_bytes is not None:
            notes.append(f"its coarse quantiser ({gib(quantizer_bytes)}) does not fit either")
    left = budget - {"index": index_bytes or 0, "quantizer": quantizer_bytes or 0, "cpu": 0}[place]
    vectors = vector_bytes <= left
    if not vectors:
        notes.append(f"the fine vectors ({gib(vector_bytes)}) do not fit in the {gib(max(left, 0))} left")
    return Placement(place, vectors, tuple(notes))


def gib(n: int) -> str:
    return f"{n / 2**30:.2f} GiB"


def gpu_index_bytes(faiss_index: Any) -> int | None:
    """GPU memory a faiss GPU clone of ``faiss_index`` takes (codes, 8-byte ids, centroids), or None when faiss
    cannot clone its type (fast-scan PQ, HNSW, PQ with other than 8-bit codes)."""
    import faiss

    inner = faiss.downcast_index(faiss_index)
    while isinstance(inner, faiss.IndexPreTransform | faiss.IndexIDMap | faiss.IndexIDMap2):
        inner = faiss.downcast_index(inner.index)  # the wrappers stay on the CPU
    if isinstance(inner, faiss.IndexFlat):
        return int(inner.ntotal) * inner.d * 4
    ivf = ivf_of(faiss_index)
    clonable = (faiss.IndexIVFFlat, faiss.IndexIVFScalarQuantizer, faiss.IndexIVFPQ)
    if ivf is None or not isinstance(ivf, clonable) or isinstance(ivf, faiss.IndexIVFPQR):
        return None
    if isinstance(ivf, faiss.IndexIVFPQ) and ivf.pq.nbits != 8:
        return None
    return int(ivf.ntotal) * (int(ivf.code_size) + 8) + int(ivf.nlist) * ivf.d * 4


def quantizer_bytes(faiss_index: Any) -> int | None:
    """GPU memory of a flat copy of the index's coarse quantiser (its centroids), or None without one."""
    ivf = ivf_of(faiss_index)
    return None if ivf is None else int(ivf.nlist) * ivf.d * 4


def vector_bytes(store: Any) -> int:
    """GPU memory of a fine store held as fp16 rows (plus the token -> row table of a filtered store)."""
    n, d = store.shape
    rows = store.row_map.stored if store.row_map is not None else n
    return (rows + 1) * d * 2 + (4 * n if store.row_map is not None else 0)


# --- the parts on the device ---------------------------------------------------------------------------------


class DeviceVectors:
    """A fine store's rows held on a torch device as fp16 (compressed stores decoded once), scored there.

    ``scores(ids, queries)`` equals ``store[ids] @ queries`` for an fp16 store (both widen fp16 to float32 before
    the product); a compressed store's decoded rows are rounded to fp16 once. A token without a row (a filtered
    store) scores 0, as its zero vector does on the CPU.
    """

    def __init__(self, store: Any, device: Any):
        import torch

        self.device = torch.device(device)
        n, d = store.shape
        row_map = store.row_map
        stored = row_map.stored if row_map is not None else n
        self.rows = torch.zeros((stored + 1, d), dtype=torch.float16, device=self.device)  # the last row: zeros
        for lo in range(0, stored, CHUNK_ROWS):
            hi = min(stored, lo + CHUNK_ROWS)
            chunk = np.array(store.stored_rows(lo, hi), dtype=np.float16)  # a writable copy for torch
            self.rows[lo:hi] = torch.from_numpy(chunk).to(self.device)
        self.row_of = None  # token id -> row (stored: the zero row), only for a filtered store
        if row_map is not None:
            self.row_of = torch.from_numpy(row_map.rows(missing=stored).astype(np.int32)).to(self.device)

    def scores(self, ids: np.ndarray, queries: np.ndarray) -> np.ndarray:
        """(len(ids), q) float32: each token's vector dot each column of ``queries`` (d, q)."""
        import torch

        idx = torch.from_numpy(np.ascontiguousarray(ids, dtype=np.int64)).to(self.device)
        if self.row_of is not None:
            idx = self.row_of.index_select(0, idx)
        q = torch.from_numpy(np.ascontiguousarray(queries, dtype=np.float32)).to(self.device)
        return (self.rows.index_select(0, idx).float() @ q).cpu().numpy()


class DeviceIndex:
    """The token index searched with part of it on the GPU: ``index`` (a faiss GPU clone) or ``quantizer`` (the
    coarse centroids in a flat index; the CPU scans the lists it picks). ``search`` returns None for a search the
    GPU cannot serve; the caller then searches the CPU index.

    ``gpu`` None builds the quantiser part on the CPU: the same code path with an exact CPU coarse quantiser
    (what the tests check it against).
    """

    def __init__(self, cpu_index: Any, place: IndexPlace, gpu: int | None, default_nprobe: int | None):
        import faiss

        if place == "cpu":
            raise ValueError("a DeviceIndex holds the index or its quantiser")
        self.place = place
        self.cpu = cpu_index
        self.default_nprobe = default_nprobe or 1
        ivf = ivf_of(cpu_index)
        self.nlist = int(ivf.nlist) if ivf is not None else 1  # nprobe beyond it means every list
        self.lock = threading.Lock()  # faiss GPU resources serve one search at a time
        self.res: Any = None  # the GPU indexes' resources (kept referenced)
        if gpu is not None:
            self.res = faiss.StandardGpuResources()
        self.notes: list[str] = []
        if place == "index":
            assert gpu is not None, "a whole-index copy needs a GPU"
            self.gpu = self._clone(cpu_index, gpu)
            return
        if ivf is None:
            raise ValueError("only an IVF index has a coarse quantiser to move")
        inner = faiss.downcast_index(cpu_index)
        if isinstance(inner, faiss.IndexPreTransform):
            inner = faiss.downcast_index(inner.index)
        if not isinstance(inner, faiss.IndexIVF):  # an id map would translate the ids the lists return
            raise ValueError(f"the lists of a {type(inner).__name__} are not scanned directly")
        self.ivf = ivf
        self.chain = _pre_transforms(cpu_index)
        centroids = ivf.quantizer.reconstruct_n(0, ivf.nlist)
        flat = faiss.IndexFlat(ivf.d, ivf.quantizer.metric_type)
        flat.add(centroids)
        self.quantizer: Any = flat
        if gpu is not None:
            self.quantizer = faiss.index_cpu_to_gpu(self.res, gpu, flat)

    def _clone(self, cpu_index: Any, gpu: int) -> Any:
        import faiss

        try:
            return faiss.index_cpu_to_gpu(self.res, gpu, cpu_index)
        except RuntimeError as e:  # IVF-PQ with many sub-quantisers needs fp16 lookup tables on the GPU
            options = faiss.GpuClonerOptions()
            options.useFloat16 = True
            clone = faiss.index_cpu_to_gpu(self.res, gpu, cpu_index, options)
            self.notes.append(f"fp16 lookup tables ({str(e).splitlines()[0][:120]})")
            return clone

    def search(self, queries: np.ndarray, k: int, nprobe: int | None, selector: Any = None) -> np.ndarray | None:
        """(n, k) ids of the best tokens, or None when the GPU cannot serve this search."""
        nprobe = min(int(nprobe or self.default_nprobe), self.nlist)
        if nprobe > GPU_MAX_K:
            return None
        if self.place == "index":
            if selector is not None or k > GPU_MAX_K:
                return None
            with self.lock:
                return self.gpu.search(queries, k, params=gpu_search_parameters(self.gpu, nprobe))[1]
        from faiss import swig_ptr

        from spanseek.core.phrase_index import faiss_search_parameters

        x = np.ascontiguousarray(queries, dtype=np.float32)
        for transform in self.chain:
            x = transform.apply(x)
        with self.lock:
            coarse_d, coarse_i = self.quantizer.search(x, nprobe)
        # faiss's Python wrapper of search_preassigned takes no parameters (nprobe, selector): call the C++ one
        params = faiss_search_parameters(self.ivf, nprobe, selector)
        dist = np.empty((len(x), k), dtype=np.float32)
        ids = np.empty((len(x), k), dtype=np.int64)
        self.ivf.search_preassigned_c(len(x), swig_ptr(x), k, swig_ptr(coarse_i), swig_ptr(coarse_d), swig_ptr(dist),
                                      swig_ptr(ids), False, params)
        return ids


def _pre_transforms(index: Any) -> list[Any]:
    """The vector transforms in front of an index's IVF part (an OPQ rotation), in order."""
    import faiss

    index = faiss.downcast_index(index)
    if isinstance(index, faiss.IndexPreTransform):
        chain: Any = index.chain  # a SWIG vector (faiss's stubs call it a list)
        return [faiss.downcast_VectorTransform(chain.at(i)) for i in range(chain.size())]
    return []


def gpu_search_parameters(gpu_index: Any, nprobe: int) -> Any:
    """Per-call parameters for a faiss GPU clone: nprobe for a GPU IVF index (behind its CPU pre-transform)."""
    import faiss

    gpu_index = faiss.downcast_index(gpu_index)
    params: Any
    if isinstance(gpu_index, faiss.IndexPreTransform):
        inner = gpu_search_parameters(gpu_index.index, nprobe)
        if inner is None:
            return None
        params = faiss.SearchParametersPreTransform()
        params.index_params = inner
        params.referenced_objects = [inner]
        return params
    if isinstance(gpu_index, faiss.GpuIndexIVF):
        params = faiss.SearchParametersIVF()
        params.nprobe = nprobe
        return params
    return None


@dataclass
class OnDevice:
    """What a Searcher keeps on the GPU (either part may be None) and why the rest stayed on the CPU."""

    device: str
    index: DeviceIndex | None = None
    vectors: DeviceVectors | None = None
    notes: list[str] = field(default_factory=list)

    def release(self) -> None:
        """Give the GPU memory back (a reload's new index takes it): searches from now on run on the CPU; one in
        flight finishes on the parts it holds."""
        self.index, self.vectors = None, None
        self.notes.append("released: searching on the CPU")
        import gc

        import torch

        gc.collect()  # faiss frees its GPU memory when the last reference to its index goes
        if torch.cuda.is_available():
            torch.cuda.empty_cache()  # torch's cached blocks, so faiss can allocate them

    def describe(self) -> dict[str, Any]:
        """For /info and the logs: the device, what of the token index is on it (``index``, ``quantizer`` or
        ``cpu``: none), where the fine vectors are scored, and why anything stayed on the CPU."""
        return {"device": self.device, "index": self.index.place if self.index is not None else "cpu",
                "vectors": self.device if self.vectors is not None else "cpu", "notes": list(self.notes)}


def place(phrase_index: Any, device: str, share: float = MEMORY_SHARE) -> OnDevice | None:
    """Put what fits of ``phrase_index`` (a core.phrase_index.PhraseIndex) on the CUDA device ``device`` (``cuda``,
    ``cuda:N``); None for another device, and a ValueError naming the GPUs this machine has when it lacks ``device``
    (``core.encoding.pick_device``: a GPU asked for is never replaced by the CPU unsaid)."""
    import torch

    from spanseek.core.encoding import pick_device

    dev = pick_device(device, "search_device")
    if dev.type != "cuda":
        return None
    gpu = dev.index if dev.index is not None else torch.cuda.current_device()
    reason = gpu_unusable_reason()
    free = int(torch.cuda.mem_get_info(gpu)[0])
    faiss_index = phrase_index.faiss
    if reason is not None:  # torch can still hold and score the vectors
        log.warning("the token index is searched on the CPU: %s", reason)
        fit = plan(None, None, vector_bytes(phrase_index.vectors), free, share)
    else:
        fit = plan(gpu_index_bytes(faiss_index), quantizer_bytes(faiss_index), vector_bytes(phrase_index.vectors),
                   free, share)
    on = OnDevice(f"cuda:{gpu}", notes=list(fit.notes))
    if fit.index != "cpu":
        try:
            on.index = DeviceIndex(faiss_index, fit.index, gpu, phrase_index.default_nprobe)
            on.notes += on.index.notes
        except (RuntimeError, ValueError) as e:  # a type faiss cannot clone after all: try the quantiser alone
            on.notes.append(f"faiss could not move the {fit.index}: {str(e).splitlines()[0][:200]}")
            if fit.index == "index" and quantizer_bytes(faiss_index) is not None:
                on.index = DeviceIndex(faiss_index, "quantizer", gpu, phrase_index.default_nprobe)
    if fit.vectors:
        on.vectors = DeviceVectors(phrase_index.vectors, on.device)
    for note in on.notes:
        log.warning("search on %s: %s", on.device, note)
    log.info("search on %s: %s", on.device, on.describe())
    return on
