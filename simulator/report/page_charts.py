"""The report page's charts, as Plotly figure specs (plain dicts of ``data`` and ``layout``).

Built from the files a run leaves (results.json, requests.parquet,
timeline.csv, ladder.json, plan.json, the sweep table) and nothing else, so
``llmsim report DIR`` draws the same page later. Specs are plain JSON for
the page to hand to Plotly.js; every point a reader must tell apart (a
ladder step, a planned fleet) carries its label on the chart itself, not
only in a hover.
"""
from __future__ import annotations

import math
from typing import Any, Callable, Mapping, Optional, Sequence

import numpy as np

from ..planning.pareto import month_with_power, pareto_front, point_label
from .summary_format import gpu_hours

__all__ = ["latency_cdfs", "timeseries", "cost_breakdown", "ladder_charts", "pareto_chart", "REQUEST_COLUMNS",
           "TIMELINE_COLUMNS", "TIMELINE_OPTIONAL_COLUMNS"]

Figure = dict[str, Any]

#: Probabilities at which a CDF is drawn: even steps to p99, then fine steps in the tail.
_CDF_P = np.concatenate([np.linspace(0.0, 0.99, 199, endpoint=False), np.linspace(0.99, 1.0, 101)])
_METRICS = (("ttft", "TTFT"), ("tpot", "TPOT"), ("e2el", "E2EL"))
_SLO_COLOUR = "#c0392b"

#: The per-request columns these charts read, and what each holds ("number": NaN allowed, as for a request
#: that never finished; "text"). ``llmsim report`` refuses a table without one of them rather than draw a
#: chart silently missing; all are in the table ``llmsim run`` writes (metrics.table).
REQUEST_COLUMNS = {"status": "text", "pool": "text", "klass": "text", "admitted": "number", "finish": "number",
                   "ttft_ms": "number", "tpot_ms": "number", "e2el_ms": "number"}
#: The timeline.csv columns :func:`timeseries` must read ("finite": a number drawn as is, so NaN has no place;
#: "fraction": a finite number from 0 to 1, drawn as a percentage; "any": a pool's name). All are in
#: fleet.timeline.COLUMNS; ``warm`` (standby replicas, :data:`TIMELINE_OPTIONAL_COLUMNS`) is drawn where a
#: timeline has it, as an older run's may not, and checked where it is there.
TIMELINE_COLUMNS = {"time_s": "finite", "pool": "any", "queue_depth": "finite", "kv_utilization": "fraction",
                    "ready": "finite"}
TIMELINE_OPTIONAL_COLUMNS = {"warm": "finite"}


def _layout(title: str, **more: Any) -> dict[str, Any]:
    return {"title": {"text": title, "x": 0.01, "xanchor": "left"}, "margin": {"l": 70, "r": 20, "t": 50, "b": 60},
            "height": 380, "legend": {"orientation": "h", "y": -0.22}, "hovermode": "closest", **more}


def _cdf_points(values: np.ndarray) -> tuple[list[float], list[float]]:
    v = values[np.isfinite(values)]
    if not v.size:
        return [], []
    return np.quantile(v, _CDF_P).round(3).tolist(), (100 * _CDF_P).round(3).tolist()


