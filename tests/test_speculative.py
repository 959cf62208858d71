"""Speculative decoding (simulator/costmodel/speculative.py): the formula, the
amortised step time against a hand computation, the engines' agreement with
it, the low-load TPOT gain through ``simulate``, the load threshold, memory,
quantisation, and bad input through the CLI.
"""
from __future__ import annotations

import math
from functools import lru_cache

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helpers_engine import capacities, compare_runs, describe, engine_configs, make_requests, run_open, workloads
from simulator.costmodel import CostModel
from simulator.errors import LlmsimError
from simulator.costmodel.speculative import (SpeculativeCostModel, SpeculativeSpec, expected_tokens_per_step,
                                             speculative_cost_model, speculative_memory)
from simulator.memory import plan_memory
from simulator.profiles import load_hardware, load_model
from simulator.runner import setup_pool, simulate
from simulator.scenario.schema import PoolSpec, Scenario
from workloads.request import Status

TARGET, DRAFT = "llama-3.1-8b", "llama-3.2-1b"
SPEC = SpeculativeSpec(draft_model=DRAFT, k=5, acceptance_rate=0.82)


@lru_cache(maxsize=None)
def _target(gpu: str = "h100-sxm", tp: int = 1, roofline: bool = False) -> CostModel:
    return CostModel(load_model(TARGET), load_hardware(gpu), tp, roofline=roofline)


def _spec_cm(spec: SpeculativeSpec = SPEC, **kw):
    return speculative_cost_model(_target(**kw), spec)


# --- the formula and the step time ------------------------------------------------------
@pytest.mark.parametrize("k,alpha", [(1, 0.5), (5, 0.82), (8, 0.3), (3, 0.99)])
def test_expected_tokens_is_the_truncated_geometric_sum(k, alpha):
    """E = 1 + α + … + α^k: the target's own token plus draft token i kept
    only if all i before it were accepted."""
    assert expected_tokens_per_step(k, alpha) == pytest.approx(sum(alpha ** i for i in range(k + 1)), rel=1e-12)


def test_expected_tokens_for_the_issue_case():
    assert expected_tokens_per_step(5, 0.82) == pytest.approx((1 - 0.82 ** 6) / 0.18)
    assert expected_tokens_per_step(5, 0.82) == pytest.approx(3.8666, abs=1e-4)


@pytest.mark.parametrize("batch", [1, 7, 64])
def test_decode_token_costs_k_drafts_plus_one_verification_over_e(batch):
    """By hand: k draft decode iterations (iteration j attends to j more tokens
    per sequence) plus one target pass with a (k+1)-token extend chunk per
    sequence, all divided by E. On H100 (attention sharpness 1) the extend
    attention is exactly the target's prefill attention over those chunks."""
    scm = _spec_cm()
    t, d, k = scm.target, scm.draft, SPEC.k
    cached = [100 + 37 * i for i in range(batch)]
    S = float(sum(c + 1 for c in cached))
    drafts = sum(d.step_time((), batch, S + batch * j) for j in range(k))
    n = batch * (k + 1)
    verify = (t.token_time(n) + t.lm_head_time(n) + t.prefill_attention_time([(k + 1, c) for c in cached])
              + t.overhead_s)
    expected = (drafts + verify) / expected_tokens_per_step(k, SPEC.acceptance_rate)
    assert scm.step_time((), batch, S) == pytest.approx(expected, rel=1e-12)
    a, r = scm.decode_coefficients(batch)
    for ctx in (S, 3 * S, 0.5 * S):   # the affine form the fast engine integrates
        assert a + r * ctx == pytest.approx(scm.step_time((), batch, ctx), rel=1e-12)


