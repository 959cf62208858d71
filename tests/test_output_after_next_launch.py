"""Outputs that wait for the next launch (SGLang's overlap scheduler).

The scheduler hands a batch's sampled tokens to the client only after it
has launched the next batch, and a prefill batch runs eagerly, so its launch
lasts about as long as it runs: a prompt prefilled just before another
prefill batch sees its first token after that batch too. Decode batches
launch as one CUDA graph and delay nothing. The server's schedule is the
same either way; only what the client sees moves.
"""
from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.engine.config import EngineConfig
from simulator.validation.deployment import version_keys
from tests.helpers_engine import make_requests, run_open

SGLANG_LIKE = {"chunked_prefill": False, "mixed_prefill": False, "prefix_cache": False}
BLOCKS = 20_000


def _run(engine: str, reqs: list[tuple[float, int, int]], keys: dict) -> list:
    """Requests (arrival s, prompt, output) replayed open loop on one replica."""
    arrivals, inputs, outputs = zip(*reqs)
    run = run_open(engine, make_requests(arrivals, inputs, outputs), EngineConfig(**keys), BLOCKS)
    return run.requests


def test_a_prompt_prefilled_before_another_prefill_sees_its_first_token_after_it():
    """Two prompts at t = 0, one per prefill batch: the first one's token
    waits for the second batch; the second one's is followed by a decode
    batch and arrives at once; both end together, with nothing after."""
    reqs = [(0.0, 2000, 4), (0.0, 2000, 4)]
    keys = {**SGLANG_LIKE, "max_num_batched_tokens": 2000}
    plain = _run("fast", reqs, keys)
    lagged = _run("fast", reqs, {**keys, "output_after_next_launch": True})
    assert plain[1].first_token == pytest.approx(2 * plain[0].first_token, rel=0.05)
    assert lagged[0].first_token == pytest.approx(plain[1].first_token)
    assert lagged[1].first_token == pytest.approx(plain[1].first_token)
    assert [r.finish for r in lagged] == pytest.approx([r.finish for r in plain])


@settings(max_examples=25, deadline=None)
@given(reqs=st.lists(st.tuples(st.floats(0.0, 2.0), st.integers(16, 4000), st.integers(1, 64)),
                     min_size=1, max_size=25),
       chunked=st.booleans(), budget=st.sampled_from([512, 2048, 8192]), engine=st.sampled_from(["fast", "reference"]))
def test_the_lag_moves_only_what_the_client_sees(reqs, chunked, budget, engine):
    """Open loop, the server's schedule is unchanged (admissions equal), and
    every first token and end arrives no earlier, later by at most one
    iteration (under a second here)."""
    keys = {"chunked_prefill": chunked, "mixed_prefill": chunked, "max_num_batched_tokens": budget,
            "prefix_cache": False}
    plain = _run(engine, reqs, keys)
    lagged = _run(engine, reqs, {**keys, "output_after_next_launch": True})
    for p, q in zip(plain, lagged):
        assert p.admitted == q.admitted
        for t_p, t_q in ((p.first_token, q.first_token), (p.finish, q.finish)):
            if math.isnan(t_p):
                continue
            assert t_p <= t_q + 1e-12
            assert t_q - t_p < 1.0
        assert q.first_token <= q.finish


@pytest.mark.parametrize("version, lagged", [
    ("0.3.0", False), ("0.3.5.post2", False), ("0.3.6", True), ("0.4.0", True), ("0.5.1.post1", True),
    ("0.5.4", True), ("0.5.6.post2", True), ("0.5.13", True), ("", True)])
def test_sglang_rows_lag_from_the_release_that_made_overlap_the_default(version, lagged):
    """The sglang backend lags (current releases); rows of a version before
    0.3.6 replay without it, rows of an unknown version as the profile."""
    from simulator.profiles.backend import load_backend

    engine = {**load_backend("sglang").engine, **version_keys("sglang", version)}
    assert engine.get("output_after_next_launch", False) is lagged
    assert "output_after_next_launch" not in version_keys("vllm", version)
