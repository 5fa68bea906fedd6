"""The filter language (range, any, not, must/should/must_not) over the field index, against a brute-force scan.

Oracle: an evaluator written here, over the filter's JSON form and each document's metadata one at a time (with
``datetime`` for dates); it must agree with ``FieldIndex`` (built in memory, and saved and loaded) on hundreds of
random documents and random nested filters, and with ``SearchFilter.matches`` (the per-document definition). Then
the errors (an unknown field, a range over strings, a date that does not parse: FilterError naming the field), the
selection (deleted documents removed, passages expanded, the faiss selector) and the cache's byte budget.

    .venv/bin/python -m pytest -q tests/core/test_field_index.py
"""

from __future__ import annotations

import datetime as dt
import gc
import random
import sys
import tracemalloc
import weakref
from types import SimpleNamespace

import faiss
import numpy as np
import pytest

from spanseek.core.fieldindex import FieldIndex
from spanseek.core.filters import AnyOf, FilterError, Match, Not, Range, SearchFilter
from spanseek.core.selection import Layout, Selections, object_bytes, select

LANGS = ["en", "fr", "de", "nl"]
TAGS = ["news", "sport", "tech", "arts", "food", "2024-01-01"]
N_DOCS = 400


def _date(rng: random.Random) -> str:
    day = dt.date(2019, 1, 1) + dt.timedelta(days=rng.randrange(6 * 365))
    if rng.random() < 0.5:
        return day.isoformat()
    t = dt.datetime.combine(day, dt.time(rng.randrange(24), rng.randrange(60)))
    return t.isoformat() + rng.choice(["", "Z", "+02:00"])


def random_docs(seed: int, n: int = N_DOCS) -> list[dict]:
    """Documents with numeric, date, string, list, boolean and mixed fields, each sometimes missing."""
    rng = random.Random(seed)
    docs = []
    for i in range(n):
        meta: dict = {}
        maybe = {
            "year": lambda: rng.randrange(1990, 2025),
            "score": lambda: round(rng.uniform(-5, 5), 2),
            "date": lambda: _date(rng),
            "lang": lambda: rng.choice(LANGS),
            "tags": lambda: rng.sample(TAGS, rng.randrange(0, 4)),
            "draft": lambda: rng.random() < 0.3,
            "mixed": lambda: rng.choice([None, 1, 2.5, "1", True, [1, "x"], {"nested": 1}]),
        }
        for key, make in maybe.items():
            if rng.random() < 0.85:
                meta[key] = make()
        docs.append({"id": f"doc{i}", "title": rng.choice(["Alpha ", "Alps ", "Beta ", "Álvaro ", ""]) + str(i),
                     **({"meta": meta} if meta else {})})
    return docs


# --- the oracle: the filter's JSON form, one document at a time -------------------------------------------------


def _as_date(v) -> dt.datetime | None:
    if not isinstance(v, str) or len(v) < 10 or v[4] != "-" or v[7] != "-":
        return None
    try:
        t = dt.datetime.fromisoformat(v)
    except ValueError:
        return None
    return t if t.tzinfo else t.replace(tzinfo=dt.UTC)


def _scalars(v) -> list:
    return [x for x in (v if isinstance(v, list) else [v]) if not isinstance(x, dict | list)]


def _equal(a, b) -> bool:
    return type(a) is bool and type(b) is bool and a == b or (
        type(a) is not bool and type(b) is not bool and a == b)


def _in_range(x, bounds: dict) -> bool:
    ops = {"gt": lambda b: x > b, "gte": lambda b: x >= b, "lt": lambda b: x < b, "lte": lambda b: x <= b}
    return all(ops[op](b) for op, b in bounds.items())


