"""HTML pieces of the report page: the answer at a glance and plain tables.

Every headline figure is an element with ``data-key`` (its dotted path in
the file it came from) and ``data-value`` (the number as stored), beside
the text a reader sees, so a test, or a script scraping the page, reads
the same figure the reader does.
"""
from __future__ import annotations

import html
import json
from typing import Any, Iterable, Mapping, Optional, Sequence
from ..metrics.tail_samples import few_samples_note
from ..metrics.verdict import class_p99, measured, owner, slo_blocks, slo_met
from .intervals import interval_scope, seeds_met, slo_interval, unsent_targets
from .summary_format import (FAILED_PARTS, class_verdict, gpus_text, handoff_text, rare_counts_shown, replica_layout,
                             stack_served, usd, weights_served)

__all__ = ["esc", "figure", "table", "kv_rows", "run_answer", "pools_table", "classes_table", "latency_table",
           "slo_table", "cost_table", "money", "whole", "gpus_text", "interval_text"]


def esc(v: Any) -> str:
    return html.escape(str(v), quote=True)


def whole(v: Any) -> str:
    return "—" if v is None else f"{v:,.0f}"


def money(v: Any) -> str:
    """Dollars as the terminal writes them: whole from $100 (its monthly bills), below that to four
    significant digits without an exponent (:func:`usd`, its costs per request, session and 1M tokens):
    a request's $0.00008361 read as $8.361e-05 here."""
    if v is None:
        return "—"
    v = float(v)
    return f"${v:,.0f}" if abs(v) >= 100 else f"${usd(v)}"


def _num(v: Any, spec: str, per: float = 1) -> str:
    """A figure of a line that reads on without it (a results.json trimmed by hand): "—" for null."""
    return "—" if v is None else format(v / per if per != 1 else v, spec)


def _digits(ms: float) -> int:
    """The page's decimals for a latency: tenths under a second."""
    return 1 if abs(ms) < 1000 else 0


def _ms(v: Any) -> str:
    return "—" if v is None else f"{v:,.{_digits(v)}f}"


def figure(key: str, value: Any, text: str, label: str, cls: str = "") -> str:
    """One headline figure: big text, a caption, and the stored value for machines."""
    return (f'<div class="figure {cls}" data-key="{esc(key)}" data-value="{esc(json.dumps(value))}">'
            f'<div class="big">{esc(text)}</div><div class="label">{label}</div></div>')


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]], cls: str = "", caption: str = "") -> str:
    """A plain table; cells are escaped, numbers right-aligned by the stylesheet (class ``n``)."""
    def cell(v: Any, tag: str) -> str:
        numeric = isinstance(v, (int, float)) and not isinstance(v, bool)
        shown = f"{v:,}" if numeric and isinstance(v, int) else v
        return f'<{tag}{" class=n" if numeric else ""}>{esc(shown)}</{tag}>'
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(cell(v, "td") for v in r) + "</tr>" for r in rows)
    cap = f"<caption>{esc(caption)}</caption>" if caption else ""
    return f'<table class="{cls}">{cap}<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def kv_rows(pairs: Iterable[tuple[str, Any]]) -> str:
    return ('<table class="kv"><tbody>' + "".join(f"<tr><th>{esc(k)}</th><td>{esc(v)}</td></tr>" for k, v in pairs)
            + "</tbody></table>")


def _bound(x: float) -> str:
    """One end of an interval: four significant digits, whole with thousands separated from 1,000 on
    ("[8,742, 33,220]", not "[8,742, 3.322e+04]")."""
    return f"{x:,.0f}" if abs(x) >= 1000 else f"{x:.4g}"


def interval_text(v: Any) -> Optional[str]:
    """An interval however it is stored: ``{low, high}`` (or lo/hi,
    lower/upper, with an optional level), or a two-number list."""
    if isinstance(v, Mapping):
        for lo, hi in (("low", "high"), ("lo", "hi"), ("lower", "upper")):
            if isinstance(v.get(lo), (int, float)) and isinstance(v.get(hi), (int, float)):
                level = v.get("level", v.get("confidence"))
                tail = f" ({100 * level:g} %)" if isinstance(level, (int, float)) and level <= 1 else ""
                return f"[{_bound(v[lo])}, {_bound(v[hi])}]{tail}"
    if isinstance(v, (list, tuple)) and len(v) == 2 and all(isinstance(x, (int, float)) for x in v):
        return f"[{_bound(v[0])}, {_bound(v[1])}]"
    return None


