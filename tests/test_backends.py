"""Serving-stack backends, the serial front end and benchmark-style closed loops."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import example, given, settings, strategies as st

from simulator.engine.config import EngineConfig
from simulator.profiles import list_builtin, load_hardware
from simulator.profiles.backend import load_backend
from simulator.runner import simulate
from simulator.scenario.schema import PoolSpec, Scenario
from workloads.request import Request, Status

BACKENDS = list_builtin("backend_profiles")
GPUS = ["h100-sxm", "h200", "a100-sxm-80gb", "b200", "l40s"]
# Engine keys a user may set beside a backend, with values to draw from.
USER_KEYS = {
    "max_num_seqs": st.integers(1, 256),
    "max_num_batched_tokens": st.integers(4096, 65536),
    "block_size": st.sampled_from([1, 16, 32]),
    "gpu_memory_utilization": st.floats(0.5, 0.95),
    "prefix_cache": st.booleans(),
    "request_ms": st.floats(0, 50),
    "iteration_us_per_seq": st.floats(0, 100),
}


def test_builtin_backends_are_the_three_stacks():
    assert set(BACKENDS) == {"vllm", "sglang", "trtllm"}
    for name in BACKENDS:
        b = load_backend(name)
        assert b.source and b.versions, f"{name}: a backend cites where its defaults come from"


def test_a_backend_file_of_an_unknown_stack_is_refused_not_run_as_defaults(tmp_path):
    from simulator.errors import LlmsimError
    from simulator.profiles.backend import backend_names
    from simulator.profiles.loader import resolve

    mine = tmp_path / "mine.yaml"
    mine.write_text(resolve("backend_profiles", "vllm").read_text())
    assert load_backend(str(mine)).stack == "vllm"             # a copy of a known stack's release is fine
    mine.write_text(mine.read_text().replace("stack: vllm", "stack: tgi"))
    with pytest.raises(LlmsimError) as e:
        load_backend(str(mine))
    assert e.value.key_path == "stack" and "unknown stack 'tgi'" in e.value.message
    assert "tgi" not in backend_names()


@settings(max_examples=25, deadline=None)
@given(backend=st.sampled_from(BACKENDS), gpu=st.sampled_from(GPUS),
       user=st.dictionaries(st.sampled_from(sorted(USER_KEYS)), st.none(), max_size=4).flatmap(
           lambda d: st.fixed_dictionaries({k: USER_KEYS[k] for k in d})))
def test_a_backend_only_sets_what_it_documents(backend, gpu, user):
    """The resolved engine is the backend's documented defaults (for that GPU)
    under the user's keys: every key the user set wins, every other key
    is the profile's or llmsim's default; nothing else moves, but for a
    kv_memory knob about a launch flag the user's keys do not give
    (KvRule.given_knobs: SGLang's decode graphs and an explicit
    --max-running-requests), which is off, and a running-request cap the
    stack sizes from its pool, which a max_num_seqs set caps instead
    (running_cap: given)."""
    from simulator.kv_memory import RULES

    from simulator.profiles import load_model
    from simulator.profiles.backend import kernel_rule

    if load_backend(backend).engine.get("kv_memory", {}).get("rule", "vllm") != "vllm":
        user.pop("gpu_memory_utilization", None)     # vLLM's knob; the others have kv_memory.fraction
    documented = load_backend(backend).engine_defaults(load_hardware(gpu))
    # the attention kernel the stack picks there may fix the block size, and refuse a pool's own
    kernel = kernel_rule(load_backend(backend).attention_kernels, load_hardware(gpu), load_model("llama-3.1-8b"),
                         False, "bf16")
    if kernel is not None:
        documented["block_size"] = kernel.chosen(documented.get("block_size", 16))
        if "block_size" in user and not kernel.runs(user["block_size"]):
            with pytest.raises(ValueError, match=f"{user['block_size']} tokens: {backend}'s"):
                PoolSpec.model_validate({"model": "llama-3.1-8b", "gpu": gpu, "engine": {"backend": backend, **user}})
            return
    pool = PoolSpec.model_validate({"model": "llama-3.1-8b", "gpu": gpu, "engine": {"backend": backend, **user}})
    kv = documented.get("kv_memory")
    if isinstance(kv, dict):
        documented["kv_memory"] = {**kv, **{k: False for k, key in RULES[kv["rule"]].given_knobs
                                            if k in kv and key not in user}}
    if documented.get("running_cap") == "pool" and "max_num_seqs" in user:
        documented["running_cap"] = "given"
    expected = EngineConfig.model_validate({**documented, **user, "backend": backend})
    assert pool.engine == expected
    for k, v in user.items():
        assert getattr(pool.engine, k) == v
    plain = EngineConfig()
    for k in EngineConfig.model_fields:
        if k not in documented and k not in user and k != "backend":
            assert getattr(pool.engine, k) == getattr(plain, k), k


def test_without_a_backend_the_engine_is_unchanged():
    assert PoolSpec.model_validate({"model": "llama-3.1-8b", "gpu": "h100-sxm"}).engine == EngineConfig()


@pytest.mark.parametrize("gpu, budget, seqs", [("h100-sxm", 8192, 1024), ("h200", 8192, 1024),
                                               ("a100-sxm-80gb", 2048, 256), ("l40s", 2048, 256)])
def test_vllm_budget_follows_the_gpu(gpu, budget, seqs):
    e = PoolSpec.model_validate({"model": "llama-3.1-8b", "gpu": gpu, "engine": {"backend": "vllm"}}).engine
    assert (e.max_num_batched_tokens, e.max_num_seqs, e.chunked_prefill) == (budget, seqs, True)


@pytest.mark.parametrize("gpu, chunk", [("l40s", 4096), ("h100-sxm", 8192), ("h200", 8192), ("b200", 16384)])
def test_sglang_chunk_follows_the_gpu(gpu, chunk):
    e = PoolSpec.model_validate({"model": "llama-3.1-8b", "gpu": gpu, "engine": {"backend": "sglang"}}).engine
    assert e.max_num_batched_tokens == chunk and not e.mixes_prefill


@pytest.mark.parametrize("own", [{"scheduler": "static"}, {"kv_allocation": "contiguous", "prefix_cache": False}])
def test_a_pools_whole_reservation_takes_the_place_of_the_stacks_admission(own):
    """TensorRT-LLM's output-reserving admission and vLLM's chunk-by-chunk prompt KV give way where the
    pool reserves each request's maximum itself (static batching: TensorRT-LLM's STATIC_BATCH policy);
    a pool's own admission beside it stays refused."""
    for backend in ("trtllm", "vllm"):
        e = PoolSpec.model_validate({"model": "llama-3.1-8b", "gpu": "h100-sxm",
                                     "engine": {"backend": backend, **own}}).engine
        assert (e.kv_admission, e.prompt_kv) == ("on_demand", "whole")
    with pytest.raises(Exception, match="kv_admission: reserve_output applies to paged KV"):
        PoolSpec.model_validate({"model": "llama-3.1-8b", "gpu": "h100-sxm",
                                 "engine": {"backend": "trtllm", "kv_admission": "reserve_output", **own}})


