"""Bad input to `spanseek index build`, `index verify` and `spanseek search` is refused with a one-line message,
before any encoding where it can be: an --out folder of other files (never written over, the corpus least of all),
a corpus whose passages have no tokens, nprobe / k / sample below 1, a PCA wider than the vectors; a PCA
pre-transform is trained like OPQ; questions on stdin are UTF-8 (a BOM dropped), a bad line is named.

    .venv/bin/python -m pytest -q tests/indexer/test_build_errors.py
"""

from __future__ import annotations

import io
import json
import os

import pytest

from spanseek.cli import main
from spanseek.core import phrase_index
from spanseek.core.encoding import PassageEncoder
from spanseek.core.faiss_spec import FactoryError, parse_factory
from spanseek.core.loading import open_searcher
from spanseek.core.params import SearchParams
from spanseek.indexer.build import SHARDS, BuildError, BuildOptions, build_index
from spanseek.indexer.faiss_index import validate_factory
from spanseek.indexer.verify import verify_index

OPTS = BuildOptions(factory="Flat", progress=False, precision="fp32", gpu=False)


def write_jsonl(path, docs):
    path.write_text("".join(json.dumps(d) + "\n" for d in docs))
    return path


def snapshot(folder):
    return {p.name: p.read_bytes() for p in folder.iterdir()}


@pytest.fixture
def no_encoding(monkeypatch):
    """Any passage encoding fails the test: the refusals under test come before it."""
    def encode_flat(self, passages):
        raise AssertionError("encoded before refusing")

    monkeypatch.setattr(PassageEncoder, "encode_flat", encode_flat)


