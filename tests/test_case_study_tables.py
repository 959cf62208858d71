"""The case studies' generated tables are what benchmarks/case_studies.py renders from their commands.

Every block renders at smoke size (each workload cut to seconds where it
is built, as tests/test_doc_commands.py cuts them, to a window of its own:
:data:`TABLE_SECONDS`) and the page's block
must equal that rendering with the figures masked: the same rows,
columns, commands and words, so a table edited by hand, a row dropped or
a command changed fails here. The figures of one row pair are compared
whole at full size (QuickCode's "before", seconds); every figure is
compared by ``python benchmarks/case_studies.py`` (exit 1 on a
difference; ``--write`` regenerates the blocks).
"""
from __future__ import annotations

import copy
import os
import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import case_studies as cs  # noqa: E402
from test_doc_commands import figures_unrendered, smoke_sized  # noqa: E402

# a figure's thousands separators, not the comma after it ("at 56, 12" and "at —, —" mask alike)
_FIGURE = re.compile(r"\$?\d(?:[\d,]*\d)?(\.\d+)?|—|\b(met|missed)\b")


def masked(text: str) -> str:
    """The block with every figure and verdict replaced, except in commands (code spans, indented lines,
    fenced blocks): what does not depend on the run's size."""
    lines, fenced = [], False
    for line in text.split("\n"):
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and not line.startswith("    "):
            parts = line.split("`")
            parts[::2] = [_FIGURE.sub("#", s) for s in parts[::2]]
            line = "`".join(parts)
        lines.append(line)
    return "\n".join(lines)


#: The window the blocks render from, larger than the pages' commands' smoke size: a table formats every
#: figure of its runs, and in 2 s (1,000 arrivals) ttft-program's and llama-405b-pp's runs have some of
#: them empty.
TABLE_SECONDS, TABLE_ARRIVALS = 4.0, 2000


@pytest.fixture(scope="module")
def smoke_runs(tmp_path_factory):
    """One runner for every block (blocks share commands, each runs once)."""
    return cs.Runner(tmp_path_factory.mktemp("case-studies"))


@pytest.fixture
def smoke_runner(smoke_runs, monkeypatch):
    """The shared runner with each workload cut to :data:`TABLE_SECONDS` where
    it is built and its figures not drawn, as tests/test_doc_commands.py has
    them, and each profile's YAML parsed once (every run reads the same ones)."""
    import simulator.profiles.loader as loader
    import simulator.runner as runner

    real_source, real_parse = runner.make_source, loader.parse_yaml
    parsed = smoke_runs.__dict__.setdefault("parsed", {})

    def small(wl, seed, base, subset=None):
        return real_source(smoke_sized(wl, TABLE_SECONDS, TABLE_ARRIVALS), seed, base, subset)

    def parse_once(text: str):
        if text not in parsed:
            parsed[text] = real_parse(text)
        return copy.deepcopy(parsed[text])

    monkeypatch.setattr(runner, "make_source", small)
    monkeypatch.setattr(loader, "parse_yaml", parse_once)
    figures_unrendered(monkeypatch)     # a plan's Pareto chart: a table reads its plan.json
    return smoke_runs


def test_every_block_is_on_its_page():
    for block in cs.BLOCKS:
        assert cs.shown(block).strip(), block.name


@pytest.mark.parametrize("block", cs.BLOCKS, ids=[b.name for b in cs.BLOCKS])
def test_the_pages_block_is_what_the_generator_renders(block, smoke_runner):
    assert masked(cs.shown(block)) == masked(block.render(smoke_runner)), \
        f"{block.page.name}: block {block.name} is not what {cs.ME} renders; rewrite it with " \
        f"python {cs.ME} --only {block.name} --write"


def test_quickcode_before_rows_are_what_their_commands_print(tmp_path):
    """At full size: the static "before" on vLLM's CPU time and on the generic engine (about 3 s)."""
    before = [run for run in cs.STACK_RUNS if run[0] == "4. QuickCode" and run[2].startswith("before")]
    assert len(before) == 1
    page = cs.shown(next(b for b in cs.BLOCKS if b.name == "case-study-stacks"))
    for row in cs.stack_rows(cs.Runner(tmp_path), before):
        assert "| " + " | ".join(row) + " |" in page.split("\n"), row


def test_masking_keeps_what_a_table_says():
    assert masked("| 1/4 | 9 (36) | 41.2 | 9.733 | met | `--set seed=2` |") == \
        masked("| 1/4 | 9 (36) | 0.50 | — | missed | `--set seed=2` |")
    assert masked("| int8 | 1 |") != masked("| tgi | 1 |")
    assert masked("| a | `--set pools.x.replicas=8` |") != masked("| a | `--set pools.x.replicas=9` |")
    assert masked("    llmsim run s.yaml --set seed=2") != masked("    llmsim run s.yaml --set seed=3")
    assert masked("```\nllmsim plan s.yaml \\\n  --vary x=2..24\n```\n12 nodes") != \
        masked("```\nllmsim plan s.yaml \\\n  --vary x=2..30\n```\n12 nodes")


def test_a_fenced_command_is_the_command_that_runs():
    """A long command shown over several lines joins back into the one the Runner runs."""
    lines = cs.shell(cs.DAU_GPU_PLAN).split("\n")
    assert lines[0] == lines[-1] == "```" and len(lines) > 3
    assert " ".join(line.strip().removesuffix("\\").strip() for line in lines[1:-1]) == cs.DAU_GPU_PLAN


def test_a_kept_run_is_redone_once_its_scenario_changes(tmp_path, monkeypatch):
    """--keep reuses a run by its command and the digests of the scenario it
    names and of llmsim's code, so an edited scenario is simulated again."""
    (tmp_path / "scenarios").mkdir()
    scenario = tmp_path / "scenarios" / "x.yaml"
    scenario.write_text("replicas: 14\n")
    monkeypatch.setattr(cs, "ROOT", tmp_path)
    command = "llmsim run scenarios/x.yaml --set seed=2"
    before = cs.Runner._key(command, command.split())
    assert cs.Runner._key(command, command.split()) == before
    scenario.write_text("replicas: 15\n")
    os.utime(scenario, ns=(1, 1))     # a new mtime as well as new bytes
    assert cs.Runner._key(command, command.split()) != before
    assert cs.Runner._key(command + " --variant y", (command + " --variant y").split()) != before
