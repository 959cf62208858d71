"""Workload drivers: sessions, system prompts and the block-id contract.

Every source is driven by a tiny fake fleet (each request served in a fixed
time, no queueing; cancel ends a request at once), so the checks are about
what the workload sends and when, not about the engine. Hypothesis runs
derandomized, as in test_workloads.py.
"""
from __future__ import annotations

import itertools
from types import SimpleNamespace
import json
from pathlib import Path

import numpy as np
import pytest
import simpy
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from simulator.errors import from_validation_error
from workloads import WorkloadSpec, make_source, spawn_streams
from workloads.autocomplete import typing_requests
from workloads.block_ids import APP, id_base
from workloads.request import Request, Status

FAST = settings(derandomize=True, max_examples=25, deadline=None)
POISSON = {"type": "poisson", "rate_per_s": 2.0}


def fixed(v):
    return {"dist": "fixed", "value": v}


def uniform(lo, hi):
    return {"dist": "uniform", "min": lo, "max": hi}


class FakeFleet:
    """Serves every request in ``service`` seconds; ``reject(req)`` refuses one on arrival.

    It checks the driver protocol as it goes: requests arrive at their own
    arrival time, and ``cancel`` is only ever called once, on a request in flight.
    """

    def __init__(self, env: simpy.Environment, source, service: float = 1.0, reject=lambda r: False):
        self.env, self.source, self.service, self.reject = env, source, service, reject
        self.inflight: set[int] = set()
        self.submitted: list[int] = []
        self.cancelled: list[int] = []

    def submit(self, req: Request) -> None:
        assert req.arrival == self.env.now and req.status == Status.PENDING
        self.submitted.append(req.id)
        if self.reject(req):
            self._end(req, Status.REJECTED)
            return
        self.inflight.add(req.id)
        self.env.timeout(self.service).callbacks.append(lambda _ev: self._finish(req))

    def _finish(self, req: Request) -> None:
        if req.status == Status.PENDING:
            self.inflight.discard(req.id)
            self._end(req, Status.FINISHED)

    def cancel(self, req: Request) -> None:
        assert req.id in self.inflight, f"cancel of request {req.id}, which is not in flight"
        self.inflight.discard(req.id)
        self.cancelled.append(req.id)
        self._end(req, Status.CANCELLED)

    def _end(self, req: Request, status: Status) -> None:
        req.status = status
        req.finish = self.env.now
        self.source.on_done(req)


def drive(workload: dict, seed: int = 0, service: float = 1.0, base_dir: Path | None = None, reject=lambda r: False):
    source = make_source(WorkloadSpec.model_validate(workload), seed, base_dir)
    env = simpy.Environment()
    fleet = FakeFleet(env, source, service, reject)
    source.start(env, fleet.submit, fleet.cancel)
    env.run()
    assert [r.id for r in source.requests] == list(range(len(source.requests)))
    assert sorted(fleet.submitted) == list(range(len(source.requests)))
    assert all(r.status != Status.PENDING for r in source.requests)
    assert not getattr(source, "live", {})  # every session ran to its end
    return source, fleet


def chat(n=6, turns=uniform(1, 5), think={"dist": "exponential", "mean": 3.0}, inp=uniform(5, 60),
         out=uniform(1, 80), system_prompt=None, **session) -> dict:
    wl = dict(num_sessions=n, arrival=POISSON, input_tokens=inp, output_tokens=out,
              session={"type": "chat", "turns": turns, "think_time_s": think, **session})
    if system_prompt is not None:
        wl["system_prompt"] = system_prompt
    return wl


def autocomplete(n=4, system_prompt=None, **session) -> dict:
    base = dict(file_tokens=uniform(100, 400), bursts=uniform(1, 4), keystrokes=uniform(1, 12),
                keystroke_gap_s={"dist": "exponential", "mean": 0.1}, burst_gap_s={"dist": "exponential", "mean": 2})
    wl = dict(num_sessions=n, arrival=POISSON, output_tokens=uniform(5, 40),
              session={"type": "autocomplete", **base, **session})
    if system_prompt is not None:
        wl["system_prompt"] = system_prompt
    return wl


