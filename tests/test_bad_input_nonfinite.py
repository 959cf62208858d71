"""Non-finite and absurdly large numbers, deterministically, through every input llmsim reads.

The fuzz tests of test_bad_input*.py draw a few random values per run, so a number that breaks a
loader (``inf`` in a benchmark table's cell, once int(inf)'s OverflowError) surfaces only by
chance. Here every numeric key of a set of small scenarios, of the GPU, model and backend
profiles, every column of the trace and benchmark formats and every numeric flag is given each of
:data:`NONFINITE` and :data:`EXTREME`, through the real command line, every run.

The contract: a non-finite number (``.nan``, ``.inf``, ``-.inf``, ``1e400``, the text ``'nan'``)
is refused wherever it is written (:func:`refused`: exit 2, one ``error:`` line naming the file
and the key, no traceback, nothing written). An extreme one (``1e308``, 2⁶³, 10³⁰, -1, 0) is
refused the same way (naming the key it is read by, or the line of a trace), or, where it is a value
a user may mean (a seed of 2⁶³, an admission queue of 10³⁰, a token mean of 1e308 clipped to its law's
max, an empty warm pool), runs to completion;
either within seconds, with nothing on stderr but the verdict.
"""
from __future__ import annotations

import copy
import json
import math
import re
import signal
import time
import warnings
from pathlib import Path
from typing import Annotated, Any, Iterator

import pytest
import yaml
from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError

from simulator.profiles.loader import builtin_dir
from simulator.scenario.strict import leaves
from tests.conftest import _LLAMA3_8B_CONFIG
from tests.test_bad_input_files import _key as key_of, _listing, refused

#: Refused wherever a number goes (``1e400`` is read as inf).
NONFINITE = (".nan", ".inf", "-.inf", "1e400", "'nan'", "'inf'")
#: Refused, or run to completion within seconds.
EXTREME = ("1e308", str(2**63), str(10**30), "-1", "0")
#: Seconds any one case may take (the contract says "within seconds"; a slow CI machine gets slack).
SECONDS = 10

