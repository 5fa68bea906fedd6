"""Losses (trainer.losses) against values computed by hand on tiny tensors, and the pre-batch cache: an empty
cache gives exactly the no-pre-batch loss and gradients; cached vectors carry no gradient.

    .venv/bin/python -m pytest -q tests/trainer/test_losses.py
"""

from __future__ import annotations

import math

import pytest
import torch

from spanseek.trainer.losses import NEG_INF, LossConfig, PreBatchCache, phrase_loss, span_loss

LN256 = math.log(256.0)


def lse(*xs: float) -> float:
    return math.log(sum(math.exp(x) for x in xs))


def tiny_case():
    """Two windows of two 1-d tokens: window 0 = [1, 2], window 1 = [3, 0]; question 0 reads window 0, question 1
    window 1. Start side: q = 1 and 2, golds = token 1 (value 2) and token 0 (value 3); token 1 of window 1 may
    not start a phrase. End side: q = 1 and 1, golds = token 0 (value 1) and token 1 (value 0)."""
    H = torch.tensor([[[1.0], [2.0]], [[3.0], [0.0]]])
    start_ok = torch.tensor([[True, True], [True, False]])
    end_ok = torch.ones(2, 2, dtype=torch.bool)
    return dict(H=H, q_start=torch.tensor([[1.0], [2.0]]), q_end=torch.tensor([[1.0], [1.0]]),
                start_ok=start_ok, end_ok=end_ok, q_passage=torch.tensor([0, 1]),
                gold_start=torch.tensor([1, 0]), gold_end=torch.tensor([0, 1]))


def test_unified_loss_by_hand():
    # one softmax over in-passage logits and in-batch golds (+ ln 256); the same window's gold is masked
    start = ((lse(1, 2, 3 + LN256) - 2)  # q0 = 1: tokens [1, 2], other gold 3
             + (lse(6, 4 + LN256) - 6)) / 2  # q1 = 2: tokens [6, masked], other gold 2 -> 4
    end = ((lse(1, 2, 0 + LN256) - 1)  # q0 = 1: tokens [1, 2], other gold 0
           + (lse(3, 0, 1 + LN256) - 0)) / 2  # q1 = 1: tokens [3, 0], other gold 1
    got = phrase_loss(**tiny_case(), cfg=LossConfig(kind="unified"))
    assert got.item() == pytest.approx((start + end) / 2, rel=1e-5)


def test_two_term_loss_by_hand():
    # L_single (softmax over in-passage tokens) + 4 * L_neg (gold vs the other questions' golds, unweighted)
    single_s = ((lse(1, 2) - 2) + (lse(6) - 6)) / 2
    neg_s = ((lse(2, 3) - 2) + (lse(6, 4) - 6)) / 2
    single_e = ((lse(1, 2) - 1) + (lse(3, 0) - 0)) / 2
    neg_e = ((lse(1, 0) - 1) + (lse(0, 1) - 0)) / 2
    expected = ((single_s + 4 * neg_s) + (single_e + 4 * neg_e)) / 2
    got = phrase_loss(**tiny_case(), cfg=LossConfig(kind="two_term"))
    assert got.item() == pytest.approx(expected, rel=1e-5)


def test_pre_batch_negatives_by_hand():
    pre = (torch.tensor([[-1.0], [5.0]]), torch.tensor([[0.5], [-2.0]]))  # cached start / end golds
    ln2 = math.log(2.0)
    cfg = LossConfig(kind="unified", lambda_pre=2.0)
    start = ((lse(1, 2, 3 + LN256, -1 + ln2, 5 + ln2) - 2) + (lse(6, 4 + LN256, -2 + ln2, 10 + ln2) - 6)) / 2
    end = ((lse(1, 2, LN256, 0.5 + ln2, -2 + ln2) - 1) + (lse(3, 0, 1 + LN256, 0.5 + ln2, -2 + ln2) - 0)) / 2
    assert phrase_loss(**tiny_case(), cfg=cfg, pre=pre).item() == pytest.approx((start + end) / 2, rel=1e-5)
    two = LossConfig(kind="two_term")
    neg_s = ((lse(2, 3, -1, 5) - 2) + (lse(6, 4, -2, 10) - 6)) / 2
    neg_e = ((lse(1, 0, 0.5, -2) - 1) + (lse(0, 1, 0.5, -2) - 0)) / 2
    single = ((lse(1, 2) - 2) + (lse(6) - 6)) / 2 + ((lse(1, 2) - 1) + (lse(3, 0) - 0)) / 2
    assert phrase_loss(**tiny_case(), cfg=two, pre=pre).item() == pytest.approx((single + 4 * (neg_s + neg_e)) / 2, rel=1e-5)