def oracle(cond: dict, doc: dict) -> bool:
    meta = doc.get("meta", {})
    if "not" in cond:
        return not oracle(cond["not"], doc)
    if "key" in cond:
        if cond["key"] not in meta:
            return False
        values = _scalars(meta[cond["key"]])
        if "match" in cond:
            return any(_equal(v, cond["match"]) for v in values)
        if "any" in cond:
            return any(_equal(v, w) for v in values for w in cond["any"])
        bounds = cond["range"]
        if isinstance(next(iter(bounds.values())), str):
            dates = [d for d in map(_as_date, values) if d is not None]
            return any(_in_range(d, {op: _as_date(b) for op, b in bounds.items()}) for d in dates)
        return any(_in_range(v, bounds) for v in values if type(v) in (int, float))
    ok = True
    if "doc_ids" in cond:
        ok &= doc["id"] in cond["doc_ids"]
    if "title_prefix" in cond:
        ok &= doc["title"].startswith(cond["title_prefix"])
    for key, value in cond.get("meta", {}).items():
        ok &= oracle({"key": key, "match": value}, doc)
    ok &= all(oracle(c, doc) for c in cond.get("must", []))
    ok &= "should" not in cond or any(oracle(c, doc) for c in cond["should"])
    ok &= not any(oracle(c, doc) for c in cond.get("must_not", []))
    return ok


# --- random filters ---------------------------------------------------------------------------------------------


def random_leaf(rng: random.Random) -> dict:
    form = rng.choice(["year", "score", "date", "lang", "tags", "draft", "mixed", "any", "not", "ids", "title"])
    if form == "year":
        a = rng.randrange(1988, 2027)
        op1, op2 = rng.choice(["gt", "gte"]), rng.choice(["lt", "lte"])
        bounds = rng.choice([{op1: a}, {op2: a}, {op1: a, op2: a + rng.randrange(0, 12)}, {"gte": a, "lte": a}])
        return {"key": "year", "range": bounds} if rng.random() < 0.8 else {"key": "year", "match": a}
    if form == "score":
        return {"key": "score", "range": {rng.choice(["gt", "gte", "lt", "lte"]): round(rng.uniform(-6, 6), 2)}}
    if form == "date":
        a, b = sorted([_date(rng), _date(rng)], key=lambda s: _as_date(s))  # type: ignore[arg-type, return-value]
        return {"key": "date", "range": rng.choice([{"gte": a}, {"lt": b}, {"gt": a, "lte": b}])}
    if form == "lang":
        return {"key": "lang", "match": rng.choice(LANGS)}
    if form == "tags":
        return {"key": "tags", "match": rng.choice(TAGS)}
    if form == "draft":
        return {"key": "draft", "match": rng.random() < 0.5}
    if form == "mixed":
        return {"key": "mixed", "match": rng.choice([None, 1, 1.0, "1", True, 2.5, "x"])}
    if form == "any":
        key, pool = rng.choice([("lang", LANGS), ("tags", TAGS), ("year", list(range(1990, 2025)))])
        return {"key": key, "any": rng.sample(pool, rng.randrange(1, 4))}
    if form == "not":
        return {"not": random_leaf(rng)}
    if form == "ids":
        return {"doc_ids": [f"doc{rng.randrange(N_DOCS + 20)}" for _ in range(rng.randrange(1, 60))]}
    return {"title_prefix": rng.choice(["Al", "Alp", "Alps 1", "Á", "B", "", "Z"])}


def random_filter(rng: random.Random, depth: int = 0) -> dict:
    out: dict = {}
    for part in ("must", "should", "must_not"):
        if rng.random() < 0.55:
            out[part] = [random_filter(rng, depth + 1) if depth < 3 and rng.random() < 0.3 else random_leaf(rng)
                         for _ in range(rng.randrange(1, 4))]
    if rng.random() < 0.2:
        out["meta"] = {"lang": rng.choice(LANGS)}
    return out


@pytest.fixture(scope="module")
def docs() -> list[dict]:
    return random_docs(seed=5)


@pytest.fixture(scope="module", params=["built", "saved and loaded"])
def fields(request, docs, tmp_path_factory) -> FieldIndex:
    built = FieldIndex.build(docs)
    if request.param == "built":
        return built
    path = tmp_path_factory.mktemp("fields") / "doc_fields.npz"
    built.save(path)
    return FieldIndex.load(path, docs)


@pytest.mark.parametrize("seed", range(8))
def test_random_nested_filters_select_what_a_scan_selects(docs, fields, seed):
    rng = random.Random(seed)
    sizes = []
    for _ in range(60):
        obj = random_filter(rng)
        flt = SearchFilter.from_json(obj)
        want = np.array([oracle(obj, d) for d in docs])
        got = fields.documents_of(flt)
        assert got.dtype == bool and got.shape == (len(docs),)
        assert np.array_equal(got, want), obj
        assert [flt.matches(d["id"], d["title"], d.get("meta", {})) for d in docs] == want.tolist(), obj
        assert SearchFilter.from_json(flt.to_json()) == flt
        sizes.append(int(want.sum()))
    assert min(sizes) < len(docs) // 4 and max(sizes) > len(docs) // 2  # the filters select few and many


