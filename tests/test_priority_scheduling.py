"""engine.priority_scheduling: classes of different priorities sharing a pool
whose stack serves first come, first served are refused, not reordered; one
priority is served first come, first served; with the key set, the larger
priority is admitted first."""
from __future__ import annotations

import copy

import pytest
import yaml

from simulator.errors import LlmsimError
from simulator.runner import simulate
from simulator.scenario.compile import compile_scenario
from simulator.scenario.schema import Scenario

#: one replica under a queue: 120 requests at 60/s, prompts long enough that some wait
BASE = {
    "name": "tiers", "seed": 3,
    "workload": {"num_requests": 120, "arrival": {"type": "poisson", "rate_per_s": 60},
                 "input_tokens": {"dist": "lognormal", "mean": 3000, "std": 600, "min": 256, "max": 6000},
                 "output_tokens": {"dist": "lognormal", "mean": 60, "std": 20, "min": 8, "max": 120}},
    "classes": [{"name": "free", "share": 0.7, "priority": 0}, {"name": "paid", "share": 0.3, "priority": 1}],
    "pools": [{"name": "chat", "model": "llama-3-8b", "gpu": "h100-sxm", "replicas": 1,
               "engine": {"backend": "vllm", "max_num_batched_tokens": 2048}}],
}


def _scenario(backend: str | None = "vllm", priorities: tuple[int, int] = (0, 1), **engine) -> dict:
    d = copy.deepcopy(BASE)
    for c, p in zip(d["classes"], priorities):
        c["priority"] = p
    e = d["pools"][0]["engine"]
    if backend != "vllm":      # the others' budgets take the whole prompts llmsim's tests give them
        d["pools"][0]["engine"] = e = {} if backend is None else {"backend": backend}
    e.update(engine)
    return d


#: SGLang launched with --enable-priority-scheduling: its full batch is not held until a request leaves
SGLANG_PRIORITY = {"priority_scheduling": True, "full_until_leave": False}


def _refusal(d: dict) -> LlmsimError:
    with pytest.raises(LlmsimError) as err:
        compile_scenario(Scenario.model_validate(d), "s.yaml")
    return err.value


@pytest.mark.parametrize("backend, flag", [("vllm", "--scheduling-policy priority"),
                                           ("sglang", "--enable-priority-scheduling"),
                                           ("trtllm", "first come, first served")])
def test_a_fcfs_stack_refuses_classes_of_different_priorities_on_one_line(backend, flag, tmp_path, cli):
    path = tmp_path / "tiers.yaml"
    path.write_text(yaml.safe_dump(_scenario(backend)))
    r = cli("run", path, "--output", tmp_path / "out")
    msg = r.err.strip()
    assert r.code == 2 and "\n" not in msg and "Traceback" not in msg, msg
    assert str(path) in msg and "pools[0].engine.priority_scheduling" in msg and flag in msg, msg
    assert "'free' (priority 0) and 'paid' (priority 1)" in msg, msg
    assert not (tmp_path / "out").exists()


def test_classes_of_one_priority_are_served_first_come_first_served():
    out = simulate(Scenario.model_validate(_scenario(priorities=(2, 2))))
    admitted = [r.admitted for r in sorted(out.requests, key=lambda r: r.arrival)]
    assert len(admitted) == 120 and all(a == a for a in admitted)     # every request admitted (none NaN)
    assert admitted == sorted(admitted)


def test_priority_scheduling_admits_the_larger_priority_first():
    out = simulate(Scenario.model_validate(_scenario(priority_scheduling=True)))
    done = sorted(out.requests, key=lambda r: r.arrival)
    overtaken = [(a.id, b.id) for i, a in enumerate(done) for b in done[i + 1:]
                 if a.klass == "free" and b.klass == "paid" and b.admitted < a.admitted]
    assert overtaken, "no paid request was admitted before an earlier free one"
    assert not any(a.klass == "paid" and b.klass == "free" and b.admitted < a.admitted
                   for i, a in enumerate(done) for b in done[i + 1:])


def test_the_generic_engine_keeps_priority_scheduling():
    compile_scenario(Scenario.model_validate(_scenario(None)), "s.yaml")
    e = _refusal(_scenario(None, priority_scheduling=False))
    assert e.key_path == "pools[0].engine.priority_scheduling" and "priority_scheduling: true" in e.message


