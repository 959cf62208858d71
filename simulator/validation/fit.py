"""Fitting a serving stack's overheads to measured rows, and checking that the fit transfers.

What is fitted: the few CPU costs a stack adds outside its kernels
(:class:`simulator.profiles.backend.Overheads`): per-iteration and
per-sequence scheduling time, per-request front-end time, per-token response
time. Each has a physical meaning and the same value for every model, GPU
and TP size of a stack, so a fit on some configurations predicts others;
the kernel calibration and the stack's scheduling defaults are not touched.

How: Gauss–Newton on log errors of mean TTFT and TPOT. Each step replays
every row once at the current values and once per overhead nudged up
(finite differences), then solves the linearised problem with a robust
loss and bounds (no overhead below 0). A simulation is piecewise in its
inputs (an arrival crosses an iteration boundary), hence differences over
steps of a millisecond, not derivatives.

Leave-one-group-out: the linearisations are shared (they describe the rows,
not the fit), each fold solves from them without its held-out group, and
the held-out rows are then replayed at the fold's values: that replay, not
the linear model, gives the reported error.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable, Optional, Sequence

import numpy as np
from scipy.optimize import lsq_linear

from ..profiles.backend import Overheads
from .replay import ReplaySettings
from .report import predict_all
from .rows import Row

#: Fitted overheads, the step each is nudged by, and an upper bound. The
#: bounds are physical: a stack's CPU time per iteration is milliseconds, per
#: sequence tens of microseconds, per request (HTTP, tokenise, detokenise)
#: a few milliseconds; a fit that wants more is explaining something else (a
#: client's queue, how the closed loop's phases settle) and must not be let
#: to: the Poisson rows of the same stacks, which no fit sees, read a fit with
#: 25 ms of response time 70 % slow.
PARAMS = {"iteration_overhead_ms": (0.5, 10.0), "iteration_us_per_seq": (10.0, 200.0),
          "request_ms": (2.0, 10.0), "response_ms": (2.0, 10.0)}
FIT_METRICS = ("ttft_mean_ms", "tpot_mean_ms")


@dataclass
class Linearisation:
    """log(predicted) of every (row, metric) at ``theta`` and its slopes."""

    theta: np.ndarray
    keys: list[tuple[int, str]]          # (row index, metric)
    log_pred: np.ndarray
    jac: np.ndarray                      # d log(pred) / d theta


def _settings(base: ReplaySettings, theta: np.ndarray, names: Sequence[str] = tuple(PARAMS)) -> ReplaySettings:
    eng = dict(base.engine or {})
    eng.update({k: float(v) for k, v in zip(names, theta)})
    return replace(base, engine=eng)


def linearise(rows: Sequence[Row], theta: np.ndarray, base: ReplaySettings, workers: int = 1,
              names: Sequence[str] = tuple(PARAMS)) -> Linearisation:
    steps = [PARAMS[k][0] for k in names]
    thetas = [theta] + [theta + np.eye(len(theta))[i] * steps[i] for i in range(len(theta))]
    settings = [_settings(base, t, names) for t in thetas for _ in rows]
    preds = predict_all(list(rows) * len(thetas), settings, workers)
    n = len(rows)
    keys = [(i, m) for i, r in enumerate(rows) for m in FIT_METRICS if m in r.measured]
    logp = np.array([[np.log(max(preds[j * n + i][m], 1e-9)) for (i, m) in keys] for j in range(len(thetas))])
    jac = np.stack([(logp[j + 1] - logp[0]) / steps[j] for j in range(len(theta))], axis=1)
    return Linearisation(theta.copy(), keys, logp[0], jac)


def solve(lin: Linearisation, rows: Sequence[Row], keep: Optional[np.ndarray] = None,
          names: Sequence[str] = tuple(PARAMS)) -> np.ndarray:
    """The overheads minimising the linearised robust log error over the kept rows.

    Bounded linear least squares, reweighted (soft-L1: a row off by far more
    than 10 % weighs less) so one anomalous group cannot drag the overheads."""
    meas = np.array([np.log(rows[i].measured[m]) for i, m in lin.keys])
    mask = np.ones(len(lin.keys), bool) if keep is None else np.array([keep[i] for i, _ in lin.keys])
    ub = np.array([PARAMS[k][1] for k in names])
    A = lin.jac[mask]
    b = (meas - lin.log_pred + lin.jac @ lin.theta)[mask]
    w = np.ones(len(b))
    theta = np.clip(lin.theta, 0.0, ub)
    for _ in range(8):
        theta = lsq_linear(A * w[:, None], b * w, bounds=(np.zeros_like(ub), ub)).x
        r = A @ theta - b
        w = (1.0 + (r / 0.1) ** 2) ** -0.25      # sqrt of the soft-L1 weight
    return theta


@dataclass
class FitResult:
    overheads: Overheads
    in_sample: list[dict[str, float]]            # predictions of every row at the fitted values
    held_out: Optional[list[dict[str, float]]]   # each row predicted by the fit without its group
    fold_overheads: dict[str, Overheads]


def fit(rows: Sequence[Row], base: ReplaySettings = ReplaySettings(), iterations: int = 3, workers: int = 1,
        logo: bool = True, progress: Callable[[str], None] = lambda s: None,
        names: Sequence[str] = tuple(PARAMS)) -> FitResult:
    """Fit the overheads ``names`` (default: all four) to ``rows``, the others as ``base`` sets them;
    with ``logo``, also predict each group from the others."""
    rows = [r for r in rows if not r.skip]
    theta = np.array([float(getattr(Overheads(), k)) for k in names])
    groups = sorted({r.group for r in rows})
    fold_theta = {g: theta for g in groups}
    lin = None
    for it in range(iterations):
        progress(f"linearising ({it + 1}/{iterations}) at " + ", ".join(f"{k}={v:.3g}" for k, v in zip(names, theta)))
        lin = linearise(rows, theta, base, workers, names)
        theta = solve(lin, rows, names=names)
        if logo and len(groups) > 1:
            for g in groups:
                fold_theta[g] = solve(lin, rows, np.array([r.group != g for r in rows]), names)
    in_sample = predict_all(rows, _settings(base, theta, names), workers)
    held_out = None
    if logo and len(groups) > 1:
        progress("replaying each group with the fit made without it")
        held_out = predict_all(rows, [_settings(base, fold_theta[r.group], names) for r in rows], workers)
    fixed = {k: float(v) for k, v in (base.engine or {}).items() if k in Overheads.model_fields}
    as_oh = lambda th: Overheads(**{**fixed, **{k: round(float(v), 4) for k, v in zip(names, th)}})  # noqa: E731
    return FitResult(as_oh(theta), in_sample, held_out, {g: as_oh(t) for g, t in fold_theta.items()})
