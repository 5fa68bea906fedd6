"""`make demo`: index the bundled demo corpus (once), start the search service on it and show working curl calls.

The index goes to ``work/demo-index`` and is reused by later runs. Then ``spanseek serve`` runs on
http://127.0.0.1:8000 (a subprocess, so nothing here imports the service), and once /ready says yes the demo
runs real ``curl`` commands for the three units, prints each with its JSON answer, and keeps serving until Ctrl-C.

Environment:
    SPANSEEK_DEMO_NO_SERVE=1     only print in-process answers (no service)
    SPANSEEK_DEMO_HOST / _PORT   where the service listens (default 127.0.0.1:8000)
    SPANSEEK_DEMO_MODEL / _INDEX another model / index directory (default: the bundled model, work/demo-index)
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import textwrap
import time
import urllib.error
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
# In a checkout (`make demo`) the corpus is the repository's data/demo and the index goes to its work/; an installed
# wheel carries the corpus as spanseek/data/demo and builds the index under the working directory.
ROOT = HERE.parent if (HERE.parent / "pyproject.toml").is_file() else Path.cwd()
CORPUS = next((p for p in (HERE / "data" / "demo" / "corpus.jsonl.gz", HERE.parent / "data" / "demo" / "corpus.jsonl.gz")
               if p.is_file()), HERE / "data" / "demo" / "corpus.jsonl.gz")
INDEX = ROOT / "work" / "demo-index"
QUESTIONS = [
    "When did the iPod become the leader in digital music device sales?",
    "Until what year was the US the only country with the atomic bomb?",
    "Who was Tito an ally of after the Second World War?",
    "What stadium in Paris was built for the 1998 FIFA World Cup?",
    "What is the capital of the Republic of the Congo?",
]
# (unit, request body) of the curl examples
CURL_EXAMPLES = [
    ("phrase", {"query": QUESTIONS[3], "top_k": 3}),
    ("passage", {"queries": QUESTIONS[:2], "top_k": 2}),
    ("doc", {"query": QUESTIONS[2], "top_k": 2}),
]


def say(*parts: object, file=None) -> None:
    """Write one line of the demo's output (this module is a command-line program, not library code)."""
    stream = file or sys.stdout
    stream.write(" ".join(str(p) for p in parts) + "\n")
    stream.flush()


def ensure_index(corpus: Path = CORPUS, index: Path = INDEX, model: str = "default") -> Path:
    import shutil

    from spanseek.core.model import model_fingerprint, phrase_fingerprint, resolve_model
    from spanseek.core.phrase_index import MANIFEST, Manifest
    from spanseek.indexer.build import BuildOptions, build_index

    model_dir = resolve_model(model)
    built = Manifest.load(index) if (index / MANIFEST).exists() else None
    if built is not None and model_fingerprint(model_dir) != built.model_fingerprint \
            and phrase_fingerprint(model_dir) != built.phrase_fingerprint:
        say(f"the demo index in {index} was built with another model; rebuilding it", file=sys.stderr)
        shutil.rmtree(index)
    if (index / MANIFEST).exists():
        say(f"reusing the demo index in {index}", file=sys.stderr)
    else:
        say(f"building the demo index of {corpus.name} in {index} (a few minutes on 2 cores) ...", file=sys.stderr)
        build_index(corpus, model, index, BuildOptions())
    return index


def print_answers(index: Path, model: str) -> None:
    """Answer the demo questions in-process (no service) and print the top hits of every unit."""
    from spanseek.core.loading import open_searcher
    from spanseek.core.params import UNITS, SearchParams

    searcher = open_searcher(index, model)
    for unit in UNITS:
        say(f"\n=== unit={unit} ===")
        for q, hits in zip(QUESTIONS, searcher.search(QUESTIONS, SearchParams(unit=unit, top_k=3)), strict=True):
            say(f"\nQ: {q}")
            for r, h in enumerate(hits, 1):
                say(f"  {r}. {h.text!r}  [{h.title}]  score={h.score:.2f}")
                if unit != "phrase" and r == 1:
                    ctx = h.passage[max(0, h.start - 150) : h.end + 150]
                    say(textwrap.indent(textwrap.fill("..." + ctx + "...", 100), "     | "))


def check_port_free(host: str, port: int) -> None:
    """Raise RuntimeError naming the port when another process already listens on ``host:port``: the demo would
    otherwise find that server ready and show its answers as the demo's, while its own service fails to start."""
    import socket

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds: a closing socket is no reason
        try:
            sock.bind((host, port))
        except OSError as e:
            raise RuntimeError(f"cannot serve the demo on {host}:{port}: {e.strerror or e} (another service is "
                               f"listening there?); stop it, or choose another port: SPANSEEK_DEMO_PORT={port + 1} "
                               "make demo") from None


