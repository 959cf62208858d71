"""``llmsim report DIR`` on a run folder edited since the run wrote it: refused in one line, nothing written.

One real run folder (a tiny scenario through ``llmsim run -o``) is copied
and corrupted a way per case: a timeline.csv without a column or rows, a
requests.parquet replaced by another table, a results.json whose blocks
are not what the page reads. Each must end in exit 2 and one
``error: FILE: KEY: message`` line naming the file and the column or key,
with no traceback and the folder (report.html included) byte for byte as
it was. The page's column lists are checked against what ``llmsim run``
writes, so a column the renderer starts reading cannot go unrequired.
"""
from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any, Callable

import pandas as pd
import pytest

from helpers_shared import built_once

SCENARIO = """\
name: tiny
seed: 3
workload:
  num_requests: 24
  arrival: {type: poisson, rate_per_s: 6}
  input_tokens: {dist: fixed, value: 200}
  output_tokens: {dist: fixed, value: 20}
pools:
  - {name: main, model: llama-3-8b, gpu: h100-sxm, replicas: 1}
slo: {ttft_p99_ms: 2000, tpot_p99_ms: 60}
"""

#: Seconds a refusal may take: it reads three small files.
SECONDS = 5.0


@pytest.fixture(scope="module")
def run_folder(tmp_path_factory) -> Path:
    """A folder as ``llmsim run -o`` writes it, report.html included (written once for the module)."""
    from simulator.cli.app import main

    here = tmp_path_factory.mktemp("report_bad_folder")
    (here / "s.yaml").write_text(SCENARIO)
    try:
        main(["run", str(here / "s.yaml"), "-o", str(here / "run"), "--exit-zero"])
    except SystemExit as e:
        assert not e.code, f"llmsim run exited {e.code}"
    assert (here / "run" / "report.html").is_file()
    return here / "run"


def _snapshot(folder: Path) -> dict[str, bytes]:
    """Every file below ``folder`` (a ladder's step folders, a plan's points), by its path inside it."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _edit_json(name: str, change: Callable[[dict], Any]) -> Callable[[Path], None]:
    def edit(folder: Path) -> None:
        data = json.loads((folder / name).read_text())
        change(data)
        (folder / name).write_text(json.dumps(data))
    return edit


def _edit_timeline(change: Callable[[pd.DataFrame], pd.DataFrame]) -> Callable[[Path], None]:
    def edit(folder: Path) -> None:
        change(pd.read_csv(folder / "timeline.csv")).to_csv(folder / "timeline.csv", index=False)
    return edit


def _edit_requests(change: Callable[[pd.DataFrame], pd.DataFrame]) -> Callable[[Path], None]:
    def edit(folder: Path) -> None:
        change(pd.read_parquet(folder / "requests.parquet")).to_parquet(folder / "requests.parquet", index=False)
    return edit


def _set_cell(col: str, value: Any) -> Callable[[pd.DataFrame], pd.DataFrame]:
    def change(df: pd.DataFrame) -> pd.DataFrame:
        df = df.astype({col: object})
        df.loc[0, col] = value
        return df
    return change


def _set(path: str, value: Any) -> Callable[[dict], None]:
    """results.json's key at the dotted ``path`` set to ``value``."""
    def change(data: dict) -> None:
        *parents, last = path.split(".")
        node: Any = data
        for p in parents:
            node = node[int(p)] if isinstance(node, list) else node[p]
        node[int(last) if isinstance(node, list) else last] = value
    return change


def _drop(path: str) -> Callable[[dict], None]:
    def change(data: dict) -> None:
        *parents, last = path.split(".")
        node: Any = data
        for p in parents:
            node = node[p]
        del node[last]
    return change


def _put(name: str, text: str) -> Callable[[Path], None]:
    return lambda folder: (folder / name).write_text(text)


