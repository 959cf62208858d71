"""``llmsim check``: gate a build on the scenarios' SLOs and on their committed baselines.

Each scenario runs at its fast settings (``check.set`` and ``--set``). It
fails when the fleet is overloaded (``llmsim.load``: its queue grew through
the run, SLO or not) or its load cannot be judged (nothing finished within
the window: a gate must not pass what it did not test), when an SLO it
declares is missed, or when a tracked metric moves beyond its tolerance
against ``DIR/<scenario name>.json`` (see ``report.regression`` for what
counts). Failing is exit code 1, a result
rather than bad input (that stays exit 2), so CI can tell "the fleet got
worse" from "the check is broken". Every file is read and every variant
built before the first run, so a typo costs seconds, not a CI slot.

What a baseline holds, and when it is refused: :mod:`.baseline`.
"""
from __future__ import annotations

import difflib
import math
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, List, Optional, Sequence

import typer
from rich.table import Table

from ..atomic_write import check_writable, write_atomic
from ..errors import LlmsimError
from ..report.diff import flatten
from ..report.junit import Case, Suite, junit_xml
from ..report.regression import Verdict, judge, rounded
from .app import app, checked_engine, kept_if_stopped
from .baseline import baseline_file_name, baseline_keys, fast_settings, read_baseline, write_baseline
from .output import console, fmt
from .progress import simulate_shown
from .rundir import refuse_overwriting_input_files
from .options import one_value_per_key
from .examples import epilog

if TYPE_CHECKING:   # scenarios on first use: `llmsim --help` imports this module
    from ..scenario.ci import CheckSpec
    from ..scenario.schema import Scenario

_STYLE = {"ok": "green", "improved": "green", "new": "yellow", "measured": "yellow", "regressed": "bold red",
          "moved": "bold red", "missing": "bold red"}


@dataclass
class _Job:
    """One scenario to check, with everything known before it runs."""

    path: Path
    scenario: Scenario                  # at its fast settings
    spec: CheckSpec
    baseline_file: Optional[Path]
    baseline: Optional[dict[str, Any]]
    update: bool                        # writing new baselines: moves are shown, not failed
    settings: dict[str, Any] = field(default_factory=dict)   # the fast settings, as the baseline records them
    cases: list[Case] = field(default_factory=list)          # each judged row, passed or failed (--junit)
    confidence: Optional[float] = None  # SLOs judged at this confidence under the error model
    error_model: Any = None
    seconds: float = 0.0                # the run's wall time

    @property
    def failures(self) -> list[str]:
        return [c.failure for c in self.cases if c.failure is not None]

    def judged(self, name: str, failure: Optional[str], detail: str = "") -> None:
        self.cases.append(Case(name, failure, detail))


def _existing_baseline(path: Optional[Path], job: _Job) -> Optional[dict[str, Any]]:
    """The committed baseline, or None when there is none. ``--update-baseline``
    is how a refused baseline is fixed (stale keys after check.metrics changed,
    a bad hand edit, another scenario's file), so there it is replaced, and
    said so, rather than refused."""
    if path is None or not path.is_file():
        return None
    try:
        return read_baseline(path, job.scenario.name, job.path, job.spec, job.settings)
    except LlmsimError as e:
        if not job.update:
            raise
        console.print(f"note: replacing a baseline that would be refused: {e.render()}", markup=False, style="yellow")
        return None


def _prepare(name: str, baseline_dir: Optional[Path], sets: List[str], update: bool) -> _Job:
    from ..scenario.ci import CheckSpec
    from ..scenario.load import load_scenario
    from ..scenario.overlays import load_with_overlays, load_with_variants
    from ..scenario.overrides import parse_assignment
    from ..scenario.variants import ladder_steps

    sc, path = load_scenario(name)
    if any(parse_assignment(a)[0].split(".")[0].split("[")[0] == "check" for a in sets):
        # a --set on the check block itself changes what check runs and tracks: read the block as it
        # leaves it (the file's check.set was taken before, and --set check.set=... did nothing)
        sc, path = load_scenario(name, list(sets))
    spec = sc.check or CheckSpec()
    for step in ladder_steps(sc.variants, sc.ladder)[1:]:
        load_with_variants(path, step.variants)          # a broken ladder fails CI too
    fast = load_with_overlays(path, [("check.set", spec.set)], sets) if spec.set or sets else sc
    bfile = baseline_dir / baseline_file_name(sc.name) if baseline_dir is not None else None
    return _Job(path, fast, spec, bfile, None, update, settings=fast_settings(spec, sets))


