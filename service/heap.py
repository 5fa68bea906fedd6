"""The loaded searcher kept out of Python's cyclic garbage collector.

A loaded model and index leave a heap of some 420k objects that live as long as the searcher (the modules of
torch, transformers and ONNX Runtime, the tokenizer, the passages' metadata). A full (generation 2) collection
visits every one of them: 258 ms on the demo index (2-core AVX2 EPYC), and one that ran during a 10 s saturation
run stopped every thread for 414 ms. ``settle`` collects once and then freezes what is alive (``gc.freeze``: moved
to a permanent generation that collections skip), so the collections that serving triggers visit only what
requests allocated: the same saturation run's full collection took 11.8 ms.

Reference counting still frees frozen objects; only garbage in reference cycles among them waits for a
``settle(thaw=True)``, which unfreezes first: a reload settles that way once the replaced searcher is let go, so it
is collected, cycles and all.
"""

from __future__ import annotations

import gc


def settle(thaw: bool = False) -> int:
    """Collect what is unreachable (with ``thaw``, frozen objects too), then freeze the survivors; returns how many
    objects are frozen."""
    if thaw:
        gc.unfreeze()
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()