# (case, corruption, the file named, the column or key named, more words the message must hold)
CASES = [
    ("timeline-no-pool", _edit_timeline(lambda df: df.drop(columns=["pool"])), "timeline.csv", "pool",
     "missing column"),
    ("timeline-other-columns", _put("timeline.csv", "foo,bar\n1,2\n"), "timeline.csv", "time_s", "found: foo, bar"),
    ("timeline-header-only", _edit_timeline(lambda df: df.iloc[:0]), "timeline.csv", None, "no rows"),
    ("timeline-text-in-numbers", _edit_timeline(_set_cell("queue_depth", "lots")), "timeline.csv", "queue_depth",
     "line 2"),
    ("timeline-empty-cell", _edit_timeline(_set_cell("kv_utilization", None)), "timeline.csv", "kv_utilization",
     "finite"),
    ("requests-other-columns", lambda f: pd.DataFrame({"a": [1, 2]}).to_parquet(f / "requests.parquet"),
     "requests.parquet", "status", "missing column"),
    ("requests-no-columns", lambda f: pd.DataFrame().to_parquet(f / "requests.parquet"), "requests.parquet",
     "status", "missing column"),
    ("requests-missing-one", _edit_requests(lambda df: df.drop(columns=["ttft_ms"])), "requests.parquet",
     "ttft_ms", "missing column"),
    ("requests-empty", _edit_requests(lambda df: df.iloc[:0]), "requests.parquet", None, "completed requests"),
    ("requests-status-numbers", _edit_requests(lambda df: df.assign(status=1)), "requests.parquet", "status",
     "expected text"),
    ("requests-admitted-text", _edit_requests(lambda df: df.assign(admitted="soon")), "requests.parquet",
     "admitted", "expected numbers"),
    ("results-llmsim-text", _edit_json("results.json", _set("llmsim", "oops")), "results.json", "llmsim",
     "mapping"),
    ("results-pools-list", _edit_json("results.json", _set("llmsim.pools", [1])), "results.json", "llmsim.pools",
     "mapping"),
    ("results-pool-without-gpus", _edit_json("results.json", _drop("llmsim.pools.main.gpus")), "results.json",
     "llmsim.pools.main.gpus", "missing"),
    ("results-target-number", _edit_json("results.json", _set("slo.targets.ttft_p99_ms", 5)), "results.json",
     "slo.targets.ttft_p99_ms", "mapping"),
    ("results-slices-text", _edit_json("results.json", _set("llmsim.product.slices", "ten")), "results.json",
     "llmsim.product.slices", "whole number"),
    ("results-cost-pool-usd", _edit_json("results.json", _set("llmsim.cost.pools.0.usd", "x")), "results.json",
     "llmsim.cost.pools[0].usd", "number"),
    ("results-cost-pools-text", _edit_json("results.json", _set("llmsim.cost.pools", "main")), "results.json",
     "llmsim.cost.pools", "list"),
    ("results-latency-text", _edit_json("results.json", _set("p99_ttft_ms", "fast")), "results.json",
     "p99_ttft_ms", "number"),
    ("results-percentile-name", _edit_json("results.json", _set("pxx_ttft_ms", 5.0)), "results.json",
     "pxx_ttft_ms", "percentile"),
]


def _refused(cli, folder: Path, name: str, key: str | None, words: str) -> str:
    before = _snapshot(folder)
    t = time.perf_counter()
    r = cli("report", folder)
    took = time.perf_counter() - t
    assert r.code == 2, (r.code, r.out, r.err)
    assert "Traceback" not in r.err and not r.out.strip(), r.err
    lines = r.err.strip().splitlines()
    assert len(lines) == 1, r.err
    line = " ".join(lines)
    prefix = f"error: {folder / name}: " + (f"{key}: " if key else "")
    assert line.startswith(prefix), (prefix, line)
    assert words in line, line
    assert _snapshot(folder) == before, "the folder changed"
    assert took < SECONDS, f"{took:.1f} s"
    return line


@pytest.mark.parametrize("case, corrupt, name, key, words", CASES, ids=[c[0] for c in CASES])
def test_a_corrupt_run_folder_is_refused_in_one_line(run_folder, tmp_path, cli, case, corrupt, name, key, words):
    folder = tmp_path / "run"
    shutil.copytree(run_folder, folder)
    corrupt(folder)
    _refused(cli, folder, name, key, words)


