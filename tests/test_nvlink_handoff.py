"""A disaggregated pair's ``link.preset: nvlink`` holds only where both pools, at their largest, share
one NVLink domain: two 8-GPU H200 replicas hand their KV over the nodes' NICs, not NVLink."""
from __future__ import annotations

import pytest
import yaml

from simulator.errors import LlmsimError
from simulator.scenario.compile import compile_scenario
from simulator.scenario.schema import Scenario


def _pair(gpu: str = "h200", tp: int = 4, decode_replicas: int = 1, **link) -> dict:
    pool = {"model": "llama-3.1-70b", "gpu": gpu, "tp": tp}
    return {
        "name": "pd", "workload": {"num_requests": 4, "arrival": {"type": "poisson", "rate_per_s": 2},
                                   "input_tokens": {"dist": "fixed", "value": 1000},
                                   "output_tokens": {"dist": "fixed", "value": 50}},
        "classes": [{"name": "all", "pool": "prefill"}],
        "pools": [{"name": "prefill", **pool,
                   "disaggregation": {"decode_pool": "decode", "link": {"preset": "nvlink", **link}}},
                  {"name": "decode", **pool, "replicas": decode_replicas}]}


def _refusal(d: dict) -> LlmsimError:
    with pytest.raises(LlmsimError) as err:
        compile_scenario(Scenario.model_validate(d), "s.yaml")
    return err.value


def test_a_pair_inside_one_node_hands_off_over_nvlink():
    compile_scenario(Scenario.model_validate(_pair()), "s.yaml")               # 4 + 4 GPUs of one HGX node
    compile_scenario(Scenario.model_validate(_pair("gb200-nvl72", 8, 4)), "s.yaml")   # 8 + 32 of 72


def test_a_pair_beyond_one_nvlink_domain_is_refused():
    e = _refusal(_pair(decode_replicas=2))                                     # 4 + 2 × 4 GPUs > 8
    assert e.key_path == "pools[0].disaggregation.link.preset"
    assert "12 GPUs" in e.message and "h200's domain holds 8" in e.message and "infiniband" in e.message


def test_an_autoscaled_decode_pool_counts_its_ceiling_and_standby():
    d = _pair()
    d["pools"][1]["autoscaling"] = {"metric": "concurrency", "target": 8, "max_replicas": 1, "warm_pool": 1}
    assert "pool 'decode' up to 2 × 4 GPUs" in _refusal(d).message


def test_gpus_without_one_nvlink_between_them_are_refused():
    d = _pair()
    d["pools"][1]["gpu"] = "h100-sxm"
    assert "which no NVLink connects" in _refusal(d).message
    assert "has none (interconnect pcie)" in _refusal(_pair("h100-pcie", 2)).message


def test_an_xgmi_mesh_is_no_nvlink():
    e = _refusal(_pair("mi300x", 2))                                           # 2 + 2 GPUs of one node
    assert "xGMI mesh" in e.message and "448 / 7 = 64 GB/s" in e.message and "bandwidth_gb_per_s" in e.message
    compile_scenario(Scenario.model_validate(_pair("mi300x", 2, bandwidth_gb_per_s=64, latency_ms=0.01)), "s.yaml")


def test_a_link_given_by_its_numbers_is_taken_as_given():
    compile_scenario(Scenario.model_validate(_pair(decode_replicas=2, bandwidth_gb_per_s=40, latency_ms=0.02)),
                     "s.yaml")


def test_the_cli_refuses_it_on_one_line(tmp_path, cli):
    path = tmp_path / "pd.yaml"
    path.write_text(yaml.safe_dump(_pair(decode_replicas=2)))
    r = cli("run", path, "--output", tmp_path / "out")
    msg = r.err.strip()
    assert r.code == 2 and "\n" not in msg and "Traceback" not in msg, msg
    assert str(path) in msg and "pools[0].disaggregation.link.preset" in msg
    assert not (tmp_path / "out").exists()


def _numbers(d: dict) -> tuple[float, float]:
    return compile_scenario(Scenario.model_validate(d), "s.yaml").pairs[0].link_numbers


def test_each_preset_reads_the_pairs_gpus():
    """A 400 GB/s NVLink read off H100 priced B200's NVLink 5 at half its rate, and every GPU's NIC as
    one NDR HCA: each preset is now 90 % of the pair's own link (the slower GPU's), as the profile states."""
    assert _numbers(_pair("h100-sxm")) == pytest.approx((405e9, 1e-5))
    assert _numbers(_pair("b200")) == pytest.approx((810e9, 1e-5))
    assert _numbers(_pair("gb300-nvl72", 8, preset="infiniband")) == pytest.approx((90e9, 2e-5))
    assert _numbers(_pair("a100-sxm-80gb", preset="infiniband")) == pytest.approx((22.5e9, 2e-5))
    assert _numbers(_pair("h100-pcie", preset="infiniband")) == pytest.approx((45e9, 2e-5))   # no NIC stated
    mixed = _pair("h100-sxm", preset="infiniband")
    mixed["pools"][1]["gpu"] = "gb300-nvl72"
    assert _numbers(mixed) == pytest.approx((45e9, 2e-5))
    assert _numbers(_pair("b200", preset="ethernet")) == pytest.approx((3e9, 1e-4))
    assert _numbers(_pair("b200", bandwidth_gb_per_s=100, latency_ms=0.5)) == pytest.approx((100e9, 5e-4))
