"""Calibrating the MoE expert and MLA attention kernels per GPU.

Rows come from ``kernels/moe.csv.gz`` and ``kernels/mla.csv.gz`` of the
shared data (AIConfigurator's vLLM timings, see ``SOURCES-moe-mla.md``
there). Every prediction goes through :mod:`simulator.costmodel.moe` and
:mod:`simulator.costmodel.mla`, the functions the engine runs.

Row selection (modelling decisions, stated once here):

* MoE: all vLLM 0.24.0 rows, evaluated at the pairs and distinct experts
  rank 0 really had under the collector's synthetic router
  (:mod:`.moe_routing`). Rows *faster than reading the touched experts'
  weights once at the datasheet bandwidth* are physically impossible for
  what the row claims to measure and are left out of fit and error (their
  count is reported): they concentrate in a few shapes whose kernels
  evidently did less work than the shape says.
* MoE, per format: only the kernel vLLM runs for the checkpoint llmsim
  reads as that format (:data:`CHECKPOINT_KERNELS`). The tables time
  MXFP4 experts with two kernels: gpt-oss's own MXFP4 MoE method (the
  checkpoint ``quant_method: mxfp4``, the one llmsim reads as ``mxfp4``)
  and Marlin for a compressed-tensors MXFP4 checkpoint, which llmsim
  reads as another format; one parameter set fitted over both prices
  neither.
* MoE, per row: the experts' activation the collector ran (gated, or
  Nemotron-H's non-gated ReLU²: :data:`NON_GATED_SHAPES`) and the kernel
  family vLLM chose (:func:`kernel_family`). ``llmsim calibrate`` fits one
  parameter set per format over all its rows; the benchmark also fits one
  per kernel family (:func:`leave_one_shape_out_per_kernel`).
* MLA: the module rows, vLLM 0.24.0 (CUDA graphs, as the engine runs), vLLM 0.24.0, the fastest attention backend
  per configuration (what a tuned deployment selects). The kernel-only
  tables (vLLM 0.14.0, H100/H200) check the kernel functions' form
  (:func:`fit_mla_kernels`, reported by ``benchmarks/moe_mla_calibration.py``).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd

from ..costmodel import mla as A
from ..costmodel import moe as M
from ..costmodel.roofline import blend
from ..errors import LlmsimError
from ..profiles.hardware import Calibration, FitError, HardwareProfile, MoeParams, RooflineParams, data_name_map
from . import evaluate, moe_routing
from .fit import LOSSES, FamilyFit, ape, fit_params, space

MOE_VERSION = "0.24.0"
MLA_KERNEL_VERSION = "0.14.0"
MLA_MODULE_VERSION = "0.24.0"
_KV = {"bfloat16": 2.0, "fp8": 1.0}
# Format → the ``kernel_source`` prefix of the kernel vLLM runs for the
# checkpoint llmsim reads as that format (profiles/hf_config.py). MXFP4:
# ``quant_method: mxfp4`` checkpoints (gpt-oss) run vLLM's gpt-oss MXFP4 MoE
# method (OpenAI's Triton ``matmul_ogs`` kernels on Hopper, FlashInfer's
# TRT-LLM kernels on Blackwell: vllm/model_executor/layers/quantization/mxfp4.py);
# the table's compressed-tensors MXFP4 rows run Marlin.
CHECKPOINT_KERNELS = {"w4a16_mxfp4": "vllm_gptossmxfp4moe_"}
# DeepSeek-V3 attention (the only MLA model in the tables): heads per GPU vary.
DSV3 = dict(kv_lora_rank=512, qk_rope_head_dim=64, qk_nope_head_dim=128, v_head_dim=128, q_lora_rank=1536,
            hidden_size=7168)
# A second start for the MoE search (slow, compute-poor kernels end far from the first).
_MOE_STARTS = (dict(eta_compute=0.3, eta_memory=0.8, sharpness=8.0, fixed_us=8.0, m_half=64.0, pair_ns=2.0,
                    pair_traffic=1.5, layer_fixed_us=15.0, tile_us=0.5, expert_us=1.0, token_traffic=0.5,
                    unaligned_compute=1.0, unaligned_memory=1.0, ep_routing_us=20.0, local_pair_traffic=1.0,
                    pad_row_cost=1.0),)
_REFIT_NFEV = 100
# Rows a fit sees at most (a seeded random subset; errors are always
# measured on every row): the fit's cost is linear in rows, and a few
# thousand rows over the same shapes pin down eight parameters.
FIT_ROWS = 3000


def fit_subset(rows: pd.DataFrame, n: int = FIT_ROWS) -> pd.DataFrame:
    return rows if len(rows) <= n else rows.sample(n, random_state=0).reset_index(drop=True)


@dataclass(frozen=True)
class MoeMlaData:
    moe: pd.DataFrame | None
    mla: pd.DataFrame | None
    excluded: dict[str, int]

    def moe_rows(self, profile: str) -> pd.DataFrame:
        return self.moe[self.moe["profile"] == profile] if self.moe is not None else pd.DataFrame()

    def mla_rows(self, profile: str, table: str) -> pd.DataFrame:
        if self.mla is None:
            return pd.DataFrame()
        return self.mla[(self.mla["profile"] == profile) & (self.mla["table"] == table)]


def shape_label(df: pd.DataFrame) -> pd.Series:
    """A "model shape": (hidden, expert width, experts, top-k)."""
    return (df["hidden_size"].astype(str) + "/" + df["moe_intermediate_size"].astype(str) + "/"
            + df["num_experts"].astype(str) + "/" + df["topk"].astype(str))


# Model shapes (hidden, expert width, experts, top-k) whose rows the
# collector timed with a non-gated expert activation. It builds each row's
# FusedMoE from the model's own HF config (AIConfigurator
# collector/vllm/collect_moe.py, ``_resolve_moe_runtime_config``: model_type
# ``nemotron_h`` runs ``mlp_hidden_act`` as ``relu2_no_mul``), so these
# shapes' experts have one up projection, not gate+up, as llmsim prices a
# non-gated model (ModelConfig.is_gated). The shapes are the Nemotron-3
# cases of collector/cases/models/NemotronHForCausalLM_cases.yaml: Nano
# (2688/1856/128/6) and, through vLLM's moe_latent_size, Super
# (1024/2688/512/22) and Ultra (2048/5120/512/22).
NON_GATED_SHAPES = frozenset({(2688, 1856, 128, 6), (1024, 2688, 512, 22), (2048, 5120, 512, 22)})


# Model shapes whose rows the collector routed group-limited, as vLLM runs
# the model: (n_group, topk_group). The collector builds each row's router
# from the model's HF config (collector/vllm/collect_moe.py,
# ``_resolve_moe_runtime_config``: model_type ``deepseek_v3`` takes grouped
# top-k with the config's groups and a zero correction bias); of the tables'
# models only DeepSeek-V3/R1 (n_group 8, topk_group 4) route in more than one
# group. :func:`.moe_routing._grouped_local_counts` says what that does to rank 0.
GROUPED_TOPK_SHAPES = {(7168, 2048, 256, 8): (8, 4)}


def router_groups(df: pd.DataFrame) -> pd.DataFrame:
    """``n_group`` and ``topk_group`` per row (1, 1 for an ungrouped router)."""
    keys = zip(df["hidden_size"], df["moe_intermediate_size"], df["num_experts"], df["topk"])
    groups = [GROUPED_TOPK_SHAPES.get(tuple(int(v) for v in k), (1, 1)) for k in keys]
    return df.assign(n_group=[g[0] for g in groups], topk_group=[g[1] for g in groups])


# Kernel families of the table's ``kernel_source`` (the experts class vLLM's
# FusedMoE selected for the row). One format can run several: on Blackwell
# vLLM's FlashInfer TRT-LLM kernels accept only some routers and
# activations and the rest run FlashInfer's CUTLASS kernel; on Hopper
# block-FP8 runs Triton without expert parallelism and FlashInfer's CUTLASS
# kernel with it. Each family is its own tile schedule and pipeline.
KERNEL_FAMILIES = ("flashinfer_trtllm", "flashinfer_cutlass", "triton", "marlin")


def kernel_family(df: pd.DataFrame) -> np.ndarray:
    """Per row: the kernel family (:data:`KERNEL_FAMILIES`) its ``kernel_source`` names."""
    src = df["kernel_source"].astype(str)
    out = np.full(len(df), "", dtype=object)
    for fam in reversed(KERNEL_FAMILIES):   # the first family named in the source wins
        out[src.str.contains(fam, regex=False).to_numpy()] = fam
    if (out == "").any():
        raise LlmsimError(f"MoE rows of unknown kernel families: {sorted(set(src[out == '']))}")
    return out


def collector_gated(df: pd.DataFrame) -> np.ndarray:
    """Per row: did the measured experts run a gated activation (:data:`NON_GATED_SHAPES`)?"""
    keys = zip(df["hidden_size"], df["moe_intermediate_size"], df["num_experts"], df["topk"])
    return np.array([tuple(int(v) for v in k) not in NON_GATED_SHAPES for k in keys], dtype=bool)


def weight_floor_s(df: pd.DataFrame, gpus: dict[str, HardwareProfile]) -> np.ndarray:
    """Seconds to read rank 0's touched expert weights once at datasheet bandwidth."""
    wb = df["moe_dtype"].map(lambda d: M.dtype_info(d).weight_bytes).to_numpy()
    bw = df["profile"].map(lambda p: gpus[p].hbm_bandwidth).to_numpy()
    mats = np.where(df["gated"].to_numpy(), 3.0, 2.0)   # gate, up, down (no gate when non-gated)
    w = mats * df["hidden_size"].to_numpy() * df["moe_intermediate_size"].to_numpy() / df["moe_tp"].to_numpy()
    return df["local_active"].to_numpy() * w * wb / bw


