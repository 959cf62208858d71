"""A run's intervals: added to its results.json, and shown as a terminal table and a plot of bands.

:func:`annotate` judges the run's regime from its scenario and results and
adds the blocks; the table and the plot read only results.json
(``llmsim.intervals``, ``llmsim.error_model``, ``llmsim.replicates``), so an
earlier run's file renders the same way.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

from rich.table import Table

from ..errors import LlmsimError
from ..metrics.intervals import intervals_block, slo_intervals_block, slo_key, spread_block
from ..metrics.verdict import owner, slo_blocks, target_name
from ..validation.error_model import ErrorModel, load_error_model, regime_of_run
from .summary_format import FAIL, OK, num

__all__ = ["shipped_model", "annotate", "slo_interval", "slo_bounds", "bounds_text", "steps_bounds_lines",
           "seeds_met", "unsent_targets", "traffic_text", "interval_scope", "intervals_table", "widened_notes",
           "intervals_figure", "write_intervals_plot"]


def shipped_model() -> tuple[Optional[ErrorModel], Optional[str]]:
    """The shipped error model, or None and why (intervals are then the replicates' spread alone)."""
    try:
        return load_error_model(), None
    except LlmsimError as e:
        return None, e.render()


def annotate(results: dict[str, Any], scenario: Any, replicates: Sequence[Mapping[str, Any]],
             confidence: float, model: Optional[ErrorModel]) -> dict[str, Any]:
    """Add ``llmsim.intervals``, ``llmsim.error_model``, ``llmsim.slo_intervals`` (where a class or
    prompt-length bucket declares its own SLO) and (for several replicates) ``llmsim.replicates`` to
    ``results`` (replicate 0's), in place; returns it."""
    regime = regime_of_run(scenario, results)
    block = results.setdefault("llmsim", {})
    block["intervals"], block["error_model"] = intervals_block(replicates, regime, model, confidence)
    own = slo_intervals_block(replicates, regime, model, confidence)
    if own:
        block["slo_intervals"] = own
    if len(replicates) > 1:
        seeds = [(r.get("llmsim") or {}).get("seed") for r in replicates]
        block["replicates"] = spread_block(replicates, seeds)
    return results


def slo_interval(results: Mapping[str, Any], label: str, key: str,
                 target: Mapping[str, Any]) -> Optional[Mapping[str, Any]]:
    """The interval of an SLO target of :func:`~simulator.metrics.verdict.slo_blocks` (``label``,
    ``key``): the fleet's is its statistic's in ``llmsim.intervals``, a class's or bucket's its own in
    ``llmsim.slo_intervals``; None where the run has none (a results.json written before them)."""
    def within(node: Any, key: str) -> Any:      # a page reads any results.json: a wrong shape is none
        return node.get(key) if isinstance(node, Mapping) else None
    llmsim = results.get("llmsim")
    if label == "SLO":
        return within(within(llmsim, "intervals"), slo_key(target["metric"], target["percentile"]))
    return within(within(within(llmsim, "slo_intervals"), owner(label, "")), key)


def slo_bounds(results: Mapping[str, Any]) -> Optional[dict[str, Optional[float]]]:
    """Each SLO target's one-sided bound (:func:`slo_interval`), named as plan.json's ``slo_bounds_ms``
    names them (:func:`~simulator.metrics.verdict.target_name`); null for a target without one (no
    samples); None for a run that declares no SLO."""
    blocks = slo_blocks(results)
    if not blocks:
        return None
    out: dict[str, Optional[float]] = {}
    for label, block in blocks:
        for key, t in (block.get("targets") or {}).items():
            i = slo_interval(results, label, key, t)
            out[target_name(label, key)] = i.get("bound") if isinstance(i, Mapping) else None
    return out


def bounds_text(bounds: Optional[Mapping[str, Optional[float]]]) -> str:
    """Each target's bound (:func:`slo_bounds`) as a plan's answer and a ladder's steps list them, in the
    terminal and on the ladder's page ("bounds (ms): tpot_p99_ms 36.4, ttft_p99_ms 960.4"); "" without any."""
    shown = ", ".join(f"{k} {'unmeasured' if v is None else f'{v:,.1f}'}" for k, v in sorted((bounds or {}).items()))
    return f"bounds (ms): {shown}" if shown else ""


def steps_bounds_lines(rows: Sequence[Mapping[str, Any]], confidence: Optional[float]) -> list[str]:
    """Each ladder step's SLO bounds at ``confidence`` (ladder.json's), as a plan at that confidence lists
    its answer's: a heading line, then one per step; none for a scenario without an SLO."""
    shown = [(r["step"], bounds_text(r.get("slo_bounds_ms"))) for r in rows]
    if not any(b for _, b in shown):
        return []
    at = "" if confidence is None else f" at {100 * confidence:g} %"
    return [f"SLO bounds{at}: each target's one-sided bound under llmsim's error model, as check and plan "
            f"--confidence judge it (--confidence sets it; the SLO column is the simulated values' verdict)"] \
        + [f"{step}: {b or 'no bounds'}" for step, b in shown]


def seeds_met(results: Mapping[str, Any], label: str, key: str, interval: Optional[Mapping[str, Any]]) -> str:
    """How many of the replicates met an SLO target ("3 of 4"). A class some seed sent no request is
    judged by the seeds that sent it one (its ``replicates_judged``), and counted over them alone:
    over all, "1 of 2" read as a miss in a seed that never judged it."""
    reps = (results.get("llmsim") or {}).get("replicates") or {}
    n = len(reps.get("seeds") or []) or reps.get("count")
    if label == "SLO":
        met = (reps.get("slo_targets_met") or {}).get(key)
    else:
        met = interval.get("replicates_met") if isinstance(interval, Mapping) else None
        judged = interval.get("replicates_judged") if isinstance(interval, Mapping) else None
        if isinstance(judged, int) and isinstance(n, int) and judged < n:
            return f"{met or 0} of {judged} that sent it"
    return "—" if met is None else f"{met} of {n}"


def unsent_targets(results: Mapping[str, Any]) -> list[tuple[str, str, dict[str, Any], Mapping[str, Any]]]:
    """(label, key, target, interval) of each class target other seeds judged that this run's seed,
    having sent the class no request, has no slo block for: without them a class that missed in every
    seed but the first was in no table, while run exited 1 on it. ``target`` holds what a
    ``targets`` entry does but the measurement (this seed has none)."""
    from ..scenario.slo import parse_slo

    own = (results.get("llmsim") or {}).get("slo_intervals")
    shown = {(owner(label, ""), key) for label, block in slo_blocks(results) for key in block.get("targets") or {}}
    out = []
    for name, targets in (own.items() if isinstance(own, Mapping) else ()):
        for key, i in (targets.items() if isinstance(targets, Mapping) else ()):
            if (name, key) in shown or not isinstance(i, Mapping) or not isinstance(i.get("target_ms"), (int, float)):
                continue
            try:
                [(_, metric, pct, ms)] = parse_slo({key: i["target_ms"]}).targets
            except (LlmsimError, ValueError):      # a page reads any results.json: a foreign key is none
                continue
            out.append((f"SLO {name}", key, {"metric": metric, "percentile": pct, "target_ms": ms}, i))
    return out


def _rows(results: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any], Mapping[str, Any], str]]:
    """(name, target, interval, how many seeds met it) for each SLO target the run is judged on that has
    an interval: the fleet's by its key, a class's or bucket's after its name ("paid: ttft_p99_ms"),
    then those of a class other seeds sent requests and this one none (:func:`unsent_targets`)."""
    out = []
    for label, block in slo_blocks(results):
        for key, t in (block.get("targets") or {}).items():
            i = slo_interval(results, label, key, t)
            if i is not None:
                out.append((target_name(label, key), t, i, seeds_met(results, label, key, i)))
    for label, key, t, i in unsent_targets(results):
        out.append((target_name(label, key), t, i, seeds_met(results, label, key, i)))
    return out