POOL = "chat"
_FLEET = {
    "name": "fleet",
    "seed": 3,
    "timeline_interval_s": 10.0,
    "workload": {
        "num_requests": 12,
        "arrival": {"type": "poisson", "rate_per_s": 20.0,
                    "profile": {"type": "sinusoid", "period_s": 86400, "peak_to_trough": 4, "peak_at_s": 600}},
        "system_prompt": {"apps": 2, "tokens": {"dist": "uniform", "min": 50, "max": 90},
                          "popularity": {"type": "zipf", "s": 1.1}},
        "input_tokens": {"dist": "lognormal", "mean": 300, "std": 200, "min": 16, "max": 1200},
        "output_tokens": {"dist": "normal", "mean": 40, "std": 10, "min": 4, "max": 80},
    },
    "pools": [{"name": POOL, "model": "llama-3-8b", "gpu": "h100-sxm", "replicas": 2, "usd_per_gpu_hour": 3.5,
               "router": {"type": "prefix_aware", "load_weight": 64},
               "engine": {"max_num_seqs": 64, "max_num_batched_tokens": 2048, "iteration_overhead_ms": 1.0,
                          "kv_offload": {"host_gb": 40, "host_gb_per_s": 25}},
               "autoscaling": {"metric": "concurrency", "target": 8, "min_replicas": 1, "max_replicas": 3,
                               "interval_s": 15, "scale_down_window_s": 60, "boot_s": 30,
                               "weight_load_gb_per_s": 2.0, "warm_pool": 1, "warm_start_s": 5}}],
    "classes": [{"name": "paid", "share": 1.0, "priority": 1, "slo": {"ttft_p99_ms": 2000},
                 "admission": {"max_queue_per_replica": 50, "max_wait_s": 30},
                 "kv_budget_fraction": 0.9,
                 "network": {"ingress_ms": 5.0, "egress_ms": {"dist": "lognormal", "mean": 5, "std": 2},
                             "tokenize_ms_per_1k_tokens": 0.5},
                 "rate_limit": {"requests_per_min": 6000}},
                {"name": "free", "share": 3.0, "priority": 0, "slo": {"tpot_p99_ms": 200},
                 "admission": {"max_queue_per_replica": 10, "max_wait_s": 10}}],
    "cost": {"api": {"input_usd_per_million": 3.0, "output_usd_per_million": 15.0}},
    "energy": {"pue": 1.3, "grid_g_per_kwh": 400, "usd_per_kwh": 0.1},
    "product": {"slices": 4},
    "input_length_buckets": {"edges": [500], "slo": {"500+": {"ttft_p99_ms": 3000}}},
    "slo": {"ttft_p99_ms": 2500, "tpot_p99_ms": 150},
}
_CHAT = {
    "name": "chat", "seed": 1,
    "workload": {"num_sessions": 3, "arrival": {"type": "poisson", "rate_per_s": 2.0},
                 "input_tokens": {"dist": "lognormal", "mean": 120, "std": 60, "min": 8, "max": 600},
                 "output_tokens": {"dist": "uniform", "min": 8, "max": 40},
                 "session": {"type": "chat", "turns": {"dist": "uniform", "min": 2, "max": 3},
                             "think_time_s": {"dist": "lognormal", "mean": 2, "std": 1}}},
    "pools": [{"name": POOL, "model": "llama-3-8b", "gpu": "h100-sxm"}],
    "slo": {"ttft_p99_ms": 5000},
}
_AGENTS = {
    "name": "agents", "seed": 1,
    "workload": {"num_sessions": 2, "arrival": {"type": "poisson", "rate_per_s": 1.0},
                 "input_tokens": {"dist": "lognormal", "mean": 200, "std": 100, "min": 20, "max": 800},
                 "output_tokens": {"dist": "lognormal", "mean": 40, "std": 30, "min": 8, "max": 200},
                 "session": {"type": "agentic", "turns": {"dist": "uniform", "min": 2, "max": 3},
                             "tool_result_tokens": {"dist": "lognormal", "mean": 100, "std": 80, "min": 10,
                                                    "max": 400},
                             "pause_s": {"dist": "exponential", "mean": 1.0}, "max_context_tokens": 4096,
                             "subagents": {"probability": 0.5, "count": {"dist": "fixed", "value": 1},
                                           "turns": {"dist": "fixed", "value": 2},
                                           "task_tokens": {"dist": "fixed", "value": 50}}}},
    "pools": [{"name": POOL, "model": "llama-3-8b", "gpu": "h100-sxm"}],
}
_TYPING = {
    "name": "typing", "seed": 1,
    "workload": {"duration_s": 2, "arrival": {"type": "poisson", "rate_per_s": 1.0},
                 "output_tokens": {"dist": "uniform", "min": 8, "max": 20},
                 "session": {"type": "autocomplete", "file_tokens": {"dist": "uniform", "min": 400, "max": 800},
                             "bursts": {"dist": "fixed", "value": 1},
                             "keystrokes": {"dist": "uniform", "min": 3, "max": 6},
                             "keystroke_gap_s": {"dist": "exponential", "mean": 0.15},
                             "debounce_ms": 50, "tokens_per_keystroke": 0.25, "jump_probability": 0.2}},
    "pools": [{"name": POOL, "model": "llama-3-8b", "gpu": "h100-sxm"}],
}
_TRACE = {
    "name": "trace", "seed": 1,
    "workload": {"arrival": {"type": "trace", "path": "t.csv", "time_scale": 2.0, "rate_scale": 1.0,
                             "start_s": 0.0, "end_s": 100.0, "max_requests": 10, "jitter_s": 0.1}},
    "pools": [{"name": POOL, "model": "llama-3-8b", "gpu": "h100-sxm"}],
}
BASES = {"fleet": _FLEET, "chat": _CHAT, "agents": _AGENTS, "typing": _TYPING, "trace": _TRACE}
TRACE_CSV = "timestamp,input_tokens,output_tokens,session_id\n" + "".join(
    f"{i * 0.5},{100 + i},{10 + i},{i % 3}\n" for i in range(12))

RUN = ["run", "s.yaml", "-o", "out", "--no-plots", "--exit-zero"]
_BAD = "XXBADXX"


def marked(data: Any, path: tuple) -> str:
    """``data`` as YAML text with the value at ``path`` written as :data:`_BAD`, for each value tried to
    replace (``.nan``, ``1e400``): dumped once a key, not once a value (a backend profile's dump, 11 times
    over each of its keys, was a fifth of the number cases' time)."""
    data = copy.deepcopy(data)
    node = data
    for part in path[:-1]:
        node = node[part]
    node[path[-1]] = _BAD
    text = yaml.safe_dump(data, sort_keys=False, width=10**6)
    assert text.count(_BAD) == 1, text
    return text


def numeric(data: Any) -> list[tuple]:
    return [p for p, v in leaves(data) if isinstance(v, (int, float)) and not isinstance(v, bool)]