def test_trtllm_mixes_whole_prompts():
    e = PoolSpec.model_validate({"model": "llama-3.1-8b", "gpu": "h100-sxm", "engine": {"backend": "trtllm"}}).engine
    assert not e.chunked_prefill and e.mixes_prefill


def _closed(c: int, n: int, isl: int, osl: int, engine: dict | None = None, **arrival) -> Scenario:
    return Scenario.model_validate({
        "name": "t", "workload": {"num_requests": n, "arrival": {"type": "concurrency", "concurrency": c, **arrival},
                                  "input_tokens": {"dist": "fixed", "value": isl},
                                  "output_tokens": {"dist": "fixed", "value": osl}},
        "pools": [{"model": "llama-3.1-8b", "gpu": "h100-sxm", "engine": engine or {}}]})


@settings(max_examples=15, deadline=None)
@given(c=st.integers(1, 24), rounds=st.integers(2, 5), isl=st.integers(16, 3000), osl=st.integers(2, 200),
       backend=st.sampled_from([None, *BACKENDS]))
@example(c=5, rounds=2, isl=16, osl=2, backend="sglang")   # two end together as the last request is sent
def test_a_closed_loop_keeps_exactly_c_requests_in_flight(c, rounds, isl, osl, backend):
    """Each new request is sent as another ends (turnaround 0), so at every
    send C requests are out, or all that are left once fewer than C remain
    (two requests ending in one iteration as the last is sent leave C − 1)."""
    out = simulate(_closed(c, c * rounds, isl, osl, {"backend": backend} if backend else {}))
    reqs = out.requests
    assert all(r.status is Status.FINISHED for r in reqs)
    arr = np.array([r.arrival for r in reqs])
    fin = np.array([r.finish for r in reqs])
    for t in arr:
        assert ((arr <= t) & (fin > t)).sum() == min(c, len(reqs) - (fin <= t).sum())


