"""Extending llmsim from outside it: a GPU, a model, a serving stack, a router and an
arrival process are each one file plus one registration (an entry point of
an installed package), and a run of the CLI uses them.

The package is laid out in a temporary folder as ``pip install`` leaves it:
the files and a ``*.dist-info`` folder whose ``entry_points.txt`` holds the
registrations (:mod:`simulator.plugins`). Nothing in the repository names it.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import yaml

from conftest import REPO_ROOT

ROUTER = '''\
from pydantic import Field

from simulator.fleet.routing import RouterParams, register_router


class LastParams(RouterParams):
    skip: int = Field(default=0, ge=0, description="replicas to leave out from the end")


@register_router("last_replica", params=LastParams)
class LastReplica:
    """Every request to one replica: a run that used it shows it."""

    def __init__(self, rng, params: LastParams):
        self.skip = params.skip

    def choose(self, req, replicas) -> int:
        return len(replicas) - 1 - self.skip
'''

ARRIVAL = '''\
from typing import Literal

import numpy as np

from workloads.arrivals import OpenLoopArrival, register_arrival


@register_arrival("even")
class EvenArrival(OpenLoopArrival):
    """Requests exactly 1/rate apart: a run that used it shows it."""

    type: Literal["even"] = "even"

    def _unit_gaps(self, rng, size):
        return np.ones(size)
'''

ENTRY_POINTS = """\
[llmsim.gpus]
demo-gpu = demo_ext

[llmsim.models]
demo-model = demo_ext

[llmsim.stacks]
demo-serve = demo_ext

[llmsim.routers]
last_replica = demo_ext.last_replica

[llmsim.arrivals]
even = demo_ext.even_arrival
"""

SCENARIO = """\
name: extended
seed: 3
workload:
  num_requests: 120
  arrival: {type: poisson, rate_per_s: 10}
  input_tokens: {dist: uniform, min: 16, max: 800}
  output_tokens: {dist: uniform, min: 1, max: 64}
pools:
  - name: main
    model: demo-model
    gpu: demo-gpu
    replicas: 3
    router: {type: last_replica, skip: 1}
    engine: {backend: demo-serve}
