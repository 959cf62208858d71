"""Measured serving benchmarks as rows llmsim can replay.

Four inputs give the same table: a CSV with the columns of the shared
data's ``closed_loop_silicon.csv`` / ``published_serving_results.csv``,
NVIDIA AIConfigurator's ``silicon_sample.csv`` (its end-to-end closed-loop
measurements, :func:`rows_from_silicon_sample`), or ``vllm bench serve`` result JSON
files (``--save-result``) with the configuration they do not record (model,
GPU, TP, stack) given by the user.
Each row names what llmsim needs to build its scenario; a row llmsim cannot
express is kept with the reason, never approximated: a cell that is not the
number it stands for (text, a negative length or latency, a fixed length
that is not a whole number of tokens) leaves its row unreplayed with the
reason, the file's other rows still counting. A figure written as 0 is read
as not measured (:func:`_figures`) and named. Two rows under one id refuse
the file (:func:`_refuse_duplicate_ids`).
"""
from __future__ import annotations

import csv
import math
import re
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Callable, Iterable, Literal, Optional, Union

import pandas as pd
from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from ..dtypes import WEIGHT_DTYPES, checkpoint_weight_dtype
from ..errors import LlmsimError
from ..profiles.backend import backend_names
from ..profiles.hardware import builtin_hardware, match_benchmark_gpu
from ..profiles.model import MAX_CONTEXT
from ..runsize import MAX_REQUESTS
from .deployment import (AIC_UNVERSIONED_MEASURED_BY, kv_dtype, measured_day, of_source, release_unread,
                         stack_release, version_keys)

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
_REQUIRED = ("engine", "model", "gpu", "tp", "isl_mean", "osl_mean")

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


@dataclass(frozen=True)
class RoleLayout:
    """One role (prefill or decode) of a disaggregated deployment: how many
    workers it runs and how each spreads the model (tp, attention dp, ep)."""

    replicas: int
    tp: int
    dp: int = 1
    ep: int = 1
    batch: Optional[int] = None             # the worker's batch per attention-DP rank, where stated


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
    # Engine keys the stack version ran by default where the backend profile
    # differs (deployment.version_keys: vLLM's async scheduling from 0.14.0).
    version_keys: dict[str, Any] = field(default_factory=dict)
    # "agg", or "disagg": prefill and decode on separate pools, replayed when
    # the row states both (tp, dp and ep above are then the decode pool's,
    # which sets TPOT).
    mode: str = "agg"
    prefill: Optional[RoleLayout] = None
    decode: Optional[RoleLayout] = None
    # The file's columns (or keys) of the metrics it writes as 0: not measured, left out of ``measured``.
    unmeasured: tuple[str, ...] = ()

    @property
    def disaggregated(self) -> bool:
        """Whether the row is replayed on a prefill pool and a decode pool."""
        return self.mode == "disagg" and self.prefill is not None and self.decode is not None

    @property
    def layout(self) -> str:
        """How the row spreads the model over its GPUs, as a report names it
        (a disaggregated row: each pool's replicas and layout)."""
        if self.disaggregated:
            assert self.prefill is not None and self.decode is not None
            return (f"prefill {self.prefill.replicas}× {_parallel_text(self.prefill)}, "
                    f"decode {self.decode.replicas}× {_parallel_text(self.decode)}")
        return _parallel_text(self)

    @property
    def group(self) -> str:
        """The model/GPU/stack combination the row belongs to (for leave-one-group-out)."""
        model = Path(self.model).stem if self.model.endswith((".yaml", ".json")) else self.model
        return f"{model}/{self.gpu}/{self.stack}"


def _parallel_text(lay: Union[RoleLayout, "Row"]) -> str:
    return " ".join(f"{k} {v}" for k, v in (("TP", lay.tp), ("DP", lay.dp), ("EP", lay.ep)) if k == "TP" or v > 1)


def _match(table: list[tuple[str, str]], s: str) -> Optional[str]:
    u = s.lower().replace("_", "-").replace(" ", "-")
    for pat, name in table:
        if re.search(pat, u):
            return name
    return None


