"""llmsim.energy: GPU power from the busy time's activity, node overhead, PUE, the grid, the month."""
from __future__ import annotations

import math

import pytest
from hypothesis import given, settings, strategies as st

from simulator.metrics.energy import GRIDS, EnergySpec, PoolPower, activity, energy_block
from simulator.profiles import load_hardware
from simulator.runner import simulate
from simulator.scenario.schema import Scenario

H100 = load_hardware("h100-sxm")
SMALL = {"num_requests": 4, "arrival": {"type": "poisson", "rate_per_s": 2.0},
         "input_tokens": {"dist": "fixed", "value": 64}, "output_tokens": {"dist": "fixed", "value": 8}}


def _scenario(workload: dict, **extra) -> Scenario:
    return Scenario.model_validate({"name": "energy", "seed": 5, "workload": workload,
                                    "pools": [{"model": "llama-3-8b", "gpu": "h100-sxm"}], **extra})


def _energy(workload: dict, **extra) -> dict:
    return simulate(_scenario(workload, **extra)).results["llmsim"]["energy"]


def test_an_idle_fleet_draws_idle_power():
    # two short requests 100 s apart: the replica iterates for well under a second of the window
    e = _energy({"num_requests": 2, "arrival": {"type": "poisson", "rate_per_s": 0.01},
                 "input_tokens": {"dist": "fixed", "value": 32}, "output_tokens": {"dist": "fixed", "value": 4}})
    p = e["pools"]["main"]
    assert p["busy_fraction"] < 0.01
    assert p["mean_w_per_gpu"] == pytest.approx(H100.power.idle_w, rel=0.01)
    assert e["node_kwh"] == pytest.approx(0.43 * e["gpu_kwh"])
    assert e["window_kwh"] == pytest.approx(1.56 * 1.43 * e["gpu_kwh"])


def test_a_saturated_fleet_draws_near_tdp():
    # long prompts all at once: compute-bound prefill back to back for the whole window
    e = _energy({"num_requests": 120, "arrival": {"type": "poisson", "rate_per_s": 1000.0},
                 "input_tokens": {"dist": "fixed", "value": 4096}, "output_tokens": {"dist": "fixed", "value": 1}})
    p = e["pools"]["main"]
    assert p["busy_fraction"] > 0.97
    assert p["compute_activity"] > 0.8 > p["memory_activity"]
    assert p["mean_w_per_gpu"] > 0.85 * H100.power.tdp_w
    assert p["busy_w_per_gpu"] <= H100.power.tdp_w


def test_a_large_decode_batch_is_memory_active():
    e = _energy({"num_requests": 256, "arrival": {"type": "poisson", "rate_per_s": 1000.0},
                 "input_tokens": {"dist": "fixed", "value": 512}, "output_tokens": {"dist": "fixed", "value": 400}})
    p = e["pools"]["main"]
    assert p["memory_activity"] > p["compute_activity"]
    assert H100.power.idle_w < p["busy_w_per_gpu"] <= H100.power.tdp_w


def test_month_carbon_price_and_grid_follow_the_scenario():
    wl = {"num_requests": 40, "arrival": {"type": "poisson", "rate_per_s": 4.0},
          "input_tokens": {"dist": "fixed", "value": 256}, "output_tokens": {"dist": "fixed", "value": 64}}
    res = simulate(_scenario(wl, energy={"pue": 1.1, "node_overhead": 0.2, "grid": "france",
                                         "usd_per_kwh": 0.12})).results
    e, c = res["llmsim"]["energy"], res["llmsim"]["cost"]
    span = res["llmsim"]["simulated_seconds"]
    # the bill's rule (window × 730 h) scales the energy too
    assert e["kwh_per_month"] == pytest.approx(e["window_kwh"] / span * 730 * 3600)
    assert e["co2e_kg_per_month"] == pytest.approx(e["kwh_per_month"] * GRIDS["france"] / 1e3)
    assert e["window_kwh"] == pytest.approx(e["gpu_kwh"] * 1.2 * 1.1)
    assert e["joules_per_output_token"] == pytest.approx(e["window_kwh"] * 3.6e6 / res["total_output_tokens"])
    assert c["power"]["monthly_usd"] == pytest.approx(e["kwh_per_month"] * 0.12)
    assert c["power"]["monthly_total_usd"] == pytest.approx(c["monthly_usd"] + c["power"]["monthly_usd"])
    # the product's power beside its GPU bill, in its headline too (it was the slice's alone, in a table)
    from simulator.metrics.product import product_block
    from simulator.report.fleet_summary import headline

    prod = product_block(10, res["llmsim"])
    assert prod["power_monthly_usd"] == pytest.approx(10 * c["power"]["monthly_usd"])
    assert "/month of power (energy.usd_per_kwh)" in headline({**res["llmsim"], "product": prod}).plain
    # no price: no power line (a GPU-hour price is taken to include power)
    plain = simulate(_scenario(wl)).results["llmsim"]
    assert "power" not in plain["cost"] and "power_monthly_usd" not in plain["product"]
    own = simulate(_scenario(wl, energy={"grid_g_per_kwh": 100.0})).results["llmsim"]["energy"]
    assert own["grid_g_co2e_per_kwh"] == 100.0 and "scenario" in own["grid_source"]


