"""What the suite's processes build once and share: a lock per thing built, in the session's folder.

``pytest -n 2`` runs two processes, and a module-scoped fixture that two modules use (or a run several
modules repeat) is built in each module of each process. Under :data:`conftest.RUN_CACHE_ENV` the
first process to ask builds it under a lock while the others wait, then each reads it; without it (a
test file run by hand) the caller builds its own.
"""
from __future__ import annotations

import fcntl
import os
import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator, Optional

from conftest import RUN_CACHE_ENV


@contextmanager
def suite_lock(stem: str) -> Iterator[Optional[Path]]:
    """The session's shared folder, held under ``stem``'s lock; None when the session shares none."""
    folder = os.environ.get(RUN_CACHE_ENV)
    if not folder:
        yield None
        return
    with open(Path(folder) / f"{stem}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield Path(folder)


def built_once(stem: str, build: Callable[[Path], None], own: Path) -> Path:
    """The folder ``build`` fills, built once per session: the shared one, or ``own`` where the session
    shares none. Callers read it and copy what they change."""
    with suite_lock(stem) as shared:
        if shared is None:
            build(own)
            return own
        folder, done = shared / stem, shared / f"{stem}.done"
        if not done.exists():
            shutil.rmtree(folder, ignore_errors=True)       # what a build that failed left
            folder.mkdir()
            build(folder)
            done.touch()
        return folder
