"""`index add` is idempotent and crash-safe.

Running the same add twice changes nothing the second time (a clear refusal); an add killed with SIGKILL at any
of several points (a child process whose chosen step kills itself) leaves an index that opens and verifies,
holding either none or all of the new documents (rolled back or forward when it is opened); running the add again
then gives the same index as an uninterrupted add.

    .venv/bin/python -m pytest -q tests/indexer/test_add_crash.py            (-m slow: every crash point)
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys

import pytest

from spanseek.core import integrity, phrase_index
from spanseek.core.encoding import PassageEncoder
from spanseek.core.io import CorpusError
from spanseek.core.phrase_index import PhraseIndex
from spanseek.indexer.add import add_documents
from spanseek.indexer.build import BuildOptions, build_index
from spanseek.indexer.verify import verify_index
from tests.conftest import make_corpus
from tests.kill_step import KILL_AT

OPTS = BuildOptions(factory="IVF4,SQ8", shard_passages=3, progress=False, precision="fp32", gpu=False)

# The child: patch one step so that it kills the process (before or after the real step runs), then add (or, given
# a last argument, upsert or compact: tests/indexer/test_lifecycle.py). The step is its n-th call, or (n not a
# number) the call with an argument ending in n; with journal_only, only calls made while the journal exists count.
CHILD = KILL_AT + r"""
import sys
from pathlib import Path
index, corpus, model, target, n, when, journal_only = sys.argv[1:8]
kill_at(target, n, when, lambda: journal_only != "1" or (Path(index) / "add.journal.json").exists())
from spanseek.indexer.add import add_documents, upsert_documents
from spanseek.indexer.build import BuildOptions
from spanseek.indexer.lifecycle import compact_index
opts = BuildOptions(factory="IVF4,SQ8", shard_passages=3, progress=False, precision="fp32", gpu=False)
change = sys.argv[8] if len(sys.argv) > 8 else "add"
if change == "compact":
    compact_index(index, opts)
else:
    (upsert_documents if change == "upsert" else add_documents)(index, corpus, model=model, opts=opts)
"""

# where the child dies: (step, n, before/after, journal_only) -> the add is rolled back or forward on opening
POINTS = {
    "encoding": (("spanseek.indexer.shards:encode_shard", "2", "before", "0"), "back"),
    "new stores": (("spanseek.indexer.add:_concat_jsonl", "1", "after", "0"), "back"),
    "before the journal": (("os:replace", integrity.JOURNAL, "before", "0"), "back"),
    "first rename": (("os:replace", "1", "before", "1"), "forward"),
    "mid renames": (("os:replace", "4", "after", "1"), "forward"),
    "manifest written": (("spanseek.core.phrase_index:Manifest.write", "1", "after", "0"), "forward"),
    "journal removed": (("pathlib:Path.unlink", integrity.JOURNAL, "after", "0"), "forward"),
}
FAST = ("encoding", "before the journal", "mid renames", "manifest written")


def _write(path, docs):
    path.write_text("".join(json.dumps(d) + "\n" for d in docs))
    return path


@pytest.fixture(scope="module")
def setup(tmp_path_factory, tiny_model_dir):
    """A base index, a corpus of new documents, and the index an uninterrupted add gives."""
    d = tmp_path_factory.mktemp("crash")
    base = _write(d / "base.jsonl", make_corpus(seed=5, n_docs=8, n_paras=4))
    more = _write(d / "more.jsonl", [{**doc, "id": f"new-{i}"} for i, doc in enumerate(make_corpus(seed=6, n_docs=4, n_paras=2))])
    built = d / "built"
    build_index(base, tiny_model_dir, built, OPTS)
    reference = d / "reference"
    shutil.copytree(built, reference)
    add_documents(reference, more, model=tiny_model_dir, opts=OPTS)
    return built, more, reference


def _contents(index_dir) -> dict:
    """Every recorded file's checksum (what an identical index must share), but the BM25 part's: its vocabulary
    order follows Python's per-process string hashing (verify compares its rankings with a fresh BM25 instead)."""
    return {k: v[integrity.CHECKSUM] for k, v in phrase_index.Manifest.load(index_dir).files.items()
            if not k.startswith(phrase_index.LEXICAL + "/")}


