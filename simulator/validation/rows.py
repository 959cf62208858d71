"""Measured serving benchmarks as rows llmsim can replay.

Three inputs give the same table: a CSV with the columns of the shared
data's ``closed_loop_silicon.csv`` / ``published_serving_results.csv``, or
``vllm bench serve`` result JSON files (``--save-result``) with the
configuration they do not record (model, GPU, TP, stack) given by the user.
Each row names what llmsim needs to build its scenario; a row llmsim cannot
express is kept with the reason, never approximated.
"""
from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Optional

import pandas as pd

from ..errors import LlmsimError
from .deployment import of_source

#: Measured metrics llmsim predicts: column -> results.json key.
METRICS = {
    "ttft_mean_ms": "mean_ttft_ms",
    "tpot_mean_ms": "mean_tpot_ms",
    "throughput_output_tok_s": "output_throughput",
    "ttft_p50_ms": "median_ttft_ms",
    "tpot_p50_ms": "median_tpot_ms",
    "itl_p50_ms": "median_itl_ms",
    "e2e_p50_ms": "median_e2el_ms",
    "throughput_req_s": "request_throughput",
}
STACKS = ("vllm", "sglang", "trtllm")
_REQUIRED = ("engine", "model", "gpu", "isl_mean", "osl_mean")

# Hugging Face model ids and GPU names as benchmarks write them -> built-in profiles.
_MODELS = [
    (r"deepseek-(v3|r1)", "deepseek-v3"),
    (r"qwen3-235b-a22b.*fp8", "qwen3-235b-a22b-fp8"),
    (r"qwen3-235b-a22b", "qwen3-235b-a22b"),
    (r"qwen3-30b-a3b", "qwen3-30b-a3b"),
    (r"gpt-oss-120b", "gpt-oss-120b"),
    (r"mixtral-8x7b", "mixtral-8x7b"),
    (r"qwen3-32b", "qwen3-32b"),
    (r"llama-3\.1-8b", "llama-3.1-8b"),
    (r"llama-3\.1-70b", "llama-3.1-70b"),
    (r"llama-3-8b", "llama-3-8b"),
    (r"llama-3-70b", "llama-3-70b"),
    (r"llama-2-7b", "llama-2-7b"),
    (r"llama-2-13b", "llama-2-13b"),
    (r"llama-2-70b", "llama-2-70b"),
    (r"llama-3\.2-1b", "llama-3.2-1b"),
]
# Block-scaled fp8 checkpoints published beside a 16-bit model: a row serving
# the model "in fp8_block" ran that checkpoint.
_FP8_BLOCK_TWIN = {"qwen3-235b-a22b": "qwen3-235b-a22b-fp8"}
_GPUS = [(r"h200", "h200"), (r"h100.*pcie", "h100-pcie"), (r"h100", "h100-sxm"), (r"b200", "b200"),
         (r"a100.*40", "a100-sxm-40gb"), (r"a100", "a100-sxm-80gb"), (r"l40s", "l40s")]


@dataclass
class Row:
    """One measured configuration and what llmsim needs to replay it."""

    id: str
    stack: str
    model: str
    gpu: str
    tp: int
    weight_dtype: str
    kv_dtype: str
    isl: int
    osl: int
    dp: int = 1                             # attention data-parallel ranks (MoE deployments)
    ep: int = 1                             # expert-parallel degree
    concurrency: Optional[int] = None       # closed loop
    rate: Optional[float] = None            # Poisson requests/s
    num_requests: Optional[int] = None
    measured: dict[str, float] = field(default_factory=dict)
    skip: str = ""                          # why llmsim cannot replay it ("" = it can)
    # The measured output throughput is the steady-state closed-loop identity
    # C·OSL / (TTFT + (OSL − 1)·TPOT) of the measured latencies, not tokens
    # over a run's duration: the prediction is then derived the same way.
    throughput_identity: bool = False
    # How the server was launched and the client run (validation.deployment).
    deployment: str = "defaults"

    @property
    def group(self) -> str:
        """The model/GPU/stack combination the row belongs to (for leave-one-group-out)."""
        return f"{self.model}/{self.gpu}/{self.stack}"


