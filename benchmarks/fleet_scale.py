"""Fleet-scale benchmark: the 10M-DAU peak hour, sharded over the local cores.

    python benchmarks/fleet_scale.py                       # the whole peak hour (~18M requests)
    python benchmarks/fleet_scale.py --duration 60         # the first simulated minute of it
    python benchmarks/fleet_scale.py --fraction 0.25       # a quarter of the fleet, full hour
    python benchmarks/fleet_scale.py --scenario chatbot --day   # a 24 h diurnal day of the chatbot shard
    python benchmarks/fleet_scale.py --one-shard           # one of the 64 shards, in this process

``dau-10m`` (see its header) is a 1/64 shard of the fleet: 78.125 of the
5,000 req/s on 13 of 832 TP-8 nodes. Here the whole fleet is run at full
fidelity: ``workload.arrival.rate_per_s = 5000 x fraction`` on
``832 x fraction`` nodes for ``--duration`` simulated seconds (default
3,600: the peak hour), as ``--shards`` shards of 13 nodes each (64 x
fraction; ``llmsim run --shards``: sessions hashed to shards, replicas
divided, records merged exactly) on a local process pool with one worker
per core. ``--day`` runs ``chatbot`` (a 1/2000 shard of the consumer
chatbot, autoscaled) over a whole day of its diurnal profile as a plain
run (its autoscalers cannot be sharded).

This VM's speed drifts by ±25 % over minutes (steal time), so the
benchmark also times engine_speed's bare SimPy M/M/1 (100,000 customers)
just before and just after the run: its customers per CPU-second say how
fast the machine was, and a wall time can be read against it.

Measured: wall time, simulated requests per wall-second, and peak memory
(max RSS of this process and, separately, of the largest worker, from
``resource.getrusage``; psutil's sum over the live process tree is sampled
too when installed). Prints one markdown row and, with ``--json``, the
figures as JSON.
"""
from __future__ import annotations

import argparse
import json
import resource
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NODES, RATE, SHARD_NODES = 832, 5000.0, 13


def _tree_rss_sampler(stop: threading.Event, peak: list[float]) -> None:
    try:
        import psutil
    except ImportError:
        return
    me = psutil.Process()
    while not stop.wait(0.5):
        try:
            procs = [me, *me.children(recursive=True)]
            peak[0] = max(peak[0], sum(p.memory_info().rss for p in procs) / 2**20)
        except psutil.Error:
            pass


