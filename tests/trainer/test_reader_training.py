"""`spanseek train reader` and `spanseek train fit-reading` on the tiny backbone and SQuAD file: what they train on,
that a run resumes where it stopped, and that the fitted reading file is what a searcher loads."""

from __future__ import annotations

import dataclasses
import gzip
import json
import shutil

import numpy as np
import pytest
import torch

from spanseek.cli import main
from spanseek.core.io import load_squad, squad_questions
from spanseek.core.metrics import passage_has_answer
from spanseek.core.model import ModelError
from spanseek.core.reader import PassageReader, ReaderModel, load_reader_tokenizer, resolve_reader
from spanseek.core.reading import READ_FEATURES, READING_NAME, Reading
from spanseek.trainer.arguments import FitReadingConfig, ReaderTrainConfig
from spanseek.trainer.reader import negative_passages, train_reader, training_windows
from spanseek.trainer.rundir import TRAIN_CONFIG
from tests.conftest import make_squad

SPLIT = {"holdout_every": 4, "holdout_offset": 1}


def config(tiny_squad, tiny_backbone, out, **changes) -> ReaderTrainConfig:
    return ReaderTrainConfig(train=str(tiny_squad), out=str(out), backbone=str(tiny_backbone), stride=16, max_query_len=24,
                             batch_size=4, checkpoint_every=1, progress=False, precision="fp32",
                             **{"reserve_offset": 2, "max_len": 64, "val_questions": 5, **SPLIT, **changes})


def test_the_reader_trains_without_held_out_or_reserved_articles_and_resumes(tiny_squad, tiny_backbone, tmp_path,
                                                                             monkeypatch):
    out = tmp_path / "reader"
    first = train_reader(config(tiny_squad, tiny_backbone, out, max_steps=2, snapshot_every=1))
    assert sorted(p.name for p in (out / "snapshots").iterdir()) == ["step-000001", "step-000002"]
    assert PassageReader.load(resolve_reader(out / "snapshots" / "step-000001"))  # each one a reader
    card = (out / "snapshots" / "step-000001" / "README.md").read_text(encoding="utf-8")  # saying what it is
    assert f"step 1 snapshot of `spanseek train reader` into {out}" in card and "| steps | 1 of 2 |" in card
    assert "--snapshot-every 1" in card and "| training loss | " in card and "rank-checkpoints" in card
    data = load_squad(tiny_squad)
    kept = [a for i, a in enumerate(data) if i % 4 not in (1, 2)]
    assert first["train_questions"] == len(squad_questions(kept)) and first["steps"] == 2
    assert "validation" in first and 0 <= first["validation"]["em"] <= 100
    steps = []
    real_step = torch.optim.AdamW.step
    monkeypatch.setattr(torch.optim.AdamW, "step", lambda self, *a, **k: steps.append(1) or real_step(self, *a, **k))
    resumed = train_reader(config(tiny_squad, tiny_backbone, out, max_steps=3))
    assert resumed["steps"] == 3 and len(steps) == 1  # one more step, not three
    reader = PassageReader.load(resolve_reader(out / "last"))
    [[span]] = reader.read(["Who built it?"], ["In 1500 Alba built the bridge."])
    assert span.text and span.text in "In 1500 Alba built the bridge."


def test_a_killed_and_resumed_reader_run_ends_with_the_weights_of_an_uninterrupted_one_and_summarises_it_whole(
        tiny_squad, tiny_backbone, tmp_path, monkeypatch, ticking_clock):
    """A reader run of 3 steps killed in its last step and resumed from its step-2 checkpoint ends bit for bit where
    the same run without the kill does: torch's random state (the dropout masks) is saved with the checkpoint (the
    resumed run drew the masks of the run's first steps again, and ended up to 8e-5 away). Its summary covers the
    whole run, as a phrase run's does: the seconds and windows of the part before the kill (kept in the checkpoint)
    and the step it resumed at; it gave the resumed part's only. (A clock that moves 10 s a reading.)"""
    whole = dataclasses.replace(config(tiny_squad, tiny_backbone, tmp_path / "whole", max_steps=3, val_questions=0),
                                checkpoint_every=2)
    assert "resumed_at" not in train_reader(whole)
    steps = []
    real_step = torch.optim.AdamW.step

    def killed_in_step_3(self, *a, **k):
        steps.append(1)
        if len(steps) == 3:
            raise KeyboardInterrupt
        return real_step(self, *a, **k)

    resumed = dataclasses.replace(whole, out=str(tmp_path / "resumed"))
    with monkeypatch.context() as m:
        m.setattr(torch.optim.AdamW, "step", killed_in_step_3)
        with pytest.raises(KeyboardInterrupt):
            train_reader(resumed)
    first = torch.load(tmp_path / "resumed" / "last" / "trainer_state.pt", weights_only=False)
    assert first["step"] == 2 and first["run_seconds"] >= 2 * 10.0 and first["run_questions"] > 0
    summary = train_reader(resumed)
    last = torch.load(tmp_path / "resumed" / "last" / "trainer_state.pt", weights_only=False)
    assert summary["steps"] == 3 and summary["resumed_at"] == [2]
    assert summary["seconds"] >= first["run_seconds"] + 10.0 and last["run_questions"] > first["run_questions"]
    assert summary["windows_per_second"] == pytest.approx(last["run_questions"] / summary["seconds"], abs=0.01)
    ours, theirs = (torch.load(tmp_path / run / "last" / "trainer_state.pt", weights_only=False)["master"]
                    for run in ("whole", "resumed"))
    assert ours.keys() == theirs.keys()
    assert all(torch.equal(ours[name], theirs[name]) for name in ours), "the resumed run ended elsewhere"