def test_the_same_add_twice_changes_nothing_the_second_time(setup, tmp_path, tiny_model_dir, monkeypatch):
    built, more, reference = setup
    index = tmp_path / "idx"
    shutil.copytree(reference, index)  # already holds the new documents
    before = sorted(p.name for p in index.iterdir()), _contents(index)

    def no_model(*args, **kwargs):
        raise AssertionError("the model was loaded for an add its ids refuse")

    monkeypatch.setattr("spanseek.indexer.add.load_model", no_model)  # refused from the ids alone, at once
    with pytest.raises(CorpusError, match=rf"every document of {more} \(4\) is already in the index {index}, as after "
                                          "an add of it that finished: .*nothing was changed"):
        add_documents(index, more, model=tiny_model_dir, opts=OPTS)
    assert (sorted(p.name for p in index.iterdir()), _contents(index)) == before
    assert PhraseIndex(index).manifest.documents == 12
    # a corpus of held and new documents: the first held id is named
    mixed = _write(tmp_path / "mixed.jsonl", [{"id": "other", "title": "t", "paragraphs": ["p"]},
                                              json.loads(more.read_text().splitlines()[0])])
    with pytest.raises(CorpusError, match=rf"{mixed}:2: document id 'new-0' is already in the index .*nothing was changed"):
        add_documents(index, mixed, model=tiny_model_dir, opts=OPTS)


def test_an_add_with_a_repeated_id_is_refused(setup, tmp_path, tiny_model_dir):
    built, more, _ = setup
    index = tmp_path / "idx"
    shutil.copytree(built, index)
    lines = more.read_text().splitlines()
    twice = tmp_path / "twice.jsonl"
    twice.write_text("\n".join([*lines, lines[1]]) + "\n")
    with pytest.raises(CorpusError, match=rf"{twice}:{len(lines) + 1}: document id 'new-1' was already used on line 2"):
        add_documents(index, twice, model=tiny_model_dir, opts=OPTS)
    assert _contents(index) == _contents(built) and not (index / integrity.STAGING).exists()


def _count_encoded(monkeypatch, stop_at: int | None = None) -> list[int]:
    """The passages of each shard encoded from now on; Ctrl-C (KeyboardInterrupt) in the ``stop_at``-th."""
    encode, calls = PassageEncoder.encode_flat, []

    def counted(self, passages):
        calls.append(len(passages))
        if len(calls) == stop_at:
            raise KeyboardInterrupt
        return encode(self, passages)

    monkeypatch.setattr(PassageEncoder, "encode_flat", counted)
    return calls


def test_ctrl_c_during_an_add_says_interrupted_and_the_add_resumes(setup, tmp_path, tiny_model_dir, monkeypatch,
                                                                   capsys):
    """Ctrl-C printed a KeyboardInterrupt traceback: now one line saying what the same command re-uses and exit status
    130; the index is as it was, the staging holds only the finished shard, and the same command then encodes only the
    other shards."""
    from spanseek.cli import main

    built, more, reference = setup
    index = tmp_path / "idx"
    shutil.copytree(built, index)
    argv = ["index", "add", "--index", str(index), "--corpus", str(more), "--model", str(tiny_model_dir), "--quiet",
            "--device", "cpu", "--precision", "fp32", "--shard-passages", "3"]
    _count_encoded(monkeypatch, stop_at=2)
    assert main(argv) == 130
    assert capsys.readouterr().err == (f"spanseek index add: interrupted: the same command resumes the add into {index} "
                                       "(re-using its 1 encoded shard (3 passages))\n")
    assert _contents(PhraseIndex(index).dir) == _contents(built)
    assert [p.relative_to(index).as_posix() for p in sorted((index / integrity.STAGING).rglob("*")) if p.is_dir()] == [
        f"{integrity.STAGING}/{integrity.SHARDS}", f"{integrity.STAGING}/{integrity.SHARDS}/000000"]
    encoded = _count_encoded(monkeypatch)
    assert main(argv) == 0
    assert encoded == [3, 2]  # of 3 + 3 + 2 passages: the first shard is re-used
    assert _contents(index) == _contents(reference) and not (index / integrity.STAGING).exists()


