"""`llmsim compare` of files that do not match key for key, or are not what they declare.

A key one file holds and the other lacks has not moved (an llmsim run beside
a ``vllm bench serve`` result shares a few keys only): it is shown as only
in A or only in B, unmarked, and counted apart. A declared block or a ranked
figure of the wrong shape is refused as text there is; a run folder whose
scenario.yaml is another scenario's is warned about.
"""
from __future__ import annotations

import copy
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import test_compare
import test_results_fields
from simulator.cli.app import results_fields
from simulator.report.diff import diff, flatten, misshapen

declared = test_compare.declared        # autouse: directions come from results.json's declarations
_write = test_compare.write
runs = test_results_fields.runs          # the runs that between them write every block results.json declares

LLMSIM = {
    "completed": 100, "failed": 0, "cancelled": 0, "request_throughput": 10.0, "p99_ttft_ms": 200.0,
    "median_tpot_ms": 8.0,
    "slo": {"met": True, "targets": {"ttft_p99_ms": {"metric": "ttft", "target_ms": 500.0, "measured_ms": 200.0,
                                                      "attainment": 1.0, "met": True}}},
    "llmsim": {"scenario": "small", "gpus": 2, "product": {"monthly_usd": 8000.0, "gpus": 2},
               "cost": {"monthly_usd": 4000.0, "usd_per_request": 0.01,
                        "pools": [{"name": "chat", "usd": 1.0}]}},
}
# What `vllm bench serve --save-result` writes (no llmsim block, a few keys of its own).
VLLM = {"date": "20250101-000000", "backend": "vllm", "num_prompts": 100, "completed": 100,
        "request_throughput": 12.0, "p99_ttft_ms": 150.0, "median_tpot_ms": 8.0, "mean_itl_ms": 7.9}


def _rows(out: str) -> dict[str, str]:
    return {line.split("│")[1].strip(): line for line in out.splitlines() if line.count("│") > 4}


def _one_line(r, *fragments: str) -> None:
    assert r.code == 2, (r.code, r.out, r.err)
    assert "Traceback" not in r.err and len(r.err.strip().splitlines()) == 1, r.err
    for f in fragments:
        assert f in r.err, (f, r.err)


# --- a key in one file only -----------------------------------------------------------------------


def test_a_key_one_file_lacks_is_only_in_the_other_not_worse(tmp_path, cli, monkeypatch):
    from simulator.cli.output import console

    monkeypatch.setattr(console, "width", 200)
    a, b = _write(tmp_path, "a.json", LLMSIM), _write(tmp_path, "vllm.json", VLLM)
    out = cli("compare", a, b, "--json").json()
    rows = {c["key"]: c for c in out["changes"]}
    assert rows["failed"] == {"key": "failed", "a": 0, "b": None, "delta": None, "rel": None, "worse": None,
                              "only_in": "a"}
    assert rows["llmsim.product.monthly_usd"]["worse"] is None and rows["mean_itl_ms"]["only_in"] == "b"
    only_a = [k for k in flatten(LLMSIM) if k not in VLLM]
    assert out["only_in"] == {"a": len(only_a), "b": len([k for k in VLLM if k not in LLMSIM])}
    # the keys both hold still move, and in their direction
    assert rows["p99_ttft_ms"]["worse"] is False and rows["request_throughput"]["worse"] is False
    assert "only_in" not in rows["p99_ttft_ms"]
    r = cli("compare", a, b)
    assert r.code == 0, r.err
    table = _rows(r.out)
    for key in ("failed", "llmsim.product.monthly_usd", "slo.met"):
        assert table[key].rstrip(" │").endswith("only in A") and "worse" not in table[key], table[key]
    assert "better" in table["p99_ttft_ms"]
    assert "2 keys differ: 0 worse, 2 better, 0 without a direction" in r.out.replace("\n", " ")
    assert f"{len(only_a)} only in A and 4 only in B (one file lacks the key: not compared)" in r.out
    swapped = {c["key"]: c for c in cli("compare", b, a, "--json").json()["changes"]}
    assert swapped["failed"]["only_in"] == "b" and swapped["failed"]["worse"] is None