def test_mixed_iteration_speculates_only_the_decode_part():
    """Prefill chunks cost what they add to a plain iteration, plus the draft's
    prefill of the same chunks; the decodes cost their speculative share."""
    scm = _spec_cm()
    t, d = scm.target, scm.draft
    chunks, b, S = [(512, 0), (300, 1000)], 8, 8 * 700.0
    plain_extra = t.step_time(chunks, b, S, b + 1) - t.step_time((), b, S, b)
    expected = scm.step_time((), b, S) + plain_extra + d.step_time(chunks, 0, 0.0, 1)
    assert scm.step_time(chunks, b, S, b + 1) == pytest.approx(expected, rel=1e-12)
    # A prefill-only iteration: the target's and the draft's prefill.
    assert scm.step_time(chunks) == pytest.approx(t.step_time(chunks) + d.step_time(chunks), rel=1e-12)


def test_a_mixed_iteration_that_does_not_draft_is_plain_plus_the_draft_s_extend():
    """SGLang from 0.5.19 (mixed_step_drafts false): the decodes beside prompt chunks take one plain
    token, and the draft extends over the whole batch, the chunks and one token per decode; decode-only
    and prefill-only iterations are as before, and no draft token comes out of the budget there."""
    scm = _spec_cm()
    plain = scm.with_mixed_step_drafts(False)
    t, d = scm.target, scm.draft
    chunks, b, S = [(512, 0), (300, 1000)], 8, 8 * 700.0
    expected = t.step_time(chunks, b, S, b + 1) + d.step_time(chunks, b, S, b + 1)
    assert plain.step_time(chunks, b, S, b + 1) == pytest.approx(expected, rel=1e-12)
    assert plain.step_time(chunks, b, S, b + 1) != pytest.approx(scm.step_time(chunks, b, S, b + 1), rel=1e-6)
    assert plain.step_time((), b, S) == scm.step_time((), b, S)
    assert plain.decode_coefficients(b) == scm.decode_coefficients(b)
    assert plain.step_time(chunks) == scm.step_time(chunks)
    assert (plain.draft_tokens(b), plain.draft_tokens(b, prefilling=True)) == (SPEC.k, 0)
    assert scm.draft_tokens(b, prefilling=True) == SPEC.k
    # above disable_above_batch the draft does not run at all, mixed or not
    high = _spec_cm(SPEC.model_copy(update={"disable_above_batch": 4})).with_mixed_step_drafts(False)
    assert high.step_time(chunks, b, S, b + 1) == t.step_time(chunks, b, S, b + 1)


def test_a_decode_beside_prompts_takes_one_budget_token_where_it_does_not_draft():
    from simulator.engine.base import decode_budget_tokens
    from simulator.engine.config import EngineConfig

    cfg = EngineConfig(draft_tokens_in_budget=True)
    assert decode_budget_tokens(cfg, _spec_cm(), 4) == 4 * (1 + SPEC.k)
    off = cfg.model_copy(update={"mixed_step_drafts": False})
    assert decode_budget_tokens(off, _spec_cm().with_mixed_step_drafts(False), 4) == 4


@pytest.mark.parametrize("version, draft, kept", [
    ("0.5.18", "mtp", False), ("0.5.19", "mtp", True), (None, "mtp", True),
    ("0.5.19", "draft", False), ("0.5.23", "draft", False)])
def test_sglang_keeps_mixed_chunks_beside_an_mtp_draft_from_0_5_19_without_drafting(version, draft, kept):
    """0.5.19 keeps --enable-mixed-chunk for EAGLE/NEXTN (spec_info.py supports_mixed_chunk), the running
    requests decoding one plain token in a mixed step; a separate draft model (STANDALONE) and releases
    to 0.5.18 turn mixed chunks off whatever the launch asks, so a pool that sets them beside such a
    draft is refused, naming the key. Mixed chunks stay opt-in either way."""
    from simulator.profiles.backend import apply_backend

    engine = {"backend": "sglang", **({"backend_version": version} if version else {})}
    model = load_model("deepseek-v3")
    assert apply_backend(dict(engine), "h200", draft, model)["mixed_prefill"] is False
    mixing = apply_backend({**engine, "mixed_prefill": True}, "h200", draft, model)
    assert mixing.get("mixed_beside_draft", True) is kept   # the engine default keeps them
    if kept:
        assert mixing["mixed_step_drafts"] is False
    if draft == "mtp":   # the pool's cost model carries it (fleet/setup.py), or the pool is refused
        def pool(**mixed) -> PoolSpec:
            return PoolSpec.model_validate({
                "model": "deepseek-v3", "gpu": "h200", "tp": 8, "engine": {**engine, "weight_dtype": "fp8", **mixed},
                "speculative": {"draft_model": "mtp", "k": 1, "acceptance_rate": 0.8}})
        if kept:
            assert setup_pool(pool(mixed_prefill=True), 0).cm.mixed_step_drafts is False
        else:
            with pytest.raises(LlmsimError, match="turns mixed chunks off under this draft") as refused:
                setup_pool(pool(mixed_prefill=True), 0)
            assert refused.value.key_path.endswith("engine.mixed_prefill")
            assert setup_pool(pool(), 0).cm.k == 1   # the same pool at the stack's default runs


