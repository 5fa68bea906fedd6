"""What a request costs and when it is more than the server ever admits (service.cost), reading above all: counted at
its measured cost and at the reader's own default depth, and bounded apart from the search."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import pytest

from spanseek.core.params import SearchParams
from spanseek.service.cost import READ_PASSAGE_COST, CostModel


def limits(**overrides) -> SimpleNamespace:
    """The request limits at the service's defaults (service.settings.Settings)."""
    return SimpleNamespace(**{"max_request_cost": 64.0, "max_passages_read": None, "max_queries_per_request": 32,
                              "max_queue": 512, **overrides})


@pytest.fixture
def model() -> CostModel:
    return CostModel({"passage": 1000, "doc": 20}, read_passages=3)


def test_a_read_question_costs_its_passages_at_the_readers_default_depth(model):
    unread, read = SearchParams(), SearchParams(read=True)
    # measured (bench/reading.py --parts cost): 8.0-9.4 question-equivalents for a question read at 3 passages
    assert 8.0 <= model.question(read) == model.question(unread) + 3 * READ_PASSAGE_COST
    assert model.question(SearchParams(read=True, read_passages=5)) == model.question(unread) + 5 * READ_PASSAGE_COST
    # another reader's fitted default is what its requests read, and cost
    assert CostModel({"passage": 1000, "doc": 20}, read_passages=1).passages_read(read) == 1
    assert model.passages_read(unread) == 0
    assert "3 passages read" in model.explain(read)


def test_a_read_question_counts_the_searches_it_runs_without_reading(model):
    """read_below searches every question without reading first; at a prior above 0 (the request's, else the
    server's) the presence of its answer is read in a search without reading too (core.reading.presence)."""
    read, search = SearchParams(read=True), model.search(SearchParams(read=True))
    assert model.searches(read) == search
    assert model.searches(replace(read, read_below=0.5)) == model.searches(replace(read, unanswerable_prior=0.2)) \
        == 2 * search
    assert model.searches(replace(read, read_below=0.5, unanswerable_prior=0.2)) == 3 * search
    prior = replace(model, unanswerable_prior=0.5)
    assert prior.searches(read) == 2 * search and prior.searches(replace(read, unanswerable_prior=0.0)) == search
    assert prior.searches(SearchParams()) == model.searches(SearchParams()) == 1.0  # unread: the calibrator's
    assert prior.question(read) == 2 * search + 3 * READ_PASSAGE_COST


def test_a_large_read_request_is_served_and_its_reading_bounded_apart(model):
    at_default = SearchParams(read=True)
    # the most questions at the reader's default: served, as the same request unread is
    assert model.refusal(32, at_default, limits()) is None
    assert model.refusal(32, SearchParams(), limits()) is None
    assert model.most_passages_read(limits()) == 96
    deeper = model.refusal(32, SearchParams(read=True, read_passages=4), limits())
    assert deeper is not None and "128 passages read" in deeper and "limit of 96 (max_passages_read)" in deeper
    assert model.refusal(32, SearchParams(read=True, read_passages=4), limits(max_passages_read=128)) is None
    # the search is bounded as without reading
    deep_read = SearchParams(read=True, top_k=100, offset=100)
    deep = model.refusal(32, deep_read, limits())
    search = model.search(deep_read)
    assert deep is not None and f"would cost {32 * search:.0f} question-equivalents" in deep
    assert "(max_request_cost)" in deep and f"{search:.1f} its search and 8.4 its reading" in deep
    # and the whole request must fit the queue
    full = model.refusal(32, at_default, limits(max_queue=256))
    assert full is not None and "(256, max_queue)" in full


def test_a_server_without_a_reader_counts_no_reading():
    model = CostModel({"passage": 1000, "doc": 20})
    assert model.question(SearchParams(read=True)) == model.question(SearchParams())
    assert model.most_passages_read(limits()) == 32


@pytest.mark.parametrize(("unit", "top_k"), [("phrase", 10), ("passage", 10), ("passage", 3), ("doc", 10)])
def test_a_read_question_at_a_prior_counts_the_presence_search_only_where_reading_runs_one(tiny_searcher, tiny_reader,
                                                                                           unit, top_k):
    """The presence of a read question's answer is read in the ranking of the units read where it is as deep as the
    calibration reads (passages and documents at their default depth); only a shallower one (a phrase's passages,
    read 3 deep) is ranked again. Oracle: the rankings a searcher runs at prior 0.5 beyond those at prior 0."""
    from spanseek.core.confidence import LogisticModel
    from spanseek.core.loading import open_reading
    from spanseek.core.search import Searcher
    from tests.core.test_answers import calibrator

    fitted = calibrator()
    present = LogisticModel((0.0,) * 7, (1.0,) * 7, (0.0, 0.0, 0.0, -1.0, 0.0, 0.0, 0.0), 1.0)
    searcher = Searcher(tiny_searcher.index, tiny_searcher.encoder, calibrator=replace(
        fitted, present={k: present for k in fitted.models}), reading=open_reading(
        tiny_reader, tiny_searcher.hits, precision="fp32"))
    calls = []
    ranked = searcher.ranking.ranked
    searcher.ranking.ranked = lambda *a, **k: calls.append(1) or ranked(*a, **k)  # type: ignore[method-assign]
    params = SearchParams(unit=unit, top_k=top_k, mode="dense", read=True)
    runs = []
    for prior in (0.0, 0.5):
        calls.clear()
        searcher.search(["Who built the bridge?"], replace(params, unanswerable_prior=prior))
        runs.append(len(calls))
    model = CostModel({"passage": 1000, "doc": 20}, read_passages=searcher.reading.reading.read_passages)
    assert model.presence_searches(replace(params, unanswerable_prior=0.5)) == runs[1] - runs[0]
    assert model.searches(replace(params, unanswerable_prior=0.5)) == (1 + runs[1] - runs[0]) * model.search(params)


def test_a_passage_read_below_request_of_the_most_questions_is_served_at_a_prior(model):
    """Its first search and the read one are its searches (the presence is read in the passages read): 64 of 64."""
    at_prior = replace(model, unanswerable_prior=0.5)
    assert at_prior.refusal(32, SearchParams(unit="passage", read=True, read_below=0.5), limits()) is None
    phrase = at_prior.refusal(32, SearchParams(read=True, read_below=0.5), limits())  # its passages ranked again
    assert phrase is not None and "(max_request_cost)" in phrase
