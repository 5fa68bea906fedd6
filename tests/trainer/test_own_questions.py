"""A user's own question file through training and evaluation: what cannot be trained on is refused before the
model loads, naming the file and the place; questions left out are named in a warning; a trained model records
its training questions, so that `spanseek eval` counts and warns about them, and `train length-bias` keeps the
record; a run resumed on other questions is refused.

    .venv/bin/python -m pytest -q tests/trainer/test_own_questions.py
"""

from __future__ import annotations

import copy
import gzip
import json
import logging
from dataclasses import replace

import pytest

from spanseek.core.evaluate import TRAINED_QUESTIONS, count_trained, question_key, trained_questions
from spanseek.core.io import CorpusError, load_squad, squad_questions
from spanseek.trainer.data import build_windows, check_training_data, warn_left_out
from spanseek.trainer.qsft import QsftConfig, train_qsft
from tests.conftest import make_squad

PLACE = "data[1].paragraphs[2].qas[1]"


def _edit(data, change):
    data = copy.deepcopy(data)
    change(data[1]["paragraphs"][2]["qas"][1], data)
    return data


@pytest.mark.parametrize(
    ("change", "said"),
    [
        pytest.param(lambda qa, d: qa.update(question=""), f"{PLACE}: the question is blank", id="empty-question"),
        pytest.param(lambda qa, d: qa.update(question=" \u200b\t"), f"{PLACE}: the question is blank",
                     id="invisible-question"),
        pytest.param(lambda qa, d: qa["answers"][0].update(text=" "), f"{PLACE}.answers[0]: the answer's text is blank",
                     id="blank-answer"),
        pytest.param(lambda qa, d: qa.update(id=d[0]["paragraphs"][0]["qas"][0]["id"]),
                     f"{PLACE}: question id '0-0-0-when' is also the id of data[0].paragraphs[0].qas[0]",
                     id="duplicate-id"),
        pytest.param(lambda qa, d: qa.update(id=0) or d[0]["paragraphs"][0]["qas"][0].update(id="0"),
                     f"{PLACE}: question id '0' is also the id of data[0].paragraphs[0].qas[0]",
                     id="duplicate-id-number-and-string"),
    ],
)
def test_what_cannot_be_trained_on_is_refused_naming_the_place(change, said):
    data = _edit(make_squad()["data"], change)
    with pytest.raises(CorpusError) as e:
        check_training_data(data, "q.json")
    assert str(e.value).startswith(f"q.json: {said}")


def test_a_good_file_and_one_with_unanswerable_questions_pass():
    data = make_squad()["data"]
    check_training_data(data, "q.json")
    check_training_data(_edit(data, lambda qa, d: qa.update(answers=[])), "q.json")  # SQuAD v2: no answer


def test_a_bad_training_file_is_refused_in_one_line_before_the_model_loads(tmp_path, tiny_model_dir, capsys,
                                                                             monkeypatch):
    from spanseek.cli import main
    from spanseek.trainer import qsft

    def no_model(*args, **kwargs):
        raise AssertionError("the model was loaded before the training file was checked")

    monkeypatch.setattr(qsft, "load_model", no_model)
    path = tmp_path / "q.json"
    path.write_text(json.dumps({"data": _edit(make_squad()["data"], lambda qa, d: qa.update(question=""))}))
    out = tmp_path / "run"
    code = main(["train", "qsft", "--model", str(tiny_model_dir), "--train", str(path), "--out", str(out),
                 "--val-questions", "0", "--device", "cpu", "--no-progress"])
    assert code == 2
    err = [line for line in capsys.readouterr().err.splitlines() if not line.startswith(("INFO", "WARNING"))]
    assert err == [f"spanseek train qsft: error: {path}: {PLACE}: the question is blank; write its question or remove it"]
    assert not out.exists()


def test_questions_left_out_are_named_with_where_their_answer_is(tiny_backbone, caplog):
    from transformers import AutoTokenizer

    data = make_squad()["data"]
    qa = data[1]["paragraphs"][2]["qas"][1]
    context = data[1]["paragraphs"][2]["context"]
    answer, start = qa["answers"][0]["text"], qa["answers"][0]["answer_start"]
    qa["answers"][0]["answer_start"] = start + 2  # shifted: the text is elsewhere in the context
    missing = data[2]["paragraphs"][0]["qas"][0]
    missing["answers"][0]["text"] = "Nowhere Else"  # not in its context at all
    questions = squad_questions(data)
    left_out: dict = {}
    tokenizer = AutoTokenizer.from_pretrained(tiny_backbone)
    _, skipped = build_windows(questions, tokenizer, 64, 8, 6, left_out=left_out)
    assert skipped["answer_not_at_offset"] == 2 == len(left_out["answer_not_at_offset"])
    with caplog.at_level(logging.WARNING, logger="spanseek.trainer.data"):
        warn_left_out("q.json", left_out, len(questions))
    [line] = [r.getMessage() for r in caplog.records]
    assert line == (f"q.json: 2 of {len(questions)} training questions have an answer that is not at its answer_start "
                    f"and are left out; the first: question {qa['id']!r} (data[1].paragraphs[2]): {answer!r} is not "
                    f"at character {start + 2} (its context has it at character {context.find(answer)})")


# --- the record of the questions a model was trained on ---