def test_no_page_is_left_when_there_was_none(run_folder, tmp_path, cli):
    """A refusal writes nothing: not a report.html, not a temporary file beside it."""
    folder = tmp_path / "run"
    shutil.copytree(run_folder, folder)
    (folder / "report.html").unlink()
    _edit_timeline(lambda df: df.drop(columns=["pool"]))(folder)
    _refused(cli, folder, "timeline.csv", "pool", "missing column")
    assert not (folder / "report.html").exists()


def test_the_reported_repro_in_a_real_process(run_folder, tmp_path, cli_subprocess):
    """The console script's own process: stderr is the one line, no traceback, exit 2."""
    folder = tmp_path / "run"
    shutil.copytree(run_folder, folder)
    _edit_json("results.json", _set("llmsim", "oops"))(folder)
    r = cli_subprocess("report", folder)
    assert r.code == 2 and "Traceback" not in r.err, r.err
    assert r.err.strip() == (f"error: {folder / 'results.json'}: llmsim: expected a mapping (a JSON object), "
                             f"got the text 'oops'")


def test_a_results_json_without_what_every_run_writes_is_refused(tmp_path, cli):
    """{"completed": 5} made a page of "seed None, engine None, 0 simulated seconds"."""
    folder = tmp_path / "bare"
    folder.mkdir()
    (folder / "results.json").write_text('{"completed": 5}')
    r = cli("report", folder)
    assert r.code == 2 and "llmsim: missing" in r.err and not (folder / "report.html").exists()


@pytest.mark.parametrize("case, edit", [
    # a run that completed no request writes a table with its columns and no rows
    ("no-requests-completed", lambda f: (_edit_requests(lambda df: df.iloc[:0])(f),
                                         _edit_json("results.json", _set("completed", 0))(f))),
    # a column the page does not draw from (arrival) is no reason to refuse the page
    ("a-column-the-page-does-not-read", _edit_requests(lambda df: df.drop(columns=["arrival", "region"]))),
    # a figure llmsim could not measure is written as null: the page shows "—"
    ("nulls-where-figures-go", _edit_json("results.json", lambda d: [
        _set(k, None)(d) for k in ("llmsim.simulated_seconds", "llmsim.product.gpus_mean", "llmsim.product.slices",
                                   "llmsim.energy.pue", "llmsim.energy.co2e_kg_per_month", "llmsim.cost.pools",
                                   "llmsim.classes", "p99_ttft_ms")])),
    ("no-timeline-no-requests", lambda f: ((f / "timeline.csv").unlink(), (f / "requests.parquet").unlink())),
])
def test_what_a_run_may_leave_is_still_drawn(run_folder, tmp_path, cli, case, edit):
    folder = tmp_path / "run"
    shutil.copytree(run_folder, folder)
    (folder / "report.html").unlink()
    edit(folder)
    r = cli("report", folder)
    assert r.code == 0, r.err
    assert (folder / "report.html").is_file()


def test_the_columns_the_page_requires_are_ones_llmsim_run_writes(run_folder):
    """What the page refuses a table without is what the writer always writes: never a run's own folder."""
    from simulator.fleet.timeline import COLUMNS
    from simulator.metrics.table import DERIVED_COLUMNS
    from simulator.report.page_charts import REQUEST_COLUMNS, TIMELINE_COLUMNS
    from workloads.request import RECORD_COLUMNS

    assert set(TIMELINE_COLUMNS) <= set(COLUMNS)
    assert set(REQUEST_COLUMNS) <= set(RECORD_COLUMNS) | set(DERIVED_COLUMNS)
    assert set(REQUEST_COLUMNS) <= set(pd.read_parquet(run_folder / "requests.parquet").columns)
    assert set(TIMELINE_COLUMNS) <= set(pd.read_csv(run_folder / "timeline.csv").columns)


# --- ladder, plan and sweep folders ------------------------------------------------------------------------

LADDER_SCENARIO = SCENARIO + """\
variants:
  - {name: two, set: {pools.main.replicas: 2}}
  - {name: fast, set: {workload.arrival.rate_per_s: 12}}
"""
SWEEP = """\
base: s.yaml
grid:
  pools.main.replicas: [1, 2]
"""


