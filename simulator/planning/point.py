"""One point of a sweep or search: a scenario file plus overrides, run to a small row.

``run_point`` is what executors ship to workers, so it must be a pure
function of the :class:`Point` (scenario path, overrides, engine; the seed
is the scenario's or an override of ``seed``): it rereads the file, applies
the overrides exactly as ``--set`` does, simulates, and returns plain
numbers. That is what makes a Dask worker's row equal a local process's
bit for bit, and what makes a stored row safe to reuse on a rerun. The
only measured (non-deterministic) figure is ``wall_time_s``.

Rows read only ``results.json`` keys, never runner internals, so runner
changes that add keys do not disturb them.
"""
from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from ..errors import LlmsimError
from ..metrics.by_input_length import bucket_slo_blocks
from ..scenario.load import load_scenario
from ..scenario.variants import overlay_assignments

__all__ = ["Point", "run_point", "summarize", "check_overrides", "scenario_digest", "LATENCY_COLUMNS",
           "WALL_TIME"]

#: (column, results.json key) of the latency figures every row carries.
LATENCY_COLUMNS: tuple[tuple[str, str], ...] = tuple(
    (f"{metric}_{label}_ms", f"{stat}_{metric}_ms")
    for metric in ("ttft", "tpot", "e2el")
    for label, stat in (("p50", "median"), ("p95", "p95"), ("p99", "p99")))

#: The one row column that is measured, not simulated (differs run to run).
WALL_TIME = "wall_time_s"


@dataclass(frozen=True)
class Point:
    """A run to do. ``digest`` fingerprints the scenario file's bytes so a
    stored row is not reused after the file changed."""

    scenario: str
    overrides: tuple[tuple[str, Any], ...] = ()
    engine: str = "fast"
    digest: str = ""

    @property
    def key(self) -> str:
        """Stable name of the point: the same file, overrides and engine give
        the same key in any process, on any day (the sweep's resume key)."""
        blob = json.dumps({"scenario": self.digest, "engine": self.engine,
                           "overrides": sorted([k, v] for k, v in self.overrides)},
                          sort_keys=True, separators=(",", ":"), default=str)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    def assignments(self) -> list[str]:
        return overlay_assignments(dict(self.overrides))

    def with_overrides(self, extra: Mapping[str, Any]) -> "Point":
        merged = dict(self.overrides)
        merged.update(extra)
        return Point(self.scenario, tuple(merged.items()), self.engine, self.digest)


def scenario_digest(path: str | Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def check_overrides(scenario: str | Path, overrides: Mapping[str, Any], what: str) -> None:
    """Apply and validate, so a misspelt key fails before any run starts:
    the schema forbids unknown keys, and list items must exist by name.
    ``what`` says where the overrides came from (``--vary``, ``points[2]``)."""
    try:
        load_scenario(scenario, overlay_assignments(dict(overrides)))
    except LlmsimError as e:
        raise LlmsimError(e.message, source=f"{scenario} ({what})", key_path=e.key_path) from None


def run_point(point: Point) -> dict[str, Any]:
    """Simulate one point; an input error becomes the row's ``error``, so
    one bad combination does not take down a sweep."""
    from ..runner import simulate  # heavy; imported in the worker

    wall = time.perf_counter()
    try:
        sc, path = load_scenario(point.scenario, point.assignments())
        results = simulate(sc, engine=point.engine, source=path).results
        row = summarize(results)
    except LlmsimError as e:
        row = {"error": e.render()}
    row[WALL_TIME] = time.perf_counter() - wall
    return row


def _dig(d: Mapping[str, Any], *keys: str) -> Any:
    for k in keys:
        if not isinstance(d, Mapping):
            return None
        d = d.get(k)
    return d


def summarize(results: Mapping[str, Any]) -> dict[str, Any]:
    """The key results of a run as a flat row (tidy-table columns)."""
    row: dict[str, Any] = {
        "seed": _dig(results, "llmsim", "seed"),
        "completed": results.get("completed"),
        "failed": results.get("failed"),
        "request_throughput": results.get("request_throughput"),
    }
    for column, key in LATENCY_COLUMNS:
        row[column] = results.get(key)
    slo = results.get("slo")
    targets = (slo or {}).get("targets", {})
    row["slo_met"] = slo.get("met") if slo else None
    misses = [_miss(k, t) for k, t in targets.items() if not t.get("met")]
    for label, block in bucket_slo_blocks(results):   # prompt-length buckets' own targets must hold too
        row["slo_met"] = bool(block.get("met")) and row["slo_met"] is not False
        misses += [f"{label.removeprefix('SLO ')} {_miss(k, t)}" for k, t in block.get("targets", {}).items()
                   if not t.get("met")]
    row["slo_failed"] = "; ".join(misses) or None
    for k, t in targets.items():
        row[f"attainment_{k}"] = t.get("attainment")
    cost = _dig(results, "llmsim", "cost") or {}
    # "usd_per_month" is the key's name before the fleet issue renamed it
    row["monthly_usd"] = cost.get("monthly_usd", cost.get("usd_per_month"))
    row["gpus"] = _dig(results, "llmsim", "gpus")
    row["usd_per_request"] = cost.get("usd_per_request")
    row["error"] = None
    return row


def _miss(key: str, target: Mapping[str, Any]) -> str:
    measured = target.get("measured_ms")
    got = "no samples" if measured is None else f"{measured:.1f} ms"
    return f"{key} {got} > {target.get('target_ms'):g} ms"