def test_only_a_new_empty_or_unfinished_out_folder_is_built_in(tmp_path, tiny_corpus, tiny_model_dir, capsys,
                                                               monkeypatch, no_encoding):
    """A folder of other files is refused before encoding and left as it was, the corpus above all; a new or
    empty folder, or one a killed build left, is built in."""
    work = tmp_path / "work"
    work.mkdir()
    corpus = work / "docs.jsonl"  # the index's document store has this name
    corpus.write_bytes(tiny_corpus.read_bytes())
    (work / "notes.tmp").write_text("mine")  # the build removes its own *.tmp files from --out
    before = snapshot(work)
    with pytest.raises(BuildError, match=rf"--corpus {corpus} is inside --out {work}"):
        build_index(corpus, tiny_model_dir, work, OPTS)
    with pytest.raises(BuildError, match=rf"--out {work} is not empty \(docs.jsonl, notes.tmp\) and is neither an "
                                         "index nor an unfinished build"):
        build_index(tiny_corpus, tiny_model_dir, work, OPTS)
    assert main(["index", "build", "--corpus", str(tiny_corpus), "--model", str(tiny_model_dir), "--out", str(work),
                 "--quiet", "--precision", "fp32", "--device", "cpu", "--no-gpu"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("spanseek index build: error: ") and "is not empty" in err and len(err.strip().splitlines()) == 1
    assert snapshot(work) == before

    monkeypatch.undo()  # encoding allowed again
    empty = tmp_path / "empty"
    empty.mkdir()
    killed = tmp_path / "killed"  # killed before its first shard: only the stores' temporaries
    killed.mkdir()
    (killed / f".{phrase_index.PASSAGES}.k1l2.tmp").write_text("{}\n")
    (killed / f".{phrase_index.DOCS}.k1l2.tmp").write_text("{}\n")
    for out in (empty, killed, tmp_path / "new"):
        assert build_index(tiny_corpus, tiny_model_dir, out, OPTS).documents == 6
        assert not list(out.glob("*.tmp")) and not (out / SHARDS).exists()


def test_a_second_build_into_the_same_out_is_refused_at_its_start(tmp_path, tiny_corpus, tiny_model_dir, capsys,
                                                                  monkeypatch):
    """Two builds into one --out would write the same shard and store names: the second is refused before it loads
    the model, naming the lock `index add` also takes and the process holding it, and changes nothing; the first
    finishes as if alone."""
    from spanseek.indexer import build as build_module

    out = tmp_path / "i"
    encode, load_model = PassageEncoder.encode_flat, build_module.load_model
    loads, seen = [], []
    monkeypatch.setattr(build_module, "load_model", lambda *a, **k: loads.append(a) or load_model(*a, **k))

    def files():
        return {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}

    def second_build_meanwhile(self, passages):
        if not seen:
            seen.append(files())
            with pytest.raises(BuildError, match=rf"--out {out}: process {os.getpid()} holds its lock "
                                                 rf"\({out / 'index.lock'}\): .*wait for it to end"):
                build_index(tiny_corpus, tiny_model_dir, out, OPTS)
            assert main(["index", "build", "--corpus", str(tiny_corpus), "--model", str(tiny_model_dir), "--out",
                         str(out), "--quiet"]) == 2
            seen.append(capsys.readouterr().err)
            seen.append(files())
        return encode(self, passages)

    monkeypatch.setattr(PassageEncoder, "encode_flat", second_build_meanwhile)
    assert build_index(tiny_corpus, tiny_model_dir, out, OPTS).documents == 6
    before, err, after = seen
    assert len(loads) == 1 and after == before  # the second build loaded no model and wrote nothing
    assert err.startswith("spanseek index build: error: --out") and len(err.strip().splitlines()) == 1
    assert verify_index(out, sample=30)["ok"]


@pytest.mark.parametrize("last, problem", [
    ({"id": "big", "title": "t", "paragraphs": ["x y"], "meta": {"n": 10 ** 400}},
     "document 'big': its 'meta' holds a number that is not finite as a float (an integer of about 401 digits, at "
     '["n"])'),
    ({"id": "d0", "title": "t", "paragraphs": ["x y"]}, "document id 'd0' was already used on line 1"),
])
def test_a_bad_line_at_the_end_of_the_corpus_is_refused_before_the_model_loads(tmp_path, tiny_corpus, tiny_model_dir,
                                                                              capsys, monkeypatch, no_encoding, last,
                                                                              problem):
    """The corpus is streamed into shards: its last line was read (and refused, naming it) only once every shard
    before it was encoded, hours into a large build. It is read through first, before the model loads."""
    from spanseek.indexer import build as build_module

    def no_model(*args, **kwargs):
        raise AssertionError("loaded the model before refusing")

    monkeypatch.setattr(build_module, "load_model", no_model)
    corpus = tmp_path / "big.jsonl"
    corpus.write_text(tiny_corpus.read_text() + json.dumps(last) + "\n")
    out = tmp_path / "index"
    argv = ["index", "build", "--corpus", str(corpus), "--model", str(tiny_model_dir), "--out", str(out), "--quiet",
            "--shard-passages", "1"]  # a shard per passage: one streamed build encodes before it reads line 7
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"spanseek index build: error: {corpus}:7: {problem}") and err.count("\n") == 1
    assert not out.exists()  # nothing written: the fixed corpus builds in the same --out
    corpus.write_bytes(tiny_corpus.read_bytes())
    monkeypatch.undo()
    assert build_index(corpus, tiny_model_dir, out, OPTS).documents == 6


def test_a_corpus_whose_passages_have_no_tokens_is_refused_then_resumes_when_fixed(tmp_path, tiny_corpus,
                                                                                  tiny_model_dir):
    blank = write_jsonl(tmp_path / "blank.jsonl", [{"id": "x", "title": "t", "paragraphs": ["\u200b\u00a0"]},
                                                   {"id": "y", "title": "u", "paragraphs": ["\u200b", "\u00ad"]}])
    out = tmp_path / "index"
    with pytest.raises(BuildError, match=rf"corpus {blank} has no non-empty passages"):  # invisible characters only
        build_index(blank, tiny_model_dir, out, OPTS)
    assert not (out / phrase_index.MANIFEST).exists()
    blank.write_bytes(tiny_corpus.read_bytes())  # fixed: the same --out resumes
    assert build_index(blank, tiny_model_dir, out, OPTS).passages == 24


def test_a_corpus_without_passages_leaves_out_reusable(tmp_path, tiny_corpus, tiny_model_dir):
    empty = write_jsonl(tmp_path / "empty.jsonl", [{"id": "a", "title": "A", "paragraphs": [" "]}])
    out = tmp_path / "index"
    with pytest.raises(BuildError, match="has no non-empty passages"):
        build_index(empty, tiny_model_dir, out, OPTS)
    assert not out.exists() or not any(out.iterdir())  # the stores were not renamed into place
    assert build_index(tiny_corpus, tiny_model_dir, out, OPTS).documents == 6


@pytest.mark.parametrize("nprobe", [0, -3])
def test_nprobe_below_one_is_refused_before_encoding(tmp_path, tiny_corpus, tiny_model_dir, capsys, no_encoding,
                                                     nprobe):
    with pytest.raises(ValueError, match=rf"nprobe must be an integer >= 1, got {nprobe}"):
        BuildOptions(factory="IVF4,SQ8", nprobe=nprobe)
    assert main(["index", "build", "--corpus", str(tiny_corpus), "--model", str(tiny_model_dir), "--out",
                 str(tmp_path / "i"), "--factory", "IVF4,SQ8", "--nprobe", str(nprobe), "--quiet"]) == 2
    assert f"nprobe must be an integer >= 1, got {nprobe}" in capsys.readouterr().err
    assert not (tmp_path / "i").exists()


@pytest.mark.parametrize(("flag", "value", "message"), [
    ("--recall-sample", "-1", "--recall-sample must be an integer >= 0 (0: skip the recall), got -1"),
    ("--max-train", "0", "--max-train must be an integer >= 1, got 0"),
    ("--filter-threshold", "2", "--filter-threshold must be a probability between 0 and 1, got 2.0"),
])
def test_options_read_at_the_faiss_stage_are_refused_before_encoding(tmp_path, tiny_corpus, tiny_model_dir, capsys,
                                                                     no_encoding, flag, value, message):
    """`--recall-sample -1` failed (``negative dimensions are not allowed``) only after the corpus was encoded."""
    assert main(["index", "build", "--corpus", str(tiny_corpus), "--model", str(tiny_model_dir), "--out",
                 str(tmp_path / "i"), flag, value, "--quiet"]) == 2
    assert capsys.readouterr().err == f"spanseek index build: error: {message}\n"
    assert not (tmp_path / "i").exists()


@pytest.mark.parametrize("flag", ["--k", "--sample", "--nprobe"])
@pytest.mark.parametrize("value", ["0", "-2"])
def test_verify_refuses_counts_below_one(tiny_index, capsys, flag, value):
    with pytest.raises(SystemExit) as e:
        main(["index", "verify", str(tiny_index), flag, value])
    assert e.value.code == 2
    assert f"argument {flag}: must be an integer >= 1, got '{value}'" in capsys.readouterr().err
    name = flag.removeprefix("--")
    with pytest.raises(ValueError, match=rf"{name} must be an integer >= 1, got {value}"):
        verify_index(tiny_index, **{name: int(value)})


def test_verify_takes_the_index_as_an_operand_or_as_index_like_the_other_index_commands(tiny_index, capsys):
    """`index verify DIR` and `index verify --index DIR` (as add, upsert, delete and compact name it) give one report;
    neither, or both, is one line naming what to give, status 2."""
    reports = []
    for argv in (["index", "verify", str(tiny_index)], ["index", "verify", "--index", str(tiny_index)]):
        assert main([*argv, "--sample", "10"]) == 0
        reports.append(json.loads(capsys.readouterr().out))
    assert reports[0]["manifest"] == reports[1]["manifest"] and reports[0]["ok"] and reports[1]["ok"]
    assert main(["index", "verify"]) == 2
    assert capsys.readouterr().err == "spanseek index verify: error: give the index directory once: `INDEX` or `--index INDEX`\n"
    assert main(["index", "verify", str(tiny_index), "--index", "other"]) == 2
    assert "the index is given twice" in capsys.readouterr().err


@pytest.mark.parametrize("given", [[], ["--index"]], ids=["operand", "--index"])
def test_verify_says_when_a_folder_is_no_index_in_one_report_however_it_is_given(tmp_path, capsys, given):
    """`index verify DIR` named the path alone where `index verify --index DIR` named the flag too: one report."""
    (tmp_path / "empty").mkdir()
    assert main(["index", "verify", *given, str(tmp_path / "empty")]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["problems"] == [f"--index {tmp_path / 'empty'}: not an index directory (no manifest.json and no "
                                  "unfinished build); build one with `spanseek index build`"]
    assert main(["index", "verify", *given, str(tmp_path / "missing")]) == 1
    assert json.loads(capsys.readouterr().out)["problems"][0].startswith(
        f"--index {tmp_path / 'missing'}: no such index directory")


def test_a_pca_pre_transform_is_trained_and_searched(tmp_path, tiny_corpus, tiny_model_dir):
    spec = parse_factory("PCA16,Flat")
    assert spec.pca_dim == 16 and spec.needs_training and spec.min_train == 16
    assert validate_factory("PCA16,PQ8", 32, 20_000).pq_m == 8  # the PQ splits the PCA's 16 dimensions
    with pytest.raises(FactoryError, match="dimension 16"):
        validate_factory("PCA16,PQ5", 32, 20_000)
    with pytest.raises(FactoryError, match="PCA16 needs at least 16 vectors"):
        validate_factory("PCA16,Flat", 32, 10)
    out = tmp_path / "pca"
    m = build_index(tiny_corpus, tiny_model_dir, out, BuildOptions(factory="PCA16,Flat", progress=False,
                                                                   precision="fp32", gpu=False))
    assert m.factory == "PCA16,Flat" and m.indexed_tokens == m.tokens > 0
    assert m.faiss_params["train_size"] >= 16 and m.faiss_params["recall"]["recall@1"] > 0.5
    assert verify_index(out, sample=50)["ok"]
    searcher = open_searcher(out, tiny_model_dir, device="cpu", precision="fp32")
    [hits] = searcher.search(["Who built the bridge?"], SearchParams(unit="passage", top_k=3, mode="dense"))
    assert len(hits) == 3


def test_a_pca_wider_than_the_vectors_is_refused_before_encoding(tmp_path, tiny_corpus, tiny_model_dir, no_encoding):
    with pytest.raises(FactoryError, match=r"PCA64 cannot reduce vectors of dimension 32 to 64; use PCA32 or fewer"):
        build_index(tiny_corpus, tiny_model_dir, tmp_path / "i", BuildOptions(factory="PCA64,Flat", progress=False,
                                                                              precision="fp32", gpu=False))


def _search_stdin(monkeypatch, capsys, index, model, data: bytes) -> tuple[int, list[dict], str]:
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(data), encoding="utf-8"))
    rc = main(["search", "--index", str(index), "--model", str(model), "--device", "cpu", "--top-k", "1"])
    out, err = capsys.readouterr()
    return rc, [json.loads(line) for line in out.splitlines()], err


