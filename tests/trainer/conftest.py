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


@pytest.fixture
def ticking_clock(monkeypatch):
    """A clock for the training progress (trainer.progress) that moves 10 s a reading, so a run's times are exact."""
    import time as real_time

    from spanseek.trainer import progress

    class Clock:
        now = 0.0

        def perf_counter(self) -> float:
            self.now += 10.0
            return self.now

        def __getattr__(self, name):
            return getattr(real_time, name)

    monkeypatch.setattr(progress, "time", Clock())


def encoder_flags(tiny_config, kw: dict) -> dict:
    """The encoder a test run gives: the tiny one for a new model; none beside ``init_from``, whose model keeps its
    own (an encoder given there is refused as unused)."""
    return {} if kw.get("init_from") else {"encoder": tiny_config}
