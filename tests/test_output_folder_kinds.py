"""``-o`` never mixes two commands' outputs in one folder.

A run's, a ladder's, a plan's and a sweep's folder each get one report.html,
drawn from the file that marks the folder (results.json, ladder.json,
plan.json, the sweep table). A plan or sweep written into another command's
folder replaced its page and left ``llmsim report`` drawing whichever file
came first. Each command now refuses, before any run, a folder holding
another's output, in one line naming what the folder holds; a plan's or
sweep's own folder stays resumable. A plan or sweep never replaces a file
it did not write (a report.html in a folder it did not make), as ``run -o
--overwrite`` never does; other files stay beside its own.
"""
from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from test_sweep import write_sweep, write_tiny_scenario, words
from test_report_bad_folder import _snapshot

from simulator.cli.rundir import output_dir, output_folder
from simulator.errors import LlmsimError

#: A file marking each kind of llmsim output folder, as the command writes it.
MARKERS = {"run": "results.json", "ladder": "ladder.json", "plan": "plan.json", "sweep": "sweep.parquet",
           "sweep-csv": "sweep.csv"}
#: The kinds each command writes, so accepts in its -o folder (a ladder is ``llmsim run --ladder``).
OWN = {"run": {"run", "ladder"}, "plan": {"plan"}, "sweep": {"sweep", "sweep-csv"}}
VARY = ("--vary", "pools.chat.replicas=1..2", "--workers", "1")
#: An SLO the tiny scenario meets, so a plan exits 0.
LOOSE = {"ttft_p99_ms": 5000, "tpot_p99_ms": 100}


def _command(cli, command: str, here: Path, out: Path, *extra: str):
    """``llmsim run``, ``plan`` or ``sweep`` of the tiny scenario into ``out``."""
    if command == "sweep":
        return cli("sweep", write_sweep(here, {"grid": {"pools.chat.replicas": [1, 2]}}), "-o", out, "--workers",
                   "1", *extra)
    scenario = write_tiny_scenario(here, slo=LOOSE)
    if command == "plan":
        return cli("plan", scenario, *VARY, "-o", out, *extra)
    return cli("run", scenario, "-o", out, "--exit-zero", *extra)


def _refused_one_line(r, out: Path, *fragments: str) -> str:
    assert r.code == 2, (r.code, r.out, r.err)
    assert "Traceback" not in r.err and not r.out.strip(), r.err
    lines = r.err.strip().splitlines()
    assert len(lines) == 1, r.err
    assert lines[0].startswith(f"error: -o {out}: "), lines[0]
    for f in fragments:
        assert f in lines[0], (f, lines[0])
    return lines[0]


@pytest.mark.parametrize("command, held, overwrite", [
    (command, held, overwrite) for command in OWN for held in sorted(MARKERS) if held not in OWN[command]
    for overwrite in ([False, True] if command == "run" else [False])])
def test_another_commands_folder_is_refused_before_any_run(tmp_path, cli, command, held, overwrite):
    out = tmp_path / "out"
    out.mkdir()
    (out / MARKERS[held]).write_text("{}")
    (out / "report.html").write_text("the other command's page")
    before = _snapshot(out)
    r = _command(cli, command, tmp_path, out, *(["--overwrite"] if overwrite else []))
    _refused_one_line(r, out, f"holds a {held.split('-')[0]}'s {MARKERS[held]}", f"llmsim {command}",
                      "name another folder")
    assert _snapshot(out) == before, "the folder changed"


def test_the_reported_repro_a_plan_into_a_run_folder(tmp_path, cli):
    """llmsim run -o out0, then plan -o out0: refused, and the run's page and files stay the run's."""
    scenario = write_tiny_scenario(tmp_path, slo=LOOSE)
    out = tmp_path / "out0"
    assert cli("run", scenario, "-o", out, "--exit-zero").code == 0
    before = _snapshot(out)
    line = _refused_one_line(cli("plan", scenario, *VARY, "-o", out), out)
    assert line == (f"error: -o {out}: the folder holds a run's results.json, which llmsim plan does not write "
                    f"beside: name another folder (a new one, or an earlier plan's to resume that plan)")
    sweep = write_sweep(tmp_path, {"grid": {"pools.chat.replicas": [1, 2]}})
    _refused_one_line(cli("sweep", sweep, "-o", out, "--workers", "1"), out, "a run's results.json")
    assert _snapshot(out) == before
    assert cli("report", out / "results.json").code == 0
    assert "<title>llmsim run: tiny</title>" in (out / "report.html").read_text()


