"""The user's wait: ``llmsim run -o DIR`` of 100,000 requests against the simulation alone.

    python benchmarks/user_wait.py              # 100,000 requests, 3 repeats
    python benchmarks/user_wait.py --quick      # 10,000 requests, 1 repeat

One Llama-3-8B replica on one H100 SXM, Poisson arrivals at 40 req/s of
U(16, 1000)-token prompts and U(8, 200)-token outputs (the replica keeps up:
its queue holds level). What a user waits for is the whole command:
start-up (imports, profiles), the simulation, results.json, the request
table, plots and the printed summary. Measured here:

* ``command``: ``llmsim run SCENARIO -o DIR`` as a child process (the console
  script's entry point), wall clock and the child's CPU time;
* ``simulate``: ``simulator.runner.simulate`` of the same scenario in this
  process, wall and CPU, and, after it, each later step in this process:
  results.json, the request table, the plots, the summary;
* ``mm1``: a textbook SimPy M/M/1 of the same request count in this process
  (engine_speed.py's yardstick), so a figure from a loaded machine can be
  read against what bare SimPy did at the same moment.

The target is command ≤ 1.5 × simulate. The machine may be shared: figures
are medians over ``--repeats``, and the CPU-time ratio is the one other
processes inflate least.
"""
from __future__ import annotations

import argparse
import io
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))



def scenario(n: int) -> dict:
    """The benchmark's scenario (see the module docstring) for ``n`` requests."""
    def uniform(lo: int, hi: int) -> dict:
        return {"dist": "uniform", "min": lo, "max": hi}

    return {"name": "user-wait", "seed": 1,
            "workload": {"num_requests": n, "arrival": {"type": "poisson", "rate_per_s": 40},
                         "input_tokens": uniform(16, 1000), "output_tokens": uniform(8, 200)},
            "pools": [{"name": "main", "model": "llama-3-8b", "gpu": "h100-sxm"}]}


def _clock():
    return time.perf_counter(), time.process_time()


def _since(t0) -> tuple[float, float]:
    w, c = _clock()
    return w - t0[0], c - t0[1]


def command(path: Path, out: Path) -> tuple[float, float]:
    """``llmsim run path -o out`` in a child: (wall s, child CPU s)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    subprocess.run([sys.executable, "-c", "from simulator.cli.app import main; main()", "run", str(path), "-o",
                    str(out)], check=True, stdout=subprocess.DEVNULL, cwd=ROOT)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def in_process(path: Path, out: Path) -> dict[str, tuple[float, float]]:
    """The command's steps timed one by one in this process."""
    from rich.console import Console

    from simulator.cli.rundir import write_run_dir
    from simulator.report.summary import summary_table
    from simulator.runner import simulate

    t = _clock()
    run = simulate(str(path))
    steps = {"simulate": _since(t)}
    t = _clock()
    write_run_dir(out, run, plots=False)
    steps["results.json + request table + timeline.csv"] = _since(t)
    t = _clock()
    from simulator.report.plots import write_run_plots

    write_run_plots(out, run.results, run.requests, run.timeline)
    steps["plots"] = _since(t)
    t = _clock()
    Console(file=io.StringIO(), width=200).print(summary_table(run.results))
    steps["summary"] = _since(t)
    return steps


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="10,000 requests, 1 repeat")
    ap.add_argument("--repeats", type=int, default=None, help="repeats (default 3; 1 with --quick)")
    ap.add_argument("--json", type=Path, default=None, help="also write the figures here")
    a = ap.parse_args()
    n = 10_000 if a.quick else 100_000
    repeats = a.repeats or (1 if a.quick else 3)
    from engine_speed import mm1

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "user-wait.json"
        path.write_text(json.dumps(scenario(n)))
        for r in range(repeats):
            cmd = command(path, Path(tmp) / f"cmd{r}")
            steps = in_process(path, Path(tmp) / f"steps{r}")
            t = _clock()
            mm1(n)
            rows.append({"command": cmd, **steps, "mm1": _since(t)})
    med = {k: (statistics.median(r[k][0] for r in rows), statistics.median(r[k][1] for r in rows)) for k in rows[0]}
    print(f"{n:,} requests, one H100 replica, median of {repeats} (wall s / CPU s):")
    for k, (w, c) in med.items():
        print(f"  {k:<45} {w:8.2f} {c:8.2f}")
    sim_w, sim_c = med["simulate"]
    cmd_w, cmd_c = med["command"]
    print(f"command / simulate: {cmd_w / sim_w:.2f}x wall, {cmd_c / sim_c:.2f}x CPU (target <= 1.5x)")
    print(f"simulate / bare SimPy M/M/1: {sim_w / med['mm1'][0]:.2f}x wall, {sim_c / med['mm1'][1]:.2f}x CPU")
    if a.json:
        a.json.write_text(json.dumps({"requests": n, "repeats": repeats, "median": med}, indent=2))


if __name__ == "__main__":
    os.environ.setdefault("MPLBACKEND", "Agg")
    main()
