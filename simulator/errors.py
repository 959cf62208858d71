"""User-facing errors.

Bad input is the common case for a YAML-driven tool, so every problem a user
can cause is raised as :class:`LlmsimError` carrying the file and key path.
The CLI turns it into one line on stderr and exit code 2; nothing else is
allowed to escape as a traceback.
"""
from __future__ import annotations

import errno
import math
import re
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from .stack_names import stack_name

__all__ = ["LlmsimError", "KeyRefusal", "format_key_path", "from_validation_error", "error_loc", "user_loc",
           "os_reason", "first_few", "nearest", "near_names", "shortened", "set_flag", "unit_slip"]


class LlmsimError(Exception):
    """An error caused by the user's input, reported without a traceback."""

    exit_code = 2

    def __init__(self, message: str, *, source: str | Path | None = None, key_path: str | None = None):
        self.message = message
        self.source = str(source) if source is not None else None
        self.key_path = key_path
        super().__init__(self.render())

    def render(self) -> str:
        where = []
        if self.source:
            where.append(_printable(self.source, 300))
        if self.key_path:
            where.append(_printable(self.key_path, 300))
        prefix = ": ".join(where)
        message = "\n".join(_printable(line, 600) for line in self.message.split("\n"))
        return f"{prefix}: {message}" if prefix else message


class KeyRefusal(ValueError):
    """A model validator's refusal of one of its model's keys. Pydantic locates whatever a model
    validator raises at the model itself (``pools[0].engine``), so a check that reads other keys
    too (a release that needs ``kv_memory.cuda_graph_gib``) would have to name its key in the
    message, a second way of writing key paths; raised as this, the key joins the location
    (``pools[0].engine.kv_memory.cuda_graph_gib: ...``) as a field's own refusal does."""

    def __init__(self, key: str | tuple[str, ...], message: str):
        super().__init__(message)
        # a dotted text for keys that hold no dot; a tuple where a key does (a release number)
        self.key = tuple(key.split(".")) if isinstance(key, str) else key


def error_loc(error: dict) -> tuple:
    """A pydantic error's location, down to the key a :class:`KeyRefusal` names."""
    loc = tuple(error.get("loc", ()))
    raised = (error.get("ctx") or {}).get("error")
    return loc + raised.key if isinstance(raised, KeyRefusal) else loc


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]+")


def _escaped(m: re.Match) -> str:
    """A run of control characters as escapes: ``\\x00×117`` for one repeated, the first eight otherwise."""
    run = m.group(0)
    if len(run) > 1 and len(set(run)) == 1:
        return f"{run[0].encode('unicode_escape').decode()}×{len(run)}"
    return run[:8].encode("unicode_escape").decode() + ("…" if len(run) > 8 else "")


def _printable(text: str, limit: int) -> str:
    """A part of a message as one readable line: control characters (a NUL
    from a binary file, an escape sequence) shown escaped, and text past
    ``limit`` characters (a 10,000-character name) cut in the middle."""
    return shortened(_CONTROL.sub(_escaped, text), limit)


def first_few(items: Sequence[str], most: int) -> str:
    """``a, b, c and 7 more``: enough of a list to recognise it, on one line
    however long it is (the JSON or the folder holds the rest)."""
    shown = ", ".join(items[:most])
    return shown if len(items) <= most else f"{shown} and {len(items) - most} more"


def nearest(word: str, names: Sequence[str]) -> str:
    """`` (did you mean chat?)`` for the name nearest a mistyped one, "" when none is near: a name that
    addresses nothing is a slip of a letter more often than not, or the start of a longer one (``h100``
    for ``h100-pcie`` or ``h100-sxm``, which a letter's distance would answer with ``h200``)."""
    return did_you_mean(near_names(word, names))


def did_you_mean(near: Sequence[str]) -> str:
    """`` (did you mean a or b?)`` offering ``near``, "" for none: one wording for every slip's hint."""
    return f" (did you mean {' or '.join(near)}?)" if near else ""


def near_names(word: str, names: Sequence[str]) -> list[str]:
    """The names :func:`nearest` offers for ``word``: those it begins, if a few, else the one a letter's
    slip away, else none."""
    import difflib

    longer = [n for n in names if n.startswith(word) and n != word] if word else []
    if 0 < len(longer) <= 3:
        return longer
    return difflib.get_close_matches(word, list(names), n=1)


