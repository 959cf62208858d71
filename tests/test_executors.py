"""Executors: the local pool, the registry, and Dask giving the local results bit for bit."""
from __future__ import annotations

import json
import socket
from contextlib import contextmanager

import pandas as pd
import pytest

from simulator.errors import LlmsimError
from simulator.planning.executors import EXECUTORS, Executor, ExecutorOptions, make_executor, register_executor
from simulator.planning.point import WALL_TIME
from test_sweep import words, write_sweep, write_tiny_scenario


def _square(x: int) -> int:
    return x * x


def _boom(x: int) -> int:
    raise ValueError(f"bad item {x}")


@pytest.mark.parametrize("workers", [1, 2])
def test_local_yields_every_item_with_its_result(workers):
    with make_executor("local", ExecutorOptions(workers=workers)) as ex:
        assert ex.workers == workers
        assert sorted(ex.map_unordered(_square, range(7))) == [(i, i * i) for i in range(7)]
        assert list(ex.map_unordered(_square, [])) == []


def test_an_error_in_a_task_reaches_the_caller():
    with make_executor("local", ExecutorOptions(workers=2)) as ex:
        with pytest.raises(ValueError, match="bad item"):
            list(ex.map_unordered(_boom, [1, 2, 3]))


def test_backends_register_by_name():
    @register_executor("test-inline")
    class Inline(Executor):
        def __init__(self, options):
            self.options = options

        def map_unordered(self, fn, items):
            return ((i, fn(i)) for i in items)

    try:
        ex = make_executor("test-inline", ExecutorOptions(workers=3))
        assert isinstance(ex, Inline) and ex.options.workers == 3
        assert list(ex.map_unordered(_square, [3])) == [(3, 9)]
    finally:
        del EXECUTORS["test-inline"]
    with pytest.raises(LlmsimError, match="unknown executor 'ray' \\(valid: dask, local\\)"):
        make_executor("ray")


def test_options_a_backend_does_not_take_are_errors():
    with pytest.raises(LlmsimError, match="needs --executor dask"):
        make_executor("local", ExecutorOptions(address="tcp://127.0.0.1:8786"))
    with pytest.raises(LlmsimError, match="--workers: must be at least 1"):
        make_executor("local", ExecutorOptions(workers=0))


def _table(out) -> pd.DataFrame:
    return pd.read_parquet(out / "sweep.parquet").drop(columns=[WALL_TIME])


def _stored(out) -> dict:
    rows = {}
    for p in (out / "points").glob("*.json"):
        row = json.loads(p.read_text())["row"]
        row.pop(WALL_TIME)
        rows[p.stem] = row
    return rows


@contextmanager
def local_cluster():
    """An in-process Dask cluster (threads). Tests run their local-executor
    runs before starting it: forking a process pool while the cluster's
    threads run is asking for trouble."""
    pytest.importorskip("distributed", reason="Dask distributed is not installed (pip install 'llmsim[dask]')")
    from distributed import LocalCluster

    with LocalCluster(processes=False, n_workers=1, threads_per_worker=1, dashboard_address=None) as cluster:
        yield cluster.scheduler_address


def test_dask_results_equal_local_ones_bit_for_bit(tmp_path, cli):
    sweep = write_sweep(tmp_path, {"grid": {"pools.chat.replicas": [1, 2, 3], "seed": [1, 2]}})
    local, dask = tmp_path / "local", tmp_path / "dask"
    r = cli("sweep", sweep, "-o", local, "--workers", "2")
    assert r.code == 0, r.err
    with local_cluster() as address:
        r = cli("sweep", sweep, "-o", dask, "--executor", "dask", "--address", address)
    assert r.code == 0, r.err
    assert "6 run on dask" in words(r.out)
    a, b = _table(local), _table(dask)
    assert len(a) == 6
    pd.testing.assert_frame_equal(a, b, check_exact=True)
    assert _stored(local) == _stored(dask)  # every float, as written


