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
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping, Optional

from ..errors import LlmsimError
from ..memory import does_not_fit
from ..scenario.compile import compile_scenario
from ..scenario.load import load_scenario
from ..scenario.variants import overlay_assignments

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
    ``given`` describes: ``--set a=1``) once; the first that llmsim refuses
    raises, naming what to blame (see :func:`_blamed`)."""
    seen: set[str] = set()
    for run in runs:
        fingerprint = _configuration(run.overrides)
        if fingerprint in seen:
            continue
        seen.add(fingerprint)
        error = _refusal(scenario, {**(sets or {}), **run.overrides})
        if error is not None:
            keys = _blamed(scenario, sets or {}, run, error)
            raise _named(error, scenario, run.named(keys) if keys else given)


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


def _refusal(scenario: str | Path, overrides: Mapping[str, Any]) -> Optional[LlmsimError]:
    """Why llmsim refuses to run ``scenario`` with ``overrides`` (None: it would run, or its
    model does not fit, which the run reports as its result)."""
    try:
        sc, path = load_scenario(scenario, overlay_assignments(dict(overrides)))
        compile_scenario(sc, path)
    except LlmsimError as e:
        return None if does_not_fit(e) else e
    return None


def _blamed(scenario: str | Path, sets: Mapping[str, Any], run: Run, error: LlmsimError) -> list[str]:
    """The keys of ``run`` the message names for ``error``: those without
    which it goes away. Each key whose value the same refusal does without
    is left out in turn, so a typo'd choice is named alone rather than with
    every choice it was crossed with, a pairing by both its keys, and a fault
    of the scenario (or ``sets``) by none. Only the refusing run pays these
    compiles, one per key."""
    kept = dict(run.overrides)
    for key in list(kept):
        without = {k: v for k, v in kept.items() if k != key}
        alone = _refusal(scenario, {**sets, **without})
        if alone is not None and (alone.message, alone.key_path) == (error.message, error.key_path):
            kept = without
    return list(kept)