class _Recorded(SpeculativeCostModel):
    """A speculative cost model that notes every iteration priced with prompt chunks and decodes."""

    def __init__(self, scm: SpeculativeCostModel):
        super().__init__(scm.target, scm.draft, scm.spec)
        self.mixed: list[tuple[list, int, float, int, float]] = []   # shared by the engine's copy

    def step_time(self, prefill_chunks=(), decode_batch=0, decode_context=0.0, sampling_seqs=None,
                  tokens_per_step=None, load=None):
        dt = super().step_time(prefill_chunks, decode_batch, decode_context, sampling_seqs, tokens_per_step, load)
        if prefill_chunks and decode_batch:
            self.mixed.append((list(prefill_chunks), decode_batch, decode_context, sampling_seqs, dt))
        return dt


@pytest.mark.parametrize("engine", ["fast", "reference"])
@pytest.mark.parametrize("drafts", [True, False])
def test_a_mixed_step_s_decodes_take_a_plain_token_in_both_engines(engine, drafts):
    """A decodes when B's 900-token prompt (one output token) arrives and is prefilled in chunks beside it (mixed_prefill);
    with mixed_step_drafts false those iterations cost the plain target's plus the draft's pass over
    the same tokens, A's one token each included, and A's decode-only iterations still speculate."""
    from simulator.engine.config import EngineConfig

    cfg = EngineConfig(max_num_seqs=8, max_num_batched_tokens=256, mixed_prefill=True,
                       mixed_step_drafts=drafts)
    cm = _Recorded(_spec_cm())
    run = run_open(engine, make_requests([0.0, 0.05], [200, 900], [60, 1]), cfg, 10_000, cm=cm)
    assert len(cm.mixed) >= 4   # B's four chunks beside A's decodes
    t, d = cm.target, cm.draft
    for chunks, b, ctx, sampling, dt in cm.mixed:
        plain = t.step_time(chunks, b, ctx, sampling) + d.step_time(chunks, b, ctx, sampling)
        assert (dt == pytest.approx(plain, rel=1e-12)) is not drafts
    a = run.requests[0]
    assert a.status == Status.FINISHED and a.output_tokens == 60
    assert {b for _, b, _, _, _ in cm.mixed} == {1}
    assert a.finish - a.first_token == pytest.approx(_decode_time(cm, cm.mixed, 200, 60), rel=1e-9)


def _decode_time(cm: SpeculativeCostModel, mixed: list, prompt: int, outputs: int) -> float:
    """A request's decodes alone on the replica but for the recorded mixed iterations: one token per
    iteration at context prompt + j (j = 1 .. outputs - 1), a mixed one as priced, the others a
    speculative step over E each."""
    priced = {ctx: dt for _, _, ctx, _, dt in mixed}
    return sum(priced.get(float(prompt + j), cm.step_time((), 1, float(prompt + j))) for j in range(1, outputs))


def test_above_the_threshold_it_is_the_plain_model():
    scm = _spec_cm(SPEC.model_copy(update={"disable_above_batch": 16}))
    t = scm.target
    for b in (17, 64, 256):
        S = b * 900.0
        assert scm.decode_coefficients(b) == t.decode_coefficients(b)
        assert scm.step_time((), b, S) == t.step_time((), b, S)
        assert scm.step_time([(256, 0)], b, S, b + 1) == t.step_time([(256, 0)], b, S, b + 1)
    # at and below the threshold it speculates (and is faster at small batches)
    for b in (1, 16):
        assert scm.step_time((), b, b * 900.0) < t.step_time((), b, b * 900.0)


