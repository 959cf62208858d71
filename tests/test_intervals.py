"""Error bars: the error model, the intervals it gives, replicates, and planning at a confidence."""
from __future__ import annotations

import json
from functools import lru_cache

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings, strategies as st

from simulator.metrics.intervals import interval, targets_at_confidence, upper_bound
from simulator.planning.executors import make_executor
from simulator.planning.plan import plan_fleet
from simulator.planning.vary import parse_vary
from simulator.validation.error_model import ErrorModel, Regime, build, default_path, load_error_model
from test_sweep import TINY, words, write_tiny_scenario


def residual_table(shifts: dict[tuple[str, str], float], rows_per_group: int = 40, seed: int = 0,
                   spread: float = 0.1) -> pd.DataFrame:
    """Synthetic held-out residuals: for each (stack, gpu) group, TTFT and TPOT rows whose
    log(measured / predicted) is ``shift`` plus noise (two groups per stack/GPU: one left out has a sibling)."""
    rng = np.random.default_rng(seed)
    out = []
    for (stack, gpu), shift in shifts.items():
        for g in range(2):
            for i in range(rows_per_group):
                conc, isl = int(rng.choice([4, 16, 64])), int(rng.choice([512, 2048]))
                for metric, pred in (("ttft_mean_ms", 100.0), ("tpot_mean_ms", 20.0)):
                    meas = pred * float(np.exp(shift + spread * rng.standard_normal()))
                    out.append({"row": f"{stack}{gpu}{g}-{i}", "group": f"m{g}/{gpu}/{stack}", "stack": stack,
                                "model": "llama-3-8b", "gpu": gpu, "tp": 1, "isl": isl, "osl": 128,
                                "concurrency": conc, "rate": None, "metric": metric, "measured": meas,
                                "predicted": pred, "error_pct": 100 * (pred - meas) / meas})
    return pd.DataFrame(out)


def test_a_biased_predictor_gets_an_interval_on_the_side_it_misses():
    model = build(residual_table({("vllm", "h100-sxm"): np.log(1 / 0.55)}))
    lk = model.lookup("ttft", Regime("vllm", "hopper", "dense", "9-32", "1k-4k"))
    lo, hi = interval([100.0], lk, 0.9)
    assert 100.0 < lo < 100 / 0.55 < hi          # llmsim reads 45 % low: the interval sits above it
    # e2el is derived from TTFT and TPOT of the same rows, and is biased the same way
    assert interval([100.0], model.lookup("e2el", Regime("vllm")), 0.9)[0] > 100.0


def test_a_regime_whose_groups_scatter_more_gets_a_wider_interval():
    table = pd.concat([residual_table({("vllm", "h100-sxm"): 0.0}, spread=0.05),
                       residual_table({("sglang", "h100-sxm"): 0.0}, spread=0.3, seed=1)], ignore_index=True)
    model = build(table, prior_groups=1.0)
    width = {s: np.subtract(*interval([100.0], model.lookup("tpot", Regime(s, moe="dense")), 0.9)[::-1])
             for s in ("vllm", "sglang")}
    assert width["sglang"] > 2 * width["vllm"]


def test_a_regime_with_few_groups_borrows_from_the_wider_one_and_one_without_residuals_says_so():
    table = residual_table({("vllm", "h100-sxm"): 0.0, ("sglang", "b200"): 0.4})
    centre = {k: build(table, prior_groups=k).lookup("ttft", Regime("vllm", moe="dense")).cell.centre
              for k in (0.1, 2.0, 100.0)}
    assert abs(centre[0.1]) < 0.05                  # almost its own groups' bias, none
    assert centre[0.1] < centre[2.0] < centre[100.0]        # pulled towards the pooled one ...
    assert 0.1 < centre[100.0] < 0.3                        # ... halfway between the two stacks' 0 and 0.4
    unknown = build(table).lookup("ttft", Regime("trtllm", "hopper", "dense", "1-8", "<=1k"))
    assert unknown.cell.key == "moe=dense" and set(unknown.widened) == {"stack", "isl"}   # every stack's dense groups
    moe = build(table).lookup("ttft", Regime("vllm", "hopper", "moe", "1-8", "<=1k"))
    assert moe.cell.key == "all" and set(moe.widened) == {"moe", "stack", "isl"}
    ampere = build(table).lookup("ttft", Regime("vllm", "ampere", "dense", "1-8", "<=1k"))
    assert ampere.cell.key == "moe=dense stack=vllm isl=<=1k" and ampere.widened == ("family",)
    longer = build(table).lookup("ttft", Regime("vllm", "hopper", "dense", "1-8", ">4k"))
    assert longer.cell.key == "moe=dense stack=vllm" and longer.widened == ("isl",)


