"""Fixtures of the live-write tests (tests/indexer/test_live*.py)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def encoder(tiny_model_dir):
    """The live writer's document encoder over the tiny model (fp32, small chunks)."""
    from spanseek.core.model import load_model
    from spanseek.indexer.live import DocumentEncoder

    return DocumentEncoder(load_model(tiny_model_dir), None, precision="fp32", chunk_tokens=40)
