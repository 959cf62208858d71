"""Command-line options several commands share: ``--set``, the executor flags of ``run --replicates``,
``plan`` and ``sweep``, and the backend version and CUDA-graph memory estimate and validate take.

Typer options are declared once here as annotated types, so a flag reads, checks and explains itself the
same way on every command that takes it."""
from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Optional, Sequence

import typer

from ..errors import LlmsimError

if TYPE_CHECKING:   # planning and scenarios on first use: every command imports this module, `--help` included
    from ..planning.executors import Executor

ExecutorName = Annotated[str, typer.Option("--executor", help="where runs go: local (a process pool) or dask")]
Workers = Annotated[Optional[int], typer.Option("--workers", help="local processes (default: one per core)")]
Address = Annotated[Optional[str], typer.Option("--address", help="Dask scheduler address, e.g. tcp://host:8786")]
ConnectTimeout = Annotated[float, typer.Option("--connect-timeout", help="seconds to wait for the Dask scheduler")]
MaxRuns = Annotated[Optional[int], typer.Option("--max-runs", help="allow this many runs (default 1,000: "
                                                                   "a larger sweep or plan is refused)")]


def one_value_per_key(sets: Optional[list[str]]) -> Optional[list[str]]:
    """``--set`` callback: a key given twice is refused, as a key written twice in a scenario file is,
    rather than the last value silently winning (a pasted command line that kept an old value). Here the
    keys compare as written, before any scenario is read; each command compares them again against its
    scenario (``pools.0`` is ``pools.chat``) where it reads it."""
    from ..scenario.overrides import given_sets, refuse_overlaps

    refuse_overlaps(given_sets(sets or ()))
    return sets


Sets = Annotated[Optional[list[str]], typer.Option("--set", help="override a key for every run: "
                                                                  "pools.main.tp=4 (repeatable)",
                                                   callback=one_value_per_key)]


def parse_sets(sets: Optional[Sequence[str]]) -> dict[str, Any]:
    """``--set`` assignments as one overlay, applied in order as ``llmsim run`` applies them."""
    from ..scenario.overrides import parse_assignment
    from ..scenario.variants import merge_overlays

    return merge_overlays([dict([parse_assignment(a)]) for a in sets or ()])


#: Longest wait for a Dask scheduler --connect-timeout accepts (an hour).
MAX_CONNECT_TIMEOUT_S = 3600.0


def check_connect_timeout(seconds: float) -> float:
    """``--connect-timeout`` as given, refused unless a finite wait of up to an hour (nan or inf would wait for
    ever or not at all)."""
    import math

    if not math.isfinite(seconds) or not 0 < seconds <= MAX_CONNECT_TIMEOUT_S:
        raise LlmsimError(f"expected seconds to wait for the Dask scheduler, more than 0 and at most "
                          f"{MAX_CONNECT_TIMEOUT_S:g} (got {seconds!r})", key_path="--connect-timeout")
    return seconds


def open_executor(name: str, workers: Optional[int], address: Optional[str], connect_timeout: float) -> Executor:
    from ..planning.executors import ExecutorOptions, make_executor

    check_connect_timeout(connect_timeout)
    return make_executor(name, ExecutorOptions(workers=workers, address=address, connect_timeout_s=connect_timeout))


def check_version_flag(version: str, flag: str = "--backend-version") -> str:
    """``version`` when it names a release, else one line naming ``flag``: the
    check a scenario's ``engine.backend_version`` takes, so the command line
    and the scenario accept the same spellings (estimate's and validate's ``--backend-version``)."""
    from ..profiles.backend import check_backend_version

    try:
        return check_backend_version(version)
    except ValueError as e:
        raise LlmsimError(str(e), key_path=flag) from None


#: The GiB :func:`check_cuda_graph_gib` takes: KvMemory's own bounds on ``cuda_graph_gib``.
MAX_CUDA_GRAPH_GIB = 1024


def cuda_graph_gib_option() -> Any:
    """``--cuda-graph-gib``: what a scenario states as ``engine.kv_memory.cuda_graph_gib``, for the
    commands that build a vLLM pool themselves (estimate's, each row validate replays)."""
    from ..kv_memory import GRAPHS_FLAG

    return typer.Option(None, GRAPHS_FLAG, help="CUDA-graph memory per GPU that vLLM 0.20.0 and later take out "
                        "of the KV pool, which llmsim cannot derive and those releases need "
                        "(engine.kv_memory.cuda_graph_gib): the 'Estimated CUDA graph memory' they log, from "
                        "0.34.0 the GiB of 'Graph capturing finished'")


def check_cuda_graph_gib(gib: Optional[float]) -> Optional[float]:
    """``--cuda-graph-gib`` as given, refused outside 0 to 1,024 GiB (NaN included), before anything is
    priced or replayed."""
    from ..kv_memory import GRAPHS_FLAG

    if gib is not None and not 0 <= gib <= MAX_CUDA_GRAPH_GIB:      # NaN fails both
        raise LlmsimError(f"GiB per GPU, 0 to {MAX_CUDA_GRAPH_GIB:,} (got {gib})", key_path=GRAPHS_FLAG)
    return gib
