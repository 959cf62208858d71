"""The tables a user reads a run by count its stranded requests beside the shed and the cancelled.

A stranded request (preempted after streaming, its readmission never fitting the KV pool) is neither shed
nor cancelled, so a class row or a ladder step without its column does not add up to its requests. The run
is the results-fields test's: gpt-oss-120b on one H100, two requests, the second stranded.
"""
from __future__ import annotations

import json
import re

import pytest
from rich.console import Console

from test_results_fields import _stranded

from simulator.cli.ladder import ladder_table
from simulator.report.fleet_summary import classes_table
from simulator.report.ladder import ladder_row
from simulator.report.page import _ladder_body
from simulator.report.page_parts import classes_table as page_classes_table


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> dict:
    return _stranded(tmp_path_factory.mktemp("stranded"))


def _cells(html: str, row: str) -> list[str]:
    """The cells of the page table's row that begins with ``row``, after the header's."""
    rows = re.findall(r"<tr>(.*?)</tr>", html, re.S)
    heads = re.findall(r"<th[^>]*>(.*?)</th>", rows[0])
    cells = next(re.findall(r"<td[^>]*>(.*?)</td>", r) for r in rows if re.search(rf"<td[^>]*>{row}</td>", r))
    return list(zip(heads[len(heads) - len(cells):], cells))


def _terminal(table) -> dict[str, str]:
    console = Console(width=300, record=True)
    console.print(table)
    lines = [ln for ln in console.export_text().splitlines() if "│" in ln or "┃" in ln]
    heads = [h.strip() for h in lines[0].strip("┃ ").split("┃")]
    return {h: v.strip() for h, v in zip(heads, lines[1].strip("│ ").split("│"))}


def _ladder_terminal(rows: list[dict]) -> tuple[str, str]:
    """The ladder table's text and its first step's last cell (its headers wrap)."""
    console = Console(width=300, record=True)
    console.print(ladder_table("ladder", rows))
    text = console.export_text()
    return text, next(ln for ln in text.splitlines() if "│" in ln).strip("│ ").split("│")[-1].strip()


def test_the_class_tables_count_the_stranded_request(results):
    """Both class tables showed chat as 1 completed, 0 shed, 0 cancelled of its 2 requests."""
    llmsim = results["llmsim"]
    page = dict(_cells(page_classes_table(llmsim), "chat"))
    assert [page[h] for h in ("completed", "rejected", "cancelled", "stranded")] == ["1", "0", "0", "1"]
    terminal = _terminal(classes_table(llmsim))
    assert [terminal[h] for h in ("done", "rejected", "cancel", "stranded")] == ["1", "0", "0", "1"]
    whole = {**llmsim, "classes": {n: {k: v for k, v in c.items() if k != "stranded"}
                                   for n, c in llmsim["classes"].items()}}
    assert "stranded" not in page_classes_table(whole) and "stranded" not in _terminal(classes_table(whole))


def test_the_ladder_counts_the_stranded_request(results, tmp_path):
    """The ladder's row, its terminal table and its page showed the step as 1 completed, 0 rejected,
    0 cancelled."""
    row = ladder_row("base", [], results, [])
    assert (row["completed"], row["rejected"], row["cancelled"], row["stranded"]) == (1, 0, 0, 1)
    text, cell = _ladder_terminal([row])
    assert "stranded" in text and cell == "0 / 0 / 1"
    (tmp_path / "ladder.json").write_text(json.dumps({"scenario": "stranded", "ladder": "each", "steps": [row]}))
    assert dict(_cells(_ladder_body(tmp_path)[1], "base"))["stranded"] == "1"
    whole = {**row, "stranded": 0}
    text, cell = _ladder_terminal([whole])
    assert "stranded" not in text and cell == "0 / 0"
    (tmp_path / "ladder.json").write_text(json.dumps({"scenario": "stranded", "ladder": "each", "steps": [whole]}))
    assert "stranded" not in dict(_cells(_ladder_body(tmp_path)[1], "base"))


def test_a_class_beside_its_refused_request_misses_its_slo(results):
    """A class's ✓ counted only the requests it served: chat, its second request stranded, read met where
    the fleet's verdict (slo_met) did not. Its block counts the refusal and both tables mark it ✗."""
    from simulator.report.summary_format import class_verdict

    chat = results["llmsim"]["classes"]["chat"]
    assert chat["refused"] == 1
    met = {**chat, "slo": {"met": True, "targets": {}}, "slo_declared": True}
    assert class_verdict(met, "✓", "✗") == "✗"
    assert class_verdict({k: v for k, v in met.items() if k != "refused"}, "✓", "✗") == "✓"
