"""``llmsim report`` refuses a plan.json, ladder.json or sweep table lacking what its page is drawn from.

``{}`` as plan.json used to draw "llmsim plan: None … no fleet of those
searched meets the SLO", a verdict nothing computed; ``{}`` as ladder.json
and a header-only sweep.csv drew pages as well. The keys and columns a page
cannot be drawn without are now required (run_folder's shapes), refused in
one line naming the file and the key, exit 2, with no report.html written;
what llmsim writes, and what older versions wrote, still draws.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Callable

import pandas as pd
import pytest
from hypothesis import given, settings, strategies as st

import test_report_bad_folder
from test_report_bad_folder import _drop, _edit_json, _edit_sweep, _put, _refused, _set, _sweep_as_csv

from simulator.errors import LlmsimError
from simulator.report.run_folder import check_ladder, check_plan


#: The ladder, plan and sweep folders that module's tests corrupt, written here once for this module.
made_folders = test_report_bad_folder.made_folders


def _copy(made: dict[str, Path], kind: str, to: Path) -> Path:
    folder = to / kind
    shutil.copytree(made[kind], folder)
    return folder


def _foreign_sweep(columns: dict) -> Callable[[Path], None]:
    def edit(folder: Path) -> None:
        (folder / "sweep.parquet").unlink()
        pd.DataFrame(columns).to_parquet(folder / "sweep.parquet", index=False)
    return edit


# (case, which folder, edit, the file named, the key or column named (None: the file alone), words)
CASES = [
    ("plan-empty-object", "plan", _put("plan.json", "{}\n"), "plan.json", "scenario", "missing; expected text"),
    ("plan-no-scenario", "plan", _edit_json("plan.json", _drop("scenario")), "plan.json", "scenario", "missing"),
    ("plan-scenario-null", "plan", _edit_json("plan.json", _set("scenario", None)), "plan.json", "scenario",
     "expected text, got null"),
    ("plan-no-best", "plan", _edit_json("plan.json", _drop("best")), "plan.json", "best", "missing"),
    ("plan-no-candidates", "plan", _edit_json("plan.json", _drop("candidates")), "plan.json", "candidates",
     "missing; expected a list of one candidate or more"),
    ("plan-candidates-empty", "plan", _edit_json("plan.json", _set("candidates", [])), "plan.json", "candidates",
     "got an empty list"),
    ("plan-candidates-null", "plan", _edit_json("plan.json", _set("candidates", None)), "plan.json", "candidates",
     "got null"),
    ("plan-candidate-no-overrides", "plan", _edit_json("plan.json", lambda d: d["candidates"][0].pop("overrides")),
     "plan.json", "candidates[0].overrides", "missing"),
    ("plan-candidate-no-verdict", "plan", _edit_json("plan.json", lambda d: d["candidates"][0].pop("slo_met")),
     "plan.json", "candidates[0].slo_met", "missing"),
    ("ladder-empty-object", "ladder", _put("ladder.json", "{}\n"), "ladder.json", "steps",
     "missing; expected a list of one step or more"),
    ("ladder-steps-empty", "ladder", _edit_json("ladder.json", _set("steps", [])), "ladder.json", "steps",
     "got an empty list"),
    ("ladder-no-scenario", "ladder", _edit_json("ladder.json", _drop("scenario")), "ladder.json", "scenario",
     "missing"),
    ("ladder-no-mode", "ladder", _edit_json("ladder.json", _drop("ladder")), "ladder.json", "ladder", "missing"),
    ("ladder-step-no-verdict", "ladder", _edit_json("ladder.json", lambda d: d["steps"][1].pop("slo_met")),
     "ladder.json", "steps[1].slo_met", "missing"),
    ("sweep-header-only-csv", "sweep", _sweep_as_csv("a,b\n"), "sweep.csv", None, "holds no rows"),
    ("sweep-foreign-csv", "sweep", _sweep_as_csv("a,b\n1,2\n"), "sweep.csv", "error", "missing column (found: a, b)"),
    ("sweep-no-rows", "sweep", _edit_sweep(lambda df: df.iloc[:0]), "sweep.parquet", None, "holds no rows"),
    ("sweep-no-error", "sweep", _edit_sweep(lambda df: df.drop(columns=["error"])), "sweep.parquet", "error",
     "missing column"),
    *((f"sweep-no-{col}", "sweep", _edit_sweep(lambda df, col=col: df.drop(columns=[col])), "sweep.parquet", col,
       "for every point that ran") for col in ("slo_met", "monthly_usd", "ttft_p99_ms")),
]


@pytest.mark.parametrize("case, kind, edit, name, key, words", CASES, ids=[c[0] for c in CASES])
def test_a_file_lacking_what_its_page_reads_is_refused_and_no_page_written(made_folders, tmp_path, cli, case,
                                                                           kind, edit, name, key, words):
    folder = _copy(made_folders, kind, tmp_path)
    (folder / "report.html").unlink()
    edit(folder)
    _refused(cli, folder, name, key, words)
    assert not (folder / "report.html").exists()


@pytest.mark.parametrize("name, text, expected", [
    ("plan.json", "{}\n", "scenario: missing; expected text (the report shows it)"),
    ("ladder.json", "{}\n", "steps: missing; expected a list of one step or more (the report shows it)"),
    ("sweep.csv", "a,b\n", "holds no rows, and the page draws one per point that finished (a sweep stopped before "
                           "its first leaves such a table); rerun llmsim sweep to run its points"),
])
def test_the_reported_repro_an_empty_file_named_by_itself(tmp_path, cli_subprocess, name, text, expected):
    """``llmsim report D/plan.json`` in the console script's own process: one line, exit 2, no page."""
    (tmp_path / name).write_text(text)
    r = cli_subprocess("report", tmp_path / name)
    assert r.code == 2 and "Traceback" not in r.err, r.err
    assert r.err.strip() == f"error: {tmp_path / name}: {expected}"
    assert sorted(p.name for p in tmp_path.iterdir()) == [name]


