"""One check of a serving stack's version, for every place a user names one.

``engine.backend_version`` in a scenario, ``llmsim estimate --backend-version``
and ``llmsim validate --backend-version`` take the same spellings (a release
as the stacks tag it, PEP 440 with an optional ``v``, or a nightly tag
carrying its build day) and refuse the same ones in one line naming the key
or the flag: a version one of them read by its leading digits, or dropped,
would price a release the user did not name.
"""
from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers_whatif import write_scenario
from simulator.profiles.backend import (BackendProfile, VersionRule, backend_names, check_backend_version, load_backend,
                                       version_number)

# Spellings the shared data's version columns and the stacks' own tags use.
REAL = ["0.19.0", "0.5.10.post1", "1.2.0rc6.post3", "1.0.0rc3", "0.5.5.post2", "1.1.0-dev.2", "v0.19.0",
        "v0.5.6.post2", "0.11.1rc2.dev123+gabc1234", "nightly-dev-20260216-d3bae71e", "nightly-20260301", "0.19"]
# Not a release: a word, junk after a number, an epoch, a lone major number, a nightly without a (real) day,
# a note beside the number (a CSV row may carry one; a user's flag may not).
BAD = ["banana", "", " ", "0.19junk", "0.14banana", "0.11xyz", "latest", "1", "1!0.19.0", "nightly-dev",
       "nightly-5b8c30d62b754b57", "nightly-20261399", "0.6.0 (--num-scheduler-steps 10)", "0.19.0-cu130",
       "dev-20260216"]

BENCH = {"completed": 16, "total_input_tokens": 16 * 512, "total_output_tokens": 16 * 32, "max_concurrency": 4,
         "request_rate": "inf", "mean_ttft_ms": 20.0, "mean_tpot_ms": 3.0}


def _one_line(r, *fragments: str) -> None:
    assert r.code == 2, (r.code, r.out, r.err)
    assert "Traceback" not in r.err and len(r.err.strip().splitlines()) == 1, r.err
    for f in fragments:
        assert f in r.err, (f, r.err)


@pytest.mark.parametrize("version", REAL)
def test_the_spellings_stacks_use_are_taken(version):
    assert check_backend_version(version) == version


@pytest.mark.parametrize("version", BAD)
def test_anything_else_is_refused_with_an_example(version):
    with pytest.raises(ValueError, match=r"names no release: expected .*0\.19\.0.*nightly-dev-20260216"):
        check_backend_version(version)


@pytest.mark.parametrize("stack", backend_names())
def test_every_release_a_rule_starts_or_ends_at_is_dated(stack):
    """A nightly is placed against a rule by the days of its bounds: an undated until held every nightly
    after its since inside (an SGLang nightly of 2026-06 ran 0.5.1's DeepSeek attention kernel on B200),
    and an undated since held none."""
    prof = load_backend(stack)
    bounds = {b for r in prof.by_version for b in (r.since, r.until) if b}
    bounds |= {b for b in (prof.newest_release, prof.oldest_release, prof.default_release) if b}
    assert sorted(b for b in bounds if b not in prof.releases) == []


def test_a_nightly_after_a_rules_end_runs_without_it():
    prof = load_backend("sglang")
    late = prof.version_keys("nightly-dev-20260601-d3bae71e")
    early = prof.version_keys("nightly-dev-20250901-d3bae71e")
    assert late is not None and early is not None
    kernel = [k for k in early.get("attention_kernels", ()) if k.kernel == "flashinfer"]
    assert kernel and kernel[0] not in late.get("attention_kernels", ())


@pytest.mark.parametrize("stack", backend_names())
def test_every_release_a_profile_dates_is_a_version_the_check_takes(stack):
    """A profile's ``releases`` are what its stack tagged; a user naming one must get its defaults."""
    for release in load_backend(stack).releases:
        check_backend_version(release)


@given(st.tuples(st.integers(0, 30), st.integers(0, 30), st.integers(0, 30)),
       st.sampled_from(["", "rc1", "rc6.post3", ".post2", ".dev123+gabc1234", "a1", "b2"]),
       st.booleans(), st.sampled_from(["backend", "junk", "xyz", "banana", "-cu130", "!"]))
