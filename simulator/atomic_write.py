"""A file written whole or not at all, with the mode any other file gets.

Sweep points, the sweep table and plan.json are each written to a
temporary name in their own folder and renamed into place, so whatever
stops the process leaves the old file or the new one, never half of one.
``mkstemp`` creates its file readable by the owner only (0600); the file
is given the mode ``open`` would have given it (0666 less the umask), so
a shared results folder stays readable by the people it is shared with.
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Callable

__all__ = ["write_atomic", "default_file_mode"]


def default_file_mode() -> int:
    """0666 less the process umask (what a plain ``open(path, "w")`` gives)."""
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


def write_atomic(path: str | Path, write: Callable[[Path], None]) -> Path:
    """Call ``write(tmp)`` for a temporary file beside ``path``, then rename it to ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    os.close(fd)
    tmp = Path(name)
    try:
        write(tmp)
        os.chmod(tmp, default_file_mode())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path
