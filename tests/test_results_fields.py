"""The results.json field reference is the writers' own declarations, and real runs match it both ways.

Five small runs between them switch on every block the reference lists:
a plain one-pool run (where every key not marked "only when" must appear),
a one-pool run with every per-request feature (classes, regions, a gateway
that refuses, autoscaling, speculative decoding, a host KV tier, input-length
buckets, API pricing, a power bill, replicates), and a four-pool fleet
(MoE with expert parallelism on TensorRT-LLM, LoRA on a GPU without power data, pipeline
stages, contiguous KV, an hourly month, shards), a request stranded after a
preemption (vLLM's sliding-window gate), and a window whose sessions' load is
still rising (the load block's offered share). No run may write a key the
reference lacks, and every key the reference lists must appear in one of them.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from conftest import REPO_ROOT

from simulator.cli.app import main
from simulator.fields import absent, flatten, lookup, matched, undeclared
from simulator.report import fleet_report, results_reference
from simulator.report.results_reference import RESULTS

PLAIN = """\
name: plain
seed: 3
workload:
  num_requests: 60
  arrival: {type: poisson, rate_per_s: 10}
  input_tokens: {dist: uniform, min: 16, max: 800}
  output_tokens: {dist: uniform, min: 1, max: 64}
pools:
  - {name: main, model: llama-3-8b, gpu: h100-sxm, replicas: 2}
"""

RAMP = """\
name: ramp
seed: 3
workload:
  duration_s: 20
  arrival: {type: poisson, rate_per_s: 0.5}
  session: {type: chat, turns: {dist: uniform, min: 30, max: 30}, think_time_s: {dist: fixed, value: 10}}
  input_tokens: {dist: uniform, min: 16, max: 200}
  output_tokens: {dist: uniform, min: 1, max: 16}
pools:
  - {name: main, model: llama-3-8b, gpu: h100-sxm, replicas: 1}
"""

FEATURES = """\
name: features
seed: 5
product: {slices: 2}
workload:
  duration_s: 30
  arrival: {type: poisson, rate_per_s: 1.5}
  system_prompt: {apps: 2, tokens: {dist: fixed, value: 600}}
  session: {type: chat, turns: {dist: uniform, min: 2, max: 3}, think_time_s: {dist: fixed, value: 2}}
  input_tokens: {dist: uniform, min: 16, max: 3000}
  output_tokens: {dist: uniform, min: 4, max: 48}
classes:
  - {name: app, share: 2, speculative_acceptance_rate: 0.6}
  - {name: batch, share: 1, rate_limit: {tokens_per_min: 20000, burst_s: 2}}
regions: [{name: us, share: 0.6}, {name: eu, share: 0.4}]
pools:
  - name: main
    model: llama-3-8b
    gpu: h100-pcie
    replicas: 2
    autoscaling: {metric: concurrency, target: 8, min_replicas: 1, max_replicas: 3, interval_s: 5}
    speculative: {draft_model: llama-3.2-1b, k: 3, acceptance_rate: 0.7}
    engine: {prefix_cache: true, kv_offload: {host_gb: 20}}
slo: {ttft_p99_ms: 800, ttft_ms: 500}
input_length_buckets: {edges: [1000], slo: {0-1000: {ttft_p95_ms: 300}}}
cost: {api: {input_usd_per_million: 3.0, output_usd_per_million: 15.0}}
energy: {usd_per_kwh: 0.1}
"""

FLEET = """\
name: fleet
seed: 6
workload:
  duration_s: 20
  arrival: {type: poisson, rate_per_s: 4, profile: {type: sinusoid, period_s: 86400, peak_to_trough: 4, peak_at_s: 10}}
  input_tokens: {dist: uniform, min: 16, max: 1500}
  output_tokens: {dist: uniform, min: 4, max: 48}
classes:
  - {name: moe, share: 1, pool: moe}
  - {name: lora, share: 1, pool: lora}
  - {name: deep, share: 1, pool: deep}
  - {name: tgi, share: 1, pool: tgi}
  - {name: swa, share: 1, pool: swa}
  - {name: swa-vllm, share: 1, pool: swa-vllm}
  - {name: pd, share: 1, pool: pd}
