"""Weights in a format the GPU has no tensor cores for run weight-only, and say so.

vLLM serves fp8 weights on an A100 through Marlin's W8A16 kernels: the
weights take half the bytes, the GEMMs compute in 16 bits. llmsim prices them
so, and a run's summary, report page and ``estimate`` name the scheme, so a
reader of "fp8" does not assume the 8-bit peak the bill never got.
"""
from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from simulator.costmodel import CostModel
from simulator.dtypes import WEIGHT_DTYPES, compute_dtype, gemm_scheme
from simulator.profiles import load_hardware, load_model
from simulator.report.summary_format import weights_served
from test_sweep import TINY, write_tiny_scenario


@pytest.mark.parametrize("weights, gpu, scheme", [
    ("fp8", "a100-sxm-80gb", "W8A16"),     # Marlin FP8 below compute capability 8.9
    ("fp8", "h100-sxm", "W8A8"),
    ("int8", "a100-sxm-80gb", "W8A8"),     # Ampere has int8 tensor cores
    ("int4", "h100-sxm", "W4A16"),
    ("mxfp4", "h100-sxm", "W4A16"),
    ("mxfp4", "b200", "W4A8"),
    ("nvfp4", "b200", "W4A4"),
    ("bf16", "a100-sxm-80gb", "W16A16"),
])
def test_the_scheme_follows_the_gpus_units(weights, gpu, scheme):
    assert gemm_scheme(weights, load_hardware(gpu).units) == scheme


@given(st.sampled_from([w for w in WEIGHT_DTYPES if w != "nvfp4"]),
       st.sampled_from(["a100-sxm-80gb", "h100-sxm", "b200", "l40s", "mi300x"]))
def test_a_linear_layer_computes_only_at_a_peak_the_gpu_has(weights, gpu):
    g = load_hardware(gpu)
    cdt = compute_dtype(weights, g.units)
    assert cdt == "bf16" or g.has_unit(cdt)


def test_fp8_on_an_a100_prefills_at_the_16_bit_rate_and_decodes_on_8_bit_weights():
    m, g = load_model("llama-3.1-8b"), load_hardware("a100-sxm-80gb")
    bf16, fp8 = CostModel(m, g, 1, "bf16", "bf16"), CostModel(m, g, 1, "fp8", "bf16")
    assert fp8.peak_linear == pytest.approx(bf16.peak_linear)
    assert fp8.w_bytes == 1.0 and fp8.a_bytes == 2.0
    assert fp8.step_time(decode_batch=8, decode_context=8000) < 0.8 * bf16.step_time(decode_batch=8, decode_context=8000)


def test_the_pool_says_what_its_weights_ran_as():
    pool = {"weight_dtype": "fp8", "gemm_scheme": "W8A16", "gpu": "a100-sxm-80gb"}
    assert weights_served(pool) == "fp8 (W8A16: no fp8 tensor cores on a100-sxm-80gb)"
    assert weights_served({**pool, "gemm_scheme": "W8A8", "gpu": "h100-sxm"}) == "fp8"
    assert weights_served({"weight_dtype": "int4", "gemm_scheme": "W4A16"}) == "int4"   # weight-only by design


def test_a_run_and_an_estimate_on_an_a100_name_the_scheme(tmp_path, cli):
    sc = write_tiny_scenario(tmp_path, pools=[{**TINY["pools"][0], "gpu": "a100-sxm-80gb", "replicas": 1,
                                               "engine": {"backend": "vllm", "weight_dtype": "fp8"}}])
    r = cli("run", sc, "--json", "--exit-zero")
    assert r.code == 0, r.err
    assert r.json()["llmsim"]["pools"]["chat"]["gemm_scheme"] == "W8A16"
    r = cli("estimate", "request", "--json", "--gpu", "a100-sxm-80gb", "--model", "llama-3.1-8b",
            "--weight-dtype", "fp8", "--input", "200", "--output", "20")
    assert r.json()["gemm_scheme"] == "W8A16"
