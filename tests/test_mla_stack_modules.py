"""Each stack's MLA decode module: TensorRT-LLM's on Hopper is priced from its own module rows
(``calibration.stacks.trtllm.mla_decode``), vLLM's and SGLang's keep the profile's."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from simulator.calibration import stacks
from simulator.calibration.moe_mla import DSV3, predict_module
from simulator.costmodel.mla import MlaShape, mla_module_decode_time
from simulator.profiles import load_hardware
from simulator.profiles.hardware import HardwareProfile

# (heads per GPU, batch, cached tokens): DeepSeek-V3 at TP 8 and TP 1.
SHAPES = ((16, 64, 4096), (128, 128, 8192))
# vLLM's pricing over TensorRT-LLM's measured module at least: its per-call cost shows at TP 8's small
# modules, not in TP 1's memory-bound ones.
VLLM_OVER = (1.3, 0.9)


def _module_ms(gpu: HardwareProfile, kernels: str, heads: int, batch: int, kv_len: int) -> float:
    """A bf16 DeepSeek-V3 MLA decode module as the engine prices it: the GPU as ``kernels`` runs it."""
    g = gpu.for_kernels(kernels)
    cal = g.calibration
    t = mla_module_decode_time(batch, batch * (kv_len + 1.0), MlaShape(num_heads=heads, **DSV3), g, cal.mla_decode,
                               cal.mla_projection["bf16"], 2.0, "bf16")
    return float(t) * 1e3


def _measured_ms(shared_data, heads: int, batch: int, kv_len: int) -> float:
    d = pd.read_csv(shared_data / "kernels" / "mla_more.csv.gz", usecols=[
        "gpu", "framework", "table", "gemm_type", "kv_cache_dtype", "num_heads_per_gpu", "batch_size", "kv_len",
        "latency_ms"])
    d = d[(d.gpu == "h200_sxm") & (d.framework == "trtllm") & (d.table == "mla_generation_module_perf")
          & (d.gemm_type == "bfloat16") & (d.kv_cache_dtype == "bfloat16") & (d.num_heads_per_gpu == heads)
          & (d.batch_size == batch) & (d.kv_len == kv_len)]
    return float(d["latency_ms"].min())


@pytest.mark.parametrize("shape,vllm_over", list(zip(SHAPES, VLLM_OVER)))
def test_trtllm_h200_mla_decode_module_is_priced_near_its_measured_row(shared_data, shape, vllm_over):
    gpu = load_hardware("h200")
    measured = _measured_ms(shared_data, *shape)
    assert _module_ms(gpu, "trtllm", *shape) == pytest.approx(measured, rel=0.15)
    assert _module_ms(gpu, "vllm", *shape) > vllm_over * measured


def test_vllm_and_sglang_keep_the_profiles_mla_decode():
    gpu = load_hardware("h200")
    for stack in ("vllm", "sglang"):
        assert gpu.for_kernels(stack).calibration.mla_decode == gpu.calibration.mla_decode
    # the vLLM-fitted parameters of hardware_profiles/h200.yaml (fixed_us 59.58): 0.177 ms at TP 8, batch 64, 4K
    assert _module_ms(gpu, "vllm", *SHAPES[0]) == pytest.approx(0.1772, abs=5e-4)
    assert gpu.calibration.stacks["trtllm"].mla_decode.fixed_us < gpu.calibration.mla_decode.fixed_us / 2


def test_a_stack_whose_modules_run_faster_than_the_profile_prices_gets_its_own_decode_kernel():
    gpu = load_hardware("h200")
    heads, batch, kv = np.meshgrid([16, 128], [1, 8, 32, 128], [512, 4096, 16384], indexing="ij")
    rows = pd.DataFrame(dict(profile="h200", table="mla_generation_module_perf", gemm_type="bfloat16",
                             kv_cache_dtype="bfloat16", kv_bytes=2.0, num_heads_per_gpu=heads.ravel(),
                             batch_size=batch.ravel(), kv_len=kv.ravel()))
    cal = gpu.calibration
    fast = cal.mla_decode.model_copy(update={"fixed_us": 15.0, "per_seq_us": 0.05})
    rows["t_s"] = predict_module(rows, gpu, cal.mla_prefill, fast, cal.mla_projection["bf16"])
    (c,) = stacks.compare_mla(rows, gpu, "trtllm")
    assert c.material and c.median_ratio < 1 - stacks.MATERIAL
    assert stacks.compare_mla(rows, gpu.model_copy(update={"calibration": cal.model_copy(
        update={"mla_projection": {}})}), "trtllm") == []                  # no MLA calibration: nothing to compare
    over = gpu.calibration.stacks["trtllm"]                                # what the calibration wrote from its rows
    assert "mla_decode × " in over.rule and over.error["mla_generation_module bf16"].median_ape < 10
