"""Replaying real request traces as a workload.

A scenario names a trace as ``workload.arrival: {type: trace, path, format}``;
this module turns the file into the sorted list of
:class:`~workloads.request.Request` the engine consumes.

Formats (``format: auto`` tells them apart by the header line):

- ``azure`` — Azure LLM inference trace CSV: ``TIMESTAMP`` (date-time),
  ``ContextTokens``, ``GeneratedTokens``.
- ``mooncake`` — Mooncake JSONL: ``timestamp`` (ms), ``input_length``,
  ``output_length``, ``hash_ids`` (one id per 512-token block, kept as
  ``Request.blocks``).
- ``splitwise`` — Splitwise/Vidur CSV: ``arrived_at`` (s),
  ``num_prefill_tokens``, ``num_decode_tokens``.
- ``llmsim`` — llmsim's own, CSV or JSONL by suffix: ``timestamp`` (s),
  ``input_tokens``, ``output_tokens``, optional ``session_id`` (int or
  string), ``block_ids`` (JSON list; in CSV space-separated ints) and
  ``class`` (a class the scenario declares: a run refuses any other,
  :func:`simulator.runner.simulate`). A file with block ids needs
  ``block_size`` in the spec.
  ``.gz`` files are read transparently.

Lengths must be integers ≥ 1 (a request has a prompt and yields at least
its first token) and timestamps must not decrease: a trace is replayed in
file order, so an unsorted one is an error rather than silently re-sorted.

How the options combine, in this order:

1. Times are made relative to the *first row* of the file ("trace clock").
2. Window: keep ``start_s <= t < end_s`` on the trace clock, applied to
   the jittered times (step 4): rows up to ``jitter_s`` before ``start_s``
   may be jittered into the window and rows near ``end_s`` out of it, so
   every replayed arrival is inside the window and the rate over it is the
   trace's (except within ``jitter_s`` of the trace's first row, which no
   earlier row can be moved into).
3. ``rate_scale`` r changes the *volume* on the unchanged clock: each unit
   (a session when the trace has session ids, else a request) is replayed
   ⌊r⌋ times plus once more with probability r − ⌊r⌋, so r = 0.5 keeps a
   random half and r = 2 superposes the trace with a second copy of itself.
   Copies get fresh session ids and block ids (offset past the trace's
   largest), so a copy is a different user with the same behaviour, not a
   free cache hit; copies arrive with their original, so add ``jitter_s``
   to spread them.
4. ``jitter_s`` adds uniform [0, jitter_s) seconds (trace clock) to each
   time and re-sorts: traces on a coarse grid (Mooncake's 3 s) otherwise
   arrive in synchronized bursts.
5. ``time_scale`` s compresses the clock: arrival = (t − start_s) / s, so
   the first request arrives at (t_first − start_s)/s (0 without a
   window) and s = 2 replays twice as fast.
6. ``max_requests`` keeps the first N by arrival.

``time_scale`` and ``rate_scale`` both multiply the mean rate, but are not
the same thing: ``time_scale`` squeezes everything in time (bursts get
shorter and denser, a session's think time shrinks, the run is shorter),
while ``rate_scale`` keeps every time scale of the trace and changes how
many users there are — the usual capacity-planning question ("traffic
doubles"). Thinning with r < 1 drops whole sessions when the trace knows
them; Mooncake's multi-turn conversations are not labelled, so thinning it
lowers its prefix reuse (``ideal_block_hit_rate`` shows by how much).

Random draws (rate_scale, jitter) come from the ``rng`` given, and only
when those options are used, so a run without them leaves the caller's
stream untouched.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, NoReturn, Optional

import numpy as np
from pydantic import ConfigDict, Field, ValidationError, model_validator

from simulator.errors import LlmsimError, from_validation_error
from simulator.reads import MAX_TRACE_BYTES, input_file

from .arrival_registry import ArrivalProcess, register_arrival
from .request import Request
from .trace_formats import MOONCAKE_BLOCK_SIZE, READERS, TRACE_FORMATS, RawTrace, detect_format, trace_error
from .trace_stats import TraceStats, ideal_block_hit_rate, trace_stats

__all__ = ["TraceSpec", "Trace", "TRACE_FORMATS", "load_trace", "read_trace", "parse_trace_spec", "seeds_alike",
           "copies_in_step",
           "resolve_trace_path", "existing_trace_file", "trace_block_tokens", "TraceStats", "trace_stats",
           "ideal_block_hit_rate"]


@register_arrival("trace")
class TraceSpec(ArrivalProcess):
    """``workload.arrival`` when the arrivals come from a file (the file fixes the times: open loop)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    type: Literal["trace"] = "trace"
    path: str = Field(min_length=1, description="trace file; relative paths are relative to the scenario file")
    format: Literal["auto", "azure", "mooncake", "splitwise", "llmsim"] = Field(
        default="auto", description="file format; auto = tell from the header line")
    time_scale: float = Field(default=1.0, gt=0, description="replay speed-up: timestamps are divided by it")
    rate_scale: float = Field(default=1.0, gt=0, le=1e8,
                              description="request-volume multiplier on the trace's own clock "
                                          "(thinning below 1, superposed copies above, each at its row's own "
                                          "timestamp unless jitter_s spreads them; at most 10⁸, the most "
                                          "requests a run holds, as one row replayed)")
    start_s: float = Field(default=0.0, ge=0, description="window start, seconds after the first row")
    end_s: Optional[float] = Field(default=None, gt=0, description="window end (exclusive), same clock")
    max_requests: Optional[int] = Field(default=None, ge=1, description="keep the first N requests")
    jitter_s: float = Field(default=0.0, ge=0,
                            description="uniform [0, jitter_s) added to each timestamp; the window (start_s, end_s) "
                                        "applies to the jittered times, so arrivals stay inside it (shorter than "
                                        "the window)")
    block_size: Optional[int] = Field(default=None, ge=1,
                                      description="tokens per block id (default: the format's, 512 for mooncake)")

    @property
    def draws(self) -> bool:
        """Whether the replay draws anything at random (jitter, or a fractional rate_scale's thinning or
        extra copy): without, every seed replays the same requests."""
        return self.jitter_s > 0 or not float(self.rate_scale).is_integer()

    @model_validator(mode="after")
    def _window(self) -> "TraceSpec":
        if self.end_s is not None and self.end_s <= self.start_s:
            raise ValueError(f"end_s ({self.end_s}) must be greater than start_s ({self.start_s})")
        if self.end_s is not None and self.jitter_s >= self.end_s - self.start_s:
            # Arrivals are kept inside the window after jittering: one this long would replay
            # rows from before the window in place of the window's own.
            raise ValueError(f"jitter_s ({self.jitter_s:g}) must be shorter than the window end_s - start_s "
                             f"({self.end_s - self.start_s:g})")
        return self