def test_high_batch_speculation_costs_more_per_token_than_plain():
    """The caveat: verification of b·(k+1) tokens turns compute-bound while
    only E of them are kept, so at a large batch a token costs more."""
    scm = _spec_cm(gpu="a100-sxm-80gb")
    t = scm.target
    assert scm.step_time((), 1, 600.0) < t.step_time((), 1, 600.0)
    assert scm.step_time((), 256, 256 * 600.0) > t.step_time((), 256, 256 * 600.0)


# --- the engines ------------------------------------------------------------------------
# (gpu, tp, roofline): a calibrated GPU, and TP 2 in roofline mode (s = ∞: the
# extend attention's affine envelope, zero iteration overhead).
SPEC_MODELS = [("h100-sxm", 1, False), ("a100-sxm-80gb", 2, True)]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_fast_and_reference_engines_agree_with_speculation(data):
    """The fast engine integrates decode stretches in closed form; with the
    speculative cost (and the threshold switching it off and on as the batch
    changes) it must still match the iteration-by-iteration oracle."""
    reqs = data.draw(workloads(max_n=40), label="requests")
    cfg = data.draw(engine_configs(), label="cfg")
    # vLLM's and TensorRT-LLM's schedulers: each decode takes its k draft tokens from the budget, the
    # decodes past it waiting for the next iteration (the budget holds one decode, as set-up requires).
    if (cfg.max_num_batched_tokens >= 1 + SPEC.k + cfg.draft_slots_per_request
            and data.draw(st.booleans(), label="draft_tokens_in_budget")):
        boundary = data.draw(st.sampled_from(["trim_draft", "stop"]), label="budget_boundary")
        cfg = cfg.model_copy(update={"draft_tokens_in_budget": True, "budget_boundary": boundary})
    # SGLang from 0.5.19: decodes beside prompt chunks take a plain token, the draft extending over them.
    cfg = cfg.model_copy(update={"mixed_step_drafts": data.draw(st.booleans(), label="mixed_step_drafts")})
    nb = data.draw(capacities(reqs, cfg), label="num_blocks")
    threshold = data.draw(st.sampled_from([None, 1, 2, 4, 16]), label="disable_above_batch")
    gpu, tp, roofline = data.draw(st.sampled_from(SPEC_MODELS), label="cost model")
    cm = _spec_cm(SPEC.model_copy(update={"disable_above_batch": threshold}), gpu=gpu, tp=tp, roofline=roofline)
    fast = run_open("fast", reqs, cfg, nb, cm=cm)
    ref = run_open("reference", reqs, cfg, nb, cm=cm)
    problems = compare_runs(fast, ref)
    assert not problems, ("fast and reference disagree with speculation:\n  " + "\n  ".join(problems[:12])
                          + "\nreproduction: " + describe(reqs, cfg, nb, threshold=threshold, gpu=gpu))


# --- end to end -------------------------------------------------------------------------
def _scenario_data(speculative: dict | None = None, n: int = 24) -> dict:
    """One user at a time (closed loop) on one H100; ``speculative`` is the pool's mapping."""
    pool = {"model": TARGET, "gpu": "h100-sxm"}
    if speculative is not None:
        pool["speculative"] = speculative
    return {"name": "spec", "seed": 5,
            "workload": {"num_requests": n, "arrival": {"type": "concurrency", "concurrency": 1},
                         "input_tokens": {"dist": "uniform", "min": 50, "max": 3000},
                         "output_tokens": {"dist": "uniform", "min": 2, "max": 400}},
            "pools": [pool]}


def _scenario(speculative: dict | None = None) -> Scenario:
    return Scenario.model_validate(_scenario_data(speculative))


