"""Readers for the request-trace file formats llmsim understands.

Each reader turns one file into a :class:`RawTrace` of column arrays on the
trace's own clock, and is the only place that knows the format's column names
and units. Everything that is the same for every format (lengths must be
positive integers, time must not go backwards, windowing, scaling) lives in
:mod:`workloads.traces`, so a new format is one function here.

Every problem is raised as one :class:`LlmsimError` naming the file and the
1-based line (the CSV header is line 1), because the user's fix is to open
the file at that line. pandas is imported lazily: ``import workloads`` must
stay cheap for runs that use no trace.
"""
from __future__ import annotations

import zlib
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Callable

import numpy as np

from simulator.errors import LlmsimError

__all__ = ["RawTrace", "READERS", "TRACE_FORMATS", "detect_format", "trace_error"]

#: Mooncake hashes every 512 prompt tokens into one id (FAST'25 release).
MOONCAKE_BLOCK_SIZE = 512


@dataclass
class RawTrace:
    """One file's columns, in file order, before any validation.

    Lengths stay float until validated so that a non-integer value can be
    reported with its line rather than silently truncated.
    """

    t: np.ndarray                      # seconds, the trace's own clock
    input_tokens: np.ndarray           # float64
    output_tokens: np.ndarray          # float64
    lines: np.ndarray                  # 1-based file line of each row
    session: np.ndarray | None = None  # int64, -1 = no session
    klass: np.ndarray | None = None    # object (str)
    blocks: list | None = None         # per row: tuple[int, ...] or None
    block_size: int | None = None      # tokens per block id, if the format fixes it


def trace_error(path: Path, message: str, line: int | None = None) -> LlmsimError:
    """The one error shape of trace problems: ``file: line N: message``."""
    return LlmsimError(f"line {int(line)}: {message}" if line is not None else message, source=path)


def _strip_gz(path: Path) -> str:
    """The suffix that tells the format (``x.jsonl.gz`` reads as ``.jsonl``)."""
    suffixes = [s.lower() for s in path.suffixes]
    if suffixes and suffixes[-1] == ".gz":
        suffixes = suffixes[:-1]
    return suffixes[-1] if suffixes else ""


def _open_text(path: Path) -> IO[str]:
    """The trace's text (the file's own size was checked before: ``reads.input_file``)."""
    from simulator.reads import MAX_TRACE_BYTES, open_text

    return open_text(path, MAX_TRACE_BYTES, "trace")


# --------------------------------------------------------------------------- CSV


#: Optional columns read as text whatever their cells look like: a class named 1, or ids in a column with an
#: empty cell, would otherwise be parsed as floats (1.0, 7.0).
_TEXT_COLUMNS = ("session_id", "block_ids", "class")


#: Cells of a text column read as no value: what spreadsheets and pandas write for a missing one. In a
#: number column they are refused instead (a token count written as NA is not a count).
_NO_VALUE_WORDS = ("NA", "N/A", "n/a", "#N/A", "<NA>", "null", "NULL", "None", "nan", "NaN")


