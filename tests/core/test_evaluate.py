"""The evaluation loop (core.evaluate) on a scripted searcher: every metric of the metrics dict by hand.

    .venv/bin/python -m pytest -q tests/core/test_evaluate.py
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from spanseek.core.evaluate import confidence_intervals, document_groups, evaluate, sample_questions
from spanseek.core.hits import Hit
from spanseek.core.io import Question

CONTEXTS = ("Paris is the capital of France.", "New York is a city in the USA.")
QUESTIONS = [
    Question("q1", "capital of France?", ("Paris",), (0,), "France", CONTEXTS[0], 0, 0),
    Question("q2", "big US city?", ("New York",), (0,), "USA", CONTEXTS[1], 1, 0),
]


def hit(text: str, passage: str = "", title: str = "", passage_id: int = 0) -> Hit:
    return Hit(text=text, score=0.0, start=0, end=len(text), passage_id=passage_id, passage=passage, doc_id="",
               title=title)


# what the scripted searcher answers, per question and unit
PHRASES = [[hit("paris"), hit("Lyon")], [hit("New York City"), hit("new york")]]
PASSAGES = [
    [hit("", "Berlin is big."), hit("", "Paris, the capital.")] + [hit("", "nothing")] * 18,  # correct at rank 2
    [hit("", "nothing")] * 6 + [hit("", "Life in NEW YORK!")],  # matches after normalisation, at rank 7
]
DOCS = [[hit("", title="France")], [hit("", title="Canada"), hit("", title="USA")]]
MERGED = [[hit("Lyon")], [hit("new york")]]  # the phrase unit with merge_answers: q1 wrong, q2 right
RC = ["Paris", "York"]


class ScriptedSearcher:
    def __init__(self):
        self.index = SimpleNamespace(passages=[{"doc": 0, "text": CONTEXTS[0]}, {"doc": 1, "text": CONTEXTS[1]}],
                                     docs=[{"title": "France"}, {"title": "USA"}])
        self.encoder = SimpleNamespace(encode=self.encode)

    @staticmethod
    def encode(questions: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """q_start = q_end = (B, 1): the question's row in QUESTIONS (the scripted answers are looked up by it)."""
        rows = np.array([[next(i for i, q in enumerate(QUESTIONS) if q.question == x)] for x in questions], float)
        return rows, rows

    @staticmethod
    def check_mode(params):
        return params.mode or "dense"

    def search_vectors(self, q_start, q_end, params, timings=None, questions=None):
        table = MERGED if params.merge_answers else {"phrase": PHRASES, "passage": PASSAGES, "doc": DOCS}[params.unit]
        return [table[int(row[0])][: params.top_k] for row in q_start]

    def passage_best_span(self, passage_id, q_start, q_end, decode):
        assert passage_id == int(q_start[0])  # the gold passage of the question
        assert decode == "answer"  # evaluate's default
        return hit(RC[passage_id])


def test_metrics_dict_by_hand():
    m = evaluate(ScriptedSearcher(), QUESTIONS, reading_comprehension=True, progress=False)
    assert list(m) == ["n_questions", "mode", "read", "phrase", "passage", "doc", "rc", "ci95", "seconds",
                       "questions_per_second"]
    assert m["read"] is False
    assert m["n_questions"] == 2
    # phrase: q1 'paris' exact; q2 'New York City' vs 'New York': F1 0.8, exact at rank 2
    assert m["phrase"] == {"em@1": 50.0, "f1@1": 90.0, "em@10": 100.0, "merged_em@1": 50.0}
    # passage: q1 correct at rank 2, q2 at rank 7: acc@1 0, acc@5 1/2, acc@20 1, MRR (1/2 + 1/7)/2, P@20 1/20
    assert m["passage"] == {"acc@1": 0.0, "acc@5": 50.0, "acc@20": 100.0, "mrr@20": 32.1, "p@20": 5.0}
    assert m["doc"] == {"acc@1": 50.0, "acc@5": 100.0}
    # reading comprehension: 'Paris' exact; 'York' vs 'New York': P 1, R 1/2, F1 2/3
    assert m["rc"] == {"em": 50.0, "f1": 83.3}
    # two articles are too few to resample: the interval resamples questions, and holds each point estimate
    ci = m["ci95"]
    assert ci["by"] == "question" and ci["groups"] == 2 and set(ci) == {"by", "groups", "phrase.em@1",
                                                                         "passage.acc@5", "rc.em"}
    assert ci["phrase.em@1"][0] <= 50.0 <= ci["phrase.em@1"][1] and ci["rc.em"][0] <= 50.0 <= ci["rc.em"][1]


