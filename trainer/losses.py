"""Phrase-retrieval losses over embeddings (the model knows nothing of negatives).

For each question with gold start s (and likewise end e), the groups of candidates are

- in-passage (inp): every token of its own window that may start (end) a phrase;
- in-batch (inb): the gold start (end) vectors of the questions of the *other* windows in the batch;
- pre-batch (pre): gold vectors cached from the C preceding batches (no gradient), see PreBatchCache;
- hard (hard): every valid token of hard-negative passages (given as extra token vectors).

``two_term`` is DensePhrases' L_single + λ L_neg: a softmax over in-passage tokens, plus a separate softmax of the
gold against in-batch/pre-batch golds. ``unified`` (Kim et al. 2022, Eq. 2) is one softmax of the gold against all
groups, each group's terms weighted by λ_group (adding log λ to its logits).

``teacher`` logits (a cross-attention reader's, trainer.distill) add λ_kl times the KL divergence of the start and
end distributions from the teacher's (distill_loss), or with ``kl_level`` "spans" of the distribution over the
window's valid spans (span_distill_loss, over span_kl, which the reader's ``--kl-level spans`` shares).
``lambda_span`` > 0 adds λ_span times a span-level term (span_loss): one softmax over every valid in-passage span
(i, j), j − i < L, scored q_start·h_i + q_end·h_j, exactly what reading comprehension decodes (core.search.best_span),
where the start and end softmaxes above score the two boundaries separately.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from spanseek.trainer.arguments import LossConfig  # noqa: F401 (part of this module's interface)

NEG_INF = -1e4  # large negative that survives bf16


@dataclass(frozen=True)
class HardNegatives:
    """Tokens of hard-negative passages. vectors (M, d); start_ok, end_ok (M,); allowed (Q, M): token m is a
    negative for question q (False where its passage contains q's answer)."""

    vectors: torch.Tensor
    start_ok: torch.Tensor
    end_ok: torch.Tensor
    allowed: torch.Tensor


class PreBatchCache:
    """FIFO of the gold start/end vectors (and their window keys) of the C preceding batches, detached."""

    def __init__(self, size: int):
        self.size = size
        self.items: deque[tuple[torch.Tensor, torch.Tensor]] = deque(maxlen=max(size, 1))

    def negatives(self) -> tuple[torch.Tensor, torch.Tensor] | None:
        if self.size == 0 or not self.items:
            return None
        return torch.cat([s for s, _ in self.items]), torch.cat([e for _, e in self.items])

    def push(self, gold_start_vecs: torch.Tensor, gold_end_vecs: torch.Tensor) -> None:
        if self.size > 0:
            self.items.append((gold_start_vecs.detach(), gold_end_vecs.detach()))

    def state_dict(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """The queued batches (oldest first), on the CPU: saved with a checkpoint, so a resumed run's first steps
        get the same pre-batch negatives as an uninterrupted run's."""
        return [(s.cpu(), e.cpu()) for s, e in self.items]

    def load_state_dict(self, state: list[tuple[torch.Tensor, torch.Tensor]], device: torch.device) -> None:
        """Queue the batches ``state_dict`` saved (the newest ``size`` of them), on ``device``."""
        self.items.clear()
        for s, e in state[-self.size:] if self.size > 0 else []:
            self.items.append((s.to(device), e.to(device)))


def _side_loss(
    q: torch.Tensor,
    H: torch.Tensor,
    ok: torch.Tensor,
    q_passage: torch.Tensor,
    gold: torch.Tensor,
    pre: torch.Tensor | None,
    hard: tuple[torch.Tensor, torch.Tensor] | None,
    cfg: LossConfig,
    others: torch.Tensor | None = None,
) -> torch.Tensor:
    """Loss of one side (start or end). q (Q, d); H (P, T, d); ok (P, T); q_passage, gold (Q,).

    ``hard`` = (vectors (M, d), mask (Q, M) of allowed negatives for this side).
    """
    Q = q.shape[0]
    inp = _in_passage(q, H, q_passage)  # (Q, T)
    inp = inp.masked_fill(~ok[q_passage], NEG_INF)
    gold_vecs = H[q_passage, gold]  # (Q, d)
    inb = q @ gold_vecs.T  # (Q, Q): column c is question c's gold
    other = q_passage[:, None] != q_passage[None, :]  # golds of the same window are in-passage already
    inb = inb.masked_fill(~other, NEG_INF)
    negs = [inb]
    weights = [cfg.lambda_inb]
    if others is not None:  # gold vectors of other ranks' questions: in-batch negatives too
        negs.append(q @ others.T)
        weights.append(cfg.lambda_inb)
    if pre is not None:
        negs.append(q @ pre.T)  # (Q, C·Q')
        weights.append(cfg.pre_weight)
    if cfg.kind == "two_term":
        single = F.cross_entropy(inp.float(), gold)
        pos = (q * gold_vecs).sum(-1, keepdim=True)  # (Q, 1)
        neg_logits = torch.cat([pos] + negs, dim=1).float()
        l_neg = F.cross_entropy(neg_logits, torch.zeros(Q, dtype=torch.long, device=q.device))
        return single + cfg.lambda_neg * l_neg
    if hard is not None:
        hard_vecs, hard_mask = hard  # (M, d), (Q, M) bool
        negs.append((q @ hard_vecs.T).masked_fill(~hard_mask, NEG_INF))
        weights.append(cfg.lambda_hard)
    logits = [inp] + [n + math.log(w) for n, w in zip(negs, weights, strict=True)]
    return F.cross_entropy(torch.cat(logits, dim=1).float(), gold)


def _in_passage(q: torch.Tensor, H: torch.Tensor, q_passage: torch.Tensor) -> torch.Tensor:
    """Each question's scores of its own window's tokens: q (Q, d), H (P, T, d) -> (Q, T)."""
    return torch.einsum("qd,qtd->qt", q, H[q_passage])


def _spans(start: torch.Tensor, end: torch.Tensor, L: int) -> torch.Tensor:
    """Every span (i, i + k), k < L, of each row scored start[i] + end[i + k], laid out (Q, T·L) by start and
    length; a span past the window's end scores NEG_INF."""
    end = F.pad(end, (0, L - 1), value=NEG_INF).unfold(1, L, 1)  # (Q, T, L): end[q, i + k]
    return (start[:, :, None] + end).flatten(1)


def _span_ok(start_ok: torch.Tensor, end_ok: torch.Tensor, L: int) -> torch.Tensor:
    """Which spans of ``_spans``' layout may be picked: a possible start and a possible end (Q, T·L)."""
    end_ok = F.pad(end_ok, (0, L - 1), value=False).unfold(1, L, 1)
    return (start_ok[:, :, None] & end_ok).flatten(1)


def span_loss(
    q_start: torch.Tensor,
    q_end: torch.Tensor,
    H: torch.Tensor,
    start_ok: torch.Tensor,
    end_ok: torch.Tensor,
    q_passage: torch.Tensor,
    gold_start: torch.Tensor,
    gold_end: torch.Tensor,
    max_answer_tokens: int,
) -> torch.Tensor:
    """Cross-entropy of the gold span against every valid span of its window: (i, j) with i <= j < i + L, i a
    possible start and j a possible end, scored q_start·h_i + q_end·h_j. Spans are laid out (T, L) by start and
    length, so the cost is Q·T·L scores."""
    L = max_answer_tokens
    s = _in_passage(q_start, H, q_passage).float().masked_fill(~start_ok[q_passage], NEG_INF)
    e = _in_passage(q_end, H, q_passage).float().masked_fill(~end_ok[q_passage], NEG_INF)
    length = gold_end - gold_start
    if bool(((length < 0) | (length >= L)).any()):
        raise ValueError(f"gold spans must be 1..{L} tokens long, got lengths {(length + 1).tolist()}")
    return F.cross_entropy(_spans(s, e, L), gold_start * L + length)


def distill_loss(q: torch.Tensor, H: torch.Tensor, ok: torch.Tensor, q_passage: torch.Tensor, teacher: torch.Tensor,
                 temperature: float = 1.0) -> torch.Tensor:
    """KL(teacher ‖ student) of one side (start or end) over each question's window tokens, times τ²
    (DensePhrases Eq. 7). q (Q, d); H (P, T, d); ok (P, T); teacher (Q, T) logits, MISSING_LOGIT where the teacher
    has none. Both distributions are over the tokens the student may pick that the teacher read; questions with
    none count 0."""
    valid = ok[q_passage] & (teacher > NEG_INF / 2)
    return masked_kl(_in_passage(q, H, q_passage), teacher, valid, temperature)


def span_distill_loss(q_start: torch.Tensor, q_end: torch.Tensor, H: torch.Tensor, start_ok: torch.Tensor,
                      end_ok: torch.Tensor, q_passage: torch.Tensor, teacher: tuple[torch.Tensor, torch.Tensor],
                      max_answer_tokens: int, temperature: float = 1.0) -> torch.Tensor:
    """KL(teacher ‖ student) of the distribution over each window's spans, times τ²: the teacher's span (i, j)
    scores its start logit at i plus its end logit at j, the student's q_start·h_i + q_end·h_j, over the spans
    reading comprehension decodes (i <= j < i + L, a possible start and end) whose two tokens the teacher read.
    Where the boundary terms (distill_loss) match the start and the end distributions apart, this matches the
    distribution the decoder picks its answer from."""
    return span_kl(_in_passage(q_start, H, q_passage), _in_passage(q_end, H, q_passage), teacher,
                   start_ok[q_passage], end_ok[q_passage], max_answer_tokens, temperature)


def span_kl(start: torch.Tensor, end: torch.Tensor, teacher: tuple[torch.Tensor, torch.Tensor],
            start_ok: torch.Tensor, end_ok: torch.Tensor, max_answer_tokens: int,
            temperature: float = 1.0) -> torch.Tensor:
    """KL(teacher ‖ student) of each row's distribution over its spans, times τ², averaged over the rows with a span:
    student and teacher (R, T) start and end logits, span (i, j) scored start[i] + end[j], over the spans
    i <= j < i + L with ``start_ok`` at i and ``end_ok`` at j (R, T) whose two tokens the teacher read (its logit
    above NEG_INF / 2). The phrase model's term (span_distill_loss) and the reader's (``--kl-level spans``)."""
    L = max_answer_tokens
    t_start, t_end = teacher
    s_ok = start_ok & (t_start > NEG_INF / 2)
    e_ok = end_ok & (t_end > NEG_INF / 2)
    student = _spans(start.float(), end.float(), L)
    return masked_kl(student, _spans(t_start.float(), t_end.float(), L), _span_ok(s_ok, e_ok, L), temperature)


def masked_kl(student: torch.Tensor, teacher: torch.Tensor, valid: torch.Tensor,
              temperature: float = 1.0) -> torch.Tensor:
    """KL(teacher ‖ student) of each row's distribution over its ``valid`` columns (student and teacher (R, T)
    logits), times τ², averaged over the rows with a valid column (0 when none has)."""
    log_s = F.log_softmax(student.float().masked_fill(~valid, NEG_INF) / temperature, dim=1)
    log_t = F.log_softmax(teacher.float().masked_fill(~valid, NEG_INF) / temperature, dim=1)
    kl = (log_t.exp() * (log_t - log_s)).masked_fill(~valid, 0.0).sum(1)
    has = valid.any(1)
    return kl[has].sum() / has.sum().clamp(min=1) * temperature**2


def phrase_loss(
    H: torch.Tensor,
    q_start: torch.Tensor,
    q_end: torch.Tensor,
    start_ok: torch.Tensor,
    end_ok: torch.Tensor,
    q_passage: torch.Tensor,
    gold_start: torch.Tensor,
    gold_end: torch.Tensor,
    cfg: LossConfig,
    pre: tuple[torch.Tensor, torch.Tensor] | None = None,
    hard: HardNegatives | None = None,
    others: tuple[torch.Tensor, torch.Tensor] | None = None,
    max_answer_tokens: int | None = None,
    teacher: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> torch.Tensor:
    """Mean of the start-side and end-side losses (hard negatives are used by the unified loss only), plus
    λ_span · span_loss when ``cfg.lambda_span`` > 0 (which needs ``max_answer_tokens``), plus λ_kl times the mean of
    the start and end distillation terms when ``teacher`` (the (Q, T) start and end logits of a reader) is given.

    ``others`` = gold start and end vectors of the other data-parallel ranks' questions (trainer.distributed).
    """
    hard_s = (hard.vectors, hard.allowed & hard.start_ok[None, :]) if hard is not None else None
    hard_e = (hard.vectors, hard.allowed & hard.end_ok[None, :]) if hard is not None else None
    ls = _side_loss(q_start, H, start_ok, q_passage, gold_start, None if pre is None else pre[0], hard_s, cfg,
                    None if others is None else others[0])
    le = _side_loss(q_end, H, end_ok, q_passage, gold_end, None if pre is None else pre[1], hard_e, cfg,
                    None if others is None else others[1])
    loss = (ls + le) / 2
    if cfg.lambda_span > 0:
        if max_answer_tokens is None:
            raise ValueError("lambda_span > 0 needs max_answer_tokens (the longest span the decoder considers)")
        loss = loss + cfg.lambda_span * span_loss(q_start, q_end, H, start_ok, end_ok, q_passage, gold_start,
                                                  gold_end, max_answer_tokens)
    if teacher is not None and cfg.kl_level == "spans":
        if max_answer_tokens is None:
            raise ValueError("kl_level 'spans' needs max_answer_tokens (the longest span the decoder considers)")
        loss = loss + cfg.lambda_kl * span_distill_loss(q_start, q_end, H, start_ok, end_ok, q_passage, teacher,
                                                        max_answer_tokens, cfg.kl_temperature)
    elif teacher is not None:
        kl = (distill_loss(q_start, H, start_ok, q_passage, teacher[0], cfg.kl_temperature) +
              distill_loss(q_end, H, end_ok, q_passage, teacher[1], cfg.kl_temperature)) / 2
        loss = loss + cfg.lambda_kl * kl
    return loss
