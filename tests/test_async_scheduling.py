"""Async scheduling: the CPU prepares iteration N+1 while the GPU runs N.

Scheduled in turn, an iteration takes its GPU time plus the stack's CPU
time (scheduler, input preparation, sampler, output handling); overlapped,
the CPU time shows only where it outlasts the GPU's. vLLM runs that way by
default from 0.14.0: ``backend: vllm`` is a current release, overlapped, and a
replayed row of an earlier release (or measured before 0.14.0 came out)
schedules in turn.
"""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator.costmodel import CostModel
from simulator.profiles import load_hardware, load_model
from simulator.profiles.backend import load_backend
from simulator.runner import simulate
from simulator.validation.deployment import version_keys
from tests.test_backends import _closed
from tests.test_bad_input import SCENARIO, one_line_error, write_yaml

MODELS = ["llama-3.1-8b", "llama-3.1-70b", "qwen3-30b-a3b", "deepseek-v3"]


def _pair(model: str, tp: int, ms: float, us: float) -> tuple[CostModel, CostModel]:
    m, g = load_model(model), load_hardware("h100-sxm" if model != "deepseek-v3" else "h200")
    tp = 8 if model == "deepseek-v3" else tp
    wd = "fp8" if model == "deepseek-v3" else "bf16"
    kw = dict(iteration_overhead_ms=ms, iteration_us_per_seq=us)
    return CostModel(m, g, tp, wd, **kw), CostModel(m, g, tp, wd, async_scheduling=True, **kw)


@settings(max_examples=40, deadline=None)
@given(model=st.sampled_from(MODELS), tp=st.sampled_from([1, 2, 4]), ms=st.floats(0.0, 20.0),
       us=st.floats(0.0, 200.0), batch=st.integers(1, 512), per_seq_context=st.floats(0.0, 8000.0))
def test_overlap_hides_the_cpu_time_up_to_the_gpu_time(model, tp, ms, us, batch, per_seq_context):
    sync, over = _pair(model, tp, ms, us)
    cpu = (ms * 1e-3 + us * 1e-6 * batch)
    S = batch * per_seq_context
    t_sync, t_over = sync.step_time((), batch, S), over.step_time((), batch, S)
    gpu = t_sync - cpu
    assert t_over <= t_sync + 1e-12
    assert t_over >= max(gpu, cpu) - 1e-12          # never faster than either side alone
    a, _ = over.decode_coefficients(batch)
    gpu_fixed = sync.decode_coefficients(batch)[0] - cpu
    assert a == pytest.approx(max(gpu_fixed, cpu), rel=1e-12, abs=1e-15)
    if S == 0.0:
        assert t_over == pytest.approx(max(gpu, cpu), rel=1e-12, abs=1e-15)


@settings(max_examples=30, deadline=None)
@given(model=st.sampled_from(MODELS), ms=st.floats(0.0, 20.0), us=st.floats(0.0, 200.0),
       batch=st.integers(1, 256), S=st.floats(0.0, 2e6))
def test_an_overlapped_decode_step_stays_affine_in_the_context(model, ms, us, batch, S):
    """The engines advance decodes through (a, b) with step = a + b·S."""
    _, over = _pair(model, 1, ms, us)
    a, b = over.decode_coefficients(batch)
    assert over.step_time((), batch, S) == pytest.approx(a + b * S, rel=1e-9)


def test_without_cpu_time_overlap_changes_nothing():
    sync, over = _pair("llama-3.1-8b", 1, 0.0, 0.0)
    for chunks, b, S in [((), 8, 8000.0), (((512, 0),), 4, 4000.0), (((2048, 1024),), 0, 0.0)]:
        assert over.step_time(chunks, b, S) == sync.step_time(chunks, b, S)
    assert over.step(((512, 0),), 4, 4000.0).overhead_s == 0.0


def test_the_breakdown_shows_only_the_exposed_cpu_time():
    sync, over = _pair("llama-3.1-8b", 1, 2.0, 20.0)
    s, o = sync.step((), 16, 16 * 1000.0), over.step((), 16, 16 * 1000.0)
    assert s.overhead_s == pytest.approx(2e-3 + 16 * 20e-6)
    assert o.total_s - o.overhead_s == pytest.approx(s.total_s - s.overhead_s)   # the same GPU work
    assert 0.0 <= o.overhead_s < s.overhead_s
    assert o.total_s == pytest.approx(over.step_time((), 16, 16 * 1000.0))


