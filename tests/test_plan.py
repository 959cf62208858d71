"""``llmsim plan``: the searches, the plan it writes, and its errors."""
from __future__ import annotations

import json
import math

import pytest
import yaml
from hypothesis import example, given, strategies as st

from simulator.planning.executors import make_executor
from simulator.planning.pareto import pareto_front
from simulator.planning.plan import RATE_KEY, plan_fleet
from simulator.planning.point import Point, run_point
from simulator.planning.search import drive_all, largest_passing, smallest_passing, solve
from simulator.planning.vary import parse_vary
from simulator.scenario.variants import overlay_assignments
from test_sweep import TINY, words, write_tiny_scenario


@given(st.integers(-50, 50), st.integers(0, 300), st.integers(-60, 400))
def test_smallest_passing_agrees_with_a_linear_scan(lo, width, threshold):
    hi = lo + width
    probes = []

    def passes(x):
        assert lo <= x <= hi
        probes.append(x)
        return x >= threshold

    expected = next((x for x in range(lo, hi + 1) if x >= threshold), None)
    assert solve(smallest_passing(lo, hi), passes) == expected
    assert len(probes) == len(set(probes))  # never asks twice
    assert len(probes) <= 2 * math.log2(width + 1) + 3


@given(st.floats(1e-3, 1e6), st.floats(0.5, 500))
@example(8192.0, 2.00001)     # start × 2¹² = 8,192.04, probed as 8,192: it passes, and nothing above it was tried
def test_largest_passing_brackets_the_threshold(threshold, start):
    tol = 0.02
    bad = []

    def passes(x):
        if x > threshold:
            bad.append(x)
        return x <= threshold

    got = solve(largest_passing(start, rel_tol=tol), passes)
    if threshold < start / 2 ** 12 * (1 - 1e-3):
        assert got is None or got <= threshold
        return
    if threshold >= start * 2 ** 12 * (1 - 1e-3):     # the last probe, rounded to 4 digits, may pass
        assert got is not None and got <= threshold
        return
    assert got is not None and got <= threshold
    # a probe just above it failed: the answer is within the tolerance (and the 4-digit rounding)
    assert min(bad) <= got * (1 + tol) * (1 + 1e-3)


def test_searches_driven_together_answer_as_alone():
    thresholds = {"a": 3, "b": 17, "c": 99, "d": 1000}
    rounds = []

    def judge(probes):
        rounds.append(len(probes))
        return {k: v >= thresholds[k] for k, v in probes.items()}

    answers = drive_all({k: smallest_passing(1, 256) for k in thresholds}, judge)
    assert answers == {k: solve(smallest_passing(1, 256), lambda x, t=t: x >= t) for k, t in thresholds.items()}
    assert answers["d"] is None
    assert rounds[0] == 4 and rounds == sorted(rounds, reverse=True)


def test_pareto_front_keeps_the_undominated():
    pts = [{"monthly_usd": c, "ttft_p99_ms": t} for c, t in [(1, 90), (2, 50), (2, 80), (3, 60), (4, 10), (5, None)]]
    assert [(p["monthly_usd"], p["ttft_p99_ms"]) for p in pareto_front(pts)] == [(1, 90), (2, 50), (4, 10)]


def test_vary_syntax():
    assert parse_vary("pools.chat.replicas=1..256").bounds == (1, 256)
    assert parse_vary("pools.chat.tp=2,4,8").values == (2, 4, 8)
    assert parse_vary("pools.chat.gpu=h100-sxm").values == ("h100-sxm",)
    # commas inside a flow mapping, a list or quotes belong to one choice, as in the same --set value
    assert parse_vary("workload.arrival={type: poisson, rate_per_s: 3}").values == \
        ({"type": "poisson", "rate_per_s": 3},)
    assert parse_vary("pools.chat.engine={max_num_seqs: 8, block_size: 16},{max_num_seqs: 4}").values == \
        ({"max_num_seqs": 8, "block_size": 16}, {"max_num_seqs": 4})
    assert parse_vary("x='a,b',[1, 2]").values == ("a,b", [1, 2])


