"""Pipeline parallelism (``pools[].pp``): the bubble's directions, the memory
and GPU-count invariants, refusals, and the two engines agreeing.

The directions a PP bubble implies, each held by a test named after it:
a request alone walks every stage in turn, so pp = 2 raises its TTFT and
TPOT over pp = 1 on one stage's GPUs (same per-stage TP, half the GPUs) by
the hand-offs; at load the replica runs pp micro-batches at once, so its
decode throughput rises with the batches in flight, and with more stages
than micro-batches a round only grows.
"""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from helpers_engine import compare_runs, describe, engine_configs, capacities, make_requests, \
    run_closed, run_open, workloads
from simulator.costmodel import CostModel
from simulator.errors import LlmsimError
from simulator.costmodel.pipeline import PipelineCostModel
from simulator.fleet.setup import setup_pool
from simulator.memory import plan_memory
from simulator.pipeline import Pipeline, plan_pipeline_memory, stage_layers
from simulator.profiles import load_hardware, load_model
from simulator.scenario.schema import PoolSpec
from tests.test_bad_input import one_line_error, write_yaml
from tests.test_sweep import TINY

SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def _setup(pp: int, tp: int = 4, model: str = "llama-3.1-70b", gpu: str = "h100-sxm", **engine):
    """A vLLM pool scheduled in turn at every pp (a release before 0.14.0, whose
    single node and pipeline both run without async scheduling): the
    comparisons isolate the pipeline, not the scheduling mode; another backend runs its own
    profile's release."""
    engine = {"backend": "vllm", **engine}
    if engine["backend"] == "vllm":
        engine.setdefault("backend_version", "0.13.0")
    spec = PoolSpec(model=model, gpu=gpu, tp=tp, pp=pp, engine=engine)
    return setup_pool(spec, 0)


def _alone(pp: int, inp: int = 2000, out: int = 100):
    """One request on an idle replica: (TTFT, TPOT) in seconds."""
    ps = _setup(pp)
    r = run_open("fast", make_requests([0.0], [inp], [out]), ps.engine_config, ps.memory.num_blocks, cm=ps.cm)
    req = r.requests[0]
    return req.first_token - req.arrival, (req.finish - req.first_token) / (out - 1)


# --- the bubble ---------------------------------------------------------------------------------
def test_alone_pp2_raises_ttft_and_tpot_over_pp1_on_one_stages_gpus():
    """One request at low load: one micro-batch, so the second stage idles
    while the first works and back; the token pays both stages in sequence
    plus the hand-off, never less than pp = 1 on the same per-stage TP."""
    ttft1, tpot1 = _alone(1)
    ttft2, tpot2 = _alone(2)
    assert ttft2 > ttft1 and tpot2 > tpot1
    # ... and only by the hand-offs and the CPU: a lone token gains nothing from the second stage.
    assert ttft2 < 1.05 * ttft1 and tpot2 < 1.05 * tpot1


def test_decode_throughput_rises_with_batches_in_flight():
    """At load the pp micro-batches overlap: a round of B ≥ pp decodes walks
    B/pp tokens, so tokens per second rise with pp; with one sequence (one
    micro-batch, the bubble) the round only gets longer with more stages."""
    rounds = {pp: _setup(pp).cm for pp in (1, 2, 4)}

    def tok_s(pp: int, batch: int) -> float:
        return batch / rounds[pp].step_time((), batch, batch * 1500.0)

    for batch in (16, 64, 256):
        assert tok_s(1, batch) < tok_s(2, batch) < tok_s(4, batch)
    assert rounds[1].step_time((), 1, 1500.0) < rounds[2].step_time((), 1, 1500.0) < rounds[4].step_time((), 1, 1500.0)


