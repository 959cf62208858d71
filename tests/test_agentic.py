"""Agentic sessions: growing contexts, tool pauses, sub-agent fan-out, and what the cache sees.

The driver runs on the fake fleet of test_sessions.py (fixed service time,
optional rejections), so the invariants are about what the workload sends
and when. Each request is traced back to the agent that sent it through its
block ids: a main agent's own ids are its session's, a sub-agent's its
SUBAGENT owner's (every task here is at least one block long, so every
call carries an id of its own agent).
"""
from __future__ import annotations

import numpy as np
import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from tests.test_bad_input_files import refused
from tests.test_sessions import FAST, POISSON, assert_chained, drive, fixed, uniform
from workloads import WorkloadSpec, spawn_streams
from workloads.block_ids import SESSION, SUBAGENT, id_base
from workloads.request import Status

B = 16


def agentic(n=5, turns=uniform(1, 6), tool=uniform(1, 300), pause={"dist": "exponential", "mean": 2.0},
            task=uniform(B, 200), out=uniform(1, 120), subagents=None, system_prompt=None, **session) -> dict:
    s = {"type": "agentic", "turns": turns, "tool_result_tokens": tool, "pause_s": pause, **session}
    if subagents is not None:
        s["subagents"] = subagents
    wl = dict(num_sessions=n, arrival=POISSON, input_tokens=task, output_tokens=out, block_tokens=B, session=s)
    if system_prompt is not None:
        wl["system_prompt"] = system_prompt
    return wl


def fan(p=0.5, count=uniform(1, 3), turns=uniform(1, 3), task=uniform(B, 100), **kw) -> dict:
    return {"probability": p, "count": count, "turns": turns, "task_tokens": task, **kw}


def agent_of(req) -> tuple[int, int]:
    """(kind, owner) of the agent that sent ``req``: the owner of its last block id."""
    v = req.blocks[-1] >> 32
    return v & 3, v >> 2


def calls(source) -> dict[tuple[int, int], list]:
    """Each agent's requests, in send order."""
    out: dict[tuple[int, int], list] = {}
    for r in source.requests:
        out.setdefault(agent_of(r), []).append(r)
    return out


def plans(source) -> dict[int, object]:
    sids = sorted({r.session for r in source.requests})
    return {sid: source.plans(sid) for sid in sids}


def check_invariants(source, max_context=None):
    """What every agentic run must satisfy; returns (main calls, sub-agent calls) checked."""
    per_agent = calls(source)
    plan = plans(source)
    children = {c.owner: (sid, k, c) for sid, p in plan.items() for k, kids in enumerate(p.children) for c in kids}
    mains = subs = 0
    for (kind, owner), reqs in per_agent.items():
        assert kind in (SESSION, SUBAGENT)
        if kind == SESSION:
            p = plan[owner]
            pauses, tools, outs = p.pauses, p.tools, p.outputs
            mains += len(reqs)
        else:
            sid, _, c = children[owner]
            assert all(r.session == sid for r in reqs)   # a sub-agent's calls carry its session's id
            pauses, tools, outs = c.pauses, c.tools, c.outputs
            subs += len(reqs)
        for k, (a, b) in enumerate(zip(reqs, reqs[1:])):
            assert b.input_tokens >= a.input_tokens + a.output_tokens            # the context only grows ...
            assert b.input_tokens == a.input_tokens + a.output_tokens + tools[k]  # ... by output + tool result
            assert a.status == Status.FINISHED and b.arrival >= a.finish + pauses[k] - 1e-9
            assert b.blocks[:len(a.blocks)] == a.blocks                          # and call k's ids lead call k+1's
        assert [r.output_tokens for r in reqs] == outs[:len(reqs)]
        if max_context is not None:
            assert all(r.input_tokens + r.output_tokens <= max_context for r in reqs[int(kind == SESSION):])
    # fan-out: each sub-agent starts from its parent's call, shares its prefix, and the parent waits for it
    for (kind, owner), reqs in per_agent.items():
        if kind != SUBAGENT:
            continue
        sid, k, c = children[owner]
        parent = per_agent[(SESSION, sid)]
        call = parent[k]
        fork = call.input_tokens + call.output_tokens
        head = parent[0].input_tokens - plan[sid].task      # the system prompt
        shared = fork if source.fork else head
        assert reqs[0].input_tokens == shared + c.task
        n = shared // source.block_tokens
        assert reqs[0].blocks[:n] == call.blocks[:n]
        assert reqs[0].arrival >= call.finish + plan[sid].pauses[k] - 1e-9
        if len(parent) > k + 1:
            assert parent[k + 1].arrival >= reqs[-1].finish - 1e-9
    return mains, subs


