"""A pool that names no weights serves the checkpoint as published.

vLLM, SGLang and TensorRT-LLM read a checkpoint's ``quantization_config``
and load its weights in that format; a simulated pool of the same model
must do the same, or DeepSeek-V3 is sized as 1.36 TB of 16-bit weights
(refused on the eight H200s it is served on) and gpt-oss-120b as four
GPUs' worth where one holds it.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, strategies as st

from simulator.dtypes import WEIGHT_DTYPES, checkpoint_weight_dtype
from simulator.errors import LlmsimError
from simulator.fleet.setup import setup_pool
from simulator.memory import plan_memory
from simulator.profiles import load_hardware, load_model
from simulator.scenario.schema import PoolSpec


def _setup(**pool):
    return setup_pool(PoolSpec.model_validate(pool), 0, source="s.yaml")


@pytest.mark.parametrize("model, gpu, tp, served", [
    ("deepseek-v3", "h200", 8, "fp8"),             # block fp8 checkpoint
    ("qwen3-235b-a22b-fp8", "h100-sxm", 8, "fp8"),
    ("gpt-oss-120b", "h100-sxm", 1, "mxfp4"),       # MXFP4 experts
    ("llama-3.1-8b", "h100-sxm", 1, "bf16"),        # no quantization_config
])
def test_a_pool_naming_no_weights_serves_the_checkpoint(model, gpu, tp, served):
    # (vLLM starts gpt-oss-120b on one H100 only with a max_model_len its 7K-token pool holds)
    engine = {"backend": "vllm", "max_model_len": 4096}
    ps = _setup(model=model, gpu=gpu, tp=tp, engine=engine)
    assert ps.spec.engine.weight_dtype == ps.cm.weight_dtype == served
    named = _setup(model=model, gpu=gpu, tp=tp, engine={**engine, "weight_dtype": served})
    assert ps.memory == named.memory


def test_named_weights_are_what_the_pool_serves():
    """16-bit Llama-3.1-405B does not fit on eight H100s; in fp8 it does (a profile naming no checkpoint
    format stands for the checkpoint in the weights the pool names)."""
    with pytest.raises(LlmsimError) as e:
        _setup(model="llama-3.1-405b", gpu="h100-sxm", tp=8, engine={"backend": "sglang", "weight_dtype": "bf16"})
    assert "does not fit" in e.value.message and e.value.key_path == "pools[0].engine"
    fp8 = _setup(model="llama-3.1-405b", gpu="h100-sxm", tp=8, engine={"backend": "sglang", "weight_dtype": "fp8"})
    assert fp8.memory.kv_capacity_tokens > 0


@pytest.mark.parametrize("model, gpu, tp", [("llama-3.1-8b", "a100-sxm-80gb", 1),
                                             ("qwen3-30b-a3b", "a100-sxm-80gb", 1),
                                             ("qwen3-235b-a22b-fp8", "a100-sxm-80gb", 8)])   # its checkpoint's fp8
def test_tensorrt_llm_runs_no_fp8_weights_on_a_gpu_without_fp8_units(model, gpu, tp):
    """vLLM and SGLang run fp8 weights weight-only on an A100 (FP8 Marlin: vLLM's Fp8LinearMethod,
    SGLang's can_auto_enable_marlin_fp8, 0.5.4-0.5.23), so the pool is W8A16 there; TensorRT-LLM's PyTorch
    backend has no such path (_torch/modules/linear.py get_quant_method: FP8QDQLinearMethod quantises the
    activations and multiplies in cublas_scaled_mm, fp8 GEMMs compute capability 8.9 and later run; its docs:
    'supports FP4 and FP8 quantization on the latest Blackwell and Hopper GPUs'): refused, not run as W8A16."""
    engine = {"backend": "trtllm", **({} if model.endswith("fp8") else {"weight_dtype": "fp8"})}
    with pytest.raises(LlmsimError) as e:
        _setup(model=model, gpu=gpu, tp=tp, engine=engine)
    assert e.value.key_path == "pools[0].engine.weight_dtype" and "trtllm" in e.value.message
    assert "a100-sxm-80gb" in e.value.message
    for stack in ("vllm", "sglang"):
        assert _setup(model=model, gpu=gpu, tp=tp, engine={**engine, "backend": stack}).cm.weight_dtype == "fp8"
    assert _setup(model="llama-3.1-8b", gpu="l40s", engine={"backend": "trtllm", "weight_dtype": "fp8"})


def test_tensorrt_llm_runs_no_w8a8_int8():
    """llmsim's int8 is W8A8 (SmoothQuant: vLLM's compressed-tensors, SGLang's w8a8_int8); TensorRT-LLM's
    PyTorch backend has no such linear method (_torch/modules/linear.py get_quant_method: int8 weights
    only as WeightOnlyQuantLinearMethod, W8A16, else 'unsupported quant mode'): refused, not priced on
    int8 tensor cores."""
    with pytest.raises(LlmsimError) as e:
        _setup(model="llama-3.1-8b", gpu="h100-sxm", engine={"backend": "trtllm", "weight_dtype": "int8"})
    assert e.value.key_path == "pools[0].engine.weight_dtype" and "W8A8" in e.value.message
    for stack in ("vllm", "sglang"):
        assert _setup(model="llama-3.1-8b", gpu="h100-sxm", engine={"backend": stack, "weight_dtype": "int8"})


def test_the_estimate_refuses_what_the_run_refuses_for_tensorrt_llms_fp8(cli):
    for what in (["request", "--input", "100", "--output", "10"], ["step", "--decode-batch", "4"]):
        r = cli("estimate", *what, "--gpu", "a100-sxm-80gb", "--model", "llama-3.1-8b", "--backend", "trtllm",
                "--weight-dtype", "fp8")
        assert r.code == 2 and "Traceback" not in r.err and r.err.startswith("error: --weight-dtype: trtllm"), r.err


def _awq3(tmp_path: Path, hf_config: dict) -> Path:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**hf_config, "quantization_config": {"quant_method": "awq", "bits": 3}}))
    return path


def test_a_checkpoint_format_llmsim_does_not_model_must_be_named(tmp_path, hf_llama3_8b_config):
    path = _awq3(tmp_path, hf_llama3_8b_config)
    with pytest.raises(LlmsimError) as e:
        _setup(model=str(path), gpu="h100-sxm")
    assert e.value.key_path == "pools[0].engine.weight_dtype" and e.value.source == "s.yaml"
    assert "'int3'" in e.value.message and "int4" in e.value.message
    assert _setup(model=str(path), gpu="h100-sxm", engine={"weight_dtype": "int4"}).cm.weight_dtype == "int4"


@pytest.mark.parametrize("method", ["gptq", "awq"])
def test_an_8_bit_weight_only_checkpoint_is_not_served_as_w8a8(tmp_path, hf_llama3_8b_config, method):
    """GPTQ/AWQ at 8 bits quantise weights only (W8A16); llmsim's int8 is W8A8 (SmoothQuant), and served as
    it, a memory-bound decode read slower than bf16. Refused unless the pool names what it runs."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**hf_llama3_8b_config, "quantization_config": {"quant_method": method, "bits": 8}}))
    with pytest.raises(LlmsimError) as e:
        _setup(model=str(path), gpu="h100-sxm")
    assert e.value.key_path == "pools[0].engine.weight_dtype"
    assert f"'{method} int8 weight-only (W8A16)'" in e.value.message
    assert _setup(model=str(path), gpu="h100-sxm", engine={"weight_dtype": "bf16"}).cm.weight_dtype == "bf16"


@pytest.mark.parametrize("activations, served", [(None, None), ({"num_bits": 8, "type": "int"}, "int8")])
def test_a_compressed_tensors_8_bit_checkpoint_is_w8a8_only_with_8_bit_activations(
        tmp_path, hf_llama3_8b_config, activations, served):
    q = {"quant_method": "compressed-tensors",
         "config_groups": {"group_0": {"weights": {"num_bits": 8, "type": "int"}, "input_activations": activations}}}
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**hf_llama3_8b_config, "quantization_config": q}))
    if served is None:
        with pytest.raises(LlmsimError, match=r"'compressed-tensors int8 weight-only \(W8A16\)'"):
            _setup(model=str(path), gpu="h100-sxm")
    else:
        assert _setup(model=str(path), gpu="h100-sxm").cm.weight_dtype == served


