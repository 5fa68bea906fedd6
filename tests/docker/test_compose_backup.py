"""Backing up and restoring the live index in the real compose stack, by the commands docs/deploy.md gives.

`make test-docker`. The writer (writes on) and a read replica run from a copy of deploy/ (the page's commands run
there and write their copies beside the compose file); the blocks of "Backing up and restoring the live index" run
as written, in bash, `docker compose` being this machine's docker-compose (v1, which the page says is enough) with
the test's project and override file. The restored writer must serve a write acknowledged before the backup and not
one acknowledged after it, and the replica must be back, following the restored writer's merges.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.docker.conftest import DEPLOY, HERE, ROOT, docker, run, say
from tests.docker.test_compose_replicas import ADMIN, call, free_range
from tests.docker.test_compose_stack import Stack, compose_env, free_port, project_objects, wait_healthy

pytestmark = pytest.mark.docker

PROJECT = "spanseek-test-backup"
SECTION = "### Backing up and restoring the live index"
FENCE = re.compile(r"^```bash\n(.*?)^```", re.MULTILINE | re.DOTALL)
EXAMPLE_NAME = "20261207-1530"  # the backup's name in the page's commands after the first


def documented_blocks() -> list[str]:
    """The section's bash blocks, in order: backing up, restoring, then what else the restore runs."""
    text = (ROOT / "docs" / "deploy.md").read_text(encoding="utf-8")
    assert SECTION in text, f"docs/deploy.md has no section {SECTION!r}"
    return FENCE.findall(text.split(SECTION, 1)[1].split("\n### ", 1)[0])


@dataclass
class Writer:
    """The stack's compose command, environment and folder (the copy of deploy/), and the writer's port."""

    compose: list[str]
    env: dict[str, str]
    folder: Path
    port: int

    def shell(self, script: str) -> str:
        """Run ``script`` in bash in the folder, as an operator's shell would, with `docker compose` being this
        stack's docker-compose; fails the test on the first command that fails. Its output."""
        # compose v1's exec wants a terminal unless told -T; an operator's shell has one, this one has none
        prelude = f"""set -eo pipefail
docker() {{
  if [ "$1" = compose ]; then
    shift
    if [ "$1" = exec ]; then shift; set -- exec -T "$@"; fi
    command {shlex.join(self.compose)} "$@"
  else
    command docker "$@"
  fi
}}
"""
        out = run(["bash", "-c", f"cd {shlex.quote(str(self.folder))}\n{prelude}{script}"], env=self.env, timeout=900)
        return out.stdout

    def container(self, service: str = "spanseek") -> str:
        """The container of ``service`` (one each here), running or not."""
        out = run([*self.compose, "--profile", "replicas", "ps", "-a", "-q", service], env=self.env)
        (container,) = out.stdout.split()
        return container

    def wait_healthy(self, service: str = "spanseek") -> None:
        wait_healthy(Stack(self.compose, self.env, self.container(service), self.port, 0))

    def replica_port(self) -> int:
        bindings = json.loads(docker("inspect", "-f", "{{json .NetworkSettings.Ports}}",
                                     self.container("spanseek-replica")).stdout)["8000/tcp"]
        return int(bindings[0]["HostPort"])


