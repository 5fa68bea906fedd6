"""Fair shares of the search queue between clients: who a request comes from, and the order batches take requests.

The micro-batcher (service/batcher.py) keeps its waiting requests in a ``FairQueue``: start-time fair queueing
by cost. Each client (``client_key``: its connection, or its address) has a virtual finish time; a request's tag is
``max(now, client's finish) + cost`` and batches take the smallest tags first. A client that queues a lot of work
(many requests, or expensive ones: service/cost.py) pushes its own tags far ahead, so the others' requests pass it:
each backlogged client gets about an equal share of the batches, in cost, and the work counted ahead of a new
request (what admission compares with its wait budget) is only what runs before it. A heavy client is therefore
refused (429) while the others are still admitted.

Clients that wait for each answer before asking again are never backlogged: between their answer and their next
request only the heavy client's work is queued, and a scheduler that always runs what is queued would give it
most of the batches. So the batcher (``fair_wait_ms``) holds back work that is ahead of its turn while another
client is in flight or was answered in the last ``fair_wait_ms``: that client's next request, tagged from the
virtual time, is taken first. The held work waits at most ``fair_wait_ms`` for a client that does not come back.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Generic, Literal, Protocol, TypeVar

from starlette.types import Scope

FairShareBy = Literal["connection", "peer"]


def client_key(scope: Scope, by: FairShareBy) -> str:
    """Who a request comes from, for fair shares: its TCP connection (address and port) or its peer address.

    ``peer`` groups every connection of one address (behind a proxy: the proxy); ``connection`` tells apart
    clients on one host (loopback, one NAT) but a client with several connections gets a share for each.
    """
    client = scope.get("client")
    if not client:
        return "-"
    return f"{client[0]}:{client[1]}" if by == "connection" else str(client[0])


class Queued(Protocol):
    """What the fair queue needs of a waiting request."""

    cost: float
    client: str
    tag: float

    def live(self) -> bool: ...


T = TypeVar("T", bound=Queued)


class FairQueue(Generic[T]):
    """Waiting requests ordered by fair-queueing tag; costs summed as they come and go.

    ``tag_for`` gives the tag a request from a client would get (admission compares the work ahead of it with its
    budget before it is queued), ``push`` queues it with that tag, ``pop`` takes the smallest tag. A request whose
    client left is taken out at once with ``withdraw``; any other found not ``live()`` is dropped when met.
    """

    def __init__(self) -> None:
        self._items: list[T] = []
        self._finish: dict[str, float] = {}  # client -> finish tag of its last queued request
        self._vtime = 0.0  # virtual time: the start tag of the last request taken
        self.cost = 0.0  # of the queued requests (live or not yet dropped)

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[T]:
        return iter(self._items)

    def tag_for(self, client: str, cost: float) -> float:
        """The tag a request of ``cost`` from ``client`` would get now."""
        return max(self._vtime, self._finish.get(client, 0.0)) + cost

    def ahead_of_its_turn(self, item: T) -> bool:
        """Whether ``item`` starts after the virtual time: its client has been served more than the clients now
        starting afresh (a newcomer's request would be taken before it)."""
        return item.tag - item.cost > self._vtime + 1e-9

    def cost_ahead(self, tag: float) -> float:
        """Cost of the live queued requests that a request tagged ``tag`` would run after (or with)."""
        return sum(item.cost for item in self._items if item.tag <= tag and item.live())

    def client_cost(self, client: str) -> float:
        """Cost of the live requests ``client`` has queued."""
        return sum(item.cost for item in self._items if item.client == client and item.live())

    def clients(self) -> int:
        """How many clients have live requests queued."""
        return len({item.client for item in self._items if item.live()})

    def push(self, item: T) -> None:
        """Queue ``item`` (its ``tag`` from ``tag_for``, which it advances for its client)."""
        self._finish[item.client] = item.tag
        self._items.append(item)
        self.cost += item.cost

    def in_order(self) -> list[T]:
        """The live requests, smallest tag first (the earliest queued among equals); dead ones are dropped."""
        self._drop_dead()
        return sorted(self._items, key=lambda item: item.tag)

    def pop(self, item: T) -> None:
        """Take ``item`` out of the queue to run it: virtual time moves to its start tag."""
        self._items.remove(item)
        self.cost -= item.cost
        self._vtime = max(self._vtime, item.tag - item.cost)
        self._forget_idle_clients()

    def withdraw(self, item: T) -> bool:
        """Take ``item`` out of the queue without running it (its client left); False if it was not queued.

        Its client is not charged for it: when it was the client's last queued request, the client's finish tag goes
        back to that request's start tag, so its next request is tagged as if this one had never been queued.
        """
        if item not in self._items:
            return False
        self._items.remove(item)
        self.cost -= item.cost
        if self._finish.get(item.client) == item.tag:
            self._finish[item.client] = item.tag - item.cost
        self._forget_idle_clients()
        return True

    def _forget_idle_clients(self) -> None:
        if not self._items:
            self._finish.clear()  # nothing waits: every client starts afresh
        elif len(self._finish) > 4 * len(self._items):  # forget clients that have nothing queued
            queued = {i.client for i in self._items}
            self._finish = {c: t for c, t in self._finish.items() if c in queued}

    def first_enqueued(self) -> T | None:
        """The live request queued first (its wait decides when a forming batch must go)."""
        return next((item for item in self._items if item.live()), None)

    def clear(self) -> list[T]:
        """Empty the queue; returns what it held."""
        items, self._items, self.cost = self._items, [], 0.0
        self._finish.clear()
        return items

    def _drop_dead(self) -> None:
        for item in [item for item in self._items if not item.live()]:
            self.withdraw(item)
