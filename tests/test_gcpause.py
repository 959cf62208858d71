"""simulate() runs with the cyclic garbage collector paused (simulator.gcpause).

That is only sound while a run makes no per-request reference cycles:
with the collector off, each would stay in memory until the run ends.
These runs cover every driver and fleet feature that holds callbacks
(chat sessions with autoscaled tiers, editing sessions with
cancellations, lone requests with a system prompt, disaggregation) and require that no
cyclic garbage appears while the run's output is still alive: what a
collection finds then became unreachable during the run.
"""
from __future__ import annotations

import gc
from pathlib import Path

import pytest

from simulator.gcpause import gc_paused
from simulator.runner import simulate
from simulator.scenario.load import load_scenario
from simulator.scenario.variants import overlay_assignments, select_variants

SCENARIOS = Path(__file__).resolve().parent.parent / "scenarios"

RUNS = {
    "chat sessions, tiers, autoscaling": ("chatbot", ["workload.duration_s=120"], None),
    "editing sessions, cancellations": ("autocomplete", ["workload.duration_s=20"], None),
    "lone requests, system prompt": ("dau-10m", ["workload.duration_s=30"], None),
    "disaggregation": ("ttft-program", ["workload.duration_s=60"], "disaggregation"),
}


def _load(name, sets, variant):
    path = SCENARIOS / f"{name}.yaml"
    if variant is not None:
        sc, _ = load_scenario(path)
        (v,) = select_variants(sc.variants, [variant])
        sets = overlay_assignments(v.set) + sets
    return load_scenario(path, sets)


@pytest.mark.parametrize("case", list(RUNS))
def test_a_run_leaves_no_cyclic_garbage(case):
    sc, path = _load(*RUNS[case])
    # A first run imports lazily loaded modules (pyarrow registers ABCs that
    # leave a few dozen cyclic objects) and fills one-time caches; what
    # that leaves depends on what the worker ran before, so it is not
    # counted.
    simulate(sc, source=path)
    gc.collect()
    with gc_paused():     # else the first allocation after the run collects them
        out = simulate(sc, source=path)
        found = gc.collect()
    assert len(out.requests) > 100
    assert found < 50     # a per-request cycle would leave thousands


@pytest.mark.parametrize("enabled", [True, False])
def test_the_collector_is_restored(enabled):
    sc, path = _load("dau-10m", ["workload.duration_s=5"], None)
    (gc.enable if enabled else gc.disable)()
    try:
        seen = []
        simulate(sc, source=path, on_end=lambda r: seen.append(gc.isenabled()))
        assert seen and not any(seen)          # off during the run
        assert gc.isenabled() is enabled       # as it was, after
        with pytest.raises(RuntimeError):
            with gc_paused():
                raise RuntimeError
        assert gc.isenabled() is enabled
    finally:
        gc.enable()
