"""Live writes (indexer.live, core.segment): base + segment + tombstones searches as an index built from scratch over
the same documents; delete by filter removes exactly what a scan of the metadata finds; the log survives a crash."""

from __future__ import annotations

import itertools
import json
import random
from pathlib import Path

import numpy as np
import pytest

from spanseek.core.io import Document, document_from_json, write_corpus
from spanseek.core.params import MODES, UNITS, SearchFilter, SearchParams
from spanseek.core.segment import EncodedDocument
from tests.conftest import make_corpus

QUESTIONS = ["When did Alba build the castle?", "Who built the river bridge?", "empire battle treaty",
             "What did Hugo build in 1500?"]


def doc(d: dict) -> Document:
    out = document_from_json(d, "test")
    assert out is not None
    return out


def open_store(live_dir: Path, index: Path, encoder, searcher, published: list):
    from spanseek.core.segment import searcher_over
    from spanseek.indexer.live import LiveStore

    return LiveStore(live_dir, index, searcher.index, encoder,
                     lambda snap: published.append(searcher_over(searcher, snap)))


def upsert(store, encoder, docs: list[dict]) -> None:
    parsed = [doc(d) for d in docs]
    store.upsert(parsed, [encoder.encode(d) for d in parsed])


def hits_of(searcher, unit: str, mode: str, flt: SearchFilter | None = None, collapse: bool = False
            ) -> list[list[tuple]]:
    out = searcher.search(QUESTIONS, SearchParams(unit, 5, mode=mode, filter=flt, collapse_duplicates=collapse))
    return [[(h.doc_id, h.paragraph, h.text, h.start, h.end, round(h.score, 3), h.copies, h.copy_doc_ids)
             for h in hits] for hits in out]


def writes(store, encoder) -> list[dict]:
    """Adds, replacements (of a base and of a segment document) and deletes (likewise); returns the live corpus in
    the order an index built from scratch holds it: the base's survivors, then the segment in write order."""
    base = make_corpus()
    new = [{**d, "id": f"n{i}", "title": f"New {i}"} for i, d in enumerate(make_corpus(seed=1, n_docs=4))]
    d1 = {**make_corpus(seed=2, n_docs=1)[0], "id": "d1", "title": "Title 1 again", "meta": {"lang": "fr"}}
    n3 = {**make_corpus(seed=3, n_docs=1)[0], "id": "n3", "title": "New 3 again"}
    upsert(store, encoder, new[:3])
    upsert(store, encoder, [d1])
    assert store.delete(["d3", "missing"])[0] == ["d3"]
    upsert(store, encoder, [new[3]])
    upsert(store, encoder, [n3])
    assert store.delete(["n2"])[0] == ["n2"]
    return [base[i] for i in (0, 2, 4, 5)] + [new[0], new[1], d1, n3]


@pytest.fixture(scope="module")
def live(tmp_path_factory, tiny_index, tiny_searcher, encoder, tiny_model_dir):
    """A store over the tiny index after ``writes``, its searcher, and a searcher over a fresh build of the same
    live documents."""
    from spanseek.core.loading import open_searcher
    from spanseek.indexer.build import BuildOptions, build_index

    tmp = tmp_path_factory.mktemp("live")
    published: list = []
    store = open_store(tmp / "live", tiny_index, encoder, tiny_searcher, published)
    corpus = writes(store, encoder)
    write_corpus(tmp / "scratch.jsonl", [doc(d) for d in corpus])
    build_index(tmp / "scratch.jsonl", tiny_model_dir, tmp / "scratch",
                BuildOptions(shard_passages=7, progress=False, precision="fp32"))
    scratch = open_searcher(tmp / "scratch", tiny_model_dir, device="cpu", precision="fp32")
    return store, published, scratch, corpus


@pytest.mark.parametrize("unit", UNITS)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("collapse", [False, True])
def test_base_segment_and_tombstones_search_as_a_fresh_build(live, unit, mode, collapse):
    store, published, scratch, _ = live
    assert hits_of(published[-1], unit, mode, collapse=collapse) == hits_of(scratch, unit, mode, collapse=collapse)


def test_a_filter_sees_the_segment_and_not_the_tombstones(live):
    store, published, scratch, _ = live
    flt = SearchFilter.from_json({"meta": {"lang": "fr"}})
    for mode in ("dense", "lexical"):  # (hybrid over one document z-scores every candidate to 0: a tie)
        assert hits_of(published[-1], "doc", mode, flt) == hits_of(scratch, "doc", mode, flt)
    assert {h[0] for q in hits_of(published[-1], "passage", "dense", flt) for h in q} == {"d1"}


def test_get_returns_the_live_version(live):
    store, _, _, corpus = live
    by_id = {d["id"]: d for d in corpus}
    for i in ("d0", "d1", "n3"):
        got = store.get(i)
        assert got["title"] == by_id[i]["title"] and got["paragraphs"] == by_id[i]["paragraphs"]
    assert store.get("d3") is None and store.get("n2") is None
    assert store.describe()["segment_documents"] == 4 and store.describe()["tombstones"] == 2


def test_the_log_is_replayed_at_start_and_a_torn_last_line_dropped(live, tmp_path, tiny_index, tiny_searcher, encoder):
    store, published, scratch, _ = live
    wal = store.dir / "wal" / store.state["wals"][-1]
    copy = tmp_path / "live"
    import shutil

    shutil.copytree(store.dir, copy)
    with open(copy / "wal" / wal.name, "ab") as f:  # a write killed before its newline: never acknowledged
        f.write(b'{"op":"upsert","docs":[{"id":"torn","title":"x","paragraphs":["In 1200 Cato')
    again: list = []
    reopened = open_store(copy, tiny_index, encoder, tiny_searcher, again)
    assert reopened.replayed == 6 and reopened.get("torn") is None
    for unit in UNITS:
        assert hits_of(again[-1], unit, "hybrid") == hits_of(published[-1], unit, "hybrid")
    assert (copy / "wal" / wal.name).read_bytes() == wal.read_bytes()  # cut back to the last whole line
    upsert(reopened, encoder, [{"id": "after", "title": "After", "paragraphs": ["In 1300 Dara built a harbour."]}])
    assert reopened.get("after") is not None


def test_a_logged_write_without_text_to_read_removes_what_its_id_held_on_replay(tmp_path, tiny_index, tiny_searcher,
                                                                                  encoder):
    """An earlier version took a paragraph of zero-width spaces (or control characters) for text and logged the write;
    read now, the document has no text, and this version stores none without: replay deletes what the id held (the
    base version does not come back), beside the writes with text around it, and a merge of them works."""
    published: list = []
    store = open_store(tmp_path / "live", tiny_index, encoder, tiny_searcher, published)
    assert store.get("d1") is not None
    upsert(store, encoder, [{"id": "n0", "title": "New", "paragraphs": ["In 1300 Dara built a harbour."]}])
    wal = store.dir / "wal" / store.state["wals"][-1]
    store.close()
    deep: dict = {}
    for _ in range(100):  # metadata nested past MAX_META_DEPTH, which an earlier version took (every answer failed)
        deep = {"k": deep}
    with open(wal, "ab") as f:
        for paragraphs in (["\u200b"], ["\x07"]):
            f.write(json.dumps({"op": "upsert", "docs": [{"id": "d1", "title": "Replaced", "paragraphs": paragraphs}]}
                               ).encode() + b"\n")
        f.write(json.dumps({"op": "upsert", "docs": [{"id": "d2", "title": "Deep", "paragraphs": ["In 1300 Ada sang."],
                                                      "meta": deep}]}).encode() + b"\n")
    reopened = open_store(tmp_path / "live", tiny_index, encoder, tiny_searcher, [])
    assert reopened.get("d1") is None and reopened.get("d2") is None and reopened.get("n0")["title"] == "New"
    reopened.merge()
    assert reopened.get("d1") is None and reopened.get("d2") is None and reopened.get("n0")["title"] == "New"
    reopened.close()


