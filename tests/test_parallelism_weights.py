"""The weights every GPU of a tensor-parallel group keeps whole (simulator/parallelism.py).

Shapes are written out from the models' config.json so that a change to
the accounting, not to the profile, is what these tests catch.
"""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simulator.dtypes import BYTES, linear_dtype
from simulator.errors import LlmsimError
from simulator.memory import plan_memory
from simulator.parallelism import Parallelism, replica_weight_bytes, tp_whole_weight_bytes, weight_bytes_per_gpu
from simulator.profiles import load_hardware, load_model

GB200 = load_hardware("gb200-nvl72")


def _split_evenly(m, par: Parallelism, wd: str) -> float:
    """One GPU's bytes if every non-expert weight were split tp ways."""
    experts = m.expert_weight_bytes(wd)
    return (m.weight_bytes(wd) - experts) / par.tp + experts / par.gpus


def test_deepseek_v3_keeps_its_down_projections_and_routers_whole_at_tp8():
    m, tp, wd = load_model("deepseek-v3"), 8, "fp8"
    # config.json: 61 layers (3 dense, 58 MoE), hidden 7168, q_lora_rank 1536,
    # kv_lora_rank 512, qk_rope_head_dim 64, 256 routed experts.
    down = 61 * 7168 * (1536 + 512 + 64)            # q_a_proj + kv_a_proj_with_mqa, fp8: 1 byte each
    norms = 61 * (1536 + 512) * 2.0                 # q_a_layernorm + kv_a_layernorm, bf16
    routers = 58 * 7168 * 256                       # gate, bf16 on every GPU; weight_bytes counts it fp8
    assert tp_whole_weight_bytes(m, tp, wd) == (down * 1.0 + norms + routers * 1.0, down * 1.0 + norms + routers * 2.0)
    rest, experts = weight_bytes_per_gpu(m, Parallelism(tp), wd)
    extra = down * (1 - 1 / tp) + norms * (1 - 1 / tp) + routers * (2.0 - 1.0 / tp)
    assert rest + experts - _split_evenly(m, Parallelism(tp), wd) == pytest.approx(extra, rel=1e-12)
    # The memory plan takes it from the KV pool, on each of the 8 GPUs.
    plan = plan_memory(m, GB200, tp=tp, weight_dtype=wd)
    assert plan.weights_bytes == pytest.approx(tp * (rest + experts), rel=1e-12)


def test_qwen3_235b_holds_one_kv_head_per_gpu_at_tp8():
    m, wd = load_model("qwen3-235b-a22b"), "bf16"
    # config.json: 94 layers, hidden 4096, 4 KV heads of 128, 128 experts (every layer MoE).
    kv = 94 * 2 * 4096 * 4 * 128 * 2.0             # K and V projections of all 4 heads
    routers = 94 * 4096 * 128 * 2.0
    counted, held = tp_whole_weight_bytes(m, 8, wd)
    assert counted == kv + routers
    assert held == kv / 4 + routers                 # one head's K and V, not an eighth of four
    # At tp 4 a GPU holds one head too: the K/V bytes do not shrink past tp = kv heads.
    assert tp_whole_weight_bytes(m, 4, wd)[1] == held
    assert tp_whole_weight_bytes(m, 2, wd)[1] == kv / 2 + routers
    rest, _ = weight_bytes_per_gpu(m, Parallelism(8), wd)
    assert rest - (m.weight_bytes(wd) - m.expert_weight_bytes(wd)) / 8 == pytest.approx(
        kv * (1 / 4 - 1 / 8) + routers * (1 - 1 / 8), rel=1e-12)


@pytest.mark.parametrize("name", ["llama-3.1-8b", "llama-3.1-70b"])
@pytest.mark.parametrize("wd", ["bf16", "fp8"])
def test_dense_llama_with_8_kv_heads_at_tp8_is_split_evenly(name, wd):
    m = load_model(name)
    assert m.kv_heads == 8
    for tp in (1, 2, 4, 8):
        rest, experts = weight_bytes_per_gpu(m, Parallelism(tp), wd)
        assert experts == 0
        assert rest == pytest.approx(m.weight_bytes(wd) / tp, rel=1e-15)
        assert replica_weight_bytes(m, Parallelism(tp), wd) == pytest.approx(m.weight_bytes(wd), rel=1e-15)


def _layouts(m) -> list[Parallelism]:
    out = []
    for tp in (1, 2, 4, 8):
        for dp in (1, 2, 4, 8):
            for ep in (1, 2, 4, 8, 16, 32, 64):
                par = Parallelism(tp, dp, ep)
                try:
                    par.check(m, GB200)
                except LlmsimError:
                    continue
                out.append(par)
    return out


def _served_total(m, wd: str) -> float:
    """The model's weights as a single GPU holds them: :meth:`weight_bytes`
    with the routers at the width the stacks keep them (16-bit, MiniMax-M2
    32-bit) rather than in the experts' format."""
    return m.weight_bytes(wd) + m.router_params * (m.router_weight_bytes - BYTES[linear_dtype(wd)])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(),
       name=st.sampled_from(["llama-3.1-8b", "llama-3.1-70b", "mixtral-8x7b", "qwen3-30b-a3b", "qwen3-235b-a22b",
                             "deepseek-v3", "gpt-oss-120b"]),
       wd=st.sampled_from(["bf16", "fp8", "nvfp4", "mxfp4"]))
def test_a_gpu_holds_at_least_its_share_and_at_most_the_model(data, name, wd):
    m = load_model(name)
    par = data.draw(st.sampled_from(_layouts(m)))
    rest, experts = weight_bytes_per_gpu(m, par, wd)
    per_gpu, total = rest + experts, _served_total(m, wd)
    assert per_gpu >= m.weight_bytes(wd) / par.gpus * (1 - 1e-12)
    assert per_gpu <= total * (1 + 1e-12)
    if wd == "bf16":                      # routers already 16-bit: the bound is the model card's total
        assert total == m.weight_bytes(wd)
    if par.gpus == 1:
        assert per_gpu == pytest.approx(total, rel=1e-12)
    assert replica_weight_bytes(m, par, wd) == pytest.approx(per_gpu * par.gpus, rel=1e-12)
