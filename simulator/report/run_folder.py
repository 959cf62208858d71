"""A run's, a ladder's, a plan's or a sweep's folder checked before report.html is drawn from it.

``llmsim report DIR`` draws from files anyone may have edited since the run
wrote them: a results.json trimmed by hand for a ticket, a timeline.csv or
requests.parquet re-exported from a notebook. A file the page cannot draw
from is refused in one line naming it and the key or column, before a byte
of the page is written, rather than failing halfway as pandas' KeyError or
drawing a page with a chart silently missing. What the page reads is
stated once: the table columns beside the charts that read them
(``page_charts.REQUEST_COLUMNS``, ``TIMELINE_COLUMNS``), the results.json
blocks in :data:`RESULTS_SHAPE` here, ladder.json's and plan.json's in
:data:`LADDER_SHAPE` and :data:`PLAN_SHAPE`, the sweep table's columns in
:data:`SWEEP_COLUMNS` and :data:`SWEEP_NEEDED`. A ladder's step folders are
checked as run folders. A key or column the page cannot be drawn without
is required: an empty or foreign file would otherwise become a page with a
verdict nothing computed ("no fleet meets the SLO" from a plan.json of
``{}``).

Which page a folder gets is decided by the file it holds
(:data:`FOLDER_KINDS`); ``-o`` checks a folder against the same list, so
that no command writes into another's folder.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping, Optional

from ..errors import LlmsimError

__all__ = ["RESULTS_SHAPE", "LADDER_SHAPE", "PLAN_SHAPE", "SWEEP_COLUMNS", "SWEEP_NEEDED", "FOLDER_KINDS",
           "folder_kinds", "kinds_text", "check_results", "check_ladder", "check_plan", "check_sweep",
           "check_columns", "check_values", "check_optional", "check_rows"]

#: Each kind of folder llmsim writes and the file it is known by (a sweep's table is one of two formats,
#: parquet where pyarrow is installed): the file its page is drawn from.
FOLDER_KINDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("run", ("results.json",)), ("ladder", ("ladder.json",)), ("plan", ("plan.json",)),
    ("sweep", ("sweep.parquet", "sweep.csv")))


def folder_kinds(folder: Path) -> dict[str, str]:
    """The kinds of llmsim output ``folder`` holds, each with the file that marks it: more than one only
    where two commands' files were put in one folder, which ``-o`` refuses to do (by hand, or by an
    llmsim that did not refuse it)."""
    found: dict[str, str] = {}
    for kind, names in FOLDER_KINDS:
        name = next((n for n in names if (folder / n).is_file()), None)
        if name is not None:
            found[kind] = name
    return found


def kinds_text(found: Mapping[str, str]) -> str:
    """``a run's results.json and a plan's plan.json``: what a folder holds, in the words a refusal uses."""
    return " and ".join(f"a {kind}'s {name}" for kind, name in found.items())


def _number(v: Any) -> bool:
    """A number the page can format and put in a chart's JSON: not a bool, not NaN, not beyond a float's range."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return False
    try:
        return math.isfinite(float(v))
    except OverflowError:          # an integer past a float's range
        return False


@dataclass(frozen=True)
class _Kind:
    """What the page needs at a key; ``needed``: whenever the block holding it is there."""

    expected: str
    ok: Callable[[Any], bool]
    needed: bool = False


_BLOCK = _Kind("a mapping (a JSON object) or null", lambda v: v is None or isinstance(v, Mapping))
_ITEM = _Kind("a mapping (a JSON object)", lambda v: isinstance(v, Mapping))
_LIST = _Kind("a list or null", lambda v: v is None or isinstance(v, list))
_NUMBER = _Kind("a number or null", lambda v: v is None or _number(v))
_SLICES = _Kind("a whole number ≥ 1 or null", lambda v: v is None or (isinstance(v, int) and not isinstance(v, bool)
                                                                       and v >= 1))
_NEEDED_NUMBER = _Kind("a number", _number, needed=True)
_NEEDED_TEXT = _Kind("text", lambda v: isinstance(v, str), needed=True)
_NEEDED = _Kind("a value (not null)", lambda v: v is not None, needed=True)
_NEEDED_FIGURE = _Kind("a number or null", _NUMBER.ok, needed=True)
_PROBABILITY = _Kind("a probability between 0 and 1 or null", lambda v: v is None or (_number(v) and 0 < v < 1))
_FLAG = _Kind("true, false or null", lambda v: v is None or isinstance(v, bool))
_STEP = _Kind("a step's folder name (text, not a path)",
              lambda v: isinstance(v, str) and v.strip() not in ("", ".", "..") and not {"/", "\\"} & set(v),
              needed=True)
