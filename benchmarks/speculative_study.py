"""Speculative decoding study: the low-load gain the formula predicts, and the high-load loss.

    python benchmarks/speculative_study.py                                   # print the tables (~10 s)
    python benchmarks/speculative_study.py --markdown docs/speculative.md    # also write the doc

Llama-3.1-8B served alone and with a Llama-3.2-1B draft (same 128,256-token
vocabulary), k = 5 draft tokens, acceptance rate α = 0.82, on one A100 SXM
80GB and one H100 SXM (vLLM defaults: 256 sequences, 8,192-token budget,
chunked prefill). Closed loops of 1 to 256 users send chat-like requests
(prompts uniform 128-1,024 tokens, outputs uniform 64-512).

a. The step, from the cost model alone: plain decode time per token at
   batch 1 against k draft iterations + one verification of k + 1 tokens,
   divided by E = (1 − α^(k+1)) / (1 − α), at the workload's mean decode
   context.
b. Low load: decode tokens/s per request measured by simulation against
   that prediction.
c. A load sweep: output throughput and per-request decode speed without
   speculation, with it, and with it switched off (``disable_above_batch``)
   above the decode batch at which it last beat plain in that sweep; beside
   it the decode-only crossover batch the cost model predicts.

Everything is seeded and deterministic; only the wall time differs between
machines.
"""
from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from simulator.costmodel import CostModel  # noqa: E402
from simulator.costmodel.speculative import (SpeculativeCostModel, SpeculativeSpec,  # noqa: E402
                                             expected_tokens_per_step, speculative_cost_model)
from simulator.profiles import load_hardware, load_model  # noqa: E402
from simulator.runner import RunOutput, simulate  # noqa: E402
from simulator.scenario.schema import Scenario  # noqa: E402

TARGET, DRAFT = "llama-3.1-8b", "llama-3.2-1b"
GPUS = ("a100-sxm-80gb", "h100-sxm")
K, ALPHA = 5, 0.82
INPUT = {"dist": "uniform", "min": 128, "max": 1024}
OUTPUT = {"dist": "uniform", "min": 64, "max": 512}
CONCURRENCY = (1, 2, 4, 8, 16, 32, 64, 96, 128, 160, 192, 256)
LOW_LOAD = (1, 2, 4)
MAX_NUM_SEQS = 256
SEED = 11
DOC_COMMAND = "python benchmarks/speculative_study.py --markdown docs/speculative.md"


def requests_for(concurrency: int) -> int:
    """Enough requests per user that the ramp-up and the drain tail are a few % of the run."""
    return 40 * concurrency + 200


def spec(threshold: Optional[int] = None) -> SpeculativeSpec:
    return SpeculativeSpec(draft_model=DRAFT, k=K, acceptance_rate=ALPHA, disable_above_batch=threshold)


def scenario(gpu: str, concurrency: int, speculative: Optional[SpeculativeSpec],
             class_alpha: Optional[dict[str, float]] = None) -> Scenario:
    """``class_alpha``: equal-share classes, each with its own acceptance rate."""
    pool = {"model": TARGET, "gpu": gpu, "engine": {"max_num_seqs": MAX_NUM_SEQS}}
    if speculative is not None:
        pool["speculative"] = speculative.model_dump()
    classes = [{"name": c, "speculative_acceptance_rate": a} for c, a in (class_alpha or {}).items()]
    return Scenario.model_validate({
        "name": f"spec-{gpu}-{concurrency}", "seed": SEED,
        "workload": {"num_requests": requests_for(concurrency),
                     "arrival": {"type": "concurrency", "concurrency": concurrency},
                     "input_tokens": INPUT, "output_tokens": OUTPUT},
        "pools": [pool], "classes": classes})


@dataclass(frozen=True)
class Measured:
    """One simulated run, reduced to what the tables show."""

    throughput: float          # output tokens/s of the replica
    decode_tps: float          # Σ decode tokens / Σ decode time: per-request streaming speed
    ctx: float                 # mean context a decode token attends to (cached + 1)
    batch: float               # time-averaged running batch
    kv_blocks: int
    preemptions: int


def decode_tps(out: RunOutput, klass: Optional[str] = None) -> float:
    """Σ decode tokens / Σ decode time over the requests (of one class)."""
    reqs = [r for r in out.requests if r.output_tokens >= 2 and r.finish == r.finish
            and klass in (None, r.klass)]
    return sum(r.output_tokens - 1 for r in reqs) / sum(r.finish - r.first_token for r in reqs)


