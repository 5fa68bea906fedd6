"""Bad input to the trainer gives one line naming the file and line (data) or the flag (options), before any model
is loaded or trained where it can: hard-negative files, SQuAD files for mining and validation sets, training
options, a model's encoder config, calibration examples.

    .venv/bin/python -m pytest -q tests/trainer/test_input_errors.py
"""

from __future__ import annotations

import gzip
import json
import logging
import re
from pathlib import Path

import numpy as np
import pytest

from spanseek.cli import main
from spanseek.core.config import EncoderConfig, LoraSettings
from spanseek.core.io import CorpusError, load_squad
from spanseek.trainer.arguments import LossConfig, QsftConfig, TrainConfig
from spanseek.trainer.calibrate import load_runs
from spanseek.trainer.mining import load_hard_negatives, mine
from spanseek.trainer.validation import build_validation_sets
from tests.conftest import make_squad

# a training question of `squad_file` (40 articles of 3 paragraphs; articles 7 and 27 held out) and a good line
GOOD = '{"id": "0-0-0-when", "hard": [[1, 0], [2, 1]]}'


def write_squad(path: Path, obj: dict) -> Path:
    path.write_text(json.dumps(obj), encoding="utf-8")
    return path


# --- hard negatives (`train phrase --hard-negatives`, `train mine`) ---


@pytest.mark.parametrize("line, message", [
    ('{"hard": [[1, 0]]}', r'expected \{"id": question id, "hard"'),
    ('{"id": "0-0-0-who", "hard": 5}', r'expected \{"id": question id, "hard"'),
    ("[1, 2]", r'expected \{"id": question id, "hard"'),
    ('{"id": "0-0-0-who", "hard": [[1, 0]]', r"invalid JSON \(Expecting ',' delimiter at column 37\)"),
    ('{"id": "0-0-0-who", "hard": [[1, 0, 2]]}', r"each hard negative must be \[article, paragraph\]"),
    ('{"id": "0-0-0-who", "hard": [[true, 0]]}', r"each hard negative must be \[article, paragraph\]"),
    ('{"id": "0-0-0-who", "hard": [[-1, -1]]}', r"\[-1, -1\]: article and paragraph indices must be >= 0"),
    ('{"id": "0-0-0-who", "hard": [[40, 0]]}', r"\[40, 0\] is not a paragraph of the training file \(40 articles\)"),
    ('{"id": "0-0-0-who", "hard": [[1, 3]]}', r"\[1, 3\] is not a paragraph .*\(article 1 has 3 paragraphs\)"),
    ('{"id": "0-0-0-who", "hard": [[27, 0]]}', r"\[27, 0\] is in held-out article 27"),
])
def test_a_bad_hard_negatives_line_names_the_file_and_line(squad_file, tmp_path, line, message):
    path = tmp_path / "hard.jsonl"
    path.write_text(f"{GOOD}\n\n{line}\n")  # the blank line is skipped, and counted
    with pytest.raises(CorpusError, match=rf"^{re.escape(str(path))}:3: {message}"):
        load_hard_negatives(path, load_squad(squad_file))


def test_blank_lines_are_skipped_in_a_plain_or_gzipped_file(squad_file, tmp_path):
    data = load_squad(squad_file)
    text = f"\n{GOOD}\n   \n" + '{"id": "0-0-0-who", "hard": []}\n'
    plain, packed = tmp_path / "hard.jsonl", tmp_path / "hard.jsonl.gz"
    plain.write_text(text)
    with gzip.open(packed, "wt") as f:
        f.write(text)
    want = {"0-0-0-when": [data[1]["paragraphs"][0]["context"], data[2]["paragraphs"][1]["context"]],
            "0-0-0-who": []}
    assert load_hard_negatives(plain, data) == load_hard_negatives(packed, data) == want