def checkpoint_kernel(df: pd.DataFrame) -> np.ndarray:
    """Rows whose kernel is the one the format's checkpoint runs (:data:`CHECKPOINT_KERNELS`)."""
    keep = np.ones(len(df), dtype=bool)
    for fmt, prefix in CHECKPOINT_KERNELS.items():
        of_fmt = (df["moe_dtype"] == fmt).to_numpy()
        keep &= ~of_fmt | df["kernel_source"].astype(str).str.startswith(prefix).to_numpy()
    return keep


def load(data_dir: Path, gpus: dict[str, HardwareProfile], moe_formats: tuple[str, ...] | None = None) -> MoeMlaData:
    """Both tables, filtered and annotated; a missing file leaves its part
    None. ``moe_formats``: keep only these MoE formats (annotating every
    row's routing takes most of a minute)."""
    moe_path, mla_path = data_dir / "kernels" / "moe.csv.gz", data_dir / "kernels" / "mla.csv.gz"
    moe = mla = None
    excluded: dict[str, int] = {}
    names = data_name_map("system", gpus)
    if moe_path.is_file():
        df = _read(moe_path, names)
        df = df[(df["framework_version"].astype(str) == MOE_VERSION) & df["profile"].isin(gpus)].copy()
        df["moe_dtype"] = df["moe_dtype"].map(M.moe_dtype)
        if moe_formats is not None:
            df = df[df["moe_dtype"].isin(moe_formats)]
        df = df[checkpoint_kernel(df)]
        df = moe_routing.annotate(router_groups(df))
        df["gated"] = collector_gated(df)
        df["kernel"] = kernel_family(df)
        df["shape"] = shape_label(df)
        ok = df["t_s"].to_numpy() >= weight_floor_s(df, gpus)
        for prof, n in df[~ok].groupby("profile").size().items():
            excluded[f"moe {prof}"] = int(n)
        moe = df[ok].reset_index(drop=True)
    if mla_path.is_file():
        df = _read(mla_path, names)
        df = df[df["profile"].isin(gpus)].copy()
        kern = df[df["table"].isin(["context_mla_perf", "generation_mla_perf"])
                  & (df["framework_version"].astype(str) == MLA_KERNEL_VERSION)]
        mod = fastest_modules(df[df["table"].isin(MODULE_TABLES)
                                 & (df["framework_version"].astype(str) == MLA_MODULE_VERSION)])
        mla = _with_kv_bytes(pd.concat([kern, mod]).reset_index(drop=True), mla_path)
    return MoeMlaData(moe, mla, excluded)


