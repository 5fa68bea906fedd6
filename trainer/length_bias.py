"""Fit the span length bias of a trained model (its encoders stay frozen).

    spanseek train length-bias --model RUN/last --train squad-train.json.gz --out RUN/biased

A span's score q_start·h_i + q_end·h_j is a sum of two token scores, so nothing in it can prefer a length: a model
that is unsure where an answer ends spreads its guess over every end at the same cost. This step adds b(j − i),
one number per length, fitted by the span-level likelihood of the gold answers of training questions:

    maximise  Σ_q  log softmax_{(i, j) valid in q's passage} (q_start·h_i + q_end·h_j + b(j − i))  at the gold span

(the same softmax as the span-level term of the loss, with the model frozen, so only the L − 1 free numbers move:
b(0) is fixed at 0, as the softmax ignores a shift; a small ridge term, RIDGE · Σ b², keeps a length that no gold
answer has finite). The held-out articles are not used for fitting; their likelihood before and after is
reported. The output is the model's config with ``length_bias`` and its weights file copied byte for byte, so
indexes built with the model stay valid for it.
"""

from __future__ import annotations

import dataclasses
import logging
import random
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from spanseek.core.encoding import PassageEncoder, QuestionEncoder, pick_device, pick_precision
from spanseek.core.io import Question, load_squad, replace_dir, squad_questions
from spanseek.core.model import (
    CONFIG_NAME,
    WEIGHTS_NAME,
    check_model_out,
    load_model,
    load_tokenizer,
    resolve_model,
)
from spanseek.core.spans import span_scores
from spanseek.core.text import char_to_token
from spanseek.trainer.arguments import LengthBiasConfig

log = logging.getLogger(__name__)


RIDGE = 1e-4  # per question: negligible next to any length the data has (NLL ~1.2), enough to bound the others


@dataclass
class SpanTable:
    """Every valid span of each question's passage, padded to one row per question (-inf beyond a row's spans)."""

    scores: torch.Tensor  # (Q, M) float32: q_start·h_i + q_end·h_j
    lengths: torch.Tensor  # (Q, M) int64: j - i
    gold: torch.Tensor  # (Q,) int64: the column of the gold span

    def nll(self, bias: torch.Tensor) -> torch.Tensor:
        """Mean negative log-likelihood of the gold spans under the scores plus ``bias`` (L,) by length."""
        s = self.scores + bias[self.lengths]
        return (torch.logsumexp(s, dim=1) - s.gather(1, self.gold[:, None])[:, 0]).mean()


def span_table(model, tokenizer, questions: list[Question], precision: str) -> SpanTable:
    """Encode the questions and their passages and lay out every valid span (those whose gold span is a valid
    one: it starts and ends on word boundaries and is at most L tokens)."""
    L = model.config.max_answer_tokens
    contexts = list(dict.fromkeys(q.context for q in questions))
    passages = dict(zip(contexts, PassageEncoder(model, tokenizer, precision).encode(contexts), strict=True))
    q_start, q_end = QuestionEncoder(model, tokenizer, precision).encode([q.question for q in questions])
    rows: list[tuple[np.ndarray, np.ndarray, int]] = []
    for q, qs, qe in zip(questions, q_start, q_end, strict=True):
        p = passages[q.context]
        gold = char_to_token(p.tokens.offsets, q.answer_starts[0], q.answer_starts[0] + len(q.answers[0]))
        total = span_scores(p.vectors @ qs, p.vectors @ qe, p.tokens.flags, L)
        if gold is None or not np.isfinite(total[gold]):
            continue  # the gold span is not one the decoder can output (too long, or inside a word)
        i, j = np.nonzero(np.isfinite(total))
        rows.append((total[i, j].astype(np.float32), j - i, int(np.flatnonzero((i == gold[0]) & (j == gold[1]))[0])))
    if not rows:
        raise ValueError("no question has a gold span the decoder can output; is this a SQuAD-format file with "
                         "answer_start offsets?")
    width = max(len(r[0]) for r in rows)
    scores = torch.full((len(rows), width), -torch.inf)
    lengths = torch.zeros((len(rows), width), dtype=torch.int64)
    for r, (s, n, _) in enumerate(rows):
        scores[r, : len(s)] = torch.from_numpy(s)
        lengths[r, : len(n)] = torch.from_numpy(n)
    return SpanTable(scores, lengths, torch.tensor([r[2] for r in rows]))


