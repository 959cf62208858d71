"""Speculative decodes past the token budget wait for the next iteration.

vLLM V1 and TensorRT-LLM charge a speculative decode its token and the k draft
tokens it carries (``draft_tokens_in_budget``). Where the running decodes
outgrow the budget, both walk them oldest first: vLLM gives the decode at the
boundary what the budget has left, cutting its draft (``budget_boundary:
trim_draft``), TensorRT-LLM stops before it (``stop``); the rest wait in place
and no prompt tokens run in that iteration. Checked from inside the reference
engine on random workloads (the budget is never exceeded, a decode waits only
where the budget is spent, every request completes), the fast engine held to
it, and on a hand-made batch.
"""
from __future__ import annotations

from contextlib import contextmanager
from unittest import mock

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from helpers_engine import capacities, compare_runs, describe, engine_configs, make_requests, run_open, workloads
from simulator.costmodel.speculative import SpeculativeSpec, speculative_cost_model
from simulator.engine.base import decode_budget_tokens
from simulator.engine.config import EngineConfig
from simulator.engine.reference import ReferenceReplica
from simulator.engine.sequence import DECODE
from simulator.fleet import pool as fleet
from test_speculative import SPEC, _target
from workloads.request import Status

SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


class BudgetReference(ReferenceReplica):
    """The reference engine, checking each plan against the stacks' walk over the running decodes."""

    plans: list[tuple[int, int, int]] = []     # (decodes run, decodes waiting, prompt chunks) per plan

    def _plan(self, now):
        before = [s for s in self.running if s.state == DECODE]
        chunks, decodes = super()._plan(now)
        if not self.cfg.mixes_prefill:   # prefill-only iterations stall the decodes whatever the budget
            return chunks, decodes
        waiting = [s for s in self.running if s.state == DECODE and s not in decodes]
        type(self).plans.append((len(decodes), len(waiting), len(chunks)))
        assert decodes or not waiting, "decodes wait in an iteration that runs none"
        if not waiting:
            return chunks, decodes
        cfg = self.cfg
        budget, slots = cfg.max_num_batched_tokens, self.draft_slots
        each = decode_budget_tokens(cfg, self.cm, len(before)) // len(before)
        assert not chunks, "prompt tokens beside decodes left past the budget"
        # the decodes run are the oldest, in running order, and those waiting come after them
        order = [s for s in self.running if s.state == DECODE]
        assert order[:len(decodes)] == decodes, "a younger decode ran before an older one"
        n = len(decodes)
        if cfg.budget_boundary == "stop":
            assert n * each <= budget, "the token budget is exceeded"
            assert (n + 1) * each > budget, "a decode waits that the budget holds"
        else:   # the boundary decode's draft is cut to the budget left, beside its slots
            assert (n - 1) * each < budget - slots, "the token budget is exceeded"
            assert n * each >= budget - slots, "a decode waits that the budget holds"
        return chunks, decodes


@contextmanager
def budget_engine():
    BudgetReference.plans = []
    with mock.patch.dict(fleet.ENGINES, {"budget_reference": BudgetReference}):
        yield


def _spec_cm(k: int = SPEC.k, threshold=None):
    return speculative_cost_model(_target(), SpeculativeSpec(draft_model=SPEC.draft_model, k=k,
                                                             acceptance_rate=SPEC.acceptance_rate,
                                                             disable_above_batch=threshold))


