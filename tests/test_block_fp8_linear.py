"""Linear layers of a block-scaled fp8 checkpoint run vLLM's block-fp8 kernels.

On vLLM, a checkpoint quantised in 128×128 weight blocks (DeepSeek, Qwen3-FP8,
MiniMax-M2) is served with fp8 weights through Fp8LinearMethod's block path:
a per-token-group activation quantisation and a block-scaled GEMM for every
linear layer it quantises (attention projections, dense and shared MLPs),
measured slower than the per-tensor fp8 kernel at decode sizes. Those layers
are priced with the measured block-fp8 linear fit (the one the MLA
projections of the same checkpoints use), never below the per-tensor fit.
"""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simulator.costmodel import CostModel
from simulator.costmodel.mla import format_linear_time
from simulator.profiles import load_hardware, load_model

PROPS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
GPUS = {name: load_hardware(name) for name in ("h100-sxm", "h200", "b200")}


def _minimax(shared_data):
    return load_model(str(shared_data / "models" / "moe" / "MiniMaxAI--MiniMax-M2.5.yaml"))


def test_block_fp8_checkpoint_prices_its_attention_projections_with_the_block_kernels(shared_data):
    """MiniMax-M2.5 (block fp8) on 4 B200 at a decode batch of 4: each
    attention projection costs what the block-fp8 fit says, above the
    per-tensor fit, and the step's linear time carries the difference over
    its 62 layers (about half a millisecond)."""
    cm = CostModel(_minimax(shared_data), GPUS["b200"], tp=4, weight_dtype="fp8", kernels="vllm",
                   async_scheduling=True)
    assert cm.block_linear is not None
    extra = 0.0
    for n, k in cm.ops.attn_gemms:
        per_tensor = cm._gemm(4, n, k, cm.w_bytes)
        block = format_linear_time(4, n, k, cm.gpu, cm.block_linear, "fp8_block")
        assert block > 1.5 * per_tensor
        assert cm.linear_gemm(4, n, k) == pytest.approx(block)
        extra += block - per_tensor
    cm.block_linear = None
    cm._token_cache.clear()
    plain = cm.linear_time(4)
    cm2 = CostModel(_minimax(shared_data), GPUS["b200"], tp=4, weight_dtype="fp8", kernels="vllm",
                    async_scheduling=True)
    assert cm2.linear_time(4) - plain == pytest.approx(cm2.layers * extra, rel=1e-9)
    assert cm2.layers * extra > 0.3e-3


@PROPS
@given(gpu=st.sampled_from(sorted(GPUS)), tokens=st.integers(1, 32768), tp=st.sampled_from([1, 2, 4, 8]))
def test_block_fp8_linear_is_never_faster_than_the_per_tensor_one(gpu, tokens, tp):
    cm = CostModel(load_model("qwen3-235b-a22b-fp8"), GPUS[gpu], tp, "fp8")
    assert cm.block_linear is not None
    for n, k in cm.layer_gemms:
        assert cm.linear_gemm(tokens, n, k) >= cm._gemm(tokens, n, k, cm.w_bytes)


@pytest.mark.parametrize("gpu", sorted(GPUS))
def test_per_tensor_fp8_and_16_bit_pools_keep_the_dense_fit(gpu):
    """fp8 from a 16-bit checkpoint is vLLM's online per-tensor fp8; a bf16
    pool of a block-fp8 model runs no fp8 kernel; the roofline has no fits;
    SGLang's and TensorRT-LLM's own block-fp8 GEMMs are not what the fit measured."""
    for cm in (CostModel(load_model("qwen3-235b-a22b"), GPUS[gpu], 4, "fp8"),
               CostModel(load_model("qwen3-235b-a22b-fp8"), GPUS[gpu], 4, "bf16"),
               CostModel(load_model("qwen3-235b-a22b-fp8"), GPUS[gpu], 4, "fp8", roofline=True),
               CostModel(load_model("llama-3.1-70b"), GPUS[gpu], 4, "fp8"),
               CostModel(load_model("qwen3-235b-a22b-fp8"), GPUS[gpu], 4, "fp8", kernels="sglang"),
               CostModel(load_model("qwen3-235b-a22b-fp8"), GPUS[gpu], 4, "fp8", kernels="trtllm")):
        assert cm.block_linear is None
        for n, k in cm.layer_gemms:
            assert cm.linear_gemm(4, n, k) == cm._gemm(4, n, k, cm.w_bytes)


@pytest.mark.parametrize("stack", ["vllm", "sglang", "trtllm"])
def test_an_mtp_draft_runs_its_targets_stack(stack):
    """DeepSeek-V3's MTP layer (block fp8 like its target) is priced with
    the block-fp8 fit exactly where the target is."""
    from simulator.costmodel.speculative import MTP, SpeculativeSpec, speculative_cost_model

    cm = CostModel(load_model("deepseek-v3"), GPUS["h200"], 8, "fp8", kernels=stack)
    spec = speculative_cost_model(cm, SpeculativeSpec(draft_model=MTP, k=1, acceptance_rate=0.85))
    assert (cm.block_linear is not None) == (stack == "vllm")
    assert (spec.draft.block_linear is not None) == (stack == "vllm")