def test_a_closed_loop_decodes_faster_when_the_cpu_overlaps():
    """A small model whose GPU step is a few ms: vLLM's fitted 1.7 ms of
    CPU time per iteration is most of the difference in TPOT."""
    sync = simulate(_closed(8, 32, 512, 64, {"backend": "vllm", "backend_version": "0.13.0"})).results["mean_tpot_ms"]
    over = simulate(_closed(8, 32, 512, 64, {"backend": "vllm"})).results["mean_tpot_ms"]
    assert sync - 2.0 < over < sync - 1.0


@pytest.mark.parametrize("stack, version, expected", [
    ("vllm", "0.12.0", False), ("vllm", "0.13.0", False), ("vllm", "0.14.0", True), ("vllm", "0.19.0", True),
    ("vllm", "", True), ("vllm", "nightly-5b8c30d62b754b57", True), ("vllm", "nightly-20260301", True),
    ("vllm", "0.20.1", True), ("vllm", "v0.14.1", True), ("vllm", "0.6.0 (--num-scheduler-steps 10)", False),
    ("vllm", "1.0.0", True),
    ("sglang", "0.5.9", False), ("trtllm", "1.3.0rc5", False)])
def test_rows_overlap_from_the_vllm_release_that_made_it_the_default(stack, version, expected):
    """A version llmsim cannot place keeps the profile's keys: vLLM's are a current release's."""
    engine = {**load_backend(stack).engine, **version_keys(stack, version)}
    assert engine.get("async_scheduling", False) is expected


@pytest.mark.parametrize("measured, expected", [("2025-10-29", False), ("2026-01-19", False),
                                                ("2026-01-20", True), ("2026-04-02", True)])
def test_a_row_measured_before_the_release_schedules_in_turn(measured, expected):
    """A row naming no version but measured before 0.14.0 came out (2026-01-20)
    cannot have run it: it schedules in turn; on the release day or later it
    may have, and keeps the profile's (current) keys."""
    engine = {**load_backend("vllm").engine, **version_keys("vllm", "", measured)}
    assert engine["async_scheduling"] is expected


def test_aiconfigurator_rows_without_a_version_were_measured_by_the_stated_days(shared_data):
    """The bound a closed-loop row naming no version gets (closed_loop_silicon.csv
    drops the measurement notes) is read off the sample it is a subset of."""
    import pandas as pd

    from simulator.validation.deployment import AIC_UNVERSIONED_MEASURED_BY
    s = pd.read_csv(shared_data / "e2e" / "aic_silicon_sample.csv.gz")
    u = s[s["backend_version"].isna()]
    day = u["silicon_data_source"].str.extract(r"measured=(\d{4}-\d{2}-\d{2})")[0]
    assert day.notna().all()
    assert day.groupby(u["backend"]).max().to_dict() == AIC_UNVERSIONED_MEASURED_BY


def test_a_non_boolean_async_scheduling_is_one_line(tmp_path, cli):
    bad = {**SCENARIO, "pools": [{**SCENARIO["pools"][0], "engine": {"async_scheduling": "sometimes"}}]}
    one_line_error(cli("run", write_yaml(tmp_path / "s.yaml", bad), "--output", tmp_path / "out"),
                   "pools[0].engine.async_scheduling")


@pytest.mark.parametrize("version,overlaps", [("0.19.0", True), ("0.14.0", True), ("0.12.0", False),
                                              ("nightly-20260301", True), ("nightly-20251201", False)])
def test_a_pool_names_its_vllm_release_and_gets_its_defaults(version, overlaps):
    """``engine.backend_version`` applies the profile's by_version rules; a key
    set beside it still wins."""
    from simulator.scenario.schema import Scenario

    pool = {**SCENARIO["pools"][0], "engine": {"backend": "vllm", "backend_version": version}}
    engine = Scenario.model_validate({**SCENARIO, "pools": [pool]}).pools[0].engine
    assert engine.async_scheduling is overlaps and engine.plans_ahead is overlaps
    pool["engine"]["async_scheduling"] = not overlaps
    assert Scenario.model_validate({**SCENARIO, "pools": [pool]}).pools[0].engine.async_scheduling is not overlaps


def test_a_release_that_is_no_version_is_one_line(tmp_path, cli):
    bad = {**SCENARIO, "pools": [{**SCENARIO["pools"][0], "engine": {"backend": "vllm", "backend_version": "latest"}}]}
    one_line_error(cli("run", write_yaml(tmp_path / "s.yaml", bad), "--output", tmp_path / "out"),
                   "pools[0].engine.backend_version: 'latest'")


