"""The code a how-to page shows works as the page says.

docs/how-to/add-a-router.md shows a whole router module, and
docs/how-to/add-an-arrival-process.md a whole arrival process: each is run
here as a reader would add it (its registration included), a scenario uses
it, and its settings are validated with key paths like every other key.
"""
from __future__ import annotations

import math
import re
import sys
import types

import pytest
import yaml

from conftest import REPO_ROOT

from simulator.errors import LlmsimError
from simulator.fleet.routing.registry import ROUTERS
from simulator.runner import simulate
from simulator.scenario.load import load_scenario
from workloads.arrivals import ARRIVALS


def _python_block(page: str) -> str:
    text = (REPO_ROOT / "docs" / "how-to" / page).read_text()
    (code,) = re.findall(r"^```python\n(.*?)^```", text, re.S | re.M)
    return code


def _scenario(tmp_path, router):
    data = {"name": "router-example", "seed": 3,
            "workload": {"num_requests": 200, "arrival": {"type": "poisson", "rate_per_s": 40},
                         "input_tokens": {"dist": "fixed", "value": 512},
                         "output_tokens": {"dist": "uniform", "min": 16, "max": 256}},
            "pools": [{"name": "chat", "model": "llama-3.1-8b", "gpu": "h100-sxm", "replicas": 3, "router": router}]}
    path = tmp_path / "router-example.yaml"
    path.write_text(yaml.safe_dump(data))
    return load_scenario(path)[0]


@pytest.fixture
def fewest_tokens():
    exec(compile(_python_block("add-a-router.md"), "add-a-router.md", "exec"), {"__name__": "howto_router"})
    yield ROUTERS["fewest_tokens"]
    del ROUTERS["fewest_tokens"]


def test_the_router_of_the_page_routes_a_scenario(fewest_tokens, tmp_path):
    out = simulate(_scenario(tmp_path, {"type": "fewest_tokens", "max_outstanding": 4}))
    replicas = {r.replica for r in out.requests}
    assert len(out.requests) == 200 and not any(math.isnan(r.finish) for r in out.requests)
    assert replicas == {0, 1, 2}, "the router should spread 40 req/s over every replica"


def test_its_settings_are_checked_with_their_key_path(fewest_tokens, tmp_path):
    with pytest.raises(LlmsimError) as refused:
        _scenario(tmp_path, {"type": "fewest_tokens", "max_outstanding": 0})
    assert "pools[0].router.max_outstanding" in str(refused.value.render())


@pytest.fixture
def weibull(monkeypatch):
    # a module of its own, as the reader's file is: pydantic resolves the annotations through it
    module = types.ModuleType("howto_arrival")
    monkeypatch.setitem(sys.modules, "howto_arrival", module)
    exec(compile(_python_block("add-an-arrival-process.md"), "add-an-arrival-process.md", "exec"), module.__dict__)
    yield ARRIVALS["weibull"]
    del ARRIVALS["weibull"]


def _arrivals(tmp_path, arrival) -> list[float]:
    data = {"name": "arrival-example", "seed": 3,
            "workload": {"num_requests": 2000, "arrival": arrival,
                         "input_tokens": {"dist": "fixed", "value": 64}, "output_tokens": {"dist": "fixed", "value": 4}},
            "pools": [{"name": "chat", "model": "llama-3.1-8b", "gpu": "h100-sxm", "replicas": 2}]}
    path = tmp_path / "arrival-example.yaml"
    path.write_text(yaml.safe_dump(data))
    return sorted(r.arrival for r in simulate(load_scenario(path)[0]).requests)


def test_the_arrival_process_of_the_page_sets_a_scenario_s_arrivals(weibull, tmp_path):
    times = _arrivals(tmp_path, {"type": "weibull", "rate_per_s": 20, "shape": 0.5})
    gaps = [b - a for a, b in zip([0.0, *times], times)]
    mean = sum(gaps) / len(gaps)
    cv = math.sqrt(sum((g - mean) ** 2 for g in gaps) / len(gaps)) / mean
    # the rate is the scenario's; shape 0.5 gives gaps with CV √5 ≈ 2.24, a Poisson run's would be 1
    assert mean == pytest.approx(1 / 20, rel=0.15)
    assert 1.6 < cv < 3.0


def test_the_arrival_settings_are_checked_with_their_key_path(weibull, tmp_path):
    with pytest.raises(LlmsimError) as refused:
        _arrivals(tmp_path, {"type": "weibull", "rate_per_s": 20, "shape": 0})
    assert "workload.arrival.shape" in str(refused.value.render())


def test_the_gpu_of_the_page_keeps_its_sibling_s_fp8_rate_and_states_its_power(tmp_path):
    """docs/how-to/add-a-gpu.md's profile is "H100's compute and faster HBM": it loads, and its fp8 GEMMs
    run at its sibling's measured rate, not the whole datasheet peak (which left out, the example did,
    prefilling fp8 weights ~20 % faster than H100 at the same compute); its power gives a run energy."""
    from simulator.profiles import load_hardware

    text = (REPO_ROOT / "docs" / "how-to" / "add-a-gpu.md").read_text()
    (block,) = re.findall(r"^```yaml\n(# my-gpu\.yaml.*?)^```", text, re.S | re.M)
    (tmp_path / "my-gpu.yaml").write_text(block)
    gpu, sibling = load_hardware(str(tmp_path / "my-gpu.yaml")), load_hardware("h100-sxm")
    assert gpu.transfer is not None and gpu.transfer.sibling == sibling.name
    assert gpu.peak_tflops == sibling.peak_tflops and gpu.fp8_gemm_efficiency == sibling.fp8_gemm_efficiency
    assert gpu.power is not None
