"""Reading the measured kernel tables and choosing the rows the engine models.

The CSVs (AIConfigurator's kernel timings, see ``../shared/data/README.md``)
are read in place, never copied into the repository. Each op family becomes
one frame with the shape columns the cost-model components need, the
measured time in seconds (``t_s``) and the hardware profile it belongs to.
Row *selection* lives here too, because which rows count as "what vLLM
runs" is a modelling decision the fit and the report must share.

The newer tables (H200, B200, GB200; every stack) measure ten times the
shapes of the first ones (H100, A100). A GPU is fitted on the shapes the
first tables hold (the *fit grid*), so its errors compare row for row with
H100's and the fit stays as fast; the other shapes are kept apart and scored
as held out.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from ..errors import LlmsimError
from ..profiles.backend import serving_stacks
from ..profiles.hardware import HardwareProfile, builtin_hardware, data_name_map
from .tables import read_columns

FAMILIES = ("gemm", "attention_prefill", "attention_decode", "allreduce")

# vLLM's CustomAllreduce handles messages below its registered buffer size
# (``max_size`` = 8 MiB by default) and hands larger ones to NCCL. Under CUDA
# graphs (decode, and the captured token counts) it runs the graph variant,
# whose buffers are registered at capture time; the eager variant pays an
# extra copy and launch (~20-45 µs) that piecewise graphs avoid.
CUSTOM_AR_MAX_BYTES = 8 * 2**20
CUSTOM_AR_KERNEL = "vLLM_custom_graph/"
NCCL_KERNEL = "NCCL"

_FILES = {"gemm": "gemm.csv", "attention": "attention.csv", "allreduce": "allreduce.csv"}
_NEEDED = {
    "gemm": ["gpu", "framework", "op", "m", "n", "k", "dtype", "measured_time_ms"],
    "attention": ["gpu", "framework", "op", "batch_size", "context_len", "num_heads", "num_kv_heads",
                  "head_dim", "kv_dtype", "measured_time_ms"],
    "allreduce": ["gpu", "framework", "kernel_source", "op", "num_gpus", "message_bytes", "measured_time_ms"],
}
_KV_BYTES = {"bfloat16": 2.0, "float16": 2.0, "fp16": 2.0, "bf16": 2.0, "fp8": 1.0}


# The newer tables: H200, B200 and GB200 with vLLM, SGLang and TensorRT-LLM
# (H100 with SGLang and TensorRT-LLM), their rows named by ``system``.
STACK_FILES = {"gemm": "gemm_h200_b200.csv.gz", "attention": "attention_h200_b200.csv.gz",
               "allreduce": "allreduce_h200_b200.csv.gz"}
STACK_COLUMNS = {
    "gemm": ["system", "framework", "framework_version", "dtype", "m", "n", "k", "measured_time_ms"],
    "attention": ["system", "framework", "framework_version", "op", "kernel_source", "dtype", "kv_dtype",
                  "head_dim", "num_heads", "num_kv_heads", "window_size", "batch_size", "context_len",
                  "measured_time_ms"],
    "allreduce": ["system", "framework", "framework_version", "op", "implementation", "dtype", "num_gpus",
                  "message_bytes", "measured_time_ms"],
}
# The stack whose kernels a profile's own parameters describe (the backend
# profiles' default); the others get per-stack overrides where they differ.
DEFAULT_STACK = "vllm"
# Each stack's CUDA-graph custom all-reduce as the tables' ``implementation``
# column labels it (TensorRT-LLM's AllReduce op with strategy AUTO runs captured
# as well). These are the measurement files' labels, not the list of stacks
# (kernel_stacks): a measured stack without one gets the nccl-tests rows alone.
CUSTOM_AR_IMPL = {"vllm": "vllm_graph", "sglang": "sglang_graph", "trtllm": "trtllm"}
NCCL_TESTS = "nccl-tests"
# Per-tensor fp8 GEMM rows (the fit-grid shapes), the family fp8_gemm_efficiency is fitted on.
FP8_GEMM = "gemm_fp8"
# NVFP4 GEMM rows (the fit-grid shapes, Blackwell), the family fp4_gemm_efficiency is fitted on:
# every stack's, the default's included, under (stack, FP4_GEMM) in KernelData.stacks.
FP4_GEMM = "gemm_nvfp4"
# The shape columns that identify an attention row of one op.
ATTENTION_SHAPE = ["batch_size", "context_len", "num_heads", "num_kv_heads", "head_dim", "kv_bytes"]

#: What the data is and where it comes from, for the message when it cannot be found.
DATA_ORIGIN = ("the measured kernel tables (kernels/gemm.csv, attention.csv, allreduce.csv: AIConfigurator's "
               "vLLM kernel measurements, described in shared/data/README.md) are not part of llmsim's package; "
               "the project keeps them in shared/data beside the repository")


def data_dir_candidates(cwd: Path | None = None) -> list[Path]:
    """Where ``shared/data`` may be, in order: beside the repository this
    module runs from (a checkout or an editable install), then beside the
    working directory and each of its parents (an installed llmsim run from
    inside, or next to, the project)."""
    here = Path(__file__).resolve().parents[2].parent / "shared" / "data"
    start = (cwd or Path.cwd()).resolve()
    out = [here]
    for d in (start, *start.parents):
        for c in (d / "shared" / "data", d / "data") if d.name == "shared" else (d / "shared" / "data",):
            if c not in out:
                out.append(c)
    return out


def default_data_dir(cwd: Path | None = None) -> Path:
    """The first candidate (:func:`data_dir_candidates`) holding ``kernels/``;
    an LlmsimError naming every place looked when none does."""
    candidates = data_dir_candidates(cwd)
    for c in candidates:
        if (c / "kernels").is_dir():
            return c
    looked = ", ".join(str(c) for c in candidates[:4]) + (", ..." if len(candidates) > 4 else "")
    raise LlmsimError(f"no shared data folder found (looked in {looked}); {DATA_ORIGIN}: give --data DIR, "
                      "the folder that holds kernels/")


@dataclass(frozen=True)
class KernelData:
    """One frame per op family, rows already filtered to what the fit uses.

    ``frames`` hold each GPU's default-stack (vLLM) rows on the *fit grid*:
    the shapes the first tables measure (H100, A100). ``held_out`` holds the
    newer tables' other shapes of the same kernels, never fitted, to score
    the fit on; ``stacks`` the other stacks' rows (fit grid and beyond) by
    (stack, family)."""

    frames: dict[str, pd.DataFrame]
    data_dir: Path
    # profile -> "vLLM 0.19.0" etc., and the AIConfigurator commit, for the
    # ``source`` field of the profiles and the docs' attribution.
    versions: dict[str, str]
    commit: str
    held_out: dict[str, pd.DataFrame] = field(default_factory=dict)
    stacks: dict[tuple[str, str], pd.DataFrame] = field(default_factory=dict)
    # profile -> the file names its rows come from
    files: dict[str, str] = field(default_factory=dict)
    # per-tensor fp8 GEMM rows of the default stack (for fp8_gemm_efficiency)
    fp8: pd.DataFrame = field(default_factory=pd.DataFrame)

    def family(self, family: str, profile: str | None = None) -> pd.DataFrame:
        df = self.frames[family]
        return df if profile is None else df[df["profile"] == profile]

    def stack(self, stack: str, family: str, profile: str | None = None) -> pd.DataFrame:
        """``stack``'s rows of ``family`` (the fit grid and the held-out shapes, column ``on_grid``)."""
        if stack == DEFAULT_STACK and family == FP8_GEMM:
            df = self.fp8.assign(on_grid=True) if len(self.fp8) else pd.DataFrame(columns=["profile"])
        elif stack == DEFAULT_STACK and family != FP4_GEMM:
            parts = [self.family(family).assign(on_grid=True)]
            if family in self.held_out:
                parts.append(self.held_out[family].assign(on_grid=False))
            df = pd.concat(parts, ignore_index=True)
        else:
            df = self.stacks.get((stack, family), pd.DataFrame(columns=["profile"]))
        return df if profile is None else df[df["profile"] == profile]

    @property
    def profiles(self) -> list[str]:
        return sorted(set().union(*(set(df["profile"].unique()) for df in self.frames.values())))


