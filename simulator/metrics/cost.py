"""What a run costs: GPU-hours billed, $ per month and per token, sessions per GPU.

The ``cost`` block of results.json's ``llmsim`` section is built in two
steps, so that several pools and autoscaling only change the inputs:

1. :func:`pool_billing` prices one pool and bills it for the replica-seconds
   of a **replica-count timeline** (:func:`replica_seconds`). A fixed pool's
   timeline is ``[(0, replicas)]``, which bills replicas × simulated span; an
   autoscaler will hand over its own timeline of (time, replicas) steps.
2. :func:`cost_block` adds the pools up and divides by what they served.

Definitions:

* **price**: the pool's ``usd_per_gpu_hour`` when the scenario sets it
  (``price_source: scenario``), else the GPU profile's ``price`` (``profile``);
  a profile price whose ``source`` says it is an assumption (or gives no
  source) is flagged ``price_assumed``.
* **window**: simulation time 0 to the end of the last request, or to the
  end of the arrival window the scenario states (``duration_s``, a trace's
  replay window) where that is later (``llmsim.simulated_seconds``,
  :func:`simulator.runner.run_end`): the span every pool is billed for. A
  fleet stands, and is paid for, through a quiet end of its window; an
  autoscaled pool at the replicas its autoscaler keeps then.
* **monthly cost**: as the scenario's ``cost.monthly`` says
  (:mod:`simulator.metrics.monthly`): by default the window's cost per hour
  × 730 h/month (the same load all month), or for a window of a day or more
  its mean cost per day × 30.42 (730 h); ``peak_window`` scales the window's fleet to
  each hour of a daily profile. ``monthly_method`` names the method,
  ``monthly_basis`` says it in words with its assumption.
* **tokens** are those of finished requests (``total_input_tokens`` and
  ``total_output_tokens``); the input count includes prefix-cache hits, as
  the prompt was sent. Work spent on rejected, cancelled or unfinished
  requests is paid for by the finished ones.
* **per-unit prices** ($ per token, request, session) are the monthly bill
  over the month's usage: the window's usage extrapolated by the same
  ``cost.monthly`` rule over the **arrival span** (the workload's duration,
  a trace's replay window, or the last arrival), as ``cost.api``
  extrapolates it, not over the drain
  after it. A price × the month's usage is then ``monthly_usd``. Under
  ``window`` and ``day`` this is the window's cost per hour × the arrival
  span ÷ its usage; divided by the whole window's bill instead, a 60 s load
  that took 125 s to drain read twice its price.
* **input vs output split** (``token_split``): the API price-list convention.
  An output token is priced at ``output_weight`` (default 4) × an input
  token — the ratio of most price lists (GPT-4o, GPT-4.1: 4×; Claude: 5×),
  and roughly a decode token's GPU time against a prefill token's on a busy
  fleet — so that ``input_tokens × $/in + output_tokens × $/out = cost``
  exactly. ``usd_per_million_tokens`` is the unweighted blend.
* **sessions** (requests with ``session ≥ 0``): a session is active from its
  first request's arrival to its last request's end (its finish stamp; a
  request still in flight counts until the window's end), as a half-open
  interval clipped to the window (a session a warm start's lead-in began
  is active from t = 0). ``mean_active`` and ``mean_per_gpu`` read
  the arrival span: its session-seconds over its length, and over the
  GPU-seconds billed at the window's mean rate for it; ``peak_per_gpu`` the most sessions active at once over
  the pools' configured GPUs (exact for fixed pools; an autoscaled pool will
  want the GPU count at the peak instead).
  ``usd_per_session`` divides the cost (as the per-unit prices above) by the
  sessions with at least one finished request.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Optional, Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from workloads.request import Request, Status
from .api_pricing import ApiPricingSpec
from .monthly import (DAYS_PER_MONTH, HOURS_PER_MONTH, MonthlySpec, MonthRule, arrival_span, monthly_cost,
                      usage_factor)
from .records import Records, session_spans
from ..fields import block, leaf
from . import api_pricing, monthly

__all__ = ["HOURS_PER_MONTH", "DAYS_PER_MONTH", "DEFAULT_OUTPUT_WEIGHT", "CostSpec", "PoolBilling", "SessionLoad",
           "replica_seconds", "pool_price", "pool_billing", "session_load", "monthly_cost", "cost_block"]

DEFAULT_OUTPUT_WEIGHT = 4.0


class CostSpec(BaseModel):
    """The scenario's ``cost`` block: how the bill is reported."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    monthly: MonthlySpec = Field(default_factory=MonthlySpec,
                                 description="how the simulated window becomes a month (monthly_usd)")
    api: Optional[ApiPricingSpec] = Field(
        default=None, description="a provider's per-token prices: llmsim.cost.api prices the completed requests "
                                  "with and without prompt caching beside the self-hosted bill")


