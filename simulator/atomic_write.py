"""A file written whole or not at all, with the mode any other file gets.

Every file llmsim writes outside a run's staging folder (sweep points, the
sweep table, plan.json, report pages and plots, ladder tables, baselines,
fitted profiles, ``--csv`` tables) is written to a temporary name in its
own folder and renamed into place, so whatever stops the process leaves
the old file or the new one, never half of one, and no temporary file.
``mkstemp`` creates its file readable by the owner only (0600); the file
is given the mode ``open`` would have given it (0666 less the umask), so
a shared results folder stays readable by the people it is shared with.
A write the machine refuses (a full disk, a path through a file) is one
:class:`LlmsimError` naming the file, and the folders made for it are
removed again.
"""
from __future__ import annotations

import errno
import os
import tempfile
from pathlib import Path
from typing import Callable, Optional

from .errors import LlmsimError, os_reason

__all__ = ["write_atomic", "default_file_mode", "check_writable"]


def default_file_mode() -> int:
    """0666 less the process umask (what a plain ``open(path, "w")`` gives)."""
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


def check_writable(path: str | Path, flag: Optional[str] = None) -> None:
    """Refuse, before any work, a file that :func:`write_atomic` could not
    write (naming ``flag``, the option that gave it): its nearest existing
    folder must be a folder that takes a new file."""
    try:
        _check_writable(Path(path))
    except LlmsimError as e:
        raise LlmsimError(e.message, source=e.source, key_path=flag) from None


def _check_writable(path: Path) -> None:
    if path.is_dir():
        raise LlmsimError("is a folder; give a file name", source=path)
    _refuse_special(path)
    there = path.parent
    while not there.exists() and there.parent != there:
        there = there.parent
    if not there.is_dir():
        raise LlmsimError(f"cannot write ({os_reason(OSError(errno.ENOTDIR, ''))})", source=path)
    if not os.access(there, os.W_OK | os.X_OK):
        raise LlmsimError(f"cannot write ({os_reason(OSError(errno.EACCES, ''))})", source=path)
    # A file made and removed: permissions alone do not tell (root may write anywhere, yet not into /proc).
    try:
        fd, name = tempfile.mkstemp(prefix=f".{path.name}.", dir=there)
    except OSError as e:
        raise LlmsimError(f"cannot write ({os_reason(e)})", source=path) from None
    os.close(fd)
    os.unlink(name)


def _refuse_special(path: Path) -> None:
    # the rename that writes atomically would replace a device, pipe or socket with a plain file
    if path.exists() and not path.is_file() and not path.is_dir():
        raise LlmsimError("not a regular file (a device, pipe or socket); give a file name", source=path)


def write_atomic(path: str | Path, write: Callable[[Path], None], mode: Optional[int] = None) -> Path:
    """Call ``write(tmp)`` for a temporary file beside ``path``, then rename it to ``path``, with
    ``mode`` (default: :func:`default_file_mode`; a file rewritten in place keeps its own)."""
    path = Path(path)
    _refuse_special(path)
    made = path.parent
    while not made.parent.exists() and made.parent != made:
        made = made.parent          # the outermost folder this write creates
    created = not made.exists()
    tmp = None
    done = False
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
        os.close(fd)
        tmp = Path(name)
        write(tmp)
        os.chmod(tmp, default_file_mode() if mode is None else mode)
        os.replace(tmp, path)
        done = True
    except OSError as e:
        raise LlmsimError(f"cannot write ({os_reason(e)})", source=path) from None
    finally:
        if not done:
            if tmp is not None:
                tmp.unlink(missing_ok=True)
            if created:
                _remove_empty(path.parent, made)
    return path


def _remove_empty(folder: Path, top: Path) -> None:
    """Remove the empty folders from ``folder`` up to ``top`` (those a failed write made)."""
    while True:
        try:
            folder.rmdir()
        except OSError:
            return
        if folder == top or folder.parent == folder:
            return
        folder = folder.parent