def test_replay_encodes_only_the_versions_that_survive_and_a_log_of_nothing_starts_over(
        live, tmp_path, tiny_index, tiny_searcher, encoder, monkeypatch):
    """Every logged version was encoded again at each start: a document written 600 times replayed in 6.5 s (233 s
    on a busy host) for one document in the segment. Replaced and deleted versions are now applied unencoded, with the
    same result; and writes that cancel out, which merged nothing, no longer grow the log for ever."""
    import shutil

    store, published, _, _ = live
    copy = tmp_path / "live"
    shutil.copytree(store.dir, copy)
    encoded: list[str] = []
    real = type(encoder).encode
    monkeypatch.setattr(type(encoder), "encode", lambda self, d: encoded.append(d.id) or real(self, d))
    again: list = []
    reopened = open_store(copy, tiny_index, encoder, tiny_searcher, again)
    assert reopened.replayed == 6 and sorted(encoded) == ["d1", "n0", "n1", "n3"]  # not n2 (deleted), n3's first
    for unit in UNITS:
        for mode in MODES:
            assert hits_of(again[-1], unit, mode) == hits_of(published[-1], unit, mode)
    assert reopened.describe()["segment_documents"] == 4 and reopened.describe()["tombstones"] == 2
    reopened.close()

    fresh = open_store(tmp_path / "churn", tiny_index, encoder, tiny_searcher, [])
    for _ in range(3):
        upsert(fresh, encoder, [{"id": "tmp", "title": "T", "paragraphs": ["In 1300 Dara built a harbour."]}])
        assert fresh.delete(["tmp"])[0] == ["tmp"]
    assert fresh.wal_bytes > 0 and fresh.merge() is None  # nothing to merge: the log starts over
    assert fresh.wal_bytes == 0 and [p.name for p in (tmp_path / "churn" / "wal").iterdir()] == fresh.state["wals"]
    fresh.close()
    assert open_store(tmp_path / "churn", tiny_index, encoder, tiny_searcher, []).replayed == 0


def test_a_failed_log_restart_loses_no_acknowledged_write(tmp_path, tiny_index, tiny_searcher, encoder, monkeypatch):
    """The restart held the new log list in memory before state.json had it: a failed write of state.json (a full
    disk) left later writes in a log that the saved state no longer listed, deleted at the next start."""
    from spanseek.indexer import live as live_module

    store = open_store(tmp_path / "live", tiny_index, encoder, tiny_searcher, [])
    upsert(store, encoder, [{"id": "tmp", "title": "T", "paragraphs": ["In 1300 Dara built a harbour."]}])
    store.delete(["tmp"])
    real = live_module.write_json_atomic
    calls: list[int] = []

    def full_disk(path, value):
        calls.append(1)
        if len(calls) == 1:
            raise OSError(28, "No space left on device")
        return real(path, value)

    monkeypatch.setattr(live_module, "write_json_atomic", full_disk)
    with pytest.raises(OSError, match="No space"):
        store.merge()
    monkeypatch.undo()
    upsert(store, encoder, [{"id": "keep", "title": "K", "paragraphs": ["In 1400 Hugo built a mill."]}])
    store.close()
    again = open_store(tmp_path / "live", tiny_index, encoder, tiny_searcher, [])
    assert again.get("keep") is not None and again.get("tmp") is None


def test_a_live_directory_of_the_previous_version_serves_and_can_move(tmp_path, tiny_index, tiny_searcher, encoder):
    """Its state named bases by absolute paths, and its log may hold an id the service now refuses to write (a line
    break): both load, and the id is replayed, searchable and deletable."""
    import shutil

    index = tmp_path / "a" / "index"
    shutil.copytree(tiny_index, index)
    live = tmp_path / "a" / "index.live"
    (live / "wal").mkdir(parents=True)
    entry = {"op": "upsert", "docs": [{"id": "line\nbreak", "title": "Old", "paragraphs": ["In 1300 Dara built."]}]}
    (live / "wal" / "wal-000001.jsonl").write_text(json.dumps(entry) + "\n")
    (live / "state.json").write_text(json.dumps({"base": str(index.resolve()), "wals": ["wal-000001.jsonl"],
                                                  "merges": 0}))
    shutil.move(tmp_path / "a", tmp_path / "b")  # the old absolute path is gone: taken as the index given
    from spanseek.core.phrase_index import PhraseIndex
    from spanseek.core.segment import searcher_over
    from spanseek.indexer.live import base_dir

    index, live = tmp_path / "b" / "index", tmp_path / "b" / "index.live"
    assert base_dir(live, index) == index.resolve()
    store = open_store(live, index, encoder, searcher_over(tiny_searcher, PhraseIndex(index)), [])
    assert store.replayed == 1 and store.get("line\nbreak") is not None
    assert store.delete(["line\nbreak"])[0] == ["line\nbreak"]
    (live / "bases" / "base-000003").mkdir(parents=True)  # a merged base, named from where the directory was
    (live / "state.json").write_text(json.dumps({"base": str(tmp_path / "a" / "index.live" / "bases" / "base-000003"),
                                                  "wals": ["wal-000001.jsonl"], "merges": 3}))
    assert base_dir(live, index) == (live / "bases" / "base-000003").resolve()
    (live / "state.json").write_text("[1, 2]")
    from spanseek.indexer.live import LiveStoreError

    with pytest.raises(LiveStoreError, match=r"state.json: not a live directory's state"):
        base_dir(live, index)


def test_a_long_passage_is_encoded_a_window_batch_a_step(encoder, monkeypatch):
    """A write of one long paragraph was one step of seconds (4.3 s for 62k tokens on the demo model), which every
    search waited behind; now each step is one forward pass of at most chunk_tokens padded tokens, and the steps make
    the same arrays as encoding it at once."""
    from spanseek.core.encoding import advance

    words = " ".join(f"In {1000 + i} Alba built the castle of the river." for i in range(40))
    document = doc({"id": "long", "title": "Long", "paragraphs": [words]})
    [chunk] = encoder.chunks(document)
    assert len(chunk[0]) > 10 * encoder.chunk_tokens
    passes: list[int] = []
    model = encoder.encoder.model
    real = model.encode_passages
    monkeypatch.setattr(model, "encode_passages", lambda ids, mask: passes.append(ids.numel()) or real(ids, mask))
    steps, n = encoder.chunk_steps(chunk), 0
    while not (done := advance(steps))[0]:
        n += 1
    assert n == len(passes) > 10 and max(passes) <= max(encoder.chunk_tokens, 40)  # a 32-token window, padded
    from spanseek.indexer.shards import encode_passages

    whole = encode_passages(encoder.encoder, chunk)  # as an index build: windows in batches of 8192 tokens
    assert len(passes) == n + 1  # one pass
    for name, array in whole.items():
        np.testing.assert_allclose(done[1][name], array, rtol=0, atol=1e-5, err_msg=name)


def test_a_damaged_line_before_the_last_is_refused_naming_it(tmp_path):
    from spanseek.indexer.wal import WalError, read_entries

    path = tmp_path / "wal.jsonl"
    path.write_bytes(b'{"op":"delete","ids":["a"]}\nnot json\n{"op":"delete","ids":["b"]}\n')
    with pytest.raises(WalError, match=r"wal.jsonl:2"):
        list(read_entries(path))


