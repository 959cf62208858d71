"""The case-study pages' wall-time tables are benchmarks/wall_times.py's: the same commands and words.

The figures (seconds, requests, steps, runs, the date and the machine) are
the timing run's and are masked; what is held is that each page shows the
commands the script times, as it would render them, and that the script's
timing of a command reads the work from what the command wrote.
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import generated_section  # noqa: E402
import wall_times  # noqa: E402

_NUMBER = re.compile(r"\d[\d,]*(\.\d+)?")


def _block(table: str) -> list[str]:
    page, _ = wall_times.TABLES[table]
    begin, end = generated_section.markers(wall_times.block_name(table), wall_times.ME)
    text = (ROOT / page).read_text()
    assert begin in text and end in text, f"{page} has no {wall_times.block_name(table)} block"
    return text[text.index(begin) + len(begin):text.index(end)].strip().split("\n")


def _masked(lines: list[str]) -> list[str]:
    return [_NUMBER.sub("#", line) for line in lines if line.startswith("|")]


@pytest.mark.parametrize("table", sorted(wall_times.TABLES))
def test_a_pages_table_is_the_scripts(table):
    shown = _block(table)
    _, rows = wall_times.TABLES[table]
    stand_in = wall_times.render(table, [(12.5, 3 if r.count else None) for r in rows], "a machine", "2000-01-01")
    assert _masked(shown) == _masked(stand_in.split("\n"))
    head = re.escape(f"`{generated_section.command(wall_times.ME, options=[('--only', table), ('--write', True)])}`")
    assert re.fullmatch(rf"Generated \d{{4}}-\d\d-\d\d by {head} on .+\.", shown[0]), shown[0]
    assert "not yet measured" not in shown[0], f"python benchmarks/wall_times.py --only {table} --write"


def test_every_table_names_its_pages_scenario():
    for table, (page, rows) in wall_times.TABLES.items():
        assert all(f"scenarios/{table}.yaml" in r.command for r in rows), table
        assert (ROOT / page).exists()


def test_timing_reads_the_work_from_what_the_command_wrote(tmp_path):
    row = wall_times.Row("llmsim run scenarios/quickcode.yaml --set workload.duration_s=5 -o out/q",
                         "{n} requests", "requests")
    seconds, n = wall_times.measure(row, tmp_path)
    import json

    res = json.loads((tmp_path / "q" / "results.json").read_text())
    assert n == sum(res["llmsim"]["request_status"].values()) >= res["completed"] > 0 and seconds > 0
    plan = wall_times.Row("llmsim plan scenarios/quickcode.yaml --set workload.duration_s=3 "
                          "--vary pools.node.replicas=1..2 --workers 1 -o out/p", "{n} runs", "runs")
    assert wall_times.measure(plan, tmp_path)[1] == 2
