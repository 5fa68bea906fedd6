"""The asyncio micro-batcher: concurrent questions -> one encoder call and one search per parameter group.

One task owns the queue. It waits for the first request, then collects more until the batch holds
``max_batch_size`` questions or the first request has waited ``max_wait_ms``. A request whose client left while it
waited (its future cancelled: the route cancels it when the client disconnects) leaves the queue at once: no batch
takes it, and the queue depth, admission and fair shares stop counting it; a batch already taken is encoded whole,
and its search step (the larger part of its time) leaves out the requests whose client left meanwhile. The batch
runs off the event loop:

1. all non-blank questions of the batch go through ``searcher.encoder.encode`` once: (B, d) q_start, q_end;
2. rows are grouped by their ``SearchParams`` (core.params) and each group is one ``searcher.search_vectors``
   call (with the group's question texts, for the lexical leg);
3. every request's future gets its hits plus the batch's timings.

Work is counted in question-equivalents (service/cost.py), batches take waiting requests in fair order between
clients (service/fairness.py), and a request costing more than half a batch is queued in parts of at most half a
batch (``max_batch_size`` / 2 question-equivalents), so other clients' work runs between its parts and beside each
of them (a part never fills a batch alone: a question arriving when it is its turn still joins that batch).
Every part runs on the searcher its request's first part ran on: a reload or a write's new snapshot between two parts
does not answer one request from two indexes (a batch holds the parts of one searcher only, and ``serves`` counts the
parts still queued, so a reload releases the old index once they have run).

Without a search executor, steps 1-2 run in one worker thread. With one (``pipeline``), step 1 runs in the
encoder thread and step 2 in the search thread, so the next batch is encoded while this one is searched; at
most one batch is being encoded and one searched, so the pipeline holds two batches, not a backlog. With
``overlap="full"`` (CPU hosts, where both steps share the cores) the next batch starts during a search only when
a full batch is waiting: under moderate load batches are not split in two and each runs alone, and at
saturation the steps overlap.

A batch whose first request is ahead of its client's fair turn waits up to ``fair_wait_ms`` for clients that are in
flight or were just answered to ask again (service/fairness.py), so clients that wait for each answer keep their
share beside a backlogged one.

Admission (service/overload.py): a request fails at once with ``Overloaded`` (HTTP 429 + Retry-After) when the
batch it would join would start later than ``max_queue_wait_ms`` from now (the batches in flight plus the full
batches queued ahead of it, at the batch rate measured on recent batches), or when it would overflow
``max_queue``; latency stays bounded under overload instead of growing with the backlog. A burst at an idle server
of up to ``burst_questions`` (one request's most questions) is taken whole while it all runs within the budget plus
its own expected time.

With ``write_nice`` 0, writes (service.live) share the encoder's thread: each step of a write (``run_write_step``) runs
when no search is queued, being run or about to come back (a client answered within ``fair_wait``), or, under
continuous search load, once it has waited ``write_wait_ms``: between two batches, one step at a time, so searches go
first and writes still progress.

Isolation: requests are validated before they are queued (service/schemas.py); if a batch step still raises, its
requests are retried in halves (bisection, in the same worker thread) until the failing ones are alone, so one bad
request fails by itself and the others of its batch are answered.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import math
import time
import weakref
from collections.abc import Callable, Iterator
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Literal, TypeVar

import numpy as np

from spanseek.core.hits import Hit
from spanseek.core.lexical import LexicalIndexMissing
from spanseek.core.page import blank_page
from spanseek.core.params import SearchParams, SearchParamsError
from spanseek.core.plan import StageTimes
from spanseek.core.search import Searcher
from spanseek.core.text import has_text
from spanseek.service.errors import SHUTTING_DOWN, NotReady
from spanseek.service.fairness import FairQueue
from spanseek.service.logs import logging_for, request_id_var, with_request_ids
from spanseek.service.metrics import ServiceMetrics
from spanseek.service.overload import BatchCostModel, check_admission, check_client_share

log = logging.getLogger("spanseek.service.batcher")


@dataclass(frozen=True)
class BatchOutcome:
    """What one request gets back: its hits (per question) and the timings of the batch it joined (seconds)."""

    hits: list[list[Hit]]
    queue: float
    encode: float
    search: float
    aggregate: float
    read: float
    batch_size: int
    # (stage, start, end) in perf_counter seconds: this request's queue wait, then every timed run of its batch's
    # stages (encode, search, aggregate, read) as service.tracing turns them into spans
    intervals: tuple[tuple[str, float, float], ...] = ()

    @classmethod
    def joined(cls, parts: list[BatchOutcome]) -> BatchOutcome:
        """The outcome of a request run in several batches: its parts' hits in order, their stage times summed, the
        first part's queue wait and the largest batch."""
        return cls([h for p in parts for h in p.hits], parts[0].queue, sum(p.encode for p in parts),
                   sum(p.search for p in parts), sum(p.aggregate for p in parts), sum(p.read for p in parts),
                   max(p.batch_size for p in parts), tuple(i for p in parts for i in p.intervals))


