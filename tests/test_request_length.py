"""A request held to its deployment's length limit as the stack counts it (engine/request_length.py).

SGLang's tokenizer adds an EAGLE-style draft's slots, k + 1 for a chain of k, to the prompt before it
compares prompt + max_new_tokens with the context (tokenizer_manager.py _validate_one_request,
num_reserved_tokens; to 0.5.7 any draft's speculative_num_draft_tokens), and to 0.5.10 it refuses a
request of the whole context too (>= context_len, > from 0.5.11). llmsim compared prompt + output
with the context alone, so such requests were served.

TensorRT-LLM's executor runs max_seq_len + 1 under its overlap scheduler, and under speculative decoding
adds the draft tokens (twice with the overlap scheduler) and an MTP chain's extra KV tokens
(py_executor_creator.py create_py_executor); its worker cuts an output to that max_seq_len - prompt
(base_worker.py _deduce_max_tokens). llmsim cut it at the launch's max_seq_len.
"""
from __future__ import annotations

import pytest

from simulator.costmodel.speculative import SpeculativeSpec
from simulator.scenario.schema import PoolSpec

POOL = {"model": "llama-3.1-8b", "gpu": "h100-sxm"}
DRAFT = {"draft_model": "llama-3.2-1b", "k": 3, "acceptance_rate": 0.7}
MTP = {"draft_model": "mtp", "k": 3, "acceptance_rate": 0.7}


def _engine(version: str, speculative: dict | None = None):
    pool = {**POOL, "engine": {"backend": "sglang", "backend_version": version}}
    return PoolSpec.model_validate({**pool, **({"speculative": speculative} if speculative else {})}).engine


@pytest.mark.parametrize("version, speculative, slots, whole", [
    ("0.5.4", MTP, 4, True), ("0.5.7", DRAFT, 4, True),      # to 0.5.7: any draft's draft tokens
    ("0.5.8", DRAFT, 0, True), ("0.5.8", MTP, 4, True),      # from 0.5.8: EAGLE-style only, not STANDALONE
    ("0.5.10", None, 0, True), ("0.5.11", MTP, 4, False), ("0.5.23", DRAFT, 0, False), ("0.5.23", None, 0, False)])
def test_sglang_counts_what_its_release_counts_against_the_context(version, speculative, slots, whole):
    from simulator.engine.request_length import draft_slots, longest_total

    e = _engine(version, speculative)
    spec = SpeculativeSpec(**speculative) if speculative else None
    assert draft_slots(e, spec) == slots and e.refuses_full_context is whole
    assert longest_total(e, spec, 4096) == 4096 - slots - whole


def _statuses(version: str, speculative: dict | None) -> dict[bool, set[str]]:
    """Each request's end (finished, or rejected and why) by whether its 3,000 + output tokens pass
    what ``longest_total`` gives the pool: outputs drawn around 1,094 straddle every boundary below."""
    from simulator.engine.request_length import longest_total
    from simulator.runner import simulate
    from simulator.scenario.schema import Scenario

    pool = {"name": "main", **POOL, "engine": {"backend": "sglang", "backend_version": version, "max_model_len": 4096}}
    sc = Scenario.model_validate({
        "name": "len", "seed": 3, "workload": {
            "arrival": {"type": "poisson", "rate_per_s": 2}, "num_requests": 40,
            "input_tokens": {"dist": "fixed", "value": 3000},
            "output_tokens": {"dist": "normal", "mean": 1094, "std": 3}},
        "pools": [{**pool, **({"speculative": speculative} if speculative else {})}]})
    e = sc.pools[0].engine
    longest = longest_total(e, SpeculativeSpec(**speculative) if speculative else None, 4096)
    out: dict[bool, set[str]] = {True: set(), False: set()}
    for r in simulate(sc).requests:
        out[3000 + r.output_tokens > longest].add(r.reject_reason.name.lower() if r.reject_reason else r.status.name)
    return out


@pytest.mark.parametrize("version, speculative, longest", [
    ("0.5.7", DRAFT, 4091), ("0.5.8", DRAFT, 4095), ("0.5.8", None, 4095), ("0.5.11", None, 4096)])
