"""Number formatting and verdict marks shared by the terminal tables."""
from __future__ import annotations

from typing import Any

OK, FAIL = "[green]✓[/]", "[red]✗[/]"


def num(v: Any, kind: str = "float") -> str:
    if v is None:
        return "—"
    if kind == "int":
        return f"{int(v):,}"
    return f"{float(v):,.2f}"