def _num(x) -> Optional[float]:
    """A cell's number; None for an empty, unparsable or non-finite one ('inf' is no count of tokens,
    requests or milliseconds), which leaves the row unreplayed with its reason (``_why_not``)."""
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def _figures(values: dict[str, Optional[float]], columns: Optional[dict[str, str]] = None
             ) -> tuple[dict[str, float], tuple[str, ...]]:
    """A row's measured figures by metric, and the file's columns (``columns``:
    metric -> column where they differ) of those it writes as 0.

    Benchmarks write 0 for a figure they did not measure (``vllm bench serve``
    gives a TPOT and ITL of 0 when no request had a second token), and no
    server answers in 0 ms or serves 0 tokens/s while completing requests: a
    0 compared would be an error of +inf %, and fitted on, the log of 0. So it
    is read as not measured, and the row carries the columns so that validate
    names them (JSON ``not_measured``) rather than dropping them unsaid."""
    measured = {k: v for k, v in values.items() if v is not None and v != 0}
    return measured, tuple((columns or {}).get(k, k) for k, v in values.items() if v == 0)


def _no_metric(row: Row, what: str = "no measured metric") -> str:
    """Why a row has nothing to compare, naming the columns it wrote as 0."""
    return what + (f" ({', '.join(row.unmeasured)} written as 0: not measured)" if row.unmeasured else "")


def _longest_first() -> list[str]:
    """The backend names, longest first (a table's rows are matched against them, listed once per table)."""
    return sorted(backend_names(), key=len, reverse=True)


def _stack(s: str, names: list[str]) -> Optional[str]:
    """The backend a row's engine label names: the longest of ``names``
    (:func:`_longest_first`) it starts with as a word (``vLLM 0.19``, ``SGLang``;
    not ``vllmx``, a stack llmsim does not know, which is not read as vLLM)."""
    u = str(s).lower()
    # The benchmark files label TensorRT-LLM rows "TensorRT-LLM" or "trt..."; this maps
    # their label to its profile's name, it is not a list of stacks.
    if re.match(r"(tensorrt|trtllm|trt)(?![a-z0-9])", u):
        return "trtllm"
    return next((k for k in names if re.match(rf"{re.escape(k)}(?![a-z0-9])", u)), None)


def _stacks() -> str:
    return ", ".join(backend_names())


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
    return (checkpoint_weight_dtype(native) or native), kv


def _checkpoint(model: Optional[str], formats: dict[str, Optional[str]]) -> Optional[str]:
    """The weight format ``model``'s checkpoint is published in (None: 16-bit or unknown model)."""
    if model is None:
        return None
    if model not in formats:
        from ..profiles import load_model

        formats[model] = load_model(model).published_format
    return formats[model]


def _parallel(r: dict, name: str, *aliases: str) -> int:
    for k in (name, *aliases):
        if (v := _num(r.get(k))) is not None:
            return int(v)
    return 1


def read_table(path: Path) -> pd.DataFrame:
    """A CSV file (or .csv.gz), checked before it is read; every read/parse problem one LlmsimError."""
    from ..reads import MAX_TABLE_BYTES, input_file, open_text, repeated_columns

    input_file(path, MAX_TABLE_BYTES, "benchmark CSV")
    try:
        with open_text(path, MAX_TABLE_BYTES, "benchmark CSV") as fh:
            df = pd.read_csv(fh)
        repeated = repeated_columns(path, df.columns, MAX_TABLE_BYTES, "benchmark CSV")
    except FileNotFoundError:
        raise LlmsimError("file not found", source=path) from None
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError, OSError, EOFError, zlib.error) as e:
        raise LlmsimError(f"not a readable CSV ({str(e).splitlines()[0]})", source=path) from None
    for refusal in repeated.values():
        raise LlmsimError(refusal, source=path)
    return df


