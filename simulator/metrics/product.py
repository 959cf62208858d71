"""The product behind a simulated slice: ``product.slices`` in a scenario.

A capacity answer is for the whole product, but a product's fleet is often
too big to simulate, so a scenario simulates a slice of it: 1/N of the users
on 1/N of the fleet. ``product: {slices: N}`` says so, and results.json's
``llmsim.product`` (what the report and the plots lead with) scales the
slice's counts and bill by N beside the slice's own.

The scaling is the one a sharded run (``--shards``) relies on: the product
is N copies of the slice. It holds when the slices' users are independent
(a session stays in its slice, every shared prefix is held by every
replica) and the fleet divides into N equal parts; it leaves out whatever
one big fleet gains over N small ones (batching across more users, routing
over more replicas), so the product's figure errs high, if at all.
Latencies, utilisations and costs per request or token are the slice's.
"""
from __future__ import annotations

from typing import Any, Iterable, Mapping

from pydantic import BaseModel, ConfigDict, Field
from ..fields import block, leaf

__all__ = ["ProductSpec", "product_block", "sliced"]


#: ``llmsim.product`` (the scaling is the module docstring's).
FIELDS = {
    "slices": leaf("count", "product.slices: the product is this many copies of the simulated slice"),
    "traffic_fraction": leaf("fraction", "1 / slices: the slice's share of the product's traffic"),
    "gpus": leaf("GPUs", "the product's peak GPUs: the slice's × slices"),
    "gpus_mean": leaf("GPUs", "the product's mean GPUs: the slice's × slices"),
    "monthly_usd": leaf("USD/month", "the product's monthly bill: the slice's × slices"),
    "power_monthly_usd": leaf("USD/month", "the product's power a month at energy.usd_per_kwh, on top of "
                                           "monthly_usd: the slice's (llmsim.cost.power) × slices",
                              when="energy.usd_per_kwh is set"),
    "kwh_per_month": leaf("kWh/month", "the product's facility energy: the slice's × slices; null without power data"),
    "co2e_kg_per_month": leaf("kg CO2e/month", "the product's emissions: the slice's × slices"),
    "pools": block("per pool", {"<pool>": block("one pool, × slices", {
        "gpu": leaf("text", "the pool's GPU"), "gpus": leaf("GPUs", "peak GPUs × slices"),
        "gpus_mean": leaf("GPUs", "mean GPUs × slices")})}),
    "standby_gpus": leaf("GPUs", "warm-standby GPUs × slices"),
    "pooled_gpus": leaf("GPUs", "peak GPUs of one pooled fleet holding a single standby set"),
    "pooled": leaf("text", "what the per-slice figures hold that one pooled fleet would not; empty for one slice"),
    "scaling": leaf("text", "how the slice was scaled, and what that assumes"),
    "slice": block("the slice as simulated", {"gpus": leaf("GPUs", "peak GPUs"), "gpus_mean": leaf("GPUs", "mean GPUs"),
                                             "monthly_usd": leaf("USD/month", "monthly bill")}),
}


class ProductSpec(BaseModel):
    """What fraction of the product the scenario simulates."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    slices: int = Field(
        ge=1, le=1_000_000_000,
        description="the scenario simulates 1/slices of the product: 1/slices of its users (traffic) on "
                    "1/slices of its fleet; the report leads with the product's GPUs and monthly cost, "
                    "the slice's × slices (at most a billion: a slice of fewer than ~8 people is no slice)")


def _scaling(n: int) -> str:
    if n == 1:
        return "the simulated fleet is the whole product (the scenario sets no product.slices)"
    return (f"the simulated slice × {n:,} (it carries 1/{n:,} of the product's traffic): GPU counts and cost × "
            f"{n:,}, latencies and cost per request as simulated; assumes the product is {n:,} copies of the "
            f"slice (users independent across slices, the fleet divisible into {n:,} equal parts), so what one "
            f"big fleet gains over {n:,} small ones is not counted")


def _pooled(n: int, llmsim: Mapping[str, Any], standby: int) -> str:
    """What the per-slice figures hold that one pooled fleet would not."""
    if n == 1:
        return ""
    out = []
    if standby:
        out.append(f"{n * standby:,} of the product's GPUs at peak are warm standby, {standby:,} per slice; one "
                   f"pooled fleet with a single standby set would peak at {n * (llmsim['gpus'] - standby) + standby:,}")
    floored = [f"{name} ({p['floor_replicas']:,} per slice)" for name, p in (llmsim.get("pools") or {}).items()
               if p.get("floor_replicas") and p.get("replicas_max") == p["floor_replicas"]]
    if floored:
        out.append(f"pools held at their min_replicas floor all run: {', '.join(floored)}; their product count is "
                   f"the floor × {n:,}, not a measured need")
    return "; ".join(out)


def product_block(n: int, llmsim: Mapping[str, Any]) -> dict[str, Any]:
    """``llmsim.product``: the fleet's counts and bill × ``n``, and the slice's as simulated."""
    cost = llmsim.get("cost") or {}
    monthly = cost.get("monthly_usd")
    pools = {name: {"gpu": p.get("gpu"), "gpus": n * p["gpus"], "gpus_mean": n * p["gpus_mean"]}
             for name, p in (llmsim.get("pools") or {}).items()}
    standby = sum(p.get("standby_gpus", 0) for p in (llmsim.get("pools") or {}).values())
    energy = llmsim.get("energy") or {}

    def times_n(v: Any) -> Any:
        return None if v is None else n * v

    power = (cost.get("power") or {}).get("monthly_usd")
    return {
        **({"power_monthly_usd": n * power} if power is not None else {}),
        "slices": n,
        "traffic_fraction": 1.0 / n,
        "gpus": n * llmsim["gpus"],
        "gpus_mean": n * llmsim["gpus_mean"],
        "monthly_usd": None if monthly is None else n * monthly,
        "kwh_per_month": times_n(energy.get("kwh_per_month")),
        "co2e_kg_per_month": times_n(energy.get("co2e_kg_per_month")),
        "pools": pools,
        "standby_gpus": n * standby,
        "pooled_gpus": n * (llmsim["gpus"] - standby) + standby,
        "pooled": _pooled(n, llmsim, standby),
        "scaling": _scaling(n),
        "slice": {"gpus": llmsim["gpus"], "gpus_mean": llmsim["gpus_mean"], "monthly_usd": monthly},
    }


def sliced(rows: Iterable[Mapping[str, Any]]) -> bool:
    """Whether rows of runs (``gpus``, ``product_gpus``) are slices of a bigger product: then every table and
    chart of them leads with the product's GPUs and bill, which a reader of one figure compares with another."""
    return any(r.get("product_gpus") not in (None, r.get("gpus")) for r in rows)
