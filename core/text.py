"""Tokenisation with character offsets, word boundaries and overlapping windows.

A passage is tokenised once (no special tokens, no truncation). Long passages are cut into overlapping
windows of ``max_seq_len - 2`` content tokens; each token takes its vector from the window where it has the
most context on both sides. Phrases may only start at the first piece of a word and end at the last piece of a
word, so that answers never begin or end inside a word.
"""

from __future__ import annotations

import functools
import re
import sys
import unicodedata
from collections.abc import Generator, Iterable
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
        out.append(PassageTokens(input_ids=ids, offsets=ends_after_marks(texts[b], offsets), flags=flags))
    return out


# A BERT tokenizer (BertNormalizer, BertPreTokenizer) cleans, lowercases and strips accents a character at a time,
# then splits at whitespace and around each punctuation and CJK character before WordPiece sees the words: a text cut
# at such a boundary tokenises, piece by piece, to the text's own tokens. Its whitespace is " \t\n\r" and the space
# separators (Zs); a vertical tab, a form feed and other control characters are removed, not spaced, so cutting there
# could part one word in two.
_CJK = ((0x3400, 0x4DBF), (0x4E00, 0x9FFF), (0xF900, 0xFAFF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F),
        (0x2B740, 0x2B81F), (0x2B820, 0x2CEAF), (0x2F800, 0x2FA1F))


def splits_like_bert(tokenizer) -> bool:
    """Whether ``tokenizer`` is a fast tokenizer of BERT's normaliser and pre-tokeniser (the default model's, MPNet's),
    which ``tokenize_passage_steps`` may cut a text at word boundaries for."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    return (backend is not None and type(backend.pre_tokenizer).__name__ == "BertPreTokenizer"
            and type(backend.normalizer).__name__ in ("BertNormalizer", "NoneType"))


def _char_class(ranges: Iterable[tuple[int, int]]) -> str:
    """A regular expression character class's body of these (first, last) code point ranges."""
    return "".join(re.escape(chr(a)) if a == b else f"{re.escape(chr(a))}-{re.escape(chr(b))}" for a, b in ranges)


def _ranges(codes: list[int]) -> list[tuple[int, int]]:
    """Ascending code points as (first, last) runs."""
    out: list[tuple[int, int]] = []
    for c in codes:
        if out and out[-1][1] == c - 1:
            out[-1] = (out[-1][0], c)
        else:
            out.append((c, c))
    return out


@functools.cache
def _categories() -> dict[str, str]:
    """Regular expression character classes' bodies of Unicode's punctuation (P), space separators (Zs) and
    combining marks (M), by the category's first letter; built once (a pass over Unicode's categories)."""
    by_cat: dict[str, list[int]] = {"P": [], "Z": [], "M": []}
    for c in range(sys.maxunicode + 1):
        cat = unicodedata.category(chr(c))
        if cat[0] in "PM" or cat == "Zs":
            by_cat[cat[0]].append(c)
    return {cat: _char_class(_ranges(codes)) for cat, codes in by_cat.items()}


@functools.cache
def _word_cuts() -> re.Pattern[str]:
    """The positions a BERT tokenizer's words never cross: before whitespace (" \\t\\n\\r" or a space separator, Zs),
    before a character standing alone (punctuation: ASCII's or Unicode's P categories; CJK), or after one when no
    combining mark (M) follows it. One pattern, so that finding a cut in a text with none (100 KB of Cyrillic letters)
    takes milliseconds, not seconds of a test per character."""
    cats = _categories()
    alone = "!-/:-@\\[-`{-~" + cats["P"] + _char_class(_CJK)
    return re.compile(f"(?=[ \t\n\r{cats['Z']}{alone}])|(?<=[{alone}])(?![{cats['M']}])")


@functools.cache
def _mark_runs() -> re.Pattern[str]:
    """A run of combining marks (Unicode's M categories)."""
    return re.compile(f"[{_categories()['M']}]+")