def replica_seconds(timeline: Sequence[tuple[float, int]], end: float) -> float:
    """∫ replicas dt over [0, end] of a step function: ``timeline`` lists
    (time, replicas from then on) in time order; before its first step there
    are none. A fixed pool is ``[(0.0, replicas)]``."""
    times = [t for t, _ in timeline]
    if times != sorted(times):
        raise ValueError(f"replica timeline must be in time order, got times {times}")
    total = 0.0
    for (t, n), t_next in zip(timeline, [*times[1:], end]):
        lo, hi = max(t, 0.0), min(t_next, end)
        if hi > lo:
            total += n * (hi - lo)
    return total


@dataclass(frozen=True)
class PoolBilling:
    """One pool's price and the replica-seconds it is billed for."""

    name: str
    gpu: str
    gpus_per_replica: int
    replicas: int                       # configured (an autoscaled pool: its maximum)
    usd_per_gpu_hour: float
    price_source: str                   # "scenario" or "profile"
    price_assumed: bool
    price_note: str
    replica_seconds: float
    floor: Optional[int] = None         # an autoscaled pool's fewest billed replicas (min + warm); None = fixed
    warm: int = 0                       # its warm standbys, billed whatever the load

    @property
    def gpus(self) -> int:
        return self.replicas * self.gpus_per_replica

    @property
    def gpu_seconds(self) -> float:
        return self.replica_seconds * self.gpus_per_replica

    @property
    def usd(self) -> float:
        return self.gpu_seconds / 3600.0 * self.usd_per_gpu_hour

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "gpu": self.gpu, "gpus_per_replica": self.gpus_per_replica,
                "replicas": self.replicas, "gpus": self.gpus, "usd_per_gpu_hour": self.usd_per_gpu_hour,
                "price_source": self.price_source, "price_assumed": self.price_assumed,
                "price_note": self.price_note, "replica_seconds": self.replica_seconds,
                "gpu_hours": self.gpu_seconds / 3600.0, "usd": self.usd}


def _is_assumption(source: str) -> bool:
    return not source.strip() or source.strip().lower().startswith("assum")


def pool_price(spec, gpu) -> tuple[float, str, bool, str]:
    """(usd_per_gpu_hour, source, assumed, note) of a ``PoolSpec`` on a
    ``HardwareProfile``: the scenario's override wins over the profile."""
    prof = gpu.price
    if spec.usd_per_gpu_hour is not None:
        note = f"scenario override (the {gpu.name} profile says {prof.usd_per_gpu_hour:g})"
        return float(spec.usd_per_gpu_hour), "scenario", False, note
    return float(prof.usd_per_gpu_hour), "profile", _is_assumption(prof.source), prof.source


def pool_billing(spec, gpu, timeline: Sequence[tuple[float, int]], end: float) -> PoolBilling:
    """Bill a pool (``PoolSpec`` on ``HardwareProfile`` ``gpu``) for its
    replica-count ``timeline`` over the window [0, ``end``]."""
    usd, source, assumed, note = pool_price(spec, gpu)
    peak = max((n for t, n in timeline if t <= end), default=spec.replicas)
    a = spec.autoscaling
    return PoolBilling(spec.name, gpu.name, spec.gpus_per_replica, peak, usd, source, assumed, note,
                       replica_seconds(timeline, end), None if a is None else a.min_replicas + a.warm_pool,
                       0 if a is None else a.warm_pool)


