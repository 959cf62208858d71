"""The overload verdict: a fleet offered more than it serves says so, and `llmsim check` fails it."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from simulator.metrics.load import load_block
from simulator.metrics.records import Records
from workloads.rejection import Rejection
from workloads.request import Status

SCENARIO = """\
name: {name}
seed: 3
workload:
  duration_s: 60
  arrival: {{type: poisson, rate_per_s: {rate}}}
  input_tokens: {{dist: uniform, min: 16, max: 1500}}
  output_tokens: {{dist: uniform, min: 100, max: 400}}
pools:
  - name: main
    model: llama-3-8b
    gpu: h100-sxm
    engine: {{max_num_seqs: 32, max_num_batched_tokens: 1024}}
{extra}"""


def _scenario(tmp_path: Path, name: str, rate: float, extra: str = "") -> Path:
    p = tmp_path / f"{name}.yaml"
    p.write_text(SCENARIO.format(name=name, rate=rate, extra=extra))
    return p


def test_run_exits_1_on_a_missed_slo_or_overload_unless_told_not_to(tmp_path, cli):
    assert cli("run", _scenario(tmp_path, "fine", 4, "slo: {ttft_p99_ms: 5000}\n")).code == 0
    missed = cli("run", _scenario(tmp_path, "tight", 4, "slo: {ttft_p99_ms: 1}\n"), "--json")
    assert missed.code == 1 and json.loads(missed.out)["slo"]["met"] is False     # the JSON still printed
    assert missed.err.startswith("exit 1: SLO ttft_p99_ms missed")
    over = cli("run", _scenario(tmp_path, "over", 20))
    assert over.code == 1 and "load OVERLOADED" in over.err
    assert cli("run", _scenario(tmp_path, "over", 20), "--exit-zero").code == 0


def test_an_overloaded_fleet_says_so_and_check_fails_it_without_an_slo(tmp_path, cli):
    # one replica serves ~12 req/s of this traffic: 20 offered is overload, 10 is not
    over = cli("run", _scenario(tmp_path, "over", 20), "--json")
    load = __import__("json").loads(over.out)["llmsim"]["load"]
    assert load["overloaded"] and load["offered_rps"] == pytest.approx(20, rel=0.1)
    assert load["completed_rps"] < 0.7 * load["offered_rps"]
    assert load["queued_at_end"] > load["queued_at_mid"] > 0 and load["queue_growth_rps"] > 1
    text = cli("run", _scenario(tmp_path, "over", 20))
    assert "Load: OVERLOADED" in text.out.splitlines()[1]
    r = cli("check", _scenario(tmp_path, "over", 20))
    assert r.code == 1 and "OVERLOADED" in r.out
    ok = cli("check", _scenario(tmp_path, "fine", 10))
    assert ok.code == 0 and "keeps up" in ok.out


def _records(arrival, admitted, finish, status, reasons=None) -> Records:
    """Records of these columns; a rejected request shed by admission control unless ``reasons`` says why."""
    n = len(arrival)
    status = np.array(status, np.int8)
    shed = np.where(status == int(Status.REJECTED), int(Rejection.QUEUE_FULL), 0)
    cols = {"arrival": np.array(arrival, float), "admitted": np.array(admitted, float),
            "finish": np.array(finish, float), "status": status,
            "reject_reason": shed.astype(np.int8) if reasons is None else np.array(reasons, np.int8)}
    assert all(len(v) == n for v in cols.values())
    return Records(cols)


def test_a_steady_queue_is_not_overload_and_a_growing_one_is():
    t = np.arange(0, 100, 0.1)          # 10 req/s for 100 s
    fin = int(Status.FINISHED)
    steady = _records(t, t + 0.5, t + 1.0, [fin] * t.size)   # each waits 0.5 s: a queue of ~5, level
    b = load_block(steady, 100.0)
    assert not b["overloaded"] and b["queued_at_end"] <= 6 and b["offered_rps"] == pytest.approx(10, rel=0.01)
    # served at 5 req/s in arrival order: the queue grows by 5 req/s
    served = np.arange(t.size) * 0.2
    growing = _records(t, served, served + 0.2, [fin] * t.size)
    b = load_block(growing, 100.0)
    assert b["overloaded"] and b["queue_growth_rps"] == pytest.approx(5, rel=0.1)
    assert b["completed_rps"] == pytest.approx(5, rel=0.05)
    # requests that never end are overload too, whatever the queue did
    pending = _records(t, t + 0.5, np.where(t < 99, t + 1.0, np.nan), np.where(t < 99, fin, int(Status.PENDING)))
    assert load_block(pending, 100.0)["overloaded"]


def _closed_loop(warmup: int, requests: int, output: int) -> dict:
    """The results of a closed loop of 4 on one H100: ``requests`` counted after ``warmup`` of warm-up."""
    from simulator.runner import simulate
    from simulator.scenario.schema import Scenario

    sc = {"name": "loop", "seed": 1,
          "workload": {"num_requests": requests, "input_tokens": {"dist": "fixed", "value": 500},
                       "output_tokens": {"dist": "fixed", "value": output},
                       "arrival": {"type": "concurrency", "concurrency": 4, "warmup_requests": warmup}},
          "pools": [{"name": "main", "model": "llama-3-8b", "gpu": "h100-sxm"}]}
    return simulate(Scenario.model_validate(sc)).results


def test_a_closed_loops_warm_up_is_not_in_its_load_window(tmp_path):
    """A closed loop's counted requests start after its warm-up, whose requests are in no figure: counted from
    t = 0, 200 requests at ~10 req/s after 200 of warm-up read 'offered 5.03 req/s over the 40 s arrival
    window' beside a request throughput of 9.44, and each was priced at twice the loop without warm-up's."""
    t = np.arange(50, 100, 0.1)          # counted from 50 s on, at 10 req/s
    fin = int(Status.FINISHED)
    b = load_block(_records(t, t + 0.5, t + 1.0, [fin] * t.size), None, 50.0)
    assert b["window_s"] == pytest.approx(49.9) and b["offered_rps"] == pytest.approx(10, rel=0.01)
    cold, warm = _closed_loop(0, 24, 30), _closed_loop(24, 24, 30)
    assert warm["llmsim"]["load"]["offered_rps"] == pytest.approx(cold["llmsim"]["load"]["offered_rps"], rel=0.1)
    assert warm["llmsim"]["load"]["completed_rps"] == pytest.approx(warm["request_throughput"], rel=0.1)
    assert warm["llmsim"]["cost"]["usd_per_request"] == pytest.approx(cold["llmsim"]["cost"]["usd_per_request"],
                                                                      rel=0.1)


def test_the_verdict_counts_what_was_not_served_and_shedding_is_overload():
    t = np.arange(0, 100, 0.1)          # 1,000 requests at 10 req/s, each served in 1 s
    fin, nan = int(Status.FINISHED), np.nan
    kinds = np.array([fin] * t.size)
    kinds[::10] = int(Status.CANCELLED)          # 10 % given up on by their clients
    kinds[1::25] = int(Status.RATE_LIMITED)      # 4 % answered 429
    served = kinds == fin     # the rest end when they arrive (a 429, a rejection, a superseded completion)
    b = load_block(_records(t, np.where(served, t, nan), np.where(served, t + 1.0, t), kinds), 100.0)
    assert not b["overloaded"] and b["cancelled"] == 100 and b["rate_limited"] == 40 and b["shed"] == 0
    assert b["verdict"].startswith("keeps up") and "100 requests (10.0 %) cancelled by their clients" in b["verdict"]
    assert "40 requests (4.0 %) rate-limited (429) by the gateway" in b["verdict"]
    # shedding 6 % of the requests: not keeping up, however short the queue
    kinds[2::16] = int(Status.REJECTED)
    served = kinds == fin
    b = load_block(_records(t, np.where(served, t, nan), np.where(served, t + 1.0, t), kinds), 100.0)
    assert b["shed"] == int(np.count_nonzero(kinds == int(Status.REJECTED))) > 0.05 * t.size
    assert b["overloaded"] and b["verdict"].startswith("OVERLOADED: it shed 6.")
    assert "shed by the fleet" in b["verdict"]


def test_the_load_block_counts_each_rejection_by_the_reason_it_was_given():
    """Too long, over the budget and never fitting come from the records' reasons, not the pools'
    settings: the same rejected requests are shed, too long, over budget or never fitting as their
    reason says, and nothing else moves."""
    t = np.arange(0, 100, 0.1)
    fin, rej = int(Status.FINISHED), int(Status.REJECTED)
    kinds = np.where(np.arange(t.size) % 50 == 0, rej, fin)       # 2 %: shed would not fail the fleet
    reasons = np.zeros(t.size, np.int8)
    refused = np.flatnonzero(kinds == rej)
    reasons[refused[0::4]] = Rejection.TOO_LONG
    reasons[refused[1::4]] = Rejection.OVER_BUDGET
    reasons[refused[2::4]] = Rejection.EXCEEDS_KV
    reasons[refused[3::4]] = Rejection.QUEUE_FULL
    served = kinds == fin
    b = load_block(_records(t, np.where(served, t, np.nan), np.where(served, t + 1.0, t), kinds, reasons), 100.0)
    n = refused.size
    assert (b["too_long"], b["over_budget"], b["never_fit"], b["shed"]) == (
        len(refused[0::4]), len(refused[1::4]), len(refused[2::4]), len(refused[3::4]))
    assert b["too_long"] + b["over_budget"] + b["never_fit"] + b["shed"] == n
    assert b["overloaded"] and "answered with an error" in b["verdict"]     # over budget fails the fleet
    assert "could never fit a replica's KV pool" in b["verdict"]           # so does a request no replica holds
    reasons[refused] = Rejection.EXCEEDS_KV
    b = load_block(_records(t, np.where(served, t, np.nan), np.where(served, t + 1.0, t), kinds, reasons), 100.0)
    assert (b["never_fit"], b["shed"]) == (n, 0) and b["overloaded"] and "more replicas would not" in b["verdict"]
    reasons[refused] = Rejection.TOO_LONG                                   # the client's error alone does not
    b = load_block(_records(t, np.where(served, t, np.nan), np.where(served, t + 1.0, t), kinds, reasons), 100.0)
    assert (b["too_long"], b["over_budget"], b["shed"]) == (n, 0, 0) and not b["overloaded"]


def test_one_stranded_request_is_overload_and_the_verdict_says_why():
    """A request preempted and never readmittable would hang the real server: one is enough to fail
    the fleet, however level its queue, and the verdict names it (not as shed: it was admitted)."""
    t = np.arange(0, 100, 0.1)
    kinds = np.array([int(Status.FINISHED)] * t.size)
    b = load_block(_records(t, t, t + 1.0, kinds), 100.0)
    assert not b["overloaded"] and b["stranded"] == 0
    kinds[500] = int(Status.STRANDED)
    b = load_block(_records(t, t, t + 1.0, kinds), 100.0)
    assert b["overloaded"] and b["stranded"] == 1 and b["shed"] == 0
    assert b["verdict"].startswith("OVERLOADED: 1 request was preempted and could never be readmitted")


def test_a_queue_growing_behind_cancelled_requests_is_overload():
    """An editor supersedes most completions (95 % cancelled, ending as they arrive): the other 5 % (5 req/s)
    queue behind a fleet serving 2.5 req/s of them. The growth was held against 5 % of all arrivals and read
    as keeping up; against the requests left to serve it is overload."""
    t = np.arange(0, 100, 0.01)         # 100 req/s for 100 s
    kinds = np.full(t.size, int(Status.CANCELLED))
    kinds[::20] = int(Status.FINISHED)
    kept = kinds == int(Status.FINISHED)
    served = np.full(t.size, np.nan)
    served[kept] = np.arange(int(kept.sum())) * 0.4     # one admitted every 0.4 s, in arrival order
    finish = np.where(kept, served + 0.4, t)
    b = load_block(_records(t, served, finish, kinds), 100.0)
    assert b["overloaded"] and b["verdict"].startswith("OVERLOADED: the queue grew"), b["verdict"]


def test_a_window_in_which_nothing_finished_cannot_tell():
    """Every request outlasts the window (20 s generations, a 1 s window): its queue held level, yet "keeps
    up" would be read beside none of the offered load served."""
    t = np.arange(0, 1, 0.05)
    b = load_block(_records(t, t, t + 20.0, [int(Status.FINISHED)] * t.size), 1.0)
    assert not b["overloaded"] and b["completed_rps"] == 0
    assert b["verdict"].startswith("cannot tell: no request finished within the arrival window")
    t = np.arange(0, 0.3, 0.05)     # a short test's window under a second: it read "over the 0 s arrival window"
    brief = load_block(_records(t, t, t + 20.0, [int(Status.FINISHED)] * t.size), 0.3)
    assert "over the 0.3 s arrival window" in brief["verdict"], brief["verdict"]
    served = load_block(_records(t, t, t + 0.01, [int(Status.FINISHED)] * t.size), 1.0)
    assert served["verdict"].startswith("keeps up")