@FAST
@given(st.integers(0, 2**16), st.floats(0, 1), st.sampled_from(["context", "system_prompt"]),
       st.sampled_from([None, 900, 3000]), st.integers(0, 9), st.booleans())
def test_contexts_grow_pauses_hold_and_subagents_share_the_parents_prefix(seed, p, shares, max_ctx, reject_mod,
                                                                           with_app):
    session = {} if max_ctx is None else {"max_context_tokens": max_ctx}
    sp = {"apps": 2, "tokens": uniform(20, 90)} if with_app else None
    wl = agentic(n=6, subagents=fan(p, shares=shares), system_prompt=sp, **session)
    reject = (lambda r: r.id % 10 == reject_mod) if reject_mod else (lambda r: False)
    source, _ = drive(wl, seed=seed, service=0.7, reject=reject)
    assert_chained(source.requests)
    check_invariants(source, max_ctx)


def test_a_fan_out_run_sends_subagents_and_waits_for_them():
    """Fan-out on every call but the last: each session's tree is there, and nothing is left running."""
    source, _ = drive(agentic(n=4, turns=fixed(4), subagents=fan(1.0, count=fixed(2), turns=fixed(3))), seed=3)
    mains, subs = check_invariants(source)
    assert mains == 4 * 4 and subs == 4 * 3 * 2 * 3
    assert not source.calls


def test_subagents_leave_the_main_agents_draws_alone():
    """Sub-agents draw from their own stream: with or without them, the main agents' calls are the same."""
    kw = dict(turns=uniform(2, 9), n=20)
    without = plans(drive(agentic(**kw), seed=11)[0])
    for p in (0.0, 0.6):
        source = drive(agentic(subagents=fan(p), **kw), seed=11)[0]
        with_ = plans(source)
        assert [(x.task, x.outputs, x.tools, x.pauses) for x in with_.values()] == \
            [(x.task, x.outputs, x.tools, x.pauses) for x in without.values()]
        if p == 0.0:
            assert not any(c for x in with_.values() for c in x.children)


def _sent(seed: int, **kw):
    source, _ = drive(agentic(subagents=fan(0.4), **kw), seed=seed)
    return [(r.session, r.arrival, r.input_tokens, r.output_tokens, r.blocks) for r in source.requests]


def test_the_same_seed_sends_the_same_calls():
    assert _sent(5) == _sent(5)
    assert _sent(5) != _sent(6)


def test_existing_streams_keep_their_samples():
    """The agentic stream is appended: every earlier stream draws as it did before it existed."""
    s = spawn_streams(42)
    first = np.random.SeedSequence(42).spawn(4)
    later = first[3].spawn(5)    # the five streams after the first three, before ``agents``
    expect = [np.random.default_rng(c) for c in first[:3] + later]
    for name, rng in zip(s._fields, expect):
        assert getattr(s, name).random(3).tolist() == rng.random(3).tolist(), name
    assert "agents" in s._fields[len(expect):]


