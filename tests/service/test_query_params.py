"""Query parameters a route does not take: every route answers 422 naming the parameter (a mistyped ``metaa=`` of a
file write was accepted and its metadata dropped; ``/info?bogus=1`` answered 200), as POST /search did alone; a
single-valued one given twice is a 422 too. What a route takes is what its signature declares, as in /openapi.json.

    .venv/bin/python -m pytest -q tests/service/test_query_params.py
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from spanseek.service import files, writes
from spanseek.service import routes as routes_module
from spanseek.service.app import create_app
from tests.service.conftest import serving
from tests.service.test_writes import KEY

ROOT = Path(__file__).resolve().parents[2]


def _routes(app) -> list[tuple[str, str, str]]:
    """(method, a URL of the route, its path) for each route of the app's API (not FastAPI's own pages: /docs,
    /redoc, /openapi.json, which its schema leaves out)."""
    return [(method.upper(), re.sub(r"\{[^}]*\}", "a.txt", path), path)
            for path, methods in app.openapi()["paths"].items() for method in sorted(methods)]


def test_every_route_refuses_a_query_parameter_it_does_not_take(write_settings):
    app = create_app(write_settings())
    with serving(app) as client:
        routes = _routes(app)
        assert {"/health", "/metrics", "/info", "/search", "/files/a.txt", "/documents/a.txt"} <= {u for _, u, _ in routes}
        for method, url, path in routes:
            r = client.request(method, f"{url}?bogus=1", headers=KEY)
            assert r.status_code == 422, (method, url, r.status_code, r.text)
            body = r.json()
            assert body["error"] == "validation_error" and body["details"][0]["loc"] == ["query", "bogus"], body
            assert f"query.bogus: not a query parameter of {path} (it takes " in body["message"], body
        # without the key, the key's refusal comes first (nothing of the route is told)
        assert client.get("/info?bogus=1").status_code == 401
        # FastAPI's own pages are left as they are
        assert client.get("/openapi.json?bogus=1").status_code == 200 and client.get("/docs?x=1").status_code == 200
        assert client.get("/redoc?x=1").status_code == 200


def test_a_mistyped_parameter_of_a_file_write_is_refused_and_nothing_written(write_settings):
    with serving(create_app(write_settings())) as client:
        r = client.put("/files/a.txt?metaa=k=v", headers=KEY, content=b"Some text about the harbour.")
        assert r.status_code == 422, r.text
        assert r.json()["message"] == ("the request does not match the API schema: query.metaa: not a query parameter "
                                       "of /files/{name}: did you mean meta? (it takes only id, meta, max_tokens, "
                                       "overlap, min_tokens)"), r.text
        r = client.put("/files/a.txt?max_tokens=100&max_tokens=60", headers=KEY, content=b"Some text.")
        assert r.status_code == 422 and "query.max_tokens: given more than once" in r.json()["message"], r.text
        r = client.put("/documents?id=x", headers=KEY, json={"id": "x", "paragraphs": ["Some text."]})
        assert r.status_code == 422 and "(it takes none; send the request in the JSON body)" in r.text, r.text
        assert client.get("/info", headers=KEY).json()["service"]["writes"]["segment_documents"] == 0
        # a repeatable one may be repeated, and the parameters a route takes are taken
        r = client.put("/files/a.txt?meta=lang=en&meta=kind=note&max_tokens=60", headers=KEY, content=b"Some text.")
        assert r.status_code == 200, r.text
        assert client.get("/documents/a.txt?meta_only=true", headers=KEY).json()["meta"] == {
            "source": "a.txt", "lang": "en", "kind": "note"}


def test_a_passage_size_out_of_range_is_a_422_naming_it(write_settings):
    """max_tokens=10**23 was taken (every paragraph one passage, however long) and an overlap out of range was a 400
    ``bad_request``: sizes are parameters of the request, refused as the others are."""
    with serving(create_app(write_settings())) as client:
        for query, field in ((f"max_tokens={10**23}", "max_tokens"), ("max_tokens=513", "max_tokens"),
                             ("max_tokens=100&overlap=51", "overlap"), ("min_tokens=-1", "min_tokens")):
            r = client.put(f"/files/a.txt?{query}", headers=KEY, content=b"Some text about the harbour.")
            assert r.status_code == 422 and r.json()["details"][0]["loc"] == ["query", field], (query, r.text)
            assert f"query.{field}: {field} must be between " in r.json()["message"], r.text
        assert client.get("/info", headers=KEY).json()["service"]["writes"]["segment_documents"] == 0
        assert client.put("/files/a.txt?max_tokens=512", headers=KEY, content=b"Some text.").status_code == 200
        # the smallest budget alone (min_tokens' default follows it: a 422 at query.min_tokens, not given, before)
        r = client.put("/files/b.txt?max_tokens=8", headers=KEY, content=b"Some text.")
        assert r.status_code == 200, r.text


def test_the_parameters_taken_are_those_the_api_documents(write_settings):
    """``query_parameters`` reads each endpoint's signature; FastAPI's schema of the same routes is the oracle."""
    from spanseek.service.routes import query_parameters

    schema = create_app(write_settings()).openapi()
    routes = [r for module in (routes_module, writes, files) for r in module.router.routes]
    assert len(routes) == sum(len(methods) for methods in schema["paths"].values())  # every route of the API
    for route in routes:
        (method,) = route.methods
        documented = {p["name"]: p.get("schema", {}) for p in schema["paths"][route.path_format][method.lower()]
                      .get("parameters", []) if p["in"] == "query"}
        taken, _ = query_parameters(route.endpoint)
        assert set(taken) == set(documented), (method, route.path_format)
        for name, repeatable in taken.items():
            kinds = documented[name].get("anyOf", [documented[name]])
            assert repeatable == any(k.get("type") == "array" for k in kinds), (method, route.path_format, name)


def test_metrics_scrapes_as_before(client):
    """Prometheus sends no query parameters to /metrics (the deployment's scrape configuration sets none)."""
    r = client.get("/metrics")
    assert r.status_code == 200 and "spanseek_" in r.text
    config = yaml.safe_load((ROOT / "deploy" / "prometheus" / "prometheus.yml").read_text())
    assert config["scrape_configs"] and not any("params" in job for job in config["scrape_configs"])


def test_metrics_takes_the_name_filter_of_prometheus_clients_exporter(client):
    """``/metrics?name[]=X`` gives only the series X, as prometheus_client's own exporter does; another parameter is
    still refused."""
    client.post("/search?unit=phrase", json={"query": "who built the bridge?"})
    r = client.get("/metrics", params=[("name[]", "spanseek_questions_total"), ("name[]", "spanseek_queue_depth")])
    assert r.status_code == 200
    series = {line.split("{")[0].split(" ")[0] for line in r.text.splitlines() if line and not line.startswith("#")}
    assert series == {"spanseek_questions_total", "spanseek_queue_depth"}
    assert client.get("/metrics?names=spanseek_queue_depth").status_code == 422


def test_the_name_filter_gives_each_series_alone_the_question_cache_included():
    """``name[]=X`` for each sample name of the exposition gives that one alone (oracle: the full exposition). The
    question cache's series, read by a collector of its own at each scrape, came back empty: the registry did not
    know their names."""
    from prometheus_client.parser import text_string_to_metric_families

    from spanseek.service.metrics import ServiceMetrics

    def names(text: bytes) -> set[str]:
        return {s.name for family in text_string_to_metric_families(text.decode()) for s in family.samples}

    metrics = ServiceMetrics()
    every = names(metrics.render())
    assert {"spanseek_question_cache_questions", "spanseek_question_cache_lookups_total"} <= every
    assert {name: names(metrics.render([name])) for name in sorted(every)} == {name: {name} for name in sorted(every)}
