"""The per-request table: every record with its derived latencies, on disk.

Parquet keeps a million rows small and typed for pandas/duckdb; CSV is the
fallback so that a base install without pyarrow still leaves the data
behind. The derived columns come from ``derive.RequestArrays``, the same
code results.json uses, so filtering the table to ``status == "finished"``
reproduces every figure in results.json.
"""
from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import Iterable

import numpy as np

from workloads.rejection import REASON_NAMES
from workloads.request import RECORD_COLUMNS, Request, Status

from .derive import RequestArrays
from .records import Records

__all__ = ["request_table", "write_requests"]

DERIVED_COLUMNS = ("ttft_ms", "tpot_ms", "e2el_ms")
_TEXT = ("status", "klass", "pool", "region", "reject_reason")
_SUFFIXES = (".parquet", ".csv")
_ROWS = 1 << 20


def request_table(requests: "Records | Iterable[Request]") -> dict[str, np.ndarray]:
    """The columns of ``RECORD_COLUMNS`` (status and reject_reason by name) plus ttft_ms,
    tpot_ms, e2el_ms (NaN where undefined); ``pandas.DataFrame(request_table(r))``."""
    rec = Records.of(requests)
    names = {"status": np.array([s.name.lower() for s in sorted(Status)], dtype=object),
             "reject_reason": np.array(REASON_NAMES, dtype=object)}
    cols = {c: names[c][rec.columns[c]] if c in names else rec.columns[c] for c in RECORD_COLUMNS}
    derived = RequestArrays(rec)
    for name in DERIVED_COLUMNS:
        cols[name] = getattr(derived, name)
    return cols


def _arrow_table(cols: dict[str, np.ndarray]):
    import pyarrow as pa

    arrays = {}
    for name, values in cols.items():
        if name in _TEXT or values.dtype.kind in "OU":
            arrays[name] = pa.array([str(v) for v in values.tolist()], type=pa.string())
        else:
            arrays[name] = pa.array(values)
    return pa.table(arrays)


def _write_csv(cols: dict[str, np.ndarray], w, header: bool) -> None:
    names = list(cols)
    if header:
        w.writerow(names)
    for row in zip(*(cols[n].tolist() for n in names)):
        w.writerow(["" if isinstance(v, float) and math.isnan(v) else v for v in row])


def write_requests(requests: "Records | Iterable[Request]", path_without_suffix: str | Path, *,
                   fmt: str | None = None) -> Path:
    """Write the per-request table; returns the path actually written
    (``.parquet`` if pyarrow imports, else ``.csv``; ``fmt`` forces one).
    A ``.parquet``/``.csv`` suffix already on the path is replaced, not doubled."""
    base = Path(path_without_suffix)
    if base.suffix in _SUFFIXES:
        base = base.with_suffix("")
    if fmt is None:
        try:
            import pyarrow.parquet  # noqa: F401
            fmt = "parquet"
        except ImportError:
            fmt = "csv"
    if fmt not in ("parquet", "csv"):
        raise ValueError(f"fmt must be 'parquet' or 'csv', got {fmt!r}")
    path = Path(f"{base}.{fmt}")
    path.parent.mkdir(parents=True, exist_ok=True)
    # A million rows at a time: an 18M-request merge on disk is never whole in memory.
    parts = (request_table(part) for part in Records.of(requests).chunks(_ROWS))
    if fmt == "parquet":
        import pyarrow.parquet as pq

        writer = None
        try:
            for cols in parts:
                table = _arrow_table(cols)
                writer = writer or pq.ParquetWriter(path, table.schema)
                writer.write_table(table)
        finally:
            if writer is not None:
                writer.close()
    else:
        with path.open("w", newline="") as f:
            w = csv.writer(f)
            for k, cols in enumerate(parts):
                _write_csv(cols, w, header=k == 0)
    return path