def wait_ready(base: str, proc: subprocess.Popen, timeout: float = 600) -> None:
    """Poll /ready until 200; fail if the service process exits or the timeout passes."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the service exited with status {proc.returncode}")
        try:
            with urllib.request.urlopen(base + "/ready", timeout=2) as r:
                if r.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.5)
    raise RuntimeError(f"the service was not ready after {timeout:.0f} s")


def shorten(response: dict, width: int = 160) -> dict:
    """The JSON answer with each hit's passage cut to ``width`` characters around the answer, for display."""
    for result in response.get("results", []):
        for h in result["hits"]:
            a = max(0, h["start"] - width // 2)
            cut = h["passage"][a : a + width]
            h["passage"] = ("..." if a else "") + cut + ("..." if a + width < len(h["passage"]) else "")
    return response


def run_curl(base: str, unit: str, body: dict) -> tuple[str, dict]:
    """The curl command for one example and its JSON answer (run with curl, or urllib where curl is missing)."""
    url = f"{base}/search?unit={unit}"
    data = json.dumps(body, ensure_ascii=False)
    cmd = ["curl", "-s", "-X", "POST", url, "-H", "Content-Type: application/json", "-d", data]
    if shutil.which("curl"):
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=True).stdout
    else:
        req = urllib.request.Request(url, data=data.encode(), headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=120) as r:
            out = r.read().decode()
    return shlex.join(cmd), json.loads(out)


def serve(index: Path, model: str, host: str, port: int) -> int:
    """Start ``spanseek serve`` on the index, print curl examples with their answers, serve until Ctrl-C."""
    base = f"http://{host}:{port}"
    check_port_free(host, port)
    cmd = [sys.executable, "-m", "spanseek.cli", "serve", "--index", str(index), "--model", model,
           "--host", host, "--port", str(port), "--log-level", "warning"]
    say(f"starting the service: {shlex.join(cmd)}", file=sys.stderr)
    # On shared or CPU-quota-limited hosts OpenMP's spin-waiting makes each forward pass many times slower.
    env = {"OMP_WAIT_POLICY": "PASSIVE", **os.environ, "HF_HUB_OFFLINE": os.environ.get("HF_HUB_OFFLINE", "1")}
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env)
    try:
        say("waiting until it is ready: it loads the model and the index, then times and warms up the encoder "
            "(28 s on 2 busy cores) ...", file=sys.stderr)
        wait_ready(base, proc)
        say(f"\nspanseek is serving {index} on {base} (OpenAPI: {base}/docs, metrics: {base}/metrics)\n")
        for unit, body in CURL_EXAMPLES:
            command, answer = run_curl(base, unit, body)
            say(f"$ {command}")
            say(json.dumps(shorten(answer), indent=2, ensure_ascii=False), "\n")
        say(f"more: curl -s {base}/info (the index, model and settings); the API with examples: {base}/docs\n")
        say(f"serving on {base} until Ctrl-C ...")
        return proc.wait()
    except KeyboardInterrupt:
        say("\nstopping the service", file=sys.stderr)
        return 0
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()


def demo_port() -> int:
    """``SPANSEEK_DEMO_PORT`` (default 8000); ValueError naming the variable when it is not a TCP port."""
    value = os.environ.get("SPANSEEK_DEMO_PORT") or "8000"
    try:
        port = int(value)
    except ValueError:
        port = 0
    if not 1 <= port <= 65535:
        raise ValueError(f"SPANSEEK_DEMO_PORT={value!r} is not a port: give a number from 1 to 65535")
    return port


def main() -> int:
    """Build (or reuse) the demo index and serve it; bad settings, a failed build or service are one line on stderr
    (status 2 for a setting, 1 otherwise), Ctrl-C is status 130 (a build resumes where it stopped), output piped into
    a reader that stopped (``| head``) status 0, quietly."""
    try:
        model = os.environ.get("SPANSEEK_DEMO_MODEL", "default")
        host = os.environ.get("SPANSEEK_DEMO_HOST", "127.0.0.1")
        no_serve = os.environ.get("SPANSEEK_DEMO_NO_SERVE", "") not in ("", "0")
        port = 0 if no_serve else demo_port()
        from transformers.utils import logging as hf_logging

        hf_logging.set_verbosity_error()
        hf_logging.disable_progress_bar()
        index = ensure_index(index=Path(os.environ.get("SPANSEEK_DEMO_INDEX", INDEX)), model=model)
        if no_serve:
            print_answers(index, model)
            return 0
        return serve(index, model, host, port)
    except BrokenPipeError:  # `make demo | head`: the reader took what it wanted (the service, if any, is stopped)
        from spanseek.cli import reader_gone

        reader_gone()
        return 0
    except ValueError as e:  # a setting (the model, the port) or the corpus
        say(f"spanseek demo: error: {e}", file=sys.stderr)
        return 2
    except (RuntimeError, OSError) as e:  # the build or the service failed, or the disk refused
        say(f"spanseek demo: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        say("spanseek demo: interrupted (run it again: an index build resumes where it stopped)", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