def test_search_reads_stdin_as_utf8_and_names_a_bad_line(tiny_index, tiny_model_dir, monkeypatch, capsys):
    rc, lines, err = _search_stdin(monkeypatch, capsys, tiny_index, tiny_model_dir,
                                   "\ufeffWho built the bridge?\r\n\n caf\u00e9 ole \n".encode())
    assert rc == 0 and [line["query"] for line in lines] == ["Who built the bridge?", "caf\u00e9 ole"]
    rc, lines, err = _search_stdin(monkeypatch, capsys, tiny_index, tiny_model_dir,
                                   b"when was the bridge built\ncaf\xe9 ole\n")
    assert rc == 2 and lines == []
    assert err.strip() == ("spanseek search: error: stdin line 2 is not UTF-8 text (byte 0xe9 at column 4); give "
                           "questions as UTF-8")
    # an argument that is not UTF-8 reaches Python as a lone surrogate (os.fsdecode)
    assert main(["search", "--index", str(tiny_index), "--model", str(tiny_model_dir), "ok", "caf\udce9"]) == 2
    assert "question 2 ('caf\\udce9') is not UTF-8 text" in capsys.readouterr().err


def test_search_reads_json_lines_on_stdin_as_questions_with_their_ids(tiny_index, tiny_model_dir, monkeypatch,
                                                                     capsys, tmp_path):
    """JSON Lines piped in were searched as their raw text; now as `--questions FILE.jsonl` reads them."""
    data = ('\ufeff\n{"id": "q1", "question": "Who built the bridge?", "answers": ["Alba"]}\n'
            '{"question": "Where is the river?"}\n{"id": 7, "question": "When?"}\n')
    rc, lines, err = _search_stdin(monkeypatch, capsys, tiny_index, tiny_model_dir, data.encode())
    assert rc == 0, err
    assert [(line["id"], line["query"]) for line in lines] == [
        ("q1", "Who built the bridge?"), ("line-3", "Where is the river?"), ("7", "When?")]
    (tmp_path / "q.jsonl").write_text(data, encoding="utf-8")
    assert main(["search", "--index", str(tiny_index), "--model", str(tiny_model_dir), "--device", "cpu",
                 "--top-k", "1", "--questions", str(tmp_path / "q.jsonl")]) == 0
    assert [json.loads(line) for line in capsys.readouterr().out.splitlines()] == lines
    # text that merely starts with "{" (or is a JSON object without a question) stays one question a line
    rc, lines, err = _search_stdin(monkeypatch, capsys, tiny_index, tiny_model_dir,
                                   b'{not json} who built it?\n{"query": "bridge"}\n')
    assert rc == 0 and [(line.get("id"), line["query"]) for line in lines] == [
        (None, "{not json} who built it?"), (None, '{"query": "bridge"}')]
    rc, lines, err = _search_stdin(monkeypatch, capsys, tiny_index, tiny_model_dir,
                                   b'{"question": "Who built the bridge?"}\nWhere is the river?\n')
    assert rc == 2 and lines == []
    assert err.startswith("spanseek search: error: stdin:2: invalid JSON")


