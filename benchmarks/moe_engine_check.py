"""Does the engine price a model's experts as the measured kernels ran them?

    python benchmarks/moe_engine_check.py [--data DIR] [--markdown docs/calibration-moe-engine.md]

The kernel fit (``moe_mla_calibration.py``) scores the MoE form row by row,
with each row's own kernel family and its router's real statistics. A
simulation goes another way: a model config and a pool's ``weight_dtype``
pick the expert format (``costmodel.layout.gemm_format``), the hardware
profile gives that format's one stored parameter set, and routing is taken
uniform. This check runs that path: for every model of the shared corpus
(``models/moe/*.yaml``) whose expert shape the measured table
(``kernels/moe.csv.gz``) holds, on every GPU, format and expert layout a
replica can run (``moe_tp`` within one NVLink domain), it compares
``LayoutOps.routed_time`` of one layer with the measured times, and
reports the errors per model, GPU and format, against the balanced and the
power-law routers' rows apart. A wrong format mapping or a parameter set
fitted on another kernel family shows as a large signed error here while
the kernel fit's own table stays good.
"""
from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from simulator.calibration import moe_mla  # noqa: E402
from simulator.costmodel import CostModel  # noqa: E402
from simulator.costmodel.layout import gemm_format  # noqa: E402
from simulator.errors import LlmsimError  # noqa: E402
from simulator.profiles import load_hardware, load_model  # noqa: E402
from simulator.profiles.hardware import builtin_hardware  # noqa: E402
from simulator.validation import report  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import generated_section  # noqa: E402

ME = "benchmarks/moe_engine_check.py"
DATA = ROOT.parent / "shared" / "data"
# Each measured format (llmsim's names), as a pool asks for it: (weight_dtype, mxfp4_activation).
POOL_DTYPE = {"bf16": ("bf16", None), "fp8": ("fp8", None), "fp8_block": ("fp8", None), "int4_wo": ("int4", None),
              "nvfp4": ("nvfp4", None), "w4a16_mxfp4": ("mxfp4", "bf16"), "w4a8": ("mxfp4", "mxfp8")}
BEGIN, END = generated_section.markers("moe-engine-check", ME)
TITLE = "Calibration: MoE pricing in the engine"  # heads a page --markdown creates


def _layout(heads: int, gpus: int, domain: int) -> tuple[int, int] | None:
    """(tp, dp) with tp·dp = gpus: the widest attention tp that divides the heads and fits the domain."""
    for tp in range(min(gpus, domain), 0, -1):
        if gpus % tp == 0 and heads % tp == 0:
            return tp, gpus // tp
    return None


def compare(data: Path, only: set[str] | None = None) -> pd.DataFrame:
    """One row per measured kernel row the engine can price: measured and engine seconds
    (``only``: the corpus configs of these names). The rows are the kernel
    fit's (``moe_mla.load``): the checkpoint's own kernel only, and none
    faster than reading the touched weights once."""
    gpus = {name: load_hardware(name) for name in moe_mla.measured(data, builtin_hardware())}
    table = moe_mla.load(data, gpus)
    models = []
    for path in sorted((data / "models" / "moe").glob("*.yaml")):
        if only is not None and path.stem not in only:
            continue
        try:
            m = load_model(str(path))
        except LlmsimError:
            continue
        if m.is_moe:
            models.append(m)
    out = []
    for name, gpu in gpus.items():
        gpu_rows = table.moe_rows(name)
        for m in models:
            rows = gpu_rows[(gpu_rows.hidden_size == m.hidden_size) & (gpu_rows.moe_intermediate_size == m.expert_ffn)
                            & (gpu_rows.num_experts == m.num_experts) & (gpu_rows.topk == m.topk)]
            for (fmt, moe_tp, ep), grp in rows.groupby(["moe_dtype", "moe_tp", "moe_ep"]):
                wd, act = POOL_DTYPE[str(fmt)]
                try:
                    if gemm_format(wd, m.checkpoint_dtype, gpu.has_unit("fp4"), act) != fmt:
                        continue   # this config's checkpoint does not run this format
                    lay = _layout(m.num_attention_heads, int(moe_tp * ep), gpu.interconnect.max_tp)
                    if lay is None:
                        continue
                    cm = CostModel(m, gpu, tp=lay[0], dp=lay[1], ep=int(ep), weight_dtype=wd, mxfp4_activation=act)
                except LlmsimError:
                    continue   # a layout or format this GPU/model cannot run
                ops = cm.ops
                priced = {t: ops.routed_time(int(t)) / ops.n_moe for t in grp.num_tokens.unique()}
                out.append(pd.DataFrame({
                    "model": m.name, "gpu": name, "format": fmt, "moe_tp": moe_tp, "ep": ep,
                    "kernel_source": grp.kernel_source.values, "distribution": grp.distribution.values,
                    "tokens": grp.num_tokens.values, "measured_s": grp.t_s.values,
                    "engine_s": grp.num_tokens.map(priced).values}))
    return pd.concat(out, ignore_index=True) if out else pd.DataFrame()


def summary(rows: pd.DataFrame) -> pd.DataFrame:
    rows = rows.assign(err=100 * (rows.engine_s / rows.measured_s - 1),
                       router=np.where(rows.distribution == "balanced", "balanced", "power-law"))

    def stats(g: pd.DataFrame) -> pd.Series:
        med = g.groupby("router").err.median()
        return pd.Series({"rows": len(g), "layouts": g[["moe_tp", "ep"]].drop_duplicates().shape[0],
                          "median |err| %": g.err.abs().median(), "p90 |err| %": g.err.abs().quantile(0.9),
                          "signed, balanced %": med.get("balanced", math.nan),
                          "signed, power-law %": med.get("power-law", math.nan)})
    out = rows.groupby(["model", "gpu", "format"]).apply(stats, include_groups=False).reset_index()
    return out.astype({"rows": int, "layouts": int})


def markdown(table: pd.DataFrame, wall: float, cmd: str) -> str:
    head = (f"Generated {time.strftime('%Y-%m-%d')} by `{cmd}` ({wall:.0f} s wall). "
            f"Error = (engine − measured) / measured, over every measured row of the model's expert shape, "
            f"format and a layout a replica can run.\n\n")
    return head + report.markdown(table)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=DATA)
    ap.add_argument("--markdown", type=Path, help="rewrite the generated block of this file")
    args = ap.parse_args()
    if not (args.data / "kernels" / "moe.csv.gz").exists():
        raise SystemExit(f"{args.data}: no kernels/moe.csv.gz (the shared data)")
    t0 = time.time()
    table = summary(compare(args.data))
    cmd = generated_section.command(ME, options=[("--data", args.data if args.data != DATA else None),
                                                 ("--markdown", args.markdown)])
    text = markdown(table, time.time() - t0, cmd)
    print(text)
    generated_section.write(args.markdown, text, BEGIN, END, TITLE)


if __name__ == "__main__":
    main()