@pytest.mark.parametrize("engine, words", [
    ({"backend_version": "0.13.0"}, "pools[0].engine.backend_version: '0.13.0' names a release of a serving "
                                    "stack; set backend too"),        # llmsim's generic engine has no releases
    ({"backend": "vllm", "backend_version": 0.1}, 'quoted (backend_version: "0.10.0")'),   # YAML's 0.10
    ({"backend": "vllm", "backend_version": 20260301}, "the number 20260301"),
])
def test_a_release_without_its_stack_or_written_as_a_number_is_refused(tmp_path, cli, engine, words):
    """Neither is silently dropped nor read as another release."""
    bad = {**SCENARIO, "pools": [{**SCENARIO["pools"][0], "engine": engine}]}
    r = cli("run", write_yaml(tmp_path / "s.yaml", bad), "--output", tmp_path / "out")
    one_line_error(r, words)
    assert "Value error" not in r.err


_DRAFT = {"draft_model": "tinyllama-1.1b", "k": 5, "acceptance_rate": 0.8}


@pytest.mark.parametrize("speculative, engine, overlaps", [
    (None, {}, True),                                           # plain decoding: vLLM's default
    (_DRAFT, {}, False),                                        # a separate draft turns the default off
    (_DRAFT, {"async_scheduling": True}, True),                 # --async-scheduling asked for is accepted
    ({"draft_model": "mtp", "k": 1, "acceptance_rate": 0.8}, {}, True),   # MTP keeps it (EAGLE-type)
])
def test_a_separate_draft_model_turns_vllms_async_default_off(speculative, engine, overlaps):
    """vllm/config/vllm.py VllmConfig.__post_init__ (0.18, 0.19): async
    scheduling stays on by default only for EAGLE/MTP drafting; a draft model
    turns it off unless asked for (backend_profiles/vllm.yaml draft_model_engine)."""
    from simulator.scenario.schema import PoolSpec

    model = "deepseek-v3" if speculative and speculative["draft_model"] == "mtp" else "llama-2-13b"
    pool = {"model": model, "gpu": "h200" if model == "deepseek-v3" else "a100-sxm-40gb",
            "engine": {"backend": "vllm", **engine}}
    if model == "deepseek-v3":
        pool.update(tp=8, engine={**pool["engine"], "weight_dtype": "fp8"})
    if speculative:
        pool["speculative"] = speculative
    assert PoolSpec.model_validate(pool).engine.async_scheduling is overlaps


@pytest.mark.parametrize("engine, running, overlap", [
    ({}, 48, True), ({"max_num_seqs": 96}, 96, True),
    ({"backend_version": "0.5.10.post1"}, 48, False), ({"backend_version": "0.5.11"}, 48, True)])
def test_sglang_schedules_a_speculative_pool_as_its_eagle_path_does(engine, running, overlap):
    """SGLang turns mixed chunks off for EAGLE-style drafts (MTP included) and caps running requests at
    48 unless --max-running-requests is given (server_args.py, 0.5.4-0.5.13); to 0.5.10 it turned the
    overlap scheduler off too (spec v1), from 0.5.11 spec v2 keeps it for top-k 1 drafts (the
    profile's own keys are 0.5.13's). A scenario's SGLang pool with MTP kept mixed chunks and 1,024
    running requests, the profile's speculative keys read by the held-out replay alone."""
    from simulator.scenario.schema import PoolSpec

    pool = {"model": "deepseek-v3", "gpu": "h200", "tp": 8, "speculative": {"draft_model": "mtp", "k": 1,
                                                                            "acceptance_rate": 0.8},
            "engine": {"backend": "sglang", "weight_dtype": "fp8", **engine}}
    e = PoolSpec.model_validate(pool).engine
    assert (e.max_num_seqs, e.schedule_ahead, e.output_after_next_launch, e.mixed_prefill) == \
        (running, overlap, overlap, False)
    plain = PoolSpec.model_validate({**pool, "speculative": None}).engine
    assert plain.max_num_seqs > 48 and plain.schedule_ahead