def _intervals(llmsim: Mapping[str, Any]) -> Mapping[str, Any]:
    iv = llmsim.get("intervals")
    return iv if isinstance(iv, Mapping) else {}


def _scope(llmsim: Mapping[str, Any]) -> str:
    """What the page's intervals cover (:func:`.intervals.interval_scope`), as the terminal's title says
    it; empty where the run has none, or they carry no level (another tool's file)."""
    levels = [v.get("confidence") for v in _intervals(llmsim).values() if isinstance(v, Mapping)]
    conf = next((c for c in levels if isinstance(c, (int, float)) and not isinstance(c, bool)), None)
    reps = llmsim.get("replicates")
    n = reps.get("count") if isinstance(reps, Mapping) else None
    return "" if conf is None else interval_scope(conf, n if isinstance(n, int) else None)


def _slo_interval(intervals: Mapping[str, Any], key: str, target: Mapping[str, Any]) -> Optional[str]:
    pct = target.get("percentile")
    stat = "median" if pct == 50 else f"p{pct:g}" if isinstance(pct, (int, float)) else None
    for k in (key, f"{stat}_{target.get('metric')}_ms", f"slo.targets.{key}"):
        if k in intervals:
            got = interval_text(intervals[k])
            if got:
                return got
    return None


def slo_table(results: Mapping[str, Any]) -> str:
    """Every target the run is judged on (:func:`~simulator.metrics.verdict.slo_blocks`), a class's or
    prompt-length bucket's named before its metric, each with its interval (:func:`.intervals.slo_interval`),
    then a class's that only other seeds sent requests (:func:`.intervals.unsent_targets`)."""
    intervals = _intervals(results.get("llmsim") or {})
    reps = (results.get("llmsim") or {}).get("replicates") or {}
    n = len(reps.get("seeds") or [])
    judged = [(label, key, t, slo_interval(results, label, key, t) if label != "SLO" else None)
              for label, block in slo_blocks(results) for key, t in (block.get("targets") or {}).items()]
    rows = []
    for label, key, t, own in judged + unsent_targets(results):
        whose, att = owner(label, ": "), t.get("attainment")
        verdict = ("— none sent" if "measured_ms" not in t and "met" not in t
                   else "✓ met" if t.get("met") else "✗ missed")
        rows.append([verdict, f"{whose}{t['metric'].upper()} p{t['percentile']:g}",
                     f"≤ {t['target_ms']:,g} ms", measured(t, _digits(t.get("measured_ms") or 0)),
                     (interval_text(own) if whose else _slo_interval(intervals, key, t)) or "—",
                     "—" if att is None else f"{100 * att:.1f} %",
                     *([seeds_met(results, label, key, own)] if n > 1 else [])])
    return table(["verdict", "target", "limit", "simulated (ms)", "interval (ms)", "within the limit",
                  *(["seeds met"] if n > 1 else [])], rows,
                 cls="slo", caption="; ".join(filter(None, (_scope(results.get("llmsim") or {}),
                                                             few_samples_note(slo_blocks(results))))))