def by_session(requests: list[Request]) -> dict[int, list[Request]]:
    out: dict[int, list[Request]] = {}
    for r in requests:
        out.setdefault(r.session, []).append(r)
    return out


def common_prefix(a: tuple, b: tuple) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def assert_chained(requests: list[Request]) -> None:
    """Any two requests' ids agree on a prefix and never again, except a
    lone request's placeholders (negative, only after its own first id,
    which no other request carries); an id names one position."""
    where: dict[int, int] = {}
    for r in requests:
        own = getattr(r, "shared_ids", None)
        for j, b in enumerate(r.blocks):
            assert where.setdefault(b, j) == j, f"id {b} at positions {where[b]} and {j}"
            assert b >= 0 or (own is not None and j > own), f"placeholder {b} at {j} in request {r.id}"
    for a, b in itertools.combinations(requests, 2):
        d = common_prefix(a.blocks, b.blocks)
        assert not any(x == y and x >= 0 for x, y in zip(a.blocks[d:], b.blocks[d:])), (a.id, b.id, d)
        for r in (a, b):
            own = getattr(r, "shared_ids", None)
            if own is not None and own < len(r.blocks):
                assert d <= own, f"request {r.id}'s own first id is shared"


def sys_prompt(apps, tokens, popularity=None) -> dict:
    out = {"apps": apps, "tokens": tokens}
    if popularity is not None:
        out["popularity"] = popularity
    return out


# ------------------------------------------------------------------- chat


chat_cases = st.builds(
    lambda n, t, lo, span, olo, ospan, sp, think: chat(
        n=n, turns=uniform(1, t), inp=uniform(lo, lo + span), out=uniform(olo, olo + ospan), system_prompt=sp,
        think=fixed(think)),
    st.integers(1, 8), st.integers(1, 6), st.integers(1, 40), st.integers(0, 60), st.integers(1, 40),
    st.integers(0, 60),
    st.none() | st.builds(sys_prompt, st.integers(1, 3), st.builds(uniform, st.integers(1, 50), st.integers(50, 90))),
    st.floats(0, 5))


@FAST
@given(wl=chat_cases, seed=st.integers(0, 2**31), service=st.floats(0.01, 3))
def test_chat_turns_resend_the_history_after_the_think_time(wl, seed, service):
    source, _ = drive(wl, seed, service)
    B = source.block_tokens
    think = wl["session"]["think_time_s"]["value"]
    lo, hi = wl["input_tokens"]["min"], wl["input_tokens"]["max"]
    assert B == 16
    for turns in by_session(source.requests).values():
        for r in turns:
            assert len(r.blocks) == (r.input_tokens + r.output_tokens) // B
        for a, b in zip(turns, turns[1:]):
            assert b.blocks[: len(a.blocks)] == a.blocks          # all of turn k's ids, response included
            assert lo <= b.input_tokens - a.input_tokens - a.output_tokens <= hi   # + one new message
            assert b.arrival == pytest.approx(a.finish + think)
            assert a.finish == pytest.approx(a.arrival + service)
    assert_chained(source.requests)


@FAST
@given(wl=chat_cases, seed=st.integers(0, 2**31))
def test_chat_ids_are_equal_exactly_where_the_prefixes_are(wl, seed):
    """Same id at j ⇔ same tokens [0, (j+1)·B): same session, or same app inside its system prompt."""
    source, _ = drive(wl, seed)
    B, apps = source.block_tokens, source.apps
    app = {s: source.plans(s).app for s in by_session(source.requests)}  # all in the first plan chunk
    for a, b in itertools.combinations(source.requests, 2):
        same_app = apps is not None and app[a.session] == app[b.session]
        head = apps.tokens[app[a.session]] if same_app else 0
        for j, (x, y) in enumerate(zip(a.blocks, b.blocks)):
            assert (x == y) == (a.session == b.session or (j + 1) * B <= head), (a.id, b.id, j)