@pytest.mark.parametrize("obj", [
    {"must": [{"key": "year", "range": {"gte": 2000, "lt": 2010}}]},
    {"must": [{"key": "year", "range": {"gt": 2000.5}}]},
    {"must": [{"key": "score", "range": {"lte": 0}}]},
    {"must": [{"key": "date", "range": {"gte": "2021-03-01", "lt": "2022-01-01T00:00:00Z"}}]},
    {"must": [{"key": "date", "range": {"gt": "2021-03-01T10:00:00+02:00"}}]},
    {"must": [{"key": "tags", "any": ["news", "food"]}]},
    {"must": [{"key": "tags", "range": {"gte": "2024-01-01"}}]},  # a list element that is a date
    {"must": [{"key": "lang", "any": ["en", "xx"]}], "must_not": [{"key": "draft", "match": True}]},
    {"should": [{"key": "lang", "match": "fr"}, {"key": "year", "range": {"lt": 1995}}]},
    {"must": [{"not": {"key": "tags", "match": "sport"}}]},  # documents without tags too
    {"must": [{"not": {"not": {"key": "lang", "match": "de"}}}]},
    {"must_not": [{"should": [{"key": "lang", "match": "en"}, {"key": "lang", "match": "fr"}]}]},
    {"must": [{"key": "mixed", "match": None}]},
    {"must": [{"key": "mixed", "match": 1}]},  # 1 and 1.0, and the list [1, "x"]; not true, not "1"
    {"must": [{"key": "mixed", "match": True}]},
    {"must": [{"key": "year", "match": 2001.0}]},
    {"doc_ids": [f"doc{i}" for i in range(0, 200, 3)] + ["nope"], "title_prefix": "Al"},
    {"title_prefix": "Á"},
])
def test_each_form_selects_what_a_scan_selects(docs, fields, obj):
    want = np.array([oracle(obj, d) for d in docs])
    assert want.any() and np.array_equal(fields.documents_of(SearchFilter.from_json(obj)), want)


def test_python_conditions_are_the_json_ones_and_hash_as_values():
    flt = SearchFilter(must=[Range("year", gte=2000), AnyOf("tags", ["a", "b"])],  # type: ignore[arg-type]
                       must_not=[Not(Match("draft", True))])
    assert flt == SearchFilter.from_json({"must": [{"key": "year", "range": {"gte": 2000}},
                                                   {"key": "tags", "any": ["b", "a"]}],
                                          "must_not": [{"not": {"key": "draft", "match": True}}]})
    assert Match("x", True) != Match("x", 1) and hash(Match("x", 1)) == hash(Match("x", 1.0))
    assert Range("d", gte="2024-01-01") == Range("d", gte="2024-01-01T00:00:00Z")  # the same instant
    assert Range("d", gte="2024-01-01").kind == "date" and Range("y", lt=3).kind == "number"


@pytest.mark.parametrize(("obj", "message"), [
    ({"must": [{"key": "date", "range": {"gte": "yesterday"}}]}, "'yesterday' is not an ISO-8601 date"),
    ({"must": [{"key": "date", "range": {"gte": "2024-02-30"}}]}, "not an ISO-8601 date"),
    ({"must": [{"key": "year", "range": {"gte": 1, "lt": "2024-01-01"}}]}, "all numbers or all ISO-8601"),
    ({"must": [{"key": "year", "range": {"gte": True}}]}, "all numbers or all ISO-8601"),
    ({"must": [{"key": "year", "range": {}}]}, "at least one of gt, gte, lt, lte"),
    ({"must": [{"key": "year", "range": {"from": 1}}]}, "an object of gt, gte, lt, lte"),
    ({"must": [{"key": "year", "match": 1, "any": [1]}]}, "exactly one of match, any or range"),
    ({"must": [{"key": "tags", "any": []}]}, "the list of values is empty"),
    ({"must": [{"key": "tags", "any": [["a"]]}]}, "a value must be a string"),
    ({"must": []}, "must is empty"),
    ({"must": {"key": "x", "match": 1}}, "expected a list of conditions"),
    ({"nope": 1}, "unknown key 'nope'"),
    ({"must": [{"not": {"key": "x", "match": 1}, "key": "y"}]}, "a not condition has no other keys"),
])
def test_malformed_filters_name_what_is_wrong(obj, message):
    with pytest.raises(FilterError, match=message):
        SearchFilter.from_json(obj)


