"""Every error path answers the one ErrorResponse shape with the right status (422/400/413/401/503/500)."""

from __future__ import annotations

import asyncio
import logging
import re
import threading
import time

import pytest

from spanseek.core.phrase_index import IndexFormatError
from spanseek.core.search import Searcher
from spanseek.service.app import create_app
from spanseek.service.routes import repeated_key

ERROR_KEYS = {"error", "message", "request_id"}


def assert_error(r, status: int, error: str) -> dict:
    assert r.status_code == status, r.text
    body = r.json()
    assert ERROR_KEYS <= set(body) and body["error"] == error
    assert body["request_id"] == r.headers["x-request-id"]
    return body


@pytest.mark.parametrize("payload", [{}, {"query": "a", "queries": ["b"]}, {"queries": []}, {"query": 3},
                                     {"queries": "not a list"}, {"query": "a", "top_k": "many"},
                                     {"query": "a", "unknown": 1}, ["a list"],
                                     # strict types: no silent conversion of strings, floats or numbers
                                     {"query": "a", "top_k": "5"}, {"query": "a", "top_k": 5.0},
                                     {"query": "a", "nprobe": "8"}, {"query": "a", "merge_answers": "true"},
                                     {"query": "a", "full_passage": 1}, {"query": "a", "max_answer_length": True}])
def test_malformed_bodies_are_422(client, payload):
    body = assert_error(client.post("/search", json=payload), 422, "validation_error")
    assert body["details"]


def test_a_body_of_many_wrong_items_gets_a_short_422_and_delays_no_one(client):
    """300,000 wrong questions (or filter conditions) are refused early with a few errors and their count, not one
    detail each (which was 29 MB and seconds of the server's time)."""
    from spanseek.service.errors import MAX_ERROR_DETAILS

    t0 = time.perf_counter()
    r = client.post("/search", content=b'{"queries": [' + b",".join([b"0"] * 300_000) + b"]}",
                    headers={"Content-Type": "application/json"})
    body = assert_error(r, 413, "payload_too_large")  # too many queries, whatever they are
    assert len(r.content) < 10_000 and "queries in one request; at most 32" in body["message"], body
    assert time.perf_counter() - t0 < 5
    r = client.post("/search", content=b'{"queries": [' + b",".join([b"0"] * 30) + b"]}",
                    headers={"Content-Type": "application/json"})
    body = assert_error(r, 422, "validation_error")
    assert len(body["details"]) == MAX_ERROR_DETAILS and body["details"][0]["loc"] == ["body", "queries", "0"], body
    wrong = [{"key": "k", "match": [1]}] * (MAX_ERROR_DETAILS + 5)  # within the conditions' bound, each wrong
    body = assert_error(client.post("/search", json={"query": "a", "filter": {"must": wrong}}), 422,
                        "validation_error")
    assert len(body["details"]) == MAX_ERROR_DETAILS and "the first 20 are listed" in body["message"], body
    body = assert_error(client.post("/search", json={"query": "a", "filter": {"must": [{"key": "k", "match": 1}]
                                                                                    * 5_000}}), 422,
                        "validation_error")
    # refused for its size before its 5,000 conditions are validated
    assert body["details"][0]["loc"] == ["body", "filter"] and "filter too large: 5001 conditions" in body["message"]


def test_invalid_json_and_unknown_unit_are_422_naming_what_is_wrong(client):
    """The message alone says what to fix (a client may show nothing else): where malformed JSON stops being
    readable, and the first field that does not fit the schema."""
    body = assert_error(client.post("/search", content=b'{"query": "x",', headers={"content-type": "application/json"}),
                        422, "validation_error")
    assert body["message"].startswith("the request body is not JSON that can be read: ") and "at character 14" in \
        body["message"], body
    assert body["details"] == [{"loc": ["body"], "msg": body["message"], "type": "json_invalid"}]  # no offset as a field
    body = assert_error(client.post("/search?unit=sentence", json={"query": "a"}), 422, "validation_error")
    assert "query.unit: " in body["message"] and "phrase" in body["message"], body
    body = assert_error(client.post("/search", json={"query": "a", "top_k": "5"}), 422, "validation_error")
    assert "body.top_k: " in body["message"], body
    # the query string holds the unit only: another option there was ignored, a second unit took the last
    body = assert_error(client.post("/search?unit=doc&top_k=1", json={"query": "a"}), 422, "validation_error")
    assert "query.top_k: not a query parameter of /search" in body["message"], body
    body = assert_error(client.post("/search?unit=doc&unit=phrase", json={"query": "a"}), 422, "validation_error")
    assert "query.unit: given more than once" in body["message"], body
    assert client.post("/search?unit=doc", json={"query": "a"}).status_code == 200


