"""Compressed indexes: factory choice and validation, codes decoding, compressed search, filter, resume, GPU.

Oracles: faiss's own reconstruction (a direct map on the IVF) for decoded neighbours; brute force over the fine
vectors for span scores and for the recall of IVF-PQ on synthetic clustered vectors.

    .venv/bin/python -m pytest -q tests/indexer/test_compressed.py
"""

from __future__ import annotations

import dataclasses
import json
import logging

import numpy as np
import pytest

from spanseek.core.io import CorpusError
from spanseek.core.params import SearchParams
from spanseek.core.phrase_index import CODES, IndexFormatError, PhraseIndex
from spanseek.core.search import Searcher
from spanseek.indexer import build as build_mod
from spanseek.indexer import shards, verify
from spanseek.indexer.build import BuildError, BuildOptions, build_index, reindex
from spanseek.indexer.faiss_index import (
    MIN_POINTS_PER_CENTROID,
    FactoryError,
    add_vectors,
    auto_factory,
    create_index,
    parse_factory,
    train_index,
    training_size,
    validate_factory,
)
from tests.conftest import make_corpus

IVF_FACTORY = "IVF8,SQ8"
PQ_FACTORY = "OPQ16,IVF8,PQ16x4"  # 4-bit codes (OPQ trained for them): 16 per sub-quantiser, a few thousand tokens suffice


@pytest.fixture(scope="module")
def medium_corpus(tmp_path_factory):
    path = tmp_path_factory.mktemp("corpus") / "medium.jsonl"
    path.write_text("".join(json.dumps(d) + "\n" for d in make_corpus(seed=1, n_docs=24, n_paras=5)))
    return path


def _build(tmp_path_factory, corpus, model_dir, factory, name, **kw):
    out = tmp_path_factory.mktemp("indexes") / name
    build_index(corpus, model_dir, out, BuildOptions(factory=factory, shard_passages=40, progress=False,
                                                      precision="fp32", gpu=False, **kw))
    return out


@pytest.fixture(scope="module")
def ivf_index(tmp_path_factory, medium_corpus, tiny_model_dir):
    return _build(tmp_path_factory, medium_corpus, tiny_model_dir, IVF_FACTORY, "ivf", keep_codes=True)


@pytest.fixture(scope="module")
def pq_index(tmp_path_factory, medium_corpus, tiny_model_dir):
    return _build(tmp_path_factory, medium_corpus, tiny_model_dir, PQ_FACTORY, "pq", keep_codes=True)


# --- factory choice and validation ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "n, kind",
    [(5_000, "Flat"), (99_999, "Flat"), (100_000, "SQ8"), (2_000_000, "SQ8"), (10_000_000, "PQ96"), (80_000_000, "x4fs")],
)
def test_auto_factory_across_sizes(n, kind):
    factory = auto_factory(n, 384)
    assert kind in factory
    spec = validate_factory(factory, 384, n)  # what auto picks is always trainable on the corpus
    if spec.nlist:
        assert spec.nlist & (spec.nlist - 1) == 0 and MIN_POINTS_PER_CENTROID * spec.nlist <= n
        assert training_size(spec, n, 262_144) >= spec.min_train
    create_index(factory, 384, contiguous_ids=True)  # and faiss builds it


def test_auto_nlist_grows_with_the_corpus():
    nlists = [parse_factory(auto_factory(n, 384)).nlist for n in (100_000, 1_000_000, 4_000_000, 20_000_000)]
    assert nlists == sorted(nlists) and nlists[0] < nlists[-1]


def test_parse_factory_reads_nlist_m_and_bits():
    spec = parse_factory("OPQ96_384,IVF4096,PQ96x4fs")
    assert (spec.opq_m, spec.opq_dim, spec.nlist, spec.pq_m, spec.pq_nbits, spec.fast_scan) == (96, 384, 4096, 96, 4, True)
    assert parse_factory("IVF256,SQ8").sq == "SQ8" and not parse_factory("Flat").needs_training


