"""docs/how-to/add-a-router.md followed as written adds a router without editing llmsim.

The page's module, its ``pyproject.toml`` entry point and its scenario lines
make a package of the reader's own; installed, ``llmsim run`` routes with it,
``llmsim schema`` lists it and its settings are checked with key paths;
without the registration the name is unknown. The package is laid out as
``pip install`` leaves it: the module, and a ``*.dist-info`` folder whose
``entry_points.txt`` holds the page's entry points (building a wheel here
would need the network).
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from conftest import REPO_ROOT

tomllib = pytest.importorskip("tomllib" if sys.version_info >= (3, 11) else "tomli")

PAGE = REPO_ROOT / "docs" / "how-to" / "add-a-router.md"


def _blocks(lang: str) -> list[str]:
    return re.findall(rf"^```{lang}\n(.*?)^```", PAGE.read_text(), re.S | re.M)


def _installed(site: Path) -> Path:
    """The page's package, as installed into ``site``."""
    (code,) = _blocks("python")
    module = Path(code.split("\n", 1)[0].lstrip("# ").strip())          # the path the block's first line gives
    (toml,) = _blocks("toml")
    project = tomllib.loads(toml)["project"]
    (site / module).parent.mkdir(parents=True)
    (site / module.parent / "__init__.py").write_text("")
    (site / module).write_text(code)
    info = site / f"{project['name'].replace('-', '_')}-{project['version']}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {project['name']}\nVersion: {project['version']}\n")
    groups = project["entry-points"]
    (info / "entry_points.txt").write_text("".join(
        f"[{group}]\n" + "".join(f"{name} = {value}\n" for name, value in eps.items()) + "\n"
        for group, eps in groups.items()))
    return site


SCENARIO = """\
name: router-example
seed: 3
workload:
  num_requests: 120
  arrival: {type: poisson, rate_per_s: 40}
  input_tokens: {dist: fixed, value: 512}
  output_tokens: {dist: uniform, min: 16, max: 256}
pools:
  - {name: chat, model: llama-3.1-8b, gpu: h100-sxm, replicas: 3}
"""


def _scenario(tmp_path: Path, **router_changes) -> Path:
    """A small scenario whose pool takes the page's ``router:`` line."""
    (fragment,) = _blocks("yaml")
    router = {**yaml.safe_load(fragment)["pools"][0]["router"], **router_changes}
    data = yaml.safe_load(SCENARIO)
    data["pools"][0]["router"] = router
    path = tmp_path / "sc.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _llmsim(site: Path, *args, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(REPO_ROOT)]), "NO_COLOR": "1",
           "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-c", "from simulator.cli.app import main; main()", *map(str, args)],
                          capture_output=True, text=True, cwd=cwd, env=env, timeout=120)


def test_the_page_edits_nothing_of_llmsim_s():
    text = PAGE.read_text()
    assert "simulator/fleet/routing/__init__.py" not in text
    assert '[project.entry-points."llmsim.routers"]' in text


def test_the_installed_router_of_the_page_routes_a_run(tmp_path):
    site = _installed(tmp_path / "site")
    res = _llmsim(site, "run", _scenario(tmp_path), "-o", "out", "--no-plots", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert json.loads((tmp_path / "out" / "results.json").read_text())["completed"] == 120
    replicas = set(pq.read_table(tmp_path / "out" / "requests.parquet").column("replica").to_pylist())
    assert replicas == {0, 1, 2}, "the router spreads 40 req/s over every replica"


def test_llmsim_schema_lists_it_with_its_settings(tmp_path):
    site = _installed(tmp_path / "site")
    schema = _llmsim(site, "schema", cwd=tmp_path)
    assert schema.returncode == 0 and '"fewest_tokens"' in schema.stdout and '"max_outstanding"' in schema.stdout


def test_its_settings_are_checked_with_their_key_path(tmp_path):
    site = _installed(tmp_path / "site")
    res = _llmsim(site, "check", _scenario(tmp_path, max_outstanding=0), cwd=tmp_path)
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert "pools[0].router.max_outstanding" in res.stderr


def test_without_the_installation_the_name_is_unknown(tmp_path):
    """What the page says a reader sees when the package is not installed where llmsim runs."""
    site = _installed(tmp_path / "site")
    for info in site.glob("*.dist-info"):
        (info / "entry_points.txt").unlink()
    res = _llmsim(site, "check", _scenario(tmp_path), cwd=tmp_path)
    assert res.returncode == 2 and "Traceback" not in res.stderr
    valid = re.search(r"pools\[0\]\.router\.type: unknown router \(valid: ([^)]*)\)", res.stderr)
    assert valid and "round_robin" in valid.group(1) and "fewest_tokens" not in valid.group(1), res.stderr
