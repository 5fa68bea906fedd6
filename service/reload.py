"""Hot reload: swap the served index without dropping a request (``POST /admin/reload`` or an alias switch).

The served path (``SPANSEEK_INDEX``) may be an index directory or an alias (core.alias: a symlink or a pointer file
naming the index directory). A reload resolves the path again (or takes a new one from the request), loads the
index in its own thread (checksums verified, the model that built it checked against the served model; the
question encoder is shared), warms it up, and only then swaps it into the batcher: batches already taken finish
on the old index, the next ones run on the new one, and the old index is released once its last batch is done. If
anything fails before the swap, the old index keeps serving and the caller gets the reason (409).

With ``index_poll_s`` set, a watcher notices when the alias points elsewhere or the index's manifest is rewritten
(``spanseek index switch``, ``ln -sfn``, ``index add``) and reloads by itself; SIGHUP reloads the served path.

A reload reads and checksums the whole index (of a base a writer merged and verified, only the files changed
since: ``verify_changed``) and holds two copies in memory until the swap, so reloads on request
(``on_request``: the route and SIGHUP) share one: a request that comes while a reload of the same path runs waits
for that one, and one that comes less than ``reload_min_interval_s`` after the last successful one ended gets 429
with Retry-After (after a failed one: less than that failure took, so a mistyped path costs no wait and a slow
failure cannot be repeated back to back; failures within ``QUICK_FAILURE_S`` hold off nothing). The route needs the API key (without one it is off). While a reload runs, the batcher does not learn
its batch rate from the batches the reload slows down (``MicroBatcher.learning_paused``): requests are admitted on
the rate measured before it, not refused for the reload's work.

    curl -X POST -H "X-API-Key: $KEY" localhost:8000/admin/reload -d '{"index": "/data/indexes/v2"}'
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import functools
import logging
import time
import weakref
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from spanseek.core.alias import AliasError, Resolved, resolve_alias
from spanseek.core.params import UNITS, SearchParams
from spanseek.core.phrase_index import MANIFEST, Manifest
from spanseek.core.search import Searcher
from spanseek.service.batcher import encode_batch, search_batch
from spanseek.service.errors import SHUTTING_DOWN, NotReady, ReloadFailed, ReloadThrottled
from spanseek.service.heap import settle
from spanseek.service.settings import Settings

if TYPE_CHECKING:
    from spanseek.service.batcher import MicroBatcher
    from spanseek.service.metrics import ServiceMetrics

WARMUP_QUESTIONS = ["what is the warm-up question?", "", "¿Quién? 谁 كيف"]


def warm_up_requests(top_k: int, nprobe: int | None) -> list[tuple[list[str], SearchParams]]:
    """The warm-up's requests: every unit once, then a search that collapses copies, which finds the index's copies
    (``core.duplicates``) before the first request that asks for it."""
    return [*((WARMUP_QUESTIONS, SearchParams(u, top_k, nprobe=nprobe)) for u in UNITS),
            (WARMUP_QUESTIONS, SearchParams("passage", top_k, nprobe=nprobe, collapse_duplicates=True))]


def index_nprobe(searcher: Searcher) -> int | None:
    """The IVF nprobe the index was loaded with (None for indexes without inverted lists)."""
    nprobe = getattr(searcher.index, "default_nprobe", None)  # PhraseIndex reads it from the IVF at load
    return nprobe if isinstance(nprobe, int) else None


class ServiceState(Protocol):
    """What a reloader reads and changes of the service's state (``service.app.ServiceState``)."""

    settings: Settings
    status: str
    detail: Any
    info: dict[str, Any]
    searcher: Searcher | None
    batcher: MicroBatcher | None
    metrics: ServiceMetrics
    executor: ThreadPoolExecutor
    search_executor: ThreadPoolExecutor | None
    factory: Any

    async def load(self, factory: Any) -> None: ...

    def swap_searcher(self, searcher: Searcher, resolved: Resolved) -> None: ...

    def pool(self, name: str) -> ThreadPoolExecutor: ...

log = logging.getLogger("spanseek.service.reload")

# (settings, index directory, searcher now served) -> a searcher over that directory for the same model
Reopener = Callable[[Settings, Path, Searcher], Searcher]
Signature = tuple[Any, ...]
QUICK_FAILURE_S = 1.0  # a failed reload shorter than this (a mistyped path) holds off no other
RELEASE_WAIT_S = 120.0  # longest a reload waits for the old index's last batch before reporting


