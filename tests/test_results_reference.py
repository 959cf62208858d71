"""The five scenarios give, bit for bit, the results stored in tests/data/results_reference.json.

A change of structure (modules moved, the scenario compiled in another
place, imports turned around) must not move a single number: every
scenario in ``scenarios/`` runs at its ``llmsim check`` size (``check.set``
over the file), once whole and once as two shards, and the sha256 of its
results.json (as ``llmsim run`` writes it, minus wall-clock fields) and of
each shard's per-request columns must equal the stored digests. A scenario
the sharded run refuses stores the refusal's message instead.

A change that is meant to move results (a scenario edited, the engine or
the cost model changed) regenerates the reference and commits it with the
change::

    python tests/test_results_reference.py            # every scenario
    python tests/test_results_reference.py chatbot    # only the named ones
"""
from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Any, Iterable, Iterator

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from helpers_case_studies import SCENARIOS, at_check_settings, path_of, run  # noqa: E402
from simulator.errors import LlmsimError  # noqa: E402
from simulator.metrics.results import jsonable  # noqa: E402
from simulator.planning.executors.base import ExecutorOptions  # noqa: E402
from simulator.planning.executors.local import LocalExecutor  # noqa: E402
from simulator.sharding import run_sharded  # noqa: E402

REFERENCE = Path(__file__).resolve().parent / "data" / "results_reference.json"
NAMES = sorted(p.stem for p in SCENARIOS.glob("*.yaml"))
SHARDS = 2


def _without_wall_times(value: Any) -> Any:
    """results.json's contents less any wall-clock figure (those belong in run.json and vary run to run)."""
    if isinstance(value, dict):
        return {k: _without_wall_times(v) for k, v in value.items() if "wall" not in k}
    if isinstance(value, list):
        return [_without_wall_times(v) for v in value]
    return value


def results_digest(results: dict) -> str:
    """sha256 of results.json as written (``metrics.results.write_results``), wall times left out."""
    text = json.dumps(_without_wall_times(jsonable(dict(results))), indent=2, allow_nan=False) + "\n"
    return hashlib.sha256(text.encode()).hexdigest()


def columns_digest(columns) -> str:
    """sha256 of a shard's per-request columns: every column's name, dtype, shape and values."""
    h = hashlib.sha256()
    for name in columns:
        a = np.asarray(columns[name])
        h.update(f"{name}:{a.dtype.str}:{a.shape};".encode())
        h.update(repr(a.tolist()).encode() if a.dtype == object else np.ascontiguousarray(a).tobytes())
    return h.hexdigest()


class _InProcess(LocalExecutor):
    """Shards run one after another in this process, each outcome's columns
    digested as it comes out (the merge consumes them)."""

    def __init__(self) -> None:
        super().__init__(ExecutorOptions(workers=1))
        self.digests: dict[int, str] = {}

    def map_unordered(self, fn, items: Iterable) -> Iterator:
        for job, outcome in super().map_unordered(fn, items):
            self.digests[outcome.index] = columns_digest(outcome.columns)
            yield job, outcome


def digests(name: str) -> dict:
    """What the reference stores for one scenario."""
    sc, path = at_check_settings(name), path_of(name)
    entry: dict[str, Any] = {"results": results_digest(run(name).results)}
    ex = _InProcess()
    try:
        merged = run_sharded(sc, SHARDS, source=path, executor=ex)
    except LlmsimError as e:
        entry["sharded"] = f"refused: {e.message}"
    else:
        entry["sharded"] = {"results": results_digest(merged.results),
                            "shards": [ex.digests[i] for i in sorted(ex.digests)]}
    return entry


def _stored() -> dict:
    return json.loads(REFERENCE.read_text())


@pytest.mark.parametrize("name", NAMES)
def test_scenario_results_equal_the_stored_reference(name):
    stored = _stored()
    assert name in stored, f"no reference for {name}: python tests/test_results_reference.py {name}"
    assert digests(name) == stored[name], \
        f"{name}'s results changed; if that is intended: python tests/test_results_reference.py {name}"


def test_reference_names_only_existing_scenarios():
    assert sorted(_stored()) == NAMES, "python tests/test_results_reference.py regenerates the reference"


def test_digests_see_a_changed_figure_and_ignore_wall_times():
    r = {"completed": 10, "llmsim": {"wall_time_s": 1.0, "gpus": 4}}
    assert results_digest(r) == results_digest({**r, "llmsim": {"wall_time_s": 2.0, "gpus": 4}})
    assert results_digest(r) != results_digest({**r, "completed": 11})
    cols = {"id": np.arange(3), "ttft": np.array([0.1, 0.2, 0.3])}
    assert columns_digest(cols) != columns_digest({**cols, "ttft": np.array([0.1, 0.2, 0.30000000000000004])})


def _regenerate(names: list[str]) -> None:
    stored = _stored() if REFERENCE.exists() else {}
    for name in names or NAMES:
        stored[name] = digests(name)
        print(name, json.dumps(stored[name]))
    stored = {k: stored[k] for k in sorted(stored) if k in NAMES}
    REFERENCE.parent.mkdir(parents=True, exist_ok=True)
    REFERENCE.write_text(json.dumps(stored, indent=2) + "\n")


if __name__ == "__main__":
    _regenerate(sys.argv[1:])
