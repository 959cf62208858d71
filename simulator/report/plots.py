"""Figures of a run and of a ladder, as PNG files or matplotlib Figures.

Built on ``matplotlib.figure.Figure`` rather than pyplot: no global backend
is switched (a notebook importing this keeps its inline display), nothing
opens a window, and PNGs are rendered by Agg. Each ``*_figure`` function
returns the Figure, so a notebook can show or restyle it; ``write_*`` saves
the PNGs of a results folder.

What a capacity planner looks at, in order: do the latency distributions
clear the SLO (CDFs with the targets drawn where the curve must pass), what
the fleet did over time (arrivals, replicas, queues, KV memory), where the
money goes (per pool), and for a ladder what each lever bought.
"""
from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any, Iterable, Mapping, Optional, Sequence

import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter, PercentFormatter

from ..metrics.derive import RequestArrays
from ..metrics.product import sliced
from .summary_format import gpu_hours

__all__ = ["latency_cdf_figure", "timeline_figure", "cost_figure", "ladder_figure", "pool_costs",
           "write_run_plots", "write_ladder_plot"]

DPI = 120
_GUIDES = (0.5, 0.95, 0.99)           # percentile guide lines on the CDFs
_LOG_SPAN = 8.0                        # use a log axis when values span more than this factor
_CDF_POINTS = 2000                     # a CDF drawn from more points looks the same and saves slowly


def _wants_log(values: np.ndarray) -> bool:
    v = values[np.isfinite(values) & (values > 0)]
    return v.size > 1 and v.max() / v.min() > _LOG_SPAN


def _log_ms_axis(axis, values: np.ndarray) -> None:
    """Log scale in plain milliseconds (10, 100, 1,000 rather than 10^2),
    with 1-2-5 ticks when the data spans too few decades for 10^k alone."""
    v = values[np.isfinite(values) & (values > 0)]
    axis.axes.set_xscale("log") if axis.axis_name == "x" else axis.axes.set_yscale("log")
    if v.size and v.max() / v.min() < 1000:
        axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    axis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:,.0f}" if x >= 1 else f"{x:g}"))
    axis.set_minor_formatter(NullFormatter())


# --- latency CDFs -------------------------------------------------------------------

def _slo_lines(results: Mapping[str, Any], metric: str) -> list[tuple[float, float, bool]]:
    """(target ms, percentile, met) of the SLO targets on ``metric``."""
    targets = ((results.get("slo") or {}).get("targets") or {}).values()
    return [(t["target_ms"], t["percentile"], bool(t.get("met"))) for t in targets if t.get("metric") == metric]


def _cdf_panel(ax, values: np.ndarray, title: str, xlabel: str, slo: Sequence[tuple[float, float, bool]]) -> None:
    values = np.sort(values[np.isfinite(values)])
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("finished requests at or below x")
    ax.grid(True, which="major", alpha=0.3)
    if not values.size:
        ax.text(0.5, 0.5, "no finished requests with this metric", ha="center", va="center", transform=ax.transAxes)
        return
    y = np.arange(1, values.size + 1) / values.size
    keep = np.unique(np.linspace(0, values.size - 1, min(values.size, _CDF_POINTS)).astype(int))
    ax.step(values[keep], y[keep], where="post", color="C0", lw=1.8, label=f"simulated ({values.size:,} requests)")
    ax.set_ylim(0, 1.02)
    ax.yaxis.set_major_formatter(PercentFormatter(1.0))
    span = np.concatenate([values, [t for t, _, _ in slo]])
    if _wants_log(span):
        _log_ms_axis(ax.xaxis, span)
    for q in _GUIDES:
        ax.axhline(q, color="0.6", lw=0.7, ls=":")
        ax.annotate(f"p{q * 100:g}", (1.0, q), xycoords=("axes fraction", "data"), xytext=(3, 0),
                    textcoords="offset points", va="center", fontsize=8, color="0.4")
    for target, pct, met in slo:
        color = "C2" if met else "C3"
        ax.axvline(target, color=color, ls="--", lw=1.2)
        ax.plot([target], [pct / 100.0], marker="o", color=color, ms=7,
                label=f"SLO p{pct:g} ≤ {target:,.0f} ms ({'met' if met else 'missed'})")
    ax.legend(loc="best", fontsize=8)


