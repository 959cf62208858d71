"""A replica's waiting queue: strict priority across request classes, FCFS within one.

vLLM's ``--scheduling-policy priority`` serves the highest-priority waiting
request first and keeps arrival order among equals; a paid request that
arrives behind a hundred free ones is therefore admitted next. The queue
keeps one deque per priority level, so with a single class (every request
priority 0) it costs what the plain deque did.

Priorities are integers, larger = more important (the scenario's
``classes.<name>.priority``).
"""
from __future__ import annotations

from bisect import insort
from collections import deque
from typing import Iterator

from .sequence import Seq


class WaitQueue:
    __slots__ = ("_levels", "_order", "_n")

    def __init__(self) -> None:
        self._levels: dict[int, deque[Seq]] = {}
        self._order: list[int] = []      # priorities present, ascending (the head is the last)
        self._n = 0

    def _level(self, s: Seq) -> deque[Seq]:
        p = s.req.priority
        q = self._levels.get(p)
        if q is None:
            q = self._levels[p] = deque()
            insort(self._order, p)
        return q

    def append(self, s: Seq) -> None:
        """A new arrival: behind every waiting request of its priority."""
        self._level(s).append(s)
        self._n += 1

    def appendleft(self, s: Seq) -> None:
        """A preempted sequence: first in line among its priority again."""
        self._level(s).appendleft(s)
        self._n += 1

    def insert_retracted(self, s: Seq) -> None:
        """A sequence SGLang's decode server retracted: behind the retracted ones
        already waiting at the front of its priority, ahead of the rest."""
        q = self._level(s)
        i = 0
        for w in q:
            if w.req.preemptions == 0:
                break
            i += 1
        q.insert(i, s)
        self._n += 1

    def _head_level(self) -> deque[Seq]:
        for p in reversed(self._order):
            q = self._levels[p]
            if q:
                return q
        raise IndexError("the waiting queue is empty")

    def popleft(self) -> Seq:
        s = self._head_level().popleft()
        self._n -= 1
        return s

    def remove(self, s: Seq) -> None:
        self._levels[s.req.priority].remove(s)
        self._n -= 1

    def __getitem__(self, i: int) -> Seq:
        if i != 0:
            raise IndexError("only the head (index 0) of a waiting queue is addressable")
        return self._head_level()[0]

    def __len__(self) -> int:
        return self._n

    def __bool__(self) -> bool:
        return self._n > 0

    def __iter__(self) -> Iterator[Seq]:
        """Service order: priority descending, FCFS within a priority."""
        for p in reversed(self._order):
            yield from self._levels[p]

    def lowest_priority(self) -> int:
        """The lowest priority ever queued here. Every running sequence came
        through this queue, so a running sequence of this priority is a
        preemption victim no other can beat (see FastReplica._victim)."""
        return self._order[0] if self._order else 0

    def count_at_least(self, priority: int) -> int:
        """Waiting requests that would be served before a new one of ``priority``
        (what admission control compares with a class's queue limit)."""
        return sum(len(self._levels[p]) for p in self._order if p >= priority)
