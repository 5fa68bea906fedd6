"""Upsert, delete and compact by document id (``indexer.lifecycle``), end to end on the tiny model.

Oracles: a deleted or replaced document is never returned in any mode or unit, and top_k is still filled;
upserting twice changes nothing the second time; ``index verify`` counts live and deleted documents; a compacted
index holds exactly the arrays of a fresh build of the live documents (and, Flat, gives the same results in every
mode), and its dense results equal the masked index's; a change interrupted before or after its commit point opens
as the old or the new index, and finishing it gives what an uninterrupted change gives.

    .venv/bin/python -m pytest -q tests/indexer/test_lifecycle.py          (-m slow: killed with SIGKILL)
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys

import numpy as np
import pytest

from spanseek.core import integrity, phrase_index
from spanseek.core.io import CorpusError
from spanseek.core.params import SearchParams
from spanseek.core.phrase_index import PhraseIndex
from spanseek.core.search import Searcher
from spanseek.indexer.add import upsert_documents
from spanseek.indexer.build import BuildError, BuildOptions, build_index
from spanseek.indexer.lifecycle import compact_index, delete_documents, read_ids
from spanseek.indexer.verify import verify_index
from tests.conftest import make_corpus

UNITS = ("phrase", "passage", "doc")
MODES = ("dense", "lexical", "hybrid")
QUESTIONS = ["Who built the castle in 1500?", "When did Cato build the bridge?", "Which river and mountain?"]


def _opts(factory: str = "Flat", **kw) -> BuildOptions:
    return BuildOptions(factory=factory, shard_passages=30, progress=False, precision="fp32", gpu=False, **kw)


def _write(path, docs):
    path.write_text("".join(json.dumps(d) + "\n" for d in docs))
    return path


def base_docs() -> list[dict]:
    docs = make_corpus(seed=11, n_docs=12, n_paras=3)
    for i, d in enumerate(docs):
        d["meta"] = {"lang": "en" if i % 2 else "fr", "year": 2000 + i % 3}
    return docs


def update_docs(base: list[dict]) -> list[dict]:
    """d1 changed, d2 as it is, two new documents."""
    fresh = make_corpus(seed=12, n_docs=3, n_paras=2)
    return [
        {**base[1], "paragraphs": fresh[0]["paragraphs"], "title": "Title 1 revised"},
        base[2],
        {**fresh[1], "id": "n1", "title": "New one", "meta": {"lang": "de"}},
        {**fresh[2], "id": "n2", "title": "New two"},
    ]


DELETE = ["d3", "d4", "missing"]


def live_docs(base: list[dict], update: list[dict]) -> list[dict]:
    """The documents after upsert + delete, in index order: base survivors then the upserted new versions."""
    replaced = {u["id"] for u in update if u not in base}
    return [d for d in base if d["id"] not in replaced | set(DELETE)] + [u for u in update if u not in base]


def _vectors(searcher: Searcher, n: int = 3):
    rng = np.random.default_rng(0)
    d = searcher.index.vectors.shape[1]
    return rng.standard_normal((n, d)).astype(np.float32), rng.standard_normal((n, d)).astype(np.float32)


def _search(searcher: Searcher, params: SearchParams):
    qs, qe = _vectors(searcher, len(QUESTIONS))
    return searcher.search_vectors(qs, qe, params, questions=QUESTIONS)


def _key(hit, scores: bool = True):
    return (hit.doc_id, hit.paragraph, hit.start, hit.end, hit.text) + ((round(hit.score, 3),) if scores else ())


@pytest.fixture(scope="module")
def lifecycle(tmp_path_factory, tiny_model_dir):
    """An index built from the base corpus, upserted, then with documents deleted (Flat)."""
    d = tmp_path_factory.mktemp("lifecycle")
    base, update = base_docs(), update_docs(base_docs())
    out = d / "idx"
    build_index(_write(d / "base.jsonl", base), tiny_model_dir, out, _opts())
    m1, changes = upsert_documents(out, _write(d / "update.jsonl", update), model=tiny_model_dir, opts=_opts())
    report = delete_documents(out, DELETE)
    return {"dir": out, "base": base, "update": update, "changes": changes, "report": report,
            "update_path": d / "update.jsonl"}


def test_upsert_and_delete_report_what_changed(lifecycle):
    assert lifecycle["changes"].added == 2 and lifecycle["changes"].replaced == 1
    assert lifecycle["changes"].unchanged == 1
    assert lifecycle["report"]["deleted"] == 2 and lifecycle["report"]["not_found"] == ["missing"]
    index = PhraseIndex(lifecycle["dir"])
    assert index.deleted_docs.tolist() == [1, 3, 4]  # the old d1, d3, d4
    assert index.live_documents == 12 + 2 - 2 == len(live_docs(lifecycle["base"], lifecycle["update"]))
    report = verify_index(lifecycle["dir"], sample=50)
    assert report["ok"], report
    assert report["documents"] == {"live": 12, "deleted": 3}


def test_upsert_and_delete_twice_change_nothing(lifecycle, tiny_model_dir):
    before = (lifecycle["dir"] / phrase_index.MANIFEST).read_bytes()
    _, changes = upsert_documents(lifecycle["dir"], lifecycle["update_path"], model=tiny_model_dir, opts=_opts())
    assert (changes.added, changes.replaced, changes.unchanged) == (0, 0, 4)
    report = delete_documents(lifecycle["dir"], DELETE)
    assert report["deleted"] == 0 and report["not_found"] == DELETE
    assert (lifecycle["dir"] / phrase_index.MANIFEST).read_bytes() == before


def test_a_change_that_finishes_reports_no_interruption(lifecycle, tmp_path, caplog):
    """Each change rolls its own journal forward: that is no "interrupted `index add`" warning (which an operator
    must be able to trust), while a journal left by a killed change is one."""
    index = tmp_path / "idx"
    shutil.copytree(lifecycle["dir"], index)
    with caplog.at_level("INFO"):
        assert delete_documents(index, ["d5"])["deleted"] == 1
    assert not [r for r in caplog.records if r.levelname == "WARNING"], caplog.text
    (index / integrity.JOURNAL).write_text(json.dumps({"files": [], "manifest": phrase_index.Manifest.load(index).to_dict()}))
    caplog.clear()
    assert phrase_index.recover(index) == "rolled forward"
    assert "finished an interrupted `index add`" in caplog.text


def test_a_deletion_mask_the_manifest_does_not_record_is_refused(tiny_index, tmp_path):
    """A deleted.npy put into an index by hand would hide documents while verify says ok: refused by name."""
    index = tmp_path / "idx"
    shutil.copytree(tiny_index, index)
    np.save(index / phrase_index.DELETED, np.array([0, 1]))
    with pytest.raises(phrase_index.IndexFormatError, match="deleted.npy: a file the manifest does not record"):
        PhraseIndex(index)
    report = verify_index(index, sample=10)
    assert not report["ok"] and "deleted.npy" in json.dumps(report)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("unit", UNITS)
def test_deleted_documents_are_never_returned_and_top_k_is_filled(lifecycle, unit, mode):
    index = PhraseIndex(lifecycle["dir"])
    searcher = Searcher(index)
    live = live_docs(lifecycle["base"], lifecycle["update"])
    texts = {(d["id"], p) for d in live for p in d["paragraphs"]}
    everything = _search(searcher, SearchParams(unit=unit, top_k=10_000, mode=mode))
    for hits in everything:
        assert hits
        for h in hits:  # every hit is a live document's passage (the old d1's text is gone)
            assert (h.doc_id, h.passage) in texts and h.passage_id not in set(np.flatnonzero(
                np.isin([p["doc"] for p in index.passages], index.deleted_docs)))
            assert h.paragraph == next(d for d in live if d["id"] == h.doc_id)["paragraphs"].index(h.passage)
    if mode == "dense":  # every live unit is found (lexical: only units that share a word with the question)
        n_units = {"doc": len(live), "passage": sum(len(d["paragraphs"]) for d in live)}
        for hits in everything:
            assert len(hits) == n_units.get(unit, len(hits))
    top = _search(searcher, SearchParams(unit=unit, top_k=4, mode=mode))
    for hits, all_hits in zip(top, everything, strict=True):
        assert len(hits) == min(4, len(all_hits))


def test_verify_names_a_damaged_mask(lifecycle, tmp_path):
    broken = tmp_path / "broken"
    shutil.copytree(lifecycle["dir"], broken)
    np.save(broken / phrase_index.DELETED, np.array([3, 1], np.int64))
    report = verify_index(broken, sample=10)
    assert not report["ok"] and report["problems"][0].startswith(f"{broken / phrase_index.DELETED}: ")


def test_export_writes_the_live_documents_and_a_build_of_it_is_the_compacted_index(lifecycle, tiny_model_dir,
                                                                                     tmp_path):
    """``index export`` after upserts and deletions: exactly the live documents (ids, titles, metadata, paragraphs,
    per-passage metadata), in index order; building it gives the index ``compact`` gives (Flat)."""
    from spanseek.core.io import read_corpus
    from spanseek.indexer.lifecycle import export_documents

    source = tmp_path / "idx"
    shutil.copytree(lifecycle["dir"], source)
    before = {p.name: p.stat().st_mtime_ns for p in source.iterdir()}
    report = export_documents(source, tmp_path / "live.jsonl.gz")
    live = live_docs(lifecycle["base"], lifecycle["update"])
    assert report == {"documents": len(live), "passages": sum(len(d["paragraphs"]) for d in live),
                      "out": str(tmp_path / "live.jsonl.gz")}
    got = list(read_corpus(tmp_path / "live.jsonl.gz"))
    assert [(d.id, d.title, list(d.paragraphs), d.meta) for d in got] == \
        [(d["id"], d["title"], d["paragraphs"], d.get("meta", {})) for d in live]
    assert {p.name: p.stat().st_mtime_ns for p in source.iterdir()} == before
    for inside in (source / phrase_index.PASSAGES, source / "export.jsonl"):  # it overwrote the index's own file
        with pytest.raises(BuildError, match="lies inside the index"):
            export_documents(source, inside)
    assert {p.name: p.stat().st_mtime_ns for p in source.iterdir()} == before
    build_index(tmp_path / "live.jsonl.gz", tiny_model_dir, tmp_path / "rebuilt", _opts())
    compact_index(source)
    a, b = PhraseIndex(source), PhraseIndex(tmp_path / "rebuilt")
    assert a.passages == b.passages and a.docs == b.docs
    assert np.array_equal(np.asarray(a.vectors), np.asarray(b.vectors))


def test_compact_equals_a_fresh_build_of_the_live_documents(lifecycle, tiny_model_dir, tmp_path):
    compacted = tmp_path / "compacted"
    shutil.copytree(lifecycle["dir"], compacted)
    masked = Searcher(PhraseIndex(compacted))
    report = compact_index(compacted)
    assert report["compacted"] and report["removed"]["documents"] == 3
    assert report["deleted_documents"] == 0 and report["disk_bytes"] < report["disk_bytes_before"]
    assert compact_index(compacted)["compacted"] is False  # nothing left to compact
    fresh = tmp_path / "fresh"
    build_index(_write(tmp_path / "live.jsonl", live_docs(lifecycle["base"], lifecycle["update"])), tiny_model_dir,
                fresh, _opts())
    a, b = PhraseIndex(compacted), PhraseIndex(fresh)
    for field in ("tokens", "passages", "documents", "indexed_tokens"):
        assert getattr(a.manifest, field) == getattr(b.manifest, field), field
    for arr in ("vectors", "token_passage", "token_offsets", "token_flags", "passage_tokens"):
        assert np.array_equal(np.asarray(getattr(a, arr)), np.asarray(getattr(b, arr))), arr
    assert a.passages == b.passages and a.docs == b.docs and not len(a.deleted_docs)
    report = verify_index(compacted, sample=50)
    assert report["ok"] and report["documents"] == {"live": 12, "deleted": 0}, report
    sa, sb = Searcher(a), Searcher(b)
    for unit in UNITS:
        dense = SearchParams(unit=unit, top_k=5, mode="dense")
        assert [[_key(h) for h in hits] for hits in _search(masked, dense)] == \
            [[_key(h) for h in hits] for hits in _search(sa, dense)]
        for mode in MODES:
            params = SearchParams(unit=unit, top_k=5, mode=mode)
            assert [[(*_key(h), h.passage_id) for h in hits] for hits in _search(sa, params)] == \
                [[(*_key(h), h.passage_id) for h in hits] for hits in _search(sb, params)], (unit, mode)


def test_compact_keeps_a_trained_ivf_index(tmp_path, tiny_model_dir):
    base = base_docs()
    out = tmp_path / "ivf"
    build_index(_write(tmp_path / "base.jsonl", base), tiny_model_dir, out, _opts("IVF4,SQ8", keep_codes=True))
    delete_documents(out, ["d0", "d5", "d6"])
    masked = Searcher(PhraseIndex(out))
    before = [_search(masked, SearchParams(unit=u, top_k=5, mode="dense", nprobe=4)) for u in UNITS]
    report = compact_index(out)
    index = PhraseIndex(out)
    assert report["removed"]["documents"] == 3 and index.faiss.ntotal == index.num_tokens
    assert len(index.codes) == index.num_tokens
    after = [_search(Searcher(index), SearchParams(unit=u, top_k=5, mode="dense", nprobe=4)) for u in UNITS]
    assert [[[_key(h) for h in hits] for hits in r] for r in before] == \
        [[[_key(h) for h in hits] for hits in r] for r in after]
    assert verify_index(out, sample=50)["ok"]


def test_upsert_refuses_a_repeated_id_and_changes_nothing(lifecycle, tmp_path, tiny_model_dir):
    before = (lifecycle["dir"] / phrase_index.MANIFEST).read_bytes()
    doc = {"id": "x", "title": "t", "paragraphs": ["The castle stood by the river."]}
    bad = _write(tmp_path / "bad.jsonl", [doc, doc])
    with pytest.raises(CorpusError, match=r"bad\.jsonl:2: document id 'x' was already used on line 1"):
        upsert_documents(lifecycle["dir"], bad, model=tiny_model_dir, opts=_opts())
    assert (lifecycle["dir"] / phrase_index.MANIFEST).read_bytes() == before


@pytest.mark.parametrize(("held", "given"), [
    ("caf\u00e9", "cafe\u0301"),  # composed held, decomposed given
    ("vi\u1eb9\u0302t", "vi\u1ec7t"),  # "ẹ" + U+0302 held (neither composed nor decomposed), "ệ" composed given
])
def test_upsert_replaces_a_document_held_under_the_other_unicode_spelling_of_its_id(tmp_path, tiny_model_dir, held,
                                                                                   given):
    """A corpus naming "café" decomposed (a file named on a Mac) replaces the document an index holds composed, as
    ``PUT /documents`` does: one live document, under the spelling the index held, not a second "café". An accent
    held in an order neither composed nor decomposed is the same id too: the upsert was refused naming its staging
    file (``INDEX/add.staging/upsert.jsonl:1: document id 'việt' is already in the index``)."""
    nfc = held
    docs = make_corpus(seed=5, n_docs=2, n_paras=2)
    docs[0]["id"] = nfc
    out = tmp_path / "idx"
    build_index(_write(tmp_path / "base.jsonl", docs), tiny_model_dir, out, _opts())
    changed = {**docs[0], "id": given, "title": "Revised"}
    _, changes = upsert_documents(out, _write(tmp_path / "up.jsonl", [changed]), model=tiny_model_dir, opts=_opts())
    assert (changes.added, changes.replaced, changes.unchanged) == (0, 1, 0)
    index = PhraseIndex(out)
    assert index.live_documents == 2
    live = [d for i, d in enumerate(index.docs) if i not in set(index.deleted_docs.tolist())]
    assert sorted((d["id"], d["title"]) for d in live) == sorted([(nfc, "Revised"), (docs[1]["id"], docs[1]["title"])])
    _, again = upsert_documents(out, _write(tmp_path / "up2.jsonl", [changed]), model=tiny_model_dir, opts=_opts())
    assert (again.added, again.replaced, again.unchanged) == (0, 0, 1)


def test_upsert_into_an_index_holding_both_unicode_spellings_of_an_id_replaces_the_one_named(tmp_path, tiny_model_dir,
                                                                                              monkeypatch):
    """An index built before ids were read in either spelling may hold "café" composed and decomposed as two
    documents. An upsert naming one replaces that one (the other stays as it was): the other spelling held is not
    taken for a repeat of its id, which refused the upsert ("already in the index")."""
    import spanseek.core.io as core_io
    import spanseek.indexer.build as build

    nfc, nfd = "caf\u00e9", "cafe\u0301"
    docs = make_corpus(seed=5, n_docs=3, n_paras=2)
    docs[0]["id"], docs[1]["id"] = nfc, nfd
    out = tmp_path / "idx"
    with monkeypatch.context() as m:  # built as before: each spelling its own id
        for module in (build, core_io):
            m.setattr(module, "unique_ids", lambda found, *_: found)
        build_index(_write(tmp_path / "base.jsonl", docs), tiny_model_dir, out, _opts())
    _, changes = upsert_documents(out, _write(tmp_path / "up.jsonl", [{**docs[1], "title": "Revised"}]),
                                  model=tiny_model_dir, opts=_opts())
    assert (changes.added, changes.replaced, changes.unchanged) == (0, 1, 0)
    index = PhraseIndex(out)
    live = [d for i, d in enumerate(index.docs) if i not in set(index.deleted_docs.tolist())]
    assert sorted((d["id"], d["title"]) for d in live) == sorted(
        [(nfc, docs[0]["title"]), (nfd, "Revised"), (docs[2]["id"], docs[2]["title"])])


def test_read_ids_and_an_empty_delete(tmp_path, lifecycle):
    f = tmp_path / "ids.txt"
    f.write_text("b\n\n c \na\n")
    assert read_ids("a, b,,", f) == ["a", "b", "c"]
    with pytest.raises(ValueError, match="no document ids"):
        delete_documents(lifecycle["dir"], [])


def test_an_ids_file_that_is_not_utf8_is_refused_naming_it_and_the_line(tmp_path, tiny_index, capsys):
    """It was a bare ``'utf-8' codec can't decode byte 0xe9 in position 5``; nothing is deleted."""
    from spanseek.cli import main

    index = tmp_path / "index"
    shutil.copytree(tiny_index, index)
    ids = tmp_path / "ids.txt"
    ids.write_bytes(b"d0\nd\xe91\n")
    with pytest.raises(CorpusError, match=rf"^{ids}:2: not UTF-8 \(byte 1 of the line, 0xe9\)"):
        read_ids("d2", ids)
    before = (index / phrase_index.MANIFEST).read_bytes()
    assert main(["index", "delete", "--index", str(index), "--ids-file", str(ids)]) == 2
    assert capsys.readouterr().err == (f"spanseek index delete: error: {ids}:2: not UTF-8 (byte 1 of the line, 0xe9); save "
                                       "the file as UTF-8\n")
    assert (index / phrase_index.MANIFEST).read_bytes() == before and not (index / phrase_index.DELETED).exists()


