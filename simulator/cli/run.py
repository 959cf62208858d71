"""``llmsim run`` and ``llmsim schema``."""
from __future__ import annotations

import json as _json
from pathlib import Path
from typing import TYPE_CHECKING, List, Optional

import typer
from rich.markup import escape

from ..errors import LlmsimError
from .app import app, checked_engine, err_console, warn
from .ladder import run_ladder
from .output import console, print_json, provenance_notes
from .progress import simulate_shown
from .rundir import output_folder, output_path, write_run_files
from .examples import epilog
from workloads.traces import copies_in_step, seeds_alike
from .options import (Address, ConnectTimeout, ExecutorName, Workers, check_connect_timeout, one_value_per_key,
                    open_executor)

if TYPE_CHECKING:   # scenarios and the runner on first use: `llmsim --help` imports this module
    from ..runner import RunOutput


def _plots_wanted(plots: Optional[bool], output: Optional[Path]) -> bool:
    """Plots go into the -o folder: drawn by default there, nowhere without one."""
    if plots and output is None:
        raise LlmsimError("--plots writes PNG files into the results folder: give -o DIR as well")
    return output is not None if plots is None else plots


#: The flags of the executor that ``--replicates N`` (N > 1) and ``--shards`` open, by parameter name.
_EXECUTOR_FLAGS = {"executor": "--executor", "workers": "--workers", "address": "--address",
                   "connect_timeout": "--connect-timeout"}


def _refuse_executor_flags(ctx: typer.Context, ladder: bool) -> None:
    """One seed without shards, or a ladder, simulates in this process and
    opens no executor: its flags would be ignored, and whoever asked for a
    cluster (--address) would not learn that the run never went there."""
    sources = {name: ctx.get_parameter_source(name) for name in _EXECUTOR_FLAGS}
    # By name: typer carries its own copy of click, whose ParameterSource is not click's.
    given = [flag for name, flag in _EXECUTOR_FLAGS.items() if getattr(sources[name], "name", "DEFAULT") != "DEFAULT"]
    if given and ladder:      # --replicates and --shards are refused beside --ladder
        raise LlmsimError("--ladder runs its steps one after another in this process and opens no executor, so "
                          "this flag would be ignored; drop it", key_path=given[0])
    if given:
        raise LlmsimError("one seed without --shards runs in this process and opens no executor, so this flag "
                          "would be ignored; it needs --replicates N (N > 1) or --shards N", key_path=given[0])


@app.command("run", epilog=epilog("run"))
def run(ctx: typer.Context,
        scenario: str = typer.Argument(..., help="scenario YAML (or a built-in scenario name)"),
        output_: Optional[str] = typer.Option(None, "-o", "--output",
                                              help="write results.json, the per-request table and plots into "
                                                   "this folder (new or empty, or see --overwrite)"),
        overwrite: bool = typer.Option(False, "--overwrite",
                                       help="replace the contents of a -o folder that holds an earlier run"),
        json: bool = typer.Option(False, "--json", help="print results.json to stdout instead of tables"),
        set_: List[str] = typer.Option([], "--set", help="override a key: pools.main.replicas=4 (repeatable)",
                                       callback=one_value_per_key),
        engine: str = typer.Option("fast", "--engine", help="fast (default) or reference (per-iteration oracle, slow)"),
        variant: List[str] = typer.Option([], "--variant",
                                          help="apply the scenario's variant of this name (repeatable, in order)"),
        ladder: bool = typer.Option(False, "--ladder",
                                    help="run the baseline and each variant step; one row per step"),
        plots: Optional[bool] = typer.Option(None, "--plots/--no-plots",
                                             help="draw report.html and PNG plots into -o DIR (default: on with -o)"),
        shards: Optional[int] = typer.Option(None, "--shards",
                                             help="split the fleet into N independent shards (sessions hashed, "
                                                  "replicas divided), run them in parallel and merge the records"),
        replicates: int = typer.Option(1, "--replicates",
                                       help="run N seeds (seed, seed+1, ...) on the executor and report each "
                                            "figure's spread; files and plots are the first seed's"),
        confidence: float = typer.Option(0.9, "--confidence",
                                         help="confidence of the intervals in results.json (llmsim.intervals) "
                                              "and of a ladder's SLO bounds"),
        executor: ExecutorName = "local", workers: Workers = None, address: Address = None,
        connect_timeout: ConnectTimeout = 10.0,
        exit_zero: bool = typer.Option(False, "--exit-zero",
                                       help="exit 0 even when the SLO is missed, the fleet is overloaded or its "
                                            "load cannot be judged"),
        ) -> None:
    """Replay a scenario's traffic through its fleet and report latency percentiles.

    Exit code 1 when an SLO the scenario declares is missed, the fleet is
    overloaded or its load cannot be judged (nothing finished within the window;
    the rule of llmsim check; --exit-zero turns it off), 2 for bad input."""
    from ..metrics.intervals import check_confidence
    from ..planning.executors.base import ExecutorOptions, check_executor
    from ..replicates import check_replicates
    from ..report.intervals import annotate, shipped_model
    from ..scenario.load import load_scenario, resolve_scenario
    from ..scenario.overlays import blamed_on, load_with_variants, overlaid, variant_overlays
    from ..scenario.overrides import given_sets, refuse_overlaps
    from ..scenario.variants import select_variants

    checked_engine(engine)
    check_replicates(replicates)
    check_confidence(confidence)
    check_connect_timeout(connect_timeout)     # also when no executor is opened: never read as given otherwise
    check_executor(executor, ExecutorOptions(workers=workers))
    if replicates > 1 and (shards is not None or ladder):
        raise LlmsimError(f"--replicates runs one fleet at several seeds; drop {'--shards' if shards else '--ladder'} "
                          "(or drop --replicates)")
    if shards is not None and ladder:
        raise LlmsimError("--shards runs one fleet; drop --ladder (or drop --shards)")
    if ladder and variant:
        raise LlmsimError("--ladder runs every variant step by itself; drop --variant (or drop --ladder)")
    if replicates == 1 and shards is None:
        _refuse_executor_flags(ctx, ladder)
    output = output_path(output_)
    draw = _plots_wanted(plots, output)
    if overwrite and output is None:     # read by the -o folder alone: without one it would be ignored
        raise LlmsimError("--overwrite replaces the contents of the results folder: give -o DIR as well")
    # With --variant, the --set overrides go on after the variants (a variant may add the pool a --set
    # addresses), so the file is read here without them.
    if set_ and not variant:
        file = resolve_scenario(scenario)
        refuse_overlaps(given_sets(set_), overlaid(file), source=file)      # pools.0 is pools.NAME
    sc, path = load_scenario(scenario, [] if variant else set_)
    if ladder:
        run_ladder(sc, path, set_, engine, output, plots=draw, json=json, confidence=confidence, overwrite=overwrite)
        return
    chosen = select_variants(sc.variants, variant, path)
    if chosen:
        sc = load_with_variants(path, chosen, set_)
    in_step = copies_in_step(sc.workload.arrival)
    if in_step:
        warn(in_step)
    with output_folder(output, overwrite=overwrite, inputs=[path]) as stage:
        with blamed_on(path, variant_overlays(chosen), set_):
            if replicates > 1:
                alike = seeds_alike(sc.workload.arrival, replicates)
                if alike:
                    warn(alike)
                with open_executor(executor, workers, address, connect_timeout) as ex:
                    out, reps = _replicated(sc, replicates, ex, path, engine)
            elif shards is None:
                out = simulate_shown(sc, engine, path, show=False if json else None)
            else:
                from ..sharding import run_sharded

                with open_executor(executor, workers, address, connect_timeout) as ex:
                    out = run_sharded(sc, shards, source=path, engine=engine, executor=ex)
        model, model_note = shipped_model()
        annotate(out.results, sc, reps if replicates > 1 else [out.results], confidence, model)
        if stage is not None:
            write_run_files(stage, out, plots=draw)
    if json:
        print_json(out.results)
        _exit_on_verdict(out.results, exit_zero)
        return
    _print_run(out.results, model_note)
    if shards is not None:
        _print_shards(out.results["llmsim"]["shards"])
    cal = out.results["llmsim"]["calibration"]
    for note in provenance_notes({cal["gpu"]: cal, **cal.get("other_gpus", {})}):
        console.print(f"[yellow]note:[/] {escape(note)}")
    if output is not None:
        console.print(f"wrote {output}/results.json, run.json, scenario.yaml, the per-request table"
                      f"{', report.html and plots' if draw else ''}", markup=False)
    _exit_on_verdict(out.results, exit_zero)