def _read_csv(path: Path, required: dict[str, str], optional: dict[str, str] = {}):
    """Read a CSV and return (frame, {role: column}, lines).

    ``required``/``optional`` map a role to the column name the format uses;
    names match case- and whitespace-insensitively since hand-edited files
    drift. Blank lines are kept by the parser and dropped here so that the
    row index still maps to the file line.
    """
    import pandas as pd

    try:
        with _open_text(path) as fh:
            header = pd.read_csv(fh, nrows=0, skipinitialspace=True).columns
        _refuse_repeated_columns(path, header, [*required.values(), *optional.values()])
        text = {c: str for c in header if str(c).strip().lower() in _TEXT_COLUMNS}
        with _open_text(path) as fh:
            # only an empty cell is missing: "nan", "NA" or "null" written in a cell is refused as what it says
            df = pd.read_csv(fh, skip_blank_lines=False, skipinitialspace=True, dtype=text, keep_default_na=False,
                             na_values=[""])
    except pd.errors.EmptyDataError:
        raise trace_error(path, "the file is empty (expected a CSV header line)") from None
    except pd.errors.ParserError as e:
        text = str(e).strip()
        m = re.search(r"[Ee]xpected (\d+) fields in line (\d+), saw (\d+)", text)
        if m:
            raise trace_error(path, f"expected {m.group(1)} fields, found {m.group(3)}", int(m.group(2))) from None
        raise trace_error(path, f"cannot parse the CSV ({text})") from None
    except UnicodeDecodeError:
        raise trace_error(path, "not a UTF-8 text file") from None
    except (OSError, EOFError, zlib.error) as e:   # EOFError, zlib.error: a .gz cut short or corrupt
        raise trace_error(path, f"cannot read the file ({getattr(e, 'strerror', None) or e})") from None

    if not isinstance(df.index, pd.RangeIndex):
        # pandas takes a first row longer than the header as an index column, not as an error
        raise trace_error(path, f"expected {len(df.columns)} fields, found {df.index.nlevels + len(df.columns)}", 2)
    found = {str(c).strip().lower(): c for c in df.columns}
    cols: dict[str, Any] = {}
    for role, name in required.items():
        if name.lower() not in found:
            listed = ", ".join(str(c).strip() for c in df.columns)
            raise trace_error(path, f"missing column '{name}' (found: {listed})", 1)
        cols[role] = found[name.lower()]
    for role, name in optional.items():
        if name.lower() in found:
            cols[role] = found[name.lower()]

    for c in df.columns:
        if pd.api.types.is_numeric_dtype(df[c]) or pd.api.types.is_bool_dtype(df[c]):
            continue
        cells = df[c].astype("string").str.strip()
        # a cell of tabs is as empty as one of spaces (which the parser drops); in a text column (a session,
        # a class) the usual spellings of "none" mean no value too
        missing = cells.eq("") | cells.isin(_NO_VALUE_WORDS) if c in text else cells.eq("")
        df[c] = df[c].mask(missing.fillna(False).astype(bool))
    blank = df.isna().all(axis=1).to_numpy()
    if blank.any():
        df = df.loc[~blank]
    lines = df.index.to_numpy(dtype=np.int64) + 2
    return df, cols, lines


def _refuse_repeated_columns(path: Path, header, read: list[str]) -> None:
    """Raise if a column the format reads is named twice (as written, or in two cases: the format's names
    match either way); repeats of columns it does not read are left alone."""
    from simulator.reads import MAX_TRACE_BYTES, repeated_columns

    for name, refusal in repeated_columns(path, header, MAX_TRACE_BYTES, "trace", fold_case=True).items():
        if name in {r.lower() for r in read}:
            raise trace_error(path, refusal, 1)


def _csv_numeric(path: Path, series, column: str, lines: np.ndarray) -> np.ndarray:
    """A CSV column as float64, or an error at the first empty/non-numeric cell."""
    import pandas as pd

    if pd.api.types.is_numeric_dtype(series.dtype) and not pd.api.types.is_bool_dtype(series.dtype):
        values = series.to_numpy(dtype=np.float64, na_value=np.nan)
        raw = None
    else:
        raw = series
        values = pd.to_numeric(series, errors="coerce").to_numpy(dtype=np.float64, na_value=np.nan)
    bad = np.isnan(values)
    if bad.any():
        i = int(np.argmax(bad))
        cell = None if raw is None else raw.iloc[i]
        if cell is None or (isinstance(cell, float) and math.isnan(cell)) or pd.isna(cell):
            raise trace_error(path, f"column '{column}' is empty", lines[i])
        raise trace_error(path, f"column '{column}' is not a number (got {str(cell)!r})", lines[i])
    return values


def _csv_strings(series) -> np.ndarray:
    """Object array of str, with None where the cell is empty."""
    import pandas as pd

    out = np.array(series.to_numpy(dtype=object, na_value=None), dtype=object)   # a copy: pandas may hand back a
    mask = pd.isna(series).to_numpy()                                               # read-only view
    for i in np.nonzero(~mask)[0]:
        out[i] = str(out[i]).strip()
    return out