CLASS_ALPHA = {"code": 0.9, "chat": 0.6}
CLASS_USERS = (1, 8, 32)


def class_table(gpu: str) -> list[str]:
    """Per-class α in one pool against each class's α for the whole pool."""
    E = {c: expected_tokens_per_step(K, a) for c, a in CLASS_ALPHA.items()}
    lines = [f"| users | {' | '.join(f'{c} (α {a}, E {E[c]:.2f}): mixed / pool-wide' for c, a in CLASS_ALPHA.items())}"
             " | mixed-batch error |", "|---:|---|---|---|"]
    for n in CLASS_USERS:
        mixed = simulate(scenario(gpu, n, spec(), CLASS_ALPHA))
        cells, errs = [], []
        for c, a in CLASS_ALPHA.items():
            alone = simulate(scenario(gpu, n, spec(), {x: a for x in CLASS_ALPHA}))
            m, o = decode_tps(mixed, c), decode_tps(alone, c)
            cells.append(f"{m:.1f} / {o:.1f} tok/s")
            errs.append(f"{c} {round(m / o - 1, 4) + 0.0:+.1%}")
        lines.append(f"| {n} | {' | '.join(cells)} | {', '.join(errs)} |")
    return lines


def measure(out: RunOutput) -> Measured:
    reqs = [r for r in out.requests if r.output_tokens >= 2 and r.finish == r.finish]
    tokens = sum(r.output_tokens - 1 for r in reqs)
    # request i's j-th decode (j = 1..N−1) attends to P + j tokens
    ctx = sum((r.output_tokens - 1) * (r.input_tokens + r.output_tokens / 2.0) for r in reqs) / tokens
    llm = out.results["llmsim"]
    return Measured(out.results["output_throughput"], tokens / sum(r.finish - r.first_token for r in reqs), ctx,
                    llm["mean_batch_size"], llm["kv_blocks_per_replica"], llm["preemptions"])


def cost_models(gpu: str) -> tuple[CostModel, SpeculativeCostModel]:
    cm = CostModel(load_model(TARGET), load_hardware(gpu))
    return cm, speculative_cost_model(cm, spec())


def crossover_batch(scm: SpeculativeCostModel, ctx: float) -> Optional[int]:
    """The smallest decode batch at which a speculative token costs at least a plain one."""
    for b in range(1, MAX_NUM_SEQS + 1):
        if scm.step_time((), b, b * ctx) >= scm.target.step_time((), b, b * ctx):
            return b
    return None


@dataclass
class GpuStudy:
    gpu: str
    step: dict
    low: list[dict]
    sweep: list[dict]
    crossover: Optional[int]     # decode batch where a speculative token starts to cost more (cost model)
    measured: Optional[int]      # users from which speculation's throughput stays below plain (simulated)
    threshold: Optional[int]     # disable_above_batch of the third variant
    edge: Optional[float]        # throughput / plain at `threshold` users with the threshold one below


def measured_crossover(rows: list[dict]) -> Optional[int]:
    """The lowest concurrency from which speculation's throughput stays below plain."""
    for i, r in enumerate(rows):
        if all(x["spec_throughput"] < x["plain_throughput"] for x in rows[i:]):
            return r["c"]
    return None


