"""TensorRT-LLM's MoE backend (``engine.moe_backend``): ``cutlass`` (the trtllm backend's default to
1.3.0rc1) prices the stack's own expert kernels, ``trtllm`` the TRT-LLM-gen kernels with the Blackwell
profile's own (vLLM FlashInfer TRT-LLM) parameters, ``auto`` (the default from 1.3.0rc2) whichever
TensorRT-LLM picks for the model and GPU; refused where the stack does not run it, where no rows
price it (auto's pick included), and on any other stack. AIConfigurator's replayed deployments name
CUTLASS, as its templates wrote it."""
from __future__ import annotations

import pytest

from simulator.costmodel.step import CostModel
from simulator.engine.config import EngineConfig
from simulator.errors import LlmsimError
from simulator.profiles import load_hardware, load_model
from simulator.fleet.setup import setup_pool
from simulator.profiles.backend import load_backend
from simulator.profiles.moe_backend import AUTO_SINCE, auto_backend
from simulator.scenario.schema import PoolSpec
from simulator.validation.deployment import engine_keys


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


@pytest.mark.parametrize("version,backend", [
    ("1.0.0rc3", "cutlass"), ("1.2.0rc6.post3", "cutlass"), ("1.2.1", "cutlass"), ("1.3.0rc1", "cutlass"),
    ("v1.3.0rc1", "cutlass"), ("1.3.0rc1 (notes)", "cutlass"),
    ("1.3.0rc2", "auto"), ("1.3.0rc5.post1", "auto"), ("1.3.0rc15", "auto"), (None, "auto"),
])
def test_the_default_follows_the_release(version, backend):
    # llm_args.py MoeConfig.backend: CUTLASS until #11074 (merged after 1.3.0rc1), AUTO from then on
    prof = load_backend("trtllm")
    keys = prof.version_keys(version) if version else {}
    assert {**prof.engine, **keys}["moe_backend"] == backend


@pytest.mark.parametrize("version,measured,backend", [
    ("nightly-20251201", None, "cutlass"), ("nightly-20260129", None, "cutlass"),
    ("nightly-20260130", None, "auto"), ("nightly-dev-20260301-d3bae71e", None, "auto"),
    ("", "2026-01-29", "cutlass"), ("", "2026-01-30", "auto"),
])
def test_a_nightly_or_a_row_without_a_release_follows_the_day_auto_landed(version, measured, backend):
    """The rule's ends had no day (releases lacked 0.0.0 and 1.3.0rc2): a nightly built, or a row
    naming no release measured, before #11074 merged ran auto. A row measured from that day may have
    run either, and keeps the profile's own (auto), as any version llmsim cannot place does."""
    prof = load_backend("trtllm")
    assert {**prof.engine, **prof.version_keys(version, measured)}["moe_backend"] == backend


def test_auto_is_refused_on_a_release_without_it():
    # MoeConfig.backend's Literal gains AUTO with #11074, where the profile's CUTLASS rule ends
    assert load_backend("trtllm").by_version[0].until == AUTO_SINCE
    with pytest.raises(ValueError, match="'auto' is no moe_config.backend of trtllm 1.2.1.*set cutlass"):
        EngineConfig(backend="trtllm", backend_version="1.2.1", kernels="trtllm", moe_backend="auto")
    assert EngineConfig(backend="trtllm", backend_version=AUTO_SINCE, kernels="trtllm", moe_backend="auto")
    with pytest.raises(ValueError, match="'auto' is no moe_config.backend of trtllm nightly-20260129"):
        EngineConfig(backend="trtllm", backend_version="nightly-20260129", kernels="trtllm", moe_backend="auto")


def test_auto_runs_what_tensorrt_llm_picks():
    # _torch/model_config.py resolve_moe_backend: CUTLASS but for gpt-oss (TRTLLM on 10.x)
    assert _routed_ms("b200", "nvfp4", "trtllm", "auto") == _routed_ms("b200", "nvfp4", "trtllm", "cutlass")
    assert auto_backend("gpt_oss", 100) == auto_backend("gpt_oss", 103) == "trtllm"
    assert auto_backend("gpt_oss", 90) == "triton"
    assert auto_backend("gpt_oss", 89) == auto_backend("gpt_oss", 120) == auto_backend("deepseek_v3", 100) == "cutlass"