def test_a_stacks_dense_cell_borrows_from_dense_models_not_from_its_moe_bias():
    """SGLang's MoE rows read TTFT far low and its two dense groups do not: a dense SGLang run is
    centred near its own groups and the other stacks' dense ones, not pulled to the MoE bias."""
    def moe_rows(t):
        return t.assign(model="qwen3-30b-a3b")

    table = pd.concat([residual_table({("vllm", "h100-sxm"): 0.0, ("trtllm", "h100-sxm"): 0.0,
                                       ("sglang", "h200"): 0.0}),
                       moe_rows(residual_table({("sglang", "b200"): 1.5, ("sglang", "h100-sxm"): 1.5,
                                                ("sglang", "gb200-nvl72"): 1.5}, seed=1))], ignore_index=True)
    model = build(table)
    dense = model.lookup("ttft", Regime("sglang", "hopper", "dense", "9-32", "1k-4k")).cell.centre
    moe = model.lookup("ttft", Regime("sglang", "blackwell", "moe", "9-32", "1k-4k")).cell.centre
    assert abs(dense) < 0.3 < 1.0 < moe


def test_an_error_that_grows_with_the_prompt_is_corrected_per_prompt_length_band():
    """llmsim's TTFT on vLLM's MoE rows misses long prompts by more than short ones: the
    model centres each prompt-length band on its own bias, and a run of unknown (mixed)
    prompt length on the stack's and model kind's."""
    table = residual_table({("vllm", "h100-sxm"): 0.0, ("vllm", "b200"): 0.0, ("vllm", "h200"): 0.0})
    long = table.isl > 1024
    table.loc[long, "measured"] *= np.exp(0.5)        # 2,048-token prompts read 40 % low, 512-token ones not
    model = build(table, prior_groups=1.0)
    c = {band: model.lookup("ttft", Regime("vllm", "hopper", "dense", "9-32", band)).cell.centre
         for band in ("<=1k", "1k-4k", None)}
    assert abs(c["<=1k"]) < 0.1 and c["1k-4k"] > 0.4 and c["<=1k"] < c[None] < c["1k-4k"]


def test_the_model_round_trips_through_its_file(tmp_path):
    import yaml

    model = build(residual_table({("vllm", "h100-sxm"): 0.2}))
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump(model.to_dict()))
    back = load_error_model(path)
    r = Regime("vllm", "hopper", "dense", None, None)
    a, b = back.lookup("tpot", r).cell, model.lookup("tpot", r).cell
    assert a.key == b.key and np.allclose([a.centre, a.spread], [b.centre, b.spread], atol=1e-4)


@lru_cache(maxsize=None)
def shifted_model(shift: float) -> ErrorModel:
    return build(residual_table({("vllm", "h100-sxm"): shift}, rows_per_group=15))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(1, 1e4), min_size=1, max_size=8), st.floats(0.05, 0.95), st.floats(0.01, 0.04),
       st.sampled_from([-1.0, 0.0, 0.6]))
def test_intervals_nest_and_the_bound_sits_inside(values, c, dc, shift):
    model = shifted_model(shift)
    lk = model.lookup("ttft", Regime("vllm"))
    lo, hi = interval(values, lk, c)
    lo2, hi2 = interval(values, lk, c + dc)
    assert lo2 <= lo <= hi <= hi2                    # a higher confidence never narrows the interval
    assert lo <= upper_bound(values, lk, (1 + c) / 2) <= hi * (1 + 1e-9)
    assert upper_bound(values, lk, 0.5) <= upper_bound(values, lk, 0.9)


def test_without_a_cell_the_interval_is_the_replicates_spread():
    assert interval([5.0], None, 0.9) == (5.0, 5.0)
    lo, hi = interval([1.0, 2.0, 3.0], None, 0.5)
    assert 1.0 < lo < hi < 3.0


