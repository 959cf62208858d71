"""Reading the large kernel tables fast: only the columns a fit needs, parsed once.

The H200/B200/GB200 tables are gzip-compressed CSVs of about a million rows
each; parsing one takes seconds, and ``llmsim calibrate`` reads three. The
parsed columns are kept as parquet in the user's cache directory, keyed by
the source file's size and modification time and by the columns read, so a
second run (or a changed file) never reads a stale table. Without a
writable cache the table is simply parsed each time.
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pandas as pd

from ..errors import LlmsimError


def cache_dir() -> Path:
    """``$LLMSIM_CACHE_DIR``, else ``$XDG_CACHE_HOME/llmsim``, else ``~/.cache/llmsim``."""
    if os.environ.get("LLMSIM_CACHE_DIR"):
        return Path(os.environ["LLMSIM_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "llmsim"


# Bumped when what the cache holds changes form (v2: text columns as categoricals).
_FORMAT = "v2"


def _key(path: Path, columns: list[str], fmt: str = _FORMAT) -> str:
    st = path.stat()
    ident = f"{fmt}|{path.resolve()}|{st.st_size}|{st.st_mtime_ns}|{','.join(columns)}"
    return f"{path.name.split('.')[0]}-{hashlib.sha256(ident.encode()).hexdigest()[:16]}.parquet"


def is_cached(path: Path, columns: list[str]) -> bool:
    """Whether :func:`read_columns` would read this table from the cache."""
    return path.is_file() and (cache_dir() / "kernel-tables" / _key(path, columns)).is_file()


def read_columns(path: Path, columns: list[str]) -> pd.DataFrame:
    """``columns`` of the CSV (plain or .gz) at ``path``, from the parquet cache
    when current; text columns come back as categoricals (group by them with
    ``observed=True``).

    A missing file or column is an LlmsimError naming the file."""
    if not path.is_file():
        raise LlmsimError("measured kernel table not found (point --data at the shared data directory that "
                          "holds kernels/)", source=path)
    cached = cache_dir() / "kernel-tables" / _key(path, columns, _FORMAT)
    if cached.is_file():
        try:
            return pd.read_parquet(cached)
        except (OSError, ValueError):
            pass                                  # a damaged cache file: parse again below
    try:
        header = pd.read_csv(path, nrows=0).columns
        missing = [c for c in columns if c not in header]
        if missing:
            raise LlmsimError(f"missing columns {', '.join(missing)}", source=path)
        df = pd.read_csv(path, usecols=columns)[columns]
    except (OSError, ValueError, EOFError) as e:
        raise LlmsimError(f"cannot read kernel table: {e}", source=path) from None
    # Text columns (GPU, stack, dtype names) hold a handful of values: as
    # categoricals they read back from parquet ~8x faster than as strings.
    for c in df.columns:
        if not pd.api.types.is_numeric_dtype(df[c]):
            df[c] = df[c].astype("category")
    try:
        cached.parent.mkdir(parents=True, exist_ok=True)
        tmp = cached.with_suffix(f".{os.getpid()}.tmp")
        df.to_parquet(tmp, index=False)
        os.replace(tmp, cached)
    except (OSError, ValueError):
        pass                                      # no writable cache: correct, only slower next time
    return df
