"""One calibration run: fit the measured GPUs, transfer to the rest, report.

Kept apart from the CLI so tests and notebooks can run the same sequence
without writing files, and apart from :mod:`.write` so a dry run is just
"do not call write".
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

import pandas as pd
from pydantic import ValidationError

from ..errors import LlmsimError, from_validation_error, nearest
from ..profiles import load_hardware
from ..profiles.hardware import (CALIBRATION_DATA_NAMES, Calibration, DataNames, HardwareProfile, builtin_hardware,
                                 fit_figure_differences, shared_data_names)
from ..profiles.loader import builtin_dir, resolve
from . import ceilings, data, evaluate, moe_stacks, quantised_gemm, report, siblings, stacks, sustained, tables, transfer
from . import moe_mla as moe_mla_fit
from .assumptions import ITERATION_OVERHEAD_MS, ITERATION_OVERHEAD_NOTE, OTHER_NOTE, SUSTAINED_NOTE, other_params
from .fit import FamilyFit, ONESHOT_MAX_BYTES, fit_family, settled
from .progress import Progress, Silent

FP8_NOTE = ("fitted by `llmsim calibrate` on {n} measured compute-bound per-tensor fp8 GEMMs of the "
            "default stack (kernels/gemm_h200_b200.csv.gz; docs/calibration.md)")
ATTRIBUTION = "AIConfigurator (github.com/ai-dynamo/aiconfigurator, Apache-2.0, commit {commit})"


@dataclass
class Result:
    """Everything one run produced; ``profiles`` carry the new calibrations."""

    profiles: dict[str, HardwareProfile]
    fits: dict[str, dict[str, FamilyFit]]
    errors: pd.DataFrame
    slices: pd.DataFrame
    ceilings: dict[str, list[dict]]
    data_dir: Path
    # MoE and MLA kernel errors (in-sample), one row per GPU × format/table.
    kernels: pd.DataFrame = field(default_factory=pd.DataFrame)
    written: list[Path] = field(default_factory=list)
    # where each profile given as a file (not a built-in) is, to write it back
    paths: dict[str, Path] = field(default_factory=dict)
    # fp8_gemm_efficiency fitted on measured fp8 GEMMs, per GPU that has them
    fp8: dict[str, "quantised_gemm.EfficiencyFit"] = field(default_factory=dict)
    # each profile's top-level fp8_gemm_efficiency line (value, comment) this run writes (:func:`_fp8_lines`)
    fp8_lines: dict[str, tuple[float, str]] = field(default_factory=dict)
    # every other stack against the default one, per GPU and op family
    stacks: list["stacks.Comparison"] = field(default_factory=list)
    # the overrides' errors on their stack's rows, against the default parameters'
    stack_errors: pd.DataFrame = field(default_factory=pd.DataFrame)
    # each stack's GEMM rate under sustained load over its burst rate, per measured GPU
    sustained: list["sustained.StackRatio"] = field(default_factory=list)
    # a renamed copy -> the profile whose rows and calibration it takes (:func:`_renamed_copies`)
    renamed: dict[str, str] = field(default_factory=dict)
    # why a profile's calibration came from where it did, where its file offered two sources
    notes: dict[str, str] = field(default_factory=dict)


def _calibrated(kd: data.KernelData, gpu: HardwareProfile,
                progress: Progress | None = None) -> tuple[Calibration, dict[str, FamilyFit]]:
    fits = {}
    for fam in data.FAMILIES:
        rows = kd.family(fam, gpu.name)
        if progress is not None:
            progress.step(f"fitting {gpu.name} {fam} ({len(rows):,} rows)")
        fits[fam] = settled(getattr(gpu.calibration, fam, None), fit_family(fam, rows, gpu),
                            evaluate.evaluator(fam, rows, gpu), rows["t_s"].to_numpy())
    counts = ", ".join(f"{fam} {f.n}" for fam, f in fits.items())
    on_grid = " (the shapes of gemm.csv and attention.csv; the table's other shapes are scored held out)" \
        if kd.files.get(gpu.name, "").startswith(data.STACK_FILES["gemm"]) else ""
    cal = Calibration(
        status="calibrated",
        source=f"{ATTRIBUTION.format(commit=kd.commit)}: {kd.versions.get(gpu.name, 'vLLM')} kernel timings "
               "under CUDA graphs (launch overhead excluded)",
        fitted_on=f"kernels/{kd.files.get(gpu.name, 'gemm.csv, attention.csv, allreduce.csv')} of the shared "
                  f"data; rows{on_grid}: {counts}",
        rule=("fit: robust least squares on log-time per op family with the engine's component functions, "
              "η ≤ 1 and extra costs ≥ 0 (never faster than the roofline); all-reduce rows = vLLM custom "
              f"all-reduce (CUDA-graph) below {data.CUSTOM_AR_MAX_BYTES // 2**20} MiB (one-shot up to "
              f"{ONESHOT_MAX_BYTES // 1024} KiB), NCCL from there; decode context = cached + 1 per sequence. "
              f"{SUSTAINED_NOTE}. {OTHER_NOTE}; {ITERATION_OVERHEAD_NOTE}."),
        gemm=fits["gemm"].params,
        attention_prefill=fits["attention_prefill"].params,
        attention_decode=fits["attention_decode"].params,
        allreduce=fits["allreduce"].params,
        other=other_params(fits["gemm"].params),
        iteration_overhead_ms=ITERATION_OVERHEAD_MS,
    )
    return cal, fits


def _plan(kd_profiles: list[str], stack_profiles: list[str], fp8_profiles: list[str], transferred: int,
          moe: list[str]) -> list[str]:
    """The steps after reading, in the order :func:`run` takes them."""
    steps: list[str] = []
    for name in kd_profiles:
        steps += ["fit"] * len(data.FAMILIES)
        steps += ["fp8"] if name in fp8_profiles else []
        steps += ["stacks"] if name in stack_profiles else []
    steps += ["report"] + ["transfer"] * transferred
    if moe:
        steps += ["moe-read"] + ["moe"] * len(moe)
    return steps


def _read_plan(data_dir: Path | None) -> list[str]:
    d = Path(data_dir).expanduser() if data_dir is not None else None
    plan = ["read"]
    for kind, fname in data.STACK_FILES.items():
        cached = d is not None and tables.is_cached(d / "kernels" / fname, data.STACK_COLUMNS[kind])
        plan.append("read" if cached else "read-first")
    return plan


def _profiles(gpus: list[str] | None) -> tuple[dict[str, HardwareProfile], list[str], dict[str, Path]]:
    """Every built-in profile plus the user's files among ``gpus`` (paths),
    the names the run is for, and where each user file is."""
    profiles = builtin_hardware()
    paths: dict[str, Path] = {}
    wanted: list[str] = []
    for g in gpus or []:
        if g in profiles:
            wanted.append(g)
            continue
        if not (g.endswith((".yaml", ".yml", ".json")) or Path(g).expanduser().exists()):
            raise LlmsimError(f"unknown GPU profile(s) {g}; valid names: {', '.join(profiles)} "
                              "(or a path to a GPU profile YAML)")
        gpu, path = load_hardware(g), resolve("hardware_profiles", g)
        if gpu.name in profiles and path.resolve() == (builtin_dir("hardware_profiles") / f"{gpu.name}.yaml").resolve():
            wanted.append(gpu.name)
            continue
        if gpu.name in profiles and gpu.name not in paths:
            raise LlmsimError(f"{g} is named {gpu.name!r}, a built-in profile's name; give it a name of its own",
                              key_path="name")
        if gpu.name in paths and paths[gpu.name].resolve() != path.resolve():
            raise LlmsimError(f"{gpu.name!r} is the name of {paths[gpu.name]} too: each --gpu file needs a name of "
                              "its own (a calibration is written under it)", source=g, key_path="name")
        profiles[gpu.name], paths[gpu.name] = gpu, path
        wanted.append(gpu.name)
    return profiles, list(dict.fromkeys(wanted)) or sorted(profiles), paths


def _rows(names: dict[str, str]) -> str:
    return ", ".join(f"{f} {v!r}" for f, v in names.items())


def _renamed_copies(profiles: dict[str, HardwareProfile], paths: dict[str, Path]) -> dict[str, str]:
    """Each of the user's files that names another profile's rows of the
    shared data -> that profile, when it is a renamed copy of it (the same
    datasheet figures a fit divides by, no rows of its own).

    A table's row is one GPU's measurement: a copy of h100-sxm.yaml that keeps
    its ``data_names`` but has a datasheet of its own would be fitted on
    H100's kernel times against its own peaks (its ``transfer`` rule ignored,
    since measured rows come first), so it is refused, saying what to do."""
    out: dict[str, str] = {}
    users = list(paths)
    for i, (name, path) in enumerate(paths.items()):
        gpu = profiles[name]
        # the built-ins and the user's files before this one; a copy's rows are its original's
        owners = {o: s for o, g in profiles.items() if (o not in paths or o in users[:i]) and o not in out
                  and (s := shared_data_names(gpu, g))}
        if not owners:
            continue
        if len(owners) > 1:
            raise LlmsimError(f"{name}'s data_names name the measured rows of {len(owners)} GPUs ("
                              + "; ".join(f"{o}'s {_rows(s)}" for o, s in owners.items())
                              + "): a table's rows are one GPU's measurements; keep only names of this GPU's own rows",
                              source=path, key_path="data_names")
        (owner, shared), = owners.items()
        diff = fit_figure_differences(gpu, profiles[owner])
        tr = gpu.transfer
        if diff:
            fix = (f"calibrate then takes its transfer rule ({tr.rule} from {tr.sibling})" if tr is not None
                   else f"give it a transfer rule instead (`transfer: {{sibling: {owner}, rule: scaled}}`)")
            raise LlmsimError(
                f"{name} names {owner}'s measured rows ({_rows(shared)}) but its datasheet is not {owner}'s ("
                + "; ".join(diff[:4]) + ("; ..." if len(diff) > 4 else "")
                + f"): calibrating it would fit {owner}'s kernel times against {name}'s peaks. data_names name "
                f"measurements of this GPU only, and a copy of {owner}'s profile keeps {owner}'s: delete them, and {fix}",
                source=path, key_path="data_names")
        own = {f: getattr(gpu.data_names, f) for f in CALIBRATION_DATA_NAMES
               if getattr(gpu.data_names, f) and f not in shared}
        if own:
            raise LlmsimError(f"{name} names both rows of its own ({_rows(own)}) and {owner}'s ({_rows(shared)}): a "
                              f"table's rows are one GPU's measurements; delete the names that are {owner}'s",
                              source=path, key_path="data_names")
        out[name] = owner
    return out


def _source_notes(profiles: dict[str, HardwareProfile], names: list[str], measured: list[str],
                  renamed: dict[str, str], moe_targets: list[str]) -> dict[str, str]:
    """Why each profile whose file offers both measured rows and a transfer
    rule was calibrated the way it was: the rows win, and the user copied the
    rule in expecting it to act."""
    notes: dict[str, str] = {}
    for name in names:
        tr = profiles[name].transfer
        unused = f"its transfer rule ({tr.rule} from {tr.sibling}) is for a GPU without measured rows and was not used" \
            if tr is not None else ""
        if name in renamed:
            src = renamed[name]
            notes[name] = "; ".join(filter(None, [
                f"as {src} is: a renamed copy of it (the same data_names and datasheet figures)", unused]))
        elif tr is not None and name in measured:
            if tr.rule == "copy" and tr.sibling in moe_targets and name not in moe_targets:
                unused = (f"its transfer rule (copy from {tr.sibling}) gave only its MoE/MLA parameters, "
                          f"{tr.sibling}'s fit of this run (its own tables have no MoE/MLA rows)")
            notes[name] = f"on its own measured rows; {unused}"
    return notes


def _sibling(name: str, gpu: HardwareProfile, profiles: dict[str, HardwareProfile], measured: list[str],
             where: Path, paths: dict[str, Path]) -> str:
    """The measured profile ``gpu``'s calibration comes from (its ``transfer.sibling``); a fault is the
    profile file's, named as the file (a built-in's by its path in the package)."""
    source = paths.get(name) or builtin_dir("hardware_profiles") / f"{name}.yaml"
    if gpu.transfer is None:
        raise LlmsimError(f"{name} has no kernel measurements and no transfer rule: give its profile "
                          "`transfer: {sibling: <a measured GPU>, rule: scaled | copy}` (measured: "
                          f"{', '.join(measured)})", source=source, key_path="transfer")
    sib = gpu.transfer.sibling
    if sib == name:
        raise LlmsimError(f"{name} cannot be transferred from itself: name a measured GPU ("
                          f"{', '.join(measured)})", source=source, key_path="transfer.sibling")
    if sib not in profiles:
        # only a measured GPU can be a sibling: listing every profile offered this one and unmeasured ones
        raise LlmsimError(f"{name} is transferred from {sib}, which is no GPU profile{nearest(sib, measured)}; "
                          f"name a measured GPU ({', '.join(measured)})", source=source, key_path="transfer.sibling")
    if sib not in measured:
        raise LlmsimError(f"{name} is transferred from {sib}, which has no rows in {where} (measured: "
                          f"{', '.join(measured)})", source=source, key_path="transfer.sibling")
    return sib


def _fp8_lines(profiles: dict[str, HardwareProfile], fits: dict[str, quantised_gemm.EfficiencyFit],
               renamed: dict[str, str], copies: dict[str, str],
               sources: dict[str, str]) -> dict[str, tuple[float, str]]:
    """Each profile's ``fp8_gemm_efficiency`` line (value, comment) where this run fits one: its own
    fit (a renamed copy's original's), else the fit of the sibling whose calibration it takes, which
    it goes with as the rest of that calibration does (:func:`.transfer.fp8_note`). A profile without
    fp8 units, or whose source has no fp8 rows, keeps its line."""
    lines: dict[str, tuple[float, str]] = {}
    for name, gpu in profiles.items():
        own = renamed.get(name, name)
        if own in fits:
            f = fits[own]
            lines[name] = (f.efficiency, FP8_NOTE.format(n=f.compute_bound.n))
            continue
        sib = copies.get(own) or sources.get(own)
        if sib in fits and gpu.has_unit("fp8"):
            lines[name] = (fits[sib].efficiency, transfer.fp8_note(sib, "copy" if own in copies else "scaled"))
    return lines


def _with_calibration(gpu: HardwareProfile, cal: Calibration, path: Path | None) -> HardwareProfile:
    """``gpu`` with a transferred calibration, checked as a whole profile (a
    sibling's GEMM fit in waves needs this GPU's ``num_sms``)."""
    data = {**gpu.model_dump(), "calibration": cal.model_dump()}
    try:
        return HardwareProfile.model_validate(data)
    except ValidationError as e:
        raise from_validation_error(e, path or builtin_dir("hardware_profiles") / f"{gpu.name}.yaml") from None


def _module_stacks(kd: data.KernelData, gpus: dict[str, HardwareProfile], comparisons: list[stacks.Comparison],
                   out: dict[str, HardwareProfile]
                   ) -> tuple[list[stacks.Comparison], dict[str, pd.DataFrame], dict[str, pd.DataFrame]]:
    """Each stack's MLA decode and MoE experts against ``gpus``' final MLA and MoE parameters
    (fitted or kept, so after the MoE/MLA step), their ``calibration.stacks`` redone in ``out``
    where one is material; the comparisons made, the stacks' MLA module rows and MoE rows."""
    mla = {s: moe_mla_fit.stack_generation_modules(kd.data_dir, gpus, s) for s in moe_mla_fit.STACK_MODULE_VERSIONS}
    moe = {s: moe_stacks.stack_rows(kd.data_dir, gpus, s) for s in moe_stacks.STACK_MOE_VERSIONS}
    made = []
    for name, gpu in gpus.items():
        cmp = [c for s, rows in mla.items() for c in stacks.compare_mla(rows, gpu, s)]
        cmp += [c for s, rows in moe.items() for c in stacks.compare_moe(rows, gpu, s)]
        made += cmp
        if any(c.material for c in cmp):
            mine = [c for c in comparisons if c.gpu == name] + cmp
            cal = gpu.calibration.model_copy(update={"stacks": stacks.overrides(kd, gpu, mine, mla, moe)})
            out[name] = gpu.model_copy(update={"calibration": Calibration.model_validate(cal.model_dump())})
    return made, mla, moe


