"""Token-length distributions for prompts and completions.

A scenario names a distribution per side (``input_tokens``, ``output_tokens``)
and the workload samples one integer per request. Every distribution yields
integers ≥ 1: a request with no prompt or no output token cannot be scheduled.

Continuous shapes (normal, lognormal) are rounded to the nearest integer and
clipped to ``[min, max]`` (``min`` defaults to 1). Their ``mean()`` is the
exact mean of that *rounded and clipped* integer distribution, not the mean
parameter, so capacity arithmetic done with ``mean()`` (tokens per second =
rate × mean) agrees with what the simulation will actually draw.

The ``mean`` a scenario writes is the shape's before clipping (draws are not
re-centred afterwards), so clipping could quietly turn the load a user asked
for into another: ``mean: 20000`` under ``max: 8000`` would draw 8,000 every
time. A mean outside ``[min, max]``, one clipping moves by more than
:data:`MAX_CLIP_SHIFT` of itself, or a clip that puts more than
:data:`MAX_CLIPPED_SHARE` of the draws on a bound, is refused as the scenario
loads, with what clipping would leave. Within that tolerance ``mean`` keeps its meaning of a
fitted, then truncated, shape (the ShareGPT presets below are such fits).

``lognormal`` is parameterised by the mean and standard deviation of the
lengths themselves (what a dataset summary reports), not of their logarithm:
σ² = ln(1 + std²/mean²), μ = ln(mean) − σ²/2.
"""
from __future__ import annotations

import math
from typing import Annotated, Callable, Literal, Optional, Union

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = [
    "LengthDist", "FixedLength", "UniformLength", "NormalLength", "LognormalLength",
    "EmpiricalLength", "ShareGPTLength", "sharegpt_input", "sharegpt_output",
]

# Only a guard against int64 overflow when a heavy lognormal tail has no
# ``max``; no real context window comes near it.
_HARD_MAX = 2**31 - 1
# Exact summation length for mean(); the rest of the tail is integrated.
_MEAN_TERMS = 1 << 16

PositiveInt = Annotated[int, Field(ge=1, le=_HARD_MAX)]
#: Widest lognormal (std / mean) accepted: σ = √ln(1 + 1000²) ≈ 3.7 already puts the p99.99 some 10⁹ times
#: the median; a std 10¹⁵⁴ times the mean left σ² = ln(1 + (std/mean)²) out of float range.
MAX_LOGNORMAL_CV = 1000.0


#: The largest share of its ``mean`` by which clipping to ``[min, max]`` may move a normal or lognormal's mean.
#: A capacity figure off by more than a tenth is a different fleet; the ShareGPT input preset, a truncated fit,
#: moves by 6 %. Rounding to whole numbers is not counted: it moves a mean by at most ½, whatever the shape.
MAX_CLIP_SHIFT = 0.10

#: The largest share of draws clipping may put on ``min`` or ``max``: past half, the lengths drawn are mostly
#: the bounds, not the shape the scenario describes, even where the mean survives (a symmetric clip).
MAX_CLIPPED_SHARE = 0.5


def check_lognormal_width(mean: float, std: float) -> None:
    """Refuse a lognormal whose std is more than :data:`MAX_LOGNORMAL_CV` times its mean."""
    if std > MAX_LOGNORMAL_CV * mean:
        raise ValueError(f"std ({std:g}) is more than {MAX_LOGNORMAL_CV:,.0f} times the mean ({mean:g}); "
                         "no measured length or time is that spread (check the units and digits)")


