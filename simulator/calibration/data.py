"""Reading the measured kernel tables and choosing the rows the engine models.

The CSVs (AIConfigurator's vLLM rows, see ``../shared/data/README.md``) are
read in place, never copied into the repository. Each op family becomes one
frame with the shape columns the cost-model components need, the measured
time in seconds (``t_s``) and the hardware profile it belongs to. Row
*selection* lives here too, because which rows count as "what vLLM runs" is a
modelling decision the fit and the report must share.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from ..errors import LlmsimError

FAMILIES = ("gemm", "attention_prefill", "attention_decode", "allreduce")

# The measured GPUs, by the ``gpu`` string in the CSVs.
GPU_PROFILES = {
    "H100-SXM5-80GB": "h100-sxm",
    "A100-SXM4-80GB": "a100-sxm-80gb",
}

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
    """One frame per op family, rows already filtered to what the fit uses."""

    frames: dict[str, pd.DataFrame]
    data_dir: Path
    # profile -> "vLLM 0.19.0" etc., and the AIConfigurator commit, for the
    # ``source`` field of the profiles and the docs' attribution.
    versions: dict[str, str]
    commit: str

    def family(self, family: str, profile: str | None = None) -> pd.DataFrame:
        df = self.frames[family]
        return df if profile is None else df[df["profile"] == profile]

    @property
    def profiles(self) -> list[str]:
        return sorted(set().union(*(set(df["profile"]) for df in self.frames.values())))


def _read(data_dir: Path, kind: str) -> pd.DataFrame:
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
    df = df[df["gpu"].isin(GPU_PROFILES)].copy()
    df["profile"] = df["gpu"].map(GPU_PROFILES)
    df["t_s"] = df["measured_time_ms"].astype(float) * 1e-3
    return df[df["t_s"] > 0]


def _gemm(df: pd.DataFrame) -> pd.DataFrame:
    df = df[(df["framework"] == "vllm") & (df["op"] == "gemm") & (df["dtype"] == "bfloat16")]
    return df[["profile", "m", "n", "k", "t_s"]].astype({"m": float, "n": float, "k": float}).reset_index(drop=True)


def _attention(df: pd.DataFrame, op: str) -> pd.DataFrame:
    df = df[(df["framework"] == "vllm") & (df["op"] == op)].copy()
    df["kv_bytes"] = df["kv_dtype"].map(_KV_BYTES)
    if df["kv_bytes"].isna().any():
        bad = sorted(set(df.loc[df["kv_bytes"].isna(), "kv_dtype"].astype(str)))
        raise LlmsimError(f"attention rows with unknown kv_dtype {bad}")
    cols = ["profile", "batch_size", "context_len", "num_heads", "num_kv_heads", "head_dim", "kv_bytes", "t_s"]
    return df[cols].astype({c: float for c in cols[1:]}).reset_index(drop=True)


def select_allreduce(df: pd.DataFrame) -> pd.DataFrame:
    """The custom AR (graph) rows below 8 MiB, where vLLM runs it, and every
    NCCL row (the "nccl" regime, which stacks without the custom kernel run
    at every size)."""
    small = (df["kernel_source"] == CUSTOM_AR_KERNEL) & (df["message_bytes"] < CUSTOM_AR_MAX_BYTES)
    nccl = df["kernel_source"] == NCCL_KERNEL
    df = df[small | nccl].copy()
    df["impl"] = df["kernel_source"].map({CUSTOM_AR_KERNEL: "vllm-custom", NCCL_KERNEL: "nccl"})
    return (df[["profile", "num_gpus", "message_bytes", "impl", "t_s"]]
            .astype({"num_gpus": float, "message_bytes": float}).reset_index(drop=True))


def load(data_dir: str | Path | None = None) -> KernelData:
    """Read and filter the three kernel tables; every problem is an LlmsimError."""
    d = Path(data_dir).expanduser() if data_dir is not None else default_data_dir()
    if d.exists() and not d.is_dir():
        raise LlmsimError("--data must be a directory (the shared data folder holding kernels/)", source=d)
    if not d.is_dir():
        raise LlmsimError(f"data directory {d} does not exist; {DATA_ORIGIN}: pass --data DIR, the folder "
                          "that holds kernels/")
    gemm, attn, ar = _read(d, "gemm"), _read(d, "attention"), _read(d, "allreduce")
    versions = {}
    for prof, grp in pd.concat([gemm, attn])[lambda d: d["framework"] == "vllm"].groupby("profile"):
        vs = sorted(set(grp.get("framework_version", pd.Series(dtype=str)).dropna().astype(str)))
        versions[prof] = "vLLM " + "/".join(vs) if vs else "vLLM"
    commits = sorted(set(pd.concat([gemm, attn, ar]).get("source_commit", pd.Series(dtype=str)).dropna().astype(str)))
    frames = {
        "gemm": _gemm(gemm),
        "attention_prefill": _attention(attn, "attention_prefill"),
        "attention_decode": _attention(attn, "attention_decode"),
        "allreduce": select_allreduce(ar),
    }
    empty = [k for k, v in frames.items() if v.empty]
    if empty:
        raise LlmsimError(f"no usable rows for {', '.join(empty)} in {d / 'kernels'}")
    return KernelData(frames, d, versions, ",".join(c[:8] for c in commits) or "unknown")
