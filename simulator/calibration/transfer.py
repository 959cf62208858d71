"""Parameters for GPUs without kernel measurements, from a measured sibling.

An η is a property of the kernels *and* the silicon, so the best guess for
an unmeasured GPU is its nearest measured relative, which its profile names
(``transfer: {sibling: ..., rule: scaled | copy}``): H100 PCIe takes H100
SXM's fit; A100 40GB and L40S take A100 80GB's. Copied as-is, an
η would ignore what ``hardware_datasheets.csv`` does know about the target —
its measured GEMM, GEMV and NCCL ceilings as fractions of its own peaks —
so, where both GPUs have such a ceiling, the η is scaled by the ratio of
the two fractions (B200's 8192³ GEMM reaches 66% of its peak, H100's 79%,
so B200's compute η's are H100's × 0.84). Where the MoE/MLA tables time
the same shapes on both GPUs (H200, B200 against H100), the ratio measured
there replaces the datasheet one (:mod:`.siblings`): it is the speed-up of
real kernels, per regime. Fixed costs are copied unchanged (the tiny
memory-bound MLA BMMs, ~5 µs, run at the same time on all three GPUs).

All-reduce on PCIe parts is different in kind: vLLM's custom all-reduce
needs NVLink (it is disabled on PCIe-only hosts), so those profiles get the
NCCL regime only, with η per group size = measured PCIe-only NCCL bus
bandwidth / link bandwidth (the target's own measurement, else that of a
PCIe-only host the datasheet table measured: :func:`pcie_reference`).

The ``copy`` rule is for the same kernels on a die of the same architecture
in another package (GB200 NVL72's GPU is a B200 at higher clocks): the
sibling's calibration whole, efficiencies being fractions of each profile's
own peaks.
"""
from __future__ import annotations

from ..profiles.hardware import AllReduceParams, Calibration, HardwareProfile, RooflineParams
from .assumptions import ITERATION_OVERHEAD_NOTE, OTHER_NOTE, SUSTAINED_NOTE
from .fit import round_sig
from .siblings import Regime


def pcie_reference(gpus: dict[str, HardwareProfile], ceilings: dict[str, dict]) -> HardwareProfile | None:
    """A PCIe-only GPU whose NCCL all-reduce the datasheet table measured (the
    first by name), whose bus bandwidth stands in for PCIe hosts without
    their own measurement; None if there is none."""
    for name in sorted(gpus):
        if gpus[name].interconnect.kind == "pcie" and ceilings.get(name, {}).get("busbw_gb_s"):
            return gpus[name]
    return None


def _ratio(target: dict, source: dict, key: str) -> float | None:
    if key in target and key in source:
        return target[key] / source[key]
    return None


def _scaled(p: RooflineParams, compute: float | None, memory: float | None) -> RooflineParams:
    upd = {}
    if compute is not None:
        upd["eta_compute"] = round_sig(min(1.0, p.eta_compute * compute))
    if memory is not None:
        upd["eta_memory"] = round_sig(min(1.0, p.eta_memory * memory))
    return p.model_copy(update=upd)


def _pcie_allreduce(src: AllReduceParams, gpu: HardwareProfile, ceil: dict,
                    reference: HardwareProfile | None, ref_ceil: dict) -> tuple[AllReduceParams, str]:
    if ceil.get("busbw_gb_s"):
        who, busbw, link = gpu.name, ceil["busbw_gb_s"], gpu.interconnect.bandwidth_gb_s
    elif reference is not None and ref_ceil.get("busbw_gb_s"):
        who, busbw, link = reference.name, ref_ceil["busbw_gb_s"], reference.interconnect.bandwidth_gb_s
    else:
        return (src.model_copy(update={"custom_max_bytes": 0.0}),
                "all-reduce: NCCL regime only (PCIe: no vLLM custom all-reduce), η and latency copied")
    etas = {n: round_sig(min(1.0, v / link)) for n, v in busbw.items()}
    return (src.model_copy(update={"custom_max_bytes": 0.0, "eta_by_gpus": etas, "eta_bandwidth": min(etas.values()),
                                   "ll_eta_bandwidth": min(src.ll_eta_bandwidth, min(etas.values()))}),
            f"all-reduce: NCCL regime only (PCIe: no vLLM custom all-reduce), η per group size = measured "
            f"NCCL busbw / link of {who} ({', '.join(f'{n} GPUs {v:g} GB/s' for n, v in busbw.items())}), "
            "latency copied")


def _nvlink_allreduce(src: AllReduceParams, src_gpu: HardwareProfile, gpu: HardwareProfile, src_ceil: dict,
                      ceil: dict) -> tuple[AllReduceParams, str]:
    have = ceil.get("busbw_gb_s", {})
    had = src_ceil.get("busbw_gb_s", {})
    ratios = {n: (have[n] / gpu.interconnect.bandwidth_gb_s) / (had[n] / src_gpu.interconnect.bandwidth_gb_s)
              for n in src.eta_by_gpus if n in have and n in had}
    if not ratios:
        return src, "all-reduce copied"
    etas = {n: round_sig(min(1.0, eta * ratios.get(n, 1.0))) for n, eta in src.eta_by_gpus.items()}
    note = ", ".join(f"{n} GPUs × {r:.3f}" for n, r in ratios.items())
    return (src.model_copy(update={"eta_by_gpus": etas, "eta_bandwidth": min(etas.values())}),
            f"all-reduce: custom regime copied, NCCL η scaled by the busbw fraction ratio ({note})")


