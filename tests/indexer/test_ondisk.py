"""IVF indexes with their inverted lists on disk (``spanseek index build --on-disk``).

Oracle: the in-memory index built from the same vectors: faiss results and phrase hits are identical, also
after the index directory is moved; a build killed between blocks resumes with the saved trained index and the
finished blocks, and ends with the same index.

    .venv/bin/python -m pytest -q tests/indexer/test_ondisk.py
"""

from __future__ import annotations

import inspect
import json
import logging
import shutil
from pathlib import Path

import numpy as np
import pytest

from spanseek.core.faiss_spec import FactoryError
from spanseek.core.params import SearchParams
from spanseek.core.phrase_index import IVFDATA, PhraseIndex
from spanseek.core.search import Searcher
from spanseek.indexer import build as build_mod
from spanseek.indexer import ondisk
from spanseek.indexer.add import add_documents
from spanseek.indexer.build import BuildError, BuildOptions, build_index, reindex
from spanseek.indexer.ondisk import check_on_disk
from spanseek.indexer.verify import verify_index

FACTORY = "IVF4,SQ8"
BLOCK = 300  # tokens per block in these tests: several blocks to merge


def _opts(**kw) -> BuildOptions:
    return BuildOptions(**{"factory": FACTORY, "shard_passages": 7, "progress": False, "precision": "fp32",
                           "gpu": False, **kw})


@pytest.fixture(scope="module")
def in_memory(tmp_path_factory, tiny_index):
    out = tmp_path_factory.mktemp("ondisk") / "mem"
    reindex(tiny_index, out, _opts())
    return out


@pytest.fixture(scope="module")
def built_on_disk(tmp_path_factory, in_memory):
    """The on-disk index, and what its build printed on standard output (at the C level too)."""
    import os
    import tempfile

    out = tmp_path_factory.mktemp("ondisk") / "disk"
    with tempfile.TemporaryFile() as captured, pytest.MonkeyPatch.context() as mp:
        mp.setattr(ondisk, "BLOCK_TOKENS", BLOCK)
        saved = os.dup(1)
        os.dup2(captured.fileno(), 1)
        try:
            reindex(in_memory, out, _opts(on_disk=True))
        finally:
            os.dup2(saved, 1)
            os.close(saved)
        captured.seek(0)
        return out, captured.read().decode()


@pytest.fixture(scope="module")
def on_disk(built_on_disk):
    return built_on_disk[0]


def test_an_on_disk_build_prints_nothing_on_standard_output(built_on_disk):
    """faiss's "resizing ... to N bytes" came before the build's JSON summary, which no longer parsed."""
    assert built_on_disk[1] == ""


def _same_search(a: PhraseIndex, b: PhraseIndex) -> None:
    q = a.token_vectors(np.arange(0, a.num_tokens, 37))
    for nprobe in (2, 8):
        da, ia = a.faiss.search(q, 10, params=a.search_parameters(nprobe))
        db, ib = b.faiss.search(q, 10, params=b.search_parameters(nprobe))
        assert np.array_equal(ia, ib) and np.array_equal(da, db)
    qs, qe = np.random.default_rng(0).standard_normal((2, 10, a.vectors.shape[1])).astype(np.float32)
    params = SearchParams(unit="phrase", top_k=5, mode="dense")
    assert Searcher(a).search_vectors(qs, qe, params) == Searcher(b).search_vectors(qs, qe, params)


def test_on_disk_index_searches_like_the_in_memory_one(in_memory, on_disk, tmp_path, capfd):
    capfd.readouterr()
    mem, disk = PhraseIndex(in_memory), PhraseIndex(on_disk)
    printed = capfd.readouterr()  # faiss's note on where the lists are, at every open: not printed at all
    assert printed.out == "" and "ondisk" not in printed.err
    assert disk.manifest.faiss_params["on_disk"] and IVFDATA in (disk.manifest.files or {})
    assert disk.faiss.ntotal == mem.faiss.ntotal == mem.num_tokens
    assert isinstance(disk.token_passage, np.memmap) and isinstance(disk.token_flags, np.memmap)
    assert not (on_disk / "ivf_blocks").exists()
    _same_search(mem, disk)
    del disk
    moved = on_disk.rename(tmp_path / "moved")  # the lists are found next to index.faiss, not where they were
    try:
        _same_search(mem, PhraseIndex(moved))
        report = verify_index(moved, sample=50)
        assert report["ok"], report["problems"]
        assert report["memory"]["mapped_breakdown"][IVFDATA] > 0
    finally:
        moved.rename(on_disk)


def _lists(index: PhraseIndex):
    import faiss

    return faiss.downcast_InvertedLists(faiss.extract_index_ivf(index.faiss).invlists)


def test_an_on_disk_index_records_its_lists_by_name_and_reads_them_read_only(on_disk):
    """The index file recorded the build's path of its lists (a copy elsewhere named the original's place), and a
    searcher opened them for writing, which a read-only mount (a docker volume ``:ro``) refused as a damaged file."""
    assert str(on_disk).encode() not in (on_disk / "index.faiss").read_bytes()
    index = PhraseIndex(on_disk)
    lists = _lists(index)
    assert index.lists_recorded == IVFDATA and lists.filename == str(on_disk / IVFDATA) and lists.read_only


