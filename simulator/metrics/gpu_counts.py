"""GPU counts: one definition behind every figure that shows one.

A pool's GPUs are the GPUs it is billed for at each moment: its ready,
starting, warm-standby and draining replicas × GPUs per replica (the pool's
billing log, a step function of time). Over the window [0, end]:

* ``gpus``: the peak, the most billed at once (what must be reserved);
* ``gpus_mean``: GPU-hours / the window's hours (what is paid on average);
* ``gpu_hours``: the integral (what the bill counts).

The fleet's figures are the same three over the sum of its pools' step
functions, so the fleet's peak is at most the sum of the pools' peaks (less
when pools peak at different moments). Report text, results.json, cost.png,
the ladder and ``gpu_timeline`` all read these; none counts GPUs its own way.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from .cost import replica_seconds
from ..fields import leaf

__all__ = ["GpuCount", "gpu_count"]


#: What :meth:`GpuCount.as_dict` writes, for the fleet and for each pool.
FIELDS = {
    "gpus": leaf("GPUs", "peak GPUs billed at once (ready, starting, standby and draining replicas)"),
    "gpus_mean": leaf("GPUs", "GPU-hours / the window's hours"),
    "gpu_hours": leaf("GPU-h", "billed GPU-hours over the run"),
}


@dataclass(frozen=True)
class GpuCount:
    peak: int
    mean: float
    gpu_hours: float

    def as_dict(self) -> dict[str, Any]:
        return {"gpus": self.peak, "gpus_mean": self.mean, "gpu_hours": self.gpu_hours}


def gpu_count(timeline: Sequence[tuple[float, int]], end: float) -> GpuCount:
    """Peak, mean and GPU-hours of a (time, GPUs from then on) step function over [0, ``end``]."""
    steps = [(t, n) for t, n in timeline if t <= end]
    peak = max((n for _, n in steps), default=0)
    gpu_s = replica_seconds(steps, end)
    return GpuCount(int(peak), gpu_s / end if end > 0 else float(peak), gpu_s / 3600.0)
