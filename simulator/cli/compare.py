"""``llmsim compare A.json B.json``: what changed between two results, side by side.

Read as "from A to B": deltas are B − A, and a move in the bad direction
(a latency or cost up, a throughput or attainment down) is red, a good one
green. The headline figures come first, moved or not (the product's and
the simulated fleet's cost and GPUs, whether it keeps up, TTFT/TPOT/E2EL
percentiles, throughput, request counts, SLO verdicts); the other keys
that moved are counted, and listed with ``--all``, which also shows the
keys that did not move and the machine's wall time. Time series
(``gpu_timeline``, ``monthly_hourly``) are one line each, not a key per point.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Mapping

import typer
from rich.table import Table

from ..errors import LlmsimError, first_few
from ..report.diff import Change, diff, flatten, read_results, worse_direction
from .app import app
from .output import console, fmt, print_json

_TEXT_WIDTH = 14


def _value(v: Any) -> str:
    if v is None:
        return "—"
    if isinstance(v, list):
        return f"list of {len(v)}" if v else "empty list"
    if isinstance(v, Mapping):
        return f"{len(v)}-key object" if v else "empty object"
    if isinstance(v, bool):
        return "true" if v else "false"
    return fmt(v) if isinstance(v, float) else f"{v:,}" if isinstance(v, int) else str(v)


def _style(c: Change) -> str:
    return "" if c.worse is None else "red" if c.worse else "green"


def _rel(c: Change) -> str:
    """+12.3%, or ×25 once a value has grown tenfold (a percentage in the
    thousands reads as noise)."""
    if c.rel is None or not math.isfinite(c.rel):
        return "not a number" if _figure_beside_block(c) else "—"
    if c.rel >= 9:
        return f"×{1 + c.rel:,.0f}"
    return f"{100 * c.rel:+.1f}%"


def _figure_beside_block(c: Change) -> bool:
    """A number in one file where the other holds a list or an object: the
    two are not compared, and the block is not a figure that went missing."""
    def block(v: Any) -> bool:
        return isinstance(v, (list, Mapping))

    def number(v: Any) -> bool:
        return isinstance(v, (int, float)) and not isinstance(v, bool)

    return block(c.a) and number(c.b) or number(c.a) and block(c.b)


#: The answer two runs are compared for, in this order (keys absent from both are left out).
HEADLINE = (
    "llmsim.product.monthly_usd", "llmsim.product.gpus", "llmsim.cost.monthly_usd", "llmsim.gpus",
    "llmsim.gpus_mean", "llmsim.load.overloaded", "llmsim.load.completed_rps", "llmsim.load.offered_rps",
    "median_ttft_ms", "p95_ttft_ms", "p99_ttft_ms", "median_tpot_ms", "p99_tpot_ms", "p99_e2el_ms",
    "request_throughput", "output_throughput", "completed", "failed", "cancelled", "llmsim.cost.usd_per_request",
    "slo.met",
)
#: Lists of points whose every index would be a key.
SERIES = ("llmsim.cost.gpu_timeline", "llmsim.cost.monthly_hourly")


def _headline_keys(changes: list[Change]) -> list[str]:
    keys = {c.key for c in changes}
    verdicts = [k for k in keys if k.startswith("slo.targets.") and k.endswith(".met")
                or k.startswith("llmsim.classes.") and k.endswith(".slo.met")]
    return [k for k in HEADLINE if k in keys] + sorted(verdicts)


def _series(changes: list[Change]) -> list[Change]:
    """One change per time series: moved or not, and how many points it has."""
    out = []
    for s in SERIES:
        mine = [c for c in changes if c.key == s or c.key.startswith(s + ".")]
        if mine:
            moved = any(c.changed for c in mine)
            out.append(Change(s, f"{len([c for c in mine if c.a is not None])} values",
                              f"{len([c for c in mine if c.b is not None])} values", None, None, None)
                       if moved else Change(s, "same", "same", None, None, None))
    return out


def _a_figure(key: str, v: Any) -> bool:
    """Null is llmsim's "not measured"; booleans are verdicts (``slo.met``); an
    empty mapping or list is a block with no entries (no classes, no
    attainments), which the table shows as a block, as it does one with entries."""
    if v is None or isinstance(v, (Mapping, list)) and not v:
        return True
    if isinstance(v, bool):
        return key.rpartition(".")[2] == "met"
    return isinstance(v, (int, float)) and math.isfinite(v)


def read_compared(path: Path) -> dict[str, Any]:
    """A results file whose ranked figures are figures: a string where a
    latency, a cost or a throughput belongs would otherwise show as a change
    "without a direction" and be passed over, never refused. A list or an
    object there is a block (``slo.targets.ttft_p99_ms``), shown as one."""
    data = read_results(path)
    for key, v in flatten(data).items():
        if worse_direction(key) and not _a_figure(key, v):
            verdict = key.rpartition(".")[2] == "met"
            want = "true, false or null (a verdict)" if verdict else "a finite number or null (a figure)"
            raise LlmsimError(f"expected {want}, got {v!r}: compare ranks this key better or worse",
                              source=path, key_path=key)
    return data


def compare_table(a: Path, b: Path, changes: list[Change], title: str = "") -> Table:
    t = Table(title=title or f"A = {a}\nB = {b}", title_justify="left")
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
    ra, rb = read_compared(a), read_compared(b)
    every = diff(ra, rb, include_unchanged=True)
    head = _headline_keys(every)
    if json:
        changes = diff(ra, rb, include_unchanged=all_)
        print_json({"a": str(a), "b": str(b), "headline": head, "changes": [c.as_dict() for c in changes]})
        return
    changes = [c for c in diff(ra, rb, include_unchanged=all_) if not c.key.startswith(SERIES)]
    if not changes and not any(c.changed for c in _series(every)):
        console.print(f"no differences between {a} and {b}" + ("" if all_ else " (besides wall times; see --all)"))
        return
    by_key = {c.key: c for c in every}
    console.print(compare_table(a, b, [by_key[k] for k in head], title=f"A = {a}\nB = {b}\nheadline"))
    rest = [c for c in changes if c.key not in set(head)] + _series(every)
    moved = [c for c in changes if c.changed]
    worse = sum(1 for c in moved if c.worse)
    better = sum(1 for c in moved if c.worse is False)
    if all_:
        console.print(compare_table(a, b, rest, title="every other key"))
    console.print(f"{len(moved)} keys differ: [red]{worse} worse[/], [green]{better} better[/], "
                  f"{len(moved) - worse - better} without a direction"
                  + ("" if all_ else f"; {len([c for c in rest if c.changed])} beyond the headline: --all lists them"))
    unranked = [c.key for c in moved if _figure_beside_block(c)]
    if unranked:
        console.print("not compared, a number in one file and a list or an object in the other: "
                      + first_few(unranked, 6))