def test_plan_finds_the_cheapest_fleet(tmp_path, cli):
    scenario = write_tiny_scenario(tmp_path)
    out = tmp_path / "plan"
    r = cli("plan", scenario, "-o", out, "--vary", "pools.chat.replicas=1..64",
            "--vary", "pools.chat.gpu=h100-sxm,a100-sxm-80gb", "--workers", "2")
    assert r.code == 0, r.err
    assert "searched pools.chat.replicas" in words(r.out)
    plan = json.loads((out / "plan.json").read_text())
    best, cands = plan["best"], plan["candidates"]
    probes = sum(c["probes"] for c in cands)
    assert f"; {probes} runs ({probes} probes × 1 seed) in " in words(r.out)
    assert len(cands) == 2 and best == cands[0]
    for c in cands:
        assert set(c) >= {"overrides", "monthly_usd", "slo_met", "ttft_p99_ms", "tpot_p99_ms", "e2el_p99_ms",
                          "ttft_p50_ms", "probes"}
    assert best["slo_met"] and best["monthly_usd"] <= cands[1]["monthly_usd"]
    # it is the smallest: one replica fewer misses the SLO
    n = best["overrides"]["pools.chat.replicas"]
    assert n > 1
    fewer = run_point(Point(str(scenario), tuple({**best["overrides"], "pools.chat.replicas": n - 1}.items())))
    assert fewer["slo_met"] is False
    assert (out / "pareto.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # every run is stored: a rerun simulates nothing new
    stored = len(list((out / "points").glob("*.json")))
    assert stored == sum(c["probes"] for c in cands)
    again = cli("plan", scenario, "-o", out, "--vary", "pools.chat.replicas=1..64",
                "--vary", "pools.chat.gpu=h100-sxm,a100-sxm-80gb")
    assert json.loads((out / "plan.json").read_text())["best"] == best
    assert len(list((out / "points").glob("*.json"))) == stored and again.code == 0


def test_the_run_count_is_probes_times_seeds():
    """It read "3 runs (3 seed(s) each)" for one probe at three seeds: three runs, not three of three."""
    from simulator.cli.plan import runs_text

    assert runs_text(1, 3) == "3 runs (1 probe × 3 seeds)"
    assert runs_text(16, 2) == "32 runs (16 probes × 2 seeds)" and runs_text(4, 1) == "4 runs (4 probes × 1 seed)"


def test_more_seeds_never_give_a_smaller_fleet(tmp_path):
    scenario = write_tiny_scenario(tmp_path)
    axes = [parse_vary("pools.chat.replicas=1..16")]
    ex = make_executor("local")
    one = plan_fleet(scenario, axes, ex, seeds=1)
    three = plan_fleet(scenario, axes, ex, seeds=3)
    assert three.seeds == [3, 4, 5]
    assert three.best["overrides"]["pools.chat.replicas"] >= one.best["overrides"]["pools.chat.replicas"]
    # worst over the seeds, so never better than the first seed alone at the same size
    same = [p for p in three.probes if p["overrides"] == one.best["overrides"]]
    if same:
        assert same[0]["ttft_p99_ms"] >= one.best["ttft_p99_ms"]


def test_a_plan_answered_by_a_fleet_on_a_window_its_requests_outlast_warns(tmp_path):
    # every request outlasts the 0.3 s window (300 output tokens): the fleets pass on latencies of a fleet
    # still filling up, and a plan that said nothing answered a reasoning product with a third of the GPUs
    scenario = write_tiny_scenario(tmp_path)
    sets = {"workload.num_requests": 20, "workload.output_tokens": {"dist": "fixed", "value": 300}}
    plan = plan_fleet(scenario, [parse_vary("pools.chat.replicas=2..3")], make_executor("local"), sets=sets)
    assert plan.best is not None
    (note,) = [w for w in plan.warnings if "too short to tell" in w]
    assert note.startswith("pools.chat.replicas=2 met the SLO on a window its requests outlast, too short to tell")
    assert "cannot tell: no request finished within the arrival window" in note
    assert "workload.duration_s" in note
    # a window the requests finish in (20 s of arrivals, each done in a few seconds): no such warning
    plain = plan_fleet(scenario, [parse_vary("pools.chat.replicas=2..3")], make_executor("local"),
                       sets={"workload.arrival.rate_per_s": 10})
    assert plain.best is not None
    assert not any("too short to tell" in w for w in plain.warnings), plain.warnings


def test_no_feasible_point_says_which_slo_failed(tmp_path, cli):
    # 2 replicas sit at ~25 ms p99 TPOT: an SLO of 20 ms fails them by a margin
    # no recalibration of the GPU profile closes (the tiny scenario's 25 ms is on the edge).
    scenario = write_tiny_scenario(tmp_path, slo={"ttft_p99_ms": 300, "tpot_p99_ms": 20})
    out = tmp_path / "plan"
    r = cli("plan", scenario, "-o", out, "--vary", "pools.chat.replicas=1..2", "--workers", "1")
    assert r.code == 1      # a verdict on the fleets, as run and check give it; 2 is refused input
    assert "no combination meets the SLO (at the largest value of pools.chat.replicas)" in r.err
    assert "pools.chat.replicas=2: " in r.err and "ms > " in r.err
    plan = json.loads((out / "plan.json").read_text())
    assert plan["best"] is None
    (cand,) = plan["candidates"]
    assert cand["slo_met"] is False and cand["overrides"]["pools.chat.replicas"] == 2
    assert "_p99_ms" in cand["failed_slo"]


def test_max_rate_finds_the_saturation_point(tmp_path, cli):
    scenario = write_tiny_scenario(tmp_path)
    out = tmp_path / "plan"
    r = cli("plan", scenario, "--max-rate", "-o", out, "--vary", "pools.chat.replicas=2,4", "--workers", "2")
    assert r.code == 0, r.err
    assert f"searched {RATE_KEY}" in words(r.out)
    plan = json.loads((out / "plan.json").read_text())
    assert plan["mode"] == "max_rate" and plan["searched"]["key"] == RATE_KEY
    by_n = {c["overrides"]["pools.chat.replicas"]: c for c in plan["candidates"]}
    assert plan["best"]["overrides"]["pools.chat.replicas"] == 4
    assert by_n[4]["max_rate_per_s"] > by_n[2]["max_rate_per_s"] > 0
    for c in plan["candidates"]:
        assert c["slo_met"] and c["overrides"][RATE_KEY] == c["max_rate_per_s"]


def test_max_rate_bracket_is_tight(tmp_path):
    scenario = write_tiny_scenario(tmp_path)
    plan = plan_fleet(scenario, [], make_executor("local"), max_rate=True)
    rate = plan.best["max_rate_per_s"]
    failing = [p["overrides"][RATE_KEY] for p in plan.probes if not p["slo_met"]]
    assert min(r for r in failing if r > rate) <= rate * 1.02 * 1.001


@pytest.mark.parametrize("args, message", [
    (["--vary", "pools.chat.replicaz=1..4"], "pools[0].replicaz: unknown key"),
    (["--vary", "pools.nope.replicas=1..4"], "no item named 'nope'"),
    (["--vary", "nonsense=1..4"], "nonsense: unknown key"),
    (["--vary", "pools.chat.replicas=1..4", "--vary", "pools.chat.tpp=1,2"], "--vary pools.chat.tpp=1"),
    (["--vary", "pools.chat.replicas=4..1"], "empty range 4..1"),
    (["--vary", "pools.chat.replicas=0..4"], "greater than or equal to 1"),
    (["--vary", "pools.chat.gpu=h100-sxm"], "exactly one range axis"),
    (["--vary", "pools.chat.replicas=1..4", "--vary", "pools.chat.tp=1..2"], "exactly one range axis"),
    (["--vary", "pools.chat.replicas"], "--vary expects key.path=LO..HI"),
    (["--max-rate", "--vary", "pools.chat.replicas=1..4"], "give other --vary axes as lists"),
    (["--vary", "pools.chat.replicas=1..4", "--seeds", "0"], "--seeds must be at least 1"),
    (["--vary", "pools.chat.replicas=1..4", "--vary", "seed=3,4", "--seeds", "2"], "drop --vary seed"),
    # inside the range, not at its ends: the search reached tp=6 after four runs and stopped there
    (["--vary", "pools.chat.tp=1..8"], "--vary pools.chat.tp=3): pools[0].tp: tp=3 must divide"),
])
def test_bad_plans_are_one_clear_error(tmp_path, cli, args, message):
    r = cli("plan", write_tiny_scenario(tmp_path), "-o", tmp_path / "plan", *args)
    assert r.code == 2
    assert message in r.err
    assert not (tmp_path / "plan" / "plan.json").exists()


def test_plan_needs_an_slo_and_max_rate_needs_a_rate(tmp_path, cli):
    r = cli("plan", write_tiny_scenario(tmp_path, slo=None), "--vary", "pools.chat.replicas=1..4",
            "-o", tmp_path / "p")
    assert r.code == 2 and "declares no SLO" in r.err
    closed = write_tiny_scenario(tmp_path, workload={**TINY["workload"], "arrival": {"type": "concurrency",
                                                                                      "concurrency": 8}})
    r = cli("plan", closed, "--max-rate", "-o", tmp_path / "p")
    assert r.code == 2 and f"--max-rate varies {RATE_KEY}" in r.err and "concurrency" in r.err


def test_max_rate_refuses_a_fixed_number_of_sessions(tmp_path, cli, repo_root):
    # 4 B200s "sustained" 1,638 coding-agent sessions a second: a higher rate only started the same 60
    # sessions sooner, and every rate passed
    r = cli("plan", repo_root / "scenarios" / "coding-agent.yaml", "--max-rate", "-o", tmp_path / "p")
    said = " ".join(r.err.split())
    assert r.code == 2 and "workload.num_sessions: --max-rate raises workload.arrival.rate_per_s" in said, said
    assert "starts a fixed 240 sessions" in said and "--set workload.num_sessions=null --set workload.duration_s=" \
        in said
    assert not (tmp_path / "p").exists()
    # nor can a --vary size it so: read before the choices, the refusal would miss one, but each choice
    # must make a valid scenario alone, where a count beside the duration is refused
    timed = yaml.safe_load((repo_root / "scenarios" / "coding-agent.yaml").read_text())
    timed["workload"] = {**{k: v for k, v in timed["workload"].items() if k != "num_sessions"}, "duration_s": 60}
    timed.pop("check")     # its fast settings count sessions too
    path = tmp_path / "timed.yaml"
    path.write_text(yaml.safe_dump(timed))
    r = cli("plan", path, "--max-rate", "--vary", "workload.num_sessions=30,60", "-o", tmp_path / "p")
    said = " ".join(r.err.split())
    assert r.code == 2 and "(--vary workload.num_sessions=30,60): workload: give exactly one of num_sessions or " \
        "duration_s" in said, said
    assert not (tmp_path / "p").exists()


def test_max_rate_refuses_spikes_on_a_fixed_number_of_requests(tmp_path, cli):
    """200 requests at 20 req/s end near 10 s, reaching a spike at 8 s: a probe at twice the rate ends
    them near 5 s, before it, and the plan stopped there (exit 2 from that probe's run, after the first
    had run and been kept)."""
    spiked = {**TINY["workload"], "arrival": {"type": "poisson", "rate_per_s": 20,
                                              "spikes": [{"start_s": 8, "duration_s": 1, "multiplier": 2}]}}
    path = write_tiny_scenario(tmp_path, workload=spiked)
    r = cli("plan", path, "--max-rate", "-o", tmp_path / "p")
    said = " ".join(r.err.split())
    assert r.code == 2 and "workload.arrival.spikes: --max-rate raises workload.arrival.rate_per_s" in said, said
    assert "--set workload.num_requests=null --set workload.duration_s=" in said
    assert not (tmp_path / "p").exists()



def test_set_changes_the_scenario_every_probe_starts_from(tmp_path, cli):
    scenario = write_tiny_scenario(tmp_path)
    plain = plan_fleet(scenario, [parse_vary("pools.chat.replicas=1..16")], make_executor("local"))
    heavy = plan_fleet(scenario, [parse_vary("pools.chat.replicas=1..16")], make_executor("local"),
                       sets={"workload.arrival.rate_per_s": 240})
    n = lambda p: p.best["overrides"]["pools.chat.replicas"]   # noqa: E731
    assert n(heavy) > n(plain)                              # 4x the load needs more replicas
    r = cli("plan", scenario, "-o", tmp_path / "p", "--vary", "pools.chat.replicas=1..16",
            "--set", "workload.arrival.rate_per_s=240", "--workers", "1")
    assert r.code == 0, r.err
    assert json.loads((tmp_path / "p" / "plan.json").read_text())["best"] == heavy.best
    bad = cli("plan", scenario, "-o", tmp_path / "b", "--vary", "pools.chat.replicas=1..16", "--set", "pools.zz.tp=2")
    assert bad.code == 2 and "no item named 'zz'" in words(bad.err)


def test_a_searched_value_outlasts_a_variant_that_rebuilds_its_pool(tmp_path):
    """A variant setting pools.chat.replicas, then another replacing pools.chat whole: the value a plan
    searches on pools.chat.replicas applies last. Merged by a plain update it stayed first, the rebuilt
    pool undid it, and every probe ran the variant's six replicas (the plan answered "1")."""
    from simulator.scenario.load import load_scenario
    scenario = write_tiny_scenario(tmp_path)
    base = Point(str(scenario), (("pools.chat.replicas", 3),
                                 ("pools.chat", {**TINY["pools"][0], "gpu": "h200", "replicas": 6})))
    for n in (1, 4):
        point = base.with_overrides({"pools.chat.replicas": n})
        sc, _ = load_scenario(point.scenario, point.assignments())
        assert sc.pools[0].replicas == n and sc.pools[0].gpu == "h200"


def test_a_variant_is_planned_as_its_overlay(tmp_path, cli):
    """``--variant`` is the scenario's own ``--set``: planning it gives the
    fleet that planning the same keys by hand gives, and plan.json says
    which variant it was."""
    scenario = write_tiny_scenario(tmp_path, variants=[
        {"name": "heavy", "set": {"workload.arrival.rate_per_s": 240}},
        {"name": "short", "set": {"workload.output_tokens": {"dist": "fixed", "value": 16}}}])
    axis = [parse_vary("pools.chat.replicas=1..16")]
    by_hand = plan_fleet(scenario, axis, make_executor("local"), sets={"workload.arrival.rate_per_s": 240})
    named = plan_fleet(scenario, axis, make_executor("local"), variants=["heavy"])
    assert named.best is not None and named.best == by_hand.best
    # the command line wins over the variant, as in ``llmsim run``
    undone = plan_fleet(scenario, axis, make_executor("local"), variants=["heavy"],
                        sets={"workload.arrival.rate_per_s": 60})
    assert undone.best == plan_fleet(scenario, axis, make_executor("local")).best
    r = cli("plan", scenario, "-o", tmp_path / "p", "--vary", "pools.chat.replicas=1..16", "--variant", "heavy",
            "--workers", "1")
    assert r.code == 0, r.err
    written = json.loads((tmp_path / "p" / "plan.json").read_text())
    assert written["best"] == by_hand.best and written["variants"] == ["heavy"] and written["set"] == {}
    assert "--variant heavy" in words(r.out)
    bad = cli("plan", scenario, "-o", tmp_path / "b", "--vary", "pools.chat.replicas=1..16", "--variant", "nope")
    assert bad.code == 2 and "no variant named 'nope'; variants: heavy, short" in words(bad.err)
    typo = cli("plan", scenario, "-o", tmp_path / "b", "--vary", "pools.chat.replicas=1..16", "--variant", "heavvy")
    assert typo.code == 2 and "no variant named 'heavvy' (did you mean heavy?)" in words(typo.err)
    assert not (tmp_path / "b" / "plan.json").exists()
    # a variant that cannot apply is refused when the scenario loads, selected or not
    broken = write_tiny_scenario(tmp_path, variants=[{"name": "broken", "set": {"pools.zz.tp": 2}}])
    for chosen in ([], ["--variant", "broken"]):
        bad = cli("plan", broken, "-o", tmp_path / "b", "--vary", "pools.chat.replicas=1..16", *chosen)
        assert bad.code == 2 and "variants.broken.set" in words(bad.err) and "no item named 'zz'" in words(bad.err)


_KEYS = {"a": lambda v: {"b": {"d": v}, "c": v}, "a.b": lambda v: {"d": v}, "a.c": lambda v: v,
         "a.b.d": lambda v: v, "e": lambda v: v}


@given(st.lists(st.lists(st.tuples(st.sampled_from(sorted(_KEYS)), st.integers(0, 9)), max_size=4), max_size=4))
def test_overlays_merged_in_order_apply_as_one_after_another(overlays):
    from simulator.scenario.variants import merge_overlays
    from simulator.scenario.overrides import apply_override

    overlays = [{k: _KEYS[k](v) for k, v in o} for o in overlays]
    base = {"a": {"b": {"d": 0}, "c": 0}, "e": 0}
    in_turn = json.loads(json.dumps(base))
    for o in overlays:
        for a in overlay_assignments(o):
            apply_override(in_turn, a)
    merged = json.loads(json.dumps(base))
    for a in overlay_assignments(merge_overlays(overlays)):
        apply_override(merged, a)
    assert merged == in_turn


def test_set_assignments_apply_in_order():
    """``--set`` on plan and sweep is applied as ``llmsim run`` applies it:
    in order, so a child key set again after its parent wins."""
    from simulator.cli.options import parse_sets
    from simulator.scenario.overrides import apply_override

    sets = parse_sets(["pools.chat.engine.kv_dtype=fp8", "pools.chat.engine={max_num_seqs: 64}",
                       "pools.chat.engine.kv_dtype=bf16"])
    data = {"pools": [{"name": "chat", "engine": {}}]}
    for a in overlay_assignments(sets):
        apply_override(data, a)
    assert data["pools"][0]["engine"] == {"max_num_seqs": 64, "kv_dtype": "bf16"}


def test_an_autoscaled_pools_initial_count_is_not_a_plan_axis(tmp_path, cli, repo_root):
    chatbot = repo_root / "scenarios" / "chatbot.yaml"
    r = cli("plan", chatbot, "--vary", "pools.free.replicas=1..4")
    assert r.code == 2 and "pools.free.autoscaling.max_replicas" in r.err and "t = 0" in r.err
    # the same pool by its place in the list: planned "3" on it, as if the count were its size
    r = cli("plan", chatbot, "--vary", "pools.0.replicas=1..4")
    assert r.code == 2 and "pools.free.autoscaling.max_replicas" in r.err and "t = 0" in r.err
    sweep = tmp_path / "s.yaml"
    sweep.write_text(f"base: {chatbot}\ngrid: {{pools.paid.replicas: [1, 2]}}\n")
    r = cli("sweep", sweep, "-o", tmp_path / "out")
    assert r.code == 2 and "pools.paid.autoscaling.max_replicas" in r.err
    assert not (tmp_path / "out").exists()


def test_the_pareto_plot_names_every_fleet():
    from simulator.planning.pareto import pareto_figure

    probes = [{"overrides": {"pools.chat.gpu": g, "pools.chat.replicas": n}, "monthly_usd": 1000.0 * n * (1 + k),
               "ttft_p99_ms": 900.0 / n, "slo_met": n >= 3} for k, g in enumerate(("h100-sxm", "h200"))
              for n in (1, 3, 5)]
    ax = pareto_figure(probes, probes[1]).axes[0]
    labels = sorted(t.get_text() for t in ax.texts)
    assert labels == sorted(f"gpu={g}, replicas={n}" for g in ("h100-sxm", "h200") for n in (1, 3, 5))


def test_the_pareto_plot_of_a_slice_prices_the_product():
    """A plan's best line leads with the product (the slice × product.slices); its plot showed the slice's
    cost under an unqualified 'monthly cost' label."""
    from simulator.planning.pareto import pareto_figure

    probes = [{"overrides": {"r": n}, "monthly_usd": 100.0 * n, "product_monthly_usd": 1e5 * n,
               "ttft_p99_ms": 500.0 / n, "slo_met": n > 1} for n in (1, 2, 3)]
    ax = pareto_figure(probes, probes[1]).axes[0]
    assert ax.get_xlabel() == "monthly cost of the product (USD)"
    assert max(x for x, _ in ax.collections[0].get_offsets()) >= 1e5
    alone = [{**p, "product_monthly_usd": p["monthly_usd"]} for p in probes]
    assert pareto_figure(alone, alone[1]).axes[0].get_xlabel() == "monthly cost (USD)"


def test_a_plan_over_seeds_reports_and_ranks_the_worst_seed():
    """An autoscaled fleet's cost differs by seed: plan ranked by the first seed's while the sweep page
    ranks by the worst, so the two picked different fleets of one grid."""
    from simulator.planning.plan import _Prober
    from simulator.planning.point import Point

    prober = _Prober(Point("x.yaml"), [{}, {"seed": 2}], executor=None, store=None)
    rows = [{"seed": 1, "monthly_usd": 19389.0, "gpus": 12, "request_throughput": 30.0, "ttft_p99_ms": 200.0,
             "slo_met": True},
            {"seed": 2, "monthly_usd": 19925.0, "gpus": 13, "request_throughput": 29.0, "ttft_p99_ms": 180.0,
             "slo_met": True}]
    prober.rows[(0, 40)] = rows
    f = prober.figures(0, 40)
    assert (f["monthly_usd"], f["gpus"], f["request_throughput"], f["ttft_p99_ms"]) == (19925.0, 13, 29.0, 200.0)


def test_the_pools_a_plans_own_statements_price():
    from simulator.planning.prices import priced_by

    names = ["chat", "code"]
    assert priced_by([{"pools.chat.usd_per_gpu_hour": 3.0}], names) == {"chat"}
    assert priced_by([{"pools.1.usd_per_gpu_hour": 3.0}, {"pools.chat.gpu": "h200"}], names) == {"code"}
    assert priced_by([{"pools.code": {"gpu": "h200", "usd_per_gpu_hour": 5.0}}], names) == {"code"}
    assert priced_by([{"pools": [{"name": "chat", "usd_per_gpu_hour": 1.0}, {"name": "code"}]}], names) == {"chat"}
    assert priced_by([{"pools.chat.replicas": 3, "workload.duration_s": 9}], names) == frozenset()


def test_a_load_verdict_on_a_window_the_requests_outlast_is_unsure():
    from simulator.metrics.load import CANNOT_TELL, SHORT_WINDOW
    from simulator.metrics.verdict import load_unsure
    assert load_unsure({"overloaded": False, "load": f"{CANNOT_TELL}: no request finished within the window"})
    assert load_unsure({"overloaded": False, "load": f"{SHORT_WINDOW}: offered 1.95 req/s, completed 0.03 req/s"})
    assert not load_unsure({"overloaded": False, "load": "keeps up: offered 1.95 req/s, completed 1.94 req/s"})
    assert not load_unsure({"overloaded": True, "load": "OVERLOADED: the queue grew by 1.9 req/s"})
    assert not load_unsure({})


def test_a_sweep_says_which_points_ran_a_window_their_requests_outlast(tmp_path, cli):
    from test_sweep import write_sweep
    sweep = write_sweep(tmp_path, {"grid": {"pools.chat.replicas": [2, 3]},
                                   "points": [{"workload.num_requests": 20,
                                               "workload.output_tokens": {"dist": "fixed", "value": 300}}]})
    r = cli("sweep", sweep, "-o", tmp_path / "out", "--workers", "1")
    assert r.code == 0, r.err
    said = words(r.err)
    assert ("warning: 2 of 2 points ran a window their requests outlast, too short to tell whether the fleet keeps "
            "up, so their slo_met can pass a fleet smaller than the load needs; the first, workload.num_requests=20, "
            "workload.output_tokens={'dist': 'fixed', 'value': 300}, pools.chat.replicas=2: cannot tell: ") in said, said


def test_a_low_end_the_scenario_allows_nothing_under_is_not_called_a_bound(tmp_path):
    """On the chatbot (the free pool starting at 2 replicas) plan --vary ...max_replicas=2..8 warned that a
    smaller value may pass and to widen the range, and 1..8 was then refused: max_replicas under the
    starting replicas. The warning is kept for a low end with a smaller value the scenario accepts."""
    scaled = [{**TINY["pools"][0], "autoscaling": {"metric": "concurrency", "target": 64, "max_replicas": 4}}]
    (tmp_path / "scaled").mkdir()
    sets = {"workload.num_requests": 40, "workload.arrival.rate_per_s": 10}
    capped = plan_fleet(write_tiny_scenario(tmp_path / "scaled", pools=scaled),
                        [parse_vary("pools.chat.autoscaling.max_replicas=2..3")], make_executor("local"), sets=sets)
    assert capped.best is not None and capped.best["overrides"]["pools.chat.autoscaling.max_replicas"] == 2
    assert not any("low end" in w for w in capped.warnings), capped.warnings
    free = plan_fleet(write_tiny_scenario(tmp_path), [parse_vary("pools.chat.replicas=2..3")], make_executor("local"),
                      sets=sets)
    assert any("the range's low end passed" in w for w in free.warnings), free.warnings
