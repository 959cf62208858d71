"""``--executor local``: a process pool over this machine's cores.

Processes, not threads: a simulation is pure-Python CPU work that holds the
GIL. With one worker the items run in this process instead, which saves
the pool's start-up and pickling when there is nothing to overlap (and
keeps tracebacks and profilers simple).
"""
from __future__ import annotations

import os
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from typing import Callable, Iterable, Iterator

from ...errors import LlmsimError
from .base import Executor, ExecutorOptions, R, T, register_executor


@register_executor("local")
class LocalExecutor(Executor):
    def __init__(self, options: ExecutorOptions = ExecutorOptions()):
        if options.address is not None:
            raise LlmsimError("--address names a cluster scheduler; it needs --executor dask", key_path="--address")
        if options.workers is not None and options.workers < 1:
            raise LlmsimError(f"--workers must be at least 1 (got {options.workers})", key_path="--workers")
        self._workers = options.workers or os.cpu_count() or 1
        self._pool: ProcessPoolExecutor | None = None

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
        if self._pool is None:
            self._pool = ProcessPoolExecutor(max_workers=self._workers)
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