@pytest.mark.parametrize("stack, newest, accepted, refused", [
    ("sglang", "0.5.23", ("0.5.23", "0.5.22", "0.5.20", "0.5.19", "0.5.15.post1", "0.5.14", "0.5.9",
                          "nightly-dev-20260402-d7256eb6", "nightly-dev-20261020-abcdef12"),
     ("0.5.24", "0.6.0", "nightly-dev-20261105-abcdef12")),
    ("vllm", "0.34.0", ("0.34.0", "0.33.0", "0.32.0", "0.30.0", "0.28.0", "0.27.1", "0.20.0", "0.19.1", "0.14.1",
                        "nightly-20260801", "nightly-20261110"),
     ("0.34.1", "0.35.0", "1.0.0", "nightly-20261120")),
    ("trtllm", "1.3.0rc15", ("1.0.0", "1.1.0rc2.post2", "1.3.0rc5", "1.3.0rc5.post2", "1.3.0rc15", "nightly-20260520"),
     ("1.3.0rc22", "1.3.0rc29", "1.4.0rc1", "nightly-20260701")),
])
def test_a_release_past_the_profile_is_refused(stack, newest, accepted, refused):
    """Each profile's keys and rules were read from releases to its ``newest_release``, and
    the next changed what llmsim models (or, for SGLang past 0.5.23 and vLLM past 0.34.0, is unread;
    TensorRT-LLM 1.3.0rc22 keeps the fp8 context-MLA workspace
    out of the KV budget, #16399), so a pool naming a later release, or a nightly built after
    the newest one, is refused with the newest release it could name, not run under older
    defaults in silence; the releases the held-out rows name still run."""
    from pydantic import ValidationError
    from simulator.scenario.schema import PoolSpec

    pool = {"model": "llama-3-8b", "gpu": "h100-sxm"}
    # vLLM from 0.20.0 sizes its pool after its CUDA graphs' memory, which the pool states
    stated = {"kv_memory": {"cuda_graph_gib": 1.0}} if stack == "vllm" else {}
    for ok in accepted:
        PoolSpec.model_validate({**pool, "engine": {"backend": stack, "backend_version": ok, **stated}})
    for newer in refused:
        with pytest.raises(ValidationError) as e:
            PoolSpec.model_validate({**pool, "engine": {"backend": stack, "backend_version": newer, **stated}})
        assert f"newer than the {stack} releases llmsim has read (to {newest}" in str(e.value)
        # a pool naming no release runs the profile's own keys: vLLM's are 0.19.1's, not its newest's
        assert f"leave backend_version out to run {'0.19.1' if stack == 'vllm' else newest}'s" in str(e.value)


def test_a_users_sglang_fraction_replaces_the_releases_inputs():
    """A user's fraction replaces the release's inputs to SGLang's default fraction: none is refused.
    Its prefill graphs stay: they decide which prefills the cost model replays, whatever the fraction."""
    from simulator.scenario.schema import PoolSpec

    pool = {"model": "llama-3-8b", "gpu": "h100-sxm"}
    e = PoolSpec.model_validate({**pool, "engine": {"backend": "sglang", "kv_memory": {"fraction": 0.8}}}).engine
    assert e.kv_memory.fraction == 0.8 and not e.kv_memory.role_reserve and e.kv_memory.gpu_tiers == "0.5"
    assert e.kv_memory.piecewise_cuda_graph and e.kv_memory.prefill_graphs_off == ("pp", "multimodal_unlisted")


def test_only_vllm_changes_its_scheduling_defaults_for_a_draft_model():
    """TensorRT-LLM's profile names no draft-model defaults and SGLang's only that a separate draft
    model (its STANDALONE, which supports_mixed_chunk leaves out) turns mixed chunks off whatever the
    launch asks, and that its tokenizer counts no draft slots against the context for it (from 0.5.8):
    its other speculative keys hold for every draft. Async scheduling is vLLM's own rule."""
    assert load_backend("vllm").draft_model_engine == {"async_scheduling": False}
    assert load_backend("sglang").draft_model_engine == {"mixed_beside_draft": False, "context_counts_drafts": False}
    assert load_backend("trtllm").draft_model_engine == {}


@pytest.mark.parametrize("speculative, version, scheduled", [
    (_DRAFT, None, 2048 - 256),         # vLLM 0.17+: one slot per sequence kept for the draft model
    (_DRAFT, "0.16.0", 2048),           # before 0.17 the scheduler fills the whole budget
    (None, None, 2048),                 # no draft: the whole budget
    ({"draft_model": "mtp", "k": 1, "acceptance_rate": 0.8}, None, 8192),   # MTP keeps it (H200 default)
])
def test_vllm_keeps_a_slot_per_sequence_out_of_the_budget_for_a_draft_model(speculative, version, scheduled):
    """vllm/config/vllm.py _set_max_num_scheduled_tokens (0.17.0 on): the scheduler fills
    max_num_batched_tokens − max_num_seqs when a draft model drafts; the scenario's flag stays."""
    from simulator.fleet.setup import setup_pool
    from simulator.scenario.schema import PoolSpec

    mtp = speculative is not None and speculative["draft_model"] == "mtp"
    pool = {"model": "deepseek-v3" if mtp else "llama-2-13b", "gpu": "h200" if mtp else "a100-sxm-40gb",
            "tp": 8 if mtp else 1,
            "engine": {"backend": "vllm", **({"weight_dtype": "fp8"} if mtp else {}),
                       **({"backend_version": version} if version else {})}}
    if speculative:
        pool["speculative"] = speculative
    setup = setup_pool(PoolSpec.model_validate(pool), 0)
    assert setup.engine_config.max_num_batched_tokens == scheduled
    assert setup.spec.engine.max_num_batched_tokens == (8192 if mtp else 2048)


