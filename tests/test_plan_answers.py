"""What ``llmsim plan`` tells its reader beside the fleet: the price each GPU was billed at, the SLO
verdict at any terminal width, its exit code, and the product's bill at each confidence."""
from __future__ import annotations

import json
from types import SimpleNamespace

from hypothesis import given, strategies as st

from simulator.cli import output
from simulator.cli.output import fleet_answer
from simulator.planning.confidence import by_confidence, confidence_text
from simulator.planning.prices import PoolPrice, Prices, gpu_varied_pools, pinned_prices, priced_by
from test_sweep import TINY, words, write_tiny_scenario

GPUS = "pools.chat.gpu=h100-sxm,a100-sxm-80gb"
# a few probes, each a fraction of a second; 100 requests, so a p99 has one above it (no few-samples warning)
SMALL = ("--set", "workload.num_requests=100", "--workers", "1")
# the same 100 requests over 10 s, a window they finish in: no warning of a window too short to judge the load
HELD = ("--set", "workload.arrival.rate_per_s=10")


def headers(printed: str) -> list[str]:
    """The table's column names, each header's wrapped lines joined."""
    rows = [[c.strip() for c in line.split("┃")[1:-1]] for line in printed.splitlines() if line.startswith("┃")]
    return ["".join(parts) for parts in zip(*rows)]


def pinned_scenario(folder, price=3.0, **top):
    pool = {**TINY["pools"][0], "usd_per_gpu_hour": price}
    return write_tiny_scenario(folder, pools=[pool], **top)


def test_a_pinned_price_meeting_a_gpu_axis_is_said_and_recorded(tmp_path, cli):
    out = tmp_path / "plan"
    r = cli("plan", pinned_scenario(tmp_path), "-o", out, "--vary", "pools.chat.replicas=1..4", "--vary", GPUS,
            *SMALL, *HELD)
    assert r.code == 0, r.err
    warning = words(r.err)
    assert warning.startswith("warning: pool chat's price is pinned at $3.00/GPU-h"), r.err
    assert "h100-sxm $2.99, a100-sxm-80gb $1.99" in warning
    assert "--set pools.chat.usd_per_gpu_hour=null" in warning
    plan = json.loads((out / "plan.json").read_text())
    (pin,) = plan["pinned_prices"]
    assert pin["pool"] == "chat" and pin["usd_per_gpu_hour"] == 3.0
    assert pin["profile_usd_per_gpu_hour"] == {"h100-sxm": 2.99, "a100-sxm-80gb": 1.99}
    assert plan["warnings"] == [pin["warning"]] and plan["gpu_varied"] == ["chat"]
    # each row shows what it was billed at, beside its GPU
    assert [c["usd_per_gpu_hour"] for c in plan["candidates"]] == [{"chat": 3.0}] * 2
    columns = headers(r.out)
    assert columns.index("usd_per_gpu_hour") == columns.index("pools.chat.gpu") + 2 < columns.index("slo_met")


def test_each_gpu_at_its_own_price_or_a_price_the_user_sets_draws_no_warning(tmp_path, cli):
    scenario = pinned_scenario(tmp_path)
    r = cli("plan", scenario, "-o", tmp_path / "own", "--vary", "pools.chat.replicas=1..4", "--vary", GPUS,
            "--set", "pools.chat.usd_per_gpu_hour=null", *SMALL, *HELD)
    assert r.code == 0 and "warning" not in r.err, r.err
    plan = json.loads((tmp_path / "own" / "plan.json").read_text())
    assert plan["pinned_prices"] == [] and plan["warnings"] == []
    billed = {c["overrides"]["pools.chat.gpu"]: c["usd_per_gpu_hour"]["chat"] for c in plan["candidates"]}
    assert billed == {"h100-sxm": 2.99, "a100-sxm-80gb": 1.99}
    # the command line's own price is the user's statement, not a default met by surprise
    plain = write_tiny_scenario(tmp_path)
    r = cli("plan", plain, "-o", tmp_path / "set", "--vary", "pools.chat.replicas=1..4", "--vary", GPUS,
            "--set", "pools.chat.usd_per_gpu_hour=2.5", *SMALL, *HELD)
    assert r.code == 0 and "warning" not in r.err, r.err