@dataclass(frozen=True)
class SessionLoad:
    sessions: int              # sessions that sent a request
    served: int                # ... with at least one finished request
    session_seconds: float     # Σ active time within the window
    peak_active: int
    peak_per_gpu: Optional[float] = None   # max over time of active sessions / GPUs billed then
    span_seconds: Optional[float] = None   # Σ active time within the arrival span, when one is given


def session_load(requests: "Records | Iterable[Request]", window_s: float,
                 gpu_timeline: Optional[Sequence[tuple[float, int]]] = None,
                 span_s: Optional[float] = None, began_before: Sequence[int] = ()) -> SessionLoad:
    """Active-session intervals (see the module docstring) and their overlap;
    with a GPU-count timeline, ``peak_active`` is replaced by the peak of
    active sessions per GPU × GPUs at that moment (returned as ``peak_per_gpu``).
    With ``span_s``, the active time within [0, ``span_s``] too: the mean is read
    over the arrival span, as the drain after it has sessions ending and none starting.
    A session of ``began_before`` had a request before t = 0 (a warm start's lead-in, not among
    ``requests``): it is active from 0, not from its first request here, a think time into the window."""
    rec = Records.of(requests)
    mine = rec.session >= 0
    sid, arrival, finish = rec.session[mine], rec.arrival[mine], rec.finish[mine]
    end = np.where(np.isfinite(finish), finish, window_s)
    sessions, first_seen, _, lo, hi = session_spans(sid, arrival, end)
    if len(began_before):
        lo[np.isin(sessions, np.asarray(began_before))] = 0.0
    served = np.unique(sid[rec.status[mine] == int(Status.FINISHED)]).size
    order = np.argsort(first_seen, kind="stable")   # sessions in order of first appearance, as summed before
    lo, hi = np.maximum(lo[order], 0.0), np.minimum(hi[order], window_s)
    live = hi > lo
    total = 0.0
    for a, b in zip(lo[live].tolist(), hi[live].tolist()):
        total += b - a
    in_span = None if span_s is None else float(np.clip(np.minimum(hi[live], span_s) - lo[live], 0.0, None).sum())
    events = sorted([(a, 1) for a in lo[live].tolist()] + [(b, -1) for b in hi[live].tolist()])
    # at equal times an end (-1) sorts before a start
    active = peak = 0
    per_gpu = 0.0
    steps = list(gpu_timeline or [])
    j, gpus = 0, 0
    for t, d in events:
        while j < len(steps) and steps[j][0] <= t:
            gpus = steps[j][1]
            j += 1
        active += d
        peak = max(peak, active)
        if gpus:
            per_gpu = max(per_gpu, active / gpus)
    return SessionLoad(int(sessions.size), int(served), total, peak, per_gpu if steps else None, in_span)


def _pool_month(pool: PoolBilling, month: Mapping[str, Any], window_usd: float) -> dict[str, Any]:
    """The pool's part of the month: its own hourly replicas under peak_window (pools scale apart, a
    pool held at its floor all day against one that follows the load), else its share of the window's
    bill, which every other method scales alike."""
    total = month.get("monthly_usd")
    if total is None:
        return {}
    hourly = month.get("monthly_hourly")
    if hourly is not None:
        day = sum(hourly["replicas"][pool.name]) * pool.gpus_per_replica * pool.usd_per_gpu_hour
        return {"monthly_usd": day * monthly.DAYS_PER_MONTH}
    return {"monthly_usd": total * pool.usd / window_usd if window_usd else 0.0}


def _per(num: float, den: float, scale: float = 1.0) -> Optional[float]:
    return num / den * scale if den else None