def latency_cdfs(requests: Optional[Any], slo: Optional[Mapping[str, Any]]) -> list[tuple[str, Figure]]:
    """One CDF per latency metric (finished requests), a line per class (or
    pool) beside all traffic, and the SLO's limit drawn where it sits."""
    if requests is None or not len(requests):
        return []
    done = requests[requests["status"] == "finished"]
    group = "klass" if "klass" in done and done["klass"].nunique() > 1 else (
        "pool" if "pool" in done and done["pool"].nunique() > 1 else None)
    targets = list(((slo or {}).get("targets") or {}).values())
    out = []
    for key, name in _METRICS:
        col = f"{key}_ms"
        if col not in done or not np.isfinite(done[col].to_numpy(float)).any():
            continue
        traces = []
        parts = [("all requests", done)] + ([(str(g), d) for g, d in done.groupby(group, sort=False)] if group else [])
        for label, d in parts:
            x, y = _cdf_points(d[col].to_numpy(float))
            traces.append({"type": "scatter", "mode": "lines", "name": label, "x": x, "y": y,
                           "line": {"width": 3 if label == "all requests" else 1.5},
                           "hovertemplate": f"{label}: %{{y:.1f}} % ≤ %{{x:,.1f}} ms<extra></extra>"})
        vals = done[col].to_numpy(float)
        vals = vals[np.isfinite(vals) & (vals > 0)]
        log = vals.size > 0 and np.quantile(vals, 0.999) > 30 * max(np.quantile(vals, 0.01), 1e-9)
        shapes, notes = [], []
        for t in targets:
            if t.get("metric") != key:
                continue
            pct = t["percentile"]
            shapes.append({"type": "line", "xref": "x", "yref": "paper", "x0": t["target_ms"], "x1": t["target_ms"],
                           "y0": 0, "y1": 1, "line": {"color": _SLO_COLOUR, "dash": "dash", "width": 2}})
            # an annotation on a log axis is placed at the log of its value (a shape at the value itself)
            notes.append({"x": math.log10(t["target_ms"]) if log else t["target_ms"], "y": 1, "xref": "x",
                          "yref": "paper", "yanchor": "bottom",
                          "showarrow": False, "font": {"color": _SLO_COLOUR},
                          "text": f"SLO p{pct:g} ≤ {t['target_ms']:,g} ms"})
            shapes.append({"type": "line", "xref": "paper", "yref": "y", "x0": 0, "x1": 1, "y0": pct, "y1": pct,
                           "line": {"color": _SLO_COLOUR, "dash": "dot", "width": 1}})
        out.append((f"cdf-{key}", {"data": traces, "layout": _layout(
            f"{name}: share of finished requests within a latency",
            xaxis={"title": {"text": f"{name} (ms)"}, "type": "log" if log else "linear"},
            yaxis={"title": {"text": "requests within (%)"}, "range": [0, 101]},
            shapes=shapes, annotations=notes)}))
    return out


def _running(requests: Any, pool: str, times: np.ndarray) -> np.ndarray:
    """Requests admitted and not yet ended at each time: the running batch."""
    d = requests[requests["pool"] == pool] if "pool" in requests else requests
    adm = d["admitted"].to_numpy(float)
    adm = adm[np.isfinite(adm)]
    end = d["finish"].to_numpy(float)[np.isfinite(d["admitted"].to_numpy(float))]
    end = np.where(np.isfinite(end), end, np.inf)
    return np.searchsorted(np.sort(adm), times, "right") - np.searchsorted(np.sort(end), times, "right")


def timeseries(timeline: Optional[Any], requests: Optional[Any], stride: int = 1) -> list[tuple[str, Figure]]:
    """Queue, running batch, KV use and replicas over the run, one line per
    pool, in four rows on one time axis (running counts × ``stride`` when
    the requests are every stride-th one)."""
    if timeline is None or not len(timeline):
        return []
    rows = [("waiting requests (queue)", "queue_depth", 1.0), ("running requests (batch)", None, 1.0),
            ("KV cache used (%)", "kv_utilization", 100.0), ("replicas ready", "ready", 1.0)]
    n = len(rows)
    gap = 0.04
    height = (1 - gap * (n - 1)) / n
    traces, layout = [], _layout("Over the run, per pool", height=760, showlegend=True)
    colours = ["#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2"]
    for i, (title, col, scale) in enumerate(rows):
        axis = "" if i == 0 else str(i + 1)
        top = 1 - i * (height + gap)
        layout[f"yaxis{axis}"] = {"title": {"text": title, "font": {"size": 11}}, "domain": [top - height, top],
                                  "rangemode": "tozero"}
        layout[f"xaxis{axis}"] = {"anchor": f"y{axis}", "matches": "x" if i else None,
                                  "showticklabels": i == n - 1,
                                  **({"title": {"text": "simulated time (s)"}} if i == n - 1 else {})}
        for j, (pool, d) in enumerate(timeline.groupby("pool", sort=False)):
            t = d["time_s"].to_numpy(float)
            if col is None:
                if requests is None:
                    continue
                y = (stride * _running(requests, pool, t)).tolist()
            else:
                y = (d[col].to_numpy(float) * scale).round(4).tolist()
            traces.append({"type": "scatter", "mode": "lines", "name": str(pool), "legendgroup": str(pool),
                           "showlegend": i == 0, "x": t.round(3).tolist(), "y": y, "xaxis": f"x{axis}",
                           "yaxis": f"y{axis}", "line": {"color": colours[j % len(colours)], "width": 1.5,
                                                          "shape": "hv"},
                           "hovertemplate": f"{pool}: %{{y:,.4g}} at %{{x:,.0f}} s<extra>{title}</extra>"})
            if col == "ready" and "warm" in d and d["warm"].to_numpy().any():
                traces.append({"type": "scatter", "mode": "lines", "name": f"{pool} warm standby",
                               "x": t.round(3).tolist(), "y": d["warm"].tolist(), "xaxis": f"x{axis}",
                               "yaxis": f"y{axis}", "line": {"color": colours[j % len(colours)], "dash": "dot",
                                                              "shape": "hv"}})
    for i in range(n):
        axis = "" if i == 0 else str(i + 1)
        if layout[f"xaxis{axis}"]["matches"] is None:
            del layout[f"xaxis{axis}"]["matches"]
    return [("timeseries", {"data": traces, "layout": layout})]