def test_system_prompt_blocks_are_shared_within_an_app_only():
    # 40-token system prompts: blocks 0-1 are the app's, block 2 straddles into the user's message.
    source, _ = drive(chat(n=40, system_prompt=sys_prompt(3, fixed(40), {"type": "zipf", "s": 1.1})), seed=3)
    firsts = {}
    for r in source.requests:
        firsts.setdefault(r.blocks[:2], set()).add(r.session)
    assert len(firsts) == 3  # every app used, each with its own two ids
    assert {b for head in firsts for b in head} == {id_base(APP, a) + j for a in range(3) for j in range(2)}
    starts = {}
    for s, turns in by_session(source.requests).items():
        starts[s] = turns[0].blocks
    for (s1, b1), (s2, b2) in itertools.combinations(starts.items(), 2):
        assert common_prefix(b1, b2) == (2 if b1[:2] == b2[:2] else 0)
    sizes = sorted(len(v) for v in firsts.values())
    assert sizes[-1] > sizes[0]  # zipf: the top app has more sessions than the last


def test_chat_session_ends_when_a_turn_is_rejected_or_context_is_full():
    wl = chat(n=20, turns=fixed(8), inp=fixed(100), out=fixed(100))
    full, _ = drive(wl)
    assert all(len(t) == 8 for t in by_session(full.requests).values())
    rejected, fleet = drive(wl, reject=lambda r: r.input_tokens > 350)  # turn 2 has 500 tokens
    sessions = by_session(rejected.requests)
    assert all(len(t) == 3 and t[-1].status == Status.REJECTED for t in sessions.values())
    capped, _ = drive(chat(n=20, turns=fixed(8), inp=fixed(100), out=fixed(100), max_context_tokens=450))
    assert all(len(t) == 2 for t in by_session(capped.requests).values())  # turn 2 would need 600


def test_chat_content_does_not_depend_on_the_fleet():
    """A slower fleet only moves turns in time: same sessions, same lengths and ids."""
    wl = chat(n=30)

    def content(source):
        return {s: [(r.input_tokens, r.output_tokens, r.blocks) for r in t]
                for s, t in by_session(source.requests).items()}

    fast, _ = drive(wl, seed=5, service=0.1)
    slow, _ = drive(wl, seed=5, service=20.0)
    assert content(fast) == content(slow)
    assert [r.arrival for r in fast.requests] != [r.arrival for r in slow.requests]


def test_more_sessions_extend_rather_than_reshuffle():
    def content(n):
        source, _ = drive(chat(n=n), seed=11)
        return [(r.session, r.arrival, r.input_tokens, r.output_tokens, r.blocks)
                for r in source.requests if r.session < 5]

    assert content(5) == content(300)  # 300 sessions span two plan chunks


# ---------------------------------------------------------------- autocomplete


autocomplete_cases = st.builds(
    lambda n, jump, tpk, debounce, sp: autocomplete(n=n, jump_probability=jump, tokens_per_keystroke=tpk,
                                                    debounce_ms=debounce, system_prompt=sp),
    st.integers(1, 4), st.sampled_from([0.0, 0.3, 1.0]), st.sampled_from([0.25, 1.0, 7.0]),
    st.sampled_from([0.0, 50.0, 200.0]),
    st.none() | st.builds(sys_prompt, st.integers(1, 2), st.builds(uniform, st.integers(1, 30), st.integers(30, 70))))


@FAST
@given(wl=autocomplete_cases, seed=st.integers(0, 2**31), service=st.floats(0.01, 0.5))
def test_autocomplete_prompts_share_all_blocks_before_the_edit(wl, seed, service):
    source, fleet = drive(wl, seed, service)
    B = source.block_tokens
    assert_chained(source.requests)
    seen: set[int] = set()
    for turns in by_session(source.requests).values():
        for r in turns:
            assert len(r.blocks) == (r.input_tokens + r.output_tokens) // B
        for a, b in zip(turns, turns[1:]):
            assert b.arrival >= a.arrival
            shared = common_prefix(a.blocks, b.blocks)
            assert shared <= a.input_tokens // B  # a's output blocks are never in a later prompt
            if wl["session"]["jump_probability"] == 0:
                # the edit is at a's cursor: every block before the cursor's is kept (one fewer
                # only when the cursor sat on the file's first token, sent as a 1-token prompt)
                assert a.input_tokens // B - 1 <= shared <= a.input_tokens // B <= b.input_tokens // B
        for r in turns:  # from the first difference on, a prompt's ids are new
            prev = [q for q in turns if q.id < r.id]
            keep = max((common_prefix(q.blocks, r.blocks) for q in prev), default=0)
            assert not seen.intersection(r.blocks[keep:])
            seen.update(r.blocks)
        seen.clear()


