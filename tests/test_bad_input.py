"""Bad input and faults, by class: each class has its cases and a fuzz test
(hypothesis over mutated scenarios, traces, files and flags), so that the
next instance of a class is caught without being listed.

The classes: (1) a wrong answer without a word (a stale stored point, a
value silently reinterpreted); (2) a run that cannot finish; (3) a
traceback instead of one line; (4) a half-written or orphaned result;
(5) a message that does not name the file and key; (6) results that
differ between two runs of one seed.
"""
from __future__ import annotations

import gzip
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings, strategies as st

from simulator.errors import LlmsimError
from simulator.planning.point import Point
from simulator.runsize import MAX_CLOCK_TICKS, MAX_REPLICAS, MAX_REQUESTS, MAX_SPAN_S, check_run_size
from simulator.scenario.load import load_scenario
from simulator.scenario.strict import leaves
from tests.test_sweep import TINY

#: test_sweep's tiny scenario cut to 40 requests: a run takes a fraction of a second
SCENARIO = {**TINY, "workload": {**TINY["workload"], "num_requests": 40}}
POOL = TINY["pools"][0]["name"]


#: Examples per fuzz test; LLMSIM_FUZZ_EXAMPLES=500 digs deeper than the suite's default.
FUZZ = settings(max_examples=int(os.environ.get("LLMSIM_FUZZ_EXAMPLES", 25)), deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture])


def write_yaml(path: Path, data) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def one_line_error(r, *fragments: str) -> None:
    """Exit 2, one ``error:`` line on stderr (a few for a list of problems), no traceback."""
    assert r.code == 2, f"exit {r.code}\nstdout:\n{r.out}\nstderr:\n{r.err}"
    assert "Traceback" not in r.err, r.err
    assert r.err.strip().startswith("error:"), r.err
    for frag in fragments:
        assert frag in r.err, f"{frag!r} not in {r.err!r}"


def _set_path(path: tuple) -> str:
    """A key path as --set writes it (pools by name)."""
    parts = []
    for i, p in enumerate(path):
        if isinstance(p, int) and path[i - 1] == "pools":
            parts.append(SCENARIO["pools"][p]["name"])
        else:
            parts.append(str(p))
    return ".".join(parts)


NUMERIC = [(p, v) for p, v in leaves(SCENARIO) if isinstance(v, (int, float)) and not isinstance(v, bool)]


# --- (1) wrong answers without a word ---------------------------------------------------------------------
def test_a_key_given_twice_is_refused(tmp_path, cli):
    path = tmp_path / "dup.yaml"
    text = yaml.safe_dump(SCENARIO, sort_keys=False)
    line = next(ln for ln in text.splitlines() if ln.strip().startswith("replicas: "))
    indent = line[: len(line) - len(line.lstrip())]
    path.write_text(text.replace(line, f"{line}\n{indent}replicas: 8"))
    one_line_error(cli("run", path), "dup.yaml", "'replicas' given twice")


@pytest.mark.parametrize("written, says", [
    ("010", "'010' has a leading zero, which YAML 1.1 reads as octal (8) and YAML 1.2 as 10"),
    ("1:30", "'1:30' is a number in base 60 to YAML 1.1 (90) and text to YAML 1.2"),
])
def test_a_number_yaml_readers_read_apart_is_refused(tmp_path, cli, written, says):
    """PyYAML read `replicas: 010` as 8 and `1:30` as 90 without a word."""
    text = yaml.safe_dump(SCENARIO, sort_keys=False)
    line = next(ln for ln in text.splitlines() if ln.strip().startswith("replicas: "))
    path = tmp_path / "s.yaml"
    path.write_text(text.replace(line, f"{line.partition(':')[0]}: {written}"))
    one_line_error(cli("run", path, "-o", tmp_path / "out"), "s.yaml", says)
    one_line_error(cli("run", write_yaml(tmp_path / "t.yaml", SCENARIO), "--set", f"pools.{POOL}.replicas={written}",
                       "-o", tmp_path / "out"), f"--set pools.{POOL}.replicas: {says}")
    assert not (tmp_path / "out").exists()


def test_true_for_a_number_and_a_negative_index_are_refused(tmp_path, cli):
    path = write_yaml(tmp_path / "s.yaml", SCENARIO)
    one_line_error(cli("run", path, "--set", f"pools.{POOL}.replicas=true"), "pools[0].replicas", "got True")
    one_line_error(cli("run", path, "--set", "pools.-1.tp=2"), "negative index -1")


def test_a_pool_named_as_another_pools_position_is_not_set_by_it(tmp_path):
    """``pools.0`` reads 0 as a position first: with a pool named "0" at position 1, the key set the other pool."""
    pools = [{**SCENARIO["pools"][0], "name": "1"}, {**SCENARIO["pools"][0], "name": "0"}]
    classes = [{"name": "a", "pool": "1"}, {"name": "b", "pool": "0"}]
    path = write_yaml(tmp_path / "s.yaml", {**SCENARIO, "pools": pools, "classes": classes})
    with pytest.raises(LlmsimError) as e:
        load_scenario(path, ["pools.0.replicas=3"])
    assert e.value.key_path == "pools.0" and "0 is the position of item 0 and the name of item 1" in e.value.message
    pools[0]["name"] = classes[0]["pool"] = "7"       # a name past every position says which pool it is
    sc, _ = load_scenario(write_yaml(tmp_path / "s.yaml", {**SCENARIO, "pools": pools, "classes": classes}),
                          ["pools.7.replicas=3"])
    assert [p.replicas for p in sc.pools] == [3, pools[1]["replicas"]]


def test_an_item_without_a_name_is_not_addressed_as_none():
    """A list of unnamed items (a class's pool_by_input_length steps): ``.None.`` read an item's missing name
    as the text "None" and set the first step without a word."""
    from simulator.scenario.overrides import apply_override

    data = {"classes": [{"name": "c", "pool_by_input_length": [{"pool": "a", "below_tokens": 100}, {"pool": "b"}]}]}
    with pytest.raises(LlmsimError, match="no item named 'None'"):
        apply_override(data, "classes.c.pool_by_input_length.None.pool=z")
    assert data["classes"][0]["pool_by_input_length"][0]["pool"] == "a"


@pytest.mark.parametrize("kind, key, written", [
    ("scenario", f"pools.{POOL}.engine.prefix_cache", "0"), ("scenario", f"pools.{POOL}.engine.chunked_prefill", "'yes'"),
    ("scenario", f"pools.{POOL}.engine.clips_output", "0"), ("model", "tie_word_embeddings", "1"),
    ("gpu", "calibration.gemm.waves", "'false'")])
def test_a_number_or_a_text_where_true_or_false_goes_is_refused(tmp_path, kind, key, written):
    """The mirror of a true/false where a number goes: pydantic reads 0, 1 and "yes"/"off" as true/false."""
    from simulator.profiles.hardware import load_hardware
    from simulator.profiles.model import load_model

    value = yaml.safe_load(written)
    if kind == "scenario":
        with pytest.raises(LlmsimError) as e:
            load_scenario(write_yaml(tmp_path / "s.yaml", SCENARIO), [f"{key}={written}"])
    else:
        folder, name = {"model": ("model_profiles", "llama-3-8b"), "gpu": ("hardware_profiles", "h100-sxm")}[kind]
        data = {**yaml.safe_load((Path(__file__).parent.parent / folder / f"{name}.yaml").read_text()), "name": "x"}
        *parents, last = key.split(".")
        node = data
        for part in parents:
            node = node[part]
        assert isinstance(node.get(last, False), bool)
        node[last] = value
        with pytest.raises(LlmsimError) as e:
            (load_model if kind == "model" else load_hardware)(str(write_yaml(tmp_path / f"{kind}.yaml", data)))
    assert f"{value!r} would be read as" in e.value.message and key.split(".")[-1] in str(e.value)


@FUZZ
@given(leaf=st.sampled_from(NUMERIC), flag=st.booleans())
def test_fuzz_a_true_or_false_where_a_number_goes_is_refused(leaf, flag):
    """Any numeric key of the scenario, set to true/false by --set, is refused (never read as 1 or 0)."""
    path, _ = leaf
    with tempfile.TemporaryDirectory() as tmp:
        scenario = write_yaml(Path(tmp) / "s.yaml", SCENARIO)
        with pytest.raises(LlmsimError) as e:
            load_scenario(scenario, [f"{_set_path(path)}={str(flag).lower()}"])
        assert f"got {flag}" in e.value.message


@FUZZ
@given(data=st.data())
def test_fuzz_a_key_duplicated_anywhere_is_refused(data):
    """Repeat any mapping key of the scenario file (with another value): refused, naming the key's line."""
    text = yaml.safe_dump(SCENARIO, sort_keys=False, default_flow_style=False)
    lines = text.splitlines()
    # "key: scalar" lines (a nested block's header would need its block repeated too)
    keyed = [i for i, line in enumerate(lines)
             if ": " in line and not line.lstrip().startswith("- ") and not line.rstrip().endswith(":")]
    i = data.draw(st.sampled_from(keyed))
    key = lines[i].split(":")[0]
    lines.insert(i + data.draw(st.integers(0, 1)), f"{key}: 7")
    with tempfile.TemporaryDirectory() as tmp:
        p = Path(tmp) / "d.yaml"
        p.write_text("\n".join(lines) + "\n")
        with pytest.raises(LlmsimError) as e:
            load_scenario(p)
        assert "given twice" in e.value.message


def _trace_scenario(folder: Path, rows: int = 30, tokens: int = 200) -> Path:
    (folder / "t.csv").write_text("timestamp,input_tokens,output_tokens\n"
                                  + "".join(f"{i * 0.1},{tokens},{20}\n" for i in range(rows)))
    return write_yaml(folder / "s.yaml", {"name": "t", "workload": {"arrival": {"type": "trace", "path": "t.csv"}},
                                          "pools": [{"name": POOL, "model": str(folder / "m.yaml"),
                                                     "gpu": "h100-sxm"}],
                                          "slo": {"ttft_p99_ms": 500}})