@pytest.mark.parametrize(
    "factory, n, match",
    [
        ("IVF1024,SQ8", 5_000, r"too few to train.*IVF1024 needs 39 per centroid = 39936\); use a smaller nlist "
                               r"\(IVF128\), or a larger corpus or --factory auto"),
        # the codebooks are short, not the lists: no nlist advised (it advised a larger one than asked)
        ("OPQ8,IVF16,PQ8", 5_000, r"8-bit OPQ/PQ codebooks need 39 per code = 9984\); use 4-bit codes "
                                  r"\(PQ8x4fs\), or a larger corpus or --factory auto"),
        ("IVF1024,PQ16", 5_000, r"use a smaller nlist \(IVF128\) and 4-bit codes \(PQ16x4fs\), or a larger"),
        ("IVF16,SQ8", 2, r"IVF16 needs 39 per centroid = 624\); use a larger corpus or --factory auto"),
        ("IVF16,PQ32x4fs,RFlat", 100_000, r"refinement \(RFlat, Refine\) is not a factory part here"),
        ("IVF64,PQ7", 100_000, r"PQ7 needs M dividing the dimension 32"),
    ],
)
def test_too_small_or_wrong_factory_is_a_clear_error(factory, n, match):
    with pytest.raises(FactoryError, match=match):
        validate_factory(factory, 32, n)


def test_too_small_corpus_is_refused_before_encoding(tmp_path, tiny_corpus, tiny_model_dir, monkeypatch):
    """A corpus with too few tokens for the factory is refused before its passages are encoded (it was refused once
    every passage was), with the token count a build encodes."""
    import re

    out = tmp_path / "idx"
    with monkeypatch.context() as m:
        m.setattr(build_mod, "encode_corpus", lambda *a, **k: pytest.fail("encoded before counting the tokens"))
        with pytest.raises(FactoryError, match=r"too few to train 'IVF4096,SQ8'.*--factory auto") as e:
            build_index(tiny_corpus, tiny_model_dir, out, BuildOptions(factory="IVF4096,SQ8", progress=False))
    assert not (out / build_mod.SHARDS).exists()
    built = build_index(tiny_corpus, tiny_model_dir, out, BuildOptions(factory="auto", progress=False, precision="fp32"))
    assert built.factory == "Flat" and built.faiss_params["requested_factory"] == "auto"
    assert re.search(r"the corpus has (\d+) vectors", str(e.value)).group(1) == str(built.tokens)


def test_corpus_count_stops_once_there_are_enough_tokens(tmp_path, tiny_model_dir, monkeypatch):
    """The count before encoding reads a large corpus only as far as the tokens the factory needs."""
    from spanseek.core.config import EncoderConfig
    from spanseek.core.model import CONFIG_NAME

    corpus = tmp_path / "c.jsonl"
    corpus.write_text("".join(json.dumps({"id": str(i), "paragraphs": ["word " * 50]}) + "\n" for i in range(400))
                      + "{not json\n")  # a line the count must not reach
    config = EncoderConfig.load(tiny_model_dir / CONFIG_NAME)
    build_mod.check_corpus_size(corpus, parse_factory("IVF16,SQ8"), config, batch=8)  # 624 tokens: the first lines
    with pytest.raises(CorpusError, match=r"c.jsonl:401"):
        build_mod.check_corpus_size(corpus, parse_factory("IVF1024,SQ8"), config, batch=8)


@pytest.mark.parametrize("factory,match", [("IVF0,SQ8", "nlist, M and the PCA dimension must be positive"), ("IVF64,Garbage", "faiss cannot build factory"),
                                           ("IVF8,PQ5", "PQ5 needs M dividing the dimension")])
def test_invalid_factory_string_fails_before_encoding(tmp_path, tiny_corpus, tiny_model_dir, monkeypatch, factory,
                                                      match):
    """A factory the parser reads but faiss refuses, or one that does not fit the model's dimension, is refused
    before the corpus is encoded (it was refused after, the shards kept)."""
    monkeypatch.setattr(build_mod, "encode_corpus", lambda *a, **k: pytest.fail("encoded before validating"))
    with pytest.raises(FactoryError, match=match):
        build_index(tiny_corpus, tiny_model_dir, tmp_path / "i", BuildOptions(factory=factory, progress=False))


@pytest.mark.parametrize("factory,nprobe,match", [
    ("IVF16,SQ8", 17, r"--nprobe 17 is more than the 16 lists of 'IVF16,SQ8' \(--nprobe 16 probes them all\)"),
    ("Flat", 8, r"--nprobe 8 sets the IVF lists a search probes; 'Flat' has none")])