def test_delete_by_filter_removes_exactly_the_matching_documents(tmp_path, tiny_index, tiny_searcher, encoder):
    rng = random.Random(5)
    docs = []
    for i, d in enumerate(make_corpus(seed=7, n_docs=30, n_paras=1)):
        meta = {"year": rng.randint(1990, 2020), "lang": rng.choice(["en", "fr", "de"])}
        if rng.random() < 0.5:
            meta["tags"] = rng.sample(["news", "sport", "art"], rng.randint(1, 2))
        docs.append({**d, "id": f"m{i}", "meta": meta})
    published: list = []
    store = open_store(tmp_path / "live", tiny_index, encoder, tiny_searcher, published)
    upsert(store, encoder, docs)
    flt = {"must": [{"key": "year", "range": {"gte": 2000, "lt": 2015}}],
           "should": [{"key": "lang", "match": "fr"}, {"key": "tags", "any": ["sport"]}],
           "must_not": [{"key": "lang", "match": "de"}]}

    def brute(meta: dict) -> bool:
        return (2000 <= meta["year"] < 2015 and (meta["lang"] == "fr" or "sport" in meta.get("tags", []))
                and meta["lang"] != "de")

    want = sorted(d["id"] for d in docs if brute(d["meta"]))
    assert want and len(want) < len(docs)
    deleted, _ = store.delete_where(SearchFilter.from_json(flt))
    assert sorted(deleted) == want
    for d in docs:
        assert (store.get(d["id"]) is None) == (d["id"] in want)
    assert all(store.get(f"d{i}") is not None for i in range(6))  # the base has no such metadata
    snap = store.snapshot
    alive = {snap.docs[i]["id"] for i in range(len(snap.docs)) if i not in set(snap.deleted_docs.tolist())}
    assert alive == {f"d{i}" for i in range(6)} | {d["id"] for d in docs} - set(want)


@pytest.mark.parametrize("body", [{}, {"meta": {}}, {"title_prefix": ""}, {"must": [{}]}, {"should": [{}]},
                                  {"must_not": [{"not": {}}]}, {"must": [{"meta": {}, "should": [{}]}]}])
def test_a_filter_that_constrains_nothing_deletes_nothing_and_says_why(tmp_path, tiny_index, tiny_searcher, encoder,
                                                                       body):
    """A filter whose every part passes every document (an empty meta or title prefix, a nested empty filter) would
    delete them all: refused as the empty filter is, nothing written. One that passes nothing deletes nothing."""
    from spanseek.core.filters import FilterError

    store = open_store(tmp_path / "live", tiny_index, encoder, tiny_searcher, [])
    size = store.wal.size
    with pytest.raises(FilterError, match="passes every document, so it would delete them all"):
        store.delete_where(SearchFilter.from_json(body))
    assert store.delete_where(SearchFilter.from_json({"must_not": [body]})) == ([], size)
    assert store.wal.size == size and all(store.get(f"d{i}") is not None for i in range(6))


def test_merge_builds_a_base_that_searches_as_base_plus_segment(tmp_path, tiny_index, tiny_searcher, encoder,
                                                               tiny_model_dir, monkeypatch):
    from spanseek.indexer.build import BuildOptions

    published: list = []
    monkeypatch.chdir(tmp_path)  # a live directory given relative: the base is still reported by its full path
    store = open_store(Path("live"), tiny_index, encoder, tiny_searcher, published)
    writes(store, encoder)
    before = {(u, m): hits_of(published[-1], u, m) for u in UNITS for m in MODES}
    store.model = tiny_model_dir
    result = store.merge(BuildOptions(shard_passages=7, progress=False, precision="fp32"))
    assert result is not None and result["documents"] == 4 and result["deleted"] == 2
    assert store.describe()["segment_documents"] == 0 and store.describe()["tombstones"] == 0
    assert store.describe()["base"] == result["base"] == str(tmp_path / "live" / "bases" / "base-000001")
    assert {(u, m): hits_of(published[-1], u, m) for u in UNITS for m in MODES} == before
    state = json.loads((tmp_path / "live" / "state.json").read_text())
    assert state["base"] == str(Path("bases", "base-000001")) and len(state["wals"]) == 1  # relative: movable
    assert np.array_equal(published[-1].index.deleted_docs, [])
    from spanseek.core.phrase_index import PhraseIndex
    from spanseek.core.segment import searcher_over

    store.close()  # (as its process ends: one store writes to a live directory)
    (tmp_path / "live" / "wal" / "wal-000001.jsonl").write_text("")  # what a kill after the commit point leaves
    (tmp_path / "live" / "bases" / "base-000002.tmp").mkdir()  # and one during the next merge
    again: list = []
    reopened = open_store(tmp_path / "live", tiny_index, encoder,
                          searcher_over(tiny_searcher, PhraseIndex(tmp_path / "live" / state["base"])), again)
    assert reopened.replayed == 0 and sorted(p.name for p in (tmp_path / "live" / "bases").iterdir()) == ["base-000001"]
    assert [p.name for p in (tmp_path / "live" / "wal").iterdir()] == state["wals"]
    assert {(u, m): hits_of(again[-1], u, m) for u in UNITS for m in MODES} == before


def test_a_merge_asked_to_stop_ends_at_its_next_step_and_leaves_no_partial_base(tmp_path, tiny_index, tiny_searcher,
                                                                                encoder, tiny_model_dir, monkeypatch):
    """A merge made slow (each forward pass of its encoding 0.2 s) is asked to stop midway, as a stopping service
    asks: it ends within a pass or two, its partial base (``bases/base-000001.tmp``, the size of the base) is gone,
    nothing is recorded as failed, and the store opened again serves every write from the log and merges. Before,
    the merge ran on to its end, or the process exit cut it off and its partial base stayed until the next start."""
    import threading
    import time

    from spanseek.core.model import PhraseModel
    from spanseek.core.stopping import Stopped
    from spanseek.indexer.build import BuildOptions

    published: list = []
    store = open_store(tmp_path / "live", tiny_index, encoder, tiny_searcher, published)
    writes(store, encoder)
    before = hits_of(published[-1], "passage", "hybrid")
    store.model = tiny_model_dir
    passes = []
    real = PhraseModel.encode_passages

    def slow(self, ids, mask):
        passes.append(time.perf_counter())
        time.sleep(0.2)
        return real(self, ids, mask)

    monkeypatch.setattr(PhraseModel, "encode_passages", slow)
    outcome: list = []

    def merge():
        try:
            outcome.append(store.merge(BuildOptions(shard_passages=7, progress=False, precision="fp32",
                                                    max_batch_tokens=32)))
        except Stopped as e:
            outcome.append(e)

    thread = threading.Thread(target=merge)
    thread.start()
    deadline = time.monotonic() + 60
    while len(passes) < 2:  # encoding its documents, its partial base on disk
        assert time.monotonic() < deadline and thread.is_alive(), "the merge never encoded"
        time.sleep(0.01)
    assert (tmp_path / "live" / "bases" / "base-000001.tmp").is_dir()
    asked = time.perf_counter()
    store.stop_merges()
    thread.join(30)
    took = time.perf_counter() - asked
    assert not thread.is_alive() and isinstance(outcome[0], Stopped)
    assert took < 2.0, f"the merge took {took:.2f} s to stop"
    assert len(passes) < 8  # it did not encode on to its end
    assert list((tmp_path / "live" / "bases").iterdir()) == []
    assert store.last_merge is None and store.describe()["segment_documents"] == 4
    assert store.merge() is None  # no merge starts once asked to stop
    state = json.loads((tmp_path / "live" / "state.json").read_text())
    assert "last_merge" not in state and state["base"] is None
    monkeypatch.undo()
    store.close()
    again: list = []
    reopened = open_store(tmp_path / "live", tiny_index, encoder, tiny_searcher, again)
    assert hits_of(again[-1], "passage", "hybrid") == before
    reopened.model = tiny_model_dir
    assert reopened.merge(BuildOptions(shard_passages=7, progress=False, precision="fp32"))["documents"] == 4