def os_reason(e: OSError) -> str:
    """Why the machine refused a read or write, in words a user acts on."""
    return {errno.ENOSPC: "no space left on the device", errno.EROFS: "the filesystem is read-only",
            errno.EACCES: "permission denied", errno.ENOTDIR: "a part of the path is a file, not a folder",
            errno.EEXIST: "a part of the path is a file, not a folder",
            errno.ENAMETOOLONG: "the name is too long for the filesystem",
            errno.EISDIR: "is a folder, not a file"}.get(e.errno, e.strerror or str(e))


def user_loc(loc: Iterable[Any], data: Any) -> list:
    """Drop location parts the user did not write (discriminated-union tags
    such as ``normal`` in ``input_tokens.normal.std``) by walking the data."""
    out, node = [], data
    for part in loc:
        if isinstance(node, dict):
            if part in node:
                out.append(part)
                node = node[part]
            elif isinstance(part, str) and any(isinstance(v, str) and v == part for v in node.values()):
                continue
            else:
                out.append(part)
                node = None
        elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
            out.append(part)
            node = node[part]
        elif node is not None and not isinstance(node, dict) and isinstance(part, str):
            continue    # a scalar or a list has no keys: the part names a union member tried on it
        else:
            out.append(part)
            node = None
    return out


def format_key_path(loc: Iterable[Any]) -> str:
    """Render a pydantic location tuple as ``pools[0].engine.block_size``."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            # pydantic puts union/tagged-union member names in the location;
            # they are not keys the user wrote.
            text = str(part)
            if text.startswith("function-") or text in {"tagged-union", "union"}:
                continue
            out += ("." if out else "") + text
    return out or "(top level)"


#: Longest echo of a refused value: a 400-digit number or a pasted page is named by its size, not printed.
_ECHO_CHARS = 60


def _shown(value: object) -> str:
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 3 * _ECHO_CHARS:
        # not repr: Python refuses to write an int of more than 4,300 digits
        digits = int(value.bit_length() * math.log10(2)) + 1
        return f"a {'negative ' if value < 0 else ''}number of about {digits:,} digits"
    return shortened(repr(value))


def shortened(text: str, limit: int = _ECHO_CHARS) -> str:
    """``text``, or its two ends and how much was cut between them where it is longer than ``limit`` (a
    value echoed in a message, a 10,000-character name)."""
    if len(text) <= limit:
        return text
    keep = limit // 2
    marker = f"…({len(text) - 2 * keep:,} characters)…"
    if len(marker) >= len(text) - 2 * keep:     # the note would be longer than what it stands for
        return text
    return f"{text[:keep]}{marker}{text[-keep:]}"


def set_flag(override: str) -> str:
    """A ``--set key=value`` as a message names where a value came from: a long value's middle cut, as a
    refused value's is, with room for the key beside it."""
    return f"--set {shortened(override, 80)}"


#: Where an unknown key's refusal sends the user for the keys a file takes, unless its model names its own
#: (``KEYS_SHOWN_BY``: ``llmsim schema`` prints a scenario's keys, not a GPU or backend profile's).
SCHEMA_COMMAND = "`llmsim schema`"


