"""Windows and tokenisation (core.text): coverage, best-context assignment, offsets and word-boundary flags.

    .venv/bin/python -m pytest -q tests/core/test_text.py
"""

from __future__ import annotations

import copy
import random
import time
import unicodedata

import numpy as np
import pytest

from spanseek.core.encoding import advance
from spanseek.core.text import (
    FLAG_END,
    FLAG_START,
    best_window,
    char_to_token,
    tokenize_passage_steps,
    tokenize_passages,
    window_starts,
    word_cut,
)

CASES = [(n, w, s) for n in (0, 1, 5, 30, 31, 52, 53, 100, 257) for w, s in ((30, 8), (10, 3), (254, 64))]


@pytest.mark.parametrize(("n", "window", "stride"), CASES)
def test_windows_cover_every_token_and_overlap(n, window, stride):
    starts = window_starts(n, window, stride)
    assert starts[0] == 0 and starts == sorted(set(starts))
    covered = np.zeros(n, dtype=bool)
    for s in starts:
        covered[s : s + window] = True
    assert covered.all()
    if n > window:
        assert starts[-1] + window == n  # the last window ends at the passage end, no window runs past it
        assert all(b - a <= window - stride for a, b in zip(starts, starts[1:], strict=False))  # overlap >= stride
    else:
        assert starts == [0]


@pytest.mark.parametrize(("n", "window", "stride"), [c for c in CASES if c[0] > 0])
def test_best_window_gives_each_token_the_most_context(n, window, stride):
    starts = window_starts(n, window, stride)
    win, pos = best_window(n, starts, window)
    for t in range(n):
        contexts = [min(t - s, s + window - 1 - t) for s in starts if s <= t < s + window]
        chosen = starts[win[t]]
        assert chosen + pos[t] == t and 0 <= pos[t] < window
        assert min(pos[t], window - 1 - pos[t]) == max(contexts)


def test_best_window_hand_example():
    # n=12, windows of 8 at [0, 4]: tokens 0..5 are best in window 0 (ties go to the first), 6..11 in window 1
    win, pos = best_window(12, window_starts(12, 8, 4), 8)
    assert window_starts(12, 8, 4) == [0, 4]
    assert win.tolist() == [0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1]
    assert pos.tolist() == [0, 1, 2, 3, 4, 5, 2, 3, 4, 5, 6, 7]


def test_offsets_and_word_flags(tiny_backbone):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_backbone)
    text = "Unbelievably, Borin's railway (1841) crossed Llanfairpwll."
    [pt] = tokenize_passages(tok, [text])
    assert len(pt) == len(tok(text, add_special_tokens=False)["input_ids"])
    pieces = tok.convert_ids_to_tokens(pt.input_ids.tolist())
    for piece, (a, b), f in zip(pieces, pt.offsets.tolist(), pt.flags.tolist(), strict=True):
        assert text[a:b].lower() == piece.removeprefix("##")  # offsets point at the piece's characters
        assert bool(f & FLAG_START) == (not piece.startswith("##"))
    # a token may end a phrase exactly when the next one does not continue its word
    for t in range(len(pt)):
        nxt_continues = t + 1 < len(pt) and pieces[t + 1].startswith("##")
        assert bool(pt.flags[t] & FLAG_END) == (not nxt_continues)


DECOMPOSED = "Zoe\u0308 met Noe\u0308l, Chloe\u0308\u0301 and Zoe\u0308! Cafe\u0301"