def test_a_live_directory_over_another_index_is_refused_and_one_moved_with_its_index_serves(
        tmp_path, tiny_index, tiny_searcher, encoder, tiny_model_dir):
    """The live directory records its index's manifest digest: started over an index changed at the same path
    (rebuilt, replaced, changed offline) it refuses, rather than replay its writes or serve its merged base in the new
    index's place; an index and its live directory moved together keep serving the merged base and the log."""
    import shutil

    from spanseek.core.phrase_index import PhraseIndex
    from spanseek.core.segment import searcher_over
    from spanseek.indexer.build import BuildOptions
    from spanseek.indexer.live import LiveStoreError, base_dir

    index = tmp_path / "a" / "index"
    shutil.copytree(tiny_index, index)
    live = tmp_path / "a" / "index.live"
    published: list = []
    store = open_store(live, index, encoder, searcher_over(tiny_searcher, PhraseIndex(index)), published)
    writes(store, encoder)
    store.model = tiny_model_dir
    assert store.merge(BuildOptions(shard_passages=7, progress=False, precision="fp32")) is not None
    upsert(store, encoder, [{"id": "late", "title": "Late", "paragraphs": ["In 1300 Dara built a harbour."]}])
    before = {u: hits_of(published[-1], u, "hybrid") for u in UNITS}
    store.close()

    shutil.move(tmp_path / "a", tmp_path / "b")  # the index and its live directory, together
    index, live = tmp_path / "b" / "index", tmp_path / "b" / "index.live"
    assert base_dir(live, index) == (live / "bases" / "base-000001").resolve()
    again: list = []
    moved = open_store(live, index, encoder, searcher_over(tiny_searcher, PhraseIndex(base_dir(live, index))), again)
    assert moved.replayed == 1 and {u: hits_of(again[-1], u, "hybrid") for u in UNITS} == before
    moved.close()

    from spanseek.core.phrase_index import CHECKSUM_FIELD, manifest_checksum

    manifest = json.loads((index / "manifest.json").read_text())  # the same path, another index (as a rebuild's)
    manifest["build_seconds"] += 1
    manifest[CHECKSUM_FIELD] = manifest_checksum(manifest)
    (index / "manifest.json").write_text(json.dumps(manifest, indent=1))
    for attempt in (lambda: base_dir(live, index),
                    lambda: open_store(live, index, encoder, searcher_over(tiny_searcher, PhraseIndex(index)), [])):
        with pytest.raises(LiveStoreError, match=r"state.json: its writes and the base its merges made .* another "
                                                 r"index .* move .*index.live away"):
            attempt()


def test_a_state_written_before_the_index_was_recorded_is_taken_as_over_this_index(
        tmp_path, tiny_index, tiny_searcher, encoder):
    from spanseek.indexer.live import index_digest

    live = tmp_path / "live"
    store = open_store(live, tiny_index, encoder, tiny_searcher, [])
    upsert(store, encoder, [{"id": "x", "title": "X", "paragraphs": ["In 1300 Dara built a harbour."]}])
    store.close()
    state = json.loads((live / "state.json").read_text())
    assert state["index"] == index_digest(tiny_index) and state["base"] is None
    legacy = {"base": str(Path(tiny_index).resolve()), "wals": state["wals"], "merges": 0}  # the earlier form
    (live / "state.json").write_text(json.dumps(legacy))
    reopened = open_store(live, tiny_index, encoder, tiny_searcher, [])
    assert reopened.replayed == 1 and reopened.get("x") is not None
    assert json.loads((live / "state.json").read_text())["index"] == index_digest(tiny_index)


@pytest.mark.parametrize("unit", UNITS)
def test_a_flat_base_and_segment_are_scanned_once_a_batch_as_faiss_searches_them(live, unit, monkeypatch):
    """The dense leg scans a flat base once a batch and scores the segment in full (``core.dense.SegmentedScan``)
    instead of asking faiss each round: the same hits as faiss's merged search, filtered or not."""
    from spanseek.core import dense
    from spanseek.core.segment import SegmentedFaiss

    store, published, _, _ = live
    searcher = published[-1]
    assert searcher.index.faiss.flat_parts() is not None
    scans, faiss_searches, made, searched = [], [], dense.SegmentedScan.__init__, SegmentedFaiss.search
    monkeypatch.setattr(dense.SegmentedScan, "__init__", lambda self, *a, **k: scans.append(self) or made(self, *a, **k))
    monkeypatch.setattr(SegmentedFaiss, "search", lambda self, *a, **k: faiss_searches.append(1) or searched(self, *a, **k))
    flt = SearchFilter.from_json({"meta": {"lang": "fr"}})
    scanned = {mode: hits_of(searcher, unit, mode) for mode in MODES} | {"filter": hits_of(searcher, unit, "dense", flt)}
    assert scans and not faiss_searches
    assert all(scan.holds_fine for scan in scans)  # the spans read the held scores, the segment's among them
    batch = dense.DenseBatch.of(searcher.dense, searcher._plan(SearchParams(unit, 5, mode="dense")),
                                *searcher.encoder.encode(QUESTIONS))
    ids = np.arange(searcher.index.num_tokens)  # base and segment tokens, each read from the held scores
    held = batch.scores.of_rows(np.zeros(len(ids), np.int64), ids)
    live = np.isfinite(held).all(axis=1)  # the tombstoned base documents' tokens are masked (-inf)
    assert live[searcher.index.n_base_tokens:].all() and not live.all()
    np.testing.assert_allclose(held[live], searcher.dense.scores(searcher.index.token_vectors, ids[live], np.stack(
        [batch.scores.q_start[0], batch.scores.q_end[0]], axis=1)), rtol=1e-4, atol=1e-4)
    assert batch.scores.ranked()
    monkeypatch.setattr(SegmentedFaiss, "flat_parts", lambda self: None)  # faiss, round by round, as before
    searched_by_faiss = {mode: hits_of(searcher, unit, mode) for mode in MODES} | {
        "filter": hits_of(searcher, unit, "dense", flt)}
    assert faiss_searches
    assert scanned == searched_by_faiss


@pytest.mark.parametrize("unit", ["phrase", "passage", "doc"])
def test_a_filtered_hybrid_search_after_a_write_computes_the_base_products_once(live, unit, monkeypatch):
    """A filtered hybrid search first searches its questions without the filter; over a base and a segment, the
    filtered scan takes over that scan's base products and segment scores (``SegmentedScan``'s ``products_of``)
    instead of scoring the base again, and finds the same hits as when it scores them itself."""
    from spanseek.core.flat_search import FlatScan

    searcher = live[1][-1]
    assert searcher.index.faiss.flat_parts() is not None
    flt = SearchFilter.from_json({"meta": {"lang": "fr"}})
    computed, score, take = [], FlatScan._score, FlatScan._take_products
    monkeypatch.setattr(FlatScan, "_score", lambda self, *a: computed.append(self) or score(self, *a))
    monkeypatch.setattr(FlatScan, "_take_products", lambda self: None)  # each scan scores the base itself
    scored_twice = hits_of(searcher, unit, "hybrid", flt)
    assert len(computed) == 2
    computed.clear()
    monkeypatch.setattr(FlatScan, "_take_products", take)
    assert hits_of(searcher, unit, "hybrid", flt) == scored_twice
    assert len(computed) == 1


def test_a_start_on_a_full_disk_serves_what_the_log_holds(tmp_path, tiny_index, tiny_searcher, encoder, monkeypatch):
    """Nothing changed since the last start: the state file is not written again, so a disk with no room left (where
    writes are refused) still serves the index and every acknowledged write."""
    import errno
    import os

    from spanseek.indexer import live as live_store

    store = open_store(tmp_path / "live", tiny_index, encoder, tiny_searcher, [])
    upsert(store, encoder, [{"id": "kept", "title": "Kept", "paragraphs": ["In 1300 Dara built a harbour."]}])
    store.close()

    def full(path, obj):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))

    monkeypatch.setattr(live_store, "write_json_atomic", full)
    again = open_store(tmp_path / "live", tiny_index, encoder, tiny_searcher, [])
    assert again.replayed == 1 and again.get("kept")["title"] == "Kept"


