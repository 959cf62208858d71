"""``llmsim plan --vary`` choices and sweep points llmsim cannot model are refused, not planned.

A typo'd model, a tp that does not divide the model's heads, a GPU that
does not exist: each ends the command before any run, in one line naming
the choice and why, with nothing written. A fleet that runs but misses its
SLO, or whose model does not fit in its GPUs' memory, stays a result.
"""
from __future__ import annotations

import json

import pytest

import simulator.planning.plan as plan_module
import simulator.planning.sweep as sweep_module
from test_sweep import words, write_sweep, write_tiny_scenario


@pytest.fixture
def no_runs(monkeypatch):
    """Fails the test if any point is simulated: refusals come before the first run."""
    def run_points(*a, **k):
        raise AssertionError("a point ran before the input was refused")

    monkeypatch.setattr(plan_module, "run_points", run_points)
    monkeypatch.setattr(sweep_module, "run_points", run_points)


def refused(r, *fragments: str) -> None:
    assert r.code == 2, r.out + r.err
    assert "Traceback" not in r.err and r.out == ""
    lines = r.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), r.err
    for f in fragments:
        assert f in r.err, (f, r.err)


@pytest.mark.parametrize("args, fragments", [
    (["--vary", "pools.chat.model=llama-3-8b,lama-3-8b"],
     ["(--vary pools.chat.model=lama-3-8b)", "pools[0].model: unknown model 'lama-3-8b'"]),
    (["--vary", "pools.chat.tp=1,3"],
     ["(--vary pools.chat.tp=3)", "pools[0].tp: tp=3 must divide the 32 attention heads of llama-3-8b"]),
    (["--vary", "pools.chat.tp=3,5"], ["(--vary pools.chat.tp=3)", "tp=3 must divide"]),      # every choice bad
    (["--vary", "pools.chat.gpu=h100-sxm,no-such-gpu"],
     ["(--vary pools.chat.gpu=no-such-gpu)", "unknown GPU 'no-such-gpu'"]),
    # only the pairing fails: 3,000 + 2,000 tokens fit llama-3-8b's 8K context, not llama-2-7b's 4K
    (["--vary", "pools.chat.model=llama-3-8b,llama-2-7b", "--vary", "workload.output_tokens.max=600,2000"],
     ["(--vary pools.chat.model=llama-2-7b with --vary workload.output_tokens.max=2000)",
      "exceed llama-2-7b's context"]),
    (["--set", "pools.chat.model=lama-3-8b"], ["(--set pools.chat.model=lama-3-8b)", "unknown model"]),
])
def test_a_choice_llmsim_cannot_model_is_refused_before_any_run(tmp_path, cli, no_runs, args, fragments):
    out = tmp_path / "plan"
    r = cli("plan", write_tiny_scenario(tmp_path), "-o", out, "--vary", "pools.chat.replicas=1..2", *args)
    refused(r, *fragments)
    assert not out.exists()


def test_the_range_ends_are_checked_and_a_folder_is_left_as_it_was(tmp_path, cli, no_runs):
    out = tmp_path / "plan"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    r = cli("plan", write_tiny_scenario(tmp_path), "-o", out, "--vary", "pools.chat.replicas=1..1000000")
    refused(r, "(--vary pools.chat.replicas=1000000)", "llmsim builds at most")
    assert [p.name for p in out.iterdir()] == ["notes.txt"]


@pytest.mark.parametrize("body, fragments", [
    ({"points": [{"pools.chat.tp": 3}, {"pools.chat.tp": 1}]},
     ["sweep.yaml: points[0])", "pools[0].tp: tp=3 must divide"]),
    ({"grid": {"pools.chat.gpu": ["h100-sxm", "no-such-gpu"], "seed": [1, 2]}},
     ["sweep.yaml: grid.pools.chat.gpu = 'no-such-gpu')", "unknown GPU 'no-such-gpu'"]),
])
def test_a_sweep_point_llmsim_cannot_model_is_refused_before_any_run(tmp_path, cli, no_runs, body, fragments):
    out = tmp_path / "out"
    refused(cli("sweep", write_sweep(tmp_path, body), "-o", out), *fragments)
    assert not out.exists()


def test_a_fleet_missing_its_slo_or_its_memory_is_still_a_plan_result(tmp_path, cli):
    """Choices that run but fail, on the SLO (1 ms) or on memory (a 20 % KV budget leaves
    llama-3-8b no room), are infeasible candidates; the plan still succeeds on the rest."""
    out = tmp_path / "plan"
    r = cli("plan", write_tiny_scenario(tmp_path, slo={"ttft_p99_ms": 2000, "tpot_p99_ms": 100}), "-o", out,
            "--vary", "pools.chat.replicas=1..2", "--vary", "slo.ttft_p99_ms=2000,1",
            "--vary", "pools.chat.engine.gpu_memory_utilization=0.9,0.2", "--workers", "1")
    assert r.code == 0, r.err
    assert "best: " in words(r.out)
    plan = json.loads((out / "plan.json").read_text())
    by = {(c["overrides"]["slo.ttft_p99_ms"], c["overrides"]["pools.chat.engine.gpu_memory_utilization"]): c
          for c in plan["candidates"]}
    assert by[(2000, 0.9)]["slo_met"] and plan["best"] == by[(2000, 0.9)]
    assert not by[(1, 0.9)]["slo_met"] and "ttft_p99_ms" in by[(1, 0.9)]["failed_slo"]
    assert not by[(2000, 0.2)]["slo_met"] and "does not fit" in by[(2000, 0.2)]["failed_slo"]


def test_the_default_folder_is_named_as_the_help_says(tmp_path, monkeypatch, cli, no_runs):
    """The folder is named after the scenario's file, not its ``name:`` key, and the help says so."""
    write_tiny_scenario(tmp_path, name="chatbot")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "plan-tiny").write_text("in the way")        # the default folder, taken by a file
    refused(cli("plan", "tiny.yaml", "--vary", "pools.chat.replicas=1..2"), "-o plan-tiny: exists and is not a folder")
    assert "./plan-<scenario file name without .yaml>" in " ".join(cli("plan", "--help").out.replace("│", "").split())
