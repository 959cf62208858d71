"""`llmsim run --replicates N`: what its output says about the seeds it ran."""
from __future__ import annotations

import json

from test_sweep import words, write_tiny_scenario


def test_the_run_says_which_seed_its_tables_are_and_tables_the_spread(tmp_path, cli):
    """With --replicates every table but the spread and the intervals is the first seed's run: the output
    says so before them, and tables each latency's median and p99 over the seeds (mean, lowest – highest)."""
    sc = write_tiny_scenario(tmp_path)
    r = cli("run", sc, "--replicates", "2", "--workers", "1", "--no-plots", "-o", tmp_path / "out")
    assert r.code in (0, 1), r.err
    seeds = json.loads((tmp_path / "out" / "results.json").read_text())["llmsim"]["replicates"]["seeds"]
    text = words(r.out)
    assert f"replicates: 2 seeds ({seeds[0]}, {seeds[1]}); the tables below are seed {seeds[0]}'s run" in text
    assert text.index("replicates: 2 seeds") < text.index("Serving results")
    assert "Latency over 2 seeds (ms): mean of the seeds (lowest – highest)" in text
    one = cli("run", sc, "--no-plots", "-o", tmp_path / "one")
    assert "replicates:" not in words(one.out) and "Latency over" not in words(one.out)
