"""Corpus and SQuAD IO (core.io): from-squad round trip, errors naming file and line, skipped-and-counted empties.

    .venv/bin/python -m pytest -q tests/core/test_io.py
"""

from __future__ import annotations

import errno
import gzip
import json
import os
import sys
import tempfile

import pytest

from spanseek.core.holdout import split_articles
from spanseek.core.io import (
    CorpusError,
    Document,
    ReadStats,
    atomic_path,
    check_writable,
    from_squad,
    load_squad,
    read_corpus,
    squad_questions,
    write_corpus,
)


def _write_lines(path, lines):
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


@pytest.mark.parametrize("suffix", [".jsonl", ".jsonl.gz"])
def test_from_squad_round_trip(tmp_path, tiny_squad, suffix):
    out = tmp_path / f"corpus{suffix}"
    data = load_squad(tiny_squad)
    assert from_squad(tiny_squad, out) == len(data)
    stats = ReadStats()
    docs = list(read_corpus(out, stats))
    assert [d.title for d in docs] == [a["title"] for a in data]
    assert [list(d.paragraphs) for d in docs] == [[p["context"] for p in a["paragraphs"]] for a in data]
    assert len({d.id for d in docs}) == len(docs)
    assert (stats.documents, stats.paragraphs, stats.empty_documents, stats.empty_paragraphs) == (
        len(data), sum(len(a["paragraphs"]) for a in data), 0, 0)


def test_from_squad_refuses_to_write_over_the_file_it_reads(tmp_path, tiny_squad):
    squad = tmp_path / "squad.json.gz"
    squad.write_bytes(tiny_squad.read_bytes())
    with pytest.raises(CorpusError, match="is the SQuAD file to read"):
        from_squad(squad, tmp_path / "." / "squad.json.gz")
    assert squad.read_bytes() == tiny_squad.read_bytes()


def test_from_squad_skips_and_counts_empty_paragraphs_and_articles(tmp_path):
    squad = {"data": [
        {"title": "Ünïcode — “quotes”", "paragraphs": [{"context": "First para."}, {"context": "  "}, {"context": "Last."}]},
        {"title": "Empty", "paragraphs": [{"context": ""}]},
        {"title": "None", "paragraphs": []},
    ]}
    src = tmp_path / "s.json"
    src.write_text(json.dumps(squad))
    out = tmp_path / "c.jsonl"
    from_squad(src, out)
    stats = ReadStats()
    docs = list(read_corpus(out, stats))
    assert docs == [Document(id="0", title="Ünïcode — “quotes”", paragraphs=("First para.", "Last."))]
    assert (stats.documents, stats.paragraphs, stats.empty_documents, stats.empty_paragraphs) == (1, 2, 2, 2)


def test_write_corpus_round_trip(tmp_path):
    docs = [Document("a", "Title A", ("p1", "p2 with \"quotes\"\nand a newline")), Document("b", "", ("x",))]
    path = tmp_path / "c.jsonl.gz"
    assert write_corpus(path, docs) == 2
    with gzip.open(path, "rt") as f:  # really gzipped
        assert len(f.read().splitlines()) == 2
    assert list(read_corpus(path)) == docs


def test_invalid_json_names_file_and_line(tmp_path):
    path = _write_lines(tmp_path / "bad.jsonl", [
        json.dumps({"id": "1", "title": "t", "paragraphs": ["ok"]}),
        "",  # blank lines are ignored but still counted as lines
        '{"id": "2", "title": "t", "paragraphs": ["unterminated]',
    ])
    docs = read_corpus(path)
    assert next(docs).id == "1"
    with pytest.raises(CorpusError, match=rf"{path}:3: invalid JSON"):
        next(docs)


@pytest.mark.parametrize(
    ("line", "what"),
    [
        ('["a", "list"]', "expected a JSON object"),
        ('{"id": "x", "title": "t"}', "'paragraphs' must be a list of strings"),
        ('{"id": "x", "title": "t", "paragraphs": "one string"}', "'paragraphs' must be a list of strings"),
        ('{"id": "x", "title": "t", "paragraphs": ["ok", 3]}', "'paragraphs' must be a list of strings"),
        ('{"id": ["x"], "title": "t", "paragraphs": ["ok"]}', "'id' must be a string"),
        ('{"id": "x", "title": 7, "paragraphs": ["ok"]}', "'title' must be a string, got a number"),
    ],
)
def test_wrong_shape_names_file_and_line(tmp_path, line, what):
    path = _write_lines(tmp_path / "shape.jsonl", [json.dumps({"id": "1", "title": "t", "paragraphs": ["ok"]}), line])
    with pytest.raises(CorpusError, match=rf"{path}:2: .*{what}"):
        list(read_corpus(path))


@pytest.mark.parametrize(("value", "got"), [("true", "true or false"), ("false", "true or false"),
                                            ("1.5", "a number"), ("null", "null"), ('{"a": 1}', "an object")])
