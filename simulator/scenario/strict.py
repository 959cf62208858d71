"""Refusing what pydantic's lax mode would quietly convert.

Pydantic accepts ``true`` for a number field and stores 1, and ``"2"``
and stores 2, so ``--set pools.main.replicas=true`` (or ``replicas: yes``
in a file) would run one replica without a word, and ``tp: "2"`` a number
the user quoted as text (a template's unfilled slot, a spreadsheet's
export) would pass as if typed; the other way round, ``prefix_cache: 0``
or a quoted ``"false"`` would pass as true/false. The schemas keep lax
mode (it lets ``2`` stand for ``2.0`` and a string name pick an enum
member); this walk compares the validated model with the data it came
from and refuses a true/false or a text the model holds as a number, and
a number or a text it holds as true/false. When validation fails,
such a value may be behind the failure ("min (16) must be ≤ max (1)" for
``max: true``), so each is probed first: put a word in its place, and if
the schema then wants a number there, that is the error to report.
:func:`validate_strict` is the one way every file kind (scenario, GPU,
model, backend profile) is validated.
"""
from __future__ import annotations

import math
import types
import typing
from typing import Any, Iterator, Literal, Optional, TypeVar

from pydantic import BaseModel, ValidationError

from ..errors import LlmsimError, user_loc, format_key_path

__all__ = ["validate_strict", "refuse_coerced", "refuse_coerced_behind", "refuse_past_any_number", "leaves",
           "keys_at", "deeper_key", "deeper_key_at"]

M = TypeVar("M", bound=BaseModel)


def validate_strict(cls: type[M], data: Any, source: Any = None, *, whole_numbers_bounded: bool = True) -> M:
    """``cls`` validated from ``data``; every problem one LlmsimError naming
    ``source`` and the key path, a true/false or text read as a number included.
    ``whole_numbers_bounded``: refuse a whole number past a 64-bit integer's
    range (:func:`refuse_past_any_number`); False for a measurement file,
    whose figures are what a stack wrote (a benchmark's request rate of
    2**63 means all at once, as infinity does)."""
    from ..errors import SCHEMA_COMMAND, from_validation_error

    if whole_numbers_bounded:
        refuse_past_any_number(data, source)
    try:
        model = cls.model_validate(data)
    except ValidationError as e:
        refuse_coerced_behind(data, cls, source)
        raise from_validation_error(e, source, data, keys_at=lambda path: keys_at(cls, data, path),
                                    deeper_at=lambda path, key: deeper_key_at(cls, data, path, key),
                                    keys_shown_by=getattr(cls, "KEYS_SHOWN_BY", SCHEMA_COMMAND)) from None
    refuse_coerced(data, model, source)
    return model


#: The largest whole number any key takes: a 64-bit integer's. Past it a count overflows the float a
#: range check converts it to (a traceback), or a range check prints it digit by digit.
LARGEST_WHOLE = 2 ** 63 - 1


def refuse_past_any_number(data: Any, source: Any = None) -> None:
    """Raise LlmsimError at the first whole number past :data:`LARGEST_WHOLE`, named by its size."""
    for path, v in leaves(data):
        if isinstance(v, int) and not isinstance(v, bool) and abs(v) > LARGEST_WHOLE:
            digits = int(abs(v).bit_length() * math.log10(2)) + 1
            raise LlmsimError(f"a {'negative ' if v < 0 else ''}number of about {digits:,} digits, past any llmsim "
                              f"takes (at most {LARGEST_WHOLE:,} either side of 0)", source=source,
                              key_path=format_key_path(path))


def _refusal(got: Any, value: Any = None) -> str:
    if isinstance(value, bool):
        return f"{got!r} would be read as {str(value).lower()}: write true or false itself, without quotes"
    if isinstance(got, bool):
        return f"expected a number, got {got!r} (true/false is not a count or a quantity)"
    try:
        number = float(str(got).replace("_", ""))
    except ValueError:
        return f"expected a number, got the text {got!r}"
    if not math.isfinite(number):     # nan, inf: a number the schema refuses, not a quoting slip
        return f"expected a finite number, got {got!r}"
    return f"expected a number, got the text {got!r} (write the number without quotes)"


def refuse_coerced(data: Any, model: BaseModel, source: Any = None) -> None:
    """Raise LlmsimError at the first key whose true/false or text became a number, or whose number or text
    became true/false."""
    where = _first_coerced(data, model, ())
    if where is not None:
        path, got, became = where
        raise LlmsimError(_refusal(got, became), source=source, key_path=format_key_path(path))


_NUMBER_ERRORS = frozenset({"int_parsing", "float_parsing", "int_type", "float_type", "decimal_parsing"})


def _suspect(v: Any) -> bool:
    """A true/false, or a text that reads as a number."""
    if isinstance(v, bool):
        return True
    if isinstance(v, str):
        try:
            float(v)
        except ValueError:
            return False
        return True
    return False


def refuse_coerced_behind(data: Any, cls: type[BaseModel], source: Any = None) -> None:
    """After ``cls`` refused ``data``: raise for a true/false or a text given where a number goes, if any."""
    if cls.model_config.get("strict"):
        return      # a strict model converts nothing: its own errors say what is wrong
    suspects = [(path, v) for path, v in leaves(data) if _suspect(v)]
    for path, v in suspects[:50]:     # each probe validates the whole document again
        probe = _replaced(data, path, "a word, not true/false")
        try:
            cls.model_validate(probe)
        except ValidationError as e:
            for problem in e.errors():
                if problem.get("type") in _NUMBER_ERRORS and tuple(user_loc(problem["loc"], probe)) == path:
                    raise LlmsimError(_refusal(v), source=source, key_path=format_key_path(path)) from None


