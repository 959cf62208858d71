"""Printing helpers shared by the commands: JSON to stdout, tables via rich."""
from __future__ import annotations

import json
import math
import re
from typing import Any, Iterable, Optional, Sequence

from rich.console import Console, ConsoleDimensions
from rich.table import Table
from rich.text import Text

#: Width outside a terminal: wider than any table llmsim prints, so nothing is cut.
UNBOUNDED = 10_000


class _Console(Console):
    """Outside a terminal (a file, a pipe, a CI log) there is no screen to
    fit: rich would lay tables out for 80 columns and cut numbers with "…",
    so there every table gets its natural width and lines run as long as
    they are. At a terminal, its width as usual."""

    @property
    def size(self) -> ConsoleDimensions:
        size = Console.size.fget(self)  # type: ignore[attr-defined]
        if self.is_terminal or self._width is not None:
            return size
        return ConsoleDimensions(UNBOUNDED, size.height)

    @size.setter
    def size(self, new_size) -> None:
        Console.size.fset(self, new_size)  # type: ignore[attr-defined]


console = _Console(highlight=False)


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
    if v is None:       # a figure that does not apply, or a format llmsim does not model
        return "—"
    if isinstance(v, int) and not isinstance(v, bool) and abs(v) >= 1000:
        return f"{v:,}"
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


def product_columns(rows: Iterable[dict[str, Any]]) -> list[str]:
    """The product's GPUs and monthly cost, first, when any row is a slice of a
    product (its product figures differ from the slice's): one answer in every
    command, the one ``llmsim run`` leads with."""
    sliced = any(r.get("product_gpus") not in (None, r.get("gpus")) for r in rows)
    return ["product_monthly_usd", "product_gpus"] if sliced else []


def fleet_answer(row: dict[str, Any]) -> str:
    """``the product: 7,168 GPUs, $15.7M/month; the simulated slice: 96 GPUs, $210,240/month``, or the fleet's alone."""
    def part(gpus: Any, usd: Any, power: Any) -> str:
        g = "—" if gpus is None else f"{gpus:,}"
        m = "—" if usd is None else f"${usd:,.0f}"
        # where energy is priced apart, plans rank by the bill with its power: shown beside it
        return f"{g} GPU{'' if gpus == 1 else 's'}, {m}/month" + ("" if power is None else f" + ${power:,.0f} power")
    whole = part(row.get("gpus"), row.get("monthly_usd"), row.get("power_monthly_usd"))
    if row.get("product_gpus") in (None, row.get("gpus")):
        return f"the fleet: {whole}"
    product = part(row["product_gpus"], row.get("product_monthly_usd"), row.get("product_power_monthly_usd"))
    return f"the product: {product}; the simulated slice: {whole}"


def _header_lines(header: str, width: int) -> str:
    """A header broken after spaces, dots and underscores into lines of at most
    ``width`` (a word longer than that stays whole)."""
    parts = re.findall(r"[^ ._]+[ ._]?", header) or [header]
    lines = [""]
    for p in parts:
        if lines[-1] and len(lines[-1]) + len(p.rstrip()) > width:
            lines.append("")
        lines[-1] += p
    return "\n".join(line.rstrip() for line in lines)


def fitted_table(title: str, headers: Sequence[str], rows: Sequence[Sequence[Any]], width: Optional[int] = None, *,
                 keep: int = 1, caption: Optional[str] = None, left: Optional[Sequence[int]] = None,
                 header: int = 11, elsewhere: str = "a wider terminal, or --json, shows them") -> Table:
    """A table whose cells are never cut: each column is as wide as its
    widest cell (headers wrap between words instead), and when the table
    would not fit ``width`` (a terminal's; outside one, nothing is left out)
    the rightmost columns go, never the first ``keep``, and the caption
    names them and where else to read them (``elsewhere``: a command
    without ``--json`` names its file). Columns are listed most important
    first; cells are plain text, never markup; text columns are set left,
    numbers right (or the columns ``left`` names, when cells are numbers
    already formatted)."""
    width = console.width if width is None else width
    cells = [["—" if v is None else fmt(v) if not isinstance(v, Text) else v for v in r] for r in rows]
    if left is None:    # text columns left, numbers right
        left = [i for i in range(len(headers)) if any(isinstance(r[i], (str, Text)) for r in rows)
                and all(isinstance(r[i], (str, Text)) or r[i] is None for r in rows)]

    def need(i: int) -> int:
        # a header of up to ``header`` characters (ttft_p99_ms) keeps one line; a longer one wraps between words
        longest_word = max((len(w) for w in re.split(r"[ ._]", headers[i]) if w), default=1)
        return max([longest_word, min(len(headers[i]), header), *(len(str(c[i])) for c in cells)])

    shown = list(range(len(headers)))
    while len(shown) > keep and sum(need(i) + 3 for i in shown) + 1 > width:
        shown.pop()
    dropped = [headers[i].replace("\n", " ") for i in range(len(headers)) if i not in shown]
    notes = [caption] if caption else []
    if dropped:
        notes.append(f"left out at {width} columns: {', '.join(dropped)} ({elsewhere})")
    t = Table(title=title, title_justify="left", caption="; ".join(notes) or None, caption_justify="left")
    for i in shown:
        t.add_column(_header_lines(headers[i], need(i)), justify="left" if i in left else "right", no_wrap=True,
                     min_width=need(i))
    for c in cells:
        t.add_row(*(c[i] if isinstance(c[i], Text) else Text(str(c[i])) for i in shown))
    return t


def provenance_notes(gpus: dict[str, dict]) -> list[str]:
    """One note per GPU whose cost model was not fitted to its own measurements
    (``HardwareProfile.provenance`` blocks by GPU name)."""
    notes = []
    for gpu, c in gpus.items():
        if not c["calibrated"]:
            src = f" from {c['transferred_from']}" if c.get("transferred_from") else ""
            # a profile no `llmsim calibrate` has run on (a new GPU's file before its step 3) runs at its
            # datasheet peaks, far faster than any measured GPU: said, not only named
            why = (": no calibration, so its kernels run at the datasheet peaks (η = 1, no fixed costs), faster than "
                   "any measured GPU; `llmsim calibrate --gpu FILE` writes one" if c["status"] == "roofline" else "")
            notes.append(f"{gpu} cost model is {c['status']}{src}, not fitted to its own measurements{why}")
    return notes


def rows_table(title: str, rows: Sequence[dict[str, Any]], columns: Sequence[str], limit: int = 40,
               width: int = 60, keep: int = 1, elsewhere: Optional[str] = None) -> Table:
    """Rows as a table (:func:`~simulator.cli.output.fitted_table`: numbers
    never cut, the rightmost columns left out where a terminal is too narrow,
    never the first ``keep``, and ``elsewhere`` says where to read them);
    long text cut to ``width`` (the files written beside it hold the full
    text). A column no row has a value for is left out."""
    shown = [k for k in columns if any(r.get(k) is not None for r in rows)]
    cells = [[(v if len(v) <= width else v[: width - 1] + "…") if isinstance(v := r.get(k), str) else v
              for k in shown] for r in rows[:limit]]
    return fitted_table(title, shown, cells, keep=max(1, min(keep, len(shown))),
                        caption=f"first {limit} of {len(rows)} rows" if len(rows) > limit else None,
                        **({"elsewhere": elsewhere} if elsewhere is not None else {}))
