"""The lexical part of an index: written by build, kept in step by add, checked by verify, added to an old index."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from spanseek.core import phrase_index
from spanseek.core.lexical import LexicalIndexMissing
from spanseek.core.params import SearchParams
from spanseek.core.phrase_index import PhraseIndex
from spanseek.core.search import Searcher
from spanseek.indexer.add import add_documents
from spanseek.indexer.build import BuildOptions, build_index
from spanseek.indexer.lexical import add_lexical
from spanseek.indexer.verify import verify_index

OPTS = BuildOptions(shard_passages=30, progress=False, precision="fp32", gpu=False)
NEW = {"id": "new", "title": "Quokka Almanac", "paragraphs": ["In 1901 Hugo built the quokka observatory."]}


def _vectors(searcher: Searcher, n: int = 1):
    d = searcher.index.vectors.shape[1]
    rng = np.random.default_rng(0)
    return rng.standard_normal((n, d)).astype(np.float32), rng.standard_normal((n, d)).astype(np.float32)


def _without_lexical(src, dest):
    """A copy of an index as built before the lexical part existed."""
    shutil.copytree(src, dest)
    shutil.rmtree(dest / phrase_index.LEXICAL)
    manifest = json.loads((dest / phrase_index.MANIFEST).read_text())
    for key in ("lexical", "files", phrase_index.CHECKSUM_FIELD):  # fields added since
        del manifest[key]
    (dest / phrase_index.MANIFEST).write_text(json.dumps(manifest))
    return dest


def test_build_records_the_lexical_part(tiny_index):
    m = phrase_index.Manifest.load(tiny_index)
    assert m.lexical["passages"] == m.passages and m.lexical["fields"] == "title + passage"
    assert set(m.lexical["fusion"]["weights"]) == {"phrase", "passage", "doc"}
    assert (tiny_index / phrase_index.LEXICAL).is_dir()


def test_add_then_lexical_search_finds_the_new_text(tmp_path, tiny_corpus, tiny_model_dir):
    out = tmp_path / "idx"
    build_index(tiny_corpus, tiny_model_dir, out, OPTS)
    more = tmp_path / "more.jsonl"
    more.write_text(json.dumps(NEW) + "\n")
    add_documents(out, more, model=tiny_model_dir, opts=OPTS)
    searcher = Searcher(PhraseIndex(out))
    qs, qe = _vectors(searcher)
    for unit in ("passage", "doc"):
        [hits] = searcher.search_vectors(qs, qe, SearchParams(unit=unit, top_k=1, mode="lexical"), None,
                                         ["where is the quokka observatory?"])
        assert hits[0].doc_id == "new" and hits[0].title == "Quokka Almanac"
    assert verify_index(out, sample=20)["ok"]


def test_an_index_without_the_lexical_part_serves_dense_and_says_how_to_add_it(tmp_path, tiny_index, caplog):
    old = _without_lexical(tiny_index, tmp_path / "old")
    searcher = Searcher(PhraseIndex(old))
    assert "spanseek index add-lexical" in caplog.text
    assert searcher.modes == ("dense",) and searcher.default_mode == "dense"
    qs, qe = _vectors(searcher)
    assert searcher.search_vectors(qs, qe, SearchParams(top_k=2), None, ["castle"])[0]  # dense by default
    with pytest.raises(LexicalIndexMissing, match=f"spanseek index add-lexical {old}"):
        searcher.search_vectors(qs, qe, SearchParams(mode="hybrid"), None, ["castle"])
    report = verify_index(old, sample=20)
    assert report["ok"] and "add-lexical" in report["lexical"]
    add_lexical(old)  # nothing is encoded again: the token stores are untouched
    again = Searcher(PhraseIndex(old))
    assert again.modes == ("dense", "lexical", "hybrid")
    assert again.search_vectors(qs, qe, SearchParams(mode="hybrid"), None, ["castle"])[0]
    assert np.array_equal(np.load(old / phrase_index.VECTORS), np.load(tiny_index / phrase_index.VECTORS))


def test_verify_catches_a_stale_lexical_index(tmp_path, tiny_index):
    broken = tmp_path / "stale"
    shutil.copytree(tiny_index, broken)
    passages = phrase_index.read_jsonl(broken / phrase_index.PASSAGES)
    passages[0]["text"] = passages[0]["text"].replace("built", "zeppelin zeppelin zeppelin")  # same count, new words
    (broken / phrase_index.PASSAGES).write_text("".join(json.dumps(p) + "\n" for p in passages))
    report = verify_index(broken, sample=200)  # the changed store fails its checksum first
    assert not report["ok"] and [p.split(": ")[0] for p in report["problems"]] == [str(broken / phrase_index.PASSAGES)]
    manifest = json.loads((broken / phrase_index.MANIFEST).read_text())
    for key in ("files", phrase_index.CHECKSUM_FIELD):  # as an index without checksums: the lexical check is what is left
        del manifest[key]
    (broken / phrase_index.MANIFEST).write_text(json.dumps(manifest))
    report = verify_index(broken, sample=200)
    assert not report["ok"] and any("add-lexical" in p for p in report["problems"])


def test_cli_add_lexical_and_search_modes(tmp_path, tiny_index, tiny_model_dir, capsys):
    from spanseek.cli import main

    old = _without_lexical(tiny_index, tmp_path / "old")
    assert main(["search", "--index", str(old), "--model", str(tiny_model_dir), "--mode", "hybrid", "castle"]) == 2
    assert "spanseek index add-lexical" in capsys.readouterr().err
    assert main(["index", "add-lexical", str(old)]) == 0
    capsys.readouterr()
    assert main(["search", "--index", str(old), "--model", str(tiny_model_dir), "--mode", "lexical",
                 "--unit", "passage", "--top-k", "2", "Alba built"]) == 0
    [line] = capsys.readouterr().out.splitlines()
    hits = json.loads(line)["hits"]
    assert len(hits) == 2 and all(h["lexical"] > 0 for h in hits)


def test_cli_add_lexical_rebuilds_with_the_analyzer_it_names(tmp_path, tiny_index, capsys):
    """``--analyzer`` picks the analyzer (recorded; new indexes' by default); an unknown one is refused by name, the
    index unchanged."""
    from spanseek.cli import main

    index = tmp_path / "idx"
    shutil.copytree(tiny_index, index)
    assert main(["index", "add-lexical", str(index), "--analyzer", "folded2"]) == 0
    assert json.loads(capsys.readouterr().out)["analyzer"] == "folded2" == PhraseIndex(index).lexical.analyzer
    with pytest.raises(SystemExit) as exit_:
        main(["index", "add-lexical", str(index), "--analyzer", "folded9"])
    assert exit_.value.code == 2 and "invalid choice: 'folded9'" in capsys.readouterr().err
    assert PhraseIndex(index).lexical.analyzer == "folded2"
    assert main(["index", "add-lexical", str(index)]) == 0
    assert phrase_index.Manifest.load(index).lexical["analyzer"] == "folded"


def test_cli_build_takes_the_analyzer_it_names_and_refuses_an_unknown_one_listing_the_known(tmp_path, tiny_corpus,
                                                                                              tiny_model_dir, capsys):
    """``index build --analyzer`` builds the lexical part with it (recorded, and the searcher's); an unknown name is
    refused before anything is encoded, naming the known ones."""
    from spanseek.cli import main

    out = tmp_path / "idx"
    common = ["index", "build", "--corpus", str(tiny_corpus), "--model", str(tiny_model_dir), "--precision", "fp32",
              "--no-gpu", "--quiet"]
    with pytest.raises(SystemExit) as exit_:
        main([*common, "--out", str(out), "--analyzer", "folded9"])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and "invalid choice: 'folded9'" in err
    assert "'plain', 'folded', 'folded2', 'folded3'" in err
    assert not out.exists()
    assert main([*common, "--out", str(out), "--analyzer", "folded2"]) == 0
    assert phrase_index.Manifest.load(out).lexical["analyzer"] == "folded2" == PhraseIndex(out).lexical.analyzer
    with pytest.raises(ValueError, match="'folded9' is not a lexical analyzer; known: plain, folded, folded2, folded3"):
        BuildOptions(analyzer="folded9")  # type: ignore[arg-type]  (the library refuses it too)


def test_the_analyzer_option_s_choices_are_the_analyzers():
    import typing

    from spanseek.core.lexical import ANALYZERS, AnalyzerName

    assert typing.get_args(AnalyzerName) == ANALYZERS


WORLD = [  # documents in several scripts and spellings, each with a question's words written another way
    {"id": "zh", "title": "长城", "paragraphs": ["北京的八达岭长城建于明朝弘治十八年，是游客最多的一段。"]},
    {"id": "de", "title": "Adressen", "paragraphs": ["Das Rathaus steht an der Hauptstraße neben dem Brunnen."]},
    {"id": "fr", "title": "Atelier", "paragraphs": ["Le sculpteur Rene\u0301 Ge\u0301rard travaille ici depuis 1987."]},
    {"id": "es", "title": "Equipo", "paragraphs": ["La entrenadora Begoña Núñez dirige el equipo juvenil."]},
    {"id": "shy", "title": "Schifffahrt", "paragraphs": ["Die Donau\u00addampf\u00adschiff\u00adfahrt begann 1829."]},
    {"id": "en", "title": "Harbour", "paragraphs": ["The harbour crane lifts forty tonnes of cargo."]},
]
ASKED = {"八达岭长城": "zh", "长城": "zh", "HAUPTSTRASSE": "de", "René Gérard": "fr", "Begona Nunez": "es",
         "Donaudampfschifffahrt": "shy", "ﬁrst harbour crane": "en"}


def _lexical_first(index_dir, questions):
    searcher = Searcher(PhraseIndex(index_dir))
    qs, qe = _vectors(searcher, len(questions))
    found = searcher.search_vectors(qs, qe, SearchParams(unit="doc", top_k=1, mode="lexical"), None, questions)
    return {q: hits[0].doc_id if hits else None for q, hits in zip(questions, found, strict=True)}


def _as_plain(index_dir):
    """The index's lexical part as an index built before analyzers were recorded has it."""
    from spanseek.indexer.lexical import write_lexical

    write_lexical(index_dir, analyzer="plain")
    meta_path = index_dir / phrase_index.LEXICAL / "spanseek.json"
    meta_path.write_text(json.dumps({k: v for k, v in json.loads(meta_path.read_text()).items() if k != "analyzer"}))
    manifest = json.loads((index_dir / phrase_index.MANIFEST).read_text())
    del manifest["lexical"]["analyzer"]
    for key in ("files", phrase_index.CHECKSUM_FIELD):
        del manifest[key]
    (index_dir / phrase_index.MANIFEST).write_text(json.dumps(manifest))


def test_lexical_search_finds_words_however_they_are_written(tmp_path, tiny_model_dir):
    """Chinese without spaces, ß against SS, composed and decomposed accents, no accents, a ligature and soft
    hyphens: each question finds its document by BM25 alone."""
    corpus = tmp_path / "world.jsonl"
    corpus.write_text("".join(json.dumps(d, ensure_ascii=False) + "\n" for d in WORLD), encoding="utf-8")
    build_index(corpus, tiny_model_dir, tmp_path / "idx", OPTS)
    assert phrase_index.Manifest.load(tmp_path / "idx").lexical["analyzer"] == "folded"
    assert _lexical_first(tmp_path / "idx", list(ASKED)) == ASKED


def test_an_index_keeps_its_analyzer_until_add_lexical_rebuilds_it(tmp_path, tiny_model_dir):
    """An index built with the plain analyzer searches with it (its terms and the question's match as before), keeps
    it through an add, and add-lexical moves it to the current one (folded) or the one it names."""
    corpus = tmp_path / "world.jsonl"
    corpus.write_text("".join(json.dumps(d, ensure_ascii=False) + "\n" for d in WORLD), encoding="utf-8")
    out = tmp_path / "idx"
    build_index(corpus, tiny_model_dir, out, OPTS)
    _as_plain(out)
    assert verify_index(out, sample=5)["lexical"]["analyzer"] == "plain"  # said, though not recorded
    plain = _lexical_first(out, ["Begoña Núñez", "Begona Nunez", "八达岭"])
    assert plain == {"Begoña Núñez": "es", "Begona Nunez": None, "八达岭": None}
    more = tmp_path / "more.jsonl"
    more.write_text(json.dumps(NEW) + "\n")
    add_documents(out, more, model=tiny_model_dir, opts=OPTS)
    assert PhraseIndex(out).lexical.analyzer == "plain" and _lexical_first(out, ["Begona Nunez"]) == {"Begona Nunez": None}
    assert _lexical_first(out, ["quokka observatory"]) == {"quokka observatory": "new"}
    add_lexical(out, analyzer="folded2")
    assert PhraseIndex(out).lexical.analyzer == "folded2" == verify_index(out, sample=20)["lexical"]["analyzer"]
    assert _lexical_first(out, ["Begona Nunez", "八达岭"]) == {"Begona Nunez": "es", "八达岭": "zh"}
    add_lexical(out)
    assert PhraseIndex(out).lexical.analyzer == "folded"
    assert _lexical_first(out, ["Begona Nunez", "八达岭"]) == {"Begona Nunez": "es", "八达岭": "zh"}
    assert verify_index(out, sample=20)["ok"]


BUILD = """
import sys
from spanseek.indexer.build import BuildOptions, build_index
build_index(sys.argv[1], sys.argv[2], sys.argv[3], BuildOptions(shard_passages=7, progress=False, precision="fp32"))
"""
TIMINGS = ("seconds", "time", "created", "tokens_per_second", "throughput")


def _without_timings(value):
    """A manifest's JSON without its timings and timestamps (what two builds of one corpus may differ in), nor its
    own checksum (over them)."""
    if isinstance(value, dict):
        return {k: _without_timings(v) for k, v in value.items()
                if k != phrase_index.CHECKSUM_FIELD and not any(t in k for t in TIMINGS)}
    if isinstance(value, list):
        return [_without_timings(v) for v in value]
    return value


def test_two_builds_of_one_corpus_write_the_same_files(tmp_path, tiny_corpus, tiny_model_dir):
    """The index files do not depend on PYTHONHASHSEED (bm25s numbers its vocabulary in a set's order)."""
    import os
    import subprocess
    import sys

    outs, builds = [tmp_path / "idx1", tmp_path / "idx2"], []
    for seed, out in zip(("1", "2"), outs, strict=True):  # side by side: each is mostly the start-up of a process
        env = {**os.environ, "PYTHONHASHSEED": seed, "HF_HUB_OFFLINE": "1"}
        builds.append(subprocess.Popen([sys.executable, "-c", BUILD, str(tiny_corpus), str(tiny_model_dir), str(out)],
                                       env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE))
    for build in builds:
        _, err = build.communicate(timeout=600)
        assert build.returncode == 0, err.decode()[-3000:]
    files = sorted(p.relative_to(outs[0]) for p in outs[0].rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(outs[1]) for p in outs[1].rglob("*") if p.is_file())
    assert any(f.parts[0] == phrase_index.LEXICAL for f in files)
    for name in files:
        a, b = (out / name for out in outs)
        if str(name) == phrase_index.MANIFEST:
            assert _without_timings(json.loads(a.read_text())) == _without_timings(json.loads(b.read_text()))
        else:
            assert a.read_bytes() == b.read_bytes(), name


def test_add_lexical_killed_before_its_manifest_is_completed_by_the_rerun(tmp_path, tiny_index):
    """Killed between renaming its new lexical part into place and writing the manifest, add-lexical left files the
    manifest does not record; the rerun refused them as a damaged index ("rebuild or restore the index") instead of
    completing the change. A damaged file outside that part is still refused."""
    import shutil

    from spanseek.core.phrase_index import IndexFormatError, check_index
    from spanseek.indexer.lexical import write_lexical

    index = tmp_path / "index"
    shutil.copytree(tiny_index, index)
    write_lexical(index, analyzer="plain")  # the killed run: its part in place, the manifest not yet written
    with pytest.raises(IndexFormatError, match="lexical"):
        check_index(index)
    add_lexical(index)
    assert check_index(index).lexical["analyzer"] == "folded" and PhraseIndex(index).lexical.analyzer == "folded"
    with open(index / "passages.jsonl", "a", encoding="utf-8") as f:  # a file add-lexical does not write
        f.write("\n")
    with pytest.raises(IndexFormatError, match=r"damaged index: .*passages\.jsonl"):
        add_lexical(index)