def ends_after_marks(text: str, offsets: np.ndarray, token_starts: np.ndarray | None = None) -> np.ndarray:
    """``offsets`` ((n, 2) character [start, end) of tokens in ``text``; a token outside it, a special one, starts
    below 0 or ends where it starts) with each token's end moved past the combining marks right after it that no
    token holds: an uncased BERT tokenizer strips accents, and its offsets end a word before a mark that follows its
    last letter, so a decomposed "Zoë" ("e" + U+0308, as macOS and many PDFs write it) was answered "Zoe"; marks
    inside a word were kept already ("Noël"). ``token_starts``: where ``offsets`` are some of the text's tokens (a
    reader's window of a long passage), the starts of all of them, so that a mark the next window's token holds (a
    Devanagari vowel sign, "##ा") is not the window's last token's too; by default ``offsets``' own."""
    if text.isascii() or not len(offsets):
        return offsets
    runs = [(found.start(), found.end()) for found in _mark_runs().finditer(text)]
    if not runs:
        return offsets
    run_starts, run_ends = (np.asarray(edge, dtype=np.int64) for edge in zip(*runs, strict=True))
    starts, ends = offsets[:, 0].astype(np.int64), offsets[:, 1].astype(np.int64)
    real = (starts >= 0) & (ends > starts)
    # a run some token starts in is that token's (a cased tokenizer keeps marks, and may give them tokens of their own)
    taken = np.sort(starts[real] if token_starts is None else token_starts)
    if not len(taken):  # no token of the text (marks alone, which an uncased tokenizer strips): nothing to move
        return offsets
    at = np.searchsorted(run_starts, ends).clip(0, len(runs) - 1)
    before_run = real & (run_starts[at] == ends)
    next_start = taken[np.searchsorted(taken, ends).clip(0, len(taken) - 1)]
    free = ~((next_start >= ends) & (next_start < run_ends[at]))
    moved = before_run & free
    if not moved.any():
        return offsets
    out = offsets.copy()
    out[moved, 1] = run_ends[at][moved]
    return out


def prepare_marks() -> None:
    """Build the combining-mark pattern (``ends_after_marks``) now, so that the first non-ASCII passage read does not
    pay for it (its pass over Unicode: about 0.1 s of CPU, holding the GIL). A reader calls it when it loads."""
    _mark_runs()


def prepare_word_cuts(tokenizer) -> None:
    """Build the word-cut pattern now if ``tokenizer`` is one ``tokenize_passage_steps`` cuts texts for, so that the
    first long paragraph does not pay for it (its pass over Unicode: 0.3-0.4 s on a 2-core CPU, holding the GIL).
    The service calls it at start when writes are on."""
    if splits_like_bert(tokenizer):
        _word_cuts()


def word_cut(text: str, start: int, size: int) -> int:
    """Where the piece of ``text`` from ``start`` ends: the last word boundary (``_word_cuts``) at most ``size``
    characters on, else the first one after that (a word longer than ``size`` stays whole), else the end."""
    if len(text) - start <= size:
        return len(text)
    cuts = _word_cuts()
    last = None
    for m in cuts.finditer(text, start + 1, start + size + 1):  # the character at start + size is in sight
        if m.start() <= start + size:
            last = m.start()
    if last is not None:
        return last
    after = cuts.search(text, start + size + 1)
    return len(text) if after is None else min(after.start(), len(text))


def tokenize_passage_steps(tokenizer, text: str, size: int) -> Generator[int, None, PassageTokens]:
    """``tokenize_passages(tokenizer, [text])[0]`` a piece of at most about ``size`` characters a step, cut at word
    boundaries (``word_cut``), for a BERT tokenizer (``splits_like_bert``; another is one step): the tokens, offsets
    and flags are those of tokenising it whole. Yields the tokens so far after each piece but the last."""
    if not splits_like_bert(tokenizer):
        return tokenize_passages(tokenizer, [text])[0]
    pieces: list[PassageTokens] = []
    starts: list[int] = []
    start, count = 0, 0
    while True:
        end = word_cut(text, start, size)
        (piece,) = tokenize_passages(tokenizer, [text[start:end]])
        pieces.append(piece)
        starts.append(start)
        count += len(piece)
        if end >= len(text):
            break
        yield count
        start = end
    if len(pieces) == 1:
        return pieces[0]
    return PassageTokens(input_ids=np.concatenate([p.input_ids for p in pieces]),
                         offsets=np.concatenate([p.offsets + np.int32(s) for p, s in zip(pieces, starts, strict=True)]),
                         flags=np.concatenate([p.flags for p in pieces]))


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