_MTP_POOL = {"model": "deepseek-v3", "gpu": "h200", "tp": 8, "speculative": {"draft_model": "mtp", "k": 3,
                                                                            "acceptance_rate": 0.8}}


@pytest.mark.parametrize("pool, seqs, budget, least", [
    # one decode of 1 + 5 draft tokens beside the draft model's slot kept for each of 4 sequences (0.19)
    ({"model": "llama-2-13b", "gpu": "a100-sxm-40gb", "speculative": _DRAFT}, 4, 9, 4 + 6),
    # MTP: no slot, but 1 + 3 tokens a decode (vllm/v1/core/sched/scheduler.py num_tokens_with_spec)
    (_MTP_POOL, 2, 3, 4)])
def test_a_budget_too_small_for_one_speculative_decode_is_one_line(tmp_path, cli, pool, seqs, budget, least):
    """The decodes past the budget wait for the next iteration, but one decode must fit whole: vLLM
    would run it with its draft cut, which the cost model does not price, and TensorRT-LLM never."""
    import yaml

    p = tmp_path / "d.yaml"
    p.write_text(yaml.safe_dump({"name": "d", "workload": {"num_requests": 5, "arrival": {"type": "poisson", "rate_per_s": 1},
                                                              "input_tokens": {"dist": "fixed", "value": 100},
                                                              "output_tokens": {"dist": "fixed", "value": 10}},
                                 "pools": [{**pool, "engine": {"backend": "vllm", "max_num_seqs": seqs,
                                                               "max_num_batched_tokens": budget}}]}))
    r = cli("check", p)
    assert r.code == 2 and "Traceback" not in r.err
    assert "pools[0].engine.max_num_batched_tokens" in r.err and f"at least {least};" in r.err, r.err


@pytest.mark.parametrize("per, least", [("max_num_seqs", 4 + (1 + 5)),        # 0.17-0.27: slots off once
                                         ("scheduled_request", 1 + 1 + 5)])   # 0.28: per decode
def test_one_speculative_decode_fits_beside_the_slots_kept_for_every_sequence(per, least):
    """Under vLLM 0.17-0.27 the draft model's slot of every one of the 4 sequences is kept off the
    budget beside a decode's 1 + 5 tokens; from 0.28 a decode takes its slot beside them. A fuller
    batch than the budget holds waits in part for the next iteration (disable_above_batch or not)."""
    from simulator.costmodel.speculative import SpeculativeSpec, speculative_cost_model
    from simulator.engine.config import EngineConfig
    from simulator.errors import LlmsimError
    from simulator.fleet.setup import drafting_budget
    from simulator.scenario.schema import PoolSpec
    from helpers_engine import cost_model

    draft = {"draft_model": "llama-3.2-1b", "k": 5, "acceptance_rate": 0.8, "disable_above_batch": 2}
    cm = speculative_cost_model(cost_model(), SpeculativeSpec(**draft))
    spec = PoolSpec.model_validate({"model": "llama-3-8b", "gpu": "h100-sxm", "speculative": draft})
    for budget in (least - 1, least):
        cfg = EngineConfig(max_num_batched_tokens=budget, max_num_seqs=4, draft_budget_slots=1,
                           draft_budget_per=per, draft_tokens_in_budget=True)
        if budget < least:
            with pytest.raises(LlmsimError, match=f"cannot hold one decode .*at least {least}$"):
                drafting_budget(cfg, cm, spec, "pools[0]", None)
            continue
        e = drafting_budget(cfg, cm, spec, "pools[0]", None)
        assert e.max_num_batched_tokens == budget - (4 if per == "max_num_seqs" else 0)


