"""Writing a ``calibration:`` block into a hardware profile YAML in place.

The profiles are hand-written, commented files; a YAML round trip would
drop the comments and reorder keys. So the calibration is rendered as text
and only its block is replaced: from our marker comment (or a bare
top-level ``calibration:`` key) to the next top-level key or the end of the
file. Everything else in the file stays byte for byte.
"""
from __future__ import annotations

import json
import math
import re
from pathlib import Path

import yaml

from ..atomic_write import write_atomic
from ..errors import LlmsimError, os_reason
from ..profiles.hardware import (FITTED_ETAS, FITTED_FAMILIES, STACK_PARAMS, AllReduceParams, Calibration,
                                 HardwareProfile, MoeParams, RooflineParams)

MARKER = "# --- calibration: written by `llmsim calibrate` (see docs/calibration.md); edits below are overwritten ---"

_TOP_KEY = re.compile(r"^[A-Za-z_][\w-]*\s*:")


def _num(v: float | int) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int) and not isinstance(v, bool):
        return str(v)
    if math.isinf(v):
        return ".inf"
    if float(v).is_integer() and abs(v) < 1e15:
        return str(int(v))
    text = repr(float(v))
    mantissa, e, exp = text.partition("e")
    # YAML 1.1 (PyYAML) reads "1e-05" as a string; "1.0e-05" is a float.
    return f"{mantissa}.0e{exp}" if e and "." not in mantissa else text


def _flow(d: dict) -> str:
    parts = []
    for k, v in d.items():
        if isinstance(v, (list, tuple)):
            parts.append(f"{k}: [{', '.join(_num(x) for x in v)}]")
        else:
            parts.append(f"{k}: {_flow(v) if isinstance(v, dict) else _num(v)}")
    return "{" + ", ".join(parts) + "}"


def _params(p: RooflineParams | MoeParams | AllReduceParams) -> str:
    """Non-default fields only (plus the two η's), so each line reads as what was fitted."""
    data = p.model_dump(exclude_defaults=True)
    if isinstance(p, RooflineParams):
        data = {**{k: getattr(p, k) for k in FITTED_ETAS}, **data}
    return _flow(data) if data else "{}"


def _str(s: str) -> str:
    return json.dumps(s, ensure_ascii=False)


def _table(name: str, table: dict, indent: str) -> list[str]:
    """A per-format parameter table's lines (none when it is empty)."""
    if not table:
        return []
    return [f"{indent}{name}:", *(f"{indent}  {k}: {_params(p)}" for k, p in table.items())]


def render(cal: Calibration) -> str:
    """The block as YAML text, starting with the marker line."""
    lines = [MARKER, "calibration:", f"  status: {cal.status}"]
    for key in ("source", "fitted_on", "transferred_from", "rule"):
        v = getattr(cal, key)
        if v:
            lines.append(f"  {key}: {_str(v)}")
    for fam in FITTED_FAMILIES:
        lines.append(f"  {fam}: {_params(getattr(cal, fam))}")
    lines.append(f"  iteration_overhead_ms: {_num(cal.iteration_overhead_ms)}")
    for fam in ("moe", "moe_ep", "mla_projection"):
        lines += _table(fam, getattr(cal, fam), "  ")
    for fam in ("mla_prefill", "mla_decode"):
        if getattr(cal, fam) != RooflineParams():
            lines.append(f"  {fam}: {_params(getattr(cal, fam))}")
    if cal.stacks:
        lines.append("  stacks:")
        for stack, over in cal.stacks.items():
            lines.append(f"    {stack}:")
            if over.rule:
                lines.append(f"      rule: {_str(over.rule)}")
            for fam in STACK_PARAMS:
                p = getattr(over, fam)
                if p is not None:
                    lines.append(f"      {fam}: {_params(p)}")
            if over.fp8_gemm_efficiency is not None:
                lines.append(f"      fp8_gemm_efficiency: {_num(over.fp8_gemm_efficiency)}")
            for fam in ("moe", "moe_ep"):
                lines += _table(fam, getattr(over, fam), "      ")
            if over.error:
                lines.append("      error:")
                lines.extend(f"        {fam}: {_flow(e.model_dump())}" for fam, e in over.error.items())
    if cal.error:
        lines.append("  error:")
        for fam, e in cal.error.items():
            lines.append(f"    {fam}: {_flow(e.model_dump())}")
    else:
        lines.append("  error: {}")
    return "\n".join(lines) + "\n"