MODULE_TABLES = ("mla_context_module_perf", "mla_generation_module_perf")
# The stacks whose own MLA module rows ``kernels/mla_more.csv.gz`` holds, and
# the release they were timed on. SGLang is not one: its rows there are
# kernel-only (context_mla_perf, generation_mla_perf, mla_bmm_perf), the
# attention kernel without the module's projections and per-call costs, while
# the profile's mla_decode is fitted inside the module (it absorbs those), so
# no SGLang row compares with what the profile prices.
STACK_MODULE_VERSIONS = {"trtllm": "1.3.0rc20"}


def fastest_modules(df: pd.DataFrame) -> pd.DataFrame:
    """Each module configuration's fastest row: the collector times every attention backend, and a tuned
    deployment runs the fastest."""
    keys = ["profile", "table", "kv_cache_dtype", "gemm_type", "num_heads_per_gpu", "batch_size", "isl", "kv_len"]
    return df.loc[df.groupby(keys, dropna=False)["t_s"].idxmin()]


def _with_kv_bytes(df: pd.DataFrame, path: Path) -> pd.DataFrame:
    df = df.assign(kv_bytes=df["kv_cache_dtype"].map(_KV))
    if df["kv_bytes"].isna().any():
        raise LlmsimError(f"MLA rows with unknown kv_cache_dtype {sorted(set(df.loc[df.kv_bytes.isna(), 'kv_cache_dtype']))}",
                          source=path)
    return df