def test_a_pinned_price_is_found_however_the_gpu_is_varied(tmp_path):
    scenario = pinned_scenario(tmp_path)
    prices = Prices(scenario, {})
    stated = prices.of({})
    for key in ("pools.chat.gpu", "pools.0.gpu"):
        runs = [prices.of({key: g}) for g in ("h100-sxm", "h200")]
        (pin,) = pinned_prices(runs, stated)
        assert pin["gpus"] == ["h100-sxm", "h200"] and pin["usd_per_gpu_hour"] == 3.0
    # a price varied with the GPU (crossed, or per choice) is not one price for every GPU
    crossed = [prices.of({"pools.chat.gpu": g, "pools.chat.usd_per_gpu_hour": p})
               for g in ("h100-sxm", "h200") for p in (2, 3)]
    assert gpu_varied_pools(crossed) == ["chat"] and pinned_prices(crossed, stated) == []
    # one GPU: the pinned price is the scenario's rate for it, nothing to say
    assert pinned_prices([prices.of({"pools.chat.replicas": n}) for n in (1, 2)], stated) == []
    # one other GPU (a single choice, or --set) is billed at a rate written for another
    (one,) = pinned_prices([prices.of({"pools.chat.gpu": "h200", "pools.chat.replicas": n}) for n in (1, 2)], stated)
    assert one["gpus"] == ["h200"] and "written for h100-sxm" in one["warning"]
    # one point pricing its own GPU leaves the others' at the pin: warned for them (it was decided over
    # every point at once, and a sweep of {b200 at $6} and {h200} billed h200 at the pin in silence)
    own = {"pools.chat.gpu": "b200", "pools.chat.usd_per_gpu_hour": 6.0}
    runs, overrides = [prices.of(own), prices.of({"pools.chat.gpu": "h200"})], [own, {"pools.chat.gpu": "h200"}]
    (mixed,) = pinned_prices(runs, stated, restated=[priced_by([o], list(stated)) for o in overrides])
    assert mixed["gpus"] == ["h200"] and mixed["usd_per_gpu_hour"] == 3.0


_GPU = st.sampled_from(["h100-sxm", "h200", "a100-sxm-80gb"])
_PIN = st.sampled_from([None, 2.0, 3.0])


@given(st.lists(st.tuples(_GPU, _PIN), min_size=1, max_size=6), _PIN, _GPU)
def test_a_warning_names_only_a_gpu_axis_billed_at_one_price_the_scenario_pins(runs, stated_pin, stated_gpu):
    """Warned exactly when one price the scenario pins bills a GPU it was not written for: another GPU
    on an axis, or a single other GPU the plan sets."""
    pools = [{"chat": PoolPrice(g, p or 1.0, p)} for g, p in runs]
    warned = pinned_prices(pools, {"chat": PoolPrice(stated_gpu, stated_pin or 1.0, stated_pin)})
    gpus, pins = {g for g, _ in runs}, {p for _, p in runs}
    expected = gpus != {stated_gpu} and len(pins) == 1 and None not in pins and pins == {stated_pin}
    assert bool(warned) == expected
    # nulling the price (each GPU at its profile's) never warns
    assert pinned_prices([{"chat": PoolPrice(g, 1.0, None)} for g, _ in runs], {"chat": PoolPrice("h200", 1.0, None)}) == []


def test_the_slo_verdict_stays_at_80_columns_and_the_hint_names_plan_json(tmp_path, cli, monkeypatch):
    monkeypatch.setattr(output.console, "_width", 80)
    monkeypatch.chdir(tmp_path)
    r = cli("plan", write_tiny_scenario(tmp_path).name, "-o", "plan", "--vary", "pools.chat.replicas=1..4",
            "--vary", GPUS, *SMALL)
    assert r.code == 0, r.err
    table = r.out.split("searched ")[0]
    assert "slo_met" in headers(table) and ("True" in table and "False" in table), r.out
    assert "left out at 80 columns" in words(table) and "failed_slo" in words(table)
    assert "--json" not in table and "plan/plan.json holds every figure" in words(table)
    # a plain plan says its verdict has no error margin, and how to ask for one
    assert "no margin for llmsim's prediction error; --confidence 0.9" in words(r.out)


