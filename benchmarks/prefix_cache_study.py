"""Prefix-cache study: the autocomplete cliff, routers on 8 replicas, chat turns.

    python benchmarks/prefix_cache_study.py                                  # print the tables (~1 min)
    python benchmarks/prefix_cache_study.py --quick                          # smaller loads (~10 s)
    python benchmarks/prefix_cache_study.py --markdown docs/prefix-cache.md  # also write the doc

Three checks of what llmsim's prefix cache (engine/prefix_cache.py,
docs/how-it-works.md "Prefix cache and cancellation") does to latency:

a. Autocomplete cliff. Copilot-style editing sessions (Llama-3.1-8B on H100
   SXM, 4-8K-token files, 15-35 output tokens, 50 ms debounce, 2-6 typing
   bursts per file, the editing model's defaults otherwise). First the
   cost model alone: a cold 6K-token prefill on one H100 against a warm one
   that prefills only the tail after the edit. Then the same fleet of 8
   replicas behind ``prefix_aware`` with the cache capped from 0 tokens up
   (``prefix_cache_capacity_tokens``), and off: TTFT percentiles against the
   token hit rate.
b. Routers on 8 replicas: the same load under round_robin,
   least_outstanding, session_affinity and prefix_aware, each row's hit rate
   against the ideal: what one unbounded cache would have hit on the very
   same admissions (computed from the requests' block ids).
c. Chat sessions: TTFT by turn index (a request's rank, by arrival, within its
   session) with the cache on (session_affinity) and off.

TTFT here is over every request that got its first token, including
autocomplete requests cancelled afterwards (vLLM bench's percentiles count
finished requests only, which hides exactly the slow ones a newer keystroke
cancelled). Hit rates are llmsim's: over first admissions (a request
cancelled while queued is never looked up). Everything is seeded: the
tables are the same on every machine; only the wall times differ.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import math
import sys
import time
from collections import defaultdict
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Optional, Sequence

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import machine  # noqa: E402
import numpy as np  # noqa: E402

from simulator.costmodel import CostModel  # noqa: E402
from simulator.profiles import load_hardware, load_model  # noqa: E402
from simulator.runner import RunOutput, simulate  # noqa: E402
from simulator.scenario.schema import Scenario  # noqa: E402
from workloads.request import Request, Status  # noqa: E402

MODEL, GPU = "llama-3.1-8b", "h100-sxm"
REPLICAS = 8
BUDGET_MS = 200.0          # the autocomplete TTFT budget (scenarios/autocomplete.yaml: p95 < 200 ms)
COLD_PROMPT = 6000
SEED = 0
ROUTERS = ("round_robin", "least_outstanding", "session_affinity", "prefix_aware")
CHAT_ROUTER = "session_affinity"
DOC_COMMAND = "python benchmarks/prefix_cache_study.py --markdown docs/prefix-cache.md"


@dataclass(frozen=True)
class Size:
    """Loads of one version of the study (sessions, session starts per second)."""

    name: str
    ac_sessions: int
    ac_rate: float
    chat_sessions: int
    chat_rate: float
    chat_replicas: int
    capacities: tuple     # prefix_cache_capacity_tokens of the sweep (None: KV-bounded default)


FULL = Size("full", ac_sessions=600, ac_rate=10.0, chat_sessions=1000, chat_rate=5.0, chat_replicas=2,
            capacities=(0, 4_000, 8_000, 16_000, 32_000, None))
QUICK = Size("quick", ac_sessions=200, ac_rate=20.0, chat_sessions=300, chat_rate=5.0, chat_replicas=2,
             capacities=(4_000, None))
BURSTS = (2, 6)   # typing bursts per file: ~35-s sessions (the default 3-20 makes ~100 s)


# --- scenarios ---------------------------------------------------------------
def autocomplete_scenario(size: Size, router: str = "prefix_aware", replicas: int = REPLICAS,
                          prefix_cache: bool = True, capacity=None, sessions: Optional[int] = None,
                          rate: Optional[float] = None) -> dict:
    """Copilot-style editing sessions on Llama-3.1-8B / H100 SXM: workloads/autocomplete.py's editing model
    with 4-8K-token files, 15-35 output tokens, 50 ms debounce and ``BURSTS`` typing bursts per file."""
    engine: dict = {"prefix_cache": prefix_cache}
    if capacity is not None:
        engine["prefix_cache_capacity_tokens"] = capacity
    return {
        "name": f"autocomplete-{router}", "seed": SEED,
        "workload": {
            "num_sessions": sessions or size.ac_sessions,
            "arrival": {"type": "poisson", "rate_per_s": rate or size.ac_rate},
            "output_tokens": {"dist": "uniform", "min": 15, "max": 35},
            "session": {"type": "autocomplete", "file_tokens": {"dist": "uniform", "min": 4000, "max": 8000},
                        "debounce_ms": 50, "bursts": {"dist": "uniform", "min": BURSTS[0], "max": BURSTS[1]}},
        },
        "pools": [{"name": "ac", "model": MODEL, "gpu": GPU, "replicas": replicas, "router": router,
                   "engine": engine}],
    }


def chat_scenario(size: Size, prefix_cache: bool = True, router: str = CHAT_ROUTER) -> dict:
    """Multi-turn chats (1-8 turns, ~15 s think time) with 10 apps' system prompts."""
    return {
        "name": f"chat-{'cache' if prefix_cache else 'nocache'}", "seed": SEED,
        "workload": {
            "num_sessions": size.chat_sessions,
            "arrival": {"type": "poisson", "rate_per_s": size.chat_rate},
            "input_tokens": {"dist": "lognormal", "mean": 150, "std": 120, "max": 2000},
            "output_tokens": {"dist": "lognormal", "mean": 250, "std": 150, "max": 1000},
            "system_prompt": {"apps": 10, "tokens": {"dist": "uniform", "min": 300, "max": 1500},
                              "popularity": {"type": "zipf", "s": 1.1}},
            "session": {"type": "chat", "turns": {"dist": "uniform", "min": 1, "max": 8},
                        "think_time_s": {"dist": "lognormal", "mean": 15, "std": 10}},
        },
        "pools": [{"name": "chat", "model": MODEL, "gpu": GPU, "replicas": size.chat_replicas, "router": router,
                   "engine": {"prefix_cache": prefix_cache}}],
    }


