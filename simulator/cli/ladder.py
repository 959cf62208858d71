"""``llmsim run S.yaml --ladder``: the baseline and each variant step, one table row each.

Every step's scenario is built and validated against the schema before the
first one runs, so a typo in the last variant fails in a second, not after
an hour of simulating the others (the runner's own checks, such as "the
model fits", still come with each step's run, naming its variants). With ``-o DIR`` each step's results go to
``DIR/<step>/`` as a normal run's would, beside ladder.json/.csv and
ladder.png, all moved into place together at the end.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from rich.table import Table

from ..errors import LlmsimError
from ..report.summary import FAIL, OK, _money
from ..report.ladder import ladder_runs, write_ladder
from ..scenario.schema import Scenario
from ..scenario.variants import Step, ladder_steps
from .output import console, print_json
from .progress import simulate_shown
from .rundir import output_folder, write_run_files

__all__ = ["run_ladder", "ladder_table", "ladder_tables"]

_ms2, _count, _whole = "{:,.2f}".format, "{:,}".format, "{:,.0f}".format


def _ms(ms: float) -> str:
    """Tenths of a millisecond only where they are not noise."""
    return f"{ms:,.0f}" if abs(ms) >= 100 else f"{ms:.1f}"


def _per_1k(usd: float) -> str:
    """Money per 1,000 requests: a cent-scale figure instead of 0.0000718."""
    return _money(usd * 1000)


# (row key, header, format) of the printed table.
_COLUMNS = (
    ("ttft_p50_ms", "TTFT p50\n(ms)", _ms),
    ("ttft_p95_ms", "TTFT p95\n(ms)", _ms),
    ("ttft_p99_ms", "TTFT p99\n(ms)", _ms),
    ("tpot_p50_ms", "TPOT p50\n(ms)", _ms2),
    ("tpot_p99_ms", "TPOT p99\n(ms)", _ms2),
    ("tokens_per_s_per_request", "tok/s per\nrequest", _whole),
    ("max_batch_size", "max\nbatch", _count),
    ("completed", "completed", _count),
    ("gpus", "GPUs\n(peak)", _count),
    ("usd_per_request", "$ per 1k\ncompleted\nrequests", _per_1k),
    ("monthly_usd", "$ per\nmonth", _whole),
)


def _cell(value: Any, fmt: Callable[[Any], str]) -> str:
    return "—" if value is None else fmt(value)


#: Shown first when the scenario is a slice of a product (``product.slices`` > 1).
_PRODUCT = (
    ("product_gpus", "product\nGPUs", _count),
    ("product_monthly_usd", "product\n$ per month", _whole),
)


def _columns(rows: Sequence[Mapping[str, Any]]) -> tuple:
    """A slice of a product leads with the product's GPUs and monthly cost."""
    sliced = any(r.get("product_gpus") not in (None, r.get("gpus")) for r in rows)
    return (_PRODUCT if sliced else ()) + _COLUMNS


def ladder_tables(title: str, rows: Sequence[Mapping[str, Any]], width: int) -> list[Table]:
    """The ladder as one table, or stacked as two (GPUs and money, then
    latencies and batching, each with the step and its verdict) when one
    would be wider than ``width``: a terminal would cut its right edge."""
    whole = ladder_table(title, rows)
    if _min_width(whole) <= width:
        return [whole]
    cols = _columns(rows)
    money = [c for c in cols if not c[0].endswith("_ms") and c[0] not in ("tokens_per_s_per_request",
                                                                           "max_batch_size")]
    speed = [c for c in cols if c not in money]
    return [ladder_table(title + " — GPUs and cost", rows, tuple(money)),
            ladder_table(title + " — latency and batching", rows, tuple(speed), counts=False)]


def _min_width(t: Table) -> int:
    from rich.console import Console
    from rich.measure import Measurement

    probe = Console(width=100_000)
    return Measurement.get(probe, probe.options, t).minimum


def ladder_table(title: str, rows: Sequence[Mapping[str, Any]], columns: tuple = (), *,
                 counts: bool = True) -> Table:
    """One row per step; headers wrap, values never shrink."""
    columns = columns or _columns(rows)
    cells = [[r["step"], *(_cell(r.get(k), fmt) for k, _, fmt in columns)]
             + ([f"{_cell(r['rejected'], _count)} / {_cell(r['cancelled'], _count)}"] if counts else []) for r in rows]
    headers = ["step", *(h for _, h, _ in columns)] + (["rejected /\ncancelled"] if counts else [])   # usually 0 / 0
    t = Table(title=title, title_justify="left")
    for i, header in enumerate(headers):
        t.add_column(header, justify="left" if i == 0 else "right", style="bold" if i == 0 else None,
                     min_width=max(len(c[i]) for c in cells))
        if i == 0:   # the verdict beside the name: a narrow terminal crops the right edge
            t.add_column("SLO", justify="center")
    for r, (step, *rest) in zip(rows, cells):
        t.add_row(step, "—" if r["slo_met"] is None else OK if r["slo_met"] else FAIL, *rest)
    return t


def run_ladder(sc: Scenario, path: Path, sets: Sequence[str], engine: str, output: Path | None, *,
               plots: bool, json: bool, overwrite: bool = False) -> None:
    if not sc.variants:
        raise LlmsimError("the scenario declares no variants, so there is no ladder to run; add "
                          "`variants: [{name: ..., set: {key.path: value}}]`", source=path, key_path="variants")
    steps = ladder_steps(sc.variants, sc.ladder)
    rows: list[dict[str, Any]] = []

    def shown(i: int, step: Step, ssc: Scenario):
        return simulate_shown(ssc, engine, path, show=False if json else None,
                              label=f"step {i + 1}/{len(steps)} {step.name}")

    with output_folder(output, overwrite=overwrite, inputs=[path]) as tmp:
        for i, (step, out, row) in enumerate(ladder_runs(sc, path, sets, shown)):
            if i == 0:
                baseline_slo = out.results.get("slo")     # the targets the ladder is drawn against
            rows.append(row)
            if tmp is not None:
                write_run_files(tmp / step.name, out, plots=plots)
        if tmp is not None:
            write_ladder(rows, tmp, scenario=sc.name, mode=sc.ladder)
            if plots:
                from ..report.plots import write_ladder_plot

                from ..report.page import write_report

                write_ladder_plot(tmp, rows, baseline_slo, title=f"{sc.name}: what-if ladder", mode=sc.ladder)
                write_report(tmp)
    if json:
        print_json({"scenario": sc.name, "ladder": sc.ladder, "steps": rows})
        return
    for table in ladder_tables(f"{sc.name}: {sc.ladder} ladder ({len(steps)} steps)", rows, console.width):
        console.print(table)
    for step in steps[1:]:
        applied = " + ".join(v.name for v in step.variants)
        console.print(f"[dim]{step.name}: {step.description or '(no description)'} — baseline + {applied}[/]")
    if output is not None:
        console.print(f"wrote {output}/ladder.json, ladder.csv{', ladder.png, report.html' if plots else ''} "
                      f"and each step's results in {output}/<step>/")