@pytest.mark.parametrize("content,reason", [(b'{"query": "a", "filter": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
                                             "nested too deeply"),
                                            (b'{"query": "\xff"}', "not UTF-8"),
                                            ('{"query": "a"}'.encode("utf-16"), "not UTF-8 text (UTF-16)"),
                                            ('{"query": "a"}'.encode("utf-32-le"), "not UTF-8 text (UTF-32"),
                                            (b'{"query": "a", "top_k": ' + b"9" * 5000 + b"}",
                                             "a number of more than 4,300 digits; send it as a string")])
def test_json_the_parser_cannot_read_is_422_saying_why(client, content, reason):
    """Before, JSON nested deeper than the parser recurses (and bytes that are not UTF-8) got FastAPI's 400 "There
    was an error parsing the body", where the API promises 422 for malformed requests; UTF-16 and UTF-32, which the
    JSON parser also reads (a proxy or filter in front of the service may not), were answered as UTF-8. A number
    longer than Python reads (4,300 digits) was said to be "malformed", which a client could not act on."""
    body = assert_error(client.post("/search", content=content, headers={"content-type": "application/json"}),
                        422, "validation_error")
    assert reason in body["message"]


@pytest.mark.parametrize("content,loc", [(b'{"query": "a", "top_k": 1, "top_k": 50}', ["body", "top_k"]),
                                         (b'{"query": "a", "filter": {"doc_ids": ["d0"], "doc_ids": ["d1"]}}',
                                          ["body", "filter", "doc_ids"]),
                                         (b'{"queries": ["a", {"x": 1}], "query": "b", "\\u0071uery": "c"}',
                                          ["body", "query"]),
                                         (b'{"query": "a", "filter": {"must": [{"key": "k", "match": 1}, '
                                          b'{"key": "k", "key": "j", "match": 2}]}}', ["body", "filter", "must", "1", "key"]),
                                         (b'{"query": "a", "filter": {"doc_ids": [' + b", ".join(b'"d%d"' % i for i in range(9000))
                                          + b']}, "top_k": 1, "top_k": 2}', ["body", "top_k"]),  # (checked off the loop)
                                         # a repeated key inside a value its own repeated key overwrites
                                         (b'{"query": "a", "filter": {"doc_ids": ["d0"], "doc_ids": ["d1"]}, '
                                          b'"filter": null}', ["body", "filter"]),
                                         (b'{"query": "a", "filter": {"must": [{"key": "k", "key": "j", "match": 1}]},'
                                          b' "filter": {"doc_ids": ["d0"]}, "top_k": 1}', ["body", "filter"])])
def test_a_key_given_twice_in_a_json_object_is_422_naming_it(client, content, loc):
    """The JSON parser keeps the last value of a repeated key: ``{"top_k": 1, "top_k": 50}`` searched 50 without a
    word, where a query parameter given twice is refused. The body's place of the key is named."""
    r = client.post("/search", content=content, headers={"content-type": "application/json"})
    body = assert_error(r, 422, "validation_error")
    assert body["details"][0]["loc"] == loc and "given more than once" in body["message"], body
    assert client.post("/search", json={"query": "a", "top_k": 1}).status_code == 200


def test_naming_a_repeated_key_takes_time_in_the_body_size_not_its_size_times_its_depth():
    """The key's place was found by copying the place of every value down to it: a repeated key ahead of a list of
    100,000 numbers 900 lists deep (under 1 MiB, the default max_body_bytes) took 3 s of CPU, and 15 s at 1 MiB, on
    the server's threads, for one request."""
    deep = b"[" * 900 + b", ".join([b"0"] * 100_000) + b"]" * 900
    body = b'{"query": "a", "filter": {"must": [{"key": "k", "key": "j"}]}, "x": ' + deep + b"}"
    start = time.process_time()
    assert repeated_key(body) == ["filter", "must", 0, "key"]
    assert time.process_time() - start < 1.0
    assert repeated_key(b'{"x": ' + deep + b', "y": {"a": [1, {"b": 1, "b": 2}]}}') == ["y", "a", 1, "b"]
    assert repeated_key(b'{"x": ' + deep + b', "y": 1}') is None


