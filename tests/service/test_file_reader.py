"""The process that reads uploaded files (``service.file_reader``): a worker that ends between files, and a stop while
it reads one."""

from __future__ import annotations

import asyncio
import dataclasses
import multiprocessing
import os
import shutil
import signal
import sys
import time
from concurrent.futures import Future

import pytest

from spanseek.indexer import read_process
from spanseek.indexer.ingest import IngestOptions
from spanseek.service import file_reader
from spanseek.service.file_reader import FileReader


def _stuck(data: bytes, name: str, opts: IngestOptions, timeout_s: float) -> file_reader.ReadFile:
    """A reader stuck on its file (run in the worker, which imports it from this module); it creates the file
    SPANSEEK_TEST_READING names, where set, once it has the file."""
    if os.environ.get("SPANSEEK_TEST_READING"):
        open(os.environ["SPANSEEK_TEST_READING"], "w").close()
    time.sleep(60)
    raise AssertionError("not stopped")


def _stuck_on_one(data: bytes, name: str, opts: IngestOptions, timeout_s: float) -> file_reader.ReadFile:
    """Stuck where no alarm reaches on the file ``stuck.txt``; the worker's own reading for any other."""
    if name == "stuck.txt":
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})  # as a reader inside a C call: no alarm
        time.sleep(60)
    # the worker's own module: not the test's replacement
    from spanseek.service.file_reader import _read_in_worker

    return _read_in_worker(data, name, opts, timeout_s)