@pytest.mark.parametrize("command", ["add", "upsert"])
def test_sigterm_stops_an_add_as_ctrl_c_does_and_the_add_resumes(setup, tmp_path, tiny_model_dir, monkeypatch,
                                                                 command):
    """SIGTERM (``kill``, ``docker stop``) killed an add or upsert outright: status -15, nothing said, the staging's
    stores and the half-written shard left until the next open. It now stops them as Ctrl-C and a build's SIGTERM do:
    exit status 130, one last line saying what the same command re-uses, the index as it was and the staging holding
    only the finished shard; the same command then encodes only the other shards and gives the index an
    uninterrupted add gives."""
    from spanseek.cli import main
    from tests.indexer.test_build import SIGTERM_IN_SECOND_SHARD

    built, more, reference = setup
    index = tmp_path / "idx"
    shutil.copytree(built, index)
    argv = ["index", command, "--index", str(index), "--corpus", str(more), "--model", str(tiny_model_dir), "--quiet",
            "--device", "cpu", "--precision", "fp32", "--shard-passages", "3"]
    child = subprocess.run([sys.executable, "-c", SIGTERM_IN_SECOND_SHARD, *argv], capture_output=True, text=True,
                           timeout=600)
    assert child.returncode == 130, (child.returncode, child.stderr[-2000:])
    assert child.stderr.splitlines()[-1] == (f"spanseek index {command}: interrupted: stopped by SIGTERM; the same "
                                             f"command resumes the {command} into {index} (re-using its 1 encoded "
                                             "shard (3 passages))")
    assert sorted(p.name for p in (index / integrity.STAGING / integrity.SHARDS).iterdir()) == ["000000"]
    assert sorted(p.name for p in (index / integrity.STAGING).iterdir()) == [integrity.SHARDS]
    assert not [p for p in index.iterdir() if p.name.endswith(".tmp")]
    assert _contents(PhraseIndex(index).dir) == _contents(built)
    encoded = _count_encoded(monkeypatch)
    assert main(argv) == 0
    assert encoded == [3, 2]  # of 3 + 3 + 2 passages: the first shard is re-used
    assert _contents(index) == _contents(reference) and not (index / integrity.STAGING).exists()


# The child: the CLI, with SIGTERM (or the signal STOP_SIGNAL names) sent to itself after the first call of a step
# whose argument ends in a name (or, for "*", the first made while the add's journal exists)
SIGTERM_AFTER = r"""
import importlib, os, signal, sys
from pathlib import Path
signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a terminal (a background job ignores Ctrl-C)
stop = getattr(signal, os.environ.get("STOP_SIGNAL", "SIGTERM"))
target, ending, index = sys.argv[1:4]
module_name, attr = target.rsplit(":", 1)
owner = importlib.import_module(module_name)
for part in attr.split(".")[:-1]:
    owner = getattr(owner, part)
name = attr.split(".")[-1]
real, fired = getattr(owner, name), []
def step(*args, **kwargs):
    hit = (Path(index) / "add.journal.json").exists() if ending == "*" else any(str(a).endswith(ending) for a in args)
    out = real(*args, **kwargs)
    if hit and not fired:
        fired.append(1)
        os.kill(os.getpid(), stop)
    return out
setattr(owner, name, step)
from spanseek.cli import main
sys.exit(main(sys.argv[4:]))
"""


@pytest.mark.parametrize("step", [("os:replace", "*"), ("pathlib:Path.unlink", integrity.JOURNAL)],
                         ids=["mid renames", "journal removed"])
