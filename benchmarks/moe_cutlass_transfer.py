"""B200's CUTLASS fallback shapes predicted from other GPUs' CUTLASS rows.

    python benchmarks/moe_cutlass_transfer.py [--data DIR]

FlashInfer runs its CUTLASS MoE kernels on B200 only for the few shapes its
TRT-LLM-gen kernels refuse (two model shapes in bf16, one in fp8 and one in
NVFP4 in the tables), too few to fit on their own. This asks whether a
CUTLASS parameter set shared across GPUs — every parameter common, each row
priced with its own GPU's peaks, bandwidth, SM count and its architecture's
default tile width (``fit.CUTLASS_TILE_N``) — predicts them held out: each
B200 shape (all its formats) is predicted by one set fitted without it, on

* ``b200``: B200's other CUTLASS rows (the other shape, other formats);
* ``hopper_fp8``: Hopper's per-tensor FP8 rows (H100 and H200), which run the
  same TMA warp-specialised grouped GEMM as B200's fallback, with SM90's
  default 128x16 tile; ``+b200`` adds B200's other CUTLASS rows;
* ``hopper_fp8_block``: Hopper's block-FP8 rows at ep > 1, which FlashInfer's
  CUTLASS MoE runs with its DeepSeek block-scale GEMM runner instead of the
  grouped GEMM; ``+b200`` likewise;
* ``trtllm``: the format's TRT-LLM-gen fit on B200 (what the engine prices
  these shapes with).

Prints APE median / p90 per held-out shape and format as a markdown table
(a few minutes on two cores).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from simulator.calibration import fit as F  # noqa: E402
from simulator.calibration import moe_mla as X  # noqa: E402
from simulator.calibration.data import default_data_dir  # noqa: E402
from simulator.calibration.fit import ape, fit_params, space  # noqa: E402
from simulator.profiles import load_hardware  # noqa: E402
from simulator.profiles.hardware import HardwareProfile, MoeParams  # noqa: E402

SOURCES = ("b200", "hopper_fp8", "hopper_fp8+b200", "hopper_fp8_block", "hopper_fp8_block+b200", "trtllm")


def _tile_n(profile: str, fmt: str) -> int:
    widths = F.CUTLASS_TILE_N[load_hardware(profile).sm_version]
    return widths.get(fmt, widths[""])


def predict(rows: pd.DataFrame, gpus: dict[str, HardwareProfile], p: MoeParams) -> np.ndarray:
    """Each (GPU, format) group of ``rows`` at its own roofline and default tile width."""
    out = np.empty(len(rows))
    for (prof, fmt), idx in rows.groupby(["profile", "moe_dtype"]).indices.items():
        out[idx] = X.predict_moe(rows.iloc[idx], gpus[prof], p.model_copy(update=dict(tile_n=_tile_n(prof, fmt))))
    return out


# Two rows that give the space of that form (kernel constants, expert-parallel and padding-row terms).
_HOPPER_FP8 = pd.DataFrame({"kernel_source": ["_flashinfer_cutlass_"] * 2, "moe_dtype": ["fp8"] * 2,
                            "profile": ["h100-sxm"] * 2, "moe_ep": [1, 8], "hidden_size": [4096] * 2,
                            "moe_intermediate_size": [4096] * 2, "moe_tp": [1, 1]})


def shared_fit(train: pd.DataFrame, gpus: dict[str, HardwareProfile]) -> MoeParams:
    """One parameter set for every row of ``train`` (the CUTLASS form of
    per-tensor FP8 on Hopper, padding-row term included)."""
    train = X.fit_subset(train.reset_index(drop=True))
    sp = space("moe", _HOPPER_FP8)
    starts = (tuple({**F._MOE_START, **X._MOE_STARTS[0]}[n] for n in sp.names),)
    return fit_params("moe", sp, lambda p: predict(train, gpus, p), train["t_s"].to_numpy(), starts).params


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=None)
    a = ap.parse_args()
    gpus = {g: load_hardware(g) for g in ("h100-sxm", "h200", "b200")}
    data = X.load(a.data or default_data_dir(), gpus, moe_formats=("bf16", "fp8", "fp8_block", "nvfp4"))
    rows = data.moe.reset_index(drop=True)
    cut = rows[rows["kernel"] == "flashinfer_cutlass"]
    b200 = cut[cut["profile"] == "b200"]
    hopper = {f: cut[(cut["profile"] != "b200") & (cut["moe_dtype"] == f)] for f in ("fp8", "fp8_block")}
    print("| held-out B200 shape | format | rows | " + " | ".join(SOURCES) + " |")
    print("|---|---|---:|" + "---:|" * len(SOURCES))
    for held in sorted(b200["shape"].unique()):
        test = b200[b200["shape"] == held].reset_index(drop=True)
        others = b200[b200["shape"] != held]
        res = {}
        for src in SOURCES:
            if src == "trtllm":
                pred = np.empty(len(test))
                for fmt, idx in test.groupby("moe_dtype").indices.items():
                    trt = rows[(rows["profile"] == "b200") & (rows["moe_dtype"] == fmt)
                               & (rows["kernel"] == "flashinfer_trtllm")].reset_index(drop=True)
                    pred[idx] = X.predict_moe(test.iloc[idx], gpus["b200"], X.fit_moe(trt, gpus["b200"]).params)
            else:
                base, _, plus = src.partition("+")
                parts = [others] if base == "b200" else [hopper[base.removeprefix("hopper_")]]
                parts = [p[p["shape"] != held] for p in parts] + ([others] if plus else [])
                pred = predict(test, gpus, shared_fit(pd.concat(parts), gpus))
            res[src] = ape(pred, test["t_s"].to_numpy())
        for fmt in sorted(test["moe_dtype"].unique()):
            sel = (test["moe_dtype"] == fmt).to_numpy()
            cells = [f"{np.median(res[s][sel]):.1f}% / {np.percentile(res[s][sel], 90):.1f}%" for s in SOURCES]
            print(f"| {held} | {fmt} | {int(sel.sum())} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