@pytest.mark.parametrize("command, files", [("plan", ["report.html"]), ("plan", ["pareto.png", "report.html"]),
                                            ("sweep", ["report.html"])])
def test_a_file_the_command_would_replace_is_refused(tmp_path, cli, command, files):
    """A report.html (or pareto.png) in a folder no plan or sweep wrote is someone else's: never replaced."""
    out = tmp_path / "project"
    out.mkdir()
    for name in files:
        (out / name).write_text("mine")
    (out / "notes.txt").write_text("mine")
    r = _command(cli, command, tmp_path, out)
    _refused_one_line(r, out, f"holds {', '.join(files)} but no earlier {command}", f"llmsim {command} would replace",
                      "name another folder")
    assert _snapshot(out) == {name: b"mine" for name in [*files, "notes.txt"]}


@pytest.mark.parametrize("command, name", [("plan", "plan.json"), ("plan", "report.html"), ("sweep", "sweep.csv")])
def test_a_folder_under_a_file_name_the_command_writes_is_refused_before_any_run(tmp_path, cli, command, name):
    """A folder named plan.json stopped a plan at its last write, after every run."""
    out = tmp_path / "project"
    (out / name).mkdir(parents=True)
    r = _command(cli, command, tmp_path, out)
    _refused_one_line(r, out, f"{name} is a folder where llmsim {command} writes a file of that name")
    assert not (out / "points").exists() and sorted(p.name for p in out.iterdir()) == [name]


def test_a_broken_link_named_like_a_file_the_plan_writes_is_not_replaced(tmp_path, cli):
    out = tmp_path / "project"
    out.mkdir()
    (out / "report.html").symlink_to(tmp_path / "gone.html")
    _refused_one_line(_command(cli, "plan", tmp_path, out), out, "holds report.html but no earlier plan")
    assert (out / "report.html").is_symlink()


@pytest.mark.parametrize("command", ["plan", "sweep"])
def test_other_files_stay_beside_a_plans_or_sweeps(tmp_path, cli, command):
    """A plan or sweep adds its files and removes none: a folder of notes keeps them."""
    out = tmp_path / "project"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    r = _command(cli, command, tmp_path, out)
    assert r.code == 0, r.err
    assert (out / "notes.txt").read_text() == "mine" and (out / "report.html").is_file()


@pytest.mark.parametrize("command", ["plan", "sweep"])
def test_an_empty_folder_and_a_new_one_are_written(tmp_path, cli, command):
    (tmp_path / "empty").mkdir()
    for out in (tmp_path / "empty", tmp_path / "new" / "sub"):
        r = _command(cli, command, tmp_path, out)
        assert r.code == 0, r.err
        assert (out / "report.html").is_file()


def test_a_plan_resumes_its_own_folder_and_one_an_interrupted_plan_left(tmp_path, cli):
    """An earlier plan's folder, and one holding only the points a stopped plan kept, reuse its runs."""
    out = tmp_path / "plan"
    assert _command(cli, "plan", tmp_path, out).code == 0
    points = sorted((out / "points").iterdir())
    (out / "notes.txt").write_text("kept beside the plan")     # a user's file in a plan's folder is no reason
    assert _command(cli, "plan", tmp_path, out).code == 0
    assert sorted((out / "points").iterdir()) == points
    for name in ("plan.json", "pareto.png", "report.html"):
        (out / name).unlink()
    stamps = {p.name: p.stat().st_mtime_ns for p in points}
    r = _command(cli, "plan", tmp_path, out)
    assert r.code == 0, r.err
    assert {p.name: p.stat().st_mtime_ns for p in (out / "points").iterdir()} == stamps   # reused, not rerun
    assert (out / "plan.json").is_file() and (out / "notes.txt").read_text() == "kept beside the plan"


def test_a_sweep_resumes_its_own_folder(tmp_path, cli):
    out = tmp_path / "sweep"
    assert _command(cli, "sweep", tmp_path, out).code == 0
    r = _command(cli, "sweep", tmp_path, out)
    assert r.code == 0, r.err
    assert "2 rows (2 reused" in words(r.out)


