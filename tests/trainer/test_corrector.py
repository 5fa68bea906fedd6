"""Target corrector (trainer.corrector) and joint training from a stale phrase cache (``--stale-cache``).

The corrector starts as the identity and learns an encoder's drift (an oracle: stale vectors under a known
transform); joint training reads hard passages from the cache instead of encoding them, corrects them, saves the
corrector with its checkpoint, and refuses a stale cache it cannot use.

    .venv/bin/python -m pytest -q tests/trainer/test_corrector.py
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from spanseek.core.io import load_squad, squad_questions
from spanseek.core.model import PhraseModel, load_model
from spanseek.trainer import loop as loop_module
from spanseek.trainer import mining
from spanseek.trainer import train as train_module
from spanseek.trainer.corrector import TargetCorrector, corrector_loss
from spanseek.trainer.phrase_cache import PhraseCache
from spanseek.trainer.train import STATE, train_phrase
from tests.trainer.test_train import fixed_batch_loss, tiny_train_config


def test_the_corrector_starts_as_the_identity():
    x = torch.randn(5, 16)
    assert torch.equal(TargetCorrector(16)(x), x)


def test_the_corrector_learns_the_drift_of_an_encoder():
    # stale vectors X; the encoder has since moved: fresh = X R + b (R a random rotation, b a shift)
    g = torch.Generator().manual_seed(0)
    d, n, q = 16, 256, 64
    X = torch.randn(n, d, generator=g)
    R, _ = torch.linalg.qr(torch.randn(d, d, generator=g))
    fresh = X @ R + 0.3 * torch.randn(d, generator=g)
    ok = torch.ones(n, dtype=torch.bool)
    corrector = TargetCorrector(d, hidden=64)
    opt = torch.optim.Adam(corrector.parameters(), lr=1e-2)
    first = None
    for _ in range(400):
        Q = 3 * torch.randn(q, d, generator=g)  # new questions every step
        loss, stats = corrector_loss(corrector, [(Q, ok)], fresh, X)
        first = first or (loss.item(), stats)
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert first[1]["stale_top1"] == first[1]["corrected_top1"] < 0.2  # identity at first: as stale as it gets
    with torch.no_grad():  # 1,024 questions it never saw
        loss, stats = corrector_loss(corrector, [(3 * torch.randn(1024, d, generator=g), ok)], fresh, X)
    assert stats["corrected_top1"] > 0.7 and stats["stale_top1"] < 0.2, stats
    assert loss.item() < 0.3 * first[0]


@pytest.fixture(scope="module")
def hard_file(tmp_path_factory, tiny_squad):
    out = tmp_path_factory.mktemp("hard") / "hard.jsonl"
    mining.mine(tiny_squad, out, chunk=50, progress=False)
    return out


def test_joint_training_reads_hard_passages_from_the_stale_cache(
    tmp_path, tiny_squad, tiny_config, tiny_model_dir, hard_file, monkeypatch
):
    cfg = tiny_train_config(tiny_squad, tiny_config, tmp_path / "run", init_from=str(tiny_model_dir),
                            hard_negatives=str(hard_file), hard_per_batch=2, stale_cache=str(tmp_path / "cache"),
                            corrector_lr=1e-2)
    collated, hard_seen = [], []
    collate, loss_fn = train_module.collate, loop_module.phrase_loss
    monkeypatch.setattr(train_module, "collate", lambda *a, **k: collated.append(a[3]) or collate(*a, **k))
    monkeypatch.setattr(loop_module, "phrase_loss",
                        lambda *a, **k: hard_seen.append(k["hard"]) or loss_fn(*a, **k))
    # without dropout, a step's fresh vectors are the cached ones until the encoder moves (with it, a step's own
    # mask moves them, and top-1 agreement at step 1 is a matter of the draw)
    monkeypatch.setattr(loop_module, "fast_dropout", lambda model, device: [
        setattr(m, "p", 0.0) for m in model.modules() if isinstance(m, torch.nn.Dropout)])
    questions = squad_questions(load_squad(tiny_squad))
    before = fixed_batch_loss(load_model(tiny_model_dir, for_inference=False), questions, cfg.loss)
    summary = train_phrase(cfg)

    assert set(collated) == {0}  # no hard passage was encoded by the phrase encoder ...
    assert all(h is not None and len(h.vectors) for h in hard_seen)  # ... yet every step had hard negatives,
    cache = PhraseCache(tmp_path / "cache")
    rows = torch.from_numpy(np.asarray(cache.vectors, dtype=np.float32))
    # at step 1 the corrector is the identity: the hard negatives are rows of the cache
    exact = "donot_use_mm_for_euclid_dist"
    gap = torch.cdist(hard_seen[0].vectors.float(), rows, compute_mode=exact).min(1).values
    assert gap.max() < 1e-5

    after = fixed_batch_loss(load_model(tmp_path / "run" / "last", for_inference=False), questions, cfg.loss)
    assert after < 0.8 * before, (before, after)
    report = summary["stale_cache"]
    assert report["corrector"] is True
    first, late = report["top1_agreement_first_10pct"], report["top1_agreement_last_10pct"]
    assert first["stale"] == first["corrected"] == 1.0  # step 1: the cache is the model's own vectors
    assert late["stale"] < 1.0  # the encoder moved away from its cache ...
    state = torch.load(tmp_path / "run" / "last" / STATE, weights_only=False)
    assert state["corrector"]["down.weight"].abs().sum() > 0  # ... and the corrector learned, and was saved

    # a resumed run loads the corrector it saved
    loaded = []
    real_load = TargetCorrector.load_state_dict
    monkeypatch.setattr(TargetCorrector, "load_state_dict", lambda self, sd, *a, **k: loaded.append(sd) or
                        real_load(self, sd, *a, **k))
    train_phrase(dataclasses.replace(cfg, max_steps=22))
    assert loaded and torch.equal(loaded[0]["down.weight"], state["corrector"]["down.weight"])


def test_without_the_corrector_stale_vectors_are_used_as_they_are(
    tmp_path, tiny_squad, tiny_config, tiny_model_dir, hard_file
):
    cfg = tiny_train_config(tiny_squad, tiny_config, tmp_path / "run", init_from=str(tiny_model_dir),
                            hard_negatives=str(hard_file), hard_per_batch=2, stale_cache=str(tmp_path / "cache"),
                            corrector=False)
    report = train_phrase(dataclasses.replace(cfg, max_steps=6))["stale_cache"]
    assert report["corrector"] is False
    assert report["top1_agreement_last_10pct"]["stale"] == report["top1_agreement_last_10pct"]["corrected"]
    assert "corrector" not in torch.load(tmp_path / "run" / "last" / STATE, weights_only=False)


def test_a_stale_cache_needs_a_starting_model_and_hard_negatives(tmp_path, tiny_squad, tiny_config, hard_file):
    torch.manual_seed(0)
    model_dir = PhraseModel(tiny_config).save(tmp_path / "model")
    with pytest.raises(ValueError, match="--stale-cache .* would go unused: it acts on the model of --init-from"):
        tiny_train_config(tiny_squad, tiny_config, tmp_path / "run", stale_cache=str(tmp_path / "c"),
                          hard_negatives=str(hard_file))
    cfg = tiny_train_config(tiny_squad, tiny_config, tmp_path / "run", stale_cache=str(tmp_path / "c"),
                            init_from=str(model_dir))
    with pytest.raises(ValueError, match="needs --init-from and --hard-negatives"):
        train_phrase(cfg)
