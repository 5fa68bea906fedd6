"""Every shell command and Python example of README.md and docs/python.md runs as written, on tiny inputs, so the
pages stay true.

    .venv/bin/python -m pytest -q tests/test_docs_commands.py

Each page's ```bash / ```sh / ```console blocks are cut into commands (continuation lines joined, comments
dropped) and run in order in a fresh directory that holds small files under the names the page uses
(``my-docs/``, ``dev-v1.1.json``, ``more.jsonl``, ...), with the bundled models (``--model default``):

- ``spanseek ...`` runs in this process (``spanseek.cli.main``); it must exit 0 and write the file its ``--out``
  names; ``spanseek search`` must print a JSON line with hits per question. ``spanseek serve`` starts the real
  command on a free port, and the page's ``curl`` commands then run against it (must answer 2xx with JSON).
- Commands that cannot run here are listed in ``NOT_RUN`` with the reason; training commands in ``PARSE_ONLY``
  run only through the argument parser, so a flag that does not exist still fails.
- Each ```python block runs in this process, in its place among the commands, in one namespace for the page (as
  a reader pastes them into one session: ``searcher`` of one block is there for the next), its URLs moved to the
  page's server; it must not raise.

A command that is none of these fails ``test_the_pages_have_commands_and_each_is_run_or_classified``, so a new
block gets covered.
"""

from __future__ import annotations

import argparse
import ast
import gzip
import json
import os
import random
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager, redirect_stderr, redirect_stdout
from dataclasses import dataclass
from functools import cache
from io import StringIO
from pathlib import Path

import httpx
import pytest

from spanseek.cli import build_parser
from spanseek.cli import main as spanseek_main
from tests.conftest import make_corpus, make_paragraph, make_squad

ROOT = Path(__file__).resolve().parents[1]
DOCS = ("README.md", "docs/python.md")
FENCE = re.compile(r"^```(?:bash|sh|shell|console)[ \t]*\n(.*?)^```", re.MULTILINE | re.DOTALL)
PYTHON_FENCE = re.compile(r"^```python[ \t]*\n(.*?)^```", re.MULTILINE | re.DOTALL)
BIN = Path(sys.executable).parent
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_WAIT_POLICY": "PASSIVE", "TRANSFORMERS_VERBOSITY": "error",
       "TOKENIZERS_PARALLELISM": "false", "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}

# Commands that do not run here, matched in full (regex) against the command's words joined by spaces.
NOT_RUN = {
    r"make (demo|test|lint|test-slow|test-docker)": "make targets install a virtualenv, system packages or Docker; "
                                                    "make test runs this suite",
    r"SPANSEEK_DEMO_NO_SERVE=1 make demo": "make demo indexes the whole demo corpus (minutes)",
    r"pip install .+": "installs packages from an index (network)",
    r"\. \.venv/bin/activate": "shell set-up: the commands run with this interpreter's spanseek",
    r"cd deploy && export GRAFANA_ADMIN_PASSWORD=\.\.\.": "the compose stack needs a Docker engine (make test-docker)",
    r"docker compose .+": "the compose stack needs a Docker engine (make test-docker)",
    r"python bench/\.\.\.": "a pointer to bench/README.md, not a command",
    r"python bench/document_formats\.py .+": "renders the 22 held-out articles as PDF and Word files and builds and "
                                            "evaluates an index of each (tens of minutes of CPU)",
    r"python bench/(index|search)_throughput\.py .+|python bench/service_load\.py .+":
        "benchmarks on the demo corpus or its index (minutes of CPU); tests/bench/test_bench_smoke.py runs each on the "
        "tiny model",
    r"spanseek sync .+": "needs a service with writes on, which the page's server is not (tests/service/test_sync.py "
                         "runs the command against one)",
    r"python bench/reading\.py .+": "times batches of 64 validation questions with the bundled reader (minutes of CPU); "
                                   "tests/bench/test_bench_smoke.py runs it on the tiny model",
}
# Training runs for hours on a CPU (tests/trainer covers the jobs with a tiny model): only the flags are checked.
PARSE_ONLY = r"spanseek train (phrase|length-bias|qsft|reader|reader-length-bias|fit-reading) .+"
PORT = "8000"  # where the pages serve


