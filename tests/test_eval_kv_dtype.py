"""Which KV cache AIConfigurator's measured rows ran, per provenance and stack.

The file does not say; validation/deployment.kv_dtype reads it from the
generator's source where it wrote the flag and from the measurements where
no launch script survives (the evaluation runs' vLLM)."""
from __future__ import annotations

import pytest

from simulator.validation.deployment import DEPLOYMENTS, kv_dtype


@pytest.mark.parametrize("stack", ["vllm", "trtllm"])
@pytest.mark.parametrize("deployment", ["aic-eval", "aic-genai-perf", "aiconfigurator"])
def test_the_profiles_fp8_and_fp4_run_an_fp8_cache_on_vllm_and_trtllm(deployment, stack):
    assert kv_dtype(deployment, stack, "fp8") == "fp8"
    assert kv_dtype(deployment, stack, "FP4") == "fp8"
    assert kv_dtype(deployment, stack, "bf16") == "bf16"
    assert kv_dtype(deployment, stack, "int4") == "bf16"


def test_sglang_evaluation_runs_kept_the_16_bit_cache():
    assert kv_dtype("aic-eval", "sglang", "fp8") == "bf16"
    assert kv_dtype("aiconfigurator", "sglang", "fp8") == "fp8"


@pytest.mark.parametrize("stack", ["vllm", "sglang", "trtllm"])
def test_stack_defaults_keep_the_models_type(stack):
    assert "defaults" in DEPLOYMENTS
    assert kv_dtype("defaults", stack, "fp8") == "bf16"