def test_warmup_requests_run_but_are_not_counted():
    a = simulate(_closed(4, 12, 512, 32, warmup_requests=8))
    assert len(a.requests) == 12 and a.results["completed"] == 12
    assert min(r.id for r in a.requests) == 8
    # nor is their time: the benchmark's clock starts with the first counted request (vllm bench, AIPerf);
    # from t = 0 a warm-up of as many requests as the run halved its throughput
    start = min(r.arrival for r in a.requests)
    assert start > 0 and a.results["duration"] == pytest.approx(max(r.finish for r in a.requests) - start)
    long = simulate(_closed(4, 12, 512, 32, warmup_requests=12)).results
    assert long["request_throughput"] == pytest.approx(a.results["request_throughput"], rel=0.15)


@settings(max_examples=10, deadline=None)
@given(c=st.integers(1, 12), warm=st.integers(1, 30), n=st.integers(1, 30), isl=st.integers(16, 2000),
       osl=st.integers(2, 50), backend=st.sampled_from([None, *BACKENDS]))
def test_a_drained_warmup_ends_before_the_counted_burst(c, warm, n, isl, osl, backend):
    """AIPerf's phases: the counted requests start together when the last
    warm-up request has ended (the end of a run of the warm-up alone), and
    from then on C are in flight while C remain."""
    engine = {"backend": backend} if backend else {}
    warmup_end = max(r.finish for r in simulate(_closed(c, warm, isl, osl, engine)).requests)
    reqs = simulate(_closed(c, n, isl, osl, engine, warmup_requests=warm, warmup_drain=True)).requests
    arr = np.array(sorted(r.arrival for r in reqs))
    fin = np.array([r.finish for r in reqs])
    assert len(reqs) == n and arr.min() == pytest.approx(warmup_end, abs=1e-9)
    assert (arr[:min(c, n)] == arr[0]).all()
    for t in arr:
        assert ((arr <= t) & (fin > t)).sum() == min(c, n - (fin <= t).sum())


def test_drain_without_warmup_is_refused():
    with pytest.raises(ValueError, match="warmup_drain: true needs warmup_requests > 0"):
        _closed(2, 4, 64, 8, warmup_drain=True)


def test_ramp_up_spreads_the_first_sends():
    out = simulate(_closed(5, 5, 256, 2000, ramp_up_s=10.0))   # each lasts longer than the ramp
    assert [round(r.arrival, 9) for r in out.requests] == [0.0, 2.0, 4.0, 6.0, 8.0]


def test_the_front_end_hands_a_burst_over_one_request_at_a_time():
    """Five requests sent together reach the scheduler request_ms apart, so
    the first is admitted alone and the rest wait for its iteration to end."""
    out = simulate(_closed(5, 5, 2048, 4, {"request_ms": 4.0}))
    reqs = sorted(out.requests, key=lambda r: r.id)
    assert reqs[0].admitted == pytest.approx(0.004)
    assert all(r.admitted >= 0.004 * (i + 1) - 1e-12 for i, r in enumerate(reqs))
    assert reqs[1].admitted > reqs[0].admitted


@settings(max_examples=10, deadline=None)
@given(k=st.integers(2, 6), per=st.integers(1, 8), router=st.sampled_from(["least_outstanding", "prefix_aware"]))
def test_a_burst_behind_the_front_ends_is_routed_by_load(k, per, router):
    """A request in a replica's front end is already that replica's load: a
    closed loop's first k x per sends, all at t = 0, spread over k replicas
    routed by load, instead of all going to the one that looked idle."""
    raw = _closed(k * per, k * per, 512, 4, {"backend": "vllm"}).model_dump(exclude_unset=True)
    raw["pools"][0].update(replicas=k, router=router)
    counts = np.bincount([r.replica for r in simulate(Scenario.model_validate(raw)).requests], minlength=k)
    assert counts.max() - counts.min() <= 1, counts


