"""What serving LoRA adapters costs one iteration, and what loading one costs.

Prints, for a model on a GPU, the iteration time of decode batches and
prefill chunks without LoRA and with the punica shrink/expand kernels at
several max_lora_rank values and distinct adapters per batch
(simulator/costmodel/lora.py), and each rank's adapter size, GPU slot and
load times (host link, NVMe). Figures quoted in docs/scenarios.md and
docs/case-studies-405b-lora.md come from:

    python benchmarks/lora_overhead.py --model llama-3-8b --gpu h100-sxm
"""
from __future__ import annotations

import argparse

from simulator.costmodel import CostModel
from simulator.costmodel.lora import LoraCost, adapter_bytes
from simulator.profiles import load_hardware, load_model

#: (decode sequences, distinct adapters) and prefill chunk tokens
DECODES = [(1, 1), (32, 1), (32, 4), (128, 8), (256, 16)]
PREFILLS = [512, 2048, 8192]
CONTEXT = 1000   # cached tokens per decoding sequence


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="llama-3-8b")
    ap.add_argument("--gpu", default="h100-sxm")
    ap.add_argument("--ranks", default="16,64")
    a = ap.parse_args(argv)
    model, gpu = load_model(a.model), load_hardware(a.gpu)
    print(f"{model.name} on {gpu.name}, decode at {CONTEXT} cached tokens per sequence")
    print("| max_lora_rank | adapter MB | NVMe read ms | host copy ms | iteration | without LoRA ms | "
          "with LoRA ms | added |")
    print("|---:|---:|---:|---:|---|---:|---:|---:|")
    for rank in map(int, a.ranks.split(",")):
        cm = CostModel(model, gpu)
        size = adapter_bytes(model, rank)
        head = (f"| {rank} | {size / 1e6:.1f} | {size / (gpu.nvme_read_gb_s_per_gpu or float('nan')) / 1e6:.1f} | "
                f"{size / gpu.host_link_gb_s / 1e6:.2f} |")
        rows = []
        for b, d in DECODES:
            plain = cm.step_time((), b, b * CONTEXT)
            rows.append((f"decode {b} seqs, {d} adapters", plain, (), b, d))
        for n in PREFILLS:
            rows.append((f"prefill {n} tokens, 1 adapter", cm.step_time([(n, 0)]), [(n, 0)], 0, 1))
        cm.lora = LoraCost(cm, rank)
        for what, plain, chunks, b, d in rows:
            lora = cm.step_time(chunks, b, b * CONTEXT, adapters=d)
            print(f"{head} {what} | {plain * 1e3:.2f} | {lora * 1e3:.2f} | {(lora / plain - 1) * 100:+.1f} % |")
            head = "| | | | |"


if __name__ == "__main__":
    main()