@dataclass(frozen=True)
class Command:
    """One command of a page: where it starts, and its words (comments dropped, quotes resolved)."""

    doc: str
    line: int
    argv: tuple[str, ...]

    @property
    def text(self) -> str:
        return " ".join(self.argv)

    def __str__(self) -> str:
        return f"{self.doc}:{self.line}: {self.text}"


def doc_commands(doc: str) -> list[Command]:
    """The commands of ``doc``'s shell blocks, in page order."""
    text = (ROOT / doc).read_text()
    out: list[Command] = []
    for block in FENCE.finditer(text):
        first = text.count("\n", 0, block.start(1)) + 1
        pending, start = "", first
        for n, line in enumerate(block.group(1).splitlines(), first):
            line = line.removeprefix("$ ")  # console prompts
            if not pending:
                start = n
            if line.rstrip().endswith("\\"):
                pending += line.rstrip()[:-1] + " "
                continue
            try:
                argv = shlex.split(pending + line, comments=True)
            except ValueError:  # a quoted argument that goes on to the next line (a JSON body)
                pending += line + "\n"
                continue
            pending = ""
            if argv:
                out.append(Command(doc, start, tuple(argv)))
    return out


@dataclass(frozen=True)
class Snippet:
    """One ```python block of a page: where its code starts, and the code."""

    doc: str
    line: int
    code: str

    def __str__(self) -> str:
        return f"{self.doc}:{self.line}: the Python example"


def doc_snippets(doc: str) -> list[Snippet]:
    """The ```python blocks of ``doc``, in page order."""
    text = (ROOT / doc).read_text()
    return [Snippet(doc, text.count("\n", 0, block.start(1)) + 1, block.group(1)) for block in PYTHON_FENCE.finditer(text)]


def doc_steps(doc: str) -> list[Command | Snippet]:
    """The commands and Python examples of ``doc``, in page order."""
    return sorted([*doc_commands(doc), *doc_snippets(doc)], key=lambda step: step.line)


def not_run_reason(cmd: Command) -> str | None:
    return next((reason for pattern, reason in NOT_RUN.items() if re.fullmatch(pattern, cmd.text)), None)


def kind(cmd: Command) -> str:
    """How the test treats a command: not-run, parse, serve, spanseek or curl; unknown raises."""
    if not_run_reason(cmd):
        return "not-run"
    if re.fullmatch(PARSE_ONLY, cmd.text):
        return "parse"
    if cmd.argv[:2] == ("spanseek", "serve"):
        return "serve"
    if cmd.argv[0] == "spanseek":
        return "spanseek"
    if cmd.argv[0] == "curl":
        return "curl"
    raise LookupError(f"{cmd}: neither run nor classified; add a way to run it, or a NOT_RUN entry with the reason")


def all_commands() -> list[Command]:
    return [cmd for doc in DOCS for cmd in doc_commands(doc)]


# -- what the pages need on disk ---------------------------------------------------------------------------------


MARKDOWN = """---
title: {title}
date: {date}
tags: [{tags}]
---
# {title}

{body}
"""