def rows_from_csv(path: Path, model: Optional[str] = None, gpu: Optional[str] = None,
                  model_configs: Optional[Path] = None) -> list[Row]:
    """Rows of a CSV in the shared data's serving-results layout, or of
    AIConfigurator's silicon_sample.csv (told apart by its columns; there
    ``model_configs`` is a folder of ``<org>--<name>.yaml`` model configs for
    models without a built-in profile)."""
    df = read_table(path)
    if "silicon_ttft_ms" in df.columns:
        missing = [c for c in _SILICON_SAMPLE if c not in df.columns]
        if missing:
            raise LlmsimError(f"missing column(s) {', '.join(missing)} of AIConfigurator's silicon_sample.csv "
                              "layout", source=path)
        rows = rows_from_silicon_sample(df, model, gpu, model_configs)
        _refuse_duplicate_ids(rows, path, "id")
        return rows
    missing = [c for c in _REQUIRED if c not in df.columns]
    if missing:
        raise LlmsimError(f"missing column(s) {', '.join(missing)}; expected the columns of "
                          "closed_loop_silicon.csv or published_serving_results.csv", source=path)
    if not any(c in df.columns for c in METRICS):
        raise LlmsimError(f"no measured metric column; expected one of {', '.join(METRICS)}", source=path)
    out = []
    formats: dict[str, Optional[str]] = {}      # model -> its checkpoint's format, each read once
    gpus = builtin_hardware()
    names = _longest_first()
    for i, r in enumerate(df.to_dict("records")):
        rid = _text(r, "row_id") or f"row{i + 1}"
        stack = _stack(r["engine"], names)
        source, version = f"{r.get('source_kind', '')} {r.get('source_url', '')}", _text(r, "engine_version") or ""
        m = model or _match(_MODELS, str(r["model"]))
        g = gpu or match_benchmark_gpu(str(r["gpu"]), gpus)
        tp = _num(r.get("tp")) or 1
        if m in _FP8_BLOCK_TWIN and "fp8_block" in str(r.get("precision", "")).lower():
            m = _FP8_BLOCK_TWIN[m]
        wd, kd = _dtypes(r.get("precision", ""), lambda m=m: _checkpoint(m, formats))
        isl, osl = _num(r["isl_mean"]), _num(r["osl_mean"])
        measured, unmeasured = _figures({k: _num(r.get(k)) for k in METRICS if k in r})
        row = Row(rid, stack or str(r["engine"]), m or str(r["model"]), g or str(r["gpu"]), int(tp), wd, kd,
                  int(isl or 0), int(osl or 0),
                  dp=_parallel(r, "dp", "attention_dp_size"), ep=_parallel(r, "ep", "moe_ep_size"),
                  concurrency=int(c) if (c := _num(r.get("concurrency"))) else None,
                  rate=_num(r.get("request_rate_qps")),
                  num_requests=int(n) if (n := _num(r.get("num_requests"))) else None,
                  measured=measured, unmeasured=unmeasured,
                  throughput_identity="C*OSL" in str(r.get("derived_fields", "")),
                  deployment=of_source(source, str(r.get("notes", "")), stack or "", version),
                  version_keys=version_keys(stack or "", version, _unversioned_day(source, stack, version)),
                  mode="disagg" if "disaggregated" in str(r.get("scenario", "")).lower() else "agg")
        row.skip = _why_not(row, r, stack, m, g) or release_unread(stack or "", version)
        out.append(row)
    _refuse_duplicate_ids(out, path, "row_id")
    return out


def _refuse_duplicate_ids(rows: list[Row], path: Path, column: str) -> None:
    """A row's id is how validate names it: in the table, the rows not
    replayed (keyed by id: a second row's reason replaced the first's) and
    ``--csv``. Two rows under one id could be told apart nowhere."""
    first: dict[str, int] = {}
    for i, r in enumerate(rows):
        j = first.setdefault(r.id, i)
        if j != i:
            lines = _record_lines(path)
            at = (f"lines {lines[j]} and {lines[i]}" if len(lines) == len(rows)
                  else f"data rows {j + 1} and {i + 1}")
            raise LlmsimError(f"row id {r.id!r} is on {at}; give each row an id of its own", source=path,
                              key_path=column)


def _record_lines(path: Path) -> list[int]:
    """The file line each data row starts on (a quoted cell may hold line
    breaks; blank lines hold no row, as pandas reads the file); empty where
    the csv module cannot read the file as pandas did."""
    from ..reads import MAX_TABLE_BYTES, open_text

    lines, end = [], 0
    try:
        with open_text(path, MAX_TABLE_BYTES, "benchmark CSV") as fh:
            reader = csv.reader(fh)
            for record in reader:
                if record:
                    lines.append(end + 1)
                end = reader.line_num
    except csv.Error:
        return []
    return lines[1:]          # the header's left out


def _unversioned_day(source: str, stack: Optional[str], version: str) -> Optional[str]:
    """The day after which a published row naming no stack version cannot
    have been measured: AIConfigurator's silicon rows (the sample's own
    dates, :data:`.deployment.AIC_UNVERSIONED_MEASURED_BY`); None elsewhere."""
    if version or "aiconfigurator" not in source.lower():
        return None
    return AIC_UNVERSIONED_MEASURED_BY.get(stack or "")


#: Columns that hold counts: a positive whole number where given.
_COUNTS = ("tp", "dp", "ep", "pp", "attention_dp_size", "moe_ep_size", "concurrency", "num_requests")
#: Most requests in flight a replay's closed loop holds (the scenario's concurrency arrival takes no more).
MAX_CONCURRENCY = 1_000_000
#: Largest measured figure read (ms, tokens/s, requests/s): past it a cell is a slip, not a measurement.
MAX_MEASURED = 1e12
#: The largest value each numeric column can hold; past it the row is not replayed (a count of 10³⁰
#: GPUs or requests would be simulated as written, a 1e308 ms latency judge the model by nothing).
_MOST = {"tp": 65_536, "dp": 65_536, "ep": 65_536, "pp": 65_536, "attention_dp_size": 65_536,
         "moe_ep_size": 65_536, "concurrency": MAX_CONCURRENCY, "num_requests": MAX_REQUESTS,
         "isl_mean": MAX_CONTEXT, "osl_mean": MAX_CONTEXT, "request_rate_qps": MAX_MEASURED,
         **{m: MAX_MEASURED for m in METRICS}}