BIG = 10**400  # an integer JSON and Python hold, but no float: float(BIG) overflows


@pytest.mark.parametrize(("obj", "field", "got"), [
    ({"meta": {"n": BIG}}, "n", "got an integer of about 401 digits"),
    ({"must": [{"key": "n", "match": -BIG}]}, "n", "got an integer of about 401 digits"),
    ({"should": [{"key": "n", "any": [1, BIG]}]}, "n", "got an integer of about 401 digits"),
    ({"must": [{"key": "n", "match": float("inf")}]}, "n", "got inf"),
    ({"must": [{"key": "n", "range": {"gte": 1, "lt": BIG}}]}, "n", "got lt an integer of about 401 digits"),
    ({"must_not": [{"key": "n", "range": {"gt": float("nan")}}]}, "n", "got gt nan"),
])
def test_a_filter_number_beyond_a_float_names_the_field(obj, field, got):
    """It raised a bare OverflowError (a 500 from the service) where the field index compares numbers as floats;
    now it is a FilterError, a SearchParamsError (400), naming the field, like NaN."""
    with pytest.raises(FilterError, match=rf"'{field}': .*(within about ±1\.8e308).*{got}$") as e:
        SearchFilter.from_json(obj)
    assert e.value.field == field


def test_an_older_store_s_integer_beyond_a_float_matches_no_condition():
    """A document store written before such integers were refused is still indexed (they match nothing, as NaN)."""
    docs = [{"id": f"d{i}", "title": "", "meta": {"n": n}} for i, n in enumerate([BIG, [5, -BIG], 1e308, -3, BIG])]
    fields = FieldIndex.build(docs)
    for flt in [SearchFilter(must=[Range("n", gte=0)]), SearchFilter(must=[Range("n", lt=0)]),
                SearchFilter(meta={"n": 5}), SearchFilter(must_not=[Range("n", gte=-10)])]:  # type: ignore[arg-type]
        want = [flt.matches(d["id"], d["title"], d["meta"]) for d in docs]
        assert fields.documents_of(flt).tolist() == want
    assert fields.documents_of(SearchFilter(must=[Range("n", gte=0)])).tolist() == [False, True, True, False, False]


BEYOND = 2**53  # integers from here on are not all floats: 2**53 + 1 rounds to 2**53


@pytest.mark.parametrize("value", [BEYOND, BEYOND + 1, BEYOND + 2, float(BEYOND), -(BEYOND + 1), 2**63 + 1, 2**63])
def test_integers_beyond_2_53_select_alike_per_document_and_in_the_field_index(tmp_path, value):
    """Numbers compare as float64 (``finite_float``): the field index did, while ``matches`` compared Python's exact
    integers, so 2**53 + 1 selected 2**53 in a search and not per document."""
    stored = [BEYOND, BEYOND + 1, BEYOND + 2, BEYOND + 3, [BEYOND + 1, 7], -BEYOND, -(BEYOND + 1), 2**63, 2**63 + 5,
              float(BEYOND), 2**53 - 1]
    docs = [{"id": f"d{i}", "title": "", "meta": {"n": n}} for i, n in enumerate(stored)]
    built = FieldIndex.build(docs)
    built.save(tmp_path / "doc_fields.npz")
    as_float = np.float64(value)
    for obj in [{"meta": {"n": value}}, {"must": [{"key": "n", "match": value}]},
                {"must": [{"key": "n", "any": [value, 3]}]}, {"must_not": [{"key": "n", "match": value}]}]:
        flt = SearchFilter.from_json(obj)
        want = [any(np.float64(x) == as_float for x in _scalars(d["meta"]["n"])) != ("must_not" in obj) for d in docs]
        assert any(want) and not all(want), obj
        assert [flt.matches(d["id"], d["title"], d["meta"]) for d in docs] == want, obj
        for fields in (built, FieldIndex.load(tmp_path / "doc_fields.npz", docs)):
            assert fields.documents_of(flt).tolist() == want, obj


