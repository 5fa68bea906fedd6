"""The shared training loop (trainer.loop): joint training and query-side fine-tuning run through it.

A QSFT batch (token vectors read from the phrase cache, no [CLS]) gives the loss of the joint batch of the same
windows (encoded fresh, with [CLS]) when the phrase encoder has not moved: the two modes differ only in where the
vectors come from. Both modes train through the loop on the tiny model, and QSFT, like joint training, resumes a
killed run at its saved step.

    .venv/bin/python -m pytest -q tests/trainer/test_loop.py
"""

from __future__ import annotations

import json

import pytest
import torch

from spanseek.core.holdout import Holdout
from spanseek.core.io import load_squad, squad_questions
from spanseek.core.model import load_model, load_tokenizer
from spanseek.trainer import loop as loop_module
from spanseek.trainer.arguments import LossConfig, QsftConfig, TrainConfig
from spanseek.trainer.checkpoints import STATE
from spanseek.trainer.data import build_windows
from spanseek.trainer.losses import phrase_loss
from spanseek.trainer.phrase_cache import fill_cache
from spanseek.trainer.qsft import QsftMode, train_qsft
from spanseek.trainer.train import JointMode, train_phrase


def _loss(mode, model, windows, cfg):
    batch = mode.batch(windows)
    with torch.no_grad():
        H, hard = mode.passages(batch)
        q_start, q_end = model.encode_questions(batch.q_input_ids, batch.q_attention_mask)
        loss = phrase_loss(H, q_start, q_end, batch.start_ok[: batch.n_windows], batch.end_ok[: batch.n_windows],
                           batch.q_passage, batch.gold_start, batch.gold_end, cfg.loss,
                           max_answer_tokens=model.config.max_answer_tokens)
    assert hard is None
    return loss.item(), H[batch.q_passage, batch.gold_start]


def test_a_cached_batch_gives_the_loss_of_the_encoded_batch(tmp_path, tiny_model_dir, tiny_squad):
    model = load_model(tiny_model_dir, for_inference=False).eval()  # no dropout: one encoding of each window
    tok = load_tokenizer(model.config)
    c = model.config
    windows, _ = build_windows(squad_questions(load_squad(tiny_squad)), tok, c.max_seq_len, c.stride,
                               c.max_answer_tokens)
    cache = fill_cache(tmp_path / "cache", model, tiny_model_dir, tok, [(w.input_ids, w.flags) for w in windows],
                       progress=False)
    cfg = TrainConfig(train="t", out="o", loss=LossConfig(lambda_span=0.5))
    joint = JointMode(cfg, model, tok, torch.device("cpu"), encode_hard=False)
    qsft = QsftMode(QsftConfig(model="m", train="t", out="o"), cache, {}, tok, c.max_query_len)
    batch = windows[:5]
    assert len({len(w.input_ids) for w in batch}) > 1  # rows of different lengths: padding is exercised
    joint_loss, joint_gold = _loss(joint, model, batch, cfg)
    qsft_loss, qsft_gold = _loss(qsft, model, batch, cfg)
    torch.testing.assert_close(qsft_gold, joint_gold, atol=2e-3, rtol=2e-3)  # the cache holds fp16
    assert qsft_loss == pytest.approx(joint_loss, rel=2e-3)


def test_both_modes_train_through_the_shared_loop_and_resume(
    tmp_path, tiny_squad, tiny_config, tiny_model_dir, monkeypatch
):
    steps = []
    loss_fn = loop_module.phrase_loss
    monkeypatch.setattr(loop_module, "phrase_loss", lambda *a, **k: steps.append(a[8]) or loss_fn(*a, **k))
    joint = TrainConfig(train=str(tiny_squad), out=str(tmp_path / "joint"), encoder=tiny_config, max_steps=3,
                        batch_windows=4, val_questions=0, precision="fp32", device="cpu", progress=False)
    assert train_phrase(joint)["steps"] == 3 and len(steps) == 3
    qsft = QsftConfig(model=str(tiny_model_dir), train=str(tiny_squad), out=str(tmp_path / "qsft"), max_steps=4,
                      batch_windows=4, checkpoint_every=2, val_questions=0, precision="fp32", device="cpu",
                      progress=False)
    assert steps == [joint.loss] * 3  # each step's loss came from the loop, with the mode's loss config

    # QSFT killed in its step 3 resumes at the step it saved (2), as joint training does
    def dies_in_step_3(*a, **k):
        steps.append(a[8])
        if len(steps) == 3 + 3:
            raise KeyboardInterrupt
        return loss_fn(*a, **k)

    monkeypatch.setattr(loop_module, "phrase_loss", dies_in_step_3)
    with pytest.raises(KeyboardInterrupt):
        train_qsft(qsft)
    assert torch.load(tmp_path / "qsft" / "last" / STATE, weights_only=False)["step"] == 2
    del steps[3:]
    summary = train_qsft(qsft)
    assert summary["steps"] == 4 and steps[3:] == [qsft.loss] * 2  # steps 3 and 4 only
    # each run's saved config records the pre-batch weight its loss used (the in-batch weight unless given)
    assert json.loads((tmp_path / "joint" / "train_config.json").read_text())["loss"]["lambda_pre"] == 256.0
    assert json.loads((tmp_path / "qsft" / "qsft_config.json").read_text())["loss"]["lambda_pre"] == 4.0


def test_the_split_is_one_definition():
    data = [{"title": str(i), "paragraphs": []} for i in range(45)]
    train, held = Holdout().split(data)
    assert [a["title"] for a in held] == ["7", "27"] and len(train) == 43
    assert [a["title"] for a in Holdout(every=10, offset=0).split(data)[1]] == ["0", "10", "20", "30", "40"]
    assert TrainConfig(train="t", out="o").holdout == QsftConfig(model="m", train="t", out="o").holdout == Holdout()
    with pytest.raises(ValueError, match="offset < every"):
        Holdout(every=5, offset=5)
