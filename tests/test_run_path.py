"""A run checks its size once, where its scenario is compiled, whichever way it is started."""
from __future__ import annotations

from pathlib import Path

import pytest

import simulator.runsize as runsize
from simulator.errors import LlmsimError
from simulator.runsize import MAX_REQUESTS

SCENARIO = """\
name: small
seed: 1
workload:
  num_requests: {n}
  arrival: {{type: poisson, rate_per_s: 20}}
  input_tokens: {{dist: fixed, value: 64}}
  output_tokens: {{dist: fixed, value: 8}}
pools: [{{model: llama-3.2-1b, gpu: h100-sxm}}]
"""


@pytest.fixture
def counted(monkeypatch):
    """The scenarios each size check estimated (every check_run_size, wherever imported, estimates first)."""
    calls = []
    real = runsize.estimate_run_size

    def counting(sc):
        calls.append(sc.name)
        return real(sc)

    monkeypatch.setattr(runsize, "estimate_run_size", counting)
    return calls


def test_the_cli_run_checks_the_size_once(tmp_path, cli, counted):
    p = tmp_path / "s.yaml"
    p.write_text(SCENARIO.format(n=20))
    assert cli("run", p, "--json").code == 0
    assert counted == ["small"]


def test_an_oversized_run_is_refused_before_any_output(tmp_path, cli, counted):
    p = tmp_path / "s.yaml"
    p.write_text(SCENARIO.format(n=MAX_REQUESTS * 10))
    r = cli("run", p, "-o", tmp_path / "out")
    assert r.code == 2 and "cannot finish" in r.err and "Traceback" not in r.err
    assert counted == ["small"] and not (tmp_path / "out").exists()


def test_a_sharded_run_checks_the_whole_fleet_once_in_the_parent(tmp_path, counted):
    from simulator.planning.executors.base import ExecutorOptions
    from simulator.planning.executors.local import LocalExecutor
    from simulator.scenario.load import load_scenario
    from simulator.sharding import run_sharded

    p = tmp_path / "s.yaml"
    p.write_text(SCENARIO.format(n=MAX_REQUESTS * 10))
    sc, path = load_scenario(p)
    with pytest.raises(LlmsimError, match="cannot finish"):
        run_sharded(sc, 2, source=path, executor=LocalExecutor(ExecutorOptions(workers=1)))
    assert counted == ["small"]