@pytest.mark.parametrize("case, kind, edit", [
    # a plan.json from before probes were kept: the chart is drawn from its candidates
    ("plan-without-probes", "plan", _edit_json("plan.json", _drop("probes"))),
    # no fleet met the SLO
    ("plan-best-null", "plan", _edit_json("plan.json", lambda d: [d.update(best=None), [
        c.update(slo_met=False) for c in d["candidates"]]])),
    # the search block is shown as written, null where a key is absent
    ("plan-without-search-block", "plan", _edit_json("plan.json", lambda d: [d.pop(k) for k in (
        "variants", "set", "mode", "searched", "seeds", "rank_by")])),
    # a ladder of a scenario without an SLO
    ("ladder-no-slo", "ladder", _edit_json("ladder.json", lambda d: [s.update(slo_met=None) for s in d["steps"]])),
    # every point of the sweep failed to run: the table holds its overrides and errors alone
    ("sweep-every-point-failed", "sweep", _foreign_sweep({"pools.main.replicas": [1, 2],
                                                          "error": ["does not fit", "does not fit"],
                                                          "wall_time_s": [0.01, 0.01]})),
    # some points failed: their rows' figures are empty
    ("sweep-some-points-failed", "sweep", _edit_sweep(lambda df: df.assign(
        error=["does not fit"] + [None] * (len(df) - 1)))),
    # the table written without pyarrow
    ("sweep-as-csv", "sweep", lambda f: (pd.read_parquet(f / "sweep.parquet").to_csv(f / "sweep.csv", index=False),
                                         (f / "sweep.parquet").unlink())),
])
def test_what_llmsim_writes_is_still_drawn(made_folders, tmp_path, cli, case, kind, edit):
    folder = _copy(made_folders, kind, tmp_path)
    (folder / "report.html").unlink()
    edit(folder)
    r = cli("report", folder)
    assert r.code == 0, r.err
    assert (folder / "report.html").is_file()


#: The top-level keys each page cannot be drawn without, in the order they are refused.
NEEDED = {"plan": ("scenario", "best", "candidates"), "ladder": ("steps", "scenario", "ladder")}


@pytest.fixture(scope="module")
def written(made_folders) -> dict[str, dict]:
    return {"plan": json.loads((made_folders["plan"] / "plan.json").read_text()),
            "ladder": json.loads((made_folders["ladder"] / "ladder.json").read_text())}


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_dropping_keys_is_refused_exactly_when_a_needed_one_goes(written, data):
    """However many top-level keys a plan.json or ladder.json loses, the check refuses it exactly when one
    the page cannot draw without is among them, and names the first such."""
    kind = data.draw(st.sampled_from(sorted(NEEDED)))
    doc = written[kind]
    gone = data.draw(st.sets(st.sampled_from(sorted(doc))))
    trimmed = {k: v for k, v in doc.items() if k not in gone}
    needed_gone = [k for k in NEEDED[kind] if k in gone]
    check = check_plan if kind == "plan" else check_ladder
    try:
        check(trimmed, Path(f"{kind}.json"))
    except LlmsimError as e:
        assert needed_gone and e.key_path == needed_gone[0], (gone, e.render())
        assert e.message.startswith("missing; expected"), e.render()
    else:
        assert not needed_gone, gone
