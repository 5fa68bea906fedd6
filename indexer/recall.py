"""Recall of a faiss index against exact search, with a sample of its own vectors as queries.

The build records it in the manifest (``faiss_params["recall"]``); ``spanseek index verify`` measures it again the
same way and fails when it fell far below. The exact top-k is a brute-force inner-product search over the fine
vectors of the indexed tokens; recall@1 is the share of queries whose faiss top-1 is the exact top-1, recall@k the
mean overlap of the two top-k lists.
"""

from __future__ import annotations

from typing import Any

import numpy as np

EXACT_CHUNK = 65536
# what an exact (Flat) index records for its recall: its search is the exact search, so nothing is measured
EXACT_RECALL: dict[str, Any] = {"exact": True}
TIE_TOLERANCE = 1e-4  # relative: scores this close to the exact one's are a tie, not a miss


def exact_topk(vectors: np.ndarray, ids: np.ndarray, queries: np.ndarray, k: int,
               with_scores: bool = False) -> Any:
    """Brute-force inner-product top-k token ids among ``ids`` (rows of ``vectors``), chunk by chunk: a float32
    product and top-k by torch (9x faiss.knn's time for 200 queries over 146k tokens on 2 cores, whose heap takes
    every score); ``with_scores``: (ids, their scores)."""
    import torch

    q = torch.from_numpy(np.ascontiguousarray(queries, dtype=np.float32))
    best_d = np.full((len(queries), 0), -np.inf, np.float32)
    best_i = np.zeros((len(queries), 0), np.int64)
    for a in range(0, len(ids), EXACT_CHUNK):
        chunk = ids[a : a + EXACT_CHUNK]
        x = torch.from_numpy(np.ascontiguousarray(vectors[chunk], dtype=np.float32))
        top = torch.topk(q @ x.T, min(k, len(chunk)), dim=1)
        dist, pos = top.values.numpy(), top.indices.numpy()
        best_d = np.concatenate([best_d, dist], axis=1)
        best_i = np.concatenate([best_i, chunk[pos]], axis=1)
        order = np.argsort(-best_d, axis=1, kind="stable")[:, :k]
        best_d = np.take_along_axis(best_d, order, axis=1)
        best_i = np.take_along_axis(best_i, order, axis=1)
    return (best_i, best_d) if with_scores else best_i


def measure_recall(index: Any, vectors: np.ndarray, ids: np.ndarray, sample: int = 1000, k: int = 10,
                   seed: int = 0, params: Any = None) -> dict[str, Any]:
    """recall@1 and recall@k of the faiss ``index`` (its stored nprobe, or faiss search ``params``) over the
    indexed token ``ids`` (rows of ``vectors``), queries = ``sample`` of those rows; the settings come back with
    the numbers. A hit is right when it scores as high as the exact one at its depth (the k-th for recall@k),
    within float rounding: among tokens with equal vectors (a paragraph repeated across documents) any is right,
    whichever an index and the oracle each rank first."""
    rng = np.random.default_rng(seed)
    q_ids = np.sort(rng.choice(ids, size=min(sample, len(ids)), replace=False))
    queries = np.ascontiguousarray(vectors[q_ids], dtype=np.float32)
    k = min(k, len(ids))
    _, exact = exact_topk(vectors, ids, queries, k, with_scores=True)
    _, approx = index.search(queries, k, params=params)
    found = approx >= 0
    rows = np.asarray(vectors[np.where(found, approx, ids[0]).ravel()], dtype=np.float32)
    scores = np.where(found, np.einsum("qd,qkd->qk", queries, rows.reshape(*approx.shape, -1)), -np.inf)
    slack = TIE_TOLERANCE * np.maximum(1.0, np.abs(exact))  # two summation orders of the same products
    right = scores >= (exact[:, -1:] - slack[:, -1:])
    return {
        "queries": len(q_ids), "sample": sample, "k": k, "seed": seed,
        "recall@1": round(float(np.mean(scores[:, 0] >= exact[:, 0] - slack[:, 0])), 4),
        f"recall@{k}": round(float(np.mean(right.sum(axis=1) / k)), 4),
    }
