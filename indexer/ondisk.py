"""Fill an IVF index whose inverted lists live on disk (``spanseek index build --on-disk``).

The trained, empty index is saved once; the kept tokens are added block by block (``BLOCK_TOKENS`` each) to
copies of it, each block written to ``ivf_blocks/`` when complete (a killed build resumes after the last
finished block, with the same trained index); then the blocks' lists are merged into one
``index.ivfdata`` (faiss ``OnDiskInvertedLists``, as faiss contrib's ``ondisk.merge_ondisk`` does) and the
index keeps only its quantisers in memory. So the build's RAM is the training sample plus one block, not the
corpus, and a searcher memory-maps the lists, read-only, from beside ``index.faiss`` (``core.phrase_index.read_faiss``),
so the index directory can be moved, copied or mounted read-only elsewhere; the index file records the lists' bare
name, not the build's path.

Fast-scan PQ (``PQ{M}x4fs``) packs its codes in blocks that on-disk lists cannot hold: use ``PQ{M}`` (8-bit) or
SQ codes there.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import xxhash
from tqdm.auto import tqdm

from spanseek.core.faiss_spec import FactoryError, FactorySpec
from spanseek.core.integrity import IVF_BLOCKS
from spanseek.core.phrase_index import IVFDATA, c_stdout_to
from spanseek.indexer.faiss_index import add_vectors, write_faiss

log = logging.getLogger(__name__)

BLOCK_TOKENS = 1 << 20  # tokens per block: ~400 MB of SQ8 codes at d = 384
TRAINED = "trained.faiss"
KEY = "key.txt"


def check_on_disk(spec: FactorySpec) -> None:
    """Refuse a factory whose inverted lists cannot be stored on disk, naming what can."""
    if not spec.is_ivf:
        raise FactoryError(f"--on-disk needs an IVF factory (inverted lists); {spec.factory!r} has none")
    if spec.fast_scan:
        raise FactoryError(f"--on-disk cannot store fast-scan codes ({spec.factory!r}); use PQ{spec.pq_m} "
                           "(8-bit) or an SQ factory")


def blocks_key(factory: str, vectors: Any, ids: np.ndarray, n_train: int, content: str = "") -> str:
    """What the saved trained index and blocks depend on: the factory, the training size, the ids, the ``content`` key
    of the vectors where there is one (a build's: the shards it merged, so one passage changed since the blocks were
    written changes it) and a sample of the vectors (64 rows spread over the store)."""
    h = xxhash.xxh3_128(f"{factory}\0{n_train}\0{len(vectors)}\0{content}\0".encode())
    h.update(np.ascontiguousarray(ids).tobytes())
    rows = np.unique(np.linspace(0, len(vectors) - 1, 64).astype(np.int64))
    h.update(np.ascontiguousarray(vectors[rows], dtype=np.float32).tobytes())
    return h.hexdigest()


def saved_trained_index(out: Path, key: str) -> Any | None:
    """The trained index a killed on-disk build saved with the same key, else None (and stale blocks removed)."""
    import faiss

    blocks = out / IVF_BLOCKS
    try:
        if (blocks / KEY).read_text() == key and (blocks / TRAINED).is_file():
            log.info("re-using the trained index and finished blocks in %s", blocks)
            return faiss.read_index(str(blocks / TRAINED))
    except OSError:
        pass
    shutil.rmtree(blocks, ignore_errors=True)
    return None


def save_trained_index(out: Path, index: Any, key: str) -> None:
    """Keep the trained, empty index (and its key) so a killed build adds with the same quantisers."""
    blocks = out / IVF_BLOCKS
    blocks.mkdir(exist_ok=True)
    write_faiss(index, blocks / TRAINED)
    (blocks / KEY).write_text(key)


def add_on_disk(index: Any, vectors: Any, ids: np.ndarray, out: Path, progress: bool = False,
                gpu: bool | None = False, block_tokens: int | None = None) -> int:
    """Add ``vectors[ids]`` (faiss ids = ``ids``) to the trained, empty IVF ``index`` with its lists in
    ``out/index.ivfdata``; returns the number of blocks. ``save_trained_index`` must have run."""
    import faiss

    blocks = out / IVF_BLOCKS
    block_tokens = block_tokens or BLOCK_TOKENS
    names = []
    for k, a in enumerate(tqdm(range(0, len(ids), block_tokens), desc="on-disk blocks", unit="block",
                               disable=not progress)):
        path = blocks / f"block_{k:06d}.faiss"
        names.append(str(path))
        if path.is_file():  # finished before a kill
            continue
        part = faiss.read_index(str(blocks / TRAINED))
        add_vectors(part, vectors, ids[a : a + block_tokens], progress=False, gpu=gpu)
        write_faiss(part, path)
        del part
    (out / IVFDATA).unlink(missing_ok=True)  # a killed merge's
    merge_blocks(index, names, out / IVFDATA)
    return len(names)


def merge_blocks(index: Any, block_files: list[str], ivfdata: Path) -> None:
    """Merge the inverted lists of ``block_files`` (memory-mapped) into ``ivfdata`` and make them ``index``'s."""
    import faiss

    parts, lists = [], faiss.InvertedListsPtrVector()
    for name in block_files:
        part = faiss.read_index(name, faiss.IO_FLAG_MMAP)
        parts.append(part)  # the lists belong to their index, which must stay alive during the merge
        lists.push_back(faiss.extract_index_ivf(part).invlists)
    ivf = faiss.extract_index_ivf(index)
    if ivf.ntotal:
        raise ValueError("merge_blocks needs an empty trained index")
    on_disk = faiss.OnDiskInvertedLists(ivf.nlist, ivf.code_size, str(ivfdata))
    with c_stdout_to("stderr"):  # faiss reports the file's resizing there, before a command's JSON summary
        ntotal = on_disk.merge_from_multiple(lists.data(), lists.size(), False, False)
    # the index file records the lists' bare name, not this path: a reader finds them beside it wherever the
    # directory lies (``core.phrase_index.read_faiss``), and the build's path says nothing of where that is
    on_disk.filename = ivfdata.name
    ivf.replace_invlists(on_disk, True)
    on_disk.this.disown()  # owned by the index now
    ivf.ntotal = index.ntotal = ntotal