def parse_trace_spec(data: Any, source: str | Path | None = None) -> TraceSpec:
    """Validate a spec dict, turning pydantic's report into one LlmsimError."""
    try:
        return TraceSpec.model_validate(data)
    except ValidationError as e:
        raise from_validation_error(e, source) from None


@dataclass(frozen=True)
class Trace:
    """The requests of a trace plus what the engine and reports need to know about it.

    ``block_size`` is the number of tokens each id in ``Request.blocks``
    stands for (None when the trace has no block ids); the prefix cache
    must convert it to its own KV block size.
    """

    requests: list[Request]
    path: Path
    format: str
    block_size: Optional[int]
    rows: int          # data rows in the file
    span_s: float      # first to last row, trace clock
    window_s: float    # the replay's arrival window, arrival clock (:func:`_replay_window`)

    def stats(self) -> TraceStats:
        return trace_stats(self.requests)


def resolve_trace_path(spec: TraceSpec, base_dir: str | Path | None = None) -> Path:
    """The trace file: ``~`` expanded, relative paths taken from ``base_dir`` (the scenario's folder)."""
    p = Path(spec.path).expanduser()
    if not p.is_absolute() and base_dir is not None:
        p = Path(base_dir) / p
    return p


def trace_block_tokens(spec: TraceSpec, base_dir: str | Path | None = None) -> Optional[int]:
    """Tokens per id in the trace's ``Request.blocks``, known before reading the rows.

    None for formats without block ids. With ``format: auto`` the header line
    is read to tell the format. A ``llmsim`` file is only known to carry ids
    once read: this gives its ``block_size`` (None if unset, and reading a file
    with ids then fails); :attr:`Trace.block_size` is the exact answer.
    """
    fmt = spec.format
    if fmt == "auto":
        fmt = detect_format(existing_trace_file(resolve_trace_path(spec, base_dir)))
    if fmt == "mooncake":
        return spec.block_size or MOONCAKE_BLOCK_SIZE
    if fmt == "llmsim":
        return spec.block_size
    return None


