"""The `spanseek` command line as a new user meets it: a typo names the closest command, choice or flag; every flag
says what it does and its default; a search without questions, an index given as the corpus, an alias given as the
index and `eval`'s index or corpus are handled as one line or as the alias's index.

    .venv/bin/python -m pytest -q tests/test_cli_usage.py
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shlex
import subprocess
import sys

import pytest

from spanseek.cli import build_parser, main
from spanseek.core.alias import switch_alias


def refused(argv: list[str], capsys) -> str:
    """argparse's refusal of ``argv``: exit status 2, and what it wrote on stderr."""
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    return capsys.readouterr().err


@pytest.mark.parametrize(("argv", "usage", "hint"), [
    (["serach"], "usage: spanseek [-h]", "invalid choice: 'serach' (choose from 'corpus', 'index', 'search', "),
    (["index", "buidl"], "usage: spanseek index [-h] COMMAND", "did you mean 'build'?"),
    (["corpus", "from-file", "x"], "usage: spanseek corpus [-h] COMMAND", "did you mean 'from-files'?"),
    (["search", "--index", "i", "--unit", "pasage", "q"], "usage: spanseek search", "did you mean 'passage'?"),
])
def test_a_mistyped_command_or_choice_names_the_closest(capsys, argv, usage, hint):
    err = refused(argv, capsys)
    assert err.startswith(usage) and hint in err and err.rstrip().endswith("?")


def test_a_missing_command_is_called_a_command_not_an_internal_name(capsys):
    assert refused(["index"], capsys).endswith("spanseek index: error: the following arguments are required: "
                                               "COMMAND\n")
    assert refused([], capsys).endswith("spanseek: error: the following arguments are required: COMMAND\n")


@pytest.mark.parametrize(("argv", "error"), [
    (["search", "--index", "i", "--topk", "3", "q"],
     "spanseek search: error: unrecognized arguments: --topk; did you mean --top-k?"),
    (["index", "verify", "i", "--smaple", "3"],
     "spanseek index verify: error: unrecognized arguments: --smaple 3; did you mean --sample?"),
    (["index", "build", "--corpus", "c", "--out", "o", "--factroy=Flat"],
     "spanseek index build: error: unrecognized arguments: --factroy=Flat; did you mean --factory?"),
    (["search", "-v", "--index", "i", "q"],
     "spanseek search: error: unrecognized arguments: -v (-v is spanseek's own flag: give it before the command, "
     "`spanseek -v search ...`)"),
    (["eval", "--questions", "q.json", "--whatever"], "spanseek eval: error: unrecognized arguments: --whatever"),
])
def test_an_unknown_flag_is_refused_by_its_command_with_the_closest_flag(capsys, argv, error):
    """It was refused by `spanseek` itself: its usage (the list of commands), and no hint."""
    err = refused(argv, capsys)
    assert err.startswith(f"usage: spanseek {argv[0]}") and err.rstrip().endswith(error), err


