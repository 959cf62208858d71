"""product.slices: a scenario that simulates 1/N of the product leads with the product."""
from __future__ import annotations

import json

from simulator.metrics.product import product_block

LLMSIM = {"gpus": 12, "gpus_mean": 10.5, "cost": {"monthly_usd": 1000.0},
          "pools": {"a": {"gpu": "h100-sxm", "gpus": 4, "gpus_mean": 2.5},
                    "b": {"gpu": "b200", "gpus": 8, "gpus_mean": 8.0}}}


def test_the_product_is_the_slice_times_its_slices():
    p = product_block(64, LLMSIM)
    assert (p["gpus"], p["gpus_mean"], p["monthly_usd"]) == (768, 672.0, 64_000.0)
    assert p["pools"] == {"a": {"gpu": "h100-sxm", "gpus": 256, "gpus_mean": 160.0},
                          "b": {"gpu": "b200", "gpus": 512, "gpus_mean": 512.0}}
    assert p["slice"] == {"gpus": 12, "gpus_mean": 10.5, "monthly_usd": 1000.0}
    assert p["traffic_fraction"] == 1 / 64 and "copies of the slice" in p["scaling"]
    whole = product_block(1, LLMSIM)
    assert whole["gpus"] == 12 and "whole product" in whole["scaling"]


def test_bad_slices_are_one_message(cli, repo_root):
    chatbot = repo_root / "scenarios" / "chatbot.yaml"
    for value, fragment in (("0", "greater than or equal to 1"), ("1.5", "integer"), ("many", "integer")):
        r = cli("run", chatbot, "--set", f"product.slices={value}")
        assert r.code == 2 and "product.slices" in r.err and fragment in r.err, r.err
        assert "Traceback" not in r.err


def test_without_a_product_key_the_headline_is_the_fleet(tmp_path, cli):
    p = tmp_path / "s.yaml"
    p.write_text("name: s\nworkload: {num_requests: 20, arrival: {type: poisson, rate_per_s: 5},\n"
                 "  input_tokens: {dist: fixed, value: 64}, output_tokens: {dist: fixed, value: 8}}\n"
                 "pools: [{model: llama-3-8b, gpu: h100-sxm, replicas: 2}]\n")
    r = cli("run", p)
    assert r.code == 0 and r.out.startswith("Fleet: 2 GPUs at peak (main 2 × h100-sxm")
    out = json.loads(cli("run", p, "--json").out)["llmsim"]
    assert list(out)[:2] == ["product", "load"] and out["product"]["slices"] == 1
