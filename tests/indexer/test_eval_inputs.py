"""`spanseek eval` on inputs found broken in a sweep: flags out of range and an --out under a file are refused before
any search, SQuAD v2's unanswerable questions are left out of the metrics (and counted), and --limit N takes N
questions that have an answer.

    .venv/bin/python -m pytest -q tests/indexer/test_eval_inputs.py
"""

from __future__ import annotations

import copy
import json
import shutil

import pytest

from spanseek.cli import main
from spanseek.core.evaluate import sample_questions
from spanseek.core.io import squad_questions
from spanseek.indexer.evaluate import run_eval
from tests.conftest import make_squad

KW = {"progress": False, "precision": "fp32"}


def _write(path, obj) -> None:
    path.write_text(json.dumps(obj), encoding="utf-8")


def _without_answers(squad: dict, every: int) -> tuple[dict, int]:
    """A copy of ``squad`` where every ``every``-th question has no answer (SQuAD v2's unanswerable), and how many."""
    v2 = copy.deepcopy(squad)
    qas = [qa for art in v2["data"] for para in art["paragraphs"] for qa in para["qas"]]
    for qa in qas[::every]:
        qa["answers"] = []
    return v2, len(qas[::every])


def test_eval_refuses_a_bad_limit_and_an_out_under_a_file_before_evaluating(tmp_path, capsys):
    questions = tmp_path / "q.json"
    _write(questions, make_squad(n_articles=2))
    base = ["eval", "--questions", str(questions), "--model", str(tmp_path / "no-model"), "--quiet"]
    assert main(base + ["--limit", "-5"]) == 2
    assert capsys.readouterr().err.strip() == "spanseek eval: error: --limit must be an integer >= 1 (leave it out " \
                                              "to use every question), got -5"
    assert main(base + ["--out", str(questions / "m.json")]) == 2
    assert capsys.readouterr().err.strip() == (f"spanseek eval: error: --out {questions / 'm.json'}: {questions} is "
                                               "a file, not a folder")


def test_eval_leaves_unanswerable_questions_out_of_the_metrics(tmp_path, tiny_model_dir):
    squad = make_squad(n_articles=2)
    with_v2 = copy.deepcopy(squad)
    with_v2["data"][0]["paragraphs"][0]["qas"][0]["answers"] = []  # SQuAD v2: unanswerable
    with_v2["data"][1]["paragraphs"][0]["qas"].append({"id": "v2", "question": "What is not here?", "answers": []})
    _write(tmp_path / "v1.json", squad)
    _write(tmp_path / "v2.json", with_v2)
    n = len(squad_questions(squad["data"]))
    m1, m2 = run_eval(tmp_path / "v1.json", tiny_model_dir, **KW), run_eval(tmp_path / "v2.json", tiny_model_dir, **KW)
    assert m1["n_questions"] == n and "unanswerable_skipped" not in m1
    assert m2["n_questions"] == n - 1 and m2["unanswerable_skipped"] == 2


def test_eval_limit_takes_that_many_answerable_questions_and_counts_every_unanswerable_one(tmp_path, tiny_model_dir):
    squad = make_squad(n_articles=2)
    v2, unanswerable = _without_answers(squad, every=3)
    _write(tmp_path / "v2.json", v2)
    answerable = [q for q in squad_questions(v2["data"]) if q.answers]
    for limit in (5, len(answerable)):  # a sample, and every answerable question (a sample of all would hold fewer)
        m = run_eval(tmp_path / "v2.json", tiny_model_dir, limit=limit, per_question=True, **KW)
        assert m["n_questions"] == limit
        assert m["per_question"]["id"] == [q.id for q in sample_questions(answerable, limit)]
        assert m["unanswerable_skipped"] == unanswerable  # the file's: all of them were left out


def test_eval_limit_on_a_file_without_unanswerable_questions_samples_as_before(tmp_path, tiny_model_dir):
    _write(tmp_path / "v1.json", make_squad(n_articles=2))
    m = run_eval(tmp_path / "v1.json", tiny_model_dir, limit=5, per_question=True, **KW)
    questions = squad_questions(make_squad(n_articles=2)["data"])
    assert m["per_question"]["id"] == [q.id for q in sample_questions(questions, 5)]
    assert "unanswerable_skipped" not in m


