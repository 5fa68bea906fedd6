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

The cross-attention reader scores a span the same way, start logit plus end logit, each trained on its own, and
gets the same prior (``spanseek train reader-length-bias``): here the softmax runs over the spans of each window
the reader reads that holds the whole gold answer, and the questions come from the articles kept out of the
reader's training (a reader is sure of the answers it learned, so its own training questions would teach the
prior little).

    spanseek train reader-length-bias --reader RUN/last --train squad-train.json.gz --out RUN/biased
    spanseek train fit-reading --reader RUN/biased --out RUN/biased ...   # read scores moved: refit reading
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
from tqdm.auto import tqdm

from spanseek.core.encoding import PassageEncoder, QuestionEncoder, pick_device, pick_precision
from spanseek.core.evaluate import TRAINED_QUESTIONS
from spanseek.core.holdout import Holdout
from spanseek.core.io import Question, atomic_dir, squad_questions
from spanseek.core.model import (
    CONFIG_NAME,
    WEIGHTS_NAME,
    check_model_out,
    load_model,
    load_tokenizer,
    resolve_model,
)
from spanseek.core.reader import (
    READER_CONFIG_NAME,
    READER_WEIGHTS_NAME,
    PassageReader,
    make_windows,
    resolve_reader,
)
from spanseek.core.spans import span_scores
from spanseek.core.text import FLAG_END, FLAG_START, char_to_token
from spanseek.trainer.arguments import LengthBiasConfig, ReaderLengthBiasConfig
from spanseek.trainer.data import answered, load_training, reserved_articles_hint, training_questions

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
    return table_of(rows)


def reader_span_table(reader: PassageReader, questions: list[Question], batch: int = 64,
                      progress: bool = False) -> SpanTable:
    """Every span the reader can read (at most ``max_answer_tokens``, whole words: ``Windows.flags``) of each window
    that holds a question's whole gold answer as such a span, a row per such window, scored start logit + end
    logit."""
    L = reader.config.max_answer_tokens
    rows: list[tuple[np.ndarray, np.ndarray, int]] = []
    for a in tqdm(range(0, len(questions), batch), desc="reading", unit="batch", disable=not progress):
        chunk = questions[a : a + batch]
        windows = make_windows(reader.tokenizer, reader.config, [q.question for q in chunk], [q.context for q in chunk])
        for w, (start, end) in enumerate(reader.logits(windows)):
            q, off, flags = chunk[int(windows.pair[w])], windows.offsets[w], windows.flags[w]
            first = np.flatnonzero(off[:, 0] == q.answer_starts[0])
            last = np.flatnonzero(off[:, 1] == q.answer_starts[0] + len(q.answers[0]))
            can_start, can_end = flags & FLAG_START > 0, flags & FLAG_END > 0
            if (not len(first) or not len(last) or not 0 <= last[0] - first[0] < L or not can_start[first[0]]
                    or not can_end[last[0]]):
                continue  # the window cuts the answer off, or it is not whole words
            i, j = np.nonzero(np.triu(np.tril(np.ones((len(off), len(off)), bool), L - 1))
                              & np.outer(can_start, can_end))
            rows.append(((start[i] + end[j]).astype(np.float32), j - i,
                         int(np.flatnonzero((i == first[0]) & (j == last[0]))[0])))
    return table_of(rows)


def table_of(rows: list[tuple[np.ndarray, np.ndarray, int]]) -> SpanTable:
    """A ``SpanTable`` of rows (scores, lengths, gold column) of any widths."""
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


def bias_summary(table: SpanTable, bias: torch.Tensor, L: int, questions: int | None = None) -> dict[str, Any]:
    """The fitted bias, what it was fitted on (rows of the table: questions, or windows of ``questions``) and the
    fit's likelihood before and after."""
    zero = torch.zeros(L)
    gold_lengths = table.lengths.gather(1, table.gold[:, None])[:, 0]
    return {
        "length_bias": [round(float(b), 4) for b in bias],
        **({"fit_questions": len(table.gold)} if questions is None else
           {"fit_questions": questions, "fit_windows": len(table.gold)}),
        "gold_per_length": torch.bincount(gold_lengths, minlength=L).tolist(),  # entry k: spans of k + 1 tokens
        "fit_nll": [round(float(table.nll(zero)), 4), round(float(table.nll(bias)), 4)],
    }


def fit_questions(path: str, questions: list[Question], kind: str = "training", hint: str = "") -> list[Question]:
    """The questions a fit reads: those with an answer at its ``answer_start`` (``trainer.data.answered``, which
    names those left out); ValueError naming the file when none has one (``hint``: which articles, what to change)."""
    fit_q = answered(questions, path, kind)
    if not fit_q:
        raise ValueError((f"{path}: none of its {len(questions)} {kind} questions has an answer at its answer_start "
                          "to fit on" if questions else f"{path}: no {kind} questions to fit on") + hint)
    return fit_q


