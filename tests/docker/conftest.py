"""`make test-docker`: a Docker engine, the images built offline, and a demo index, for the container tests.

Run with `make test-docker` (``pytest -m docker tests/docker``); `make test` deselects these tests. Needs root and
Debian's docker.io, mmdebstrap, docker-compose and prometheus packages (`make docker-deps` installs them).

What is made here, once per run or cached across runs:
- the engine: an answering Docker engine is reused; otherwise ``dockerd --iptables=false --bridge=none`` is
  started and stopped again (by PID) at the end;
- the base image: Docker Hub is out of reach, so a Debian bookworm image with python3 and venv is made from
  Debian's packages with mmdebstrap and kept in the engine (made once); it trusts this host's CA bundle so that
  pip inside builds reaches the package index;
- the torch index: PyPI's Linux torch is the CUDA build, so the CPU torch wheel comes from this host's wheel
  folder (pip's find-links), served with its dependencies as a pip index on 127.0.0.1 during the build;
- the CPU image, the CUDA image and a stand-in Prometheus image, built with the Dockerfiles' real instructions
  and only build arguments changed;
- the demo index, built by the CPU image and kept in the cache folder (~/.cache/spanseek-docker, or
  SPANSEEK_DOCKER_CACHE) until the corpus, core/ or indexer/ change.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import http.server
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
DEPLOY = ROOT / "deploy"
CACHE = Path(os.environ.get("SPANSEEK_DOCKER_CACHE", Path.home() / ".cache" / "spanseek-docker"))
LOGS = CACHE / "logs"
BASE_IMAGE = "spanseek-test/debian-python:bookworm"
# Debian's name for the system CA bundle; PIP_CERT (as pip's config sets it on this host) wins
HOST_CA_BUNDLE = Path(os.environ.get("PIP_CERT", "/etc/ssl/certs/ca-certificates.crt"))
# Fixed, so that the torch layer's build arguments (part of the build cache key) are the same every run.
TORCH_INDEX_PORT = int(os.environ.get("SPANSEEK_TEST_TORCH_INDEX_PORT", "38411"))


def say(*parts: object) -> None:
    """One progress line (the run takes minutes; pytest runs with -s)."""
    print("[test-docker]", *parts, flush=True)


def run(cmd: list[str], timeout: float = 120, check: bool = True, env: dict[str, str] | None = None,
        log: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``cmd``; with ``check``, a non-zero exit fails the test with the command and the end of its output.

    ``log``: write the output there instead of keeping it (image builds print thousands of lines).
    """
    if log is None:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
        text = out.stdout + out.stderr
    else:
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("w") as f:
            out = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, text=True, timeout=timeout, env=env)
        text = log.read_text(errors="replace")
    if check and out.returncode != 0:
        where = f" (full log: {log})" if log else ""
        pytest.fail(f"`{' '.join(cmd)}` exited {out.returncode}{where}:\n{text[-4000:]}", pytrace=False)
    return out


