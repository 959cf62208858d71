"""One-call entry points for notebooks: a scenario, its levers, its ladder, its plan.

The command line spreads a what-if over flags (``--set``, ``--variant``,
``--ladder``, ``plan --vary``) and writes files; a notebook wants the same
runs as Python values it can tabulate and plot. These functions are those
commands without the printing: they load and blame errors exactly as the
CLI does (a bad key names the file, the overlay and the key path), so a
notebook and ``llmsim run`` given the same levers simulate the same thing.

Overrides are a mapping ``{key.path: value}``, the form of a scenario's
``variants.*.set`` and ``check.set``: values are Python objects (numbers,
dicts), not YAML text. Where a list of strings is expected (variant names,
``--vary`` axes), one string is a list of one: ``variants="static"`` is the
one variant, never five one-letter names.

Every argument is checked before any run, so a slip in a cell ends in one
:class:`~simulator.errors.LlmsimError` naming the argument, not in a
traceback from inside the fleet.
"""
from __future__ import annotations

import os
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Optional, Sequence

import numpy as np

from .cli.app import checked_engine
from .errors import LlmsimError, shortened
from .fields import declare_results
from .metrics.intervals import check_confidence
from .metrics.table import request_table
from .planning.executors import ExecutorOptions, make_executor
from .planning.plan import Plan, plan_fleet
from .planning.vary import parse_vary
from .report.intervals import annotate, shipped_model
from .report.ladder import ladder_runs
from .report.plots import _log_ms_axis
from .report.results_reference import RESULTS
from .runner import RunOutput, simulate
from .scenario.load import check_slos, load_scenario
from .scenario.overlays import blamed_on, load_with_variants, variant_overlays
from .scenario.overrides import apply_override
from .scenario.schema import Scenario
from .scenario.strict import validate_strict
from .scenario.variants import Variant, merge_overlays, overlay_assignments, select_variants
from .validation.error_model import load_error_model

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["LadderRun", "PlanWarning", "load", "run", "ladder", "plan", "met", "requests_frame", "log_ms_axis"]

Overrides = Optional[Mapping[str, Any]]
Names = str | Sequence[str]

declare_results(lambda: RESULTS)     # a scenario's check.metrics is read against them, as at the command line


class PlanWarning(UserWarning):
    """What ``llmsim plan`` prints as ``warning:`` (a GPU billed at another GPU's pinned price)."""


def load(scenario: str | Path, overrides: Overrides = None, variants: Names = ()) -> tuple[Scenario, Path]:
    """The scenario (a built-in name such as ``"chatbot"`` or a path) with the
    named variants applied in order, then ``overrides`` (which win, as
    ``--set`` does over ``--variant``); and the file it came from, which its
    relative paths (a trace) are read against."""
    sc, path, _ = _load(_file(scenario, "load"), _mapping(overrides, "overrides"), _names(variants, "variants"))
    return sc, path


def _load(scenario: str | Path, overrides: dict[str, Any],
          variants: list[str]) -> tuple[Scenario, Path, tuple[Variant, ...]]:
    sc, path = load_scenario(scenario)
    chosen = select_variants(sc.variants, variants, path)
    return load_with_variants(path, chosen, overlay_assignments(overrides)), path, chosen


def run(scenario: str | Path | Scenario, overrides: Overrides = None, variants: Names = (),
        engine: str = "fast", confidence: float = 0.9) -> RunOutput:
    """Simulate as ``llmsim run SCENARIO --variant V... --set K=V... --confidence C`` would.

    ``scenario`` may also be a :class:`Scenario` already loaded (and perhaps
    edited with ``model_copy``): it has no file, so a relative trace path in
    it is read from the current folder. ``.results`` is the results.json
    dict, llmsim's intervals at ``confidence`` included (``llmsim.intervals``,
    ``llmsim.error_model``: what the command prints under its SLO table),
    ``.timeline`` the timeline table, :func:`requests_frame` the request
    records as a DataFrame."""
    checked_engine(engine, "engine")
    check_confidence(confidence, "confidence")
    sets, names = _mapping(overrides, "overrides"), _names(variants, "variants")
    if isinstance(scenario, Scenario):
        sc = _overlaid(scenario, sets, names)
        out = simulate(sc, engine=engine)
    else:
        sc, path, chosen = _load(_file(scenario, "run"), sets, names)
        with blamed_on(path, variant_overlays(chosen), overlay_assignments(sets)):
            out = simulate(sc, engine=engine, source=path)
    annotate(out.results, sc, [out.results], confidence, shipped_model()[0])
    return out


