"""Periodic fleet tasks (autoscaler evaluations, timeline samples) on one timer.

A periodic SimPy process keeps a run alive forever, and two of them keep
each other alive. So every periodic task shares one timer event, and the
timer stops re-arming once nothing else is pending: with no arrival,
iteration or replica start left in the event queue, nothing can happen any
more and the run is over.
"""
from __future__ import annotations

from typing import Callable

import simpy


class Clock:
    def __init__(self, env: simpy.Environment) -> None:
        self.env = env
        self.tasks: list[list] = []      # [next due, interval, fn]
        self.armed = False

    def every(self, interval: float, fn: Callable[[], None]) -> None:
        """Call ``fn`` at ``interval``, 2·``interval``, … while the run lasts."""
        self.tasks.append([self.env.now + interval, interval, fn])
        if not self.armed:
            self._arm()

    def _arm(self) -> None:
        due = min(t[0] for t in self.tasks)
        self.armed = True
        self.env.timeout(max(due - self.env.now, 0.0)).callbacks.append(self._fire)

    def _fire(self, _ev) -> None:
        now = self.env.now
        for task in self.tasks:
            if task[0] <= now + 1e-12:
                task[2]()
                task[0] += task[1]
        self.armed = False
        if self.env._queue:          # something can still happen
            self._arm()
