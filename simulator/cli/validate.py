"""``llmsim validate``: replay measured serving benchmarks, report the error, fit a stack's overheads.

Takes a CSV in the shared data's serving-results layout or AIConfigurator's
silicon_sample.csv layout, or ``vllm bench
serve`` result JSON files with the configuration given on the command line;
prints measured against predicted with signed errors and the median/p90 per
metric and stack. ``--fit`` fits the stack's overheads to the rows and
writes a backend profile the user can name in scenarios
(``engine.backend: path/to/profile.yaml``); the work lives in
:mod:`simulator.validation`.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable, List, Optional

import typer
import yaml

from ..atomic_write import check_writable, write_atomic
from ..errors import LlmsimError, first_few
from ..reads import recorded_reads
from .app import app, err_console
from .output import console, print_json
from .rundir import refuse_overwriting_input_files
from .examples import epilog
from .options import check_cuda_graph_gib, cuda_graph_gib_option


def _load_rows(inputs: List[Path], backend: Optional[str], model: Optional[str], gpu: Optional[str], tp: int,
               weight_dtype: Optional[str], kv_dtype: str, model_configs: Optional[Path] = None, version: str = ""):
    from ..validation.rows import rows_from_bench_json, rows_from_csv

    csvs = [p for p in inputs if p.suffix.lower() in (".csv", ".gz")]
    jsons = [p for p in inputs if p.suffix.lower() == ".json"]
    other = [p for p in inputs if p not in csvs and p not in jsons]
    if other:
        raise LlmsimError("expected a .csv of serving results or `vllm bench serve` .json results", source=other[0])
    rows = []
    if gpu is not None:
        _check_gpu(gpu)       # a typo is the flag's, whatever the rows
    for p in csvs:
        rows += rows_from_csv(p, model, gpu, model_configs)
    if jsons:
        missing = [f for f, v in (("--backend", backend), ("--model", model), ("--gpu", gpu)) if v is None]
        if missing:
            raise LlmsimError(f"a `vllm bench serve` result does not record its configuration: give "
                              f"{', '.join(missing)}", source=jsons[0])
        rows += rows_from_bench_json(jsons, _stack_of(backend), model, gpu, tp, weight_dtype, kv_dtype, version)
    return rows


def _stack_of(backend: str) -> str:
    """The stack a JSON result's ``--backend`` names: a stack's name, or a backend profile file (one
    ``--fit`` wrote), whose ``stack`` served the rows while the profile's own figures replay them."""
    from ..profiles.backend import backend_names, load_backend, serving_stacks

    if backend in backend_names():
        return backend
    try:
        profile = load_backend(backend)
    except LlmsimError as e:        # a fault inside the file names its key; a name that is no file, the flag
        raise LlmsimError(e.message, source=e.source, key_path=e.key_path or "--backend") from None
    if profile.stack not in serving_stacks():
        raise LlmsimError(f"unknown stack {profile.stack!r}; expected one of {', '.join(serving_stacks())}",
                          source=backend, key_path="stack")
    return profile.stack


def _check_gpu(gpu: str) -> None:
    """``--gpu`` refused as the flag's fault (it was blamed on the measured file)."""
    from ..profiles import load_hardware

    try:
        load_hardware(gpu)
    except LlmsimError as e:
        raise LlmsimError(e.message, source=e.source, key_path=e.key_path or "--gpu") from None


def _named_inputs(inputs: List[Path], profiles: Iterable[Optional[str]],
                  model_configs: Optional[Path]) -> list[Path]:
    """The files the command line names as inputs, read or not: the results,
    ``--backend``/``--model``/``--gpu`` where they are paths rather than
    built-in names, and the model configs folder's files. ``--csv`` or
    ``--fit`` naming one would replace it with this run's output."""
    named = [*inputs, *(Path(p) for p in profiles if p is not None)]
    if model_configs is not None and model_configs.is_dir():
        named += [p for p in model_configs.iterdir() if p.is_file()]
    return named


