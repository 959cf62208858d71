"""Percentiles and SLOs by prompt length: the ``llmsim.by_input_length`` block.

A long prompt's TTFT is mostly its own prefill, so one fleet-wide p99 mixes
a few 30K-token prompts with thousands of short ones and says little about
either: a TTFT program states its targets per prompt-length bucket ("p99
≤ 400 ms under 4K tokens, p95 ≤ 2 s over 16K"). ``input_length_buckets``
splits requests at ``edges`` (prompt tokens, the system prompt included)
into [0, e1), [e1, e2), …, [ek, ∞), labelled ``0-4000``, ``4000-16000``,
``16000+``; each bucket gets its counts and latency percentiles, and its
own SLO if declared (checked by ``llmsim check``, required by ``llmsim plan``).
"""
from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from workloads.request import Status
from .records import LATENCY, Records
from .results import compute_results
from .slo import SloSpec
from .results import SLO_FIELDS, latency_fields
from ..fields import block, leaf

__all__ = ["InputLengthBuckets", "input_length_block", "bucket_slo_blocks"]

_KEYS = ("median_ttft_ms", "p95_ttft_ms", "p99_ttft_ms", "median_tpot_ms", "p95_tpot_ms", "p99_tpot_ms",
         "median_e2el_ms", "p99_e2el_ms")


#: ``llmsim.by_input_length``.
FIELDS = {
    "edges": leaf("list of tokens", "input_length_buckets.edges"),
    "buckets": block("per bucket, keyed by its label (0-8000, 16000+)", {"<bucket>": block("one bucket", {
        "input_tokens": leaf("[tokens, tokens]", "the bucket's prompt lengths, [low, high); high null for the last"),
        "requests": leaf("count", "requests in the bucket"), "completed": leaf("count", "finished"),
        "mean_input_tokens": leaf("tokens", "the bucket's mean prompt length: the prompt-length band its own SLO is "
                                            "judged in at a confidence (null for an empty bucket)"),
        **latency_fields(_KEYS, "the bucket's completed requests"),
        "slo": block("the bucket's own SLO, judged", SLO_FIELDS, when="input_length_buckets.slo names the bucket"),
    })}),
}


class InputLengthBuckets(BaseModel):
    """Prompt-length buckets for percentiles and per-bucket SLOs."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    edges: list[int] = Field(min_length=1, description="prompt-token boundaries, increasing: [4000, 16000] gives "
                                                       "buckets 0-4000, 4000-16000 and 16000+")
    slo: dict[str, dict[str, Any]] = Field(
        default_factory=dict, description="targets per bucket label, as the scenario's slo: "
                                          "{0-4000: {ttft_p99_ms: 400}, 16000+: {ttft_p95_ms: 2000}}")

    @field_validator("edges")
    @classmethod
    def _increasing(cls, v: list[int]) -> list[int]:
        if any(e <= 0 for e in v) or any(b <= a for a, b in zip(v, v[1:])):
            raise ValueError(f"edges must be positive and strictly increasing, got {v}")
        return v

    @property
    def labels(self) -> list[str]:
        lo = [0, *self.edges]
        return [f"{a}-{b}" for a, b in zip(lo, self.edges)] + [f"{self.edges[-1]}+"]

    @model_validator(mode="after")
    def _known_labels(self) -> "InputLengthBuckets":
        unknown = [k for k in self.slo if k not in self.labels]
        if unknown:
            raise ValueError(f"slo names bucket(s) {', '.join(map(repr, unknown))}; the buckets of these edges "
                             f"are {', '.join(self.labels)}")
        return self


def input_length_block(requests: Records, spec: InputLengthBuckets, duration: float,
                       slos: Mapping[str, SloSpec] | None = None) -> dict[str, Any]:
    """Each bucket's figures, judged by its SLO (``slos``: the buckets' ``slo`` parsed by the scenario layer)."""
    r = Records.of(requests).select(*LATENCY)
    which = np.searchsorted(np.asarray(spec.edges), r.input_tokens, side="right")
    buckets: dict[str, Any] = {}
    lows = [0, *spec.edges]
    for i, label in enumerate(spec.labels):
        mine = r.where(which == i)
        res = compute_results(mine, None, slo=(slos or {}).get(label), duration=duration)
        block: dict[str, Any] = {"input_tokens": [lows[i], spec.edges[i] if i < len(spec.edges) else None],
                                 "requests": len(mine), "completed": mine.count(Status.FINISHED),
                                 "mean_input_tokens": float(np.mean(mine.input_tokens)) if len(mine) else None}
        block.update({k: res.get(k) for k in _KEYS})
        if "slo" in res:
            block["slo"] = res["slo"]
        buckets[label] = block
    return {"edges": list(spec.edges), "buckets": buckets}


def bucket_slo_blocks(results: Mapping[str, Any]) -> Sequence[tuple[str, dict[str, Any]]]:
    """(label, slo block) of each bucket that declares targets, the block carrying the bucket's
    ``mean_input_tokens``: llmsim's error depends on the prompt length, so a bucket's targets are
    judged at a confidence in the bucket's prompt-length band, not the run's."""
    block = (results.get("llmsim") or {}).get("by_input_length") or {}
    return [(f"SLO input {label}", {**b["slo"], "mean_input_tokens": b.get("mean_input_tokens")})
            for label, b in (block.get("buckets") or {}).items() if "slo" in b]