def _read_baselines(jobs: Sequence[_Job], baseline_dir: Optional[Path]) -> None:
    """Each job's baseline, before any runs. None at all is not a worse fleet
    but a check not set up for the scenario: bad input, as CI must tell it."""
    for job in jobs:
        bfile = job.baseline_file
        if bfile is not None and bfile.exists() and not bfile.is_file():
            raise LlmsimError("is not a file; the baseline folder holds one <scenario name>.json per scenario",
                              source=bfile)
        if bfile is not None and job.update:
            check_writable(bfile, "--baseline")        # before any run, not after the first
        if bfile is not None and not bfile.is_file() and not job.update:
            raise LlmsimError(f"no baseline for the scenario {job.scenario.name!r} ({job.path}): write it with "
                              f"--baseline {baseline_dir} --update-baseline and commit it", source=bfile)
        job.baseline = _existing_baseline(bfile, job)


def _tracked(job: _Job, results: dict[str, Any]) -> dict[str, Any]:
    flat = flatten(results)
    out = {}
    for i, m in enumerate(baseline_keys(job.spec)):
        where = f"check.metrics[{i}]"      # as the load-time check names it
        if m not in flat:
            raise LlmsimError(_absent(m, flat), source=job.path, key_path=where)
        v = flat[m]
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))):
            raise LlmsimError(f"{m!r} is {v!r}, not a number to hold against a baseline",
                              source=job.path, key_path=where)
        out[m] = v
    return out


def _absent(metric: str, flat: dict[str, Any]) -> str:
    """Why a tracked metric the load accepted is not in this run's results: a
    block written only under a condition (``llmsim.gateway``: a class with a
    rate limit), named with it, since the key itself is spelt right."""
    from ..fields import declared_results, lookup

    parts = metric.split(".")
    for n in range(1, len(parts) + 1):
        f = lookup(".".join(parts[:n]), declared_results() or {})[0]
        if f is not None and f.when is not None and ".".join(parts[:n]) not in flat:
            return (f"{'.'.join(parts[:n])} is written only when {f.when}, and this run's results.json has none; "
                    f"track a metric every run writes")
    near = difflib.get_close_matches(metric, list(flat), n=3)
    hint = f"; did you mean {', '.join(near)}?" if near else " (see a results.json for the keys)"
    return f"{metric!r} is not a key of this run's results.json{hint}"


def _val(v: Any) -> str:
    """A figure as the check compares it: at a baseline's digits, so that one value never reads two ways."""
    return "—" if v is None else fmt(rounded(v))


def _past(value: Optional[float], limit: float, met: bool) -> str:
    """A latency beside its target: as any figure where it meets it, else with the decimals it takes
    to read past it (23.5851 missed by 23.5856 reads 23.5856, not 23.59 against 23.59)."""
    from ..metrics.verdict import ms_past

    if value is None:
        return "no samples"
    # at a baseline's digits, as the metric's own row shows it, then as many more as reading past takes
    return _val(value) if met else ms_past(rounded(value), limit)[:-len(" ms")]


def _pct(rel: Optional[float], tolerance: Optional[float] = None) -> str:
    """A relative move; beyond a tolerance, with the decimals it takes to read beyond it (+5.04 %, not
    +5.0 % against a tolerance of 5 %)."""
    if rel is None:
        return "—"
    if abs(rel) == float("inf"):
        return "from 0"
    for digits in range(1, 5):
        shown = f"{100 * rel:+.{digits}f}"
        if tolerance is None or abs(float(shown)) != round(100 * tolerance, digits):
            break
    return f"{shown}%"


