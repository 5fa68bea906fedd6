"""A server with writes holds its index's lock from before it reads the base (service.app): an offline change
cannot land between the loading and the live store's taking the lock.

    .venv/bin/python -m pytest -q tests/service/test_load_lock.py
"""

from __future__ import annotations

import gc
import shutil
import time
import weakref

import pytest

from spanseek.core.phrase_index import PhraseIndex
from spanseek.indexer.out_dir import BuildError
from spanseek.service import app as app_module
from spanseek.service.app import create_app
from tests.indexer.test_live import without_lexical
from tests.service.conftest import serving


def test_add_lexical_while_a_server_with_writes_loads_is_refused_not_left_unserved(write_settings, tiny_index, tmp_path,
                                                                                     monkeypatch):
    """`index add-lexical` run after the server had read the base but before its live store took the index's lock
    gave the index its lexical part on disk while the server went on serving the base it had read, without one.
    The lock is now held from before the base is read: the change is refused, naming the lock, and what is served is
    what is on disk."""
    from spanseek.indexer.lexical import add_lexical

    index = tmp_path / "index"
    shutil.copytree(tiny_index, index)
    without_lexical(index)
    refused: list[str] = []
    live_writes = app_module.LiveWrites

    def offline_change_then_live_writes(*args, **kwargs):  # the window: the base read, the live store not started
        try:
            add_lexical(index, tmp_path / "live")
        except BuildError as e:
            refused.append(str(e))
        return live_writes(*args, **kwargs)

    monkeypatch.setattr(app_module, "LiveWrites", offline_change_then_live_writes)
    app = create_app(write_settings(index=index))
    with serving(app) as client:
        assert client.get("/ready").status_code == 200
        served = app.state.service.live.store.base
        assert (served.lexical is None) == (PhraseIndex(index).lexical is None), refused
    assert len(refused) == 1 and "holds its lock" in refused[0], refused


def test_a_standby_that_lost_the_race_holds_no_lock_nor_searcher_of_the_index_while_it_stands_by_again(
        write_settings, tiny_index, tmp_path, monkeypatch):
    """Two standbys started at once: the one whose live store is refused (the other took the writer lock first)
    stands by again. It kept the index's lock of its first load all that time, so an `spanseek index` command run
    while the other writer was stopped was refused naming a server that serves nothing. It now stands by without
    it, and takes it again when it loads. It also kept the searcher it had opened (the whole index in memory) for as
    long as it stood by again, the other server writing for hours: that one is freed now."""
    from spanseek.core.integrity import writer_lock
    from spanseek.indexer.live import LiveStoreError

    index = tmp_path / "index"
    shutil.copytree(tiny_index, index)
    free_while_standing_by: list[bool] = []
    stood_by: list[int] = []
    opened: list[weakref.ref] = []  # the searcher each load opened
    kept_while_standing_by: list[bool] = []
    live_writes, stand_by = app_module.LiveWrites, app_module.stand_by

    def refused_once(settings, metrics, searcher, *args, **kwargs):  # the other standby's store took the lock first
        opened.append(weakref.ref(searcher))
        if len(stood_by) == 1:
            raise LiveStoreError("another server writes to this live directory")
        return live_writes(settings, metrics, searcher, *args, **kwargs)

    async def standing_by(*args, **kwargs):
        stood_by.append(1)
        if len(stood_by) > 1:  # standing by again: what an `index` command (exclusive) would find
            with writer_lock(index) as taken:
                free_while_standing_by.append(taken)
            gc.collect()
            kept_while_standing_by.append(opened[0]() is not None)
        return await stand_by(*args, **kwargs)

    elsewhere = iter(["process 1 writes there"])  # the other standby, once
    monkeypatch.setattr(app_module, "LiveWrites", refused_once)
    monkeypatch.setattr(app_module, "stand_by", standing_by)
    monkeypatch.setattr(app_module, "writer_elsewhere", lambda live_dir: next(elsewhere, None))
    app = create_app(write_settings(index=index, writes_standby=True))
    with serving(app) as client:
        assert client.get("/ready").status_code == 200, client.get("/ready").text
        assert free_while_standing_by == [True]
        assert kept_while_standing_by == [False] and len(opened) == 2
        with writer_lock(index) as taken:  # serving with writes: the live store holds it again
            assert not taken


@pytest.mark.parametrize("step", ["hold_index", "LiveWrites"])
def test_a_start_stopped_while_it_takes_the_locks_or_replays_the_log_leaves_neither_held(write_settings, tiny_index,
                                                                                        tmp_path, monkeypatch, step):
    """A server with writes stopped while it started: the step then running in the worker thread (taking the index's
    lock, or the live store replaying its log) ran on, and what it made was dropped unclosed. The live store held the
    live directory's writer lock and its log until a garbage collection found it (a server started again in the
    process was refused, as if another wrote there). What such a step makes is closed once it ends."""
    import asyncio
    import threading

    from spanseek.core.integrity import writer_lock
    from spanseek.indexer.live import hold_live_dir

    index = tmp_path / "index"
    shutil.copytree(tiny_index, index)
    real = getattr(app_module, step)
    entered, go = threading.Event(), threading.Event()

    def slow(*args, **kwargs):  # the step runs on after the load was cancelled
        made = real(*args, **kwargs)
        entered.set()
        go.wait(30)
        return made

    monkeypatch.setattr(app_module, step, slow)
    app = create_app(write_settings(index=index))

    async def start_then_stop() -> None:
        async with app.router.lifespan_context(app):
            while not entered.is_set():
                await asyncio.sleep(0.01)

    gc.disable()  # only what the service closes is closed
    try:
        asyncio.run(start_then_stop())
        go.set()
        deadline = time.monotonic() + 30
        while any(t.name.startswith("spanseek-encode") for t in threading.enumerate()):  # the step's thread ends
            assert time.monotonic() < deadline, "the worker thread never ended"
            time.sleep(0.01)
        with writer_lock(index) as taken:
            assert taken, "the index's lock is still held"
        if step == "LiveWrites":  # (LiveStoreError naming this process while it is still held)
            hold_live_dir(tmp_path / "live").close()
    finally:
        gc.enable()