def write_fixtures(ws: Path) -> None:
    """The files the pages name, small: text, Markdown and HTML folders, SQuAD files, corpora to add."""
    rng = random.Random(1)
    for folder in ("my-docs", "docs"):
        (ws / folder / "guides").mkdir(parents=True)
        (ws / folder / "guides" / "install.md").write_text(MARKDOWN.format(
            title="Install guide", date="2024-05-01", tags="new", body="Run pip install to install it. "
            + make_paragraph(rng, 3)))
        (ws / folder / "release.md").write_text(MARKDOWN.format(
            title="Release notes", date="2023-02-01", tags="old", body=make_paragraph(rng, 4)))
        (ws / folder / "notes.txt").write_text(make_paragraph(rng, 3) + "\n\n" + make_paragraph(rng, 2))
        (ws / folder / "page.html").write_text(f"<html><title>A page</title><p>{make_paragraph(rng, 3)}</p></html>")
    (ws / "handbook").mkdir()
    (ws / "handbook" / "faq.md").write_text(MARKDOWN.format(
        title="FAQ", date="2024-06-01", tags="new", body="Who wrote the FAQ? The support team. " + make_paragraph(rng, 2)))
    squad = make_squad()
    for name in ("dev-v1.1.json", "train.json", "new-questions.json"):
        (ws / name).write_text(json.dumps(squad))
    (ws / "runs").mkdir()
    with gzip.open(ws / "runs" / "validation.json.gz", "wt") as f:
        json.dump(squad, f)
    extra = make_corpus(seed=5, n_docs=2, n_paras=2)
    (ws / "more.jsonl").write_text("".join(json.dumps({**d, "id": f"more-{d['id']}"}) + "\n" for d in extra))
    (ws / "docs.jsonl").write_text(json.dumps({**extra[0], "id": "upserted"}) + "\n")
    (ws / "work").mkdir()


# -- running them ------------------------------------------------------------------------------------------------


def free_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return str(s.getsockname()[1])


def moved(text: str, port: str) -> str:
    """``text`` with the pages' URLs moved to ``port`` (``localhost:8000/search`` -> ``localhost:PORT/search``)."""
    return re.sub(rf"(localhost|127\.0\.0\.1):{PORT}\b", rf"\1:{port}", text)


def on_port(argv: tuple[str, ...], port: str) -> list[str]:
    """The words with the pages' URLs moved to ``port``."""
    return [moved(w, port) for w in argv]


def written_by(argv: list[str], ws: Path) -> Path | None:
    """The file or directory a command's ``--out`` names, if it has one."""
    return ws / argv[argv.index("--out") + 1] if "--out" in argv else None


def run_spanseek(cmd: Command, ws: Path) -> None:
    """``spanseek ...`` in this process: exit 0, its ``--out`` written, and a search's JSON lines have hits."""
    argv = list(cmd.argv)
    stdout = StringIO()
    with redirect_stdout(stdout):
        try:
            status = spanseek_main(argv[1:])
        except SystemExit as e:  # argparse refused the arguments
            status = e.code
    assert status == 0, f"{cmd} exited with {status}:\n{stdout.getvalue()[-3000:]}"
    out = written_by(argv, ws)
    assert out is None or out.exists(), f"{cmd} did not write {out}"
    if argv[1] == "search":
        lines = [json.loads(line) for line in stdout.getvalue().splitlines()]
        assert lines and all(line["hits"] for line in lines), f"{cmd} found nothing:\n{stdout.getvalue()}"


def run_parse_only(cmd: Command) -> None:
    """Training commands: the parser must accept every flag (argparse exits 2 on one it does not know)."""
    try:
        build_parser().parse_args(list(cmd.argv[1:]))
    except SystemExit as e:
        pytest.fail(f"{cmd}: spanseek refuses these arguments (exit {e.code})")


def run_snippet(snippet: Snippet, namespace: dict, port: str | None) -> None:
    """A page's Python example in the page's namespace, against the server it started (if any): it must not raise."""
    code = moved(snippet.code, port) if port is not None else snippet.code
    with redirect_stdout(StringIO()):
        try:
            exec(compile(code, str(snippet), "exec"), namespace)
        except Exception as e:
            pytest.fail(f"{snippet} raised {type(e).__name__}: {e}")


