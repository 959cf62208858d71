"""Reading a scenario and checking it against physics before simulating.

Schema errors come from pydantic; the checks here need the profiles: the
model must fit on its GPUs, lengths must fit the model's context. Both end
in one LlmsimError naming the file and key path.
"""
from __future__ import annotations

from pathlib import Path

from pydantic import ValidationError

from ..errors import LlmsimError, from_validation_error
from ..metrics.slo import parse_slo
from ..profiles.loader import read_structured, resolve
from .overrides import apply_override
from .schema import Scenario
from .strict import refuse_bools_behind, refuse_coerced_bools


def resolve_scenario(name_or_path: str) -> Path:
    return resolve("scenarios", name_or_path)


def load_scenario(name_or_path: str | Path, overrides: list[str] | None = None) -> tuple[Scenario, Path]:
    path = resolve_scenario(str(name_or_path))
    data = read_structured(path)
    if not isinstance(data, dict):
        raise LlmsimError("expected a mapping with name, workload and pools", source=path)
    for o in overrides or []:
        try:
            apply_override(data, o)
        except LlmsimError as e:
            raise LlmsimError(e.message, source=f"{path} (--set {o})", key_path=e.key_path) from None
    # A bad value may come from the command line rather than the file: say so.
    source = f"{path} (with --set {' --set '.join(overrides)})" if overrides else path
    try:
        sc = Scenario.model_validate(data)
    except ValidationError as e:
        refuse_bools_behind(data, Scenario, source)
        raise from_validation_error(e, source, data) from None
    refuse_coerced_bools(data, sc, source)
    try:
        parse_slo(sc.slo)
    except LlmsimError as e:
        raise LlmsimError(e.message, source=source, key_path=e.key_path) from None
    return sc, path
