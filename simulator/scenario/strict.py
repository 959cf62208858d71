"""Refusing what pydantic's lax mode would quietly convert.

Pydantic accepts ``true`` for a number field and stores 1, so
``--set pools.main.replicas=true`` (or ``replicas: yes`` in a file) would
run one replica without a word. The schema keeps lax mode (it lets
``2`` stand for ``2.0`` and a string name pick an enum member); this walk
compares the validated model with the data it came from and refuses a
true/false the model holds as a number.
"""
from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from ..errors import LlmsimError, format_key_path

__all__ = ["refuse_coerced_bools"]


def refuse_coerced_bools(data: Any, model: BaseModel, source: Any = None) -> None:
    """Raise LlmsimError at the first key whose true/false became a number."""
    where = _first_coerced(data, model, ())
    if where is not None:
        path, got = where
        raise LlmsimError(f"expected a number, got {got!r} (true/false is not a count or a quantity)",
                          source=source, key_path=format_key_path(path))


def _first_coerced(data: Any, value: Any, path: tuple) -> tuple[tuple, Any] | None:
    if isinstance(data, bool):
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return path, data
        return None
    if isinstance(data, dict):
        for k, v in data.items():
            if isinstance(value, BaseModel):
                name = _field_name(type(value), k)
                if name is None:
                    continue
                sub = getattr(value, name, None)
            elif isinstance(value, dict) and k in value:
                sub = value[k]
            else:
                continue
            found = _first_coerced(v, sub, path + (k,))
            if found is not None:
                return found
    elif isinstance(data, list) and isinstance(value, (list, tuple)) and len(data) == len(value):
        for i, (d, v) in enumerate(zip(data, value)):
            found = _first_coerced(d, v, path + (i,))
            if found is not None:
                return found
    return None


def _field_name(cls: type[BaseModel], key: Any) -> str | None:
    fields = cls.model_fields
    if key in fields:
        return key
    for name, f in fields.items():
        if f.alias == key or f.validation_alias == key:
            return name
    return None