#: A measured figure as a benchmark file states it: finite, not negative, at most MAX_MEASURED.
Measured = Annotated[float, Field(ge=0, le=MAX_MEASURED, allow_inf_nan=False)]


def _bad_number(raw: dict) -> str:
    """Why a numeric cell cannot be read as what it measures ("" if none):
    text where a number goes, a count that is not a positive whole number,
    a negative rate, length or measurement."""
    for key in (*_COUNTS, "request_rate_qps", "isl_mean", "osl_mean", *METRICS):
        cell = raw.get(key)
        if cell is None or (isinstance(cell, float) and math.isnan(cell)) or str(cell).strip() == "":
            continue
        v = _num(cell)
        if v is None or not math.isfinite(v):
            return f"{key} {cell!r} is not a number"
        if key in _COUNTS and (v < 1 or v != int(v)):
            return f"{key} {cell!r} is not a positive whole number"
        if v < 0 or (key == "request_rate_qps" and v == 0):
            return f"{key} {cell!r} is not a positive number"
        if v > _MOST[key]:
            return f"{key} {cell!r} is more than any deployment or measurement holds (at most {_MOST[key]:,g})"
    return ""


def _why_not(row: Row, raw: dict, stack, model, gpu) -> str:
    if bad := _bad_number(raw):
        return bad
    scen = str(raw.get("scenario", "")).lower()
    if "disaggregated" in scen:
        return ("disaggregated row without prefill/decode worker counts and layouts (this layout has no columns "
                "for them)")
    if stack is None:
        return f"stack {raw['engine']!r} is not one of {_stacks()}"
    if model is None:
        return f"model {raw['model']!r} has no built-in profile (give --model)"
    if gpu is None:
        return f"GPU {raw['gpu']!r} has no built-in profile (give --gpu)"
    if _num(raw.get("tp")) is None:
        return "tp is empty: the row does not say how many GPUs its tensor-parallel group spans"
    if _num(raw.get("pp")) not in (None, 1.0):
        return "pipeline parallelism is not modelled"
    if str(raw.get("isl_dist", "fixed")).lower() not in ("fixed", "nan") or \
            str(raw.get("osl_dist", "fixed")).lower() not in ("fixed", "nan"):
        return "only fixed input/output lengths are replayed"
    if why := _fractional(raw, ("isl_mean", "osl_mean")):
        return why
    if row.concurrency is None and row.rate is None:
        return "neither a concurrency nor a request rate"
    if row.isl <= 0 or row.osl <= 0:
        return "input and output lengths must be positive"
    if not row.measured:
        return _no_metric(row)
    return ""


def _fractional(raw: dict, columns: tuple[str, ...]) -> str:
    """Why a row of fixed lengths cannot be replayed as it states them (""
    if it can): every request of such a run has the one length, a whole
    number of tokens, so 100.5 is a slip, not a mean to round. A row of
    varying lengths may state a fractional mean (published_serving_results.csv's
    ShareGPT rows: 194.3): it is not replayed for its lengths not being
    fixed, before this is asked, and its mean is kept."""
    for key in columns:
        v = _num(raw.get(key))
        if v is not None and v != int(v):
            return f"{key} {v:g} is not a whole number of tokens, the length each request of a fixed-length row has"
    return ""


# NVIDIA AIConfigurator's end-to-end measurements (github.com/ai-dynamo/aiconfigurator,
# aic-core/src/aiconfigurator_core/systems/silicon_sample.csv): one row per
# closed-loop run, its configuration in AIConfigurator's own terms.
_SILICON_SAMPLE = ("id", "silicon_data_source", "backend", "model_path", "system", "mode", "isl", "osl",
                   "silicon_ttft_ms", "silicon_tpot_ms")
# Quantisation modes (gemm_quant_mode / moe_quant_mode) -> the weight dtype
# llmsim prices. fp8 and fp8_block are one dtype: which fp8 kernels run
# follows the checkpoint (costmodel.layout.gemm_format), as on the stacks.
_QUANT_MODES = {"bf16": "bf16", "float16": "fp16", "fp16": "fp16", "fp8": "fp8", "fp8_block": "fp8",
                "nvfp4": "nvfp4", "int4_wo": "int4", "w4a16_mxfp4": "mxfp4", "w4a8_mxfp4_mxfp8": "mxfp4"}


