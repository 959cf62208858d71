"""``llmsim sweep``: sweep files, the tidy table, resuming, and bad input.

The tiny scenario here (a few hundred requests, llama-3-8b on h100-sxm)
simulates in well under a second; test_plan and test_executors use it too.
"""
from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pandas as pd
import pytest
import yaml
from hypothesis import given, settings, strategies as st

from simulator.errors import LlmsimError
from simulator.planning.executors import Executor, ExecutorOptions, make_executor
from simulator.planning.grid import SweepFile, expand
from simulator.planning.point import Point, WALL_TIME
from simulator.planning.sweep import plan_sweep, run_sweep, write_table

TINY = {
    "name": "tiny",
    "seed": 3,
    "workload": {
        "num_requests": 200,
        "arrival": {"type": "poisson", "rate_per_s": 60},
        "input_tokens": {"dist": "lognormal", "mean": 1000, "std": 600, "min": 32, "max": 3000},
        "output_tokens": {"dist": "lognormal", "mean": 200, "std": 120, "min": 8, "max": 600},
    },
    "pools": [{"name": "chat", "model": "llama-3-8b", "gpu": "h100-sxm", "replicas": 2,
               "router": "least_outstanding"}],
    "slo": {"ttft_p99_ms": 300, "tpot_p99_ms": 25},
}


def write_tiny_scenario(folder: Path, **top: object) -> Path:
    """The tiny scenario as YAML in ``folder``; keyword arguments replace top-level keys."""
    path = folder / "tiny.yaml"
    path.write_text(yaml.safe_dump({**TINY, **top}, sort_keys=False))
    return path


def write_sweep(folder: Path, body: dict) -> Path:
    write_tiny_scenario(folder)
    path = folder / "sweep.yaml"
    path.write_text(yaml.safe_dump({"base": "tiny.yaml", **body}, sort_keys=False))
    return path


def words(text: str) -> str:
    """Terminal output with rich's line wrapping undone."""
    return " ".join(text.split())


GRID = {"grid": {"pools.chat.replicas": [1, 2], "seed": [1, 2]}}


def test_sweep_writes_one_row_per_run_and_resumes(tmp_path, cli):
    sweep = write_sweep(tmp_path, GRID)
    out = tmp_path / "out"
    r = cli("sweep", sweep, "-o", out, "--workers", "2")
    assert r.code == 0, r.err
    assert "(0 reused" in words(r.out)
    df = pd.read_parquet(out / "sweep.parquet")
    assert len(df) == 4
    assert list(df.columns[:2]) == ["pools.chat.replicas", "seed"]
    for col in ("ttft_p50_ms", "ttft_p95_ms", "ttft_p99_ms", "tpot_p99_ms", "e2el_p99_ms", "request_throughput",
                "completed", "failed", "slo_met", "attainment_ttft_p99_ms", "attainment_tpot_p99_ms",
                "monthly_usd", "gpus", "usd_per_request", WALL_TIME):
        assert col in df.columns, col
    assert list(df["pools.chat.replicas"]) == [1, 1, 2, 2]
    assert (df["completed"] + df["failed"] == 200).all()
    assert df["slo_met"].dtype == bool
    # twice the GPUs, twice the money
    cost = df.groupby("pools.chat.replicas")["monthly_usd"].first()
    assert cost[2] == pytest.approx(2 * cost[1])
    stored = sorted((out / "points").glob("*.json"))
    assert len(stored) == 4
    mtimes = [p.stat().st_mtime_ns for p in stored]

    again = cli("sweep", sweep, "-o", out)
    assert again.code == 0, again.err
    assert "(4 reused" in words(again.out) and "0 run on local" in words(again.out)
    assert [p.stat().st_mtime_ns for p in stored] == mtimes
    pd.testing.assert_frame_equal(pd.read_parquet(out / "sweep.parquet"), df)


class _Crashing(Executor):
    """Hands back ``after`` results, then fails as a dying cluster would."""

    def __init__(self, after: int):
        self.after = after

    def map_unordered(self, fn, items):
        for i, item in enumerate(items):
            if i == self.after:
                raise RuntimeError("worker lost")
            yield item, fn(item)


def test_a_partial_sweep_keeps_what_finished(tmp_path):
    points = plan_sweep(write_sweep(tmp_path, GRID))
    out = tmp_path / "out"
    with pytest.raises(RuntimeError, match="worker lost"):
        run_sweep(points, out, _Crashing(after=3))
    assert len(list((out / "points").glob("*.json"))) == 3
    assert len(pd.read_parquet(out / "sweep.parquet")) == 3

    seen = []
    run = run_sweep(points, out, make_executor("local"), on_row=lambda p, row, reused: seen.append(reused))
    assert sorted(seen) == [False, True, True, True]
    assert run.reused == 3 and len(run.rows) == 4 and not run.errors


