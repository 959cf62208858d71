"""End-to-end validation: published serving benchmarks vs llmsim.

    python benchmarks/e2e_validation.py                              # print the table
    python benchmarks/e2e_validation.py --markdown docs/accuracy-poisson.md  # also rewrite its table section
    python benchmarks/e2e_validation.py --csv out.csv                # machine-readable rows

Reads ``published_serving_results.csv`` from the shared data directory
(``../shared/data/e2e/`` next to the repository root) and simulates every
row llmsim can express, with one fixed mapping and no per-row tuning:

* GPU strings: "A100..." -> ``a100-sxm-80gb``; "H100..." -> ``h100-sxm``.
* Models: LLaMA-7B/70B (TensorRT-LLM's Llama-2 runs) -> ``llama-2-7b`` /
  ``llama-2-70b``; Llama-3.1-8B/70B-Instruct -> ``llama-3.1-8b`` / ``llama-3.1-70b``.
* Precision: FP16 -> weights and KV fp16; "FP8 (+FP8 KV cache)" -> weights
  fp8, KV fp8; BF16 -> bf16.
* TensorRT-LLM batch-1 first-token rows: one request, fixed input (128 or
  2048 tokens), one output token, alone on the replica; TTFT = its prefill.
* SGLang / vLLM online rows: Poisson arrivals at the row's rate, the row's
  number of requests, ShareGPT-like lengths (the ``sharegpt`` presets).
* Offline rows: all of the row's requests (5,000) submitted at t = 0 (a
  closed loop whose concurrency equals the request count), ShareGPT lengths.
* Engine settings: each engine's documented defaults of the time, mapped
  once per engine family (never per row, never fitted):
  - vLLM 0.6.0 with --max_model_len 4096: chunked prefill off (vLLM enabled
    it by default only above 32K context), so prefill-only iterations stall
    the decodes; token budget max(max_model_len, 2048) = 4,096; 256 seqs.
  - SGLang 0.3.0: prefill batches are not mixed with decodes (mixed chunks
    were opt-in, --enable-mixed-chunk), and its 8,192-token chunk never
    splits a ShareGPT prompt (≤ 1,024 tokens), so also ``chunked_prefill:
    false``; prefill budget 16,384 (max_prefill_tokens); 256 seqs (llmsim's
    default; SGLang sizes its running batch from the KV pool instead).
  - TensorRT-LLM batch-1 rows: one request alone, so only the cost model
    matters; llmsim defaults.
  ``--llmsim-defaults`` runs every row with llmsim's EngineConfig defaults
  instead (chunked prefill on, 8,192 budget), to show the sensitivity.
  vLLM 0.6's multi-step scheduling (``--num-scheduler-steps 10`` in the
  rows' version field) is ``num_scheduler_steps: 10``: prompts join only
  between blocks of ten decode iterations. Its streaming (tokens reach the
  client a block at a time, so the measured ITL is a block long) is not
  modelled: llmsim's ITL is the time between generated tokens. Other
  engine differences are not modelled; docs/accuracy.md discusses them.
* Seed 0 for every row.

Errors are signed: (llmsim − measured) / measured, in percent.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import math
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import generated_section  # noqa: E402

DATA = ROOT.parent / "shared" / "data"
CSV = DATA / "e2e" / "published_serving_results.csv"
ME = "benchmarks/e2e_validation.py"
BEGIN, END = generated_section.markers("e2e-table", ME)
TITLE = "Accuracy: Poisson and offline rows"  # heads a page --markdown creates
SEED = 0


@dataclass
class Mapped:
    gpu: str
    model: str
    tp: int
    weight_dtype: str
    kv_dtype: str
    kind: str                 # "ttft1" | "online" | "offline"
    workload: dict


def map_gpu(s: str) -> str | None:
    u = s.upper()
    if "A100" in u and "80" in u:
        return "a100-sxm-80gb"
    if "H100" in u and "PCIE" not in u:
        return "h100-sxm"
    return None


def map_model(s: str) -> str | None:
    u = s.lower().replace(" ", "")
    size = re.search(r"(\d+)b", u)
    if not size:
        return None
    b = size.group(1)
    if "llama-3.1" in u:
        return f"llama-3.1-{b}b" if b in ("8", "70") else None
    if u.startswith("llama-7b") or u.startswith("llama-70b") or "llama-2" in u:
        return f"llama-2-{b}b" if b in ("7", "13", "70") else None
    return None


def map_precision(s: str) -> tuple[str, str] | None:
    u = s.upper()
    if u.startswith("FP8"):
        return ("fp8", "fp8") if "FP8 KV" in u else ("fp8", "bf16")
    if u.startswith("FP16"):
        return "fp16", "fp16"
    if u.startswith("BF16"):
        return "bf16", "bf16"
    return None


SHAREGPT = {"input_tokens": {"dist": "sharegpt", "part": "input"},
            "output_tokens": {"dist": "sharegpt", "part": "output"}}


def map_row(row) -> tuple[Mapped | None, str]:
    """The llmsim setup for one published row, or None and why not."""
    gpu, model, prec = map_gpu(str(row.gpu)), map_model(str(row.model)), map_precision(str(row.precision))
    if gpu is None:
        return None, f"GPU {row.gpu!r} has no profile mapping"
    if model is None:
        return None, f"model {row.model!r} has no built-in profile mapping"
    if prec is None:
        return None, f"precision {row.precision!r} not mapped"
    tp = int(row.tp) if not _nan(row.tp) else 1
    if not _nan(row.pp) and int(row.pp) != 1:
        return None, "pipeline parallelism is not modelled"
    scen = str(row.scenario).lower()
    ds = str(row.dataset).lower()
    if scen.startswith("single request") and ds.startswith("synthetic"):
        wl = {"num_requests": 1, "arrival": {"type": "concurrency", "concurrency": 1},
              "input_tokens": {"dist": "fixed", "value": int(row.isl_mean)},
              "output_tokens": {"dist": "fixed", "value": int(row.osl_mean)}}
        return Mapped(gpu, model, tp, *prec, "ttft1", wl), ""
    if "sharegpt" not in ds:
        return None, f"dataset {row.dataset!r} not mapped"
    n = int(row.num_requests)
    if scen.startswith("online") and not _nan(row.request_rate_qps):
        wl = {"num_requests": n, "arrival": {"type": "poisson", "rate_per_s": float(row.request_rate_qps)}, **SHAREGPT}
        return Mapped(gpu, model, tp, *prec, "online", wl), ""
    if scen.startswith("offline"):
        wl = {"num_requests": n, "arrival": {"type": "concurrency", "concurrency": n}, **SHAREGPT}
        return Mapped(gpu, model, tp, *prec, "offline", wl), ""
    return None, f"scenario {row.scenario!r} not mapped"


def _nan(x) -> bool:
    try:
        return x is None or (isinstance(x, float) and math.isnan(x)) or str(x).strip() == ""
    except TypeError:
        return False


# (measured column, results.json key, label)
METRICS = {
    "ttft1": [("ttft_mean_ms", "mean_ttft_ms", "TTFT (ms)")],
    "online": [("ttft_p50_ms", "median_ttft_ms", "TTFT p50 (ms)"),
               ("tpot_p50_ms", "median_tpot_ms", "TPOT p50 (ms)"),
               ("itl_p50_ms", "median_itl_ms", "ITL p50 (ms)"),
               ("e2e_p50_ms", "median_e2el_ms", "E2E p50 (ms)")],
    "offline": [("throughput_req_s", "request_throughput", "throughput (req/s)"),
                ("throughput_output_tok_s", "output_throughput", "output (tok/s)")],
}


ENGINES = {
    "vllm": {"chunked_prefill": False, "max_num_batched_tokens": 4096, "max_num_seqs": 256},
    "sglang": {"chunked_prefill": False, "max_num_batched_tokens": 16384, "max_num_seqs": 256},
}


def engine_settings(engine: str, llmsim_defaults: bool = False, version: str = "") -> dict:
    """The engine's scheduling of the time, plus the stack's fitted CPU
    overheads (backend_profiles/<stack>.yaml: front end, iteration,
    response; physical costs of the serving process that a kernel-only
    model misses), plus the scheduling flags the row's version names
    (vLLM's ``--num-scheduler-steps``). TensorRT-LLM's batch-1 rows time
    the runtime without a server, so they get neither."""
    if llmsim_defaults:
        return {}
    from simulator.profiles.backend import load_backend

    e = str(engine).lower()
    for key, cfg in ENGINES.items():
        if e.startswith(key):
            steps = re.search(r"--num[-_]scheduler[-_]steps[ =](\d+)", str(version))
            flags = {"num_scheduler_steps": int(steps.group(1))} if steps else {}
            return {**cfg, **load_backend(key).overheads.model_dump(), **flags}
    return {}


def simulate_row(row, m: Mapped, llmsim_defaults: bool = False) -> dict:
    from simulator.runner import simulate
    from simulator.scenario.schema import Scenario

    sc = Scenario.model_validate({
        "name": str(row.row_id), "seed": SEED, "workload": m.workload,
        "pools": [{"model": m.model, "gpu": m.gpu, "tp": m.tp, "replicas": 1,
                   "engine": {"weight_dtype": m.weight_dtype, "kv_dtype": m.kv_dtype,
                              **engine_settings(row.engine, llmsim_defaults, row.engine_version)}}],
    })
    t = time.perf_counter()
    out = simulate(sc)
    res = dict(out.results)
    res["_wall_s"] = time.perf_counter() - t
    res["_calibration"] = res["llmsim"]["calibration"]["status"]
    return res


def short_engine(s: str) -> str:
    s = str(s)
    return "TRT-LLM" if s.startswith("TensorRT") else s


def run(csv: Path, llmsim_defaults: bool = False) -> tuple[list[dict], list[tuple[str, str]]]:
    import pandas as pd

    df = pd.read_csv(csv)
    rows, skipped = [], []
    for row in df.itertuples(index=False):
        m, why = map_row(row)
        if m is None:
            skipped.append((str(row.row_id), why))
            continue
        res = simulate_row(row, m, llmsim_defaults)
        for col, key, label in METRICS[m.kind]:
            meas = getattr(row, col)
            if _nan(meas):
                continue
            pred = res.get(key)
            err = (pred - meas) / meas * 100.0 if pred is not None and meas else None
            rows.append({"row_id": str(row.row_id), "engine": short_engine(row.engine),
                         "engine_version": str(row.engine_version), "kind": m.kind,
                         "setup": f"{m.model} {m.gpu} TP{m.tp} {m.weight_dtype}/{m.kv_dtype}",
                         "load": _load_label(m), "metric": label, "measured": float(meas),
                         "llmsim": pred, "error_pct": err, "calibration": res["_calibration"],
                         "wall_s": res["_wall_s"], "source_url": str(row.source_url)})
    return rows, skipped


def _load_label(m: Mapped) -> str:
    if m.kind == "ttft1":
        return f"1 req, in {m.workload['input_tokens']['value']}, out 1"
    if m.kind == "online":
        return f"Poisson {m.workload['arrival']['rate_per_s']:g}/s, {m.workload['num_requests']} req"
    return f"{m.workload['num_requests']} req at t=0"


def _fmt(v: float | None) -> str:
    if v is None:
        return "n/a"
    return f"{v:,.2f}" if abs(v) < 100 else f"{v:,.0f}"


def _err(v: float | None) -> str:
    return "n/a" if v is None else f"{v:+.0f} %"


def gpu_status() -> dict[str, str]:
    from simulator.profiles import load_hardware

    out = {}
    for g in ("a100-sxm-80gb", "h100-sxm"):
        try:
            out[g] = load_hardware(g).calibration.status
        except Exception as e:  # a profile mid-edit must not stop the report
            out[g] = f"unreadable ({type(e).__name__})"
    return out


def markdown(rows: list[dict], skipped: list[tuple[str, str]], wall: float, cmd: str,
             alt: list[dict] | None = None) -> str:
    today = _dt.date.today().isoformat()
    st = gpu_status()
    lines = [
        f"Generated {today} by `{cmd}` ({wall:.0f} s wall). GPU profiles at the time: "
        + ", ".join(f"`{g}` **{s}**" for g, s in st.items()) + ". "
        "Error = (llmsim − measured) / measured.",
        "",
        "| row | engine | setup (llmsim) | load | metric | measured | llmsim | error |",
        "|---|---|---|---|---|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(f"| `{r['row_id']}` | {r['engine']} {r['engine_version']} | {r['setup']} | {r['load']} | "
                     f"{r['metric']} | {_fmt(r['measured'])} | {_fmt(r['llmsim'])} | {_err(r['error_pct'])} |")
    lines += ["", "Median |error| by metric and engine:", "",
              "| metric | engine | rows | median abs error | range of signed error |", "|---|---|---:|---:|---|"]
    for (metric, eng), errs in _groups(rows).items():
        errs_s = sorted(errs)
        med = sorted(abs(e) for e in errs)[len(errs) // 2] if len(errs) % 2 else \
            sum(sorted(abs(e) for e in errs)[len(errs) // 2 - 1: len(errs) // 2 + 1]) / 2
        lines.append(f"| {metric} | {eng} | {len(errs)} | {med:.0f} % | {errs_s[0]:+.0f} … {errs_s[-1]:+.0f} % |")
    if alt:
        by_key = {(r["row_id"], r["metric"]): r for r in alt}
        lines += ["", "Sensitivity to the engine mapping: the same rows with llmsim's EngineConfig defaults "
                  "(`--llmsim-defaults`: chunked prefill mixed with decodes, 8,192-token budget) instead of each "
                  "engine's prefill-first scheduling. TensorRT-LLM rows are unaffected and left out.", "",
                  "| row | metric | measured | llmsim (engine defaults mapped) | llmsim (llmsim defaults) |",
                  "|---|---|---:|---:|---:|"]
        for r in rows:
            a = by_key.get((r["row_id"], r["metric"]))
            if a is None or r["kind"] == "ttft1":
                continue
            lines.append(f"| `{r['row_id']}` | {r['metric']} | {_fmt(r['measured'])} | {_fmt(r['llmsim'])} "
                         f"({_err(r['error_pct'])}) | {_fmt(a['llmsim'])} ({_err(a['error_pct'])}) |")
    urls = sorted({r["source_url"] for r in rows})
    lines += ["", "Measured values from (as cited in the CSV's `source_url` column):", ""] + [f"* <{u}>" for u in urls]
    if skipped:
        lines += ["", "Rows not simulated:", ""] + [f"* `{rid}`: {why}" for rid, why in skipped]
    else:
        lines += ["", "Every row of the file was simulated."]
    return "\n".join(lines)


def _groups(rows: list[dict]) -> dict:
    g: dict[tuple[str, str], list[float]] = {}
    for r in rows:
        if r["error_pct"] is not None:
            g.setdefault((r["metric"], r["engine"]), []).append(r["error_pct"])
    return g


def text_table(rows: list[dict]) -> str:
    hdr = f"{'row':46} {'metric':20} {'measured':>10} {'llmsim':>10} {'error':>8}"
    out = [hdr, "-" * len(hdr)]
    for r in rows:
        out.append(f"{r['row_id']:46} {r['metric']:20} {_fmt(r['measured']):>10} {_fmt(r['llmsim']):>10} "
                   f"{_err(r['error_pct']):>8}")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--markdown", metavar="PATH", help="rewrite the generated table section of this file")
    ap.add_argument("--csv", metavar="PATH", help="write the rows as CSV")
    ap.add_argument("--llmsim-defaults", action="store_true",
                    help="use llmsim's EngineConfig defaults for every row instead of each engine's")
    ap.add_argument("--data", metavar="CSV", default=str(CSV), help="published results file (default: %(default)s)")
    args = ap.parse_args(argv)
    csv = Path(args.data)
    if not csv.exists():
        print(f"e2e_validation: skipped: {csv} not found (the shared data directory is absent; it is expected "
              f"at ../shared/data next to the repository).")
        return 0
    t = time.perf_counter()
    rows, skipped = run(csv, args.llmsim_defaults)
    wall = time.perf_counter() - t
    print(text_table(rows))
    for rid, why in skipped:
        print(f"skipped {rid}: {why}")
    print(f"\nGPU profiles: {gpu_status()}; {len(rows)} comparisons in {wall:.1f} s")
    if args.csv:
        import pandas as pd
        pd.DataFrame(rows).to_csv(args.csv, index=False)
    if args.markdown:
        alt = None if args.llmsim_defaults else run(csv, True)[0]
        wall = time.perf_counter() - t
        cmd = generated_section.command(ME, options=[("--llmsim-defaults", args.llmsim_defaults),
                                                     ("--data", args.data if csv != CSV else None),
                                                     ("--markdown", args.markdown)])
        generated_section.write(args.markdown, markdown(rows, skipped, wall, cmd, alt), BEGIN, END, TITLE)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