def stack_generation_modules(data_dir: Path, gpus: dict[str, HardwareProfile], stack: str) -> pd.DataFrame:
    """``stack``'s own MLA generation-module rows on ``gpus`` (:data:`STACK_MODULE_VERSIONS`), empty
    when the table or the stack's rows are missing."""
    path = data_dir / "kernels" / "mla_more.csv.gz"
    version = STACK_MODULE_VERSIONS.get(stack)
    if version is None or not path.is_file():
        return pd.DataFrame(columns=["profile"])
    df = _read(path, data_name_map("system", gpus))
    df = df[(df["framework"] == stack) & (df["framework_version"].astype(str) == version)
            & (df["table"] == "mla_generation_module_perf") & df["profile"].isin(gpus)]
    return _with_kv_bytes(fastest_modules(df).reset_index(drop=True), path)


def measured(data_dir: Path, gpus: dict[str, HardwareProfile]) -> list[str]:
    """The profiles of ``gpus`` with rows in kernels/moe.csv.gz or mla.csv.gz
    (found by their ``data_names.system``), sorted."""
    names = data_name_map("system", gpus)
    seen: set[str] = set()
    for f in ("moe.csv.gz", "mla.csv.gz"):
        path = data_dir / "kernels" / f
        if path.is_file():
            try:
                seen |= set(pd.read_csv(path, usecols=["gpu"])["gpu"].astype(str).unique())
            except (OSError, ValueError) as e:
                raise LlmsimError(f"cannot read kernel table: {e}", source=path) from None
    return sorted(p for n, p in names.items() if n in seen)


def _read(path: Path, names: dict[str, str]) -> pd.DataFrame:
    try:
        st = path.stat()
        df = _parsed(path, st.st_mtime_ns, st.st_size)
    except (OSError, ValueError) as e:
        raise LlmsimError(f"cannot read kernel table: {e}", source=path) from None
    if "gpu" not in df.columns or "latency_ms" not in df.columns:
        raise LlmsimError("missing columns gpu/latency_ms", source=path)
    df = df[df["gpu"].isin(names)].copy()
    df["profile"] = df["gpu"].map(names)
    df["t_s"] = df["latency_ms"].astype(float) * 1e-3
    return df[df["t_s"] > 0]