def test_keeps_up_on_a_window_shorter_than_its_requests_says_so(tmp_path, cli):
    """Offered 10 req/s over 3 s, requests of ~10 s: "keeps up" with 2 req/s completed read as a contradiction;
    the verdict now says the window is short and asks for a longer one. A 60 s window does not, nor a fleet
    whose completed rate is low because its clients cancel (autocomplete's)."""
    short = SCENARIO.replace("duration_s: 60", "duration_s: 3").replace("max: 400}", "max: 2000}")
    p = tmp_path / "short.yaml"
    p.write_text(short.format(name="short", rate=10, extra=""))
    load = json.loads(cli("run", p, "--json").out)["llmsim"]["load"]
    assert not load["overloaded"] and load["running_at_end"] > 0.5 * load["offered_rps"] * load["window_s"]
    assert load["verdict"].startswith("keeps up, on a short window:") and "longer one" in load["verdict"]
    fine = json.loads(cli("run", _scenario(tmp_path, "fine", 4), "--json").out)["llmsim"]["load"]
    assert fine["verdict"].startswith("keeps up: ")


def test_a_fleet_a_few_percent_short_is_overloaded_on_a_long_enough_window():
    """Served 4 % below what is offered, the queue grows all run: it read "keeps up" under a fixed 5 % share of
    the arrivals; the growth is past what the arrivals' randomness allows (2·√(arrivals)). Served 0.5 % short,
    the same window cannot tell it from chance."""
    fin = int(Status.FINISHED)
    t = np.arange(0, 2000, 0.1)                      # 10 req/s for 2,000 s
    for rate, overloaded in ((9.6, True), (9.95, False)):
        served = np.arange(t.size) / rate            # served in arrival order at `rate`, never before arriving
        start = np.maximum(served, t)
        b = load_block(_records(t, start, start + 0.1, [fin] * t.size), 2000.0)
        assert b["overloaded"] is overloaded, (rate, b["verdict"])


