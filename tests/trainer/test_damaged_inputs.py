"""Inputs found broken in a sweep of `spanseek train ...`: a damaged checkpoint, weights file or cache is named in one
line (before the data is tokenised where it can be), an --out that is not the job's kind of file is left alone,
flags out of range are refused before any search, and answers whose offsets do not point at their text are left
out instead of being learned. (The sweep's `spanseek eval` inputs: tests/indexer/test_eval_inputs.py.)

    .venv/bin/python -m pytest -q tests/trainer/test_damaged_inputs.py
"""

from __future__ import annotations

import copy
import dataclasses
import gzip
import json
import logging
import re

import numpy as np
import pytest

from spanseek.cli import main
from spanseek.core.io import CorpusError, Question, load_squad
from spanseek.core.model import WEIGHTS_NAME, ModelError
from spanseek.trainer import train as train_module
from spanseek.trainer.arguments import LossConfig, ReaderTrainConfig, TrainConfig
from spanseek.trainer.average import average_checkpoints
from spanseek.trainer.calibrate import calibrate, encode_questions
from spanseek.trainer.data import build_windows
from spanseek.trainer.mining import load_hard_negatives, mine
from spanseek.trainer.reader import reader_questions, train_reader
from spanseek.trainer.train import STATE, train_phrase
from tests.conftest import make_squad
from tests.trainer.conftest import encoder_flags


def _phrase_config(tiny_squad, tiny_config, out, **kw) -> TrainConfig:
    return TrainConfig(train=str(tiny_squad), out=str(out), **encoder_flags(tiny_config, kw), batch_windows=4,
                       prebatch=1, val_questions=0, precision="fp32", device="cpu", progress=False, **kw)


def _never_tokenised(monkeypatch):
    def fail(*a, **k):
        raise AssertionError("the data was tokenised before the bad input was found")

    monkeypatch.setattr(train_module, "training_windows", fail)


def _cut(path, size: int = 300) -> None:
    path.write_bytes(path.read_bytes()[:size])


# --- a damaged checkpoint or weights file ---


@pytest.mark.parametrize("damaged", [WEIGHTS_NAME, STATE])
def test_resuming_from_a_cut_short_checkpoint_names_the_file_before_tokenising(tmp_path, tiny_squad, tiny_config,
                                                                              monkeypatch, damaged):
    out = tmp_path / "run"
    cfg = _phrase_config(tiny_squad, tiny_config, out, max_steps=1)
    train_phrase(cfg)
    _cut(out / "last" / damaged)
    _never_tokenised(monkeypatch)
    with pytest.raises(ModelError) as e:
        train_phrase(dataclasses.replace(cfg, max_steps=2))
    message = str(e.value)
    assert message.startswith(f"{out / 'last' / damaged}: cannot be read (") and "\n" not in message
    assert message.endswith(f"remove {out / 'last'} to start the run in {out} over")
    assert (out / "last" / damaged).stat().st_size == 300  # left as it was


def test_a_reader_run_names_its_cut_short_checkpoint_before_tokenising(tmp_path, tiny_squad, tiny_backbone,
                                                                       monkeypatch):
    from spanseek.trainer import reader as reader_module

    out = tmp_path / "reader"
    cfg = ReaderTrainConfig(train=str(tiny_squad), out=str(out), backbone=str(tiny_backbone), max_len=64, stride=16,
                            max_query_len=16, max_steps=1, batch_size=2, val_questions=0, device="cpu",
                            precision="fp32", progress=False)
    train_reader(cfg)
    _cut(out / "last" / WEIGHTS_NAME)
    monkeypatch.setattr(reader_module, "training_windows", lambda *a, **k: pytest.fail("tokenised"))
    with pytest.raises(ModelError, match=rf"^{re.escape(str(out / 'last' / WEIGHTS_NAME))}: cannot be read"):
        train_reader(dataclasses.replace(cfg, max_steps=2))


