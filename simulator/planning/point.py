"""One point of a sweep or search: a scenario file plus overrides, run to a small row.

``run_point`` is what executors ship to workers, so it must be a pure
function of the :class:`Point` (scenario path, overrides, engine; the seed
is the scenario's or an override of ``seed``): it rereads the file, applies
the overrides exactly as ``--set`` does, simulates, and returns plain
numbers. That is what makes a Dask worker's row equal a local process's
bit for bit, and, with a key over every input (:func:`inputs_key`), what
makes a stored row safe to reuse on a rerun. The only measured
(non-deterministic) figure is ``wall_time_s``.

Rows read only ``results.json`` keys, never runner internals, so runner
changes that add keys do not disturb them.
"""
from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, Mapping, Sequence

from ..errors import LlmsimError
from ..metrics.verdict import fleet_met, load_columns, load_failure, ms_past, refused_line, slo_blocks, target_name
from ..inputs import code_digest, file_digest
from ..reads import recorded_reads
from .confidence import slo_targets_text
from ..profiles.loader import resolve
from ..validation.error_model import regime_of_run
from ..scenario.load import load_scenario
from ..scenario.overrides import resolved_key
from ..scenario.schema import Scenario
from ..scenario.variants import merge_overlays, overlay_assignments
from workloads.traces import resolve_trace_path

