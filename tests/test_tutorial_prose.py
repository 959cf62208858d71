"""The tutorial's prose reads its figures off the transcripts beside it.

A transcript is checked against what the command prints
(tests/doc_transcripts.py), but the sentence under it is not: when the
figures move and the blocks are rewritten, a figure quoted in the prose
can stay behind, and a reader then finds the page contradicting itself.
"""
from __future__ import annotations

import re

from conftest import REPO_ROOT

PAGE = REPO_ROOT / "docs" / "tutorial.md"


def _plan_rows(text: str) -> dict[str, list[str]]:
    """The first plan table's rows by GPU: its cells as printed."""
    block = text[text.index("$ llmsim plan assistant.yaml"):]
    block = block[:block.index("```")]
    return {cells[0]: cells for line in block.splitlines() if line.startswith("│")
            for cells in [[c.strip() for c in line.strip("│").split("│")]]}


def _ms(cell: str) -> str:
    """A cell in whole milliseconds, as the prose rounds it (116.5 reads 117)."""
    return f"{int(float(cell.replace(',', '')) + 0.5)} ms"


def test_the_plan_paragraph_quotes_the_plan_table():
    text = PAGE.read_text()
    rows = _plan_rows(text)
    after = text[text.index("For each GPU kind the plan finds"):]
    prose = " ".join(after[:after.index("\n\n")].split())
    a100, l40s = rows["a100-sxm-80gb"], rows["l40s"]
    ttft, tpot = 6, 7                                   # columns ttft_p99_ms, tpot_p99_ms
    assert f"six A100s still stream at {_ms(a100[tpot])}" in prose
    assert f"six L40S at {_ms(l40s[tpot])}" in prose
    first_token = float(l40s[ttft].replace(",", "")) / 1000
    assert re.search(rf"p99 first token, {first_token:.1f} s\b", prose), prose


def test_the_interval_paragraph_quotes_the_runs_interval():
    text = PAGE.read_text()
    block = text[text.index("$ llmsim run assistant.yaml -o out/assistant"):]
    block = block[:block.index("```")]
    (row,) = [line for line in block.splitlines() if line.startswith("│") and "tpot_p99_ms" in line]
    high = float(row.strip("│").split("│")[4].split("–")[1].replace(",", ""))   # the interval column
    after = text[text.index("The last table is a warning worth reading"):]
    prose = " ".join(after[:after.index("\n\n")].split())
    assert f"p99 reaches {high:.1f} ms" in prose, prose