def _wait_for(condition, seconds: float = 30.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def _start_unless_told_not_to(*args: object) -> None:
    """A reading process's start (run in the worker as its initializer, imported from this module) that ends the
    process while SPANSEEK_TEST_NO_START is set (as one that cannot be made or that crashes as it starts)."""
    if os.environ.get("SPANSEEK_TEST_NO_START"):
        raise OSError("cannot start here")
    read_process.start_reader(*args)  # type: ignore[arg-type]


@pytest.mark.slow  # (three workers started: 3-7 s)
def test_a_worker_that_cannot_start_is_the_servers_fault_and_the_next_file_starts_one_again(tiny_config, tmp_path,
                                                                                             monkeypatch, caplog):
    """A worker whose start failed broke its pool before it read anything, and the upload was refused as 'its reader
    stopped while reading it (a damaged file...)': the user's file blamed for the server's fault. It is
    ReaderUnavailable now, saying why, and the next file starts a worker anew."""
    monkeypatch.setattr(file_reader, "start_reader", _start_unless_told_not_to)
    monkeypatch.setenv("SPANSEEK_TEST_NO_START", "1")
    backbone = shutil.copytree(tiny_config.backbone, tmp_path / "backbone")
    tokenizer = (backbone / "tokenizer.json").read_bytes()
    reader = FileReader(dataclasses.replace(tiny_config, backbone=str(backbone)), 0, 1)

    def read() -> file_reader.ReadFile:
        return asyncio.run(reader.read(b"In 1450 Gala built the bridge.", "a.txt", IngestOptions()))

    try:
        with pytest.raises(file_reader.ReaderUnavailable, match=r"could not start \(it ended while starting") as e:
            read()
        assert "a.txt" not in str(e.value) and "damaged" not in str(e.value)
        assert any("uploaded files could not start" in r.getMessage() for r in caplog.records)  # the operator's log
        monkeypatch.delenv("SPANSEEK_TEST_NO_START")
        (backbone / "tokenizer.json").write_text("{", encoding="utf-8")  # a start that raises says why
        with pytest.raises(file_reader.ReaderUnavailable, match=r"could not start \(JSONDecodeError: "):
            read()
        (backbone / "tokenizer.json").write_bytes(tokenizer)  # the cause fixed: the next file starts a worker
        assert read().tokens > 0 and reader.worker_pid is not None
    finally:
        reader.close()


def _start_stuck_when_told(*args: object) -> None:
    """A reading process's start that hangs while SPANSEEK_TEST_HANG_START is set (a tokenizer read from a file
    system that stopped answering), in the worker."""
    if os.environ.get("SPANSEEK_TEST_HANG_START"):
        time.sleep(600)
    read_process.start_reader(*args)  # type: ignore[arg-type]


@pytest.mark.slow  # (two workers started: 3-6 s)
def test_a_worker_stuck_starting_is_killed_and_the_next_file_starts_one_again(tiny_config, monkeypatch):
    """A worker whose start hung was given up on (503) but left running: a process per failed upload, each holding its
    memory, and the service's exit then waited for them for ever (the abandoned pool's thread joins its worker). It is
    killed; the next file starts a worker that reads it, and close returns."""
    import multiprocessing

    monkeypatch.setattr(file_reader, "start_reader", _start_stuck_when_told)
    monkeypatch.setattr(file_reader, "KILL_GRACE_S", 0.0)
    monkeypatch.setenv("SPANSEEK_TEST_HANG_START", "1")
    before = set(multiprocessing.active_children())
    reader = FileReader(tiny_config, 0, 1, timeout_s=2.0)

    def read() -> file_reader.ReadFile:
        return asyncio.run(reader.read(b"In 1450 Gala built the bridge.", "a.txt", IngestOptions()))

    try:
        with pytest.raises(file_reader.ReaderUnavailable, match=r"could not start \(it did not start within 2 s"):
            read()
        _wait_for(lambda: not set(multiprocessing.active_children()) - before, 10.0)  # the stuck worker is gone
        monkeypatch.delenv("SPANSEEK_TEST_HANG_START")
        reader.timeout_s = 60.0  # (a start under load takes seconds)
        assert read().tokens > 0 and reader.worker_pid is not None
    finally:
        for child in set(multiprocessing.active_children()) - before - {None}:
            if child.pid != reader.worker_pid:  # (the old code's stuck worker: the test's exit would wait for it)
                child.kill()
        reader.close()


def test_a_worker_that_ended_between_files_costs_the_next_file_nothing(tiny_config):
    """A worker killed while idle (by the kernel for its memory, say) answered the next upload 'its reader stopped
    while reading it (a damaged file...)', a 422 its client does not send again; a new worker reads it."""
    reader = FileReader(tiny_config, 0, 1)
    try:
        read = asyncio.run(reader.read(b"In 1450 Gala built the bridge.", "a.txt", IngestOptions()))
        assert read.tokens > 0
        pid = reader.worker_pid
        os.kill(pid, 9)
        _wait_for(lambda: not os.path.exists(f"/proc/{pid}"))  # reaped: the pool knows it before the next file comes
        read = asyncio.run(reader.read(b"In 1460 Hugo built the church.", "b.txt", IngestOptions()))
        assert read.tokens > 0 and read.doc.paragraphs, read
    finally:
        reader.close()


@pytest.mark.slow  # (a worker started and killed: 4 s)
def test_close_signals_no_process_id_once_the_worker_ended(tiny_config, monkeypatch):
    """A worker that ended while idle is reaped by its pool, and its process id may go to another process: close()
    sent SIGTERM to that id all the same."""
    reader = FileReader(tiny_config, 0, 1)
    try:
        asyncio.run(reader.read(b"In 1450 Gala built the bridge.", "a.txt", IngestOptions()))
        pid = reader.worker_pid
        os.kill(pid, 9)
        _wait_for(lambda: not os.path.exists(f"/proc/{pid}"))  # reaped: its id is free for the system to reuse
    finally:
        sent: list[tuple[int, int]] = []
        monkeypatch.setattr(os, "kill", lambda p, s: sent.append((p, s)))
        reader.close()
    assert sent == []


def _heavy_modules() -> list[str]:
    """The modules of the encoder's stack that the process running this has imported."""
    return sorted(name for name in ("torch", "transformers") if name in sys.modules)


def test_the_worker_reads_and_counts_without_torch_or_transformers(tiny_config):
    """The worker imported torch and transformers to load the tokenizer (283 MB resident, 3.5 s to its first answer
    on an idle machine, 7 s under load): it reads and counts with neither, the counts the model's tokenizer gives."""
    from transformers import AutoTokenizer

    reader = FileReader(tiny_config, 0, 1)
    try:
        text = "In 1450 Gala built the bridge over the Maas; naïve café-owners cheered."
        read = asyncio.run(reader.read(text.encode(), "a.txt", IngestOptions()))
        assert reader._pool.submit(_heavy_modules).result(timeout=60) == []
    finally:
        reader.close()
    tokenizer = AutoTokenizer.from_pretrained(tiny_config.backbone)
    assert read.tokens == len(tokenizer(text, add_special_tokens=False)["input_ids"])


def test_close_stops_a_worker_in_the_middle_of_a_file(tiny_config, tmp_path, monkeypatch):
    """Closing waited for the file being read to end: a stuck reader held the service's stop for ever. The read is
    answered as the server's stop (503), not blamed on the file, and no worker starts anew for it."""
    monkeypatch.setattr(file_reader, "_read_in_worker", _stuck)
    monkeypatch.setenv("SPANSEEK_TEST_READING", str(tmp_path / "reading"))
    before = set(multiprocessing.active_children())
    reader = FileReader(tiny_config, 0, 1)
    loop = asyncio.new_event_loop()
    try:
        reading = loop.create_task(reader.read(b"stuck", "stuck.txt", IngestOptions()))
        # the loop runs until the worker has the file (the read handed to it, as it is only while the loop runs)
        loop.run_until_complete(_until(lambda: (tmp_path / "reading").exists()))
        pid = reader.worker_pid
        assert pid is not None
        t0 = time.monotonic()
        reader.close()
        assert time.monotonic() - t0 < 20
        assert not os.path.exists(f"/proc/{pid}") or _zombie(pid)
        loop.run_until_complete(asyncio.wait([reading], timeout=10))
        assert reading.done()
        with pytest.raises(file_reader.ReaderUnavailable, match="the server is stopping"):
            reading.result()
        assert not set(multiprocessing.active_children()) - before  # (no worker started after the close)
    finally:
        loop.close()


def test_a_read_waiting_for_its_worker_at_close_starts_none_after_it(tiny_config, monkeypatch):
    """A read whose worker had started, but that had not yet handed it its file, when the reader was closed: it
    started a new worker after the close (its old one killed by the close) and gave it the file, and the server's
    exit waited for that file's reading; or it failed with 'cannot schedule new futures after shutdown'. It is
    answered as the server's stop now, and starts nothing."""
    monkeypatch.setattr(file_reader, "_read_in_worker", _stuck)
    before = set(multiprocessing.active_children())
    reader = FileReader(tiny_config, 0, 1)
    loop = asyncio.new_event_loop()
    try:
        reading = loop.create_task(reader.read(b"stuck", "stuck.txt", IngestOptions()))
        loop.run_until_complete(asyncio.sleep(0))  # (the read waits for its worker's process id; the loop stops)
        _wait_for(lambda: reader.worker_pid is not None)
        reader.close()
        loop.run_until_complete(asyncio.wait([reading], timeout=10))
        with pytest.raises(file_reader.ReaderUnavailable, match="the server is stopping"):
            reading.result()
        assert not set(multiprocessing.active_children()) - before
    finally:
        loop.close()


async def _until(condition, seconds: float = 30.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.05)


def _zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[1].startswith("Z")
    except OSError:
        return True


def test_a_read_past_its_time_ends_with_an_error_naming_the_file_and_the_setting(monkeypatch):
    """A reader slow in Python (a hostile PDF's layout analysis) held its upload slot, and the worker, for as long
    as it took: the worker's alarm ends it at file_read_timeout_s."""
    def endless(data, name, opts, count):
        while True:
            pass

    monkeypatch.setattr(file_reader, "read_upload", endless)
    monkeypatch.setattr(read_process, "_count", lambda words: [1] * len(words))  # (the counter the worker loads)
    t0 = time.monotonic()
    with pytest.raises(file_reader.IngestError, match=r"big\.pdf: not read within 0\.3 s \(file_read_timeout_s\)"):
        file_reader._read_in_worker(b"%PDF", "big.pdf", IngestOptions(), 0.3)
    assert time.monotonic() - t0 < 5
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)  # the alarm put away