def test_a_target_holds_at_a_confidence_only_if_its_bound_does():
    model = build(residual_table({("vllm", "h100-sxm"): np.log(1.5)}))
    block = [("SLO", {"targets": {"ttft_p99_ms": {"metric": "ttft", "percentile": 99, "target_ms": 130.0,
                                                  "measured_ms": 100.0, "met": True}}})]
    r = Regime("vllm")
    [at5] = targets_at_confidence([block], r, model, 0.5)
    assert not at5["met"] and at5["bound_ms"] > 130      # simulated 100 ms meets 130, corrected 150 does not
    assert at5["replicates_met"] == 1


def test_the_runs_interval_table_judges_a_target_as_check_and_plan_do():
    """A target between the one-sided bound (check, plan --confidence) and the two-sided interval's high end
    showed ✗ in the run's table while check passed it (chatbot at 0.9: TTFT p99 bound 355.2 ms, hi 410.2)."""
    from rich.console import Console

    from simulator.metrics.intervals import intervals_block
    from simulator.report.intervals import intervals_table

    model = build(residual_table({("vllm", "h100-sxm"): 0.0}, spread=0.3))
    target = {"metric": "ttft", "percentile": 99, "target_ms": 0.0, "measured_ms": 100.0, "met": True}
    res = {"p99_ttft_ms": 100.0, "slo": {"targets": {"ttft_p99_ms": target}}}
    iv, _ = intervals_block([res], Regime("vllm"), model, 0.9)
    bound, hi = iv["p99_ttft_ms"]["bound"], iv["p99_ttft_ms"]["hi"]
    assert bound < hi
    target["target_ms"] = (bound + hi) / 2
    [judged] = targets_at_confidence([[("SLO", res["slo"])]], Regime("vllm"), model, 0.9)
    assert judged["met"] and judged["bound_ms"] == pytest.approx(bound)
    console = Console(width=200, record=True, color_system=None)
    console.print(intervals_table({**res, "llmsim": {"intervals": iv}}))
    row = next(line for line in console.export_text().splitlines() if "ttft_p99_ms" in line)
    assert "✓" in row and "✗" not in row


def test_a_prompt_length_buckets_targets_are_judged_in_its_own_band():
    """A run of short prompts (regime <=1k) with a bucket of long ones: the bucket's TTFT target takes
    the long prompts' bias, the fleet's the short ones'."""
    model = _long_prompts_read_low()
    target = {"ttft_p99_ms": {"metric": "ttft", "percentile": 99, "target_ms": 130.0, "measured_ms": 100.0,
                              "met": True}}
    blocks = [("SLO", {"targets": target}), ("SLO input 1024+", {"targets": target, "mean_input_tokens": 2048.0})]
    fleet, bucket = targets_at_confidence([blocks], Regime("vllm", "hopper", "dense", "9-32", "<=1k"), model, 0.5)
    assert fleet["met"] and fleet["bound_ms"] < 115                 # short prompts: read about right
    assert not bucket["met"] and bucket["bound_ms"] > 150           # long prompts: read 40 % low


def _long_prompts_read_low() -> ErrorModel:
    """vLLM residuals where prompts over 1K tokens read 40 % low and shorter ones about right."""
    table = residual_table({("vllm", "h100-sxm"): 0.0, ("vllm", "b200"): 0.0, ("vllm", "h200"): 0.0})
    table.loc[table.isl > 1024, "measured"] *= np.exp(0.5)
    return build(table, prior_groups=1.0)


