"""``bench/small_batches.py``'s ``summation``: which order of float32 additions a product's scores have, to the bit,
against scores added one by one in Python (the oracle).

    .venv/bin/python -m pytest -q tests/bench/test_small_batches.py
"""

from __future__ import annotations

import sys
from fractions import Fraction
from pathlib import Path

import numpy as np

BENCH = Path(__file__).resolve().parents[2] / "bench"


def lanes_score(q: np.ndarray, x: np.ndarray, lanes: int) -> np.float32:
    """One score as L lanes of rounded products, each lane added in turn, then halved pairwise."""
    sums = [np.float32(0)] * lanes
    for k in range(len(q)):
        sums[k % lanes] = np.float32(sums[k % lanes] + np.float32(q[k] * x[k]))
    while len(sums) > 1:
        half = len(sums) // 2
        sums = [np.float32(a + b) for a, b in zip(sums[:half], sums[half:], strict=True)]
    return sums[0]


def fma_score(q: np.ndarray, x: np.ndarray) -> np.float32:
    """One score as fused multiply-adds in turn: each exact sum rounded once to float32."""
    acc = np.float32(0)
    for k in range(len(q)):
        acc = np.float32(float(Fraction(float(acc)) + Fraction(float(q[k])) * Fraction(float(x[k]))))
    return acc


def test_summation_names_the_order_a_products_scores_were_added_in():
    sys.path.insert(0, str(BENCH))
    from small_batches import summation

    rng = np.random.default_rng(3)
    q, x = rng.standard_normal((3, 32)).astype(np.float32), rng.standard_normal((5, 32)).astype(np.float32)
    four = np.asarray([[lanes_score(a, b, 4) for b in x] for a in q])
    eight = np.asarray([[lanes_score(a, b, 8) for b in x] for a in q])
    fused = np.asarray([[fma_score(a, b) for b in x] for a in q])
    assert not np.array_equal(four, eight) and not np.array_equal(four, fused)  # the orders differ in these bits
    assert summation(four, q, x) == "4 lanes"
    assert summation(eight, q, x) == "8 lanes"
    assert summation(fused, q, x) == "fma"
    # rows alike are counted together, in their order: MKL's tall product of six rows takes 4, then 2 (AMD)
    assert summation(np.concatenate([four[:2], eight[2:]]), q, x) == "4 lanes x2 + 8 lanes x1"
    rounded_once = (q.astype(np.float64) @ x.astype(np.float64).T).astype(np.float32)  # no float32 addition at all
    assert not np.array_equal(rounded_once, fused)
    assert summation(rounded_once, q, x) == "other"
