"""SimPy's event queue, driven from compiled code.

The engine and the workload drivers schedule ~4 plain callbacks per
request (an arrival, the ends of iterations and stretches). Nothing waits
on them, so they need none of a ``simpy.Event``'s machinery, only what
``Environment.step`` reads of what it pops: ``callbacks`` (taken, then set
to None) and ``_ok`` (True: nothing to raise). Compiled with the engine
(setup.py), a :class:`Wake` costs a fraction of a ``simpy.Event``, whose
constructor is Python and whose fields compiled code can only set as
generic attributes.

:func:`run` is ``Environment.run()`` (no ``until``) and :func:`call_later`
is ``env.schedule`` on a :class:`Wake`, both compiled: SimPy's interpreted
``run``/``step``/``schedule`` were ~7 % of a 10M-DAU shard. They use the
same queue the same way, so events run in SimPy's order (time, priority,
insertion) and SimPy's own events (timeouts, processes) mix with them
freely. They read SimPy internals that have not changed since SimPy 3
(``_queue``, ``_now``, ``_eid``; an event's ``callbacks``, ``_ok``,
``_value``, ``_defused``);
``NATIVE`` says whether this SimPy has them; where it does not, both fall
back to SimPy's own methods. A test holds both ways equal on every driver
kind.
"""
from __future__ import annotations

from heapq import heappop, heappush
from typing import Any, Callable, Iterable, Iterator, Optional

import simpy


class Wake:
    def __init__(self, callback: Callable[[Any], object]) -> None:
        self.callbacks: Optional[list[Callable[[Any], object]]] = [callback]
        self._ok = True


def native(env: Any) -> bool:
    """Whether ``env`` has the internals :func:`run` and :func:`call_later` use."""
    return all(hasattr(env, a) for a in ("_queue", "_now", "_eid")) and isinstance(env._queue, list)


#: Not Final, so that a test can turn the fallback on.
NATIVE: bool = native(simpy.Environment())


def call_later(env: Any, delay: float, priority: int, callback: Callable[[Any], object]) -> None:
    """Run ``callback(wake)`` after ``delay``, at SimPy ``priority``
    (URGENT 0: client events; NORMAL 1: the engine's): ``env.schedule``'s
    own push."""
    if not NATIVE:
        env.schedule(Wake(callback), priority, delay)
        return
    heappush(env._queue, (env._now + delay, priority, next(env._eid), Wake(callback)))


def run(env: Any) -> None:
    """``env.run()``: process events until none are left."""
    if not NATIVE:
        env.run()
        return
    queue: list = env._queue
    while queue:
        now, _, _, event = heappop(queue)
        env._now = now
        callbacks = event.callbacks
        event.callbacks = None
        for callback in callbacks:
            callback(event)
        if not event._ok and not hasattr(event, "_defused"):
            value = event._value   # a failed event nobody handled: raise a copy, as step() does
            exc = type(value)(*value.args)
            exc.__cause__ = value
            raise exc


class AtTimes:
    """``act(item)`` at time ``when(item)`` for items in time order, as
    client (URGENT) events, keeping one event pending: an open-loop
    workload's arrivals."""

    def __init__(self, env: Any, items: Iterable[Any], when: Callable[[Any], float],
                 act: Callable[[Any], object], priority: int) -> None:
        self.env = env
        self.it: Iterator[Any] = iter(items)
        self.when = when
        self.act = act
        self.priority = priority
        self.item: Any = None

    def start(self) -> None:
        self._next()

    def _next(self) -> None:
        nxt = next(self.it, None)
        if nxt is not None:
            self.item = nxt
            call_later(self.env, max(self.when(nxt) - self.env.now, 0.0), self.priority, self.fire)

    def fire(self, _ev: object) -> None:
        self.act(self.item)
        self._next()
