"""/metrics exposes the spanseek_* series with the values the requests produced."""

from __future__ import annotations

import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from spanseek.service.metrics import ServiceMetrics
from tests.service.test_bucket_edges import histogram_quantile


def samples(text: str) -> dict[tuple[str, tuple], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def errors_by_route(text: str) -> dict[tuple[str, str], float]:
    """spanseek_errors_total's samples by (route, type), those at 0 left out."""
    return {(dict(labels)["route"], dict(labels)["type"]): value for (name, labels), value in samples(text).items()
            if name == "spanseek_errors_total" and value}


def test_errors_are_counted_by_the_route_template_never_the_raw_path(settings_for, tmp_path):
    """spanseek_errors_total was labelled by error type alone: which endpoint failed could not be told. It carries
    the route's template (one series per route, whatever the ids asked for), errors the middleware answers before
    routing (a body too large, an encoded one) included, and ``unmatched`` for a path no route takes."""
    from spanseek.service.app import create_app
    from tests.service.conftest import serving

    settings = settings_for(writes=True, api_key="key", live_dir=tmp_path / "live", merge_tokens=0, max_body_bytes=2000)
    with serving(create_app(settings)) as client:
        key = {"X-API-Key": "key"}
        for doc_id in ("a", "b", "c/d"):
            assert client.get(f"/documents/{doc_id}", headers=key).status_code == 404
        assert client.post("/search", json={"query": "a", "top_k": 0}).status_code == 401
        assert client.post("/search", headers=key, json={"query": "x" * 3000}).status_code == 413
        assert client.put("/documents", headers={**key, "Content-Encoding": "gzip"}, content=b"{}").status_code == 415
        for path in ("/nowhere/1", "/nowhere/2"):
            assert client.get(path).status_code == 404
        assert client.delete("/search").status_code == 405
        text = client.get("/metrics").text
    assert errors_by_route(text) == {("/documents/{doc_id}", "not_found"): 3, ("/search", "unauthorized"): 1,
                                     ("/search", "payload_too_large"): 1, ("/documents", "unsupported_media_type"): 1,
                                     ("unmatched", "not_found"): 2, ("/search", "method_not_allowed"): 1}
    routes = {dict(labels)["route"] for (name, labels) in samples(text) if name == "spanseek_errors_total"}
    assert {"/documents/{doc_id}", "/files/{name}", "/admin/reload", "/info"} <= routes  # every route starts at 0
    assert not [r for r in routes if "{" in r and ":" in r]  # the convertor (``:path_text``) is no part of it


def test_metrics_reflect_traffic(client, tiny_searcher):
    for unit in ("phrase", "passage", "doc"):
        assert client.post(f"/search?unit={unit}", json={"queries": ["a", "b"], "top_k": 2}).status_code == 200
    client.post("/search?unit=doc", json={"query": "a", "top_k": 0})  # 400
    client.post("/search?unit=bogus", json={"query": "a"})  # 422
    repeated = client.post("/search?unit=phrase&unit=doc", json={"query": "a", "top_k": 1})  # which one? refused
    assert repeated.status_code == 422
    assert client.get("/search").status_code == 405  # no search: not in the POST /search latency
    r = client.get("/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    m = samples(r.text)
    for unit, requests, questions in [("phrase", 1, 2), ("passage", 1, 2), ("doc", 1, 2)]:
        assert m[("spanseek_request_duration_seconds_count", (("read", "false"), ("status", "200"), ("unit", unit)))] == requests
        assert m[("spanseek_questions_total", (("unit", unit),))] == questions
    assert m[("spanseek_request_duration_seconds_count", (("read", "false"), ("status", "400"), ("unit", "doc")))] == 1
    assert m[("spanseek_request_duration_seconds_count", (("read", "false"), ("status", "422"), ("unit", "invalid")))] == 1
    assert not [labels for (name, labels) in m if name == "spanseek_request_duration_seconds_count"
                and ("status", "405") in labels]
    search = ("route", "/search")
    assert m[("spanseek_errors_total", (search, ("type", "method_not_allowed")))] == 1  # counted as an error still
    assert m[("spanseek_errors_total", (search, ("type", "bad_request")))] == 1
    assert m[("spanseek_errors_total", (search, ("type", "validation_error")))] == 2
    assert m[("spanseek_errors_total", (search, ("type", "overloaded")))] == 0  # pre-created at zero
    assert m[("spanseek_batch_size_count", ())] == 3 and m[("spanseek_batch_size_sum", ())] == 6
    for stage in ("encode", "search", "aggregate"):
        assert m[("spanseek_stage_duration_seconds_count", (("stage", stage),))] == 3
    assert m[("spanseek_stage_duration_seconds_count", (("stage", "queue"),))] == 3
    assert m[("spanseek_queue_depth", ())] == 0 and m[("spanseek_ready", ())] == 1
    manifest = tiny_searcher.index.manifest
    assert m[("spanseek_index_tokens", ())] == manifest.tokens
    assert m[("spanseek_index_passages", ())] == manifest.passages
    assert m[("spanseek_index_documents", ())] == manifest.documents
    assert m[("spanseek_index_vectors", ())] == tiny_searcher.index.faiss.ntotal
    assert m[("spanseek_index_size_bytes", ())] > 0
    info = [labels for (name, labels) in m if name == "spanseek_model_info"]
    assert info and dict(info[0])["fingerprint"] == manifest.model_fingerprint and dict(info[0])["factory"] == manifest.factory
    # /metrics needs no key: the model's directory is cut to its name, as /info shows it to callers without one
    # (before, the absolute --model path was there)
    model = dict(info[0])["model"]
    assert model.startswith(".../") and "/" not in model[4:]


def test_each_app_has_its_own_registry(settings_for, tiny_searcher, serve):
    from spanseek.service.app import create_app

    with serve(create_app(settings_for(), lambda s: tiny_searcher)) as a, serve(create_app(settings_for(), lambda s: tiny_searcher)) as b:
        a.post("/search", json={"query": "x"})
        assert samples(a.get("/metrics").text)[("spanseek_batch_size_count", ())] == 1
        assert samples(b.get("/metrics").text)[("spanseek_batch_size_count", ())] == 0


def test_a_question_asked_again_reuses_its_vectors_and_is_counted(settings_for, serve):
    """The service keeps a question cache (not on during the warm-up, whose timings must encode): a repeated question
    gets the same hits, scores to the bit, and /metrics counts its lookups and the questions held."""
    from spanseek.service.app import create_app

    with serve(create_app(settings_for(question_cache=8))) as c:
        body = {"query": "Who built the castle?", "top_k": 3}
        first = c.post("/search?unit=phrase", json=body).json()
        mixed = c.post("/search?unit=phrase", json={"queries": ["Where is the harbour?", body["query"]], "top_k": 3})
        assert mixed.json()["results"][1]["hits"] == first["results"][0]["hits"]
        m = samples(c.get("/metrics").text)
    assert m[("spanseek_question_cache_lookups_total", (("outcome", "hit"),))] == 1
    assert m[("spanseek_question_cache_lookups_total", (("outcome", "miss"),))] == 2
    assert m[("spanseek_question_cache_questions", ())] == 2


@pytest.mark.parametrize(("histogram", "median"), [
    *[("request_duration", m) for m in (0.02, 0.05, 0.1, 0.2, 0.6, 1.0, 2.0, 4.0)],
    *[("write_visible", m) for m in (0.2, 1.0, 15.0, 60.0, 150.0, 400.0)],
    *[("merge_duration", m) for m in (5.0, 15.0, 60.0, 300.0, 1200.0)]])
def test_latency_buckets_read_p50_p95_p99_within_10_percent(histogram, median):
    """Latencies as measured on a 2-core CPU (searches 20-250 ms, batches up to seconds; a write of 24k tokens
    searchable after 16 s, a 1 MB one after minutes; a merge of the demo index 15 s), with a log-normal spread as the
    demo index showed: the quantiles a dashboard reads from the buckets are within 10% of the true ones (15% for
    writes and merges). The buckets
    before read p99 of 50 ms searches 69% off, of 600 ms batches 53%, and any write past 30 s as 30 s."""
    latencies = median * np.exp(np.random.default_rng(0).normal(0, 0.4, 5000))
    metrics = ServiceMetrics()
    labels = {"request_duration": {"unit": "phrase", "status": "200", "read": "false"}, "merge_duration": {"outcome": "ok"}}.get(
        histogram, {})
    observed = getattr(metrics, histogram)
    observed = observed.labels(**labels) if labels else observed
    for seconds in latencies:
        observed.observe(float(seconds))
    buckets = {float(s.labels["le"]): s.value for family in metrics.registry.collect() for s in family.samples
               if s.name == f"spanseek_{histogram}_seconds_bucket" and s.labels == {**labels, "le": s.labels["le"]}}
    within = 0.10 if histogram == "request_duration" else 0.15  # writes and merges: coarser steps past 30 s
    for q in (0.5, 0.95, 0.99):
        assert histogram_quantile(q, buckets) == pytest.approx(np.quantile(latencies, q), rel=within), q


def _series(client) -> set[tuple[str, tuple]]:
    return {(s.name, tuple(sorted(s.labels.items()))) for family in text_string_to_metric_families(
        client.get("/metrics").text) for s in family.samples}


def test_series_stay_fixed_whatever_ids_paths_filters_and_clients_requests_send(settings_for, tmp_path):
    """No label takes a value a request chooses: a second round of requests with new document ids, file names, unknown
    paths, filters, units, user agents and request ids adds no series, and no label holds any of them."""
    from spanseek.service.app import create_app
    from tests.service.conftest import serving

    key = {"X-API-Key": "key"}
    settings = settings_for(writes=True, api_key="key", live_dir=tmp_path / "live", merge_tokens=0)

    def requests(c, tag: str) -> None:
        for i in range(30):
            name = f"{tag}-{i}"
            headers = {**key, "User-Agent": f"agent/{name}", "X-Request-ID": f"rid-{name}"}
            c.get(f"/documents/doc-{name}", headers=headers)
            c.delete(f"/documents/doc-{name}", headers=headers)
            c.put(f"/files/dir-{name}/file-{name}.pdf", headers=headers, content=b"%PDF-1.4 damaged")
            c.get(f"/no-such-route/{name}", headers=headers)
            c.post(f"/search?unit=unit-{name}", headers=headers, json={"query": "x"})
            c.post(f"/search?extra-{name}=1", headers=headers, json={"query": "x"})
            c.post("/search", headers=headers, json={"query": f"q {name}", "filter": {"doc_ids": [f"doc-{name}"]}})
            c.post("/search", headers=headers, json={"query": "x", f"field-{name}": 1})
            c.post("/documents/delete", headers=headers, json={"filter": {"meta": {f"key-{name}": name}}})
        c.put("/documents", headers=key, json={"id": f"w-{tag}", "title": "T", "paragraphs": ["Gala built it."]})

    with serving(create_app(settings)) as c:
        requests(c, "first")
        first = _series(c)
        requests(c, "second")
        second = _series(c)
    assert second == first
    values = " ".join(v for _, labels in second for _, v in labels)
    assert "first" not in values and "second" not in values


def test_counters_never_go_back_across_a_reload_and_the_gauges_follow_it(settings_for, serve):
    """A hot reload swaps the searcher, not the registry or the question cache: every counter, histogram count and
    sum is at least what it was, the cache's counts go on from where they were, and the load time moves."""
    from spanseek.service.app import create_app

    key = {"X-API-Key": "key"}
    with serve(create_app(settings_for(question_cache=8, api_key="key"))) as c:
        for q in ("Who built the castle?", "Who built the castle?", "Where is the harbour?"):
            assert c.post("/search", headers=key, json={"query": q}).status_code == 200
        before = samples(c.get("/metrics").text)
        assert c.post("/admin/reload", headers=key).status_code == 200
        assert c.post("/search", headers=key, json={"query": "Who built the castle?"}).status_code == 200
        after = samples(c.get("/metrics").text)
    counted = [k for k in before if k[0].endswith(("_total", "_count", "_sum", "_bucket"))]
    assert counted and all(after[k] >= before[k] for k in counted), [k for k in counted if after[k] < before[k]]
    assert after[("spanseek_index_reloads_total", (("outcome", "ok"),))] == 1
    assert after[("spanseek_question_cache_lookups_total", (("outcome", "hit"),))] == 2  # the reload kept the cache
    assert after[("spanseek_index_loaded_timestamp_seconds", ())] > before[("spanseek_index_loaded_timestamp_seconds", ())]
    assert after[("spanseek_ready", ())] == 1


def test_the_question_cache_s_lookups_are_counted_while_it_holds_no_question():
    """Questions looked up before any was stored (the first batch, between its lookup and its store) are counted:
    an empty cache reported 0 lookups, a counter going back to 0."""
    from spanseek.core.encoding import QuestionCache

    metrics = ServiceMetrics()
    metrics.question_cache.cache = cache = QuestionCache(8)
    assert cache.get(["who built the bridge?", "when?"]) == [None, None] and len(cache) == 0
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for family in text_string_to_metric_families(metrics.render().decode()) for s in family.samples}
    assert samples[("spanseek_question_cache_lookups_total", (("outcome", "miss"),))] == 2
    assert samples[("spanseek_question_cache_questions", ())] == 0


def test_the_live_directory_s_free_disk_is_read_at_each_scrape(settings_for, tmp_path, monkeypatch, serve):
    """With writes, spanseek_live_disk_free_bytes gives the free bytes of the live directory's file system as each
    scrape finds them (a disk another process fills shows at once), beside the base's size that a merge writes
    again (SpanseekLiveDiskLow compares the two); without writes there is no sample."""
    import collections
    import shutil

    from spanseek.service.app import create_app

    real, free = shutil.disk_usage, {"bytes": 7_000_000_000}
    usage = collections.namedtuple("usage", "total used free")

    def disk_usage(path):
        if str(path).startswith(str(tmp_path / "live")):
            return usage(10**10, 10**10 - free["bytes"], free["bytes"])
        return real(path)

    monkeypatch.setattr(shutil, "disk_usage", disk_usage)
    settings = settings_for(writes=True, api_key="key", live_dir=tmp_path / "live", merge_tokens=0)
    with serve(create_app(settings)) as c:
        first = samples(c.get("/metrics").text)
        free["bytes"] = 1234
        second = samples(c.get("/metrics").text)
    assert first[("spanseek_live_disk_free_bytes", ())] == 7_000_000_000
    assert second[("spanseek_live_disk_free_bytes", ())] == 1234 < second[("spanseek_index_size_bytes", ())]
    without = samples(ServiceMetrics().render().decode())  # a server without writes: no live directory
    assert ("spanseek_live_disk_free_bytes", ()) not in without and ("spanseek_index_size_bytes", ()) in without


def test_an_error_on_a_route_of_the_app_itself_is_counted_under_its_template(client):
    """The app's own routes (``/openapi.json``, the docs' files under ``/docs-static``) were missing from the routes an
    error is matched against: a 405 of ``POST /openapi.json`` or a 404 of a docs file no route serves was counted as
    ``unmatched``, which says that no route takes the path."""
    assert client.post("/openapi.json").status_code == 405
    assert client.get("/docs-static/no-such-file.js").status_code == 404
    assert client.get("/nowhere").status_code == 404
    assert errors_by_route(client.get("/metrics").text) == {("/openapi.json", "method_not_allowed"): 1,
                                                            ("/docs-static/{path}", "not_found"): 1,
                                                            ("unmatched", "not_found"): 1}
