"""Incremental add (``spanseek index add``) and verification (``spanseek index verify``).

Oracles: an index extended by ``add`` holds exactly the arrays of one built from both corpora at once (vectors,
maps, passages, documents); search finds a phrase of the added text; verify reports recall 1.0 for the exact
index, and names the problem when a store is damaged.

    .venv/bin/python -m pytest -q tests/indexer/test_add_verify.py
"""

from __future__ import annotations

import dataclasses
import json
import shutil

import numpy as np
import pytest

from spanseek.core.params import SearchParams
from spanseek.core.phrase_index import MANIFEST, PASSAGES, TOKEN_FLAGS, PhraseIndex
from spanseek.core.search import Searcher
from spanseek.core.spans import best_span
from spanseek.indexer import add as add_mod
from spanseek.indexer.add import add_documents
from spanseek.indexer.build import BuildOptions, build_index
from spanseek.indexer.verify import built_by, memory_per_token, verify_index
from tests.conftest import make_corpus

NEW_DOC = {"id": "new-1", "title": "Zebra Chronicle",
           "paragraphs": ["The zebra orchestra performed quantum symphonies in Ulaanbaatar during 1911."]}


def _write(path, docs):
    path.write_text("".join(json.dumps(d) + "\n" for d in docs))
    return path


@pytest.fixture(scope="module")
def corpora(tmp_path_factory):
    d = tmp_path_factory.mktemp("corpora")
    base = make_corpus(seed=2, n_docs=14, n_paras=5)
    more = [*make_corpus(seed=3, n_docs=3, n_paras=2), NEW_DOC]
    more = [{**doc, "id": f"m{i}"} if doc is not NEW_DOC else doc for i, doc in enumerate(more)]
    return _write(d / "base.jsonl", base), _write(d / "more.jsonl", more), _write(d / "all.jsonl", base + more)


def _opts(factory: str) -> BuildOptions:
    return BuildOptions(factory=factory, shard_passages=30, progress=False, precision="fp32", gpu=False)


@pytest.fixture(scope="module", params=["Flat", "IVF8,SQ8"])
def added_index(request, tmp_path_factory, corpora, tiny_model_dir):
    base, more, _ = corpora
    out = tmp_path_factory.mktemp("added") / "idx"
    build_index(base, tiny_model_dir, out, _opts(request.param))
    add_documents(out, more, model=tiny_model_dir, opts=_opts(request.param))
    return out


def test_add_equals_building_everything_at_once(added_index, corpora, tiny_model_dir, tmp_path):
    _, _, everything = corpora
    whole = tmp_path / "whole"
    factory = PhraseIndex(added_index).manifest.factory
    build_index(everything, tiny_model_dir, whole, _opts(factory))
    a, b = PhraseIndex(added_index), PhraseIndex(whole)
    for field in ("tokens", "passages", "documents", "indexed_tokens"):
        assert getattr(a.manifest, field) == getattr(b.manifest, field), field
    for arr in ("vectors", "token_passage", "token_offsets", "token_flags", "passage_tokens"):
        assert np.array_equal(np.asarray(getattr(a, arr)), np.asarray(getattr(b, arr))), arr
    assert a.passages == b.passages and a.docs == b.docs
    assert a.faiss.ntotal == a.num_tokens
    if a.codes is not None:
        assert len(a.codes) == a.num_tokens
    assert not (added_index / add_mod.STAGING).exists() and not (added_index / add_mod.JOURNAL).exists()


def test_search_finds_the_added_text(added_index):
    idx = PhraseIndex(added_index)
    searcher = Searcher(idx)
    p = next(i for i, pas in enumerate(idx.passages) if "zebra orchestra" in pas["text"])
    a, b = idx.passage_range(p)
    vecs = idx.token_vectors(np.arange(a, b))
    qs, qe = 5 * vecs[1], 5 * vecs[2]  # a question that asks for tokens 1..2 of the new passage
    i, j, s = best_span(vecs @ qs, vecs @ qe, idx.token_flags[a:b], searcher.max_answer_tokens)
    [hit] = searcher.search_vectors(qs[None], qe[None], SearchParams(unit="passage", top_k=1, nprobe=8, mode="dense"))[0]
    if hit.passage_id == p:
        assert hit.title == "Zebra Chronicle" and hit.doc_id == "new-1"
    else:  # a random tiny model may score another passage higher: then that one must truly score higher
        assert hit.score >= s - 1e-4
    [doc] = searcher.search_vectors(qs[None], qe[None], SearchParams(unit="doc", top_k=1, nprobe=8, mode="dense"))[0]
    assert doc.title == hit.title


