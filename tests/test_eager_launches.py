"""An iteration run without a CUDA graph lasts at least its kernel launches."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.costmodel import CostModel
from simulator.costmodel.eager import launches_per_forward
from simulator.profiles import load_hardware, load_model
from simulator.profiles.backend import load_backend

H200 = "h200"


def _cm(model: str, us: float, graph: int = 0, **kw) -> CostModel:
    return CostModel(load_model(model), load_hardware(H200), eager_launch_us=us, graph_max_tokens=graph, **kw)


def test_deepseek_launches_more_kernels_per_layer_than_llama():
    ds, ll = load_model("deepseek-v3"), load_model("llama-3.1-70b")
    per_layer = {m.name: launches_per_forward(m, 8, 1, True) / m.num_hidden_layers for m in (ds, ll)}
    assert per_layer[ds.name] > 2 * per_layer[ll.name]
    # quantised activations, collectives and all-to-alls each add launches
    assert launches_per_forward(ll, 1, 1, True) > launches_per_forward(ll, 1, 1, False)
    assert launches_per_forward(ll, 2, 1, False) > launches_per_forward(ll, 1, 1, False)
    assert launches_per_forward(ds, 8, 8, True) > launches_per_forward(ds, 8, 1, True)


def test_a_short_prefill_of_a_deep_model_lasts_its_launches():
    cm = _cm("deepseek-v3", 100.0, tp=8, weight_dtype="fp8")
    free = _cm("deepseek-v3", 0.0, tp=8, weight_dtype="fp8")
    launches = 100e-6 * launches_per_forward(cm.model, 8, 1, True)
    short = [(64, 0)]
    assert free.step_time(short) < launches
    assert cm.step_time(short) == pytest.approx(launches + cm.overhead_s + cm.overhead_per_seq_s, rel=1e-9)
    # a long prefill's kernels outlast the launches: nothing changes
    long = [(16384, 0)]
    assert free.step_time(long) > launches
    assert cm.step_time(long) == free.step_time(long)
    # the breakdown shows the wait as overhead
    assert cm.step(short).total_s == pytest.approx(cm.step_time(short), rel=1e-9)


def test_decode_iterations_and_captured_prefills_replay_a_graph():
    cm, free = _cm("llama-3.1-70b", 1000.0, graph=512), _cm("llama-3.1-70b", 0.0, graph=512)
    assert cm.step_time((), 64, 64 * 2000.0) == free.step_time((), 64, 64 * 2000.0)
    assert cm.decode_coefficients(64) == free.decode_coefficients(64)
    assert cm.step_time([(200, 0)], 100, 100 * 2000.0) == free.step_time([(200, 0)], 100, 100 * 2000.0)
    assert cm.step_time([(600, 0)], 100, 100 * 2000.0) > free.step_time([(600, 0)], 100, 100 * 2000.0)


@settings(max_examples=40, deadline=None)
@given(us=st.floats(0.0, 300.0), more=st.floats(0.0, 300.0), new=st.integers(1, 20000),
       cached=st.integers(0, 20000), batch=st.integers(0, 256))
def test_the_floor_never_shortens_an_iteration_and_grows_with_the_launch_cost(us, more, new, cached, batch):
    chunks = [(new, cached)]
    ctx = batch * 1500.0
    free = _cm("qwen3-235b-a22b-fp8", 0.0, tp=4, weight_dtype="fp8")
    lo = _cm("qwen3-235b-a22b-fp8", us, tp=4, weight_dtype="fp8")
    hi = _cm("qwen3-235b-a22b-fp8", us + more, tp=4, weight_dtype="fp8")
    t0, t1, t2 = (c.step_time(chunks, batch, ctx) for c in (free, lo, hi))
    assert t0 <= t1 <= t2
    assert t1 <= max(t0, us * 1e-6 * launches_per_forward(lo.model, 4, 1, True) + lo.overhead_s
                     + lo.overhead_per_seq_s * (batch + 1)) + 1e-12


def test_each_stack_profile_sets_its_launch_cost_and_vllm_its_graphs():
    gpu = load_hardware(H200)
    for stack in ("vllm", "sglang", "trtllm"):
        keys = load_backend(stack).engine_defaults(gpu)
        assert 0.0 <= keys["eager_launch_us"] <= 1000.0
    assert load_backend("vllm").engine_defaults(gpu)["graph_max_tokens"] == 512
    assert load_backend("sglang").engine_defaults(gpu).get("graph_max_tokens", 0) == 0


def test_a_pipeline_round_waits_out_its_busiest_stage_launches():
    """Each stage's CPU launches its own layers: an eager round of m micro-batches lasts at least m
    times the busiest stage's share of the launches; decode rounds and captured ones are unchanged."""
    from simulator.costmodel.pipeline import PipelineCostModel
    from simulator.pipeline import Pipeline

    m, g = load_model("llama-3.1-70b"), load_hardware("h100-sxm")
    pipe = Pipeline.of(m, g, 4, 2)
    eager = PipelineCostModel(CostModel(m, g, 4, eager_launch_us=400.0, graph_max_tokens=512), pipe, 1024)
    free = PipelineCostModel(CostModel(m, g, 4, graph_max_tokens=512), pipe, 1024)
    stage = 400e-6 * launches_per_forward(m, 4, 1, False) * max(pipe.layers) / sum(pipe.layers)
    for chunks, mbs in (([(600, 0)], 1), ([(1000, 0), (1000, 0)], 2)):
        assert free.step_time(chunks) < mbs * stage
        assert eager.step_time(chunks) == pytest.approx(mbs * stage + eager.overhead_s + eager.overhead_per_seq_s
                                                        * len(chunks) / mbs, rel=1e-9)
    assert eager.step_time([(256, 0)]) == free.step_time([(256, 0)])      # within the captured graphs
    assert eager.decode_coefficients(64) == free.decode_coefficients(64)


