"""Code-autocomplete editing sessions: keystroke bursts, debounced requests, stale ones cancelled.

``workload.session: {type: autocomplete, ...}``. The arrival process gives
session starts; ``output_tokens`` is each completion's length (tens of
tokens); there is no ``input_tokens``, since the prompt is the file.

The editing model, kept deliberately simple:

* A developer edits one file of ``file_tokens`` tokens. The session is
  ``bursts`` typing bursts; each burst is ``keystrokes`` keystrokes
  ``keystroke_gap_s`` apart, and bursts are ``burst_gap_s`` apart (from the
  last keystroke of one to the first of the next).
* The cursor starts at a uniform position in the file. Each later burst
  starts where the previous one ended, or, with ``jump_probability``, at a
  new uniform position (the developer moved elsewhere).
* A keystroke inserts ``tokens_per_keystroke`` tokens at the cursor (about
  one token per four characters): the file grows and the cursor advances.
  It changes the token under the cursor, ⌊cursor⌋, and shifts all after it.
  Deletions and selections are not modelled: they change the same blocks.
* Debounce: a request fires ``debounce_ms`` after a keystroke that no other
  keystroke followed within ``debounce_ms``. Its prompt is the system prompt
  plus the file up to the cursor (at least one token); the text after the
  cursor is not sent.
* Consecutive prompts of a session therefore share every block before the
  first one touched since the previous request; that block and all after
  it get fresh ids (:class:`workloads.block_ids.Document`), as do the
  output's blocks, which the next prompt does not contain.
* A request that fires while the session's previous one is still in
  flight cancels it: its completion would be stale. The driver calls
  ``cancel(previous)`` right before submitting the new one. With
  ``cancel_stale: false`` it does not, so the stale request keeps its batch
  slot and KV until it finishes: the cost of a client that never cancels.

Keystrokes do not wait for completions, so the whole timeline of a session
is known at its start and only the cancellations depend on the fleet.
"""
from __future__ import annotations

from typing import Literal, NamedTuple, Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from .durations import Duration, ExponentialDuration
from .lengths import LengthDist, UniformLength
from .plans import split

__all__ = ["AutocompleteSessionSpec", "AutocompletePlan", "draw_autocomplete_plans", "typing_requests"]


class AutocompleteSessionSpec(BaseModel):
    """A developer editing a file, with a completion requested at each typing pause."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    type: Literal["autocomplete"] = "autocomplete"
    file_tokens: LengthDist = Field(default=UniformLength(min=4000, max=8000),
                                    description="tokens in the edited file, per session (default uniform 4000-8000)")
    bursts: LengthDist = Field(default=UniformLength(min=3, max=20),
                               description="typing bursts per session (default uniform 3-20)")
    burst_gap_s: Duration = Field(default=ExponentialDuration(mean=5.0),
                                  description="pause between bursts, seconds (default exponential, mean 5)")
    keystrokes: LengthDist = Field(default=UniformLength(min=5, max=40),
                                   description="keystrokes per burst (default uniform 5-40)")
    keystroke_gap_s: Duration = Field(default=ExponentialDuration(mean=0.15),
                                      description="time between keystrokes in a burst, seconds "
                                                  "(default exponential, mean 0.15)")
    debounce_ms: float = Field(default=50.0, ge=0, allow_inf_nan=False,
                               description="a request fires once no keystroke came for this long")
    tokens_per_keystroke: float = Field(default=0.25, gt=0, allow_inf_nan=False,
                                        description="tokens one keystroke inserts (about 1 per 4 characters)")
    jump_probability: float = Field(default=0.2, ge=0, le=1,
                                    description="chance a burst starts at a new uniform cursor position "
                                                "instead of where the last burst ended")
    cancel_stale: bool = Field(default=True,
                               description="a new request cancels the session's in-flight one (its completion "
                                           "would be stale), as editors do; false lets every request run to "
                                           "completion, the what-if of a client that never cancels")


class AutocompletePlan(NamedTuple):
    """One session's requests: fire times (seconds after the session start),
    file tokens before the cursor, first file token changed since the previous
    request, and output lengths; plus its app (−1 = none)."""

    app: int
    times: list[float]
    cursors: list[int]
    edits: list[int]
    outputs: list[int]


def typing_requests(file_tokens: int, jumps: Sequence[float], keys: Sequence[int], key_gaps: Sequence[float],
                    burst_gaps: Sequence[float], tokens_per_keystroke: float,
                    debounce_s: float) -> tuple[list[float], list[int], list[int]]:
    """(times, cursors, edits) of the requests one session's typing triggers.

    Burst b has ``keys[b]`` keystrokes; ``jumps[b]`` is where it starts as a
    fraction of the file, or < 0 to start where the last burst ended (burst 0
    must give one). ``key_gaps`` has one entry per keystroke (the gap before
    it; a burst's first is unused) and ``burst_gaps`` one per burst (the pause
    before it; burst 0's is unused).
    """
    times: list[float] = []
    cursors: list[int] = []
    edits: list[int] = []
    x, length = 0.0, float(file_tokens)
    t, last, first_edit = 0.0, -1.0, -1
    i = 0
    for b, k in enumerate(keys):
        if b:
            t = last + burst_gaps[b]
        for j in range(k):
            if j:
                t += key_gaps[i]
            i += 1
            if last >= 0 and t - last > debounce_s:
                times.append(last + debounce_s)
                cursors.append(max(1, int(x)))
                edits.append(first_edit)
                first_edit = -1
            if j == 0 and jumps[b] >= 0:
                x = jumps[b] * length
            pos = int(x)
            first_edit = pos if first_edit < 0 else min(first_edit, pos)
            x += tokens_per_keystroke
            length += tokens_per_keystroke
            last = t
    if last >= 0:
        times.append(last + debounce_s)
        cursors.append(max(1, int(x)))
        edits.append(first_edit)
    return times, cursors, edits


def draw_autocomplete_plans(spec: AutocompleteSessionSpec, outputs: LengthDist, streams, apps,
                            n: int) -> list[AutocompletePlan]:
    """Plans of the next ``n`` sessions (``streams``: :class:`workloads.spec.Streams`,
    ``apps``: :class:`workloads.system_prompts.Apps` or None)."""
    app = apps.choose(n).tolist() if apps is not None else [-1] * n
    files = spec.file_tokens.sample(streams.files, n).tolist()
    bursts = spec.bursts.sample(streams.sessions, n)
    nb = int(bursts.sum())
    keys = spec.keystrokes.sample(streams.edits, nb)
    where = streams.files.random(nb)
    moved = streams.files.random(nb) < spec.jump_probability
    moved[np.cumsum(bursts) - bursts] = True  # every session's first burst places the cursor
    jumps = np.where(moved, where, -1.0)
    pauses = spec.burst_gap_s.sample(streams.think, nb)
    gaps = spec.keystroke_gap_s.sample(streams.edits, int(keys.sum()))
    keys_per_session = np.add.reduceat(keys, np.cumsum(bursts) - bursts)
    per = zip(files, split(jumps, bursts), split(keys, bursts), split(gaps, keys_per_session), split(pauses, bursts))
    timelines = [typing_requests(f, jp, k, g, p, spec.tokens_per_keystroke, spec.debounce_ms / 1000.0)
                 for f, jp, k, g, p in per]
    counts = np.array([len(tl[0]) for tl in timelines])
    outs = split(outputs.sample(streams.output_tokens, int(counts.sum())), counts)
    return [AutocompletePlan(a, *tl, o) for a, tl, o in zip(app, timelines, outs)]
