"""``llmsim sweep``, and the executor options and progress bar it shares with ``llmsim plan``."""
from __future__ import annotations

import errno
import os
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Iterator, Optional, Sequence

import typer
from rich.table import Table

from ..errors import LlmsimError
from .app import app, err_console, kept_if_stopped
from .output import console, fitted_table, product_columns
from .rundir import os_error, output_path, refuse_overwriting_input_files

if TYPE_CHECKING:   # planning and scenarios on first use: every command imports this module, `--help` included
    from ..planning.executors import Executor

ExecutorName = Annotated[str, typer.Option("--executor", help="where runs go: local (a process pool) or dask")]
Workers = Annotated[Optional[int], typer.Option("--workers", help="local processes (default: one per core)")]
Address = Annotated[Optional[str], typer.Option("--address", help="Dask scheduler address, e.g. tcp://host:8786")]
ConnectTimeout = Annotated[float, typer.Option("--connect-timeout", help="seconds to wait for the Dask scheduler")]
MaxRuns = Annotated[Optional[int], typer.Option("--max-runs", help="allow this many runs (default 1,000: "
                                                                   "a larger sweep or plan is refused)")]


def one_value_per_key(sets: Optional[list[str]]) -> Optional[list[str]]:
    """``--set`` callback: a key given twice is refused, as a key written twice in a scenario file is,
    rather than the last value silently winning (a pasted command line that kept an old value). Here the
    keys compare as written, before any scenario is read; each command compares them again against its
    scenario (``pools.0`` is ``pools.chat``) where it reads it."""
    from ..scenario.overrides import given_sets, refuse_overlaps

    refuse_overlaps(given_sets(sets or ()))
    return sets


Sets = Annotated[Optional[list[str]], typer.Option("--set", help="override a key for every run: "
                                                                  "pools.main.tp=4 (repeatable)",
                                                   callback=one_value_per_key)]


def parse_sets(sets: Optional[Sequence[str]]) -> dict[str, Any]:
    """``--set`` assignments as one overlay, applied in order as ``llmsim run`` applies them."""
    from ..scenario.overrides import parse_assignment
    from ..scenario.variants import merge_overlays

    return merge_overlays([dict([parse_assignment(a)]) for a in sets or ()])


#: Longest wait for a Dask scheduler --connect-timeout accepts (an hour).
MAX_CONNECT_TIMEOUT_S = 3600.0


def check_connect_timeout(seconds: float) -> float:
    """``--connect-timeout`` as given, refused unless a finite wait of up to an hour (nan or inf would wait for
    ever or not at all)."""
    import math

    if not math.isfinite(seconds) or not 0 < seconds <= MAX_CONNECT_TIMEOUT_S:
        raise LlmsimError(f"expected seconds to wait for the Dask scheduler, more than 0 and at most "
                          f"{MAX_CONNECT_TIMEOUT_S:g} (got {seconds!r})", key_path="--connect-timeout")
    return seconds


def open_executor(name: str, workers: Optional[int], address: Optional[str], connect_timeout: float) -> Executor:
    from ..planning.executors import ExecutorOptions, make_executor

    check_connect_timeout(connect_timeout)
    return make_executor(name, ExecutorOptions(workers=workers, address=address, connect_timeout_s=connect_timeout))


def output_dir(given: Optional[str], default: str, writes: Sequence[str] = (),
               inputs: Sequence[str | Path] = ()) -> Path:
    """The results folder of a sweep or plan, checked writable before any
    run but not made until the first point lands (resumable: an earlier
    sweep's points in it are reused). None of the files it ``writes`` there
    may be one of the ``inputs`` (a plan.json scenario in that folder)."""
    out = output_path(given) or Path(default)
    for name in writes:
        refuse_overwriting_input_files({"-o": out / name}, inputs, instead="a results folder")
    try:
        if out.exists() and not out.is_dir():
            raise LlmsimError("exists and is not a folder; -o names the folder results are written to",
                              source=f"-o {out}")
        there = out
        while not there.exists() and there.parent != there:
            there = there.parent
        if not there.is_dir():
            raise OSError(errno.ENOTDIR, os.strerror(errno.ENOTDIR))
        if os.statvfs(there).f_flag & os.ST_RDONLY:
            raise OSError(errno.EROFS, os.strerror(errno.EROFS))
        if not os.access(there, os.W_OK | os.X_OK):
            raise OSError(errno.EACCES, os.strerror(errno.EACCES))
    except OSError as e:
        raise os_error(e, out, "write into the results folder") from None
    return out