def _overlaid(sc: Scenario, overrides: dict[str, Any], variants: list[str]) -> Scenario:
    """A loaded scenario with its variants and ``overrides`` applied as a
    file's are: to what it was written as (the values it sets), then
    validated again, so a bad value is refused as it is from a file."""
    where = f"scenario {sc.name} (a Scenario object)"
    chosen = select_variants(sc.variants, variants, where)
    # validated again even with nothing to apply: an object edited with model_copy is not checked by it
    sets = overlay_assignments(merge_overlays([*(v.set for v in chosen), overrides]))
    with blamed_on(Path(where), variant_overlays(chosen), overlay_assignments(overrides)):
        with warnings.catch_warnings():     # an edited field's wrong type is the validation's to say, once
            warnings.simplefilter("ignore")
            data = sc.model_dump(mode="json", exclude_unset=True)
        for assignment in sets:
            apply_override(data, assignment)
        out = validate_strict(Scenario, data, where)
        check_slos(out, where)
    return out


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

    def __repr__(self) -> str:
        # the run's own repr is its headline figures; the full one would print every request
        return f"LadderRun(step={self.step!r}, output={self.output!r})"


def ladder(scenario: str | Path, overrides: Overrides = None, engine: str = "fast",
           confidence: float = 0.9) -> list[LadderRun]:
    """Every step of the scenario's ladder (baseline first), as ``llmsim run
    SCENARIO --ladder --confidence C`` runs them (cumulative or independent, as
    the file says); ``overrides`` apply to every step, as ``--set`` does. Each
    step's results carry its intervals at ``confidence``, its row each SLO
    target's bound (``slo_bounds_ms``)."""
    checked_engine(engine, "engine")
    check_confidence(confidence, "confidence")
    path = load_scenario(_file(scenario, "ladder"))[1]
    sets = overlay_assignments(_mapping(overrides, "overrides"))
    sc = load_with_variants(path, (), sets)
    return [LadderRun(step.name, step.description, row, out)
            for step, out, row in ladder_runs(sc, path, sets,
                                              lambda i, step, ssc: simulate(ssc, engine=engine, source=path),
                                              confidence, shipped_model()[0])]


def plan(scenario: str | Path, vary: Names, *, sets: Overrides = None, variants: Names = (),
         confidence: Optional[float] = None, seeds: int = 1, max_rate: bool = False, workers: int = 1,
         engine: str = "fast") -> Plan:
    """``llmsim plan SCENARIO --vary ... --variant ... --set ... --confidence C``:
    the cheapest fleet meeting the SLO for each combination of choices
    (``Plan.candidates``, best first; ``Plan.best`` is None when none does)
    and every fleet tried on the way (``Plan.probes``).

    ``sets`` is a mapping ``{key.path: value}``, as :func:`run`'s overrides,
    applied after ``variants``; a one-value ``vary`` (``workload.duration_s=60``)
    is the same as a set. ``confidence``: plan for an SLO that holds with this
    probability under llmsim's error model, not for the simulated figures
    (``llmsim plan`` also prints the answer at 0.5; plan again at 0.5 for it).
    The plan's warnings (say, a GPU billed at another GPU's pinned price) are
    issued as :class:`PlanWarning` and kept in ``Plan.warnings``.

    ``workers=1`` runs in this process (no process pool inside a kernel)."""
    checked_engine(engine, "engine")
    if isinstance(seeds, bool) or not isinstance(seeds, int) or seeds < 1:
        raise LlmsimError(f"expected a whole number of seeds, at least 1 (got {_echo(seeds)})", key_path="seeds")
    path = _file(scenario, "plan")
    axes = [parse_vary(v) for v in _names(vary, "vary")]
    model = None
    if confidence is not None:
        check_confidence(confidence, "confidence", gate=True)
        model = load_error_model()
    with make_executor("local", ExecutorOptions(workers=workers)) as ex:
        result = plan_fleet(path, axes, ex, seeds=seeds, max_rate=max_rate, engine=engine,
                            sets=_mapping(sets, "sets"), variants=_names(variants, "variants"),
                            confidence=confidence, model=model)
    # A warning says the ranking may be unfair (a GPU billed at another's price), so it must reach the user
    # where they read the plan: a Python warning shows under the cell by default, and the warnings filters
    # can still silence it or make it an error. Issued with no registry, where warnings.warn would show
    # it once per line of code: a cell run again plans again, and would say nothing the second time.
    caller = sys._getframe(1)
    for warning in result.warnings:
        warnings.warn_explicit(warning, PlanWarning, caller.f_code.co_filename, caller.f_lineno,
                               module=caller.f_globals.get("__name__"))
    return result