@dataclass(eq=False)
class _Pending:
    questions: list[str]
    params: SearchParams
    future: asyncio.Future
    cost: float  # question-equivalents (service.cost)
    client: str  # whose share of the queue it uses (service.fairness)
    tag: float  # fair-queueing order
    enqueued: float = field(default_factory=time.monotonic)
    # the one its batch runs on: set when the batch is taken, or when the first part of its request is (every part
    # of a request runs on the index its first part ran on, also across a reload or a write's new snapshot)
    searcher: Searcher | None = None
    request_id: str = field(default_factory=lambda: request_id_var.get() or "-")  # for the batch's log lines
    parts: list[_Pending] = field(default_factory=list)  # every part of its request (itself included)

    def live(self) -> bool:
        """False once its client left (the future was cancelled) or it was answered."""
        return not self.future.done()


def _ids(batch: list[_Pending]) -> list[str]:
    return [item.request_id for item in batch]


Requests = list[tuple[list[str], SearchParams]]


@dataclass(frozen=True)
class EncodedBatch:
    """A batch after step 1: its requests, the flat positions of its non-blank questions, and their vectors."""

    requests: Requests
    flat: list[tuple[int, str]]  # (request, question) of every question, in order
    rows: list[int]  # flat positions that were encoded (non-blank), one per row of q_start / q_end
    q_start: np.ndarray | None  # (B, d); None when every question is blank
    q_end: np.ndarray | None
    times: StageTimes  # of the encode step


def encode_batch(searcher: Searcher, requests: Requests) -> EncodedBatch:
    """Step 1: one encoder call for all non-blank questions of the batch."""
    flat = [(r, q) for r, (questions, _) in enumerate(requests) for q in questions]
    rows = [i for i, (_, q) in enumerate(flat) if has_text(q)]
    times = StageTimes()
    if not rows:
        return EncodedBatch(requests, flat, rows, None, None, times)
    with times.timing("encode"):
        q_start, q_end = searcher.encoder.encode([flat[i][1] for i in rows])  # (B, d) each
    return EncodedBatch(requests, flat, rows, q_start, q_end, times)


def search_batch(searcher: Searcher, enc: EncodedBatch) -> tuple[list[list[list[Hit]]], StageTimes]:
    """Step 2: one ``search_vectors`` call per parameter group. Returns, per request, per question, its hits, and
    the times of the search stages (not of the encoding: ``enc.times``)."""
    out: list[list[list[Hit]]] = [[blank_page(params) for _ in questions] for questions, params in enc.requests]
    if enc.q_start is None or enc.q_end is None:
        return out, StageTimes()
    position = [0] * len(enc.flat)  # flat index -> index of the question within its request
    counters = [0] * len(enc.requests)
    for i, (r, _) in enumerate(enc.flat):
        position[i] = counters[r]
        counters[r] += 1
    groups: dict[SearchParams, list[int]] = {}
    for b, i in enumerate(enc.rows):
        groups.setdefault(enc.requests[enc.flat[i][0]][1], []).append(b)
    timings = StageTimes()
    for params, members in groups.items():
        sel = np.asarray(members)
        texts = [enc.flat[enc.rows[b]][1] for b in members]
        hits = searcher.search_vectors(enc.q_start[sel], enc.q_end[sel], params, timings, texts)
        for b, h in zip(members, hits, strict=True):
            i = enc.rows[b]
            out[enc.flat[i][0]][position[i]] = h
    return out, timings


def run_batch(searcher: Searcher, requests: Requests) -> tuple[list[list[list[Hit]]], StageTimes]:
    """Answer several requests with one encoder call and one ``search_vectors`` call per parameter group.

    Blank questions are not encoded: their page is ``blank_page``. Returns, per request, per question, its hits.
    """
    enc = encode_batch(searcher, requests)
    hits, times = search_batch(searcher, enc)
    return hits, StageTimes.total([enc.times, times])


# --- per-request isolation: a failing batch step is retried in halves until the culprits are alone ---

T = TypeVar("T")
Outcome = list[list[Hit]] | Exception  # per request: its hits per question, or why it alone failed


