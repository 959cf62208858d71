"""The fleet's one timer for periodic tasks (simulator/fleet/clock.py)."""
from __future__ import annotations

import simpy
from hypothesis import given, settings, strategies as st

from simulator.fleet.clock import Clock


def _run(intervals: list[float], until: float) -> list[list[float]]:
    """When each task ran, in a run kept alive by one event at ``until``."""
    env = simpy.Environment()
    env.timeout(until)          # the run's last event: the clock stops re-arming after it
    clock = Clock(env)
    calls: list[list[float]] = [[] for _ in intervals]
    for i, interval in enumerate(intervals):
        clock.every(interval, lambda i=i: calls[i].append(env.now))
    env.run()
    return calls


def test_a_shorter_task_registered_after_a_longer_one_runs_on_its_own_times():
    """An autoscaler every 30 s registered before a timeline sampled every 10 s: the samples ran
    at 30, 30, 30, 60, ... (held for the autoscaler's timer), not at 10, 20, 30."""
    slow, fast = _run([30.0, 10.0], 95.0)
    assert slow == [30.0, 60.0, 90.0]
    assert fast[:9] == [10.0, 20.0, 30.0, 40.0, 50.0, 60.0, 70.0, 80.0, 90.0]


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(1, 40), min_size=1, max_size=4), st.integers(1, 200))
def test_every_task_runs_at_each_multiple_of_its_interval_while_the_run_lasts(intervals, until):
    calls = _run([float(i) for i in intervals], float(until))
    for interval, times in zip(intervals, calls):
        due = [float(interval * k) for k in range(1, until // interval + 1)]
        assert times[:len(due)] == due, (interval, times)
        assert len(times) <= len(due) + 1        # at most one tick past the run's last event
