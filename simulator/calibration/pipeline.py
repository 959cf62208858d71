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
from . import ceilings, data, report, siblings, transfer
from . import moe_mla as moe_mla_fit
from .assumptions import ITERATION_OVERHEAD_MS, ITERATION_OVERHEAD_NOTE, OTHER_NOTE, other_params
from .fit import FamilyFit, ONESHOT_MAX_BYTES, fit_family

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


def _calibrated(kd: data.KernelData, gpu: HardwareProfile) -> tuple[Calibration, dict[str, FamilyFit]]:
    fits = {fam: fit_family(fam, kd.family(fam, gpu.name), gpu) for fam in data.FAMILIES}
    counts = ", ".join(f"{fam} {f.n}" for fam, f in fits.items())
    cal = Calibration(
        status="calibrated",
        source=f"{ATTRIBUTION.format(commit=kd.commit)}: {kd.versions.get(gpu.name, 'vLLM')} kernel timings "
               "under CUDA graphs (launch overhead excluded)",
        fitted_on=f"kernels/gemm.csv, attention.csv, allreduce.csv of the shared data; rows: {counts}",
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


def run(data_dir: str | Path | None = None, gpus: list[str] | None = None, moe_mla: bool = True) -> Result:
    """Fit every measured GPU, transfer to every other built-in profile.

    ``gpus`` limits which profiles the result carries (a transferred one
    still needs its source fitted, which is done regardless). ``moe_mla``
    also fits the MoE expert and MLA kernels of the GPUs that have rows in
    ``kernels/moe.csv.gz`` / ``mla.csv.gz`` (the slow part: minutes).
    """
    known = list_builtin("hardware_profiles")
    wanted = list(dict.fromkeys(gpus)) if gpus else known
    unknown = [g for g in wanted if g not in known]
    if unknown:
        raise LlmsimError(f"unknown GPU profile(s) {', '.join(unknown)}; valid names: {', '.join(known)}")
    kd = data.load(data_dir)
    measured = [p for p in kd.profiles if p in known]
    wanted += [s for g, s in transfer.COPIES.items() if g in wanted and s not in wanted]
    for g in wanted:
        if g in measured or g in transfer.COPIES:
            continue
        if g not in transfer.SOURCES:
            raise LlmsimError(f"{g} has no kernel measurements and no transfer rule "
                              f"(rules exist for {', '.join(sorted(transfer.SOURCES))})")
        if transfer.SOURCES[g] not in measured:
            raise LlmsimError(f"{g} is transferred from {transfer.SOURCES[g]}, which has no rows in "
                              f"{kd.data_dir / 'kernels'}")
    needed = sorted({g if g in measured else transfer.SOURCES[g] for g in wanted if g not in transfer.COPIES})

    fitted: dict[str, HardwareProfile] = {}
    fits: dict[str, dict[str, FamilyFit]] = {}
    for name in needed:
        gpu = load_hardware(name)
        cal, fits[name] = _calibrated(kd, gpu)
        fitted[name] = gpu.model_copy(update={"calibration": cal})
    errors = report.error_table(kd, fitted)
    for name, gpu in fitted.items():
        cal = gpu.calibration.model_copy(update={"error": report.fit_errors(errors, name)})
        fitted[name] = gpu.model_copy(update={"calibration": Calibration.model_validate(cal.model_dump())})

    ds = ceilings.datasheet(kd.data_dir)
    pcie_ref = load_hardware(transfer.PCIE_REFERENCE) if transfer.PCIE_REFERENCE in known else None
    out: dict[str, HardwareProfile] = {}
    for name in wanted:
        if name in fitted:
            out[name] = fitted[name]
            continue
        if name in transfer.COPIES:
            continue                      # after its sibling, below
        target = load_hardware(name)
        src = fitted[transfer.SOURCES[name]]
        measured = siblings.measure(kd.data_dir, src, target, transfer.datasheet_ratios(name, src.name, ds))
        cal = transfer.transfer(target, src, ds, pcie_ref, measured)
        out[name] = target.model_copy(update={"calibration": Calibration.model_validate(cal.model_dump())})

    kernel_rows: list[dict] = []
    if moe_mla:
        targets = {n: out[n] for n in out if n in moe_mla_fit.GPU_PROFILES.values()}
        mm = moe_mla_fit.load(kd.data_dir, targets)
        for name, gpu in targets.items():
            if not len(mm.moe_rows(name)) and mm.mla is None:
                continue
            cal, rows = moe_mla_fit.calibrate(mm, name, gpu)
            cal = cal.model_copy(update={"error": {**cal.error, **moe_mla_fit.fit_error_block(rows)}})
            out[name] = gpu.model_copy(update={"calibration": Calibration.model_validate(cal.model_dump())})
            kernel_rows += rows
    else:
        for name, gpu in out.items():
            out[name] = gpu.model_copy(update={"calibration": moe_mla_fit.keep_current(gpu.calibration,
                                                                                         load_hardware(name).calibration)})

    for name, sib in transfer.COPIES.items():
        if name in wanted:
            target = load_hardware(name)
            cal = transfer.copied(target, out[sib])
            out[name] = target.model_copy(update={"calibration": Calibration.model_validate(cal.model_dump())})

    shown = {n: g for n, g in fitted.items() if n in wanted}
    return Result(
        profiles=out,
        fits={n: f for n, f in fits.items() if n in wanted},
        errors=errors[errors["gpu"].isin(wanted)].reset_index(drop=True),
        slices=report.slice_table(kd, shown),
        ceilings={n: ceilings.compare(kd, n, g, g.calibration) for n, g in shown.items()},
        data_dir=kd.data_dir,
        kernels=pd.DataFrame(kernel_rows, columns=["gpu", "family", "n", "median_ape", "p90_ape"]),
    )


def write(result: Result) -> list[Path]:
    """Write each profile's calibration block into its built-in YAML."""
    from .write import write_profile

    d = builtin_dir("hardware_profiles")
    changed = []
    for name, gpu in result.profiles.items():
        path = d / f"{name}.yaml"
        if write_profile(path, gpu.calibration):
            changed.append(path)
    result.written = changed
    return changed
