"""What the case-study scenario tests share: finding a scenario, building it
as `llmsim check` does, running it once per suite, and loading every ladder step."""
from __future__ import annotations

import dataclasses
import pickle
from functools import lru_cache
from pathlib import Path

from helpers_shared import suite_lock
from simulator.runner import RunOutput, simulate
from simulator.scenario.load import load_scenario
from simulator.scenario.overlays import load_with_overlays, load_with_variants
from simulator.scenario.schema import Scenario
from simulator.scenario.variants import ladder_steps

SCENARIOS = Path(__file__).resolve().parents[1] / "scenarios"


def path_of(name: str) -> Path:
    return SCENARIOS / f"{name}.yaml"


def at_check_settings(name: str, *variants: str) -> Scenario:
    """The scenario as `llmsim check` runs it (check.set over the file), then
    the named variants' overlays on top."""
    path = path_of(name)
    sc, _ = load_scenario(path)
    by_name = {v.name: v for v in sc.variants}
    overlays = [("check.set", sc.check.set)] + [(f"variants.{v}.set", by_name[v].set) for v in variants]
    return load_with_overlays(path, overlays)




@lru_cache(maxsize=None)
def run(name: str, *variants: str) -> RunOutput:
    """The case study at its check settings (and ``variants``), simulated once
    per suite: the check-size runs of the SLO, results-digest and report-page
    tests are the same runs, and simulating each three times cost a minute of
    the suite. The first process to ask runs it under a lock while the others
    wait for its pickle; each process reads its own copy. What is shared is the
    run's record, without the live fleet (``pools``, ``scalers``, ``plan``,
    which hold closures): a test that inspects those simulates its own run."""
    stem = "+".join((name, *variants))
    with suite_lock(stem) as folder:
        if folder is None:
            return simulate(at_check_settings(name, *variants), source=path_of(name))
        stored = folder / f"{stem}.pickle"
        if not stored.exists():
            out = simulate(at_check_settings(name, *variants), source=path_of(name))
            record = dataclasses.replace(out, pools={}, scalers={}, plan=None)
            stored.with_suffix(".part").write_bytes(pickle.dumps(record))
            stored.with_suffix(".part").replace(stored)
            return record     # the same record every caller gets, whoever ran it
    return pickle.loads(stored.read_bytes())


def load_every_step(name: str) -> Scenario:
    """Load the scenario, every ladder step and the check settings, each of
    which raises on a bad key or value, and require each to change what it
    is laid over: a step differs from the step without its own variant, and
    the check settings from the scenario as written (an overlay that sets a
    key to the value it already has, or that is lost on the way, would make
    a ladder rung or a CI run that silently repeats another). Returns the
    scenario as written."""
    path = path_of(name)
    sc, _ = load_scenario(path)
    assert sc.name == name and sc.slo and sc.check is not None and sc.check.set
    assert sc.variants, f"{name}: no variants, so no ladder"
    as_written = sc.model_dump(mode="json")
    for step in ladder_steps(sc.variants, sc.ladder)[1:]:
        under = load_with_variants(path, step.variants[:-1]).model_dump(mode="json") if step.variants[:-1] \
            else as_written
        assert load_with_variants(path, step.variants).model_dump(mode="json") != under, \
            f"{name}: ladder step {step.name!r} changes nothing"
    assert at_check_settings(name).model_dump(mode="json") != as_written, f"{name}: check.set changes nothing"
    return sc
