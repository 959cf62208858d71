"""Refusing the runs of a plan or sweep that llmsim cannot model, before any of them runs.

A ``--vary`` choice or a sweep point is input: a typo'd model name, a tp
that does not divide the model's heads or a fleet past the run-size limits
is the user's mistake, and reporting it as an infeasible fleet (or as a
table row after the rest ran) would hide it among real results. So every
run is compiled up front, as ``llmsim run`` compiles its scenario
(:func:`~simulator.scenario.compile.compile_scenario`: the profiles, the
parallelism rules, the cross-section checks), and the first that fails
ends the command in one error naming where its value was given.

A model that does not fit in its GPUs' memory is the exception: that is an
answer about the hardware, not a mistake in the input (a plan crossing GPUs
with tp sizes is expected to meet pairings too small for the weights), so
such a run stays a result: an infeasible candidate of a plan, a row with
its ``error`` in a sweep, as before.

A trace is input too, but compiling does not read it: its rows, times and
classes are checked only once a run draws its arrivals. So each distinct
trace is then read, once (it depends on the workload's keys and the
scenario's folder, not on replicas or tp), and held to the checks a run
makes of it (:func:`~simulator.scenario.drawn.check_source`) under every
run replaying it; a fault ends the command as a refused choice does, not
as a plan of infeasible fleets or a table of error rows written first.
Only traces are read ahead: drawing a synthetic workload would cost a run's
draws, and its size is estimated from its numbers before (:mod:`simulator.runsize`).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping, Optional

from ..errors import LlmsimError
from ..memory import does_not_fit
from ..scenario.compile import base_dir, compile_scenario
from ..scenario.drawn import check_source
from ..scenario.load import load_scenario
from ..scenario.schema import Scenario
from ..scenario.variants import merge_overlays, overlay_assignments
from workloads.drivers import Source, make_source

__all__ = ["Run", "check_runs"]



@dataclass(frozen=True)
class Run:
    """One run's overrides and, per key, where its value was given (``--vary pools.main.tp=3``,
    ``sweep.yaml: points[2]``): what an error about it names."""

    overrides: Mapping[str, Any]
    origins: Mapping[str, str]

    def named(self, keys: Iterable[str]) -> str:
        return " with ".join(dict.fromkeys(self.origins[k] for k in keys))


def check_runs(scenario: str | Path, runs: Iterable[Run], sets: Mapping[str, Any] | None = None,
               given: str = "") -> None:
    """Compile every distinct run (its overrides on top of ``sets``, which
    ``given`` describes: ``--set a=1``) once, then check each trace under
    the runs replaying it, each trace read once; the first that llmsim
    refuses raises, naming what to blame (see :func:`_blamed`). Compiling
    all first reports a typo'd choice before a trace is read, as a run
    compiles before it draws."""
    sets = dict(sets or {})
    seen: set[str] = set()
    replaying: dict[str, list[tuple[Run, Scenario, Path]]] = {}    # runs by the trace they replay
    for run in runs:
        fingerprint = _configuration(run.overrides)
        if fingerprint in seen:
            continue
        seen.add(fingerprint)
        try:
            sc, path = _compiled(scenario, merge_overlays([sets, run.overrides]))
        except LlmsimError as e:
            raise _refused(scenario, sets, run, e, given) from None
        if sc.workload.is_trace:
            replaying.setdefault(_Traces.key(sc, path), []).append((run, sc, path))
    traces = _Traces()
    for group in replaying.values():
        for run, sc, path in group:
            try:
                traces.check(sc, path)
            except LlmsimError as e:
                raise _refused(scenario, sets, run, e, given, traces) from None


class _Traces:
    """The trace last read, with what reading it gave (its source, or why it
    cannot be replayed): runs come grouped by trace, so each is read once
    and only one is held in memory, as one run holds it."""

    def __init__(self) -> None:
        self._key: Optional[str] = None
        self._read: Source | LlmsimError | None = None

    @staticmethod
    def key(sc: Scenario, path: Path) -> str:
        """What the trace a run replays depends on: the workload's keys and
        the folder a relative path resolves in. Not the seed, which only
        moves a rate_scale's or jitter's draws, as runs differing only in
        it are compiled once (:func:`_configuration`)."""
        return json.dumps([sc.workload.model_dump(mode="json"), str(base_dir(path))], sort_keys=True, default=str)

    def check(self, sc: Scenario, path: Path) -> None:
        """Raise what the run of ``sc`` would raise on its trace, before building its fleet."""
        if not sc.workload.is_trace:
            return
        key = self.key(sc, path)
        if key != self._key:
            self._key, self._read = key, None      # the previous trace freed before the next is read
            try:
                self._read = make_source(sc.workload, sc.seed, base_dir(path))
            except LlmsimError as e:
                self._read = e
        if isinstance(self._read, LlmsimError):
            raise self._read
        check_source(sc, self._read, path, base_dir(path))


def _refused(scenario: str | Path, sets: Mapping[str, Any], run: Run, error: LlmsimError, given: str,
             traces: Optional[_Traces] = None) -> LlmsimError:
    keys = _blamed(scenario, sets, run, error, traces)
    return _named(error, scenario, run.named(keys) if keys else given)


def _named(error: LlmsimError, scenario: str | Path, where: str) -> LlmsimError:
    """``error`` said of the scenario and ``where`` its values came from; a
    fault in another file (a trace, a profile) keeps that file and key in the
    message, as the run would have named them."""
    source = f"{scenario} ({where})" if where else str(scenario)
    if error.source and not error.source.startswith(str(scenario)):
        return LlmsimError(error.render(), source=source)
    return LlmsimError(error.message, source=source, key_path=error.key_path)


def _configuration(overrides: Mapping[str, Any]) -> str:
    """The run's overrides without its seed: seeds draw other traffic but
    never change what compiles, so a sweep over seeds is compiled once."""
    return json.dumps({k: v for k, v in overrides.items() if k != "seed"}, sort_keys=True, default=str)


def _compiled(scenario: str | Path, overrides: Mapping[str, Any]) -> tuple[Scenario, Path]:
    """``scenario`` with ``overrides``, compiled as a run compiles it; raises
    why llmsim refuses it, unless its model does not fit, which the run
    reports as its result."""
    sc, path = load_scenario(scenario, overlay_assignments(dict(overrides)))
    try:
        compile_scenario(sc, path)
    except LlmsimError as e:
        if not does_not_fit(e):
            raise
    return sc, path


def _refusal(scenario: str | Path, overrides: Mapping[str, Any],
             traces: Optional[_Traces] = None) -> Optional[LlmsimError]:
    """Why llmsim refuses to run ``scenario`` with ``overrides``, its trace
    checked too when ``traces`` is given (None: it would run, or its model
    does not fit)."""
    try:
        sc, path = _compiled(scenario, overrides)
        if traces is not None:
            traces.check(sc, path)
    except LlmsimError as e:
        return e
    return None


def _blamed(scenario: str | Path, sets: Mapping[str, Any], run: Run, error: LlmsimError,
            traces: Optional[_Traces] = None) -> list[str]:
    """The keys of ``run`` the message names for ``error``: those without
    which it goes away. Each key whose value the same refusal does without
    is left out in turn, so a typo'd choice is named alone rather than with
    every choice it was crossed with, a pairing by both its keys, and a fault
    of the scenario (or ``sets``) by none. Only the refusing run pays these
    compiles, one per key."""
    kept = dict(run.overrides)
    for key in list(kept):
        without = {k: v for k, v in kept.items() if k != key}
        alone = _refusal(scenario, merge_overlays([sets, without]), traces)
        if alone is not None and (alone.message, alone.key_path) == (error.message, error.key_path):
            kept = without
    return list(kept)