def test_a_call_past_the_context_window_ends_its_agent():
    """With a window of 1,000 tokens and 400-token tool results, a session makes at most a few calls."""
    source, _ = drive(agentic(n=6, turns=fixed(20), tool=fixed(400), task=fixed(200), out=fixed(50),
                              max_context_tokens=1000), seed=1)
    per = calls(source)
    assert all(len(reqs) == 2 for reqs in per.values())     # 250, then 700 (+50 = 750); 1,150 + 50 would not fit
    assert all(r.input_tokens + r.output_tokens <= 1000 for r in source.requests)


def test_a_rejected_main_call_ends_the_session_a_rejected_subagent_call_only_its_agent():
    wl = agentic(n=1, turns=fixed(3), subagents=fan(1.0, count=fixed(2), turns=fixed(2)))
    first_sub = []

    def reject(r):        # the first sub-agent call sent
        if agent_of(r)[0] == SUBAGENT and not first_sub:
            first_sub.append(r.id)
            return True
        return False
    source, _ = drive(wl, seed=2, reject=reject)
    per = calls(source)
    subs = [reqs for (kind, _), reqs in per.items() if kind == SUBAGENT]
    assert sorted(len(x) for x in subs) == [1, 2, 2, 2]     # the rejected one stopped; the parent went on
    assert len(per[(SESSION, 0)]) == 3
    source, _ = drive(wl, seed=2, reject=lambda r: r.id == 0)
    assert len(source.requests) == 1


def test_subagent_ids_are_their_own_past_the_shared_prefix():
    source, _ = drive(agentic(n=3, turns=fixed(3), subagents=fan(1.0, count=fixed(3))), seed=4)
    owners = {agent_of(r) for r in source.requests}
    subs = sorted(o for k, o in owners if k == SUBAGENT)
    assert subs == list(range(len(subs)))     # owners numbered in draw order, none skipped
    assert id_base(SUBAGENT, 0) != id_base(SESSION, 0)


def test_run_size_counts_subagent_calls():
    from simulator.runsize import estimate_run_size
    from types import SimpleNamespace

    wl = WorkloadSpec.model_validate(agentic(n=100, turns=fixed(5), subagents=fan(0.5, count=fixed(2),
                                                                               turns=fixed(3))))
    size = estimate_run_size(SimpleNamespace(workload=wl))
    assert size.requests == pytest.approx(100 * (5 + 0.5 * 4 * 2 * 3))


# --- on the real fleet ------------------------------------------------------------------------------------------

SCENARIO = {
    "name": "agents", "seed": 2,
    "workload": agentic(n=6, turns=uniform(3, 6), tool=uniform(100, 1500), task=uniform(300, 800),
                        out=uniform(20, 120), subagents=fan(0.3), pause={"dist": "exponential", "mean": 1.0}),
    "pools": [{"name": "p", "model": "qwen3-30b-a3b", "gpu": "h100-sxm", "replicas": 2,
               "router": {"type": "prefix_aware"}}],
}


def test_the_prefix_cache_serves_the_growing_context(tmp_path, cli):
    """Most of every call after the first is the previous call's prompt + output: the cache hits it."""
    import json

    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(SCENARIO, sort_keys=False))
    r = cli("run", path, "-o", tmp_path / "out", "--no-plots")
    assert r.code == 0, r.err
    res = json.loads((tmp_path / "out" / "results.json").read_text())
    assert res["failed"] == 0
    assert res["llmsim"]["prefix_cache"]["token_hit_rate"] > 0.6


BAD = [
    ("negative-pause", ("session", "pause_s"), fixed(-1), "workload.session.pause_s.value"),
    ("negative-fan-out", ("session", "subagents"), fan(0.5, count=fixed(-1)), "workload.session.subagents.count.value"),
    ("zero-fan-out", ("session", "subagents"), fan(0.5, count=fixed(0)), "workload.session.subagents.count.value"),
    ("probability", ("session", "subagents"), fan(1.5), "workload.session.subagents.probability"),
    ("no-turns", ("session", "turns"), fixed(0), "workload.session.turns.value"),
    ("tool-text", ("session", "tool_result_tokens"), "many", "workload.session.tool_result_tokens"),
    ("window", ("session", "max_context_tokens"), 1, "workload.session.max_context_tokens"),
    ("shares", ("session", "subagents"), fan(0.5, shares="all"), "workload.session.subagents.shares"),
    ("no-task", ("input_tokens",), None, "input_tokens required for agentic sessions"),
]


