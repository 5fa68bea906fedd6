"""FastDropout: the distribution of nn.Dropout (rate, scale, independence, gradient), repeatable from torch's seed,
and swapped into a real LoRA phrase model without changing what it computes in eval mode."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from spanseek.trainer.dropout import ATTENTION, FastDropout, dropout_threshold, fast_dropout, keep_mask


@pytest.mark.parametrize("p", [0.05, 0.1, 0.5])
def test_the_drop_rate_is_p_and_kept_values_are_scaled(p):
    torch.manual_seed(0)
    x = torch.rand(500_000) + 1.0  # no zeros: a zero output is a dropped element
    y = FastDropout(p).train()(x)
    dropped = y == 0
    sd = (p * (1 - p) / x.numel()) ** 0.5
    assert abs(dropped.float().mean().item() - p) < 5 * sd
    torch.testing.assert_close(y[~dropped], x[~dropped] / (1 - p))


def test_masks_are_independent_between_neighbours_and_calls():
    torch.manual_seed(1)
    p, n = 0.1, 400_000
    a, b = keep_mask(torch.Size((n,)), p), keep_mask(torch.Size((n,)), p)
    sd = (p * p * (1 - p * p) / n) ** 0.5  # both of a pair dropped: p^2 when independent
    for first, second in ((a[:-1], a[1:]), (a[: n - 4], a[4:]), (a, b)):  # the next draw, the next 64 bits, a new call
        both = (~first & ~second).float().mean().item()
        assert abs(both - p * p) < 5 * sd


def test_the_gradient_is_the_forward_mask_scaled():
    torch.manual_seed(2)
    x = torch.randn(64, 48, requires_grad=True)
    y = FastDropout(0.25).train()(x)
    y.backward(torch.ones_like(y))
    kept = y.detach() != 0
    torch.testing.assert_close(x.grad, kept.float() / 0.75)


def test_repeatable_from_torch_seed_and_identity_when_off():
    x = torch.randn(1000)
    torch.manual_seed(3)
    first = FastDropout(0.2).train()(x)
    torch.manual_seed(3)
    again = FastDropout(0.2).train()(x)
    torch.manual_seed(4)
    other = FastDropout(0.2).train()(x)
    assert torch.equal(first, again) and not torch.equal(first, other)
    assert FastDropout(0.2).eval()(x) is x
    assert FastDropout(0.0).train()(x) is x
    assert dropout_threshold(0.05) == 3277  # round(0.05 * 65536): the rate to within 1 / 131072
    with pytest.raises(ValueError, match="dropout probability"):
        FastDropout(1.0)


def test_swapped_into_a_lora_phrase_model_on_the_cpu_only(tiny_config):
    from spanseek.core.model import PhraseModel

    torch.manual_seed(5)
    model = PhraseModel(tiny_config).eval()
    ids = torch.randint(1000, 2000, (2, 12))
    mask = torch.ones_like(ids)
    before = model.encode_questions(ids, mask)
    keys = set(model.state_dict())
    n_dropout = sum(type(m) is nn.Dropout and m.p > 0 for m in model.modules())
    assert n_dropout > 0
    assert fast_dropout(model, "meta") == 0  # another device keeps torch's dropout
    assert fast_dropout(model, torch.device("cpu")) == n_dropout
    assert not any(type(m) is nn.Dropout and m.p > 0 for m in model.modules())
    backbones = [m for m in model.modules() if hasattr(m, "set_attn_implementation")]
    assert backbones and all(m.config._attn_implementation == ATTENTION for m in backbones)
    assert all(not m.training for m in model.modules())  # the mode each module had
    assert set(model.state_dict()) == keys
    after = model.encode_questions(ids, mask)
    for b, a in zip(before, after, strict=True):
        torch.testing.assert_close(a, b)
    model.train()  # and it trains: a loss backpropagates through the swapped modules into the adapters
    q_start, q_end = model.encode_questions(ids, mask)
    w = torch.randn(2, q_start.shape[1])  # not a plain sum: a layer norm's outputs sum to a constant
    (q_start @ w[0] + q_end @ w[1]).sum().backward()
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for n, p in model.named_parameters() if "lora" in n)


def _reference_attention(q, k, v, mask, keep, p):
    scores = q @ k.transpose(-2, -1) * q.shape[-1] ** -0.5
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else scores + mask
    return (torch.softmax(scores, -1) * keep / (1 - p) @ v).transpose(1, 2)


@pytest.mark.parametrize("mask_kind", ["none", "bool", "additive"])
def test_attention_with_dropout_is_softmax_attention_with_the_drawn_mask(monkeypatch, mask_kind):
    from spanseek.trainer import dropout

    torch.manual_seed(6)
    b, h, t, d, p = 3, 2, 7, 4, 0.3
    q, k, v = (torch.randn(b, h, t, d, requires_grad=True) for _ in range(3))
    lengths = torch.tensor([7, 5, 2])  # padded keys are masked out
    attend = (torch.arange(t)[None, :] < lengths[:, None])[:, None, None, :].expand(b, 1, t, t)
    mask = {"none": None, "bool": attend, "additive": torch.where(attend, 0.0, -1e9)}[mask_kind]
    keep = torch.rand(b, h, t, t) > p
    monkeypatch.setattr(dropout, "keep_mask", lambda shape, rate: keep if rate == p else None)
    module = nn.Module().train()
    out, _ = dropout.dropout_attention(module, q, k, v, mask, dropout=p)
    ref = _reference_attention(q, k, v, mask, keep, p)
    torch.testing.assert_close(out, ref)
    grads = torch.autograd.grad(out.square().sum(), (q, k, v))
    for got, want in zip(grads, torch.autograd.grad(ref.square().sum(), (q, k, v)), strict=True):
        torch.testing.assert_close(got, want)


def test_attention_without_dropout_is_sdpa():
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    from spanseek.trainer.dropout import dropout_attention

    torch.manual_seed(7)
    q, k, v = (torch.randn(2, 2, 5, 4) for _ in range(3))
    module = nn.Module()
    module.is_causal = False
    for training, p in ((False, 0.1), (True, 0.0)):  # eval mode (sdpa, whatever it is passed), or no dropout
        module.train(training)
        torch.manual_seed(10)
        got, _ = dropout_attention(module, q, k, v, None, dropout=p)
        torch.manual_seed(10)
        want, _ = sdpa_attention_forward(module, q, k, v, None, dropout=p)
        assert torch.equal(got, want)


def test_attention_leaves_what_it_does_not_compute_to_sdpa(monkeypatch):
    from transformers.integrations import sdpa_attention

    from spanseek.trainer.dropout import dropout_attention

    q = k = v = torch.randn(1, 2, 3, 4)
    monkeypatch.setattr(sdpa_attention, "sdpa_attention_forward", lambda *a, **kw: ("sdpa", kw))
    module = nn.Module().train()
    module.is_causal = True
    assert dropout_attention(module, q, k, v, None, dropout=0.1)[0] == "sdpa"  # causal
    module.is_causal = False
    assert dropout_attention(module, q, k, v, None, dropout=0.1, position_bias=torch.zeros(1))[0] == "sdpa"
    assert dropout_attention(module, q, k, v, None, dropout=0.1)[0] != "sdpa"  # plain bidirectional: computed here


def test_a_query_that_may_attend_to_nothing_reads_zeros_not_nan():
    from spanseek.trainer.dropout import dropout_attention

    torch.manual_seed(9)
    q, k, v = (torch.randn(1, 1, 3, 4, requires_grad=True) for _ in range(3))
    mask = torch.tensor([[True, True, False], [False, False, False], [True, False, False]])[None, None]
    out, _ = dropout_attention(nn.Module().train(), q, k, v, mask, dropout=0.2)
    assert torch.equal(out[0, 1], torch.zeros(1, 4)) and torch.isfinite(out).all()
    out.sum().backward()
    assert all(torch.isfinite(t.grad).all() for t in (q, k, v))


def test_a_reader_trains_with_the_attention_function_and_reads_as_before(tiny_reader):
    from spanseek.core.reader import load_reader_model

    model = load_reader_model(tiny_reader)
    ids = torch.randint(1000, 2000, (3, 10))
    mask = (torch.arange(10)[None, :] < torch.tensor([[10], [6], [3]])).long()  # padded rows
    before = model(ids, mask)
    fast_dropout(model, "cpu")
    assert model.backbone.config._attn_implementation == ATTENTION
    for got, want in zip(model(ids, mask), before, strict=True):  # eval mode: sdpa, as before
        torch.testing.assert_close(got, want)
    model.train()
    torch.manual_seed(8)
    start, end = model(ids, mask)
    assert torch.isfinite(start[mask.bool()]).all() and not torch.equal(start, before[0])  # dropped, not broken
    (start[mask.bool()].sum() - end[mask.bool()].sum()).backward()
    assert model.qa_head.weight.grad is not None
