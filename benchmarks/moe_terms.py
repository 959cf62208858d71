"""What each term of a row-padding MoE form buys, refitted without it.

    python benchmarks/moe_terms.py --kernel matmul_ogs [--gpu h100-sxm] [--stride 1]
    python benchmarks/moe_terms.py --kernel trtllm_gen [--format nvfp4] [--stride 1]
    python benchmarks/moe_terms.py --kernel cutlass [--gpu h100-sxm] [--stride 1]

``matmul_ogs``: OpenAI's Triton experts (vLLM's gpt-oss MXFP4 method on
Hopper), priced with the kernel's row blocks (``MoeParams.row_padding``),
its width padding (``width_align`` 64) and two terms of its expert-parallel
path (``ep_routing_us``, ``local_pair_traffic``), on the w4a16_mxfp4 rows of
H100 and H200; the last column is the wide expert-parallel layouts (ep ≥ 16,
≥ 2048 tokens) where whole-batch and per-rank pair traffic part.
``trtllm_gen``: FlashInfer's TRT-LLM-gen experts (vLLM on B200), priced
with the launcher's default token tile (``token_tiles``) and the rank's
pair traffic (``local_pair_traffic``), on each format's rows of that kernel
family; ``cutlass``: FlashInfer's CUTLASS experts (per-tensor FP8 and, at
ep > 1, block FP8 on Hopper; B200's fallback shapes), priced with their
default 128-row token tile, its width (``tile_n``) and, for Hopper's
grouped GEMM, the cost of a part-filled tile's padding rows
(``pad_row_cost``); the last columns are the 1-token rows and the balanced
router's rows (every expert of the rank as full as the others).

Each variant is fitted as ``benchmarks/moe_mla_calibration.py`` fits a
kernel family (in-sample on every row, and leave-one-shape-out); prints APE
median / p90 as a markdown table.
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
from simulator.costmodel import moe as M  # noqa: E402
from simulator.profiles import load_hardware  # noqa: E402


def _centre_tile(pairs_all, local_experts, token_tiles=()):
    """The launcher's centre tile itself (what an autotuned tactic could pick), not the one below it."""
    if not len(token_tiles):
        return _ROW_BLOCK(pairs_all, local_experts, token_tiles)
    ladder = np.asarray(token_tiles, dtype=float)
    avg = np.maximum(np.ceil(np.asarray(pairs_all, dtype=float) / local_experts), 1.0)
    return np.clip(2.0 ** np.ceil(np.log2(avg)), ladder[0], ladder[-1])


_ROW_BLOCK = M.row_block
_TILES = ("row_padding", "token_tiles", "tile_n")
_ONE_TOKEN = ("LOSO 1 token", lambda r: r["num_tokens"] == 1)
_BALANCED = ("LOSO balanced router", lambda r: r["distribution"] == "balanced")
# Kernel → (GPUs, formats, kernel family, variants, the last columns' rows).
# A variant: (kernel constants dropped, expert-parallel terms kept, row-block rule, constants overridden)
# and optionally the padding-row term kept (F.MOE_PAD unless given).
KERNELS = {
    "matmul_ogs": (("h100-sxm", "h200"), ("w4a16_mxfp4",), "triton", {
        "full form": ((), F.MOE_OGS, _ROW_BLOCK, {}),
        "without row blocks (grouped roofline)": (("row_padding",), (), _ROW_BLOCK, {}),
        "without ep_routing_us": ((), tuple(n for n in F.MOE_OGS if n != "ep_routing_us"), _ROW_BLOCK, {}),
        "pair traffic over the whole batch (no local_pair_traffic)": (
            (), tuple(n for n in F.MOE_OGS if n != "local_pair_traffic"), _ROW_BLOCK, {}),
        "without both expert-parallel terms": ((), (), _ROW_BLOCK, {}),
        "without width_align 64": (("width_align",), F.MOE_OGS, _ROW_BLOCK, {}),
    }, (("LOSO ep ≥ 16, ≥ 2048 tokens", lambda r: (r["moe_ep"] >= 16) & (r["num_tokens"] >= 2048)),)),
    "trtllm_gen": (("b200",), ("nvfp4", "fp8", "bf16", "fp8_block", "w4a8", "w4a16_mxfp4"), "flashinfer_trtllm", {
        "full form": ((), F.MOE_OGS, _ROW_BLOCK, {}),
        "without token tiles (grouped roofline)": (_TILES, (), _ROW_BLOCK, {}),
        "tile at the launcher's centre, not below it": ((), F.MOE_OGS, _centre_tile, {}),
        "pair traffic over the whole batch (no local_pair_traffic)": ((), (), _ROW_BLOCK, {}),
        "without MXFP4's hidden padding to 256": (("hidden_align",), F.MOE_OGS, _ROW_BLOCK, {}),
    }, (_ONE_TOKEN,)),
    "cutlass": (("h100-sxm", "h200", "b200"), ("fp8", "fp8_block", "bf16", "nvfp4"), "flashinfer_cutlass", {
        "full form": ((), F.MOE_OGS, _ROW_BLOCK, {}),
        "without the 128-row tile (grouped roofline)": (_TILES, (), _ROW_BLOCK, {}),
        "tile 128 columns wide": ((), F.MOE_OGS, _ROW_BLOCK, {"tile_n": 128}),
        "padding rows cost as real ones (no pad_row_cost)": ((), F.MOE_OGS, _ROW_BLOCK, {}, ()),
    }, (_ONE_TOKEN, _BALANCED)),
}