def latency_cdf_figure(requests: Iterable, results: Mapping[str, Any], title: str = "") -> Figure:
    """TTFT and TPOT CDFs of finished requests, each SLO target drawn as a
    dashed line with a dot where the curve must pass (green met, red missed)."""
    a = RequestArrays(requests)
    fig = Figure(figsize=(12, 4.8), dpi=DPI, layout="constrained")
    ax1, ax2 = fig.subplots(1, 2)
    _cdf_panel(ax1, a.ttft_ms[a.finished], "Time to first token", "TTFT (ms)", _slo_lines(results, "ttft"))
    _cdf_panel(ax2, a.tpot_ms, "Time per output token (per request)", "TPOT (ms)", _slo_lines(results, "tpot"))
    if title:
        fig.suptitle(title)
    return fig


# --- timeline ------------------------------------------------------------------------

def _time_axis(seconds: np.ndarray) -> tuple[float, str]:
    """A divisor and unit that keep the time axis in readable numbers."""
    end = float(np.nanmax(seconds)) if seconds.size else 0.0
    if end >= 3 * 3600:
        return 3600.0, "h"
    if end >= 3 * 60:
        return 60.0, "min"
    return 1.0, "s"


#: Replica states drawn, by line style; ``warm`` (a warm pool's standbys, those still loading included)
#: only when the timeline has it.
_REPLICA_STYLES = (("ready", "-"), ("starting", "--"), ("draining", ":"), ("warm", "-."))
_STYLE_NAMES = {"-": "solid", "--": "dashed", ":": "dotted", "-.": "dash-dot"}


def timeline_figure(timeline, title: str = "") -> Figure:
    """Arrival rate, replicas (ready solid, starting dashed, draining
    dotted, warm dash-dot), queue depth and KV utilisation per pool over
    simulated time, from a DataFrame with columns time_s, pool, ready,
    starting, draining, queue_depth, kv_utilization, arrival_rate_per_s
    (and optionally warm)."""
    df = timeline.sort_values(["pool", "time_s"])
    scale, unit = _time_axis(df["time_s"].to_numpy(dtype=float))
    fig = Figure(figsize=(12, 10), dpi=DPI, layout="constrained")
    axes = fig.subplots(4, 1, sharex=True)
    pools = list(dict.fromkeys(df["pool"]))
    groups = {p: df[df["pool"] == p] for p in pools}
    rate_axis, rep_axis, queue_axis, kv_axis = axes

    # The arrival rate may be the fleet's, repeated on every pool's rows: then draw it once.
    rates = {p: g["arrival_rate_per_s"].to_numpy(dtype=float) for p, g in groups.items()}
    fleet_wide = len(pools) > 1 and all(np.array_equal(rates[pools[0]], r) for r in rates.values())
    for i, (p, g) in enumerate(groups.items()):
        t = g["time_s"].to_numpy(dtype=float) / scale
        color = f"C{i % 10}"
        if not fleet_wide or i == 0:
            rate_axis.plot(t, rates[p], color="0.2" if fleet_wide else color, lw=1.4,
                           label="fleet" if fleet_wide else p)
        for col, ls in _REPLICA_STYLES:
            if col not in g:
                continue
            rep_axis.step(t, g[col].to_numpy(dtype=float), where="post", color=color, ls=ls, lw=1.4,
                          label=p if col == "ready" else None)   # the panel title keys the line styles
        queue_axis.plot(t, g["queue_depth"].to_numpy(dtype=float), color=color, lw=1.4, label=p)
        kv_axis.plot(t, g["kv_utilization"].to_numpy(dtype=float), color=color, lw=1.4, label=p)

    rate_axis.set_ylabel("arrivals (req/s)")
    rep_axis.set_ylabel("replicas")
    rep_axis.yaxis.get_major_locator().set_params(integer=True)
    queue_axis.set_ylabel("queued requests")
    kv_axis.set_ylabel("KV cache used")
    kv_axis.set_ylim(0, 1.05)
    kv_axis.yaxis.set_major_formatter(PercentFormatter(1.0))
    kv_axis.set_xlabel(f"simulated time ({unit})")
    styles = ", ".join(f"{col} ({_STYLE_NAMES[ls]})" for col, ls in _REPLICA_STYLES if col in df)
    for ax, title_ in zip(axes, ("Arrival rate", f"Replicas: {styles}",
                                 "Queue depth", "KV cache utilisation")):
        ax.set_title(title_, loc="left", fontsize=10)
        ax.grid(True, alpha=0.3)
        ax.set_ylim(bottom=0)
        if len(pools) > 1:
            ax.legend(loc="upper left", bbox_to_anchor=(1.005, 1.0), fontsize=8, frameon=False)
    one = f"pool {pools[0]}" if len(pools) == 1 else ""
    if title or one:
        fig.suptitle(", ".join(x for x in (title, one) if x))
    return fig


