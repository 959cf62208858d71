"""The sweep file: a base scenario and the override sets to run on it.

::

    base: chatbot.yaml            # relative to this file (or a built-in name)
    grid:                         # crossed: 2 x 3 = 6 runs
      pools.free.gpu: [h100-sxm, a100-sxm-80gb]
      pools.free.replicas: [4, 6, 8]
    points:                       # explicit override sets
      - {pools.free.tp: 1}
      - {pools.free.tp: 2, pools.free.engine.max_num_seqs: 128}

With both, every point is crossed with the grid (here 2 x 6 = 12 runs):
``points`` carry settings that only make sense together, the grid the
independent axes. Keys are ``--set`` key paths; values are YAML values.
"""
from __future__ import annotations

import itertools
import math
from pathlib import Path
from typing import Any, Literal, Mapping, Optional

from pydantic import BaseModel, ConfigDict, Field

from ..errors import LlmsimError
from ..profiles.loader import read_structured
from ..runsize import check_run_count
from ..scenario.load import resolve_scenario
from ..scenario.overlays import overlaid
from ..scenario.overrides import Given, as_loaded, given_sets, refuse_overlaps, repeated, resolved_key
from ..scenario.strict import validate_strict
from ..scenario.variants import overlay_assignments
from .point import check_overrides
from .precheck import Run, check_runs

__all__ = ["SweepFile", "Overrides", "load_sweep", "expand"]

Overrides = dict[str, Any]


class SweepFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    base: str = Field(description="scenario file, relative to the sweep file, or a built-in scenario name")
    description: str = ""
    grid: dict[str, list[Any]] = Field(default_factory=dict, description="key path -> values, crossed")
    points: Optional[list[Overrides]] = Field(default=None, description="override mappings, each one run")
    engine: Literal["fast", "reference"] = "fast"


def expand(sweep: SweepFile) -> list[Overrides]:
    """Every run's overrides, in a stable order (points outer, grid inner)."""
    return [{**point, **g} for _, point, g in _crossed(sweep)]


def _crossed(sweep: SweepFile) -> list[tuple[int, Overrides, Overrides]]:
    """Every run as (its point's index, the point, the grid's values), in :func:`expand`'s order."""
    keys = list(sweep.grid)
    grid = [dict(zip(keys, combo)) for combo in itertools.product(*(sweep.grid[k] for k in keys))]
    return [(i, point, g) for i, point in enumerate(sweep.points or [{}]) for g in grid]


def _runs(sweep: SweepFile, path: Path) -> list[Run]:
    """Every run, each key named where the sweep file gives its value (the point, or the grid's value)."""
    return [Run({**point, **g}, {**{k: f"{path}: points[{i}]" for k in point},
                                 **{k: f"{path}: grid.{k} = {v!r}" for k, v in g.items()}})
            for i, point, g in _crossed(sweep)]