def _profile_files(rows, backend: Optional[str]) -> list[Path]:
    """The profile files the replay reads, the built-in ones too (a name such
    as ``llama-3.2-1b`` is a file of the installation): each row's model, GPU
    and stack, and ``--backend``, as the profile loader resolves them."""
    from ..profiles.loader import resolve

    wanted = {("model_profiles", r.model) for r in rows} | {("hardware_profiles", r.gpu) for r in rows} \
        | {("backend_profiles", s) for s in {r.stack for r in rows} | ({backend} if backend else set())}
    files = []
    for kind, name in sorted(wanted):
        try:
            files.append(resolve(kind, name))
        except LlmsimError:
            pass           # not a profile file: the replay says what is wrong with it, naming the row
    return files


@app.command("validate", epilog=epilog("validate"))
def validate(
    inputs: List[Path] = typer.Argument(..., help="serving-results CSV, or `vllm bench serve` result JSON files"),
    backend: Optional[str] = typer.Option(None, "--backend", help="stack of JSON results (vllm, sglang, "
                                          "trtllm, or a backend profile file such as one --fit wrote); for a "
                                          "CSV, a backend name or profile file replacing each row's own stack"),
    model: Optional[str] = typer.Option(None, "--model", help="model profile (JSON results; overrides a CSV's)"),
    gpu: Optional[str] = typer.Option(None, "--gpu", help="GPU profile (JSON results; overrides a CSV's)"),
    model_configs: Optional[Path] = typer.Option(None, "--model-configs", help="folder of <org>--<name>.yaml "
                                                 "model configs for an AIConfigurator silicon_sample.csv's "
                                                 "models without a built-in profile"),
    tp: int = typer.Option(1, "--tp", min=1, max=72, help="tensor-parallel size of JSON results"),
    weight_dtype: Optional[str] = typer.Option(None, "--weight-dtype", help="weights of JSON results; default: "
                                               "the checkpoint's format"),
    kv_dtype: str = typer.Option("bf16", "--kv-dtype", help="KV cache of JSON results"),
    backend_version: Optional[str] = typer.Option(
        None, "--backend-version", help="version of the stack that served the JSON results (e.g. 0.19.0), as "
        "estimate's --backend-version and a scenario's engine.backend_version: the replay takes that version's "
        "defaults where they differ from the backend profile's (vLLM from 0.14 schedules asynchronously; SGLang "
        "before 0.3.6 sends a prefill's first tokens without waiting for the next batch's launch); a CSV's rows "
        "carry their own"),
    stack_version: Optional[str] = typer.Option(None, "--stack-version", hidden=True,
                                                help="--backend-version under another name"),
    cuda_graph_gib: Optional[float] = cuda_graph_gib_option(),
    max_concurrency: Optional[int] = typer.Option(None, "--max-concurrency", min=1,
                                                  help="replay only rows at or below this concurrency"),
    client: str = typer.Option("auto", "--client", help="how the closed loop's rounds fall into phase: burst "
                               "(all C clients at t = 0, every round in that phase), spread (every round out of "
                               "phase), phases (AIPerf: one burst round on an empty server, the rest out of "
                               "phase) or auto (phases for AIPerf deployments, else burst)"),
    deployment: str = typer.Option("auto", "--deployment", help="how the measured servers were launched and "
                                   "benchmarked: auto (each row's provenance), defaults (the stack's own "
                                   "defaults, every request counted), aiconfigurator (AIConfigurator's "
                                   "generated deployments and AIPerf runs), aic-eval (AIConfigurator's 2025 "
                                   "evaluation runs: stack defaults, AIPerf) or aic-genai-perf (the same "
                                   "runs before 2025-10-14, with genai-perf); see docs/accuracy.md"),
    fit: Optional[Path] = typer.Option(None, "--fit", help="fit the stack's overheads to the rows and write "
                                       "a backend profile here"),
    csv: Optional[Path] = typer.Option(None, "--csv", help="also write measured vs predicted per row"),
    json: bool = typer.Option(False, "--json", help="print one JSON object instead of tables"),
    workers: int = typer.Option(max(1, min(4, os.cpu_count() or 1)), "--workers", min=1, max=64,
                                help="processes replaying rows"),
) -> None:
    """Replay measured benchmarks through llmsim: signed errors per row, median and p90 per metric and stack."""
    from ..validation import fit as fitting
    from ..validation.deployment import DEPLOYMENTS
    from ..validation.replay import CLIENT_MODES, ReplaySettings, takes_graphs
    from ..validation.report import error_table, predict_all, summary

    if client not in CLIENT_MODES:
        raise LlmsimError(f"unknown client {client!r}; expected {', '.join(CLIENT_MODES)}", key_path="--client")
    if deployment != "auto" and deployment not in DEPLOYMENTS:
        raise LlmsimError(f"unknown deployment {deployment!r}; expected auto, {', '.join(DEPLOYMENTS)}",
                          key_path="--deployment")
    if fit is not None and fit.suffix not in (".yaml", ".yml"):
        raise LlmsimError("the fitted profile is written as YAML: give a .yaml path", key_path="--fit")
    for flag, target in (("--fit", fit), ("--csv", csv)):
        if target is not None:     # before the replay, which can take minutes; a missing folder is made, as for -o
            check_writable(target, flag)
    if fit is not None and fit.is_file() and not fit.read_text(errors="replace").startswith(_FITTED):
        # an earlier fit is replaced (refitting is the workflow); a profile the user wrote is theirs
        raise LlmsimError("exists and is not a profile `llmsim validate --fit` wrote; name a new file (or remove "
                          "this one)", source=fit, key_path="--fit")
    if model_configs is not None and not model_configs.is_dir():
        raise LlmsimError("not a folder", source=model_configs, key_path="--model-configs")
    version = _version(backend_version, stack_version, inputs)
    check_cuda_graph_gib(cuda_graph_gib)
    with recorded_reads() as read:        # every file the rows and profiles come from
        rows = _load_rows(inputs, backend, model, gpu, tp, weight_dtype, kv_dtype, model_configs, version)
        read_rows = len(rows)
        if max_concurrency is not None:
            rows = [r for r in rows if r.concurrency is None or r.concurrency <= max_concurrency]
        usable = [r for r in rows if not r.skip]
        if not usable:
            above = read_rows - len(rows)
            why = ([f"{above} row{'s' if above != 1 else ''} above --max-concurrency {max_concurrency}"]
                   if above else []) + sorted({r.skip for r in rows})
            raise LlmsimError("no row can be replayed" + (f": {'; '.join(why)}" if why else ""), source=inputs[0])
        from ..profiles.backend import backend_names, load_backend

        # a CSV's rows carry their stack, which --backend replaces; a JSON result's --backend may be a profile file
        # (read by _load_rows), which replays the rows its stack served
        stack_override = backend if any(p.suffix.lower() in (".csv", ".gz") for p in inputs) or (
            backend is not None and backend not in backend_names()) else None
        if stack_override is not None:
            load_backend(stack_override)          # an unknown backend is one line, before any replay
    refuse_overwriting_input_files({"--fit": fit, "--csv": csv},
                                   [*_named_inputs(inputs, (backend, model, gpu), model_configs), *read,
                                    *_profile_files(rows, stack_override)])
    settings = ReplaySettings(backend=stack_override, client=client,  # type: ignore[arg-type]
                              deployment=None if deployment == "auto" else deployment, cuda_graph_gib=cuda_graph_gib)
    usable = _modelled(usable, settings, inputs[0])
    out: dict = {"rows": len(rows), "replayed": len(usable),
                 **({"replayed_with": stack_override} if stack_override is not None else {}),
                 **({"cuda_graph_gib_rows": [r.id for r in usable if takes_graphs(r, settings)]}
                    if cuda_graph_gib is not None else {}),
                 "skipped": {r.id: r.skip for r in rows if r.skip},
                 "not_measured": {r.id: list(r.unmeasured) for r in usable if r.unmeasured}}
    if fit is None:
        preds = predict_all(usable, settings, workers)
        errors = error_table(usable, preds)
    else:
        if len(usable) < len(fitting.PARAMS):
            err_console.print(f"warning: {len(usable)} row(s) to fit {len(fitting.PARAMS)} overheads "
                              f"({', '.join(fitting.PARAMS)}): fewer rows than parameters, so the fit cannot tell "
                              f"them apart and its values only reproduce these rows; give --fit more rows (several "
                              f"concurrencies and lengths) before trusting them", markup=False, style="yellow")
        res = fitting.fit(usable, settings, workers=workers, progress=lambda s: err_console.print(s, style="dim"))
        errors = error_table(usable, res.in_sample)
        out["fitted"] = res.overheads.model_dump(exclude_unset=True)   # what the fit set, not the defaults
        out["fit_summary"] = summary(errors).to_dict("records")
        if res.held_out is not None:
            held = error_table(usable, res.held_out)
            out["leave_one_group_out"] = summary(held).to_dict("records")
        _write_profile(fit, usable, res.overheads, stack_override)
    out["summary"] = summary(errors).to_dict("records")
    if csv is not None:
        try:
            write_atomic(csv, lambda tmp: errors.to_csv(tmp, index=False))
        except LlmsimError as e:
            raise LlmsimError(e.message, source=csv, key_path="--csv") from None
    if json:
        out["errors"] = errors.to_dict("records")
        print_json(out)
        return
    _print(errors, out)


