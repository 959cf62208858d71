"""MoE routed-expert cost: routing statistics, monotonicity, the dense limit, dtypes, calibration."""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.costmodel import moe as M
from simulator.costmodel.components import gemm_time
from simulator.dtypes import QUANT_FORMATS
from simulator.errors import LlmsimError
from simulator.profiles import load_hardware
from simulator.profiles.hardware import Calibration, MoeParams

GPUS = {n: load_hardware(n) for n in ("h100-sxm", "h200", "b200")}

experts_topk = st.integers(1, 512).flatmap(lambda e: st.tuples(st.just(e), st.integers(1, min(e, 32))))
params = st.builds(
    MoeParams,
    eta_compute=st.floats(0.05, 1.0), eta_memory=st.floats(0.05, 1.0), sharpness=st.floats(1.0, 64.0),
    fixed_us=st.floats(0.0, 50.0), m_half=st.floats(0.0, 1000.0), pair_ns=st.floats(0.0, 20.0),
    pair_traffic=st.floats(0.0, 3.0), layer_fixed_us=st.floats(0.0, 50.0), tile_us=st.floats(0.0, 2.0),
    expert_us=st.floats(0.0, 20.0), token_traffic=st.floats(0.0, 10.0), unaligned_compute=st.floats(0.0, 10.0),
    unaligned_memory=st.floats(0.0, 10.0))


@given(experts_topk, st.integers(0, 100_000), st.integers(1, 100_000))
def test_expected_active_experts_monotone_and_saturating(ek, t, dt):
    e, k = ek
    a, b = M.expected_active_experts(t, e, k), M.expected_active_experts(t + dt, e, k)
    assert 0 <= a <= b <= e
    assert M.expected_active_experts(0, e, k) == 0
    assert M.expected_active_experts(1, e, k) == pytest.approx(k)   # one token touches exactly k
    assert M.expected_active_experts(10**7, e, k) == pytest.approx(e)


@given(experts_topk, st.sampled_from([1024, 4096, 7168]), st.sampled_from([256, 1536, 2048]),
       st.sampled_from(["bf16", "fp8", "fp8_block", "int4_wo", "w4a16_mxfp4", "nvfp4", "w4a8"]),
       st.sampled_from(list(GPUS)), params, st.sampled_from([1, 2, 4]), st.booleans())
@settings(max_examples=150, deadline=None)
def test_moe_time_monotone_in_tokens(ek, h, inter, dtype, gpu_name, p, tp, use_ep):
    e, k = ek
    ep = math.gcd(e, 8) if use_ep else 1
    gpu = GPUS[gpu_name]
    if dtype == "nvfp4" and not gpu.has_unit("fp4"):
        return
    shape = M.MoeShape(h, inter, e, k, moe_tp=tp, ep=ep)
    tokens = np.array([0, 1, 2, 3, 5, 8, 16, 31, 64, 100, 256, 1000, 4096, 16384, 65536])
    t = M.moe_layer_time(tokens, shape, dtype, gpu, p)
    assert t[0] == 0.0
    assert np.all(np.diff(t) >= -1e-15 * t[1:])
    # scalar path = array path (the engine calls it with ints)
    assert M.moe_layer_time(int(tokens[7]), shape, dtype, gpu, p) == pytest.approx(t[7], rel=1e-12)


@given(st.integers(1, 20_000), st.sampled_from([1024, 4096, 5120]), st.sampled_from([1024, 8192, 14336]),
       params, st.sampled_from(["bf16", "fp8"]), st.sampled_from(list(GPUS)))