def test_a_run_initialised_from_a_reader_starts_from_its_master_weights(tiny_squad, tiny_backbone, tmp_path,
                                                                       monkeypatch):
    first = tmp_path / "first"
    train_reader(config(tiny_squad, tiny_backbone, first, max_steps=2, val_questions=0))
    master = torch.load(first / "last" / "trainer_state.pt", weights_only=False)["master"]
    seen = {}
    real_step = torch.optim.AdamW.step

    def spy(self, *a, **k):  # the weights the second run's first step starts from
        if not seen:
            seen.update({n: p.detach().clone() for n, p in zip(names, self.param_groups[0]["params"], strict=True)})
        return real_step(self, *a, **k)

    monkeypatch.setattr(torch.optim.AdamW, "step", spy)
    # the initial reader's config gives the windows (--max-len beside --init is refused: it would go unused)
    second = ReaderTrainConfig(train=str(tiny_squad), out=str(tmp_path / "second"), init=str(first / "last"),
                               batch_size=4, checkpoint_every=1, progress=False, precision="fp32", max_steps=1,
                               val_questions=0, reserve_offset=2, **SPLIT)
    assert second.build().max_len == 64
    names = [n for n, p in ReaderModel(second.build()).named_parameters() if p.requires_grad]
    train_reader(second)
    assert seen and set(seen) <= set(master)
    for name, weight in seen.items():  # fp32 master weights, not the fp16 shipped copy
        assert torch.equal(weight, master[name]), name


def test_train_reader_refuses_a_reserved_split_equal_to_the_held_out_one(tiny_squad, tiny_backbone, tmp_path):
    with pytest.raises(ValueError, match="--reserve-offset"):
        config(tiny_squad, tiny_backbone, tmp_path, reserve_offset=1)



def test_a_training_file_without_one_usable_answer_is_one_line_naming_it(tiny_backbone, tmp_path, capsys):
    """Every answer_start off its text: the questions are all left out, and the run stopped with a ZeroDivisionError
    traceback at its first step."""
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"data": [{"title": "x", "paragraphs": [{"context": "abc def", "qas": [
        {"id": "q", "question": "what?", "answers": [{"text": "zz", "answer_start": 0}]}]}]}]}))
    assert main(["train", "reader", "--train", str(bad), "--out", str(tmp_path / "r"), "--backbone", str(tiny_backbone),
                 "--max-steps", "1"]) == 2
    assert f"{bad}: no trainable questions" in capsys.readouterr().err

def article(title: str, paragraphs: list[tuple[str, list[tuple[str, str]]]]) -> dict:
    """A SQuAD article: (context, [(question, answer)]) per paragraph, answers at their first occurrence."""
    return {"title": title, "paragraphs": [
        {"context": c, "qas": [{"id": f"{title}-{p}-{i}", "question": q, "answers": [{"text": a, "answer_start":
                                                                                        c.index(a)}]}
                               for i, (q, a) in enumerate(qas)]} for p, (c, qas) in enumerate(paragraphs)]}


def test_negatives_are_the_bm25_best_paragraphs_of_the_same_article_without_the_answer():
    bridge = article("Bridge", [
        ("Alba built the stone bridge over the river in 1500.", [("Who built the stone bridge over the river?",
                                                                  "Alba")]),
        ("The stone bridge over the river was repaired by Alba and his sons.", []),  # holds the answer
        ("The river floods the stone bridge every spring.", []),  # most of the question's words
        ("The river is long.", []),
        ("Wine is made in the valley.", []),
    ])
    other = article("Other", [("The stone bridge over the river Thames was built by Bob.", [("Who?", "Bob")])])
    articles = [bridge, other]
    questions = squad_questions(articles)
    assert negative_passages(articles, questions, 2) == [
        (0, "The river floods the stone bridge every spring."), (0, "The river is long.")]  # BM25 order
    every = negative_passages(articles, questions, 10)  # all but the gold one and the one holding the answer
    assert [p for _, p in every] == [bridge["paragraphs"][i]["context"] for i in (2, 3, 4)]
    assert not any(passage_has_answer(p, questions[0].answers) for _, p in every)
    assert negative_passages(articles, questions, 0) == []  # and "Other" has no second paragraph: none from it


def test_every_window_of_a_negative_targets_cls(tiny_squad, tiny_backbone):
    cfg = ReaderTrainConfig(train=str(tiny_squad), out="unused", backbone=str(tiny_backbone), max_len=48, stride=16,
                            max_query_len=24)
    questions = [q for q in squad_questions(load_squad(tiny_squad)) if q.answers][:6]
    negatives = [(i, questions[(i + 1) % 6].context) for i in range(6)]
    reader_config = cfg.build()
    tokenizer = load_reader_tokenizer(reader_config)
    windows, targets = training_windows(tokenizer, reader_config, questions, negatives)
    alone, alone_targets = training_windows(tokenizer, reader_config, questions)
    gold = windows.pair < len(questions)
    assert gold.sum() == len(alone.ids) and (targets[gold] == alone_targets).all()  # the gold windows unchanged
    assert (~gold).any() and (targets[~gold] == 0).all()
    assert set(windows.pair[~gold].tolist()) == set(range(6, 12))
    assert (targets[gold][:, 0] > 0).any()  # the answers' windows have real targets