def test_questions_of_one_window_are_not_each_others_in_batch_negatives():
    case = tiny_case()
    case.update(q_passage=torch.tensor([0, 0]), gold_start=torch.tensor([1, 0]))  # both questions read window 0
    # q0 = 1: tokens [1, 2] gold 1; q1 = 2: tokens [2, 4] gold 0; in-batch golds all masked (same window)
    start = ((lse(1, 2) - 2) + (lse(2, 4) - 2)) / 2
    end = ((lse(1, 2) - 1) + (lse(1, 2) - 2)) / 2  # q1's end gold is now token 1 of window 0 (value 2)
    got = phrase_loss(**case, cfg=LossConfig(kind="unified"))
    assert got.item() == pytest.approx((start + end) / 2, rel=1e-5)
    assert NEG_INF < -1000  # masked logits vanish from the softmax


def test_loss_config_validates_kind():
    with pytest.raises(ValueError, match="loss kind"):
        LossConfig(kind="triplet")


def test_pre_batch_cache_is_a_detached_fifo():
    cache = PreBatchCache(2)
    assert cache.negatives() is None
    x = torch.ones(3, 4, requires_grad=True)
    for k in range(3):
        cache.push(x * k, x * -k)
    s, e = cache.negatives()
    assert s.shape == (6, 4) and not s.requires_grad and not e.requires_grad
    assert s[:, 0].tolist() == [1, 1, 1, 2, 2, 2] and e[:, 0].tolist() == [-1, -1, -1, -2, -2, -2]  # the last 2 batches
    off = PreBatchCache(0)
    off.push(x, x)
    assert off.negatives() is None


@pytest.mark.parametrize("kind", ["unified", "two_term"])
def test_empty_pre_batch_cache_equals_no_pre_batch_in_value_and_gradient(tiny_config, tiny_squad, kind):
    from spanseek.core.io import load_squad, squad_questions
    from spanseek.core.model import PhraseModel, load_tokenizer
    from spanseek.trainer.data import build_windows, collate

    torch.manual_seed(0)
    model = PhraseModel(tiny_config).eval()  # eval: no dropout, so two passes are comparable
    with torch.no_grad():  # move the adapters off zero so every trainable weight gets a gradient
        for p in model.parameters():
            if p.requires_grad:
                p.add_(0.05 * torch.randn_like(p))
    tok = load_tokenizer(model.config)
    windows, _ = build_windows(squad_questions(load_squad(tiny_squad)), tok, 32, 8, 6)
    batch = collate(windows[:6], tok, 64)
    cfg = LossConfig(kind=kind)

    def loss_and_grads(pre_cache: PreBatchCache | None):
        model.zero_grad(set_to_none=True)
        H = model.encode_passages(batch.input_ids, batch.attention_mask)
        q_start, q_end = model.encode_questions(batch.q_input_ids, batch.q_attention_mask)
        pre = pre_cache.negatives() if pre_cache is not None else None
        loss = phrase_loss(H, q_start, q_end, batch.start_ok, batch.end_ok, batch.q_passage,
                           batch.gold_start, batch.gold_end, cfg, pre=pre)
        loss.backward()
        grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad}
        return loss.item(), grads, H

    base, base_grads, H = loss_and_grads(None)
    empty, empty_grads, _ = loss_and_grads(PreBatchCache(2))
    assert empty == base
    assert base_grads.keys() == empty_grads.keys() and all(g.abs().sum() > 0 for g in base_grads.values())
    for n, g in base_grads.items():
        assert torch.equal(g, empty_grads[n]), n
    filled = PreBatchCache(2)
    filled.push(H[batch.q_passage, batch.gold_start] + 1.0, H[batch.q_passage, batch.gold_end] + 1.0)
    assert loss_and_grads(filled)[0] > base  # real negatives make the softmax harder