@dataclass
class _Profiles:
    """Model and GPU profiles the rows name, each loaded once (or its refusal)."""

    configs: Optional[Path]
    models: dict[str, object] = field(default_factory=dict)
    gpus: dict[str, object] = field(default_factory=dict)

    def model(self, model_path: str, override: Optional[str]) -> tuple[Optional[str], object]:
        """The profile name (or config path) for a Hugging Face id, and its profile or refusal message."""
        from ..profiles import load_model

        name = override or _match(_MODELS, model_path)
        if name is None and self.configs is not None:
            f = self.configs / f"{model_path.replace('/', '--')}.yaml"
            name = str(f) if f.is_file() else None
        if name is None:
            return None, f"model {model_path!r} has no built-in profile (give --model)"
        if name not in self.models:
            try:
                self.models[name] = load_model(name)
            except LlmsimError as e:
                self.models[name] = f"model {model_path!r}: {e}"
        return name, self.models[name]

    def gpu(self, name: str) -> object:
        from ..profiles import load_hardware

        if name not in self.gpus:
            self.gpus[name] = load_hardware(name)
        return self.gpus[name]


def _text(r: dict, key: str) -> Optional[str]:
    """A text cell, None where it is empty."""
    v = r.get(key)
    return None if v is None or (isinstance(v, float) and math.isnan(v)) or str(v).strip() == "" else str(v)


def _silicon_dtype(gemm: Optional[str], moe: Optional[str], profile) -> tuple[str, str]:
    """(weight dtype, why not) of a row's quantisation modes. Unstated modes
    run the checkpoint as published; a 4-bit float mode on a checkpoint
    published in MXFP4 (gpt-oss) ran that checkpoint, the only one its
    model id names."""
    modes = [m for m in (gemm, moe if profile.is_moe else None) if m]
    if not modes:
        wd, _ = _dtypes("", lambda: profile.published_format)
        why = "" if wd in WEIGHT_DTYPES else f"checkpoint format {wd!r} is not a weight dtype llmsim models"
        return wd, why
    unknown = [m for m in modes if m not in _QUANT_MODES]
    if unknown:
        return "", f"quant mode {unknown[0]!r} is not one llmsim models ({', '.join(_QUANT_MODES)})"
    dtypes = {_QUANT_MODES[m] for m in modes}
    if len(dtypes) > 1:
        return "", f"GEMMs in {gemm} with experts in {moe}: llmsim runs one weight format per pool"
    wd = dtypes.pop()
    if wd == "nvfp4" and profile.checkpoint_dtype == "mxfp4":
        wd = "mxfp4"
    return wd, ""