def run(data_dir: str | Path | None = None, gpus: list[str] | None = None, moe_mla: bool = False,
        progress: Progress | None = None) -> Result:
    """Fit every measured GPU, transfer to every other built-in profile.

    ``gpus`` limits which profiles the result carries (names of built-in
    profiles, or paths of the user's own GPU files); a transferred one still
    needs its sibling fitted, which is done regardless. ``moe_mla`` also
    fits the MoE expert and MLA kernels of the GPUs that have rows in
    ``kernels/moe.csv.gz`` / ``mla.csv.gz`` (the slow part: minutes per
    GPU); without it the profiles keep their current MoE/MLA parameters.
    ``progress`` is told each step (:class:`.progress.Progress`).

    A user's file that is a renamed copy of another profile (its data names
    and datasheet figures) gets that profile's calibration, fitted on its
    rows, which stay the original's; one that names another GPU's rows with a
    datasheet of its own is refused before any table is read.
    """
    prog = progress or Silent()
    profiles, asked, paths = _profiles(gpus)
    renamed = _renamed_copies(profiles, paths)          # before any table is read
    given = profiles
    # A renamed copy's rows stay its original's, which is calibrated in its place.
    profiles = {n: g.model_copy(update={"data_names": DataNames()}) if n in renamed else g
                for n, g in profiles.items()}
    wanted = list(dict.fromkeys(renamed.get(n, n) for n in asked))
    if data_dir is None:
        data_dir = data.default_data_dir()
    first, systems = data.first_table_profiles(profiles), data.system_profiles(profiles)
    guess = sorted(set(first.values()) | set(systems.values()))
    moe_measured = moe_mla_fit.measured(Path(data_dir).expanduser(), profiles) if moe_mla else []
    prog.replan(_read_plan(Path(data_dir)) + _plan(guess, sorted(systems.values()),
                                                    sorted(set(systems.values()) - set(first.values())),
                                                    sum(1 for g in wanted if g not in guess),
                                                    [n for n in wanted if n in moe_measured]))
    kd = data.load(data_dir, progress=prog.step, gpus=profiles)
    measured = [p for p in kd.profiles if p in profiles]
    copies = {g: _sibling(g, profiles[g], profiles, measured, kd.data_dir / "kernels", paths) for g in wanted
              if g not in measured and profiles[g].transfer is not None and profiles[g].transfer.rule == "copy"}
    wanted += [s for s in copies.values() if s not in wanted]
    sources = {g: _sibling(g, profiles[g], profiles, measured, kd.data_dir / "kernels", paths) for g in wanted
               if g not in measured and g not in copies}
    needed = sorted({g if g in measured else sources[g] for g in wanted if g not in copies})
    stack_profiles = sorted({p for (_s, _f), df in kd.stacks.items() for p in set(df["profile"].unique())})
    fp8_profiles = sorted(set(kd.fp8["profile"].unique())) if len(kd.fp8) else []
    moe_targets = [n for n in wanted if n in moe_measured]
    prog.replan(_plan(needed, stack_profiles, fp8_profiles,
                      sum(1 for g in wanted if g not in needed and g not in copies), moe_targets))

    fitted: dict[str, HardwareProfile] = {}
    fits: dict[str, dict[str, FamilyFit]] = {}
    fp8_fits: dict[str, quantised_gemm.EfficiencyFit] = {}
    comparisons: list[stacks.Comparison] = []
    sustained_rows: list[sustained.StackRatio] = []
    for name in needed:
        gpu = profiles[name]
        cal, fits[name] = _calibrated(kd, gpu, prog)
        if name in fp8_profiles:
            prog.step(f"fitting {name} fp8_gemm_efficiency")
            f = quantised_gemm.fit(kd.stack(data.DEFAULT_STACK, data.FP8_GEMM, name), gpu, cal.gemm)
            if f is not None:
                fp8_fits[name] = f
                cal = cal.model_copy(update={"error": {"gemm fp8": f.all_rows,
                                                       "gemm fp8 compute-bound": f.compute_bound}})
        gpu = gpu.model_copy(update={"calibration": cal,
                                     **({"fp8_gemm_efficiency": fp8_fits[name].efficiency} if name in fp8_fits
                                        else {})})
        ratios = sustained.stack_ratios(kd, gpu)
        sustained_rows += ratios
        cal = cal.model_copy(update={"gemm": cal.gemm.model_copy(update={"sustained": sustained.factor(ratios)})})
        gpu = gpu.model_copy(update={"calibration": cal})
        if name in stack_profiles:
            prog.step(f"comparing {name}'s stacks with {data.DEFAULT_STACK}'s kernels")
            cmp = stacks.compare(kd, name)
            comparisons += cmp
            cal = cal.model_copy(update={"stacks": stacks.overrides(kd, gpu, cmp,
                                                                    stored=profiles[name].calibration.stacks)})
            gpu = gpu.model_copy(update={"calibration": cal})
        fitted[name] = gpu
    prog.step("scoring the fits")
    errors = report.error_table(kd, fitted)
    for name, gpu in fitted.items():
        cal = gpu.calibration.model_copy(update={"error": {**report.fit_errors(errors, name), **gpu.calibration.error}})
        fitted[name] = gpu.model_copy(update={"calibration": Calibration.model_validate(cal.model_dump())})

    ds = ceilings.datasheet(kd.data_dir, profiles)
    pcie_ref = transfer.pcie_reference(profiles, ds)
    out: dict[str, HardwareProfile] = {}
    for name in wanted:
        if name in fitted:
            out[name] = fitted[name]
            continue
        if name in copies:
            continue                      # after its sibling, below
        prog.step(f"transferring {sources[name]}'s fit to {name}")
        target = profiles[name]
        src = fitted[sources[name]]
        measured_ratio = siblings.measure(kd.data_dir, src, target, transfer.datasheet_ratios(name, src.name, ds))
        cal = transfer.transfer(target, src, ds, pcie_ref, measured_ratio)
        out[name] = _with_calibration(target, cal, paths.get(name))

    kernel_rows: list[dict] = []
    if moe_targets:
        prog.step("reading the MoE and MLA kernel tables")
        targets = {n: out[n] for n in moe_targets}
        mm = moe_mla_fit.load(kd.data_dir, targets)
        for name, gpu in targets.items():
            prog.step(f"fitting {name}'s MoE experts and MLA modules")
            if not len(mm.moe_rows(name)) and mm.mla is None:
                continue
            cal, rows = moe_mla_fit.calibrate(mm, name, gpu)
            cal = cal.model_copy(update={"error": {**cal.error, **moe_mla_fit.fit_error_block(rows)}})
            out[name] = gpu.model_copy(update={"calibration": Calibration.model_validate(cal.model_dump())})
            kernel_rows += rows
    for name, gpu in out.items():
        if name not in moe_targets:
            # A measured copy (GB200 of B200) takes its sibling's MoE/MLA fit, as it took all of it before.
            tr = profiles[name].transfer
            sib = tr.sibling if tr is not None and tr.rule == "copy" else None
            # (without the sibling's MoE/MLA errors: those were measured on the sibling)
            keep = out[sib].calibration.model_copy(update={"error": {}}) if sib in moe_targets \
                else profiles[name].calibration
            out[name] = gpu.model_copy(update={"calibration": moe_mla_fit.keep_current(gpu.calibration, keep)})
    module_cmp, mla_rows, moe_rows = _module_stacks(kd, {n: out[n] for n in fitted if n in out}, comparisons, out)
    comparisons += module_cmp

    for name, sib in copies.items():
        if name in wanted:
            target = profiles[name]
            cal = transfer.copied(target, out[sib])
            out[name] = _with_calibration(target, cal, paths.get(name))
    for name, src in renamed.items():
        out[name] = _with_calibration(given[name], out[src].calibration, paths[name])
    # calibrated, not asked for: a user file's built-in stand-in, a copied GPU's sibling (--gpu b300 fits
    # b200 to copy it, and wrote b200.yaml too)
    stand_ins = (set(renamed.values()) | set(copies.values())) - set(asked)
    out = {n: g for n, g in out.items() if n not in stand_ins}
    fp8_lines = _fp8_lines(out, fp8_fits, renamed, copies, sources)
    out = {n: g.model_copy(update={"fp8_gemm_efficiency": fp8_lines[n][0]}) if n in fp8_lines else g
           for n, g in out.items()}

    shown = {n: g for n, g in fitted.items() if n in wanted}
    result = Result(
        profiles=out,
        paths=paths,
        fits={n: f for n, f in fits.items() if n in wanted},
        errors=errors[errors["gpu"].isin(wanted)].reset_index(drop=True),
        slices=report.slice_table(kd, shown),
        ceilings={n: ceilings.compare(kd, n, g, g.calibration) for n, g in shown.items()},
        data_dir=kd.data_dir,
        kernels=pd.DataFrame(kernel_rows, columns=["gpu", "family", "n", "median_ape", "p90_ape"]),
        fp8={n: f for n, f in fp8_fits.items() if n in wanted},
        fp8_lines=fp8_lines,
        stacks=[c for c in comparisons if c.gpu in wanted],
        stack_errors=pd.DataFrame([r for n, g in shown.items() for r in stacks.error_rows(kd, g)
                                   + (stacks.mla_error_rows(out[n], mla_rows) + stacks.moe_error_rows(out[n], moe_rows)
                                      if n in out else [])]),
        sustained=[r for r in sustained_rows if r.gpu in wanted],
        renamed=renamed,
        notes=_source_notes(given, asked, measured, renamed, moe_targets),
    )
    prog.finish()
    return result


def refuse_json(paths: Iterable[Path]) -> None:
    """Raise for a JSON profile among the user's files: its calibration block is written as YAML in
    place. ``llmsim calibrate`` asks before the fit, which would otherwise run a minute to be refused."""
    for path in paths:
        if path.suffix == ".json":
            raise LlmsimError("llmsim calibrate writes its calibration: block into a YAML profile, and this one "
                              "is JSON: give the profile as YAML, or add --dry-run", source=path)


def write(result: Result) -> list[Path]:
    """Write each profile's calibration block, and its fp8_gemm_efficiency line where the run gives
    one, into its YAML (built-in or the user's), all of them or none."""
    from .write import rendered_profile, write_profiles

    d = builtin_dir("hardware_profiles")
    refuse_json(result.paths.values())      # before any file is written
    texts = {}     # every profile rendered and read back before any is written
    for name, gpu in result.profiles.items():
        path = result.paths.get(name) or d / f"{name}.yaml"
        text = rendered_profile(path, gpu.calibration, result.fp8_lines.get(name))
        if text is not None:
            texts[path] = text
    write_profiles(texts)
    result.written = list(texts)
    return result.written