def test_sigterm_after_the_commit_point_says_the_add_is_complete(step, setup, tmp_path, tiny_model_dir):
    """SIGTERM landing once an add's journal was written said "the same command resumes the add" although the add
    was rolled forward and the same command was then refused with a bare conflict of ids. The last line now says the
    add is complete, the index holds it, and the rerun says every document is already in the index."""
    built, more, reference = setup
    index = tmp_path / "idx"
    shutil.copytree(built, index)
    argv = ["index", "add", "--index", str(index), "--corpus", str(more), "--model", str(tiny_model_dir), "--quiet",
            "--device", "cpu", "--precision", "fp32", "--shard-passages", "3"]
    child = subprocess.run([sys.executable, "-c", SIGTERM_AFTER, *step, str(index), *argv], capture_output=True,
                           text=True, timeout=600)
    assert child.returncode == 130, (child.returncode, child.stderr[-2000:])
    assert child.stderr.splitlines()[-1] == (f"spanseek index add: interrupted: stopped by SIGTERM; the add into {index} "
                                             "had been committed and is complete; no rerun is needed")
    assert not any(integrity.is_scratch(p.name) and p.name != integrity.LOCK for p in index.iterdir())
    assert _contents(index) == _contents(reference)
    rerun = subprocess.run([sys.executable, "-m", "spanseek.cli", *argv], capture_output=True, text=True, timeout=600)
    assert rerun.returncode == 2
    assert rerun.stderr.splitlines()[-1] == (f"spanseek index add: error: every document of {more} (4) is already in "
                                             f"the index {index}, as after an add of it that finished: there is "
                                             "nothing to add and nothing was changed (`index upsert` replaces held "
                                             "documents)")


def test_a_killed_add_resumes_encoding_only_the_shards_it_had_not_finished(setup, crashed, tiny_model_dir,
                                                                           monkeypatch):
    """kill -9 in the second shard, the index opened meanwhile (which rolls the add back but keeps its shards),
    then the same add: the index an uninterrupted add gives, with fewer passages encoded (the staging used to be
    removed, and every passage encoded again)."""
    built, more, reference = setup
    index, child = crashed["resume"]
    assert child.returncode == -signal.SIGKILL, child.stderr[-2000:]
    assert _contents(PhraseIndex(index).dir) == _contents(built) and verify_index(index, sample=30)["ok"]
    assert sorted(p.name for p in (index / integrity.STAGING / integrity.SHARDS).iterdir()) == ["000000"]
    encoded = _count_encoded(monkeypatch)
    add_documents(index, more, model=tiny_model_dir, opts=OPTS)
    assert encoded == [3, 2]
    assert _contents(index) == _contents(reference) and not (index / integrity.STAGING).exists()