@FAST
@given(wl=autocomplete_cases, seed=st.integers(0, 2**31), service=st.floats(0.01, 0.5))
def test_autocomplete_cancels_exactly_the_stale_in_flight_requests(wl, seed, service):
    source, fleet = drive(wl, seed, service)
    assert len(set(fleet.cancelled)) == len(fleet.cancelled)  # FakeFleet also asserts in flight
    cancelled = set(fleet.cancelled)
    for turns in by_session(source.requests).values():
        for a, b in zip(turns, turns[1:]):
            stale = a.arrival + service > b.arrival
            assert (a.id in cancelled) == stale
            if stale:
                assert a.status == Status.CANCELLED and a.finish == b.arrival
        assert turns[-1].status == Status.FINISHED


@FAST
@given(wl=autocomplete_cases, seed=st.integers(0, 2**31), service=st.floats(0.01, 0.5))
def test_autocomplete_without_stale_cancellation_runs_every_request_to_completion(wl, seed, service):
    wl["session"]["cancel_stale"] = False
    source, fleet = drive(wl, seed, service)
    assert not fleet.cancelled
    assert source.requests and all(r.status == Status.FINISHED for r in source.requests)
    wl["session"]["cancel_stale"] = True   # the same sessions send the same requests either way
    again, _ = drive(wl, seed, service)
    assert [(r.arrival, r.input_tokens, r.blocks) for r in again.requests] == \
        [(r.arrival, r.input_tokens, r.blocks) for r in source.requests]


def test_autocomplete_prompt_is_the_file_up_to_the_cursor():
    wl = autocomplete(n=30, file_tokens=uniform(4000, 8000), jump_probability=0.0, tokens_per_keystroke=1.0)
    source, fleet = drive(wl, seed=2, service=0.3)
    sessions = by_session(source.requests)
    for turns in sessions.values():
        lengths = [r.input_tokens for r in turns]
        assert all(1 <= x <= 8000 + 4 * 12 for x in lengths)
        assert lengths == sorted(lengths)  # no jumps: the cursor only moves forward as it types
    assert source.block_tokens == 16 and fleet.cancelled


def test_typing_requests_debounce():
    # one burst: keystrokes at 0, 0.01, 0.2 (gaps 0.01 then 0.19), then a second burst 1 s later
    times, cursors, edits = typing_requests(100, jumps=[0.5, -1], keys=[3, 1], key_gaps=[9, 0.01, 0.19, 9],
                                            burst_gaps=[9, 1.0], tokens_per_keystroke=1.0, debounce_s=0.05)
    assert times == pytest.approx([0.01 + 0.05, 0.2 + 0.05, 1.2 + 0.05])
    assert cursors == [52, 53, 54]  # starts at 50, one token per keystroke
    assert edits == [50, 52, 53]


# ------------------------------------------------------------ open and closed loop


def test_open_loop_system_prompts_prefix_the_user_tokens():
    wl = dict(num_requests=200, arrival=POISSON, input_tokens=uniform(1, 300), output_tokens=uniform(1, 50),
              system_prompt=sys_prompt(4, uniform(10, 200), {"type": "zipf", "s": 2.0}))
    spec = WorkloadSpec.model_validate(wl)
    source, _ = drive(wl, seed=4)
    inp, out = spec.lengths(4, 200)
    apps = spec.draw_apps(spawn_streams(4))
    heads = {ids[0]: t for ids, t in zip(apps.block_ids, apps.tokens) if ids}
    reqs = spec.generate(4)   # the same requests, ids attached up front
    assert [(r.id, r.input_tokens, r.output_tokens, r.blocks) for r in reqs] == \
        [(r.id, r.input_tokens, r.output_tokens, r.blocks) for r in source.requests]
    for r, x in zip(reqs, inp.tolist()):
        assert len(r.blocks) == (r.input_tokens + r.output_tokens) // 16
        assert r.input_tokens - x in apps.tokens
        if r.blocks and r.blocks[0] in heads:
            assert r.input_tokens - x == heads[r.blocks[0]]
    assert_chained(reqs)
    assert [r.arrival for r in source.requests] == spec.arrival_times(4).tolist()