def test_the_month_follows_peak_window_as_the_bill_does():
    sc = Scenario.model_validate({
        "name": "energy-peak", "seed": 2,
        "workload": {"duration_s": 120, "arrival": {"type": "poisson", "rate_per_s": 6.0, "profile": {
            "type": "sinusoid", "period_s": 86400, "peak_to_trough": 4, "peak_at_s": 60}},
            "input_tokens": {"dist": "fixed", "value": 128}, "output_tokens": {"dist": "fixed", "value": 32}},
        "pools": [{"model": "llama-3-8b", "gpu": "h100-sxm", "replicas": 2}],
        "cost": {"monthly": {"method": "peak_window"}}})
    ll = simulate(sc).results["llmsim"]
    e, c = ll["energy"], ll["cost"]
    # a fixed pool resized hourly: energy per GPU-hour × the hourly GPU-hours, as dollars per GPU-hour
    gpu_hours_day = sum(c["monthly_hourly"]["gpus"])
    per_gpu_hour = e["window_kwh"] / c["gpu_hours"]
    assert e["kwh_per_month"] == pytest.approx(per_gpu_hour * gpu_hours_day * 730 / 24)
    assert e["kwh_per_month"] / e["window_kwh"] == pytest.approx(c["monthly_usd"] / c["window_usd"])