def test_points_are_crossed_with_the_grid():
    sweep = SweepFile(base="x.yaml", grid={"a": [1, 2]}, points=[{"b": 1}, {"b": 2, "c": 3}])
    assert expand(sweep) == [{"b": 1, "a": 1}, {"b": 1, "a": 2}, {"b": 2, "c": 3, "a": 1}, {"b": 2, "c": 3, "a": 2}]
    assert expand(SweepFile(base="x.yaml", points=[{"b": 1}])) == [{"b": 1}]


def test_mapping_values_and_points_reach_the_scenario(tmp_path, cli):
    sweep = write_sweep(tmp_path, {"points": [
        {"workload.output_tokens": {"dist": "fixed", "value": 16}},
        {"workload.output_tokens": {"dist": "fixed", "value": 64}, "pools.chat.replicas": 3}]})
    r = cli("sweep", sweep, "-o", tmp_path / "out", "--workers", "1")
    assert r.code == 0, r.err
    df = pd.read_parquet(tmp_path / "out" / "sweep.parquet")
    assert list(df["workload.output_tokens"]) == ['{"dist": "fixed", "value": 16}', '{"dist": "fixed", "value": 64}']
    assert df["pools.chat.replicas"].isna().tolist() == [True, False]
    assert list(df["gpus"]) == [2, 3]


@given(st.dictionaries(st.sampled_from(["pools.chat.tp", "pools.chat.replicas", "seed"]), st.integers(1, 2),
                       min_size=1))
@settings(deadline=None, max_examples=20)
def test_a_points_key_ignores_override_order_but_not_the_engine(overrides):
    with tempfile.TemporaryDirectory() as tmp:
        scenario = str(write_tiny_scenario(Path(tmp)))
        items = tuple(overrides.items())
        p = Point(scenario, items)
        assert Point(scenario, tuple(reversed(items))).key == p.key
        assert Point(scenario, items, engine="reference").key != p.key


@pytest.mark.parametrize("body, message", [
    ({"grid": {}}, "nothing to run"),
    ({"grid": {"pools.chat.replicas": []}}, "grid.pools.chat.replicas: empty list"),
    ({"points": []}, "points: empty list"),
    ({"grid": {"pools.chat.replica": [1]}}, "pools[0].replica: unknown key"),
    ({"grid": {"pools.nope.replicas": [1]}}, "no item named 'nope'"),
    ({"grid": {"pools.chat.replicas": [0]}}, "greater than or equal to 1"),
    ({"points": [{"pools.chat.tp": 1}, {"workload.nope": 1}]}, "points[1]"),
    ({"grid": {"pools.chat.tp": [1]}, "points": [{"pools.chat.tp": 2}]}, "points[0]: pools.chat.tp is both swept and set"),
    ({"grd": {"pools.chat.replicas": [1]}}, "grd: unknown key"),
    ({"grid": {"pools.chat.replicas": 4}}, "expected a list, a single value written as a list of one ([4])"),
])
def test_bad_sweep_files_are_one_clear_error(tmp_path, cli, body, message):
    r = cli("sweep", write_sweep(tmp_path, body), "-o", tmp_path / "out")
    assert r.code == 2
    assert message in r.err
    assert not (tmp_path / "out").exists()  # refused before anything ran


def test_points_that_cannot_run_are_reported_not_stored(tmp_path, cli):
    """A point the hardware cannot hold (its weights do not fit) is a result, written as its row's error;
    a point that is bad input (an unknown GPU) is refused before any runs (tests/test_plan_bad_choices.py)."""
    sweep = write_sweep(tmp_path, {"grid": {"pools.chat.engine.gpu_memory_utilization": [0.9, 0.2]}})
    out = tmp_path / "out"
    r = cli("sweep", sweep, "-o", out, "--workers", "1")
    assert r.code == 2
    assert "1 of 2 points could not run" in r.err and "does not fit" in r.err
    df = pd.read_parquet(out / "sweep.parquet")
    assert df["error"].isna().tolist() == [True, False]
    assert len(list((out / "points").glob("*.json"))) == 1


def test_a_missing_base_and_no_traceback(tmp_path, cli_subprocess):
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text("base: nope.yaml\ngrid: {seed: [1]}\n")
    r = cli_subprocess("sweep", sweep, "-o", tmp_path / "out")
    assert r.code == 2
    assert "nope.yaml: file not found" in r.err
    assert "Traceback" not in r.err