def test_plain_open_loop_has_no_ids_and_matches_generate():
    wl = dict(num_requests=300, arrival=POISSON, input_tokens=uniform(1, 300), output_tokens=uniform(1, 50))
    source, _ = drive(wl, seed=9)
    ref = WorkloadSpec.model_validate(wl).generate(9)
    assert source.block_tokens is None and source.expected_total == 300
    assert [(r.arrival, r.input_tokens, r.output_tokens, r.blocks) for r in source.requests] == \
        [(r.arrival, r.input_tokens, r.output_tokens, None) for r in ref]


@pytest.mark.parametrize("system_prompt", [None, sys_prompt(2, fixed(64))])
def test_closed_loop_sends_the_next_request_as_one_finishes(system_prompt):
    wl = dict(num_requests=50, arrival={"type": "concurrency", "concurrency": 4}, input_tokens=uniform(1, 300),
              output_tokens=uniform(1, 50))
    if system_prompt:
        wl["system_prompt"] = system_prompt
    source, _ = drive(wl, seed=1, service=2.0)
    reqs = source.requests
    assert len(reqs) == 50 and [r.arrival for r in reqs[:4]] == [0.0] * 4
    assert [r.arrival for r in reqs[4:8]] == [2.0] * 4 and reqs[-1].arrival == 24.0
    inp, _ = WorkloadSpec.model_validate(wl).lengths(1, 50)
    extra = 64 if system_prompt else 0
    assert [r.input_tokens for r in reqs] == (inp + extra).tolist()
    assert (reqs[0].blocks is None) == (system_prompt is None)


@pytest.mark.parametrize("wl", [chat(n=10), autocomplete(n=3),
                                chat(n=10, system_prompt=sys_prompt(3, uniform(10, 90)))])
def test_same_seed_same_requests(wl):
    def rows(seed):
        source, fleet = drive(wl, seed)
        return [(r.id, r.arrival, r.input_tokens, r.output_tokens, r.session, r.blocks, r.status)
                for r in source.requests], fleet.cancelled

    assert rows(3) == rows(3)
    assert rows(3) != rows(4)


def test_streams_keep_their_samples_and_stay_clear_of_the_router():
    seed = 12
    children = np.random.SeedSequence(seed).spawn(8)
    s = spawn_streams(seed)
    for stream, child in zip(s[:3], children[:3]):
        assert stream.random() == np.random.default_rng(child).random()
    router = np.random.default_rng(children[7]).random()
    assert router not in {g.random() for g in spawn_streams(seed)}


# ------------------------------------------------------------------ validation


@pytest.mark.parametrize("wl, key", [
    (chat(think={"dist": "exponential", "mean": -1}), "session.think_time_s.mean"),
    (chat(turns={"dist": "fixed", "value": 0}), "session.turns.value"),
    (chat(turns=None), "session.turns"),
    (chat(max_context_tokens=1), "session.max_context_tokens"),
    (chat(think={"dist": "uniform", "min": 2, "max": 1}), "session.think_time_s"),
    (autocomplete(debounce_ms=-5), "session.debounce_ms"),
    (autocomplete(jump_probability=1.5), "session.jump_probability"),
    (autocomplete(keystrokes={"dist": "uniform", "min": 0, "max": 3}), "session.keystrokes.min"),
    (autocomplete(typo=1), "session.typo"),
    ({**chat(), "session": {"type": "voice"}}, "session"),
    ({**chat(), "system_prompt": {"apps": 0, "tokens": fixed(5)}}, "system_prompt.apps"),
    ({**chat(), "system_prompt": {"apps": 2, "tokens": fixed(5), "popularity": {"type": "zipf", "s": 0}}},
     "system_prompt.popularity.s"),
])
def test_bad_session_specs_name_the_key_path(wl, key):
    if wl["session"].get("turns", 1) is None:
        del wl["session"]["turns"]
    with pytest.raises(ValidationError) as err:
        WorkloadSpec.model_validate(wl)
    msg = from_validation_error(err.value, "chat.yaml", wl).render()
    assert msg.startswith(f"chat.yaml: {key}:"), msg