def _slo_rows(results: dict[str, Any], t: Table, job: _Job) -> None:
    from ..metrics.intervals import targets_at_confidence
    from ..metrics.verdict import refused, refused_line, slo_blocks, target_name
    from ..validation.error_model import regime_of_run

    blocks = slo_blocks(results)      # the blocks llmsim run judges
    judged = {}
    if job.confidence is not None:      # each target's one-sided bound under llmsim's error model
        regime = regime_of_run(job.scenario, results)
        judged = {(j["label"], j["key"]): j
                  for j in targets_at_confidence([blocks], regime, job.error_model, job.confidence)}
    for label, block in blocks:
        for key, target in (block.get("targets") or {}).items():
            met = target["met"]
            value, limit = target.get("measured_ms"), target["target_ms"]
            att = target.get("attainment") if value is not None else None
            bound = ""
            if (label, key) in judged:
                j = judged[(label, key)]
                met = j["met"]
                bound = f" (≤ {_past(j['bound_ms'], limit, met)} at {100 * job.confidence:g}%)"
            # a missed target's value with the decimals it takes to read past it, as llmsim run writes it
            measured = _past(value, limit, met or bool(bound))
            name = f"SLO {target_name(label, key)}"     # "SLO" apart from the tracked metrics beside it
            t.add_row(name, f"≤ {limit:,g}", measured + bound,
                      "—" if att is None else f"{100 * att:.1f}% within", "met" if met else "VIOLATED",
                      style=None if met else "bold red")
            got = "no samples" if value is None else f"simulated {measured} ms{bound.replace(' at', ' ms at')}"
            job.judged(name, None if met else f"{name} missed: {got}, target ≤ {limit:,g} ms",
                       f"{got}, target ≤ {limit:,g} ms")
    line = refused_line(results) if blocks else None
    if line:       # the targets read over the requests served: a refused one was served within no SLO
        t.add_row("SLO refused requests", "0", f"{refused(results):,}", "—", "VIOLATED", style="bold red")
        job.judged("SLO refused requests", line, line)


def _load_row(results: dict[str, Any], t: Table, job: _Job) -> None:
    """An overloaded fleet fails whether or not the scenario declares an SLO:
    its percentiles measure a backlog that grew all run, not the fleet; so does one whose load
    cannot be judged (:func:`~simulator.metrics.verdict.load_gate`)."""
    load = (results.get("llmsim") or {}).get("load")
    if not load:
        return
    from ..metrics.load import SHORT_WINDOW, undetermined, unserved_text
    from ..metrics.verdict import load_gate

    over, unjudged = load["overloaded"], undetermined(load)
    # "keeps up, on a short window" passes (metrics.verdict.load_gate says why), but the row says it
    outcome = ("OVERLOADED" if over else "cannot tell" if unjudged
               else SHORT_WINDOW if load["verdict"].startswith(SHORT_WINDOW) else "keeps up")
    # the requests that ended unanswered, by cause: "completed 26.5 of 437.9 req/s" beside "keeps up" read as a
    # contradiction where clients cancelled 94 % of them (autocomplete), which only the JUnit text said
    unserved = unserved_text(load)
    now = f"completed {_val(load.get('completed_rps'))} of {_val(load.get('offered_rps'))} req/s" + (
        f" ({unserved})" if unserved else "")
    t.add_row("load", "keeps up", now, "—", outcome, style="bold red" if over or unjudged else None)
    job.judged("load", load_gate(load, " (the scenario's check.set and --set size the window the check runs)"),
               load["verdict"])


