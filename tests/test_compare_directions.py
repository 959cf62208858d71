"""Which way is worse, for every key results.json declares.

``llmsim compare`` colours a move red or green and ``llmsim check`` fails a
build on it, so a key with the wrong direction calls a saving a regression
(a GPU drawing less power, once marked worse) or hides one. The direction
comes from the declared unit and name; these tests walk every declared key,
so a key or a unit added later is decided on purpose, not by accident.
"""
from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator import fields
from simulator.cli.app import results_fields
from simulator.fields import declare_results
from simulator.fields import flatten as declared_keys
from simulator.report import diff
from simulator.report.diff import worse_direction
from simulator.report.results_reference import RESULTS

#: Every declared key: (path as declared, field).
DECLARED = list(declared_keys(RESULTS))
#: Names that stand for the run's own (<pool>, <class>, <metric>).
_PLACEHOLDER = re.compile(r"<\w+>")


@pytest.fixture(autouse=True)
def declared():
    """As the command line and the notebook helpers name them."""
    declare_results(results_fields)


def concrete(path: str, name: str = "x") -> str:
    """A declared path as a results file spells it: a placeholder or a list's
    item by a name the run chose."""
    return _PLACEHOLDER.sub(name, path.replace("[]", "." + name))


def _leaves():
    return [(path, f) for path, f in DECLARED if f.keys is None]


# What a reader of a capacity plan expects, key by key. Declared paths; a
# placeholder stands for any name.
KNOWN = {
    # latency
    "p99_ttft_ms": 1, "median_tpot_ms": 1, "slo.targets.<target>.measured_ms": 1,
    "llmsim.ttft_budget.p99.queue": 1, "llmsim.regions.<region>.mean_network_ms": 1,
    # money and GPUs
    "llmsim.cost.monthly_usd": 1, "llmsim.cost.pools[].usd": 1, "llmsim.product.gpus": 1, "llmsim.gpus": 1,
    "llmsim.cost.usd_per_million_tokens": 1, "llmsim.cost.power.monthly_usd": 1, "llmsim.standby_gpus": 1,
    # power, energy and emissions: worse up
    "llmsim.energy.pools.<pool>.busy_w_per_gpu": 1, "llmsim.energy.pools.<pool>.mean_w_per_gpu": 1,
    "llmsim.energy.kwh_per_month": 1, "llmsim.energy.window_kwh": 1, "llmsim.energy.joules_per_token": 1,
    "llmsim.energy.co2e_kg_per_month": 1, "llmsim.energy.mean_facility_kw": 1, "llmsim.product.kwh_per_month": 1,
    "llmsim.product.co2e_kg_per_month": 1,
    # work done, per second and per GPU: worse down
    "request_throughput": -1, "output_throughput": -1, "request_goodput": -1, "llmsim.load.completed_rps": -1,
    "llmsim.cost.sessions_per_gpu_peak": -1, "llmsim.cost.sessions.mean_per_gpu": -1,
    "llmsim.cost.requests_per_gpu_second": -1,
    # requests served, and those not
    "completed": -1, "llmsim.request_status.finished": -1, "llmsim.load.served_fraction": -1,
    "failed": 1, "cancelled": 1, "llmsim.load.shed": 1, "llmsim.request_status.rejected": 1,
    "llmsim.classes.<class>.rejected_fraction": 1, "llmsim.load.queue_growth_rps": 1, "llmsim.preemptions": 1,
    "llmsim.mean_queue_depth": 1, "llmsim.request_status.stranded": 1, "llmsim.load.stranded": 1,
    # verdicts and attainments
    "slo.met": -1, "slo.targets.<target>.met": -1, "slo.goodput.attainment.<metric>": -1, "llmsim.load.overloaded": 1,
    "llmsim.autoscaling.ttft_attainment_under_provisioned": -1, "llmsim.replicates.slo_targets_met.<target>": -1,
    "llmsim.prefix_cache.token_hit_rate": -1, "llmsim.lora.gpu_slot_hit_rate": -1,
    # settings, inputs and prices given: no direction
    "slo.targets.<target>.target_ms": 0, "slo.goodput.thresholds_ms.<metric>": 0, "llmsim.autoscaling.ttft_slo_ms": 0,
    "llmsim.cost.api.prices.input_usd_per_million": 0, "llmsim.cost.api.prices.output_usd_per_million": 0,
    "llmsim.cost.power.usd_per_kwh": 0, "llmsim.cost.pools[].usd_per_gpu_hour": 0,
    "llmsim.energy.grid_g_co2e_per_kwh": 0, "llmsim.energy.pue": 0, "llmsim.energy.pools.<pool>.idle_w": 0,
    "llmsim.energy.pools.<pool>.tdp_w": 0, "llmsim.speculative.acceptance_rate": 0, "llmsim.lora.max_loras": 0,
    "llmsim.autoscaling.target": 0, "llmsim.seed": 0, "llmsim.tp": 0, "llmsim.gpus_per_replica": 0,
    "llmsim.load.offered_rps": 0, "llmsim.product.slices": 0, "llmsim.kv_memory.<knob>": 0,
    "llmsim.cost.api.monthly_usd_without_caching": 0,
    # neither: sizes, counts of tokens, utilisation
    "total_input_tokens": 0, "duration": 0, "llmsim.kv_memory.weights_gb": 0, "llmsim.mean_kv_utilization": 0,
    "llmsim.replicas": 0, "llmsim.replicates.spread.<figure>.std": 0,
}


