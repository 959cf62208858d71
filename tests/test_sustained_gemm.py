"""GEMMs under sustained load: read from the kernel rows, applied by the engine to bf16 GEMMs only."""
from __future__ import annotations

import pytest

from simulator.calibration import sustained
from simulator.costmodel import CostModel
from simulator.profiles import load_hardware, load_model


def _with_factor(name: str, s: float):
    g = load_hardware(name)
    gemm = g.calibration.gemm.model_copy(update={"sustained": s})
    return g.model_copy(update={"calibration": g.calibration.model_copy(update={"gemm": gemm})})


def test_folding_the_factor_is_idempotent():
    g = _with_factor("h100-sxm", 0.8)
    once = g.under_sustained_load("bf16")
    assert once.calibration.gemm.eta_compute == pytest.approx(g.calibration.gemm.eta_compute * 0.8)
    assert once.calibration.gemm.sustained == 1.0
    assert once.under_sustained_load("bf16") is once
    assert g.under_sustained_load("fp8") is g
    assert _with_factor("h100-sxm", 1.0).under_sustained_load("bf16").calibration.gemm == \
        _with_factor("h100-sxm", 1.0).calibration.gemm


@pytest.mark.parametrize("gpu, weight_dtype, slowed", [("h100-sxm", "bf16", True), ("h100-sxm", "fp8", False),
                                                       ("a100-sxm-80gb", "fp8", True), ("b200", "nvfp4", True)])
def test_gemms_run_at_the_sustained_rate_unless_fp8_on_fp8_units(gpu, weight_dtype, slowed):
    """A long prefill's GEMMs are compute-bound: at factor s their time grows by about 1/s. The fp8
    efficiency is fitted on long rows and keeps its own; fp8 weights without fp8 units run at the
    bf16 rate, and the FP4 efficiency is fitted on rows mostly under a millisecond (burst clocks), so both slow."""
    m = load_model("llama-3.1-70b")
    base = CostModel(m, _with_factor(gpu, 1.0), tp=4, weight_dtype=weight_dtype).linear_time(16384)
    slow = CostModel(m, _with_factor(gpu, 0.8), tp=4, weight_dtype=weight_dtype).linear_time(16384)
    if slowed:
        assert 1.15 < slow / base <= 1.25
    else:
        assert slow == base


def test_the_roofline_ignores_the_factor():
    m = load_model("llama-3.1-8b")
    a = CostModel(m, _with_factor("h100-sxm", 0.5), roofline=True).linear_time(8192)
    b = CostModel(m, _with_factor("h100-sxm", 1.0), roofline=True).linear_time(8192)
    assert a == b


def test_decode_barely_moves():
    """Decode GEMMs stream weights: the compute rate hardly enters (within 3 % at 64 sequences)."""
    m = load_model("llama-3.1-8b")
    base = CostModel(m, _with_factor("h100-sxm", 1.0)).linear_time(64)
    slow = CostModel(m, _with_factor("h100-sxm", 0.9)).linear_time(64)
    assert 1.0 <= slow / base < 1.03


def test_factor_is_the_median_over_stacks_at_most_one():
    r = [sustained.StackRatio("g", s, 30, 30, v) for s, v in (("a", 0.5), ("b", 0.85), ("c", 1.04))]
    assert sustained.factor(r) == 0.85
    assert sustained.factor(r[2:]) == 1.0
    assert sustained.factor([]) == 1.0


def test_the_shipped_factors_are_what_the_rows_read(kernel_tables):
    """Hopper and Blackwell GEMMs slow under sustained load and A100's do not; every profile that
    was fitted carries the factor its rows give (calibration writes it; nothing hand-set)."""
    for name, lo, hi in (("a100-sxm-80gb", 0.97, 1.0), ("h100-sxm", 0.85, 0.95), ("h200", 0.8, 0.93)):
        g = load_hardware(name)
        f = sustained.factor(sustained.stack_ratios(kernel_tables, g))
        assert lo <= f <= hi, (name, f)
        assert g.calibration.gemm.sustained == f


def test_the_page_shows_the_shipped_factors(repo_root):
    """docs/calibration-kernels.md's table states each GPU's factor as its profile carries it."""
    text = (repo_root / "docs" / "calibration-kernels.md").read_text()
    body = text.split("## GEMMs under sustained load")[1].split("\n## ")[0]
    rows = [[c.strip() for c in line.strip().strip("|").split("|")] for line in body.splitlines()
            if line.startswith("| ") and not line.startswith("| GPU")]
    assert len(rows) >= 10
    for gpu, _stack, _nl, _nb, _ratio, factor in rows:
        assert float(factor) == load_hardware(gpu).calibration.gemm.sustained, gpu


def test_a_stacks_own_gemm_fit_keeps_the_gpus_factor():
    """A stack's GEMM override is a fit of its burst rate; the clocks under load stay the GPU's."""
    from simulator.profiles.hardware import RooflineParams, StackKernels

    g = _with_factor("h100-sxm", 0.8)
    own = RooflineParams(eta_compute=0.5, eta_memory=0.9)
    stacks = {"sglang": StackKernels(rule="test", gemm=own)}
    g = g.model_copy(update={"calibration": g.calibration.model_copy(update={"stacks": stacks})})
    assert g.for_kernels("sglang").calibration.gemm.sustained == 0.8
    assert g.for_kernels("sglang").calibration.gemm.eta_compute == 0.5
