"""How far llmsim's mean latencies and throughput are from measured ones, by regime.

The error model is the distribution of llmsim's held-out error, signed:
``r = log(measured / predicted)`` for every measured row llmsim replayed
without having been fitted on it (``benchmarks/holdout_silicon.py``: the
AIConfigurator silicon samples, the closed-loop rows the overheads are
fitted on left out). A prediction ``p`` then stands for a measured value
``p · exp(r)``, ``r`` drawn from the residuals of the prediction's regime,
so a biased predictor gives an asymmetric interval (TTFT predicted low
moves the interval up, not only wider).

Form, kept simple on purpose: per metric and per *cell* of the regime
(stack, GPU family, dense or MoE, load band, prompt-length band), the
empirical quantiles of ``r`` at :data:`LEVELS`. A cell is kept only with
at least ``min_count`` residuals from at least ``min_groups``
model/GPU/stack groups: one group's residuals say how llmsim misses that
group, not the regime. A regime whose own cell is missing falls back to
the next wider one (:data:`FALLBACK`: prompt length dropped first, then
load, then dense/MoE, then GPU family, then stack), and the lookup says
which dimensions it widened. Between stored levels the quantile function
is linear; beyond the outermost it is held at the outermost (a cell of
30 residuals cannot resolve a 0.1 % tail, and says no more).

Metrics: ``ttft`` and ``tpot`` (the rows' mean TTFT and TPOT),
``e2el`` (mean end-to-end, ``TTFT + (OSL − 1) · TPOT`` for measured and
predicted alike) and ``throughput`` (output tokens/s). The rows hold
means only; :func:`residual_metric` carries a metric's error over to its
percentiles (see there).

The model is a derived file stored with the backend profiles
(``backend_profiles/error_model/quantiles.yaml``), written by
``python benchmarks/error_model.py --write``; rerun it whenever the
simulator's predictions change.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterable, Mapping, Optional, Sequence

import numpy as np

from ..errors import LlmsimError

__all__ = ["LEVELS", "DIMENSIONS", "FALLBACK", "Regime", "Cell", "Lookup", "ErrorModel", "build",
           "load_error_model", "default_path", "gpu_family", "load_band", "isl_band", "residual_metric",
           "regime_of_run", "with_e2el"]

#: Probability levels whose quantiles each cell stores.
LEVELS: tuple[float, ...] = (0.005, 0.025, 0.05, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.975, 0.995)
DIMENSIONS: tuple[str, ...] = ("stack", "family", "moe", "load", "isl")
#: Regimes from the narrowest to the widest: a lookup takes the first with a stored cell.
FALLBACK: tuple[tuple[str, ...], ...] = tuple(DIMENSIONS[:k] for k in range(len(DIMENSIONS), -1, -1))
METRICS: tuple[str, ...] = ("ttft", "tpot", "e2el", "throughput")
#: Residual CSV column (benchmarks/holdout_silicon.py --csv) -> error-model metric.
_COLUMNS = {"ttft_mean_ms": "ttft", "tpot_mean_ms": "tpot", "e2el_mean_ms": "e2el",
            "throughput_output_tok_s": "throughput"}

# Requests in flight per replica (a closed loop's concurrency; Little's law in a run) and mean prompt tokens.
_LOAD = ((8, "1-8"), (32, "9-32"), (128, "33-128"), (math.inf, ">128"))
_ISL = ((1024, "<=1k"), (4096, "1k-4k"), (math.inf, ">4k"))


@lru_cache(maxsize=None)
def gpu_family(gpu: str) -> Optional[str]:
    """The GPU's architecture generation (its profile's ``architecture``); None
    for a name or file llmsim cannot read as a GPU profile."""
    from ..profiles.hardware import load_hardware

    try:
        return load_hardware(str(gpu)).architecture
    except LlmsimError:
        return None


def _band(x: Optional[float], bands) -> Optional[str]:
    if x is None or not math.isfinite(x) or x <= 0:
        return None
    return next(label for top, label in bands if x <= top)


def load_band(in_flight_per_replica: Optional[float]) -> Optional[str]:
    return _band(in_flight_per_replica, _LOAD)


def isl_band(prompt_tokens: Optional[float]) -> Optional[str]:
    return _band(prompt_tokens, _ISL)


def residual_metric(key: str) -> Optional[str]:
    """The error-model metric a results.json key is judged by, or None.

    Assumption (the measured rows hold means only): llmsim's error on a
    latency is a scale error on its whole distribution, so a mean's
    residuals also bound the median and the p99 of the same metric. ITL is
    judged by TPOT's residuals (a request's TPOT is its mean ITL), and
    request and total-token throughput by output throughput's (the same
    requests over the same time)."""
    if key in ("output_throughput", "request_throughput", "total_token_throughput"):
        return "throughput"
    m = re.fullmatch(r"(?:mean|median|p\d+(?:\.\d+)?)_(ttft|tpot|itl|e2el)_ms", key)
    if not m:
        return None
    return {"itl": "tpot"}.get(m.group(1), m.group(1))


@dataclass(frozen=True)
class Regime:
    """Where a prediction sits; None in a dimension means unknown or mixed
    (a fleet whose pools differ), and such a regime is judged by a cell
    that does not use that dimension."""

    stack: Optional[str] = None
    family: Optional[str] = None
    moe: Optional[str] = None          # "dense" or "moe"
    load: Optional[str] = None
    isl: Optional[str] = None

    def key(self, dims: Sequence[str]) -> Optional[str]:
        vals = [getattr(self, d) for d in dims]
        return None if any(v is None for v in vals) else _key(dims, vals)

    def text(self) -> str:
        """``stack=vllm family=hopper ...`` (open dimensions left out); :meth:`parse` reads it back."""
        return " ".join(f"{d}={getattr(self, d)}" for d in DIMENSIONS if getattr(self, d) is not None)

    @classmethod
    def parse(cls, text: Optional[str]) -> "Regime":
        parts = dict(p.split("=", 1) for p in (text or "").split() if "=" in p)
        return cls(**{d: parts.get(d) for d in DIMENSIONS})


def _key(dims: Sequence[str], vals: Sequence[str]) -> str:
    return " ".join(f"{d}={v}" for d, v in zip(dims, vals)) or "all"


@dataclass(frozen=True)
class Cell:
    """One regime's residuals: their count, the groups they came from, and their quantiles at LEVELS."""

    key: str
    n: int
    groups: int
    quantiles: tuple[float, ...]

    def log_ratio(self, u: np.ndarray | float) -> np.ndarray:
        """The quantile function of r = log(measured / predicted) at probabilities ``u``."""
        return np.interp(u, LEVELS, self.quantiles)


