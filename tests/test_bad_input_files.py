"""Bad input files, by kind and by class: every file llmsim reads (scenario, GPU, model YAML and
config.json, backend profile, trace, benchmark JSON and CSV, results.json, sweep file) and the
command-line values and output paths around them.

The contract, checked for every case: exit code 2, one ``error:`` line naming the file and the key,
no traceback, and the folder left as it was (no -o folder, staging folder or partial file). The
classes: wrong types (a number written as text, true/false), values out of range or against
physics, relations between fields, misspelt keys (in any variant, selected or not), resource bombs
(YAML aliases and nesting, huge and endless files, compressed bombs, runs past the run-count limit)
and files that are not regular files. Each loader also has a fuzz test: random mutations of a valid
file load or end in one LlmsimError naming the file.
"""
from __future__ import annotations

import copy
import errno
import gzip
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import pytest
import yaml
from hypothesis import given, settings, strategies as st

from simulator.errors import LlmsimError
from simulator.profiles.loader import builtin_dir
from simulator.scenario.strict import leaves
from tests.conftest import _LLAMA3_8B_CONFIG
from tests.test_bad_input import FUZZ, POOL, SCENARIO, write_yaml

GPU = yaml.safe_load((builtin_dir("hardware_profiles") / "h100-sxm.yaml").read_text())
BACKEND = yaml.safe_load((builtin_dir("backend_profiles") / "vllm.yaml").read_text())
MODEL = {**_LLAMA3_8B_CONFIG, "name": "m"}
BENCH = {"completed": 100, "total_input_tokens": 100_000, "total_output_tokens": 20_000, "mean_ttft_ms": 50.0,
         "median_ttft_ms": 45.0, "mean_tpot_ms": 10.0, "output_throughput": 1000.0, "request_rate": "inf",
         "max_concurrency": 8}
RESULTS = {"completed": 100, "failed": 0, "p99_ttft_ms": 200.0, "llmsim": {"gpus": 2, "product": {"gpus": 2}, "pools": {}}}
BOMB = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join([f'*{chr(97 + i)}'] * 10)}]\n" for i in range(8))
DEEP_BLOCK = "".join("  " * i + f"k{i}:\n" for i in range(100)) + "  " * 100 + "v: 1\n"


def _set(data: Any, path: tuple, value: Any) -> Any:
    data = copy.deepcopy(data)
    node = data
    for part in path[:-1]:
        node = node[part]
    if value is _DELETE:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    return data


_DELETE = object()


def _key(path: tuple) -> str:
    out = ""
    for p in path:
        out += f"[{p}]" if isinstance(p, int) else ("." if out else "") + str(p)
    return out