def distinct(data: Any, seen: set) -> list[tuple]:
    """The numeric keys of ``data`` not already in ``seen``: a key is its path with list positions
    dropped and the ``dist`` of its mapping (a second class's ``share``, a second lognormal's ``mean``,
    a backend's third ``engine_by_gpu`` rule are the field already tried), but for the arrival rate;
    ``seen`` grows."""
    out = []
    for p in numeric(data):
        node = data
        for part in p[:-1]:
            node = node[part]
        key = (tuple("[]" if isinstance(x, int) else x for x in p),
               node.get("dist") if isinstance(node, dict) else None)
        if key not in seen or p[-1] == "rate_per_s":     # a rate is read with its base's count or duration
            seen.add(key)
            out.append(p)
    return out


class _Slow(Exception):
    pass


def _alarm(signum, frame):
    raise _Slow()


def timed(cli, *argv: Any):
    """``cli(*argv)`` stopped with a failure past :data:`SECONDS` (a run that would tick for ever)."""
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(SECONDS)
    t = time.perf_counter()
    try:
        with warnings.catch_warnings():     # a user sees a warning as lines of noise on stderr: none may come
            warnings.simplefilter("error", RuntimeWarning)
            warnings.simplefilter("error", UserWarning)
            r = cli(*argv)
    except _Slow:
        pytest.fail(f"llmsim {' '.join(map(str, argv))} ran past {SECONDS} s")
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    r.seconds = time.perf_counter() - t
    return r


def refused_or_ran(r, folder: Path, before: list[str], name: str) -> None:
    """:func:`refused` naming the file ``name`` and then a key path (or a trace's line), the folder left
    as it was; or a finished run whose stderr holds no warning."""
    if r.code == 0:
        assert "Traceback" not in r.err and "Warning" not in r.err, r.err
        assert not re.search(r"\d[\d,]{40}", r.out), r.out      # a figure printed as 30 digits and more
        return
    line = refused(r, name)
    assert "input string" not in line, line     # pydantic's words for 1e308 where a whole number goes
    assert re.search(re.escape(name) + r"(?: \(with [^)]*\))?: (line \d+|--[\w-]+|[\w.\[\]+-]+): ", line), line
    assert _listing(folder) == before


def _write_case(folder: Path, base: str, text: str) -> None:
    (folder / "s.yaml").write_text(text)
    if base == "trace":
        (folder / "t.csv").write_text(TRACE_CSV)


# --- scenario files: every numeric key of every base, every value ------------------------------------------
_seen: set = set()
SCENARIO_KEYS = [(b, p) for b, data in BASES.items() for p in distinct(data, _seen)]


def each_value(tmp_path: Path, monkeypatch, values: tuple[str, ...], check) -> None:
    """``check(folder, raw)`` for every value, each in a folder of its own and run from it: one test a
    key, not one a key and value (2,000 cases' own set-up took the suite about a minute); a failure
    names its value."""
    for i, raw in enumerate(values):
        folder = tmp_path / str(i)
        folder.mkdir()
        monkeypatch.chdir(folder)
        try:
            check(folder, raw)
        except AssertionError as e:
            raise AssertionError(f"with the value {raw}: {e}") from None


def test_the_bases_run_and_cover_the_scenario(tmp_path, cli, monkeypatch):
    """Each base runs as written (so a refusal below is the value's doing), and together they hold a
    numeric key of every scenario section that has one."""
    monkeypatch.chdir(tmp_path)
    for b, data in BASES.items():
        _write_case(tmp_path, b, yaml.safe_dump(data, sort_keys=False))
        r = timed(cli, "run", "s.yaml", "--no-plots", "--exit-zero")
        assert r.code == 0, (b, r.err)
    tops = {p[0] if p[0] != "workload" else ".".join(map(str, p[:2])) for p in
            (p for data in BASES.values() for p in numeric(data))}
    assert {"seed", "timeline_interval_s", "workload.num_requests", "workload.num_sessions", "workload.duration_s",
            "workload.arrival", "workload.session", "workload.system_prompt", "workload.input_tokens",
            "workload.output_tokens", "pools", "classes", "cost", "energy", "product", "input_length_buckets",
            "slo"} <= tops
    assert len(SCENARIO_KEYS) * len(NONFINITE + EXTREME) > 800