def test_a_body_dense_in_objects_is_checked_for_a_repeated_key_in_less_time_than_it_is_parsed():
    """A megabyte of ``{}`` (350,000 objects) was checked with the parser's hook: 2-3 times its parsing's time (66-80
    ms), beside FastAPI's own parse. A body that repeats no key is now passed by counting its keys' colons against
    its parsed value's; the hook runs only where a key may repeat. Counting is exact: a colon a string escapes, or
    that a dropped value held, cannot hide a repeated key."""
    import json
    import timeit

    body = b"[" + b",".join([b"{}"] * 350_000) + b"]"
    parsed = json.loads(body)

    def cpu(call) -> float:  # the least CPU time of three runs
        return min(timeit.repeat(call, repeat=3, number=1, timer=time.process_time))

    assert repeated_key(body, parsed) is None
    assert cpu(lambda: repeated_key(body, parsed)) < 1.2 * cpu(lambda: json.loads(body))
    for repeats, loc in ((b'{"a": 1, "a": "\\u003a"}', ["a"]), (b'{"a": 1, "a": ":"}', ["a"]),
                         (b'[{"a": {"b": ":", "b": 1}, "c": "\\u003A"}]', [0, "a", "b"]),
                         (b'{"a": {"x": 1, "x": 2}, "a": "::"}', ["a"]), (b'{"a": ":", "b": "\\u003a:"}', None),
                         (b'[' + b'{"k": 1}, ' * 1000 + b'{"k": 1, "k": 2}]', [1000, "k"])):
        assert repeated_key(repeats, json.loads(repeats)) == loc, repeats
        assert repeated_key(repeats) == loc, repeats  # (parsed here)


@pytest.mark.parametrize("extra", [{"top_k": 0}, {"top_k": 101}, {"top_k": -3}, {"nprobe": 0},
                                   {"nprobe": 10**6}, {"max_answer_tokens": 0}, {"max_answer_tokens": 65},
                                   {"lexical_weight": -1.0}, {"lexical_weight": 1e308}])
def test_out_of_range_values_are_400(client, extra):
    body = assert_error(client.post("/search", json={"query": "a", **extra}), 400, "bad_request")
    assert next(iter(extra)) in body["message"]


def test_the_old_answer_length_name_is_still_accepted(client):
    """Clients written before the rename send max_answer_length; it is the same field."""
    body = assert_error(client.post("/search", json={"query": "a", "max_answer_length": 65}), 400, "bad_request")
    assert "max_answer_tokens" in body["message"]
    assert client.post("/search", json={"query": "a", "max_answer_length": 2}).status_code == 200


def test_a_page_past_the_last_document_is_empty_and_cheap(client, tiny_searcher):
    n = tiny_searcher.selection(None).unit_count["doc"]
    r = client.post("/search?unit=doc", json={"queries": ["a castle"] * 32, "top_k": 100, "offset": n})
    assert r.status_code == 200, r.text  # at offset n - 1 these 32 questions cost more than the server admits
    assert [res["hits"] for res in r.json()["results"]] == [[]] * 32
    assert client.post("/search?unit=doc", json={"queries": ["a castle"] * 32, "top_k": 100,
                                                 "offset": n - 1}).status_code == 400


def test_both_names_of_the_answer_length_are_one_clear_422(client):
    body = assert_error(client.post("/search", json={"query": "a", "max_answer_tokens": 4, "max_answer_length": 4}),
                        422, "validation_error")
    assert "max_answer_tokens or max_answer_length (its older name), not both" in body["details"][0]["msg"]


@pytest.mark.parametrize("extra", [{"mode": "fuzzy"}, {"fusion": "sum"}, {"lexical_weight": "heavy"}])
def test_malformed_search_params_are_422(client, extra):
    assert_error(client.post("/search", json={"query": "a", **extra}), 422, "validation_error")