def from_validation_error(err: Any, source: str | Path | None, data: Any = None,
                          keys_at: Callable[[tuple], Sequence[str]] | None = None,
                          keys_shown_by: str = SCHEMA_COMMAND,
                          deeper_at: Callable[[tuple, str], str | None] | None = None) -> LlmsimError:
    """Turn a pydantic ValidationError into one readable LlmsimError.

    All problems are listed (a user fixing a scenario wants every typo at
    once), each as ``key.path: what was expected``. ``keys_at`` gives the keys
    the mapping at a path may hold, so that a misspelt key is answered with the
    nearest one; ``deeper_at`` the key of a mapping a level down that an unknown key names
    (``engine.weight_dtype`` for a pool's ``weight_dtype``), which answers it before the nearest.
    """
    by_path: dict[str, list[str]] = {}
    got: dict[str, str] = {}
    hints: dict[str, str] = {}
    errors = err.errors()
    locs = [error_loc(e) for e in errors]
    written_at = [user_loc(loc, data) if data is not None else list(loc) for loc in locs]
    # `{k:1}` without a space after the colon: the key k it meant is then also reported missing
    slipped = {(*w[:-1], str(w[-1]).partition(":")[0]) for e, w in zip(errors, written_at)
               if e.get("type") == "extra_forbidden" and w and ":" in str(w[-1])}
    for e, loc, written in zip(errors, locs, written_at):
        # a list left too short because one of its items was refused: that item's line says it
        if e.get("type") == "too_short" and any(len(o) > len(loc) and o[:len(loc)] == loc for o in locs):
            continue
        if e.get("type") == "missing" and tuple(written) in slipped:
            continue
        path = format_key_path(written)
        # a value the user wrote may hold a newline: kept on the problem's one line, escaped
        msg = _CONTROL.sub(_escaped, _plain(e, str(written[-1]) if written else ""))
        if e.get("type") == "extra_forbidden":
            key = str(written[-1]) if written else ""
            head, colon, value = key.partition(":")
            if colon and value and keys_at and head in keys_at(tuple(written[:-1])):
                # YAML reads `{host_gb:100}` as one key: a colon without a space after it separates nothing
                msg = f"unknown key: YAML needs a space after the colon ({head}: {value}, not {key})"
            else:
                keys = keys_at(tuple(written[:-1])) if keys_at and written else []
                near = nearest(key, keys)
                hint = near[2:-1] + " " if near else "check the spelling; "
                if (named := stack_name(key, keys)) is not None:    # a launch's name, not a slip of a letter
                    hint = f"{named[1]} is {named[0]} here; "
                elif deeper_at is not None and written and (deeper := deeper_at(tuple(written[:-1]), key)):
                    hint = f"did you mean {deeper}? "                 # written a level too high
                msg = f"unknown key ({hint}see {keys_shown_by})"
        elif "input" in e and e.get("type") not in ("missing",) and not isinstance(e["input"], (dict, list)) \
                and f"the text {e['input']!r}" not in msg and not msg.startswith("has no value"):
            got[path] = f" (got {_shown(e['input'])})"
        hints[path] = hints.get(path) or _near_choice(e)
        if msg not in by_path.setdefault(path, []):
            by_path[path].append(msg)
    # the members of a union each refuse the value: one line per key, "A, or b"
    lines = []
    for path, msgs in by_path.items():
        either = ", or ".join([msgs[0], *(m[:1].lower() + m[1:] for m in msgs[1:])])
        lines.append(f"{path}: {either}{got.get(path, '')}{hints[path]}")
    if len(lines) == 1:
        key, _, msg = lines[0].partition(": ")
        return LlmsimError(msg, source=source, key_path=key)
    return LlmsimError("invalid input:\n  " + "\n  ".join(lines), source=source)


#: What each pydantic type error expected, in a user's words.
_TYPE_WORDS = {"string_type": "a text", "int_type": "a whole number", "float_type": "a number",
               "bool_type": "true or false", "model_type": "a mapping of keys to values",
               "dict_type": "a mapping of keys to values", "model_attributes_type": "a mapping of keys to values",
               "list_type": "a list"}


#: ``1,000``, ``12,500.5``: a number with its thousands separated by commas.
_THOUSANDS = re.compile(r"\s*[-+]?\d{1,3}(?:,\d{3})+(?:\.\d+)?\s*")
#: ``1..8``: a plan's range, written where a list of values goes.
_RANGE_TEXT = re.compile(r"\s*(-?\d+)\s*\.\.\s*(-?\d+)\s*")
#: Pydantic's kinds of "not a mapping" (a model's, a dict's, a tagged union's whose input has no tag).
_MAPPING_TYPES = ("model_type", "dict_type", "model_attributes_type")
#: The keys whose value is a length or duration distribution (``output_tokens``, ``turns``, ``pause_s``):
#: a number written there is most often a length meant to be fixed. tests/test_bad_input.py holds every
#: scenario key matching this to a distribution.
_DISTRIBUTION_KEY = re.compile(r"(?:^|_)(?:tokens|turns|count|bursts|keystrokes)$|_s$")


#: A number written with its unit or a percent sign (``10s``, ``5 min``, ``90%``): the number and the rest.
_WITH_UNIT = re.compile(r"\s*([-+]?(?:\d[\d_]*\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*(\S.*?)\s*")

#: A price written with its currency's sign first (``$6``, ``€2.5/h``): the sign, the number and the rest.
_PRICE = re.compile(r"\s*([$€£])\s*([-+]?(?:\d[\d_]*\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*(.*?)\s*")


