"""Reading a scenario and checking it against physics before simulating.

Schema errors come from pydantic; the checks here need the profiles: the
model must fit on its GPUs, lengths must fit the model's context. Both end
in one LlmsimError naming the file and key path.
"""
from __future__ import annotations

import copy
from pathlib import Path

from ..errors import LlmsimError, set_flag
from ..fields import declared_results
from .ci import check_metric_names
from .slo import parse_slo
from ..profiles.loader import read_structured, refuse_other_kind, resolve
from .overrides import apply_override, key_fault
from .schema import Scenario
from .strict import validate_strict


def resolve_scenario(name_or_path: str) -> Path:
    return resolve("scenarios", name_or_path)


def load_scenario(name_or_path: str | Path, overrides: list[str] | None = None,
                  variants_checked: bool = False) -> tuple[Scenario, Path]:
    """The scenario, validated with ``overrides`` (``--set``) applied, and
    its path; each of its variants' ladder steps is validated too unless
    ``variants_checked`` (a load that applies variants itself)."""
    path = resolve_scenario(str(name_or_path))
    data = read_structured(path, what="scenario file")
    if not isinstance(data, dict):
        raise LlmsimError("expected a mapping with name, workload and pools", source=path)
    refuse_other_kind("scenarios", data, path)
    if "base" in data and {"grid", "points"} & set(data) and not {"workload", "pools"} & set(data):
        raise LlmsimError("is a sweep file, not a scenario: `llmsim sweep` runs it (its base: names the scenario)",
                          source=path)
    check = data.get("check")
    # other steps the file can run: its ladder's variants, the fast settings `llmsim check` runs
    steps = data.get("variants") or (isinstance(check, dict) and check.get("set"))
    as_written = copy.deepcopy(data) if steps and not variants_checked else None
    untouched = copy.deepcopy(data) if overrides else None
    for o in overrides or []:
        try:
            apply_override(data, o)
        except LlmsimError as e:
            raise LlmsimError(e.message, source=f"{path} ({set_flag(o)})", key_path=e.key_path) from None
    # A bad value may come from the command line rather than the file: say so.
    source = f"{path} (with {', '.join(set_flag(o) for o in overrides)})" if overrides else path
    try:
        sc = validate_strict(Scenario, data, source)
    except LlmsimError as err:
        raise (_misspelt_set(untouched, overrides or [], err, source) or err) from None
    check_slos(sc, source)
    results = declared_results()
    if sc.check is not None and results is not None:
        check_metric_names(sc.check, results, source, result_names(sc))
    if as_written is not None:
        _check_variants_once(as_written, path)
    return sc, path


def result_names(sc: Scenario) -> dict[str, list[str]]:
    """The names a run of ``sc`` writes where results.json declares ``<pool>`` and ``<class>``."""
    return {"<pool>": [p.name for p in sc.pools], "<class>": [c.name for c in sc.classes or []]}


def _misspelt_set(data: dict | None, overrides: list[str], err: LlmsimError, source) -> LlmsimError | None:
    """``err`` reworded as the fault of a ``--set`` key that names nothing in the
    file's valid scenario, with the nearest key that does (as ``--vary`` words
    it); None when the file alone does not validate or no key is to blame. Run
    only after a failure: the file is validated a second time."""
    if data is None:
        return None
    try:
        base = validate_strict(Scenario, data, source)
    except LlmsimError:
        return None
    for o in overrides:
        fault = key_fault(base, o.partition("=")[0].strip(), err)
        if fault is not None:
            return LlmsimError(fault.message, source=source, key_path=fault.key_path)
    return None


def check_slos(sc: Scenario, source) -> None:
    """Every SLO mapping of the scenario parses (the scenario's, each class's and each input-length
    bucket's): a target of nan or inf is refused as the file is read, in a variant not run too."""
    where = [("", sc.slo)] + [(f"classes[{i}].", c.slo) for i, c in enumerate(sc.classes)]
    if sc.input_length_buckets:
        where += [(f"input_length_buckets.slo.{label}.", slo) for label, slo in sc.input_length_buckets.slo.items()]
    for prefix, slo in where:
        try:
            parse_slo(slo)
        except LlmsimError as e:
            key = e.key_path or ""
            raise LlmsimError(e.message, source=source,
                              key_path=prefix + (key.removeprefix("slo.") if prefix.startswith("input") else key)) \
                from None


#: Files whose variants were checked, by (path, size, mtime): a plan loads one scenario per probe.
_checked: set[tuple[str, int, int]] = set()


def _check_variants_once(data: dict, path: Path) -> None:
    """The file's own ladder steps and check settings can run (the file as
    written: a ``--set`` that suits one variant need not suit every other step)."""
    from .overlays import check_variants     # overlays loads scenarios through this module

    st = path.stat()
    memo = (str(path.resolve()), st.st_size, st.st_mtime_ns)
    if memo in _checked:
        return
    try:
        as_written = validate_strict(Scenario, copy.deepcopy(data), path)
    except LlmsimError:
        return    # complete only with its --set: the variants are checked as they are applied
    check_variants(data, as_written, path)
    _checked.add(memo)