@settings(deadline=None)    # each example reads every backend profile: slow on a loaded machine, not wrong
def test_a_release_counts_as_its_number_and_junk_after_it_is_refused(release, suffix, v, junk):
    """Whatever follows the release number, it is PEP 440's or refused: never read by the leading digits."""
    number = ("v" if v else "") + ".".join(map(str, release))
    text = number + suffix
    assert check_backend_version(text) == text
    assert version_number(text) == release
    for stack in backend_names():     # a taken version is always placed: never kept as the profile's own
        assert load_backend(stack).version_keys(text) is not None
    for bad in (number + junk + suffix, text + " " + junk):
        with pytest.raises(ValueError):
            check_backend_version(bad)


# --- the three places a user names a version ------------------------------------------------------


@pytest.mark.parametrize("version", ["banana", "", "0.19junk", "0.14banana"])
def test_validates_flag_refuses_what_the_scenario_refuses(tmp_path, cli, version):
    bench = tmp_path / "run.json"
    bench.write_text(json.dumps(BENCH))
    r = cli("validate", bench, "--backend", "vllm", "--model", "llama-3.2-1b", "--gpu", "h100-sxm", "--workers", "1",
            "--backend-version", version)
    _one_line(r, "--backend-version: ", f"{version!r} names no release", "such as 0.19.0")


@pytest.mark.parametrize("version", ["banana", "0.14banana", ""])
def test_estimates_flag_refuses_junk_after_the_number(cli, version):
    r = cli("estimate", "step", "--gpu", "h100-sxm", "--model", "llama-3.2-1b", "--backend", "vllm",
            "--backend-version", version, "--decode-batch", "8")
    _one_line(r, "--backend-version: ", f"{version!r} names no release")


@pytest.mark.parametrize("written, version", [("0.11xyz", "0.11xyz"), ("banana", "banana"), ("''", "")])
def test_a_scenarios_backend_version_is_refused_under_its_key(tmp_path, cli, written, version):
    sc = write_scenario(tmp_path)
    r = cli("run", sc, "-o", tmp_path / "out", "--set", "pools.main.engine.backend=vllm",
            "--set", f"pools.main.engine.backend_version={written}")
    _one_line(r, str(sc), f"pools[0].engine.backend_version: {version!r} names no release")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("stack, newer", [("vllm", "9.9"), ("sglang", "0.9.9")])
def test_a_scenarios_release_past_the_profile_is_refused_under_its_key(tmp_path, cli, stack, newer):
    sc = write_scenario(tmp_path)
    r = cli("run", sc, "-o", tmp_path / "out", "--set", f"pools.main.engine.backend={stack}",
            "--set", f"pools.main.engine.backend_version='{newer}'")
    _one_line(r, str(sc), f"pools[0].engine.backend_version: '{newer}' is newer than the {stack} releases",
              "leave backend_version out")


@pytest.mark.parametrize("stack, older, oldest", [("vllm", "0.5.9", "0.10.0"), ("vllm", "0.9.2", "0.10.0"),
                                                   ("sglang", "0.3.6", "0.4.0"), ("trtllm", "0.21.0", "1.0.0")])
def test_a_scenarios_release_before_the_profile_is_refused_under_its_key(tmp_path, cli, stack, older, oldest):
    """A release before the oldest the profile describes ran defaults its rules do not know (vLLM's V0
    engine before 0.10, TensorRT-LLM's TensorRT engines before 1.0's PyTorch backend; an SGLang
    backend_version left over on a pool switched to vLLM): it was run on the oldest rules, as another
    stack than the one named. The release the profile starts from still runs."""
    sc = write_scenario(tmp_path)
    r = cli("run", sc, "-o", tmp_path / "out", "--set", f"pools.main.engine.backend={stack}",
            "--set", f"pools.main.engine.backend_version='{older}'")
    _one_line(r, str(sc), f"pools[0].engine.backend_version: '{older}' is older than the {stack} releases",
              f"from {oldest}")
    assert not (tmp_path / "out").exists()
    r = cli("estimate", "request", "--gpu", "h100-sxm", "--model", "llama-3.2-1b", "--input", "100", "--output",
            "10", "--backend", stack, "--backend-version", older)
    assert r.code == 2 and "is older than" in r.err and "Traceback" not in r.err
    assert load_backend(stack).older_than_described(oldest) is False


