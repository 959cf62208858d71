"""SGLang's decode server's admission (``kv_admission: decode_reservation``), against hand computations.

A disaggregated decode server pre-allocates a handed-over request's prompt KV
only while max(prompt + R, prompt + min(output, clip) − H) fits the free KV
less max(R × active requests, top − H), R the reserved decode tokens, H the
running requests' Σ prompt + output so far and top the largest prompt +
min(output, clip) among them (disaggregation/decode.py pop_preallocated,
_allocatable_tokens). A retracted request waits ahead of every handed-over
one, resumes once its KV but its last token's + R fits the free KV less R
per running request (resume_retracted_reqs), and recomputes only that token
(its KV went to host memory and back). Requests here carry their prompt's KV (``preloaded``)
as a decode leg does; SGLang's page size is one token.
"""
from __future__ import annotations

import pytest

from helpers_engine import cost_model, make_requests, run_open
from simulator.engine.config import EngineConfig
from simulator.errors import LlmsimError
from simulator.fleet.setup import expected_output_admission
from simulator.runner import simulate
from simulator.scenario.schema import Scenario

ENGINES = ["fast", "reference"]


def decode_server(admission: str = "decode_reservation", **kw) -> EngineConfig:
    """SGLang's scheduling (page size 1, chunks in prefill-only batches) without its overheads."""
    return EngineConfig(block_size=1, chunked_prefill=True, mixed_prefill=False, prefix_cache=False,
                        kv_admission=admission, **kw)


def handed_over(arrivals, inputs, outputs):
    """Decode legs: the prompt's KV arrived with each (SGLang streams the prefill's token as it joins)."""
    reqs = make_requests(arrivals, inputs, outputs)
    for r in reqs:
        r.preloaded = r.input_tokens
    return reqs


@pytest.mark.parametrize("engine", ENGINES)
def test_the_reserve_per_running_request_holds_a_prompt_back(engine):
    # 750 tokens, R = 100. A (300 in) passes alone: max(300 + 100, 300 + 50) = 400 ≤ 750. B then has
    # 750 − 300 = 450 free less 100 for A: 350 < 400, and A's growth only lowers it, so B waits for A
    # to end. On demand B's 300 tokens fit beside A at once.
    reqs = handed_over([0.0, 0.0], [300, 300], [50, 50])
    a, b = run_open(engine, reqs, decode_server(reserved_decode_tokens=100), 750).requests
    assert a.admitted == 0.0 and b.admitted == a.finish > 0
    _, b_on_demand = run_open(engine, reqs, decode_server("on_demand"), 750).requests
    assert b_on_demand.admitted == 0.0


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("pool, waits", [(808, True), (809, False)])
def test_the_running_request_must_be_able_to_finish_beside_the_new_one(engine, pool, waits):
    # R = 10. A (100 in, 600 out) runs; B (100 in, 10 out) arrives after A joined. With g tokens of A
    # written A holds 99 + g tokens, H = 100 + g and top = 700: B needs 110 ≤ (pool − 99 − g) −
    # max(10, 700 − 100 − g) = pool − 699 (g ≤ 590), so B joins at once from a pool of 809 and not
    # before A ends from 808 (past g = 590, 641 − g < 110 as well).
    a, b = run_open(engine, handed_over([0.0, 1e-6], [100, 100], [600, 10]),
                    decode_server(reserved_decode_tokens=10), pool).requests
    if waits:
        assert b.admitted == a.finish
    else:
        assert b.admitted < 0.01 < a.finish


@pytest.mark.parametrize("engine", ENGINES)
def test_a_long_estimate_passes_once_the_running_request_has_written_enough(engine):
    # 1,000 tokens, R = 10: A (100 in, 600 out), B (100 in, 400 out) after it. With g tokens of A
    # written, F = 1,000 − 99 − g and H = 100 + g; the binding comparison is B's prompt + estimate
    # − H against F − (top − H): 100 + 400 + 700 ≤ F + 2 H = 1,101 + g, so g ≥ 99, after A's 98th
    # decode (its first token came with its KV); the others hold (110 ≤ F − 10 while g ≤ 781,
    # 110 ≤ F − (top − H) = 301, 400 − H ≤ F − 10).
    a, b = run_open(engine, handed_over([0.0, 1e-6], [100, 100], [600, 400]),
                    decode_server(reserved_decode_tokens=10), 1000).requests
    cm = cost_model()
    assert b.admitted == pytest.approx(a.first_token + sum(cm.step_time([], 1, 101 + i, 1) for i in range(98)),
                                       rel=1e-12)