def first_table_profiles(gpus: dict[str, HardwareProfile] | None = None) -> dict[str, str]:
    """The first tables' (gemm.csv, attention.csv, allreduce.csv) ``gpu`` string
    -> profile, from each profile's ``data_names.kernels``."""
    return data_name_map("kernels", gpus)


def _read(data_dir: Path, kind: str, names: dict[str, str]) -> pd.DataFrame:
    path = data_dir / "kernels" / _FILES[kind]
    if not path.is_file():
        raise LlmsimError(f"measured kernel table not found; expected {path} "
                          "(point --data at the shared data directory that holds kernels/)", source=path)
    try:
        df = pd.read_csv(path)
    except (OSError, ValueError) as e:
        raise LlmsimError(f"cannot read kernel table: {e}", source=path) from None
    missing = [c for c in _NEEDED[kind] if c not in df.columns]
    if missing:
        raise LlmsimError(f"missing columns {', '.join(missing)}", source=path)
    df = df[df["gpu"].isin(names)].copy()
    df["profile"] = df["gpu"].map(names)
    df["t_s"] = df["measured_time_ms"].astype(float) * 1e-3
    return df[df["t_s"] > 0]


def system_profiles(gpus: dict[str, HardwareProfile] | None = None) -> dict[str, str]:
    """Data ``system`` name -> profile, from each profile's ``data_names.system``."""
    return data_name_map("system", gpus)