def test_the_table_falls_back_to_csv_without_pyarrow(tmp_path, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "pyarrow", None)
    rows = [{"k": "a", "v": 1.5}, {"k": 2, "v": None}, {"v": 3.0}]
    path = write_table(rows, tmp_path, ["k", "missing"])
    assert path.name == "sweep.csv"
    monkeypatch.undo()  # pandas reads text columns through pyarrow when it is there
    df = pd.read_csv(path)
    assert list(df.columns) == ["k", "missing", "v"]
    assert df["k"].tolist()[:2] == ["a", "2"]  # mixed text and numbers become text


def test_stored_rows_read_back_exactly(tmp_path):
    points = plan_sweep(write_sweep(tmp_path, {"grid": {"seed": [5]}}))
    fresh = run_sweep(points, tmp_path / "a", make_executor("local")).rows[0]
    stored = json.loads(next((tmp_path / "a" / "points").glob("*.json")).read_text())
    assert stored["overrides"] == {"seed": 5}
    assert {**{"seed": 5}, **stored["row"]} == fresh


def test_set_applies_to_every_point_under_its_own_overrides(tmp_path, cli):
    sweep = write_sweep(tmp_path, {"points": [{"seed": 1}, {"seed": 2, "pools.chat.replicas": 3}]})
    r = cli("sweep", sweep, "-o", tmp_path / "out", "--workers", "1", "--set", "pools.chat.replicas=4",
            "--set", "pools.chat.gpu=a100-sxm-80gb")
    assert r.code == 0, r.err
    df = pd.read_parquet(tmp_path / "out" / "sweep.parquet")
    assert list(df["gpus"]) == [4, 3]                    # --set, then the point's own key over it
    points = plan_sweep(sweep, {"pools.chat.gpu": "a100-sxm-80gb"})
    assert all(dict(p.overrides)["pools.chat.gpu"] == "a100-sxm-80gb" for p in points)
    bad = cli("sweep", sweep, "-o", tmp_path / "bad", "--set", "pools.chat.nonsense=1")
    assert bad.code == 2 and "--set" in words(bad.err) and "nonsense" in words(bad.err)


def test_a_narrow_terminal_points_to_the_sweep_table_not_to_an_option_sweep_lacks(tmp_path, cli, monkeypatch):
    """At 80 columns the table leaves columns out and says where they are: the sweep table it wrote
    (sweep has no --json, which the hint used to offer)."""
    from simulator.cli import output

    monkeypatch.setattr(output.console, "_width", 80)
    sweep = write_sweep(tmp_path, {"grid": {"pools.chat.replicas": [1, 2]}})
    r = cli("sweep", sweep, "-o", tmp_path / "out", "--workers", "1")
    assert r.code == 0, r.err
    table = words(r.out.split("wrote ")[0])
    assert "left out at 80 columns" in table and "--json" not in table
    # the path may wrap anywhere at 80 columns (its length is the temporary folder's): read it unwrapped
    assert "out/sweep.parquetholdseverycolumn" in table.replace(" ", "")


PINNED = """\
name: pinned
seed: 1
workload:
  num_requests: 20
  arrival: {type: poisson, rate_per_s: 5}
  input_tokens: {dist: fixed, value: 500}
  output_tokens: {dist: fixed, value: 50}
pools:
  - name: chat
    model: llama-3.1-8b
    gpu: h100-sxm
    replicas: 1
    usd_per_gpu_hour: 3.0
"""


def test_a_sweep_over_gpus_says_when_one_pinned_price_bills_them_all(cli, tmp_path):
    """plan warns that a scenario's usd_per_gpu_hour, written for one GPU, bills every GPU it tries;
    a sweep over GPUs priced an H200 at the H100's $3.00 in silence."""
    (tmp_path / "pinned.yaml").write_text(PINNED)
    sweep = tmp_path / "gpus.yaml"
    sweep.write_text("base: pinned.yaml\ngrid:\n  pools.chat.gpu: [h100-sxm, h200]\n")
    r = cli("sweep", sweep, "-o", tmp_path / "a")
    assert r.code == 0, r.err
    assert "warning: pool chat's price is pinned at $3.00/GPU-h" in r.err and "this sweep tries" in r.err
    unpinned = cli("sweep", sweep, "-o", tmp_path / "b", "--set", "pools.chat.usd_per_gpu_hour=null")
    assert unpinned.code == 0 and "warning" not in unpinned.err
    # a price the command line states, even at the file's value, is the user's own: no warning
    restated = cli("sweep", sweep, "-o", tmp_path / "c", "--set", "pools.chat.usd_per_gpu_hour=3.0")
    assert restated.code == 0 and "warning" not in restated.err
