"""TensorRT-LLM's MoE backend (``engine.moe_backend``): ``cutlass`` (the trtllm backend's default)
prices the stack's own expert kernels, ``trtllm`` the TRT-LLM-gen kernels with the Blackwell
profile's own (vLLM FlashInfer TRT-LLM) parameters; refused where the stack does not run it, where
no rows price it, and on any other stack."""
from __future__ import annotations

import pytest

from simulator.costmodel.step import CostModel
from simulator.engine.config import EngineConfig
from simulator.errors import LlmsimError
from simulator.profiles import load_hardware, load_model
from simulator.profiles.backend import load_backend


def _routed_ms(gpu: str, weight_dtype: str, kernels: str, moe_backend: str | None, tokens: int = 16) -> float:
    """DeepSeek-V3's routed experts, TP 8 × EP 8, for ``tokens`` tokens."""
    cm = CostModel(load_model("deepseek-v3"), load_hardware(gpu), 8, weight_dtype, "fp8", ep=8, kernels=kernels,
                   moe_backend=moe_backend)
    return cm.ops.routed_time(tokens) * 1e3


@pytest.mark.parametrize("weight_dtype", ["fp8", "nvfp4"])
def test_trtllm_prices_the_profiles_own_kernels_and_cutlass_the_stacks(weight_dtype):
    trtllm = _routed_ms("b200", weight_dtype, "trtllm", "trtllm")
    cutlass = _routed_ms("b200", weight_dtype, "trtllm", "cutlass")
    assert trtllm == pytest.approx(_routed_ms("b200", weight_dtype, "vllm", None), rel=1e-12)
    assert cutlass == _routed_ms("b200", weight_dtype, "trtllm", None)   # the default unchanged
    assert abs(cutlass / trtllm - 1) > 0.1   # a decode batch: 1.15x (fp8_block), 1.32x (nvfp4)


def test_the_trtllm_backend_defaults_to_cutlass():
    assert load_backend("trtllm").engine["moe_backend"] == "cutlass"


def test_formats_trtllm_gen_does_not_take_keep_cutlass():
    # create_moe.py get_moe_cls: TRTLLM with bf16 or per-tensor fp8 experts runs CutlassFusedMoE
    gpu = load_hardware("b200")
    own, gen = gpu.for_kernels("trtllm", "cutlass").calibration, gpu.for_kernels("trtllm", "trtllm").calibration
    assert gen.moe["bf16"] == own.moe["bf16"] != gpu.calibration.moe["bf16"]
    assert gen.moe["fp8"] == own.moe["fp8"]


@pytest.mark.parametrize("gpu,weight_dtype,backend,words", [
    ("h200", "fp8", "trtllm", "10.0 and 10.3 only"),
    ("b200", "nvfp4", "deepgemm", "block-fp8"),
])
def test_refused_where_the_stack_does_not_run_it(gpu, weight_dtype, backend, words):
    with pytest.raises(LlmsimError, match=words) as e:
        _routed_ms(gpu, weight_dtype, "trtllm", backend)
    assert e.value.key_path == "engine.moe_backend"


def test_deepgemm_prices_blackwell_block_fp8_as_the_stacks_own():
    assert _routed_ms("b200", "fp8", "trtllm", "deepgemm") == _routed_ms("b200", "fp8", "trtllm", "cutlass")


@pytest.mark.parametrize("engine,words", [
    (dict(backend="vllm", moe_backend="trtllm"), "vllm stack's default MoE runner"),
    (dict(backend="sglang", moe_backend="trtllm"), "sglang stack's default MoE runner"),
    (dict(backend="trtllm", moe_backend="wideep"), "no kernel rows of it"),
    (dict(backend="trtllm", moe_backend="TRTLLM"), "expected one of cutlass"),
])
def test_key_refused_off_trtllm_and_where_no_rows_price_it(engine, words):
    kernels = load_backend(engine["backend"]).engine["kernels"]
    with pytest.raises(ValueError, match=words):
        EngineConfig(kernels=kernels, **{k: v for k, v in engine.items() if k != "backend"})
