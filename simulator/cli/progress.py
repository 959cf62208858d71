"""Simulating with a progress bar on stderr when a person is watching.

``run``, each ladder step and ``check`` all simulate the same way; the bar
is drawn only on a terminal, never into a pipe or a CI log.
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

from .app import err_console

if TYPE_CHECKING:   # the runner on first use: every command imports this module, `--help` included
    from ..runner import RunOutput
    from ..scenario.schema import Scenario

__all__ = ["simulate_shown"]


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
