"""Each stack's MLA prefill kernel against the one llmsim's MLA calibration prices, from the measured kernels.

    python benchmarks/mla_stack_kernels.py            # the ratios per GPU and stack
    python benchmarks/mla_stack_kernels.py --write    # also write mla_prefill_efficiency into the GPU profiles

A hardware profile's ``calibration.mla_prefill`` is fitted on vLLM's MLA
attention modules (``kernels/mla.csv.gz``) and every stack uses it. The
shared data also times each stack's own MLA prefill attention kernel on the
same shapes (``context_mla_perf``: SGLang 0.5.14 and TensorRT-LLM 1.3.0rc20
in ``kernels/mla_more.csv.gz``, vLLM 0.14.0 in ``kernels/mla.csv.gz``;
DeepSeek-V3 dimensions, bf16 attention, bf16 and fp8 KV, 1-256 prompts of
1-16,384 tokens). Only the compute-bound calls decide a prefill's attention
time and only there is vLLM's kernel row free of the per-call overhead its
collection carries, so each stack is read on the calls of at least
:data:`MIN_GFLOP` of attention math: the median over those shapes of
TensorRT-LLM's time over the stack's, TensorRT-LLM's kernel being the
clean reference whose compute-bound time matches vLLM's (the table's
vLLM/TensorRT-LLM row) and so the kernel the calibration describes. A stack
whose ratio differs from 1 by more than :data:`MATERIAL` gets it as its
``mla_prefill_efficiency`` on that GPU: its MLA prefill is priced with the
calibration's parameters at that fraction of their compute efficiency
(``HardwareProfile.for_kernels``).

SGLang on Hopper runs DeepSeek's prefill attention as FlashAttention-3 with
192-wide heads and reaches about 0.3 of the reference's rate, H100 and H200
alike; on Blackwell it runs TensorRT-LLM's own MLA kernel (``trtllm_mla``)
and matches it. H100 PCIe takes H100 SXM's values (the same die and kernels).
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
from accuracy import DATA  # noqa: E402  (also puts the repository on sys.path)
from fp8_efficiency import write  # noqa: E402

from simulator.calibration.moe_mla import _per_heads, _read  # noqa: E402
from simulator.costmodel.mla import mla_prefill_flops_bytes  # noqa: E402
from simulator.profiles import load_hardware  # noqa: E402
from simulator.profiles.hardware import builtin_hardware, data_name_map  # noqa: E402

REFERENCE = "trtllm"
STACKS = ("vllm", "sglang")
MIN_GFLOP = 1000.0            # attention math per call: a compute-bound call
MATERIAL = 0.10
COPIES = {"h100-pcie": "h100-sxm"}
KEY = "mla_prefill_efficiency"
_SHAPE = ["profile", "num_heads_per_gpu", "batch_size", "isl", "kv_cache_dtype"]


def kernel_rows(data_dir: Path) -> pd.DataFrame:
    """Every stack's bf16 MLA prefill kernel rows, one collection per stack (its newest release)."""
    names = data_name_map("system", builtin_hardware())
    df = pd.concat([_read(data_dir / "kernels" / f, names) for f in ("mla.csv.gz", "mla_more.csv.gz")],
                   ignore_index=True)
    df = df[(df["table"] == "context_mla_perf") & (df["mla_dtype"] == "bfloat16")]
    release = df["framework_version"].astype(str).map(lambda v: tuple(int(x) for x in re.findall(r"\d+", v)))
    df = df[release == release.groupby(df["framework"]).transform("max")]
    # the attention math of one call: `batch` prompts of `isl` tokens, DeepSeek-V3's MLA at the row's heads per GPU
    flops = _per_heads(df, lambda d, shape: mla_prefill_flops_bytes(d["isl"].to_numpy(dtype=float), 0.0, shape)[0])
    return df.assign(gflop=flops * df["batch_size"].to_numpy() / 1e9, t_ms=df["latency_ms"].astype(float))


def ratios(rows: pd.DataFrame) -> pd.DataFrame:
    """Per GPU and stack: the reference's time over the stack's, median over the shared compute-bound shapes."""
    ref = rows[rows["framework"] == REFERENCE][_SHAPE + ["t_ms"]].rename(columns={"t_ms": "t_ref"})
    out = []
    for stack in STACKS:
        s = rows[(rows["framework"] == stack) & (rows["gflop"] >= MIN_GFLOP)].merge(ref, on=_SHAPE)
        for prof, g in s.groupby("profile"):
            r = (g["t_ref"] / g["t_ms"]).to_numpy()
            out.append(dict(gpu=prof, stack=stack, kernel=", ".join(sorted(set(g["kernel_source"]))), shapes=len(g),
                            ratio=float(np.median(r)), p10=float(np.percentile(r, 10)),
                            p90=float(np.percentile(r, 90))))
    return pd.DataFrame(out).sort_values(["gpu", "stack"]).reset_index(drop=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--write", action="store_true", help="write the material ratios into the GPU profiles")
    args = ap.parse_args(argv)
    table = ratios(kernel_rows(DATA))
    print(f"MLA prefill kernels, calls of at least {MIN_GFLOP:,.0f} GFLOP: {REFERENCE}'s time over the stack's "
          "(median, p10-p90 over the shared shapes)\n")
    print("| GPU | stack | kernel | shapes | ratio | p10-p90 | priced at |")
    print("|---|---|---|---:|---:|---|---:|")
    chosen: dict[str, dict[str, float]] = {}
    for r in table.itertuples():
        material = r.stack != "vllm" and abs(r.ratio - 1.0) > MATERIAL
        if material:
            chosen.setdefault(r.gpu, {})[r.stack] = round(r.ratio, 3)
        print(f"| {r.gpu} | {r.stack} | {r.kernel} | {r.shapes} | {r.ratio:.3f} | {r.p10:.2f}-{r.p90:.2f} | "
              f"{round(r.ratio, 3) if material else 1:g} |")
    if args.write:
        for prof in sorted({*chosen, *COPIES}):
            source = COPIES.get(prof, prof)
            value = chosen.get(source, {})
            current = load_hardware(prof).mla_prefill_efficiency
            if not value and not current:
                continue
            note = (f"{REFERENCE}'s MLA prefill kernel time over each stack's on {source}'s compute-bound calls, by "
                    "`python benchmarks/mla_stack_kernels.py --write` (docs/calibration-moe-stacks.md)")
            flow = "{" + ", ".join(f"{k}: {v:g}" for k, v in sorted(value.items())) + "}"
            write(flow, (prof,), note, key=KEY)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