@pytest.mark.parametrize("unit", ["passage", "doc"])
def test_merge_answers_outside_the_phrase_unit_is_400(client, unit):
    body = assert_error(client.post(f"/search?unit={unit}", json={"query": "a", "merge_answers": True}), 400,
                        "bad_request")
    assert "merge_answers applies to unit=phrase" in body["message"]


@pytest.mark.parametrize(("unit", "extra", "names"), [
    ("passage", {"mode": "dense", "fusion": "rrf"}, ("fusion", "mode=dense")),
    ("doc", {"mode": "lexical", "lexical_weight": 2.0}, ("lexical_weight", "mode=lexical")),
    ("phrase", {"mode": "dense", "lexical_weight": 4.0}, ("lexical_weight", "mode=dense")),
    ("passage", {"fusion": "rrf", "lexical_weight": 2.0}, ("lexical_weight", "fusion=rrf")),
    ("phrase", {"fusion": "score"}, ("fusion", "unit=phrase")),
    ("phrase", {"mode": "hybrid", "fusion": "rrf", "lexical_weight": 2.0}, ("fusion", "unit=phrase")),
])
def test_fusion_parameters_that_would_be_ignored_are_400_naming_them(client, unit, extra, names):
    """fusion and lexical_weight were accepted and did nothing outside hybrid mode, with rank fusion (the weight)
    and for phrases (the fusion): refused as read_passages without read is."""
    body = assert_error(client.post(f"/search?unit={unit}", json={"query": "a", **extra}), 400, "bad_request")
    assert all(name in body["message"] for name in names), body["message"]
    for fine in ({"fusion": "rrf"}, {"lexical_weight": 2.0}, {"mode": "hybrid", "fusion": "score",
                                                               "lexical_weight": 2.0}):
        if unit != "phrase" or "fusion" not in fine:
            assert client.post(f"/search?unit={unit}", json={"query": "a", **fine}).status_code == 200


def test_oversized_body_and_too_many_queries_are_413(settings_for, tiny_searcher, serve):
    with serve(create_app(settings_for(max_body_bytes=2048, max_queries_per_request=4), lambda s: tiny_searcher)) as c:
        assert_error(c.post("/search", json={"query": "x" * 5000}), 413, "payload_too_large")

        def chunks():  # no Content-Length: counted while streaming
            for _ in range(10):
                yield b" " * 500

        r = c.post("/search", content=chunks(), headers={"content-type": "application/json"})
        assert_error(r, 413, "payload_too_large")
        assert_error(c.post("/search", json={"queries": ["q"] * 5}), 413, "payload_too_large")
        assert c.post("/search", json={"queries": ["q"] * 4}).status_code == 200


def test_too_many_queries_is_a_413_naming_the_servers_limit_whichever_check_meets_them(settings_for, tiny_searcher,
                                                                                       serve):
    """One limit, one status: a list past the schema's bound (MAX_QUERIES, met while the body is validated) is the
    413 of one past the server's max_queries_per_request, naming the server's limit, and counted as such."""
    from spanseek.service.schemas import MAX_QUERIES

    with serve(create_app(settings_for(max_queries_per_request=4), lambda s: tiny_searcher)) as c:
        for n in (5, MAX_QUERIES + 1, 2000):
            body = assert_error(c.post("/search", json={"queries": ["q"] * n}), 413, "payload_too_large")
            assert body["message"] == f"{n:,} queries in one request; at most 4 (max_queries_per_request, GET /info)"
        # the size is the request's first fault, whatever else is wrong with it
        assert_error(c.post("/search", json={"queries": ["q"] * 2000, "top_k": "x"}), 413, "payload_too_large")
        assert 'spanseek_errors_total{route="/search",type="payload_too_large"} 4.0' in c.get("/metrics").text
        assert_error(c.post("/search", json={"queries": ["q"], "top_k": "x"}), 422, "validation_error")


def test_api_key(settings_for, tiny_searcher, serve):
    with serve(create_app(settings_for(api_key="s3cret"), lambda s: tiny_searcher)) as c:
        r = c.post("/search", json={"query": "a"})
        assert_error(r, 401, "unauthorized")
        assert r.headers["www-authenticate"] == "Bearer"
        assert_error(c.post("/search", json={"query": "a"}, headers={"X-API-Key": "wrong"}), 401, "unauthorized")
        assert_error(c.get("/info", headers={"Authorization": "Bearer nope"}), 401, "unauthorized")
        assert c.post("/search", json={"query": "a"}, headers={"X-API-Key": "s3cret"}).status_code == 200
        assert c.get("/info", headers={"Authorization": "Bearer s3cret"}).status_code == 200
        for probe in ("/health", "/ready", "/metrics"):  # probes and the scraper need no key
            assert c.get(probe).status_code == 200