@pytest.mark.parametrize(("obj", "field", "message"), [
    ({"meta": {"colour": "red"}}, "colour", "no document has it"),
    ({"must": [{"not": {"key": "colour", "any": ["red"]}}]}, "colour", "no document has it"),
    ({"must": [{"key": "lang", "range": {"gte": 1}}]}, "lang", "a range of numbers, but the field holds string"),
    ({"should": [{"key": "year", "range": {"gte": "2024-01-01"}}]}, "year", "a range of ISO-8601 dates"),
    ({"must": [{"key": "lang", "range": {"gte": "2024-01-01"}}]}, "lang", "a range of ISO-8601 dates"),
    ({"must_not": [{"key": "year", "match": "2001"}]}, "year", '"2001" is a string, but the field holds number'),
    ({"must": [{"key": "draft", "any": [1]}]}, "draft", "1 is a number, but the field holds boolean"),
])
def test_unknown_fields_and_kind_mismatches_name_the_field(fields, obj, field, message):
    flt = SearchFilter.from_json(obj)
    for call in (fields.check, fields.documents_of):
        with pytest.raises(FilterError, match=message) as e:
            call(flt)
        assert e.value.field == field and repr(field) in str(e.value)


def test_a_selection_names_the_refused_condition_s_place_as_the_check_does(fields):
    """``documents_of`` (a delete by filter, a search whose index changed since its check) names the condition's
    place in the filter as ``check`` does (it named the field alone), so one of several on a field is found."""
    flt = SearchFilter.from_json({"must": [{"key": "year", "match": 2001},
                                           {"should": [{"not": {"key": "year", "match": "2001"}}]}]})
    for call in (fields.check, fields.documents_of):
        with pytest.raises(FilterError) as e:
            call(flt)
        assert str(e.value).startswith("filter.must[1].should[0].not: filter field 'year': \"2001\" is a string"), e.value


def test_a_boolean_field_that_holds_only_false_filters_on_either_value(tmp_path):
    """A boolean field whose documents are all ``false`` was listed as holding no kind of value, so every boolean
    condition on it was refused: `must_not draft = true` (the docs' own example) now keeps every document, and the
    field survives a save and load."""
    docs = [{"id": "a", "title": "A", "meta": {"draft": False}}, {"id": "b", "title": "B", "meta": {"draft": False}},
            {"id": "c", "title": "C", "meta": {}}]
    built = FieldIndex.build(docs)
    built.save(tmp_path / "fields.npz")
    for fields in (built, FieldIndex.load(tmp_path / "fields.npz", docs)):
        assert fields.fields["draft"].kinds == ["boolean"]
        for obj in ({"must_not": [{"key": "draft", "match": True}]}, {"meta": {"draft": False}},
                    {"meta": {"draft": True}}, {"must": [{"key": "draft", "any": [True, False]}]}):
            flt = SearchFilter.from_json(obj)
            fields.check(flt)
            assert fields.documents_of(flt).tolist() == [flt.matches(d["id"], d["title"], d["meta"]) for d in docs]
        with pytest.raises(FilterError, match="1 is a number, but the field holds boolean"):
            fields.check(SearchFilter.from_json({"meta": {"draft": 1}}))


# --- any of many values -------------------------------------------------------------------------------------------

# values of every kind a field indexes, with the cases equality must get right: 1 and 1.0 (equal), true and 1 (not),
# -0.0 and 0, a date string (also a string), the empty string, a trailing NUL, an integer past int64
POOL = [0, -0.0, 1, 1.0, 2.5, -7, 3 * 10**20, 1e300, True, False, None, "", "a", "a\x00", "é", "1", "2024-01-01",
        *range(10, 60), *(f"s{i}" for i in range(40))]


def any_docs(seed: int, n: int = 300) -> list[dict]:
    """Documents whose fields hold scalars of every kind from ``POOL``, lists of them, objects, or nothing; the first
    documents give each field every kind, so any value is a value the field may hold."""
    rng = random.Random(seed)
    kinds = [0, "x", True, False, None]
    docs = []
    for i in range(n):
        meta = {}
        for key in ("n", "s", "mix"):
            r = rng.random()
            meta[key] = (kinds[i] if i < len(kinds) else rng.sample(POOL, rng.randrange(0, 4)) if r < 0.3
                         else {"nested": 1} if r < 0.35 else rng.choice(POOL))
            if r > 0.9:
                del meta[key]
        docs.append({"id": f"d{i}", "title": "", "meta": meta})
    return docs


