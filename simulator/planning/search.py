"""Searches over one monotone axis, written as generators so many can run at once.

A search yields the value it wants judged and is sent back whether that
value passes; it returns its answer. Written this way, the driver (not the
search) decides how to evaluate: :func:`solve` asks a plain predicate, and
:func:`drive_all` advances many searches in rounds, so the plan's
combinations and seeds are simulated side by side on the executor.

Both searches assume monotonicity: more replicas never breaks an SLO that
fewer replicas met, and a lower request rate never breaks one a higher rate
met. Simulated latencies are noisy (one seed is one sample of traffic), so
near the boundary this can fail by a step; the plan's ``--seeds N``
demands that all N seeds pass, which makes the answer conservative.
"""
from __future__ import annotations

import math
from typing import Callable, Generator, Hashable, Mapping, Optional, TypeVar

__all__ = ["Search", "smallest_passing", "largest_passing", "solve", "drive_all"]

V = TypeVar("V")
R = TypeVar("R")
K = TypeVar("K", bound=Hashable)

Search = Generator[V, bool, R]


def smallest_passing(lo: int, hi: int) -> Search[int, Optional[int]]:
    """The smallest integer in [lo, hi] that passes, or None if hi fails.

    Galloping up from lo (lo, lo+1, lo+3, lo+7, ...) and then bisecting,
    rather than bisecting [lo, hi] from the middle: a fleet's simulation
    costs grow with its size, and the answer usually sits far below a
    generous upper bound, so probing 1..256 costs ~2·log2(answer) small
    runs instead of starting with 128 and 256 replicas. The largest value
    is probed only when everything below it failed, which also yields the
    run that says why the range is infeasible.
    """
    fail = lo - 1  # largest value known to fail
    step = 1
    probe = lo
    while True:
        probe = min(probe, hi)
        if (yield probe):
            break
        fail = probe
        if probe == hi:
            return None
        probe = fail + step
        step *= 2
    ok = probe
    while ok - fail > 1:
        mid = (fail + ok) // 2
        if (yield mid):
            ok = mid
        else:
            fail = mid
    return ok


def most_probes_smallest(lo: int, hi: int) -> int:
    """The most probes :func:`smallest_passing` makes over [lo, hi]: a
    gallop to hi, then a bisection of the last step."""
    steps = math.ceil(math.log2(hi - lo + 1)) if hi > lo else 0
    return 2 * steps + 1


def most_probes_largest(rel_tol: float = 0.02, max_doublings: int = 12) -> int:
    """The most probes :func:`largest_passing` makes: the start, the
    doublings, then a geometric bisection of one doubling to ``rel_tol``."""
    return 1 + max_doublings + math.ceil(math.log2(math.log(2) / math.log(1 + rel_tol))) + 1


def largest_passing(start: float, rel_tol: float = 0.02, max_doublings: int = 12,
                    digits: int = 4) -> Search[float, Optional[float]]:
    """The largest positive value that passes, to within ``rel_tol``; None
    if even ``start / 2**max_doublings`` fails, and that bound (the largest
    value probed) if even ``start * 2**max_doublings`` passes.

    Doubles (or halves) from ``start`` until the answer is bracketed, then
    bisects geometrically: a rate's scale is unknown, so relative precision
    is what matters. Probes are rounded to ``digits`` significant digits so
    they read well and repeat exactly across runs (the resume key).
    """
    def rounded(x: float) -> float:
        return float(f"{x:.{digits}g}")

    start = rounded(start)
    passed = yield start
    good: Optional[float] = start if passed else None
    bad: Optional[float] = None if passed else start
    for _ in range(max_doublings):
        if good is not None and bad is not None:
            break
        probe = rounded(good * 2 if good is not None else bad / 2)
        if (yield probe):
            good = probe
        else:
            bad = probe
    if good is None:
        return None
    while bad is not None and bad / good > 1 + rel_tol:
        mid = rounded(math.sqrt(good * bad))
        if mid in (good, bad):
            break
        if (yield mid):
            good = mid
        else:
            bad = mid
    return good


def solve(search: Search[V, R], passes: Callable[[V], bool]) -> R:
    """Run one search against a predicate."""
    return drive_all({0: search}, lambda probes: {k: passes(v) for k, v in probes.items()})[0]


def drive_all(searches: Mapping[K, Search[V, R]], judge: Callable[[dict[K, V]], Mapping[K, bool]]) -> dict[K, R]:
    """Advance every search in rounds: each round, ``judge`` gets the value
    each unfinished search wants judged and returns a verdict for each."""
    answers: dict[K, R] = {}
    pending: dict[K, V] = {}

    def advance(k: K, step: Callable[[], V]) -> None:
        try:
            pending[k] = step()
        except StopIteration as stop:
            pending.pop(k, None)
            answers[k] = stop.value

    for k, s in searches.items():
        advance(k, s.__next__)
    while pending:
        verdicts = judge(dict(pending))
        for k in list(pending):
            advance(k, lambda s=searches[k], v=bool(verdicts[k]): s.send(v))
    return answers