@dataclass
class Run:
    out: RunOutput
    wall_s: float

    @cached_property
    def ideal(self) -> Optional[float]:
        """:func:`ideal_token_hit_rate` of this run's admissions."""
        bt = self.block_tokens
        return ideal_token_hit_rate(self.requests, bt) if bt else None

    @property
    def requests(self) -> list[Request]:
        return self.out.requests

    @property
    def cache(self) -> dict:
        return self.out.results["llmsim"]["prefix_cache"]

    @property
    def block_tokens(self) -> Optional[int]:
        return self.out.scenario.workload.id_block_tokens()


_RUNS: dict[str, Run] = {}


def run(scenario: dict) -> Run:
    """Simulate a scenario dict (memoised: the cliff's default row is the routers' prefix_aware row)."""
    key = repr(scenario)
    if key not in _RUNS:
        t = time.perf_counter()
        ids: dict[int, tuple] = {}   # the run drops each request's ids when it ends; the ideals need them
        out = simulate(Scenario.model_validate(scenario), on_end=lambda r: ids.__setitem__(r.id, r.blocks))
        wall = time.perf_counter() - t
        for r in out.requests:
            r.blocks = ids.get(r.id)
        _RUNS[key] = Run(out, wall)
    return _RUNS[key]


# --- measures ------------------------------------------------------------------
def ttfts_ms(requests: Sequence[Request]) -> np.ndarray:
    """TTFT of every request that got a first token (finished, or cancelled after it)."""
    return np.array([(r.first_token - r.arrival) * 1e3 for r in requests if not math.isnan(r.first_token)])


def ttft_percentiles(requests: Sequence[Request]) -> dict:
    a = ttfts_ms(requests)
    if not len(a):
        return {"p50": math.nan, "p95": math.nan, "p99": math.nan, "over_budget": math.nan}
    p50, p95, p99 = np.percentile(a, [50, 95, 99])
    return {"p50": p50, "p95": p95, "p99": p99, "over_budget": float(np.mean(a > BUDGET_MS))}