def test_a_release_on_a_profile_file_that_describes_none_is_refused(tmp_path, cli):
    """The how-to's own stack file names no release: backend_version 0.5.0 ran its keys, and results.json said
    backend_release 0.5.0. Once the file states the release its keys were read from, that release runs and a
    later one is refused as on a built-in profile."""
    import yaml

    stack = {"name": "my-stack", "stack": "vllm", "versions": "2.3", "lora_modelled": True, "ep_spans_replica": True,
             "engine": {**load_backend("vllm").engine, "max_num_batched_tokens": 8192, "max_num_seqs": 1024},
             "overheads": {**load_backend("vllm").overheads.model_dump(), "iteration_overhead_ms": 2.0}}
    (tmp_path / "my-stack.yaml").write_text(yaml.safe_dump(stack))
    sc = write_scenario(tmp_path)
    at = ["--set", f"pools.main.engine.backend={tmp_path / 'my-stack.yaml'}"]
    r = cli("run", sc, "-o", tmp_path / "out", *at, "--set", "pools.main.engine.backend_version='0.5.0'")
    _one_line(r, str(sc), "pools[0].engine.backend_version: '0.5.0' names a release, and the backend profile",
              "describes none", "leave backend_version out")
    assert not (tmp_path / "out").exists()
    r = cli("estimate", "request", "--gpu", "h100-sxm", "--model", "llama-3.2-1b", "--input", "100", "--output",
            "10", "--backend", str(tmp_path / "my-stack.yaml"), "--backend-version", "0.5.0")
    assert r.code == 2 and "describes none" in r.err and "Traceback" not in r.err
    (tmp_path / "my-stack.yaml").write_text(yaml.safe_dump({**stack, "newest_release": "2.3"}))
    r = cli("run", sc, "-o", tmp_path / "out", *at)      # undated, no nightly could be placed against it
    _one_line(r, "my-stack.yaml", "newest_release: release 2.3 has no day in releases",
              "give the release's upload day, e.g. releases:")
    (tmp_path / "my-stack.yaml").write_text(yaml.safe_dump({**stack, "newest_release": "2.3",
                                                            "releases": {"2.3": "2026-01-30"}}))
    assert load_backend(str(tmp_path / "my-stack.yaml")).describes_releases
    r = cli("run", sc, "-o", tmp_path / "out", *at, "--set", "pools.main.engine.backend_version='2.4'")
    _one_line(r, "'2.4' is newer than the my-stack releases")
    assert load_backend("vllm").describes_releases


@pytest.mark.parametrize("stack, version, older", [
    ("trtllm", "1.0.0rc3", True), ("trtllm", "1.0.0.dev5", True), ("trtllm", "1.0.0", False),
    ("trtllm", "1.0.0.post1", False), ("trtllm", "1.1.0rc2", False), ("sglang", "0.4.0rc1", True),
    ("sglang", "0.4.0", False), ("vllm", "0.10.0rc2", True), ("vllm", "0.10.0", False),
    ("sglang", "nightly-dev-20260216-d3bae71e", False)])
def test_a_candidate_of_the_oldest_release_came_before_it(stack, version, older):
    """The oldest release a profile was read from is that build, and its candidates came out before it
    (PEP 440): TensorRT-LLM 1.0.0rc3 ran defaults the rules read in 1.0.0 may not hold, so a scenario
    naming it is refused as a release before it is, not run as 1.0.0. A nightly still goes by its day."""
    assert load_backend(stack).older_than_described(version) is older


