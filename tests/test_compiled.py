"""The compiled build gives the plain Python build's results, bit for bit.

``pip install .`` compiles the engine's hot modules with mypyc (setup.py);
the tests import the checkout, which is plain Python. So the compiled
modules are run here through the *installed* package, in a subprocess
started outside the checkout, on runs that between them use every part of
the compiled code (chunked and whole prefill, decode stretches cut by
arrivals, the prefix cache with evictions, class caps and offload tiers, cancellations,
preemption, contiguous KV, speculative decoding, disaggregation, autoscaling, the
prefix-aware router's bounds, the reference engine subclassing the compiled
base, shards pickled across processes), and compared with the same runs
in this process.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from conftest import REPO_ROOT

# (scenario, variants, --set, engine, shards): small windows of the case studies and the engine's corner cases.
RUNS = [
    ("dau-10m", [], ["workload.duration_s=30"], "fast", None),
    ("dau-10m", [], ["workload.duration_s=20"], "fast", 2),
    ("autocomplete", [], ["workload.duration_s=15"], "fast", None),   # 60 s cost half the test's time
    ("chatbot", [], ["workload.duration_s=300"], "fast", None),
    ("chatbot", [], ["workload.duration_s=120", "classes.free.kv_budget_fraction=0.05"], "fast", None),
    ("ttft-program", [], ["workload.duration_s=300", "workload.arrival.rate_per_s=4",   # preempts
                          "pools.chat.engine.prefix_cache=true", "pools.chat.router=prefix_aware",
                          "pools.chat.engine.gpu_memory_utilization=0.55"], "fast", None),
    ("ttft-program", [], ["workload.duration_s=300", "workload.arrival.rate_per_s=4",   # reserves outputs
                          "pools.chat.engine.prefix_cache=true", "pools.chat.router=prefix_aware",
                          "pools.chat.engine.gpu_memory_utilization=0.55",
                          "pools.chat.engine.kv_admission=reserve_output"], "fast", None),
    ("ttft-program", [], ["workload.duration_s=300", "workload.arrival.rate_per_s=4",   # expects outputs
                          "pools.chat.engine.gpu_memory_utilization=0.55",
                          "pools.chat.engine.kv_admission=expected_output"], "fast", None),
    ("ttft-program", ["prefix-cache", "chunked-prefill", "admission", "fp8-kv", "disaggregation"],
     ["workload.duration_s=300"], "fast", None),
    ("ttft-program", ["disaggregation"], ["workload.duration_s=300", "pools.decode.replicas=1",   # decode reservation
                                          "pools.chat.engine.backend=sglang", "pools.decode.engine.backend=sglang",
                                          "pools.decode.engine.kv_memory.fraction=0.6"], "fast", None),
    ("ttft-program", ["prefix-cache", "chunked-prefill", "admission", "host-tier"],   # KV offload tiers
     ["workload.duration_s=300", "pools.chat.engine.gpu_memory_utilization=0.6", "pools.chat.engine.prefix_cache=true",
      "pools.chat.engine.kv_offload.host_gb=20", "pools.chat.engine.kv_offload.disk_gb=100"], "fast", None),
    ("quickcode", ["speculative"], [], "fast", None),
    ("quickcode", ["cancel-stale"], [], "fast", None),
    ("quickcode", ["int8", "speculative", "tgi"], ["workload.duration_s=40"], "fast", None),   # contiguous KV
    ("dau-10m", [], ["workload.duration_s=5", "pools.chat.replicas=2", "workload.arrival.rate_per_s=15"],
     "reference", None),
    ("llama-405b-pp", [], ["workload.duration_s=60"], "fast", None),   # pipeline rounds (a CostModel subclass)
]

_RUN = """
import json, sys
from simulator.metrics.results import jsonable
from simulator.runner import simulate
from simulator.scenario.load import load_scenario
from simulator.scenario.overlays import load_with_variants
from simulator.scenario.variants import select_variants
from simulator.sharding import run_sharded
import simulator.engine.replica as replica

def results(path, variants, sets, engine, shards):
    sc, p = load_scenario(path, [] if variants else sets)   # with variants, the sets apply after them (as run does)
    if variants:
        sc = load_with_variants(p, select_variants(sc.variants, variants, p), sets)
    out = simulate(sc, engine=engine, source=p) if shards is None else run_sharded(sc, shards, source=p, engine=engine)
    r = jsonable(out.results)
    r["llmsim"].pop("shards", None)
    return r

runs = json.loads(sys.argv[1])
print(json.dumps({"module": replica.__file__, "results": [results(*r) for r in runs]}))
"""


def _run(runs: list, cwd: Path, env: dict) -> dict:
    p = subprocess.run([sys.executable, "-c", _RUN, json.dumps(runs)], cwd=cwd, env=env, capture_output=True,
                       text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout)


def _c_toolchain() -> bool:
    """Whether this interpreter could build the extension modules: a C compiler and Python's headers."""
    cc = (sysconfig.get_config_var("CC") or "").split()
    return bool(cc) and shutil.which(cc[0]) is not None and \
        (Path(sysconfig.get_paths()["include"]) / "Python.h").is_file()


def _skip_unless_mypyc_fell_back(installed: str) -> None:
    """Skip where a plain build is expected; fail where mypyc itself gave up.

    setup.py falls back to plain Python modules when mypyc refuses the code
    (a type error, a decorator split from its class), and such a build
    passes every other test: a non-editable install on a machine with a C
    toolchain must therefore be the compiled one, or this test fails.
    """
    # An install is whatever sits in a site-packages folder, even one inside the checkout (.ci/run's
    # .ci/venv), where a fallback had been taken for the checkout's own plain modules and skipped.
    path = Path(installed).resolve()
    plain_install = installed.endswith(".py") and ("site-packages" in path.parts
                                                   or not path.is_relative_to(REPO_ROOT))
    if plain_install and os.environ.get("LLMSIM_COMPILE", "1") != "0" and _c_toolchain():
        pytest.fail(f"the installed llmsim ({installed}) is plain Python although a C compiler and Python's "
                    "headers are present: mypyc refused the compiled modules (`pip install -v .` prints "
                    "'llmsim: not compiling with mypyc (...)' with the reason; installed with LLMSIM_COMPILE=0? "
                    "run the tests with it set too)")
    pytest.skip("the installed llmsim is not the compiled build (not installed, an editable install, "
                f"LLMSIM_COMPILE=0 or no C compiler): {installed}")


@pytest.mark.slow
def test_compiled_build_equals_plain_python(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    probe = subprocess.run([sys.executable, "-c", "import simulator.engine.replica as r; print(r.__file__)"],
                           cwd=tmp_path, env=env, capture_output=True, text=True)
    installed = probe.stdout.strip()
    if probe.returncode != 0 or not installed.endswith((".so", ".pyd")):
        _skip_unless_mypyc_fell_back(installed or probe.stderr.strip()[-200:])
    runs = [[str(REPO_ROOT / "scenarios" / f"{name}.yaml"), *rest] for name, *rest in RUNS]
    compiled = _run(runs, tmp_path, env)
    plain = _run(runs, REPO_ROOT, {**env, "PYTHONPATH": str(REPO_ROOT)})
    assert plain["module"].endswith(".py") and Path(plain["module"]).is_relative_to(REPO_ROOT)
    assert compiled["module"] == installed
    for run, a, b in zip(RUNS, compiled["results"], plain["results"]):
        assert a == b, f"{run}: the compiled build differs (if the checkout changed since: pip install . again)"