def test_triton_prices_gpt_oss_on_hopper_with_the_kernel_vllm_runs_there():
    """AUTO gives gpt-oss on Hopper to TritonFusedMoE: triton_kernels' matmul_ogs, which vLLM's Hopper
    gpt-oss rows time and the profile's own w4a16_mxfp4 set is fitted on; it ran refused before."""
    pool = {"model": "gpt-oss-120b", "gpu": "h200", "tp": 1, "engine": {"backend": "trtllm"}}
    setup = setup_pool(PoolSpec.model_validate(pool), 0)
    assert setup.engine_config.moe_backend == "auto"
    assert load_hardware("h200").for_kernels("trtllm", "triton").calibration.moe["w4a16_mxfp4"] == \
        load_hardware("h200").calibration.moe["w4a16_mxfp4"]
    for engine in ({"moe_backend": "cutlass"}, {"backend_version": "1.3.0rc1"}):
        setup = setup_pool(PoolSpec.model_validate({**pool, "engine": {"backend": "trtllm", **engine}}), 0)
        assert setup.engine_config.moe_backend == "cutlass"


@pytest.mark.parametrize("model,gpu,weight_dtype", [("deepseek-v3", "h200", "fp8"), ("gpt-oss-120b", "b200", "mxfp4")])
def test_triton_is_refused_where_no_rows_time_it(model, gpu, weight_dtype):
    # DeepSeek's block fp8 on Hopper, gpt-oss on Blackwell: no row times TritonFusedMoE there
    with pytest.raises(LlmsimError, match="timed only for gpt-oss's MXFP4 experts on Hopper") as e:
        CostModel(load_model(model), load_hardware(gpu), 8, weight_dtype, "fp8", kernels="trtllm",
                  moe_backend="triton")
    assert e.value.key_path == "engine.moe_backend"


@pytest.mark.parametrize("deployment", ["aiconfigurator", "aic-eval", "aic-genai-perf"])
def test_aiconfigurator_replays_name_cutlass(deployment):
    # its templates write moe_config.backend default('CUTLASS'), whatever the release's default
    assert engine_keys(deployment, "trtllm", 64, 1024)["moe_backend"] == "cutlass"
    assert "moe_backend" not in engine_keys("defaults", "trtllm", 64, 1024)


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
    (dict(backend="trtllm", moe_backend="TRTLLM"), "expected one of auto, cutlass"),
])
def test_key_refused_off_trtllm_and_where_no_rows_price_it(engine, words):
    kernels = load_backend(engine["backend"]).engine["kernels"]
    with pytest.raises(ValueError, match=words):
        EngineConfig(kernels=kernels, **{k: v for k, v in engine.items() if k != "backend"})


def test_auto_picking_a_backend_no_rows_price_is_refused_naming_the_remedy(monkeypatch):
    """No release's AUTO picks such a backend today (gpt-oss on Hopper runs Triton, which vLLM's rows
    price); should one (WIDEEP), the launch relying on the default is refused, and estimate names its
    flags in the remedy."""
    from simulator.cli.estimate import _moe_remedies_as_flags
    from simulator.profiles import moe_backend

    monkeypatch.setattr(moe_backend, "auto_backend", lambda model_type, sm: "wideep")
    with pytest.raises(ValueError, match="runs WIDEEP for deepseek_v3 on b200") as e:
        moe_backend.resolved_backend("auto", "deepseek_v3", "b200", 100)
    said = _moe_remedies_as_flags(str(e.value))
    assert "give --moe-backend cutlass (moe_config.backend: CUTLASS in the launch), or give a --backend-version " \
           "before 1.3.0rc2" in " ".join(said.split())


@pytest.mark.parametrize("flags,remedy", [
    (["--backend-version", "1.2.1", "--moe-backend", "auto"], "give --moe-backend cutlass, or a --backend-version "
                                                              "from 1.3.0rc2"),
])
def test_estimate_names_its_flags_in_a_refusals_remedy(cli, flags, remedy):
    for command in (["request", "--input", "4000", "--output", "100"], ["step", "--decode-batch", "8"]):
        r = cli("estimate", *command, "--gpu", "h200", "--model", "gpt-oss-120b", "--backend", "trtllm", *flags)
        assert r.code == 2, r.out
        said = " ".join(r.err.split())
        assert remedy in said and "engine.moe_backend" not in said and "name a backend_version" not in said, said