@settings(max_examples=100, deadline=None)
def test_one_expert_top1_is_the_dense_gated_mlp(tokens, h, inter, p, dtype, gpu_name):
    """E = 1, k = 1, moe_tp = ep = 1 (widths multiples of 16, so the unaligned
    slowdowns, drawn non-zero, must not apply): the two grouped GEMMs are exactly the dense
    gated MLP's fused gate+up GEMM (n = 2·inter, k = hidden) and down GEMM
    (n = hidden, k = inter) under the same parameters; the MoE time exceeds
    them by exactly the routing terms, pair_ns·tokens + layer_fixed_us +
    pair_traffic·(activation bytes of the tokens)/(BW·η_m), and the two
    floors: tile_us per launched 64×64 tile over the SMs, expert_us for the one expert,
    and token_traffic (the same bytes as pair_traffic's input and output rows)."""
    gpu = GPUS[gpu_name]
    fmt = QUANT_FORMATS[dtype]
    peak = gpu.peak_flops(fmt.peak)
    dense = (gemm_time(tokens, 2 * inter, h, peak, gpu.hbm_bandwidth, p, fmt.weight_bytes, fmt.act_bytes)
             + gemm_time(tokens, h, inter, peak, gpu.hbm_bandwidth, p, fmt.weight_bytes, fmt.act_bytes))
    routing = (p.pair_ns * 1e-9 * tokens + p.layer_fixed_us * 1e-6
               + p.pair_traffic * tokens * 2.0 * (2 * h + 3 * inter) / (gpu.hbm_bandwidth * p.eta_memory)
               + p.tile_us * 1e-6 * min(tokens, tokens / 64 + 1) * (math.ceil(2 * inter / 64) + math.ceil(h / 64))
               / gpu.num_sms + p.expert_us * 1e-6
               + p.token_traffic * tokens * 2.0 * 2 * h / (gpu.hbm_bandwidth * p.eta_memory))
    t = M.moe_layer_time(tokens, M.MoeShape(h, inter, 1, 1), dtype, gpu, p)
    assert t == pytest.approx(dense + routing, rel=1e-12)
    no_routing = p.model_copy(update=dict(pair_ns=0.0, layer_fixed_us=0.0, pair_traffic=0.0, tile_us=0.0,
                                          expert_us=0.0, token_traffic=0.0))
    assert M.moe_layer_time(tokens, M.MoeShape(h, inter, 1, 1), dtype, gpu, no_routing) == pytest.approx(dense, rel=1e-12)


@given(st.integers(1, 20_000), st.integers(1, 64).map(lambda x: 64 * x), st.integers(16, 4096),
       st.sampled_from([1, 2, 4, 8, 32]), params, st.sampled_from(list(GPUS)))
@settings(max_examples=100, deadline=None)
def test_unaligned_slowdown_prices_only_unaligned_shards(tokens, h, inter_local, tp, p, gpu_name):
    """The narrow-load term changes a layer only when its shard's expert width
    is not a multiple of 16; there it never makes the layer cheaper, costs
    more as soon as a slowdown is on, and 0 (off) prices as before."""
    gpu = GPUS[gpu_name]
    shape = M.MoeShape(h, inter_local * tp, 128, 8, moe_tp=tp)
    off = p.model_copy(update=dict(unaligned_compute=0.0, unaligned_memory=0.0))
    t_on, t_off = (M.moe_layer_time(tokens, shape, "bf16", gpu, q) for q in (p, off))
    if inter_local % M.K_ALIGN == 0:
        assert t_on == t_off
        return
    assert t_on >= t_off * (1 - 1e-12)
    if p.unaligned_compute > 1e-3 and p.unaligned_memory > 1e-3:
        assert t_on > t_off
    assert M.moe_layer_time(tokens, shape, "bf16", gpu, off) == t_off


def test_unaligned_down_gemm_reads_whole_k_steps():
    """A 22-wide down shard on the narrow-load path costs its GEMM over 64
    columns of K at η/(1 + s); the aligned 16- and 32-wide shards around it
    are priced as they are."""
    gpu = GPUS["h100-sxm"]
    p = MoeParams(eta_compute=0.7, eta_memory=0.9, sharpness=4.0, unaligned_compute=3.0, unaligned_memory=1.0)
    slow = M.unaligned_params(p)
    assert slow.eta_compute == pytest.approx(0.7 / 4.0) and slow.eta_memory == pytest.approx(0.9 / 2.0)
    assert M.unaligned_params(MoeParams(eta_compute=0.7)) is None
    peak, bw = gpu.peak_flops("bf16"), gpu.hbm_bandwidth
    pairs, active = 512.0, 64.0
    t = M._grouped_gemm_time(pairs, active, 2816, 22, peak, bw, p, 2.0, 2.0)
    assert t == pytest.approx(active * gemm_time(pairs / active, 2816, 64, peak, bw, slow), rel=1e-12)
    for k in (16, 32):
        assert (M._grouped_gemm_time(pairs, active, 2816, k, peak, bw, p, 2.0, 2.0)
                == pytest.approx(active * gemm_time(pairs / active, 2816, k, peak, bw, p), rel=1e-12))


