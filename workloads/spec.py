"""The ``workload:`` block of a scenario: how many requests, when, how long.

Four kinds of traffic share the block:

* open loop (``arrival`` poisson or gamma): independent requests;
* closed loop (``arrival`` concurrency): N users, each sending again when served;
* sessions (``session`` chat, autocomplete or agentic): the arrival process
  gives session starts, and each session sends a sequence of related requests
  (:mod:`workloads.chat`, :mod:`workloads.autocomplete`, :mod:`workloads.agentic`);
* a trace (``arrival`` trace): times and lengths replayed from a file.

``system_prompt`` puts an app's system prompt in front of every prompt
(:mod:`workloads.system_prompts`); open- and closed-loop ``input_tokens``
then count the tokens *after* it. Requests with such structure carry block
ids (:mod:`workloads.block_ids`) of ``block_tokens`` tokens each.

Randomness: one seed feeds independent streams, spawned from a single
``numpy.random.SeedSequence`` in a fixed order (arrivals, input lengths,
output lengths, then the later ones). Changing one spec therefore leaves
the other sample sequences untouched: switching Poisson to gamma keeps every
request's lengths, and changing the output distribution keeps the prompts.
Each stream is consumed in request (or session) order, so request i's values
do not depend on how many requests follow (``num_requests`` 100 and 1000
agree on the first 100), and the closed-loop driver's ``lengths(seed, n)``
gives the same lengths as ``generate(seed)`` for the same int seed.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Callable, Iterable, NamedTuple, Optional, Union

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from .agentic import AgenticSessionSpec
from .arrivals import ArrivalSpec, ConcurrencyArrival
from .autocomplete import AutocompleteSessionSpec
from .chat import ChatSessionSpec
from .lengths import LengthDist
from .request import Request
from .system_prompts import Apps, SystemPromptSpec
from .traces import TraceSpec, trace_block_tokens
from simulator.errors import KeyRefusal
from simulator.runsize import MAX_SPAN_S

__all__ = ["DEFAULT_BLOCK_TOKENS", "MAX_PAGED_BLOCK_TOKENS", "paged_block_tokens", "WorkloadSpec", "SessionSpec",
           "Streams", "SeedLike", "spawn_streams", "LoneRows"]

SeedLike = Union[int, np.random.SeedSequence, np.random.Generator]

#: The most tokens an unset ``block_tokens`` takes to follow the pools' KV blocks: past it, a shared prefix would
#: be matched in steps coarser than any stack's page, and the scenario sets the key itself.
MAX_PAGED_BLOCK_TOKENS = 256

#: Tokens per prompt block id where the scenario sets none and no pool's block asks for more: vLLM's KV block.
DEFAULT_BLOCK_TOKENS = 16


def paged_block_tokens(pages: Iterable[int]) -> Optional[int]:
    """The ``block_tokens`` an unset key takes beside pools caching prefixes in blocks of ``pages`` tokens:
    the least common multiple of those and :data:`DEFAULT_BLOCK_TOKENS`, None past
    :data:`MAX_PAGED_BLOCK_TOKENS` (the scenario must set it)."""
    tokens = math.lcm(DEFAULT_BLOCK_TOKENS, *pages)
    return tokens if tokens <= MAX_PAGED_BLOCK_TOKENS else None


SessionSpec = Annotated[Union[ChatSessionSpec, AutocompleteSessionSpec, AgenticSessionSpec],
                        Field(discriminator="type")]


class Streams(NamedTuple):
    # Field order = spawn order. Append new streams at the end so the existing
    # ones keep their samples.
    arrivals: np.random.Generator        # arrival times, session starts; a trace's thinning and jitter
    input_tokens: np.random.Generator    # prompt lengths, chat messages
    output_tokens: np.random.Generator   # output lengths, responses, completions
    apps: np.random.Generator            # system-prompt lengths, then each request's or session's app
    sessions: np.random.Generator        # chat turns, autocomplete bursts per session
    think: np.random.Generator           # chat think times, autocomplete pauses between bursts
    files: np.random.Generator           # autocomplete file sizes and cursor positions
    edits: np.random.Generator           # autocomplete keystrokes per burst and keystroke gaps
    adapters: np.random.Generator        # each session's or lone request's LoRA adapter (workloads.adapters)
    agents: np.random.Generator          # agentic sessions' fan-out: which calls spawn sub-agents, and their draws
    lead_in: np.random.Generator         # arrivals (or session starts) before the window (lead_in_s)


# The first three streams are the seed sequence's children 0-2, as they always
# were; every later one is a child of child 3, so appending streams never
# reaches the children other components take (the runner's router uses 7).
_FIRST = 3


def spawn_streams(seed: SeedLike) -> Streams:
    """Independent generators, one per :class:`Streams` field.

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
    children = ss.spawn(_FIRST + 1)
    later = children[_FIRST].spawn(len(Streams._fields) - _FIRST)
    return Streams(*(np.random.default_rng(c) for c in children[:_FIRST] + later))


