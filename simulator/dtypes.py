"""Numeric formats of weights, activations and the KV cache.

Quantisation changes two things in the cost model: the bytes moved per
element and which tensor-core peak a GEMM runs at. Both live here so that the
cost model and the memory model cannot disagree about them.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Collection, Literal, Optional

WeightDtype = Literal["bf16", "fp16", "fp8", "int8", "int4", "nvfp4", "mxfp4"]
KVDtype = Literal["bf16", "fp16", "fp8"]
WEIGHT_DTYPES: tuple[str, ...] = WeightDtype.__args__
# Four-bit float formats that run only on FP4 tensor cores (Blackwell);
# elsewhere a pool naming one is refused. mxfp4 is not among them: without
# FP4 units it runs weight-only (see compute_dtype).
FP4_ONLY_DTYPES = ("nvfp4",)

# Formats that quantise only the routed experts of a MoE model: the stacks
# implement MXFP4 for fused-MoE layers alone (vLLM's Mxfp4Config gives every
# other linear layer UnquantizedLinearMethod, vllm/model_executor/layers/
# quantization/mxfp4.py), and gpt-oss's checkpoint keeps attention, router,
# embeddings and LM head in bf16 (its config.json modules_to_not_convert).
EXPERT_ONLY_DTYPES = ("mxfp4",)

# nvfp4 and mxfp4 carry their scales (QUANT_FORMATS below): 4.5 and 4.25 bits.
BYTES: dict[str, float] = {"bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "int8": 1.0, "int4": 0.5,
                           "nvfp4": 0.5 + 1.0 / 16, "mxfp4": 0.5 + 1.0 / 32}

ALIASES = {"bfloat16": "bf16", "float16": "fp16", "half": "fp16", "fp8_e4m3": "fp8", "float8": "fp8"}


def normalize(name: str) -> str:
    return ALIASES.get(name, name)


def checkpoint_weight_dtype(checkpoint: Optional[str]) -> Optional[str]:
    """The weights a stack serves a checkpoint in unless told otherwise.

    vLLM, SGLang and TensorRT-LLM read a checkpoint's ``quantization_config``
    and load its weights as published: DeepSeek-V3's block fp8 runs as fp8,
    gpt-oss's MXFP4 experts as mxfp4, a checkpoint without one in 16 bits
    (``checkpoint`` None). None: a format llmsim does not model, which a
    pool must then name rather than have guessed."""
    if checkpoint is None:
        return "bf16"
    wd = "fp8" if checkpoint == "fp8_block" else checkpoint
    return wd if wd in WEIGHT_DTYPES else None


def linear_dtype(weight_dtype: str) -> str:
    """The weights of a pool's linear layers other than the routed experts."""
    return "bf16" if weight_dtype in EXPERT_ONLY_DTYPES else weight_dtype


def compute_dtype(weight_dtype: str, units: Collection[str]) -> str:
    """Which tensor-core peak a linear layer with these weights runs at, on a GPU
    with tensor-core ``units`` (the keys of its ``peak_tflops``).

    fp8 and int8 are modelled as W8A8 (activations quantised too, as vLLM's
    fp8 and SmoothQuant int8 paths do), so they use the 8-bit peak where the
    GPU has that unit. Without it they run weight-only and compute in bf16:
    fp8 on Ampere is vLLM's Marlin W8A16 path (``Fp8LinearMethod`` falls back
    to it below compute capability 8.9). int4 is weight-only (AWQ/GPTQ
    style): it saves bytes but computes in bf16. nvfp4 is W4A4 on FP4 tensor
    cores; mxfp4 is modelled as MXFP4 weights with MXFP8 activations (W4A8,
    the Blackwell path vLLM takes for gpt-oss) where the GPU has FP4 units,
    and as weight-only 4-bit computing in bf16 without them (W4A16, vLLM's
    Marlin/Triton MXFP4 path on Hopper).
    """
    if weight_dtype == "mxfp4":
        return "fp8" if "fp4" in units else "bf16"
    cdt = {"fp8": "fp8", "int8": "int8", "nvfp4": "fp4"}.get(weight_dtype, "bf16")
    return cdt if cdt in units or cdt == "bf16" else "bf16"


_WIDTH = {"bf16": 16, "fp16": 16, "fp8": 8, "int8": 8, "fp4": 4}
#: A GPU with a tensor-core unit for every format: the scheme each format is meant to run.
EVERY_UNIT = tuple(_WIDTH)


def gemm_scheme(weight_dtype: str, units: Collection[str]) -> str:
    """The linear layers' weight and activation widths (``W8A16``), the name
    the stacks' quantisation docs use: where it reads ``A16`` on 8-bit
    weights, the GPU has no unit for them and the weights only save bytes
    (:func:`falls_back`)."""
    w = {"int4": 4, "nvfp4": 4, "mxfp4": 4}.get(weight_dtype) or _WIDTH[weight_dtype]
    return f"W{w}A{_WIDTH[compute_dtype(weight_dtype, units)]}"


def falls_back(weight_dtype: str, scheme: str) -> bool:
    """Whether ``scheme`` (a run's ``gemm_scheme``) computes wider than the
    format is meant to (fp8 as W8A16 on an A100, not W8A8): a GPU without
    the unit, not a weight-only format such as int4."""
    return scheme != gemm_scheme(weight_dtype, EVERY_UNIT)


@dataclass(frozen=True)
class QuantFormat:
    """A quantised GEMM format (MoE experts, MLA projections).

    ``weight_dtype`` is the llmsim name of the same nominal width (what the
    memory model sizes by); ``weight_bytes`` adds the scales the format
    carries; ``peak`` names the tensor-core peak its GEMMs run at.
    """

    weight_dtype: str
    weight_bytes: float
    act_bytes: float
    peak: str


# Bytes per weight include the scales: fp8_block one fp32 per 128×128 block;
# int4 (GPTQ/AWQ, Marlin) one bf16 per group of 128; MXFP4 one E8M0 byte per
# 32; NVFP4 one E4M3 byte per 16. Activations: bf16 unless the GEMM takes
# quantised inputs (fp8 per tensor; fp8_block one fp32 per 1×128; MXFP8 one
# byte per 32; NVFP4 one byte per 16). w4a16 formats compute in bf16.
QUANT_FORMATS: dict[str, QuantFormat] = {
    "bf16": QuantFormat("bf16", 2.0, 2.0, "bf16"),
    "fp8": QuantFormat("fp8", 1.0, 1.0, "fp8"),
    "fp8_block": QuantFormat("fp8", 1.0 + 4.0 / (128 * 128), 1.0 + 4.0 / 128, "fp8"),
    "int4_wo": QuantFormat("int4", 0.5 + 2.0 / 128, 2.0, "bf16"),
    "w4a16_mxfp4": QuantFormat("int4", 0.5 + 1.0 / 32, 2.0, "bf16"),
    "nvfp4": QuantFormat("int4", 0.5 + 1.0 / 16, 0.5 + 1.0 / 16, "fp4"),
    "w4a8": QuantFormat("int4", 0.5 + 1.0 / 32, 1.0 + 1.0 / 32, "fp8"),
}

# Names kernel tables and Hugging Face configs use for the same formats.
QUANT_ALIASES = {"bfloat16": "bf16", "w4a16": "int4_wo", "mxfp4": "w4a16_mxfp4", "w4a8_mxfp4_mxfp8": "w4a8"}


def quant_format_name(name: str) -> str | None:
    """The canonical format name, or None if llmsim does not know it."""
    key = QUANT_ALIASES.get(name, name)
    return key if key in QUANT_FORMATS else None
