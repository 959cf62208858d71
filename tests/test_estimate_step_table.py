"""`llmsim estimate step`'s table reads as `estimate request`'s does: labels
with units (KiB, GB, TFLOP, ms), its title on one line at 80 columns; its
``--json`` object keeps the keys scripts read."""
from __future__ import annotations

import json
import os
import subprocess
import sys

from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import REPO_ROOT
from simulator.cli.estimate import step_rows

ARGS = ("--gpu", "h100-sxm", "--model", "llama-3-70b", "--tp", "4", "--decode-batch", "64", "--decode-context", "3000")
#: The --json object's keys for a dense model without --backend: a machine interface, unchanged.
JSON_KEYS = ["gpu", "model", "tp", "weight_dtype", "kv_dtype", "mode", "params_b", "active_params_b", "layout",
             "kv_bytes_per_token", "kv_copies", "total_ms", "linear_ms", "attention_ms", "comm_ms", "other_ms", "overhead_ms",
             "flops", "bytes", "bound"]


def _llmsim(*args: str, columns: int) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": str(columns), "NO_COLOR": "1",
           "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-c", "from simulator.cli.app import main; main()", *args],
                          capture_output=True, text=True, env=env, timeout=120)


def test_on_80_columns_the_title_is_one_line_and_figures_have_units():
    r = _llmsim("estimate", "step", *ARGS, columns=80)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].strip() == "llama-3-70b on 4× h100-sxm: one iteration"
    assert lines[1].startswith("┌")                                     # the table follows the title directly
    assert all(len(line) <= 80 for line in lines)
    rows = {c[0]: c[1] for line in lines if len(c := [x.strip() for x in line.strip("│ ").split("│")]) == 2}
    assert rows["KV per token"] == "320 KiB"
    assert rows["compute"].endswith(" TFLOP") and rows["memory traffic"].endswith(" GB")
    assert rows["decoding"] == "64 sequences at 3,000 tokens of context"
    assert {"iteration (ms)", "linear layers (ms)", "attention (ms)", "communication (ms)"} <= rows.keys()
    for raw in ("kv_bytes_per_token", "flops", "bytes", "total_ms", "params_b"):
        assert raw not in r.stdout


def test_the_json_keeps_its_keys():
    r = _llmsim("estimate", "step", *ARGS, "--json", columns=80)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert list(out) == JSON_KEYS
    assert out["kv_bytes_per_token"] == 327680 and out["flops"] > 1e12 and out["bytes"] > 1e10


FIGURES = {"kv_bytes_per_token": "KV per token", "flops": "compute", "bytes": "memory traffic",
           "total_ms": "iteration (ms)", "params_b": "parameters (B)"}


@settings(max_examples=200, deadline=None)
@given(figures=st.fixed_dictionaries({k: st.one_of(st.just(0.0), st.floats(1e-3, 1e16)) for k in FIGURES}),
       extra=st.dictionaries(st.from_regex(r"x_[a-z_]{1,10}", fullmatch=True), st.integers(), max_size=3),
       prefill=st.integers(0, 10**6), cached=st.integers(0, 10**6), batch=st.integers(0, 4096),
       context=st.integers(0, 10**6))
def test_every_figure_is_one_labelled_row(figures, extra, prefill, cached, batch, context):
    """Each key of the object but the title's is one row; a known figure
    under its label with its unit, never rounded to nothing; a key the table
    has no label for (a cost model's own figure) as it is."""
    out = {"gpu": "g", "model": "m", "tp": 2, "dp": 2, "ep": 4, "mode": "calibrated", **extra, **figures,
           "warnings": ["w"]}
    rows = step_rows(out, prefill, cached, batch, context)
    labels = [label for label, _ in rows]
    assert len(labels) == len(set(labels))
    shown = dict(rows)
    step = [label for label in ("prefill chunk", "decoding") if label in shown]
    assert step == (["prefill chunk"] if prefill else []) + (["decoding"] if batch else [])
    assert labels[:len(step)] == step
    for key in ("gpu", "model", "tp", "dp", "ep", "warnings", *FIGURES):
        assert key not in shown
    assert shown["KV per token"].endswith(" KiB") and shown["compute"].endswith(" TFLOP")
    assert shown["memory traffic"].endswith(" GB")
    if figures["kv_bytes_per_token"] > 0:
        assert float(shown["KV per token"].split()[0].replace(",", "")) > 0
    assert [label for label, _ in rows[len(rows) - len(extra):]] == list(extra)     # last, as they are
    assert all(shown[key] == value for key, value in extra.items())
