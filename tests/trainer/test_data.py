"""Training windows (trainer.data): every question lands in a window that holds its answer, at the right token
positions (before and after collation), and an answer that no window holds is skipped and counted, never
misplaced.

    .venv/bin/python -m pytest -q tests/trainer/test_data.py
"""

from __future__ import annotations

import pytest
import torch

from spanseek.core.io import Question, load_squad, squad_questions
from spanseek.trainer.data import build_windows, collate


@pytest.fixture(scope="module")
def tokenizer(tiny_backbone):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_backbone)


def answer_ids(tokenizer, q: Question) -> list[int]:
    return tokenizer(q.answers[0], add_special_tokens=False)["input_ids"]


def test_gold_positions_point_at_the_answer(tokenizer, tiny_squad):
    questions = squad_questions(load_squad(tiny_squad))
    windows, skipped = build_windows(questions, tokenizer, max_seq_len=16, stride=6, max_answer_tokens=6)
    by_text = {q.question: q for q in questions}
    assert sum(len(w.questions) for w in windows) == len(questions) and sum(skipped.values()) == 0
    assert any(len(w.input_ids) == 14 for w in windows)  # paragraphs really were cut into several windows
    for w in windows:
        for text, s, e in zip(w.questions, w.starts, w.ends, strict=True):
            assert 0 <= s <= e < len(w.input_ids)
            assert w.input_ids[s : e + 1].tolist() == answer_ids(tokenizer, by_text[text])
    batch = collate(windows[:5], tokenizer, max_query_len=32)
    for r, (p, s, e) in enumerate(zip(batch.q_passage, batch.gold_start, batch.gold_end, strict=True)):
        w = windows[int(p)]
        k = sum(len(x.questions) for x in windows[: int(p)])
        assert batch.input_ids[p, s : e + 1].tolist() == w.input_ids[w.starts[r - k] : w.ends[r - k] + 1].tolist()
        assert bool(batch.start_ok[p, s]) and bool(batch.end_ok[p, e])
    assert (batch.input_ids[:, 0] == tokenizer.cls_token_id).all()


def test_an_answer_no_window_holds_is_skipped_not_misplaced(tokenizer):
    # one-token words: windows of 10 content tokens overlapping by 2 start at 0, 8, 16; tokens 6..11 fit in none
    words = "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen".split()
    context = " ".join(words)
    assert len(tokenizer(context, add_special_tokens=False)["input_ids"]) == len(words)
    start = context.index("six")
    crossing = Question("x", "which?", ("six seven eight nine ten eleven",), (start,), "t", context, 0, 0)
    inside = Question("y", "which?", ("nine ten",), (context.index("nine"),), "t", context, 0, 0)
    windows, skipped = build_windows([crossing, inside], tokenizer, max_seq_len=12, stride=2, max_answer_tokens=6)
    placed = [(w.input_ids[s : e + 1].tolist(), q) for w in windows for q, s, e in zip(w.questions, w.starts, w.ends, strict=True)]
    assert len(placed) == 1 and placed[0][0] == answer_ids(tokenizer, inside)
    assert sum(skipped.values()) == 1


def test_an_answer_that_starts_or_ends_inside_a_word_is_skipped(tokenizer):
    # SQuAD has a few (~0.2%) such answers; a gold token that may not start/end a phrase is masked out of the
    # softmax, which made the question's loss ~1e4 and could never be learned
    context = "In 1841 Borin crossed Llanfairpwllgwyngyll by railway."
    pieces = tokenizer.tokenize("Llanfairpwllgwyngyll")
    assert len(pieces) > 2
    word = context.index("Llanfair")
    inside = Question("in", "where?", ("Llanfair",), (word,), "t", context, 0, 0)  # ends inside the word
    tail = Question("tail", "where?", ("gyll",), (context.index("gyll"),), "t", context, 0, 0)  # starts inside it
    whole = Question("whole", "where?", ("Llanfairpwllgwyngyll",), (word,), "t", context, 0, 0)
    windows, skipped = build_windows([inside, tail, whole], tokenizer, max_seq_len=64, stride=8, max_answer_tokens=16)
    assert [q for w in windows for q in w.questions] == ["where?"] and sum(skipped.values()) == 2
    [w] = windows
    assert w.input_ids[w.starts[0] : w.ends[0] + 1].tolist() == answer_ids(tokenizer, whole)


def test_hard_allowed_matches_checking_every_pair():
    """The batch's negative mask normalises each hard passage once; it must equal the per-pair check."""
    from spanseek.core.metrics import passage_has_answer
    from spanseek.trainer.data import hard_allowed

    texts = ["The Eiffel Tower is in Paris.", "Paris, Texas is a town.", "Nothing here.", "The the"]
    answers = [["Paris"], ["the Eiffel Tower", "Eiffel"], ["Texas"], ["a"], ["tower!"], ["Nothing", "x"], []]
    got = hard_allowed(texts, answers)
    assert got.shape == (len(answers), len(texts)) and got.dtype == torch.bool
    assert got.tolist() == [[not passage_has_answer(t, a) for t in texts] for a in answers]
    assert got[0].tolist() == [False, False, True, True] and got[3].tolist() == [True] * 4  # "a" normalises away
    assert hard_allowed([], answers).shape == (len(answers), 0)
