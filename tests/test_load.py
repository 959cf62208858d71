"""The overload verdict: a fleet offered more than it serves says so, and `llmsim check` fails it."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from simulator.metrics.load import load_block
from simulator.metrics.records import Records
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
"""


def _scenario(tmp_path: Path, name: str, rate: float) -> Path:
    p = tmp_path / f"{name}.yaml"
    p.write_text(SCENARIO.format(name=name, rate=rate))
    return p


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


def _records(arrival, admitted, finish, status) -> Records:
    n = len(arrival)
    cols = {"arrival": np.array(arrival, float), "admitted": np.array(admitted, float),
            "finish": np.array(finish, float), "status": np.array(status, np.int8)}
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
