"""A callback in SimPy's event queue, without a ``simpy.Event``.

The engine and the workload drivers schedule ~4 plain callbacks per
request (an arrival, the ends of iterations and stretches). Nothing waits
on them, so they need none of an event's machinery, only what
``Environment.step`` reads of what it pops: ``callbacks`` (taken, then set
to None) and ``_ok`` (True: nothing to raise). Compiled with the engine
(setup.py), a :class:`Wake` costs a fraction of a ``simpy.Event``, whose
constructor is Python and whose fields compiled code can only set as
generic attributes. Scheduling still goes through ``env.schedule``, so
SimPy's own loop runs it, in its order.
"""
from __future__ import annotations

from typing import Any, Callable, Optional


class Wake:
    def __init__(self, callback: Callable[[Any], object]) -> None:
        self.callbacks: Optional[list[Callable[[Any], object]]] = [callback]
        self._ok = True


def call_later(env: Any, delay: float, priority: int, callback: Callable[[Any], object]) -> None:
    """Run ``callback(wake)`` after ``delay``, at SimPy ``priority``
    (URGENT 0: client events; NORMAL 1: the engine's)."""
    env.schedule(Wake(callback), priority, delay)