def _verdict_row(v: Verdict, t: Table, job: _Job) -> None:
    text = {"regressed": f"regressed (> {100 * v.tolerance:g}%)", "moved": f"moved (> {100 * v.tolerance:g}%)",
            "improved": "improved: refresh the baseline", "new": "new: not in the baseline",
            "measured": "measured now, no samples in the baseline: refresh it",
            "missing": "no samples now"}.get(v.verdict, v.verdict)
    if v.verdict == "ok" and v.now is None:
        text = "no samples, as in the baseline"
    beyond = v.tolerance if v.verdict in ("regressed", "moved", "improved") else None
    t.add_row(v.metric, _val(v.baseline), _val(v.now), _pct(v.rel, beyond), text, style=_STYLE.get(v.verdict))
    said = (f"{v.metric}: no samples now (baseline {_val(v.baseline)})" if v.verdict == "missing" else
            f"{v.metric} {v.verdict} {_pct(v.rel, beyond)} (baseline {_val(v.baseline)}, now {_val(v.now)}, "
            f"tolerance {100 * v.tolerance:g}%)")
    job.judged(v.metric, said if v.failed and not job.update else None, said)


def _report(job: _Job, results: dict[str, Any], tracked: dict[str, Any], tolerance: float) -> Table:
    from ..metrics.tail_samples import few_samples_note
    from ..metrics.verdict import slo_blocks

    t = Table(title_justify="left")
    for col, justify in (("metric", "left"), ("baseline", "right"), ("now", "right"), ("change", "right"),
                         ("verdict", "left")):
        # on a narrow terminal a name folds onto a second line: cut, median_ttft_ms and median_tpot_ms read alike
        t.add_column(col, justify=justify, overflow="fold" if col == "metric" else "ellipsis")
    _load_row(results, t, job)
    _slo_rows(results, t, job)
    for m, now in tracked.items():
        if job.baseline is None:
            t.add_row(m, "—", _val(now), "—", "no baseline")
            job.judged(m, None, f"{m} {_val(now)} (no baseline)")
            continue
        _verdict_row(judge(m, job.baseline.get(m), now, job.spec.tolerance.get(m, tolerance),
                           in_baseline=m in job.baseline), t, job)
    verdict = "[bold red]FAIL[/]" if job.failures else "[green]PASS[/]"
    t.title = f"{verdict} {job.scenario.name} ({job.path})"
    few = few_samples_note(slo_blocks(results))
    if few:     # a pass on the slowest few requests' value is not one on a tail: said under the table
        t.caption, t.caption_justify = f"note: {few}", "left"
    return t


@contextmanager
def _said_kept(kept: Callable[[], str]) -> Iterator[None]:
    """Bad input found after some runs (a tracked key a run did not write) says what the check had
    already written, as an interruption does."""
    try:
        yield
    except LlmsimError as e:
        raise LlmsimError(f"{e.message}; {kept()}", source=e.source, key_path=e.key_path) from None