def test_a_reader_stuck_past_the_alarm_is_killed_and_the_file_behind_it_is_read(tiny_config, monkeypatch):
    """A reader stuck where the alarm does not reach held every upload behind it for good (with every slot held,
    each upload was a 429 for ever): its worker is killed, it is refused, and the file queued behind it is read by
    the new worker, not refused as a stopped reader's."""
    monkeypatch.setattr(file_reader, "_read_in_worker", _stuck_on_one)
    reader = FileReader(tiny_config, 0, 2, timeout_s=0.5)

    async def both():
        # the worker started (a first file read), the stuck file's deadline is short: 2 * 0.5 s + 1 s, past the
        # worker's own alarm that does not reach it; the file behind it, read by a new worker, has time to start one
        assert (await reader.read(b"In 1440 Cato built the castle.", "first.txt", IngestOptions())).tokens > 0
        monkeypatch.setattr(file_reader, "KILL_GRACE_S", 1.0)
        stuck = asyncio.ensure_future(reader.read(b"stuck", "stuck.txt", IngestOptions()))
        await asyncio.sleep(0.2)
        monkeypatch.setattr(file_reader, "KILL_GRACE_S", 20.0)  # (the new worker starts well within it)
        fine = asyncio.ensure_future(reader.read(b"In 1450 Gala built the bridge.", "a.txt", IngestOptions()))
        return await asyncio.gather(stuck, fine, return_exceptions=True)

    try:
        t0 = time.monotonic()
        stuck, fine = asyncio.run(both())
        assert time.monotonic() - t0 < 90
        assert isinstance(stuck, file_reader.ReaderStopped) and "stuck.txt" in str(stuck), stuck
        assert "file_read_timeout_s" in str(stuck)
        assert not isinstance(fine, BaseException) and fine.tokens > 0, fine
    finally:
        reader.close()


