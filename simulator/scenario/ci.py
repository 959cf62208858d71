"""The scenario's ``check`` block: how ``llmsim check`` runs it in CI.

A scenario sized for a capacity answer can take minutes; a CI job wants
seconds and a handful of numbers that mean "the product still meets its
SLO at the same cost". The block shrinks the run with overlays (same key
paths as ``--set``) and names the results.json keys to hold against the
committed baseline, with a relative tolerance where the default is wrong
for a metric (a p99 over 500 requests moves more than a median).
"""
from __future__ import annotations

import difflib
from pathlib import Path
from typing import Annotated, Mapping, Optional, Sequence

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ..errors import LlmsimError, first_few
from ..fields import AS_GIVEN, Fields, lookup
from .variants import Overlay

__all__ = ["CheckSpec", "DEFAULT_METRICS", "check_metric_names"]

#: Tracked when a scenario names none: the latencies an SLO is written in,
#: what the fleet served, and what it costs.
DEFAULT_METRICS = (
    "median_ttft_ms", "p95_ttft_ms", "p99_ttft_ms", "median_tpot_ms", "p99_tpot_ms", "p99_e2el_ms",
    "request_throughput", "failed", "llmsim.gpus", "llmsim.cost.usd_per_request", "llmsim.cost.monthly_usd",
)


class CheckSpec(BaseModel):
    """Fast settings and tracked metrics for `llmsim check`."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    set: Overlay = Field(default_factory=dict,
                         description="key.path: value overlays that shrink the run for CI (workload.num_requests: 500)")
    metrics: list[str] = Field(default_factory=lambda: list(DEFAULT_METRICS), min_length=1,
                               description="results.json keys held against the baseline, dotted for nested "
                                           "ones (llmsim.cost.usd_per_request); default: TTFT/TPOT/E2EL "
                                           "percentiles, throughput, failures, GPUs and cost")
    tolerance: dict[str, Annotated[float, Field(ge=0)]] = Field(
        default_factory=dict, description="relative tolerance per metric (p99_ttft_ms: 0.1), over --tolerance")

    @model_validator(mode="after")
    def _tolerances_name_tracked_metrics(self) -> "CheckSpec":
        twice = sorted({m for m in self.metrics if self.metrics.count(m) > 1})
        if twice:      # tracked once whatever the count: a second entry is a slip, often a typo of another
            raise ValueError(f"metrics listed twice: {', '.join(twice)}; list each once")
        # A tolerance for an untracked metric is a typo that would loosen nothing.
        stray = [m for m in self.tolerance if m not in self.metrics]
        if stray:
            raise ValueError(f"tolerance given for metrics not tracked: {', '.join(stray)} "
                             f"(tracked: {', '.join(self.metrics)})")
        return self


#: Units of results.json keys that are never a number, and what ``check`` would find there after its run.
NOT_FIGURES = {"text": "text", "bool": "a yes/no", "list of text": "a list of names"}


def check_metric_names(spec: CheckSpec, results: Fields, source: str | Path,
                       names: Optional[Mapping[str, Sequence[str]]] = None) -> None:
    """Every tracked metric is a figure results.json declares. Checked as the
    scenario loads, so that ``llmsim run``, ``plan`` and ``sweep`` of the file
    refuse a typo as ``llmsim check`` would, and ``check`` refuses it before
    its first run rather than after. ``names``: the scenario's own names for
    a results key in angle brackets (its pools for ``<pool>``, its classes
    for ``<class>``), so that a pool it does not have is refused too."""
    for i, m in enumerate(spec.metrics):
        found, depth, there = lookup(m, results, names)
        where = f"check.metrics[{i}]"
        if found is None:
            raise LlmsimError(f"{m!r} is not a key of results.json; {_meant(m, depth, there, results, names)}",
                              source=source, key_path=where)
        if found.keys is not None:
            keys = [f"{m}.{k}" for k in found.keys]
            raise LlmsimError(f"{m!r} is a block of results.json, not a figure; name one of its keys: "
                              f"{first_few(keys, 4)}", source=source, key_path=where)
        if found.unit == AS_GIVEN and _names_the_setting(m, found, results):
            raise LlmsimError(f"{m!r} is a setting repeated as the scenario wrote it, not a figure; name a "
                              f"number inside it by its scenario key ({m}.KEY)", source=source, key_path=where)
        if found.unit in NOT_FIGURES:
            raise LlmsimError(f"{m!r} is {NOT_FIGURES[found.unit]}, not a number to hold against a baseline",
                              source=source, key_path=where)
        pairs = found.unit.startswith(("list of [", "["))     # items that are lists themselves: [s, GPUs]
        indices = len(m.split(".")) - len(m.rstrip("0123456789.").split("."))   # trailing index parts
        if indices and found.unit != AS_GIVEN and not found.unit.startswith(("list", "[")):
            whole = ".".join(m.split(".")[:-indices])
            raise LlmsimError(f"{m!r} indexes {whole!r}, which is a figure, not a list; name {whole}",
                              source=source, key_path=where)
        if found.unit.startswith(("list", "[")) and indices < 1 + pairs:
            item = f"{m}.0.1" if pairs and not indices else f"{m}.1" if pairs else f"{m}.0"
            raise LlmsimError(f"{m!r} is a list ({found.unit}), not a figure; name one "
                              f"{'entry of an item' if pairs else 'item'} by its index: {item}",
                              source=source, key_path=where)


def _names_the_setting(metric: str, found: object, results: Fields) -> bool:
    """Whether ``metric`` ends at a setting repeated as given (a block whose
    keys are the scenario's, which :func:`lookup` also returns for any key
    below it) rather than at a key inside it."""
    parent = metric.rpartition(".")[0]
    return not parent or lookup(parent, results)[0] is not found


def _meant(metric: str, depth: int, there: Fields, results: Fields,
           names: Optional[Mapping[str, Sequence[str]]] = None) -> str:
    """The nearest declared key to a mistyped one: its first wrong part
    replaced by the nearest name declared there, or the scenario's own name
    where a pool or class goes (``p95_ttfx_ms``, ``llmsim.cost.monthy_usd``,
    ``llmsim.pools.chta.gpus``)."""
    parts = metric.split(".")
    if not there:
        return f"{'.'.join(parts[:depth])} is a figure, with no keys below it"
    named = [n for k in there if k in (names or {}) for n in names[k]]
    keys = [k for k in there if not (k.startswith("<") and k.endswith(">"))] + named
    if not keys:
        return f"the scenario has no {' or '.join(k.strip('<>') for k in there)} names to put there"
    near = difflib.get_close_matches(parts[depth], keys, n=1)
    if not near:
        whose = f"{'.'.join(parts[:depth])}'s keys" if depth else "its top-level keys"
        if named and len(named) == len(keys):
            whose = f"the scenario's {' and '.join(k.strip('<>') for k in there)} names"
        return f"{whose} are {first_few(keys, 6)}"
    whole = ".".join([*parts[:depth], near[0], *parts[depth + 1:]])
    fixed, _, _ = lookup(whole, results, names)
    return f"did you mean {whole if fixed is not None else '.'.join([*parts[:depth], near[0]])}?"