def test_a_closed_loops_counted_requests_sent_at_once_are_priced_over_the_run_after_its_warm_up():
    """4 counted requests at concurrency 4 after 8 of warm-up all arrive together: their arrival span is 0,
    and the per-unit prices' fallback, the whole window from t = 0, priced the warm-up's time too (11× the
    loop without warm-up at 40 requests of it). Now the run after the warm-up, as a burst at t = 0 is."""
    def price(warmup: int) -> float:
        return _closed_loop(warmup, 4, 100)["llmsim"]["cost"]["usd_per_request"]

    assert price(8) == pytest.approx(price(0), rel=0.05)


def test_a_window_no_request_reached_has_nothing_unanswered():
    """check's load row read every cause's count from the load block, and a window no request reached
    ("no requests") holds none: `llmsim check scenarios/*.yaml` at smoke size ended in a KeyError."""
    from simulator.metrics.load import unserved_text

    assert unserved_text({"overloaded": False, "window_s": 0.0, "verdict": "no requests"}) == ""
    said = unserved_text({"shed": 0, "shed_fraction": 0.0, "cancelled": 3, "cancelled_fraction": 0.75})
    assert said == "3 requests (75.0 %) cancelled by their clients"


def _sessions(starts, turns: int, gap: float) -> Records:
    """Sessions of ``turns`` requests ``gap`` s apart from each start, each served in 0.5 s."""
    arrival = np.concatenate([s + gap * np.arange(turns) for s in starts])
    session = np.repeat(np.arange(len(starts)), turns)
    rec = _records(arrival, arrival, arrival + 0.5, [int(Status.FINISHED)] * arrival.size)
    return Records({**rec.columns, "session": session})