def test_an_index_that_recorded_another_place_reads_its_own_lists_and_verify_says_so(on_disk, in_memory, tmp_path):
    """An index whose file records its lists at the place it was built (as builds did), copied elsewhere while a
    file stands at that place (the original, changed since): the copy's own lists are read, and `index verify` names
    both."""
    import faiss

    from spanseek.core.phrase_index import Manifest

    copy, decoy = shutil.copytree(on_disk, tmp_path / "copy"), tmp_path / "built" / IVFDATA
    decoy.parent.mkdir()
    decoy.write_bytes(bytes(len((on_disk / IVFDATA).read_bytes())))  # the same size, no codes
    index = PhraseIndex(copy)
    _lists(index).filename = str(decoy)
    faiss.write_index(index.faiss, str(copy / "index.faiss"))
    del index
    Manifest.create(copy, Manifest.load(copy).to_dict()).write(copy)
    assert str(decoy).encode() in (copy / "index.faiss").read_bytes()
    moved = PhraseIndex(copy)
    assert moved.lists_recorded == str(decoy) and _lists(moved).filename == str(copy / IVFDATA)
    _same_search(PhraseIndex(in_memory), moved)
    report = verify_index(copy, sample=50)
    assert report["ok"], report["problems"]
    assert [n for n in report["notes"] if str(decoy) in n and str(copy / IVFDATA) in n and "nothing to do" in n]


def _dying_add():
    """``ondisk.add_vectors`` killed at the third block (two are finished), and the real one."""
    real_add, added = ondisk.add_vectors, []

    def dying_add(index, vectors, ids, **kw):
        added.append(len(ids))
        if len(added) == 3:
            raise KeyboardInterrupt("killed")
        return real_add(index, vectors, ids, **kw)

    return dying_add, real_add


def test_killed_on_disk_build_resumes_from_its_blocks(in_memory, on_disk, tmp_path, monkeypatch):
    monkeypatch.setattr(ondisk, "BLOCK_TOKENS", BLOCK)
    dying_add, real_add = _dying_add()
    monkeypatch.setattr(ondisk, "add_vectors", dying_add)
    out = tmp_path / "resumed"
    with pytest.raises(KeyboardInterrupt):
        reindex(in_memory, out, _opts(on_disk=True))
    assert len(list((out / "ivf_blocks").glob("block_*.faiss"))) == 2
    trained = []
    monkeypatch.setattr(build_mod, "train_index", lambda *a, **k: trained.append(1) or 0.0)
    monkeypatch.setattr(ondisk, "add_vectors", real_add)
    build_mod.fill_faiss(out, PhraseIndex(in_memory).vectors.shape[1], _opts(on_disk=True))
    assert not trained  # the saved trained index was used
    import faiss

    resumed = faiss.read_index(str(out / "index.faiss"), faiss.IO_FLAG_ONDISK_SAME_DIR)
    ref = PhraseIndex(on_disk)
    q = ref.token_vectors(np.arange(0, ref.num_tokens, 41))
    assert np.array_equal(resumed.search(q, 10)[1], ref.faiss.search(q, 10)[1])


def test_an_on_disk_build_writes_each_faiss_file_through_write_faiss(in_memory, tmp_path, monkeypatch):
    """The trained index and each block were written by faiss.write_index under their own ``atomic_path``, apart from
    the one ``write_faiss`` the build, add and compact use (a full disk named, no temporary left): every faiss file
    of an on-disk build goes through it now."""
    import faiss

    monkeypatch.setattr(ondisk, "BLOCK_TOKENS", BLOCK)
    real_write, writers = faiss.write_index, []

    def write_index(index, path):
        writers.append((inspect.stack()[1].function, Path(path).parent.name))
        return real_write(index, path)

    monkeypatch.setattr(faiss, "write_index", write_index)
    out = tmp_path / "disk"
    reindex(in_memory, out, _opts(on_disk=True))
    blocks = len(writers) - 2  # the trained index and the final index.faiss besides the blocks
    assert blocks >= 2 and writers == [("write_faiss", "ivf_blocks")] * (1 + blocks) + [("write_faiss", "disk")]


@pytest.mark.parametrize("factory", ["Flat", "IVF8,PQ4x4fs"])
def test_on_disk_needs_ivf_lists_that_disk_can_hold(tmp_path, tiny_corpus, tiny_model_dir, factory):
    with pytest.raises(FactoryError, match="--on-disk"):
        build_index(tiny_corpus, tiny_model_dir, tmp_path / "x", _opts(factory=factory, on_disk=True))
    assert not (tmp_path / "x").exists()  # refused before encoding