def study_gpu(gpu: str) -> GpuStudy:
    cm, scm = cost_models(gpu)
    no_overhead = SpeculativeCostModel(cm, CostModel(load_model(DRAFT), cm.gpu, iteration_overhead_ms=0.0), spec())
    plain1 = measure(simulate(scenario(gpu, 1, None)))
    ctx = plain1.ctx
    t_plain, t_draft, t_verify = cm.step_time((), 1, ctx), scm.draft_time(1, ctx), scm.verify_time(1, ctx)
    E = expected_tokens_per_step(K, ALPHA)
    step = dict(ctx=ctx, plain_ms=t_plain * 1e3, draft_ms=t_draft / K * 1e3, verify_ms=t_verify * 1e3, E=E,
                spec_ms=(t_draft + t_verify) / E * 1e3, speedup=t_plain * E / (t_draft + t_verify),
                speedup_no_overhead=t_plain / no_overhead.step_time((), 1, ctx))
    low = []
    for c in LOW_LOAD:
        p = plain1 if c == 1 else measure(simulate(scenario(gpu, c, None)))
        s = measure(simulate(scenario(gpu, c, spec())))
        low.append(dict(c=c, plain=p.decode_tps, spec=s.decode_tps, gain=s.decode_tps / p.decode_tps,
                        predicted_tps=1.0 / scm.step_time((), 1, s.ctx), predicted_gain=step["speedup"],
                        batch=s.batch))
    fields = ("throughput", "decode_tps", "batch", "kv_blocks", "preemptions")

    def runs(sp: Optional[SpeculativeSpec], name: str) -> list[dict]:
        return [{f"{name}_{f}": getattr(m, f) for f in fields}
                for m in (measure(simulate(scenario(gpu, c, sp))) for c in CONCURRENCY)]

    sweep = [dict(c=c, **a, **b) for c, a, b in zip(CONCURRENCY, runs(None, "plain"), runs(spec(), "spec"))]
    measured = measured_crossover(sweep)
    # Off above the load at which it last won: with that many users the decode
    # batch never exceeds it, so speculation runs there, and not above. (Its
    # mean batch would sit on the edge, where admissions happen just below the
    # threshold: every prompt then pays the draft's prefill while most decode
    # steps run plain.)
    wins = [r for r in sweep if measured is None or r["c"] < measured]
    threshold = wins[-1]["c"] if wins and measured is not None else None
    for row, thr in zip(sweep, runs(spec(threshold), "thr")):
        row.update(thr)
    edge = None
    if threshold and threshold > 1:
        at = next(r for r in sweep if r["c"] == threshold)
        edge = measure(simulate(scenario(gpu, threshold, spec(threshold - 1)))).throughput / at["plain_throughput"]
    return GpuStudy(gpu, step, low, sweep, crossover_batch(scm, ctx), measured, threshold, edge)


