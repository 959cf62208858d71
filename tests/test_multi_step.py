"""vLLM 0.6's multi-step scheduling: prompts join only between decode blocks.

The fast engine is held to the reference engine on random workloads with
``num_scheduler_steps`` in tests/test_engine_differential.py; here the
reference engine's own behaviour is pinned on a clock where every iteration
takes one second, so the block boundaries are whole seconds.
"""
from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers_engine import cost_model, make_requests, run_open
from simulator.engine.config import EngineConfig


class OneSecondSteps:
    """Every iteration, prefill or decode, takes 1 s."""

    def __init__(self) -> None:
        self.model = cost_model().model

    def step_time(self, *args, **kwargs) -> float:
        return 1.0

    def decode_coefficients(self, batch: int, busiest: int = 0) -> tuple[float, float]:
        return 1.0, 0.0     # a + b·context seconds per decode iteration


def _cfg(steps: int) -> EngineConfig:
    return EngineConfig(chunked_prefill=False, num_scheduler_steps=steps, prefix_cache=False)


@pytest.mark.parametrize("engine", ["reference", "fast"])
@settings(max_examples=30, deadline=None)
@given(steps=st.integers(1, 9), arrive=st.floats(1.01, 30.0), out=st.integers(40, 60))
def test_a_prompt_waits_for_the_end_of_the_decode_block(engine, steps, arrive, out):
    """A decodes from t = 1 (its prefill is iteration 0); B, arriving at
    ``arrive``, is admitted at the first block boundary 1 + j·steps after
    the iteration in flight ends."""
    reqs = make_requests([0.0, arrive], [32, 32], [out, 4])
    a, b = run_open(engine, reqs, _cfg(steps), 10_000, cm=OneSecondSteps()).requests
    in_flight_end = float(math.ceil(arrive))                 # iterations end on whole seconds
    j = -(-(in_flight_end - 1.0) // steps)
    assert b.admitted == pytest.approx(1.0 + j * steps)
    assert b.first_token == pytest.approx(b.admitted + 1.0)  # its prefill-only step


@pytest.mark.parametrize("engine", ["reference", "fast"])
def test_idle_engine_admits_at_once(engine):
    reqs = make_requests([0.0, 10.5], [32, 32], [3, 3])       # A is done by t = 3
    _, b = run_open(engine, reqs, _cfg(8), 10_000, cm=OneSecondSteps()).requests
    assert b.admitted == pytest.approx(10.5)


@pytest.mark.parametrize("bad", [{"chunked_prefill": True}, {"chunked_prefill": False, "mixed_prefill": True},
                                 {"chunked_prefill": False, "scheduler": "static"}])
def test_multi_step_outside_vllm_060s_scheduling_is_refused(bad):
    with pytest.raises(ValueError, match="num_scheduler_steps > 1 is modelled as vLLM 0.6.0 ran it"):
        EngineConfig(num_scheduler_steps=8, prefix_cache=False, **bad)
