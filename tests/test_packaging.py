"""What a user installs: the wheel and sdist carry every file a command loads and nothing of the repository's own,
and a command or import whose extra is missing names the extra to install.

    .venv/bin/python -m pytest -q tests/test_packaging.py
"""

from __future__ import annotations

import importlib
import importlib.metadata
import re
import shutil
import subprocess
import sys
import tarfile
import tomllib
import zipfile
from pathlib import Path

import pytest

from spanseek.extras import EXTRA_OF_MODULE, MissingExtraError

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
# what the distributions are built from (pyproject's package-dir, the readme, the sdist's manifest), and the tests,
# which setuptools would put in the sdist unless the manifest leaves them out
SOURCES = ("pyproject.toml", "README.md", "MANIFEST.in", "spanseek", "core", "indexer", "trainer", "service", "data",
           "tests")
PACKAGE_DIRS = {"spanseek.core": "core", "spanseek.indexer": "indexer", "spanseek.trainer": "trainer",
                "spanseek.service": "service", "spanseek": "spanseek"}


def tracked(*folders: str) -> list[str]:
    """The files git tracks under ``folders`` (a checkout's scratch, caches and builds left out)."""
    out = subprocess.run(["git", "ls-files", "-z", *folders], cwd=ROOT, capture_output=True, check=True).stdout
    return [p for p in out.decode().split("\0") if p]


