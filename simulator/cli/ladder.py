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
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from rich.markup import escape
from rich.table import Table
from rich.text import Text

from ..errors import LlmsimError
from ..metrics.product import sliced
from ..metrics.verdict import mark
from ..report.summary_format import usd
from .output import UNBOUNDED, console, fitted_table, print_json
from .progress import simulate_shown
from .rundir import output_folder, write_run_files

if TYPE_CHECKING:   # scenarios and the runner on first use: `llmsim --help` imports this module
    from ..scenario.schema import Scenario
    from ..scenario.variants import Step

__all__ = ["run_ladder", "ladder_table", "ladder_tables"]

_ms2, _count, _whole = "{:,.2f}".format, "{:,}".format, "{:,.0f}".format


def _ms(ms: float) -> str:
    """Tenths of a millisecond only where they are not noise."""
    return f"{ms:,.0f}" if abs(ms) >= 100 else f"{ms:.1f}"


def _per_1k(dollars: float) -> str:
    """Money per 1,000 requests: a cent-scale figure instead of 0.0000718."""
    return usd(dollars * 1000)


# (row key, header, format) of the printed table, most important first.
_MONEY = (
    ("gpus", "GPUs (peak)", _count),
    ("monthly_usd", "$ per month", _whole),
    ("usd_per_request", "$ per 1k completed requests", _per_1k),
    ("completed", "completed", _count),
)
_SPEED = (
    ("ttft_p99_ms", "TTFT p99 (ms)", _ms),
    ("tpot_p99_ms", "TPOT p99 (ms)", _ms2),
    ("ttft_p50_ms", "TTFT p50 (ms)", _ms),
    ("ttft_p95_ms", "TTFT p95 (ms)", _ms),
    ("tpot_p50_ms", "TPOT p50 (ms)", _ms2),
    ("tokens_per_s_per_request", "tok/s per request", _whole),
    ("max_batch_size", "max batch", _count),
)
#: Shown first when the scenario is a slice of a product (``product.slices`` > 1).
_PRODUCT = (
    ("product_gpus", "product GPUs", _count),
    ("product_monthly_usd", "product $ per month", _whole),
)


def _cell(value: Any, fmt: Callable[[Any], str]) -> str:
    return "—" if value is None else fmt(value)


def _columns(rows: Sequence[Mapping[str, Any]]) -> tuple:
    """A slice of a product leads with the product's GPUs and monthly cost."""
    return (_PRODUCT if sliced(rows) else ()) + _MONEY + _SPEED


def ladder_tables(title: str, rows: Sequence[Mapping[str, Any]], width: int) -> list[Table]:
    """The ladder as one table, or stacked as two (GPUs and money, then
    latencies and batching, each with the step and its verdict) when one
    would be wider than ``width``; a table still too wide leaves out its
    least important columns, never cuts a number."""
    whole = ladder_table(title, rows, width=UNBOUNDED)
    if _min_width(whole) <= width:
        return [whole]
    speed = _SPEED
    money = tuple(c for c in _columns(rows) if c not in speed)
    return [ladder_table(title + " — GPUs and cost", rows, money, width=width),
            ladder_table(title + " — latency and batching", rows, speed, counts=False, width=width)]


def _min_width(t: Table) -> int:
    from rich.console import Console
    from rich.measure import Measurement

    probe = Console(width=100_000)
    return Measurement.get(probe, probe.options, t).minimum


def ladder_table(title: str, rows: Sequence[Mapping[str, Any]], columns: tuple = (), *,
                 counts: bool = True, width: int = UNBOUNDED) -> Table:
    """One row per step, its verdict beside its name; headers wrap, values never shrink."""
    columns = columns or _columns(rows)
    # the stranded count only where a step stranded a request (a ladder.json from before it has none)
    unserved = ("rejected", "cancelled", *(("stranded",) if any(r.get("stranded") for r in rows) else ()))
    cells = [[r["step"], mark(r),
              *(_cell(r.get(k), fmt) for k, _, fmt in columns)]
             + ([" / ".join(_cell(r.get(k), _count) for k in unserved)] if counts else []) for r in rows]
    headers = ["step", "SLO", *(h for _, h, _ in columns)] + ([" / ".join(unserved)] if counts else [])
    return fitted_table(title, headers, cells, width, keep=2, left=[0], header=0)   # headers are words: they wrap


def run_ladder(sc: Scenario, path: Path, sets: Sequence[str], engine: str, output: Path | None, *,
               plots: bool, json: bool, confidence: float, overwrite: bool = False) -> None:
    if not sc.variants:
        raise LlmsimError("the scenario declares no variants, so there is no ladder to run; add "
                          "`variants: [{name: ..., set: {key.path: value}}]`", source=path, key_path="variants")
    from ..report.intervals import shipped_model, steps_bounds_lines
    from ..report.ladder import ladder_document, ladder_runs, write_ladder
    from ..runsize import check_run_count
    from ..scenario.variants import ladder_steps

    steps = ladder_steps(sc.variants, sc.ladder)
    check_run_count(len(steps), f"this ladder runs the baseline and {len(sc.variants):,} variant(s)", source=path,
                    key_path="variants", raisable=False)
    rows: list[dict[str, Any]] = []

    def shown(i: int, step: Step, ssc: Scenario):
        return simulate_shown(ssc, engine, path, show=False if json else None,
                              label=f"step {i + 1}/{len(steps)} {step.name}")

    model, model_note = shipped_model()
    with output_folder(output, overwrite=overwrite, inputs=[path]) as tmp:
        for i, (step, out, row) in enumerate(ladder_runs(sc, path, sets, shown, confidence, model)):
            if i == 0:
                baseline_slo = out.results.get("slo")     # the targets the ladder is drawn against
            rows.append(row)
            if tmp is not None:
                write_run_files(tmp / step.name, out, plots=plots)
        if tmp is not None:
            write_ladder(rows, tmp, scenario=sc.name, mode=sc.ladder, confidence=confidence)
            if plots:
                from ..report.plots import write_ladder_plot

                from ..report.page import write_report

                write_ladder_plot(tmp, rows, baseline_slo, title=f"{sc.name}: what-if ladder", mode=sc.ladder)
                write_report(tmp)
    if json:
        print_json(ladder_document(rows, scenario=sc.name, mode=sc.ladder, confidence=confidence))
        return
    for table in ladder_tables(f"{sc.name}: {sc.ladder} ladder ({len(steps)} steps)", rows, console.width):
        console.print(table)
    for line in steps_bounds_lines(rows, confidence):
        console.print(line, markup=False)
    if model_note:
        console.print(f"[yellow]note:[/] no error model, so the bounds are the simulated values: {escape(model_note)}")
    for step in steps[1:]:
        applied = " + ".join(v.name for v in step.variants)
        console.print(Text(f"{step.name}: {step.description or '(no description)'} — baseline + {applied}", "dim"))
    if output is not None:
        console.print(f"wrote {output}/ladder.json, ladder.csv{', ladder.png, report.html' if plots else ''} "
                      f"and each step's results in {output}/<step>/", markup=False)