def random_any(rng: random.Random) -> dict:
    """An ``any`` (sometimes negated, sometimes several under must / should) of up to 400 values, repeats and values
    no document holds among them, of one kind or of mixed kinds."""
    def leaf() -> dict:
        pool = rng.choice([[v for v in POOL if type(v) in (int, float)], [v for v in POOL if type(v) is str], POOL])
        values = [rng.choice(pool + [999, "nope"]) for _ in range(rng.randrange(1, 400))]
        cond = {"key": rng.choice(["n", "s", "mix"]), "any": values}
        return {"not": cond} if rng.random() < 0.2 else cond
    return {rng.choice(["must", "should", "must_not"]): [leaf() for _ in range(rng.randrange(1, 4))]}


@pytest.mark.parametrize("saved", [False, True])
@pytest.mark.parametrize("seed", range(4))
def test_any_of_many_values_selects_what_a_scan_selects(tmp_path, saved, seed):
    docs = any_docs(seed)
    fields = FieldIndex.build(docs)
    if saved:
        fields.save(tmp_path / "fields.npz")
        fields = FieldIndex.load(tmp_path / "fields.npz", docs)
    rng = random.Random(seed)
    for _ in range(40):
        obj = random_any(rng)
        flt = SearchFilter.from_json(obj)
        want = [flt.matches(d["id"], d["title"], d["meta"]) for d in docs]
        assert fields.documents_of(flt).tolist() == want == [oracle(obj, d) for d in docs], obj


def test_any_takes_no_python_step_per_value():
    """An ``any`` cost a Python call per value (195 ms for 60,000 numbers): the number of Python calls evaluating it
    makes in the field index is now the same for 5 values as for 5,000, of each kind."""
    docs = any_docs(0)
    fields = FieldIndex.build(docs)

    def calls(values: list) -> int:
        flt = SearchFilter(must=[AnyOf("mix", values)])
        made = 0

        def count(frame, event, arg):
            nonlocal made
            made += event == "call" and frame.f_code.co_filename.endswith("fieldindex.py")
        sys.setprofile(count)
        try:
            fields.documents_of(flt)
        finally:
            sys.setprofile(None)
        return made

    for pool in ([float(i) for i in range(-2000, 3000)], [f"s{i}" for i in range(5000)], [True, False] * 2500):
        calls(pool[:1])  # the first condition on the field's strings makes their codes
        assert calls(pool[:5]) == calls(pool) > 0


# --- selections --------------------------------------------------------------------------------------------------


def fake_index(docs: list[dict], deleted: list[int], seed: int = 0) -> SimpleNamespace:
    """What ``select`` reads of an index: documents, deletions, passages of 1-3 per document, tokens per passage."""
    rng = np.random.default_rng(seed)
    passage_doc = np.repeat(np.arange(len(docs)), rng.integers(1, 4, len(docs)))
    lengths = rng.integers(1, 9, len(passage_doc))
    passage_tokens = np.concatenate([[0], np.cumsum(lengths)])
    token_passage = np.repeat(np.arange(len(passage_doc)), lengths).astype(np.int32)
    return SimpleNamespace(docs=docs, deleted_docs=np.asarray(deleted, dtype=np.int64), fields=FieldIndex.build(docs),
                           passage_tokens=passage_tokens, token_passage=token_passage, num_tokens=len(token_passage),
                           units={"doc": passage_doc, "passage": np.arange(len(passage_doc))})