def _read_stack_table(data_dir: Path, kind: str, systems: dict[str, str]) -> pd.DataFrame:
    df = read_columns(data_dir / "kernels" / STACK_FILES[kind], STACK_COLUMNS[kind])
    df = df[df["system"].isin(systems)]
    df = df.assign(profile=df["system"].map(systems), t_s=df["measured_time_ms"].astype(float) * 1e-3)
    return df[df["t_s"] > 0]


def _gemm(df: pd.DataFrame, dtype: str = "bfloat16", framework: str = "vllm") -> pd.DataFrame:
    if "op" in df:
        df = df[df["op"] == "gemm"]
    df = df[(df["framework"] == framework) & (df["dtype"] == dtype)]
    return df[["profile", "m", "n", "k", "t_s"]].astype({"m": float, "n": float, "k": float}).reset_index(drop=True)


def _kv_bytes(df: pd.DataFrame) -> pd.DataFrame:
    df = df.assign(kv_bytes=df["kv_dtype"].map(_KV_BYTES))
    if df["kv_bytes"].isna().any():
        bad = sorted(set(df.loc[df["kv_bytes"].isna(), "kv_dtype"].astype(str)))
        raise LlmsimError(f"attention rows with unknown kv_dtype {bad}")
    return df


def _attention(df: pd.DataFrame, op: str, framework: str = "vllm") -> pd.DataFrame:
    df = _kv_bytes(df[(df["framework"] == framework) & (df["op"] == op)])
    cols = ["profile", *ATTENTION_SHAPE, "t_s"]
    return df[cols].astype({c: float for c in cols[1:]}).reset_index(drop=True)


