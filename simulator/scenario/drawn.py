"""What a scenario can only be checked on once its arrivals are drawn.

A trace's rows, times and classes are in its file, not in the scenario, so
:func:`~simulator.scenario.compile.compile_scenario` cannot see them. Both
a run (:func:`simulator.runner.simulate`) and a plan or sweep's precheck
(:mod:`simulator.planning.precheck`, which must refuse what a run would
refuse, before any run) hold the drawn source to the same checks, so they
live here, below both.
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional

from ..errors import LlmsimError, first_few
from ..fleet.classes import DEFAULT
from ..runsize import check_arrivals
from .schema import Scenario
from workloads.drivers import Source
from workloads.traces import resolve_trace_path

__all__ = ["check_source"]


def check_source(sc: Scenario, src: Source, source: str | Path | None, folder: Optional[Path],
                 whole: bool = True) -> None:
    """Refuse arrivals ``sc`` cannot run: past the run-size limits, a
    trace naming classes the scenario does not declare, or a spike no
    arrival reaches. ``source`` (the scenario file) and ``folder`` (its
    folder, where a relative trace path resolves) are what the errors name;
    ``whole``: ``src`` holds every arrival, not a shard's share of them,
    whose last may come before the whole's."""
    _check_drawn(sc, src, source)
    _check_trace_classes(sc, src, folder)
    if whole:
        _check_spikes_reached(sc, src, source)


def _check_spikes_reached(sc: Scenario, src: Source, source: str | Path | None) -> None:
    """A workload sized by its count (``num_requests``, ``num_sessions``) stops drawing at its last
    arrival: a spike starting after it multiplies a rate nothing is drawn from, and changed nothing
    without a word, as one past ``duration_s`` would (:class:`workloads.spec.WorkloadSpec` refuses that
    one before any draw; this one is known only once the arrivals are)."""
    wl = sc.workload
    spikes = getattr(wl.arrival, "spikes", ())
    if not spikes or wl.duration_s is not None or wl.closed_loop or wl.is_trace:
        return
    starts = getattr(src, "starts", None)
    times = starts if starts is not None else [r.arrival for r in src.requests]
    if not times:
        return
    last, sessions = times[-1], starts is not None
    key, what = ("num_sessions", "session start") if sessions else ("num_requests", "arrival")
    for i, spike in enumerate(spikes):
        if spike.start_s >= last:
            raise LlmsimError(
                f"{spike.start_s:g} s is at or after the last {what}: the {len(times):,} {what}s "
                f"(workload.{key}) drawn at seed {sc.seed} end at {last:,.4g} s, so no {what} meets the spike and "
                f"it would change nothing; start it before then, or raise workload.{key} (or size the run by "
                f"time, workload.duration_s) to reach it", source=source,
                key_path=f"workload.arrival.spikes[{i}].start_s")


def _check_drawn(sc: Scenario, src: Source, source: str | Path | None) -> None:
    """The run-size limits on the arrivals as drawn: a trace's rows and times, sessions' starts."""
    starts = getattr(src, "starts", None)
    if starts is not None:
        if starts:
            check_arrivals(sc, len(starts), starts[-1], source)
    elif not sc.workload.closed_loop and src.requests:
        check_arrivals(sc, len(src.requests), src.requests[-1].arrival, source)


def _check_trace_classes(sc: Scenario, src: Source, folder: Optional[Path]) -> None:
    """A trace that names its requests' classes names declared ones: a class
    the scenario does not declare (a typo of a tenant's name) would otherwise
    be spread over the declared classes by share, under another class's SLO
    and limits; in a scenario declaring none, every row would run as one
    class, the tenants the file names getting no SLO or limit of their own.
    Rows naming none are spread so, as documented."""
    if sc.workload.arrival.type != "trace":
        return
    declared = {c.name for c in sc.classes}
    named: dict[str, int] = {}
    for r in src.requests:
        if r.klass != DEFAULT.name and r.klass not in declared:
            named[r.klass] = named.get(r.klass, 0) + 1
    if not named:
        return
    path = resolve_trace_path(sc.workload.arrival, folder)
    if not declared:
        shown = first_few([repr(k) for k in named], 4)
        raise LlmsimError(f"{sum(named.values()):,} row(s) name a class ({shown}), but the scenario declares no "
                          f"classes, so every row would run as one class, under no class's SLO or limits; declare "
                          f"{'it' if len(named) == 1 else 'them'} under the scenario's classes key, or drop the "
                          f"column", source=path, key_path="class")
    k, n = next(iter(named.items()))
    more = f" (and {len(named) - 1} other undeclared class(es))" if len(named) > 1 else ""
    raise LlmsimError(f"{n:,} row(s) name class {k!r}{more}, which the scenario does not declare (its classes: "
                      f"{', '.join(sorted(declared))}); declare it under classes, or leave a row's class empty "
                      f"for share to pick one", source=path, key_path="class")
