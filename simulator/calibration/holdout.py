"""How well a GEMM form predicts shapes it was not fitted on.

In-sample error says little about a model the fit never saw: a form with
enough freedom follows one library's tile choices on the measured grid and
misses elsewhere. So each form is also scored leave-one-group-out: fit on
every row but one group's, predict that group's rows, pool the held-out
errors. Three groupings:

* ``model``: the (n, k) shapes one dense model's linear layers produce on a
  TP shard (fused QKV, output projection, fused gate+up, down) at TP 1, 2, 4
  and 8, for each built-in dense model profile; identical architectures
  (Llama-3/3.1-70B and Llama-2-70B, Llama-3/3.1-8B) are one group. The
  measured table is a 13 × 13 grid of n and k (1024–16384), not per-model
  shapes, so a group holds only the model's shapes that fall on the grid
  (e.g. Llama-3-8B at TP 4: 4096×1024, 7168×4096, 4096×3584), all m.
* ``k`` / ``n``: every row with one reduction length / one output width —
  an unseen layer width, a stricter test than ``model``.

``transfer`` scores the form's *shape* parameters across GPUs instead: fit
everything on one GPU, then refit only the efficiencies and the per-kernel
floor on the other (what a transfer to an unmeasured GPU can hope to know).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..profiles import list_builtin, load_model
from ..profiles.hardware import HardwareProfile
from . import evaluate
from .fit import ape, fit_family

GROUPINGS = ("model", "k", "n")
# Parameters a transfer to another GPU refits; the rest describe the shape dependence.
TRANSFER_FREE = ("eta_compute", "eta_memory", "fixed_us")


def model_shapes(tps: tuple[int, ...] = (1, 2, 4, 8)) -> dict[str, set[tuple[float, float]]]:
    """(n, k) of each dense built-in model's per-layer GEMMs at each TP; one
    entry per distinct architecture, named after the first profile holding it."""
    out: dict[str, set[tuple[float, float]]] = {}
    for name in list_builtin("model_profiles"):
        m = load_model(name)
        if getattr(m, "is_moe", False):
            continue
        gate = 2 if m.is_gated else 1
        h = m.hidden_size
        shapes = set()
        for tp in tps:
            if m.num_attention_heads % tp:
                continue
            shapes |= {(float((m.q_dim + 2 * m.kv_dim) // tp), float(h)), (float(h), float(m.q_dim // tp)),
                       (float(gate * m.intermediate_size // tp), float(h)), (float(h), float(m.intermediate_size // tp))}
        if shapes not in out.values():
            out[name] = shapes
    return out


def groups(df: pd.DataFrame, grouping: str) -> dict[str, pd.Index]:
    """Row index of each held-out group of ``df`` (gemm rows)."""
    if grouping in ("k", "n"):
        return {f"{grouping}={int(v)}": g.index for v, g in df.groupby(grouping)}
    if grouping == "model":
        nk = list(zip(df["n"], df["k"]))
        out = {}
        for name, shapes in model_shapes().items():
            idx = df.index[[s in shapes for s in nk]]
            if len(idx):
                out[name] = idx
        return out
    raise ValueError(f"unknown grouping {grouping!r}; expected one of {GROUPINGS}")


@dataclass(frozen=True)
class HoldoutScore:
    grouping: str
    groups: int
    rows: int
    median_ape: float
    p90_ape: float


def _score(grouping: str, n_groups: int, err: np.ndarray) -> HoldoutScore:
    return HoldoutScore(grouping, n_groups, len(err), float(np.median(err)), float(np.percentile(err, 90)))


def leave_one_group_out(df: pd.DataFrame, gpu: HardwareProfile, grouping: str,
                        gemm_form: str = "waves") -> HoldoutScore:
    """Pooled errors on each group's rows of a fit to all other rows."""
    grp = groups(df, grouping)
    errs = []
    for idx in grp.values():
        fit = fit_family("gemm", df.drop(idx), gpu, gemm_form)
        test = df.loc[idx]
        errs.append(ape(evaluate.gemm(test, gpu, fit.params), test["t_s"].to_numpy()))
    return _score(grouping, len(grp), np.concatenate(errs))


def cross_gpu(source_df: pd.DataFrame, source: HardwareProfile, target_df: pd.DataFrame,
              target: HardwareProfile, gemm_form: str = "waves") -> HoldoutScore:
    """Errors on ``target`` of the source's shape parameters with only
    TRANSFER_FREE refitted on the target."""
    src = fit_family("gemm", source_df, source, gemm_form)
    fit = fit_family("gemm", target_df, target, gemm_form, start=src.params, free=TRANSFER_FREE)
    return _score(f"{source.name}→{target.name}", 1,
                  ape(evaluate.gemm(target_df, target, fit.params), target_df["t_s"].to_numpy()))


# Every op family's leave-one-group-out grouping: an unseen reduction length
# for GEMMs, an unseen head configuration (query and KV heads per GPU: a
# model's shard the fit never saw) for attention, an unseen message size
# for the all-reduce.
FAMILY_GROUPS = {"gemm": ["k"], "attention_prefill": ["num_heads", "num_kv_heads"],
                 "attention_decode": ["num_heads", "num_kv_heads"], "allreduce": ["message_bytes"]}


def family_leave_one_group_out(family: str, df: pd.DataFrame, gpu: HardwareProfile) -> HoldoutScore:
    """Pooled errors on each group's rows (:data:`FAMILY_GROUPS`) of the
    family's fit to all other rows of ``df``."""
    keys = FAMILY_GROUPS[family]
    errs = []
    groups_ = df.groupby(keys).groups
    for idx in groups_.values():
        train = df.drop(idx)
        if family == "allreduce" and set(train["num_gpus"]) != set(df["num_gpus"]):
            continue                      # one η per group size: a size left without rows has nothing to fit
        fit = fit_family(family, train, gpu)
        test = df.loc[idx]
        errs.append(ape(evaluate.PREDICT[family](test, gpu, fit.params), test["t_s"].to_numpy()))
    return _score("+".join(keys), len(groups_), np.concatenate(errs))
