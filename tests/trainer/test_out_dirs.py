"""What training jobs do with their --out directory: nothing of the user's is deleted, two runs never share one, a
run resumes only a checkpoint that fits it (and the one a kill between checkpoint renames left), and inputs
that cannot be trained on are refused with the reason.

    .venv/bin/python -m pytest -q tests/trainer/test_out_dirs.py
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import logging
import re
import shutil

import pytest
import torch

from spanseek.core.integrity import writer_lock
from spanseek.core.model import CONFIG_NAME, WEIGHTS_NAME, ModelError, load_model
from spanseek.trainer import filter as filter_module
from spanseek.trainer import loop as loop_module
from spanseek.trainer import train as train_module
from spanseek.trainer.arguments import FilterConfig, QsftConfig, ReaderTrainConfig
from spanseek.trainer.average import average_checkpoints
from spanseek.trainer.qsft import train_qsft
from spanseek.trainer.reader import train_reader
from spanseek.trainer.rundir import RUN_LOCK
from spanseek.trainer.train import STATE, TrainConfig, train_phrase
from tests.conftest import make_squad
from tests.trainer.conftest import encoder_flags


def _user_dir(path):
    path.mkdir()
    (path / "notes.txt").write_text("precious")
    (path / "sub").mkdir()
    (path / "sub" / "data.txt").write_text("more")
    return path


def _untouched(path) -> bool:
    return (sorted(p.relative_to(path).as_posix() for p in path.rglob("*")) == ["notes.txt", "sub", "sub/data.txt"]
            and (path / "notes.txt").read_text() == "precious")


def _run_config(tiny_squad, tiny_config, out, **kw) -> TrainConfig:
    return TrainConfig(train=str(tiny_squad), out=str(out), **encoder_flags(tiny_config, kw), batch_windows=4,
                       prebatch=1, val_questions=0, precision="fp32", device="cpu", progress=False, **kw)


@pytest.mark.parametrize("job", ["average", "filter"])
def test_an_out_that_is_not_a_model_directory_is_left_alone(tmp_path, tiny_model_dir, tiny_squad, job, monkeypatch):
    user = _user_dir(tmp_path / "userdir")
    with pytest.raises(ValueError, match="exists and is not a model directory"):
        if job == "average":
            average_checkpoints([str(tiny_model_dir)], user)
        else:
            monkeypatch.setattr(filter_module, "load_model", lambda *a, **k: pytest.fail("refused only after loading"))
            filter_module.train_filter(FilterConfig(model=str(tiny_model_dir), train=str(tiny_squad), out=str(user)))
    assert _untouched(user)


def test_average_refuses_to_write_over_its_checkpoint_and_replaces_a_model_directory(tmp_path, tiny_model_dir):
    model = shutil.copytree(tiny_model_dir, tmp_path / "m")
    for out in (model, model / "avg", tmp_path):
        with pytest.raises(ModelError, match="is, holds or lies inside the model"):
            average_checkpoints([str(model)], out)
    assert sorted(p.name for p in model.iterdir()) == sorted([CONFIG_NAME, WEIGHTS_NAME])
    earlier = shutil.copytree(tiny_model_dir, tmp_path / "earlier")  # an older model there: replaced, as before
    average_checkpoints([str(model)], earlier, dtype=torch.float16)
    assert load_model(earlier).config == load_model(model).config


def test_a_second_run_into_the_same_out_is_refused_at_its_start(tmp_path, tiny_squad, tiny_config, monkeypatch):
    out = tmp_path / "run"
    out.mkdir()
    monkeypatch.setattr(train_module, "load_training", lambda *a: pytest.fail("refused only after loading"))
    with writer_lock(out, name=RUN_LOCK) as locked:  # what the first run holds for its life
        assert locked
        with pytest.raises(ValueError, match="another run holds it"):
            train_phrase(_run_config(tiny_squad, tiny_config, out, max_steps=1))
    assert [p.name for p in out.iterdir()] == [RUN_LOCK]


def test_a_run_holds_its_out_for_its_life_and_releases_it(tmp_path, tiny_squad, tiny_config, monkeypatch):
    out = tmp_path / "run"
    held = []
    finish = train_module.finish

    def second_run_meanwhile(cfg, summary):
        with writer_lock(out, name=RUN_LOCK) as locked:
            held.append(not locked)
        return finish(cfg, summary)

    monkeypatch.setattr(train_module, "finish", second_run_meanwhile)
    train_phrase(_run_config(tiny_squad, tiny_config, out, max_steps=1))
    with writer_lock(out, name=RUN_LOCK) as locked:
        assert held == [True] and locked


def test_resuming_with_another_config_is_refused_naming_the_settings(tmp_path, tiny_squad, tiny_config):
    out = tmp_path / "run"
    train_phrase(_run_config(tiny_squad, tiny_config, out, max_steps=1))
    before = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    lora = tiny_config.lora
    other = dataclasses.replace(tiny_config, lora=dataclasses.replace(lora, r=lora.r * 2), max_answer_tokens=5)
    with pytest.raises(ValueError) as e:
        train_phrase(_run_config(tiny_squad, other, out, max_steps=2))
    message = str(e.value)
    assert "\n" not in message and "use a new --out" in message
    assert f"lora.r {lora.r} (this run: {lora.r * 2})" in message and "max_answer_tokens 6 (this run: 5)" in message
    assert {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()} == before



def test_resuming_with_another_learning_rate_is_refused_and_a_longer_run_is_not(tmp_path, tiny_squad, tiny_config):
    """A resumed optimiser keeps its first learning rate: --lr 5e-4 on resume ran on at the first one while
    train_config.json recorded 5e-4. Another recipe is refused naming it; more steps extend the run."""
    out = tmp_path / "run"
    first = _run_config(tiny_squad, tiny_config, out, max_steps=1)
    train_phrase(first)
    recorded = (out / "train_config.json").read_bytes()
    with pytest.raises(ValueError, match=r"other settings: lr 0\.001 \(this run: 0\.0005\); resume with the same"):
        train_phrase(dataclasses.replace(first, lr=5e-4, max_steps=2))
    assert (out / "train_config.json").read_bytes() == recorded
    assert train_phrase(dataclasses.replace(first, max_steps=2))["steps"] == 2


def test_a_run_started_with_a_flag_it_left_unused_resumes(tmp_path, tiny_squad, tiny_config):
    """A run started with --lambda-hard 2 and no --hard-negatives (which the run left unused; such a flag is now
    refused) could not be resumed: with the flag it was refused as unused, without it as a run of other settings. The
    settings a run leaves unused are not compared; the ones it uses still are."""
    out = tmp_path / "run"
    first = _run_config(tiny_squad, tiny_config, out, max_steps=1)
    train_phrase(first)
    settings = json.loads((out / "train_config.json").read_text())
    settings["loss"]["lambda_hard"] = 2.0
    settings["corrector_lr"] = 5e-4
    (out / "train_config.json").write_text(json.dumps(settings))
    with pytest.raises(ValueError, match=r"other settings: lr 0\.001 \(this run: 0\.0005\); resume with the same"):
        train_phrase(dataclasses.replace(first, lr=5e-4, max_steps=2))
    assert train_phrase(dataclasses.replace(first, max_steps=2))["steps"] == 2


def test_a_phrase_run_resumes_on_its_questions_moved_and_refuses_them_edited(tmp_path, tiny_squad, tiny_config):
    """A phrase run's resume check held the training file's path, so the same questions in a moved or renamed file
    were refused; it checks the questions themselves now, as a QSFT run does."""
    out = tmp_path / "run"
    first = _run_config(tiny_squad, tiny_config, out, max_steps=1)
    train_phrase(first)
    moved = tmp_path / "elsewhere" / "renamed.json.gz"
    moved.parent.mkdir()
    shutil.copy(tiny_squad, moved)
    assert train_phrase(dataclasses.replace(first, train=str(moved), max_steps=2))["steps"] == 2
    with gzip.open(moved, "rt", encoding="utf-8") as f:
        data = json.load(f)
    data["data"][0]["paragraphs"][0]["qas"][0]["question"] = "Which question was edited?"
    edited = tmp_path / "edited.json"
    edited.write_text(json.dumps(data), encoding="utf-8")
    recorded = (out / "train_config.json").read_bytes()
    with pytest.raises(ValueError, match=f"--out {out} holds a run trained on other questions \\(.*\\): use a new "
                       "--out for a run on these questions, or remove"):
        train_phrase(dataclasses.replace(first, train=str(edited), max_steps=3))
    assert (out / "train_config.json").read_bytes() == recorded

def test_weights_that_do_not_fit_their_config_name_the_file_and_the_tensor(tmp_path, tiny_model_dir):
    model = shutil.copytree(tiny_model_dir, tmp_path / "m")
    config = json.loads((model / CONFIG_NAME).read_text())
    config["lora"]["r"] *= 2
    (model / CONFIG_NAME).write_text(json.dumps(config))
    with pytest.raises(ModelError) as e:
        load_model(model)
    message = str(e.value)
    assert "\n" not in message and message.startswith(f"{model / WEIGHTS_NAME}: weight ")
    r = config["lora"]["r"]
    assert "lora_A" in message and f"has shape ({r // 2}, 32), the model config needs ({r}, 32)" in message


@pytest.mark.parametrize("saving", ["complete", "incomplete"])
def test_a_run_killed_between_the_checkpoint_renames_resumes(tmp_path, tiny_squad, tiny_config, monkeypatch, caplog,
                                                             saving):
    out = tmp_path / "run"
    cfg = _run_config(tiny_squad, tiny_config, out, max_steps=4, checkpoint_every=2)
    rename = loop_module.Path.rename
    renames = []

    def dies_before_the_second_checkpoint_is_in_place(self, target):
        if (self.name, loop_module.Path(target).name) == ("last.saving", "last"):
            renames.append(1)
            if len(renames) == 2:
                raise KeyboardInterrupt
        return rename(self, target)

    monkeypatch.setattr(loop_module.Path, "rename", dies_before_the_second_checkpoint_is_in_place)
    with pytest.raises(KeyboardInterrupt):
        train_phrase(cfg)
    monkeypatch.undo()
    assert sorted(p.name for p in out.iterdir() if p.name.startswith("last")) == ["last.old", "last.saving"]
    if saving == "incomplete":  # killed while writing it: the previous checkpoint is the one to resume
        (out / "last.saving" / STATE).unlink()
    calls = []
    loss_fn = loop_module.phrase_loss
    monkeypatch.setattr(loop_module, "phrase_loss", lambda *a, **k: calls.append(1) or loss_fn(*a, **k))
    with caplog.at_level(logging.INFO, logger="spanseek.trainer"):
        summary = train_phrase(dataclasses.replace(cfg, max_steps=6))
    step = 4 if saving == "complete" else 2
    source = out / ("last.saving" if saving == "complete" else "last.old")
    assert f"resuming from {source}" in caplog.text and f"resumed from {out / 'last'} at step {step}" in caplog.text
    assert summary["steps"] == 6 and len(calls) == 6 - step
    assert sorted(p.name for p in out.iterdir() if p.name.startswith("last")) == ["last"]
    assert torch.load(out / "last" / STATE, weights_only=False)["step"] == 6


def test_a_training_file_without_questions_is_refused_in_one_line(tmp_path, tiny_backbone, capsys):
    from spanseek.cli import main

    squad = make_squad(n_articles=40)
    for article in squad["data"]:
        for para in article["paragraphs"]:
            para["qas"] = []
    path = tmp_path / "noqas.json.gz"
    with gzip.open(path, "wt", encoding="utf-8") as f:
        json.dump(squad, f)
    args = ["train", "phrase", "--train", str(path), "--out", str(tmp_path / "run"), "--backbone", str(tiny_backbone),
            "--max-seq-len", "32", "--stride", "8", "--max-answer-tokens", "6", "--max-steps", "1",
            "--val-questions", "0", "--precision", "fp32", "--device", "cpu", "--no-progress"]
    assert main(args) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if not line.startswith(("INFO", "WARNING"))]
    assert err == [f"spanseek train phrase: error: --train {path}: no questions in it (40 articles); training learns "
                   "from the questions of a SQuAD-format file (each paragraph's qas)"]


# --- a run refused at its start leaves no --out behind ---


def _refused_run_config(tiny_squad, tiny_config, out, bad: str, missing) -> TrainConfig:
    if bad == "init-from":
        return _run_config(tiny_squad, tiny_config, out, max_steps=1, init_from=str(missing))
    return _run_config(tiny_squad, dataclasses.replace(tiny_config, backbone=str(missing)), out, max_steps=1)


@pytest.mark.parametrize("bad", ["init-from", "backbone"])
def test_a_run_refused_for_its_model_leaves_no_out_it_made(tmp_path, tiny_squad, tiny_config, bad):
    out = tmp_path / "runs" / "phrase"  # its parent is made too
    with pytest.raises(ModelError, match="no such directory"):
        train_phrase(_refused_run_config(tiny_squad, tiny_config, out, bad, tmp_path / "no-model"))
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("bad", ["init-from", "backbone"])
def test_a_run_refused_for_its_model_keeps_an_out_that_was_there(tmp_path, tiny_squad, tiny_config, bad):
    empty, user = tmp_path / "empty", _user_dir(tmp_path / "userdir")
    empty.mkdir()
    for out in (empty, user):
        with pytest.raises(ModelError, match="no such directory"):
            train_phrase(_refused_run_config(tiny_squad, tiny_config, out, bad, tmp_path / "no-model"))
    assert empty.is_dir() and not list(empty.iterdir()) and _untouched(user)


def test_a_qsft_run_refused_for_its_model_makes_no_out(tmp_path, tiny_squad):
    out = tmp_path / "qsft"
    with pytest.raises(ModelError, match="not a spanseek model directory"):
        train_qsft(QsftConfig(model=str(tmp_path / "no-model"), train=str(tiny_squad), out=str(out), device="cpu",
                              progress=False))
    assert not out.exists()


def test_the_cli_refuses_a_mistyped_init_from_in_one_line_and_makes_no_out(tmp_path, tiny_squad, capsys):
    from spanseek.cli import main

    out = tmp_path / "run"
    assert main(["train", "phrase", "--train", str(tiny_squad), "--out", str(out), "--init-from", "defualt",
                 "--device", "cpu", "--no-progress"]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if not line.startswith(("INFO", "WARNING"))]
    assert err == ["spanseek train phrase: error: --init-from defualt: not a spanseek model directory (there is no such directory) nor "
                   "a bundled model (bundled: base, default, default-2026-11)"]
    assert not out.exists()


def test_a_run_that_fails_after_writing_keeps_what_it_wrote(tmp_path, tiny_squad, tiny_config, monkeypatch):
    out = tmp_path / "run"

    def killed(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(train_module, "train_loop", killed)  # after train_config.json is written
    with pytest.raises(KeyboardInterrupt):
        train_phrase(_run_config(tiny_squad, tiny_config, out, max_steps=1))
    assert sorted(p.name for p in out.iterdir()) == [RUN_LOCK, "train_config.json"]


# --- spanseek train valsets --out ---


def _valsets(squad_file, out):
    from spanseek.trainer.validation import build_validation_sets

    return build_validation_sets(squad_file, out, n_questions=6, bm25_k=2, reference_extra=5)


def test_valsets_refuse_a_model_directory_and_other_files(tmp_path, squad_file, tiny_model_dir):
    model = shutil.copytree(tiny_model_dir, tmp_path / "model")
    before = {p.name: p.read_bytes() for p in model.iterdir()}
    with pytest.raises(ValueError, match=rf"^--out {model} is a model directory; it is left alone"):
        _valsets(squad_file, model)
    assert {p.name: p.read_bytes() for p in model.iterdir()} == before
    user = _user_dir(tmp_path / "userdir")
    with pytest.raises(ValueError, match=rf"^--out {user} holds files that are not validation sets \(notes.txt, "
                                         r"sub\); it is left alone"):
        _valsets(squad_file, user)
    assert _untouched(user)
    with pytest.raises(ValueError, match=rf"^--out {user / 'notes.txt'} is a file"):
        _valsets(squad_file, user / "notes.txt")
    assert _untouched(user)


def test_valsets_rewrite_their_own_output_the_same(tmp_path, squad_file):
    out = tmp_path / "valsets"
    counts = _valsets(squad_file, out)
    first = {p.name: p.read_bytes() for p in out.iterdir() if p.name != "questions.json.gz"}  # gzip has a mtime
    (out / "counts.json").unlink()  # a run killed before its end: what it wrote, and a scratch file
    (out / ".hard.jsonl.x1y2.tmp").write_text("partial")
    assert _valsets(squad_file, out) == counts
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.name != "questions.json.gz"} == first  # scratch gone


def test_valsets_hold_their_out_while_they_write_and_a_second_run_is_refused(tmp_path, squad_file):
    """A killed run's scratch files were accepted and left in --out for good; they are removed under the lock that a
    run holds, so a run that is still writing keeps its own: a second run into its --out is refused."""
    from spanseek.core.integrity import writer_lock
    from spanseek.trainer.validation import LOCK

    out = tmp_path / "valsets"
    out.mkdir()
    scratch = out / ".reference.jsonl.a1b2.tmp"
    scratch.write_text("being written")
    with writer_lock(out, name=LOCK) as locked:  # a run that is writing
        assert locked
        with pytest.raises(ValueError, match=rf"^--out {out}: another `spanseek train valsets` is writing to it "
                                             rf"\(lock {out / LOCK}\)"):
            _valsets(squad_file, out)
        assert scratch.read_text() == "being written"
    _valsets(squad_file, out)  # the writer was killed: its scratch is removed
    assert not scratch.exists() and (out / "counts.json").is_file()


def test_the_cli_refuses_valsets_into_a_model_directory_in_one_line(tmp_path, squad_file, tiny_model_dir, capsys):
    from spanseek.cli import main

    model = shutil.copytree(tiny_model_dir, tmp_path / "model")
    assert main(["train", "valsets", "--train", str(squad_file), "--out", str(model)]) == 2
    assert capsys.readouterr().err.strip() == (f"spanseek train valsets: error: --out {model} is a model directory; it is "
                                               "left alone: write the validation sets to a new directory")
    assert sorted(p.name for p in model.iterdir()) == sorted([CONFIG_NAME, WEIGHTS_NAME])


@pytest.fixture(scope="module")
def train_into(tiny_squad, tiny_config, tiny_backbone, tiny_model_dir):
    """A function that runs a training job of a kind (phrase, qsft or reader) into ``out`` for ``max_steps`` steps."""
    def train(kind, out, max_steps=2):
        common = dict(train=str(tiny_squad), out=str(out), max_steps=max_steps, val_questions=0, precision="fp32",
                      device="cpu", progress=False)
        if kind == "phrase":
            return train_phrase(_run_config(tiny_squad, tiny_config, out, max_steps=max_steps))
        if kind == "qsft":
            return train_qsft(QsftConfig(model=str(tiny_model_dir), batch_windows=4, **common))
        return train_reader(ReaderTrainConfig(backbone=str(tiny_backbone), max_len=64, stride=16, max_query_len=16,
                                              batch_size=4, **common))
    return train


@pytest.fixture(scope="module")
def runs(tmp_path_factory, train_into):
    """One run of each kind that resumes from OUT/last, each stopped after a step: phrase, qsft and reader."""
    root = tmp_path_factory.mktemp("runs")
    for kind in ("phrase", "qsft", "reader"):
        train_into(kind, root / kind, max_steps=1)
    return root


def _files(out) -> dict:
    return {p.relative_to(out).as_posix(): p.read_bytes() for p in out.rglob("*") if p.is_file()}


@pytest.mark.parametrize("theirs", ["phrase", "qsft", "reader"])
@pytest.mark.parametrize("ours", ["phrase", "qsft", "reader"])
def test_a_run_into_the_out_of_another_kind_of_run_is_refused_naming_it(runs, train_into, tmp_path, ours, theirs):
    """A phrase run into a reader's --out said "spanseek_config.json: No such file or directory"; a phrase or QSFT
    run into the other's said "loaded state dict contains a parameter group that doesn't match ...", after writing
    its settings (and QSFT its phrase cache) among the other run's files. Refused now before any work, the other run
    left as it was; a run of the same kind resumes."""
    out = tmp_path / theirs
    shutil.copytree(runs / theirs, out)
    before = _files(out)
    if ours == theirs:
        assert train_into(ours, out)["steps"] == 2
        return
    with pytest.raises(ValueError) as e:
        train_into(ours, out)
    assert str(e.value) == (f"--out {out} holds a `spanseek train {theirs}` run, not a {ours} run; it is left as it "
                            f"is: use a new --out for this {ours} run")
    assert _files(out) == before


@pytest.mark.parametrize("ours", ["phrase", "qsft", "reader"])
def test_an_out_that_is_a_model_directory_or_a_file_is_refused_and_left_alone(runs, train_into, tmp_path, ours):
    """A run into a model directory (a run's OUT/last, given by mistake) trained, writing OUT/last, train.lock and
    the rest among the model's files, where the outer run's next checkpoint would replace them all; an --out that
    is a file said only "File exists"."""
    for kind, name in (("phrase", "spanseek_config.json"), ("reader", "reader_config.json")):
        model = tmp_path / kind
        shutil.copytree(runs / kind / "last", model)
        before = _files(model)
        with pytest.raises(ValueError, match=rf"^--out {re.escape(str(model))} is a model directory \({name}\), "
                                             "not a run directory: a run writes its model to OUT/last; it is left"):
            train_into(ours, model)
        assert _files(model) == before
    (tmp_path / "file").write_text("mine")
    with pytest.raises(ValueError, match=r"is a file, not a run directory: give a new directory"):
        train_into(ours, tmp_path / "file")
    assert (tmp_path / "file").read_text() == "mine"


def test_a_damaged_settings_file_is_named_when_a_run_resumes(runs, tmp_path, tiny_squad, tiny_config):
    """A cut-short OUT/train_config.json said only "Unterminated string starting at: line 5 column 3 (char 99)"."""
    out = tmp_path / "phrase"
    shutil.copytree(runs / "phrase", out)
    settings = out / "train_config.json"
    settings.write_bytes(settings.read_bytes()[:100])
    with pytest.raises(ValueError, match=rf"^{re.escape(str(settings))}: not a run's settings \(Unterminated string"):
        train_phrase(_run_config(tiny_squad, tiny_config, out, max_steps=2))
    settings.write_text("[]")
    with pytest.raises(ValueError, match=r"not a run's settings \(a JSON object\); remove it to resume"):
        train_phrase(_run_config(tiny_squad, tiny_config, out, max_steps=2))


def test_a_qsft_run_resumed_with_another_learning_rate_is_refused_and_a_longer_one_is_not(runs, tmp_path,
                                                                                          tiny_squad, tiny_model_dir):
    """QSFT resumed with --lr 0.5 ran on at the first run's 2e-4 (its optimizer's) while qsft_config.json recorded
    0.5; another seed changed the batch order midway. Refused as phrase and reader runs are; more steps extend it."""
    out = tmp_path / "qsft"
    shutil.copytree(runs / "qsft", out)
    before = _files(out)
    first = QsftConfig(model=str(tiny_model_dir), train=str(tiny_squad), out=str(out), max_steps=1, batch_windows=4,
                       val_questions=0, precision="fp32", device="cpu", progress=False)
    with pytest.raises(ValueError, match=r"other settings: seed 0 \(this run: 7\); lr 0\.0002 \(this run: 0\.5\); "
                                         "resume with the same"):
        train_qsft(dataclasses.replace(first, lr=0.5, seed=7, max_steps=2))
    assert _files(out) == before
    assert train_qsft(dataclasses.replace(first, max_steps=2))["steps"] == 2