class Distribution(BaseModel):
    """What every ``dist:`` mapping of a scenario is (lengths here, durations in
    :mod:`workloads.durations`): a tagged shape that draws values and knows its mean."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    dist: str  # each shape narrows it to its own literal (the union's tag)

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        raise NotImplementedError

    def mean(self) -> float:
        raise NotImplementedError


class Bounded(Distribution):
    """A shape with ``min`` and ``max`` fields (``max`` may be None: open)."""

    @model_validator(mode="after")
    def _ordered(self) -> "Bounded":
        if self.max is not None and self.min > self.max:
            raise ValueError(f"min ({self.min}) must be ≤ max ({self.max})")
        return self




class FixedLength(Distribution):
    """Every request has the same length (vLLM's ``random`` with range 0)."""

    dist: Literal["fixed"] = "fixed"
    value: PositiveInt

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return np.full(n, self.value, dtype=np.int64)

    def mean(self) -> float:
        return float(self.value)


class UniformLength(Bounded):
    """Integers drawn uniformly from ``[min, max]``, both ends included."""

    dist: Literal["uniform"] = "uniform"
    min: PositiveInt
    max: PositiveInt

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return rng.integers(self.min, self.max, size=n, endpoint=True, dtype=np.int64)

    def mean(self) -> float:
        return (self.min + self.max) / 2.0


class _Continuous(Bounded):
    """A continuous shape, rounded to integers and clipped to [min, max]."""

    # ``mean`` is the YAML key; the attribute is ``mean_`` because ``mean()``
    # is the method every distribution has.
    mean_: float = Field(alias="mean", gt=0, allow_inf_nan=False)
    std: float = Field(ge=0, allow_inf_nan=False)
    min: PositiveInt = 1
    max: Optional[PositiveInt] = None

    model_config = ConfigDict(extra="forbid", frozen=True, serialize_by_alias=True)

    @property
    def _hi(self) -> int:
        return self.max if self.max is not None else _HARD_MAX

    def _round_clip(self, x: np.ndarray) -> np.ndarray:
        return np.clip(np.rint(x), self.min, self._hi).astype(np.int64)

    # Subclasses provide the continuous variable X.
    def _draw(self, rng: np.random.Generator, n: int) -> np.ndarray:
        raise NotImplementedError

    def _sf(self, x: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def _clipped_mean(self, a: float, b: float) -> float:
        """E[clip(X, a, b)], closed form."""
        raise NotImplementedError

    def _degenerate(self) -> bool:
        return self.std == 0

    def _check_shape(self) -> None:
        """Refuse parameters the clipped mean cannot be computed from (none for a normal)."""

    @model_validator(mode="after")
    def _mean_survives_clipping(self) -> "_Continuous":
        self._check_shape()
        if self.max is not None and self.min > self.max:
            return self     # Bounded says so
        _check_clipped_mean(self)
        return self

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        if self._degenerate():
            return np.full(n, self._round_clip(np.float64(self.mean_)), dtype=np.int64)
        return self._round_clip(self._draw(rng, n))

    def mean(self) -> float:
        if self._degenerate():
            return float(self._round_clip(np.float64(self.mean_)))
        return _rounded_clipped_mean(self._sf, self._clipped_mean, self.min, self._hi)


def _check_clipped_mean(d: _Continuous) -> None:
    """Refuse a mean that clipping to ``[min, max]`` moves out of recognition
    (see the module's docstring). The test uses the continuous shape clipped,
    in closed form: that is what clipping alone does (rounding is allowed for),
    and it needs no scipy, whose import would cost every scenario load."""
    mean, lo, hi = d.mean_, d.min, d._hi
    if mean > hi:
        raise ValueError(f"mean {_given(mean)} is above max {hi}; raise max or lower mean" if d.max is not None
                         else f"mean {_given(mean)} is above {hi:,}, the longest length llmsim draws; lower mean")
    if mean < lo:
        raise ValueError(f"mean {_given(mean)} is below min {lo}; lower min or raise mean" if lo > 1
                         else f"mean {_given(mean)} is below 1, the shortest length; raise mean")
    if d._degenerate():
        return      # every draw is the mean rounded, within ½ of it
    share = d._clipped_share(float(lo), float(hi))
    if share > MAX_CLIPPED_SHARE:
        raise ValueError(
            f"clipping to [{lo}, {_bound(d)}] puts {share:.0%} of the draws on a bound, more than the "
            f"{MAX_CLIPPED_SHARE:.0%} llmsim accepts (the lengths drawn would be mostly min and max, not the "
            f"shape mean {_given(mean)} and std {_given(d.std)} describe): lower std or widen [min, max]")
    clipped = d._clipped_mean(float(lo), float(hi))
    if abs(clipped - mean) <= MAX_CLIP_SHIFT * mean:
        return
    if clipped > mean:      # the shape's low tail, lifted to min, outweighs its high one
        where, fix = f"at min {lo}", "lower min or std" if lo > 1 else "lower std"
    elif d.max is not None:
        where, fix = f"at max {hi}", "raise max or lower std"
    else:
        where, fix = f"at {hi:,} (the longest length llmsim draws)", "lower std"
    shift = (clipped - mean) / mean
    by = f" ({shift:+.0%})" if abs(shift) < 10 else ""
    raise ValueError(
        f"clipping {where} moves the mean from {_given(mean)} to {_shown(clipped)}{by}, more than the "
        f"{MAX_CLIP_SHIFT:.0%} llmsim accepts (mean and std describe the shape before clipping; draws are "
        f"not re-centred): {fix}")


def _bound(d: _Continuous) -> str:
    return f"{d.max}" if d.max is not None else f"{d._hi:,}"


def _given(x: float) -> str:
    """A number the user wrote, as written (20000, not 2e+04)."""
    return f"{x:.15g}"


def _shown(x: float) -> str:
    """A computed mean: whole numbers from 100 on, three figures below."""
    return f"{x:,.0f}" if x >= 100 else f"{x:.3g}"


def _rounded_clipped_mean(sf: Callable[[np.ndarray], np.ndarray],
                          clipped_mean: Callable[[float, float], float], lo: int, hi: int) -> float:
    """E[clip(rint(X), lo, hi)] for a continuous X with survival function ``sf``.

    clip(rint(X), lo, hi) = lo + Σ_{k=lo}^{hi−1} 1{X > k + ½}, so its mean is
    lo + Σ sf(k + ½): exact, and the rounding matters for narrow shapes
    (normal(5.2, 0.1) always gives 5). Past ``_MEAN_TERMS`` terms the sum is
    replaced by ∫ sf = E[clip(X, K, hi)] − K (midpoint rule, negligible error
    that far into a tail).
    """
    k_end = min(hi, lo + _MEAN_TERMS)
    total = lo + float(sf(np.arange(lo, k_end, dtype=np.float64) + 0.5).sum())
    if k_end < hi:
        total += clipped_mean(float(k_end), float(hi)) - k_end
    return total


class NormalLength(_Continuous):
    """Normal(mean, std), rounded, clipped to [min, max] (min defaults to 1)."""

    dist: Literal["normal"] = "normal"

    def _draw(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return rng.normal(self.mean_, self.std, size=n)

    def _sf(self, x: np.ndarray) -> np.ndarray:
        with np.errstate(over="ignore"):  # a tiny std: z = ±inf is fine for ndtr
            return _ndtr((self.mean_ - x) / self.std)

    def _clipped_share(self, a: float, b: float) -> float:
        """P(X < a) + P(X > b): the share of draws clipping moves onto a bound."""
        above = _ndtr1((self.mean_ - b) / self.std) if not math.isinf(b) else 0.0
        return _ndtr1((a - self.mean_) / self.std) + above

    def _clipped_mean(self, a: float, b: float) -> float:
        # a·Φ(za) + μ·(Φ(zb) − Φ(za)) + s·(φ(za) − φ(zb)) + b·Φ(−zb), the φ's subtracted
        # before scaling by s: a std far wider than [a, b] would otherwise cancel two huge terms.
        mu, s = self.mean_, self.std
        za = (a - mu) / s
        zb = (b - mu) / s if not math.isinf(b) else math.inf
        above = b * _ndtr1(-zb) if not math.isinf(b) else 0.0
        return float(a * _ndtr1(za) + mu * (_ndtr1(zb) - _ndtr1(za)) + s * (_phi(za) - _phi(zb)) + above)


class LognormalLength(_Continuous):
    """Lognormal with the given mean and std *of the lengths* (not of their log).

    Long-tailed, like real prompt and completion lengths. ``mean``/``std``
    describe the continuous shape before rounding and clipping; ``mean()``
    reports the mean after both.
    """

    dist: Literal["lognormal"] = "lognormal"

    def _check_shape(self) -> None:
        check_lognormal_width(self.mean_, self.std)

    @property
    def log_params(self) -> tuple[float, float]:
        """(μ, σ) of ln X, from the mean and std of X."""
        sigma2 = math.log1p((self.std / self.mean_) ** 2)
        return math.log(self.mean_) - sigma2 / 2, math.sqrt(sigma2)

    def _degenerate(self) -> bool:
        return self.log_params[1] == 0  # also when std/mean is too small for a float σ

    def _draw(self, rng: np.random.Generator, n: int) -> np.ndarray:
        mu, sigma = self.log_params
        return rng.lognormal(mu, sigma, size=n)

    def _sf(self, x: np.ndarray) -> np.ndarray:
        mu, sigma = self.log_params
        with np.errstate(over="ignore"):
            return _ndtr((mu - np.log(x)) / sigma)

    def _clipped_share(self, a: float, b: float) -> float:
        """P(X < a) + P(X > b): the share of draws clipping moves onto a bound."""
        mu, s = self.log_params
        above = _ndtr1((mu - math.log(b)) / s) if not math.isinf(b) else 0.0
        return _ndtr1((math.log(a) - mu) / s) + above

    def _clipped_mean(self, a: float, b: float) -> float:
        mu, s = self.log_params
        za = (math.log(a) - mu) / s
        below = a * _ndtr1(za)
        body_lo = _ndtr1(za - s)
        if math.isinf(b):
            body, above = 1.0 - body_lo, 0.0
        else:
            zb = (math.log(b) - mu) / s
            body, above = _ndtr1(zb - s) - body_lo, b * _ndtr1(-zb)
        return float(below + self.mean_ * body + above)


def _ndtr1(x: float) -> float:
    """The standard normal CDF of one number, from the standard library: the
    closed-form clipped means need a few, and a scenario load should not pay
    for scipy to get them."""
    return 0.5 * math.erfc(-x / math.sqrt(2.0))


def _ndtr(x):
    """The standard normal CDF (scipy's ``ndtr``), imported on first use:
    scipy.special costs every command's start-up, and only the means of
    clipped distributions need it."""
    from scipy.special import ndtr

    return ndtr(x)


def _phi(z: float) -> float:
    return math.exp(-0.5 * z * z) / math.sqrt(2 * math.pi)


class EmpiricalLength(Distribution):
    """Resample observed lengths (optionally weighted), e.g. a histogram from logs."""

    dist: Literal["empirical"] = "empirical"
    values: list[PositiveInt] = Field(min_length=1)
    weights: Optional[list[Annotated[float, Field(ge=0, allow_inf_nan=False)]]] = None

    @model_validator(mode="after")
    def _weights_match(self) -> "EmpiricalLength":
        if self.weights is not None:
            if len(self.weights) != len(self.values):
                raise ValueError(f"weights has {len(self.weights)} entries but values has "
                                 f"{len(self.values)}; give one weight per value")
            if sum(self.weights) <= 0:
                raise ValueError("weights must not all be zero")
        return self

    def _p(self) -> Optional[np.ndarray]:
        if self.weights is None:
            return None
        w = np.asarray(self.weights, dtype=np.float64)
        return w / w.sum()

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return rng.choice(np.asarray(self.values, dtype=np.int64), size=n, p=self._p())

    def mean(self) -> float:
        v = np.asarray(self.values, dtype=np.float64)
        p = self._p()
        return float(v.mean() if p is None else v @ p)


# --- ShareGPT presets ---------------------------------------------------------
#
# What "ShareGPT" means in serving benchmarks: vLLM's and SGLang's
# ``bench_serving --dataset-name sharegpt`` take the first turn of each
# ShareGPT V3 conversation and keep it only if 4 ≤ prompt ≤ 1024 tokens,
# output ≥ 4 and prompt + output ≤ 2048. Hence the clip bounds below
# (output max 2044 = 2048 − the shortest prompt; the joint prompt+output
# limit is not modelled).
#
# Output, from /work/shared/data/e2e/published_serving_results.csv (SGLang's
# benchmark_vllm_060 README, sgl-project/sglang@120affb9, Llama-3 tokenizer):
#   * mean 194.3 tokens: the offline rows' output tok/s ÷ req/s
#     (4281.51/22.03, 4132.37/21.27, 3856.01/19.84, 3700.64/19.04 → 194.3–194.4);
#   * median ≈ 119 tokens: the online rows give median E2E, TTFT and TPOT, and
#     (E2E − TTFT)/TPOT + 1 lands at 114–123 over all eight rows (median 119).
#     A median of a ratio is not the ratio of medians, so this is ±10 %.
#   Median 119 and clipped mean 194.3 fix a lognormal with σ ≈ 1.00 in log
#   space, i.e. (before clipping) mean 196 and std 257 tokens.
# Input: the file has no prompt statistics. We use the figure commonly quoted
#   for vLLM's ShareGPT V3 filtered sample, mean ≈ 220 prompt tokens (not
#   verified against data here), and assume the output's log-space shape
#   σ ≈ 1.00: median ≈ 142, (before clipping) mean 234 and std 306 tokens,
#   clipped to [4, 1024] → mean 220.
# Refit with ``tests/test_workloads.py::test_sharegpt_presets_match_sources``
# if better numbers arrive; a real trace belongs in ``empirical`` or a trace
# reader, not here.
SHAREGPT_INPUT = LognormalLength(mean=234.0, std=306.0, min=4, max=1024)
SHAREGPT_OUTPUT = LognormalLength(mean=196.0, std=257.0, min=4, max=2044)


def sharegpt_input() -> LognormalLength:
    """Prompt lengths like the filtered ShareGPT sample of vLLM/SGLang benchmarks."""
    return SHAREGPT_INPUT


def sharegpt_output() -> LognormalLength:
    """Output lengths like the filtered ShareGPT sample (mean ≈ 194 tokens)."""
    return SHAREGPT_OUTPUT


class ShareGPTLength(Distribution):
    """``{dist: sharegpt, part: input|output}``: the built-in ShareGPT-like preset.

    The part is explicit, not inferred from which side of the workload it is
    on, so that a model stays meaningful on its own (and one can deliberately
    use ShareGPT output lengths as prompts).
    """

    dist: Literal["sharegpt"] = "sharegpt"
    part: Literal["input", "output"]

    @property
    def preset(self) -> LognormalLength:
        return SHAREGPT_INPUT if self.part == "input" else SHAREGPT_OUTPUT

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return self.preset.sample(rng, n)

    def mean(self) -> float:
        return self.preset.mean()


# New shapes go here (and need a unique ``dist`` literal).
LengthDist = Annotated[
    Union[FixedLength, UniformLength, NormalLength, LognormalLength, EmpiricalLength, ShareGPTLength],
    Field(discriminator="dist"),
]