def test_a_drafts_prefill_waits_out_its_own_launches():
    """A speculative pool's draft inherits the target's launch cost: its prefill past the captured
    graphs adds the draft's launches; its decode steps (graphs) are unchanged."""
    from simulator.costmodel.speculative import SpeculativeSpec, speculative_cost_model

    spec = SpeculativeSpec(draft_model="llama-3.2-1b", k=4, acceptance_rate=0.8)
    target = _cm("llama-3.1-8b", 60.0, graph=512, async_scheduling=True)
    scm = speculative_cost_model(target, spec)
    bare = speculative_cost_model(_cm("llama-3.1-8b", 0.0, graph=512, async_scheduling=True), spec)
    assert (scm.draft.eager_launch_us, scm.draft.graph_max_tokens) == (60.0, 512)
    floor = 60e-6 * launches_per_forward(scm.draft.model, 1, 1, False)
    assert scm.draft.step_time([(600, 0)]) >= floor * (1 - 1e-12) and floor > bare.draft.step_time([(600, 0)])
    assert scm.draft_time(8, 4096.0) == bare.draft_time(8, 4096.0)


def _sglang_graphs(model: str, gpu: str = H200, version: str | None = None, tp: int = 8, dp: int = 1,
                   role: str = "", speculative: bool | str = False, **engine) -> int:
    """The prefill graph tokens an SGLang pool's cost model runs with (engine_cost_model's)."""
    from simulator.engine.config import EngineConfig
    from simulator.fleet.setup import engine_cost_model
    from simulator.profiles.backend import apply_backend

    m = load_model(model)
    raw = {"backend": "sglang", "weight_dtype": m.served_weight_dtype(),
           **({"backend_version": version} if version else {}), **engine}
    e = EngineConfig(**apply_backend(raw, gpu, model=m))
    return engine_cost_model(m, load_hardware(gpu), tp, e, dp, speculative=speculative, role=role).graph_max_tokens