def test_span_loss_by_hand():
    # one window [1, 2, 3] (1-d), q_start = 1, q_end = 2, L = 2, token 2 may not start: the valid spans are
    # (0,0) 1+2, (0,1) 1+4, (1,1) 2+4, (1,2) 2+6; the gold is (1, 2)
    H = torch.tensor([[[1.0], [2.0], [3.0]]])
    got = span_loss(torch.tensor([[1.0]]), torch.tensor([[2.0]]), H, torch.tensor([[True, True, False]]),
                    torch.ones(1, 3, dtype=torch.bool), torch.tensor([0]), torch.tensor([1]), torch.tensor([2]),
                    max_answer_tokens=2)
    assert got.item() == pytest.approx(lse(3, 5, 6, 8) - 8, abs=1e-5)


def test_span_loss_matches_brute_force_over_spans():
    g = torch.Generator().manual_seed(0)
    P, T, d, Q, L = 3, 9, 4, 5, 3
    H = torch.randn(P, T, d, generator=g)
    start_ok, end_ok = torch.rand(P, T, generator=g) > 0.3, torch.rand(P, T, generator=g) > 0.3
    q_passage = torch.tensor([0, 0, 1, 2, 2])
    q_start, q_end = torch.randn(Q, d, generator=g), torch.randn(Q, d, generator=g)
    golds = []
    for q in range(Q):  # a valid gold span in each question's window
        p = int(q_passage[q])
        golds.append(next((i, j) for i in range(T) for j in range(i, min(T, i + L))
                          if start_ok[p, i] and end_ok[p, j]))
    gold_start, gold_end = torch.tensor([s for s, _ in golds]), torch.tensor([e for _, e in golds])
    want = 0.0
    for q in range(Q):
        p = int(q_passage[q])
        scores = {(i, j): float(q_start[q] @ H[p, i] + q_end[q] @ H[p, j])
                  for i in range(T) for j in range(i, min(T, i + L)) if start_ok[p, i] and end_ok[p, j]}
        want += lse(*scores.values()) - scores[golds[q]]
    got = span_loss(q_start, q_end, H, start_ok, end_ok, q_passage, gold_start, gold_end, max_answer_tokens=L)
    assert got.item() == pytest.approx(want / Q, rel=1e-5)


def test_span_term_is_added_with_its_weight_and_checked():
    case = tiny_case()
    case.update(gold_end=torch.tensor([1, 1]))  # valid spans: (1, 1) in window 0, (0, 1) in window 1
    base = phrase_loss(**case, cfg=LossConfig())
    with_span = phrase_loss(**case, cfg=LossConfig(lambda_span=0.5), max_answer_tokens=2)
    span = span_loss(case["q_start"], case["q_end"], case["H"], case["start_ok"], case["end_ok"],
                     case["q_passage"], case["gold_start"], case["gold_end"], max_answer_tokens=2)
    assert with_span.item() == pytest.approx(base.item() + 0.5 * span.item(), rel=1e-6)
    with pytest.raises(ValueError, match="needs max_answer_tokens"):
        phrase_loss(**case, cfg=LossConfig(lambda_span=0.5))
    with pytest.raises(ValueError, match="1..1 tokens"):
        phrase_loss(**case, cfg=LossConfig(lambda_span=0.5), max_answer_tokens=1)
    with pytest.raises(ValueError, match="lambda_span"):
        LossConfig(lambda_span=-1.0)
