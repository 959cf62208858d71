"""``llmsim run`` and ``llmsim schema``."""
from __future__ import annotations

import json as _json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import List, Optional

import typer

from ..errors import LlmsimError
from ..metrics.results import write_results
from ..metrics.summary import summary_table
from ..metrics.table import write_requests
from ..runner import simulate
from ..scenario.load import load_scenario
from ..scenario.schema import Scenario
from .app import app, err_console
from .output import console, print_json


def _progress_display(enabled: bool):
    if not enabled:
        return None, None
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    prog = Progress(TextColumn("[bold]simulating"), BarColumn(), TextColumn("{task.fields[sim]}"),
                    TextColumn("{task.completed:,.0f}/{task.total:,.0f} requests"), TimeElapsedColumn(),
                    console=err_console, transient=True)
    task = prog.add_task("run", total=1, sim="t=0s")

    def update(now: float, done: int, total: int) -> None:
        prog.update(task, completed=done, total=total, sim=f"t={now:,.1f}s")

    return prog, update


def _write_outputs(out_dir: Path, results: dict, requests) -> None:
    """Write into a temporary sibling folder, then move into place, so a
    failure never leaves a half-written result folder behind."""
    out_dir = out_dir.resolve()
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".llmsim-", dir=out_dir.parent))
    try:
        write_results(results, tmp / "results.json")
        write_requests(requests, tmp / "requests")
        out_dir.mkdir(exist_ok=True)
        for f in tmp.iterdir():
            os.replace(f, out_dir / f.name)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


@app.command("run")
def run(scenario: str = typer.Argument(..., help="scenario YAML (or a built-in scenario name)"),
        output: Optional[Path] = typer.Option(None, "-o", "--output", help="write results.json and the per-request table here"),
        json: bool = typer.Option(False, "--json", help="print results.json to stdout instead of tables"),
        set_: List[str] = typer.Option([], "--set", help="override a key: pools.main.replicas=4 (repeatable)"),
        engine: str = typer.Option("fast", "--engine", help="fast (default) or reference (per-iteration oracle, slow)"),
        ) -> None:
    """Replay a scenario's traffic through its fleet and report latency percentiles."""
    if engine not in ("fast", "reference"):
        raise LlmsimError(f"--engine must be fast or reference (got {engine!r})")
    sc, path = load_scenario(scenario, set_)
    if output is not None and output.exists() and not output.is_dir():
        raise LlmsimError("exists and is not a folder; -o names the folder results are written to",
                          source=output)
    show = not json and sys.stderr.isatty()
    prog, update = _progress_display(show)
    if prog:
        with prog:
            out = simulate(sc, engine=engine, source=path, progress=update)
    else:
        out = simulate(sc, engine=engine, source=path)
    if output is not None:
        _write_outputs(output, out.results, out.requests)
    if json:
        print_json(out.results)
        return
    console.print(summary_table(out.results))
    cal = out.results["llmsim"]["calibration"]
    if not cal["calibrated"]:
        console.print(f"[yellow]note:[/] {cal['gpu']} cost model is {cal['status']}, not fitted to its own measurements")
    if output is not None:
        console.print(f"wrote {output}/results.json and the per-request table")


@app.command("schema")
def schema() -> None:
    """Print the JSON Schema of scenario files."""
    print(_json.dumps(Scenario.model_json_schema(), indent=2))