def bisect_failures(run: Callable[[list[int]], list[T]], items: list[int]) -> list[T | Exception]:
    """``run(items)`` gives one result per item; where it raises, retry each half, down to single items.

    One failing item among n costs about 2 log2(n) extra calls; each failing item gets its own exception.
    """
    try:
        return list(run(items))
    except Exception as e:
        if len(items) == 1:
            return [e]
        mid = len(items) // 2
        return bisect_failures(run, items[:mid]) + bisect_failures(run, items[mid:])


def select_requests(enc: EncodedBatch, keep: list[int]) -> EncodedBatch:
    """The part of an encoded batch that belongs to requests ``keep`` (renumbered in that order)."""
    new_index = {r: j for j, r in enumerate(keep)}
    row_of = {i: b for b, i in enumerate(enc.rows)}  # flat position -> row of q_start / q_end
    flat: list[tuple[int, str]] = []
    rows: list[int] = []
    sel: list[int] = []
    for i, (r, q) in enumerate(enc.flat):
        if r in new_index:
            if i in row_of:
                rows.append(len(flat))
                sel.append(row_of[i])
            flat.append((new_index[r], q))
    if not sel or enc.q_start is None or enc.q_end is None:
        return EncodedBatch([enc.requests[r] for r in keep], flat, rows, None, None, enc.times)
    take = np.asarray(sel)
    return EncodedBatch([enc.requests[r] for r in keep], flat, rows, enc.q_start[take], enc.q_end[take], enc.times)


def encode_isolated(searcher: Searcher, requests: Requests) -> tuple[EncodedBatch, list[Exception | None]]:
    """Step 1 with isolation: the batch encoded without the requests that make the encoder raise, and per request
    its exception (None if encoded). Failed requests stay in the batch with no questions, so indexes still match."""
    whole: list[EncodedBatch] = []

    def run(idx: list[int]) -> list[None]:
        enc = encode_batch(searcher, [requests[i] for i in idx])
        if len(idx) == len(requests):
            whole.append(enc)
        return [None] * len(idx)

    failures = bisect_failures(run, list(range(len(requests))))
    if whole:
        return whole[0], [None] * len(requests)
    kept = [(questions if f is None else [], params) for (questions, params), f in zip(requests, failures, strict=True)]
    return encode_batch(searcher, kept), [f if isinstance(f, Exception) else None for f in failures]


def search_isolated(searcher: Searcher, enc: EncodedBatch) -> tuple[list[Outcome], StageTimes]:
    """Step 2 with isolation: per request its hits, or the exception it alone raised; timings summed over tries."""
    tries: list[StageTimes] = []

    def run(idx: list[int]) -> list[list[list[Hit]]]:
        part = enc if len(idx) == len(enc.requests) else select_requests(enc, idx)
        hits, t = search_batch(searcher, part)
        tries.append(t)
        return hits

    outcomes = bisect_failures(run, list(range(len(enc.requests))))
    return outcomes, StageTimes.total([enc.times, *tries])