def test_every_key_of_the_metrics_is_documented():
    """A user reads the metrics JSON through docs/questions.md: it left out n_questions, mode, read, model, reader,
    seconds and questions_per_second."""
    from pathlib import Path

    docs = (Path(__file__).parents[2] / "docs" / "questions.md").read_text(encoding="utf-8")
    searcher = ScriptedSearcher()
    searcher.index.docs = [{"title": "elsewhere"}, {"title": "USA"}]  # articles_not_in_index
    anonymous = Question("q3", QUESTIONS[0].question, ("Paris",), (), "", "", -1, -1)  # doc.questions
    runs = (evaluate(ScriptedSearcher(), QUESTIONS, reading_comprehension=True, progress=False),
            evaluate(searcher, [*QUESTIONS, anonymous], progress=False, unanswerable_skipped=1))
    keys = {"model", "reader"}  # run_eval's
    for m in runs:
        keys |= {f"{k}.{sub}" if isinstance(v, dict) and k != "ci95" else k for k, v in m.items()
                 for sub in (v if isinstance(v, dict) and k != "ci95" else [""])}
    assert {"unanswerable_skipped", "doc.articles_not_in_index", "doc.questions"} <= keys
    assert [k for k in sorted(keys) if f"`{k}`" not in docs and f"`{k.rsplit('@', 1)[0]}@" not in docs] == []


def test_confidence_intervals_resample_articles_when_there_are_enough():
    qs = [Question(f"q{i}", "q", ("a",), (0,), f"article-{i % 6}", "c", i % 6, 0) for i in range(60)]
    ci = confidence_intervals(qs, {"x": [float(i % 6 < 3) for i in range(60)]})  # 3 articles right, 3 wrong
    assert ci["by"] == "article" and ci["groups"] == 6
    assert ci["x"][0] < 50.0 < ci["x"][1]


def test_confidence_intervals_resample_the_documents_that_questions_name_by_doc_id():
    """Open-domain questions that name their document by doc_id alone (no title) are grouped by it: each document's
    ten questions are all right or all wrong, so resampling questions one by one would be ~3x too narrow."""
    qs = [Question(f"q{i}", "q", ("a",), (), "", "", -1, -1, doc_id=f"doc-{i % 6}") for i in range(60)]
    values = [float(i % 6 < 3) for i in range(60)]
    ci = confidence_intervals(qs, {"x": values})
    assert ci["by"] == "article" and ci["groups"] == 6
    per_question = confidence_intervals([Question(f"q{i}", "q", ("a",), (), "", "", -1, -1) for i in range(60)],
                                        {"x": values})
    assert per_question["by"] == "question" and per_question["groups"] == 60
    assert ci["x"][1] - ci["x"][0] > 2 * (per_question["x"][1] - per_question["x"][0])


def test_questions_that_name_no_document_are_groups_of_their_own():
    """Beside questions of six titled articles, each untitled question is its own group, not one shared group."""
    titled = [Question(f"t{i}", "q", ("a",), (0,), f"article-{i % 6}", "c", i % 6, 0) for i in range(12)]
    untitled = [Question(f"u{i}", "q", ("a",), (), "", "", -1, -1) for i in range(30)]
    ci = confidence_intervals(titled + untitled, {"x": [1.0] * 12 + [float(i % 2) for i in range(30)]})
    assert ci["by"] == "article" and ci["groups"] == 6 + 30


def test_a_question_is_grouped_by_its_doc_id_else_its_title_else_alone():
    """The groups the paired benchmarks resample are ``spanseek eval``'s: they grouped by title, so questions of two
    documents that share a title (or have none) moved as one."""
    qs = [Question("a", "q", ("a",), (), "Bridges", "", -1, -1, doc_id="d1"),
          Question("b", "q", ("a",), (), "Bridges", "", -1, -1, doc_id="d2"),
          Question("c", "q", ("a",), (0,), "Bridges", "c", 0, 0),
          Question("d", "q", ("a",), (), "", "", -1, -1), Question("e", "q", ("a",), (), "", "", -1, -1)]
    assert document_groups(qs) == ["id:d1", "id:d2", "title:Bridges", "question 3", "question 4"]


