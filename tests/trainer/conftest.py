"""Fixtures shared by the trainer tests."""

from __future__ import annotations

import gzip
import json

import pytest

from tests.conftest import make_squad


@pytest.fixture(scope="session")
def squad_file(tmp_path_factory):
    """40 articles, so that the fixed split holds two of them out (articles 7 and 27)."""
    path = tmp_path_factory.mktemp("squad") / "train.json.gz"
    with gzip.open(path, "wt", encoding="utf-8") as f:
        json.dump(make_squad(n_articles=40), f)
    return path
