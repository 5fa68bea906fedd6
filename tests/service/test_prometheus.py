"""A real Prometheus scrapes the running service under search and write load; every Grafana dashboard expression
returns data, and every series an alert rule selects exists.

Needs the Debian `prometheus` package (``make system-deps``); skipped when the binary is absent. Everything
listens on 127.0.0.1 only. Bounded: about 20-40 s.
"""

from __future__ import annotations

import json
import math
import random
import re
import shutil
import socket
import subprocess
import threading
import time
from pathlib import Path

import httpx
import pytest
import yaml

from spanseek.service.app import create_app

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
RATE_WINDOW = "10s"  # stands in for Grafana's $__rate_interval at a 1 s scrape interval
KEY = {"X-API-Key": "key"}
# a series selector of a rule's expression: a metric name and its label matchers, if any
SELECTOR = re.compile(r"\b((?:spanseek_|up\b)\w*(?:\{[^}]*\})?)")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def load(url: str, stop: threading.Event, seed: int) -> None:
    """Closed-loop client: searches of every unit, a fifth of them reading (and a few refused requests) until
    ``stop``."""
    rng = random.Random(seed)
    with httpx.Client(base_url=url, timeout=30, headers=KEY) as c:
        while not stop.is_set():
            unit = rng.choice(["phrase", "passage", "doc"])
            top_k = rng.choice([1, 3, 10, 0 if rng.random() < 0.05 else 5])  # some 400s feed the error panel
            c.post(f"/search?unit={unit}", json={"queries": [f"who built castle {rng.randint(1, 99)}"], "top_k": top_k,
                                                 "read": rng.random() < 0.2})
            time.sleep(0.005)


def write(url: str, stop: threading.Event) -> None:
    """Writes a document, and now and then deletes one, until ``stop``: data for the write panels."""
    with httpx.Client(base_url=url, timeout=30, headers=KEY) as c:
        for i in range(10**6):
            if stop.is_set():
                return
            doc = {"id": f"w{i % 5}", "title": "Harbour", "paragraphs": [f"In 14{i % 90:02d} Gala built bridge {i}."]}
            c.put("/documents", json=doc)
            if i % 3 == 2:
                c.delete(f"/documents/w{(i - 1) % 5}")
            time.sleep(0.2)


def query(prom: str, expr: str) -> list[dict]:
    r = httpx.get(f"{prom}/api/v1/query", params={"query": expr}, timeout=10)
    assert r.status_code == 200, (expr, r.status_code, r.text)  # 503 "Service Unavailable" while starting
    body = r.json()
    assert body["status"] == "success", (expr, body)
    return body["data"]["result"]


def idle_histogram(prom: str, expr: str) -> bool:
    """Whether ``expr`` is a quantile of a histogram that exists but saw no event in the window (a merge, say): a
    panel with nothing to draw yet, not a wrong selector."""
    histogram = re.search(r"\b(spanseek_\w+)_bucket\b", expr)
    if not histogram or "histogram_quantile" not in expr:
        return False
    counts = query(prom, f"{histogram[1]}_count")
    events = query(prom, f"sum(increase({histogram[1]}_count[{RATE_WINDOW}]))")
    return bool(counts) and all(float(e["value"][1]) == 0 for e in events)


def test_every_dashboard_expression_returns_data(settings_for, live, tmp_path, tiny_reader):
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.skip("prometheus not installed (make system-deps installs it)")
    dashboard = json.loads((DEPLOY / "grafana" / "dashboards" / "spanseek.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    rules = [r["expr"] for g in yaml.safe_load((DEPLOY / "prometheus" / "alerts.yml").read_text())["groups"]
             for r in g["rules"]]
    app = create_app(settings_for(max_batch_size=8, max_wait_ms=2, writes=True, api_key="key",
                                  live_dir=tmp_path / "live", merge_tokens=0, write_wait_ms=20,
                                  reader=str(tiny_reader), reader_precision="fp32"))
    with live(app) as url:
        target = url.removeprefix("http://")
        for rules_file in ("alerts.yml", "thresholds.yml"):
            shutil.copy(DEPLOY / "prometheus" / rules_file, tmp_path / rules_file)
        (tmp_path / "prometheus.yml").write_text(
            "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
            "rule_files: [alerts.yml, thresholds.yml]\n"
            f"scrape_configs: [{{job_name: spanseek, static_configs: [{{targets: ['{target}']}}]}}]\n"
        )
        port = free_port()
        prom = f"http://127.0.0.1:{port}"
        stop = threading.Event()
        clients = [threading.Thread(target=load, args=(url, stop, i), daemon=True) for i in range(3)]
        clients.append(threading.Thread(target=write, args=(url, stop), daemon=True))
        proc = subprocess.Popen(
            [binary, f"--config.file={tmp_path / 'prometheus.yml'}", f"--storage.tsdb.path={tmp_path / 'data'}",
             f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        )
        try:
            for t in clients:
                t.start()
            deadline = time.monotonic() + 40
            while True:  # wait for enough scrapes for rate() over RATE_WINDOW
                assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
                assert time.monotonic() < deadline, "prometheus did not collect enough samples"
                try:
                    n = query(prom, "count_over_time(up{job='spanseek'}[1m])")
                    if n and float(n[0]["value"][1]) >= 6 and float(query(prom, "up")[0]["value"][1]) == 1:
                        break
                except (httpx.HTTPError, IndexError, AssertionError):
                    pass
                time.sleep(0.5)
            empty = []
            for expr in exprs:
                result = query(prom, expr.replace("$__rate_interval", RATE_WINDOW))
                values = [float(r["value"][1]) for r in result]
                if not any(math.isfinite(v) for v in values) and not idle_histogram(prom, expr):
                    empty.append((expr, values))
            assert not empty, f"dashboard expressions without data: {empty}"
            selectors = {m for expr in rules for m in SELECTOR.findall(expr)}
            assert {"spanseek_ready", 'up{job="spanseek"}'} <= selectors
            # a regex matcher (status=~"5..") selects what a healthy run may never produce: its metric must exist
            # here, and test_monitoring_selectors.py checks its labels against /metrics
            missing = [sel for sel in selectors if not query(prom, sel.split("{")[0] if "=~" in sel else sel)]
            assert not missing, f"alert rules select series that do not exist: {missing}"
            rules = httpx.get(f"{prom}/api/v1/rules", timeout=10).json()["data"]["groups"]
            names = {r["name"] for g in rules for r in g["rules"]}
            assert "SpanseekHighP99Latency" in names
            assert query(prom, "spanseek:search_p99_threshold_seconds")  # the latency alert has its threshold
        finally:
            stop.set()
            for t in clients:
                t.join(10)
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