def load_trace(spec: TraceSpec, base_dir: str | Path | None = None, rng: Any = None) -> list[Request]:
    """The trace's requests, sorted by arrival, ids 0..n-1 (see the module doc for the options)."""
    return read_trace(spec, base_dir, rng).requests


def _read_as(reader: Any, path: Path, fmt: str) -> RawTrace:
    """The file read by ``fmt``'s reader. A format named in the scenario that is not the file's
    (format: mooncake on a CSV) fails on the first line in the reader's words ("invalid JSON"), as if
    the file were broken: the refusal then says which format the file's header reads as."""
    try:
        return reader(path)
    except LlmsimError as e:
        if fmt == "auto":
            raise
        try:
            found = detect_format(path)
        except LlmsimError:
            raise e from None
        if found == fmt:
            raise
        raise LlmsimError(f"{e.message} (the scenario's format is {fmt}, and the file's header reads as {found}: "
                          f"set format: {found} or auto)", source=e.source, key_path=e.key_path) from None


def read_trace(spec: TraceSpec, base_dir: str | Path | None = None, rng: Any = None) -> Trace:
    """Like :func:`load_trace`, also returning the block size and the file's extent."""
    if isinstance(spec, dict):
        spec = parse_trace_spec(spec)
    path = existing_trace_file(resolve_trace_path(spec, base_dir))
    fmt = detect_format(path) if spec.format == "auto" else spec.format
    reader = READERS.get(fmt)
    if reader is None:  # only reachable when the spec bypassed validation
        raise LlmsimError(f"unknown trace format {fmt!r} (valid: {', '.join(TRACE_FORMATS)}, auto)", source=path)
    raw = _read_as(reader, path, spec.format)
    block_size = spec.block_size or raw.block_size
    _validate(raw, path, block_size)

    t = raw.t - raw.t[0]
    span = float(t[-1])
    # Jitter only delays: the rows it may move into the window start up to jitter_s before it.
    keep = t >= spec.start_s - spec.jitter_s
    if spec.end_s is not None:
        keep &= t < spec.end_s
    idx = np.nonzero(keep)[0]
    if len(idx) == 0:
        _empty_window(spec, span, path)

    need_rng = spec.rate_scale != 1.0 or spec.jitter_s > 0
    gen = _as_rng(rng) if need_rng else None
    copy = np.zeros(len(idx), dtype=np.int64)
    if spec.rate_scale != 1.0:
        from simulator.runsize import MAX_REQUESTS

        if len(idx) * spec.rate_scale > MAX_REQUESTS:    # each row replayed rate_scale times, drawn at once
            raise LlmsimError(f"rate_scale {spec.rate_scale:g} replays the window's {len(idx):,} rows as "
                              f"~{len(idx) * spec.rate_scale:,.4g} requests; llmsim simulates at most "
                              f"{MAX_REQUESTS:,} in a run", source=path)
        idx, copy = _rescale(idx, raw.session, spec.rate_scale, gen)
        if len(idx) == 0:
            raise LlmsimError(f"rate_scale {spec.rate_scale:g} left no requests in the window", source=path)
    times = t[idx]
    if spec.jitter_s > 0:
        times = times + gen.uniform(0.0, spec.jitter_s, size=len(times))
        order = np.argsort(times, kind="stable")
        inside = times[order] >= spec.start_s
        if spec.end_s is not None:
            inside &= times[order] < spec.end_s
        order = order[inside]
        idx, copy, times = idx[order], copy[order], times[order]
        if len(idx) == 0:
            _empty_window(spec, span, path)
    arrivals = (times - spec.start_s) / spec.time_scale
    cut = spec.max_requests is not None and len(arrivals) > spec.max_requests
    if cut:
        n = spec.max_requests
        idx, copy, arrivals = idx[:n], copy[:n], arrivals[:n]

    requests = _build(raw, idx, copy, arrivals)
    return Trace(requests=requests, path=path, format=fmt, block_size=block_size if raw.blocks else None,
                 rows=len(raw.t), span_s=span, window_s=_replay_window(spec, span, arrivals, cut))


