"""The qualitative claims of benchmarks/prefix_cache_study.py, on its quick loads.

docs/prefix-cache.md states them on the full loads: warm autocomplete
prefills are an order of magnitude cheaper than cold ones; prefix_aware and
session_affinity keep 8 replicas' hit rate near what one unbounded cache
would hit while round robin spreads each file over all of them; chat TTFT
stays flat across turns with the cache and grows with history without it.
"""
from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _load_study():
    name = "prefix_cache_study"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / "prefix_cache_study.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


S = _load_study()


@pytest.fixture(scope="module")
def routers():
    rows, load, ideal_all = S.router_study(S.QUICK, ("round_robin", "session_affinity", "prefix_aware"))
    return {r["label"]: r for r in rows}, load, ideal_all


@pytest.fixture(scope="module")
def chat():
    return S.chat_study(S.QUICK)


def test_cold_6k_prefill_is_far_slower_than_warm():
    row = next(r for r in S.cold_warm() if r["prompt"] == 6000)
    assert row["cold_ms"] >= 5 * row["warm_ms"]
    assert row["cold_ms"] > 50   # a 6K prefill of an 8B model is tens of ms, not a few
    assert row["cold_blows_budget"] == (row["cold_ms"] > S.BUDGET_MS)


@pytest.mark.parametrize("kind", ["autocomplete", "chat"])
def test_offline_ideal_matches_one_unbounded_replica(kind):
    """The ideal column is only meaningful if it reproduces the engine's own hit
    rate where the engine has one unbounded cache."""
    if kind == "autocomplete":
        sc = S.autocomplete_scenario(S.QUICK, router="round_robin", replicas=1, capacity="unbounded",
                                     sessions=20, rate=1.0)
    else:
        sc = S.chat_scenario(S.QUICK)
        sc["workload"]["num_sessions"] = 40
        sc["pools"][0].update(replicas=1)
        sc["pools"][0]["engine"]["prefix_cache_capacity_tokens"] = "unbounded"
    r = S.run(sc)
    row = S.summarize(kind, r)
    assert row["token_hit"] > 0.5
    assert row["ideal"] == pytest.approx(row["token_hit"], abs=1e-12)


def test_cache_aware_routers_stay_near_the_ideal(routers):
    rows, _, ideal_all = routers
    assert ideal_all > 0.9
    for name in ("prefix_aware", "session_affinity"):
        r = rows[name]
        assert r["token_hit"] >= 0.8 * r["ideal"], name
        assert r["token_hit"] >= 0.8 * ideal_all, name


def test_round_robin_loses_the_prefix(routers):
    rows, _, _ = routers
    rr, sa, pa = rows["round_robin"], rows["session_affinity"], rows["prefix_aware"]
    miss = {k: 1 - v["token_hit"] for k, v in rows.items()}
    # Hit rate well below both cache-aware routers, and the prefill work (the misses) several times theirs.
    assert rr["token_hit"] / rr["ideal"] < min(sa["token_hit"] / sa["ideal"], pa["token_hit"] / pa["ideal"]) - 0.1
    assert miss["round_robin"] > 2.5 * miss["session_affinity"]
    assert miss["round_robin"] > 5 * miss["prefix_aware"]
    # ...which is what sets the tail, and costs completions (overtaken by the next keystroke).
    assert rr["p95"] > 3 * pa["p95"]
    assert rr["finished"] < 0.8 * pa["finished"]
    assert rr["gpus"] == pa["gpus"] == S.REPLICAS


def test_cliff_p95_against_hit_rate(routers):
    rows, load = S.cliff_study(S.QUICK)
    by = {r["label"]: r for r in rows}
    off, full = by["prefix_cache: false"], by["cap default (free KV memory)"]
    assert off["token_hit"] == 0 and full["token_hit"] > 0.9
    assert {**full, "label": "prefix_aware"} == routers[0]["prefix_aware"]   # the same run (memoised)
    assert full["p95"] < S.BUDGET_MS < off["p95"]
    assert off["p95"] > 5 * full["p95"]
    hits = [r["token_hit"] for r in rows]
    assert hits == sorted(hits)
    assert load["replicas"] == S.REPLICAS and load["busy"] > 0


def test_chat_ttft_flat_with_cache_growing_without(chat):
    on, off = chat["on"], chat["off"]
    assert set(on) == set(off) == set(range(1, 9))
    # Prompts grow with history; with the cache nearly all of it is a hit.
    assert on[8]["prompt"] > 3 * on[1]["prompt"]
    assert on[8]["cached"] > 0.8 * on[8]["prompt"]
    for k in range(5, 9):
        assert on[k]["p50"] <= 2 * on[2]["p50"], k
        assert on[k]["p50"] >= 0.5 * on[2]["p50"], k
        assert off[k]["p50"] > 1.5 * off[1]["p50"], k
        assert off[k]["p50"] > 2 * on[k]["p50"], k
    p50_off = [off[k]["p50"] for k in range(1, 9)]
    assert p50_off == sorted(p50_off)   # grows turn by turn


def test_markdown_has_the_tables_and_command(routers, chat):
    rows, load, ideal_all = routers
    cliff, cliff_load = S.cliff_study(S.QUICK)
    text = S.markdown(S.cold_warm(), cliff, cliff_load, list(rows.values()), load, ideal_all, chat, S.QUICK, 1.0,
                      S.DOC_COMMAND)
    assert S.DOC_COMMAND in text and "how-it-works.md" in text
    for heading in ("## a. The autocomplete cliff", "## b. Routers on 8 replicas", "## c. Chat sessions"):
        assert heading in text
    assert sum(line.startswith("|---") for line in text.splitlines()) == 4


def test_doc_is_generated_by_the_study(cli):
    """The doc's cost-model figures are the study's with today's cost model
    (its simulated tables take a minute to redo: the command it names), and
    the `llmsim estimate request` it quotes gives the cold prefill it states."""
    doc = (ROOT / "docs" / "prefix-cache.md").read_text()
    assert S.DOC_COMMAND in doc
    assert doc.startswith(S.HEADER.split("\n", 1)[0])
    table = S.table_cold_warm(S.cold_warm())
    start = doc.splitlines().index(table[0])
    assert doc.splitlines()[start:start + len(table)] == table, f"stale: {S.DOC_COMMAND}"
    m = re.search(r"`llmsim estimate (request [^`]+)` gives the same ([\d.]+) ms TTFT", doc)
    assert m, "the doc no longer quotes its llmsim estimate command"
    quoted = cli("estimate", *m.group(1).split(), "--json").json()
    assert f"{quoted['ttft_ms']:.1f}" == m.group(2)
