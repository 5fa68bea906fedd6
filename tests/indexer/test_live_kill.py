"""kill -9 of the live writer at each step of its writes and merges: after a restart every acknowledged write is
there, the write the kill cut short is there whole or not at all, the store loads, its live directory holds no
leftover, and searches return what an index built from scratch over the same documents returns.

A child process opens a ``LiveStore`` over a copy of the tiny index and runs ``PLAN`` (writes, then a merge with
writes made while it builds, then more writes and a second merge, which removes the first merged base), recording each
write it has acknowledged; one step of it (``POINTS``) is patched to kill the process (SIGKILL) before or after it
runs, as ``tests/indexer/test_add_crash.py`` does for `index add`. The parent then opens the live directory again.

    .venv/bin/python -m pytest -q tests/indexer/test_live_kill.py            (-m slow: every kill point)
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from spanseek.core.io import document_from_json, write_corpus
from spanseek.core.params import SearchParams
from tests.conftest import make_corpus
from tests.kill_step import KILL_AT

ROOT = Path(__file__).resolve().parents[2]
QUESTIONS = ["When did Alba build the castle?", "Who built the river bridge?", "empire battle treaty"]
SEARCHED = [("phrase", "dense"), ("passage", "hybrid"), ("doc", "lexical"), ("doc", "hybrid")]


def plan() -> list[tuple]:
    """The writes the child makes, in order: ("upsert", docs), ("delete", ids), or ("merge", writes made while the
    merge builds its base). Adds, replacements of base and segment documents, deletes of both, before, during and
    after the merges."""
    new = [{**d, "id": f"n{i}", "title": f"New {i}"} for i, d in enumerate(make_corpus(seed=1, n_docs=6, n_paras=2))]
    again = [{**d, "title": "Again"} for d in make_corpus(seed=2, n_docs=3, n_paras=2)]
    return [("upsert", new[:2]), ("upsert", [{**again[0], "id": "d1"}]), ("delete", ["d3"]),
            ("upsert", [{**again[1], "id": "n0"}]),  # a segment document replaced: its run built again
            ("merge", [("upsert", [new[2]]), ("delete", ["n1"]), ("upsert", [{**again[2], "id": "d2"}])]),
            ("upsert", [new[3], {**new[0], "id": "d4"}]), ("delete", ["n2", "d0"]),
            ("merge", [("upsert", [new[4]])]), ("upsert", [new[5]])]


def writes_in_order() -> list[tuple]:
    """``plan``'s writes, one by one, in the order the child makes them (a merge's in its place)."""
    return [w for step in plan() for w in (step[1] if step[0] == "merge" else [step])]


def live_corpus(acked: int, cut_short: bool) -> list[dict]:
    """The live documents after the first ``acked`` writes (and the next one, ``cut_short``): the base's in its
    order, then the written ones in write order (a replaced one moves to the end), as a build from scratch holds them."""
    docs = {d["id"]: d for d in make_corpus()}
    for op, arg in writes_in_order()[:acked + cut_short]:
        for d in arg:
            docs.pop(d["id"] if op == "upsert" else d, None)
            if op == "upsert":
                docs[d["id"]] = d
    return list(docs.values())


# The child: patch one step to kill the process (tests/kill_step.py), then run the plan, appending a line to the ack
# file for each write acknowledged. A merge runs in a thread, and its writes are made while it builds its base.
CHILD = KILL_AT + r"""
import json, sys, threading
index, live_dir, model, acks, target, n, when, plan_file = sys.argv[1:9]
kill_at(target, n, when)
import spanseek.indexer.live as live
from spanseek.core.io import document_from_json
from spanseek.core.model import load_model
from spanseek.core.phrase_index import PhraseIndex
from spanseek.core import segment_log
from spanseek.indexer.build import BuildOptions
segment_log.INLINE_RUN = 1  # runs of two documents and more are joined by the joining thread
during, built = threading.Event(), threading.Event()
build_merged = live.build_merged
def waiting(*args, **kwargs):  # the writes made during a merge are made while it builds
    during.set()
    built.wait()
    return build_merged(*args, **kwargs)
