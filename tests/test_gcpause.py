"""simulate() runs with the cyclic garbage collector paused (simulator.gcpause).

That is only sound while a run makes no per-request reference cycles:
with the collector off, each would stay in memory until the run ends.
These runs cover every driver and fleet feature that holds callbacks
(chat sessions with autoscaled tiers, editing sessions with
cancellations, lone requests with a system prompt, disaggregation) and require that the
cyclic garbage a collection finds while the run's output is still alive
(what became unreachable during the run) stays far below one object per
request.
"""
from __future__ import annotations

import gc
from collections import Counter
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
    gc.collect()
    with gc_paused():     # else the first allocation after the run collects them
        out = simulate(sc, source=path)
        flags = gc.get_debug()
        gc.set_debug(flags | gc.DEBUG_SAVEALL)
        try:
            found = gc.collect()
            kinds = Counter(type(o).__name__ for o in gc.garbage).most_common(8)
        finally:
            gc.set_debug(flags)
            gc.garbage.clear()
    n = len(out.requests)
    assert n > 800
    # A per-request cycle leaves at least two objects per request. A few dozen
    # per run are not that: a CI worker's earlier tests leave library state
    # behind (85 objects there, 0 in a fresh process), the same at any size.
    assert found < n // 4, f"{found} cyclic objects after {n} requests: {kinds}"


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
