"""YAML and JSON text as llmsim reads them: strictly.

PyYAML and ``json`` keep the last of two equal keys, so ``replicas: 2``
followed further down by ``replicas: 8`` would silently run with 8; both
parsers here refuse a duplicate key instead, naming its line. A document
nested deeper than any scenario needs is refused before the parsers
recurse into it (50,000 ``[`` would otherwise end in a RecursionError).
Every problem is a ``ValueError`` with a readable message; callers add
the file name.
"""
from __future__ import annotations

import json
from typing import Any

import yaml

__all__ = ["parse_yaml", "parse_json", "MAX_DEPTH"]

#: Deepest nesting accepted (the deepest scenario key path is under 10).
MAX_DEPTH = 64


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses a key given twice in one mapping."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            try:
                hash(key)
            except TypeError:
                continue  # SafeLoader reports unhashable keys itself
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"key {key!r} given twice (first on line {seen[key] + 1}); "
                                f"a later value would silently replace the first", key_node.start_mark)
            seen[key] = key_node.start_mark.line
        return super().construct_mapping(node, deep=deep)


def _depth(text: str, opening: str, closing: str) -> int:
    """Deepest flow-style bracket nesting (an upper bound where brackets sit in strings)."""
    depth = deepest = 0
    for ch in text:
        if ch in opening:
            depth += 1
            deepest = max(deepest, depth)
        elif ch in closing:
            depth = max(depth - 1, 0)
    return deepest


def _check_depth(text: str) -> None:
    if _depth(text, "[{", "]}") > MAX_DEPTH:
        raise ValueError(f"nested more than {MAX_DEPTH} levels deep")


def parse_yaml(text: str) -> Any:
    """Parse YAML; raises ``yaml.YAMLError`` (with a mark) or ``ValueError``."""
    _check_depth(text)
    try:
        return yaml.load(text, Loader=_StrictLoader)
    except RecursionError:
        # block-style nesting (indentation) deep enough to exhaust the stack
        raise ValueError(f"nested more than {MAX_DEPTH} levels deep") from None


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict:
    out: dict = {}
    for k, v in pairs:
        if k in out:
            raise ValueError(f"key {k!r} given twice; a later value would silently replace the first")
        out[k] = v
    return out


def parse_json(text: str) -> Any:
    """Parse JSON; raises ``json.JSONDecodeError`` or ``ValueError``."""
    _check_depth(text)
    return json.loads(text, object_pairs_hook=_no_duplicates)
