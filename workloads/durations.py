"""Time-span distributions: think times, pauses between bursts, keystroke gaps.

Lengths (:mod:`workloads.lengths`) are integers ≥ 1 because a request needs
a token; a pause is a real number of seconds and may be 0 (a scripted
client that answers at once). So durations are their own small family
rather than a flag on the length laws, and a scenario can't hand a length
where a time is meant (the ``dist`` tags overlap, the fields do not).
"""
from __future__ import annotations

import math
from typing import Annotated, Literal, Union

import numpy as np
from pydantic import ConfigDict, Field, model_validator

from .lengths import Bounded, Distribution, check_lognormal_width

__all__ = ["Duration", "FixedDuration", "ExponentialDuration", "LognormalDuration", "UniformDuration"]

Seconds = Annotated[float, Field(ge=0, allow_inf_nan=False)]


class _Duration(Distribution):
    """Non-negative float seconds (``sample`` gives float64)."""


class FixedDuration(_Duration):
    """Always the same pause."""

    dist: Literal["fixed"] = "fixed"
    value: Seconds = Field(description="seconds")

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return np.full(n, self.value, dtype=np.float64)

    def mean(self) -> float:
        return self.value


class ExponentialDuration(_Duration):
    """Memoryless pauses: the next event is as likely now as later."""

    dist: Literal["exponential"] = "exponential"
    mean_: float = Field(alias="mean", gt=0, allow_inf_nan=False, description="mean seconds")

    model_config = ConfigDict(extra="forbid", frozen=True, serialize_by_alias=True)

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return rng.exponential(self.mean_, size=n)

    def mean(self) -> float:
        return self.mean_


class LognormalDuration(_Duration):
    """Long-tailed pauses (human think times), given by the mean and std of the seconds (not of their log)."""

    dist: Literal["lognormal"] = "lognormal"
    mean_: float = Field(alias="mean", gt=0, allow_inf_nan=False, description="mean seconds")
    std: Seconds = Field(description="standard deviation, seconds")

    model_config = ConfigDict(extra="forbid", frozen=True, serialize_by_alias=True)

    @model_validator(mode="after")
    def _not_too_wide(self) -> "LognormalDuration":
        check_lognormal_width(self.mean_, self.std)
        return self

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        sigma2 = math.log1p((self.std / self.mean_) ** 2)
        if sigma2 == 0:
            return np.full(n, self.mean_, dtype=np.float64)
        return rng.lognormal(math.log(self.mean_) - sigma2 / 2, math.sqrt(sigma2), size=n)

    def mean(self) -> float:
        return self.mean_


class UniformDuration(Bounded, _Duration):
    """Seconds drawn uniformly from ``[min, max]``."""

    dist: Literal["uniform"] = "uniform"
    min: Seconds = Field(description="seconds")
    max: Seconds = Field(description="seconds")

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        return rng.uniform(self.min, self.max, size=n)

    def mean(self) -> float:
        return (self.min + self.max) / 2.0


Duration = Annotated[
    Union[FixedDuration, ExponentialDuration, LognormalDuration, UniformDuration],
    Field(discriminator="dist"),
]