def test_closed_loop_at_load_pp2_serves_more_tokens_per_second_at_lower_tpot():
    """Sixty-four users back to back: the pp = 2 replica decodes two
    micro-batches of half the batch at once, so its output rate is higher and
    each token waits one walk of half the batch (lower TPOT) than on pp = 1."""
    out = []
    for pp in (1, 2):
        ps = _setup(pp)
        r = run_closed("fast", 64, [500] * 192, [200] * 192, ps.engine_config, ps.memory.num_blocks, cm=ps.cm)
        span = max(q.finish for q in r.requests) - min(q.arrival for q in r.requests)
        tpot = sorted((q.finish - q.first_token) / 199 for q in r.requests)[len(r.requests) // 2]
        out.append((sum(q.output_tokens for q in r.requests) / span, tpot))
    (rate1, tpot1), (rate2, tpot2) = out
    assert rate2 > 1.15 * rate1
    assert tpot2 < tpot1


def test_a_prompt_chunk_runs_in_one_micro_batch():
    """A round holding one prompt and one decode fills two micro-batches, but
    the prompt cannot be halved: the round is at least the prompt's own walk.
    A prompt longer than the per-micro-batch budget is chunked over several."""
    cm = _setup(2, max_num_batched_tokens=2048).cm
    alone = cm.step_time([(1700, 0)])
    assert cm.step_time([(1700, 0)], 1, 500.0) >= alone
    assert cm.micro_batches([(1700, 0)], 1) == 2 and cm.micro_batches([(4096, 0)], 0) == 2
    assert cm.step_time([(4096, 0)]) < 2 * alone        # two 2,048-token chunks walk side by side


def test_sglang_with_mixed_chunks_runs_pp():
    ps = _setup(2, backend="sglang", mixed_prefill=True)
    assert ps.engine_config.max_num_batched_tokens == 2 * ps.spec.engine.max_num_batched_tokens
    assert not ps.engine_config.plans_ahead and not ps.engine_config.output_after_next_launch


def test_a_stage_boundary_between_nodes_crosses_the_scale_out_network():
    h100 = load_hardware("h100-sxm")
    m = load_model("llama-3.1-405b")
    assert Pipeline.of(m, h100, 8, 2).crossings() == 1        # two HGX nodes
    assert Pipeline.of(m, h100, 4, 2).crossings() == 0        # both stages in one node
    assert Pipeline.of(m, h100, 4, 4).crossings() == 1
    near = PipelineCostModel(CostModel(m, h100, 4), Pipeline.of(m, h100, 4, 2), 8192)
    far = PipelineCostModel(CostModel(m, h100, 8), Pipeline.of(m, h100, 8, 2), 8192)
    # The same activations per GPU slice over one 50 GB/s NIC instead of NVLink (450 GB/s).
    assert far.transfer_time(4096) > near.transfer_time(4096) / 2


def test_stages_across_nodes_without_a_scale_out_network_are_refused():
    with pytest.raises(LlmsimError, match="scale_out_gb_s") as e:
        _setup(2, tp=8, gpu="l40s")          # PCIe boxes of 8: the second stage is another box
    assert e.value.key_path == "pools[0].pp"
    assert _setup(2, tp=4, gpu="l40s").cm.pipe.crossings() == 0


# --- scheduling ahead (vLLM 0.16.0 and later) ----------------------------------------------------
def _vllm(version: str | None, pp: int = 2, tp: int = 8, model: str = "llama-3.1-405b", **engine):
    engine = {"backend": "vllm", **({"backend_version": version} if version else {}), **engine}
    return setup_pool(PoolSpec(model=model, gpu="h100-sxm", tp=tp, pp=pp, engine=engine), 0)


@pytest.mark.parametrize("version, ahead", [(None, True), ("0.19.0", True), ("0.16.0", True),
                                            ("nightly-20260301", True), ("0.15.0", False), ("0.14.1", False),
                                            ("0.13.0", False), ("nightly-20260125", False)])
def test_a_pipeline_schedules_ahead_from_the_vllm_release_that_does(version, ahead):
    """vLLM 0.16.0 puts every running request in every batch and overlaps
    the CPU; 0.15 runs async scheduling but holds a request until its token
    is back (priced as in turn); 0.14 and earlier turn async off with pp > 1."""
    ps = _vllm(version)
    assert ps.cm.describe()["pp_scheduling"] == ("ahead" if ahead else "in turn")
    assert ps.engine_config.plans_ahead is ahead
    budget = ps.spec.engine.max_num_batched_tokens
    assert ps.engine_config.max_num_batched_tokens == budget * (1 if ahead else 2)
    assert ps.cm.micro_batches((), 64) == (1 if ahead else 2)
    if not ahead:      # every in-turn release prices a round alike, async scheduling on (0.15) or off
        assert ps.cm.step_time((), 64, 64 * 2000.0) == _vllm("0.13.0").cm.step_time((), 64, 64 * 2000.0)


def test_vllm_015_runs_async_scheduling_with_pp_and_014_turns_it_off():
    assert _vllm("0.15.0").spec.engine.async_scheduling is True
    assert _vllm("0.14.1").spec.engine.async_scheduling is False      # vLLM 0.14's default with pp > 1
    one_node = PoolSpec(model="llama-3.1-405b", gpu="h200", tp=8, engine={"backend": "vllm", "backend_version": "0.14.1"})
    assert one_node.engine.async_scheduling is True                    # ... and on without a pipeline
    assert _vllm("0.15.0", async_scheduling=True).spec.engine.pp_async == "one_batch"    # asked for: vLLM takes it
    assert _vllm("0.15.0", async_scheduling=False).cm.describe()["pp_scheduling"] == "in turn"
    assert _vllm(None, async_scheduling=False).cm.describe()["pp_scheduling"] == "in turn"   # --no-async-scheduling


def test_a_request_alone_gets_faster_scheduled_ahead():
    """One request, one micro-batch either way: the walk is the same, and
    scheduled ahead the CPU time of the round hides behind it."""
    ahead, turn = _vllm(None).cm, _vllm("0.15.0").cm
    cpu = turn.overhead_s + turn.overhead_per_seq_s
    for chunks, batch, ctx in [((), 1, 2000.0), (((1500, 0),), 0, 0.0)]:
        assert turn.step_time(chunks, batch, ctx) - cpu < ahead.step_time(chunks, batch, ctx) \
            < turn.step_time(chunks, batch, ctx)


def test_at_load_the_in_turn_micro_batches_outrun_the_one_batch_ahead():
    """Scheduled ahead, a batch's decodes wait for the previous batch's tokens,
    so the stages no longer overlap: with long contexts, whose attention is
    most of a walk, pp micro-batches in turn decode faster per round."""
    ahead, turn = _vllm(None).cm, _vllm("0.15.0").cm
    batch = 320
    assert ahead.step_time((), batch, batch * 4000.0) > turn.step_time((), batch, batch * 4000.0)


@settings(max_examples=60, **SETTINGS)
@given(model=st.sampled_from(["llama-3-8b", "llama-3.1-70b", "qwen3-32b"]), tp=st.sampled_from([1, 2, 4, 8]),
       pp=st.integers(2, 4), ms=st.floats(0.0, 20.0), us=st.floats(0.0, 200.0), batch=st.integers(0, 256),
       ctx=st.floats(0.0, 8000.0), chunk=st.sampled_from([None, (512, 0), (3000, 1000), (20000, 0)]))
def test_scheduled_ahead_a_batch_costs_the_longer_of_its_walk_and_its_cpu_time(model, tp, pp, ms, us, batch,
                                                                             ctx, chunk):
    """The CPU prepares the next batch while this one walks the stages: the
    round lasts its walk or its CPU time, whichever is longer, never their
    sum (what the same batch costs scheduled in turn)."""
    m, g = load_model(model), load_hardware("h100-sxm")
    if m.num_attention_heads % tp or pp > m.num_hidden_layers:
        return
    chunks = () if chunk is None else (chunk,)
    if batch == 0 and not chunks:
        return

    def round_time(ms_: float, us_: float) -> float:
        stage = CostModel(m, g, tp, iteration_overhead_ms=ms_, iteration_us_per_seq=us_, async_scheduling=True)
        cm = PipelineCostModel(stage, Pipeline.of(m, g, tp, pp), 8192)
        return cm.step_time(chunks, batch, batch * ctx)

    walk = round_time(0.0, 0.0)
    cpu = ms * 1e-3 + us * 1e-6 * (batch + len(chunks))
    t = round_time(ms, us)
    assert max(walk, cpu) - 1e-12 <= t <= walk + cpu + 1e-12
    if batch and not chunks:       # the engines integrate decode runs through (a, b)
        stage = CostModel(m, g, tp, iteration_overhead_ms=ms, iteration_us_per_seq=us, async_scheduling=True)
        a, b = PipelineCostModel(stage, Pipeline.of(m, g, tp, pp), 8192).decode_coefficients(batch)
        assert t == pytest.approx(a + b * batch * ctx, rel=1e-9)


# --- layers, memory and GPUs --------------------------------------------------------------------
@given(layers=st.integers(1, 200), pp=st.integers(1, 16))
def test_stage_layers_partition_as_vllm(layers, pp):
    if pp > layers:
        return
    parts = stage_layers(layers, pp)
    assert sum(parts) == layers and len(parts) == pp
    assert max(parts) - min(parts) <= 1
    assert parts[-1] == layers // pp       # the last stage (LM head) never takes a remainder layer


DENSE = ["llama-3-8b", "llama-3.1-70b", "llama-3.1-405b", "qwen3-32b", "llama-2-13b"]


@settings(max_examples=60, **SETTINGS)
@given(model=st.sampled_from(DENSE), gpu=st.sampled_from(["h100-sxm", "h200", "a100-sxm-80gb"]),
       tp=st.sampled_from([1, 2, 4, 8]), pp=st.integers(1, 7), dtype=st.sampled_from(["bf16", "fp8"]),
       rule=st.sampled_from(["vllm", "sglang"]))
def test_kv_tokens_per_replica_never_fall_as_stages_are_added(model, gpu, tp, pp, dtype, rule):
    m, g = load_model(model), load_hardware(gpu)
    if m.num_attention_heads % tp or (dtype == "fp8" and gpu.startswith("a100")):
        return
    from simulator.kv_memory import KvMemory
    kw = dict(weight_dtype=dtype, max_num_batched_tokens=8192, max_num_seqs=256, kv_memory=KvMemory(rule=rule))

    def tokens(n: int) -> int:
        try:
            return plan_pipeline_memory(m, g, tp, n, **kw).kv_capacity_tokens
        except LlmsimError:    # does not fit
            return 0
    assert tokens(pp + 1) >= tokens(pp)


@pytest.mark.parametrize("model, tp", [("llama-3.1-70b", 4), ("llama-3-8b", 1), ("qwen3-32b", 2)])
def test_one_stage_sizes_the_kv_pool_as_the_plain_plan(model, tp):
    m, g = load_model(model), load_hardware("h100-sxm")
    a = plan_memory(m, g, tp, max_num_batched_tokens=8192, max_num_seqs=1024)
    b = plan_pipeline_memory(m, g, tp, 1, max_num_batched_tokens=8192, max_num_seqs=1024)
    assert (a.num_blocks, a.weights_bytes) == (b.num_blocks, pytest.approx(b.weights_bytes))


@settings(max_examples=30, **SETTINGS)
@given(model=st.sampled_from(["llama-3-8b", "llama-3.1-70b"]), tp=st.sampled_from([1, 2, 4, 8]),
       pp=st.integers(1, 4), replicas=st.integers(1, 3))
def test_a_replica_spans_tp_times_pp_gpus(model, tp, pp, replicas):
    spec = PoolSpec(model=model, gpu="h100-sxm", tp=tp, pp=pp, replicas=replicas, engine={"backend": "vllm"})
    try:
        ps = setup_pool(spec, 0)
    except LlmsimError:       # the model does not fit these GPUs
        return
    assert spec.gpus_per_replica == tp * pp == ps.cm.gpus
    assert spec.gpus_per_replica * replicas == tp * pp * replicas


def test_results_count_and_bill_every_stages_gpus(tmp_path, cli):
    sc = {**TINY, "workload": {**TINY["workload"], "num_requests": 30},
          "pools": [{**TINY["pools"][0], "tp": 2, "pp": 2, "replicas": 2, "engine": {"backend": "vllm"}}]}
    path = write_yaml(tmp_path / "pp.yaml", sc)
    # 30 requests: a load not judged
    r = cli("run", path, "--no-plots", "-o", tmp_path / "out", "--json", "--exit-zero")
    assert r.code == 0, r.err
    import json
    res = json.loads((tmp_path / "out" / "results.json").read_text())
    pool = res["llmsim"]["pools"]["chat"]
    assert res["llmsim"]["gpus"] == 8 and pool["gpus_per_replica"] == 4 and pool["stage_layers"] == [16, 16]
    assert pool["pp_scheduling"] == "ahead"          # backend: vllm is a current release
    assert res["completed"] == 30


# --- refusals -----------------------------------------------------------------------------------
BAD = [
    ({"pp": 0}, "pools[0].pp"),
    ({"pp": 33}, "exceeds the 32 decoder layers"),
    ({"pp": 2, "dp": 2}, "pools[0].dp"),
    ({"pp": 2, "speculative": {"draft_model": "llama-3.2-1b", "k": 3, "acceptance_rate": 0.7}}, "pools[0].speculative"),
    ({"pp": 2, "model": "qwen3-30b-a3b"}, "mixture-of-experts"),
    ({"pp": 2, "engine": {"backend": "trtllm"}}, "TensorRT-LLM"),
    ({"pp": 2, "engine": {"scheduler": "static"}}, "continuous batching with chunked prefill"),
    ({"pp": 2, "engine": {"kv_offload": {"host_gb": 10}}}, "pools[0].engine.kv_offload"),
    ({"pp": 2, "engine": {"backend": "sglang"}}, "pools[0].engine.mixed_prefill"),
    ({"pp": 2, "engine": {"num_scheduler_steps": 4, "chunked_prefill": False}}, "pools[0].pp"),
    # vLLM before 0.15.0 raises on --async-scheduling with pipeline_parallel_size > 1
    ({"pp": 2, "engine": {"backend": "vllm", "backend_version": "0.14.1", "async_scheduling": True}},
     "pools[0].engine.async_scheduling"),
    ({"pp": 2, "engine": {"async_scheduling": True}}, "pools[0].engine.async_scheduling"),
]


@pytest.mark.parametrize("change, fragment", BAD, ids=[str(c) for c, _ in BAD])
def test_bad_pp_is_refused_in_one_line(tmp_path, cli, change, fragment):
    pool = {**TINY["pools"][0], **change}
    path = write_yaml(tmp_path / "bad.yaml", {**TINY, "pools": [pool]})
    one_line_error(cli("run", path, "-o", tmp_path / "out"), "bad.yaml", fragment)
    assert not (tmp_path / "out").exists()


def test_pp_on_either_side_of_disaggregation_is_refused(tmp_path, cli):
    pools = [{"name": "prefill", "model": "llama-3-8b", "gpu": "h100-sxm", "pp": 2,
              "disaggregation": {"decode_pool": "decode"}},
             {"name": "decode", "model": "llama-3-8b", "gpu": "h100-sxm"}]
    path = write_yaml(tmp_path / "pd.yaml", {**TINY, "pools": pools, "classes": [{"name": "c", "pool": "prefill"}]})
    one_line_error(cli("run", path), "pd.yaml", "pools[0].disaggregation")
    pools[0]["pp"], pools[1]["pp"] = 1, 2
    path = write_yaml(tmp_path / "pd.yaml", {**TINY, "pools": pools, "classes": [{"name": "c", "pool": "prefill"}]})
    one_line_error(cli("run", path), "pd.yaml", "pools[1].pp")


# --- the engines agree --------------------------------------------------------------------------
@settings(max_examples=120, **SETTINGS)
@given(data=st.data())
def test_fast_and_reference_engines_agree_with_pp(data):
    reqs = data.draw(workloads(), label="requests")
    cfg = data.draw(engine_configs(scheduler="continuous", chunked=True, kv="paged"), label="cfg")
    pp = data.draw(st.integers(2, 4), label="pp")
    ahead = data.draw(st.booleans(), label="scheduled ahead")
    # As the pool runs it: in turn one round of pp micro-batches, each with the stack's budget; scheduled
    # ahead one batch of the budget, a new request joining the batch after next (fleet/setup.py).
    budget = cfg.max_num_batched_tokens
    cfg = cfg.model_copy(update={"max_num_batched_tokens": budget * (1 if ahead else pp), "schedule_ahead": ahead,
                                 "async_scheduling": ahead, "output_after_next_launch": False})
    m = load_model("llama-3-8b")
    stage = CostModel(m, load_hardware("h100-sxm"), 1, iteration_overhead_ms=2.0, iteration_us_per_seq=30.0,
                      async_scheduling=ahead)
    cm = PipelineCostModel(stage, Pipeline.of(m, stage.gpu, 1, pp), budget)
    nb = data.draw(capacities(reqs, cfg), label="num_blocks")
    fast = run_open("fast", reqs, cfg, nb, cm=cm)
    ref = run_open("reference", reqs, cfg, nb, cm=cm)
    problems = compare_runs(fast, ref)
    assert not problems, "\n".join(problems[:12]) + "\n" + describe(reqs, cfg, nb, pp=pp)
