"""How much work a run asks for, estimated before it starts, and the limits it is held to.

A scenario's numbers set a run's work and memory: requests (each a record
in memory), the simulated span (the fleet's clock ticks over it: timeline
samples, autoscaler evaluations) and the replicas built. A typo in any
of them (``num_requests: 1000000000000``, ``timeline_interval_s: 1e-9``,
a trace row stamped 1e300) would otherwise allocate terabytes or tick for
ever. So the run's size is estimated from the scenario first, and a run
past a limit is refused with the estimate; what only the workload itself
shows (a trace's rows and span, a closed loop's length) is checked once
the arrivals are drawn, and the clock counts its ticks as a last bound.
The limits are listed in docs/scenarios.md ("Limits a run is held to").
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from .errors import LlmsimError

__all__ = ["MAX_REQUESTS", "MAX_SPAN_S", "MAX_CLOCK_TICKS", "MAX_REPLICAS", "MAX_RUNS", "RunSize",
           "estimate_run_size", "check_run_size", "check_arrivals", "check_run_count"]

#: Requests in one run (a sharded run included): ~1 KB of memory each while it runs.
MAX_REQUESTS = 100_000_000
#: Simulated seconds from the first arrival to the last (about three years).
MAX_SPAN_S = 1e8
#: Timeline samples plus autoscaler evaluations over the run.
MAX_CLOCK_TICKS = 2_000_000
#: Replicas of one pool: at start, or an autoscaler's max_replicas, plus its warm standbys.
MAX_REPLICAS = 100_000
#: Runs one sweep or plan makes unless ``--max-runs`` allows more: a grid
#: typo (a list of 10,000 values, an axis 1..1000000 crossed with others)
#: would otherwise queue hours of work.
MAX_RUNS = 1_000


@dataclass(frozen=True)
class RunSize:
    """The scenario's expected requests and simulated span (None: known only once drawn)."""

    requests: Optional[float]
    span_s: Optional[float]
    span_key: str = "workload.duration_s"   # the key most of the span comes from

    def text(self) -> str:
        parts = []
        if self.requests is not None:
            parts.append(f"~{self.requests:,.0f} requests")
        if self.span_s is not None:
            parts.append(f"~{self.span_s:,.4g} simulated seconds")
        return " over ".join(parts) or "unknown size"


def estimate_run_size(sc) -> RunSize:
    """Expected requests and span from the workload's numbers alone (no draws, no trace read)."""
    wl = sc.workload
    arrival = wl.arrival
    if wl.is_trace:
        return RunSize(wl.num_requests, wl.duration_s)
    if wl.closed_loop:
        return RunSize(float(wl.closed_loop_total), None)
    rate = arrival.mean_rate(wl.duration_s)
    per_start, length = 1.0, 0.0     # requests per start, and how long a session lasts on average
    if wl.session is not None:
        s = wl.session
        if s.type == "chat":
            per_start = s.turns.mean()
            length = (per_start - 1) * s.think_time_s.mean()
        elif s.type == "agentic":
            per_start, length = s.requests_per_session(), s.pauses_per_session_s()
        else:
            per_start = s.bursts.mean() * s.keystrokes.mean()
            length = s.bursts.mean() * (s.burst_gap_s.mean() + s.keystrokes.mean() * s.keystroke_gap_s.mean())
            length += s.debounce_ms / 1000.0     # the last request fires a debounce after the last keystroke
        count = wl.num_sessions
    else:
        count = wl.num_requests
    if wl.lead_in_s:       # the lead-in's starts and time come first
        lead_starts, lead_s = arrival.lead_in_count(wl.lead_in_s), wl.lead_in_s
    else:
        lead_starts, lead_s = 0.0, 0.0
    if count is not None:
        starts, span = float(count), count / rate if rate > 0 else None
        key = "workload.arrival.rate_per_s"
    else:
        starts, span = float(arrival.expected_count(wl.duration_s)), wl.duration_s
        key = "workload.duration_s"
    starts += lead_starts
    if span is None:
        return RunSize(starts * per_start, None)
    span += lead_s
    return RunSize(starts * per_start, span + length, "workload.session" if length > span else key)


def _ticks_per_s(sc) -> float:
    rate = 1.0 / sc.timeline_interval_s
    for p in sc.pools:
        if p.autoscaling is not None:
            rate += 1.0 / p.autoscaling.interval_s
    return rate