def _model_file(folder: Path, layers: int = 32) -> None:
    from tests.conftest import _LLAMA3_8B_CONFIG

    (folder / "m.yaml").write_text(yaml.safe_dump({**_LLAMA3_8B_CONFIG, "num_hidden_layers": layers,
                                                    "name": "m"}))


EDITS = {
    "trace token counts": lambda d: (d / "t.csv").write_text((d / "t.csv").read_text().replace(",200,", ",400,")),
    "model layers": lambda d: _model_file(d, 64),
    "scenario bytes": lambda d: (d / "s.yaml").write_text((d / "s.yaml").read_text() + "# a comment\n"),
}


@FUZZ
@given(edit=st.sampled_from(sorted(EDITS)), replicas=st.integers(1, 3))
def test_fuzz_a_stored_point_is_not_reused_after_any_input_changed(edit, replicas):
    """The store's key moves when any file the result depends on changes (the trace, a model config the
    pool names, the scenario itself), and stays put when nothing did."""
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        _model_file(d)
        scenario = str(_trace_scenario(d))
        p = Point(scenario, ((f"pools.{POOL}.replicas", replicas),))
        assert Point(scenario, ((f"pools.{POOL}.replicas", replicas),)).key == p.key
        time.sleep(0.01)     # a new mtime even on a coarse clock
        EDITS[edit](d)
        assert Point(scenario, ((f"pools.{POOL}.replicas", replicas),)).key != p.key


def _every_variant(path: Path):
    from simulator.scenario.overlays import load_with_variants

    sc, _ = load_scenario(path)
    yield sc
    for v in sc.variants:
        yield load_with_variants(path, [v])


@pytest.mark.parametrize("name", ["chatbot", "quickcode", "autocomplete", "dau-10m", "ttft-program", "trace"])
def test_the_key_covers_every_file_a_run_reads(tmp_path, repo_root, name):
    """What a run reads (loading, the pre-run checks, drawing the workload) is inside what the store's key
    hashes, for every built-in scenario and variant (speculative drafts, backends) and a trace scenario."""
    from simulator.scenario.compile import base_dir, compile_scenario
    from simulator.reads import recorded_reads
    from simulator.planning.point import named_files
    from workloads.drivers import make_source

    if name == "trace":
        _model_file(tmp_path)
        path = _trace_scenario(tmp_path)
    else:
        path = repo_root / "scenarios" / f"{name}.yaml"
    for sc in _every_variant(path):
        with recorded_reads() as read:
            compile_scenario(sc, path)
            if sc.workload.is_trace:
                make_source(sc.workload, sc.seed, base_dir(path))
        with recorded_reads() as keyed:
            load_scenario(path)
            keyed.update(named_files(sc, path))
        assert read <= keyed, f"{sc.name}: read but not in the key: {sorted(map(str, read - keyed))}"


def test_a_sweep_reruns_points_after_the_trace_changed(tmp_path, cli):
    _model_file(tmp_path)
    _trace_scenario(tmp_path)
    sweep = write_yaml(tmp_path / "sw.yaml", {"base": "s.yaml", "grid": {f"pools.{POOL}.replicas": [1, 2]}})
    out = tmp_path / "out"
    assert cli("sweep", sweep, "-o", out, "--workers", "1").code == 0
    again = cli("sweep", sweep, "-o", out, "--workers", "1")
    assert "(2 reused" in " ".join(again.out.split())
    (tmp_path / "t.csv").write_text((tmp_path / "t.csv").read_text().replace(",200,", ",400,"))
    edited = cli("sweep", sweep, "-o", out, "--workers", "1")
    assert "(0 reused" in " ".join(edited.out.split())


# --- (2) runs that cannot finish --------------------------------------------------------------------------
HUGE = {
    "workload.num_requests": MAX_REQUESTS * 10,
    "timeline_interval_s": 1e-9,
    f"pools.{POOL}.replicas": MAX_REPLICAS + 1,
}


@pytest.mark.parametrize("key", sorted(HUGE))
def test_a_run_past_a_limit_is_refused_with_its_estimate(tmp_path, cli, key):
    path = write_yaml(tmp_path / "s.yaml", SCENARIO)
    t = time.perf_counter()
    r = cli("run", path, "--set", f"{key}={HUGE[key]}", "-o", tmp_path / "out")
    assert time.perf_counter() - t < 5
    one_line_error(r, "s.yaml")
    assert "cannot finish" in r.err or "at most" in r.err
    assert not (tmp_path / "out").exists()


#: Prompts a workload builds past the model's context, each refused on the key that builds them.
_CHAT = {"session": {"type": "chat", "turns": {"dist": "fixed", "value": 1_000_000}, "think_time_s": {"dist": "fixed", "value": 1.0}},
         "num_sessions": 10, "input_tokens": {"dist": "fixed", "value": 100},
         "output_tokens": {"dist": "fixed", "value": 20}}
_EDIT = {"session": {"type": "autocomplete"}, "num_sessions": 5, "output_tokens": {"dist": "fixed", "value": 20}}
TOO_LONG = {
    "workload.session.turns": _CHAT,
    "workload.session.tokens_per_keystroke": {**_EDIT, "session": {"type": "autocomplete", "tokens_per_keystroke": 1e9}},
    "workload.session.file_tokens": {**_EDIT, "session": {"type": "autocomplete",
                                                          "file_tokens": {"dist": "fixed", "value": 100_000_000}}},
    "workload.system_prompt.tokens": {"system_prompt": {"apps": 2, "tokens": {"dist": "fixed", "value": 9000}}},
    "workload.output_tokens": {"output_tokens": {"dist": "fixed", "value": 100_000_000}},
}


@pytest.mark.parametrize("key", sorted(TOO_LONG))
def test_a_prompt_built_past_the_context_is_refused_on_the_key_that_builds_it(tmp_path, cli, key):
    drop = ({"num_requests"} if "num_sessions" in TOO_LONG[key] else set()) | (
        {"input_tokens"} if TOO_LONG[key].get("session", {}).get("type") == "autocomplete" else set())
    wl = {k: v for k, v in SCENARIO["workload"].items() if k not in drop}
    path = write_yaml(tmp_path / "s.yaml", {**SCENARIO, "workload": {**wl, **TOO_LONG[key]}})
    t = time.perf_counter()
    r = cli("run", path, "-o", tmp_path / "out")
    assert time.perf_counter() - t < 5                       # a million turns or a billion-token keystroke: at once
    one_line_error(r, "s.yaml")
    assert f"{key}:" in r.err and ("context" in r.err or "turns" in r.err), r.err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("key, value, says", [
    (f"pools.{POOL}.autoscaling", "{min_replicas: 1, max_replicas: 2, metric: queue_depth, target: 4, interval_s: 1e-6}",
     "pools[0].autoscaling.interval_s"),
    ("workload.num_requests", "20000000", "pools[0].autoscaling.interval_s: this run cannot finish"),
    (f"pools.{POOL}.disaggregation", "{decode_pool: nope, link: {latency_ms: 2e11}}", "link.latency_ms"),
    (f"pools.{POOL}.disaggregation", "{decode_pool: nope, link: {bandwidth_gb_per_s: 1e-9}}", "link.bandwidth_gb_per_s"),
])
def test_a_knob_that_stretches_the_run_past_its_limits_is_refused_on_itself(tmp_path, cli, key, value, says):
    fast = {**SCENARIO, "pools": [{**SCENARIO["pools"][0], "autoscaling": {
        "min_replicas": 1, "max_replicas": 2, "metric": "queue_depth", "target": 4, "interval_s": 0.1}}]}
    path = write_yaml(tmp_path / "s.yaml", fast if key == "workload.num_requests" else SCENARIO)
    t = time.perf_counter()
    r = cli("run", path, "--set", f"{key}={value}", "-o", tmp_path / "out")
    assert time.perf_counter() - t < 5
    one_line_error(r, "s.yaml")
    assert says in r.err, r.err


_STEP = "{min_replicas: 1, max_replicas: 2, metric: concurrency, target: 4, schedule: [{at_s: %s, min_replicas: 2}]}"


@pytest.mark.parametrize("key, value, says", [
    ("workload.arrival.spikes", "[{start_s: 0.5, duration_s: 1, multiplier: 2}, {start_s: 2, duration_s: 1, multiplier: 9}]",
     "workload.arrival.spikes[1].start_s: 2 s is at or after the window's end (duration_s: 2 s)"),
    # one that starts inside the window and runs past its end was cut there without a word
    ("workload.arrival.spikes", "[{start_s: 0.5, duration_s: 1.5, multiplier: 2}, {start_s: 1.5, duration_s: 5, multiplier: 9}]",
     "workload.arrival.spikes[1].duration_s: 5 s from 1.5 s runs to 6.5 s, past the window's end (duration_s: 2 s): "
     "no arrival is drawn after it, so its last 4.5 s would change nothing; end it by the window's end (at most "
     "0.5 s) or lengthen the window"),
    (f"pools.{POOL}.autoscaling", _STEP % 3600,
     "pools[0].autoscaling.schedule[0].at_s: 3600 s is at or after the window's end (workload.duration_s: 2 s)"),
])
def test_a_spike_or_a_schedule_step_after_the_window_is_refused(tmp_path, cli, key, value, says):
    """Arrivals stop at duration_s: a spike or a raised floor from then on changed nothing, without a word
    (a spike written in minutes for seconds, a step in seconds of a day run for two)."""
    timed = {**SCENARIO, "workload": {**{k: v for k, v in SCENARIO["workload"].items() if k != "num_requests"},
                                      "duration_s": 2}}
    path = write_yaml(tmp_path / "s.yaml", timed)
    r = cli("run", path, "--set", f"{key}={value}", "-o", tmp_path / "out")
    one_line_error(r, "s.yaml", says)
    assert not (tmp_path / "out").exists()
    # in a run sized by its count, which may reach them, they stand
    from simulator.scenario.compile import compile_scenario

    sc, source = load_scenario(write_yaml(tmp_path / "n.yaml", SCENARIO), [f"{key}={value}"])
    compile_scenario(sc, source)


