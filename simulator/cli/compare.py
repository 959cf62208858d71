"""``llmsim compare A.json B.json``: what changed between two results, side by side.

Read as "from A to B": deltas are B − A, and a move in the bad direction
(a latency or cost up, a throughput or attainment down) is red, a good one
green. Keys that measure the machine rather than the fleet (wall time) are
left out unless ``--all``, which also shows the keys that did not move.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import typer
from rich.table import Table

from ..report.diff import Change, diff, read_json_object
from .app import app
from .output import console, fmt, print_json

_TEXT_WIDTH = 14


def _value(v: Any) -> str:
    if v is None:
        return "—"
    if isinstance(v, bool):
        return "true" if v else "false"
    return fmt(v) if isinstance(v, float) else f"{v:,}" if isinstance(v, int) else str(v)


def _style(c: Change) -> str:
    return "" if c.worse is None else "red" if c.worse else "green"


def _rel(c: Change) -> str:
    """+12.3%, or ×25 once a value has grown tenfold (a percentage in the
    thousands reads as noise)."""
    if c.rel is None or not math.isfinite(c.rel):
        return "—"
    if c.rel >= 9:
        return f"×{1 + c.rel:,.0f}"
    return f"{100 * c.rel:+.1f}%"


def compare_table(a: Path, b: Path, changes: list[Change]) -> Table:
    t = Table(title=f"A = {a}\nB = {b}", title_justify="left")
    t.add_column("key", style="bold", overflow="fold")
    for name in ("A", "B"):     # text values (a monthly basis, a note) are cut, numbers never are this long
        t.add_column(name, justify="right", max_width=_TEXT_WIDTH, no_wrap=True, overflow="ellipsis")
    t.add_column("B − A", justify="right", no_wrap=True)
    t.add_column("change", justify="right", no_wrap=True)
    for c in changes:
        style = _style(c)
        mark = {True: " worse", False: " better"}.get(c.worse, "")
        delta = "—" if c.delta is None else fmt(c.delta)
        t.add_row(c.key, _value(c.a), _value(c.b), delta, _rel(c) + mark, style=style or None)
    return t


@app.command("compare")
def compare(a: Path = typer.Argument(..., help="results.json of the first run (A)"),
            b: Path = typer.Argument(..., help="results.json of the second run (B)"),
            all_: bool = typer.Option(False, "--all", help="also show keys that did not change, and wall times"),
            json: bool = typer.Option(False, "--json", help="print the differences as JSON"),
            ) -> None:
    """Show how two results.json files differ: A, B, B − A and % change per key."""
    ra, rb = read_json_object(a), read_json_object(b)
    changes = diff(ra, rb, include_unchanged=all_)
    if json:
        print_json({"a": str(a), "b": str(b), "changes": [c.as_dict() for c in changes]})
        return
    if not changes:
        console.print(f"no differences between {a} and {b}" + ("" if all_ else " (besides wall times; see --all)"))
        return
    console.print(compare_table(a, b, changes))
    moved = [c for c in changes if c.changed]
    worse = sum(1 for c in moved if c.worse)
    better = sum(1 for c in moved if c.worse is False)
    console.print(f"{len(moved)} keys differ: [red]{worse} worse[/], [green]{better} better[/], "
                  f"{len(moved) - worse - better} without a direction")