def _plain(e: dict, key: str = "") -> str:
    """One pydantic error in the words a user acts on: pydantic's own where they are plain, rewritten
    where they name a Python class (``instance of EngineConfig``), quote a tag's key as code or leave
    out what would fix the value (a unit written after a number, a percentage where a fraction goes)."""
    kind, msg, ctx, value = e.get("type"), e.get("msg", "invalid value"), e.get("ctx") or {}, e.get("input")
    if kind == "value_error":          # pydantic's "Value error, " before our validators' words
        return msg.removeprefix("Value error, ")
    if kind == "int_parsing_size":     # pydantic: "Unable to parse input string as an integer, ..."
        return "expected a whole number, and this one is past any integer llmsim takes"
    if value is None and "input" in e and kind in _TYPE_WORDS:      # `model:` with nothing after it
        return f"has no value (left empty, or null): expected {_TYPE_WORDS[kind]}"
    if isinstance(value, (list, dict)) and kind in _TYPE_WORDS and kind not in _MAPPING_TYPES:
        return f"expected {_TYPE_WORDS[kind]}, got a {'list' if isinstance(value, list) else 'mapping'}"
    if kind == "list_type" and isinstance(value, (str, int, float)) and not isinstance(value, bool):
        if isinstance(value, str) and (r := _RANGE_TEXT.fullmatch(value)) and 0 <= int(r[2]) - int(r[1]) < 32:
            listed = ", ".join(str(v) for v in range(int(r[1]), int(r[2]) + 1))
            return (f"expected a list, got the text {value!r}: LO..HI is a range only to `llmsim plan --vary`; "
                    f"here list the values ([{listed}])")
        one = shortened(value) if isinstance(value, str) else _shown(value)
        return f"expected a list, a single value written as a list of one ([{one}])"
    if kind in ("too_short", "too_long") and "actual_length" in ctx:     # pydantic: "... after validation, not 3"
        bound = ctx.get("min_length") if kind == "too_short" else ctx.get("max_length")
        things = "item" if bound == 1 else "items"
        most = "at least" if kind == "too_short" else "at most"
        return f"expected {most} {bound} {things}, got {ctx['actual_length']}"
    if kind in _MAPPING_TYPES:
        if isinstance(value, (int, float)) and not isinstance(value, bool) and _DISTRIBUTION_KEY.search(key):
            return (f"expected a distribution, a mapping with a `dist` key; a value that never varies is "
                    f"{{dist: fixed, value: {value}}}")
        return "expected a mapping of keys to values ({key: value, ...} or one 'key: value' per line)"
    if kind == "union_tag_invalid":
        tags = ", ".join(re.findall(r"'([^']*)'", str(ctx.get("expected_tags", ""))))
        return f"unknown {str(ctx.get('discriminator', 'type')).strip(chr(39))} {ctx.get('tag')!r} (valid: {tags})"
    if kind in ("int_parsing", "float_parsing") and isinstance(value, str) and (slip := unit_slip(value, key)):
        return f"expected {'a whole number' if kind == 'int_parsing' else 'a number'}, got the text {value!r}: {slip}"
    if kind in ("less_than_equal", "less_than") and 1 in (ctx.get("le"), ctx.get("lt")) \
            and isinstance(value, (int, float)) and not isinstance(value, bool) and 1 < value <= 100:
        return f"{msg}, a fraction: {value / 100:g} for {value:g}%"
    return msg


