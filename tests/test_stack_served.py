"""A run says which serving stack and release it assumed, and the KV pool that gave each replica.

A pool naming ``engine.backend`` and no ``backend_version`` runs the
profile's default release (vLLM's 0.19.1, not its newest), whose defaults
(async scheduling, the memory reserve) move every figure; and the KV tokens
a replica holds decide how many requests batch at once. Someone betting a
GPU budget on the answer checks both against their deployment's start-up
log, so results.json, the terminal and the report page all state them.
"""
from __future__ import annotations

import io
import json

import pytest
from rich.console import Console

from helpers_whatif import write_scenario
from simulator.profiles.backend import load_backend
from simulator.report.page_parts import pools_table
from simulator.report.summary import summary_table


@pytest.mark.parametrize("sets, release, given", [
    ((), load_backend("vllm").default_release, False),
    (("--set", 'pools.main.engine.backend_version="0.14.0"'), "0.14.0", True),
])
def test_the_stack_release_and_kv_pool_are_stated_everywhere(tmp_path, cli, sets, release, given):
    sc = write_scenario(tmp_path)
    r = cli("run", sc, "--json", "--set", "pools.main.engine.backend=vllm", *sets)
    results = json.loads(r.out)
    pool = results["llmsim"]["pools"]["main"]
    assert (pool["backend"], pool["backend_release"], pool["backend_release_given"]) == ("vllm", release, given)
    stack = f"vllm {release}" + ("" if given else " (its default release)")
    kv = f"{pool['kv_tokens_per_replica']:,}"
    console = Console(width=100, record=True, file=io.StringIO())
    console.print(summary_table(results))
    assert f"served by {stack}, {kv} KV tokens a replica" in " ".join(console.export_text().split())
    page = pools_table(results["llmsim"])
    assert f"<td>{stack}</td>" in page and f"<td>{kv}</td>" in page


def test_a_pool_on_the_generic_engine_states_its_kv_pool_and_no_stack(tmp_path, cli):
    sc = write_scenario(tmp_path)
    r = cli("run", sc, "--json")
    pool = json.loads(r.out)["llmsim"]["pools"]["main"]
    assert "backend" not in pool and "backend_release" not in pool
    table = cli("run", sc, "--exit-zero").out
    assert f"\n  {pool['kv_tokens_per_replica']:,} KV tokens a replica" in table and "served by" not in table