def test_a_selection_allows_the_tokens_of_live_documents_that_pass(docs):
    index = fake_index(docs, deleted=[3, 10, 11])
    obj = {"must": [{"key": "year", "range": {"gte": 2005}}], "must_not": [{"key": "tags", "match": "news"}]}
    layout = Layout(index, index.units)  # type: ignore[arg-type]
    sel = select(index, SearchFilter.from_json(obj), layout)  # type: ignore[arg-type]
    live = np.array([oracle(obj, d) and i not in (3, 10, 11) for i, d in enumerate(docs)])
    assert np.array_equal(sel.docs, live) and np.array_equal(sel.passages, live[index.units["doc"]])
    tokens = live[index.units["doc"]][index.token_passage]
    assert [sel.selector.is_member(t) for t in range(index.num_tokens)] == tokens.tolist()
    assert sel.unit_count == {"doc": int(live.sum()), "passage": int(sel.passages.sum())}
    assert sel.token_share == pytest.approx(tokens.mean())
    n_passages = len(index.units["passage"])
    assert sel.nbytes == len(docs) + n_passages + -(-n_passages // 8)  # nothing per token
    unfiltered = select(index, None, layout)  # type: ignore[arg-type]
    assert np.array_equal(unfiltered.docs, np.isin(np.arange(len(docs)), [3, 10, 11], invert=True))
    whole = select(fake_index(docs, deleted=[]), None, layout)  # type: ignore[arg-type]
    assert whole.selector is None and whole.unit_count["doc"] == len(docs)


def test_the_selector_filters_a_faiss_search(docs):
    index = fake_index(docs, deleted=[0])
    rng = np.random.default_rng(3)
    vectors = rng.standard_normal((index.num_tokens, 8)).astype(np.float32)
    flat = faiss.IndexFlatIP(8)
    flat.add(vectors)
    flt = SearchFilter.from_json({"must": [{"key": "lang", "match": "de"}]})
    sel = select(index, flt, Layout(index, index.units))  # type: ignore[arg-type]
    params = faiss.SearchParameters()
    params.sel = sel.selector
    _, ids = flat.search(vectors[:5], 20, params=params)
    allowed = np.flatnonzero(sel.passages[index.token_passage])
    scores = vectors[:5] @ vectors[allowed].T
    want = allowed[np.argsort(-scores, axis=1, kind="stable")[:, :20]]
    assert np.array_equal(np.sort(ids, axis=1), np.sort(want, axis=1))


def test_the_cache_keeps_recent_selections_within_its_byte_budget(docs):
    index = fake_index(docs, deleted=[])
    filters = [SearchFilter.from_json({"must": [{"key": "year", "range": {"gte": 1990 + i}}]}) for i in range(12)]
    for flt in filters:
        hash(flt)  # the key its equality goes by, made by the cache's first look-up, is part of its cost
    # costs differ by a few bytes from filter to filter (the cached hash is an int of 28 to 36 bytes, and string
    # hashes change from process to process): a budget of exactly the last three
    costs = [Selections.cost(f, select(index, f, Layout(index, index.units))) for f in filters]  # type: ignore[arg-type]
    budget = sum(costs[-3:])
    cache = Selections(index, index.units, max_bytes=budget)  # type: ignore[arg-type]
    for flt in filters:
        cache.get(flt)
        assert cache.nbytes == sum(cost for _, cost in cache.recent.values()) <= budget
    assert list(cache.recent) == filters[-3:]
    first = cache.get(filters[-3])  # a hit: the same selection, now the most recent
    assert first is cache.recent[filters[-3]][0]
    assert cache.get(filters[-3]) is first and list(cache.recent)[-1] == filters[-3]
    cache.get(filters[0])
    # the least recently used left first (filters[0] may cost a few bytes more than the one it replaces)
    assert len(cache.recent) >= 2 and list(cache.recent) == [filters[-1], filters[-3], filters[0]][-len(cache.recent):]
    tiny = Selections(index, index.units, max_bytes=0)  # type: ignore[arg-type]
    for flt in filters[:3]:
        tiny.get(flt)
        assert list(tiny.recent) == [flt]  # the newest is kept, alone
    with pytest.raises(ValueError, match="byte budget"):
        Selections(index, index.units, max_bytes=-1)  # type: ignore[arg-type]


def test_the_cache_budget_counts_the_filters_it_keeps(docs):
    """A selection of a small index is a few hundred bytes, but its filter may hold thousands of ids: the memory the
    cache keeps stays within its budget however large the distinct filters are (measured, not estimated)."""
    index = fake_index(docs, deleted=[])
    budget = 300_000
    cache = Selections(index, index.units, max_bytes=budget)  # type: ignore[arg-type]
    cache.get(SearchFilter.from_json({"doc_ids": ["warm"]}))
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for i in range(30):  # 30 distinct filters of 1,000 ids each, about 110 KB of objects apiece
            cache.get(SearchFilter.from_json({"doc_ids": [f"{i}-{j:06d}" for j in range(1000)]}))
        gc.collect()
        kept = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert kept < 2 * budget, f"the cache keeps {kept} bytes for a budget of {budget}"
    assert 1 <= len(cache.recent) <= 3 and cache.nbytes <= budget
    assert object_bytes(SearchFilter.from_json({"doc_ids": ["a" * 1000]})) > 1000  # the ids' text is counted


@pytest.mark.parametrize("deleted", [[], [0, 5, 6]])
def test_a_selections_token_forms_are_made_once_and_charged_to_the_cache(docs, deleted):
    """The allowed tokens a flat scan masks with and the allowed ids an exact search scores are the token map's
    (oracle: each passage's tokens looked up one by one), made at the first search that asks and the same arrays
    for every later batch; the cache charges their bytes as they are made and evicts by them."""
    index = fake_index(docs, deleted=deleted)
    filters = [SearchFilter.from_json({"must": [{"key": "year", "range": {"gte": 1990 + i}}]}) for i in range(3)]
    layout = Layout(index, index.units)  # type: ignore[arg-type]
    for flt in [None, *filters]:
        sel = select(index, flt, layout)  # type: ignore[arg-type]
        allowed = (np.ones(len(docs), bool) if sel.docs is None else sel.docs)[index.units["doc"]]
        want = np.asarray([allowed[p] for p in index.token_passage.tolist()])
        tokens = sel.allowed_tokens(index)  # type: ignore[arg-type]
        assert (tokens is None) == (sel.passages is None) and (tokens is None or np.array_equal(tokens, want))
        assert sel.allowed_tokens(index) is tokens  # type: ignore[arg-type]
        ids = sel.allowed_ids(index)  # type: ignore[arg-type]
        assert np.array_equal(ids, np.flatnonzero(want)) and sel.allowed_ids(index) is ids  # type: ignore[arg-type]
    for flt in filters:
        hash(flt)  # the key its equality goes by, made by the cache's first look-up, is part of its cost
    plain = [Selections.cost(f, select(index, f, layout)) for f in filters]  # type: ignore[arg-type]
    cache = Selections(index, index.units, max_bytes=sum(plain[:2]) + 64)  # type: ignore[arg-type]
    cache.get(filters[0]).allowed_tokens(index)  # type: ignore[arg-type]
    assert cache.nbytes == cache.recent[filters[0]][1] == plain[0] + index.num_tokens  # charged as it is made
    cache.get(filters[1])  # the two selections and the first one's mask are over the budget
    assert list(cache.recent) == filters[1:2] and cache.nbytes == plain[1]
    cache.get(filters[1]).allowed_ids(index)  # type: ignore[arg-type]
    assert cache.nbytes == cache.recent[filters[1]][1] == plain[1] + 8 * int(cache.get(filters[1]).passages[
        index.token_passage].sum())
    cache.get(filters[2])
    assert cache.nbytes == sum(cost for _, cost in cache.recent.values()) <= cache.max_bytes


def test_filters_searched_once_keep_their_token_forms_within_the_cache_budget(docs):
    """Distinct filters each searched once (a flat scan's mask and an exact search's ids made by that search, the
    filter never looked up again): what the kept selections hold, their token forms included, stays within the
    budget, and a selection a search still holds does not keep its cache alive."""
    index = fake_index(docs, deleted=[])
    filters = [SearchFilter.from_json({"must": [{"key": "year", "range": {"gte": 1990 + i}}]}) for i in range(30)]
    for flt in filters:
        hash(flt)  # the key its equality goes by, made by the cache's first look-up, is part of its cost
    one = Selections.cost(filters[0], select(index, filters[0], Layout(index, index.units)))  # type: ignore[arg-type]
    cache = Selections(index, index.units, max_bytes=10 * one)  # type: ignore[arg-type]
    for flt in filters:
        sel = cache.get(flt)
        sel.allowed_tokens(index)  # type: ignore[arg-type]
        sel.allowed_ids(index)  # type: ignore[arg-type]
        held = sum(Selections.cost(f, s) for f, (s, _) in cache.recent.items())
        assert cache.nbytes == held <= cache.max_bytes, (held, cache.max_bytes)
    gone = weakref.ref(cache)
    gc.disable()  # freed as soon as it is unused, not at a later collection
    try:
        del cache
        assert gone() is None and sel.allowed_ids(index) is sel.made["ids"]  # type: ignore[arg-type]
    finally:
        gc.enable()
