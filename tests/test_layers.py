"""The packages import only downwards: scenario → compiled plan → fleet → engine → records → report.

metrics/ turns request records into figures and knows no pool, scenario or
report; engine/ simulates one replica and knows no fleet; fleet/ knows the
scenario only through its schema (the specs it is built from), never how a
scenario is loaded or compiled. Every import counts, those inside functions
too, so a lazy import cannot reverse a layer unseen.

:data:`LAYERS` places every module of ``simulator`` and ``workloads`` in one
layer, lowest first; a module imports from its own layer or those below,
never from one above. A new module or package has to be placed to pass.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

from conftest import REPO_ROOT

PACKAGE = REPO_ROOT / "simulator"

# package → the packages (or modules) it may not import
FORBIDDEN = {
    "simulator.metrics": ("simulator.engine", "simulator.fleet", "simulator.scenario", "simulator.report",
                          "simulator.runner", "simulator.sharding", "simulator.planning", "simulator.cli"),
    "simulator.engine": ("simulator.fleet", "simulator.scenario", "simulator.report", "simulator.runner",
                         "simulator.sharding", "simulator.planning", "simulator.cli"),
    "simulator.fleet": ("simulator.scenario.compile", "simulator.scenario.load", "simulator.scenario.overlays",
                        "simulator.report", "simulator.runner", "simulator.sharding", "simulator.planning",
                        "simulator.cli"),
}


# Lowest first. A name belongs to the layer of its longest matching prefix, so a
# leaf utility inside a package (scenario.strict, engine.wake) sits below it.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    # what everything uses and which uses nothing of llmsim: errors, strict parsing,
    # reading input files, plug-in discovery, the run-size limits, SimPy's loop, executors, results.json's field declarations
    ("base", ("simulator", "simulator.__version__", "simulator.errors", "simulator.structured", "simulator.dtypes",
              "simulator.fields", "simulator.stack_names",
              "simulator.atomic_write", "simulator.plugins", "simulator.runsize", "simulator.gcpause",
              "simulator.reads", "simulator.scenario.strict", "simulator.engine.wake", "simulator.planning.executors",
              "simulator.planning.pareto")),
    # GPU, model and serving-stack profiles; a backend profile's engine keys are engine settings
    ("profiles", ("simulator.profiles", "simulator.engine.config", "simulator.kv_memory", "simulator.hybrid_kv",
                   "simulator.expert_layout")),
    ("cost model", ("simulator.costmodel", "simulator.parallelism", "simulator.memory", "simulator.pipeline",
                    "simulator.estimate")),
    # the requests a run sends (records: workloads.request)
    ("workloads", ("workloads",)),
    # records -> figures; the measured error model the figures' intervals come from
    ("metrics", ("simulator.metrics", "simulator.validation.error_model")),
    ("engine", ("simulator.engine",)),
    # the fleet and the specs it is built from (the scenario's schema)
    ("fleet", ("simulator.fleet", "simulator.scenario.schema", "simulator.scenario.ci",
               "simulator.scenario.variants", "simulator.scenario.inert_keys")),
    # loading, overriding and compiling a scenario
    ("scenario", ("simulator.scenario",)),
    ("report", ("simulator.report",)),
    # running: one run, shards, seeds, sweeps and plans (and the ladder, which runs its rungs)
    ("run", ("simulator.runner", "simulator.sharding", "simulator.replicates", "simulator.planning",
             "simulator.inputs", "simulator.report.ladder", "simulator.report.results_reference")),
    # replaying measured benchmarks and fitting kernels: users of runs and of the cost model
    ("validation", ("simulator.validation", "simulator.calibration")),
    ("cli", ("simulator.cli", "simulator.notebook")),
]
_EXACT = {"simulator", "simulator.__version__"}     # the package root, not everything under it
ROOTS = ("simulator", "workloads")


def layer_of(name: str) -> int | None:
    best, rank = -1, None
    for i, (_, prefixes) in enumerate(LAYERS):
        for p in prefixes:
            hit = name == p if p in _EXACT else _within(name, p)
            if hit and len(p) > best:
                best, rank = len(p), i
    return rank


def _modules() -> list[Path]:
    return sorted(p for root in ROOTS for p in (REPO_ROOT / root).rglob("*.py"))


def _module(path: Path) -> str:
    parts = path.relative_to(REPO_ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path) -> set[str]:
    """Every module ``path`` imports, relative imports resolved, anywhere in the file."""
    module = _module(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[:len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            out.add(target)
            out.update(f"{target}.{a.name}" for a in node.names)   # `from .. import fleet` names a module
    return out


def _within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def violations(package: str) -> list[str]:
    folder = PACKAGE.joinpath(*package.split(".")[1:])
    return sorted(f"{_module(p)} imports {name}" for p in folder.rglob("*.py") for name in imports_of(p)
                  if any(_within(name, f) for f in FORBIDDEN[package]))


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_package_imports_only_downwards(package):
    assert violations(package) == []


def test_the_import_reader_sees_relative_and_lazy_imports():
    assert "simulator.metrics.gaps" in imports_of(PACKAGE / "engine" / "replica.py")   # from ..metrics.gaps
    assert "simulator.runner" in imports_of(PACKAGE / "report" / "ladder.py")           # inside a function
    assert "simulator.fleet.routing.registry" in imports_of(PACKAGE / "fleet" / "routing" / "load.py")


def test_every_module_has_a_layer():
    assert [_module(p) for p in _modules() if layer_of(_module(p)) is None] == []


def climbs(module: str, imported: set[str]) -> list[str]:
    """The imports of ``module`` that reach a higher layer."""
    mine = layer_of(module)
    out = []
    for name in sorted(imported):
        theirs = layer_of(name) if name.split(".")[0] in ROOTS else None
        if mine is not None and theirs is not None and theirs > mine:
            out.append(f"{module} ({LAYERS[mine][0]}) imports {name} ({LAYERS[theirs][0]})")
    return out


def test_no_module_imports_from_a_higher_layer():
    assert [c for p in _modules() for c in climbs(_module(p), imports_of(p))] == []


def test_the_layer_check_sees_a_climb():
    assert climbs("simulator.metrics.results", {"simulator.runner", "numpy", "simulator.errors"}) == [
        "simulator.metrics.results (metrics) imports simulator.runner (run)"]
    assert climbs("simulator.profiles.loader", {"simulator.scenario.strict"}) == []       # a leaf below its package
    assert climbs("simulator.profiles.loader", {"simulator.scenario.load"}) != []
    assert climbs("simulator.cli.run", {"simulator.runner", "simulator.report.summary"}) == []