def test_nprobe_that_cannot_apply_is_refused_before_encoding(tmp_path, tiny_corpus, tiny_model_dir, monkeypatch,
                                                             factory, nprobe, match):
    """--nprobe above the factory's lists, or for a factory without lists, is refused before any encoding (it was
    stored as given, or ignored, once the whole corpus was encoded)."""
    monkeypatch.setattr(build_mod, "encode_corpus", lambda *a, **k: pytest.fail("encoded before validating"))
    with pytest.raises(FactoryError, match=match):
        build_index(tiny_corpus, tiny_model_dir, tmp_path / "i", BuildOptions(factory=factory, nprobe=nprobe,
                                                                              progress=False))
    assert not (tmp_path / "i").exists()


def test_codes_source_without_codes_is_refused_before_encoding(tmp_path, tiny_corpus, tiny_model_dir, monkeypatch):
    """--vector-source codes with a factory that has no codes (Flat), or with the codes store switched off, is refused
    before any encoding (it was refused once the corpus was encoded and faiss filled)."""
    monkeypatch.setattr(build_mod, "encode_corpus", lambda *a, **k: pytest.fail("encoded before validating"))
    with pytest.raises(FactoryError, match=r"--vector-source codes decodes .*; 'Flat' has none"):
        build_index(tiny_corpus, tiny_model_dir, tmp_path / "i", BuildOptions(vector_source="codes", progress=False))
    assert not (tmp_path / "i").exists()
    with pytest.raises(ValueError, match="keep_codes off leaves out the codes store"):
        BuildOptions(factory=IVF_FACTORY, vector_source="codes", keep_codes=False)


def test_keep_codes_without_codes_is_refused_or_explained(tmp_path, tiny_corpus, tiny_model_dir, monkeypatch, caplog,
                                                         capsys):
    """--keep-codes with a factory that has no codes (Flat) is refused before any encoding, on the command line in
    one line (it built the index and wrote no codes.npy, without a word); with --factory auto, which picks Flat for
    a small corpus, the build goes on and says that no codes.npy is written."""
    from spanseek.cli import main

    with monkeypatch.context() as m:
        m.setattr(build_mod, "encode_corpus", lambda *a, **k: pytest.fail("encoded before validating"))
        with pytest.raises(FactoryError, match=r"--keep-codes keeps the codes of a compressed index \(codes.npy\); "
                                               r"'Flat' stores the vectors themselves and has none"):
            build_index(tiny_corpus, tiny_model_dir, tmp_path / "i", BuildOptions(keep_codes=True, progress=False))
        assert main(["index", "build", "--corpus", str(tiny_corpus), "--model", str(tiny_model_dir), "--out",
                     str(tmp_path / "i"), "--keep-codes", "--quiet", "--device", "cpu"]) == 2
        err = capsys.readouterr().err
        assert "--keep-codes keeps the codes" in err and len(err.strip().splitlines()) == 1
        assert not (tmp_path / "i").exists()
    caplog.set_level(logging.WARNING, logger="spanseek.indexer.build")
    manifest = build_index(tiny_corpus, tiny_model_dir, tmp_path / "auto",
                           BuildOptions(factory="auto", keep_codes=True, progress=False, recall_sample=0))
    assert manifest.factory == "Flat" and not (tmp_path / "auto" / "codes.npy").exists()
    assert "--factory auto picked 'Flat'" in caplog.text and "--keep-codes writes no codes.npy" in caplog.text


def test_nprobe_beyond_what_auto_picked_is_fitted_to_it(tmp_path, ivf_index, caplog, monkeypatch):
    """With --factory auto the lists are known only once the corpus is counted: an --nprobe above them probes them
    all, and one for a Flat index is left out, each with a warning, rather than failing the encoded build."""
    opts = BuildOptions(factory=IVF_FACTORY, nprobe=9, progress=False, recall_sample=0)
    with pytest.raises(FactoryError, match="more than the 8 lists"):
        reindex(ivf_index, tmp_path / "given", opts)
    with monkeypatch.context() as m:  # auto picking IVF8 (the corpus is small: it picks Flat)
        m.setattr(build_mod, "resolve_factory", lambda *a, **k: IVF_FACTORY)
        built = reindex(ivf_index, tmp_path / "auto", dataclasses.replace(opts, factory="auto"))
    assert (built.faiss_params["nlist"], built.faiss_params["nprobe"]) == (8, 8)
    assert PhraseIndex(tmp_path / "auto").faiss.nprobe == 8
    flat = reindex(ivf_index, tmp_path / "flat", dataclasses.replace(opts, factory="auto", nprobe=4))
    assert flat.factory == "Flat" and "nprobe" not in flat.faiss_params
    assert "--nprobe 4 sets the IVF lists a search probes; 'Flat' has none; --nprobe is left out" in caplog.text