def traffic_text(seeds: int) -> str:
    """What traffic a plan's bounds span, after "llmsim's error model": one seed's draw holds none of the
    traffic's own spread, which a reader betting on the bound must know."""
    return (f"and the spread of {seeds} seeds' traffic" if seeds > 1
            else "on one seed's traffic (--seeds N adds the traffic's spread)")


def interval_scope(confidence: float, replicates: Optional[int]) -> str:
    """What a run's intervals cover, said wherever they are shown: one seed's interval holds llmsim's
    error alone and is narrower than the run-to-run spread would make it, which a reader betting on
    its high end must know (the terminal said so, the report page did not)."""
    level = f"{100 * confidence:g} % interval"
    if replicates and replicates > 1:
        return f"{level} over {replicates} replicates and llmsim's error"
    return f"{level} from llmsim's error (one replicate: --replicates N adds the run-to-run spread)"


def intervals_table(results: Mapping[str, Any]) -> Optional[Table]:
    """Each SLO target's interval (the fleet's, each class's and prompt-length bucket's own), and with
    replicates how many met it. ✓/✗ is the one-sided bound's verdict,
    as check and plan --confidence give it: the two-sided interval's high end is a stricter bound, and a
    target between the two passed there and showed ✗ here."""
    rows = _rows(results)
    if not rows:
        return None
    conf = rows[0][2]["confidence"]
    reps = (results.get("llmsim") or {}).get("replicates") or {}
    n = reps.get("count")
    title = f"SLO metrics, {interval_scope(conf, n)}" + (f" (met by {reps.get('slo_met')} of {n})" if n else "")
    t = Table(title=title, title_justify="left")
    for name, justify in (("", "center"), ("target", "left"), ("limit", "right"), ("simulated", "right"),
                          ("interval", "right"), (f"{100 * conf:g} % bound", "right")) \
            + ((("replicates met", "right"),) if n else ()):
        t.add_column(name, justify=justify)
    for key, target, i, met in rows:
        bound = i.get("bound")      # None: a results.json written before bounds were stored
        mark = "—" if bound is None else OK if bound <= target["target_ms"] else FAIL
        cells = [mark, key, f"≤ {num(target['target_ms'])} ms", num(target.get("measured_ms")),
                 f"{num(i['lo'])} – {num(i['hi'])}", num(bound)]
        if n:
            cells.append(met)
        t.add_row(*cells)
    return t


