"""The CI entry point runs exactly the README's test command, and that command's
regression gate has a committed baseline for every shipped scenario (a missing
one would only surface as a CI failure after the whole test suite)."""
from __future__ import annotations

import re
from pathlib import Path

import yaml

from simulator.cli.check import baseline_file_name

ROOT = Path(__file__).resolve().parents[1]


def _readme_test_command() -> str:
    readme = (ROOT / "README.md").read_text()
    m = re.search(r"# 2\. install and run the whole test suite[^\n]*\n([^\n]+)\n", readme)
    assert m, "README has no '# 2. install and run the whole test suite' command"
    return m.group(1).split(". .venv/bin/activate && ", 1)[1]


def test_ci_runs_the_readme_test_command():
    ci = (ROOT / ".ci" / "run").read_text().strip().splitlines()
    assert ci[-1] == _readme_test_command()


def test_every_scenario_has_a_committed_baseline():
    assert "llmsim check scenarios/*.yaml --baseline baselines" in _readme_test_command()
    names = [yaml.safe_load(p.read_text())["name"] for p in sorted((ROOT / "scenarios").glob("*.yaml"))]
    assert names
    missing = [n for n in names if not (ROOT / "baselines" / baseline_file_name(n)).is_file()]
    assert not missing, f"no baseline for {missing}: llmsim check scenarios/*.yaml --baseline baselines --update-baseline"