@dataclass(frozen=True)
class Lookup:
    """The cell a regime was judged by, and the dimensions widened to reach it."""

    metric: str
    regime: Regime
    cell: Cell
    widened: tuple[str, ...]

    def as_dict(self) -> dict[str, Any]:
        return {"cell": self.cell.key, "residuals": self.cell.n, "groups": self.cell.groups,
                "widened": list(self.widened)}


@dataclass
class ErrorModel:
    min_count: int
    min_groups: int
    cells: dict[str, dict[str, Cell]]              # metric -> cell key -> cell
    meta: dict[str, Any] = field(default_factory=dict)
    source: Optional[str] = None

    def lookup(self, metric: str, regime: Regime) -> Optional[Lookup]:
        cells = self.cells.get(metric) or {}
        for dims in FALLBACK:
            key = regime.key(dims)
            if key is not None and key in cells:
                known = [d for d in DIMENSIONS if getattr(regime, d) is not None]
                return Lookup(metric, regime, cells[key], tuple(d for d in known if d not in dims))
        return None

    def to_dict(self) -> dict[str, Any]:
        return {**self.meta, "form": "empirical quantiles of log(measured / predicted) per regime cell",
                "levels": list(LEVELS), "min_count": self.min_count, "min_groups": self.min_groups,
                "dimensions": list(DIMENSIONS), "fallback": [list(d) for d in FALLBACK],
                "metrics": {m: {k: {"n": c.n, "groups": c.groups, "q": [round(q, 4) for q in c.quantiles]}
                                for k, c in sorted(cells.items())} for m, cells in self.cells.items()}}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], source: Optional[str] = None) -> "ErrorModel":
        try:
            if [float(x) for x in data["levels"]] != list(LEVELS):
                raise ValueError(f"levels {data['levels']} are not this llmsim's {list(LEVELS)}")
            cells = {m: {k: Cell(k, int(c["n"]), int(c["groups"]), tuple(float(q) for q in c["q"]))
                         for k, c in cs.items()} for m, cs in data["metrics"].items()}
            meta = {k: v for k, v in data.items() if k in ("source", "command", "rows", "generated")}
            return cls(int(data["min_count"]), int(data["min_groups"]), cells, meta, source)
        except (KeyError, TypeError, ValueError) as e:
            raise LlmsimError(f"not an error model written by benchmarks/error_model.py ({e}); regenerate it "
                              "with python benchmarks/error_model.py --write", source=source) from None


def with_e2el(residuals: "Any") -> "Any":
    """The residual table with an ``e2el_mean_ms`` line per row that has TTFT and TPOT:
    TTFT + (OSL − 1) · TPOT, measured and predicted alike (the closed-loop identity)."""
    import pandas as pd

    e = residuals
    key = ["row"]
    p = e[e.metric == "tpot_mean_ms"][[*key, "measured", "predicted"]]
    both = e[e.metric == "ttft_mean_ms"].merge(p, on=key, suffixes=("", "_tpot")).set_index(key)
    if both.empty:
        return e
    steps = (both.osl - 1).clip(lower=0)
    extra = both.assign(metric="e2el_mean_ms", measured=both.measured + steps * both.measured_tpot,
                        predicted=both.predicted + steps * both.predicted_tpot)
    extra["error_pct"] = 100.0 * (extra.predicted - extra.measured) / extra.measured
    extra = extra.drop(columns=["measured_tpot", "predicted_tpot"]).reset_index()
    return pd.concat([e, extra[e.columns]], ignore_index=True)


