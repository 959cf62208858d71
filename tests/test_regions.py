"""Client regions: the hash split by share, per-region network latency,
per-region results, and the bad scenarios they can be given."""
from __future__ import annotations

import json
from collections import Counter, defaultdict

import pytest

from simulator.metrics.results import jsonable
from simulator.metrics.table import request_table
from test_fleet import cli_error, run, scenario as fleet_scenario

REGIONS = [{"name": "us-east", "share": 0.6}, {"name": "eu-west", "share": 0.4}]
LIGHT = {"num_requests": 1500, "arrival": {"type": "poisson", "rate_per_s": 10},
         "output_tokens": {"dist": "uniform", "min": 10, "max": 60}}


def scenario(**over) -> dict:
    """test_fleet's one-pool scenario, lightly loaded on two replicas (little queueing)."""
    d = fleet_scenario(seed=5)
    d["workload"] = {**d["workload"], **LIGHT}
    d["pools"][0]["replicas"] = 2
    d.update(over)
    return d


def far_eu(extra_ms: float = 100.0) -> list[dict]:
    """One class: 10 ms each way everywhere, eu-west's ingress ``extra_ms`` more."""
    return [{"name": "default", "network": {"ingress_ms": 10, "egress_ms": 10,
                                            "regions": {"eu-west": {"ingress_ms": 10 + extra_ms}}}}]


@pytest.fixture(scope="module")
def two_regions():
    return run(scenario(regions=REGIONS, classes=far_eu()))


def test_a_far_region_pays_its_extra_ingress_in_ttft(two_regions):
    reg = two_regions.results["llmsim"]["regions"]
    us, eu = reg["us-east"], reg["eu-west"]
    # a lightly loaded fleet: the 100 ms shows up whole at the median, TTFT and E2E alike
    assert eu["median_ttft_ms"] - us["median_ttft_ms"] == pytest.approx(100.0, abs=5.0)
    assert eu["median_e2el_ms"] - us["median_e2el_ms"] == pytest.approx(100.0, abs=25.0)
    assert us["mean_network_ms"] == pytest.approx(20.0) and eu["mean_network_ms"] == pytest.approx(120.0)
    for r in two_regions.requests:
        assert r.net_in == pytest.approx(0.110 if r.region == "eu-west" else 0.010)


def test_the_split_follows_the_shares_and_counts_add_up(two_regions):
    reg = two_regions.results["llmsim"]["regions"]
    n = len(two_regions.requests)
    assert sum(b["requests"] for b in reg.values()) == n
    assert sum(b["completed"] + b["rejected"] + b["cancelled"] for b in reg.values()) == n
    # 1,500 independent requests: 4 standard errors of a 0.4 share is 0.05
    assert reg["eu-west"]["request_fraction"] == pytest.approx(0.4, abs=0.05)
    assert reg["eu-west"]["share"] == pytest.approx(0.4) and reg["us-east"]["share"] == pytest.approx(0.6)
    table = request_table(two_regions.requests)
    assert Counter(table["region"].tolist()) == {k: b["requests"] for k, b in reg.items()}


def test_shares_are_relative_weights():
    """3:2 is the same split as 0.6:0.4 (normalised, like class shares)."""
    a = run(scenario(regions=REGIONS, workload={**scenario()["workload"], "num_requests": 200}))
    b = run(scenario(regions=[{"name": "us-east", "share": 3}, {"name": "eu-west", "share": 2}],
                     workload={**scenario()["workload"], "num_requests": 200}))
    assert [r.region for r in a.requests] == [r.region for r in b.requests]


