"""A committed baseline: the figures ``llmsim check`` holds a run against.

A baseline holds the tracked metrics, rounded, one per line (small, and a
refresh diffs only where something moved), under the scenario's name and
the fast settings it was written at: figures of another scenario, or of a
run of another size, would be compared as if they were this run's. Every
way a baseline can be wrong is found as it is read, before any run.
"""
from __future__ import annotations

import difflib
import json as _json
import math
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from ..atomic_write import write_atomic
from ..errors import LlmsimError, first_few
from ..report.diff import read_json_object
from ..report.regression import rounded
from .output import console

if TYPE_CHECKING:
    from ..scenario.ci import CheckSpec

__all__ = ["baseline_file_name", "baseline_keys", "fast_settings", "read_baseline", "write_baseline"]


def baseline_file_name(scenario_name: str) -> str:
    return (re.sub(r"[^A-Za-z0-9_.-]+", "-", scenario_name).strip("-.") or "scenario") + ".json"


def baseline_keys(spec: CheckSpec) -> list[str]:
    """The keys of a baseline: the scenario's tracked metrics. A run measures
    them (:func:`_tracked`), ``--update-baseline`` writes them, and a baseline
    is read against them, so all three agree by construction."""
    return list(spec.metrics)


def _check_baseline_keys(path: Path, data: dict[str, Any], expected: Sequence[str]) -> None:
    """A key the scenario does not track is never compared: a baseline of typos
    (or ``{}``) would gate nothing and pass every build."""
    unknown = [k for k in data if k not in expected]
    rewrite = f"expected the scenario's check.metrics: {first_few(expected, 6)}; rewrite it with --update-baseline"
    if unknown:
        k = unknown[0]
        near = difflib.get_close_matches(k, list(expected), n=1)
        hint = f"did you mean {near[0]}? " if near else ""
        if isinstance(data[k], dict):
            hint = f"baselines hold dotted keys ({k}.…), not nested objects; " + hint
        more = f" (nor is {first_few(unknown[1:], 3)})" if len(unknown) > 1 else ""
        raise LlmsimError(f"not a metric this scenario tracks{more}; {hint}{rewrite}", source=path, key_path=k)
    if not data:
        raise LlmsimError(f"names none of the metrics this scenario tracks, so it would gate nothing; {rewrite}",
                          source=path)


def _check_baseline_value(path: Path, key: str, v: Any) -> None:
    """Only numbers compare; NaN is never worse than anything, so it would pass."""
    if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))):
        raise LlmsimError(f"expected a number or null, got {v!r}; baselines hold tracked metrics only "
                          "(rewrite it with --update-baseline)", source=path, key_path=key)
    if isinstance(v, float) and not math.isfinite(v):
        raise LlmsimError(f"expected a finite number or null, got {v!r} (a figure llmsim could not measure is "
                          "written as null; rewrite it with --update-baseline)", source=path, key_path=key)


#: The keys of a baseline file: what it was written for, and the figures.
_HEAD = ("scenario", "settings", "metrics")


def fast_settings(spec: CheckSpec, sets: Sequence[str]) -> dict[str, Any]:
    """The settings a check runs a scenario at, as its baseline records them
    (JSON's spelling, so that a read-back record compares equal)."""
    return _json.loads(_json.dumps({"check.set": spec.set, "--set": list(sets)}, default=str))


def _settings_text(settings: dict[str, Any]) -> str:
    """A record :func:`_check_settings` accepted, as a message names it."""
    return ", ".join([f"check.set {_json.dumps(settings['check.set'])}",
                      *(f"--set {s}" for s in settings.get("--set", ()))])


def _check_settings(path: Path, settings: Any) -> None:
    """A baseline's record of its fast settings, as :func:`fast_settings` writes it: ``check.set`` an
    object of key paths, ``--set`` a list of ``key=value`` texts (a hand edit can make it anything)."""
    shape = 'an object {"check.set": {key.path: value}, "--set": ["key=value", ...]}'
    if not isinstance(settings, dict) or set(settings) != {"check.set", "--set"}:
        raise LlmsimError(f"expected {shape}; rewrite it with --update-baseline", source=path, key_path="settings")
    if not isinstance(settings["check.set"], dict):
        raise LlmsimError(f"expected {shape}; rewrite it with --update-baseline", source=path,
                          key_path="settings.check.set")
    sets = settings["--set"]
    if not isinstance(sets, list) or not all(isinstance(x, str) for x in sets):
        raise LlmsimError(f"expected {shape}; rewrite it with --update-baseline", source=path,
                          key_path="settings.--set")


def _flags(sets: Sequence[str]) -> str:
    return " ".join(f"--set {s}" for s in sets) if sets else "no --set"


def read_baseline(path: Path, name: str, source: Path, spec: CheckSpec, settings: dict[str, Any]) -> dict[str, Any]:
    """The figures of the baseline at ``path``, once it is known to be the
    scenario ``name``'s (from the file ``source``) at the fast ``settings``
    it is checked at. A file of figures alone (an older llmsim's) is read as
    it is, and said so."""
    data = read_json_object(path, what="baseline")
    expected = baseline_keys(spec)
    if not any(k in data for k in _HEAD):     # figures alone: an older llmsim's file, read as it is
        console.print(f"note: {path} holds figures without the scenario and settings they were written for; "
                      f"--update-baseline rewrites it with them", markup=False, style="yellow")
        metrics = data
    else:
        stray = [k for k in data if k not in _HEAD]
        missing = [k for k in _HEAD if k not in data]      # a new file without its metrics among them
        if stray or missing:
            raise LlmsimError(f"{'not a key' if stray else 'missing'} of a baseline, which holds "
                              f"{', '.join(_HEAD)}; rewrite it with --update-baseline", source=path,
                              key_path=(stray or missing)[0])
        metrics = data["metrics"]
        if not isinstance(metrics, dict):
            raise LlmsimError(f"expected an object of tracked figures, got {type(metrics).__name__}", source=path,
                              key_path="metrics")
        _check_settings(path, data["settings"])
        if data["scenario"] != name:
            raise LlmsimError(f"written for the scenario {data['scenario']!r}, not {name!r} "
                              f"({source}): its figures are another fleet's; rewrite it with --update-baseline",
                              source=path, key_path="scenario")
        written = data["settings"]
        if written["check.set"] != settings["check.set"]:
            # the scenario's own run size moved and the baseline was not refreshed with it
            raise LlmsimError(f"written at other fast settings ({_settings_text(written)}) than the scenario's "
                              f"check.set now ({_settings_text({'check.set': settings['check.set']})}): its "
                              f"figures are another run's; rewrite it with --update-baseline", source=path,
                              key_path="settings")
        if written["--set"] != settings["--set"]:
            # a what-if held against the committed figures on purpose, or a run of another size: said, not refused
            console.print(f"note: {path} was written with {_flags(written['--set'])}, this check runs with "
                          f"{_flags(settings['--set'])}: the moves below include theirs", markup=False,
                          style="yellow")
    _check_baseline_keys(path, metrics, expected)
    for k, v in metrics.items():
        _check_baseline_value(path, k, v)
    return metrics


def write_baseline(path: Path, name: str, settings: dict[str, Any], tracked: dict[str, Any]) -> None:
    """The tracked figures, rounded, one per line, under the scenario's name and fast settings."""
    body = {"scenario": name, "settings": settings, "metrics": {m: rounded(v) for m, v in tracked.items()}}
    text = _json.dumps(body, indent=2, allow_nan=False) + "\n"
    write_atomic(path, lambda tmp: tmp.write_text(text))