@pytest.fixture(scope="module")
def dists(tmp_path_factory) -> tuple[list[str], list[str], str]:
    """(the wheel's file names, the sdist's, what the builds wrote on stderr) as setuptools builds them from a copy
    of the sources (PEP 517, the build backend called as `python -m build` calls it, without its isolated
    environment)."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("needs the git checkout (the files it tracks)")
    src, out = tmp_path_factory.mktemp("src"), tmp_path_factory.mktemp("dist")
    for path in tracked(*SOURCES):
        (src / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / path, src / path)
    stderr = ""
    for build in ("build_sdist", "build_wheel"):  # one process each: setuptools' second build in a process fails
        script = f"import sys; from setuptools import build_meta; build_meta.{build}(sys.argv[1])"
        stderr += subprocess.run([sys.executable, "-c", script, str(out)], cwd=src, check=True, capture_output=True,
                                 text=True).stderr
    (wheel,), (sdist,) = out.glob("*.whl"), out.glob("*.tar.gz")
    with tarfile.open(sdist) as tar:
        sdist_names = [m.name.split("/", 1)[1] for m in tar.getmembers() if m.isfile()]
    return zipfile.ZipFile(wheel).namelist(), sdist_names, stderr


def installed_name(path: str) -> str:
    """Where a repository file lands in the wheel: ``core/models/x`` -> ``spanseek/core/models/x``."""
    top = path.split("/", 1)[0]
    return path if top == "spanseek" else f"spanseek/{path}"


def test_the_wheel_carries_every_file_a_command_loads(dists):
    from spanseek.core.model import BUNDLED_MODELS
    from spanseek.core.reader import DEFAULT_READER_DIR

    wheel, _, _ = dists
    names = set(wheel)
    loaded = [f"spanseek/core/models/{Path(d).name}/{f}" for d in [*BUNDLED_MODELS.values(), DEFAULT_READER_DIR]
              for f in sorted(p.name for p in Path(d).iterdir())]
    assert any(n.endswith("reading.json") for n in loaded) and any(n.endswith("calibration.json") for n in loaded)
    loaded += ["spanseek/data/demo/corpus.jsonl.gz", "spanseek/py.typed"]
    assert [n for n in loaded if n not in names] == []
    code = [installed_name(p) for p in tracked(*PACKAGE_DIRS.values()) if p.endswith(".py")]
    assert [n for n in code if n not in names] == []


def test_the_wheel_and_sdist_hold_nothing_of_the_repository_own(dists):
    wheel, sdist, _ = dists
    junk = re.compile(r"(^|/)(tests|runs|work|bench|docs|deploy|docker|__pycache__|\.venv)/")
    assert [n for n in wheel if junk.search(n)] == []
    assert [n for n in sdist if junk.search(n)] == []
    assert "data/demo/corpus.jsonl.gz" in sdist and "core/models/default/weights.safetensors" in sdist


def test_the_builds_warn_of_nothing(dists):
    """`make install` showed setuptools' boxed warnings, "Package would be ignored" for the bundled models' folders
    among them, that concern no user (pyproject's license as a table, data folders not named as packages)."""
    _, _, stderr = dists
    assert [line for line in stderr.splitlines() if "Warning" in line] == []


def normalised(requirement: str) -> str:
    """A requirement's distribution name as PyPI compares names (``PyYAML>=6`` -> ``pyyaml``)."""
    name = re.match(r"[A-Za-z0-9._-]+", requirement)
    assert name, requirement
    return re.sub(r"[-_.]+", "-", name.group()).lower()


def test_each_modules_extra_lists_its_distribution():
    """The table behind the messages agrees with pyproject: the distribution that installs each module (looked up in
    this environment, which has every extra but ray) is a requirement of the extra the table names."""
    extras = {name: {normalised(r) for r in reqs} for name, reqs in PYPROJECT["project"]["optional-dependencies"].items()}
    providers = importlib.metadata.packages_distributions()
    checked = 0
    for module, extra in EXTRA_OF_MODULE.items():
        assert extra in extras, f"{module}: no extra {extra!r} in pyproject.toml"
        if module not in providers:
            continue  # not installed here (ray)
        dists = {normalised(d) for d in providers[module]}
        assert dists & extras[extra], f"{module} comes from {dists}, none of them in the {extra!r} extra"
        checked += 1
    assert checked >= len(EXTRA_OF_MODULE) - 1


def test_a_command_importing_a_missing_extra_when_it_runs_names_it(monkeypatch, capsys):
    """`spanseek sync` imports httpx only when it runs: the client extra is named, not a traceback."""
    import spanseek.cli as cli

    monkeypatch.setitem(sys.modules, "httpx", None)  # import httpx -> ModuleNotFoundError, as on a plain install
    assert cli.main(["sync", "--url", "http://127.0.0.1:1", "somewhere"]) == 2
    err = capsys.readouterr().err
    assert err == ("spanseek sync: error: spanseek sync needs the 'client' extra (module 'httpx' is not installed): "
                   "pip install 'spanseek[client]'\n")


def test_importing_the_client_without_its_extra_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "httpx", None)
    monkeypatch.delitem(sys.modules, "spanseek.client", raising=False)
    with pytest.raises(MissingExtraError, match=re.escape("pip install 'spanseek[client]'")) as e:
        importlib.import_module("spanseek.client")
    assert isinstance(e.value, ModuleNotFoundError) and e.value.name == "httpx"
    monkeypatch.delitem(sys.modules, "spanseek.client", raising=False)  # the next import is the real one again


def third_party_imports(folder: str) -> dict[str, tuple[str, set[str]]]:
    """Every third-party module a folder's modules import (at any depth: the lazy imports too), with where it is
    first imported and the distributions that install it here."""
    import ast

    providers = importlib.metadata.packages_distributions()
    found: dict[str, tuple[str, set[str]]] = {}
    for path in sorted((ROOT / folder).glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module or ""]
            else:
                continue
            for top in {n.split(".")[0] for n in names} - set(sys.stdlib_module_names) - {"spanseek", "__future__"}:
                found.setdefault(top, (f"{path.name}:{node.lineno}", {normalised(d) for d in providers.get(top, [top])}))
    return found


def test_core_needs_only_the_base_set():
    """Every third-party module ``core`` imports (at any depth: the lazy imports too) comes with a plain install:
    its distribution is a base requirement, not an extra's."""
    base = {normalised(r) for r in PYPROJECT["project"]["dependencies"]}
    outside = {top: f"{where} ({', '.join(sorted(dists))})" for top, (where, dists) in third_party_imports("core").items()
               if not dists & base}
    assert outside == {}