def test_declaring_regions_changes_nothing_but_the_region_column():
    """The split is a hash, not a random draw: arrivals, lengths and every
    timestamp stay as they were when no class's latency depends on the region."""
    w = {**scenario()["workload"], "num_requests": 300}
    net = [{"name": "default", "network": {"ingress_ms": 10, "egress_ms": 10}}]
    plain = run(scenario(workload=w, classes=net))
    regional = run(scenario(workload=w, classes=net, regions=REGIONS))
    stamps = ("arrival", "input_tokens", "output_tokens", "queued", "admitted", "first_token", "finish")
    for a, b in zip(plain.requests, regional.requests, strict=True):
        assert [getattr(a, s) for s in stamps] == [getattr(b, s) for s in stamps]
        assert a.region == "" and b.region in ("us-east", "eu-west")
    assert plain.results["llmsim"]["regions"] is None


def test_a_session_keeps_its_region_and_the_same_seed_gives_the_same_result():
    w = {"num_sessions": 60, "arrival": {"type": "poisson", "rate_per_s": 2},
         "session": {"type": "chat", "turns": {"dist": "uniform", "min": 2, "max": 4},
                     "think_time_s": {"dist": "fixed", "value": 1.0}},
         "input_tokens": {"dist": "uniform", "min": 50, "max": 200},
         "output_tokens": {"dist": "uniform", "min": 10, "max": 40}}
    d = scenario(workload=w, regions=REGIONS, classes=far_eu())
    first, again = run(d), run(d)
    by = defaultdict(set)
    for r in first.requests:
        by[r.session].add(r.region)
    assert all(len(v) == 1 for v in by.values()) and len(by) == 60
    assert {next(iter(v)) for v in by.values()} == {"us-east", "eu-west"}

    def plain(res):
        return json.loads(json.dumps(jsonable(res)))

    assert plain(first.results) == plain(again.results)
    assert first.results["llmsim"]["regions"]["eu-west"]["sessions"] == sum(
        1 for v in by.values() if v == {"eu-west"})


# -- bad input ----------------------------------------------------------------------

def test_a_class_naming_an_undeclared_region(tmp_path, capsys):
    d = scenario(regions=REGIONS, classes=[{"name": "default", "network": {"regions": {"ap-south": {
        "ingress_ms": 200}}}}])
    err = cli_error(tmp_path, d, capsys)
    assert "classes[0].network.regions.ap-south" in err and "us-east, eu-west" in err


def test_per_region_latency_without_regions(tmp_path, capsys):
    err = cli_error(tmp_path, scenario(classes=far_eu()), capsys)
    assert "classes[0].network.regions.eu-west" in err and "declares no regions" in err


@pytest.mark.parametrize("regions, key", [
    ([{"name": "a", "share": 1}, {"name": "a", "share": 2}], "regions[1].name"),
    ([{"name": "a", "share": 0}], "regions[0].share"),
    ([{"name": "a"}], "regions[0].share"),
])
def test_bad_regions(tmp_path, capsys, regions, key):
    assert key in cli_error(tmp_path, scenario(regions=regions), capsys)


def test_the_region_and_bucket_blocks_read_over_the_fleets_duration(monkeypatch):
    """The classes read over results.json's ``duration`` (to the last request's end), the regions and
    prompt-length buckets over the run's end: two clocks in one report, for blocks that keep no rate
    today, so nothing moved, but a throughput added to either would not add up to the fleet's."""
    from simulator.metrics import by_input_length, regions, results

    read = []

    def noted(*args, duration=None, **kw):
        read.append(duration)
        return results.compute_results(*args, duration=duration, **kw)

    monkeypatch.setattr(regions, "compute_results", noted)
    monkeypatch.setattr(by_input_length, "compute_results", noted)
    # traffic that goes quiet 4 s before the window's end: the run lasts to 10 s, its requests end before
    quiet = {**LIGHT["arrival"], "spikes": [{"start_s": 6, "duration_s": 4, "multiplier": 1e-6}]}
    w = {**{k: v for k, v in scenario()["workload"].items() if k != "num_requests"}, "duration_s": 10,
         "arrival": quiet}
    out = run(scenario(workload=w, regions=REGIONS, input_length_buckets={"edges": [500]})).results
    assert out["duration"] < out["llmsim"]["simulated_seconds"] == 10
    assert len(read) == 4 and set(read) == {out["duration"]}, (read, out["duration"])
