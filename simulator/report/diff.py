"""Two results side by side: dotted keys, which way is worse, and what changed.

results.json is nested (``llmsim.cost.usd_per_request``); comparing runs,
and naming what CI tracks, wants one flat namespace. List items with a
``name`` are keyed by it, as ``--set`` addresses them
(``llmsim.cost.pools.main.usd``), so a key survives reordering of pools.

Whether a move is bad depends on the quantity, and a reader scanning a diff
of 200 keys needs the bad ones marked. Every key results.json declares has
a unit (:func:`simulator.fields.declared_results`), and most units settle
it: money, GPUs, latency, power, energy and emissions are worse up; work
done per second or per GPU is worse down; a setting, a price given as an
input and a size have no direction. Counts, fractions, yes/no verdicts and
durations in seconds mean what their name says (failed requests up is bad,
completed down is), and a few keys whose unit reads as a result repeat an
input (an SLO's target in ms, the GPU profile's board power in W). Keys no
declaration names (a ``vllm bench serve`` file's own, an older llmsim's) are
judged by their name alone.
"""
from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping, Optional

from ..errors import LlmsimError
from ..fields import AS_GIVEN, Field, Fields, declared_results, lookup
from ..fields import flatten as declared_keys

__all__ = ["flatten", "worse_direction", "is_verdict", "Change", "change", "diff", "read_json_object",
           "read_results", "misshapen", "NOISE_KEYS", "UNIT_DIRECTION", "NO_DIRECTION_UNITS", "NAMED_UNITS",
           "BY_KEY_NAME"]

#: Relative differences below this are float noise (a sum taken in another order), not changes.
_SAME = 1e-9

#: Keys that differ between two runs of the same scenario on the same code
#: (they measure the machine, not the fleet); hidden unless asked for. Only
#: results.json files of older llmsim versions hold them (they are in run.json now).
NOISE_KEYS = frozenset({"llmsim.wall_time_s", "llmsim.sim_requests_per_wall_s"})

#: Units that settle the direction alone: +1 a rise is bad, -1 a fall is.
UNIT_DIRECTION: Mapping[str, int] = {
    # what the fleet costs, and what it is billed by
    "USD": 1, "USD/month": 1, "USD/h": 1, "USD/day": 1, "USD/Mtok": 1, "GPUs": 1, "GPU-h": 1, "replica-s": 1,
    "ms": 1,                                       # latency
    "W": 1, "kW": 1, "kWh": 1, "kWh/month": 1, "J/token": 1, "kg CO2e": 1, "kg CO2e/month": 1,
    # work done, per second and per GPU
    "req/s": -1, "tok/s": -1, "sessions/GPU": -1, "req/GPU-s": -1,
}
#: Units without a direction: inputs (a setting as written, a price or a
#: grid's intensity the scenario or a profile gives), sizes, shapes and labels.
NO_DIRECTION_UNITS = frozenset({
    "setting", "as given", "as the metric", "USD/GPU-h", "USD/kWh", "g CO2e/kWh", "percent", "ratio", "int",
    "text", "object", "list", "[tokens, tokens]", "[s, GPUs]", "tokens", "sessions", "sequences", "GB", "bytes",
    "ranks", "stages", "h", "GB/s",
})
#: Units whose keys mean what their name says: a count of failed requests
#: and one of completed requests go opposite ways (:data:`_WORSE_UP`, :data:`_WORSE_DOWN`).
NAMED_UNITS = frozenset({"count", "fraction", "bool", "requests", "blocks", "s"})
#: A figure's interval ends and spread over seeds: the figure's own direction.
_AS_THE_FIGURE = "as the figure"