def test_an_autoscaled_product_slice_scales_its_month_to_the_product():
    """chatbot (the case study not run elsewhere at check size): two autoscaled
    pools, a warm standby, peak_window, 1/2000 of the product."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from helpers_case_studies import path_of
    from simulator.scenario.load import load_scenario

    sc, path = load_scenario(path_of("chatbot"), ["workload.duration_s=60"])
    ll = simulate(sc, source=path).results["llmsim"]
    e = ll["energy"]
    assert e["kwh_per_month"] > 0 and e["co2e_kg_per_month"] > 0 and e["joules_per_output_token"] > 0
    assert ll["product"]["kwh_per_month"] == pytest.approx(2000 * e["kwh_per_month"])
    for name, p in e["pools"].items():     # a warm standby and a starting replica draw idle power
        assert H100.power.idle_w <= p["mean_w_per_gpu"] <= p["busy_w_per_gpu"] <= H100.power.tdp_w, name
    assert sum(p["gpu_kwh"] for p in e["pools"].values()) == pytest.approx(e["gpu_kwh"])


@pytest.mark.parametrize("energy, fragment", [
    ({"pue": 0.9}, "at least 1"), ({"pue": -1.2}, "at least 1"), ({"grid": "mars"}, "unknown grid 'mars'"),
    ({"node_overhead": -0.1}, "node_overhead"), ({"grid": "us", "grid_g_per_kwh": 300}, "not both"),
    ({"usd_per_kwh": -1}, "usd_per_kwh"), ({"pue": float("nan")}, "pue")])
def test_bad_energy_values_are_refused(energy, fragment):
    with pytest.raises(ValueError) as e:
        EnergySpec.model_validate(energy)
    assert fragment in str(e.value)


def test_a_gpu_profile_with_idle_at_or_above_tdp_is_refused():
    from simulator.profiles.hardware import Power

    with pytest.raises(ValueError, match="below tdp_w"):
        Power(tdp_w=700, idle_w=700)


def test_every_builtin_gpu_has_a_power_block():
    from simulator.profiles.hardware import builtin_hardware

    for name, g in builtin_hardware().items():
        assert g.power is not None and 0 < g.power.idle_w < g.power.tdp_w and g.power.source, name


# -- invariants --------------------------------------------------------------------------------------------

def _pool(idle: float, tdp: float, gpu_s: float, busy_frac: float, uc: float, um: float) -> PoolPower:
    return PoolPower("p", "g", idle, tdp, gpu_s, busy_frac * gpu_s, uc, um)


powers = st.tuples(st.floats(0, 300), st.floats(1, 1500)).map(lambda t: (min(t), max(t) + 1))


@settings(max_examples=200, deadline=None)
@given(powers, st.floats(0, 1e7, allow_subnormal=False), st.floats(0, 1), st.floats(0, 1), st.floats(0, 3), st.floats(0, 3),
       st.floats(0, 1), st.integers(0, 10**9))
def test_energy_is_non_negative_bounded_and_monotone_in_load(p, gpu_s, b1, db, uc, um, more, out_tokens):
    idle, tdp = p
    lo = _pool(idle, tdp, gpu_s, b1 * (1 - db), uc * more, um * more)
    hi = _pool(idle, tdp, gpu_s, b1, uc, um)              # more busy time, more activity
    assert 0 <= lo.gpu_joules <= hi.gpu_joules * (1 + 1e-12) + 1e-9
    assert idle * gpu_s * (1 - 1e-12) <= hi.gpu_joules <= tdp * gpu_s * (1 + 1e-12)
    block = energy_block([hi], EnergySpec(), max(gpu_s, 1.0), out_tokens, 0, None)
    j = block["joules_per_output_token"]
    assert (j is None) == (out_tokens == 0)
    assert j is None or (math.isfinite(j) and j >= 0)
    assert block["window_kwh"] >= block["gpu_kwh"] >= 0


@settings(max_examples=200, deadline=None)
@given(st.floats(0, 1e18), st.floats(0, 1e18), st.floats(1e-3, 1e6))
def test_activity_is_a_capped_sum(flops, nbytes, busy):
    uc, um, a = activity(flops, nbytes, busy, 1e15, 3e12)
    assert uc >= 0 and um >= 0 and 0 <= a <= 1 and a == min(1.0, uc + um)
    assert activity(flops, nbytes, 0.0, 1e15, 3e12) == (0.0, 0.0, 0.0)


def test_energy_grows_with_load_end_to_end():
    def kwh(rate: float) -> float:
        e = _energy({"duration_s": 60, "arrival": {"type": "poisson", "rate_per_s": rate},
                     "input_tokens": {"dist": "fixed", "value": 512}, "output_tokens": {"dist": "fixed", "value": 64}})
        return e["gpu_kwh"] * 3600 / 60                  # mean kW over the (near) fixed window

    loads = [kwh(r) for r in (0.5, 4.0, 16.0)]
    assert loads == sorted(loads) and loads[0] < loads[-1]


def test_a_gpu_profile_without_power_leaves_the_block_empty_and_says_why(tmp_path):
    import yaml

    from simulator.profiles.loader import builtin_dir

    data = yaml.safe_load((builtin_dir("hardware_profiles") / "h100-sxm.yaml").read_text())
    del data["power"]
    path = tmp_path / "nopower.yaml"
    path.write_text(yaml.safe_dump({**data, "name": "nopower"}))
    sc = Scenario.model_validate({"name": "e", "workload": SMALL, "energy": {"usd_per_kwh": 0.1},
                                  "pools": [{"model": "llama-3-8b", "gpu": str(path)}]})
    ll = simulate(sc).results["llmsim"]
    assert "no power block" in ll["energy"]["why_none"] and "nopower" in ll["energy"]["why_none"]
    assert "power" not in ll["cost"]
    # the terminal summary says so where the energy line would be, not only results.json
    from rich.console import Console

    from simulator.report.summary import summary_table

    console = Console(width=200, record=True)
    console.print(summary_table({"llmsim": ll}))
    assert "energy a month: none" in (text := console.export_text()) and "no power block" in text and "nopower" in text


def test_a_plan_weighs_the_power_it_is_given_a_price_for():
    """With energy.usd_per_kwh a scenario prices power apart from the GPU-hours, and llmsim.product and
    the run's first line give it; plans and sweeps ranked and plotted by the GPU-hours alone."""
    from simulator.planning.pareto import month_with_power, pareto_figure
    from simulator.planning.plan import _ranked
    from simulator.planning.point import summarize

    row = summarize(simulate(_scenario(SMALL, energy={"usd_per_kwh": 0.2})).results)
    assert row["power_monthly_usd"] > 0
    assert month_with_power(row) == pytest.approx(row["monthly_usd"] + row["power_monthly_usd"])
    assert summarize(simulate(_scenario(SMALL)).results)["power_monthly_usd"] is None
    cool = {"slo_met": True, "monthly_usd": 1200.0, "power_monthly_usd": 100.0, "ttft_p99_ms": 50.0}
    hot = {"slo_met": True, "monthly_usd": 1000.0, "power_monthly_usd": 500.0, "ttft_p99_ms": 50.0}
    assert _ranked([hot, cool], max_rate=False)[0] is cool
    assert "with power" in pareto_figure([hot, cool], cool).axes[0].get_xlabel()