live.build_merged = waiting
encoder = live.DocumentEncoder(load_model(model), None, precision="fp32", chunk_tokens=40)
store = live.LiveStore(live_dir, index, PhraseIndex(live.base_dir(live_dir, index)), encoder, lambda snap: None,
                       model)
done = open(acks, "a")
def write(op, arg):
    if op == "upsert":
        docs = [document_from_json(d, "plan") for d in arg]
        store.upsert(docs, [encoder.encode(d) for d in docs])
    else:
        store.delete(arg)
    done.write("w\n")
    done.flush()
for op, arg in json.load(open(plan_file)):
    if op != "merge":
        write(op, arg)
        segment_log.wait_for_joins()
        continue
    during.clear(), built.clear()
    merged = []
    thread = threading.Thread(target=lambda: merged.append(store.merge(
        BuildOptions(shard_passages=7, progress=False, precision="fp32"))))
    thread.start()
    during.wait()
    for w in arg:
        write(*w)
    built.set()
    thread.join()
    assert merged and merged[0] is not None, merged
    segment_log.wait_for_joins()
"""

STATE = "spanseek.indexer.live:write_json_atomic"
# where the child dies: (step patched, its call, before/after/half). Each write appends to the log once; the first
# start writes state.json once (call 1), each merge twice (rotation, commit); the first merge's base is
# bases/base-000001, the second's base-000002, which removes the first.
POINTS = {
    "log line torn": ("os:write", "wal-000001.jsonl#3", "half"),
    "logged, not applied": ("spanseek.indexer.wal:WriteAheadLog.append", "2", "after"),
    "applied, not published": ("spanseek.indexer.live:LiveStore._publish_committed", "3", "before"),
    "published, not acknowledged": ("spanseek.indexer.live:LiveStore._publish_committed", "4", "after"),
    "a segment run built again": ("spanseek.core.segment_log:SegmentChunks._left", "1", "before"),
    "a run joined": ("spanseek.core.segment_log:SegmentChunks.join", "2", "before"),
    "merge: log rotated": (STATE, "state.json#2", "after"),
    "merge: a write during it logged": ("spanseek.indexer.wal:WriteAheadLog.append", "6", "after"),
    "merge: base built, not renamed": ("spanseek.indexer.lifecycle:compact_index", "1", "after"),
    "merge: base renamed": ("pathlib:Path.rename", "base-000001#1", "after"),
    "merge: base verified, not swapped": ("spanseek.indexer.live:open_verified", "1", "after"),
    "merge: BM25 terms of the new base": ("spanseek.core.live_lexical:BaseTerms.of", "2", "before"),
    "merge: committed": (STATE, "state.json#3", "after"),
    "merge: followers pointed": ("spanseek.indexer.live:switch_alias", "2", "after"),
    "merge: old log removed": ("pathlib:Path.unlink", "wal-000001.jsonl#1", "after"),
    "second merge: old base being removed": ("shutil:rmtree", "base-000001#2", "before"),
    "second merge: old base removed": ("shutil:rmtree", "base-000001#2", "after"),
}
# by default one point, past a merge and the writes made during it (a torn last log line is dropped at replay in
# tests/indexer/test_live.py, in process); each point costs a child that loads the model and runs the plan up to it
FAST = ("merge: committed",)


def decoded(d: dict):
    out = document_from_json(d, "plan")
    assert out is not None
    return out


@pytest.fixture(scope="module")
def scratch(tmp_path_factory, tiny_model_dir):
    """The hits of an index built from scratch over the live documents after a number of writes (and the one a kill
    cut short), built at the first ask."""
    from spanseek.core.loading import open_searcher
    from spanseek.indexer.build import BuildOptions, build_index

    tmp, built = tmp_path_factory.mktemp("scratch"), {}

    def hits(acked: int, cut_short: bool) -> list:
        corpus = live_corpus(acked, cut_short)
        key = json.dumps(corpus, sort_keys=True)
        if key not in built:
            out = tmp / f"index-{len(built)}"
            write_corpus(out.with_suffix(".jsonl"), [decoded(d) for d in corpus])
            build_index(out.with_suffix(".jsonl"), tiny_model_dir, out,
                        BuildOptions(shard_passages=7, progress=False, precision="fp32"))
            built[key] = searched(open_searcher(out, tiny_model_dir, device="cpu", precision="fp32"))
        return built[key]
    return hits


def searched(searcher) -> list:
    out = []
    for unit, mode in SEARCHED:
        for hits in searcher.search(QUESTIONS, SearchParams(unit, 5, mode=mode)):
            out.append([(h.doc_id, h.paragraph, h.text, h.start, h.end, round(h.score, 3)) for h in hits])
    return out


def run_child(index: Path, live_dir: Path, model: Path, acks: Path, point: tuple[str, str, str]) -> int:
    plan_file = acks.with_name("plan.json")
    plan_file.write_text(json.dumps(plan()))
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "OMP_WAIT_POLICY": "PASSIVE"}
    proc = subprocess.run([sys.executable, "-c", CHILD, str(index), str(live_dir), str(model), str(acks), *point,
                           str(plan_file)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == -signal.SIGKILL, f"the child was not killed at {point}: {proc.stderr[-3000:]}"
    return sum(1 for line in acks.read_text().splitlines() if line == "w") if acks.exists() else 0


def check_restart(index: Path, live_dir: Path, model: Path, acked: int, scratch) -> None:
    """Open the live directory again: the documents are those after the acknowledged writes, and the one cut short
    whole or not at all; nothing is left of a merge cut short; searches are a fresh build's."""
    from spanseek.core.alias import resolve_alias
    from spanseek.core.loading import open_searcher
    from spanseek.core.model import load_model
    from spanseek.core.segment import searcher_over
    from spanseek.indexer.live import DocumentEncoder, LiveStore, base_dir, read_state

    base = base_dir(live_dir, index)
    searcher = open_searcher(base, model, device="cpu", precision="fp32")
    published: list = []
    store = LiveStore(live_dir, index, searcher.index, DocumentEncoder(load_model(model), None, precision="fp32"),
                      lambda snap: published.append(searcher_over(searcher, snap)), model)
    try:
        held = {i: store.get(i) for i in {d["id"] for d in make_corpus()} | {
            d["id"] for _, arg in writes_in_order() for d in arg if isinstance(d, dict)}}
        found = {i: (d["title"], d["paragraphs"]) for i, d in held.items() if d is not None}
        ways = {cut: {d["id"]: (d["title"], d["paragraphs"]) for d in live_corpus(acked, cut)} for cut in (False, True)}
        assert found in ways.values(), f"after {acked} acknowledged writes the store holds {sorted(found)}"
        cut = found == ways[True] and ways[True] != ways[False]
        assert store.documents == len(found)
        assert searched(published[-1]) == scratch(acked, cut)
        state = read_state(live_dir, index)
        assert sorted(p.name for p in (live_dir / "wal").iterdir()) == sorted(state["wals"])
        assert [p.name for p in (live_dir / "bases").iterdir()] == ([] if state["base"] is None else [base.name])
        assert resolve_alias(live_dir / "merged").target == base.resolve()
    finally:
        store.close()


def kill_and_restart(tmp_path, tiny_index, tiny_model_dir, scratch, point: str) -> None:
    import shutil

    index = tmp_path / "index"
    shutil.copytree(tiny_index, index)
    live_dir, acks = tmp_path / "live", tmp_path / "acks"
    acked = run_child(index, live_dir, tiny_model_dir, acks, POINTS[point])
    check_restart(index, live_dir, tiny_model_dir, acked, scratch)


@pytest.mark.parametrize("point", [p if p in FAST else pytest.param(p, marks=pytest.mark.slow) for p in POINTS])
def test_a_writer_killed_keeps_every_acknowledged_write_and_searches_as_a_fresh_build(point, tmp_path, tiny_index,
                                                                                    tiny_model_dir, scratch):
    kill_and_restart(tmp_path, tiny_index, tiny_model_dir, scratch, point)