def test_a_reader_trains_with_negatives_and_a_teacher_teaches_only_the_gold_windows(tiny_squad, tiny_backbone,
                                                                                     tiny_reader, tmp_path):
    from spanseek.trainer.distill import reader_windows

    summary = train_reader(config(tiny_squad, tiny_backbone, tmp_path / "neg", max_steps=2, val_questions=0,
                                  negatives=1))
    plain = train_reader(config(tiny_squad, tiny_backbone, tmp_path / "plain", max_steps=1, val_questions=0))
    assert summary["negative_passages"] > 0 and plain["negative_passages"] == 0
    assert summary["train_windows"] > plain["train_windows"]
    taught = train_reader(config(tiny_squad, tiny_backbone, tmp_path / "taught", max_steps=2, val_questions=0,
                                 negatives=1, teacher=str(tiny_reader), lambda_kl=1.0))
    assert taught["steps"] == 2 and taught["negative_passages"] == summary["negative_passages"]
    questions = [q for q in squad_questions(load_squad(tiny_squad)) if q.answers][:4]
    reader_config = config(tiny_squad, tiny_backbone, tmp_path).build()
    windows, _ = training_windows(load_reader_tokenizer(reader_config), reader_config, questions,
                                  [(i, questions[(i + 1) % 4].context) for i in range(4)])
    asked = [w is not None for w in reader_windows(questions, windows)]
    assert asked == (windows.pair < len(questions)).tolist()  # the negatives' windows are not taught
    with pytest.raises(ValueError, match="--negatives must be an integer >= 0"):
        config(tiny_squad, tiny_backbone, tmp_path, negatives=-1)


def fit_args(tiny_squad, tiny_reader, tiny_model_dir, out) -> list[str]:
    return ["train", "fit-reading", "--train", str(tiny_squad), "--reader", str(tiny_reader), "--model",
            str(tiny_model_dir), "--out", str(out), "--holdout-every", "4", "--holdout-offset", "1",
            "--articles-offset", "2", "--questions", "10", "--read-passages", "1,2", "--window-chars", "0,40",
            "--precision", "fp32", "--no-progress"]


def test_fit_reading_says_when_there_is_nothing_to_fit(tiny_squad, tiny_model_dir, tiny_reader, tmp_path, capsys):
    """The tiny reader is untrained: it reads no answer right, and the fit says so instead of failing inside."""
    assert main(fit_args(tiny_squad, tiny_reader, tiny_model_dir, tmp_path / "fitted")) == 2
    assert "every phrase candidate read is wrong" in capsys.readouterr().err
    assert not (tmp_path / "fitted" / READING_NAME).exists()


def test_fit_reading_writes_the_file_a_searcher_reads(tiny_squad, tiny_model_dir, tiny_reader, tmp_path, capsys,
                                                      monkeypatch):
    from spanseek.trainer import fit_reading

    # an untrained reader reads no answer right: here a span is right when its text has an odd number of
    # characters (whatever words the reader picks: read spans are whole words, and none of them need hold a year), a
    # passage or document when its question is a when-question, so both labels occur for every unit
    monkeypatch.setattr(fit_reading, "label", lambda unit, c, q: float(len(c.span.text) % 2 == 1
                                                                       if unit == "phrase" else
                                                                       q.question.startswith("When")))
    out = tmp_path / "fitted"
    assert main(fit_args(tiny_squad, tiny_reader, tiny_model_dir, out)) == 0
    summary = json.loads(capsys.readouterr().out)
    reading = Reading.load(out / READING_NAME)
    assert set(reading.models) == {"phrase", "passage", "doc"}
    assert reading.read_passages == summary["read_passages"] in (1, 2)
    assert reading.window_chars == summary["window_chars"] in (0, 40)
    assert set(reading.fitted_on["phrase_em@1_by_read_passages_and_window"]) == {"1/0", "2/0", "1/40", "2/40"}
    other = reading.at(3 - reading.read_passages)  # the depth not chosen: fitted too, at the chosen window
    assert {reading.read_passages, other.read_passages} == {1, 2} and set(other.models) == {"phrase", "passage", "doc"}
    assert other.window_chars == reading.window_chars and set(other.calibration) == {"phrase", "passage", "doc"}
    assert reading.fitted_on["features"] == list(READ_FEATURES)
    # --features: the models use those alone, the others weigh 0 at every depth
    capsys.readouterr()
    some = tmp_path / "some"
    assert main([*fit_args(tiny_squad, tiny_reader, tiny_model_dir, some), "--features", "reader,retrieval_z"]) == 0
    fitted = Reading.load(some / READING_NAME)
    used = [READ_FEATURES.index("reader"), READ_FEATURES.index("retrieval_z")]
    weighed = {i for fit in (fitted, fitted.at(3 - fitted.read_passages)) for model in fit.models.values()
               for i, c in enumerate(model.coef) if c != 0}
    assert weighed == set(used)  # (reading one passage, its retrieval z is constant and weighs 0 there)
    # --default-passages: the other depth is the default, with the models the fit made for it; the fit's choice
    # is recorded beside it
    capsys.readouterr()
    forced = tmp_path / "forced"
    other_depth = 3 - reading.read_passages
    assert main([*fit_args(tiny_squad, tiny_reader, tiny_model_dir, forced), "--default-passages",
                 str(other_depth)]) == 0
    again = Reading.load(forced / READING_NAME)
    assert again.read_passages == other_depth and again.window_chars == reading.window_chars
    assert again.fitted_on["fit_chose"] == {"read_passages": reading.read_passages,
                                            "window_chars": reading.window_chars}
    assert again.fitted_on["default_passages"] == "--default-passages" and reading.fitted_on["default_passages"] == "fit"
    for unit in ("phrase", "passage", "doc"):
        assert again.models[unit].coef == pytest.approx(other.models[unit].coef)
        assert again.at(reading.read_passages).models[unit].coef == pytest.approx(reading.models[unit].coef)
    # --absent-questions: questions of other training articles are read too, all wrong; --reads keeps the reads, and a
    # rerun with the same settings fits from them without reading
    capsys.readouterr()
    absent, kept = tmp_path / "absent", tmp_path / "reads.pkl"
    args = [*fit_args(tiny_squad, tiny_reader, tiny_model_dir, absent), "--absent-questions", "4", "--reads", str(kept)]
    assert main(args) == 0
    first = Reading.load(absent / READING_NAME)
    assert first.fitted_on["absent_questions"] == 4 and first.fitted_on["questions"] == reading.fitted_on["questions"]
    assert {"phrase_first_hit_confidence_absent", "doc_first_hit_confidence_present"} <= set(first.fitted_on)
    monkeypatch.setattr(fit_reading, "read_questions", lambda *a, **k: pytest.fail("read again"))
    assert main(args) == 0
    assert Reading.load(absent / READING_NAME).to_dict() == first.to_dict()
    assert main([*args[:-4], "--absent-questions", "3", "--reads", str(kept)]) == 2
    assert "holds reads made with other absent than this fit's" in capsys.readouterr().err


