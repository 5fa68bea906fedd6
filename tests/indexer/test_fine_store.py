"""Fine store precision (``--store fp16|sq8|sq4|pqM|pca192``): round trips, builds, search over a quantised store,
add.

Oracles: decoded rows lie within half a quantiser step of the vectors (the faiss ScalarQuantizer bound inside
its trained range); a pq row decodes to the nearest centroid of each sub-vector (brute force over the trained
centroids), a pca192 row likewise after its rotation (its first segment within half a step); search over an sq8 store equals brute force over its decoded
vectors; an add encodes the new
rows exactly as the index's quantiser encodes the vectors of a build of everything at once.

    .venv/bin/python -m pytest -q tests/indexer/test_fine_store.py
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from spanseek.core import fine_store
from spanseek.core.fine_store import FineStoreError, open_fine_store, step_sizes, write_quantized
from spanseek.core.params import SearchParams
from spanseek.core.phrase_index import PhraseIndex
from spanseek.core.search import Searcher
from spanseek.indexer.add import add_documents
from spanseek.indexer.build import BuildOptions, build_index, reindex
from spanseek.indexer.fine_store_build import auto_store, resolve_store
from spanseek.indexer.verify import verify_index
from tests.conftest import make_corpus, span_chars
from tests.core.test_search import passage_maxima, random_questions


def _opts(**kw) -> BuildOptions:
    return BuildOptions(shard_passages=7, progress=False, precision="fp32", gpu=False, **kw)


@pytest.mark.parametrize("kind", ["sq8", "sq4"])
def test_quantised_store_round_trip_is_within_half_a_step(tmp_path, kind):
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((3000, 24)) * rng.uniform(0.1, 5.0, 24) + rng.uniform(-2, 2, 24)).astype(np.float32)
    record = write_quantized(tmp_path, kind, x, sample=len(x))
    fine = open_fine_store(tmp_path, kind)
    assert fine.shape == x.shape and fine.mapped and record["code_size"] == {"sq8": 24, "sq4": 12}[kind]
    assert np.load(tmp_path / fine_store.FINE_CODES, mmap_mode="r").shape == (3000, record["code_size"])
    err = np.abs(fine[:] - x) / step_sizes(fine.quantizer)
    assert err.max() <= 0.5 + 1e-3
    assert err.mean() > 0.1  # it is quantised, not a copy
    ids = rng.integers(0, len(x), (5, 7))
    assert np.array_equal(fine[ids], fine[:][ids])  # gathering rows decodes the same as decoding everything


@pytest.mark.parametrize("kind", ["pq96", "pq128"])
def test_pq_store_decodes_each_sub_vector_to_its_nearest_centroid(tmp_path, kind):
    import faiss

    m = {"pq96": 96, "pq128": 128}[kind]
    d = 384
    rng = np.random.default_rng(1)
    x = (rng.standard_normal((256 * 40, d)) * rng.uniform(0.1, 2.0, d)).astype(np.float32)
    record = write_quantized(tmp_path, kind, x, sample=len(x))
    fine = open_fine_store(tmp_path, kind)
    assert record["code_size"] == m and fine.shape == x.shape and fine_store.detect_kind(tmp_path) == kind
    assert np.load(tmp_path / fine_store.FINE_CODES, mmap_mode="r").shape == (len(x), m)
    sub = d // m
    centroids = faiss.vector_to_array(fine.quantizer.pq.centroids).reshape(m, 256, sub)
    ids = rng.integers(0, len(x), 50)
    parts = x[ids].reshape(len(ids), m, 1, sub)
    nearest = ((parts - centroids[None]) ** 2).sum(-1).argmin(-1)  # (50, m): brute force per sub-vector
    expect = centroids[np.arange(m)[None, :], nearest].reshape(len(ids), d)
    assert np.allclose(fine[ids], expect, atol=1e-5)
    assert np.mean((fine[ids] - x[ids]) ** 2) < 0.5 * np.mean(x[ids] ** 2)  # closer than zero, yet not a copy
    assert not np.allclose(fine[ids], x[ids], atol=1e-3)


def test_pq_store_needs_a_divisible_dimension_and_enough_tokens(tmp_path):
    x = np.random.default_rng(0).standard_normal((256 * 40, 100)).astype(np.float32)
    with pytest.raises(FineStoreError, match="d = 100 is not a multiple"):
        write_quantized(tmp_path, "pq96", x)
    with pytest.raises(FineStoreError, match="at least 9984 tokens"):
        write_quantized(tmp_path, "pq96", np.zeros((500, 384), np.float32))


def _anisotropic(rng, n: int, d: int, axes: np.ndarray | None = None) -> np.ndarray:
    """Rows with a decaying spectrum along random axes, as token vectors have (a few strong directions)."""
    if axes is None:
        axes = np.linalg.qr(np.random.default_rng(0).standard_normal((d, d)))[0]
    return ((rng.standard_normal((n, d)) / (1 + np.arange(d)) ** 0.75) @ axes.T * 3).astype(np.float32)


def test_rotated_quantiser_beats_pq_on_inner_products_in_the_same_bytes():
    import faiss

    rng = np.random.default_rng(4)
    x, q = _anisotropic(rng, 256 * 40, 96), _anisotropic(rng, 64, 96)  # questions share the strong directions
    rotated = fine_store.RotatedPQ.fit(x, 48)
    pq = faiss.IndexPQ(96, 48, 8)
    pq.train(x)
    assert rotated.sa_code_size() == pq.sa_code_size() == 48
    test = x[:500]
    err_rotated = (rotated.sa_decode(rotated.sa_encode(test)) - test) @ q.T
    err_pq = (pq.sa_decode(pq.sa_encode(test)) - test) @ q.T
    assert np.sqrt((err_rotated ** 2).mean()) < 0.7 * np.sqrt((err_pq ** 2).mean())


def test_rotated_store_decodes_each_segment_as_its_quantiser_does(tmp_path):
    import faiss

    rng = np.random.default_rng(2)
    x = _anisotropic(rng, 256 * 40, 384)
    record = write_quantized(tmp_path, "pca192", x, sample=len(x))
    fine = open_fine_store(tmp_path, "pca192")
    assert record["code_size"] == 192 and fine.shape == x.shape and fine_store.detect_kind(tmp_path) == "pca192"
    assert fine_store.store_files("pca192") == (fine_store.FINE_CODES, fine_store.FINE_ROTATION)
    rq = fine.quantizer
    assert rq.segments == [(64, "SQ8"), (128, "PQ64np"), (192, "PQ64np")]
    np.testing.assert_allclose(rq.rotation.T @ rq.rotation, np.eye(384), atol=1e-4)  # a rotation
    # oracle: rotate; the strongest 64 components within half a scalar step, every PQ sub-vector at its nearest
    # centroid (brute force); rotate back
    ids = rng.integers(0, len(x), 50)
    y = (x[ids] - rq.mean) @ rq.rotation
    decoded = (fine[ids] - rq.mean) @ rq.rotation
    sq = y[:, :64].clip(*faiss.vector_to_array(rq.parts[0].sq.trained).reshape(2, 64).cumsum(axis=0))
    assert (np.abs(decoded[:, :64] - sq) / step_sizes(rq.parts[0])).max() <= 0.5 + 1e-2
    a = 64
    for (width, _), part in zip(rq.segments[1:], rq.parts[1:], strict=True):
        m, per = part.pq.M, width // part.pq.M
        centroids = faiss.vector_to_array(part.pq.centroids).reshape(m, 256, per)
        sub = y[:, a : a + width].reshape(len(ids), m, 1, per)
        nearest = ((sub - centroids[None]) ** 2).sum(-1).argmin(-1)
        expect = centroids[np.arange(m)[None, :], nearest].reshape(len(ids), width)
        np.testing.assert_allclose(decoded[:, a : a + width], expect, atol=1e-3)
        a += width
    assert not np.allclose(fine[ids], x[ids], atol=1e-3)  # quantised, not a copy


def test_rotated_store_needs_more_dimensions_than_bytes():
    with pytest.raises(FineStoreError, match="d = 96"):
        fine_store.RotatedPQ.plan(96, 192)
    with pytest.raises(FineStoreError, match="d = 400"):  # 400 - 192 is not a multiple of 64
        fine_store.RotatedPQ.plan(400, 192)
    assert fine_store.RotatedPQ.plan(768, 192) == [(64, "SQ8"), (128, "PQ64np"), (576, "PQ64np")]


def test_a_filtered_rotated_store_is_written_and_extended_with_the_same_quantiser(tmp_path):
    """The build's path (fp16 vectors.npy -> pca192 codes of the kept rows) and the add's (new rows encoded with
    the index's quantiser), on vectors written as a build leaves them."""
    from spanseek.core.phrase_index import TOKEN_FLAGS
    from spanseek.indexer.fine_store_build import encode_fine_rows, write_fine_store

    rng = np.random.default_rng(3)
    x = _anisotropic(rng, 256 * 48, 384).astype(np.float16)
    np.save(tmp_path / fine_store.VECTORS, x)
    np.save(tmp_path / TOKEN_FLAGS, np.full(len(x), 3, np.uint8))
    keep = np.sort(rng.choice(len(x), 256 * 42, replace=False))
    record = write_fine_store(tmp_path, "pca192", sample=len(x), keep=keep)
    assert record["kind"] == "pca192" and record["bytes_per_token"] == 192 and record["stored_tokens"] == len(keep)
    assert not (tmp_path / fine_store.VECTORS).exists() and fine_store.detect_kind(tmp_path) == "pca192"
    fine = open_fine_store(tmp_path, "pca192")
    dropped = np.setdiff1d(np.arange(len(x)), keep)
    assert np.array_equal(fine[dropped[:20]], np.zeros((20, 384), np.float32))
    np.testing.assert_allclose(fine[keep[:20]], fine.quantizer.sa_decode(fine.quantizer.sa_encode(
        x[keep[:20]].astype(np.float32))), atol=1e-6)
    ids = rng.integers(0, len(x), 300)  # scoring in the rotated space equals decoding the rows first
    queries = _anisotropic(rng, 4, 384).T
    np.testing.assert_allclose(fine.dot(ids, queries), fine[ids] @ queries, rtol=1e-4, atol=1e-3)
    assert np.array_equal(fine.dot(dropped[:5], queries), np.zeros((5, 4), np.float32))
    new = _anisotropic(rng, 30, 384)
    encode_fine_rows(tmp_path, new, tmp_path / "new.npy")
    assert np.array_equal(np.load(tmp_path / "new.npy"), fine.quantizer.sa_encode(new))


def test_unknown_store_is_refused_before_encoding(tmp_path, tiny_corpus, tiny_model_dir):
    with pytest.raises(FineStoreError, match="fp16, sq8, sq4"):
        build_index(tiny_corpus, tiny_model_dir, tmp_path / "x", _opts(store="sq2"))
    assert not (tmp_path / "x").exists()


def test_auto_store_by_size_class():
    assert [auto_store(n) for n in (10_000, 4_999_999, 5_000_000, 49_999_999, 50_000_000)] == \
        ["fp16", "fp16", "sq8", "sq8", "pca192"]
    assert resolve_store(None, "Flat", 10**9) == "fp16" and resolve_store(None, "auto", 10**9) == "pca192"
    assert resolve_store("sq8", "Flat", 10) == "sq8"


@pytest.fixture(scope="module")
def sq8_index(tmp_path_factory, tiny_corpus, tiny_model_dir):
    out = tmp_path_factory.mktemp("fine") / "sq8"
    build_index(tiny_corpus, tiny_model_dir, out, _opts(store="sq8"))
    return out


def test_sq8_build_holds_one_store_within_the_bound(sq8_index, tiny_index):
    idx, exact = PhraseIndex(sq8_index), PhraseIndex(tiny_index)
    assert idx.manifest.fine_store == "sq8" and idx.manifest.faiss_params["fine_store"]["bytes_per_token"] == 32
    assert not (sq8_index / fine_store.VECTORS).exists()
    assert {fine_store.FINE_CODES, fine_store.FINE_QUANTIZER} <= set(idx.manifest.files or {})
    ids = np.arange(idx.num_tokens)
    err = np.abs(idx.token_vectors(ids) - exact.token_vectors(ids)) / step_sizes(idx.vectors.quantizer)
    assert err.max() <= 0.5 + 1e-2  # trained on every token of this small corpus (fp16 rounding on top)
    report = verify_index(sq8_index, sample=50)
    assert report["ok"], report["problems"]
    assert report["memory"]["mapped_breakdown"][fine_store.FINE_CODES] == 32


def test_search_over_an_sq8_store_equals_brute_force_over_its_decoded_vectors(sq8_index, tmp_path):
    flat = reindex(sq8_index, tmp_path / "flat", _opts(factory="Flat"))  # faiss over the decoded vectors
    assert flat.fine_store == "sq8"
    idx = PhraseIndex(tmp_path / "flat")
    searcher = Searcher(idx)
    L = searcher.max_answer_tokens
    qs, qe = random_questions(np.random.default_rng(3), 12, idx.vectors.shape[1])
    for b, [hit] in enumerate(searcher.search_vectors(qs, qe, SearchParams(unit="phrase", top_k=1, mode="dense"))):
        s, i, j = max(passage_maxima(idx, qs[b], qe[b], L))
        assert hit.score == pytest.approx(s, rel=1e-4, abs=1e-4)
        assert (hit.start, hit.end) == span_chars(idx, i, j)


def test_reindex_converts_fp16_to_sq4_but_not_back(tiny_index, sq8_index, tmp_path):
    m = reindex(tiny_index, tmp_path / "sq4", _opts(factory="Flat", store="sq4"))
    assert m.fine_store == "sq4" and (tmp_path / "sq4" / fine_store.FINE_CODES).is_file()
    assert (tiny_index / fine_store.VECTORS).is_file()  # the source keeps its store
    assert PhraseIndex(tmp_path / "sq4").vectors.shape == PhraseIndex(tiny_index).vectors.shape
    with pytest.raises(FineStoreError, match="cannot be derived"):
        reindex(sq8_index, tmp_path / "fp16", _opts(factory="Flat", store="fp16"))


def test_compressed_build_keeps_codes_only_when_asked(tmp_path, tiny_corpus, tiny_model_dir):
    plain = build_index(tiny_corpus, tiny_model_dir, tmp_path / "plain", _opts(factory="IVF4,SQ8"))
    assert "codes.npy" not in (plain.files or {}) and PhraseIndex(tmp_path / "plain").codes is None
    kept = reindex(tmp_path / "plain", tmp_path / "kept", _opts(factory="IVF4,SQ8", vector_source="codes"))
    assert "codes.npy" in (kept.files or {}) and PhraseIndex(tmp_path / "kept").vector_source == "codes"


def test_add_to_an_sq8_store_encodes_new_rows_with_its_quantizer(tmp_path, tiny_model_dir):
    base, more = make_corpus(seed=4, n_docs=5, n_paras=3), make_corpus(seed=5, n_docs=2, n_paras=2)
    more = [{**d, "id": f"m{i}"} for i, d in enumerate(more)]
    paths = {}
    for name, docs in (("base", base), ("more", more), ("all", base + more)):
        paths[name] = tmp_path / f"{name}.jsonl"
        paths[name].write_text("".join(json.dumps(d) + "\n" for d in docs))
    build_index(paths["base"], tiny_model_dir, tmp_path / "idx", _opts(store="sq8"))
    old_codes = np.load(tmp_path / "idx" / fine_store.FINE_CODES).copy()
    add_documents(tmp_path / "idx", paths["more"], model=tiny_model_dir, opts=_opts())
    build_index(paths["all"], tiny_model_dir, tmp_path / "all", _opts())
    idx, whole = PhraseIndex(tmp_path / "idx"), PhraseIndex(tmp_path / "all")
    codes = np.load(tmp_path / "idx" / fine_store.FINE_CODES)
    n_old = len(old_codes)
    assert idx.num_tokens == whole.num_tokens == len(codes) and np.array_equal(codes[:n_old], old_codes)
    expect = idx.vectors.quantizer.sa_encode(np.asarray(whole.vectors[n_old:], dtype=np.float32))
    assert np.array_equal(codes[n_old:], expect)
    assert verify_index(tmp_path / "idx", sample=50)["ok"]


def test_a_quantised_store_writes_its_quantiser_through_write_faiss(tmp_path, monkeypatch):
    """The quantiser of an sq / pq store was written by faiss.write_index under its own ``atomic_path``, apart from the
    ``write_faiss`` every other faiss file of an index goes through: it goes through that one now. A full disk there
    names the quantiser's file, leaves no temporary, and the quantiser written before is intact."""
    import errno
    import inspect

    import faiss

    from tests.indexer.test_disk_full import faiss_disk_full

    x = np.random.default_rng(0).standard_normal((500, 8)).astype(np.float32)
    write_quantized(tmp_path, "sq8", x, sample=len(x))
    path = tmp_path / fine_store.store_files("sq8")[1]
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    real_write, writers = faiss.write_index, []

    def write_index(index, name):
        writers.append(inspect.stack()[1].function)
        return real_write(index, name)

    monkeypatch.setattr(faiss, "write_index", write_index)
    write_quantized(tmp_path, "sq8", x, sample=len(x))
    assert writers == ["write_faiss"]
    monkeypatch.setattr(faiss, "write_index", faiss_disk_full)
    with pytest.raises(OSError) as failed:
        fine_store.write_quantizer(tmp_path, "sq8", open_fine_store(tmp_path, "sq8").quantizer)
    assert (failed.value.errno, failed.value.filename) == (errno.ENOSPC, str(path))
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before
