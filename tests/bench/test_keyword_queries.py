"""The keyword rewrite of bench/keyword_queries.py: questions as a search box's keywords, ids and answers kept."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from spanseek.core.io import Question

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def kq():
    sys.path.insert(0, str(ROOT / "bench"))  # the script imports bench/machine.py
    try:
        spec = importlib.util.spec_from_file_location("keyword_queries", ROOT / "bench" / "keyword_queries.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(ROOT / "bench"))
    return module


@pytest.mark.parametrize("question, keywords", [
    ("What is the Grotto at Notre Dame?", "Grotto Notre Dame"),
    ("When did Beyoncé's debut album come out?", "Beyoncé debut album come out"),
    ("How many people live in the U.S. in mid-1990s?", "people live U.S mid-1990s"),
    ("Who was O'Neill's wife?", "O'Neill wife"),
    ("In what year did the supreme court rule?", "year supreme court rule"),
    ("What is it?", "What is it"),  # no word left: the words as they were
])
def test_questions_become_their_content_words_in_order(kq, question, keywords):
    assert kq.keywords(question) == keywords
    assert kq.is_keyword_query(keywords) == (keywords != "What is it")
    assert not kq.is_keyword_query(question)


def test_the_shuffled_order_is_a_permutation_drawn_from_the_id(kq):
    question = "Which river flows through the old city of Prague and its castle district?"
    words = kq.keywords(question).split()
    orders = {kq.keywords(question, shuffle_key=f"q{i}") for i in range(20)}
    assert all(sorted(o.split()) == sorted(words) for o in orders)
    assert len(orders) > 1 and kq.keywords(question, "q3") == kq.keywords(question, "q3")


def test_rewritten_questions_keep_ids_answers_and_titles(kq):
    q = Question(id="a-1", question="Who built the castle?", answers=("Bob",), answer_starts=(0,), title="Castle",
                 context="Bob built the castle.", doc_index=0, para_index=0)
    (k,) = kq.as_keywords([q])
    assert (k.id, k.question, k.answers, k.title) == ("a-1", "built castle", ("Bob",), "Castle")
