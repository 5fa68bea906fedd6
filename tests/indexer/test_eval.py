"""Evaluation end to end (indexer.evaluate.run_eval) and the `spanseek search` / `spanseek eval` commands on tiny
data: the metrics file has exactly the agreed keys; search prints one JSON line per question; errors exit 2
with a message.

    .venv/bin/python -m pytest -q tests/indexer/test_eval.py
"""

from __future__ import annotations

import json

import pytest

from spanseek.cli import main
from spanseek.core.io import load_squad, squad_questions
from spanseek.core.model import PhraseModel
from spanseek.indexer.build import BuildOptions
from spanseek.indexer.evaluate import run_eval

KEYS = {
    "n_questions": None,
    "mode": None,
    "phrase": {"em@1", "f1@1", "em@10", "merged_em@1"},
    "passage": {"acc@1", "acc@5", "acc@20", "mrr@20", "p@20"},
    "doc": {"acc@1", "acc@5"},
    "rc": {"em", "f1"},
    "ci95": None,
    "read": None,
    "seconds": None,
    "questions_per_second": None,
}


def check_metrics(m: dict, n: int, rc: bool) -> None:
    assert set(m) - {"model", "reader"} == set(KEYS) - (set() if rc else {"rc"})
    assert m["n_questions"] == n
    for group, names in KEYS.items():
        if names and group in m:
            assert set(m[group]) == names
            assert all(0.0 <= v <= 100.0 and round(v, 1) == v for v in m[group].values())
    headline = {"phrase.em@1": m["phrase"]["em@1"], "passage.acc@5": m["passage"]["acc@5"]}
    if rc:
        headline["rc.em"] = m["rc"]["em"]
    assert set(m["ci95"]) == {"by", "groups"} | set(headline)
    for name, value in headline.items():  # each interval holds its point estimate
        lo, hi = m["ci95"][name]
        assert lo <= value <= hi, (name, lo, value, hi)


def test_run_eval_over_the_question_files_paragraphs(tmp_path, tiny_squad, tiny_model_dir):
    out = tmp_path / "metrics.json"
    m = run_eval(tiny_squad, tiny_model_dir, reading_comprehension=True, limit=10, out=out, progress=False,
                 build=BuildOptions(progress=False, precision="fp32"))
    check_metrics(m, 10, rc=True)
    assert json.loads(out.read_text()) == m
    # every question's gold document is one of the 4 articles, so the top 5 documents always hold it
    assert m["doc"]["acc@5"] == 100.0
    assert m["phrase"]["em@10"] >= m["phrase"]["em@1"] and m["passage"]["acc@20"] >= m["passage"]["acc@5"] >= m["passage"]["acc@1"]


def test_an_interrupted_temporary_index_is_not_offered_for_resuming(tmp_path, tiny_squad, tiny_model_dir,
                                                                     monkeypatch):
    """Stopped while it indexes the question file's paragraphs, eval says the temporary index goes with it: the
    build's "the same command resumes the build in DIR" would name a folder that is removed."""
    import spanseek.indexer.build as build

    def stop(*args, **kwargs):
        raise KeyboardInterrupt("SIGTERM")

    monkeypatch.setattr(build, "_build_locked", stop)
    with pytest.raises(KeyboardInterrupt) as stopped:
        run_eval(tiny_squad, tiny_model_dir, limit=2, progress=False)
    assert "resumes the build in" not in str(stopped.value)
    assert str(stopped.value).startswith("stopped by SIGTERM; the temporary index of the questions' passages is "
                                         "removed")


def test_cli_search_prints_json_lines(tiny_index, tiny_model_dir, capsys):
    questions = ["When did Alba build the castle?", "Who built the bridge?"]
    for unit in ("phrase", "passage", "doc"):
        args = ["search", "--index", str(tiny_index), "--model", str(tiny_model_dir), "--unit", unit,
                "--top-k", "3", "--device", "cpu", *questions]
        assert main(args) == 0
        lines = capsys.readouterr().out.splitlines()
        assert len(lines) == 2
        for q, line in zip(questions, lines, strict=True):
            rec = json.loads(line)
            assert rec["query"] == q and rec["unit"] == unit and len(rec["hits"]) == 3
            for h in rec["hits"]:
                assert set(h) == {"text", "score", "start", "end", "passage_id", "paragraph", "passage", "doc_id",
                                  "title", "meta", "dense", "lexical", "confidence", "read"}
                assert h["read"] is None  # read only with --read
                assert h["passage"][h["start"] : h["end"]] == h["text"]
            if unit != "phrase":
                key = "passage_id" if unit == "passage" else "doc_id"
                assert len({h[key] for h in rec["hits"]}) == 3