# --- codes store and neighbour sources -----------------------------------------------------------------------


@pytest.mark.parametrize("which", ["ivf_index", "pq_index"])
def test_decoded_neighbours_equal_faiss_reconstruction(request, which):
    import faiss

    idx = PhraseIndex(request.getfixturevalue(which))
    assert idx.codes is not None and idx.codes.shape == (idx.num_tokens, idx.faiss.sa_code_size())
    ids = np.arange(5, 5 + 3 * idx.encoder_config.max_answer_tokens).reshape(3, -1)  # consecutive ids, as span completion reads
    decoded = idx.code_vectors(ids)
    assert decoded.shape == (*ids.shape, idx.vectors.shape[1])
    assert np.allclose(decoded.reshape(-1, decoded.shape[-1]), idx.faiss.sa_decode(idx.faiss.sa_encode(
        idx.token_vectors(ids.reshape(-1)))), atol=1e-5)
    faiss.extract_index_ivf(idx.faiss).make_direct_map()
    oracle = idx.faiss.reconstruct_batch(ids.reshape(-1).astype(np.int64))
    assert np.allclose(decoded.reshape(oracle.shape), oracle, atol=1e-5)


@pytest.mark.parametrize("factory", ["IVF16,PQ16x4fs", "OPQ16,IVF16,PQ16x4fs", "OPQ8,IVF16,PQ8x4", "IVF16,SQ8"])
def test_decode_codes_of_a_read_index_equals_sa_decode_before_writing(factory, tmp_path):
    """Fast-scan indexes read back from disk crash in sa_decode (faiss 1.15); decode_codes must not, and agree."""
    import faiss

    from spanseek.core.phrase_index import decode_codes

    x = np.random.default_rng(0).standard_normal((3000, 32)).astype(np.float32)
    index = create_index(factory, 32, contiguous_ids=True)
    train_index(index, x, 3000, gpu=False)
    add_vectors(index, x, np.arange(len(x)), progress=False, gpu=False)
    codes = index.sa_encode(x[:500])
    expect = index.sa_decode(codes)
    faiss.write_index(index, str(tmp_path / "i.faiss"))
    assert np.allclose(decode_codes(faiss.read_index(str(tmp_path / "i.faiss")), codes), expect, atol=1e-5)


def test_flat_index_has_no_codes_source(tiny_index):
    idx = PhraseIndex(tiny_index)
    assert idx.codes is None and idx.vector_source == "fine"
    with pytest.raises(IndexFormatError, match="no compressed codes"):
        PhraseIndex(tiny_index, vector_source="codes")


@pytest.mark.parametrize("source", ["fine", "codes"])
def test_compressed_search_scores_spans_with_the_chosen_source(pq_index, source):
    idx = PhraseIndex(pq_index)
    searcher = Searcher(idx, vector_source=source)
    rng = np.random.default_rng(0)
    qs, qe = rng.standard_normal((2, 8, idx.vectors.shape[1])).astype(np.float32)
    read = idx.token_vectors if source == "fine" else idx.code_vectors
    for b, hits in enumerate(searcher.search_vectors(qs, qe, SearchParams(unit="phrase", top_k=3, nprobe=8, mode="dense"))):
        assert hits
        for h in hits:
            a, e = idx.passage_range(h.passage_id)
            offs = np.asarray(idx.token_offsets[a:e])
            # the span's tokens: its text is cut to words, so it may have started or ended on punctuation next to
            # them (". In 1548" reads "In 1548"); its score is one pair's of those tokens
            text, lo, hi = idx.passages[h.passage_id]["text"], h.start, h.end
            while lo > 0 and not text[lo - 1].isalnum():
                lo -= 1
            while hi < len(text) and not text[hi].isalnum():
                hi += 1
            inside = a + np.flatnonzero((offs[:, 0] >= lo) & (offs[:, 1] <= hi) & (offs[:, 1] > offs[:, 0]))
            v = read(inside)
            pairs = (v @ qs[b])[:, None] + (v @ qe[b])[None, :]
            assert np.isclose(pairs[np.triu_indices(len(inside))], h.score, rtol=1e-4, atol=1e-4).any(), h.text