@pytest.mark.parametrize("name", ["", "   ", "\t"], ids=["empty", "spaces", "tab"])
@pytest.mark.parametrize("key", ["name", "pools[0].name", "classes[0].name", "regions[0].name"])
def test_a_name_of_nothing_is_refused(tmp_path, cli, name, key):
    """A pool, class, region or scenario named "" or "  " was taken: no key can name it, results keyed a
    block by it, a pool so named surfaced as another key's routing error and a scenario so named filed
    its baseline as .json."""
    named = {**SCENARIO, "classes": [{"name": "chat", "pool": POOL}], "regions": [{"name": "eu", "share": 1}]}
    if key == "name":
        named["name"] = name
    elif key == "pools[0].name":
        named["pools"] = [{**SCENARIO["pools"][0], "name": name}]
        named["classes"] = [{"name": "chat", "pool": name}]
    else:
        block = key.split("[")[0]
        named[block] = [{**named[block][0], "name": name}]
    path = write_yaml(tmp_path / "s.yaml", named)
    r = cli("run", path, "-o", tmp_path / "out")
    one_line_error(r, "s.yaml", f"{key}: names nothing: expected at least one visible character")
    assert not (tmp_path / "out").exists()


def test_a_spike_after_a_counted_runs_last_arrival_is_refused(tmp_path, cli):
    """A run sized by num_requests stops drawing at its last arrival: a spike starting after it changed
    nothing, without a word (the duration_s check above does not reach a run sized by its count)."""
    path = write_yaml(tmp_path / "s.yaml", SCENARIO)
    late = "[{start_s: 0.1, duration_s: 5, multiplier: 2}, {start_s: 3600, duration_s: 60, multiplier: 3}]"
    r = cli("run", path, "--set", f"workload.arrival.spikes={late}", "-o", tmp_path / "out")
    one_line_error(r, "s.yaml", "workload.arrival.spikes[1].start_s: 3600 s is at or after the last arrival: the 40 "
                   f"arrivals (workload.num_requests) drawn at seed {SCENARIO['seed']} end at ",
                   "so no arrival meets the spike and it would change nothing; start it before then, or raise "
                   "workload.num_requests")
    assert not (tmp_path / "out").exists()
    # one the arrivals reach runs
    r = cli("run", path, "--set", "workload.arrival.spikes=[{start_s: 0.1, duration_s: 60, multiplier: 2}]",
            "--json", "--exit-zero")     # the tiny run's load is not judged (a short window): not what is tested
    assert r.code == 0, r.err


def test_a_pool_whose_ceiling_and_warm_standbys_together_pass_the_replica_limit_is_refused(tmp_path, cli):
    """Each count is under the limit, but the standbys are built beside the serving replicas."""
    ceiling, warm = MAX_REPLICAS // 2 + 1, MAX_REPLICAS // 2
    data = json.loads(json.dumps(SCENARIO))
    data["pools"][0]["autoscaling"] = {"metric": "concurrency", "target": 8, "min_replicas": 1,
                                       "max_replicas": ceiling, "warm_pool": warm}
    path = write_yaml(tmp_path / "s.yaml", data)
    t = time.perf_counter()
    r = cli("run", path, "-o", tmp_path / "out")
    assert time.perf_counter() - t < 5
    one_line_error(r, "s.yaml", "pools[0].autoscaling.max_replicas", f"{ceiling + warm:,} replicas in one pool",
                   f"autoscaling.max_replicas ({ceiling:,}) + autoscaling.warm_pool ({warm:,})",
                   f"at most {MAX_REPLICAS:,}")
    assert not (tmp_path / "out").exists()


def test_a_trace_row_far_in_the_future_is_refused(tmp_path, cli):
    (tmp_path / "t.csv").write_text("timestamp,input_tokens,output_tokens\n0,100,20\n1e300,100,20\n")
    path = write_yaml(tmp_path / "s.yaml", {"name": "t", "workload": {"arrival": {"type": "trace", "path": "t.csv"}},
                                            "pools": [{"model": "llama-3-8b", "gpu": "h100-sxm"}]})
    t = time.perf_counter()
    r = cli("run", path)
    assert time.perf_counter() - t < 5
    one_line_error(r, "s.yaml", "cannot finish", "1e+300")


@FUZZ
@given(rate=st.floats(1e-6, 1e6), duration=st.floats(1.0, 1e12), interval=st.floats(1e-12, 1e6),
       sessions=st.booleans())
def test_fuzz_the_size_estimate_refuses_exactly_what_passes_a_limit(rate, duration, interval, sessions):
    """Over random rates, spans and sampling periods: a run is refused iff its expected requests, span
    or clock ticks pass a limit, and a refusal quotes the estimate."""
    data = json.loads(json.dumps(SCENARIO))
    wl = data["workload"]
    del wl["num_requests"]
    wl.update(duration_s=duration, arrival={"type": "poisson", "rate_per_s": rate})
    if sessions:
        wl["session"] = {"type": "chat", "turns": {"dist": "fixed", "value": 4},
                         "think_time_s": {"dist": "fixed", "value": 5}}
    data["timeline_interval_s"] = interval
    with tempfile.TemporaryDirectory() as tmp:
        sc, path = load_scenario(write_yaml(Path(tmp) / "s.yaml", data))
    requests = rate * duration * (4 if sessions else 1)
    span = duration + (3 * 5 if sessions else 0)      # a session lasts its 3 think times after its start
    over = requests > MAX_REQUESTS or span > MAX_SPAN_S or span / interval > MAX_CLOCK_TICKS
    if over:
        with pytest.raises(LlmsimError) as e:
            check_run_size(sc, path)
        assert "cannot finish" in e.value.message and "simulated seconds" in e.value.message
    else:
        size = check_run_size(sc, path)
        assert size.requests == pytest.approx(requests)


def test_the_clock_stops_a_run_whose_span_was_unknown():
    """A closed loop's span is known only as it runs: the clock's tick count is the last bound."""
    import simpy

    from simulator.fleet.clock import Clock

    env = simpy.Environment()
    clock = Clock(env, max_ticks=1000)
    clock.every(1e-6, lambda: None)
    env.timeout(1.0)      # something pending for a whole second: a million ticks
    with pytest.raises(LlmsimError, match="passed 1,000 ticks"):
        env.run()


# --- (3) tracebacks instead of one line -------------------------------------------------------------------
@FUZZ
@given(data=st.data())
def test_fuzz_a_mangled_scenario_file_is_one_error_or_a_scenario(data):
    """Cut, splice or corrupt the scenario text anywhere: loading and checking it either gives a scenario
    or one LlmsimError, never another exception."""
    from simulator.scenario.compile import compile_scenario

    text = yaml.safe_dump(SCENARIO, sort_keys=False).encode()
    how = data.draw(st.sampled_from(["truncate", "delete", "insert", "nest"]))
    i = data.draw(st.integers(0, len(text)))
    if how == "truncate":
        text = text[:i]
    elif how == "delete":
        text = text[:i] + text[i + data.draw(st.integers(1, 20)):]
    elif how == "insert":
        text = text[:i] + data.draw(st.binary(min_size=1, max_size=8)) + text[i:]
    else:
        text = b"a: " + b"[" * data.draw(st.integers(60, 5000)) + text
    with tempfile.TemporaryDirectory() as tmp:
        p = Path(tmp) / "m.yaml"
        p.write_bytes(text)
        try:
            sc, path = load_scenario(p)
            compile_scenario(sc, path)
            check_run_size(sc, path)
        except LlmsimError:
            pass


KEY_PATHS = sorted({_set_path(p) for p, _ in leaves(SCENARIO)} | {
    "pools.0.tp", "pools.-1.tp", f"pools.{POOL}.router", f"pools.{POOL}.engine.block_size", "timeline_interval_s",
    "workload.duration_s", "workload.arrival", "pools", "nope.deeper", f"pools.{POOL}.autoscaling.max_replicas"})
VALUES = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(allow_nan=True),
                   st.text(max_size=12), st.lists(st.integers(), max_size=3),
                   st.dictionaries(st.sampled_from(["dist", "value", "type", "x"]), st.integers(), max_size=2))


@FUZZ
@given(key=st.sampled_from(KEY_PATHS), value=VALUES)
def test_fuzz_any_set_flag_is_a_scenario_or_one_error(key, value):
    """--set KEY=VALUE with any key path and any YAML value: a scenario (checked and sized) or one
    LlmsimError, never another exception."""
    from simulator.scenario.compile import compile_scenario

    text = yaml.safe_dump(value, default_flow_style=True).strip().removesuffix("...").strip()
    with tempfile.TemporaryDirectory() as tmp:
        scenario = write_yaml(Path(tmp) / "s.yaml", SCENARIO)
        try:
            sc, path = load_scenario(scenario, [f"{key}={text}"])
            compile_scenario(sc, path)
            check_run_size(sc, path)
        except LlmsimError:
            pass


def _trace_bytes(fmt: str) -> tuple[str, bytes]:
    if fmt == "jsonl":
        return "t.jsonl", "".join(json.dumps({"timestamp": i * 100, "input_length": 300, "output_length": 9,
                                              "hash_ids": [i, i + 1]}) + "\n" for i in range(40)).encode()
    body = ("timestamp,input_tokens,output_tokens\n" + "".join(f"{i * 0.1},{100 + i},{10}\n" for i in range(40)))
    if fmt == "csv.gz":
        return "t.csv.gz", gzip.compress(body.encode())
    return "t.csv", body.encode()


@FUZZ
@given(fmt=st.sampled_from(["csv", "csv.gz", "jsonl"]), data=st.data())
def test_fuzz_a_mangled_trace_is_one_error_or_a_trace(fmt, data):
    """Truncate or corrupt a trace file (plain, gzip, JSONL): reading it gives requests or one LlmsimError."""
    from workloads.traces import parse_trace_spec, read_trace

    name, raw = _trace_bytes(fmt)
    i = data.draw(st.integers(0, len(raw)))
    if data.draw(st.booleans()):
        raw = raw[:i]
    else:
        raw = raw[:i] + data.draw(st.binary(min_size=1, max_size=6)) + raw[i + 1:]
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / name).write_bytes(raw)
        try:
            read_trace(parse_trace_spec({"type": "trace", "path": name}), tmp)
        except LlmsimError:
            pass