def cost_breakdown(llmsim: Mapping[str, Any]) -> list[tuple[str, Figure]]:
    """What the simulated window cost, by pool: GPU-hours at each pool's price."""
    pools = (llmsim.get("cost") or {}).get("pools") or []
    if not pools:
        return []
    total = sum(p["usd"] for p in pools) or 1.0
    names = [p["name"] for p in pools]
    trace = {"type": "bar", "x": names, "y": [round(p["usd"], 4) for p in pools],
             "text": [f"${p['usd']:,.2f} ({100 * p['usd'] / total:.0f} %)" for p in pools], "textposition": "auto",
             "customdata": [[p["gpus"], p["gpu"], gpu_hours(p["gpu_hours"]), p["usd_per_gpu_hour"]] for p in pools],
             "hovertemplate": "%{x}: peak %{customdata[0]} × %{customdata[1]}, %{customdata[2]} GPU-h at "
                              "$%{customdata[3]:,.2f}/GPU-h<extra></extra>", "marker": {"color": "#4c78a8"},
             "name": "window bill"}
    return [("cost", {"data": [trace], "layout": _layout(
        "Bill of the simulated window, by pool (GPU-hours × price)", showlegend=False,
        xaxis={"title": {"text": "pool"}, "automargin": True},
        yaxis={"title": {"text": "USD"}, "automargin": True})})]


def _money_axis(rows: Sequence[Mapping[str, Any]]) -> tuple[Callable[[Mapping[str, Any]], Optional[float]], str]:
    """(a row's month, axis title): the month plans rank by (``month_with_power``), the product's when
    the rows carry one apart from the fleet's (a slice of it), its power added where energy is priced.
    The GPU bill alone drew a B200 fleet left of an H100 one that the plan ranked cheaper with its watts."""
    product = any(r.get("product_monthly_usd") not in (None, r.get("monthly_usd")) for r in rows)
    powered = any(r.get("product_power_monthly_usd" if product else "power_monthly_usd") is not None for r in rows)
    return ((lambda r: month_with_power(r, product)),
            f"monthly cost{', the product' if product else ''}{', power included' if powered else ''} (USD)")


def _merged(points: list[tuple]) -> list[tuple]:
    """Points at the same place as one, named by all of them: two labels
    drawn over each other can be read as neither."""
    out: dict[tuple, list] = {}
    for name, *rest in points:
        key = tuple(round(v, 6) if isinstance(v, float) else v for v in rest[:2])
        out.setdefault(key, [[], *rest])[0].append(name)
    return [(", ".join(names), *rest) for names, *rest in out.values()]


