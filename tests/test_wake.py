"""The compiled event loop (simulator.engine.wake) is SimPy's, event for event.

``wake.run`` and ``wake.call_later`` work SimPy's queue directly; with
``NATIVE`` off they defer to ``env.run()`` and ``env.schedule``. Every
driver kind and the fleet features that mix SimPy's own events with ours
(autoscaler timeouts, the clock, disaggregated transfers, cancellations)
must give the same per-request records either way.
"""
from __future__ import annotations

import numpy as np
import pytest
import simpy

from simulator.engine import wake
from simulator.metrics.records import Records
from simulator.runner import simulate
from test_gcpause import RUNS, _load

CASES = {**RUNS, "closed loop": ("dau-10m", ['workload.arrival={"type": "concurrency", "concurrency": 64}',
                                             "workload.num_requests=300", "workload.duration_s=null"], None)}


def _columns(case):
    sc, path = _load(*CASES[case])
    out = simulate(sc, source=path, summarize=False)
    return Records.of(out.requests).columns


def test_the_installed_simpy_has_the_internals_the_loop_drives():
    """wake.run and wake.call_later read and write SimPy's private queue,
    clock and event counter (pyproject pins simpy below 5 for that reason).
    A SimPy that renames or retypes them makes llmsim fall back to its own
    slower loop silently; this test makes that loud instead."""
    env = simpy.Environment()
    missing = [a for a in ("_queue", "_now", "_eid") if not hasattr(env, a)]
    assert not missing, f"simpy {simpy.__version__} lacks {missing}: update simulator/engine/wake.py"
    assert isinstance(env._queue, list) and isinstance(next(env._eid), int)
    event = env.event().succeed()
    assert {"callbacks", "_ok", "_value"} <= set(dir(event)) | set(vars(event)), \
        f"simpy {simpy.__version__} changed Event's fields: update simulator/engine/wake.py"
    seen = []
    wake.call_later(env, 2.5, 1, lambda w: seen.append(env.now))
    wake.run(env)
    assert seen == [2.5] and env.now == 2.5
    assert wake.NATIVE


@pytest.mark.parametrize("case", list(CASES))
def test_the_compiled_loop_runs_simpys_order(case, monkeypatch):
    assert wake.NATIVE   # this SimPy has the internals; else the comparison below is of one loop with itself
    ours = _columns(case)
    monkeypatch.setattr(wake, "NATIVE", False)
    simpys = _columns(case)
    assert len(ours["id"]) > 100
    assert ours.keys() == simpys.keys()
    for name in ours:
        np.testing.assert_array_equal(ours[name], simpys[name], err_msg=name)


def test_a_failed_event_nobody_handles_is_raised():
    env = simpy.Environment()
    env.timeout(1.0)
    failed = env.event()
    failed.fail(ValueError("lost"))
    with pytest.raises(ValueError, match="lost"):
        wake.run(env)


def test_order_is_time_then_priority_then_insertion():
    env = simpy.Environment()
    seen = []
    wake.call_later(env, 2.0, 1, lambda ev: seen.append("b"))
    wake.call_later(env, 1.0, 1, lambda ev: seen.append("a"))
    wake.call_later(env, 2.0, 0, lambda ev: seen.append("urgent"))
    env.timeout(2.0).callbacks.append(lambda ev: seen.append("timeout"))
    wake.call_later(env, 2.0, 1, lambda ev: seen.append("c"))
    wake.run(env)
    assert seen == ["a", "urgent", "b", "timeout", "c"] and env.now == 2.0