class Crash(Exception):
    pass


@pytest.mark.parametrize("where", ["before the journal", "after the journal"])
@pytest.mark.parametrize("change", ["upsert", "delete", "compact"])
def test_an_interrupted_change_opens_as_the_old_or_the_new_index(lifecycle, tmp_path, tiny_model_dir, monkeypatch,
                                                                  change, where):
    """A change that stops (an exception standing in for a crash) before the journal is rolled back when the index
    is next opened, one that stops after it is rolled forward; running it again then matches an uninterrupted one."""
    work, done = tmp_path / "work", tmp_path / "done"
    shutil.copytree(lifecycle["dir"], work)
    shutil.copytree(lifecycle["dir"], done)
    corpus = _write(tmp_path / "c.jsonl", [{**lifecycle["update"][2], "paragraphs": ["The king built a bridge."]},
                                           {"id": "n3", "title": "T", "paragraphs": ["A river in 1200."]}])

    def run(index_dir):
        if change == "upsert":
            upsert_documents(index_dir, corpus, model=tiny_model_dir, opts=_opts())
        elif change == "delete":
            delete_documents(index_dir, ["d5", "n1"])
        else:
            compact_index(index_dir)

    run(done)
    old_manifest = (work / phrase_index.MANIFEST).read_bytes()
    real_replace, calls = os.replace, [0]

    def crashing_replace(src, dst, *args, **kwargs):
        journal = (work / integrity.JOURNAL).exists()
        if where == "before the journal" and str(dst).endswith(integrity.JOURNAL):
            raise Crash
        if where == "after the journal" and journal and not str(dst).endswith(integrity.JOURNAL):
            calls[0] += 1
            if calls[0] == 1:
                raise Crash
        return real_replace(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "replace", crashing_replace)
    with pytest.raises(Crash):
        run(work)
    monkeypatch.setattr(os, "replace", real_replace)
    opened = PhraseIndex(work)  # recovers
    assert not [p for p in work.iterdir() if integrity.is_scratch(p.name) and p.name != integrity.LOCK]
    if where == "before the journal":
        assert (work / phrase_index.MANIFEST).read_bytes() == old_manifest
        run(work)
        opened = PhraseIndex(work)
    expected = PhraseIndex(done)
    assert opened.docs == expected.docs and opened.passages == expected.passages
    assert np.array_equal(opened.deleted_docs, expected.deleted_docs)
    assert np.array_equal(np.asarray(opened.vectors), np.asarray(expected.vectors))
    assert verify_index(work, sample=20)["ok"]