def test_the_estimate_serves_the_checkpoint_unless_told(cli, tmp_path, hf_llama3_8b_config):
    args = ["estimate", "request", "--gpu", "h100-sxm", "--model", "gpt-oss-120b", "--input", "1000",
            "--output", "10", "--json"]
    served = cli(*args).json()
    assert served["weight_dtype"] == "mxfp4"
    assert served["weights_bytes"] == plan_memory(load_model("gpt-oss-120b"), load_hardware("h100-sxm"), 1,
                                                  "mxfp4", "bf16").weights_bytes
    named = cli(*args, "--weight-dtype", "bf16")         # 234 GB of 16-bit weights on one 80 GB GPU
    assert named.code == 2 and "(bf16)" in named.err and "does not fit" in named.err
    r = cli("estimate", "step", "--gpu", "h100-sxm", "--model", _awq3(tmp_path, hf_llama3_8b_config),
            "--decode-batch", "1")
    assert r.code == 2 and "--weight-dtype" in r.err and "Traceback" not in r.err


def test_a_run_reports_the_weights_it_served(cli, tmp_path):
    import yaml

    scenario = {"name": "w", "workload": {"num_requests": 20, "arrival": {"type": "poisson", "rate_per_s": 2},
                                          "input_tokens": {"dist": "fixed", "value": 256},
                                          "output_tokens": {"dist": "fixed", "value": 8}},
                "pools": [{"name": "p", "model": "gpt-oss-120b", "gpu": "h100-sxm", "engine": {"kv_dtype": "fp8"}}]}
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(scenario))
    assert cli("run", tmp_path / "s.yaml", "--no-plots", "-o", tmp_path / "out").code == 0
    pool = json.loads((tmp_path / "out" / "results.json").read_text())["llmsim"]["pools"]["p"]
    assert (pool["weight_dtype"], pool["kv_dtype"]) == ("mxfp4", "fp8")