def _write_folders(here: Path) -> None:
    from simulator.cli.app import main

    (here / "s.yaml").write_text(LADDER_SCENARIO)
    (here / "sw.yaml").write_text(SWEEP)
    for args in (["run", here / "s.yaml", "--ladder", "-o", here / "ladder", "--exit-zero"],
                 ["plan", here / "s.yaml", "--vary", "pools.main.replicas=1..2", "-o", here / "plan", "--workers", "1"],
                 ["sweep", here / "sw.yaml", "-o", here / "sweep", "--workers", "1"]):
        try:
            main([str(a) for a in args])
        except SystemExit as e:
            assert not e.code, f"llmsim {args[0]} exited {e.code}"


@pytest.fixture(scope="module")
def made_folders(tmp_path_factory) -> dict[str, Path]:
    """A ladder, a plan and a sweep folder as ``llmsim run --ladder``, ``plan`` and ``sweep`` write them,
    each with its report.html: written once for the session (tests/test_report_needed_keys.py reads
    them too), and copied by each test that changes one."""
    here = built_once("report-folders", _write_folders, tmp_path_factory.mktemp("report_bad_folders"))
    for name in ("ladder", "plan", "sweep"):
        assert (here / name / "report.html").is_file(), name
    return {name: here / name for name in ("ladder", "plan", "sweep")}


def _edit_sweep(change: Callable[[pd.DataFrame], pd.DataFrame]) -> Callable[[Path], None]:
    def edit(folder: Path) -> None:
        change(pd.read_parquet(folder / "sweep.parquet")).to_parquet(folder / "sweep.parquet", index=False)
    return edit


def _sweep_as_csv(text: str) -> Callable[[Path], None]:
    def edit(folder: Path) -> None:
        (folder / "sweep.parquet").unlink()
        (folder / "sweep.csv").write_text(text)
    return edit


def _edit_step_timeline(step: str, change: Callable[[pd.DataFrame], pd.DataFrame]) -> Callable[[Path], None]:
    return lambda folder: _edit_timeline(change)(folder / step)