def test_estimate_off_trtllm_names_the_flags_to_drop_or_give(cli):
    r = cli("estimate", "request", "--input", "4000", "--output", "100", "--gpu", "h200", "--model",
            "gpt-oss-120b", "--backend", "sglang", "--moe-backend", "cutlass")
    assert r.code == 2
    assert "drop --moe-backend, or give --backend trtllm" in " ".join(r.err.split()), r.err


@pytest.mark.parametrize("model,weights,gpu,setting,said", [
    ("gpt-oss-120b", "mxfp4", "b200", "auto", "trtllm (auto)"),       # auto's pick differs by model and GPU
    ("deepseek-v3", "fp8", "b200", "auto", "cutlass (auto)"),
    ("gpt-oss-120b", "mxfp4", "h200", "cutlass", "cutlass"),
    ("qwen3-30b-a3b", "bf16", "b200", "trtllm", "cutlass (trtllm falls back to it for these experts)"),
])
def test_the_pool_and_the_estimate_say_which_moe_backend_runs(model, weights, gpu, setting, said):
    cm = CostModel(load_model(model), load_hardware(gpu), 8 if model == "deepseek-v3" else 1, weights, "bf16",
                   kernels="trtllm", moe_backend=setting)
    assert cm.describe()["moe_backend"] == cm.moe_backend == said
    assert "moe_backend" not in CostModel(load_model(model), load_hardware(gpu), cm.tp, cm.weight_dtype,
                                          "bf16", kernels="trtllm").describe()
    assert CostModel(load_model("llama-3-8b"), load_hardware(gpu), 1, kernels="trtllm",
                     moe_backend=setting).moe_backend is None      # no experts, no MoE backend


def test_a_runs_pool_line_and_estimate_request_name_autos_pick(cli):
    from simulator.report.summary import _assumed
    assert "served by trtllm 1.3.0rc15 (its default release), MoE backend trtllm (auto), 1,000 KV tokens" in \
        _assumed({"backend": "trtllm", "backend_release": "1.3.0rc15", "moe_backend": "trtllm (auto)",
                  "kv_tokens_per_replica": 1000})
    r = cli("estimate", "request", "--input", "4000", "--output", "100", "--gpu", "b200", "--model",
            "gpt-oss-120b", "--backend", "trtllm", "--json")
    assert '"moe_backend": "trtllm (auto)"' in r.out, r.out


def test_autos_pick_that_no_rows_price_is_refused_as_autos():
    """gpt-oss's 16-bit experts on Hopper: AUTO picks TRITON there whatever the format, and no row times
    TritonFusedMoE on bf16 experts. The refusal read 'moe_backend triton: ...: use cutlass' for a pool that
    never named triton, without the key to set (and estimate's remedy stayed in scenario words)."""
    from simulator.cli.estimate import _moe_remedies_as_flags
    with pytest.raises(LlmsimError) as e:
        CostModel(load_model("gpt-oss-120b"), load_hardware("h100-sxm"), 1, "bf16", "bf16", kernels="trtllm",
                  moe_backend="auto")
    said = " ".join(e.value.message.split())
    assert e.value.key_path == "engine.moe_backend"
    assert said.startswith(f"moe_backend auto (TensorRT-LLM's moe_config.backend default from {AUTO_SINCE}) runs "
                           "TRITON for gpt_oss on h100-sxm"), said
    assert "bf16 experts on h100-sxm have none: set engine.moe_backend to cutlass" in said, said
    assert "give --moe-backend cutlass" in _moe_remedies_as_flags(said)


def test_estimates_help_names_every_backend_llmsim_prices():
    # triton became priceable (gpt-oss on Hopper) while --moe-backend's help still listed auto, cutlass,
    # trtllm and deepgemm alone
    import re
    from simulator.cli.estimate import MOE_BACKEND
    from simulator.profiles.moe_backend import TRTLLM_MOE_BACKENDS, UNPRICED
    named = set(re.findall(r"\w+", MOE_BACKEND.help))
    assert [b for b in TRTLLM_MOE_BACKENDS if b not in UNPRICED and b not in named] == []
