"""``--executor dask --address tcp://host:8786``: a Dask distributed cluster.

For sweeps that outgrow one machine, on a cluster the user already runs
(llmsim does not start or manage clusters; without ``--address`` Dask's own
``Client()`` starts a local one). Workers need the same llmsim installed,
and the scenario file (with any trace it names) at the same path, since a
point carries its path, not its contents. Dask is an optional extra
(``pip install 'llmsim[dask]'``), imported only when this backend is chosen.
"""
from __future__ import annotations

from typing import Callable, Iterable, Iterator

from ...errors import LlmsimError
from .base import Executor, ExecutorOptions, R, T, register_executor


@register_executor("dask")
class DaskExecutor(Executor):
    def __init__(self, options: ExecutorOptions = ExecutorOptions()):
        if options.workers is not None:
            raise LlmsimError("--workers sizes the local process pool; a Dask cluster has its own workers",
                              key_path="--workers")
        try:
            from distributed import Client
        except ImportError:
            raise LlmsimError("--executor dask needs Dask distributed: pip install 'llmsim[dask]'") from None
        self.address = options.address
        if options.address is not None:
            _check_address(options.address)
            _check_answers(options.address, options.connect_timeout_s)
        try:
            # An unreachable scheduler is a user error, reported after a short
            # wait rather than Dask's default 30 s of retries and a traceback.
            self._client = Client(options.address, timeout=options.connect_timeout_s)
        except (OSError, TimeoutError) as e:
            raise LlmsimError(f"cannot reach a Dask scheduler at {options.address} ({e})",
                              key_path="--address") from None

    @property
    def workers(self) -> int:
        info = self._client.scheduler_info()
        return max(1, sum(w.get("nthreads", 1) for w in info.get("workers", {}).values()))

    def map_unordered(self, fn: Callable[[T], R], items: Iterable[T]) -> Iterator[tuple[T, R]]:
        from distributed import as_completed

        items = list(items)
        if not items:
            return
        # pure=False: Dask must not merge or cache calls behind our back; the
        # sweep's own store decides what is reused.
        futures = self._client.map(fn, items, pure=False)
        which = {f.key: item for f, item in zip(futures, items)}
        try:
            for fut, result in as_completed(futures, with_results=True):
                yield which[fut.key], result
        finally:
            self._client.cancel(futures)

    def close(self) -> None:
        self._client.close()


def _check_address(address: str) -> None:
    """Refuse a malformed address up front: given one, Dask raises from a
    half-built client whose clean-up prints a traceback at exit."""
    from distributed.comm import parse_address
    from distributed.comm.addressing import parse_host_port
    from distributed.comm.registry import backends

    try:
        scheme, loc = parse_address(address)
        if scheme not in backends:
            raise ValueError(f"unknown protocol {scheme!r} (valid: {', '.join(sorted(backends))})")
        if scheme != "inproc":
            parse_host_port(loc)
    except ValueError as e:
        raise LlmsimError(f"not a Dask scheduler address such as tcp://host:8786 ({e})",
                          key_path="--address") from None


def _check_answers(address: str, timeout: float) -> None:
    """Shake hands with the scheduler under a hard deadline. Dask's own
    connect waits for the handshake without one, so an address where
    something else listens (a web server, a dashboard port) would hang
    ``Client`` for ever. Runs in its own thread and event loop, so it works
    where a loop is already running (a notebook) too."""
    if address.startswith("inproc://"):
        return  # in this process: nothing to wait for
    import asyncio
    import threading

    from distributed.comm import connect

    outcome: list[BaseException | None] = []

    async def shake() -> None:
        comm = await asyncio.wait_for(connect(address, timeout=timeout), timeout)
        await comm.close()

    def run() -> None:
        try:
            asyncio.run(shake())
            outcome.append(None)
        except BaseException as e:  # reported below, in the caller's thread
            outcome.append(e)

    worker = threading.Thread(target=run, name="llmsim-dask-probe", daemon=True)
    worker.start()
    worker.join(timeout + 2.0)
    if outcome and outcome[0] is None:
        return
    why = str(outcome[0]) if outcome and str(outcome[0]) else f"no Dask handshake within {timeout:g} s"
    raise LlmsimError(f"cannot reach a Dask scheduler at {address} ({why})", key_path="--address")
