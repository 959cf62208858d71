"""What-if variants and ladders: `llmsim run S.yaml --ladder` and `--variant NAME`.

A ladder step must be exactly the run the same overlays would give by hand,
so the tests hold ladder rows against `--variant` runs and against numbers
recomputed from the per-request table.
"""
from __future__ import annotations

import csv
import json

import pytest

from helpers_whatif import VARIANTS, write_scenario
from simulator.metrics.intervals import targets_at_confidence
from simulator.metrics.verdict import slo_blocks, target_name
from simulator.scenario.variants import Variant, ladder_steps, overlay_assignments
from simulator.validation.error_model import Regime, load_error_model


# --- the model --------------------------------------------------------------------

def test_cumulative_steps_stack_and_independent_steps_stand_alone():
    vs = [Variant(name=n) for n in ("a", "b", "c")]
    cum = ladder_steps(vs, "cumulative")
    ind = ladder_steps(vs, "independent")
    assert [s.name for s in cum] == [s.name for s in ind] == ["baseline", "a", "b", "c"]
    assert [[v.name for v in s.variants] for s in cum] == [[], ["a"], ["a", "b"], ["a", "b", "c"]]
    assert [[v.name for v in s.variants] for s in ind] == [[], ["a"], ["b"], ["c"]]


@pytest.mark.parametrize("value", [4, 0.5, 1e-05, -3, True, None, "prefix_aware", "a=b: c", "2024-01-01",
                                   {"dist": "fixed", "value": 10}, [1, "x"], "multi\nline"])
def test_overlay_values_reach_the_walker_unchanged(value):
    from simulator.scenario.overrides import apply_override

    data: dict = {"k": {}}
    [assignment] = overlay_assignments({"k.v": value})
    apply_override(data, assignment)
    assert data["k"]["v"] == value and type(data["k"]["v"]) is type(value)


# --- the ladder from the command line ---------------------------------------------

def test_ladder_rows_are_the_runs_the_variants_give(tmp_path, cli):
    sc = write_scenario(tmp_path, VARIANTS)
    out = tmp_path / "out"
    r = cli("run", sc, "--ladder", "-o", out, "--no-plots")
    assert r.code == 0, r.err
    for step in ("baseline", "two-replicas", "tp2"):
        assert step in r.out
    doc = json.loads((out / "ladder.json").read_text())
    assert doc["ladder"] == "cumulative" and doc["scenario"] == "small"
    rows = {s["step"]: s for s in doc["steps"]}
    assert list(rows) == ["baseline", "two-replicas", "tp2"]
    assert rows["tp2"]["variants"] == ["two-replicas", "tp2"]
    # cumulative: 1 GPU, then 2 replicas x 1, then 2 replicas x TP 2
    assert [rows[s]["gpus"] for s in rows] == [1, 2, 4]
    by_hand = cli("run", sc, "--json", "--variant", "two-replicas", "--variant", "tp2").json()
    step = json.loads((out / "tp2" / "results.json").read_text())
    for k in ("completed", "p99_ttft_ms", "median_tpot_ms", "total_output_tokens"):
        assert step[k] == by_hand[k], k
    assert rows["tp2"]["ttft_p99_ms"] == by_hand["p99_ttft_ms"]
    assert rows["tp2"]["usd_per_request"] == by_hand["llmsim"]["cost"]["usd_per_request"]
    assert rows["tp2"]["monthly_usd"] == by_hand["llmsim"]["cost"]["monthly_usd"]
    assert rows["baseline"]["slo_met"] is True
    # More hardware on the same traffic: faster first tokens, dearer fleet.
    assert rows["two-replicas"]["ttft_p95_ms"] < rows["baseline"]["ttft_p95_ms"]
    assert rows["two-replicas"]["monthly_usd"] > rows["baseline"]["monthly_usd"]
    with (out / "ladder.csv").open() as f:
        table = list(csv.DictReader(f))
    assert [t["step"] for t in table] == list(rows) and table[2]["variants"] == "two-replicas+tp2"
    assert not list(out.glob("*.png")) and not list(out.glob("*/*.png"))
    # each step's SLO bounds at the ladder's confidence (run's default, 0.9), as check --confidence judges them;
    # its results.json carries the intervals a plain run's does
    assert doc["confidence"] == 0.9 and "SLO bounds at 90 %" in " ".join(r.out.split())
    regime = Regime(**step["llmsim"]["error_model"]["regime"])
    checked = {target_name(t["label"], t["key"]): t["bound_ms"]
               for t in targets_at_confidence([slo_blocks(step)], regime, load_error_model(), 0.9)}
    assert rows["tp2"]["slo_bounds_ms"] == checked and set(checked) == {"ttft_p99_ms", "tpot_p99_ms"}
    assert step["llmsim"]["intervals"]["p99_ttft_ms"]["bound"] == checked["ttft_p99_ms"]
    assert f"tp2: bounds (ms): tpot_p99_ms {checked['tpot_p99_ms']:,.1f}, ttft_p99_ms " \
           f"{checked['ttft_p99_ms']:,.1f}" in " ".join(r.out.split())
    assert json.loads(table[2]["slo_bounds_ms"]) == checked
    # the page lists them as the terminal does (it showed the steps' simulated verdicts alone)
    from simulator.report.page import _ladder_body

    page = _ladder_body(out)[1]
    assert "SLO bounds at 90 %" in page and f"<li>tp2: bounds (ms): tpot_p99_ms {checked['tpot_p99_ms']:,.1f}, " \
                                            f"ttft_p99_ms {checked['ttft_p99_ms']:,.1f}</li>" in page