def _model_kind(model: str) -> Optional[str]:
    from ..profiles import load_model

    try:
        return "moe" if load_model(str(model)).is_moe else "dense"
    except LlmsimError:
        return None


def regimes(residuals: "Any") -> "Any":
    """The residual table with the regime columns (stack, family, moe, load, isl) and ``r``."""
    e = residuals[residuals.metric.isin(_COLUMNS) & (residuals.measured > 0) & (residuals.predicted > 0)]
    kinds = {m: _model_kind(m) for m in e.model.unique()}
    return e.assign(family=e.gpu.map(gpu_family), moe=e.model.map(kinds), load=e.concurrency.map(load_band),
                    isl=e.isl.map(isl_band), m=e.metric.map(_COLUMNS),
                    r=np.log(e.measured.to_numpy(float) / e.predicted.to_numpy(float)))


def build(residuals: "Any", min_count: int = 30, min_groups: int = 6, meta: Optional[dict] = None) -> ErrorModel:
    """The error model of a residual table (columns of ``benchmarks/holdout_silicon.py --csv``:
    row, group, stack, model, gpu, isl, osl, concurrency, metric, measured, predicted)."""
    if min_count < 1 or min_groups < 1:
        raise ValueError("min_count and min_groups must be at least 1")
    e = regimes(with_e2el(residuals))
    cells: dict[str, dict[str, Cell]] = {}
    for metric, em in e.groupby("m"):
        out = cells.setdefault(str(metric), {})
        for dims in FALLBACK:
            parts = [("all", em)] if not dims else em.dropna(subset=list(dims)).groupby(list(dims))
            for vals, g in parts:
                vals = (vals,) if not isinstance(vals, tuple) else vals
                if len(g) < min_count or g.group.nunique() < min_groups:
                    continue
                key = _key(dims, [str(v) for v in vals]) if dims else "all"
                out[key] = Cell(key, len(g), int(g.group.nunique()),
                                tuple(float(q) for q in _quantiles(g)))
    return ErrorModel(min_count, min_groups, cells, dict(meta or {}))


def _quantiles(cell: "Any") -> np.ndarray:
    return np.quantile(cell.r.to_numpy(float), LEVELS)


def default_path() -> Path:
    from ..profiles.loader import builtin_dir

    return builtin_dir("backend_profiles") / "error_model" / "quantiles.yaml"


@lru_cache(maxsize=4)
def _load(path: str, mtime: float) -> ErrorModel:
    from ..profiles.loader import read_structured

    data = read_structured(Path(path), what="error model")
    if not isinstance(data, dict):
        raise LlmsimError("expected a mapping (an error model written by benchmarks/error_model.py)", source=path)
    return ErrorModel.from_dict(data, source=path)


def load_error_model(path: Optional[str | Path] = None) -> ErrorModel:
    """The shipped error model (or the one at ``path``)."""
    p = Path(path) if path is not None else default_path()
    if not p.is_file():
        raise LlmsimError("no error model here: write it with python benchmarks/error_model.py --write",
                          source=p)
    model = _load(str(p), p.stat().st_mtime)
    # The same text in every checkout, so that results.json does not name where llmsim is installed.
    return replace(model, source="backend_profiles/error_model/quantiles.yaml") if path is None else model


def _agreed(values: Iterable[Optional[str]]) -> Optional[str]:
    s = set(values)
    return s.pop() if len(s) == 1 else None


def regime_of_run(scenario: Any, results: Mapping[str, Any]) -> Regime:
    """A run's regime: each pool's stack, GPU family, dense or MoE and load
    (requests in flight per replica: mean batch plus the pool's queue per
    replica), and the run's mean prompt length. A dimension on which the
    pools differ is left open, so the run is judged by a cell pooled over it."""
    from ..profiles.backend import backend_names

    pools = (results.get("llmsim") or {}).get("pools") or {}
    stack, family, moe, load = [], [], [], []
    for p in scenario.pools:
        # a backend given as a file path is no stack the residuals were measured on: unknown
        stack.append(p.engine.backend if p.engine.backend in backend_names() else None)
        family.append(gpu_family(p.gpu))
        moe.append(_model_kind(p.model))
        b = pools.get(p.name) or {}
        reps = b.get("replicas_mean") or 0.0
        in_flight = (b.get("mean_batch_size") or 0.0) + ((b.get("mean_queue_depth") or 0.0) / reps if reps else 0.0)
        load.append(load_band(in_flight))
    done = results.get("completed") or 0
    isl = (results.get("total_input_tokens") or 0) / done if done else None
    return Regime(_agreed(stack), _agreed(family), _agreed(moe), _agreed(load), isl_band(isl))