def test_cli_search_reads_questions_from_stdin(tiny_index, tiny_model_dir, capsys, monkeypatch):
    import io

    monkeypatch.setattr("sys.stdin", io.StringIO("Who built the bridge?\n\nWhere is the river?\n"))
    assert main(["search", "--index", str(tiny_index), "--model", str(tiny_model_dir), "--top-k", "1"]) == 0
    assert [json.loads(x)["query"] for x in capsys.readouterr().out.splitlines()] == ["Who built the bridge?", "Where is the river?"]



def test_cli_search_answers_blank_questions_with_no_hits(tiny_index, tiny_model_dir, capsys):
    """As the service does: a blank argument (spaces, a zero-width space) gets no hits; it got the index's best."""
    argv = ["search", "--index", str(tiny_index), "--model", str(tiny_model_dir), "--top-k", "2"]
    assert main([*argv, "", "Who built the bridge?", "   ", "\u200b"]) == 0
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert [x["query"] for x in lines] == ["", "Who built the bridge?", "   ", "\u200b"]
    assert [len(x["hits"]) for x in lines] == [0, 2, 0, 0]
    assert main([*argv, "  "]) == 0 and json.loads(capsys.readouterr().out)["hits"] == []

def test_cli_eval_with_an_index(tmp_path, tiny_squad, tiny_model_dir, capsys):
    corpus, index, out = tmp_path / "corpus.jsonl", tmp_path / "index", tmp_path / "m.json"
    assert main(["corpus", "from-squad", str(tiny_squad), "--out", str(corpus)]) == 0
    assert main(["index", "build", "--corpus", str(corpus), "--model", str(tiny_model_dir), "--out", str(index),
                 "--quiet", "--device", "cpu"]) == 0
    capsys.readouterr()
    assert main(["eval", "--questions", str(tiny_squad), "--model", str(tiny_model_dir), "--index", str(index),
                 "--reading-comprehension", "--limit", "6", "--out", str(out), "--quiet"]) == 0
    printed = json.loads(capsys.readouterr().out)
    check_metrics(printed, 6, rc=True)
    assert json.loads(out.read_text()) == printed
    assert printed["model"] == str(tiny_model_dir) and "reader" not in printed  # what was measured


def test_cli_search_merges_answers(tiny_index, tiny_model_dir, capsys):
    from spanseek.core.metrics import normalize_answer

    args = ["search", "--index", str(tiny_index), "--model", str(tiny_model_dir), "--top-k", "8", "--device", "cpu"]
    assert main([*args, "--merge-answers", "Who built the bridge?"]) == 0
    hits = json.loads(capsys.readouterr().out)["hits"]
    texts = [normalize_answer(h["text"]) for h in hits]
    assert len(hits) == 8 and len(set(texts)) == 8  # one hit per answer string


@pytest.mark.parametrize("decode", ["answer", "span"])
def test_cli_eval_passes_rc_decode(tmp_path, tiny_squad, tiny_model_dir, monkeypatch, decode):
    import spanseek.indexer.evaluate

    seen = []
    real = spanseek.indexer.evaluate.evaluate
    monkeypatch.setattr(spanseek.indexer.evaluate, "evaluate", lambda *a, **k: seen.append(k["rc_decode"]) or real(*a, **k))
    argv = ["eval", "--questions", str(tiny_squad), "--model", str(tiny_model_dir), "--reading-comprehension",
            "--limit", "2", "--quiet", "--precision", "fp32"] + (["--rc-decode", decode] if decode == "span" else [])
    assert main(argv) == 0
    assert seen == [decode]  # the default is answer-string decoding