@pytest.mark.parametrize("changes, needle", [
    (dict(num_requests=10), "num_requests is not allowed"),
    (dict(num_sessions=None), "exactly one of num_sessions or duration_s"),
    (dict(duration_s=60.0), "exactly one of num_sessions or duration_s"),
    (dict(input_tokens=None), "input_tokens required for chat"),
    (dict(output_tokens=None), "output_tokens required"),
    (dict(arrival={"type": "concurrency", "concurrency": 3}), "open-loop arrival"),
])
def test_session_stop_rules(changes, needle):
    with pytest.raises(ValidationError) as err:
        WorkloadSpec.model_validate({**chat(), **changes})
    assert needle in str(err.value)


def test_autocomplete_takes_no_input_tokens_and_sessions_need_a_session():
    with pytest.raises(ValidationError, match="remove input_tokens"):
        WorkloadSpec.model_validate({**autocomplete(), "input_tokens": fixed(5)})
    plain = dict(num_sessions=5, arrival=POISSON, input_tokens=fixed(5), output_tokens=fixed(5))
    with pytest.raises(ValidationError, match="num_sessions needs a session"):
        WorkloadSpec.model_validate(plain)


def test_session_workloads_only_run_through_a_source():
    spec = WorkloadSpec.model_validate(chat())
    with pytest.raises(ValueError, match="make_source"):
        spec.generate(0)
    assert spec.id_block_tokens() == 16
    assert WorkloadSpec.model_validate({**autocomplete(), "block_tokens": 32}).id_block_tokens() == 32
    assert len(spec.arrival_times(0)) == 6  # session starts


def test_defaults_give_a_runnable_autocomplete_session():
    spec = WorkloadSpec.model_validate(dict(num_sessions=2, arrival=POISSON, output_tokens=fixed(25),
                                            session={"type": "autocomplete"}))
    assert spec.session.debounce_ms == 50 and spec.session.file_tokens.min == 4000
    source, fleet = drive(spec.model_dump(by_alias=True), seed=0, service=0.3)
    assert len(source.requests) > 10 and fleet.cancelled
    assert WorkloadSpec.model_validate(spec.model_dump(by_alias=True)) == spec


def test_duration_mode_starts_sessions_before_the_end_and_finishes_them():
    wl = {**chat(n=None, turns=fixed(3), think=fixed(10.0)), "num_sessions": None, "duration_s": 5.0}
    source, _ = drive(wl, seed=1)
    sessions = by_session(source.requests)
    assert all(t[0].arrival < 5.0 and len(t) == 3 for t in sessions.values())
    assert max(r.arrival for r in source.requests) > 20.0


def test_yaml_example_from_the_docs(tmp_path):
    """The chat and autocomplete examples of docs and reports stay valid."""
    text = json.dumps(dict(
        num_sessions=50, arrival={"type": "gamma", "rate_per_s": 2, "burstiness": 0.5},
        input_tokens={"dist": "lognormal", "mean": 120, "std": 100, "max": 2000},
        output_tokens={"dist": "lognormal", "mean": 300, "std": 200, "max": 1200},
        system_prompt={"apps": 20, "tokens": {"dist": "uniform", "min": 200, "max": 2000},
                       "popularity": {"type": "zipf", "s": 1.1}},
        session={"type": "chat", "turns": {"dist": "uniform", "min": 1, "max": 8},
                 "think_time_s": {"dist": "lognormal", "mean": 20, "std": 15}, "max_context_tokens": 8192}))
    source, _ = drive(json.loads(text), seed=7)
    assert max(r.input_tokens + r.output_tokens for r in source.requests) <= 8192