def met(results: Mapping[str, Any]) -> Optional[bool]:
    """Whether a run passes as ``llmsim run`` judges it: every SLO it is judged on (the
    scenario's, each class's and each prompt-length bucket's that declares one) holds and it
    keeps up with its load; None when it declares none. ``results["slo"]["met"]`` is the
    scenario's targets alone, which passes a fleet whose paid class missed its own or that
    sheds its load."""
    from .metrics.verdict import fleet_met

    return fleet_met(results)


def requests_frame(output: RunOutput | LadderRun) -> "pd.DataFrame":
    """A run's requests as a table, one row a request and one column a field
    (status by name, TTFT/TPOT/E2E latency in ms, NaN where undefined): what
    ``requests.parquet`` holds, where ``DataFrame(out.requests)`` would give
    one column of objects."""
    import pandas as pd     # here: the other entry points need no pandas

    if isinstance(output, LadderRun):
        output = output.output
    if not isinstance(output, RunOutput):
        raise LlmsimError(f"expected what run() returns (a RunOutput) or a ladder() step "
                          f"(got {type(output).__name__})", key_path="output")
    return pd.DataFrame(request_table(output.requests))


def log_ms_axis(axis: Any, values: Iterable[float]) -> None:
    """Put a matplotlib axis (``ax.yaxis``) on a log scale labelled in plain
    milliseconds (10, 100, 1,000), as llmsim's own plots do: latencies of an
    overloaded fleet span decades, and 10^3 reads worse than 1,000."""
    _log_ms_axis(axis, np.asarray(list(values), dtype=float))


def _file(scenario: Any, call: str) -> str | Path:
    """``scenario`` as a name or path: a typo'd object would otherwise be
    looked up by its text among the built-in names."""
    if isinstance(scenario, Scenario):
        raise LlmsimError(f"{call}() needs the scenario's file, which a Scenario object does not keep: pass its "
                          f"name or path (load() returns the path beside it)", key_path="scenario")
    if not isinstance(scenario, (str, os.PathLike)):
        raise LlmsimError(f"expected a built-in scenario name such as \"chatbot\" or a scenario file's path "
                          f"(got {type(scenario).__name__} {_echo(scenario)})", key_path="scenario")
    return scenario


def _mapping(overrides: Any, name: str) -> dict[str, Any]:
    """``overrides`` as a dict of key paths: pairs or ``"key=value"`` text
    are the command line's form, not this one's."""
    if overrides is None:
        return {}
    if not isinstance(overrides, Mapping):
        raise LlmsimError(f"expected a dict {{key.path: value}} such as {{\"workload.duration_s\": 60}} "
                          f"(got {type(overrides).__name__} {_echo(overrides)})", key_path=name)
    bad = [k for k in overrides if not isinstance(k, str) or not k.strip()]
    if bad:
        raise LlmsimError(f"expected each key to be a key path such as \"workload.duration_s\" "
                          f"(got {_echo(bad[0])})", key_path=name)
    # a notebook's values are often numpy's (a cell's np.int64 from a range) or paths: as the YAML they stand for
    return {k: v.item() if isinstance(v, np.generic) else str(v) if isinstance(v, os.PathLike) else v
            for k, v in overrides.items()}


def _names(values: Any, name: str) -> list[str]:
    """``values`` as a list of strings, one string being a list of one."""
    if isinstance(values, str):
        return [values]
    if isinstance(values, Mapping) or not isinstance(values, Iterable):
        raise LlmsimError(f"expected a list of strings (got {type(values).__name__} {_echo(values)})",
                          key_path=name)
    out = list(values)
    bad = [v for v in out if not isinstance(v, str)]
    if bad:
        raise LlmsimError(f"expected a list of strings (got {type(bad[0]).__name__} {_echo(bad[0])} in it)",
                          key_path=name)
    return out


def _echo(value: Any) -> str:
    return shortened(repr(value), 80)
