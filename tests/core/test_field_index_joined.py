"""A live index's field index, its base's and its segment's joined (``JoinedFieldIndex``), against the field index
built over all their documents (``FieldIndex.build``, the oracle): random documents with random metadata, the base
holding earlier versions of ids (replaced by an add) and the segment new versions of base ids (an upsert), split at
every kind of point, under random nested filters (ids, metadata, ranges, must / should / must_not).

    .venv/bin/python -m pytest -q tests/core/test_field_index_joined.py
"""

from __future__ import annotations

import random
import re

import numpy as np
import pytest

from spanseek.core.fieldindex import FieldIndex, JoinedFieldIndex
from spanseek.core.filters import FilterError, SearchFilter
from tests.core.test_field_index import random_docs, random_filter


def versions(seed: int, n: int) -> list[dict]:
    """``random_docs`` whose ids repeat: about a quarter of the documents are new versions of earlier ids."""
    rng = random.Random(seed)
    docs = random_docs(seed, n)
    for i, doc in enumerate(docs):
        if i and rng.random() < 0.25:
            doc["id"] = docs[rng.randrange(i)]["id"]
    return docs


def joined_and_all(docs: list[dict], at: int) -> tuple[JoinedFieldIndex, FieldIndex]:
    return JoinedFieldIndex(FieldIndex.build(docs[:at]), FieldIndex.build(docs[at:])), FieldIndex.build(docs)


@pytest.mark.parametrize("seed", range(6))
def test_a_joined_field_index_selects_what_one_built_over_all_the_documents_selects(seed):
    rng = random.Random(seed)
    docs = versions(seed, 300)
    at = rng.choice([0, 1, rng.randrange(2, 298), 299, 300])
    joined, oracle = joined_and_all(docs, at)
    assert joined.documents == oracle.documents == len(docs)
    ids = [d["id"] for d in docs] + ["doc-none"]
    assert [joined.number_of.get(i) for i in ids] == [oracle.number_of.get(i) for i in ids]
    for _ in range(40):
        obj = random_filter(rng)
        flt = SearchFilter.from_json(obj)
        try:
            want = oracle.documents_of(flt)
        except FilterError as e:
            with pytest.raises(FilterError) as got:
                joined.documents_of(flt)
            assert str(got.value) == str(e) and got.value.field == e.field, obj
            continue
        got_mask = joined.documents_of(flt)
        assert got_mask.dtype == bool and np.array_equal(got_mask, want), obj


def test_an_id_the_segment_holds_selects_its_version_not_the_base_s():
    base = [{"id": "a", "title": "A", "meta": {"n": 1}}, {"id": "b", "title": "B", "meta": {"n": 2}}]
    segment = [{"id": "a", "title": "A2", "meta": {"n": 3}}]
    joined = JoinedFieldIndex(FieldIndex.build(base), FieldIndex.build(segment))
    assert joined.documents_of(SearchFilter.from_json({"doc_ids": ["a", "b"]})).tolist() == [False, True, True]
    assert joined.number_of.get("a") == 2 and joined.number_of.get("b") == 1


@pytest.mark.parametrize(("obj", "message"), [
    ({"meta": {"colour": "red"}}, "no document has it"),
    ({"must": [{"key": "k", "range": {"gte": "2024-01-01"}}]}, "a range of ISO-8601 dates, but the field holds "
                                                               "number, string"),
    ({"must": [{"key": "k", "any": [True]}]}, "true is a boolean, but the field holds number, string"),
])
def test_a_condition_is_checked_against_both_parts_fields_and_kinds(obj, message):
    """A field, or a kind of value, that only one part holds is known: a condition on it selects that part's
    documents; one that neither holds is refused naming the field as the oracle names it."""
    base, segment = [{"id": "a", "title": "A", "meta": {"k": 1}}], [{"id": "b", "title": "B", "meta": {"k": "x"}}]
    joined, oracle = joined_and_all(base + segment, 1)
    for fields in (joined, oracle):
        with pytest.raises(FilterError, match=message):
            fields.documents_of(SearchFilter.from_json(obj))
    for form in ({"meta": {"k": "x"}}, {"meta": {"k": 1}}, {"must": [{"key": "k", "range": {"lt": 2}}]}):
        flt = SearchFilter.from_json(form)
        assert joined.documents_of(flt).tolist() == oracle.documents_of(flt).tolist(), form


def test_the_joined_respellings_are_those_of_all_the_ids():
    base = [{"id": "cafe\u0301", "title": "x"}, {"id": "b", "title": "y"}]
    segment = [{"id": "caf\u00e9", "title": "z"}, {"id": "e\u0301", "title": "w"}]
    joined, oracle = joined_and_all(base + segment, 2)
    assert dict(joined.respelled) == oracle.respelled


@pytest.mark.parametrize("seed", range(4))
def test_a_field_index_joined_from_many_parts_selects_what_one_built_over_all_selects(seed):
    """A base and several runs of segment documents (as a live snapshot joins them), ids repeated across the parts:
    each id is the last part's, and every filter selects (or is refused) as over one field index of all of them."""
    rng = random.Random(seed)
    docs = versions(seed, 300)
    cuts = sorted(rng.sample(range(1, 300), 5))
    parts = [FieldIndex.build(docs[a:b]) for a, b in zip([0, *cuts], [*cuts, 300], strict=True)]
    joined, oracle = JoinedFieldIndex(*parts), FieldIndex.build(docs)
    assert joined.documents == oracle.documents and list(joined.ids) == oracle.ids
    ids = [d["id"] for d in docs] + ["doc-none"]
    assert [joined.number_of.get(i) for i in ids] == [oracle.number_of.get(i) for i in ids]
    assert dict(joined.respelled) == dict(oracle.respelled)
    for _ in range(40):
        flt = SearchFilter.from_json(random_filter(rng))
        try:
            want = oracle.documents_of(flt)
        except FilterError as e:
            with pytest.raises(FilterError, match=re.escape(str(e))):
                joined.documents_of(flt)
            continue
        assert np.array_equal(joined.documents_of(flt), want)