def test_average_and_init_from_name_a_cut_short_weights_file(tmp_path, tiny_model_dir, tiny_squad, tiny_config):
    import shutil

    bad = tmp_path / "bad"
    shutil.copytree(tiny_model_dir, bad)
    _cut(bad / WEIGHTS_NAME)
    where = rf"^{re.escape(str(bad / WEIGHTS_NAME))}: cannot be read \("
    with pytest.raises(ModelError, match=where):
        average_checkpoints([str(tiny_model_dir), str(bad)], tmp_path / "avg")
    with pytest.raises(ModelError, match=where):
        train_phrase(_phrase_config(tiny_squad, tiny_config, tmp_path / "run", max_steps=1, init_from=str(bad)))
    assert not (tmp_path / "avg").exists()


def test_average_refuses_a_nan_weight_before_reading_the_checkpoints(tmp_path, tiny_model_dir):
    with pytest.raises(ModelError, match=r"^--weights must be non-negative with a positive sum, got \[nan, 1.0\]"):
        average_checkpoints([str(tiny_model_dir), str(tiny_model_dir)], tmp_path / "avg", [float("nan"), 1.0])


def test_a_teacher_that_is_neither_a_reader_nor_a_phrase_model_is_refused_before_tokenising(
        tmp_path, tiny_squad, tiny_config, tiny_model_dir, monkeypatch):
    _never_tokenised(monkeypatch)
    (tmp_path / "notes").mkdir()
    for teacher, says in ((tmp_path / "notes", "neither a reader nor a phrase model"),
                          (f"{tiny_model_dir},{tmp_path / 'notes'}", "neither a reader nor a phrase model"),
                          (f"reader:{tiny_model_dir}", "not a reader directory")):
        cfg = _phrase_config(tiny_squad, tiny_config, tmp_path / "run", max_steps=1, teacher=str(teacher),
                             loss=LossConfig(lambda_kl=1.0))
        with pytest.raises(ModelError, match=says):
            train_phrase(cfg)


# --- hard-negative mining's --out ---


def _write(path, obj) -> str:
    path.write_text(json.dumps(obj), encoding="utf-8")
    return path.read_text(encoding="utf-8")


def test_mine_leaves_its_training_file_and_other_files_alone(tmp_path):
    train = tmp_path / "train.json"
    text = _write(train, make_squad(n_articles=3))
    with pytest.raises(ValueError, match=r"--out .*train.json is the --train file"):
        mine(train, train, progress=False)
    other = tmp_path / "notes.json"
    notes = _write(other, {"notes": "precious"})
    with pytest.raises(ValueError, match="exists and is not a file of hard negatives .* it is left alone"):
        mine(train, other, progress=False)
    with pytest.raises(ValueError, match="is a directory"):
        mine(train, tmp_path, progress=False)
    assert train.read_text(encoding="utf-8") == text and other.read_text(encoding="utf-8") == notes
    assert not list(tmp_path.glob("*.parts"))
    out = mine(train, tmp_path / "hard.jsonl", progress=False)
    assert mine(train, out, progress=False) == out  # its own output is replaced


def test_mine_writes_gzip_for_a_gz_name_that_training_then_reads(tmp_path):
    train = tmp_path / "train.json"
    _write(train, make_squad(n_articles=3))
    out = mine(train, tmp_path / "hard.jsonl.gz", progress=False)
    with gzip.open(out, "rt", encoding="utf-8") as f:
        assert json.loads(f.readline())["id"] == "0-0-0-when"
    assert load_hard_negatives(out, load_squad(train))


def test_mine_refuses_to_resume_into_chunks_mined_with_other_settings(tmp_path, monkeypatch):
    from spanseek.trainer import mining

    train = tmp_path / "train.json"
    _write(train, make_squad(n_articles=3))
    out = tmp_path / "hard.jsonl"
    original = mining.atomic_path

    def killed_at_the_join(path):  # the chunks are written, the run dies before it joins them
        if path == out:
            raise KeyboardInterrupt
        return original(path)

    monkeypatch.setattr(mining, "atomic_path", killed_at_the_join)
    with pytest.raises(KeyboardInterrupt):
        mine(train, out, keep=2, progress=False)
    monkeypatch.undo()
    with pytest.raises(ValueError, match=r"hard.jsonl.parts holds the chunks of a run with other settings: keep 2 "
                                         r"\(this run: 4\)"):
        mine(train, out, keep=4, progress=False)
    rows = [json.loads(line) for line in mine(train, out, keep=2, progress=False).read_text().splitlines()]
    assert rows and all(len(r["hard"]) <= 2 for r in rows)