pools:
  - {name: moe, model: qwen3-30b-a3b, gpu: h100-sxm, replicas: 2, tp: 1, dp: 2, ep: 2, engine: {backend: trtllm}}
  - name: lora
    model: llama-3-8b
    gpu: GPU_FILE
    replicas: 2
    lora: {max_loras: 2, adapters: 6, rank: 8, host_gb_per_s: 20, disk_gb_per_s: 2}
  - {name: deep, model: llama-3-8b, gpu: h100-sxm, replicas: 2, pp: 2}
  - {name: tgi, model: llama-3-8b, gpu: h100-sxm, replicas: 2,
     engine: {kv_allocation: contiguous, prefix_cache: false, scheduler: continuous, chunked_prefill: false}}
  - {name: swa, model: gpt-oss-120b, gpu: h200, replicas: 2, engine: {backend: sglang}}
  - {name: swa-vllm, model: gpt-oss-120b, gpu: h200, replicas: 2, engine: {backend: vllm}}
  - {name: pd, model: llama-3-8b, gpu: h100-sxm, replicas: 2, disaggregation: {decode_pool: pd-decode}}
  - {name: pd-decode, model: llama-3-8b, gpu: h100-sxm, replicas: 2}
cost: {monthly: {method: peak_window}}
"""

# gpt-oss-120b on one H100 at vLLM 0.19's defaults with a 2,048-token budget (1,770 blocks): the second
# request is preempted some 15,000 tokens long, where its readmission gate asks more blocks than the pool
# has: it ends stranded once the first finishes. One class and one region, to show it there too.
STRANDED = """\
name: stranded
seed: 1
workload:
  arrival: {type: trace, path: TRACE, format: llmsim}
pools:
  - name: main
    model: gpt-oss-120b
    gpu: h100-sxm
    engine: {backend: vllm, prefix_cache: false, max_model_len: 26000, max_num_batched_tokens: 2048}