def _run(args) -> tuple[dict, list[str]]:
    from simulator.planning.executors import ExecutorOptions, make_executor
    from simulator.scenario.load import load_scenario
    from simulator.sharding import run_sharded

    if args.day:   # autoscaled, so one shard: a plain run, which holds the records once
        from simulator.runner import simulate

        sets = ["workload.duration_s=86400", "workload.arrival.profile.peak_at_s=50400", "cost.monthly.method=day"]
        sc, path = load_scenario(str(ROOT / "scenarios" / "chatbot.yaml"), sets)
        return simulate(sc, source=path).results, sets
    nodes = round(NODES * args.fraction)
    shards = max(1, nodes // SHARD_NODES)
    sets = [f"workload.arrival.rate_per_s={RATE * args.fraction:g}", f"pools.chat.replicas={nodes}",
            f"workload.duration_s={args.duration:g}"]
    sc, path = load_scenario(str(ROOT / "scenarios" / "dau-10m.yaml"), sets)
    if args.one_shard:   # what one worker simulates per job (draw included), in this process, plus the
        # shard's own results summary, which a worker skips (run_shard: the merge computes the figures)
        from simulator.runner import simulate
        from simulator.sharding import plan_shards

        plan = plan_shards(sc, shards, path)
        return (simulate(plan.scenarios[0], source=path, subset=plan.subsets[0]).results,
                sets + [f"shard 0 of {shards}"])
    with make_executor("local", ExecutorOptions(workers=args.workers)) as ex:
        out = run_sharded(sc, shards, source=path, executor=ex)
    return out.results, sets + [f"--shards {shards}"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--duration", type=float, default=3600.0, help="simulated seconds of the peak hour")
    ap.add_argument("--fraction", type=float, default=1.0, help="share of the fleet and its traffic")
    ap.add_argument("--workers", type=int, default=None, help="local processes (default: one per core)")
    ap.add_argument("--scenario", choices=["dau-10m", "chatbot"], default="dau-10m")
    ap.add_argument("--day", action="store_true", help="with --scenario chatbot: a 24 h diurnal day")
    ap.add_argument("--one-shard", action="store_true",
                    help="only the first shard, in this process: a worker's time and memory per job")
    ap.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = ap.parse_args()
    if args.day != (args.scenario == "chatbot"):
        ap.error("--day goes with --scenario chatbot (and chatbot is only benchmarked as a day)")
    if args.one_shard and args.day:
        ap.error("--one-shard is a shard of the 10M-DAU hour; the chatbot day is one plain run")
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from engine_speed import mm1

    yard_before = mm1(100_000)["cpu"]
    stop, tree = threading.Event(), [0.0]
    sampler = threading.Thread(target=_tree_rss_sampler, args=(stop, tree), daemon=True)
    sampler.start()
    def cpu(who: int) -> float:
        r = resource.getrusage(who)
        return r.ru_utime + r.ru_stime

    cpu0 = cpu(resource.RUSAGE_SELF)
    wall = time.perf_counter()
    results, sets = _run(args)
    wall = time.perf_counter() - wall
    stop.set()
    parent_cpu_s = cpu(resource.RUSAGE_SELF) - cpu0   # drawing and dealing the rows, receiving, merging
    workers_cpu_s = cpu(resource.RUSAGE_CHILDREN)
    yard_after = mm1(100_000)["cpu"]
    from simulator.engine import compiled

    l = results["llmsim"]
    n = results["completed"] + results["failed"]
    fig = {
        "scenario": args.scenario, "settings": sets, "requests": n, "completed": results["completed"],
        "simulated_s": l["simulated_seconds"], "wall_s": wall, "requests_per_wall_s": n / wall,
        # CPU seconds of this process and its workers: what a busy, shared machine does not inflate
        "cpu_s": parent_cpu_s + workers_cpu_s, "parent_cpu_s": parent_cpu_s, "workers_cpu_s": workers_cpu_s,
        "mm1_customers_per_cpu_s": [yard_before, yard_after],
        "parent_max_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "largest_worker_max_rss_mib": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024,
        "tree_peak_rss_mib": tree[0] or None,
        "p99_ttft_ms": results["p99_ttft_ms"], "p99_tpot_ms": results["p99_tpot_ms"],
        "gpus": l["gpus"], "monthly_usd": l["cost"]["monthly_usd"],
        "engine_build": "compiled" if compiled() else "python",
    }
    print(f"engine build: {fig['engine_build']} (pip install . compiles it; a checkout or editable install "
          f"runs plain Python)")
    print(f"machine speed: bare SimPy M/M/1 at {yard_before:,.0f} customers per CPU-second before the run, "
          f"{yard_after:,.0f} after")
    if workers_cpu_s:
        print(f"CPU: {parent_cpu_s:,.0f} s in this process (the draw, the deal, receiving and merging), "
              f"{workers_cpu_s:,.0f} s in workers")
    print("| scenario | requests | simulated s | wall s | CPU s | req/wall-s | parent RSS MiB | largest worker RSS MiB "
          "| tree peak MiB | p99 TTFT ms | p99 TPOT ms |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    tree_s = f"{fig['tree_peak_rss_mib']:,.0f}" if fig["tree_peak_rss_mib"] else "n/a"
    print(f"| {args.scenario} | {n:,} | {fig['simulated_s']:,.0f} | {wall:,.0f} | {fig['cpu_s']:,.0f} "
          f"| {fig['requests_per_wall_s']:,.0f} "
          f"| {fig['parent_max_rss_mib']:,.0f} | {fig['largest_worker_max_rss_mib']:,.0f} | {tree_s} "
          f"| {fig['p99_ttft_ms']:.0f} | {fig['p99_tpot_ms']:.1f} |")
    if args.json is not None:
        args.json.write_text(json.dumps(fig, indent=2) + "\n")


if __name__ == "__main__":
    main()
