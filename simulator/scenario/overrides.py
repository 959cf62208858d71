"""``--set key.path=value``: change one key of a scenario from the command line.

List items are addressed by index (``pools.0.tp``) or by their ``name``
(``pools.chat.tp``). Values are parsed as YAML, so ``true``, ``4`` and
``{dist: fixed, value: 10}`` mean what they mean in the file. A setting of
a policy given by name (``router: prefix_aware``) turns the name into
``{type: prefix_aware}`` first, so ``pools.0.router.load_weight=64`` works.

Since one key has several spellings (``pools.0.tp`` and ``pools.chat.tp``;
``pools.chat.engine`` holds ``pools.chat.engine.backend``), keys given
together (``--set``, ``--vary``, a sweep's grid) are compared as the list
items they resolve to (:func:`refuse_overlaps`), not as text.

A key that names nothing is a slip of one letter more often than not, so
its error names the nearest key or item that exists (:func:`no_item`,
:func:`key_fault`), in one wording wherever the key was given.
"""
from __future__ import annotations

import difflib
import re
import types
import typing
from dataclasses import dataclass
from typing import Any, Optional, Sequence

from pydantic import BaseModel, BeforeValidator, PlainValidator, WrapValidator
from pydantic.fields import FieldInfo

from ..errors import LlmsimError, nearest
from ..profiles.loader import named_profile
from ..stack_names import stack_name
from .strict import deeper_key
from ..structured import parse_flag_value


def parse_assignment(assignment: str) -> tuple[str, Any]:
    """``key.path=value`` as (key, value), the value read as YAML."""
    key, sep, raw = assignment.partition("=")
    key = key.strip()       # `key = value`, as --vary and the overlap check (given_sets) read it
    if not sep or not key:
        raise LlmsimError(f"--set expects key.path=value (got {assignment!r})")
    try:
        return key, parse_flag_value(raw)
    except ValueError as e:
        raise LlmsimError(f"--set {key}: {e}") from None


def apply_override(data: dict, assignment: str) -> None:
    key, value = parse_assignment(assignment)
    parts = key.split(".")
    node: Any = data
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        where = ".".join(parts[: i + 1])
        if isinstance(node, list):
            idx = _list_index(node, part, where)
            if last:
                node[idx] = value
            else:
                node = node[idx]
        elif isinstance(node, dict):
            if last:
                node[part] = value
            else:
                if part not in node or node[part] is None:
                    node[part] = {}
                elif isinstance(node[part], str):
                    # A policy given by name (router: prefix_aware) is short for {type: name}.
                    node[part] = {"type": node[part]}
                node = node[part]
        else:
            raise LlmsimError(f"cannot set {key!r}: {'.'.join(parts[:i])} is not a mapping or list", key_path=where)


def _list_index(node: list, part: str, where: str) -> int:
    if part.startswith("-") and part[1:].isdigit():
        # Python's "from the end" would edit an item the user did not name.
        raise LlmsimError(f"negative index {part}: address a list item by its position from 0 "
                          f"(0..{len(node) - 1}) or by its name", key_path=where)
    idx = _item_index(node, part)
    named = _named(node, part)
    if named is not None and named != idx:
        # a whole number is read as a position first: the item of that name would not be the one set
        raise LlmsimError(f"{part} is the position of item {idx} and the name of item {named}, so the key does "
                          "not say which it sets; give that item a name that is not a whole number", key_path=where)
    if idx is not None:
        return idx
    if part.isdigit():
        raise LlmsimError(f"index {int(part)} out of range (the list has {len(node)} item{'' if len(node) == 1 else 's'})", key_path=where)
    names = [str(it.get("name")) for it in node if isinstance(it, dict) and "name" in it]
    raise LlmsimError(no_item(part, names), key_path=where)


def no_item(part: str, names: Sequence[str]) -> str:
    """Why ``part`` addresses no item of a list whose items are ``names``, with the nearest name:
    one wording whether ``--set``, ``--vary`` or a variant met it."""
    return f"no item named {part!r}{nearest(part, names)}; names: {', '.join(names) or '(none)'}"


def key_fault(scenario: BaseModel, key: str, err: LlmsimError) -> Optional[LlmsimError]:
    """``err``, met applying and validating ``key`` (a ``--set`` or ``--vary``
    key path) on the valid ``scenario``, reworded as the fault of the key
    whatever its value, with the nearest key that exists
    (``pools.chat.replica``: did you mean ``pools.chat.replicas``?); None if
    ``err`` is about something else. It is the key's fault only when the
    key names nothing in ``scenario`` and ``err`` is about that very key path
    (alone, or among the problems of a mapping the key brought in, such as
    ``autoscaling`` lacking its required keys): a value cannot be wrong for a
    key that does not exist, and the rest follows from it."""
    wrong = _nothing_at(scenario, key)
    if wrong is None:
        return None
    about = [err.key_path] if err.key_path else [ln.strip().partition(": ")[0] for ln in err.message.split("\n")[1:]]
    return wrong if wrong.key_path in about else None


