"""Bounded responses: passage windows around the phrase by default, whole passages on request, a size cap."""

from __future__ import annotations

import dataclasses

import pytest

from spanseek.core.hits import Hit
from spanseek.core.params import SearchParams
from spanseek.core.search import Searcher
from spanseek.service.app import create_app
from spanseek.service.bounds import passage_window


def _hit(passage: str, start: int, end: int) -> Hit:
    return Hit(text=passage[start:end], score=1.0, start=start, end=end, passage_id=0, passage=passage,
               doc_id="d", title="t")


@pytest.mark.parametrize("start", [0, 5, 480, 990, 1000 - 7])
def test_window_keeps_the_phrase_and_is_bounded(start):
    passage = " ".join(f"w{i:03d}" for i in range(200))  # 999 characters, words of 4
    hit = _hit(passage, start, start + 7)
    w = passage_window(hit, 40)
    assert w["passage"][w["start"]: w["end"]] == hit.text
    assert w["passage_offset"] + w["start"] == hit.start and w["passage_chars"] == len(passage)
    assert passage[w["passage_offset"]: w["passage_offset"] + len(w["passage"])] == w["passage"]
    assert len(w["passage"]) <= 7 + 2 * 40 + 2 * 32
    lo, hi = w["passage_offset"], w["passage_offset"] + len(w["passage"])
    assert lo == 0 or passage[lo - 1] == " "  # cut at word edges
    assert hi == len(passage) or passage[hi] == " "


@pytest.mark.parametrize("unit", ["\u0e01\u0e38\u0e07", "\U0001f468\u200d\U0001f467", "e\u0301", "\u2764\ufe0f"])
def test_a_window_without_spaces_is_cut_between_characters_as_read(unit):
    """Thai with its vowel marks, joined emoji, a combining accent, an emoji and its variation selector: text with no
    space near the cut is cut where no character as read is split (no mark after the cut, no joiner beside it),
    whatever offset the cut falls on."""
    import unicodedata

    def splits(text: str, i: int) -> bool:
        return 0 < i < len(text) and (unicodedata.category(text[i]).startswith("M") or "\u200d" in text[i - 1 : i + 1])

    for context in range(40, 40 + len(unit)):
        passage = unit * 120 + " the answer " + unit * 120
        start = passage.index("the answer")
        w = passage_window(_hit(passage, start, start + 10), context)
        lo, hi = w["passage_offset"], w["passage_offset"] + len(w["passage"])
        assert w["passage"][w["start"] : w["end"]] == "the answer"
        assert not splits(passage, lo) and not splits(passage, hi), (context, lo, hi)


def test_whole_passage_when_asked_or_short():
    passage = "short passage"
    assert passage_window(_hit(passage, 6, 13), 40)["passage"] == passage
    long = "x" * 10_000
    w = passage_window(_hit(long, 5000, 5005), None)
    assert w["passage"] == long and w["passage_offset"] == 0 and w["start"] == 5000
    w = passage_window(_hit(long, 5000, 5005), 10)  # no word edge near: cut exactly
    assert len(w["passage"]) == 25 and w["start"] == 10


class HugePassageSearcher(Searcher):
    """The tiny index's hits, each placed inside a 1 MB paragraph (as on a corpus with one)."""

    PAD = "filler " * 150_000  # 1.05 MB

    def search_vectors(self, *args, **kwargs):
        out = super().search_vectors(*args, **kwargs)
        pad = len(self.PAD)
        return [[dataclasses.replace(h, passage=self.PAD + h.passage + self.PAD, start=h.start + pad, end=h.end + pad)
                 for h in hits] for hits in out]


def test_top_k_100_on_a_megabyte_paragraph_is_bounded(settings_for, tiny_searcher, serve):
    searcher = HugePassageSearcher(tiny_searcher.index, tiny_searcher.encoder)
    with serve(create_app(settings_for(max_top_k=100), lambda s: searcher)) as c:
        r = c.post("/search", json={"query": "who built the castle?", "top_k": 100})
        assert r.status_code == 200, r.text
        hits = r.json()["results"][0]["hits"]
        assert len(hits) == 100
        # the bound: per hit 2 x passage_context_chars (200) + the phrase + word-edge slack, plus fixed fields
        assert all(len(h["passage"]) <= 2 * 200 + len(h["text"]) + 64 for h in hits)
        assert all(h["passage_chars"] > 2_000_000 for h in hits)
        assert len(r.content) < 100 * 1024  # before: ~210 MB
        full = c.post("/search", json={"query": "who built the castle?", "top_k": 100, "full_passage": True})
        assert full.status_code == 400 and full.json()["error"] == "response_too_large"
        assert "max_response_bytes" in full.json()["message"] and "full_passage" in full.json()["message"]


