"""Each stack's MLA prefill kernel: SGLang's on Hopper runs at the rate its measured kernel does."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from simulator.costmodel import CostModel
from simulator.profiles import load_hardware, load_model
from simulator.profiles.hardware import HardwareProfile

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))


def _prefill(gpu: HardwareProfile, kernels: str | None, model: str = "deepseek-v3", tokens: int = 8192) -> float:
    return CostModel(load_model(model), gpu, 8, "fp8", kernels=kernels).step_time([(tokens, 0)])


def test_a_stack_named_runs_its_mla_prefill_at_that_fraction_and_nothing_else_moves():
    gpu = load_hardware("h200")
    plain = gpu.model_copy(update={"mla_prefill_efficiency": {}})
    slow = gpu.model_copy(update={"mla_prefill_efficiency": {"sglang": 0.3}})
    assert _prefill(slow, "sglang") > _prefill(plain, "sglang") * 1.1          # an 8K DeepSeek prefill
    assert _prefill(slow, "vllm") == _prefill(plain, "vllm")                  # the other stacks keep theirs
    assert _prefill(slow, "sglang", "llama-3.1-70b") == _prefill(plain, "sglang", "llama-3.1-70b")   # no MLA
    cal = slow.for_kernels("sglang").calibration
    assert cal.mla_prefill.eta_compute == pytest.approx(gpu.calibration.mla_prefill.eta_compute * 0.3)
    assert cal.mla_decode == gpu.calibration.mla_decode
    assert slow.for_kernels("sglang").for_kernels("sglang").calibration.mla_prefill == cal.mla_prefill   # folded once


def test_an_unknown_stack_is_refused():
    gpu = load_hardware("h200")
    with pytest.raises(ValueError, match="'sglng' names no serving stack"):
        HardwareProfile.model_validate({**gpu.model_dump(), "mla_prefill_efficiency": {"sglng": 0.3}})


def test_the_profiles_carry_what_the_measured_kernels_give(shared_data):
    import mla_stack_kernels as B

    table = B.ratios(B.kernel_rows(shared_data)).set_index(["gpu", "stack"])["ratio"]
    for gpu in ("h100-sxm", "h200"):
        assert load_hardware(gpu).mla_prefill_efficiency == {"sglang": round(table[(gpu, "sglang")], 3)}
        assert abs(table[(gpu, "vllm")] - 1) <= B.MATERIAL      # the reference stands for vLLM's kernel
    assert load_hardware("h100-pcie").mla_prefill_efficiency == load_hardware("h100-sxm").mla_prefill_efficiency
    for gpu in ("b200", "gb200-nvl72"):                          # SGLang runs TensorRT-LLM's MLA kernel there
        assert abs(table[(gpu, "sglang")] - 1) <= B.MATERIAL
        assert load_hardware(gpu).mla_prefill_efficiency == {}
