"""Printing helpers shared by the commands: JSON to stdout, tables via rich."""
from __future__ import annotations

import json
import math
from typing import Any, Iterable

from rich.console import Console
from rich.table import Table

console = Console(highlight=False)


def _clean(o: Any) -> Any:
    if isinstance(o, float) and not math.isfinite(o):
        return None
    if isinstance(o, dict):
        return {k: _clean(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_clean(v) for v in o]
    if hasattr(o, "item"):  # numpy scalars
        return _clean(o.item())
    return o


def to_json(obj: Any) -> str:
    return json.dumps(_clean(obj), indent=2, sort_keys=False)


def print_json(obj: Any) -> None:
    print(to_json(obj))


def fmt(v: Any) -> str:
    if isinstance(v, float):
        if not math.isfinite(v):
            return "—"
        if abs(v) >= 1e9:
            return f"{v:.4g}"
        if abs(v) >= 100:
            return f"{v:,.1f}"
        return f"{v:.4g}"
    return str(v)


def kv_table(title: str, rows: Iterable[tuple[str, Any]]) -> Table:
    t = Table(title=title, show_header=False, title_justify="left")
    t.add_column("what", style="bold")
    t.add_column("value", justify="right")
    for k, v in rows:
        t.add_row(k, fmt(v))
    return t
