"""The what-if notebooks run, offer a slider, and are stored without outputs.

Each notebook is executed top to bottom in a fresh ``python3`` kernel (the
interpreter running the tests, through ipykernel) from ``notebooks/``, with
``LLMSIM_NOTEBOOK_SMOKE=1`` so its first cell picks small settings. A
slider's callback is run once by ``interact``, which shows an exception as
a traceback instead of failing the cell, so outputs are checked for those.

Outputs are not committed: a stored figure or table would go stale silently
the first time the model changes, and make every diff of a notebook a diff
of numbers.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")
pytest.importorskip("ipywidgets")

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
PATHS = sorted(NOTEBOOKS.glob("*.ipynb"))
CELL_TIMEOUT_S = 300       # smoke cells take seconds; this only stops a hung kernel
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"


def _scenario_of(path: Path) -> str:
    """The scenario a notebook simulates: its ``SCENARIO = "name"`` (or
    ``SCENARIO, POOL = "name", ...``) assignment."""
    nb = nbformat.read(path, as_version=4)
    code = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
    m = re.search(r'^SCENARIO(?:, \w+)* = "([^"]+)"', code, re.M)
    assert m, f"{path.name}: no SCENARIO = \"name\" assignment"
    return m.group(1)


def test_every_shipped_scenario_has_a_notebook():
    """README: one what-if notebook per case study, each simulating a
    shipped scenario (a renamed or added scenario needs its notebook)."""
    shipped = {p.stem for p in (NOTEBOOKS.parent / "scenarios").glob("*.yaml")}
    simulated = [_scenario_of(p) for p in PATHS]
    assert len(simulated) == len(set(simulated)), simulated
    assert set(simulated) == shipped


@pytest.mark.parametrize("path", PATHS, ids=lambda p: p.stem)
def test_notebook_is_stored_without_outputs(path: Path):
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    stale = [i for i, c in enumerate(nb.cells)
             if c.cell_type == "code" and (c.outputs or c.execution_count is not None)]
    assert not stale, f"{path.name}: cells {stale} hold outputs or execution counts; clear them before committing"
    assert "widgets" not in nb.metadata, f"{path.name}: stored widget state; clear it before committing"


@pytest.mark.parametrize("path", PATHS, ids=lambda p: p.stem)
def test_notebook_runs_with_smoke_settings(path: Path, monkeypatch):
    monkeypatch.setenv("LLMSIM_NOTEBOOK_SMOKE", "1")     # inherited by the kernel process
    monkeypatch.delenv("MPLBACKEND", raising=False)      # let ipykernel pick its inline backend (figures as PNG)
    nb = nbformat.read(path, as_version=4)
    first = next(c for c in nb.cells if c.cell_type == "code")
    assert "LLMSIM_NOTEBOOK_SMOKE" in first.source, f"{path.name}: the first code cell must read the smoke switch"

    client = nbclient.NotebookClient(nb, kernel_name="python3", timeout=CELL_TIMEOUT_S,
                                     resources={"metadata": {"path": str(NOTEBOOKS)}})
    # nbclient plays a front end's part for Output widgets by sending comm messages on the
    # shell channel while it polls that channel for the cell's reply; zmq can then miss the
    # reply until the cell timeout (seen: a 5 s notebook taking 300 s, now and then). Without
    # that part a slider's output simply lands in its cell's outputs, where it is checked below.
    client.comm_open_handlers = {"jupyter.widget": lambda msg: None}
    client.execute()          # raises CellExecutionError, naming the cell, if any cell fails

    models = nb.metadata.get("widgets", {}).get(WIDGET_STATE, {}).get("state", {}).values()
    sliders = [m["model_name"] for m in models if m["model_name"].endswith("SliderModel")]
    assert sliders, f"{path.name}: no ipywidgets slider was displayed"
    outputs = [(i, o) for i, c in enumerate(nb.cells) if c.cell_type == "code" for o in c.outputs]
    # interact() shows a failing callback's traceback instead of failing its cell
    errors = [f"cell {i}: {o['ename']}: {o['evalue']}" for i, o in outputs if o.get("output_type") == "error"]
    assert not errors, f"{path.name}: {errors}"
    figures = [i for i, o in outputs if "image/png" in o.get("data", {})]
    assert len(set(figures)) >= 2, f"{path.name}: expected a static figure and a slider's figure, got cells {figures}"