def test_cli_upsert_delete_verify_search_compact(lifecycle, tmp_path, tiny_model_dir, capsys):
    from spanseek.cli import main

    out = tmp_path / "idx"
    shutil.copytree(lifecycle["dir"], out)
    model = ["--model", str(tiny_model_dir)]
    assert main(["index", "upsert", "--index", str(out), "--corpus", str(lifecycle["update_path"]), *model,
                 "--quiet"]) == 0
    printed = capsys.readouterr()
    assert "added 0, replaced 0, unchanged 4 documents" in printed.err
    # its summary counts the live documents (it counted deleted and replaced ones) and times this upsert, not the
    # build
    done = json.loads(printed.out)
    assert (done["documents"], done["deleted_documents"]) == (12, 3) and "build_seconds" not in done
    assert 0 <= done["seconds"] < 600
    ids = tmp_path / "ids.txt"
    ids.write_text("d6\nd7\n")
    assert main(["index", "delete", "--index", str(out), "--ids", "d5,d6", "--ids-file", str(ids)]) == 0
    assert json.loads(capsys.readouterr().out) == {"deleted": 3, "not_found": [], "live_documents": 9,
                                                   "deleted_documents": 6}
    assert main(["index", "verify", str(out), "--sample", "20"]) == 0
    assert json.loads(capsys.readouterr().out)["documents"] == {"live": 9, "deleted": 6}
    assert main(["search", "castle bridge", "--index", str(out), *model, "--unit", "doc", "--top-k", "5",
                 "--doc-ids", "d5,d8,n1,d9", "--where", "lang=en", "--mode", "dense"]) == 0
    hits = json.loads(capsys.readouterr().out)["hits"]
    assert sorted(h["doc_id"] for h in hits) == ["d9"]  # d5 deleted, d8 and n1 are not "en"
    assert main(["search", "castle", "--index", str(out), *model, "--where", "year=2001", "--title-prefix", "Title 1",
                 "--top-k", "3"]) == 0
    hits = json.loads(capsys.readouterr().out)["hits"]
    assert {h["doc_id"] for h in hits} <= {"d1", "d10"} and len(hits) == 3  # the new d1 kept its metadata
    assert main(["index", "compact", "--index", str(out), "--quiet"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["compacted"] and report["live_documents"] == 9 and report["deleted_documents"] == 0
    assert main(["search", "x", "--index", str(out), *model, "--where", "novalue"]) == 2
    assert "--where takes KEY=VALUE, got 'novalue'" in capsys.readouterr().err
    assert main(["index", "delete", "--index", str(out)]) == 2
    assert "no document ids to delete" in capsys.readouterr().err


KILLS = {  # (step, n, before/after, journal_only) -> rolled back or forward; see tests/indexer/test_add_crash.py
    "before the journal": (("os:replace", integrity.JOURNAL, "before", "0"), "back"),
    "mid renames": (("os:replace", "3", "after", "1"), "forward"),
}


@pytest.fixture(scope="module")
def kill_setup(tmp_path_factory, tiny_model_dir):
    """An IVF index with deletions, a corpus to upsert, and each change's uninterrupted result."""
    from tests.indexer.test_add_crash import OPTS

    d = tmp_path_factory.mktemp("kill")
    base = base_docs()
    built = d / "built"
    build_index(_write(d / "base.jsonl", base), tiny_model_dir, built, OPTS)
    delete_documents(built, ["d0", "d4"])
    corpus = _write(d / "upsert.jsonl", update_docs(base))
    done = {}
    for change in ("upsert", "compact"):
        done[change] = d / change
        shutil.copytree(built, done[change])
        if change == "upsert":
            upsert_documents(done[change], corpus, model=tiny_model_dir, opts=OPTS)
        else:
            compact_index(done[change], OPTS)
    return built, corpus, done


def _files(index_dir) -> dict:
    """Recorded checksums but the BM25 part's (its vocabulary order follows per-process string hashing)."""
    return {k: v[integrity.CHECKSUM] for k, v in phrase_index.Manifest.load(index_dir).files.items()
            if not k.startswith(phrase_index.LEXICAL + "/")}


@pytest.mark.slow  # a child process per case (the in-process interruptions above run by default)
@pytest.mark.parametrize("point", KILLS)
@pytest.mark.parametrize("change", ["upsert", "compact"])
def test_a_killed_change_opens_as_the_old_or_the_new_index(kill_setup, tmp_path, tiny_model_dir, change, point):
    """SIGKILL at a step (the child of tests/indexer/test_add_crash.py): the index opens and verifies as before the
    change or after it, and the change run again gives the uninterrupted result."""
    from tests.indexer.test_add_crash import CHILD, OPTS

    built, corpus, done = kill_setup
    args, outcome = KILLS[point]
    index = tmp_path / "idx"
    shutil.copytree(built, index)
    child = subprocess.run([sys.executable, "-c", CHILD, str(index), str(corpus), str(tiny_model_dir), *args, change],
                           capture_output=True, text=True, timeout=600)
    assert child.returncode == -signal.SIGKILL, child.stderr[-2000:]
    PhraseIndex(index)  # rolls back or forward
    assert _files(index) == _files(built if outcome == "back" else done[change])
    assert verify_index(index, sample=20)["ok"]
    if change == "upsert":
        upsert_documents(index, corpus, model=tiny_model_dir, opts=OPTS)
    else:
        compact_index(index, OPTS)
    assert _files(index) == _files(done[change])


@pytest.mark.parametrize("step", [("spanseek.indexer.lifecycle:write_faiss", ".add.tmp"), ("os:replace", "*")],
                         ids=["before the journal", "after the journal"])
def test_sigterm_stops_a_compact_as_ctrl_c_does(kill_setup, tmp_path, step):
    """SIGTERM killed `index compact` outright (status -15, nothing said, its partial files left beside the index
    until the next open). It now stops as a build or an add does: status 130, the partial files removed, one last line
    saying the index is unchanged and the same command runs the compact again (which then gives the uninterrupted
    result), or, past the commit point, that the compact is complete."""
    from tests.indexer.test_add_crash import SIGTERM_AFTER

    built, _, done = kill_setup
    index = tmp_path / "idx"
    shutil.copytree(built, index)
    argv = ["index", "compact", "--index", str(index), "--quiet"]
    child = subprocess.run([sys.executable, "-c", SIGTERM_AFTER, *step, str(index), *argv], capture_output=True,
                           text=True, timeout=600)
    assert child.returncode == 130, (child.returncode, child.stderr[-2000:])
    assert not [p for p in index.iterdir() if integrity.is_scratch(p.name) and p.name != integrity.LOCK]
    if step[1] == "*":
        assert child.stderr.splitlines()[-1] == (f"spanseek index compact: interrupted: stopped by SIGTERM; the compact "
                                                 f"of {index} had been committed and is complete; no rerun is needed")
        assert _files(index) == _files(done["compact"])
        return
    assert child.stderr.splitlines()[-1] == (f"spanseek index compact: interrupted: stopped by SIGTERM; the compact of "
                                             f"{index} changed nothing; the same command runs it again")
    assert _files(index) == _files(built) and verify_index(index, sample=20)["ok"]
    rerun = subprocess.run([sys.executable, "-m", "spanseek.cli", *argv], capture_output=True, text=True, timeout=600)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    assert _files(index) == _files(done["compact"])


@pytest.mark.parametrize("stop", ["SIGTERM", "SIGINT"])
@pytest.mark.parametrize("step", [("spanseek.indexer.lifecycle:write_npy", ".add.tmp"), ("os:replace", "*")],
                         ids=["before the journal", "after the journal"])
def test_a_stopped_delete_says_whether_it_deleted(kill_setup, tmp_path, step, stop):
    """SIGTERM killed `index delete` outright (status -15, nothing said, its staged mask left beside the index until
    the next open), and Ctrl-C ended it without saying whether the documents were deleted. Both now stop it as they
    stop a compact: status 130, nothing staged left behind, and one last line saying the index is unchanged and the
    same command deletes them, or, past the commit point, that the delete is complete."""
    from tests.indexer.test_add_crash import SIGTERM_AFTER

    built = kill_setup[0]
    done = tmp_path / "done"
    shutil.copytree(built, done)
    assert delete_documents(done, ["d1", "d2"])["deleted"] == 2
    index = tmp_path / "idx"
    shutil.copytree(built, index)
    argv = ["index", "delete", "--index", str(index), "--ids", "d1,d2"]
    child = subprocess.run([sys.executable, "-c", SIGTERM_AFTER, *step, str(index), *argv], capture_output=True,
                           text=True, timeout=600, env={**os.environ, "STOP_SIGNAL": stop})
    assert child.returncode == 130, (child.returncode, child.stderr[-2000:])
    assert not [p for p in index.iterdir() if integrity.is_scratch(p.name) and p.name != integrity.LOCK]
    how = "stopped by SIGTERM; " if stop == "SIGTERM" else ""
    if step[1] == "*":
        assert child.stderr.splitlines()[-1] == (f"spanseek index delete: interrupted: {how}the delete from {index} had "
                                                 "been committed and is complete; no rerun is needed")
        assert _files(index) == _files(done)
        return
    assert child.stderr.splitlines()[-1] == (f"spanseek index delete: interrupted: {how}the delete from {index} "
                                             "changed nothing; the same command runs it again")
    assert _files(index) == _files(built) and verify_index(index, sample=20)["ok"]
    rerun = subprocess.run([sys.executable, "-m", "spanseek.cli", *argv], capture_output=True, text=True, timeout=600)
    assert rerun.returncode == 0, rerun.stderr[-2000:]
    assert json.loads(rerun.stdout)["deleted"] == 2 and _files(index) == _files(done)
