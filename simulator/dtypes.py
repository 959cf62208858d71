"""Numeric formats of weights, activations and the KV cache.

Quantisation changes two things in the cost model: the bytes moved per
element and which tensor-core peak a GEMM runs at. Both live here so that the
cost model and the memory model cannot disagree about them.
"""
from __future__ import annotations

from typing import Literal

WeightDtype = Literal["bf16", "fp16", "fp8", "int8", "int4"]
KVDtype = Literal["bf16", "fp16", "fp8"]

BYTES: dict[str, float] = {"bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "int8": 1.0, "int4": 0.5}

ALIASES = {"bfloat16": "bf16", "float16": "fp16", "half": "fp16", "fp8_e4m3": "fp8", "float8": "fp8"}


def normalize(name: str) -> str:
    return ALIASES.get(name, name)


def compute_dtype(weight_dtype: str) -> str:
    """Which tensor-core peak a linear layer with these weights runs at.

    fp8 and int8 are modelled as W8A8 (activations quantised too, as vLLM's
    fp8 and SmoothQuant int8 paths do), so they use the 8-bit peak. int4 is
    weight-only (AWQ/GPTQ style): it saves bytes but computes in bf16.
    """
    return {"fp8": "fp8", "int8": "int8"}.get(weight_dtype, "bf16")
