"""Every PromQL expression of the alert rules and the Grafana dashboard names series the service exports: its metric
names, the labels its matchers and ``by (...)`` clauses use, the values its ``=`` matchers ask for, and the labels
its legends print. Checked against the /metrics text of an app in process, with no Prometheus (test_prometheus.py
runs the expressions in a real one where it is installed).
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from spanseek.service.app import create_app

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
DASHBOARD = DEPLOY / "grafana" / "dashboards" / "spanseek.json"
PROMETHEUS = DEPLOY / "prometheus"
# a series selector: a metric name (not a recording rule's, which holds a colon) and its label matchers, if any
SELECTOR = re.compile(r"(?<![\w:])((?:spanseek_|up\b)[\w]*)(?![\w:(])(?:\{([^}]*)\})?")
MATCHER = re.compile(r'(\w+)\s*(=~|!~|!=|=)\s*"([^"]*)"')
GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)")
LEGEND_LABEL = re.compile(r"\{\{\s*(\w+)\s*\}\}")
# what Prometheus adds to every scraped series
TARGET_LABELS = {"job", "instance"}
# the values Prometheus gives up{...}: the scrape job of deploy/prometheus/prometheus.yml
UP_LABELS = {"job": {"spanseek"}, "instance": set()}


def dashboard_targets() -> list[tuple[str, str]]:
    """(expression, legend) of every query of the dashboard."""
    panels = json.loads(DASHBOARD.read_text())["panels"]
    return [(t["expr"], t.get("legendFormat", "")) for p in panels for t in p.get("targets", [])]


def rule_exprs() -> list[str]:
    """The expression of every rule (alerts and recordings) of the Prometheus rule files the stack loads."""
    config = yaml.safe_load((PROMETHEUS / "prometheus.yml").read_text())
    files = [PROMETHEUS / f for f in config["rule_files"]]
    return [r["expr"] for f in files for g in yaml.safe_load(f.read_text())["groups"] for r in g["rules"]]


def exported(text: str) -> dict[str, dict[str, set[str]]]:
    """Each series name of an exposition text -> its label names -> the values seen."""
    series: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = series[sample.name]
            for name, value in sample.labels.items():
                labels[name].add(value)
    return series


def problems(expr: str, series: dict[str, dict[str, set[str]]]) -> list[str]:
    """What in ``expr`` names a series, label or label value that ``series`` lacks."""
    found = []
    named = {"up": UP_LABELS} | {n: {**labels, **{t: set() for t in TARGET_LABELS}} for n, labels in series.items()}
    used = []
    for name, matchers in SELECTOR.findall(expr):
        if name not in named:
            found.append(f"no series {name}")
            continue
        used.append(name)
        for label, op, value in MATCHER.findall(matchers):
            if label not in named[name]:
                found.append(f"{name} has no label {label}")
            elif op == "=" and named[name][label] and value not in named[name][label]:
                found.append(f"{name}{{{label}}} is never {value!r} (seen: {sorted(named[name][label])})")
    for group in GROUPING.findall(expr):
        for label in filter(None, (s.strip() for s in group.split(","))):
            if used and not any(label in named[n] for n in used):
                found.append(f"no series of the expression has a label {label} ({', '.join(sorted(set(used)))})")
    return found


@pytest.fixture(scope="module")
def scraped(tiny_index, tiny_model_dir, tmp_path_factory) -> dict[str, dict[str, set[str]]]:
    """/metrics of an app with live writes on, after a search of each unit, refused ones (one asking for read), a
    write and a delete."""
    from spanseek.service.settings import Settings
    from tests.service.conftest import serving

    key = {"X-API-Key": "key"}
    settings = Settings(index=tiny_index, model=str(tiny_model_dir), device="cpu", precision="fp32", warmup=False,
                        question_cache=8, writes=True, api_key="key", live_dir=tmp_path_factory.mktemp("live"),
                        merge_tokens=0)
    with serving(create_app(settings)) as c:
        for unit in ("phrase", "passage", "doc"):
            assert c.post(f"/search?unit={unit}", headers=key, json={"query": "who built it"}).status_code == 200
        assert c.post("/search", headers=key, json={"query": "x", "top_k": 0}).status_code == 400
        # asking for read (refused: no reader here): the read="true" series the reading latency alert selects
        assert c.post("/search", headers=key, json={"query": "x", "read": True}).status_code == 400
        doc = {"id": "d1", "title": "Harbour", "paragraphs": ["In 1410 Gala built the bridge."]}
        assert c.put("/documents", headers=key, json=doc).status_code == 200
        assert c.delete("/documents/d1", headers=key).status_code == 200
        return exported(c.get("/metrics").text)


def test_the_checker_catches_a_wrong_name_label_value_and_grouping(scraped):
    """The check itself: each kind of mistake an expression can hold is named."""
    assert problems('sum by (unit) (rate(spanseek_questions_total{unit="doc"}[5m]))', scraped) == []
    assert problems("rate(spanseek_request_seconds_count[5m])", scraped) == ["no series spanseek_request_seconds_count"]
    assert problems('rate(spanseek_errors_total{kind="overloaded"}[5m])', scraped) == [
        "spanseek_errors_total has no label kind"]
    assert problems('rate(spanseek_errors_total{type="overload"}[5m])', scraped)[0].startswith(
        "spanseek_errors_total{type} is never 'overload'")
    assert problems("sum by (le, route) (rate(spanseek_request_duration_seconds_bucket[5m]))", scraped) == [
        "no series of the expression has a label route (spanseek_request_duration_seconds_bucket)"]
    assert problems('up{job="spanseek"} == 0', scraped) == []


@pytest.mark.parametrize("expr", rule_exprs())
def test_every_rule_selects_exported_series(expr, scraped):
    assert problems(expr, scraped) == []


@pytest.mark.parametrize(("expr", "legend"), dashboard_targets())
def test_every_dashboard_query_selects_exported_series_and_its_legend_labels_exist(expr, legend, scraped):
    assert problems(expr, scraped) == []
    grouped = {s.strip() for g in GROUPING.findall(expr) for s in g.split(",")}
    assert not [label for label in LEGEND_LABEL.findall(legend) if label not in grouped], (expr, legend)


def test_every_recorded_series_a_rule_reads_is_recorded():
    """A rule that reads a recording rule's series (the latency threshold) needs a loaded file that records it: an
    alert compared with a series nobody records never fires."""
    config = yaml.safe_load((PROMETHEUS / "prometheus.yml").read_text())
    rules = [r for f in config["rule_files"] for g in yaml.safe_load((PROMETHEUS / f).read_text())["groups"]
             for r in g["rules"]]
    recorded = {r["record"] for r in rules if "record" in r}
    read = {name for r in rules for name in re.findall(r"\bspanseek:\w+", r["expr"])}
    assert read and read <= recorded, read - recorded
