"""How far llmsim's mean latencies and throughput are from measured ones, by regime.

The error model is the distribution of llmsim's held-out error, signed:
``r = log(measured / predicted)`` for every measured row llmsim replayed
without having been fitted on it: the AIConfigurator silicon samples, the
closed-loop rows the overheads are fitted on left out
(``benchmarks/holdout_silicon.py``), and those closed-loop rows, each
model/GPU/stack group predicted with overheads fitted on the others
(``benchmarks/error_model.py``). A prediction ``p`` stands for a measured value
``p · exp(r)`` with

    r ~ centre + spread · N(0, 1)

per metric and per *cell* of the regime: dense or MoE, the serving stack
within it, and the prompt-length band within that (:data:`MODEL_DIMENSIONS`).
Those decide how far llmsim misses: its TTFT is read low by a factor that
depends on the model kind first (MoE prefills ran slower than the kernel
data on every stack, and SGLang's and TensorRT-LLM's DeepSeek rows are
several times low while their dense rows are near) and on the stack within
it (the centre moves the interval, so a biased metric gets an interval on
the side it misses, not only a wider one), its MoE decode errors are about
twice its dense ones (the spread), and on vLLM its
MoE prefills of 4K-token prompts and more are read low by about twice what
1K-token ones are (the prefill kernels those releases ran are slower than
the kernel data's at long prompts; ``benchmarks/first_token.py``). Split on
prompt length, the intervals of held-out groups cover more TTFT rows (86.8
against 84.2 %) with narrower bands, and TPOT's, end-to-end's and
throughput's bias-corrected medians land nearer the measured value; TTFT's
moves 0.3 points the other way (``benchmarks/error_model.py`` prints the
comparison). GPU
family and load are reported with a run's regime but do not split the
model: their residuals differ less than the groups behind them do.

How a cell's centre and spread are estimated, and why:

* A cell's own centre is the median over its model/GPU/stack groups of
  each group's median ``r`` (each group one vote: a group's rows share its
  bias, so a large group is one draw of it, not many); its own spread is
  the median absolute deviation of its rows' ``r`` about that centre.
* Both are shrunk towards the next wider cell (``moe=moe stack=vllm
  isl=>4k`` -> ``moe=moe stack=vllm`` -> ``moe=moe`` -> ``all``), the
  cell's own weight ``k / (k + K)`` for ``k`` groups and ``K =
  prior_groups``: a regime seen in a handful of groups knows a handful of
  biases, and mostly borrows the wider estimate. The model kind is the
  widest split because it is where the biases part most: with the stack
  first, a stack's dense cell (SGLang's: two groups) borrowed the stack's
  MoE bias and read a dense SGLang TTFT 1.5 times high; left out group by
  group, the kind-first chain covers more TPOT and end-to-end rows (85.4
  and 86.9 % against 84.3 and 84.7) with narrower TTFT bands (68.7 %
  half-width against 74.7) and a bias-corrected TTFT median nearer the
  measured (27.9 % miss against 31.1), at 86.8 % TTFT coverage against
  89.0.
  A regime with no residuals at all takes the wider cell's values, and the
  lookup says which dimensions it widened (a GPU family no residual came
  from counts as widened too).
* The spread so estimated is in-sample; what a new group sees is wider
  (its own bias is new). Each group's residuals are therefore
  standardised by a model built without that group, ``z = (r − centre) /
  spread``, and the cells' centre and spread rescaled by the median of
  ``z`` and its robust standard deviation (1.4826 × its median absolute
  deviation), one factor per metric.
* The normal quantile with a robust (median-based) spread describes the
  bulk of held-out groups. A few groups llmsim misses by far more than
  any regime predicts (rack-scale GB200, prompts reused through the prefix
  cache) would, counted in a variance or an empirical tail, widen every
  interval to reach them; they fall outside instead, and the measured
  coverage (docs/accuracy-reading.md) says how often that happens.

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
from statistics import NormalDist
from typing import Any, Iterable, Mapping, Optional, Sequence

import numpy as np

from ..errors import LlmsimError

__all__ = ["DIMENSIONS", "MODEL_DIMENSIONS", "PRIOR_GROUPS", "Regime", "Cell", "Lookup", "ErrorModel", "build",
           "load_error_model", "default_path", "gpu_family", "load_band", "isl_band", "residual_metric",
           "regime_of_run", "with_e2el"]

#: Where a run sits (reported with its intervals).
DIMENSIONS: tuple[str, ...] = ("stack", "family", "moe", "load", "isl")
#: What the error model splits on, widest first: a cell is a prefix (``all``, ``moe=…``, ``moe=… stack=…``, ...).
MODEL_DIMENSIONS: tuple[str, ...] = ("moe", "stack", "isl")
#: Groups at which a cell's own estimate and the wider cell's weigh the same.
PRIOR_GROUPS = 10.0
#: Robust standard deviation of a normal sample per unit of median absolute deviation.
_MAD_SD = 1.4826
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
    """One regime: its own residual and group counts, and the centre and spread of
    r = log(measured / predicted) the model gives it (shrunk and calibrated, see the module)."""

    key: str
    n: int
    groups: int
    centre: float
    spread: float

    def log_ratio(self, u: np.ndarray | float) -> np.ndarray:
        """The quantile function of r at probabilities ``u`` (in (0, 1))."""
        z = np.vectorize(_NORMAL.inv_cdf, otypes=[float])(np.clip(u, 1e-9, 1 - 1e-9))
        return self.centre + self.spread * z


_NORMAL = NormalDist()


@dataclass(frozen=True)
class Lookup:
    """The cell a regime was judged by, and the model dimensions widened to reach it."""

    metric: str
    regime: Regime
    cell: Cell
    widened: tuple[str, ...]

    def as_dict(self) -> dict[str, Any]:
        return {"cell": self.cell.key, "residuals": self.cell.n, "groups": self.cell.groups,
                "widened": list(self.widened)}


@dataclass
class ErrorModel:
    prior_groups: float
    cells: dict[str, dict[str, Cell]]              # metric -> cell key -> cell
    families: tuple[str, ...] = ()                 # GPU families the residuals came from
    meta: dict[str, Any] = field(default_factory=dict)
    source: Optional[str] = None
    #: The chain of cells it splits on, widest first (a shorter one only for
    #: benchmarks/error_model.py's comparison; the shipped model is MODEL_DIMENSIONS).
    dimensions: tuple[str, ...] = MODEL_DIMENSIONS

    def lookup(self, metric: str, regime: Regime) -> Optional[Lookup]:
        """The narrowest cell the regime reaches along the model's dimensions; ``widened`` names
        the dimensions the regime knows but no residual of the same value stood behind (the GPU
        family too: the model does not split on it, but a family it never saw is a guess)."""
        cells = self.cells.get(metric) or {}
        for k in range(len(self.dimensions), -1, -1):
            dims = self.dimensions[:k]
            key = regime.key(dims)
            if key is not None and key in cells:
                known = [d for d in self.dimensions if getattr(regime, d) is not None]
                unseen = ("family",) if regime.family is not None and regime.family not in self.families else ()
                return Lookup(metric, regime, cells[key], unseen + tuple(d for d in known if d not in dims))
        return None

    def to_dict(self) -> dict[str, Any]:
        return {**self.meta, "form": "log(measured / predicted) ~ centre + spread * N(0, 1) per regime cell",
                "prior_groups": self.prior_groups, "dimensions": list(self.dimensions),
                "families": list(self.families),
                "metrics": {m: {k: {"n": c.n, "groups": c.groups, "centre": round(c.centre, 4),
                                    "spread": round(c.spread, 4)}
                                for k, c in sorted(cells.items())} for m, cells in self.cells.items()}}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], source: Optional[str] = None) -> "ErrorModel":
        try:
            if list(data["dimensions"]) != list(MODEL_DIMENSIONS):
                raise ValueError(f"dimensions {data['dimensions']} are not this llmsim's {list(MODEL_DIMENSIONS)}")
            cells = {m: {k: Cell(k, int(c["n"]), int(c["groups"]), float(c["centre"]), float(c["spread"]))
                         for k, c in cs.items()} for m, cs in data["metrics"].items()}
            meta = {k: v for k, v in data.items() if k in ("source", "command", "rows", "generated")}
            return cls(float(data["prior_groups"]), cells, tuple(str(f) for f in data["families"]), meta, source)
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


def build(residuals: "Any", prior_groups: float = PRIOR_GROUPS, meta: Optional[dict] = None,
          dimensions: Sequence[str] = MODEL_DIMENSIONS) -> ErrorModel:
    """The error model of a residual table (columns of ``benchmarks/holdout_silicon.py --csv``:
    row, group, stack, model, gpu, isl, osl, concurrency, metric, measured, predicted), split along
    ``dimensions`` (a prefix of them only to compare, as benchmarks/error_model.py does)."""
    if not prior_groups > 0:
        raise ValueError("prior_groups must be positive")
    dims = tuple(dimensions)
    e = regimes(with_e2el(residuals)).dropna(subset=list(dims))
    cells: dict[str, dict[str, Cell]] = {}
    for metric, em in e.groupby("m"):
        cells[str(metric)] = _metric_cells(em, prior_groups, dims)
    return ErrorModel(float(prior_groups), cells, tuple(sorted(e.family.dropna().unique())), dict(meta or {}),
                      dimensions=dims)


def _metric_cells(e: "Any", prior: float, dims: tuple[str, ...]) -> dict[str, Cell]:
    """One metric's cells: shrunk centre and spread, rescaled by the group-held-out residuals."""
    z = []
    for group in e.group.unique():
        out = e.group == group
        if out.all():               # one group: nothing to hold it out against
            continue
        fit = _shrunk(e[~out], prior, dims)
        keys = _narrowest(fit, e[out], dims)
        centre, spread = np.array([fit[k][2] for k in keys]), np.array([fit[k][3] for k in keys])
        z.append((e.r[out].to_numpy(float) - centre) / spread)
    z = np.concatenate(z) if z else np.zeros(1)      # without held-out residuals: the in-sample spread
    shift = float(np.median(z))
    # A cell's spread is a median absolute deviation; the robust standard deviation of z turns it into
    # the normal's sigma, and without two held-out residuals the conversion alone does.
    scale = _MAD_SD * (float(np.median(np.abs(z - shift))) if len(z) > 1 else 1.0)
    return {k: Cell(k, n, g, c + s * shift, s * scale) for k, (n, g, c, s) in _shrunk(e, prior, dims).items()}


