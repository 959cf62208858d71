"""Progress bars on stderr when a person is watching.

``run``, each ladder step and ``check`` all simulate the same way; ``plan``
and ``sweep`` count their runs. A bar is drawn only on a terminal, never
into a pipe or a CI log.
"""
from __future__ import annotations

import sys
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, Optional

from .app import err_console

if TYPE_CHECKING:   # the runner on first use: every command imports this module, `--help` included
    from ..runner import RunOutput
    from ..scenario.schema import Scenario

__all__ = ["runs_progress", "simulate_shown"]


def simulate_shown(sc: Scenario, engine: str, source: Path | None, *, show: bool | None = None,
                   label: str = "simulating") -> RunOutput:
    """:func:`simulate`, with a bar when ``show`` (default: stderr is a terminal)."""
    from ..runner import simulate

    if show is None:
        show = sys.stderr.isatty()
    if not show:
        return simulate(sc, engine=engine, source=source)
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    prog = Progress(TextColumn(f"[bold]{label}"), BarColumn(), TextColumn("{task.fields[sim]}"),
                    TextColumn("{task.completed:,.0f}/{task.total:,.0f} requests"), TimeElapsedColumn(),
                    console=err_console, transient=True)
    task = prog.add_task("run", total=1, sim="t=0s")

    def update(now: float, done: int, total: int) -> None:
        prog.update(task, completed=done, total=total, sim=f"t={now:,.1f}s")

    with prog:
        return simulate(sc, engine=engine, source=source, progress=update)


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