@pytest.mark.parametrize("path, value, fragment", [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_a_bad_agentic_value_is_one_line_exit_2(tmp_path, cli, path, value, fragment):
    import copy

    data = copy.deepcopy(SCENARIO)
    node = data["workload"]
    for part in path[:-1]:
        node = node[part]
    if value is None:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    refused(cli("run", tmp_path / "s.yaml", "-o", tmp_path / "out"), "s.yaml", fragment)
    assert not (tmp_path / "out").exists()


def test_per_request_dynamic_system_prompt_content_breaks_the_shared_prefix_at_its_token():
    """A timestamp at token 64 of the system prompt: each call (a sub-agent's first included) shares only the
    blocks before it with the call before; everything after gets fresh ids."""
    sp = {"apps": 1, "tokens": fixed(200), "dynamic": {"at_token": 64, "per": "request"}}
    source, _ = drive(agentic(n=3, turns=fixed(4), subagents=fan(1.0, count=fixed(2)), system_prompt=sp), seed=7)
    assert_chained(source.requests)
    per = calls(source)
    cut = 64 // B
    for reqs in per.values():
        for a, b in zip(reqs, reqs[1:]):
            assert b.blocks[:cut] == a.blocks[:cut] and b.blocks[cut] != a.blocks[cut]
    for (kind, owner), reqs in per.items():
        if kind == SUBAGENT:
            parent = per[(SESSION, reqs[0].session)]
            assert all(reqs[0].blocks[cut] not in p.blocks for p in parent)
            assert reqs[0].blocks[:cut] == parent[0].blocks[:cut]


def test_a_subagent_finds_its_parents_context_in_the_replicas_cache(tmp_path, monkeypatch):
    """End to end: routed by session, a sub-agent's first call lands on its parent's replica, and the
    prefix cache serves the parent's context it forked from (every full block of it, on a lightly loaded
    fleet that evicts nothing)."""
    from simulator.notebook import run
    from workloads.drivers import AgenticSessions

    sent, owners = AgenticSessions._send, {}

    def noting(self, *args):    # the runner drops a request's ids when it ends: note whose they were
        req = sent(self, *args)
        owners[req.id] = agent_of(req)
        return req
    monkeypatch.setattr(AgenticSessions, "_send", noting)

    data = {**SCENARIO, "workload": agentic(n=4, turns=fixed(3), tool=uniform(100, 400), task=uniform(300, 600),
                                             out=uniform(20, 60), subagents=fan(1.0, count=fixed(2))),
            "pools": [{"name": "p", "model": "qwen3-30b-a3b", "gpu": "h100-sxm", "replicas": 2,
                       "router": {"type": "session_affinity", "load_factor": 16}}]}   # a plain session hash
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    reqs = run(path).requests
    per: dict = {}
    for r in sorted(reqs, key=lambda r: r.id):
        per.setdefault(owners[r.id], []).append(r)
    firsts = [rs[0] for (kind, _), rs in per.items() if kind == SUBAGENT]
    assert len(firsts) == 4 * 2 * 2
    for first in firsts:
        parent = per[(SESSION, first.session)]
        call = max((p for p in parent if p.finish <= first.arrival), key=lambda p: p.finish)
        fork = call.input_tokens + call.output_tokens
        assert first.replica == call.replica
        # every full block of the fork but, at most, the last: when the parent's output only completes its
        # prompt's last partial block, the cache takes that block as a partial one (PrefixCache.entered_ids)
        assert first.cached_tokens >= (fork // B - 1) * B