def _replay_window(spec: TraceSpec, span: float, arrivals: np.ndarray, cut: bool) -> float:
    """How long the replayed traffic was offered over, on the arrival clock: the window start_s to end_s
    the spec asks for, ended early by the file's last row (a trace shorter than the window) or, when
    max_requests cut the replay, by the last request kept. Not the last arrival: a trace goes quiet for
    minutes (Azure's 2023 code trace has 63 rows in its first 60 s, the last at 39 s), and a 60 s window
    read over its 39 s offered 53 % more load than the trace did. Jitter may carry arrivals past the
    last row: the window then ends with them."""
    last = float(arrivals[-1])
    if cut:
        return last
    end = span if spec.end_s is None else min(spec.end_s, span)
    return max((end - spec.start_s) / spec.time_scale, last)


def _empty_window(spec: TraceSpec, span: float, path: Path) -> NoReturn:
    end = "end" if spec.end_s is None else f"{spec.end_s:g}"
    raise LlmsimError(f"no requests in the window start_s={spec.start_s:g} to end_s={end} "
                      f"(the trace spans 0 to {span:g} s after its first row)", source=path)


def existing_trace_file(path: Path) -> Path:
    """The trace file, checked before a byte is read: a regular file no larger than any trace llmsim reads."""
    input_file(path, MAX_TRACE_BYTES, "trace file")
    return path


def _as_rng(rng: Any) -> np.random.Generator:
    """The scenario's generator, a seed, or a fixed seed (runs stay reproducible)."""
    if isinstance(rng, np.random.Generator):
        return rng
    return np.random.default_rng(0 if rng is None else rng)


