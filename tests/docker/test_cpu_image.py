"""The CPU image run as docker/Dockerfile.cpu's header says, with `docker run` and no compose: writes go to the
volume mounted at /data/live, and a stop (SIGTERM) answers the searches in flight and keeps what was written.

`make test-docker`.
"""

from __future__ import annotations

import json
import os
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.docker.conftest import docker
from tests.docker.test_compose_replicas import ADMIN, call
from tests.docker.test_compose_stack import QUESTION, free_port

pytestmark = pytest.mark.docker


def search_batch(port: int, answers: list[object]) -> None:
    """POST /search with a batch of questions (seconds of work on this machine); its status, or the error that cut
    it off, appended to ``answers``."""
    body = {"queries": [f"{QUESTION} ({i})" for i in range(32)], "top_k": 3}
    req = urllib.request.Request(f"http://127.0.0.1:{port}/search?unit=passage", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json", **ADMIN})
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            json.load(resp)
            answers.append(resp.status)
    except urllib.error.HTTPError as e:
        answers.append(e.code)  # 429 when the queue's wait budget is spent: an answer all the same
    except OSError as e:
        answers.append(repr(e))


def wait_serving(container: str) -> None:
    """Until ``container`` is healthy; fails at once, with its last lines, when it exits instead."""
    deadline = time.monotonic() + 600
    while (state := docker("inspect", "-f", "{{.State.Status}} {{.State.Health.Status}}", container).stdout.split()) \
            != ["running", "healthy"]:
        if state[0] == "exited" or time.monotonic() > deadline:
            logs = docker("logs", "--tail", "20", container, check=False)
            pytest.fail(f"{container} is {' '.join(state)}:\n{logs.stdout}{logs.stderr}", pytrace=False)
        time.sleep(2)


def test_docker_run_with_writes_keeps_them_in_the_live_volume_through_a_stop(cpu_image: str, demo_index: Path):
    name = f"spanseek-test-image-{os.getpid()}"
    volume = f"{name}-live"
    port = free_port()
    try:
        # a network of its own: the engine make test-docker starts has no default bridge (--bridge=none)
        docker("network", "create", name)
        docker("run", "-d", "--name", name, "--network", name, "--health-interval", "2s",
               "-p", f"127.0.0.1:{port}:8000",
               "-v", f"{demo_index}:/data/index:ro", "-v", f"{volume}:/data/live",
               "-e", "SPANSEEK_WRITES=true", "-e", f"SPANSEEK_API_KEY={ADMIN['X-API-Key']}", cpu_image)
        wait_serving(name)
        doc = {"id": "written-1", "title": "Harbour", "paragraphs": ["In 1450 Gala built the harbour bridge."]}
        assert call(port, "PUT", "/documents", doc)[0] == 200

        answers: list[object] = []
        clients = [threading.Thread(target=search_batch, args=(port, answers)) for _ in range(3)]
        for client in clients:
            client.start()
        time.sleep(0.5)  # in flight when the stop comes
        docker("stop", "--time", "20", name, timeout=60)
        for client in clients:
            client.join()
        assert all(isinstance(a, int) for a in answers) and 200 in answers, answers
        assert docker("inspect", "-f", "{{.State.ExitCode}}", name).stdout.strip() == "0"

        docker("start", name)
        wait_serving(name)
        assert call(port, "GET", "/documents/written-1")[0] == 200
    finally:
        docker("rm", "-f", name, check=False)
        docker("volume", "rm", volume, check=False)
        docker("network", "rm", name, check=False)