def test_eval_refuses_questions_whose_passages_are_not_indexed(tiny_squad, tiny_index, tiny_model_dir, capsys):
    # the tiny index holds another corpus: reading comprehension cannot find the gold passages
    assert main(["eval", "--questions", str(tiny_squad), "--model", str(tiny_model_dir), "--index", str(tiny_index),
                 "--reading-comprehension", "--quiet"]) == 2
    assert "gold passage is not in the index" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["search", "--index", "{tmp}/nowhere", "--model", "{model}", "q"], "no such index directory"),
        (["search", "--index", "{tmp}/partial", "--model", "{model}", "q"], "again to resume it"),
        (["search", "--index", "{tmp}/partial/shards", "--model", "{model}", "q"], "not an index directory"),
        (["search", "--index", "{index}", "--model", "{other}", "q"], "index was built with a different model"),
        (["search", "--index", "{index}", "--model", "{tmp}", "q"], "not a spanseek model directory"),
        (["eval", "--questions", "{tmp}/notsquad.json", "--model", "{model}", "--quiet"], "not SQuAD format"),
        (["eval", "--questions", "{tmp}/missing.json", "--model", "{model}", "--quiet"], "No such file"),
        (["search", "--index", "{index}", "--model", "{model}", "--unit", "doc", "--merge-answers", "q"],
         "--merge-answers applies to unit=phrase, not unit=doc"),
    ],
)
def test_cli_errors_exit_2_with_a_message(tmp_path, tiny_index, tiny_model_dir, tiny_config, capsys, argv, message):
    (tmp_path / "partial" / "shards").mkdir(parents=True)  # a build killed after its first shard
    (tmp_path / "notsquad.json").write_text(json.dumps({"questions": []}))
    other = PhraseModel(tiny_config).save(tmp_path / "other") if "{other}" in argv else None
    argv = [a.format(tmp=tmp_path, model=tiny_model_dir, index=tiny_index, other=other) for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"spanseek {argv[0]}: error: ") and message in err and "Traceback" not in err


def test_the_systems_refusals_are_one_line_errors(tmp_path, tiny_squad, tiny_model_dir, capsys):
    """An output path that is a directory, or on a file system that refuses it: `path: reason`, exit 2, no
    traceback; eval checks its --out before it runs."""
    (tmp_path / "file").write_text("")
    cases = [(["corpus", "from-squad", str(tiny_squad), "--out", str(tmp_path)], f"{tmp_path}: Is a directory"),
             (["corpus", "from-squad", str(tiny_squad), "--out", str(tmp_path / "file" / "c.jsonl")],
              f"{tmp_path / 'file' / 'c.jsonl'}: cannot be written: {tmp_path / 'file'} is a file, not a folder"),
             (["eval", "--questions", str(tiny_squad), "--model", str(tiny_model_dir), "--out", str(tmp_path),
               "--quiet"], "a directory; --out names the file to write eval's metrics to")]
    for argv, message in cases:
        assert main(argv) == 2
        err = capsys.readouterr().err
        command = " ".join(argv[:2] if argv[0] == "corpus" else argv[:1])
        assert err.startswith(f"spanseek {command}: error: ") and message in err and "Traceback" not in err, err
        assert len(err.strip().splitlines()) == 1


def test_cli_usage_errors_exit_2(tiny_index, capsys):
    with pytest.raises(SystemExit) as e:
        main(["search", "--index", str(tiny_index), "--unit", "sentence", "q"])
    assert e.value.code == 2 and "invalid choice: 'sentence'" in capsys.readouterr().err