def _refuse(size: RunSize, why: str, key: str, source) -> None:
    raise LlmsimError(f"this run cannot finish: {size.text()}; {why}", source=source, key_path=key)


def _check(sc, size: RunSize, source, key_requests: str, key_span: str) -> None:
    if size.requests is not None and size.requests > MAX_REQUESTS:
        _refuse(size, f"llmsim simulates at most {MAX_REQUESTS:,} requests in a run", key_requests, source)
    if size.span_s is not None:
        if size.span_s > MAX_SPAN_S:
            _refuse(size, f"llmsim simulates at most {MAX_SPAN_S:g} s (about three years)", key_span, source)
        ticks = size.span_s * _ticks_per_s(sc)
        if ticks > MAX_CLOCK_TICKS:
            # blame the task that ticks fastest: the timeline, or a pool's autoscaler
            rates = [(1.0 / sc.timeline_interval_s, "timeline_interval_s")] + [
                (1.0 / p.autoscaling.interval_s, f"pools[{i}].autoscaling.interval_s")
                for i, p in enumerate(sc.pools) if p.autoscaling is not None]
            _refuse(size, f"timeline samples every {sc.timeline_interval_s:g} s"
                          f"{' and autoscaler evaluations' if any(p.autoscaling for p in sc.pools) else ''} "
                          f"would take ~{ticks:,.0f} clock ticks, more than the {MAX_CLOCK_TICKS:,} allowed: "
                          f"raise timeline_interval_s (or the autoscaler's interval_s)", max(rates)[1], source)


def _check_replicas(pool, at: str, source) -> None:
    """A pool builds its serving replicas (up to the autoscaler's ceiling)
    and, beside them, its warm standbys, so the bound is on their sum. The
    key named is the largest term, the one a typo most likely inflated."""
    a = pool.autoscaling
    serving = {"replicas": pool.replicas}
    if a is not None:     # replicas past max_replicas is refused later, naming both
        serving = {"autoscaling.max_replicas": a.max_replicas, **serving}
    key, most = max(serving.items(), key=lambda kv: kv[1])     # a tie names the first
    terms = {key: most}
    if a is not None and a.warm_pool:
        terms["autoscaling.warm_pool"] = a.warm_pool
    total = sum(terms.values())
    if total > MAX_REPLICAS:
        sum_text = "" if len(terms) == 1 else ": " + " + ".join(f"{k} ({v:,})" for k, v in terms.items())
        key = max(terms, key=terms.__getitem__)
        raise LlmsimError(f"{total:,} replicas in one pool{sum_text}; llmsim builds at most {MAX_REPLICAS:,}",
                          source=source, key_path=f"{at}.{key}")


def check_run_size(sc, source: str | Path | None = None) -> RunSize:
    """Refuse, before anything is drawn or built, a run past a limit; returns the estimate."""
    for i, p in enumerate(sc.pools):
        _check_replicas(p, f"pools[{i}]", source)
    size = estimate_run_size(sc)
    wl = sc.workload
    count_key = ("workload.num_sessions" if wl.session is not None and wl.num_sessions
                 else "workload.num_requests" if wl.num_requests else "workload.duration_s")
    _check(sc, size, source, count_key, size.span_key)
    return size


def check_arrivals(sc, count: int, last_arrival_s: float, source: str | Path | None = None) -> None:
    """The same limits on the arrivals as drawn (a trace's rows and times, sessions' starts)."""
    what = "workload.arrival" if sc.workload.is_trace else "workload"
    _check(sc, RunSize(float(count), float(last_arrival_s)), source, what, what)


def check_run_count(runs: int, what: str, limit: Optional[int] = None, source: str | Path | None = None,
                    key_path: Optional[str] = None, raisable: bool = True) -> None:
    """Refuse a sweep, plan or ladder of more than ``limit`` runs (``--max-runs``
    where ``raisable``, default :data:`MAX_RUNS`); ``what`` says how the count arises."""
    limit = MAX_RUNS if limit is None else limit
    if limit < 1:
        raise LlmsimError(f"must be at least 1 (got {limit})", key_path="--max-runs")
    if runs > limit:
        raise LlmsimError(f"{what}: {runs:,} runs, more than the {limit:,} allowed without --max-runs; narrow "
                          f"it, or give --max-runs {runs}" if raisable else
                          f"{what}: {runs:,} runs, more than the {limit:,} one command makes",
                          source=source, key_path=key_path)