def replicates_note(results: Mapping[str, Any]) -> Optional[str]:
    """Which seed the tables show: with replicates, every table but the spread and the intervals is one
    seed's run (its files are the folder's), which a reader would otherwise take for all of them."""
    reps = (results.get("llmsim") or {}).get("replicates") or {}
    seeds = reps.get("seeds") or []
    if len(seeds) < 2:
        return None
    return (f"replicates: {len(seeds)} seeds ({', '.join(map(str, seeds))}); the tables below are seed {seeds[0]}'s "
            f"run, the spread and the SLO intervals after them span all {len(seeds)}")


#: The latencies whose spread over the seeds is tabled, and the percentiles shown.
_SPREAD_METRICS = (("TTFT", "ttft"), ("TPOT", "tpot"), ("ITL", "itl"), ("E2EL", "e2el"))
_SPREAD_STATS = (("median", "median"), ("p99", "p99"))


def replicates_table(results: Mapping[str, Any]) -> Optional[Table]:
    """Each latency's median and p99 over the seeds: their mean, then the lowest and highest seed."""
    reps = (results.get("llmsim") or {}).get("replicates") or {}
    spread = reps.get("spread") or {}
    n = reps.get("count")
    if not n or not spread:
        return None
    t = Table(title=f"Latency over {n} seeds (ms): mean of the seeds (lowest – highest)", title_justify="left")
    t.add_column("metric")
    for label, _ in _SPREAD_STATS:
        t.add_column(label, justify="right")
    for label, key in _SPREAD_METRICS:
        cells = []
        for _, stat in _SPREAD_STATS:
            s = spread.get(f"{stat}_{key}_ms")
            cells.append("—" if not s else f"{num(s['mean'])} ({num(s['min'])} – {num(s['max'])})")
        if any(c != "—" for c in cells):
            t.add_row(label, *cells)
    return t


def widened_notes(results: Mapping[str, Any]) -> list[str]:
    """One line per error-model cell that judged metrics whose own regime had too few residuals."""
    em = (results.get("llmsim") or {}).get("error_model") or {}
    by_cell: dict[str, list[str]] = {}
    out = []
    for metric, used in (em.get("metrics") or {}).items():
        if used is None:
            out.append(f"{metric}: no error model cell; its interval is the replicates' spread alone")
        elif used.get("widened"):
            by_cell.setdefault(used["cell"], []).append(metric)
    for cell, metrics in by_cell.items():
        used = em["metrics"][metrics[0]]
        out.append(f"{', '.join(metrics)}: no held-out residuals in this regime ({', '.join(used['widened'])} "
                   f"dropped); judged by the wider cell {cell} ({used['residuals']} residuals from "
                   f"{used['groups']} groups)")
    return out


def intervals_figure(results: Mapping[str, Any], title: str = ""):
    """Each SLO metric's simulated value with its interval as a band, against its target."""
    rows = _rows(results)
    if not rows:
        return None
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6.4, 0.7 + 0.6 * len(rows)), layout="constrained")
    ax = fig.add_subplot()
    for y, (key, target, i, _) in enumerate(rows):
        ax.barh(y, i["hi"] - i["lo"], left=i["lo"], height=0.5, color="tab:blue", alpha=0.3,
                label=f"{100 * i['confidence']:g} % interval" if y == 0 else None)
        if target.get("measured_ms") is not None:
            ax.plot([target["measured_ms"]], [y], "o", color="tab:blue", label="simulated" if y == 0 else None)
        ax.plot([target["target_ms"]] * 2, [y - 0.35, y + 0.35], color="tab:red", lw=2,
                label="target" if y == 0 else None)
    ax.set_yticks(range(len(rows)), [k for k, _, _, _ in rows])
    ax.set_xscale("log")
    ax.set_xlabel("ms")
    ax.legend(loc="best", fontsize="small")
    ax.set_title(title or "SLO metrics with their intervals")
    return fig


def write_intervals_plot(folder: Path, results: Mapping[str, Any]) -> list[Path]:
    fig = intervals_figure(results, (results.get("llmsim") or {}).get("scenario") or "")
    if fig is None:
        return []
    path = Path(folder) / "intervals.png"
    fig.savefig(path)
    return [path]