#: Request ids per chunk when a shard picks its own out of the fleet's.
_KEEP_CHUNK = 1 << 20


class LoneRows(NamedTuple):
    """An open-loop workload's draws as columns, one row per request (a
    shard's rows are a subset, ids ascending): what its requests are built from."""

    ids: np.ndarray
    arrival: np.ndarray
    input_tokens: np.ndarray      # the user part, without the system prompt
    output_tokens: np.ndarray
    app: Optional[np.ndarray]     # None without system prompts


class WorkloadSpec(BaseModel):
    """One traffic class: arrival process plus prompt and output length laws.

    Open loop (poisson, gamma): give exactly one of ``num_requests`` (that many
    arrivals) or ``duration_s`` (every arrival before then). Closed loop
    (concurrency): ``num_requests`` is required, since nothing else ends the run.
    Sessions: exactly one of ``num_sessions`` or ``duration_s`` (sessions that
    start before it, each then runs to its end). Trace: both optional, they
    cut the replay short.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    num_requests: Optional[int] = Field(
        default=None, ge=1, description="stop after this many requests (open or closed loop, trace)")
    num_sessions: Optional[int] = Field(default=None, ge=1, description="sessions to start (session workloads)")
    duration_s: Optional[float] = Field(
        default=None, gt=0, allow_inf_nan=False,
        description="keep arrivals before this many simulated seconds (for sessions: their starts; "
                    "for a trace: its replayed times)")
    arrival: ArrivalSpec = Field(description="when requests arrive (or sessions start)")
    input_tokens: Optional[LengthDist] = Field(
        default=None, description="prompt tokens after any system prompt; per turn the new user message for "
                                  "chat; the task for agentic; omitted for a trace and for autocomplete")
    output_tokens: Optional[LengthDist] = Field(
        default=None, description="output tokens per request (chat: per response; agentic: per model call); "
                                  "omitted for a trace")
    block_tokens: int = Field(default=DEFAULT_BLOCK_TOKENS, ge=1, description="tokens per prompt block id (synthetic ids; a trace's "
                                                           "ids have the trace's size). Unset: 16, vLLM's KV block, "
                                                           "or the least common multiple of 16 and every "
                                                           "prefix-cached pool's engine.block_size where one does not "
                                                           f"divide 16 (up to {MAX_PAGED_BLOCK_TOKENS})")
    system_prompt: Optional[SystemPromptSpec] = Field(
        default=None, description="apps whose system prompt starts every prompt (and session) of the app")
    session: Optional[SessionSpec] = Field(
        default=None, description="requests come in sessions: the arrival process gives session starts")
    lead_in_s: Optional[float] = Field(
        default=None, ge=0, le=MAX_SPAN_S, allow_inf_nan=False,
        description="run the arrival process (session starts) this many seconds before the window, so that it "
                    "opens mid-stream: sessions in progress, queues, caches and autoscalers filled; requests "
                    "arriving before t = 0 are served but not counted, nor is their time billed "
                    "(open-loop poisson or gamma arrivals only; 0: a cold start, as unset)")

    @model_validator(mode="after")
    def _consistent(self) -> "WorkloadSpec":
        if self.lead_in_s and (self.is_trace or self.closed_loop):    # 0: the cold start, as unset
            raise KeyRefusal("lead_in_s", f"runs the arrival process before the window, and a "
                             f"{self.arrival.type!r} arrival has none of its own to run (a trace's times are the "
                             f"file's; a closed loop sends as requests finish: use arrival.warmup_requests); "
                             f"remove it or use a poisson or gamma arrival")
        self._spikes_inside_the_window()
        if isinstance(self.arrival, TraceSpec):
            extra = [k for k in ("input_tokens", "output_tokens", "num_sessions", "system_prompt", "session")
                     if getattr(self, k) is not None]
            if extra:
                raise ValueError(f"a trace arrival replays the file's requests (lengths and any block ids "
                                 f"come from it): remove {', '.join(extra)}")
            return self
        if self.session is not None:
            self._check_session()
            return self
        if self.num_sessions is not None:
            raise ValueError("num_sessions needs a session (workload.session); use num_requests")
        missing = [k for k in ("input_tokens", "output_tokens") if getattr(self, k) is None]
        if missing:
            raise ValueError(f"{' and '.join(missing)} required (only a trace arrival gives its own lengths)")
        if isinstance(self.arrival, ConcurrencyArrival):
            if self.num_requests is None or self.duration_s is not None:
                raise ValueError("arrival type 'concurrency' needs num_requests "
                                 "(and no duration_s): a closed loop ends after that many requests")
        elif (self.num_requests is None) == (self.duration_s is None):
            raise ValueError("give exactly one of num_requests or duration_s")
        return self

    def _spikes_inside_the_window(self) -> None:
        """A spike from ``duration_s`` on multiplies a rate no arrival is drawn from (arrivals, or session
        starts, stop there): it would change nothing, so it is a slip of units or of the window, refused;
        so is one that starts inside the window and runs past its end, whose part past it was cut without
        a word (a burst of 10 minutes run as 2). Without a duration a spike is reached, or not, by the
        count of arrivals (:func:`simulator.scenario.drawn.check_source` refuses one none reaches)."""
        spikes, d = getattr(self.arrival, "spikes", ()), self.duration_s
        for i, spike in enumerate(spikes if d is not None else ()):
            if spike.start_s >= d:
                raise KeyRefusal(("arrival", "spikes", i, "start_s"),
                                 f"{spike.start_s:g} s is at or after the window's end (duration_s: {d:g} s): no "
                                 f"arrival is drawn after it, so the spike would change nothing; start it inside "
                                 f"the window or remove it")
            end = spike.start_s + spike.duration_s
            if end > d * (1 + 1e-12):
                raise KeyRefusal(("arrival", "spikes", i, "duration_s"),
                                 f"{spike.duration_s:g} s from {spike.start_s:g} s runs to {end:g} s, past the "
                                 f"window's end (duration_s: {d:g} s): no arrival is drawn after it, so its last "
                                 f"{end - d:g} s would change nothing; end it by the window's end (at most "
                                 f"{d - spike.start_s:g} s) or lengthen the window")

    def _check_session(self) -> None:
        kind = self.session.type
        if self.arrival.closed_loop:
            raise ValueError(f"{kind} sessions need an open-loop arrival (poisson or gamma) for their starts, "
                             f"not {self.arrival.type!r}")
        if self.num_requests is not None:
            raise ValueError("a session workload stops after num_sessions or duration_s (each session then "
                             "runs to its end): num_requests is not allowed")
        if (self.num_sessions is None) == (self.duration_s is None):
            raise ValueError("give exactly one of num_sessions or duration_s")
        if self.output_tokens is None:
            raise ValueError(f"output_tokens required: the length of each {kind} response")
        if kind == "chat" and self.input_tokens is None:
            raise ValueError("input_tokens required for chat sessions: the length of each new user message")
        if kind == "agentic" and self.input_tokens is None:
            raise ValueError("input_tokens required for agentic sessions: the length of the user's task")
        if kind == "autocomplete" and self.input_tokens is not None:
            raise ValueError("remove input_tokens: an autocomplete prompt is the file up to the cursor "
                             "(see session.file_tokens)")

    @property
    def closed_loop(self) -> bool:
        """True when the fleet decides when requests arrive (concurrency)."""
        return self.arrival.closed_loop

    @property
    def closed_loop_total(self) -> int:
        """Requests a closed loop sends: its warm-up, then ``num_requests``."""
        assert isinstance(self.arrival, ConcurrencyArrival) and self.num_requests is not None
        return self.arrival.warmup_requests + self.num_requests

    @property
    def is_trace(self) -> bool:
        return isinstance(self.arrival, TraceSpec)

    def paged_by(self, pages: Iterable[int]) -> "WorkloadSpec":
        """This workload with its unset ``block_tokens`` following the KV blocks (``pages``) of the pools that
        cache its prompts' prefixes: the cache hits whole blocks, so an id must stand for a whole number of
        each (SGLang's 64-token pages on Blackwell, vLLM 0.34.0's 64-token blocks), and 16 where it already
        is one. Left as it is where the key is set, ids are a trace's or none, or the multiple would pass
        :data:`MAX_PAGED_BLOCK_TOKENS` (the scenario is then refused, asking for the key)."""
        if "block_tokens" in self.model_fields_set or self.is_trace or self.id_block_tokens() is None:
            return self
        tokens = paged_block_tokens(pages)
        if tokens is None or tokens == self.block_tokens:
            return self
        out = self.model_copy(update={"block_tokens": tokens})
        out.model_fields_set.discard("block_tokens")    # still unset: a scenario dumped and read again derives it
        return out

    def id_block_tokens(self, base_dir: str | Path | None = None) -> Optional[int]:
        """Tokens per id in ``Request.blocks``, or None when no request will carry ids.

        What the prefix cache needs to turn ids into KV blocks. Synthetic
        requests carry ids when they have structure (a system prompt or a
        session), in blocks of ``block_tokens``; a trace's come from its
        format (Mooncake: 512), and ``base_dir`` (the scenario's folder)
        finds a relative trace path when the format must be read from it.
        """
        if isinstance(self.arrival, TraceSpec):
            return trace_block_tokens(self.arrival, base_dir)
        if self.system_prompt is None and self.session is None:
            return None
        return self.block_tokens

    def lengths(self, rng: SeedLike, n: int) -> tuple[np.ndarray, np.ndarray]:
        """(input_tokens, output_tokens) for requests 0..n−1, int64 arrays.

        For the closed-loop driver, which makes its own arrival times; the
        same seed gives the same lengths as ``generate``. Input lengths are
        the tokens after any system prompt.
        """
        s = spawn_streams(rng)
        return self._lengths(s, n)

    def _lengths(self, s: Streams, n: int) -> tuple[np.ndarray, np.ndarray]:
        return self.input_tokens.sample(s.input_tokens, n), self.output_tokens.sample(s.output_tokens, n)

    def arrival_times(self, rng: SeedLike) -> np.ndarray:
        """The open-loop arrival times alone (same stream as ``generate``);
        session starts for a session workload."""
        return self._times(spawn_streams(rng))

    def _times(self, s: Streams) -> np.ndarray:
        if self.closed_loop:
            raise ValueError("a closed-loop (concurrency) workload has no arrival times of its own; "
                             "the engine creates requests as others finish (use lengths())")
        if self.is_trace:
            raise ValueError("a trace workload's times come from its file (use workloads.drivers.make_source)")
        n = self.num_sessions if self.session is not None else self.num_requests
        window = self.arrival.times(s.arrivals, n=n, duration_s=self.duration_s)
        if not self.lead_in_s:
            return window
        return np.concatenate([self.arrival.lead_in_times(s.lead_in, self.lead_in_s), window])

    def draw_apps(self, s: Streams) -> Optional[Apps]:
        """The apps of ``system_prompt`` (drawn from the apps stream), or None."""
        if self.system_prompt is None:
            return None
        return Apps(self.system_prompt, s.apps, self.block_tokens)

    def generate(self, rng: SeedLike) -> list[Request]:
        """All requests of an open-loop workload, ids 0..n−1 in arrival order.

        Sessions, closed loops and traces depend on the simulation or on a
        file: :func:`workloads.drivers.make_source` drives every kind.
        """
        if self.session is not None:
            raise ValueError("a session workload's requests depend on the fleet (each turn waits for the "
                             "last); use workloads.drivers.make_source")
        return self._generate(spawn_streams(rng))

    def _generate(self, s: Streams, keep: Optional[Callable[[np.ndarray], np.ndarray]] = None) -> list[Request]:
        """``keep`` (a mask of request ids, for a shard) drops requests before
        any Python object is built for them; the others keep their ids."""
        reqs, attach = self._bare(s, keep)
        if attach is not None:
            for i, r in enumerate(reqs):
                attach(i, r)
        return reqs

    def lone_rows(self, s: Streams, apps: Optional[Apps] = None,
                  keep: Optional[Callable[[np.ndarray], np.ndarray]] = None) -> "LoneRows":
        """The draws of an open-loop workload's requests, as arrays: all of
        them, or those whose id ``keep`` (a mask function) keeps. ``apps``:
        :meth:`draw_apps` of the same streams, drawn by the caller first."""
        t = self._times(s)
        n = len(t)
        if keep is None:
            ids = np.arange(n)
            kept = lambda a: a  # noqa: E731
        else:
            # A shard keeps ~1/N of the fleet's draws: each array is cut down
            # as soon as it is drawn (and the mask built a chunk at a time), so
            # the whole fleet's arrays are never held together.
            ids = np.concatenate([lo + np.flatnonzero(keep(np.arange(lo, min(lo + _KEEP_CHUNK, n))))
                                  for lo in range(0, n, _KEEP_CHUNK)] or [np.zeros(0, dtype=np.int64)])
            kept = lambda a: a[ids]  # noqa: E731
            t = kept(t)
        inp = kept(self.input_tokens.sample(s.input_tokens, n))
        out = kept(self.output_tokens.sample(s.output_tokens, n))
        chosen = None if apps is None else kept(apps.choose(n))
        return LoneRows(ids, t, inp, out, chosen)

    def _bare(self, s: Streams, keep: Optional[Callable[[np.ndarray], np.ndarray]] = None,
              rows: Optional["LoneRows"] = None
              ) -> tuple[list[Request], Optional[Callable[[int, Request], None]]]:
        """The requests without block ids, and ``attach(i, request)`` that
        gives request i its ids (None when they have none): a driver can
        attach them at arrival, since ids are most of a request's memory.
        ``rows``: the draws, already made (a shard's share of the fleet's,
        drawn once for all shards by :mod:`simulator.sharding.predraw`)."""
        apps = self.draw_apps(s)
        if rows is None:
            rows = self.lone_rows(s, apps, keep)
        cols = (rows.ids.tolist(), rows.arrival.tolist(), rows.input_tokens.tolist(),
                rows.output_tokens.tolist())   # Python scalars, not numpy ones
        if apps is None:
            return [Request(i, a, x, y) for i, a, x, y in zip(*cols)], None
        assert rows.app is not None
        heads = apps.tokens
        reqs = [Request(i, a, heads[app] + x, y) for i, a, x, y, app in zip(*cols, rows.app.tolist())]
        chosen = rows.app.astype(np.int32)
        return reqs, lambda i, req: apps.attach(req, int(chosen[i]))

    def mean_tokens(self) -> tuple[float, float]:
        """Expected (input, output) tokens per request, for back-of-envelope sizing.

        Input includes the system prompt's expected length (app lengths are
        drawn independently of their popularity, so it is the length law's
        mean). Not defined for sessions and traces.
        """
        if self.session is not None or self.is_trace:
            raise ValueError("mean tokens per request depend on the sessions or the trace; simulate instead")
        head = self.system_prompt.tokens.mean() if self.system_prompt is not None else 0.0
        return head + self.input_tokens.mean(), self.output_tokens.mean()