#: Declared keys whose unit would mislead: they repeat an input (an SLO's
#: targets and thresholds, a replica's shape, the GPU profile's power, the
#: load offered, a hosted API's prices for the same tokens, which rise with
#: the tokens served), or their name says more than their unit.
BY_KEY_NAME: Mapping[str, int] = {
    "target_ms": 0, "thresholds_ms": 0, "ttft_slo_ms": 0,
    "tp": 0, "ep": 0, "gpus_per_replica": 0,
    "latency_ms": 0,                               # a disaggregated pair's link, as set
    "idle_w": 0, "tdp_w": 0,
    "offered_rps": 0,
    "window_usd_without_caching": 0, "window_usd_with_caching": 0,
    "monthly_usd_without_caching": 0, "monthly_usd_with_caching": 0,
    "std": 0,                                      # a spread over seeds is neither
    "queue_growth_rps": 1,                         # a queue growing faster
}

_WORSE_UP = re.compile(r"(^|_)(failed|rejected|cancelled|pending|preemptions|shed|unfinished|queued|queue_depth|"
                       r"evicted|dropped|rate_limited|stranded|under_provisioned|overloaded|drain)($|_)")
_WORSE_DOWN = re.compile(r"(^|_)(completed|finished|served|good_requests|good_fraction|attainment|hit_rate|"
                         r"met)($|_)")
# Undeclared keys, by name alone: latencies end in _ms, except the settings
# written in ms (an SLO's target and per-request thresholds).
_UNDECLARED_UP = re.compile(r"(^|_)(usd|cost|gpus|gpu_hours)($|_)")
_UNDECLARED_DOWN = re.compile(r"(^|_)(throughput|goodput)($|_)")
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
    """+1 when a rise is bad, -1 when a fall is bad, 0 when neither is: what
    ``compare`` marks worse or better and ``check`` fails or passes a move on."""
    return _direction(key, _declared())


def is_verdict(key: str) -> bool:
    """A yes/no with a direction (``slo.met``, ``llmsim.load.overloaded``):
    true and false are its figures, where other ranked keys want numbers."""
    which = _declared()
    f = None if which is None else lookup(key, _tables[which][0])[0]
    return (f.unit == "bool" if f is not None else key.rpartition(".")[2] == "met") and _direction(key, which) != 0


#: Per set of declarations (by id; the set is kept alive here): each declared
#: key's direction, None for the figure's it stands beside, decided once.
_tables: dict[int, tuple[Fields, dict[int, Optional[int]]]] = {}


def _declared() -> Optional[int]:
    """results.json's declarations, named by whoever started llmsim (the
    command line, the notebook helpers); None for a library caller that
    named none, whose keys are then judged by name alone."""
    fields = declared_results()
    if fields is None:
        return None
    if id(fields) not in _tables:
        _tables[id(fields)] = (fields, {id(f): _decide(path, f) for path, f in declared_keys(fields)})
    return id(fields)


def _name(path: str) -> str:
    """A declared key's own name: ``<metric>`` under ``thresholds_ms`` is a threshold."""
    names = [p for p in path.replace("[]", "").split(".") if not (p.startswith("<") and p.endswith(">"))]
    return names[-1] if names else ""


def _decide(path: str, f: Field) -> Optional[int]:
    if f.keys is not None:
        return 0            # a block: its figures have directions, not the block
    name = _name(path)
    if name in BY_KEY_NAME:
        return BY_KEY_NAME[name]
    unit = f.unit[len("list of "):] if f.unit.startswith("list of ") else f.unit    # a list's items
    if unit == _AS_THE_FIGURE:
        return None
    if unit in UNIT_DIRECTION:
        return UNIT_DIRECTION[unit]
    if unit in NAMED_UNITS:
        return _by_name(name)
    return 0


def _by_name(name: str) -> int:
    # down first: ttft_attainment_under_provisioned is an attainment
    if _WORSE_DOWN.search(name):
        return -1
    return 1 if _WORSE_UP.search(name) else 0


@lru_cache(maxsize=1 << 14)
def _direction(key: str, which: Optional[int]) -> int:
    if which is None:
        return _undeclared(key)
    fields, table = _tables[which]
    f = lookup(key, fields)[0]
    parts = key.split(".")
    if f is None:
        return _undeclared(key)
    if parts[-1].isdigit() and f.keys is None and not f.unit.startswith("list"):
        n = len(parts)
        while n and parts[n - 1].isdigit():
            n -= 1
        if lookup(".".join(parts[:n]), fields)[0] is f:
            return 0        # p99_ttft_ms.0: an item of a figure this file holds as a list, not the figure
    d = table.get(id(f), 0)
    if d is None:           # llmsim.intervals.p99_ttft_ms.hi: as p99_ttft_ms
        return _direction(parts[-2], which) if len(parts) > 1 else 0
    return d