def test_full_passage_on_request_and_the_exact_size_cap(settings_for, tiny_searcher, serve):
    with serve(create_app(settings_for(passage_context_chars=10), lambda s: tiny_searcher)) as c:
        q = "who built the castle?"
        want = tiny_searcher.search([q], SearchParams(unit="phrase", top_k=5))[0]
        windowed = c.post("/search", json={"query": q, "top_k": 5}).json()["results"][0]["hits"]
        full = c.post("/search", json={"query": q, "top_k": 5, "full_passage": True}).json()["results"][0]["hits"]
        for w, f, h in zip(windowed, full, want, strict=True):
            assert f["passage"] == h.passage and (f["start"], f["end"], f["passage_offset"]) == (h.start, h.end, 0)
            assert w["passage"][w["start"]: w["end"]] == h.text and w["passage_offset"] + w["start"] == h.start
            assert len(w["passage"]) <= len(h.text) + 2 * 10 + 2 * 32
        big = {"queries": [q, "a river", "the king", "which city?"], "top_k": 10, "full_passage": True}
        size = len(c.post("/search", json=big).content)
    assert size > 4096
    # a cap just below (timings vary the size by a few bytes): the estimate (a lower bound) lets it through, the
    # rendered bytes do not
    with serve(create_app(settings_for(max_response_bytes=size - 40, passage_context_chars=10),
                          lambda s: tiny_searcher)) as c:
        r = c.post("/search", json=big)
        assert r.status_code == 400 and r.json()["error"] == "response_too_large"
        message = r.json()["message"]
        assert "would be at least" not in message and f"limit of {size - 40}" in message
        assert abs(int(message.split("would be ")[1].split()[0]) - size) < 40
        assert c.post("/search", json={**big, "full_passage": False}).status_code == 200
    with serve(create_app(settings_for(max_response_bytes=size + 40), lambda s: tiny_searcher)) as c:
        assert c.post("/search", json=big).status_code == 200


class HugeMetaSearcher(Searcher):
    """The tiny index's hits, each carrying one document's megabyte of metadata."""

    META = {"scan": "x" * (1 << 20)}

    def search_vectors(self, *args, **kwargs):
        out = super().search_vectors(*args, **kwargs)
        return [[dataclasses.replace(h, meta=self.META) for h in hits] for hits in out]


def test_metadata_counts_in_the_size_bound_before_anything_is_rendered(settings_for, tiny_searcher, serve,
                                                                       monkeypatch):
    """32 queries x top_k 100 of hits with a megabyte of metadata each: refused from the estimate, without the
    answer being rendered. Before, the estimate left metadata out: the server rendered 728 MB before its 400."""
    from spanseek.service.schemas import SearchResponse

    rendered = []
    monkeypatch.setattr(SearchResponse, "model_dump_json", lambda self, **kw: rendered.append(1) or "{}")
    searcher = HugeMetaSearcher(tiny_searcher.index, tiny_searcher.encoder)
    with serve(create_app(settings_for(max_top_k=100), lambda s: searcher)) as c:
        body = {"queries": [f"who built the castle {i}?" for i in range(32)], "top_k": 100, "allow_overlap": True}
        r = c.post("/search", json=body)
    assert r.status_code == 400 and r.json()["error"] == "response_too_large"
    assert "would be at least" in r.json()["message"] and rendered == []


def test_the_estimate_measures_shared_metadata_once_and_stops_past_the_limit(monkeypatch):
    import json

    from spanseek.service import bounds

    dumps, real_dumps = [], json.dumps
    monkeypatch.setattr(bounds.json, "dumps", lambda obj, **kw: dumps.append(1) or real_dumps(obj, **kw))
    meta = {"k": "v" * 1000}
    hit = {"text": "t", "passage": "p", "doc_id": "d", "title": "", "meta": meta}
    assert bounds.estimated_bytes([[hit] * 50], ["q"]) > 50 * 1000 and len(dumps) == 1
    assert bounds.estimated_bytes([[hit] * 50], ["q"], limit=3000) < 5000  # stopped after a few hits