@pytest.mark.parametrize("value", ["", "  "])
def test_empty_api_key_means_no_key(settings_for, tiny_searcher, serve, monkeypatch, value):
    """An empty SPANSEEK_API_KEY (compose passes one when the variable is unset) turns auth off for everyone."""
    monkeypatch.setenv("SPANSEEK_API_KEY", value)
    settings = settings_for()
    assert settings.api_key is None
    with serve(create_app(settings, lambda s: tiny_searcher)) as c:
        for headers in ({}, {"X-API-Key": "anything"}, {"Authorization": "Bearer anything"}):
            assert c.post("/search", json={"query": "a"}, headers=headers).status_code == 200, headers
            assert c.get("/info", headers=headers).status_code == 200, headers


def test_not_ready_until_loaded_and_warmed(settings_for, tiny_searcher):
    from fastapi.testclient import TestClient

    gate = threading.Event()

    def slow_factory(settings):
        assert gate.wait(30)
        return tiny_searcher

    with TestClient(create_app(settings_for(warmup=True), slow_factory)) as c:
        r = c.get("/ready")
        assert_error(r, 503, "not_ready")
        assert r.headers["retry-after"]
        assert_error(c.post("/search", json={"query": "a"}), 503, "not_ready")
        assert_error(c.get("/info"), 503, "not_ready")
        assert c.get("/health").status_code == 200  # alive while loading
        assert "spanseek_ready 0.0" in c.get("/metrics").text
        gate.set()
        for _ in range(1500):
            if c.get("/ready").status_code == 200:
                break
        assert c.post("/search", json={"query": "a"}).status_code == 200


def _wait_failed(c):
    for _ in range(500):
        r = c.get("/ready")
        if "failed" in r.json()["message"]:
            return r
        time.sleep(0.01)
    raise AssertionError("loading never failed")


def test_failed_load_is_reported_on_ready_while_alive(settings_for, tmp_path):
    """/health (liveness) stays 200 so a restart loop does not start; /ready says 503 and why, without paths."""
    from fastapi.testclient import TestClient

    missing = tmp_path / "missing"
    with TestClient(create_app(settings_for(index=missing))) as c:
        body = assert_error(_wait_failed(c), 503, "not_ready")
        assert "IndexFormatError" in body["message"] and "no such index directory" in body["message"]
        assert str(tmp_path) not in body["message"] and ".../missing" in body["message"]
        health = c.get("/health")
        assert health.status_code == 200 and health.json()["status"] == "ok"
        assert "no such index directory" in health.json()["detail"] and str(tmp_path) not in health.text
        search = assert_error(c.post("/search", json={"query": "a"}), 503, "not_ready")
        assert str(tmp_path) not in search["message"]
        for _ in range(3):  # the probe's 503 is its answer, not an error: a start polled every 2 s counted dozens
            assert c.get("/ready").status_code == 503
        assert 'spanseek_errors_total{route="/search",type="not_ready"} 1.0' in c.get("/metrics").text  # the search's


def test_paths_are_shown_only_to_key_holders(settings_for, tmp_path, tiny_searcher, serve, monkeypatch):
    import os

    from fastapi.testclient import TestClient

    missing = tmp_path / "missing"
    with TestClient(create_app(settings_for(index=missing, api_key="k"))) as c:
        _wait_failed(c)
        assert str(missing) in c.get("/ready", headers={"X-API-Key": "k"}).json()["message"]
        assert str(tmp_path) not in c.get("/ready", headers={"X-API-Key": "wrong"}).text
    index_dir = tiny_searcher.index.dir
    monkeypatch.chdir(index_dir.parent.parent)  # served by a relative path too: shortened all the same
    for given in (index_dir, os.path.relpath(index_dir)):
        with serve(create_app(settings_for(index=given), lambda s: tiny_searcher)) as c:  # no key: nobody sees paths
            info = c.get("/info").json()
        for shown in (info["index"]["dir"], info["index"]["path"]):
            assert shown.startswith(".../") and "/" not in shown[4:], (given, shown)
    with serve(create_app(settings_for(api_key="k"), lambda s: tiny_searcher)) as c:
        assert c.get("/info", headers={"X-API-Key": "k"}).json()["index"]["dir"] == str(tiny_searcher.index.dir)


