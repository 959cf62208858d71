"""Whether a percentile target rests on enough samples to be a tail at all.

The p-th percentile of n samples has about (1 − p/100)·n of them above it.
Fewer than one, and numpy's interpolation returns a value between the two
slowest samples: a p99 of 30 requests is the slowest request's latency, not
an estimate of the 1 % tail, and another seed or a longer window can move
it past the target. A short ``llmsim run`` or a plan's small probes reach
this easily, so an SLO target that rests on so few samples is flagged
(``few_samples`` in its results entry) and said under the verdict, rather
than reported as if the tail had been measured. The verdict itself is left
as measured: the flag says how far to trust it.
"""
from __future__ import annotations

import json
import math
from typing import Any, Iterable, Mapping, Optional

__all__ = ["samples_needed", "few_samples", "few_samples_note", "row_few_samples_note"]


def samples_needed(percentile: float) -> Optional[int]:
    """The fewest samples that put at least one above the ``percentile``-th
    percentile (100 for a p99, 20 for a p95); None for p100 (the maximum, exact on any sample)."""
    above = 100.0 - float(percentile)
    if above <= 0.0:
        return None
    # rounded before the ceiling: 100 / (100 - 99.9) is 1000.0000000000001 in floating point
    return max(1, math.ceil(round(100.0 / above, 9)))


def few_samples(count: int, percentile: float) -> Optional[dict[str, int]]:
    """``{"samples": count, "needed": n}`` when ``count`` samples (at least one) are too few for the
    percentile to have one above it, else None (none at all is a target with nothing measured)."""
    needed = samples_needed(percentile)
    if needed is None or count <= 0 or count >= needed:
        return None
    return {"samples": int(count), "needed": needed}


def few_samples_note(blocks: Iterable[tuple[str, Mapping[str, Any]]]) -> Optional[str]:
    """One sentence naming every flagged target of the SLO blocks (``metrics.verdict.slo_blocks``) as
    the verdict names it ("paid: TTFT p99 (30 of the 100 a p99 needs)"); None when every target rests
    on enough samples."""
    from .verdict import owner    # verdict imports the results blocks, which import this module

    flagged = []
    for label, block in blocks:
        for target in (block.get("targets") or {}).values():
            few = target.get("few_samples")
            if few:
                pct = target["percentile"]
                name = f"p{int(pct)}" if int(pct) == pct else f"p{pct}"
                flagged.append(f"{owner(label, ': ')}{target['metric'].upper()} {name} "
                               f"({few['samples']:,} samples of the {few['needed']:,} a {name} needs)")
    if not flagged:
        return None
    return (f"{'; '.join(flagged)}: too few for one to lie above the percentile, so the value is about the "
            f"slowest sample's, not a measured tail; simulate more requests (workload.num_requests or "
            f"workload.duration_s)")


def row_few_samples_note(row: Mapping[str, Any]) -> Optional[str]:
    """:func:`few_samples_note` of a plan's or sweep's row (``slo_targets``: its SLO blocks as JSON text,
    written by ``planning.confidence.slo_targets_text``); None for a row without one (a failed point)."""
    text = row.get("slo_targets")
    return few_samples_note(json.loads(text)) if isinstance(text, str) else None