@pytest.mark.parametrize("base, path", SCENARIO_KEYS, ids=[f"{b}-{key_of(p)}" for b, p in SCENARIO_KEYS])
def test_a_scenario_number(tmp_path, cli, monkeypatch, base, path):
    text = marked(BASES[base], path)

    def check(folder: Path, raw: str) -> None:
        _write_case(folder, base, text.replace(_BAD, raw))
        before = _listing(folder)
        r = timed(cli, *RUN)
        if raw in NONFINITE:
            refused(r, "s.yaml", key_of(path))
            assert _listing(folder) == before
        else:
            refused_or_ran(r, folder, before, "s.yaml")

    each_value(tmp_path, monkeypatch, NONFINITE + EXTREME, check)


# --- the same through --set, a variant and the check block ---------------------------------------------------
SET_KEYS = ["seed", "workload.num_requests", "workload.arrival.rate_per_s", "workload.input_tokens.std",
            f"pools.{POOL}.replicas", f"pools.{POOL}.usd_per_gpu_hour", f"pools.{POOL}.engine.iteration_overhead_ms",
            f"pools.{POOL}.engine.kv_offload.host_gb", f"pools.{POOL}.autoscaling.warm_pool",
            "classes.paid.priority", "classes.paid.slo.ttft_p99_ms", "classes.paid.network.ingress_ms",
            "input_length_buckets.slo.500+.ttft_p99_ms", "slo.tpot_p99_ms", "energy.usd_per_kwh"]


@pytest.mark.parametrize("raw", NONFINITE + EXTREME)
@pytest.mark.parametrize("key", SET_KEYS)
def test_a_number_given_by_set(tmp_path, cli, monkeypatch, key, raw):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(_FLEET, sort_keys=False))
    before = _listing(tmp_path)
    r = timed(cli, *RUN, "--set", f"{key}={raw}")
    if raw in NONFINITE:
        line = refused(r, "s.yaml", "--set")
        assert key.split(".")[-1] in line
        assert _listing(tmp_path) == before
    else:
        refused_or_ran(r, tmp_path, before, "s.yaml")


@pytest.mark.parametrize("raw", NONFINITE)
@pytest.mark.parametrize("key", [f"pools.{POOL}.engine.iteration_overhead_ms", "classes.paid.slo.ttft_p99_ms",
                                 "workload.arrival.rate_per_s"])
def test_a_non_finite_number_in_a_variant_or_the_check_block(tmp_path, cli, monkeypatch, key, raw):
    """A variant not selected and the check block's overlays are read as the file is: refused by name."""
    monkeypatch.chdir(tmp_path)
    text = yaml.safe_dump({**_FLEET, "variants": [{"name": "v", "set": {key: _BAD}}]}, sort_keys=False)
    (tmp_path / "s.yaml").write_text(text.replace(_BAD, raw))
    refused(timed(cli, *RUN), "s.yaml", "variants.v.set")
    text = yaml.safe_dump({**_FLEET, "check": {"set": {key: _BAD}}}, sort_keys=False)
    (tmp_path / "s.yaml").write_text(text.replace(_BAD, raw))
    before = _listing(tmp_path)
    refused(timed(cli, "check", "s.yaml", "--baseline", "b", "--update-baseline"), "s.yaml", "check.set")
    assert _listing(tmp_path) == before


@pytest.mark.parametrize("raw", NONFINITE)
def test_a_non_finite_number_in_a_sweep_grid_or_a_vary_list(tmp_path, cli, monkeypatch, raw):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(_CHAT, sort_keys=False))
    (tmp_path / "sw.yaml").write_text(f"base: s.yaml\ngrid:\n  workload.arrival.rate_per_s: [{raw}, 5]\n")
    before = _listing(tmp_path)
    refused(timed(cli, "sweep", "sw.yaml", "-o", "out", "--workers", "1"), "sw.yaml", "workload.arrival.rate_per_s")
    refused(timed(cli, *_PLAN, "--vary", f"workload.arrival.rate_per_s={raw},5"), "--vary",
            "workload.arrival.rate_per_s")
    assert _listing(tmp_path) == before


# --- profiles: the GPU's, the model's and the backend's files ------------------------------------------------
GPU = yaml.safe_load((builtin_dir("hardware_profiles") / "h100-sxm.yaml").read_text())
# the families a dense model never reads are left out: each case parses its own copy of the file
for _family in ("moe", "moe_ep", "mla_projection", "mla_prefill", "mla_decode", "stacks", "error"):
    GPU["calibration"].pop(_family, None)
