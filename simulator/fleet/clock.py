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

from ..errors import LlmsimError
from ..runsize import MAX_CLOCK_TICKS


class Clock:
    def __init__(self, env: simpy.Environment, max_ticks: int = MAX_CLOCK_TICKS) -> None:
        self.env = env
        self.tasks: list[list] = []      # [next due, interval, fn, counted]
        self.armed = False
        self.armed_at = 0.0              # when the armed timer fires
        self.timer = 0                   # the armed timer's number: an earlier one, superseded, does nothing
        self.superseded = 0              # superseded timers still in the event queue: none keeps a run alive
        self.ticks = 0
        self.max_ticks = max_ticks

    def every(self, interval: float, fn: Callable[[], None], counted: bool = True) -> None:
        """Call ``fn`` at ``interval``, 2·``interval``, … while the run lasts.
        ``counted`` False: a display task (progress), not part of the run's
        work, left out of the tick limit. A task due before the armed timer
        re-arms it: else its first calls would wait for the timer of a task
        with a longer interval and all run at that instant."""
        due = self.env.now + interval
        self.tasks.append([due, interval, fn, counted])
        if not self.armed or due < self.armed_at - 1e-12:
            self._arm()

    def _arm(self) -> None:
        due = min(t[0] for t in self.tasks)
        self.superseded += self.armed     # the timer armed now, if any, will fire for nothing
        self.armed = True
        self.armed_at = due
        self.timer += 1
        timer = self.timer
        self.env.timeout(max(due - self.env.now, 0.0)).callbacks.append(lambda ev: self._fire(timer))

    def _fire(self, timer: int) -> None:
        if timer != self.timer:      # superseded by a timer armed for an earlier task
            self.superseded -= 1
            return
        now = self.env.now
        for task in self.tasks:
            if task[0] <= now + 1e-12:
                task[2]()
                task[0] += task[1]
                self.ticks += task[3]
        if self.ticks > self.max_ticks:
            # The last bound on a run whose span was not known in advance (a closed loop).
            raise LlmsimError(f"this run cannot finish: its periodic tasks (timeline samples, autoscaler "
                              f"evaluations) passed {self.max_ticks:,} ticks at {now:,.6g} simulated seconds; "
                              f"raise timeline_interval_s (or the autoscaler's interval_s), or, if the run "
                              f"should not last that long, shorten the time that stretches it (a network "
                              f"delay, think time, debounce or pause)",
                              key_path="timeline_interval_s")
        self.armed = False
        if len(self.env._queue) > self.superseded:          # something can still happen
            self._arm()