def test_refine_reranks_candidates_by_the_fine_vectors():
    from spanseek.core.dense import refine

    rng = np.random.default_rng(2)
    vecs = rng.standard_normal((50, 6)).astype(np.float32)
    queries = rng.standard_normal((3, 6)).astype(np.float32)
    ids = np.stack([rng.permutation(50)[:10] for _ in range(3)])
    ids[1, 4:] = -1  # fewer candidates than k: the rest stays -1
    got = refine(ids, queries, 5, lambda t, q: vecs[t] @ q)
    for row in range(3):
        cand = ids[row][ids[row] >= 0]
        best = cand[np.argsort(-(vecs[cand] @ queries[row]))[:5]]  # brute force over the candidates
        assert got[row, : len(best)].tolist() == best.tolist() and (got[row, len(best) :] == -1).all()


def test_a_reindex_into_an_out_another_job_holds_is_refused_and_changes_nothing(pq_index, tmp_path):
    from spanseek.core import integrity

    out = tmp_path / "flat"
    out.mkdir()
    with integrity.writer_lock(out) as locked:  # a build or reindex into ``out`` under way
        assert locked
        with pytest.raises(BuildError, match=rf"--out {out}: (process \d+|another process) holds its lock"):
            reindex(pq_index, out, BuildOptions(factory="Flat", progress=False))
        assert [p.name for p in out.iterdir()] == [integrity.LOCK]
    reindex(pq_index, out, BuildOptions(factory="Flat", progress=False))  # once it is let go
    with pytest.raises(BuildError, match="already holds a finished index"):
        reindex(pq_index, out, BuildOptions(factory="Flat", progress=False))


def test_pq_search_refined_over_every_token_equals_exact_search(pq_index, tmp_path, monkeypatch):
    from spanseek.core import dense as search

    reindex(pq_index, tmp_path / "flat", BuildOptions(factory="Flat", progress=False))  # same fine store
    exact, idx = Searcher(PhraseIndex(tmp_path / "flat")), PhraseIndex(pq_index)
    pq = Searcher(idx)
    assert pq.dense.refine_factor == search.REFINE_FACTOR and exact.dense.refine_factor == 1
    monkeypatch.setattr(search, "REFINE_MAX_FETCH", idx.faiss.ntotal)
    pq.dense.refine_factor = idx.faiss.ntotal  # every token fetched: the candidates are the exact top k
    rng = np.random.default_rng(4)
    qs, qe = rng.standard_normal((2, 10, idx.vectors.shape[1])).astype(np.float32)
    params = SearchParams(unit="phrase", top_k=3, nprobe=8, mode="dense")
    for got, want in zip(pq.search_vectors(qs, qe, params), exact.search_vectors(qs, qe, params), strict=True):
        assert [(h.start, h.end, h.passage_id) for h in got] == [(h.start, h.end, h.passage_id) for h in want]
        assert np.allclose([h.score for h in got], [h.score for h in want], atol=1e-5)


@pytest.mark.parametrize("unit, top_k", [("phrase", 10), ("passage", 20), ("doc", 5)])
def test_pq_searches_of_every_unit_at_the_usual_depths_are_refined(pq_index, monkeypatch, unit, top_k):
    from spanseek.core import dense as search

    fetched = []
    real = search.refine
    monkeypatch.setattr(search, "refine", lambda ids, *a: fetched.append(ids.shape[1]) or real(ids, *a))
    idx = PhraseIndex(pq_index)
    qs, qe = np.random.default_rng(5).standard_normal((2, 4, idx.vectors.shape[1])).astype(np.float32)
    Searcher(idx).search_vectors(qs, qe, SearchParams(unit=unit, top_k=top_k, mode="dense"))
    assert fetched and fetched[0] == min(idx.faiss.ntotal, search.REFINE_FACTOR * (32 if unit == "phrase" else 8 * top_k
                                                                                   if unit == "passage" else 64))


def test_manifest_records_compression(ivf_index):
    m = PhraseIndex(ivf_index).manifest
    assert m.factory == IVF_FACTORY and (ivf_index / CODES).is_file()
    assert m.faiss_params["nlist"] == 8 and m.faiss_params["code_size"] == 1 + 32
    assert m.faiss_params["vector_source"] == "fine" and m.indexed_tokens == m.tokens


# --- recall of IVF-PQ on synthetic clustered vectors --------------------------------------------------------

RECALL_BOUND = 0.7  # measured 0.79 (10-recall@10) and 0.99 (exact top-1 within the top 10), nprobe 16


