"""``--executor local``: a process pool over this machine's cores.

Processes, not threads: a simulation is pure-Python CPU work that holds the
GIL. With one worker the items run in this process instead, which saves
the pool's start-up and pickling when there is nothing to overlap (and
keeps tracebacks and profilers simple).
"""
from __future__ import annotations

import os
import signal
import sys
import threading
from concurrent.futures import FIRST_COMPLETED, Future, InvalidStateError, ProcessPoolExecutor, wait
from typing import Callable, Iterable, Iterator

from ...errors import LlmsimError
from .base import Executor, ExecutorOptions, R, T, register_executor


@register_executor("local")
class LocalExecutor(Executor):
    def __init__(self, options: ExecutorOptions = ExecutorOptions()):
        if options.address is not None:
            raise LlmsimError("--address names a cluster scheduler; it needs --executor dask", key_path="--address")
        self._workers = options.workers or os.cpu_count() or 1
        self._pool: ProcessPoolExecutor | None = None
        self._size = 0

    @property
    def workers(self) -> int:
        return self._workers

    def map_unordered(self, fn: Callable[[T], R], items: Iterable[T]) -> Iterator[tuple[T, R]]:
        # Each item is let go once its result is out: one can be large (a
        # shard's dealt rows), and the caller may not need them all at once.
        items = list(items)
        if self._workers == 1 or len(items) <= 1:
            items.reverse()
            while items:
                item = items.pop()
                yield item, fn(item)
            return
        # never more processes than there is work: --workers 32 for two points starts two
        size = min(self._workers, len(items))
        if self._pool is not None and self._size < size:
            self._pool.shutdown(wait=True)
            self._pool = None
        if self._pool is None:
            _quiet_broken_pool_race()
            self._pool = ProcessPoolExecutor(max_workers=size, initializer=_die_with_parent)
            self._size = size
        pending: dict[Future, T] = {self._pool.submit(fn, item): item for item in items}
        items.clear()
        try:
            while pending:
                done, _ = wait(pending, return_when=FIRST_COMPLETED)
                for fut in done:
                    yield pending.pop(fut), fut.result()
        finally:
            for fut in pending:
                fut.cancel()

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None

    def terminate(self) -> None:
        """Stop the workers now, runs in flight included (an error, Ctrl-C,
        SIGTERM in the parent): waiting for them could take the length of a run."""
        if self._pool is not None:
            # ProcessPoolExecutor has no public way to stop running work.
            for proc in list(getattr(self._pool, "_processes", {}).values()):
                proc.terminate()
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None


def _quiet_broken_pool_race() -> None:
    """Keep CPython's own race out of the terminal. When a signal stops the
    workers (SIGTERM reaches the whole process group), the pool's manager
    thread finds it broken and, before Python 3.12, sets an exception on
    futures the stopping parent has already cancelled: an InvalidStateError
    printed as a thread's traceback under llmsim's "terminated" line. Only
    that error, raised in ``terminate_broken``, is dropped."""
    previous = threading.excepthook
    if getattr(previous, "_llmsim_quiet", False):
        return

    def hook(args: "threading.ExceptHookArgs") -> None:
        tb, frames = args.exc_traceback, []
        while tb is not None:
            frames.append(tb.tb_frame.f_code.co_name)
            tb = tb.tb_next
        if not (isinstance(args.exc_value, InvalidStateError) and "terminate_broken" in frames):
            previous(args)

    hook._llmsim_quiet = True   # type: ignore[attr-defined]
    threading.excepthook = hook


def _die_with_parent() -> None:
    """In each worker: end with the parent, however it ends. A SIGTERM
    handler inherited from the CLI would turn the signal into an exception
    the pool reports as a result, so the default action is restored; on
    Linux the kernel also sends SIGTERM when the parent dies outright.
    Ctrl-C is the parent's to handle."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGHUP, signal.SIG_DFL)
    # Ctrl-C reaches the whole process group: the parent stops the workers,
    # which would otherwise each print a traceback ("Process ForkProcess-N:")
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(1, signal.SIGTERM)       # PR_SET_PDEATHSIG
            if os.getppid() == 1:                # the parent died before prctl took hold
                os._exit(1)
        except (OSError, AttributeError):
            pass
