"""report.html: one page a capacity plan travels as, written beside results.json.

The page is a single file that opens with no network: the charting
library (Plotly.js, from the ``plotly`` package) is inlined once, and each
chart's data sits in the page as JSON. It is drawn from the files in the
folder alone (results.json, requests.parquet, timeline.csv, scenario.yaml;
ladder.json, plan.json or the sweep table), so ``llmsim report DIR``
redraws it from a finished run, a ladder, a plan or a sweep.

Order: the answer first (the product's GPUs and monthly cost, the SLO and
load verdicts), then tables per pool, the charts, and the scenario the
figures came from.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, Mapping, Optional

from ..atomic_write import write_atomic
from ..errors import LlmsimError
from ..metrics.verdict import mark
from ..planning.pareto import month_with_power, point_label
from . import page_charts as charts
from .intervals import bounds_text, steps_bounds_lines, traffic_text
from .page_parts import classes_table, cost_table, esc, figure, gpus_text, latency_table, money, pools_table, \
    run_answer, table, whole
from .run_folder import check_columns, check_ladder, check_optional, check_plan, check_results, check_rows, \
    check_sweep, check_values, folder_kinds, kinds_text

__all__ = ["write_report", "report_html", "REPORT"]

REPORT = "report.html"

_STYLE = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:0 auto;max-width:1200px;padding:0 16px 48px;
color:#222;line-height:1.4}
h1{font-size:1.5em;margin:.8em 0 .2em}h2{border-bottom:1px solid #ddd;padding-bottom:.2em;margin-top:1.6em}
.sub{color:#666;margin:0 0 1em}
.figures{display:flex;flex-wrap:wrap;gap:12px;margin:12px 0}
.figure{border:1px solid #ddd;border-radius:8px;padding:10px 16px;min-width:150px;background:#fafafa}
.figure .big{font-size:1.9em;font-weight:600}.figure .label{color:#555;font-size:.85em;max-width:260px}
.figure.ok .big{color:#1e7b34}.figure.bad .big{color:#b3261e}
table{border-collapse:collapse;margin:8px 0 16px;font-size:.9em}
th,td{border-bottom:1px solid #e3e3e3;padding:4px 10px;text-align:left;vertical-align:top}
td.n{text-align:right;font-variant-numeric:tabular-nums}thead th{background:#f3f3f3}
table.kv th{font-weight:500;color:#444}caption{caption-side:bottom;text-align:left;color:#666;font-size:.85em}
.chart{width:100%;min-height:380px;margin:8px 0 24px}
pre{background:#f6f6f6;padding:12px;overflow:auto;font-size:.85em;max-height:600px}
footer{color:#888;font-size:.8em;margin-top:40px}
"""

_DRAW = """
(function(){
  var config={responsive:true,displaylogo:false};
  document.querySelectorAll('div.chart').forEach(function(el){
    var spec=JSON.parse(document.getElementById(el.id+'-spec').textContent);
    Plotly.newPlot(el,spec.data,spec.layout,config).then(function(){el.setAttribute('data-drawn','1');});
  });
})();
"""


def _read_json(path: Path) -> Any:
    from ..report.diff import read_json_object

    return read_json_object(path, what=path.name)


def _read_frame(path: Path, read: Callable[[Path], Any]) -> Any:
    """A table of the folder (timeline, sweep table, per-request columns),
    every way it can fail one LlmsimError naming it."""
    from ..reads import MAX_TABLE_BYTES, input_file

    # a parquet table is read a row group at a time, sampled: any size
    input_file(path, MAX_TABLE_BYTES if path.suffix != ".parquet" else 1 << 62, "table")
    try:
        return read(path)
    except (OSError, ValueError, EOFError) as e:   # pandas' and pyarrow's parse errors are ValueErrors
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise LlmsimError(f"cannot read it as a table ({first})", source=path) from None


def _read_text(path: Path) -> str:
    from ..reads import MAX_TEXT_BYTES, input_file

    input_file(path, MAX_TEXT_BYTES, "scenario file")
    try:
        return path.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise LlmsimError(f"cannot read it as text ({e})", source=path) from None


def _chart(name: str, spec: Mapping[str, Any]) -> str:
    data = json.dumps(spec, allow_nan=False, separators=(",", ":")).replace("</", "<\\/")
    return (f'<div class="chart" id="chart-{esc(name)}" data-chart="{esc(name)}"></div>'
            f'<script type="application/json" id="chart-{esc(name)}-spec">{data}</script>')


