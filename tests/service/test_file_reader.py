"""The process that reads uploaded files (``service.file_reader``): a worker that ends between files, and a stop while
it reads one."""

from __future__ import annotations

import asyncio
import os
import time

from spanseek.indexer.ingest import IngestOptions
from spanseek.service import file_reader
from spanseek.service.file_reader import FileReader


def _stuck(data: bytes, name: str, opts: IngestOptions) -> file_reader.ReadFile:
    """A reader stuck on its file (run in the worker, which imports it from this module)."""
    time.sleep(60)
    raise AssertionError("not stopped")


def _wait_for(condition, seconds: float = 30.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_a_worker_that_ended_between_files_costs_the_next_file_nothing(tiny_config):
    """A worker killed while idle (by the kernel for its memory, say) answered the next upload 'its reader stopped
    while reading it (a damaged file...)', a 422 its client does not send again; a new worker reads it."""
    reader = FileReader(tiny_config, 0, 1)
    try:
        read = asyncio.run(reader.read(b"In 1450 Gala built the bridge.", "a.txt", IngestOptions()))
        assert read.tokens > 0
        (pid,) = list(reader._pool._processes)
        os.kill(pid, 9)
        _wait_for(lambda: reader._pool._broken)  # the pool knows it before the next file comes
        read = asyncio.run(reader.read(b"In 1460 Hugo built the church.", "b.txt", IngestOptions()))
        assert read.tokens > 0 and read.doc.paragraphs, read
    finally:
        reader.close()


def test_close_stops_a_worker_in_the_middle_of_a_file(tiny_config, monkeypatch):
    """Closing waited for the file being read to end: a stuck reader held the service's stop for ever."""
    monkeypatch.setattr(file_reader, "_read_in_worker", _stuck)
    reader = FileReader(tiny_config, 0, 1)

    async def start_reading() -> asyncio.Future:
        reading = asyncio.ensure_future(reader.read(b"stuck", "stuck.txt", IngestOptions()))
        await asyncio.sleep(0)
        return reading

    loop = asyncio.new_event_loop()
    try:
        reading = loop.run_until_complete(start_reading())
        (pid,) = list(reader._pool._processes)
        time.sleep(1)  # (the file handed to the worker)
        t0 = time.monotonic()
        reader.close()
        assert time.monotonic() - t0 < 20
        assert not os.path.exists(f"/proc/{pid}") or _zombie(pid)
        loop.run_until_complete(asyncio.wait([reading], timeout=10))
        assert reading.done()
    finally:
        loop.close()


def _zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[1].startswith("Z")
    except OSError:
        return True
