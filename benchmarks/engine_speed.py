"""Engine speed and memory benchmark.

    python benchmarks/engine_speed.py            # full: 100,000 requests per case
    python benchmarks/engine_speed.py --quick    # 10x smaller, for smoke tests

Cases, all in this one process:

(a) one Llama-3-8B replica on one H100 SXM (vLLM-like defaults: max_num_seqs
    256, max_num_batched_tokens 8192, chunked prefill, block 16) with
    ShareGPT-like lengths (the ``sharegpt`` presets), Poisson arrivals at 80 %
    of its capacity. The capacity is measured first: a closed loop with
    4 x max_num_seqs users keeps the replica saturated, and its steady-state
    throughput is the completions between the 10th and 90th percentile finish
    times divided by that span (ramp-up and drain excluded).
(b) 64 such replicas behind round robin, at the same per-replica rate.
(c) a textbook SimPy M/M/1 (a generator process for arrivals, one process per
    customer, ``simpy.Resource(capacity=1)``, rho = 0.8), the yardstick.
(d) the replica of (a) with its prefix cache on (the default) and ~6K-token
    prompts that share prefixes: 4 apps with a system prompt of
    U(5,500, 5,900) tokens each, picked Zipf(1.1), then U(32, 512) tokens of
    the request's own (so 5,532-6,412 prompt tokens, 95 % of them a cached
    system prompt), ShareGPT-like outputs. Poisson at 80 % of this workload's
    own capacity, measured as for (a).
(e) 32 replicas of (d) behind ``prefix_aware``, at 32 x (d)'s rate.
    (d) and (e) report the token hit rate of the prefix cache, so it is
    visibly hit; their targets are those of (a) and (b).

Speed is simulated requests per second, the median over ``--repeats`` runs
(default 3; the machine may be shared, so single timings are noisy). The cases
are interleaved (a, b, d, e, c, a, b, d, e, c, ...) so that each repeat sees
similar background load, and ratios to the M/M/1 are taken within a repeat. For llmsim
three figures are printed: the runner's own ``sim_requests_per_wall_s`` (run.json)
(wall clock of workload generation + event loop; it excludes profile loading,
the setup checks and the results summary), the whole ``simulate()`` call timed
here on the wall clock, and the same call in process CPU time
(``time.process_time``), which other processes on the machine inflate much
less. For the M/M/1 it is the whole run, arrivals included, wall and CPU.

Memory is measured in separate, untimed runs under tracemalloc (which slows
Python down several-fold): the peak traced during ``simulate()``, minus the
per-request table (the Request objects with everything they reference, plus
the list holding them, and any block ids in ``Request.blocks``: none
after the run, since the runner drops a request's ids when it ends, and
open-loop requests with a system prompt, as in (d) and (e), get theirs only
at arrival, so the peak includes the ids of the requests in flight),
divided by the finished requests.
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import random
import statistics
import sys
import time
import tracemalloc
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
try:   # the installed llmsim (compiled by `pip install .`), else the checkout's plain Python
    import simulator
except ImportError:
    sys.path.insert(0, str(ROOT))
    import simulator

import numpy as np  # noqa: E402
import simpy  # noqa: E402

from simulator.runner import simulate  # noqa: E402
from simulator.scenario.schema import Scenario  # noqa: E402

MODEL, GPU = "llama-3-8b", "h100-sxm"
ENGINE = {"max_num_seqs": 256, "max_num_batched_tokens": 8192, "chunked_prefill": True, "block_size": 16,
          "gpu_memory_utilization": 0.9}
LENGTHS = {"input_tokens": {"dist": "sharegpt", "part": "input"},
           "output_tokens": {"dist": "sharegpt", "part": "output"}}
LOAD = 0.8
REPLICAS = 64
# (d)/(e): ~6K-token prompts, most of them one of a few shared system prompts.
PREFIX_WORKLOAD = {
    "system_prompt": {"apps": 4, "tokens": {"dist": "uniform", "min": 5_500, "max": 5_900},
                      "popularity": {"type": "zipf", "s": 1.1}},
    "input_tokens": {"dist": "uniform", "min": 32, "max": 512},
    "output_tokens": {"dist": "sharegpt", "part": "output"},
}
PREFIX_REPLICAS = 32

# The project's speed targets ((d) is held to (a)'s, (e) to (b)'s): a 10M-DAU peak
# hour must simulate in minutes on a laptop's cores.
TARGET_A = 25_000
TARGET_A_RATIO = 0.25
TARGET_B = 10_000
TARGET_MEM = 1024


def scenario(name: str, arrival: dict, n: int, replicas: int = 1, seed: int = 1, workload: dict | None = None,
             router: str = "round_robin") -> Scenario:
    return Scenario.model_validate({
        "name": name, "seed": seed,
        "workload": {"num_requests": n, "arrival": arrival, **(LENGTHS if workload is None else workload)},
        "pools": [{"model": MODEL, "gpu": GPU, "tp": 1, "replicas": replicas, "router": router,
                   "engine": ENGINE}],
    })


def saturation(n: int, workload: dict | None = None) -> dict:
    """Steady-state throughput of one saturated replica (closed loop)."""
    conc = 4 * ENGINE["max_num_seqs"]
    out = simulate(scenario("saturation", {"type": "concurrency", "concurrency": conc}, n, workload=workload))
    fin = np.sort(np.array([r.finish for r in out.requests]))
    lo, hi = int(0.1 * len(fin)), int(0.9 * len(fin))
    rate = (hi - lo) / (fin[hi] - fin[lo])
    ll = out.results["llmsim"]
    return {"concurrency": conc, "requests": n, "rate": rate, "naive_rate": out.results["request_throughput"],
            "mean_batch": ll["mean_batch_size"], "max_kv": ll["max_kv_utilization"],
            "preemptions": ll["preemptions"], "calibration": ll["calibration"]["status"],
            "token_hit_rate": ll["prefix_cache"].get("token_hit_rate")}


def run_llmsim(sc: Scenario) -> dict:
    """One timed simulate() call."""
    gc.collect()
    t, c = time.perf_counter(), time.process_time()
    out = simulate(sc)
    wall, cpu = time.perf_counter() - t, time.process_time() - c
    n = len(out.requests)
    res = out.results
    ll = res["llmsim"]
    return {
        "requests": n, "completed": res["completed"],
        "runner": out.timing["sim_requests_per_wall_s"], "wall": n / wall, "cpu": n / cpu,
        "sim_s": ll["simulated_seconds"], "iterations": ll["iterations"], "gpu_busy": ll["gpu_busy_fraction"],
        "mean_batch": ll["mean_batch_size"], "preemptions": ll["preemptions"],
        "ttft_p50": res["median_ttft_ms"], "ttft_p99": res["p99_ttft_ms"], "tpot_p50": res["median_tpot_ms"],
        "throughput": res["request_throughput"], "gap_segments": len(out.gaps),
        "token_hit_rate": ll["prefix_cache"].get("token_hit_rate"),
    }


# --- memory ------------------------------------------------------------------
_SHARED = (type(None), bool)


def table_bytes(requests: list) -> int:
    """Deep size of the per-request table: the list, each Request, and every
    object its slots reference that is not shared (small ints, interned
    strings, enum members and None are counted once or not at all)."""
    seen: set[int] = set()
    total = sys.getsizeof(requests)
    slots = type(requests[0]).__slots__ if requests else ()
    for r in requests:
        total += sys.getsizeof(r)
        for s in slots:
            v = getattr(r, s, None)
            if isinstance(v, _SHARED):
                continue
            i = id(v)
            if i in seen:
                continue
            seen.add(i)
            total += sys.getsizeof(v)
            if type(v) is tuple:    # Request.blocks: the ids (shared heads counted once)
                for x in v:
                    if id(x) not in seen:
                        seen.add(id(x))
                        total += sys.getsizeof(x)
    return total


def measure_memory(sc: Scenario) -> dict:
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    tracemalloc.reset_peak()
    out = simulate(sc)
    cur, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    table = table_bytes(out.requests)
    done = out.results["completed"]
    peak_d, kept_d = peak - base, cur - base
    return {"peak": peak_d, "retained": kept_d, "table": table, "finished": done,
            "beyond_peak_per_req": (peak_d - table) / done, "beyond_kept_per_req": (kept_d - table) / done,
            "table_per_req": table / len(out.requests)}


# --- bare SimPy M/M/1 ----------------------------------------------------------
def mm1(n: int, rho: float = 0.8, seed: int = 1) -> dict:
    """Textbook process-based M/M/1: arrivals generator + Resource(capacity=1)."""
    rng = random.Random(seed)
    lam, mu = rho, 1.0
    env = simpy.Environment()
    server = simpy.Resource(env, capacity=1)
    waits: list[float] = []

    def customer(env, server):
        arrive = env.now
        with server.request() as req:
            yield req
            yield env.timeout(rng.expovariate(mu))
        waits.append(env.now - arrive)

    def source(env, server):
        for _ in range(n):
            env.process(customer(env, server))
            yield env.timeout(rng.expovariate(lam))

    gc.collect()
    t, c = time.perf_counter(), time.process_time()
    env.process(source(env, server))
    env.run()
    wall, cpu = time.perf_counter() - t, time.process_time() - c
    return {"requests": n, "wall": n / wall, "cpu": n / cpu, "mean_sojourn": statistics.fmean(waits),
            "theory": 1.0 / (mu - lam)}


def verdict(ok: bool) -> str:
    return "MET" if ok else "NOT MET"


def _fmt(xs) -> str:
    return ", ".join(f"{x:,.0f}" for x in xs)


def _capacity_lines(sat: dict, label: str) -> None:
    hit = "" if sat["token_hit_rate"] is None else f", prefix-cache token hit rate {sat['token_hit_rate']:.1%}"
    print(f"\ncapacity {label}: closed loop, {sat['concurrency']} users (4 x max_num_seqs), {sat['requests']} "
          f"requests, cost model '{sat['calibration']}': steady-state throughput (finishes between the 10th and "
          f"90th percentile finish times / that span) {sat['rate']:.2f} req/s (whole-run average incl. ramp and "
          f"drain {sat['naive_rate']:.2f}); mean batch {sat['mean_batch']:.0f}, max KV use {sat['max_kv']:.0%}, "
          f"preemptions {sat['preemptions']}{hit}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="10x fewer requests (smoke test)")
    ap.add_argument("--repeats", type=int, default=3, help="timed repeats per case (median reported)")
    ap.add_argument("--no-memory", action="store_true", help="skip the tracemalloc runs")
    ap.add_argument("--json", metavar="PATH", help="also write the figures as JSON")
    args = ap.parse_args(argv)
    scale = 10 if args.quick else 1
    n = 100_000 // scale
    n_sat = 20_000  # same load in --quick, so both modes measure the same thing

    from simulator.engine import compiled

    build = "compiled (mypyc)" if compiled() else "plain Python"
    print(f"llmsim engine speed ({'quick' if args.quick else 'full'}), {build} engine from "
          f"{Path(simulator.__file__).parent}, python {sys.version.split()[0]}, "
          f"simpy {simpy.__version__}, {os.cpu_count()} CPUs; {args.repeats} repeats, medians; "
          f"single process, single thread; load average at start {os.getloadavg()[0]:.2f}")
    print(f"model {MODEL} on {GPU}, TP1, engine {ENGINE}; lengths: (a)/(b) sharegpt presets, (d)/(e) "
          f"{PREFIX_WORKLOAD}")

    sat = saturation(n_sat)
    rate = LOAD * sat["rate"]
    _capacity_lines(sat, "(a)/(b)")
    print(f"load: Poisson at {LOAD:.0%} x {sat['rate']:.2f} = {rate:.2f} req/s per replica "
          f"({rate * REPLICAS:.1f} req/s for {REPLICAS} replicas)")
    sat_p = saturation(n_sat, PREFIX_WORKLOAD)
    rate_p = LOAD * sat_p["rate"]
    _capacity_lines(sat_p, "(d)/(e), prefix cache on")
    print(f"load: Poisson at {LOAD:.0%} x {sat_p['rate']:.2f} = {rate_p:.2f} req/s per replica "
          f"({rate_p * PREFIX_REPLICAS:.1f} req/s for {PREFIX_REPLICAS} replicas)")

    scs = {
        "a": scenario("speed-1", {"type": "poisson", "rate_per_s": rate}, n),
        "b": scenario("speed-64", {"type": "poisson", "rate_per_s": rate * REPLICAS}, n, replicas=REPLICAS),
        "d": scenario("speed-prefix-1", {"type": "poisson", "rate_per_s": rate_p}, n, workload=PREFIX_WORKLOAD),
        "e": scenario("speed-prefix-32", {"type": "poisson", "rate_per_s": rate_p * PREFIX_REPLICAS}, n,
                      replicas=PREFIX_REPLICAS, workload=PREFIX_WORKLOAD, router="prefix_aware"),
    }
    keys = tuple(scs)
    # Interleave the cases so each repeat of (a), (b), (d), (e) and (c) sees
    # similar contention from whatever else runs on the machine; ratios are
    # taken within a repeat, then the median over repeats.
    runs: dict[str, list[dict]] = {k: [] for k in (*keys, "c")}
    for i in range(args.repeats):
        for key in keys:
            runs[key].append(run_llmsim(scs[key]))
        runs["c"].append(mm1(n, seed=i + 1))
    med = statistics.median
    rows = {}
    for key in keys:
        rs = runs[key]
        rows[key] = {**rs[-1],
                     "runner": med(r["runner"] for r in rs), "wall": med(r["wall"] for r in rs),
                     "cpu": med(r["cpu"] for r in rs),
                     "x_wall": med(r["runner"] / c["wall"] for r, c in zip(rs, runs["c"])),
                     "x_cpu": med(r["cpu"] / c["cpu"] for r, c in zip(rs, runs["c"])),
                     "all": {k: [r[k] for r in rs] for k in ("runner", "wall", "cpu")}}
    mm = {**runs["c"][-1], "wall": med(c["wall"] for c in runs["c"]), "cpu": med(c["cpu"] for c in runs["c"]),
          "all": {k: [c[k] for c in runs["c"]] for k in ("wall", "cpu")}}

    for key in keys:
        r, pool = rows[key], scs[key].pools[0]
        hit = "" if r["token_hit_rate"] is None else f", prefix-cache token hit rate {r['token_hit_rate']:.1%}"
        print(f"\n({key}) {pool.replicas} replica(s), {pool.router.type}, {r['requests']} requests "
              f"({r['completed']} completed), {r['sim_s']:.0f} simulated s, {r['iterations']:,} iterations, "
              f"mean batch {r['mean_batch']:.1f}, preemptions {r['preemptions']}, TTFT p50/p99 "
              f"{r['ttft_p50']:.1f}/{r['ttft_p99']:.1f} ms, TPOT p50 {r['tpot_p50']:.2f} ms, "
              f"{r['gap_segments']:,} ITL segments{hit}")
        print(f"    runner sim_requests_per_wall_s (generation + event loop, wall): "
              f"median {r['runner']:>8,.0f}  [{_fmt(r['all']['runner'])}]")
        print(f"    whole simulate() call, wall clock:                           "
              f"median {r['wall']:>8,.0f}  [{_fmt(r['all']['wall'])}]")
        print(f"    whole simulate() call, process CPU time:                     "
              f"median {r['cpu']:>8,.0f}  [{_fmt(r['all']['cpu'])}]")
    print(f"\n(c) bare SimPy M/M/1, {n} customers, rho 0.8 (mean sojourn {mm['mean_sojourn']:.2f}, "
          f"theory {mm['theory']:.2f})")
    print(f"    wall clock:       median {mm['wall']:>8,.0f} customers/s  [{_fmt(mm['all']['wall'])}]")
    print(f"    process CPU time: median {mm['cpu']:>8,.0f} customers/s  [{_fmt(mm['all']['cpu'])}]")

    labels = {"a": "(a) 1 replica", "b": "(b) 64 replicas", "d": "(d) 1, prefix", "e": "(e) 32, prefix"}
    print("\nsummary, simulated requests per second (medians over repeats; ratios within a repeat):")
    print(f"  {'':16}{'runner (wall)':>15}{'simulate (wall)':>17}{'simulate (CPU)':>16}"
          f"{'x M/M/1 (wall)':>16}{'x M/M/1 (CPU)':>15}{'token hits':>12}")
    for key in keys:
        r = rows[key]
        hit = "-" if r["token_hit_rate"] is None else f"{r['token_hit_rate']:.1%}"
        print(f"  {labels[key]:16}{r['runner']:>15,.0f}{r['wall']:>17,.0f}{r['cpu']:>16,.0f}"
              f"{r['x_wall']:>16.2f}{r['x_cpu']:>15.2f}{hit:>12}")
    print(f"  {'(c) M/M/1':16}{mm['wall']:>15,.0f}{mm['wall']:>17,.0f}{mm['cpu']:>16,.0f}")

    mem = {}
    if not args.no_memory:
        print("\nmemory (separate untimed runs under tracemalloc):")
        for key in keys:
            mem[key] = m = measure_memory(scs[key])
            print(f"  ({key}) peak {m['peak'] / 2**20:.1f} MiB, retained after the run {m['retained'] / 2**20:.1f} MiB, "
                  f"request table {m['table'] / 2**20:.1f} MiB ({m['table_per_req']:.0f} B/request); "
                  f"beyond the table: peak {m['beyond_peak_per_req']:.0f} B, retained "
                  f"{m['beyond_kept_per_req']:.0f} B per finished request")

    print("\ntargets (wall: the runner's figure; CPU: this process's CPU time, robust to other load)"
          + (" -- quick mode: indicative only, the targets are for the full run:" if args.quick else ":"))
    for key, target in (("a", TARGET_A), ("d", TARGET_A)):
        r = rows[key]
        print(f"  ({key}) >= {target:,} req/s on one core: wall {verdict(r['runner'] >= target)} "
              f"({r['runner']:,.0f}), CPU {verdict(r['cpu'] >= target)} ({r['cpu']:,.0f})")
        print(f"  ({key}) >= {TARGET_A_RATIO}x bare M/M/1: wall {verdict(r['x_wall'] >= TARGET_A_RATIO)} "
              f"({r['x_wall']:.2f}x), CPU {verdict(r['x_cpu'] >= TARGET_A_RATIO)} ({r['x_cpu']:.2f}x)")
    for key in ("b", "e"):
        r = rows[key]
        print(f"  ({key}) >= {TARGET_B:,} req/s: wall {verdict(r['runner'] >= TARGET_B)} ({r['runner']:,.0f}), "
              f"CPU {verdict(r['cpu'] >= TARGET_B)} ({r['cpu']:,.0f})")
    if mem:
        worst = max(mem, key=lambda k: mem[k]["beyond_peak_per_req"])
        print(f"  memory <= {TARGET_MEM} B per finished request beyond the table (tracemalloc peak): "
              f"{verdict(mem[worst]['beyond_peak_per_req'] <= TARGET_MEM)} "
              f"(worst ({worst}) {mem[worst]['beyond_peak_per_req']:.0f} B)")
    print(f"\nload average at end {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs (other processes inflate wall "
          f"times; the CPU-time figures are less affected)")
    if args.json:
        Path(args.json).write_text(json.dumps({"saturation": sat, "rate_per_replica": rate,
                                               "saturation_prefix": sat_p, "rate_per_replica_prefix": rate_p,
                                               "cases": rows, "mm1": mm, "memory": mem, "quick": args.quick,
                                               "compiled": compiled()},
                                              indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
