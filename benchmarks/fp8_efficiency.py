"""How fast dense fp8 GEMMs really run on Hopper, fitted on end-to-end fp8 rows.

    python benchmarks/fp8_efficiency.py                         # fit, leave-one-group-out, print
    python benchmarks/fp8_efficiency.py --write                 # also write fp8_gemm_efficiency into the Hopper profiles
    python benchmarks/fp8_efficiency.py --check-gemm FILE.parquet   # check the fitted value on fp8 GEMM timings llmsim never saw

The kernel data llmsim is calibrated on holds bf16 GEMMs only, and a
datasheet doubles the tensor-core peak for fp8. Priced that way, an fp8
prefill runs twice as fast as a bf16 one. It does not: at twice the math
rate the GPU runs into its power cap and lowers its clocks, and a
per-tensor fp8 linear layer first quantises its activations. The
hardware profile's ``fp8_gemm_efficiency`` is the fraction of the bf16
fit's compute efficiency that fp8 GEMMs reach; one number per GPU die,
here fitted for Hopper (H100 and H200 are the same GH100 die, clocks and
power cap) on the three groups of fp8 end-to-end rows the shared data
holds, each read on the metric its prefill speed sets without a queue
model in between:

* ``vllm-70b-h100``: Llama-3.1-70B fp8 on H100 under vLLM
  (``closed_loop_silicon.csv``, concurrency ≤ 128), mean TTFT;
* ``sglang-8b-h200``: Llama-3.1-8B block-fp8 on H200 under SGLang (the
  same file), output throughput: their TTFT depends on a phase the
  simulated loop does not reproduce (docs/accuracy.md), their throughput
  only on how much work each request is;
* ``trtllm-h100-batch1``: TensorRT-LLM fp8 first-token latency of one
  request on H100 (``published_serving_results.csv``), prompts of 1,024
  tokens or more: a prefill alone, long enough to be compute-bound.

Fit: the value on a 0.05 grid that zeroes the groups' median signed log
errors in the least-squares sense. Leave-one-group-out: each group
predicted at the value fitted on the other two.
"""
from __future__ import annotations

import argparse
import re
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from accuracy import CLOSED, DATA, MAX_CONCURRENCY, ROOT  # noqa: E402  (also puts the repository on sys.path)

PUBLISHED = DATA / "e2e" / "published_serving_results.csv"
HOPPER = ("h100-sxm", "h200", "h100-pcie")   # one GH100 die: the value fitted here is written into each
# Blackwell doubles its fp8 peak under a power cap too, and no fp8 row measures it: by the transfer
# rule its calibration follows (b200 <- h100-sxm, gb200-nvl72 <- b200) it takes Hopper's value.
TRANSFERRED = ("b200", "gb200-nvl72")
GRID = np.round(np.arange(0.50, 1.0001, 0.05), 2)
# Batch-1 prompts shorter than this are launch- and latency-bound, not set by the GEMMs' math rate.
MIN_PROMPT = 1024


def _profile_with(gpu: str, eff: float, tmp: Path) -> str:
    """A copy of a built-in GPU profile with ``fp8_gemm_efficiency = eff`` (its path)."""
    import yaml

    from simulator.profiles import load_hardware

    path = tmp / f"{gpu}-{eff:.2f}.yaml"
    if not path.exists():
        d = load_hardware(gpu).model_dump(mode="json", exclude_defaults=False)
        d["fp8_gemm_efficiency"] = float(eff)
        path.write_text(yaml.safe_dump(d, sort_keys=False))
    return str(path)


def closed_loop_groups() -> dict[str, tuple[list, str]]:
    from simulator.validation.rows import rows_from_csv

    rows = [r for r in rows_from_csv(CLOSED) if not r.skip and (r.concurrency or 0) <= MAX_CONCURRENCY
            and r.weight_dtype == "fp8"]
    return {"vllm-70b-h100": ([r for r in rows if r.stack == "vllm"], "ttft_mean_ms"),
            "sglang-8b-h200": ([r for r in rows if r.stack == "sglang"], "throughput_output_tok_s")}


def batch1_rows() -> list:
    import pandas as pd

    import e2e_validation as ev

    out = []
    for row in pd.read_csv(PUBLISHED).itertuples(index=False):
        m, _ = ev.map_row(row)
        if m is not None and m.kind == "ttft1" and m.weight_dtype == "fp8" and m.gpu in HOPPER \
                and int(row.isl_mean) >= MIN_PROMPT:
            out.append((row, m))
    return out


def errors_at(eff: float, groups: dict, b1: list, tmp: Path, workers: int) -> dict[str, np.ndarray]:
    """Signed log errors (llmsim / measured) of every group's rows with the Hopper profiles at ``eff``."""
    from simulator.validation.replay import ReplaySettings
    from simulator.validation.report import predict_all

    import e2e_validation as ev

    out = {}
    for name, (rows, metric) in groups.items():
        moved = [replace(r, gpu=_profile_with(r.gpu, eff, tmp)) for r in rows]
        preds = predict_all(moved, ReplaySettings(), workers)
        out[name] = np.array([np.log(p[metric] / r.measured[metric]) for r, p in zip(rows, preds)])
    errs = []
    for row, m in b1:
        res = ev.simulate_row(row, replace(m, gpu=_profile_with(m.gpu, eff, tmp)))
        errs.append(np.log(res["mean_ttft_ms"] / float(row.ttft_mean_ms)))
    out["trtllm-h100-batch1"] = np.array(errs)
    return out


