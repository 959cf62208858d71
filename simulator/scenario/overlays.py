"""Loading a scenario with overlays from its own file applied: variants, ``check.set``.

An overlay is ``--set`` assignments written in the file, so it goes through
``load_scenario`` exactly like the command line's. What this module adds is
blame: a bad key names the overlay key the user wrote
(``variants.int8.set.pools.nope.tp``), and a bad value names the overlays in
play, not a ``--set`` the user never typed. (It lives apart from
``variants``/``ci`` because the schema imports those and this imports the
loader, which imports the schema.)
"""
from __future__ import annotations

import copy
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

from ..errors import LlmsimError, set_flag
from ..profiles.loader import read_structured
from .load import check_slos, load_scenario
from .overrides import apply_override, given_sets, refuse_overlaps
from .schema import Scenario
from .strict import validate_strict
from .variants import Variant, ladder_steps, overlay_assignments

__all__ = ["load_with_overlays", "load_with_variants", "blamed_on", "variant_overlays", "check_variants", "overlaid"]


@contextmanager
def blamed_on(path: Path, overlays: Sequence[tuple[str, Mapping[str, Any]]], sets: Sequence[str] = ()) -> Iterator[None]:
    """Re-raise a user error from inside (validation, or the runner's own
    pre-run checks) naming the overlays in play beside the file."""
    try:
        yield
    except LlmsimError as e:
        applied = [w for w, _ in overlays] + [set_flag(s) for s in sets]
        if not applied or (e.source is not None and not e.source.startswith(str(path))):
            raise     # nothing to add, or the fault is in another file (a profile), which it names
        raise LlmsimError(e.message, source=f"{path} (with {', '.join(applied)})", key_path=e.key_path) from None


def variant_overlays(variants: Sequence[Variant]) -> list[tuple[str, Mapping[str, Any]]]:
    return [(f"variants.{v.name}.set", v.set) for v in variants]


def _apply(data: dict, path: Path, overlays: Sequence[tuple[str, Mapping[str, Any]]]) -> list[str]:
    """Apply each overlay's assignments to ``data`` in order; returns them.
    A key path that addresses nothing names the overlay key the user wrote."""
    assignments: list[str] = []
    for where, overlay in overlays:
        for key, assignment in zip(overlay, overlay_assignments(overlay)):
            try:
                apply_override(data, assignment)
            except LlmsimError as e:
                at = f" (at {e.key_path})" if e.key_path and e.key_path != key else ""
                raise LlmsimError(e.message + at, source=path, key_path=f"{where}.{key}") from None
            assignments.append(assignment)
    return assignments


def load_with_overlays(path: Path, overlays: Sequence[tuple[str, Mapping[str, Any]]],
                       sets: Sequence[str] = ()) -> Scenario:
    """The scenario at ``path`` with each ``(where, overlay)`` applied in
    order (``where`` is the overlay's key path in the file), then ``sets``
    (the command line wins). Two of ``sets`` addressing one key are refused,
    resolved where the overlays leave the file (a variant may add the pool
    a ``--set`` names)."""
    data = read_structured(path)
    assignments = _apply(data, path, overlays)
    refuse_overlaps(given_sets(sets), data, source=path)
    with blamed_on(path, overlays, sets):
        sc, _ = load_scenario(path, [*assignments, *sets], variants_checked=True)
    return sc


def overlaid(path: Path, overlays: Sequence[tuple[str, Mapping[str, Any]]] = ()) -> dict:
    """The file's data with ``overlays`` applied: what the keys given after them (``--set``, ``--vary``)
    address, so their spellings resolve against the pools a variant adds."""
    data = read_structured(path)
    _apply(data, path, overlays)
    return data


def _check_step(data: dict, path: Path, overlays: Sequence[tuple[str, Mapping[str, Any]]]) -> None:
    """One step the file can run (a ladder step, the check's fast settings)
    is a scenario llmsim can model: its schema, SLOs and what needs the
    profiles (a tp that divides the model, a known name), as a run compiles
    it; else a variant run only in CI or under --ladder would first fail
    there. A step whose model does not fit its GPUs is an answer about the
    hardware, given when that step runs, not a fault of the file that stops
    every other command on it (as a plan's infeasible candidate)."""
    from ..memory import does_not_fit
    from .compile import compile_scenario      # compile loads profiles; overlays loads scenarios through load

    with blamed_on(path, overlays):
        step = validate_strict(Scenario, copy.deepcopy(data), path)
        check_slos(step, path)
        try:
            compile_scenario(step, path)
        except LlmsimError as e:
            if not does_not_fit(e):
                raise


def check_variants(data: dict, sc: Scenario, path: Path) -> None:
    """Every step of the scenario's ladder, and its ``check.set`` fast
    settings, can run (:func:`_check_step`), so a misspelt key or an
    unmodellable value in a variant is an error when the file is loaded,
    not when (or if) that variant is first selected. ``data`` is the file
    as read, ``sc`` it validated. A cumulative ladder's steps are built one
    on the other (each variant applied once), an independent one's each on
    the file."""
    from ..runsize import check_run_count

    check_run_count(len(sc.variants) + 1, f"a ladder of the baseline and {len(sc.variants):,} variant(s)",
                    source=path, key_path="variants", raisable=False)
    running = copy.deepcopy(data)
    for step in ladder_steps(sc.variants, sc.ladder)[1:]:
        overlays = variant_overlays(step.variants)
        if sc.ladder != "cumulative":
            running = copy.deepcopy(data)
        _apply(running, path, overlays[-1:])
        _check_step(running, path, overlays)
    if sc.check is not None and sc.check.set:
        fast = copy.deepcopy(data)
        overlays = [("check.set", sc.check.set)]
        _apply(fast, path, overlays)
        _check_step(fast, path, overlays)


def load_with_variants(path: Path, variants: Sequence[Variant], sets: Sequence[str] = ()) -> Scenario:
    return load_with_overlays(path, variant_overlays(variants), sets)
