"""How the simulated window becomes a month: the scenario's ``cost.monthly``.

A run simulates minutes to days; a budget is monthly. The extrapolation is a
modelling choice, so the scenario states it and results.json repeats it in
words (``llmsim.cost.monthly_basis``) beside the figure:

* ``window``: the window is the steady state, the same load all month: its
  cost per hour × 730 h (8,760 h / 12, as cloud price calculators use).
* ``day``: the window is a sample of whole days (it must simulate a day or
  more): its mean cost per day × 30.42 days (730 h).
* ``peak_window``: the window is one slice of a day whose shape is known
  (usually the peak half hour: the cheap run a capacity plan makes). The
  daily profile (``daily_profile``, an hourly or sinusoid profile written as
  in ``workload.arrival.profile``; unset, the workload's own profile)
  gives each hour h of the day its load relative to the window's,
  ``m_h = mean rate of hour h / mean rate over the window`` (the window's
  spikes included when the profile is the workload's). Each pool then runs,
  in hour h:

  - autoscaled: ``max(min_replicas + warm_pool, (R − warm_pool) · m_h +
    warm_pool)`` replicas, R the window's mean billed replicas: the serving
    ones follow the load, the standbys are kept whatever it is. Not rounded: an autoscaler holds whole
    replicas at each moment but a fractional number on average over an
    hour, as it did over the window. The floor is what it never goes below.
  - fixed (no autoscaling): ``max(1, ceil(R · m_h))``: the fleet is resized
    once an hour (a scheduled scale), to whole replicas, keeping one up.

  Hour h costs Σ replicas × TP × $/GPU-hour; the month is the day × 30.42
  days, as ``day`` makes it. A flat profile thus gives the window's cost
  per hour × 730 h for a fixed fleet, as ``window`` does: one month
  whichever the method (with 30 days here, a static fleet priced by
  ``window`` read 1.4 % dearer than the same fleet by ``day``).
* ``auto`` (the default): ``window`` for a window under a day, else ``day``.

``peak_window`` assumes capacity ∝ load: it ignores that a small fleet
batches less well than a big one and the latency it would then have, and
an hour busier than the window is extrapolated beyond what was simulated
(the basis says how many there are).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal, Optional, Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from workloads.rate_profiles import HourlyProfile, RateProfile, RateSchedule, SinusoidProfile
from ..errors import LlmsimError
from ..fields import block, leaf
from .load import window_text

__all__ = ["HOURS_PER_MONTH", "DAYS_PER_MONTH", "MonthlySpec", "DailyLoad", "MonthRule", "daily_load",
           "monthly_cost", "peak_window_month", "day_shape", "arrival_span", "usage_factor"]


#: The monthly keys :meth:`MonthRule.apply` adds to ``llmsim.cost``.
FIELDS = {
    "monthly_usd": leaf("USD/month", "the bill extrapolated to a month by cost.monthly; null when it cannot be"),
    "monthly_method": leaf("text", "the extrapolation used: window, day or peak_window"),
    "monthly_basis": leaf("text", "the extrapolation in words, with what it assumes"),
    "monthly_hourly": block("the month hour by hour: the window's fleet scaled to each hour's load", {
        "hour_0": leaf("text", "what hour 0 of the daily profile is"),
        "load_multipliers": leaf("list", "each hour's load / the window's"),
        "gpus": leaf("list of GPUs", "each hour's GPUs"),
        "replicas": block("per pool", {"<pool>": leaf("list", "each hour's replicas")}),
        "usd_per_day": leaf("USD/day", "the day's bill"),
    }, when="cost.monthly.method is peak_window"),
}

HOURS_PER_MONTH = 730.0          # 8,760 h / 12, as cloud price calculators use
DAYS_PER_MONTH = HOURS_PER_MONTH / 24.0     # 30.42: the same month counted in days
DAY_S = 86_400.0
HOUR_S = 3_600.0
_ROUND_TOL = 1e-9                # R · m_h within this (relative) of a whole number is that number

Method = Literal["auto", "window", "day", "peak_window"]


class MonthlySpec(BaseModel):
    """How the simulated window is extrapolated to a month."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    method: Method = Field(
        default="auto",
        description="window: the window's cost per hour × 730 h (same load all month); day: the mean simulated "
                    "day × 30.42 (730 h; needs a day or more); peak_window: the window's fleet scaled to each hour "
                    "of the day by daily_profile, the day × 30.42; auto: window under a day, else day")
    daily_profile: Optional[RateProfile] = Field(
        default=None,
        description="peak_window only: the day's shape, on the simulation clock as in workload.arrival.profile "
                    "(hourly, or sinusoid with period_s 86400); unset: the workload's own profile")

    @model_validator(mode="after")
    def _consistent(self) -> "MonthlySpec":
        if self.daily_profile is not None and self.method != "peak_window":
            raise ValueError(f"daily_profile is used by method peak_window only (method is {self.method!r})")
        p = self.daily_profile
        if isinstance(p, SinusoidProfile) and p.period_s != DAY_S:
            raise ValueError(f"a daily profile's sinusoid needs period_s {DAY_S:g} (got {p.period_s:g})")
        return self