def read_azure(path: Path) -> RawTrace:
    """Azure LLM inference trace (2023/2024): ``TIMESTAMP,ContextTokens,GeneratedTokens``.

    TIMESTAMP is a date-time string with sub-second digits (the 2024 release
    adds ``+00:00``); everything is read as UTC and turned into seconds
    after the first row.
    """
    import pandas as pd

    df, cols, lines = _read_csv(path, {"t": "TIMESTAMP", "in": "ContextTokens", "out": "GeneratedTokens"})
    stamps = df[cols["t"]]
    ts = pd.to_datetime(stamps, format="ISO8601", utc=True, errors="coerce")
    # pandas reads the words now, today (and their kin) as the moment it runs: not a time the trace recorded
    bad = ts.isna().to_numpy() | ~stamps.astype(str).str.contains(r"\d", regex=True).to_numpy()
    if bad.any():
        i = int(np.argmax(bad))
        cell = stamps.iloc[i]
        what = "is empty" if pd.isna(cell) else f"is not a date-time (got {str(cell)!r})"
        raise trace_error(path, f"column '{cols['t']}' {what}", lines[i])
    t = ((ts - ts.iloc[0]).dt.total_seconds()).to_numpy(dtype=np.float64) if len(ts) else np.zeros(0)
    return RawTrace(t=t,
                    input_tokens=_csv_numeric(path, df[cols["in"]], cols["in"], lines),
                    output_tokens=_csv_numeric(path, df[cols["out"]], cols["out"], lines),
                    lines=lines)


def read_splitwise(path: Path) -> RawTrace:
    """Splitwise/Vidur CSV: ``arrived_at`` (s), ``num_prefill_tokens``, ``num_decode_tokens``.

    Vidur's processed traces carry extra columns (totals, P:D ratio); they
    are ignored.
    """
    df, cols, lines = _read_csv(path, {"t": "arrived_at", "in": "num_prefill_tokens",
                                       "out": "num_decode_tokens"})
    return RawTrace(t=_csv_numeric(path, df[cols["t"]], cols["t"], lines),
                    input_tokens=_csv_numeric(path, df[cols["in"]], cols["in"], lines),
                    output_tokens=_csv_numeric(path, df[cols["out"]], cols["out"], lines),
                    lines=lines)


def _llmsim_csv(path: Path) -> RawTrace:
    df, cols, lines = _read_csv(path, {"t": "timestamp", "in": "input_tokens", "out": "output_tokens"},
                                {"session": "session_id", "blocks": "block_ids", "klass": "class"})
    raw = RawTrace(t=_csv_numeric(path, df[cols["t"]], cols["t"], lines),
                   input_tokens=_csv_numeric(path, df[cols["in"]], cols["in"], lines),
                   output_tokens=_csv_numeric(path, df[cols["out"]], cols["out"], lines),
                   lines=lines)
    if "session" in cols:
        raw.session = session_codes(list(df[cols["session"]].to_numpy(dtype=object, na_value=None)))
    if "klass" in cols:
        raw.klass = _csv_strings(df[cols["klass"]])
    if "blocks" in cols:
        cells = _csv_strings(df[cols["blocks"]])
        blocks: list = []
        for cell, line in zip(cells, lines):
            if cell is None or cell == "":
                blocks.append(None)
                continue
            try:      # the column is read as text: an id written 1.5 is refused, not cut to 1
                blocks.append(tuple(int(x) for x in cell.split()))
            except ValueError:
                raise trace_error(path, f"column 'block_ids' must be space-separated integers (got {cell!r})",
                                  line) from None
        raw.blocks = blocks
    return raw


# ------------------------------------------------------------------------- JSONL