def _version(backend_version: Optional[str], stack_version: Optional[str], inputs: List[Path]) -> str:
    """The stack version of the JSON results ("" for none), checked as a
    scenario's engine.backend_version is. Refused with a CSV among the inputs:
    its rows name their own versions, which the replay keeps, so the flag
    would be dropped for them unannounced."""
    from .options import check_version_flag

    if backend_version is not None and stack_version is not None:
        raise LlmsimError(f"--backend-version and --stack-version are one setting under two names, given "
                          f"{backend_version!r} and {stack_version!r}: give one")
    flag, version = ("--stack-version", stack_version) if stack_version is not None else \
        ("--backend-version", backend_version)
    if version is None:
        return ""
    check_version_flag(version, flag)
    csvs = [p for p in inputs if p.suffix.lower() in (".csv", ".gz")]
    if csvs:
        apart = len(csvs) < len(inputs)
        raise LlmsimError(f"applies to `vllm bench serve` JSON results; a CSV's rows carry their own version (its "
                          f"engine_version or backend_version column), which the replay takes: drop {flag}"
                          + (f", or replay the JSON results apart from {csvs[0]}" if apart else ""), key_path=flag)
    return version


def _modelled(usable: list, settings, source: Path) -> list:
    """The rows llmsim can replay; each it refuses (a layout it cannot model)
    is marked skipped with the reason and listed with the other skipped rows."""
    from ..validation.replay import refusals

    refused = refusals(usable, settings)
    for r in usable:
        if r.id in refused:
            r.skip = refused[r.id]
    kept = [r for r in usable if not r.skip]
    if not kept:
        raise LlmsimError("no row can be replayed: " + "; ".join(sorted(set(refused.values()))), source=source)
    return kept