@pytest.mark.parametrize(("unit", "top_k"), [("passage", 30), ("doc", 5)])
def test_an_answer_sure_to_pass_the_limit_is_refused_before_it_is_searched(settings_for, counting_factory, unit, top_k):
    """Passages and documents fill their page from the index, so an answer of many questions x a deep page is known
    to pass max_response_bytes before searching: refused at once with the same 400 (it was searched first: 86 s for
    1,024 demo questions x top_k 200). At the bound itself, and for what the search may not fill (phrases, a
    filter), the request is searched; an answer that fits is answered."""
    from spanseek.service.bounds import HIT_OVERHEAD_BYTES
    from tests.service.conftest import serving

    factory, encoder = counting_factory()
    questions = [f"who built the castle {i}?" for i in range(16)] + [" \u200b "]  # the blank one gets no hits
    units = {"passage": 24, "doc": 6}  # the tiny index's
    costly = {"max_request_cost": 1000.0, "warmup": False}  # every unit asked for: too costly at the default
    body = {"queries": questions, "top_k": top_k, "full_passage": True}
    # at least HIT_OVERHEAD_BYTES and a character of phrase and of passage a hit, 64 bytes and the text a question
    bound = (sum(map(len, questions)) + 64 * len(questions)
             + 16 * min(top_k, units[unit]) * (HIT_OVERHEAD_BYTES + 2))
    with serving(create_app(settings_for(max_response_bytes=bound - 1, **costly), factory)) as c:
        searched = len(encoder.calls)
        r = c.post(f"/search?unit={unit}", json=body)
        assert r.status_code == 400 and r.json()["error"] == "response_too_large", r.text
        assert r.json()["message"].startswith(f"the response would be at least {bound} bytes, over this server's "
                                              f"limit of {bound - 1} (max_response_bytes)")
        assert len(encoder.calls) == searched  # refused before encoding
        for searched_anyway in ({"queries": questions, "top_k": top_k, "full_passage": True, "allow_overlap": True},
                                {**body, "filter": {"doc_ids": ["d0", "d1", "d2", "d3", "d4", "d5"]}}):
            path = "/search?unit=phrase" if "allow_overlap" in searched_anyway else f"/search?unit={unit}"
            c.post(path, json=searched_anyway)
            assert len(encoder.calls) > searched
            searched = len(encoder.calls)
    with serving(create_app(settings_for(max_response_bytes=bound, **costly), factory)) as c:
        searched = len(encoder.calls)
        c.post(f"/search?unit={unit}", json=body)
        assert len(encoder.calls) > searched  # at the bound: searched (and refused only if it does not fit)
    with serving(create_app(settings_for(**costly), factory)) as c:
        r = c.post(f"/search?unit={unit}", json=body)
        assert r.status_code == 200 and [len(x["hits"]) for x in r.json()["results"]] == [
            min(top_k, units[unit])] * 16 + [0]


def test_a_page_an_index_with_a_token_filter_may_not_fill_is_searched_before_it_is_judged(
        tmp_path, tiny_corpus, filter_model_dir, settings_for):
    """A token filter may leave a passage none of whose tokens is indexed, which no search finds, so a passage search
    of such an index can answer fewer hits than top_k: its answer is judged once searched, not as a full page before
    (an answer of a few kB, under the limit, was refused as "at least" a full page's 20 kB)."""
    from spanseek.core.loading import open_searcher
    from spanseek.indexer.build import BuildOptions, build_index
    from spanseek.service.bounds import HIT_OVERHEAD_BYTES
    from tests.service.conftest import serving

    index = tmp_path / "filtered"
    build_index(tiny_corpus, filter_model_dir, index, BuildOptions(progress=False, precision="fp32",
                                                                    filter_threshold=0.55))
    searcher = open_searcher(index, filter_model_dir, device="cpu", precision="fp32")
    questions = [f"who built the castle {i}?" for i in range(8)]
    body = {"queries": questions, "top_k": 24, "mode": "dense"}  # every one of the index's 24 passages asked for
    full_page = sum(map(len, questions)) + 64 * len(questions) + len(questions) * 24 * (HIT_OVERHEAD_BYTES + 2)
    settings = settings_for(index=index, model=str(filter_model_dir), max_request_cost=1000.0,
                            max_response_bytes=full_page - 1)
    with serving(create_app(settings, lambda s: searcher)) as c:
        r = c.post("/search?unit=passage", json=body)
        assert r.status_code == 200, r.text
        assert len(r.content) < full_page / 2  # few passages found: far below what a full page would take