def _listing(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def refused(r, *fragments: str) -> str:
    """Exit 2, exactly one ``error:`` line holding every fragment, no traceback."""
    assert r.code == 2, f"exit {r.code}\nstdout:\n{r.out[-2000:]}\nstderr:\n{r.err[-2000:]}"
    assert "Traceback" not in r.err, r.err
    lines = [ln for ln in r.err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), r.err
    for f in fragments:
        assert f in lines[0], f"{f!r} not in {lines[0]!r}"
    return lines[0]


# --- the cases ----------------------------------------------------------------------------------------------
# Each case: (id, files to write {name: dict | str | bytes | callable(path)}, command line, fragments).
# Paths in the command line are relative to the case's folder; the run runs there.
Case = tuple[str, dict[str, Any], list[str], list[str]]
CASES: list[Case] = []

RUN = ["run", "s.yaml", "-o", "out"]


def scenario_case(cid: str, data: Any, *fragments: str) -> None:
    CASES.append((f"scenario-{cid}", {"s.yaml": data}, RUN, ["s.yaml", *fragments]))


# (1) wrong types: every number of the scenario written as text or as true/false, and made negative
_NUMERIC = [(p, v) for p, v in leaves(SCENARIO) if isinstance(v, (int, float)) and not isinstance(v, bool)]
for _p, _v in _NUMERIC:
    scenario_case(f"text-{_key(_p)}", _set(SCENARIO, _p, str(_v)), _key(_p), "got the text")
    scenario_case(f"bool-{_key(_p)}", _set(SCENARIO, _p, True), _key(_p), "got True")
    scenario_case(f"negative-{_key(_p)}", _set(SCENARIO, _p, -_v - 1), _key(_p))
scenario_case("text-tp", _set(SCENARIO, ("pools", 0, "tp"), "2"), "pools[0].tp", "got the text '2'")
# misspelt keys at every level, and in a variant that is not selected
for _p in [("nmae",), ("workload", "num_request"), ("workload", "arrival", "rate_per_sec"),
           ("workload", "input_tokens", "mena"), ("pools", 0, "replica")]:
    scenario_case(f"typo-{_key(_p)}", _set(SCENARIO, _p, 1), _key(_p), "unknown key")
scenario_case("typo-engine", _set(SCENARIO, ("pools", 0, "engine"), {"max_num_seq": 64}),
              "pools[0].engine.max_num_seq", "unknown key")
scenario_case("typo-slo", _set(SCENARIO, ("slo", "ttft_p99"), 5), "slo.ttft_p99",
              "unknown SLO key (did you mean ttft_p99_ms?)")
# results.json's (and vLLM's) order of the words
scenario_case("slo-results-order", _set(SCENARIO, ("slo", "p99_tpot_ms"), 50), "slo.p99_tpot_ms",
              "unknown SLO key (did you mean tpot_p99_ms?)")
scenario_case("variant-typo", {**SCENARIO, "variants": [{"name": "v", "set": {f"pools.{POOL}.replicaz": 3}}]},
              "variants.v.set", "replicaz", "unknown key")
scenario_case("variant-no-pool", {**SCENARIO, "variants": [{"name": "v", "set": {"pools.nope.tp": 2}}]},
              "variants.v.set.pools.nope.tp", "no item named 'nope'")
scenario_case("variant-text", {**SCENARIO, "variants": [{"name": "v", "set": {f"pools.{POOL}.tp": "2"}}]},
              "variants.v.set", "pools[0].tp", "got the text")
scenario_case("variant-second-step", {**SCENARIO, "variants": [
    {"name": "ok", "set": {f"pools.{POOL}.replicas": 3}}, {"name": "bad", "set": {"timeline_interval_s": -1}}]},
    "variants.bad.set", "timeline_interval_s")
# relations between fields
scenario_case("slo-p50-above-p99", _set(SCENARIO, ("slo",), {"ttft_p50_ms": 1000, "ttft_p99_ms": 100}),
              "slo.ttft_p50_ms", "can never exceed")
scenario_case("slo-p90-above-p99", _set(SCENARIO, ("slo",), {"tpot_p90_ms": 60, "tpot_p99_ms": 50}),
              "slo.tpot_p90_ms")
scenario_case("slo-text", _set(SCENARIO, ("slo", "ttft_p99_ms"), "300"), "slo.ttft_p99_ms")
scenario_case("slo-negative", _set(SCENARIO, ("slo", "ttft_p99_ms"), -300), "slo.ttft_p99_ms")
scenario_case("class-slo-inverted", {**SCENARIO, "classes": [
    {"name": "all", "share": 1.0, "slo": {"e2el_p50_ms": 900, "e2el_p95_ms": 800}}]}, "classes[0].slo.e2el_p50_ms")
scenario_case("min-above-max", _set(SCENARIO, ("workload", "input_tokens", "min"), 5000), "input_tokens")
# energy: PUE below 1 or negative, a grid llmsim has no figure for
scenario_case("energy-pue-below-1", {**SCENARIO, "energy": {"pue": 0.9}}, "energy.pue", "at least 1")
scenario_case("energy-pue-negative", {**SCENARIO, "energy": {"pue": -1.5}}, "energy.pue", "at least 1")
scenario_case("energy-unknown-grid", {**SCENARIO, "energy": {"grid": "mars"}}, "energy.grid", "unknown grid 'mars'")
# LoRA serving: vLLM's limits, and what llmsim's LoRA model does not cover (refused, not approximated)
_LORA = {"max_loras": 2, "adapters": 10}
for _cid, _lora, _pool, _frags in [
        ("max-loras-zero", {**_LORA, "max_loras": 0}, {}, ["pools[0].lora.max_loras"]),
        ("rank-not-vllms", {**_LORA, "max_lora_rank": 12}, {}, ["pools[0].lora.max_lora_rank", "max_lora_rank 12"]),
        ("cpu-below-gpu", {**_LORA, "max_cpu_loras": 1}, {}, ["pools[0].lora", "max_cpu_loras (1)"]),
        ("rank-above-max", {**_LORA, "rank": 32}, {}, ["pools[0].lora", "rank 32 exceeds"]),
        ("popularity-typo", {**_LORA, "popularity": {"type": "zipf", "ss": 1}}, {}, ["pools[0].lora.popularity"]),
        ("sglang", _LORA, {"engine": {"backend": "sglang"}}, ["pools[0].lora", "sglang's LoRA"]),
        ("static", _LORA, {"engine": {"scheduler": "static"}}, ["pools[0].lora", "static batching"]),
        ("speculative", _LORA, {"speculative": {"draft_model": "llama-3.2-1b", "k": 3, "acceptance_rate": 0.7}},
         ["pools[0].lora", "speculative decoding"]),
        ("moe", _LORA, {"model": "qwen3-30b-a3b"}, ["pools[0].lora", "dense transformers"]),
        # the tiers key a block by id, and two adapters' prompts share every id past the first
        ("kv-offload", _LORA, {"engine": {"prefix_cache_capacity_tokens": 0, "kv_offload": {"host_gb": 10}}},
         ["pools[0].lora", "kv_offload"])]:
    scenario_case(f"lora-{_cid}", _set(_set(SCENARIO, ("pools", 0, "lora"), _lora), ("pools", 0),
                                       {**SCENARIO["pools"][0], "lora": _lora, **_pool}), *_frags)
scenario_case("lora-disaggregated", {**SCENARIO, "classes": [{"name": "all", "share": 1.0, "pool": "chat"}], "pools": [
    {**SCENARIO["pools"][0], "disaggregation": {"decode_pool": "dec"}},
    {**SCENARIO["pools"][0], "name": "dec", "lora": _LORA}]}, "pools[0].disaggregation.decode_pool", "LoRA")
# engine.kv_memory: a knob the pool's rule does not read is refused, naming the knob, the rule and who reads it
for _cid, _engine, _frags in [
        ("sampler-under-sglang", {"backend": "sglang", "kv_memory": {"sampler_logit_bytes": 28}},
         ["sampler_logit_bytes is read only by rules vllm and trtllm", "rule sglang"]),
        ("graph-gib-under-sglang", {"backend": "sglang", "kv_memory": {"cuda_graph_gib": 2.5}},
         ["cuda_graph_gib is read only by rules vllm and trtllm", "rule sglang"]),
        ("chunk-under-vllm", {"backend": "vllm", "kv_memory": {"chunked_prefill_size": 4096}},
         ["chunked_prefill_size is read only by rule sglang", "rule vllm"]),
        ("graph-bs-under-vllm", {"kv_memory": {"cuda_graph_max_bs": 64}},
         ["cuda_graph_max_bs is read only by rule sglang", "rule vllm"]),
        ("chunk-under-trtllm", {"backend": "trtllm", "kv_memory": {"chunked_prefill_size": "default"}},
         ["chunked_prefill_size is read only by rule sglang", "rule trtllm"]),
        ("graph-bs-under-trtllm", {"backend": "trtllm", "kv_memory": {"cuda_graph_max_bs": 64}},
         ["cuda_graph_max_bs is read only by rule sglang", "rule trtllm"]),
        ("graph-bs-beside-fraction", {"backend": "sglang", "kv_memory": {"fraction": 0.85, "cuda_graph_max_bs": 64}},
         ["cuda_graph_max_bs only sizes rule sglang's default fraction", "kv_memory.fraction replaces"])]:
    scenario_case(f"kv-memory-{_cid}", _set(SCENARIO, ("pools", 0, "engine"), _engine), "pools[0].engine.kv_memory",
                  *_frags)
CASES.append(("scenario-kv-memory-set-flag", {"s.yaml": SCENARIO},
              [*RUN, "--set", f"pools.{POOL}.engine.kv_memory.sampler_logit_bytes=28",
               "--set", f"pools.{POOL}.engine.backend=sglang"],
              ["s.yaml", "pools[0].engine.kv_memory", "sampler_logit_bytes is read only by rules vllm and trtllm"]))
# a TensorRT-LLM context server refuses its requests under the overlap scheduler
_pre = {**_set(SCENARIO, ("pools", 0, "engine"), {"backend": "trtllm", "schedule_ahead": True})["pools"][0],
        "disaggregation": {"decode_pool": "dec"}}
scenario_case("trtllm-prefill-overlap",
              {**SCENARIO, "classes": [{"name": "all", "pool": _pre["name"]}],
               "pools": [_pre, {**_pre, "name": "dec", "engine": {"backend": "trtllm"}, "disaggregation": None}]},
              "pools[0].engine.schedule_ahead", "true on a disaggregated prefill pool", "Context only requests")
# structure and resource bombs
scenario_case("alias-bomb", BOMB + yaml.safe_dump(SCENARIO), "aliases")
scenario_case("deep-block", DEEP_BLOCK, "64 levels")
scenario_case("deep-flow", "a: " + "[" * 200 + "]" * 200 + "\n", "64 levels")
scenario_case("duplicate-key", yaml.safe_dump(SCENARIO, sort_keys=False).replace("seed: 3", "seed: 3\nseed: 4"),
              "'seed' given twice")
scenario_case("binary", b"\x00\x01\x02\xff\xfe" * 50, "UTF-8")
scenario_case("empty", "", "expected a mapping")
scenario_case("a-list", "- 1\n- 2\n", "expected a mapping")
scenario_case("bad-yaml", "name: [unclosed\n", "invalid YAML")
scenario_case("tab-indent", "name: t\nworkload:\n\tnum_requests: 3\n", "invalid YAML")
CASES.append(("scenario-missing", {}, RUN, ["s.yaml", "not found"]))
CASES.append(("scenario-dev-zero", {}, ["run", "/dev/zero", "-o", "out"], ["/dev/zero", "not a regular file"]))
CASES.append(("scenario-fifo", {"s.yaml": lambda p: os.mkfifo(p)}, RUN, ["s.yaml", "not a regular file"]))
CASES.append(("scenario-symlink-to-device", {"s.yaml": lambda p: p.symlink_to("/dev/zero")}, RUN,
              ["s.yaml", "not a regular file"]))
CASES.append(("scenario-too-large", {"s.yaml": lambda p: os.truncate(p, 100 * 2**20) if p.touch() is None else None},
              RUN, ["s.yaml", "larger than any scenario file"]))


def profile_case(kind: str, cid: str, name: str, data: Any, *fragments: str, key: str = "gpu") -> None:
    CASES.append((f"{kind}-{cid}", {"s.yaml": SCENARIO, name: data},
                  [*RUN, "--set", f"pools.{POOL}.{key}={name}"], [name, *fragments]))


# GPU profiles: every number of its datasheet, as text, negative, zero or true
for _p in [("hbm_gib",), ("hbm_bandwidth_tb_s",), ("num_sms",), ("host_link_gb_s",), ("fp8_gemm_efficiency",),
           ("peak_tflops", "bf16"), ("peak_tflops", "fp8"), ("interconnect", "bandwidth_gb_s"),
           ("interconnect", "max_tp"), ("price", "usd_per_gpu_hour"), ("calibration", "gemm", "eta_compute")]:
    _v = GPU
    for _part in _p:
        _v = _v[_part]
    profile_case("gpu", f"text-{_key(_p)}", "g.yaml", _set(GPU, _p, str(_v)), _key(_p), "got the text")
    profile_case("gpu", f"negative-{_key(_p)}", "g.yaml", _set(GPU, _p, -_v), _key(_p))
    profile_case("gpu", f"bool-{_key(_p)}", "g.yaml", _set(GPU, _p, True), _key(_p))
# an MoE kernel's tile ladder: a tile of no rows, or a ladder out of order, priced the step without a word
for _cid, _tiles, _frag in [("negative", [-128], "greater than or equal to 1"), ("zero", [0], "greater than or equal to 1"),
                            ("unsorted", [256, 64, 128], "token tiles must ascend")]:
    profile_case("gpu", f"token-tiles-{_cid}", "g.yaml", _set(GPU, ("calibration", "moe", "fp8", "token_tiles"), _tiles),
                 "calibration.moe.fp8.token_tiles", _frag)
profile_case("gpu", "no-bf16", "g.yaml", _set(GPU, ("peak_tflops", "bf16"), _DELETE), "peak_tflops", "bf16 entry")
profile_case("gpu", "idle-above-tdp", "g.yaml", _set(GPU, ("power", "idle_w"), 800), "power", "below tdp_w")
profile_case("gpu", "typo", "g.yaml", _set(GPU, ("hbm_gb",), 80), "hbm_gb", "unknown key")
profile_case("gpu", "unknown-dtype", "g.yaml", _set(GPU, ("peak_tflops", "fp3"), 100), "peak_tflops.fp3")
profile_case("gpu", "alias-bomb", "g.yaml", BOMB + yaml.safe_dump(GPU), "aliases")
profile_case("gpu", "not-a-mapping", "g.yaml", "[1, 2]\n", "expected a mapping")
profile_case("gpu", "fifo", "g.yaml", lambda p: os.mkfifo(p), "not a regular file")
CASES.append(("model-name-too-long", {"s.yaml": SCENARIO}, [*RUN, "--set", f"pools.{POOL}.model={'m' * 10000}"],
              ["pools[0].model", "name is too long", "characters)…"]))
CASES.append(("gpu-name-too-long", {"s.yaml": SCENARIO}, [*RUN, "--set", f"pools.{POOL}.gpu={'x' * 5000}.yaml"],
              ["pools[0].gpu", "name is too long", "characters)…"]))

# model YAML and config.json: physical bounds, text for numbers, shapes that do not hold together
for _name, _base in (("m.yaml", MODEL), ("config.json", _LLAMA3_8B_CONFIG)):
    _kind = "model-yaml" if _name.endswith(".yaml") else "hf-config"
    _data = (lambda d: json.dumps(d)) if _name.endswith(".json") else (lambda d: d)
    for _k, _bad, _frag in [("num_hidden_layers", 10**9, "less than or equal to 1024"),
                            ("num_hidden_layers", 0, "greater than 0"),
                            ("num_hidden_layers", "32", "got the text"),
                            ("hidden_size", "4096", "got the text"), ("hidden_size", 4097, "not a multiple"),
                            ("num_attention_heads", 1.5, "num_attention_heads"),
                            ("num_key_value_heads", 7, "num_key_value_heads: 7 does not divide num_attention_heads 32"),
                            ("vocab_size", 10**12, "vocab_size"), ("intermediate_size", -1, "intermediate_size"),
                            ("max_position_embeddings", 10**12, "max_position_embeddings"),
                            ("num_hidden_layers", True, "got True")]:
        profile_case(_kind, f"{_k}-{_bad!r}", _name, _data({**_base, _k: _bad}), _k, _frag, key="model")
profile_case("model-yaml", "typo", "m.yaml", {**MODEL, "num_hiden_layers": 32}, "num_hiden_layers", key="model")
profile_case("model-yaml", "layer-counts-text", "m.yaml",
             {**MODEL, "model": "x", "layer_types_counts": {"full_attention": "32"}},
             "layer_types_counts.full_attention", key="model")
profile_case("model-yaml", "experts-past-bound", "m.yaml",
             {**MODEL, "num_experts": 10**6, "num_experts_per_tok": 2}, "num_experts", key="model")
profile_case("hf-config", "alias-spelling-text", "config.json",
             json.dumps({**_LLAMA3_8B_CONFIG, "num_local_experts": "8", "num_experts_per_tok": 2}),
             "num_local_experts", "got the text", key="model")
profile_case("hf-config", "sparse-attention", "config.json", json.dumps({**_LLAMA3_8B_CONFIG, "index_topk": 2048}),
             "index_topk", "cannot model", key="model")
profile_case("hf-config", "text-config-not-a-mapping", "config.json", json.dumps({"text_config": "llama"}),
             "text_config", "expected a mapping", key="model")
profile_case("hf-config", "text-config-two-formats", "config.json",
             json.dumps({"quantization_config": {"quant_method": "fp8"},
                         "text_config": {**_LLAMA3_8B_CONFIG, "quantization_config": {"quant_method": "mxfp4"}}}),
             "text_config.quantization_config", "one weight format", key="model")
profile_case("hf-config", "awq-bits-text", "config.json",
             json.dumps({**_LLAMA3_8B_CONFIG, "quantization_config": {"quant_method": "awq", "bits": "x"}}),
             "quantization_config.bits", key="model")
# an fp8 checkpoint's scale block: two positive whole numbers, as HF writes [128, 128]
for _bad in [[math.nan, 128], [128, math.inf], [-128, 128], [0, 128], ["128", 128], [128], [128, 128, 128],
             [128.0, 128], [True, 128], 128, "128x128", [], {"rows": 128}]:
    _q = {"quant_method": "fp8", "weight_block_size": _bad}
    profile_case("hf-config", f"weight-block-size-{_bad!r}", "config.json",
                 json.dumps({**_LLAMA3_8B_CONFIG, "quantization_config": _q}),
                 "quantization_config.weight_block_size", "two positive integers", key="model")
profile_case("hf-config", "truncated", "config.json", json.dumps(_LLAMA3_8B_CONFIG)[:-20], "invalid JSON",
             key="model")
profile_case("hf-config", "duplicate", "config.json", json.dumps(_LLAMA3_8B_CONFIG)[:-1] + ', "vocab_size": 5}',
             "'vocab_size' given twice", key="model")

# backend profiles: their engine settings are engine settings
for _cid, _p, _bad, _frag in [("engine-text", ("engine", "block_size"), "16", "engine.block_size"),
                              ("engine-typo", ("engine", "blok_size"), 16, "engine.blok_size"),
                              ("by-gpu-text", ("engine_by_gpu", 1, "set", "max_num_seqs"), "1024",
                               "engine_by_gpu[1].set.max_num_seqs"),
                              ("overhead-negative", ("overheads", "iteration_overhead_ms"), -1, "iteration_overhead_ms"),
                              ("overhead-text", ("overheads", "response_ms"), "5", "response_ms"),
                              ("version-not-a-number", ("by_version", 0, "since"), "latest", "by_version[0]"),
                              ("kv-memory-unread-knob", ("engine", "kv_memory"),
                               {"rule": "vllm", "cuda_graph_max_bs": 64}, "engine.kv_memory"),
                              ("version-range-empty", ("by_version", 0, "until"), "0.0.0", "is not before until 0.0.0"),
                              ("release-day-not-a-day", ("releases", "0.14.0"), "not-a-date", "releases.0.14.0"),
                              ("prefill-worker-text", ("aiconfigurator", "prefill_engine"),
                               {"schedule_ahead": "nope"}, "aiconfigurator.prefill_engine.schedule_ahead"),
                              # a nightly is placed against a rule by its bounds' days
                              ("rule-bound-undated", ("by_version", 0, "until"), "0.10.9",
                               "by_version[0].until: release 0.10.9 has no day in releases"),
                              ("newest-undated", ("newest_release",), "0.99.0",
                               "newest_release: release 0.99.0 has no day"),
                              ("prefill-lift-undated", ("prefill_server",),
                               {"set": {"schedule_ahead": False}, "why": "w",
                                "lifted": {"since": "0.10.9", "where": {"prefix_cache": False}}},
                               "prefill_server.lifted.since: release 0.10.9 has no day"),
                              ("prefill-lift-key", ("prefill_server",),
                               {"set": {"schedule_ahead": False}, "why": "w",
                                "lifted": {"since": "0.0.0", "where": {"prefix_cach": False}}},
                               "prefill_server.lifted.where")]:
    profile_case("backend", _cid, "b.yaml", _set({**BACKEND, "name": "b"}, _p, _bad), _frag, key="engine.backend")
# a GPU condition no GPU can hold would turn its rule off without a word
_GPU_WHEN = ("by_version", 2, "attention_kernels", 0, "when", "gpu")
for _cid, _bad, _frag in [("sm-version-negative", {"sm_versions": [-100]}, "sm_versions[0]: Input should be greater than or equal to 10"),
                          ("hbm-bounds-crossed", {"min_hbm_gib": 200, "max_hbm_gib": 100},
                           "min_hbm_gib (200) is above max_hbm_gib (100)")]:
    profile_case("backend", f"gpu-condition-{_cid}", "b.yaml", _set({**BACKEND, "name": "b"}, _GPU_WHEN, _bad),
                 "by_version[2].attention_kernels[0].when.gpu", _frag, key="engine.backend")


# benchmark JSON (`llmsim validate`)
VALIDATE = ["validate", "bench.json", "--backend", "vllm", "--model", "llama-3-8b", "--gpu", "h100-sxm",
            "--workers", "1", "--csv", "out/errors.csv"]
for _k, _bad in [("completed", "abc"), ("completed", None), ("completed", 0), ("completed", -1), ("completed", True),
                 ("completed", 1.5), ("total_input_tokens", "100000"), ("total_input_tokens", -5),
                 ("total_output_tokens", 10), ("request_rate", "fast"), ("request_rate", -1),
                 ("max_concurrency", "8"), ("max_concurrency", 0), ("mean_ttft_ms", "50"), ("mean_ttft_ms", -1),
                 ("mean_ttft_ms", None), ("median_tpot_ms", "9"), ("output_throughput", [1])]:
    CASES.append((f"bench-json-{_k}-{_bad!r}", {"bench.json": json.dumps({**BENCH, _k: _bad})}, VALIDATE,
                  ["bench.json", _k]))
CASES.append(("bench-json-missing-key", {"bench.json": json.dumps({"completed": 3})}, VALIDATE,
              ["bench.json", "not a `vllm bench serve` result"]))
CASES.append(("bench-json-a-list", {"bench.json": "[1, 2]"}, VALIDATE, ["bench.json", "not a `vllm bench serve`"]))
CASES.append(("bench-json-not-json", {"bench.json": "{oops"}, VALIDATE, ["bench.json", "invalid JSON"]))
CASES.append(("bench-json-fifo", {"bench.json": lambda p: os.mkfifo(p)}, VALIDATE, ["bench.json", "not a regular"]))

# benchmark CSV
VALIDATE_CSV = ["validate", "rows.csv", "--workers", "1", "--csv", "out/errors.csv"]
for _cid, _text, _frag in [("empty", "", "not a readable CSV"), ("no-columns", "a,b\n1,2\n", "missing column"),
                           ("binary", b"\x00\xff\xfe" * 40, "rows.csv"),
                           ("no-metric", "engine,model,gpu,tp,isl_mean,osl_mean\nvllm,llama-3-8b,h100,1,100,10\n",
                            "no measured metric")]:
    CASES.append((f"bench-csv-{_cid}", {"rows.csv": _text}, VALIDATE_CSV, ["rows.csv", _frag]))
CASES.append(("bench-csv-column-twice", {"rows.csv": "engine,model,gpu,tp,isl_mean,osl_mean,ttft_ms,ttft_ms\n"
                                                    "vllm,llama-3-8b,h100,1,100,10,50,70\n"}, VALIDATE_CSV,
              ["rows.csv", "column 'ttft_ms' is named 2 times (columns 7, 8)"]))
CASES.append(("bench-csv-fifo", {"rows.csv": lambda p: os.mkfifo(p)}, VALIDATE_CSV, ["rows.csv", "not a regular"]))
CASES.append(("bench-csv-gz-bomb", {"rows.csv.gz": lambda p: p.write_bytes(gzip.compress(b"a,b\n" + b"0" * 2**22))},
              ["validate", "rows.csv.gz", "--workers", "1"], ["rows.csv.gz", "decompresses to more than"]))

# traces
TRACE_SCENARIO = {"name": "t", "workload": {"arrival": {"type": "trace", "path": "t.csv"}},
                  "pools": [{"model": "llama-3-8b", "gpu": "h100-sxm"}]}
for _cid, _trace, _frag in [
        ("sparse-huge", lambda p: os.truncate(p, 3 * 2**30) if p.touch() is None else None, "larger than any trace"),
        ("nul-bytes", lambda p: p.write_bytes(b"\x00" * 500), "\\x00"),
        ("fifo", lambda p: os.mkfifo(p), "not a regular file"),
        ("directory", lambda p: p.mkdir(), "is a directory"),
        ("text-tokens", "timestamp,input_tokens,output_tokens\n0,abc,5\n", "not a number"),
        ("negative-tokens", "timestamp,input_tokens,output_tokens\n0,-5,5\n", "line 2"),
        ("tokens-past-any-context", "timestamp,input_tokens,output_tokens\n0,100,1000000000000\n",
         "past any model's context")]:
    CASES.append((f"trace-{_cid}", {"s.yaml": TRACE_SCENARIO, "t.csv": _trace}, RUN, ["t.csv", _frag]))
# a JSON Lines trace's line is read as every JSON input is: a key twice, a number past any, a bracket tower
_JSONL_TRACE = _set(TRACE_SCENARIO, ("workload", "arrival", "path"), "t.jsonl")
_FIRST_ROW = '{"timestamp": 0, "input_tokens": 5, "output_tokens": 5}\n'
for _cid, _line, _frag in [
        ("key-twice", '{"timestamp": 1, "input_tokens": 5, "output_tokens": 5, "input_tokens": 9}', "line 2: invalid JSON: key 'input_tokens' given twice"),
        ("number-past-any", '{"timestamp": 1, "input_tokens": ' + "9" * 5000 + ', "output_tokens": 5}', "line 2: invalid JSON: a whole number of more than 4,300 digits"),
        ("nested-too-deep", '{"timestamp": 1, "input_tokens": 5, "output_tokens": 5, "x": ' + "[" * 10**5 + "]" * 10**5 + "}", "line 2: invalid JSON: nested too deep")]:
    CASES.append((f"trace-jsonl-{_cid}", {"s.yaml": _JSONL_TRACE, "t.jsonl": _FIRST_ROW + _line + "\n"}, RUN, ["t.jsonl", _frag]))
# a CSV trace naming a column it reads twice (as written, or in another case): which one is read is not said
for _cid, _header in [("column-twice", "timestamp,input_tokens,output_tokens,input_tokens"),
                      ("column-twice-in-another-case", "timestamp,input_tokens,output_tokens,INPUT_TOKENS")]:
    CASES.append((f"trace-{_cid}", {"s.yaml": TRACE_SCENARIO, "t.csv": _header + "\n0,5,5,7\n1,6,6,8\n"}, RUN,
                  ["t.csv", "line 1: column 'input_tokens' is named 2 times (columns 2, 4)"]))
CASES.append(("trace-gz-bomb", {"s.yaml": _set(TRACE_SCENARIO, ("workload", "arrival", "path"), "t.csv.gz"),
                                "t.csv.gz": lambda p: p.write_bytes(gzip.compress(b"0" * 2**22))}, RUN,
              ["t.csv.gz", "decompresses to more than"]))

# results.json (`llmsim compare`)
for _cid, _a, _frag in [("not-results", json.dumps({"a": 1}), "not a results file"),
                        ("completed-text", json.dumps({**RESULTS, "completed": "100"}), "completed"),
                        ("completed-negative", json.dumps({**RESULTS, "completed": -1}), "completed"),
                        ("a-list", "[1]", "expected a JSON object"), ("not-json", "{", "invalid JSON"),
                        ("bomb-depth", "[" * 100 + "]" * 100, "64 levels"),
                        ("fifo", lambda p: os.mkfifo(p), "not a regular file")]:
    CASES.append((f"results-{_cid}", {"a.json": _a, "b.json": json.dumps(RESULTS)}, ["compare", "a.json", "b.json"],
                  ["a.json", _frag]))
CASES.append(("results-yaml", {"a.yaml": "completed: 3\n", "b.json": json.dumps(RESULTS)},
              ["compare", "a.yaml", "b.json"], ["a.yaml", ".json"]))

# a results folder `llmsim report` redraws
for _cid, _name, _bad, _frag in [("bad-parquet", "requests.parquet", "garbage", "cannot read it as a table"),
                                 ("bad-timeline", "timeline.csv", 'a,b\n1,"\n', "cannot read it as a table"),
                                 ("not-results", "results.json", json.dumps({"x": 1}), "not a results file"),
                                 ("results-bomb", "results.json", "[" * 70 + "]" * 70, "64 levels"),
                                 ("timeline-fifo", "timeline.csv", lambda p: os.mkfifo(p), "not a regular file")]:
    CASES.append((f"report-{_cid}", {"rp/results.json": json.dumps(RESULTS), f"rp/{_name}": _bad},
                  ["report", "rp"], [f"rp/{_name}", _frag]))

# `llmsim estimate`: token counts against physical bounds, profiles through the same loaders
ESTIMATE = ["estimate", "request", "--gpu", "h100-sxm", "--model", "llama-3-8b"]
for _cid, _args, _frag in [("input-past-any-context", ["--input", "1000000000", "--output", "10"], "--input"),
                           ("output-past-any-context", ["--input", "10", "--output", "1000000000"], "--output"),
                           ("too-many-chunks", ["--input", "100000000", "--output", "1",
                                                "--max-num-batched-tokens", "1"], "prefill steps")]:
    CASES.append((f"estimate-{_cid}", {}, [*ESTIMATE, *_args], [_frag]))
CASES.append(("estimate-model-layers", {"m.yaml": {**MODEL, "num_hidden_layers": 10**9}},
              ["estimate", "request", "--gpu", "h100-sxm", "--model", "m.yaml", "--input", "10", "--output", "10"],
              ["m.yaml", "num_hidden_layers"]))
CASES.append(("estimate-gpu-no-bf16", {"g.yaml": _set(GPU, ("peak_tflops", "bf16"), _DELETE)},
              ["estimate", "step", "--gpu", "g.yaml", "--model", "llama-3-8b", "--decode-batch", "8"],
              ["g.yaml", "peak_tflops"]))

# sweep files and plans: the run-count limit and the sweep file's own keys
SWEEP = ["sweep", "sw.yaml", "-o", "out", "--workers", "1"]
for _cid, _sweep, _frag in [("too-many-runs", {"base": "s.yaml", "grid": {"seed": list(range(1001))}},
                             "1,001 runs, more than the 1,000"),
                            ("crossed-past-limit", {"base": "s.yaml", "grid": {"seed": list(range(50)),
                                                                              f"pools.{POOL}.replicas": list(range(1, 30))}},
                             "1,450 runs"),
                            ("typo", {"base": "s.yaml", "gird": {"seed": [1]}}, "gird"),
                            ("engine-text", {"base": "s.yaml", "grid": {"seed": [1]}, "engine": 5}, "engine"),
                            ("grid-value-text", {"base": "s.yaml", "grid": {f"pools.{POOL}.tp": ["2"]}}, "got the text"),
                            # a plan's range, or one value, where a grid lists its values
                            ("grid-range", {"base": "s.yaml", "grid": {f"pools.{POOL}.replicas": "1..3"}},
                             "expected a list, got the text '1..3': LO..HI is a range only to `llmsim plan --vary`; "
                             "here list the values ([1, 2, 3])"),
                            ("grid-one-value", {"base": "s.yaml", "grid": {f"pools.{POOL}.gpu": "h200"}},
                             "expected a list, a single value written as a list of one ([h200])"),
                            ("empty-grid", {"base": "s.yaml", "grid": {"seed": []}}, "grid.seed"),
                            ("alias-bomb", BOMB + "base: s.yaml\ngrid: {seed: [1]}\n", "aliases")]:
    CASES.append((f"sweep-{_cid}", {"s.yaml": SCENARIO, "sw.yaml": _sweep}, SWEEP, ["sw.yaml", _frag]))
CASES.append(("run-replicates-past-limit", {"s.yaml": SCENARIO}, [*RUN, "--replicates", "1000000"],
              ["--replicates", "more than the 1,000"]))
CASES.append(("sweep-max-runs-zero", {"s.yaml": SCENARIO, "sw.yaml": {"base": "s.yaml", "grid": {"seed": [1]}}},
              [*SWEEP, "--max-runs", "0"], ["--max-runs", "at least 1"]))
PLAN = ["plan", "s.yaml", "-o", "out", "--workers", "1"]
for _cid, _flags, _frag in [("range-not-numbers", ["--vary", f"pools.{POOL}.replicas=a..b"], "not a range of whole"),
                            ("empty-range", ["--vary", f"pools.{POOL}.replicas=9..2"], "empty range"),
                            ("dashed-range", ["--vary", f"pools.{POOL}.replicas=1-6"],
                             "'1-6' is not a range llmsim reads: a range is written LO..HI (1..6)"),
                            ("worded-range", ["--vary", f"pools.{POOL}.replicas=2 to 8"], "written LO..HI (2..8)"),
                            ("past-limit", ["--vary", f"pools.{POOL}.replicas=1..100000", "--vary",
                                            f"pools.{POOL}.tp=1,2,4,8", "--seeds", "20"], "more than the 1,000"),
                            ("unknown-key", ["--vary", f"pools.{POOL}.replicaz=1..4"], "replicaz"),
                            ("no-range", ["--vary", f"pools.{POOL}.tp=1,2"], "exactly one range axis")]:
    CASES.append((f"plan-{_cid}", {"s.yaml": SCENARIO}, [*PLAN, *_flags], ["--vary", _frag]))

# output paths checked before any work
for _cid, _args, _frag in [("csv-through-a-file", ["--csv", "afile.txt/x.csv"], "a part of the path is a file"),
                           ("csv-is-a-folder", ["--csv", "."], "is a folder"),
                           ("fit-not-yaml", ["--fit", "p.txt"], "--fit"),
                           ("fit-through-a-file", ["--fit", "afile.txt/p.yaml"], "--fit")]:
    CASES.append((f"output-{_cid}", {"bench.json": json.dumps(BENCH), "afile.txt": "keep"},
                  [*VALIDATE[:-2], *_args], [_frag]))
CASES.append(("output-run-through-a-file", {"s.yaml": SCENARIO, "afile.txt": "keep"},
              ["run", "s.yaml", "-o", "afile.txt/out"], ["-o", "a part of the path is a file"]))


def _write(folder: Path, files: dict[str, Any]) -> None:
    for name, content in files.items():
        p = folder / name
        p.parent.mkdir(parents=True, exist_ok=True)
        if callable(content):
            content(p)
        elif isinstance(content, bytes):
            p.write_bytes(content)
        elif isinstance(content, str):
            p.write_text(content)
        else:
            write_yaml(p, content)


def test_the_suite_covers_every_class_with_enough_cases():
    kinds = {cid.split("-")[0] for cid, *_ in CASES}
    assert {"scenario", "gpu", "model", "hf", "backend", "bench", "trace", "results", "report", "estimate",
            "sweep", "plan", "output"} <= kinds
    assert len(CASES) >= 150 and len({cid for cid, *_ in CASES}) == len(CASES)


@pytest.mark.parametrize("files, argv, fragments", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_a_bad_input_is_one_line_naming_file_and_key_and_leaves_nothing(tmp_path, cli, monkeypatch,
                                                                        files, argv, fragments):
    import simulator.reads as reads
    import workloads.traces as traces

    # the compressed-bomb cases stay small: a 4 MiB limit stands for the real ones
    monkeypatch.setattr(reads, "MAX_TRACE_BYTES", 2**20)
    monkeypatch.setattr(reads, "MAX_TABLE_BYTES", 2**20)
    monkeypatch.setattr(traces, "MAX_TRACE_BYTES", 2**30)
    monkeypatch.chdir(tmp_path)
    _write(tmp_path, files)
    before = _listing(tmp_path)
    t = time.perf_counter()
    refused(cli(*argv), *fragments)
    assert time.perf_counter() - t < 10
    assert _listing(tmp_path) == before


# --- fuzz: random mutations of valid files, per loader -------------------------------------------------------
_VALUES = st.one_of(st.none(), st.booleans(), st.integers(-2**40, 2**40), st.floats(allow_nan=True),
                    st.text(max_size=8), st.sampled_from(["12", "1e9", "-3", "0x10", "inf", "nan", ""]),
                    st.lists(st.integers(), max_size=3), st.dictionaries(st.text(max_size=4), st.integers(),
                                                                         max_size=2))


def _mutate(data: Any, draw: Callable) -> tuple[Any, tuple]:
    """``data`` with one leaf replaced, one key deleted or one key misspelt; returns the path touched."""
    paths = [p for p, _ in leaves(data) if p]
    path = draw(st.sampled_from(paths))
    how = draw(st.sampled_from(["value", "value", "delete", "rename"]))
    if how == "value":
        return _set(data, path, draw(_VALUES)), path
    path = path[: draw(st.integers(1, len(path)))]
    if not isinstance(path[-1], str):
        return _set(data, path, draw(_VALUES)), path
    out = _set(data, path, _DELETE)
    if how == "rename":
        node = out
        for part in path[:-1]:
            node = node[part]
        node[path[-1] + draw(st.sampled_from(["s", "_", "x"]))] = 1
    return out, path


def _fuzz_loader(data: Any, name: str, write: Callable[[Path, Any], None], load: Callable[[Path], Any],
                 draw: Callable) -> None:
    mutated, path = _mutate(data, draw)
    with tempfile.TemporaryDirectory() as tmp:
        p = Path(tmp) / name
        write(p, mutated)
        try:
            load(p)
        except LlmsimError as e:
            text = e.render()
            assert name in text, text
            if "invalid input:\n" not in text:    # else one line per problem, all of them listed
                assert "\n" not in text, text


def _yaml(p: Path, d: Any) -> None:
    p.write_text(yaml.safe_dump(d, sort_keys=False))


def _json(p: Path, d: Any) -> None:
    p.write_text(json.dumps(d))


@FUZZ
@given(data=st.data())
def test_fuzz_scenario_loader(data):
    from simulator.scenario.load import load_scenario

    variants = {**SCENARIO, "variants": [{"name": "v", "set": {f"pools.{POOL}.replicas": 3}}]}
    _fuzz_loader(variants, "s.yaml", _yaml, load_scenario, data.draw)


@FUZZ
@given(data=st.data())
def test_fuzz_gpu_profile_loader(data):
    from simulator.profiles.hardware import load_hardware

    _fuzz_loader(GPU, "g.yaml", _yaml, lambda p: load_hardware(str(p)), data.draw)


@FUZZ
@given(data=st.data(), as_json=st.booleans())
def test_fuzz_model_loader(data, as_json):
    from simulator.profiles.model import load_model

    def load(p: Path):
        m = load_model(str(p))
        assert m.num_moe_layers <= m.num_hidden_layers <= 1024    # per-layer walks stay bounded

    if as_json:
        _fuzz_loader(_LLAMA3_8B_CONFIG, "config.json", _json, load, data.draw)
    else:
        _fuzz_loader(MODEL, "m.yaml", _yaml, load, data.draw)


@FUZZ
@given(data=st.data())
def test_fuzz_backend_profile_loader(data):
    from simulator.profiles.backend import load_backend

    _fuzz_loader({**BACKEND, "name": "b"}, "b.yaml", _yaml, lambda p: load_backend(str(p)), data.draw)


@FUZZ
@given(data=st.data())
def test_fuzz_bench_json_loader(data):
    from simulator.validation.rows import read_bench_result

    _fuzz_loader(BENCH, "bench.json", _json, read_bench_result, data.draw)


@FUZZ
@given(data=st.data())
def test_fuzz_results_loader(data):
    from simulator.report.diff import read_results

    _fuzz_loader(RESULTS, "a.json", _json, read_results, data.draw)


@FUZZ
@given(data=st.data())
def test_fuzz_sweep_loader(data):
    from simulator.planning.grid import load_sweep

    def load(p: Path):
        write_yaml(p.parent / "s.yaml", SCENARIO)
        load_sweep(p)

    _fuzz_loader({"base": "s.yaml", "grid": {"seed": [1, 2], f"pools.{POOL}.replicas": [1, 2]},
                  "points": [{f"pools.{POOL}.tp": 1}]}, "sw.yaml", _yaml, load, data.draw)


@FUZZ
@given(data=st.data())
def test_fuzz_bench_csv_loader(data):
    from simulator.validation.rows import rows_from_csv

    row = {"engine": "vllm", "model": "llama-3-8b", "gpu": "h100-sxm", "tp": 1, "isl_mean": 1000, "osl_mean": 100,
           "concurrency": 8, "ttft_mean_ms": 50.0, "tpot_mean_ms": 10.0}
    value = data.draw(st.one_of(st.text(max_size=6).filter(lambda s: "," not in s and "\n" not in s and "\r" not in s
                                                           and '"' not in s), st.integers(-10**6, 10**6)))
    key = data.draw(st.sampled_from(sorted(row)))
    with tempfile.TemporaryDirectory() as tmp:
        p = Path(tmp) / "rows.csv"
        bad = {**row, key: value}
        p.write_text(",".join(bad) + "\n" + ",".join(map(str, bad.values())) + "\n")
        try:
            rows = rows_from_csv(p)
        except LlmsimError as e:
            assert "rows.csv" in e.render()
            return
        for r in rows:     # a row is replayable only when its numbers are
            assert r.skip or (r.isl > 0 and r.osl > 0 and (r.concurrency or 0) >= 0 and r.tp >= 1)


@pytest.mark.parametrize("key", ["isl_mean", "osl_mean", "concurrency", "tp", "ttft_mean_ms"])
@pytest.mark.parametrize("value", ["INF", "-inf", "1e400"])
def test_an_infinite_cell_of_a_benchmark_table_is_no_number(key, value, tmp_path):
    """'inf' counts no tokens or requests: the row is left unreplayed with its reason, or the metric
    unread, as for a cell that is not a number (it once ended in int(inf)'s OverflowError)."""
    from simulator.validation.rows import rows_from_csv

    row = {"engine": "vllm", "model": "llama-3-8b", "gpu": "h100-sxm", "tp": 1, "isl_mean": 1000, "osl_mean": 100,
           "concurrency": 8, "ttft_mean_ms": 50.0, "tpot_mean_ms": 10.0, key: value}
    p = tmp_path / "rows.csv"
    p.write_text(",".join(row) + "\n" + ",".join(map(str, row.values())) + "\n")
    (r,) = rows_from_csv(p)
    assert r.skip or (r.isl > 0 and r.osl > 0 and (r.concurrency or 0) >= 0 and r.tp >= 1)
    assert all(math.isfinite(v) for v in r.measured.values())


# --- what the loaders bound, directly -------------------------------------------------------------------------
@settings(max_examples=60, deadline=None)
@given(lo=st.integers(1, 50), width=st.integers(0, 5000), answer=st.integers(0, 6000))
def test_a_plans_run_count_bound_holds_for_every_answer(lo, width, answer):
    """The plan's worst case, refused past --max-runs before any run, is never exceeded by the search."""
    from simulator.planning.search import most_probes_smallest, smallest_passing

    search, probes = smallest_passing(lo, lo + width), 0
    try:
        value = next(search)
        while True:
            probes += 1
            value = search.send(value >= lo + answer)
    except StopIteration:
        pass
    assert probes <= most_probes_smallest(lo, lo + width)


def test_the_rate_search_bound_holds():
    from simulator.planning.search import largest_passing, most_probes_largest

    for limit in (1e-9, 0.3, 1.0, 7.5, 1e9):
        search, probes = largest_passing(1.0), 0
        try:
            value = next(search)
            while True:
                probes += 1
                value = search.send(value <= limit)
        except StopIteration:
            pass
        assert probes <= most_probes_largest()


def test_workers_never_exceed_the_work():
    from simulator.planning.executors import ExecutorOptions, make_executor

    with make_executor("local", ExecutorOptions(workers=16)) as ex:
        pids = {pid for _, pid in ex.map_unordered(_pid, [0.3, 0.3])}
        assert ex._pool is not None and ex._pool._max_workers == 2
    assert len(pids) <= 2


def _pid(wait: float) -> int:
    time.sleep(wait)
    return os.getpid()


def test_a_full_disk_while_writing_an_output_leaves_no_partial_file(tmp_path, cli, monkeypatch):
    import pandas as pd

    def full(self, path, *a, **k):
        Path(path).write_text("partial")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(pd.DataFrame, "to_csv", full)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "bench.json").write_text(json.dumps(BENCH))
    before = _listing(tmp_path)
    r = cli(*VALIDATE[:-2], "--csv", tmp_path / "new" / "errors.csv")
    refused(r, "errors.csv", "--csv", "no space left")
    assert _listing(tmp_path) == before


def test_a_killed_runs_staging_folder_is_removed_by_the_next_run(tmp_path, cli):
    out = tmp_path / "out"
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (out / f".llmsim-staging-{dead.pid}-x").mkdir(parents=True)
    (out / f".llmsim-staging-{dead.pid}-x" / "results.json").write_text("{")
    write_yaml(tmp_path / "s.yaml", SCENARIO)
    assert cli("run", tmp_path / "s.yaml", "-o", out, "--no-plots", "--exit-zero").code == 0
    assert not [p for p in out.iterdir() if p.name.startswith(".llmsim-staging-")]


def test_ctrl_c_says_what_was_kept_in_one_line(tmp_path):
    write_yaml(tmp_path / "s.yaml", SCENARIO)
    out = tmp_path / "out"
    p = subprocess.Popen([sys.executable, "-c", "from simulator.cli.app import main; main()", "run", "s.yaml",
                          "-o", "out", "--set", "workload.num_requests=3000000", "--set",
                          "workload.arrival.rate_per_s=400", "--set", f"pools.{POOL}.replicas=8"],
                         cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        end = time.time() + 30
        while not (out.exists() and any(out.iterdir())) and time.time() < end:
            time.sleep(0.1)
        p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=30)
    finally:
        p.kill()
    assert p.returncode == 130, err
    assert err.strip().splitlines() == ["interrupted: nothing was written (an -o folder is left as it was)"]
    assert sorted(x.name for x in tmp_path.iterdir()) == ["s.yaml"]


def test_an_interrupted_sweep_says_how_many_points_it_kept(tmp_path, cli, monkeypatch):
    from simulator.planning.store import PointStore

    put = PointStore.put
    calls = []

    def stop_at_second(self, *a, **k):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        put(self, *a, **k)

    monkeypatch.setattr(PointStore, "put", stop_at_second)
    monkeypatch.chdir(tmp_path)
    write_yaml(tmp_path / "s.yaml", SCENARIO)
    write_yaml(tmp_path / "sw.yaml", {"base": "s.yaml", "grid": {"seed": [1, 2, 3]}})
    r = cli("sweep", "sw.yaml", "-o", "out", "--workers", "1")
    assert r.code == 130 and "Traceback" not in r.err
    assert r.err.strip().splitlines() == [
        "interrupted: 1 of 3 points finished and kept in out/points (the table out/sweep.parquet and its page "
        "out/report.html list them); rerun the same command to run the rest"]
    assert len(list((tmp_path / "out" / "points").glob("*.json"))) == 1


def test_a_sweep_over_a_device_as_its_trace_ends_at_once(tmp_path, cli, monkeypatch):
    """The store's key hashes every file a point reads: a device is never read for it (/dev/zero would be
    read for ever); the sweep is refused before any point runs, with the reader's one line."""
    monkeypatch.chdir(tmp_path)
    write_yaml(tmp_path / "s.yaml", _set(TRACE_SCENARIO, ("workload", "arrival", "path"), "/dev/zero"))
    write_yaml(tmp_path / "sw.yaml", {"base": "s.yaml", "grid": {"seed": [1, 2]}})
    t = time.perf_counter()
    r = cli("sweep", "sw.yaml", "-o", "out", "--workers", "1")
    assert time.perf_counter() - t < 20
    assert r.code == 2 and "Traceback" not in r.err
    assert "/dev/zero: not a regular file" in r.err and not (tmp_path / "out").exists()


@pytest.mark.parametrize("command", ["sweep", "plan"])
def test_a_full_disk_under_a_sweep_or_plan_names_the_file_and_leaves_nothing(tmp_path, cli, monkeypatch, command):
    import simulator.atomic_write as atomic

    def full(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(atomic.tempfile, "mkstemp", full)
    monkeypatch.chdir(tmp_path)
    write_yaml(tmp_path / "s.yaml", SCENARIO)
    write_yaml(tmp_path / "sw.yaml", {"base": "s.yaml", "grid": {"seed": [1]}})
    before = _listing(tmp_path)
    args = SWEEP if command == "sweep" else [*PLAN, "--vary", f"pools.{POOL}.replicas=1..2"]
    line = refused(cli(*args), "out/", "cannot write (no space left on the device)")
    assert (".json" in line or ".parquet" in line) and _listing(tmp_path) == before


def test_a_full_disk_under_validate_fit_leaves_no_profile(tmp_path, monkeypatch):
    from types import SimpleNamespace

    from simulator.cli.validate import _write_profile
    from simulator.profiles.backend import load_backend

    def full(self, *a, **k):
        with open(self, "w") as f:
            f.write("name: half")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(Path, "write_text", full)
    rows = [SimpleNamespace(stack="vllm", group="llama-3-8b/h100-sxm/vllm")]
    with pytest.raises(LlmsimError) as e:
        _write_profile(tmp_path / "fitted.yaml", rows, load_backend("vllm").overheads, None)
    assert e.value.key_path == "--fit" and "no space left" in e.value.render()
    assert list(tmp_path.iterdir()) == []


def test_ctrl_c_under_a_sweep_is_one_line_from_the_parent_alone(tmp_path):
    """Ctrl-C reaches the workers too (one process group): they leave it to the parent, which stops them
    and prints the one line (no 'Process ForkProcess-N:' tracebacks)."""
    write_yaml(tmp_path / "s.yaml", SCENARIO)
    write_yaml(tmp_path / "sw.yaml", {"base": "s.yaml", "grid": {"seed": [1, 2, 3, 4]}})
    p = subprocess.Popen([sys.executable, "-c", "from simulator.cli.app import main; main()", "sweep", "sw.yaml",
                          "-o", "out", "--workers", "2", "--set", "workload.num_requests=200000", "--set",
                          "workload.arrival.rate_per_s=400", "--set", f"pools.{POOL}.replicas=8"],
                         cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                         start_new_session=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        children = Path(f"/proc/{p.pid}/task/{p.pid}/children")
        end = time.time() + 30
        while time.time() < end and len(children.read_text().split() if children.exists() else []) < 2:
            time.sleep(0.1)
        time.sleep(0.5)
        os.killpg(p.pid, signal.SIGINT)          # as a terminal's Ctrl-C: the whole group
        _, err = p.communicate(timeout=30)
    finally:
        p.kill()
    assert p.returncode == 130, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("interrupted: 0 of 4 points finished and kept in out/points"), err


@settings(max_examples=30, deadline=None)
@given(st.dictionaries(st.text("abc", min_size=1, max_size=3), st.integers(-5, 5) | st.lists(st.integers(0, 3)),
                       min_size=1, max_size=4))
def test_a_text_parsed_again_gives_what_it_gave_unshared(doc):
    """parse_yaml keeps what recent texts gave (a plan reads the same profiles for every run): a second
    parse gives the same value, never the first caller's object, however that caller changed it."""
    import yaml as _yaml
    from simulator.structured import parse_yaml

    text = _yaml.safe_dump(doc)
    first = parse_yaml(text)
    assert first == doc
    for v in first.values():
        if isinstance(v, list):
            v.append(99)
    first["zzzz"] = 1
    assert parse_yaml(text) == doc
    for _ in range(2):          # a refused text is refused every time, never remembered
        with pytest.raises(_yaml.YAMLError, match="given twice"):
            parse_yaml("a: 1\na: 2\n")