_POOL_BILL = {
    "name": leaf("text", "the pool"), "gpu": leaf("text", "its GPU"),
    "gpus_per_replica": leaf("GPUs", "tp × pp × dp"), "replicas": leaf("count", "the most replicas billed at once"),
    "gpus": leaf("GPUs", "replicas × gpus_per_replica: the pool's peak"), "usd_per_gpu_hour": leaf("USD/GPU-h", "the price"),
    "price_source": leaf("text", "scenario (the pool's usd_per_gpu_hour) or profile (the GPU profile's price)"),
    "price_assumed": leaf("bool", "the profile says its price is an assumption, or gives no source"),
    "price_note": leaf("text", "the profile's source for the price"),
    "replica_seconds": leaf("replica-s", "replica-seconds billed"), "gpu_hours": leaf("GPU-h", "GPU-hours billed"),
    "usd": leaf("USD", "the pool's bill for the window"),
    "monthly_usd": leaf("USD/month", "the pool's share of monthly_usd, by the same extrapolation (peak_window: "
                                     "its own hourly replicas)", when="monthly_usd is not null"),
}
_SESSIONS = {
    "count": leaf("count", "sessions that sent a request"),
    "served": leaf("count", "sessions with at least one request served"),
    "mean_active": leaf("sessions", "session-seconds within the arrival span / its length"),
    "peak_active": leaf("sessions", "most active at once"),
    "mean_per_gpu": leaf("sessions/GPU", "session-seconds within the arrival span / the GPU-seconds billed for it "
                                         "(the window's × the arrival span / window_s)"),
    "peak_per_gpu": leaf("sessions/GPU", "most sessions active at once per GPU billed then"),
}

#: ``llmsim.cost`` (definitions in the module docstring).
FIELDS = {
    "pools": block("each pool's bill", _POOL_BILL, unit="list of objects"),
    "price_assumed": leaf("bool", "a pool's price is an assumption"),
    "window_s": leaf("s", "the billed window: simulation start to the last request's end, or to the end of the "
                          "stated arrival window (duration_s, a trace's replay window) where that is later"),
    "gpu_hours": leaf("GPU-h", "GPU-hours billed over the window"),
    "window_usd": leaf("USD", "the window's bill"),
    "usd_per_hour": leaf("USD/h", "window_usd per hour of the window"),
    **monthly.FIELDS,
    "token_split": leaf("text", "how input and output tokens share the bill"),
    "output_weight": leaf("ratio", "an output token's price / an input token's"),
    "usd_per_million_input_tokens": leaf("USD/Mtok", "price per million input tokens under the split, on the "
                                                     "basis of usd_per_million_tokens"),
    "usd_per_million_output_tokens": leaf("USD/Mtok", "price per million output tokens under the split, on the "
                                                      "basis of usd_per_million_tokens"),
    "usd_per_million_tokens": leaf("USD/Mtok", "monthly_usd per million tokens of the month's usage, input and output "
                                               "alike: the finished tokens extrapolated as the bill is, over the "
                                               "arrival span (the workload's duration, a trace's replay window, or the last arrival; not the "
                                               "drain after it), as cost.api's are; under window and day, the "
                                               "window's cost per hour × the arrival span / its tokens. monthly_usd "
                                               "null: window_usd / the tokens"),
    "usd_per_request": leaf("USD", "monthly_usd / the month's finished requests, on the basis of "
                                   "usd_per_million_tokens"),
    "usd_per_session": leaf("USD", "monthly_usd / the month's sessions served, on the basis of "
                                   "usd_per_million_tokens; null without sessions"),
    "requests_per_gpu_second": leaf("req/GPU-s", "finished requests / the GPU-seconds billed for the arrival span "
                                                 "(the window's × the arrival span / window_s)"),
    "sessions_per_gpu_peak": leaf("sessions/GPU", "sessions.peak_per_gpu; null without sessions"),
    "sessions_per_gpu_mean": leaf("sessions/GPU", "sessions.mean_per_gpu; null without sessions"),
    "sessions": block("sessions' load on the fleet; null without sessions", _SESSIONS),
    "gpu_timeline": leaf("list of [s, GPUs]", "the fleet's billed GPUs, a step at each change"),
    "api": block("what the same tokens would cost at a hosted API", api_pricing.FIELDS, when="cost.api is set"),
}