def test_wrong_model_for_index_fails_to_load(settings_for, tmp_path, tiny_config):
    """The service refuses an index whose manifest does not match the model."""
    import torch
    from fastapi.testclient import TestClient

    from spanseek.core.model import PhraseModel

    torch.manual_seed(1)
    other = PhraseModel(tiny_config).save(tmp_path / "other")
    with TestClient(create_app(settings_for(model=str(other)))) as c:
        for _ in range(500):
            r = c.get("/ready")
            if "failed" in r.json()["message"]:
                break
        assert "different model" in assert_error(r, 503, "not_ready")["message"]


class ExplodingSearcher(Searcher):
    def search_vectors(self, *args, **kwargs):
        raise IndexFormatError("secret internal path /var/lib/x")


def test_unexpected_error_is_a_generic_500_with_logged_request_id(settings_for, tiny_searcher, serve, caplog):
    searcher = ExplodingSearcher(tiny_searcher.index, tiny_searcher.encoder)
    with serve(create_app(settings_for(), lambda s: searcher), raise_server_exceptions=False) as c:
        with caplog.at_level(logging.ERROR):
            r = c.post("/search", json={"query": "a"})
        body = assert_error(r, 500, "internal_error")
        assert "secret" not in r.text and body["request_id"] in body["message"]
        assert any(body["request_id"] in rec.getMessage() for rec in caplog.records)
        assert c.get("/health").status_code == 200  # the batcher survived
        assert 'spanseek_errors_total{route="/search",type="internal_error"} 1.0' in c.get("/metrics").text


@pytest.mark.parametrize("content_type", ["application/x-www-form-urlencoded", "text/plain", None])
def test_a_body_not_declared_json_is_415_saying_what_to_send(client, content_type):
    headers = {"content-type": content_type} if content_type else {}
    r = client.post("/search", content=b'{"query": "who wrote hamlet?"}', headers=headers)
    body = assert_error(r, 415, "unsupported_media_type")
    assert "Content-Type: application/json" in body["message"] and (content_type or "no Content-Type") in body["message"]
    for ok in ("application/json", "application/json; charset=utf-8", "application/vnd.api+json"):
        assert client.post("/search", content=b'{"query": "a"}', headers={"content-type": ok}).status_code == 200, ok


@pytest.mark.parametrize(("charset", "body"), [
    ("latin-1", '{"query": "café"}'.encode("latin-1")),
    ("ISO-8859-1", b'{"query": "castle"}'),  # ASCII bytes: refused all the same, not at the first accented query
    ('"utf-16"', '{"query": "café"}'.encode("utf-16")),
    ("no-such-charset", b'{"query": "castle"}'),
    ("utf-8\x00", b'{"query": "castle"}'),
])
def test_a_body_declared_in_another_charset_than_utf8_is_a_415_naming_it(client, charset, body):
    """JSON is read as UTF-8 only: a declared charset=latin-1 body was read as UTF-8 whatever it said (its "é" a 422
    "not UTF-8 text", the charset unsaid; in ASCII it was searched), a UTF-16 one a 422 likewise."""
    r = client.post("/search", content=body, headers={"content-type": f"application/json; charset={charset}"})
    message = assert_error(r, 415, "unsupported_media_type")["message"]
    assert f"declared charset={charset.strip(chr(34))!r}" in message and "send it in UTF-8" in message, message
    for ok in ("utf-8", "UTF8", '"utf-8"', "us-ascii", "utf-8-sig"):  # UTF-8 and its subset, however spelt
        r = client.post("/search", content='{"query": "café"}'.encode() if "ascii" not in ok else b'{"query": "a"}',
                        headers={"content-type": f"application/json ; Charset = {ok}"})
        assert r.status_code == 200, (ok, r.text)