def test_a_truncated_gzip_trace_is_one_line(tmp_path, cli):
    _, raw = _trace_bytes("csv.gz")
    (tmp_path / "t.csv.gz").write_bytes(raw[: len(raw) // 2])
    path = write_yaml(tmp_path / "s.yaml", {"name": "t", "workload": {"arrival": {"type": "trace",
                                                                                   "path": "t.csv.gz"}},
                                            "pools": [{"model": "llama-3-8b", "gpu": "h100-sxm"}]})
    one_line_error(cli("run", path), "t.csv.gz", "cannot read")


@pytest.mark.parametrize("fmt", ["auto", "azure"])
@pytest.mark.parametrize("command", [["run"], ["check"]])
def test_a_missing_trace_names_the_scenario_and_its_key(tmp_path, cli, fmt, command):
    """Refused by the reader that went to open it, a missing trace read 'nofile.csv: file not found' (with
    format: auto as the scenario compiled, with a format only once the run began): no scenario, no key."""
    (tmp_path / "sub").mkdir()
    path = write_yaml(tmp_path / "sub" / "s.yaml", {**SCENARIO, "workload": {"arrival": {
        "type": "trace", "path": "nofile.csv", "format": fmt}}})
    r = cli(*command, path, *(["-o", tmp_path / "out"] if command == ["run"] else []))
    one_line_error(r, f"{path}: workload.arrival.path: nofile.csv: file not found (read as "
                      f"{tmp_path / 'sub' / 'nofile.csv'}, relative to the scenario's folder); expected the path "
                      "of a trace file to replay")
    assert not (tmp_path / "out").exists()


def test_a_trace_path_no_file_can_have_is_one_line(tmp_path, cli):
    """os.stat raises ValueError, not OSError, for a name holding a NUL ("a\\0b.csv" in the YAML): the trace
    check before any run is built let it through as a traceback."""
    path = write_yaml(tmp_path / "s.yaml", {**SCENARIO, "workload": {"arrival": {"type": "trace", "path": "a\0b.csv"}}})
    one_line_error(cli("run", path, "-o", tmp_path / "out"), f"{path}: workload.arrival.path: a\\x00b.csv: cannot "
                                                             "read file (embedded null byte)")
    assert not (tmp_path / "out").exists()


BAD_OUTPUTS = {
    "empty name": lambda d: "",
    "through a file": lambda d: str(d / "afile.txt" / "sub"),
    "a file": lambda d: str(d / "afile.txt"),
    "name too long": lambda d: str(d / ("x" * 300)),
    "holds an earlier run": lambda d: str(d / "full"),
}


@FUZZ
@given(case=st.sampled_from(sorted(BAD_OUTPUTS)), command=st.sampled_from(["run", "sweep"]))
def test_fuzz_a_bad_output_folder_is_one_line_and_leaves_nothing(case, command, cli):
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        (d / "afile.txt").write_text("keep")
        (d / "full").mkdir()
        (d / "full" / "results.json").write_text("{}")
        scenario = write_yaml(d / "s.yaml", SCENARIO)
        sweep = write_yaml(d / "sw.yaml", {"base": "s.yaml", "grid": {"seed": [1]}})
        before = sorted(p.relative_to(d) for p in d.rglob("*"))
        if command == "sweep" and case == "holds an earlier run":
            return     # a sweep's folder is resumable: an earlier sweep's points are reused, not refused
        r = cli(command, sweep if command == "sweep" else scenario, "-o", BAD_OUTPUTS[case](d))
        one_line_error(r, "-o")
        assert sorted(p.relative_to(d) for p in d.rglob("*")) == before


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
@pytest.mark.parametrize("command", ["run", "sweep"])
def test_a_read_only_output_folder_is_one_line(tmp_path, cli, command):
    scenario = write_yaml(tmp_path / "s.yaml", SCENARIO)
    sweep = write_yaml(tmp_path / "sw.yaml", {"base": "s.yaml", "grid": {"seed": [1]}})
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        for out in (ro, ro / "sub"):
            r = cli(command, sweep if command == "sweep" else scenario, "-o", out)
            one_line_error(r, "permission denied")
    finally:
        ro.chmod(0o755)


def test_a_full_disk_while_writing_is_one_line_and_leaves_nothing(tmp_path, cli, monkeypatch):
    import errno

    import simulator.metrics.table as table

    def full(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(table, "write_requests", full)
    path = write_yaml(tmp_path / "s.yaml", SCENARIO)
    one_line_error(cli("run", path, "-o", tmp_path / "out"), "no space left")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.yaml"]


def test_a_full_disk_under_a_sweep_is_one_line(tmp_path, cli, monkeypatch):
    import errno

    import simulator.planning.store as store

    def full(path, write):
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(store, "write_atomic", full)
    write_yaml(tmp_path / "s.yaml", SCENARIO)
    sweep = write_yaml(tmp_path / "sw.yaml", {"base": "s.yaml", "grid": {"seed": [1]}})
    one_line_error(cli("sweep", sweep, "-o", tmp_path / "out", "--workers", "1"), "No space left on device")


def test_an_empty_output_folder_is_used(tmp_path, cli):
    path = write_yaml(tmp_path / "s.yaml", SCENARIO)
    (tmp_path / "out").mkdir()
    assert cli("run", path, "-o", tmp_path / "out", "--no-plots", "--exit-zero").code == 0
    assert (tmp_path / "out" / "results.json").is_file()


# --- (4) half-written and orphaned ------------------------------------------------------------------------
@FUZZ
@given(stage=st.sampled_from(["results", "requests", "timeline", "plots"]), overwrite=st.booleans(),
       why=st.sampled_from([KeyboardInterrupt, OSError]))
def test_fuzz_a_run_stopped_while_writing_leaves_the_folder_as_it_was(stage, overwrite, why, cli, monkeypatch):
    """Stop the final write at any file (an interrupt, an I/O error): no staging folder is left, a new
    folder is not made, an earlier run's folder keeps its files."""
    names = {"results": "simulator.metrics.results.write_results", "requests": "simulator.metrics.table.write_requests"}
    with tempfile.TemporaryDirectory() as tmp, monkeypatch.context() as m:
        d = Path(tmp)
        scenario = write_yaml(d / "s.yaml", SCENARIO)
        out = d / "out"
        if overwrite:
            out.mkdir()
            (out / "results.json").write_text("old")

        def boom(*a, **k):
            raise why("stopped")

        if stage in names:
            m.setattr(names[stage], boom)
        elif stage == "timeline":
            m.setattr("pandas.DataFrame.to_csv", boom)
        else:
            m.setattr("simulator.report.plots.write_run_plots", boom)
        try:
            cli("run", scenario, "-o", out, *(["--overwrite"] if overwrite else []))
        except KeyboardInterrupt:
            pass
        if overwrite:
            assert [p.name for p in out.iterdir()] == ["results.json"]
            assert (out / "results.json").read_text() == "old"
        else:
            assert not out.exists()
        assert sorted(p.name for p in d.iterdir()) == (["out", "s.yaml"] if overwrite else ["s.yaml"])


@pytest.mark.parametrize("items, most, expected", [
    ([], 3, ""), (["a"], 3, "a"), (["a", "b", "c"], 3, "a, b, c"), (["a", "b", "c", "d", "e"], 3, "a, b, c and 2 more"),
])
def test_a_long_list_in_a_message_is_its_first_few_and_how_many_more(items, most, expected):
    from simulator.errors import first_few

    assert first_few(items, most) == expected


def test_a_full_output_folder_names_its_first_files_and_counts_the_rest(tmp_path, cli):
    path = write_yaml(tmp_path / "s.yaml", SCENARIO)
    out = tmp_path / "out"
    out.mkdir()
    for name in "abcdef":
        (out / f"{name}.txt").write_text("mine")
    one_line_error(cli("run", path, "-o", out), "already holds 6 file(s) (a.txt, b.txt, c.txt, d.txt and 2 more) and no earlier run",
                   "name another folder")


def test_a_full_folder_is_offered_overwrite_only_where_overwrite_would_take_it(tmp_path, cli):
    """An earlier run's folder is offered --overwrite; with a file of the user's beside it, the hint says
    to move that out first (--overwrite alone would be refused)."""
    path = write_yaml(tmp_path / "s.yaml", SCENARIO)
    out = tmp_path / "out"
    assert cli("run", path, "-o", out, "--exit-zero").code == 0
    one_line_error(cli("run", path, "-o", out), "already holds an earlier run", "give --overwrite")
    (out / "notes.txt").write_text("mine")
    one_line_error(cli("run", path, "-o", out), "an earlier run and 1 file(s) llmsim did not write (notes.txt)",
                   "move them out and give --overwrite")
    one_line_error(cli("run", path, "-o", out, "--overwrite"), "notes.txt")
    assert (out / "notes.txt").read_text() == "mine"


def test_a_full_folder_hint_never_offers_an_overwrite_that_is_then_refused(tmp_path, cli, monkeypatch):
    """An earlier run's folder holding the scenario, or the current folder: --overwrite would be refused
    there, so the first refusal does not offer it."""
    path = write_yaml(tmp_path / "s.yaml", SCENARIO)
    out = tmp_path / "out"
    assert cli("run", path, "-o", out, "--exit-zero").code == 0
    inside = out / "s.yaml"
    inside.write_text(path.read_text())
    (out / "scenario.yaml").unlink()
    for args in ((inside, "-o", out), (inside, "-o", out, "--overwrite")):
        r = cli("run", *args)
        one_line_error(r, f"{inside}, an input of this run")
        assert "give --overwrite" not in r.err
    monkeypatch.chdir(out)
    r = cli("run", path, "-o", ".")
    one_line_error(r, "the current folder's contents")
    assert "give --overwrite" not in r.err


def test_a_users_file_inside_a_ladder_step_is_named_by_its_path(tmp_path, cli):
    path = write_yaml(tmp_path / "s.yaml", SCENARIO)
    out = tmp_path / "out"
    (out / "baseline").mkdir(parents=True)
    (out / "ladder.json").write_text("{}")
    (out / "baseline" / "results.json").write_text("{}")
    (out / "baseline" / "notes.txt").write_text("mine")
    one_line_error(cli("run", path, "-o", out, "--overwrite"), "1 file(s) llmsim did not write (baseline/notes.txt)")
    assert (out / "baseline" / "notes.txt").read_text() == "mine"


def test_overwrite_replaces_the_folder_whole(tmp_path, cli):
    path = write_yaml(tmp_path / "s.yaml", SCENARIO)
    out = tmp_path / "out"
    out.mkdir()
    (out / "old-plot.png").write_text("old")
    # a folder of other files is not an earlier run's: --overwrite is not offered, and leaves it alone
    r = cli("run", path, "-o", out)
    one_line_error(r, "already holds 1 file(s) (old-plot.png) and no earlier run")
    assert "--overwrite" not in r.err
    one_line_error(cli("run", path, "-o", out, "--overwrite"), "holds other files (old-plot.png)")
    assert (out / "old-plot.png").read_text() == "old"
    (out / "results.json").write_text("{}")      # an earlier run's, plot and all
    (out / "notes.md").write_text("mine")        # ... and a file llmsim never writes: kept, and refused
    one_line_error(cli("run", path, "-o", out, "--overwrite"), "llmsim did not write (notes.md)")
    (out / "notes.md").unlink()
    assert cli("run", path, "-o", out, "--overwrite", "--no-plots", "--exit-zero").code == 0
    assert sorted(p.name for p in out.iterdir()) == ["requests.parquet", "results.json", "run.json",
                                                     "scenario.yaml", "timeline.csv"]
    for f in out.iterdir():
        assert f.stat().st_mode & 0o777 == 0o666 & ~_umask()


def test_overwrite_never_empties_the_current_folder(tmp_path, cli, monkeypatch):
    path = write_yaml(tmp_path / "s.yaml", SCENARIO)
    monkeypatch.chdir(tmp_path)
    one_line_error(cli("run", path, "-o", ".", "--overwrite"), "current folder")
    assert path.exists()


def _umask() -> int:
    m = os.umask(0)
    os.umask(m)
    return m


def test_sweep_files_get_the_usual_mode(tmp_path, cli):
    write_yaml(tmp_path / "s.yaml", SCENARIO)
    sweep = write_yaml(tmp_path / "sw.yaml", {"base": "s.yaml", "grid": {"seed": [1]}})
    assert cli("sweep", sweep, "-o", tmp_path / "out", "--workers", "1").code == 0
    files = [tmp_path / "out" / "sweep.parquet", *(tmp_path / "out" / "points").iterdir()]
    for f in files:
        assert f.stat().st_mode & 0o777 == 0o666 & ~_umask(), f


def _wait_for(cond, timeout: float) -> bool:
    end = time.time() + timeout
    while time.time() < end:
        if cond():
            return True
        time.sleep(0.1)
    return False


LONG = ["--set", "workload.num_requests=200000", "--set", "workload.arrival.rate_per_s=400",
        "--set", f"pools.{POOL}.replicas=8"]


def _llmsim(*args, cwd: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", "from simulator.cli.app import main; main()", *map(str, args)],
                            cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def test_sigterm_mid_run_leaves_nothing_behind(tmp_path):
    path = write_yaml(tmp_path / "s.yaml", SCENARIO)
    out = tmp_path / "out"
    p = _llmsim("run", path, "-o", out, *LONG, cwd=tmp_path)
    try:
        assert _wait_for(lambda: out.exists() and any(out.iterdir()), 30), "the run never staged"
        p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=30)
    finally:
        p.kill()
    assert p.returncode == 128 + signal.SIGTERM and "Traceback" not in err
    assert sorted(x.name for x in tmp_path.iterdir()) == ["s.yaml"]


def _children(pid: int) -> list[int]:
    path = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(c) for c in path.read_text().split()] if path.exists() else []


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().split()[2] == "Z")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_sweep_workers_die_with_their_parent(tmp_path, sig):
    write_yaml(tmp_path / "s.yaml", SCENARIO)
    sweep = write_yaml(tmp_path / "sw.yaml", {"base": "s.yaml", "grid": {"seed": [1, 2, 3]}})
    p = _llmsim("sweep", sweep, "-o", tmp_path / "out", "--workers", "2", *LONG, cwd=tmp_path)
    try:
        assert _wait_for(lambda: len(_children(p.pid)) >= 2, 60), "no workers started"
        workers = _children(p.pid)
        time.sleep(1.0)
        p.send_signal(sig)
        p.wait(timeout=30)
        assert _wait_for(lambda: not any(_alive(w) for w in workers), 10), "workers outlived the sweep"
    finally:
        p.kill()


# --- (5) unclear messages ---------------------------------------------------------------------------------
GPU_KEYS = ["hbm_gib", "hbm_bandwidth_tb_s", "num_sms", "host_link_gb_s", "fp8_gemm_efficiency", "fp4_gemm_efficiency",
            "mla_prefill_efficiency"]


@FUZZ
@given(key=st.sampled_from(GPU_KEYS), value=st.sampled_from([-5, 0, "lots", True]))
def test_fuzz_a_bad_profile_value_names_the_profile_file_and_key(key, value, cli):
    from simulator.profiles.loader import builtin_dir

    gpu = yaml.safe_load((builtin_dir("hardware_profiles") / "h100-sxm.yaml").read_text())
    gpu[key] = value
    gpu["name"] = "badgpu"
    with tempfile.TemporaryDirectory() as tmp:
        write_yaml(Path(tmp) / "badgpu.yaml", gpu)
        scenario = write_yaml(Path(tmp) / "s.yaml", SCENARIO)
        r = cli("run", scenario, "--set", f"pools.{POOL}.gpu={Path(tmp) / 'badgpu.yaml'}")
        one_line_error(r, "badgpu.yaml", key, "pools[0]")


def test_a_folder_as_the_scenario_says_so(tmp_path, cli):
    one_line_error(cli("run", tmp_path), str(tmp_path), "is a folder")


def test_plan_without_an_slo_refuses_before_any_run(tmp_path, cli):
    data = {k: v for k, v in SCENARIO.items() if k != "slo"}
    path = write_yaml(tmp_path / "s.yaml", data)
    r = cli("plan", path, "--vary", f"pools.{POOL}.replicas=1..4", "-o", tmp_path / "plan")
    one_line_error(r, "s.yaml", "slo", "declares no SLO")
    assert not (tmp_path / "plan").exists()


def test_a_sweeps_missing_base_names_the_sweep_file(tmp_path, cli):
    sweep = write_yaml(tmp_path / "sw.yaml", {"base": "nosuch.yaml", "grid": {"seed": [1]}})
    one_line_error(cli("sweep", sweep), "sw.yaml: base", "nosuch.yaml")


@pytest.mark.parametrize("command", [["run"], ["check"], ["plan", "--vary", f"pools.{POOL}.replicas=1..2"],
                                     ["sweep"]])
def test_a_sweep_file_for_a_scenario_and_a_scenario_for_a_sweep_file_say_so(tmp_path, cli, command):
    """Each was refused key by key: 'name: Field required ... base: unknown key', five lines for one mistake."""
    scenario = write_yaml(tmp_path / "s.yaml", SCENARIO)
    sweep = write_yaml(tmp_path / "sw.yaml", {"base": "s.yaml", "grid": {"seed": [1, 2]}})
    if command == ["sweep"]:
        r, says = cli("sweep", scenario, "-o", tmp_path / "out"), "s.yaml: is a scenario, not a sweep file"
    else:
        out = [] if command == ["check"] else ["-o", tmp_path / "out"]
        r, says = cli(*command[:1], sweep, *command[1:], *out), "sw.yaml: is a sweep file"
    one_line_error(r, says)
    assert len(r.err.strip().splitlines()) == 1 and not (tmp_path / "out").exists(), r.err


def test_a_sweep_engine_that_does_not_exist_lists_the_two_that_do(tmp_path, cli):
    """Said as a regular expression: "String should match pattern '^(fast|reference)$'"."""
    write_yaml(tmp_path / "s.yaml", SCENARIO)
    sweep = write_yaml(tmp_path / "sw.yaml", {"base": "s.yaml", "grid": {"seed": [1]}, "engine": "fastest"})
    one_line_error(cli("sweep", sweep, "-o", tmp_path / "out"),
                   "sw.yaml: engine: Input should be 'fast' or 'reference' (got 'fastest') (did you mean fast?)")


@pytest.mark.parametrize("engine, says", [
    ({"backend": "vlm"}, "pools[0].engine.backend: unknown serving backend 'vlm'"),
    ({"backend": "{tmp}/nope.yaml"}, "pools[0].engine.backend: {tmp}/nope.yaml: file not found"),
    ({"kernels": "xx"}, "pools[0].engine.kernels: 'xx' names no serving stack"),
    ({"backend": "vllm", "backend_version": "0.25.0"},
     "pools[0].engine.kv_memory.cuda_graph_gib: this release takes its CUDA graphs' memory out of the KV pool")])
def test_a_check_that_reads_several_keys_names_its_key_in_the_key_path(tmp_path, engine, says):
    """A check across keys is located at the model that holds them; its key was written into the message
    (pools[0]: engine.backend 'vlm': ..., pools[0].engine: kernels: ...), a second form of key path beside
    every field's pools[0].engine.kv_dtype: ..."""
    engine = {k: v.replace("{tmp}", str(tmp_path)) for k, v in engine.items()}
    pool = {**SCENARIO["pools"][0], "engine": {**SCENARIO["pools"][0].get("engine", {}), **engine}}
    with pytest.raises(LlmsimError) as e:
        load_scenario(write_yaml(tmp_path / "s.yaml", {**SCENARIO, "pools": [pool]}))
    assert e.value.render().startswith(f"{tmp_path / 's.yaml'}: " + says.replace("{tmp}", str(tmp_path))), \
        e.value.render()


def test_a_missing_backend_file_is_named_beside_a_pool_the_gpu_refuses(tmp_path):
    """The pool's backend is read before its gpu's refusal would be: the refusal named the key only
    ('pools[0].engine.backend: file not found'), as the pool's GPU or model did not load, not which file."""
    pool = {**SCENARIO["pools"][0], "gpu": "h100-sxmm", "engine": {"backend": str(tmp_path / "nope.yaml")}}
    with pytest.raises(LlmsimError) as e:
        load_scenario(write_yaml(tmp_path / "s.yaml", {**SCENARIO, "pools": [pool]}))
    assert f"pools[0].engine.backend: {tmp_path / 'nope.yaml'}: file not found" in e.value.render(), \
        e.value.render()


@pytest.mark.parametrize("key, value, says", [
    (("newest_release",), "latest", "b.yaml: newest_release: 'latest' is not a release number"),
    (("releases", "0.14.0"), "soon", "b.yaml: releases.0.14.0: expected the day it came out as YYYY-MM-DD")])
def test_a_backend_profiles_check_across_keys_names_its_key_in_the_key_path(tmp_path, key, value, says):
    """b.yaml: (top level): releases.0.14.0: ..., the key written into the message of the profile's top level."""
    from simulator.profiles.backend import load_backend
    from simulator.profiles.loader import builtin_dir

    data = {**yaml.safe_load((builtin_dir("backend_profiles") / "vllm.yaml").read_text()), "name": "b"}
    node = data
    for part in key[:-1]:
        node = node.setdefault(part, {})
    node[key[-1]] = value
    with pytest.raises(LlmsimError) as e:
        load_backend(str(write_yaml(tmp_path / "b.yaml", data)))
    assert says in e.value.render() and "(top level)" not in e.value.render()


def _sglang_budget_below_its_batch(folder: Path) -> Path:
    """SGLang's profile, mixing its chunks with the decodes, with an H100 rule whose token budget (1,024) is
    below the profile's batch (2,048): each mapping loads on its own, the merge for an H100 pool is refused."""
    from simulator.profiles.loader import builtin_dir

    text = (builtin_dir("backend_profiles") / "sglang.yaml").read_text()
    assert "    set: {max_num_batched_tokens: 8192}\n" in text and "\n  mixed_prefill: false\n" in text
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sglang.yaml").write_text(text.replace("    set: {max_num_batched_tokens: 8192}\n",
                                                     "    set: {max_num_batched_tokens: 1024}\n")
                                        .replace("\n  mixed_prefill: false\n", "\n  mixed_prefill: true\n"))
    return folder / "sglang.yaml"