def default_reopener(settings: Settings, index_dir: Path, current: Searcher) -> Searcher:
    """Open ``index_dir`` for the served model, sharing the served searcher's question encoder. A base the writer
    merged and verified (a follower of ``LIVE_DIR/merged``) has only its files changed since checksummed again
    (``verify_changed``); any other index all of them."""
    from spanseek.core.loading import reopen_searcher

    verified = verify_changed(index_dir)
    return reopen_searcher(index_dir, settings.model, current.encoder, settings.search_device, current,
                           verify_checksums=not verified)


def verify_changed(index_dir: Path) -> bool:
    """Checksum the files of ``index_dir`` that changed since the writer that merged it verified them
    (``indexer.live.unverified_files``); True when that covered them all, False when the writer recorded nothing for
    it (the caller verifies every file). IndexFormatError naming a damaged one."""
    from spanseek.core import integrity
    from spanseek.core.phrase_index import IndexFormatError, Manifest
    from spanseek.indexer.live import unverified_files

    changed = unverified_files(index_dir)
    if changed is None:
        return False
    files = Manifest.load(index_dir).files or {}
    problems = integrity.check_files(index_dir, {rel: files[rel] for rel in changed if rel in files})
    if problems:
        raise IndexFormatError(f"damaged index: {problems[0]}; rebuild or restore the index")
    if changed:
        log.info("%s: checksummed %d files changed since the writer verified them", index_dir, len(changed))
    return True


def signature_of(path: Path) -> Signature:
    """What the watcher compares: the alias's target and its manifest file's identity (a rewrite changes it)."""
    try:
        target = resolve_alias(path).target
        st = (target / MANIFEST).stat()
    except (AliasError, OSError, ValueError) as e:  # (ValueError: a path with a NUL)
        return ("unresolvable", str(e))
    return (str(target), st.st_ino, st.st_mtime_ns, st.st_size)


def index_identity(resolved: Resolved, manifest: Manifest) -> dict[str, Any]:
    """The /info fields naming the index in use (beside its ``dir``): the served path, its kind (alias or
    directory), the manifest checksum and the load time."""
    return {
        "path": str(resolved.path.absolute()), "alias": resolved.kind,  # absolute: hide_paths can shorten it
        "manifest_checksum": manifest.to_dict()["checksum"],
        "loaded_at": _now(),
    }