@lru_cache(maxsize=4)
def _parsed(path: Path, _mtime_ns: int, _size: int) -> pd.DataFrame:
    """The whole table, parsed once while the file's modification time and size stay the same: a
    calibration reads moe_more.csv.gz (1.2 M rows, seconds to parse) once per stack it compares, and
    a process that calibrates again (a notebook, the test suite) read all four tables again. Shared:
    :func:`_read` selects its rows into a frame of its own and changes nothing here."""
    return pd.read_csv(path, low_memory=False)


# ---- predictions (the engine's functions, vectorised over rows) ----

def predict_moe(df: pd.DataFrame, gpu: HardwareProfile, p: RooflineParams) -> np.ndarray:
    return evaluate.moe(df, gpu, p)


def _shape(heads) -> A.MlaShape:
    return A.MlaShape(num_heads=int(heads), **DSV3)


def _by_groups(df: pd.DataFrame, keys: list[str], fn: Callable[[tuple, np.ndarray], np.ndarray]) -> np.ndarray:
    """``fn(key, positions)`` for each group of rows sharing ``keys``, into one array. One grouping per
    call: a fit prices its rows a few hundred times, and selecting them as data frames, head count by
    head count and then table by table, was most of that."""
    out = np.empty(len(df))
    for key, idx in df.groupby(keys).indices.items():
        out[idx] = fn(key if isinstance(key, tuple) else (key,), idx)
    return out


def _per_heads(df: pd.DataFrame, fn: Callable[[pd.DataFrame, A.MlaShape], np.ndarray]) -> np.ndarray:
    return _by_groups(df, ["num_heads_per_gpu"], lambda key, idx: fn(df.iloc[idx], _shape(key[0])))


def predict_priced(df: pd.DataFrame, gpu: HardwareProfile) -> np.ndarray:
    """One format's rows as a replica prices them: each layout by the
    parameter set of ``gpu``'s calibration it would run
    (:meth:`Calibration.moe_for`)."""
    fmt, out = str(df["moe_dtype"].iloc[0]), np.empty(len(df))
    for ep, idx in df.groupby("moe_ep").indices.items():
        p = gpu.calibration.moe_for(fmt, int(ep))
        if p is None:
            raise LlmsimError(f"{gpu.name} has no MoE calibration for {fmt}")
        out[idx] = predict_moe(df.iloc[idx], gpu, p)
    return out


def predict_mla_prefill(df: pd.DataFrame, gpu: HardwareProfile, p: RooflineParams) -> np.ndarray:
    """``batch`` prompts of ``isl`` tokens, no prefix: FLOPs and bytes summed, one blend."""
    batch, isl, kv_bytes = (df[c].to_numpy() for c in ("batch_size", "isl", "kv_bytes"))

    def one(key: tuple, i: np.ndarray) -> np.ndarray:
        b = batch[i]
        f, nb = A.mla_prefill_flops_bytes(isl[i], 0.0, _shape(key[0]), kv_bytes[i])
        return np.asarray(blend(b * f / (gpu.peak_flops("bf16") * p.eta_compute),
                                b * nb / (gpu.hbm_bandwidth * p.eta_memory), p.sharpness)) + p.fixed_us * 1e-6
    return _by_groups(df, ["num_heads_per_gpu"], one)


def predict_mla_decode(df: pd.DataFrame, gpu: HardwareProfile, p: RooflineParams) -> np.ndarray:
    """Σcontext = batch · (cached + 1), as the engine counts it."""
    batch, kv_len = df["batch_size"].to_numpy(), df["kv_len"].to_numpy()

    def one(key: tuple, i: np.ndarray) -> np.ndarray:
        heads, kvb = key
        b = batch[i]
        return A.mla_decode_time(b, b * (kv_len[i] + 1.0), _shape(heads), gpu, p, float(kvb))
    return _by_groups(df, ["num_heads_per_gpu", "kv_bytes"], one)


