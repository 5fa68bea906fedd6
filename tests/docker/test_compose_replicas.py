"""One writer and read replicas in the real compose stack: deploy/docker-compose.yml's `spanseek` with writes on and
two `spanseek-replica` containers (profile `replicas`), with Prometheus, on the CPU image.

`make test-docker`. The replicas follow the writer's merges through the live volume's pointer, on ports of their own
from a range; a second writer container stands by instead of being refused and restarted over and over, and takes
the writes over when the first stops.
"""

from __future__ import annotations

import json
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.docker.conftest import DEPLOY, HERE, docker, run, say
from tests.docker.test_compose_stack import (
    Stack,
    assert_answers,
    compose_env,
    free_port,
    post_search,
    project_objects,
    prometheus_query,
    wait_healthy,
)

pytestmark = pytest.mark.docker

PROJECT = "spanseek-test-replicas"
ADMIN = {"X-API-Key": "admin-key"}
UP = 'up{job="spanseek"}'
DOC = {"id": "written-1", "title": "Harbour", "paragraphs": ["In 1450 Gala built the harbour bridge of the island."]}


def free_range(n: int) -> int:
    """The first of ``n`` consecutive TCP ports free on 127.0.0.1 right now."""
    for _ in range(50):
        first = free_port()
        if first + n > 65535:
            continue
        try:
            for port in range(first, first + n):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", port))
            return first
        except OSError:
            continue
    pytest.fail(f"no {n} consecutive free ports", pytrace=False)


@dataclass
class Replicas:
    """The running writer, its replicas and Prometheus."""

    compose: list[str]
    env: dict[str, str]
    writer: str
    replicas: list[str]
    prometheus_port: int

    def containers(self, service: str) -> list[str]:
        return run([*self.compose, "ps", "-q", service], env=self.env).stdout.split()

    def port(self, container: str) -> int:
        bindings = json.loads(docker("inspect", "-f", "{{json .NetworkSettings.Ports}}", container).stdout)["8000/tcp"]
        assert [b["HostIp"] for b in bindings] == ["127.0.0.1"], bindings
        return int(bindings[0]["HostPort"])


def call(port: int, method: str, path: str, body: dict | None = None) -> tuple[int, dict]:
    """(status, JSON body) of ``method path`` on 127.0.0.1:port, with the admin key."""
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", method=method, headers=ADMIN | {
        "Content-Type": "application/json"}, data=None if body is None else json.dumps(body).encode())
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            return resp.status, json.load(resp)
    except urllib.error.HTTPError as e:
        return e.code, json.load(e)


@pytest.fixture(scope="module")
def stack(cpu_image: str, prometheus_image: str, demo_index: Path) -> Iterator[Replicas]:
    """The writer (writes on, published on a two-port range) and two replicas up; torn down, volumes too, after."""
    writer_first, replica_first = free_range(2), free_range(4)
    env = compose_env(demo_index, 0, free_port())
    env.update(SPANSEEK_PUBLISH=f"127.0.0.1:{writer_first}-{writer_first + 1}",
               SPANSEEK_REPLICA_PUBLISH=f"127.0.0.1:{replica_first}-{replica_first + 3}",
               SPANSEEK_WRITES="true", SPANSEEK_ADMIN_API_KEY=ADMIN["X-API-Key"], SPANSEEK_MERGE_TOKENS="0",
               SPANSEEK_REPLICA_POLL_S="2")
    compose = ["docker-compose", "--profile", "replicas", "-p", PROJECT, "-f", str(DEPLOY / "docker-compose.yml"),
               "-f", str(HERE / "docker-compose.devmachine.yml")]
    assert not project_objects("container", PROJECT), f"containers of project {PROJECT} are left from an earlier run"
    try:
        t0 = time.monotonic()
        # compose starts the replicas once the writer is healthy (it writes the pointer they serve as it loads)
        run([*compose, "up", "-d", "--no-build", "--scale", "spanseek-replica=2", "spanseek", "spanseek-replica",
             "prometheus"], env=env, timeout=900)
        stack = Replicas(compose, env, "", [], int(env["PROMETHEUS_PUBLISH"].rsplit(":", 1)[1]))
        (stack.writer,), stack.replicas = stack.containers("spanseek"), stack.containers("spanseek-replica")
        assert len(stack.replicas) == 2
        for container in stack.replicas:
            wait_healthy(Stack(compose, env, container, 0, 0))
        say(f"writer and 2 replicas healthy after {time.monotonic() - t0:.0f} s")
        yield stack
    finally:
        run([*compose, "down", "--volumes", "--remove-orphans", "--timeout", "20"], env=env, timeout=300)
    for kind in ("container", "network", "volume"):
        assert not project_objects(kind, PROJECT), f"{kind}s of project {PROJECT} are left after `down`"