def test_every_module_the_indexer_imports_is_declared():
    """Every third-party module ``indexer`` imports is a base requirement or one of the extra that the missing-extra
    messages name for it (``EXTRA_OF_MODULE``), never one that only arrives as another package's dependency."""
    base = {normalised(r) for r in PYPROJECT["project"]["dependencies"]}
    extras = {name: {normalised(r) for r in reqs} for name, reqs in PYPROJECT["project"]["optional-dependencies"].items()}
    undeclared = {top: f"{where} ({', '.join(sorted(dists))})" for top, (where, dists)
                  in third_party_imports("indexer").items()
                  if not dists & (base | extras.get(EXTRA_OF_MODULE.get(top, ""), set()))}
    assert undeclared == {}

FAKE_PIP = """#!/bin/sh
# pip as `make install` calls it: each call logged; the +cpu torch found only where the test says it is
echo "$*" >> "$(dirname "$0")/pip.log"
case "$*" in
  *torch==*+cpu*--extra-index-url*|*--extra-index-url*torch==*+cpu*)
    [ "$TORCH_ON_INDEX" = 1 ] && exit 0
    echo "WARNING: Retrying ... Failed to resolve 'download.pytorch.org'" >&2
    echo "ERROR: No matching distribution found for torch==2.13.0+cpu" >&2; exit 1 ;;
  *torch==*+cpu*)
    [ "$TORCH_LOCAL" = 1 ] && exit 0
    echo "ERROR: No matching distribution found for torch==2.13.0+cpu" >&2; exit 1 ;;
esac
"""


def make_install(tmp_path: Path, *, local: bool, on_index: bool) -> tuple[subprocess.CompletedProcess, list[str]]:
    """`make install` into a virtualenv whose pip is a stand-in (FAKE_PIP): what make wrote, and pip's calls."""
    if shutil.which("make") is None:
        pytest.skip("needs make")
    bin_dir = tmp_path / "venv" / "bin"
    bin_dir.mkdir(parents=True)
    for name, text in (("python", "#!/bin/sh\n"), ("pip", FAKE_PIP)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    env = {"PATH": "/usr/bin:/bin", "TORCH_LOCAL": str(int(local)), "TORCH_ON_INDEX": str(int(on_index))}
    done = subprocess.run(["make", "-s", "-C", str(ROOT), "install", f"VENV={tmp_path / 'venv'}"], env=env,
                          capture_output=True, text=True)
    return done, (bin_dir / "pip.log").read_text().splitlines()


def test_make_install_takes_torch_from_pips_configuration_without_asking_the_torch_index(tmp_path):
    """Offline or behind a proxy, with the +cpu wheel in a folder or mirror pip is configured with, `make install`
    printed a retry for torch and each of its dependencies at download.pytorch.org: it is not asked at all now."""
    done, calls = make_install(tmp_path, local=True, on_index=False)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    torch_calls = [c for c in calls if "torch==" in c]
    assert torch_calls == ["install -q torch==2.13.0+cpu"]
    assert any("-e .[dev]" in c for c in calls)


def test_make_install_falls_back_to_the_torch_index(tmp_path):
    done, calls = make_install(tmp_path, local=False, on_index=True)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""  # the quiet first try's "no matching distribution" is not shown
    assert [c for c in calls if "torch==" in c][-1] == (
        "install -q --retries 1 --extra-index-url https://download.pytorch.org/whl/cpu torch==2.13.0+cpu")
    assert any("-e .[dev]" in c for c in calls)


def test_make_install_stops_where_neither_holds_the_cpu_build(tmp_path):
    """No CUDA torch pulled instead: make stops, and pip's error from the torch index is shown."""
    done, calls = make_install(tmp_path, local=False, on_index=False)
    assert done.returncode != 0
    assert "No matching distribution found for torch==2.13.0+cpu" in done.stderr
    assert not any("-e .[dev]" in c for c in calls)
    assert not (tmp_path / "venv" / ".installed").exists()
