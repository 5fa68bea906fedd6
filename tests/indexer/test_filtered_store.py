"""A filtered fine store (``--filter-threshold``): only kept tokens get a faiss entry and a fine-store row.

Oracles: the row map against a plain boolean mask; search over a filtered exact index against brute force over
the unfiltered index's vectors with the dropped tokens made impossible starts and ends; filter scores computed
from a built index against those computed while encoding.

    .venv/bin/python -m pytest -q tests/indexer/test_filtered_store.py
"""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from spanseek.core import fine_store, phrase_index
from spanseek.core.fine_store import RowMap, read_row_map, write_row_map
from spanseek.core.params import SearchParams
from spanseek.core.phrase_index import PhraseIndex
from spanseek.core.search import Searcher
from spanseek.core.spans import best_span
from spanseek.indexer import verify
from spanseek.indexer.add import add_documents
from spanseek.indexer.build import BuildError, BuildOptions, build_index, reindex
from tests.conftest import span_chars
from tests.core.test_search import random_questions

THRESHOLD = 0.5


def _opts(**kw) -> BuildOptions:
    return BuildOptions(shard_passages=7, progress=False, precision="fp32", gpu=False, factory="Flat", **kw)


@pytest.fixture(scope="module")
def full_index(tmp_path_factory, tiny_corpus, filter_model_dir):
    """Unfiltered exact index of the filter model (it has filter scores, every token indexed)."""
    out = tmp_path_factory.mktemp("filtered") / "full"
    build_index(tiny_corpus, filter_model_dir, out, _opts())
    return out


@pytest.fixture(scope="module")
def kept_index(tmp_path_factory, tiny_corpus, filter_model_dir):
    out = tmp_path_factory.mktemp("filtered") / "kept"
    build_index(tiny_corpus, filter_model_dir, out, _opts(filter_threshold=THRESHOLD))
    return out


def _kept(index_dir) -> np.ndarray:
    probs = np.load(index_dir / phrase_index.FILTER_SCORES).astype(np.float32)
    return (probs >= THRESHOLD).any(axis=1)


@pytest.mark.parametrize("n", [1, 8, 255, 256, 257, 1000, 70_001])
def test_row_map_round_trip_matches_the_mask(tmp_path, n):
    rng = np.random.default_rng(n)
    keep = rng.random(n) < 0.3
    keep[-1] = n % 2 == 1  # the last token on either side of the map's end
    write_row_map(tmp_path, keep)
    for row_map in (RowMap.from_mask(keep), read_row_map(tmp_path)):
        assert row_map is not None and row_map.n == n and row_map.stored == keep.sum()
        ids = rng.permutation(n)
        rows, has = row_map.lookup(ids)
        assert np.array_equal(has, keep[ids])
        assert np.array_equal(rows[has], np.cumsum(keep)[ids[has]] - 1)


def test_filter_scores_are_the_heads_probabilities_for_the_roles_a_token_can_play(full_index, filter_model_dir):
    import torch

    from spanseek.core.model import load_model
    from spanseek.core.text import FLAG_END, FLAG_START

    model = load_model(filter_model_dir)
    assert isinstance(model.filter_head, torch.nn.Sequential) and model.config.filter_hidden == 16
    idx = PhraseIndex(full_index)
    with torch.no_grad():  # oracle: the saved head applied to the stored vectors
        probs = torch.sigmoid(model.filter_head(torch.from_numpy(np.asarray(idx.vectors[:], np.float32)))).numpy()
    flags = np.asarray(idx.token_flags)
    assert ((flags & FLAG_START) == 0).any() and ((flags & FLAG_END) == 0).any()  # word pieces in the corpus
    probs[:, 0] *= (flags & FLAG_START) > 0
    probs[:, 1] *= (flags & FLAG_END) > 0
    got = np.load(full_index / phrase_index.FILTER_SCORES).astype(np.float32)
    assert np.allclose(got, probs, atol=2e-3)
    assert not got[(flags & FLAG_START) == 0, 0].any() and not got[(flags & FLAG_END) == 0, 1].any()