def predict_module(df: pd.DataFrame, gpu: HardwareProfile, attn_prefill: RooflineParams,
                   attn_decode: RooflineParams, proj: RooflineParams) -> np.ndarray:
    """Module rows of one gemm_type: context (batch × isl new tokens) or generation (batch, kv_len)."""
    col = {c: df[c].to_numpy() for c in ("batch_size", "isl", "kv_len") if c in df}   # isl: context rows' only

    def one(key: tuple, i: np.ndarray) -> np.ndarray:
        heads, table, kvb, gt = key
        b, s = col["batch_size"][i], _shape(heads)
        if table == "mla_context_module_perf":
            return A.mla_module_prefill_time(col["isl"][i], 0.0, s, gpu, attn_prefill, proj, kvb, M.moe_dtype(gt),
                                             sequences=b)
        return A.mla_module_decode_time(b, b * (col["kv_len"][i] + 1.0), s, gpu, attn_decode, proj, kvb,
                                        M.moe_dtype(gt))
    return _by_groups(df, ["num_heads_per_gpu", "table", "kv_bytes", "gemm_type"], one)


# ---- fitting ----

def _common_family(fam: np.ndarray, shapes: pd.Series) -> str:
    """The kernel family most of the measured model shapes ran."""
    pairs = pd.DataFrame({"shape": shapes.to_numpy(), "family": fam}).drop_duplicates()
    return str(pairs["family"].value_counts().idxmax())


def engine_kernels(rows: pd.DataFrame, families: np.ndarray | None = None
                   ) -> tuple[np.ndarray, np.ndarray | None]:
    """Which of one format's rows price the kernel a replica runs without
    expert parallelism (``calibration.moe``) and which the one it runs with
    it (``calibration.moe_ep``, None when that is the same kernel).
    ``families``: each row's kernel (default :func:`kernel_family`, vLLM's
    families; another stack's rows name their own).

    The stack picks its kernel by layout (vLLM on Hopper: block-FP8 in
    Triton at ep = 1, FlashInfer's CUTLASS kernel at ep > 1) and, on
    Blackwell, by router and activation (FlashInfer's CUTLASS kernel for the
    few its TRT-LLM kernels refuse). A replica is priced by layout only, so
    each side takes the family most model shapes ran there, fitted on all of
    that family's rows; a shape that ran another kernel is priced by it
    anyway, and the error rows count it."""
    fam = kernel_family(rows) if families is None else np.asarray(families, dtype=object)
    shapes = shape_label(rows)
    ep1 = (rows["moe_ep"] == 1).to_numpy()
    base = _common_family(fam[ep1], shapes[ep1]) if ep1.any() else _common_family(fam, shapes)
    if ep1.all():
        return fam == base, None
    spread = _common_family(fam[~ep1], shapes[~ep1])
    return fam == base, (None if spread == base else fam == spread)


def fit_moe(df: pd.DataFrame, gpu: HardwareProfile, near: FamilyFit | None = None) -> FamilyFit:
    """The MoE parameters of one format's rows; ``near``: refit from that fit
    with its loss and a short search (a leave-one-out refit is close to the
    fit on all rows)."""
    df = fit_subset(df)
    sp = space("moe", df)
    if near is not None:
        sp = replace(sp, start=tuple(float(np.clip(getattr(near.params, n), lo, hi))
                                     for n, lo, hi in zip(sp.names, sp.lower, sp.upper)))
        loss = next(x for x in LOSSES if x[0] == near.loss)
        return fit_params("moe", sp, evaluate.moe_evaluator(df, gpu), df["t_s"].to_numpy(), losses=(loss,),
                          max_nfev=_REFIT_NFEV)
    starts = tuple(tuple(s[n] for n in sp.names) for s in _MOE_STARTS)
    return fit_params("moe", sp, evaluate.moe_evaluator(df, gpu), df["t_s"].to_numpy(), starts,
                      good_enough=8.0)


@dataclass(frozen=True)
class MlaFit:
    prefill: RooflineParams
    decode: RooflineParams
    projection: dict[str, RooflineParams]


