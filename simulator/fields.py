"""What a results.json field is: its unit and meaning, declared beside the code that writes it.

Each block's writer declares its keys in a ``FIELDS`` mapping next to the
function that fills them, so a key added to a writer has its definition one
screen away. :mod:`simulator.report.results_reference` assembles the blocks
into the file's tree and renders docs/reference/results-fields.md from it;
the suite checks real runs' files against the tree both ways
(:func:`undeclared`, :func:`absent`), so the page cannot drift from the code.

A key in angle brackets (``<pool>``) stands for names the run chooses: a
pool's, a class's, a metric's.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterator, Mapping, Optional, Sequence

__all__ = ["AS_GIVEN", "Field", "Fields", "leaf", "block", "of_model", "flatten", "undeclared", "absent", "matched",
           "lookup", "declare_results", "declared_results"]


#: The unit of a key that repeats a scenario setting as written: its keys are
#: the scenario's (docs/reference/scenario-keys.md), not declared again here.
AS_GIVEN = "as given"


@dataclass(frozen=True)
class Field:
    """One key: its unit, its meaning, when it is there (``None``: whenever
    its block is), and for a mapping (or a list of mappings) its own keys;
    ``copy_of`` names the key it repeats (a one-pool fleet's pool figures)."""

    unit: str
    meaning: str
    when: Optional[str] = None
    keys: Optional[Mapping[str, "Field"]] = None
    copy_of: Optional[str] = None


Fields = Mapping[str, Field]


def leaf(unit: str, meaning: str, when: Optional[str] = None) -> Field:
    return Field(unit, meaning, when)


def block(meaning: str, keys: Fields, when: Optional[str] = None, unit: str = "object") -> Field:
    return Field(unit, meaning, when, keys)


def of_model(model: Any, unit: str = "setting", **units: str) -> dict[str, Field]:
    """A block written as ``model_dump()`` of a pydantic model: its keys and
    their descriptions are the model's (``units`` names a key's unit; a key
    holding a model of its own is :data:`AS_GIVEN`)."""
    return {name: Field(AS_GIVEN if _holds_model(f.annotation) else units.get(name, _kind(f.annotation) or unit),
                        (f.description or "").rstrip("."),
                        None if f.is_required() else "the scenario sets it" if f.default is None else None)
            for name, f in model.model_fields.items()}


def _holds_model(tp: Any) -> bool:
    return hasattr(tp, "model_fields") or any(_holds_model(a) for a in getattr(tp, "__args__", ()) or ())


def _kind(tp: Any) -> Optional[str]:
    """``text`` or ``bool`` for a setting that holds only names or only yes/no (``Optional[str]``, a
    ``Literal`` of names), so that no one tracks it as a figure; None for a number or a mix."""
    import typing

    if tp is str or tp is bool:
        return "text" if tp is str else "bool"
    args = [a for a in typing.get_args(tp) if a is not type(None)]
    if typing.get_origin(tp) is typing.Literal:
        return "text" if args and all(isinstance(a, str) for a in args) else None
    kinds = {_kind(a) for a in args}
    return kinds.pop() if len(kinds) == 1 and None not in kinds else None


def _is_name(key: str) -> bool:
    return key.startswith("<") and key.endswith(">")


def _lookup(keys: Fields, key: str, names: Optional[Mapping[str, Sequence[str]]] = None) -> tuple[str, Field] | None:
    if key in keys:
        return key, keys[key]
    for k, f in keys.items():
        if _is_name(k) and (names is None or k not in names or key in names[k]):
            return k, f
    return None


def flatten(keys: Fields, prefix: str = "") -> Iterator[tuple[str, Field]]:
    """Every declared key as (dotted path, field), parents before children."""
    for k, f in keys.items():
        path = f"{prefix}{k}"
        yield path, f
        if f.keys is not None:
            yield from flatten(f.keys, path + ("[]." if f.unit.startswith("list") else "."))


def _walk(value: Any, keys: Fields, path: str) -> Iterator[tuple[str, str, Optional[Field]]]:
    """(actual path, declared path, field or None) for each key of ``value``."""
    for k, v in value.items():
        hit = _lookup(keys, k)
        here = f"{path}{k}"
        if hit is None:
            yield here, "", None
            continue
        name, f = hit
        yield here, name, f
        items = v if isinstance(v, list) else [v]
        for item in items:
            if isinstance(item, Mapping):
                sub = "[]." if isinstance(v, list) else "."
                if f.keys is None:
                    if f.unit != AS_GIVEN:
                        yield here + sub + "*", "", None
                else:
                    for a, d, g in _walk(item, f.keys, here + sub):
                        yield a, d, g


def undeclared(results: Mapping[str, Any], keys: Fields) -> list[str]:
    """The paths of ``results`` that ``keys`` does not declare."""
    return [a for a, _, f in _walk(results, keys, "") if f is None]


def matched(results: Mapping[str, Any], keys: Fields) -> set[str]:
    """The declared paths (as :func:`flatten` spells them) that ``results`` carries."""
    out = set()

    def go(value: Mapping[str, Any], keys: Fields, prefix: str) -> None:
        for k, v in value.items():
            hit = _lookup(keys, k)
            if hit is None:
                continue
            name, f = hit
            out.add(prefix + name)
            if f.keys is not None:
                sub = prefix + name + ("[]." if f.unit.startswith("list") else ".")
                for item in (v if isinstance(v, list) else [v]):
                    if isinstance(item, Mapping):
                        go(item, f.keys, sub)

    go(results, keys, "")
    return out


def absent(results: Mapping[str, Any], keys: Fields, prefix: str = "") -> list[str]:
    """Keys declared as always there (no ``when``) that a present block of ``results`` lacks."""
    out = []
    for k, f in keys.items():
        if _is_name(k):
            values = list(results.values())
        elif k in results:
            values = [results[k]]
        else:
            if f.when is None:
                out.append(prefix + k)
            continue
        if f.keys is None:
            continue
        for v in values:
            for item in (v if isinstance(v, list) else [v]):
                if isinstance(item, Mapping):
                    out += absent(item, f.keys, prefix + k + ("[]." if isinstance(v, list) else "."))
    return out


def lookup(key: str, keys: Fields, names: Optional[Mapping[str, Sequence[str]]] = None
           ) -> tuple[Optional[Field], int, Fields]:
    """The field a dotted key of a results file names, spelt as compare and
    check spell them (``llmsim.pools.main.gpus``: a ``<pool>`` by the run's
    name, a list's items by name or index), or None; with how many of its
    parts the declarations follow and the keys declared where they stop,
    so that a caller can name what was meant. ``names`` holds, for a name
    in angle brackets, the only names a run will write there (a scenario's
    pools for ``<pool>``): any other is no key."""
    parts = key.split(".")
    level: Fields = keys
    i = 0
    while True:
        hit = _lookup(level, parts[i], names)
        if hit is None:
            return None, i, level
        f = hit[1]
        i += 1
        if f.keys is not None and f.unit.startswith("list") and i < len(parts):
            i += 1                       # the item, by its name or index
        if i == len(parts):
            return f, i, level
        if f.keys is None:
            # A setting repeated as given holds the scenario's keys; any other
            # leaf, only a list's items (by_input_length.edges.0).
            if f.unit == AS_GIVEN or all(p.isdigit() for p in parts[i:]):
                return f, len(parts), level
            return None, i, {}
        level = f.keys


_results: list[Callable[[], Fields]] = []


def declare_results(fields: Callable[[], Fields]) -> None:
    """Name where results.json's declarations are. They are put together
    above the scenario's layer (:mod:`simulator.report.results_reference`),
    yet a scenario's ``check.metrics`` is read against them as it loads;
    so whoever starts llmsim (the command line, the notebook helpers) names
    them, as a function, and a command that loads no scenario never builds them."""
    _results[:] = [fields]


def declared_results() -> Optional[Fields]:
    """results.json's declared keys; None when nothing declared them (a
    library caller that did not start llmsim's command line or notebook helpers)."""
    return _results[0]() if _results else None
