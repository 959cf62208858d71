"""The parts of a calibration that are *not* fitted, stated in one place.

The kernel tables time single ops inside CUDA graphs, so they say nothing
about the elementwise work between the GEMMs (norms, activation, rotary,
residual adds) or about what vLLM spends per iteration outside the graph
(scheduling, input preparation, sampling, detokenisation hand-off). Both
still cost time in a real server, so rather than leave them at zero they are
set by explicit rules, written into each profile's ``rule`` field and into
docs/calibration.md, and kept apart from the fitted numbers.
"""
from __future__ import annotations

from ..profiles.hardware import RooflineParams

# Assumption, not a fit: vLLM's per-iteration CPU-side time with CUDA graphs
# (scheduler, input prep, sampler, output processing), of the order of 1 ms
# per step for a busy server. Overridable per engine.
ITERATION_OVERHEAD_MS = 1.0

# Elementwise kernels per transformer layer left after vLLM's fusions: two
# fused residual-add + RMSNorm, SiLU-and-mul, rotary embedding.
OTHER_KERNELS_PER_LAYER = 4

ITERATION_OVERHEAD_NOTE = (f"iteration_overhead_ms = {ITERATION_OVERHEAD_MS} is an assumption (vLLM scheduler/"
                           "sampler time per step with CUDA graphs), not fitted: the kernel data excludes it")
SUSTAINED_NOTE = ("gemm.sustained is read, not fitted: per stack, median(model/measured) of the GEMM rows "
                  "measured at ≥ 1 ms over that of the 0.1–1 ms rows, the median over stacks, at most 1 (the rate "
                  "back-to-back GEMMs hold under load; every GEMM but fp8 on fp8 units takes it); a transferred "
                  "GPU takes its sibling's")
OTHER_NOTE = (f"other: eta_memory = gemm.eta_memory (the weight-streaming efficiency), fixed_us = "
              f"{OTHER_KERNELS_PER_LAYER} × gemm.fixed_us ({OTHER_KERNELS_PER_LAYER} elementwise kernels per layer, "
              "each paying the per-kernel floor the GEMM fit measures); a rule, not a fit")


def other_params(gemm: RooflineParams) -> RooflineParams:
    """Elementwise work streams activations like a GEMV streams weights, and
    each of its kernels pays the same per-kernel floor inside a CUDA graph."""
    return RooflineParams(eta_memory=gemm.eta_memory, fixed_us=round(OTHER_KERNELS_PER_LAYER * gemm.fixed_us, 4))
