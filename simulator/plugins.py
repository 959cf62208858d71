"""Extensions that other installed packages declare through Python entry points.

A package extends llmsim without editing it by naming what it adds in its
``pyproject.toml``; ``pip install`` of that package is the registration, so
``llmsim run``, ``llmsim profiles`` and a sweep's worker processes all see it::

    [project.entry-points."llmsim.routers"]
    shortest = "my_ext.router"                # a module whose @register_router runs on import

    [project.entry-points."llmsim.stacks"]
    my-serve = "my_ext"                       # the package holding my-serve.yaml

    [project.entry-points."llmsim.arrivals"]
    uniform = "my_ext.uniform"                # a module whose @register_arrival runs on import

Code families (``llmsim.routers``, ``llmsim.executors``, ``llmsim.arrivals``) name a module:
importing it runs its registration decorators, as a built-in member's
module does. Profile families (``llmsim.gpus``, ``llmsim.models``,
``llmsim.stacks``) name the package whose folder holds ``<name>.yaml``, or
an object that is a profile file's path (a ``str`` or ``Path``, or a
function returning one); the entry point's name is the name a scenario
uses. A built-in of the same name wins.

Entry points are read when a name is not found among the built-ins, so a
run that uses none pays nothing for them.
"""
from __future__ import annotations

from functools import lru_cache
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path
from types import ModuleType

from .errors import LlmsimError

__all__ = ["CODE_GROUPS", "PROFILE_GROUPS", "load_code", "profile_files", "forget"]

# Families whose members are Python code, registered when their module is imported.
CODE_GROUPS = ("llmsim.routers", "llmsim.executors", "llmsim.arrivals")
# Families whose members are profile files: the loader's folder kind -> entry-point group.
PROFILE_GROUPS = {"hardware_profiles": "llmsim.gpus", "model_profiles": "llmsim.models",
                  "backend_profiles": "llmsim.stacks"}


def _where(ep: EntryPoint) -> str:
    dist = getattr(ep, "dist", None)
    return f"plug-in {ep.name!r} ({ep.value}, group {ep.group}" + (f", package {dist.name})" if dist else ")")


def _load(ep: EntryPoint) -> object:
    try:
        return ep.load()
    except Exception as e:      # a plug-in's own bug or a missing module: name the plug-in, not llmsim
        raise LlmsimError(f"{_where(ep)} failed to load: {type(e).__name__}: {e}") from None


@lru_cache(maxsize=None)
def load_code(group: str) -> tuple[str, ...]:
    """Import every module the installed packages declare in ``group``
    (once per process); the names of the entry points loaded."""
    if group not in CODE_GROUPS:
        raise ValueError(f"{group!r} is not a code plug-in group ({', '.join(CODE_GROUPS)})")
    eps = sorted(entry_points(group=group), key=lambda ep: ep.name)
    for ep in eps:
        _load(ep)
    return tuple(ep.name for ep in eps)


@lru_cache(maxsize=None)
def profile_files(kind: str) -> dict[str, Path]:
    """Name -> file of each profile the installed packages declare for a
    loader kind (``hardware_profiles``, ``model_profiles``, ``backend_profiles``)."""
    group = PROFILE_GROUPS.get(kind)
    if group is None:
        return {}
    out: dict[str, Path] = {}
    for ep in sorted(entry_points(group=group), key=lambda ep: ep.name):
        out[ep.name.lower()] = _profile_path(ep, _load(ep))
    return out


def _profile_path(ep: EntryPoint, obj: object) -> Path:
    if isinstance(obj, ModuleType):
        folders = list(getattr(obj, "__path__", [])) or [Path(obj.__file__ or "").parent]
        for folder in folders:
            for suffix in (".yaml", ".yml", ".json"):
                if (Path(folder) / f"{ep.name}{suffix}").is_file():
                    return Path(folder) / f"{ep.name}{suffix}"
        raise LlmsimError(f"{_where(ep)}: no {ep.name}.yaml in {', '.join(map(str, folders))}")
    if callable(obj):
        obj = obj()
    if not isinstance(obj, (str, Path)):
        raise LlmsimError(f"{_where(ep)} is {type(obj).__name__}; expected a package holding {ep.name}.yaml or "
                          "the path of a profile file (a str or Path, or a function returning one)")
    path = Path(obj)
    if not path.is_file():
        raise LlmsimError(f"{_where(ep)} names {path}, which is not a file")
    return path


def forget() -> None:
    """Read the entry points afresh (after packages were installed in this process)."""
    load_code.cache_clear()
    profile_files.cache_clear()