def rows_from_silicon_sample(df: pd.DataFrame, model: Optional[str] = None, gpu: Optional[str] = None,
                             model_configs: Optional[Path] = None) -> list[Row]:
    """Rows of AIConfigurator's silicon_sample.csv.

    Concurrency is the client's (``silicon_concurrency=C`` in
    ``silicon_data_source``; else ``batch_size`` per attention-DP rank
    times the ranks); dp and ep are ``attention_dp_size`` and
    ``moe_ep_size``; the KV cache is the one AIConfigurator's deployment
    set for the row's precision (:func:`.deployment.kv_dtype`; the file does
    not say). The measured output
    throughput is the closed-loop identity of the measured latencies.
    Deployment provenance follows :func:`.deployment.of_source` with
    ``silicon_data_source`` as the notes (``measured=<date>``).

    A disaggregated row (``mode == 'disagg'``) is replayed when it states
    both roles' worker counts (``prefill_num_workers``,
    ``decode_num_workers``) beside their layouts (``prefill_tp_size``,
    ``prefill_attention_dp_size``, ``prefill_moe_ep_size``, ... and the same
    for ``decode_``): one prefill pool and one decode pool
    (:class:`RoleLayout`). Without ``silicon_concurrency`` its concurrency is
    ``decode_batch_size`` × the decode ranks (workers × attention DP), the
    identity every row stating both satisfies.
    """
    from ..costmodel.layout import check_weight_dtype
    from ..parallelism import Parallelism

    profiles = _Profiles(model_configs)
    out = []
    gpus = builtin_hardware()
    names = _longest_first()
    for i, r in enumerate(df.to_dict("records")):
        notes = str(r.get("silicon_data_source", ""))
        stack = _stack(r["backend"], names)
        version = stack_release(notes, _text(r, "backend_version") or "")
        m, prof = profiles.model(str(r["model_path"]), model)
        g = gpu or match_benchmark_gpu(str(r["system"]), gpus)
        tp = int(_num(r.get("tp_size")) or 1)
        dp = int(_num(r.get("attention_dp_size")) or 1)
        ep = int(_num(r.get("moe_ep_size")) or 1)
        known = prof is not None and not isinstance(prof, str)
        moe = known and prof.is_moe
        wd, why_dtype = _silicon_dtype(_text(r, "gemm_quant_mode"), _text(r, "moe_quant_mode"), prof) \
            if known else ("bf16", "")
        disagg = str(r.get("mode", "")).lower() == "disagg"
        prefill, decode, why_roles = _roles(r, moe) if disagg else (None, None, "")
        if decode is not None:
            tp, dp, ep = decode.tp, decode.dp, decode.ep
        c = re.search(r"silicon_concurrency=(\d+)", notes)
        conc = int(c.group(1)) if c else (int(b) * dp if (b := _num(r.get("batch_size"))) else None)
        if not c and decode is not None and decode.batch:
            conc = decode.batch * decode.dp * decode.replicas
        ttft, tpot = _num(r.get("silicon_ttft_ms")), _num(r.get("silicon_tpot_ms"))
        isl, osl = int(_num(r.get("isl")) or 0), int(_num(r.get("osl")) or 0)
        measured, unmeasured = _figures({"ttft_mean_ms": ttft, "tpot_mean_ms": tpot}, _SILICON_METRICS)
        if conc and len(measured) == 2 and min(measured.values()) > 0 and osl > 0:
            measured["throughput_output_tok_s"] = conc * osl / ((ttft + (osl - 1) * tpot) * 1e-3)
        dep = of_source(_SILICON_SOURCE, notes, stack or "", version)
        kv = kv_dtype(dep, stack or "", _text(r, "precision") or "")
        row = Row(_text(r, "id") or f"row{i + 1}", stack or str(r["backend"]),
                  m or str(r["model_path"]), g or str(r["system"]), tp, wd or "bf16", kv, isl, osl,
                  dp=dp if moe else 1, ep=ep if moe else 1, concurrency=conc, measured=measured,
                  unmeasured=unmeasured, throughput_identity=True, deployment=dep,
                  version_keys=version_keys(stack or "", version, measured_day(notes)),
                  mode="disagg" if disagg else "agg", prefill=prefill, decode=decode)
        row.skip = (why_roles or _silicon_why_not(row, r, stack, prof, g, why_dtype, profiles, moe)
                    or release_unread(stack or "", version))
        if not row.skip:
            layouts = [("prefill ", prefill), ("decode ", decode)] if disagg else [("", row)]
            role = ""           # which pool's layout a refusal is about (a disaggregated row's)
            try:
                for role, lay in layouts:
                    Parallelism(lay.tp, lay.dp, lay.ep).check(prof, profiles.gpu(row.gpu))
                role = ""
                check_weight_dtype(row.weight_dtype, profiles.gpu(row.gpu))
            except LlmsimError as e:
                row.skip = f"{role}{e}"
        out.append(row)
    return out


_SILICON_SOURCE = "NVIDIA aiconfigurator silicon_sample.csv"
#: The sample's columns of the metrics it measures.
_SILICON_METRICS = {"ttft_mean_ms": "silicon_ttft_ms", "tpot_mean_ms": "silicon_tpot_ms"}
_NO_WORKERS = ("disaggregated row without prefill_num_workers and decode_num_workers: the sizes of its prefill "
               "and decode pools are unknown")