@settings(max_examples=120, **SETTINGS)
@given(data=st.data())
def test_decodes_past_the_budget_wait_and_the_engines_agree(data):
    reqs = data.draw(workloads(max_n=40, max_out=200), label="requests")
    if data.draw(st.booleans(), label="classes"):   # a preempted older decode may be of the lower class
        for r, p in zip(reqs, data.draw(st.lists(st.integers(0, 2), min_size=len(reqs), max_size=len(reqs)),
                                        label="priorities")):
            r.priority = p
    cfg = data.draw(engine_configs(scheduler="continuous"), label="cfg")
    k = data.draw(st.sampled_from([1, 3, 5]), label="k")
    slots = cfg.draft_slots_per_request
    budget = data.draw(st.integers(1 + k + slots, max(1 + k + slots, cfg.max_num_seqs * (1 + k + slots))),
                       label="max_num_batched_tokens")
    boundary = data.draw(st.sampled_from(["trim_draft", "stop"]), label="budget_boundary")
    budget = max(budget, cfg.max_num_seqs)
    # (a budget below one block holds no whole-block chunk: such a config is refused)
    cfg = cfg.model_copy(update={"draft_tokens_in_budget": True, "budget_boundary": boundary,
                                 "max_num_batched_tokens": budget,
                                 "chunks_whole_blocks": cfg.chunks_whole_blocks and budget >= cfg.block_size})
    cfg = EngineConfig.model_validate(cfg.model_dump())
    nb = data.draw(capacities(reqs, cfg), label="num_blocks")
    cm = _spec_cm(k, data.draw(st.sampled_from([None, 2, 16]), label="disable_above_batch"))
    with budget_engine():
        ref = run_open("budget_reference", reqs, cfg, nb, cm=cm)
        waited = sum(w for _, w, _ in BudgetReference.plans)
    event("decodes waited: " + ("none" if not waited else "some"))
    event("preempted: " + ("yes" if any(r.preemptions for r in ref.requests) else "no"))
    # every running request advances in the end: all complete
    assert all(r.status in (Status.FINISHED, Status.REJECTED) for r in ref.requests)
    fast = run_open("fast", reqs, cfg, nb, cm=cm)
    problems = compare_runs(fast, ref)
    assert not problems, ("fast and reference disagree past the budget:\n  " + "\n  ".join(problems[:12])
                          + "\nreproduction: " + describe(reqs, cfg, nb, k=k))


@pytest.mark.parametrize("boundary,plans", [
    # vLLM: four run (the fourth verifying 1 of its 5 draft tokens), the fifth waits until they finish
    ("trim_draft", [(0, 0, 5), (4, 1, 0), (4, 1, 0), (1, 0, 1)]),
    # TensorRT-LLM: three run, two wait
    ("stop", [(0, 0, 5), (3, 2, 0), (3, 2, 0), (2, 0, 1)]),
])
def test_a_speculative_batch_defers_its_tail(boundary, plans):
    """Five decodes of 1 + 5 tokens at a 20-token budget, each to write 3 tokens,
    and a sixth prompt queued behind them with a batch slot free: (decodes run,
    decodes waiting, prompt chunks) per iteration. The prompt joins only once
    no decode waits."""
    cfg = EngineConfig(max_num_seqs=6, max_num_batched_tokens=20, block_size=16, draft_tokens_in_budget=True,
                       budget_boundary=boundary)
    reqs = make_requests([0.0] * 5 + [1e-6], [1] * 5 + [8], [3] * 5 + [2])
    with budget_engine():
        ref = run_open("budget_reference", reqs, cfg, 64, cm=_spec_cm())
        assert BudgetReference.plans[:4] == plans
    assert all(r.status == Status.FINISHED for r in ref.requests)
    fast = run_open("fast", reqs, cfg, 64, cm=_spec_cm())
    assert not compare_runs(fast, ref)


def test_preemption_of_every_decode_the_budget_held_deals_it_again():
    """bs 1 and a KV pool that cannot hold every decode's next token: preemption
    takes the decodes the budget held (the lower class's), and the budget goes
    to the decodes that were waiting rather than the iteration going idle."""
    cfg = EngineConfig(max_num_seqs=5, max_num_batched_tokens=10, block_size=1, draft_tokens_in_budget=True,
                       budget_boundary="stop")
    reqs = make_requests([0.0, 0.01, 0.02, 0.05, 0.05], [19, 10, 18, 9, 14], [2, 21, 7, 33, 9])
    for r, p in zip(reqs, [2, 0, 2, 2, 2]):
        r.priority = p
    with budget_engine():
        ref = run_open("budget_reference", reqs, cfg, 53, cm=_spec_cm())
        assert not any(run == 0 and waiting for run, waiting, _ in BudgetReference.plans)
    assert all(r.status == Status.FINISHED for r in ref.requests) and any(r.preemptions for r in ref.requests)
    fast = run_open("fast", reqs, cfg, 53, cm=_spec_cm())
    assert not compare_runs(fast, ref)