def test_tokens_per_second_is_the_mean_over_requests(tmp_path, cli):
    """Recomputed from the per-request table: 1000 / TPOT per request with
    more than one output token, averaged (not 1000 / mean TPOT)."""
    import pandas as pd

    sc = write_scenario(tmp_path, VARIANTS)
    out = tmp_path / "out"
    assert cli("run", sc, "--ladder", "-o", out, "--no-plots").code == 0
    [table] = list((out / "baseline").glob("requests.*"))
    df = pd.read_parquet(table) if table.suffix == ".parquet" else pd.read_csv(table)
    df = df[(df["status"] == "finished") & (df["output_tokens"] > 1)]
    speed = (df["output_tokens"] - 1) / (df["finish"] - df["first_token"])
    row = json.loads((out / "ladder.json").read_text())["steps"][0]
    assert row["tokens_per_s_per_request"] == pytest.approx(float(speed.mean()), rel=1e-9)
    assert row["tokens_per_s_per_request"] != pytest.approx(1000 / float((1000 / speed).mean()), rel=1e-6)


def test_independent_ladder_applies_each_variant_alone(tmp_path, cli):
    sc = write_scenario(tmp_path, VARIANTS + "ladder: independent\n")
    doc = cli("run", sc, "--ladder", "--json").json()
    assert [s["gpus"] for s in doc["steps"]] == [1, 2, 2]
    assert doc["steps"][2]["variants"] == ["tp2"]


def test_ladder_writes_plots_with_o(tmp_path, cli):
    sc = write_scenario(tmp_path, VARIANTS)
    out = tmp_path / "out"
    assert cli("run", sc, "--ladder", "-o", out).code == 0
    assert (out / "ladder.png").stat().st_size > 10_000
    for step in ("baseline", "two-replicas", "tp2"):
        assert (out / step / "latency_cdf.png").is_file()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".llmsim-")] == []


def test_command_line_set_wins_over_a_variant(tmp_path, cli):
    sc = write_scenario(tmp_path, VARIANTS)
    res = cli("run", sc, "--json", "--variant", "two-replicas", "--set", "pools.main.replicas=3").json()
    assert res["llmsim"]["replicas"] == 3


def test_command_line_set_reaches_a_pool_a_variant_adds(tmp_path, cli):
    """--set goes on after the variants, so it may address a pool only a variant declares."""
    pool = "{{name: {}, model: llama-3-8b, gpu: h100-sxm, replicas: 1, router: round_robin}}"
    sc = write_scenario(tmp_path, "variants:\n  - name: second-pool\n    set:\n"
                        "      classes: [{name: c, pool: main}, {name: d, pool: extra}]\n"
                        f"      pools: [{pool.format('main')}, {pool.format('extra')}]\n")
    res = cli("run", sc, "--json", "--variant", "second-pool", "--set", "pools.extra.replicas=3").json()
    assert res["llmsim"]["pools"]["extra"]["replicas"] == 3


# --- bad input: one clear line, exit 2 --------------------------------------------

@pytest.mark.parametrize("extra, args, fragments", [
    (VARIANTS, ["--variant", "nope"], ["no variant named 'nope'", "two-replicas, tp2"]),
    (VARIANTS, ["--variant", "tp2", "--variant", "tp2"], ["--variant: tp2 is given twice; give each variant once"]),
    ("check: {metrics: [p99_ttft_ms, failed, p99_ttft_ms]}\n", [], ["metrics listed twice: p99_ttft_ms"]),
    ("", ["--ladder"], ["declares no variants"]),
    (VARIANTS, ["--ladder", "--variant", "tp2"], ["--ladder", "drop --variant"]),
    ("variants: [{name: fast, set: {pools.nope.tp: 2}}]\n", ["--ladder"],
     ["variants.fast.set.pools.nope.tp", "no item named 'nope'"]),
    ("variants: [{name: fast, set: {pools.main.tp: lots}}]\n", ["--variant", "fast"],
     ["variants.fast.set", "pools[0].tp"]),
    ("variants: [{name: a}, {name: a}]\n", [], ["two variants are named 'a'"]),
    ("variants: [{name: baseline}]\n", [], ["'baseline' names the ladder's first step"]),
    ("variants: [{name: 'a/b'}]\n", [], ["variants[0].name"]),
    ("variants: [{name: a, sett: {}}]\n", [], ["variants[0].sett", "unknown key"]),
    ("ladder: sideways\n", [], ["ladder"]),
    ("", ["--plots"], ["-o DIR"]),
    ("", ["--overwrite"], ["--overwrite", "-o DIR"]),
    (VARIANTS, ["--ladder", "--overwrite"], ["--overwrite", "-o DIR"]),
])
def test_bad_variant_input_is_one_clear_error(tmp_path, cli, extra, args, fragments):
    sc = write_scenario(tmp_path, extra)
    r = cli("run", sc, *args)
    assert r.code == 2, r.out
    assert "Traceback" not in r.err and r.err.startswith("error:")
    for f in fragments:
        assert f in r.err, (f, r.err)
    about_flags = "--plots" in args or "--overwrite" in args or ("--ladder" in args and "--variant" in args)
    assert (str(sc) in r.err) != about_flags, r.err


