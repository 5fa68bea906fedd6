"""The field index (``doc_fields.npz``) through build, add, upsert, delete and compact, and in older indexes.

Oracle: after each change, the documents a filter selects in the reopened index (the field index with the deletion
mask) are those a scan of the live documents' metadata passes (``SearchFilter.matches``); the file is recorded in
the manifest; an index without it (built before it) filters the same from a field index built in memory, and gains
the file with its next add.

    .venv/bin/python -m pytest -q tests/indexer/test_field_index_lifecycle.py
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from spanseek.core import phrase_index
from spanseek.core.filters import FilterError, SearchFilter
from spanseek.core.phrase_index import PhraseIndex
from spanseek.core.selection import allowed_documents
from spanseek.indexer.add import add_documents, upsert_documents
from spanseek.indexer.build import BuildOptions, build_index
from spanseek.indexer.lifecycle import compact_index, delete_documents
from tests.conftest import make_corpus

FILTERS = [
    {"must": [{"key": "year", "range": {"gte": 2001}}]},
    {"must": [{"key": "date", "range": {"lt": "2020-03-01"}}], "must_not": [{"key": "tags", "match": "b"}]},
    {"should": [{"key": "lang", "match": "fr"}, {"key": "tags", "any": ["c"]}]},
    {"doc_ids": ["d1", "d4", "n0", "n1"]},
    {"title_prefix": "Title 1"},
]


def _opts() -> BuildOptions:
    return BuildOptions(factory="Flat", shard_passages=30, progress=False, precision="fp32", gpu=False)


def _docs(prefix: str, n: int, seed: int) -> list[dict]:
    docs = make_corpus(seed=seed, n_docs=n, n_paras=2)
    for i, d in enumerate(docs):
        d["id"] = f"{prefix}{i}"
        d["meta"] = {"lang": "en" if (i + seed) % 2 else "fr", "year": 1999 + (i + seed) % 4,
                     "date": f"2020-0{1 + (i + seed) % 4}-15", "tags": ["a", "b", "c"][: 1 + (i + seed) % 3]}
    return docs


def _write(path, docs):
    path.write_text("".join(json.dumps(d) + "\n" for d in docs))
    return path


def _check(index_dir) -> PhraseIndex:
    """Every filter selects, in the reopened index, what a scan of its live documents passes."""
    index = PhraseIndex(index_dir)
    dead = set(index.deleted_docs.tolist())
    for obj in FILTERS:
        flt = SearchFilter.from_json(obj)
        want = [i not in dead and flt.matches(d["id"], d["title"], d.get("meta", {})) for i, d in enumerate(index.docs)]
        got = allowed_documents(index, flt)
        assert got is not None and got.tolist() == want, obj
    return index


def test_the_field_index_follows_every_change(tmp_path, tiny_model_dir):
    idx = tmp_path / "idx"
    build_index(_write(tmp_path / "c.jsonl", _docs("d", 6, 0)), tiny_model_dir, idx, _opts())
    assert phrase_index.FIELDS in phrase_index.Manifest.load(idx).files  # type: ignore[operator]
    _check(idx)
    add_documents(idx, _write(tmp_path / "more.jsonl", _docs("n", 2, 1)), tiny_model_dir, _opts())
    assert len(_check(idx).fields.ids) == 8
    changed = _docs("d", 2, 5)  # d0 and d1 with other metadata
    upsert_documents(idx, _write(tmp_path / "up.jsonl", changed), tiny_model_dir, _opts())
    index = _check(idx)
    live = np.flatnonzero(allowed_documents(index, SearchFilter.from_json({"doc_ids": ["d1"]})))
    assert [index.docs[i].get("meta") for i in live] == [changed[1]["meta"]]  # the new version, not the old
    delete_documents(idx, ["d4", "n0"])
    _check(idx)
    compact_index(idx, _opts())
    index = _check(idx)
    assert len(index.fields.ids) == len(index.docs) == 8 - 2 and not len(index.deleted_docs)
    with pytest.raises(FilterError, match="'colour': no document has it"):
        index.fields.check(SearchFilter.from_json({"meta": {"colour": "red"}}))


def test_an_index_built_before_the_field_index_filters_and_gains_it_on_add(tmp_path, tiny_model_dir):
    idx = tmp_path / "old"
    build_index(_write(tmp_path / "c.jsonl", _docs("d", 5, 2)), tiny_model_dir, idx, _opts())
    (idx / phrase_index.FIELDS).unlink()  # as an older spanseek wrote it: no file, none recorded
    old = phrase_index.Manifest.load(idx)
    phrase_index.Manifest.create(idx, old.to_dict()).write(idx)
    assert phrase_index.FIELDS not in phrase_index.Manifest.load(idx).files  # type: ignore[operator]
    index = _check(idx)
    assert index._fields is not None  # built in memory at the first filter
    add_documents(idx, _write(tmp_path / "more.jsonl", _docs("n", 2, 3)), tiny_model_dir, _opts())
    assert (idx / phrase_index.FIELDS).is_file() and phrase_index.FIELDS in phrase_index.Manifest.load(idx).files  # type: ignore[operator]
    _check(idx)


def test_a_field_index_of_other_documents_is_refused_naming_the_file(tmp_path, tiny_model_dir):
    idx = tmp_path / "idx"
    build_index(_write(tmp_path / "c.jsonl", _docs("d", 4, 0)), tiny_model_dir, idx, _opts())
    from spanseek.core.fieldindex import FieldIndex

    FieldIndex.build(_docs("d", 3, 0)).save(idx / phrase_index.FIELDS)
    phrase_index.Manifest.create(idx, phrase_index.Manifest.load(idx).to_dict()).write(idx)  # recorded, but for 3 documents
    with pytest.raises(phrase_index.IndexFormatError, match="doc_fields.npz.*3 documents, the document store has 4"):
        PhraseIndex(idx)


@pytest.mark.parametrize(("flt", "message"), [
    ('{"must": [{"key": "lang", "match": "en"}]}', "error: filter.must[0]: filter field 'lang': no document has it"),
    ('{"must": [{"key": "date", "range": {"lt": "soon"}}]}', "--filter: filter.must[0]: range on 'date': lt 'soon' is not an ISO"),
    ('{"must": [{"key": "x"}]}', "--filter: filter.must[0]: a field condition has key and exactly one of"),
    ("{must: 1}", "--filter: invalid JSON (Expecting property name enclosed in double quotes at line 1, column 2)"),
    ('{"must": [{"key": "n", "match": 1' + "0" * 5000 + "}]}", "--filter: invalid JSON (an integer of more than"),
    ("[" * 100_000 + "]" * 100_000, "--filter: JSON nested too deeply"),
])
def test_cli_filter_errors_are_one_line_naming_the_field(tiny_index, tiny_model_dir, capsys, flt, message):
    from spanseek.cli import main

    assert main(["search", "--index", str(tiny_index), "--model", str(tiny_model_dir), "--device", "cpu",
                 "--filter", flt, "a question"]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_a_where_number_too_long_to_read_is_one_line_naming_the_flag(tiny_index, tiny_model_dir, capsys):
    from spanseek.cli import main

    assert main(["search", "--index", str(tiny_index), "--model", str(tiny_model_dir), "--device", "cpu",
                 "--where", "n=1" + "0" * 5000, "a question"]) == 2
    err = capsys.readouterr().err
    assert "--where n: a number of more than" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize(("value", "meant"), [("NaN", "NaN"), ("Infinity", "Infinity"), ("-Infinity", "-Infinity"),
                                              ("2001", 2001), ("1.5", 1.5), ("true", True), ('"2001"', "2001")])
def test_where_reads_json_numbers_and_constants_and_else_text(value, meant):
    """--where KEY=VALUE takes a JSON number, true, false or null, else the text: NaN and Infinity, which JSON has
    not, were read as Python's float nan and inf, and refused as numbers that are not finite."""
    from spanseek.cli import build_parser
    from spanseek.indexer.cli import _filter

    args = build_parser().parse_args(["search", "--index", "idx", "--where", f"v={value}", "a question"])
    assert _filter(args).meta == (("v", meant),)