def test_a_backend_profiles_rules_refused_together_name_the_profile(tmp_path, cli):
    """Refused as the pool's engine, the merge named pools[0].engine and two keys the scenario never wrote."""
    broken = _sglang_budget_below_its_batch(tmp_path / "profiles")
    pool = {**SCENARIO["pools"][0], "gpu": "h100-sxm", "engine": {"backend": str(broken)}}
    sc = write_yaml(tmp_path / "s.yaml", {**SCENARIO, "pools": [pool]})
    one_line_error(cli("run", sc, "-o", tmp_path / "out"), f"{sc}: pools[0].engine.backend: {broken}: its defaults "
                   f"for {pool['model']} on h100-sxm are refused: max_num_batched_tokens (1024) must be ≥ max_num_seqs")
    one_line_error(cli("estimate", "step", "--gpu", "h100-sxm", "--model", "llama-3.2-1b", "--backend", broken,
                       "--decode-batch", "8"), f"--backend: {broken}: its defaults for llama-3.2-1b on h100-sxm")
    # the pool's own keys at fault are named as before: the profile is not blamed for them
    pool["engine"] = {"backend": "sglang", "max_num_seqs": 99_999, "mixed_prefill": True}
    one_line_error(cli("run", write_yaml(tmp_path / "own.yaml", {**SCENARIO, "pools": [pool]}), "-o", tmp_path / "o"),
                   "pools[0].engine: max_num_batched_tokens (8192) must be ≥ max_num_seqs (99999)")