def test_hard_negatives_of_other_questions_are_refused_or_warned_about(squad_file, tmp_path, caplog):
    data = load_squad(squad_file)
    path = tmp_path / "hard.jsonl"
    path.write_text('{"id": "nope-1", "hard": [[1, 0]]}\n{"id": "nope-2", "hard": [[1, 1]]}\n')
    with pytest.raises(CorpusError, match=rf"^{re.escape(str(path))}: none of its 2 question ids is a question"):
        load_hard_negatives(path, data)
    path.write_text("")
    with pytest.raises(CorpusError, match="no hard negatives"):
        load_hard_negatives(path, data)
    # mostly other questions: a warning; the questions that match still get theirs
    path.write_text(f'{GOOD}\n{{"id": "nope-1", "hard": [[1, 0]]}}\n{{"id": "nope-2", "hard": [[1, 1]]}}\n')
    with caplog.at_level(logging.WARNING, logger="spanseek.trainer.mining"):
        assert len(load_hard_negatives(path, data)["0-0-0-when"]) == 2
    assert "only 1 of its 3 question ids" in caplog.text


def test_train_phrase_reports_a_bad_hard_negatives_file_in_one_line(squad_file, tiny_backbone, tmp_path, capsys):
    bad = tmp_path / "hard.jsonl"
    bad.write_text(f'{GOOD}\n{{"id": "0-0-0-who", "hard": [[999, 1]]}}\n')
    argv = ["train", "phrase", "--train", str(squad_file), "--out", str(tmp_path / "run"), "--backbone",
            str(tiny_backbone), "--max-seq-len", "32", "--stride", "8", "--max-answer-tokens", "6",
            "--hard-negatives", str(bad), "--max-steps", "1", "--val-questions", "0", "--device", "cpu",
            "--precision", "fp32", "--no-progress"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"spanseek train phrase: error: {bad}:2: [999, 1] is not a paragraph of the training file" in err
    assert not (tmp_path / "run" / "last").exists()


def test_more_questions_asked_for_than_the_file_has_is_one_line(squad_file, tiny_backbone, tmp_path, capsys):
    argv = ["train", "phrase", "--train", str(squad_file), "--out", str(tmp_path / "run"), "--backbone",
            str(tiny_backbone), "--max-seq-len", "32", "--stride", "8", "--max-answer-tokens", "6",
            "--limit-questions", "100000", "--max-steps", "1", "--val-questions", "0", "--device", "cpu",
            "--precision", "fp32", "--no-progress"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"error: --limit-questions 100000: {squad_file} has " in err and len(err.strip().splitlines()) == 1


def test_mine_reads_a_paragraph_without_context_as_empty(tmp_path):
    squad = make_squad(n_articles=3)
    del squad["data"][1]["paragraphs"][0]["context"]  # optional in SQuAD; its questions stay
    out = mine(write_squad(tmp_path / "train.json", squad), tmp_path / "hard.jsonl", progress=False)
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == sum(len(p["qas"]) for a in squad["data"] for p in a["paragraphs"])
    assert all([1, 0] not in r["hard"] for r in rows)  # an empty passage holds no answer but is no negative


def test_mine_refuses_a_file_without_questions_and_bad_counts(tmp_path):
    empty = write_squad(tmp_path / "empty.json", {"version": "1.1", "data": []})
    with pytest.raises(CorpusError, match=rf"^--train {re.escape(str(empty))}: no questions in it \(0 articles\)"):
        mine(empty, tmp_path / "hard.jsonl", progress=False)
    good = write_squad(tmp_path / "train.json", make_squad(n_articles=2))
    for given, flag in (({"keep": 0}, "--keep"), ({"top_k": -1}, "--top-k"), ({"limit_questions": -2},
                                                                              "--limit-questions")):
        with pytest.raises(ValueError, match=f"{flag} must be an integer >= 1"):
            mine(good, tmp_path / "hard.jsonl", progress=False, **given)


@pytest.mark.parametrize("job", ["phrase", "qsft", "reader", "filter"])
def test_a_training_file_without_questions_is_named_as_the_train_file(tmp_path, capsys, job):
    """`train qsft` (and phrase) on a SQuAD file with no questions blamed --val-questions (its held-out split holds
    none): the file is named, as --train, before its split is looked at."""
    empty = write_squad(tmp_path / "empty.json", {"version": "1.1", "data": []})
    model = ["--model", "default"] if job in ("qsft", "filter") else []
    assert main(["train", job, "--train", str(empty), "--out", str(tmp_path / "run"), *model]) == 2
    assert capsys.readouterr().err == (f"spanseek train {job}: error: --train {empty}: no questions in it (0 articles); "
                                       "training learns from the questions of a SQuAD-format file (each paragraph's "
                                       "qas)\n")


# --- training options ---


@pytest.mark.parametrize("flag, value", [
    ("--batch-windows", "0"), ("--checkpoint-every", "0"), ("--max-steps", "-1"), ("--max-steps", "0"),
    ("--epochs", "0"), ("--epochs", "-1"), ("--epochs", "nan"), ("--lr", "0"), ("--lr", "-0.001"), ("--lr", "inf"),
    ("--lambda-inb", "-1"), ("--lambda-hard", "-0.5"), ("--lambda-pre", "-1"), ("--lambda-neg", "nan"),
    ("--warmup", "1"), ("--warmup", "-0.1"), ("--prebatch-warmup", "2"), ("--hard-per-batch", "-1"),
    ("--prebatch", "-1"), ("--limit-questions", "-5"), ("--limit-questions", "0"), ("--weight-decay", "-0.1"),
    ("--snapshot-every", "-1"), ("--stop-after", "-1"), ("--lora-r", "0"), ("--widen-lora", "-2"),
    ("--corrector-lr", "0"), ("--val-questions", "-1"), ("--holdout-offset", "20"), ("--holdout-every", "0"),
])
def test_a_bad_training_option_is_refused_naming_the_flag_before_any_work(flag, value, tmp_path, capsys):
    argv = ["train", "phrase", "--train", str(tmp_path / "train.json"), "--out", str(tmp_path / "run"), flag, value]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert re.fullmatch(rf"spanseek train phrase: error: {flag}( \(lambda_\w+\))? must be [^\n]+, got [^\n]+\n", err), err
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("command, flag, value", [
    # the reader shares the phrase run's schedule checks: --epochs inf was a traceback (OverflowError), --stride -5
    # one from the tokenizer, --max-steps -1 trained nothing, --limit-questions 0 meant every question
    ("reader", "--epochs", "inf"), ("reader", "--lr", "inf"), ("reader", "--max-steps", "0"),
    ("reader", "--max-steps", "-1"), ("reader", "--limit-questions", "0"), ("reader", "--limit-questions", "-1"),
    ("reader", "--warmup", "2"), ("reader", "--weight-decay", "-1"), ("reader", "--val-questions", "-1"),
    ("reader", "--stride", "-5"), ("reader", "--max-query-len", "0"), ("reader", "--max-answer-tokens", "0"),
    ("reader", "--max-len", "64"),
    # a new phrase model's windows, and length-bias's counts, by their flags (they were the configs' field names)
    ("phrase", "--stride", "-5"), ("phrase", "--stride", "254"), ("phrase", "--max-seq-len", "2"),
    ("phrase", "--max-answer-tokens", "0"), ("length-bias", "--questions", "0"),
    ("length-bias", "--val-questions", "-1"),
])
def test_reader_and_encoder_options_are_refused_naming_the_flag(command, flag, value, tmp_path, capsys):
    argv = ["train", command, "--train", str(tmp_path / "train.json"), "--out", str(tmp_path / "run"), flag, value]
    argv += ["--model", "m"] if command == "length-bias" else []
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert re.fullmatch(rf"spanseek train {command}: error: {flag} must be [^\n]+, got {value}(\.0)?\n", err), err
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("command", ["phrase", "reader"])
@pytest.mark.parametrize("flag, value", [("--teacher-cache", "tcache"), ("--kl-level", "spans"),
                                         ("--kl-temperature", "2.0")])
def test_a_distillation_flag_without_a_teacher_is_refused_naming_it(command, flag, value, tmp_path, capsys):
    """A flag of the distillation term given without --teacher (as --lambda-kl is) was left unused: the run trained
    without a teacher, saying nothing."""
    argv = ["train", command, "--train", str(tmp_path / "train.json"), "--out", str(tmp_path / "run"), flag, value]
    assert main(argv) == 2
    assert capsys.readouterr().err == (f"spanseek train {command}: error: {flag} {value} is for distilling from a "
                                       f"teacher, and no --teacher is given (give one with --lambda-kl, or leave "
                                       f"{flag} out)\n")
    assert not (tmp_path / "run").exists()


def test_qsft_options_are_checked_too(tmp_path, capsys):
    for flag, value in (("--batch-windows", "0"), ("--lambda-hard", "-1")):
        argv = ["train", "qsft", "--model", "m", "--train", "t.json", "--out", str(tmp_path / "run"), flag, value]
        assert main(argv) == 2
        assert f"spanseek train qsft: error: {flag}" in capsys.readouterr().err


def test_a_cache_or_index_flag_that_cannot_serve_is_refused_naming_it_before_any_work(squad_file, tiny_model_dir,
                                                                                    tmp_path, capsys):
    """`train qsft --cache MODEL_DIR` wrote its phrase cache among the model's files (--teacher-cache and
    --stale-cache likewise); --cache FILE failed as 'FILE: File exists' once the data was tokenised; a --val-index
    that is no index failed once the whole run had trained, a --from-index once the data was tokenised."""
    model, nope = str(tiny_model_dir), str(tmp_path / "nope")
    kept = sorted(p.name for p in tiny_model_dir.iterdir())
    job = ["--train", str(squad_file), "--out", str(tmp_path / "run"), "--max-steps", "1", "--device", "cpu"]
    qsft, phrase = ["train", "qsft", "--model", model, *job], ["train", "phrase", *job]
    for argv, message in (
        (qsft + ["--cache", model], f"--cache {model} holds other files (spanseek_config.json, "),
        (qsft + ["--cache", str(squad_file)], f"--cache {squad_file} is a file, not a cache directory"),
        (qsft + ["--val-index", nope], f"--val-index {nope}: no such index directory"),
        (qsft + ["--from-index", str(squad_file)], f"--from-index {squad_file}: a file, not an index directory"),
        (phrase + ["--teacher", model, "--lambda-kl", "1", "--teacher-cache", model],
         f"--teacher-cache {model} holds other files (spanseek_config.json, "),
        (phrase + ["--init-from", model, "--stale-cache", model], f"--stale-cache {model} holds other files ("),
    ):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.startswith(f"spanseek train {argv[1]}: error: {message}") and err.count("\n") == 1, err
        assert not (tmp_path / "run").exists()
    assert sorted(p.name for p in tiny_model_dir.iterdir()) == kept
    (tmp_path / "cache").mkdir()  # an empty directory is a cache's place; --val-questions 0 reads no --val-index
    assert main(qsft + ["--cache", str(tmp_path / "cache"), "--val-index", nope, "--val-questions", "0"]) == 0
    assert (tmp_path / "cache" / "cache.json").is_file()


@pytest.mark.parametrize("command", ["phrase", "qsft"])
def test_a_hard_negatives_flag_that_is_no_file_is_refused_naming_it_before_the_model_loads(command, squad_file,
                                                                                          tiny_model_dir, tmp_path,
                                                                                          capsys, monkeypatch):
    """A missing --hard-negatives was 'nope.jsonl: No such file or directory', without the flag (for qsft once the
    model had loaded), and a directory 'runs:1: cannot be read ([Errno 21] Is a directory: ...)'."""
    from spanseek.trainer import qsft as qsft_module
    from spanseek.trainer import train as train_module

    monkeypatch.setattr(qsft_module, "load_model", lambda *a, **k: pytest.fail("the model was loaded"))
    monkeypatch.setattr(train_module, "load_training", lambda *a, **k: pytest.fail("the training file was read"))
    argv = ["train", command, "--train", str(squad_file), "--out", str(tmp_path / "run"), "--device", "cpu"]
    argv += ["--model", str(tiny_model_dir)] if command == "qsft" else []
    for given, message in ((tmp_path / "nope.jsonl", "no such file (`spanseek train mine` writes one)"),
                           (tmp_path, "is a directory; it names the JSON Lines file of `spanseek train mine`")):
        assert main([*argv, "--hard-negatives", str(given)]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"spanseek train {command}: error: --hard-negatives {given}") and message in err, err
        assert err.count("\n") == 1 and not (tmp_path / "run").exists()

def test_edge_values_are_accepted_and_the_next_ones_refused():
    base = {"train": "t.json", "out": "o", "hard_negatives": "h.jsonl"}  # (--hard-per-batch acts on them)
    for name, ok, bad in (("max_steps", None, 0), ("max_steps", 1, -1), ("stop_after", None, 0),
                          ("limit_questions", None, 0), ("warmup", 0.0, 1.0), ("prebatch", 0, -1),
                          ("hard_per_batch", 0, -1), ("snapshot_every", 0, -1), ("weight_decay", 0.0, -1e-9),
                          ("val_questions", 0, -1), ("epochs", 0.01, 0.0), ("checkpoint_every", 1, 0)):
        assert getattr(TrainConfig(**base, **{name: ok}), name) == ok
        with pytest.raises(ValueError, match=f"--{name.replace('_', '-')} must be"):
            TrainConfig(**base, **{name: bad})
    assert LossConfig(lambda_inb=0.0, lambda_pre=None, lambda_hard=0.0).pre_weight == 0.0
    with pytest.raises(ValueError, match=r"--lambda-pre \(lambda_pre\) must be a number >= 0"):
        LossConfig(lambda_pre=-1.0)
    assert QsftConfig(model="m", **base).prebatch_warmup == 0.0  # QSFT's own defaults stay valid
    with pytest.raises(ValueError, match="LoRA rank r must be >= 1"):
        LoraSettings(r=0)



def test_rank_checkpoints_refuses_an_out_it_reads_or_cannot_write_before_evaluating(squad_file, tiny_model_dir,
                                                                                  tmp_path, monkeypatch):
    """`train rank-checkpoints --out VALSETS/hard.jsonl` wrote the ranking over the corpus it had just read, and an
    --out that is a directory failed once every checkpoint was evaluated; with one checkpoint (or scores all equal)
    Kendall's tau was NaN, printed as `NaN`, which is not JSON."""
    import spanseek.indexer.evaluate as evaluate_module
    from spanseek.trainer.validation import rank_checkpoints

    vs = tmp_path / "vs"
    build_validation_sets(squad_file, vs, n_questions=5, reference_extra=5)
    hard = (vs / "hard.jsonl").read_bytes()
    monkeypatch.setattr(evaluate_module, "run_eval", lambda *a, **k: pytest.fail("evaluated before refusing --out"))
    for out, message in ((vs / "hard.jsonl", "is the validation sets' hard.jsonl, which the ranking reads"),
                         (tmp_path / "." / "vs" / "questions.json.gz", "is the validation sets' questions.json.gz"),
                         (tmp_path, "a directory; --out names the file to write a ranking to")):
        with pytest.raises(ValueError, match=re.escape(message)):
            rank_checkpoints(vs, [str(tiny_model_dir)], out, progress=False)
    assert (vs / "hard.jsonl").read_bytes() == hard
    em = {}  # (checkpoint, corpus) -> EM@1 the fake evaluation gives
    monkeypatch.setattr(evaluate_module, "run_eval", lambda q, ckpt, corpus, progress: {
        "phrase": {"em@1": em[ckpt, Path(corpus).stem]}})
    first, second = str(tiny_model_dir), str(tmp_path / "second")
    em |= {(first, "hard"): 10.0, (first, "gold"): 20.0, (first, "random"): 5.0, (first, "reference"): 30.0}
    assert rank_checkpoints(vs, [first], progress=False)["kendall_tau_vs_reference"] == dict.fromkeys(
        ("hard", "gold", "random"))  # one checkpoint: no order to compare
    em |= {(second, "hard"): 12.0, (second, "gold"): 15.0, (second, "random"): 5.0, (second, "reference"): 31.0}
    monkeypatch.setattr("spanseek.trainer.validation.resolve_model", lambda ckpt: Path(ckpt))
    ranked = rank_checkpoints(vs, [first, second], tmp_path / "rank.json", progress=False)
    assert ranked["kendall_tau_vs_reference"] == {"hard": 1.0, "gold": -1.0, "random": None}  # random: a tie
    assert json.loads((tmp_path / "rank.json").read_text()) == ranked

# --- a model's encoder config, SQuAD files ---


def test_an_invalid_encoder_config_names_its_file(tmp_path):
    path = tmp_path / "spanseek_config.json"
    path.write_text("{bad")
    with pytest.raises(ValueError, match=rf"^{re.escape(str(path))}: invalid JSON \(Expecting property name "
                       r"enclosed in double quotes at line 1, column 2\)$"):
        EncoderConfig.load(path)
    path.write_text('{"colour": 1}')
    with pytest.raises(ValueError, match=rf"^{re.escape(str(path))}: unknown encoder config keys"):
        EncoderConfig.load(path)
    path.write_text("[]")
    with pytest.raises(ValueError, match=rf"^{re.escape(str(path))}: expected a JSON object"):
        EncoderConfig.load(path)


def test_a_truncated_one_line_squad_file_gives_line_and_column(tmp_path):
    text = json.dumps(make_squad())
    cut = text[: text.index('"context": "') + 40]  # inside a string
    path = tmp_path / "train.json"
    path.write_text(cut)
    column = text.index('"context": "') + len('"context": ') + 1
    with pytest.raises(CorpusError) as info:
        load_squad(path)
    assert str(info.value) == f"{path}: invalid JSON (Unterminated string starting at line 1, column {column})"


# --- calibration examples, validation sets ---


def test_calibrate_from_examples_names_a_file_of_another_kind(tmp_path, tiny_model_dir, capsys):
    text = write_squad(tmp_path / "x.json", make_squad())
    with pytest.raises(CorpusError, match=rf"^{re.escape(str(text))}: not a NumPy \.npz file; expected the \.npz"):
        load_runs(text)
    other = tmp_path / "other.npz"
    np.savez(other, vectors=np.zeros(3))
    with pytest.raises(CorpusError, match=rf"^{re.escape(str(other))}: holds other arrays \(vectors\)"):
        load_runs(other)
    assert main(["train", "calibrate", "--from-examples", str(text), "--model", str(tiny_model_dir)]) == 2
    assert f"spanseek train calibrate: error: {text}: not a NumPy .npz file" in capsys.readouterr().err


def test_calibrate_leaves_an_out_that_is_not_a_calibration_file_alone(tiny_index, tiny_model_dir, tmp_path, capsys,
                                                                     monkeypatch):
    """`train calibrate --out FILE` over a question file (or any file not a calibration) replaced it with the fit,
    once every question had been searched; it is refused before the model is found, and the file kept."""
    from spanseek.core import model as model_module

    questions = write_squad(tmp_path / "q.json", make_squad())
    kept = questions.read_bytes()
    monkeypatch.setattr(model_module, "resolve_model", lambda *a, **k: pytest.fail("the model was looked up"))
    argv = ["train", "calibrate", "--index", str(tiny_index), "--questions", str(questions), "--model",
            str(tiny_model_dir)]
    assert main([*argv, "--out", str(questions)]) == 2
    assert capsys.readouterr().err == (f"spanseek train calibrate: error: --out {questions} exists and is not a "
                                       "calibration file (a JSON object with 'model_fingerprint'); it is left alone: "
                                       "write to a new file, or remove it first\n")
    assert questions.read_bytes() == kept
    # --examples over the question file replaced it with the examples, as --out did
    assert main([*argv, "--examples", str(questions)]) == 2
    assert capsys.readouterr().err == (f"spanseek train calibrate: error: --examples {questions} exists and is not "
                                       "the .npz of examples that --examples writes; it is left alone: write to a new "
                                       "file, or remove it first\n")
    assert questions.read_bytes() == kept
    from spanseek.trainer.calibrate import check_examples_out, save_runs

    earlier, empty = tmp_path / "examples.npz", tmp_path / "empty.npz"
    save_runs({}, earlier, {"questions": "q.json"})
    empty.write_bytes(b"")
    for fine in (earlier, empty, tmp_path / "new.npz", None):  # an earlier run's examples are written over
        check_examples_out(fine)

def test_valsets_checks_its_counts_and_takes_every_paragraph_of_a_small_file(squad_file, tmp_path, caplog):
    for given, flag in (({"n_questions": 0}, "--questions"), ({"bm25_k": 0}, "--bm25-k"),
                        ({"reference_extra": -1}, "--reference-extra")):
        with pytest.raises(ValueError, match=f"^{flag} must be an integer >= "):
            build_validation_sets(squad_file, tmp_path / "vs", **given)
    assert not (tmp_path / "vs").exists()
    with caplog.at_level(logging.WARNING, logger="spanseek.trainer.validation"):
        counts = build_validation_sets(squad_file, tmp_path / "vs", n_questions=5)  # 3000 extra of 114 paragraphs
    assert counts["reference"] == 40 * 3 and "has only 114 training paragraphs" in caplog.text
    one = write_squad(tmp_path / "one.json", make_squad(n_articles=2))
    with pytest.raises(CorpusError, match=rf"^{re.escape(str(one))}: no held-out questions"):
        build_validation_sets(one, tmp_path / "vs1")


@pytest.mark.parametrize("job, flag", [("phrase", "--init-from"), ("qsft", "--model"), ("filter", "--model")])
def test_a_model_flag_given_a_file_says_it_takes_a_model_directory_or_a_bundled_name(squad_file, tmp_path, capsys,
                                                                                      job, flag):
    """``--init-from weights.safetensors`` said "not a spanseek model directory (no spanseek_config.json)", which reads
    as if the file were a directory missing a file; a file is now named as a file, before anything is loaded."""
    weights = tmp_path / "weights.safetensors"
    weights.write_bytes(b"\0")
    assert main(["train", job, "--train", str(squad_file), "--out", str(tmp_path / "run"), flag, str(weights)]) == 2
    err = capsys.readouterr().err
    assert f"error: {flag} {weights}: a file, not a model; give a model directory" in err
    assert "or a bundled model's name (default)" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize(("argv", "flag"), [
    (["train", "phrase", "--train", "{missing}", "--out", "{tmp}/run"], "--train"),
    (["train", "mine", "--train", "{missing}", "--out", "{tmp}/hard.jsonl"], "--train"),
    (["train", "valsets", "--train", "{missing}", "--out", "{tmp}/valsets"], "--train"),
])
def test_a_file_flag_naming_no_file_is_refused_naming_the_flag(tmp_path, capsys, argv, flag):
    """A missing --train was 'missing.json: No such file or directory' (which of the command's files?): each file flag
    now names itself, in the shape eval's and index's give, before any model loads."""
    missing = tmp_path / "missing.json"
    assert main([a.format(missing=missing, tmp=tmp_path) for a in argv]) == 2
    assert capsys.readouterr().err == (f"spanseek {argv[0]} {argv[1]}: error: {flag} {missing}: No such file or "
                                       "directory\n")
