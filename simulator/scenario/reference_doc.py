"""Generate the scenario key reference (docs/reference/scenario-keys.md) from the schema itself.

Hand-written key lists drift from the code; this walks the pydantic models
so every key, its type, default and description stay in step with what
`llmsim run` accepts. A test fails when the page is stale.
"""
from __future__ import annotations

import typing
from typing import Any, get_args, get_origin

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from .schema import Scenario

BEGIN = "<!-- BEGIN GENERATED KEYS -->"
END = "<!-- END GENERATED KEYS -->"


def _type_name(tp: Any) -> str:
    origin = get_origin(tp)
    if origin is typing.Annotated:
        return _type_name(get_args(tp)[0])
    if origin is typing.Literal:
        return " \\| ".join(f"`{a}`" for a in get_args(tp))
    if origin in (typing.Union, getattr(__import__("types"), "UnionType", None)):
        args = [a for a in get_args(tp) if a is not type(None)]
        return " \\| ".join(_type_name(a) for a in args)
    if origin in (list, tuple):
        inner = get_args(tp)
        return f"list of {_type_name(inner[0])}" if inner else "list"
    if origin is dict:
        return "mapping"
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return tp.__name__
    return getattr(tp, "__name__", str(tp))


def _models_in(tp: Any) -> list[type[BaseModel]]:
    out = []
    for a in (get_args(tp) or ()):
        out.extend(_models_in(a))
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        out.append(tp)
        # A field validated through a registry (pools[].router) names its
        # base model; the model lists the registered variants to document.
        out.extend(getattr(tp, "doc_variants", list)())
    return out


def _default(field) -> str:
    if field.is_required():
        return "required"
    d = field.default
    if d is PydanticUndefined or isinstance(d, BaseModel):
        return "see below"
    return f"`{d}`" if d is not None else "unset"


def _rows(model: type[BaseModel], prefix: str, seen: set) -> list[str]:
    rows = []
    subsections = []
    for name, f in model.model_fields.items():
        path = f"{prefix}{f.alias or name}"
        desc = (f.description or "").replace("|", "\\|")
        rows.append(f"| `{path}` | {_type_name(f.annotation)} | {_default(f)} | {desc} |")
        for sub in _models_in(f.annotation):
            if sub not in seen:
                seen.add(sub)
                sub_prefix = f"{path}[]." if get_origin(f.annotation) is list else f"{path}."
                subsections.append((sub, sub_prefix))
    for sub, sub_prefix in subsections:
        tag = getattr(sub.model_fields.get("type") or sub.model_fields.get("dist"), "default", None)
        title = f"{sub.__name__}" + (f" (`{tag}`)" if isinstance(tag, str) else "")
        doc = (sub.__doc__ or "").strip().split("\n\n")[0].replace("\n", " ")
        rows.append("")
        rows.append(f"### `{sub_prefix.rstrip('.')}` — {title}")
        rows.append("")
        if doc:
            rows.append(doc)
            rows.append("")
        rows.append("| key | type | default | meaning |")
        rows.append("|---|---|---|---|")
        rows.extend(_rows(sub, sub_prefix, seen))
    return rows


def generate() -> str:
    lines = ["| key | type | default | meaning |", "|---|---|---|---|"]
    lines += _rows(Scenario, "", set())
    return "\n".join([BEGIN, "", *lines, "", END])


PAGE = "docs/reference/scenario-keys.md"


def rewrite_between(path: str, begin: str, end: str, block: str) -> None:
    """Replace the text of ``path`` from ``begin`` to ``end`` (markers included) with ``block``."""
    from pathlib import Path

    p = Path(path)
    text = p.read_text()
    head, _, rest = text.partition(begin)
    _, _, tail = rest.partition(end)
    p.write_text(head + block + tail)


def update(path: str = PAGE) -> None:
    """Rewrite the generated block of ``path`` in place."""
    rewrite_between(path, BEGIN, END, generate())


if __name__ == "__main__":
    update()