class IndexReloader:
    """Reloads the service's index on request or when its alias changes; one reload at a time."""

    def __init__(self, state: ServiceState, reopener: Reopener | None = None):
        self.state = state
        self.reopener = reopener or default_reopener
        # the served path (alias or directory; a reload may change it), absolute: a start that fails on it quotes it so,
        # and hide_paths shortens it for a caller without a key (/ready, /health), where a relative path showed whole
        self.path = Path(state.settings.index).absolute()
        self.signature: Signature | None = None  # of the path when the served index was loaded
        self._failed: Signature | None = None  # the watcher does not retry a switch that already failed
        self._lock = asyncio.Lock()
        self.executor = state.pool("spanseek-reload")
        self.reloads = 0
        self.failures = 0
        self.last: dict[str, Any] | None = None  # the last attempt: when, outcome, error
        self.under_way: dict[str, Any] | None = None  # the attempt now loading: its path, cause and start
        self._running: tuple[Path, asyncio.Task] | None = None  # the reload on request under way, shared
        self._next = -float("inf")  # monotonic time from which the next reload on request may start
        self._ended, self._last_outcome = -float("inf"), "ended"  # when the last reload on request ended, and how
        self._abandoned = False  # the server is stopping: no reload is waited for (``abandon``)
        self._swapped: asyncio.Task | None = None  # the last reload that swapped its index in (``abandon``)

    def describe(self) -> dict[str, Any]:
        """Counters, the attempt under way (None when none is) and the last one ended, for /info."""
        return {"reloads": self.reloads, "failed": self.failures, "running": self.under_way, "last": self.last,
                "poll_s": self.state.settings.index_poll_s or None}

    async def on_request(self, path: Path | None = None, reason: str = "request") -> dict[str, Any]:
        """``reload`` for a caller: joins the reload of the same path under way, else starts one unless the last
        ended less than ``reload_min_interval_s`` ago, or the last failed one less than its own length ago
        (ReloadThrottled, 429). The reload goes on if the caller leaves."""
        if self._abandoned:
            raise NotReady(SHUTTING_DOWN)
        if self.state.status == "broken":  # the server stops to be restarted: a new index would not be searched
            raise NotReady(f"{self.state.detail}; no reload: the service must be started again")
        # absolute, as the served path is: one index named relative or not is one reload
        target = Path(path if path is not None else self.path).absolute()
        if self._running is not None and self._running[0] != target:
            raise ReloadThrottled("a reload of another index is under way; retry once it is done", 1.0)
        if self._running is None:
            interval, now = self.state.settings.reload_min_interval_s, time.monotonic()
            wait = self._next - now
            if wait > 0:
                ended = f"the last reload {self._last_outcome} {now - self._ended:.0f} s ago"
                raise ReloadThrottled(f"{ended}; reloads are at least {interval:g} s apart (reload_min_interval_s; after a "
                                 "failure, as long as it took)", wait)
            task = asyncio.get_running_loop().create_task(self.reload(target, reason), name="spanseek-reload")
            task.add_done_callback(functools.partial(self._ended_now, started=time.monotonic()))
            self._running = (target, task)
        running = self._running[1]
        try:
            return await asyncio.shield(running)
        except asyncio.CancelledError:
            if self._abandoned and running.cancelled():
                raise NotReady(f"{SHUTTING_DOWN}: the reload was abandoned, the index served is unchanged") from None
            raise

    def _ended_now(self, task: asyncio.Task, started: float) -> None:
        now = time.monotonic()
        failed = task.cancelled() or task.exception() is not None  # (retrieved: not asyncio's "never retrieved")
        interval = self.state.settings.reload_min_interval_s
        took = now - started
        self._next = now + (interval if not failed else min(interval, took) if took >= QUICK_FAILURE_S else 0.0)
        self._ended, self._last_outcome = now, "failed" if failed else "ended"
        if self._running is not None and self._running[1] is task:
            self._running = None

    async def reload(self, path: Path | None = None, reason: str = "request") -> dict[str, Any]:
        """Load ``path`` (default: the served path, resolved again), warm it up, swap it in, release the old index.

        Returns the new index's /info fields. Raises ReloadFailed (the old index keeps serving) or NotReady.
        """
        batcher = self.state.batcher
        # absolute, as ``index.path`` is, in ``running`` and in every error that quotes it (``last.error``): hide_paths
        # shortens it for a caller without a key, where a relative path showed whole
        path = Path(path if path is not None else self.path).absolute()
        async with self._lock:
            # (/info says so while it loads: ``last`` and /health stay the index served until the swap)
            self.under_way = {"index": str(path), "reason": reason, "since": _now()}
            try:
                with batcher.learning_paused() if batcher is not None else contextlib.nullcontext():
                    return await self._reload(path, reason)
            finally:
                self.under_way = None

    async def _reload(self, path: Path, reason: str) -> dict[str, Any]:
        """The reload itself, under the lock (``reload``)."""
        state = self.state
        if state.status == "failed":  # nothing serves: load from scratch (the model too)
            return await self._load_again(path, reason)
        if state.batcher is None or state.searcher is None:
            raise NotReady("the model and index are still loading; reload once /ready says so")
        t0 = time.perf_counter()
        loop = asyncio.get_running_loop()
        signature = await loop.run_in_executor(self.executor, signature_of, path)
        try:
            resolved = await loop.run_in_executor(self.executor, resolve_alias, path)
            new = await loop.run_in_executor(self.executor, self.reopener, state.settings, resolved.target,
                                             state.searcher)
            loaded = time.perf_counter() - t0
            if state.settings.warmup:
                await self._warm_up(new)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # a bad, damaged or foreign index: keep serving the old one
            raise self._failure(signature, reason, f"{type(e).__name__}: {e}",
                                f"reload of {path} failed, still serving the previous index") from None
        old = weakref.ref(state.searcher)  # no strong reference here: _release collects it, cycles and all
        self.path, self.signature, self._failed = path, signature, None
        self._swapped = asyncio.current_task()  # done from here on: a stop no longer abandons it
        state.swap_searcher(new, resolved)
        self._success(reason, resolved.target, t0, loaded)
        released = await self._release(old)
        return {**state.info["index"], "released_previous": released}

    async def _load_again(self, path: Path, reason: str) -> dict[str, Any]:
        """After a failed start: load ``path`` as at startup; the service turns ready if it loads."""
        t0 = time.perf_counter()
        previous = self.path, self.signature
        self.path = path
        await self.state.load(self.state.factory)  # sets self.signature to the new path's
        if self.state.status != "ready":
            failed = self.signature
            self.path, self.signature = previous  # the watcher keeps watching the served path
            raise self._failure(failed, reason, str(self.state.detail), f"reload of {path} failed, still not serving")
        self._failed = None
        self._success(reason, Path(self.state.info["index"]["dir"]), t0, None)
        return {**self.state.info["index"], "released_previous": True}

    def _success(self, reason: str, target: Path, t0: float, loaded: float | None) -> None:
        """Count and record a reload; ``loaded``: seconds spent opening and checking the index (the rest: warm-up)."""
        self.reloads += 1
        seconds = time.perf_counter() - t0
        self.last = {"at": _now(), "reason": reason, "outcome": "ok", "seconds": round(seconds, 3),
                     "load_seconds": round(loaded, 3) if loaded is not None else None}
        self.state.metrics.reloads.labels(outcome="ok").inc()
        log.info("reloaded %s -> %s in %.1f s (%s)", self.path, target, seconds, reason)

    def _failure(self, signature: Signature | None, reason: str, detail: str, outcome: str) -> ReloadFailed:
        """Count and record a failed reload; the error to raise (the watcher will not retry ``signature``)."""
        self.failures += 1
        self._failed = signature
        self.last = {"at": _now(), "reason": reason, "outcome": "failed", "error": detail}
        self.state.metrics.reloads.labels(outcome="failed").inc()
        log.error("%s: %s", outcome, detail)
        return ReloadFailed(f"{outcome}: {detail}")

    async def _warm_up(self, searcher: Searcher) -> None:
        """Every unit once (and a collapsing search, ``warm_up_requests``) on the new index before it serves: encoded in the encoder's thread (which the question
        encoder never leaves), searched in this reloader's thread (the served index keeps its own)."""

        loop = asyncio.get_running_loop()
        nprobe = self.state.settings.default_nprobe or index_nprobe(searcher)
        requests = warm_up_requests(self.state.settings.default_top_k, nprobe)
        encoded = await loop.run_in_executor(self.state.executor, encode_batch, searcher, requests)
        await loop.run_in_executor(self.executor, search_batch, searcher, encoded)

    async def _release(self, old: weakref.ref[Searcher]) -> bool:
        """Wait until no batch runs on ``old`` any more, then collect it (faiss and memory maps are freed once
        the last reference goes; ``settle`` thaws the frozen heap, so a reference cycle through the old searcher is
        collected too). False if its batches took longer than RELEASE_WAIT_S, or the server stops meanwhile (it is
        freed later)."""
        batcher = self.state.batcher
        deadline = time.monotonic() + RELEASE_WAIT_S
        while batcher is not None and batcher.serves(old):
            if self._abandoned or time.monotonic() > deadline:
                return False
            await asyncio.sleep(0.01)
        loop = asyncio.get_running_loop()
        # a pool's thread lets go of a job (its arguments: the old searcher) only after the job's answer has come back
        # here: a job of nothing on each of the batcher's threads runs once they have let go of their last batch
        for pool in (self.state.executor, self.state.search_executor):
            if pool is not None:
                await loop.run_in_executor(pool, _nothing)
        await loop.run_in_executor(self.executor, settle, True)
        return True

    async def watch(self, interval: float) -> None:
        """Reload whenever the served path's signature changes (polled every ``interval`` seconds)."""
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(interval)
            signature = await loop.run_in_executor(self.executor, signature_of, self.path)
            if signature in (self.signature, self._failed) or self._lock.locked():
                continue
            try:
                await self.reload(reason="alias changed")
            except (ReloadFailed, NotReady):
                pass  # logged and counted; the watcher tries again when the alias changes again

    def abandon(self) -> None:
        """The server is stopping: the reload under way is cancelled (its callers get NotReady; the thread reading its
        index is not waited for: service.server), and none starts from now on. One that has swapped its index in
        already is done: it no longer waits to release the old index (``_release``), and its callers get its answer."""
        self._abandoned = True
        if self._running is not None and self._running[1] is not self._swapped:
            self._running[1].cancel()

    def close(self) -> None:
        """Abandon the reload under way and stop the reload thread."""
        self.abandon()
        self.executor.shutdown(wait=False, cancel_futures=True)


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


def _nothing() -> None:
    """A job that does nothing: it runs once its pool's thread has let go of the jobs before it (``_release``)."""