def _charts(specs: list[tuple[str, Mapping[str, Any]]]) -> str:
    return "".join(_chart(n, s) for n, s in specs)


#: Requests read for the charts at most: a bigger run's table is read a row group at a time, every k-th row.
SAMPLE_ROWS = 1_000_000


def _requests(folder: Path, results: Optional[Mapping[str, Any]] = None) -> tuple[Optional[Any], int]:
    """The per-request columns the charts need, and the stride they were
    sampled at (1: every request). A hundred-million-request table is never
    read whole: every k-th row of each row group, k keeping ≤ SAMPLE_ROWS.
    A table lacking a column the charts read, or empty where ``results``
    counts completed requests, is refused: the page would leave charts out."""
    p = folder / "requests.parquet"
    if not p.exists():
        return None, 1
    import pandas as pd
    import pyarrow.parquet as pq

    def read(path: Path) -> tuple[Optional[Any], int]:
        f = pq.ParquetFile(path)
        check_columns(f.schema_arrow.names, charts.REQUEST_COLUMNS, path)
        check_rows(f.metadata.num_rows, path, _counted(results))
        k = max(1, -(-f.metadata.num_rows // SAMPLE_ROWS))
        parts = [f.read_row_group(i, columns=list(charts.REQUEST_COLUMNS)).to_pandas().iloc[::k]
                 for i in range(f.num_row_groups)]
        return (pd.concat(parts, ignore_index=True) if parts else None), k

    frame, k = _read_frame(p, read)
    if frame is not None:
        check_values(frame, charts.REQUEST_COLUMNS, p)
    return frame, k


def _counted(results: Optional[Mapping[str, Any]]) -> Optional[str]:
    """Why the request table may not be empty (None: the run completed none, so an empty one is its own)."""
    done = (results or {}).get("completed")
    return f"results.json counts {done:,} completed requests" if isinstance(done, int) and done > 0 else None


def _timeline(folder: Path) -> Optional[Any]:
    """timeline.csv, refused when the over-the-run chart could not be drawn
    from it: ``llmsim run`` writes a row per pool from time 0, so one
    without rows or columns was cut or replaced since."""
    p = folder / "timeline.csv"
    if not p.exists():
        return None
    import pandas as pd

    df = _read_frame(p, pd.read_csv)
    check_columns(df.columns, charts.TIMELINE_COLUMNS, p)
    check_rows(len(df), p, "llmsim run writes a row per pool at every sample, the first at time 0")
    check_values(df, charts.TIMELINE_COLUMNS, p)
    check_optional(df, charts.TIMELINE_OPTIONAL_COLUMNS, p)
    return df


def _scenario_section(folder: Path, heading: str = "The scenario") -> str:
    p = folder / "scenario.yaml"
    if not p.exists():
        return ""
    return (f"<h2>{esc(heading)}</h2><p>As run: the file with its variants and <code>--set</code> overrides applied "
            "(scenario.yaml beside this page).</p><pre>" + esc(_read_text(p)) + "</pre>")


def _run_files(folder: Path) -> tuple[dict[str, Any], Optional[Any], int, Optional[Any], str]:
    """A run folder's files, every one read and checked: results, requests and their stride, timeline,
    the scenario's section."""
    from ..report.diff import read_results

    results = read_results(folder / "results.json")
    check_results(results, folder / "results.json")
    requests, stride = _requests(folder, results)
    return results, requests, stride, _timeline(folder), _scenario_section(folder)


def _run_body(folder: Path) -> tuple[str, str]:
    # every file read and checked before any of the page is drawn
    results, requests, stride, timeline, scenario = _run_files(folder)
    llmsim = results.get("llmsim") or {}
    title = f"llmsim run: {llmsim.get('scenario', folder.name)}"
    body = [run_answer(results), "<h2>Pools</h2>", pools_table(llmsim), classes_table(llmsim),
            "<h2>Latency</h2>", latency_table(results), _charts(charts.latency_cdfs(requests, results.get("slo"))),
            "<h2>Over the run</h2>", _charts(charts.timeseries(timeline, requests, stride)),
            "<h2>Cost</h2>", cost_table(llmsim), _charts(charts.cost_breakdown(llmsim)), scenario]
    sub = (f"llmsim {llmsim.get('version', '')}, seed {llmsim.get('seed')}, engine {llmsim.get('engine')}, "
           f"{llmsim.get('simulated_seconds') or 0:,.0f} simulated seconds"
           + (f"; charts drawn from every {stride:,}th request" if stride > 1 else ""))
    return title, f'<p class="sub">{esc(sub)}</p>' + "".join(body)


_LADDER_COLS = (("product_gpus", "product GPUs", whole), ("product_monthly_usd", "product $/month", money),
                ("gpus", "GPUs (peak)", whole), ("monthly_usd", "$/month", money),
                ("ttft_p50_ms", "TTFT p50 (ms)", whole), ("ttft_p99_ms", "TTFT p99 (ms)", whole),
                ("tpot_p99_ms", "TPOT p99 (ms)", lambda v: "—" if v is None else f"{v:,.2f}"),
                ("completed", "completed", whole), ("rejected", "rejected", whole), ("cancelled", "cancelled", whole),
                ("stranded", "stranded", whole))


def _ladder_body(folder: Path) -> tuple[str, str]:
    lad = _read_json(folder / "ladder.json")
    check_ladder(lad, folder / "ladder.json")
    rows = lad.get("steps") or []
    # each step's folder (where the ladder kept it) checked as a run folder, before any of the page is drawn
    steps = [_run_files(folder / r["step"])[0] if (folder / r["step"] / "results.json").is_file() else {}
             for r in rows]
    base = steps[0] if steps else {}
    first = rows[0] if rows else {}
    sliced = any(r.get("product_gpus") not in (None, r.get("gpus")) for r in rows)
    stranded = any(r.get("stranded") for r in rows)     # a column only where a step stranded a request
    cols = [c for c in _LADDER_COLS if (sliced or not c[0].startswith("product_"))
            and (stranded or c[0] != "stranded")]
    parts = [figure("steps.0.product_gpus", first.get("product_gpus"), whole(first.get("product_gpus")),
                    f"GPUs at peak, the baseline's {_whole_of(sliced)}"),
             figure("steps.0.product_monthly_usd", first.get("product_monthly_usd"),
                    money(first.get("product_monthly_usd")), f"per month, the baseline's {_whole_of(sliced)}")]
    met = [r["step"] for r in rows if r.get("slo_met")]
    tab = table(["step", "SLO", *(h for _, h, _ in cols)],
                [[r["step"], mark(r),
                  *(fmt(r.get(k)) for k, _, fmt in cols)] for r in rows])
    links = "".join(f'<li><a href="{esc(r["step"])}/report.html">{esc(r["step"])}</a>: its own page</li>'
                    for r in rows if (folder / r["step"] / "report.html").is_file())
    bounds = steps_bounds_lines(rows, lad.get("confidence"))
    body = ['<section id="answer"><div class="figures">', *parts, "</div>",
            f"<p>{len(rows)} steps ({esc(lad.get('ladder'))} ladder); the SLO is met by: "
            f"{esc(', '.join(met) or 'none')}.</p></section>", "<h2>Steps</h2>", tab,
            f'<p>{esc(bounds[0])}</p><ul>' + "".join(f"<li>{esc(b)}</li>" for b in bounds[1:]) + "</ul>"
            if bounds else "",
            _charts(charts.ladder_charts(rows, base.get("slo"))), f"<ul>{links}</ul>" if links else "",
            _scenario_section(folder / rows[0]["step"], "The baseline's scenario") if rows else ""]
    return f"llmsim ladder: {lad.get('scenario')}", "".join(body)


_PLAN_COLS = (("product_gpus", "product GPUs", whole), ("product_monthly_usd", "product $/month", money),
              ("gpus", "GPUs", whole), ("monthly_usd", "$/month", money), ("ttft_p99_ms", "TTFT p99 (ms)", whole),
              ("tpot_p99_ms", "TPOT p99 (ms)", lambda v: "—" if v is None else f"{v:,.2f}"))


def _fleet_rows(rows: list[Mapping[str, Any]], keys: list[str], extra: tuple = ()) -> str:
    cols = [c for c in _PLAN_COLS if any(r.get(c[0]) is not None for r in rows)]
    shown = [[*(r.get("overrides", r).get(k) for k in keys),
              mark(r),
              *(fmt(r.get(k)) for k, _, fmt in cols), *(r.get(k) or "" for k, _ in extra)] for r in rows]
    return table([*keys, "SLO", *(h for _, h, _ in cols), *(h for _, h in extra)], shown)


def _whole_of(sliced: bool) -> str:
    """What a headline figure counts: the product where the scenario simulates a slice of one, else the
    simulated fleet itself, as a run's page says it ("the product" of an unsliced plan named none)."""
    return "product" if sliced else "fleet"


def _plan_body(folder: Path) -> tuple[str, str]:
    plan = _read_json(folder / "plan.json")
    check_plan(plan, folder / "plan.json")
    best = plan.get("best")
    cands = plan.get("candidates") or []
    keys = list(dict.fromkeys(k for c in cands for k in c.get("overrides", {})))
    name = plan.get("name") or Path(str(plan.get("scenario"))).stem     # a plan.json older than "name"
    if best:
        whose = _whole_of(best.get("product_gpus") not in (None, best.get("gpus")))
        parts = [figure("best.product_gpus", best.get("product_gpus", best.get("gpus")),
                        whole(best.get("product_gpus", best.get("gpus"))), f"GPUs at peak, the {whose}"),
                 figure("best.product_monthly_usd", best.get("product_monthly_usd", best.get("monthly_usd")),
                        money(best.get("product_monthly_usd", best.get("monthly_usd"))), f"per month, the {whose}"),
                 figure("best.slo_met", True, "SLO met", "by the cheapest fleet found", "ok")]
        what = "Cheapest fleet meeting the SLO: " + ", ".join(f"{k}={v}" for k, v in best["overrides"].items())
        if best.get("product_gpus") not in (None, best.get("gpus")):
            what += (f" (the simulated slice: {gpus_text(best.get('gpus'))}, {money(best.get('monthly_usd'))}"
                     f"/month)")
    else:
        parts = [figure("best", None, "no fleet", "of those searched meets the SLO", "bad")]
        what = "No combination meets the SLO in the range searched."
    confidence = plan.get("confidence")
    notes = [] if confidence is None else [_confidence_note(confidence, plan.get("by_confidence") or {},
                                                            len(plan.get("seeds") or []))]
    notes += [f"warning: {w}" for w in plan.get("warnings") or []]
    points = plan.get("probes") or cands
    body = ['<section id="answer"><div class="figures">', *parts, f"</div><p>{esc(what)}</p>",
            *(f"<p>{esc(n)}</p>" for n in notes), "</section>",
            "<h2>Candidates</h2>",
            _fleet_rows(cands, keys, (("probes", _probes_header(plan)), ("failed_slo", "missed"))),
            _charts(charts.pareto_chart(points, best, f"{name}: cost against p99 TTFT of every fleet simulated")),
            "<h2>The search</h2><pre>" + esc(json.dumps({k: plan.get(k) for k in ("scenario", "variants", "set",
                                                                                  "mode", "searched", "seeds",
                                                                                  "rank_by")}, indent=2)) + "</pre>"]
    return f"llmsim plan: {name}", "".join(body)


def _probes_header(plan: Mapping[str, Any]) -> str:
    """The candidates' count of values tried, named as the terminal's table and plan.json name it: the
    page headed it "runs", where the terminal's runs are these probes times the seeds ("3 runs (1 probe ×
    3 seeds)" beside a page reading 1 run)."""
    n = len(plan.get("seeds") or [])
    return "probes" if n <= 1 else f"probes (× {n} seeds)"


def _confidence_note(confidence: float, by_confidence: Mapping[str, Any], seeds: int) -> str:
    """What a plan at a confidence judged, over what traffic (the seeds), and the answer at 50 % (the
    bias-corrected prediction) beside it, as the terminal says them: without it a page reading "no fleet"
    hides the fleet that meets the SLO at 50 %."""
    levels = by_confidence.get("levels") or {}
    note = (f"Judged at {100 * confidence:g} % confidence: every SLO target's bound, under llmsim's error model "
            f"{traffic_text(seeds)}, must meet it, each target on its own.")
    asked = levels.get(f"{confidence:g}") or {}
    if bounds := bounds_text(asked.get("slo_bounds_ms")):
        note += f" The answer's {bounds}."
    half = levels.get("0.5")
    if half and confidence != 0.5:
        fleet = ", ".join(f"{k}={v}" for k, v in (half.get("overrides") or {}).items())
        # a level carries product_* as None where the scenario is not a slice: the fleet's own then
        gpus = gpus_text(half.get("product_gpus") or half.get("gpus"))
        usd = money(half.get("product_monthly_usd") or half.get("monthly_usd"))
        half_bounds = bounds_text(half.get("slo_bounds_ms"))
        note += (f" At 50 % (the bias-corrected prediction): {fleet}, {gpus}, {usd}/month"
                 + (f"; {half_bounds}." if half_bounds else ".")
                 if half.get("met") else " At 50 % (the bias-corrected prediction) no fleet searched meets it "
                                         "either.")
    return note


def _sweep_table(folder: Path) -> Optional[Any]:
    import pandas as pd

    for name in ("sweep.parquet", "sweep.csv"):
        if (folder / name).exists():
            df = _read_frame(folder / name, pd.read_parquet if name.endswith(".parquet") else pd.read_csv)
            check_sweep(df, folder / name)
            return df
    return None


def _sweep_body(folder: Path, df: Any) -> tuple[str, str]:
    # the grid's keys: key paths, and top-level scenario keys such as seed (a grid may vary them too)
    from ..scenario.schema import Scenario

    first = [c for c in df.columns if "." in c or c in Scenario.model_fields]
    rows = [{k: (None if isinstance(v, float) and v != v else v) for k, v in r.items()}
            for r in df.to_dict("records")]
    for r in rows:
        r["overrides"] = {k: r[k] for k in first}
    # A fleet is a point but for its seed: it meets the SLO when every seed it ran at does, as plan --seeds
    # judges (a seed grid's page named "replicas=1, seed=4" the cheapest while seed 3 of it missed).
    fleet_keys = [k for k in first if k != "seed"]
    fleets: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        fleets.setdefault(json.dumps([r["overrides"][k] for k in fleet_keys], default=str), []).append(r)
    met = [g for g in fleets.values() if all(r.get("slo_met") for r in g)]
    # the month plan ranks by: the product's where rows carry it, power added where energy is priced
    product = any(r.get("product_monthly_usd") is not None for r in rows)
    cost = lambda g: max(month_with_power(r, product) or float("inf") for r in g)  # noqa: E731
    cheapest = min(met, key=cost, default=None)
    seeded = any(len(g) > 1 for g in fleets.values())
    parts = [figure("points", len(rows), f"{len(rows):,}", "points swept")]
    if any(r.get("slo_met") is not None for r in rows):     # without any SLO there is no verdict to count
        parts.append(figure("slo_met", len(met), f"{len(met):,}",
                            "fleets meet the SLO at every seed" if seeded else "meet the SLO", "ok" if met else "bad"))
    if cheapest is not None:
        m = cost(cheapest)
        parts.append(figure("cheapest_meeting_slo.monthly_usd", m, money(m),
                            "per month, the cheapest point meeting the SLO: " + esc(point_label(
                                {k: cheapest[0]["overrides"][k] for k in fleet_keys}))))
    body = ['<section id="answer"><div class="figures">', *parts, "</div></section>", "<h2>Points</h2>",
            _fleet_rows(rows, first, (("error", "error"),)),
            _charts(charts.pareto_chart(rows, None, "Cost against p99 TTFT of every point"))]
    return f"llmsim sweep: {folder.name}", "".join(body)


def _body(folder: Path) -> tuple[str, str]:
    held = folder_kinds(folder)
    if len(held) > 1:   # two commands wrote into one folder: either page would pass off the other's files
        raise LlmsimError(f"holds the output of more than one command ({kinds_text(held)}), and a folder has one "
                          f"page; move each command's files to a folder of its own", source=folder)
    # the page of the one kind the folder holds (run_folder.FOLDER_KINDS); a sweep's is drawn from its table
    kind = next(iter(held), None)
    if kind in _BODIES:
        return _BODIES[kind](folder)
    df = _sweep_table(folder)
    if df is not None:
        return _sweep_body(folder, df)
    raise LlmsimError("holds no results.json, ladder.json, plan.json or sweep table; name the folder "
                      "llmsim run -o, plan or sweep wrote", source=folder)


_BODIES = {"run": _run_body, "ladder": _ladder_body, "plan": _plan_body}


def report_html(folder: Path) -> str:
    """The page for the results in ``folder``."""
    from plotly.offline import get_plotlyjs    # 4.8 MB of JavaScript: read only when a page is written

    from .. import __version__

    title, body = _body(Path(folder))
    return ("<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<meta name=\"viewport\" content=\"width=device-width,initial-scale=1\"><title>{esc(title)}</title>"
            f"<style>{_STYLE}</style><script>{get_plotlyjs()}</script></head><body>"
            f"<h1>{esc(title)}</h1>{body}<footer>written by llmsim {esc(__version__)}; redraw with "
            f"<code>llmsim report DIR</code>, DIR being this page's folder</footer><script>{_DRAW}</script></body></html>\n")


def write_report(folder: Path) -> Path:
    """Write ``folder/report.html`` and return its path."""
    folder = Path(folder)
    path = folder / REPORT
    html = report_html(folder)
    return write_atomic(path, lambda tmp: tmp.write_text(html, encoding="utf-8"))