def test_a_run_drops_ids_when_requests_end_and_on_end_sees_them_first():
    """Block ids are most of a finished request's memory: simulate() drops
    them as each request ends, after handing it to ``on_end``."""
    from simulator.runner import simulate
    from simulator.scenario.schema import Scenario

    sc = Scenario.model_validate({"name": "t", "seed": 3, "workload": chat(n=8),
                                  "pools": [{"model": "llama-3-8b", "gpu": "h100-sxm"}]})
    seen: dict[int, tuple] = {}
    out = simulate(sc, on_end=lambda r: seen.__setitem__(r.id, r.blocks))
    assert len(out.requests) > 8 and all(r.blocks is None for r in out.requests)
    assert sorted(seen) == [r.id for r in out.requests] and all(seen.values())
    B = sc.workload.id_block_tokens()
    assert all(len(seen[r.id]) == (r.input_tokens + r.output_tokens) // B for r in out.requests)
    assert_chained([SimpleNamespace(id=r.id, blocks=seen[r.id]) for r in out.requests])


# ------------------------------------------------------------------- dynamic content in the system prompt
@FAST
@given(at=st.integers(0, 120), per=st.sampled_from(["request", "session"]), seed=st.integers(0, 2**31),
       chat_wl=st.booleans())
def test_dynamic_content_cuts_the_shared_prefix_where_it_sits(at, per, seed, chat_wl):
    """Content that changes per request (or session) at token ``at`` of a
    100-token system prompt: requests of one app share exactly the blocks
    wholly before it; within a session, per-session content keeps the
    history shared and per-request content breaks it at the same point.
    Lengths do not change, and ids stay chained."""
    sp = {**sys_prompt(1, fixed(100)), "dynamic": {"at_token": at, "per": per}}
    wl = chat(n=5, turns=uniform(2, 4), system_prompt=sp) if chat_wl else autocomplete(n=4, system_prompt=sp)
    plain = chat(n=5, turns=uniform(2, 4), system_prompt=sys_prompt(1, fixed(100))) if chat_wl else \
        autocomplete(n=4, system_prompt=sys_prompt(1, fixed(100)))
    source, _ = drive(wl, seed)
    base, _ = drive(plain, seed)
    assert [(r.input_tokens, r.output_tokens) for r in source.requests] == \
        [(r.input_tokens, r.output_tokens) for r in base.requests]
    B = source.block_tokens
    shared = min(at, 100) // B
    assert_chained(source.requests)
    sessions = by_session(source.requests)
    for a, b in itertools.combinations(source.requests, 2):
        d = common_prefix(a.blocks, b.blocks)
        if a.session != b.session:
            assert d == min(shared, len(a.blocks), len(b.blocks)), (a.id, b.id)
    for turns in sessions.values():
        for a, b in zip(turns, turns[1:]):
            d = common_prefix(a.blocks, b.blocks)
            if per == "request":
                assert d == min(shared, len(a.blocks), len(b.blocks))
            elif chat_wl:   # the session's own stream past the dynamic content is kept: all of turn k
                assert b.blocks[:len(a.blocks)] == a.blocks
            else:
                assert d >= min(shared, len(a.blocks), len(b.blocks))


def test_dau_prefix_breakage_rung_crashes_the_hit_rate():
    """The dau-10m rung: its token hit rate falls by more than 5x (the case
    study: 80 % -> 10 %) and TTFT p99 rises, on the same nodes. A minute
    of traffic: over the first half minute the fleet is still filling and
    the cached run's prefix-affine routing can read the higher p99."""
    from helpers_case_studies import path_of
    from simulator.runner import simulate
    from simulator.scenario.load import load_scenario
    from simulator.scenario.overlays import load_with_variants

    path = path_of("dau-10m")
    sets = ["workload.duration_s=60"]
    sc, _ = load_scenario(path, sets)
    before = simulate(sc, source=path).results
    breakage = [v for v in sc.variants if v.name == "prefix-breakage"]
    after = simulate(load_with_variants(path, breakage, sets), source=path).results
    hb, ha = (r["llmsim"]["prefix_cache"]["token_hit_rate"] for r in (before, after))
    assert ha > 0 and hb > 5 * ha
    assert after["p99_ttft_ms"] > before["p99_ttft_ms"]