@pytest.mark.parametrize("coding", ["gzip", "br", "GZIP, identity"])
def test_a_compressed_body_is_a_415_naming_its_content_encoding(client, coding):
    """The server does not decode a Content-Encoding: a gzipped search was a 422 "not UTF-8 text", the compression
    unsaid."""
    import gzip

    r = client.post("/search", content=gzip.compress(b'{"query": "a"}'),
                    headers={"content-type": "application/json", "content-encoding": coding})
    body = assert_error(r, 415, "unsupported_media_type")
    assert f"Content-Encoding: {coding.lower()}, which this server does not decode" in body["message"], body
    assert r.headers["accept-encoding"] == "identity"
    for sent in ("identity", ""):  # as it is: searched
        r = client.post("/search", content=b'{"query": "a"}',
                        headers={"content-type": "application/json", "content-encoding": sent})
        assert r.status_code == 200, r.text
    assert client.get("/health", headers={"content-encoding": "gzip"}).status_code == 200  # no body: nothing to read


def test_a_content_encoding_in_a_second_header_is_read_with_the_first(client):
    """Two Content-Encoding headers are one list of codings: the check read the first alone, and a body gzipped after
    ``identity`` was read compressed (a 422 "not UTF-8 text")."""
    import gzip

    r = client.post("/search", content=gzip.compress(b'{"query": "a"}'), headers=[
        ("content-type", "application/json"), ("content-encoding", "identity"), ("content-encoding", "gzip")])
    body = assert_error(r, 415, "unsupported_media_type")
    assert "Content-Encoding: identity, gzip, which this server does not decode" in body["message"], body


def test_an_empty_json_body_is_a_422_saying_there_is_none(client):
    """It was "body: Field required", which names no field a client could add."""
    r = client.post("/search", content=b"", headers={"content-type": "application/json"})
    body = assert_error(r, 422, "validation_error")
    assert body["message"] == "the request has no body; send a JSON object", body
    assert body["details"][0]["loc"] == ["body"]


def test_unknown_route_and_method(client):
    assert_error(client.get("/nope"), 404, "not_found")
    assert_error(client.get("/search"), 405, "method_not_allowed")


@pytest.mark.parametrize("method,path,takes", [("GET", "/search", "POST"),
                                               ("DELETE", "/documents", "GET, POST, PUT"),
                                               ("POST", "/documents/a.txt", "DELETE, GET"),
                                               # the docs' static files, a mounted app: its own refusal names them
                                               ("POST", "/docs-static/swagger-ui.css", "GET, HEAD"),
                                               ("DELETE", "/docs-static/docs", "GET, HEAD")])
def test_a_method_a_path_does_not_take_is_a_405_naming_every_method_it_takes(client, method, path, takes):
    """The router's 405 said "Method Not Allowed" and named in ``Allow`` the methods of the first route of the path
    alone: ``DELETE /documents`` was told ``Allow: PUT``, though the path takes GET and POST too. A mounted app's
    own 405 (the docs' static files: GET, HEAD) was told it takes nothing, with an empty ``Allow``."""
    r = client.request(method, path)
    body = assert_error(r, 405, "method_not_allowed")
    assert r.headers["allow"] == takes, r.headers
    assert body["message"] == f"{method} is not a method of {path}: it takes {takes}"


def test_cors(settings_for, tiny_searcher, serve):
    with serve(create_app(settings_for(cors_origins="https://a.example, https://b.example"), lambda s: tiny_searcher)) as c:
        r = c.options("/search", headers={"Origin": "https://a.example", "Access-Control-Request-Method": "POST"})
        assert r.headers["access-control-allow-origin"] == "https://a.example"
        r = c.post("/search", json={"query": "a"}, headers={"Origin": "https://evil.example"})
        assert "access-control-allow-origin" not in r.headers
        ok = {"Origin": "https://b.example"}
        for r, status in [(c.post("/search", json={"query": "a"}, headers=ok), 200),  # a browser can read the
                          (c.post("/search", content=b"x" * (2 << 20), headers=ok), 413)]:  # errors sent by the
            assert r.status_code == status and r.headers["access-control-allow-origin"] == "https://b.example"
            assert "x-request-id" in r.headers["access-control-expose-headers"].lower()  # middlewares too


