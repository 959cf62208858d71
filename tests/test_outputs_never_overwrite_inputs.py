"""An output flag naming one of the command's inputs is refused before any work.

``llmsim validate --csv in.csv`` once replaced the measured results it read
with its per-row errors, and ``--fit`` the backend profile it was given.
Each such case must be one line naming the flag and the file, exit code 2,
and leave the input's bytes as they were. The unknown-value errors of
``llmsim estimate`` name their flag too.
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from simulator.profiles.loader import builtin_dir
from simulator.validation.replay import ReplaySettings

from test_validate import _csv, _rows


def _flat(text: str) -> str:
    """The message without the terminal's line wrapping (a long tmp path may wrap)."""
    return "".join(text.split())


def _refused(res, flag: str, name: str) -> None:
    assert res.code == 2, (res.code, res.out, res.err)
    assert "Traceback" not in res.err
    assert res.err.startswith("error:") and flag in res.err and _flat(name) in _flat(res.err), res.err


@pytest.fixture
def measured(tmp_path: Path) -> Path:
    """A one-row measured CSV that replays in milliseconds."""
    p = tmp_path / "in.csv"
    _csv(_rows(ReplaySettings())[:1], p)
    return p


@pytest.fixture
def backend_file(tmp_path: Path) -> Path:
    """The user's own backend profile: a copy of the built-in vLLM one."""
    p = tmp_path / "myvllm.yaml"
    shutil.copy(builtin_dir("backend_profiles") / "vllm.yaml", p)
    return p


VALIDATE = ("--model", "llama-3.2-1b", "--workers", "1")


def test_validate_csv_naming_the_measured_csv_is_refused(cli, measured):
    before = measured.read_bytes()
    res = cli("validate", measured, *VALIDATE, "--csv", measured)
    _refused(res, "--csv", str(measured))
    assert "an input of this run" in res.err
    assert measured.read_bytes() == before


@pytest.mark.parametrize("spelling", ["relative", "dotdot", "symlink", "hardlink"])
def test_validate_csv_reaching_the_input_by_another_name_is_refused(cli, measured, tmp_path, monkeypatch, spelling):
    """Paths are compared as files, not as strings."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sub").mkdir()
    out = {"relative": "in.csv", "dotdot": "sub/../in.csv", "symlink": "link.csv", "hardlink": "hard.csv"}[spelling]
    if spelling == "symlink":
        os.symlink(measured, tmp_path / out)
    elif spelling == "hardlink":
        os.link(measured, tmp_path / out)
    before = measured.read_bytes()
    res = cli("validate", measured, *VALIDATE, "--csv", out)
    _refused(res, "--csv", out)
    assert measured.read_bytes() == before
    if spelling == "symlink":
        assert (tmp_path / out).is_symlink()


def test_validate_fit_naming_the_backend_profile_is_refused(cli, measured, backend_file):
    before = backend_file.read_bytes()
    res = cli("validate", measured, *VALIDATE, "--backend", backend_file, "--fit", backend_file)
    _refused(res, "--fit", str(backend_file))
    assert backend_file.read_bytes() == before


def test_validate_csv_naming_the_backend_profile_is_refused(cli, measured, backend_file):
    before = backend_file.read_bytes()
    res = cli("validate", measured, *VALIDATE, "--backend", backend_file, "--csv", backend_file)
    _refused(res, "--csv", str(backend_file))
    assert backend_file.read_bytes() == before


def test_validate_csv_naming_the_model_file_is_refused(cli, measured, tmp_path):
    model = tmp_path / "mine.yaml"
    shutil.copy(builtin_dir("model_profiles") / "llama-3.2-1b.yaml", model)
    before = model.read_bytes()
    res = cli("validate", measured, "--model", model, "--workers", "1", "--csv", model)
    _refused(res, "--csv", str(model))
    assert model.read_bytes() == before


def test_validate_csv_and_fit_naming_one_file_is_refused(cli, measured, tmp_path):
    out = tmp_path / "out.yaml"
    res = cli("validate", measured, *VALIDATE, "--fit", out, "--csv", out)
    _refused(res, "--csv", str(out))
    assert "--fit" in res.err and not out.exists()


def test_validate_csv_to_a_file_of_its_own_is_written(cli, measured, tmp_path):
    before = measured.read_bytes()
    res = cli("validate", measured, *VALIDATE, "--csv", tmp_path / "errors.csv")
    assert res.code == 0, res.err
    assert (tmp_path / "errors.csv").read_text().startswith("row,") and measured.read_bytes() == before


def test_plan_output_folder_holding_the_scenario_as_plan_json_is_refused(cli, tmp_path):
    """A JSON scenario named plan.json in the -o folder would be replaced by the plan (refused before loading it)."""
    scenario = tmp_path / "plan.json"
    scenario.write_text("{}\n")
    res = cli("plan", scenario, "--vary", "pools.main.replicas=1..2", "-o", tmp_path)
    _refused(res, "-o", str(scenario))
    assert scenario.read_text() == "{}\n"


def test_calibrate_report_naming_a_kernel_table_is_refused(cli, tmp_path):
    """Refused before the fit: the table is the data the fit would read."""
    (tmp_path / "kernels").mkdir()
    table = tmp_path / "kernels" / "gemm.csv"
    table.write_text("gpu,m,n,k,time_us\n")
    res = cli("calibrate", "--data", tmp_path, "--dry-run", "--quiet", "--report-md", table)
    _refused(res, "--report-md", str(table))
    assert table.read_text() == "gpu,m,n,k,time_us\n"


@pytest.mark.parametrize("flag, value, expect", [
    ("--weight-dtype", "fp7", "unknown weight dtype 'fp7'"),
    ("--kv-dtype", "fp7", "unknown KV dtype 'fp7'"),
    ("--gpu", "h100", "unknown GPU 'h100'"),
    ("--model", "gpt-5", "unknown model 'gpt-5'"),
    ("--model", "no-such-model.yaml", "file not found"),
])
@pytest.mark.parametrize("backend", [(), ("--backend", "vllm")])
def test_estimate_unknown_values_name_their_flag(cli, flag, value, expect, backend):
    args = {"--gpu": "h100-sxm", "--model": "llama-3-8b", flag: value}
    res = cli("estimate", "request", *(x for kv in args.items() for x in kv), "--input", "100", "--output", "10",
              *backend)
    assert res.code == 2 and "Traceback" not in res.err, res.err
    assert expect in res.err and f"error: {flag}" in res.err, res.err
    assert len(res.err.strip().splitlines()) == 1


def test_an_output_flag_naming_a_pipe_or_device_is_refused(cli, measured, tmp_path):
    """The atomic write renames a new file over its target: a FIFO (or, run as root, /dev/null) would be
    replaced by a plain file."""
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    res = cli("validate", measured, "--model", "llama-3.2-1b", "--csv", fifo, "--workers", "1")
    assert res.code == 2 and "not a regular file" in res.err and "Traceback" not in res.err
    assert fifo.is_fifo()
