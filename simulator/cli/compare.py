"""``llmsim compare A B``: what changed between two results, side by side.

Read as "from A to B": deltas are B − A, and a move in the bad direction
(a latency, a cost or the power drawn up, a throughput or attainment
down) is red, a good one green. A and B are results.json files or the run
folders holding them. Before the figures: a warning when A and B ran
different scenarios (or a folder's scenario.yaml is another scenario's
than its results.json), and, when both folders hold the scenario as run
(scenario.yaml), the inputs that differ, so that a move can be read
against its cause. A key only one file holds (an llmsim run beside a
``vllm bench serve`` result shares a few keys) has not moved either way:
it is shown as only in A or only in B and counted apart. The headline
figures come next, moved or not (the
product's and the simulated fleet's cost and GPUs, whether it keeps up,
TTFT/TPOT/E2EL percentiles, throughput, request counts, SLO verdicts);
the other keys that moved are counted, and listed with ``--all``, which
also shows the keys that did not move and the machine's wall time. A move
smaller than ``--min-change`` (by default one that shows as 0.0 %) counts
as none: two runs of a change that does nothing differ by such moves, and
calling them worse sends the reader after noise. Time series
(``gpu_timeline``, ``monthly_hourly``) are one line each, not a key per point.
"""
from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any, Mapping, Optional

import typer
from rich.table import Table
from rich.text import Text

from ..errors import LlmsimError, first_few
from ..report.diff import NOISE_KEYS, Change, diff, flatten, is_verdict, misshapen, ranked_refusal, read_results, \
    worse_direction
from .app import app, warn
from .output import console, fmt, print_json
from .examples import epilog

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


def _only_in(c: Change) -> str:
    """The change column of a key one file lacks: not a move either way."""
    return f"only in {c.only_in.upper()}" if c.only_in else ""


def _rel(c: Change) -> str:
    """+12.3%, or ×25 once a value has grown tenfold (a percentage in the
    thousands reads as noise). A move too small for one decimal reads
    "0.0%" when it counts as none, and gets the digits that show it when
    ``--min-change`` lets it count: never a "-0.0% worse"."""
    if c.rel is None and c.delta == 0:
        return "0.0%"       # 0 then 0: unchanged, as any figure that did not move reads
    if c.rel is None or not math.isfinite(c.rel):
        return "not a number" if _figure_beside_block(c) else "—"
    if c.rel >= 9:
        return f"×{1 + c.rel:,.0f}"
    shown = f"{100 * c.rel:+.1f}%"
    if shown in ("+0.0%", "-0.0%"):
        return f"{100 * c.rel:+.2g}%" if c.changed else "0.0%"
    return shown


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
    "llmsim.slo_met", "slo.met",
)
#: Lists of points whose every index would be a key.
SERIES = ("llmsim.cost.gpu_timeline", "llmsim.cost.monthly_hourly")


def _headline_keys(changes: list[Change]) -> list[str]:
    keys = {c.key for c in changes}
    verdicts = [k for k in keys if k.startswith("slo.targets.") and k.endswith(".met")
                or k.startswith(("llmsim.classes.", "llmsim.by_input_length.")) and k.endswith(".slo.met")]
    return [k for k in HEADLINE if k in keys] + sorted(verdicts)


def _series(changes: list[Change]) -> list[Change]:
    """One change per time series: moved or not, and how many points it has."""
    out = []
    for s in SERIES:
        mine = [c for c in changes if c.key == s or c.key.startswith(s + ".")]
        if mine:
            moved = any(c.changed for c in mine)
            sides = {c.only_in for c in mine}
            if len(sides) == 1 and None not in sides:     # one file holds the series, the other none of it
                side = sides.pop()
                n = f"{len(mine)} values"
                out.append(Change(s, n if side == "a" else None, n if side == "b" else None, None, None, None,
                                  only_in=side))
                continue
            out.append(Change(s, f"{len([c for c in mine if c.a is not None])} values",
                              f"{len([c for c in mine if c.b is not None])} values", None, None, None)
                       if moved else Change(s, "same", "same", None, None, None))
    return out


def _a_figure(key: str, v: Any) -> bool:
    """Null is llmsim's "not measured"; booleans are verdicts (``slo.met``,
    ``llmsim.load.overloaded``); an empty mapping or list is a block with no
    entries (no classes, no attainments), which the table shows as a block,
    as it does one with entries."""
    if v is None or isinstance(v, (Mapping, list)) and not v:
        return True
    if isinstance(v, bool):
        return is_verdict(key)
    return isinstance(v, (int, float)) and math.isfinite(v)