def _narrowest(fit: Mapping[str, Any], rows: "Any", dims: tuple[str, ...]) -> list[str]:
    """Each row's narrowest cell key in ``fit``."""
    out = ["all"] * len(rows)
    for k in range(1, len(dims) + 1):
        keys = rows[dims[0]].astype(str).radd(f"{dims[0]}=")
        for d in dims[1:k]:
            keys = keys + f" {d}=" + rows[d].astype(str)
        out = [key if key in fit else o for key, o in zip(keys, out)]
    return out


def _shrunk(e: "Any", prior: float, chain: tuple[str, ...], floor: float = 0.01) -> dict[str, tuple[int, int, float, float]]:
    """Per cell key: residuals, groups, centre and spread, each cell's own estimate shrunk towards
    its parent's with weight groups / (groups + prior). The spread is shrunk on a log scale and
    floored at ``floor`` (a cell of identical residuals still gets an interval)."""
    out: dict[str, tuple[int, int, float, float]] = {}
    parents = {(): "all"}
    for k in range(len(chain) + 1):
        dims = list(chain[:k])
        parts = [((), e)] if not dims else e.groupby(dims)
        for vals, g in parts:
            vals = tuple(str(v) for v in ((vals,) if not isinstance(vals, tuple) else vals))
            key = _key(dims, vals) if dims else "all"
            centre = float(np.median(g.groupby("group").r.median()))
            spread = max(float(np.median(np.abs(g.r.to_numpy(float) - centre))), floor)
            groups = int(g.group.nunique())
            if dims:
                _, _, pc, ps = out[parents[vals[:-1]]]
                w = groups / (groups + prior)
                centre, spread = w * centre + (1 - w) * pc, float(np.exp(w * np.log(spread) + (1 - w) * np.log(ps)))
            out[key] = (len(g), groups, centre, spread)
            parents[vals] = key
    return out


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