#: The units a key's name ends in, and what one of each unit a user may write after a number is in it.
#: Longest suffix first: ``rate_per_s`` is a rate, not a time, and ``link_gb_s`` neither.
_KEY_UNITS: tuple[tuple[str, str, dict[str, float]], ...] = (
    ("_gb_s", "in gigabytes per second", {"gb/s": 1.0}),
    ("_tb_s", "in terabytes per second", {"tb/s": 1.0}),
    ("_per_s", "as a rate per second", {"/s": 1.0, "/sec": 1.0, "per s": 1.0, "per second": 1.0, "rps": 1.0, "qps": 1.0,
                              "req/s": 1.0, "/min": 1 / 60, "per minute": 1 / 60, "rpm": 1 / 60, "req/min": 1 / 60,
                              "/h": 1 / 3600, "/hr": 1 / 3600, "/hour": 1 / 3600, "per hour": 1 / 3600}),
    ("_ms", "in milliseconds", {"ms": 1.0, "s": 1e3, "sec": 1e3, "us": 1e-3, "µs": 1e-3}),
    ("_us", "in microseconds", {"us": 1.0, "µs": 1.0, "ms": 1e3, "ns": 1e-3}),
    ("_s", "in seconds", {"s": 1.0, "sec": 1.0, "secs": 1.0, "seconds": 1.0, "ms": 1e-3, "min": 60.0, "mins": 60.0,
                       "minutes": 60.0, "h": 3600.0, "hr": 3600.0, "hours": 3600.0}),
    ("_gib", "in GiB", {"gib": 1.0, "gb": 1e9 / 2 ** 30}),
    ("_gb", "in gigabytes", {"gb": 1.0, "tb": 1e3, "mb": 1e-3, "gib": 2 ** 30 / 1e9}),
    # a count written as ``30k``: the whole number, not 30 tokens
    ("tokens", "as a whole number of tokens", {"k": 1e3, "m": 1e6, "tokens": 1.0, "tok": 1.0}),
)


def unit_slip(value: str, key: str) -> str | None:
    """What to write for a number given with a unit, a percent sign or a currency sign (``2s``, ``90%``,
    ``$6``) at ``key``, in the unit the key's name gives; None for text that is no such number."""
    if _THOUSANDS.fullmatch(value):
        return f"write the number without its thousands separators ({value.strip().replace(',', '')})"
    if "," in value:
        return ("one value goes here; several are tried by `llmsim plan --vary key=a,b` or a sweep's grid, "
                "one run each")
    if m := _WITH_UNIT.fullmatch(value):
        if m.group(2) == "%":
            return f"a percentage is written as a fraction ({_fraction(m.group(1))} for {m.group(1)}%)"
        return _in_key_unit(m.group(1), m.group(2), key)
    if p := _PRICE.fullmatch(value):
        return _in_key_unit(p.group(2), p.group(1) + p.group(3), key)
    return None


def in_key_unit(value: str, key: str) -> str | None:
    """The number ``value`` written with a unit (``30k``, ``2 min``) stands for in ``key``'s unit, as
    :func:`unit_slip` converts it; None where it is no such number or its unit is not the key's."""
    m = _WITH_UNIT.fullmatch(value)
    said = _in_key_unit(m.group(1), m.group(2), key) if m and m.group(2) != "%" else ""
    return said.rpartition("): ")[2] if "): " in said else None


def _in_key_unit(number: str, unit: str, key: str) -> str:
    """The number to write for ``30/min`` or ``2 min`` in a key whose name gives another unit: the number
    alone would be read in the key's unit (30 requests a second for 30 a minute), so the hint converts
    it, or names the key's unit when it cannot."""
    dollars = ("", "in US dollars", {"$": 1.0, "usd": 1.0, "us$": 1.0})
    for suffix, name, factors in ((dollars,) if "usd" in key.split("_") else _KEY_UNITS):
        if key.endswith(suffix):
            factor = factors.get(unit.lower())
            if factor is None:
                return f"write the number alone, {name} (the key's name, {key}, gives its unit)"
            try:
                x = float(number.replace('_', '')) * factor
                value = f"{x:.0f}" if x.is_integer() else f"{x:.6g}"
            except ValueError:
                value = number
            return f"write the number alone, {name} (the key's name, {key}, gives its unit): {value}"
    return (f"write the number alone ({number}); the key's name gives its unit (_s seconds, _ms milliseconds, "
            f"_gb gigabytes)")


def _fraction(percent: str) -> str:
    try:
        return f"{float(percent.replace('_', '')) / 100:g}"
    except ValueError:
        return "0.9"


def _near_choice(e: dict) -> str:
    """`` (did you mean fixed?)`` for a name that is none of the choices a pydantic error lists."""
    kind, ctx, value = e.get("type"), e.get("ctx") or {}, e.get("input")
    if kind == "union_tag_invalid":
        return nearest(str(ctx.get("tag")), re.findall(r"'([^']*)'", str(ctx.get("expected_tags", ""))))
    if not isinstance(value, str):
        return ""
    if kind in ("literal_error", "enum"):
        return nearest(value, re.findall(r"'([^']*)'", str(ctx.get("expected", ""))))
    if isinstance(ctx.get("valid"), str):      # llmsim's registries: unknown_router, unknown_arrival
        return nearest(value, ctx["valid"].split(", "))
    return ""
