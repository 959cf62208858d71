"""Properties of the iteration-time function, over every built-in model and
GPU, valid TP degrees and dtypes.

Every property is checked against two kinds of parameters: each GPU's own
``calibration`` block as shipped (whatever ``llmsim calibrate`` last wrote,
or the pure roofline when there is none) and random synthetic calibrations
(finite sharpness, GEMM ramp, fixed and per-sequence costs, iteration
overhead), so the properties do not depend on today's fitted η values.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from simulator import CostModel, LlmsimError, load_hardware, load_model
from simulator.costmodel import components as C
from simulator.profiles import list_builtin
from simulator.profiles.hardware import AllReduceParams, Calibration, RooflineParams

MODELS = {n: load_model(n) for n in list_builtin("model_profiles")}
GPUS = {n: load_hardware(n) for n in list_builtin("hardware_profiles")}
FP8_GPUS = sorted(n for n, g in GPUS.items() if g.has_unit("fp8"))
WEIGHT_DTYPES = ["bf16", "fp16", "fp8", "int8", "int4"]
KV_DTYPES = ["bf16", "fp16", "fp8"]

# Floating-point slack for comparisons between sums taken in different
# orders (the quantities compared differ by far more than this whenever the
# property is violated).
REL = 1e-12

PROPS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def valid_tps(model_name: str, gpu_name: str) -> list[int]:
    m, g = MODELS[model_name], GPUS[gpu_name]
    return [tp for tp in (1, 2, 4, 8) if m.num_attention_heads % tp == 0 and tp <= g.interconnect.max_tp]


# --- strategies --------------------------------------------------------------

def _known(model_cls, fields: dict) -> dict:
    """Only the fields this version of the parameter class has: optional
    refinements (GEMM width ramps, vLLM's custom all-reduce) are exercised
    where they exist, and the strategies keep working where they do not."""
    return {k: v for k, v in fields.items() if k in model_cls.model_fields}


def roofline_params(max_eta: float = 1.0):
    return st.builds(RooflineParams, **_known(RooflineParams, dict(
        eta_compute=st.floats(0.05, max_eta),
        eta_memory=st.floats(0.05, max_eta),
        sharpness=st.one_of(st.just(math.inf), st.floats(1.0, 16.0)),
        fixed_us=st.floats(0.0, 50.0),
        m_half=st.floats(0.0, 512.0),
        n_half=st.one_of(st.just(0.0), st.floats(0.0, 4096.0)),
        k_half=st.one_of(st.just(0.0), st.floats(0.0, 4096.0)),
        n_half_memory=st.one_of(st.just(0.0), st.floats(0.0, 4096.0)),
        per_seq_us=st.floats(0.0, 5.0),
    )))


def allreduce_params(max_eta: float = 1.0):
    eta = st.floats(0.05, max_eta)
    return st.builds(AllReduceParams, **_known(AllReduceParams, dict(
        eta_bandwidth=eta,
        latency_us=st.floats(0.0, 50.0),
        eta_by_gpus=st.dictionaries(st.sampled_from([2, 4, 8]), eta, max_size=3),
        custom_max_bytes=st.one_of(st.just(0.0), st.floats(1e4, 1e8)),
        custom_eta_bandwidth=eta,
        custom_latency_us=st.floats(0.0, 50.0),
        oneshot_max_bytes=st.floats(0.0, 1e7),
    )))


def calibrations(max_eta: float = 1.0):
    """Synthetic calibrations. η ≤ max_eta (≤ 1 keeps them below the roofline)."""
    p = roofline_params(max_eta)
    return st.builds(
        Calibration,
        status=st.just("calibrated"),
        gemm=p, attention_prefill=p, attention_decode=p, other=p,
        allreduce=allreduce_params(max_eta),
        iteration_overhead_ms=st.floats(0.0, 5.0),
    )


@st.composite
def hardware(draw, gpus=None, max_eta: float = 1.0):
    """A built-in GPU with its own calibration or a synthetic one."""
    name = draw(st.sampled_from(gpus or sorted(GPUS)))
    gpu = GPUS[name]
    if draw(st.booleans()):
        gpu = gpu.model_copy(update={"calibration": draw(calibrations(max_eta))})
    return gpu


@st.composite
def setups(draw, gpus=None, weight_dtypes=WEIGHT_DTYPES, kv_dtypes=KV_DTYPES, max_eta: float = 1.0):
    """(model, gpu, tp, weight_dtype, kv_dtype) for a CostModel."""
    gpu = draw(hardware(gpus, max_eta))
    model_name = draw(st.sampled_from(sorted(MODELS)))
    tp = draw(st.sampled_from(valid_tps(model_name, gpu.name)))
    return (MODELS[model_name], gpu, tp, draw(st.sampled_from(weight_dtypes)), draw(st.sampled_from(kv_dtypes)))


def cost_models(**kw):
    return setups(**kw).map(lambda s: CostModel(*s))


tokens = st.integers(1, 16384)
contexts = st.integers(0, 131072)
batches = st.integers(1, 512)
chunk = st.tuples(st.integers(1, 8192), st.integers(0, 32768))


@st.composite
def iterations(draw):
    """A mixed iteration: prefill chunks (new, cached), a decode batch and
    its total context, and optionally an explicit number of sampled sequences."""
    chunks = draw(st.lists(chunk, max_size=3))
    batch = draw(st.integers(0 if chunks else 1, 512))
    ctx = float(batch * draw(st.integers(1, 32768))) if batch else 0.0
    sampling = draw(st.one_of(st.none(), st.integers(0, batch + len(chunks))))
    return chunks, batch, ctx, sampling


def ordered(strategy):
    return st.tuples(strategy, strategy).map(sorted)


def le(a: float, b: float) -> bool:
    return a <= b * (1 + REL) + 1e-18


# --- monotonicity ------------------------------------------------------------

def same_expert_tiles(cm, lo: int, hi: int) -> bool:
    """Whether a step of ``lo`` and one of ``hi`` tokens run the MoE layers' row-padding kernels at
    the same row block. The launcher picks its block from the pairs per expert it expects
    (:func:`simulator.costmodel.moe.row_block`: FlashInfer's TRT-LLM-gen token tiles, matmul_ogs'
    BLOCK_M), and a taller block wastes fewer per-tile costs: DeepSeek-V3 on a B200 computes 1,025
    tokens' experts faster than 1,000's (tile 32 against 16), as the real kernel does. Monotonicity
    is the property of one kernel configuration."""
    from simulator.costmodel.moe import row_block

    ops = cm.ops
    if ops is None or ops.moe is None or not getattr(ops.moe_params, "row_padding", False):
        return True
    tiles = ops.moe_params.token_tiles
    k, local = ops.moe.topk, ops.moe.local_experts
    return float(row_block(lo * k, local, tiles)) == float(row_block(hi * k, local, tiles))


@PROPS
@given(cm=cost_models(max_eta=1.5), p=ordered(tokens), cached=contexts, decode=st.integers(0, 64))
def test_nondecreasing_in_prefill_tokens(cm, p, cached, decode):
    lo, hi = p
    assume(same_expert_tiles(cm, lo + decode, hi + decode))
    ctx = decode * 2048.0
    assert le(cm.step_time([(lo, cached)], decode, ctx), cm.step_time([(hi, cached)], decode, ctx))


@PROPS
@given(cm=cost_models(max_eta=1.5), new=tokens, c=ordered(contexts))
def test_nondecreasing_in_prefill_context(cm, new, c):
    lo, hi = c
    assert le(cm.step_time([(new, lo)]), cm.step_time([(new, hi)]))


@PROPS
@given(cm=cost_models(max_eta=1.5), b=ordered(batches), per_seq=st.integers(1, 32768))
def test_nondecreasing_in_decode_batch(cm, b, per_seq):
    lo, hi = b
    assume(same_expert_tiles(cm, lo, hi))
    assert le(cm.step_time((), lo, lo * per_seq), cm.step_time((), hi, hi * per_seq))


@PROPS
@given(cm=cost_models(max_eta=1.5), batch=batches, s=ordered(st.integers(0, 4_000_000)))
def test_nondecreasing_in_decode_context(cm, batch, s):
    lo, hi = s
    assert le(cm.step_time((), batch, float(lo)), cm.step_time((), batch, float(hi)))


# --- calibrated vs the physical limit -----------------------------------------

@PROPS
@given(setup=setups(), it=iterations())
def test_calibrated_never_beats_roofline(setup, it):
    """The roofline (η = 1, hard max, no fixed costs) is the physical limit;
    a calibration with η ≤ 1 — the shipped ones included — only adds time."""
    cal = CostModel(*setup)
    roof = CostModel(*setup, roofline=True)
    chunks, batch, ctx, sampling = it
    assert le(roof.step_time(chunks, batch, ctx, sampling), cal.step_time(chunks, batch, ctx, sampling))


@pytest.mark.parametrize("gpu", sorted(GPUS))
def test_shipped_calibration_is_not_faster_than_roofline(gpu):
    """Spot check of the shipped profiles on the shapes the case studies use."""
    for model, tp in (("llama-3-8b", 1), ("llama-3-70b", 4), ("llama-3-70b", 8)):
        if tp not in valid_tps(model, gpu):
            continue
        cal = CostModel(MODELS[model], GPUS[gpu], tp)
        roof = CostModel(MODELS[model], GPUS[gpu], tp, roofline=True)
        for chunks, batch, ctx in (([(6000, 0)], 0, 0.0), ([(512, 4096)], 64, 64 * 2000.0),
                                   ((), 1, 1000.0), ((), 256, 256 * 3000.0)):
            assert le(roof.step_time(chunks, batch, ctx), cal.step_time(chunks, batch, ctx)), (model, tp, chunks, batch)


# --- tensor parallelism and quantisation ---------------------------------------

def _memory_bound(cm: CostModel, n: int, k: int, tokens: int) -> bool:
    """Whether the GEMM (``tokens`` × k · k × n) reads longer than it computes under ``cm``'s calibration."""
    compute, memory = C.gemm_roofs(tokens, n, k, cm.peak_linear, cm.hbm_bw, cm.cal.gemm, cm.w_bytes, cm.a_bytes,
                                   cm.gpu.num_sms)
    return memory > compute


@PROPS
@given(data=st.data(), tok=tokens)
def test_doubling_tp_never_increases_gemm_time(data, tok):
    model, gpu, _, wd, kd = data.draw(setups())
    tps = [tp for tp in valid_tps(model.name, gpu.name) if 2 * tp in valid_tps(model.name, gpu.name)]
    if not tps or model.is_moe:
        # Not a law for MoE layers: every GPU of the group still reads all
        # routed tokens' activations while its slice of a narrow expert gets
        # narrower (Qwen3-30B-A3B's 768-wide experts are 96 wide at tp 8),
        # so more tensor parallelism can slow them; expert parallelism is
        # the remedy (tests/test_moe_models.py).
        return
    tp = data.draw(st.sampled_from(tps))
    one, two = CostModel(model, gpu, tp, wd, kd), CostModel(model, gpu, 2 * tp, wd, kd)
    if any(_memory_bound(two, n, k, tok) for n, k in two.layer_gemms):
        # Not a law either: every GPU of the group reads the layer's whole
        # input, so a memory-bound GEMM's activation read does not shrink with
        # tp, while its narrower output streams less efficiently (n_half_memory).
        return
    sampling = data.draw(st.integers(0, min(tok, 512)))
    assert le(two.linear_time(tok), one.linear_time(tok))
    assert le(two.step((), tok, tok * 100.0, sampling).linear_s, one.step((), tok, tok * 100.0, sampling).linear_s)


@PROPS
@given(setup=setups(gpus=FP8_GPUS, weight_dtypes=["bf16"]), it=iterations())
def test_fp8_weights_never_slower_than_bf16(setup, it):
    """Dense models: one GEMM calibration per GPU, fp8 halves the bytes and
    doubles the peak. MoE experts run kernels measured per format, and the
    data shows fp8 expert kernels slower than bf16 at a few tokens on B200,
    so the property is not theirs to hold."""
    model, gpu, tp, _, kd = setup
    assume(not model.is_moe)
    bf16 = CostModel(model, gpu, tp, "bf16", kd)
    fp8 = CostModel(model, gpu, tp, "fp8", kd)
    chunks, batch, ctx, sampling = it
    assert le(fp8.step_time(chunks, batch, ctx, sampling), bf16.step_time(chunks, batch, ctx, sampling))
    assert le(fp8.step(chunks, batch, ctx, sampling).linear_s, bf16.step(chunks, batch, ctx, sampling).linear_s)


@pytest.mark.parametrize("tokens", [1, 8192])
def test_roofline_gemm_time_splits_evenly_over_tp(tokens):
    """On the pure roofline every per-layer GEMM and the LM head are sharded:
    both the weight-streaming (1 token) and the compute-bound (8192 tokens)
    linear time scale as 1/tp, to within the unsharded activations."""
    m, g = MODELS["llama-3-70b"], GPUS["h100-sxm"]
    base = CostModel(m, g, 1, roofline=True).linear_time(tokens)
    for tp in (2, 4, 8):
        assert CostModel(m, g, tp, roofline=True).linear_time(tokens) * tp == pytest.approx(base, rel=1e-3)


@pytest.mark.parametrize("name", sorted(GPUS))
def test_fp8_weights_run_on_the_fp8_unit_where_there_is_one(name):
    """Hopper, Ada and Blackwell have fp8 tensor cores at twice the bf16
    datasheet rate, so a compute-bound prefill's linear layers take about
    half the time with fp8 weights, times the profile's measured fp8 GEMM
    efficiency (1 where unmeasured), over the bf16 GEMMs' sustained-load
    rate (the fp8 efficiency is measured under load, the bf16 fit is not);
    Ampere has none (fp8 weights are dequantised to bf16), so they save no
    compute. Also what keeps the fp8 property above from running on no GPU
    at all."""
    gpu = GPUS[name]
    assert gpu.has_unit("fp8") == (not name.startswith("a100")), name
    model = MODELS["llama-3-8b"]
    ratio = CostModel(model, gpu, 1, "bf16").linear_time(8192) / CostModel(model, gpu, 1, "fp8").linear_time(8192)
    if gpu.has_unit("fp8"):
        expect = 2.0 * gpu.fp8_gemm_efficiency / gpu.calibration.gemm.sustained
        assert 0.9 * expect < ratio < 1.05 * expect, ratio
    else:
        assert ratio == pytest.approx(1.0, abs=0.01)


# --- the closed forms the engine relies on ------------------------------------

@PROPS
@given(cm=cost_models(max_eta=1.5), batch=batches, s=st.integers(0, 8_000_000))
def test_decode_coefficients_are_the_decode_step(cm, batch, s):
    a, b = cm.decode_coefficients(batch)
    assert a + b * s == pytest.approx(cm.step_time((), batch, float(s)), rel=REL, abs=0)


@PROPS
@given(cm=cost_models(max_eta=1.5), it=iterations())
def test_step_breakdown_matches_step_time(cm, it):
    chunks, batch, ctx, sampling = it
    b = cm.step(chunks, batch, ctx, sampling)
    assert b.total_s == pytest.approx(cm.step_time(chunks, batch, ctx, sampling), rel=REL, abs=0)
    parts = b.linear_s + b.attention_s + b.comm_s + b.other_s + b.overhead_s
    assert parts == pytest.approx(b.total_s, rel=REL, abs=0)
    assert min(b.linear_s, b.attention_s, b.comm_s, b.other_s, b.overhead_s) >= 0
    assert b.flops > 0 and b.bytes > 0 and b.bound in ("compute", "memory")
    if cm.tp == 1:
        assert b.comm_s == 0


@PROPS
@given(setup=setups(max_eta=1.5), its=st.lists(iterations(), min_size=1, max_size=6))
def test_memo_does_not_change_answers(setup, its):
    """A warm CostModel (memoised token-count components) answers exactly as
    a fresh one."""
    warm = CostModel(*setup)
    for it in its:
        warm.step_time(*it)
    for it in its:
        assert warm.step_time(*it) == CostModel(*setup).step_time(*it)


# --- examples -----------------------------------------------------------------

def test_empty_step_is_free():
    cm = CostModel(MODELS["llama-3-8b"], GPUS["h100-sxm"])
    assert cm.step_time() == 0.0
    assert cm.step().total_s == 0.0


def test_prefill_is_compute_bound_and_small_decode_memory_bound():
    cm = CostModel(MODELS["llama-3-8b"], GPUS["h100-sxm"])
    assert cm.step([(6000, 0)]).bound == "compute"
    assert cm.step((), 1, 1000.0).bound == "memory"


def test_roofline_decode_batch1_is_weight_streaming():
    """Batch-1 decode on the pure roofline is (almost) the weights read once
    at full HBM bandwidth: ≥ that time and within 5% of it."""
    m, g = MODELS["llama-3-8b"], GPUS["h100-sxm"]
    t = CostModel(m, g, roofline=True).step_time((), 1, 100.0)
    floor = m.weight_bytes("bf16") / g.hbm_bandwidth
    embed = m.embedding_params * 2 / g.hbm_bandwidth  # embeddings are gathered, not streamed
    assert floor - embed <= t <= floor * 1.05


@pytest.mark.parametrize("kwargs, match", [
    (dict(tp=3), "tp=3"),
    (dict(tp=16), "tp=16"),
    (dict(weight_dtype="fp4"), "weight dtype"),
    (dict(kv_dtype="int4"), "KV dtype"),
])
def test_bad_cost_model_arguments(kwargs, match):
    with pytest.raises(LlmsimError, match=match):
        CostModel(MODELS["llama-3-8b"], GPUS["h100-sxm"], **kwargs)


@PROPS
@given(p=allreduce_params(), msg=st.one_of(st.floats(0.0, 2e8), st.integers(0, 10**8).map(float)),
       gpus=st.sampled_from([1, 2, 4, 8]), bw=st.floats(1e10, 1e12))
def test_allreduce_on_a_float_is_the_array_formula_bit_for_bit(p, msg, gpus, bw):
    """The engine calls it on floats, through a path without numpy; a
    calibration fit calls it on arrays. Both must give the same time."""
    from simulator.costmodel.components import allreduce_time

    one = allreduce_time(msg, gpus, bw, p)
    many = allreduce_time(np.array([msg, p.custom_max_bytes, 0.0]), gpus, bw, p)
    assert isinstance(one, float)
    assert one == float(many[0])
    assert allreduce_time(p.custom_max_bytes, gpus, bw, p) == float(many[1])


# (weight dtype, efficiency field, GPUs with that tensor-core unit)
LOW_PRECISION = [("fp8", "fp8_gemm_efficiency", FP8_GPUS),
                 ("nvfp4", "fp4_gemm_efficiency", sorted(n for n, g in GPUS.items() if g.has_unit("fp4")))]


@PROPS
@given(case=st.sampled_from(LOW_PRECISION), data=st.data(), model=st.sampled_from(sorted(MODELS)),
       eff=st.floats(0.3, 1.0), tokens=st.integers(1, 16384))
def test_low_precision_gemm_efficiency_slows_only_its_linear_layers(case, data, model, eff, tokens):
    """A lower fp8 (fp4) efficiency never speeds anything up, leaves bf16 and
    KV-only costs alone, and prices fp8 (NVFP4) linear layers no faster than
    eff=1 does."""
    dtype, field, gpus = case
    gpu = data.draw(st.sampled_from(gpus))
    g1 = GPUS[gpu].model_copy(update={field: 1.0})
    ge = GPUS[gpu].model_copy(update={field: eff})
    m = MODELS[model]
    tp = valid_tps(model, gpu)[0]
    try:
        q1, qe = CostModel(m, g1, tp, dtype), CostModel(m, ge, tp, dtype)
    except LlmsimError:
        assume(False)
    assert qe.token_time(tokens) >= q1.token_time(tokens) * (1 - REL)
    assert qe.step_time([(tokens, 0)]) >= q1.step_time([(tokens, 0)]) * (1 - REL)
    assert CostModel(m, ge, tp, "bf16").step_time([(tokens, 0)]) == CostModel(m, g1, tp, "bf16").step_time([(tokens, 0)])
    assert qe.decode_coefficients(8)[1] == q1.decode_coefficients(8)[1]   # attention over the KV: unchanged


@pytest.mark.parametrize("dtype, field, gpu", [("fp8", "fp8_gemm_efficiency", "h100-sxm"),
                                               ("nvfp4", "fp4_gemm_efficiency", "b200")])
def test_low_precision_gemm_efficiency_scales_the_compute_bound_regime(dtype, field, gpu):
    """Far into the compute-bound regime an fp8 (NVFP4) GEMM takes 1/eff as long."""
    g = GPUS[gpu]
    m = MODELS["llama-3.1-70b"]
    t1 = CostModel(m, g.model_copy(update={field: 1.0}), 4, dtype).linear_time(32768)
    th = CostModel(m, g.model_copy(update={field: 0.5}), 4, dtype).linear_time(32768)
    assert 1.9 < th / t1 <= 2.0 + 1e-9


@pytest.mark.parametrize("name", ["b200", "gb200-nvl72"])
def test_nvfp4_dense_layers_run_at_the_fp4_efficiency_the_measured_nvfp4_gemms_give(name, kernel_tables):
    """The FP4 datasheet peak is 4× bf16; the profile's efficiency is the median
    of the stacks' fits on the measured compute-bound NVFP4 GEMMs, within 15 %
    median of each stack's rows, and brings a compute-bound NVFP4 prefill's
    linear layers to about 4 × eff of bf16's speed, well under 4×."""
    from simulator.calibration import data, quantised_gemm

    gpu = GPUS[name]
    kd = kernel_tables
    effs = []
    for stack in ("vllm", "sglang", "trtllm"):
        rows = kd.stack(stack, data.FP4_GEMM, name)
        effs.append(quantised_gemm.fit(rows, gpu, gpu.calibration.gemm, "fp4").efficiency)
        big = rows[quantised_gemm.compute_bound(rows)]
        pred = quantised_gemm.predict(big, gpu, gpu.calibration.gemm, gpu.fp4_gemm_efficiency, "fp4")
        assert np.median(np.abs(pred / big["t_s"].to_numpy() - 1)) < 0.15, stack
    assert gpu.fp4_gemm_efficiency == pytest.approx(float(np.median(effs)), abs=0.006)
    m = MODELS["llama-3.1-70b"]
    ratio = CostModel(m, gpu, 4, "bf16").linear_time(32768) / CostModel(m, gpu, 4, "nvfp4").linear_time(32768)
    assert 0.9 * 4 * gpu.fp4_gemm_efficiency < ratio < 1.05 * 4 * gpu.fp4_gemm_efficiency < 2.5, ratio
