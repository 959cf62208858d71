"""A pool serves its checkpoint's weights, or weights its stack makes of them as it loads.

vLLM and SGLang refuse a ``--quantization`` other than the checkpoint's and
read NVFP4, AWQ and GPTQ formats from the checkpoint; TensorRT-LLM's PyTorch
backend runs pre-quantised ModelOpt exports only. What they do convert at load
is a 16-bit checkpoint to fp8 (vLLM, SGLang) and MXFP4 experts to bf16 (SGLang).
"""
from __future__ import annotations

import json

import pytest

from simulator.errors import LlmsimError
from simulator.fleet.setup import setup_pool
from simulator.scenario.schema import PoolSpec


def _setup(model, backend, weight_dtype, gpu="b200", tp=1):
    engine = {"weight_dtype": weight_dtype, "max_model_len": 4096, **({"backend": backend} if backend else {})}
    return setup_pool(PoolSpec.model_validate({"model": model, "gpu": gpu, "tp": tp, "engine": engine}), 0,
                      source="s.yaml")


@pytest.fixture
def bf16_config(tmp_path, hf_llama3_8b_config):
    """A checkpoint's own config.json with no quantization_config: 16-bit weights."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps(hf_llama3_8b_config))
    return str(path)


@pytest.mark.parametrize("backend, weight_dtype", [(b, wd) for b in ("vllm", "sglang", "trtllm", None)
                                                    for wd in ("nvfp4", "int4", "int8")
                                                    if (b, wd) != ("trtllm", "int8")])   # no W8A8 int8 at all
def test_a_16_bit_checkpoint_is_not_served_as_a_format_only_a_quantised_one_holds(bf16_config, backend, weight_dtype):
    with pytest.raises(LlmsimError) as e:
        _setup(bf16_config, backend, weight_dtype)
    assert e.value.source == "s.yaml" and e.value.key_path == "pools[0].engine.weight_dtype"
    assert "checkpoint holds 16-bit weights" in e.value.message
    assert f"only from a checkpoint already quantised to {weight_dtype}" in e.value.message


@pytest.mark.parametrize("backend", ["vllm", "sglang", None])
def test_vllm_and_sglang_quantise_a_16_bit_checkpoint_to_fp8_as_they_load(bf16_config, backend):
    ps = _setup(bf16_config, backend, "fp8", gpu="h100-sxm")
    assert ps.cm.weight_dtype == "fp8"
    assert _setup(bf16_config, backend, "fp16", gpu="h100-sxm").cm.weight_dtype == "fp16"


def test_tensorrt_llm_quantises_nothing_as_it_loads(bf16_config):
    with pytest.raises(LlmsimError, match=r"quantised to fp8 \(it quantises nothing as it loads\)"):
        _setup(bf16_config, "trtllm", "fp8", gpu="h100-sxm")


@pytest.mark.parametrize("backend", ["vllm", "sglang", "trtllm", None])
def test_a_quantised_checkpoint_is_neither_dequantised_nor_requantised(backend):
    for weight_dtype, said in (("bf16", "does not dequantise it to bf16"), ("nvfp4", "not by requantising one in fp8")):
        with pytest.raises(LlmsimError) as e:
            _setup("qwen3-235b-a22b-fp8", backend, weight_dtype, tp=8)
        assert e.value.key_path == "pools[0].engine.weight_dtype" and "checkpoint holds fp8 weights" in e.value.message
        assert said.replace("does", "do" if backend is None else "does") in e.value.message


def test_sglang_alone_upcasts_mxfp4_experts_to_bf16():
    assert _setup("gpt-oss-120b", "sglang", "bf16", tp=4).cm.weight_dtype == "bf16"
    with pytest.raises(LlmsimError, match="vllm .*does not dequantise it to bf16"):
        _setup("gpt-oss-120b", "vllm", "bf16", tp=4)


def test_the_checkpoint_is_refused_before_the_expert_kernel_its_wrong_format_would_pick(cli):
    """TensorRT-LLM's AUTO gives gpt-oss's experts TRITON on Hopper, unpriced for bf16 experts; but the
    checkpoint holds MXFP4 experts, which no launch serves as bf16: that refusal is the one to read."""
    with pytest.raises(LlmsimError) as e:
        _setup("gpt-oss-120b", "trtllm", "bf16", gpu="h100-sxm", tp=4)
    assert e.value.key_path == "pools[0].engine.weight_dtype", e.value.message
    assert "checkpoint holds mxfp4 weights" in e.value.message
    r = cli("estimate", "step", "--gpu", "h100-sxm", "--model", "gpt-oss-120b", "--tp", "4", "--weight-dtype",
            "bf16", "--backend", "trtllm", "--decode-batch", "1")
    assert r.code == 2 and r.err.startswith("error: --weight-dtype: ") and "checkpoint holds mxfp4" in r.err, r.err
    pool = {"model": "gpt-oss-120b", "gpu": "h100-sxm", "tp": 4,       # its own weights meet the backend's refusal
            "engine": {"backend": "trtllm", "weight_dtype": "mxfp4", "moe_backend": "trtllm", "max_model_len": 4096}}
    with pytest.raises(LlmsimError) as e:
        setup_pool(PoolSpec.model_validate(pool), 0, source="s.yaml")
    assert e.value.key_path == "pools[0].engine.moe_backend", e.value.message


def test_a_profile_naming_no_checkpoint_format_is_served_as_the_pool_names(bf16_config):
    assert _setup("llama-3.1-8b", "vllm", "nvfp4").cm.weight_dtype == "nvfp4"


def test_the_estimate_refuses_it_naming_its_flag(cli, bf16_config):
    for backend in ([], ["--backend", "vllm"]):
        r = cli("estimate", "step", "--gpu", "b200", "--model", bf16_config, "--weight-dtype", "nvfp4",
                "--decode-batch", "1", *backend)
        assert r.code == 2 and "Traceback" not in r.err and r.err.startswith("error: --weight-dtype: "), r.err
    assert cli("estimate", "step", "--gpu", "h100-sxm", "--model", bf16_config, "--weight-dtype", "fp8",
               "--decode-batch", "1").code == 0


def test_a_measured_row_replays_the_checkpoint_its_format_names(bf16_config):
    """AIConfigurator records NVIDIA's NVFP4 export of an architecture under the architecture's model id
    (deepseek-ai/DeepSeek-R1 at quant mode nvfp4): the row ran, so its replay is not refused."""
    from simulator.validation.replay import refusals
    from simulator.validation.rows import Row

    row = Row("n", "vllm", bf16_config, "b200", 1, "nvfp4", "bf16", 512, 16, concurrency=2,
              measured={"ttft_mean_ms": 50.0})
    assert refusals([row]) == {}
    with pytest.raises(LlmsimError, match="holds 16-bit weights"):
        _setup(bf16_config, "vllm", "nvfp4")
