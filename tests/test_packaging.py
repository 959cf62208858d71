"""What ``pip install .`` ships: every module, the built-in YAML files, one version.

The tests import the checkout, where a module the package list leaves out
still imports; users get the wheel, where it does not (``llmsim run
--shards`` once broke that way). So a wheel is built here, as pip builds it
(plain Python: ``LLMSIM_COMPILE=0``; tests/test_compiled.py covers the
compiled build), from a copy of the tree so the checkout gains no build
folders, and run from outside the checkout.
"""
from __future__ import annotations

import email
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import simulator
from conftest import REPO_ROOT

DATA_FOLDERS = ("backend_profiles", "hardware_profiles", "model_profiles", "scenarios")
NOT_PACKAGED = ("tests", "notebooks", "benchmarks", "baselines", "docs", "build", "out", "*.egg-info",
                ".*", "__pycache__")

_LIST_BUILTINS = """
import json, sys
from simulator.profiles import list_builtin
from simulator.profiles.loader import builtin_dir
print(json.dumps({kind: [str(builtin_dir(kind)), list_builtin(kind)] for kind in sys.argv[1:]}))
"""


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    shutil.copytree(REPO_ROOT, src, ignore=shutil.ignore_patterns(*NOT_PACKAGED))
    env = {**os.environ, "LLMSIM_COMPILE": "0"}
    p = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp / "dist"), str(src)],
                       capture_output=True, text=True, env=env, timeout=900)
    if p.returncode != 0 and "No matching distribution" in p.stderr:
        pytest.skip(f"pip cannot fetch the build requirements here: {p.stderr.strip()[-300:]}")
    assert p.returncode == 0, p.stderr[-3000:]
    [whl] = (tmp / "dist").glob("llmsim-*.whl")
    return whl


def _checkout_modules() -> set[str]:
    return {p.relative_to(REPO_ROOT).as_posix() for top in ("simulator", "workloads")
            for p in (REPO_ROOT / top).rglob("*.py")}


def test_the_wheel_holds_every_module_and_builtin_file(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {n for n in names if n.endswith(".py")} == _checkout_modules()
    for folder in DATA_FOLDERS:
        shipped = {n.removeprefix(f"simulator/data/{folder}/") for n in names
                   if n.startswith(f"simulator/data/{folder}/")}
        assert shipped == {p.relative_to(REPO_ROOT / folder).as_posix()
                           for p in (*(REPO_ROOT / folder).glob("*.yaml"), *(REPO_ROOT / folder).glob("*/*.yaml"))}, \
            folder


def test_the_wheel_carries_the_package_version(wheel):
    with zipfile.ZipFile(wheel) as z:
        [meta] = [n for n in z.namelist() if n.endswith(".dist-info/METADATA")]
        version = email.message_from_bytes(z.read(meta))["Version"]
    assert version == simulator.__version__
    assert wheel.name.startswith(f"llmsim-{simulator.__version__}-")


def test_the_installed_package_finds_its_builtins_from_any_directory(wheel, tmp_path):
    """Unpacked away from the checkout (as site-packages would hold it), the
    package reads its built-ins from its own data, and the command line runs."""
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    env = {"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin", "NO_COLOR": "1", "COLUMNS": "200"}
    p = subprocess.run([sys.executable, "-c", _LIST_BUILTINS, *DATA_FOLDERS], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    found = json.loads(p.stdout)
    for folder in DATA_FOLDERS:
        where, names = found[folder]
        assert Path(where).is_relative_to(site), where
        assert names == sorted(q.stem for q in (REPO_ROOT / folder).glob("*.yaml")), folder
    # A shipped scenario by its checkout path, sharded (the sharding package once missed the wheel).
    p = subprocess.run([sys.executable, "-c", "from simulator.cli.app import main; main()", "run",
                        "scenarios/dau-10m.yaml", "--set", "workload.duration_s=5", "--shards", "2", "--json",
                        "--exit-zero"],   # the verdict at 5 s is not this test's business
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    assert json.loads(p.stdout)["completed"] > 0
