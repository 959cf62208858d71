"""Routing a class over pools by prompt length (``classes[].pool_by_input_length``)."""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simulator.errors import LlmsimError
from simulator.runner import simulate
from simulator.scenario.schema import Scenario
from workloads.request import Status


def scenario(below: int, small_blocks: int, max_in: int, seed: int = 1, **cls) -> Scenario:
    engine = {"max_num_seqs": 32, "max_num_batched_tokens": 2048, "prefix_cache": False}
    return Scenario.model_validate({
        "name": "by-length", "seed": seed,
        "workload": {"num_requests": 60, "arrival": {"type": "poisson", "rate_per_s": 20},
                     "input_tokens": {"dist": "uniform", "min": 16, "max": max_in},
                     "output_tokens": {"dist": "uniform", "min": 1, "max": 400}},
        "classes": [{"name": "c", "pool_by_input_length": [{"pool": "small", "below_tokens": below},
                                                           {"pool": "big"}], **cls}],
        "pools": [{"name": "small", "model": "llama-3.2-1b", "gpu": "l40s", "replicas": 1,
                   "engine": {**engine, "num_gpu_blocks_override": small_blocks}},
                  {"name": "big", "model": "llama-3-8b", "gpu": "h100-sxm", "replicas": 1, "engine": engine}],
    })


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(below=st.integers(100, 3000), small_blocks=st.integers(8, 200), seed=st.integers(0, 1000))
def test_prompts_go_below_their_threshold_unless_the_pool_cannot_hold_them(below, small_blocks, seed):
    """A prompt under the threshold goes to the small pool if a replica
    there could ever serve it (prompt + output within its 16-token blocks),
    otherwise to the big one; the small pool never gets what it cannot
    hold, so nothing is rejected."""
    out = simulate(scenario(below, small_blocks, 3000, seed))
    for r in out.requests:
        fits = -(-(r.input_tokens + r.output_tokens - 1) // 16) <= small_blocks
        assert r.pool == ("small" if r.input_tokens < below and fits else "big"), r
        assert r.status == Status.FINISHED
    pools = out.results["llmsim"]["pools"]
    assert pools["small"]["gpu"] == "l40s" and pools["big"]["gpu"] == "h100-sxm"
    assert all(p["usd"] > 0 for p in pools.values())


@pytest.mark.parametrize("change, message", [
    ({"pool": "big"}, "both pool and pool_by_input_length"),
    ({"admission": {"max_wait_s": 1}}, "its admission would hold on one of them only"),
    ({"pool_by_input_length": [{"pool": "small", "below_tokens": 10}, {"pool": "big", "below_tokens": 20}]},
     "the last takes the rest"),
    ({"pool_by_input_length": [{"pool": "small", "below_tokens": 10}, {"pool": "nope"}]}, "does not exist"),
])
def test_unmodelled_routes_are_refused(change, message):
    with pytest.raises(LlmsimError, match=message):
        simulate(scenario(500, 100, 1000, **change))
