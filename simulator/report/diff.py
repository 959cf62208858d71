"""Two results side by side: dotted keys, which way is worse, and what changed.

results.json is nested (``llmsim.cost.usd_per_request``); comparing runs,
and naming what CI tracks, wants one flat namespace. List items with a
``name`` are keyed by it, as ``--set`` addresses them
(``llmsim.cost.pools.main.usd``), so a key survives reordering of pools.

Whether a move is bad depends on the quantity, and a reader scanning a diff
of 200 keys needs the bad ones marked: latencies, money, GPUs and failures
are worse up; throughput, completions, attainment and hit rates are worse
down; anything else (counts of tokens, settings, seeds) has no direction.
"""
from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Mapping, Optional

from ..errors import LlmsimError

__all__ = ["flatten", "worse_direction", "Change", "diff", "read_json_object", "read_results", "NOISE_KEYS"]

#: Relative differences below this are float noise (a sum taken in another order), not changes.
_SAME = 1e-9

#: Keys that differ between two runs of the same scenario on the same code
#: (they measure the machine, not the fleet); hidden unless asked for. Only
#: results.json files of older llmsim versions hold them (they are in run.json now).
NOISE_KEYS = frozenset({"llmsim.wall_time_s", "llmsim.sim_requests_per_wall_s"})

_WORSE_UP = re.compile(r"(^|_)(usd|cost|failed|rejected|cancelled|pending|preemptions|gpus|gpu_hours|"
                       r"replica_seconds|queue_depth|queue_depth_per_replica|evicted_blocks)($|_)")
_WORSE_DOWN = re.compile(r"(^|_)(completed|finished|throughput|goodput|attainment|good_requests|good_fraction|"
                         r"hit_rate|met|per_gpu|per_gpu_second)($|_)")
# Latencies end in _ms; the settings written in ms (an SLO's target and
# per-request thresholds) are not measurements.
_SETTING_MS = re.compile(r"(^|\.)(target_ms|thresholds_ms\..*)$")


def flatten(obj: Any, prefix: str = "") -> dict[str, Any]:
    """``{"a": {"b": 1}, "pools": [{"name": "x", "n": 2}]}`` ->
    ``{"a.b": 1, "pools.x.n": 2}``; lists without names use indices."""
    return _flatten(obj, prefix, {})


def _flatten(obj: Any, prefix: str, blocks: dict[str, Any]) -> dict[str, Any]:
    """:func:`flatten`, noting in ``blocks`` each list or mapping it opened
    under its key: a key that is a figure in one file and a block in the
    other is then shown as that block, not as a figure gone missing."""
    out: dict[str, Any] = {}
    if isinstance(obj, Mapping):
        items = ((str(k), v) for k, v in obj.items())
    elif isinstance(obj, list):
        names = [it.get("name") if isinstance(it, Mapping) else None for it in obj]
        if all(isinstance(n, str) for n in names) and len(set(names)) == len(names):
            # The name is the key now; a leaf repeating it would be noise.
            items = ((n, {k: v for k, v in it.items() if k != "name"}) for n, it in zip(names, obj))
        else:
            items = ((str(i), it) for i, it in enumerate(obj))
    else:
        return {prefix: obj}
    for k, v in items:
        key = f"{prefix}.{k}" if prefix else k
        if isinstance(v, (Mapping, list)) and v:
            blocks[key] = v
            out.update(_flatten(v, key, blocks))
        else:
            out[key] = v
    return out


def worse_direction(key: str) -> int:
    """+1 when a rise is bad, -1 when a fall is bad, 0 when neither is.
    The leaf decides, except under a mapping of attainments keyed by
    metric (``slo.goodput.attainment.ttft``)."""
    parts = key.split(".")
    leaf = parts[-1]
    if leaf.endswith("_ms") and not _SETTING_MS.search(key):
        return 1
    if _WORSE_UP.search(leaf):
        return 1
    if _WORSE_DOWN.search(leaf) or parts[-2:-1] == ["attainment"]:
        return -1
    return 0


