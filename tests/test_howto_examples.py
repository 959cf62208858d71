"""The code a how-to page shows works as the page says.

docs/how-to/add-a-router.md shows a whole router module: it is run here as
a reader would add it (its registration included), a scenario routes with
it, and its settings are validated with key paths like every other key.
"""
from __future__ import annotations

import math
import re

import pytest
import yaml

from conftest import REPO_ROOT

from simulator.errors import LlmsimError
from simulator.fleet.routing.registry import ROUTERS
from simulator.runner import simulate
from simulator.scenario.load import load_scenario


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
