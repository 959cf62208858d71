"""Terminal tables for a fleet: pools over time, classes, and the TTFT budget.

Read from results.json alone (like :mod:`simulator.report.summary`), and
shown only when they say something: the pool table for several or
autoscaled pools, the class table when classes are declared, the TTFT
budget whenever requests finished.
"""
from __future__ import annotations

from typing import Any, Mapping, Optional

from rich.markup import escape
from rich.table import Table
from rich.text import Text

from ..metrics.verdict import class_p99
from .summary_format import class_verdict, gpus_text, num, rare_counts_shown, replica_layout, usd


def _whole(v: Any) -> str:
    return "—" if v is None else f"{v:,.0f}"


def pool_gpus(pools: Mapping[str, Any], scale: int = 1) -> str:
    """``free 4 × h100-sxm, paid 8 × h100-sxm``: each pool's peak GPUs by name."""
    return ", ".join(f"{name} {scale * p['gpus']:,} × {p.get('gpu')}" for name, p in pools.items())


def headline(llmsim: Mapping[str, Any]) -> Optional[Text]:
    """The answer in its first lines: the product's GPUs (peak, per pool) and
    monthly cost, the slice it was scaled from, and whether the fleet keeps up."""
    prod = llmsim.get("product")
    if not prod:
        return None
    n = prod["slices"]
    pools = llmsim.get("pools") or {}
    what = "Product" if n > 1 else "Fleet"
    standby = (f"; {prod['standby_gpus']:,} of them warm standby, {prod['pooled_gpus']:,} as one pooled fleet"
               if n > 1 and prod.get("standby_gpus") else "")
    power = (f" + ${_whole(prod['power_monthly_usd'])}/month of power (energy.usd_per_kwh)"
             if prod.get("power_monthly_usd") is not None else "")
    lines = [f"[bold]{what}: {gpus_text(prod['gpus'])} at peak ({escape(pool_gpus(pools, n))}; mean "
             f"{prod['gpus_mean']:,.1f}{standby}), ${_whole(prod['monthly_usd'])}/month{power}[/]"]
    if n > 1:
        s = prod["slice"]
        lines.append(f"  simulated slice, 1/{n:,} of the traffic: {gpus_text(s['gpus'])} at peak ({pool_gpus(pools)}), "
                     f"${_whole(s['monthly_usd'])}/month")
        if prod.get("pooled"):
            lines.append(f"  per-slice figures: {escape(prod['pooled'])}")
        lines.append(f"[dim]  scaling: {escape(prod['scaling'])}[/]")
    load = llmsim.get("load")
    if load:
        style = "bold red" if load["overloaded"] else "green"
        lines.append(f"[{style}]Load: {escape(load['verdict'])}[/]")
    return Text.from_markup("\n".join(lines))


def pools_table(llmsim: Mapping[str, Any]) -> Optional[Table]:
    pools = llmsim.get("pools") or {}
    if len(pools) < 2 and not any("autoscaling" in p for p in pools.values()):
        return None
    t = Table(title="Pools", title_justify="left",
              caption="replicas min/mean/max; KV tok: KV tokens per replica (its stack's memory accounting); "
                      "KV, busy: mean fractions; shed: rejected on admission; "
                      "under: time with fewer replicas ready than the autoscaler asked for", caption_justify="left")
    for col in ("pool", "model", "replicas", "KV tok", "GPU-h", "$", "KV", "busy", "shed", "under"):
        t.add_column(col, justify="left" if col in ("pool", "model") else "right", no_wrap=True)
    for name, p in pools.items():
        a = p.get("autoscaling")
        under = "—" if not a else f"{a['under_provisioned_s']:,.0f} s"
        t.add_row(name, f"{p['model']}/{replica_layout(p)}",
                  f"{p['replicas_min']}/{p['replicas_mean']:.1f}/{p['replicas_max']}",
                  _whole(p.get("kv_tokens_per_replica")), num(p.get("gpu_hours")),
                  num(p.get("usd")), f"{100 * p['mean_kv_utilization']:.0f}%",
                  f"{100 * p['gpu_busy_fraction']:.0f}%", num(p.get("rejected_on_admission"), "int"), under)
    return t


def _ms(v, digits: int = 0) -> str:
    return "—" if v is None else f"{v:,.{digits}f}"


def classes_table(llmsim: Mapping[str, Any]) -> Optional[Table]:
    classes = llmsim.get("classes")
    if not classes:
        return None
    t = Table(title="Classes", title_justify="left", caption="TTFT, TPOT in ms; $: the class's share of the window's "
                                                            "GPU bill, by its completed tokens; SLO in (): the "
                                                            "scenario's targets, for information", caption_justify="left")
    rare = rare_counts_shown(classes)
    verdicts = {name: class_verdict(c) for name, c in classes.items()}
    for col in ("class", "pool", "prio", "done", "rejected", "cancel", *(short for _, _, short in rare), "TTFT50", "TTFT99",
                "TPOT99", "$", "SLO"):
        # the verdict is the column a narrow terminal must not cut to "(…": the others give way first
        t.add_column(col, justify="left" if col in ("class", "pool") else "right", no_wrap=True,
                     min_width=max((Text.from_markup(v).cell_len for v in verdicts.values()), default=0)
                     if col == "SLO" else None)
    for name, c in classes.items():
        verdict = verdicts[name]
        t.add_row(name, str(c.get("pool")), str(c.get("priority")), num(c["completed"], "int"),
                  num(c["rejected"], "int"), num(c["cancelled"], "int"),
                  *(num(c.get(key) or 0, "int") for key, _, _ in rare), _ms(c.get("median_ttft_ms")),
                  class_p99(c, "ttft", 0), class_p99(c, "tpot", 1), usd(c.get("usd")), verdict)
    return t


def ttft_budget_table(llmsim: Mapping[str, Any]) -> Optional[Table]:
    b = llmsim.get("ttft_budget")
    if not b:
        return None
    rows = [k for k in ("p50", "p95", "p99") if k in b]
    shown = [p for p in b["parts"] if any(abs(b[r][p]) > 1e-9 for r in rows)]
    t = Table(title="TTFT budget (ms)", title_justify="left",
              caption="mean split of the requests at each TTFT percentile", caption_justify="left")
    t.add_column("", style="bold")
    for p in shown:
        t.add_column(p.replace("_", " "), justify="right")
    t.add_column("TTFT", justify="right", style="bold")
    for r in rows:
        t.add_row(r, *(num(b[r][p]) for p in shown), num(b[r]["ttft"]))
    return t
