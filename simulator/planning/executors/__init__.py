"""Where sweep and search points run: ``local`` (process pool) or ``dask``.

Importing the package registers the built-in backends (see :mod:`.base`).
"""
from .base import EXECUTORS, Executor, ExecutorOptions, make_executor, register_executor
from . import dask_distributed as _dask  # noqa: F401  (registers "dask")
from . import local as _local  # noqa: F401  (registers "local")

__all__ = ["Executor", "ExecutorOptions", "EXECUTORS", "make_executor", "register_executor"]