def docker(*args: str, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run the docker CLI."""
    return run(["docker", *args], timeout=timeout, check=check)


def image_id(tag: str) -> str | None:
    """The image ID behind ``tag``, or None when there is no such image."""
    out = docker("image", "inspect", "-f", "{{.Id}}", tag, check=False)
    return out.stdout.strip() if out.returncode == 0 else None


def image_size(tag: str) -> int:
    """Bytes of the image behind ``tag`` (all its layers, uncompressed)."""
    return int(docker("image", "inspect", "-f", "{{.Size}}", tag).stdout)


def build(tag: str, dockerfile: Path, context: Path, args: dict[str, str], timeout: float = 3600) -> str:
    """``docker build`` with host networking (pip and apt reach the registries, and 127.0.0.1 is this host).

    The image that the tag named before, if any, is removed when nothing else uses it, so that rebuilds leave no
    dangling images behind; the build cache (intermediate images) stays.
    """
    before = image_id(tag)
    say(f"building {tag} from {dockerfile.relative_to(ROOT)} ...")
    t0 = time.monotonic()
    cmd = ["docker", "build", "--network", "host", "-f", str(dockerfile), "-t", tag]
    for key, value in args.items():
        cmd += ["--build-arg", f"{key}={value}"]
    run([*cmd, str(context)], timeout=timeout, log=LOGS / f"build-{re.sub(r'[^A-Za-z0-9.-]', '_', tag)}.log")
    after = image_id(tag)
    assert after is not None
    if before is not None and before != after:
        docker("rmi", before, check=False)  # refuses when a container or another tag still uses it: fine
    say(f"built {tag} in {time.monotonic() - t0:.0f} s: {image_size(tag) / 1e9:.2f} GB")
    return tag


def dockerfile_default(dockerfile: Path, name: str) -> str:
    """The default of build argument ``name`` in ``dockerfile`` (one definition of, e.g., the torch version)."""
    found = re.search(rf"^ARG {name}=(\S+)$", dockerfile.read_text(), re.M)
    assert found, f"{dockerfile} has no ARG {name}=..."
    return found.group(1)


def child_pids(pid: int) -> set[int]:
    """Direct children of process ``pid``."""
    pids: set[int] = set()
    for task in Path(f"/proc/{pid}/task").glob("*"):
        with contextlib.suppress(OSError):
            pids.update(int(p) for p in (task / "children").read_text().split())
    return pids


def alive(pid: int) -> bool:
    """Whether process ``pid`` still exists (and is no zombie)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def engine_answers() -> bool:
    """Whether a Docker engine answers on the default socket."""
    return subprocess.run(["docker", "info"], capture_output=True, timeout=60).returncode == 0


@pytest.fixture(scope="session")
def engine() -> Iterator[None]:
    """A Docker engine for the run: reused when one answers, else started here and stopped at the end."""
    for binary in ("docker", "docker-compose"):
        if shutil.which(binary) is None:
            pytest.fail(f"{binary} is not installed (make docker-deps)", pytrace=False)
    if engine_answers():
        say("reusing the running Docker engine")
        yield
        return
    if shutil.which("dockerd") is None or os.geteuid() != 0:
        pytest.fail("no Docker engine answers, and starting one needs root and dockerd (make docker-deps)",
                    pytrace=False)
    LOGS.mkdir(parents=True, exist_ok=True)
    log = (LOGS / "dockerd.log").open("w")
    # No iptables rules and no default bridge: this host's network stays as it is; compose still makes its own
    # bridge network, and published ports go through docker-proxy on 127.0.0.1.
    daemon = subprocess.Popen(["dockerd", "--iptables=false", "--bridge=none"], stdout=log, stderr=subprocess.STDOUT,
                              start_new_session=True)
    say(f"started dockerd (PID {daemon.pid})")
    try:
        deadline = time.monotonic() + 90
        while not engine_answers():
            if daemon.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"dockerd did not come up; see {LOGS / 'dockerd.log'}", pytrace=False)
            time.sleep(1)
        helpers = child_pids(daemon.pid)  # containerd, which dockerd starts and must stop again
        yield
    finally:
        daemon.send_signal(signal.SIGTERM)
        try:
            daemon.wait(timeout=120)
        except subprocess.TimeoutExpired:
            daemon.kill()
            daemon.wait(timeout=30)
        log.close()
        say(f"stopped dockerd (PID {daemon.pid})")
    deadline = time.monotonic() + 30
    while any(alive(p) for p in helpers) and time.monotonic() < deadline:
        time.sleep(0.5)
    left = [p for p in helpers if alive(p)]
    assert not left, f"processes started by dockerd are still running: {left}"


@pytest.fixture(scope="session")
def base_image(engine: None) -> str:
    """The local stand-in for python:3.11-slim-bookworm, made once with mmdebstrap and kept in the engine."""
    if image_id(BASE_IMAGE) is not None:
        return BASE_IMAGE
    if shutil.which("mmdebstrap") is None:
        pytest.fail("mmdebstrap is not installed (make docker-deps)", pytrace=False)
    assert HOST_CA_BUNDLE.is_file(), f"no CA bundle at {HOST_CA_BUNDLE} (set PIP_CERT)"
    say(f"making the base image {BASE_IMAGE} with mmdebstrap (once; a few minutes) ...")
    CACHE.mkdir(parents=True, exist_ok=True)
    tar = CACHE / "base.tar"
    ca_dir = "/usr/local/share/ca-certificates-host"
    # passwd for useradd, as in the official image; the host's CA bundle beside Debian's, named by PIP_CERT
    run(["mmdebstrap", "--quiet", "--variant=apt", "--include=python3,python3-venv,ca-certificates,passwd",
         f"--customize-hook=mkdir -p \"$1{ca_dir}\"",
         f"--customize-hook=copy-in {HOST_CA_BUNDLE} {ca_dir}",
         "bookworm", str(tar)], timeout=1800, log=LOGS / "mmdebstrap.log")
    try:
        docker("import", "--change", f"ENV PIP_CERT={ca_dir}/{HOST_CA_BUNDLE.name}", str(tar), BASE_IMAGE,
               timeout=600)
    finally:
        tar.unlink(missing_ok=True)
    return BASE_IMAGE


def host_pip_download(requirement: str, dest: Path) -> None:
    """Download ``requirement`` and its dependencies as wheels with this host's pip and its configuration."""
    run([sys.executable, "-m", "pip", "download", "--only-binary=:all:", "--dest", str(dest), requirement],
        timeout=1800, log=LOGS / "torch-download.log")


