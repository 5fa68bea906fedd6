"""The real compose stack on this machine: deploy/docker-compose.yml (service + Prometheus) with the CPU image.

`make test-docker`. The override docker-compose.devmachine.yml only shortens the health-check interval; the CPU
image and the stand-in Prometheus image are built beforehand (conftest.py). Grafana's image cannot be fetched here,
so Grafana is not started (its compose service still has to interpolate: it gets a throwaway password).
"""

from __future__ import annotations

import json
import os
import socket
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.docker.conftest import DEPLOY, HERE, docker, image_size, run, say

pytestmark = pytest.mark.docker

PROJECT = "spanseek-test"
UNITS = ("phrase", "passage", "doc")
QUESTION = "What stadium in Paris was built for the 1998 FIFA World Cup?"
DASHBOARD = DEPLOY / "grafana" / "dashboards" / "spanseek.json"
# what Grafana puts for $__rate_interval with a 5 s scrape interval is at least 20 s; 1m spans several scrapes
RATE_INTERVAL = "1m"
# series a server exports only with writes on (SPANSEEK_WRITES), which this stack leaves off: their panels show
# "no data" here (tests/service/test_prometheus.py runs every query against a server with writes)
WRITES_ONLY = ("spanseek_live_disk_free_bytes",)


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now (the machine is shared: fixed ports may be taken)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Stack:
    """The running stack: how to call compose, the service container and the published ports."""

    compose: list[str]
    env: dict[str, str]
    container: str
    service_port: int
    prometheus_port: int

    def inspect(self, fmt: str) -> str:
        """``docker inspect -f fmt`` of the service container."""
        return docker("inspect", "-f", fmt, self.container).stdout.strip()

    def exec(self, *cmd: str, check: bool = True) -> str:
        """Run ``cmd`` inside the service container; its output."""
        out = docker("exec", self.container, *cmd, check=check)
        return out.stdout + out.stderr


def compose_env(index: Path, service_port: int, prometheus_port: int) -> dict[str, str]:
    """The environment compose interpolates: this host's shell minus any spanseek/publish settings, plus ours."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("SPANSEEK_", "COMPOSE_")) and not k.endswith("_PUBLISH")}
    env.update(
        SPANSEEK_INDEX_DIR=str(index),
        SPANSEEK_MODEL_DIR=str(index.parent / "models"),  # not the checkout's work/models: docker makes it as root
        SPANSEEK_PUBLISH=f"127.0.0.1:{service_port}",
        PROMETHEUS_PUBLISH=f"127.0.0.1:{prometheus_port}",
        SPANSEEK_API_KEY="",  # empty = no key
        GRAFANA_ADMIN_PASSWORD="unused-grafana-is-not-started",
    )
    return env


def wait_healthy(stack: Stack, timeout: float = 600, container: str | None = None) -> None:
    """Until the service container's (or ``container``'s) health check passes (model and index loaded, warm-up
    done)."""
    container = container or stack.container
    deadline = time.monotonic() + timeout
    while (status := docker("inspect", "-f", "{{.State.Health.Status}}", container).stdout.strip()) != "healthy":
        if time.monotonic() > deadline:
            logs = docker("logs", "--tail", "40", container, check=False)
            pytest.fail(f"service not healthy after {timeout:.0f} s (status {status}):\n{logs.stdout}{logs.stderr}",
                        pytrace=False)
        time.sleep(2)


def project_objects(kind: str, project: str = PROJECT) -> list[str]:
    """Containers, networks or volumes that compose labelled as ``project``'s."""
    out = docker(kind, "ls", "-q", *(["-a"] if kind == "container" else []),
                 "--filter", f"label=com.docker.compose.project={project}")
    return out.stdout.split()


@pytest.fixture(scope="module")
def stack(cpu_image: str, prometheus_image: str, demo_index: Path) -> Iterator[Stack]:
    """Service and Prometheus up from deploy/docker-compose.yml; torn down (volumes too) afterwards."""
    say(f"image sizes: {cpu_image} {image_size(cpu_image) / 1e9:.2f} GB, "
        f"{prometheus_image} {image_size(prometheus_image) / 1e9:.2f} GB")
    service_port, prometheus_port = free_port(), free_port()
    env = compose_env(demo_index, service_port, prometheus_port)
    compose = ["docker-compose", "-p", PROJECT, "-f", str(DEPLOY / "docker-compose.yml"),
               "-f", str(HERE / "docker-compose.devmachine.yml")]
    assert not project_objects("container"), f"containers of project {PROJECT} are left from an earlier run"
    try:
        run([*compose, "up", "-d", "--no-build", "spanseek", "prometheus"], env=env, timeout=300)
        container = run([*compose, "ps", "-q", "spanseek"], env=env).stdout.strip()
        stack = Stack(compose, env, container, service_port, prometheus_port)
        say("waiting for the service to become healthy ...")
        t0 = time.monotonic()
        wait_healthy(stack)
        say(f"healthy after {time.monotonic() - t0:.0f} s")
        yield stack
    finally:
        run([*compose, "down", "--volumes", "--remove-orphans", "--timeout", "20"], env=env, timeout=300)
    for kind in ("container", "network", "volume"):
        assert not project_objects(kind), f"{kind}s of project {PROJECT} are left after `down`"