# --- cost ----------------------------------------------------------------------------

_POOL_KEYS = ("gpu_hours", "usd", "gpus", "gpus_mean", "gpu", "usd_per_gpu_hour", "monthly_usd")


def pool_costs(results: Mapping[str, Any]) -> list[dict[str, Any]]:
    """{name, gpu_hours, usd, gpus, gpu, usd_per_gpu_hour} per pool (None
    where unknown), ``usd`` being the window's. From a fleet's per-pool
    blocks (``llmsim.pools``, by name) when they carry money, with prices
    from the bills in ``llmsim.cost.pools``; else from those bills; else the
    whole ``llmsim.cost`` as one pool."""
    llmsim = results.get("llmsim") or {}
    cost = llmsim.get("cost") or {}
    bills = {str(p.get("name")): p for p in cost.get("pools") or [] if isinstance(p, Mapping)}
    fleet = llmsim.get("pools")
    for items in (list(fleet.items()) if isinstance(fleet, Mapping) else [], list(bills.items())):
        if items and all(isinstance(p, Mapping) and p.get("usd") is not None for _, p in items):
            return [{"name": str(n), **{k: p.get(k, bills.get(str(n), {}).get(k)) for k in _POOL_KEYS}}
                    for n, p in items]
    if cost.get("window_usd") is None:
        return []
    return [{"name": llmsim.get("scenario") or "fleet", **dict.fromkeys(_POOL_KEYS), "gpu_hours": cost.get("gpu_hours"),
             "usd": cost["window_usd"], "gpus": llmsim.get("gpus"), "monthly_usd": cost.get("monthly_usd")}]


def _money(v: float) -> str:
    """Dollars for a figure: escaped, since two $ in one string start mathtext."""
    return rf"\${v:,.0f}" if abs(v) >= 100 else rf"\${v:,.2f}" if abs(v) >= 1 else rf"\${v:.3g}"


def _fleet_shape(p: Mapping[str, Any], n: int = 1) -> str:
    """``peak 4 × h100-sxm, mean 3.2 at $2.99/GPU-h``: the pool's billed GPUs
    as results.json counts them (:mod:`simulator.metrics.gpu_counts`), × the
    product's ``n`` slices."""
    if p.get("gpus") is None:
        return ""
    kind = f" × {p['gpu']}" if p.get("gpu") else " GPUs"
    mean = f", mean {n * p['gpus_mean']:,.1f}" if p.get("gpus_mean") is not None else ""
    price = f" at {_money(p['usd_per_gpu_hour'])}/GPU-h" if p.get("usd_per_gpu_hour") is not None else ""
    return f"peak {n * p['gpus']:,}{kind}{mean}{price}"


def _gpu_hours(gh: Optional[float]) -> str:
    return "" if gh is None else f"{gpu_hours(gh)} GPU-h in the window"


def _short_money(v: float) -> str:
    """An axis tick: $12M, $350k, $40 (a full figure per tick would run into the next)."""
    for size, unit in ((1e9, "B"), (1e6, "M"), (1e3, "k")):
        if abs(v) >= size:
            return rf"\${v / size:,.3g}{unit}"
    return rf"\${v:,.3g}"