_NEEDED_ITEM = _Kind("a mapping (a JSON object)", _ITEM.ok, needed=True)
_NEEDED_BLOCK = _Kind(_BLOCK.expected, _BLOCK.ok, needed=True)
_NEEDED_FLAG = _Kind(_FLAG.expected, _FLAG.ok, needed=True)
# llmsim writes no ladder without its baseline, no plan without a candidate per combination searched
_STEPS = _Kind("a list of one step or more", lambda v: isinstance(v, list) and len(v) > 0, needed=True)
_CANDIDATES = _Kind("a list of one candidate or more", lambda v: isinstance(v, list) and len(v) > 0, needed=True)

#: The results.json keys the run page reads, by key path ("*": every key of a mapping, every item of a
#: list), and what each must be for the page to draw it; a block's keys are checked only where it is there.
RESULTS_SHAPE: tuple[tuple[str, _Kind], ...] = (
    # what every llmsim run writes and the page's answer is drawn from ({"completed": 5} made a page of
    # "seed None, engine None, 0 simulated seconds")
    ("completed", _NEEDED_NUMBER), ("llmsim", _NEEDED_ITEM), ("llmsim.product", _NEEDED_ITEM),
    ("llmsim.pools", _NEEDED_ITEM),
    ("request_throughput", _NUMBER), ("output_throughput", _NUMBER),
    ("slo", _BLOCK), ("slo.targets", _BLOCK), ("slo.targets.*", _ITEM),
    ("slo.targets.*.metric", _NEEDED_TEXT), ("slo.targets.*.percentile", _NEEDED_NUMBER),
    ("slo.targets.*.target_ms", _NEEDED_NUMBER), ("slo.targets.*.measured_ms", _NUMBER),
    ("slo.targets.*.attainment", _NUMBER), ("slo.targets.*.few_samples", _BLOCK),
    ("slo.targets.*.few_samples.samples", _NEEDED_NUMBER), ("slo.targets.*.few_samples.needed", _NEEDED_NUMBER),
    # --replicates: how many seeds met the SLO, beside the first seed's verdict
    ("llmsim.replicates", _BLOCK), ("llmsim.replicates.seeds", _LIST), ("llmsim.replicates.slo_met", _NUMBER),
    ("llmsim.replicates.slo_targets_met", _BLOCK), ("llmsim.replicates.slo_targets_met.*", _NUMBER),
    ("llmsim.simulated_seconds", _NUMBER), ("llmsim.product.slices", _SLICES),
    *((f"llmsim.product.{k}", _NUMBER) for k in ("gpus", "gpus_mean", "monthly_usd", "standby_gpus", "pooled_gpus",
                                                 "kwh_per_month", "co2e_kg_per_month")),
    ("llmsim.product.slice", _BLOCK), ("llmsim.product.slice.gpus", _NUMBER),
    ("llmsim.product.slice.monthly_usd", _NUMBER),
    ("llmsim.load", _BLOCK), ("llmsim.pools.*", _ITEM),
    *((f"llmsim.pools.*.{k}", _NEEDED_NUMBER) for k in ("gpus", "replicas_min", "replicas_mean", "replicas_max",
                                                        "mean_kv_utilization", "gpu_busy_fraction",
                                                        "mean_batch_size", "max_batch_size")),
    ("llmsim.pools.*.gpu_hours", _NUMBER), ("llmsim.pools.*.usd", _NUMBER),
    ("llmsim.classes", _BLOCK), ("llmsim.classes.*", _ITEM), ("llmsim.classes.*.slo", _BLOCK),
    *((f"llmsim.classes.*.{k}", _NUMBER) for k in ("median_ttft_ms", "p99_ttft_ms", "p99_tpot_ms")),
    ("llmsim.cost", _BLOCK),
    *((f"llmsim.cost.{k}", _NUMBER) for k in ("monthly_usd", "window_usd", "usd_per_million_output_tokens",
                                              "usd_per_request")),
    ("llmsim.cost.power", _BLOCK), ("llmsim.cost.power.monthly_usd", _NUMBER),
    ("llmsim.cost.pools", _LIST), ("llmsim.cost.pools.*", _ITEM),
    *((f"llmsim.cost.pools.*.{k}", _NEEDED) for k in ("name", "gpu", "gpus", "price_source")),
    *((f"llmsim.cost.pools.*.{k}", _NEEDED_NUMBER) for k in ("usd", "gpu_hours", "usd_per_gpu_hour")),
    ("llmsim.energy", _BLOCK),
    *((f"llmsim.energy.{k}", _NUMBER) for k in ("kwh_per_month", "co2e_kg_per_month", "joules_per_output_token",
                                                "pue", "grid_g_co2e_per_kwh")),
)