#: ``pools[0]``: a list item as validation's key paths show it, which a key to set does not spell.
_BRACKETED = re.compile(r"(\w+)\[\s*(\d*)\s*\]")


def _nothing_at(scenario: BaseModel, key: str) -> Optional[LlmsimError]:
    """What is wrong with ``key`` if it names nothing in ``scenario``, keyed
    by the path validation would name (``pools[0].replica``); None if it
    names something, or where it points depends on the value. The validated
    scenario is walked, not its schema's annotations: a router's or an
    arrival's settings depend on its type, which only the object knows."""
    parts = key.split(".")
    node: Any = scenario
    cls: Optional[type[BaseModel]] = None   # where the scenario holds nothing yet (autoscaling: null)
    shown: list[str] = []                   # the key path as validation names it: pools[0].replica
    for i, part in enumerate(parts):
        if cls is None and isinstance(node, (list, tuple)):
            names = [it.name for it in node if isinstance(getattr(it, "name", None), str)]
            if part.isdigit() and int(part) < len(node):
                idx = int(part)
            elif part in names:
                idx = next(j for j, it in enumerate(node) if getattr(it, "name", None) == part)
            elif part.isdigit() or part.startswith("-"):
                return None     # an index: apply_override says what is wrong with it
            else:
                return LlmsimError(no_item(part, names), key_path=".".join(parts[: i + 1]))
            node = node[idx]
            shown[-1:] = [f"{shown[-1] if shown else ''}[{idx}]"]
            continue
        model = cls or (type(node) if isinstance(node, BaseModel) else None)
        if model is None or model.model_config.get("extra") != "forbid":
            return None     # a mapping of free keys, a plain value, or a model taking any key
        names = _keys(model)
        if part not in names:
            near = difflib.get_close_matches(part, list(names), n=1)
            hint = f"did you mean {'.'.join([*parts[:i], near[0]])}? " if near else "check the spelling; "
            if (item := _BRACKETED.fullmatch(part)) and item.group(1) in names:    # as errors print it
                dotted = ".".join([*parts[:i], item.group(1), item.group(2) or "0", *parts[i + 1:]])
                hint = f"a list's item is addressed after a dot, by position or name: {dotted}; "
            elif (named := stack_name(part, list(names))) is not None:     # a launch's name, not a slip
                hint = f"{named[1]} is {'.'.join([*parts[:i], named[0]])} here; "
            elif (deeper := deeper_key(model, part)) is not None:          # written a level too high
                hint = f"did you mean {'.'.join([*parts[:i], deeper])}? "
            return LlmsimError(f"unknown key ({hint}see `llmsim schema`)", key_path=".".join([*shown, part]))
        shown.append(part)
        if cls is None:
            node = getattr(node, names[part])
            if node is not None:
                continue
        cls = _plain_model(model.model_fields[names[part]])
        if cls is None:
            return None
    return None


def _keys(model: type[BaseModel]) -> dict[str, str]:
    """The keys a file may write in ``model`` (aliases where given), each to its field's name."""
    out = {}
    for name, f in model.model_fields.items():
        out[f.alias or name] = name
        if model.model_config.get("populate_by_name") or model.model_config.get("validate_by_name"):
            out[name] = name
    return out


def _plain_model(field: FieldInfo) -> Optional[type[BaseModel]]:
    """The one model a field (``Optional[M]``) holds, None if it may hold several or a
    validator builds it (which type a mapping becomes is then the validator's to say)."""
    if field.discriminator is not None or any(
            isinstance(m, (BeforeValidator, WrapValidator, PlainValidator)) for m in field.metadata):
        return None
    annotation = field.annotation
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if typing.get_origin(annotation) in (typing.Union, types.UnionType) and len(args) == 1:
        annotation = args[0]
    if isinstance(annotation, type) and issubclass(annotation, BaseModel) and not annotation.__pydantic_root_model__:
        return annotation
    return None


def _item_index(node: list, part: str) -> Optional[int]:
    """The item ``part`` addresses, by position (a whole number within the list) or by ``name``; None if none."""
    if part.isdigit() and int(part) < len(node):
        return int(part)
    return _named(node, part)


