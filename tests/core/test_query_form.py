"""Query forms (core.query_form): questions as a search box's keywords, ids and answers kept, and which queries
read as keywords."""

from __future__ import annotations

import pytest

from spanseek.core import query_form as kq
from spanseek.core.io import Question


@pytest.mark.parametrize("question, keywords", [
    ("What is the Grotto at Notre Dame?", "Grotto Notre Dame"),
    ("When did Beyoncé's debut album come out?", "Beyoncé debut album come out"),
    ("How many people live in the U.S. in mid-1990s?", "people live U.S mid-1990s"),
    ("Who was O'Neill's wife?", "O'Neill wife"),
    ("In what year did the supreme court rule?", "year supreme court rule"),
    ("What is it?", "What is it"),  # no word left: the words as they were
])
def test_questions_become_their_content_words_in_order(question, keywords):
    assert kq.keywords(question) == keywords
    assert kq.is_keyword_query(keywords) == (keywords != "What is it")
    assert not kq.is_keyword_query(question)


def test_the_shuffled_order_is_a_permutation_drawn_from_the_id():
    question = "Which river flows through the old city of Prague and its castle district?"
    words = kq.keywords(question).split()
    orders = {kq.keywords(question, shuffle_key=f"q{i}") for i in range(20)}
    assert all(sorted(o.split()) == sorted(words) for o in orders)
    assert len(orders) > 1 and kq.keywords(question, "q3") == kq.keywords(question, "q3")


def test_rewritten_questions_keep_ids_answers_and_titles():
    q = Question(id="a-1", question="Who built the castle?", answers=("Bob",), answer_starts=(0,), title="Castle",
                 context="Bob built the castle.", doc_index=0, para_index=0)
    (k,) = kq.as_keywords([q])
    assert (k.id, k.question, k.answers, k.title) == ("a-1", "built castle", ("Bob",), "Castle")


def test_in_form_gives_each_form_and_refuses_an_unknown_one():
    q = Question(id="a-1", question="Who built the castle?", answers=("Bob",), answer_starts=(0,), title="Castle",
                 context="Bob built the castle.", doc_index=0, para_index=0)
    assert kq.in_form([q], "question") == [q]
    assert [k.question for k in kq.in_form([q], "keywords")] == ["built castle"]
    assert sorted(kq.in_form([q], "shuffled")[0].question.split()) == ["built", "castle"]
    with pytest.raises(ValueError, match="unknown query form 'keyword'"):
        kq.in_form([q], "keyword")  # type: ignore[arg-type]