def test_unaligned_term_fitted_only_from_triton_rows():
    """The slowdown is a property of vLLM's Triton fused-MoE kernel: rows of
    other kernels, or aligned rows, leave it out of the fit (held at 0)."""
    import pandas as pd

    from simulator.calibration.fit import MOE_UNALIGNED, moe_unaligned_rows, space
    rows = pd.DataFrame(dict(hidden_size=[2816, 2816, 4096], moe_intermediate_size=[704, 704, 1536],
                             moe_tp=[8, 4, 8], kernel_source=["vllm_unquantizedfusedmoe_triton_tritonexperts"] * 3))
    assert list(moe_unaligned_rows(rows)) == [True, False, False]
    assert set(MOE_UNALIGNED) <= set(space("moe", rows).names)
    cutlass = rows.assign(kernel_source="vllm_modeloptfp8moe_flashinfer_cutlass_flashinferexperts")
    assert not moe_unaligned_rows(cutlass).any()
    assert not set(MOE_UNALIGNED) & set(space("moe", cutlass).names)
    built = space("moe", cutlass).build(np.array(space("moe", cutlass).start))
    assert built.unaligned_compute == built.unaligned_memory == 0.0


def test_ep_splits_the_work_of_a_large_batch():
    """With every expert busy, ep ranks each do ~1/ep of the expert GEMMs:
    the busiest rank's share of 131,072 pairs exceeds the mean by about 1 %."""
    gpu, p = GPUS["h100-sxm"], MoeParams(eta_compute=0.7, eta_memory=0.8)
    one = M.moe_layer_time(16384, M.MoeShape(7168, 2048, 256, 8), "fp8_block", gpu, p)
    eight = M.moe_layer_time(16384, M.MoeShape(7168, 2048, 256, 8, ep=8), "fp8_block", gpu, p)
    assert one / 8 < eight < one / 8 * 1.02


def test_tile_grid_spans_every_pair_and_expert():
    """The launched grid: a row of tiles per 64 pairs of the whole batch plus a
    padded row per expert (never more rows than pairs), in whole 64-column
    tiles — a 22-wide shard costs a full tile, and ep does not shrink it."""
    assert M.grid_tiles(8.0, 128, 44, 2816) == 8 * (1 + 44)             # few pairs: one row each
    assert M.grid_tiles(8192.0, 128, 44, 2816) == (128 + 128) * (1 + 44)
    gpu, p = GPUS["h100-sxm"], MoeParams(eta_compute=0.7, eta_memory=0.8, tile_us=1.0)
    grid = 1e-6 * M.grid_tiles(1024.0, 128, 16384, 5120) / gpu.num_sms
    for ep in (1, 128):
        shape = M.MoeShape(5120, 8192, 128, 1, ep=ep)
        extra = (M.moe_layer_time(1024, shape, "bf16", gpu, p)
                 - M.moe_layer_time(1024, shape, "bf16", gpu, p.model_copy(update=dict(tile_us=0.0))))
        assert extra == pytest.approx(grid, rel=1e-12)


def test_tile_floor_needs_the_sm_count():
    data = GPUS["h100-sxm"].model_dump()
    data["num_sms"] = None
    data["calibration"]["gemm"]["waves"] = False
    data["calibration"]["moe"]["bf16"]["tile_us"] = 0.1
    with pytest.raises(ValueError, match="moe.bf16.tile_us needs num_sms"):
        type(GPUS["h100-sxm"]).model_validate(data)


def test_unknown_dtype_refused_in_one_line():
    with pytest.raises(LlmsimError) as e:
        M.moe_layer_time(8, M.MoeShape(4096, 1024, 64, 4), "int3", GPUS["h100-sxm"], MoeParams())
    assert "\n" not in str(e.value) and "int3" in str(e.value) and "nvfp4" in str(e.value)
    with pytest.raises(LlmsimError, match="FP4"):
        M.moe_layer_time(8, M.MoeShape(4096, 1024, 64, 4), "nvfp4", GPUS["h100-sxm"], MoeParams())
    with pytest.raises(ValueError, match="unknown quantisation format"):
        Calibration(moe={"int3": MoeParams()})