def test_null_is_still_a_figure_gone_missing(tmp_path, cli):
    """llmsim writes a figure it could not measure as null: that is the file
    saying so, unlike a key it does not hold at all."""
    b = copy.deepcopy(LLMSIM)
    b["p99_ttft_ms"] = None
    rows = {c["key"]: c for c in cli("compare", _write(tmp_path, "a.json", LLMSIM), _write(tmp_path, "b.json", b),
                                     "--json").json()["changes"]}
    assert rows["p99_ttft_ms"]["worse"] is True and "only_in" not in rows["p99_ttft_ms"]


_LEAF = st.one_of(st.none(), st.booleans(), st.integers(-5, 5), st.floats(-10, 10), st.text(max_size=3))
_NAMES = st.sampled_from(["p99_ttft_ms", "failed", "completed", "gpus", "cost", "x", "slo", "met"])
_DOC = st.recursive(_LEAF, lambda inner: st.dictionaries(_NAMES, inner, max_size=4), max_leaves=12)


@settings(deadline=None)      # the first example builds the declarations' directions
@given(st.dictionaries(_NAMES, _DOC, max_size=5), st.dictionaries(_NAMES, _DOC, max_size=5))
def test_no_key_one_side_lacks_is_ever_worse_or_better(a, b):
    """Whatever the two files hold, a key one of them lacks (and holds no
    figure above) carries no direction, and only such a key is only in one."""
    fa, fb = flatten(a), flatten(b)

    def holds(key: str, flat: dict) -> bool:
        """The key, a block under it, or a figure where its block would be (a null there is no block)."""
        return key in flat or any(k.startswith(key + ".") or key.startswith(k + ".") and flat[k] is not None
                                  for k in flat)

    for c in diff(a, b, include_unchanged=True):
        if c.only_in is not None:
            assert c.worse is None and c.delta is None and c.changed
            assert (holds(c.key, fa), holds(c.key, fb)) == ((True, False) if c.only_in == "a" else (False, True))
        else:
            assert holds(c.key, fa) and holds(c.key, fb)


# --- shapes the declarations rule out -------------------------------------------------------------


@pytest.mark.parametrize("key, value, fragment", [
    ("llmsim", [1], "llmsim: expected an object (a block of results), got a list of 1"),
    ("slo", "fast", "slo: expected an object (a block of results), got 'fast'"),
    ("llmsim.cost.pools", {"chat": {"usd": 1.0}}, "llmsim.cost.pools: expected a list of objects"),
    ("p99_ttft_ms", [190.0, 210.0], "p99_ttft_ms: expected a finite number or null (a figure), got a list of 2"),
    ("llmsim.cost.monthly_usd", {"lo": 1.0}, "llmsim.cost.monthly_usd: expected a finite number or null"),
    ("slo.met", [True], "slo.met: expected true, false or null (a verdict), got a list of 1"),
], ids=["llmsim-list", "slo-text", "pools-object", "figure-list", "figure-object", "verdict-list"])
def test_a_declared_block_or_figure_of_the_wrong_shape_is_refused_as_text_is(tmp_path, cli, key, value, fragment):
    bad = copy.deepcopy(LLMSIM)
    *parents, leaf = key.split(".")
    node = bad
    for p in parents:
        node = node[p]
    node[leaf] = value
    good, bad_file = _write(tmp_path, "a.json", LLMSIM), _write(tmp_path, "b.json", bad)
    for args in ((good, bad_file), (bad_file, good), (good, bad_file, "--json")):
        _one_line(cli("compare", *args), f"{bad_file}: {fragment}")