def test_ivfpq_recall_vs_flat_oracle():
    """Unit vectors on 4-dim patches around 32 centres; queries near data points; exact IP top-10 as oracle."""
    import faiss

    rng = np.random.default_rng(0)
    d, n, n_clusters = 32, 10_000, 32
    centres = rng.standard_normal((n_clusters, d)).astype(np.float32) * 3
    basis = rng.standard_normal((n_clusters, 4, d)).astype(np.float32)
    c = rng.integers(n_clusters, size=n)
    x = centres[c] + np.einsum("nk,nkd->nd", rng.standard_normal((n, 4)).astype(np.float32), basis[c])
    x = (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)
    q = (x[rng.choice(n, 200, replace=False)] + 0.1 * rng.standard_normal((200, d))).astype(np.float32)
    exact = np.argsort(-(q @ x.T), axis=1)[:, :10]  # brute-force oracle
    index = create_index("IVF32,PQ32x4", d, contiguous_ids=True)
    train_index(index, x, 5_000, gpu=False)
    add_vectors(index, x, np.arange(n), progress=False, gpu=False)
    faiss.extract_index_ivf(index).nprobe = 16
    _, found = index.search(q, 10)
    recall10 = np.mean([len(np.intersect1d(f, e)) / 10 for f, e in zip(found, exact, strict=True)])
    top1_in_10 = np.mean([e[0] in f for f, e in zip(found, exact, strict=True)])
    assert recall10 >= RECALL_BOUND and top1_in_10 >= 0.95, (recall10, top1_in_10)


# --- token filter --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def linear_filter_model_dir(tmp_path_factory, tiny_config):
    """A tiny model with a linear filter head (the shared filter_model_dir has a hidden layer)."""
    from dataclasses import replace

    import torch

    from spanseek.core.model import PhraseModel

    torch.manual_seed(1)
    return PhraseModel(replace(tiny_config, filter_head=True)).save(tmp_path_factory.mktemp("models") / "filter")


def test_filter_threshold_indexes_only_kept_tokens(tmp_path_factory, medium_corpus, linear_filter_model_dir):
    import torch

    from spanseek.core.model import load_model

    out = _build(tmp_path_factory, medium_corpus, linear_filter_model_dir, IVF_FACTORY, "filtered", filter_threshold=0.5,
                 keep_codes=True)
    idx = PhraseIndex(out)
    assert not (out / "token_filter.npy").exists()  # the row map records what was kept
    model = load_model(linear_filter_model_dir)
    kept = verify.indexed_ids(idx)
    with torch.no_grad():  # only kept tokens keep a fine-store row
        probs = torch.sigmoid(model.filter_logits(torch.from_numpy(idx.token_vectors(kept)))).numpy()
    assert (probs >= 0.5 - 2e-3).any(axis=1).all()  # fp16 vectors: probabilities within rounding
    assert 0 < len(kept) < idx.num_tokens
    assert verify.verify_index(out, sample=50)["ok"]
    assert idx.manifest.filter_threshold == 0.5 and idx.manifest.indexed_tokens == idx.faiss.ntotal == len(kept)
    assert idx.vectors.data.shape[0] == len(kept) and len(idx.codes) == idx.num_tokens  # codes keep every token
    _, found = idx.faiss.search(idx.token_vectors(np.arange(50)), 20)
    assert np.isin(found[found >= 0], kept).all()


def test_filter_threshold_needs_a_filter_head(tmp_path, tiny_corpus, tiny_model_dir):
    with pytest.raises(BuildError, match="needs a model with a filter head"):
        build_index(tiny_corpus, tiny_model_dir, tmp_path / "i", BuildOptions(filter_threshold=0.5, progress=False))


# --- resume after a killed IVF build -------------------------------------------------------------------------