def run_answer(results: Mapping[str, Any]) -> str:
    """The answer at a glance: the product's GPUs and bill, the SLO and load verdicts."""
    llmsim = results.get("llmsim") or {}
    prod = llmsim.get("product") or {}
    load = llmsim.get("load") or {}
    n = prod.get("slices") or 1    # null as absent; run_folder lets no other non-count through
    whose = "the product" if n > 1 else "the fleet"
    parts = [figure("llmsim.product.gpus", prod.get("gpus"), whole(prod.get("gpus")), f"GPUs at peak, {whose}"),
             figure("llmsim.product.monthly_usd", prod.get("monthly_usd"), money(prod.get("monthly_usd")),
                    f"per month, {whose}")]
    if prod.get("standby_gpus"):
        parts.append(figure("llmsim.product.standby_gpus", prod["standby_gpus"], whole(prod["standby_gpus"]),
                            "of the peak GPUs are warm standby" + (f" ({whole(prod['standby_gpus'] // n)} per "
                                                                   f"slice)" if n > 1 else "")))
    if prod.get("pooled_gpus") is not None and prod.get("pooled_gpus") != prod.get("gpus"):
        parts.append(figure("llmsim.product.pooled_gpus", prod["pooled_gpus"], whole(prod["pooled_gpus"]),
                            "GPUs at peak as one pooled fleet (one standby set, not one per slice)"))
    met = slo_met(results)
    if met is not None:     # results.json before llmsim.slo_met held the scenario's slo alone
        key = "llmsim.slo_met" if "slo_met" in llmsim else "slo.met"
        parts.append(figure(key, met, "SLO met" if met else "SLO missed",
                            "every target the run is judged on: the scenario's slo, each class's and "
                            "prompt-length bucket's own" + _seeds_met(llmsim), "ok" if met else "bad"))
    if load:
        over = load.get("overloaded")
        parts.append(figure("llmsim.load.overloaded", over, "OVERLOADED" if over else "keeps up",
                            "load: offered against served", "bad" if over else "ok"))
    lines = []
    pools = llmsim.get("pools") or {}
    per_pool = ", ".join(f"{name} {n * p['gpus']:,} × {p.get('gpu')}" for name, p in pools.items())
    lines.append(f"Peak GPUs by pool: {per_pool}; mean {prod.get('gpus_mean') or 0:,.1f}.")
    if n > 1:
        s = prod.get("slice") or {}
        lines.append(f"Simulated slice, 1/{n:,} of the traffic: {gpus_text(s.get('gpus'))} at peak, "
                     f"{money(s.get('monthly_usd'))}/month. Scaling: {prod.get('scaling', '')}.")
    if prod.get("pooled"):
        lines.append(prod["pooled"])
    if load:
        lines.append(f"Load: {load.get('verdict')}")
    return ('<section id="answer"><div class="figures">' + "".join(parts) + "</div>"
            + "".join(f"<p>{esc(line)}</p>" for line in lines)
            + (slo_table(results) if met is not None else "") + _intervals_table(llmsim) + "</section>")


def _seeds_met(llmsim: Mapping[str, Any]) -> str:
    """With --replicates, whose run the verdict is and how many seeds met the SLO: the page is the first
    seed's, and its "SLO met" alone hid the seeds that missed (the terminal's "met by 3 of 4")."""
    reps = llmsim.get("replicates") or {}
    seeds, met = reps.get("seeds") or [], reps.get("slo_met")
    if len(seeds) < 2 or met is None:
        return ""
    return f"; seed {seeds[0]}'s run, and {met} of {len(seeds)} seeds ({', '.join(map(str, seeds))}) met it"


def _intervals_table(llmsim: Mapping[str, Any]) -> str:
    shown = [(k, interval_text(v)) for k, v in _intervals(llmsim).items()]
    shown = [(k, t) for k, t in shown if t]
    if not shown:
        return ""
    return "<h3>Intervals</h3>" + table(["figure", "interval"], shown, cls="intervals", caption=_scope(llmsim))


def pools_table(llmsim: Mapping[str, Any]) -> str:
    pools = llmsim.get("pools") or {}
    n = (llmsim.get("product") or {}).get("slices") or 1
    rows = [[name, p.get("model"), f"{weights_served(p)} / {p.get('kv_dtype') or '—'}", stack_served(p) or "—",
             p.get("gpu"), replica_layout(p), whole(p.get("kv_tokens_per_replica")),
             f"{p['replicas_min']}/{p['replicas_mean']:.1f}/{p['replicas_max']}", p.get("gpus"),
             n * p["gpus"] if n > 1 else "—", round(p.get("gpu_hours") or 0, 3), money(p.get("usd")),
             f"{100 * p['mean_kv_utilization']:.0f} %", f"{100 * p['gpu_busy_fraction']:.0f} %",
             f"{p['mean_batch_size']:,.1f} / {p['max_batch_size']:,}", p.get("rejected_on_admission", 0)]
            for name, p in pools.items()]
    return table(["pool", "model", "weights / KV", "serving stack", "GPU", "replica", "KV tokens a replica",
                  "replicas min/mean/max", "GPUs at peak (slice)",
                  "GPUs at peak (product)", "GPU-h", "window $", "KV used", "busy", "batch mean / max", "shed"],
                 rows, caption="KV used and busy: mean fractions over the replicas' time; shed: rejected on admission") \
        + "".join(f"<p>Pool {esc(name)} {esc(text)}.</p>" for name, p in pools.items()
                  if (text := handoff_text(p.get("handoff"))))