def test_a_replay_runs_a_candidate_of_the_oldest_release_as_that_release(cli):
    """479 held-out rows name TensorRT-LLM 1.0.0rc3 (its only Hopper rows, and the dense rows the
    first-token terms are fitted on): a replay runs them with 1.0.0's keys, as
    docs/accuracy-holdout.md says, while a scenario naming 1.0.0rc3 is refused and an older line
    stays left out."""
    from simulator.validation.deployment import release_unread

    assert release_unread("trtllm", "1.0.0rc3") == ""
    assert "is older than the trtllm releases" in release_unread("trtllm", "0.21.0")
    r = cli("estimate", "request", "--gpu", "h100-sxm", "--model", "llama-3.2-1b", "--input", "100", "--output",
            "10", "--backend", "trtllm", "--backend-version", "1.0.0rc3")
    assert r.code == 2 and "1.0.0rc3" in r.err and "Traceback" not in r.err


def test_a_version_without_its_backend_is_refused_for_its_spelling_first(tmp_path, cli):
    """Told to add a backend, the user would come back to be told the version is no release."""
    sc = write_scenario(tmp_path)
    r = cli("run", sc, "-o", tmp_path / "out", "--set", "pools.main.engine.backend_version=latest")
    _one_line(r, "pools[0].engine.backend_version: 'latest' names no release")


def test_each_place_reads_a_v_prefix_as_the_release(tmp_path, cli):
    """``v0.13.0`` is 0.13.0 everywhere: one of the spellings the check takes, so the same release."""
    from simulator.scenario.schema import PoolSpec

    engines = [PoolSpec(model="llama-3.2-1b", gpu="h100-sxm", engine={"backend": "vllm", "backend_version": v}).engine
               for v in ("0.13.0", "v0.13.0", "0.19.0")]
    assert engines[0] == engines[1].model_copy(update={"backend_version": "0.13.0"}) != engines[2]
    out = [cli("estimate", "step", "--gpu", "h100-sxm", "--model", "llama-3.2-1b", "--backend", "vllm",
               "--backend-version", v, "--decode-batch", "8", "--json").json() for v in ("0.13.0", "v0.13.0")]
    assert out[0] == out[1]


# --- validate: the version's name and its inputs ------------------------------------------------


def test_validate_refuses_the_version_given_twice_under_its_two_names(tmp_path, cli):
    bench = tmp_path / "run.json"
    bench.write_text(json.dumps(BENCH))
    r = cli("validate", bench, "--backend", "vllm", "--model", "llama-3.2-1b", "--gpu", "h100-sxm", "--workers", "1",
            "--stack-version", "0.19.0", "--backend-version", "0.11.0")
    _one_line(r, "--backend-version and --stack-version", "'0.11.0' and '0.19.0'", "give one")


@pytest.mark.parametrize("flag", ["--backend-version", "--stack-version"])
def test_validate_refuses_a_version_a_csvs_rows_would_drop(tmp_path, cli, flag):
    """A CSV's rows name their own versions, which the replay takes: the flag would be dropped for them."""
    csv = tmp_path / "rows.csv"
    csv.write_text("row_id,engine,engine_version,model,gpu,tp,isl_mean,osl_mean,concurrency,ttft_mean_ms\n"
                   "r1,vllm,0.11.2,meta-llama/Llama-3.2-1B,H100-SXM5-80GB,1,512,64,4,20.0\n")
    _one_line(cli("validate", csv, flag, "0.19.0", "--workers", "1"), f"{flag}: applies to `vllm bench serve` JSON",
              "engine_version or backend_version column", f"drop {flag}")
    bench = tmp_path / "run.json"
    bench.write_text(json.dumps(BENCH))
    _one_line(cli("validate", csv, bench, "--backend", "vllm", "--model", "llama-3.2-1b", "--gpu", "h100-sxm",
                  flag, "0.19.0", "--workers", "1"), "replay the JSON results apart from")


@pytest.mark.parametrize("stack, version, said", [("sglang", "0.9.9", "newer than the sglang releases llmsim has "
                                                                     "read (to 0.5.23)"),
                                                  ("vllm", "9.9", "newer than the vllm releases llmsim has read (to "
                                                                  "0.34.0)"),
                                                  ("vllm", "0.5.9", "older than the vllm releases llmsim has read "
                                                                    "(from 0.10.0)"),
                                                  ("sglang", "0.3.0", "older than the sglang releases llmsim has read "
                                                                      "(from 0.4.0)")])