def test_the_runs_interval_table_shows_each_class_and_buckets_own_targets_as_check_judges_them():
    """run's table and results.json held the fleet's targets' intervals alone, while check and plan
    --confidence judged a class's and a prompt-length bucket's own targets by bounds no run showed."""
    from rich.console import Console

    from simulator.metrics.intervals import intervals_block, slo_intervals_block
    from simulator.metrics.verdict import slo_blocks, target_name
    from simulator.report.intervals import intervals_table
    from simulator.report.summary_format import num

    def targets(ms):
        return {"met": True, "targets": {"ttft_p99_ms": {"metric": "ttft", "percentile": 99, "target_ms": 130.0,
                                                         "measured_ms": ms, "met": True}}}
    res = {"p99_ttft_ms": 100.0, "slo": targets(100.0),
           "llmsim": {"classes": {"paid": {"slo_declared": True, "slo": targets(90.0)},
                                  "free": {"slo_declared": False, "slo": targets(95.0)}},     # information only
                      "by_input_length": {"buckets": {"1024+": {"mean_input_tokens": 2048.0, "slo": targets(100.0)},
                                                      "0-1024": {"mean_input_tokens": 500.0}}}}}
    model, regime = _long_prompts_read_low(), Regime("vllm", "hopper", "dense", "9-32", "<=1k")
    res["llmsim"]["intervals"], _ = intervals_block([res], regime, model, 0.5)
    own = res["llmsim"]["slo_intervals"] = slo_intervals_block([res], regime, model, 0.5)
    assert set(own) == {"paid", "input 1024+"} and "replicates_met" not in own["paid"]["ttft_p99_ms"]
    checked = {target_name(t["label"], t["key"]): t["bound_ms"]
               for t in targets_at_confidence([slo_blocks(res)], regime, model, 0.5)}
    assert own["paid"]["ttft_p99_ms"]["bound"] == checked["paid: ttft_p99_ms"]
    assert own["input 1024+"]["ttft_p99_ms"]["bound"] == checked["input 1024+: ttft_p99_ms"] > 150  # its own band
    console = Console(width=200, record=True, color_system=None)
    console.print(intervals_table(res))
    rows = {line.split("│")[2].strip(): line for line in console.export_text().splitlines() if "ttft_p99_ms" in line}
    assert set(rows) == {"ttft_p99_ms", "paid: ttft_p99_ms", "input 1024+: ttft_p99_ms"} == set(checked)
    assert "✓" in rows["paid: ttft_p99_ms"] and num(checked["paid: ttft_p99_ms"]) in rows["paid: ttft_p99_ms"]
    bucket = rows["input 1024+: ttft_p99_ms"]
    assert "✗" in bucket and num(checked["input 1024+: ttft_p99_ms"]) in bucket
    i = own["input 1024+"]["ttft_p99_ms"]
    assert f"{num(i['lo'])} – {num(i['hi'])}" in bucket


def test_a_class_absent_from_a_seed_is_judged_over_the_seeds_it_sent_requests_in():
    """Seed 0 sent class a no request (no block: its run does not judge a). Matched by place, b's bound
    took a's values from seed 1 (and a's ran off the end of seed 0's list: run --replicates and plan
    --seeds --confidence ended in a traceback)."""
    model = build(residual_table({("vllm", "h100-sxm"): 0.0}, spread=0.2))

    def block(ms, met=True):
        return {"targets": {"ttft_p99_ms": {"metric": "ttft", "percentile": 99, "target_ms": 130.0,
                                            "measured_ms": ms, "met": met}}}
    seeds = [[("SLO", block(100.0)), ("SLO b", block(100.0))],
             [("SLO", block(110.0)), ("SLO a", block(500.0, False)), ("SLO b", block(110.0))]]
    judged = {t["label"]: t for t in targets_at_confidence(seeds, Regime("vllm"), model, 0.9)}
    assert judged["SLO b"]["bound_ms"] == judged["SLO"]["bound_ms"]           # b's values, both seeds
    [alone] = targets_at_confidence([seeds[1][1:2]], Regime("vllm"), model, 0.9)
    assert judged["SLO a"]["bound_ms"] == alone["bound_ms"] and judged["SLO a"]["replicates_met"] == 0


def _two_seeds_one_without_class_a(first: int) -> dict:
    """Seeds 3 and 4 of a fleet with classes a and b, seed 4 sending a no request; the results.json
    run --replicates 2 writes with seed ``first``'s run shown."""
    from simulator.metrics.intervals import intervals_block, slo_intervals_block, spread_block

    def block(ms):
        return {"met": True, "targets": {"ttft_p99_ms": {"metric": "ttft", "percentile": 99, "target_ms": 130.0,
                                                         "measured_ms": ms, "met": True}}}

    def seed(s, *classes):
        return {"p99_ttft_ms": 100.0, "slo": block(100.0),
                "llmsim": {"seed": s, "classes": {c: {"slo_declared": True, "slo": block(90.0)} for c in classes}}}
    reps = [seed(3, "a", "b"), seed(4, "b")][::1 if first == 3 else -1]
    model, regime = build(residual_table({("vllm", "h100-sxm"): 0.0})), Regime("vllm")
    res = reps[0]
    res["llmsim"]["intervals"], _ = intervals_block(reps, regime, model, 0.9)
    res["llmsim"]["slo_intervals"] = slo_intervals_block(reps, regime, model, 0.9)
    res["llmsim"]["replicates"] = spread_block(reps, [r["llmsim"]["seed"] for r in reps])
    return res


