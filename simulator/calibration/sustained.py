"""GEMMs under sustained load: the compute rate a serving loop's prefill gets.

A kernel row is the mean of a few runs of one captured GEMM (AIConfigurator's
collector: three warm-ups and six timed replays). A short kernel finishes
those before the GPU's power and clock management reacts; a kernel of a
millisecond or more keeps the tensor cores busy for ten or more, long enough
to settle at the clocks the GPU holds under load. The rows show it as a step
in the fit's residual by kernel duration, not by shape: on H100, H200 and
B200, GEMMs measured at ≥ 1 ms run about a tenth slower than the burst-rate
fit of the shorter ones predicts, at every m, while A100's do not. A serving
step's prefill runs its GEMMs back to back for tens of milliseconds, so it
runs at the sustained rate. The engine applies the factor to every GEMM but
fp8 on fp8 tensor cores, whose efficiency is fitted on compute-bound rows,
most of them ≥ 1 ms (``quantised_gemm.fit``), or on end-to-end runs.

The factor is read, not fitted: per stack whose GEMMs were measured on the
GPU, the median of model/measured over the long rows divided by that over
the burst rows (0.1–1 ms), then the median over the stacks (each stack's
table is an independent collection on its own machines; one anomalous
collection does not set the GPU's value), at most 1.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..profiles.hardware import HardwareProfile
from .data import KernelData, kernel_stacks
from .evaluate import PREDICT
from .stacks import grid_rows

LONG_S = 1e-3                  # a row measured this long or longer: its runs outlast the clocks' response
BURST_S = (1e-4, 1e-3)         # rows long enough to be compute-relevant, short enough to run at burst clocks
MIN_ROWS = 20                  # per class, for a stack's ratio to count


@dataclass(frozen=True)
class StackRatio:
    """One stack's GEMM rows on one GPU: sustained over burst rate, as the fit reads them."""

    gpu: str
    stack: str
    n_long: int
    n_burst: int
    ratio: float     # median(model/measured | long) / median(model/measured | burst)


def stack_ratios(kd: KernelData, gpu: HardwareProfile) -> list[StackRatio]:
    """Each stack's ratio on ``gpu``'s bf16 GEMM rows (those with enough rows in both classes)."""
    out = []
    for stack in kernel_stacks():
        rows = grid_rows(kd, stack, "gemm", gpu.name)
        if not len(rows):
            continue
        t = rows["t_s"].to_numpy()
        r = PREDICT["gemm"](rows, gpu, gpu.calibration.gemm) / t
        long, burst = t >= LONG_S, (t >= BURST_S[0]) & (t < BURST_S[1])
        if long.sum() < MIN_ROWS or burst.sum() < MIN_ROWS:
            continue
        out.append(StackRatio(gpu.name, stack, int(long.sum()), int(burst.sum()),
                              float(np.median(r[long]) / np.median(r[burst]))))
    return out


def factor(ratios: list[StackRatio]) -> float:
    """The GPU's ``gemm.sustained``: the median over its stacks, at most 1 (1 without rows)."""
    if not ratios:
        return 1.0
    return round(min(1.0, float(np.median([s.ratio for s in ratios]))), 3)


def markdown(ratios: list[StackRatio], factors: dict[str, float]) -> str:
    lines = ["| GPU | stack | rows ≥ 1 ms | rows 0.1–1 ms | sustained / burst rate | profile's `gemm.sustained` |",
             "|---|---|---:|---:|---:|---:|"]
    for s in ratios:
        lines.append(f"| {s.gpu} | {s.stack} | {s.n_long} | {s.n_burst} | {s.ratio:.3f} | {factors[s.gpu]:.3f} |")
    return "\n".join(lines) + "\n"
