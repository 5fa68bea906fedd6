"""Verify a built index: manifest, counts and maps, recall of its faiss index vs exact search, bytes per token.

    spanseek index verify INDEX_DIR [--sample 1000] [--nprobe N]

The lexical (BM25) part, when present, must rank a sample of passage-text queries as a fresh BM25 of the passage
store does; an index without one is reported as such (it serves dense search).

Recall uses a sample of the index's own (fine, fp16) token vectors as queries: the exact top-k is a brute-force
inner-product search over the fine vectors of the indexed tokens; recall@1 is the share of queries whose
compressed top-1 is the exact top-1, recall@10 the mean overlap of the two top-10 lists.

``memory_per_token`` reports what a searcher holds in RAM (the faiss index, the in-RAM token maps and the
passage store) and what stays on disk behind memory maps (fine store, codes, character offsets), per token.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np

from spanseek.core import store
from spanseek.core.store import IndexFormatError, PhraseIndex
from spanseek.indexer.compress import kept_token_ids
from spanseek.indexer.lexical import check_lexical
from spanseek.indexer.lexical import describe as describe_lexical

log = logging.getLogger(__name__)

EXACT_CHUNK = 65536


def _file_bytes(path: Path) -> int:
    return path.stat().st_size if path.is_file() else 0


def memory_per_token(index: PhraseIndex) -> dict[str, Any]:
    """Bytes per token a Searcher over ``index`` holds in RAM, maps from disk, and the index's disk total.

    RAM: faiss index (its serialised size, which is its in-memory size up to small headers), arrays loaded into
    memory (not memory-mapped), the passage and document stores (their JSONL size; Python objects add more),
    and the Searcher's passage -> document array. Mapped: memory-mapped files (page cache, read on demand).
    """
    n = max(1, index.num_tokens)
    d = index.dir
    ram = {"faiss": _file_bytes(d / store.FAISS_INDEX)}
    mapped = {}
    arrays = {
        store.VECTORS: index.vectors, store.TOKEN_PASSAGE: index.token_passage, store.TOKEN_OFFSETS: index.token_offsets,
        store.TOKEN_FLAGS: index.token_flags, store.PASSAGE_TOKENS: index.passage_tokens,
    }
    if index.codes is not None:
        arrays[store.CODES] = index.codes
    for name, arr in arrays.items():
        (mapped if isinstance(arr, np.memmap) else ram)[name] = int(arr.nbytes)
    ram["passages+docs"] = _file_bytes(d / store.PASSAGES) + _file_bytes(d / store.DOCS)
    ram["searcher"] = 8 * len(index.passages)
    disk = sum(_file_bytes(p) for p in d.iterdir())
    return {
        "ram_bytes_per_token": round(sum(ram.values()) / n, 2),
        "ram_breakdown": {k: round(v / n, 2) for k, v in ram.items()},
        "mapped_bytes_per_token": round(sum(mapped.values()) / n, 2),
        "mapped_breakdown": {k: round(v / n, 2) for k, v in mapped.items()},
        "disk_bytes_per_token": round(disk / n, 2),
    }


def exact_topk(vectors: np.ndarray, ids: np.ndarray, queries: np.ndarray, k: int) -> np.ndarray:
    """Brute-force inner-product top-k token ids among ``ids`` (rows of ``vectors``), chunk by chunk."""
    import faiss

    best_d = np.full((len(queries), 0), -np.inf, np.float32)
    best_i = np.zeros((len(queries), 0), np.int64)
    for a in range(0, len(ids), EXACT_CHUNK):
        chunk = ids[a : a + EXACT_CHUNK]
        x = np.ascontiguousarray(vectors[chunk], dtype=np.float32)
        dist, pos = faiss.knn(queries, x, min(k, len(chunk)), metric=faiss.METRIC_INNER_PRODUCT)
        best_d = np.concatenate([best_d, dist], axis=1)
        best_i = np.concatenate([best_i, chunk[pos]], axis=1)
        order = np.argsort(-best_d, axis=1, kind="stable")[:, :k]
        best_d = np.take_along_axis(best_d, order, axis=1)
        best_i = np.take_along_axis(best_i, order, axis=1)
    return best_i


def recall_vs_exact(
    index: PhraseIndex, sample: int = 1000, k: int = 10, nprobe: int | None = None, seed: int = 0
) -> dict[str, float]:
    """recall@1 and recall@k of ``index.faiss`` against exact search, queries = a sample of its own vectors."""
    ids = kept_token_ids(_filter_scores(index), index.manifest.filter_threshold, index.num_tokens)
    rng = np.random.default_rng(seed)
    q_ids = np.sort(rng.choice(ids, size=min(sample, len(ids)), replace=False))
    queries = np.ascontiguousarray(index.token_vectors(q_ids), dtype=np.float32)
    k = min(k, len(ids))
    exact = exact_topk(index.vectors, ids, queries, k)
    _, approx = index.faiss.search(queries, k, params=index.search_parameters(nprobe))
    overlap = [len(np.intersect1d(a, e)) / k for a, e in zip(approx, exact, strict=True)]
    return {
        "queries": len(q_ids),
        "recall@1": round(float(np.mean(approx[:, 0] == exact[:, 0])), 4),
        f"recall@{k}": round(float(np.mean(overlap)), 4),
    }


def _filter_scores(index: PhraseIndex) -> np.ndarray | None:
    path = index.dir / store.FILTER_SCORES
    return np.load(path, mmap_mode="r") if path.is_file() else None


def check_maps(index: PhraseIndex) -> list[str]:
    """Consistency problems between the manifest, the token maps, the stores and faiss (empty if none)."""
    m, problems = index.manifest, []
    pt, n = index.passage_tokens, index.num_tokens
    if pt[0] != 0 or pt[-1] != n or np.any(np.diff(pt) < 0):
        problems.append(f"passage_tokens is not a non-decreasing 0..{n} offset array")
    elif not np.array_equal(index.token_passage, np.repeat(np.arange(len(pt) - 1, dtype=np.int32), np.diff(pt))):
        problems.append("token_passage disagrees with passage_tokens")
    if len(index.docs) != m.documents:
        problems.append(f"docs.jsonl has {len(index.docs)} documents, the manifest {m.documents}")
    docs = np.asarray([p["doc"] for p in index.passages], dtype=np.int64)
    if len(docs) and (docs.min() < 0 or docs.max() >= len(index.docs) or np.any(np.diff(docs) < 0)):
        problems.append("passages refer to documents out of range or out of order")
    if index.faiss.ntotal != m.indexed_tokens:
        problems.append(f"faiss holds {index.faiss.ntotal} vectors, the manifest says {m.indexed_tokens} indexed tokens")
    if index.faiss.d != index.vectors.shape[1]:
        problems.append(f"faiss dimension {index.faiss.d} != fine store dimension {index.vectors.shape[1]}")
    if index.codes is not None and index.codes.shape[1] != index.faiss.sa_code_size():
        problems.append(f"codes.npy rows are {index.codes.shape[1]} bytes, faiss codes {index.faiss.sa_code_size()}")
    if m.filter_threshold is not None:
        kept = len(kept_token_ids(_filter_scores(index), m.filter_threshold, n))
        if kept != m.indexed_tokens:
            problems.append(f"filter threshold {m.filter_threshold} keeps {kept} tokens, the manifest says {m.indexed_tokens}")
    if len(docs) and not problems:
        lengths = np.asarray([len(p["text"]) for p in index.passages], dtype=np.int64)[index.token_passage]
        offs = np.asarray(index.token_offsets)
        if np.any(offs[:, 0] < 0) or np.any(offs[:, 0] > offs[:, 1]) or np.any(offs[:, 1] > lengths):
            problems.append("token character offsets fall outside their passages")
    return problems


def verify_index(
    index_dir: str | Path, sample: int = 1000, k: int = 10, nprobe: int | None = None
) -> dict[str, Any]:
    """Check an index and measure it: ``{"ok", "problems", "manifest": counts, "recall", "memory"}``."""
    try:
        index = PhraseIndex(index_dir)
    except IndexFormatError as e:
        return {"ok": False, "problems": [str(e)]}
    problems = check_maps(index)
    problems += check_lexical(index)
    m = index.manifest
    out: dict[str, Any] = {
        "ok": not problems,
        "problems": problems,
        "manifest": {"factory": m.factory, "documents": m.documents, "passages": m.passages, "tokens": m.tokens,
                     "indexed_tokens": m.indexed_tokens, "filter_threshold": m.filter_threshold},
        "lexical": describe_lexical(index),
    }
    if not problems and m.indexed_tokens > 0:
        out["recall"] = recall_vs_exact(index, sample, k, nprobe)
    out["memory"] = memory_per_token(index)
    return out