def run_process(cmd: Command, argv: list[str], ws: Path) -> str:
    proc = subprocess.run(argv, cwd=ws, env=ENV, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, f"{cmd} exited with {proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout


def run_curl(cmd: Command, ws: Path, port: str | None) -> None:
    """A page's curl against the service it started: 2xx (``--fail-with-body``) and a JSON answer."""
    assert port is not None, f"{cmd}: the page runs curl before it starts spanseek serve"
    body = run_process(cmd, ["curl", "--fail-with-body", "--max-time", "120", *on_port(cmd.argv[1:], port)], ws)
    answer = json.loads(body)
    assert "error" not in answer, f"{cmd}: {answer}"


@contextmanager
def serving(cmd: Command, ws: Path) -> Iterator[str]:
    """``spanseek serve ...`` as the page writes it, on a free port; yields the port once /ready says 200."""
    port = free_port()
    argv = [str(BIN / "spanseek"), *cmd.argv[1:]]
    if "--port" in argv:
        del argv[argv.index("--port") : argv.index("--port") + 2]
    argv += ["--port", port]
    log = (ws / "serve.log").open("w")
    proc = subprocess.Popen(argv, cwd=ws, env=ENV, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 300
        while True:
            assert proc.poll() is None, f"{cmd} exited:\n{(ws / 'serve.log').read_text()[-3000:]}"
            assert time.monotonic() < deadline, f"{cmd} never became ready"
            try:
                if httpx.get(f"http://127.0.0.1:{port}/ready").status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        yield port
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


# -- the tests ---------------------------------------------------------------------------------------------------


def test_the_pages_have_commands_and_each_is_run_or_classified():
    commands = all_commands()
    kinds, unknown = set(), []
    for cmd in commands:
        try:
            kinds.add(kind(cmd))
        except LookupError as e:
            unknown.append(str(e))
    assert not unknown, "\n".join(unknown)
    assert {"spanseek", "serve", "curl", "not-run", "parse"} <= kinds
    assert any(doc_snippets(doc) for doc in DOCS)  # the Python examples are found, and run in their place
    for pattern in NOT_RUN:  # an entry that no longer matches is stale
        assert any(re.fullmatch(pattern, cmd.text) for cmd in commands), f"NOT_RUN {pattern!r} matches no command"


# what a page's commands may search without building it themselves: the index `make demo` builds
BUILT_ELSEWHERE = {"work/demo-index"}


def test_each_index_a_page_names_is_one_it_builds():
    """The commands that the tests do not run (benchmarks, the reading evaluation) named a VAL_INDEX that no command
    of the page built: each --index is an index build's --out of the same page, or the demo index."""
    for doc in DOCS:
        built, named = set(BUILT_ELSEWHERE), []
        for cmd in doc_commands(doc):
            argv = list(cmd.argv)
            if argv[:3] == ["spanseek", "index", "build"] and "--out" in argv:
                built.add(argv[argv.index("--out") + 1])
            if "--index" in argv:
                named.append((cmd, argv[argv.index("--index") + 1]))
        assert named, doc
        assert [str(cmd) for cmd, index in named if index not in built] == []


def test_commands_are_cut_as_a_shell_would():
    commands = doc_commands("docs/python.md")
    curl = next(cmd for cmd in commands if cmd.argv[0] == "curl")
    assert curl.argv[-1].startswith('{"query"') and "-d" in curl.argv  # continuation joined, quotes resolved
    assert all("#" not in word for cmd in commands for word in cmd.argv)  # comments dropped


@pytest.mark.parametrize("doc", DOCS)
def test_doc_commands_run(doc, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for key, value in ENV.items():
        monkeypatch.setenv(key, value)
    write_fixtures(tmp_path)
    port, namespace = None, {"__name__": "__main__"}
    with ExitStack() as stack:
        for cmd in doc_steps(doc):
            if isinstance(cmd, Snippet):
                run_snippet(cmd, namespace, port)
                continue
            how = kind(cmd)
            if how == "spanseek":
                run_spanseek(cmd, tmp_path)
            elif how == "parse":
                run_parse_only(cmd)
            elif how == "serve":
                port = stack.enter_context(serving(cmd, tmp_path))
            elif how == "curl":
                run_curl(cmd, tmp_path, port)


def test_the_readme_error_example_is_what_the_command_prints(tmp_path, monkeypatch, capsys):
    """The README quotes the line a usage error prints; the command, run as the quote says, prints that line (the
    reader's working directory, ``/home/me`` there, where it names an absolute path)."""
    text = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    m = re.search(r"as `(spanseek corpus from-squad: error: (\S+): cannot be written: [^`]+)`", text)
    assert m, "README.md no longer quotes the error of corpus from-squad"
    monkeypatch.chdir(tmp_path)
    (tmp_path / "dev-v1.1.json").write_text(json.dumps(make_squad()))
    Path(m.group(2)).parent.write_text("")  # the folder the output needs is a file
    capsys.readouterr()
    try:
        status = spanseek_main(["corpus", "from-squad", "dev-v1.1.json", "--out", m.group(2)])
    except SystemExit as e:
        status = e.code
    assert status == 2
    assert capsys.readouterr().err.strip() == m.group(1).replace("/home/me", str(tmp_path))


# Every page that shows commands: the pages above run theirs; the others' flags are checked here.
ALL_PAGES = sorted({"README.md", "bench/README.md", *(str(p.relative_to(ROOT)) for p in ROOT.glob("docs/*.md")),
                    *(str(p.relative_to(ROOT)) for p in ROOT.glob("core/models/*/README.md"))})


@cache
def parser() -> argparse.ArgumentParser:
    return build_parser()


@cache
def help_flags(words: tuple[str, ...]) -> frozenset[str] | None:
    """The flags ``spanseek WORDS --help`` lists, or None where spanseek has no such command."""
    out = StringIO()
    with redirect_stdout(out), redirect_stderr(StringIO()):
        try:
            parser().parse_args([*words, "--help"])
        except SystemExit as e:
            if e.code:
                return None
    return frozenset(re.findall(r"(?<![\w-])--[\w-]+", out.getvalue()))


def bench_flags(script: Path) -> set[str]:
    """The flags a bench script declares: its string constants that start with ``--``."""
    return {node.value for node in ast.walk(ast.parse(script.read_text())) if isinstance(node, ast.Constant)
            and isinstance(node.value, str) and node.value.startswith("--")}


def unknown_flags(cmd: Command) -> list[str]:
    """What of ``cmd`` spanseek or the bench script it runs does not know: a command, a script, or a ``--flag``
    (``...`` and ``[--flag N]`` in a page's command are placeholders; ``a|b`` names either command)."""
    argv = [w.strip("[]") for w in cmd.argv]
    while len(argv) > 1 and re.fullmatch(r"[A-Z_]+=\S*", argv[0]):  # VAR=value before the command
        argv = argv[1:]
    flags = [w.split("=")[0] for w in argv if w.startswith("--")]
    if argv[0] == "spanseek":
        words = tuple(w for w in argv[1:next((i for i, w in enumerate(argv) if w.startswith("-")), len(argv))])
        known: set[str] = set()
        for alternative in (words[:2] if len(words) > 1 and "|" in words[1] else ()) or [""]:
            command = words if not alternative else (words[0], *words[1].split("|"))
            for choice in ([(command[0], c) for c in command[1:]] if alternative else [command]):
                listed = help_flags(choice)
                if listed is None:
                    return [f"{cmd}: spanseek has no command {' '.join(choice)!r}"]
                known |= listed
    elif argv[0] in ("python", "python3") and len(argv) > 1 and argv[1].startswith("bench/") and argv[1] != "bench/...":
        script = ROOT / argv[1]
        if not script.is_file():
            return [f"{cmd}: there is no {argv[1]}"]
        known = bench_flags(script)
    else:
        return []
    return [f"{cmd}: {flag} is not a flag of {' '.join(argv[:2])}" for flag in flags if flag not in known]


INLINE = re.compile(r"`(spanseek [^`]+)`")


def inline_commands(doc: str, text: str | None = None) -> list[Command]:
    """The ``spanseek ...`` commands ``doc`` names in its prose (inline code, outside its shell blocks); not the lines
    it quotes (``spanseek sync: interrupted: ...``) nor those whose command is a placeholder (``spanseek train JOB``,
    ``spanseek ...``)."""
    text = FENCE.sub(lambda block: "\n" * block.group(0).count("\n"), text or (ROOT / doc).read_text())
    out = []
    for m in INLINE.finditer(text):
        try:
            argv = tuple(shlex.split(m.group(1)))
        except ValueError:  # a quoted message with an apostrophe
            continue
        words = argv[1:next((i for i, w in enumerate(argv) if w.startswith("-")), len(argv))]
        if any(w.endswith(":") or w == "..." or re.fullmatch(r"[A-Z][A-Z_]*", w) for w in words[:2]):
            continue
        out.append(Command(doc, text.count("\n", 0, m.start()) + 1, argv))
    return out


@pytest.mark.parametrize("doc", ALL_PAGES)
def test_every_page_command_uses_commands_and_flags_that_exist(doc):
    assert [problem for cmd in doc_commands(doc) for problem in unknown_flags(cmd)] == []


@pytest.mark.parametrize("doc", ALL_PAGES)
def test_every_command_a_page_names_in_its_prose_exists_with_its_flags(doc):
    assert [problem for cmd in inline_commands(doc) for problem in unknown_flags(cmd)] == []


def test_a_prose_command_with_a_flag_that_does_not_exist_is_caught():
    text = ("Run `spanseek index build --corpus c.jsonl --factroy auto`, then `spanseek train JOB --help`;\n"
            "it says `spanseek sync: interrupted: stopped`.\n\n```bash\nspanseek serve --port 1\n```\n")
    commands = inline_commands("page.md", text)
    assert [cmd.text for cmd in commands] == ["spanseek index build --corpus c.jsonl --factroy auto"]
    assert unknown_flags(commands[0]) == ["page.md:1: spanseek index build --corpus c.jsonl --factroy auto: --factroy "
                                          "is not a flag of spanseek index"]
    assert sum(len(inline_commands(doc)) for doc in ALL_PAGES) > 100  # the pages' prose is read


def test_a_flag_that_does_not_exist_is_caught():
    def cmd(text: str) -> Command:
        return Command("page.md", 1, tuple(shlex.split(text)))
    assert unknown_flags(cmd("spanseek index build --corpus c.jsonl --out idx --factory auto")) == []
    assert unknown_flags(cmd("spanseek index verify work/idx [--sample 1000] [--nprobe N]")) == []
    assert unknown_flags(cmd("spanseek index upsert|delete|compact ... --dry-run")) == [
        "page.md:1: spanseek index upsert|delete|compact ... --dry-run: --dry-run is not a flag of spanseek index"]
    assert unknown_flags(cmd("spanseek index build --corpus c.jsonl --out idx --factroy auto")) == [
        "page.md:1: spanseek index build --corpus c.jsonl --out idx --factroy auto: --factroy is not a flag of "
        "spanseek index"]
    assert unknown_flags(cmd("spanseek index rebuild --out idx")) == [
        "page.md:1: spanseek index rebuild --out idx: spanseek has no command 'index rebuild'"]
    assert unknown_flags(cmd("python bench/search_throughput.py --index idx --n-questoins 8")) == [
        "page.md:1: python bench/search_throughput.py --index idx --n-questoins 8: --n-questoins is not a flag of "
        "python bench/search_throughput.py"]
    assert unknown_flags(cmd("python bench/nowhere.py --out x")) == ["page.md:1: python bench/nowhere.py --out x: "
                                                                     "there is no bench/nowhere.py"]
    multi = doc_commands("docs/service.md")  # a JSON body quoted over several lines is one argument
    assert any(c.argv[0] == "curl" and '"filter"' in c.argv[-1] and "\n" in c.argv[-1] for c in multi)


def test_the_readme_says_a_search_run_loads_and_times_nothing(monkeypatch):
    """How a run picks its precision and runtime is read from the CPU, not timed at start-up (core.encoding,
    core.runtime), and the README's account of a run's start-up says so by naming no timing."""
    import time

    import torch

    from spanseek.core.encoding import pick_precision
    from spanseek.core.runtime import pick_runtime

    def no_clock() -> float:
        raise AssertionError("a start-up choice read the clock")
    for clock in ("perf_counter", "monotonic", "time", "process_time"):
        monkeypatch.setattr(time, clock, no_clock)
    precision = pick_precision("auto", torch.device("cpu"))
    assert pick_runtime("auto", "cpu", precision) in ("onnx", "torch")
    monkeypatch.undo()
    text = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    m = re.search(r"Each run first loads the model and the index[^.]*\.", text)
    assert m, "README.md no longer says what a search run does first"
    assert not re.search(r"\btim(es|ing|ed)\b", m.group(0)), m.group(0)


def make_targets() -> tuple[set[str], set[str]]:
    """The Makefile's targets with a rule, and those it declares phony."""
    text = (ROOT / "Makefile").read_text(encoding="utf-8")
    rules = set(re.findall(r"^([\w-]+):(?!=)", text, re.MULTILINE))
    phony = {name for line in re.findall(r"^\.PHONY:(.*)$", text, re.MULTILINE) for name in line.split()}
    return rules, phony


def test_every_make_target_the_pages_name_has_a_rule():
    """`bench` was declared phony with no rule: `make bench` did nothing ("Nothing to be done for 'bench'")."""
    rules, phony = make_targets()
    assert phony - rules == set()
    named = {m.group(1) for doc in ALL_PAGES for m in re.finditer(r"`make ([a-z][\w-]*)", (ROOT / doc).read_text())}
    named |= {cmd.argv[1] for doc in ALL_PAGES for cmd in doc_commands(doc) if cmd.argv[:1] == ("make",)}
    assert named and named - rules == set()


# the modules that stop their command on SIGTERM as on Ctrl-C (exit status 130) -> the words the README names it by
STOPPING_MODULES = {"indexer/build.py": ["a build"], "indexer/add.py": ["an add", "upsert"],
                    "indexer/lifecycle.py": ["delete", "compact"], "spanseek/sync.py": ["a `sync`"],
                    "trainer/stopping.py": ["a training run"]}


def test_the_readme_names_every_command_that_sigterm_stops_with_status_130():
    """The README's exit statuses listed the commands a SIGTERM stops with status 130 and left out ``index delete`` and
    ``sync``, which take it as the others do."""
    taking = {str(path.relative_to(ROOT)) for package in ("core", "indexer", "service", "spanseek", "trainer")
              for path in (ROOT / package).rglob("*.py") if path.name != "interrupt.py"
              and re.search(r"\b(stopped_cleanly|taking_stops)\(", path.read_text(encoding="utf-8"))}
    assert taking == set(STOPPING_MODULES), "a module takes SIGTERM: name its command here and in the README"
    said = re.search(r"130 when Ctrl-C stopped it, or SIGTERM stopped ([^(]*)\(",
                     " ".join((ROOT / "README.md").read_text(encoding="utf-8").split()))
    assert said, "README.md no longer lists the commands a SIGTERM stops with status 130"
    assert [name for names in STOPPING_MODULES.values() for name in names
            if not re.search(rf"(^|, | or ){re.escape(name)}(,| or |\s*$)", said.group(1))] == []
