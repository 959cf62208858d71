"""Held against a baseline: did a tracked metric move beyond its tolerance, and which way?

A simulation with a fixed seed is deterministic, so any move at all means
the code, the profiles or the scenario changed; the tolerance says how much
of a move is not worth failing a build over. A move in the bad direction
(see :func:`diff.worse_direction`) beyond it fails; so does any move of a
metric without a direction, since the user chose to track it and nobody
can say the move is harmless. Improvements pass, flagged so that someone
refreshes the baseline and the gain is locked in.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Optional

from .diff import worse_direction

__all__ = ["Verdict", "judge", "rounded"]

#: Significant digits kept in a baseline: enough for any tolerance worth
#: setting, few enough that a refreshed baseline diffs only where it moved.
DIGITS = 6


def rounded(v: Any) -> Any:
    """A value as stored in a baseline (and compared: both sides alike)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return v
    if isinstance(v, int) or not math.isfinite(v) or v == 0:
        return v
    return float(f"{v:.{DIGITS}g}")


@dataclass(frozen=True)
class Verdict:
    metric: str
    baseline: Any
    now: Any
    rel: Optional[float]            # (now − baseline)/|baseline|; ±inf from a zero baseline
    tolerance: float
    verdict: str                    # ok, regressed, moved, improved, new, measured, missing
    failed: bool


def _as_float(v: Any) -> Optional[float]:
    return float(v) if isinstance(v, (bool, int, float)) else None


def judge(metric: str, baseline: Any, now: Any, tolerance: float, *, in_baseline: bool = True) -> Verdict:
    """The verdict on one tracked metric (values as in results.json; None
    when a statistic had no samples)."""
    now = rounded(now)
    b, n = _as_float(baseline), _as_float(now)
    if n is not None and math.isnan(n):     # never worse than anything: it would pass every tolerance
        now, n = None, None
    if not in_baseline:
        return Verdict(metric, None, now, None, tolerance, "new", False)
    if b is None or n is None:
        # null: no samples (a p99 TPOT of one-token answers); measured now, or no longer
        same = b is None and n is None
        return Verdict(metric, baseline, now, None, tolerance, "ok" if same else "missing" if n is None else "measured",
                       not same and n is None)
    if b == n:
        rel = 0.0
    else:
        rel = (n - b) / abs(b) if b else math.copysign(math.inf, n - b)
    if abs(rel) <= tolerance:
        return Verdict(metric, baseline, now, rel, tolerance, "ok", False)
    direction = worse_direction(metric)
    if direction == 0:
        return Verdict(metric, baseline, now, rel, tolerance, "moved", True)
    if rel * direction > 0:
        return Verdict(metric, baseline, now, rel, tolerance, "regressed", True)
    return Verdict(metric, baseline, now, rel, tolerance, "improved", False)