def fit_mla_kernels(data: MoeMlaData, profile: str, gpu: HardwareProfile) -> tuple[RooflineParams, RooflineParams] | None:
    """Kernel-only parameters on the kernel tables (vLLM 0.14.0, H100/H200):
    a check of the kernel functions' form, not what the profile stores (those
    rows carry ~0.17 ms of per-call overhead the CUDA-graph module rows do not)."""
    ctx, gen = data.mla_rows(profile, "context_mla_perf"), data.mla_rows(profile, "generation_mla_perf")
    if not len(ctx) or not len(gen):
        return None
    ctx, gen = fit_subset(ctx), fit_subset(gen)
    pre = fit_params("mla_prefill", space("attention_prefill", ctx), lambda p: predict_mla_prefill(ctx, gpu, p),
                     ctx["t_s"].to_numpy()).params
    dec = fit_params("mla_decode", space("mla_decode", gen), lambda p: predict_mla_decode(gen, gpu, p),
                     gen["t_s"].to_numpy()).params
    return pre, dec


def fit_mla(data: MoeMlaData, profile: str, gpu: HardwareProfile) -> MlaFit | None:
    """What the profile stores, from the module rows (vLLM 0.24.0 under CUDA
    graphs, the engine's setting): the attention kernels' parameters fitted
    on the bf16 modules with the projections priced by the GPU's dense GEMM
    calibration, then one projection GEMM set per linear format with the
    kernels fixed."""
    mctx = data.mla_rows(profile, "mla_context_module_perf")
    mgen = data.mla_rows(profile, "mla_generation_module_perf")
    if not len(mctx) or not len(mgen):
        return None
    dense = gpu.calibration.gemm
    c = fit_subset(mctx[mctx["gemm_type"] == "bfloat16"])
    g = fit_subset(mgen[mgen["gemm_type"] == "bfloat16"])
    pre = fit_params("mla_prefill", space("mla_prefill", c),
                     lambda p: predict_module(c, gpu, p, RooflineParams(), dense), c["t_s"].to_numpy()).params
    dec = fit_params("mla_decode", space("mla_decode", g),
                     lambda p: predict_module(g, gpu, RooflineParams(), p, dense), g["t_s"].to_numpy()).params
    proj = {}
    for gt, rows in pd.concat([mctx, mgen]).groupby("gemm_type"):
        rows = fit_subset(rows)
        proj[M.moe_dtype(str(gt))] = fit_params(
            "mla_projection", space("mla_projection", rows), lambda p, r=rows: predict_module(r, gpu, pre, dec, p),
            rows["t_s"].to_numpy()).params
    return MlaFit(pre, dec, proj)


def calibrate(data: MoeMlaData, profile: str, gpu: HardwareProfile) -> tuple[Calibration, list[dict]]:
    """``gpu``'s calibration with its MoE and MLA parameters, and the error rows."""
    update: dict = {}
    moe_rows = data.moe_rows(profile)
    moe_params: dict[str, MoeParams] = {}
    moe_ep: dict[str, MoeParams] = {}
    for fmt, rows in moe_rows.groupby("moe_dtype"):
        base, with_ep = engine_kernels(rows)
        moe_params[str(fmt)] = fit_moe(rows[base].reset_index(drop=True), gpu).params   # type: ignore[assignment]
        if with_ep is not None:
            moe_ep[str(fmt)] = fit_moe(rows[with_ep].reset_index(drop=True), gpu).params   # type: ignore[assignment]
    update["moe"], update["moe_ep"] = moe_params, moe_ep
    mla = fit_mla(data, profile, gpu)
    if mla is not None:
        update.update(mla_prefill=mla.prefill, mla_decode=mla.decode, mla_projection=mla.projection)
    cal = gpu.calibration.model_copy(update=update)
    errors = error_rows(data, profile, gpu.model_copy(update={"calibration": cal}))
    return cal, errors


def _err(gpu_name: str, label: str, pred: np.ndarray, t: np.ndarray) -> dict:
    e = ape(pred, t)
    return dict(gpu=gpu_name, family=label, n=len(t), median_ape=float(np.median(e)),
                p90_ape=float(np.percentile(e, 90)))


