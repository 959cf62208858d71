"""Which files a result depends on, and fingerprints of them and of llmsim itself.

A stored sweep or plan point may be reused only while everything that
produced it is unchanged: not just the scenario file's bytes but every
file it names (trace, model configs, GPU and backend profiles, built-in or
the user's own) and the simulator's code. The readers note each file
they open (:func:`note_read`); a caller that wants to know what a load
touched wraps it in :func:`recorded_reads`.

Every reader also asks :func:`input_file` first: a path that is not a
regular file (``/dev/zero``, a FIFO, a folder) or is larger than its kind
of input can be is refused before a byte is read, so no input can make
llmsim read without end or fill the memory.
"""
from __future__ import annotations

import gzip
import hashlib
import io
import os
import stat
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Iterator

from .errors import LlmsimError

__all__ = ["note_read", "recorded_reads", "file_digest", "code_digest", "input_file", "MAX_TEXT_BYTES",
           "MAX_TABLE_BYTES", "MAX_TRACE_BYTES", "open_text"]

#: YAML and JSON files (scenarios, profiles, sweep files, results.json; the
#: largest shipped one is 10 KB, a results.json a few MB).
MAX_TEXT_BYTES = 64 * 2**20
#: Measured-benchmark CSVs (``llmsim validate``; the shared data's are under 1 MB).
MAX_TABLE_BYTES = 256 * 2**20
#: Request traces, decompressed: ~29 million rows of the Azure CSV format, ~4 million of Mooncake's JSONL
#: (37 and 252 bytes a row in ../shared/data/traces: `wc -c` / `wc -l`).
MAX_TRACE_BYTES = 2**30

_recorders: list[set[Path]] = []
_digests: dict[tuple[str, int, int], str] = {}
_code: list[str] = []


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


@contextmanager
def recorded_reads() -> Iterator[set[Path]]:
    """The set of files read inside the block (resolved paths)."""
    files: set[Path] = set()
    _recorders.append(files)
    try:
        yield files
    finally:
        _recorders.remove(files)


def file_digest(path: Path) -> str:
    """SHA-256 of the file's bytes, remembered per (path, size, mtime) so a
    plan's many probes of one trace hash it once; "missing" if unreadable,
    "not a file" for a device or pipe (``/dev/zero`` would be read for ever;
    the reader refuses it when the run loads it)."""
    try:
        st = path.stat()
    except OSError:
        return "missing"
    if not stat.S_ISREG(st.st_mode):
        return "not a file"
    memo = (str(path), st.st_size, st.st_mtime_ns)
    if memo not in _digests:
        h = hashlib.sha256()
        try:
            with open(path, "rb") as f:
                for chunk in iter(lambda: f.read(1 << 20), b""):
                    h.update(chunk)
        except OSError:
            return "missing"
        _digests[memo] = h.hexdigest()
    return _digests[memo]


def code_digest() -> str:
    """llmsim's version and the bytes of its Python sources (simulator and
    workloads packages): an edited checkout is a different simulator even
    when the version string is not bumped."""
    if not _code:
        import simulator
        import workloads

        h = hashlib.sha256(simulator.__version__.encode())
        for pkg in (simulator, workloads):
            root = Path(pkg.__file__).parent
            for dirpath, dirnames, filenames in os.walk(root):
                dirnames.sort()
                for name in sorted(filenames):
                    if name.endswith(".py"):
                        f = Path(dirpath) / name
                        h.update(str(f.relative_to(root.parent)).encode())
                        h.update(f.read_bytes())
        _code.append(h.hexdigest())
    return _code[0]
