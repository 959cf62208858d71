"""Shared fixtures: the repository layout, ../shared/data, and the CLI.

``cli`` runs ``llmsim`` in-process through :func:`simulator.cli.app.main`
(the same entry point as the console script, so user errors become exit
code 2 exactly as at a terminal) and returns the exit code, stdout and
stderr. It is much faster than a subprocess; the few tests that must see a
real process (no traceback on stderr) use ``cli_subprocess``.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# The suite runs two workers on two cores (`pytest -n 2`); OpenBLAS starting threads of its own in
# each oversubscribes them: the least-squares fits of the calibration and held-out tests spent about
# 40 % more CPU time for the same result. Set before any test imports numpy, and inherited by the
# workers and the commands the tests start.
for _threads in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_threads, "1")

import pytest  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO_ROOT.parent / "shared" / "data"


@dataclass
class CliResult:
    code: int
    out: str
    err: str

    def json(self) -> Any:
        assert self.code == 0, f"exit {self.code}; stderr:\n{self.err}"
        return json.loads(self.out)


# meta-llama/Meta-Llama-3-8B config.json as downloaded (llmsim uses a subset of its keys).
_LLAMA3_8B_CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "attention_bias": False,
    "attention_dropout": 0.0,
    "bos_token_id": 128000,
    "eos_token_id": 128001,
    "hidden_act": "silu",
    "hidden_size": 4096,
    "initializer_range": 0.02,
    "intermediate_size": 14336,
    "max_position_embeddings": 8192,
    "model_type": "llama",
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 8,
    "pretraining_tp": 1,
    "rms_norm_eps": 1e-05,
    "rope_scaling": None,
    "rope_theta": 500000.0,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "transformers_version": "4.40.0.dev0",
    "use_cache": True,
    "vocab_size": 128256,
}


@pytest.fixture
def hf_llama3_8b_config() -> dict:
    """A Hugging Face config.json dict, extra keys and all."""
    return dict(_LLAMA3_8B_CONFIG)


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO_ROOT


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """``../shared/data`` beside the checkout; skips when it is not there
    (e.g. a wheel installed elsewhere, or a clone without the shared folder)."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"shared data folder {SHARED_DATA} is absent (it sits beside the checkout as ../shared/data)")
    return SHARED_DATA


@pytest.fixture(scope="session")
def kernel_tables(shared_data):
    """The measured kernel tables as calibration reads them (``calibration.data.load``), read once per
    process: the calibration, hold-out and per-format fits of several modules read the same tables
    (about a second each time) and none changes them."""
    from simulator.calibration import data

    return data.load(shared_data)


def _exit_code(e: SystemExit) -> int:
    if e.code is None:
        return 0
    if isinstance(e.code, int):
        return e.code
    return 1


@pytest.fixture
def cli(capsys):
    """Run ``llmsim ARGS...`` in-process; returns a :class:`CliResult`."""
    from simulator.cli.app import main

    def run(*args: Any) -> CliResult:
        capsys.readouterr()  # drop anything printed before
        try:
            main([str(a) for a in args])
            code = 0
        except SystemExit as e:
            code = _exit_code(e)
        captured = capsys.readouterr()
        return CliResult(code, captured.out, captured.err)

    return run


@pytest.fixture
def cli_subprocess():
    """Run ``llmsim ARGS...`` as a separate Python process (the console
    script's entry point, without depending on the venv's bin/ layout)."""

    def run(*args: Any, cwd: Path | None = None, timeout: float = 60) -> CliResult:
        cmd = [sys.executable, "-c", "from simulator.cli.app import main; main()", *map(str, args)]
        env = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1"}
        p = subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, timeout=timeout, env=env)
        return CliResult(p.returncode, p.stdout, p.stderr)

    return run


# The suite's declared time budget on two cores (pyproject.toml's pytest section says why).
SUITE_BUDGET_S = 600.0
SLOW_TEST_S = 15.0
_unmarked_slow: list[tuple[str, float]] = []
_started: list[float] = []


def pytest_sessionstart(session) -> None:
    _started.append(time.monotonic())


#: A folder the suite's processes share for the case studies' check-size runs (helpers_case_studies.run);
#: unset, as when a test file is run by hand, each process runs its own.
RUN_CACHE_ENV = "LLMSIM_TEST_RUN_CACHE"


def pytest_configure(config) -> None:
    """One folder per session for the case studies' shared check-size runs
    (helpers_case_studies.run): made by the process xdist's workers start from,
    so they inherit it, and removed with the session."""
    if hasattr(config, "workerinput") or RUN_CACHE_ENV in os.environ:
        return
    folder = tempfile.mkdtemp(prefix="llmsim-check-runs-")
    os.environ[RUN_CACHE_ENV] = folder
    config.add_cleanup(lambda: (shutil.rmtree(folder, ignore_errors=True), os.environ.pop(RUN_CACHE_ENV, None)))


def pytest_runtest_logreport(report) -> None:
    """Note an unmarked test whose call took over the per-test budget."""
    if report.when == "call" and report.duration > SLOW_TEST_S and "slow" not in report.keywords:
        _unmarked_slow.append((report.nodeid, report.duration))


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    """The wall time against the budget, and the tests that should carry the slow mark."""
    if not _started or hasattr(config, "workerinput"):     # an xdist worker: the controller reports
        return
    wall = time.monotonic() - _started[0]
    terminalreporter.write_line(f"suite wall time {wall:.0f} s of a {SUITE_BUDGET_S:.0f} s budget on two cores"
                                + ("" if wall <= SUITE_BUDGET_S else " (over budget)"))
    for nodeid, took in sorted(_unmarked_slow, key=lambda x: -x[1]):
        terminalreporter.write_line(f"unmarked test over {SLOW_TEST_S:.0f} s ({took:.0f} s): {nodeid}: "
                                    "mark it @pytest.mark.slow or make it faster")
