"""``llmsim calibrate``: fit the cost model to measured kernel times.

Fits the measured GPUs, transfers to the others, writes each profile's
``calibration:`` block (unless ``--dry-run``) and prints the error table;
the work itself lives in :mod:`simulator.calibration`.
"""
from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer
from rich.markup import escape

from ..atomic_write import check_writable, write_atomic
from .app import app
from .output import console
from .rundir import refuse_overwriting_input_files
from .examples import epilog


def _inputs(data_dir: Path, gpus: List[str]) -> list[Path]:
    """The files a calibration reads: the kernel tables and datasheets of the
    data folder, and the GPU profiles (built-in and the user's), which it also
    rewrites. ``--report-md`` naming one would replace it with the report."""
    from ..profiles.loader import list_profiles, resolve

    kernels = Path(data_dir).expanduser() / "kernels"
    try:
        tables = [p for p in kernels.iterdir() if p.is_file()] if kernels.is_dir() else []
    except OSError:
        tables = []          # unreadable: the fit says so, naming the folder
    profiles = [resolve("hardware_profiles", n) for n in list_profiles("hardware_profiles")]
    return [Path(data_dir).expanduser() / "hardware_datasheets.csv", *tables, *profiles, *map(Path, gpus)]


@app.command("calibrate", epilog=epilog("calibrate"))
def calibrate(
    data: Optional[Path] = typer.Option(None, "--data", help="shared data folder holding kernels/*.csv "
                                        "(default: shared/data beside the repository, the working directory or one of its parents)"),
    gpu: Optional[List[str]] = typer.Option(None, "--gpu", help="profile to update (repeatable; default: all)"),
    dry_run: bool = typer.Option(False, "--dry-run", help="fit and report, but write no profile"),
    report_md: Optional[Path] = typer.Option(None, "--report-md", help="also write the error tables as markdown"),
    moe_mla: bool = typer.Option(False, "--moe-mla/--no-moe-mla",
                                 help="also refit the MoE expert and MLA kernels of every GPU with rows in kernels/moe.csv.gz, mla.csv.gz "
                                      "(about 25 minutes on two cores; the estimate is printed as it runs); "
                                      "default: keep the profiles' current MoE/MLA parameters"),
    quiet: bool = typer.Option(False, "--quiet", help="no progress lines on stderr"),
) -> None:
    """Fit η's and fixed costs to measured kernel times and update the hardware profiles.

    Under a minute on two cores, each step announced on stderr; --moe-mla adds the slow MoE/MLA refit."""
    if report_md is not None:
        # Before the fit, which takes a minute (25 with --moe-mla): a report it could not write would lose it.
        check_writable(report_md, "--report-md")
    # Imported here: the fit needs scipy.optimize and pandas, which every
    # other command would otherwise pay for at start-up.
    from ..calibration import pipeline
    from ..calibration.data import default_data_dir
    from ..calibration.progress import Progress, Silent
    from ..calibration.report import (ceilings_rich, fp8_rich, fp8_table, kernels_rich, markdown_report, rich_table,
                                      stacks_rich)
    from ..calibration.stacks import MATERIAL

    data_dir = data if data is not None else default_data_dir()
    refuse_overwriting_input_files({"--report-md": report_md}, _inputs(data_dir, gpu or []))   # before the fit
    if not dry_run:
        pipeline.refuse_json(Path(g).expanduser() for g in gpu or [])     # before the fit too
    result = pipeline.run(data_dir, gpu or None, moe_mla=moe_mla, progress=Silent() if quiet else Progress([]))
    if len(result.errors):
        console.print(rich_table(result.errors, "calibrated model vs measured kernels (APE = |model/measured − 1|)"))
        console.print(rich_table(result.slices, "where the misses are"))
        console.print(ceilings_rich(result.ceilings))
    if result.fp8:
        console.print(fp8_rich(fp8_table(result.fp8)))
    if result.stacks:
        console.print(stacks_rich(result.stacks))
    if len(result.kernels):
        console.print(kernels_rich(result.kernels))
    if not len(result.errors):
        console.print("no measured GPU selected: errors exist only for calibrated profiles")
    for name, prof in result.profiles.items():
        c = prof.calibration
        src = f" from {c.transferred_from}" if c.transferred_from else ""
        note = result.notes.get(name)
        console.print(escape(f"{name}: {c.status}{src}" + (f", {note}" if note else "")))
    if dry_run:
        console.print("dry run: no profile written")
    else:
        written = pipeline.write(result)
        console.print(f"wrote {len(written)} profile(s)" + (": " + ", ".join(p.name for p in written) if written
                                                           else " (all unchanged)"))
    if report_md is not None:
        cmd = "llmsim calibrate" + (f" --data {data}" if data is not None else "") + \
            (" --moe-mla" if moe_mla else "") + \
            "".join(f" --gpu {g}" for g in gpu or [])
        text = markdown_report(result.errors, result.slices, result.ceilings, cmd, result.kernels,
                               fp8_table(result.fp8) if result.fp8 else None, result.stacks, MATERIAL,
                               result.stack_errors, result.sustained,
                               {n: g.calibration.gemm.sustained for n, g in result.profiles.items()})
        write_atomic(report_md, lambda tmp: tmp.write_text(text))
        console.print(f"markdown report: {report_md}")