def test_fit_reading_names_a_mistyped_reader_or_an_empty_split_before_building_an_index(tiny_squad, tiny_model_dir,
                                                                                         tiny_reader, tmp_path, capsys,
                                                                                         monkeypatch):
    """A mistyped --reader was found once an index of the articles was built (minutes), and a file without articles
    at --articles-offset was refused as "corpus /tmp/spanseek-fit-reading-.../corpus.jsonl has no non-empty
    passages", a file the user never named."""
    from spanseek.indexer import build

    monkeypatch.setattr(build, "build_index", lambda *a, **k: pytest.fail("an index was built"))
    args = fit_args(tiny_squad, tiny_reader, tiny_model_dir, tmp_path / "fitted")
    assert main([*args, "--reader", str(tmp_path / "nope")]) == 2
    assert f"--reader {tmp_path / 'nope'}: not a reader directory" in capsys.readouterr().err
    assert main([*args, "--holdout-every", "20", "--holdout-offset", "7", "--articles-offset", "12"]) == 2
    err = capsys.readouterr().err
    assert f"--train {tiny_squad}: no answered questions in the articles the fit reads" in err
    assert "(article i with i % 20 == 12" in err and "0 of its 4 articles" in err and "spanseek-fit-reading" not in err
    assert not (tmp_path / "fitted").exists()


def test_fit_reading_refuses_an_out_reading_json_cannot_go_into_before_any_work(tiny_squad, tiny_model_dir,
                                                                                tiny_reader, tmp_path, capsys,
                                                                                monkeypatch):
    """--out FILE failed as 'FILE: File exists' once the whole fit was done; --out PHRASE_MODEL_DIR wrote
    reading.json among the phrase model's files. Both are refused before the training file is read; a new
    directory, a reader's, or one holding only an earlier reading.json is written into."""
    from spanseek.trainer import fit_reading as fit_module

    monkeypatch.setattr(fit_module, "load_training", lambda *a, **k: pytest.fail("read before --out was refused"))
    kept = sorted(p.name for p in tiny_model_dir.iterdir())
    for out, message in ((tiny_squad, f"--out {tiny_squad} is a file; it names the reader directory to write "
                                      f"{READING_NAME} into"),
                         (tiny_model_dir, f"--out {tiny_model_dir} is not a reader directory (no reader_config.json; "
                                          "it holds spanseek_config.json, ")):
        assert main(fit_args(tiny_squad, tiny_reader, tiny_model_dir, out)) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"spanseek train fit-reading: error: {message}") and err.count("\n") == 1, err
    assert sorted(p.name for p in tiny_model_dir.iterdir()) == kept
    (tmp_path / "earlier").mkdir()
    (tmp_path / "earlier" / READING_NAME).write_text("{}")
    (tmp_path / "made").mkdir()  # a new directory a desktop has marked (it was 'not a reader directory')
    (tmp_path / "made" / ".DS_Store").write_bytes(b"\0")
    for fine in (tmp_path / "new", tiny_reader, tmp_path / "earlier", tmp_path / "made"):
        fit_module.check_reading_out(fine)


def test_a_reader_runs_directory_given_as_a_reader_names_its_last(tiny_squad, tiny_reader, tmp_path, capsys):
    """A phrase run's directory given as a model says its model is RUN/last; a reader run's given as a reader (to
    eval --reader, --init, --teacher, reader-length-bias, fit-reading) said only that it is not a reader directory."""
    run = tmp_path / "run"
    shutil.copytree(tiny_reader, run / "last")
    with pytest.raises(ModelError, match=rf"^reader '{run}': a training run, not a reader directory; its "
                       rf"reader is {run / 'last'}$"):
        resolve_reader(run)
    assert main(["train", "reader-length-bias", "--reader", str(run), "--train", str(tiny_squad), "--out",
                 str(tmp_path / "biased")]) == 2
    assert f"--reader {run}: a training run, not a reader directory; its reader is {run / 'last'}\n" in \
        capsys.readouterr().err
    assert resolve_reader(run / "last") == run / "last"


def test_fit_reading_options_are_checked():
    with pytest.raises(ValueError, match="--features must be comma-separated names among reader, "):
        FitReadingConfig(train="t", out="o", reader="r", features="reader,lexical")
    with pytest.raises(ValueError, match="--features"):
        FitReadingConfig(train="t", out="o", reader="r", features=" , ")
    with pytest.raises(ValueError, match="--read-passages"):
        FitReadingConfig(train="t", out="o", reader="r", read_passages="0,x")
    with pytest.raises(ValueError, match="--articles-offset"):
        FitReadingConfig(train="t", out="o", reader="r", articles_offset=7)
    with pytest.raises(ValueError, match=r"--default-passages must be one of --read-passages \(1,2\), got 3"):
        FitReadingConfig(train="t", out="o", reader="r", read_passages="1,2", default_passages=3)
    with pytest.raises(ValueError, match="--absent-questions must be an integer >= 0"):
        FitReadingConfig(train="t", out="o", reader="r", absent_questions=-1)