def test_no_feasible_fleet_is_a_verdict_exit_1_not_refused_input(tmp_path, cli):
    scenario = write_tiny_scenario(tmp_path, slo={"ttft_p99_ms": 300, "tpot_p99_ms": 1})
    out = tmp_path / "plan"
    r = cli("plan", scenario, "-o", out, "--vary", "pools.chat.replicas=1..2", *SMALL)
    assert r.code == 1, r.out + r.err
    assert "no combination meets the SLO" in r.err and "error:" not in r.err
    assert json.loads((out / "plan.json").read_text())["best"] is None
    assert (out / "pareto.png").is_file() and (out / "report.html").is_file()
    bad = cli("plan", scenario, "-o", tmp_path / "bad", "--vary", "pools.chat.replicas=2..1")
    assert bad.code == 2 and not (tmp_path / "bad" / "plan.json").exists()


def _level(replicas, gpus, usd, slices):
    best = {"overrides": {"pools.chat.replicas": replicas}, "gpus": gpus, "monthly_usd": usd,
            "product_gpus": gpus * slices, "product_monthly_usd": usd * slices, "slo_bounds_ms": {}}
    return SimpleNamespace(best=best)


def test_the_confidence_lines_give_the_product_as_the_best_line_does():
    block = by_confidence({0.5: _level(12, 96, 210_240.0, 64), 0.9: _level(13, 104, 227_760.0, 64)})
    assert block["product_monthly_difference_usd"] == 64 * 17_520.0
    lines = confidence_text(block, fleet_answer, 1).splitlines()[1:]       # after the line saying what a level means
    assert lines[0] == ("at 50 %: pools.chat.replicas=12  (the product: 6,144 GPUs, $13,455,360/month; "
                        "the simulated slice: 96 GPUs, $210,240/month)")
    assert lines[2] == ("the higher confidence costs the product $1,121,280/month more "
                        "(the simulated slice $17,520/month)")
    whole = confidence_text(by_confidence({0.5: _level(2, 2, 4365.0, 1), 0.9: _level(3, 3, 6548.0, 1)}),
                            fleet_answer, 1).splitlines()[1:]
    assert whole == ["at 50 %: pools.chat.replicas=2  (the fleet: 2 GPUs, $4,365/month)",
                     "at 90 %: pools.chat.replicas=3  (the fleet: 3 GPUs, $6,548/month)",
                     "the higher confidence costs $2,183/month more"]


def test_what_a_confidence_costs_counts_the_power_where_it_is_priced():
    """Plans rank by the GPU bill plus the power; the difference between levels left the power out."""
    lo, hi = _level(2, 2, 4365.0, 1), _level(3, 3, 6548.0, 1)
    for level, watts in ((lo, 1000.0), (hi, 1500.0)):
        level.best.update(power_monthly_usd=watts, product_power_monthly_usd=watts)
    block = by_confidence({0.5: lo, 0.9: hi})
    assert block["monthly_difference_usd"] == 6548.0 + 1500.0 - 4365.0 - 1000.0
    assert block["levels"]["0.9"]["power_monthly_usd"] == 1500.0
    assert confidence_text(block, fleet_answer, 1).splitlines()[2] == \
        "at 90 %: pools.chat.replicas=3  (the fleet: 3 GPUs, $6,548/month + $1,500 power)"


def test_a_one_gpu_fleet_is_one_gpu():
    assert fleet_answer({"gpus": 1, "monthly_usd": 4380.0}) == "the fleet: 1 GPU, $4,380/month"
    assert fleet_answer({"gpus": 2, "monthly_usd": 8760.0, "product_gpus": 1, "product_monthly_usd": 4380.0}) == \
        "the product: 1 GPU, $4,380/month; the simulated slice: 2 GPUs, $8,760/month"


