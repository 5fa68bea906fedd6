"""Training examples from SQuAD-format data: each passage window is encoded once for all of its questions.

A paragraph is tokenised once; long paragraphs are cut into the same windows the indexer uses, and each
question goes to the window where its answer has the most context. A batch is a set of windows with all of
their questions, so the phrase encoder runs once per window (SQuAD has ~4.6 questions per paragraph).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from core.io import Question
from core.text import FLAG_END, FLAG_START, char_to_token, tokenize_passages, window_starts


@dataclass
class TrainWindow:
    """One window: content token ids and flags, and its questions with gold (start, end) content positions."""

    input_ids: np.ndarray
    flags: np.ndarray
    questions: list[str]
    starts: list[int]
    ends: list[int]


@dataclass
class Batch:
    """Tensors for one step. P windows, Q questions; positions index the (P, T) passage tensor."""

    input_ids: torch.Tensor  # (P, T) with [CLS] ... [SEP] and padding
    attention_mask: torch.Tensor  # (P, T)
    start_ok: torch.Tensor  # (P, T) bool: token may start a phrase
    end_ok: torch.Tensor  # (P, T) bool
    q_input_ids: torch.Tensor  # (Q, Tq)
    q_attention_mask: torch.Tensor  # (Q, Tq)
    q_passage: torch.Tensor  # (Q,) window of each question
    gold_start: torch.Tensor  # (Q,) position in its window's row
    gold_end: torch.Tensor  # (Q,)

    def to(self, device: torch.device) -> Batch:
        return Batch(**{k: v.to(device) for k, v in self.__dict__.items()})


def build_windows(
    questions: list[Question], tokenizer, max_seq_len: int, stride: int, max_answer_tokens: int
) -> tuple[list[TrainWindow], dict[str, int]]:
    """Group questions by context, tokenise each context once, and assign questions to windows.

    Returns the windows that have at least one question, and counts of what was skipped.
    """
    by_ctx: dict[str, list[Question]] = {}
    for q in questions:
        by_ctx.setdefault(q.context, []).append(q)
    contexts = list(by_ctx)
    window = max_seq_len - 2
    skipped = {"no_answer_tokens": 0, "too_long": 0}
    windows: list[TrainWindow] = []
    for c0 in range(0, len(contexts), 1024):
        chunk = contexts[c0 : c0 + 1024]
        for ctx, toks in zip(chunk, tokenize_passages(tokenizer, chunk), strict=True):
            starts = window_starts(len(toks), window, stride)
            per_window = [TrainWindow(toks.input_ids[s : s + window], toks.flags[s : s + window], [], [], [])
                          for s in starts]
            for q in by_ctx[ctx]:
                if not q.answers or q.answer_starts[0] < 0:
                    skipped["no_answer_tokens"] += 1
                    continue
                a = q.answer_starts[0]
                span = char_to_token(toks.offsets, a, a + len(q.answers[0]))
                if span is None:
                    skipped["no_answer_tokens"] += 1
                    continue
                i, j = span
                if j - i >= max_answer_tokens:
                    skipped["too_long"] += 1
                    continue
                # window with the most context around the answer
                best, best_ctx = -1, -1
                for w, s in enumerate(starts):
                    if s <= i and j < s + window:
                        c = min(i - s, s + window - 1 - j)
                        if c > best_ctx:
                            best, best_ctx = w, c
                tw = per_window[best]
                tw.questions.append(q.question)
                tw.starts.append(i - starts[best])
                tw.ends.append(j - starts[best])
            windows.extend(w for w in per_window if w.questions)
    return windows, skipped


def collate(windows: list[TrainWindow], tokenizer, max_query_len: int) -> Batch:
    """Pad windows (adding [CLS]/[SEP]) and tokenise their questions; gold positions shift by 1 for [CLS]."""
    T = max(len(w.input_ids) for w in windows) + 2
    P = len(windows)
    ids = torch.full((P, T), tokenizer.pad_token_id or 0, dtype=torch.long)
    mask = torch.zeros((P, T), dtype=torch.long)
    flags = torch.zeros((P, T), dtype=torch.uint8)
    qs, q_passage, gs, ge = [], [], [], []
    for p, w in enumerate(windows):
        n = len(w.input_ids)
        ids[p, 0] = tokenizer.cls_token_id
        ids[p, 1 : n + 1] = torch.from_numpy(w.input_ids)
        ids[p, n + 1] = tokenizer.sep_token_id
        mask[p, : n + 2] = 1
        flags[p, 1 : n + 1] = torch.from_numpy(w.flags)
        qs.extend(w.questions)
        q_passage.extend([p] * len(w.questions))
        gs.extend(s + 1 for s in w.starts)
        ge.extend(e + 1 for e in w.ends)
    q = tokenizer(qs, padding=True, truncation=True, max_length=max_query_len, return_tensors="pt")
    return Batch(
        input_ids=ids,
        attention_mask=mask,
        start_ok=(flags & FLAG_START) > 0,
        end_ok=(flags & FLAG_END) > 0,
        q_input_ids=q["input_ids"],
        q_attention_mask=q["attention_mask"],
        q_passage=torch.tensor(q_passage),
        gold_start=torch.tensor(gs),
        gold_end=torch.tensor(ge),
    )
