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
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Sequence

import yaml

from ..errors import LlmsimError
from ..structured import parse_yaml


def parse_assignment(assignment: str) -> tuple[str, Any]:
    """``key.path=value`` as (key, value), the value read as YAML."""
    key, sep, raw = assignment.partition("=")
    if not sep or not key:
        raise LlmsimError(f"--set expects key.path=value (got {assignment!r})")
    try:
        return key, parse_yaml(raw)
    except yaml.YAMLError:
        return key, raw
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
    if idx is not None:
        return idx
    if part.isdigit():
        raise LlmsimError(f"index {int(part)} out of range (the list has {len(node)} items)", key_path=where)
    names = [str(it.get("name")) for it in node if isinstance(it, dict) and "name" in it]
    raise LlmsimError(f"no item named {part!r}; names: {', '.join(names) or '(none)'}", key_path=where)


def _item_index(node: list, part: str) -> Optional[int]:
    """The item ``part`` addresses, by position or by ``name``; None if none."""
    if part.isdigit():
        return int(part) if int(part) < len(node) else None
    for j, item in enumerate(node):
        if isinstance(item, dict) and item.get("name") == part:
            return j
    return None


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


def repeated(values: Sequence[Any], shown: Sequence[str]) -> Optional[str]:
    """The first value equal to an earlier one, named as ``shown`` names
    each value (``4 is given twice``, ``2.0 repeats 2``); None if none is.
    ``True`` is not ``1`` here: YAML tells them apart, and so does the schema."""
    for i, v in enumerate(values):
        for j in range(i):
            if values[j] == v and isinstance(values[j], bool) == isinstance(v, bool):
                return f"{shown[i]} is given twice" if shown[i] == shown[j] else f"{shown[i]} repeats {shown[j]}"
    return None
