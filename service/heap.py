"""The loaded searcher kept out of Python's cyclic garbage collector.

A loaded model and index leave a heap of some 420k objects that live as long as the searcher (the modules of
torch, transformers and ONNX Runtime, the tokenizer, the passages' metadata). A full (generation 2) collection
visits every one of them: 258 ms on the demo index (2-core AVX2 EPYC), and one that ran during a 10 s saturation
run stopped every thread for 414 ms. ``settle`` collects once and then freezes what is alive (``gc.freeze``: moved
to a permanent generation that collections skip), so the collections that serving triggers visit only what
requests allocated: the same saturation run's full collection took 11.8 ms.

Reference counting still frees frozen objects; only garbage in reference cycles among them waits for a
``settle(thaw=True)``, which unfreezes first: a reload settles that way once the replaced searcher is let go, so it
is collected, cycles and all, and so does a finished merge (``service.live``), which also freezes the merged base.

Memory freed is not given back to the system by itself: glibc's allocator keeps the freed parts of its heaps (one
arena per thread that allocated: the event loop, the encoder's and writes' threads, a merge's) for later
allocations. After a merge that replaced a 300-document base with a 2-document one, the service held 1,147 MB of
anonymous memory against 825 MB at its start; ``give_back`` (glibc's ``malloc_trim(0)``) returns those free pages:
858-894 MB in two runs. ``settle`` calls it; elsewhere than glibc it does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import logging
import time
from typing import Any

log = logging.getLogger("spanseek.service")


def settle(thaw: bool = False) -> int:
    """Collect what is unreachable (with ``thaw``, frozen objects too), then freeze the survivors; returns how many
    objects are frozen."""
    if thaw:
        gc.unfreeze()
    gc.collect()
    gc.freeze()
    give_back()
    return gc.get_freeze_count()


def _malloc_trim() -> Any:
    """glibc's ``malloc_trim``, or None where the C library is not glibc (musl, macOS, Windows)."""
    name = ctypes.util.find_library("c")
    try:
        return getattr(ctypes.CDLL(name), "malloc_trim", None) if name else None
    except OSError:
        return None


_trim = _malloc_trim()


def give_back() -> bool:
    """Return the allocator's free memory to the system (glibc's ``malloc_trim(0)``: every arena's free pages);
    whether it could (False: not glibc). Takes milliseconds, holding each arena's lock while it walks it: call it after
    a large release (a merge, a reload), not per request."""
    if _trim is None:
        return False
    t0 = time.perf_counter()
    _trim(0)
    log.debug("gave free memory back to the system in %.1f ms", 1000 * (time.perf_counter() - t0))
    return True
