"""kill -9 of `spanseek serve --writes` while documents are written: after each restart every acknowledged document
is back and searchable, and the write the kill cut short is there whole or not at all (the log's replay).

    .venv/bin/python -m pytest -q -m slow tests/service/test_live_crash.py
"""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from tests.conftest import make_corpus

ROOT = Path(__file__).resolve().parents[2]
KEY = {"X-API-Key": "k"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve(index: Path, model: Path, live_dir: Path, port: int) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "spanseek.cli", "serve", "--index", str(index), "--model", str(model), "--device",
           "cpu", "--precision", "fp32", "--no-warmup", "--port", str(port), "--writes", "--api-key", "k",
           "--live-dir", str(live_dir), "--merge-tokens", "0", "--log-level", "warning"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "OMP_WAIT_POLICY": "PASSIVE"}
    return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def wait_ready(client: httpx.Client, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + 120
    while True:
        assert proc.poll() is None, proc.stderr.read().decode()[-3000:] if proc.stderr else ""
        try:
            if client.get("/ready").status_code == 200:
                return
        except httpx.TransportError:
            pass
        assert time.monotonic() < deadline, "the service did not become ready"
        time.sleep(0.1)


def state_of(client: httpx.Client, doc: dict) -> tuple[bool, bool]:
    """(GET returns it whole, a search filtered to it finds it)."""
    got = client.get(f"/documents/{doc['id']}", headers=KEY)
    whole = got.status_code == 200 and got.json()["paragraphs"] == doc["paragraphs"]
    r = client.post("/search?unit=doc", headers=KEY,
                    json={"query": doc["paragraphs"][0][:100], "top_k": 1, "filter": {"doc_ids": [doc["id"]]}})
    return whole, any(h["doc_id"] == doc["id"] for h in r.json()["results"][0]["hits"])


@pytest.mark.slow
def test_kill_9_during_writes_loses_no_acknowledged_document(tmp_path, tiny_index, tiny_model_dir):
    rng = random.Random(3)
    docs = [{**d, "id": f"k{i}"} for i, d in enumerate(make_corpus(seed=11, n_docs=16, n_paras=2))]
    kills = {2, 5, 9, 13}
    port = free_port()
    proc = serve(tiny_index, tiny_model_dir, tmp_path / "live", port)
    acked: list[dict] = []
    cut_short = 0
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60) as client:
            wait_ready(client, proc)
            for i, doc in enumerate(docs):
                if i not in kills:
                    assert client.put("/documents", headers=KEY, json=doc).status_code == 200
                    acked.append(doc)
                    continue
                answer: list[int] = []

                def put(d: dict = doc, out: list[int] = answer) -> None:
                    try:
                        out.append(client.put("/documents", headers=KEY, json=d).status_code)
                    except httpx.TransportError:
                        out.append(0)

                writer = threading.Thread(target=put)
                writer.start()
                time.sleep(rng.uniform(0.0, 0.15))
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait()
                writer.join()
                if answer == [200]:
                    acked.append(doc)
                proc = serve(tiny_index, tiny_model_dir, tmp_path / "live", port)
                wait_ready(client, proc)
                for d in acked:
                    assert state_of(client, d) == (True, True), d["id"]
                if answer != [200]:
                    cut_short += 1
                    whole, found = state_of(client, doc)
                    assert whole == found, f"{doc['id']} is half there"
    finally:
        proc.kill()
        proc.wait()
    assert len(acked) >= len(docs) - len(kills)