"""


def _package(root: Path) -> Path:
    """The extension as installed: three files and their registrations."""
    ext = root / "demo_ext"
    ext.mkdir(parents=True)
    (ext / "__init__.py").write_text("")
    # A GPU: the H100 SXM's profile under a new name, at a price of its own.
    gpu = yaml.safe_load((REPO_ROOT / "hardware_profiles" / "h100-sxm.yaml").read_text())
    gpu.update(name="demo-gpu", display_name="Demo GPU", data_names={})
    gpu["price"] = {"usd_per_gpu_hour": 7.77, "source": "test"}
    (ext / "demo-gpu.yaml").write_text(yaml.safe_dump(gpu))
    # A model: Llama-3-8B's shape under a new name.
    model = yaml.safe_load((REPO_ROOT / "model_profiles" / "llama-3-8b.yaml").read_text())
    model["name"] = "demo-model"
    (ext / "demo-model.yaml").write_text(yaml.safe_dump(model))
    # A serving stack: vLLM's kernels and defaults, with a 400 ms response path.
    stack = {"name": "demo-serve", "stack": "demo-serve", "versions": "1.0",
             "engine": {"kernels": "vllm", "chunked_prefill": True, "block_size": 16, "prefix_cache": True,
                        "max_num_seqs": 64, "max_num_batched_tokens": 2048},
             "overheads": {"iteration_overhead_ms": 1.0, "response_ms": 400.0}}
    (ext / "demo-serve.yaml").write_text(yaml.safe_dump(stack))
    (ext / "last_replica.py").write_text(ROUTER)
    (ext / "even_arrival.py").write_text(ARRIVAL)
    info = root / "demo_ext-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: demo-ext\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(ENTRY_POINTS)
    return root


def _llmsim(site: Path, *args, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(REPO_ROOT)]), "NO_COLOR": "1",
           "COLUMNS": "200"}
    cmd = [sys.executable, "-c", "from simulator.cli.app import main; main()", *map(str, args)]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, env=env, timeout=120)


def test_an_installed_gpu_stack_and_router_are_used_by_a_run(tmp_path):
    site = _package(tmp_path / "site")
    (tmp_path / "sc.yaml").write_text(SCENARIO)
    listed = _llmsim(site, "profiles", "list", "--json", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    names = json.loads(listed.stdout)
    assert "demo-gpu" in [g["name"] for g in names["gpus"]]
    assert "demo-model" in [m["name"] for m in names["models"]]
    assert "demo-serve" in [b["name"] for b in names["backends"]]

    res = _llmsim(site, "run", "sc.yaml", "-o", "out", "--no-plots", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    assert results["completed"] == 120
    assert results["llmsim"]["gpu"] == "demo-gpu" and results["llmsim"]["model"] == "demo-model"
    # the stack's 400 ms response path is in every first token
    assert results["median_ttft_ms"] > 400
    # the router's setting reached it: every request on the middle replica of three
    replicas = set(pq.read_table(tmp_path / "out" / "requests.parquet").column("replica").to_pylist())
    assert replicas == {1}


def _builtin(scenario: str) -> str:
    """The scenario on the built-in GPU, model and stack."""
    return (scenario.replace("gpu: demo-gpu", "gpu: h100-sxm").replace("backend: demo-serve", "backend: vllm")
            .replace("model: demo-model", "model: llama-3-8b"))


# Only the arrival process is the plug-in's.
EVEN = (_builtin(SCENARIO).replace("arrival: {type: poisson, rate_per_s: 10}", "arrival: {type: even, rate_per_s: 10}")
        .replace("router: {type: last_replica, skip: 1}", "router: round_robin"))


@pytest.mark.parametrize("scenario, refusal", [
    (SCENARIO, "unknown serving backend 'demo-serve'"),
    (EVEN, "workload.arrival.type: unknown arrival process (valid: concurrency, gamma, poisson, trace)"),
])
def test_without_the_registration_the_names_are_unknown(tmp_path, scenario, refusal):
    site = _package(tmp_path / "site")
    (site / "demo_ext-0.1.dist-info" / "entry_points.txt").unlink()
    (tmp_path / "sc.yaml").write_text(scenario)
    res = _llmsim(site, "run", "sc.yaml", "-o", "out", "--no-plots", cwd=tmp_path)
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert refusal in res.stderr


def test_an_installed_arrival_process_sets_the_arrivals(tmp_path):
    site = _package(tmp_path / "site")
    (tmp_path / "sc.yaml").write_text(EVEN)
    res = _llmsim(site, "run", "sc.yaml", "-o", "out", "--no-plots", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    arrivals = pq.read_table(tmp_path / "out" / "requests.parquet").column("arrival").to_pylist()
    assert len(arrivals) == 120
    # one every 0.1 s from 0.1 s: the process's gaps, where a Poisson run's would scatter
    assert sorted(arrivals) == pytest.approx([0.1 * (i + 1) for i in range(120)])
    schema = _llmsim(site, "schema", cwd=tmp_path)
    assert schema.returncode == 0 and '"even"' in schema.stdout


@pytest.mark.parametrize("gaps, says", [
    (lambda size: np.full(size, 2.0), "draws gaps of mean 2 over 65,536, where _unit_gaps must return gaps of mean 1"),
    (lambda size: np.full(size, np.nan), "returned gaps that are negative or not finite"),
    (lambda size: np.ones(3), "returned gaps of shape (3,) for 65,536 asked"),
])
def test_an_arrival_process_whose_gaps_break_the_unit_mean_is_refused_naming_it(tmp_path, cli, monkeypatch, gaps,
                                                                                  says):
    """rate_per_s is the rate only if the gaps have mean 1: gaps of mean 2 ran the scenario at half its load,
    unsaid. Checked on a sample of the plug-in's own law as the scenario is read."""
    from typing import Literal

    from workloads.arrivals import ARRIVALS, OpenLoopArrival

    class Slow(OpenLoopArrival):
        type: Literal["slow"] = "slow"

        def _unit_gaps(self, rng, size):
            return gaps(size)

    monkeypatch.setitem(ARRIVALS, "slow", Slow)
    (tmp_path / "sc.yaml").write_text(EVEN.replace("type: even", "type: slow"))
    r = cli("run", tmp_path / "sc.yaml", "-o", tmp_path / "out")
    assert r.code == 2 and "Traceback" not in r.err, r.err
    assert "sc.yaml" in r.err and "workload.arrival" in r.err and "'slow' arrival process" in r.err
    assert "Slow" in r.err and says in r.err, r.err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("shape", [0.3, 0.7, 4.0])
