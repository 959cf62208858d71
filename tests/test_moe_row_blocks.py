"""OpenAI's Triton ``matmul_ogs`` MoE kernels (gpt-oss's MXFP4 experts on
Hopper): each expert's rows padded to one row block per launch, waves of
tiles that upconvert their weights, and an expert-parallel path that routes
through extra kernels and gathers only the rank's pairs."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import binom

from simulator.calibration import moe_mla
from simulator.calibration.fit import ape, moe_kernel_constants, space
from simulator.calibration.moe_routing import padded_column
from simulator.costmodel import moe as M
from simulator.profiles import load_hardware
from simulator.profiles.hardware import MoeParams

OGS = "vllm_gptossmxfp4moe_triton_oaitritonmxfp4expertsmonolithic"
HOPPER = ("h100-sxm", "h200")


def test_row_block_follows_the_kernels_rule():
    """The next power of two of (every pair of the batch // the rank's
    experts), within 16..128 (make_default_opt_flags_nvidia)."""
    assert M.row_block(4, 128) == 16            # one token of top-4: under one pair per expert
    assert M.row_block(768 * 4, 128) == 32      # 24 pairs per expert
    assert M.row_block(1536 * 4, 128) == 64     # 48
    assert M.row_block(3072 * 4, 128) == 128    # 96
    assert M.row_block(16384 * 4, 128) == 128   # capped
    # ep 2: 64 local experts, remote pairs counted too: 128 expected, 64 real
    assert M.row_block(2048 * 4, 64) == 128


@settings(max_examples=50, deadline=None)
@given(pairs=st.integers(1, 10**6), extra=st.integers(0, 10**5), local=st.integers(1, 512))
def test_row_block_is_a_bounded_power_of_two_rising_with_the_batch(pairs, extra, local):
    b = float(M.row_block(pairs, local))
    assert M.ROW_BLOCK_MIN <= b <= M.ROW_BLOCK_MAX
    assert 2.0 ** round(np.log2(b)) == b
    assert M.row_block(pairs + extra, local) >= b


@settings(max_examples=50, deadline=None)
@given(counts=st.lists(st.integers(0, 600), min_size=1, max_size=40), block=st.sampled_from([16, 32, 64, 128]))
def test_padded_rows_are_whole_blocks_per_touched_expert(counts, block):
    c = np.array(counts)
    rows = M.padded_rows(c, block)
    assert rows % block == 0
    assert c.sum() <= rows < c.sum() + block * np.count_nonzero(c) + 1e-9
    assert M.padded_rows(np.append(c, 0), block) == rows   # an untouched expert adds nothing


@settings(max_examples=30, deadline=None)
@given(tokens=st.integers(1, 400), experts=st.sampled_from([8, 32, 128]), topk=st.sampled_from([1, 2, 4]),
       ep=st.sampled_from([1, 2, 8]), block=st.sampled_from([16, 32, 64, 128]))
def test_expected_padded_rows_is_the_binomial_expectation(tokens, experts, topk, ep, block):
    """Under a uniform router each local expert gets Binomial(tokens, k/E)
    pairs; the expectation of its padded rows summed over the rank's experts."""
    x = np.arange(tokens + 1)
    exact = (experts // ep) * block * float(np.dot(binom.pmf(x, tokens, topk / experts), np.ceil(x / block)))
    assert M.expected_padded_rows(tokens, experts, topk, ep, block) == pytest.approx(exact, rel=1e-9)
    arr = M.expected_padded_rows(np.array([float(tokens)]), experts, topk, ep, block)
    assert arr[0] == pytest.approx(exact, rel=1e-9)


def test_the_kernels_properties_are_set_not_fitted():
    rows = pd.DataFrame({"kernel_source": [OGS] * 4, "moe_ep": [1, 1, 2, 8], "hidden_size": [2880] * 4,
                         "moe_intermediate_size": [2880] * 4, "moe_tp": [1] * 4})
    assert moe_kernel_constants(rows) == dict(row_padding=True, width_align=64)
    sp = space("moe", rows)
    assert {"ep_routing_us", "local_pair_traffic"} <= set(sp.names)
    assert "ep_routing_us" not in space("moe", rows[rows["moe_ep"] == 1]).names   # nothing identifies it


def test_engine_prices_the_padding_a_uniform_router_leaves():
    """moe_layer_time with ``row_padding`` is rank_time at the expected
    padded rows and the kernel's row block (at ep > 1 the busiest rank's:
    its pairs and experts, the mean rank's padded rows scaled by its load);
    without padding set, the form is the grouped roofline it was."""
    gpu = load_hardware("h100-sxm")
    p = MoeParams(eta_compute=0.9, eta_memory=0.9, sharpness=2.0, fixed_us=5.0, m_half=50.0, layer_fixed_us=10.0,
                  width_align=64, row_padding=True, ep_routing_us=15.0, local_pair_traffic=1.0)
    fmt = M.dtype_info("w4a16_mxfp4")
    for ep in (1, 8):
        shape = M.MoeShape(2880, 2880, 128, 4, ep=ep)
        for tokens in (1, 100, 6144):
            pairs = tokens * 4.0
            block = M.row_block(pairs, 128 // ep)
            busy_pairs, busy_experts = M.busiest_rank_load(tokens, 128, 4, ep)
            rows = M.expected_padded_rows(tokens, 128, 4, ep, block) * busy_pairs / (pairs / ep)
            want = M.rank_time(pairs, busy_pairs, busy_experts, 2880, 2880,
                               fmt, M.peak_flops("w4a16_mxfp4", gpu), gpu.hbm_bandwidth, p, True, gpu.num_sms, 128,
                               tokens, rows, block, ep)
            assert M.moe_layer_time(tokens, shape, "w4a16_mxfp4", gpu, p) == pytest.approx(float(want), rel=1e-12)
    # The expert-parallel routing kernels are paid once a layer at ep > 1 only.
    one = M.moe_layer_time(64, M.MoeShape(2880, 2880, 128, 4), "w4a16_mxfp4", gpu, p)
    assert one == pytest.approx(M.moe_layer_time(64, M.MoeShape(2880, 2880, 128, 4), "w4a16_mxfp4", gpu,
                                                 p.model_copy(update=dict(ep_routing_us=0.0))), rel=1e-12)


@pytest.fixture(scope="module")
def ogs_rows(shared_data):
    """The gpt-oss MXFP4 rows of both Hopper GPUs (matmul_ogs), annotated."""
    gpus = {name: load_hardware(name) for name in HOPPER}
    data = moe_mla.load(shared_data, gpus, moe_formats=("w4a16_mxfp4",))
    return {name: data.moe_rows(name).reset_index(drop=True) for name in gpus}


@pytest.mark.shared_data
@pytest.mark.parametrize("gpu_name", HOPPER)
def test_balanced_rows_step_with_the_row_block(ogs_rows, gpu_name):
    """gpt-oss-120b at ep 1 under the balanced router (every expert gets the
    same pairs): 4096 tokens fill one 128-row block per expert, 6144 two
    (192 rows), 8192 two as well. The measured time steps with the blocks,
    not the pairs, and the annotation counts those blocks."""
    rows = ogs_rows[gpu_name]
    sel = rows[(rows["num_experts"] == 128) & (rows["moe_ep"] == 1) & (rows["moe_tp"] == 1)
               & (rows["distribution"] == "balanced")].set_index("num_tokens")
    assert (M.row_block(np.array([4096, 6144, 8192]) * 4, 128) == 128).all()
    assert sel.loc[[4096, 6144, 8192], padded_column(128)].tolist() == [128 * 128, 128 * 256, 128 * 256]
    t = sel["t_s"]
    assert t[6144] / t[4096] > 1.7
    assert t[8192] / t[6144] < 1.1


@pytest.mark.shared_data
@pytest.mark.parametrize("gpu_name", HOPPER)
def test_shipped_mxfp4_fit_prices_the_kernel(ogs_rows, gpu_name):
    """The shipped w4a16_mxfp4 block carries the kernel's properties and
    prices every measured row within 5 % median, 16 % p90."""
    gpu = load_hardware(gpu_name)
    p = gpu.calibration.moe["w4a16_mxfp4"]
    assert p.row_padding and p.width_align == 64 and p.ep_routing_us > 0 and p.local_pair_traffic > 0
    rows = ogs_rows[gpu_name]
    err = ape(moe_mla.predict_priced(rows, gpu), rows["t_s"].to_numpy())
    assert np.median(err) <= 5.0
    assert np.percentile(err, 90) <= 16.0


@pytest.mark.shared_data
@pytest.mark.parametrize("gpu_name", HOPPER)
def test_each_gpt_oss_shape_predicted_from_the_other(ogs_rows, gpu_name):
    """Leave-one-shape-out on the two gpt-oss shapes (every other token
    count in the fits): median ≤ 8 %, p90 ≤ 20 % for each shape held out,
    and ≤ 8 % median for the wide expert-parallel layouts (ep ≥ 16) from
    2048 tokens on. On H100, without the row blocks the form reads
    19 % / 52 %, without the expert-parallel routing kernels 9 % / 30 %,
    and with the pairs' traffic counted over the whole batch instead of the
    rank's pairs those wide layouts read 14 % median (3.8 % with it)."""
    gpu = load_hardware(gpu_name)
    rows = ogs_rows[gpu_name]
    err = moe_mla.leave_one_shape_out(rows, gpu, stride=2)
    assert not np.isnan(err).any()
    for shape in rows["shape"].unique():
        e = err[(rows["shape"] == shape).to_numpy()]
        assert np.median(e) <= 8.0, shape
        assert np.percentile(e, 90) <= 20.0, shape
    wide = ((rows["moe_ep"] >= 16) & (rows["num_tokens"] >= 2048)).to_numpy()
    assert np.median(err[wide]) <= 8.0