BACKEND = {**yaml.safe_load((builtin_dir("backend_profiles") / "vllm.yaml").read_text()), "name": "b"}
MODEL = {**_LLAMA3_8B_CONFIG, "name": "m"}
#: The same model as a block-scaled fp8 checkpoint: its quantization_config's numbers are read too.
MODEL_FP8 = {**MODEL, "quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]}}


def _profile_paths(data: Any) -> list[tuple]:
    """Every numeric key outside the kernel calibration, and those of one family (each family is the same
    model class: RooflineParams, checked for every field by test_every_float_of_an_input_model_is_finite)."""
    return [p for p in distinct(data, set()) if p[0] != "calibration" or p[:2] == ("calibration", "gemm")]


#: Keys of a Hugging Face config.json llmsim does not read (any value passes by unread).
_UNREAD = {"attention_dropout", "bos_token_id", "eos_token_id", "initializer_range", "pretraining_tp",
           "rms_norm_eps", "rope_theta"}
PROFILE_KEYS = ([("gpu", "g.yaml", GPU, p) for p in _profile_paths(GPU)]
                + [("model", "m.yaml", MODEL, p) for p in numeric(MODEL) if p[0] not in _UNREAD]
                + [("model", "m.yaml", MODEL_FP8, p) for p in numeric(MODEL_FP8) if p[0] == "quantization_config"]
                + [("engine.backend", "b.yaml", BACKEND, p) for p in distinct(BACKEND, set())])


@pytest.mark.parametrize("key, name, data, path", PROFILE_KEYS,
                         ids=[f"{n}-{key_of(p)}" for _, n, _, p in PROFILE_KEYS])
def test_a_profile_number(tmp_path, cli, monkeypatch, key, name, data, path):
    scenario, text = yaml.safe_dump(_CHAT, sort_keys=False), marked(data, path)

    def check(folder: Path, raw: str) -> None:
        (folder / "s.yaml").write_text(scenario)
        (folder / name).write_text(text.replace(_BAD, raw))
        before = _listing(folder)
        r = timed(cli, *RUN, "--set", f"pools.{POOL}.{key}={name}")
        if raw in NONFINITE:
            # the sharpness of a roofline may be .inf (the textbook hard max), not nan
            if path[-1] == "sharpness" and raw in (".inf", "1e400"):
                assert r.code == 0, r.err
                return
            refused(r, name, key_of(path))
            assert _listing(folder) == before
        else:
            refused_or_ran(r, folder, before, name)

    each_value(tmp_path, monkeypatch, NONFINITE + EXTREME, check)


# --- trace files --------------------------------------------------------------------------------------------
TRACE_VALUES = ("nan", "inf", "-inf", "1e400", "1e308", "-1", "0", str(2**63), str(10**30), "1.0e400")


def _trace_rows(fmt: str, column: str, raw: str) -> str:
    rows = [{"timestamp": i * 0.5, "input_tokens": 100 + i, "output_tokens": 10 + i, "session_id": i % 3,
             "block_ids": [i, i + 1]} for i in range(6)]
    if fmt == "csv":
        lines = ["timestamp,input_tokens,output_tokens,session_id,block_ids"]
        for i, row in enumerate(rows):
            cells = {**row, "block_ids": " ".join(map(str, row["block_ids"]))}
            if i == 3:
                cells[column] = raw if column != "block_ids" else f"7 {raw}"
            lines.append(",".join(str(cells[c]) for c in ("timestamp", "input_tokens", "output_tokens",
                                                          "session_id", "block_ids")))
        return "\n".join(lines) + "\n"
    out = []
    for i, row in enumerate(rows):
        text = json.dumps({**row, column: "@@"} if i == 3 else row)
        js = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}.get(raw, raw)
        out.append(text.replace('"@@"', js if column != "block_ids" else f"[7, {js}]"))
    return "\n".join(out) + "\n"


TRACE_CASES = [(fmt, col, raw) for fmt in ("csv", "jsonl")
               for col in ("timestamp", "input_tokens", "output_tokens", "session_id", "block_ids")
               for raw in TRACE_VALUES]


@pytest.mark.parametrize("fmt, column, raw", TRACE_CASES, ids=[f"{f}-{c}={r}" for f, c, r in TRACE_CASES])
def test_a_trace_number(tmp_path, cli, monkeypatch, fmt, column, raw):
    """A trace cell: refused naming the file and line, or replayed (a session id is a label: any
    whole number or text names a session; a timestamp may be any finite time)."""
    monkeypatch.chdir(tmp_path)
    spec = {"type": "trace", "path": f"t.{fmt}", "block_size": 64}
    (tmp_path / "s.yaml").write_text(yaml.safe_dump({**_TRACE, "workload": {"arrival": spec}}, sort_keys=False))
    (tmp_path / f"t.{fmt}").write_text(_trace_rows(fmt, column, raw))
    before = _listing(tmp_path)
    r = timed(cli, *RUN)
    finite = math.isfinite(float(raw))
    if column == "session_id" or (finite and column == "timestamp"):
        refused_or_ran(r, tmp_path, before, f"t.{fmt}")
    elif not finite or column != "block_ids":
        refused(r, f"t.{fmt}", "line 5" if fmt == "csv" else "line 4")
        assert _listing(tmp_path) == before
    else:
        refused_or_ran(r, tmp_path, before, f"t.{fmt}")


