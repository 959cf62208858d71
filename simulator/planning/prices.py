"""What a plan's fleets pay per GPU-hour, and a pinned price meeting a GPU axis.

A pool's ``usd_per_gpu_hour`` overrides its GPU profile's price
(:func:`~simulator.metrics.cost.pool_price`). Written for one GPU, it is
that GPU's negotiated rate; once a plan varies the GPU, the same number
bills every kind, and the ranking then compares GPUs at one price, which a
user rarely means and cannot see in the answer. So the plan says so, and
shows each row's price beside its GPU; a sweep over GPUs says so too.

It says so rather than refusing: a flat rate across kinds (a budget per
GPU-hour, a price held fixed on purpose) is a question a user may ask, and
one ``--set pools.NAME.usd_per_gpu_hour=null`` turns it into the other.
A price the command line itself gives (``--set``) is the user's own
statement and draws no warning; one the plan varies alongside the GPU
(another axis, or each choice setting its own) is not pinned.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping, Optional, Sequence

from ..metrics.cost import pool_price
from ..profiles.hardware import load_hardware
from ..scenario.load import load_scenario
from ..scenario.variants import merge_overlays, overlay_assignments
from .point import Point

__all__ = ["PoolPrice", "Prices", "pinned_prices", "priced_by", "sweep_pinned_prices", "gpu_varied_pools"]


@dataclass(frozen=True)
class PoolPrice:
    """One pool of one run: its GPU, the price it is billed at, and the scenario's ``usd_per_gpu_hour``
    (None: the profile's price applies)."""

    gpu: str
    usd_per_gpu_hour: float
    pinned: Optional[float]


class Prices:
    """Each pool's price in the scenario under given overrides, loaded once per distinct overrides
    (a plan asks for the same combinations again: its precheck's runs, then its candidates)."""

    def __init__(self, scenario: str | Path, sets: Mapping[str, Any]):
        self.scenario, self.sets = scenario, dict(sets)
        self._seen: dict[str, dict[str, PoolPrice]] = {}

    def of(self, overrides: Mapping[str, Any]) -> dict[str, PoolPrice]:
        """Pool name -> :class:`PoolPrice`, with ``overrides`` on top of the plan's sets."""
        key = json.dumps(dict(overrides), sort_keys=True, default=str)
        if key not in self._seen:
            sc, _ = load_scenario(self.scenario, overlay_assignments(merge_overlays([self.sets, overrides])))
            self._seen[key] = {p.name: PoolPrice(p.gpu, pool_price(p, load_hardware(p.gpu))[0], p.usd_per_gpu_hour)
                               for p in sc.pools}
        return self._seen[key]


def priced_by(assignments: Iterable[Mapping[str, Any]], names: Sequence[str]) -> frozenset[str]:
    """The pools whose ``usd_per_gpu_hour`` these overrides state: ``pools.NAME.usd_per_gpu_hour``
    (by name or position), a whole ``pools.NAME`` choice that gives one, or a ``pools`` list."""
    out = set()
    for overrides in assignments:
        for key, value in overrides.items():
            parts = str(key).split(".")
            if parts[0] != "pools":
                continue
            if len(parts) == 1:
                out |= {p.get("name") for p in value or [] if isinstance(p, Mapping) and "usd_per_gpu_hour" in p}
                continue
            name = parts[1] if parts[1] in names else (names[int(parts[1])] if parts[1].isdigit()
                                                        and int(parts[1]) < len(names) else None)
            if (parts[2:] == ["usd_per_gpu_hour"]
                    or (len(parts) == 2 and isinstance(value, Mapping) and "usd_per_gpu_hour" in value)):
                out.add(name)
    return frozenset(n for n in out if n is not None)


_GPU_KEY = re.compile(r"^pools(\.[^.]+)?(\.gpu)?$")


def sweep_pinned_prices(points: Sequence[Point]) -> list[dict[str, Any]]:
    """:func:`pinned_prices` of a sweep's points (one base scenario, each point's overrides on it)."""
    # only a point that sets a GPU (or a whole pool, or the pools) can bill one at another's price:
    # a grid without one is not loaded again point by point
    if not any(_GPU_KEY.match(str(k)) for p in points for k, _ in p.overrides):
        return []
    prices = Prices(points[0].scenario, {})
    stated = prices.of({})
    return pinned_prices([prices.of(dict(p.overrides)) for p in points], stated, command="sweep",
                         restated=[priced_by([dict(p.overrides)], list(stated)) for p in points])


def gpu_varied_pools(runs: Iterable[Mapping[str, PoolPrice]]) -> list[str]:
    """The pools whose GPU differs between runs, however the axes spell it (``pools.chat.gpu``,
    ``pools.0.gpu``, a whole ``pools.chat={...}`` choice), in the scenario's order."""
    gpus: dict[str, set[str]] = {}
    for run in runs:
        for name, p in run.items():
            gpus.setdefault(name, set()).add(p.gpu)
    return [name for name, kinds in gpus.items() if len(kinds) > 1]


def pinned_prices(runs: list[Mapping[str, PoolPrice]], stated: Mapping[str, PoolPrice],
                  command: str = "plan", restated: Sequence[frozenset[str]] = ()) -> list[dict[str, Any]]:
    """Every pool billed at one pinned ``usd_per_gpu_hour`` on a GPU it was not written for (the plan varies
    the GPU, or sets another, even a single one), as plan.json records it (with the warning to print);
    ``stated`` is the scenario as its file and variants leave it, without ``--set``, so a price only the
    command line pins is left out. ``command``: whose runs the warning speaks of (plan, sweep);
    ``restated``: per run (in the order of ``runs``; none: no run), the pools whose price the command line
    or that run's own choices state (:func:`priced_by`), at the file's value or not: the user's own
    statement, no warning for that run. Decided run by run: one point pricing its own GPU left every
    other point's GPU billed at the pin without a word."""
    out = []
    for name in stated:
        pools = [run[name] for i, run in enumerate(runs)
                 if name in run and not (i < len(restated) and name in restated[i])]
        kinds = list(dict.fromkeys(p.gpu for p in pools))
        if not pools or kinds == [stated[name].gpu]:
            continue      # the GPU the price was written for, in every run
        pins = {p.pinned for p in pools}
        (pin,) = pins if len(pins) == 1 else (None,)
        if pin is None or stated[name].pinned != pin:
            continue
        profile = {g: load_hardware(g).price.usd_per_gpu_hour for g in kinds}
        # by name, as the user writes it; by position where a name cannot address it (a dot, a number)
        address = f"pools.{name}" if "." not in name and not name.isdigit() else f"pools.{list(stated).index(name)}"
        says = ", ".join(f"{g} ${usd:,.2f}" for g, usd in profile.items())
        warning = (f"pool {name}'s price is pinned at ${pin:,.2f}/GPU-h (the scenario's usd_per_gpu_hour, written "
                   f"for {stated[name].gpu}), so every GPU this {command} tries is billed at it, though their profiles "
                   f"say {says}; to bill each GPU at its own profile's price, add --set "
                   f"{address}.usd_per_gpu_hour=null")
        out.append({"pool": name, "usd_per_gpu_hour": pin, "gpus": kinds, "profile_usd_per_gpu_hour": profile,
                    "warning": warning})
    return out