def test_auto_on_disk_for_a_small_corpus_is_an_in_memory_flat_index(tmp_path, tiny_index, caplog):
    """`--factory auto --on-disk` over fewer tokens than auto's first IVF: auto picks Flat, which has no lists to put
    on disk. It was refused after the whole corpus was encoded; the build now completes, in RAM, and says so."""
    out = tmp_path / "auto"
    with caplog.at_level(logging.WARNING, logger="spanseek.indexer.build"):
        reindex(tiny_index, out, _opts(factory="auto", on_disk=True))
    built = PhraseIndex(out)
    assert built.manifest.factory == "Flat" and built.manifest.faiss_params["on_disk"] is False
    assert not (out / IVFDATA).exists() and "held in RAM" in caplog.text
    report = verify_index(out, sample=50)
    assert report["ok"], report["problems"]
    qs, qe = np.random.default_rng(1).standard_normal((2, 4, built.vectors.shape[1])).astype(np.float32)
    params = SearchParams(unit="passage", top_k=3, mode="dense")
    assert Searcher(built).search_vectors(qs, qe, params) == Searcher(PhraseIndex(tiny_index)).search_vectors(
        qs, qe, params)


def test_add_to_an_on_disk_index_is_refused(on_disk, tmp_path, tiny_model_dir):
    more = tmp_path / "more.jsonl"
    more.write_text(json.dumps({"id": "new", "title": "t", "paragraphs": ["A new passage about bridges."]}) + "\n")
    copy = shutil.copytree(on_disk, tmp_path / "copy")
    before = (copy / IVFDATA).read_bytes()
    with pytest.raises(BuildError, match="on disk"):
        add_documents(copy, more, model=tiny_model_dir, opts=_opts())
    assert (copy / IVFDATA).read_bytes() == before


@pytest.mark.parametrize("n", [200_000, 10_000_000, 80_000_000])
def test_auto_factory_on_disk_is_always_storable_on_disk(n):
    from spanseek.indexer.faiss_index import auto_factory, create_index, parse_factory, validate_factory

    factory = auto_factory(n, 384, on_disk=True)
    check_on_disk(validate_factory(factory, 384, n))
    assert ("HNSW" in factory) == (n >= 5_000_000) and not parse_factory(factory).fast_scan
    create_index(factory, 384, contiguous_ids=True)


def test_on_disk_build_resumed_after_a_passage_changed_does_not_reuse_its_blocks(tmp_path, tiny_model_dir,
                                                                               monkeypatch):
    """A killed on-disk build keeps its trained index and finished blocks; resumed after one short passage of the
    corpus changed (same length, so the same token count), those hold the old passage's vectors: the resumed index
    equals a fresh build of the changed corpus (it re-used them where the change missed the 64 rows the key sampled,
    and served codes of text no longer in the corpus)."""
    import faiss

    monkeypatch.setattr(ondisk, "BLOCK_TOKENS", BLOCK)
    docs = [{"id": f"d{i}", "paragraphs": [f"In {1000 + i} Alba built the tower"]} for i in range(120)]
    corpus = tmp_path / "c.jsonl"
    corpus.write_text("".join(json.dumps(d) + "\n" for d in docs))
    out = tmp_path / "resumed"
    with monkeypatch.context() as m:
        m.setattr(ondisk, "add_vectors", _dying_add()[0])
        with pytest.raises(KeyboardInterrupt):
            build_index(corpus, tiny_model_dir, out, _opts(on_disk=True, recall_sample=0))
    assert len(list((out / "ivf_blocks").glob("block_*.faiss"))) == 2
    # the passage to change: one whose tokens hold none of the rows the blocks' key samples
    bounds = np.load(out / "passage_tokens.npy")
    sampled = np.unique(np.linspace(0, bounds[-1] - 1, 64).astype(np.int64))
    p = next(p for p in range(len(bounds) - 1) if not np.any((sampled >= bounds[p]) & (sampled < bounds[p + 1])))
    docs[p]["paragraphs"] = ["In 1000 Borin built the tower"]  # (a year and a name: one token each, as before)
    corpus.write_text("".join(json.dumps(d) + "\n" for d in docs))
    resumed = build_index(corpus, tiny_model_dir, out, _opts(on_disk=True, recall_sample=0))
    fresh_dir = tmp_path / "fresh"
    fresh = build_index(corpus, tiny_model_dir, fresh_dir, _opts(on_disk=True, recall_sample=0))
    assert resumed.tokens == fresh.tokens
    got = faiss.read_index(str(out / "index.faiss"), faiss.IO_FLAG_ONDISK_SAME_DIR)
    want = faiss.read_index(str(fresh_dir / "index.faiss"), faiss.IO_FLAG_ONDISK_SAME_DIR)
    q = PhraseIndex(fresh_dir).token_vectors(np.arange(bounds[p], bounds[p + 1]))
    assert np.array_equal(got.search(q, 5)[0], want.search(q, 5)[0])


def test_an_on_disk_reindex_leaves_no_blocks_once_complete(in_memory, tmp_path):
    """The blocks (a second copy of every list) are dropped once the manifest is written, as a build drops them,
    not left in the finished index until something opens it."""
    out = tmp_path / "disk"
    reindex(in_memory, out, _opts(on_disk=True))
    assert not (out / "ivf_blocks").exists()
    assert verify_index(out, sample=20)["ok"]