def classes_table(llmsim: Mapping[str, Any]) -> str:
    classes = llmsim.get("classes")
    if not classes:
        return ""
    rare = rare_counts_shown(classes)
    rows = [[name, c.get("pool"), c.get("priority"), c.get("completed"), c.get("rejected"), c.get("cancelled"),
             *(c.get(key) or 0 for key, _, _ in rare),
             _ms(c.get("median_ttft_ms")), class_p99(c, "ttft", _digits(c.get("p99_ttft_ms") or 0)),
             class_p99(c, "tpot", _digits(c.get("p99_tpot_ms") or 0)), money(c.get("usd")),
             class_verdict(c, "✓", "✗")] for name, c in classes.items()]
    return "<h3>Classes</h3>" + table(["class", "pool", "priority", "completed", "rejected", "cancelled",
                                       *(header for _, header, _ in rare), "TTFT p50 (ms)",
                                       "TTFT p99 (ms)", "TPOT p99 (ms)", "window $", "SLO"], rows,
                                      caption="window $: the class's share of the window's GPU bill, by the "
                                              "tokens it completed; SLO in (): the scenario's targets over the "
                                              "class, for information")


def latency_table(results: Mapping[str, Any]) -> str:
    stats = ["mean", "median"] + sorted({k.split("_")[0] for k in results if k.startswith("p") and
                                         k.endswith("_ttft_ms")}, key=lambda s: float(s[1:]))
    rows = [[name] + [_ms(results.get(f"{s}_{key}_ms")) for s in stats]
            for key, name in (("ttft", "TTFT"), ("tpot", "TPOT"), ("itl", "ITL"), ("e2el", "E2EL"))
            if f"mean_{key}_ms" in results]
    status = (results.get("llmsim") or {}).get("request_status") or {}
    counts = [("completed", results.get("completed")), ("failed", results.get("failed")),
              *((f"failed: {label}", status[why]) for why, label in FAILED_PARTS if status.get(why)),
              ("cancelled", results.get("cancelled")), ("request throughput (req/s)",
                                                        round(results.get("request_throughput") or 0, 2)),
              ("output throughput (tok/s)", round(results.get("output_throughput") or 0, 1))]
    return (table(["ms", *stats], rows, caption="latency percentiles over finished requests")
            + kv_rows((k, f"{v:,}" if isinstance(v, (int, float)) else "—") for k, v in counts))


def cost_table(llmsim: Mapping[str, Any]) -> str:
    cost = llmsim.get("cost") or {}
    prod = llmsim.get("product") or {}
    pairs = []
    if (prod.get("slices") or 1) > 1:
        pairs.append((f"monthly, the product ({prod['slices']:,} × the slice)", money(prod.get("monthly_usd"))))
    pairs += [("monthly, as simulated", money(cost.get("monthly_usd"))),
              ("the simulated window", money(cost.get("window_usd"))),
              ("per 1M output tokens", money(cost.get("usd_per_million_output_tokens"))),
              ("per 1M input tokens", money(cost.get("usd_per_million_input_tokens"))),
              ("per request", money(cost.get("usd_per_request"))),
              *([("per session", money(cost.get("usd_per_session")))] if cost.get("sessions") else []),
              ("how the month is extrapolated", cost.get("monthly_basis") or "—")]
    energy = llmsim.get("energy") or {}
    month = prod if (prod.get("slices") or 1) > 1 else energy
    if month.get("kwh_per_month") is not None:
        co2e, jpt = _num(month.get("co2e_kg_per_month"), ",.2f", 1e3), energy.get("joules_per_output_token")
        pairs.append(("energy a month" + (", the product" if month is prod else ""),
                      f"{month['kwh_per_month'] / 1e3:,.2f} MWh, {co2e} t CO2e ({_num(jpt, ',.2f')} J per output "
                      f"token; PUE {_num(energy.get('pue'), 'g')}, {_num(energy.get('grid_g_co2e_per_kwh'), 'g')} "
                      "g CO2e/kWh)"))
    if cost.get("power"):
        pairs.append(("power a month, as simulated", money(cost["power"].get("monthly_usd"))))
    pairs += [(f"price of pool {p['name']}", f"${p['usd_per_gpu_hour']:,.2f}/GPU-h × {p['gpu']}, from the "
               f"{p['price_source']}" + (" (an assumption: set pools[].usd_per_gpu_hour)" if p.get("price_assumed")
                                         else "")) for p in cost.get("pools") or []]
    return kv_rows(pairs)
