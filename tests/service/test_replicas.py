"""More than one server over one index: one server writes to a live directory (a second with writes is refused,
naming the first), and a server without writes beside it serves the index as it is, told so, never changing the
writer's files.

    .venv/bin/python -m pytest -q tests/service/test_replicas.py
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from spanseek.core.integrity import file_digest
from spanseek.indexer.live import WRITER_LOCK, LiveStoreError
from spanseek.service import server
from spanseek.service.app import create_app
from spanseek.service.cli import check_servable
from tests.service.conftest import serving, wait_ready_sync
from tests.service.test_metrics import samples

KEY = {"X-API-Key": "key"}
DOC = {"id": "new-1", "title": "Harbour", "paragraphs": ["In 1450 Gala built the harbour bridge of the island."]}


def load_failure(client: TestClient) -> str:
    """The message of /ready once loading failed."""
    deadline = time.monotonic() + 120
    while True:
        r = client.get("/ready", headers=KEY)
        if r.status_code == 503 and "failed" in r.json()["message"]:
            return r.json()["message"]
        assert r.status_code != 200, "the second server with writes became ready"
        assert time.monotonic() < deadline, "loading never failed"
        time.sleep(0.02)


def test_a_second_server_with_writes_is_refused_naming_the_first_and_the_first_keeps_every_write(
        write_settings, tmp_path, monkeypatch, capsys):
    """Two servers with writes over one live directory both started: each served only its own writes, both appended
    to one log, and the first to merge deleted that log, the other's acknowledged writes with it (25 of 40 gone
    after a kill -9 and restart, on the demo index). Now the second is refused, before its model loads with
    `spanseek serve` and on /ready with the app alone, naming the process that writes there and the lock."""
    from spanseek.cli import main
    from spanseek.service import app as app_module

    live = tmp_path / "live"
    lock = live / WRITER_LOCK
    refusal = (f"{live}: another server with writes (process {os.getpid()}) writes to this live directory and holds "
               f"its lock ({lock}); one server writes to an index")
    with serving(create_app(write_settings())) as first:
        assert first.put("/documents", headers=KEY, json=DOC).status_code == 200
        with TestClient(create_app(write_settings())) as second:
            assert refusal in load_failure(second)
        with pytest.raises(LiveStoreError, match="^" + refusal.replace("(", r"\(").replace(")", r"\)")):
            check_servable(write_settings())

        def loads(*args, **kwargs):
            raise AssertionError("the app (and its model) would load")

        monkeypatch.setattr(app_module, "create_app", loads)
        monkeypatch.setattr(server, "bind_sockets", lambda host, port: [])
        s = write_settings()
        assert main(["serve", "--index", str(s.index), "--model", str(s.model), "--device", "cpu", "--writes",
                     "--api-key", "key", "--live-dir", str(live)]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("spanseek serve: error: " + refusal) and len(err.splitlines()) == 1, err
        # a holder in another container names its host (the kernel's table of locks shows no process there)
        lock.write_text("7 replica-2\n")
        with pytest.raises(LiveStoreError, match=r"another server with writes \(process 7 on host replica-2\)"):
            check_servable(write_settings())
        lock.write_text(f"{os.getpid()} {socket.gethostname()}\n")
        # the first goes on writing, into the log alone
        assert first.put("/documents", headers=KEY, json={**DOC, "id": "new-2"}).status_code == 200
        assert first.get("/info", headers=KEY).json()["service"]["writes"]["segment_documents"] == 2
    monkeypatch.undo()
    with serving(create_app(write_settings())) as again:  # the lock went with the first: every write is back
        assert [again.get(f"/documents/{i}", headers=KEY).status_code for i in ("new-1", "new-2")] == [200, 200]
    check_servable(write_settings())


def standing_by(client: TestClient, seconds: float) -> str:
    """/ready's message once it says standing by (within 30 s), which it must go on saying (never ready, never
    failed) for ``seconds``."""

    def message() -> str:
        r = client.get("/ready", headers=KEY)
        assert r.status_code == 503 and "failed" not in r.json()["message"], r.json()
        return r.json()["message"]

    deadline = time.monotonic() + 120
    while "standing by" not in message():
        assert time.monotonic() < deadline, "never stood by"
        time.sleep(0.05)
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        assert "standing by" in (said := message()), said
        time.sleep(0.05)
    return said


def gauge(client, name: str) -> float:
    """The value of the unlabelled gauge ``name`` on the server's /metrics."""
    return samples(client.get("/metrics").text)[(name, ())]