def _exit_on_verdict(results: dict, exit_zero: bool) -> None:
    """A missed SLO, an overloaded fleet or a load that cannot be judged ends in exit code 1, as in
    ``llmsim check`` (:func:`~simulator.metrics.verdict.failures`)."""
    from ..metrics.verdict import EXIT_MISSED, failures

    why = failures(results)
    if why and not exit_zero:
        err_console.print("exit 1: " + "; ".join(why), markup=False)
        raise typer.Exit(EXIT_MISSED)


def _replicated(sc, n: int, ex, path: Path, engine: str) -> tuple[RunOutput, list[dict]]:
    """The first seed's run (its files) and every seed's results."""
    from ..metrics.records import Records
    from ..replicates import run_replicates
    from ..runner import RunOutput

    outs = run_replicates(sc, n, ex, source=path, engine=engine)
    first = outs[0]
    return (RunOutput(sc, Records(first.columns), None, first.results, timeline=first.timeline, timing=first.timing),
            [o.results for o in outs])


def _print_run(results: dict, model_note: Optional[str]) -> None:
    """The run's tables; with replicates, which seed they are, then the spread over the seeds."""
    from ..report.intervals import intervals_table, replicates_note, replicates_table, widened_notes
    from ..report.summary import summary_table

    note = replicates_note(results)
    if note:
        console.print(note, markup=False)
    console.print(summary_table(results))
    for table in (replicates_table(results), intervals_table(results)):
        if table is not None:
            console.print(table)
    for line in ([f"no error model, so intervals are the replicates' spread alone: {model_note}"] if model_note
                 else widened_notes(results)):
        console.print(f"[yellow]note:[/] {line}")


def _print_shards(info: dict) -> None:
    per = ", ".join(f"{pool} {'/'.join(map(str, n))}" for pool, n in info["replicas_per_shard"].items())
    console.print(f"{info['count']} shard(s), replicas per shard: {per}; requests per shard: "
                  f"{', '.join(f'{n:,}' for n in info['requests_per_shard'])}")
    if not info["even"]:
        console.print("[yellow]note:[/] replicas do not divide evenly: the first shards have one more replica "
                      "and the same share of the sessions, so they are less loaded than the rest")
    console.print(f"sharding is {info['exact']}")


@app.command("schema")
def schema() -> None:
    """Print the JSON Schema of scenario files."""
    from ..scenario.schema import Scenario

    print(_json.dumps(Scenario.model_json_schema(), indent=2))