def _named(node: list, part: str) -> Optional[int]:
    """The item whose ``name`` is ``part`` (a name written as a number, ``name: 1``, included); None if none.
    An item without a name has none to match: read as the text "None", it answered ``.None.``."""
    return next((j for j, it in enumerate(node)
                 if isinstance(it, dict) and it.get("name") is not None and str(it["name"]) == part), None)


def resolved_key(data: Any, key: str) -> tuple[str, ...]:
    """``key``'s parts with each list item it passes through named by its
    position in ``data``, so two spellings of one key compare equal. Past
    what ``data`` holds (a key a ``--set`` adds, a name no item has) the rest
    stays as written: applying the key reports what is wrong with it."""
    out: list[str] = []
    node = data
    for part in key.split("."):
        idx = _item_index(node, part) if isinstance(node, list) else None
        if idx is not None:
            out.append(str(idx))
            node = node[idx]
        else:
            out.append(part)
            node = node.get(part) if isinstance(node, dict) else None
    return tuple(out)


@dataclass(frozen=True)
class Given:
    """A key given on the command line or in a sweep file, as an error names it."""

    key: str                # the key path as written
    text: str               # where and how: "--set pools.0.tp=2", "grid.pools.chat.tp"
    verb: str = "set"       # what it does to the key: set, varied or swept
    where: str = "--set"    # the error's key path


_PRESENT = {"set": "sets", "varied": "varies", "swept": "sweeps", "searched": "searches"}


def given_sets(assignments: Sequence[str]) -> list[Given]:
    """``--set`` assignments as :class:`Given` keys (one without ``=`` is left to :func:`parse_assignment`)."""
    return [Given(a.split("=", 1)[0].strip(), f"--set {a}") for a in assignments if "=" in a]


def refuse_overlaps(given: Sequence[Given], data: Any = None, source: Any = None) -> None:
    """Two of ``given`` that address one key, or a key and a key inside it,
    are refused, whatever their spelling (resolved against ``data``, the
    scenario they apply to; None compares them as written): applied in turn
    the later would silently undo the earlier, and which one wins depends on
    an order the user never chose."""
    parts = [resolved_key(data, g.key) for g in given]
    for j, b in enumerate(given):
        for i in range(j):
            n = min(len(parts[i]), len(parts[j]))
            if parts[i][:n] == parts[j][:n]:
                raise LlmsimError(_overlap_message(given[i], b, parts[i], parts[j]), source=source,
                                  key_path=b.where)


def _overlap_message(a: Given, b: Given, pa: tuple[str, ...], pb: tuple[str, ...]) -> str:
    wa, wb = a.key.split("."), b.key.split(".")
    same = [f"{'.'.join(wa[:k + 1])} is {'.'.join(wb[:k + 1])}"
            for k in range(min(len(wa), len(wb))) if wa[k] != wb[k]]
    texts = [g.text + (f", which {_PRESENT.get(g.verb, g.verb)} all of {g.key}" if len(p) < len(q) else "")
             for g, p, q in ((a, pa, pb), (b, pb, pa))]
    verbs = f"{a.verb} twice" if a.verb == b.verb else f"both {a.verb} and {b.verb}"
    subject = a.key if len(pa) > len(pb) else b.key
    notes = f": {', '.join(same)}" if same else ""
    return f"{subject} is {verbs} ({texts[0]}{',' if texts[0] != a.text else ''} and {texts[1]}{notes}); " \
           "give each key once"


#: The keys whose value names a profile, and the kind of profile: the loader reads a name whatever its case.
_PROFILE_KEYS = {"gpu": "hardware_profiles", "model": "model_profiles", "draft_model": "model_profiles",
                 "backend": "backend_profiles"}


def as_loaded(key: str, value: Any) -> Any:
    """``value`` of ``key`` as the loader reads it, for :func:`repeated`: on a key naming a profile,
    ``B200`` and ``b200`` are one file (:func:`~..profiles.loader.named_profile`), so two choices
    spelt so would run the same fleet twice."""
    kind = _PROFILE_KEYS.get(key.rpartition(".")[2])
    if kind is None or not isinstance(value, str):
        return value
    return named_profile(kind, value) or value


def repeated(values: Sequence[Any], shown: Sequence[str]) -> Optional[str]:
    """The first value equal to an earlier one, named as ``shown`` names
    each value (``4 is given twice``, ``2.0 repeats 2``); None if none is.
    ``True`` is not ``1`` here: YAML tells them apart, and so does the schema."""
    for i, v in enumerate(values):
        for j in range(i):
            if values[j] == v and isinstance(values[j], bool) == isinstance(v, bool):
                return f"{shown[i]} is given twice" if shown[i] == shown[j] else f"{shown[i]} repeats {shown[j]}"
    return None
