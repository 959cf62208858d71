"""What a replica does when KV memory runs short, per admission policy.

``on_demand`` (vLLM V1): admit on the prompt's blocks, preempt the newest
running request by recompute when the decodes' next tokens do not fit.
``reserve_output`` (TensorRT-LLM's GUARANTEED_NO_EVICT): admit only while
every running request's remaining output and the new request's prompt and
output fit; nothing is ever preempted, the rest wait in the queue.

The fast engine is held to the reference under both policies by the
differential and property tests (``helpers_engine.engine_configs`` draws the
policy); these tests state what each policy means for a closed loop.
"""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helpers_engine import run_closed
from simulator.engine.blocks import ceil_div
from simulator.engine.config import EngineConfig
from simulator.profiles.backend import load_backend
from tests.test_bad_input import SCENARIO, one_line_error, write_yaml
from workloads.request import Status

SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow])
POLICIES = ["on_demand", "reserve_output"]


def in_flight_after_each_event(reqs) -> list[tuple[float, int]]:
    """(time, requests arrived and not ended) after all events at that time."""
    events: dict[float, int] = {}
    for r in reqs:
        events[r.arrival] = events.get(r.arrival, 0) + 1
        events[r.finish] = events.get(r.finish, 0) - 1
    out, n = [], 0
    for t in sorted(events):
        n += events[t]
        out.append((t, n))
    return out


@st.composite
def pressured_loops(draw):
    """A closed loop whose requests fit alone but not all together."""
    engine = draw(st.sampled_from(["fast", "reference"]))
    conc = draw(st.integers(2, 12))
    n = draw(st.integers(conc, 40))
    inp = draw(st.lists(st.integers(1, 400), min_size=n, max_size=n))
    out = draw(st.lists(st.integers(1, 200), min_size=n, max_size=n))
    bs = draw(st.sampled_from([1, 4, 16]))
    chunked = draw(st.booleans())
    cfg = EngineConfig(kv_admission=draw(st.sampled_from(POLICIES)), block_size=bs, chunked_prefill=chunked,
                       mixed_prefill=None if chunked else draw(st.sampled_from([None, True])),
                       max_num_seqs=draw(st.integers(conc, 16)), max_num_batched_tokens=512)
    biggest = max(ceil_div(i + o, bs) for i, o in zip(inp, out))
    nb = draw(st.integers(biggest, 2 * biggest))
    return engine, conc, inp, out, cfg, nb


@settings(max_examples=150, **SETTINGS)
@given(case=pressured_loops())
def test_a_closed_loop_under_kv_pressure_keeps_c_requests_in_flight(case):
    """Preempted requests stay in flight (they are neither finished nor
    rejected); every admitted request finishes, once; the loop holds exactly
    C requests until it runs out of requests to send."""
    engine, conc, inp, out, cfg, nb = case
    run = run_closed(engine, conc, inp, out, cfg, nb)
    reqs = run.requests
    assert len(reqs) == len(inp)
    assert all(r.status == Status.FINISHED for r in reqs), "a request that fits alone was not served"
    assert all(run.done_calls[r.id] == 1 for r in reqs)
    last_arrival = max(r.arrival for r in reqs)
    for t, n in in_flight_after_each_event(reqs):
        if t < last_arrival:
            assert n == conc, f"{n} requests in flight at t={t}, not {conc}"
    st_ = run.stats()[0]
    assert st_["kv_used_max"] <= nb
    if cfg.kv_admission == "reserve_output":
        assert st_["preemptions"] == 0 and all(r.preemptions == 0 for r in reqs)


@pytest.mark.parametrize("engine", ["fast", "reference"])
@pytest.mark.parametrize("fits", [1, 3, 5])
def test_reserving_outputs_runs_as_many_as_whole_requests_fit(engine, fits):
    """Identical requests whose final KV is F blocks, capacity for ``fits``
    of them (plus part of another): exactly ``fits`` run at once and none is
    preempted; admitting on the prompt instead crowds more in and preempts."""
    isl, osl, bs, conc = 300, 200, 16, 8
    F = ceil_div(isl + osl, bs)
    nb = fits * F + F // 2
    cfg = EngineConfig(kv_admission="reserve_output", block_size=bs, max_num_seqs=16)
    run = run_closed(engine, conc, [isl] * 24, [osl] * 24, cfg, nb)
    st_ = run.stats()[0]
    assert st_["batch_max"] == fits and st_["preemptions"] == 0
    assert all(r.status == Status.FINISHED for r in run.requests)
    greedy = run_closed(engine, conc, [isl] * 24, [osl] * 24, EngineConfig(block_size=bs, max_num_seqs=16), nb)
    assert greedy.stats()[0]["batch_max"] > fits and greedy.stats()[0]["preemptions"] > 0


def test_a_request_whose_whole_output_cannot_fit_is_rejected_not_queued_forever():
    """On demand, a request needs its last token's KV only (input + output − 1
    tokens); reserving outputs it needs input + output, and one that cannot
    have it is rejected on arrival rather than blocking the queue."""
    bs = 16
    nb = ceil_div(255, bs)          # 16 blocks = 256 tokens: input 200 + output 56 = 256 fits, 57 does not
    for admission, out, status in [("on_demand", 57, Status.FINISHED), ("reserve_output", 57, Status.REJECTED),
                                    ("reserve_output", 56, Status.FINISHED)]:
        cfg = EngineConfig(kv_admission=admission, block_size=bs)
        run = run_closed("fast", 1, [200, 10], [out, 5], cfg, nb)
        assert [r.status for r in run.requests] == [status, Status.FINISHED], admission


def test_each_stack_admits_as_it_does():
    assert load_backend("trtllm").engine["kv_admission"] == "reserve_output"
    assert load_backend("sglang").engine["kv_admission"] == "expected_output"
    assert load_backend("vllm").engine.get("kv_admission", "on_demand") == "on_demand"


@pytest.mark.parametrize("extra", [{"kv_allocation": "contiguous", "prefix_cache": False},
                                   {"scheduler": "static"}])
def test_reserving_outputs_where_the_allocation_already_reserves_is_refused(tmp_path, cli, extra):
    sc = {**SCENARIO, "pools": [{**SCENARIO["pools"][0],
                                 "engine": {"kv_admission": "reserve_output", **extra}}]}
    one_line_error(cli("run", write_yaml(tmp_path / "s.yaml", sc), "--output", tmp_path / "out"),
                   "kv_admission", "already reserve")