def load_sweep(path: str | Path, sets: Mapping[str, Any] | None = None, max_runs: Optional[int] = None
               ) -> tuple[SweepFile, Path, list[Overrides]]:
    """Read and check a sweep file: (the file, the base scenario's path,
    every run's overrides). Each override is applied to the base scenario
    (with ``sets``, the command line's ``--set``, under it) and validated
    here, and every run compiled (:mod:`.precheck`), so a typo or a value
    llmsim cannot model fails before the first run."""
    path = Path(path)
    data = read_structured(path, what="sweep file")
    if not isinstance(data, dict):
        raise LlmsimError("expected a mapping with base and grid and/or points", source=path)
    if "base" not in data and {"workload", "pools"} & set(data):
        raise LlmsimError("is a scenario, not a sweep file: `llmsim run` runs it, or a sweep file names it "
                          f"(base: {path.name}) beside grid and/or points", source=path)
    sweep = validate_strict(SweepFile, data, path)
    _check_not_empty(sweep, path)
    runs = len(sweep.points or [{}]) * math.prod(len(v) for v in sweep.grid.values())
    sizes = " × ".join([*([f"{len(sweep.points):,} points"] if sweep.points else []),
                        *(f"{len(v):,} values of {k}" for k, v in sweep.grid.items())])
    check_run_count(runs, f"this sweep crosses {sizes}", max_runs, source=path,
                    key_path="grid" if sweep.grid else "points")
    local = path.parent / sweep.base
    try:
        base = resolve_scenario(str(local) if local.exists() else sweep.base).resolve()
    except LlmsimError as e:
        raise LlmsimError(f"{e.render()} (the base scenario, relative to this file's folder or a built-in name)",
                          source=path, key_path="base") from None
    sets = dict(sets or {})
    _check_keys_apart(sweep, path, base, sets)
    if sets:
        check_overrides(base, sets, " ".join(f"--set {k}={v}" for k, v in sets.items()))
    for key, values in sweep.grid.items():
        for v in values:
            check_overrides(base, {**sets, key: v}, f"{path}: grid.{key} = {v!r}", varied=[key])
    for i, point in enumerate(sweep.points or []):
        check_overrides(base, {**sets, **point}, f"{path}: points[{i}]", varied=list(point))
    check_runs(base, _runs(sweep, path), sets, " ".join(f"--set {k}={v}" for k, v in sets.items()))
    return sweep, base, expand(sweep)


def _check_not_empty(sweep: SweepFile, path: Path) -> None:
    if not sweep.grid and sweep.points is None:
        raise LlmsimError("nothing to run: give grid (key path -> list of values) and/or points "
                          "(a list of override mappings)", source=path)
    for key, values in sweep.grid.items():
        if not values:
            raise LlmsimError("empty list: the grid would have no points", source=path, key_path=f"grid.{key}")
    if sweep.points is not None and not sweep.points:
        raise LlmsimError("empty list: no points to run", source=path, key_path="points")


def _check_keys_apart(sweep: SweepFile, path: Path, base: Path, sets: Mapping[str, Any]) -> None:
    """Each run gives each key once (:func:`~simulator.scenario.overrides.refuse_overlaps`): a grid key is
    neither another grid key nor ``--set`` nor in a point, however spelled (a ``--set`` every run's grid
    value replaces does nothing). A point may set a ``--set`` key: that is its own override. And each run
    is a new one: a grid value or a point given twice would run the same point again, into a second row."""
    data = overlaid(base)
    cli = given_sets(overlay_assignments(sets))
    refuse_overlaps(cli, data, source=base)
    grid = [Given(k, f"grid.{k}", "swept", f"grid.{k}") for k in sweep.grid]
    refuse_overlaps([*cli, *grid], data, source=path)
    for key, values in sweep.grid.items():
        twice = repeated([as_loaded(key, v) for v in values], [repr(v) for v in values])
        if twice:
            raise LlmsimError(f"{twice}; give each value once", source=path, key_path=f"grid.{key}")
    resolved = []
    for i, point in enumerate(sweep.points or []):
        refuse_overlaps([*grid, *(Given(k, f"points[{i}].{k}", "set", f"points[{i}]") for k in point)], data,
                        source=path)
        resolved.append({resolved_key(data, k): v for k, v in point.items()})     # pools.0.tp is pools.chat.tp
    twice = repeated(resolved, [f"points[{i}]" for i in range(len(resolved))])
    if twice:
        raise LlmsimError(f"{twice} (the same keys and values); give each point once", source=path, key_path="points")
    _refuse_sets_every_point_replaces(cli, resolved, data)


def _refuse_sets_every_point_replaces(cli: list[Given], points: list[dict], data: Any) -> None:
    """A ``--set`` that every point replaces (the point sets the key, or a key holding it) reaches no run:
    the user believes the sweep ran with it."""
    for g in cli:
        key = resolved_key(data, g.key)
        if points and all(any(key[:len(k)] == k for k in point) for point in points):
            raise LlmsimError(f"{g.text} reaches no run: every point sets {g.key} (or a key holding it), and a "
                              "point's value wins; drop the --set or leave the key out of a point",
                              key_path="--set")