def _aborts_on_one(data: bytes, name: str, opts: IngestOptions, timeout_s: float) -> file_reader.ReadFile:
    """Ends the worker on ``huge.txt``, as a library that aborts when an allocation fails (Rust's, C's) rather than
    raising MemoryError; the worker's own reading for any other."""
    if name == "huge.txt":
        os.abort()
    from spanseek.service.file_reader import _read_in_worker

    return _read_in_worker(data, name, opts, timeout_s)


def _data_limit() -> int:
    import resource

    return resource.getrlimit(resource.RLIMIT_DATA)[0]


def test_the_worker_reads_within_its_memory_cap_and_one_that_ends_on_a_file_says_so(tiny_config, monkeypatch):
    """The worker's data is capped at memory_bytes; a file it ends on (a library aborting when an allocation fails)
    is refused naming the cap, and a new worker, capped alike, reads the next file."""
    monkeypatch.setattr(file_reader, "_read_in_worker", _aborts_on_one)
    reader = FileReader(tiny_config, 0, 1, memory_bytes=512 << 20)
    try:
        assert reader._pool.submit(_data_limit).result(timeout=60) == 512 << 20
        with pytest.raises(file_reader.ReaderStopped, match=r"huge\.txt: .* within file_read_memory_bytes, 536,870,912"):
            asyncio.run(reader.read(b"In 1450 Gala built the bridge.", "huge.txt", IngestOptions()))
        read = asyncio.run(reader.read(b"In 1460 Hugo built the church.", "b.txt", IngestOptions()))
        assert read.tokens > 0
        assert reader._pool.submit(_data_limit).result(timeout=60) == 512 << 20
    finally:
        reader.close()


_HELD: list[bytes] = []


