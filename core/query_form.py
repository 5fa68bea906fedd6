"""What form a query takes: a question, or a search box's keywords; and the keyword rewrite of a question.

    python bench/keyword_queries.py make --questions fit.json.gz --out fit-keywords.jsonl
    spanseek train calibrate ... --forms question keywords

The rule (``keywords``) is deterministic: a question's words in order, less wh-words, auxiliary verbs, articles,
pronouns, prepositions and other stop words (``DROPPED``), its punctuation and possessive 's; "What is the Grotto
at Notre Dame?" reads "Grotto Notre Dame". A query reads as keywords (``is_keyword_query``) when it has words, none
a wh-word or an auxiliary verb, and no question mark. The benchmark of keyword queries (``bench/keyword_queries.py``)
and the calibration fit (``trainer.calibrate``) share these definitions.
"""

from __future__ import annotations

import dataclasses
import hashlib
import random
import re
from collections.abc import Sequence
from typing import Literal

from spanseek.core.io import Question

QueryForm = Literal["question", "keywords", "shuffled"]
QUERY_FORMS: tuple[QueryForm, ...] = ("question", "keywords", "shuffled")
WH_WORDS = ("what", "which", "who", "whom", "whose", "when", "where", "why", "how")
AUXILIARIES = ("is", "are", "was", "were", "be", "been", "being", "am", "do", "does", "did", "done", "has", "have",
               "had", "having", "can", "could", "will", "would", "shall", "should", "may", "might", "must")
ARTICLES = ("a", "an", "the")
STOP_WORDS = (  # pronouns, prepositions, conjunctions and the words that shape a question, not its subject
    "of", "in", "on", "at", "to", "for", "from", "by", "with", "about", "into", "onto", "upon", "over", "under",
    "during", "before", "after", "between", "through", "against", "among", "within", "without", "as", "than",
    "and", "or", "but", "nor", "so", "if", "then", "that", "this", "these", "those", "there", "here", "it", "its",
    "they", "them", "their", "theirs", "he", "him", "his", "she", "her", "hers", "we", "us", "our", "you", "your",
    "i", "me", "my", "some", "any", "many", "much", "also", "not", "no", "such", "other", "else", "whatever",
    "whichever",
)
DROPPED = frozenset(WH_WORDS + AUXILIARIES + ARTICLES + STOP_WORDS)
_ASKING = frozenset(WH_WORDS + AUXILIARIES)
# a word: letters, digits and inner hyphens, periods or apostrophes ("U.S.", "mid-1990s", "O'Neill")
_WORD = re.compile(r"\w+(?:[-.'’]\w+)*")


def words(text: str) -> list[str]:
    """The words of a text, in order, a possessive 's removed ("Beyoncé's" -> "Beyoncé")."""
    return [re.sub(r"['’]s$", "", w) for w in _WORD.findall(text)]


def is_keyword_query(text: str) -> bool:
    """Whether ``text`` reads as keywords: words, none a wh-word or an auxiliary verb, and no question mark."""
    found = words(text)
    return bool(found) and "?" not in text and not any(w.casefold() in _ASKING for w in found)


def keywords(question: str, shuffle_key: str | None = None) -> str:
    """A question as a search box's keywords: its words less ``DROPPED`` ones, in order, or in an order drawn from
    ``shuffle_key`` (a question's id: the same key, the same order). A question with no word left keeps its words."""
    found = words(question)
    kept = [w for w in found if w.casefold() not in DROPPED] or found
    if shuffle_key is not None:
        seed = int.from_bytes(hashlib.sha1(shuffle_key.encode("utf-8")).digest()[:8], "big")
        random.Random(seed).shuffle(kept)
    return " ".join(kept)


def as_keywords(questions: Sequence[Question], shuffled: bool = False) -> list[Question]:
    """The questions with their text as ``keywords``; ids, answers and titles unchanged."""
    return [dataclasses.replace(q, question=keywords(q.question, q.id if shuffled else None)) for q in questions]


def in_form(questions: Sequence[Question], form: QueryForm) -> list[Question]:
    """The questions as ``form`` reads them: as they are (``question``), as ``keywords``, or as keywords in an order
    drawn from each id (``shuffled``)."""
    if form not in QUERY_FORMS:
        raise ValueError(f"unknown query form {form!r}; known: {', '.join(QUERY_FORMS)}")
    return list(questions) if form == "question" else as_keywords(questions, shuffled=form == "shuffled")


__all__ = ["DROPPED", "QUERY_FORMS", "QueryForm", "as_keywords", "in_form", "is_keyword_query", "keywords", "words"]