def test_sglang_prefill_graphs_follow_the_release_and_the_deployment():
    """SGLang replays a prefill as a piecewise CUDA graph up to its chunk (an MLA model to 2,048
    tokens, to min(8,192, chunk) from 0.5.23) from 0.5.10, where its release captures them for the
    deployment; before, and where it turns them off, every prefill runs eagerly."""
    assert _sglang_graphs("deepseek-v3", version="0.5.9") == 0            # opt-in before 0.5.10
    assert _sglang_graphs("qwen3-235b-a22b-fp8", version="0.5.6") == 0
    assert _sglang_graphs("deepseek-v3", version="0.5.12") == 2048        # MLA's cap
    assert _sglang_graphs("qwen3-235b-a22b-fp8", version="0.5.12") == 8192   # H200's chunk
    assert _sglang_graphs("deepseek-v3") == 8192                          # 0.5.23: min(8,192, chunk)
    assert _sglang_graphs("deepseek-v3", "b200") == 0                     # off on trtllm_mla (below)
    assert _sglang_graphs("qwen3-235b-a22b-fp8", "b200") == 16384
    assert _sglang_graphs("deepseek-v3", version="0.5.16") == 0           # the breakable backend refused MLA
    assert _sglang_graphs("qwen3-235b-a22b-fp8", version="0.5.12", tp=4, dp=2) == 0   # DP attention (tc_piecewise)
    assert _sglang_graphs("qwen3-235b-a22b-fp8", version="0.5.12", role="prefill") == 0   # disaggregated
    assert _sglang_graphs("qwen3-235b-a22b-fp8", role="decode") == 0     # a decode server runs no prefill
    assert _sglang_graphs("qwen3-235b-a22b-fp8", role="prefill") == 8192
    assert _sglang_graphs("qwen3-235b-a22b-fp8", version="0.5.10", speculative=True) == 0
    # a pool's own value stands; a fixed fraction does not turn the graphs off
    assert _sglang_graphs("qwen3-235b-a22b-fp8", graph_max_tokens=0) == 0
    assert _sglang_graphs("qwen3-235b-a22b-fp8", kv_memory={"fraction": 0.8}) == 8192
    assert _sglang_graphs("qwen3-235b-a22b-fp8", kv_memory={"max_tokens": 4000}) == 4000
    assert _sglang_graphs("qwen3-235b-a22b-fp8", kv_memory={"piecewise_cuda_graph": False}) == 0
    # other stacks: their profiles' own value
    from simulator.engine.config import EngineConfig
    from simulator.fleet.setup import engine_cost_model
    from simulator.profiles.backend import apply_backend

    m = load_model("qwen3-235b-a22b-fp8")
    for stack, graphs in (("vllm", 512), ("trtllm", 0)):
        e = EngineConfig(**apply_backend({"backend": stack, "weight_dtype": "fp8"}, H200, model=m))
        assert engine_cost_model(m, load_hardware(H200), 4, e).graph_max_tokens == graphs


@pytest.mark.parametrize("version,draft,graphs", [
    ("0.5.11", "mtp", 0), ("0.5.11", "draft", 0), ("0.5.12", "mtp", 0), ("0.5.12", True, 0),
    ("0.5.12", "draft", 8192), ("0.5.14", "mtp", 0), ("0.5.14", "draft", 8192), ("0.5.15.post1", "mtp", 8192),
    (None, "mtp", 8192), (None, "draft", 8192)])
def test_a_draft_sglang_graphs_cannot_serve_leaves_the_prefills_eager(version: str | None, draft: bool | str,
                                                                      graphs: int):
    """0.5.11-0.5.14 capture their torch.compile prefill graphs without the hidden states an EAGLE-style
    draft (EAGLE, NEXTN/MTP) asks of the target's prefill (0.5.11: a separate draft model too), so its
    prefills run eagerly beside one; the breakable graphs of 0.5.15 on carry them. The reserve for the
    graphs stays: SGLang still captures them."""
    from simulator.kv_memory import KvMemory
    from simulator.memory import plan_memory

    assert _sglang_graphs("qwen3-235b-a22b-fp8", version=version, speculative=draft) == graphs
    m, g = load_model("llama-3.1-8b"), load_hardware(H200)
    kv = KvMemory(rule="sglang", piecewise_cuda_graph=True, prefill_graphs_off=())
    pool = [plan_memory(m, g, 1, kv_memory=k, speculative=draft).kv_capacity_bytes
            for k in (kv, kv.model_copy(update={"prefill_graphs_eager_beside": ("eagle", "standalone")}))]
    assert pool[0] == pool[1]