# --- the model miner's --index ---


@pytest.fixture(scope="module")
def mined_index(tmp_path_factory, tiny_model_dir):
    """A SQuAD file whose first paragraph is empty (the index leaves it out) and an index of its `corpus from-squad`."""
    from spanseek.core.io import from_squad
    from spanseek.indexer.build import BuildOptions, build_index

    root = tmp_path_factory.mktemp("mined")
    squad = make_squad(n_articles=3)
    squad["data"][0]["paragraphs"][0] = {"context": "", "qas": []}
    train = root / "train.json"
    _write(train, squad)
    from_squad(train, root / "corpus.jsonl")
    build_index(root / "corpus.jsonl", tiny_model_dir, root / "index", BuildOptions(progress=False, precision="fp32"))
    return train, root / "index", squad


def test_the_model_miner_maps_index_passages_to_their_paragraphs(tmp_path, mined_index, tiny_model_dir):
    from spanseek.trainer.mining import index_paragraphs

    train, index, squad = mined_index
    keys = index_paragraphs(index, train, squad["data"])
    assert keys[:2] == [(0, 1), (0, 2)] and len(keys) == len(set(keys)) == 3 * 3 - 1  # the empty one is not there
    out = mine(train, tmp_path / "hard.jsonl", miner="model", index=index, model=str(tiny_model_dir), top_k=5,
               limit_questions=4, progress=False)
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 4 and all([0, 0] not in r["hard"] for r in rows)  # never the empty paragraph
    assert load_hard_negatives(out, load_squad(train))


@pytest.mark.parametrize("other", ["another file", "an edited paragraph", "fewer articles"])
def test_the_model_miner_refuses_an_index_of_other_data_before_loading_it(tmp_path, mined_index, tiny_model_dir,
                                                                          monkeypatch, other):
    from spanseek.core import loading

    _, index, squad = mined_index
    data = {"another file": make_squad(seed=1, n_articles=3), "fewer articles": {"data": squad["data"][:2]},
            "an edited paragraph": copy.deepcopy(squad)}[other]
    if other == "an edited paragraph":
        para = data["data"][2]["paragraphs"][1]
        para["context"] = para["context"].replace(" built ", " rebuilt ", 1)
    train = tmp_path / "train.json"
    _write(train, data)
    monkeypatch.setattr(loading, "open_searcher", lambda *a, **k: pytest.fail("the index was opened"))
    out = tmp_path / "hard.jsonl"
    with pytest.raises(ValueError) as e:
        mine(train, out, miner="model", index=index, model=str(tiny_model_dir), progress=False)
    message = str(e.value)
    assert message.startswith(f"--index {index} was not built from --train {train}: ") and "\n" not in message
    where = {"another file": "its passage 0 (paragraph 0 of document '0') is not the text of paragraph 0 of article 0",
             "an edited paragraph": "its passage 6 (paragraph 1 of document '2') is not the text of paragraph 1 of "
                                    "article 2",
             "fewer articles": "its document '2' is not an article number of --train (2 articles)"}[other]
    assert where in message and message.endswith("or give the --train it was built from")
    assert not out.exists() and not list(tmp_path.glob("*.parts"))


# --- calibrate ---


@pytest.mark.parametrize("given, message", [
    ({"limit": 0}, "--limit must be an integer >= 1"), ({"limit": -3}, "--limit must be an integer >= 1"),
    ({"c": [1.0, -1.0]}, r"--C must be numbers > 0"), ({"c": float("nan")}, r"--C must be numbers > 0"),
    ({"out": "DIR"}, "--out must be a file to write, not a directory"),
])
def test_calibrate_refuses_bad_flags_before_opening_anything(tmp_path, given, message):
    given = {k: str(tmp_path) if v == "DIR" else v for k, v in given.items()}
    with pytest.raises(ValueError, match=message):  # the index and model do not exist: nothing was opened
        calibrate(tmp_path / "no-index", tmp_path / "no-questions.json", str(tmp_path / "no-model"), **given)