def fit_length_bias(cfg: LengthBiasConfig) -> dict[str, Any]:
    """Fit the bias on training questions, write the model copy to ``cfg.out`` and return a summary."""
    model_dir = resolve_model(cfg.model)
    out = check_model_out(cfg.out, model_dir)  # before minutes of fitting
    data = load_training(cfg.train)  # a bad training file is named before the model loads
    fit_q = fit_questions(cfg.train, training_questions(cfg.train, data, lambda i: not cfg.holdout.held(i)))
    val_q = answered(squad_questions(data, cfg.holdout.held), cfg.train, "held-out")
    model = load_model(model_dir)
    if model.config.length_bias:
        log.info("%s already has a length bias; it is refitted from zero", model_dir)
    device = pick_device(cfg.device)
    model.to(device)
    precision = pick_precision(cfg.precision, device)
    tokenizer = load_tokenizer(model.config)
    rng = random.Random(cfg.seed)
    fit_q = rng.sample(fit_q, min(cfg.questions, len(fit_q)))
    val_q = rng.sample(val_q, min(cfg.val_questions, len(val_q)))
    L = model.config.max_answer_tokens
    table = span_table(model, tokenizer, fit_q, precision)
    bias = fit_bias(table, L)
    zero = torch.zeros(L)
    summary = bias_summary(table, bias, L)
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


def fit_reader_length_bias(cfg: ReaderLengthBiasConfig) -> dict[str, Any]:
    """Fit the reader's prior on its reserved articles, write the reader copy to ``cfg.out``, return a summary."""
    reader_dir = resolve_reader(cfg.reader)
    out = check_model_out(cfg.out, reader_dir, config_name=READER_CONFIG_NAME)
    data = load_training(cfg.train)  # a bad training file, or one with nothing to fit, is named before the reader loads
    fit_q = fit_questions(cfg.train, squad_questions(data, Holdout(cfg.holdout_every, cfg.articles_offset).held),
                          "reserved-article", " " + reserved_articles_hint(cfg.holdout_every, cfg.articles_offset, data))
    val_q = answered(squad_questions(data, cfg.holdout.held), cfg.train, "held-out")
    device = pick_device(cfg.device)
    reader = PassageReader.load(reader_dir, device, pick_precision(cfg.precision, device))
    if reader.config.length_bias:
        log.info("%s already has a length prior; it is refitted from zero", reader_dir)
        reader.config = dataclasses.replace(reader.config, length_bias=())
    rng = random.Random(cfg.seed)
    fit_q = rng.sample(fit_q, min(cfg.questions, len(fit_q)))
    val_q = rng.sample(val_q, min(cfg.val_questions, len(val_q)))
    L = reader.config.max_answer_tokens
    table = reader_span_table(reader, fit_q, progress=cfg.progress)
    bias = fit_bias(table, L)
    summary = bias_summary(table, bias, L, len(fit_q))
    if val_q:
        val = reader_span_table(reader, val_q, progress=cfg.progress)
        summary["val_windows"] = len(val.gold)
        summary["val_nll"] = [round(float(val.nll(torch.zeros(L))), 4), round(float(val.nll(bias)), 4)]
    config = dataclasses.replace(reader.config, length_bias=tuple(summary["length_bias"]))
    write_copy(reader_dir, out, READER_WEIGHTS_NAME, lambda d: config.save(d / READER_CONFIG_NAME))
    return {**summary, "out": str(cfg.out), "next": f"spanseek train fit-reading --reader {cfg.out} --out {cfg.out} "
            "(read span scores moved: the reading file must be refitted)"}


def write_model_copy(model_dir: Path, out: Path, config) -> None:
    """Write ``config`` and ``model_dir``'s weights file (copied byte for byte) to ``out``, atomically, with the
    record of the questions its encoders were trained on (``TRAINED_QUESTIONS``). Not its calibration: the
    confidence of the refitted scores is fitted again (``spanseek train calibrate``)."""
    write_copy(model_dir, out, WEIGHTS_NAME, lambda d: config.save(d / CONFIG_NAME))


def write_copy(src: Path, out: Path, weights: str, save_config) -> None:
    """``src``'s weights file ``weights`` (copied byte for byte; with ``TRAINED_QUESTIONS`` if it has one) and the
    config ``save_config(dir)`` writes, to ``out``, atomically: a copy that is stopped (Ctrl-C) or fails leaves
    ``out`` as it was and no half-written OUT.tmp beside it."""
    with atomic_dir(out) as tmp:
        shutil.copy2(src / weights, tmp / weights)
        if (src / TRAINED_QUESTIONS).is_file():
            shutil.copy2(src / TRAINED_QUESTIONS, tmp / TRAINED_QUESTIONS)
        save_config(tmp)
