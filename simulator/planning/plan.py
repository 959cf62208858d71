"""``llmsim plan``: the cheapest fleet that meets the SLO, or a fleet's highest sustainable rate.

For each combination of the ``--vary`` choices, one search runs on the
searched key (see :mod:`.search` for the monotonicity it assumes): the
smallest value of the range axis that meets every SLO target, or with
``max_rate`` the largest arrival rate that does. A probe meets the SLO
only if every seed does (``seeds`` > 1 bounds the noise of one traffic
sample); its latency figures are the worst over those seeds. All
combinations advance together, so each round's probes (x seeds) run side
by side on the executor, and every run is stored (resumable, like sweeps).

Minimum search: feasible candidates rank by monthly cost; max-rate search:
by the rate reached (then cost). Infeasible ones come last and say which
SLO target failed at the end of the range. Each candidate says what its
pools were billed per GPU-hour, since a ranking across GPU kinds is only as
fair as their prices (:mod:`.prices`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Optional, Sequence

from ..errors import LlmsimError, first_few
from ..memory import does_not_fit
from ..metrics.intervals import check_confidence
from ..metrics.verdict import load_unsure
from ..metrics.tail_samples import row_few_samples_note
from ..profiles.hardware import load_hardware
from ..runsize import check_run_count
from ..scenario.load import load_scenario, resolve_scenario
from ..scenario.overlays import overlaid, variant_overlays
from ..scenario.overrides import Given, given_sets, refuse_overlaps
from ..scenario.variants import Variant, merge_overlays, overlay_assignments, select_variants, yaml_text
from ..validation.error_model import ErrorModel
from workloads.traces import copies_in_step, seeds_alike
from .batch import run_points
from .confidence import judge_at_confidence
from .executors import Executor
from .pareto import month_with_power
from .point import LATENCY_COLUMNS, Point, check_overrides
from .precheck import check_runs
from .prices import Prices, gpu_varied_pools, pinned_prices, priced_by
from .search import drive_all, largest_passing, most_probes_largest, most_probes_smallest, smallest_passing
from .store import PointStore
from .vary import Axis, check_axes, choices, runs_to_check, vary_run

__all__ = ["Plan", "plan_fleet", "RATE_KEY", "infeasible_message"]

#: The key ``--max-rate`` searches.
RATE_KEY = "workload.arrival.rate_per_s"

_COSTS = ("product_monthly_usd", "product_gpus", "monthly_usd", "gpus", "usd_per_request", "power_monthly_usd",
          "product_power_monthly_usd")
_THROUGHPUTS = ("request_throughput", "output_throughput")
_FIGURES = (*_COSTS, *_THROUGHPUTS, *(c for c, _ in LATENCY_COLUMNS))


@dataclass
class Plan:
    """The outcome; ``to_json()`` is plan.json. ``probes`` holds every
    evaluated (combination, value) with its worst-over-seeds figures, for
    the Pareto plot."""

    scenario: str
    mode: str
    searched: dict[str, Any]
    seeds: list[int]
    candidates: list[dict[str, Any]]
    probes: list[dict[str, Any]] = field(default_factory=list)
    variants: list[str] = field(default_factory=list)
    sets: dict[str, Any] = field(default_factory=dict)
    confidence: Optional[float] = None
    # every GPU the plan ran, by name: where its cost model comes from (HardwareProfile.provenance)
    calibration: dict[str, dict[str, Any]] = field(default_factory=dict)
    # the pools whose GPU the plan varies (each candidate's usd_per_gpu_hour says what it was billed)
    gpu_varied: list[str] = field(default_factory=list)
    # those billed at one pinned usd_per_gpu_hour whatever the GPU (.prices.pinned_prices)
    pinned_prices: list[dict[str, Any]] = field(default_factory=list)
    # other warnings about what the plan's figures rest on (seeds that replay one trace alike)
    notes: list[str] = field(default_factory=list)
    # the scenario's own name (its file may be named otherwise), which the run's page is titled by
    name: str = ""

    @property
    def best(self) -> Optional[dict[str, Any]]:
        return self.candidates[0] if self.candidates and self.candidates[0]["slo_met"] else None

    @property
    def _month_key(self) -> str:
        """What the ranking's month is: the GPU-hour bill, with the power where it is priced, the
        product's where the scenario is a slice of one."""
        product = "product_" if any(c.get("product_monthly_usd") is not None for c in self.candidates) else ""
        priced = any(c.get(f"{product}power_monthly_usd") is not None for c in self.candidates)
        return f"{product}monthly_usd" + (f" + {product}power_monthly_usd" if priced else "")

    @property
    def warnings(self) -> list[str]:
        return [p["warning"] for p in self.pinned_prices] + self.notes

    def to_json(self) -> dict[str, Any]:
        return {"scenario": self.scenario, "name": self.name, "variants": self.variants, "set": self.sets, "mode": self.mode,
                "searched": self.searched, "seeds": self.seeds,
                "rank_by": ("" if self.mode == "min" else "max_rate_per_s, then ") + self._month_key,
                "confidence": self.confidence, "calibration": self.calibration, "warnings": self.warnings,
                "gpu_varied": self.gpu_varied, "pinned_prices": self.pinned_prices, "best": self.best,
                "candidates": self.candidates, "probes": self.probes}