def test_a_pool_that_drafts_nothing_keeps_the_engines_own_budget_rule():
    """Without a draft the budget check is EngineConfig's (max_num_batched_tokens >= max_num_seqs
    under continuous batching, nothing under static batching, whose decodes never share an
    iteration with a prompt): a static pool of 64 sequences and 32 tokens runs as before, where
    drafting_budget refused it with an empty list of what each decode carries."""
    from simulator.fleet.setup import setup_pool
    from simulator.scenario.schema import PoolSpec

    pool = {"model": "llama-3.1-8b", "gpu": "h100-sxm",
            "engine": {"scheduler": "static", "max_num_batched_tokens": 32, "max_num_seqs": 64}}
    assert setup_pool(PoolSpec.model_validate(pool), 0).engine_config.max_num_batched_tokens == 32


def test_vllm_0_28_charges_the_draft_slot_per_scheduled_request():
    """vllm/v1/core/sched/scheduler.py of 0.28.0 to 0.34.0: the scheduler fills the whole
    max_num_batched_tokens, each request it schedules taking its tokens and the draft model's slot
    (input_budget -= num_new_tokens + draft_slots), where 0.17-0.27.1 took max_num_seqs slots off once."""
    from simulator.fleet.setup import setup_pool
    from simulator.scenario.schema import PoolSpec

    prof = load_backend("vllm")
    assert prof.version_keys("0.28.0")["draft_budget_per"] == "scheduled_request"
    assert "draft_budget_per" not in prof.version_keys("0.27.1")
    pool = {"model": "llama-2-13b", "gpu": "a100-sxm-40gb", "speculative": _DRAFT,
            "engine": {"backend": "vllm", "backend_version": "0.28.0", "kv_memory": {"cuda_graph_gib": 1.0}}}
    e = setup_pool(PoolSpec.model_validate(pool), 0).engine_config
    assert (e.max_num_batched_tokens, e.draft_slots_per_request) == (2048, 1)
    plain = setup_pool(PoolSpec.model_validate({**pool, "speculative": None}), 0).engine_config
    assert (plain.max_num_batched_tokens, plain.draft_slots_per_request) == (2048, 0)
    older = setup_pool(PoolSpec.model_validate({**pool, "engine": {**pool["engine"], "backend_version": "0.27.1"}}),
                       0).engine_config
    assert (older.max_num_batched_tokens, older.draft_slots_per_request) == (2048 - 256, 0)


@pytest.mark.parametrize("engine", ["fast", "reference"])
@pytest.mark.parametrize("per, verified, chunk", [
    ("scheduled_request", False, 100 - 3 * 2 - 1),         # 0.28: 3 decodes and the chunk
    ("max_num_seqs", False, 100 - 8 - 3),                  # 0.17-0.27.1: 8 slots off once
    ("scheduled_request", True, 100 - 3 * (1 + 5 + 1) - 1),   # and each decode's 5 draft tokens
    ("max_num_seqs", True, 100 - 8 - 3 * (1 + 5))])
def test_a_prompt_beside_decodes_gets_the_budget_the_draft_slots_leave(engine, per, verified, chunk):
    """Three sequences decoding under a 100-token budget for 8 sequences: a long prompt joining
    them is cut at what their tokens and the draft slots leave, and under vLLM's V1 scheduler
    (draft_tokens_in_budget) the k draft tokens each decode carries for verification too
    (vllm/v1/core/sched/scheduler.py: num_tokens_with_spec − num_computed_tokens), the same in
    both engines."""
    from unittest import mock

    from helpers_engine import cost_model, make_requests, run_open
    from simulator.costmodel.speculative import SpeculativeSpec, speculative_cost_model
    from simulator.engine.config import EngineConfig
    from simulator.fleet import pool as fleet
    from simulator.fleet.setup import drafting_budget
    from simulator.scenario.schema import PoolSpec

    seen: list[int] = []

    class Recording(fleet.ENGINES[engine]):
        def _plan(self, now):
            out = super()._plan(now)
            seen.extend(c for s, c in out[0] if s.req.id == 3)
            return out

    draft = {"draft_model": "llama-3.2-1b", "k": 5, "acceptance_rate": 0.8}
    cm = speculative_cost_model(cost_model(), SpeculativeSpec(**draft))
    cfg = EngineConfig(max_num_batched_tokens=100, max_num_seqs=8, draft_budget_slots=1, draft_budget_per=per,
                       draft_tokens_in_budget=verified, prefix_cache=False)
    spec = PoolSpec.model_validate({"model": "llama-3-8b", "gpu": "h100-sxm", "speculative": draft})
    cfg = drafting_budget(cfg, cm, spec, "pools[0]", None)
    reqs = make_requests([0.0, 0.0, 0.0, 0.05], [10, 10, 10, 1000], [2000, 2000, 2000, 5])
    with mock.patch.dict(fleet.ENGINES, {engine: Recording}):
        run_open(engine, reqs, cfg, num_blocks=10_000, cm=cm)
    assert seen[:2] == [chunk, chunk]


