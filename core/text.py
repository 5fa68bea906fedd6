"""Tokenisation with character offsets, word boundaries and overlapping windows.

A passage is tokenised once (no special tokens, no truncation). Long passages are cut into overlapping
windows of ``max_seq_len - 2`` content tokens; each token takes its vector from the window where it has the
most context on both sides. Phrases may only start at the first piece of a word and end at the last piece of a
word, so that answers never begin or end inside a word.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


def has_text(question: str) -> bool:
    """Whether a question has a visible character: whitespace, control and format characters alone (NUL, a
    zero-width space, a byte order mark) make it blank, which gets no hits and is not encoded (the service, the
    search command)."""
    return any(ch.isprintable() and not ch.isspace() for ch in question)


FLAG_START = 1  # token may start a phrase (first piece of a word)
FLAG_END = 2  # token may end a phrase (last piece of a word)


@dataclass(frozen=True)
class PassageTokens:
    """One passage's content tokens.

    input_ids: (n,) int64 token ids (no [CLS]/[SEP]).
    offsets: (n, 2) int32 character [start, end) of each token in the passage text.
    flags: (n,) uint8 bit set of FLAG_START / FLAG_END.
    """

    input_ids: np.ndarray
    offsets: np.ndarray
    flags: np.ndarray

    def __len__(self) -> int:
        return len(self.input_ids)


def tokenize_passages(tokenizer, texts: list[str]) -> list[PassageTokens]:
    """Tokenise passages with a fast tokenizer, keeping character offsets and word boundaries."""
    if not texts:  # fast tokenizers raise IndexError on an empty batch
        return []
    enc = tokenizer(
        texts,
        add_special_tokens=False,
        return_offsets_mapping=True,
        return_attention_mask=False,
        truncation=False,
        verbose=False,
    )
    out = []
    for b in range(len(texts)):
        ids = np.asarray(enc["input_ids"][b], dtype=np.int64)
        offsets = np.asarray(enc["offset_mapping"][b], dtype=np.int32).reshape(-1, 2)
        words = enc.word_ids(b)
        w = np.asarray([-1 if x is None else x for x in words], dtype=np.int64)
        flags = np.zeros(len(ids), dtype=np.uint8)
        if len(ids):
            starts = np.ones(len(ids), dtype=bool)
            starts[1:] = w[1:] != w[:-1]
            ends = np.ones(len(ids), dtype=bool)
            ends[:-1] = w[:-1] != w[1:]
            flags = (starts * FLAG_START + ends * FLAG_END).astype(np.uint8)
        out.append(PassageTokens(input_ids=ids, offsets=offsets, flags=flags))
    return out


def window_starts(n_tokens: int, window: int, stride: int) -> list[int]:
    """Start positions of windows of ``window`` tokens overlapping by ``stride`` that cover ``n_tokens``."""
    if n_tokens <= window:
        return [0]
    step = window - stride
    starts = list(range(0, n_tokens - window, step))
    starts.append(n_tokens - window)  # the last window ends exactly at the passage end
    return starts


def best_window(n_tokens: int, starts: list[int], window: int) -> tuple[np.ndarray, np.ndarray]:
    """For each token, the window giving it the most context, and its position inside that window.

    Returns (window_index (n,), position (n,)). Context = distance to the nearer window edge, which is largest in
    the window whose centre is nearest (the first such window on a tie), so one binary search per token finds it:
    O(n log W) time and O(n) memory (a long paragraph has thousands of windows). The windows must cover the
    tokens, as ``window_starts`` gives them.
    """
    t2 = 2 * np.arange(n_tokens, dtype=np.int64)  # doubled coordinates keep half-token centres integral
    centres2 = 2 * np.asarray(starts, dtype=np.int64) + (window - 1)  # ascending
    right = np.searchsorted(centres2, t2, side="left").clip(0, len(centres2) - 1)  # first centre >= t
    left = (right - 1).clip(0, None)
    win = np.where(np.abs(t2 - centres2[left]) <= np.abs(centres2[right] - t2), left, right)
    return win, np.arange(n_tokens) - np.asarray(starts, dtype=np.int64)[win]


def char_to_token(offsets: np.ndarray, char_start: int, char_end: int) -> tuple[int, int] | None:
    """Token span [i, j] covering the character span [char_start, char_end), or None if it covers no token."""
    if len(offsets) == 0 or char_end <= char_start:
        return None
    overlaps = (offsets[:, 0] < char_end) & (offsets[:, 1] > char_start)
    idx = np.flatnonzero(overlaps)
    if len(idx) == 0:
        return None
    return int(idx[0]), int(idx[-1])
