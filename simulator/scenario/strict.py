"""Refusing what pydantic's lax mode would quietly convert.

Pydantic accepts ``true`` for a number field and stores 1, so
``--set pools.main.replicas=true`` (or ``replicas: yes`` in a file) would
run one replica without a word. The schema keeps lax mode (it lets
``2`` stand for ``2.0`` and a string name pick an enum member); this walk
compares the validated model with the data it came from and refuses a
true/false the model holds as a number. When validation fails, a
true/false read as a number may be behind the failure ("min (16) must be
≤ max (1)" for ``max: true``), so each true/false is probed first: put a
word in its place, and if the schema then wants a number there, that is
the error to report.
"""
from __future__ import annotations

import copy
from typing import Any, Iterator

from pydantic import BaseModel, ValidationError

from ..errors import LlmsimError, user_loc, format_key_path

__all__ = ["refuse_coerced_bools", "refuse_bools_behind", "leaves"]


def refuse_coerced_bools(data: Any, model: BaseModel, source: Any = None) -> None:
    """Raise LlmsimError at the first key whose true/false became a number."""
    where = _first_coerced(data, model, ())
    if where is not None:
        path, got = where
        raise LlmsimError(f"expected a number, got {got!r} (true/false is not a count or a quantity)",
                          source=source, key_path=format_key_path(path))


_NUMBER_ERRORS = frozenset({"int_parsing", "float_parsing", "int_type", "float_type", "decimal_parsing"})


def refuse_bools_behind(data: Any, cls: type[BaseModel], source: Any = None) -> None:
    """After ``cls`` refused ``data``: raise for a true/false given where a number goes, if any."""
    if not any(isinstance(v, bool) for _, v in leaves(data)):
        return
    for path, v in leaves(data):
        if not isinstance(v, bool):
            continue
        probe = copy.deepcopy(data)
        node = probe
        for part in path[:-1]:
            node = node[part]
        node[path[-1]] = "a word, not true/false"
        try:
            cls.model_validate(probe)
        except ValidationError as e:
            for problem in e.errors():
                if problem.get("type") in _NUMBER_ERRORS and tuple(user_loc(problem["loc"], probe)) == path:
                    raise LlmsimError(f"expected a number, got {v!r} (true/false is not a count or a quantity)",
                                      source=source, key_path=format_key_path(path)) from None


def leaves(data: Any, path: tuple = ()) -> Iterator[tuple[tuple, Any]]:
    """(key path, value) of every scalar in nested mappings and lists."""
    if isinstance(data, dict):
        for k, v in data.items():
            yield from leaves(v, path + (k,))
    elif isinstance(data, list):
        for i, v in enumerate(data):
            yield from leaves(v, path + (i,))
    else:
        yield path, data


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