def test_a_documents_paragraphs_are_tokenised_a_bounded_group_a_step(encoder, monkeypatch):
    """A write's tokenising was one step of the encoder's thread (a megabyte of prose: 0.7-0.8 s on 2 CPU cores, which
    searches waited behind); now each step tokenises paragraphs of at most TOKENIZE_STEP_CHARS characters
    together, or a piece of a longer paragraph, and the tokens are those of tokenising the document at once."""
    from spanseek.core.encoding import advance
    from spanseek.core.text import tokenize_passages
    from spanseek.indexer import live as live_module

    monkeypatch.setattr(live_module, "TOKENIZE_STEP_CHARS", 100)
    paragraphs = [f"In {1000 + i} Alba built castle {i}." for i in range(12)]  # 28 or 29 characters
    paragraphs.insert(5, "Dara built the long wall. " * 10)  # 260 characters: three pieces of at most 100
    document = doc({"id": "many", "title": "Many", "paragraphs": paragraphs})
    steps, counts = encoder.tokenize_steps(document), []
    while not (done := advance(steps))[0]:
        counts.append(done[1])
    assert len(counts) + 1 == 8  # paragraphs by step: 0-2, 3-4, the long one's three pieces, 6-8, 9-11, 12
    whole = tokenize_passages(encoder.tokenizer, paragraphs)
    assert len(done[1]) == len(whole)
    for got, want in zip(done[1], whole, strict=True):
        for name in ("input_ids", "offsets", "flags"):
            np.testing.assert_array_equal(getattr(got, name), getattr(want, name))
    running = np.cumsum([len(t) for t in whole])
    assert counts[:2] == running[[2, 4]].tolist()  # each step yields the document's tokens so far
    assert running[4] < counts[2] < counts[3] < counts[4] == running[5] < counts[5] < counts[6] == running[11]
    assert [len(c) for c in encoder.chunks(document, done[1])] == [len(c) for c in encoder.chunks(document)]




def without_lexical(index: Path) -> None:
    """Make ``index`` one built before the lexical part existed (no ``lexical/``, none in its manifest)."""
    import shutil

    from spanseek.core.phrase_index import LEXICAL, Manifest

    old = Manifest.load(index)
    shutil.rmtree(index / LEXICAL)
    Manifest.create(index, {**old.to_dict(), "lexical": None}).write(index)


def test_add_lexical_after_a_server_with_writes_keeps_its_writes_and_gives_its_merged_base_the_part_too(
        tmp_path, tiny_index, tiny_searcher, encoder, tiny_model_dir):
    """`index add-lexical` changes no document, passage or vector the writes were made over: the next start serves
    every write (the merged base and the log), and searches the lexical part over the base it serves, consistent
    with a fresh BM25 of its passages; the documents' own changes (add, delete, compact) are refused instead, naming
    the live directory, and change nothing."""
    import shutil

    from spanseek.core.phrase_index import PhraseIndex
    from spanseek.core.segment import searcher_over
    from spanseek.indexer.build import BuildOptions
    from spanseek.indexer.lexical import add_lexical, check_lexical
    from spanseek.indexer.lifecycle import compact_index, delete_documents
    from spanseek.indexer.live import base_dir
    from spanseek.indexer.out_dir import BuildError

    index, live = tmp_path / "index", tmp_path / "index.live"
    shutil.copytree(tiny_index, index)
    without_lexical(index)
    store = open_store(live, index, encoder, searcher_over(tiny_searcher, PhraseIndex(index)), [])
    corpus = writes(store, encoder)
    store.model = tiny_model_dir
    assert store.merge(BuildOptions(shard_passages=7, progress=False, precision="fp32")) is not None
    late = {"id": "late", "title": "Late", "paragraphs": ["In 1300 Dara built a harbour."]}
    upsert(store, encoder, [late])
    store.close()
    merged = base_dir(live, index)
    assert PhraseIndex(merged).lexical is None

    before = (index / "manifest.json").read_bytes()
    for change in (lambda: delete_documents(index, ["d0"]), lambda: compact_index(index)):
        with pytest.raises(BuildError, match=rf"the live directory {live} holds the writes .* send it the change as a "
                                             rf"write instead, or move {live} away .* changed nothing$"):
            change()
    assert (index / "manifest.json").read_bytes() == before

    add_lexical(index)
    assert base_dir(live, index) == merged  # the live directory is still this index's
    base = PhraseIndex(merged)
    assert base.lexical is not None and PhraseIndex(index).lexical is not None and check_lexical(base) == []
    published: list = []
    again = open_store(live, index, encoder, searcher_over(tiny_searcher, base), published)
    assert again.replayed == 1
    assert sorted([*again.segment.base_rows, *again.segment.docs]) == sorted([d["id"] for d in corpus] + ["late"])
    hits = published[-1].search(["Dara harbour"], SearchParams("doc", 1, mode="lexical"))
    assert [h.doc_id for h in hits[0]] == ["late"]
    again.close()


def test_add_lexical_over_a_state_of_the_previous_version_keeps_the_writes(tmp_path, tiny_index, tiny_searcher, encoder):
    """A state.json written by the previous version records the digest of the whole manifest.json, which
    `index add-lexical` rewrites: run before any start of this version, the next start refused the live directory as
    made over another index, with its writes. add-lexical records the index in the current form first (as a start
    does), so the next start serves every write."""
    import shutil

    from spanseek.core.phrase_index import PhraseIndex
    from spanseek.core.segment import searcher_over
    from spanseek.indexer.lexical import add_lexical
    from spanseek.indexer.live import base_dir, index_digest
    from spanseek.indexer.live_state import legacy_index_digest

    index, live = tmp_path / "index", tmp_path / "index.live"
    shutil.copytree(tiny_index, index)
    without_lexical(index)
    store = open_store(live, index, encoder, searcher_over(tiny_searcher, PhraseIndex(index)), [])
    upsert(store, encoder, [{"id": "w", "title": "W", "paragraphs": ["In 1300 Dara built a harbour."]}])
    store.close()
    state = json.loads((live / "state.json").read_text())
    (live / "state.json").write_text(json.dumps({**state, "index": legacy_index_digest(index)}))  # the earlier form
    add_lexical(index)
    assert json.loads((live / "state.json").read_text()) == {**state, "index": index_digest(index)}
    assert base_dir(live, index) == index.resolve()  # (it raised LiveStoreError: made over another index)
    again = open_store(live, index, encoder, searcher_over(tiny_searcher, PhraseIndex(index)), [])
    assert again.replayed == 1 and again.get("w") is not None
    again.close()


def test_a_live_directory_without_writes_does_not_hold_the_index_back(tmp_path, tiny_index, tiny_searcher, encoder):
    """A server started with writes that took none leaves a live directory with an empty log and no merged base:
    an offline change of the index loses nothing there, so it is not refused, and the next start takes the changed
    index (its state recorded over it anew); one write in that directory refuses the change again."""
    import shutil

    from spanseek.core.phrase_index import PhraseIndex
    from spanseek.core.segment import searcher_over
    from spanseek.indexer.lifecycle import delete_documents
    from spanseek.indexer.live_state import writes_made_over
    from spanseek.indexer.out_dir import BuildError

    index, live = tmp_path / "index", tmp_path / "index.live"
    shutil.copytree(tiny_index, index)
    open_store(live, index, encoder, searcher_over(tiny_searcher, PhraseIndex(index)), []).close()
    assert (live / "state.json").is_file() and writes_made_over(index) is None
    assert delete_documents(index, ["d0"])["deleted"] == 1
    store = open_store(live, index, encoder, searcher_over(tiny_searcher, PhraseIndex(index)), [])
    upsert(store, encoder, [{"id": "w", "title": "W", "paragraphs": ["In 1300 Dara built a harbour."]}])
    store.close()
    assert writes_made_over(index) == live
    with pytest.raises(BuildError, match=rf"the live directory {live} holds the writes"):
        delete_documents(index, ["d1"])