@pytest.mark.parametrize("both_at_once", [False, True])
def test_a_standby_writer_waits_not_ready_and_takes_the_writes_over_once_the_writer_stops(
        write_settings, tmp_path, monkeypatch, both_at_once):
    """A second server with writes was refused at start (status 2), which in compose, `--scale` of the writer, the
    restart policy answered by starting it again, forever; two started at once both passed the start's check and the
    later one failed for good. With writes_standby it starts, stays unready saying which server writes there, and
    takes the writes over (the first's acknowledged ones included) once that one stops. ``both_at_once``: the lock
    looked free to it, and was taken by the first before its store opened."""
    from spanseek.service import live as live_module

    monkeypatch.setattr(live_module, "STANDBY_POLL_S", 0.05, raising=False)
    if both_at_once:
        real, calls = live_module.writer_elsewhere, []

        def free_at_first(live_dir):
            calls.append(live_dir)
            return None if len(calls) == 1 else real(live_dir)

        monkeypatch.setattr(live_module, "writer_elsewhere", free_at_first)
    standby = write_settings(writes_standby=True)
    first_running = serving(create_app(write_settings()))
    first = first_running.__enter__()
    try:
        assert first.put("/documents", headers=KEY, json=DOC).status_code == 200
        check_servable(standby)  # not refused: it waits
        with TestClient(create_app(standby)) as second:
            message = standing_by(second, 1.0)
            assert (f"standing by: {tmp_path / 'live'}: another server with writes (process {os.getpid()}) writes to "
                    "this live directory") in message, message
            assert second.put("/documents", headers=KEY, json={**DOC, "id": "new-2"}).status_code == 503
            # the alerts leave out a standby that checks the lock beside a ready writer (SpanseekNotReady)
            assert gauge(first, "spanseek_writer") == 1 and gauge(second, "spanseek_writer") == 0
            assert time.time() - 30 < gauge(second, "spanseek_standby_checked_timestamp_seconds") <= time.time()
            assert gauge(first, "spanseek_standby_checked_timestamp_seconds") == 0
            first_running.__exit__(None, None, None)
            first_running = None
            wait_ready_sync(second)
            assert gauge(second, "spanseek_writer") == 1
            assert gauge(second, "spanseek_standby_checked_timestamp_seconds") == 0
            assert second.get("/documents/new-1", headers=KEY).status_code == 200
            assert second.put("/documents", headers=KEY, json={**DOC, "id": "new-2"}).status_code == 200
        assert not both_at_once or len(calls) >= 2
    finally:
        if first_running is not None:
            first_running.__exit__(None, None, None)