def test_an_id_that_is_not_a_string_or_a_whole_number_names_the_file_and_line(tmp_path, value, got):
    """``"id": true`` was stored as the string "True" (bool is an int to isinstance). Ids are strings, as the HTTP
    schema takes them; a whole number is read as its JSON text, so 7 is the document "7" of PUT /documents."""
    path = _write_lines(tmp_path / "ids.jsonl", [json.dumps({"id": 7, "title": "t", "paragraphs": ["ok"]}),
                                                 '{"id": ' + value + ', "title": "t", "paragraphs": ["ok"]}'])
    with pytest.raises(CorpusError) as e:
        list(read_corpus(path))
    assert str(e.value) == f"{path}:2: 'id' must be a string (a whole number is read as its digits), got {got}"
    assert [d.id for d in read_corpus(_write_lines(tmp_path / "ok.jsonl", [
        json.dumps({"id": 7, "paragraphs": ["a"]}), json.dumps({"id": -12, "paragraphs": ["b"]}),
        json.dumps({"paragraphs": ["c"]})]))] == ["7", "-12", "3"]


def test_empty_documents_and_paragraphs_are_skipped_and_counted(tmp_path):
    path = _write_lines(tmp_path / "c.jsonl", [
        json.dumps({"id": "1", "title": "A", "paragraphs": ["one", "", "two", " \n\t"]}),
        json.dumps({"id": "2", "title": "B", "paragraphs": []}),
        json.dumps({"id": "3", "title": "C", "paragraphs": ["   "]}),
        json.dumps({"title": "D", "paragraphs": ["three"]}),  # no id: the line number
    ])
    stats = ReadStats()
    docs = list(read_corpus(path, stats))
    assert [(d.id, d.title, d.paragraphs) for d in docs] == [("1", "A", ("one", "two")), ("4", "D", ("three",))]
    assert (stats.documents, stats.paragraphs, stats.empty_documents, stats.empty_paragraphs) == (2, 3, 2, 3)


def test_load_squad_errors(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(CorpusError, match=rf"{bad}: invalid JSON"):
        load_squad(bad)
    bad.write_text(json.dumps({"version": "1"}))
    with pytest.raises(CorpusError, match="not SQuAD format"):
        load_squad(bad)
    bad.write_text(json.dumps({"data": [{"title": "x"}]}))
    with pytest.raises(CorpusError, match=rf'{bad}: data\[0\]: "paragraphs" must be a list \(missing\)'):
        load_squad(bad)
    bad.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(CorpusError, match=rf"{bad}: JSON nested too deeply to read"):
        load_squad(bad)


def test_squad_questions_positions_and_answers(tiny_squad):
    data = load_squad(tiny_squad)
    qs = squad_questions(data)
    assert len(qs) == sum(len(p["qas"]) for a in data for p in a["paragraphs"])
    for q in qs:
        assert q.context == data[q.doc_index]["paragraphs"][q.para_index]["context"]
        assert q.title == data[q.doc_index]["title"]
        a, s = q.answers[0], q.answer_starts[0]
        assert q.context[s : s + len(a)] == a


def test_split_articles_is_a_fixed_partition():
    data = [{"title": str(i), "paragraphs": []} for i in range(45)]
    train, held = split_articles(data, every=20, offset=7)
    assert [a["title"] for a in held] == ["7", "27"]
    assert len(train) + len(held) == 45 and not {a["title"] for a in train} & {a["title"] for a in held}


def test_atomic_path_leaves_nothing_on_failure(tmp_path):
    target = tmp_path / "out.txt"
    target.write_text("old")
    with pytest.raises(RuntimeError), atomic_path(target) as tmp:
        tmp.write_text("half-written")
        raise RuntimeError("crash")
    assert target.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.txt"]
    with atomic_path(target) as tmp:
        tmp.write_text("new")
    assert target.read_text() == "new" and sorted(p.name for p in tmp_path.iterdir()) == ["out.txt"]


def test_an_output_that_cannot_be_written_is_named_not_its_temporary(tmp_path, monkeypatch):
    """A path under a file, or a folder that refuses the temporary (read-only), was reported as ``tmp_path/file:
    File exists`` or ``tmp_path/.out.txt.x1y2.tmp: Permission denied``: the error names the path given, and why."""
    (tmp_path / "file").write_text("")
    for target in (tmp_path / "file" / "out.txt", tmp_path / "file" / "sub" / "out.txt"):
        for call in (lambda t=target: atomic_path(t).__enter__(), lambda t=target: check_writable(t)):
            with pytest.raises(NotADirectoryError) as e:
                call()
            assert str(e.value) == f"[Errno {errno.ENOTDIR}] cannot be written: {tmp_path / 'file'} is a file, not a " \
                                   f"folder: '{target}'"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]

    def refused(*args, **kwargs):  # a read-only folder (root writes in one, so the refusal is simulated)
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(tmp_path / ".out.txt.x1y2.tmp"))

    monkeypatch.setattr(tempfile, "mkstemp", refused)
    for call in (lambda: atomic_path(tmp_path / "out.txt").__enter__(), lambda: check_writable(tmp_path / "out.txt")):
        with pytest.raises(PermissionError) as e:
            call()
        assert (e.value.filename, e.value.strerror) == (str(tmp_path / "out.txt"), "cannot be written: Permission denied")