def test_a_report_of_a_folder_two_commands_wrote_into_is_refused(tmp_path, cli):
    """A folder the old -o left mixed: no page picked by precedence, and none written."""
    scenario = write_tiny_scenario(tmp_path, slo=LOOSE)
    out = tmp_path / "out0"
    assert cli("run", scenario, "-o", out, "--exit-zero").code == 0
    assert cli("plan", scenario, *VARY, "-o", tmp_path / "plan").code == 0
    (out / "plan.json").write_bytes((tmp_path / "plan" / "plan.json").read_bytes())
    (out / "report.html").unlink()
    for named in (out, out / "results.json", out / "plan.json"):
        r = cli("report", named)
        assert r.code == 2 and "Traceback" not in r.err, r.err
        assert r.err.strip() == (f"error: {out}: holds the output of more than one command (a run's results.json "
                                 f"and a plan's plan.json), and a folder has one page; move each command's files "
                                 f"to a folder of its own")
    assert not (out / "report.html").exists()


# --- the rule, over every mix of files a folder can hold ------------------------------------------------------

#: Files a folder may hold besides the markers: the points store, a user's notes, and files with the names a
#: plan or sweep writes (report.html both, pareto.png a plan).
OTHERS = {"points": "points", "notes": "notes.txt", "page": "report.html", "pareto": "pareto.png"}
CONTENTS = sorted(MARKERS) + sorted(OTHERS)
#: The files each command writes besides its marker (what plan.py and sweep.py pass output_dir).
WRITES = {"plan": ("plan.json", "pareto.png", "report.html"), "sweep": ("sweep.parquet", "sweep.csv", "report.html")}


def _fill(folder: Path, held: set[str]) -> None:
    folder.mkdir()
    for item in held:
        if item == "points":
            (folder / "points").mkdir()
            (folder / "points" / "0123456789abcdef.json").write_text("{}")
        else:
            (folder / {**MARKERS, **OTHERS}[item]).write_text("{}")


def _kinds(held: set[str]) -> set[str]:
    return {h for h in held if h in MARKERS}


@settings(max_examples=60, deadline=None)
@given(held=st.sets(st.sampled_from(CONTENTS)), command=st.sampled_from(["plan", "sweep"]))
def test_a_plan_or_sweep_takes_a_folder_holding_no_other_commands_output_and_replaces_none_of_its_files(held,
                                                                                                         command):
    """Accepted exactly when the folder holds no other command's output, and either an earlier run of this
    command's (its marker or its points) or nothing the command would replace; a refusal names another
    command's file where there is one, else the file that would be replaced."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out"
        _fill(out, held)
        others = _kinds(held) - OWN[command]
        resumable = bool(_kinds(held) & OWN[command]) or "points" in held
        taken = {h for h in held if OTHERS.get(h) in WRITES[command]}
        try:
            got = output_dir(str(out), "unused", WRITES[command], (), command=command)
        except LlmsimError as e:
            assert others or (taken and not resumable), (held, e.render())
            named = [MARKERS[k] for k in others] if others else [OTHERS[k] for k in taken]
            assert any(name in e.message for name in named), e.render()
            assert "\n" not in e.render()
        else:
            assert not others and (resumable or not taken), held
            assert got == out
        assert _contents(out) == held


@settings(max_examples=40, deadline=None)
@given(held=st.sets(st.sampled_from(CONTENTS), min_size=1), overwrite=st.booleans())
def test_a_run_never_takes_a_plans_or_sweeps_folder(held, overwrite):
    """With or without --overwrite; the folder is left as it was."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out"
        _fill(out, held)
        others = _kinds(held) - OWN["run"]
        try:
            with output_folder(out, overwrite=overwrite):
                pass
        except LlmsimError as e:
            if others:
                assert "llmsim run does not write beside or replace" in e.message, e.render()
            assert _contents(out) == held
        else:
            assert overwrite and not others, held

def _contents(folder: Path) -> set[str]:
    names = {p.name for p in folder.iterdir()}
    return {k for k, name in {**MARKERS, **OTHERS}.items() if name in names}
