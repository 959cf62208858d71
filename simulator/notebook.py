"""One-call entry points for notebooks: a scenario, its levers, its ladder, its plan.

The command line spreads a what-if over flags (``--set``, ``--variant``,
``--ladder``, ``plan --vary``) and writes files; a notebook wants the same
runs as Python values it can tabulate and plot. These functions are those
commands without the printing: they load and blame errors exactly as the
CLI does (a bad key names the file, the overlay and the key path), so a
notebook and ``llmsim run`` given the same levers simulate the same thing.

Overrides are a mapping ``{key.path: value}``, the form of a scenario's
``variants.*.set`` and ``check.set``: values are Python objects (numbers,
dicts), not YAML text.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping, Optional, Sequence

import numpy as np

from .fields import declare_results
from .planning.executors import ExecutorOptions, make_executor
from .planning.plan import Plan, plan_fleet
from .planning.vary import parse_vary
from .report.ladder import ladder_runs
from .report.plots import _log_ms_axis
from .report.results_reference import RESULTS
from .runner import RunOutput, simulate
from .scenario.load import load_scenario
from .scenario.overlays import blamed_on, load_with_variants, variant_overlays
from .scenario.schema import Scenario
from .scenario.variants import Variant, overlay_assignments, select_variants

__all__ = ["LadderRun", "load", "run", "ladder", "plan", "log_ms_axis"]

Overrides = Optional[Mapping[str, Any]]

declare_results(lambda: RESULTS)     # a scenario's check.metrics is read against them, as at the command line


def load(scenario: str | Path, overrides: Overrides = None, variants: Sequence[str] = ()) -> tuple[Scenario, Path]:
    """The scenario (a built-in name such as ``"chatbot"`` or a path) with the
    named variants applied in order, then ``overrides`` (which win, as
    ``--set`` does over ``--variant``); and the file it came from."""
    sc, path, _ = _load(scenario, overrides, variants)
    return sc, path


def _load(scenario: str | Path, overrides: Overrides,
          variants: Sequence[str]) -> tuple[Scenario, Path, tuple[Variant, ...]]:
    sc, path = load_scenario(scenario)
    chosen = select_variants(sc.variants, variants, path)
    return load_with_variants(path, chosen, overlay_assignments(overrides or {})), path, chosen


def run(scenario: str | Path, overrides: Overrides = None, variants: Sequence[str] = (),
        engine: str = "fast") -> RunOutput:
    """Simulate as ``llmsim run SCENARIO --variant V... --set K=V...`` would.

    ``.results`` is the results.json dict, ``.requests`` the request records,
    ``.timeline`` the timeline table."""
    sc, path, chosen = _load(scenario, overrides, variants)
    with blamed_on(path, variant_overlays(chosen), overlay_assignments(overrides or {})):
        return simulate(sc, engine=engine, source=path)


@dataclass(frozen=True)
class LadderRun:
    """One step of a what-if ladder: its ``llmsim run --ladder`` table row and the full run."""

    step: str
    description: str
    row: dict[str, Any]
    output: RunOutput

    @property
    def results(self) -> dict[str, Any]:
        return self.output.results


def ladder(scenario: str | Path, overrides: Overrides = None, engine: str = "fast") -> list[LadderRun]:
    """Every step of the scenario's ladder (baseline first), as ``llmsim run
    SCENARIO --ladder`` runs them (cumulative or independent, as the file
    says); ``overrides`` apply to every step, as ``--set`` does."""
    path = load_scenario(scenario)[1]
    sets = overlay_assignments(overrides or {})
    sc = load_with_variants(path, (), sets)
    return [LadderRun(step.name, step.description, row, out)
            for step, out, row in ladder_runs(sc, path, sets,
                                              lambda i, step, ssc: simulate(ssc, engine=engine, source=path))]


def plan(scenario: str | Path, vary: Sequence[str], *, seeds: int = 1, max_rate: bool = False,
         workers: int = 1, engine: str = "fast") -> Plan:
    """``llmsim plan SCENARIO --vary ...``: the cheapest fleet meeting the SLO
    for each combination of choices (``Plan.candidates``, best first) and
    every fleet tried on the way (``Plan.probes``).

    ``workers=1`` runs in this process (no process pool inside a kernel). A
    one-value ``--vary`` (``workload.duration_s=60``) is a plain override."""
    axes = [parse_vary(v) for v in vary]
    with make_executor("local", ExecutorOptions(workers=workers)) as ex:
        return plan_fleet(scenario, axes, ex, seeds=seeds, max_rate=max_rate, engine=engine)


def log_ms_axis(axis: Any, values: Iterable[float]) -> None:
    """Put a matplotlib axis (``ax.yaxis``) on a log scale labelled in plain
    milliseconds (10, 100, 1,000), as llmsim's own plots do: latencies of an
    overloaded fleet span decades, and 10^3 reads worse than 1,000."""
    _log_ms_axis(axis, np.asarray(list(values), dtype=float))
