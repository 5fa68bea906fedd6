"""Write the fine store of a build (``spanseek index build --store fp16|sq8|sq4``; ``core.finestore`` reads it).

The merge always writes the fp16 ``vectors.npy`` first: faiss trains and adds from full-precision vectors. A
quantised store is then trained on a sample, encoded chunk by chunk into ``fine_codes.npy`` and the fp16 file is
removed, so the finished index holds one store. With ``--factory auto`` and no ``--store`` the store follows the
corpus size (``auto_store``): fp16 for small corpora, where its disk cost does not matter, sq8 up to
``SQ8_STORE_MAX`` tokens and sq4 above.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import numpy as np

from spanseek.core.finestore import (
    DEFAULT_STORE,
    FINE_QUANTIZER,
    STORES,
    FineStoreError,
    detect_kind,
    encode_rows,
    open_fine_store,
    store_files,
    write_quantized,
)
from spanseek.core.io import atomic_path
from spanseek.indexer.faiss_index import AUTO, SQ8_MAX

log = logging.getLogger(__name__)

FP16_STORE_MAX = SQ8_MAX  # below this many tokens auto keeps fp16 (the factory is still IVF-SQ8 or Flat)
SQ8_STORE_MAX = 50_000_000


def auto_store(n_tokens: int) -> str:
    """The fine store ``--factory auto`` picks for ``n_tokens`` tokens (see the module docstring)."""
    if n_tokens < FP16_STORE_MAX:
        return "fp16"
    return "sq8" if n_tokens < SQ8_STORE_MAX else "sq4"


def check_store_option(store: str | None) -> None:
    """Refuse an unknown ``--store`` before any encoding."""
    if store is not None and store not in STORES:
        raise FineStoreError(f"--store must be one of {', '.join(STORES)}; got {store!r}")


def resolve_store(store: str | None, factory: str, n_tokens: int) -> str:
    """The store to write: the one asked for, else ``auto_store`` with ``--factory auto``, else fp16."""
    if store is not None:
        return store
    return auto_store(n_tokens) if factory == AUTO else DEFAULT_STORE


def write_fine_store(out: Path, kind: str, sample: int = 262_144, progress: bool = False) -> dict[str, Any]:
    """Turn ``out``'s fine store into a ``kind`` store (fp16 -> sq8 / sq4; the same kind is kept) and remove the
    other kinds' files. Returns the record kept in ``manifest.faiss_params["fine_store"]``."""
    have = detect_kind(out)
    t0 = time.perf_counter()
    if have != kind:
        if have != "fp16":
            raise FineStoreError(f"{out} holds a {have} fine store; a {kind} store cannot be derived from it "
                                 "(build from the corpus again)")
        log.info("encoding the fine store as %s", kind)
        write_quantized(out, kind, open_fine_store(out, "fp16"), sample, progress)
    rows = open_fine_store(out, kind).data
    record: dict[str, Any] = {"kind": kind, "bytes_per_token": int(rows.shape[1] * rows.itemsize)}
    record["seconds"] = round(time.perf_counter() - t0, 2)
    for other in STORES:
        for name in set(store_files(other)) - set(store_files(kind)):
            (out / name).unlink(missing_ok=True)
    return record


def encode_fine_rows(index_dir: Path, vectors: Any, dest: Path) -> None:
    """Encode ``vectors`` with the sq8 / sq4 quantiser of ``index_dir``'s fine store into the .npy ``dest``
    (``spanseek index add``: new rows of an existing store)."""
    import faiss

    quantizer = faiss.read_index(str(index_dir / FINE_QUANTIZER))
    with atomic_path(dest) as tmp:
        mm = np.lib.format.open_memmap(tmp, mode="w+", dtype=np.uint8, shape=(len(vectors), quantizer.sa_code_size()))
        encode_rows(quantizer, vectors, mm)
        mm.flush()
        del mm