def test_without_reading_comprehension_there_is_no_rc_key():
    m = evaluate(ScriptedSearcher(), QUESTIONS, progress=False)
    assert "rc" not in m and m["phrase"]["em@1"] == 50.0


def test_merged_em_counts_the_merged_top_answer():
    """q1's top phrase is right and its merged answer wrong: the two metrics read different searches."""
    m = evaluate(ScriptedSearcher(), QUESTIONS[:1], progress=False)
    assert m["phrase"]["em@1"] == 100.0 and m["phrase"]["merged_em@1"] == 0.0


def test_a_question_without_phrase_hits_is_answered_wrong_whatever_its_answer(monkeypatch):
    """An answer that normalises to nothing ("The The", a band) equals an empty prediction by SQuAD's definition; a
    search that found no phrase has made no prediction, and counts wrong, as the merged answer did."""
    searcher = ScriptedSearcher()
    band = Question("q1", QUESTIONS[0].question, ("The The",), (0,), "France", CONTEXTS[0], 0, 0)
    search = searcher.search_vectors
    monkeypatch.setattr(searcher, "search_vectors", lambda qs, qe, params, *a: [[] for _ in qs]
                        if params.unit == "phrase" else search(qs, qe, params, *a))
    m = evaluate(searcher, [band], progress=False)
    assert m["phrase"] == {"em@1": 0.0, "f1@1": 0.0, "em@10": 0.0, "merged_em@1": 0.0}


def test_sample_is_fixed_and_bounded():
    qs = [Question(str(i), "q", ("a",), (0,), "t", "c", 0, 0) for i in range(50)]
    a, b = sample_questions(qs, 10), sample_questions(qs, 10)
    assert [q.id for q in a] == [q.id for q in b] and len({q.id for q in a}) == 10
    assert sample_questions(qs, None) is qs and sample_questions(qs, 500) is qs


def test_missing_gold_passage_is_an_error_before_any_search(monkeypatch):
    """Reading comprehension answers from each question's gold passage: one the index lacks was found only when its
    batch came, after every question before it had been searched (minutes on a large file), and named alone."""
    searcher = ScriptedSearcher()
    searched = []
    monkeypatch.setattr(searcher, "search_vectors", lambda *a, **k: searched.append(a) or [])
    strangers = [Question(f"q{i}", "capital of France?", ("Paris",), (0,), "France", f"Not in the index {i}.", 0, i)
                 for i in (3, 4)]
    with pytest.raises(ValueError, match=r"q3: its gold passage is not in the index \(2 of 3 questions' passages are "
                       r"not, the first of article 'France'\)"):
        evaluate(searcher, [QUESTIONS[0], *strangers], reading_comprehension=True, progress=False, batch_size=1)
    assert searched == []


def test_articles_that_are_no_document_of_the_index_are_said_and_counted(caplog):
    """Documents are matched by title: questions of an index built from other files (titles from file names) scored
    document accuracy 0 without a word."""
    searcher = ScriptedSearcher()
    searcher.index.docs = [{"title": "france.pdf"}, {"title": "USA"}]
    m = evaluate(searcher, QUESTIONS, progress=False)
    assert m["doc"]["articles_not_in_index"] == 1 and "1 of 2 questions' articles (e.g. 'France')" in caplog.text
    assert "articles_not_in_index" not in evaluate(ScriptedSearcher(), QUESTIONS, progress=False)["doc"]


def test_document_accuracy_is_over_the_questions_that_name_their_document():
    """A question that names no document (no title, no doc_id) beside others that do used to count wrong in document
    accuracy (and as an article missing from the index); it has no document metric, as in a file of such questions."""
    anonymous = Question("q3", QUESTIONS[0].question, ("Paris",), (), "", "", -1, -1)
    m = evaluate(ScriptedSearcher(), [*QUESTIONS, anonymous], progress=False)
    assert m["doc"] == {"acc@1": 50.0, "acc@5": 100.0, "questions": 2}
    assert m["n_questions"] == 3 and m["phrase"]["em@1"] == pytest.approx(66.7)