def test_every_known_case_is_declared():
    declared = {path for path, _ in DECLARED}
    assert set(KNOWN) <= declared, sorted(set(KNOWN) - declared)


@pytest.mark.parametrize("path, direction", sorted(KNOWN.items()))
def test_known_directions(path, direction):
    assert worse_direction(concrete(path)) == direction


@pytest.mark.parametrize("figure, direction", [("p99_ttft_ms", 1), ("request_throughput", -1), ("p97_ttft_ms", 1)])
def test_an_interval_and_a_spread_go_the_way_of_their_figure(figure, direction):
    for end in ("lo", "hi"):
        assert worse_direction(f"llmsim.intervals.{figure}.{end}") == direction
    for stat in ("mean", "min", "max"):
        assert worse_direction(f"llmsim.replicates.spread.{figure}.{stat}") == direction
    assert worse_direction(f"llmsim.intervals.{figure}.confidence") == 0


def test_every_declared_unit_is_decided():
    """A new unit (``Wh``, ``USD/session``) must be put in one table on
    purpose: otherwise its keys would silently have no direction."""
    decided = set(diff.UNIT_DIRECTION) | diff.NO_DIRECTION_UNITS | diff.NAMED_UNITS | {"as the figure"}
    undecided = set()
    for _, f in _leaves():
        unit = f.unit[len("list of "):] if f.unit.startswith("list of ") else f.unit
        if unit not in decided:
            undecided.add(f.unit)
    assert not undecided
    assert not set(diff.UNIT_DIRECTION) & (diff.NO_DIRECTION_UNITS | diff.NAMED_UNITS)
    assert not diff.NO_DIRECTION_UNITS & diff.NAMED_UNITS


def test_every_exception_names_a_declared_key():
    names = {re.sub(r"\[\]$", "", path.rpartition(".")[2]) for path, _ in DECLARED}
    assert set(diff.BY_KEY_NAME) <= names, sorted(set(diff.BY_KEY_NAME) - names)


