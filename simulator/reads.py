"""Reading an input file: the checks before a byte is read, and the note that it was read.

Every reader asks :func:`input_file` first: a path that is not a regular
file (``/dev/zero``, a FIFO, a folder) or is larger than its kind of input
can be is refused before a byte is read, so no input can make llmsim read
without end or fill the memory.

The same call notes the file as read (:func:`note_read`). A caller above
that wants to know what a load touched (a stored sweep point's key:
:mod:`simulator.inputs`) opens :func:`recorded_reads` around it; the
readers, in every layer below, only note into whichever records the caller
opened, and know nothing of what they are for.
"""
from __future__ import annotations

import gzip
import io
import os
import stat
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any, Iterable, Iterator

from .errors import LlmsimError

__all__ = ["note_read", "recorded_reads", "input_file", "open_text", "repeated_columns", "MAX_TEXT_BYTES",
           "MAX_TABLE_BYTES", "MAX_TRACE_BYTES"]

#: YAML and JSON files (scenarios, profiles, sweep files, results.json; the
#: largest shipped one is 10 KB, a results.json a few MB).
MAX_TEXT_BYTES = 64 * 2**20
#: Measured-benchmark CSVs (``llmsim validate``; the shared data's are under 1 MB).
MAX_TABLE_BYTES = 256 * 2**20
#: Request traces, decompressed: ~29 million rows of the Azure CSV format, ~4 million of Mooncake's JSONL
#: (37 and 252 bytes a row in ../shared/data/traces: `wc -c` / `wc -l`).
MAX_TRACE_BYTES = 2**30

_recorders: list[set[Path]] = []


def note_read(path: str | Path) -> None:
    """Called by every reader of a user-named or built-in input file."""
    if _recorders:
        p = Path(path).resolve()
        for r in _recorders:
            r.add(p)


def _size_text(n: float) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:,.0f} {unit}" if unit == "bytes" else f"{n:,.1f} {unit}"
        n /= 1024
    return ""


def input_file(path: str | Path, max_bytes: int, what: str = "file") -> int:
    """Check that ``path`` is a regular file of at most ``max_bytes`` before
    it is read (noting it as read); returns its size."""
    note_read(path)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise LlmsimError("file not found", source=path) from None
    except OSError as e:
        raise LlmsimError(f"cannot read file ({e.strerror or e})", source=path) from None
    except ValueError as e:     # a name no file can have: os.stat refuses an embedded NUL so
        raise LlmsimError(f"cannot read file ({e})", source=path) from None
    if stat.S_ISDIR(st.st_mode):
        raise LlmsimError(f"is a directory, not a {what}", source=path)
    if not stat.S_ISREG(st.st_mode):
        raise LlmsimError(f"not a regular file (a device, pipe or socket); expected a {what}", source=path)
    if st.st_size > max_bytes:
        raise LlmsimError(f"is {_size_text(st.st_size)}, larger than any {what} llmsim reads "
                          f"(at most {_size_text(max_bytes)})", source=path)
    return st.st_size


class _Bounded(io.RawIOBase):
    """A decompressed stream that stops at ``limit`` bytes: a small .gz can
    stand for terabytes, and the file's own size says nothing of that."""

    def __init__(self, raw: IO[bytes], limit: int, path: Path, what: str):
        self._raw, self._limit, self._path, self._what, self._seen = raw, limit, path, what, 0

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        n = self._raw.readinto(b)
        self._seen += n
        if self._seen > self._limit:
            raise LlmsimError(f"decompresses to more than {_size_text(self._limit)}, more than any {self._what} "
                              "llmsim reads", source=self._path)
        return n

    def close(self) -> None:
        self._raw.close()
        super().close()


def open_text(path: Path, max_bytes: int, what: str) -> IO[str]:
    """A checked input file's text (UTF-8, a BOM dropped); a ``.gz`` is
    decompressed through a bound of ``max_bytes`` on what it expands to."""
    if Path(path).suffix.lower() == ".gz":
        raw = _Bounded(gzip.open(path, "rb"), max_bytes, Path(path), what)
        return io.TextIOWrapper(io.BufferedReader(raw), encoding="utf-8-sig")
    return open(path, encoding="utf-8-sig")


def repeated_columns(path: Path, columns: Iterable, max_bytes: int, what: str, *,
                     fold_case: bool = False) -> dict[str, str]:
    """The names a CSV's header line writes more than once, each with the words refusing it. pandas renames a
    repeat (``ttft_ms.1``), so a reader finding a column by name would read one of the two and drop the
    other without a word. ``columns``: the names pandas read, which tell whether to look at the line
    itself; ``fold_case``: names compared as a reader ignoring case and spaces matches them."""
    import csv
    import re

    def name(c: Any) -> str:
        return str(c).strip().lower() if fold_case else str(c)

    columns = list(columns)
    if len({re.sub(r"\.\d+$", "", name(c)) for c in columns}) == len(columns):
        return {}       # no name that pandas renamed, nor two spellings of one
    with open_text(path, max_bytes, what) as fh:
        header = next((row for row in csv.reader(fh, skipinitialspace=True) if any(c.strip() for c in row)), [])
    where: dict[str, list[int]] = {}
    for i, c in enumerate(header, start=1):
        where.setdefault(name(c), []).append(i)
    return {c: f"column '{c}' is named {len(at)} times (columns {', '.join(map(str, at))}); which one to read is "
               "ambiguous: keep one" for c, at in where.items() if len(at) > 1}


@contextmanager
def recorded_reads() -> Iterator[set[Path]]:
    """The set of files read inside the block (resolved paths)."""
    files: set[Path] = set()
    _recorders.append(files)
    try:
        yield files
    finally:
        _recorders.remove(files)