def ideal_token_hit_rate(requests: Sequence[Request], block_tokens: int) -> Optional[float]:
    """Token hit rate one unbounded cache would give the same admissions.

    Walks the admitted requests in admission order with every block id ever
    admitted in one set, and applies the engine's rule (a hit covers the
    leading ids found, at most prompt − 1 tokens). Each request's blocks
    (prompt and output) enter at its admission: an autocomplete output's ids
    are never in a later prompt, and a chat turn's next turn arrives after the
    response finished, so entering them early changes no hit. Synthetic
    workloads only (full blocks; a trace's partial last block is ignored).
    """
    H = block_tokens
    seen: set[int] = set()
    hit = total = 0
    admitted = sorted((r for r in requests if not math.isnan(r.admitted) and r.blocks),
                      key=lambda r: (r.admitted, r.id))
    for r in admitted:
        ids = r.blocks
        # Chained ids: ids[j] was seen only with ids[:j] (every request enters a leading run), so the
        # seen ids of a request are a prefix of its ids and the match length bisects.
        lo, hi = 0, min(len(ids), -(-r.input_tokens // H))
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if ids[mid - 1] in seen:
                lo = mid
            else:
                hi = mid - 1
        hit += max(0, min(lo * H, r.input_tokens - 1))
        total += r.input_tokens
        seen.update(ids[lo:max(r.input_tokens, r.input_tokens + r.output_tokens - 1) // H])
    return hit / total if total else None


def status_counts(requests: Sequence[Request]) -> dict:
    c = defaultdict(int)
    for r in requests:
        c[Status(r.status).name.lower()] += 1
    return dict(c)


def load_summary(r: Run) -> dict:
    """What the fleet carried: session starts/s, requests/s, concurrent sessions, GPU busy, batch."""
    reqs = r.requests
    L = r.out.results["llmsim"]
    wl = r.out.scenario.workload
    arrivals = np.array([q.arrival for q in reqs])
    span = float(arrivals.max() - arrivals.min()) if len(arrivals) > 1 else 1.0
    first, last = defaultdict(lambda: math.inf), defaultdict(float)
    for q in reqs:
        first[q.session] = min(first[q.session], q.arrival)
        last[q.session] = max(last[q.session], q.finish if not math.isnan(q.finish) else q.arrival)
    live = sum(last[s] - first[s] for s in first) / max(L["simulated_seconds"], 1e-9)
    return {"sessions": wl.num_sessions, "session_rate": wl.arrival.rate_per_s, "requests": len(reqs),
            "req_per_s": len(reqs) / span, "mean_live_sessions": live, "replicas": L["replicas"],
            "gpus": L["gpus"], "busy": L["gpu_busy_fraction"], "batch": L["mean_batch_size"],
            "sim_s": L["simulated_seconds"], "kv_tokens": L["kv_tokens_per_replica"]}


def summarize(label: str, r: Run) -> dict:
    pc = r.cache
    st = status_counts(r.requests)
    on = pc.get("enabled", False)
    row = {"label": label, "token_hit": pc.get("token_hit_rate") if on else 0.0,
           "request_hit": pc.get("request_hit_rate") if on else 0.0,
           "evicted_blocks": pc.get("evicted_blocks", 0), **ttft_percentiles(r.requests),
           "finished": st.get("finished", 0), "cancelled": st.get("cancelled", 0),
           "rejected": st.get("rejected", 0), "gpus": r.out.results["llmsim"]["gpus"], "wall_s": r.wall_s}
    row["ideal"] = r.ideal
    return row


# --- (a) the cliff -----------------------------------------------------------------
def cold_warm(prompts: Sequence[int] = (4000, COLD_PROMPT, 8000), warm_tail: int = 64) -> list[dict]:
    """One prompt alone on one GPU: its prefill time cold (nothing cached) and warm (all but the last
    ``warm_tail`` tokens cached, the tail an edit leaves to recompute) — TTFT with no queueing."""
    cm = CostModel(load_model(MODEL), load_hardware(GPU), 1)
    rows = []
    for p in prompts:
        cold = cm.step_time([(p, 0)], 0, 0, 1) * 1e3
        warm = cm.step_time([(warm_tail, p - warm_tail)], 0, 0, 1) * 1e3
        rows.append({"prompt": p, "cold_ms": cold, "warm_ms": warm, "warm_tail": warm_tail,
                     "ratio": cold / warm, "cold_blows_budget": cold > BUDGET_MS})
    return rows


def _capacity_label(c) -> str:
    if c is None:
        return "default (free KV memory)"
    if c == "unbounded":
        return "unbounded"
    return f"{c:,} tokens"


def cliff_study(size: Size) -> tuple[list[dict], dict]:
    """prefix_aware on 8 replicas, cache off then capped from 0 tokens up: rows, and the load."""
    rows, load = [], None
    r = run(autocomplete_scenario(size, prefix_cache=False))
    rows.append(summarize("prefix_cache: false", r))
    for c in size.capacities:
        r = run(autocomplete_scenario(size, capacity=c))
        rows.append(summarize(f"cap {_capacity_label(c)}", r))
        if c is None:
            load = load_summary(r)
    rows.sort(key=lambda x: x["token_hit"])
    return rows, load


# --- (b) routers ---------------------------------------------------------------------
def router_study(size: Size, routers: Sequence[str] = ROUTERS) -> tuple[list[dict], dict, Optional[float]]:
    """The same autocomplete load on 8 replicas under each router: rows, the load, and the workload's
    ideal (every request admitted at its arrival into one unbounded cache)."""
    rows, runs = [], {}
    for name in routers:
        runs[name] = run(autocomplete_scenario(size, router=name))
        rows.append(summarize(name, runs[name]))
    ref = runs.get("prefix_aware", runs[routers[0]])
    return rows, load_summary(ref), _arrival_ideal(ref)


def _arrival_ideal(r: Run) -> Optional[float]:
    """The ideal over every request as if each were admitted on arrival (no cancellation before admission)."""
    class _At:
        __slots__ = ("admitted", "id", "blocks", "input_tokens", "output_tokens")

        def __init__(self, q: Request):
            self.admitted, self.id, self.blocks = q.arrival, q.id, q.blocks
            self.input_tokens, self.output_tokens = q.input_tokens, q.output_tokens

    return ideal_token_hit_rate([_At(q) for q in r.requests], r.block_tokens)


# --- (c) chat --------------------------------------------------------------------------
def turn_index(requests: Sequence[Request]) -> dict[int, int]:
    """Request id -> its turn (1-based rank by arrival within its session)."""
    by = defaultdict(list)
    for q in requests:
        by[q.session].append(q)
    out = {}
    for qs in by.values():
        for k, q in enumerate(sorted(qs, key=lambda q: (q.arrival, q.id)), 1):
            out[q.id] = k
    return out


def per_turn(requests: Sequence[Request]) -> dict[int, dict]:
    """Per turn: requests, mean prompt tokens, mean cached tokens, median and p95 TTFT (ms)."""
    turn = turn_index(requests)
    groups = defaultdict(list)
    for q in requests:
        groups[turn[q.id]].append(q)
    out = {}
    for k in sorted(groups):
        qs = groups[k]
        t = ttfts_ms(qs)
        out[k] = {"n": len(qs), "prompt": float(np.mean([q.input_tokens for q in qs])),
                  "cached": float(np.mean([q.cached_tokens for q in qs])),
                  "p50": float(np.median(t)) if len(t) else math.nan,
                  "p95": float(np.percentile(t, 95)) if len(t) else math.nan}
    return out


def chat_study(size: Size) -> dict:
    on, off = run(chat_scenario(size, True)), run(chat_scenario(size, False))
    return {"on": per_turn(on.requests), "off": per_turn(off.requests), "load_on": load_summary(on),
            "load_off": load_summary(off), "summary_on": summarize(f"cache on ({CHAT_ROUTER})", on),
            "summary_off": summarize(f"cache off ({CHAT_ROUTER})", off)}


# --- output ----------------------------------------------------------------------------------
def _f(v, fmt="{:.0f}") -> str:
    return "n/a" if v is None or (isinstance(v, float) and math.isnan(v)) else fmt.format(v)


def _load_line(ld: dict, what: str) -> str:
    return (f"{what}: {ld['sessions']} sessions starting at {ld['session_rate']:g}/s (Poisson), "
            f"{ld['requests']:,} requests ({ld['req_per_s']:.0f} req/s over the arrivals), "
            f"~{ld['mean_live_sessions']:.0f} sessions live on average; {ld['replicas']} × {GPU} "
            f"({ld['req_per_s'] / ld['replicas']:.0f} req/s per replica) "
            f"with {ld['kv_tokens']:,} KV tokens each, GPU busy {ld['busy']:.0%} of the time, "
            f"mean running batch {ld['batch']:.1f}; {ld['sim_s']:.0f} simulated seconds.")


def table_cold_warm(rows: list[dict]) -> list[str]:
    out = ["| prompt tokens | cold prefill (ms) | warm: last 64 tokens (ms) | cold / warm | cold > 200 ms? |",
           "|---:|---:|---:|---:|---|"]
    for r in rows:
        out.append(f"| {r['prompt']:,} | {r['cold_ms']:.1f} | {r['warm_ms']:.1f} | {r['ratio']:.0f}× | "
                   f"{'yes' if r['cold_blows_budget'] else 'no'} |")
    return out


def table_cliff(rows: list[dict]) -> list[str]:
    out = ["| cache (prefix_aware, 8 replicas) | token hit | request hit | TTFT p50 | p95 | p99 (ms) | "
           "TTFT > 200 ms | finished | cancelled |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        out.append(f"| {r['label']} | {r['token_hit']:.3f} | {r['request_hit']:.3f} | {_f(r['p50'])} | "
                   f"{_f(r['p95'])} | {_f(r['p99'])} | {_f(100 * r['over_budget'], '{:.1f} %')} | "
                   f"{r['finished']:,} | {r['cancelled']:,} |")
    return out


def table_routers(rows: list[dict], ideal_all: Optional[float]) -> list[str]:
    out = ["| router | token hit | ideal (same admissions) | hit / ideal | miss rate | request hit | TTFT p50 | p95 | "
           "p99 (ms) | finished | cancelled | GPUs |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        out.append(f"| {r['label']} | {r['token_hit']:.3f} | {_f(r['ideal'], '{:.3f}')} | "
                   f"{_f(r['token_hit'] / r['ideal'] if r['ideal'] else None, '{:.2f}')} | "
                   f"{1 - r['token_hit']:.3f} | {r['request_hit']:.3f} | {_f(r['p50'])} | {_f(r['p95'])} | "
                   f"{_f(r['p99'])} | {r['finished']:,} | {r['cancelled']:,} | {r['gpus']} |")
    out.append(f"| ideal: one unbounded cache, every request at its arrival | {_f(ideal_all, '{:.3f}')} | | | "
               f"{_f(1 - ideal_all if ideal_all is not None else None, '{:.3f}')} | | | | | | | — |")
    return out


def table_chat(study: dict) -> list[str]:
    on, off = study["on"], study["off"]
    out = ["| turn | requests | mean prompt tokens | mean cached tokens (on) | TTFT p50 on | p95 on | "
           "TTFT p50 off | p95 off (ms) |", "|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for k in sorted(on):
        a, b = on[k], off.get(k, {})
        out.append(f"| {k} | {a['n']} | {a['prompt']:,.0f} | {a['cached']:,.0f} | {_f(a['p50'], '{:.1f}')} | "
                   f"{_f(a['p95'], '{:.1f}')} | {_f(b.get('p50'), '{:.1f}')} | {_f(b.get('p95'), '{:.1f}')} |")
    return out




HEADER = """# Prefix cache: autocomplete and chat

What llmsim's prefix cache models, in short (the details are in
[how llmsim works, "Prefix cache and cancellation"](how-it-works.md#prefix-cache-and-cancellation)):
every replica keeps vLLM-style automatic prefix caching. Requests carry
chained block ids (16 tokens each for synthetic workloads) that are equal
exactly where two prompts share a prefix; at admission a request's leading
cached blocks are reused (at most prompt − 1 tokens) and only the rest is
prefilled. Blocks a running request uses are pinned and shared; the others
stay cached in the KV memory running requests leave free and are evicted
least recently used first (`prefix_cache_capacity_tokens` caps them, or
makes the cache `unbounded`). The cache is per replica, so where the router
sends a request decides whether its prefix is there. Autocomplete sessions
cancel their previous request when a newer keystroke fires; a cancelled
request never counts in the hit rates if it was still queued.

Everything below is generated by

```bash
{command}
```

({size} version; {wall:.0f} s wall on {machine}, a shared development
machine: wall times vary by ±50 %; the simulated numbers are seeded and the
same on every machine). Definitions: *token hit* is llmsim's
`prefix_cache.token_hit_rate` (cached prompt tokens / prompt tokens over
first admissions); *request hit* counts admissions with at least one cached
block; TTFT percentiles are over every request that got a first token,
including autocomplete requests cancelled after it (vLLM bench's
`p95_ttft_ms` counts finished requests only, which leaves out exactly the
slow ones a newer keystroke cancelled). Generated {today}.
"""


def markdown(cw: list[dict], cliff: list[dict], cliff_load: dict, routers: list[dict], router_load: dict,
             ideal_all: Optional[float], chat: dict, size: Size, wall: float, command: str) -> str:
    pa = next((r for r in routers if r["label"] == "prefix_aware"), None)
    rr = next((r for r in routers if r["label"] == "round_robin"), None)
    cold6 = next(r for r in cw if r["prompt"] == COLD_PROMPT)
    lines = [HEADER.format(command=command, size=size.name, wall=wall, machine=machine.describe(),
                           today=_dt.date.today().isoformat()).rstrip("\n"), ""]
    lines += ["## a. The autocomplete cliff", "",
              f"One prompt alone on one {GPU} running {MODEL} (the cost model, no queue: "
              f"`llmsim estimate request --gpu {GPU} --model {MODEL} --input {COLD_PROMPT} --output 25` "
              f"gives the same {cold6['cold_ms']:.1f} ms TTFT):", ""]
    lines += table_cold_warm(cw)
    lines += ["",
              f"A cold {COLD_PROMPT:,}-token prefill takes {cold6['cold_ms']:.0f} ms: "
              f"{'over' if cold6['cold_blows_budget'] else 'under'} the 200 ms budget on its own, "
              f"but it leaves only {BUDGET_MS - cold6['cold_ms']:.0f} ms for queueing, the network and any other "
              f"prefill sharing its iterations, while a warm one (the edit's tail only) is "
              f"{cold6['ratio']:.0f}× cheaper. The cliff is what that does under load. Sessions follow "
              "workloads/autocomplete.py's editing model with its defaults (bursts of 5-40 keystrokes ~0.15 s "
              "apart, ~5 s between bursts, a request 50 ms after each pause in typing, the previous one "
              f"cancelled) except {BURSTS[0]}-{BURSTS[1]} bursts per file (~35-s sessions instead of ~100 s, so "
              "files turn over faster at the same request rate); 4-8K-token files, 15-35 output tokens.", "",
              _load_line(cliff_load, "Load"), ""]
    lines += table_cliff(cliff)
    lines += ["", _cliff_note(cliff, cold6["cold_ms"]), ""]
    lines += ["## b. Routers on 8 replicas", "", "The load of (a) " + _load_line(router_load, "(busy and batch of the "
                                                                        "prefix_aware run)"), ""]
    lines += table_routers(routers, ideal_all)
    note = ""
    if pa and rr:
        note = (f" Measured as a hit rate round robin keeps {rr['token_hit']:.2f} against prefix_aware's "
                f"{pa['token_hit']:.2f}, but its miss rate, the prefill work, is "
                f"{(1 - rr['token_hit']) / max(1 - pa['token_hit'], 1e-9):.0f}× larger, and that is what sets "
                "the tail.")
    lines += ["",
              "*ideal (same admissions)* is what a single unbounded cache would have hit on exactly the "
              "requests each run admitted, computed from their block ids; the last row is the same over "
              "every request as if none had been cancelled before admission. prefix_aware follows the "
              "replica that holds the file; session_affinity hashes the session to a replica and only "
              "spills when that replica is above 1.25× the mean load, so both keep the hit rate near the "
              "ideal. Load-only routers spread a session's requests over all 8 replicas, so each file is "
              "prefilled cold once on every replica instead of once, and again whenever a replica's LRU "
              "cache dropped it between the session's visits (here "
              f"~{router_load['mean_live_sessions']:.0f} live files of ~6K tokens, "
              f"~{router_load['mean_live_sessions'] * 6000 / 1e6:.1f}M tokens, against {router_load['kv_tokens']:,} KV "
              "tokens per replica, less what running requests use). They do not collapse to 1/8 of the "
              "ideal because a typing burst sends a request every ~0.2 s, so within a burst a session comes "
              "back to each replica after ~8 requests, 1-2 s, and finds its file still there; and because "
              "requests queued behind cold prefills are often cancelled before admission, which no hit rate "
              "counts." + note, ""]
    lo = chat["load_on"]
    lines += ["## c. Chat sessions: TTFT by turn", "",
              _load_line(lo, f"Load (cache on, {CHAT_ROUTER}; the cache-off run replays the same sessions)"),
              f"Token hit rate with the cache: {chat['summary_on']['token_hit']:.3f}.", ""]
    lines += table_chat(chat)
    lines += ["",
              "A turn's prompt is the system prompt plus the whole conversation so far, so it grows by "
              "~400 tokens a turn. With the cache (session_affinity sends every turn to the replica that "
              "served the previous one) only the new message is prefilled, and TTFT stays flat across "
              "turns; turn 1 is already cheap because the 10 apps' system prompts are shared. Without it "
              "each turn prefills the whole history, and TTFT grows with the turn index. Turn counts "
              "fall with the index because sessions have 1-8 turns (uniform)."]
    return "\n".join(lines) + "\n"


def _cliff_note(rows: list[dict], cold_ms: float) -> str:
    """What the cliff table shows, from its rows (sorted by hit rate, best last)."""
    best = rows[-1]
    over = [r for r in rows if r["p95"] > BUDGET_MS]
    edge = max(over, key=lambda r: r["token_hit"]) if over else None
    off = next((r for r in rows if r["label"] == "prefix_cache: false"), rows[0])
    zero = next((r for r in rows if r["label"] == f"cap {_capacity_label(0)}"), None)
    text = ("Rows are sorted by token hit rate. A miss is a cold prefill of most of a file. With the whole cache "
            f"(hit rate {best['token_hit']:.3f}) p95 TTFT is {best['p95']:.0f} ms; ")
    if edge is not None:
        text += (f"already at a hit rate of {edge['token_hit']:.3f} ({edge['label']}) it is {edge['p95']:.0f} ms, "
                 f"over the budget, and with no cache the median is {off['p50']:.0f} ms. ")
    text += (f"The cliff is steep because a replica runs only a handful of cold 6K prefills a second "
             f"({cold_ms:.0f} ms each), so a few percent more misses saturate it and the queue does the rest; the "
             "finished counts fall with it, because a completion that comes late is overtaken by the next "
             "keystroke and cancelled.")
    if zero is not None and zero["token_hit"] < 0.01:
        text += (" With the cache capped at 0 tokens nothing outlives its request: a session's previous request "
                 "is cancelled, and its blocks released, before the next one is admitted, so that row is the "
                 "same as no cache.")
    default = next((r for r in rows if r["label"] == f"cap {_capacity_label(None)}"), None)
    if default is not None and default["evicted_blocks"] == 0:
        text += (" The default row evicted nothing: the KV memory running requests leave free holds every "
                 "replica's share of the live files, so an `unbounded` cache gives the same row.")
    if any(0 < r["token_hit"] < 0.5 for r in rows):
        text += (" Caps smaller than a file still hit a little because a sequence releases its blocks tail "
                 "first: the head of the file is the last to go.")
    return text


def print_text(lines: list[str]) -> None:
    print("\n".join(lines))


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="smaller loads (seconds instead of a minute)")
    ap.add_argument("--markdown", metavar="PATH", help="write the doc (header + tables) to this file")
    args = ap.parse_args(argv)
    size = QUICK if args.quick else FULL
    t0 = time.perf_counter()
    cw = cold_warm()
    print_text(["(a) one prompt alone on one H100:"] + table_cold_warm(cw))
    t = time.perf_counter()
    cliff, cliff_load = cliff_study(size)
    print_text(["", f"(a) cliff sweep ({time.perf_counter() - t:.1f} s wall)", _load_line(cliff_load, "Load")]
               + table_cliff(cliff))
    t = time.perf_counter()
    routers, router_load, ideal_all = router_study(size)
    print_text(["", f"(b) routers ({time.perf_counter() - t:.1f} s wall)"] + table_routers(routers, ideal_all))
    t = time.perf_counter()
    chat = chat_study(size)
    print_text(["", f"(c) chat per turn ({time.perf_counter() - t:.1f} s wall)",
                _load_line(chat["load_on"], "Load")] + table_chat(chat))
    wall = time.perf_counter() - t0
    print(f"\ntotal {wall:.1f} s wall")
    if args.markdown:
        cmd = "python benchmarks/prefix_cache_study.py" + (" --quick" if args.quick else "") + \
              f" --markdown {args.markdown}"
        path = Path(args.markdown)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(markdown(cw, cliff, cliff_load, routers, router_load, ideal_all, chat, size, wall, cmd))
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