def _json_line(path: Path, text: str, line: int) -> Any:
    """One line's JSON, read as every other JSON input is (:func:`simulator.structured.parse_json`): a key
    written twice would otherwise let its later value replace the first without a word, and a number of
    more than 4,300 digits or brackets nested past Python's recursion limit end in a traceback."""
    from simulator.structured import parse_json

    try:
        return parse_json(text, scan_depth=False)
    except json.JSONDecodeError as e:
        raise trace_error(path, f"invalid JSON at column {e.colno}: {e.msg}", line) from None
    except ValueError as e:
        raise trace_error(path, f"invalid JSON: {e}", line) from None


def _json_number(path: Path, obj: dict, key: str, line: int) -> float:
    v = obj[key]
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise trace_error(path, f"'{key}' is not a number (got {v!r})", line)
    return float(v)


def _json_blocks(path: Path, v: Any, key: str, line: int) -> tuple | None:
    if v is None:
        return None
    if not isinstance(v, list) or any(isinstance(x, bool) or not isinstance(x, int) for x in v):
        shown = repr(v) if len(repr(v)) < 60 else repr(v)[:57] + "..."
        raise trace_error(path, f"'{key}' must be a list of integers (got {shown})", line)
    return tuple(v)


def _read_jsonl(path: Path, t_key: str, in_key: str, out_key: str, *, t_unit: float,
                blocks_key: str | None, session_key: str | None = None, klass_key: str | None = None,
                block_size: int | None = None) -> RawTrace:
    """Line by line with :mod:`json`, so a bad line is reported by number."""
    t, inp, out, lines = [], [], [], []
    sessions: list | None = [] if session_key else None
    klass: list | None = [] if klass_key else None
    blocks: list = []
    any_blocks = False
    required = (t_key, in_key, out_key)
    try:
        with _open_text(path) as fh:
            for n, text in enumerate(fh, start=1):
                if not text.strip():
                    continue
                obj = _json_line(path, text, n)
                if not isinstance(obj, dict):
                    raise trace_error(path, f"expected a JSON object, got {type(obj).__name__}", n)
                for key in required:
                    if key not in obj:
                        found = ", ".join(obj) or "no keys"
                        raise trace_error(path, f"missing key '{key}' (found: {found})", n)
                t.append(_json_number(path, obj, t_key, n))
                inp.append(_json_number(path, obj, in_key, n))
                out.append(_json_number(path, obj, out_key, n))
                lines.append(n)
                if blocks_key is not None:
                    b = _json_blocks(path, obj.get(blocks_key), blocks_key, n)
                    any_blocks |= b is not None
                    blocks.append(b)
                if sessions is not None:
                    sessions.append(obj.get(session_key))
                if klass is not None:
                    k = obj.get(klass_key)
                    klass.append(None if k is None else str(k))
    except UnicodeDecodeError:
        raise trace_error(path, "not a UTF-8 text file") from None
    except (OSError, EOFError, zlib.error) as e:
        raise trace_error(path, f"cannot read the file ({getattr(e, 'strerror', None) or e})") from None
    raw = RawTrace(t=np.asarray(t, dtype=np.float64) * t_unit,
                   input_tokens=np.asarray(inp, dtype=np.float64),
                   output_tokens=np.asarray(out, dtype=np.float64),
                   lines=np.asarray(lines, dtype=np.int64),
                   block_size=block_size)
    if any_blocks:
        raw.blocks = blocks
    if sessions is not None and any(s is not None for s in sessions):
        raw.session = session_codes(sessions)
    if klass is not None and any(k is not None for k in klass):
        raw.klass = np.asarray(klass, dtype=object)
    return raw


def read_mooncake(path: Path) -> RawTrace:
    """Mooncake JSONL: ``timestamp`` (ms), ``input_length``, ``output_length``, ``hash_ids``.

    ``hash_ids`` hold one id per 512-token block of the prompt (the last one
    may cover a partial block); two prompts share a prefix exactly as far as
    their ids agree, which is what the prefix cache needs.
    """
    return _read_jsonl(path, "timestamp", "input_length", "output_length", t_unit=1e-3,
                       blocks_key="hash_ids", block_size=MOONCAKE_BLOCK_SIZE)