@given(st.one_of(st.none(), st.sampled_from(["fp8_block", "fp8", "mxfp4", "nvfp4", "int4", "int8", "int2", "int3",
                                             "compressed-tensors", "modelopt int8", "fp4"]), st.text(max_size=12)))
def test_a_checkpoint_is_served_as_published_or_refused(checkpoint):
    """Never read as some other format: a known one as itself (block fp8 as fp8), none as 16-bit,
    anything else refused (None)."""
    wd = checkpoint_weight_dtype(checkpoint)
    if checkpoint is None:
        assert wd == "bf16"
    elif checkpoint == "fp8_block":
        assert wd == "fp8"
    else:
        assert wd == (checkpoint if checkpoint in WEIGHT_DTYPES else None)


def test_the_replay_and_a_pool_serve_an_unstated_precision_alike(shared_data):
    """A measured row that states no precision replays the checkpoint as published
    (validation.rows); a pool that names no weights must serve the same."""
    from simulator.validation.rows import _dtypes

    models = ["deepseek-v3", "gpt-oss-120b", "qwen3-235b-a22b-fp8", "llama-3.1-8b",
              *sorted(str(p) for p in (shared_data / "models" / "moe").glob("*.yaml"))]
    checked = 0
    for name in models:
        try:
            m = load_model(name)
        except LlmsimError:      # an architecture llmsim refuses (linear attention, sparse indexers)
            continue
        checked += 1
        wd, _ = _dtypes("", lambda: m.published_format)
        if wd in WEIGHT_DTYPES:
            assert m.served_weight_dtype() == wd, name
        else:
            with pytest.raises(LlmsimError):
                m.served_weight_dtype()
    assert checked >= 15
    # AIConfigurator's copy of the NVFP4 export declares no format: refused by both, not run in 16 bits.
    nvfp4 = load_model(str(shared_data / "models" / "moe" / "nvidia--DeepSeek-V3.1-NVFP4.yaml"))
    assert _dtypes("", lambda: nvfp4.published_format)[0] not in WEIGHT_DTYPES


