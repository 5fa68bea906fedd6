"""The asyncio micro-batcher: concurrent questions -> one encoder call and one search per parameter group.

One task owns the queue. It waits for the first request, then collects more until the batch holds
``max_batch_size`` questions or the first request has waited ``max_wait_ms``; requests whose client left
(cancelled futures) are dropped. The batch runs off the event loop:

1. all non-blank questions of the batch go through ``searcher.encoder.encode`` once: (B, d) q_start, q_end;
2. rows are grouped by their ``SearchParams`` (core.params) and each group is one ``searcher.search_vectors``
   call (with the group's question texts, for the lexical leg);
3. every request's future gets its hits plus the batch's timings.

Without a search executor, steps 1-2 run in one worker thread. With one (``pipeline``), step 1 runs in the
encoder thread and step 2 in the search thread, so the next batch is encoded while this one is searched; at
most one batch is being encoded and one searched, so the pipeline holds two batches, not a backlog. With
``overlap="full"`` (CPU hosts, where both steps share the cores) the next batch starts during a search only when
a full batch is waiting: under moderate load batches are not split in two and each runs alone, and at
saturation the steps overlap.

The queue is bounded in questions: a request that would overflow it fails at once with ``Overloaded``
(HTTP 429 + Retry-After), so latency stays bounded under overload instead of growing with the backlog.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from spanseek.core.params import SearchParams
from spanseek.core.search import Hit, Searcher
from spanseek.service.errors import NotReady, Overloaded
from spanseek.service.metrics import ServiceMetrics

log = logging.getLogger("spanseek.service.batcher")


@dataclass(frozen=True)
class BatchOutcome:
    """What one request gets back: its hits (per question) and the timings of the batch it joined (seconds)."""

    hits: list[list[Hit]]
    queue: float
    encode: float
    search: float
    aggregate: float
    batch_size: int


@dataclass(frozen=True)
class BatchTimings:
    encode: float
    search: float
    aggregate: float


@dataclass(eq=False)
class _Pending:
    questions: list[str]
    params: SearchParams
    future: asyncio.Future
    enqueued: float = field(default_factory=time.monotonic)


Requests = list[tuple[list[str], SearchParams]]


@dataclass(frozen=True)
class EncodedBatch:
    """A batch after step 1: its requests, the flat positions of its non-blank questions, and their vectors."""

    requests: Requests
    flat: list[tuple[int, str]]  # (request, question) of every question, in order
    rows: list[int]  # flat positions that were encoded (non-blank), one per row of q_start / q_end
    q_start: np.ndarray | None  # (B, d); None when every question is blank
    q_end: np.ndarray | None
    encode: float  # seconds


def encode_batch(searcher: Searcher, requests: Requests) -> EncodedBatch:
    """Step 1: one encoder call for all non-blank questions of the batch."""
    flat = [(r, q) for r, (questions, _) in enumerate(requests) for q in questions]
    rows = [i for i, (_, q) in enumerate(flat) if q.strip()]
    if not rows:
        return EncodedBatch(requests, flat, rows, None, None, 0.0)
    t0 = time.perf_counter()
    q_start, q_end = searcher.encoder.encode([flat[i][1] for i in rows])  # (B, d) each
    return EncodedBatch(requests, flat, rows, q_start, q_end, time.perf_counter() - t0)


def search_batch(searcher: Searcher, enc: EncodedBatch) -> tuple[list[list[list[Hit]]], BatchTimings]:
    """Step 2: one ``search_vectors`` call per parameter group. Returns, per request, per question, its hits."""
    out: list[list[list[Hit]]] = [[[] for _ in questions] for questions, _ in enc.requests]
    if enc.q_start is None or enc.q_end is None:
        return out, BatchTimings(0.0, 0.0, 0.0)
    position = [0] * len(enc.flat)  # flat index -> index of the question within its request
    counters = [0] * len(enc.requests)
    for i, (r, _) in enumerate(enc.flat):
        position[i] = counters[r]
        counters[r] += 1
    groups: dict[SearchParams, list[int]] = {}
    for b, i in enumerate(enc.rows):
        groups.setdefault(enc.requests[enc.flat[i][0]][1], []).append(b)
    timings: dict[str, float] = {}
    for params, members in groups.items():
        sel = np.asarray(members)
        texts = [enc.flat[enc.rows[b]][1] for b in members]
        hits = searcher.search_vectors(enc.q_start[sel], enc.q_end[sel], params, timings, texts)
        for b, h in zip(members, hits, strict=True):
            i = enc.rows[b]
            out[enc.flat[i][0]][position[i]] = h
    return out, BatchTimings(enc.encode, timings.get("search", 0.0), timings.get("aggregate", 0.0))


def run_batch(searcher: Searcher, requests: Requests) -> tuple[list[list[list[Hit]]], BatchTimings]:
    """Answer several requests with one encoder call and one ``search_vectors`` call per parameter group.

    Blank questions get no hits and are not encoded. Returns, per request, per question, its hits.
    """
    return search_batch(searcher, encode_batch(searcher, requests))


class MicroBatcher:
    """Collects concurrent requests into batches and runs them on ``executor`` (and ``search_executor``).

    Each executor must have a single worker: the encoder (torch) is used from one thread and the index (faiss)
    from one thread. Without ``search_executor`` both steps run in ``executor``, one batch at a time;
    with it, batch n + 1 is encoded while batch n is searched.
    """

    def __init__(
        self,
        searcher: Searcher,
        executor: Executor,
        max_batch_size: int,
        max_wait_ms: float,
        max_queue: int,
        metrics: ServiceMetrics | None = None,
        search_executor: Executor | None = None,
        overlap: Literal["always", "full"] = "always",
    ):
        self.searcher = searcher
        self.executor = executor
        self.search_executor = search_executor
        if overlap not in ("always", "full"):
            raise ValueError(f"overlap must be 'always' or 'full', got {overlap!r}")
        self.overlap = overlap
        self.max_batch_size = max_batch_size
        self.max_wait = max_wait_ms / 1000.0
        self.max_queue = max_queue
        self.metrics = metrics
        self._pending: deque[_Pending] = deque()
        self._inflight: list[_Pending] = []  # requests of the batches being run (encoded or searched)
        self._searching: asyncio.Task | None = None  # pipelined: the batch in the search step
        self._depth = 0  # questions in _pending (including cancelled ones not yet dropped)
        self._wakeup = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._closed = False
        self._batch_seconds = 0.05  # moving average of one batch's run time, for Retry-After

    @property
    def depth(self) -> int:
        """Questions waiting for a batch."""
        return self._depth

    def start(self) -> None:
        """Start the queue owner task on the running event loop."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="spanseek-batcher")
            self._task.add_done_callback(self._on_exit)

    def _on_exit(self, task: asyncio.Task) -> None:
        """If the queue owner ever dies, say so and fail fast rather than leave requests waiting forever."""
        if task.cancelled() or task.exception() is None:
            return
        log.error("the batcher stopped", exc_info=task.exception())
        self._closed = True
        for item in [*self._inflight, *self._pending]:
            if not item.future.done():
                item.future.set_exception(NotReady("the search batcher stopped"))

    async def stop(self) -> None:
        """Stop taking requests; waiting requests fail with NotReady (503)."""
        self._closed = True
        for task in (self._task, self._searching):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        for item in [*self._inflight, *self._pending]:
            if not item.future.done():
                item.future.set_exception(NotReady("the service is shutting down"))
        self._pending.clear()
        self._set_depth(0)

    async def submit(self, questions: list[str], params: SearchParams) -> BatchOutcome:
        """Queue one request's questions and wait for their hits.

        Raises Overloaded when the queue cannot take them, NotReady when the batcher is stopped.
        """
        if self._closed or self._task is None:
            raise NotReady("the search batcher is not running")
        n = len(questions)
        if self._depth + n > self.max_queue:
            # time to drain the backlog: batches ahead of us times the recent batch time
            wait = (self._depth / self.max_batch_size + 1) * self._batch_seconds
            raise Overloaded(f"search queue is full ({self._depth} questions waiting); retry later", wait)
        item = _Pending(questions, params, asyncio.get_running_loop().create_future())
        self._pending.append(item)
        self._set_depth(self._depth + n)
        self._wakeup.set()
        # if this task is cancelled (client gone), awaiting cancels the future and the batcher skips it
        return await item.future

    def _set_depth(self, depth: int) -> None:
        self._depth = depth
        if self.metrics is not None:
            self.metrics.queue_depth.set(depth)

    def _live_questions(self) -> int:
        return sum(len(p.questions) for p in self._pending if not p.future.done())

    async def _run(self) -> None:
        while True:
            while not self._pending:
                self._wakeup.clear()
                await self._wakeup.wait()
            if self.overlap == "full":
                await self._search_done_or_full_batch()
            deadline = self._pending[0].enqueued + self.max_wait
            while self._live_questions() < self.max_batch_size:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                self._wakeup.clear()
                try:
                    await asyncio.wait_for(self._wakeup.wait(), remaining)
                except TimeoutError:
                    break
            batch = self._take()
            if batch:
                await (self._execute(batch) if self.search_executor is None else self._encode_then_hand_over(batch))

    async def _search_done_or_full_batch(self) -> None:
        """Wait while a batch is being searched, unless a full batch is waiting (then overlap with it)."""
        while self._searching is not None and not self._searching.done() \
                and self._live_questions() < self.max_batch_size:
            self._wakeup.clear()
            wake = asyncio.ensure_future(self._wakeup.wait())
            await asyncio.wait([self._searching, wake], return_when=asyncio.FIRST_COMPLETED)
            wake.cancel()

    def _take(self) -> list[_Pending]:
        """Pop live requests up to max_batch_size questions (at least one request); drop cancelled ones."""
        batch: list[_Pending] = []
        size = 0
        while self._pending:
            item = self._pending[0]
            if item.future.done():  # client left while queued
                self._pending.popleft()
                self._set_depth(self._depth - len(item.questions))
                continue
            if batch and size + len(item.questions) > self.max_batch_size:
                break
            self._pending.popleft()
            self._set_depth(self._depth - len(item.questions))
            batch.append(item)
            size += len(item.questions)
        return batch

    async def _execute(self, batch: list[_Pending]) -> None:
        """Both steps in ``executor``; returns when the batch is answered."""
        started = time.monotonic()
        requests = [(item.questions, item.params) for item in batch]
        self._inflight.extend(batch)  # stays set if we are cancelled (stop() then fails these requests)
        try:
            hits, t = await asyncio.get_running_loop().run_in_executor(self.executor, run_batch, self.searcher, requests)
        except Exception as e:  # one bad batch fails its requests (mapped to 500), not the batcher
            self._fail(batch, e)
            return
        self._resolve(batch, hits, t, started)

    async def _encode_then_hand_over(self, batch: list[_Pending]) -> None:
        """Pipelined: encode in ``executor``, then start the search step once the previous batch's has ended.

        Returns when this batch's search has started, so the caller collects (and encodes) the next batch while
        this one is searched.
        """
        started = time.monotonic()
        loop = asyncio.get_running_loop()
        self._inflight.extend(batch)
        try:
            enc = await loop.run_in_executor(self.executor, encode_batch, self.searcher,
                                             [(item.questions, item.params) for item in batch])
        except Exception as e:
            self._fail(batch, e)
            return
        if self._searching is not None:
            await asyncio.wait([self._searching])  # one batch in the search step at a time
        self._searching = loop.create_task(self._search(batch, enc, started), name="spanseek-search-step")

    async def _search(self, batch: list[_Pending], enc: EncodedBatch, started: float) -> None:
        assert self.search_executor is not None
        try:
            hits, t = await asyncio.get_running_loop().run_in_executor(self.search_executor, search_batch,
                                                                       self.searcher, enc)
        except Exception as e:
            self._fail(batch, e)
            return
        self._resolve(batch, hits, t, started)

    def _fail(self, batch: list[_Pending], error: Exception) -> None:
        """One bad batch fails its requests (mapped to 500), not the batcher."""
        self._forget(batch)
        log.error("batch of %d questions failed", sum(len(p.questions) for p in batch), exc_info=error)
        for item in batch:
            if not item.future.done():
                item.future.set_exception(error)

    def _forget(self, batch: list[_Pending]) -> None:
        done = {id(p) for p in batch}
        self._inflight = [p for p in self._inflight if id(p) not in done]

    def _resolve(self, batch: list[_Pending], hits: list[list[list[Hit]]], t: BatchTimings, started: float) -> None:
        self._forget(batch)
        size = sum(len(p.questions) for p in batch)
        elapsed = time.monotonic() - started
        self._batch_seconds = 0.8 * self._batch_seconds + 0.2 * elapsed
        if self.metrics is not None:
            self.metrics.observe_batch(size, t.encode, t.search, t.aggregate)
        for item, item_hits in zip(batch, hits, strict=True):
            if item.future.done():  # cancelled while its batch ran
                continue
            queue = started - item.enqueued
            if self.metrics is not None:
                self.metrics.stage_duration.labels(stage="queue").observe(queue)
            item.future.set_result(BatchOutcome(item_hits, queue, t.encode, t.search, t.aggregate, size))