@pytest.fixture(scope="module")
def writer(cpu_image: str, prometheus_image: str, demo_index: Path, tmp_path_factory) -> Iterator[Writer]:
    """The writer (writes on), a replica and Prometheus up from a copy of deploy/; torn down, volumes too, after."""
    folder = tmp_path_factory.mktemp("backup") / "deploy"
    shutil.copytree(DEPLOY, folder)
    port = free_port()
    env = compose_env(demo_index, port, free_port())
    replica_first = free_range(2)
    env.update(SPANSEEK_WRITES="true", SPANSEEK_ADMIN_API_KEY=ADMIN["X-API-Key"], SPANSEEK_MERGE_TOKENS="0",
               SPANSEEK_REPLICA_PUBLISH=f"127.0.0.1:{replica_first}-{replica_first + 1}", SPANSEEK_REPLICA_POLL_S="2")
    compose = ["docker-compose", "-p", PROJECT, "-f", str(folder / "docker-compose.yml"),
               "-f", str(HERE / "docker-compose.devmachine.yml")]
    assert not project_objects("container", PROJECT), f"containers of project {PROJECT} are left from an earlier run"
    try:
        # compose starts the replica once the writer is healthy
        run([*compose, "--profile", "replicas", "up", "-d", "--no-build", "--scale", "spanseek-replica=1"], env=env,
            timeout=900)
        stack = Writer(compose, env, folder, port)
        stack.wait_healthy("spanseek-replica")
        yield stack
    finally:
        run([*compose, "--profile", "replicas", "down", "--volumes", "--remove-orphans", "--timeout", "20"], env=env,
            timeout=300)
    for kind in ("container", "network", "volume"):
        assert not project_objects(kind, PROJECT), f"{kind}s of project {PROJECT} are left after `down`"


def document(doc_id: str) -> dict:
    return {"id": doc_id, "title": "Harbour", "paragraphs": [f"In 1450 Gala built the harbour bridge ({doc_id})."]}


def test_the_documented_backup_and_restore_bring_back_the_writes_before_the_backup_and_the_replicas(writer):
    backup, restore, *then = documented_blocks()
    assert call(writer.port, "PUT", "/documents", document("before-the-backup"))[0] == 200
    # the first command makes the backup under a name of the moment; the others name it as the page's example does
    lines = backup.splitlines()
    first = next(i for i, line in enumerate(lines) if not line.startswith("#"))
    snapshot, rest = lines[first], "\n".join(lines[first + 1:])
    made = json.loads(writer.shell(snapshot))
    name = Path(made["index"]).name
    say(f"backup {name}: {made}")
    assert made["live_dir"] == f"/data/backups/{name}.live" and made["logs"] >= 1, made
    writer.shell(rest.replace(EXAMPLE_NAME, name))
    for copy in (name, f"{name}.live"):  # off the host, beside the compose file
        assert (writer.folder / copy).is_dir(), f"the backup's commands left no {copy} in {writer.folder}"
    assert (writer.folder / name / "manifest.json").is_file()

    assert call(writer.port, "PUT", "/documents", document("after-the-backup"))[0] == 200
    writer.shell(restore.replace(EXAMPLE_NAME, name))
    for block in then:  # the page's replicas are 3; this stack's 1
        writer.shell(block.replace("--scale spanseek-replica=3", "--scale spanseek-replica=1"))
    writer.wait_healthy()
    assert call(writer.port, "GET", "/documents/before-the-backup")[0] == 200
    assert call(writer.port, "GET", "/documents/after-the-backup")[0] == 404
    mounts = {m["Destination"]: m["Source"] for m in json.loads(docker("inspect", "-f", "{{json .Mounts}}",
                                                                       writer.container()).stdout)}
    assert mounts["/data/index"] == str(writer.folder / "restored-index"), mounts

    # the replica is back and follows the restored writer: a merge brings it the write from before the backup
    state = docker("inspect", "-f", "{{.State.Status}}", writer.container("spanseek-replica")).stdout.strip()
    assert state == "running", f"the replica is {state} after the documented restore"
    writer.wait_healthy("spanseek-replica")
    assert call(writer.port, "POST", "/admin/compact")[0] in (200, 202)
    deadline = time.monotonic() + 180
    while (code := call(writer.replica_port(), "GET", "/documents/before-the-backup")[0]) != 200:
        assert time.monotonic() < deadline, f"the replica did not follow the restored writer's merge: {code}"
        time.sleep(2)
    assert call(writer.replica_port(), "GET", "/documents/after-the-backup")[0] == 404