# --- report --------------------------------------------------------------------------------
def step_table(studies: list[GpuStudy]) -> list[str]:
    out = ["| GPU | mean decode context | plain token (ms) | draft step (ms) | verify k+1 (ms) | E "
           "| speculative token (ms) | predicted speed-up | same, draft steps without overhead |",
           "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for s in studies:
        d = s.step
        out.append(f"| {s.gpu} | {d['ctx']:.0f} | {d['plain_ms']:.2f} | {d['draft_ms']:.2f} | {d['verify_ms']:.2f} "
                   f"| {d['E']:.4f} | {d['spec_ms']:.2f} | {d['speedup']:.3f}× | {d['speedup_no_overhead']:.3f}× |")
    return out


def low_table(studies: list[GpuStudy]) -> list[str]:
    out = ["| GPU | users | plain tok/s per request | speculative, measured | speculative, predicted (batch 1) "
           "| measured gain | predicted gain | mean batch (spec) |",
           "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for s in studies:
        for r in s.low:
            out.append(f"| {s.gpu} | {r['c']} | {r['plain']:.1f} | {r['spec']:.1f} | {r['predicted_tps']:.1f} "
                       f"| {r['gain']:.3f}× | {r['predicted_gain']:.3f}× | {r['batch']:.2f} |")
    return out


def sweep_table(s: GpuStudy) -> list[str]:
    out = [f"| users | plain tok/s | speculative tok/s | spec / plain | spec off above {s.threshold} tok/s "
           "| thr / plain | per-request tok/s plain / spec / thr | mean batch plain / spec "
           "| preemptions plain / spec |",
           "|---:|---:|---:|---:|---:|---:|---|---|---|"]
    for r in s.sweep:
        out.append(f"| {r['c']} | {r['plain_throughput']:,.0f} | {r['spec_throughput']:,.0f} "
                   f"| {r['spec_throughput'] / r['plain_throughput']:.3f} | {r['thr_throughput']:,.0f} "
                   f"| {r['thr_throughput'] / r['plain_throughput']:.3f} "
                   f"| {r['plain_decode_tps']:.1f} / {r['spec_decode_tps']:.1f} / {r['thr_decode_tps']:.1f} "
                   f"| {r['plain_batch']:.1f} / {r['spec_batch']:.1f} "
                   f"| {r['plain_preemptions']} / {r['spec_preemptions']} |")
    return out


def findings(s: GpuStudy) -> list[str]:
    rows, low, top = s.sweep, s.low[0], s.sweep[-1]
    _, scm = cost_models(s.gpu)
    prompt = (INPUT["min"] + INPUT["max"]) / 2.0
    draft_prefill, target_prefill = scm.draft.step_time([(int(prompt), 0)]), scm.target.step_time([(int(prompt), 0)])
    thr_worst = min(r["thr_throughput"] / max(r["plain_throughput"], r["spec_throughput"]) for r in rows)
    kv = top["spec_kv_blocks"] / top["plain_kv_blocks"]
    where = (f"from {s.measured} users on ({top['spec_throughput'] / top['plain_throughput']:.3f}× of plain at "
             f"{top['c']} users)" if s.measured else "nowhere in this sweep")
    return [
        f"- **{s.gpu}.** One user streams at {low['spec']:.1f} tok/s with speculation against {low['plain']:.1f} "
        f"without: {low['gain']:.3f}× measured, {low['predicted_gain']:.3f}× predicted by "
        f"E·t_plain / (k·t_draft + t_verify) at the mean context.",
        f"- Speculation's throughput is below plain {where}. Decode alone would cross over later, at a batch of "
        f"{s.crossover} (the cost model at that context): the earlier loss comes from the prompts, which the draft "
        f"prefills too ({draft_prefill * 1e3:.1f} ms beside the target's {target_prefill * 1e3:.1f} ms for a "
        f"{prompt:.0f}-token prompt alone, its own pass with its own iteration overhead). The draft's weights and "
        f"KV leave {kv:.2f}× the KV blocks, which "
        + (f"costs {top['spec_preemptions']} preemptions at {top['c']} users." if top["spec_preemptions"]
           else "does not bind here (no preemptions)."),
        f"- Switched off above a decode batch of {s.threshold} (the load where it last won), speculation keeps "
        f"the low-load "
        f"gain, and its throughput is at least {thr_worst:.3f}× the better of plain and always-on at every load"
        + (f"; one below, at {s.threshold - 1}, the same {s.threshold} users get {s.edge:.3f}× plain." if s.edge
           else "."),
    ]


def markdown(studies: list[GpuStudy], wall: float) -> str:
    cpu = platform.processor() or platform.machine()
    lines = [
        "# Speculative decoding: latency at low load, throughput at peak",
        "",
        "Generated by",
        "",
        "```bash",
        DOC_COMMAND,
        "```",
        "",
        f"({wall:.0f} s wall on `nproc` = {os.cpu_count()}, {cpu}, CPython {platform.python_version()}; the simulated "
        "numbers are seeded and the same on every machine.)",
        "",
        "## What is simulated",
        "",
        "```yaml",
        "pools:",
        "  - model: llama-3.1-8b",
        "    gpu: h100-sxm",
        "    speculative: {draft_model: llama-3.2-1b, k: 5, acceptance_rate: 0.82, disable_above_batch: 96}",
        "```",
        "",
        "The draft must have the target's vocabulary (`llmsim run` stops with exit code 2 and the key path",
        "`pools[i].speculative.draft_model` otherwise); it runs on the pool's GPUs with the pool's TP, weight and",
        "KV dtypes, so `engine.weight_dtype: fp8` quantises both models.",
        "",
        "`draft_model: mtp` uses the target's own next-token-prediction layer(s) instead (DeepSeek-V3/R1's",
        "`num_nextn_predict_layers`, vLLM's MTP method): the draft is that one MoE + MLA decoder layer, on the",
        "pool's GPUs and tp/dp/ep, sharing the target's embedding and LM head; its weights (11.6B parameters for",
        "DeepSeek-V3) come off the KV budget. `acceptance_rate` is yours to give: llmsim does not predict it",
        "(DeepSeek-V3's technical report measured 85–90 % for the second token).",
        "",
        "A pool with a `backend` schedules its speculation as that stack does (`speculative_engine` and",
        "`draft_model_engine` in `backend_profiles/`): vLLM turns its async scheduling off for a separate draft",
        "model and keeps it for MTP; SGLang (the releases its profile describes, to 0.5.23) turns mixed chunks off",
        "for every draft by default (they are opt-in, `--enable-mixed-chunk`, `engine.mixed_prefill: true`), runs at most 48 requests unless `engine.max_num_seqs` says otherwise (its",
        "`--max-running-requests`, which from 0.5.22 also caps its decode CUDA graphs and their reserve; the 48 does",
        "not), takes the draft's weights and KV out of the KV pool from 0.5.14 (releases",
        "before it reserved 4 GiB a GPU for an MTP head, 2 GiB before 0.5.10, and 6 GiB for a draft model, and",
        "kept the draft outside the pool), and keeps its overlap scheduler from 0.5.11 (spec v2, the default for",
        "the top-k 1 drafts it chooses for MTP and draft models) where releases before it turned it off",
        "(`engine.backend_version` picks the release; none: 0.5.23's rules). A key set beside the backend wins,",
        "as the stack's flag does. From 0.5.19 SGLang keeps `--enable-mixed-chunk` beside an MTP (NEXTN) or EAGLE",
        "draft, and in an iteration that prefills prompt chunks the running requests then take one plain token each,",
        "without drafting or verifying, while the draft extends over the iteration's tokens and they speculate again",
        "in the next decode-only iteration (`engine.mixed_step_drafts: false`, which the sglang backend sets for",
        "`draft_model: mtp`): such an iteration costs the plain target's time plus the draft's over the same tokens,",
        "not the speculative step over E. Releases to 0.5.18, and a separate draft model (SGLang's STANDALONE) in",
        "every release, turn mixed chunks off whatever the launch asks (`engine.mixed_beside_draft: false`), so a",
        "pool that sets `mixed_prefill: true` beside such a draft is refused. An EAGLE head given as a separate",
        "`draft_model` gets the draft model's rule: set `engine.mixed_beside_draft: true` and",
        "`engine.mixed_step_drafts: false` beside it. vLLM's and TensorRT-LLM's schedulers also count the k draft tokens each decode",
        "carries for verification in their token budget (`engine.draft_tokens_in_budget`, on for the vllm and trtllm",
        "backends; SGLang's counts a decode one token): an iteration of b speculative decodes leaves",
        "`max_num_batched_tokens` − b·(1 + k) tokens to prompts (less a draft model's slot per request, as below).",
        "Where the running decodes need more than the budget, the oldest run, the rest wait in place for the next",
        "iteration, and no prompt tokens run in that one. vLLM gives the decode at the boundary what the budget has",
        "left, cutting its draft (`engine.budget_boundary: trim_draft`); TensorRT-LLM stops before it (`stop`, which",
        "the trtllm backend sets). At TensorRT-LLM's defaults (8,192 tokens, 2,048 sequences) that happens above",
        "8,192 / (1 + k) decodes: 1,638 at k = 4, 1,365 at k = 5. Admission keeps most batches below it (a prompt",
        "joins only where the budget holds what it runs beside the decodes, and then decodes at 1 + k tokens), so it",
        "binds when a prompt finishes on fewer than 1 + k tokens in its last iteration: a prefix-cache hit on a long",
        "shared prompt, a long prompt chunked into the few tokens the decodes leave, or a batch falling back under",
        "`disable_above_batch`. A cut draft is priced as a whole one. A budget that cannot",
        "hold one decode with what it carries is refused.",
        "",
        "A pool with `speculative: {draft_model, k, acceptance_rate, disable_above_batch}` keeps its engine: every",
        "decoding sequence an iteration runs still advances one token, so KV growth, block allocation and batching stay",
        "exact. What changes is the time of the decode part of an iteration: with batch b and total context S it",
        "takes (k·t_draft(b, S) + t_verify(b, S)) / E, the expected time per emitted token of one speculative step,",
        "with E = (1 − α^(k+1)) / (1 − α). t_draft is k decode iterations of the draft's own cost model (same GPU,",
        "TP and dtypes); t_verify is one target pass over k + 1 tokens per sequence (linear layers and LM head on",
        "b·(k+1) tokens, an extend attention of k + 1 queries over each cached context; for an MLA target the",
        "absorbed decode kernel with k + 1 queries over the latent cache, as the serving stacks verify MTP drafts).",
        "Above `disable_above_batch` decoding sequences the plain cost applies. The draft's weights and KV come off",
        "the KV budget (each block holds both models' KV), and prompt chunks are prefilled by the draft too.",
        "",
        "Approximations (the module docstring of `simulator/costmodel/speculative.py` has the full list):",
        "",
        "- **Expected value.** Throughput, TPOT and KV are right in expectation; the burstiness of real inter-token",
        "  gaps (E tokens at once, then a pause) and the spread of accepted lengths are not simulated, so ITL",
        "  percentiles are amortised gaps.",
        "- **α per class: the batch's mean E.** `classes[].speculative_acceptance_rate` overrides the pool's α for",
        "  a class. Engines advance every sequence one token per iteration, so a batch of several classes steps at",
        "  the mean E of its decoding sequences (recomputed whenever they change): the batch's tokens per second",
        "  are exact, a class alone in its batches is exact, and in a mixed batch every class streams at the mean",
        "  (section d measures the error).",
        "- **Not charged:** rejection sampling, the draft's catch-up on the bonus token, the k lookahead KV slots",
        "  held during verification, and the draft's activation memory. Every draft step pays the pool's",
        "  per-iteration overhead (1 ms on these calibrations, an assumption), which is most of a 1B draft step at",
        "  batch 1: the predicted gain depends on it.",
        "",
        f"Setup: {TARGET} alone and with a {DRAFT} draft, k = {K}, α = {ALPHA}, one replica, vLLM defaults "
        f"(max_num_seqs {MAX_NUM_SEQS}, 8,192-token budget, chunked prefill), closed loops of N users, prompts "
        f"uniform {INPUT['min']}-{INPUT['max']} tokens, outputs uniform {OUTPUT['min']}-{OUTPUT['max']}, "
        f"40·N + 200 requests per run, seed {SEED}. *tok/s per request* is Σ decode tokens / Σ decode time over "
        "requests (1 / token-weighted mean TPOT), the streaming speed a user sees after the first token; "
        "*tok/s* alone is the replica's output throughput.",
        "",
        "## a. One step, from the cost model",
        "",
        *step_table(studies),
        "",
        "Draft step = one of the k draft iterations; verify = the target's pass over k + 1 tokens; speculative token",
        "= (k·draft + verify) / E; all at batch 1 and the workload's mean decode context (measured at one user).",
        "The last column is the sensitivity to the one assumed number: the same step if draft iterations paid no",
        "per-iteration overhead (the pool's `iteration_overhead_ms` applies to both models).",
        "",
        "## b. Low load: measured against the prediction",
        "",
        *low_table(studies),
        "",
        "At one user every decode runs at batch 1 and the step time is affine in the context, so the measured",
        "speed equals the prediction at the mean context to float precision (tests/test_speculative.py checks this",
        "at rel 1e-9). With 2 and 4 users batches of 2-4 share a step and each token costs a little more, as it",
        "does without speculation.",
        "",
        "## c. Load sweep: the crossover",
        "",
        "Three variants per load: plain, speculation always on, and speculation off above the decode batch at",
        "which it last won in the sweep (`disable_above_batch` = that number of users, chosen from the two runs before",
        "it; N users never make a decode batch above N).",
        "",
    ]
    for s in studies:
        lines += [f"### {s.gpu}", "", *sweep_table(s), ""]
    gpu = studies[-1].gpu
    lines += ["## d. A different α per class in one pool", "",
              f"{gpu}, half the users' requests in each class (k = {K}), against the same users with that class's α "
              "for the whole pool; per-request tok/s of each class. With one user a request is alone in its batch, "
              "so its class's speed is exact; as batches mix, both classes move toward the mean E and the error "
              "grows to about E_class / mean E − 1.", "", *class_table(gpu), ""]
    lines += ["## Findings", ""]
    for s in studies:
        lines += findings(s)
    lines += [
        "",
        "Why speculation loses at peak: a verification pass runs b·(k+1) tokens through the target's linear",
        "layers while only E of each k + 1 are kept. At small batches those layers are bound by reading the",
        "weights, so the extra tokens are nearly free and the step is amortised over E tokens; at large batches",
        "they turn compute-bound and the discarded tokens cost real FLOPs, the k draft iterations add their own",
        "time, and the draft's KV shrinks the cache (which matters where KV is short). The H100's higher",
        "FLOP-to-bandwidth ratio moves the crossover to larger batches than on the A100. `disable_above_batch` (vLLM's",
        "`speculative_disable_by_batch_size`) keeps both ends; set it from a sweep like this one rather than from",
        "the decode-only crossover, which leaves out the draft's prefill. Not at the typical batch of the load to",
        "be protected either: new requests are admitted just after one finishes, i.e. just below such a",
        "threshold, so every prompt pays the draft's prefill while most decode steps run plain, which can be",
        "worse than either (the last line of each GPU's findings).",
        "",
    ]
    return "\n".join(lines)


def main(argv: Optional[list[str]] = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--markdown", type=Path, help="write the report to this file")
    ap.add_argument("--gpu", action="append", help="GPU profile(s) to study (default: %s)" % ", ".join(GPUS))
    args = ap.parse_args(argv)
    wall = time.perf_counter()
    studies = [study_gpu(g) for g in (args.gpu or GPUS)]
    wall = time.perf_counter() - wall
    text = markdown(studies, wall)
    print(text)
    if args.markdown:
        args.markdown.write_text(text)
        print(f"wrote {args.markdown}", file=sys.stderr)


if __name__ == "__main__":
    main()
