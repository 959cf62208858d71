"""A terminal summary of results.json, laid out like ``vllm bench serve``'s.

It reads only the results dict (not the requests), so it can render a
results.json from an earlier run or a CI artefact just as well.
"""
from __future__ import annotations

import math
import re
from typing import Any, Mapping

from rich.table import Table

from .fleet_summary import classes_table, pools_table, ttft_budget_table

__all__ = ["summary_table"]

_COUNTS = (
    ("completed", "Successful requests", "int"),
    ("failed", "Failed requests", "int"),
    ("duration", "Benchmark duration (s)", "float"),
    ("total_input_tokens", "Total input tokens", "int"),
    ("total_output_tokens", "Total generated tokens", "int"),
    ("request_throughput", "Request throughput (req/s)", "float"),
    ("request_goodput", "Request goodput (req/s)", "float"),
    ("output_throughput", "Output token throughput (tok/s)", "float"),
    ("total_token_throughput", "Total token throughput (tok/s)", "float"),
)
_LATENCIES = (("ttft", "TTFT"), ("tpot", "TPOT"), ("itl", "ITL"), ("e2el", "E2EL"))
_PCT = re.compile(r"^p(\d+(?:\.\d+)?)_ttft_ms$")
from .summary_format import FAIL, OK, num as _num


def _counts(results: Mapping[str, Any]) -> Table:
    t = Table(title="Serving results", title_justify="left", show_header=False)
    t.add_column("what", style="bold")
    t.add_column("value", justify="right")
    llmsim = results.get("llmsim") or {}
    status = llmsim.get("request_status") or {}
    for key, label, kind in _COUNTS:
        if key not in results or (key == "request_goodput" and results[key] is None):
            continue
        t.add_row(label, _num(results[key], kind))
        if key == "failed":   # why they failed: vLLM lumps these together, a capacity plan must not
            for why in ("rejected", "cancelled", "pending"):
                if status.get(why):
                    t.add_row(f"  {why}", _num(status[why], "int"))
    pc = llmsim.get("prefix_cache") or {}
    if pc.get("enabled") and pc.get("token_hit_rate") is not None:
        t.add_row("Prefix cache hit rate (tokens)", f"{100 * pc['token_hit_rate']:.1f}%")
    return t


def _latency(results: Mapping[str, Any]) -> Table:
    pcts = [m.group(0).split("_")[0] for k in results if (m := _PCT.match(k))]
    stats = ["mean", "median", *pcts]
    t = Table(title="Latency (ms)", title_justify="left")
    t.add_column("metric", style="bold")
    for s in stats:
        t.add_column(s, justify="right")
    for key, label in _LATENCIES:
        if f"mean_{key}_ms" in results:
            t.add_row(label, *(_num(results.get(f"{s}_{key}_ms")) for s in stats))
    return t


def _slo(slo: Mapping[str, Any]) -> Table:
    t = Table(title=f"SLO {OK if slo.get('met') else FAIL} {'met' if slo.get('met') else 'missed'}",
              title_justify="left")
    for name, justify in (("", "center"), ("target", "left"), ("limit", "right"), ("measured", "right"),
                          ("attainment", "right")):
        t.add_column(name, justify=justify)
    for target in slo.get("targets", {}).values():
        pct = target["percentile"]
        pct_s = f"p{int(pct)}" if int(pct) == pct else f"p{pct}"
        att = target.get("attainment")
        t.add_row(OK if target["met"] else FAIL, f"{target['metric'].upper()} {pct_s}",
                  f"≤ {_num(target['target_ms'])} ms", _num(target.get("measured_ms")),
                  "—" if att is None else f"{100 * att:.1f}%")
    goodput = slo.get("goodput")
    if goodput:
        frac = goodput.get("good_fraction")
        limits = ", ".join(f"{m.upper()} ≤ {_num(v)}" for m, v in goodput["thresholds_ms"].items())
        t.add_row("", "goodput", limits + " ms", f"{goodput['good_requests']:,} req",
                  "—" if frac is None else f"{100 * frac:.1f}%")
    return t


def _money(v: Any) -> str:
    """Dollars to four significant digits (cents and fractions of a cent
    alike), without exponents."""
    if v is None:
        return "—"
    v = float(v)
    if v == 0 or abs(v) >= 100:
        return f"{v:,.2f}"
    return f"{v:,.{max(0, 3 - math.floor(math.log10(abs(v))))}f}"


def _cost(cost: Mapping[str, Any]) -> Table:
    """The money lines of ``llmsim.cost``, then how the month is extrapolated
    and where each price comes from."""
    t = Table(title="Cost", title_justify="left", show_header=False)
    t.add_column("what", style="bold")
    t.add_column("value", justify="right")
    method = cost.get("monthly_method")
    t.add_row(f"Monthly cost ($), {method}" if method else "Monthly cost ($)", _num(cost.get("monthly_usd")))
    t.add_row("Cost of the simulated window ($)", _money(cost.get("window_usd")))
    t.add_row("Cost per 1M output tokens ($)", _money(cost.get("usd_per_million_output_tokens")))
    t.add_row("Cost per 1M input tokens ($)", _money(cost.get("usd_per_million_input_tokens")))
    t.add_row("Cost per request ($)", _money(cost.get("usd_per_request")))
    sessions = cost.get("sessions")
    if sessions:
        t.add_row("Cost per session ($)", _money(cost.get("usd_per_session")))
        t.add_row("Sessions per GPU (mean / peak)",
                  f"{_num(sessions.get('mean_per_gpu'))} / {_num(sessions.get('peak_per_gpu'))}")
    notes = [f"month: {cost.get('monthly_basis')}", f"tokens: {cost.get('token_split')}"]
    notes += [f"{p['gpus']} × {p['gpu']} at ${p['usd_per_gpu_hour']:,.2f}/GPU-h from the {p['price_source']}"
              + (" [yellow](an assumption: set pools[].usd_per_gpu_hour)[/]" if p["price_assumed"] else "")
              for p in cost.get("pools", [])]
    out = Table.grid()
    out.add_column()
    out.add_row(t)
    for line in notes:
        out.add_row(f"[dim]{line}[/]")
    return out


def summary_table(results: Mapping[str, Any]) -> Table:
    """Counts and throughputs, a TTFT/TPOT/ITL/E2EL latency table, the cost
    lines when the results carry ``llmsim.cost``, and the SLO verdicts (✓/✗)
    when they carry an ``slo`` block."""
    outer = Table.grid(padding=(0, 0, 1, 0))
    outer.add_column()
    outer.add_row(_counts(results))
    outer.add_row(_latency(results))
    llmsim = results.get("llmsim") or {}
    for table in (ttft_budget_table(llmsim), pools_table(llmsim), classes_table(llmsim)):
        if table is not None:
            outer.add_row(table)
    cost = llmsim.get("cost")
    if cost:
        outer.add_row(_cost(cost))
    if results.get("slo"):
        outer.add_row(_slo(results["slo"]))
    return outer