@pytest.mark.parametrize("engine", ["fast", "reference"])
@pytest.mark.parametrize("prompt, beside", [(100 - 3 * (1 + 3), 3),     # fits what 3 decodes of 1 + 3 leave
                                            (100 - 3 * (1 + 3) + 1, 0)])  # waits for them to finish
def test_trtllm_decodes_take_their_draft_tokens_from_the_budget(engine, prompt, beside):
    """TensorRT-LLM's micro-batch scheduler charges a generation request its beam width plus
    its draft tokens (microBatchScheduler.cpp reqNumTokens = beamWidth + getNumDraftTokens(),
    PyExecutor setting the k draft tokens before it schedules): under a 100-token budget three
    speculative decodes (k 3) leave 88 tokens, so a whole prompt of 88 joins them and one of 89
    waits, where counting a token a decode (97 left) would let both in; both engines alike."""
    from unittest import mock

    from helpers_engine import make_requests, run_open
    from simulator.fleet import pool as fleet
    from simulator.fleet.setup import setup_pool
    from simulator.scenario.schema import PoolSpec

    pool = {"model": "llama-3.1-8b", "gpu": "h100-sxm",
            "speculative": {"draft_model": "llama-3.2-1b", "k": 3, "acceptance_rate": 0.8},
            "engine": {"backend": "trtllm", "max_num_batched_tokens": 100, "max_num_seqs": 8,
                       "prefix_cache": False}}
    setup = setup_pool(PoolSpec.model_validate(pool), 0)
    assert setup.engine_config.draft_tokens_in_budget
    seen: list[int] = []

    class Recording(fleet.ENGINES[engine]):
        def _plan(self, now):
            out = super()._plan(now)
            if any(s.req.id == 3 for s, _ in out[0]):
                seen.append(self._batch_len() - len(out[0]))    # the decodes sharing its iteration
            return out

    reqs = make_requests([0.0, 0.0, 0.0, 0.05], [10, 10, 10, prompt], [300, 300, 300, 5])
    with mock.patch.dict(fleet.ENGINES, {engine: Recording}):
        run_open(engine, reqs, setup.engine_config, num_blocks=10_000, cm=setup.cm)
    assert seen == [beside]


@pytest.mark.parametrize("gpu, version, budget, seqs", [
    ("b200", "0.28.0", 16384, 1024), ("b300", "0.28.0", 16384, 1024), ("mi300x", "0.28.0", 16384, 1024),
    ("h200", "0.28.0", 8192, 1024), ("h100-sxm", "0.28.0", 8192, 1024), ("a100-sxm-80gb", "0.28.0", 2048, 256),
    ("b200", "0.27.1", 8192, 1024), ("b200", None, 8192, 1024)])
def test_vllm_0_28_gives_gpus_of_160_gib_a_larger_budget(gpu, version, budget, seqs):
    """vllm/engine/arg_utils.py get_batch_defaults of 0.28.0: GPUs of >= 160 GiB get 16,384 tokens and
    1,024 sequences; H200 (140 GiB) keeps 8,192, as every GPU does to 0.27.1 and without a release."""
    from simulator.profiles.backend import apply_backend

    engine = {"backend": "vllm", **({"backend_version": version} if version else {})}
    e = apply_backend(engine, gpu, model=load_model("llama-3-8b"))
    assert (e["max_num_batched_tokens"], e["max_num_seqs"]) == (budget, seqs)


@pytest.mark.parametrize("gpu, version, budget, graphs", [
    ("b200", "0.28.0", 16384, 1024), ("gb200-nvl72", "0.28.0", 16384, 1024), ("b300", "0.28.0", 16384, 1024),
    ("gb300-nvl72", "0.28.0", 16384, 1024), ("mi300x", "0.28.0", 16384, 512), ("h100-sxm", "0.28.0", 8192, 512),
    ("b200", "0.27.1", 8192, 512), ("b200", None, 8192, 512)])