def ladder_charts(rows: Sequence[Mapping[str, Any]], slo: Optional[Mapping[str, Any]]) -> list[tuple[str, Figure]]:
    """p99 TTFT and monthly cost per step (bars, each labelled with its
    value), and the steps as points of cost against p99 TTFT, each named."""
    steps = [r["step"] for r in rows]
    money, money_title = _money_axis(rows)
    ttft = [r.get("ttft_p99_ms") for r in rows]
    cost = [money(r) for r in rows]
    colour = ["#2ca02c" if r.get("slo_met") else "#d62728" if r.get("slo_met") is False else "#7f7f7f"
              for r in rows]
    shapes = [{"type": "line", "xref": "paper", "yref": "y", "x0": 0, "x1": 1, "y0": t["target_ms"],
               "y1": t["target_ms"], "line": {"color": _SLO_COLOUR, "dash": "dash"}}
              for t in ((slo or {}).get("targets") or {}).values() if t.get("metric") == "ttft"
              and t.get("percentile") == 99]
    bars = {"data": [{"type": "bar", "x": steps, "y": ttft, "marker": {"color": colour}, "name": "p99 TTFT",
                      "text": [None if v is None else f"{v:,.0f} ms" for v in ttft], "textposition": "outside"}],
            "layout": _layout("p99 TTFT per step (green: SLO met, red: missed; dashed: the SLO)", shapes=shapes,
                              showlegend=False, yaxis={"title": {"text": "p99 TTFT (ms)"}, "automargin": True},
                              xaxis={"automargin": True})}
    spend = {"data": [{"type": "bar", "x": steps, "y": cost, "marker": {"color": "#4c78a8"}, "name": money_title,
                       "text": [None if v is None else f"${v:,.0f}" for v in cost], "textposition": "outside"}],
             "layout": _layout(f"{money_title[0].upper()}{money_title[1:]} per step", showlegend=False,
                               yaxis={"title": {"text": "USD per month"}, "automargin": True},
                               xaxis={"automargin": True})}
    pts = _merged([(s, c, t, col) for s, c, t, col in zip(steps, cost, ttft, colour) if c is not None and t is not None])
    scatter = {"data": [{"type": "scatter", "mode": "markers+text", "x": [p[1] for p in pts],
                         "y": [p[2] for p in pts], "text": [p[0] for p in pts], "textposition": "top center",
                         "marker": {"size": 12, "color": [p[3] for p in pts]}, "name": "steps",
                         "hovertemplate": "%{text}: $%{x:,.0f}/month, p99 TTFT %{y:,.1f} ms<extra></extra>"}],
               "layout": _layout("Each step: cost against p99 TTFT", showlegend=False, shapes=shapes,
                                 xaxis={"title": {"text": money_title}, "automargin": True},
                                 yaxis={"title": {"text": "p99 TTFT (ms)"}, "automargin": True})}
    return [("ladder-ttft", bars), ("ladder-cost", spend), ("ladder-scatter", scatter)]


def pareto_chart(points: Sequence[Mapping[str, Any]], best: Optional[Mapping[str, Any]],
                 title: str) -> list[tuple[str, Figure]]:
    """Every fleet simulated as a point of monthly cost against p99 TTFT,
    each labelled with what it varied; met and missed apart, the frontier
    of the ones meeting the SLO, and the chosen one starred."""
    month, money_title = _money_axis(points)
    money = "plotted_monthly_usd"
    usable = [{**p, money: month(p)} for p in points]
    usable = [p for p in usable if p[money] is not None and p.get("ttft_p99_ms") is not None]
    best = None if best is None else {**best, money: month(best)}
    if not usable:
        return []
    traces = []
    for met, name, marker in ((True, "SLO met", {"color": "#1f77b4", "size": 10, "symbol": "circle"}),
                              (False, "SLO missed", {"color": "#d62728", "size": 10, "symbol": "x"})):
        group = [p for p in usable if bool(p.get("slo_met")) is met]
        if group:
            traces.append({"type": "scatter", "mode": "markers+text", "name": name, "marker": marker,
                           "x": [p[money] for p in group], "y": [p["ttft_p99_ms"] for p in group],
                           "text": [point_label(p.get("overrides") or {}) for p in group],
                           "textposition": "top center", "textfont": {"size": 10},
                           "hovertemplate": "%{text}<br>$%{x:,.0f}/month, p99 TTFT %{y:,.1f} ms<extra></extra>"})
    front = pareto_front([p for p in usable if p.get("slo_met")], x=money)
    if front:
        traces.append({"type": "scatter", "mode": "lines", "name": "Pareto frontier", "x": [p[money] for p in front],
                       "y": [p["ttft_p99_ms"] for p in front], "line": {"shape": "hv", "color": "#1f77b4"}})
    if best is not None and best.get(money) is not None:
        traces.append({"type": "scatter", "mode": "markers", "name": "cheapest meeting the SLO",
                       "x": [best[money]], "y": [best["ttft_p99_ms"]],
                       "marker": {"symbol": "star", "size": 20, "color": "gold", "line": {"color": "black",
                                                                                          "width": 1}}})
    return [("pareto", {"data": traces, "layout": _layout(
        title, height=480, xaxis={"title": {"text": money_title}, "automargin": True},
        yaxis={"title": {"text": "p99 TTFT (ms)"}, "type": "log", "automargin": True})})]