def test_atomic_path_names_the_path_when_its_temporary_cannot_be_opened(tmp_path):
    """An error naming the temporary, met in the block (opening it), names the path given; any other passes as it is."""
    target = tmp_path / "out.txt"
    with pytest.raises(PermissionError) as e, atomic_path(target) as tmp:
        raise PermissionError(errno.EACCES, "Permission denied", str(tmp))
    assert (e.value.filename, e.value.strerror) == (str(target), "cannot be written: Permission denied")
    other = PermissionError(errno.EACCES, "Permission denied", str(tmp_path / "input"))
    with pytest.raises(PermissionError) as e, atomic_path(target):
        raise other
    assert e.value is other and sorted(p.name for p in tmp_path.iterdir()) == []


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() == 0, reason="root writes in a read-only folder")
def test_a_read_only_folder_is_named(tmp_path):
    folder = tmp_path / "ro"
    folder.mkdir(mode=0o555)
    with pytest.raises(PermissionError) as e, atomic_path(folder / "out.txt") as tmp:
        tmp.write_text("x")
    assert e.value.filename == str(folder / "out.txt")


def test_bytes_that_are_not_utf8_name_the_file_and_line(tmp_path):
    path = tmp_path / "latin1.jsonl"
    good = json.dumps({"id": "1", "title": "A", "paragraphs": ["ok"]}).encode()
    path.write_bytes(good + b"\n" + good + b"\n" + '{"id": "3", "title": "Caf\u00e9", "paragraphs": ["x"]}'.encode("latin-1") + b"\n")
    with pytest.raises(CorpusError, match=rf"{path}:3: not UTF-8 \(byte 25 of the line, 0xe9\)"):
        list(read_corpus(path))


@pytest.mark.parametrize("suffix", [".jsonl", ".jsonl.gz"])
def test_a_utf8_bom_is_allowed(tmp_path, suffix):
    path = tmp_path / f"bom{suffix}"
    text = "\ufeff" + json.dumps({"id": "1", "title": "Café", "paragraphs": ["ok"]}) + "\n"
    if suffix == ".jsonl.gz":
        with gzip.open(path, "wt", encoding="utf-8") as f:
            f.write(text)
    else:
        path.write_text(text, encoding="utf-8")
    assert list(read_corpus(path)) == [Document("1", "Café", ("ok",))]


@pytest.mark.parametrize("number", ["NaN", "Infinity", "-Infinity", "1e999"])
def test_numbers_that_are_not_finite_name_the_file_and_line(tmp_path, number):
    path = _write_lines(tmp_path / "nan.jsonl", [
        json.dumps({"id": "1", "title": "A", "paragraphs": ["ok"], "meta": {"v": 1.5}}),
        '{"id": "2", "title": "B", "paragraphs": ["ok"], "meta": {"v": [' + number + "]}}",
    ])
    with pytest.raises(CorpusError, match=rf"{path}:2: invalid JSON \({number} is not a finite number\)"):
        list(read_corpus(path))


BIG = "1" + "0" * 400  # an integer JSON holds and Python reads, but no float does (float() overflows)


@pytest.mark.parametrize(("field", "value", "name", "place"), [
    ("meta", '{"n": ' + BIG + "}", "'meta'", '["n"]'),
    ("meta", '{"tags": ["a", {"rank": -' + BIG + "}]}", "'meta'", '["tags"][1]["rank"]'),
    ("passage_meta", '[null, {"page": ' + BIG + "}]", "'passage_meta' 1", '["page"]'),
])
def test_a_metadata_integer_beyond_a_float_names_the_file_line_document_and_key(tmp_path, field, value, name, place):
    """Such an integer made ``index build`` fail with a bare OverflowError in the field index, after the whole
    corpus was encoded; filters compare numbers as floats, so the corpus reader refuses it at its line."""
    path = _write_lines(tmp_path / "big.jsonl", [
        json.dumps({"id": "a", "title": "A", "paragraphs": ["ok"], "meta": {"n": 10**308, "m": -(10**300)}}),
        '{"id": "b", "title": "B", "paragraphs": ["ok", "also"], "' + field + '": ' + value + "}",
    ])
    with pytest.raises(CorpusError) as e:
        list(read_corpus(path))
    assert str(e.value) == (f"{path}:2: document 'b': its {name} holds a number that is not finite as a float (an "
                            f"integer of about 401 digits, at {place}); filters compare metadata numbers as floats, "
                            "so each must be finite and within about ±1.8e308")
    assert next(read_corpus(path)).meta == {"n": 10**308, "m": -(10**300)}  # within a float's range: kept exactly