@dataclass(frozen=True)
class DailyLoad:
    """Each hour's load over the simulated window's (24 multipliers)."""

    multipliers: tuple[float, ...]
    hour_0: str                 # what hour 0 is
    source: str                 # where the profile comes from, in words


def day_shape(spec: MonthlySpec, workload) -> tuple[Any, Sequence, str]:
    """(profile, spikes, description) the day's shape comes from; ValueError if none."""
    if spec.daily_profile is not None:
        return spec.daily_profile, (), f"the stated {spec.daily_profile.type} daily profile"
    arrival = getattr(workload, "arrival", None)
    p = getattr(arrival, "profile", None)
    if p is None:
        raise ValueError("peak_window needs the day's shape: give a daily_profile (hourly or sinusoid), or a "
                         "rate profile in workload.arrival.profile for it to use")
    if isinstance(p, SinusoidProfile) and p.period_s != DAY_S:
        raise ValueError(f"the workload's sinusoid has period_s {p.period_s:g}, not a day ({DAY_S:g}): "
                         f"give cost.monthly.daily_profile")
    return p, arrival.spikes, f"the workload's {p.type} profile"


def daily_load(profile, spikes: Sequence, window_s: float, source: str = "the daily profile") -> DailyLoad:
    """The 24 hourly multipliers of ``profile`` relative to its mean rate over
    [0, ``window_s``) with ``spikes``. Hour 0 is midnight of an hourly
    profile's clock, the window's start for a sinusoid."""
    if not (window_s > 0 and math.isfinite(window_s)):
        raise ValueError(f"the window must be a finite number of seconds > 0, got {window_s}")
    level = RateSchedule(1.0, profile, spikes).mean_rate(window_s)
    if isinstance(profile, HourlyProfile):
        origin, hour_0 = -profile.start_hour * HOUR_S, "00:00 on the profile's clock"
    else:
        origin, hour_0 = 0.0, "the simulated window's start"
    g = profile.integral(origin + HOUR_S * np.arange(25, dtype=np.float64))
    return DailyLoad(tuple((np.diff(g) / HOUR_S / level).tolist()), hour_0, source)


def _hour_replicas(mean: float, m: float, floor: Optional[int], warm: int = 0) -> float:
    """One pool's replicas in an hour at ``m`` × the window's load (see the module doc): an autoscaled
    pool's serving replicas follow the load and its ``warm`` standbys stay (scaled with the rest, they
    were billed below their count off-peak and above it in an hour busier than the window)."""
    if floor is not None:
        return max(float(floor), max(mean - warm, 0.0) * m + warm)
    x = mean * m
    return float(max(1, math.ceil(x - _ROUND_TOL * max(1.0, x))))


def peak_window_month(pools: Sequence, daily: DailyLoad, window_s: float) -> tuple[float, dict[str, Any]]:
    """(monthly $, per-hour detail) of ``pools`` (``cost.PoolBilling``) whose
    billed replica-seconds over ``window_s`` are scaled hour by hour."""
    replicas = {p.name: [_hour_replicas(p.replica_seconds / window_s, m, p.floor, p.warm) for m in daily.multipliers]
                for p in pools}
    gpus = [sum(replicas[p.name][h] * p.gpus_per_replica for p in pools) for h in range(24)]
    usd = [sum(replicas[p.name][h] * p.gpus_per_replica * p.usd_per_gpu_hour for p in pools) for h in range(24)]
    detail = {"hour_0": daily.hour_0, "load_multipliers": list(daily.multipliers), "gpus": gpus,
              "replicas": replicas, "usd_per_day": sum(usd)}
    return sum(usd) * DAYS_PER_MONTH, detail