def _tpot(r) -> float:
    return (r.finish - r.first_token) / (r.output_tokens - 1)


def test_low_load_tpot_drops_by_the_predicted_factor():
    """One user at a time (closed loop, concurrency 1): every decode iteration
    has batch 1, and request i's j-th decode attends to P_i + j tokens, so its
    TPOT is the affine step time at its mean context P_i + N_i/2 and the mean
    TPOT over requests is the step time at the mean of those. The predicted
    factor spec/plain at that context is therefore exact up to float
    summation over a few thousand iterations: rel 1e-9."""
    plain, fast = simulate(_scenario()), simulate(_scenario(SPEC.model_dump()))
    for run in (plain, fast):
        assert all(r.status == Status.FINISHED for r in run.requests)
    reqs = [r for r in plain.requests if r.output_tokens >= 2]
    ctx = sum(r.input_tokens + r.output_tokens / 2.0 for r in reqs) / len(reqs)
    scm = fast.setups[0].cm
    predicted = scm.step_time((), 1, ctx) / scm.target.step_time((), 1, ctx)
    mean = {name: sum(_tpot(r) for r in run.requests if r.output_tokens >= 2) / len(reqs)
            for name, run in (("plain", plain), ("spec", fast))}
    assert mean["spec"] / mean["plain"] == pytest.approx(predicted, rel=1e-9)
    assert 0.6 < predicted < 0.75   # ≈ 1 / 1.45 for an 8B target and 1B draft on H100
    # TTFT grows only by the draft's prefill (a 1B model beside an 8B one)
    ttft = {name: sum(r.ttft for r in run.requests) for name, run in (("plain", plain), ("spec", fast))}
    assert 1.0 < ttft["spec"] / ttft["plain"] < 1.3


def test_memory_holds_the_draft_weights_and_kv():
    tm, dm = load_model(TARGET), load_model(DRAFT)
    mem = plan_memory(tm, load_hardware("h100-sxm"))
    spec_mem = speculative_memory(mem, _spec_cm())
    per_block = (tm.kv_bytes_per_token() + dm.kv_bytes_per_token()) * mem.block_size
    assert spec_mem.num_blocks == int((mem.kv_capacity_bytes - dm.weight_bytes()) // per_block)
    assert spec_mem.num_blocks < 0.85 * mem.num_blocks   # 32 KiB of draft KV beside 128 KiB a token
    assert spec_mem.weights_bytes == mem.weights_bytes + dm.weight_bytes()


def test_quantisation_applies_to_both_models_and_override_still_wins():
    def pool(**engine) -> PoolSpec:
        return PoolSpec(model=TARGET, gpu="h100-sxm", engine=engine, speculative=SPEC)

    bf16, fp8 = setup_pool(pool(), 0), setup_pool(pool(weight_dtype="fp8", kv_dtype="fp8"), 0)
    assert (fp8.cm.draft.weight_dtype, fp8.cm.draft.kv_dtype) == ("fp8", "fp8")
    assert fp8.cm.describe()["speculative"]["draft_model"] == DRAFT
    assert fp8.cm.step_time((), 1, 2000.0) < bf16.cm.step_time((), 1, 2000.0)
    assert fp8.memory.kv_bytes_per_token == bf16.memory.kv_bytes_per_token / 2
    assert setup_pool(pool(num_gpu_blocks_override=123), 0).memory.num_blocks == 123


# --- bad input --------------------------------------------------------------------------
# (id, change to the pool's speculative mapping, fragments the message must contain)
BAD = [
    ("vocab-mismatch", {"draft_model": "llama-2-7b"},
     ["pools[0].speculative.draft_model", "llama-2-7b", "32,000", "128,256", "vocabulary"]),
    ("unknown-draft", {"draft_model": "llama-9-1b"}, ["pools[0].speculative.draft_model", "llama-9-1b"]),
    ("k-zero", {"k": 0}, ["pools[0].speculative.k", "greater than or equal to 1"]),
    ("alpha-one", {"acceptance_rate": 1.0}, ["pools[0].speculative.acceptance_rate", "less than 1"]),
    ("alpha-zero", {"acceptance_rate": 0}, ["pools[0].speculative.acceptance_rate", "greater than 0"]),
    ("threshold-zero", {"disable_above_batch": 0}, ["pools[0].speculative.disable_above_batch"]),
    ("key-typo", {"draft_len": 5}, ["pools[0].speculative.draft_len", "unknown key"]),
]


def _scenario_file(tmp_path, change: dict | None = None):
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(_scenario_data({**SPEC.model_dump(exclude_none=True), **(change or {})})))
    return path