def test_a_reader_distils_from_a_teacher_or_its_cache(tiny_squad, tiny_backbone, tiny_reader, tmp_path, monkeypatch):
    """`--teacher` adds the KL term over each window's passage tokens, the teacher's logits read once into a cache;
    that cache, complete, then stands for the teacher (same targets, the teacher never loaded)."""
    from spanseek.trainer import reader as reader_module

    with pytest.raises(ValueError, match="--lambda-kl"):
        config(tiny_squad, tiny_backbone, tmp_path / "x", teacher=str(tiny_reader))
    seen = []
    real_kl = reader_module.masked_kl
    monkeypatch.setattr(reader_module, "masked_kl", lambda s, t, v, T: seen.append((t.clone(), v.clone())) or
                        real_kl(s, t, v, T))
    train_reader(config(tiny_squad, tiny_backbone, tmp_path / "read", max_steps=2, val_questions=0,
                        teacher=str(tiny_reader), lambda_kl=2.0))
    assert len(seen) == 4 and all(v.any() for _, v in seen)  # start and end, two steps
    assert (tmp_path / "read" / "teacher-cache" / "done.json").is_file()
    read, seen[:] = list(seen), []
    monkeypatch.setattr(PassageReader, "load", lambda *a, **k: pytest.fail("the teacher was loaded"))
    train_reader(config(tiny_squad, tiny_backbone, tmp_path / "cached", max_steps=2, val_questions=0,
                        teacher=str(tmp_path / "read" / "teacher-cache"), lambda_kl=2.0))
    for (t, v), (t0, v0) in zip(seen, read, strict=True):
        assert torch.equal(t, t0) and torch.equal(v, v0)


def test_the_reader_distils_the_span_distribution_with_kl_level_spans():
    """``--kl-level spans``: the KL of the teacher's distribution over each window's spans that reading decodes
    (i <= j < i + L, i a word's first token and j a word's last, both in the window and read by the teacher, scored
    start[i] + end[j]) from the student's, by brute force; it was accepted and the start and end distributions were
    distilled apart, and then it distilled spans that start or end inside a word, which reading never decodes."""
    from spanseek.core.reader import MISSING_LOGIT
    from spanseek.core.text import FLAG_END, FLAG_START
    from spanseek.trainer.reader import reader_kl

    g = torch.Generator().manual_seed(3)
    B, T, L = 3, 10, 4
    start, end = torch.randn(B, T, generator=g), torch.randn(B, T, generator=g)
    t_start, t_end = torch.randn(B, T, generator=g) * 2, torch.randn(B, T, generator=g) * 2
    t_start[:, :3] = t_end[:, :3] = MISSING_LOGIT  # [CLS] and the question: no passage token the teacher read
    t_end[1, 7:] = MISSING_LOGIT
    valid = torch.ones(B, T, dtype=torch.bool)
    valid[2, 8:] = False  # padding
    flags = torch.full((B, T), FLAG_START | FLAG_END)  # words of one token, but for:
    flags[:, 4], flags[:, 5], flags[:, 6] = FLAG_START, 0, FLAG_END  # a word of three pieces (tokens 4-6)
    flags[0, 8], flags[0, 9] = FLAG_START, FLAG_END  # and one of two
    flags[2, 8:] = 0  # (padding is no word)
    for tau in (1.0, 2.0):
        kls = []
        for r in range(B):
            spans = [(i, j) for i in range(T) for j in range(i, min(T, i + L)) if valid[r, i] and valid[r, j]
                     and flags[r, i] & FLAG_START and flags[r, j] & FLAG_END
                     and t_start[r, i] > MISSING_LOGIT / 2 and t_end[r, j] > MISSING_LOGIT / 2]
            s = np.array([float(start[r, i] + end[r, j]) for i, j in spans]) / tau
            u = np.array([float(t_start[r, i] + t_end[r, j]) for i, j in spans]) / tau
            ps, pt = np.exp(s - s.max()) / np.exp(s - s.max()).sum(), np.exp(u - u.max()) / np.exp(u - u.max()).sum()
            kls.append(float((pt * np.log(pt / ps)).sum()))
        cfg = ReaderTrainConfig(train="t", out="o", teacher="x", lambda_kl=1.0, kl_level="spans", kl_temperature=tau)
        got = reader_kl(start, end, (t_start, t_end), valid, flags, cfg, L)
        assert got.item() == pytest.approx(np.mean(kls) * tau**2, rel=1e-4)
        tokens = reader_kl(start, end, (t_start, t_end), valid, flags, dataclasses.replace(cfg, kl_level="tokens"), L)
        assert tokens.item() != pytest.approx(got.item(), rel=1e-3)
    assert reader_kl(t_start, t_end, (t_start, t_end), valid, flags, cfg, L).item() == pytest.approx(0, abs=1e-5)


def test_a_reader_run_with_kl_level_spans_trains_on_the_span_term(tiny_squad, tiny_backbone, tiny_reader, tmp_path,
                                                                  monkeypatch):
    """The run's loss takes the span-level term over spans of the reader's longest answer, not the boundary terms."""
    from spanseek.trainer import reader as reader_module

    lengths, real = [], reader_module.span_kl
    monkeypatch.setattr(reader_module, "span_kl", lambda *a: lengths.append(a[5]) or real(*a))
    monkeypatch.setattr(reader_module, "masked_kl", lambda *a: pytest.fail("the boundary terms were distilled"))
    train_reader(config(tiny_squad, tiny_backbone, tmp_path / "read", max_steps=2, val_questions=0,
                        teacher=str(tiny_reader), lambda_kl=2.0, kl_level="spans"))
    assert lengths == [ReaderTrainConfig.max_answer_tokens] * 2


