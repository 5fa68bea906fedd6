"""Compressed-index stores written next to the faiss index: the codes store and the token filter.

- ``codes.npy`` (N, code_size) uint8: every token's faiss code (``index.sa_encode``) in token-id order, written
  for compressed (IVF / SQ / PQ / OPQ) indexes. ``PhraseIndex.code_vectors`` decodes consecutive ids with the
  index's ``sa_decode`` in one batched call, which an IVF index cannot do from its inverted lists without a
  direct map. Every token gets a code, also tokens the filter kept out of faiss (span completion needs them).
- ``token_filter.npy`` (N, 2) float16: start/end filter probabilities, computed at encode time for models with
  a filter head; ``kept_token_ids`` applies a threshold (a token is indexed if either probability is >= T).

Used by ``indexer.build`` and ``indexer.add``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from spanseek.core.faiss_spec import unmapped
from spanseek.core.io import atomic_path, new_memmap
from spanseek.core.text import FLAG_END, FLAG_START
from spanseek.indexer.faiss_index import ADD_CHUNK


def encode_into(out: np.ndarray, index, vectors: np.ndarray, start: int = 0, progress: bool = False) -> None:
    """Write ``index.sa_encode(vectors)`` into ``out[start : start + len(vectors)]`` chunk by chunk."""
    for a in tqdm(range(0, len(vectors), ADD_CHUNK), desc="codes", unit="chunk", disable=not progress):
        x = np.ascontiguousarray(vectors[a : a + ADD_CHUNK], dtype=np.float32)
        out[start + a : start + a + len(x)] = index.sa_encode(x)


def write_codes(index, vectors: np.ndarray, path: str | Path, old_codes: np.ndarray | None = None,
                progress: bool = False) -> int:
    """Write the codes store atomically: ``old_codes`` (if any) followed by the codes of ``vectors``.

    Returns the code size in bytes per token. An index behind an id map encodes through the index it wraps.
    """
    index = unmapped(index)
    code_size = int(index.sa_code_size())
    n_old = 0 if old_codes is None else len(old_codes)
    with atomic_path(path) as tmp:
        mm = new_memmap(tmp, np.uint8, (n_old + len(vectors), code_size))
        if old_codes is not None:
            mm[:n_old] = old_codes
        encode_into(mm, index, vectors, n_old, progress)
        mm.flush()
        del mm
    return code_size


def filter_probabilities(model, vectors: np.ndarray, flags: np.ndarray) -> np.ndarray:
    """(n, d) token vectors and their (n,) flags -> (n, 2) float16 start/end filter probabilities (sigmoid of the
    filter head). A token that cannot start (end) a phrase gets start (end) probability 0, so no threshold keeps
    it for a role it cannot play (a middle word piece has neither)."""
    import torch

    device = next(model.parameters()).device
    with torch.no_grad():
        logits = model.filter_logits(torch.from_numpy(np.ascontiguousarray(vectors, dtype=np.float32)).to(device))
    probs = torch.sigmoid(logits.float()).cpu().numpy()
    flags = np.asarray(flags)
    probs[:, 0] *= (flags & FLAG_START) > 0
    probs[:, 1] *= (flags & FLAG_END) > 0
    return probs.astype(np.float16)


def kept_token_ids(filter_scores: np.ndarray | None, threshold: float | None, n: int, offset: int = 0) -> np.ndarray:
    """Token ids to index: those whose start or end probability is >= threshold (all n without a filter)."""
    if filter_scores is None or threshold is None:
        return np.arange(offset, offset + n, dtype=np.int64)
    keep = (np.asarray(filter_scores, dtype=np.float32) >= threshold).any(axis=1)
    return np.flatnonzero(keep).astype(np.int64) + offset
