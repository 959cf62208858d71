"""The scenario's ``cost`` block checked against the rest of the scenario.

How a run's bill extends to a month is a figure (:mod:`simulator.metrics.monthly`);
whether the block the user wrote can be read so (a method that fits the
workload's span, a day's shape to scale by) is the scenario's to say,
before anything is simulated.
"""
from __future__ import annotations

from pathlib import Path

from ..errors import LlmsimError
from ..metrics.monthly import DAY_S, MonthRule, day_shape

__all__ = ["month_rule"]


def month_rule(sc, source: str | Path | None = None) -> MonthRule:
    """``cost.monthly`` as the rule the bill is extended by, once what can be
    known wrong with it beside the workload is refused."""
    spec = sc.cost.monthly
    d = sc.workload.duration_s
    if spec.method == "day" and d is not None and d < DAY_S:
        raise LlmsimError(f"method day takes the window as a sample of whole days, but workload.duration_s is "
                          f"{d:g} s (< {DAY_S:g}): use peak_window with a daily profile, or window",
                          source=source, key_path="cost.monthly.method")
    if spec.method == "peak_window" and d is not None and d >= DAY_S:
        raise LlmsimError(f"peak_window scales a slice of a day to the whole day, but workload.duration_s is "
                          f"{d:g} s (a day or more): use method day (--set cost.monthly.method=day)",
                          source=source, key_path="cost.monthly.method")
    if spec.method == "peak_window":
        try:
            day_shape(spec, sc.workload)
        except ValueError as e:
            raise LlmsimError(str(e), source=source, key_path="cost.monthly.daily_profile") from None
    return MonthRule(spec, sc.workload)