def _ids(ids: list[str], most: int = 3) -> str:
    """Row ids for a one-line note: the first few and how many more (the JSON lists them all)."""
    return ("row " if len(ids) == 1 else "rows ") + first_few(ids, most)


def _by_what(pairs: Iterable[tuple[str, str]]) -> str:
    """(row id, what) pairs as one note: each what once, with the rows it holds for."""
    rows: dict[str, list[str]] = {}
    for rid, what in pairs:
        rows.setdefault(what, []).append(rid)
    return "; ".join(f"{what} ({_ids(ids)})" for what, ids in sorted(rows.items()))


#: The first line of a profile --fit writes: such a file is replaced by the next fit, any other is not.
_FITTED = "# Written by `llmsim validate --fit`"


def _write_profile(path: Path, rows, overheads, stack_override: Optional[str]) -> None:
    from ..profiles.backend import load_backend

    stacks = sorted({r.stack for r in rows})
    base = load_backend(stack_override or stacks[0])
    if stack_override is None and len(stacks) > 1:
        err_console.print(f"note: rows of several stacks ({', '.join(stacks)}); the profile takes "
                      f"{base.name}'s scheduling defaults and the overheads fitted to them all")
    doc = base.model_dump(exclude_defaults=False)
    doc["name"] = path.stem
    # a term the fit neither fitted nor was given (the launch cost, the tokeniser) keeps the base stack's
    doc["overheads"] = {**base.overheads.model_dump(), **overheads.model_dump(exclude_unset=True)}
    doc["fitted_on"] = (f"llmsim validate --fit on {len(rows)} row{'s' if len(rows) != 1 else ''} "
                        f"({', '.join(sorted({r.group for r in rows}))}): "
                        f"{', '.join(k for k in type(overheads).model_fields if k in overheads.model_fields_set)}")
    # the base stack's account of its first-token terms holds only for the terms this fit left as they were
    kept = [t for t in ("response_ms", "tokenize_us_per_token", "eager_launch_us") if t not in overheads.model_fields_set]
    doc["first_token_fitted_on"] = (f"{', '.join(kept)} as {base.name}'s profile: {base.first_token_fitted_on}"
                                    if kept and base.first_token_fitted_on else "")
    text = f"{_FITTED}; name it in a scenario as engine.backend.\n" + yaml.safe_dump(doc, sort_keys=False)
    try:
        write_atomic(path, lambda tmp: tmp.write_text(text))
    except LlmsimError as e:
        raise LlmsimError(e.message, source=path, key_path="--fit") from None
    err_console.print(f"wrote backend profile {path}")