def read_llmsim(path: Path) -> RawTrace:
    """llmsim's own format, CSV or JSONL by suffix (see :mod:`workloads.traces`)."""
    if _strip_gz(path) in (".jsonl", ".json", ".ndjson"):
        return _read_jsonl(path, "timestamp", "input_tokens", "output_tokens", t_unit=1.0,
                           blocks_key="block_ids", session_key="session_id", klass_key="class")
    return _llmsim_csv(path)


def session_codes(values: list) -> np.ndarray:
    """Session ids as int64 (-1 = none).

    Non-negative integer ids are kept, so they can be cross-referenced with
    the file; anything else (strings, UUIDs) is numbered in order of first
    appearance, since the engine only needs equality.
    """
    present = [v for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]

    def as_int(v: Any) -> int | None:
        if isinstance(v, bool):
            return None
        if isinstance(v, int):
            i = v
        elif isinstance(v, float) and v.is_integer():
            i = int(v)
        elif isinstance(v, str) and re.fullmatch(r"\d+", v.strip()):
            i = int(v)
        else:
            return None
        return i if i < 2**63 else None     # past int64: a label, numbered like text

    ints = [as_int(v) for v in present]
    out = np.full(len(values), -1, dtype=np.int64)
    if all(i is not None and i >= 0 for i in ints):
        for j, v in enumerate(values):
            i = as_int(v) if v is not None else None
            if i is not None:
                out[j] = i
        return out
    codes: dict[str, int] = {}
    for j, v in enumerate(values):
        if v is None or (isinstance(v, float) and math.isnan(v)):
            continue
        out[j] = codes.setdefault(str(v), len(codes))
    return out


# ------------------------------------------------------------------ detection

READERS: dict[str, Callable[[Path], RawTrace]] = {
    "azure": read_azure,
    "mooncake": read_mooncake,
    "splitwise": read_splitwise,
    "llmsim": read_llmsim,
}
TRACE_FORMATS = tuple(READERS)


def _first_line(path: Path) -> str:
    try:
        with _open_text(path) as fh:
            for text in fh:
                if text.strip():
                    return text.strip()
    except UnicodeDecodeError:
        raise trace_error(path, "not a UTF-8 text file") from None
    except (OSError, EOFError, zlib.error) as e:
        raise trace_error(path, f"cannot read the file ({getattr(e, 'strerror', None) or e})") from None
    raise trace_error(path, "the file is empty (no requests)")


def detect_format(path: Path) -> str:
    """Tell the format from the first line's keys or columns.

    The header, not the suffix, decides, because the formats share suffixes
    (two CSV formats, two JSONL formats); the suffix only says which parser
    reads the header.
    """
    first = _first_line(path)
    valid = ", ".join(TRACE_FORMATS)
    if first.startswith("{") or _strip_gz(path) in (".jsonl", ".json", ".ndjson"):
        try:
            keys = set(json.loads(first))
        except (ValueError, TypeError, RecursionError):     # ValueError: JSONDecodeError, or past 4,300 digits
            raise trace_error(path, "cannot tell the trace format: the first line is not a JSON object; "
                                    f"set format to one of {valid}", 1) from None
        if {"input_length", "output_length"} <= keys or "hash_ids" in keys:
            return "mooncake"
        if {"input_tokens", "output_tokens"} <= keys:
            return "llmsim"
        found = ", ".join(sorted(keys))
    else:
        cols = {c.strip().strip('"').lower() for c in first.split(",")}
        if {"timestamp", "contexttokens", "generatedtokens"} <= cols:
            return "azure"
        if {"arrived_at", "num_prefill_tokens"} <= cols:
            return "splitwise"
        if {"timestamp", "input_tokens"} <= cols:
            return "llmsim"
        found = first if len(first) < 120 else first[:117] + "..."
    raise trace_error(path, f"cannot tell the trace format from the header (found: {found}); "
                            f"set format to one of {valid}", 1)