@contextmanager
def runs_progress(total: Optional[int], what: str) -> Iterator[Any]:
    """A progress callback for :func:`~simulator.planning.batch.run_points`:
    a bar with time left on a terminal's stderr, nothing otherwise (pipes
    and CI logs stay clean). It counts the runs still to do, not the stored
    ones. ``total`` None: a search, whose count is unknown."""
    if not sys.stderr.isatty():
        yield None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, \
        TimeRemainingColumn

    columns = [TextColumn(f"[bold]{what}"), BarColumn(), MofNCompleteColumn(), TextColumn("runs"),
               TimeElapsedColumn()]
    if total is not None:
        columns += [TextColumn("left"), TimeRemainingColumn()]
    with Progress(*columns, console=err_console, transient=True) as prog:
        task = prog.add_task(what, total=total)

        def on_row(point, row, reused: bool) -> None:
            # A stored point costs nothing: counting it would make the time left a guess from instant runs.
            if reused and total is not None:
                prog.update(task, total=prog.tasks[0].total - 1)
            elif not reused:
                prog.advance(task)

        yield on_row


def rows_table(title: str, rows: Sequence[dict[str, Any]], columns: Sequence[str], limit: int = 40,
               width: int = 60, keep: int = 1) -> Table:
    """Rows as a table (:func:`~simulator.cli.output.fitted_table`: numbers
    never cut, the rightmost columns left out where a terminal is too narrow,
    never the first ``keep``); long text cut to ``width`` (the files written
    beside it hold the full text). A column no row has a value for is left out."""
    shown = [k for k in columns if any(r.get(k) is not None for r in rows)]
    cells = [[(v if len(v) <= width else v[: width - 1] + "…") if isinstance(v := r.get(k), str) else v
              for k in shown] for r in rows[:limit]]
    return fitted_table(title, shown, cells, keep=max(1, min(keep, len(shown))),
                        caption=f"first {limit} of {len(rows)} rows" if len(rows) > limit else None)


_SHOWN = ("ttft_p99_ms", "tpot_p99_ms", "e2el_p99_ms", "slo_met", "monthly_usd", "wall_time_s", "error")


@app.command("sweep")
def sweep(sweep_file: Path = typer.Argument(..., help="sweep YAML: base, grid and/or points"),
          output: Optional[str] = typer.Option(None, "-o", "--output",
                                               help="results folder (default: ./sweep-<file name>)"),
          executor: ExecutorName = "local", workers: Workers = None, address: Address = None,
          connect_timeout: ConnectTimeout = 10.0, set_: Sets = None, max_runs: MaxRuns = None) -> None:
    """Run every point of a sweep file into one table (resumable: finished points are skipped)."""
    from ..planning.sweep import override_keys, plan_sweep, run_sweep

    points = plan_sweep(sweep_file, parse_sets(set_), max_runs)
    out = output_dir(output, f"sweep-{sweep_file.stem}", ("sweep.parquet", "sweep.csv", "report.html"),
                     [sweep_file])
    wall = time.perf_counter()
    def kept() -> str:
        done = sum((out / "points" / f"{p.key}.json").exists() for p in points)
        return (f"{done} of {len(points)} points finished and kept in {out / 'points'} (the table "
                f"{out / 'sweep.parquet'} lists them); rerun the same command to run the rest")

    with kept_if_stopped(kept), open_executor(executor, workers, address, connect_timeout) as ex, \
            runs_progress(len(points), "sweep") as on_row:
        run = run_sweep(points, out, ex, on_row)
        ran = len(run.rows) - run.reused
        used = min(ex.workers, ran) if ran else ex.workers      # never more workers than runs
        where = f"{executor} ({used} worker{'s' if used != 1 else ''})"
    wall = time.perf_counter() - wall
    keys = override_keys(points)
    console.print(rows_table(f"sweep {sweep_file}", run.rows, [*keys, *product_columns(run.rows), *_SHOWN],
                             keep=len(keys)))
    if run.rows:
        from ..report.page import write_report

        write_report(out)
    console.print(f"wrote {run.table} and {out / 'report.html'}: {len(run.rows)} rows ({run.reused} reused from "
                  f"{out / 'points'}, {len(run.rows) - run.reused} run on {where}) in {wall:.1f} s", markup=False)
    if run.errors:
        first = run.errors[0]["error"]
        raise LlmsimError(f"{len(run.errors)} of {run.total} points could not run (kept out of the store, rerun "
                          f"after fixing them); first: {first}")