def test_replicas_answer_on_ports_of_their_own_and_read_only(stack):
    ports = [stack.port(c) for c in stack.replicas]
    first = int(stack.env["SPANSEEK_REPLICA_PUBLISH"].split(":")[1].split("-")[0])
    assert len(set(ports)) == 2 and all(first <= p < first + 4 for p in ports), ports
    for port in ports:
        assert_answers(post_search(port, "phrase"), "phrase")
        assert call(port, "PUT", "/documents", DOC)[0] == 403  # no writes there
    for container in stack.replicas:
        mounts = {m["Destination"]: m["RW"] for m in json.loads(
            docker("inspect", "-f", "{{json .Mounts}}", container).stdout)}
        assert mounts["/data/live"] is False and mounts["/data/index"] is False


def test_prometheus_scrapes_the_writer_and_every_replica(stack):
    deadline = time.monotonic() + 120
    while sorted(float(u["value"][1]) for u in prometheus_query(stack.prometheus_port, UP)) != [1] * 3:
        assert time.monotonic() < deadline, prometheus_query(stack.prometheus_port, UP)
        time.sleep(2)
    ready = prometheus_query(stack.prometheus_port, 'spanseek_ready{job="spanseek"}')
    assert [float(r["value"][1]) for r in ready] == [1.0] * 3, ready


def test_replicas_serve_what_the_writer_merged(stack):
    writer = stack.port(stack.writer)
    assert call(writer, "PUT", "/documents", DOC)[0] == 200
    replicas = [stack.port(c) for c in stack.replicas]
    assert [call(p, "GET", f"/documents/{DOC['id']}")[0] for p in replicas] == [404, 404]  # not merged yet
    assert call(writer, "POST", "/admin/compact")[0] in (200, 202)
    deadline = time.monotonic() + 180
    while (codes := [call(p, "GET", f"/documents/{DOC['id']}")[0] for p in replicas]) != [200, 200]:
        assert time.monotonic() < deadline, f"replicas did not follow the merge: {codes}"
        time.sleep(2)
    say(f"both replicas serve the merged document {180 - (deadline - time.monotonic()):.0f} s after the compaction")


READY_INSIDE = """
import urllib.request, urllib.error
try:
    print(urllib.request.urlopen("http://127.0.0.1:8000/ready", timeout=10).read().decode())
except urllib.error.HTTPError as e:
    print(e.code, e.read().decode())
"""


def test_a_second_writer_stands_by_and_takes_over_when_the_first_stops(stack):
    """Scaled by mistake, a second writer container was refused the writer lock, exited 2 and was restarted by the
    restart policy, forever. Now it stays up unready, restarted never, and takes the writes over."""
    run([*stack.compose, "up", "-d", "--no-build", "--no-deps", "--scale", "spanseek=2", "spanseek"], env=stack.env,
        timeout=300)
    (second,) = set(stack.containers("spanseek")) - {stack.writer}
    deadline = time.monotonic() + 300
    while "standing by" not in (said := docker("exec", second, "python", "-c", READY_INSIDE, check=False).stdout):
        assert time.monotonic() < deadline, said
        time.sleep(3)
    assert said.startswith("503") and "another server with writes" in said, said
    time.sleep(20)
    state = docker("inspect", "-f", "{{.RestartCount}} {{.State.Status}}", second).stdout.split()
    assert state == ["0", "running"], state
    assert call(stack.port(stack.writer), "PUT", "/documents", {**DOC, "id": "before-the-stop"})[0] == 200
    docker("stop", "--time", "20", stack.writer, timeout=60)
    wait_healthy(Stack(stack.compose, stack.env, second, 0, 0))
    port = stack.port(second)
    assert call(port, "GET", "/documents/before-the-stop")[0] == 200  # from the write log: acknowledged, kept
    assert call(port, "PUT", "/documents", {**DOC, "id": "written-2"})[0] == 200