class _Prober:
    """Judges probes: runs each (combination, value) at every seed and
    remembers the rows, so candidates can be reported afterwards."""

    def __init__(self, base: Point, seeds: list[dict[str, Any]], executor: Executor,
                 store: Optional[PointStore], on_row: Optional[Callable] = None,
                 confidence: Optional[float] = None, model: Optional[ErrorModel] = None):
        self.base, self.seeds, self.executor, self.store, self.on_row = base, seeds, executor, store, on_row
        self.confidence, self.model = confidence, model
        self.rows: dict[tuple[int, Any], list[dict[str, Any]]] = {}

    def met(self, rows: Sequence[dict[str, Any]]) -> bool:
        if self.confidence is None:
            return _met(rows)
        return judge_at_confidence(rows, self.confidence, self.model)[0]

    def judge(self, combos: Sequence[dict[str, Any]], key: str) -> Callable[[dict[int, Any]], dict[int, bool]]:
        def verdicts(probes: dict[int, Any]) -> dict[int, bool]:
            wanted = {(i, v): [self.base.with_overrides({**combos[i], key: v, **s}) for s in self.seeds]
                      for i, v in probes.items()}
            got = {}
            for p, row in run_points([p for ps in wanted.values() for p in ps], self.executor, self.store,
                                     self.on_row):
                self._refuse_input_fault(p, row)
                got[p.key] = row
            for (i, v), points in wanted.items():
                self.rows[(i, v)] = [got[p.key] for p in points]
                if any(r.get("slo_met") is None and not r.get("error") for r in self.rows[(i, v)]):
                    # Asked of the results, not the file: SLOs may be declared in more than one place.
                    raise LlmsimError("the scenario declares no SLO (slo: {ttft_p99_ms: ..., tpot_p99_ms: ...}), "
                                      "so no fleet can be judged against it", source=self.base.scenario,
                                      key_path="slo")
            return {i: self.met(self.rows[(i, v)]) for i, v in probes.items()}
        return verdicts

    def _refuse_input_fault(self, point: Point, row: dict[str, Any]) -> None:
        """A run that failed on its input (what the precheck cannot see: a
        trace edited since it was read, a draw only one seed makes) says
        nothing about its fleet, and ranked as an infeasible candidate it
        would pass for an answer: the plan stops on it. A model that does
        not fit its GPUs is an answer about the hardware, and stays one."""
        error = row.get("error")
        if error and not does_not_fit(error):
            base = dict(self.base.overrides)
            ran = ", ".join(f"{k}={v}" for k, v in point.overrides if k not in base or base[k] != v)
            raise LlmsimError(f"a run of the plan ({ran}) failed on its input, not on its fleet: {error}")

    def figures(self, i: int, value: Any) -> dict[str, Any]:
        """Worst over seeds: the highest latencies and cost (an autoscaled fleet's differs by seed; the
        sweep page ranks by the same), the lowest throughput."""
        rows = self.rows[(i, value)]
        out: dict[str, Any] = {}
        for col in _FIGURES:
            vals = [r.get(col) for r in rows if r.get(col) is not None]
            out[col] = (min if col in _THROUGHPUTS else max)(vals) if vals else None
        out["slo_met"] = self.met(rows)
        if self.confidence is not None:      # the verdict at the confidence, and each target's bound
            _, out["failed_slo"], out["slo_bounds_ms"] = judge_at_confidence(rows, self.confidence, self.model)
            return out
        why = [f"seed {r.get('seed')}: {r['slo_failed']}" if len(rows) > 1 else r["slo_failed"]
               for r in rows if r.get("slo_failed")]
        why += [r["error"] for r in rows if r.get("error")]
        out["failed_slo"] = "; ".join(why) or None
        return out


def _met(rows: Sequence[dict[str, Any]]) -> bool:
    return all(r.get("slo_met") is True for r in rows)


