"""Running a simulation with Python's cyclic garbage collector paused.

A simulation holds every request it has made (the per-request table is
built from them at the end), so the live heap grows to millions of
objects, and the collector's periodic full passes over it cost a fifth of
a 10M-DAU hour-shard's CPU time (44.0 → 35.6 s, docs/performance.md),
while finding next to nothing: the engine's objects do not form reference
cycles per request (requests, events and callbacks are freed by reference
counting; ``tests/test_gcpause.py`` holds a run's cyclic garbage to a
small constant). Reference counting still frees everything else as
before, so memory is unchanged.
"""
from __future__ import annotations

import functools
import gc
from contextlib import contextmanager
from typing import Callable, Iterator, TypeVar

F = TypeVar("F", bound=Callable)


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic collector for the block; restore its prior state after
    (a caller that had it off keeps it off)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def without_gc(f: F) -> F:
    """``f`` runs with the cyclic collector paused (:func:`gc_paused`)."""
    @functools.wraps(f)
    def run(*args, **kwargs):
        with gc_paused():
            return f(*args, **kwargs)
    return run  # type: ignore[return-value]