def test_the_teacher_logits_of_a_reader_window_sit_at_its_passage_tokens(tiny_squad, tiny_reader, tmp_path):
    """A window read by the teacher that made it: its cached logits are the teacher's own logits of that window at
    the passage tokens, and missing at the question and special tokens."""
    from spanseek.core.reader import MISSING_LOGIT, make_windows
    from spanseek.trainer.distill import fill_teacher_cache, reader_teacher_tensors, reader_windows

    reader = PassageReader.load(resolve_reader(tiny_reader))
    questions = squad_questions(load_squad(tiny_squad))[:6]
    windows = make_windows(reader.tokenizer, reader.config, [q.question for q in questions],
                           [q.context for q in questions])
    one = [w for w in range(len(windows.ids)) if (windows.pair == windows.pair[w]).sum() == 1]  # passages in one window
    assert one
    taught = reader_windows(questions, windows)
    cache = fill_teacher_cache(tmp_path / "cache", tiny_reader, [t for t in taught if t is not None], progress=False)
    width = max(len(windows.ids[w]) for w in one)
    start, end = reader_teacher_tensors([taught[w] for w in one], [windows.offsets[w] for w in one], [cache], width)
    logits = reader.logits(windows)
    for row, w in enumerate(one):
        inside = torch.from_numpy(windows.offsets[w][:, 0] >= 0)
        s, e = (torch.from_numpy(x) for x in logits[w])
        n = len(inside)
        torch.testing.assert_close(start[row, :n][inside], s[inside])
        torch.testing.assert_close(end[row, :n][inside], e[inside])
        assert (start[row, :n][~inside] == MISSING_LOGIT).all() and (start[row, n:] == MISSING_LOGIT).all()


def test_a_reader_stopped_in_its_last_step_is_validated_by_the_same_command_without_a_step(tiny_squad, tiny_backbone,
                                                                                          tmp_path, monkeypatch):
    """Ctrl-C in the reader's last step saved it and stopped before its validation and summary, saying "the same
    command resumes from OUT/last" of a finished training: the stop now says that the same command validates it and
    writes the summary, and the same command does so, training no step."""
    import os
    import signal

    out = tmp_path / "reader"
    steps = []
    real_step = torch.optim.AdamW.step

    def ctrl_c_in_step_2(self, *a, **k):
        steps.append(1)
        if len(steps) == 2:
            os.kill(os.getpid(), signal.SIGINT)
        return real_step(self, *a, **k)

    monkeypatch.setattr(torch.optim.AdamW, "step", ctrl_c_in_step_2)
    cfg = config(tiny_squad, tiny_backbone, out, max_steps=2)
    before = signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a terminal
    try:
        with pytest.raises(KeyboardInterrupt) as stopped:
            train_reader(cfg)
    finally:
        signal.signal(signal.SIGINT, before)
    assert str(stopped.value) == (f"stopped after the last step (2), saved as {out / 'last'}; the same command "
                                  f"validates it on the held-out questions and writes {out / 'summary.json'} without "
                                  "training again")
    assert not (out / "summary.json").exists()
    steps.clear()
    summary = train_reader(cfg)
    assert not steps and summary["steps"] == 2 and "validation" in summary
    assert json.loads((out / "summary.json").read_text())["validation"] == summary["validation"]


def test_a_reader_run_resumed_with_other_settings_is_refused_naming_them(tiny_squad, tiny_backbone, tmp_path,
                                                                         monkeypatch):
    """A reader run resumed with another --lr ran on at the first run's rate (the optimiser's state) while its
    summary recorded the new one, and one resumed with other windows (--max-len) or another backbone (which failed on
    a weight's shape) went on too: each is refused before a step, naming the settings; a longer run resumes."""
    out = tmp_path / "reader"
    train_reader(config(tiny_squad, tiny_backbone, out, max_steps=1, val_questions=0))
    steps = []
    real_step = torch.optim.AdamW.step
    monkeypatch.setattr(torch.optim.AdamW, "step", lambda self, *a, **k: steps.append(1) or real_step(self, *a, **k))
    with pytest.raises(ValueError, match=rf"--out {out} holds a run started with other settings: lr 0.0001 \(this "
                                         r"run: 0.5\); resume with the same ones"):
        train_reader(config(tiny_squad, tiny_backbone, out, max_steps=2, val_questions=0, lr=0.5))
    with pytest.raises(ValueError, match=r"other settings: max_len 64 \(this run: 96\)"):
        train_reader(config(tiny_squad, tiny_backbone, out, max_steps=2, val_questions=0, max_len=96))
    assert not steps
    assert train_reader(config(tiny_squad, tiny_backbone, out, max_steps=2, val_questions=0))["steps"] == 2
    assert len(steps) == 1


def test_a_reader_run_started_with_limit_questions_0_resumes_with_it_left_out(tiny_squad, tiny_backbone, tmp_path):
    """--limit-questions 0 trained a reader on every question until it was refused as out of range; a run that
    recorded it could then not be resumed at all (left out: 'limit_questions 0 (this run: None)'; given: refused).
    Left out means the same, so it resumes; another number is still refused."""
    out = tmp_path / "reader"
    train_reader(config(tiny_squad, tiny_backbone, out, max_steps=1, val_questions=0))
    settings = json.loads((out / TRAIN_CONFIG).read_text())
    (out / TRAIN_CONFIG).write_text(json.dumps({**settings, "limit_questions": 0}))  # as the earlier run wrote it
    assert train_reader(config(tiny_squad, tiny_backbone, out, max_steps=2, val_questions=0))["steps"] == 2
    (out / TRAIN_CONFIG).write_text(json.dumps({**settings, "limit_questions": 0}))
    with pytest.raises(ValueError, match=r"other settings: limit_questions None \(this run: 5\)"):
        train_reader(config(tiny_squad, tiny_backbone, out, max_steps=3, val_questions=0, limit_questions=5))