def test_aliases_and_bytes():
    assert M.moe_dtype("bfloat16") == "bf16" and M.moe_dtype("w4a8_mxfp4_mxfp8") == "w4a8"
    assert QUANT_FORMATS["nvfp4"].weight_bytes == 0.5 + 1 / 16          # E2M1 + one E4M3 scale per 16
    assert QUANT_FORMATS["w4a16_mxfp4"].weight_bytes == 0.5 + 1 / 32    # E2M1 + one E8M0 scale per 32
    assert GPUS["b200"].peak_flops("fp4") == 9000e12


def test_bad_shape_refused():
    with pytest.raises(LlmsimError, match="ep=3"):
        M.MoeShape(4096, 1024, 64, 4, ep=3)
    with pytest.raises(LlmsimError, match="top-k"):
        M.MoeShape(4096, 1024, 4, 8)


# --- calibration on the measured rows (shared data) ---------------------------

@pytest.fixture(scope="module")
def h100_fp8_block(shared_data):
    from simulator.calibration import moe_mla
    data = moe_mla.load(shared_data, {"h100-sxm": GPUS["h100-sxm"]}, moe_formats=("fp8_block",))
    rows = data.moe_rows("h100-sxm")
    return rows[rows["moe_dtype"] == "fp8_block"].reset_index(drop=True)


@pytest.mark.shared_data
def test_moe_fit_reaches_its_in_sample_target_and_matches_the_profile(h100_fp8_block):
    """A fresh fit (as ``llmsim calibrate`` runs it) of H100 fp8_block MoE rows: median
    APE ≤ 10% on all rows, and the shipped profile's parameters give the same
    errors as its ``error:`` block says (stale profiles show up here)."""
    from simulator.calibration import moe_mla
    from simulator.calibration.fit import ape
    rows, gpu = h100_fp8_block, GPUS["h100-sxm"]
    fit = moe_mla.fit_moe(rows, gpu)
    e = ape(moe_mla.predict_moe(rows, gpu, fit.params), rows["t_s"].to_numpy())
    assert np.median(e) <= 10.0
    # as a replica prices them: the ep = 1 rows by `moe`, the expert-parallel ones by `moe_ep`
    shipped = moe_mla.predict_priced(rows, gpu)
    e_shipped = ape(shipped, rows["t_s"].to_numpy())
    assert np.median(e_shipped) == pytest.approx(gpu.calibration.error["moe fp8_block"].median_ape, abs=0.05)
    # physically: never faster than the pure roofline on the same rows
    roof = moe_mla.predict_moe(rows, gpu, MoeParams())
    assert np.all(shipped >= roof * (1 - 1e-12))


