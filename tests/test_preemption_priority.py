"""Which running request KV pressure preempts when classes share a replica.

The waiting queue serves the higher class first (vLLM's ``--scheduling-policy
priority``), and that policy's victim is the least important running request,
the newest among equals; with one class, the newest (FCFS). Each engine is
run with a probe that logs every victim beside the priorities running at
that moment.
"""
from __future__ import annotations

import pytest

from helpers_engine import compare_runs, make_requests, run_open
from simulator.engine.config import EngineConfig
from simulator.engine.reference import ReferenceReplica
from simulator.engine.replica import FastReplica
from simulator.fleet import pool as fleet_pool

# (victim's priority, lowest priority running, victim was the newest of its priority)
Log = list[tuple[int, int, bool]]


def _probe(base: type, log: Log) -> type:
    class Probe(base):
        def _preempt(self, v):
            running = list(self.running)
            lowest = min(s.req.priority for s in running)
            newest_of_its_class = [s for s in running if s.req.priority == v.req.priority][-1] is v
            log.append((v.req.priority, lowest, newest_of_its_class))
            return super()._preempt(v)
    return Probe


def _workload(priorities):
    """40 requests whose outputs outgrow a KV cache of about four of them."""
    n = len(priorities)
    reqs = make_requests([i * 0.005 for i in range(n)], [200 + 37 * i % 200 for i in range(n)],
                         [300 + 53 * i % 200 for i in range(n)])
    for r, p in zip(reqs, priorities):
        r.priority = p
    return reqs


CFG = EngineConfig(max_num_seqs=64, max_num_batched_tokens=512, block_size=16)
NUM_BLOCKS = 150


def _run_both(monkeypatch, reqs):
    logs: dict[str, Log] = {"fast": [], "reference": []}
    monkeypatch.setitem(fleet_pool.ENGINES, "fast", _probe(FastReplica, logs["fast"]))
    monkeypatch.setitem(fleet_pool.ENGINES, "reference", _probe(ReferenceReplica, logs["reference"]))
    fast = run_open("fast", reqs, CFG, NUM_BLOCKS)
    ref = run_open("reference", reqs, CFG, NUM_BLOCKS)
    assert not compare_runs(fast, ref)
    assert logs["fast"] == logs["reference"]
    return fast, logs["fast"]


@pytest.mark.parametrize("priorities", [[i % 2 for i in range(40)], [-(i % 3) for i in range(40)]],
                         ids=["paid-free", "three-levels-below-zero"])
def test_a_higher_class_is_never_the_victim_while_a_lower_one_runs(monkeypatch, priorities):
    fast, log = _run_both(monkeypatch, _workload(priorities))
    assert all(v == lowest for v, lowest, _ in log), "a request preempted while a lower class was running"
    assert all(newest for _, _, newest in log)
    # The workload does put the classes under pressure together.
    assert sum(1 for v, _, _ in log if v == min(priorities)) > 5
    top = max(priorities)
    assert (sum(r.preemptions for r in fast.requests if r.priority == top)
            < sum(r.preemptions for r in fast.requests if r.priority == min(priorities)))


def test_one_class_preempts_the_newest(monkeypatch):
    _, log = _run_both(monkeypatch, _workload([7] * 40))
    assert len(log) > 5
    assert all(newest for _, _, newest in log)