def cost_block(pools: Sequence[PoolBilling], requests: "Records | Sequence[Request]", window_s: float,
               output_weight: float = DEFAULT_OUTPUT_WEIGHT,
               gpu_timeline: Optional[Sequence[tuple[float, int]]] = None,
               monthly: Optional[MonthRule] = None, arrivals_s: Optional[float] = None,
               began_before: Sequence[int] = ()) -> dict[str, Any]:
    """The ``llmsim.cost`` block: per-pool bills and the fleet's totals over
    the window [0, ``window_s``] (definitions in the module docstring);
    ``monthly`` is the scenario's extrapolation (default: ``auto``);
    ``arrivals_s`` the last arrival, for a workload without a duration;
    ``began_before`` the sessions a warm start's lead-in began (:func:`session_load`)."""
    if output_weight <= 0:
        raise ValueError(f"output_weight must be > 0, got {output_weight}")
    usd = sum(p.usd for p in pools)
    gpu_s = sum(p.gpu_seconds for p in pools)
    gpus = sum(p.gpus for p in pools)
    rec = Records.of(requests)
    done = rec.finished
    tin = int(rec.input_tokens[done].sum())
    tout = int(rec.output_tokens[done].sum())
    rule = monthly or MonthRule()
    month = rule.apply(pools, usd, window_s)
    span = arrival_span(rule, window_s, arrivals_s) or window_s
    # What the served usage is billed: the month's bill over the month's usage (both by cost.monthly, the usage
    # over the arrival span as cost.api's is), so that a per-unit price × the month's usage = monthly_usd.
    factor = usage_factor(rule, window_s, arrivals_s)
    billed = month["monthly_usd"] / factor if month.get("monthly_usd") is not None and factor else usd
    span_gpu_s = gpu_s * span / window_s if window_s > 0 else gpu_s
    unit = _per(billed, tin + output_weight * tout, 1e6)
    sl = session_load(rec, window_s, gpu_timeline, span, began_before)
    peak_per_gpu = sl.peak_per_gpu if sl.peak_per_gpu is not None else _per(sl.peak_active, gpus)
    sessions = None if not sl.sessions else {
        "count": sl.sessions,
        "served": sl.served,
        "mean_active": _per(sl.span_seconds, span),
        "peak_active": sl.peak_active,
        "mean_per_gpu": _per(sl.span_seconds, span_gpu_s),
        "peak_per_gpu": peak_per_gpu,
    }
    return {
        "pools": [{**p.as_dict(), **_pool_month(p, month, usd)} for p in pools],
        "price_assumed": any(p.price_assumed for p in pools),
        "window_s": window_s,
        "gpu_hours": gpu_s / 3600.0,
        "window_usd": usd,
        "usd_per_hour": _per(usd, window_s, 3600.0),
        **month,
        "token_split": f"output token priced at {output_weight:g}× an input token (API price-list convention)",
        "output_weight": output_weight,
        "usd_per_million_input_tokens": unit,
        "usd_per_million_output_tokens": None if unit is None else unit * output_weight,
        "usd_per_million_tokens": _per(billed, tin + tout, 1e6),
        "usd_per_request": _per(billed, int(np.count_nonzero(done))),
        "usd_per_session": _per(billed, sl.served) if sl.sessions else None,
        "requests_per_gpu_second": _per(int(np.count_nonzero(done)), span_gpu_s),
        "sessions_per_gpu_peak": sessions and sessions["peak_per_gpu"],
        "sessions_per_gpu_mean": sessions and sessions["mean_per_gpu"],
        "sessions": sessions,
        "gpu_timeline": [list(x) for x in gpu_timeline] if gpu_timeline is not None else None,
    }
