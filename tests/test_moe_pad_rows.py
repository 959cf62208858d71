"""FlashInfer's CUTLASS grouped GEMM on Hopper (per-tensor FP8 experts):
an expert's last, part-filled 128-row tile takes longer the emptier it is,
so its padding rows are priced above real ones (``MoeParams.pad_row_cost``)."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.calibration import moe_mla
from simulator.calibration.fit import space
from simulator.costmodel import moe as M
from simulator.profiles import load_hardware
from simulator.profiles.hardware import MoeParams

CUTLASS = "vllm_modeloptfp8moe_flashinfer_cutlass_flashinferexperts"
BLOCK = 128.0


def _params(pad: float) -> MoeParams:
    return MoeParams(eta_compute=0.6, eta_memory=0.35, sharpness=30.0, fixed_us=6.0, m_half=300.0,
                     row_padding=True, token_tiles=(128,), tile_n=16, pad_row_cost=pad)


def _time(pairs, rows, active, pad: float, hidden=4096, inter=14336, ep=1):
    gpu = load_hardware("h100-sxm")
    return float(M.rank_time(pairs * ep, pairs, active, hidden, inter, M.dtype_info("fp8"), M.peak_flops("fp8", gpu),
                             gpu.hbm_bandwidth, _params(pad), num_sms=gpu.num_sms, num_experts=8, tokens=pairs,
                             rows_local=rows, row_blocks=BLOCK, ep=ep))


@settings(max_examples=60, deadline=None)
@given(full=st.integers(1, 40), active=st.integers(1, 8), pad=st.floats(0.0, 50.0))
def test_full_tiles_pay_no_padding_cost(full, active, pad):
    """Experts whose pairs fill whole tiles have no padding rows: the term
    leaves them at the price of the form without it."""
    rows = float(full * active) * BLOCK
    assert _time(rows, rows, active, pad) == pytest.approx(_time(rows, rows, active, 0.0), rel=1e-12)


@settings(max_examples=60, deadline=None)
@given(tiles=st.integers(1, 40), active=st.integers(1, 8), empty=st.floats(1.0, 127.0),
       pad=st.floats(0.0, 20.0), more=st.floats(0.0, 20.0))
def test_padding_cost_grows_with_the_term(tiles, active, empty, pad, more):
    """A part-filled tile never gets cheaper as its padding rows cost more."""
    rows = float(tiles * active) * BLOCK
    pairs = rows - empty * active
    assert _time(pairs, rows, active, pad + more) >= _time(pairs, rows, active, pad) * (1.0 - 1e-12)


def test_emptier_last_tile_costs_more_compute():
    """With the memory roof out of the way (η_m = 1, sharp blend), one
    expert's single tile costs more the fewer real rows it holds."""
    gpu = load_hardware("h100-sxm")
    p = _params(4.0).model_copy(update=dict(eta_memory=1.0, sharpness=64.0))
    t = [float(M.rank_time(m, m, 1.0, 4096, 14336, M.dtype_info("fp8"), M.peak_flops("fp8", gpu), gpu.hbm_bandwidth,
                           p, num_sms=gpu.num_sms, num_experts=8, tokens=m, rows_local=BLOCK, row_blocks=BLOCK))
         for m in (1.0, 32.0, 96.0, 128.0)]
    assert t[0] > t[1] > t[2] > t[3]


def _rows(profile: str, fmt: str, source: str = CUTLASS) -> pd.DataFrame:
    return pd.DataFrame({"kernel_source": [source] * 2, "moe_dtype": [fmt] * 2, "profile": [profile] * 2,
                         "moe_ep": [1, 8], "hidden_size": [4096] * 2, "moe_intermediate_size": [14336] * 2,
                         "moe_tp": [1, 1]})


@pytest.mark.parametrize("profile, fmt, fitted", [
    ("h100-sxm", "fp8", True), ("h200", "fp8", True),
    ("h100-sxm", "fp8_block", False),   # DeepSeek block-scale runner, not the grouped GEMM
    ("b200", "fp8", False), ("b200", "bf16", False), ("b200", "nvfp4", False),   # SM100 tiles, 128 or 64 wide
])
def test_padding_term_fitted_for_hoppers_grouped_gemm_only(profile, fmt, fitted):
    assert ("pad_row_cost" in space("moe", _rows(profile, fmt)).names) is fitted
    trt = "vllm_modeloptfp8moe_flashinfer_trtllm_trtllmfp8experts"
    assert "pad_row_cost" not in space("moe", _rows(profile, fmt, trt)).names


@pytest.mark.parametrize("profile", ["h100-sxm", "h200"])
def test_shipped_hopper_fp8_blocks_price_padding_rows(profile):
    p = load_hardware(profile).calibration.moe["fp8"]
    assert p.row_padding and p.token_tiles == (128,) and p.tile_n == 16
    assert p.pad_row_cost > 0.0
    assert load_hardware(profile).calibration.moe_ep["fp8_block"].pad_row_cost == 0.0


@pytest.mark.slow     # a leave-one-shape-out refit: 9-18 s on two busy cores
@pytest.mark.shared_data
def test_hopper_fp8_balanced_rows_predicted_held_out(shared_data):
    """Leave-one-shape-out over H100's per-tensor FP8 rows (15 shapes, every
    other token count in the fits, refits started from the fit on all of
    them, as the benchmark does). The balanced router fills every expert of
    the rank alike, so whole batches sit on full or on part-filled tiles:
    measured 7.4 % / 18.3 % on those rows with the padding-row term, 9.9 % /
    29.9 % without it (all rows 6.3 % / 16.5 % against 7.4 % / 20.4 %)."""
    gpu = load_hardware("h100-sxm")
    rows = moe_mla.load(shared_data, {"h100-sxm": gpu}, moe_formats=("fp8",)).moe_rows("h100-sxm")
    rows = rows.reset_index(drop=True)
    fit = moe_mla.fit_moe(moe_mla.thin_tokens(rows, 2), gpu)
    err = moe_mla.leave_one_shape_out(rows, gpu, fit, stride=2)
    bal = (rows["distribution"] == "balanced").to_numpy()
    assert not np.isnan(err).any()
    assert np.median(err[bal]) <= 8.5 and np.percentile(err[bal], 90) <= 22.0
    assert np.median(err) <= 7.0 and np.percentile(err, 90) <= 18.0


@settings(max_examples=40, deadline=None)
@given(a=st.integers(1, 6000), b=st.integers(1, 6000), ep=st.sampled_from([1, 2, 8]))
def test_simulation_never_gets_cheaper_with_more_tokens(a, b, ep):
    """At a uniform router's fills the padded form dips as a batch fills the
    last tiles (Mixtral-8x7B on H100: 2.4 ms at 16 tokens, 1.7 ms at 384);
    the engine prices the running maximum, never below the form itself."""
    gpu = load_hardware("h100-sxm")
    p = gpu.calibration.moe["fp8"]
    shape = M.MoeShape(4096, 14336, 8, 2, ep=ep)
    env = M.RunningMaxLayerTime(shape, "fp8", gpu, p)
    lo, hi = sorted((a, b))
    assert env(lo) <= env(hi)
    assert env(hi) >= float(M.moe_layer_time(hi, shape, "fp8", gpu, p)) * (1.0 - 1e-12)
    raw = M.moe_layer_time(np.arange(1.0, 513.0), M.MoeShape(4096, 14336, 8, 2), "fp8", gpu, p)
    assert raw[383] < raw[15] * 0.8    # the dip the envelope removes