def test_sglang_without_a_prefill_chunk_captures_no_prefill_graphs():
    """--chunked-prefill-size -1 (chunked_prefill: false) is the top of SGLang's piecewise prefill
    graphs but for an MLA model's (server_args.py piecewise_cuda_graph_max_tokens, memory_hook.py
    prefill max_bs): no size is captured, every prefill runs eagerly and the reserve holds nothing
    for them, as with the graphs off; an MLA model keeps its cap and its flat 1.5 GiB."""
    from simulator.fleet.setup import setup_pool
    from simulator.scenario.schema import PoolSpec

    def pool(model: str = "llama-3.1-8b", tp: int = 1, **engine):
        return setup_pool(PoolSpec.model_validate({"model": model, "gpu": H200, "tp": tp, "engine": {
            "backend": "sglang", "max_num_batched_tokens": 16384, **engine}}), 0)
    whole, chunked = pool(chunked_prefill=False), pool()
    off = pool(kv_memory={"piecewise_cuda_graph": False})
    assert (whole.cm.graph_max_tokens, chunked.cm.graph_max_tokens, off.cm.graph_max_tokens) == (0, 16384, 0)
    assert whole.memory.fraction == off.memory.fraction > chunked.memory.fraction
    mla = pool("deepseek-v3", 8, backend_version="0.5.18", chunked_prefill=False)
    assert mla.cm.graph_max_tokens == 2048
    assert mla.memory.fraction == pool("deepseek-v3", 8, backend_version="0.5.18").memory.fraction


def test_sglang_0_5_23_captures_no_mla_prefill_graphs_without_a_chunk():
    """0.5.23 caps an MLA model's prefill graphs at min(8,192, chunked_prefill_size)
    (arg_groups/memory_hook.py handle_gpu_memory_settings), so --chunked-prefill-size -1 captures
    no size, where 0.5.22 captured up to 2,048 whatever the chunk; reserve_for_graph_mb still adds
    MLA's 1.5 GiB for the backend left on, so the pool does not move."""
    from simulator.fleet.setup import setup_pool
    from simulator.scenario.schema import PoolSpec

    def pool(version: str, **engine):
        return setup_pool(PoolSpec.model_validate({"model": "deepseek-v3", "gpu": H200, "tp": 8, "engine": {
            "backend": "sglang", "backend_version": version, "max_num_batched_tokens": 16384, **engine}}), 0)
    whole, chunked = pool("0.5.23", chunked_prefill=False), pool("0.5.23")
    assert (whole.cm.graph_max_tokens, chunked.cm.graph_max_tokens) == (0, 8192)
    assert pool("0.5.22", chunked_prefill=False).cm.graph_max_tokens == 2048
    assert whole.memory.fraction == chunked.memory.fraction


@pytest.mark.parametrize("version,h200,b200", [
    (None, 8192, 0), ("0.5.22", 2048, 0), ("0.5.19", 2048, 0), ("0.5.18", 2048, 0), ("0.5.14", 2048, 2048)])
def test_sglang_drops_deepseek_v3s_prefill_graphs_on_trtllm_mla_after_reserving_for_them(version: str | None,
                                                                                          h200: int, b200: int):
    """From 0.5.18 SGLang turns the prefill CUDA graphs of DeepseekV3ForCausalLM off where it runs
    trtllm_mla, its default on compute capability 10.x (cuda_graph_hook.py
    disable_prefill_cuda_graph_for_deepseek_trtllm_mla), after handle_gpu_memory_settings reserved
    MLA's 1.5 GiB for them: a B200 replays none, and its pool is the one that keeps them, whatever
    the fraction; Hopper (fa3) keeps them, as 0.5.14 did on both."""
    from simulator.fleet.setup import setup_pool
    from simulator.scenario.schema import PoolSpec

    assert (_sglang_graphs("deepseek-v3", version=version), _sglang_graphs("deepseek-v3", "b200", version=version)) \
        == (h200, b200)

    def pool(**kv):
        return setup_pool(PoolSpec.model_validate({"model": "deepseek-v3", "gpu": "b200", "tp": 8, "engine": {
            "backend": "sglang", **({"backend_version": version} if version else {}), "kv_memory": kv}}), 0)
    for kv in ({}, {"fraction": 0.85}):
        dropped, kept = pool(**kv), pool(**kv, prefill_graphs_off_after_reserve=False)
        assert (dropped.cm.graph_max_tokens, kept.cm.graph_max_tokens > 0) == (b200, True)
        assert (dropped.memory.fraction, dropped.memory.num_blocks) == (kept.memory.fraction, kept.memory.num_blocks)