@pytest.mark.parametrize("kind", ["text", "other npz"])
def test_a_question_cache_of_another_kind_is_named(tmp_path, kind):
    cache = tmp_path / "cache.npz"
    if kind == "text":
        cache.write_text("not an npz")
    else:
        np.savez(cache, other=np.zeros(3))
    with pytest.raises(CorpusError, match=rf"^{re.escape(str(cache))}: not a cache of encoded questions"):
        encode_questions(None, [], cache=cache)  # type: ignore[arg-type]


# --- answers the data gets wrong ---


def test_an_answer_whose_offset_misses_its_text_is_neither_trained_nor_read(tiny_backbone, caplog):
    from transformers import AutoTokenizer

    context = "In 1841 Borin crossed the river by railway."
    right = Question("ok", "who?", ("Borin",), (context.index("Borin"),), "t", context, 0, 0)
    shifted = Question("shifted", "when?", ("1841",), (context.index("1841") + 2,), "t", context, 0, 0)
    past = Question("past", "how?", ("railway",), (len(context) + 5,), "t", context, 0, 0)
    tokenizer = AutoTokenizer.from_pretrained(tiny_backbone)
    windows, skipped = build_windows([right, shifted, past], tokenizer, 64, 8, 6)
    assert [q for w in windows for q in w.questions] == ["who?"] and skipped["answer_not_at_offset"] == 2
    squad = {"data": [{"title": "t", "paragraphs": [{"context": context, "qas": [
        {"id": q.id, "question": q.question, "answers": [{"text": q.answers[0], "answer_start": q.answer_starts[0]}]}
        for q in (right, shifted, past)]}]}]}
    cfg = ReaderTrainConfig(train="x", out="y", holdout_every=20, holdout_offset=7, reserve_offset=None)
    with caplog.at_level(logging.WARNING, logger="spanseek.trainer.data"):
        assert [q.id for q in reader_questions(cfg, squad["data"])] == ["ok"]  # not taught "no answer here"
    assert ("x: 2 of 3 training questions have an answer that is not at its answer_start and are left out; the first: "
            "question 'shifted' (data[0].paragraphs[0]): '1841' is not at character 5 (its context has it at "
            "character 3)") in caplog.text


def test_a_negative_answer_start_is_counted_as_not_at_its_answer_and_a_missing_one_as_no_answer(tiny_backbone):
    """SQuAD data read a missing answer_start as -1, so a given negative one (-1, -7: an offset counted wrongly) was
    counted as no answer (no_answer_tokens) where it is an answer not at its offset."""
    from transformers import AutoTokenizer

    from spanseek.core.io import squad_questions

    context = "In 1841 Borin crossed the river by railway."
    answers = [{"text": "Borin", "answer_start": context.index("Borin")}, {"text": "1841", "answer_start": -1},
               {"text": "river", "answer_start": -7}, {"text": "railway"}]
    questions = squad_questions([{"title": "t", "paragraphs": [{"context": context, "qas": [
        {"id": f"q{i}", "question": f"what {i}?", "answers": [a]} for i, a in enumerate(answers)]}]}])
    windows, skipped = build_windows(questions, AutoTokenizer.from_pretrained(tiny_backbone), 64, 8, 6)
    assert skipped["answer_not_at_offset"] == 2 and skipped["no_answer_tokens"] == 1
    assert [q for w in windows for q in w.questions] == ["what 0?"]
    assert [q.answer_starts for q in questions] == [(context.index("Borin"),), (-1,), (-7,), (None,)]


