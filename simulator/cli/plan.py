"""``llmsim plan``: search for the cheapest fleet meeting the SLO, or the highest sustainable rate."""
from __future__ import annotations

import time
from pathlib import Path
from typing import List, Optional

import typer
from rich.text import Text

from ..atomic_write import write_atomic
from .app import app, checked_engine, err_console, kept_if_stopped, warn
from .output import console, fleet_answer, product_columns, provenance_notes, rows_table, to_json
from .options import Address, ConnectTimeout, ExecutorName, MaxRuns, Sets, Workers, open_executor, parse_sets
from .progress import runs_progress
from .rundir import output_dir
from .examples import epilog


@app.command("plan", epilog=epilog("plan"))
def plan(scenario: str = typer.Argument(..., help="scenario YAML (or a built-in scenario name); needs an slo: block"),
         vary: List[str] = typer.Option([], "--vary", help="key=LO..HI (the axis searched; exactly one) or "
                                                           "key=a,b,c (choices, crossed); repeatable"),
         max_rate: bool = typer.Option(False, "--max-rate", help="instead: the highest workload.arrival.rate_per_s "
                                                                 "the fleet sustains under the SLO"),
         seeds: int = typer.Option(1, "--seeds", help="a value meets the SLO only if this many seeds all do "
                                                         "(with --confidence: if the SLO holds at that "
                                                         "confidence over the seeds' spread)"),
         variant: List[str] = typer.Option([], "--variant", help="plan the scenario's variant of this name "
                                                                 "(repeatable, applied in order before --set)"),
         output: Optional[str] = typer.Option(None, "-o", "--output",
                                               help="folder for plan.json, pareto.png and report.html "
                                                    "(default: ./plan-<scenario file name without .yaml>)"),
         engine: str = typer.Option("fast", "--engine", help="fast (default) or reference"),
         confidence: Optional[float] = typer.Option(
             None, "--confidence", help="plan for an SLO that holds with this probability (at least 0.5, "
                                        "below 1) under llmsim's error model (and the --seeds' spread); the "
                                        "answer at 0.5 is given beside it"),
         executor: ExecutorName = "local", workers: Workers = None, address: Address = None,
         connect_timeout: ConnectTimeout = 10.0, set_: Sets = None, max_runs: MaxRuns = None) -> None:
    """Find, for each combination of choices, the smallest value of the range axis meeting every SLO, ranked by cost.

    Exit code 1 when no combination meets the SLO (plan.json and the plot are still written), 2 for bad input."""
    from ..metrics.intervals import check_confidence
    from ..metrics.verdict import EXIT_MISSED
    from ..planning.confidence import by_confidence, confidence_text
    from ..planning.pareto import plot_pareto    # planning on first use: `llmsim --help` imports this module
    from ..validation.error_model import load_error_model
    from ..planning.plan import infeasible_message, plan_fleet
    from ..planning.store import PointStore
    from ..planning.vary import parse_vary

    checked_engine(engine)
    model = None
    if confidence is not None:
        check_confidence(confidence, gate=True)
        model = load_error_model()
    axes = [parse_vary(v) for v in vary]
    out = output_dir(output, f"plan-{Path(scenario).stem}", ("plan.json", "pareto.png", "report.html"), [scenario],
                     command="plan")
    wall = time.perf_counter()
    levels = sorted({0.5, confidence}) if confidence is not None else [None]
    plans = {}
    def kept() -> str:
        runs = len(list((out / "points").glob("*.json"))) if (out / "points").is_dir() else 0
        return (f"no plan.json; {runs} finished run(s) kept in {out / 'points'}, which the same command reuses"
                if runs else "nothing was written")

    with kept_if_stopped(kept), open_executor(executor, workers, address, connect_timeout) as ex, \
            runs_progress(None, "plan") as on_row:
        for c in levels:      # the runs are stored: the second level reuses every probe the first made
            plans[c] = plan_fleet(scenario, axes, ex, seeds=seeds, max_rate=max_rate, engine=engine,
                                  store=PointStore(out / "points"), on_row=on_row, sets=parse_sets(set_),
                                  variants=variant, confidence=c, model=model, max_runs=max_runs)
    result = plans[confidence]
    wall = time.perf_counter() - wall
    doc = result.to_json()
    if confidence is not None:
        doc["by_confidence"] = by_confidence(plans)
    text = to_json(doc) + "\n"
    write_atomic(out / "plan.json", lambda tmp: tmp.write_text(text))
    written = [out / "plan.json"]
    if not max_rate:
        written.append(plot_pareto(result.probes, result.best, out / "pareto.png",
                                   title=f"{Path(scenario).stem}: cost vs p99 TTFT of every fleet simulated"))
    from ..report.page import write_report   # plotly's JavaScript only when a page is written

    written.append(write_report(out))
    key = result.searched["key"]
    keys = [k for k in dict.fromkeys(k for c in result.candidates for k in c["overrides"])
            if not (max_rate and k == key)]  # the rate reached has its own column
    # where the GPU varies, the price each row was billed at, beside it: a pinned price shows as one number
    priced = {pool: "usd_per_gpu_hour" if len(result.gpu_varied) == 1 else f"{pool}.usd_per_gpu_hour"
              for pool in result.gpu_varied}
    shown = [dict(c["overrides"], **{k: v for k, v in c.items() if k not in ("overrides", "usd_per_gpu_hour")},
                  **{col: c["usd_per_gpu_hour"].get(pool) for pool, col in priced.items()})
             for c in result.candidates]
    # the verdict beside the choices, so a narrow terminal never shows a cheap row without it
    lead = [*keys, *priced.values(), *(["max_rate_per_s"] if max_rate else []), "slo_met"]
    figures = [*product_columns(result.candidates), "monthly_usd", "power_monthly_usd", "gpus", "ttft_p99_ms",
               "tpot_p99_ms", "probes",
               "failed_slo"]
    what = f"highest {key} meeting the SLO" if max_rate else f"smallest {key} meeting the SLO, cheapest first"
    planned = scenario + "".join(f" --variant {v}" for v in variant)
    console.print(rows_table(f"plan {planned}: {what}", shown, [*lead, *figures],
                             keep=sum(any(r.get(c) is not None for r in shown) for c in lead),
                             elsewhere=f"a wider terminal shows them; {out / 'plan.json'} holds every figure"))
    console.print(f"searched {key}; {runs_text(sum(c['probes'] for c in result.candidates), len(result.seeds))} "
                  f"in {wall:.1f} s; wrote {', '.join(map(str, written))}", markup=False)
    for note in provenance_notes(result.calibration):
        console.print(f"note: {note}", markup=False)
    if confidence is None:
        console.print("note: judged on the simulated figures, with no margin for llmsim's prediction error; "
                      "--confidence 0.9 plans for each SLO target holding with 90 % probability", markup=False)
    else:
        console.print(confidence_text(doc["by_confidence"], fleet_answer, len(result.seeds)), markup=False)
    for warning in result.warnings:
        warn(warning)
    if result.best is None:
        err_console.print(f"exit 1: {infeasible_message(result)}", markup=False)
        raise typer.Exit(EXIT_MISSED)
    best = ", ".join(f"{k}={v}" for k, v in result.best["overrides"].items())
    console.print(Text.assemble(("best: ", "bold"), f"{best}  ({fleet_answer(result.best)})"))


def runs_text(probes: int, seeds: int) -> str:
    """How many simulations a plan ran, as probes × seeds: "3 runs (3 seed(s) each)" read as nine
    simulations where one probe had run at three seeds."""
    def many(n: int, what: str) -> str:
        return f"{n} {what}{'' if n == 1 else 's'}"
    return f"{probes * seeds} runs ({many(probes, 'probe')} × {many(seeds, 'seed')})"