def results_file(path: Path) -> Path:
    """The results.json a path names: the file itself, or the one in a run
    folder (what ``llmsim run -o`` and each ladder step write), as ``llmsim
    report`` takes the folder."""
    if not path.exists() and path.suffix.lower() != ".json":    # a missing .json: "file not found", on reading
        raise LlmsimError("no such file or folder; expected a run folder (`llmsim run -o DIR`) or a results.json "
                          "file", source=path)
    from ..report.run_folder import folder_kinds

    if not path.is_dir():
        # the file a plan's, sweep's or ladder's folder is known by read "no 'completed' key": said as its folder is
        kind = {name: k for k, name in folder_kinds(path.parent).items()}.get(path.name)
        if kind in _ALSO_HELD:
            raise LlmsimError(_fleets_folder(path.parent, kind, path.name, named_file=True), source=path)
        if kind == "ladder":
            raise LlmsimError("a ladder's ladder.json (its steps' table); name one of its steps' folders or their "
                              "results.json", source=path)
        return path
    if (path / "results.json").is_file():
        return path / "results.json"
    kinds = folder_kinds(path)
    ladder = " (a ladder's folder: name one of its steps' folders)" if "ladder" in kinds else ""
    kind = next((k for k in _ALSO_HELD if k in kinds), None)
    if kind is not None:
        raise LlmsimError(_fleets_folder(path, kind, kinds[kind]), source=path)
    raise LlmsimError(f"a folder without results.json{ladder}; expected a run folder (`llmsim run -o DIR`) "
                      "or a results.json file", source=path)


#: What a plan's or a sweep's folder holds beside the file that marks it (report.run_folder.FOLDER_KINDS).
_ALSO_HELD = {"plan": ("pareto.png", "report.html", "points/"), "sweep": ("report.html", "points/")}


def _fleets_folder(path: Path, kind: str, marker: str, named_file: bool = False) -> str:
    """Why a plan's or a sweep's folder (or, ``named_file``, the file it is known by) is no run to compare:
    it holds a row of figures per fleet it simulated, not any fleet's results.json; said with what it holds
    and what to give instead (it read "a folder without results.json", as if the run had failed)."""
    held = [marker, *(n for n in _ALSO_HELD[kind] if (path / n.rstrip("/")).exists())]
    what = (f"a {kind}'s {marker} (a row of figures for each fleet the {kind} simulated, no run's results)"
            if named_file else f"a {kind}'s folder (it holds {', '.join(held)}: a row of figures for each fleet "
                               f"the {kind} simulated, no run's results.json)")
    return (f"{what}; compare takes two runs: run the fleets to compare, each with its overrides from {marker} "
            "(`llmsim run SCENARIO --set KEY=VALUE -o DIR`), and give their folders or their results.json")


def read_compared(path: Path) -> dict[str, Any]:
    """A results file whose ranked figures are figures: a string where a
    latency, a cost or a throughput belongs would otherwise show as a change
    "without a direction" and be passed over, never refused. A list or an
    object where a declaration says one figure is refused as text is, and
    so is a declared block that is not one (``"llmsim": [1]``), whose
    figures would all read as missing. Where only a key's name suggests a
    figure (no declaration names it: a foreign tool's key), a list or an
    object there is shown as the block it is, not compared."""
    data = read_results(path)
    wrong = misshapen(data)
    if wrong is not None:
        raise LlmsimError(wrong[1], source=path, key_path=wrong[0])
    for key, v in flatten(data).items():
        if worse_direction(key) and not _a_figure(key, v):
            raise LlmsimError(ranked_refusal(key, repr(v)), source=path, key_path=key)
    return data