def _keeps_memory(data: bytes, name: str, opts: IngestOptions, timeout_s: float) -> file_reader.ReadFile:
    """Reads as the worker does, and on ``big.txt`` keeps 256 MiB resident after it (as a large file's reading left
    the allocator holding 4.5 GB)."""
    if name.startswith("big"):
        _HELD.append(b"x" * (256 << 20))
    if name == "big-refused.txt":
        raise file_reader.IngestError(f"{name}: not a document")
    from spanseek.service.file_reader import _read_in_worker

    return _read_in_worker(data, name, opts, timeout_s)


def _worker_pid(reader: FileReader) -> int:
    pid = reader.worker_pid
    assert pid is not None
    return pid


def _resident(pid: int) -> int | None:
    """The resident bytes of ``pid`` read here (not with the code under test), None once it is gone."""
    try:
        return int(open(f"/proc/{pid}/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        return None


linux = pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="reads resident memory from /proc")


@linux
def test_a_worker_left_large_by_a_file_is_replaced_and_the_next_file_read_by_a_fresh_one(tiny_config, monkeypatch):
    """A read that leaves the worker resident past keep_bytes (a 30 MiB HTML page left it at 4.5 GB) replaces it; a
    small read keeps it."""
    monkeypatch.setattr(file_reader, "_read_in_worker", _keeps_memory)
    reader = FileReader(tiny_config, 0, 1, keep_bytes=128 << 20)
    try:
        asyncio.run(reader.read(b"In 1450 Gala built the bridge.", "a.txt", IngestOptions()))
        first = _worker_pid(reader)
        idle = _resident(first)
        assert idle is not None and idle < 200 << 20
        asyncio.run(reader.read(b"In 1455 Ada built the mill.", "small.txt", IngestOptions()))
        assert _worker_pid(reader) == first  # a small file leaves it as it was: kept
        read = asyncio.run(reader.read(b"In 1460 Hugo built the church.", "big.txt", IngestOptions()))
        assert read.tokens > 0
        _wait_for(lambda: _resident(first) is None)  # the large worker ended
        read = asyncio.run(reader.read(b"In 1470 Ida built the tower.", "c.txt", IngestOptions()))
        assert read.tokens > 0 and _worker_pid(reader) != first
        fresh = _resident(_worker_pid(reader))
        assert fresh is not None and fresh < idle + (64 << 20)
    finally:
        reader.close()


@linux
def test_a_worker_left_large_by_a_file_it_refused_is_replaced_too(tiny_config, monkeypatch):
    monkeypatch.setattr(file_reader, "_read_in_worker", _keeps_memory)
    reader = FileReader(tiny_config, 0, 1, keep_bytes=128 << 20)
    try:
        with pytest.raises(file_reader.IngestError, match="big-refused.txt: not a document"):
            asyncio.run(reader.read(b"In 1450 Gala built the bridge.", "big-refused.txt", IngestOptions()))
        assert reader.worker_pid is None  # replaced: the next upload starts a fresh worker
        assert asyncio.run(reader.read(b"In 1460 Hugo built the church.", "c.txt", IngestOptions())).tokens > 0
    finally:
        reader.close()


@linux
def test_without_keep_bytes_a_large_worker_is_kept(tiny_config, monkeypatch):
    monkeypatch.setattr(file_reader, "_read_in_worker", _keeps_memory)
    reader = FileReader(tiny_config, 0, 1)
    try:
        asyncio.run(reader.read(b"In 1460 Hugo built the church.", "big.txt", IngestOptions()))
        first = _worker_pid(reader)
        assert (_resident(first) or 0) > 256 << 20
        asyncio.run(reader.read(b"In 1470 Ida built the tower.", "c.txt", IngestOptions()))
        assert _worker_pid(reader) == first
    finally:
        reader.close()


@linux
def test_resident_bytes_of_a_process_that_is_gone_is_none():
    assert file_reader.resident_bytes(os.getpid()) > 0
    assert file_reader.resident_bytes(2**22 + 1) is None


SERVER = """
import asyncio, pickle, sys, time
from spanseek.indexer import read_process
from spanseek.indexer.ingest import IngestOptions
from spanseek.service.file_reader import FileReader
reader = FileReader(pickle.load(open(sys.argv[1], "rb")), 0, 1)
asyncio.run(reader.read(b"In 1450 Gala built the bridge.", "a.txt", IngestOptions()))
print(reader.worker_pid, flush=True)
time.sleep(120)
"""


def test_a_server_killed_outright_leaves_no_reader_behind(tiny_config, tmp_path):
    """A server killed with kill -9 closes nothing: its idle reader, adopted by init, ran on for as long as the host
    did. The reader now ends within a few seconds of its server."""
    import pickle
    import subprocess

    (tmp_path / "config.pkl").write_bytes(pickle.dumps(tiny_config))
    server = subprocess.Popen([sys.executable, "-c", SERVER, str(tmp_path / "config.pkl")], stdout=subprocess.PIPE,
                              text=True)
    (worker,) = map(int, server.stdout.readline().split())
    try:
        os.kill(server.pid, signal.SIGKILL)
        server.wait(timeout=30)
        _wait_for(lambda: _zombie(worker), seconds=15)
    finally:
        server.kill()
        if not _zombie(worker):  # the old reader: not left running after the test
            os.kill(worker, signal.SIGKILL)


def _zombie(pid: int) -> bool:
    """Whether ``pid`` has ended and waits for its (new) parent to collect it."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


class _PoolNotYetRunning:
    """A pool whose work waits in its queue until the test answers it: the moment a worker is still starting."""

    def __init__(self) -> None:
        self.asked: list[Future] = []

    def submit(self, fn, *args) -> Future:
        self.asked.append(Future())
        return self.asked[-1]


def test_an_upload_cancelled_while_the_worker_starts_leaves_the_start_to_the_next_upload(tiny_config, monkeypatch):
    """A request cancelled (its client gone) while it waited for the worker to start does not cancel the start's
    question: the next upload waits for the same worker's answer and is served, not failed with CancelledError."""
    pool = _PoolNotYetRunning()
    monkeypatch.setattr(FileReader, "_start", lambda self: pool)
    reader = FileReader(tiny_config, 0, 1)

    async def cancelled_then_served() -> object:
        first = asyncio.create_task(reader._started(reader._pool))
        await asyncio.sleep(0.01)
        first.cancel()
        with pytest.raises(asyncio.CancelledError):
            await first
        second = asyncio.create_task(reader._started(reader._pool))
        await asyncio.sleep(0.01)
        pool.asked[0].set_result(os.getpid())  # the worker, started, answers
        return await second

    assert asyncio.run(cancelled_then_served()) is pool
    assert len(pool.asked) == 1  # asked once, answered once


def test_an_upload_is_read_without_running_the_servers_main_module_again(tiny_config, tmp_path, monkeypatch):
    """The worker is spawned, and spawn ran the starting program's main module again in it: a script that served
    the app (uvicorn.run(create_app(...))) without an ``if __name__ == "__main__":`` guard ran a second time at the
    first upload, in the worker (its model loaded again, its port taken), and the worker could not start. The
    worker now leaves the server's __main__ alone, as the dry run's and from-files' reading processes do."""
    import types

    ran = tmp_path / "ran"
    script = tmp_path / "serve.py"
    script.write_text(f"open({str(ran)!r}, 'a').write('ran')\n")
    main = types.ModuleType("__main__")
    main.__file__ = str(script)  # (a script run as python serve.py: spawn's child runs its __file__)
    monkeypatch.setitem(sys.modules, "__main__", main)
    reader = FileReader(tiny_config, 0, 1)
    try:
        read = asyncio.run(reader.read(b"In 1450 Gala built the bridge.", "a.txt", IngestOptions()))
    finally:
        reader.close()
    assert read.tokens > 0 and not ran.exists()
