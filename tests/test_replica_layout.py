"""The pools tables say how a replica is split: a DeepSeek-V3 replica of eight attention-DP ranks
(tp 1 × dp 8, ep 8) read ``tp1`` alone, as if one GPU, beside its eight GPUs and its eight ranks' KV."""
from __future__ import annotations

import io

from rich.console import Console

from simulator.report.fleet_summary import pools_table as terminal_pools
from simulator.report.page_parts import pools_table as page_pools
from simulator.report.summary_format import replica_layout

_FIGURES = {"replicas_min": 1, "replicas_mean": 1.0, "replicas_max": 1, "kv_tokens_per_replica": 3_556_008,
            "gpu_hours": 0.19, "usd": 1.04, "mean_kv_utilization": 0.0, "gpu_busy_fraction": 0.65,
            "rejected_on_admission": 0, "mean_batch_size": 2.0, "max_batch_size": 11}
POOLS = {"prefill": {"model": "deepseek-v3", "gpu": "h200", "tp": 1, "dp": 8, "ep": 8, "gpus": 8, **_FIGURES},
         "decode": {"model": "llama-3.1-405b", "gpu": "h100-sxm", "tp": 8, "pp": 2, "gpus": 16, **_FIGURES},
         "small": {"model": "llama-3-8b", "gpu": "h100-sxm", "tp": 1, "gpus": 1, **_FIGURES}}


def test_a_replica_names_each_split_it_has():
    assert [replica_layout(p) for p in POOLS.values()] == ["tp1·dp8·ep8", "tp8·pp2", "tp1"]
    assert replica_layout({"tp": 2, "dp": 1, "ep": 1, "pp": 1}) == "tp2"


def test_both_pools_tables_show_it():
    console = Console(width=200, record=True, file=io.StringIO())
    console.print(terminal_pools({"pools": POOLS}))
    text = console.export_text()
    assert "deepseek-v3/tp1·dp8·ep8" in text and "llama-3.1-405b/tp8·pp2" in text and "llama-3-8b/tp1 " in text
    page = page_pools({"pools": POOLS})
    assert "<td>tp1·dp8·ep8</td>" in page and "<td>tp8·pp2</td>" in page and "<th>replica</th>" in page
