"""Target corrector (Monath et al. 2024, "A Fresh Take on Stale Embeddings"), for stale hard-negative vectors.

Joint training with ``--stale-cache`` takes the token vectors of hard-negative passages from a PhraseCache made by
the model the run started from, instead of encoding those passages at every step. As training moves the phrase
encoder, the cached vectors go stale. A small residual MLP g, trained alongside, maps a stale vector towards the
current encoder's vector of the same token; the hard negatives enter the loss as g(stale).

g is trained on what each step has anyway: the batch's own windows, encoded fresh for the loss, and their stale
vectors from the cache. Its loss is the paper's: for each question, the cross-entropy between the softmax of the
question's scores over the batch's tokens with fresh vectors (the target, no gradient) and with corrected stale
vectors. The softmax is truncated to the batch's tokens, as the paper truncates it to the retrieved targets.
Questions and fresh vectors are detached: g learns from the encoder, never the other way round.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from spanseek.trainer.losses import NEG_INF


class TargetCorrector(nn.Module):
    """g(x) = x + W2 GELU(W1 x + b1) + b2, with W2 and b2 zero at the start: it begins as the identity."""

    def __init__(self, dim: int, hidden: int | None = None):
        super().__init__()
        self.up = nn.Linear(dim, hidden or dim)
        self.down = nn.Linear(hidden or dim, dim)
        nn.init.zeros_(self.down.weight)
        nn.init.zeros_(self.down.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(F.gelu(self.up(x)))


def _scores(q: torch.Tensor, vectors: torch.Tensor, ok: torch.Tensor) -> torch.Tensor:
    """(Q, N) scores of questions over tokens, invalid tokens masked."""
    return (q @ vectors.T).masked_fill(~ok[None, :], NEG_INF)


def corrector_loss(
    corrector: nn.Module,
    questions: list[tuple[torch.Tensor, torch.Tensor]],
    fresh: torch.Tensor,
    stale: torch.Tensor,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Truncated-softmax cross-entropy of corrected stale against fresh scores, and top-1 agreement statistics.

    ``questions``: (q (Q, d), ok (N,)) per side (start, end); ``fresh`` and ``stale`` (N, d): the same N tokens.
    ``corrector`` may be ``nn.Identity()`` to measure stale vectors as they are. Returns the loss (gradient to the
    corrector only) and, over both sides, the fraction of questions whose
    best token under stale and under corrected vectors is their best token under fresh vectors.
    """
    fresh, stale = fresh.detach().float(), stale.detach().float()
    corrected = corrector(stale)
    losses, agree_stale, agree_corr, n = [], 0.0, 0.0, 0
    for q, ok in questions:
        q = q.detach().float()
        target = _scores(q, fresh, ok)
        pred = _scores(q, corrected, ok)
        losses.append(-(F.softmax(target, dim=1) * F.log_softmax(pred, dim=1)).sum(1).mean())
        best = target.argmax(1)
        agree_stale += float((_scores(q, stale, ok).argmax(1) == best).sum())
        agree_corr += float((pred.argmax(1) == best).sum())
        n += len(q)
    stats = {"stale_top1": agree_stale / max(1, n), "corrected_top1": agree_corr / max(1, n)}
    return torch.stack(losses).mean(), stats
