"""Fitting the span length bias (trainer.length_bias): the maximum-likelihood fit recovers a planted bias, and the
command writes a copy of the model whose only change is the config's ``length_bias``."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch


def test_fit_recovers_a_planted_bias():
    from trainer.length_bias import SpanTable, fit_bias

    L, Q, M = 4, 6000, 12
    g = torch.Generator().manual_seed(0)
    scores = torch.randn(Q, M, generator=g)
    lengths = torch.randint(0, L, (Q, M), generator=g)
    planted = torch.tensor([0.0, -0.5, 0.7, -1.5])
    gold = torch.multinomial(torch.softmax(scores + planted[lengths], dim=1), 1, generator=g)[:, 0]
    table = SpanTable(scores, lengths, gold)
    fitted = fit_bias(table, L)
    assert fitted[0] == 0.0
    assert torch.allclose(fitted, planted, atol=0.12), fitted
    assert table.nll(fitted) < table.nll(torch.zeros(L))


def test_span_table_lays_out_every_valid_span():
    """Padding columns never win and the gold column holds the gold span's score."""
    from trainer.length_bias import SpanTable

    table = SpanTable(torch.tensor([[1.0, 2.0, -torch.inf]]), torch.tensor([[0, 1, 0]]), torch.tensor([1]))
    expected = -(2.0 - np.log(np.exp(1.0) + np.exp(2.0)))
    assert float(table.nll(torch.zeros(2))) == pytest.approx(expected, rel=1e-6)
    assert float(table.nll(torch.tensor([0.0, 50.0]))) == pytest.approx(0.0, abs=1e-6)


def test_command_writes_the_model_with_its_bias(squad_file, tiny_model_dir, tmp_path):
    from core.model import CONFIG_NAME, WEIGHTS_NAME, load_model, phrase_fingerprint
    from trainer.length_bias import LengthBiasConfig, fit_length_bias

    out = tmp_path / "biased"
    summary = fit_length_bias(LengthBiasConfig(model=str(tiny_model_dir), train=str(squad_file), out=str(out),
                                               questions=300, val_questions=50, device="cpu", precision="fp32",
                                               progress=False))
    model = load_model(out)
    L = model.config.max_answer_tokens
    assert list(model.config.length_bias) == summary["length_bias"] and len(summary["length_bias"]) == L
    assert summary["length_bias"][0] == 0.0
    # make_squad's answers (a year or a name) are one or two word pieces, never three or more: those lengths sink
    assert max(summary["length_bias"][2:]) < min(summary["length_bias"][:2]) - 5
    before, after = summary["fit_nll"]
    assert after < before - 0.1
    assert summary["val_questions"] > 0 and summary["val_nll"][1] < summary["val_nll"][0]
    assert (out / WEIGHTS_NAME).read_bytes() == (tiny_model_dir / WEIGHTS_NAME).read_bytes()
    assert phrase_fingerprint(out) == phrase_fingerprint(tiny_model_dir)  # its indexes stay valid
    untouched = json.loads((tiny_model_dir / CONFIG_NAME).read_text())
    assert untouched["length_bias"] == []
    with pytest.raises(ValueError, match="is the model itself"):
        fit_length_bias(LengthBiasConfig(model=str(out), train=str(squad_file), out=str(out), questions=10,
                                         val_questions=0, device="cpu", precision="fp32", progress=False))
