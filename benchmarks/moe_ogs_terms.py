"""What each term of the ``matmul_ogs`` MoE form buys on gpt-oss's MXFP4 rows (Hopper).

    python benchmarks/moe_ogs_terms.py [--gpu h100-sxm] [--stride 1]

OpenAI's Triton ``matmul_ogs`` experts (vLLM's gpt-oss MXFP4 method on
Hopper) are priced with the kernel's row blocks (``MoeParams.row_padding``),
its width padding (``width_align`` 64) and two terms of its expert-parallel
path (``ep_routing_us``, ``local_pair_traffic``). This refits the slice with
each left out, as ``benchmarks/moe_mla_calibration.py`` fits it (in-sample
on every row, and leave-one-shape-out over the two gpt-oss shapes), and
prints APE median / p90, overall and for the wide expert-parallel layouts
(ep ≥ 16, ≥ 2048 tokens) where whole-batch and per-rank pair traffic part.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from simulator.calibration import fit as F  # noqa: E402
from simulator.calibration import moe_mla as X  # noqa: E402
from simulator.calibration.data import default_data_dir  # noqa: E402
from simulator.calibration.fit import ape  # noqa: E402
from simulator.profiles import load_hardware  # noqa: E402

FORMAT = "w4a16_mxfp4"
# Variant → (kernel constants dropped, expert-parallel terms kept).
VARIANTS = {
    "full form": ((), F.MOE_OGS),
    "without row blocks (grouped roofline)": (("row_padding",), ()),
    "without ep_routing_us": ((), tuple(n for n in F.MOE_OGS if n != "ep_routing_us")),
    "pair traffic over the whole batch (no local_pair_traffic)": ((), tuple(n for n in F.MOE_OGS
                                                                            if n != "local_pair_traffic")),
    "without both expert-parallel terms": ((), ()),
    "without width_align 64": (("width_align",), F.MOE_OGS),
}


def _stats(e: np.ndarray) -> str:
    return f"{np.median(e):.1f}% / {np.percentile(e, 90):.1f}%"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gpu", action="append", choices=("h100-sxm", "h200"))
    ap.add_argument("--stride", type=int, default=1, help="keep every N-th token count in the fits")
    a = ap.parse_args()
    gpus = {g: load_hardware(g) for g in (a.gpu or ["h100-sxm", "h200"])}
    data = X.load(default_data_dir(), gpus, moe_formats=(FORMAT,))
    constants = F.moe_kernel_constants
    print("| GPU | form | in-sample | leave-one-shape-out | LOSO ep ≥ 16, ≥ 2048 tokens |")
    print("|---|---|---:|---:|---:|")
    for name, gpu in gpus.items():
        rows = data.moe_rows(name).reset_index(drop=True)
        wide = ((rows["moe_ep"] >= 16) & (rows["num_tokens"] >= 2048)).to_numpy()
        for label, (dropped, ep_terms) in VARIANTS.items():
            F.moe_kernel_constants = lambda df, d=dropped: {k: v for k, v in constants(df).items() if k not in d}
            F.MOE_OGS = ep_terms
            fit = X.fit_moe(X.thin_tokens(rows, a.stride), gpu)
            e_in = ape(X.predict_moe(rows, gpu, fit.params), rows["t_s"].to_numpy())
            e_out = X.leave_one_shape_out(rows, gpu, fit, a.stride)
            print(f"| {name} | {label} | {_stats(e_in)} | {_stats(e_out)} | {_stats(e_out[wide])} |", flush=True)


if __name__ == "__main__":
    main()