def test_response_time_shifts_first_token_and_finish_not_tpot():
    base = simulate(_closed(2, 6, 512, 32))
    late = simulate(_closed(2, 6, 512, 32, {"response_ms": 7.0}))
    assert late.results["mean_tpot_ms"] == pytest.approx(base.results["mean_tpot_ms"], rel=1e-9)
    b0, l0 = base.requests[0], late.requests[0]
    assert l0.first_token - b0.first_token == pytest.approx(0.007)
    assert l0.finish - b0.finish == pytest.approx(0.007)


def test_per_sequence_iteration_time_grows_with_the_batch():
    from simulator.costmodel import CostModel
    from simulator.profiles import load_model

    m, g = load_model("llama-3.1-8b"), load_hardware("h100-sxm")
    plain = CostModel(m, g, 1, iteration_overhead_ms=1.0)
    busy = CostModel(m, g, 1, iteration_overhead_ms=1.0, iteration_us_per_seq=20.0)
    for b in (1, 8, 64):
        assert busy.decode_coefficients(b)[0] - plain.decode_coefficients(b)[0] == pytest.approx(20e-6 * b)
        assert busy.step_time((), b, b * 1000.0) - plain.step_time((), b, b * 1000.0) == pytest.approx(20e-6 * b)


@pytest.mark.parametrize("engine", ["fast", "reference"])
def test_sglang_chunks_a_long_prompt_over_prefill_only_batches(engine):
    """SGLang's default: a prompt longer than the chunk runs over consecutive
    prefill batches of chunk tokens while the running decodes wait, then the
    decodes resume (schedule_policy.py PrefillAdder.add_chunked_req)."""
    from helpers_engine import cost_model, run_open

    cfg = EngineConfig(chunked_prefill=True, mixed_prefill=False, max_num_seqs=8, max_num_batched_tokens=512,
                       block_size=1)
    first = Request(id=0, arrival=0.0, input_tokens=100, output_tokens=400)
    long = Request(id=1, arrival=0.05, input_tokens=1800, output_tokens=2)
    out = run_open(engine, [first, long], cfg, 100_000, cm=cost_model("llama-3.1-8b", "h100-sxm", 1))
    a, b = sorted(out.requests, key=lambda r: r.id)
    cm = cost_model("llama-3.1-8b", "h100-sxm", 1)
    chunks = [cm.step_time([(512, 0)], sampling_seqs=0), cm.step_time([(512, 512)], sampling_seqs=0),
              cm.step_time([(512, 1024)], sampling_seqs=0), cm.step_time([(264, 1536)], sampling_seqs=1)]
    # The long prompt's four chunk batches run back to back from its admission, no decode
    # iteration between them, none beside them (a decode beside would lengthen each).
    assert b.first_token - b.admitted == pytest.approx(sum(chunks), rel=1e-9)
    assert a.status is Status.FINISHED and a.finish > b.first_token


@pytest.mark.parametrize("engine", ["fast", "reference"])
@pytest.mark.parametrize("cap, together", [(None, True), (2500, True), (1500, False)])
def test_max_prefill_tokens_keeps_a_second_prompt_out(engine, cap, together):
    """SGLang's --max-prefill-tokens: a second prompt joins a prefill batch
    only if its tokens are fewer than what the first leaves of the cap,
    however much room the chunk has (PrefillAdder.add_one_req)."""
    from helpers_engine import cost_model, run_open

    cfg = EngineConfig(chunked_prefill=True, mixed_prefill=False, max_num_seqs=8, max_num_batched_tokens=8192,
                       block_size=1, max_prefill_tokens=cap)
    reqs = [Request(id=i, arrival=0.0, input_tokens=1000, output_tokens=4) for i in range(2)]
    a, b = sorted(run_open(engine, reqs, cfg, 100_000, cm=cost_model("llama-3.1-8b", "h100-sxm", 1)).requests,
                  key=lambda r: r.id)
    assert (a.first_token == b.first_token) is together


def test_sglang_profile_chunks_in_prefill_only_batches():
    e = EngineConfig(**{k: v for k, v in load_backend("sglang").engine.items()
                        if k in EngineConfig.model_fields})
    assert e.chunked_prefill and not e.mixes_prefill