# (case, which folder, corruption, the file named, the column or key named, more words the message must hold)
FOLDER_CASES = [
    ("ladder-steps-text", "ladder", _edit_json("ladder.json", _set("steps", "abc")), "ladder.json", "steps", "list"),
    ("ladder-steps-mapping", "ladder", _edit_json("ladder.json", _set("steps", {"a": 1})), "ladder.json", "steps",
     "got a mapping"),
    ("ladder-step-number", "ladder", _edit_json("ladder.json", _set("steps.0", 5)), "ladder.json", "steps[0]",
     "mapping"),
    ("ladder-step-without-name", "ladder", _edit_json("ladder.json", lambda d: d["steps"][0].pop("step")),
     "ladder.json", "steps[0].step", "missing"),
    ("ladder-step-name-number", "ladder", _edit_json("ladder.json", _set("steps.1.step", 5)), "ladder.json",
     "steps[1].step", "folder name"),
    ("ladder-step-name-path", "ladder", _edit_json("ladder.json", _set("steps.1.step", "../../etc")), "ladder.json",
     "steps[1].step", "not a path"),
    ("ladder-ttft-text", "ladder", _edit_json("ladder.json", _set("steps.2.ttft_p99_ms", "abc")), "ladder.json",
     "steps[2].ttft_p99_ms", "expected a number or null, got the text 'abc'"),
    ("ladder-cost-text", "ladder", _edit_json("ladder.json", _set("steps.1.product_monthly_usd", "x")),
     "ladder.json", "steps[1].product_monthly_usd", "number"),
    ("ladder-gpus-text", "ladder", _edit_json("ladder.json", _set("steps.1.gpus", "x")), "ladder.json",
     "steps[1].gpus", "number"),
    ("ladder-tpot-text", "ladder", _edit_json("ladder.json", _set("steps.0.tpot_p99_ms", "x")), "ladder.json",
     "steps[0].tpot_p99_ms", "number"),
    ("ladder-slo-met-text", "ladder", _edit_json("ladder.json", _set("steps.0.slo_met", "no")), "ladder.json",
     "steps[0].slo_met", "true, false or null"),
    ("ladder-bound-text", "ladder", _edit_json("ladder.json", _set("steps.1.slo_bounds_ms.ttft_p99_ms", "x")),
     "ladder.json", "steps[1].slo_bounds_ms.ttft_p99_ms", "number"),
    ("ladder-confidence-percent", "ladder", _edit_json("ladder.json", _set("confidence", 90)), "ladder.json",
     "confidence", "probability"),
    ("ladder-baseline-results", "ladder", _edit_json("baseline/results.json",
                                                     _set("slo.targets.ttft_p99_ms.target_ms", "x")),
     "baseline/results.json", "slo.targets.ttft_p99_ms.target_ms", "number"),
    ("ladder-step-results", "ladder", _edit_json("two/results.json", _set("llmsim", "oops")), "two/results.json",
     "llmsim", "mapping"),
    ("ladder-step-timeline", "ladder", _edit_step_timeline("fast", lambda df: df.drop(columns=["pool"])),
     "fast/timeline.csv", "pool", "missing column"),
    ("plan-best-list", "plan", _edit_json("plan.json", _set("best", [1])), "plan.json", "best", "mapping"),
    ("plan-best-text", "plan", _edit_json("plan.json", _set("best", "x")), "plan.json", "best", "mapping"),
    ("plan-best-without-overrides", "plan", _edit_json("plan.json", _drop("best.overrides")), "plan.json",
     "best.overrides", "missing"),
    ("plan-best-cost-text", "plan", _edit_json("plan.json", _set("best.product_monthly_usd", "x")), "plan.json",
     "best.product_monthly_usd", "number"),
    ("plan-candidates-numbers", "plan", _edit_json("plan.json", _set("candidates", [1, 2])), "plan.json",
     "candidates[0]", "mapping"),
    ("plan-candidates-mapping", "plan", _edit_json("plan.json", _set("candidates", {"a": 1})), "plan.json",
     "candidates", "list"),
    ("plan-candidate-overrides-list", "plan", _edit_json("plan.json", _set("candidates.0.overrides", [1])),
     "plan.json", "candidates[0].overrides", "mapping"),
    ("plan-candidate-gpus-text", "plan", _edit_json("plan.json", _set("candidates.0.gpus", "many")), "plan.json",
     "candidates[0].gpus", "number"),
    ("plan-probes-text", "plan", _edit_json("plan.json", _set("probes", "abc")), "plan.json", "probes", "list"),
    ("plan-probe-ttft-text", "plan", _edit_json("plan.json", _set("probes.0.ttft_p99_ms", "x")), "plan.json",
     "probes[0].ttft_p99_ms", "number"),
    ("plan-probe-cost-infinite", "plan", _put("plan.json", '{"best": null, "probes": [{"monthly_usd": Infinity}]}'),
     "plan.json", "probes[0].monthly_usd", "got inf"),
    ("sweep-cost-text", "sweep", _edit_sweep(lambda df: df.assign(monthly_usd="x")), "sweep.parquet",
     "monthly_usd", "row 1 holds 'x'"),
    ("sweep-ttft-text", "sweep", _edit_sweep(lambda df: df.assign(ttft_p99_ms="x")), "sweep.parquet",
     "ttft_p99_ms", "finite number"),
    ("sweep-cost-infinite", "sweep", _edit_sweep(lambda df: df.assign(monthly_usd=float("inf"))), "sweep.parquet",
     "monthly_usd", "finite number"),
    ("sweep-slo-met-text", "sweep", _edit_sweep(lambda df: df.assign(slo_met="no")), "sweep.parquet", "slo_met",
     "true, false"),
    ("sweep-csv-text", "sweep", _sweep_as_csv("a.b,monthly_usd,ttft_p99_ms,slo_met\n1,x,y,True\n"), "sweep.csv",
     "monthly_usd", "line 2 holds 'x'"),
]