def _number(v: Any) -> Optional[float]:
    """Numbers and booleans (``slo.met``) as floats; anything else None."""
    if isinstance(v, bool):
        return float(v)
    if isinstance(v, (int, float)) and math.isfinite(v):
        return float(v)
    return None


@dataclass(frozen=True)
class Change:
    """One key of two results; ``delta``/``rel`` are B − A and (B − A)/|A|
    when both are numbers (rel is None from A = 0); ``worse`` is None when
    the key has no direction or did not move."""

    key: str
    a: Any
    b: Any
    delta: Optional[float]
    rel: Optional[float]
    worse: Optional[bool]

    @property
    def changed(self) -> bool:
        if self.delta is not None:
            return not math.isclose(self.a, self.b, rel_tol=_SAME, abs_tol=0.0)
        return self.a != self.b

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def change(key: str, a: Any, b: Any) -> Change:
    na, nb = _number(a), _number(b)
    delta = rel = worse = None
    if na is not None and nb is not None:
        delta = nb - na
        rel = delta / abs(na) if na else None
        d = worse_direction(key)
        same = math.isclose(na, nb, rel_tol=_SAME, abs_tol=0.0)
        worse = None if d == 0 or same else (delta * d > 0)
    elif worse_direction(key) and (a is None and nb is not None or b is None and na is not None):
        # A measurement that vanished (a p99 over no finished requests) is worse;
        # one that appeared is better.
        worse = b is None
    return Change(key, a, b, delta, rel, worse)


def diff(a: Mapping[str, Any], b: Mapping[str, Any], *, include_unchanged: bool = False) -> list[Change]:
    """Changes between two results (nested or flat), in A's key order then
    B's new keys; unchanged keys and :data:`NOISE_KEYS` only when asked."""
    blocks_a: dict[str, Any] = {}
    blocks_b: dict[str, Any] = {}
    fa, fb = _flatten(a, "", blocks_a), _flatten(b, "", blocks_b)
    keys = list(fa) + [k for k in fb if k not in fa]
    out = []
    for k in keys:
        # A key that is a leaf in one file and a list or mapping in the other
        # has no leaf in that other: its block is what it holds there.
        c = change(k, fa[k] if k in fa else blocks_a.get(k), fb[k] if k in fb else blocks_b.get(k))
        if include_unchanged or (c.changed and k not in NOISE_KEYS):
            out.append(c)
    return out


def read_json_object(path: Path, what: str = "results.json") -> dict[str, Any]:
    """A JSON object from ``path``; every way it can fail is one LlmsimError."""
    from ..profiles.loader import read_structured

    if Path(path).suffix.lower() != ".json":
        raise LlmsimError(f"expected a {what} file (.json)", source=path)
    data = read_structured(Path(path), what=f"{what} file")
    if not isinstance(data, dict):
        raise LlmsimError(f"expected a JSON object (a {what}), got {type(data).__name__}", source=path)
    return data


def read_results(path: Path) -> dict[str, Any]:
    """A results file: llmsim's results.json or a ``vllm bench serve`` result
    (both count their ``completed`` requests); any other JSON object is
    refused, since comparing it would print differences of keys that mean nothing."""
    data = read_json_object(path)
    completed = data.get("completed")
    if "completed" not in data:
        raise LlmsimError("not a results file: no 'completed' key (expected the results.json `llmsim run -o DIR` "
                          "writes, or a `vllm bench serve --save-result` file)", source=path)
    if isinstance(completed, bool) or not isinstance(completed, int) or completed < 0:
        raise LlmsimError(f"expected a count of requests, got {completed!r}", source=path, key_path="completed")
    for key, v in flatten(data).items():
        # llmsim writes a figure it could not measure as null; vLLM's request_rate Infinity is "all at once"
        if isinstance(v, float) and not math.isfinite(v) and key != "request_rate":
            raise LlmsimError(f"expected a finite number or null, got {v!r}: a NaN or infinite figure compares "
                              "as neither better nor worse", source=path, key_path=key)
    return data