@app.command("check", epilog=epilog("check"))
def check(scenarios: List[str] = typer.Argument(..., help="scenario YAML files (e.g. scenarios/*.yaml)"),
          baseline: Optional[Path] = typer.Option(
              None, "--baseline", help="folder of committed baselines, one <scenario name>.json each"),
          update_baseline: bool = typer.Option(False, "--update-baseline",
                                               help="write the baselines from this run (SLOs still checked)"),
          tolerance: float = typer.Option(0.05, "--tolerance", min=0.0,
                                          help="relative move allowed where check.tolerance names none"),
          set_: List[str] = typer.Option([], "--set", help="override a key in every scenario (repeatable)",
                                         callback=one_value_per_key),
          engine: str = typer.Option("fast", "--engine", help="fast (default) or reference"),
          confidence: Optional[float] = typer.Option(
              None, "--confidence", help="an SLO passes only if it holds with this probability under llmsim's "
                                         "error model (at least 0.5, below 1: e.g. 0.9)"),
          junit: Optional[Path] = typer.Option(
              None, "--junit", help="also write the verdicts as a JUnit XML test report (a suite per scenario, "
                                    "a test case per SLO target and tracked metric) for CI systems to show"),
          ) -> None:
    """Run scenarios at their fast settings; exit 1 if an SLO is missed, the fleet is overloaded or its load
    cannot be judged, or a tracked metric regressed."""
    checked_engine(engine)
    if not math.isfinite(tolerance):
        raise LlmsimError(f"expected a finite relative move such as 0.05 (got {tolerance!r}); to stop tracking "
                          "a metric, leave it out of check.metrics", key_path="--tolerance")
    if tolerance >= 1:      # a percentage typed where a fraction goes gates almost nothing: said, not refused
        console.print(f"note: --tolerance {tolerance:g} lets a metric move by {100 * tolerance:,.0f} % before it "
                      f"fails; tolerances are fractions (0.05 for 5 %)", markup=False, style="yellow")
    if update_baseline and baseline is None:
        raise LlmsimError("--update-baseline writes into the --baseline folder: give --baseline DIR")
    if baseline is not None and baseline.exists() and not baseline.is_dir():
        raise LlmsimError("exists and is not a folder; --baseline names the folder of baseline files",
                          source=baseline)
    if baseline is not None and not baseline.exists() and not update_baseline:
        raise LlmsimError("no such folder; --baseline names the folder of committed baselines (write them "
                          "first with --update-baseline)", source=baseline)
    if junit is not None:
        check_writable(junit, "--junit")        # before any run
    model = None
    if confidence is not None:
        from ..metrics.intervals import check_confidence
        from ..validation.error_model import load_error_model

        check_confidence(confidence, gate=True)
        model = load_error_model()
    jobs = [_prepare(s, baseline, set_, update_baseline) for s in scenarios]
    for job in jobs:
        job.confidence, job.error_model = confidence, model
    names: dict[str, Path] = {}
    for job in jobs:
        fname = baseline_file_name(job.scenario.name)
        if fname in names and names[fname].resolve() == job.path.resolve():
            raise LlmsimError("is given twice; list each scenario once", source=job.path)
        if fname in names and baseline is not None:
            raise LlmsimError(f"has the same name as {names[fname]} ({job.scenario.name!r}), so both would "
                              f"share the baseline {fname}; rename one", source=job.path, key_path="name")
        names[fname] = job.path
    _read_baselines(jobs, baseline)
    if junit is not None:
        refuse_overwriting_input_files({"--junit": junit}, [*(job.path for job in jobs),
                                                            *(job.baseline_file for job in jobs if job.baseline_file)])
    failed = []
    written: list[Path] = []

    def kept() -> str:
        return (f"{len(written)} of {len(jobs)} baselines rewritten ({', '.join(map(str, written))}), the others "
                "as they were" if written else "nothing was written")

    with kept_if_stopped(kept), _said_kept(kept):
        for i, job in enumerate(jobs):
            start = time.perf_counter()
            out = simulate_shown(job.scenario, engine, job.path,
                                 label=f"checking {i + 1}/{len(jobs)} {job.scenario.name}")
            job.seconds = time.perf_counter() - start
            tracked = _tracked(job, out.results)
            console.print(_report(job, out.results, tracked, tolerance))
            if update_baseline:
                write_baseline(job.baseline_file, job.scenario.name, job.settings, tracked)
                written.append(job.baseline_file)
                console.print(f"[dim]wrote {job.baseline_file}[/]")
            if job.failures:
                failed.append(job)
    if junit is not None:
        text = junit_xml([Suite(job.scenario.name, str(job.path), job.seconds, job.cases) for job in jobs])
        write_atomic(junit, lambda tmp: tmp.write_text(text, encoding="utf-8"))
        console.print(f"[dim]wrote {junit}[/]")
    if failed:
        console.print(f"[bold red]check failed[/]: {len(failed)} of {len(jobs)} scenarios")
        for job in failed:
            for why in job.failures:
                console.print(f"  {job.scenario.name}: {why}", markup=False)
        from ..metrics.verdict import EXIT_MISSED

        raise typer.Exit(EXIT_MISSED)
    console.print(f"[green]check passed[/]: {len(jobs)} scenario{'s' if len(jobs) != 1 else ''}")