#: A ladder's or plan's row figures the pages show in tables and charts.
_FLEET_FIGURES = ("product_gpus", "product_monthly_usd", "gpus", "monthly_usd", "ttft_p99_ms", "tpot_p99_ms")

#: The ladder.json keys the ladder page reads (as :data:`RESULTS_SHAPE`); each step's folder, where it holds a
#: results.json, is checked as a run folder besides.
LADDER_SHAPE: tuple[tuple[str, _Kind], ...] = (
    ("steps", _STEPS), ("steps.*", _ITEM), ("steps.*.step", _STEP), ("steps.*.slo_met", _NEEDED_FLAG),
    *((f"steps.*.{k}", _NUMBER) for k in (*_FLEET_FIGURES, "ttft_p50_ms", "completed", "rejected", "cancelled",
                                                "stranded")),
    ("steps.*.slo_bounds_ms", _BLOCK), ("steps.*.slo_bounds_ms.*", _NUMBER),
    ("scenario", _NEEDED_TEXT), ("ladder", _NEEDED_TEXT), ("confidence", _PROBABILITY),
)

#: The plan.json keys the plan page reads: the best fleet (null: none meets the SLO), the candidates' table, the
#: probes' chart (a plan.json from before probes were kept is charted from its candidates).
PLAN_SHAPE: tuple[tuple[str, _Kind], ...] = (
    ("scenario", _NEEDED_TEXT), ("best", _NEEDED_BLOCK), ("best.overrides", _NEEDED_ITEM),
    ("best.ttft_p99_ms", _NEEDED_FIGURE), *((f"best.{k}", _NUMBER) for k in _FLEET_FIGURES),
    *(item for rows, listed, overrides, met in (("candidates", _CANDIDATES, _NEEDED_ITEM, _NEEDED_FLAG),
                                                ("probes", _LIST, _ITEM, _FLAG)) for item in (
        (rows, listed), (f"{rows}.*", _ITEM), (f"{rows}.*.overrides", overrides), (f"{rows}.*.slo_met", met),
        *((f"{rows}.*.{k}", _NUMBER) for k in _FLEET_FIGURES))),
)

#: The sweep table's columns the sweep page reads, where the table has them ("figure": a finite number or an
#: empty cell; "flag": true, false or an empty cell); the columns naming a point's overrides hold anything.
SWEEP_COLUMNS = {**{k: "figure" for k in _FLEET_FIGURES}, "slo_met": "flag"}
#: The columns a sweep table cannot be drawn without: ``error`` in every table (an empty cell: the point ran),
#: and where a point ran, its verdict, cost and p99 TTFT (a point that could not run has only its error).
SWEEP_NEEDED: dict[str, tuple[str, ...]] = {"every": ("error",), "ran": ("slo_met", "monthly_usd", "ttft_p99_ms")}

#: Top-level latency figures (``p99_ttft_ms``): the page's latency table reads every one.
_LATENCY = re.compile(r"^(mean|median|p[^_]*)_(ttft|tpot|itl|e2el)_ms$")


def _join(shown: str, key: Any) -> str:
    if isinstance(key, int):
        return f"{shown}[{key}]"
    return f"{shown}.{key}" if shown else str(key)


def _places(node: Any, parts: list[str], shown: str = "") -> Iterator[tuple[str, Any, bool]]:
    """(key path, value, whether it is there) of every place ``parts`` names below ``node``;
    nothing below a block that is absent or null (the page skips it)."""
    if not parts:
        yield shown, node, True
        return
    head, rest = parts[0], parts[1:]
    if head == "*":
        items = node.items() if isinstance(node, Mapping) else enumerate(node) if isinstance(node, list) else ()
        for k, v in items:
            yield from _places(v, rest, _join(shown, k))
    elif isinstance(node, Mapping):
        if head in node:
            yield from _places(node[head], rest, _join(shown, head))
        elif not rest:
            yield _join(shown, head), None, False