def _roles(raw: dict, moe: bool) -> tuple[Optional[RoleLayout], Optional[RoleLayout], str]:
    """The prefill and decode layouts a disaggregated row states, or why they
    cannot be replayed (no worker counts, pipeline stages, an MoE split that
    does not match the role's GPUs, attention data parallelism on a dense
    model)."""
    out = []
    for role in ("prefill", "decode"):
        n = _num(raw.get(f"{role}_num_workers"))
        if n is None:
            return None, None, _NO_WORKERS
        vals = {k: _num(raw.get(f"{role}_{k}")) for k in ("tp_size", "attention_dp_size", "moe_tp_size",
                                                          "moe_ep_size", "pp_size", "batch_size")}
        for k in ("num_workers", "tp_size", "attention_dp_size", "batch_size"):
            v = n if k == "num_workers" else vals[k]
            if v is not None and (v < 1 or v != int(v)):
                return None, None, f"{role}_{k} {v:g} is not a positive whole number"
        if vals["pp_size"] not in (None, 1.0):
            return None, None, f"pipeline parallelism ({role}_pp_size {vals['pp_size']:g}) is not modelled"
        tp, dp = int(vals["tp_size"] or 1), int(vals["attention_dp_size"] or 1)
        ep, moe_tp = vals["moe_ep_size"], vals["moe_tp_size"]
        if moe and (ep is None or moe_tp is None or ep < 1 or moe_tp < 1 or int(moe_tp) * int(ep) != tp * dp):
            return None, None, (f"{role}_moe_tp_size × {role}_moe_ep_size = {_g(moe_tp)} × {_g(ep)} is not "
                                f"{role}_tp_size × {role}_attention_dp_size = {tp} × {dp}: the {role} layout is "
                                "ambiguous")
        if not moe and dp > 1:
            return None, None, (f"{role}_attention_dp_size {dp} on a dense model: AIConfigurator's generator "
                                "turns attention DP on for MoE models only, so the role's layout is ambiguous")
        batch = vals["batch_size"]
        out.append(RoleLayout(int(n), tp, dp, int(ep) if moe and ep else 1, int(batch) if batch else None))
    return out[0], out[1], ""


def _g(v: Optional[float]) -> str:
    return "?" if v is None else f"{v:g}"


def _silicon_why_not(row: Row, raw: dict, stack, prof, gpu, why_dtype: str, profiles: _Profiles, moe: bool) -> str:
    mode = str(raw.get("mode", "")).lower()
    if mode not in ("agg", "disagg"):
        return f"mode {raw.get('mode')!r} is neither agg nor disagg"
    if stack is None:
        return f"stack {raw['backend']!r} is not one of {_stacks()}"
    if prof is None or isinstance(prof, str):
        return prof or f"model {raw['model_path']!r} has no built-in profile (give --model)"
    if gpu is None:
        return f"GPU {raw['system']!r} has no built-in profile (give --gpu)"
    if _num(raw.get("pp_size")) not in (None, 1.0):
        return "pipeline parallelism is not modelled"
    if why_dtype:
        return why_dtype
    moe_tp = _num(raw.get("moe_tp_size"))
    if moe and moe_tp and int(moe_tp) * row.ep != row.tp * row.dp:
        return (f"moe_tp_size × moe_ep_size = {int(moe_tp)} × {row.ep} is not tp_size × attention_dp_size = "
                f"{row.tp} × {row.dp}: the row's parallel layout is ambiguous")
    named = re.search(r"_tp(\d+)(?:_0)?_ep(\d+)(?:_0)?_", str(raw.get("id", "")))
    # An id names the replica's GPUs as its tp where attention DP spreads them (tp 1 × dp 8 is "tp8").
    if moe and named and mode == "agg" and (int(named.group(1)), int(named.group(2))) not in (
            (row.tp, row.ep), (row.tp * row.dp, row.ep)):
        return (f"the id names tp {named.group(1)} and ep {named.group(2)}, the columns tp_size {row.tp}, "
                f"attention_dp_size {row.dp}, moe_ep_size {row.ep}: the row's parallel layout is stated "
                "inconsistently")
    if not row.concurrency:
        return "no concurrency (silicon_concurrency or batch_size)"
    if why := _fractional(raw, ("isl", "osl")):
        return why
    if row.isl <= 0 or row.osl <= 0:
        return "input and output lengths must be positive"
    for metric, v in row.measured.items():
        if v < 0:
            return f"{_SILICON_METRICS[metric]} {v:g} is negative"
    if len(row.measured) < 2:
        return _no_metric(row, "no measured TTFT and TPOT")
    return ""