def test_a_reader_run_resumes_on_its_questions_moved_and_refuses_them_edited(tiny_squad, tiny_backbone, tmp_path):
    """A reader run's resume check held the training file's path, so the same questions in a moved file were
    refused; it checks the questions themselves, as a phrase run does (and the file's name, where the checkpoint
    records no questions)."""
    out = tmp_path / "reader"
    train_reader(config(tiny_squad, tiny_backbone, out, max_steps=1, val_questions=0))
    moved = tmp_path / "elsewhere" / "renamed.json.gz"
    moved.parent.mkdir()
    shutil.copy(tiny_squad, moved)
    assert train_reader(config(moved, tiny_backbone, out, max_steps=2, val_questions=0))["steps"] == 2
    data = json.loads(gzip.decompress(moved.read_bytes()))
    data["data"][0]["paragraphs"][0]["qas"][0]["question"] = "Which question was edited?"
    edited = tmp_path / "edited.json"
    edited.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(ValueError, match=f"--out {out} holds a run trained on other questions \\(.*\\): use a new "
                       "--out for a run on these questions, or remove"):
        train_reader(config(edited, tiny_backbone, out, max_steps=3, val_questions=0))
    (out / "last" / "trained_questions.json").unlink()  # a checkpoint written before its questions were recorded
    with pytest.raises(ValueError, match=r"other settings: train '.*renamed.json.gz' \(this run: '.*tiny-squad"):
        train_reader(config(tiny_squad, tiny_backbone, out, max_steps=3, val_questions=0))


def test_a_reader_file_without_training_questions_counts_its_reserved_articles_as_such():
    """With every article held out or reserved, `train reader` said '3 articles, 3 of them held out' where one was
    reserved for fit-reading (--reserve-offset), not held out: changing the held-out split alone could not help."""
    from spanseek.trainer.reader import reader_questions

    data = make_squad(n_articles=3)["data"]
    cfg = ReaderTrainConfig(train="t.json", out="o", holdout_every=2, holdout_offset=0, reserve_offset=1)
    with pytest.raises(ValueError, match=r"^t\.json: no questions in its training articles \(3 articles, 3 of them held "
                                         r"out or reserved by --reserve-offset\)$"):
        reader_questions(cfg, data)
    cfg = ReaderTrainConfig(train="t.json", out="o", holdout_every=1, holdout_offset=0, reserve_offset=None)
    with pytest.raises(ValueError, match=r"\(3 articles, 3 of them held out\)$"):  # nothing reserved
        reader_questions(cfg, data)


def test_fit_reading_takes_the_calibrators_judgement_of_each_question_and_the_mean_where_none_judged():
    """``retrieval_confidence`` in the fit is each question's first-unit log-odds (clipped to +-10); a question no
    calibrator judged reads as the mean of those judged, as a search reads it at the fitted mean; none judged, the
    feature is constant (and weighs nothing)."""
    from spanseek.core.io import Question
    from spanseek.core.params import Hit
    from spanseek.core.reader import ReadSpan
    from spanseek.core.reading import Candidate
    from spanseek.trainer.fit_reading import Read, examples

    passage = "In 1450 the harbour bridge was built by Gala of Tarn."
    source = Hit("Gala", 3.0, 40, 44, 0, passage, "d", "t")

    def read(first):
        q = Question("q", "Who built it?", ("Gala",), (40,), "t", passage, 0, 0)
        cands = [Candidate(source, 0, ReadSpan(0, 40, 44, "Gala", 2.0, 0.0)),
                 Candidate(source, 0, ReadSpan(0, 12, 26, "harbour bridge", 1.0, 0.0))]
        return Read(q, {u: cands for u in ("phrase", "passage", "doc")}, {u: [source] for u in ("phrase", "passage", "doc")},
                    {u: first for u in ("phrase", "passage", "doc")})

    col = READ_FEATURES.index("retrieval_confidence")
    x, y, sizes = examples([read(2.0), read(None), read(-30.0)], "phrase", 1)
    assert x[:, col].tolist() == [2.0, 2.0, -4.0, -4.0, -10.0, -10.0] and y.tolist() == [1, 0] * 3 and sizes == [2] * 3
    x, _, _ = examples([read(None), read(None)], "phrase", 1)
    assert x[:, col].tolist() == [0.0] * 4


def test_a_reader_checkpoint_carries_a_model_card_with_its_command_data_steps_and_validation(tiny_squad,
                                                                                             tiny_backbone, tmp_path):
    """A phrase run's OUT/last had a README.md card of how it was trained; a reader run's had none. Each reader
    checkpoint now carries one, and the validated reader's holds its reading-comprehension metrics."""
    import shlex

    from spanseek.cli import build_parser
    from spanseek.core.options import from_args

    out = tmp_path / "reader"
    cfg = config(tiny_squad, tiny_backbone, out, max_steps=1, val_questions=2)
    summary = train_reader(cfg)
    card = (out / "last" / "README.md").read_text(encoding="utf-8")
    command = card.split("| trained by | `", 1)[1].split("`", 1)[0]
    assert from_args(ReaderTrainConfig, build_parser().parse_args(shlex.split(command)[1:])) == cfg
    assert (f"{tiny_squad.resolve()}: {summary['train_questions']} questions in {summary['train_windows']} windows"
            in card)
    assert "| steps | 1 |" in card and f"| device | {summary['device']}, fp32 |" in card and "reader_config.json" in card
    assert "validation.json.gz" not in card and not (out / "validation.json.gz").exists()  # (a file it never writes)
    validated = json.loads(card.split("```json\n", 1)[1].split("\n```", 1)[0])
    assert validated == json.loads(json.dumps(summary["validation"]))


