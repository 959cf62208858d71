"""The scenario's ``check`` block: how ``llmsim check`` runs it in CI.

A scenario sized for a capacity answer can take minutes; a CI job wants
seconds and a handful of numbers that mean "the product still meets its
SLO at the same cost". The block shrinks the run with overlays (same key
paths as ``--set``) and names the results.json keys to hold against the
committed baseline, with a relative tolerance where the default is wrong
for a metric (a p99 over 500 requests moves more than a median).
"""
from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, model_validator

from .variants import Overlay

__all__ = ["CheckSpec", "DEFAULT_METRICS"]

#: Tracked when a scenario names none: the latencies an SLO is written in,
#: what the fleet served, and what it costs.
DEFAULT_METRICS = (
    "median_ttft_ms", "p95_ttft_ms", "p99_ttft_ms", "median_tpot_ms", "p99_tpot_ms", "p99_e2el_ms",
    "request_throughput", "failed", "llmsim.gpus", "llmsim.cost.usd_per_request", "llmsim.cost.monthly_usd",
)


class CheckSpec(BaseModel):
    """Fast settings and tracked metrics for `llmsim check`."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    set: Overlay = Field(default_factory=dict,
                         description="key.path: value overlays that shrink the run for CI (workload.num_requests: 500)")
    metrics: list[str] = Field(default_factory=lambda: list(DEFAULT_METRICS), min_length=1,
                               description="results.json keys held against the baseline, dotted for nested "
                                           "ones (llmsim.cost.usd_per_request); default: TTFT/TPOT/E2EL "
                                           "percentiles, throughput, failures, GPUs and cost")
    tolerance: dict[str, Annotated[float, Field(ge=0)]] = Field(
        default_factory=dict, description="relative tolerance per metric (p99_ttft_ms: 0.1), over --tolerance")

    @model_validator(mode="after")
    def _tolerances_name_tracked_metrics(self) -> "CheckSpec":
        # A tolerance for an untracked metric is a typo that would loosen nothing.
        stray = [m for m in self.tolerance if m not in self.metrics]
        if stray:
            raise ValueError(f"tolerance given for metrics not tracked: {', '.join(stray)} "
                             f"(tracked: {', '.join(self.metrics)})")
        return self