def test_an_exact_build_records_its_recall_as_exact_without_measuring_it(tiny_index, added_index):
    """Measuring a Flat index against the same exact search took a fifth of the demo index's build (2.5 of 12.7 s,
    faiss' heap over every score); it records that it is exact, and verify still measures it (recall 1.0)."""
    assert PhraseIndex(tiny_index).manifest.faiss_params["recall"] == {"exact": True}
    added = PhraseIndex(added_index).manifest  # after `index add` too: Flat, or measured (IVF8,SQ8)
    assert (added.faiss_params["recall"] == {"exact": True}) == (added.factory == "Flat")
    assert added.factory == "Flat" or added.faiss_params["recall"]["recall@10"] >= 0.6
    report = verify_index(tiny_index, sample=50)
    assert report["ok"] and report["recall"]["recall@1"] == 1.0


def test_the_recall_oracle_is_the_brute_force_top_k(monkeypatch):
    from spanseek.indexer import recall

    monkeypatch.setattr(recall, "EXACT_CHUNK", 37)  # several chunks, one short
    rng = np.random.default_rng(3)
    vectors = rng.standard_normal((200, 8)).astype(np.float32)
    ids = np.sort(rng.choice(200, size=150, replace=False))
    queries = rng.standard_normal((9, 8)).astype(np.float32)
    scores = queries @ vectors[ids].T
    expected = ids[np.argsort(-scores, axis=1, kind="stable")[:, :5]]
    assert np.array_equal(recall.exact_topk(vectors, ids, queries, 5), expected)
    got, scores = recall.exact_topk(vectors, ids, queries, 5, with_scores=True)
    assert np.array_equal(got, expected)
    # the same sums as the product of every vector, rounded by place on some BLAS (AVX2's): a few ulp apart
    np.testing.assert_allclose(scores, np.take_along_axis(scores_all := queries @ vectors.T, got, axis=1), rtol=1e-6)
    assert scores_all.shape == (9, 200)


def test_recall_counts_tied_tokens_as_found_and_still_sees_misses():
    """Tokens with equal vectors (a paragraph repeated across documents) are ranked in some order by the index and
    in another by the oracle: an exact index measured recall@10 0.40 against the oracle over a block repeated 40
    times. A tie is a hit; an index that misses is still measured as missing."""
    import faiss

    from spanseek.indexer.recall import measure_recall

    rng = np.random.default_rng(5)
    block = rng.standard_normal((25, 16)).astype(np.float32)
    vectors = np.concatenate([block] * 40)  # 1,000 tokens, each vector 40 times
    ids = np.arange(len(vectors))
    flat = faiss.IndexFlatIP(16)
    flat.add(vectors)
    got = measure_recall(flat, vectors, ids, sample=200, k=10)
    assert got["recall@1"] == 1.0 and got["recall@10"] == 1.0
    distinct = rng.standard_normal((2000, 16)).astype(np.float32)
    quantizer = faiss.IndexFlatIP(16)
    ivf = faiss.IndexIVFFlat(quantizer, 16, 32, faiss.METRIC_INNER_PRODUCT)
    ivf.train(distinct)
    ivf.add(distinct)
    ivf.nprobe = 1
    missed = measure_recall(ivf, distinct, np.arange(2000), sample=200, k=10)
    assert missed["recall@10"] < 0.9


def test_verify_reports_recall_and_memory(tiny_index, added_index):
    exact = verify_index(tiny_index, sample=100)
    assert exact["ok"] and exact["recall"]["recall@1"] == 1.0 and exact["recall"]["recall@10"] == 1.0
    ivf = verify_index(added_index, sample=100, nprobe=8)
    assert ivf["ok"] and ivf["recall"]["recall@10"] >= 0.6, ivf  # tiny random-BERT vectors are nearly collinear
    # the recall says at which nprobe, of how many lists (an exact index has none: its nprobe is None)
    assert exact["recall"]["nprobe"] is None
    if "nlist" in ivf["recall"]:  # (the added index is built both ways)
        nlist = ivf["recall"]["nlist"]
        assert ivf["recall"]["nprobe"] == min(8, nlist) == 8
        assert verify_index(added_index, sample=20, nprobe=10_000)["recall"]["nprobe"] == nlist
    else:
        assert ivf["recall"]["nprobe"] is None and "IVF" not in PhraseIndex(added_index).manifest.factory
    mem = memory_per_token(PhraseIndex(tiny_index))
    d = PhraseIndex(tiny_index).vectors.shape[1]
    assert mem["ram_breakdown"]["faiss"] >= 4 * d  # exact: fp32 vectors in RAM
    assert mem["mapped_breakdown"]["vectors.npy"] == 2 * d  # fp16 fine store on disk
    assert mem["disk_bytes_per_token"] > mem["mapped_bytes_per_token"]