def test_a_built_in_profile_at_fault_is_named_as_the_backend(tmp_path, monkeypatch):
    """A built-in profile is named by the name the scenario gives it, and its file."""
    from simulator.profiles import backend, loader

    broken, real = _sglang_budget_below_its_batch(tmp_path), loader.resolve
    fake = lambda kind, name: broken if (kind, name) == ("backend_profiles", "sglang") else real(kind, name)  # noqa: E731
    monkeypatch.setattr(loader, "resolve", fake)
    monkeypatch.setattr(backend, "resolve", fake)
    pool = {**SCENARIO["pools"][0], "gpu": "h100-sxm", "engine": {"backend": "sglang"}}
    with pytest.raises(LlmsimError) as e:
        load_scenario(write_yaml(tmp_path / "s.yaml", {**SCENARIO, "pools": [pool]}))
    assert f"pools[0].engine.backend: backend 'sglang' ({broken}): its defaults for " in e.value.render(), \
        e.value.render()


# --- (6) determinism --------------------------------------------------------------------------------------
@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**31))
def test_fuzz_results_json_is_byte_identical_for_a_seed(seed, cli):
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        path = write_yaml(d / "s.yaml", {**SCENARIO, "seed": seed})
        for k in (1, 2):
            assert cli("run", path, "-o", d / f"o{k}", "--no-plots", "--exit-zero").code == 0   # an overloaded seed exits 1
        assert (d / "o1" / "results.json").read_bytes() == (d / "o2" / "results.json").read_bytes()
        timing = json.loads((d / "o1" / "run.json").read_text())
        assert timing["wall_time_s"] > 0


# --- KV offload tiers a replica cannot have -----------------------------------------------------------------
@pytest.mark.parametrize("sets, fragments", [
    ([f"pools.{POOL}.engine.prefix_cache=false", f"pools.{POOL}.engine.kv_offload={{host_gb: 10}}"],
     ["pools[0].engine", "needs prefix_cache: true"]),
    ([f"pools.{POOL}.engine.prefix_cache_capacity_tokens=unbounded", f"pools.{POOL}.engine.kv_offload={{}}"],
     ["pools[0].engine", "bounded prefix cache"]),
    # a size of a cache that is off was accepted and read by nothing
    ([f"pools.{POOL}.engine.prefix_cache=false", f"pools.{POOL}.engine.prefix_cache_capacity_tokens=1000"],
     ["pools[0].engine", "prefix_cache: false turns off"]),
    ([f"pools.{POOL}.engine.kv_offload={{host_gb: 0}}"], ["no tier to offload to"]),
    ([f"pools.{POOL}.engine.kv_offload={{host: 10}}"], ["pools[0].engine.kv_offload.host"]),
    ([f"pools.{POOL}.engine.kv_offload={{host_gb: -1}}"], ["pools[0].engine.kv_offload.host_gb"]),
    ([f"pools.{POOL}.engine.kv_offload={{host_gb: 100000}}"],
     ["pools[0].engine.kv_offload.host_gb", "exceeds the 275 GB of host memory"]),
    ([f"pools.{POOL}.engine.kv_offload={{disk_gb: 1.0e6}}"], ["pools[0].engine.kv_offload.disk_gb", "exceeds"]),
    ([f"pools.{POOL}.gpu=l40s", f"pools.{POOL}.engine.kv_offload={{}}"],
     ["pools[0].engine.kv_offload.host_gb", "l40s states no host_memory_gb_per_gpu"]),
    ([f"pools.{POOL}.gpu=l40s", f"pools.{POOL}.engine.kv_offload={{host_gb: 1.0e6}}"],     # a petabyte, unchecked
     ["pools[0].engine.kv_offload.host_gb", "more than any server holds"]),
])
def test_kv_offload_that_cannot_be_modelled_is_one_line(tmp_path, cli, sets, fragments):
    _refused_with_sets(tmp_path, cli, sets, fragments)


def _refused_with_sets(tmp_path, cli, sets: list[str], fragments: list[str]) -> None:
    """The scenario with ``sets`` applied is one line naming s.yaml and ``fragments``, nothing written."""
    path = write_yaml(tmp_path / "s.yaml", SCENARIO)
    args = [a for s in sets for a in ("--set", s)]
    one_line_error(cli("run", path, *args, "-o", tmp_path / "out"), "s.yaml", *fragments)
    assert not (tmp_path / "out").exists()


# --- values the schema takes but llmsim cannot model ----------------------------------------------------------
@pytest.mark.parametrize("sets, fragments", [
    ([f"pools.{POOL}.autoscaling={{metric: kv_utilization, target: 5, max_replicas: 4}}"],
     ["pools[0].autoscaling", "kv_utilization is a fraction"]),
    (["slo={ttft_p99_ms: 0}"], ["slo.ttft_p99_ms", "a target of 0 fails every run"]),
    ([f"pools.{POOL}.speculative={{draft_model: mtp, k: 10000, acceptance_rate: 0.7}}"],
     ["pools[0].speculative.k"]),
    (["workload.system_prompt={apps: 2, tokens: {dist: fixed, value: 100}, dynamic: {at_token: 500}}"],
     ["workload.system_prompt.dynamic.at_token", "longest system prompt (100 tokens)"]),
])
def test_a_value_no_deployment_has_is_one_line(tmp_path, cli, sets, fragments):
    _refused_with_sets(tmp_path, cli, sets, fragments)


def _pools(*extra: dict) -> list[dict]:
    return [SCENARIO["pools"][0], *({**SCENARIO["pools"][0], **e} for e in extra)]


@pytest.mark.parametrize("pools, classes, fragments", [
    # a second pool no class routes to was built and billed for the window, serving nothing
    (_pools({"name": "spare"}), [{"name": "all", "pool": POOL}], ["pools[1]", "no class routes to pool 'spare'"]),
    # a class sent to a pair's decode pool left the prefill pool idle, billed
    (_pools({"name": "dec"}), [{"name": "all", "pool": "dec"}],
     ["pools[0]", f"no class routes to pool '{POOL}'", "billed and serve nothing"]),
])
def test_a_pool_no_request_reaches_is_refused(tmp_path, cli, pools, classes, fragments):
    if classes[0]["pool"] == "dec":
        pools = [{**pools[0], "disaggregation": {"decode_pool": "dec"}}, pools[1]]
    path = write_yaml(tmp_path / "s.yaml", {**SCENARIO, "pools": pools, "classes": classes})
    one_line_error(cli("run", path, "-o", tmp_path / "out"), "s.yaml", *fragments)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("command", [["run"], ["check"], ["plan", "--vary", f"pools.{POOL}.replicas=1..2"]])