def _shown(v: Any) -> str:
    """A value as the user wrote it in JSON, short."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return f"the text {v[:40]!r}" + ("…" if len(v) > 40 else "")
    if isinstance(v, Mapping):
        return "a mapping"
    if isinstance(v, list):
        return "a list" if v else "an empty list"
    return repr(v)


def _check_shape(data: Mapping[str, Any], shape: Iterable[tuple[str, _Kind]], path: Path) -> None:
    """The first key of ``data`` the page would trip over, refused by its path. A value the file holds is
    judged before a key it lacks: a file edited by hand is told where the edit went wrong, whatever else
    it is missing."""
    missing: Optional[tuple[str, _Kind]] = None
    for pattern, kind in shape:
        for where, value, there in _places(data, pattern.split(".")):
            if not there:
                if kind.needed and missing is None:
                    missing = where, kind
            elif not kind.ok(value):
                raise LlmsimError(f"expected {kind.expected}, got {_shown(value)}", source=path, key_path=where)
    if missing is not None:
        where, kind = missing
        raise LlmsimError(f"missing; expected {kind.expected} (the report shows it)", source=path, key_path=where)


def check_ladder(ladder: Mapping[str, Any], path: Path) -> None:
    """Refuse a ladder.json the ladder page would trip over (``"steps": "abc"``, a step's p99 as text)."""
    _check_shape(ladder, LADDER_SHAPE, path)


def check_plan(plan: Mapping[str, Any], path: Path) -> None:
    """Refuse a plan.json the plan page would trip over (``"best": [1]``, a candidate's cost as text)."""
    _check_shape(plan, PLAN_SHAPE, path)


def check_results(results: Mapping[str, Any], path: Path) -> None:
    """Refuse a results.json whose blocks the run page would trip over (``"llmsim": "oops"``, a pool
    without its GPU count): the first such key, named by its path."""
    _check_shape(results, RESULTS_SHAPE, path)
    for key, value in results.items():
        m = _LATENCY.match(str(key))
        if m is None:
            continue
        stat = m.group(1)
        if stat.startswith("p") and not re.fullmatch(r"p\d+(\.\d+)?", stat):
            raise LlmsimError("not a percentile's name: expected p followed by a number, as in p99_ttft_ms",
                              source=path, key_path=str(key))
        if not _NUMBER.ok(value):
            raise LlmsimError(f"expected {_NUMBER.expected}, got {_shown(value)}", source=path, key_path=str(key))


def check_columns(found: Iterable[str], wanted: Iterable[str], path: Path, *,
                  written: str = "all of which llmsim run writes") -> None:
    """Refuse a table without a column the page draws from: named, with the ones the file has instead, and
    ``written``: why the page may count on it."""
    have = [str(c) for c in found]
    wanted = list(wanted)
    for name in wanted:
        if name not in have:
            listed = ", ".join(have[:12]) + (", ..." if len(have) > 12 else "") if have else "none"
            raise LlmsimError(f"missing column (found: {listed}); the report draws from "
                              f"{', '.join(wanted)}, {written}", source=path, key_path=name)


def _is_csv(path: Path) -> bool:
    return path.suffix.lower() == ".csv"


def _line(path: Path, i: int) -> str:
    """Where row ``i`` is, in the file's terms: a CSV's line (the header is line 1), else its row."""
    return f"line {i + 2}" if _is_csv(path) else f"row {i + 1}"


def _held(v: Any) -> str:
    """A cell's value as a user reads it: 1e+307, not numpy's np.float64(1e+307)."""
    return repr(v.item() if hasattr(v, "item") else v)


def _type(col: Any) -> str:
    """A column's type in a user's words: text, not pandas' ``object`` or ``str``."""
    import pandas as pd

    return "text" if pd.api.types.is_string_dtype(col) else f"{col.dtype} values"


def _check_column(df: Any, name: str, kind: str, path: Path) -> None:
    import numpy as np
    import pandas as pd

    col = df[name]
    if kind in ("figure", "flag"):
        _check_cells(col, name, kind, path)
        return
    if kind == "text" and pd.api.types.is_numeric_dtype(col):
        raise LlmsimError(f"expected text, got a column of {_type(col)}", source=path, key_path=name)
    if kind in ("number", "finite") and not (pd.api.types.is_numeric_dtype(col)
                                             and not pd.api.types.is_bool_dtype(col)):
        bad = np.flatnonzero((pd.to_numeric(col, errors="coerce").isna() & col.notna()).to_numpy())
        where = f"{_line(path, bad[0])} holds {_held(col.iloc[bad[0]])}" if bad.size and _is_csv(path) else \
            f"got a column of {_type(col)}"
        raise LlmsimError(f"expected numbers, {where}", source=path, key_path=name)
    if kind in ("finite", "fraction"):
        bad = np.flatnonzero(~np.isfinite(col.to_numpy(float)))
        if bad.size:
            held = "an empty cell" if pd.isna(col.iloc[bad[0]]) else _held(col.iloc[bad[0]])
            raise LlmsimError(f"expected a finite number, {_line(path, bad[0])} holds {held}", source=path,
                              key_path=name)
    if kind == "fraction":
        values = col.to_numpy(float)
        bad = np.flatnonzero((values < 0) | (values > 1))
        if bad.size:
            raise LlmsimError(f"expected a fraction from 0 to 1, {_line(path, bad[0])} holds {_held(col.iloc[bad[0]])}",
                              source=path, key_path=name)


def _check_cells(col: Any, name: str, kind: str, path: Path) -> None:
    """A sweep table's column, cell by cell: "figure", a finite number or empty; "flag", true, false or empty."""
    import numpy as np
    import pandas as pd

    if kind == "flag":
        if pd.api.types.is_bool_dtype(col):
            return
        bad = [i for i, v in enumerate(col.tolist()) if not (isinstance(v, (bool, np.bool_)) or pd.isna(v))]
        if bad:
            raise LlmsimError(f"expected true, false or an empty cell, {_line(path, bad[0])} holds "
                              f"{_held(col.iloc[bad[0]])}", source=path, key_path=name)
        return
    if pd.api.types.is_bool_dtype(col):
        raise LlmsimError(f"expected numbers, got a column of {_type(col)}", source=path, key_path=name)
    numbers = col if pd.api.types.is_numeric_dtype(col) else pd.to_numeric(col, errors="coerce")
    bad = np.flatnonzero((numbers.isna() & col.notna()).to_numpy()
                         | np.isinf(numbers.to_numpy(float, na_value=np.nan)))
    if bad.size:
        raise LlmsimError(f"expected a finite number or an empty cell, {_line(path, bad[0])} holds "
                          f"{_held(col.iloc[bad[0]])}", source=path, key_path=name)


def check_values(df: Any, wanted: Mapping[str, str], path: Path) -> None:
    """Refuse a column holding what the charts cannot draw: text where numbers go, a gap in a line."""
    for name, kind in wanted.items():
        _check_column(df, name, kind, path)


def check_optional(df: Any, wanted: Mapping[str, str], path: Path) -> None:
    """:func:`check_values` on the columns of ``wanted`` the table has (one an older run's may lack)."""
    check_values(df, {k: v for k, v in wanted.items() if k in df.columns}, path)


def check_sweep(df: Any, path: Path) -> None:
    """Refuse a sweep table whose figures the sweep page cannot show or chart (text where a cost goes), and
    one it could only draw with a made-up verdict: without rows, or without the columns of :data:`SWEEP_NEEDED`
    (a header-only or foreign CSV would read as "0 points meet the SLO"). The cells there are judged first, as
    a JSON file's values are before its missing keys."""
    check_optional(df, SWEEP_COLUMNS, path)
    if len(df) == 0:
        raise LlmsimError("holds no rows, and the page draws one per point that finished (a sweep stopped before "
                          "its first leaves such a table); rerun llmsim sweep to run its points", source=path)
    check_columns(df.columns, SWEEP_NEEDED["every"], path, written="which llmsim sweep writes on every row")
    if df["error"].isna().any():
        check_columns(df.columns, SWEEP_NEEDED["ran"], path,
                      written="all of which llmsim sweep writes for every point that ran")


def check_rows(rows: int, path: Path, why: Optional[str]) -> None:
    """Refuse a table with no rows where the run that wrote it had some; ``why`` says why (None: none were due)."""
    if rows == 0 and why is not None:
        raise LlmsimError(f"holds no rows, but {why}", source=path)