def cost_figure(results: Mapping[str, Any], title: str = "") -> Optional[Figure]:
    """The product's monthly cost per pool (each pool's ``monthly_usd``, or
    the window's cost scaled as results.json's monthly figure is, × the
    product's slices), each bar
    labelled with the figure, the simulated slice's cost and GPU-hours, and
    the pool's GPUs; None when the results carry no cost. Long text (the
    headline, how the month is extrapolated) is wrapped across the whole
    figure above the axes, not beside them, so nothing runs off its edge."""
    pools = pool_costs(results)
    if not pools:
        return None
    llmsim = results.get("llmsim") or {}
    cost = llmsim.get("cost") or {}
    product = llmsim.get("product") or {}
    n = int(product.get("slices") or 1)
    total_usd, month = cost.get("window_usd"), cost.get("monthly_usd")
    monthly = bool(total_usd and month)
    k = month / total_usd if monthly else 1.0
    # each pool's own month where results.json states it (under peak_window pools scale apart: one held at
    # its floor all day against one that follows the load), else its window's cost scaled as the total is
    values = [n * (p["monthly_usd"] if monthly and p.get("monthly_usd") is not None else p["usd"] * k)
              for p in pools]
    per = "/month" if monthly else ""
    gpus = product.get("gpus", llmsim.get("gpus"))
    head = (f"{'Product' if n > 1 else 'Fleet'}: {_money(sum(values))}{per}"
            + (f", {gpus:,} GPUs at peak" if gpus is not None else ""))
    if n > 1:
        sl = product.get("slice") or {}
        head += (f" (the simulated 1/{n:,} slice × {n:,}: {_money(sum(values) / n)}{per}, "
                 f"{sl.get('gpus', 0):,} GPUs; scaling assumes {n:,} independent copies of the slice)")
    lines = textwrap.wrap(head, 110)
    if monthly and cost.get("monthly_basis"):
        lines += textwrap.wrap("Month: " + cost["monthly_basis"], 120)
    fig = Figure(figsize=(10, 1.6 + 0.9 * len(pools) + 0.2 * len(lines)), dpi=DPI, layout="constrained")
    fig.suptitle(("\n".join([title] if title else []) + ("\n" if title else "")) + "\n".join(lines), x=0.01,
                 ha="left", fontsize=9)
    ax = fig.subplots()
    bars = ax.barh([p["name"] for p in pools], values, color=[f"C{i % 10}" for i in range(len(pools))])
    ax.invert_yaxis()
    for bar, p, v in zip(bars, pools, values):
        slice_note = f"slice {_money(v / n)}" if n > 1 else ""
        figures = "  ·  ".join(x for x in (_money(v), slice_note, _gpu_hours(p.get("gpu_hours"))) if x)
        note = "\n".join(x for x in (figures, _fleet_shape(p, n)) if x)
        ax.annotate(note, (bar.get_width(), bar.get_y() + bar.get_height() / 2), xytext=(4, 0),
                    textcoords="offset points", va="center", fontsize=8.5)
    ax.set_xlim(0, max(values) * 2.2 if max(values) > 0 else 1)
    ax.set_axisbelow(True)
    ax.set_xlabel(r"\$ per month" if monthly else r"\$ in the simulated window")
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: _short_money(x)))
    ax.grid(True, axis="x", alpha=0.3)
    return fig


# --- ladder --------------------------------------------------------------------------

def _duration(ms: float) -> str:
    if not np.isfinite(ms):
        return ""
    return f"{ms / 1000:,.3g} s" if ms >= 1000 else f"{ms:.3g} ms"


#: How the x axis of a ladder reads, by ladder mode.
LADDER_MODES = {"cumulative": "each step adds its variant to those before it",
                "independent": "each step is the baseline plus its variant alone"}