def _stack_attention(df: pd.DataFrame, op: str, framework: str) -> pd.DataFrame:
    """Full-attention rows of the kernel the collector timed over the whole
    grid for this stack, GPU and phase (the most rows): the stack's default;
    the others (FA4 on a few H200 shapes, Triton's fp8-KV fallback) cover a
    corner each. Per KV dtype, bf16 compute where the stack has it measured,
    else the compute it pairs with that cache (SGLang runs FP8 context
    attention over an fp8 KV cache)."""
    df = df[(df["framework"] == framework) & (df["op"] == op) & (df["window_size"] == 0)]
    if df.empty:
        return _attention(df, op, framework)
    main = df.groupby("profile", observed=True)["kernel_source"].agg(lambda s: s.value_counts().index[0])
    df = df[(df["kernel_source"].astype(str) == df["profile"].map(main).astype(str)).to_numpy()]
    bf16 = df["dtype"] == "bfloat16"
    has_bf16 = bf16.groupby([df["profile"], df["kv_dtype"]], observed=True).transform("any")
    return _attention(df[bf16 | ~has_bf16], op, framework)


def select_allreduce(df: pd.DataFrame, custom_kernel: str = CUSTOM_AR_KERNEL, column: str = "kernel_source",
                     nccl: str = NCCL_KERNEL, impl: str = "vllm-custom") -> pd.DataFrame:
    """The custom AR (graph) rows below 8 MiB, where vLLM runs it, and every
    NCCL row (the "nccl" regime, which stacks without the custom kernel run
    at every size)."""
    small = (df[column] == custom_kernel) & (df["message_bytes"] < CUSTOM_AR_MAX_BYTES)
    is_nccl = df[column] == nccl
    df = df[small | is_nccl].copy()
    df["impl"] = df[column].map({custom_kernel: impl, nccl: "nccl"})
    return (df[["profile", "num_gpus", "message_bytes", "impl", "t_s"]]
            .astype({"num_gpus": float, "message_bytes": float}).reset_index(drop=True))


def kernel_stacks() -> list[str]:
    """The stacks whose kernel rows calibration reads: every serving stack of
    the backend profiles (built-in or installed), the default first."""
    return [DEFAULT_STACK, *(s for s in serving_stacks() if s != DEFAULT_STACK)]


def _stack_allreduce(df: pd.DataFrame, stack: str) -> pd.DataFrame:
    impl = CUSTOM_AR_IMPL.get(stack)
    keep = (df["implementation"] == impl) | (
        (df["framework"] == NCCL_TESTS) & (df["op"] == "all_reduce") & (df["dtype"] == "fp16"))
    return select_allreduce(df[keep], impl, "implementation", NCCL_TESTS, f"{stack}-custom")