@pytest.mark.parametrize("args", [["--variant", "tiny-memory"], ["--ladder"]])
def test_a_variant_the_runner_rejects_is_named(tmp_path, cli, args):
    """Valid to the schema, refused by the runner's own checks (the model
    no longer fits): the error still says which variant did it. A plain run
    of the file runs (a step that does not fit is that step's answer)."""
    sc = write_scenario(tmp_path, "variants: [{name: tiny-memory, set: {pools.main.engine.gpu_memory_utilization: 0.1}}]\n")
    r = cli("run", sc, *args)
    assert r.code == 2 and "Traceback" not in r.err
    assert f"{sc} (with variants.tiny-memory.set): pools[0].engine" in r.err and "does not fit" in r.err


def test_a_step_that_does_not_fit_leaves_the_rest_of_the_file_runnable(tmp_path, cli):
    sc = write_scenario(tmp_path, "variants: [{name: tiny-memory, set: {pools.main.engine.gpu_memory_utilization: 0.1}}]\n")
    assert cli("run", sc).code in (0, 1)


@pytest.mark.parametrize("command", ["run", "check"])
def test_check_settings_the_runner_rejects_are_named_by_every_command(tmp_path, cli, command):
    """`llmsim check`'s fast settings (check.set) are a step of the file like a variant."""
    sc = write_scenario(tmp_path, "check: {set: {pools.main.tp: 3}}\n")
    r = cli(command, sc)
    assert r.code == 2 and "Traceback" not in r.err
    assert f"{sc} (with check.set): pools[0].tp" in r.err and "must divide" in r.err


def test_a_bad_last_variant_fails_before_any_step_runs(tmp_path, cli, monkeypatch):
    import simulator.runner as runner

    ran = []
    monkeypatch.setattr(runner, "simulate", lambda *a, **k: ran.append(1))
    sc = write_scenario(tmp_path, VARIANTS + "  - name: broken\n    set: {workload.arrival.rate_per_s: -1}\n")
    r = cli("run", sc, "--ladder", "-o", tmp_path / "out")
    assert r.code == 2 and "variants.broken.set" in r.err
    assert ran == [] and not (tmp_path / "out").exists()


def test_variants_are_in_the_json_schema():
    from simulator.scenario.schema import Scenario

    props = Scenario.model_json_schema()["properties"]
    assert {"variants", "ladder", "check"} <= set(props)


def test_a_ladder_wider_than_the_terminal_is_stacked_not_cut():
    from rich.console import Console

    from simulator.cli.ladder import _min_width, ladder_table, ladder_tables

    row = {"step": "baseline", "variants": [], "ttft_p50_ms": 15.9, "ttft_p95_ms": 39.5, "ttft_p99_ms": 53.3,
           "tpot_p50_ms": 8.03, "tpot_p99_ms": 16.96, "tokens_per_s_per_request": 117, "completed": 618,
           "rejected": 0, "cancelled": 0, "gpus": 10, "usd_per_request": 0.005883, "monthly_usd": 19392,
           "slo_met": True, "product_gpus": 20000, "product_monthly_usd": 38783177}
    whole = ladder_table("t", [row])
    assert len(ladder_tables("t", [row], 10_000)) == 1
    stacked = ladder_tables("t", [row], 100)
    assert len(stacked) == 2 and all(_min_width(t) <= 100 for t in stacked)
    headers = [c.header for c in whole.columns]
    assert sorted(h for t in stacked for h in (c.header for c in t.columns) if h not in ("step", "SLO")) == \
        sorted(h for h in headers if h not in ("step", "SLO"))
    console = Console(record=True, width=100, color_system=None)
    for t in stacked:
        console.print(t)
    text = console.export_text()
    assert "38,783,177" in text and "16.96" in text and "…" not in text