def _validate(raw: RawTrace, path: Path, block_size: Optional[int]) -> None:
    """Checks every format shares; the first failing row is reported."""
    n = len(raw.t)
    if n == 0:
        raise trace_error(path, "the trace has no requests")
    bad = ~np.isfinite(raw.t)
    if bad.any():
        i = int(np.argmax(bad))
        raise trace_error(path, f"timestamp is not finite (got {raw.t[i]})", raw.lines[i])
    from simulator.profiles.model import MAX_CONTEXT

    for name, v in (("input length", raw.input_tokens), ("output length", raw.output_tokens)):
        bad = ~np.isfinite(v) | (v < 1) | (v != np.floor(v)) | (v > MAX_CONTEXT)
        if bad.any():
            i = int(np.argmax(bad))
            x = v[i]
            if x > MAX_CONTEXT:
                why = f"{name} {x:g} tokens is past any model's context (llmsim takes at most {MAX_CONTEXT:,})"
            elif x < 0:
                why = f"{name} is negative ({x:g})"
            elif x == 0:
                why = f"{name} is 0; every request needs at least 1 token"
            else:
                why = f"{name} must be a whole number of tokens (got {x:g})"
            raise trace_error(path, why, raw.lines[i])
    back = np.diff(raw.t) < 0
    if back.any():
        i = int(np.argmax(back)) + 1
        raise trace_error(path, f"timestamp goes backwards: {_fmt_t(raw, i)} is earlier than {_fmt_t(raw, i - 1)} "
                                f"on line {raw.lines[i - 1]} (times after the first row); the trace must be "
                                "sorted by time", raw.lines[i])
    raw.input_tokens = raw.input_tokens.astype(np.int64)
    raw.output_tokens = raw.output_tokens.astype(np.int64)
    if raw.blocks is not None:
        if block_size is None:
            raise trace_error(path, "the trace has block ids but no block size: set block_size "
                                    "(tokens per block id) in the trace spec")
        for b, inp, line in zip(raw.blocks, raw.input_tokens, raw.lines):
            if b is not None and len(b) > -(-int(inp) // block_size):
                raise trace_error(path, f"{len(b)} block ids of {block_size} tokens are more than the "
                                        f"{inp} input tokens can fill (at most {-(-int(inp) // block_size)})", line)


def _fmt_t(raw: RawTrace, i: int) -> str:
    return f"t={raw.t[i] - raw.t[0]:.6g} s"


def _rescale(idx: np.ndarray, session: Optional[np.ndarray], r: float, gen: np.random.Generator):
    """Replay each unit ⌊r⌋ or ⌊r⌋+1 times (mean r); return row indices and copy numbers.

    A unit is a session when the row has one, so a conversation is kept or
    dropped whole and a copied conversation stays one conversation.
    """
    if session is not None:
        s = session[idx]
        # rows without a session are units of their own: give them distinct negative keys
        keys = np.where(s >= 0, s, -1 - np.arange(len(idx)))
        _, unit = np.unique(keys, return_inverse=True)
        n_units = int(unit.max()) + 1
    else:
        unit = np.arange(len(idx))
        n_units = len(idx)
    whole = math.floor(r)
    counts = whole + (gen.random(n_units) < (r - whole)).astype(np.int64)
    per_row = counts[unit]
    out = np.repeat(idx, per_row)
    starts = np.repeat(np.cumsum(per_row) - per_row, per_row)
    copy = np.arange(len(out), dtype=np.int64) - starts
    return out, copy


def _build(raw: RawTrace, idx: np.ndarray, copy: np.ndarray, arrivals: np.ndarray) -> list[Request]:
    """Request objects; copies (copy > 0) get session and block ids of their own."""
    inp = raw.input_tokens[idx].tolist()
    out = raw.output_tokens[idx].tolist()
    arr = arrivals.tolist()
    rows = idx.tolist()
    copies = copy.tolist()
    has_copies = bool(copy.any())
    sessions = raw.session[idx].tolist() if raw.session is not None else None
    klass = raw.klass
    blocks = raw.blocks
    s_stride = int(raw.session.max()) + 1 if (has_copies and raw.session is not None) else 0
    b_stride = 0
    if has_copies and blocks is not None:
        # ids may be signed hashes: 2·max|id|+1 keeps every copy's range disjoint
        b_stride = 2 * max((max(abs(x) for x in b) for b in blocks if b), default=0) + 1
    requests = []
    for i, row in enumerate(rows):
        c = copies[i]
        session = -1 if sessions is None else sessions[i]
        if c and session >= 0:
            session += c * s_stride
        k = "default" if klass is None or klass[row] is None or klass[row] == "" else klass[row]
        b = None if blocks is None else blocks[row]
        if c and b:
            off = c * b_stride
            b = tuple(x + off for x in b)
        requests.append(Request(i, arr[i], inp[i], out[i], session=session, klass=k, blocks=b))
    return requests


def seeds_alike(arrival: object, seeds: int) -> Optional[str]:
    """A warning where ``seeds`` runs of a workload would replay one trace identically (no jitter_s, no
    fractional rate_scale): their spread is then zero and reads as certainty, not as one draw of the
    traffic among others; None otherwise."""
    if seeds < 2 or not isinstance(arrival, TraceSpec) or arrival.draws:
        return None
    return (f"the trace {arrival.path} draws nothing at random, so its {seeds} seeds replay the same requests "
            f"and their spread is zero, not the traffic's; set workload.arrival.jitter_s (seconds added to each "
            f"timestamp at random) or a fractional rate_scale for draws that differ")


def copies_in_step(arrival: object) -> Optional[str]:
    """A warning where rate_scale above 1 replays each row's copies at the row's own timestamp (no
    jitter_s): they arrive together, a burst of identical prompts, not as the independent users more
    traffic brings (Azure's code trace at rate_scale 4 on 6 H100s read a TTFT p50 of 121 ms, 69 ms with
    the copies spread over 2 s); None otherwise."""
    if not isinstance(arrival, TraceSpec) or arrival.rate_scale <= 1 or arrival.jitter_s > 0:
        return None
    return (f"rate_scale {arrival.rate_scale:g} replays each row of the trace {arrival.path} as up to "
            f"{math.ceil(arrival.rate_scale)} requests at the row's own timestamp, so the copies arrive together "
            f"as one burst rather than as independent users; set workload.arrival.jitter_s (seconds added to each "
            f"timestamp at random) to spread them")
