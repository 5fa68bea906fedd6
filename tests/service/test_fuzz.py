"""OpenAPI fuzzing (schemathesis) against the service on loopback: no input may produce a 5xx; and any body sent
beside a good request (hypothesis; slow) leaves the good request's hits as they are alone.

Bounded: a fixed number of generated cases per operation (positive and negative data), so it runs in seconds
on the tiny index. Driven through hypothesis directly (schemathesis' pytest fixture loader needs pytest < 9).
"""

from __future__ import annotations

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings

from spanseek.service.app import create_app

EXAMPLES_PER_OPERATION = 60
# Arrays are generated at most this long. A negative case for a list whose limit is large (10,000 ids, 1,024 filter
# conditions) is made by repeating an item past the limit, each item itself a nested filter: the generator alone
# took 24 GB. The server's own limits stay as they are; the generator just asks within this many.
MOST_ITEMS = 8


def capped(schema: object) -> object:
    """The OpenAPI document with every ``maxItems`` at most ``MOST_ITEMS``."""
    if isinstance(schema, dict):
        return {k: min(v, MOST_ITEMS) if k == "maxItems" and isinstance(v, int) else capped(v) for k, v in schema.items()}
    if isinstance(schema, list):
        return [capped(v) for v in schema]
    return schema


def test_no_input_gives_a_server_error(settings_for, tiny_searcher, live):
    app = create_app(settings_for(max_body_bytes=64 * 1024), lambda s: tiny_searcher)
    with live(app) as url:
        schema = schemathesis.openapi.from_dict(capped(httpx.get(url + "/openapi.json").json()))
        operations = [result.ok() for result in schema.get_all_operations()]
        assert {op.path for op in operations} >= {"/search", "/health", "/ready", "/info", "/metrics"}
        seen: dict[int, int] = {}
        modes = [schemathesis.GenerationMode.POSITIVE, schemathesis.GenerationMode.NEGATIVE]
        for op in operations:
            for mode in modes if op.path == "/search" else modes[:1]:

                @given(case=op.as_strategy(generation_mode=mode))
                @settings(max_examples=EXAMPLES_PER_OPERATION, deadline=None, derandomize=True, database=None,
                          suppress_health_check=list(HealthCheck))
                def fuzz(case):
                    response = case.call(base_url=url, timeout=30)
                    seen[response.status_code] = seen.get(response.status_code, 0) + 1
                    assert response.status_code < 500, (case.method, case.path, case.query, case.body, response.text[:300])
                    if response.status_code >= 400:
                        assert {"error", "message", "request_id"} <= set(response.json())

                fuzz()
    print("status counts:", seen)
    assert seen.get(200, 0) > 0 and any(400 <= s < 500 for s in seen), seen  # it reached both outcomes


def _bodies():
    """Request bodies as the internet sends them: raw bytes, any JSON, and requests of the right shape whose questions
    hold anything (NUL, control characters, lone surrogates written as JSON escapes, long runs)."""
    import json

    from hypothesis import strategies as st

    text = st.text(st.characters(codec=None, exclude_categories=()), max_size=40)
    questions = st.one_of(text, st.just("\\ud800"), st.builds(lambda c, n: c * n, text, st.integers(0, 200)))
    shaped = st.builds(lambda q, k: json.dumps({"query": q, "top_k": k}, ensure_ascii=bool(k % 2)).encode(
        "utf-8", "surrogatepass").replace(b"\\\\ud800", b"\\ud800"), questions, st.integers(1, 4))
    values = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | text,
                          lambda inner: st.lists(inner, max_size=4) | st.dictionaries(text, inner, max_size=4),
                          max_leaves=12)
    return st.one_of(st.binary(max_size=200), values.map(lambda v: json.dumps(v).encode()), shaped)


@pytest.mark.slow
def test_any_body_beside_a_good_request_in_one_batch_leaves_the_good_ones_hits_as_they_are_alone(
        settings_for, tiny_searcher, serve):
    """Each generated body is sent at the same time as a good request (a 100 ms batching window: they share a batch
    whenever the body is a search): the body gets a 4xx in the one error shape or a 200, never a 5xx, and the good
    request's hits are its hits alone."""
    from concurrent.futures import ThreadPoolExecutor

    good = {"query": "who built the castle?", "top_k": 3}
    app = create_app(settings_for(max_wait_ms=100, max_batch_size=8), lambda s: tiny_searcher)
    seen: dict[int, int] = {}
    shared: list[bool] = []  # whether the good request's batch held the body's questions too
    with serve(app) as client, ThreadPoolExecutor(2) as pool:
        alone = client.post("/search", json=good).json()["results"][0]["hits"]

        @given(body=_bodies())
        @settings(max_examples=40, deadline=None, derandomize=True, database=None,
             suppress_health_check=list(HealthCheck))
        def beside(body: bytes) -> None:
            sent = pool.submit(client.post, "/search", content=body, headers={"content-type": "application/json"})
            answer = client.post("/search", json=good)
            r = sent.result()
            seen[r.status_code] = seen.get(r.status_code, 0) + 1
            shared.append(int(answer.headers["X-Spanseek-Batch-Size"]) > 1)
            assert r.status_code < 500 and r.status_code in (200, 400, 413, 415, 422), (body, r.text[:300])
            if r.status_code >= 400:
                assert {"error", "message", "request_id"} <= set(r.json())
            assert answer.status_code == 200 and answer.json()["results"][0]["hits"] == alone

        beside()
    assert seen.get(200, 0) > 0 and seen.get(422, 0) > 0 and any(shared), seen  # shared batches, and refusals