@pytest.mark.parametrize("first", [3, 4])
def test_replicates_met_counts_a_class_over_the_seeds_that_sent_it(first):
    """Seed 4 sent class a no request: "1 of 2" in run's table and the page read as a miss in a seed
    that never judged a; and where seed 4's run is the one shown, a was in neither (run exits 1 where a
    misses in seed 3 alone)."""
    from rich.console import Console

    from simulator.report.intervals import intervals_table
    from simulator.report.page_parts import slo_table

    res = _two_seeds_one_without_class_a(first)
    a = res["llmsim"]["slo_intervals"]["a"]["ttft_p99_ms"]
    assert a["replicates_judged"] == 1 and a["target_ms"] == 130.0
    console = Console(width=200, record=True, color_system=None)
    console.print(intervals_table(res))
    rows = {line.split("│")[2].strip(): line for line in console.export_text().splitlines() if "ttft_p99_ms" in line}
    assert "1 of 1 that sent it" in rows["a: ttft_p99_ms"] and "2 of 2" in rows["b: ttft_p99_ms"]
    assert "130.00" in rows["a: ttft_p99_ms"] and ("90.00" in rows["a: ttft_p99_ms"]) is (first == 3)
    page = slo_table(res)
    assert "1 of 1 that sent it" in page and "a: TTFT p99" in page and ("none sent" in page) is (first == 4)


def test_a_runs_results_json_holds_its_classes_and_buckets_intervals(tmp_path, cli):
    scenario = write_tiny_scenario(
        tmp_path, classes=[{"name": "paid", "share": 0.5, "slo": {"ttft_p99_ms": 5000}}, {"name": "free", "share": 0.5}],
        input_length_buckets={"edges": [1000], "slo": {"1000+": {"ttft_p99_ms": 5000}}})
    r = cli("run", scenario, "--json", "--exit-zero", "--confidence", "0.8")
    assert r.code == 0, r.err
    own = json.loads(r.out)["llmsim"]["slo_intervals"]
    assert set(own) == {"paid", "input 1000+"}
    for i in (own["paid"]["ttft_p99_ms"], own["input 1000+"]["ttft_p99_ms"]):
        assert i["lo"] <= i["bound"] <= i["hi"] and i["confidence"] == 0.8 and i["model"] == "ttft"


def _meeting_its_slo(folder):
    """The tiny scenario with a replica to spare, so a run exits 0 (an SLO miss exits 1)."""
    return write_tiny_scenario(folder, pools=[{**TINY["pools"][0], "replicas": 3}])


def test_replicates_report_their_spread_and_intervals(tmp_path, cli_subprocess):
    # a process of its own at 200 columns: the intervals table's headers unwrapped, whatever the terminal
    scenario = _meeting_its_slo(tmp_path)
    r = cli_subprocess("run", scenario, "--replicates", "3", "--workers", "1", "-o", tmp_path / "out", "--no-plots")
    assert r.code == 0, r.err
    res = json.loads((tmp_path / "out" / "results.json").read_text())
    reps = res["llmsim"]["replicates"]
    assert reps["count"] == 3 and reps["seeds"] == [3, 4, 5]
    s = reps["spread"]["p99_ttft_ms"]
    assert s["min"] <= res["p99_ttft_ms"] <= s["max"] and s["std"] > 0   # three draws of the traffic differ
    assert 0 <= reps["slo_met"] <= 3
    iv = res["llmsim"]["intervals"]
    for key in ("mean_ttft_ms", "p99_ttft_ms", "mean_tpot_ms", "p99_tpot_ms", "mean_e2el_ms", "output_throughput"):
        assert iv[key]["lo"] <= iv[key]["hi"] and iv[key]["confidence"] == 0.9
    assert "replicates met" in r.out


