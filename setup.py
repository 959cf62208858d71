"""Build hook: compile the simulation's hot modules with mypyc when possible.

A capacity plan is hundreds of simulations and a 10M-DAU hour is 18M
requests, so the replica engine, its prefix cache and the prefix-aware
router's bounds and choice are compiled to C with mypyc (the same code, type-checked;
1.6-2.3x the simulated requests per CPU-second, see docs/performance.md).
The result is identical to the plain Python modules, bit for bit
(tests/test_compiled.py holds the two equal).

Plain Python instead, with the same behaviour: set ``LLMSIM_COMPILE=0``,
install in editable mode (``pip install -e .``: edits must take effect
without a rebuild), or lack a C compiler / Python headers (the build warns
and carries on).
"""
from __future__ import annotations

import os
import sys

from setuptools import find_packages, setup

COMPILED = [
    "simulator/engine/blocks.py",
    "simulator/engine/sequence.py",
    "simulator/engine/dp_placement.py",
    "simulator/engine/wait_queue.py",
    "simulator/engine/prefix_cache.py",
    "simulator/engine/kv_tiers.py",
    "simulator/engine/base.py",
    "simulator/engine/replica.py",
    "simulator/engine/wake.py",
    "simulator/fleet/routing/prefix_bound.py",
    "simulator/fleet/routing/prefix_choice.py",
    "simulator/costmodel/scalar.py",
]


def _ext_modules() -> list:
    if os.environ.get("LLMSIM_COMPILE", "1") == "0":
        return []
    if any(cmd in sys.argv for cmd in ("editable_wheel", "develop")):
        return []
    try:
        from mypyc.build import mypycify

        exts = mypycify(["--follow-imports=silent", "--ignore-missing-imports", *COMPILED], opt_level="3")
    except (Exception, SystemExit) as e:   # mypy missing or the modules do not type-check
        print(f"llmsim: not compiling with mypyc ({e!r}); installing plain Python modules", file=sys.stderr)
        return []
    for ext in exts:
        ext.optional = True   # no C compiler: warn and install the plain modules
    return exts


# The built-in YAML folders sit at the repository root (easy to find and edit
# in a checkout) and ship inside the package as simulator.data.<folder>, so
# that an installed `llmsim` finds them from any directory
# (simulator/profiles/loader.py: builtin_dir).
DATA_FOLDERS = ("backend_profiles", "hardware_profiles", "model_profiles", "scenarios")
DATA_PACKAGES = {f"simulator.data.{folder}": folder for folder in DATA_FOLDERS}

setup(
    packages=find_packages(include=["simulator", "simulator.*", "workloads", "workloads.*"]) + list(DATA_PACKAGES),
    package_dir=DATA_PACKAGES,
    # backend_profiles/error_model/ holds the error model behind llmsim's intervals (one folder down, so that
    # it is not listed as a serving backend).
    package_data={package: ["*.yaml", "*/*.yaml"] for package in DATA_PACKAGES},
    ext_modules=_ext_modules(),
)
