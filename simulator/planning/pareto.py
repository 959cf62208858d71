"""Cost against tail latency: which fleets are not beaten on both at once.

Every fleet the search simulated is a point (monthly cost, p99 TTFT); the
frontier is the SLO-meeting points that no other SLO-meeting point beats
on both. The cheapest point on it is the plan's answer; the rest show what
each extra dollar buys in latency headroom.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

from ..atomic_write import write_atomic

__all__ = ["pareto_front", "pareto_figure", "plot_pareto", "point_label", "month_with_power"]

X, Y = "monthly_usd", "ttft_p99_ms"


def month_with_power(row: Mapping[str, Any], product: bool = False) -> Optional[float]:
    """A fleet's month as plans rank and plot it: its GPU-hour bill, plus its power where the scenario
    prices energy apart (energy.usd_per_kwh), the slice's or (``product``) the product's. Without the
    power a plan weighed an H100 fleet against a B200 one by GPU-hours alone, the watts priced but unread."""
    gpu = row.get("product_monthly_usd" if product else "monthly_usd")
    power = row.get("product_power_monthly_usd" if product else "power_monthly_usd")
    return gpu if gpu is None or power is None else gpu + power


def pareto_front(points: Sequence[dict[str, Any]], x: str = X, y: str = Y) -> list[dict[str, Any]]:
    """Points not dominated on (x, y), both minimised, sorted by x. Points
    missing either figure are skipped; of exact ties, the first is kept."""
    usable = sorted((p for p in points if p.get(x) is not None and p.get(y) is not None),
                    key=lambda p: (p[x], p[y]))
    front: list[dict[str, Any]] = []
    for p in usable:
        if not front or p[y] < front[-1][y]:
            front.append(p)
    return front


def point_label(overrides: Mapping[str, Any]) -> str:
    """A planned or swept fleet, as short as still tells it apart: the
    values of its overrides, each under the last part of its key
    (``gpu=h200, replicas=13``)."""
    return ", ".join(f"{str(k).rsplit('.', 1)[-1]}={v}" for k, v in overrides.items())


def pareto_figure(probes: Sequence[dict[str, Any]], best: dict[str, Any] | None, title: str = ""):
    """Monthly cost against p99 TTFT of every fleet simulated, each named by
    what it varied; met, missed and overloaded apart, the frontier and the choice."""
    from matplotlib.figure import Figure
    from matplotlib.ticker import FuncFormatter

    # The product's cost where the scenario is a slice of one (the plan's best line leads with it), else
    # the simulated fleet's: one scale on both, since the product is the slice times a fixed count.
    product = any(p.get("product_monthly_usd") not in (None, p.get(X)) for p in probes)
    powered = any(p.get("power_monthly_usd") is not None for p in probes)
    x = "plotted_monthly_usd"           # the month plans rank by: GPU-hours, and power where it is priced
    probes = [{**p, x: month_with_power(p, product)} for p in probes]
    best = None if best is None else {**best, x: month_with_power(best, product)}
    met = [p for p in probes if p.get("slo_met")]
    # a fleet that does not keep up fails on its load, whatever its latencies read (its p99 measures a backlog)
    overloaded = [p for p in probes if p.get("overloaded")]
    missed = [p for p in probes if not p.get("slo_met") and not p.get("overloaded")]
    fig = Figure(figsize=(8, 5), dpi=120, layout="constrained")
    ax = fig.subplots()
    for group, style, label in ((overloaded, dict(marker="v", color="tab:gray", alpha=0.6), "overloaded"),
                                (missed, dict(marker="x", color="tab:red", alpha=0.6), "SLO missed"),
                                (met, dict(marker="o", color="tab:blue", alpha=0.6), "SLO met")):
        pts = [p for p in group if p.get(x) is not None and p.get(Y) is not None]
        if pts:
            ax.scatter([p[x] for p in pts], [p[Y] for p in pts], label=label, linestyle="none", **style)
    xs = [p[x] for p in probes if p.get(x) is not None]
    middle = (min(xs) + max(xs)) / 2 if xs else 0.0
    for p in probes:    # each fleet named where it sits (which GPU, how many), inward so it stays in the axes
        if p.get(x) is not None and p.get(Y) is not None and p.get("overrides"):
            right = p[x] > middle
            ax.annotate(point_label(p["overrides"]), (p[x], p[Y]), xytext=(-4 if right else 4, 3),
                        textcoords="offset points", ha="right" if right else "left", fontsize=7, alpha=0.85)
    front = pareto_front(met, x=x)
    if front:
        ax.step([p[x] for p in front], [p[Y] for p in front], where="post", color="tab:blue", lw=1,
                label="Pareto frontier")
    if best is not None and best.get(x) is not None and best.get(Y) is not None:
        ax.scatter([best[x]], [best[Y]], marker="*", s=250, color="gold", edgecolor="black", zorder=5,
                   label="cheapest meeting the SLO")
    ax.set_xlabel(("monthly cost of the product" if product else "monthly cost")
                  + (" with power (USD)" if powered else " (USD)"))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"${v / 1e6:,.3g}M" if v >= 1e6 else f"${v:,.0f}"))
    ax.set_ylabel("p99 TTFT (ms)")
    ax.set_yscale("log")
    ax.set_title(title or "cost vs p99 TTFT of every fleet simulated")
    ax.grid(True, alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8)
    return fig


def plot_pareto(probes: Sequence[dict[str, Any]], best: dict[str, Any] | None, path: str | Path,
                title: str = "") -> Path:
    fig = pareto_figure(probes, best, title)
    return write_atomic(path, lambda tmp: fig.savefig(tmp, format=Path(path).suffix.lstrip(".") or "png"))
