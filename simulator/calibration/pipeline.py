"""One calibration run: fit the measured GPUs, transfer to the rest, report.

Kept apart from the CLI so tests and notebooks can run the same sequence
without writing files, and apart from :mod:`.write` so a dry run is just
"do not call write".
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from ..errors import LlmsimError
from ..profiles import list_builtin, load_hardware
from ..profiles.hardware import Calibration, HardwareProfile
from ..profiles.loader import builtin_dir
from . import ceilings, data, fp8, report, siblings, stacks, tables, transfer
from . import moe_mla as moe_mla_fit
from .assumptions import ITERATION_OVERHEAD_MS, ITERATION_OVERHEAD_NOTE, OTHER_NOTE, other_params
from .fit import FamilyFit, ONESHOT_MAX_BYTES, fit_family
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
    # fp8_gemm_efficiency fitted on measured fp8 GEMMs, per GPU that has them
    fp8: dict[str, "fp8.Fp8Fit"] = field(default_factory=dict)
    # every other stack against the default one, per GPU and op family
    stacks: list["stacks.Comparison"] = field(default_factory=list)
    # the overrides' errors on their stack's rows, against the default parameters'
    stack_errors: pd.DataFrame = field(default_factory=pd.DataFrame)


def _calibrated(kd: data.KernelData, gpu: HardwareProfile,
                progress: Progress | None = None) -> tuple[Calibration, dict[str, FamilyFit]]:
    fits = {}
    for fam in data.FAMILIES:
        rows = kd.family(fam, gpu.name)
        if progress is not None:
            progress.step(f"fitting {gpu.name} {fam} ({len(rows):,} rows)")
        fits[fam] = fit_family(fam, rows, gpu)
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
              f"{OTHER_NOTE}; {ITERATION_OVERHEAD_NOTE}."),
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


def run(data_dir: str | Path | None = None, gpus: list[str] | None = None, moe_mla: bool = False,
        progress: Progress | None = None) -> Result:
    """Fit every measured GPU, transfer to every other built-in profile.

    ``gpus`` limits which profiles the result carries (a transferred one
    still needs its source fitted, which is done regardless). ``moe_mla``
    also fits the MoE expert and MLA kernels of the GPUs that have rows in
    ``kernels/moe.csv.gz`` / ``mla.csv.gz`` (the slow part: minutes per
    GPU); without it the profiles keep their current MoE/MLA parameters.
    ``progress`` is told each step (:class:`.progress.Progress`).
    """
    prog = progress or Silent()
    known = list_builtin("hardware_profiles")
    wanted = list(dict.fromkeys(gpus)) if gpus else known
    unknown = [g for g in wanted if g not in known]
    if unknown:
        raise LlmsimError(f"unknown GPU profile(s) {', '.join(unknown)}; valid names: {', '.join(known)}")
    if data_dir is None:
        data_dir = data.default_data_dir()
    systems = data.system_profiles()
    guess = sorted((set(data.GPU_PROFILES.values()) | set(systems.values())) & set(known))
    prog.replan(_read_plan(Path(data_dir)) + _plan(guess, sorted(systems.values()),
                                                    sorted(set(systems.values()) - set(data.GPU_PROFILES.values())),
                                                    sum(1 for g in wanted if g in transfer.SOURCES and g not in guess),
                                                    [n for n in wanted if n in moe_mla_fit.GPU_PROFILES.values()]
                                                    if moe_mla else []))
    kd = data.load(data_dir, progress=prog.step)
    measured = [p for p in kd.profiles if p in known]
    copies = {g: s for g, s in transfer.COPIES.items() if g not in measured}
    wanted += [s for g, s in copies.items() if g in wanted and s not in wanted]
    for g in wanted:
        if g in measured or g in copies:
            continue
        if g not in transfer.SOURCES:
            raise LlmsimError(f"{g} has no kernel measurements and no transfer rule "
                              f"(rules exist for {', '.join(sorted(transfer.SOURCES))})")
        if transfer.SOURCES[g] not in measured:
            raise LlmsimError(f"{g} is transferred from {transfer.SOURCES[g]}, which has no rows in "
                              f"{kd.data_dir / 'kernels'}")
    needed = sorted({g if g in measured else transfer.SOURCES[g] for g in wanted if g not in copies})
    stack_profiles = sorted({p for (_s, _f), df in kd.stacks.items() for p in set(df["profile"])})
    fp8_profiles = sorted(set(kd.fp8["profile"])) if len(kd.fp8) else []
    moe_targets = [n for n in wanted if n in moe_mla_fit.GPU_PROFILES.values()] if moe_mla else []
    prog.replan(_plan(needed, stack_profiles, fp8_profiles,
                      sum(1 for g in wanted if g not in needed and g not in copies), moe_targets))

    fitted: dict[str, HardwareProfile] = {}
    fits: dict[str, dict[str, FamilyFit]] = {}
    fp8_fits: dict[str, fp8.Fp8Fit] = {}
    comparisons: list[stacks.Comparison] = []
    for name in needed:
        gpu = load_hardware(name)
        cal, fits[name] = _calibrated(kd, gpu, prog)
        if name in fp8_profiles:
            prog.step(f"fitting {name} fp8_gemm_efficiency")
            f = fp8.fit(kd.stack(data.DEFAULT_STACK, data.FP8_GEMM, name), gpu, cal.gemm)
            if f is not None:
                fp8_fits[name] = f
                cal = cal.model_copy(update={"error": {"gemm fp8": f.all_rows,
                                                       "gemm fp8 compute-bound": f.compute_bound}})
        gpu = gpu.model_copy(update={"calibration": cal,
                                     **({"fp8_gemm_efficiency": fp8_fits[name].efficiency} if name in fp8_fits
                                        else {})})
        if name in stack_profiles:
            prog.step(f"comparing {name}'s stacks with {data.DEFAULT_STACK}'s kernels")
            cmp = stacks.compare(kd, name)
            comparisons += cmp
            cal = cal.model_copy(update={"stacks": stacks.overrides(kd, gpu, cmp)})
            gpu = gpu.model_copy(update={"calibration": cal})
        fitted[name] = gpu
    prog.step("scoring the fits")
    errors = report.error_table(kd, fitted)
    for name, gpu in fitted.items():
        cal = gpu.calibration.model_copy(update={"error": {**report.fit_errors(errors, name), **gpu.calibration.error}})
        fitted[name] = gpu.model_copy(update={"calibration": Calibration.model_validate(cal.model_dump())})

    ds = ceilings.datasheet(kd.data_dir)
    pcie_ref = load_hardware(transfer.PCIE_REFERENCE) if transfer.PCIE_REFERENCE in known else None
    out: dict[str, HardwareProfile] = {}
    for name in wanted:
        if name in fitted:
            out[name] = fitted[name]
            continue
        if name in copies:
            continue                      # after its sibling, below
        prog.step(f"transferring {transfer.SOURCES[name]}'s fit to {name}")
        target = load_hardware(name)
        src = fitted[transfer.SOURCES[name]]
        measured_ratio = siblings.measure(kd.data_dir, src, target, transfer.datasheet_ratios(name, src.name, ds))
        cal = transfer.transfer(target, src, ds, pcie_ref, measured_ratio)
        out[name] = target.model_copy(update={"calibration": Calibration.model_validate(cal.model_dump())})

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
            sib = transfer.COPIES.get(name)
            # (without the sibling's MoE/MLA errors: those were measured on the sibling)
            keep = out[sib].calibration.model_copy(update={"error": {}}) if sib in moe_targets \
                else load_hardware(name).calibration
            out[name] = gpu.model_copy(update={"calibration": moe_mla_fit.keep_current(gpu.calibration, keep)})

    for name, sib in copies.items():
        if name in wanted:
            target = load_hardware(name)
            cal = transfer.copied(target, out[sib])
            out[name] = target.model_copy(update={"calibration": Calibration.model_validate(cal.model_dump())})

    shown = {n: g for n, g in fitted.items() if n in wanted}
    result = Result(
        profiles=out,
        fits={n: f for n, f in fits.items() if n in wanted},
        errors=errors[errors["gpu"].isin(wanted)].reset_index(drop=True),
        slices=report.slice_table(kd, shown),
        ceilings={n: ceilings.compare(kd, n, g, g.calibration) for n, g in shown.items()},
        data_dir=kd.data_dir,
        kernels=pd.DataFrame(kernel_rows, columns=["gpu", "family", "n", "median_ape", "p90_ape"]),
        fp8={n: f for n, f in fp8_fits.items() if n in wanted},
        stacks=[c for c in comparisons if c.gpu in wanted],
        stack_errors=pd.DataFrame([r for n, g in shown.items() for r in stacks.error_rows(kd, g)]),
    )
    prog.finish()
    return result


def write(result: Result) -> list[Path]:
    """Write each profile's calibration block into its built-in YAML."""
    from .write import write_profile

    d = builtin_dir("hardware_profiles")
    changed = []
    for name, gpu in result.profiles.items():
        path = d / f"{name}.yaml"
        f = result.fp8.get(name)
        fp8_line = None if f is None else (f.efficiency, FP8_NOTE.format(n=f.compute_bound.n))
        if write_profile(path, gpu.calibration, fp8_line):
            changed.append(path)
    result.written = changed
    return changed