def test_a_key_set_twice_on_the_command_line_is_refused(tmp_path, cli, command):
    """As a key written twice in a scenario file is: the last value silently winning hides a stale one."""
    path = write_yaml(tmp_path / "s.yaml", SCENARIO)
    r = cli(command[0], path, *command[1:], "--set", "seed=1", "--set", "seed=2")
    one_line_error(r, "--set", "seed is set twice")


@settings(max_examples=25, deadline=None)
@given(digits=st.integers(min_value=400, max_value=4000), text=st.text(min_size=70, max_size=3000))
def test_a_huge_refused_value_is_named_by_its_size_not_echoed_whole(tmp_path_factory, digits, text):
    """A 401-digit mean was echoed digit by digit into the one-line error."""
    folder = tmp_path_factory.mktemp("huge")
    for where, value in ((("workload", "input_tokens", "mean"), 10 ** digits),
                         (("workload", "arrival", "type"), text)):
        data = yaml.safe_load(yaml.safe_dump(SCENARIO))
        node = data
        for k in where[:-1]:
            node = node[k]
        node[where[-1]] = value
        path = write_yaml(folder / "s.yaml", data)
        with pytest.raises(LlmsimError) as e:
            load_scenario(path)
        line = str(e.value)
        assert ".".join(where) in line and len(line) < 400, line


@pytest.mark.parametrize("key", ["workload.num_requests", "slo.ttft_p99_ms", "pools.chat.replicas", "seed"])
@pytest.mark.parametrize("value", [10 ** 30, -(10 ** 401)])
def test_a_number_past_any_llmsim_takes_is_one_line_not_an_overflow(tmp_path, key, value):
    """10**401 requests overflowed a float inside the run-size check: a traceback."""
    path = write_yaml(tmp_path / "s.yaml", SCENARIO)
    with pytest.raises(LlmsimError) as e:
        load_scenario(path, [f"{key}={value}"])
    line = str(e.value)
    message = line.split(": ", 2)[-1]      # past the file (a temporary path) and the shortened --set
    assert "past any llmsim takes" in message and len(message) < 200 and "\n" not in line, line
    assert ("negative" in line) == (value < 0)


def test_a_whole_number_python_will_not_read_is_named_so(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(SCENARIO).replace("num_requests: 40", "num_requests: " + "9" * 5000))
    with pytest.raises(LlmsimError, match="more than 4,300 digits, past any llmsim takes") as e:
        load_scenario(path)
    assert "set_int_max_str_digits" not in str(e.value)


@given(st.text(min_size=0, max_size=400))
def test_a_shortened_value_is_never_longer_than_the_value(text):
    from simulator.errors import shortened

    out = shortened(text)
    assert len(out) <= len(text) and (out == text or "characters)…" in out)


# --- a slip a new user makes: the message says what was meant -------------------------------------------------
def _edited(where: tuple, value) -> dict:
    data = yaml.safe_load(yaml.safe_dump(SCENARIO))
    node = data
    for k in where[:-1]:
        node = node[k]
    node[where[-1]] = value
    return data


@pytest.mark.parametrize("where, value, says", [
    # a misspelt name or key: pydantic's words listed the choices (or none) and left the user to spot the one meant
    (("pools", 0, "model"), "llama-3-8bb", "pools[0].model: unknown model 'llama-3-8bb' (did you mean llama-3-8b?)"),
    (("pools", 0, "gpu"), "h100", "unknown GPU 'h100' (did you mean h100-pcie or h100-sxm?)"),   # not h200
    (("pools", 0, "engine"), {"backend": "vlm"}, "unknown serving backend 'vlm' (did you mean vllm?)"),
    (("pools", 0, "router"), "round_robbin", "(got 'round_robbin') (did you mean round_robin?)"),
    (("workload", "arrival", "type"), "poison", "(did you mean poisson?)"),
    (("workload", "input_tokens", "dist"), "lognormall",
     "workload.input_tokens: unknown dist 'lognormall' (valid: fixed, uniform, normal, lognormal, empirical, "
     "sharegpt) (did you mean lognormal?)"),
    (("pools", 0, "engine"), {"kv_dtype": "fp4"}, "(got 'fp4') (did you mean fp8?)"),
    (("pools", 0, "replica"), 2, "pools[0].replica: unknown key (did you mean replicas? see `llmsim schema`)"),
    (("workload", "input_tokens", "maen"), 100, "workload.input_tokens.maen: unknown key (did you mean mean?"),
    (("workload", "arrival", "rate_per_sec"), 1, "workload.arrival.rate_per_sec: unknown key (did you mean rate_per_s?"),
    # `{host_gb:100}`: YAML reads one key 'host_gb:100' (no space after the colon), answered as a misspelt key
    (("pools", 0, "engine"), {"kv_offload": {"host_gb:100": None}},
     "pools[0].engine.kv_offload.host_gb:100: unknown key: YAML needs a space after the colon (host_gb: 100, not "
     "host_gb:100)"),
    # a unit or a percent sign after a number: pydantic said only "unable to parse string as a number"
    (("workload", "num_requests"), "40 requests", "expected a whole number, got the text '40 requests': write the "
                                                  "number alone (40)"),
    (("workload", "arrival", "rate_per_s"), "60/s", "write the number alone, as a rate per second (the key's name, "
                                                    "rate_per_s, gives its unit): 60"),
    # a unit other than the key's: the number alone would be read in the key's unit (30 a second for 30 a minute)
    (("workload", "arrival", "rate_per_s"), "30/min", "as a rate per second (the key's name, rate_per_s, gives its "
                                                      "unit): 0.5"),
    (("workload", "duration_s"), "2 min", "write the number alone, in seconds (the key's name, duration_s, gives its "
                                          "unit): 120"),
    (("workload", "duration_s"), "60 furlongs", "got the text '60 furlongs': write the number alone, in seconds (the "
                                                "key's name, duration_s, gives its unit)"),
    (("slo", "ttft_p99_ms"), "2s", "slo.ttft_p99_ms: expected a number of milliseconds, got the text '2s': write the "
                                   "number alone, in milliseconds (the key's name, ttft_p99_ms, gives its unit): 2000"),
    # commas: a number's thousands, or several values; "write the number alone (1)" took the first digits
    (("workload", "num_requests"), "1,000", "got the text '1,000': write the number without its thousands "
                                            "separators (1000)"),
    (("pools", 0, "replicas"), "2,4", "got the text '2,4': one value goes here; several are tried by `llmsim plan "
                                      "--vary key=a,b` or a sweep's grid"),
    # a price with its currency's sign: pydantic said "unable to parse string as a number"
    (("pools", 0, "usd_per_gpu_hour"), "$6", "got the text '$6': write the number alone, in US dollars (the key's "
                                             "name, usd_per_gpu_hour, gives its unit): 6"),
    (("pools", 0, "usd_per_gpu_hour"), "€6", "got the text '€6': write the number alone, in US dollars (the key's "
                                             "name, usd_per_gpu_hour, gives its unit)"),
    (("pools", 0, "engine"), {"gpu_memory_utilization": "90%"}, "a percentage is written as a fraction (0.9 for 90%)"),
    (("pools", 0, "engine"), {"gpu_memory_utilization": 90}, "less than or equal to 1, a fraction: 0.9 for 90% "
                                                             "(got 90)"),
    # a number where a length or duration distribution goes: pydantic said "a valid dictionary or object to
    # extract fields from"
    (("workload", "output_tokens"), 2000, "workload.output_tokens: expected a distribution, a mapping with a `dist` "
                                          "key; a value that never varies is {dist: fixed, value: 2000}"),
    (("workload",), {**SCENARIO["workload"], "num_requests": None, "num_sessions": 4,
                     "session": {"type": "chat", "turns": 3, "think_time_s": {"dist": "fixed", "value": 1.0}}},
     "workload.session.turns: expected a distribution, a mapping with a `dist` key; a value that never varies is "
     "{dist: fixed, value: 3}"),
    (("workload",), {**SCENARIO["workload"], "num_requests": None, "num_sessions": 4,
                     "session": [{"type": "chat"}]}, "workload.session: expected a mapping of keys to values"),
    # a Python class name where a mapping goes
    (("pools", 0, "engine"), "vllm", "pools[0].engine: expected a mapping of keys to values"),
    # `model:` or `engine:` with nothing after it: "Input should be a valid string (got None)"
    (("pools", 0, "model"), None, "pools[0].model: has no value (left empty, or null): expected a text"),
    (("pools", 0, "engine"), None, "pools[0].engine: has no value (left empty, or null): expected a mapping"),
    # a list where a number goes: "network.ingress_ms.number: Input should be a valid number", a union member's tag
    # in the key path
    (("classes",), [{"name": "all", "network": {"ingress_ms": [1]}}],
     "classes[0].network.ingress_ms: expected a number, got a list"),
    (("pools", 0, "replicas"), {"n": 2}, "pools[0].replicas: expected a whole number, got a mapping"),
    # "List should have at least 1 item after validation, not 0"
    (("workload", "input_tokens"), {"dist": "empirical", "values": []},
     "workload.input_tokens.values: expected at least 1 item, got 0"),
])
def test_a_slip_is_answered_with_what_was_meant(tmp_path, cli, where, value, says):
    path = write_yaml(tmp_path / "s.yaml", _edited(where, value))
    r = cli("run", path, "-o", tmp_path / "out")
    one_line_error(r, "s.yaml", says)
    line = r.err.strip()
    assert "\n" not in line and not (tmp_path / "out").exists(), line
    assert "instance of" not in line and "Input tag" not in line and "unable to parse" not in line, line