def test_cli_eval_with_reading_as_a_new_user_runs_it(tmp_path, tiny_squad, tiny_model_dir, tiny_reader, capsys):
    """No --index: a temporary index of the file's paragraphs; --read reads the top passages, and with
    --reading-comprehension the RC figures are the reader's, read from each question's gold passage."""
    from spanseek.core.evaluate import sample_questions
    from spanseek.core.reader import PassageReader, reading_comprehension

    out = tmp_path / "m.json"
    assert main(["eval", "--questions", str(tiny_squad), "--model", str(tiny_model_dir), "--read", "--reader",
                 str(tiny_reader), "--reading-comprehension", "--limit", "6", "--out", str(out), "--quiet",
                 "--precision", "fp32"]) == 0
    printed = json.loads(capsys.readouterr().out)
    check_metrics(printed, 6, rc=True)
    assert printed["read"] is True
    questions = sample_questions(squad_questions(load_squad(tiny_squad)), 6)
    reader_rc = reading_comprehension(PassageReader.load(tiny_reader), questions)
    assert printed["rc"]["em"] == pytest.approx(reader_rc["em"], abs=0.05)  # eval rounds to one decimal
    assert printed["rc"]["f1"] == pytest.approx(reader_rc["f1"], abs=0.05)


def test_cli_search_prints_answers_without_start_up_chatter(tiny_index, tiny_model_dir):
    """`spanseek search` is a one-shot query: its stderr holds no INFO lines (faiss's, the precision or runtime chosen;
    `-v` shows them, and everything else)."""
    import subprocess
    import sys

    def start(*flags: str) -> subprocess.Popen:
        code = ("import sys; from spanseek.cli import main; "
                f"sys.exit(main([*{list(flags)!r}, 'search', '--index', {str(tiny_index)!r}, '--model', "
                f"{str(tiny_model_dir)!r}, '--top-k', '1', 'Who built the bridge?']))")
        return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, env={**__import__("os").environ, "HF_HUB_OFFLINE": "1"})

    def stderr(run: subprocess.Popen) -> str:
        stdout, err = run.communicate(timeout=300)
        assert run.returncode == 0, err
        assert json.loads(stdout)["query"] == "Who built the bridge?"
        return err

    quiet, verbose = start(), start("-v")  # side by side: each is mostly the start-up of a process
    assert "INFO" not in stderr(quiet)
    assert "INFO" in stderr(verbose)


@pytest.mark.parametrize("read", [False, True])
def test_cli_search_gives_a_question_the_same_hits_alone_as_among_twenty(tiny_index, tiny_model_dir, tiny_reader,
                                                                          monkeypatch, capsys, read):
    """`spanseek search` used fp32 for up to 8 questions and ``auto`` for more: where ``auto`` is bf16 (here forced,
    as on an AMD EPYC with AVX-512 bf16), a question's read hits came from bf16 passes among 20 questions (the
    reader's passes split by a start-up timing, here one that found torch faster) and fp32 ones alone. Now one
    precision for any number of questions, and every pass on ONNX Runtime in fp32: the same hits, and scores within
    the last bits (a scan of one to four questions sums the products otherwise than a larger batch's: 1e-4 at most,
    where bf16 and fp32 passes differed by 2e-3)."""
    from spanseek.core import encoding, runtime

    monkeypatch.setattr(encoding, "cpu_runs_bf16_faster", lambda: True)
    monkeypatch.setattr(runtime, "faster_up_to", lambda sizes, a, b: 0, raising=False)  # a probe that picks torch
    argv = ["search", "--index", str(tiny_index), "--model", str(tiny_model_dir), "--top-k", "3", "--device", "cpu",
            *(["--read", "--reader", str(tiny_reader)] if read else [])]
    questions = [f"Who built the {w}?" for w in ("bridge", "river", "castle", "tower", "harbour")] * 4
    questions = [f"{q} {'and then ' * (i % 5)}" for i, q in enumerate(questions)]  # 20 of mixed lengths

    def hits(asked: list[str]) -> list[list[tuple]]:
        assert main([*argv, *asked]) == 0
        lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
        return [[(h["text"], h["score"], h.get("read") is not None) for h in x["hits"]] for x in lines]

    together = hits(questions)
    assert any(together) and all(any(r for *_, r in x) == read for x in together if x)
    for i in (0, 7, 19):
        (alone,) = hits([questions[i]])
        assert [(t, r) for t, _, r in alone] == [(t, r) for t, _, r in together[i]], i
        assert [s for _, s, _ in alone] == pytest.approx([s for _, s, _ in together[i]], abs=5e-4), i