def test_a_word_ending_in_a_combining_mark_keeps_it(tiny_backbone):
    """An uncased tokenizer strips accents, and its offsets ended a word before a combining mark after its last
    letter: a decomposed "Zoë" ("e" + U+0308, as macOS and many PDFs write it) was answered "Zoe". Each token's text
    is the composed text's token's, marks and all (a mark inside a word, "Noël", was kept already)."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_backbone)
    composed = unicodedata.normalize("NFC", DECOMPOSED)
    [got], [want] = tokenize_passages(tok, [DECOMPOSED]), tokenize_passages(tok, [composed])
    np.testing.assert_array_equal(got.input_ids, want.input_ids)
    assert ([unicodedata.normalize("NFC", DECOMPOSED[a:b]) for a, b in got.offsets.tolist()]
            == [composed[a:b] for a, b in want.offsets.tolist()])
    assert DECOMPOSED[slice(*got.offsets[0])] == "Zoe\u0308"


def _steps(steps):
    """What each step of ``steps`` yielded, and what it returned."""
    yielded = []
    while not (done := advance(steps))[0]:
        yielded.append(done[1])
    return yielded, done[1]


def _assert_same_tokens(got, want, text):
    for name in ("input_ids", "offsets", "flags"):
        np.testing.assert_array_equal(getattr(got, name), getattr(want, name), err_msg=f"{name} of {text!r}")


# whitespace BERT spaces and removes (vertical tab, form feed, NUL, U+FFFD, U+0085), accents alone and combined,
# CJK, punctuation of both kinds, zero-width and symbol characters, ligatures, long words
ALPHABET = [*"ab cdé\u0301!,.-'\"#$%\t\n\r\x0b\x0c\x00\ufffd\u00a0\u3000\u2028\x85中文日本Å\u03a3\u03c2\ufb01\u2460"
            "\u200b\ufeff\U0001f600\u00bf\u2014", "word", "Straße", "naïve", "x" * 120]


def test_a_long_passage_tokenised_in_pieces_has_the_tokens_of_tokenising_it_whole(tiny_backbone):
    """A paragraph over a write's step was tokenised in one call (a megabyte of punctuation: 5-11 s that searches
    waited behind); cut at word boundaries, its pieces give the very tokens, offsets and flags of the whole text."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_backbone)
    rng = random.Random(0)
    for _ in range(600):
        text = "".join(rng.choice(ALPHABET) for _ in range(rng.randint(1, 80)))
        yielded, got = _steps(tokenize_passage_steps(tok, text, rng.randint(1, 24)))
        _assert_same_tokens(got, tokenize_passages(tok, [text])[0], text)
        assert yielded == sorted(yielded) and all(n <= len(got) for n in yielded)
    blob = "!" * 5000 + " Unbelievably, Borin's railway (1841) crossed Llanfairpwll. " * 40 + "a.b," * 500
    yielded, got = _steps(tokenize_passage_steps(tok, blob, 500))
    _assert_same_tokens(got, tokenize_passages(tok, [blob])[0], blob)
    assert len(yielded) + 1 == -(-len(blob) // 500)  # a piece a step, none longer than 500 characters
    assert yielded[0] == 500 and yielded[-1] < len(got)  # the tokens so far: "!" is a token


def _stands_alone(ch: str) -> bool:
    o = ord(ch)
    return (33 <= o <= 47 or 58 <= o <= 64 or 91 <= o <= 96 or 123 <= o <= 126
            or unicodedata.category(ch).startswith("P") or 0x3400 <= o <= 0x4DBF or 0x4E00 <= o <= 0x9FFF
            or 0xF900 <= o <= 0xFAFF or 0x20000 <= o <= 0x2A6DF or 0x2A700 <= o <= 0x2CEAF or 0x2F800 <= o <= 0x2FA1F)


def _cuts_at(text: str, i: int) -> bool:
    """A BERT tokenizer's words never cross position i: whitespace or a character standing alone starts there, or
    one ends there and no combining mark follows it (a character at a time: the oracle)."""
    ch = text[i]
    return (ch in " \t\n\r" or unicodedata.category(ch) == "Zs" or _stands_alone(ch)
            or (_stands_alone(text[i - 1]) and not unicodedata.category(ch).startswith("M")))


def test_word_cut_is_the_last_boundary_within_the_size_else_the_first_after_it():
    rng = random.Random(1)
    for _ in range(3000):
        text = "".join(rng.choice(ALPHABET) for _ in range(rng.randint(1, 60)))
        start, size = rng.randint(0, len(text) - 1), rng.randint(1, 12)
        cuts = [i for i in range(start + 1, len(text)) if _cuts_at(text, i)]
        within = [i for i in cuts if i <= start + size]
        want = (len(text) if len(text) - start <= size else within[-1] if within
                else next((i for i in cuts if i > start + size), len(text)))
        assert word_cut(text, start, size) == want, (text, start, size)


def test_a_long_word_without_a_cut_is_found_whole_quickly():
    """100 KB of Cyrillic letters (or Thai, Hangul, an Arabic word) has no cut: it was looked for a character at a
    time, 2-3 s in one step while tokenising it whole takes 0.15 s."""
    word_cut("warm up " * 3, 0, 4)
    for text in ("\u0436" * 300_000, "x" * 10 + "\u0e01" * 300_000):
        t = time.process_time()  # CPU time: other work on the machine does not count
        assert word_cut(text, 0, 8192) == len(text)
        assert time.process_time() - t < 2.0


def test_a_tokenizer_not_splitting_like_bert_tokenises_a_long_passage_in_one_step(tiny_backbone):
    from tokenizers import pre_tokenizers
    from transformers import AutoTokenizer

    tok = copy.deepcopy(AutoTokenizer.from_pretrained(tiny_backbone))
    tok.backend_tokenizer.pre_tokenizer = pre_tokenizers.Metaspace()  # words may not end where BERT's do
    text = "Borin's railway crossed Llanfairpwll. " * 20
    yielded, got = _steps(tokenize_passage_steps(tok, text, 50))
    assert yielded == []
    _assert_same_tokens(got, tokenize_passages(tok, [text])[0], text)


def test_char_to_token():
    offsets = np.array([[0, 2], [3, 7], [7, 9], [10, 14]])  # "In Bori n' 1841"-like layout
    assert char_to_token(offsets, 3, 9) == (1, 2)
    assert char_to_token(offsets, 4, 5) == (1, 1)  # inside a token: that token
    assert char_to_token(offsets, 0, 14) == (0, 3)
    assert char_to_token(offsets, 2, 3) is None  # only the space
    assert char_to_token(offsets, 5, 5) is None
    assert char_to_token(np.zeros((0, 2)), 0, 1) is None


def test_best_window_is_the_dense_argmax_with_linear_memory():
    """Oracle: the first window of greatest context (the dense (windows x tokens) argmax it replaced). A 1 MB
    paragraph has ~200k tokens in ~1,000 windows: the dense form took gigabytes, this takes a few arrays of n."""
    import tracemalloc

    for n, window, stride in [(1, 1, 0), (7, 3, 1), (100, 8, 3), (1000, 30, 7), (999, 254, 64), (5000, 254, 64)]:
        starts = window_starts(n, window, stride)
        pos = np.arange(n)[None, :] - np.asarray(starts)[:, None]
        context = np.where((pos >= 0) & (pos < window), np.minimum(pos, window - 1 - pos), -1)
        want = context.argmax(axis=0)
        win, got_pos = best_window(n, starts, window)
        assert np.array_equal(win, want) and np.array_equal(got_pos, pos[want, np.arange(n)])
    n = 200_000
    starts = window_starts(n, 254, 64)
    tracemalloc.start()
    best_window(n, starts, 254)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert len(starts) > 1000 and peak < 16 * n * 8  # a few int64 arrays of n, not windows x n
