"""The router GEMM of every MoE layer, and MiniMax-M2's departures from the plain block.

The measured MoE kernel rows start from given router logits, so the
router's own GEMM (hidden × experts) is priced beside them; MiniMax-M2 runs
it in fp32 and all-reduces its q/k RMSNorm statistics over TP ranks
(vLLM's minimax_m2.py).
"""
from __future__ import annotations

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simulator.costmodel import CostModel
from simulator.costmodel import components as C
from simulator.costmodel.layout import ROUTER_TILE_ROWS
from simulator.profiles import load_hardware, load_model

PROPS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
GPUS = {name: load_hardware(name) for name in ("h100-sxm", "h200", "b200")}
MOE = [("mixtral-8x7b", "bf16"), ("qwen3-235b-a22b", "fp8"), ("deepseek-v3", "fp8"), ("gpt-oss-120b", "mxfp4")]


def _minimax(shared_data):
    return load_model(str(shared_data / "models" / "moe" / "MiniMaxAI--MiniMax-M2.5.yaml"))


@PROPS
@given(case=st.sampled_from(MOE), gpu=st.sampled_from(sorted(GPUS)), tokens=st.integers(1, 20000))
def test_each_moe_layer_adds_one_router_gemm_over_its_ranks_tokens(case, gpu, tokens):
    name, wd = case
    if wd == "mxfp4" and gpu == "h100-sxm":
        gpu = "h200"
    cm = CostModel(load_model(name), GPUS[gpu], 8, wd, dp=2, ep=2) if name == "deepseek-v3" \
        else CostModel(load_model(name), GPUS[gpu], 2, wd)
    ops = cm.ops
    with_router = ops.linear_time(tokens)
    router = ops.router_time(ops.rank(tokens))
    assert router > 0
    ops.router = None
    assert with_router - ops.linear_time(tokens) == pytest.approx(ops.n_moe * router, rel=1e-9)


@PROPS
@given(case=st.sampled_from(MOE), gpu=st.sampled_from(sorted(GPUS)), t1=st.integers(1, 20000),
       t2=st.integers(1, 20000))
def test_router_time_never_falls_as_tokens_grow(case, gpu, t1, t2):
    name, wd = case
    if wd == "mxfp4" and gpu == "h100-sxm":
        gpu = "h200"
    ops = CostModel(load_model(name), GPUS[gpu], 1, wd).ops
    lo, hi = sorted((t1, t2))
    assert ops.router_time(lo) <= ops.router_time(hi)


def test_router_form_follows_measured_narrow_gemms(shared_data):
    """bf16 GEMMs as narrow as routers (n 128–512) with a hidden-sized k: the
    router's form stays within 20 % at the median on every GPU with rows,
    where the dense form (its width ramp alone) reads 2–5× too slow from a
    few thousand tokens on."""
    table = pd.read_csv(shared_data / "kernels" / "gemm_h200_b200.csv.gz")
    for system, name in (("b200_sxm", "b200"), ("h200_sxm", "h200")):
        g = GPUS[name]
        rows = table[(table.system == system) & (table.framework == "vllm") & (table.dtype == "bfloat16")
                     & table.n.isin([128, 256, 384, 512]) & table.k.between(2048, 8192)]
        assert len(rows) > 1000

        def t(m, n, k, ramp):
            return C.gemm_time(m, n, k, g.peak_flops("bf16"), g.hbm_bandwidth, g.calibration.gemm, 2.0, 2.0,
                               g.num_sms, ramp)

        router = [max(t(r.m, r.n, r.k, ROUTER_TILE_ROWS), t(min(r.m, ROUTER_TILE_ROWS), r.n, r.k, ROUTER_TILE_ROWS))
                  for r in rows.itertuples()]
        dense = [t(r.m, r.n, r.k, 0.0) for r in rows.itertuples()]
        err = (pd.Series(router) * 1e3 / rows.measured_time_ms.values - 1).abs()
        err_dense = (pd.Series(dense) * 1e3 / rows.measured_time_ms.values - 1).abs()
        assert err.median() < 0.2, name
        assert err.quantile(0.9) < err_dense.quantile(0.9) / 4, name


def test_minimax_m2_router_reads_fp32_weights(shared_data):
    m = _minimax(shared_data)
    twin = m.model_copy(update={"model_type": "mixtral"})
    assert m.router_weight_bytes == 4.0 and twin.router_weight_bytes == 2.0
    b200 = GPUS["b200"]
    fp32, bf16 = (CostModel(x, b200, 4, "fp8").ops.router_time(1) for x in (m, twin))
    extra = m.hidden_size * m.num_experts * 2.0 / b200.hbm_bandwidth
    assert fp32 - bf16 >= extra   # at least the weights' extra bytes at the full bandwidth


@pytest.mark.parametrize("tp", [1, 2, 4])
@pytest.mark.parametrize("tokens", [1, 64, 8192])
def test_minimax_m2_qk_norm_all_reduces_its_variances_over_tp(shared_data, tp, tokens):
    m = _minimax(shared_data)
    twin = m.model_copy(update={"model_type": "mixtral"})
    b200 = GPUS["b200"]
    a, b = CostModel(m, b200, tp, "fp8"), CostModel(twin, b200, tp, "fp8")
    extra = a.ops.comm_time(tokens) - b.ops.comm_time(tokens)
    if tp == 1:
        assert extra == 0.0
        return
    one = C.allreduce_time(tokens * 2 * 4.0, tp, a.group_bw(tp), a.cal.allreduce)
    assert extra == pytest.approx(m.num_hidden_layers * one, rel=1e-9)
    assert m.tp_qk_norm and not twin.tp_qk_norm
