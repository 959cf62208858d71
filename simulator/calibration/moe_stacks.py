"""Each serving stack's own MoE expert kernels against the profile's vLLM-fitted ones.

A profile's ``calibration.moe`` / ``moe_ep`` are fitted on vLLM 0.24.0's
rows (:mod:`.moe_mla`); ``kernels/moe_more.csv.gz`` times SGLang's and
TensorRT-LLM's kernels on the same shapes with the same collector. A stack
whose rows sit more than the materiality rule (:data:`.stacks.MATERIAL`)
away from what the profile's parameters price them at, on the function the
engine runs (:func:`.moe_mla.predict_priced`), gets its own parameters per
format and expert-parallel regime (ep = 1: ``moe``, ep > 1: ``moe_ep``,
the split the profile already has because vLLM changes kernel there).

Which rows are the stack's (modelling decisions, stated once here):

* TensorRT-LLM (PyTorch backend): ``MoeConfig.backend`` defaults to
  CUTLASS (tensorrt_llm/llmapi/llm_args.py), the table's
  ``moe_torch_flow_cutlass``, and ``moe_torch_flow_nongated`` for the
  non-gated shapes (Nemotron-H's ReLU²) that it has no CUTLASS row for.
  ``moe_torch_flow_min_latency`` is an opt-in min-latency mode, never a
  default. Blackwell's block-FP8 rows are DeepGEMM's only (the collector
  timed no other kernel there), so those are taken.
* SGLang 0.5.14, ``--moe-runner-backend auto``: on SM100 server_args.py
  sets ``flashinfer_trtllm`` for the MoE architectures it names
  (DeepseekV3 and Kimi, Qwen3-MoE, GLM-4-MoE, Llama-4: ``_handle_model_specific_adjustments``),
  elsewhere ``auto`` runs the Triton fused MoE; int4 experts run Marlin on
  Hopper (the only kernel timed there), and the non-gated shapes, which
  Triton was not timed on, FlashInfer's CUTLASS kernel.
* Per model shape, the first kernel of the stack's order
  (:data:`DEFAULT_KERNELS`) with rows for it; the same kernel at every
  layout (neither stack switches kernel with expert parallelism in these rows).
* Routing: these collectors time the synthetic router as drawn, without
  vLLM's collector's second, group-limited pass for DeepSeek-V3
  (benchmarks/moe_stack_kernels.py ``read``), so every row is annotated
  ungrouped; the weight floor of :func:`.moe_mla.weight_floor_s` applies.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from ..costmodel import moe as M
from ..profiles.hardware import HardwareProfile, data_name_map
from . import moe_mla, moe_routing

# The stacks with rows in kernels/moe_more.csv.gz and the release timed.
STACK_MOE_VERSIONS = {"trtllm": "1.3.0rc20", "sglang": "0.5.14"}
# Each stack's kernels in the order its default picks them (see the module docstring).
DEFAULT_KERNELS = {
    "trtllm": ("moe_torch_flow_cutlass", "moe_torch_flow_nongated", "deepgemm"),
    "sglang": ("sglang_flashinfer_trtllm_moe", "sglang_fused_moe_triton", "sglang_marlin_moe",
               "sglang_flashinfer_cutlass_moe"),
}
# The two regimes a format is priced in (:meth:`Calibration.moe_for`), named as the calibration field.
REGIMES = ("moe", "moe_ep")


def regime(df: pd.DataFrame) -> np.ndarray:
    """Per row: ``moe`` without expert parallelism, ``moe_ep`` with it."""
    return np.where(df["moe_ep"].to_numpy() > 1, "moe_ep", "moe")


def default_kernel_rows(df: pd.DataFrame, stack: str) -> pd.DataFrame:
    """Per GPU, format and model shape, the rows of the kernel ``stack``'s default runs."""
    order = {k: i for i, k in enumerate(DEFAULT_KERNELS[stack])}
    df = df[df["kernel_source"].isin(order)]
    rank = df["kernel_source"].map(order)
    best = rank.groupby([df["profile"], df["moe_dtype"], moe_mla.shape_label(df)]).transform("min")
    return df[rank == best]


def stack_rows(data_dir: Path, gpus: dict[str, HardwareProfile], stack: str,
               formats: tuple[str, ...] | None = None) -> pd.DataFrame:
    """``stack``'s MoE rows on ``gpus`` (its default kernel, annotated with rank 0's routing as
    :func:`.moe_mla.load` annotates vLLM's); empty when the table or the stack is missing.
    ``formats``: only these formats (annotating is the slow part)."""
    path = data_dir / "kernels" / "moe_more.csv.gz"
    version = STACK_MOE_VERSIONS.get(stack)
    if version is None or not path.is_file():
        return pd.DataFrame(columns=["profile", "moe_dtype", "moe_ep", "t_s"])
    df = moe_mla._read(path, data_name_map("system", gpus))
    df = df[(df["framework"] == stack) & (df["framework_version"].astype(str) == version)
            & df["profile"].isin(gpus)].copy()
    df["moe_dtype"] = df["moe_dtype"].map(M.moe_dtype)
    if formats is not None:
        df = df[df["moe_dtype"].isin(formats)]
    df = moe_routing.annotate(default_kernel_rows(df, stack))
    df["gated"] = moe_mla.collector_gated(df)
    ok = df["t_s"].to_numpy() >= moe_mla.weight_floor_s(df, gpus)
    return df[ok].assign(regime=regime(df[ok])).reset_index(drop=True)


def is_moe_family(family: str) -> bool:
    """Is ``family`` a stack comparison's MoE family (``moe <fmt>`` / ``moe_ep <fmt>``)?"""
    return family.split(" ", 1)[0] in REGIMES and " " in family


def family_rows(rows: pd.DataFrame, profile: str, family: str) -> pd.DataFrame:
    """``rows`` of ``profile`` in ``family``'s format and regime."""
    regime_, fmt = family.split()
    return rows[(rows["profile"] == profile) & (rows["moe_dtype"] == fmt)
                & (rows["regime"] == regime_)].reset_index(drop=True)