def test_each_level_gives_its_bounds_and_the_lines_say_the_confidence_is_one_sided():
    """A run's 90 % interval is two-sided, a plan's 90 % one-sided: the plan says which, and each level
    gives the bounds it judged the targets by (they were only in plan.json)."""
    level = _level(3, 3, 6548.0, 1)
    level.best["slo_bounds_ms"] = {"ttft_p99_ms": 147.23, "tpot_p99_ms": 19.51}
    lines = confidence_text(by_confidence({0.9: level}), fleet_answer, 1).splitlines()
    assert "one-sided" in lines[0] and "50 % being the bias-corrected prediction" in lines[0]
    assert lines[1].endswith("; bounds (ms): tpot_p99_ms 19.5, ttft_p99_ms 147.2")


def test_the_confidence_line_claims_each_target_not_all_together_and_names_the_seeds():
    """Each target is judged at its own bound (metrics.intervals.targets_at_confidence): "the probability
    that every SLO target holds" claimed a joint probability, lower than any one target's where several
    bind, and did not say whether the bounds spanned the traffic's spread (--seeds) or not."""
    block = by_confidence({0.9: _level(3, 3, 6548.0, 1)})
    one = confidence_text(block, fleet_answer, 1).splitlines()[0]
    assert "each SLO target holds, judged one target at a time (not all together)" in one
    assert "every SLO target holds" not in one
    assert "one seed's traffic (--seeds N adds the traffic's spread)" in one
    assert "and the spread of 3 seeds' traffic" in confidence_text(block, fleet_answer, 3).splitlines()[0]


def test_a_sliced_plan_at_a_confidence_prints_the_products_bill(tmp_path, cli):
    scenario = write_tiny_scenario(tmp_path, product={"slices": 4}, slo={"ttft_p99_ms": 2000, "tpot_p99_ms": 60})
    r = cli("plan", scenario, "-o", tmp_path / "plan", "--vary", "pools.chat.replicas=1..4", "--confidence", "0.9",
            *SMALL)
    assert r.code == 0, r.err
    for line in r.out.splitlines():
        if line.startswith(("at 50 %:", "at 90 %:")) and "no fleet" not in line:
            assert "(the product: " in line, r.out
    assert "no margin for llmsim's prediction error" not in words(r.out)


@given(st.floats(min_value=0.001, max_value=1e6, allow_nan=False), st.floats(min_value=0.001, max_value=1e6))
def test_a_latency_past_its_target_reads_past_it(value, target):
    """A miss is never printed as equal to its target ("25.0 ms > 25 ms" for 25.01): enough decimals are
    shown to tell them apart, up to four."""
    from simulator.metrics.verdict import ms_past

    if value <= target or value - target < 1e-4:
        return
    for grouped in (True, False):
        shown = float(ms_past(value, target, grouped).removesuffix(" ms").replace(",", ""))
        assert shown != target


def test_a_plan_over_product_slices_ranks_and_says_it_ranks_by_the_products_month():
    """Candidates slicing one product differently (4 slices of 2 GPUs, 1 slice of 2): the slice's bill
    ranked the 4-slice product, 4 times dearer, first."""
    from simulator.planning.plan import Plan, _ranked
    four = {"slo_met": True, "monthly_usd": 4365.0, "product_monthly_usd": 17461.6, "power_monthly_usd": 100.0,
            "product_power_monthly_usd": 400.0}
    one = {"slo_met": True, "monthly_usd": 4365.0, "product_monthly_usd": 4365.0, "power_monthly_usd": 100.0,
           "product_power_monthly_usd": 100.0}
    assert _ranked([four, one], max_rate=False) == [one, four]
    plan = Plan("s.yaml", "min", {"key": "k", "range": [1, 2]}, [0], [one, four])
    assert plan.to_json()["rank_by"] == "product_monthly_usd + product_power_monthly_usd"