def test_a_law_of_mean_one_passes_the_check_however_heavy_its_tail(monkeypatch, shape):
    """The how-to's Weibull gaps, their mean 1 by construction: a shape of 0.3 (a sample's CV 5.4) draws a
    mean 0.9 % off, inside its standard errors, and is not refused."""
    import math
    from typing import Literal

    from workloads.arrival_registry import arrival_spec
    from workloads.arrivals import ARRIVALS, OpenLoopArrival

    class Weibull(OpenLoopArrival):
        type: Literal["weibull"] = "weibull"
        shape: float = 0.7

        def _unit_gaps(self, rng, size):
            return rng.weibull(self.shape, size) / math.gamma(1 + 1 / self.shape)

    monkeypatch.setitem(ARRIVALS, "weibull", Weibull)
    assert arrival_spec({"type": "weibull", "rate_per_s": 5, "shape": shape}).shape == shape


def test_an_open_loop_process_without_its_gaps_method_is_told_which_it_lacks(monkeypatch):
    """A process whose method was named unit_gaps (the how-to's _unit_gaps without its underscore) was refused
    with "failed to draw its gaps: NotImplementedError: " and nothing after it."""
    from typing import Literal

    from workloads.arrival_registry import arrival_spec
    from workloads.arrivals import ARRIVALS, OpenLoopArrival

    class Gapless(OpenLoopArrival):
        type: Literal["gapless"] = "gapless"

        def unit_gaps(self, rng, size):
            return np.ones(size)

    monkeypatch.setitem(ARRIVALS, "gapless", Gapless)
    with pytest.raises(Exception, match=r"failed to draw its gaps: NotImplementedError: .*Gapless defines no "
                                        r"_unit_gaps\(self, rng, size\)"):
        arrival_spec({"type": "gapless", "rate_per_s": 5})


def test_a_plugin_may_not_take_a_built_in_arrival_process_name():
    """A plug-in registering poisson replaced the built-in for every scenario naming it, unsaid."""
    from typing import Literal

    from workloads.arrivals import ARRIVALS, OpenLoopArrival, register_arrival

    built_in = ARRIVALS["poisson"]

    class Poisson(OpenLoopArrival):
        type: Literal["poisson"] = "poisson"

        def _unit_gaps(self, rng, size):
            return np.ones(size)

    with pytest.raises(TypeError, match=r"arrival process 'poisson' is workloads\..*'s; register "
                                        r".*test_extensions.*Poisson under a name of its own"):
        register_arrival("poisson")(Poisson)
    assert ARRIVALS["poisson"] is built_in


def test_a_broken_plugin_is_named_in_one_line(tmp_path):
    site = _package(tmp_path / "site")
    (site / "demo_ext" / "last_replica.py").write_text("raise ImportError('needs torch')\n")
    (tmp_path / "sc.yaml").write_text(_builtin(SCENARIO))
    res = _llmsim(site, "run", "sc.yaml", "-o", "out", "--no-plots", cwd=tmp_path)
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert "last_replica" in res.stderr and "needs torch" in res.stderr


def test_what_a_stack_models_is_its_profiles_word(tmp_path, cli):
    """LoRA and pipeline parallelism are refused or run by what the backend
    profile says, not by the stack's name: vLLM's profile with LoRA marked
    unmodelled refuses a LoRA pool, and with pipeline parallelism unmodelled a pp = 2 pool."""
    vllm = yaml.safe_load((REPO_ROOT / "backend_profiles" / "vllm.yaml").read_text())
    (tmp_path / "no-lora.yaml").write_text(yaml.safe_dump({**vllm, "lora_modelled": False}))
    base = ("name: s\nworkload: {num_requests: 20, arrival: {type: concurrency, concurrency: 4}, "
            "input_tokens: {dist: fixed, value: 64}, output_tokens: {dist: fixed, value: 8}}\n")
    lora = "    lora: {max_loras: 2, max_lora_rank: 16, adapters: 4}\n"
    for backend, code in (("vllm", 0), (str(tmp_path / "no-lora.yaml"), 2)):
        p = tmp_path / "lora.yaml"
        p.write_text(base + f"pools:\n  - model: llama-3-8b\n    gpu: h100-sxm\n    engine: {{backend: {backend}}}\n"
                     + lora)
        r = cli("run", p, "--json")
        assert r.code == code, r.err
    assert "LoRA serving is modelled as vLLM schedules" in r.err and "pools[0].lora" in r.err
    (tmp_path / "no-pp.yaml").write_text(yaml.safe_dump({**vllm, "pp_modelled": False}))
    for backend, code in (("vllm", 0), (str(tmp_path / "no-pp.yaml"), 2)):
        p = tmp_path / "pp.yaml"
        p.write_text(base + f"pools:\n  - {{model: llama-3-8b, gpu: h100-sxm, pp: 2, engine: {{backend: {backend}}}}}\n")
        r = cli("run", p, "--json")
        assert r.code == code, r.err
    assert "is not modelled" in r.err and "engine.backend" in r.err