def test_a_server_without_writes_serves_the_index_as_it_is_and_says_so(write_settings, settings_for, tmp_path,
                                                                       tiny_index, caplog):
    """A replica without writes over the index a server with writes writes to serves that index as it is (the
    writes and the bases merged from them are not its): a written document is a 404 there, its searches and files
    are the same after the writer merges, and its start warns that it does not see the writes (before: nothing
    said so). Pointed at a merged base, it warns that the writer removes that base at its next merge."""
    question = {"query": "who built the harbour bridge?", "top_k": 5}
    digests = {p.name: file_digest(p) for p in tiny_index.iterdir() if p.is_file()}
    reader_settings = settings_for(api_key="key", live_dir=tmp_path / "live")
    with serving(create_app(write_settings())) as writer, serving(create_app(reader_settings)) as reader:
        before = reader.post("/search?unit=doc", headers=KEY, json=question).json()["results"]
        assert writer.put("/documents", headers=KEY, json=DOC).status_code == 200
        assert writer.post("/admin/compact", headers=KEY).status_code == 202
        deadline = time.monotonic() + 180  # a loaded CI host merges slowly; done ends the wait
        while writer.get("/info", headers=KEY).json()["service"]["writes"]["merges"] < 1:
            assert time.monotonic() < deadline, "the merge never ended"
            time.sleep(0.05)
        assert writer.get("/documents/new-1", headers=KEY).status_code == 200
        assert reader.get("/documents/new-1", headers=KEY).status_code == 404
        assert reader.put("/documents", headers=KEY, json=DOC).status_code == 403
        assert reader.post("/search?unit=doc", headers=KEY, json=question).json()["results"] == before
        merged = writer.get("/info", headers=KEY).json()["service"]["writes"]["base"]
    assert {p.name: file_digest(p) for p in tiny_index.iterdir() if p.is_file()} == digests
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="spanseek.service"), serving(create_app(reader_settings)):
        pass
    assert (f"{tmp_path / 'live'} holds writes made over {tiny_index} by a server with writes (1 merges, 0 bytes of "
            f"write log): this server has no writes and serves {tiny_index} as it is, without them") in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="spanseek.service"), \
            serving(create_app(settings_for(index=merged))) as on_merged:
        assert on_merged.get("/documents/new-1").status_code == 200
    assert (f"{merged} is a base merged in the live directory {tmp_path / 'live'}: a server with writes there "
            "removes it when it merges again") in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="spanseek.service"), serving(create_app(settings_for())):
        pass  # its default live directory (the index path + '.live') holds nothing
    assert "holds writes" not in caplog.text


def merged(writer, n: int) -> None:
    """Asks the server with writes to merge, and waits until its ``n``-th merge is in and has finished (a merge
    counted in /info still removes what it replaced: a compact asked meanwhile finds it running and starts none)."""
    deadline = time.monotonic() + 180  # a loaded CI host merges slowly; done ends the wait

    def writes() -> dict:
        assert time.monotonic() < deadline, "the merge never ended"
        return writer.get("/info", headers=KEY).json()["service"]["writes"]

    while writes()["merging"]:  # the merge before, finishing
        time.sleep(0.05)
    assert writer.post("/admin/compact", headers=KEY).status_code == 202
    while (state := writes())["merges"] < n or state["merging"]:
        time.sleep(0.05)


def test_a_follower_checksums_only_what_changed_since_the_writer_verified_it_and_refuses_a_damaged_base(
        write_settings, settings_for, tmp_path, monkeypatch):
    """A follower's reload checksummed every file of the merged base again, which the writer had just verified as it
    opened it (about 0.6 s of the 1.4-1.5 s reload on the demo index). Now the writer records each file's identity
    as it verified it, and the follower checksums only the files changed since: none after a merge. A file damaged
    in place since (its size and even its modification time kept) is checksummed, found damaged and refused: the
    follower serves on from the base before."""
    from spanseek.core import integrity
    from spanseek.indexer.live import VERIFIED, unverified_files

    live = tmp_path / "live"
    real, reads = integrity.file_digest, []

    def digest(path, *args, **kwargs):
        if threading.current_thread().name.startswith("spanseek-reload"):
            reads.append(Path(path).name)
        return real(path, *args, **kwargs)

    monkeypatch.setattr(integrity, "file_digest", digest)
    with serving(create_app(write_settings())) as writer, \
            serving(create_app(settings_for(index=live / "merged", api_key="key"))) as follower:
        assert writer.put("/documents", headers=KEY, json=DOC).status_code == 200
        merged(writer, 1)
        first = Path(writer.get("/info", headers=KEY).json()["service"]["writes"]["base"])
        assert json.loads((live / VERIFIED).read_text())["base"] == first.name and unverified_files(first) == []
        assert follower.post("/admin/reload", headers=KEY).status_code == 200
        assert follower.get("/info", headers=KEY).json()["index"]["dir"] == str(first)
        assert reads == []  # nothing read again: the writer had verified every file
        assert follower.get("/documents/new-1", headers=KEY).status_code == 200
        assert writer.put("/documents", headers=KEY, json={**DOC, "id": "new-2"}).status_code == 200
        merged(writer, 2)
        second = Path(writer.get("/info", headers=KEY).json()["service"]["writes"]["base"])
        damaged = max((p for p in second.iterdir() if p.is_file() and p.name != "manifest.json"),
                      key=lambda p: p.stat().st_size)
        time.sleep(0.05)  # past the clock tick of the writer's record
        flip_a_byte(damaged)
        assert unverified_files(second) == [damaged.name]
        r = follower.post("/admin/reload", headers=KEY)
        assert r.status_code == 409 and f"{damaged}: checksum mismatch (the file is damaged)" in r.json()["message"]
        assert reads == [damaged.name]
        assert follower.get("/info", headers=KEY).json()["index"]["dir"] == str(first)  # still served
        assert follower.post("/search?unit=doc", headers=KEY, json={"query": "who built the harbour bridge?"}
                             ).status_code == 200


