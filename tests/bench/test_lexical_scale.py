"""``bench/lexical_scale.py``'s ``--sizes``: the passage counts it builds, none to measure ``--index`` alone.

    .venv/bin/python -m pytest -q tests/bench/test_lexical_scale.py
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


@pytest.fixture(scope="module")
def passage_counts():
    sys.path.insert(0, str(BENCH))
    try:
        from lexical_scale import passage_counts
    finally:
        sys.path.remove(str(BENCH))
    return passage_counts


def test_sizes_are_read_as_counts_and_may_be_none(passage_counts):
    assert passage_counts("100000,1000000") == [100_000, 1_000_000]
    assert passage_counts(" 30, 40 ,") == [30, 40]
    assert passage_counts("") == []  # --index alone (was: int("") raised ValueError)


@pytest.mark.parametrize("bad", ["1e6", "-5", "0", "ten", "3.5"])
def test_a_size_that_is_no_count_is_refused_naming_it(passage_counts, bad):
    with pytest.raises(argparse.ArgumentTypeError, match=rf"{bad!r} is not a positive number of passages"):
        passage_counts(f"100,{bad}")