def test_plan_runs_on_dask_too(tmp_path, cli):
    scenario = write_tiny_scenario(tmp_path)
    args = ["plan", scenario, "--vary", "pools.chat.replicas=1..8", "--vary", "pools.chat.tp=1,2"]
    assert cli(*args, "-o", tmp_path / "local").code == 0
    with local_cluster() as address:
        r = cli(*args, "-o", tmp_path / "dask", "--executor", "dask", "--address", address)
    assert r.code == 0, r.err
    plans = [json.loads((tmp_path / d / "plan.json").read_text()) for d in ("local", "dask")]
    assert plans[0]["candidates"] == plans[1]["candidates"]


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_an_unreachable_scheduler_is_one_clear_error(tmp_path, cli_subprocess):
    pytest.importorskip("distributed", reason="Dask distributed is not installed (pip install 'llmsim[dask]')")
    sweep = write_sweep(tmp_path, {"grid": {"seed": [1]}})
    address = f"tcp://127.0.0.1:{_closed_port()}"
    r = cli_subprocess("sweep", sweep, "-o", tmp_path / "out", "--executor", "dask", "--address", address,
                       "--connect-timeout", "0.5")
    assert r.code == 2
    assert f"--address: cannot reach a Dask scheduler at {address}" in r.err
    assert "Traceback" not in r.err


def test_an_address_that_is_not_a_scheduler_is_one_clear_error(tmp_path, cli):
    pytest.importorskip("distributed", reason="Dask distributed is not installed (pip install 'llmsim[dask]')")
    sweep = write_sweep(tmp_path, {"grid": {"seed": [1]}})
    r = cli("sweep", sweep, "-o", tmp_path / "out", "--executor", "dask", "--address", "not-an-address")
    assert r.code == 2 and "not a Dask scheduler address" in r.err
    # something listens but never speaks Dask: Dask alone would wait for ever
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        address = f"tcp://127.0.0.1:{silent.getsockname()[1]}"
        r = cli("sweep", sweep, "-o", tmp_path / "out", "--executor", "dask", "--address", address,
                "--connect-timeout", "0.5")
    assert r.code == 2
    assert f"cannot reach a Dask scheduler at {address} (no Dask handshake within 0.5 s)" in r.err
    assert not (tmp_path / "out").exists()


def test_dask_without_the_extra_says_how_to_get_it(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "distributed", None)
    with pytest.raises(LlmsimError, match=r"pip install 'llmsim\[dask\]'"):
        make_executor("dask", ExecutorOptions(address="tcp://127.0.0.1:8786"))


@pytest.mark.parametrize("flags, key", [(["--executor", "k8s"], "--executor"), (["--workers", "0"], "--workers")])
def test_a_run_that_needs_no_executor_still_checks_its_flags(tmp_path, cli, flags, key):
    """One replicate opens no executor; a misspelt --executor is refused all the same, not ignored."""
    from tests.test_bad_input import SCENARIO, one_line_error, write_yaml

    r = cli("run", write_yaml(tmp_path / "s.yaml", SCENARIO), *flags)
    one_line_error(r, f"{key}:")


@pytest.mark.parametrize("flags, key", [
    (["--address", "tcp://host:8786"], "--address"), (["--executor", "dask"], "--executor"),
    (["--executor", "local"], "--executor"), (["--workers", "2"], "--workers"),
    (["--connect-timeout", "5"], "--connect-timeout"),
])
def test_an_executor_flag_a_run_would_ignore_is_refused(tmp_path, cli, flags, key):
    """One seed without --shards opens no executor: --address would send nothing to that cluster, unsaid."""
    from tests.test_bad_input import SCENARIO, one_line_error, write_yaml

    scenario = write_yaml(tmp_path / "s.yaml", SCENARIO)
    r = cli("run", scenario, "-o", tmp_path / "out", *flags)
    one_line_error(r, f"{key}: ", "opens no executor", "needs --replicates N (N > 1) or --shards N")
    assert not (tmp_path / "out").exists()
    ladder = cli("run", scenario, "--ladder", *flags)
    one_line_error(ladder, f"{key}: ", "--ladder runs its steps", "drop it")