def test_a_filter_file_that_is_not_utf8_is_refused_naming_it_and_the_line(tmp_path, tiny_index, tiny_model_dir, capsys):
    """`--filter @FILE` gave a bare ``'utf-8' codec can't decode byte 0xe9 in position 17``."""
    bad = tmp_path / "filter.json"
    bad.write_bytes(b'{"doc_ids":\n ["caf\xe9"]}')
    argv = ["search", "--index", str(tiny_index), "--model", str(tiny_model_dir), "--filter", f"@{bad}", "who?"]
    assert main(argv) == 2
    assert capsys.readouterr().err == (f"spanseek search: error: --filter: {bad}:2: not UTF-8 (byte 6 of the line, "
                                       "0xe9); save the file as UTF-8\n")
    bad.write_text('{"doc_ids": ["d1"]}', encoding="utf-8")
    assert main([*argv[:-1], "--unit", "doc", "--top-k", "3", "who?"]) == 0
    assert [h["doc_id"] for h in json.loads(capsys.readouterr().out)["hits"]] == ["d1"]


def test_output_piped_into_a_reader_that_stops_is_not_an_error(tmp_path, monkeypatch, capsys):
    """A command whose stdout reader went away (`spanseek index delete ... | head`) printed "error: [Errno 32] Broken
    pipe" once head had read its lines: a BrokenPipeError out of a command ends it quietly."""
    from spanseek.indexer import cli as indexer_cli

    def closed_pipe(args):
        raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(indexer_cli, "_export", closed_pipe)
    assert main(["index", "export", "--index", str(tmp_path), "--out", str(tmp_path / "x.jsonl")]) == 0
    assert "error" not in capsys.readouterr().err