# a run folder's timeline: the optional standby column where it is there, and figures the chart cannot encode
TIMELINE_CASES = [
    ("timeline-warm-empty-cell", _edit_timeline(_set_cell("warm", None)), "timeline.csv", "warm", "finite"),
    ("timeline-warm-text", _edit_timeline(lambda df: df.assign(warm="x")), "timeline.csv", "warm", "line 2"),
    ("timeline-kv-huge", _edit_timeline(lambda df: df.assign(kv_utilization=1e307)), "timeline.csv",
     "kv_utilization", "from 0 to 1, line 2 holds 1e+307"),
]


@pytest.mark.parametrize("case, kind, corrupt, name, key, words", FOLDER_CASES, ids=[c[0] for c in FOLDER_CASES])
def test_a_corrupt_ladder_plan_or_sweep_folder_is_refused_in_one_line(made_folders, tmp_path, cli, case, kind,
                                                                      corrupt, name, key, words):
    folder = tmp_path / kind
    shutil.copytree(made_folders[kind], folder)
    corrupt(folder)
    _refused(cli, folder, name, key, words)


@pytest.mark.parametrize("case, corrupt, name, key, words", TIMELINE_CASES, ids=[c[0] for c in TIMELINE_CASES])
def test_a_timeline_the_chart_cannot_draw_is_refused(run_folder, tmp_path, cli, case, corrupt, name, key, words):
    folder = tmp_path / "run"
    shutil.copytree(run_folder, folder)
    if "warm" not in pd.read_csv(folder / "timeline.csv").columns:
        _edit_timeline(lambda df: df.assign(warm=0))(folder)
    corrupt(folder)
    _refused(cli, folder, name, key, words)


@pytest.mark.parametrize("kind", ["ladder", "plan", "sweep"])
def test_a_refused_folder_gets_no_page(made_folders, tmp_path, cli, kind):
    """No report.html where there was none: the check comes before a byte of the page."""
    folder = tmp_path / kind
    shutil.copytree(made_folders[kind], folder)
    (folder / "report.html").unlink()
    case = next(c for c in FOLDER_CASES if c[1] == kind)
    case[2](folder)
    _refused(cli, folder, *case[3:])
    assert not (folder / "report.html").exists()


@pytest.mark.parametrize("kind", ["ladder", "plan", "sweep"])
def test_a_folder_as_written_redraws_the_same_page(made_folders, tmp_path, cli, kind):
    folder = tmp_path / kind
    shutil.copytree(made_folders[kind], folder)
    before = (folder / "report.html").read_bytes()
    r = cli("report", folder)
    assert r.code == 0, r.err
    assert (folder / "report.html").read_bytes() == before


def test_what_the_pages_read_is_declared(made_folders):
    """The ladder and plan tables' columns are in the shapes checked; the writers' keys are what is declared."""
    from simulator.report import page
    from simulator.report.run_folder import LADDER_SHAPE, PLAN_SHAPE, SWEEP_COLUMNS

    ladder = {k for k, _ in LADDER_SHAPE}
    assert {f"steps.*.{k}" for k, _, _ in page._LADDER_COLS} <= ladder
    assert {f"candidates.*.{k}" for k, _, _ in page._PLAN_COLS} <= {k for k, _ in PLAN_SHAPE}
    assert {k for k, _, _ in page._PLAN_COLS} <= set(SWEEP_COLUMNS)
    step = json.loads((made_folders["ladder"] / "ladder.json").read_text())["steps"][0]
    assert {k.split(".")[2] for k in ladder if k.startswith("steps.*.")} <= set(step)
    assert set(SWEEP_COLUMNS) <= set(pd.read_parquet(made_folders["sweep"] / "sweep.parquet").columns)


def test_a_results_file_names_its_folder(run_folder, tmp_path, cli):
    """`llmsim report out/x/results.json` draws out/x's page, as `llmsim report out/x` does; any other
    file is refused in one line naming the files a results folder is known by."""
    folder = tmp_path / "run"
    shutil.copytree(run_folder, folder)
    (folder / "report.html").unlink()
    r = cli("report", folder / "results.json")
    assert r.code == 0 and (folder / "report.html").is_file(), r.err
    r = cli("report", folder / "timeline.csv")
    assert r.code == 2 and r.err.strip().count("\n") == 0, r.err
    assert f"{folder / 'timeline.csv'}: is a file, not a results folder" in r.err and "results.json" in r.err