def _split_grid(df: pd.DataFrame, grid: pd.DataFrame, keys: list[str]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(rows whose ``keys`` appear in ``grid``, the others)."""
    on = df[keys].merge(grid[keys].drop_duplicates(), how="left", on=keys, indicator=True)["_merge"].eq("both")
    on = on.to_numpy()
    return df[on].reset_index(drop=True), df[~on].reset_index(drop=True)


def _versions(df: pd.DataFrame, label: str = "vLLM") -> dict[str, str]:
    out = {}
    for prof, grp in df.groupby("profile", observed=True):
        vs = sorted({str(v) for v in grp.get("framework_version", pd.Series(dtype=str)).dropna().unique()})
        out[prof] = f"{label} " + "/".join(vs) if vs else label
    return out


def load(data_dir: str | Path | None = None, progress=None,
         gpus: dict[str, HardwareProfile] | None = None) -> KernelData:
    """Read and filter the kernel tables; every problem is an LlmsimError.

    ``progress(message)`` (optional) is told which table is being read;
    ``gpus`` are the profiles whose rows are kept (default: the built-in ones)."""
    gpus = builtin_hardware() if gpus is None else gpus
    say = progress or (lambda _msg: None)
    d = Path(data_dir).expanduser() if data_dir is not None else default_data_dir()
    if d.exists() and not d.is_dir():
        raise LlmsimError("--data must be a directory (the shared data folder holding kernels/)", source=d)
    if not d.is_dir():
        raise LlmsimError(f"data directory {d} does not exist; {DATA_ORIGIN}: pass --data DIR, the folder "
                          "that holds kernels/")
    say("reading kernels/gemm.csv, attention.csv, allreduce.csv")
    first = first_table_profiles(gpus)
    gemm, attn, ar = _read(d, "gemm", first), _read(d, "attention", first), _read(d, "allreduce", first)
    versions = _versions(pd.concat([gemm, attn])[lambda d: d["framework"] == "vllm"])
    commits = sorted(set(pd.concat([gemm, attn, ar]).get("source_commit", pd.Series(dtype=str)).dropna().astype(str)))
    frames = {
        "gemm": _gemm(gemm),
        "attention_prefill": _attention(attn, "attention_prefill"),
        "attention_decode": _attention(attn, "attention_decode"),
        "allreduce": select_allreduce(ar),
    }
    files = {p: ", ".join(_FILES.values()) for p in set().union(*(set(f["profile"].unique()) for f in frames.values()))}
    held_out: dict[str, pd.DataFrame] = {}
    stacks: dict[tuple[str, str], pd.DataFrame] = {}
    fp8 = pd.DataFrame()
    systems = system_profiles(gpus)
    if systems and all((d / "kernels" / f).is_file() for f in STACK_FILES.values()):
        tables = {}
        for kind, fname in STACK_FILES.items():
            say(f"reading kernels/{fname}")
            tables[kind] = _read_stack_table(d, kind, systems)
        grids = {"gemm": (frames["gemm"], ["m", "n", "k"]),
                 "attention_prefill": (frames["attention_prefill"], ATTENTION_SHAPE),
                 "attention_decode": (frames["attention_decode"], ATTENTION_SHAPE)}
        measured = set(tables["gemm"]["framework"].unique()) | set(tables["attention"]["framework"].unique())
        for stack in kernel_stacks():
            if stack != DEFAULT_STACK and stack not in measured:
                continue        # a stack the tables hold no kernels of (an installed one): nothing to fit
            new = {"gemm": _gemm(tables["gemm"], framework=stack),
                   "attention_prefill": _stack_attention(tables["attention"], "attention_prefill", stack),
                   "attention_decode": _stack_attention(tables["attention"], "attention_decode", stack),
                   "allreduce": _stack_allreduce(tables["allreduce"], stack)}
            for fam, df in new.items():
                if fam in grids:
                    on, off = _split_grid(df, *grids[fam])
                else:
                    on, off = df, df.iloc[:0]
                if stack == DEFAULT_STACK:
                    frames[fam] = pd.concat([frames[fam], on], ignore_index=True)
                    held_out[fam] = off
                else:
                    stacks[(stack, fam)] = pd.concat([on.assign(on_grid=True), off.assign(on_grid=False)],
                                                     ignore_index=True)
            on_fp8 = _split_grid(_gemm(tables["gemm"], "fp8", stack), frames["gemm"], ["m", "n", "k"])[0]
            if stack == DEFAULT_STACK:
                fp8 = on_fp8
            else:
                stacks[(stack, FP8_GEMM)] = on_fp8.assign(on_grid=True)
            on_fp4 = _split_grid(_gemm(tables["gemm"], "nvfp4", stack), frames["gemm"], ["m", "n", "k"])[0]
            stacks[(stack, FP4_GEMM)] = on_fp4.assign(on_grid=True)
        mine = tables["gemm"][tables["gemm"]["framework"] == DEFAULT_STACK]
        versions.update(_versions(mine))
        for p in set(mine["profile"].unique()):
            files[p] = ", ".join(STACK_FILES.values())
    empty = [k for k, v in frames.items() if v.empty]
    if empty:
        raise LlmsimError(f"no usable rows for {', '.join(empty)} in {d / 'kernels'}")
    return KernelData(frames, d, versions, ",".join(c[:8] for c in commits) or "unknown", held_out, stacks,
                      files, fp8)