def test_validate_refuses_a_release_outside_the_profile_as_a_scenario_does(tmp_path, cli, stack, version, said):
    """A release the profile was not read from has unknown defaults: a scenario naming it is refused, and a
    replay of it would run the newest (or the oldest) release's defaults and report their error as llmsim's."""
    bench = tmp_path / "run.json"
    bench.write_text(json.dumps(BENCH))
    r = cli("validate", bench, "--backend", stack, "--model", "llama-3.2-1b", "--gpu", "h100-sxm", "--workers", "1",
            "--backend-version", version)
    _one_line(r, "no row can be replayed", f"{stack} {version} is {said}")


def test_a_dynamo_runtime_tag_names_no_stack_release():
    """AIConfigurator's silicon rows served by Dynamo's runtime containers give either the stack's release inside
    the container or the container's own tag: the tag is Dynamo's release (0.5.1 is no SGLang 0.5.1, 0.8.1 no
    TensorRT-LLM release older than 1.0), so such a row names none and its measurement day decides."""
    from simulator.validation.deployment import stack_release

    dynamo = "db-dump/2026-04-27; measured=2026-02-05; nvcr.io/nvidia/ai-dynamo/tensorrtllm-runtime:{}"
    assert stack_release(dynamo.format("0.8.1.post2"), "0.8.1.post2") == ""
    assert stack_release(dynamo.format("0.8.1"), "1.3.0rc5") == "1.3.0rc5"
    assert stack_release("model=x; image=nvcr.io/nvidia/ai-dynamo/sglang-runtime:0.5.1-rc0.pre1",
                         "0.5.1-rc0.pre1") == ""
    assert stack_release("image=lmsysorg/sglang:v0.5.9-cu130", "0.5.9") == "0.5.9"
    assert stack_release("", "0.19.0") == "0.19.0"


ROWS = "row_id,engine,engine_version,model,gpu,tp,isl_mean,osl_mean,concurrency,ttft_mean_ms\n"


def _row(rid: str, stack: str, version: str) -> str:
    return f"{rid},{stack},{version},meta-llama/Llama-3.2-1B,H100-SXM5-80GB,1,512,64,4,20.0\n"


def test_a_row_whose_launch_llmsim_cannot_build_is_left_out_naming_the_flag(tmp_path, cli):
    """vLLM 0.20.0 and later size the KV pool after a CUDA-graph figure no measurement records: such a row
    is refused as a layout that does not fit is (one line when it is the only one), never a traceback, and
    the refusal asks for validate's own --cuda-graph-gib, not the scenario key a replay's user has not got."""
    csv = tmp_path / "rows.csv"
    csv.write_text(ROWS + _row("r1", "vllm", "0.25.0"))
    r = cli("validate", csv, "--workers", "1")
    _one_line(r, "no row can be replayed", "give --cuda-graph-gib as the 'Estimated CUDA graph memory'")
    assert "kv_memory.cuda_graph_gib" not in r.err and "backend_version" not in r.err, r.err