__all__ = ["Point", "run_point", "summarize", "check_overrides", "inputs_key", "LATENCY_COLUMNS",
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
    """A run to do: the scenario file, the overrides on it, the engine."""

    scenario: str
    overrides: tuple[tuple[str, Any], ...] = ()
    engine: str = "fast"

    @cached_property
    def key(self) -> str:
        """Fingerprint of everything the point's result depends on (see
        :func:`inputs_key`): the sweep's resume key and the store's file name."""
        return inputs_key(self.scenario, self.assignments(), self.engine)

    def assignments(self) -> list[str]:
        return overlay_assignments(dict(self.overrides))

    def with_overrides(self, extra: Mapping[str, Any]) -> "Point":
        # in application order: a key set again moves last, so a pool a variant replaces whole keeps the
        # value searched on it (a plain update left it first, undone by the pool's own overlay)
        merged = merge_overlays([dict(self.overrides), extra])
        return Point(self.scenario, tuple(merged.items()), self.engine)


def inputs_key(scenario: str | Path, assignments: list[str], engine: str) -> str:
    """SHA-256 (16 hex digits) over llmsim's code, the engine, the scenario
    as resolved (file plus overrides, validated) and the bytes of every file
    it names: the scenario, its trace, model configs, GPU and backend
    profiles (built-in ones too). The same inputs give the same key in any
    process, on any day; changing any of them gives another, so a stored
    row is never reused for inputs it was not computed from."""
    with recorded_reads() as files:
        try:
            sc, path = load_scenario(scenario, assignments)   # reads the scenario and backend profiles
            files.update(named_files(sc, path))
            resolved: Any = sc.model_dump(mode="json")
        except LlmsimError as e:       # such a point's row is an error, never stored
            resolved = {"error": e.render(), "assignments": sorted(assignments)}
    blob = json.dumps({"code": code_digest(), "engine": engine, "scenario": resolved,
                       "files": sorted((str(f), file_digest(f)) for f in files)},
                      sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def named_files(sc: Scenario, path: Path) -> set[Path]:
    """The profile and trace files a scenario names (resolved, without
    loading them: a sweep asks this of every point). tests/test_bad_input.py
    checks it covers every file a run of the scenario reads."""
    out: set[Path] = set()
    for p in sc.pools:
        out.add(resolve("model_profiles", p.model).resolve())
        out.add(resolve("hardware_profiles", p.gpu).resolve())
        if p.speculative is not None:
            out.add(resolve("model_profiles", p.speculative.draft_model).resolve())
    if sc.workload.is_trace:
        out.add(resolve_trace_path(sc.workload.arrival, path.parent).resolve())
    return out


def check_overrides(scenario: str | Path, overrides: Mapping[str, Any], what: str, varied: Sequence[str] = ()) -> None:
    """Apply and validate, so a misspelt key fails before any run starts:
    the schema forbids unknown keys, and list items must exist by name.
    ``what`` says where the overrides came from (``--vary``, ``points[2]``);
    ``varied`` are the keys a plan or sweep varies (see :func:`_refuse_initial_replicas`)."""
    try:
        sc, _ = load_scenario(scenario, overlay_assignments(dict(overrides)))
    except LlmsimError as e:
        raise LlmsimError(e.message, source=f"{scenario} ({what})", key_path=e.key_path) from None
    _refuse_initial_replicas(sc, varied, f"{scenario} ({what})")


def _refuse_initial_replicas(sc, varied: Sequence[str], source: str) -> None:
    """An autoscaled pool's ``replicas`` is only its count at t = 0: the
    autoscaler moves it from the first tick, so a plan over it would answer
    "1" whatever the load. Varying it is refused, naming the keys that do
    size such a pool."""
    autoscaled = {p.name for p in sc.pools if p.autoscaling is not None}
    pools = {"pools": [{"name": p.name} for p in sc.pools]}
    for key in varied:
        # pools.0 is the first pool as pools.NAME is: the key's pool by its place, as the overrides address it
        parts = resolved_key(pools, key)
        name = sc.pools[int(parts[1])].name if len(parts) == 3 and parts[::2] == ("pools", "replicas") \
            and parts[1].isdigit() and int(parts[1]) < len(sc.pools) else None
        if name in autoscaled:
            raise LlmsimError(
                f"pool {name!r} is autoscaled, so {key} only sets its count at t = 0 and the autoscaler moves it "
                f"from there: vary pools.{name}.autoscaling.max_replicas (the most it may run) or "
                f"pools.{name}.autoscaling.target (how busy it keeps a replica), or set pools.{name}.autoscaling: "
                f"null (--set) to size a fixed pool", source=source, key_path=key)



def run_point(point: Point) -> dict[str, Any]:
    """Simulate one point; an input error becomes the row's ``error``, so
    one bad combination does not take down a sweep."""
    from ..runner import simulate  # heavy; imported in the worker

    wall = time.perf_counter()
    try:
        sc, path = load_scenario(point.scenario, point.assignments())
        results = simulate(sc, engine=point.engine, source=path).results
        row = summarize(results)
        row["regime"] = regime_of_run(sc, results).text()   # where llmsim's error model judges it
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
        "output_throughput": results.get("output_throughput"),
    }
    for column, key in LATENCY_COLUMNS:
        row[column] = results.get(key)
    targets = (results.get("slo") or {}).get("targets", {})
    # every SLO the run is judged on, as llmsim run judges it: the scenario's, each class's and each
    # prompt-length bucket's own (the scenario's alone passed a fleet whose paid class missed its target),
    # and a fleet that keeps up with its load (one shedding 29 % met its targets on what it served)
    row["slo_met"] = fleet_met(results)
    row.update(load_columns(results))
    load = load_failure(row)
    missed = [load] if load and row["slo_met"] is False else []
    missed += [f"{target_name(label, k)} {_miss(t)}" for label, block in slo_blocks(results)
               for k, t in (block.get("targets") or {}).items() if not t.get("met")]
    refusal = refused_line(results) if slo_blocks(results) else None
    missed += [refusal] if refusal else []
    row["slo_failed"] = "; ".join(missed) or None
    for k, t in targets.items():
        row[f"attainment_{k}"] = t.get("attainment")
    row["slo_targets"] = slo_targets_text(results)     # for judging at a confidence (planning.confidence)
    cost = _dig(results, "llmsim", "cost") or {}
    # "usd_per_month": the key's name in results stored by older versions
    row["monthly_usd"] = cost.get("monthly_usd", cost.get("usd_per_month"))
    row["gpus"] = _dig(results, "llmsim", "gpus")
    # The product's figures beside the slice's: a plan answers for the product (llmsim.product).
    row["product_gpus"] = _dig(results, "llmsim", "product", "gpus")
    row["product_monthly_usd"] = _dig(results, "llmsim", "product", "monthly_usd")
    # power priced apart (energy.usd_per_kwh): a B200 fleet's dearer watts are part of what a plan weighs
    row["power_monthly_usd"] = (cost.get("power") or {}).get("monthly_usd")
    row["product_power_monthly_usd"] = _dig(results, "llmsim", "product", "power_monthly_usd")
    row["usd_per_request"] = cost.get("usd_per_request")
    row["error"] = None
    return row


def _miss(target: Mapping[str, Any]) -> str:
    measured = target.get("measured_ms")
    got = "no samples" if measured is None else ms_past(measured, target.get("target_ms"), grouped=False)
    return f"{got} > {target.get('target_ms'):g} ms"