def monthly_cost(window_usd: float, window_s: float, method: Method = "auto") -> tuple[Optional[float], str]:
    """The ``window``/``day``/``auto`` extrapolation; returns (usd, basis)."""
    if window_s <= 0:
        return None, "no simulated time to extrapolate from"
    if method == "day" or (method == "auto" and window_s >= DAY_S):
        days = window_s / DAY_S
        return (window_usd / days * DAYS_PER_MONTH,
                f"mean day of the simulated {days:g}-day window × {DAYS_PER_MONTH:.2f} days/month (730 h)")
    return (window_usd / window_s * HOURS_PER_MONTH * 3600.0,
            f"simulated {window_text(window_s)} window extrapolated to {HOURS_PER_MONTH:g} h/month at the same load")


class MonthRule:
    """A scenario's :class:`MonthlySpec` with the workload it may take its profile from."""

    def __init__(self, spec: Optional[MonthlySpec] = None, workload=None) -> None:
        self.spec = spec or MonthlySpec()
        self.workload = workload

    def apply(self, pools: Sequence, window_usd: float, window_s: float) -> dict[str, Any]:
        """``monthly_usd``, ``monthly_method``, ``monthly_basis`` and (peak_window) ``monthly_hourly``."""
        method = self.spec.method
        if method == "day" and 0 < window_s < DAY_S and getattr(self.workload, "duration_s", None) is None:
            # A run sized by num_requests has no duration_s for the scenario's own check (scenario/cost.py).
            raise LlmsimError(f"method day takes the window as a sample of whole days, but the run simulated "
                              f"{window_s:,.0f} s (< {DAY_S:g}): use peak_window with a daily profile, or window, "
                              f"or simulate a day (workload.duration_s: {DAY_S:g})", key_path="cost.monthly.method")
        if method != "peak_window" or window_s <= 0:
            usd, basis = monthly_cost(window_usd, window_s, method)
            resolved = method if method != "auto" else ("day" if window_s >= DAY_S else "window")
            return {"monthly_usd": usd, "monthly_method": resolved, "monthly_basis": basis}
        profile, spikes, source = day_shape(self.spec, self.workload)
        arrivals_s = min(getattr(self.workload, "duration_s", None) or window_s, window_s)
        daily = daily_load(profile, spikes, arrivals_s, source)
        usd, hourly = peak_window_month(pools, daily, window_s)
        m = daily.multipliers
        busier = sum(1 for x in m if x > 1 + _ROUND_TOL)
        basis = (f"peak window: the simulated {window_text(window_s)} window's fleet scaled to each hour of the day by "
                 f"{source} (hour load / window load {min(m):.2f}–{max(m):.2f}); autoscaled pools at their mean "
                 f"serving replicas × that plus their warm standbys, floored at min_replicas + warm_pool; fixed pools resized hourly to whole "
                 f"replicas (≥ 1); the day × {DAYS_PER_MONTH:.2f} days/month (730 h); assumes capacity ∝ load")
        if busier:
            basis += f" ({busier} h busier than the window: extrapolated beyond what was simulated)"
        return {"monthly_usd": usd, "monthly_method": "peak_window", "monthly_basis": basis, "monthly_hourly": hourly}


def arrival_span(rule: "MonthRule", window_s: float, arrivals_s: Optional[float] = None) -> Optional[float]:
    """The time the traffic arrived over: the workload's duration, else ``arrivals_s`` (the last
    arrival; for a trace, whose ``duration_s`` only cuts the replay, always); None when there is none.
    The month's usage and every per-unit figure are read over it, so that the drain after it does not
    count as time the load was offered. It is not cut at the run's end: a light load whose last request
    ended before its duration was offered over the whole duration (5 requests over 500 s read their
    price 6 % low over the 468 s the run lasted)."""
    if window_s <= 0:
        return None
    workload = rule.workload
    stated = None if getattr(workload, "is_trace", False) else getattr(workload, "duration_s", None)
    span = stated or arrivals_s or window_s
    return span if span > 0 else None


def usage_factor(rule: "MonthRule", window_s: float, arrivals_s: Optional[float] = None) -> Optional[float]:
    """The month's usage (tokens, requests) over the window's, by the same
    rule as the bill: per hour × 730, per day × 30.42, or (peak_window) each
    hour of the day at its load relative to the window's, × 30.42 days. The
    window's usage arrived over ``arrivals_s`` (the workload's duration, or
    the last arrival), not over the drain after it: extrapolated over the
    whole window, a 20-second load run 24 seconds read 17 % less a month."""
    span = arrival_span(rule, window_s, arrivals_s)
    if span is None:
        return None
    if rule.spec.method != "peak_window":
        return monthly_cost(1.0, span, rule.spec.method)[0]
    profile, spikes, source = day_shape(rule.spec, rule.workload)
    daily = daily_load(profile, spikes, span, source)
    return sum(daily.multipliers) * HOUR_S * DAYS_PER_MONTH / span
