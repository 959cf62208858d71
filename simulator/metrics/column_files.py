"""Per-request columns kept on disk, read back one column at a time.

The 10M-DAU peak hour is ~18M requests: ~2.5 GB of columns even compact
(``records.py``). Every metric reads a handful of them at once, so a sharded
run spills each shard's columns to disk as it arrives, merges them column
by column, and hands the metrics a :class:`ColumnFiles`: a mapping whose
every access reads the column afresh (anonymous memory, freed when the
metric drops it). Peak memory is then the widest metric's selection, not
the table; the price is a read per access, ~0.1 s per column of 18M rows
from the page cache.

Numeric columns are ``.npy`` files. Text columns (class, pool, region) are
stored as integer codes plus their distinct values, so a reread column
holds shared ``str`` objects, as an in-memory one does.

Not memory-mapped on purpose: mapped pages stay resident (and count in RSS)
after a metric is done with them.
"""
from __future__ import annotations

import json
import shutil
import tempfile
import weakref
from pathlib import Path
from typing import Iterator, MutableMapping, Optional

import numpy as np

__all__ = ["ColumnFiles"]


class ColumnFiles(MutableMapping[str, np.ndarray]):
    """Equal-length columns in a directory, in insertion order; ``rows`` is
    their length. The directory is removed when the object is collected."""

    def __init__(self, parent: Optional[Path] = None, prefix: str = "llmsim-columns-") -> None:
        self.root = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
        self.rows: Optional[int] = None
        self._names: list[str] = []
        self._cleanup = weakref.finalize(self, shutil.rmtree, str(self.root), True)

    @classmethod
    def of(cls, columns: "MutableMapping[str, np.ndarray]", parent: Optional[Path] = None) -> "ColumnFiles":
        """``columns`` written to disk, each one released as soon as it is."""
        out = cls(parent)
        for name in list(columns):
            out[name] = columns.pop(name)
        return out

    def _path(self, name: str, suffix: str = ".npy") -> Path:
        return self.root / f"{name}{suffix}"

    def __setitem__(self, name: str, values: np.ndarray) -> None:
        values = np.asarray(values)
        if self.rows is None or not self._names:
            self.rows = int(values.size)
        elif values.size != self.rows:
            raise ValueError(f"column {name!r} has {values.size} rows, the others {self.rows}")
        if values.dtype == object:
            import pandas as pd

            codes, uniques = pd.factorize(values, use_na_sentinel=True)
            self._path(name, ".json").write_text(json.dumps(list(uniques)))
            values = codes.astype(np.int32 if len(uniques) >= 2**15 else np.int16)
        else:
            self._path(name, ".json").unlink(missing_ok=True)   # a text column replaced by numbers
        np.save(self._path(name), values, allow_pickle=False)
        if name not in self._names:
            self._names.append(name)

    def __getitem__(self, name: str) -> np.ndarray:
        if name not in self._names:
            raise KeyError(name)
        return self._decode(name, np.load(self._path(name), allow_pickle=False))

    def rows_of(self, name: str, lo: int, hi: int) -> np.ndarray:
        """Rows [lo, hi) of a column, reading only those (a mapped read,
        copied out, so nothing stays mapped)."""
        if name not in self._names:
            raise KeyError(name)
        return self._decode(name, np.array(np.load(self._path(name), mmap_mode="r", allow_pickle=False)[lo:hi]))

    def _decode(self, name: str, values: np.ndarray) -> np.ndarray:
        text = self._path(name, ".json")
        if text.exists():   # codes of a text column; -1 (a missing value) is the None at the end
            values = np.array([*json.loads(text.read_text()), None], dtype=object)[values]
        return values

    def __delitem__(self, name: str) -> None:
        self._names.remove(name)
        for suffix in (".npy", ".json"):
            self._path(name, suffix).unlink(missing_ok=True)

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._names))

    def __len__(self) -> int:
        return len(self._names)

    def __contains__(self, name: object) -> bool:
        return name in self._names

    def close(self) -> None:
        """Remove the files now (they go with the object otherwise)."""
        self._cleanup()
        self._names.clear()