def test_offline_index_changes_find_the_live_directory_the_server_reads(tmp_path, tiny_index, tiny_searcher, encoder,
                                                                        monkeypatch, capsys):
    """A live directory kept elsewhere (``--live-dir``, ``SPANSEEK_LIVE_DIR``: the compose file's) holds writes made
    over the index: `index delete` finds it as the server does (flag over environment) and refuses, changing
    nothing; pointed at a directory without writes it runs."""
    import shutil

    from spanseek.cli import main
    from spanseek.core.phrase_index import PhraseIndex
    from spanseek.core.segment import searcher_over

    index, live = tmp_path / "index", tmp_path / "elsewhere" / "live"
    shutil.copytree(tiny_index, index)
    store = open_store(live, index, encoder, searcher_over(tiny_searcher, PhraseIndex(index)), [])
    upsert(store, encoder, [{"id": "w", "title": "W", "paragraphs": ["In 1300 Dara built a harbour."]}])
    store.close()
    before = (index / "manifest.json").read_bytes()
    monkeypatch.setenv("spanseek_live_dir", str(live))  # the server reads the name in any case of letters
    assert main(["index", "delete", "--index", str(index), "--ids", "d0"]) == 2
    assert f"the live directory {live} holds the writes" in capsys.readouterr().err
    assert (index / "manifest.json").read_bytes() == before
    assert main(["index", "delete", "--index", str(index), "--ids", "d0", "--live-dir", str(tmp_path / "none")]) == 0
    assert json.loads(capsys.readouterr().out)["deleted"] == 1


@pytest.mark.parametrize("state", [{"wals": ["wal-000001.jsonl"], "base": 5}, {"wals": [1]},
                                   {"wals": ["../../elsewhere.jsonl"]}, {"wals": [""]}, {"wals": [".."]},
                                   {"wals": [], "base": "../../elsewhere"}, {"wals": [], "base": "bases/.."},
                                   {"wals": [], "base": "elsewhere"}, {"wals": []}, {"wals": [], "base": None}])
def test_a_state_file_of_the_wrong_shape_is_refused_naming_it(tmp_path, state):
    """A damaged state.json (a base that is no path, a write log that is no file name of wal/) was a TypeError's
    traceback from every index command that reads it (`index snapshot`, `add-lexical`, `delete`), and a log named
    ``../..`` was copied from outside the live directory; now it is the one line of any state it cannot read. So is a
    base that is not a merged base of bases/ (``../../elsewhere`` was served, given the lexical part by add-lexical,
    and copied by a snapshot to that path above its --out). So is an empty list of write logs (a start with writes
    failed on it with a bare IndexError)."""
    from spanseek.indexer.live_state import LiveStoreError, read_state

    live = tmp_path / "index.live"
    live.mkdir()
    (live / "state.json").write_text(json.dumps(state))
    with pytest.raises(LiveStoreError, match=rf"^{live / 'state.json'}: not a live directory's state .* move the live "
                                             "directory away$"):
        read_state(live, tmp_path / "index")


class Unlisted(dict):
    """The live base documents' rows, failing when all of them are read."""

    def values(self):
        raise AssertionError("a write read every live document of the base")


def test_a_write_counts_what_searches_see_from_the_tombstones_not_every_base_document(live, tmp_path, tiny_index,
                                                                                      tiny_searcher, encoder):
    _, _, scratch, _ = live
    store = open_store(tmp_path / "live", tiny_index, encoder, tiny_searcher, [])
    store.segment.base_rows = Unlisted(store.segment.base_rows)
    writes(store, encoder)
    assert store.searched() == (len(scratch.index.docs), len(scratch.index.passages), scratch.index.num_tokens)


def test_a_merge_points_followers_at_its_base_before_it_shows(tmp_path, tiny_index, tiny_searcher, encoder):
    """A merge showed in the store's counts (``/info``'s ``merges``) before ``LIVE_DIR/merged`` named its base, so a
    follower told to reload at once could find the base before and serve on from it. The pointer now names the new
    base by the time the merge's snapshot is published and counted."""
    from spanseek.core.alias import resolve_alias
    from spanseek.indexer.live import FOLLOW

    seen: list[tuple[int, Path]] = []
    store = open_store(tmp_path / "live", tiny_index, encoder, tiny_searcher, [])
    upsert(store, encoder, [{"id": "m1", "title": "M", "paragraphs": ["In 1500 Ines built a bridge."]}])
    real = store.publish

    def publish(snapshot):
        real(snapshot)
        seen.append((int(store.state["merges"]), resolve_alias(store.dir / FOLLOW).target))

    store.publish = publish
    result = store.merge()
    assert result is not None
    store.close()
    assert seen and seen[-1] == (1, Path(result["base"]).resolve())


@pytest.fixture(scope="module")
def pq_searcher(tmp_path_factory, tiny_model_dir):
    """A searcher over an IVF-PQ (OPQ) index of 24 documents that keeps its codes, built with the tiny model."""
    from spanseek.core.loading import open_searcher
    from spanseek.indexer.build import BuildOptions, build_index

    tmp = tmp_path_factory.mktemp("pq")
    (tmp / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in make_corpus(seed=1, n_docs=24, n_paras=5)))
    build_index(tmp / "corpus.jsonl", tiny_model_dir, tmp / "index",
                BuildOptions(factory="OPQ16,IVF8,PQ16x4", shard_passages=40, progress=False, precision="fp32",
                             gpu=False, keep_codes=True))
    return open_searcher(tmp / "index", tiny_model_dir, device="cpu", precision="fp32")


def snapshots(base, encoder):
    """A snapshot after each of a series of writes over ``base``: adds, replacements of a base and of a segment
    document, deletes of both; each document encoded once, as a server holds it."""
    from spanseek.core.live_lexical import BaseTerms
    from spanseek.core.segment import LiveIndex, empty_like
    from spanseek.indexer.live import Segment

    segment, template, terms = Segment.over(base), empty_like(base.faiss), BaseTerms.of(base)
    new = [{**d, "id": f"n{i}", "title": f"New {i}"} for i, d in enumerate(make_corpus(seed=5, n_docs=4))]
    ids = [d["id"] for d in base.docs]
    copied = [" ".join(p["text"].upper().split()) for p in base.passages if p["doc"] == 0]  # copies of d0's
    steps = [("upsert", new[:2]), ("upsert", [{**new[2], "id": ids[1]}]), ("delete", [ids[3]]),
             ("upsert", [{"id": "c0", "title": "Copy", "paragraphs": copied}]),
             ("upsert", [{**new[3], "id": "n1"}]), ("delete", ["n0"]), ("upsert", [new[2]])]
    for op, arg in steps:
        if op == "upsert":
            segment.upsert([encoder.encode(doc(d)) for d in arg])
        else:
            segment.delete(arg)
        yield LiveIndex(base, list(segment.docs.values()), np.asarray(sorted(segment.tombstones), np.int64),
                        template, terms)


@pytest.mark.parametrize("which", ["flat", "ivf-pq"])
def test_every_snapshot_searches_as_one_made_from_scratch(which, tiny_searcher, pq_searcher, encoder):
    """Each write's snapshot (its documents' vectors, codes and faiss rows made once, when written) returns what a
    snapshot made from scratch over the same documents returns, for every unit and mode; an IVF segment filled
    with its documents' codes holds what adding their vectors gives."""
    import dataclasses

    import faiss

    from spanseek.core.phrase_index import as_float32
    from spanseek.core.segment import LiveIndex, empty_like, searcher_over

    searcher = tiny_searcher if which == "flat" else pq_searcher
    for snap in snapshots(searcher.index, encoder):
        fresh = LiveIndex(snap.base, [dataclasses.replace(d) for d in snap.segment],
                          np.setdiff1d(snap.deleted_docs, snap.base.deleted_docs), empty_like(snap.base.faiss),
                          snap.lexical.base_terms if snap.lexical is not None else None)
        for unit in UNITS:
            for mode, collapse in itertools.product(MODES, (False, True)):
                assert (hits_of(searcher_over(searcher, snap), unit, mode, collapse=collapse)
                        == hits_of(searcher_over(searcher, fresh), unit, mode, collapse=collapse)), (which, unit, mode)
        added = empty_like(snap.base.faiss)
        kept = np.concatenate([d.kept for d in snap.segment])
        added.add(as_float32(snap.seg_vectors[kept]))
        for index in (added, snap.faiss.segment):
            if (ivf := faiss.try_extract_index_ivf(index)) is not None:
                ivf.nprobe = 4
        x = as_float32(snap.seg_vectors[::7])
        got, want = snap.faiss.segment.search(x, 5), added.search(x, 5)
        np.testing.assert_array_equal(got[1], want[1])
        np.testing.assert_allclose(got[0], want[0], rtol=1e-6)


