"""Encoding on Ray (``spanseek index build --ray``): a local 2-CPU Ray cluster gives the local build's index.

Oracle: the local build of the same corpus: same token ids and maps, vectors within fp16 rounding (here equal),
same search results; a Ray build killed after some shards resumes from them. Skipped without the ``ray``
extra; slow (starting Ray takes tens of seconds on a small machine).

    .venv/bin/python -m pytest -q -m slow tests/indexer/test_ray_build.py
"""

from __future__ import annotations

import numpy as np
import pytest

from spanseek.core.params import SearchParams
from spanseek.core.phrase_index import PhraseIndex
from spanseek.core.search import Searcher
from spanseek.indexer import ray_encode
from spanseek.indexer.build import SHARDS, BuildOptions, build_index

ray = pytest.importorskip("ray")
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def _opts(**kw) -> BuildOptions:
    return BuildOptions(shard_passages=7, progress=False, precision="fp32", gpu=False, **kw)


def test_ray_build_equals_the_local_build(local_ray, tmp_path, tiny_corpus, tiny_model_dir, tiny_index):
    m = build_index(tiny_corpus, tiny_model_dir, tmp_path / "ray", _opts(ray=""))
    a, b = PhraseIndex(tmp_path / "ray"), PhraseIndex(tiny_index)
    assert m.tokens == b.manifest.tokens and m.passages == b.manifest.passages
    for arr in ("token_passage", "token_offsets", "token_flags", "passage_tokens"):
        assert np.array_equal(np.asarray(getattr(a, arr)), np.asarray(getattr(b, arr))), arr
    np.testing.assert_allclose(np.asarray(a.vectors, np.float32), np.asarray(b.vectors, np.float32), atol=2e-3)
    qs, qe = np.random.default_rng(0).standard_normal((2, 6, a.vectors.shape[1])).astype(np.float32)
    params = SearchParams(unit="phrase", top_k=5, mode="dense")
    assert Searcher(a).search_vectors(qs, qe, params) == Searcher(b).search_vectors(qs, qe, params)


def test_killed_ray_build_resumes_from_its_shards(local_ray, tmp_path, tiny_corpus, tiny_model_dir, tiny_index,
                                                 monkeypatch):
    real, rounds = ray_encode.encode_on_ray, []

    def first_round_then_die(jobs, *args):
        rounds.append([d.name for d, _, _ in jobs])
        if len(rounds) == 2:
            raise KeyboardInterrupt("killed")
        return real(jobs, *args)

    monkeypatch.setattr(ray_encode, "encode_on_ray", first_round_then_die)
    monkeypatch.setattr("spanseek.indexer.build.SHARDS_PER_ROUND", 2)
    out = tmp_path / "resumed"
    with pytest.raises(KeyboardInterrupt):
        build_index(tiny_corpus, tiny_model_dir, out, _opts(ray=""))
    assert sorted(p.name for p in (out / SHARDS).iterdir() if not p.name.endswith(".tmp")) == rounds[0]
    rounds.clear()
    build_index(tiny_corpus, tiny_model_dir, out, _opts(ray=""))
    assert rounds and not set(rounds[0]) & {"000000", "000001"}  # the finished shards were not sent again
    assert np.array_equal(np.asarray(PhraseIndex(out).vectors), np.asarray(PhraseIndex(tiny_index).vectors))