def test_eval_of_a_file_with_no_answerable_question_is_refused_before_an_index_is_built(tmp_path, tiny_model_dir,
                                                                                       monkeypatch):
    from spanseek.indexer import evaluate as evaluate_module

    v2, unanswerable = _without_answers(make_squad(n_articles=1), every=1)
    _write(tmp_path / "v2.json", v2)
    monkeypatch.setattr(evaluate_module, "build_index", lambda *a, **k: pytest.fail("an index was built"))
    with pytest.raises(ValueError, match=rf"v2.json: no questions to evaluate \(none of its {unanswerable} has an "
                                         r"answer\)"):
        run_eval(tmp_path / "v2.json", tiny_model_dir, limit=3, **KW)


def test_eval_names_a_reader_that_cannot_read_before_building_an_index(tmp_path, tiny_model_dir, tiny_reader, capsys,
                                                                       monkeypatch):
    """`eval --read --reader DIR` with a directory that is not a reader, or a reader without its fitted reading.json,
    was refused only once the temporary index of the questions' passages was built and the model loaded."""
    import spanseek.indexer.evaluate as evaluate_module

    monkeypatch.setattr(evaluate_module, "build_index", lambda *a, **k: pytest.fail("an index was built"))
    questions = tmp_path / "q.json"
    _write(questions, make_squad(n_articles=2))
    base = ["eval", "--questions", str(questions), "--model", str(tiny_model_dir), "--quiet", "--read"]
    unfitted = tmp_path / "unfitted"
    shutil.copytree(tiny_reader, unfitted)
    (unfitted / "reading.json").unlink()
    for reader, message in ((tiny_model_dir, f"--reader {tiny_model_dir}: not a reader directory"),
                            (unfitted, f"reader {str(unfitted)!r}: {unfitted} has no reading.json (fit one with "
                                       "`spanseek train fit-reading`)")):
        assert main([*base, "--reader", str(reader)]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"spanseek eval: error: {message}"), err
        assert err.count("\n") == 1


def test_eval_leaves_an_out_that_is_not_its_metrics_alone(tmp_path, capsys, monkeypatch):
    """`eval --out` over an existing file that was not eval's metrics (another question file, a model's
    spanseek_config.json) replaced it with the metrics; it is refused before any work, and the file is kept.
    An earlier run's metrics, or an empty file, are written over as before."""
    import spanseek.indexer.evaluate as evaluate_module

    monkeypatch.setattr(evaluate_module, "read_questions", lambda *a, **k: pytest.fail("the questions were read"))
    questions, other = tmp_path / "q.json", tmp_path / "other.json"
    _write(questions, make_squad(n_articles=2))
    _write(other, make_squad(n_articles=1))
    kept = other.read_bytes()
    assert main(["eval", "--questions", str(questions), "--model", "default", "--quiet", "--out", str(other)]) == 2
    err = capsys.readouterr().err
    assert err == (f"spanseek eval: error: --out {other} exists and is not eval's metrics (a JSON object with "
                   "'n_questions'); it is left alone: write to a new file, or remove it first\n")
    assert other.read_bytes() == kept
    earlier, empty = tmp_path / "earlier.json", tmp_path / "empty.json"
    _write(earlier, {"n_questions": 3, "phrase": {}})
    empty.write_text("")
    for fine in (earlier, empty, tmp_path / "new.json"):
        evaluate_module.check_out_file(fine)


@pytest.mark.parametrize(("argv", "flag"), [
    (["eval", "--questions", "{missing}"], "--questions"),
    (["eval", "--questions", "{questions}", "--corpus", "{missing}"], "--corpus"),
    (["index", "build", "--corpus", "{missing}", "--model", "default", "--out", "{tmp}/index"], "--corpus"),
    (["index", "add", "--index", "{tmp}/index", "--corpus", "{missing}"], "--corpus"),
    (["search", "--questions", "{missing}", "--index", "{tmp}/index"], "--questions"),
])
def test_a_file_flag_naming_no_file_is_refused_naming_the_flag(tmp_path, capsys, argv, flag):
    """A missing --questions was 'missing.json: No such file or directory' (which of the command's files?), a missing
    --corpus 'corpus missing.jsonl does not exist': each now names its flag, in one shape, before any model loads."""
    questions, missing = tmp_path / "q.json", tmp_path / "missing.json"
    _write(questions, make_squad(n_articles=2))
    given = [a.format(missing=missing, questions=questions, tmp=tmp_path) for a in argv]
    assert main(given) == 2
    err = capsys.readouterr().err
    command = " ".join(argv[:2] if argv[0] == "index" else argv[:1])
    assert err == f"spanseek {command}: error: {flag} {missing}: No such file or directory\n"
