"""``--vary`` axes: what ``llmsim plan`` may change in the scenario.

``key=1..256`` is an integer range (the axis a search bisects);
``key=a,b,c`` (or one value) is a list of choices, crossed with the other
lists. Values are YAML, as with ``--set``, so ``tp=2,4,8`` are numbers.
"""
from __future__ import annotations

import itertools
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence


from ..errors import LlmsimError
from ..scenario.load import load_scenario
from ..scenario.overrides import as_loaded, key_fault, repeated
from ..scenario.variants import merge_overlays, overlay_assignments, yaml_text
from ..structured import parse_flag_value
from .point import check_overrides
from .precheck import Run

__all__ = ["Axis", "parse_vary", "choices", "check_axes", "runs_to_check"]

_RANGE = re.compile(r"^\s*(-?\d+)\s*\.\.\s*(-?\d+)\s*$")
#: A range written the way other tools write one (``1-6``, ``1:6``, ``1...6``, ``1 to 6``).
_OTHER_RANGE = re.compile(r"^\s*(\d+)\s*(?:-|:|\.\.\.|…|\s+to\s+)\s*(\d+)\s*$")


@dataclass(frozen=True)
class Axis:
    key: str
    values: tuple[Any, ...] = ()          # the choices, for a list axis
    bounds: tuple[int, int] | None = None  # (lo, hi) inclusive, for a range axis

    @property
    def is_range(self) -> bool:
        return self.bounds is not None

    def text(self) -> str:
        if self.bounds:
            return f"{self.key}={self.bounds[0]}..{self.bounds[1]}"
        return f"{self.key}={','.join(map(yaml_text, self.values))}"


def _value(raw: str) -> Any:
    try:
        return parse_flag_value(raw)
    except ValueError as e:
        raise LlmsimError(f"--vary value {raw!r}: {e}", key_path="--vary") from None


def parse_vary(text: str) -> Axis:
    """One ``--vary`` text as an axis, so Python and the command line spell an axis the same way:
    ``key=LO..HI`` a range a plan searches, ``key=a,b,c`` choices it crosses (YAML values, as ``--set``).
    A malformed text is refused here, naming the axis, before any run."""
    key, sep, raw = text.partition("=")
    key = key.strip()
    if not sep or not key or not raw.strip():
        raise LlmsimError(f"--vary expects key.path=LO..HI or key.path=a,b,c (got {text!r})", key_path="--vary")
    m = _RANGE.match(raw)
    if slip := _OTHER_RANGE.match(raw):
        # read as one choice, the text '1-6' left the plan no range: "exactly one range axis, got 0"
        raise LlmsimError(f"{raw.strip()!r} is not a range llmsim reads: a range is written LO..HI "
                          f"({slip.group(1)}..{slip.group(2)})", key_path=f"--vary {key}")
    if not m and ".." in raw and "," not in raw:
        lo, _, hi = raw.partition("..")
        raise LlmsimError(f"{raw.strip()!r} is not a range of whole numbers: expected LO..HI such as 1..64 "
                          f"({lo.strip()!r} and {hi.strip()!r} must be integers)", key_path=f"--vary {key}")
    if m:
        lo, hi = int(m.group(1)), int(m.group(2))
        if lo > hi:
            raise LlmsimError(f"empty range {lo}..{hi}: the low end must not exceed the high end",
                              key_path=f"--vary {key}")
        return Axis(key, bounds=(lo, hi))
    pieces = [v.strip() for v in _top_level_split(raw)]
    values = tuple(_value(v) for v in pieces)
    if any(v is None or v == "" for v in values):
        raise LlmsimError(f"an empty choice in {raw!r}", key_path=f"--vary {key}")
    twice = repeated([as_loaded(key, v) for v in values], pieces)
    if twice:     # the same choice planned again: its runs and its row twice, one answer
        raise LlmsimError(f"{twice} in {raw.strip()}; give each choice once", key_path=f"--vary {key}")
    return Axis(key, values=values)


