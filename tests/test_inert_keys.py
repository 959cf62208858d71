"""An engine key the pool states that does nothing on it is refused (simulator/scenario/inert_keys.py);
the same key set by the pool's backend profile, which sets it on every pool, stands, and so does a pool
stating the value it runs anyway (a run folder's scenario.yaml writes the backend's out)."""
from __future__ import annotations

import copy

import pytest

from simulator.errors import LlmsimError
from simulator.scenario.load import load_scenario
from tests.test_bad_input import POOL, SCENARIO, one_line_error, write_yaml


def _scenario(**pool) -> dict:
    s = copy.deepcopy(SCENARIO)
    s["pools"][0].update(pool)
    return s


@pytest.mark.parametrize("pool, key, value, says", [
    ({"engine": {"backend": "vllm"}}, "pp_async", "one_batch",
     "pools[0].engine.pp_async: one_batch: pp_async says how async scheduling runs between pipeline stages; "
     "this pool runs pp 1"),
    ({}, "pp_async", "one_batch", "this pool runs pp 1"),        # no backend: EngineConfig's own default
    ({"pp": 2, "engine": {"backend": "vllm", "async_scheduling": False}}, "pp_async", "one_batch",
     "pools[0].engine.pp_async: one_batch: pp_async says how async scheduling runs between pipeline stages; "
     "this pool schedules in turn (async_scheduling: false)"),
    ({"pp": 2}, "pp_async", "run_ahead", "this pool schedules in turn"),   # EngineConfig's own: in turn
    ({"engine": {"backend": "vllm"}}, "mxfp4_activation", "mxfp8",
     "pools[0].engine.mxfp4_activation: mxfp8: mxfp4_activation sets the activations of MXFP4 experts; this "
     "pool serves llama-3-8b in bf16, which has no MXFP4 experts"),
    ({"model": "gpt-oss-120b", "engine": {"backend": "vllm"}}, "mxfp4_activation", "mxfp8",
     "h100-sxm has none, so its MXFP4 experts always compute in bf16"),
])
def test_a_key_the_pool_states_that_does_nothing_is_refused(tmp_path, cli, pool, key, value, says):
    path = write_yaml(tmp_path / "s.yaml", _scenario(**pool))
    out = tmp_path / "out"
    one_line_error(cli("run", path, "--set", f"pools.{POOL}.engine.{key}={value}", "-o", out), "s.yaml", says)
    assert not out.exists()
    written = copy.deepcopy(_scenario(**pool))
    written["pools"][0].setdefault("engine", {})[key] = value
    one_line_error(cli("run", write_yaml(tmp_path / "w.yaml", written), "-o", out), "w.yaml", says)
    assert not out.exists()


def test_the_backends_own_settings_of_the_keys_stand(tmp_path):
    """vLLM's profile sets pp_async and mxfp4_activation on every pool, of one stage and without MXFP4 too."""
    s, _ = load_scenario(write_yaml(tmp_path / "s.yaml", _scenario(engine={"backend": "vllm"})))
    assert (s.pools[0].engine.pp_async, s.pools[0].engine.mxfp4_activation) == ("run_ahead", "bf16")


def test_a_run_folders_scenario_loads_back(tmp_path, cli):
    """scenario.yaml holds the backend's pp_async and mxfp4_activation as the pool's keys."""
    r = cli("run", write_yaml(tmp_path / "s.yaml", _scenario(engine={"backend": "vllm"})), "-o", tmp_path / "out",
            "--no-plots")
    assert r.code in (0, 1), r.err
    assert {"pp_async", "mxfp4_activation"} <= set(
        load_scenario(tmp_path / "out" / "scenario.yaml")[0].pools[0].engine.model_fields_set)


@pytest.mark.parametrize("pool", [
    {"engine": {"backend": "vllm", "pp_async": "run_ahead", "mxfp4_activation": "bf16"}},   # what vLLM runs
    {"engine": {"backend": "trtllm", "mxfp4_activation": "mxfp8"}},
    {"engine": {"pp_async": "unsupported"}},
    {"model": "llama-3-8b", "pp": 2, "engine": {"backend": "vllm", "pp_async": "one_batch"}},
    {"pp": 2, "engine": {"backend": "vllm", "async_scheduling": False, "pp_async": "unsupported"}},
    {"pp": 2, "engine": {"async_scheduling": True, "pp_async": "run_ahead"}},
    {"model": "gpt-oss-120b", "gpu": "b200", "engine": {"backend": "vllm", "mxfp4_activation": "mxfp8"}},
    {"model": "gpt-oss-120b", "gpu": "b200", "engine": {"backend": "trtllm", "mxfp4_activation": "bf16"}},
])
def test_the_keys_stand_where_they_act(tmp_path, pool):
    s, _ = load_scenario(write_yaml(tmp_path / "s.yaml", _scenario(**pool)))
    assert all(getattr(s.pools[0].engine, k) == v for k, v in pool["engine"].items())


def test_a_value_the_key_does_not_take_keeps_its_own_message(tmp_path):
    with pytest.raises(LlmsimError, match="pp_async: .*'unsupported', 'one_batch' or 'run_ahead'"):
        load_scenario(write_yaml(tmp_path / "s.yaml", _scenario(engine={"backend": "vllm", "pp_async": "soon"})))
