"""How long the case studies' commands take, typed as the pages show them: their wall-time tables.

    python benchmarks/wall_times.py --write                  # time every command (9 min, compiled, 2 cores), rewrite the tables
    python benchmarks/wall_times.py --only quickcode         # time one table's commands and print it

Each command runs as its own process, from the repository root, through the
``llmsim`` the running Python installed (the compiled build after ``pip
install .``, plain Python in an editable install: the table's first line
says which), one at a time, its ``-o`` folder in a temporary directory. A
row gives the command's wall time and the work it did, read from what it
wrote: requests simulated (however each ended), ladder steps, plan runs.
Wall times are the machine's; the header names its CPU, its cores and the
build. Simulated figures are seeded and the same on any machine.

tests/test_wall_times.py renders every table with stand-in figures and
holds the pages' tables to the same commands and words.
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Optional

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
import generated_section  # noqa: E402
import machine  # noqa: E402

ME = "benchmarks/wall_times.py"


@dataclass(frozen=True)
class Row:
    """One command as the page shows it; ``what`` is the words in brackets
    after it, ``{n}`` standing for the work counted (``count``: requests,
    steps or runs, read from its output folder)."""

    command: str
    what: str
    count: Optional[str] = None


TABLES: dict[str, tuple[str, list[Row]]] = {
    "autocomplete": ("docs/case-studies.md", [
        Row("llmsim run scenarios/autocomplete.yaml -o out/autocomplete", "1/4 shard, {n} requests", "requests"),
        Row("llmsim run scenarios/autocomplete.yaml --ladder -o out/autocomplete-ladder", "{n} steps", "steps"),
        Row("llmsim check scenarios/autocomplete.yaml", "1/4 shard, 120 s of session starts"),
        Row("llmsim run scenarios/autocomplete.yaml --set workload.arrival.rate_per_s=32 --set "
            "pools.autocomplete.replicas=16 --set product.slices=1 -o out/autocomplete-fleet",
            "the full fleet, {n} requests", "requests"),
    ]),
    "chatbot": ("docs/case-studies.md", [
        Row("llmsim run scenarios/chatbot.yaml --ladder -o out/chatbot", "the peak half hour, {n} steps", "steps"),
        Row("llmsim run scenarios/chatbot.yaml --set workload.duration_s=86400 --set "
            "workload.arrival.profile.peak_at_s=50400 --set cost.monthly.method=day -o out/chatbot-day",
            "the whole simulated day, {n} requests", "requests"),
    ]),
    "dau-10m": ("docs/case-studies-dau-quickcode.md", [
        Row("llmsim run scenarios/dau-10m.yaml -o out/dau", "1/64 shard, {n} requests", "requests"),
        Row("llmsim run scenarios/dau-10m.yaml --ladder -o out/dau-ladder",
            "independent steps: the baseline and its {n} variants", "variants"),
        Row("llmsim check scenarios/dau-10m.yaml", "120 s of arrivals"),
        Row("llmsim plan scenarios/dau-10m.yaml --vary pools.chat.replicas=10..15 --workers 1 -o out/dau-plan",
            "{n} runs", "runs"),
        Row("llmsim plan scenarios/dau-10m.yaml --vary pools.chat.replicas=2..24 --vary "
            "pools.chat.gpu=h100-sxm,h200,b200,b300,mi300x,mi355x --set pools.chat.usd_per_gpu_hour=null "
            "--set workload.duration_s=120 --workers 1 -o out/dau-gpus", "six GPUs, {n} runs", "runs"),
        Row("llmsim run scenarios/dau-10m.yaml --set workload.arrival.rate_per_s=5000 --set pools.chat.replicas=832 "
            "--set workload.duration_s=10 --set product.slices=1 -o out/dau-fleet",
            "the full fleet, 10 simulated seconds, {n} requests", "requests"),
    ]),
    "quickcode": ("docs/case-studies-dau-quickcode.md", [
        Row("llmsim run scenarios/quickcode.yaml -o out/quickcode", '"before", {n} requests', "requests"),
        Row("llmsim run scenarios/quickcode.yaml --ladder -o out/quickcode-ladder", "{n} steps", "steps"),
        Row("llmsim check scenarios/quickcode.yaml", '"after", 120 s of burst starts'),
    ]),
    "ttft-program": ("docs/case-studies-ttft-agents.md", [
        Row("llmsim run scenarios/ttft-program.yaml -o out/ttft", '"today", {n} turns',
            "requests"),
        Row("llmsim run scenarios/ttft-program.yaml --ladder -o out/ttft-ladder", "{n} steps", "steps"),
        Row("llmsim check scenarios/ttft-program.yaml", "the final step"),
    ]),
    "coding-agent": ("docs/case-studies-ttft-agents.md", [
        Row("llmsim run scenarios/coding-agent.yaml -o out/coding-agent",
            "240 sessions, {n} calls", "requests"),
        Row("llmsim run scenarios/coding-agent.yaml --ladder -o out/coding-agent-ladder", "{n} steps", "steps"),
        Row("llmsim check scenarios/coding-agent.yaml", "72 sessions"),
    ]),
}


def block_name(table: str) -> str:
    return f"wall-times-{table}"


def _count(kind: Optional[str], out: Path) -> Optional[int]:
    """The work a command did, from the folder it wrote (None: it writes none)."""
    if kind is None:
        return None
    if kind == "requests":     # every request once, however it ended (cancelled and shed ones too)
        res = json.loads((out / "results.json").read_text())
        return sum(int(v) for v in res["llmsim"]["request_status"].values())
    if kind in ("steps", "variants"):
        with open(out / "ladder.csv") as f:
            steps = len(list(csv.DictReader(f)))
        return steps - 1 if kind == "variants" else steps
    if kind == "runs":
        return len(list((out / "points").glob("*.json")))
    raise ValueError(kind)


def _llmsim() -> str:
    """The ``llmsim`` installed beside the running Python (so the build measured is the one it imports)."""
    script = Path(sys.executable).parent / "llmsim"
    return str(script) if script.exists() else "llmsim"


def measure(row: Row, folder: Path) -> tuple[float, Optional[int]]:
    """(seconds, work) of one command, run as its own process from the repository root."""
    args = shlex.split(row.command)
    out = None
    if "-o" in args:
        i = args.index("-o")
        out = folder / Path(args[i + 1]).name
        args[i + 1] = str(out)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    t0 = time.perf_counter()
    p = subprocess.run([_llmsim(), *args[1:], "--exit-zero"] if args[1] == "run" else [_llmsim(), *args[1:]],
                       cwd=ROOT, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    verdict = args[1] == "plan" and p.returncode == 1 and "no combination meets the SLO" in p.stderr
    if p.returncode != 0 and not verdict:     # a plan that finds no count still ran its runs
        raise RuntimeError(f"{row.command}: exit {p.returncode}\n{p.stderr[-2000:]}")
    return seconds, (_count(row.count, out) if out is not None else None)


def _seconds(s: float) -> str:
    return f"{s:.1f} s" if s < 10 else f"{s:,.0f} s"


def build() -> str:
    """Which llmsim the timings ran: the compiled engine or plain Python."""
    probe = subprocess.run([sys.executable, "-c", "import simulator.engine.replica as r; print(r.__file__)"],
                           cwd=tempfile.gettempdir(), capture_output=True, text=True,
                           env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    path = probe.stdout.strip()
    return "the compiled build" if path.endswith((".so", ".pyd")) else "plain Python (no compiled build installed)"


def render(table: str, figures: list[tuple[float, Optional[int]]], where: str, day: str) -> str:
    """The block: the command that regenerates it, where it ran, and one row per command."""
    _, rows = TABLES[table]
    cmd = generated_section.command(ME, options=[("--only", table), ("--write", True)])
    lines = [f"Generated {day} by `{cmd}` on {where}.", "",
             "| command | wall time |", "|---|---:|"]
    for row, (seconds, n) in zip(rows, figures):
        what = row.what.format(n=f"{n:,}" if n is not None else "")
        lines.append(f"| `{row.command}` ({what}) | {_seconds(seconds)} |")
    return "\n".join(lines)


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", action="append", choices=sorted(TABLES), help="time this table's commands (repeatable)")
    ap.add_argument("--write", action="store_true", help="rewrite the tables on the pages")
    a = ap.parse_args(argv)
    where = f"{machine.describe()}, {build()}"
    day = date.today().isoformat()
    for table in a.only or list(TABLES):
        page, rows = TABLES[table]
        with tempfile.TemporaryDirectory() as tmp:
            figures = []
            for row in rows:
                figures.append(measure(row, Path(tmp)))
                print(f"{figures[-1][0]:7.1f} s  {row.command}", file=sys.stderr, flush=True)
        section = render(table, figures, where, day)
        print(section + "\n")
        if a.write:
            begin, end = generated_section.markers(block_name(table), ME)
            text = (ROOT / page).read_text()
            if begin not in text:
                raise SystemExit(f"{page} has no {block_name(table)} block")
            generated_section.update_markdown(ROOT / page, section, begin, end)
    return 0


if __name__ == "__main__":
    sys.exit(main())