def test_every_key_the_distribution_hint_names_holds_a_distribution():
    """The hint `{dist: fixed, value: N}` is given by the key's name; every scenario key of that name that
    holds a mapping holds a length or duration distribution, so the hint is never a wrong one."""
    import typing

    from pydantic import BaseModel

    from simulator.errors import _DISTRIBUTION_KEY
    from simulator.scenario.schema import Scenario
    from workloads.durations import FixedDuration
    from workloads.lengths import FixedLength

    def models(annotation) -> list:
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            return [annotation]
        return [m for a in typing.get_args(annotation) for m in models(a)]

    seen, named = set(), {}
    todo = [Scenario]
    while todo:
        model = todo.pop()
        if model in seen:
            continue
        seen.add(model)
        for name, field in model.model_fields.items():
            inner = models(field.annotation)
            if inner and _DISTRIBUTION_KEY.search(field.alias or name):
                named[field.alias or name] = inner
            todo += inner
    assert {"output_tokens", "turns", "pause_s", "tool_result_tokens"} <= set(named)
    for key, inner in named.items():
        assert FixedLength in inner or FixedDuration in inner, (key, inner)


def test_a_required_key_written_without_its_space_is_not_also_missing(tmp_path, cli):
    """`{draft_model:mtp, k:2, ...}` is three keys YAML reads whole: each is named as the slip it is, and
    draft_model, k and acceptance_rate are not listed again as required and missing."""
    path = write_yaml(tmp_path / "s.yaml", _edited(("pools", 0, "speculative"),
                                                   {"draft_model:mtp": None, "k:2": None, "acceptance_rate:0.7": None}))
    r = cli("run", path, "-o", tmp_path / "out")
    assert r.code == 2 and "Field required" not in r.err and "missing" not in r.err, r.err
    assert r.err.count("YAML needs a space after the colon") == 3, r.err


@pytest.mark.parametrize("typo, meant", [("num_hidden_layer", "num_hidden_layers"),
                                         ("num_attention_head", "num_attention_heads")])
def test_a_misspelt_key_of_a_config_json_names_the_key_meant(tmp_path, typo, meant):
    """Refused as "unknown key 'num_hidden_layer' may change the architecture", the slip unnamed."""
    from simulator.profiles.model import load_model

    config = {"model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336, "num_attention_heads": 32,
              "num_key_value_heads": 8, "num_hidden_layers": 32, "vocab_size": 32000, typo: 32}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    with pytest.raises(LlmsimError) as e:
        load_model(str(path))
    assert f"unknown key {typo!r} (did you mean {meant}?) may change the architecture" in e.value.render()


@pytest.mark.parametrize("key, value, says", [
    ("num_key_value_heads", 5, "num_key_value_heads: 5 does not divide num_attention_heads 32"),
    ("num_experts_per_tok", 10, "num_experts_per_tok: 10 exceeds the 8 experts"),
])
def test_a_model_shape_that_does_not_hold_together_names_its_key(tmp_path, key, value, says):
    """Said of the model's top level ('(top level): num_attention_heads must be a multiple of
    num_key_value_heads'), without the numbers."""
    from simulator.profiles.model import load_model

    config = {"model_type": "mixtral", "hidden_size": 4096, "intermediate_size": 14336, "num_attention_heads": 32,
              "num_key_value_heads": 8, "num_hidden_layers": 32, "vocab_size": 32000,
              "max_position_embeddings": 32768, "num_local_experts": 8, "num_experts_per_tok": 2, key: value}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    with pytest.raises(LlmsimError) as e:
        load_model(str(path))
    assert says in e.value.render() and "(top level)" not in e.value.render()


@pytest.mark.parametrize("flag, value, says", [
    # read as the text '{backend: vllm' and refused as no mapping, the missing brace unnamed
    ("--set", f"pools.{POOL}.engine={{backend: vllm", "not a YAML mapping or list (expected ',' or '}'"),
    ("--set", f"pools.{POOL}.lora=[1, 2", "not a YAML mapping or list (expected ',' or ']'"),
    ("--vary", f"pools.{POOL}.engine={{backend: vllm", "--vary value '{backend: vllm': not a YAML mapping"),
    # a percentage where a fraction below 1 goes
    ("--set", f"pools.{POOL}.speculative={{draft_model: mtp, k: 3, acceptance_rate: 70}}",
     "acceptance_rate: Input should be less than 1, a fraction: 0.7 for 70% (got 70)"),
])
def test_a_flag_value_that_is_not_what_was_meant_says_so(tmp_path, cli, flag, value, says):
    path = write_yaml(tmp_path / "s.yaml", SCENARIO)
    if flag == "--vary":
        r = cli("plan", path, "--vary", value, "--vary", f"pools.{POOL}.replicas=1..2", "-o", tmp_path / "out")
    else:
        r = cli("run", path, flag, value, "-o", tmp_path / "out")
    one_line_error(r, says)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("value, name", [("[exp] base", "[exp] base"), ("{draft} run 2", "{draft} run 2"),
                                         ("'[exp]'", "[exp]")])
def test_a_flag_text_that_opens_with_a_bracket_is_the_text(tmp_path, value, name):
    """A closed bracket with words after it is a text, as it was before unclosed ones were refused:
    `--set 'name=[exp] base'` was refused as "not a YAML mapping or list (expected '<document start>',
    but found '<scalar>')", a name llmsim took before; a bracket a slip leaves stays refused."""
    path = write_yaml(tmp_path / "s.yaml", SCENARIO)
    assert load_scenario(path, [f"name={value}"])[0].name == name
    for slip in ("[1, 2] [3]", "{a: 1}}", "[exp base"):
        with pytest.raises(LlmsimError, match="not a YAML mapping or list"):
            load_scenario(path, [f"name={slip}"])


@pytest.mark.parametrize("args, says", [
    # a file of another kind was refused key by key: a dozen "unknown key" lines (and a required key missing)
    (["estimate", "request", "--gpu", "h100-sxm", "--model", "{repo}/hardware_profiles/h100-sxm.yaml"],
     "h100-sxm.yaml: is a GPU profile, not a model profile: a pool's gpu or --gpu takes it"),
    (["estimate", "request", "--gpu", "{repo}/model_profiles/llama-3-8b.yaml", "--model", "llama-3-8b"],
     "llama-3-8b.yaml: is a model profile, not a GPU profile: a pool's model or --model takes it"),
    (["estimate", "request", "--gpu", "h100-sxm", "--model", "llama-3-8b", "--backend",
      "{repo}/hardware_profiles/h100-sxm.yaml"], "is a GPU profile, not a serving backend profile"),
    (["run", "{repo}/model_profiles/llama-3-8b.yaml"], "is a model profile, not a scenario"),
    (["estimate", "request", "--gpu", "h100-sxm", "--model", "{scenario}"], "s.yaml: is a scenario, not a model"),
    # a name of another kind: "unknown GPU 'llama-3-8b'; valid names: ..."
    (["run", "{scenario}", "--set", f"pools.{POOL}.gpu=llama-3-8b"],
     "pools[0].gpu: 'llama-3-8b' is a model profile, not a GPU profile: a pool's model or --model takes it"),
    (["run", "{scenario}", "--set", f"pools.{POOL}.model=vllm"],
     "pools[0].model: 'vllm' is a serving backend profile, not a model profile"),
])
def test_a_file_or_name_of_another_kind_says_what_it_is(tmp_path, cli, repo_root, args, says):
    scenario = write_yaml(tmp_path / "s.yaml", SCENARIO)
    args = [a.format(repo=repo_root, scenario=scenario) for a in args]
    if args[0] == "run":
        args += ["-o", str(tmp_path / "out")]
    r = cli(*args, "--input", "100", "--output", "10") if args[0] == "estimate" else cli(*args)
    one_line_error(r, says)
    assert len(r.err.strip().splitlines()) == 1 and not (tmp_path / "out").exists(), r.err


def test_a_misspelt_file_name_is_answered_with_the_file_beside_it(tmp_path, cli):
    """'s.yml: file not found' with s.yaml one letter away; scenarios/chatbt.yaml, which the shipped
    chatbot.yaml answers from any folder."""
    write_yaml(tmp_path / "s.yaml", SCENARIO)
    one_line_error(cli("run", tmp_path / "s.yml", "-o", tmp_path / "out"),
                   f"s.yml: file not found (did you mean {tmp_path / 's.yaml'}?)")
    one_line_error(cli("run", "scenarios/chatbt.yaml", "-o", tmp_path / "out"),
                   "file not found (did you mean scenarios/chatbot.yaml?)")
    r = cli("run", tmp_path / "zzzz.yaml", "-o", tmp_path / "out")
    one_line_error(r, "zzzz.yaml: file not found")
    assert "did you mean" not in r.err
    assert not (tmp_path / "out").exists()


def test_a_misspelt_trace_path_is_answered_with_the_trace_beside_it(tmp_path, cli):
    (tmp_path / "tr").mkdir()
    (tmp_path / "tr" / "day.csv").write_text("timestamp,input_tokens,output_tokens\n0,100,10\n1,200,20\n")
    data = {**SCENARIO, "workload": {"arrival": {"type": "trace", "path": "tr/day.cvs"}}}
    one_line_error(cli("run", write_yaml(tmp_path / "s.yaml", data), "-o", tmp_path / "out"),
                   "workload.arrival.path: tr/day.cvs: file not found (did you mean tr/day.csv?) (read as ")
    assert not (tmp_path / "out").exists()


def test_a_token_budget_whose_activations_outgrow_the_gpu_names_the_budget(cli):
    """A slip of the budget (a hundred million tokens) is the budget's fault, not the fleet's: the refusal says
    so beside its usual advice to add GPUs."""
    r = cli("estimate", "request", "--gpu", "h100-sxm", "--model", "llama-3.1-8b", "--input", "100", "--output", "10",
            "--backend", "vllm", "--max-num-batched-tokens", "100000000")
    said = " ".join(r.err.split())
    assert r.code == 2 and "100,000,000-token budget's activations alone take" in said, r.err
    ok = cli("estimate", "request", "--gpu", "h100-sxm", "--model", "llama-3.1-70b", "--input", "100",
             "--output", "10", "--backend", "vllm")
    assert ok.code == 2 and "budget's activations" not in " ".join(ok.err.split()), ok.err