def test_classes_in_pools_of_their_own_need_no_priority_scheduling():
    d = _scenario()
    d["pools"].append({**d["pools"][0], "name": "paid"})
    d["classes"][1]["pool"] = "paid"
    d["classes"][0]["pool"] = "chat"
    compile_scenario(Scenario.model_validate(d), "s.yaml")


def test_sglang_priorities_further_apart_than_its_preemption_threshold_are_refused():
    compile_scenario(Scenario.model_validate(_scenario("sglang", (0, 10), **SGLANG_PRIORITY)), "s.yaml")
    e = _refusal(_scenario("sglang", (0, 11), **SGLANG_PRIORITY))
    assert e.key_path == "classes[1].priority" and "--priority-scheduling-preemption-threshold" in e.message


def test_trtllm_priority_scheduling_is_refused_even_for_one_priority():
    e = _refusal(_scenario("trtllm", (0, 0), priority_scheduling=True))
    assert e.key_path == "pools[0].engine.priority_scheduling" and "TensorRT-LLM" in e.message


def test_a_decode_pool_queues_the_classes_of_the_prefill_pool_it_serves():
    d = _scenario(priorities=(0, 1))
    d["pools"] = [{**d["pools"][0], "name": "prefill",
                   "engine": {"backend": "vllm", "priority_scheduling": True},
                   "disaggregation": {"decode_pool": "decode", "link": {"preset": "nvlink"}}},
                  {**d["pools"][0], "name": "decode"}]
    for c in d["classes"]:
        c["pool"] = "prefill"
    e = _refusal(d)
    assert e.key_path == "pools[1].engine.priority_scheduling" and "share pool 'decode'" in e.message


def test_a_backend_profile_without_the_key_is_refused_naming_it(tmp_path):
    """A copy of a built-in profile written before the key existed (``llmsim validate --fit``) does not
    run the generic engine's true: the file is refused naming the key its stack's profile sets
    (simulator/profiles/stack_file.py)."""
    from pydantic import ValidationError

    from simulator.profiles.loader import resolve

    text = resolve("backend_profiles", "vllm").read_text()
    assert "  priority_scheduling: false\n" in text
    path = tmp_path / "fitted.yaml"
    path.write_text(text.replace("  priority_scheduling: false\n", "").replace("name: vllm", "name: fitted", 1))
    with pytest.raises(ValidationError, match=r"engine: leaves out what vllm's profile sets \(engine "
                                              r"priority_scheduling\)"):
        Scenario.model_validate(_scenario(str(path)))


@pytest.mark.parametrize("backend, old, read", [("vllm", "0.10.1", "0.11.0"), ("sglang", "0.5.3", "0.5.4")])
def test_priority_scheduling_on_a_release_older_than_those_read_is_refused(backend, old, read):
    on = SGLANG_PRIORITY if backend == "sglang" else {"priority_scheduling": True}
    compile_scenario(Scenario.model_validate(_scenario(backend, backend_version=read, **on)), "s.yaml")
    e = _refusal(_scenario(backend, backend_version=old, **on))
    assert e.key_path == "pools[0].engine.priority_scheduling" and f"from {read}" in e.message


@pytest.mark.parametrize("version", ["0.5.4", "0.5.23"])
def test_sglang_priority_scheduling_does_not_hold_a_full_batch(version):
    """Launched with --enable-priority-scheduling SGLang clears batch_is_full at every plan (scheduler.py
    get_new_batch_prefill: try_preemption to 0.5.9, enable_priority_preemption from 0.5.14), so the
    backend's full_until_leave: true is refused beside it, one priority or two."""
    e = _refusal(_scenario("sglang", (0, 0), priority_scheduling=True, backend_version=version))
    assert e.key_path == "pools[0].engine.full_until_leave" and "set full_until_leave: false" in e.message
    compile_scenario(Scenario.model_validate(_scenario("sglang", (0, 0), backend_version=version, **SGLANG_PRIORITY)),
                     "s.yaml")
    compile_scenario(Scenario.model_validate(_scenario("sglang", (0, 0), backend_version=version)), "s.yaml")
