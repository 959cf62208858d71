"""The packages import only downwards: scenario → compiled plan → fleet → engine → records → report.

metrics/ turns request records into figures and knows no pool, scenario or
report; engine/ simulates one replica and knows no fleet; fleet/ knows the
scenario only through its schema (the specs it is built from), never how a
scenario is loaded or compiled. Every import counts, those inside functions
too, so a lazy import cannot reverse a layer unseen.
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
