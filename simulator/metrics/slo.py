"""SLO parsing and evaluation.

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

import math
import re
from dataclasses import dataclass, field
from typing import Any, Mapping

from ..errors import LlmsimError

__all__ = ["SloSpec", "parse_slo", "PER_REQUEST_METRICS", "LATENCY_METRICS"]

#: Metrics in vLLM's order; ITL has no per-request value, so it can carry a
#: percentile target but cannot enter goodput.
LATENCY_METRICS = ("ttft", "tpot", "itl", "e2el")
PER_REQUEST_METRICS = ("ttft", "tpot", "e2el")

_TARGET = re.compile(r"^(ttft|tpot|itl|e2el)_p(\d+(?:\.\d+)?)_ms$")
_PLAIN = re.compile(r"^(ttft|tpot|e2el)_ms$")


@dataclass
class SloSpec:
    """Percentile targets, in the order the user wrote them, and the
    per-request thresholds (ms) that define a good request."""

    targets: list[tuple[str, str, float, float]] = field(default_factory=list)  # (key, metric, pct, ms)
    thresholds: dict[str, float] = field(default_factory=dict)  # metric -> ms

    def __bool__(self) -> bool:
        return bool(self.targets or self.thresholds)


def _number(key: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        text = "the text " if isinstance(value, str) else ""
        raise LlmsimError(f"expected a number of milliseconds, got {text}{value!r}", key_path=f"slo.{key}")
    v = float(value)
    if not math.isfinite(v) or v < 0:
        raise LlmsimError(f"expected a finite, non-negative number of milliseconds, got {value!r}",
                          key_path=f"slo.{key}")
    return v


def parse_slo(slo: Mapping[str, Any] | None) -> SloSpec:
    """Validate an SLO mapping; unknown keys are user errors, not ignored,
    since a misspelt target would otherwise pass every check silently."""
    spec = SloSpec()
    if not slo:
        return spec
    plain: dict[str, float] = {}
    from_targets: dict[str, tuple[float, float]] = {}
    for key, value in slo.items():
        m = _TARGET.match(str(key))
        if m:
            metric, pct = m.group(1), float(m.group(2))
            if not 0.0 < pct <= 100.0:
                raise LlmsimError("the percentile in a target must be in (0, 100]", key_path=f"slo.{key}")
            ms = _number(key, value)
            spec.targets.append((str(key), metric, pct, ms))
            if metric in PER_REQUEST_METRICS and pct >= from_targets.get(metric, (-1.0, 0.0))[0]:
                from_targets[metric] = (pct, ms)
            continue
        m = _PLAIN.match(str(key))
        if m:
            plain[m.group(1)] = _number(key, value)
            continue
        raise LlmsimError("unknown SLO key; expected <metric>_p<percentile>_ms (metric one of "
                          "ttft, tpot, itl, e2el; e.g. ttft_p99_ms) or a per-request threshold "
                          "ttft_ms / tpot_ms / e2el_ms", key_path=f"slo.{key}")
    _refuse_inverted(spec.targets)
    for metric in PER_REQUEST_METRICS:
        if metric in plain:
            spec.thresholds[metric] = plain[metric]
        elif metric in from_targets:
            spec.thresholds[metric] = from_targets[metric][1]
    return spec


def _refuse_inverted(targets: list[tuple[str, str, float, float]]) -> None:
    """A higher percentile of one metric is never below a lower one, so a
    target that asks it to be (``ttft_p50_ms: 1000`` with ``ttft_p99_ms: 100``)
    is a typo: the lower target could never bind, and the SLO would be
    judged on something the user did not mean."""
    for key, metric, pct, ms in targets:
        for key2, metric2, pct2, ms2 in targets:
            if metric2 == metric and pct2 > pct and ms2 < ms:
                raise LlmsimError(f"{ms:g} ms is above the {key2} target of {ms2:g} ms: a p{pct:g} can never "
                                  f"exceed the p{pct2:g}, so one of the two is a typo", key_path=f"slo.{key}")
