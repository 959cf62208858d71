"""A terminal summary of results.json, laid out like ``vllm bench serve``'s.

It reads only the results dict (not the requests), so it can render a
results.json from an earlier run or a CI artefact just as well.
"""
from __future__ import annotations

import re
from typing import Any, Mapping

from rich.table import Table

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
OK, FAIL = "[green]✓[/]", "[red]✗[/]"


def _num(v: Any, kind: str = "float") -> str:
    if v is None:
        return "—"
    if kind == "int":
        return f"{int(v):,}"
    return f"{float(v):,.2f}"


def _counts(results: Mapping[str, Any]) -> Table:
    t = Table(title="Serving results", title_justify="left", show_header=False)
    t.add_column("what", style="bold")
    t.add_column("value", justify="right")
    for key, label, kind in _COUNTS:
        if key not in results or (key == "request_goodput" and results[key] is None):
            continue
        t.add_row(label, _num(results[key], kind))
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


def summary_table(results: Mapping[str, Any]) -> Table:
    """Counts and throughputs, a TTFT/TPOT/ITL/E2EL latency table, and the
    SLO verdicts (✓/✗) when the results carry an ``slo`` block."""
    outer = Table.grid(padding=(0, 0, 1, 0))
    outer.add_column()
    outer.add_row(_counts(results))
    outer.add_row(_latency(results))
    if results.get("slo"):
        outer.add_row(_slo(results["slo"]))
    return outer
