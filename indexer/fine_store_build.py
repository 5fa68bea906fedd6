"""Write the fine store of a build (``spanseek index build --store fp16|sq8|sq4|pqM|pca192``; ``core.fine_store`` reads
it).

The merge always writes the fp16 ``vectors.npy`` first: faiss trains and adds from full-precision vectors. A
quantised store is then trained on a sample, encoded chunk by chunk into ``fine_codes.npy`` and the fp16 file is
removed, so the finished index holds one store. With ``--factory auto`` and no ``--store`` the store follows the
corpus size (``auto_store``): fp16 for small corpora, where its disk cost does not matter, sq8 up to
``SQ8_STORE_MAX`` tokens and pca192 above (as small as sq4 and pq192, and it re-scores better: docs/scale.md).

With a token filter (``keep``) only the kept tokens' rows are written, with the row map ``fine_kept.npy``, and
the dropped tokens' start / end flags are cleared in ``token_flags.npy`` (a new file: a reindexed source's
hard-linked flags are not touched), so span completion treats them as impossible starts and ends. The filter
scores (``token_filter.npy``) are then removed: the row map records what was kept.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import numpy as np

from spanseek.core.fine_store import (
    DEFAULT_STORE,
    FINE_KEPT,
    STORES,
    VECTORS,
    FineStoreError,
    detect_kind,
    encode_rows,
    open_fine_store,
    read_quantizer,
    store_files,
    write_quantized,
    write_row_map,
)
from spanseek.core.io import atomic_path, new_memmap
from spanseek.core.phrase_index import FILTER_SCORES, TOKEN_FLAGS
from spanseek.indexer.faiss_index import AUTO, SQ8_MAX

log = logging.getLogger(__name__)

FP16_STORE_MAX = SQ8_MAX  # below this many tokens auto keeps fp16 (the factory is still IVF-SQ8 or Flat)
SQ8_STORE_MAX = 50_000_000


def auto_store(n_tokens: int) -> str:
    """The fine store ``--factory auto`` picks for ``n_tokens`` tokens (see the module docstring)."""
    if n_tokens < FP16_STORE_MAX:
        return "fp16"
    return "sq8" if n_tokens < SQ8_STORE_MAX else "pca192"


def check_store_option(store: str | None) -> None:
    """Refuse an unknown ``--store`` before any encoding."""
    if store is not None and store not in STORES:
        raise FineStoreError(f"--store must be one of {', '.join(STORES)}; got {store!r}")


def resolve_store(store: str | None, factory: str, n_tokens: int) -> str:
    """The store to write: the one asked for, else ``auto_store`` with ``--factory auto``, else fp16."""
    if store is not None:
        return store
    return auto_store(n_tokens) if factory == AUTO else DEFAULT_STORE


class KeptRows:
    """Rows ``ids`` of an (N, d) row source, as an (len(ids), d) row source (what a filtered store holds)."""

    def __init__(self, vectors: Any, ids: np.ndarray):
        self.vectors, self.ids = vectors, ids
        self.shape = (len(ids), vectors.shape[1])

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, rows: Any) -> np.ndarray:
        return np.asarray(self.vectors[self.ids[rows]])


def write_fine_store(out: Path, kind: str, sample: int = 262_144, progress: bool = False,
                     keep: np.ndarray | None = None) -> dict[str, Any]:
    """Turn ``out``'s fine store into a ``kind`` store (fp16 -> sq8 / sq4; the same kind is kept) and remove the
    other kinds' files; with ``keep`` (sorted token ids) only those tokens keep a row (module docstring).
    Returns the record kept in ``manifest.faiss_params["fine_store"]``."""
    have = detect_kind(out)
    t0 = time.perf_counter()
    if (out / FINE_KEPT).is_file():
        raise FineStoreError(f"{out} holds a filtered fine store; build from the corpus again to change it")
    n = len(open_fine_store(out, have))
    filtered = keep is not None and len(keep) < n
    if have != kind or filtered:
        if have != "fp16":
            raise FineStoreError(f"{out} holds a {have} fine store; a {kind} store cannot be derived from it "
                                 "(build from the corpus again)")
        log.info("encoding the fine store as %s%s", kind, f" ({len(keep)} of {n} tokens)" if filtered else "")
        full = open_fine_store(out, "fp16")
        source: Any = KeptRows(full, keep) if filtered else full
        if kind == "fp16":  # filtered: a new vectors.npy of the kept rows (replacing, not rewriting, the old file)
            with atomic_path(out / VECTORS) as tmp:
                mm = new_memmap(tmp, np.float16, source.shape)
                for a in range(0, len(source), 65536):
                    mm[a : a + 65536] = source[a : a + 65536]
                mm.flush()
                del mm
        else:
            write_quantized(out, kind, source, sample, progress)
        del full, source
    if filtered:
        mask = np.zeros(n, bool)
        mask[keep] = True
        flags = np.load(out / TOKEN_FLAGS, mmap_mode="r")
        with atomic_path(out / TOKEN_FLAGS) as tmp:
            mm = new_memmap(tmp, np.uint8, (n,))
            for a in range(0, n, 1 << 24):
                mm[a : a + (1 << 24)] = flags[a : a + (1 << 24)] * mask[a : a + (1 << 24)]
            mm.flush()
            del mm
        write_row_map(out, mask)
        (out / FILTER_SCORES).unlink(missing_ok=True)  # the row map says what was kept (4 B per token saved)
    rows = open_fine_store(out, kind).data
    record: dict[str, Any] = {"kind": kind, "bytes_per_token": int(rows.shape[1] * rows.itemsize)}
    if filtered:
        record.update(rows="kept", stored_tokens=len(rows))
    record["seconds"] = round(time.perf_counter() - t0, 2)
    for other in STORES:
        for name in set(store_files(other)) - set(store_files(kind)):
            (out / name).unlink(missing_ok=True)
    return record


def encode_fine_rows(index_dir: Path, vectors: Any, dest: Path) -> None:
    """Encode ``vectors`` with the quantiser of ``index_dir``'s fine store into the .npy ``dest``
    (``spanseek index add``: new rows of an existing store)."""
    quantizer = read_quantizer(index_dir, detect_kind(index_dir))
    with atomic_path(dest) as tmp:
        mm = new_memmap(tmp, np.uint8, (len(vectors), quantizer.sa_code_size()))
        encode_rows(quantizer, vectors, mm)
        mm.flush()
        del mm