def test_a_request_past_what_sglang_takes_is_rejected_on_arrival(version, speculative, longest):
    """Past 3,000 + 1,091 tokens on 0.5.7 beside a draft model (its 4 slots, and a request of the
    whole 4,096-token context refused), past 3,000 + 1,095 on 0.5.8-0.5.10, past 3,000 + 1,096 from
    0.5.11, a request is rejected as too long; the shorter ones finish."""
    from simulator.engine.request_length import longest_total

    spec = SpeculativeSpec(**speculative) if speculative else None
    assert longest_total(_engine(version, speculative), spec, 4096) == longest
    assert _statuses(version, speculative) == {True: {"too_long"}, False: {"FINISHED"}}


def test_a_bounded_workload_sglang_would_refuse_names_the_draft_slots():
    from simulator.errors import LlmsimError
    from simulator.scenario.compile import compile_scenario
    from simulator.scenario.schema import Scenario

    sc = Scenario.model_validate({
        "name": "len", "workload": {"arrival": {"type": "poisson", "rate_per_s": 2}, "num_requests": 2,
                                    "input_tokens": {"dist": "fixed", "value": 3000},
                                    "output_tokens": {"dist": "fixed", "value": 1094}},
        "pools": [{"name": "main", **POOL, "speculative": DRAFT,
                   "engine": {"backend": "sglang", "backend_version": "0.5.7", "max_model_len": 4096}}]})
    with pytest.raises(LlmsimError) as e:
        compile_scenario(sc)
    assert e.value.key_path == "workload.input_tokens"
    assert "of which a request takes 4091 (the draft's 4 slots counted with the prompt; a request of the " \
           "whole context refused)" in e.value.message
    compile_scenario(sc.model_copy(update={"pools": [sc.pools[0].model_copy(update={"speculative": None})]}))


@pytest.mark.parametrize("speculative, prefill, seq_len", [
    (None, False, 4097), (DRAFT, False, 4096 + 1 + 3 + 3), (MTP, False, 4096 + 1 + 3 + 2 + 3),
    (DRAFT, True, 4096 + 3), (None, True, 4096)])
def test_trtllms_executor_lengthens_max_seq_len_for_its_overlap_scheduler_and_drafts(speculative, prefill, seq_len):
    """A disaggregated context server runs without the overlap scheduler (the trtllm backend's
    prefill_server: schedule_ahead false), so its executor adds neither the overlap's token nor the
    drafts again; a prefill pool had kept them."""
    from simulator.engine.request_length import executor_seq_len

    role = {"disaggregation": {"decode_pool": "dec"}} if prefill else {}
    e = PoolSpec.model_validate({**POOL, **role, "engine": {"backend": "trtllm"}}).engine
    assert e.plans_ahead is not prefill
    assert executor_seq_len(e, SpeculativeSpec(**speculative) if speculative else None, 4096) == seq_len


@pytest.mark.parametrize("prompt, refused", [(4095, False), (4096, True)])
def test_a_trtllm_prefill_pool_holds_a_prompt_to_the_context_servers_max_seq_len(prompt, refused):
    """TensorRT-LLM's worker refuses a context-only request under the overlap scheduler (1.0-era
    base_worker.py _enqueue_request), so a context server runs without it, at the launch's max_seq_len:
    a 4,096-token prompt leaves no output token there; the prefill pool kept the overlap's 4,097 and
    passed it. A pool asking for the overlap scheduler there is refused, naming its key."""
    from pydantic import ValidationError
    from simulator.errors import error_loc

    pool = {"engine": {"backend": "trtllm", "max_model_len": 4096}, "disaggregation": {"decode_pool": "dec"}}
    said = _compiled(pool, num_requests=2, input_tokens={"dist": "fixed", "value": prompt},
                     output_tokens={"dist": "fixed", "value": 20})
    assert (said is not None) is refused
    if refused:
        assert said[0] == "workload.input_tokens" and "leaving no output token" in said[1]
    with pytest.raises(ValidationError) as e:
        _compiled({**pool, "engine": {**pool["engine"], "schedule_ahead": True}}, num_requests=2,
                  input_tokens={"dist": "fixed", "value": 100}, output_tokens={"dist": "fixed", "value": 20})
    (err,) = e.value.errors()
    assert error_loc(err) == ("pools", 0, "engine", "schedule_ahead") and "Context only requests" in err["msg"]