@pytest.fixture(scope="module")
def qsft_run(tmp_path_factory, tiny_model_dir, squad_file):
    """Two steps of query-side fine-tuning on the 40-article file (articles 7 and 27 held out and validated)."""
    out = tmp_path_factory.mktemp("own") / "run"
    cfg = QsftConfig(model=str(tiny_model_dir), train=str(squad_file), out=str(out), max_steps=2, batch_windows=4,
                     val_questions=20, precision="fp32", device="cpu", progress=False)
    return cfg, train_qsft(cfg)


def test_a_trained_model_records_its_training_questions_and_not_the_held_out_ones(qsft_run, squad_file):
    cfg, summary = qsft_run
    record = trained_questions(f"{cfg.out}/last")
    assert record is not None and record["source"] == str(squad_file)
    data = load_squad(squad_file)
    train_articles, held = cfg.holdout.split(data)
    assert record["keys"] == {question_key(q.question) for q in squad_questions(train_articles)}
    assert not {question_key(q.question) for q in squad_questions(held)} & record["keys"]
    assert "trained_questions" not in summary["validation"]  # validated on held-out questions only
    assert record["questions"] == summary["train_questions"]  # counted alike


def test_eval_counts_and_warns_about_questions_the_model_was_trained_on(qsft_run, squad_file, tmp_path, caplog):
    from spanseek.indexer.evaluate import run_eval

    cfg, _ = qsft_run
    model = f"{cfg.out}/last"
    train_articles, held = cfg.holdout.split(load_squad(squad_file))
    mixed = tmp_path / "mixed.json.gz"  # two held-out articles and two trained ones
    with gzip.open(mixed, "wt", encoding="utf-8") as f:
        json.dump({"data": held + train_articles[:2]}, f)
    trained = len(squad_questions(train_articles[:2]))
    with caplog.at_level(logging.WARNING, logger="spanseek.core.evaluate"):
        metrics = run_eval(mixed, model, progress=False, precision="fp32")
    assert metrics["trained_questions"] == trained
    n = len(squad_questions(held)) + trained
    assert f"{trained} of {n} questions have the words of questions {model} was trained on" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="spanseek.core.evaluate"):
        metrics = run_eval(f"{cfg.out}/validation.json.gz", model, progress=False, precision="fp32")
    assert "trained_questions" not in metrics and "was trained on" not in caplog.text


def test_the_same_words_are_the_same_question_and_bundled_models_have_no_record(qsft_run, tiny_model_dir):
    cfg, _ = qsft_run
    assert question_key("Who  built the\tWall?") == question_key("who built the wall?") != question_key("Who built?")
    questions = squad_questions(load_squad(cfg.train))[:3]
    assert count_trained(tiny_model_dir, questions) == 0  # no record: nothing counted
    assert count_trained(None, questions) == 0


def test_a_damaged_record_is_said_and_ignored(tmp_path, caplog):
    (tmp_path / TRAINED_QUESTIONS).write_text("{not json")
    with caplog.at_level(logging.WARNING, logger="spanseek.core.evaluate"):
        assert trained_questions(tmp_path) is None
    assert f"{tmp_path / TRAINED_QUESTIONS}: cannot be read" in caplog.text


def test_length_bias_keeps_the_record(qsft_run, tmp_path):
    from pathlib import Path

    from spanseek.core.config import EncoderConfig
    from spanseek.core.model import CONFIG_NAME
    from spanseek.trainer.length_bias import write_model_copy

    cfg, _ = qsft_run
    last = Path(cfg.out) / "last"
    write_model_copy(last, tmp_path / "lb", EncoderConfig.load(last / CONFIG_NAME))
    assert (tmp_path / "lb" / TRAINED_QUESTIONS).read_bytes() == (last / TRAINED_QUESTIONS).read_bytes()


def test_a_run_resumed_on_other_questions_is_refused_and_on_the_same_ones_goes_on(qsft_run, tmp_path):
    cfg, summary = qsft_run
    data = load_squad(cfg.train)
    data[0]["paragraphs"][0]["qas"][0]["question"] = "Which question was edited?"
    edited = tmp_path / "edited.json"
    edited.write_text(json.dumps({"data": data}))
    with pytest.raises(ValueError, match=f"--out {cfg.out} holds a run trained on other questions \\(.*\\): use a new "
                       "--out for a run on these questions, or remove"):
        train_qsft(replace(cfg, train=str(edited), val_questions=0))
    again = train_qsft(replace(cfg, val_questions=0))  # the same questions: resumes (finished, nothing to do)
    assert again["steps"] == summary["steps"]


def test_the_record_counts_every_question_trained_on_as_the_summary_does(tmp_path):
    """A run's summary said 138 training questions and its model's record 137: SQuAD's training file asks 259 of its
    texts more than once in the same words (87,599 questions, 87,311 texts), and the record counted distinct texts. It now
    counts the questions trained on, as the summary does, and says how many distinct texts its keys hold."""
    from spanseek.core.evaluate import write_trained_questions

    questions = ["When did Beyonce have her first child?", "When did Beyonce have her first child?", "Who sang?"]
    write_trained_questions(tmp_path, questions, "train.json", "digest")
    record = trained_questions(tmp_path)
    assert (record["questions"], record["distinct"]) == (3, 2)
    assert record["keys"] == {question_key(q) for q in questions}