@pytest.mark.shared_data
def test_shipped_bf16_prices_unaligned_shards_of_the_triton_kernel(shared_data):
    """H100 bf16 rows whose shard width is not a multiple of 16 (2816/704 and
    2688/1856 at moe_tp ≥ 8, 2048/768 at moe_tp 32) ran 1.6–2.4× slower than
    the form without the narrow-load term: the shipped parameters bring their
    median error near the aligned rows', and switching the term off brings
    the miss back."""
    from simulator.calibration import moe_mla
    from simulator.calibration.fit import ape
    gpu = GPUS["h100-sxm"]
    rows = moe_mla.load(shared_data, {"h100-sxm": gpu}, moe_formats=("bf16",)).moe_rows("h100-sxm")
    rows = rows[rows["moe_dtype"] == "bf16"].reset_index(drop=True)
    mis = (rows["moe_intermediate_size"] // rows["moe_tp"]).to_numpy() % M.K_ALIGN != 0
    assert mis.sum() > 500
    shipped = gpu.calibration.moe["bf16"]
    assert shipped.unaligned_compute > 0 and shipped.unaligned_memory > 0
    t = rows["t_s"].to_numpy()
    e = ape(moe_mla.predict_moe(rows, gpu, shipped), t)
    assert np.median(e[mis]) <= 15.0
    off = shipped.model_copy(update=dict(unaligned_compute=0.0, unaligned_memory=0.0))
    e_off = ape(moe_mla.predict_moe(rows, gpu, off), t)
    assert np.median(e_off[mis]) >= 35.0
    assert np.array_equal(e_off[~mis], e[~mis])


def test_mxfp4_rows_are_the_kernel_its_checkpoint_runs():
    """w4a16_mxfp4 keeps only vLLM's gpt-oss MXFP4 method (the checkpoint
    llmsim reads as mxfp4); Marlin rows of a compressed-tensors MXFP4
    checkpoint go, and no other format loses a row."""
    import pandas as pd

    from simulator.calibration.moe_mla import checkpoint_kernel
    rows = pd.DataFrame(dict(
        moe_dtype=["w4a16_mxfp4", "w4a16_mxfp4", "w4a16_mxfp4", "int4_wo", "bf16"],
        kernel_source=["vllm_gptossmxfp4moe_triton_oaitritonmxfp4expertsmonolithic",
                       "vllm_gptossmxfp4moe_flashinfer_trtllm_mxfp4_bf16_trtllmmxfp4expertsmonolithic",
                       "vllm_compressedtensorsw4a4mxfp4moe_marlin_marlinexperts_situ_as_silu",
                       "vllm_compressedtensorswna16marlinmoe_marlin_marlinexperts",
                       "vllm_unquantizedfusedmoe_triton_tritonexperts"]))
    assert list(checkpoint_kernel(rows)) == [True, True, False, True, True]


@pytest.mark.shared_data
@pytest.mark.parametrize("gpu_name", ["h100-sxm", "h200"])
def test_shipped_mxfp4_prices_the_gpt_oss_kernel(shared_data, gpu_name):
    """The shipped w4a16_mxfp4 parameters are those of gpt-oss's own kernel:
    they reproduce the profile's error block on exactly its rows (no Marlin
    row among them), with a median within 15%."""
    from simulator.calibration import moe_mla
    from simulator.calibration.fit import ape
    gpu = GPUS[gpu_name]
    rows = moe_mla.load(shared_data, {gpu_name: gpu}, moe_formats=("w4a16_mxfp4",)).moe_rows(gpu_name)
    rows = rows[rows["moe_dtype"] == "w4a16_mxfp4"].reset_index(drop=True)
    assert rows["kernel_source"].str.startswith("vllm_gptossmxfp4moe_").all()
    assert set(rows["hidden_size"]) == {2880}
    e = ape(moe_mla.predict_moe(rows, gpu, gpu.calibration.moe["w4a16_mxfp4"]), rows["t_s"].to_numpy())
    assert np.median(e) <= 15.0
    assert np.median(e) == pytest.approx(gpu.calibration.error["moe w4a16_mxfp4"].median_ape, abs=0.05)


# --- activation and kernel family of the measured rows -------------------------

@given(st.integers(1, 8192), st.sampled_from([1024, 2688, 4096]), st.sampled_from([232, 464, 1856]), params,
       st.sampled_from(list(GPUS)))
@settings(max_examples=60, deadline=None)
def test_non_gated_rows_price_one_up_projection(tokens, h, inter_local, p, gpu_name):
    """A per-row ``gated`` array prices each row as the scalar call would, and
    a non-gated layer (one up projection) never costs more than a gated one."""
    gpu = GPUS[gpu_name]
    fmt = QUANT_FORMATS["bf16"]
    args = (float(tokens * 8), float(tokens * 8), float(min(tokens * 8, 128)), h, float(inter_local), fmt,
            gpu.peak_flops("bf16"), gpu.hbm_bandwidth, p)
    kw = dict(num_sms=gpu.num_sms, num_experts=128, tokens=float(tokens))
    both = M.rank_time(*(np.full(2, a) if isinstance(a, float) else a for a in args), gated=np.array([True, False]),
                       **{**kw, "tokens": np.full(2, float(tokens))})
    gated, plain = M.rank_time(*args, gated=True, **kw), M.rank_time(*args, gated=False, **kw)
    assert both[0] == pytest.approx(gated, rel=1e-12) and both[1] == pytest.approx(plain, rel=1e-12)
    assert plain <= gated * (1 + 1e-12)


@given(st.integers(1, 8192), st.integers(1, 40).map(lambda x: 16 * x), params, st.sampled_from(list(GPUS)))
@settings(max_examples=60, deadline=None)
def test_width_align_prices_the_shard_in_whole_blocks(tokens, inter_local, p, gpu_name):
    """With ``width_align`` the shard costs what the next multiple of it costs
    without: unchanged when it is a multiple, never cheaper otherwise."""
    gpu = GPUS[gpu_name]
    aligned = p.model_copy(update=dict(width_align=128))
    padded = math.ceil(inter_local / 128) * 128
    shape, wide = (M.MoeShape(4096, w, 128, 8) for w in (inter_local, padded))
    t = M.moe_layer_time(tokens, shape, "bf16", gpu, aligned)
    assert t == pytest.approx(M.moe_layer_time(tokens, wide, "bf16", gpu, p), rel=1e-12)
    assert t >= M.moe_layer_time(tokens, shape, "bf16", gpu, p) * (1 - 1e-12)


def test_rows_carry_their_kernel_family_and_activation():
    """Kernel families come from ``kernel_source`` (an unknown one is refused);
    only rows that all ran FlashInfer's TRT-LLM kernels fit with its 128-wide
    blocks; Nemotron-H shapes are the non-gated ones."""
    import pandas as pd

    from simulator.calibration.fit import moe_kernel_constants, space
    from simulator.calibration.moe_mla import collector_gated, kernel_family
    src = ["vllm_unquantizedfusedmoe_flashinfer_trtllm_trtllmbf16experts",
           "vllm_unquantizedfusedmoe_flashinfer_cutlass_flashinferexperts",
           "vllm_fp8moe_triton_tritonexperts", "vllm_gptossmxfp4moe_triton_oaitritonmxfp4expertsmonolithic",
           "vllm_compressedtensorswna16marlinmoe_marlin_marlinexperts"]
    rows = pd.DataFrame(dict(kernel_source=src, hidden_size=[2688, 1024, 2048, 2880, 2688],
                             moe_intermediate_size=[1856, 2688, 5120, 2880, 1856], num_experts=[128, 512, 512, 32, 64],
                             topk=[6, 22, 22, 4, 6], moe_tp=[8, 1, 1, 1, 1]))
    assert list(kernel_family(rows)) == ["flashinfer_trtllm", "flashinfer_cutlass", "triton", "triton", "marlin"]
    with pytest.raises(LlmsimError, match="unknown kernel families"):
        kernel_family(rows.assign(kernel_source="vllm_somethingelse"))
    assert list(collector_gated(rows)) == [False, False, False, True, True]
    assert moe_kernel_constants(rows.iloc[:1]) == {"width_align": 128}
    assert moe_kernel_constants(rows) == {} and moe_kernel_constants(rows.iloc[:0]) == {}
    sp = space("moe", rows.iloc[:1])
    assert sp.build(np.array(sp.start)).width_align == 128
    assert space("moe", rows.iloc[1:2]).build(np.array(space("moe", rows.iloc[1:2]).start)).width_align == 1


@pytest.mark.shared_data
def test_measured_kernel_choices(shared_data):
    """What the table says vLLM chose: on B200 the FlashInfer CUTLASS fallback
    in bf16 only for the two models its TRT-LLM kernels refuse (Gemma-4's GELU,
    MiniMax-M3's biased sigmoid router with a routed scale); on Hopper
    block-FP8, Triton exactly without expert parallelism."""
    from simulator.calibration import moe_mla
    data = moe_mla.load(shared_data, {n: GPUS[n] for n in ("b200", "h100-sxm")}, moe_formats=("bf16", "fp8_block"))
    b = data.moe_rows("b200")
    b = b[b["moe_dtype"] == "bf16"]
    assert set(b.loc[b["kernel"] == "flashinfer_cutlass", "shape"]) == {"2816/704/128/8", "6144/3072/128/4"}
    assert set(b["kernel"]) == {"flashinfer_cutlass", "flashinfer_trtllm"}
    h = data.moe_rows("h100-sxm")
    h = h[h["moe_dtype"] == "fp8_block"]
    assert ((h["kernel"] == "triton") == (h["moe_ep"] == 1)).all()