def test_every_declared_figure_has_a_sane_direction():
    """Walk every declared leaf: settings have no direction, a unit that
    settles it is obeyed unless the key is a named exception, and the
    direction of a count or a fraction agrees with its words."""
    wrong = []
    for path, f in _leaves():
        d = worse_direction(concrete(path))
        leaf = [p for p in path.replace("[]", "").split(".") if not _PLACEHOLDER.fullmatch(p)][-1]
        if f.unit in ("setting", "as given", "text", "USD/kWh", "USD/GPU-h", "g CO2e/kWh") and d != 0:
            wrong.append((path, f.unit, d, "an input has no direction"))
        elif f.unit in diff.UNIT_DIRECTION and leaf not in diff.BY_KEY_NAME and d != diff.UNIT_DIRECTION[f.unit]:
            wrong.append((path, f.unit, d, "the unit says otherwise"))
        elif re.search(r"(^|_)(failed|rejected|shed|stranded|preemptions)($|_)", leaf) and d != 1:
            wrong.append((path, f.unit, d, "a failure should be worse up"))
        elif re.search(r"(^|_)(completed|finished|attainment|hit_rate)($|_)", leaf) and d != -1:
            wrong.append((path, f.unit, d, "a success should be worse down"))
        if d not in (-1, 0, 1):
            wrong.append((path, f.unit, d, "not a direction"))
    assert not wrong, wrong


#: Each declared block's own keys: a name the run chose that is one of them would name that key instead.
_SIBLINGS: dict[str, set[str]] = {}
for _path, _ in DECLARED:
    _parent, _, _own = _path.rpartition(".")
    _SIBLINGS.setdefault(_parent, set()).add(_own)
#: Names that read as a direction where the old rules read the leaf.
_TRICKY = ["failed", "completed", "ttft_p99_ms", "usd", "gpus", "met", "attainment", "hit_rate", "throughput",
           "cost", "p99_e2el_ms", "rejected"]
_NAMES = st.sampled_from(_TRICKY) | st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789_-", min_size=1,
                                            max_size=20).filter(lambda s: not s.isdigit())


def _collides(path: str, name: str) -> bool:
    parts = path.split(".")
    return any(p.startswith("<") and name in _SIBLINGS.get(".".join(parts[:i]), ()) for i, p in enumerate(parts))


@settings(max_examples=60, deadline=None)
@given(name=_NAMES)
def test_a_name_the_run_chose_never_turns_a_direction(name):
    """A pool, class, SLO target or metric may be called anything (``failed``,
    ``ttft_p99_ms``): the declared key decides, not the name in its place
    (except where the name is a figure's: ``llmsim.intervals.<figure>.hi``)."""
    for path, f in _leaves():
        if ("<" in path or "[]" in path) and not _collides(path, name) and f.unit != "as the figure":
            assert worse_direction(concrete(path, name)) == worse_direction(concrete(path)), (path, name)


@pytest.mark.parametrize("key, direction", [
    ("p97_ttft_ms", 1), ("request_rate", 0), ("max_concurrency", 0), ("llmsim.wall_time_s", 0),
    ("burstiness", 0), ("llmsim.sim_requests_per_wall_s", 0), ("llmsim.pools.main.new_queue_depth", 1),
])
def test_keys_no_declaration_names_are_judged_by_their_name(key, direction):
    """A ``vllm bench serve`` file's own keys, and an older llmsim's."""
    assert worse_direction(key) == direction


def test_without_declarations_names_decide_and_nothing_is_turned_round(monkeypatch):
    """A library caller that started neither the command line nor the
    notebook helpers: keys are judged by name, coarser (a price in USD reads
    as a cost, a power in W as nothing) but never the other way round."""
    monkeypatch.setattr(fields, "_results", [])
    assert worse_direction("p99_ttft_ms") == 1 and worse_direction("completed") == -1
    assert worse_direction("llmsim.cost.monthly_usd") == 1
    for path, f in _leaves():
        d = worse_direction(concrete(path))
        monkeypatch.setattr(fields, "_results", [results_fields])
        declared = worse_direction(concrete(path))
        monkeypatch.setattr(fields, "_results", [])
        assert d * declared >= 0, (path, d, declared)
