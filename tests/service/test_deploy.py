"""Deployment files: compose validates, Prometheus config and rules check, the dashboard is sane, images are safe."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
DASHBOARD = DEPLOY / "grafana" / "dashboards" / "spanseek.json"


def needs(binary: str) -> str:
    path = shutil.which(binary)
    if path is None:
        pytest.skip(f"{binary} not installed (make system-deps installs it)")
    return path


def dashboard_exprs() -> list[str]:
    """Every PromQL expression of the Grafana dashboard."""
    panels = json.loads(DASHBOARD.read_text())["panels"]
    return [t["expr"] for p in panels for t in p.get("targets", [])]


def test_compose_file_validates():
    compose = needs("docker-compose")
    out = subprocess.run([compose, "-f", str(DEPLOY / "docker-compose.yml"), "config"], capture_output=True, text=True,
                         timeout=60, cwd=DEPLOY)
    assert out.returncode == 0, out.stderr
    assert "nvidia" in out.stdout and "prometheus" in out.stdout and "grafana" in out.stdout


def test_prometheus_config_and_rules_check():
    promtool = needs("promtool")
    out = subprocess.run([promtool, "check", "config", str(DEPLOY / "prometheus" / "prometheus.yml")],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    rules = (DEPLOY / "prometheus" / "alerts.yml").read_text()
    assert "spanseek_request_duration_seconds_bucket" in rules and "histogram_quantile(0.99" in rules


def test_dashboard_covers_the_required_panels():
    exprs = "\n".join(dashboard_exprs())
    for needle in ("rate(spanseek_request_duration_seconds_count", "histogram_quantile(0.5,", "histogram_quantile(0.95,",
                   "histogram_quantile(0.99,", "spanseek_stage_duration_seconds", "spanseek_batch_size",
                   "spanseek_queue_depth", "spanseek_errors_total"):
        assert needle in exprs, needle
    assert all(re.search(r"spanseek_\w+", e) for e in dashboard_exprs())
    provisioning = (DEPLOY / "grafana" / "provisioning" / "datasources" / "prometheus.yml").read_text()
    assert "uid: prometheus" in provisioning


@pytest.mark.parametrize("name", ["Dockerfile.cpu", "Dockerfile.cuda"])
def test_images_are_multi_stage_non_root_with_a_readiness_healthcheck(name):
    text = (ROOT / "docker" / name).read_text()
    assert len(re.findall(r"^FROM ", text, re.M)) >= 2 and "COPY --from=build" in text
    assert re.search(r"^USER spanseek$", text, re.M)
    assert "HEALTHCHECK" in text and "/ready" in text
    extra = "cpu" if name.endswith("cpu") else "gpu"
    assert f'".[{extra}]"' in text
    if extra == "cpu":
        assert "whl/cpu" in text and "TORCH_VERSION=2.13.0" in text
