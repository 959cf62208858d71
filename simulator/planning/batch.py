"""Running many points: reuse what is stored, farm out the rest, store each as it lands.

Sweeps and searches both go through here, so both are resumable the same
way, and a point finished before an error or Ctrl-C is on disk already.
Rows with an ``error`` (an input problem a point ran into) are not
stored: a rerun tries them again, after the user fixed the input.
"""
from __future__ import annotations

from typing import Any, Callable, Iterable, Iterator, Optional

from .executors import Executor
from .point import Point, run_point
from .store import PointStore

__all__ = ["run_points"]


def run_points(points: Iterable[Point], executor: Executor, store: Optional[PointStore] = None,
               on_row: Optional[Callable[[Point, dict[str, Any], bool], None]] = None
               ) -> Iterator[tuple[Point, dict[str, Any]]]:
    """Yield ``(point, row)`` for every distinct point: stored ones first,
    then the rest in completion order. ``on_row(point, row, reused)`` is
    called for each (progress display)."""
    todo: list[Point] = []
    seen: set[str] = set()
    for p in points:
        if p.key in seen:
            continue
        seen.add(p.key)
        row = store.get(p.key) if store is not None else None
        if row is None:
            todo.append(p)
            continue
        if on_row:
            on_row(p, row, True)
        yield p, row
    for p, row in executor.map_unordered(run_point, todo):
        if store is not None and row.get("error") is None:
            store.put(p.key, dict(p.overrides), row)
        if on_row:
            on_row(p, row, False)
        yield p, row