def compare_table(a: Path, b: Path, changes: list[Change], title: str = "") -> Table:
    """A, B, B − A and the change per key; paths, keys and values as text (a
    pool named ``[red]`` is a name, not markup)."""
    t = Table(title=Text(title or f"A = {a}\nB = {b}"), title_justify="left")
    t.add_column("key", style="bold", overflow="fold")
    for name in ("A", "B"):     # text values (a monthly basis, a note) are cut, numbers never are this long
        t.add_column(name, justify="right", max_width=_TEXT_WIDTH, no_wrap=True, overflow="ellipsis")
    t.add_column("B − A", justify="right", no_wrap=True)
    t.add_column("change", justify="right", no_wrap=True)
    for c in changes:
        if c.only_in:       # the other file has no such key: nothing to subtract, no direction
            t.add_row(Text(c.key), Text(_value(c.a) if c.only_in == "a" else ""),
                      Text(_value(c.b) if c.only_in == "b" else ""), "", _only_in(c))
            continue
        style = _style(c)
        mark = {True: " worse", False: " better"}.get(c.worse, "")
        delta = "—" if c.delta is None else fmt(c.delta)       # none for a verdict (diff.change)
        if isinstance(c.a, bool) or isinstance(c.b, bool):      # a verdict turns, it does not move by −100 %
            change = (mark.strip() or "changed") if c.a != c.b else "same"
        else:
            change = _rel(c) + mark
        t.add_row(Text(c.key), Text(_value(c.a)), Text(_value(c.b)), delta, change, style=style or None)
    return t


#: The default ``--min-change``, in percent: a move that the change column would show as 0.0 %.
MIN_CHANGE_PCT = 0.05
#: Inputs listed before the figures; the JSON holds them all.
_INPUTS_SHOWN = 12
_NOT_SET = object()


def scenario_name(results: Mapping[str, Any]) -> Optional[str]:
    """The scenario a results.json records (``llmsim.scenario``); None for a
    file that records none (``vllm bench serve``'s)."""
    llmsim = results.get("llmsim")
    name = llmsim.get("scenario") if isinstance(llmsim, Mapping) else None
    return name if isinstance(name, str) else None


def scenario_as_run(results_path: Path) -> Optional[dict[str, Any]]:
    """The scenario.yaml ``llmsim run -o`` writes beside results.json (the
    file with its variants and ``--set`` applied), or None where there is none."""
    p = results_path.parent / "scenario.yaml"
    if not p.exists() and not p.is_symlink():
        return None
    from ..profiles.loader import read_structured

    data = read_structured(p, what="scenario file")
    if not isinstance(data, dict):
        raise LlmsimError(f"expected the scenario as run (a mapping of scenario keys, as `llmsim run -o` writes "
                          f"it), got {type(data).__name__}", source=p)
    return data


def _beside(side: str, results_path: Path, name: Optional[str], run: Optional[Mapping[str, Any]]) -> str:
    """A warning when the scenario.yaml beside a results.json is another
    scenario's (a folder whose files were copied in from two runs): the inputs
    listed would be that file's, not the ones the figures ran with."""
    if run is None or name is None or run.get("name") == name:
        return ""
    other = repr(run["name"]) if isinstance(run.get("name"), str) else "no scenario name"
    return (f"{side}'s results.json is a run of scenario {name!r} but the scenario.yaml beside it has {other} "
            f"({results_path.parent / 'scenario.yaml'}): the inputs it lists are not necessarily the ones {side} ran")