@pytest.mark.parametrize("product", ["pieces", "mkl"])
def test_the_memory_counts_the_transposed_copy_a_scan_keeps(tiny_index, product, monkeypatch):
    """Where flat scans keep the vectors transposed too (the pieces product), the RAM per token says so."""
    from spanseek.core import flat_search

    monkeypatch.setattr(flat_search, "PRODUCT", product)
    mem = memory_per_token(PhraseIndex(tiny_index))
    d = PhraseIndex(tiny_index).vectors.shape[1]
    assert mem["ram_breakdown"].get("flat_transposed") == (4 * d if product == "pieces" else None)


@pytest.mark.parametrize("flags", ["avx2 avx512f avx512_bf16", "avx2 avx512f avx512_bf16 avx512_fp16", "avx2"])
def test_the_memory_counts_the_bf16_copy_a_scan_keeps(tiny_index, flags, monkeypatch):
    """Where small batches' scans screen with a bf16 copy of the vectors (AVX-512 BF16 without FP16), the RAM per
    token counts its 2 bytes a dimension; within its bound only."""
    from spanseek.core import bf16_scan, flat_search

    monkeypatch.setattr(flat_search, "cpu_info", lambda: {"vendor_id": "AuthenticAMD", "flags": flags})
    monkeypatch.setattr(bf16_scan, "HALF_MIN_TOKENS", 0)
    monkeypatch.setattr(bf16_scan, "BF16_BYTES", 1 << 30)
    index = PhraseIndex(tiny_index)
    d = index.vectors.shape[1]
    kept = flags == "avx2 avx512f avx512_bf16"
    assert memory_per_token(index)["ram_breakdown"].get("flat_bf16") == (2 * d if kept else None)
    monkeypatch.setattr(bf16_scan, "BF16_BYTES", 0)
    assert "flat_bf16" not in memory_per_token(index)["ram_breakdown"]


def test_verify_says_which_model_built_the_index(tiny_index, tiny_model_dir):
    from spanseek.core.model import model_fingerprint, phrase_fingerprint, resolve_model

    model = verify_index(tiny_index, sample=10)["model"]
    assert model["fingerprint"] == model_fingerprint(tiny_model_dir)
    assert model["phrase_fingerprint"] == phrase_fingerprint(tiny_model_dir)
    assert model["ref"] == PhraseIndex(tiny_index).manifest.model_ref and model["bundled_default"] is False
    manifest = PhraseIndex(tiny_index).manifest
    default = dataclasses.replace(manifest, phrase_fingerprint=phrase_fingerprint(resolve_model("default")))
    assert model["bundled"] is None
    assert built_by(default)["bundled_default"] is True and built_by(default)["bundled"] == "default"
    earlier = dataclasses.replace(manifest, phrase_fingerprint=phrase_fingerprint(resolve_model("default-2026-11")))
    assert built_by(earlier)["bundled"] == "default-2026-11" and built_by(earlier)["bundled_default"] is False
    older = built_by(dataclasses.replace(manifest, phrase_fingerprint=None))  # an index from before the fingerprint
    assert older["bundled_default"] is None and older["bundled"] is None


def test_verify_names_a_damaged_store(tmp_path, tiny_index):
    broken = tmp_path / "broken"
    shutil.copytree(tiny_index, broken)
    flags = np.load(broken / TOKEN_FLAGS)
    np.save(broken / TOKEN_FLAGS, flags[:-3])
    report = verify_index(broken)  # the recorded size differs
    assert not report["ok"] and report["problems"][0].startswith(f"{broken / TOKEN_FLAGS}: ")
    manifest = json.loads((broken / MANIFEST).read_text())
    for key in ("files", "checksum"):  # as written before checksums: the maps are what is left to check
        del manifest[key]
    (broken / MANIFEST).write_text(json.dumps(manifest))
    report = verify_index(broken)
    assert not report["ok"] and "disagree in length" in report["problems"][0]
    np.save(broken / TOKEN_FLAGS, flags)
    lines = (broken / PASSAGES).read_text().splitlines()
    lines[0] = json.dumps({**json.loads(lines[0]), "text": "x"})
    (broken / PASSAGES).write_text("\n".join(lines) + "\n")
    report = verify_index(broken)
    assert not report["ok"] and any("offsets" in p for p in report["problems"])


def test_cli_add_and_verify(tmp_path, corpora, tiny_model_dir, capsys):
    from spanseek.cli import main

    base, more, _ = corpora
    out = tmp_path / "idx"
    build_index(base, tiny_model_dir, out, _opts("Flat"))
    assert main(["index", "add", "--index", str(out), "--corpus", str(more), "--model", str(tiny_model_dir), "--quiet"]) == 0
    said = capsys.readouterr()
    assert json.loads(said.out)["documents"] == 14 + 4 and "added 4 documents" in said.err
    assert main(["index", "verify", str(out), "--sample", "50"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] and report["recall"]["recall@1"] == 1.0