def leaf_parsers(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        yield " ".join(path), parser
        return
    for name, sub in subs[0].choices.items():
        yield from leaf_parsers(sub, (*path, name))


def test_every_flag_says_what_it_does_and_its_default():
    """A flag with a default other than none or off says it in its help; every operand and flag has help, of every
    command (`train mine`, `valsets`, `rank-checkpoints` and `calibrate` had flags without)."""
    problems = []
    for command, parser in leaf_parsers(build_parser()):
        for action in parser._actions:
            if isinstance(action, argparse._HelpAction) or action.help == argparse.SUPPRESS:
                continue
            name = "/".join(action.option_strings) or action.dest
            if not action.help:
                problems.append(f"{command} {name}: no help")
            elif (action.default not in (None, False, [], argparse.SUPPRESS) and action.nargs != 0
                  and not isinstance(action, argparse.BooleanOptionalAction)
                  and "default" not in action.help.lower()):
                problems.append(f"{command} {name}: its default {action.default!r} is not in its help")
    assert not problems, "\n".join(problems)


def test_every_help_reads_as_help_text_with_whole_section_titles():
    """A help section is titled by its options class's summary, whole (a summary wrapped onto a second line was cut
    at the wrap: "... a full fine-tune of the backbone with its"), in the help's own quotes (the docstrings' ``x``
    showed as such, as in `spanseek search --help`'s "``None`` fields take the index's default")."""
    helps = {command: parser.format_help() for command, parser in leaf_parsers(build_parser())}
    assert not [command for command, text in helps.items() if "``" in text]
    titles = {command: [g.title for g in parser._action_groups] for command, parser in leaf_parsers(build_parser())}
    assert ("`spanseek train reader`: the cross-attention reader (core.reader), a full fine-tune of the backbone with "
            "its word embeddings frozen") in titles["train reader"]
    assert "What to search for and how; an option left unset takes the index's (or model's) default" in titles["search"]


def test_the_top_help_shows_the_first_steps_and_each_parses(capsys):
    """`spanseek --help` listed the commands, and not the way from files to answers nor where flags are listed."""
    from spanseek.cli import FIRST_STEPS

    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    assert all(f"  {line}\n" in out for line in FIRST_STEPS) and "`spanseek COMMAND --help`" in out
    for line in FIRST_STEPS:  # argparse exits 2 on a command or flag it does not know, or one missing
        assert callable(build_parser().parse_args(shlex.split(line)[1:]).func)


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_search_without_questions_says_so_before_loading_anything(tmp_path, capsys, monkeypatch):
    """It printed nothing and exited 0, once the model had loaded; at a terminal it waited without a word."""
    from spanseek.core import loading

    monkeypatch.setattr(loading, "open_searcher", lambda *a, **k: pytest.fail("loaded for no question"))
    for stdin in (io.StringIO(""), io.StringIO("\n  \n"), Terminal("")):
        monkeypatch.setattr("sys.stdin", stdin)
        assert main(["search", "--index", str(tmp_path)]) == 2
        err = capsys.readouterr().err.splitlines()
        expected = ("spanseek search: error: no questions to search: give them as arguments, one a line on stdin, or "
                    "in --questions FILE")
        hint = ["reading questions from stdin, one a line; end them with Ctrl-D (they are answered then)"]
        assert err == (hint if isinstance(stdin, Terminal) else []) + [expected]


def test_a_search_device_this_machine_lacks_is_one_line(tiny_index, tiny_model_dir, capsys):
    """It warned and searched on the CPU, where --device naming a missing GPU was an error."""
    assert main(["search", "--index", str(tiny_index), "--model", str(tiny_model_dir), "--device", "cpu",
                 "--search-device", "cuda:99", "who built it?"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("spanseek search: error: search_device 'cuda:99': ") and len(err.splitlines()) == 1


def test_an_alias_is_taken_where_an_index_is(tmp_path, tiny_index, tiny_model_dir, capsys):
    """A pointer file (`index switch --pointer`), as `spanseek serve` serves it: the commands said "a file, not an
    index directory"."""
    alias = tmp_path / "current"
    switch_alias(alias, tiny_index, pointer=True)
    assert alias.is_file()
    assert main(["search", "--index", str(alias), "--model", str(tiny_model_dir), "--top-k", "1",
                 "Who built the bridge?"]) == 0
    assert len(json.loads(capsys.readouterr().out)["hits"]) == 1
    assert main(["index", "verify", str(alias), "--sample", "5"]) == 0
    assert json.loads(capsys.readouterr().out)["ok"]
    out = tmp_path / "docs.jsonl"
    assert main(["index", "export", "--index", str(alias), "--out", str(out)]) == 0
    assert len(out.read_text().splitlines()) == json.loads(capsys.readouterr().out)["documents"] > 0
    not_pointer = tmp_path / "corpus.jsonl"  # any other file is still named as a file
    not_pointer.write_text(json.dumps({"id": "a", "paragraphs": ["x" * 300]}) + "\n")
    assert main(["search", "--index", str(not_pointer), "q"]) == 2
    assert f"{not_pointer}: a file, not an index directory" in capsys.readouterr().err


@pytest.mark.parametrize("command", [["index", "build", "--out", "{tmp}/new"], ["index", "add", "--index", "{index}"],
                                     ["eval", "--questions", "{tmp}/q.json"]])
def test_an_index_given_as_the_corpus_is_named_as_an_index(tmp_path, tiny_index, capsys, command):
    """It was called a directory of documents to convert with `corpus from-files`."""
    argv = [w.format(tmp=tmp_path, index=tiny_index) for w in command]
    assert main([*argv, "--corpus", str(tiny_index)]) == 2
    command = " ".join(argv[:2] if argv[0] == "index" else argv[:1])
    assert capsys.readouterr().err == (f"spanseek {command}: error: --corpus {tiny_index} is an index directory, not "
                                       f"a JSONL corpus; `spanseek index export --index {tiny_index} --out "
                                       "CORPUS.jsonl` writes its documents as one\n")
    assert not (tmp_path / "new").exists()


def test_eval_takes_an_index_or_a_corpus_and_the_index_s_model(tmp_path, tiny_squad, tiny_model_dir, capsys):
    """--corpus was ignored beside --index; --model was `default` whatever model built --index (search takes the
    index's)."""
    corpus, index = tmp_path / "corpus.jsonl", tmp_path / "index"
    err = refused(["eval", "--questions", str(tiny_squad), "--index", str(index), "--corpus", str(corpus)], capsys)
    assert err.rstrip().endswith("spanseek eval: error: argument --corpus: not allowed with argument --index")
    assert main(["corpus", "from-squad", str(tiny_squad), "--out", str(corpus)]) == 0
    assert main(["index", "build", "--corpus", str(corpus), "--model", str(tiny_model_dir), "--out", str(index),
                 "--quiet", "--device", "cpu"]) == 0
    capsys.readouterr()
    assert main(["eval", "--questions", str(tiny_squad), "--index", str(index), "--limit", "3", "--quiet"]) == 0
    metrics = json.loads(capsys.readouterr().out)
    assert metrics["n_questions"] == 3 and metrics["model"] == str(tiny_model_dir)


@pytest.mark.parametrize("flag", ["--questions", "--corpus"])
def test_eval_does_not_write_its_metrics_over_its_input(tmp_path, tiny_squad, capsys, monkeypatch, flag):
    """`eval --questions q.json --out q.json` replaced the question file with the metrics."""
    from spanseek.indexer import evaluate

    monkeypatch.setattr(evaluate, "run_eval", lambda *a, **k: pytest.fail("evaluated"))
    given = tmp_path / "input.json"
    given.write_bytes(tiny_squad.read_bytes())
    (tmp_path / "link.json").symlink_to(given)
    questions = str(given) if flag == "--questions" else str(tiny_squad)
    argv = ["eval", "--questions", questions, "--out", str(tmp_path / "link.json")]
    if flag == "--corpus":
        argv += ["--corpus", str(given)]
    assert main(argv) == 2
    assert capsys.readouterr().err == (f"spanseek eval: error: --out {tmp_path / 'link.json'} is the {flag} file to "
                                       "read; write the metrics somewhere else\n")
    assert given.read_bytes() == tiny_squad.read_bytes()


def failure(argv: list[str], capsys) -> tuple[int, str, list[str]]:
    """``spanseek ARGV``'s exit status, stdout and stderr lines, whether argparse or the command refused it."""
    try:
        status = main(argv)
    except SystemExit as e:
        status = e.code
    out, err = capsys.readouterr()
    return status, out, err.splitlines()


# (argv, what the error names); {tmp} is a test folder holding a file `file`, {missing} a path that is not there
FAILURES = [
    (["corpus", "from-squad", "{missing}", "--out", "{tmp}/c.jsonl"], "{missing}: No such file"),
    (["corpus", "from-files", "{tmp}", "--out", "{tmp}/c.jsonl", "--max-tokens", "many"], "argument --max-tokens"),
    (["corpus", "from-files", "{missing}", "--out", "{tmp}/c.jsonl", "--tokenizer", "words"], "{missing}"),
    (["corpus", "from-files", "{tmp}", "--out", "{tmp}/c.jsonl", "--tokenizer", "words", "--meta", "k"], "--meta"),
    (["index", "build", "--corpus", "{missing}", "--out", "{tmp}/i"], "{missing}"),
    (["index", "verify", "{tmp}", "--sample", "0"], "argument --sample"),
    (["index", "verify", "{tmp}", "--index", "{tmp}"], "the index is given twice"),
    (["index", "verify", "{tmp}", "--live-dir", "{missing}"], "--live-dir {missing}: No such file or directory"),
    (["index", "export", "--index", "{missing}", "--out", "{tmp}/c.jsonl"], "--index {missing}: no such index directory"),
    (["index", "add-lexical", "--index", "{missing}"], "--index {missing}: no such index directory"),
    (["index", "add-lexical", "{missing}"], "--index {missing}: no such index directory"),  # the operand as the flag
    (["index", "delete", "--index", "{tmp}"], "--ids"),
    (["index", "switch", "{tmp}/alias", "{missing}"], "{missing}"),
    (["search", "--index", "{missing}", "q"], "--index {missing}: no such index directory"),
    (["search", "--index", "{tmp}/file", "q"], "--index {tmp}/file: a file, not an index directory"),
    (["search", "--index", "{tmp}", "--top-k", "some", "q"], "argument --top-k"),
    (["search", "--index", "{tmp}", "--reader", "{tmp}", "q"], "--reader {tmp} would go unused: the reader reads "
     "the top passages with --read, which is not given"),
    (["eval", "--questions", "{tmp}/file", "--reader", "{tmp}"], "--reader {tmp} would go unused"),
    (["search", "--index", "{tmp}", "--where", "k", "q"], "--where"),
    (["search", "--index", "{tmp}", "--filter", "@{missing}", "q"], "{missing}"),
    (["eval", "--questions", "{missing}"], "{missing}: No such file"),
    (["eval", "--questions", "{tmp}/file", "--index", "{missing}"], "--index {missing}: no such index directory"),
    (["eval", "--questions", "{tmp}/file", "--limit", "0"], "--limit"),
    (["eval", "--questions", "{tmp}/file", "--out", "{tmp}/file/m.json"], "{tmp}/file is a file, not a folder"),
    (["serve", "--index", "{missing}"], "--index / SPANSEEK_INDEX {missing}: no such index directory"),
    (["train", "phrase", "--train", "{tmp}/file", "--out", "{tmp}/run", "--lr", "fast"], "argument --lr"),
    (["train", "phrase", "--train", "{tmp}/file", "--out", "{tmp}/run", "--batch-windows", "0"], "--batch-windows"),
    (["train", "mine", "--train", "{missing}", "--out", "{tmp}/hard.jsonl"], "{missing}: No such file"),
    (["train", "mine", "--train", "{tmp}/file", "--out", "{tmp}/file/hard.jsonl"],
     "{tmp}/file/hard.jsonl: cannot be written: {tmp}/file is a file, not a folder"),
    (["train", "valsets", "--train", "{tmp}/file", "--out", "{tmp}/v", "--questions", "0"], "--questions"),
    (["train", "rank-checkpoints", "--valsets", "{missing}", "--checkpoints", "default"], "{missing}"),
    (["train", "calibrate"], "--index and --questions"),
    (["train", "average", "default", "--out", "{tmp}/file/avg"], "{tmp}/file/avg: cannot be written"),
    (["sync", "{missing}", "--url", "http://127.0.0.1:9"], "{missing}"),
    (["sync", "{tmp}", "--url", "127.0.0.1:9"], "--url"),
    (["sync", "{tmp}", "--url", "http://127.0.0.1:9", "--source", " "], "--source names the documents this sync"),
    (["sync", "{tmp}", "--url", "http://[::1"], "--url 'http://[::1' is not a URL (Invalid port: ':1')"),
    (["sync", "{tmp}", "--url", "http://127.0.0.1:99999"], "--url 'http://127.0.0.1:99999' names port 99999"),
]


@pytest.mark.parametrize(("argv", "names"), FAILURES, ids=[" ".join(a[:2]) for a, _ in FAILURES])
def test_every_command_fails_as_argparse_does(tmp_path, capsys, argv, names):
    """A bad flag value, a missing or unusable file: the last line on stderr is ``spanseek COMMAND: error: ...``, the
    command's full name as argparse gives it, naming what was wrong; nothing on stdout; exit status 2. Runtime errors
    said only the command's first word (``spanseek index: error:`` for ``index build``, ``spanseek train:`` for every
    training job), unlike the usage errors of the same command."""
    (tmp_path / "file").write_text("")
    given = {"tmp": tmp_path, "missing": tmp_path / "missing"}
    status, out, err = failure([a.format(**given) for a in argv], capsys)
    command = " ".join(argv[:2] if argv[0] in ("corpus", "index", "train") else argv[:1])
    assert status == 2 and out == "" and err, (status, out, err)
    assert err[-1].startswith(f"spanseek {command}: error: ") and names.format(**given) in err[-1], err
    assert len(err) == 1 or err[0].startswith(f"usage: spanseek {command} "), err  # one line, or argparse's usage


# (argv, the flag that gave {bad}, the path that is no index or reader); {index} and {model} are a built index and its
# model, {train} a SQuAD file, {tmp} a test folder
WRONG_KIND = [
    (["index", "add", "--index", "{bad}", "--corpus", "{tmp}/c.jsonl"], "--index"),
    (["index", "upsert", "--index", "{bad}", "--corpus", "{tmp}/c.jsonl"], "--index"),
    (["index", "delete", "--index", "{bad}", "--ids", "a"], "--index"),
    (["index", "compact", "--index", "{bad}"], "--index"),
    (["index", "export", "--index", "{bad}", "--out", "{tmp}/e.jsonl"], "--index"),
    (["index", "snapshot", "--index", "{bad}", "--out", "{tmp}/snap"], "--index"),
    (["index", "add-lexical", "--index", "{bad}"], "--index"),
    (["index", "add-lexical", "{bad}"], "--index"),
    (["search", "--index", "{bad}", "q"], "--index"),
    (["search", "--index", "{index}", "--read", "--reader", "{bad}", "q"], "--reader"),
    (["eval", "--questions", "{train}", "--index", "{bad}"], "--index"),
    (["eval", "--questions", "{train}", "--index", "{index}", "--read", "--reader", "{bad}"], "--reader"),
    (["eval", "--questions", "{train}", "--corpus", "{bad}"], "--corpus"),
    (["serve", "--index", "{bad}"], "--index / SPANSEEK_INDEX"),
    (["serve", "--index", "{index}", "--model", "{model}", "--reader", "{bad}"], "--reader / SPANSEEK_READER"),
    (["train", "calibrate", "--index", "{bad}", "--questions", "{train}", "--model", "{model}"], "--index"),
    (["train", "mine", "--train", "{train}", "--out", "{tmp}/h.jsonl", "--miner", "model", "--index", "{bad}",
      "--model", "{model}"], "--index"),
    (["train", "qsft", "--train", "{train}", "--out", "{tmp}/run", "--model", "{model}", "--from-index", "{bad}"],
     "--from-index"),
    (["train", "filter", "--train", "{train}", "--out", "{tmp}/run", "--model", "{model}", "--from-index", "{bad}"],
     "--from-index"),
    (["train", "fit-reading", "--train", "{train}", "--out", "{tmp}/run", "--reader", "{bad}"], "--reader"),
    (["train", "fit-reading", "--train", "{train}", "--out", "{tmp}/run", "--reader", "default", "--index", "{bad}"],
     "--index"),
    (["train", "reader-length-bias", "--train", "{train}", "--out", "{tmp}/run", "--reader", "{bad}"], "--reader"),
    (["train", "reader", "--train", "{train}", "--out", "{tmp}/run", "--init", "{bad}"], "--init"),
]


@pytest.mark.parametrize("kind", ["file", "empty folder", "other folder"])
@pytest.mark.parametrize(("argv", "flag"), WRONG_KIND, ids=[" ".join(a[:2] + [f]) for a, f in WRONG_KIND])
def test_an_index_or_reader_of_the_wrong_kind_is_named_by_its_flag(tmp_path, capsys, tiny_index, tiny_model_dir,
                                                                   tiny_squad, argv, flag, kind):
    """A file, an empty folder or a folder of something else given as an index, a reader or eval's corpus: one line
    naming the flag with the path (``--index runs/: not an index directory ...``), as a missing one was named; a
    folder was named by its path alone (``runs/: not an index directory``), a reader as ``reader 'runs/'``, and the
    file (or folder) given to the training jobs' --index and --from-index too."""
    bad = tmp_path / ("bad.md" if flag == "--corpus" else "bad")  # (a JSONL file is a corpus)
    if kind == "file":
        bad.write_text(json.dumps({"id": "a", "title": "A", "paragraphs": ["In 1450 Gala built it."]}) + "\n")
    else:
        bad.mkdir()
        if kind == "other folder":
            (bad / "notes.txt").write_text("not an index, nor a reader\n")
    (tmp_path / "c.jsonl").write_text(json.dumps({"id": "b", "title": "B", "paragraphs": ["Gala came."]}) + "\n")
    given = {"bad": bad, "tmp": tmp_path, "index": tiny_index, "model": tiny_model_dir, "train": tiny_squad}
    status, out, err = failure([a.format(**given) for a in argv], capsys)
    assert status == 2 and out == "" and len(err) == 1, (status, out, err)
    assert f": error: {flag} {bad}" in err[0] and "Traceback" not in err[0], err
    assert not (tmp_path / "run").exists() and not (tmp_path / "snap").exists()


FACTORY_HELP = ("--factory takes 'auto' or a faiss factory string such as Flat, IVF256,SQ8 or OPQ32,IVF256,PQ32x4fs "
                "(docs/compressed-index.md)")
VALSETS = "give the --out directory of `spanseek train valsets`"
NO_INDEX = "not an index directory (no manifest.json and no unfinished build); build one with `spanseek index build`"
NO_MODEL = "not a spanseek model directory (no spanseek_config.json); train one with `spanseek train phrase`"
MODEL_FILE = ("a file, not a model; give a model directory (what `spanseek train phrase` writes, holding "
              "spanseek_config.json and the weights) or a bundled model's name (default)")
# (argv, the whole error line after `spanseek COMMAND: error: `, and what it said before); {tmp} holds a file `file`
# and a corpus `c.jsonl`, {missing} is not there
MESSAGES = [
    (["index", "build", "--corpus", "{tmp}/c.jsonl", "--out", "{tmp}/file/i"],
     "--out {tmp}/file/i cannot be made: {tmp}/file is a file, not a directory; choose another --out"),  # Not a directory
    (["index", "build", "--corpus", "{tmp}/c.jsonl", "--out", "{tmp}/i", "--factory", "Bogus"],
     f"faiss cannot build factory 'Bogus' for dim 384 (could not parse index string Bogus); {FACTORY_HELP}"),
    (["index", "build", "--corpus", "{tmp}/c.jsonl", "--out", "{tmp}/i", "--factory", "IVF64,Garbage"],  # faiss's C++
     "faiss cannot build factory 'IVF64,Garbage' for dim 384 (could not parse code description Garbage in "
     f"IVF64,Garbage); {FACTORY_HELP}"),
    (["train", "rank-checkpoints", "--valsets", "{missing}", "--checkpoints", "default"],  # {missing}/questions.json.gz
     f"--valsets {{missing}}: no such directory; {VALSETS}"),
    (["train", "rank-checkpoints", "--valsets", "{tmp}/file", "--checkpoints", "default"],  # [Errno 20] Not a directory
     f"--valsets {{tmp}}/file: a file; {VALSETS}"),
    (["train", "rank-checkpoints", "--valsets", "{tmp}", "--checkpoints", "default"],
     f"--valsets {{tmp}}: no questions.json.gz, hard.jsonl, gold.jsonl, random.jsonl, reference.jsonl in it; {VALSETS} "
     "(run it first)"),
    (["train", "rank-checkpoints", "--valsets", "{valsets}", "--checkpoints", "default", "{missing}"],  # after `default`
     "{missing}: not a spanseek model directory (there is no such directory) nor a bundled model (bundled: base, "
     "default, default-2026-11)"),
    (["train", "calibrate", "--index", "{missing}", "--questions", "{tmp}/file", "--model", "{tmp}/no-model"],  # model
     "--index {missing}: no such index directory (build one with `spanseek index build`)"),
    (["train", "calibrate", "--index", "{tmp}", "--questions", "{missing}", "--model", "{tmp}/no-model"],  # questions
     f"--index {{tmp}}: {NO_INDEX}"),
    (["train", "calibrate", "--from-examples", "{tmp}/file", "--questions", "{missing}", "--model", "{tmp}/no-model"],
     "--questions must be a file that exists, got {missing}"),
    (["train", "calibrate", "--from-examples", "{tmp}/file", "--questions", "{tmp}", "--model", "{tmp}/no-model"],
     "--questions must be a file that exists, got {tmp}"),  # the model
    (["train", "calibrate", "--index", "{tmp}/file", "--questions", "{tmp}/file", "--model", "{tmp}/no-model"],
     "--index {tmp}/file: a file, not an index directory (an index is the --out directory of `spanseek index build`)"),
    (["train", "calibrate", "--from-examples", "{tmp}", "--model", "{tmp}/no-model"],
     "--from-examples must be a file that exists, got {tmp}"),
]


@pytest.mark.parametrize(("argv", "error"), MESSAGES, ids=[" ".join(a[:2] + a[-2:]) for a, _ in MESSAGES])
def test_a_bad_path_or_factory_is_one_line_naming_the_first_wrong_argument(tmp_path, capsys, argv, error):
    """Each said something else before (the comments): an OS error on a file inside the path, faiss's C++ function
    and source line, or the model before the index given ahead of it."""
    (tmp_path / "file").write_text("")
    (tmp_path / "c.jsonl").write_text(json.dumps({"id": "a", "title": "A", "paragraphs": ["In 1450 Gala built it."]})
                                      + "\n")
    valsets = tmp_path / "valsets"
    valsets.mkdir()
    for name in ("questions.json.gz", "hard.jsonl", "gold.jsonl", "random.jsonl", "reference.jsonl"):
        (valsets / name).write_text("")
    given = {"tmp": tmp_path, "missing": tmp_path / "missing", "valsets": valsets}
    status, out, err = failure([a.format(**given) for a in argv], capsys)
    command = " ".join(argv[:2])
    assert (status, out, err) == (2, "", [f"spanseek {command}: error: {error.format(**given)}"])


# (argv, the whole error line after `spanseek COMMAND: error: `); {tmp} holds a file `file` and a corpus `c.jsonl`
WRONG_KINDS = [
    (["eval", "--questions", "{tmp}"], "--questions {tmp}: a directory, not a file"),
    (["search", "--index", "{tmp}", "--questions", "{tmp}"], "--questions {tmp}: a directory, not a file"),
    (["train", "phrase", "--train", "{tmp}", "--out", "{tmp}/run"], "--train {tmp}: a directory, not a file"),
    (["train", "mine", "--train", "{tmp}", "--out", "{tmp}/hard.jsonl"], "--train {tmp}: a directory, not a file"),
    (["eval", "--questions", "{tmp}/q.json", "--model", "{tmp}"], f"--model {{tmp}}: {NO_MODEL}"),
    (["eval", "--questions", "{tmp}/q.json", "--model", "{tmp}/file"], f"--model {{tmp}}/file: {MODEL_FILE}"),
    (["search", "--index", "{tmp}", "--model", "{tmp}", "q"], f"--index {{tmp}}: {NO_INDEX}"),  # (the first named)
    (["index", "build", "--corpus", "{tmp}/c.jsonl", "--model", "{tmp}/file", "--out", "{tmp}/i"],
     f"--model {{tmp}}/file: {MODEL_FILE}"),
    (["index", "add", "--index", "{tmp}", "--corpus", "{tmp}/c.jsonl", "--model", "{tmp}"], f"--model {{tmp}}: {NO_MODEL}"),
    (["corpus", "from-files", "{tmp}", "--out", "{tmp}/d.jsonl", "--tokenizer", "model", "--model", "{tmp}"],
     f"--model {{tmp}}: {NO_MODEL}"),
    (["train", "filter", "--train", "{tmp}/file", "--out", "{tmp}/f", "--model", "{tmp}"], f"--model {{tmp}}: {NO_MODEL}"),
    (["train", "phrase", "--train", "{tmp}/file", "--out", "{tmp}/run", "--init-from", "{tmp}"],
     f"--init-from {{tmp}}: {NO_MODEL}"),
    (["train", "mine", "--train", "{tmp}/file", "--out", "{tmp}/h.jsonl", "--miner", "model", "--model", "{tmp}"],
     f"--model {{tmp}}: {NO_MODEL}"),
    (["train", "calibrate", "--index", "{tmp}", "--questions", "{tmp}/file", "--model", "{tmp}/file"],
     f"--index {{tmp}}: {NO_INDEX}"),
]


@pytest.mark.parametrize(("argv", "error"), WRONG_KINDS, ids=[" ".join(a[:4]) for a, _ in WRONG_KINDS])
def test_a_file_or_model_flag_given_a_path_of_the_wrong_kind_is_named_by_its_flag(tmp_path, capsys, argv, error):
    """A directory given for a file (``--questions runs/``), or a file or a folder that holds no model given for a
    model (``--model weights.safetensors``), was said with the path alone (``runs: a directory, not a file``), and
    the user was left to find which of the command's paths it was. The flag that gave it now leads the line, as a
    missing file's does."""
    (tmp_path / "file").write_text("")
    (tmp_path / "c.jsonl").write_text(json.dumps({"id": "a", "title": "A", "paragraphs": ["In 1450 Gala built it."]})
                                      + "\n")
    qas = [{"id": "1", "question": "Who built it?", "answers": [{"text": "Gala", "answer_start": 8}]}]
    (tmp_path / "q.json").write_text(json.dumps({"data": [{"title": "A", "paragraphs": [
        {"context": "In 1450 Gala built it.", "qas": qas}]}]}))
    given = {"tmp": tmp_path}
    status, out, err = failure([a.format(**given) for a in argv], capsys)
    command = " ".join(argv[:2] if argv[0] in ("corpus", "index", "train") else argv[:1])
    assert (status, out, err) == (2, "", [f"spanseek {command}: error: {error.format(**given)}"])


@pytest.mark.parametrize("job", ["phrase", "reader"])
def test_a_bad_training_file_is_named_before_the_precision_is_picked(tmp_path, capsys, monkeypatch, job):
    """`train phrase --train BAD` logged `bf16 autocast on this CPU: ... (precision=auto picks bf16)` (a probe of
    seconds) before it named the file; the file is read first."""
    import importlib

    module = importlib.import_module(f"spanseek.trainer.{'train' if job == 'phrase' else job}")

    def picked(*args):
        raise AssertionError("the precision was picked before the training file was read")

    monkeypatch.setattr(module, "pick_precision", picked)
    (tmp_path / "bad.json").write_text('{"x": 1}')
    status, out, err = failure(["train", job, "--train", str(tmp_path / "bad.json"), "--out", str(tmp_path / "run")],
                               capsys)
    assert status == 2 and len(err) == 1 and "bad.json: not SQuAD format" in err[0], err


def run_python(code: str) -> str:
    """What ``code`` prints, run in a fresh interpreter (what it imported is then its own)."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k not in ("TRANSFORMERS_VERBOSITY", "HF_HUB_DISABLE_PROGRESS_BARS")}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_a_command_that_loads_no_model_does_not_import_transformers(tmp_path):
    (tmp_path / "a.txt").write_text("hello\n")
    out = run_python(
        "import sys\nfrom spanseek.cli import main\n"
        f"main(['sync', {str(tmp_path)!r}, '--url', 'http://127.0.0.1:9', '--dry-run'])\n"
        "print('transformers' in sys.modules, 'torch' in sys.modules)"
    )
    assert out.splitlines()[-1] == "False False"  # (torch: 1.5 s of CPU a sync, which reads no model, would spend)


def test_transformers_loaded_during_a_command_reports_only_errors_and_draws_no_bars_then_as_before():
    out = run_python(
        "from spanseek.cli import quiet_transformers\n"
        "with quiet_transformers():\n"
        "    from transformers.utils import logging as l\n"
        "    print(l.get_verbosity() == l.ERROR, l.is_progress_bar_enabled())\n"
        "print(l.get_verbosity() == l.WARNING, l.is_progress_bar_enabled())"
    )
    assert out == "True False\nTrue True"


def test_a_command_run_in_process_leaves_the_environment_and_progress_bars_as_they_were(tmp_path):
    """A command run in a program's own process (a test, a notebook) left TRANSFORMERS_VERBOSITY and
    HF_HUB_DISABLE_PROGRESS_BARS in its environment, and huggingface_hub, imported during it, read the latter: every
    later ``enable_progress_bars`` in that process warned "Cannot enable progress bars" (94 times in a test run)."""
    out = run_python(
        "import os, warnings\n"
        "os.environ['TRANSFORMERS_VERBOSITY'] = 'info'\n"
        "from spanseek.cli import main\n"
        f"main(['search', '--index', {str(tmp_path / 'none')!r}, 'q'])\n"
        "with warnings.catch_warnings(record=True) as caught:\n"
        "    warnings.simplefilter('always')\n"
        "    from transformers.utils import logging as l\n"
        "    l.disable_progress_bar()\n"
        "    l.enable_progress_bar()\n"
        "print(os.environ['TRANSFORMERS_VERBOSITY'], os.environ.get('HF_HUB_DISABLE_PROGRESS_BARS'))\n"
        "print([str(w.message) for w in caught], l.is_progress_bar_enabled())"
    )
    assert out.splitlines()[-2:] == ["info None", "[] True"]


def test_a_command_run_in_process_leaves_the_warning_filters_as_they_were(tmp_path, capsys):
    """The command's filter of transformers' FutureWarnings stayed in the caller's warning filters after it."""
    import warnings

    def transformers_filters() -> list[tuple]:  # (what imports add to the filters, numpy's say, is not the command's)
        return [f for f in warnings.filters if f[2] is FutureWarning and getattr(f[3], "pattern", None) == "transformers"]

    before = transformers_filters()
    assert main(["search", "--index", str(tmp_path / "none"), "q"]) == 2
    assert transformers_filters() == before


def test_commands_run_in_process_leave_the_log_handlers_and_faiss_s_logger_as_they_were(tmp_path, capsys):
    """Each command added a filter (bm25s's chatter) to every handler of the root logger and set faiss.loader's
    level, for good: a program that ran three commands had three filters on its handlers after them."""
    import logging

    root, faiss_loader = logging.getLogger(), logging.getLogger("faiss.loader")
    before = ({handler: list(handler.filters) for handler in root.handlers}, faiss_loader.level)
    for _ in range(3):
        assert main(["search", "--index", str(tmp_path / "none"), "q"]) == 2
    assert ({handler: list(handler.filters) for handler in root.handlers if handler in before[0]},
            faiss_loader.level) == before


def test_commands_that_overlap_in_threads_stay_quiet_until_the_last_ends_and_leave_nothing_behind():
    """The settings are the process's: a command run in a thread that ended while another (longer) one still ran put
    back the progress bars under the other, and the other, ending last, put back the quieting it had found: the
    environment variables and the warning filter stayed for the rest of the process."""
    out = run_python(
        "import os, threading, warnings\n"
        "from huggingface_hub import utils as hub_utils\n"
        "from spanseek.cli import quiet_transformers\n"
        "filters = list(warnings.filters)\n"
        "first_in, first_out, second_in = threading.Event(), threading.Event(), threading.Event()\n"
        "def short():\n"
        "    with quiet_transformers():\n"
        "        first_in.set(); second_in.wait()\n"
        "    first_out.set()\n"
        "def long():\n"
        "    first_in.wait()\n"
        "    with quiet_transformers():\n"
        "        second_in.set(); first_out.wait()\n"
        "        print(hub_utils.are_progress_bars_disabled(), os.environ.get('HF_HUB_DISABLE_PROGRESS_BARS'))\n"
        "threads = [threading.Thread(target=short), threading.Thread(target=long)]\n"
        "for t in threads: t.start()\n"
        "for t in threads: t.join()\n"
        "print(hub_utils.are_progress_bars_disabled(), os.environ.get('HF_HUB_DISABLE_PROGRESS_BARS'),\n"
        "      os.environ.get('TRANSFORMERS_VERBOSITY'), warnings.filters == filters)"
    )
    assert out.splitlines() == ["True 1", "False None None True"]


@pytest.mark.parametrize("short", ["spanseek.cli", "spanseek.core.model"])
def test_a_command_and_a_model_loading_in_threads_share_one_quieting(short):
    """A command (``spanseek.cli``) and a model's loading in a library call (``spanseek.core.model``) each saved and
    put back transformers' settings on their own: the one that ended first un-quietened the other."""
    long = "spanseek.core.model" if short == "spanseek.cli" else "spanseek.cli"
    out = run_python(
        "import threading, warnings\n"
        "from transformers.utils import logging as l\n"
        f"from {short} import quiet_transformers as first\n"
        f"from {long} import quiet_transformers as second\n"
        "filters = list(warnings.filters)\n"
        "first_in, first_out, second_in = threading.Event(), threading.Event(), threading.Event()\n"
        "def short():\n"
        "    with first():\n"
        "        first_in.set(); second_in.wait()\n"
        "    first_out.set()\n"
        "def long():\n"
        "    first_in.wait()\n"
        "    with second():\n"
        "        second_in.set(); first_out.wait()\n"
        "        print(l.get_verbosity() == l.ERROR, l.is_progress_bar_enabled())\n"
        "threads = [threading.Thread(target=short), threading.Thread(target=long)]\n"
        "for t in threads: t.start()\n"
        "for t in threads: t.join()\n"
        "print(l.get_verbosity() == l.WARNING, l.is_progress_bar_enabled(), warnings.filters == filters)"
    )
    assert out.splitlines() == ["True False", "True True True"]


def test_a_command_that_ends_first_leaves_transformers_bars_off_under_a_load_that_imported_it():
    """transformers imported during a command (by a model's loading in another thread) starts with the hub's bars,
    which the command had turned off; the command, ending first, turned transformers' bars on under the load still
    running (the last to end puts them back)."""
    out = run_python(
        "import threading\n"
        "from spanseek.cli import quiet_transformers as command\n"
        "from spanseek.core.model import quiet_transformers as load\n"
        "command_in, command_out, load_in = threading.Event(), threading.Event(), threading.Event()\n"
        "def run_command():\n"
        "    with command():\n"
        "        command_in.set(); load_in.wait()\n"
        "    command_out.set()\n"
        "def run_load():\n"
        "    command_in.wait()\n"
        "    from transformers.utils import logging as l\n"
        "    with load():\n"
        "        load_in.set(); command_out.wait()\n"
        "        print(l.get_verbosity() == l.ERROR, l.is_progress_bar_enabled())\n"
        "    print(l.get_verbosity() == l.WARNING, l.is_progress_bar_enabled())\n"
        "threads = [threading.Thread(target=run_command), threading.Thread(target=run_load)]\n"
        "for t in threads: t.start()\n"
        "for t in threads: t.join()"
    )
    assert out.splitlines() == ["True False", "True True"]


def test_a_command_inside_a_command_leaves_the_outer_one_quiet():
    out = run_python(
        "import os\n"
        "from huggingface_hub import utils as hub_utils\n"
        "from spanseek.cli import quiet_transformers\n"
        "with quiet_transformers():\n"
        "    with quiet_transformers():\n"
        "        pass\n"
        "    print(hub_utils.are_progress_bars_disabled(), os.environ.get('TRANSFORMERS_VERBOSITY'))\n"
        "print(hub_utils.are_progress_bars_disabled(), os.environ.get('TRANSFORMERS_VERBOSITY'))"
    )
    assert out.splitlines() == ["True error", "False None"]


def test_ctrl_c_under_a_progress_bar_ends_with_the_one_line(tmp_path, capsys, monkeypatch):
    """Ctrl-C in a command whose progress bar was open wrote "interrupted" onto the bar's line, and the bar was drawn
    again below it when it was collected: the bar is closed first, and the one line is the last."""
    from tqdm.auto import tqdm

    from spanseek.indexer import cli as indexer_cli

    def converting(args):
        bar = tqdm(total=3, desc="convert")
        bar.update()
        raise KeyboardInterrupt

    monkeypatch.setattr(indexer_cli, "_from_squad", converting)
    assert main(["corpus", "from-squad", str(tmp_path / "in.json"), "--out", str(tmp_path / "out.jsonl")]) == 130
    err = capsys.readouterr().err
    assert "convert:  33%" in err
    assert err.endswith("\nspanseek corpus from-squad: interrupted\n")


def test_ctrl_c_is_the_last_line_though_a_library_logs_as_python_exits(tmp_path):
    """torch, interrupted while it was being imported, logs its cache statistics at INFO as Python exits: three lines
    after "interrupted". After Ctrl-C only warnings and errors are logged."""
    script = (
        "import atexit, logging, sys\n"
        "from spanseek import cli\n"
        "from spanseek.indexer import cli as indexer_cli\n"
        "def converting(args):\n"
        "    atexit.register(lambda: logging.getLogger('lib').info('cache stats'))\n"
        "    raise KeyboardInterrupt\n"
        "indexer_cli._from_squad = converting\n"
        f"sys.exit(cli.main(['corpus', 'from-squad', 'in.json', '--out', {str(tmp_path / 'out.jsonl')!r}]))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stderr) == (130, "spanseek corpus from-squad: interrupted\n")


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full (Linux)")
@pytest.mark.parametrize("lines", [1, 100_000])  # written at the end, or while the command runs
def test_output_that_cannot_be_written_names_standard_output(tmp_path, lines):
    """``spanseek search ... > /dev/full`` ended with "[Errno 28] No space left on device", naming no file; it now names
    standard output, in one line, whether the output failed as the command wrote it or at its end."""
    script = (
        "import sys\n"
        "from spanseek import cli\n"
        "from spanseek.indexer import cli as indexer_cli\n"
        f"indexer_cli._from_squad = lambda args: [print('hit') for _ in range({lines})] and 0\n"
        f"sys.exit(cli.main(['corpus', 'from-squad', 'in.json', '--out', {str(tmp_path / 'out.jsonl')!r}]))\n"
    )
    with open("/dev/full", "w") as full:
        done = subprocess.run([sys.executable, "-c", script], stdout=full, stderr=subprocess.PIPE, text=True,
                              timeout=120)
    assert (done.returncode, done.stderr) == (
        2, "spanseek corpus from-squad: error: standard output: No space left on device\n")


def test_a_second_ctrl_c_as_python_exits_leaves_the_one_line_and_status_130(tmp_path):
    """A second Ctrl-C after "interrupted", while Python exits (a library's finaliser running), ended the command with
    a KeyboardInterrupt traceback and status -2. The process's own command ignores Ctrl-C once it said it stopped."""
    script = (
        "import atexit, os, signal, sys, time\n"
        "signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a terminal (a background job ignores it)\n"
        "from spanseek import cli\n"
        "from spanseek.indexer import cli as indexer_cli\n"
        "def finaliser():\n"
        "    os.kill(os.getpid(), signal.SIGINT)\n"
        "    time.sleep(0.2)\n"
        "def converting(args):\n"
        "    atexit.register(finaliser)\n"
        "    raise KeyboardInterrupt\n"
        "indexer_cli._from_squad = converting\n"
        f"sys.argv = ['spanseek', 'corpus', 'from-squad', 'in.json', '--out', {str(tmp_path / 'out.jsonl')!r}]\n"
        "sys.exit(cli.main())\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stderr) == (130, "spanseek corpus from-squad: interrupted\n")


def test_serve_stopped_by_sigterm_returns_0_and_the_caller_keeps_its_handler(tiny_index, tiny_model_dir, monkeypatch,
                                                                            capsys):
    """uvicorn stops gracefully on SIGTERM, puts back the SIGTERM handler it found and raises the signal again: the
    process died of it (status 143), where the README promises 0 as after Ctrl-C. Here uvicorn's own signal capture
    runs over a server that is told SIGTERM at once; the handler the caller had is back after."""
    import signal
    import socket

    import uvicorn

    def run(self, sockets=None):
        with self.capture_signals():
            self.handle_exit(signal.SIGTERM, None)  # what uvicorn's handler does when SIGTERM arrives

    def callers(signum, frame):
        raise AssertionError("SIGTERM reached the caller's handler: spanseek serve would have died of it")

    monkeypatch.setattr(uvicorn.Server, "run", run)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    previous = signal.signal(signal.SIGTERM, callers)
    try:
        assert main(["serve", "--index", str(tiny_index), "--model", str(tiny_model_dir), "--port", str(port),
                     "--device", "cpu"]) == 0
        assert signal.getsignal(signal.SIGTERM) is callers
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert capsys.readouterr().err.splitlines()[-1].endswith("spanseek.service [-] stopped")



def test_serve_run_in_a_thread_serves_and_leaves_signals_to_the_main_thread(tiny_index, tiny_model_dir, monkeypatch,
                                                                           capsys):
    """Python takes signal handlers from the main thread only: serve setting its SIGTERM handler from another thread
    (a program that runs the service beside its own work, as uvicorn allows) failed with "signal only works in main
    thread" (status 2) before serving."""
    import signal
    import socket
    import threading

    import uvicorn

    served = []
    monkeypatch.setattr(uvicorn.Server, "run", lambda self, sockets=None: served.append(True))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    before = signal.getsignal(signal.SIGTERM)
    status = []
    thread = threading.Thread(target=lambda: status.append(main(
        ["serve", "--index", str(tiny_index), "--model", str(tiny_model_dir), "--port", str(port), "--device", "cpu"])))
    thread.start()
    thread.join()
    assert (status, served) == ([0], [True]), capsys.readouterr().err
    assert signal.getsignal(signal.SIGTERM) is before


def test_python_dash_m_spanseek_runs_the_command():
    """`python -m spanseek` said "No module named spanseek.__main__"; it is the `spanseek` command, its usage and
    its errors named as the command's."""
    proc = subprocess.run([sys.executable, "-m", "spanseek", "serach"], capture_output=True, text=True, timeout=120,
                          check=False)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith("spanseek: error: "), proc.stderr
    assert "did you mean 'search'?" in proc.stderr, proc.stderr


@pytest.mark.parametrize("kind", ["file", "folder"])
def test_serve_names_its_model_setting_given_a_path_that_holds_no_model(tiny_index, tmp_path, capsys, kind):
    """`serve --model weights.safetensors` said "weights.safetensors: a file, not a model" with neither the flag nor
    the variable that gave it; the line now names both, as the index's does."""
    given = tmp_path / "given"
    given.mkdir() if kind == "folder" else given.write_text("")
    status, out, err = failure(["serve", "--index", str(tiny_index), "--model", str(given)], capsys)
    said = MODEL_FILE if kind == "file" else NO_MODEL
    assert (status, out, err) == (2, "", [f"spanseek serve: error: --model / SPANSEEK_MODEL {given}: {said}"])



@pytest.mark.parametrize("argv", [
    ["index", "build", "--corpus", "{tmp}", "--out", "{tmp}/i"],
    ["index", "add", "--index", "{index}", "--corpus", "{tmp}"],
    ["index", "upsert", "--index", "{index}", "--corpus", "{tmp}"],
])
def test_a_folder_given_as_the_corpus_is_named_by_its_flag(tmp_path, tiny_index, capsys, argv):
    """A folder given as the corpus was said with the path alone (``runs is a directory, not a JSONL corpus``); the
    flag now leads the line, as it does for a missing corpus or an index given as the corpus."""
    from spanseek.indexer.ingest import corpus_problem

    status, out, err = failure([a.format(tmp=tmp_path, index=tiny_index) for a in argv], capsys)
    assert (status, out, err) == (2, "", [f"spanseek {' '.join(argv[:2])}: error: --corpus {corpus_problem(tmp_path)}"])


def test_sync_exits_1_when_the_server_cannot_be_reached_and_2_for_a_usage_error(tmp_path, capsys):
    """A server that could not be reached (or refused the run) was status 2, the status of a usage error, though the
    command was right and the run failed, as a refused file's run (status 1) does."""
    import socket

    (tmp_path / "a.txt").write_text("In 1450 Gala built the harbour bridge.\n")
    with socket.socket() as s:  # a port no server listens on
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}"
    status, out, err = failure(["sync", str(tmp_path), "--url", url, "--api-key", "key", "--jobs", "1"], capsys)
    assert status == 1 and out == "" and err[-1].startswith(f"spanseek sync: error: {url}: "), err
    status, out, err = failure(["sync", str(tmp_path), "--url", url, "--api-key", "key", "--jobs", "0"], capsys)
    assert status == 2 and err[-1].startswith("spanseek sync: error: --jobs"), err


def test_python_dash_m_spanseek_cli_gives_sync_s_exit_status(tmp_path, monkeypatch, capsys):
    """Run as `python -m spanseek.cli`, a sync whose server could not be reached exited 2, not 1: the module ran as
    __main__, a second copy of it, whose CommandFailed was not the class sync raised."""
    import runpy
    import socket

    (tmp_path / "a.txt").write_text("In 1450 Gala built the harbour bridge.\n")
    with socket.socket() as s:  # a port no server listens on
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}"
    monkeypatch.setattr(sys, "argv", ["spanseek", "sync", str(tmp_path), "--url", url, "--api-key", "key", "--jobs", "1"])
    with pytest.warns(RuntimeWarning, match="found in sys.modules"), pytest.raises(SystemExit) as stop:
        runpy.run_module("spanseek.cli", run_name="__main__")  # as `python -m spanseek.cli` runs it
    err = capsys.readouterr().err
    assert stop.value.code == 1, err
    assert err.strip().splitlines()[-1].startswith(f"spanseek sync: error: {url}: "), err


@pytest.mark.parametrize("command", [["corpus", "from-files"], ["sync"]])
def test_every_command_that_reads_files_says_which_passage_fields_each_format_gives(capsys, command):
    """`corpus from-files --help` and `sync --help` name each format's passage fields (``PASSAGE_FIELDS``: every format
    `from-files` reads has an entry), and docs/indexing.md's table lists the same fields for the same formats; the
    help said nothing of a PDF's ``section`` and ``page_end`` nor of a deck's or an e-book's ``section``, and `sync`'s
    nothing at all."""
    from pathlib import Path

    from spanseek.indexer.ingest import FORMATS
    from spanseek.indexer.options import PASSAGE_FIELDS, PASSAGE_FIELDS_HELP

    assert sorted(f for formats, _, _ in PASSAGE_FIELDS for f in formats) == sorted(set(FORMATS.values()))
    with pytest.raises(SystemExit):
        main([*command, "--help"])
    shown = " ".join(capsys.readouterr().out.split())
    assert " ".join(PASSAGE_FIELDS_HELP.split()) in shown
    docs = (Path(__file__).parents[1] / "docs" / "indexing.md").read_text(encoding="utf-8")
    table = docs[docs.index("| format | passage fields |"):].split("\n\n")[0].splitlines()[2:]
    rows = {}
    for row in table:
        formats_cell, fields_cell = row.strip("|").split("|")
        formats = tuple(FORMATS[s] for s in formats_cell.split("`")[1::2])
        rows[formats] = tuple(f for f in fields_cell.split("`")[1::2] if " " not in f)  # (not an example value)
    assert rows == {formats: fields for formats, fields, _ in PASSAGE_FIELDS}
    for formats, fields, _ in PASSAGE_FIELDS:  # and the help names each field
        assert all(f in shown for f in fields), (formats, fields)


def test_version_prints_the_version(capsys):
    """`spanseek --version`, what a new user tries first, was refused as a missing command (status 2)."""
    import spanseek

    with pytest.raises(SystemExit) as stopped:
        main(["--version"])
    assert stopped.value.code == 0 and capsys.readouterr().out == f"spanseek {spanseek.__version__}\n"