def test_replicates_find_a_trace_beside_the_scenario(tmp_path, cli, monkeypatch):
    """A relative trace path resolves against the scenario's folder in every seed's run, wherever llmsim runs."""
    (tmp_path / "t.csv").write_text("timestamp,input_tokens,output_tokens\n" +
                                    "".join(f"{0.1 * i:.1f},200,20\n" for i in range(20)))
    scenario = write_tiny_scenario(tmp_path, workload={"arrival": {"type": "trace", "path": "t.csv"}})
    monkeypatch.chdir("/")
    r = cli("run", scenario, "--replicates", "2", "--workers", "1", "--json", "--exit-zero")
    assert r.code == 0, r.err
    assert json.loads(r.out)["llmsim"]["replicates"]["count"] == 2


@pytest.mark.parametrize("args, message", [
    (["run", "S", "--replicates", "0"], "--replicates: must be a whole number of runs, at least 1"),
    (["run", "S", "--confidence", "1"], "--confidence: must be a probability strictly between 0 and 1"),
    (["run", "S", "--confidence", "0"], "--confidence: must be a probability strictly between 0 and 1"),
    (["plan", "S", "--vary", "pools.chat.replicas=1..4", "--confidence", "1.5"], "at least 0.5 and below 1"),
    (["check", "S", "--confidence", "-0.1"], "at least 0.5 and below 1"),
    (["check", "S", "--confidence", "0.2"], "--confidence: must be at least 0.5, such as 0.9 (got 0.2)"),
    (["plan", "S", "--vary", "pools.chat.replicas=1..4", "--confidence", "0.3"], "must be at least 0.5"),
    (["run", "S", "--confidence", "0.2", "--exit-zero"], None),      # a run's two-sided interval may be narrow
    (["run", "S", "--replicates", "2", "--shards", "2"], "--replicates runs one fleet at several seeds"),
])
def test_bad_replicates_or_confidence_are_one_message(tmp_path, cli, args, message):
    scenario = write_tiny_scenario(tmp_path)
    r = cli(*[scenario if a == "S" else a for a in args], "-o" if args[0] == "plan" else "--engine",
            tmp_path / "p" if args[0] == "plan" else "fast")
    if message is None:
        assert r.code == 0, r.err
        return
    assert r.code == 2
    assert message in r.err and "Traceback" not in r.err
    assert len(r.err.strip().splitlines()) == 1


def test_a_plan_at_a_higher_confidence_is_never_smaller(tmp_path):
    """llmsim reads TTFT 40 % low here: at 0.5 the corrected median needs more replicas than the
    simulated value does, and at 0.9 at least as many again."""
    scenario = write_tiny_scenario(tmp_path, slo={"ttft_p99_ms": 250, "tpot_p99_ms": 40})
    model = build(residual_table({("vllm", "h100-sxm"): np.log(1 / 0.6)}, spread=0.2))
    axes = [parse_vary("pools.chat.replicas=1..16")]
    ex = make_executor("local", )
    n = {}
    for c in (None, 0.5, 0.9):
        p = plan_fleet(scenario, axes, ex, model=model, confidence=c)
        n[c] = p.best["overrides"]["pools.chat.replicas"]
        if c is not None:
            assert p.to_json()["confidence"] == c and p.best["slo_bounds_ms"]["ttft_p99_ms"] <= 250
    assert n[None] < n[0.5] <= n[0.9]


@pytest.mark.skipif(not default_path().is_file(), reason="no error model written yet")
def test_the_shipped_model_has_a_cell_for_every_metric_of_every_stack():
    model = load_error_model()
    assert isinstance(model, ErrorModel)
    for stack in ("vllm", "sglang", "trtllm"):
        for metric in ("ttft", "tpot", "e2el", "throughput"):
            assert model.lookup(metric, Regime(stack, "hopper", "dense", "9-32", "1k-4k")) is not None