def synthetic_reads(rng: np.random.Generator, n: int, absent: bool, article: str = "t"):
    """``n`` questions' reads of one passage each, of the article titled ``article``: answerable ones whose read
    answer is right when the reader scores it high and whose retrieval the calibrator judges strong; unanswerable ones
    (``absent``) whose retrieval is weak, read as confidently, their passage holding the answer's text by chance
    (still wrong: the article is not there)."""
    from spanseek.core.io import Question
    from spanseek.core.params import Hit
    from spanseek.core.reader import ReadSpan
    from spanseek.core.reading import Candidate
    from spanseek.trainer.fit_reading import Read

    out = []
    for i in range(n):
        right = not absent and rng.random() < 0.6
        title = article if right or absent else "other"
        passage = "In 1450 the harbour bridge was built by Gala of Tarn." if right or absent else \
            "In 1450 the harbour bridge was built by Orm of Tarn."
        source = Hit(passage[40:44], 3.0, 40, 44, 0, passage, "d", title)
        q = Question(f"{article}-{'absent' if absent else 'q'}{i}", "Who built it?", ("Gala",), (40,), article,
                     passage, 0, 0)
        score = rng.normal(3.0 if right or absent else 1.0, 0.7)
        cands = [Candidate(source, 0, ReadSpan(0, 40, 44, passage[40:44], score, 0.0)),
                 Candidate(source, 0, ReadSpan(0, 12, 26, "harbour bridge", score - 2.0, 0.0))]
        units = ("phrase", "passage", "doc")
        out.append(Read(q, {u: cands for u in units}, {u: [source] for u in units},
                        {u: float(rng.normal(-3.0 if absent else 2.0, 1.0)) for u in units}, absent=absent))
    return out


def test_a_fit_that_reads_unanswerable_questions_doubts_weak_retrieval_and_stays_calibrated_on_answerable_ones():
    """Questions whose article the index does not hold are wrong whatever is read (even a span that matches their
    answer's text): fitted with them, the models learn that weak retrieval means a wrong read, so an unanswerable
    question's first hit loses its confidence, while the calibration is fitted on the answerable questions alone."""
    from spanseek.trainer.fit_reading import examples, fit, fit_depth

    rng = np.random.default_rng(0)
    here, gone = synthetic_reads(rng, 120, absent=False), synthetic_reads(rng, 120, absent=True)
    x, y, _ = examples(gone, "phrase", 1)
    assert not y.any()  # (their first span reads "Gala", their answer, in a passage titled as their article)
    reports = {}
    for name, reads in (("answerable only", here), ("with unanswerable", here + gone)):
        models, calibration, report = fit_depth(reads, 1, fit(*examples(reads, "phrase", 1)[:2], "phrase"))
        reports[name] = report
    old, new = reports["answerable only"], reports["with unanswerable"]
    assert "phrase_first_hit_confidence_absent" not in old
    for unit in ("phrase", "passage", "doc"):
        assert new[f"{unit}_first_hit_confidence_absent"] < 0.2 < new[f"{unit}_first_hit_confidence_present"]
        # calibrated on the answerable questions: their mean confidence is their accuracy, as without the others
        assert new[f"{unit}_first_hit_confidence_present"] == pytest.approx(old[f"{unit}_first_hit_confidence_present"],
                                                                           abs=0.02)
        assert new[f"{unit}_first_hit_ece"]["calibrated"] < 0.1
    # without them, the same unanswerable questions read as confidently as answerable ones
    models, calibration, _ = fit_depth(here, 1, fit(*examples(here, "phrase", 1)[:2], "phrase"))
    scores = models["phrase"].logit(examples(gone, "phrase", 1)[0])[::2]
    a, b = calibration["phrase"]
    assert float(np.mean(1 / (1 + np.exp(-(a * scores + b))))) > 0.5


class _RunsWhenUnpickled:
    """A pickle that creates the file ``marker`` when it is loaded: what a --reads file could do if it were unpickled."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (open, (str(self.marker), "w"))


def test_fit_reading_refuses_a_reads_file_it_did_not_write(tmp_path):
    """A --reads file is read as data: one that is not what the fit wrote (any pickle, a damaged or truncated file,
    one of another format version, a folder) is refused naming it, and nothing in it is run."""
    import pickle

    from spanseek.trainer.fit_reading import kept_reads

    assert kept_reads(str(tmp_path / "none.pkl"), {}) is None
    not_reads = "is not a file of reads that `spanseek train fit-reading --reads` wrote"
    other = tmp_path / "questions.json"
    other.write_text('{"data": []}')
    with pytest.raises(ValueError, match=f"--reads {other} {not_reads}"):
        kept_reads(str(other), {})
    evil, marker = tmp_path / "evil.reads", tmp_path / "ran"
    evil.write_bytes(pickle.dumps({"made_with": {}, "reads": _RunsWhenUnpickled(marker)}))
    with pytest.raises(ValueError, match=not_reads):
        kept_reads(str(evil), {})
    assert not marker.exists()
    with pytest.raises(ValueError, match=f"--reads {tmp_path} is a folder"):
        kept_reads(str(tmp_path), {})

    from spanseek.trainer.fit_reading import READS_VERSION, load_reads, save_reads

    made_with = {"questions": ["q0", "q1"], "absent": [], "index": None, "windows": [0, 200]}
    reads = {0: synthetic_reads(np.random.default_rng(1), 3, absent=False),
             200: synthetic_reads(np.random.default_rng(2), 2, absent=True)}
    kept = tmp_path / "reads"
    save_reads(kept, made_with, reads)
    assert load_reads(kept) == (made_with, reads)
    assert kept_reads(str(kept), made_with) == reads
    whole = kept.read_bytes()
    kept.write_bytes(whole[:len(whole) // 2])  # a copy cut short
    with pytest.raises(ValueError, match=not_reads):
        kept_reads(str(kept), made_with)
    with gzip.open(whole_json := tmp_path / "v", "wt") as f:
        f.write(json.dumps({**json.loads(gzip.decompress(whole)), "version": READS_VERSION + 1}))
    with pytest.raises(ValueError, match=f"--reads {whole_json} holds reads in format version {READS_VERSION + 1}"):
        kept_reads(str(whole_json), made_with)
    damaged = json.loads(gzip.decompress(whole))
    damaged["reads"]["0"][1]["candidates"]["phrase"][0]["source"] = 99
    kept.write_bytes(gzip.compress(json.dumps(damaged).encode()))
    with pytest.raises(ValueError, match=f"--reads {kept} is damaged"):
        kept_reads(str(kept), made_with)
