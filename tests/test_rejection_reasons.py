"""Every rejected request says why, in its record and in the per-request table.

Whoever turns a request away stamps the reason (a replica that could never serve it, a pool's
admission control), both engines stamp the same one, and a request that was not rejected has
none. The load verdict reads these reasons (tests/test_load.py); here each one is triggered.
"""
from __future__ import annotations

import pytest

from helpers_engine import compare_runs, make_requests, run_open
from simulator.engine.config import EngineConfig
from simulator.fleet.pool import Admission
from simulator.hybrid_kv import SlidingGroups
from simulator.metrics.table import request_table
from workloads.rejection import REASON_NAMES, Rejection
from workloads.request import Status

# (why, engine config, KV blocks, run_open's keywords, the prompt and output of the request it rejects)
ENGINE_REASONS = [
    (Rejection.TOO_LONG, EngineConfig(max_model_len=1024), 1000, {}, (1000, 100)),
    (Rejection.OVER_BUDGET, EngineConfig(chunked_prefill=False, rejects_prompt_over_budget=True,
                                         max_num_batched_tokens=512), 1000, {}, (600, 10)),
    (Rejection.OUTPUT_OVER_LIMIT, EngineConfig(kv_allocation="contiguous", prefix_cache=False, max_new_tokens=64),
     1000, {}, (100, 65)),
    (Rejection.EXCEEDS_KV, EngineConfig(), 10, {}, (200, 10)),
    (Rejection.OVER_CLASS_KV_CAP, EngineConfig(), 1000, {"kv_budgets": {"default": 5}}, (200, 10)),
    # the sliding-window groups' blocks: the prompt alone would fit the pool, not past the admission gate
    (Rejection.WINDOW_GATE, EngineConfig(), 20, {"windows": SlidingGroups(2, 16, 18, 18)}, (176, 4)),
]


@pytest.mark.parametrize("why, cfg, blocks, kw, shape", ENGINE_REASONS, ids=[r[0].name.lower() for r in ENGINE_REASONS])
def test_a_replica_stamps_why_it_can_never_serve_a_request_and_both_engines_agree(why, cfg, blocks, kw, shape):
    reqs = make_requests([0.0, 0.01, 0.02], [32, shape[0], 32], [8, shape[1], 8])
    fast, ref = (run_open(engine, reqs, cfg, blocks, **kw) for engine in ("fast", "reference"))
    assert compare_runs(fast, ref) == []
    served, refused, after = fast.requests
    assert refused.status == Status.REJECTED and refused.reject_reason is why
    assert served.status == after.status == Status.FINISHED
    assert served.reject_reason is None and after.reject_reason is None


def test_a_request_prefilled_elsewhere_is_not_held_to_the_prompt_budget():
    """A generation-only request (its prompt's KV handed over by a prefill pool) passes TensorRT-LLM's check."""
    cfg = EngineConfig(chunked_prefill=False, rejects_prompt_over_budget=True, max_num_batched_tokens=512)
    reqs = make_requests([0.0], [600], [10])
    reqs[0].preloaded = 599
    assert run_open("fast", reqs, cfg, 1000).requests[0].reject_reason is None


@pytest.mark.parametrize("limits, why", [((1, None), Rejection.QUEUE_FULL), ((None, 1e-9), Rejection.WAIT_TOO_LONG)])
def test_admission_control_stamps_the_limit_that_shed_a_request(limits, why):
    """A request arriving behind a queue its class's admission control bounds is shed with that bound's
    reason; one the replica could never serve anyway keeps the replica's reason, as no capacity would serve it."""
    reqs = make_requests([0.0, 0.0, 0.0, 0.0], [400, 400, 400, 5000], [50, 50, 50, 50])
    cfg = EngineConfig(max_model_len=4096, max_num_batched_tokens=256)
    runs = [run_open(engine, reqs, cfg, 1000, admission={"default": Admission(*limits)})
            for engine in ("fast", "reference")]
    assert compare_runs(*runs) == []
    out = runs[0].requests
    assert out[0].status == Status.FINISHED and out[0].reject_reason is None
    assert [r.reject_reason for r in out[1:3]] == [why, why]
    assert out[3].status == Status.REJECTED and out[3].reject_reason is Rejection.TOO_LONG
    assert runs[0].pool.rejected == 3       # the pool's own count of what its admission control shed


def test_the_per_request_table_names_each_reason_and_leaves_others_empty():
    reqs = make_requests([0.0, 0.01], [32, 200], [8, 10])
    out = run_open("fast", reqs, EngineConfig(), 10).requests
    table = request_table(out)
    assert table["reject_reason"].tolist() == ["", "exceeds_kv"]
    assert table["status"].tolist() == ["finished", "rejected"]
    assert REASON_NAMES == ("", *(r.name.lower() for r in Rejection))     # codes 1, 2... in order, 0: none


PD = """\
name: pd-reasons
workload:
  arrival: {type: poisson, rate_per_s: 4}
  duration_s: 10
  input_tokens: {dist: lognormal, mean: 3000, std: 3000}
  output_tokens: {dist: fixed, value: 20}
classes: [{name: chat, pool: main}]
pools:
  - name: main
    model: llama-3.1-8b
    gpu: h100-sxm
    disaggregation: {decode_pool: gen}
    engine: {max_model_len: 65536}
  - name: gen
    model: llama-3.1-8b
    gpu: h100-sxm
    engine: {max_model_len: 4096}
"""


def test_a_disaggregated_request_carries_the_reason_its_decode_leg_was_refused(tmp_path):
    """The prefill pool takes the long prompts; the decode pool, serving at most 4,096 tokens, refuses them:
    the client's request is recorded under the prefill pool with the decode pool's reason, and the load
    verdict counts it as too long (the client's error), not as load shed."""
    from simulator.runner import simulate

    p = tmp_path / "pd.yaml"
    p.write_text(PD)
    out = simulate(p)
    long = [r for r in out.requests if r.input_tokens + r.output_tokens > 4096]
    assert long and all(r.status == Status.REJECTED and r.reject_reason is Rejection.TOO_LONG for r in long)
    assert all(r.pool == "main" for r in long)
    assert all(r.reject_reason is None for r in out.requests if r.status != Status.REJECTED)
    load = out.results["llmsim"]["load"]
    assert load["too_long"] == len(long) and load["shed"] == 0


@pytest.mark.parametrize("cfg", [EngineConfig(), EngineConfig(kv_admission="expected_output")], ids=["vllm", "sglang"])
def test_a_request_past_the_whole_pool_exceeds_the_kv_whatever_its_class_cap(cfg):
    """A class's KV cap is a fraction of the pool, so a request the whole pool cannot hold passes it too;
    no kv_budget_fraction would serve it, more KV would: its reason is exceeds_kv, on every admission
    rule (SGLang's retraction check had said so already, vLLM's said over_class_kv_cap). One that fits the
    pool but not its class's share is over_class_kv_cap."""
    reqs = make_requests([0.0, 0.01], [200, 100], [10, 10])
    runs = [run_open(engine, reqs, cfg, 10, kv_budgets={"default": 5}) for engine in ("fast", "reference")]
    assert compare_runs(*runs) == []
    assert [r.reject_reason for r in runs[0].requests] == [Rejection.EXCEEDS_KV, Rejection.OVER_CLASS_KV_CAP]