def test_profiles_list_shows_what_each_model_serves(cli):
    models = {m["name"]: m for m in cli("profiles", "list", "--json").json()["models"]}
    assert {n: models[n]["serves"] for n in ("deepseek-v3", "gpt-oss-120b", "qwen3-235b-a22b-fp8", "llama-3.1-8b")} \
        == {"deepseek-v3": "fp8", "gpt-oss-120b": "mxfp4", "qwen3-235b-a22b-fp8": "fp8", "llama-3.1-8b": "bf16"}
    assert all(m["serves"] == load_model(n).served_weight_dtype() for n, m in models.items())


def test_a_table_shows_an_unmodelled_format_as_a_dash():
    from simulator.cli.output import fmt

    assert fmt(checkpoint_weight_dtype("int3")) == "—" and fmt("fp8") == "fp8"


def _modelopt_export(tmp_path: Path, hf_config: dict, quant: dict | None) -> Path:
    """A ModelOpt export as downloaded: no quantization_config in config.json, the format in
    hf_quant_config.json beside it (when ``quant`` is given)."""
    folder = tmp_path / "Llama-3.1-8B-Instruct-FP4"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(hf_config))
    if quant is not None:
        (folder / "hf_quant_config.json").write_text(json.dumps({"producer": {"name": "modelopt"},
                                                                 "quantization": quant}))
    return folder / "config.json"


def test_a_modelopt_export_serves_the_format_its_hf_quant_config_names(tmp_path, hf_llama3_8b_config):
    path = _modelopt_export(tmp_path, hf_llama3_8b_config, {"quant_algo": "NVFP4", "kv_cache_quant_algo": "FP8"})
    assert load_model(str(path)).checkpoint_dtype == "nvfp4"
    assert _setup(model=str(path), gpu="b200").cm.weight_dtype == "nvfp4"


def test_a_name_announcing_a_format_its_config_does_not_declare_is_refused(tmp_path, hf_llama3_8b_config):
    """Served in 16 bits, a -FP4 checkpoint read without its format would be sized at four times its weights."""
    path = _modelopt_export(tmp_path, hf_llama3_8b_config, None)
    with pytest.raises(LlmsimError) as e:
        _setup(model=str(path), gpu="b200")
    assert e.value.key_path == "pools[0].engine.weight_dtype" and e.value.source == "s.yaml"
    assert "its name says FP4" in e.value.message and "hf_quant_config.json" in e.value.message
    assert _setup(model=str(path), gpu="b200", engine={"weight_dtype": "nvfp4"}).cm.weight_dtype == "nvfp4"
    assert load_model(str(path)).summary()["serves"] is None


@pytest.mark.parametrize("quant", [{}, {"quant_algo": ""}, {"quant_algo": 4}])
def test_a_modelopt_record_without_its_algorithm_is_refused(tmp_path, hf_llama3_8b_config, quant):
    path = _modelopt_export(tmp_path, hf_llama3_8b_config, quant)
    with pytest.raises(LlmsimError) as e:
        load_model(str(path))
    assert e.value.key_path == "quantization.quant_algo" and str(e.value.source).endswith("hf_quant_config.json")


@pytest.mark.parametrize("name, named", [("DeepSeek-V3.1-NVFP4", "NVFP4"), ("Meta-Llama-3-8B-Instruct-AWQ", "AWQ"),
                                         ("llama_fp8", "fp8"), ("Qwen3-8B.w4a16", "w4a16"),
                                         ("llama-3.1-8b", None), ("gpt-oss-120b", None), ("mint8-model", None)])
def test_a_format_is_read_off_a_name_only_between_separators(name, named):
    m = load_model("llama-3.1-8b").model_copy(update={"name": name})
    assert m.published_format == (None if named is None else f"none declared, though its name says {named}")
