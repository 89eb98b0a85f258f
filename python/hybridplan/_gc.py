"""Pausing Python's cyclic garbage collector around bulk work that makes no cycles."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["gc_paused"]


@contextmanager
def gc_paused() -> Iterator[None]:
    """Runs the block with the cyclic garbage collector off, and turns it back on after
    (only when it was on before).

    For blocks that allocate many objects without making reference cycles: decoding a
    plan report of 10^5 swaps (``json.loads``), writing it into a GraphDef of 10^6 nodes.
    With the collector on, their allocations start collections that walk every tracked
    object of the process, TensorFlow's too: at 10^6 nodes (64,000 swaps) about 1.8 s of
    ``apply``'s 8 s CPU (docs/scale.md). Reference counting still frees everything as usual; a cycle
    made meanwhile is collected at the next collection after the block.

    Example::

        with gc_paused():
            report = json.loads(text)
    """
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