def test_cli_filter_combines_with_the_older_flags(tiny_index, tiny_model_dir, tmp_path, capsys):
    from spanseek.cli import main

    (tmp_path / "f.json").write_text('{"should": [{"doc_ids": ["d1", "d2"]}, {"title_prefix": "Title 4"}]}')
    assert main(["search", "--index", str(tiny_index), "--model", str(tiny_model_dir), "--device", "cpu", "--unit",
                 "doc", "--top-k", "10", "--filter", f"@{tmp_path / 'f.json'}", "--doc-ids", "d2,d4,d5",
                 "a question"]) == 0
    hits = json.loads(capsys.readouterr().out)["hits"]
    assert sorted(h["doc_id"] for h in hits) == ["d2", "d4"]


def test_writing_the_field_index_holds_the_passages_metadata_not_their_text(tmp_path):
    """``write_fields`` (build, add, upsert, compact) reads the passage store one line at a time and keeps each
    passage's metadata only: its peak memory is a small part of the passages' text, and the file it writes selects
    what a field index built over the whole records selects."""
    import tracemalloc

    from spanseek.core.fieldindex import FieldIndex
    from spanseek.indexer.build import write_fields

    docs = [phrase_index.doc_record(f"d{d}", f"T{d}", {"lang": "en" if d % 2 else "fr"}) for d in range(40)]
    passages = [phrase_index.passage_record(p // 50, p % 50, f"{p} " + "word " * 1000, {"page": p % 7} if p % 3 else None)
                for p in range(2000)]  # 10 MB of text
    for name, records in (("docs.jsonl", docs), ("passages.jsonl", passages)):
        (tmp_path / name).write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    tracemalloc.start()
    try:
        write_fields(tmp_path / "docs.jsonl", tmp_path / "passages.jsonl", tmp_path / "doc_fields.npz")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    text = sum(len(p["text"]) for p in passages)
    assert peak < text / 4, (peak, text)
    written = FieldIndex.load(tmp_path / "doc_fields.npz", docs, passages)
    passage_doc = np.asarray([p["doc"] for p in passages], dtype=np.int64)
    for obj in ({"must": [{"passage": {"key": "page", "range": {"gte": 2, "lte": 4}}}], "meta": {"lang": "en"}},
                {"must_not": [{"passage": {"key": "page", "match": 0}}]}):
        flt = SearchFilter.from_json(obj)
        assert np.array_equal(written.passage_mask(flt, passage_doc),
                              FieldIndex.build(docs, passages).passage_mask(flt, passage_doc))


def _meta(rng: np.random.Generator, n_keys: int) -> dict | None:
    """Metadata of every kind a field holds, values often repeated (equal values across the append's two sides)."""
    values = [1, 1.0, 2.5, -0.0, 0, 7, "a", "b", "2020-01-15", "2021-06-01T10:00:00Z", True, False, None,
              ["a", 3, "2020-01-15"], {"nested": 1}, float("nan"), "z", "é"]
    if rng.random() < 0.2:
        return None
    keys = [f"k{int(k)}" for k in rng.integers(0, n_keys, size=rng.integers(1, 4))]
    return {k: values[int(rng.integers(len(values)))] for k in keys}


@pytest.mark.parametrize("seed", range(6))
def test_appending_to_the_field_index_writes_the_file_a_whole_rewrite_writes(tmp_path, seed):
    """Oracle: the field index of some documents and passages with more appended (``FieldIndex.appended``, what
    `index add` and `upsert` write without reading the passage store) is the file, byte for byte, that one built over
    all the records writes; fields, kinds and values first met on either side, titles equal across both."""
    from spanseek.core.fieldindex import FieldIndex

    rng = np.random.default_rng(seed)
    n_docs, n_before = int(rng.integers(2, 30)), None
    docs = [phrase_index.doc_record(f"d{d}", f"T{int(rng.integers(5))}", _meta(rng, 4)) for d in range(n_docs)]
    passages = [phrase_index.passage_record(d, p, "text", _meta(rng, 5))
                for d in range(n_docs) for p in range(int(rng.integers(0, 4)))]
    n_before = int(rng.integers(1, n_docs))
    p_before = sum(1 for p in passages if p["doc"] < n_before)
    whole, before, appended = tmp_path / "whole.npz", tmp_path / "before.npz", tmp_path / "appended.npz"
    FieldIndex.build(docs, passages).save(whole)
    FieldIndex.build(docs[:n_before], passages[:p_before]).save(before)
    FieldIndex.load(before, docs[:n_before], None).appended(docs[n_before:], iter(passages[p_before:])).save(appended)
    assert appended.read_bytes() == whole.read_bytes()


def test_index_add_appends_to_the_field_index_without_reading_the_passage_store(tmp_path, tiny_model_dir, monkeypatch):
    """`index add` parsed the whole passage store to write doc_fields.npz again (0.97 s a 300k passages); it now
    appends the new passages' fields, and writes the file a whole rewrite of the new stores writes."""
    from spanseek.indexer import add
    from spanseek.indexer.build import write_fields

    idx = tmp_path / "idx"
    build_index(_write(tmp_path / "c.jsonl", _docs("d", 4, 0)), tiny_model_dir, idx, _opts())
    whole = []  # the field index written from the whole stores
    monkeypatch.setattr(add, "write_fields", lambda *a: whole.append(a) or write_fields(*a))
    add_documents(idx, _write(tmp_path / "more.jsonl", _docs("n", 2, 1)), tiny_model_dir, _opts())
    assert not whole
    write_fields(idx / phrase_index.DOCS, idx / phrase_index.PASSAGES, tmp_path / "whole.npz")
    assert (idx / phrase_index.FIELDS).read_bytes() == (tmp_path / "whole.npz").read_bytes()
    _check(idx)