def test_an_index_without_the_lexical_part_serves_dense_and_explains_the_other_modes(tmp_path, settings_for,
                                                                                      tiny_searcher):
    import json
    import shutil

    from fastapi.testclient import TestClient

    from spanseek.core import phrase_index
    from spanseek.core.phrase_index import PhraseIndex
    from spanseek.core.search import Searcher

    old = tmp_path / "old"
    shutil.copytree(tiny_searcher.index.dir, old)
    shutil.rmtree(old / phrase_index.LEXICAL)
    manifest = json.loads((old / phrase_index.MANIFEST).read_text())
    for key in ("lexical", "files", phrase_index.CHECKSUM_FIELD):  # as built before these fields existed
        del manifest[key]
    (old / phrase_index.MANIFEST).write_text(json.dumps(manifest))
    searcher = Searcher(PhraseIndex(old), tiny_searcher.encoder)
    with TestClient(create_app(settings_for(index=old), lambda s: searcher)) as client:
        while client.get("/ready").status_code != 200:
            time.sleep(0.02)
        assert client.post("/search", json={"query": "the castle"}).status_code == 200
        body = assert_error(client.post("/search", json={"query": "the castle", "mode": "hybrid"}), 400, "bad_request")
        assert "spanseek index add-lexical .../old" in body["message"]
        service = client.get("/info").json()["service"]
        assert service["modes"] == ["dense"] and "add-lexical .../old" in service["lexical"]
        # no key configured: nobody sees the index's directory, which both named in full
        assert str(tmp_path) not in body["message"] and str(tmp_path) not in service["lexical"]


@pytest.mark.parametrize("body", [
    {"query": "a", "k" * 1_000_000: 1},  # an unknown field: its name is in the error's loc
    {"query": "a", "filter": {"must": [{"key": "k" * 1_000_000}]}},  # a validator's message quotes the key
])
def test_a_large_bad_field_is_named_and_its_text_cut_not_quoted_whole(client, body):
    """A 422 quoted a megabyte of bad input back (in its message and its details): cut to a prefix, its length
    said, the field still named."""
    r = client.post("/search", json=body)
    error = assert_error(r, 422, "validation_error")
    assert len(r.content) < 5_000, len(r.content)
    assert error["message"].startswith("the request does not match the API schema: body."), error["message"]
    cut = f"{'k' * 100}… (1,000,000 characters)"  # the first 100 characters, and how many there were
    assert cut in error["message"] or cut in str(error["details"]), error
    assert error["details"][0]["loc"][0] == "body"


@pytest.mark.parametrize(("method", "path", "writes"), [("POST", "/search", False), ("PUT", "/files/notes.txt", True)])
async def test_a_client_that_leaves_while_sending_its_body_is_counted_as_gone_not_as_malformed(
        settings_for, write_settings, async_serve, method, path, writes):
    """A client that closes the connection half-way through its body sent nothing malformed: the request is a 499
    ``client_closed`` in the metrics and the access line (was: a search a 422 ``validation_error`` "not JSON that
    can be read", counted among the clients' malformed requests; a file upload a 500 ``internal_error`` with a
    traceback logged), and the searches beside it are answered."""
    app = create_app(write_settings() if writes else settings_for())
    async with async_serve(app) as client:
        client.headers["X-API-Key"] = "key"
        body = b'{"query": "who built the castle?"}'
        received = iter([{"type": "http.request", "body": body[:10], "more_body": True}, {"type": "http.disconnect"}])

        async def receive():
            return next(received)

        sent = []

        async def send(message):
            sent.append(message)

        scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method,
                 "scheme": "http", "path": path, "raw_path": path.encode(), "query_string": b"", "root_path": "",
                 "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                             (b"x-api-key", b"key")],
                 "client": ("127.0.0.1", 50000), "server": ("test", 80)}
        beside = asyncio.create_task(client.post("/search", json={"query": "who built the castle?"}))
        await app(scope, receive, send)
        assert (await beside).status_code == 200
        assert [m["status"] for m in sent if m["type"] == "http.response.start"] == [499]
        metrics = (await client.get("/metrics")).text
    assert f'spanseek_errors_total{{route="{path if not writes else "/files/{name}"}",type="client_closed"}} 1.0' in metrics
    assert not re.search(r'errors_total\{[^}]*type="(validation_error|internal_error)"\} [1-9]', metrics)