def test_a_write_widens_and_encodes_its_own_document_not_the_segment_again(pq_searcher, encoder, monkeypatch):
    """A snapshot makes the float32 vectors and the codes of the documents written since the last one only: over a
    series of writes, each token of each version written is widened once (it was every segment token each write)."""
    import spanseek.core.segment as segment_module

    widened: list[int] = []
    as_float32 = segment_module.as_float32
    monkeypatch.setattr(segment_module, "as_float32", lambda rows: widened.append(len(rows)) or as_float32(rows))
    written: dict[int, EncodedDocument] = {}  # every version written (held: ids stay theirs)
    for snap in snapshots(pq_searcher.index, encoder):
        written.update({id(d): d for d in snap.segment})
        assert snap.seg_codes is not None and len(snap.seg_codes) == len(snap.seg_vectors)
    assert sum(widened) == sum(d.tokens for d in written.values())


def test_writes_and_searches_over_a_flat_base_copy_no_vector_into_a_faiss_index(tiny_searcher, encoder, monkeypatch):
    """Over a flat base the dense leg scans the segment's vectors itself: no write, nor the search after it, fills a
    faiss index of the segment (each write copied all its vectors into one)."""
    import faiss

    from spanseek.core.segment import searcher_over

    added: list[int] = []
    add = faiss.IndexFlat.add
    monkeypatch.setattr(faiss.IndexFlat, "add", lambda self, x: added.append(len(x)) or add(self, x))
    for snap in snapshots(tiny_searcher.index, encoder):
        assert hits_of(searcher_over(tiny_searcher, snap), "phrase", "dense")
    assert added == []


def test_searches_over_a_flat_base_widen_each_written_document_once_not_the_segment_each_batch(tiny_searcher,
                                                                                               encoder, monkeypatch):
    """The flat scan of a snapshot's segment multiplies float32 vectors made once a written document and shared by
    the later snapshots (``core.widened``): over a series of writes, each searched twice, each version written is
    widened once (the whole segment was widened at every batch)."""
    import spanseek.core.dense as dense_module
    import spanseek.core.segment as segment_module
    import spanseek.core.widened as widened_module
    from spanseek.core.segment import searcher_over

    widened: list[int] = []
    for module in (dense_module, segment_module, widened_module):
        real = module.as_float32
        monkeypatch.setattr(module, "as_float32", lambda rows, real=real: widened.append(
            len(rows) if np.asarray(rows).dtype == np.float16 and len(rows) > 2 else 0) or real(rows))
    written: dict[int, EncodedDocument] = {}
    for snap in snapshots(tiny_searcher.index, encoder):
        written.update({id(d): d for d in snap.segment})
        for _ in range(2):
            assert hits_of(searcher_over(tiny_searcher, snap), "passage", "dense")
    assert sum(widened) == sum(d.tokens for d in written.values())


def test_a_snapshot_s_searcher_keeps_the_searcher_s_chunk_size(tiny_searcher, tiny_index):
    """A chunk size set on the searcher a server was given (``Searcher.chunk_size``: how many questions a call
    encodes and searches at a time) was lost on the searcher of each live snapshot, which took the class's."""
    from spanseek.core.phrase_index import PhraseIndex
    from spanseek.core.segment import searcher_over

    tiny_searcher.chunk_size = 7
    try:
        assert searcher_over(tiny_searcher, PhraseIndex(tiny_index)).chunk_size == 7
    finally:
        del tiny_searcher.chunk_size


def test_a_base_behind_an_id_map_takes_writes_and_searches_as_the_plain_one(tmp_path, tiny_corpus,
                                                                          tiny_model_dir, tiny_searcher, encoder,
                                                                          monkeypatch):
    """An index built with an id map (``--factory IDMap,Flat``) takes writes: each snapshot over it searches as the
    same snapshot over the plain Flat index of the same corpus searched by faiss (as the id map's is), with a filter
    too (its segment's faiss index was a copy of the id map, which takes no rows without ids: the first search after
    a write failed)."""
    from spanseek.core.loading import open_searcher
    from spanseek.core.segment import SegmentedFaiss
    from spanseek.indexer.build import BuildOptions, build_index

    monkeypatch.setattr(SegmentedFaiss, "flat_parts", lambda self: None)  # (ties in the order faiss merges them)

    build_index(tiny_corpus, tiny_model_dir, tmp_path / "idmap",
                BuildOptions(factory="IDMap,Flat", shard_passages=7, progress=False, precision="fp32", gpu=False))
    mapped = open_searcher(tmp_path / "idmap", tiny_model_dir, device="cpu", precision="fp32")
    snapshots_search_alike(mapped, tiny_searcher, encoder)


@pytest.fixture(scope="module")
def filtered_searcher(tmp_path_factory, tiny_corpus, filter_model_dir):
    """A searcher over a Flat index of the tiny corpus whose filter head kept some of its tokens: faiss holds them
    behind an id map (``IDMap2,Flat``), its rows numbered apart from the token ids."""
    from spanseek.core.loading import open_searcher
    from spanseek.indexer.build import BuildOptions, build_index

    out = tmp_path_factory.mktemp("filtered") / "index"
    build_index(tiny_corpus, filter_model_dir, out, BuildOptions(shard_passages=7, progress=False, precision="fp32",
                                                                 gpu=False, filter_threshold=0.5))
    return open_searcher(out, filter_model_dir, device="cpu", precision="fp32")