def plan_fleet(scenario: str | Path, axes: Sequence[Axis], executor: Executor, *, seeds: int = 1,
               max_rate: bool = False, engine: str = "fast", store: Optional[PointStore] = None,
               on_row: Optional[Callable] = None, sets: Mapping[str, Any] | None = None,
               variants: Sequence[str] = (), confidence: Optional[float] = None,
               model: Optional[ErrorModel] = None, max_runs: Optional[int] = None) -> Plan:
    """The :class:`Plan` ``llmsim plan`` writes as plan.json: ``candidates``
    (one per combination of choices, those meeting the SLO first, cheapest
    first, or highest rate first with ``max_rate``), ``best`` (the first, or
    None when no combination meets the SLO: check it before reading it) and
    every ``probes`` run.

    ``axes`` are ``--vary`` axes (:func:`~.vary.parse_vary`): exactly one
    range to search, any number of lists of choices to cross (none a range
    with ``max_rate``). ``executor`` (:func:`~.executors.make_executor`) runs
    the probes; the caller opens it, so a session can reuse one pool of
    workers or one cluster for many plans.

    ``variants`` (the scenario's own what-ifs, by name, in order) and
    then ``sets`` (``--set``) change the scenario for every run; the axes
    vary it from there. So a variant is planned exactly as ``llmsim run
    --variant`` runs it: the same overlays, the same order.

    ``confidence``: a probe meets the SLO when every target holds at that
    confidence under the error model ``model`` over its seeds
    (:mod:`.confidence`), not when the simulated values do.

    ``max_runs``: the most runs the search may make (default
    :data:`~simulator.runsize.MAX_RUNS`), checked on its worst case before any run.

    Every combination is compiled at each value of the range it may try before any run
    (:mod:`.precheck`): a choice llmsim cannot model is refused, not planned
    as an infeasible fleet; one whose model does not fit stays a result."""
    if confidence is not None:
        check_confidence(confidence, "confidence", gate=True)
    if isinstance(variants, str):       # one name, not one variant per letter
        variants = [variants]
    if sets is not None and not isinstance(sets, Mapping):
        raise LlmsimError(f"expected a dict {{key.path: value}} (got {type(sets).__name__})", key_path="sets")
    cli = dict(sets or {})
    chosen: tuple[Variant, ...] = ()
    path = resolve_scenario(str(scenario))
    if variants or cli:
        base, path = load_scenario(scenario)
        chosen = select_variants(base.variants, variants, path)
        for v in chosen:
            check_overrides(path, v.set, f"variants.{v.name}.set")
    # --set and --vary keys address the scenario as the variants leave it (one may add the pool a key names)
    refuse_overlaps([*given_sets(overlay_assignments(cli)),
                     *(Given(a.key, f"--vary {a.text()}", "varied", "--vary") for a in axes)],
                    overlaid(path, variant_overlays(chosen)), source=path)
    sets = merge_overlays([*(v.set for v in chosen), cli])
    if cli:
        check_overrides(path, sets, " ".join(f"--set {k}={v}" for k, v in cli.items()))
    sc, path = load_scenario(scenario, overlay_assignments(sets))
    if sc.slo is None and not any(c.slo for c in sc.classes):
        raise LlmsimError("the scenario declares no SLO (slo: {ttft_p99_ms: ..., tpot_p99_ms: ...}), so no fleet "
                          "can be judged against it", source=path, key_path="slo")
    if seeds < 1:
        raise LlmsimError(f"--seeds must be at least 1 (got {seeds})", key_path="--seeds")
    if seeds > 1 and any(a.key == "seed" for a in axes):
        # the seeds' own seed key would overwrite the varied one: each choice would run the same seeds
        raise LlmsimError(f"--seeds {seeds} runs every fleet at the scenario's seed and the {seeds - 1} after it, "
                          f"so a seed varied beside it would run the same seeds for every choice: drop --vary seed "
                          f"(or --seeds)", key_path="--vary seed")
    ranges = [a for a in axes if a.is_range]
    if max_rate:
        if ranges:
            raise LlmsimError(f"--max-rate searches {RATE_KEY} itself: give other --vary axes as lists of "
                              f"choices, not ranges", key_path=f"--vary {ranges[0].key}")
        if getattr(sc.workload.arrival, "rate_per_s", None) is None:
            raise LlmsimError(f"--max-rate varies {RATE_KEY}, but this arrival ({sc.workload.arrival.type}) "
                              f"has no rate", source=path, key_path="workload.arrival")
        if sc.workload.num_sessions is not None:
            # the same sessions start sooner: once they all overlap the load stops growing, and every rate
            # passed (4 B200s "sustained" 1,638 coding-agent sessions a second)
            n = sc.workload.num_sessions
            raise LlmsimError(f"--max-rate raises {RATE_KEY}, the rate sessions start at, but this workload starts "
                              f"a fixed {n:,} sessions: a higher rate starts the same {n:,} sooner, and once they "
                              f"all overlap the load stops growing, so every rate passes; size the workload by time "
                              f"(--set workload.num_sessions=null --set workload.duration_s=SECONDS: sessions keep "
                              f"starting at the searched rate for that long)", source=path,
                              key_path="workload.num_sessions")
        spikes = getattr(sc.workload.arrival, "spikes", None)
        if spikes and sc.workload.duration_s is None:
            # a fixed count of requests ends sooner at a higher rate, so a spike at a fixed time is met at
            # some probed rates and not at others: the probes would not run the same traffic's shape, and
            # the run of one past the count's last arrival is refused (simulator/scenario/drawn.py)
            n = sc.workload.num_requests
            raise LlmsimError(f"--max-rate raises {RATE_KEY}, but this workload draws a fixed {n:,} requests, which a "
                              f"higher rate draws sooner, so its spikes (at fixed times) fall inside the arrivals at "
                              f"some rates and after the last one at others; size the workload by time (--set "
                              f"workload.num_requests=null --set workload.duration_s=SECONDS: arrivals keep coming "
                              f"at the searched rate for that long)", source=path, key_path="workload.arrival.spikes")
        # however spelt, or by a key holding it (--vary workload.arrival={...})
        refuse_overlaps([Given(RATE_KEY, "--max-rate", "searched", "--max-rate"),
                         *(Given(a.key, f"--vary {a.text()}", "varied", "--vary") for a in axes)],
                        overlaid(path, variant_overlays(chosen)), source=path)
    elif len(ranges) != 1:
        raise LlmsimError(f"give exactly one range axis to search (such as --vary pools.{sc.pools[0].name}."
                          f"replicas=1..64), got {len(ranges)}", key_path="--vary")
    path = path.resolve()
    combinations = math.prod(len(a.values) for a in axes if not a.is_range)
    probes = most_probes_largest() if max_rate else most_probes_smallest(*ranges[0].bounds)
    check_run_count(combinations * probes * seeds,
                    f"this plan searches {combinations:,} combination(s) of choices, each with up to {probes} "
                    f"probe(s) of {seeds} seed(s)", max_runs, key_path="--vary")
    check_axes(path, axes, sets)
    given = [*(f"--variant {v}" for v in variants), *(f"--set {k}={v}" for k, v in cli.items())]
    runs = runs_to_check(axes)
    check_runs(path, runs, sets, " ".join(given))
    prices = Prices(path, sets)
    priced = [prices.of(r.overrides) for r in runs]
    stated = Prices(path, merge_overlays([v.set for v in chosen])).of({})
    pinned = pinned_prices(priced, stated, restated=[priced_by([cli, r.overrides], list(stated)) for r in runs])
    varied = gpu_varied_pools(priced)
    combos = choices(axes)
    seed_sets = [{}] + [{"seed": sc.seed + k} for k in range(1, seeds)]
    prober = _Prober(Point(str(path), tuple(sets.items()), engine), seed_sets, executor,
                     store, on_row, confidence, model)
    if max_rate:
        start = sc.workload.arrival.rate_per_s
        key, searched = RATE_KEY, {"key": RATE_KEY, "start": start}
        answers = drive_all({i: largest_passing(start) for i in range(len(combos))}, prober.judge(combos, key))
    else:
        (axis,) = ranges
        key, searched = axis.key, {"key": axis.key, "range": list(axis.bounds)}
        answers = drive_all({i: smallest_passing(*axis.bounds) for i in range(len(combos))},
                            prober.judge(combos, key))
    candidates, bounds_hit, thin, short = [], [], [], []
    for i, combo in enumerate(combos):
        tried = [v for (j, v) in prober.rows if j == i]
        value = answers[i]
        # with no rate passing, the figures shown are the starting rate's (the first probe): the last
        # halving's run may hold no request at all, whose "no samples" would hide what missed
        at = value if value is not None else (tried[0] if max_rate else max(tried))
        if value is not None and value == (max(tried) if max_rate else searched["range"][0]) \
                and (max_rate or (value > 1 and not _below_refused(path, sets, combo, key, value))):
            bounds_hit.append(", ".join(f"{k}={yaml_text(v)}" for k, v in combo.items()) or "the scenario")
        overrides = {**combo, key: at}
        cand = {"overrides": overrides, **prober.figures(i, at), "probes": len(tried),
                "usd_per_gpu_hour": {name: p.usd_per_gpu_hour for name, p in prices.of(overrides).items()}}
        if max_rate:
            cand["max_rate_per_s"] = value
        if cand["slo_met"]:
            thin += [(overrides, note) for note in _few_samples(prober.rows[(i, at)])]
            short += [(overrides, r["load"]) for r in prober.rows[(i, at)] if load_unsure(r)][:1]
        candidates.append(cand)
    probes = [{"overrides": {**combos[i], key: v}, **prober.figures(i, v)} for (i, v) in prober.rows]
    gpus = {p.gpu for run in priced for p in run.values()}   # however an axis spells the GPU
    return Plan(str(path), "max_rate" if max_rate else "min", searched, [sc.seed + k for k in range(seeds)],
                _ranked(candidates, max_rate), probes, list(variants), cli, confidence,
                {g: load_hardware(g).provenance() for g in sorted(gpus)}, varied, pinned,
                [w for w in [seeds_alike(sc.workload.arrival, seeds), copies_in_step(sc.workload.arrival),
                             _bound_note(bounds_hit, max_rate, key), _thin_note(thin), _short_window_note(short)] if w],
                sc.name)