def _start_child(index, more, model, args) -> subprocess.Popen:
    """The ``CHILD`` add into ``index``, dying where ``args`` (a ``POINTS`` step) says; its output captured."""
    return subprocess.Popen([sys.executable, "-c", CHILD, str(index), str(more), str(model), *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _finished(proc: subprocess.Popen) -> subprocess.CompletedProcess:
    try:
        stdout, stderr = proc.communicate(timeout=600)
    except subprocess.TimeoutExpired:
        proc.kill()
        stdout, stderr = proc.communicate()
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)


@pytest.fixture(scope="module")
def crashed(setup, tmp_path_factory, tiny_model_dir) -> dict:
    """name -> (index, finished child) for each ``FAST`` point, and ``resume`` (killed in the second shard's
    encoding), each a copy of the base index with an add killed in it. The children run side by side: each is mostly
    the start-up of a process, and none touches another's index."""
    built, more, _ = setup
    runs = {**{point: POINTS[point][0] for point in FAST}, "resume": POINTS["encoding"][0]}
    started = {}
    try:
        for name, args in runs.items():
            index = tmp_path_factory.mktemp("killed") / "idx"
            shutil.copytree(built, index)
            started[name] = (index, _start_child(index, more, tiny_model_dir, args))
    finally:  # every child started is waited for, also when a later copy or start failed
        done = {name: (index, _finished(proc)) for name, (index, proc) in started.items()}
    return done


def _crash_then_recover(point, setup, tmp_path, tiny_model_dir, crashed=None):
    """A child's add killed at ``point`` (one of ``crashed``'s, or run here), then the index opened, verified and
    added to again."""
    args, outcome = POINTS[point]
    built, more, reference = setup
    if crashed is not None:
        index, child = crashed[point]
    else:
        index = tmp_path / "idx"
        shutil.copytree(built, index)
        child = _finished(_start_child(index, more, tiny_model_dir, args))
    assert child.returncode == -signal.SIGKILL, child.stderr[-2000:]
    left = [p for p in index.iterdir() if integrity.is_scratch(p.name) and p.name != integrity.LOCK]
    assert left or point == "journal removed"  # it died mid-add (after its last step, with nothing left over)
    opened = PhraseIndex(index)  # rolls back or forward
    expected = reference if outcome == "forward" else built
    assert opened.manifest.documents == phrase_index.Manifest.load(expected).documents
    assert _contents(index) == _contents(expected)
    # the staging stays where the add was rolled back: its finished shards are re-used by the add below
    assert not any(integrity.is_scratch(p.name) and p.name not in (integrity.LOCK, integrity.STAGING)
                   for p in index.iterdir())
    assert (index / integrity.STAGING).exists() == (outcome == "back")
    assert verify_index(index, sample=30)["ok"]
    if outcome == "back":
        add_documents(index, more, model=tiny_model_dir, opts=OPTS)
    else:  # already in: the same add again is refused and changes nothing
        with pytest.raises(CorpusError, match="already in the index"):
            add_documents(index, more, model=tiny_model_dir, opts=OPTS)
    assert _contents(index) == _contents(reference) and not (index / integrity.STAGING).exists()


@pytest.mark.parametrize("point", FAST)
def test_a_killed_add_leaves_an_index_that_opens_and_verifies(point, setup, crashed, tmp_path, tiny_model_dir):
    _crash_then_recover(point, setup, tmp_path, tiny_model_dir, crashed)


@pytest.mark.slow
@pytest.mark.parametrize("point", [p for p in POINTS if p not in FAST])
def test_a_killed_add_leaves_an_index_that_opens_and_verifies_at_every_point(point, setup, tmp_path, tiny_model_dir):
    _crash_then_recover(point, setup, tmp_path, tiny_model_dir)


# The child: the CLI, Ctrl-C (SIGINT) pressed at the first rename made while the add's journal exists, and pressed
# again as the stop rolls the committed add forward
CTRL_C_TWICE = r"""
import os, signal, sys
from pathlib import Path
from spanseek.core import phrase_index
signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a terminal (a background job ignores Ctrl-C)
index = Path(sys.argv[1])
real_replace, real_recover, pressed = os.replace, phrase_index.recover_locked, []
def replace(*args, **kwargs):
    out = real_replace(*args, **kwargs)
    if (index / "add.journal.json").exists() and not pressed:
        pressed.append(1)
        os.kill(os.getpid(), signal.SIGINT)
    return out
def recover_locked(*args, **kwargs):
    if pressed == [1] and kwargs.get("committing"):
        pressed.append(2)
        os.kill(os.getpid(), signal.SIGINT)
    return real_recover(*args, **kwargs)
os.replace, phrase_index.recover_locked = replace, recover_locked
from spanseek.cli import main
sys.exit(main(sys.argv[2:]))
"""


def test_ctrl_c_pressed_again_while_a_committed_add_finishes_is_ignored(setup, tmp_path, tiny_model_dir):
    """A second Ctrl-C while a stop rolled the committed add forward cut that short, and the last line said "the same
    command resumes the add", whose rerun is refused: every document is already in the index. As a second SIGTERM,
    it is ignored until the job has stopped; the line says the add is complete."""
    built, more, reference = setup
    index = tmp_path / "idx"
    shutil.copytree(built, index)
    argv = ["index", "add", "--index", str(index), "--corpus", str(more), "--model", str(tiny_model_dir), "--quiet",
            "--device", "cpu", "--precision", "fp32", "--shard-passages", "3"]
    child = subprocess.run([sys.executable, "-c", CTRL_C_TWICE, str(index), *argv], capture_output=True, text=True,
                           timeout=600)
    assert child.returncode == 130, (child.returncode, child.stderr[-2000:])
    assert child.stderr.splitlines()[-1] == (f"spanseek index add: interrupted: the add into {index} had been "
                                             "committed and is complete; no rerun is needed"), child.stderr[-2000:]
    assert not any(integrity.is_scratch(p.name) and p.name != integrity.LOCK for p in index.iterdir())
    assert _contents(index) == _contents(reference)