def test_a_window_whose_sessions_load_still_rises_cannot_tell():
    """Sessions start at 1/s from none, each sending a request every 10 s for 200 s: over a 60 s window the
    offered rate climbs to 6 req/s of the 20 it settles at, and the fleet "kept up" with that."""
    starts = np.arange(0, 60, 1.0)
    b = load_block(_sessions(starts, 20, 10.0), 60.0)
    assert not b["overloaded"] and b["completed_rps"] > 0
    # a start at s sends floor((60 - s) / 10) + 1 of its 20 requests by 60 s: 216 of 1,200
    assert b["offered_share"] == pytest.approx(216 / 1200)
    assert b["verdict"].startswith("cannot tell: its sessions' load was still rising: the 60 sessions begun in the "
                                   "window sent 984 requests after it, against the 216 that arrived within it")
    assert "workload.lead_in_s" in b["verdict"]
    # the same window opened on sessions a lead-in began (at 1/s since -200 s): their load is steady
    warm = _sessions(np.arange(-200, 60, 1.0), 20, 10.0)
    kept = warm.where(warm.arrival >= 0)
    b = load_block(kept, 60.0, began_before=list(range(200)))
    assert "offered_share" not in b and b["verdict"].startswith("keeps up: ")
    # short sessions (two requests 1 s apart) reach their steady rate within the window
    b = load_block(_sessions(starts, 2, 1.0), 60.0)
    assert "offered_share" not in b and b["verdict"].startswith("keeps up: ")


def test_run_exits_1_on_sessions_still_ramping_and_a_lead_in_settles_them(tmp_path, cli):
    extra = ("  session: {{type: chat, turns: {{dist: uniform, min: 30, max: 30}}, "
             "think_time_s: {{dist: fixed, value: 10}}}}\n")
    text = SCENARIO.replace("  output_tokens: {{dist: uniform, min: 100, max: 400}}\n",
                            "  output_tokens: {{dist: uniform, min: 10, max: 40}}\n" + extra)
    p = tmp_path / "ramp.yaml"
    p.write_text(text.format(name="ramp", rate=0.2, extra=""))
    r = cli("run", p, "--json")
    load = json.loads(r.out)["llmsim"]["load"]
    assert r.code == 1 and load["offered_share"] < 0.5 and load["verdict"].startswith("cannot tell: its sessions'")
    warm = cli("run", p, "--json", "--set", "workload.lead_in_s=400")
    load = json.loads(warm.out)["llmsim"]["load"]
    assert warm.code == 0 and "offered_share" not in load and load["verdict"].startswith("keeps up")