def make_simple_index(wheels: Path, simple: Path) -> None:
    """A PEP 503 index (one folder per normalised project name) of the wheels in ``wheels``, as symlinks."""
    shutil.rmtree(simple, ignore_errors=True)
    for wheel in wheels.glob("*.whl"):
        project = re.sub(r"[-_.]+", "-", wheel.name.split("-")[0]).lower()
        (simple / project).mkdir(parents=True, exist_ok=True)
        (simple / project / wheel.name).symlink_to(wheel)


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    """Serves files without logging every request."""

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture(scope="session")
def torch_index() -> Iterator[str]:
    """A pip index on 127.0.0.1 with the CPU torch wheel of this host's wheel folder and its dependencies."""
    version = dockerfile_default(ROOT / "docker" / "Dockerfile.cpu", "TORCH_VERSION")
    wheels = CACHE / "torch-wheels" / version
    if not any(wheels.glob(f"torch-{version}+cpu-*.whl")):
        say(f"collecting torch=={version}+cpu and its dependencies with this host's pip ...")
        host_pip_download(f"torch=={version}+cpu", wheels)
    simple = CACHE / "torch-index" / "simple"
    make_simple_index(wheels, simple)
    handler = functools.partial(QuietHandler, directory=str(simple.parent))
    try:
        server = http.server.ThreadingHTTPServer(("127.0.0.1", TORCH_INDEX_PORT), handler)
    except OSError as e:
        pytest.fail(f"cannot serve the torch index on 127.0.0.1:{TORCH_INDEX_PORT} ({e}); "
                    "set SPANSEEK_TEST_TORCH_INDEX_PORT to a free port", pytrace=False)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{TORCH_INDEX_PORT}/simple/"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="session")
def cpu_image(base_image: str, torch_index: str) -> str:
    """spanseek:cpu, built offline: the local base image and torch from the host's wheel folder."""
    return build("spanseek:cpu", ROOT / "docker" / "Dockerfile.cpu", ROOT,
                 {"BASE_IMAGE": base_image, "TORCH_INDEX": torch_index})


@pytest.fixture(scope="session")
def cuda_image(base_image: str) -> str:
    """spanseek:cuda, built here: the local base image and PyPI's torch (the CUDA build on Linux)."""
    return build("spanseek:cuda", ROOT / "docker" / "Dockerfile.cuda", ROOT,
                 {"BASE_IMAGE": base_image, "TORCH_INDEX": "https://pypi.org/simple"})


def compose_image(service: str) -> str:
    """The image that deploy/docker-compose.yml names for ``service``."""
    return yaml.safe_load((DEPLOY / "docker-compose.yml").read_text())["services"][service]["image"]


@pytest.fixture(scope="session")
def prometheus_image(base_image: str) -> str:
    """Debian's prometheus package, tagged as the image the compose file names (Docker Hub is out of reach)."""
    return build(compose_image("prometheus"), HERE / "Dockerfile.prometheus", HERE, {"BASE_IMAGE": base_image})


def demo_index_key() -> str:
    """A digest of what the demo index depends on: the corpus and the sources and model files of core/ and indexer/."""
    digest = hashlib.sha256()
    files = [ROOT / "data" / "demo" / "corpus.jsonl.gz"]
    files += sorted(p for d in ("core", "indexer") for p in (ROOT / d).rglob("*")
                    if p.is_file() and "__pycache__" not in p.parts)
    for path in files:
        digest.update(str(path.relative_to(ROOT)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def cached_demo_index(cache: Path, image: str) -> Path:
    """The demo index of these sources in ``cache``, built there by ``image`` unless a run before built it; a build
    cut short is resumed. The demo indexes of other sources (another clone or branch, an earlier commit) are left
    where they are, and named with their sizes so that their owner can remove those no longer needed: they were
    deleted, another clone's cache (or its index while its own run used it) with them."""
    index = cache / f"demo-index-{demo_index_key()}"
    if others := sorted(p for p in cache.glob("demo-index-*") if p != index and p.is_dir()):
        sizes = ", ".join(f"{p.name} ({sum(f.stat().st_size for f in p.rglob('*') if f.is_file()) / 1e6:.0f} MB)"
                          for p in others)
        say(f"demo indexes of other sources kept in {cache} (remove those no longer needed): {sizes}")
    if (index / "manifest.json").exists():
        say(f"reusing the demo index in {index}")
        return index
    say(f"building the demo index in {index} with {image} (minutes) ...")
    cache.mkdir(parents=True, exist_ok=True)
    # as this host's user, so that the files belong to it; resumable, and the manifest is written last
    run(["docker", "run", "--rm", "--network", "none", "--user", f"{os.getuid()}:{os.getgid()}",
         "-v", f"{ROOT / 'data' / 'demo'}:/corpus:ro", "-v", f"{cache}:/out",
         "--entrypoint", "spanseek", image, "index", "build", "--quiet",
         "--corpus", "/corpus/corpus.jsonl.gz", "--out", f"/out/{index.name}"],
        timeout=3600, log=cache / "logs" / "demo-index.log")
    assert (index / "manifest.json").exists()
    return index


@pytest.fixture(scope="session")
def demo_index(cpu_image: str) -> Path:
    """The demo index, built by the CPU image and cached across runs and clones until its inputs change."""
    return cached_demo_index(CACHE, cpu_image)
