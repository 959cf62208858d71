"""Every method a compiled class calls on ``self`` is declared on that class or a base.

mypy type-checks setup.py's COMPILED modules before mypyc compiles them, and
refuses a call of a method only subclasses define (``"ReplicaBase" has no
attribute ...``); setup.py then installs plain Python modules, several times
slower, and every test but the slow tests/test_compiled.py still passes. The
shared engine code calls engine-specific methods through a declaration on
ReplicaBase that raises NotImplementedError (``_remove_running``, ``_hold``).
This checks that rule without mypy, which the test environment lacks.
"""
from __future__ import annotations

import ast

from conftest import REPO_ROOT


def _compiled_modules() -> list[str]:
    tree = ast.parse((REPO_ROOT / "setup.py").read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "COMPILED" for t in node.targets):
            return [ast.literal_eval(e) for e in node.value.elts]
    raise AssertionError("setup.py names no COMPILED list")


def _classes() -> dict[str, ast.ClassDef]:
    out: dict[str, ast.ClassDef] = {}
    for rel in _compiled_modules():
        for node in ast.parse((REPO_ROOT / rel).read_text()).body:
            if isinstance(node, ast.ClassDef):
                out[node.name] = node
    return out


def _declared(cls: ast.ClassDef, classes: dict[str, ast.ClassDef]) -> set[str]:
    names = {n.name for n in cls.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    for base in cls.bases:
        if isinstance(base, ast.Name) and base.id in classes:
            names |= _declared(classes[base.id], classes)
    return names


def test_compiled_classes_call_only_methods_they_declare():
    classes = _classes()
    assert "ReplicaBase" in classes and "FastReplica" in classes
    missing = []
    for name, cls in classes.items():
        declared = _declared(cls, classes)
        for node in ast.walk(cls):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and isinstance(node.func.value, ast.Name) and node.func.value.id == "self"
                    and node.func.attr.startswith("_") and not node.func.attr.startswith("__")
                    and node.func.attr not in declared):
                missing.append(f"{name}.{node.func.attr} (line {node.lineno})")
    assert not missing, ("called on self but declared only in subclasses (declare it on the class, raising "
                         "NotImplementedError, or mypy refuses the module and mypyc is skipped): " + ", ".join(missing))
