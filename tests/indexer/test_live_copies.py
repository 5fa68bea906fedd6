"""Two jobs on one index, and its copies: an index command over an index a server with writes holds is refused
naming it (and a server is refused while a command changes it); a copy of a live directory that lacks the base its
state names is refused naming it; `spanseek index snapshot` copies an index and its live directory as a start reads
them, so the copy serves every write, and is taken again when a merge changes what it copies."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from spanseek.core.params import UNITS
from tests.indexer.test_live import hits_of, open_store, upsert, writes


@pytest.fixture(scope="module")
def served(tmp_path_factory, tiny_index, tiny_searcher, encoder, tiny_model_dir):  # noqa: F811
    """A copy of the tiny index with a store writing to it (the live directory beside it): written to, merged, then
    written to again; yields the index, the store and the searchers it published (the store stays open)."""
    from spanseek.core.phrase_index import PhraseIndex
    from spanseek.core.segment import searcher_over
    from spanseek.indexer.build import BuildOptions

    index = tmp_path_factory.mktemp("served") / "index"
    shutil.copytree(tiny_index, index)
    published: list = []
    store = open_store(index.with_name("index.live"), index, encoder,
                       searcher_over(tiny_searcher, PhraseIndex(index)), published)
    writes(store, encoder)
    store.model = tiny_model_dir
    assert store.merge(BuildOptions(shard_passages=7, progress=False, precision="fp32")) is not None
    upsert(store, encoder, [{"id": "late", "title": "Late", "paragraphs": ["In 1300 Dara built a harbour."]}])
    yield index, store, published
    store.close()


def reopen(index: Path, tiny_searcher, encoder) -> tuple:  # noqa: F811
    """A store over ``index`` and its default live directory, as `spanseek serve --index INDEX --writes` opens them."""
    from spanseek.core.phrase_index import PhraseIndex
    from spanseek.core.segment import searcher_over
    from spanseek.indexer.live import base_dir

    published: list = []
    live = index.with_name(index.name + ".live")
    store = open_store(live, index, encoder, searcher_over(tiny_searcher, PhraseIndex(base_dir(live, index))),
                       published)
    return store, published


def test_an_index_command_is_refused_while_a_server_writes_over_the_index(served):
    from spanseek.indexer.build import BuildError
    from spanseek.indexer.lexical import add_lexical
    from spanseek.indexer.lifecycle import compact_index, delete_documents

    index, _, _ = served
    manifest = (index / "manifest.json").read_bytes()
    for command, run in (("delete", lambda: delete_documents(index, ["d0"])), ("compact", lambda: compact_index(index)),
                         ("add-lexical", lambda: add_lexical(index))):  # (it named no holder)
        with pytest.raises(BuildError, match=rf"{index}: process {os.getpid()} holds its lock "
                                             rf".*a server with writes over it .*`spanseek index {command}` changed "
                                             "nothing"):
            run()
    assert (index / "manifest.json").read_bytes() == manifest  # the writes' index is as they were made over it


def test_the_merged_base_a_server_with_writes_serves_is_refused_to_the_index_commands(served, capsys):
    """The server holds its index's lock, not its merged base's: `index add-lexical` (or a delete, a compact) run on
    the base directly changed what the server serves behind its write log and under its merges. Each is refused,
    naming the live directory and what to run instead, and changes nothing; the merge's own commands, on its copy of
    the base, run (the fixture merged)."""
    import re

    from spanseek.cli import main
    from spanseek.indexer.build import BuildError
    from spanseek.indexer.lexical import add_lexical
    from spanseek.indexer.lifecycle import compact_index, delete_documents

    index, store, _ = served
    base, live = store.base.dir, index.with_name("index.live")
    assert base.parent == live / "bases"
    manifest = (base / "manifest.json").read_bytes()
    for command, run in (("add-lexical", lambda: add_lexical(base)), ("delete", lambda: delete_documents(base, ["d0"])),
                         ("compact", lambda: compact_index(base))):
        with pytest.raises(BuildError, match=rf"^{re.escape(str(base))} is the merged base that the live directory "
                                             rf"{re.escape(str(live))} serves .* `spanseek index {command}` changed "
                                             "nothing$"):
            run()
    assert main(["index", "add-lexical", str(base)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"run `spanseek index add-lexical {index}` on the index" in err
    assert (base / "manifest.json").read_bytes() == manifest


def test_a_server_with_writes_is_refused_while_an_index_command_changes_the_index(tmp_path, tiny_index, tiny_searcher,
                                                                               encoder):  # noqa: F811
    from spanseek.core import integrity
    from spanseek.indexer.live import LiveStoreError

    index = tmp_path / "index"
    shutil.copytree(tiny_index, index)
    with integrity.writer_lock(index) as locked:  # what `spanseek index add` holds while it runs
        assert locked
        with pytest.raises(LiveStoreError, match=rf"{index}: another process \(process {os.getpid()}\) is changing "
                                                 r"this index .*`spanseek index` command"):
            reopen(index, tiny_searcher, encoder)
    store, _ = reopen(index, tiny_searcher, encoder)
    store.close()


def test_a_snapshot_serves_every_write_as_the_index_it_was_taken_from(served, tmp_path, tiny_searcher,
                                                                     encoder):  # noqa: F811
    from spanseek.indexer.snapshot import snapshot_index

    index, _, published = served
    done = snapshot_index(index, tmp_path / "backup" / "copy")  # while the store holds both
    assert done["base"] == "bases/base-000001" and done["logs"] == 1
    copy, again = reopen(tmp_path / "backup" / "copy", tiny_searcher, encoder)  # a store of its own: no lock shared
    assert copy.replayed == 1
    assert {u: hits_of(again[-1], u, "hybrid") for u in UNITS} == {u: hits_of(published[-1], u, "hybrid") for u in UNITS}
    copy.close()
    assert sorted(p.name for p in (tmp_path / "backup").iterdir()) == ["copy", "copy.live"]  # no temporaries


def test_verify_checks_a_snapshots_live_directory_and_counts_what_it_serves(served, tmp_path, capsys, monkeypatch):
    """`spanseek index verify` of a backup checks its live directory as a start with writes reads it: the writes and
    the documents served are counted, and a damaged log or a missing merged base fails it, naming the file (a start
    with writes refuses both), where the index alone verified ok."""
    from spanseek.cli import main
    from spanseek.indexer.snapshot import snapshot_index
    from spanseek.indexer.verify import verify_index

    _, store, _ = served
    copy = tmp_path / "copy"
    snapshot_index(served[0], copy)
    report = verify_index(copy, sample=20)
    assert report["ok"], report["problems"]
    live = report["live"]
    assert live["dir"] == str(tmp_path / "copy.live") and live["base"] == "bases/base-000001"
    assert live["writes"] == 1 and live["documents"] == store.documents != report["documents"]["live"]
    assert verify_index(copy, sample=20, live_dir=tmp_path / "none")["live"] is None  # nothing there: the index alone
    # in the environment of a server with writes (its container): its live directory is that index's, not the copy's
    monkeypatch.setenv("SPANSEEK_LIVE_DIR", str(tmp_path / "none"))
    assert main(["index", "verify", str(copy), "--sample", "20"]) == 0
    assert json.loads(capsys.readouterr().out)["live"]["dir"] == str(tmp_path / "copy.live")
    monkeypatch.setenv("SPANSEEK_INDEX", str(copy))
    assert main(["index", "verify", str(copy), "--sample", "20"]) == 0
    assert json.loads(capsys.readouterr().out)["live"] is None
    monkeypatch.delenv("SPANSEEK_LIVE_DIR")

    log = tmp_path / "copy.live" / "wal" / json.loads((tmp_path / "copy.live" / "state.json").read_text())["wals"][0]
    good = log.read_bytes()
    log.write_bytes(b"{not json\n" + good)  # damage before the last line
    assert main(["index", "verify", str(copy), "--sample", "20"]) == 1
    problems = json.loads(capsys.readouterr().out)["problems"]
    assert len(problems) == 1 and problems[0].startswith(f"{log}:1: not a log entry")
    log.write_bytes(good + b'{"op": "ups')  # a torn last line (a write a kill cut short): dropped, as a start drops it
    assert verify_index(copy, sample=20)["ok"]

    moved = tmp_path / "elsewhere"
    (tmp_path / "copy.live").rename(moved)
    shutil.rmtree(moved / "bases" / "base-000001")
    assert main(["index", "verify", str(copy), "--sample", "20", "--live-dir", str(moved)]) == 1
    problems = json.loads(capsys.readouterr().out)["problems"]
    assert len(problems) == 1 and "names the merged base bases/base-000001, which is missing" in problems[0]


def test_verify_counts_a_merged_bases_documents_without_opening_it(served, tmp_path, monkeypatch):
    """Verify opened the merged base a live directory names whole (its faiss index and maps: +255 MB and 0.3-0.5 s
    at the demo index's size) only to count its documents: it reads their ids alone, and counts the same."""
    from spanseek.core import phrase_index
    from spanseek.indexer import verify
    from spanseek.indexer.snapshot import snapshot_index

    _, store, _ = served
    copy = tmp_path / "copy"
    snapshot_index(served[0], copy)
    opened: list[Path] = []
    real = phrase_index.PhraseIndex

    def recording(index_dir, *args, **kwargs):
        opened.append(Path(index_dir).resolve())
        return real(index_dir, *args, **kwargs)

    monkeypatch.setattr(verify, "PhraseIndex", recording)
    report = verify.verify_index(copy, sample=20)
    assert report["ok"] and report["live"]["documents"] == store.documents, report
    assert opened == [copy.resolve()], opened  # the index verified, never its merged base


def test_verify_checks_the_live_directory_again_when_a_merge_commits_during_it(served, tmp_path, monkeypatch):
    """Verifying the live directory of a server that merges meanwhile: the merge's commit removes the base and logs
    the state named, which is no damage; the check is made again over the new state (a damage that stays is
    reported after one check)."""
    from spanseek.indexer import verify
    from spanseek.indexer.live import LiveStoreError
    from spanseek.indexer.snapshot import snapshot_index

    snapshot_index(served[0], tmp_path / "copy")
    state = tmp_path / "copy.live" / "state.json"
    calls, check_live = [], verify.check_live

    def merged_meanwhile(live, index):
        calls.append(live)
        if len(calls) == 1:  # the commit: a new state, the base the first one named gone
            state.write_text(json.dumps({**json.loads(state.read_text()), "merges": 9}))
            raise LiveStoreError(f"{state} names the merged base bases/base-000001, which is missing")
        return check_live(live, index)

    monkeypatch.setattr(verify, "check_live", merged_meanwhile)
    report = verify.verify_index(tmp_path / "copy", sample=20)
    assert report["ok"] and len(calls) == 2 and report["live"]["writes"] == 1

    def damaged(live, index):
        calls.append(live)
        raise LiveStoreError(f"{state}: cannot be read")

    calls.clear()
    monkeypatch.setattr(verify, "check_live", damaged)
    report = verify.verify_index(tmp_path / "copy", sample=20)
    assert not report["ok"] and report["problems"] == [f"{state}: cannot be read"] and len(calls) == 1


def test_verify_counts_a_live_directory_whose_merge_commits_while_its_logs_are_read_as_one_state(served, tmp_path,
                                                                                                   monkeypatch):
    """A merge that commits while verify reads the write logs removes a log it has yet to read, which reads as empty:
    the writes and documents were counted from half of one state and half of none, and reported ok. The check is made
    again over the new state, as a snapshot copies it again."""
    from spanseek.indexer import snapshot
    from spanseek.indexer.snapshot import snapshot_index
    from spanseek.indexer.verify import verify_index

    _, store, _ = served
    snapshot_index(served[0], tmp_path / "copy")
    live = tmp_path / "copy.live"
    state = json.loads((live / "state.json").read_text())
    [old] = state["wals"]
    read_entries, commits = snapshot.read_entries, []

    def committed_meanwhile(path, repair=True):
        if not commits:  # the commit: its log holds the writes (as a merged base would), the one listed removed
            commits.append(path)
            shutil.copyfile(live / "wal" / old, live / "wal" / "wal-000009.jsonl")
            (live / "state.json").write_text(json.dumps({**state, "wals": ["wal-000009.jsonl"], "merges": 9}))
            (live / "wal" / old).unlink()
        return read_entries(path, repair)

    monkeypatch.setattr(snapshot, "read_entries", committed_meanwhile)
    report = verify_index(tmp_path / "copy", sample=20)
    assert report["ok"], report["problems"]
    assert report["live"]["writes"] == 1 and report["live"]["documents"] == store.documents


def test_verify_names_a_log_line_that_is_json_but_no_write(served, tmp_path, capsys):
    """A log line that is JSON with an op but not the write it names (an upsert without its documents, a delete
    without its ids) is damage named by file and line, as any other line that is no log entry; `index verify` (and a
    snapshot, a start) ended with a KeyError traceback."""
    from spanseek.cli import main
    from spanseek.indexer.snapshot import snapshot_index

    snapshot_index(served[0], tmp_path / "copy")
    live = tmp_path / "copy.live"
    log = live / "wal" / json.loads((live / "state.json").read_text())["wals"][0]
    good = log.read_bytes()
    for bad in (b'{"op": "upsert"}', b'{"op": "upsert", "docs": [3]}', b'{"op": "delete", "ids": 5}'):
        log.write_bytes(bad + b"\n" + good)
        assert main(["index", "verify", str(tmp_path / "copy"), "--sample", "20"]) == 1
        report = json.loads(capsys.readouterr().out)
        problems = report["problems"]
        assert len(problems) == 1 and problems[0].startswith(f"{log}:1: not a log entry, and lines follow it"), bad
        assert report["recall"]["recall@1"] > 0  # the index's own measurement, made all the same


def test_a_snapshot_is_taken_again_when_a_merge_changes_the_live_directory_during_it(served, tmp_path, monkeypatch):
    from spanseek.indexer import snapshot

    first = snapshot.snapshot_index(served[0], tmp_path / "first")  # (a copy of its own, to change)
    state = Path(first["live_dir"]) / "state.json"
    read, read_state = [], snapshot.read_state

    def merged_meanwhile(live, index):  # a merge commits as the live directory is being copied
        read.append(read_state(live, index))
        if len(read) == 1:
            state.write_text(json.dumps({**json.loads(state.read_text()), "merges": 9}))
        return read[-1]

    monkeypatch.setattr(snapshot, "read_state", merged_meanwhile)
    snapshot.snapshot_index(tmp_path / "first", tmp_path / "second")
    assert len(read) == 2 and json.loads((tmp_path / "second.live" / "state.json").read_text())["merges"] == 9


def test_a_snapshot_is_refused_while_an_index_command_runs_and_over_an_existing_out(tmp_path, tiny_index):
    from spanseek.core import integrity
    from spanseek.indexer.build import BuildError
    from spanseek.indexer.live import LiveStoreError
    from spanseek.indexer.snapshot import snapshot_index

    index = tmp_path / "index"
    shutil.copytree(tiny_index, index)
    with integrity.writer_lock(index) as locked:
        assert locked
        with pytest.raises(LiveStoreError, match=rf"another process \(process {os.getpid()}\) is changing this index "
                                                 r".*then run the snapshot again"):
            snapshot_index(index, tmp_path / "copy")
    assert not (tmp_path / "copy").exists() and not (tmp_path / "copy.snapshot.tmp").exists()
    assert snapshot_index(index, tmp_path / "copy")["live_dir"] is None  # no live directory: the index alone
    with pytest.raises(BuildError, match=r"copy exists; choose a new --out"):
        snapshot_index(index, tmp_path / "copy")
    (tmp_path / "file").write_text("")
    with pytest.raises(BuildError, match=rf"^--out {tmp_path}/file/copy: cannot be written: {tmp_path}/file is a "
                                         "file, not a folder$"):
        snapshot_index(index, tmp_path / "file" / "copy")


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux's /proc")
@pytest.mark.parametrize("out", ["/proc/spanseek-copy", "/proc/self/spanseek-copy"])
def test_a_snapshot_into_a_folder_that_takes_no_directory_names_the_out_given(tmp_path, tiny_index, out):
    """``--out /proc/x`` (a special file system: no new directory there, for root too) was refused naming the
    temporary it writes first, ``/proc/x.snapshot.tmp``: a path the user never gave. Now ``--out`` as given."""
    from spanseek.indexer.build import BuildError
    from spanseek.indexer.snapshot import snapshot_index

    with pytest.raises(BuildError, match=rf"^--out {out}: cannot be written: ") as refused:
        snapshot_index(tiny_index, Path(out))
    assert ".snapshot.tmp" not in str(refused.value)


def test_a_live_directory_copied_across_a_merge_without_its_base_is_refused_naming_it(served, tmp_path):
    """`cp -r` of a live directory while a merge swaps its base can copy the state naming the old base after that base
    was removed: a start says so, rather than that there is no index to serve."""
    from spanseek.indexer.live import LiveStoreError, base_dir

    shutil.copytree(served[0], tmp_path / "copy")  # (nothing is written meanwhile)
    shutil.copytree(served[0].with_name("index.live"), tmp_path / "copy.live")
    shutil.rmtree(tmp_path / "copy.live" / "bases" / "base-000001")  # what the merge removed before cp reached it
    with pytest.raises(LiveStoreError, match=r"copy.live/state.json names the merged base bases/base-000001, which is "
                                             r"missing .*restore the live directory whole .*move .*copy.live away"):
        base_dir(tmp_path / "copy.live", tmp_path / "copy")


def test_a_snapshot_is_taken_again_when_a_merge_removes_the_base_it_was_copying(served, tmp_path, monkeypatch):
    """copytree reports a file that vanished under it as shutil.Error (a list of its failures), not as
    FileNotFoundError: a merge that removed the old base mid-copy is copied again too; the same failure with the
    state unchanged is one line naming the file."""
    from spanseek.indexer import snapshot
    from spanseek.indexer.live import BASES

    first = snapshot.snapshot_index(served[0], tmp_path / "first")
    state = Path(first["live_dir"]) / "state.json"
    copies, link_copy = [], snapshot.link_copy

    def vanished(src, dest, merge=True):
        if BASES not in Path(src).parts:  # the index itself
            return link_copy(src, dest)
        copies.append(src)
        if len(copies) == 1:
            if merge:
                state.write_text(json.dumps({**json.loads(state.read_text()), "merges": 9}))
            raise shutil.Error([(str(src / "index.faiss"), str(dest / "index.faiss"), "[Errno 2] No such file")])
        return link_copy(src, dest)

    monkeypatch.setattr(snapshot, "link_copy", vanished)
    snapshot.snapshot_index(tmp_path / "first", tmp_path / "second")
    assert len(copies) == 2 and json.loads((tmp_path / "second.live" / "state.json").read_text())["merges"] == 9
    copies.clear()
    monkeypatch.setattr(snapshot, "link_copy", lambda src, dest: vanished(src, dest, merge=False))
    with pytest.raises(OSError, match=r"index\.faiss: cannot be copied: \[Errno 2\] No such file$"):
        snapshot.snapshot_index(tmp_path / "first", tmp_path / "third")


def test_an_index_on_a_file_system_without_file_locks_is_served_with_a_warning(tmp_path, tiny_index, monkeypatch,
                                                                                caplog):
    """The live directory's writer lock must work (it is what tells two writers apart), but the index beside it may
    lie on a mount without flock (NFS without its lock service), where a server with writes started before the
    index lock was taken: it still starts, warning that index commands are not kept out."""
    import errno

    from spanseek.core import integrity
    from spanseek.indexer.live import hold_index

    def no_locks(fd, operation):
        raise OSError(errno.ENOLCK, os.strerror(errno.ENOLCK))

    index = tmp_path / "index"
    shutil.copytree(tiny_index, index)
    monkeypatch.setattr(integrity.fcntl, "flock", no_locks)
    with caplog.at_level("WARNING"), hold_index(index):
        pass
    assert "No locks available" in caplog.text and "not kept out" in caplog.text


def test_a_snapshot_into_the_index_or_its_live_directory_is_refused_naming_both(served, tmp_path):
    """The copy would land among the files it copies: in the live directory (where a merge removes what the state no
    longer names), at the path a server with writes over the index takes for its live directory, or in the index."""
    from spanseek.indexer.build import BuildError
    from spanseek.indexer.snapshot import snapshot_index

    index, store, _ = served
    live = index.with_name("index.live")
    (tmp_path / "link").symlink_to(live)
    for out, where in ((live / "backup", f"lies inside the live directory {live}"),
                       (live / "bases" / "new" / "copy", f"lies inside the live directory {live}"),
                       (tmp_path / "link" / "copy", f"lies inside the live directory {live}"),
                       (index / "copy", f"lies inside the index {index}")):
        with pytest.raises(BuildError, match=rf"^--out {out} {where}; write the snapshot somewhere else$"):
            snapshot_index(index, out)
    elsewhere = tmp_path / "writes"  # a live directory given elsewhere: the default one's path is free
    with pytest.raises(BuildError, match=rf"^--out {live} is the live directory {elsewhere}|^--out {live}: .* exists"):
        snapshot_index(index, live, elsewhere)
    with pytest.raises(BuildError, match=rf"^--out {elsewhere} is the live directory {elsewhere}; write"):
        snapshot_index(index, elsewhere, elsewhere)
    assert sorted(p.name for p in live.iterdir()) == sorted(["bases", "wal", "state.json", "writer.lock", "merged",
                                                              "verified.json"])  # nothing left in it


def test_a_snapshot_reads_the_live_directory_the_server_reads_from_the_environment(served, tmp_path, monkeypatch,
                                                                                   capsys):
    """`spanseek serve --writes` takes SPANSEEK_LIVE_DIR for its live directory: the snapshot in the same environment
    copies that one (--live-dir over it, as the server takes the flag over it)."""
    from spanseek.cli import main
    from spanseek.indexer.snapshot import snapshot_index

    first = snapshot_index(served[0], tmp_path / "first")
    Path(first["live_dir"]).rename(tmp_path / "writes")  # a live directory kept elsewhere, named by the environment
    monkeypatch.setenv("SPANSEEK_LIVE_DIR", str(tmp_path / "writes"))
    assert main(["index", "snapshot", "--index", str(tmp_path / "first"), "--out", str(tmp_path / "second")]) == 0
    done = json.loads(capsys.readouterr().out)
    assert done["live_dir"] == str(tmp_path / "second.live") and done["logs"] == 1
    assert (tmp_path / "second.live" / "state.json").read_bytes() == (tmp_path / "writes" / "state.json").read_bytes()
    assert main(["index", "snapshot", "--index", str(tmp_path / "first"), "--out", str(tmp_path / "third"),
                 "--live-dir", str(tmp_path / "none")]) == 0  # the flag wins: nothing there, the index alone
    assert json.loads(capsys.readouterr().out)["live_dir"] is None
    monkeypatch.setenv("SPANSEEK_LIVE_DIR", " ")  # blank: unset, as the server takes it (the index path + .live)
    assert main(["index", "snapshot", "--index", str(tmp_path / "first"), "--out", str(tmp_path / "fourth")]) == 0
    assert json.loads(capsys.readouterr().out)["live_dir"] is None
    from spanseek.core.phrase_index import CHECKSUM_FIELD, manifest_checksum

    manifest = tmp_path / "first" / "manifest.json"  # another index (a rebuild's manifest): the live directory
    fields = json.loads(manifest.read_text())  # the environment names is not its
    fields["build_seconds"] += 1
    manifest.write_text(json.dumps({**fields, CHECKSUM_FIELD: manifest_checksum(fields)}, indent=1))
    monkeypatch.setenv("SPANSEEK_LIVE_DIR", str(tmp_path / "writes"))
    assert main(["index", "snapshot", "--index", str(tmp_path / "first"), "--out", str(tmp_path / "fifth")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"spanseek index snapshot: error: SPANSEEK_LIVE_DIR={tmp_path / 'writes'}: ")
    assert len(err.splitlines()) == 1 and "made over another index" in err