classes: [{name: chat, share: 1}]
regions: [{name: us, share: 1}]
"""


def _run(folder: Path, name: str, text: str, *options: str) -> dict:
    (folder / f"{name}.yaml").write_text(text)
    out = folder / name
    try:
        main(["run", str(folder / f"{name}.yaml"), "-o", str(out), "--no-plots", "--exit-zero", *options])
    except SystemExit as e:
        assert not e.code, f"llmsim run {name} exited {e.code}"
    return json.loads((out / "results.json").read_text())


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, dict]:
    folder = tmp_path_factory.mktemp("fields")
    # A GPU without a power block (the H100 PCIe's profile otherwise): no energy figures.
    gpu = yaml.safe_load((REPO_ROOT / "hardware_profiles" / "h100-pcie.yaml").read_text())
    gpu.pop("power")
    gpu.update(name="no-power-gpu", data_names={})
    (folder / "no-power-gpu.yaml").write_text(yaml.safe_dump(gpu))
    return {
        "plain": _run(folder, "plain", PLAIN),
        "features": _run(folder, "features", FEATURES, "--replicates", "2", "--workers", "1"),
        "fleet": _run(folder, "fleet", FLEET.replace("GPU_FILE", str(folder / "no-power-gpu.yaml")),
                      "--shards", "2", "--workers", "1"),
        "stranded": _stranded(folder),
        "ramp": _run(folder, "ramp", RAMP),
    }


def _stranded(folder: Path) -> dict:
    trace = folder / "stranded.csv"
    trace.write_text("timestamp,input_tokens,output_tokens\n0.0,16,25000\n0.01,2000,20000\n")
    res = _run(folder, "stranded", STRANDED.replace("TRACE", str(trace)))
    assert res["llmsim"]["request_status"]["stranded"] == 1, res["llmsim"]["request_status"]
    return res


def test_the_page_is_generated_from_the_declarations():
    page = (REPO_ROOT / results_reference.PAGE).read_text()
    block = page[page.index(results_reference.BEGIN):page.index(results_reference.END) + len(results_reference.END)]
    assert block == results_reference.generate(), \
        f"{results_reference.PAGE} is stale: run `python -m simulator.report.results_reference`"


@pytest.mark.parametrize("name", ["plain", "features", "fleet", "stranded", "ramp"])
def test_a_run_writes_no_key_the_reference_lacks(runs, name):
    assert undeclared(runs[name], RESULTS) == []


@pytest.mark.parametrize("name", ["plain", "features", "fleet"])
def test_a_run_writes_every_key_the_reference_says_is_always_there(runs, name):
    assert absent(runs[name], RESULTS) == []


def test_every_key_the_reference_lists_is_written_by_a_run(runs):
    seen = set().union(*(matched(r, RESULTS) for r in runs.values()))
    # A one-pool fleet repeats its pool's figures under llmsim itself, from the
    # same declarations: a pool's key seen under pools.<pool> covers its copy.
    pool = "llmsim.pools.<pool>."
    seen |= {"llmsim." + p[len(pool):] for p in seen if p.startswith(pool)}
    listed = [path for path, _ in flatten(RESULTS)]
    assert [p for p in listed if p not in seen] == []
    assert len(listed) > 300 and any(p.startswith(pool) for p in listed)


def test_an_undeclared_key_and_a_missing_one_are_found(runs):
    """The checks can fail: a key the writers do not declare, and a declared one gone."""
    res = json.loads(json.dumps(runs["plain"]))
    res["llmsim"]["pools"]["main"]["made_up"] = 1
    del res["llmsim"]["load"]["verdict"]
    assert undeclared(res, RESULTS) == ["llmsim.pools.main.made_up"]
    assert absent(res, RESULTS) == ["llmsim.load.verdict"]
    assert "made_up" not in fleet_report.POOL_FIELDS


@pytest.mark.parametrize("name", ["plain", "features", "fleet"])
def test_every_figure_a_run_writes_can_be_tracked_by_check(runs, name):
    """check.metrics is read against the declarations as the scenario loads:
    a key a run writes must never be refused there (lists by index, named
    pools and classes by name, as compare and check spell them)."""
    from simulator.report.diff import flatten as dotted

    figures = [k for k, v in dotted(runs[name]).items() if isinstance(v, (int, float)) and not isinstance(v, bool)]
    assert len(figures) > 100
    named = {k: lookup(k, RESULTS)[0] for k in figures}
    assert [k for k, f in named.items() if f is None or f.keys is not None] == []


@pytest.mark.parametrize("name", ["plain", "features", "stranded"])
def test_failed_is_the_statuses_its_description_names(runs, name):
    """The failed count's meaning names the request_status keys it sums, so a status added to
    the count is added to the words (stranded was counted and not said)."""
    words = set(re.findall(r"\w+", RESULTS["failed"].meaning))
    status = runs[name]["llmsim"]["request_status"]
    assert runs[name]["failed"] == sum(n for key, n in status.items() if key in words)


@pytest.mark.parametrize("block, keys", [("classes", ("completed", "rejected", "cancelled", "rate_limited", "stranded")),
                                         ("regions", ("completed", "rejected", "cancelled", "stranded"))])
def test_a_class_and_a_region_count_each_request_once_by_how_it_ended(runs, block, keys):
    """A stranded request was admitted, so neither shed nor cancelled: without a count of its own
    a class or region missing it looked whole but for its completed count."""
    for name, b in runs["stranded"]["llmsim"][block].items():
        assert sum(b.get(k) or 0 for k in keys) == b["requests"], (name, b)


def test_planning_md_names_every_key_of_the_blocks_replicates_add():
    """docs/planning.md lists llmsim.intervals', .slo_intervals', .error_model's and .replicates' keys by
    hand: its intervals entry lacked bound, the one check and plan --confidence judge by."""
    text = (REPO_ROOT / "docs" / "planning.md").read_text()
    section = text[text.index("### Replicates"):text.index("### The error model")]
    bullets = {m.group(1): b for b in re.split(r"\n(?=\* )", section) if (m := re.match(r"\* `(llmsim\.\w+)", b))}
    assert set(bullets) == {"llmsim.replicates", "llmsim.intervals", "llmsim.slo_intervals", "llmsim.error_model"}

    def keys(prefix: str) -> set[str]:
        """Every key named below ``prefix``, at any depth (not the placeholders: ``<figure>``)."""
        return {p.rsplit(".", 1)[1] for p, _ in flatten(RESULTS) if p.startswith(prefix) and not p.endswith(">")}
    figure = keys("llmsim.intervals.<figure>.")
    for name, bullet in bullets.items():
        named = set(re.findall(r"\w+", " ".join(re.findall(r"`([^`]*)`", bullet))))
        # a class's or bucket's entry is "the same" as a figure's: its own keys are the rest
        declared = keys(name + ".") - (figure if name == "llmsim.slo_intervals" else set())
        assert declared - named == set(), name
    assert figure == {"lo", "hi", "confidence", "bound", "model"}