def test_vllm_0_28_captures_graphs_to_1024_tokens_on_sm100(gpu, version, budget, graphs):
    """vllm/config/vllm.py _set_cudagraph_sizes of 0.28.0: max_cudagraph_capture_size defaults to 1,024
    on compute capability 10.x (B200, GB200: 10.0; B300, GB300: 10.3), 512 elsewhere and before."""
    from simulator.profiles.backend import apply_backend

    e = apply_backend({"backend": "vllm", **({"backend_version": version} if version else {})}, gpu,
                      model=load_model("llama-3-8b"))
    assert (e["max_num_batched_tokens"], e["graph_max_tokens"]) == (budget, graphs)


def test_an_sm100_rule_holds_for_compute_capability_10_x_alone():
    """A GPU rule's sm_family tests the compute-capability family as vLLM's is_device_capability_family
    does: 10.0 and 10.3 are family 100; Hopper, Ada and AMD GPUs (no sm_version) are not."""
    from simulator.profiles.backend import GpuCondition

    when = GpuCondition(sm_family=100)
    assert [g for g in ("b200", "b300", "gb200-nvl72", "gb300-nvl72", "h200", "l40s", "mi355x")
            if when.holds(load_hardware(g))] == ["b200", "b300", "gb200-nvl72", "gb300-nvl72"]


@pytest.mark.parametrize("version, draft, overlaps", [
    ("0.28.0", "draft", True), ("0.27.1", "draft", False), (None, "draft", False),
    ("0.13.0", "draft", False), ("0.28.0", "", True), ("0.28.0", "mtp", True)])
def test_vllm_0_28_keeps_async_scheduling_under_a_draft_model(version, draft, overlaps):
    """vllm/config/vllm.py VllmConfig.__post_init__ of 0.28.0 leaves 'draft_model' speculation out of the
    methods that turn the async-scheduling default off: the release's draft_model_engine (a by_version
    rule's) replaces the profile's {async_scheduling: false}; before 0.14 nothing overlapped anyway."""
    from simulator.profiles.backend import apply_backend

    engine = {"backend": "vllm", **({"backend_version": version} if version else {})}
    model = load_model("llama-3-8b")
    assert apply_backend(engine, "h100-sxm", draft, model)["async_scheduling"] is overlaps
    # the pool's own key still wins
    assert apply_backend({**engine, "async_scheduling": False}, "h100-sxm", draft, model)["async_scheduling"] is False


def test_a_release_rules_draft_model_keys_are_checked_as_engine_keys(tmp_path):
    """A by_version rule's draft_model_engine is engine settings, a typo the profile's error."""
    import yaml
    from simulator.errors import LlmsimError

    prof = yaml.safe_load(open("backend_profiles/vllm.yaml"))
    prof["by_version"].append({"since": "0.28.0", "draft_model_engine": {"async_schedulin": True}})
    prof["releases"].setdefault("0.28.0", "2026-09-01")      # a bound's day (a nightly is placed by it)
    p = tmp_path / "mine.yaml"
    p.write_text(yaml.safe_dump(prof))
    with pytest.raises(LlmsimError) as e:
        load_backend(str(p))
    assert f"by_version[{len(prof['by_version']) - 1}].draft_model_engine" in str(e.value)


@pytest.mark.parametrize("engine", [{"scheduler": "static"}, {"mixed_prefill": False}])
def test_decodes_that_never_meet_a_prompt_ask_nothing_of_the_budget(engine):
    """Static batches and prefill-only iterations never put a prompt beside the decodes, so a
    budget below one decode's 1 + k tokens is no reason to refuse their speculative pool."""
    from simulator.costmodel.speculative import SpeculativeSpec, speculative_cost_model
    from simulator.engine.config import EngineConfig
    from simulator.errors import LlmsimError
    from simulator.fleet.setup import drafting_budget
    from simulator.scenario.schema import PoolSpec
    from helpers_engine import cost_model

    draft = {"draft_model": "llama-3.2-1b", "k": 3, "acceptance_rate": 0.8}
    cm = speculative_cost_model(cost_model(), SpeculativeSpec(**draft))
    spec = PoolSpec.model_validate({"model": "llama-3-8b", "gpu": "h100-sxm", "speculative": draft})
    cfg = EngineConfig(max_num_batched_tokens=3, max_num_seqs=2, draft_tokens_in_budget=True, **engine)
    assert drafting_budget(cfg, cm, spec, "pools[0]", None).max_num_batched_tokens == 3
    with pytest.raises(LlmsimError, match="at least 4$"):       # the same pool mixing prompts with decodes
        drafting_budget(EngineConfig(max_num_batched_tokens=3, max_num_seqs=2, draft_tokens_in_budget=True),
                        cm, spec, "pools[0]", None)