def best(table: dict[float, dict[str, np.ndarray]], use: list[str]) -> float:
    """The grid value whose groups' median signed log errors are smallest in squares."""
    return min(table, key=lambda e: sum(float(np.median(table[e][g])) ** 2 for g in use))


def write(eff: float | str, gpus: tuple[str, ...], note: str, key: str = "fp8_gemm_efficiency") -> None:
    """Set ``key`` (and its provenance comment) in these GPU profiles: a number, or a YAML flow value as written."""
    for gpu in gpus:
        path = ROOT / "hardware_profiles" / f"{gpu}.yaml"
        text = path.read_text()
        line = f"{key}: {eff if isinstance(eff, str) else format(eff, 'g')}  # {note}\n"
        if re.search(rf"^{key}:.*\n", text, flags=re.M):
            text = re.sub(rf"^{key}:.*\n", line, text, flags=re.M)
        else:
            text = re.sub(r"^(price:)", line + r"\1", text, count=1, flags=re.M)
        path.write_text(text)
        print(f"wrote {path}")


def check_gemm(parquet: Path, eff: float) -> None:
    """Frozen check: llmsim's H100 fp8 and bf16 GEMM times against another collection's timings."""
    import pandas as pd

    from simulator.costmodel import components as C
    from simulator.profiles import load_hardware

    g = load_hardware("h100-sxm")
    d = pd.read_parquet(parquet)
    p = d.pivot_table(index=["m", "n", "k"], columns="gemm_dtype", values="latency").dropna(subset=["fp8"])
    p = p.reset_index()
    big = (2 * p.m * p.n * p.k).to_numpy() > 1e12      # compute-bound: above 1 TFLOP
    for label, e in (("datasheet peak (efficiency 1)", 1.0), (f"fitted efficiency {eff:g}", eff)):
        pred = np.array([C.gemm_time(r.m, r.n, r.k, g.peak_flops("fp8") * e, g.hbm_bandwidth, g.calibration.gemm,
                                     1.0, 1.0, g.num_sms) * 1e3 for r in p.itertuples()])
        err = pred / p["fp8"].to_numpy() - 1
        print(f"fp8 GEMMs, {label}: median |error| {np.median(np.abs(err)) * 100:.1f} % (signed "
              f"{np.median(err) * 100:+.1f} %) over {len(p)} shapes; above 1 TFLOP {np.median(np.abs(err[big])) * 100:.1f} % "
              f"(signed {np.median(err[big]) * 100:+.1f} %, {int(big.sum())} shapes)")
    if "bfloat16" in p:
        r = (p["bfloat16"] / p["fp8"]).to_numpy()
        print(f"measured fp8 speed-up over bf16 on the same shapes above 1 TFLOP: median {np.median(r[big]):.2f}x")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--write", action="store_true",
                    help="write the fitted value into the Hopper GPU profiles (and, transferred, Blackwell's)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--check-gemm", type=Path, metavar="PARQUET",
                    help="fp8/bf16 GEMM timings (m, n, k, gemm_dtype, latency in ms) to check the frozen value on")
    args = ap.parse_args(argv)
    if not CLOSED.exists() or not PUBLISHED.exists():
        print(f"fp8_efficiency: skipped: {DATA / 'e2e'} not found (the shared data directory is absent; it is "
              "expected at ../shared/data next to the repository).")
        return 0
    groups, b1 = closed_loop_groups(), batch1_rows()
    names = [*groups, "trtllm-h100-batch1"]
    table = {}
    with tempfile.TemporaryDirectory() as tmp:
        for eff in GRID:
            table[float(eff)] = errors_at(float(eff), groups, b1, Path(tmp), args.workers)
            print(f"efficiency {eff:.2f}: " + ", ".join(
                f"{g} median signed {np.expm1(np.median(table[float(eff)][g])) * 100:+.1f} %" for g in names), flush=True)
    fitted = best(table, names)
    print(f"\nfitted on all three groups: {fitted:g}")
    print("| held-out group | rows | efficiency fitted on the other two | held-out median abs error | "
          "median signed | at efficiency 1 (datasheet) |")
    print("|---|---:|---:|---:|---:|---:|")
    for g in names:
        e = best(table, [h for h in names if h != g])
        err, err1 = np.expm1(table[e][g]) * 100, np.expm1(table[1.0][g]) * 100
        print(f"| {g} | {len(err)} | {e:g} | {np.median(np.abs(err)):.1f} % | {np.median(err):+.1f} % | "
              f"{np.median(np.abs(err1)):.1f} % ({np.median(err1):+.1f} %) |")
    if args.write:
        write(fitted, HOPPER, "fitted by `python benchmarks/fp8_efficiency.py --write` on the shared data's fp8 "
                              "end-to-end rows (docs/calibration.md)")
        write(fitted, TRANSFERRED, "transferred from h100-sxm by `python benchmarks/fp8_efficiency.py --write` "
                                   "(no fp8 row measures it; docs/calibration.md)")
    if args.check_gemm:
        check_gemm(args.check_gemm, fitted)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