def datasheet_ratios(target: str, source: str, ceilings: dict[str, dict]) -> dict[str, float | None]:
    """η ratios (target over source) of the datasheet-ceiling rule: measured/peak fractions."""
    src_ceil, ceil = ceilings.get(source, {}), ceilings.get(target, {})
    return {"compute": _ratio(ceil, src_ceil, "gemm_fraction"), "memory": _ratio(ceil, src_ceil, "gemv_fraction")}


def transfer(target: HardwareProfile, source: HardwareProfile, ceilings: dict[str, dict],
             pcie_ref: HardwareProfile | None = None,
             measured: dict[str, Regime] | None = None) -> Calibration:
    """A ``status: transferred`` calibration for ``target`` from ``source``'s fitted one.

    ``measured`` (:func:`.siblings.measure`) holds η ratios measured on
    kernels both GPUs ran; where it has a regime, it replaces the
    datasheet-ceiling ratio."""
    cal = source.calibration
    src_ceil, ceil = ceilings.get(source.name, {}), ceilings.get(target.name, {})
    ds = datasheet_ratios(target.name, source.name, ceilings)
    measured = measured or {}
    rc = measured["compute"].eta_ratio if "compute" in measured else ds["compute"]
    rm = measured["memory"].eta_ratio if "memory" in measured else ds["memory"]
    if target.interconnect.kind == "pcie":
        ar, ar_note = _pcie_allreduce(cal.allreduce, target, ceil, pcie_ref,
                                      ceilings.get(pcie_ref.name, {}) if pcie_ref is not None else {})
    else:
        ar, ar_note = _nvlink_allreduce(cal.allreduce, source, target, src_ceil, ceil)
        if target.interconnect.peer_links and not source.interconnect.peer_links:
            ar_note += (f" (η's of a switched fabric: on {target.name}'s mesh of {target.interconnect.peer_links} "
                        "peer links a group of n GPUs has n − 1 of them, which the cost model applies to the "
                        "link bandwidth)")
    def scale(r: float | None, what: str) -> str:
        if r is None:
            return f"{what} η copied"
        if what in measured:
            m = measured[what]
            return (f"{what} η × {r:.3f} (median speed-up over {source.name} ÷ roof ratio on {m.rows} rows of "
                    f"the same shapes: {m.what}; transferred-time error there median "
                    f"{m.error['measured'][0]:.1f}%, p90 {m.error['measured'][1]:.1f}%)")
        return (f"{what} η × {r:.3f} (ratio of measured-ceiling/peak fractions in hardware_datasheets.csv, "
                f"{'8192³ bf16 GEMM' if what == 'compute' else 'large bf16 GEMV'})")

    if rc is None and rm is None:
        etas = f"η's copied (no measured ratio or ceilings for {target.name})"
    else:
        etas = f"{scale(rc, 'compute')}, {scale(rm, 'memory')}"
    rule = (f"transferred from {source.name}, the nearest measured sibling ({target.name} has no kernel "
            f"measurements, so its errors are unknown): fixed costs copied; {etas}; {ar_note}. "
            f"{SUSTAINED_NOTE}. {OTHER_NOTE}; {ITERATION_OVERHEAD_NOTE}.")
    return cal.model_copy(update=dict(
        status="transferred",
        transferred_from=source.name,
        rule=rule,
        gemm=_scaled(cal.gemm, rc, rm),
        attention_prefill=_scaled(cal.attention_prefill, rc, rm),
        attention_decode=_scaled(cal.attention_decode, rc, rm),
        other=_scaled(cal.other, None, rm),
        allreduce=ar,
        error={},
        # Per-stack kernels are measured differences on the source; they say nothing of the target's links.
        stacks={},
    ))


def copied(target: HardwareProfile, sibling: HardwareProfile) -> Calibration:
    """``sibling``'s calibration for ``target`` (the ``copy`` rule)."""
    cal = sibling.calibration
    return cal.model_copy(update={
        "status": "transferred", "transferred_from": sibling.name, "error": {},
        "rule": (f"copied from {sibling.name} (same architecture and kernels; efficiencies are fractions of this "
                 f"profile's own peaks), whose own calibration is {cal.status}"
                 + (f" from {cal.transferred_from}" if cal.transferred_from else "") + f". {sibling.name}'s rule: "
                 + cal.rule)})


def fp8_note(sibling: str, rule: str) -> str:
    """The comment of the ``fp8_gemm_efficiency`` line a profile without fp8
    GEMM rows takes from ``sibling``'s fit with its calibration.

    The efficiency is a fraction of the bf16 GEMM fit's compute η, priced at
    the profile's own fp8 peak. Under ``copy`` it is copied as every η is;
    under ``scaled`` the rule scales that bf16 η by the target's measured
    ceilings, so the fraction stays the sibling's (no measured fp8 ceiling of
    the target says otherwise); scaling it too would scale twice."""
    why = ("copied as every η is, a fraction of this GPU's own peak" if rule == "copy" else
           "kept as a fraction of the bf16 GEMM η, which the rule scales")
    return (f"{sibling}'s, fitted by `llmsim calibrate` on its measured fp8 GEMMs and taken with its calibration "
            f"(transfer rule {rule}: no fp8 GEMM measured here; {why})")
