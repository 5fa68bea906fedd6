"""Load shedding by expected waiting time: the batch rate the service measures, and the admit-or-429 decision.

The micro-batcher (service/batcher.py) records every finished batch here (its size and how long it held the
pipeline) and asks, for each new request, how long until the batch it would join starts: the rest of the batches
in flight plus the full batches queued ahead of it (questions that will share its batch are not ahead of it).
Beyond ``max_queue_wait_ms`` (with at least one full batch queued ahead of it) the request gets 429 with
``Retry-After`` at once, so accepted requests keep a bounded latency (about the budget plus their own batch)
whatever the concurrency; a request that joins the next batch is always taken. A burst at an idle server is
the exception: up to one request's most questions, it is taken whole while it all runs within the budget plus its
own expected time. ``max_queue`` stays a hard cap on top.

Work is counted in question-equivalents (service/cost.py: a question at the default depth is one; a deep document
search or reading counts for more), so batches and admission follow what requests cost rather than how many
questions they hold; with fair queueing (service/fairness.py), the work ahead of a request is only what runs
before it, and a client holding more than an equal share of ``max_queue`` is refused first.
"""

from __future__ import annotations

import math

from spanseek.service.errors import Overloaded


class BatchCostModel:
    """Seconds per batch as a function of its size, ``cost(n) = fixed + per_question * n``, fitted online.

    A weighted least-squares line through recent (size, seconds) observations, older ones decaying by ``decay``
    per batch, so it follows the machine's speed within tens of batches. Batches of one size only (say, always
    full) cannot separate the two terms; the model then charges each question its share of the mean batch time,
    which is exact for batches of that size. Before any observation it knows nothing (``known`` is False).
    """

    def __init__(self, decay: float = 0.95):
        self.decay = decay
        self._w = self._x = self._y = self._xx = self._xy = 0.0
        self._rw = self._rr = 0.0  # decayed weight and sum of squared residuals of batches against the line

    @property
    def known(self) -> bool:
        """True once a batch has been observed."""
        return self._w > 0

    def observe(self, size: float, seconds: float) -> None:
        """Record one batch of ``size`` questions (question-equivalents) that took ``seconds``."""
        d = self.decay
        if self.known:  # how far this batch was from what the line predicted for it (before learning from it)
            residual = seconds - self.seconds_for(size, max(math.ceil(size), 1))  # as one batch
            self._rw = d * self._rw + 1.0
            self._rr = d * self._rr + residual * residual
        self._w = d * self._w + 1.0
        self._x = d * self._x + size
        self._y = d * self._y + seconds
        self._xx = d * self._xx + size * size
        self._xy = d * self._xy + size * seconds

    def line(self) -> tuple[float, float]:
        """(fixed seconds per batch, seconds per question), both >= 0."""
        if not self.known:
            return 0.0, 0.0
        mx, my = self._x / self._w, self._y / self._w
        var = self._xx / self._w - mx * mx
        if var > 1e-6 * max(1.0, mx * mx):
            slope = (self._xy / self._w - mx * my) / var
            fixed = my - slope * mx
            if slope > 0 and fixed >= 0:
                return fixed, slope
        return 0.0, my / max(mx, 1.0)  # one batch size seen (or a noisy fit): proportional to size

    def spread(self) -> float:
        """Typical deviation (seconds, RMS) of recent batches from the line: how much a batch may overrun it."""
        return math.sqrt(self._rr / self._rw) if self._rw > 0 else 0.0

    def seconds_for(self, questions: float, max_batch_size: int) -> float:
        """Expected seconds to run ``questions`` queued questions in batches of at most ``max_batch_size``."""
        if questions <= 0:
            return 0.0
        fixed, per_question = self.line()
        return math.ceil(questions / max_batch_size) * fixed + questions * per_question


def queue_wait(cost: BatchCostModel, queued: float, max_batch_size: int, inflight_remaining_s: float = 0.0) -> float:
    """Expected seconds until a request joining ``queued`` waiting questions starts to run.

    Batches are cut from the head of the queue, ``max_batch_size`` questions at a time, so the request runs in the
    batch after the ``queued // max_batch_size`` full batches ahead of it: the questions of its own (forming) batch
    run with it, not before it. Those batches start once the batches in flight finish (``inflight_remaining_s``).
    """
    ahead = math.floor(queued / max_batch_size) * max_batch_size
    return max(0.0, inflight_remaining_s) + cost.seconds_for(ahead, max_batch_size)


def check_admission(cost: BatchCostModel, queued: float, incoming: float, max_batch_size: int, max_queue: int,
                    budget_s: float, inflight_remaining_s: float = 0.0, burst_deadline_s: float | None = None,
                    ahead: float | None = None) -> None:
    """Raise Overloaded (429 + Retry-After) when ``incoming`` questions should not join ``queued`` ones.

    Refused when the queue would exceed ``max_queue`` questions, or when a budget is set (> 0), at least one full
    batch is queued ahead of this request and the measured rate says its batch would start more than ``budget_s``
    from now (``queue_wait``: the batches in flight, then the full batches ahead of it). A request that joins the
    next batch is never refused by the budget, however long the batch in flight runs: it adds no waiting to anyone,
    and a retry would find the same batch running (closed-loop clients at saturation got 429s for nothing). An
    accepted request thus finishes within about the budget plus its own batch (plus the batch in flight when the
    queue is short). ``burst_deadline_s`` (the batcher gives it while a burst at an idle server is still small: at
    most its first batch started and at most one request's most questions in all): the burst is admitted beyond the
    budget as long as the whole queue, these questions included, still runs within that many seconds from now
    (the budget plus the burst's own expected time after it started), so such a burst is served whole.
    ``ahead``: the queued work that runs before this request (fair queueing), default all of ``queued``.
    """
    ahead = queued if ahead is None else ahead
    wait = queue_wait(cost, ahead, max_batch_size, inflight_remaining_s)
    if queued + incoming > max_queue:
        drain = max(0.0, inflight_remaining_s) + cost.seconds_for(queued, max_batch_size)
        raise Overloaded(f"search queue is full ({queued:.0f} question-equivalents waiting); retry later", drain,
                         reason="queue_full")
    if budget_s <= 0 or wait <= budget_s or ahead < max_batch_size:
        return  # within the budget, or it runs in the next batch: nothing queued waits before it
    if burst_deadline_s is not None and \
            max(0.0, inflight_remaining_s) + cost.seconds_for(queued + incoming, max_batch_size) <= burst_deadline_s:
        return  # the whole queue, these questions included, runs by the burst's deadline
    raise Overloaded(f"this request's batch would start in {wait * 1e3:.0f} ms, over this server's "
                     f"{budget_s * 1e3:.0f} ms budget (max_queue_wait_ms); retry later", wait, reason="wait_budget")


def check_client_share(cost: BatchCostModel, held: float, incoming: float, clients: int, max_batch_size: int,
                       max_queue: int) -> None:
    """Raise Overloaded when a client already holding ``held`` queued question-equivalents would hold more than an
    equal share of ``max_queue`` among the ``clients`` with work queued (itself included) by adding ``incoming``.

    The queue's room is shared: one client cannot fill it and turn everyone else away. ``Retry-After`` is the time
    its own queued work takes.
    """
    share = max_queue / max(1, clients)
    if held + incoming > share:
        raise Overloaded(f"this client has {held:.0f} question-equivalents queued, its share of the queue is "
                         f"{share:.0f} (max_queue split among {clients} clients); retry later",
                         cost.seconds_for(held, max_batch_size), reason="fair_share")
