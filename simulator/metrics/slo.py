"""A scenario's SLO as the figures read it (parsed by :mod:`simulator.scenario.slo`).

A scenario states its SLO as percentile targets (``ttft_p99_ms: 500``): the
fleet passes when the measured percentile is within the target. vLLM's
goodput, on the other hand, needs *per-request* thresholds ("a request is
good when its TTFT ≤ 500 ms and TPOT ≤ 50 ms"). We reuse the targets as
those thresholds, as the brief and vLLM's ``--goodput ttft:500`` intend, and
also accept vLLM-style plain thresholds (``ttft_ms``) that only feed
goodput; a plain threshold overrides the percentile target for goodput.
When one metric has several percentile targets the highest percentile
supplies the threshold: it is the bound nearly every request must meet.
"""
from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["SloSpec", "PER_REQUEST_METRICS", "LATENCY_METRICS"]

#: Metrics in vLLM's order; ITL has no per-request value, so it can carry a
#: percentile target but cannot enter goodput.
LATENCY_METRICS = ("ttft", "tpot", "itl", "e2el")
PER_REQUEST_METRICS = ("ttft", "tpot", "e2el")


@dataclass
class SloSpec:
    """Percentile targets, in the order the user wrote them, and the
    per-request thresholds (ms) that define a good request."""

    targets: list[tuple[str, str, float, float]] = field(default_factory=list)  # (key, metric, pct, ms)
    thresholds: dict[str, float] = field(default_factory=dict)  # metric -> ms

    def __bool__(self) -> bool:
        return bool(self.targets or self.thresholds)

    def without(self, metric: str) -> "SloSpec":
        """The same SLO less ``metric``'s percentile targets (a per-class block has no ITL)."""
        return SloSpec([t for t in self.targets if t[1] != metric], dict(self.thresholds))