def _undeclared(key: str) -> int:
    leaf = key.rpartition(".")[2]
    if leaf.endswith("_ms") and not _SETTING_MS.search(key):
        return 1
    if _UNDECLARED_DOWN.search(leaf):
        return -1
    if _UNDECLARED_UP.search(leaf):
        return 1
    return _by_name(leaf)


def _number(v: Any) -> Optional[float]:
    """Numbers and booleans (``slo.met``) as floats; anything else None."""
    if isinstance(v, bool):
        return float(v)
    if isinstance(v, (int, float)) and math.isfinite(v):
        return float(v)
    return None


def _moved(a: float, b: float, rel: Optional[float], min_change: float) -> bool:
    if math.isclose(a, b, rel_tol=_SAME, abs_tol=0.0):
        return False
    return rel is None or abs(rel) >= min_change      # from zero: any move is news


@dataclass(frozen=True)
class Change:
    """One key of two results; ``delta``/``rel`` are B − A and (B − A)/|A|
    when both are numbers (rel is None from A = 0); ``worse`` is None when
    the key has no direction or did not move. A relative move under
    ``min_change`` counts as none: a figure that shows as "0.0 %" is not news.
    ``only_in`` is ``"a"`` or ``"b"`` for a key one file holds and the other
    does not hold at all (its ``b`` or ``a`` is then None): files of
    different kinds (llmsim's and ``vllm bench serve``'s) share some keys
    only, and a key one of them never writes has not moved either way."""

    key: str
    a: Any
    b: Any
    delta: Optional[float]
    rel: Optional[float]
    worse: Optional[bool]
    min_change: float = 0.0
    only_in: Optional[str] = None

    @property
    def changed(self) -> bool:
        if self.only_in is not None:
            return True
        if self.delta is not None:
            return _moved(self.a, self.b, self.rel, self.min_change)
        return self.a != self.b

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        del out["min_change"]       # the same for every key: said once, beside them
        if self.only_in is None:    # a key both files hold: the shape every reader of the JSON knows
            del out["only_in"]
        return out


def change(key: str, a: Any, b: Any, min_change: float = 0.0, only_in: Optional[str] = None) -> Change:
    """How ``key`` moved from ``a`` to ``b``; ``min_change`` is the relative
    move (0.0005 for 0.05 %) below which it counts as unchanged. ``only_in``
    (``"a"`` or ``"b"``): the other file lacks the key, so it did not move."""
    if only_in is not None:
        if only_in not in ("a", "b"):
            raise ValueError(f"only_in must be 'a' or 'b', got {only_in!r}")
        return Change(key, a, b, None, None, None, min_change, only_in)
    na, nb = _number(a), _number(b)
    delta = rel = worse = None
    if na is not None and nb is not None:
        delta = nb - na
        rel = delta / abs(na) if na else None
        d = worse_direction(key)
        worse = None if d == 0 or not _moved(na, nb, rel, min_change) else (delta * d > 0)
        if isinstance(a, bool) or isinstance(b, bool):      # a verdict turns, it does not move by −1 (−100 %)
            delta = rel = None
    elif worse_direction(key) and (a is None and nb is not None or b is None and na is not None):
        # A measurement that vanished (a p99 over no finished requests) is worse;
        # one that appeared is better.
        worse = b is None
    return Change(key, a, b, delta, rel, worse, min_change)