def fit_bias(table: SpanTable, L: int) -> torch.Tensor:
    """The (L,) bias with b(0) = 0 that maximises the table's gold-span likelihood minus RIDGE · Σ b² (L-BFGS; the
    problem is convex)."""
    if L == 1:
        return torch.zeros(1)  # one length only: nothing to prefer
    free = torch.zeros(L - 1, requires_grad=True)
    opt = torch.optim.LBFGS([free], max_iter=200, tolerance_grad=1e-6, line_search_fn="strong_wolfe")

    def closure() -> torch.Tensor:
        opt.zero_grad()
        loss = table.nll(torch.cat([torch.zeros(1), free])) + RIDGE * (free**2).sum()
        loss.backward()
        return loss

    opt.step(closure)
    return torch.cat([torch.zeros(1), free.detach()])


def answerable(questions: list[Question]) -> list[Question]:
    return [q for q in questions if q.answers and q.answer_starts and q.answer_starts[0] >= 0]


def fit_length_bias(cfg: LengthBiasConfig) -> dict[str, Any]:
    """Fit the bias on training questions, write the model copy to ``cfg.out`` and return a summary."""
    model_dir = resolve_model(cfg.model)
    out = check_model_out(cfg.out, model_dir)  # before minutes of fitting
    model = load_model(model_dir)
    if model.config.length_bias:
        log.info("%s already has a length bias; it is refitted from zero", model_dir)
    device = pick_device(cfg.device)
    model.to(device)
    precision = pick_precision(cfg.precision, device)
    tokenizer = load_tokenizer(model.config)
    train, held = cfg.holdout.split(load_squad(cfg.train))
    rng = random.Random(cfg.seed)
    fit_q = answerable(squad_questions(train))
    fit_q = rng.sample(fit_q, min(cfg.questions, len(fit_q)))
    val_q = answerable(squad_questions(held))
    val_q = rng.sample(val_q, min(cfg.val_questions, len(val_q)))
    L = model.config.max_answer_tokens
    table = span_table(model, tokenizer, fit_q, precision)
    bias = fit_bias(table, L)
    zero = torch.zeros(L)
    gold_lengths = table.lengths.gather(1, table.gold[:, None])[:, 0]
    summary: dict[str, Any] = {
        "length_bias": [round(float(b), 4) for b in bias],
        "fit_questions": len(table.gold),
        "gold_per_length": torch.bincount(gold_lengths, minlength=L).tolist(),  # entry k: spans of k + 1 tokens
        "fit_nll": [round(float(table.nll(zero)), 4), round(float(table.nll(bias)), 4)],
    }
    try:
        val = span_table(model, tokenizer, val_q, precision) if val_q else None
    except ValueError as e:  # no held-out question has a usable gold span: the fit itself stands
        log.warning("held-out likelihood not reported: %s", e)
        val = None
    if val is not None:
        summary["val_questions"] = len(val.gold)
        summary["val_nll"] = [round(float(val.nll(zero)), 4), round(float(val.nll(bias)), 4)]
    write_model_copy(model_dir, out, dataclasses.replace(model.config, length_bias=tuple(summary["length_bias"])))
    summary["out"] = str(cfg.out)
    return summary


def write_model_copy(model_dir: Path, out: Path, config) -> None:
    """Write ``config`` and ``model_dir``'s weights file (copied byte for byte) to ``out``, atomically."""
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    shutil.copy2(model_dir / WEIGHTS_NAME, tmp / WEIGHTS_NAME)
    config.save(tmp / CONFIG_NAME)
    replace_dir(tmp, out)
