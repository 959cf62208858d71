"""Capacity planning over many runs: sweeps, SLO searches, and where they run.

A run is a :class:`~.point.Point` (scenario file + overrides) turned into a
small row by a pure function, so points can run anywhere (an
:mod:`.executors` backend) and be stored and reused (:mod:`.store`).
:mod:`.sweep` runs a sweep file's points into one table; :mod:`.plan`
searches an axis for the cheapest fleet that meets the SLO.
"""
from .executors import EXECUTORS, Executor, ExecutorOptions, make_executor, register_executor
from .point import Point, run_point, summarize
from .search import drive_all, largest_passing, smallest_passing, solve

__all__ = ["Executor", "ExecutorOptions", "EXECUTORS", "make_executor", "register_executor", "Point", "run_point",
           "summarize", "drive_all", "largest_passing", "smallest_passing", "solve"]