@pytest.mark.parametrize("which", ["ivf-pq", "filtered-id-map"])
def test_a_filtered_faiss_search_of_each_snapshot_returns_the_best_allowed_tokens(which, pq_searcher,
                                                                                 filtered_searcher, encoder,
                                                                                 monkeypatch):
    """Over an IVF base, and a base whose filter head kept some tokens (behind an id map: its rows are not the token
    ids), a filter's faiss search of a snapshot (every list probed) returns the best allowed tokens of the base and
    the segment, as the unfiltered ranking of every token cut to the allowed ones does; and every snapshot's filtered
    searches translate the base's tokens through one map made once for the base (each write's first filtered search
    made one over every token: 0.12-0.28 s at 12M tokens). (Behind an id map the filter was asked of the rows'
    numbers, not their tokens': the base's best allowed tokens were missed, and a search filtered to one document
    returned another's hits.)"""
    import faiss

    from spanseek.core.phrase_index import as_float32
    from spanseek.core.selection import UNIT_OF_PASSAGE, Layout, select

    made: list[int] = []
    copy = faiss.copy_array_to_vector
    monkeypatch.setattr(faiss, "copy_array_to_vector", lambda a, v: made.append(len(a)) or copy(a, v))
    base = (pq_searcher if which == "ivf-pq" else filtered_searcher).index
    assert which == "ivf-pq" or base.faiss.ntotal < len(base.token_passage)
    nlist = faiss.extract_index_ivf(base.faiss).nlist if which == "ivf-pq" else None
    for snap in snapshots(base, encoder):
        layout = Layout(snap, {u: f(snap) for u, f in UNIT_OF_PASSAGE.items() if f is not None})
        keep = [d["id"] for d in snap.docs[len(snap.docs) // 3:]]
        sel = select(snap, SearchFilter.from_json({"doc_ids": keep}), layout)
        allowed = sel.passages[np.asarray(snap.token_passage)]
        x = as_float32(snap.seg_vectors[::9])
        dist, ids = snap.faiss.search(x, 10, params=snap.search_parameters(nlist, sel.selector))
        all_dist, all_ids = snap.faiss.search(x, snap.faiss.ntotal, params=snap.search_parameters(nlist))
        for row in range(len(x)):
            want = all_ids[row][(all_ids[row] >= 0) & allowed[np.maximum(all_ids[row], 0)]][:10]
            assert allowed[ids[row]].all() and len(want) == 10
            np.testing.assert_allclose(np.sort(dist[row]), np.sort(all_dist[row][np.isin(all_ids[row], want)]),
                                       rtol=1e-6)  # (a flat scan with a selector sums in another order than BLAS)
    n = len(base.token_passage)  # the base's map at most once (an earlier search may have made it), else segments'
    assert made.count(n) <= 1 and max(m for m in made if m != n) < len(snap.faiss.segment_ids) + 1


def test_an_ivf_base_behind_an_id_map_takes_writes_and_searches_as_the_plain_one(tmp_path, tiny_corpus,
                                                                               tiny_model_dir, encoder):
    """An IVF index built behind an id map (``--factory IDMap,IVF4,Flat``) takes writes: each snapshot over it
    searches as the same snapshot over the IVF index inside the map (which numbers the tokens as the map does), with
    a filter too (a written document's codes were asked of the id map, which encodes nothing, and the segment filled
    with float vectors taken for codes: the first search after a write failed)."""
    import faiss

    from spanseek.core.loading import open_searcher
    from spanseek.indexer.build import BuildOptions, build_index

    build_index(tiny_corpus, tiny_model_dir, tmp_path / "idmap",
                BuildOptions(factory="IDMap,IVF4,Flat", shard_passages=7, progress=False, precision="fp32", gpu=False))
    mapped, plain = (open_searcher(tmp_path / "idmap", tiny_model_dir, device="cpu", precision="fp32") for _ in "ab")
    id_map = plain.index.faiss  # (owns the IVF index below: kept alive here)
    assert np.array_equal(faiss.vector_to_array(id_map.id_map), np.arange(id_map.ntotal))
    plain.index.faiss = faiss.downcast_index(id_map.index)
    snapshots_search_alike(mapped, plain, encoder)


def snapshots_search_alike(mapped, plain, encoder) -> None:
    """Each of ``snapshots`` over ``mapped``'s index gives the dense hits, every unit (and the last with a filter),
    of the same snapshot over ``plain``'s."""
    from spanseek.core.segment import searcher_over

    flt = SearchFilter.from_json({"must_not": [{"doc_ids": ["n1"]}]})
    pairs = list(zip(snapshots(mapped.index, encoder), snapshots(plain.index, encoder), strict=True))
    for at, (snap, same) in enumerate(pairs):
        for unit, f in [(u, None) for u in UNITS] + ([("doc", flt)] if at == len(pairs) - 1 else []):
            assert (hits_of(searcher_over(mapped, snap), unit, "dense", f)
                    == hits_of(searcher_over(plain, same), unit, "dense", f)), (at, unit, f)


def test_delete_by_filter_reads_the_writes_whose_snapshot_could_not_be_published(tmp_path, tiny_index, tiny_searcher,
                                                                                 encoder, monkeypatch):
    """Writes logged while no snapshot could be published (memory): a delete by filter deletes what the documents
    hold now, not what the last published snapshot held (it deleted a new version that no longer matched, and left a
    new document that matched)."""
    import spanseek.indexer.live as live_module

    store = open_store(tmp_path / "live", tiny_index, encoder, tiny_searcher, [])
    base = make_corpus(seed=3, n_docs=2, n_paras=1)
    upsert(store, encoder, [{**base[0], "id": "m0", "meta": {"year": 2005}}])
    made = live_module.LiveIndex

    def no_memory(*args, **kwargs):
        raise MemoryError("cannot allocate 64 MB")

    monkeypatch.setattr(live_module, "LiveIndex", no_memory)
    upsert(store, encoder, [{**base[0], "id": "m0", "meta": {"year": 1995}},
                            {**base[1], "id": "m1", "meta": {"year": 2008}}])
    assert store.publish_problem is not None
    deleted, _ = store.delete_where(SearchFilter.from_json({"must": [{"key": "year", "range": {"gte": 2000}}]}))
    assert deleted == ["m1"]
    assert store.get("m0") is not None and store.get("m1") is None
    monkeypatch.setattr(live_module, "LiveIndex", made)
    assert store.delete_where(SearchFilter.from_json({"must": [{"key": "year", "range": {"gte": 1990}}]}), True)[0] == [
        "m0"]


def test_a_merge_holds_the_base_it_merged_away_no_longer_once_its_snapshot_is_served(tmp_path, tiny_index,
                                                                                     tiny_searcher, encoder,
                                                                                     tiny_model_dir, monkeypatch):
    """Once the merged base's snapshot is served, nothing of the merge keeps the base before: the merge thread held
    it to its end (removing the old logs and, for a merged base, its directory), so a merge shown in /info could
    leave the old base's arrays in memory for as long as that took."""
    import gc
    import weakref
    from types import SimpleNamespace

    import spanseek.indexer.live as live_module
    from spanseek.core.phrase_index import PhraseIndex
    from spanseek.core.segment import searcher_over
    from spanseek.indexer.build import BuildOptions

    served: list = []
    base = PhraseIndex(tiny_index)
    store = live_module.LiveStore(tmp_path / "live", tiny_index, base, encoder,
                                  lambda snap: served.__setitem__(slice(None), [searcher_over(tiny_searcher, snap)]))
    first = weakref.ref(base)
    del base
    upsert(store, encoder, [{"id": "m1", "title": "M", "paragraphs": ["In 1500 Ines built a bridge."]}])
    held_at_end = []

    def info(msg, *args):
        if msg.startswith("merged "):  # the merge's last step, past its swap
            gc.collect()
            held_at_end.append(first() is not None)

    monkeypatch.setattr(live_module, "log", SimpleNamespace(info=info, warning=live_module.log.warning,
                                                           exception=live_module.log.exception))
    store.model = tiny_model_dir
    assert store.merge(BuildOptions(shard_passages=7, progress=False, precision="fp32")) is not None
    store.close()
    assert held_at_end == [False]


def test_writes_go_on_while_a_merge_makes_its_new_base_s_bm25_term_tables(tmp_path, tiny_index, tiny_searcher,
                                                                          encoder, tiny_model_dir, monkeypatch):
    """The new base's BM25 term tables (every passage tokenised: 18 s of CPU at 100,000 passages) are made before the
    merge takes the store's lock: a write made meanwhile returns at once (it waited for them), and is served over
    the new base once the merge is done, as a build of the live documents holds it."""
    import threading

    from spanseek.core.live_lexical import BaseTerms
    from spanseek.indexer.build import BuildOptions

    published: list = []
    store = open_store(tmp_path / "live", tiny_index, encoder, tiny_searcher, published)
    upsert(store, encoder, [{**make_corpus(seed=1, n_docs=1)[0], "id": "n0"}])
    store.model = tiny_model_dir
    making, release = threading.Event(), threading.Event()
    real = BaseTerms.of.__func__

    def slow(cls, index):
        making.set()
        assert release.wait(60)
        return real(cls, index)

    monkeypatch.setattr(BaseTerms, "of", classmethod(slow))
    merged: list = []
    merge = threading.Thread(target=lambda: merged.append(store.merge(BuildOptions(shard_passages=7, progress=False,
                                                                                   precision="fp32"))))
    merge.start()
    try:
        assert making.wait(60)
        wrote = threading.Thread(target=store.delete, args=(["d0"],))
        wrote.start()
        wrote.join(10)
        assert not wrote.is_alive(), "a write waited for the new base's BM25 term tables"
    finally:
        release.set()
        merge.join(60)
    assert merged[0]["documents"] == 1
    assert store.get("d0") is None and store.describe()["tombstones"] == 1 and store.get("n0") is not None
    assert "d0" not in {h.doc_id for hits in published[-1].search(QUESTIONS, SearchParams("doc", 6)) for h in hits}
    store.close()
