"""What a person reads at a terminal: messages as written, tables that fit, a prompt start, a warned-of fit."""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from hypothesis import given, settings, strategies as st
from rich.console import Console

from simulator.cli.output import fitted_table, fmt

SCENARIO = """\
name: {name}
workload: {{num_requests: 20, arrival: {{type: poisson, rate_per_s: 4}}, input_tokens: {{dist: uniform, min: 16, max: 64}},
           output_tokens: {{dist: uniform, min: 4, max: 8}}}}
pools: [{{name: main, model: llama-3-8b, gpu: h100-sxm, engine: {{backend: {backend}}}}}]
"""


def _scenario(tmp_path: Path, name: str, backend: str = "vllm") -> Path:
    p = tmp_path / f"{name}.yaml"
    p.write_text(SCENARIO.format(name=name, backend=backend))
    return p


def test_square_brackets_survive_in_messages(tmp_path, cli, monkeypatch):
    r = cli("run", _scenario(tmp_path, "b", backend='"my[fast]stack"'))
    assert r.code == 2 and "'my[fast]stack'" in r.err and r.err.startswith("error: ")
    monkeypatch.setitem(sys.modules, "distributed", None)     # Dask not installed
    sweep = tmp_path / "s.yaml"
    sweep.write_text(f"base: {_scenario(tmp_path, 'ok')}\ngrid: {{seed: [1]}}\n")
    r = cli("sweep", sweep, "--executor", "dask", "-o", tmp_path / "out")
    assert r.code == 2 and "pip install 'llmsim[dask]'" in r.err


@settings(max_examples=40, deadline=None)
@given(st.lists(st.lists(st.floats(0, 1e9, allow_nan=False), min_size=6, max_size=6), min_size=1, max_size=5),
       st.integers(30, 160))
def test_a_fitted_table_never_cuts_a_number(rows, width):
    """Whatever the width, every number of a column shown is shown whole,
    the first column is always there, and the columns left out are the
    last ones, named in the caption."""
    headers = ["name", "a long header", "b", "c_d_e", "p99 TTFT (ms)", "$ per month"]
    cells = [[f"row{i}", *r[1:]] for i, r in enumerate(rows)]
    t = fitted_table("t", headers, cells, width)
    console = Console(width=width, record=True, color_system=None)
    console.print(t)
    text = console.export_text()
    assert "…" not in text
    shown = len(t.columns)
    assert shown >= 1 and [_squash(c.header) for c in t.columns] == [_squash(h) for h in headers[:shown]]
    for r in cells:
        assert all((v if isinstance(v, str) else fmt(v)) in text for v in r[:shown])
    if shown < len(headers):
        assert all(h in t.caption for h in headers[shown:])
        assert all(len(line) <= width for line in text.splitlines() if "│" in line)


def _squash(header: str) -> str:
    return re.sub(r"\s", "", header)


def test_at_80_columns_the_profiles_table_fits_and_names_what_it_left_out():
    env = {"COLUMNS": "80", "NO_COLOR": "1", "PATH": "/usr/bin:/bin"}
    p = subprocess.run([sys.executable, "-c", "from simulator.cli.app import main; main()", "profiles", "list"],
                       capture_output=True, text=True, env={**env, "PYTHONPATH": ":".join(sys.path)}, timeout=120)
    assert p.returncode == 0, p.stderr
    assert all(len(line) <= 80 for line in p.stdout.splitlines())
    assert "…" not in p.stdout and "left out at 80 columns" in p.stdout
    assert "gb200-nvl72" in p.stdout and "2,250.0" in p.stdout     # names whole, numbers whole (B200 bf16 TFLOPs)
    assert "gpu_hour" in p.stdout.split("left out")[0]     # the price is kept before the rest


def test_the_command_line_starts_without_the_simulator():
    """`llmsim --help` (and every command's start) imports no scipy, pandas,
    cost model or scenario schema: those cost seconds and load on first use."""
    code = ("import sys; from simulator.cli.app import _register; _register(); "
            "print([m for m in ('scipy', 'pandas', 'plotly', 'simulator.costmodel', 'simulator.scenario.schema', "
            "'simulator.runner', 'matplotlib') if m in sys.modules])")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       env={"PYTHONPATH": ":".join(sys.path), "PATH": "/usr/bin:/bin"})
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "[]"


def test_fitting_more_overheads_than_rows_says_so(tmp_path, cli):
    bench = tmp_path / "bench.json"
    bench.write_text(json.dumps({"completed": 16, "total_input_tokens": 16 * 512, "total_output_tokens": 16 * 32,
                                 "max_concurrency": 4, "request_rate": "inf", "mean_ttft_ms": 30.0,
                                 "mean_tpot_ms": 6.0}))
    r = cli("validate", bench, "--backend", "vllm", "--model", "llama-3.1-8b", "--gpu", "h100-sxm",
            "--fit", tmp_path / "mine.yaml")
    assert r.code == 0, r.err
    assert "warning: 1 row(s) to fit 4 overheads" in r.err and "fewer rows than parameters" in r.err


def test_report_names_a_folder_it_cannot_draw(tmp_path, cli):
    r = cli("report", tmp_path / "nope")
    assert r.code == 2 and "no such folder" in r.err and r.err.count("\n") == 1
    r = cli("report", tmp_path)
    assert r.code == 2 and "holds no results.json, ladder.json, plan.json or sweep table" in r.err