def _print(errors, out: dict) -> None:
    from rich.table import Table

    from ..validation.report import LABELS
    from .output import fitted_table

    groups: dict[tuple, list] = {}
    for e in errors.to_dict("records"):
        load = str(e["concurrency"]) if e["concurrency"] == e["concurrency"] and e["concurrency"] else f"{e['rate']}/s"
        groups.setdefault((e["model"], e["gpu"], e["stack"], e["layout"]), []).append(
            [f"{e['isl']}/{e['osl']}", load, LABELS.get(e["metric"], e["metric"]), f"{e['measured']:,.1f}",
             f"{e['predicted']:,.1f}", f"{e['error_pct']:+.0f} %", e["row"]])
    # One table per model, GPU and stack, named in its title: the rows fit 80 columns whole (the row id,
    # last, goes first on a narrow terminal).
    console.print("measured vs llmsim (error = llmsim/measured − 1)", markup=False)
    if out.get("replayed_with"):      # the tables name each row's measured stack; the replay ran another
        console.print(f"every row replayed with --backend {out['replayed_with']}; the stack shown is the one "
                      f"that was measured", markup=False)
    for (model, gpu, stack, layout), rows in groups.items():
        console.print(fitted_table(f"{model} on {gpu}, {stack}, {layout}",
                                   ["isl/osl", "C or rate", "metric", "measured", "llmsim", "error", "row"], rows,
                                   keep=6, left=[2, 6]))

    def table(title: str, recs: list) -> None:
        s = Table(title=title, title_justify="left")
        for c in ("metric", "stack", "rows", "median |error|", "p90 |error|", "median signed"):
            s.add_column(c, justify="left" if c in ("metric", "stack") else "right")
        for r in recs:
            s.add_row(LABELS.get(r["metric"], r["metric"]), r["stack"], str(r["rows"]),
                      f"{r['median_abs_pct']:.1f} %", f"{r['p90_abs_pct']:.1f} %", f"{r['median_signed_pct']:+.1f} %")
        console.print(s)

    table("summary" + (" (in-sample, after the fit)" if "fitted" in out else ""), out["summary"])
    if "leave_one_group_out" in out:
        table("leave one group out (each model/GPU/stack predicted by the fit on the others)",
              out["leave_one_group_out"])
    if "fitted" in out:
        console.print("fitted overheads: " + ", ".join(f"{k} = {v:g}" for k, v in out["fitted"].items()))
    if "cuda_graph_gib_rows" in out:      # a figure that reached no row priced nothing
        took, replayed = out["cuda_graph_gib_rows"], out["replayed"]
        reached = f"{len(took)} of {replayed} row(s) ({_ids(took)})" if took else "no row"
        console.print(f"--cuda-graph-gib applied to {reached}" + ("" if len(took) == replayed else
                      ": only a release that takes its CUDA graphs out of the KV pool reads it (vLLM 0.20.0 "
                      "and later)"), markup=False)
    if out["skipped"]:
        console.print(f"{len(out['skipped'])} row(s) not replayed: " + _by_what(out["skipped"].items()),
                      markup=False)
    if out["not_measured"]:
        console.print(f"{len(out['not_measured'])} row(s) replayed without a figure they write as 0, read as not "
                      "measured: " + _by_what((rid, c) for rid, cols in out["not_measured"].items() for c in cols),
                      markup=False)