def _check_bad(r, path, fragments) -> None:
    assert r.code == 2, f"exit {r.code}\nstdout:\n{r.out}\nstderr:\n{r.err}"
    msg = r.err.strip()
    assert "Traceback" not in msg and msg.startswith("error:") and str(path) in msg, msg
    for frag in fragments:
        assert frag in msg, f"{frag!r} missing from: {msg}"


@pytest.mark.parametrize("case", BAD, ids=[c[0] for c in BAD])
def test_bad_speculative_input_is_one_clear_error(case, tmp_path, cli):
    name, change, fragments = case
    path = _scenario_file(tmp_path, change)
    _check_bad(cli("run", path, "-o", tmp_path / "out"), path, fragments)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("backend", ["vllm", "sglang"])
def test_a_batch_threshold_the_stack_has_no_flag_for_is_refused(backend, tmp_path, cli):
    """vLLM V1 never turns speculation off by batch size: 0.10-0.14 take speculative_config's
    disable_by_batch_size and read it nowhere (config/speculative.py alone), later releases refuse the
    key (SpeculativeConfig is a config of extra='forbid'; read in the 0.10.0, 0.11.0, 0.14.0, 0.19.1 and
    0.34.0 wheels); SGLang has no such flag (server_args.py 0.5.9, 0.5.23). TensorRT-LLM's decoding
    config has one (max_concurrency, Drafter.should_use_spec_decode), and llmsim's generic engine too."""
    data = _scenario_data({**SPEC.model_dump(exclude_none=True), "disable_above_batch": 8}, n=4)
    data["pools"][0]["engine"] = {"backend": backend}
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(data))
    _check_bad(cli("run", path, "-o", tmp_path / "out"), path,
               ["pools[0].speculative.disable_above_batch", backend])
    assert not (tmp_path / "out").exists()
    for engine in ({"backend": "trtllm"}, {}):
        data["pools"][0]["engine"] = engine
        assert len(simulate(Scenario.model_validate(data)).requests) == 4


def test_vocab_mismatch_in_a_real_process(tmp_path, cli_subprocess):
    name, change, fragments = BAD[0]
    path = _scenario_file(tmp_path, change)
    r = cli_subprocess("run", path, "-o", tmp_path / "out")
    _check_bad(r, path, fragments)
    assert len(r.err.strip().splitlines()) == 1, r.err


def test_a_good_speculative_scenario_runs_from_the_cli(tmp_path, cli):
    res = cli("run", _scenario_file(tmp_path), "--no-plots", "-o", tmp_path / "out", "--json").json()
    assert res["completed"] == 24 and math.isfinite(res["mean_tpot_ms"])


# --- per-class acceptance rates -----------------------------------------------------------
def _classed(classes: list[dict], concurrency: int = 1, n: int = 24) -> Scenario:
    d = _scenario_data(SPEC.model_dump(), n)
    d["workload"]["arrival"] = {"type": "concurrency", "concurrency": concurrency}
    d["classes"] = classes
    return Scenario.model_validate(d)


def test_a_class_alpha_equal_to_the_pools_changes_nothing():
    """The per-class path (per-sequence E counts, the mean over a batch) with
    every class at the pool's α gives today's run bit for bit, under load."""
    plain = simulate(_classed([{"name": "chat"}], concurrency=12, n=120))
    same = simulate(_classed([{"name": "chat", "speculative_acceptance_rate": SPEC.acceptance_rate}],
                             concurrency=12, n=120))
    assert same.setups[0].cm.class_tokens_per_step == {"chat": expected_tokens_per_step(5, 0.82)}
    assert max(r.finish for r in plain.requests) > 2.0    # a loaded run, batches of up to 12
    stamps = lambda o: [(r.admitted, r.first_token, r.finish) for r in o.requests]  # noqa: E731
    assert stamps(same) == stamps(plain)