def _stats(e: np.ndarray) -> str:
    e = e[~np.isnan(e)]
    return f"{np.median(e):.1f}% / {np.percentile(e, 90):.1f}%" if len(e) else "n/a"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kernel", choices=sorted(KERNELS), default="matmul_ogs")
    ap.add_argument("--gpu", action="append", help="GPUs (default: the kernel's)")
    ap.add_argument("--format", action="append", help="MoE formats (default: the kernel's)")
    ap.add_argument("--stride", type=int, default=1, help="keep every N-th token count in the fits")
    a = ap.parse_args()
    gpu_names, formats, family, variants, last_columns = KERNELS[a.kernel]
    for name, allowed in ((a.gpu, gpu_names), (a.format, formats)):
        bad = sorted(set(name or ()) - set(allowed))
        if bad:
            ap.error(f"{', '.join(bad)}: {a.kernel} is measured on {', '.join(allowed)} only")
    gpus = {g: load_hardware(g) for g in (a.gpu or gpu_names)}
    formats = tuple(a.format or formats)
    data = X.load(default_data_dir(), gpus, moe_formats=formats)
    constants, ogs, pad = F.moe_kernel_constants, F.MOE_OGS, F.MOE_PAD
    print("| GPU | format | form | in-sample | leave-one-shape-out | " + " | ".join(c for c, _ in last_columns) + " |")
    print("|---|---|---|---:|---:|" + "---:|" * len(last_columns))
    for name, gpu in gpus.items():
        for fmt in formats:
            rows = data.moe_rows(name)
            rows = rows[(rows["moe_dtype"] == fmt) & (rows["kernel"] == family)].reset_index(drop=True)
            if not len(rows):
                continue
            sels = [r(rows).to_numpy() for _, r in last_columns]
            for label, (dropped, ep_terms, rule, override, *kept) in variants.items():
                if dropped and not set(dropped) & set(constants(rows)):
                    continue   # the slice's kernel has no such property: the full form again
                if kept and not set(pad) & set(F.space("moe", rows).names):
                    continue   # no padding-row term in this slice's form: the full form again
                F.moe_kernel_constants = lambda df, d=dropped, o=override: {
                    **{k: v for k, v in constants(df).items() if k not in d}, **(o if constants(df) else {})}
                F.MOE_OGS, F.MOE_PAD, M.row_block = ep_terms, (kept[0] if kept else pad), rule
                try:
                    fit = X.fit_moe(X.thin_tokens(rows, a.stride), gpu)
                    e_in = ape(X.predict_moe(rows, gpu, fit.params), rows["t_s"].to_numpy())
                    e_out = X.leave_one_shape_out(rows, gpu, fit, a.stride)
                finally:
                    F.moe_kernel_constants, F.MOE_OGS, F.MOE_PAD, M.row_block = constants, ogs, pad, _ROW_BLOCK
                print(f"| {name} | {fmt} | {label} | {_stats(e_in)} | {_stats(e_out)} | "
                      + " | ".join(_stats(e_out[s]) for s in sels) + " |", flush=True)


if __name__ == "__main__":
    main()