@pytest.mark.parametrize("engine, plans_ahead", [
    ({"prefix_cache": False, "schedule_ahead": True}, True),
    ({"prefix_cache": False}, True),            # the stack's default, which its server takes there
    ({"prefix_cache": False, "schedule_ahead": True, "backend_version": "1.3.0rc1"}, None),
    ({"prefix_cache": False, "backend_version": "1.2.1"}, False),
    ({"schedule_ahead": True, "backend_version": "1.3.0rc15"}, None),     # beside block reuse: refused
    ({}, False)])
def test_a_trtllm_context_server_overlaps_from_10755_on_without_block_reuse(engine, plans_ahead):
    """#10755 (1.3.0rc2 on) refuses a context-only request under the overlap scheduler only with KV
    block reuse on (executor/base_worker.py _enqueue_request): a launch with it off runs the context
    server overlapped, its default, which the prefill pool had refused (when asked) or turned off."""
    from pydantic import ValidationError

    pool = {**POOL, "disaggregation": {"decode_pool": "dec"}, "engine": {"backend": "trtllm", **engine}}
    if plans_ahead is None:
        with pytest.raises(ValidationError, match="Context only requests"):
            PoolSpec.model_validate(pool)
    else:
        assert PoolSpec.model_validate(pool).engine.plans_ahead is plans_ahead


@pytest.mark.parametrize("speculative, served", [(DRAFT, 4103 - 3000), (None, 4097 - 3000)])
def test_trtllm_cuts_the_output_at_the_executors_max_seq_len(speculative, served):
    """3,000 + 2,000 tokens at max_seq_len 4,096: beside a 3-token draft model the executor runs
    4,103, so the worker grants 1,103 output tokens, where llmsim cut them to 1,096."""
    from simulator.runner import simulate
    from simulator.scenario.schema import Scenario

    sc = Scenario.model_validate({
        "name": "len", "workload": {"arrival": {"type": "poisson", "rate_per_s": 2}, "num_requests": 2,
                                    "input_tokens": {"dist": "fixed", "value": 3000},
                                    "output_tokens": {"dist": "fixed", "value": 2000}},
        "pools": [{"name": "main", **POOL, **({"speculative": speculative} if speculative else {}),
                   "engine": {"backend": "trtllm", "max_model_len": 4096}}]})
    out = simulate(sc)
    assert {r.output_tokens for r in out.requests} == {served}
    assert out.results["llmsim"]["pools"]["main"]["outputs_clipped"] == 2


def _compiled(pool: dict, speculative: dict | None = None, **workload):
    """compile_scenario's refusal (its key path and message), or None where it compiles."""
    from simulator.errors import LlmsimError
    from simulator.scenario.compile import compile_scenario
    from simulator.scenario.schema import Scenario

    dec = [{"name": "dec", **POOL, "engine": pool["engine"]}] if "disaggregation" in pool else []
    sc = Scenario.model_validate({
        "name": "len", "workload": {"arrival": {"type": "poisson", "rate_per_s": 2}, **workload},
        **({"classes": [{"name": "all", "pool": "main"}]} if dec else {}),
        "pools": [{"name": "main", **POOL, **pool, **({"speculative": speculative} if speculative else {})}, *dec]})
    try:
        compile_scenario(sc)
    except LlmsimError as e:
        return e.key_path, e.message
    return None


@pytest.mark.parametrize("version, speculative, second_turn, refused", [
    ("0.5.11", None, 4096, False), ("0.5.10", None, 4096, True), ("0.5.7", None, 4093, False),
    ("0.5.7", DRAFT, 4093, True)])
