"""``--set key.path=value``: change one key of a scenario from the command line.

List items are addressed by index (``pools.0.tp``) or by their ``name``
(``pools.chat.tp``). Values are parsed as YAML, so ``true``, ``4`` and
``{dist: fixed, value: 10}`` mean what they mean in the file. A setting of
a policy given by name (``router: prefix_aware``) turns the name into
``{type: prefix_aware}`` first, so ``pools.0.router.load_weight=64`` works.
"""
from __future__ import annotations

from typing import Any

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
    if part.isdigit():
        idx = int(part)
        if not idx < len(node):
            raise LlmsimError(f"index {idx} out of range (the list has {len(node)} items)", key_path=where)
        return idx
    for j, item in enumerate(node):
        if isinstance(item, dict) and item.get("name") == part:
            return j
    names = [str(it.get("name")) for it in node if isinstance(it, dict) and "name" in it]
    raise LlmsimError(f"no item named {part!r}; names: {', '.join(names) or '(none)'}", key_path=where)