def test_an_index_build_refuses_a_metadata_integer_beyond_a_float_before_encoding(tmp_path, tiny_model_dir, capsys,
                                                                                   monkeypatch):
    from spanseek.cli import main
    from spanseek.indexer import shards

    def encode_shard(*args, **kwargs):
        raise AssertionError("a shard was encoded before the corpus was refused")

    monkeypatch.setattr(shards, "encode_shard", encode_shard)
    corpus = _write_lines(tmp_path / "c.jsonl", [json.dumps({"id": "a", "title": "A", "paragraphs": ["one two"]}),
                                                 '{"id": "b", "paragraphs": ["three"], "meta": {"n": ' + BIG + "}}"])
    out = tmp_path / "index"
    assert main(["index", "build", "--corpus", str(corpus), "--model", str(tiny_model_dir), "--out", str(out),
                 "--quiet", "--device", "cpu"]) == 2
    err = capsys.readouterr().err
    assert f"{corpus}:2: document 'b': its 'meta' holds a number that is not finite as a float" in err, err
    assert "Traceback" not in err and not (out / "manifest.json").exists()


@pytest.mark.parametrize("where", ["id", "meta", "paragraph"])
def test_an_integer_too_long_to_read_names_the_file_and_line(tmp_path, where):
    """Python reads at most 4,300 digits of an integer: a longer one was a bare ValueError naming no file."""
    huge = "9" * (sys.get_int_max_str_digits() + 1)
    line = {"id": '{"id": ' + huge + ', "paragraphs": ["ok"]}',
            "meta": '{"id": "b", "paragraphs": ["ok"], "meta": {"n": [1, ' + huge + "]}}",
            "paragraph": '{"id": "b", "paragraphs": ["ok", ' + huge + "]}"}[where]
    path = _write_lines(tmp_path / "huge.jsonl", [json.dumps({"id": "a", "paragraphs": ["ok"]}), line])
    with pytest.raises(CorpusError) as e:
        list(read_corpus(path))
    assert str(e.value) == (f"{path}:2: invalid JSON (an integer of more than {sys.get_int_max_str_digits()} digits, "
                            "too long to read as a number; write it as a string)")


def test_an_older_log_s_integer_beyond_a_float_is_read_as_null():
    from spanseek.core.io import document_from_json, without_nonfinite

    old = {"id": "x", "paragraphs": ["a"], "meta": {"n": int(BIG), "k": [True, 3, -int(BIG)], "ok": 10**308}}
    with pytest.raises(CorpusError, match=r"document 0: document 'x': its 'meta' holds a number that is not finite"):
        document_from_json(old, "document 0")
    doc = document_from_json(without_nonfinite(old), "wal")
    assert doc is not None and doc.meta == {"n": None, "k": [True, 3, None], "ok": 10**308}


@pytest.mark.parametrize("meta", ['{"k": "\\ud800"}', '{"\\udfff": 1}', '{"k": ["ok", {"j": "\\udc00x"}]}'])
def test_a_lone_surrogate_in_metadata_names_the_file_line_and_document(tmp_path, meta):
    """Escaped in a line (JSON lets "\\ud800" stand alone), it made indexing fail with a bare codec error."""
    path = _write_lines(tmp_path / "s.jsonl", [json.dumps({"id": "1", "paragraphs": ["ok"]}),
                                               '{"id": "d2", "paragraphs": ["ok"], "meta": ' + meta + "}"])
    with pytest.raises(CorpusError, match=rf"{path}:2: document 'd2': its 'meta' holds an unpaired surrogate"):
        list(read_corpus(path))


def test_documents_sent_as_values_refuse_what_a_corpus_line_cannot_hold():
    """A document that comes as parsed JSON (a write to the service) is held to what the corpus reader reads back,
    so that a merge of the live documents cannot fail on it: numbers that are not finite, lone surrogates in
    passage metadata and blank ids are refused, naming the field; the log of an older version is read with its
    NaN made null."""
    from spanseek.core.io import document_from_json, without_nonfinite

    ok = {"id": "x", "paragraphs": ["a", "b"]}
    for bad, message in [
        ({**ok, "meta": {"s": float("nan")}}, "document 0: document 'x': its 'meta' holds a number that is not finite"),
        ({**ok, "meta": {"s": [1, {"t": float("-inf")}]}}, "its 'meta' holds a number that is not finite"),
        ({**ok, "passage_meta": [None, {"p": float("inf")}]}, "its 'passage_meta' 1 holds a number that is not"),
        ({**ok, "passage_meta": [{"p": "\udfff"}, None]}, "its 'passage_meta' 0 holds an unpaired surrogate"),
        ({**ok, "id": " \t"}, "document 0: 'id' is blank"),
    ]:
        with pytest.raises(CorpusError, match=message):
            document_from_json(bad, "document 0")
    old = {**ok, "meta": {"s": float("nan"), "n": [1.5, float("inf")], "k": "v"}}
    doc = document_from_json(without_nonfinite(old), "wal")
    assert doc is not None and doc.meta == {"s": None, "n": [1.5, None], "k": "v"}