def test_a_sessions_turns_are_held_to_what_sglang_takes(version, speculative, second_turn, refused):
    """A chat's second turn (a system prompt, two turns of 2,020 + 20 tokens) of the whole 4,096-token
    context is taken from 0.5.11, refused to 0.5.10; one of 4,093 is taken on 0.5.7, but not beside a draft
    model, whose 4 slots it counts with the prompt. The session check held the turns to the bare 4,096."""
    pool = {"engine": {"backend": "sglang", "backend_version": version, "max_model_len": 4096}}
    said = _compiled(pool, speculative, num_sessions=2,
                     session={"type": "chat", "turns": {"dist": "fixed", "value": 2},
                              "think_time_s": {"dist": "fixed", "value": 1.0}},
                     system_prompt={"apps": 1, "tokens": {"dist": "fixed", "value": second_turn - 2 * 2040}},
                     input_tokens={"dist": "fixed", "value": 2020}, output_tokens={"dist": "fixed", "value": 20})
    if not refused:
        assert said is None
        return
    assert said is not None and said[0] == "workload.session.turns"
    assert "history passes the 4,096-token context of pool 'main', of which a request takes " \
           f"{4091 if speculative else 4095} (" in said[1] and "after at most 1 turns" in said[1]
    assert ("the draft's 4 slots" in said[1]) is (speculative is not None)


@pytest.mark.parametrize("system_prompt, refused", [(3996, False), (3997, True)])
def test_a_system_prompt_is_held_to_trtllms_executor_max_seq_len(system_prompt, refused):
    """A 4,096-token prompt (system prompt and input) leaves TensorRT-LLM's executor, at max_seq_len 4,096 + 1
    under its overlap scheduler, one output token, which it serves (the session check refused it, holding the
    prompt and one token to the launch's 4,096); a prompt of 4,097 leaves none."""
    pool = {"engine": {"backend": "trtllm", "max_model_len": 4096}}
    said = _compiled(pool, num_requests=2, system_prompt={"apps": 1, "tokens": {"dist": "fixed", "value": system_prompt}},
                     input_tokens={"dist": "fixed", "value": 100}, output_tokens={"dist": "fixed", "value": 20})
    if not refused:
        assert said is None
        return
    assert said is not None and said[0] == "workload.system_prompt.tokens"
    assert "context of pool 'main' (the executor's max_seq_len 4097)" in said[1]


@pytest.mark.parametrize("prompt, refused", [(4089, False), (4090, True)])
def test_the_workload_check_refuses_a_prompt_within_five_tokens_of_sglangs_max_req_len(prompt, refused):
    """SGLang answers a prompt of max_req_len - 5 tokens or more with an error, max_req_len being the
    context less one (tp_worker.py get_worker_info; managers/utils.py validate_input_length), as the
    replica rejects it on arrival; the workload check passed a 4,090-token prompt with 2 output tokens,
    below the 4,096-token context, and so did the session check a second turn of such a prompt."""
    pool = {"engine": {"backend": "sglang", "backend_version": "0.5.11", "max_model_len": 4096}}
    said = _compiled(pool, num_requests=2, input_tokens={"dist": "fixed", "value": prompt},
                     output_tokens={"dist": "fixed", "value": 2})
    assert (said is not None) is refused
    if refused:
        assert said[0] == "workload.input_tokens"
        assert "a prompt of more than 4,089 tokens is refused (SGLang's max_req_len 4,095 less 5)" in said[1]
    said = _compiled(pool, num_sessions=2, session={"type": "chat", "turns": {"dist": "fixed", "value": 2},
                                                    "think_time_s": {"dist": "fixed", "value": 1.0}},
                     system_prompt={"apps": 1, "tokens": {"dist": "fixed", "value": prompt - 2 * 2000 - 2}},
                     input_tokens={"dist": "fixed", "value": 2000}, output_tokens={"dist": "fixed", "value": 2})
    assert (said is not None) is refused
    if refused:
        assert said[0] == "workload.session.turns" and "after at most 1 turns" in said[1]
    from simulator.engine.request_length import length_limit

    lim = length_limit(_engine("0.5.11"), None, 4096)      # the replica's arrival check asks the same rule
    assert lim.prompt_refused(prompt) is refused     # and below a rank's pool, against the pool's max_req_len
    assert lim.prompt_refused(4084, 4089) and not lim.prompt_refused(4083, 4089)