@pytest.mark.parametrize("engine", ENGINES)
def test_a_retracted_request_resumes_first_with_its_kv_and_holds_the_others_back(engine):
    # 260 tokens, R = 0, clip 10: A and B (100 in, 100 out) both pass (max(100, 110) ≤ 260, then
    # ≤ 160). Holding 200, the pair fills the pool after 30 decodes (131 tokens each with the next);
    # B, the newer of equals, is retracted and waits for 131 tokens while A alone grows past 129
    # free. C (20 in, 5 out) arrives after: its own test passes (20 ≤ 129 − max(0, 110 − 131)) yet it
    # waits behind B, both joining when A ends. B recomputes its last token only: 99 decodes of A,
    # 30 + 68 of B and its one-token resumption, 4 of C.
    probe = run_open(engine, handed_over([0.0, 0.0], [100, 100], [100, 100]),
                     decode_server(reserved_decode_tokens=0, output_estimate_clip=10), 260).requests[0]
    late = probe.finish - 10 * cost_model().step_time([], 1, 190, 1)
    run = run_open(engine, handed_over([0.0, 0.0, late], [100, 100, 20], [100, 100, 5]),
                   decode_server(reserved_decode_tokens=0, output_estimate_clip=10), 260)
    a, b, c = run.requests
    assert (a.preemptions, b.preemptions) == (0, 1)
    assert c.admitted == a.finish > late
    assert run.stats()[0]["tokens_processed"] == 99 + 30 + 1 + 68 + 4
    on_demand = run_open(engine, handed_over([0.0, 0.0, late], [100, 100, 20], [100, 100, 5]),
                         decode_server("on_demand"), 260)
    assert on_demand.stats()[0]["tokens_processed"] == 99 + 30 + 131 + 68 + 4    # B re-prefilled


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("pool, retractions", [(260, 1), (261, 1)])
def test_a_retracted_request_resumes_on_its_kv_less_its_last_token(engine, pool, retractions):
    # R = 0, clip 10: A and B (100 in, 100 out) fill the pool after 30 decodes, and B (the newer of
    # equals) is retracted with 131 tokens, prompt + output; SGLang tests its resumption on 130, its last
    # token's KV written by its next decode (_prealloc_required_tokens over _pre_alloc_fill_len). A holds
    # 131: from 261 tokens SGLang would resume B at once (130 <= 130 free) and, both then needing a token
    # more, retract it again; llmsim allocates the last token with the rest, so B also needs its 131
    # blocks free and waits for A to end, as from 260 (the pool never holds more than it has).
    run = run_open(engine, handed_over([0.0, 0.0], [100, 100], [100, 100]),
                   decode_server(reserved_decode_tokens=0, output_estimate_clip=10), pool)
    assert [r.preemptions for r in run.requests] == [0, retractions]


@pytest.mark.parametrize("engine", ENGINES)
def test_sglang_to_0_5_11_resumes_a_retracted_request_on_all_its_kv(engine):
    # As above, but SGLang to 0.5.11 tests required_tokens_for_request = len(origin_input_ids) +
    # len(output_ids) + num_reserved_decode_tokens (resume_retracted_reqs; read in 0.5.6, 0.5.9,
    # 0.5.10, 0.5.11): B's 131 tokens do not fit the 130 a pool of 261 leaves beside A, so B
    # waits for A to end and is retracted once, not twice.
    run = run_open(engine, handed_over([0.0, 0.0], [100, 100], [100, 100]),
                   decode_server(reserved_decode_tokens=0, output_estimate_clip=10,
                                 resume_without_last_token=False), 261)
    assert [r.preemptions for r in run.requests] == [0, 1]


@pytest.mark.parametrize("version, less", [("0.5.9", False), ("0.5.11", False), ("0.5.12", True),
                                           ("0.5.23", True)])
def test_the_sglang_release_picks_the_resumption_test(version, less):
    from simulator.scenario.schema import PoolSpec

    pool = {"model": "llama-3-8b", "gpu": "h100-sxm", "engine": {"backend": "sglang", "backend_version": version}}
    assert PoolSpec.model_validate(pool).engine.resume_without_last_token is less


def test_the_decode_pool_of_an_sglang_pair_reserves_and_others_refuse_it():
    e = decode_server("expected_output", reserved_decode_tokens=64)
    assert expected_output_admission(e, 1, decodes_for_another=True).kv_admission == "decode_reservation"
    with pytest.raises(LlmsimError, match="this pool does not run it"):
        expected_output_admission(e, 1, decodes_for_another=False)
    with pytest.raises(LlmsimError, match="decode_pool"):
        expected_output_admission(decode_server(), 1, decodes_for_another=False)
    with pytest.raises(ValueError, match="multi-step"):
        EngineConfig(kv_admission="decode_reservation", chunked_prefill=False, mixed_prefill=False,
                     num_scheduler_steps=2)


def pair(decode_engine: dict) -> Scenario:
    return Scenario.model_validate({
        "name": "sglang-pd", "seed": 1,
        "workload": {"num_requests": 2, "arrival": {"type": "poisson", "rate_per_s": 1000},
                     "input_tokens": {"dist": "fixed", "value": 2000},
                     "output_tokens": {"dist": "fixed", "value": 500}},
        "pools": [{"name": "prefill", "model": "llama-3.1-8b", "gpu": "h100-sxm", "replicas": 1,
                   "engine": {"backend": "sglang"}, "disaggregation": {"decode_pool": "decode"}},
                  {"name": "decode", "model": "llama-3.1-8b", "gpu": "h100-sxm", "replicas": 1,
                   "engine": {"backend": "sglang", "num_gpu_blocks_override": 4600, **decode_engine}}],
        "classes": [{"name": "chat", "pool": "prefill"}]})


@pytest.mark.parametrize("engine", ENGINES)
def test_an_sglang_decode_pool_holds_the_second_prompt_until_the_first_ends(engine):
    # 4,600 tokens of decode KV. The first request (2,000 in, 500 out) holds 2,000 + g; the second
    # needs 2,000 + 512 against 4,600 − 2,000 − (g − 1) − 512: it waits for the first to end, where
    # on demand its 2,000 tokens fit beside the first's at once.
    first, second = sorted(simulate(pair({}), engine=engine).requests, key=lambda r: r.arrival)
    assert second.first_token == pytest.approx(first.finish, rel=1e-12)
    first, second = sorted(simulate(pair({"kv_admission": "on_demand"}), engine=engine).requests,
                           key=lambda r: r.arrival)
    assert second.first_token < 0.5 * first.finish