def error_rows(data: MoeMlaData, profile: str, gpu: HardwareProfile) -> list[dict]:
    """In-sample errors per MoE format (and router distribution) and MLA table."""
    cal, rows = gpu.calibration, []
    m = data.moe_rows(profile)
    for fmt, d in m.groupby("moe_dtype"):
        if str(fmt) not in cal.moe:
            continue
        rows.append(_err(profile, f"moe {fmt}", predict_priced(d, gpu), d["t_s"].to_numpy()))
    for table in ("mla_context_module_perf", "mla_generation_module_perf"):
        d = data.mla_rows(profile, table)
        for gt, dd in d.groupby("gemm_type"):
            fmt = M.moe_dtype(str(gt))
            if fmt in cal.mla_projection:
                pred = predict_module(dd, gpu, cal.mla_prefill, cal.mla_decode, cal.mla_projection[fmt])
                rows.append(_err(profile, f"{table.removesuffix('_perf')} {fmt}", pred, dd["t_s"].to_numpy()))
    return rows


MOE_MLA_FIELDS = ("moe", "moe_ep", "mla_prefill", "mla_decode", "mla_projection")


def is_moe_mla_error(key: str) -> bool:
    return key.startswith(("moe ", "mla_"))


def keep_current(new: Calibration, current: Calibration) -> Calibration:
    """``new`` with the MoE/MLA parameters and errors of ``current`` (a run that skipped their fit)."""
    errors = {**new.error, **{k: v for k, v in current.error.items() if is_moe_mla_error(k)}}
    update = {f: getattr(current, f) for f in MOE_MLA_FIELDS}
    return Calibration.model_validate(new.model_copy(update={**update, "error": errors}).model_dump())


def fit_error_block(rows: list[dict]) -> dict[str, FitError]:
    return {r["family"]: FitError(median_ape=round(r["median_ape"], 2), p90_ape=round(r["p90_ape"], 2), n=r["n"])
            for r in rows}


def thin_tokens(rows: pd.DataFrame, stride: int) -> pd.DataFrame:
    """Every ``stride``-th measured token count (a faster fit over the same shapes)."""
    counts = np.sort(rows["num_tokens"].unique())
    return rows[rows["num_tokens"].isin(counts[::stride])].reset_index(drop=True)


def leave_one_shape_out_per_kernel(rows: pd.DataFrame, gpu: HardwareProfile, stride: int = 1
                                   ) -> tuple[np.ndarray, np.ndarray, dict[str, FamilyFit]]:
    """One format's rows, each kernel family (column ``kernel``) fitted on its
    own: (in-sample APE, leave-one-shape-out APE, the fit per family). A
    family measured on a single shape has no other shape of its own to learn
    from: held out, it is predicted by the fit over the format's other rows
    (the other kernel families), as a model without any measured shape of its
    kernel would be."""
    rows = rows.reset_index(drop=True)
    e_in, e_out = np.full(len(rows), np.nan), np.full(len(rows), np.nan)
    fits: dict[str, FamilyFit] = {}
    kern, t = rows["kernel"].to_numpy(), rows["t_s"].to_numpy()
    for fam in np.unique(kern):
        sel = kern == fam
        part = rows[sel].reset_index(drop=True)
        fits[str(fam)] = fit = fit_moe(thin_tokens(part, stride), gpu)
        e_in[sel] = ape(predict_moe(part, gpu, fit.params), t[sel])
        if part["shape"].nunique() > 1:
            e_out[sel] = leave_one_shape_out(part, gpu, fit, stride)
        elif (~sel).any():
            other = fit_moe(thin_tokens(rows[~sel], stride), gpu).params
            e_out[sel] = ape(predict_moe(part, gpu, other), t[sel])
    return e_in, e_out, fits


def leave_one_shape_out(rows: pd.DataFrame, gpu: HardwareProfile, near: FamilyFit | None = None,
                        stride: int = 1) -> np.ndarray:
    """Each model shape predicted by parameters fitted without it (APE per row,
    row order kept; fits on every ``stride``-th token count). A format measured
    on a single shape has nothing to hold out: NaN."""
    rows = rows.reset_index(drop=True)
    out = np.full(len(rows), np.nan)
    shapes = rows["shape"].to_numpy()
    if len(np.unique(shapes)) < 2:
        return out
    for s in np.unique(shapes):
        test = shapes == s
        p = fit_moe(thin_tokens(rows[~test], stride), gpu, near).params
        out[test] = ape(predict_moe(rows[test], gpu, p), rows["t_s"].to_numpy()[test])
    return out