def replace_block(text: str, block: str) -> str:
    """``text`` with its calibration block (if any) replaced by ``block``."""
    lines = text.splitlines(keepends=True)
    start = next((i for i, ln in enumerate(lines) if ln.rstrip("\n") == MARKER), None)
    if start is None:
        start = next((i for i, ln in enumerate(lines) if ln.startswith("calibration:")), None)
    if start is None:
        body = text if text.endswith("\n") or not text else text + "\n"
        return body + block
    end = len(lines)
    for j in range(start + 1, len(lines)):
        ln = lines[j]
        if _TOP_KEY.match(ln) and not ln.startswith("calibration:"):
            end = j
            break
    # Keep blank lines and comments that precede the next key with that key.
    while end > start + 1 and end < len(lines) and (not lines[end - 1].strip() or lines[end - 1].startswith("#")):
        end -= 1
    return "".join(lines[:start]) + block + "".join(lines[end:])


FP8_KEY = "fp8_gemm_efficiency"


def replace_fp8(text: str, efficiency: float, note: str) -> str:
    """``text`` with its top-level fp8_gemm_efficiency line set (added before
    ``price:`` when absent); the rest byte for byte. The old line's comment
    goes with it, continuation lines included: the note replaces it."""
    line = f"{FP8_KEY}: {_num(efficiency)}  # {note}\n"
    old = rf"^{FP8_KEY}:.*\n(?:[ \t]+#.*\n)*"
    if re.search(old, text, flags=re.M):
        return re.sub(old, lambda _m: line, text, count=1, flags=re.M)
    return re.sub(r"^(price:)", lambda m: line + m.group(1), text, count=1, flags=re.M)


def rendered_profile(path: Path, cal: Calibration, fp8: tuple[float, str] | None = None) -> str | None:
    """The text of ``path`` with its block replaced (and, given ``fp8`` = (efficiency, note), its
    fp8_gemm_efficiency line); None if that is the file as it is. The new text is parsed back and
    must give exactly ``cal``, so nothing is written that does not read back."""
    old = path.read_text()
    new = replace_block(old, render(cal))
    if fp8 is not None:
        new = replace_fp8(new, *fp8)
    data = yaml.safe_load(new)
    data.setdefault("name", path.stem)
    prof = HardwareProfile.model_validate(data)
    got = prof.calibration
    if fp8 is not None and prof.fp8_gemm_efficiency != fp8[0]:
        raise LlmsimError("internal error: the fp8_gemm_efficiency line does not read back", source=path)
    if got != cal:
        raise LlmsimError("internal error: the rendered calibration block does not read back identically",
                          source=path)
    return None if new == old else new


def replace_text(path: Path, text: str) -> None:
    """``path`` rewritten whole or not at all, keeping its mode, through a symbolic link to the file it
    names (a profile shared by a link stays shared)."""
    target = path.resolve()
    mode = target.stat().st_mode & 0o7777
    write_atomic(target, lambda tmp: tmp.write_text(text), mode=mode)


def write_profiles(texts: dict[Path, str]) -> None:
    """Write every rendered profile, or none: a write that fails (a full disk, a read-only file) puts
    back the ones already written, so a calibration is never half applied."""
    try:
        olds = {path: path.read_text() for path in texts}
    except OSError as e:
        raise LlmsimError(f"cannot read ({os_reason(e)})", source=getattr(e, "filename", None)) from None
    done: list[tuple[Path, str]] = []
    try:
        for path, text in texts.items():
            replace_text(path, text)
            done.append((path, olds[path]))
    except LlmsimError:
        for path, old in reversed(done):
            replace_text(path, old)
        raise