def test_a_file_given_as_the_index_is_named_as_a_file(tmp_path, capsys):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text('{"id": "a", "paragraphs": ["text"]}\n')
    assert main(["search", "--index", str(corpus), "who?"]) == 2
    assert f"{corpus}: a file, not an index directory" in capsys.readouterr().err


def test_ray_without_its_extra_is_refused_before_anything_is_written(tmp_path, tiny_corpus, tiny_model_dir, capsys,
                                                                    no_encoding, monkeypatch):
    """It was refused at the first shard, once the model had loaded and the stores were written into --out."""
    import importlib.util

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "ray" else find_spec(name, *a))
    assert main(["index", "build", "--corpus", str(tiny_corpus), "--model", str(tiny_model_dir), "--out",
                 str(tmp_path / "i"), "--ray", "local", "--quiet"]) == 2
    assert "--ray needs the `ray` extra: pip install 'spanseek[ray]'" in capsys.readouterr().err
    assert not (tmp_path / "i").exists()
    for command in ("add", "upsert"):  # the same, before the index is locked or the model loads
        assert main(["index", command, "--index", str(tmp_path / "i"), "--corpus", str(tiny_corpus), "--model",
                     str(tiny_model_dir), "--ray", "local", "--quiet"]) == 2
        assert "--ray needs the `ray` extra" in capsys.readouterr().err


