"""A class sent straight to a pool that decodes for a prefill pool: a vLLM decode instance serves it as
any server would; SGLang's disaggregated servers refuse a request no prefill server bootstraps, so the
scenario is refused, not served as if it were colocated."""
from __future__ import annotations

import pytest
import yaml

from simulator.errors import LlmsimError
from simulator.scenario.compile import compile_scenario
from simulator.scenario.schema import Scenario


def _pair(backend: str, direct: dict) -> dict:
    pool = {"model": "llama-3.1-8b", "gpu": "h100-sxm", "engine": {"backend": backend}}
    return {
        "name": "pd", "workload": {"num_requests": 4, "arrival": {"type": "poisson", "rate_per_s": 2},
                                   "input_tokens": {"dist": "fixed", "value": 1000},
                                   "output_tokens": {"dist": "fixed", "value": 50}},
        "classes": [{"name": "paired", "pool": "prefill"}, {"name": "direct", **direct}],
        "pools": [{"name": "prefill", **pool, "disaggregation": {"decode_pool": "decode"}},
                  {"name": "decode", **pool}] + ([{"name": "own", **pool}] if "pool_by_input_length" in direct else [])}


DIRECT = {"pool": "decode"}
BY_LENGTH = {"pool_by_input_length": [{"pool": "own", "below_tokens": 500}, {"pool": "decode"}]}


@pytest.mark.parametrize("direct, key", [(DIRECT, "classes[1].pool"),
                                         (BY_LENGTH, "classes[1].pool_by_input_length[1].pool")])
def test_sglang_refuses_a_class_sent_straight_to_its_decode_server(direct, key):
    with pytest.raises(LlmsimError) as err:
        compile_scenario(Scenario.model_validate(_pair("sglang", direct)), "s.yaml")
    e = err.value
    assert e.key_path == key and "decodes for pool 'prefill'" in e.message and "bootstrap room" in e.message


@pytest.mark.parametrize("direct", [DIRECT, BY_LENGTH])
def test_a_vllm_decode_instance_serves_a_class_of_its_own(direct):
    compile_scenario(Scenario.model_validate(_pair("vllm", direct)), "s.yaml")


def test_the_cli_refuses_it_on_one_line(tmp_path, cli):
    path = tmp_path / "pd.yaml"
    path.write_text(yaml.safe_dump(_pair("sglang", DIRECT)))
    r = cli("run", path, "--output", tmp_path / "out")
    msg = r.err.strip()
    assert r.code == 2 and "\n" not in msg and "Traceback" not in msg, msg
    assert str(path) in msg and "classes[1].pool" in msg
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("backend, decode_cache", [("sglang", False), ("vllm", True)])
def test_an_sglang_decode_server_runs_no_prefix_cache(tmp_path, backend, decode_cache):
    """SGLang forces its decode server to a chunk cache (without --disaggregation-decode-enable-radix-cache),
    whatever prefix_cache says: its pool was reported enabled, with no lookup ever made; vLLM's keeps its own."""
    from simulator.runner import simulate

    doc = _pair(backend, DIRECT)
    doc["classes"] = doc["classes"][:1]
    for p in doc["pools"]:
        p["engine"]["prefix_cache"] = True
    path = tmp_path / "pd.yaml"
    path.write_text(yaml.safe_dump(doc))
    out = simulate(path)
    decode = next(p for p in out.plan.pools if p.spec.name == "decode")
    assert decode.setup.engine_config.prefix_cache is decode_cache and decode.setup.spec.engine.prefix_cache
    if not decode_cache:      # and results.json says why, with no cache's stats
        from simulator.report.fleet_report import _prefix_cache_block
        assert _prefix_cache_block(decode.setup, [{"prefix_cache": None}]) == {
            "enabled": False, "capacity_tokens": None,
            "why_off": "SGLang's decode server runs a chunk cache, no radix tree (engine.decode_prefix_reuse: false)"}


@pytest.mark.parametrize("version, draft, refused", [
    ("0.5.9", False, "SGLang 0.5.9 has no --disaggregation-decode-enable-radix-cache"),
    (None, True, "SGLang refuses --disaggregation-decode-enable-radix-cache with speculative decoding"),
    (None, False, None)])
def test_an_sglang_decode_radix_cache_is_the_flag_its_release_takes(version, draft, refused):
    """decode_prefix_reuse: true stands for --disaggregation-decode-enable-radix-cache: refused where the
    release has no such flag (0.5.9) and beside a draft, which the flag refuses; kept where it runs."""
    doc = _pair("sglang", DIRECT)
    doc["classes"] = doc["classes"][:1]
    decode = doc["pools"][1]
    decode["engine"] = {"backend": "sglang", "prefix_cache": True, "decode_prefix_reuse": True,
                        **({"backend_version": version} if version else {})}
    if draft:
        decode["speculative"] = {"draft_model": "llama-3.2-1b", "k": 3, "acceptance_rate": 0.7}
    if refused is None:
        plan = compile_scenario(Scenario.model_validate(doc), "s.yaml")
        assert next(p for p in plan.pools if p.spec.name == "decode").setup.engine_config.prefix_cache
        return
    with pytest.raises(LlmsimError) as e:
        compile_scenario(Scenario.model_validate(doc), "s.yaml")
    assert refused in e.value.message and e.value.key_path == "pools[1].engine.decode_prefix_reuse", e.value.render()


@pytest.mark.parametrize("dp, reuse, refused", [(2, True, True), (2, False, False), (1, True, False)])
def test_a_trtllm_decode_pool_fetching_on_its_ranks_reads_no_cache_hit_at_the_hand_off(dp, reuse, refused):
    """TensorRT-LLM's generation server takes a handed-over request in through its executor's one queue,
    its attention-DP rank chosen as the ranks fetch it (executor_request_queue.py
    _fetch_new_requests_attention_dp), and that rank then reuses its cached blocks and has only the
    rest sent (selective cache transfer): a decode cache hit read on a rank chosen at the hand-off
    (decode_prefix_reuse) is refused there, the message saying why; without it the leg waits for that
    fetch, its whole prompt sent."""
    doc = _pair("trtllm", DIRECT)
    doc["classes"] = doc["classes"][:1]
    decode = doc["pools"][1]
    decode["dp"] = dp
    decode["engine"] = {"backend": "trtllm", "prefix_cache": True, "decode_prefix_reuse": reuse}
    if not refused:
        compile_scenario(Scenario.model_validate(doc), "s.yaml")
        return
    with pytest.raises(LlmsimError) as e:
        compile_scenario(Scenario.model_validate(doc), "s.yaml")
    assert e.value.key_path == "pools[1].engine.decode_prefix_reuse" and "fetch" in e.value.message, e.value.render()
    assert "lacks sent" in e.value.message and "the whole prompt sent" in e.value.message, e.value.render()