def test_meta_nested_too_deeply_names_the_file_and_line(tmp_path):
    deep = '{"id": "2", "title": "B", "paragraphs": ["ok"], "meta": {"v": ' + "[" * 100_000 + "]" * 100_000 + "}}"
    path = _write_lines(tmp_path / "deep.jsonl", [json.dumps({"id": "1", "title": "A", "paragraphs": ["ok"]}), deep])
    with pytest.raises(CorpusError, match=rf"{path}:2: JSON nested too deeply to read"):
        list(read_corpus(path))


def test_metadata_over_the_limit_is_refused_naming_the_document(tmp_path):
    """Metadata comes back with every hit: a megabyte of it made one search render 728 MB before its 400."""
    from spanseek.core.io import MAX_META_BYTES

    fits = {"id": "ok", "title": "A", "paragraphs": ["p"], "meta": {"v": "é" * (MAX_META_BYTES // 4)}}
    big = {"id": "scan-7", "title": "B", "paragraphs": ["p", "q"], "passage_meta": [None, {"img": "x" * (1 << 20)}]}
    path = _write_lines(tmp_path / "m.jsonl", [json.dumps(fits, ensure_ascii=False), json.dumps(big)])
    with pytest.raises(CorpusError, match=rf"{path}:2: document 'scan-7': its 'passage_meta' 1 is \d+ bytes as JSON, "
                                          rf"over the limit of {MAX_META_BYTES}"):
        list(read_corpus(path))
    assert [d.id for d in read_corpus(_write_lines(tmp_path / "ok.jsonl", [json.dumps(fits)]))] == ["ok"]


def test_metadata_nested_past_the_limit_is_refused_naming_the_document(tmp_path):
    """Every answer holding a document whose metadata was nested past 255 levels failed (the service's JSON renderer
    stops there); an index build took it. Past MAX_META_DEPTH it is refused, at the limit read."""
    from spanseek.core.io import MAX_META_DEPTH

    def nested(depth: int) -> dict:
        value: dict = {}
        for _ in range(depth - 1):
            value = {"k": value}
        return value

    at_limit = {"id": "ok", "title": "A", "paragraphs": ["p"], "meta": nested(MAX_META_DEPTH)}
    deep = {"id": "deep-1", "title": "B", "paragraphs": ["p", "q"], "passage_meta": [None, nested(MAX_META_DEPTH + 1)]}
    path = _write_lines(tmp_path / "m.jsonl", [json.dumps(at_limit), json.dumps(deep)])
    with pytest.raises(CorpusError, match=rf"{path}:2: document 'deep-1': its 'passage_meta' 1 is nested more than "
                                          rf"{MAX_META_DEPTH} levels deep"):
        list(read_corpus(path))
    assert [d.id for d in read_corpus(_write_lines(tmp_path / "ok.jsonl", [json.dumps(at_limit)]))] == ["ok"]


def test_an_unpaired_surrogate_names_the_file_and_line(tmp_path):
    path = _write_lines(tmp_path / "s.jsonl", [json.dumps({"id": "1", "title": "A", "paragraphs": ["ok", "bad \ud800"]})])
    with pytest.raises(CorpusError, match=rf"{path}:1: paragraph 1 holds an unpaired surrogate"):
        list(read_corpus(path))


def test_a_truncated_or_fake_gzip_names_the_file(tmp_path):
    lines = [json.dumps({"id": str(i), "title": "T", "paragraphs": [f"paragraph {i} " * 50]}) for i in range(400)]
    whole = tmp_path / "whole.jsonl.gz"
    with gzip.open(whole, "wt", encoding="utf-8") as f:
        f.write("".join(line + "\n" for line in lines))
    cut = tmp_path / "cut.jsonl.gz"
    cut.write_bytes(whole.read_bytes()[: len(whole.read_bytes()) // 2])
    with pytest.raises(CorpusError, match=rf"{cut}:\d+: the gzip stream ends early \(a truncated file\)"):
        list(read_corpus(cut))
    fake = _write_lines(tmp_path / "plain.jsonl.gz", lines[:2])
    with pytest.raises(CorpusError, match=rf"{fake}: not a gzip file"):
        list(read_corpus(fake))
    with pytest.raises(CorpusError, match=rf"{fake}: not a gzip file"):
        load_squad(fake)


def test_corpus_errors_reach_the_command_line_without_a_traceback(tmp_path, capsys):
    from spanseek.cli import main

    fake = _write_lines(tmp_path / "plain.json.gz", ['{"data": []}'])
    assert main(["corpus", "from-squad", str(fake), "--out", str(tmp_path / "c.jsonl")]) == 2
    err = capsys.readouterr().err
    assert f"{fake}: not a gzip file" in err and "Traceback" not in err


def test_unique_ids_names_both_lines(tmp_path):
    from spanseek.core.io import unique_ids

    path = _write_lines(tmp_path / "d.jsonl", [json.dumps({"id": i, "title": "t", "paragraphs": ["p"]}) for i in "abca"])
    with pytest.raises(CorpusError, match=rf"{path}:4: document id 'a' was already used on line 1"):
        list(unique_ids(read_corpus(path), path))
    with pytest.raises(CorpusError, match=rf"{path}:2: document id 'b' is already in the index X"):
        list(unique_ids(read_corpus(path), path, existing={"b"}, existing_name="the index X"))


def test_a_repeated_id_that_a_line_without_one_took_says_it_is_that_line_s_number(tmp_path):
    """A document without an id takes its line number: an explicit id equal to it, on either side, was "document id
    '1' was already used on line 1" to a user who wrote that id once, or never."""
    from spanseek.core.io import unique_ids

    untitled = {"title": "t", "paragraphs": ["p"]}
    first = _write_lines(tmp_path / "first.jsonl", [json.dumps(untitled), json.dumps({**untitled, "id": "1"})])
    with pytest.raises(CorpusError, match=rf"^{first}:2: document id '1' was already given on line 1 to the document "
                                          r"there, which has no id \(a document without one takes its line number\)"):
        list(unique_ids(read_corpus(first), first))
    later = _write_lines(tmp_path / "later.jsonl", [json.dumps({**untitled, "id": 2}), json.dumps(untitled)])
    with pytest.raises(CorpusError, match=rf"^{later}:2: this document has no id, and its line number, '2', which it "
                                          "takes as its id, was already used on line 1"):
        list(unique_ids(read_corpus(later), later))
    with pytest.raises(CorpusError, match=rf"^{first}:1: this document has no id, and its line number, '1', which it "
                                          "takes as its id, is already in the index X"):
        list(unique_ids(read_corpus(first), first, existing={"1"}, existing_name="the index X"))
    assert [d.id for d in read_corpus(later)] == ["2", "2"]  # (the ids themselves are as before)


def test_unique_ids_keeps_no_document_it_passed_on(tmp_path):
    """It streams a corpus of any size: it remembers each id's line, not its document (holding every document passed
    on kept the whole corpus's text in memory while a build or a check read it)."""
    import gc
    import weakref

    from spanseek.core.io import unique_ids

    path = _write_lines(tmp_path / "c.jsonl", [json.dumps({"title": "t", "paragraphs": [f"p{i}"]}) for i in range(5)]
                        + [json.dumps({"id": f"d{i}", "title": "t", "paragraphs": [f"q{i}"]}) for i in range(5)])
    reading = unique_ids(read_corpus(path), path)
    passed = [weakref.ref(next(reading)) for _ in range(9)]  # (the tenth not read yet: the reading goes on)
    gc.collect()
    assert [ref() for ref in passed[:-1]] == [None] * 8  # (the last one passed on is the reading's loop variable)
    assert next(reading).id == "d4"


def test_unique_ids_reads_an_id_in_either_unicode_spelling_as_one(tmp_path):
    """"café" composed (NFC) and decomposed (NFD, a Mac's file name) name one document (core.ids), so a corpus
    holding both, or one spelling of an id an index holds in the other, repeats an id."""
    from spanseek.core.io import unique_ids

    nfc, nfd = "caf\u00e9", "cafe\u0301"
    path = _write_lines(tmp_path / "d.jsonl", [json.dumps({"id": i, "title": "t", "paragraphs": ["p"]}) for i in (nfc, "b", nfd)])
    with pytest.raises(CorpusError, match=rf"{path}:3: document id 'cafe\u0301' was already used on line 1"):
        list(unique_ids(read_corpus(path), path))
    one = _write_lines(tmp_path / "e.jsonl", [json.dumps({"id": nfd, "title": "t", "paragraphs": ["p"]})])
    with pytest.raises(CorpusError, match=rf"{one}:1: document id 'cafe\u0301' is already in the index X"):
        list(unique_ids(read_corpus(one), one, existing={nfc}, existing_name="the index X"))


def test_json_files_hold_no_nan(tmp_path):
    """A rank correlation of constant scores is NaN, and json wrote it as NaN, which strict JSON readers refuse."""
    import json

    from spanseek.core.io import write_json_atomic

    write_json_atomic(tmp_path / "r.json", {"tau": float("nan"), "rows": [1.5, float("inf"), (float("-inf"), 2)]})
    text = (tmp_path / "r.json").read_text()
    assert "NaN" not in text and "Infinity" not in text
    assert json.loads(text, parse_constant=lambda c: pytest.fail(c)) == {"tau": None, "rows": [1.5, None, [None, 2]]}


def test_paragraphs_of_invisible_characters_are_empty(tmp_path):
    """A paragraph of zero-width spaces, soft hyphens or control characters has nothing to read or answer: it is
    dropped and counted as empty like a blank one, with its passage metadata, and a document of nothing else is."""
    path = tmp_path / "c.jsonl"
    path.write_text("\n".join(json.dumps(d) for d in [
        {"id": "a", "title": "A", "paragraphs": ["\u200b\u200b", "Real text.", "\u00ad \u2060", "\u200bmore"],
         "passage_meta": [{"page": 1}, {"page": 2}, {"page": 3}, {"page": 4}]},
        {"id": "b", "title": "B", "paragraphs": ["\u200b", " \t", "\x07\x00"]},
    ]) + "\n")
    stats = ReadStats()
    [doc] = list(read_corpus(path, stats))
    assert doc.paragraphs == ("Real text.", "\u200bmore") and doc.passage_meta == ({"page": 2}, {"page": 4})
    assert (stats.documents, stats.paragraphs, stats.empty_documents, stats.empty_paragraphs) == (1, 2, 1, 5)


def test_a_directory_that_cannot_be_put_in_place_leaves_the_old_one_where_it_was(tmp_path, monkeypatch):
    """replace_dir moves the old directory aside before the new one is renamed in: when that rename failed, the old
    one stayed under its hidden name and the path was gone."""
    from pathlib import Path

    from spanseek.core.io import atomic_dir

    out = tmp_path / "model"
    out.mkdir()
    (out / "weights").write_text("old")
    real_rename = Path.rename

    def rename(self, target):
        if self.name == "model.tmp":
            raise OSError(errno.EACCES, "refused", str(target))
        return real_rename(self, target)

    monkeypatch.setattr(Path, "rename", rename)
    with pytest.raises(OSError, match="refused"), atomic_dir(out) as tmp:
        (tmp / "weights").write_text("new")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]
    assert (out / "weights").read_text() == "old"


def test_an_old_directory_left_by_an_interrupted_removal_is_removed_by_the_next_replace(tmp_path, monkeypatch):
    """replace_dir moves the old directory aside under a hidden name and removes it after the new one is in place: a
    removal stopped midway (Ctrl-C, a kill) left that hidden copy, partly removed, for good. The next save removes
    it, as soon as it starts, but never one while the directory it was moved aside from is missing (a kill between
    the two renames: it is the only copy), nor a name of another directory's or a user's."""
    import shutil
    from pathlib import Path

    from spanseek.core.io import atomic_dir

    def save(text: str, left: int = 0) -> None:
        with atomic_dir(out) as tmp:
            (tmp / "a").write_text(text)
            (tmp / "b").write_text(text)
            assert len([p for p in tmp_path.iterdir() if p.name.startswith(".model.") and p not in kept]) == left

    out = tmp_path / "model"
    kept = [tmp_path / "model.old", tmp_path / ".model.v2.old", tmp_path / ".model.v2.abcd1234.old",
            tmp_path / ".model.20261201.old"]  # a user's backups, of names like the old copies'

    for path in kept:
        path.mkdir()
    save("first")
    real_rmtree = shutil.rmtree

    def interrupted(path, *args, **kwargs):
        if Path(path).name.endswith(".old"):
            next(p for p in Path(path).iterdir()).unlink()  # one file removed, then stopped
            raise KeyboardInterrupt
        return real_rmtree(path, *args, **kwargs)

    monkeypatch.setattr(shutil, "rmtree", interrupted)
    with pytest.raises(KeyboardInterrupt):
        save("second")
    monkeypatch.setattr(shutil, "rmtree", real_rmtree)
    left = [p for p in tmp_path.iterdir() if p not in kept and p != out]
    assert len(left) == 1 and left[0].name.startswith(".model.") and (out / "a").read_text() == "second"
    save("third")  # the leftover is gone before the block runs
    assert sorted(tmp_path.iterdir()) == sorted([out, *kept]) and (out / "b").read_text() == "third"
    # killed between the renames: the hidden copy is the only one, and stays until a new one is in place
    only = tmp_path / ".model.replaced-x1y2z3w4.old"
    out.rename(only)
    with pytest.raises(RuntimeError), atomic_dir(out):
        assert only.is_dir()
        raise RuntimeError("the save fails")
    assert only.is_dir() and not out.exists()
    save("fourth", left=1)
    assert sorted(tmp_path.iterdir()) == sorted([out, *kept]) and (out / "a").read_text() == "fourth"
    # an old copy that cannot be removed is left, and saves go on
    stuck = tmp_path / ".model.replaced-q1w2e3r4.old"
    stuck.mkdir()

    def refused(path, *args, **kwargs):
        if Path(path) == stuck:
            raise PermissionError(13, "Permission denied", str(path))
        return real_rmtree(path, *args, **kwargs)

    monkeypatch.setattr(shutil, "rmtree", refused)
    save("fifth", left=1)
    assert stuck.is_dir() and (out / "a").read_text() == "fifth"


def test_a_directory_given_as_a_file_is_named_a_directory(tmp_path):
    """``corpus from-squad DIR`` and ``search --questions DIR`` said "DIR:1: cannot be read ([Errno 21] Is a
    directory: 'DIR')": a line 1 that was never read, and Python's words."""
    from spanseek.core.io import CorpusError, read_corpus, read_head

    for read in (load_squad, lambda p: list(read_corpus(p)), read_head):
        with pytest.raises(CorpusError) as e:
            read(tmp_path)
        assert str(e.value) == f"{tmp_path}: a directory, not a file"


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes")
def test_an_output_that_is_a_pipe_or_device_is_written_in_place_not_replaced(tmp_path):
    """``--out /dev/null`` or a named pipe: the temporary was renamed over it, which (as root) left a regular file
    where the device was; now such a path is written in place and stays what it was."""
    import stat
    import threading

    pipe = tmp_path / "pipe"
    os.mkfifo(pipe)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(pipe.read_bytes()), daemon=True)
    reader.start()
    from spanseek.core.io import write_json_atomic

    write_json_atomic(pipe, {"written": 1})
    reader.join(timeout=10)
    assert stat.S_ISFIFO(os.stat(pipe).st_mode)
    assert json.loads(got[0]) == {"written": 1}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pipe"]  # no temporary left beside it


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="/proc's links to open files")
def test_an_output_through_a_link_to_an_open_file_writes_that_file_and_keeps_the_link(tmp_path):
    """``--out /dev/stdout > m.json``: /dev/stdout is a link to /proc/self/fd/1, here a regular file, so the temporary
    was renamed over the link (as root, /dev/stdout itself replaced by a file; else "Permission denied" in /dev) and
    m.json stayed empty. Such a link is now written in place, into the file it stands for; a link to a regular file
    of the user's is still replaced atomically, as before."""
    from spanseek.core.io import write_json_atomic

    held = tmp_path / "m.json"
    fd = os.open(held, os.O_WRONLY | os.O_CREAT)
    try:
        (tmp_path / "out").symlink_to(f"/proc/self/fd/{fd}")
        (tmp_path / "through").symlink_to(tmp_path / "out")  # (a chain of links, as /dev/stdout's)
        write_json_atomic(tmp_path / "through", {"written": 1})
    finally:
        os.close(fd)
    assert json.loads(held.read_text()) == {"written": 1}
    assert (tmp_path / "out").is_symlink() and (tmp_path / "through").is_symlink()
    (tmp_path / "link").symlink_to(held)
    write_json_atomic(tmp_path / "link", {"written": 2})
    assert not (tmp_path / "link").is_symlink() and json.loads(held.read_text()) == {"written": 1}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link", "m.json", "out", "through"]  # no temporary left
    closed = next(n for n in range(4096, 8192) if not os.path.exists(f"/proc/self/fd/{n}"))
    (tmp_path / "closed").symlink_to(f"/proc/self/fd/{closed}")  # (/dev/stdout with the command's stdout closed)
    with pytest.raises(OSError) as e:
        write_json_atomic(tmp_path / "closed", {"written": 3})
    assert e.value.filename == str(tmp_path / "closed") and (tmp_path / "closed").is_symlink()


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes")
def test_an_output_written_in_place_is_checked_writable_without_a_new_entry_in_its_folder(tmp_path, monkeypatch):
    """``corpus from-files --out /dev/stdout`` (or /dev/null) checks its --out before reading: the check made a probe
    file in /dev, which only root may, so any other user was told "--out /dev/stdout: cannot be written: Permission
    denied" though the output is written in place. A path written in place is now checked for itself."""
    from spanseek.core.io import check_writable

    pipe = tmp_path / "pipe"
    os.mkfifo(pipe)
    real = tempfile.mkstemp

    def folder_refuses(*args, **kwargs):  # (a folder that takes no new entry from this user, as /dev)
        if str(kwargs.get("dir")) == str(tmp_path):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES))
        return real(*args, **kwargs)

    monkeypatch.setattr(tempfile, "mkstemp", folder_refuses)
    check_writable(pipe)
    with pytest.raises(OSError, match="cannot be written: Permission denied"):
        check_writable(tmp_path / "corpus.jsonl")  # (a file, written beside: its folder must take the temporary)