def test_the_coverage_benchmark_leaves_each_group_out(tmp_path, repo_root):
    """Six groups share one bias and a seventh is far off: built without it, its intervals miss it."""
    import subprocess
    import sys

    shifts = {("vllm", gpu): 0.0 for gpu in ("h100-sxm", "h200", "b200")}
    table = residual_table(shifts, rows_per_group=20, spread=0.05)
    odd = residual_table({("vllm", "h100-sxm"): 1.0}, rows_per_group=20, spread=0.05)
    odd = odd[odd.group == "m0/h100-sxm/vllm"].assign(group="odd/h100-sxm/vllm", row=lambda d: "odd" + d.row)
    csv = tmp_path / "res.csv"
    pd.concat([table, odd]).to_csv(csv, index=False)
    md = tmp_path / "acc.md"
    p = subprocess.run([sys.executable, str(repo_root / "benchmarks" / "error_model.py"), "--residuals", str(csv),
                        "--prior-groups", "2", "--markdown", str(md)], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    text = md.read_text()
    assert "--residuals FILE --prior-groups 2 --markdown" in text
    row = next(line for line in text.splitlines() if line.startswith("| odd/h100-sxm/vllm"))
    assert row.split("|")[4].strip() == "0"             # TTFT: none of the odd group's rows inside
    usual = next(line for line in text.splitlines() if line.startswith("| m0/h200/vllm"))
    assert float(usual.split("|")[4]) >= 80             # the agreeing groups' rows are


def test_a_model_from_a_residual_file_names_the_command_that_writes_it(tmp_path):
    """A holdout_silicon.py --csv file is recorded as the command that writes it (FILE, as the stated
    error_model.py command's --residuals FILE), not as the name of a local, often temporary, file."""
    from helpers_bench import load_benchmark

    bench = load_benchmark("error_model")
    table = residual_table({("vllm", "h100-sxm"): 0.0}, rows_per_group=5)
    holdout = tmp_path / "tmp_run7.csv"
    pd.concat([table.assign(mode="agg"), table.head(2).assign(mode="disagg")]).to_csv(holdout, index=False)
    frame, source = bench.residuals([holdout], jobs=1, closed_loop=False)
    assert len(frame) == len(table) and "mode" not in frame          # the disaggregated rows left out
    assert source == ("FILE, written by `python benchmarks/holdout_silicon.py ../shared/data/e2e/"
                      "aic_silicon_sample.csv.gz --max-concurrency 128 --jobs 2 --csv FILE` (the held-out rows)")
    saved = tmp_path / "saved.csv"                                     # --save-residuals: no mode column
    table.to_csv(saved, index=False)
    assert bench.residuals([saved], jobs=1, closed_loop=False)[1] == "saved.csv (a residual CSV written earlier)"

def test_replicates_on_dask_give_the_local_results_json(tmp_path, cli):
    from test_executors import local_cluster

    scenario = _meeting_its_slo(tmp_path)
    args = ["run", scenario, "--replicates", "2", "--no-plots", "-o"]
    assert cli(*args, tmp_path / "local", "--workers", "2").code == 0
    with local_cluster() as address:
        r = cli(*args, tmp_path / "dask", "--executor", "dask", "--address", address)
    assert r.code == 0, r.err
    assert (tmp_path / "local" / "results.json").read_bytes() == (tmp_path / "dask" / "results.json").read_bytes()


def test_check_holds_the_slo_to_its_bound_at_a_confidence(tmp_path, cli):
    scenario = write_tiny_scenario(tmp_path, slo={"ttft_p99_ms": 5000, "tpot_p99_ms": 1000})
    plain = cli("check", scenario)
    sure = cli("check", scenario, "--confidence", "0.9")
    assert plain.code == 0 and sure.code == 0, sure.out
    assert "at 90%" in words(sure.out) and "at 90%" not in words(plain.out)
    r = cli("check", scenario, "--confidence", "0.9", "--set", "slo.tpot_p99_ms=0.001")
    assert r.code == 1 and "at 90%" in words(r.out)


def test_a_model_of_one_group_gives_its_stated_coverage_in_sample():
    """With no group to hold out, a cell's spread is its in-sample median absolute deviation, which
    is 0.6745 of a normal's standard deviation: used as the standard deviation, a 90 % interval
    covered 73 % of the very residuals it was built from."""
    rng = np.random.default_rng(0)
    r = rng.normal(0.1, 0.2, 4000)
    table = pd.DataFrame({"row": range(r.size), "group": "m/h100-sxm/vllm", "stack": "vllm", "model": "llama-3-8b",
                          "gpu": "h100-sxm", "isl": 1000, "osl": 100, "concurrency": 8, "metric": "tpot_mean_ms",
                          "measured": 20.0 * np.exp(r), "predicted": 20.0})
    cell = build(table).lookup("tpot", Regime("vllm", moe="dense", isl="<=1k")).cell
    lo, hi = cell.log_ratio(np.array([0.05, 0.95]))
    assert cell.spread == pytest.approx(0.2, rel=0.05)
    assert 0.88 < np.mean((r >= lo) & (r <= hi)) < 0.92
