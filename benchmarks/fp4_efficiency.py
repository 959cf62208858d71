"""How fast dense FP4 (NVFP4) GEMMs really run on Blackwell, read from the MLA kernel fits.

    python benchmarks/fp4_efficiency.py            # print the ratios per GPU and format
    python benchmarks/fp4_efficiency.py --write    # also write fp4_gemm_efficiency into b200 (and gb200-nvl72)

A datasheet quadruples the tensor-core peak for FP4 (B200: 9,000 against
2,250 dense TFLOP/s), and the dense GEMM fit llmsim prices linear layers
with is a bf16 fit. Priced at the FP4 peak with the bf16 fit's efficiency,
an NVFP4 prefill would take a quarter of the time of a bf16 one.

The shared kernel data holds no dense FP4 GEMM table, but it holds the
same linear layers in bf16, block fp8 and NVFP4: the projections of
vLLM's MLA attention modules (``kernels/mla.csv.gz``, DeepSeek-V3 shapes,
q/kv down-projections, q up-projection and the output projection, the
NVFP4 ones with their activation quantisation), which ``llmsim calibrate``
fits per format as ``calibration.mla_projection`` (efficiencies are
fractions of each format's own peak). The ratio of a format's compute
efficiency to bf16's is what ``fp8_gemm_efficiency`` and
``fp4_gemm_efficiency`` mean. This script prints that ratio for every
GPU with such fits, next to the value each profile carries, and the same
ratio read off the fitted projection times at large token counts
(whole projections, quantisation included) for 128 and 16 heads per
GPU, as its spread.

The block-fp8 ratio is a check, not a source: the profiles' fp8 value is
fitted on end-to-end rows (benchmarks/fp8_efficiency.py). The NVFP4 ratio
is the only measurement of FP4 linear layers the shared data holds, so
``--write`` takes it for B200 and, by the transfer rule its calibration
follows, GB200 NVL72.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fp8_efficiency import write  # noqa: E402  (also puts the repository on sys.path)

from simulator.calibration.moe_mla import _shape  # noqa: E402
from simulator.costmodel.mla import mla_projection_time  # noqa: E402
from simulator.profiles import load_hardware  # noqa: E402

GPUS = ("h100-sxm", "h200", "b200")
FORMATS = {"fp8_block": ("fp8", 2.0), "nvfp4": ("fp4", 4.0)}   # format -> (compute dtype, peak over bf16)
WRITE_TO = {"b200": "b200", "gb200-nvl72": "b200"}             # profile -> GPU whose fit it takes
TOKENS = 16384


def ratios(gpu_name: str) -> dict[str, dict[str, float]]:
    """Per format: the compute-efficiency ratio to bf16, and the time-based one at 128 and 16 heads."""
    gpu = load_hardware(gpu_name)
    fits = gpu.calibration.mla_projection
    out: dict[str, dict[str, float]] = {}
    if "bf16" not in fits:
        return out
    for fmt, (cdt, peak_ratio) in FORMATS.items():
        if fmt not in fits:
            continue
        row = {"eta_ratio": fits[fmt].eta_compute / fits["bf16"].eta_compute,
               "profile": gpu.linear_efficiency(cdt)}
        for heads in (128, 16):
            s = _shape(heads)
            t16 = mla_projection_time(TOKENS, s, gpu, fits["bf16"], "bf16")
            tq = mla_projection_time(TOKENS, s, gpu, fits[fmt], fmt)
            row[f"time_{heads}"] = t16 / tq / peak_ratio
        out[fmt] = row
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--write", action="store_true", help="write the NVFP4 ratio into b200 and gb200-nvl72")
    args = ap.parse_args(argv)
    table = {g: ratios(g) for g in GPUS}
    print(f"| GPU | format | efficiency ratio to bf16 (compute roof) | from projection times, {TOKENS} tokens, "
          "128 / 16 heads | profile carries |")
    print("|---|---|---:|---:|---:|")
    for g, rows in table.items():
        for fmt, r in rows.items():
            print(f"| {g} | {fmt} | {r['eta_ratio']:.3f} | {r['time_128']:.3f} / {r['time_16']:.3f} | "
                  f"{r['profile']:g} |")
    if args.write:
        for target, source in WRITE_TO.items():
            eff = round(table[source]["nvfp4"]["eta_ratio"], 2)
            note = ("the NVFP4/bf16 compute-efficiency ratio of its MLA-projection kernel fits, by "
                    "`python benchmarks/fp4_efficiency.py --write` (docs/calibration.md)") if target == source else \
                   (f"copied from {source} with its calibration, by `python benchmarks/fp4_efficiency.py --write`")
            write(eff, (target,), note, key="fp4_gemm_efficiency")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