# --- benchmark tables and results (`llmsim validate`) -------------------------------------------------------
ROW = {"engine": "vllm", "model": "llama-3-8b", "gpu": "h100-sxm", "tp": 1, "isl_mean": 200, "osl_mean": 20,
       "concurrency": 2, "num_requests": 4, "ttft_mean_ms": 50.0, "tpot_mean_ms": 10.0}
BENCH = {"completed": 4, "total_input_tokens": 800, "total_output_tokens": 80, "mean_ttft_ms": 50.0,
         "median_ttft_ms": 45.0, "mean_tpot_ms": 10.0, "output_throughput": 1000.0, "request_rate": "inf",
         "max_concurrency": 2}
CSV_CASES = [(k, raw) for k in ROW if k not in ("engine", "model", "gpu") for raw in TRACE_VALUES]
JSON_VALUES = ("NaN", "Infinity", "-Infinity", "1e400", "1e308", "-1", "0", str(2**63), str(10**30), '"nan"')
JSON_CASES = [(k, raw) for k in BENCH for raw in JSON_VALUES]


@pytest.mark.parametrize("key, raw", CSV_CASES, ids=[f"{k}={r}" for k, r in CSV_CASES])
def test_a_benchmark_table_cell(tmp_path, cli, monkeypatch, key, raw):
    """A table's bad cell leaves its row unreplayed with the reason (the table's other rows still count);
    never a traceback, a run past the limits, or an infinite figure taken as measured."""
    from simulator.validation.rows import rows_from_csv

    monkeypatch.chdir(tmp_path)
    row = {**ROW, key: raw}
    (tmp_path / "rows.csv").write_text(",".join(row) + "\n" + ",".join(map(str, row.values())) + "\n")
    (r,) = rows_from_csv(tmp_path / "rows.csv")
    assert r.skip or all(math.isfinite(v) and v <= 1e12 for v in r.measured.values())
    if not r.skip:
        assert 1 <= r.isl <= 2**27 and 1 <= r.osl <= 2**27 and 1 <= (r.concurrency or 1) <= 10**6
    res = timed(cli, "validate", "rows.csv", "--workers", "1", "--csv", "out/e.csv")
    assert res.code in (0, 2) and "Traceback" not in res.err and "Warning" not in res.err, res.err
    if raw != "nan" and (not math.isfinite(float(raw)) or float(raw) > 1e12):   # nan: an empty cell, not given
        assert r.skip and key in r.skip, r.skip


