"""Each stack's own MoE experts: TensorRT-LLM's on H200 are priced from its own kernel rows
(``calibration.stacks.trtllm.moe`` / ``moe_ep``), vLLM's keep the profile's, and an override
replaces only the expert-parallel regime it was fitted on."""
from __future__ import annotations

import pandas as pd
import pytest

from simulator.calibration import moe_routing, moe_stacks, stacks
from simulator.calibration.moe_mla import predict_priced
from simulator.profiles import load_hardware
from simulator.profiles.hardware import Calibration, MoeParams

# Measured TensorRT-LLM 1.3.0rc20 rows of kernels/moe_more.csv.gz (src A051): h200_sxm,
# moe_torch_flow_cutlass (its default CUTLASS backend), per-tensor fp8, hidden 4096, expert width
# 1536, 128 experts, top-8, moe_tp 1, balanced router: (moe_ep, num_tokens, latency_ms).
TRTLLM_H200_FP8 = ((1, 16, 0.59019), (1, 1024, 0.75815), (8, 16, 0.10059), (8, 1024, 0.13431))


def _row(ep: int, tokens: int) -> pd.DataFrame:
    """One kernel row as the calibration annotates it (rank 0's routing)."""
    return moe_routing.annotate(pd.DataFrame([dict(
        profile="h200", moe_dtype="fp8", hidden_size=4096, moe_intermediate_size=1536, num_experts=128, topk=8,
        moe_tp=1, moe_ep=ep, num_tokens=tokens, distribution="balanced", gated=True)]))


def _ms(kernels: str, ep: int, tokens: int) -> float:
    """The row as a replica on ``kernels``' stack prices it: its layout's parameter set."""
    return float(predict_priced(_row(ep, tokens), load_hardware("h200").for_kernels(kernels))[0]) * 1e3


@pytest.mark.parametrize("ep,tokens,measured_ms", TRTLLM_H200_FP8)
def test_trtllm_h200_fp8_moe_is_priced_near_its_measured_row(ep, tokens, measured_ms):
    assert _ms("trtllm", ep, tokens) == pytest.approx(measured_ms, rel=0.15)
    # vLLM's own per-tensor fp8 experts on Hopper are far slower (the profile's fit, 0.22x median ratio)
    assert _ms("vllm", ep, tokens) > 2.5 * measured_ms


def test_vllm_keeps_the_profiles_moe_and_sglang_keeps_what_it_does_not_override():
    gpu = load_hardware("h200")
    cal = gpu.calibration
    assert gpu.for_kernels("vllm").calibration.moe == cal.moe
    sg = gpu.for_kernels("sglang").calibration
    assert "fp8" not in cal.stacks["sglang"].moe and sg.moe_for("fp8", 8) == cal.moe_for("fp8", 8)
    assert sg.moe_for("fp8_block", 1) == cal.stacks["sglang"].moe["fp8_block"]
    over = cal.stacks["trtllm"]
    assert over.error["moe fp8"].median_ape < 10 and "moe fp8 × " in over.rule


def test_an_override_replaces_only_its_own_regime():
    a, b, c = (MoeParams(fixed_us=f) for f in (1.0, 2.0, 3.0))
    cal = Calibration(moe={"bf16": a, "fp8": a}, moe_ep={"fp8": b})
    spread_only = Calibration(**cal.with_moe({}, {"bf16": c}))
    assert (spread_only.moe_for("bf16", 1), spread_only.moe_for("bf16", 8)) == (a, c)
    single_only = Calibration(**cal.with_moe({"bf16": c, "fp8": c}, {}))
    assert (single_only.moe_for("bf16", 1), single_only.moe_for("bf16", 8)) == (c, a)   # ep > 1 kept vLLM's moe
    assert (single_only.moe_for("fp8", 1), single_only.moe_for("fp8", 8)) == (c, b)    # and vLLM's moe_ep


def test_each_shape_takes_the_first_kernel_of_the_stacks_default_order():
    rows = pd.DataFrame(dict(profile="b200", moe_dtype="bf16", hidden_size=[7168, 7168, 2688], moe_intermediate_size=[
        2048, 2048, 1856], num_experts=[256, 256, 128], topk=[8, 8, 6], kernel_source=[
        "sglang_fused_moe_triton", "sglang_flashinfer_trtllm_moe", "sglang_fused_moe_triton"]))
    kept = moe_stacks.default_kernel_rows(rows, "sglang")
    assert list(kept["kernel_source"]) == ["sglang_flashinfer_trtllm_moe", "sglang_fused_moe_triton"]


def test_a_stack_within_the_rule_gets_no_moe_comparison_flagged():
    gpu = load_hardware("h200")
    rows = pd.concat([_row(1, 1024), _row(8, 1024)], ignore_index=True)
    rows = rows.assign(regime=moe_stacks.regime(rows))
    rows["t_s"] = predict_priced(rows, gpu) * 1.05       # 5 % slower than the profile prices: within the rule
    got = stacks.compare_moe(rows, gpu, "sglang")
    assert [c.family for c in got] == ["moe fp8", "moe_ep fp8"] and not any(c.material for c in got)
    rows["t_s"] *= 1.5
    assert all(c.material for c in stacks.compare_moe(rows, gpu, "sglang"))
    assert stacks.compare_moe(rows.assign(moe_dtype="int4_wo"), gpu.model_copy(update={"calibration": gpu.calibration.model_copy(
        update={"moe": {}})}), "sglang") == []             # a format the profile does not calibrate