def _match(table: list[tuple[str, str]], s: str) -> Optional[str]:
    u = s.lower().replace("_", "-").replace(" ", "-")
    for pat, name in table:
        if re.search(pat, u):
            return name
    return None


def _num(x) -> Optional[float]:
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(v) else v


def _stack(s: str) -> Optional[str]:
    u = str(s).lower()
    if u.startswith("tensorrt") or u.startswith("trt"):
        return "trtllm"
    for k in STACKS:
        if u.startswith(k):
            return k
    return None


def _dtypes(precision: str, checkpoint: Callable[[], Optional[str]]) -> tuple[str, str]:
    """Weights and KV cache a row's precision names; an unstated precision
    runs the checkpoint as published (gpt-oss's MXFP4 experts, DeepSeek's
    block fp8; ``checkpoint()`` gives its format), a 16-bit one in bf16."""
    p = str(precision).lower()
    kv = "fp8" if "fp8 kv" in p else "bf16"
    for word, dtype in (("nvfp4", "nvfp4"), ("mxfp4", "mxfp4"), ("fp4", "nvfp4"), ("int4", "int4"),
                        ("w4a16", "int4"), ("fp8", "fp8")):
        if p.startswith(word):
            return dtype, kv
    if p.startswith("fp16"):
        return "fp16", "fp16"
    native = None if p.startswith("bf16") else checkpoint()
    return ("fp8" if native == "fp8_block" else native or "bf16"), kv


def _checkpoint(model: Optional[str], formats: dict[str, Optional[str]]) -> Optional[str]:
    """The weight format ``model``'s checkpoint is published in (None: 16-bit or unknown model)."""
    if model is None:
        return None
    if model not in formats:
        from ..profiles import load_model

        formats[model] = load_model(model).checkpoint_dtype
    return formats[model]


def _parallel(r: dict, name: str, *aliases: str) -> int:
    for k in (name, *aliases):
        if (v := _num(r.get(k))) is not None:
            return int(v)
    return 1


def rows_from_csv(path: Path, model: Optional[str] = None, gpu: Optional[str] = None) -> list[Row]:
    """Rows of a CSV in the shared data's serving-results layout."""
    try:
        df = pd.read_csv(path)
    except FileNotFoundError:
        raise LlmsimError("file not found", source=path) from None
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError, OSError) as e:
        raise LlmsimError(f"not a readable CSV ({str(e).splitlines()[0]})", source=path) from None
    missing = [c for c in _REQUIRED if c not in df.columns]
    if missing:
        raise LlmsimError(f"missing column(s) {', '.join(missing)}; expected the columns of "
                          "closed_loop_silicon.csv or published_serving_results.csv", source=path)
    if not any(c in df.columns for c in METRICS):
        raise LlmsimError(f"no measured metric column; expected one of {', '.join(METRICS)}", source=path)
    out = []
    formats: dict[str, Optional[str]] = {}      # model -> its checkpoint's format, each read once
    for i, r in enumerate(df.to_dict("records")):
        rid = str(r.get("row_id") or f"row{i + 1}")
        stack = _stack(r["engine"])
        m = model or _match(_MODELS, str(r["model"]))
        g = gpu or _match(_GPUS, str(r["gpu"]))
        tp = _num(r.get("tp")) or 1
        if m in _FP8_BLOCK_TWIN and "fp8_block" in str(r.get("precision", "")).lower():
            m = _FP8_BLOCK_TWIN[m]
        wd, kd = _dtypes(r.get("precision", ""), lambda m=m: _checkpoint(m, formats))
        isl, osl = _num(r["isl_mean"]), _num(r["osl_mean"])
        row = Row(rid, stack or str(r["engine"]), m or str(r["model"]), g or str(r["gpu"]), int(tp), wd, kd,
                  int(isl or 0), int(osl or 0),
                  dp=_parallel(r, "dp", "attention_dp_size"), ep=_parallel(r, "ep", "moe_ep_size"),
                  concurrency=int(c) if (c := _num(r.get("concurrency"))) else None,
                  rate=_num(r.get("request_rate_qps")),
                  num_requests=int(n) if (n := _num(r.get("num_requests"))) else None,
                  measured={k: v for k in METRICS if (v := _num(r.get(k))) is not None},
                  throughput_identity="C*OSL" in str(r.get("derived_fields", "")),
                  deployment=of_source(f"{r.get('source_kind', '')} {r.get('source_url', '')}", str(r.get("notes", ""))))
        row.skip = _why_not(row, r, stack, m, g)
        out.append(row)
    return out


