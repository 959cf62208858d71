"""A terminal summary of results.json, laid out like ``vllm bench serve``'s.

It reads only the results dict (not the requests), so it can render a
results.json from an earlier run or a CI artefact just as well.
"""
from __future__ import annotations

import re
from typing import Any, Mapping, Optional

from rich.console import Group
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from ..metrics.tail_samples import few_samples_note
from ..metrics.verdict import measured, owner, refused, refused_line, slo_blocks, slo_met
from .fleet_summary import classes_table, headline, pools_table, ttft_budget_table

__all__ = ["summary_table"]

_COUNTS = (
    ("completed", "Successful requests", "int"),
    ("cancelled", "Cancelled by the client", "int"),
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
from .summary_format import (FAIL, FAILED_PARTS, OK, gpu_hours, handoff_text, num as _num, stack_served, usd,
                             weights_served)


def _counts(results: Mapping[str, Any]) -> Table:
    t = Table(title="Serving results", title_justify="left", show_header=False)
    t.add_column("what", style="bold")
    t.add_column("value", justify="right")
    llmsim = results.get("llmsim") or {}
    status = llmsim.get("request_status") or {}
    for key, label, kind in _COUNTS:
        # No goodput without per-request thresholds (null); a goodput of 0 is the alarm, shown.
        if key not in results or (key == "request_goodput" and results[key] is None) \
                or (key == "cancelled" and not results[key]):
            continue
        t.add_row(label, _num(results[key], kind))
        if key == "failed":   # why they failed: vLLM lumps these together, a capacity plan must not
            for why, label in FAILED_PARTS:
                if status.get(why):
                    t.add_row(f"  {label}", _num(status[why], "int"))
    pc = llmsim.get("prefix_cache") or {}
    if pc.get("enabled") and pc.get("token_hit_rate") is not None:
        t.add_row("Prefix cache hit rate (tokens)", f"{100 * pc['token_hit_rate']:.1f}%")
        for name, tier in (pc.get("offload") or {}).items():
            if tier.get("token_hit_rate") is not None:
                t.add_row(f"  of which reloaded from {name}", f"{100 * tier['token_hit_rate']:.1f}%")
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


def _slo(results: Mapping[str, Any]) -> Optional[Table]:
    """Every target the run is judged on (the scenario's, each class's and prompt-length bucket's
    own, named before the metric), under the one verdict ``llmsim run`` exits on; None without any."""
    met = slo_met(results)
    if met is None:
        return None
    t = Table(title=f"SLO {OK if met else FAIL} {'met' if met else 'missed'}", title_justify="left")
    for name, justify in (("", "center"), ("target", "left"), ("limit", "right"), ("simulated", "right"),
                          ("attainment", "right")):
        t.add_column(name, justify=justify)
    for label, block in slo_blocks(results):
        whose = owner(label, ": ")
        for target in (block.get("targets") or {}).values():
            pct = target["percentile"]
            pct_s = f"p{int(pct)}" if int(pct) == pct else f"p{pct}"
            att = target.get("attainment")
            t.add_row(OK if target["met"] else FAIL, f"{whose}{target['metric'].upper()} {pct_s}",
                      f"≤ {_num(target['target_ms'])} ms", measured(target, 2),
                      "—" if att is None else f"{100 * att:.1f}%")
    goodput = (results.get("slo") or {}).get("goodput")
    if goodput:
        frac = goodput.get("good_fraction")
        limits = ", ".join(f"{m.upper()} ≤ {_num(v)}" for m, v in goodput["thresholds_ms"].items())
        t.add_row("", "goodput", limits + " ms", f"{goodput['good_requests']:,} req",
                  "—" if frac is None else f"{100 * frac:.1f}%")
    if refused_line(results):      # the targets read over the requests served: the verdict counts the refused too
        t.add_row(FAIL, "refused", "0 req", f"{refused(results):,} req", "—")
    few = few_samples_note(slo_blocks(results))
    if few:
        t.caption, t.caption_justify = f"note: {few}", "left"
    return t


def _serves(pool: Mapping[str, Any]) -> str:
    """What a pool runs, before its price: the weights' format is the
    checkpoint's unless the scenario names one, so a reader checks it here."""
    if not pool.get("model"):
        return ""
    weights = weights_served(pool, "{weights} weights", "{weights} weights ({note})")
    return f"{pool['model']}, {weights}, {pool.get('kv_dtype', '—')} KV; "


def _assumed(pool: Mapping[str, Any]) -> str:
    """The line under a pool's price: the stack and release whose defaults it ran, the MoE backend
    TensorRT-LLM picked, and the KV pool they gave a replica, which the figures hang on and a scenario
    naming none of them leaves unsaid."""
    stack, kv, moe = stack_served(pool), pool.get("kv_tokens_per_replica"), pool.get("moe_backend")
    parts = ([f"served by {stack}"] if stack else []) + ([f"MoE backend {moe}"] if moe else []) \
        + ([f"{kv:,} KV tokens a replica"] if kv is not None else [])
    handoff = handoff_text(pool.get("handoff"))
    return ("\n  " + ", ".join(parts) if parts else "") + (f"\n  {handoff}" if handoff else "")


def _cost(cost: Mapping[str, Any], pools: Mapping[str, Any], product: Mapping[str, Any],
          energy: Mapping[str, Any] | None = None) -> Group:
    """The money lines of ``llmsim.cost`` and one energy line, then how the
    month is extrapolated and where each price comes from."""
    t = Table(title="Cost", title_justify="left", show_header=False)
    t.add_column("what", style="bold")
    t.add_column("value", justify="right")
    n = product.get("slices") or 1
    if n > 1:
        t.add_row(f"Monthly cost, the product ($), {n:,} × the slice", _num(product.get("monthly_usd")))
    # How the month is extrapolated (the setting's name) is the "month:" line under the table, in words.
    t.add_row("Monthly cost ($)" if n == 1 else "Monthly cost, the simulated slice ($)", _num(cost.get("monthly_usd")))
    t.add_row("Cost of the simulated window ($)", usd(cost.get("window_usd")))
    t.add_row("Cost per 1M output tokens ($)", usd(cost.get("usd_per_million_output_tokens")))
    t.add_row("Cost per 1M input tokens ($)", usd(cost.get("usd_per_million_input_tokens")))
    t.add_row("Cost per request ($)", usd(cost.get("usd_per_request")))
    power = cost.get("power")
    if power:
        slice_ = ", the slice" if n > 1 else ""
        t.add_row(f"Power a month{slice_} at ${power['usd_per_kwh']:g}/kWh ($), beside the GPU-hours",
                  _num(power.get("monthly_usd")))
    month = product if n > 1 else (energy or {})
    if month.get("kwh_per_month") is not None:
        t.add_row("Energy a month, the product" if n > 1 else "Energy a month",
                  f"{_num(month['kwh_per_month'] / 1e3)} MWh, {_num(month['co2e_kg_per_month'] / 1e3)} t CO2e, "
                  f"{_num((energy or {}).get('joules_per_output_token'))} J/output token")
    sessions = cost.get("sessions")
    if sessions:
        t.add_row("Cost per session ($)", usd(cost.get("usd_per_session")))
        t.add_row("Sessions per GPU (mean / peak)",
                  f"{_num(sessions.get('mean_per_gpu'))} / {_num(sessions.get('peak_per_gpu'))}")
    notes = [f"month: {cost.get('monthly_basis')}", f"tokens: {cost.get('token_split')}"]
    if (energy or {}).get("why_none"):
        # said under the bill: else a scenario's energy block (its usd_per_kwh too) vanishes unremarked
        notes.append(f"[yellow]energy a month: none, {escape(energy['why_none'])}[/]")
    notes += [f"pool {p['name']}: {_serves(pools.get(p['name'], {}))}peak {p['gpus']:,} × {p['gpu']}"
              + (f", mean {pools[p['name']]['gpus_mean']:,.2f}" if "gpus_mean" in pools.get(p["name"], {}) else "")
              + f", {gpu_hours(p['gpu_hours'])} GPU-h at ${p['usd_per_gpu_hour']:,.2f}/GPU-h from the {p['price_source']}"
              + (" [yellow](an assumption: set pools[].usd_per_gpu_hour)[/]" if p["price_assumed"] else "")
              + _assumed(pools.get(p["name"], {}))
              for p in cost.get("pools", [])]
    return Group(t, *(Text.from_markup(f"[dim]{line}[/]") for line in notes))


def summary_table(results: Mapping[str, Any]) -> Group:
    """The headline (the product's fleet and bill, whether it keeps up),
    counts and throughputs, a TTFT/TPOT/ITL/E2EL latency table, the cost
    lines when the results carry ``llmsim.cost``, and the SLO verdicts (✓/✗)
    when they carry an ``slo`` block."""
    llmsim = results.get("llmsim") or {}
    cost = llmsim.get("cost")
    parts = [headline(llmsim), _counts(results), _latency(results), ttft_budget_table(llmsim), pools_table(llmsim),
             classes_table(llmsim), _cost(cost, llmsim.get("pools") or {}, llmsim.get("product") or {},
                                   llmsim.get("energy")) if cost else None,
             _slo(results)]
    # A group, not a grid: each part at its own width (a grid pads every line to the widest).
    shown: list = []
    for part in parts:
        if part is not None:
            shown += [part, Text("")]
    return Group(*shown[:-1])