@pytest.mark.parametrize("key, raw", JSON_CASES, ids=[f"{k}={r}" for k, r in JSON_CASES])
def test_a_bench_result_number(tmp_path, cli, monkeypatch, key, raw):
    """A `vllm bench serve` result's number: refused naming the file and key, or replayed (request_rate
    may be inf: vLLM's "all at once"; a measured 0 ms is a number)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "bench.json").write_text(json.dumps({**BENCH, key: 12345.678}).replace("12345.678", raw))
    before = _listing(tmp_path)
    r = timed(cli, "validate", "bench.json", "--backend", "vllm", "--model", "llama-3-8b", "--gpu", "h100-sxm",
              "--workers", "1", "--csv", "out/e.csv")
    if key == "request_rate" and raw in ("Infinity", "1e400", "1e308", str(2**63), str(10**30)):
        assert r.code == 0, r.err
    elif raw in ("NaN", "Infinity", "-Infinity", "1e400", '"nan"'):
        refused(r, "bench.json", key)
        assert _listing(tmp_path) == before
    else:
        refused_or_ran(r, tmp_path, before, "bench.json")


# --- results files read back: `llmsim compare`, `llmsim report`, a `llmsim check` baseline -------------------
RESULTS = {"completed": 4, "failed": 0, "p99_ttft_ms": 200.0, "llmsim": {"gpus": 2}}
_READERS = {"compare": (["compare", "a.json", "b.json"], "a.json"), "report": (["report", "rp"], "rp/results.json"),
            "baseline": (["check", "s.yaml", "--baseline", "b"], "b/chat.json")}


@pytest.mark.parametrize("raw", ("NaN", "Infinity", "-Infinity", "1e400"))
@pytest.mark.parametrize("reader", _READERS)
def test_a_non_finite_figure_in_a_results_file(tmp_path, cli, monkeypatch, reader, raw):
    """llmsim writes a figure it could not measure as null; a NaN or inf one (JSON's NaN, Infinity) read
    back would compare as neither better nor worse, so a baseline holding it could never fail."""
    monkeypatch.chdir(tmp_path)
    argv, name = _READERS[reader]
    figures = {"p99_ttft_ms": 12345.678} if reader == "baseline" else {**RESULTS, "p99_ttft_ms": 12345.678}
    for f in ("a.json", "b.json", "rp/results.json", "b/chat.json"):
        (tmp_path / f).parent.mkdir(exist_ok=True)
        (tmp_path / f).write_text(json.dumps(figures if f == name else RESULTS).replace("12345.678", raw))
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(_CHAT, sort_keys=False))
    before = _listing(tmp_path)
    refused(timed(cli, *argv), name, "p99_ttft_ms")
    assert _listing(tmp_path) == before


# --- numeric flags ------------------------------------------------------------------------------------------
FLAG_VALUES = ("nan", "inf", "-inf", "1e400", "1e308", "-1", "0", str(2**63), str(10**30))
_EST = ["estimate", "step", "--gpu", "h100-sxm", "--model", "llama-3-8b"]
_REQ = ["estimate", "request", "--gpu", "h100-sxm", "--model", "llama-3-8b"]
_PLAN = ["plan", "s.yaml", "-o", "out", "--workers", "1", "--vary", f"pools.{POOL}.replicas=1..2"]
_VAL = ["validate", "bench.json", "--backend", "vllm", "--model", "llama-3-8b", "--gpu", "h100-sxm",
        "--csv", "out/e.csv", "--workers", "1"]
FLAGS = {
    "run --confidence": (RUN, "--confidence"),
    "run --replicates": ([*RUN, "--workers", "1"], "--replicates"),
    "run --shards": ([*RUN, "--workers", "1"], "--shards"),
    "run --connect-timeout": (RUN, "--connect-timeout"),
    "check --tolerance": (["check", "s.yaml", "--baseline", "b", "--update-baseline"], "--tolerance"),
    "plan --seeds": (_PLAN, "--seeds"),          # 2⁶³ seeds: refused as 10¹⁹ runs, "of 2⁶³ seed(s)"
    "plan --confidence": (_PLAN, "--confidence"),
    "plan --max-runs": (_PLAN, "--max-runs"),
    "estimate step --decode-batch": (_EST, "--decode-batch"),
    "estimate step --prefill-tokens": (_EST, "--prefill-tokens"),
    "estimate step --decode-context": ([*_EST, "--decode-batch", "4"], "--decode-context"),
    "estimate request --input": ([*_REQ, "--output", "10"], "--input"),
    "estimate request --output": ([*_REQ, "--input", "10"], "--output"),
    "estimate request --mfu": ([*_REQ, "--input", "10", "--output", "10"], "--mfu"),
    "estimate request --gpu-memory-utilization": ([*_REQ, "--input", "10", "--output", "10"],
                                                  "--gpu-memory-utilization"),
    "estimate request --max-num-batched-tokens": ([*_REQ, "--input", "10", "--output", "10"],
                                                  "--max-num-batched-tokens"),
    "estimate request --tp": ([*_REQ, "--input", "10", "--output", "10"], "--tp"),
    "estimate request --cuda-graph-gib": ([*_REQ, "--input", "10", "--output", "10", "--backend", "vllm",
                                          "--backend-version", "0.25.0"], "--cuda-graph-gib"),
    "validate --tp": (_VAL, "--tp"),
    "validate --max-concurrency": (_VAL, "--max-concurrency"),
    "validate --workers": (_VAL[:-2], "--workers"),
}
#: Flags whose 2⁶³ and 10³⁰ are fine: a limit never reached (runs, a relative move, the rows kept).
_UNBOUNDED_OK = {"plan --max-runs", "check --tolerance", "validate --max-concurrency"}


@pytest.mark.parametrize("raw", FLAG_VALUES)
@pytest.mark.parametrize("flag", FLAGS)
def test_a_numeric_flag(tmp_path, cli, monkeypatch, flag, raw):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(_CHAT, sort_keys=False))
    (tmp_path / "bench.json").write_text(json.dumps(BENCH))
    argv, option = FLAGS[flag]
    before = _listing(tmp_path)
    r = timed(cli, *argv, option, raw)
    if not math.isfinite(float(raw)):
        assert r.code == 2 and "Traceback" not in r.err and option in r.err, r.err
        assert _listing(tmp_path) == before
    elif r.code != 0:
        assert r.code == 2 and "Traceback" not in r.err and (option in r.err or option == "--seeds" and "seed(s)"
                                                             in r.err), r.err
        assert _listing(tmp_path) == before
    else:
        assert "Traceback" not in r.err and "Warning" not in r.err, r.err
        assert float(raw) < 2**63 or flag in _UNBOUNDED_OK, f"{flag} {raw} accepted"


# --- every float of every input model, by construction ------------------------------------------------------
def _models(tp: Any, seen: set) -> None:
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        if tp in seen:
            return
        seen.add(tp)
        for sub in tp.__subclasses__():           # registries: arrival processes, routers, popularity laws
            _models(sub, seen)
        for f in tp.model_fields.values():
            _models(f.annotation, seen)
    for a in getattr(tp, "__args__", None) or ():
        _models(a, seen)


def _non_finite(x: Any) -> bool:
    if isinstance(x, float):
        return not math.isfinite(x)
    if isinstance(x, dict):
        return any(_non_finite(v) for v in x.values())
    if isinstance(x, (list, tuple)):
        return any(_non_finite(v) for v in x)
    if isinstance(x, BaseModel):
        return any(_non_finite(getattr(x, k)) for k in type(x).model_fields)
    return False


def _accepting_non_finite() -> Iterator[str]:
    from simulator.profiles.backend import BackendProfile
    from simulator.profiles.hardware import HardwareProfile
    from simulator.profiles.model import ModelProfile
    from simulator.scenario.schema import Scenario

    seen: set = set()
    for root in (Scenario, HardwareProfile, ModelProfile, BackendProfile):
        _models(root, seen)
    for m in sorted(seen, key=lambda c: c.__name__):
        config = ConfigDict(allow_inf_nan=m.model_config.get("allow_inf_nan", True))
        for name, f in m.model_fields.items():
            with warnings.catch_warnings():      # Field() metadata a bare annotation does not use
                warnings.simplefilter("ignore")
                try:
                    adapter = TypeAdapter(Annotated[f.annotation, f], config=config)
                except Exception:      # a model-typed field: its own config holds
                    adapter = TypeAdapter(Annotated[f.annotation, f])
            for probe in (math.inf, math.nan, -math.inf, [math.inf], {"k": math.inf}):
                try:
                    value = adapter.validate_python(probe)
                except (ValidationError, TypeError, ValueError):
                    continue
                if _non_finite(value):
                    yield f"{m.__name__}.{name}"
                    break


#: Fields that take any value, checked where they are read: SLO mappings (parse_slo), overlays (validated
#: as the scenario they change), a backend's engine keys (validated as the pool's engine), and the roofline
#: sharpness whose .inf is the textbook hard max.
CHECKED_ELSEWHERE = {"Scenario.slo", "ClassSpec.slo", "Variant.set", "CheckSpec.set", "BackendProfile.engine",
                     "BackendProfile.speculative_engine", "BackendProfile.draft_model_engine",
                     "GeneratedLaunch.engine", "GeneratedLaunch.prefill_engine", "GpuRule.set", "ModelRule.set",
                     "VersionRule.set", "PrefillServerRule.set", "PrefillServerLift.where",
                     "VersionRule.speculative_engine", "VersionRule.draft_model_engine",
                     "RooflineParams.sharpness", "MoeParams.sharpness"}


def test_every_float_of_an_input_model_is_finite():
    """No field of a scenario, GPU, model or backend model takes nan or inf, but those read elsewhere."""
    assert set(_accepting_non_finite()) == CHECKED_ELSEWHERE


@pytest.mark.parametrize("value, says", [
    ("nan", "expected a finite number, got 'nan'"), ("inf", "expected a finite number, got 'inf'"),
    ('"12"', "expected a number, got the text '12' (write the number without quotes)"),
])
def test_the_text_nan_is_called_not_finite_not_a_quoting_slip(tmp_path, cli, value, says):
    """`--set key=nan` reaches the schema as the text 'nan' (YAML spells the number .nan): the message is
    about the value, and asks to unquote only a number that was quoted."""
    from test_sweep import write_tiny_scenario

    r = cli("run", write_tiny_scenario(tmp_path), "--set", f"workload.arrival.rate_per_s={value}")
    assert r.code == 2 and f"workload.arrival.rate_per_s: {says}" in r.err, r.err