@pytest.mark.parametrize("gpu, says", [("h100", "pools[0].gpu: unknown GPU 'h100' (did you mean h100-pcie or h100-sxm?); "
                                                 "valid names: "),
                                       ("nope.yaml", "pools[0].gpu: nope.yaml: file not found")])
def test_a_bad_gpu_under_a_named_backend_is_the_gpu_keys_fault(tmp_path, cli, gpu, says):
    """The backend's defaults read the pool's GPU first; its failure was reported as the backend's
    (pools[0]: engine.backend 'vllm': unknown GPU ...), pointing at the wrong key."""
    from test_sweep import write_tiny_scenario

    sc = write_tiny_scenario(tmp_path)
    r = cli("run", sc, "--set", "pools.chat.engine.backend=vllm", "--set", f"pools.chat.gpu={gpu}")
    assert r.code == 2 and says in r.err and "engine.backend 'vllm'" not in r.err, r.err


def test_a_stack_that_does_not_run_on_the_gpu_is_the_backend_keys_fault():
    """TensorRT-LLM on an MI300X was refused as pools[0].tp's fault, a key the user had not set."""
    from simulator.errors import LlmsimError
    from simulator.fleet.setup import setup_pool

    pool = {"name": "p", "model": "llama-3-8b", "gpu": "mi300x", "engine": {"backend": "trtllm"}}
    with pytest.raises(LlmsimError, match="the trtllm serving stack does not run on mi300x") as e:
        setup_pool(PoolSpec.model_validate(pool), 0)
    assert e.value.key_path == "pools[0].engine.backend"


@pytest.mark.parametrize("rule", [[], {"a": 1}, 3])
def test_a_profiles_kv_memory_rule_that_is_no_name_is_refused_naming_the_key(tmp_path, rule):
    """A kv_memory rule written as a list or a mapping reached a lookup by name before KvMemory read
    it (a TypeError's traceback, found by the loader fuzz test): it is refused as any unknown rule."""
    import yaml

    from simulator.errors import LlmsimError
    from simulator.profiles.backend import load_backend
    from simulator.profiles.loader import builtin_dir

    data = {**yaml.safe_load((builtin_dir("backend_profiles") / "vllm.yaml").read_text()), "name": "b"}
    data["engine"]["kv_memory"]["rule"] = rule
    (tmp_path / "b.yaml").write_text(yaml.safe_dump(data))
    with pytest.raises(LlmsimError) as e:
        load_backend(str(tmp_path / "b.yaml"))
    assert "engine.kv_memory.rule" in e.value.render()


def _doc_stack_file() -> str:
    from conftest import REPO_ROOT

    page = (REPO_ROOT / "docs" / "how-to" / "add-a-serving-stack.md").read_text()
    return page.split("```yaml\n", 1)[1].split("```", 1)[0]


@pytest.mark.parametrize("drop, says, key", [
    ("  async_scheduling: true\n", "(engine async_scheduling)", "engine"),
    ("  priority_scheduling: false\n", "(engine priority_scheduling)", "engine"),
    ("  max_num_seqs: 512\n", "(engine max_num_seqs)", "engine"),
    ("  eager_launch_us: 60\n", "(overheads eager_launch_us)", "overheads"),
    ("\nep_spans_replica: true", "(flags ep_spans_replica)", "ep_spans_replica"),
])
def test_a_stack_file_that_leaves_out_its_stacks_keys_is_refused_naming_them(tmp_path, drop, says, key):
    """The how-to's own vLLM fork, which wrote the keys it changed, ran at llmsim's defaults for the rest:
    no async scheduling, no CPU time per eager launch, an ep vLLM has no launch for, reported as served by
    the fork."""
    from simulator.errors import LlmsimError

    text = _doc_stack_file()
    mine = tmp_path / "my-stack.yaml"
    mine.write_text(text)
    assert load_backend(str(mine)).engine["max_num_batched_tokens"] == 4096      # the page's file loads
    assert drop in text
    mine.write_text(text.replace(drop, ""))
    with pytest.raises(LlmsimError) as e:
        load_backend(str(mine))
    assert e.value.source == str(mine) and e.value.key_path == key, e.value.render()
    assert says in e.value.message and "not vllm's" in e.value.message, e.value.message
    assert "`llmsim profiles show vllm --kind backend`" in e.value.message