def test_unknown_rc_decode_is_refused_even_without_reading_comprehension():
    with pytest.raises(ValueError, match="rc_decode must be one of"):
        evaluate(ScriptedSearcher(), QUESTIONS, rc_decode="beam", progress=False)


def test_no_questions_is_an_error_not_nan_metrics():
    with pytest.raises(ValueError, match="no questions to evaluate"):
        evaluate(ScriptedSearcher(), [], progress=False)


def searched_params(searcher, monkeypatch) -> list:
    """The SearchParams of every search ``searcher`` runs from now on (the search itself goes on as before)."""
    seen: list = []
    search = searcher.search_vectors
    monkeypatch.setattr(searcher, "search_vectors", lambda qs, qe, params, *a: seen.append(params) or search(
        qs, qe, params, *a))
    return seen


def runs_by_unit(seen: list) -> dict:
    """{(unit, merge_answers): (fusion, lexical_weight)} of the searches seen, each run searched the same way."""
    out: dict = {}
    for p in seen:
        ranked_by = (p.fusion, p.lexical_weight)
        assert out.setdefault((p.unit, p.merge_answers), ranked_by) == ranked_by
    return out


def test_a_fusion_for_the_passage_and_doc_runs_is_accepted(tiny_searcher, tiny_squad, monkeypatch):
    """``eval --fusion rrf`` ranks its passage and document runs by rank fusion; its phrase runs, which fusion does
    not rank, must not refuse the whole evaluation: they search without it."""
    from spanseek.core.io import load_squad, squad_questions
    from spanseek.core.params import SearchParams

    questions = squad_questions(load_squad(tiny_squad))[:4]
    seen = searched_params(tiny_searcher, monkeypatch)
    m = evaluate(tiny_searcher, questions, params=SearchParams(mode="hybrid", fusion="rrf"), progress=False)
    assert m["mode"] == "hybrid" and m["n_questions"] == 4
    assert runs_by_unit(seen) == {("phrase", False): (None, None), ("phrase", True): (None, None),
                                  ("passage", False): ("rrf", None), ("doc", False): ("rrf", None)}
    assert {p.mode for p in seen} == {"hybrid"}


def test_a_fusion_and_a_weight_rank_the_runs_they_apply_to(tiny_searcher, tiny_squad, monkeypatch):
    """``eval --fusion rrf --lexical-weight 2``: the weight ranks the phrase runs, rank fusion the passage and
    document runs (which it leaves unweighted); neither refuses the evaluation. With score fusion the weight ranks
    every run."""
    from spanseek.core.io import load_squad, squad_questions
    from spanseek.core.params import SearchParams

    questions = squad_questions(load_squad(tiny_squad))[:4]
    seen = searched_params(tiny_searcher, monkeypatch)
    m = evaluate(tiny_searcher, questions, params=SearchParams(mode="hybrid", fusion="rrf", lexical_weight=2.0),
                 progress=False)
    assert m["mode"] == "hybrid" and m["n_questions"] == 4
    assert runs_by_unit(seen) == {("phrase", False): (None, 2.0), ("phrase", True): (None, 2.0),
                                  ("passage", False): ("rrf", None), ("doc", False): ("rrf", None)}
    seen.clear()
    evaluate(tiny_searcher, questions, params=SearchParams(mode="hybrid", fusion="score", lexical_weight=2.0),
             progress=False)
    assert runs_by_unit(seen) == {("phrase", False): (None, 2.0), ("phrase", True): (None, 2.0),
                                  ("passage", False): ("score", 2.0), ("doc", False): ("score", 2.0)}


def test_a_gold_document_id_matches_a_hit_in_either_unicode_spelling():
    """An open-domain question file's ``doc_id`` "café" typed decomposed (NFD) names the document an index holds
    composed, as every id lookup reads it (core.ids)."""
    from types import SimpleNamespace

    from spanseek.core.evaluate import is_gold_document

    nfc, nfd = "caf\u00e9", "cafe\u0301"
    hit = SimpleNamespace(doc_id=nfc, title="Café")
    assert is_gold_document(hit, SimpleNamespace(doc_id=nfd, title="elsewhere"))
    assert not is_gold_document(hit, SimpleNamespace(doc_id="cafe", title="Café"))  # an id, not a title, decides
    assert is_gold_document(hit, SimpleNamespace(doc_id=None, title="Café"))