class BenchResult(BaseModel):
    """The keys of a ``vllm bench serve --save-result`` file llmsim reads,
    strictly typed (a count written as text is refused, not converted);
    the file's other keys (per-request lists, the run's arguments) are left alone."""

    model_config = ConfigDict(strict=True, extra="ignore", frozen=True)

    completed: int = Field(gt=0, le=MAX_REQUESTS, description="requests the run completed")
    total_input_tokens: int = Field(ge=0)
    total_output_tokens: int = Field(ge=0)
    max_concurrency: Optional[int] = Field(default=None, ge=1, le=MAX_CONCURRENCY)
    request_rate: Union[Annotated[float, Field(gt=0)], Literal["inf"], None] = None
    mean_ttft_ms: Measured
    # every other metric llmsim predicts, where the file has it
    median_ttft_ms: Optional[Measured] = None
    mean_tpot_ms: Optional[Measured] = None
    median_tpot_ms: Optional[Measured] = None
    median_itl_ms: Optional[Measured] = None
    median_e2el_ms: Optional[Measured] = None
    output_throughput: Optional[Measured] = None
    request_throughput: Optional[Measured] = None
    # each request's lengths, where the file keeps them (vllm bench serve writes them with its results)
    input_lens: Optional[list[int]] = None
    output_lens: Optional[list[int]] = None

    def varying_lengths(self) -> str:
        """Why the run's lengths were not one fixed length each ("" when they were, or the file does not
        say): its per-request lists spread by more than 5 %. A fixed-length run's prompts can differ by a
        few tokens (vLLM's random dataset re-tokenises the text it draws), which the mean replays well."""
        for part, lens in (("input", self.input_lens), ("output", self.output_lens)):
            served = [n for n in lens or () if n > 0]    # vLLM writes 0 for a request that failed
            if served and max(served) > 1.05 * min(served):
                return f"its {part} lengths vary ({min(served):,} to {max(served):,} tokens)"
        return ""

    @field_validator("total_input_tokens", "total_output_tokens")
    @classmethod
    def _lengths(cls, total: int, info: ValidationInfo) -> int:
        """At least one token a completed request, and no more than any model's context (the key named)."""
        n = info.data.get("completed")
        if n is None:        # completed itself refused: its own error says so
            return total
        if total < n:
            raise ValueError(f"{total} is less than one token for each of the {n} completed requests")
        if total > MAX_CONTEXT * n:
            raise ValueError(f"{total:,} is more than {MAX_CONTEXT:,} tokens, past any model's context, for each "
                             f"of the {n:,} completed requests")
        return total


def read_bench_result(path: Path) -> BenchResult:
    """One ``vllm bench serve`` result file, validated; every problem one
    LlmsimError naming the file and key."""
    from ..profiles.loader import read_structured
    from ..scenario.strict import validate_strict

    if path.suffix.lower() != ".json":
        raise LlmsimError("expected a `vllm bench serve` result (.json)", source=path)
    d = read_structured(path, what="`vllm bench serve` result file")
    need = ("completed", "total_input_tokens", "total_output_tokens", "mean_ttft_ms")
    if not isinstance(d, dict) or any(k not in d for k in need):
        raise LlmsimError(f"not a `vllm bench serve` result (expected keys {', '.join(need)})", source=path)
    return validate_strict(BenchResult, d, path, whole_numbers_bounded=False)


def rows_from_bench_json(paths: Iterable[Path], stack: str, model: str, gpu: str, tp: int,
                         weight_dtype: Optional[str] = None, kv_dtype: str = "bf16", version: str = "") -> list[Row]:
    """Rows of ``vllm bench serve --save-result`` files (one run each);
    ``version`` is the serving stack's, whose defaults the replay then takes.
    Without ``weight_dtype`` the server ran the checkpoint as published."""
    if stack not in backend_names():
        raise LlmsimError(f"unknown backend {stack!r}; expected one of {_stacks()}", key_path="--backend")
    if weight_dtype is None:
        from ..profiles import load_model

        try:
            weight_dtype = load_model(model).served_weight_dtype()
        except LlmsimError as e:
            raise LlmsimError(e.message, source=e.source, key_path="--weight-dtype" if e.key_path ==
                              "engine.weight_dtype" else e.key_path or "--model") from None
    out = []
    for p in paths:
        d = read_bench_result(Path(p))
        n = d.completed
        measured, unmeasured = _figures({k: getattr(d, f) for k, f in METRICS.items()}, METRICS)
        rate = None if d.request_rate in (None, "inf") or d.request_rate == float("inf") else float(d.request_rate)
        row = Row(Path(p).stem, stack, model, gpu, tp, weight_dtype, kv_dtype,
                  round(d.total_input_tokens / n), round(d.total_output_tokens / n),
                  concurrency=d.max_concurrency, rate=rate, num_requests=n,
                  measured={k: float(v) for k, v in measured.items()}, unmeasured=unmeasured,
                  version_keys=version_keys(stack, version))
        if row.concurrency is None and row.rate is None:
            row.concurrency = n          # rate inf without a cap: everything at t = 0
        if why := release_unread(stack, version):
            row.skip = why
        elif not row.measured:
            row.skip = _no_metric(row)
        elif why := d.varying_lengths():
            # a replay of the means would stand for a run of other lengths, as a CSV row's mean would
            row.skip = f"{why}: llmsim replays a benchmark of fixed lengths (--random-input-len with --random-range-ratio 0)"
        out.append(row)
    return out
