"""Cost against tail latency: which fleets are not beaten on both at once.

Every fleet the search simulated is a point (monthly cost, p99 TTFT); the
frontier is the SLO-meeting points that no other SLO-meeting point beats
on both. The cheapest point on it is the plan's answer; the rest show what
each extra dollar buys in latency headroom.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

__all__ = ["pareto_front", "plot_pareto"]

X, Y = "monthly_usd", "ttft_p99_ms"


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


def plot_pareto(probes: Sequence[dict[str, Any]], best: dict[str, Any] | None, path: str | Path,
                title: str = "") -> Path:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    met = [p for p in probes if p.get("slo_met")]
    missed = [p for p in probes if not p.get("slo_met")]
    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=120)
    for group, style, label in ((missed, dict(marker="x", color="tab:red", alpha=0.6), "SLO missed"),
                                (met, dict(marker="o", color="tab:blue", alpha=0.6), "SLO met")):
        pts = [p for p in group if p.get(X) is not None and p.get(Y) is not None]
        if pts:
            ax.scatter([p[X] for p in pts], [p[Y] for p in pts], label=label, linestyle="none", **style)
    front = pareto_front(met)
    if front:
        ax.step([p[X] for p in front], [p[Y] for p in front], where="post", color="tab:blue", lw=1,
                label="Pareto frontier")
    if best is not None and best.get(X) is not None and best.get(Y) is not None:
        ax.scatter([best[X]], [best[Y]], marker="*", s=250, color="gold", edgecolor="black", zorder=5,
                   label="cheapest meeting the SLO")
    ax.set_xlabel("monthly cost (USD)")
    ax.set_ylabel("p99 TTFT (ms)")
    ax.set_yscale("log")
    ax.set_title(title or "cost vs p99 TTFT of every fleet simulated")
    ax.grid(True, alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path)
    plt.close(fig)
    return path