def post_search(port: int, unit: str) -> dict:
    """POST /search?unit=... on 127.0.0.1:port from this host."""
    req = urllib.request.Request(f"http://127.0.0.1:{port}/search?unit={unit}",
                                 data=json.dumps({"query": QUESTION, "top_k": 3}).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as resp:
        return json.load(resp)


def assert_answers(body: dict, unit: str) -> None:
    """A well-formed answer of ``unit`` with hits for the demo question."""
    assert body["unit"] == unit
    hits = body["results"][0]["hits"]
    assert 1 <= len(hits) <= 3
    assert all(h["passage"][h["start"]:h["end"]] == h["text"] for h in hits)


def test_service_is_healthy_and_not_root(stack):
    assert stack.inspect("{{.State.Health.Status}}") == "healthy"
    assert stack.exec("id", "-u").strip() == "10001"
    # ports are published on loopback only, as the compose file's default says
    bindings = json.loads(stack.inspect("{{json .NetworkSettings.Ports}}"))["8000/tcp"]
    assert [b["HostIp"] for b in bindings] == ["127.0.0.1"]


@pytest.mark.parametrize("unit", UNITS)
def test_search_answers_from_outside(stack, unit):
    assert_answers(post_search(stack.service_port, unit), unit)


SEARCH_INSIDE = """
import json, sys, urllib.request
req = urllib.request.Request("http://127.0.0.1:8000/search?unit=" + sys.argv[1], headers={"Content-Type": "application/json"},
                             data=json.dumps({"query": sys.argv[2], "top_k": 3}).encode())
print(urllib.request.urlopen(req, timeout=60).read().decode())
"""


@pytest.mark.parametrize("unit", UNITS)
def test_search_answers_from_inside(stack, unit):
    assert_answers(json.loads(stack.exec("python", "-c", SEARCH_INSIDE, unit, QUESTION)), unit)


def prometheus_query(port: int, expr: str) -> list[dict]:
    """The result vector of an instant PromQL query."""
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    with urllib.request.urlopen(url, timeout=30) as resp:
        body = json.load(resp)
    assert body["status"] == "success", body
    return body["data"]["result"]


def dashboard_exprs() -> list[str]:
    """Every PromQL expression of the Grafana dashboard, with Grafana's $__rate_interval filled in."""
    panels = json.loads(DASHBOARD.read_text())["panels"]
    return [t["expr"].replace("$__rate_interval", RATE_INTERVAL) for p in panels for t in p.get("targets", [])]


def test_prometheus_scrapes_the_service_and_the_dashboard_has_data(stack):
    # traffic for the rate panels over several scrapes, and one rejected request for the error panel
    bad = urllib.request.Request(f"http://127.0.0.1:{stack.service_port}/search", data=b'{"query": "x", "top_k": 0}',
                                 headers={"Content-Type": "application/json"})
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(bad, timeout=30)
    assert err.value.code == 400
    pending = [e for e in dashboard_exprs() if not any(name in e for name in WRITES_ONLY)]
    assert len(pending) >= 10
    deadline = time.monotonic() + 120
    while True:
        for unit in UNITS:
            post_search(stack.service_port, unit)
        up = prometheus_query(stack.prometheus_port, 'up{job="spanseek"}')
        if up and up[0]["value"][1] == "1":
            pending = [e for e in pending if not prometheus_query(stack.prometheus_port, e)]
            if not pending:
                break
        if time.monotonic() > deadline:
            pytest.fail(f"up{{job=\"spanseek\"}} = {up}; dashboard queries without data: {pending}", pytrace=False)
        time.sleep(2)
    # the compose file mounts the CPU host's alert thresholds, which the latency alert compares with
    threshold = prometheus_query(stack.prometheus_port, "spanseek:search_p99_threshold_seconds")
    assert [float(t["value"][1]) for t in threshold] == [1.0], threshold


def test_index_volume_is_read_only(stack):
    mounts = {m["Destination"]: m for m in json.loads(stack.inspect("{{json .Mounts}}"))}
    assert mounts["/data/index"]["RW"] is False
    out = stack.exec("touch", "/data/index/written-by-the-service", check=False)
    assert "Read-only file system" in out, out


def test_killed_service_is_restarted(stack):
    restarts = int(stack.inspect("{{.RestartCount}}"))
    # PID 1 is the init (compose's init: true); its child is `spanseek serve`. SIGKILL, as a crash would be.
    stack.exec("sh", "-c", "kill -KILL $(cat /proc/1/task/1/children)")
    deadline = time.monotonic() + 60
    while int(stack.inspect("{{.RestartCount}}")) == restarts:
        assert time.monotonic() < deadline, "the restart policy did not restart the killed service"
        time.sleep(1)
    say("service restarted by the restart policy; waiting for it to become healthy again ...")
    wait_healthy(stack)
    assert_answers(post_search(stack.service_port, "phrase"), "phrase")