def test_train_filter_names_a_file_without_questions_to_train_or_validate_on(tiny_model_dir, tiny_index, tmp_path,
                                                                           capsys, monkeypatch):
    """A file with no held-out article (3 articles: the split holds out article 7), or whose training answers all
    miss their answer_start, stopped `train filter` with 'torch.cat(): expected a non-empty list of Tensors' once
    the model had loaded and the windows were encoded; the first is now refused before the model loads."""
    from spanseek.trainer import filter as filter_module

    def run(squad: dict, *flags: str) -> str:
        path = tmp_path / "train.json"
        path.write_text(json.dumps(squad))
        argv = ["train", "filter", "--model", str(tiny_model_dir), "--train", str(path), "--out", str(tmp_path / "f"),
                "--device", "cpu", "--no-progress", *flags]
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and not (tmp_path / "f").exists(), err
        return err.removeprefix(f"spanseek train filter: error: {path}").removeprefix("spanseek train filter: error: ")

    loaded = filter_module.load_model
    monkeypatch.setattr(filter_module, "load_model", lambda *a, **k: pytest.fail("refused only after loading"))
    assert run(make_squad(n_articles=3)).startswith(f"--val-windows 600: {tmp_path / 'train.json'} has no questions "
                                                    "in its held-out articles (every 20th from article 7: 3 articles)")
    # with --from-index no windows are sampled: --val-windows, which it named, is not what asks for them (an index,
    # as one that is none is refused first, naming the flag)
    assert run(make_squad(n_articles=3), "--from-index", str(tiny_index)).startswith(
        f"--from-index {tiny_index} (its held-out articles' tokens validate the filter): "
        f"{tmp_path / 'train.json'} has no questions in its held-out articles (every 20th from article 7")
    monkeypatch.setattr(filter_module, "load_model", loaded)
    squad = make_squad(n_articles=8)
    for art in squad["data"][:7]:  # every training answer one character off; held-out article 7 as it is
        for para in art["paragraphs"]:
            for qa in para["qas"]:
                qa["answers"][0]["answer_start"] += 1
    assert run(squad).startswith(": no trainable questions in the training articles (none has an answer a window "
                                 "can hold: skipped")


def test_every_job_names_a_left_out_question_by_its_place_in_the_file(squad_file, tiny_model_dir, tiny_config,
                                                                      tmp_path, caplog):
    """Held-out article 7 comes before article 10: a phrase run named a question of article 10 as data[9] (its place
    among the training articles); the reader and the length-bias fit named neither the file nor the place, and said
    nothing of a question without an answer, which they left out all the same."""
    from spanseek.core.model import load_tokenizer
    from spanseek.trainer.data import training_windows
    from spanseek.trainer.length_bias import LengthBiasConfig, fit_length_bias

    squad = json.loads(gzip.open(squad_file, "rt").read())
    squad["data"][10]["paragraphs"][1]["qas"][0]["answers"][0]["answer_start"] += 3
    squad["data"][11]["paragraphs"][0]["qas"][0]["answers"] = []
    path = tmp_path / "train.json"
    path.write_text(json.dumps(squad))
    data = load_squad(path)
    offset = (r"{path}: 1 of {n} {kind} questions have an answer that is not at its answer_start and are left out; the "
              r"first: question '10-1-0-when' \(data\[10\]\.paragraphs\[1\]\): '\d+' is not at character \d+ "
              r"\(its context has it at character \d+\)")
    none = (r"{path}: 1 of {n} {kind} questions have no answer to train on \(.*\) and are left out; the first: "
            r"question '11-0-0-when' \(data\[11\]\.paragraphs\[0\]\)$")
    jobs = {
        "phrase": lambda: training_windows(TrainConfig(train=str(path), out="o"), data, load_tokenizer(tiny_config),
                                           tiny_config, None),
        "reader": lambda: reader_questions(ReaderTrainConfig(train=str(path), out="o", reserve_offset=None), data),
        "length-bias": lambda: fit_length_bias(LengthBiasConfig(model=str(tiny_model_dir), train=str(path),
                                                                out=str(tmp_path / "lb"), questions=5,
                                                                val_questions=0, device="cpu", progress=False)),
    }
    for job, run in jobs.items():
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="spanseek.trainer.data"):
            run()
        warnings = [r.getMessage() for r in caplog.records]
        assert len(warnings) == 2, (job, warnings)
        for pattern, warning in zip((none, offset), sorted(warnings, key=lambda w: "no answer" not in w), strict=True):
            assert re.match(pattern.format(path=re.escape(str(path)), n=456, kind="training"), warning), (job, warning)

