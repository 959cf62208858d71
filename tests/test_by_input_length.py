"""Percentiles and SLOs by prompt-length bucket (``input_length_buckets``,
results.json ``llmsim.by_input_length``), and their verdicts in
``llmsim check`` and ``llmsim plan``."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from helpers_whatif import SCENARIO, write_scenario
from simulator.metrics.by_input_length import InputLengthBuckets, input_length_block
from simulator.metrics.records import Records
from simulator.metrics.verdict import failures
from simulator.planning.point import summarize
from simulator.runner import simulate
from simulator.scenario.load import load_scenario
from workloads.request import Request, Status

CHECK = "check:\n  set: {workload.num_requests: 120}\n  metrics: [completed]\n"


@settings(max_examples=50, deadline=None)
@given(edges=st.lists(st.integers(1, 3000), min_size=1, max_size=4, unique=True).map(sorted),
       lengths=st.lists(st.integers(1, 4000), min_size=1, max_size=60))
def test_every_request_falls_in_exactly_one_bucket(edges, lengths):
    """Buckets are [0, e1), [e1, e2), … [ek, ∞): a prompt of exactly e_i
    tokens is in the bucket that starts at e_i; the counts add up."""
    reqs = []
    for i, n in enumerate(lengths):
        r = Request(i, float(i), n, 10)
        r.status, r.admitted, r.first_token, r.finish = Status.FINISHED, i + 0.1, i + 0.2, i + 1.0
        reqs.append(r)
    spec = InputLengthBuckets(edges=edges)
    block = input_length_block(Records.of(reqs), spec, 100.0)
    counts = [b["requests"] for b in block["buckets"].values()]
    assert sum(counts) == len(lengths)
    bounds = [0, *edges, None]
    for (label, b), lo, hi in zip(block["buckets"].items(), bounds, bounds[1:]):
        assert b["input_tokens"] == [lo, hi]
        assert b["requests"] == sum(1 for n in lengths if n >= lo and (hi is None or n < hi))
    assert list(block["buckets"]) == spec.labels


def test_bucket_specs_are_checked():
    assert InputLengthBuckets(edges=[4000, 16000]).labels == ["0-4000", "4000-16000", "16000+"]
    with pytest.raises(ValidationError, match="strictly increasing"):
        InputLengthBuckets(edges=[4000, 4000])
    with pytest.raises(ValidationError, match="the buckets of these edges are 0-4000, 4000\\+"):
        InputLengthBuckets(edges=[4000], slo={"<4000": {"ttft_p99_ms": 400}})


def test_a_bad_bucket_target_names_its_key_path(tmp_path):
    from simulator.errors import LlmsimError
    sc = write_scenario(tmp_path, "input_length_buckets: {edges: [500], slo: {500+: {ttft_p99: 400}}}\n")
    with pytest.raises(LlmsimError) as e:
        s, path = load_scenario(sc)
        simulate(s, source=path)
    assert "input_length_buckets.slo.500+.ttft_p99" in str(e.value)


def buckets(short_ms: float, long_ms: float) -> str:
    return ("input_length_buckets: {edges: [500], slo: {0-500: {ttft_p99_ms: %g}, 500+: {ttft_p99_ms: %g}}}\n"
            % (short_ms, long_ms))


def test_results_carry_percentiles_per_bucket_and_longer_prompts_wait_longer(tmp_path):
    sc, path = load_scenario(write_scenario(tmp_path, buckets(5000, 5000)))
    res = simulate(sc, source=path).results
    b = res["llmsim"]["by_input_length"]["buckets"]
    assert b["0-500"]["requests"] + b["500+"]["requests"] == 300
    assert b["0-500"]["median_ttft_ms"] < b["500+"]["median_ttft_ms"]
    assert b["0-500"]["slo"]["met"] and b["500+"]["slo"]["met"]


def test_plan_and_check_require_every_bucket_slo(tmp_path, cli):
    """The fleet-wide SLO holds; the long bucket's target of 1 ms does not:
    plan's row is not met, and check fails naming the bucket, by the name run gives it (plan and check
    once wrote "input 500+ ttft_p99_ms" where run wrote "input 500+: ttft_p99_ms")."""
    sc, path = load_scenario(write_scenario(tmp_path, buckets(5000, 1)))
    res = simulate(sc, source=path).results
    assert res["slo"]["met"]
    row = summarize(res)
    name = "input 500+: ttft_p99_ms"
    assert row["slo_failed"].startswith(f"{name} ") and row["slo_met"] is False, row["slo_failed"]
    assert [f.split(" missed")[0] for f in failures(res)] == [f"SLO {name}"]       # run's exit line
    r = cli("check", write_scenario(tmp_path, buckets(5000, 1) + CHECK, name="b.yaml"))
    assert r.code == 1 and f"small: SLO {name} missed: simulated" in r.out.split("check failed")[1], r.out
    ok = cli("check", write_scenario(tmp_path, buckets(5000, 5000) + CHECK, name="c.yaml"))
    assert ok.code == 0, ok.out