def ladder_figure(rows: Sequence[Mapping[str, Any]], slo: Mapping[str, Any] | None = None, title: str = "",
                  mode: str = "") -> Figure:
    """Per step: p95 and p99 TTFT side by side (with the scenario's TTFT
    targets as lines), and the monthly cost with the cost per 1,000
    completed requests written on each bar."""
    steps = [r["step"] for r in rows]
    x = np.arange(len(steps))
    fig = Figure(figsize=(max(8, 1.3 * len(steps) + 3), 8), dpi=DPI, layout="constrained")
    lat, money = fig.subplots(2, 1, sharex=True)
    w = 0.38
    p95 = np.array([np.nan if r.get("ttft_p95_ms") is None else r["ttft_p95_ms"] for r in rows], dtype=float)
    p99 = np.array([np.nan if r.get("ttft_p99_ms") is None else r["ttft_p99_ms"] for r in rows], dtype=float)
    for values, dx, label, color in ((p95, -w / 2, "TTFT p95", "C0"), (p99, w / 2, "TTFT p99", "C1")):
        bars = lat.bar(x + dx, values, w, label=label, color=color)
        lat.bar_label(bars, labels=[_duration(v) for v in values], fontsize=7, padding=2)
    targets = [t for t in ((slo or {}).get("targets") or {}).values() if t.get("metric") == "ttft"]
    for spec in targets:
        lat.axhline(spec["target_ms"], color="C3", ls="--", lw=1.2,
                    label=f"SLO p{spec['percentile']:g} ≤ {spec['target_ms']:,.0f} ms")
    # The targets count: bars of tens of ms under a line at seconds need a log axis to be seen at all.
    span = np.concatenate([p95, p99, [t["target_ms"] for t in targets]])
    if _wants_log(span):
        _log_ms_axis(lat.yaxis, span)
    lat.set_ylabel("TTFT (ms)")
    lat.set_title("Time to first token after each step", loc="left", fontsize=10)
    lat.margins(y=0.15)
    lat.legend(fontsize=8, loc="best")
    lat.grid(True, axis="y", alpha=0.3)

    # The product's bill and GPUs where the steps are slices of one, as the ladder's table and report lead with.
    product = sliced(rows)
    month_key, gpus_key = ("product_monthly_usd", "product_gpus") if product else ("monthly_usd", "gpus")
    month = np.array([np.nan if r.get(month_key) is None else r[month_key] for r in rows], dtype=float)
    bars = money.bar(x, month, 0.6, color="C2")
    for bar, r in zip(bars, rows):
        per = r.get("usd_per_request")
        gpus = r.get(gpus_key)
        label = (f"{_money(per * 1000)}/1k req" if per is not None else "no completions") + \
                (f"\n{gpus:,} GPU{'s' if gpus != 1 else ''}" if gpus is not None else "")
        money.annotate(label, (bar.get_x() + bar.get_width() / 2, np.nan_to_num(bar.get_height())),
                       xytext=(0, 3), textcoords="offset points", ha="center", va="bottom", fontsize=8)
    top = np.nanmax(month) if np.isfinite(month).any() else 1.0
    money.set_ylim(0, top * 1.3 if top > 0 else 1.0)
    money.set_ylabel(r"\$ per month")
    money.yaxis.set_major_formatter(FuncFormatter(lambda v, _: _money(v)))
    n = next((r["product_gpus"] / r["gpus"] for r in rows if r.get("product_gpus") and r.get("gpus")), None)
    whose = f"of the product, {n:,.0f} × the simulated slice " if product and n else ""
    money.set_title(f"Monthly cost {whose}(labels: cost per 1,000 completed requests, GPUs)", loc="left", fontsize=10)
    money.grid(True, axis="y", alpha=0.3)
    money.set_xticks(x, steps, rotation=30 if len(steps) > 5 else 0, ha="right" if len(steps) > 5 else "center")
    money.set_xlabel("ladder step" + (f" ({mode}: {LADDER_MODES.get(mode, mode)})" if mode else ""))
    if title:
        fig.suptitle(title)
    return fig


# --- files ---------------------------------------------------------------------------

def _save(fig: Optional[Figure], path: Path) -> list[Path]:
    if fig is None:
        return []
    fig.savefig(path)
    return [path]


def write_run_plots(folder: Path, results: Mapping[str, Any], requests: Sequence, timeline=None) -> list[Path]:
    """latency_cdf.png, cost.png and (when there is a timeline) timeline.png in ``folder``."""
    folder = Path(folder)
    name = (results.get("llmsim") or {}).get("scenario") or ""
    written = _save(latency_cdf_figure(requests, results, title=name), folder / "latency_cdf.png")
    if timeline is not None and len(timeline):
        written += _save(timeline_figure(timeline, title=name), folder / "timeline.png")
    written += _save(cost_figure(results, title=name), folder / "cost.png")
    return written


def write_ladder_plot(folder: Path, rows: Sequence[Mapping[str, Any]], slo: Mapping[str, Any] | None = None,
                      title: str = "", mode: str = "") -> Path:
    path = Path(folder) / "ladder.png"
    ladder_figure(rows, slo, title, mode).savefig(path)
    return path
