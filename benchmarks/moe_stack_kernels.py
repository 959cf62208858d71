"""How far is each stack's own MoE kernel from the vLLM kernel llmsim prices it with?

    python benchmarks/moe_stack_kernels.py [--data DIR] [--markdown docs/calibration-moe-stacks.md]

A hardware profile has one MoE parameter set per format and side, fitted
on vLLM's measured kernels (``moe_mla_calibration.py``); a stack whose own
kernel rows differ from what those price gets sets of its own
(``calibration.stacks.<stack>.moe`` / ``moe_ep``, :mod:`simulator.calibration.moe_stacks`).
This script compares the kernels themselves, vLLM's rows against each
stack's (``kernels/moe_more.csv.gz``: SGLang 0.5.14 and TensorRT-LLM
1.3.0rc20, timed by the same collector on the same shapes as vLLM's
``kernels/moe.csv.gz``): for each GPU, format and side (tp: no expert
parallelism, ep: with it) each stack's kernel is chosen by the rule that
chooses vLLM's (:func:`moe_mla.engine_kernels`, the kernel most model
shapes ran), and its time is divided by vLLM's on the same shape, layout
and token count, balanced router only. Nothing here runs the engine: it is
kernel data against kernel data.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from simulator.calibration import moe_mla  # noqa: E402
from simulator.costmodel import moe as M  # noqa: E402
from simulator.profiles.hardware import data_name_map  # noqa: E402
from simulator.validation import report  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import generated_section  # noqa: E402

ME = "benchmarks/moe_stack_kernels.py"
DATA = ROOT.parent / "shared" / "data"
FILES = ("moe.csv.gz", "moe_more.csv.gz")
STACKS = ("sglang", "trtllm")
# Kernels a deployment does not run for a gated model by default: TensorRT-LLM's
# opt-in min-latency mode and its kernel for non-gated experts (Nemotron-H).
NOT_DEFAULT = ("moe_torch_flow_min_latency", "moe_torch_flow_nongated")
# Token bands (inclusive bounds): decode batches, the middle, prefill chunks.
BANDS = (("decode", 1, 64), ("middle", 65, 2047), ("prefill", 2048, np.inf))
SHAPE = ["hidden_size", "moe_intermediate_size", "num_experts", "topk"]
KEY = ["gpu", "format", *SHAPE, "moe_tp", "moe_ep", "num_tokens"]
BEGIN, END = generated_section.markers("moe-stack-kernels", ME)
TITLE = "Calibration: MoE pricing in the engine"  # heads a page --markdown creates


def read(data: Path) -> pd.DataFrame:
    """Both kernel tables' balanced rows on the built-in profiles' GPUs
    (``gpu``: the profile's name), with llmsim's ``format`` names and each
    row's ``side``; vLLM's rows are those llmsim fits (its version, the
    checkpoint's kernel). Shapes of a group-limited router
    (:data:`moe_mla.GROUPED_TOPK_SHAPES`) are left out: vLLM's collector
    routes them again by the model's router, which piles pairs on rank 0,
    and TensorRT-LLM's does not, so their ratio would be the routers'."""
    df = pd.concat([pd.read_csv(data / "kernels" / f, low_memory=False) for f in FILES], ignore_index=True)
    names = data_name_map("system")
    df = df[(df["distribution"] == "balanced") & df["gpu"].isin(names) & ~df["kernel_source"].isin(NOT_DEFAULT)
            & ((df["framework"] != "vllm") | (df["framework_version"].astype(str) == moe_mla.MOE_VERSION))]
    formats = {d: M.moe_dtype(d) for d in df["moe_dtype"].unique()}
    df = df.assign(gpu=df["gpu"].map(names), moe_dtype=df["moe_dtype"].map(formats))
    vllm = (df["framework"] == "vllm").to_numpy()
    df = df[(~vllm | moe_mla.checkpoint_kernel(df)) & (moe_mla.router_groups(df)["n_group"] == 1).to_numpy()]
    return df.assign(format=df["moe_dtype"], side=np.where(df["moe_ep"] > 1, "ep", "tp")).reset_index(drop=True)


def kernel_rows(rows: pd.DataFrame) -> pd.DataFrame:
    """Per framework, GPU and format, the rows of the kernel each side runs
    (:func:`moe_mla.engine_kernels`), with its name in column ``kernel``:
    vLLM's kernel family (the unit llmsim fits), another stack's
    ``kernel_source``."""
    out = []
    for (fw, _, _), g in rows.groupby(["framework", "gpu", "format"], sort=False):
        fam = moe_mla.kernel_family(g) if fw == "vllm" else g["kernel_source"].to_numpy(dtype=object)
        base, with_ep = moe_mla.engine_kernels(g, fam)
        ep = (g["side"] == "ep").to_numpy()
        keep = np.where(ep, with_ep if with_ep is not None else base, base)
        out.append(g[keep].assign(kernel=fam[keep]))
    return pd.concat(out, ignore_index=True)


def ratios(rows: pd.DataFrame) -> pd.DataFrame:
    """Each stack's median time over vLLM's on the same key (:data:`KEY`),
    one row per matched key: ``stack``, the key, ``side``, both kernels and ``ratio``."""
    rows = kernel_rows(rows)
    med = rows.groupby(["framework", *KEY, "side", "kernel"], as_index=False)["latency_ms"].median()
    vllm = med[med["framework"] == "vllm"].drop(columns=["framework", "side"])
    vllm = vllm.rename(columns={"kernel": "vllm_kernel", "latency_ms": "vllm_ms"})
    stacks = med[med["framework"].isin(STACKS)].rename(columns={"framework": "stack"})
    both = stacks.merge(vllm, on=KEY, how="inner")
    return both.assign(ratio=both["latency_ms"] / both["vllm_ms"])


def summary(pairs: pd.DataFrame) -> pd.DataFrame:
    """One row per stack, GPU, format and side: the kernels, the matched
    shapes and the median ratio in each token band (NaN: none measured)."""
    tokens = pairs["num_tokens"].to_numpy()
    band = np.full(len(pairs), "", dtype=object)
    for name, lo, hi in BANDS:
        band[(tokens >= lo) & (tokens <= hi)] = name
    pairs = pairs.assign(band=band, shape=moe_mla.shape_label(pairs))

    def stats(g: pd.DataFrame) -> pd.Series:
        med = g.groupby("band")["ratio"].median()
        return pd.Series({"kernel": " / ".join(sorted(g["kernel"].unique())),
                          "vLLM kernel": " / ".join(sorted(g["vllm_kernel"].unique())),
                          "shapes": g["shape"].nunique(),
                          **{_band_label(n, lo, hi): med.get(n, np.nan) for n, lo, hi in BANDS}})
    keys = ["stack", "gpu", "format", "side"]
    if pairs.empty:
        return pd.DataFrame(columns=[*keys, "kernel", "vLLM kernel", "shapes", *(_band_label(*b) for b in BANDS)])
    out = pairs.groupby(keys).apply(stats, include_groups=False).reset_index().astype({"shapes": int})
    order = out.assign(side=out["side"].map({"tp": 0, "ep": 1})).sort_values(keys).index
    return out.loc[order].reset_index(drop=True)


def _band_label(name: str, lo: float, hi: float) -> str:
    return f"{name} ≥{lo:,}" if hi == np.inf else f"{name} {lo:,}–{hi:,}"


def versions(rows: pd.DataFrame) -> str:
    """"vllm 0.24.0, sglang 0.5.14, ...": each framework's measured version(s)."""
    got = rows.groupby("framework", sort=False)["framework_version"].unique()
    return ", ".join(f"{fw} {'/'.join(sorted(map(str, got[fw])))}" for fw in ("vllm", *STACKS) if fw in got)


def markdown(table: pd.DataFrame, wall: float, cmd: str, measured: str = "") -> str:
    head = (f"Generated {time.strftime('%Y-%m-%d')} by `{cmd}` "
            f"({wall:.0f} s wall{'; ' + measured if measured else ''}). "
            f"Ratio = the stack's kernel time / vLLM's "
            f"(the kernel llmsim prices), median over the matched shapes, layouts and token counts of each "
            f"band (tokens on the rank); balanced router; shapes: model shapes measured on both.\n\n")
    parts = []
    for stack, t in table.groupby("stack", sort=True):
        parts.append(f"**{stack}**\n\n" + report.markdown(t.drop(columns="stack"), floatfmt="{:.2f}"))
    return head + "\n\n".join(parts)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=DATA, help="shared data folder (default: %(default)s)")
    ap.add_argument("--markdown", type=Path, metavar="PATH", help="rewrite the generated block of this file")
    args = ap.parse_args(argv)
    missing = [f for f in FILES if not (args.data / "kernels" / f).is_file()]
    if missing:
        print(f"moe_stack_kernels: skipped: no kernels/{', kernels/'.join(missing)} under {args.data} (the shared "
              f"data; it is expected at ../shared/data next to the repository).")
        return 0
    t0 = time.time()
    rows = read(args.data)
    table = summary(ratios(rows))
    cmd = generated_section.command(ME, options=[("--data", args.data if args.data != DATA else None),
                                                 ("--markdown", args.markdown)])
    text = markdown(table, time.time() - t0, cmd, versions(rows))
    print(text)
    generated_section.write(args.markdown, text, BEGIN, END, TITLE)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