def _top_level_split(raw: str) -> list[str]:
    """``raw`` cut at the commas between choices, not those inside a YAML flow
    mapping or list or a quoted string: ``{type: poisson, rate_per_s: 3}`` is
    one choice, as the same text is one value to ``--set``."""
    pieces, depth, quote, start = [], 0, "", 0
    for i, ch in enumerate(raw):
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch in "[{":
            depth += 1
        elif ch in "]}":
            depth = max(0, depth - 1)
        elif ch == "," and depth == 0:
            pieces.append(raw[start:i])
            start = i + 1
    return [*pieces, raw[start:]]


def choices(axes: Sequence[Axis]) -> list[dict[str, Any]]:
    """Every combination of the list axes (one empty combination if none)."""
    lists = [a for a in axes if not a.is_range]
    return [dict(zip([a.key for a in lists], combo)) for combo in itertools.product(*(a.values for a in lists))]


#: A range of at most this many values is compiled at every value before any run (9 ms each): a value
#: inside it can fail where its ends do not (tp=6 of 1..8 divides no head count); a longer one (a count
#: of replicas, where every value between valid ends is valid) at its ends.
CHECKED_RANGE = 256


def runs_to_check(axes: Sequence[Axis]) -> list[Run]:
    """Every combination of choices at every value of the range the search
    may try (:data:`CHECKED_RANGE`): each may be run, so each must be a
    scenario llmsim can model. Each key's value is named as the ``--vary``
    it came from."""
    ends = [{a.key: v} for a in axes if a.is_range
            for v in (range(a.bounds[0], a.bounds[1] + 1) if a.bounds[1] - a.bounds[0] < CHECKED_RANGE
                      else a.bounds)] or [{}]
    return [vary_run({**combo, **end}) for combo in choices(axes) for end in ends]


def vary_run(overrides: Mapping[str, Any]) -> Run:
    """A run of a plan's values, each key's named as the ``--vary`` it came from."""
    return Run(overrides, {k: f"--vary {k}={yaml_text(v)}" for k, v in overrides.items()})


def check_axes(scenario: str | Path, axes: Sequence[Axis], sets: Mapping[str, Any] | None = None) -> None:
    """Each axis alone, at each choice (a range at both ends), on top of
    ``sets``, must give a valid scenario: an unknown key or an impossible
    value fails here, naming its ``--vary``, before any simulation runs.
    (Two axes on one key are refused by ``plan_fleet``, which resolves
    their spellings against the scenario.)"""
    for a in axes:
        values = list(a.bounds if a.is_range else a.values)
        for v in values:
            try:
                check_overrides(scenario, merge_overlays([sets or {}, {a.key: v}]), f"--vary {a.key}={yaml_text(v)}",
                                varied=[a.key])
            except LlmsimError as e:
                others = [w for w in values if w != v]
                raise _fault_of_key(scenario, a, sets, e) or _fault_of_every_choice(scenario, a, sets, others, e) \
                    or e from None


def _fault_of_every_choice(scenario: str | Path, axis: Axis, sets: Mapping[str, Any] | None,
                           others: Sequence[Any], err: LlmsimError) -> LlmsimError | None:
    """``err`` shown against the ``--vary`` as given when another choice (``others``: the axis's other
    values) fails the same way (an index past the list, an autoscaled pool's replicas): the key is at
    fault, and one choice named alone would read as the culprit. None when no other choice fails so."""
    if not others:
        return None
    try:
        check_overrides(scenario, merge_overlays([sets or {}, {axis.key: others[-1]}]), "", varied=[axis.key])
    except LlmsimError as again:
        if again.key_path == err.key_path and again.message == err.message:
            return LlmsimError(err.message, source=f"{scenario} (--vary {axis.text()})", key_path=err.key_path)
    return None


def _fault_of_key(scenario: str | Path, axis: Axis, sets: Mapping[str, Any] | None,
                  err: LlmsimError) -> LlmsimError | None:
    """``err`` as the fault of the axis's key, if it is one: a key that names
    nothing is wrong at every choice, so the error shows the ``--vary`` as
    given (a choice or a range's end would read as the culprit) and the
    nearest key that exists; None for a fault of the value."""
    try:
        base, _ = load_scenario(scenario, overlay_assignments(dict(sets or {})))
    except LlmsimError:
        return None     # then the axis is not what is wrong
    fault = key_fault(base, axis.key, err)
    if fault is None:
        return None
    return LlmsimError(fault.message, source=f"{scenario} (--vary {axis.text()})", key_path=fault.key_path)
