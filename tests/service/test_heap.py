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


def test_give_back_trims_glibcs_heaps_and_settle_gives_back(monkeypatch):
    """Freed memory goes back to the system after a settle (a start, a reload): glibc's malloc_trim(0)."""
    from spanseek.service import heap

    calls: list[int] = []
    monkeypatch.setattr(heap, "_trim", calls.append)
    assert heap.give_back() and calls == [0]
    settle()
    assert calls == [0, 0]


def test_give_back_does_nothing_where_the_c_library_is_not_glibc(monkeypatch):
    from spanseek.service import heap

    monkeypatch.setattr(heap.ctypes.util, "find_library", lambda name: None)
    assert heap._malloc_trim() is None
    monkeypatch.setattr(heap, "_trim", None)
    assert not heap.give_back()
    settle()  # and settles all the same


def test_the_real_trim_runs_here():
    """On this (glibc) machine the trim is found and runs; elsewhere it is absent, which the test above covers."""
    import ctypes.util

    from spanseek.service import heap

    name = ctypes.util.find_library("c") or ""
    assert heap.give_back() == (heap._trim is not None)
    if "libc.so" in name:  # glibc
        assert heap._trim is not None
