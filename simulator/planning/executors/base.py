"""The executor interface and its registry of names.

Sweeps and searches only ever need "run this pure function over these
items and hand me each result as soon as it is ready", so that is the
whole interface: everything a backend does beyond it (scheduling, data
movement, retries) stays the backend's business. Backends register by name,
as routers do, so ``--executor NAME`` reaches a plugin's backend too::

    @register_executor("mine")
    class Mine(Executor):
        def __init__(self, options: ExecutorOptions): ...
        def map_unordered(self, fn, items): ...

An installed package's executors load through ``llmsim.executors`` entry
points (:mod:`simulator.plugins`).

Functions passed to an executor must be module-level and their items
picklable (they may cross a process or a network).
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator, Optional, TypeVar

from ...errors import LlmsimError
from ...plugins import load_code

__all__ = ["Executor", "ExecutorOptions", "EXECUTORS", "register_executor", "make_executor"]

T = TypeVar("T")
R = TypeVar("R")


@dataclass(frozen=True)
class ExecutorOptions:
    """Command-line settings; each backend rejects the ones that mean
    nothing to it rather than silently ignoring them."""

    workers: Optional[int] = None
    address: Optional[str] = None
    connect_timeout_s: float = 10.0


class Executor(ABC):
    @abstractmethod
    def map_unordered(self, fn: Callable[[T], R], items: Iterable[T]) -> Iterator[tuple[T, R]]:
        """Yield ``(item, fn(item))`` in completion order. Closing the
        iterator early (an error, Ctrl-C) cancels what has not started."""

    @property
    def workers(self) -> int:
        """How many items run at once: callers size their batches by it."""
        return 1

    def close(self) -> None:
        pass

    def terminate(self) -> None:
        """Stop at once, abandoning runs in flight (the default: as ``close``)."""
        self.close()

    def __enter__(self) -> "Executor":
        return self

    def __exit__(self, exc_type, *exc) -> None:
        if exc_type is None:
            self.close()
        else:
            self.terminate()


EXECUTORS: dict[str, Callable[[ExecutorOptions], Executor]] = {}


def register_executor(name: str):
    def deco(factory):
        EXECUTORS[name] = factory
        return factory
    return deco


def check_executor(name: str, options: ExecutorOptions = ExecutorOptions()) -> None:
    """Refuse an executor name no backend registers, or a worker count below
    one, without opening anything: a command whose run turns out to need no
    executor (one replicate) checks its flags all the same."""
    if name not in EXECUTORS:
        load_code("llmsim.executors")      # an installed package's executors
    if name not in EXECUTORS:
        raise LlmsimError(f"unknown executor {name!r} (valid: {', '.join(sorted(EXECUTORS))})",
                          key_path="--executor")
    if options.workers is not None and options.workers < 1:
        raise LlmsimError(f"must be at least 1 (got {options.workers})", key_path="--workers")


def make_executor(name: str, options: ExecutorOptions = ExecutorOptions()) -> Executor:
    """The backend registered as ``name`` (``local``, ``dask`` or a plugin's), opened: sweeps and plans take
    it rather than a name so that one pool of workers (or one cluster connection) serves all their runs.
    Use it as a context manager: leaving the block closes it, and an error or Ctrl-C stops its runs."""
    check_executor(name, options)
    return EXECUTORS[name](options)
