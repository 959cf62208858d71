"""Where a stack turns its prefix cache off whatever the launch asked (backend_profiles/*.yaml
prefix_cache_rules): TensorRT-LLM keeps KV block reuse for an MLA model on compute capability 9.0,
10.0, 10.3 and 12.0 alone (_torch/pyexecutor/py_executor_creator.py create_py_executor), so DeepSeek-V3
on an A100 runs without a prefix cache, and a pool that asks for one there is refused on one line."""
from __future__ import annotations

import pytest
from pydantic import ValidationError

from simulator.errors import from_validation_error
from simulator.scenario.schema import PoolSpec, Scenario

FIXED_100 = {"dist": "fixed", "value": 100}


def _prefix_cache(backend: str, model: str, gpu: str, **engine) -> bool:
    return PoolSpec.model_validate({"model": model, "gpu": gpu, "engine": {"backend": backend, **engine}}
                                   ).engine.prefix_cache


@pytest.mark.parametrize("backend, model, gpu, engine, cached", [
    ("trtllm", "deepseek-v3", "a100-sxm-80gb", {}, False),
    ("trtllm", "deepseek-v3", "l40s", {"backend_version": "1.0.0"}, False),
    ("trtllm", "deepseek-v3", "a100-sxm-80gb", {"prefix_cache": False}, False),
    ("trtllm", "deepseek-v3", "h200", {}, True),
    ("trtllm", "deepseek-v3", "b200", {}, True),
    ("trtllm", "deepseek-v3", "b300", {}, True),
    ("trtllm", "llama-3.1-8b", "a100-sxm-80gb", {}, True),     # not MLA
    ("vllm", "deepseek-v3", "a100-sxm-80gb", {}, True),
    ("sglang", "deepseek-v3", "a100-sxm-80gb", {}, True),
])
def test_the_prefix_cache_is_the_stacks(backend, model, gpu, engine, cached):
    assert _prefix_cache(backend, model, gpu, **engine) is cached


def test_a_prefix_cache_the_stack_turns_off_is_refused_naming_the_key():
    data = {"name": "s", "workload": {"arrival": {"type": "poisson", "rate_per_s": 1.0}, "duration_s": 10,
                                      "input_tokens": FIXED_100, "output_tokens": FIXED_100},
            "pools": [{"model": "deepseek-v3", "gpu": "a100-sxm-80gb", "tp": 8,
                       "engine": {"backend": "trtllm", "prefix_cache": True}}]}
    with pytest.raises(ValidationError) as e:
        Scenario.model_validate(data)
    err = from_validation_error(e.value, "s.yaml", data)
    assert err.key_path == "pools[0].engine.prefix_cache" and "\n" not in err.message
    assert ("trtllm turns its prefix cache off for deepseek-v3 on a100-sxm-80gb ('KV cache reuse for MLA can "
            "only be enabled on SM90/SM100/SM103/SM120'") in err.message
