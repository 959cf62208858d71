"""The ``workload:`` block of a scenario: how many requests, when, how long.

Randomness: one seed feeds three independent streams, spawned from a single
``numpy.random.SeedSequence`` in a fixed order (arrivals, input lengths,
output lengths). Changing one of the three specs therefore leaves the other
two sample sequences untouched: switching Poisson to gamma keeps every
request's lengths, and changing the output distribution keeps the prompts.
Each stream is consumed in request order, so request i's values do not
depend on how many requests follow (``num_requests`` 100 and 1000 agree on
the first 100), and the closed-loop driver's ``lengths(seed, n)`` gives the
same lengths as ``generate(seed)`` for the same int seed.
"""
from __future__ import annotations

from typing import NamedTuple, Optional, Union

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from .arrivals import ArrivalSpec, ConcurrencyArrival
from .lengths import LengthDist
from .request import Request

__all__ = ["WorkloadSpec", "Streams", "SeedLike", "spawn_streams"]

SeedLike = Union[int, np.random.SeedSequence, np.random.Generator]

class Streams(NamedTuple):
    # Field order = spawn order. Append new streams (sessions, prefix ids, ...)
    # at the end so the existing ones keep their samples.
    arrivals: np.random.Generator
    input_tokens: np.random.Generator
    output_tokens: np.random.Generator


def spawn_streams(seed: SeedLike) -> Streams:
    """Independent generators for arrivals, input and output lengths.

    An int always gives the same streams. A SeedSequence or Generator is
    spawned from with numpy's semantics: each call takes fresh children, so
    repeated calls on one object give different (still independent) samples
    and never collide with other children the caller spawns from it. Pass an
    int, or a dedicated child sequence, for a reproducible run.
    """
    if isinstance(seed, np.random.Generator):
        bg = seed.bit_generator
        ss = getattr(bg, "seed_seq", None) or bg._seed_seq  # public from numpy 1.25
    elif isinstance(seed, np.random.SeedSequence):
        ss = seed
    else:
        ss = np.random.SeedSequence(seed)
    return Streams(*(np.random.default_rng(c) for c in ss.spawn(len(Streams._fields))))


class WorkloadSpec(BaseModel):
    """One traffic class: arrival process plus prompt and output length laws.

    Open loop (poisson, gamma): give exactly one of ``num_requests`` (that many
    arrivals) or ``duration_s`` (every arrival before then). Closed loop
    (concurrency): ``num_requests`` is required, since nothing else ends the run.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    num_requests: Optional[int] = Field(default=None, ge=1)
    duration_s: Optional[float] = Field(default=None, gt=0, allow_inf_nan=False)
    arrival: ArrivalSpec
    input_tokens: LengthDist
    output_tokens: LengthDist

    @model_validator(mode="after")
    def _one_stop_rule(self) -> "WorkloadSpec":
        if isinstance(self.arrival, ConcurrencyArrival):
            if self.num_requests is None or self.duration_s is not None:
                raise ValueError("arrival type 'concurrency' needs num_requests "
                                 "(and no duration_s): a closed loop ends after that many requests")
        elif (self.num_requests is None) == (self.duration_s is None):
            raise ValueError("give exactly one of num_requests or duration_s")
        return self

    @property
    def closed_loop(self) -> bool:
        return self.arrival.closed_loop

    def lengths(self, rng: SeedLike, n: int) -> tuple[np.ndarray, np.ndarray]:
        """(input_tokens, output_tokens) for requests 0..n−1, int64 arrays.

        For the closed-loop driver, which makes its own arrival times; the
        same seed gives the same lengths as ``generate``.
        """
        s = spawn_streams(rng)
        return self._lengths(s, n)

    def _lengths(self, s: Streams, n: int) -> tuple[np.ndarray, np.ndarray]:
        return self.input_tokens.sample(s.input_tokens, n), self.output_tokens.sample(s.output_tokens, n)

    def arrival_times(self, rng: SeedLike) -> np.ndarray:
        """The open-loop arrival times alone (same stream as ``generate``)."""
        return self._times(spawn_streams(rng))

    def _times(self, s: Streams) -> np.ndarray:
        if self.closed_loop:
            raise ValueError("a closed-loop (concurrency) workload has no arrival times of its own; "
                             "the engine creates requests as others finish (use lengths())")
        return self.arrival.times(s.arrivals, n=self.num_requests, duration_s=self.duration_s)

    def generate(self, rng: SeedLike) -> list[Request]:
        """All requests of an open-loop workload, ids 0..n−1 in arrival order."""
        s = spawn_streams(rng)
        t = self._times(s)
        inp, out = self._lengths(s, len(t))
        rows = zip(t.tolist(), inp.tolist(), out.tolist())  # Python scalars, not numpy ones
        return [Request(i, a, x, y) for i, (a, x, y) in enumerate(rows)]

    def mean_tokens(self) -> tuple[float, float]:
        """Expected (input, output) tokens per request, for back-of-envelope sizing."""
        return self.input_tokens.mean(), self.output_tokens.mean()