def run_batch_isolated(searcher: Searcher, requests: Requests, wanted: Callable[[], list[bool]] | None = None
                       ) -> tuple[list[Outcome], StageTimes]:
    """``run_batch`` where a request that makes a step raise fails alone: per request, its hits or its exception.
    ``wanted()``, asked between the two steps, says which requests are still wanted (their client still waits): the
    others are not searched, and get no hits."""
    enc, failures = encode_isolated(searcher, requests)
    keep = [r for r, ok in enumerate(wanted()) if ok] if wanted is not None else list(range(len(requests)))
    searched, t = (search_isolated(searcher, enc if len(keep) == len(requests) else select_requests(enc, keep))
                   if keep else ([], enc.times))
    outcomes: list[Outcome] = [[] for _ in requests]
    for r, outcome in zip(keep, searched, strict=True):
        outcomes[r] = outcome
    return [o if f is None else f for o, f in zip(outcomes, failures, strict=True)], t


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
        max_queue_wait_ms: float = 0.0,
        burst_questions: int = 0,
        fair_wait_ms: float = 0.0,
        write_wait_ms: float = 0.0,
        on_stopped: Callable[[str], None] | None = None,
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
        self._pending: FairQueue[_Pending] = FairQueue()
        self._inflight: list[_Pending] = []  # requests of the batches being run (encoded or searched)
        self._searching: asyncio.Task | None = None  # pipelined: the batch in the search step
        self._depth = 0  # questions in _pending (a cancelled request leaves it at once: _withdraw)
        self._learning_paused = 0  # > 0 while a reload runs: its work would make the batches look slower
        self._wakeup = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._closed = False
        self.max_queue_wait = max_queue_wait_ms / 1000.0
        self.burst_questions = max(burst_questions, max_batch_size)  # taken whole at an idle server (see below)
        self.cost = BatchCostModel()  # measured seconds per batch size, for admission and Retry-After
        self._last_done = 0.0  # when the last batch finished (monotonic)
        self._busy_since = 0.0  # when the batches in flight started to run (the pipeline was idle before)
        self._admitted_since_idle = 0.0  # cost admitted since the pipeline was last idle (nothing queued or run)
        self.fair_wait = fair_wait_ms / 1000.0
        self._answered: dict[str, float] = {}  # client -> when its last request was answered (monotonic)
        self.write_wait = write_wait_ms / 1000.0
        self._write_turn = asyncio.Lock()  # write steps take turns (FIFO), one in the encoder's thread at a time
        self._gap_changed = asyncio.Event()  # set when the batches in flight have finished (a gap may open)
        self.on_stopped = on_stopped  # told why, should the queue owner end other than by ``stop`` (``_on_exit``)

    def swap(self, searcher: Searcher) -> None:
        """Run the batches taken from now on with ``searcher`` (a hot reload); batches already taken finish on
        the one they started with."""
        self.searcher = searcher

    def serves(self, searcher: weakref.ref[Searcher]) -> bool:
        """Whether a batch taken with ``searcher`` (a weak reference: asking does not keep a replaced searcher
        alive) is still being encoded or searched, or a request whose first part ran on it has parts still queued."""
        held = searcher()
        # a batch runs on to its end whether or not its clients still wait; a queued part counts while it is wanted
        return held is not None and any(item.searcher is held for item in
                                        [*self._inflight, *(item for item in self._pending if item.live())])

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
        """If the queue owner ever ends other than by ``stop`` on a fault (one outside any batch's, which
        ``_failing_alone`` does not catch), say why, fail the requests it held (503) and tell ``on_stopped``: nothing
        would ever answer them, nor any later search. A cancellation is a stop: besides ``stop``, only the event
        loop's end cancels it (a server that ended without the app's stop, as on uvicorn's forced exit), so the
        requests it held are answered as ``stop`` answers them, and nothing is reported."""
        if self._closed:  # stopped
            return
        if task.cancelled():
            self._closed = True
            self._fail_held(SHUTTING_DOWN)
            return
        error = task.exception()
        why = f"{type(error).__name__}: {error}" if error is not None else "ended"
        log.error("the search batcher stopped (%s)", why, exc_info=error)
        self._closed = True
        self._fail_held(f"the search batcher stopped ({why})")
        if self.on_stopped is not None:
            self.on_stopped(why)

    def _fail_held(self, message: str) -> None:
        """Answer every request still held, in a batch or waiting for one, NotReady (503) with ``message``."""
        for item in [*self._inflight, *self._pending.clear()]:
            if not item.future.done():
                item.future.set_exception(NotReady(message))
        self._set_depth(0)

    async def stop(self) -> None:
        """Stop taking requests; waiting requests fail with NotReady (503)."""
        self._closed = True
        for task in (self._task, self._searching):
            if task is not None:
                task.cancel()
                await asyncio.wait([task])  # (one that had ended on a fault raised it here: the app's stop failed)
        self._fail_held(SHUTTING_DOWN)

    def check_would_admit(self, client: str = "-") -> None:
        """Raise Overloaded if even a one-question request of ``client`` would be refused now; cheap (no request
        needed).

        The HTTP layer calls it before reading and validating a /search body, so a refusal under overload costs
        microseconds; ``submit`` still makes the exact check with the request's own cost.
        """
        if self._closed or self._task is None:
            return  # submit says NotReady
        self._admit(client, 1.0)

    def _admit(self, client: str, cost: float) -> None:
        """Raise Overloaded unless a request of ``cost`` from ``client`` may join the queue.

        The work ahead of it is what fair queueing runs before it (service.fairness), and a client holding more
        than its share of ``max_queue`` (an equal split among the clients with work queued) is refused first.
        """
        tag = self._pending.tag_for(client, cost)
        now = time.monotonic()  # one clock reading for both estimates: they are compared with each other
        check_admission(self.cost, self._pending.cost, cost, self.max_batch_size, self.max_queue, self.max_queue_wait,
                        self._inflight_remaining(now), self._burst_deadline(cost, now),
                        ahead=self._pending.cost_ahead(tag))
        held = self._pending.client_cost(client)
        if held > 0:
            check_client_share(self.cost, held, cost, self._pending.clients(), self.max_batch_size, self.max_queue)

    async def submit(self, questions: list[str], params: SearchParams, cost: float | None = None,
                     client: str = "-") -> BatchOutcome:
        """Queue one request's questions and wait for their hits; ``cost`` in question-equivalents (service.cost;
        default: one per question), ``client`` whose fair share it uses (service.fairness).

        Raises Overloaded when the queue cannot take them, NotReady when the batcher is stopped.
        """
        if self._closed or self._task is None:
            raise NotReady("the search batcher is not running")
        cost = float(len(questions)) if cost is None else cost
        self._admit(client, cost)
        loop = asyncio.get_running_loop()
        items = []
        for part in self._parts(questions, cost):  # each part queued on its own: other clients' work runs between
            part_cost = cost * len(part) / len(questions)
            item = _Pending(part, params, loop.create_future(), part_cost, client,
                            self._pending.tag_for(client, part_cost))
            item.future.add_done_callback(functools.partial(self._on_done, item))
            items.append(item)
            self._pending.push(item)
        self._admitted_since_idle += cost
        self._set_depth(self._depth + len(questions))
        self._wakeup.set()
        for item in items:
            item.parts = items
        # if this task is cancelled (the client left), awaiting cancels the futures: the queued parts leave at once
        if len(items) == 1:
            return await items[0].future
        return BatchOutcome.joined(list(await asyncio.gather(*(item.future for item in items))))

    def _on_done(self, item: _Pending, future: asyncio.Future) -> None:
        if future.cancelled():
            self._withdraw(item)

    def _withdraw(self, item: _Pending) -> None:
        """Take a request whose future was cancelled out of the queue now (not when the next batch is cut): its
        questions leave the depth and the admission's count at once, and a write step or a batch held for it need
        not wait. A request already in a batch is left to that batch (which runs on its searcher to the end)."""
        if item not in self._inflight:
            item.searcher = None  # a request that left holds no replaced searcher
        withdrawn = self._pending.withdraw(item)
        self._set_depth(self._queued_questions())  # also when a batch being cut dropped it first
        if not withdrawn:
            return
        self._wakeup.set()  # the head of the queue may have changed: a forming batch looks again
        self._note_idle()

    def _parts(self, questions: list[str], cost: float) -> list[list[str]]:
        """A request's questions cut into parts of at most half of max_batch_size question-equivalents (a question
        costing more is a part alone), so that one request never holds the pipeline longer than half a batch and
        others' questions share the batch of each part."""
        per_question = cost / max(1, len(questions))
        size = max(1, int(self.max_batch_size / 2 / per_question)) if per_question > 0 else len(questions)
        return [questions[i: i + size] for i in range(0, len(questions), size)] or [questions]

    async def run_write_step(self, fn: Callable[..., T], *args: object) -> T:
        """Run ``fn(*args)``, one step of a write (service.live: a forward pass of at most ``write_chunk_tokens``
        tokens), in the encoder's thread in a gap between searches: when no search is queued, none is being encoded
        or searched, and no client answered within ``fair_wait`` is about to ask again (``_search_gap``).

        Under continuous search load there is no gap: a step waits at most ``write_wait_ms``, then runs between
        two batches (the next batch waits for that one step), so writes go on at one step per ``write_wait_ms`` and
        are never starved. Steps of concurrent writes take turns, in the order they asked, one at a time.
        """
        asked = time.perf_counter()
        async with self._write_turn:
            overdue = time.monotonic() + self.write_wait
            while not self._closed and not self._search_gap():
                remaining = overdue - time.monotonic()
                if remaining <= 0:
                    break
                self._gap_changed.clear()
                # a client just answered stops being expected after fair_wait: look again then
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._gap_changed.wait(), min(remaining, self.fair_wait or remaining))
            step = fn if self.metrics is None else self.metrics.timed_write_step(fn, asked)
            return await asyncio.get_running_loop().run_in_executor(self.executor, step, *args)

    def _search_gap(self) -> bool:
        """Whether the encoder's thread may take a write step now without holding up a search."""
        return not self._inflight and not self._live_cost() and not self._returning_clients(time.monotonic())

    def _set_depth(self, depth: int) -> None:
        self._depth = depth
        if self.metrics is not None:
            self.metrics.queue_depth.set(depth)

    @contextlib.contextmanager
    def learning_paused(self) -> Iterator[None]:
        """Batches finishing inside do not teach the cost model: a reload's loading and warm-up share the cores and
        the encoder thread, and learning from the slower batches would refuse requests after it for nothing."""
        self._learning_paused += 1
        try:
            yield
        finally:
            self._learning_paused -= 1

    def _inflight_remaining(self, now: float) -> float:
        """Seconds until the batches in flight have finished, at the measured rate plus twice the measured spread
        of batch times (0 when idle).

        Without the margin, a batch that runs longer than its mean would count as finished: while it overran,
        every request would be admitted and wait for the overrun too, beyond the budget.
        """
        if not self._inflight:
            return 0.0
        cost = sum(p.cost for p in self._inflight)
        held = now - max(self._last_done, self._busy_since)
        expected = self.cost.seconds_for(cost, self.max_batch_size) + 2.0 * self.cost.spread()
        return max(0.0, expected - held)

    def _burst_deadline(self, incoming: float, now: float) -> float | None:
        """Seconds from now by which the queue (with ``incoming`` questions) must be run for them to join a burst.

        Only while the questions admitted since the pipeline was idle, with these, are at most ``burst_questions``:
        the work of one request of the most questions accepted, which an idle server would take as one request
        anyway (however the burst is cut into batches). The burst is admitted beyond
        the wait budget as long as it is all run within the budget plus its own expected time (with the overrun
        margin of _inflight_remaining) from when it started. None otherwise.
        """
        if self._admitted_since_idle + incoming > self.burst_questions:
            return None
        head = self._pending.first_enqueued()
        first = self._busy_since if self._inflight else (head.enqueued if head is not None else now)
        whole = self.cost.seconds_for(self.burst_questions, self.max_batch_size) + 2.0 * self.cost.spread()
        return first + self.max_queue_wait + whole - now

    def _start(self, batch: list[_Pending], started: float) -> Searcher:
        """Mark ``batch`` as in flight (it stays marked if we are cancelled: stop() then fails these requests) on
        its searcher (``_searcher_of``), which runs all its steps (even across a swap), and hold the parts of its
        requests still queued to that searcher; returns it."""
        if not self._inflight:
            self._busy_since = started
        searcher = self._searcher_of(batch[0])
        for part in (part for item in batch for part in item.parts or [item]):
            if part.searcher is None and part.live():  # (a part answered already holds none: _forget)
                part.searcher = searcher
        self._inflight.extend(batch)
        return searcher

    def _searcher_of(self, item: _Pending) -> Searcher:
        """The searcher ``item`` runs on: the one its request's first part ran on, else the current one."""
        return item.searcher or self.searcher

    def _live_cost(self) -> float:
        return sum(p.cost for p in self._pending if p.live())

    def _next_batch(self) -> list[_Pending]:
        """The requests the next batch would take: in fair order, each that still fits in max_batch_size
        question-equivalents (the first one always), so a large request does not stop smaller ones from filling
        a batch until its turn comes. Work ahead of its turn does not fill the room beside the first request while
        other clients may be about to ask again (``fair_wait``): it would take their share of the batch."""
        batch: list[_Pending] = []
        cost = 0.0
        returning = self._returning_clients(time.monotonic()) if self.fair_wait > 0 else set()
        for item in self._pending.in_order():
            if batch and returning - {item.client} and self._pending.ahead_of_its_turn(item):
                continue
            if batch and self._searcher_of(item) is not self._searcher_of(batch[0]):
                continue  # a batch runs on one searcher: a request begun before a swap goes on on the old one
            if not batch or cost + item.cost <= self.max_batch_size:
                batch.append(item)
                cost += item.cost
        return batch

    def _batch_cost(self) -> float:
        return sum(p.cost for p in self._next_batch())

    async def _run(self) -> None:
        while True:
            while not self._pending:
                self._wakeup.clear()
                await self._wakeup.wait()
            if self.overlap == "full":
                await self._search_done_or_full_batch()
            await self._yield_to_returning_clients()
            head = self._pending.first_enqueued()
            deadline = (head.enqueued if head is not None else time.monotonic()) + self.max_wait
            while self._batch_cost() < self.max_batch_size:
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
                with self._failing_alone(batch):
                    await (self._execute(batch) if self.search_executor is None else self._encode_then_hand_over(batch))

    @contextlib.contextmanager
    def _failing_alone(self, batch: list[_Pending]) -> Iterator[None]:
        """A fault of the batcher's own while it runs or answers ``batch`` (its steps' failures are the requests',
        handled apart) fails that batch's requests not yet answered (500, logged) and no other, and the queue owner
        goes on: had it ended, those requests would wait forever and every later search would be refused (503)."""
        try:
            yield
        except Exception as e:
            if unanswered := [item for item in batch if not item.future.done()]:
                self._fail(unanswered, e)
            else:
                log.error("answering a batch failed", exc_info=e)

    async def _search_done_or_full_batch(self) -> None:
        """Wait while a batch is being searched, unless a full batch is waiting (then overlap with it). Work held
        back for returning clients (``_next_batch``) does not count: it would split their next batch in two."""
        while self._searching is not None and not self._searching.done() \
                and self._batch_cost() < self.max_batch_size:
            self._wakeup.clear()
            wake = asyncio.ensure_future(self._wakeup.wait())
            await asyncio.wait([self._searching, wake], return_when=asyncio.FIRST_COMPLETED)
            wake.cancel()

    def _returning_clients(self, now: float) -> set[str]:
        """Clients with nothing queued that are in flight (and still wait) or were answered in the last
        ``fair_wait``."""
        queued = {item.client for item in self._pending if item.live()}
        recent = {c for c, t in self._answered.items() if now - t < self.fair_wait}
        return ({item.client for item in self._inflight if item.live()} | recent) - queued

    def _returning_until(self, client: str, now: float) -> float | None:
        """Until when another client than ``client``, with nothing queued, may be about to ask again: ``inf`` while
        one is in flight, else the last answer of one within ``fair_wait`` plus ``fair_wait``; None when none."""
        queued = {item.client for item in self._pending if item.live()}
        if any(item.client != client and item.client not in queued and item.live() for item in self._inflight):
            return math.inf
        recent = [t for c, t in self._answered.items() if c != client and c not in queued and now - t < self.fair_wait]
        return max(recent) + self.fair_wait if recent else None

    async def _yield_to_returning_clients(self) -> None:
        """Hold back the next batch while its first request is ahead of its turn (service.fairness) and another
        client is in flight or was just answered: that client's next request is taken first when it comes within
        ``fair_wait``. Without it, clients that wait for their answers lose every gap to a backlogged one."""
        while self.fair_wait > 0 and self._pending:
            batch = self._next_batch()
            if not batch or not self._pending.ahead_of_its_turn(batch[0]):
                return
            now = time.monotonic()
            until = self._returning_until(batch[0].client, now)
            if until is None:
                return
            self._wakeup.clear()
            wake = asyncio.ensure_future(self._wakeup.wait())
            waits: set[asyncio.Future] = {wake}
            if self._searching is not None and not self._searching.done():
                waits.add(self._searching)
            timeout = None if math.isinf(until) else max(0.0, until - now)
            if timeout is None and len(waits) == 1:
                timeout = self.fair_wait  # in flight but not in a step this loop can wait for: look again soon
            done, _ = await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
            wake.cancel()
            if not done and not math.isinf(until):
                return  # nobody came back in time: run it

    def _take(self) -> list[_Pending]:
        """Pop the next batch's requests (``_next_batch``)."""
        batch = self._next_batch()
        for item in batch:
            self._pending.pop(item)
        self._set_depth(self._queued_questions())
        return batch

    def _queued_questions(self) -> int:
        return sum(len(p.questions) for p in self._pending if p.live())

    async def _execute(self, batch: list[_Pending]) -> None:
        """Both steps in ``executor``, in one call; returns when the batch is answered. A client that left while
        its questions were encoded is not searched (``run_batch_isolated``'s ``wanted``), as the pipeline drops it
        before its search step (``_without_departed``)."""
        started = time.monotonic()
        requests = [(item.questions, item.params) for item in batch]
        searcher = self._start(batch, started)

        def wanted() -> list[bool]:  # read in the worker thread: a future's state, set on the event loop
            return [item.live() for item in batch]

        try:
            outcomes, t = await asyncio.get_running_loop().run_in_executor(
                self.executor, with_request_ids, _ids(batch), run_batch_isolated, searcher, requests, wanted)
        except Exception as e:  # not even the isolated retries ran: fail the batch (500), not the batcher
            self._fail(batch, e)
            return
        self._resolve(batch, outcomes, t, started)

    async def _encode_then_hand_over(self, batch: list[_Pending]) -> None:
        """Pipelined: encode in ``executor``, then start the search step once the previous batch's has ended.

        Returns when this batch's search has started, so the caller collects (and encodes) the next batch while
        this one is searched.
        """
        started = time.monotonic()
        loop = asyncio.get_running_loop()
        searcher = self._start(batch, started)
        try:
            enc, failures = await loop.run_in_executor(self.executor, with_request_ids, _ids(batch), encode_isolated,
                                                       searcher, [(item.questions, item.params) for item in batch])
        except Exception as e:
            self._fail(batch, e)
            return
        for item, failure in zip(batch, failures, strict=True):
            if failure is not None:
                self._fail([item], failure)  # at once: it has nothing to search
        if self._searching is not None:
            await asyncio.wait([self._searching])  # one batch in the search step at a time
        taken = sum(item.cost for item in batch)
        batch, enc = self._without_departed(batch, enc)
        if batch:
            self._searching = loop.create_task(self._search(batch, enc, started, searcher, taken),
                                               name="spanseek-search-step")

    def _without_departed(self, batch: list[_Pending], enc: EncodedBatch) -> tuple[list[_Pending], EncodedBatch]:
        """The encoded batch without the requests whose client left (or that failed) since it was taken: the search
        step, the larger part of a batch's time, runs only for clients still waiting. Under overload a batch waits
        for the previous one's search, long enough for clients with short timeouts to give up."""
        keep = [i for i, item in enumerate(batch) if item.live()]
        if len(keep) == len(batch):
            return batch, enc
        self._forget([item for item in batch if not item.live()])
        return [batch[i] for i in keep], select_requests(enc, keep)

    async def _search(self, batch: list[_Pending], enc: EncodedBatch, started: float, searcher: Searcher,
                      taken: float) -> None:
        """Step 2 of a pipelined batch; ``taken``: the cost of the batch as taken (and encoded), for the cost model."""
        assert self.search_executor is not None
        try:
            outcomes, t = await asyncio.get_running_loop().run_in_executor(
                self.search_executor, with_request_ids, _ids(batch), search_isolated, searcher, enc)
        except Exception as e:
            self._fail(batch, e)
            return
        with self._failing_alone(batch):
            self._resolve(batch, outcomes, t, started, taken)

    def _fail(self, batch: list[_Pending], error: Exception) -> None:
        """Fail these requests (a 500; a 400 for a request that became invalid as the index changed), not the batcher."""
        self._forget(batch)
        with logging_for(_ids(batch)):
            if isinstance(error, SearchParamsError | LexicalIndexMissing):  # the request's: the route answers 400
                log.info("%d request(s) refused at search time: %s", len(batch), error)
            else:
                log.error("%d request(s) of %d questions failed", len(batch), sum(len(p.questions) for p in batch),
                          exc_info=error)
        for item in batch:
            if not item.future.done():
                item.future.set_exception(error)
            for part in item.parts:  # its request has failed: the parts not yet run are not run
                part.future.cancel()

    def observe_batch(self, size: float, seconds: float) -> None:
        """Teach the admission's cost model one batch of ``size`` question-equivalents (the warm-up's batches seed
        it before any traffic)."""
        self.cost.observe(size, seconds)

    def _forget(self, batch: list[_Pending]) -> None:
        for item in batch:  # a request waiting for its answer to be sent no longer holds a replaced searcher
            item.searcher = None
        done = {id(p) for p in batch}
        self._inflight = [p for p in self._inflight if id(p) not in done]
        self._note_idle()

    def _note_idle(self) -> None:
        """After requests left the pipeline or the queue: with no batch in flight, a write step may find its gap,
        and with nothing queued either, a new burst starts counting afresh."""
        if not self._inflight:
            self._gap_changed.set()
            if not self._live_cost():
                self._admitted_since_idle = 0.0

    def _resolve(self, batch: list[_Pending], outcomes: list[Outcome], t: StageTimes, started: float,
                 taken: float | None = None) -> None:
        """Answer the batch's requests; ``taken``: its cost as taken when requests left before its search (default:
        what it holds), which is what held the pipeline and what admission counted."""
        self._forget(batch)
        size = sum(len(p.questions) for p in batch)
        now = time.monotonic()
        if self.fair_wait > 0:  # the clients answered now may ask again at once (not those that left meanwhile)
            self._answered = {c: t for c, t in self._answered.items() if now - t < self.fair_wait}
            self._answered.update((item.client, now) for item in batch if item.live())
        # the time this batch held the pipeline: with two batches in flight, since the previous one finished
        if not self._learning_paused:
            self.observe_batch(sum(p.cost for p in batch) if taken is None else taken,
                               now - max(started, self._last_done))
        self._last_done = now
        if self.metrics is not None:
            self.metrics.observe_batch(size, t)
        # the queue is timed on the monotonic clock, the stages on perf_counter: the offset between the two clocks
        to_perf = time.perf_counter() - time.monotonic()
        for item, item_hits in zip(batch, outcomes, strict=True):
            if item.future.done():  # cancelled while its batch ran, or failed at its encoding
                continue
            if isinstance(item_hits, Exception):
                self._fail([item], item_hits)
                continue
            queue = started - item.enqueued
            if self.metrics is not None:
                self.metrics.stage_duration.labels(stage="queue").observe(queue)
            intervals = (("queue", item.enqueued + to_perf, started + to_perf), *t.intervals)
            item.future.set_result(BatchOutcome(item_hits, queue, t.encode, t.search, t.aggregate, t.read, size,
                                                intervals))