def test_killed_ivf_build_resumes(tmp_path, medium_corpus, tiny_model_dir, ivf_index, monkeypatch):
    out = tmp_path / "resumed"
    opts = BuildOptions(factory=IVF_FACTORY, shard_passages=40, progress=False, precision="fp32", gpu=False,
                        keep_codes=True)
    real_encode = shards.encode_shard
    calls = []

    def dying_encode(*args, **kwargs):
        calls.append(args[3].name)  # (encoder, tokenizer, texts, dest, key)
        if len(calls) == 2:
            raise KeyboardInterrupt("killed")
        return real_encode(*args, **kwargs)

    monkeypatch.setattr(shards, "encode_shard", dying_encode)
    with pytest.raises(KeyboardInterrupt):
        build_index(medium_corpus, tiny_model_dir, out, opts)
    monkeypatch.setattr(build_mod, "add_vectors", lambda *a, **k: (_ for _ in ()).throw(KeyboardInterrupt("killed")))
    with pytest.raises(KeyboardInterrupt):  # killed again, in the faiss stage this time
        build_index(medium_corpus, tiny_model_dir, out, opts)
    assert calls.count("000000") == 1  # the finished shard was not encoded again
    monkeypatch.undo()
    m = build_index(medium_corpus, tiny_model_dir, out, opts)
    fresh, resumed = PhraseIndex(ivf_index), PhraseIndex(out)
    assert m.tokens == fresh.manifest.tokens and m.factory == IVF_FACTORY
    assert np.array_equal(np.asarray(resumed.vectors), np.asarray(fresh.vectors))
    assert np.array_equal(np.asarray(resumed.codes), np.asarray(fresh.codes))
    assert not (out / build_mod.SHARDS).exists()


# --- GPU -----------------------------------------------------------------------------------------------------


def _gpu_unusable() -> str | None:
    from spanseek.indexer.faiss_index import gpu_unusable_reason

    return gpu_unusable_reason()


@pytest.mark.gpu
@pytest.mark.skipif(_gpu_unusable() is not None, reason="faiss cannot build on a GPU here")
@pytest.mark.parametrize("factory", ["IVF64,SQ8", "OPQ16,IVF64,PQ16", "IVF64,PQ32x4fs"])
def test_gpu_build_matches_cpu_format_and_recall(factory, tmp_path):
    import faiss

    rng = np.random.default_rng(0)
    x = rng.standard_normal((20_000, 64)).astype(np.float32)
    q = x[:100] + 0.1 * rng.standard_normal((100, 64)).astype(np.float32)
    exact = np.argsort(-(q @ x.T), axis=1)[:, :10]
    recalls = {}
    for gpu in (False, True):
        index = create_index(factory, 64, contiguous_ids=True)
        train_index(index, x, 10_000, gpu=gpu)
        add_vectors(index, x, np.arange(len(x)), progress=False, gpu=gpu)
        path = tmp_path / f"{gpu}.faiss"
        faiss.write_index(index, str(path))  # a CPU index: same file format either way
        index = faiss.read_index(str(path))
        faiss.extract_index_ivf(index).nprobe = 16
        _, found = index.search(q, 10)
        recalls[gpu] = np.mean([len(np.intersect1d(f, e)) / 10 for f, e in zip(found, exact, strict=True)])
    assert recalls[True] >= recalls[False] - 0.05, recalls


def test_gpu_without_kernels_for_the_card_falls_back_or_names_why(monkeypatch, caplog):
    """faiss-gpu-cu12 (PyPI) sees an H100 but aborts on first use (no sm_90 kernels): auto mode builds on the
    CPU with a warning, an explicit --gpu fails with the reason, and --no-gpu never probes."""
    import subprocess

    import faiss

    from spanseek.indexer import faiss_index

    monkeypatch.setattr(faiss, "get_num_gpus", lambda: 1, raising=False)
    aborted = subprocess.CompletedProcess([], -6, "", "Faiss assertion 'err__ == cudaSuccess' failed ... CUDA error "
                                                     "209 no kernel image is available for execution on the device")
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: aborted)
    faiss_index.gpu_unusable_reason.cache_clear()
    try:
        with caplog.at_level("WARNING"):
            assert faiss_index.use_gpu(None) is False
        assert "no kernel image" in caplog.text
        with pytest.raises(faiss_index.FactoryError, match="cannot run on it.*no kernel image"):
            faiss_index.use_gpu(True)
        assert faiss_index.use_gpu(False) is False
        monkeypatch.setattr(subprocess, "run", lambda *a, **k: subprocess.CompletedProcess([], 0, "", ""))
        faiss_index.gpu_unusable_reason.cache_clear()
        assert faiss_index.use_gpu(None) is True and faiss_index.use_gpu(True) is True
    finally:
        faiss_index.gpu_unusable_reason.cache_clear()


@pytest.fixture(scope="module")
def many_lists(tmp_path_factory, medium_corpus, tiny_model_dir):
    """An IVF index of many short lists (about a hundred tokens each): one list holds a few units."""
    return _build(tmp_path_factory, medium_corpus, tiny_model_dir, "IVF24,SQ8", "many-lists")