def test_an_undeclared_key_holding_a_list_is_shown_as_a_block(tmp_path, cli, monkeypatch):
    """Only a declaration says a key is one figure: a foreign tool's own key
    (a list of percentiles, say) is shown beside the other file's number, not
    refused, and not called worse."""
    from simulator.cli.output import console

    monkeypatch.setattr(console, "width", 200)
    a, b = copy.deepcopy(VLLM), copy.deepcopy(VLLM)
    a["percentiles_ttft_ms"] = 120.0
    b["percentiles_ttft_ms"] = [[99, 150.0]]
    r = cli("compare", _write(tmp_path, "a.json", a), _write(tmp_path, "b.json", b))
    assert r.code == 0, r.err
    assert "not compared, a number in one file and a list or an object in the other: percentiles_ttft_ms" in r.out


def test_every_block_a_real_run_writes_has_its_declared_shape(runs):
    for name, res in runs.items():
        assert misshapen(res) is None, name


def _blocks(obj, prefix=""):
    """(path of keys, value) of every mapping under ``obj``, lists' items by index."""
    items = obj.items() if isinstance(obj, dict) else enumerate(obj) if isinstance(obj, list) else ()
    for k, v in items:
        if isinstance(v, (dict, list)) and v:
            if isinstance(v, dict):
                yield (*prefix, k), v
            yield from _blocks(v, (*prefix, k))


@pytest.mark.parametrize("name", ["plain", "features", "fleet"])
def test_any_block_of_a_real_run_replaced_by_a_list_or_text_is_refused(runs, name):
    """No declared object can turn into something else unnoticed (each of its
    figures would otherwise compare as missing)."""
    from simulator.fields import lookup

    fields = results_fields()
    res = runs[name]
    checked = 0
    for path, _ in _blocks(res):
        if any(isinstance(p, int) for p in path):
            continue        # an item of a list, keyed by its name in compare's spelling
        key = ".".join(map(str, path))
        f = lookup(key, fields)[0]
        if f is None or f.keys is None or f.unit.startswith("list"):
            continue        # a setting repeated as given holds whatever the scenario wrote
        for wrong in ([1], "text", 3.0):
            bad = copy.deepcopy(res)
            node = bad
            for p in path[:-1]:
                node = node[p]
            node[path[-1]] = wrong
            found = misshapen(bad)
            assert found is not None and found[0] == key, (key, wrong, found)
        checked += 1
    assert checked > 10


# --- the files named -----------------------------------------------------------------------------


def _folder(tmp_path, name: str, results: dict, scenario: str):
    folder = tmp_path / name
    folder.mkdir()
    (folder / "results.json").write_text(json.dumps(results))
    (folder / "scenario.yaml").write_text(scenario)
    return folder


def test_a_folder_whose_scenario_yaml_is_another_scenarios_is_warned_about(tmp_path, cli):
    one = _folder(tmp_path, "one", LLMSIM, "name: small\nseed: 1\n")
    two = _folder(tmp_path, "two", LLMSIM, "name: autocomplete\nseed: 1\n")
    r = cli("compare", one, two)
    assert r.code == 0, r.err
    assert r.err.strip().splitlines() == [
        f"warning: B's results.json is a run of scenario 'small' but the scenario.yaml beside it has "
        f"'autocomplete' ({two / 'scenario.yaml'}): the inputs it lists are not necessarily the ones B ran"]
    assert len(cli("compare", two, one, "--json").json()["warnings"]) == 1
    assert cli("compare", one, one).err == ""


def test_a_name_that_is_nothing_on_disk_is_said_so(tmp_path, cli):
    good = _folder(tmp_path, "good", LLMSIM, "name: small\n")
    for args in ((good, tmp_path / "nope"), (tmp_path / "nope", good)):
        _one_line(cli("compare", *args), f"{tmp_path / 'nope'}: no such file or folder; expected a run folder")
    _one_line(cli("compare", good, tmp_path / "gone.json"), "gone.json", "file not found")


@pytest.mark.parametrize("value", ["nan", "-1", "-inf", "inf"])
def test_a_min_change_that_is_no_percentage_is_one_line(tmp_path, cli, value):
    good = _folder(tmp_path, "good", LLMSIM, "name: small\n")
    _one_line(cli("compare", good, good, "--min-change", value),
              "--min-change: expected a finite percentage of 0 or more")