CODE_CHAT = [{"name": "code", "speculative_acceptance_rate": 0.9}, {"name": "chat"}]   # chat: the pool's 0.82


def test_each_class_alone_decodes_at_its_own_tokens_per_step():
    """One request at a time: a request of class c decodes at exactly the
    step time over E(α_c), so TPOT = (a + r·(P + N/2)) / E_c per request."""
    out = simulate(_classed(CODE_CHAT, concurrency=1, n=30))
    scm = out.setups[0].cm
    a, r = scm.step_coefficients(1)
    E = {"code": expected_tokens_per_step(5, 0.9), "chat": expected_tokens_per_step(5, 0.82)}
    seen = set()
    for q in out.requests:
        if q.output_tokens >= 2:
            seen.add(q.klass)
            assert _tpot(q) == pytest.approx((a + r * (q.input_tokens + q.output_tokens / 2.0)) / E[q.klass],
                                             rel=1e-9)
    assert seen == {"code", "chat"}
    sp = out.results["llmsim"]["pools"]["main"]["speculative"]
    assert sp["tokens_per_step"] == pytest.approx(E["chat"])
    assert sp["classes"] == {"code": {"acceptance_rate": 0.9, "tokens_per_step": pytest.approx(E["code"])}}


def test_a_higher_alpha_class_gets_a_lower_tpot_in_a_shared_batch():
    """Under load the classes share batches, each stepping at the batch's mean
    E, so the gap narrows (the approximation) but keeps its sign; both
    engines agree."""
    sc = _classed([{"name": "code", "speculative_acceptance_rate": 0.95},
                   {"name": "chat", "speculative_acceptance_rate": 0.5}], concurrency=4, n=120)
    fast, ref = simulate(sc), simulate(sc, engine="reference")
    assert [r.finish for r in fast.requests] == pytest.approx([r.finish for r in ref.requests], rel=1e-9)
    c = fast.results["llmsim"]["classes"]
    assert c["code"]["median_tpot_ms"] < c["chat"]["median_tpot_ms"]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_engines_agree_with_per_class_alpha(data):
    reqs = data.draw(workloads(max_n=40), label="requests")
    for r in reqs:
        r.klass = data.draw(st.sampled_from(["a", "b", "c"]))
    cfg = data.draw(engine_configs(), label="cfg")
    cfg = cfg.model_copy(update={"mixed_step_drafts": data.draw(st.booleans(), label="mixed_step_drafts")})
    nb = data.draw(capacities(reqs, cfg), label="num_blocks")
    threshold = data.draw(st.sampled_from([None, 2, 16]), label="disable_above_batch")
    rates = data.draw(st.sampled_from([{"a": 0.95}, {"a": 0.3, "b": 0.9}, {"a": 0.82, "b": 0.6, "c": 0.99}]))
    cm = _spec_cm(SPEC.model_copy(update={"disable_above_batch": threshold})).with_class_rates(rates)
    fast = run_open("fast", reqs, cfg, nb, cm=cm)
    ref = run_open("reference", reqs, cfg, nb, cm=cm)
    problems = compare_runs(fast, ref)
    assert not problems, ("fast and reference disagree with per-class α:\n  " + "\n  ".join(problems[:12])
                          + "\nreproduction: " + describe(reqs, cfg, nb, threshold=threshold, rates=rates))


def test_a_class_alpha_without_a_draft_model_is_one_clear_error(tmp_path, cli):
    d = _scenario_data(None)
    d["classes"] = [{"name": "chat"}, {"name": "code", "speculative_acceptance_rate": 0.9}]
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(d))
    _check_bad(cli("run", path, "-o", tmp_path / "out"), path,
               ["classes[1].speculative_acceptance_rate", "'code'", "no speculative decoding"])