def inputs_that_differ(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[tuple[str, Any, Any]]:
    """(key, A's value, B's value) for each scenario key set differently,
    dotted as ``--set`` spells them; a key one file does not set is ``_NOT_SET`` there."""
    fa, fb = flatten(a), flatten(b)
    keys = list(fa) + [k for k in fb if k not in fa]
    return [(k, fa.get(k, _NOT_SET), fb.get(k, _NOT_SET)) for k in keys
            if fa.get(k, _NOT_SET) != fb.get(k, _NOT_SET)]


def _input_value(v: Any) -> str:
    if v is _NOT_SET:
        return "not set"
    text = "null" if v is None else _value(v) if isinstance(v, (bool, int, float)) else " ".join(str(v).split())
    return text if len(text) <= 40 else text[:39] + "…"


def _print_inputs(inputs: list[tuple[str, Any, Any]]) -> None:
    if not inputs:
        console.print("inputs: A's and B's scenario.yaml are the same")
        return
    console.print(f"inputs that differ (scenario.yaml, A → B): {len(inputs)}")
    for k, va, vb in inputs[:_INPUTS_SHOWN]:
        console.print(Text(f"  {k}: {_input_value(va)} → {_input_value(vb)}"))
    if len(inputs) > _INPUTS_SHOWN:
        console.print(f"  and {len(inputs) - _INPUTS_SHOWN} more (--json lists them)")


def _unchanged_moves(every: list[Change]) -> int:
    """Keys that moved by less than --min-change: not counted, but said."""
    return sum(1 for c in every if not c.key.startswith(SERIES) and c.key not in NOISE_KEYS
               and not c.changed and dataclasses.replace(c, min_change=0.0).changed)


@app.command("compare", epilog=epilog("compare"))
def compare(a: Path = typer.Argument(..., help="the first run (A): its folder (llmsim run -o), its results.json, "
                                              "or a vllm bench serve result"),
            b: Path = typer.Argument(..., help="the second run (B), as A"),
            all_: bool = typer.Option(False, "--all", help="also show keys that did not change, and wall times"),
            min_change: float = typer.Option(
                MIN_CHANGE_PCT, "--min-change", metavar="PCT",
                help="a key that moved by less than PCT percent counts as unchanged (the default: a move "
                     "shown as 0.0%); 0 counts every move"),
            json: bool = typer.Option(False, "--json", help="print the differences as JSON"),
            ) -> None:
    """Show how two runs' results differ: A, B, B − A and % change per key, worse moves in red."""
    if not (math.isfinite(min_change) and min_change >= 0):
        raise LlmsimError(f"expected a finite percentage of 0 or more, such as 0.05 (got {min_change!r})",
                          key_path="--min-change")
    a, b = results_file(a), results_file(b)
    ra, rb = read_compared(a), read_compared(b)
    sa, sb = scenario_as_run(a), scenario_as_run(b)
    inputs = inputs_that_differ(sa, sb) if sa is not None and sb is not None else None
    names = scenario_name(ra), scenario_name(rb)
    warnings = []
    if None not in names and names[0] != names[1]:
        warnings.append(f"A is a run of scenario {names[0]!r} and B of {names[1]!r}: the figures below compare "
                        "two workloads, not one change")
    warnings += [w for w in (_beside(side, path, name, run) for side, path, name, run in
                             (("A", a, names[0], sa), ("B", b, names[1], sb))) if w]
    for w in warnings:
        warn(w)
    rel = min_change / 100
    every = diff(ra, rb, include_unchanged=True, min_change=rel)
    # what diff(..., include_unchanged=all_) returns, from the same changes
    listed = every if all_ else [c for c in every if c.changed and c.key not in NOISE_KEYS]
    head = _headline_keys(every)
    if json:
        changes = listed
        print_json({"a": str(a), "b": str(b), "scenarios": {"a": names[0], "b": names[1]}, "warnings": warnings,
                    "inputs": None if inputs is None else [
                        {"key": k, "a": None if va is _NOT_SET else va, "b": None if vb is _NOT_SET else vb}
                        for k, va, vb in inputs],
                    "min_change_pct": min_change, "headline": head,
                    "only_in": {side: sum(1 for c in changes if c.only_in == side) for side in ("a", "b")},
                    "changes": [c.as_dict() for c in changes]})
        return
    if inputs is not None:
        _print_inputs(inputs)
    changes = [c for c in listed if not c.key.startswith(SERIES)]
    small = _unchanged_moves(every)
    below = f"{small} key(s) moved by less than {min_change:g}% and count as unchanged (--min-change)"
    if not changes and not any(c.changed for c in _series(every)):
        console.print(f"no differences between {a} and {b}" + ("" if all_ else " (besides wall times; see --all)"),
                      markup=False)
        if small:
            console.print(below)
        return
    by_key = {c.key: c for c in every}
    console.print(compare_table(a, b, [by_key[k] for k in head], title=f"A = {a}\nB = {b}\nheadline"))
    rest = [c for c in changes if c.key not in set(head)] + _series(every)
    moved = [c for c in changes if c.changed and not c.only_in]
    worse = sum(1 for c in moved if c.worse)
    better = sum(1 for c in moved if c.worse is False)
    alone = [f"{n} only in {side.upper()}" for side in ("a", "b")
             if (n := sum(1 for c in changes + _series(every) if c.only_in == side))]
    if all_:
        console.print(compare_table(a, b, rest, title="every other key"))
    console.print(f"{len(moved)} keys differ: [red]{worse} worse[/], [green]{better} better[/], "
                  f"{len(moved) - worse - better} without a direction"
                  + (f"; {' and '.join(alone)} (one file lacks the key: not compared)" if alone else "")
                  + ("" if all_ else f"; {len([c for c in rest if c.changed])} beyond the headline: --all lists them"))
    if small:
        console.print(below)
    unranked = [c.key for c in moved if _figure_beside_block(c)]
    if unranked:
        console.print("not compared, a number in one file and a list or an object in the other: "
                      + first_few(unranked, 6), markup=False)
