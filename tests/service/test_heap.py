"""The served heap is frozen out of the cyclic collector, and a thawing settle still collects frozen cycles.

    .venv/bin/python -m pytest -q tests/service/test_heap.py
"""

from __future__ import annotations

import gc
import weakref

from spanseek.service.heap import settle


class Node:
    def __init__(self) -> None:
        self.other: Node | None = None


def tracked(obj: object) -> bool:
    """Whether a collection of some generation would visit ``obj`` (frozen objects are in none of them)."""
    return any(o is obj for o in gc.get_objects())


def test_settle_freezes_survivors_and_a_thawing_settle_collects_frozen_cycles():
    a, b = Node(), Node()
    a.other, b.other = b, a  # a cycle: reference counting alone never frees it
    assert tracked(a)
    frozen = settle()
    # the count settle returns, less any frozen object that reference counting freed since (other threads of the
    # test process run on)
    assert 0 < gc.get_freeze_count() <= frozen
    assert not tracked(a) and not tracked(b)
    gone = weakref.ref(a)
    del a, b
    gc.collect()
    assert gone() is not None  # frozen: an ordinary full collection skips it
    settle()
    assert gone() is not None  # settling without thawing too
    settle(thaw=True)
    assert gone() is None