def diff(a: Mapping[str, Any], b: Mapping[str, Any], *, include_unchanged: bool = False,
         min_change: float = 0.0) -> list[Change]:
    """Changes between two results (nested or flat), in A's key order then
    B's new keys; unchanged keys (moved by less than ``min_change``, relative)
    and :data:`NOISE_KEYS` only when asked."""
    if not (math.isfinite(min_change) and min_change >= 0):
        raise ValueError(f"min_change must be a finite relative move >= 0, got {min_change!r}")
    blocks_a: dict[str, Any] = {}
    blocks_b: dict[str, Any] = {}
    fa, fb = _flatten(a, "", blocks_a), _flatten(b, "", blocks_b)
    keys = list(fa) + [k for k in fb if k not in fa]
    out = []
    for k in keys:
        # A key that is a leaf in one file and a list or mapping in the other
        # has no leaf in that other: its block is what it holds there.
        only_in = "b" if _lacks(k, fa, blocks_a) else "a" if _lacks(k, fb, blocks_b) else None
        c = change(k, fa[k] if k in fa else blocks_a.get(k), fb[k] if k in fb else blocks_b.get(k), min_change,
                   only_in)
        if include_unchanged or (c.changed and k not in NOISE_KEYS):
            out.append(c)
    return out


def _lacks(key: str, leaves: Mapping[str, Any], blocks: Mapping[str, Any]) -> bool:
    """Whether a file (its flattened ``leaves`` and opened ``blocks``) holds
    nothing at ``key``: neither the key, nor a figure where the key's block
    would be (``p99_ttft_ms`` a number where the other file's
    ``p99_ttft_ms.0`` sits: that pair is shown at ``p99_ttft_ms``, as a figure
    beside a block). A null where the block would be holds nothing
    (``llmsim.classes`` of a run without classes: its classes' SLO verdicts
    are another run's alone, not verdicts that vanished)."""
    if key in leaves or key in blocks:
        return False
    parts = key.split(".")
    return not any(leaves.get(".".join(parts[:i])) is not None for i in range(1, len(parts)))


def misshapen(results: Mapping[str, Any]) -> Optional[tuple[str, str]]:
    """The first key of ``results`` whose value has a shape its declaration
    rules out where a comparison would misjudge it, as (key, what was
    expected and found); None for a file without one, or where nothing
    declared the keys (a library caller's). A declared block that is not
    one (``"llmsim": [1]``) would have every figure under it read as
    missing; a ranked figure held as a list or an object (``p99_ttft_ms:
    [190, 210]``) would be passed over unranked, as text there would be
    (:func:`simulator.cli.compare.read_compared` refuses both alike).
    Unranked keys, and a setting repeated as given, may hold anything."""
    which = _declared()
    if which is None:
        return None
    fields = _tables[which][0]
    blocks: dict[str, Any] = {}
    leaves = _flatten(results, "", blocks)
    # a block is opened before its keys: its own shape is judged before theirs
    for key, v in (*blocks.items(), *leaves.items()):
        f = lookup(key, fields)[0]
        if f is None or v is None:
            continue
        parent, _, _ = key.rpartition(".")
        if parent and lookup(parent, fields)[0] is f:
            continue        # an item of a list, or a key inside a setting as given: its parent's shape holds it
        if f.keys is not None:
            listed = f.unit.startswith("list")
            if not isinstance(v, list if listed else Mapping):
                return key, (f"expected {'a list of objects' if listed else 'an object'} (a block of results), "
                             f"got {_shape(v)}: each key under it would compare as missing")
        elif isinstance(v, (list, Mapping)) and not f.unit.startswith(("list", "[")) and f.unit != AS_GIVEN \
                and f.unit != "setting" and worse_direction(key):
            return key, ranked_refusal(key, _shape(v))
    return None


def ranked_refusal(key: str, got: str) -> str:
    """Why a key compare ranks holds ``got`` (a text, a list): what it takes instead, said one way for a
    value of the wrong type and one of the wrong shape."""
    want = "true, false or null (a verdict)" if is_verdict(key) else "a finite number or null (a figure)"
    return f"expected {want}, got {got}: compare ranks this key better or worse"


def _shape(v: Any) -> str:
    if isinstance(v, Mapping):
        return f"an object of {len(v)} key(s)" if v else "an empty object"
    if isinstance(v, list):
        return f"a list of {len(v)}" if v else "an empty list"
    return repr(v)


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
