"""``llmsim sweep``: every point of a sweep file run into one table."""
from __future__ import annotations

import time
from pathlib import Path
from typing import Optional

import typer

from ..errors import LlmsimError
from .app import app, kept_if_stopped, warn
from .options import Address, ConnectTimeout, ExecutorName, MaxRuns, Sets, Workers, open_executor, parse_sets
from .output import console, product_columns, rows_table
from .progress import runs_progress
from .rundir import output_dir
from .examples import epilog


_SHOWN = ("ttft_p99_ms", "tpot_p99_ms", "e2el_p99_ms", "slo_met", "overloaded", "monthly_usd", "power_monthly_usd",
          "wall_time_s", "error")


def _partial_page(out: Path) -> str:
    """The page of the table a stopped sweep wrote (the page of an earlier sweep into the folder would
    sit beside it, counting other points), or no page: what to add to the kept line."""
    page = out / "report.html"
    try:
        from ..report.page import write_report

        write_report(out)
        return f" and its page {page}"
    except Exception:       # no table yet, or one the page cannot read: no page rather than a stale one
        page.unlink(missing_ok=True)
        return ""


@app.command("sweep", epilog=epilog("sweep"))
def sweep(sweep_file: Path = typer.Argument(..., help="sweep YAML: base, grid and/or points"),
          output: Optional[str] = typer.Option(None, "-o", "--output",
                                               help="results folder (default: ./sweep-<file name>)"),
          executor: ExecutorName = "local", workers: Workers = None, address: Address = None,
          connect_timeout: ConnectTimeout = 10.0, set_: Sets = None, max_runs: MaxRuns = None) -> None:
    """Run every point of a sweep file into one table (resumable: finished points are skipped)."""
    from ..planning.sweep import override_keys, plan_sweep, run_sweep

    points = plan_sweep(sweep_file, parse_sets(set_), max_runs)
    out = output_dir(output, f"sweep-{sweep_file.stem}", ("sweep.parquet", "sweep.csv", "report.html"),
                     [sweep_file], command="sweep")
    wall = time.perf_counter()
    def kept() -> str:
        done = sum((out / "points" / f"{p.key}.json").exists() for p in points)
        page = _partial_page(out)
        verb = "list" if page else "lists"
        return (f"{done} of {len(points)} points finished and kept in {out / 'points'} (the table "
                f"{out / 'sweep.parquet'}{page} {verb} them); rerun the same command to run the rest")

    with kept_if_stopped(kept), open_executor(executor, workers, address, connect_timeout) as ex, \
            runs_progress(len(points), "sweep") as on_row:
        run = run_sweep(points, out, ex, on_row)
        ran = len(run.rows) - run.reused
        used = min(ex.workers, ran) if ran else ex.workers      # never more workers than runs
        where = f"{executor} ({used} worker{'s' if used != 1 else ''})"
    wall = time.perf_counter() - wall
    from ..planning.prices import sweep_pinned_prices
    from ..planning.sweep import few_samples_warning, short_window_warning

    for pinned in sweep_pinned_prices(points):
        warn(pinned["warning"])
    for warning in (few_samples_warning(run.rows, override_keys(points)),
                    short_window_warning(run.rows, override_keys(points))):
        if warning:
            warn(warning)
    keys = override_keys(points)
    # a point that does not keep up says so beside its verdict: without an SLO there is no verdict to carry it
    shown = [c for c in _SHOWN if c != "overloaded" or any(r.get(c) for r in run.rows)]
    console.print(rows_table(f"sweep {sweep_file}", run.rows, [*keys, *product_columns(run.rows), *shown],
                             keep=len(keys), elsewhere=f"a wider terminal shows them; {run.table} holds every "
                                                       "column"))
    if run.rows:
        from ..report.page import write_report

        write_report(out)
    console.print(f"wrote {run.table} and {out / 'report.html'}: {len(run.rows)} rows ({run.reused} reused from "
                  f"{out / 'points'}, {len(run.rows) - run.reused} run on {where}) in {wall:.1f} s", markup=False)
    if run.errors:
        first = run.errors[0]["error"]
        raise LlmsimError(f"{len(run.errors)} of {run.total} points could not run (kept out of the store, rerun "
                          f"after fixing them); first: {first}")