@pytest.mark.parametrize("unit", ["passage", "doc"])
def test_an_ivf_search_fills_top_k_when_its_lists_hold_too_few_units(many_lists, unit):
    """A unit search deepens its token search until top_k units are among the candidates, but an IVF search finds
    only the tokens of its nprobe lists: at nprobe 1 a search for every document came back with a few. The lists
    are widened until the units are found, as a filter's (or an exact index's) search fills the page."""
    idx = PhraseIndex(many_lists)
    searcher = Searcher(idx)
    n = searcher.selection(None).unit_count[unit]
    qs, qe = np.random.default_rng(7).standard_normal((2, 6, idx.vectors.shape[1])).astype(np.float32)
    for nprobe in (1, None):
        got = searcher.search_vectors(qs, qe, SearchParams(unit=unit, top_k=n, mode="dense", nprobe=nprobe))
        assert [len(hits) for hits in got] == [n] * len(qs), nprobe
        assert all(len({h.passage_id if unit == "passage" else h.doc_id for h in hits}) == n for hits in got)


def test_build_summary_says_its_size_and_recall(ivf_index, pq_index, tiny_index):
    """What `index build` prints: the bytes the index takes on disk and, for a compressed index, the recall against
    exact search that the build measured (and `index verify` re-measures); an exact index has none to print."""
    from spanseek.core.phrase_index import Manifest
    from spanseek.indexer.cli import summary

    for path in (ivf_index, pq_index):
        manifest = Manifest.load(path)
        printed = summary(manifest, str(path))
        assert printed["disk_bytes"] == sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
        assert printed["disk_bytes"] > sum(f["bytes"] for f in manifest.to_dict()["files"].values()) > 0
        recall = manifest.faiss_params["recall"]
        assert printed["recall"] == {"recall@1": recall["recall@1"], "recall@10": recall["recall@10"]}
        assert 0 < printed["recall"]["recall@1"] <= 1
    exact = summary(Manifest.load(tiny_index), str(tiny_index))
    assert "recall" not in exact and exact["disk_bytes"] > 0


def test_add_through_an_alias_prints_the_index_it_changed(tmp_path, tiny_index, tiny_model_dir, capsys):
    """`index add --index ALIAS` (a pointer file, `index switch --pointer`) prints the summary of the directory the
    alias names: it read the pointer file as the index, printing disk_bytes 0 and deleted documents as live."""
    import shutil

    from spanseek.cli import main
    from spanseek.core.alias import switch_alias
    from spanseek.core.phrase_index import Manifest
    from spanseek.indexer.cli import summary
    from spanseek.indexer.lifecycle import delete_documents

    index = tmp_path / "v1"
    shutil.copytree(tiny_index, index)
    delete_documents(index, [json.loads((index / "docs.jsonl").read_text().splitlines()[0])["id"]])
    switch_alias(tmp_path / "current", index, pointer=True)
    more = tmp_path / "more.jsonl"
    more.write_text(json.dumps({"id": "more", "title": "More", "paragraphs": ["In 1901 Hugo built it."]}) + "\n")
    capsys.readouterr()
    argv = ["index", "add", "--index", str(tmp_path / "current"), "--corpus", str(more), "--model", str(tiny_model_dir)]
    assert main([*argv, "--quiet"]) == 0
    printed = json.loads(capsys.readouterr().out)
    want = summary(Manifest.load(index), str(index))
    assert printed["disk_bytes"] == want["disk_bytes"] > 0
    assert (printed["documents"], printed["deleted_documents"]) == (want["documents"], 1)
    assert printed["index"] == str(index) and printed["manifest"] == str(index / "manifest.json")


@pytest.mark.parametrize("opts", [BuildOptions(factory="IVF4096,SQ8", progress=False, recall_sample=0),
                                  BuildOptions(factory="auto", vector_source="codes", progress=False, recall_sample=0)])
def test_a_refused_reindex_says_what_it_keeps(ivf_index, tmp_path, opts):
    """A reindex encodes nothing: a factory refused once the tokens are counted names the source, left as it was,
    and the stores linked into --out, not encoded shards."""
    with pytest.raises(FactoryError) as refused:
        reindex(ivf_index, tmp_path / "re", opts)
    assert "encoded shards" not in str(refused.value)
    assert str(refused.value).endswith(f"({ivf_index} is unchanged and the stores linked from it stay in "
                                       f"{tmp_path / 're'}: rerun the reindex with another --factory)")