def flip_a_byte(path: Path) -> None:
    """Damage ``path`` in place: one byte changed, its size and modification time kept."""
    st = path.stat()
    with path.open("r+b") as f:
        f.seek(st.st_size // 2)
        byte = f.read(1)
        f.seek(st.st_size // 2)
        f.write(bytes([byte[0] ^ 0xFF]))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def test_a_file_damaged_while_the_writer_verifies_a_merged_base_is_not_recorded_as_verified(
        write_settings, tmp_path, monkeypatch):
    """The writer took each file's identity for ``verified.json`` after it had checksummed the files, so a write
    landing between the two was recorded as verified, and followers served the damaged file unread. The identities
    are now taken before the checksums: a file written since has another one, and followers checksum it."""
    from spanseek.core import integrity
    from spanseek.indexer.live import unverified_files

    real, damaged = integrity.check_files, []

    def check_then_damage(index_dir, files, contents=True):
        problems = real(index_dir, files, contents)
        if Path(index_dir).name == "base-000001" and not damaged:  # the merged base, built and now verified
            damaged.append(max((Path(index_dir) / rel for rel in files), key=lambda p: p.stat().st_size))
            time.sleep(0.05)  # past the clock tick of the base's files
            flip_a_byte(damaged[0])
        return problems

    monkeypatch.setattr(integrity, "check_files", check_then_damage)
    with serving(create_app(write_settings())) as writer:
        assert writer.put("/documents", headers=KEY, json=DOC).status_code == 200
        merged(writer, 1)
        base = Path(writer.get("/info", headers=KEY).json()["service"]["writes"]["base"])
    assert damaged and damaged[0].parent == base
    assert unverified_files(base) == [damaged[0].name]


def test_a_record_taken_in_the_clock_tick_of_a_files_last_write_does_not_vouch_for_it(tiny_index, tmp_path):
    """A file system stamps a change with its clock's tick (4 ms on Linux's ext4, a second or two on others), so a
    file written again in the tick the writer took its identity in keeps that identity, changed. An identity the
    writer took no later than its file's change time is not trusted: that file is checksummed again."""
    import shutil

    from spanseek.core.phrase_index import MANIFEST
    from spanseek.indexer.live import BASES, VERIFIED, file_identity, unverified_files

    base = tmp_path / "live" / BASES / "base-000001"
    shutil.copytree(tiny_index, base)
    files = [MANIFEST, *json.loads((base / MANIFEST).read_text())["files"]]
    racy = files[1]
    time.sleep(0.05)  # past the clock tick of the copy
    os.chmod(base / racy, 0o644)  # a change of the file (its change time) in the tick the identities are taken in
    identities = {rel: file_identity(base / rel) for rel in files}
    clock = identities[racy][3]  # the file system's clock as the writer took them
    (tmp_path / "live" / VERIFIED).write_text(json.dumps({"base": base.name, "clock": clock, "files": identities}))
    assert unverified_files(base) == [racy]


def test_a_server_without_writes_serving_the_writers_pointer_follows_its_merges(write_settings, settings_for,
                                                                               tmp_path, tiny_index, caplog):
    """The server with writes keeps ``LIVE_DIR/merged`` (a pointer file) naming the base it serves, switched once a
    merge is in and before the old base is removed; a server without writes serving that pointer with the alias
    poll reloads to each merged base: it serves what was merged (not the writes since), and a merge that removes
    the base it served leaves its searches answered. Before, a replica could only serve the index as it was, or a
    merged base until the next merge removed it. A pointer naming a base removed since (a kill between the merge's
    commit and its switch) is replaced at the writer's start; the follower adds no file to the live directory."""
    from spanseek.core.alias import resolve_alias

    live = tmp_path / "live"
    live.mkdir()
    (live / "merged").write_text("bases/base-000009\n")  # removed since
    question = {"query": "who built the harbour bridge?", "top_k": 5}

    def followed(follower, writer) -> None:
        base = writer.get("/info", headers=KEY).json()["service"]["writes"]["base"]
        deadline = time.monotonic() + 120
        while follower.get("/info", headers=KEY).json()["index"]["dir"] != base:
            assert follower.post("/search?unit=doc", headers=KEY, json=question).status_code == 200
            assert time.monotonic() < deadline, "the follower never reloaded the merged base"
            time.sleep(0.05)

    with serving(create_app(write_settings())) as writer:
        assert resolve_alias(live / "merged").target == tiny_index.resolve()
        follower_settings = settings_for(index=live / "merged", index_poll_s=0.05, api_key="key")
        with serving(create_app(follower_settings)) as follower:
            assert writer.put("/documents", headers=KEY, json=DOC).status_code == 200
            assert follower.get("/documents/new-1", headers=KEY).status_code == 404  # not merged yet
            merged(writer, 1)
            followed(follower, writer)
            assert follower.get("/documents/new-1", headers=KEY).json() == writer.get("/documents/new-1",
                                                                                     headers=KEY).json()
            assert writer.put("/documents", headers=KEY, json={**DOC, "id": "new-2"}).status_code == 200
            assert writer.delete("/documents/new-1", headers=KEY).status_code == 200
            merged(writer, 2)  # then removes base-000001, which the follower serves until it reloads
            deadline = time.monotonic() + 10
            while (live / "bases" / "base-000001").exists():
                assert time.monotonic() < deadline, "the merged base before was never removed"
                time.sleep(0.01)
            followed(follower, writer)
            assert [follower.get(f"/documents/{i}", headers=KEY).status_code for i in ("new-1", "new-2")] == [404, 200]
    assert sorted(p.name for p in live.iterdir()) == ["bases", "merged", "state.json", "verified.json", "wal",
                                                      "writer.lock"]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="spanseek.service"), \
            serving(create_app(settings_for(index=live / "merged"))):
        pass  # no poll: it does not follow
    assert (f"{live / 'merged'} names the base the server with writes serves, and this server does not follow it as "
            "it merges (index_poll_s 0)") in caplog.text


def read_only(monkeypatch, folder) -> None:
    """Answer for ``folder`` as a read-only volume does (EROFS), for root too: the tests run as root."""
    import errno

    real_open, real_access = os.open, os.access

    def under(path) -> bool:
        return str(path).startswith(str(folder))

    def opener(path, flags, *args, **kwargs):
        if under(path) and flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", opener)
    monkeypatch.setattr(os, "access", lambda path, mode, **kw: (not (under(path) and mode & os.W_OK))
                        and real_access(path, mode, **kw))


def test_a_read_only_live_directory_is_refused_as_read_only_not_as_held_by_another_server(
        write_settings, tmp_path, monkeypatch):
    """A live directory on a read-only volume was refused as held by "another server with writes" (uvicorn
    --factory, which loads without `spanseek serve`'s checks): the refusal says it cannot be written."""
    with serving(create_app(write_settings())) as first:  # a live directory written before, then mounted read-only
        assert first.put("/documents", headers=KEY, json=DOC).status_code == 200
    read_only(monkeypatch, tmp_path / "live")
    with TestClient(create_app(write_settings())) as client:
        message = load_failure(client)
    assert f"{tmp_path / 'live' / WRITER_LOCK} cannot be written (a read-only volume" in message
    assert "another server" not in message


def test_a_file_system_without_file_locks_is_refused_saying_so(write_settings, tmp_path, monkeypatch, capsys):
    """flock on NFS without its lock service fails with ENOLCK: `spanseek serve --writes` printed
    "[Errno 37] No locks available", naming neither the file nor what to do."""
    import errno
    import fcntl

    from spanseek.cli import main
    from spanseek.core import integrity
    from spanseek.service import app as app_module

    def no_locks(fd, operation):
        raise OSError(errno.ENOLCK, os.strerror(errno.ENOLCK))

    (tmp_path / "live").mkdir()
    monkeypatch.setattr(integrity.fcntl, "flock", no_locks)
    assert integrity.fcntl is fcntl
    monkeypatch.setattr(app_module, "create_app", lambda *a, **k: pytest.fail("the app would load"))
    monkeypatch.setattr(server, "bind_sockets", lambda host, port: [])
    s = write_settings()
    assert main(["serve", "--index", str(s.index), "--model", str(s.model), "--device", "cpu", "--writes",
                 "--api-key", "key", "--live-dir", str(tmp_path / "live")]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (f"spanseek serve: error: {tmp_path / 'live' / WRITER_LOCK}: cannot be locked (No locks available): "
                   "its file system does not lock files (flock), so a second writer could not be told from the first: "
                   "use a local file system"), err


def test_a_follower_started_before_the_writer_is_told_to_start_the_writer_first(settings_for, tmp_path, capsys,
                                                                                monkeypatch):
    """`spanseek serve --index LIVE_DIR/merged` before any server with writes wrote that pointer was refused as "no
    such index directory (build one with `spanseek index build`)", and over a pointer naming a base removed since as
    naming "no directory": it now says who writes the pointer."""
    from spanseek.cli import main
    from spanseek.service import app as app_module

    monkeypatch.setattr(app_module, "create_app", lambda *a, **k: pytest.fail("the app would load"))
    monkeypatch.setattr(server, "bind_sockets", lambda host, port: [])
    s = settings_for()
    live = tmp_path / "index.live"
    for made in (False, True):  # the writer has not made its live directory yet; it made it, not yet the pointer
        if made:
            live.mkdir()
        assert main(["serve", "--index", str(live / "merged"), "--model", str(s.model), "--device", "cpu",
                     "--index-poll-s", "1"]) == 2
        err = capsys.readouterr().err.strip()
        assert err == (f"spanseek serve: error: --index / SPANSEEK_INDEX {live / 'merged'}: no such file yet: a server "
                       f"with writes over the live directory {live} writes it as it loads, naming the base it serves; "
                       f"start that server first (spanseek serve --writes --live-dir {live}), then this one"), err
    # a pointer naming a base removed since: was "the first line of this pointer file names no directory"
    (live / "merged").write_text("bases/base-000009\n")
    assert main(["serve", "--index", str(live / "merged"), "--model", str(s.model), "--device", "cpu"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (f"spanseek serve: error: --index / SPANSEEK_INDEX {live / 'merged'} names bases/base-000009, which "
                   f"is not there: the server with writes over {live} points it at the base it serves as it loads "
                   "and after each merge (its log says when it could not); start that server first (spanseek serve "
                   f"--writes --live-dir {live}), then this one, or restart it"), err
    assert main(["serve", "--index", str(tmp_path / "other"), "--model", str(s.model), "--device", "cpu"]) == 2
    assert "no such index directory" in capsys.readouterr().err  # a missing index of another name: as before


def test_a_merge_whose_pointer_switch_failed_keeps_the_base_followers_serve(write_settings, tmp_path, monkeypatch,
                                                                             caplog):
    """A merge removed the base before it whatever became of ``LIVE_DIR/merged``: where its switch failed (a full
    disk), followers left pointed at that base lost it. That base now stays until the writer's next start."""
    import errno

    from spanseek.indexer import live as live_store

    live = tmp_path / "live"
    live.mkdir()

    def full_disk(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    with serving(create_app(write_settings())) as writer:
        assert writer.put("/documents", headers=KEY, json=DOC).status_code == 200
        merged(writer, 1)
        assert (live / "bases" / "base-000001").is_dir()
        monkeypatch.setattr(live_store, "switch_alias", full_disk)
        assert writer.put("/documents", headers=KEY, json={**DOC, "id": "new-2"}).status_code == 200
        with caplog.at_level(logging.WARNING, logger="spanseek"):
            merged(writer, 2)
        assert (live / "bases" / "base-000001").is_dir()  # the pointer still names it
        assert "could not be pointed at the base served" in caplog.text
        assert writer.get("/documents/new-2", headers=KEY).status_code == 200
