"""Which files a result depends on, and fingerprints of them and of llmsim itself.

A stored sweep or plan point may be reused only while everything that
produced it is unchanged: not just the scenario file's bytes but every
file it names (trace, model configs, GPU and backend profiles, built-in or
the user's own) and the simulator's code. The readers note each file they
open (:mod:`simulator.reads`); the key's maker wraps a load in
:func:`~simulator.reads.recorded_reads` and fingerprints what it touched.
"""
from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

__all__ = ["file_digest", "code_digest"]

_digests: dict[tuple[str, int, int], str] = {}
_code: list[str] = []


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