def _few_samples(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """What :func:`~simulator.metrics.tail_samples.few_samples_note` says of the first of a probe's seeds it
    has something to say of."""
    notes = [row_few_samples_note(r) for r in rows]
    return [n for n in notes if n][:1]


def _thin_note(thin: list[tuple[dict[str, Any], str]]) -> str:
    """Where a fleet the plan answers with passed on a percentile of too few requests: its verdict is
    the slowest few requests', which another seed or a longer window can turn."""
    if not thin:
        return ""
    which = first_few([f"({_overrides_text(o)})" if len(o) > 1 else _overrides_text(o) for o, _ in thin], 3)
    return f"the SLO verdict of {which} rests on too few samples: {thin[0][1]}"


def _short_window_note(short: list[tuple[dict[str, Any], str]]) -> str:
    """Where a fleet the plan answers with passed on a window its requests outlast (long reasoning
    outputs): its latencies are those of a fleet still filling up, and the same fleet serving the load
    for longer may fall behind it."""
    if not short:
        return ""
    which = first_few([f"({_overrides_text(o)})" if len(o) > 1 else _overrides_text(o) for o, _ in short], 3)
    return (f"{which} met the SLO on a window its requests outlast, too short to tell whether it keeps up with "
            f"the load, so a smaller fleet than the load needs can pass: {short[0][1]}")


def _below_refused(path: Path, sets: Mapping[str, Any], combo: Mapping[str, Any], key: str, low: int) -> bool:
    """Whether the scenario refuses the value under the range's low end (an autoscaler's max_replicas
    under its pool's starting replicas): the low end is then the smallest value there is, and the
    advice to widen the range led to a refusal."""
    try:
        check_runs(path, [vary_run({**combo, key: low - 1})], sets)
    except LlmsimError:
        return True
    return False


def _bound_note(hit: list[str], max_rate: bool, key: str) -> str:
    """Where an answer is the search's bound rather than a value found between a pass and a miss: a
    --max-rate answer that passed at its last doubling (start × 2^12) is only a floor under the highest
    rate, a range's low end only the smallest value tried."""
    if not hit:
        return ""
    which = first_few(hit, 3)
    if max_rate:
        return (f"every rate tried passed for {which}: its answer is the search's highest probe (the starting "
                f"rate doubled 12 times), a floor under the highest sustainable rate; start higher "
                f"(--set {key}=...)")
    return (f"the range's low end passed for {which}: a smaller {key} may pass too; widen the range to "
            f"find the smallest")


def _ranked(candidates: list[dict[str, Any]], max_rate: bool) -> list[dict[str, Any]]:
    big = float("inf")

    def order(c: dict[str, Any]):
        # the product's month where the scenario is a slice of one: candidates may slice it differently
        cost = month_with_power(c, product=c.get("product_monthly_usd") is not None)
        cost = big if cost is None else cost
        return (not c["slo_met"], -(c.get("max_rate_per_s") or 0.0) if max_rate else 0.0, cost)
    return sorted(candidates, key=order)


def infeasible_message(plan: Plan) -> str:
    """Why no combination met the SLO, one line per combination."""
    end = "at the starting rate" if plan.mode == "max_rate" else "at the largest value"
    lines = [f"{_overrides_text(c['overrides'])}: {c['failed_slo']}" for c in plan.candidates]
    return f"no combination meets the SLO ({end} of {plan.searched['key']}):\n  " + "\n  ".join(lines)


def _overrides_text(overrides: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in overrides.items())
