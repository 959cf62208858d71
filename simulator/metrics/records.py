"""The per-request records as columns: what every metric reads.

A plain run holds its requests as objects while it simulates, but the
figures are computed from columns: one numpy array per field. A sharded run
never has the objects in one process at all (the 10M-DAU peak hour is ~18M
requests, ~2 KiB each as objects against ~140 B as columns), so the merge
hands the metrics the shards' columns directly, and a plain run converts
its objects once. Filtering is a boolean mask, grouping one pass of
``np.unique``; no metric loops over requests in Python.

Dtypes are compact but lossless: times stay float64 (every figure must equal
the plain run's to the last bit), counts that fit are int32, the status is
its int8 code, and text columns hold shared str objects.
"""
from __future__ import annotations

from operator import attrgetter
from typing import Any, Iterable, Iterator, Mapping, NamedTuple, Optional

import numpy as np

from workloads.rejection import Rejection
from workloads.request import RECORD_COLUMNS, Request, Status

from .column_files import ColumnFiles

__all__ = ["Records", "COLUMNS", "LATENCY", "SessionSpans", "session_spans"]

#: Every column a metric or the per-request table reads.
COLUMNS = (*RECORD_COLUMNS, "priority", "preloaded")
_TIME = ("arrival", "admitted", "first_token", "finish", "queued", "net_in", "net_out", "prefill_done",
         "kv_transfer", "kv_wait")
_TEXT = ("klass", "pool", "region")
_WIDE = ("id", "session")       # may exceed 2^31 over a long trace; the other counts never do
#: Enums kept as their int8 codes (a reason's 0: the request was not rejected).
_CODES = ("status", "reject_reason")
DTYPES: dict[str, Any] = {**{c: np.float64 for c in _TIME}, **{c: object for c in _TEXT},
                          **{c: np.int64 for c in _WIDE}, **{c: np.int8 for c in _CODES}}


#: What the latency figures read (metrics.derive.RequestArrays; the per-class and per-region blocks).
LATENCY = ("id", "arrival", "admitted", "first_token", "finish", "input_tokens", "output_tokens", "status")


def _dtype(column: str):
    return DTYPES.get(column, np.int32)


class Records:
    """Columns of equal length, by field name (``records.arrival``)."""

    __slots__ = ("columns",)

    def __init__(self, columns: Mapping[str, np.ndarray]) -> None:
        # Columns on disk stay there (every access reads one afresh); see column_files.py.
        self.columns = columns if isinstance(columns, ColumnFiles) else dict(columns)

    @classmethod
    def of(cls, requests: "Records | Iterable[Request]") -> "Records":
        """``requests`` as columns (Records pass through unchanged)."""
        if isinstance(requests, Records):
            return requests
        reqs = requests if isinstance(requests, (list, tuple)) else list(requests)
        cols = {}
        for c in COLUMNS:   # map(attrgetter) runs in C: a shard's 280k requests, 20 columns
            values = map(attrgetter(c), reqs)
            if c == "reject_reason":
                cols[c] = np.fromiter((0 if v is None else v for v in values), dtype=np.int8, count=len(reqs))
            elif c == "status":
                cols[c] = np.fromiter(map(int, values), dtype=np.int8, count=len(reqs))
            elif c in _TEXT:
                cols[c] = np.array(list(values), dtype=object)
            else:
                cols[c] = np.fromiter(values, dtype=_dtype(c), count=len(reqs))
        return cls(cols)

    def __len__(self) -> int:
        if isinstance(self.columns, ColumnFiles):
            return self.columns.rows or 0
        return int(next(iter(self.columns.values())).size) if self.columns else 0

    def __getattr__(self, name: str) -> np.ndarray:
        try:
            return self.columns[name]
        except KeyError:
            raise AttributeError(name) from None

    def select(self, *names: str) -> "Records":
        """These columns only (the same arrays, not copies): filter a
        selection, not the whole table, when only a few columns are read."""
        return Records({k: self.columns[k] for k in names})

    def where(self, mask: np.ndarray) -> "Records":
        return Records({k: v[mask] for k, v in self.columns.items()})

    def groups(self, column: str, first: Iterable[str] = ()) -> dict[str, "Records"]:
        """Rows by the value of a text column: the ``first`` names (present
        or not) in their order, then the others in order of first appearance."""
        values = self.columns[column]
        out: dict[str, Records] = {name: self.where(values == name) for name in first}
        if len(values):
            names, firsts = np.unique(values.astype(str), return_index=True)
            for name in names[np.argsort(firsts)].tolist():
                if name not in out:
                    out[name] = self.where(values == name)
        return out

    @property
    def finished(self) -> np.ndarray:
        return self.columns["status"] == int(Status.FINISHED)

    def count(self, status: Status) -> int:
        return int(np.count_nonzero(self.columns["status"] == int(status)))

    def chunks(self, rows: int = 1 << 20) -> Iterator["Records"]:
        """The table ``rows`` rows at a time (at least one, maybe empty,
        chunk): columns on disk are read a slice at a time, so writing or
        iterating a table never holds it whole."""
        n, cols = len(self), self.columns
        for lo in range(0, max(n, 1), rows):
            hi = min(lo + rows, n)
            if isinstance(cols, ColumnFiles):
                yield Records({k: cols.rows_of(k, lo, hi) for k in cols})
            else:
                yield Records({k: v[lo:hi] for k, v in cols.items()})

    def __iter__(self) -> Iterator[Request]:
        """Rows as Request objects (without block ids), a slice at a time:
        for code that wants objects; the metrics never ask."""
        names = list(self.columns)
        for part in self.chunks(1 << 16):
            for row in zip(*(part.columns[n].tolist() for n in names)):
                r = Request.__new__(Request)
                for n, v in zip(names, row):
                    setattr(r, n, v)
                r.status = Status(r.status)
                r.reject_reason = Rejection(r.reject_reason) if getattr(r, "reject_reason", 0) else None
                r.blocks = None
                yield r


class SessionSpans(NamedTuple):
    """Requests grouped by session (:func:`session_spans`)."""

    ids: np.ndarray          # the sessions, sorted
    first_seen: np.ndarray   # each session's first row
    which: np.ndarray        # each row's index into ``ids``
    first: np.ndarray        # each session's earliest arrival
    last: Optional[np.ndarray]   # each session's latest end, where ends were given


def session_spans(session: np.ndarray, arrival: np.ndarray, end: Optional[np.ndarray] = None) -> SessionSpans:
    """Group rows of session ids ``session`` (every one a session's: leave out the rows of none) in one pass
    of ``np.unique``: each session's first arrival and, with ``end``, its last end."""
    ids, first_seen, which = np.unique(session, return_index=True, return_inverse=True)
    first = np.full(ids.size, np.inf)
    np.minimum.at(first, which, arrival)
    last = None
    if end is not None:
        last = np.full(ids.size, -np.inf)
        np.maximum.at(last, which, end)
    return SessionSpans(ids, first_seen, which, first, last)