def _replaced(data: Any, path: tuple, value: Any) -> Any:
    """``data`` with ``value`` at ``path``, sharing every branch off the path: validation reads the
    nodes it is given and changes none, so the fifty probes of a backend profile need not copy its
    thousands of nodes fifty times."""
    if not path:
        return value
    out = list(data) if isinstance(data, list) else dict(data)
    out[path[0]] = _replaced(data[path[0]], path[1:], value)
    return out


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


def _first_coerced(data: Any, value: Any, path: tuple) -> tuple[tuple, Any, Any] | None:
    """(key path, value written, value read) of the first conversion :func:`refuse_coerced` refuses."""
    if isinstance(value, bool) and not isinstance(data, bool):
        return path, data, value       # 0, 1 or a text ("yes", "off") read as true/false
    if isinstance(data, (bool, str)):
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return path, data, value
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


def keys_at(cls: type[BaseModel], data: Any, path: tuple) -> list[str]:
    """The keys a file may write in the mapping at ``path`` of ``data`` (validated as ``cls``), so that
    a misspelt one is answered with the nearest (``replica``: did you mean ``replicas``?); [] where the
    schema does not say (a mapping of free keys, a value a validator builds). The data chooses among a
    union's models by the tag it writes (``dist: lognormal``), as validation does."""
    node_cls = _model_at(cls, data, path)
    if node_cls is None:
        return []
    return [f.alias or name for name, f in node_cls.model_fields.items()]


def deeper_key_at(cls: type[BaseModel], data: Any, path: tuple, key: str) -> Optional[str]:
    """:func:`deeper_key` of the mapping at ``path`` of ``data`` (validated as ``cls``)."""
    return deeper_key(_model_at(cls, data, path), key)


def _model_at(cls: type[BaseModel], data: Any, path: tuple) -> Optional[type[BaseModel]]:
    """The model the mapping at ``path`` of ``data`` is validated as; None where the schema does not say."""
    node_cls: Any = cls
    node: Any = data
    for part in path:
        node_cls = _model_of(node_cls, node)
        if isinstance(node_cls, type) and issubclass(node_cls, BaseModel):
            name = _field_name(node_cls, part)
            if name is None or not isinstance(node, dict) or part not in node:
                return None
            node_cls, node = node_cls.model_fields[name].annotation, node[part]
        elif typing.get_origin(node_cls) in (list, tuple) and isinstance(node, list) and isinstance(part, int) \
                and 0 <= part < len(node):
            node_cls, node = (typing.get_args(node_cls) or (Any,))[0], node[part]
        else:
            return None
    node_cls = _model_of(node_cls, node)
    return node_cls if isinstance(node_cls, type) and issubclass(node_cls, BaseModel) else None


def deeper_key(model: Any, key: str) -> Optional[str]:
    """``field.key`` where ``key`` is no key of ``model`` but a key of the one model a field of it holds
    (a pool's ``weight_dtype`` for its ``engine.weight_dtype``): written a level too high, it is no slip
    of a letter, and the nearest key of the level it was written at is no answer. None where no field's
    model takes it, or more than one's does."""
    if not (isinstance(model, type) and issubclass(model, BaseModel)):
        return None
    keys = {f.alias or name for name, f in model.model_fields.items()}
    if key in keys:
        return None
    found = []
    for name, f in model.model_fields.items():
        sub = _model_of(f.annotation, {})
        if isinstance(sub, type) and issubclass(sub, BaseModel) and sub.model_config.get("extra") == "forbid" \
                and key in {g.alias or n for n, g in sub.model_fields.items()}:
            found.append(f"{f.alias or name}.{key}")
    return found[0] if len(found) == 1 else None


def _model_of(annotation: Any, node: Any) -> Any:
    """``annotation`` with Optional, Annotated and a tagged union resolved for the value ``node``: a
    union's member, or the registered kind of a base model (an arrival process, a router) the tag names."""
    while True:
        if isinstance(annotation, type) and issubclass(annotation, BaseModel) and isinstance(node, dict):
            kinds = [m for m in _subclasses(annotation) if _tagged(m, node)]
            return kinds[0] if len(kinds) == 1 else annotation
        origin = typing.get_origin(annotation)
        if origin is typing.Annotated:
            annotation = typing.get_args(annotation)[0]
        elif origin in (typing.Union, types.UnionType):
            members = [a for a in typing.get_args(annotation) if a is not type(None)]
            models = [m for m in members if isinstance(m, type) and issubclass(m, BaseModel)]
            if len(members) == 1:
                annotation = members[0]
            elif isinstance(node, dict) and models:
                tagged = [m for m in models if _tagged(m, node)]
                if len(tagged) != 1:
                    return None
                annotation = tagged[0]
            elif isinstance(node, list):
                lists = [m for m in members if typing.get_origin(m) in (list, tuple)]
                return lists[0] if len(lists) == 1 else None
            else:
                return None
        else:
            return annotation


def _subclasses(cls: type) -> list[type]:
    out = []
    for sub in cls.__subclasses__():
        out += [sub, *_subclasses(sub)]
    return out


def _tagged(model: type[BaseModel], node: dict) -> bool:
    """Whether ``node`` writes the tag (a one-value Literal field, ``dist: fixed``) that selects ``model``."""
    for name, f in model.model_fields.items():
        if typing.get_origin(f.annotation) is Literal and len(typing.get_args(f.annotation)) == 1:
            key = f.alias or name
            if node.get(key, f.default) == typing.get_args(f.annotation)[0]:
                return True
    return False
