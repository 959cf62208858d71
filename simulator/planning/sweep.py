"""``llmsim sweep``: every point of a sweep file, into one tidy table.

The table (``sweep.parquet``, or ``sweep.csv`` without pyarrow) has one row
per run: one column per overridden key path, then the key results (see
:func:`.point.summarize`). It is rewritten from the point store at the end
of every run, complete or not, so an interrupted sweep still leaves a table
of what finished and a rerun only runs what is missing.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Optional, Sequence


if TYPE_CHECKING:
    import pandas as pd

from ..atomic_write import write_atomic
from ..errors import LlmsimError
from ..metrics.tail_samples import row_few_samples_note
from ..metrics.verdict import load_unsure
from ..scenario.variants import merge_overlays
from .batch import run_points
from .executors import Executor
from .grid import load_sweep
from .point import Point
from .store import PointStore

__all__ = ["SweepRun", "plan_sweep", "run_sweep", "override_keys", "write_table", "few_samples_warning",
           "short_window_warning"]

OnRow = Callable[[Point, dict[str, Any], bool], None]


@dataclass
class SweepRun:
    """What a sweep did; ``rows`` follow the sweep file's order."""

    table: Path
    total: int
    reused: int = 0
    rows: list[dict[str, Any]] = field(default_factory=list)

    @property
    def errors(self) -> list[dict[str, Any]]:
        return [r for r in self.rows if r.get("error")]


def plan_sweep(sweep_path: str | Path, sets: Mapping[str, Any] | None = None,
               max_runs: Optional[int] = None) -> list[Point]:
    """The sweep's points, checked against the base scenario (no runs yet);
    ``sets`` (``--set``) apply to every point, under the point's own overrides.
    More than ``max_runs`` (default :data:`~simulator.runsize.MAX_RUNS`) is refused."""
    sweep, base, overrides = load_sweep(sweep_path, sets, max_runs)
    return [Point(str(base), tuple(merge_overlays([sets or {}, o]).items()), sweep.engine) for o in overrides]


def run_sweep(points: Sequence[Point], out_dir: str | Path, executor: Executor,
              on_row: Optional[OnRow] = None) -> SweepRun:
    """Run ``points`` (from :func:`plan_sweep`) on ``executor`` into one table in ``out_dir``.

    Each finished point is stored under ``out_dir/points`` first, so running the same points into the same
    folder again (after Ctrl-C, or with one point added) runs only what is missing; the table is written even
    when the sweep stops early. ``on_row(point, row, was_stored)`` sees each row as it comes, for progress."""
    out_dir = Path(out_dir)
    done: dict[str, dict[str, Any]] = {}
    reused = [0]

    def seen(p: Point, row: dict[str, Any], was_stored: bool) -> None:
        reused[0] += was_stored
        if on_row:
            on_row(p, row, was_stored)

    def table() -> tuple[Path, list[dict[str, Any]]]:
        rows = [{**dict(p.overrides), **done[p.key]} for p in points if p.key in done]
        return write_table(rows, out_dir, override_keys(points)), rows

    try:
        for p, row in run_points(points, executor, PointStore(out_dir / "points"), seen):
            done[p.key] = row
    except BaseException:
        # Also on an error or Ctrl-C: the table then holds what finished,
        # unless it cannot be written either (the first error says why).
        try:
            table()
        except LlmsimError:
            pass
        raise
    path, rows = table()
    return SweepRun(path, len(points), reused[0], rows)


def override_keys(points: Sequence[Point]) -> list[str]:
    """The key paths the points override, in order of first appearance: the table's leading columns."""
    return list(dict.fromkeys(k for p in points for k, _ in p.overrides))


def write_table(rows: list[dict[str, Any]], out_dir: Path, first: Sequence[str] = ()) -> Path:
    """Parquet when pyarrow is there, else CSV; ``first`` columns lead
    (the override key paths). Replaced atomically."""
    import pandas as pd   # here: every command imports this module, few write a table

    df = pd.DataFrame(rows)
    for key in first:
        if key not in df:
            df[key] = None
        df[key] = _scalar_column(df[key])
    df = df[list(first) + [c for c in df.columns if c not in first]]
    try:
        import pyarrow  # noqa: F401
        name = "sweep.parquet"
    except ImportError:
        name = "sweep.csv"
    if name.endswith(".parquet"):
        return write_atomic(out_dir / name, lambda tmp: df.to_parquet(tmp, index=False))
    return write_atomic(out_dir / name, lambda tmp: df.to_csv(tmp, index=False))


def _scalar_column(col: "pd.Series") -> "pd.Series":
    """Override values as one column type: a mapping or list value becomes
    its JSON text, and a column mixing kinds (other than ints with floats)
    becomes text."""
    col = col.map(lambda v: json.dumps(v, sort_keys=True) if isinstance(v, (dict, list)) else v)
    kinds = {type(v) for v in col if v is not None and not (isinstance(v, float) and v != v)}   # v != v: NaN
    if len(kinds) > 1 and not kinds <= {int, float}:
        col = col.map(lambda v: None if v is None else str(v))
    return col


def few_samples_warning(rows: Sequence[Mapping[str, Any]], keys: Sequence[str]) -> Optional[str]:
    """Which points' SLO verdicts rest on a percentile over too few requests (their ``slo_met`` is the
    slowest few requests', :mod:`simulator.metrics.tail_samples`), the first one's targets named; None
    when every point's rest on enough."""
    return _points_warning(rows, keys, row_few_samples_note, "judge the SLO on too few samples")


def short_window_warning(rows: Sequence[Mapping[str, Any]], keys: Sequence[str]) -> Optional[str]:
    """Which points ran a window their requests outlast (:func:`~simulator.metrics.verdict.load_unsure`):
    their ``slo_met`` is a fleet's still filling up, which can pass a fleet far smaller than the load
    needs; None when every point's window held its requests."""
    return _points_warning(rows, keys, lambda r: r["load"] if load_unsure(r) else None,
                           "ran a window their requests outlast, too short to tell whether the fleet keeps up, "
                           "so their slo_met can pass a fleet smaller than the load needs")


def _points_warning(rows: Sequence[Mapping[str, Any]], keys: Sequence[str],
                    note_of: Callable[[Mapping[str, Any]], Optional[str]], says: str) -> Optional[str]:
    """How many points ``note_of`` has something to say of, and what it says of the first, by its overrides."""
    flagged = [(r, note) for r in rows if (note := note_of(r))]
    if not flagged:
        return None
    first, note = flagged[0]
    named = ", ".join(f"{k}={first.get(k)}" for k in keys) or "the point"
    return f"{len(flagged)} of {len(rows)} points {says}; the first, {named}: {note}"