def test_filtered_build_stores_only_kept_rows(kept_index, full_index):
    idx, full = PhraseIndex(kept_index), PhraseIndex(full_index)
    keep = _kept(full_index)  # same model, same vectors, same scores
    assert not (kept_index / phrase_index.FILTER_SCORES).exists()  # the row map records what was kept
    assert np.array_equal(np.flatnonzero(keep), verify.indexed_ids(idx))
    assert verify.verify_index(kept_index, sample=50)["ok"]
    assert 0 < keep.sum() < len(keep)
    record = idx.manifest.faiss_params["fine_store"]
    assert record["rows"] == "kept" and record["stored_tokens"] == keep.sum() == idx.faiss.ntotal
    assert idx.manifest.filter_threshold == THRESHOLD and fine_store.FINE_KEPT in (idx.manifest.files or {})
    assert len(np.load(kept_index / fine_store.VECTORS, mmap_mode="r")) == keep.sum()
    assert len(idx.vectors) == idx.num_tokens == full.num_tokens
    ids = np.arange(idx.num_tokens)
    assert np.array_equal(idx.token_vectors(ids)[keep], full.token_vectors(ids)[keep])
    assert not idx.token_vectors(ids)[~keep].any()  # no row: zeros, never another token's vector
    assert not np.asarray(idx.token_flags)[~keep].any()  # dropped tokens can neither start nor end a phrase
    assert np.array_equal(np.asarray(idx.token_flags)[keep], np.asarray(full.token_flags)[keep])
    assert full.vectors.row_map is None  # an unfiltered (or older) index reads as before


def test_filtered_search_equals_brute_force_over_kept_tokens(kept_index, full_index):
    idx, full = PhraseIndex(kept_index), PhraseIndex(full_index)
    keep = _kept(full_index)
    searcher = Searcher(idx)
    L = searcher.max_answer_tokens
    qs, qe = random_questions(np.random.default_rng(5), 12, idx.vectors.shape[1])
    hits = searcher.search_vectors(qs, qe, SearchParams(unit="phrase", top_k=1, mode="dense"))
    for b, [hit] in enumerate(hits):
        best = (-np.inf, -1, -1)
        for p in range(len(full.passages)):  # the unfiltered index, dropped tokens made impossible
            a, e = full.passage_range(p)
            vecs = full.token_vectors(np.arange(a, e))
            flags = np.asarray(full.token_flags[a:e]) * keep[a:e]
            try:
                i, j, s = best_span(vecs @ qs[b], vecs @ qe[b], flags, L)
            except ValueError:  # no kept start with a kept end within L tokens of it
                continue
            best = max(best, (s, a + i, a + j))
        s, i, j = best
        assert hit.score == pytest.approx(s, rel=1e-4, abs=1e-4)
        assert (hit.start, hit.end) == span_chars(full, i, j)
        assert keep[i] and keep[j]


def test_filtered_sq4_store_and_reindex_with_a_filter_model(tmp_path, full_index, kept_index, filter_model_dir,
                                                            tiny_index):
    src = tmp_path / "no-scores"  # an index built without filter scores (e.g. by the model before its filter head)
    shutil.copytree(full_index, src)
    (src / phrase_index.FILTER_SCORES).unlink()
    with pytest.raises(BuildError, match="no filter scores"):
        reindex(src, tmp_path / "x", _opts(filter_threshold=THRESHOLD))
    m = reindex(src, tmp_path / "sq4", _opts(filter_threshold=THRESHOLD, store="sq4"), filter_model=filter_model_dir)
    keep = _kept(full_index)
    assert np.array_equal(verify.indexed_ids(PhraseIndex(tmp_path / "sq4")), np.flatnonzero(keep))
    assert m.fine_store == "sq4" and m.indexed_tokens == keep.sum()
    idx = PhraseIndex(tmp_path / "sq4")
    assert len(np.load(tmp_path / "sq4" / fine_store.FINE_CODES, mmap_mode="r")) == keep.sum()
    assert not idx.token_vectors(np.flatnonzero(~keep)).any()
    assert np.asarray(np.load(full_index / phrase_index.TOKEN_FLAGS))[~keep].any()  # the source's flags are untouched
    with pytest.raises(BuildError, match="phrase encoder is not the one"):
        reindex(tiny_index, tmp_path / "y", _opts(filter_threshold=THRESHOLD), filter_model=filter_model_dir)


def test_add_to_a_filtered_index_is_refused(tmp_path, kept_index, tiny_corpus, filter_model_dir):
    copy = tmp_path / "kept"
    shutil.copytree(kept_index, copy)
    with pytest.raises(BuildError, match="filtered fine store"):
        add_documents(copy, tiny_corpus, filter_model_dir, _opts())
