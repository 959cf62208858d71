"""A scheduler that plans one iteration ahead (vLLM's async scheduling,
SGLang's and TensorRT-LLM's overlap schedulers).

While the GPU runs iteration N the CPU has already planned N+1, and it
takes in new requests only after N's outputs are back: a request arriving
during N runs first in N+2, one iteration later than under a scheduler
that plans each iteration when the last one ends. An idle server has
nothing to plan ahead of and starts it at once.
"""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.engine.config import EngineConfig
from tests.helpers_engine import make_requests, run_open

BLOCKS = 20_000
CHUNKED = {"chunked_prefill": True, "max_num_batched_tokens": 8192, "prefix_cache": False}


def _run(engine: str, reqs: list[tuple[float, int, int]], keys: dict) -> list:
    arrivals, inputs, outputs = zip(*reqs)
    return run_open(engine, make_requests(arrivals, inputs, outputs), EngineConfig(**keys), BLOCKS).requests


@pytest.mark.parametrize("engine", ["fast", "reference"])
def test_an_arrival_during_a_decode_waits_one_more_iteration(engine):
    """One long decode runs; a second request arrives in the middle of one
    of its iterations. Planning each iteration at the boundary, it is
    admitted at the end of the iteration in flight; planning ahead, one
    iteration later."""
    reqs = [(0.0, 512, 400), (0.05, 512, 4)]
    plain = _run(engine, reqs, CHUNKED)
    ahead = _run(engine, reqs, {**CHUNKED, "schedule_ahead": True})
    assert ahead[0].first_token == pytest.approx(plain[0].first_token)   # an idle server starts at once
    step = (plain[0].finish - plain[0].first_token) / 399                   # about one decode iteration
    lag = ahead[1].admitted - plain[1].admitted
    assert 0.5 * step < lag < 2.5 * step
    assert ahead[1].first_token - plain[1].first_token == pytest.approx(lag, rel=0.2)


@pytest.mark.parametrize("engine", ["fast", "reference"])
def test_async_scheduling_plans_ahead_unless_told_otherwise(engine):
    reqs = [(0.0, 512, 400), (0.05, 512, 4)]
    ahead = _run(engine, reqs, {**CHUNKED, "async_scheduling": True})
    told = _run(engine, reqs, {**CHUNKED, "async_scheduling": True, "schedule_ahead": False})
    assert ahead[1].admitted > told[1].admitted
    assert EngineConfig(async_scheduling=True).plans_ahead and not EngineConfig().plans_ahead


@settings(max_examples=30, deadline=None)
@given(reqs=st.lists(st.tuples(st.floats(0.0, 1.0), st.integers(16, 3000), st.integers(1, 64)),
                     min_size=1, max_size=20),
       chunked=st.booleans(), budget=st.sampled_from([512, 2048, 8192]))
def test_planning_ahead_both_engines_agree(reqs, chunked, budget):
    """Requests arriving together at an idle server are taken in together
    (nothing changes); the fast engine's timestamps equal the reference's."""
    keys = {"chunked_prefill": chunked, "mixed_prefill": chunked, "max_num_batched_tokens": budget,
            "prefix_cache": False, "schedule_ahead": True}
    fast = _run("fast", reqs, keys)
    ref = _run("reference", reqs, keys)
    for f, r in zip(fast, ref):
        assert f.admitted == pytest.approx(r.admitted, abs=1e-9)
        assert f.first_token == pytest.approx(r.first_token, abs=1e-9)
        assert f.finish == pytest.approx(r.finish, abs=1e-9)
    if len({t for t, _, _ in reqs}) == 1:     # all arrive together at an idle server: nothing changes
        plain = _run("fast", reqs, {**keys, "schedule_ahead": False})
        assert [f.first_token for f in fast] == pytest.approx([p.first_token for p in plain])