@pytest.mark.parametrize(("argv", "why"), [
    (["index", "add", "--index", "X"], "wait for it to end"),
    (["serve", "--writes"], "a server with writes over it: send it the change as a write instead"),
    (["--version"], "wait for it to end"),
])
def test_a_locked_index_or_out_is_refused_naming_the_command_that_holds_it(tmp_path, argv, why):
    """The refusals of a locked index (an index command) and of a locked --out (a build) are one family: what is
    locked, the process and the `spanseek` command it runs (read from its command line), what to do, and that
    nothing changed; the build's used other words ("another build or change of it ... holds its lock")."""
    import subprocess
    import sys

    from spanseek.indexer.out_dir import build_lock, lock_refusal, running_command

    index = tmp_path / "index"
    index.mkdir()
    program = tmp_path / "spanseek"  # a `spanseek` program holding the lock, as the installed command runs
    program.write_text("import fcntl, os, sys, time\n"
                       "fd = os.open(sys.argv[-1], os.O_RDWR | os.O_CREAT)\nfcntl.flock(fd, fcntl.LOCK_EX)\n"
                       "print('held', flush=True)\ntime.sleep(60)\n")
    holder = subprocess.Popen([sys.executable, str(program), *argv, str(index / "index.lock")], stdout=subprocess.PIPE,
                              text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        command = "spanseek" if argv[0].startswith("-") else "spanseek " + " ".join(argv[:2] if argv[0] == "index"
                                                                                    else argv[:1])
        assert running_command(holder.pid) == command
        lock = index / "index.lock"
        assert str(lock_refusal(index, "delete")) == (f"{index}: process {holder.pid} (`{command}`) holds its lock "
                                                      f"({lock}): {why}; `spanseek index delete` changed nothing")
        with pytest.raises(BuildError) as refused, build_lock(index):
            pass
        wait = ("a server with writes over it: choose another --out" if argv[0] == "serve" else
                "wait for it to end, or choose another --out")
        assert str(refused.value) == (f"--out {index}: process {holder.pid} (`{command}`) holds its lock ({lock}): "
                                      f"{wait}; `spanseek index build` changed nothing")
    finally:
        holder.kill()
        holder.wait()
    assert running_command(os.getpid()) is None  # pytest: not a `spanseek` command


@pytest.mark.parametrize(("args", "command"), [
    (["{program}", "-v", "serve", "--writes"], "spanseek serve"),  # the program's own flag before its command
    (["{program}", "--verbose", "index", "add", "--index", "X"], "spanseek index add"),
    (["-c", "{sleep}", "--chdir", "/srv/spanseek", "serve"], None),  # another program, given a path named spanseek
    (["{other}", "/data/spanseek", "index", "add"], None),
])
def test_the_lock_holders_command_is_read_from_the_program_and_after_its_flags(tmp_path, args, command):
    """`spanseek -v serve --writes` is a server with writes (it was told to "wait for it to end", as a command
    without a name would be), and a program that merely has an argument named spanseek is no `spanseek` command
    (it was taken for `spanseek serve`): its refusal names both kinds of holder."""
    import subprocess
    import sys

    from spanseek.indexer.out_dir import lock_refusal, running_command

    sleep = "import time; print('up', flush=True); time.sleep(60)"
    for name in ("spanseek", "other.py"):
        (tmp_path / name).write_text(sleep + "\n")
    argv = [a.format(program=tmp_path / "spanseek", other=tmp_path / "other.py", sleep=sleep) for a in args]
    holder = subprocess.Popen([sys.executable, *argv], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "up\n"
        assert running_command(holder.pid) == command
    finally:
        holder.kill()
        holder.wait()
    if command is None:  # (the refusal where the holder's command cannot be told names both kinds)
        assert "or a server with writes over it" in str(lock_refusal(tmp_path, "delete"))


def test_a_lock_holder_the_kernel_shows_as_process_0_is_not_named(tmp_path, monkeypatch):
    """/proc/locks shows 0 for a holder outside this process's PID namespace (a server in another container over a
    shared volume) or one that ended while a child it forked holds the lock: the refusal said "process 0 holds its
    lock"; it names no process then, and both kinds of holder."""
    from spanseek.core import integrity
    from spanseek.indexer.out_dir import lock_refusal

    monkeypatch.setattr(integrity, "lock_holder", lambda index_dir, name=integrity.LOCK: 0)
    message = str(lock_refusal(tmp_path, "delete"))
    assert message.startswith(f"{tmp_path}: another process holds its lock ({tmp_path / integrity.LOCK}): another "
                              "`spanseek index` command or build")
    assert "or a server with writes over it" in message and "process 0" not in message