def test_validate_states_the_cuda_graphs_of_every_row_whose_release_needs_them(tmp_path, cli):
    """--cuda-graph-gib is each vLLM 0.20.0+ row's kv_memory.cuda_graph_gib; a row whose graphs live outside
    the pool (vLLM 0.19.1) or whose stack never reads the figure (SGLang) is replayed without it."""
    from simulator.validation.replay import ReplaySettings, scenario_for
    from simulator.validation.rows import rows_from_csv

    csv = tmp_path / "rows.csv"
    csv.write_text(ROWS + _row("new", "vllm", "0.25.0") + _row("newest", "vllm", "0.34.0")
                   + _row("old", "vllm", "0.19.1") + _row("sglang", "sglang", "0.5.9"))
    stated = {r.id: scenario_for(r, ReplaySettings(cuda_graph_gib=1.5)).pools[0].engine.kv_memory
              for r in rows_from_csv(csv)}
    assert {rid: kv.cuda_graph_gib for rid, kv in stated.items()} == {"new": 1.5, "newest": 1.5, "old": 0.0,
                                                                      "sglang": 0.0}
    bench = tmp_path / "run.json"
    bench.write_text(json.dumps(BENCH))
    r = cli("validate", bench, "--backend", "vllm", "--backend-version", "0.25.0", "--model", "llama-3.2-1b",
            "--gpu", "h100-sxm", "--workers", "1", "--cuda-graph-gib", "1.5", "--json")
    assert r.code == 0 and json.loads(r.out)["replayed"] == 1, (r.code, r.err)
    _one_line(cli("validate", bench, "--backend", "vllm", "--model", "llama-3.2-1b", "--gpu", "h100-sxm",
                  "--cuda-graph-gib", "-1"), "--cuda-graph-gib: GiB per GPU, 0 to 1,024 (got -1.0)")


def test_validate_says_which_rows_its_cuda_graph_figure_reached(tmp_path, cli):
    """A figure no row's release reads prices nothing: the replay says so rather than leave the user thinking
    the predictions carry it."""
    bench = tmp_path / "run.json"
    bench.write_text(json.dumps(BENCH))
    base = ["validate", bench, "--backend", "vllm", "--model", "llama-3.2-1b", "--gpu", "h100-sxm", "--workers", "1",
            "--cuda-graph-gib", "1.5"]
    r = cli(*base)
    assert r.code == 0, r.err
    # (the terminal wraps the line at its width: compared with its words)
    assert "--cuda-graph-gib applied to no row: only a release that takes its CUDA graphs out of the KV pool" \
        in " ".join(r.out.split()), r.out
    assert "--cuda-graph-gib applied to 1 of 1 row(s) (row run)" in " ".join(
        cli(*base, "--backend-version", "0.25.0").out.split())
    csv = tmp_path / "rows.csv"
    csv.write_text(ROWS + _row("new", "vllm", "0.25.0") + _row("old", "vllm", "0.19.1") + _row("sg", "sglang", "0.5.9"))
    out = cli("validate", csv, "--workers", "1", "--cuda-graph-gib", "1.5", "--json").json()
    assert out["cuda_graph_gib_rows"] == ["new"] and out["replayed"] == 3
    assert "cuda_graph_gib_rows" not in cli("validate", bench, *base[2:-2], "--json").json()


@pytest.mark.parametrize("version,inside", [("1.2.1", True), ("1.3.0rc1", True), ("1.3.0rc1.post1", True),
                                            ("1.3.0rc2", False), ("1.3.0rc5.post1", False), ("1.3.0", False),
                                            ("1.4.0rc0", False)])
def test_a_rule_bound_naming_a_candidate_splits_its_line(version, inside):
    # TensorRT-LLM ships months of main as 1.3.0rc1..rcN: a change between two candidates is bounded there
    rule = VersionRule(since="0.0.0", until="1.3.0rc2", set={"max_num_seqs": 8})
    prof = BackendProfile(name="x", stack="trtllm", by_version=[rule])
    assert (prof.version_keys(version) == {"max_num_seqs": 8}) is inside
    line = BackendProfile(name="x", stack="trtllm", by_version=[rule.model_copy(update={"until": "1.3.0"})])
    assert (line.version_keys(version) == {"max_num_seqs": 8}) is (version < "1.3")   # a line's bound: all of it


@pytest.mark.parametrize("stack", ["vllm", "sglang"])
def test_the_release_priority_scheduling_starts_at_is_dated(stack):
    """A nightly is held to priority scheduling's first release (scenario.priority_scheduling) by that
    release's day: undated (vLLM 0.11.0, SGLang 0.5.4), a nightly built a year before it was never
    refused."""
    from simulator.scenario.priority_scheduling import STACKS
    prof = load_backend(stack)
    since = STACKS[stack].since
    assert since in prof.releases
    assert prof.came_before("nightly-20250101", since) and not prof.came_before("nightly-20260101", since)