def _why_not(row: Row, raw: dict, stack, model, gpu) -> str:
    scen = str(raw.get("scenario", "")).lower()
    if "disaggregated" in scen:
        return "disaggregated prefill/decode rows are not replayed"
    if stack is None:
        return f"stack {raw['engine']!r} is not one of {', '.join(STACKS)}"
    if model is None:
        return f"model {raw['model']!r} has no built-in profile (give --model)"
    if gpu is None:
        return f"GPU {raw['gpu']!r} has no built-in profile (give --gpu)"
    if _num(raw.get("pp")) not in (None, 1.0):
        return "pipeline parallelism is not modelled"
    if str(raw.get("isl_dist", "fixed")).lower() not in ("fixed", "nan") or \
            str(raw.get("osl_dist", "fixed")).lower() not in ("fixed", "nan"):
        return "only fixed input/output lengths are replayed"
    if row.concurrency is None and row.rate is None:
        return "neither a concurrency nor a request rate"
    if row.isl <= 0 or row.osl <= 0:
        return "input and output lengths must be positive"
    if not row.measured:
        return "no measured metric"
    return ""


def rows_from_bench_json(paths: Iterable[Path], stack: str, model: str, gpu: str, tp: int,
                         weight_dtype: str = "bf16", kv_dtype: str = "bf16") -> list[Row]:
    """Rows of ``vllm bench serve --save-result`` files (one run each)."""
    if stack not in STACKS:
        raise LlmsimError(f"unknown backend {stack!r}; expected one of {', '.join(STACKS)}", key_path="--backend")
    out = []
    for p in paths:
        try:
            d = json.loads(Path(p).read_text())
        except FileNotFoundError:
            raise LlmsimError("file not found", source=p) from None
        except (json.JSONDecodeError, UnicodeDecodeError, OSError) as e:
            raise LlmsimError(f"not a JSON file ({e})", source=p) from None
        need = ("completed", "total_input_tokens", "total_output_tokens", "mean_ttft_ms")
        if not isinstance(d, dict) or any(k not in d for k in need):
            raise LlmsimError(f"not a `vllm bench serve` result (expected keys {', '.join(need)})", source=p)
        n = int(d["completed"])
        if n <= 0:
            raise LlmsimError("the run completed no request", source=p)
        conc = d.get("max_concurrency")
        rate = d.get("request_rate")
        rate = None if rate in (None, "inf", float("inf")) else float(rate)
        row = Row(Path(p).stem, stack, model, gpu, tp, weight_dtype, kv_dtype,
                  round(d["total_input_tokens"] / n), round(d["total_output_tokens"] / n),
                  concurrency=int(conc) if conc else None, rate=rate, num_requests=n,
                  measured={k: float(d[v]) for k, v in METRICS.items() if d.get(v) is not None})
        if row.concurrency is None and row.rate is None:
            row.concurrency = n          # rate inf without a cap: everything at t = 0
        out.append(row)
    return out