def test_a_profile_entry_point_may_name_a_path_or_a_function(tmp_path, monkeypatch):
    """Besides a package holding NAME.yaml, an entry point may name a path or a
    function returning one; anything else, or a path to nothing, is one clear error."""
    from importlib.metadata import EntryPoint

    import simulator.plugins as plugins
    from simulator.errors import LlmsimError
    from simulator.profiles.hardware import load_hardware

    gpu = tmp_path / "elsewhere.yaml"
    gpu.write_text((REPO_ROOT / "hardware_profiles" / "l40s.yaml").read_text().replace("name: l40s", "name: x"))
    (tmp_path / "paths_ext.py").write_text(f"PATH = {str(gpu)!r}\ndef find():\n    return PATH\nNUMBER = 3\n"
                                           "MISSING = 'no/such.yaml'\n")
    monkeypatch.syspath_prepend(str(tmp_path))

    def installed(*eps):
        monkeypatch.setattr(plugins, "entry_points",
                            lambda group: [EntryPoint(n, v, group) for n, v in eps if group == "llmsim.gpus"])
        plugins.forget()

    try:
        installed(("by-path", "paths_ext:PATH"), ("by-function", "paths_ext:find"))
        assert load_hardware("by-path").hbm_gib == load_hardware("by-function").hbm_gib == load_hardware("l40s").hbm_gib
        for value, words in (("paths_ext:NUMBER", "is int; expected a package holding bad.yaml"),
                             ("paths_ext:MISSING", "which is not a file"), ("paths_ext", "no bad.yaml in")):
            installed(("bad", value))
            with pytest.raises(LlmsimError, match=words):
                load_hardware("bad")
    finally:
        plugins.forget()


def test_an_installed_stack_is_known_to_validation_and_calibration(tmp_path, monkeypatch):
    """The stacks benchmark rows may name, the error model's regimes and the kernel
    calibration all read the backend profiles: a new stack's profile is the whole edit."""
    from importlib.metadata import EntryPoint

    import simulator.plugins as plugins
    from simulator.calibration.data import kernel_stacks
    from simulator.scenario.schema import Scenario
    from simulator.validation.error_model import regime_of_run
    from simulator.validation.rows import rows_from_csv

    stack = tmp_path / "demo-serve.yaml"
    stack.write_text(yaml.safe_dump({"name": "demo-serve", "stack": "demo-serve", "versions": "1.0",
                                     "engine": {"kernels": "vllm", "chunked_prefill": True}}))
    (tmp_path / "stack_ext.py").write_text(f"PATH = {str(stack)!r}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(plugins, "entry_points", lambda group: [EntryPoint("demo-serve", "stack_ext:PATH", group)]
                        if group == "llmsim.stacks" else [])
    plugins.forget()
    try:
        assert kernel_stacks() == ["vllm", "demo-serve", "sglang", "trtllm"]
        csv = tmp_path / "bench.csv"
        csv.write_text("engine,model,gpu,tp,isl_mean,osl_mean,concurrency,ttft_mean_ms\n"
                       "demo-serve 1.0,llama-3-8b,h100-sxm,1,512,128,8,40\n"
                       "other-serve,llama-3-8b,h100-sxm,1,512,128,8,40\n")
        known, unknown = rows_from_csv(csv)
        assert known.stack == "demo-serve" and known.skip == ""
        assert unknown.skip == "stack 'other-serve' is not one of demo-serve, sglang, trtllm, vllm"
        sc = Scenario.model_validate({
            "name": "s", "workload": {"num_requests": 10, "arrival": {"type": "poisson", "rate_per_s": 1},
                                      "input_tokens": {"dist": "fixed", "value": 64},
                                      "output_tokens": {"dist": "fixed", "value": 8}},
            "pools": [{"name": "p", "model": "llama-3-8b", "gpu": "h100-sxm", "engine": {"backend": "demo-serve"}}]})
        assert regime_of_run(sc, {}).stack == "demo-serve"
    finally:
        plugins.forget()
