"""Whose fault a refused engine is: the pool's, or its backend profile's.

A backend profile's keys are checked when it loads, each mapping on its own;
the engine a pool runs merges several of them (the profile's ``engine``, the
rule for the pool's GPU, the release's rules, the attention kernel's block
size), and a merge no single mapping shows can be refused. The refusal then
names ``pools[0].engine`` and keys the user never wrote, leaving them to
search their scenario for a fault that is in the profile. Told apart here:
where the profile's own defaults, with none of the pool's keys, are refused
as the pool's engine was, the message names the profile.
"""
from __future__ import annotations

from typing import Any, Mapping, Optional

from pydantic import ValidationError

from ..errors import LlmsimError, error_loc, format_key_path
from .model import ModelProfile


def _first(err: ValidationError) -> tuple[tuple, str]:
    e = err.errors()[0]
    return error_loc(e), e.get("msg", "").removeprefix("Value error, ")


def profile_at_fault(engine: Mapping[str, Any], gpu_name: str, model: Optional[ModelProfile],
                     refused: ValidationError, release: Optional[Mapping[str, Any]] = None) -> Optional[str]:
    """The refusal ``refused`` of ``engine`` (a pool's engine keys, its backend's defaults merged in) as a
    fault of the backend profile, naming it: where the backend's defaults for ``gpu_name``, ``model`` and the
    pool's release are refused alone, and as ``engine`` was. None where the pool's own keys are at fault, or
    the refusal asks the pool for a key no profile sets (a release's CUDA-graph figure, the release itself).
    ``release``: the release's keys where the pool's came otherwise than by ``backend_version``
    (:func:`.backend.apply_backend`)."""
    from ..engine.config import EngineConfig
    from ..kv_memory import graphs_refused
    from .backend import apply_backend, check_backend_version
    from .loader import resolve

    name = engine.get("backend")
    if not isinstance(name, str) or graphs_refused(refused):
        return None
    own: dict[str, Any] = {"backend": name}
    version = engine.get("backend_version")
    if isinstance(version, str):
        try:
            own["backend_version"] = check_backend_version(version)
        except ValueError:
            return None
    try:
        EngineConfig(**apply_backend(own, gpu_name, model=model, release=release))
    except LlmsimError:
        return None         # refused where the profile loads, which names it
    except ValidationError as alone:
        loc, msg = _first(alone)
        if (loc, msg) != _first(refused) or loc[:1] == ("backend_version",):
            return None
        path = resolve("backend_profiles", name)
        whose = f"backend {name!r} ({path})" if path.stem == name else str(path)
        what = f"{model.name} on {gpu_name}" if model is not None else gpu_name
        which = f", release {own['backend_version']}" if "backend_version" in own else ""
        key = f"{format_key_path(loc)}: " if loc else ""
        return f"{whose}: its defaults for {what}{which} are refused: {key}{msg}"
    return None
