"""``llmsim estimate step|request``: the cost model without a simulation."""
from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, Callable, Optional

import typer
from rich.cells import cell_len
from rich.markup import escape
from rich.table import Table

from ..errors import LlmsimError, error_loc, in_key_unit, unit_slip
from .app import app, warn
from .output import console, kv_table, print_json, provenance_notes
from .examples import epilog
from .options import check_cuda_graph_gib, check_version_flag, cuda_graph_gib_option

if TYPE_CHECKING:   # the cost model on first use: `llmsim --help` imports this module
    from ..costmodel import CostModel
    from ..engine.config import EngineConfig
    from ..profiles.model import ModelProfile

estimate_app = typer.Typer(help="Back-of-envelope numbers from the calibrated cost model.", no_args_is_help=True)
app.add_typer(estimate_app, name="estimate")

GPU = typer.Option(..., "--gpu", help="GPU profile name or YAML path")
MODEL = typer.Option(..., "--model", help="model profile name, YAML path or a config.json")
TP = typer.Option(1, "--tp", help="attention tensor-parallel GPUs (one data-parallel rank)")
DP = typer.Option(1, "--dp", help="attention data-parallel ranks per replica (a replica spans tp × dp GPUs)")
EP = typer.Option(1, "--ep", help="expert-parallel degree of the MoE layers (divides tp × dp)")
WD = typer.Option(None, "--weight-dtype", help="bf16, fp16, fp8, int8, int4, or nvfp4 / mxfp4 (FP4 GPUs); "
                                              "default: the checkpoint's format (profiles list shows it)")
KD = typer.Option("bf16", "--kv-dtype", help="bf16, fp16 or fp8")
ROOF = typer.Option(False, "--roofline", help="pure physical limit: η = 1, no fixed costs")
JSON = typer.Option(False, "--json", help="print one JSON object")
KERNELS = typer.Option(None, "--kernels", help="whose kernels the GPU runs: a serving stack (vllm, sglang, trtllm); "
                                               "default: the profile's own, vLLM's, or --backend's")
BACKEND = typer.Option(None, "--backend", help="price as this serving backend runs: its kernels, iteration "
                                               "overheads, eager launches, front-end terms and defaults (vllm, "
                                               "sglang, trtllm or a profile file); default: the kernels alone")
MOE_BACKEND = typer.Option(None, "--moe-backend", help="TensorRT-LLM's MoE backend (engine.moe_backend, with "
                                                       "--backend trtllm): auto (its default from 1.3.0rc2), "
                                                       "cutlass (before), trtllm, deepgemm, triton (gpt-oss on Hopper)")
VERSION = typer.Option(None, "--backend-version", help="the backend's release whose defaults apply (with --backend)")
GRAPHS = cuda_graph_gib_option()


def _naming(flag: str, e: LlmsimError) -> LlmsimError:
    """``e`` naming the flag whose value it is about: an unknown name as
    ``--gpu: unknown GPU ...``, a problem in the file given as ``--gpu FILE: key: ...``
    (the loaders know the file, not the flag it came from)."""
    if e.source is None and e.key_path is None:
        return LlmsimError(e.message, key_path=flag)
    return LlmsimError(e.message, source=f"{flag} {e.source}" if e.source else flag, key_path=e.key_path)


def _dtypes(weight_dtype: Optional[str], kv_dtype: str) -> tuple[Optional[str], str]:
    """The dtypes as the cost model spells them (``bfloat16`` is bf16); an
    unknown one is refused naming its flag, before any profile is read (the
    cost model's own message names no flag, and with --backend it would blame --backend)."""
    from typing import get_args

    from ..dtypes import WEIGHT_DTYPES, KVDtype, normalize

    kv = normalize(kv_dtype)
    if kv not in get_args(KVDtype):
        raise LlmsimError(f"unknown KV dtype {kv_dtype!r}; expected {', '.join(get_args(KVDtype))}",
                          key_path="--kv-dtype")
    if weight_dtype is None:
        return None, kv
    wd = normalize(weight_dtype)
    if wd not in WEIGHT_DTYPES:
        raise LlmsimError(f"unknown weight dtype {weight_dtype!r}; expected {', '.join(WEIGHT_DTYPES)}",
                          key_path="--weight-dtype")
    return wd, kv


def _gpu(name: str) -> None:
    """Read the GPU profile up front, so an unknown name or a broken file names ``--gpu``."""
    from ..profiles import load_hardware

    try:
        load_hardware(name)
    except LlmsimError as e:
        raise _naming("--gpu", e) from None


def _model(name: str, weight_dtype: Optional[str]) -> tuple[ModelProfile, str]:
    """The model profile and the weights it is priced in: ``--weight-dtype``, or its
    checkpoint's format as a pool would serve it."""
    from ..profiles import load_model

    try:
        m = load_model(name)
    except LlmsimError as e:
        raise _naming("--model", e) from None
    if weight_dtype is not None:
        return m, weight_dtype
    try:
        return m, m.served_weight_dtype()
    except LlmsimError as e:
        raise LlmsimError(e.message, source=e.source, key_path="--weight-dtype") from None


#: The remedies a refusal of TensorRT-LLM's MoE backend names as a scenario's keys, as this command's flags
#: take them (a user told to "set engine.moe_backend" here has no scenario to set it in).
_MOE_REMEDIES_AS_FLAGS = (
    (r"set engine\.moe_backend to (\w+)", r"give --moe-backend \1"),
    (r"\bset (\w+), or name a backend_version", r"give --moe-backend \1, or a --backend-version"),
    (r"or name a backend_version", r"or give a --backend-version"),
    (r"remove moe_backend, or set backend: (\w+)", r"drop --moe-backend, or give --backend \1"))


def _moe_remedies_as_flags(message: str) -> str:
    """``message`` with its remedies in this command's flags (:data:`_MOE_REMEDIES_AS_FLAGS`)."""
    for pattern, flags in _MOE_REMEDIES_AS_FLAGS:
        message = re.sub(pattern, flags, message)
    return message


def _engine(gpu: str, model: ModelProfile, weight_dtype: str, kv_dtype: str, kernels: Optional[str],
            backend: Optional[str], version: Optional[str], roofline: bool,
            graphs: Optional[float] = None, moe_backend: Optional[str] = None) -> Optional[EngineConfig]:
    """The engine a pool of ``model`` naming ``backend`` on ``gpu`` runs (None without one), as a scenario
    builds it; ``graphs``: its ``kv_memory.cuda_graph_gib``; ``moe_backend``: its ``moe_backend``."""
    if version is not None:
        check_version_flag(version)
    check_cuda_graph_gib(graphs)
    if backend is None:
        if version is not None:
            raise LlmsimError("--backend-version names a release of the backend given with --backend; "
                              "give --backend too", key_path="--backend-version")
        if graphs is not None:
            raise LlmsimError("the CUDA graphs of the backend given with --backend; give --backend too",
                              key_path="--cuda-graph-gib")
        if moe_backend is not None:
            raise LlmsimError("selects TensorRT-LLM's MoE backend; give --backend trtllm too", key_path="--moe-backend")
        return None
    if roofline:
        raise LlmsimError("--roofline prices the physical limit, without any stack's costs; give --roofline or "
                          "--backend, not both", key_path="--backend")
    from pydantic import ValidationError

    from ..engine.config import EngineConfig
    from ..profiles.backend import apply_backend

    raw = {"backend": backend, "weight_dtype": weight_dtype, "kv_dtype": kv_dtype,
           **({"backend_version": version} if version is not None else {}),
           **({"kernels": kernels} if kernels is not None else {}),
           **({"moe_backend": moe_backend} if moe_backend is not None else {}),
           **({"kv_memory": {"cuda_graph_gib": graphs}} if graphs is not None else {})}
    try:
        return EngineConfig(**apply_backend(raw, gpu, model=model))
    except LlmsimError as e:
        where = ": ".join(str(x) for x in (e.source, e.key_path) if x)
        raise LlmsimError(f"{where + ': ' if where else ''}{e.message}", key_path="--backend") from None
    except ValidationError as e:
        from ..kv_memory import GRAPHS_FLAG, graphs_needed, graphs_refused

        from ..profiles.backend_fault import profile_at_fault

        if graphs_refused(e):      # the figure this command takes as a flag
            raise LlmsimError(graphs_needed(f"give {GRAPHS_FLAG} as", "give an earlier --backend-version"),
                              key_path="--backend-version") from None
        fault = profile_at_fault(raw, gpu, model, e)
        if fault is not None:
            raise LlmsimError(fault, key_path="--backend") from None
        first = e.errors()[0]
        loc = error_loc(first)
        where = ".".join(map(str, loc))
        msg = first["msg"].removeprefix("Value error, ")
        if loc == ("backend_version",):     # the scenario's key, given here as a flag
            raise LlmsimError(msg.replace("backend_version", "--backend-version"),
                              key_path="--backend-version") from None
        if loc == ("moe_backend",):
            raise LlmsimError(_moe_remedies_as_flags(msg), key_path="--moe-backend") from None
        raise LlmsimError(f"{where + ': ' if where else ''}{msg}", key_path="--backend") from None


def _cost_model(gpu: str, m: ModelProfile, tp: int, weight_dtype: str, kv_dtype: str, roofline: bool,
                dp: int = 1, ep: int = 1, kernels: Optional[str] = None,
                engine: Optional[EngineConfig] = None) -> CostModel:
    """The cost model alone, or with ``engine`` the one a pool of that engine prices with."""
    from ..costmodel import CostModel
    from ..fleet.setup import engine_cost_model
    from ..profiles import load_hardware
    from ..profiles.backend import check_serving_stack
    from ..profiles.checkpoint_weights import check_checkpoint_weights

    if kernels is not None:
        try:
            check_serving_stack(kernels)
        except ValueError as e:
            raise LlmsimError(str(e), key_path="--kernels") from None
    g = load_hardware(gpu)
    try:
        if engine is not None:
            return engine_cost_model(m, g, tp, engine, dp, ep)
        cm = CostModel(m, g, tp, weight_dtype, kv_dtype, roofline=roofline, dp=dp, ep=ep, kernels=kernels)
        check_checkpoint_weights(m, cm.weight_dtype)
        return cm
    except LlmsimError as e:   # name the flag, not the scenario key
        flag = {"engine.weight_dtype": "--weight-dtype", "engine.backend": "--backend" if engine else "--kernels",
                "engine.backend_version": "--backend-version", "engine.moe_backend": "--moe-backend"}.get(
            e.key_path or "", f"--{e.key_path}")
        message = _moe_remedies_as_flags(e.message) if e.key_path == "engine.moe_backend" else e.message
        raise LlmsimError(message, key_path=flag if e.key_path else None) from None


def _replica(tp: int, dp: int, ep: int) -> str:
    """How a title names the replica: ``2×`` or ``16 (tp 1 × dp 16, ep 16)×``."""
    if dp == 1 and ep == 1:
        return f"{tp}×"
    return f"{tp * dp} (tp {tp} × dp {dp}, ep {ep})×"


def _kib(n_bytes: float) -> str:
    """Bytes as KiB, whole above 10 (a layer stack's KV per token), to three
    figures below (one of a small model's), never rounded to nothing."""
    kib = n_bytes / 1024
    return f"{kib:,.0f} KiB" if kib >= 10 else f"{kib:.3g} KiB"


def _gb(n_bytes: float) -> str:
    return f"{n_bytes / 1e9:.2f} GB"


def _kv_gb(full: float, window: float) -> str:
    """A KV figure whose sliding-window layers' part is counted apart (a request's windows, a pool split
    by a ratio): the whole, then its two parts by whose they are, so that weights, reserve and KV add up
    to the GPU and capacity / per request to the concurrency. Each part alone once read as the whole:
    "KV capacity 51.77 GB" beside "sliding-window KV 51.77 GB" of a 103.5 GB pool."""
    if not window:
        return _gb(full)
    whole = round(full / 1e9, 2) + round(window / 1e9, 2)      # the parts as shown, so that they add up
    return f"{_gb(whole * 1e9)} (full-attention layers {_gb(full)} + sliding-window layers {_gb(window)})"


def _tflop(flops: float) -> str:
    return f"{flops / 1e12:,.4g} TFLOP"


def _table(title: str, rows: list[tuple[str, object]]) -> Table:
    """A two-column table at least as wide as its title, so the title (what
    was priced) is not wrapped on an 80-column terminal when it fits there."""
    table = kv_table(title, rows)
    table.min_width = cell_len(title)
    return table


#: ``estimate step`` fields as its table shows them: the label (its unit in
#: it, as ``estimate request`` does) and how the value is written. The
#: ``--json`` object keeps the keys, a machine interface. gpu, model, tp, dp
#: and ep are in the title.
_STEP_ROWS: dict[str, tuple[str, Callable[[Any], Any]]] = {
    "mode": ("mode", str), "backend": ("backend", str), "kernels": ("kernels", str),
    "moe_backend": ("MoE backend", str),
    "weight_dtype": ("weight format", str), "kv_dtype": ("KV cache format", str),
    "params_b": ("parameters (B)", float), "active_params_b": ("active per token (B)", float),
    "layout": ("layout", str), "kv_bytes_per_token": ("KV per token", _kib),
    "total_ms": ("iteration (ms)", float), "linear_ms": ("linear layers (ms)", float),
    "attention_ms": ("attention (ms)", float), "comm_ms": ("communication (ms)", float),
    "other_ms": ("elementwise (ms)", float), "overhead_ms": ("CPU and launch overhead (ms)", float),
    "flops": ("compute", _tflop), "bytes": ("memory traffic", _gb), "bound": ("roofline bound", str),
}
_IN_TITLE = ("gpu", "model", "tp", "dp", "ep")


def kv_per_token_label(copies: float, is_mla: bool, sliding: bool = False) -> str:
    """The KV-per-token row's label, saying why a replica holds more than one
    copy of a token's KV (the figure is on the replica's basis, as the
    capacity beside it is) and, for a model with sliding-window layers, that
    it is its full-attention layers' (the windows' are counted apart)."""
    layers = "full-attention layers" if sliding else ""
    if copies <= 1:
        return f"KV per token ({layers})" if layers else "KV per token"
    why = "MLA's latent on each GPU" if is_mla else "fewer KV heads than GPUs"
    return f"KV per token ({copies:g}{' copies' if is_mla else '× its share'}: {why}{'; ' + layers if layers else ''})"


def step_rows(out: dict[str, Any], prefill_tokens: int, prefill_context: int, decode_batch: int,
              decode_context: int, is_mla: bool = False) -> list[tuple[str, Any]]:
    """The rows of ``estimate step``'s table: what the step holds, then
    ``out`` (its ``--json`` object) labelled with units, in the order of
    ``estimate request`` (what is priced, then times, then bytes); a key
    without a label (a cost model's extra figure) shows as it is, last."""
    rows: list[tuple[str, Any]] = []
    if prefill_tokens:
        rows.append(("prefill chunk", f"{prefill_tokens:,} tokens" + (f" after {prefill_context:,} cached"
                                                                       if prefill_context else "")))
    if decode_batch:
        rows.append(("decoding", f"{decode_batch:,} sequences at {decode_context:,} tokens of context"))
    order = list(_STEP_ROWS)
    keys = sorted((k for k in out if k not in _IN_TITLE and k != "warnings"),
                  key=lambda k: order.index(k) if k in order else len(order))
    for key in keys:
        if key == "kv_copies":      # in the KV-per-token row's label
            continue
        label, show = _STEP_ROWS.get(key, (key, lambda v: v))
        if key == "kv_bytes_per_token":
            label = kv_per_token_label(out.get("kv_copies", 1), is_mla)
        rows.append((label, out[key] if out[key] is None else show(out[key])))
    return rows


#: Prefill chunks one estimate prices (a 1M-token prompt in chunks of 16 is 65,536).
_MAX_CHUNKS = 100_000


def _nonneg(name: str, v: int) -> None:
    if v < 0:
        raise LlmsimError(f"{name} must be ≥ 0 (got {v})")


@estimate_app.command("step", epilog=epilog("estimate step"))
def step(gpu: str = GPU, model: str = MODEL, tp: int = TP, dp: int = DP, ep: int = EP,
         weight_dtype: Optional[str] = WD, kv_dtype: str = KD,
         prefill_tokens: int = typer.Option(0, help="new prompt tokens in the step"),
         prefill_context: int = typer.Option(0, help="tokens already cached before the chunk"),
         decode_batch: int = typer.Option(0, help="sequences decoding one token each"),
         decode_context: int = typer.Option(0, help="context length of each decoding sequence"),
         roofline: bool = ROOF, kernels: Optional[str] = KERNELS, backend: Optional[str] = BACKEND,
         backend_version: Optional[str] = VERSION, cuda_graph_gib: Optional[float] = GRAPHS,
         moe_backend: Optional[str] = MOE_BACKEND, json: bool = JSON) -> None:
    """Time of one engine iteration, by component."""
    from ..profiles.model import MAX_CONTEXT

    for n, v in (("--prefill-tokens", prefill_tokens), ("--prefill-context", prefill_context),
                 ("--decode-batch", decode_batch), ("--decode-context", decode_context)):
        _nonneg(n, v)
        if v > MAX_CONTEXT:     # a typo's 10³⁰ would be priced as if a GPU could hold it
            raise LlmsimError(f"{v:,} is past any model's context (llmsim takes at most {MAX_CONTEXT:,} tokens "
                              f"or sequences in a step)", key_path=n)
    if prefill_tokens == 0 and decode_batch == 0:
        raise LlmsimError("an empty step: give --prefill-tokens and/or --decode-batch")
    weight_dtype, kv_dtype = _dtypes(weight_dtype, kv_dtype)
    m, weight_dtype = _model(model, weight_dtype)
    _gpu(gpu)
    engine = _engine(gpu, m, weight_dtype, kv_dtype, kernels, backend, backend_version, roofline, cuda_graph_gib,
                     moe_backend)
    cm = _cost_model(gpu, m, tp, weight_dtype, kv_dtype, roofline, dp, ep, kernels, engine)
    chunks = [(prefill_tokens, prefill_context)] if prefill_tokens else []
    b = cm.step(chunks, decode_batch, float(decode_batch * decode_context))
    from ..estimate import model_figures

    kernels = engine.kernels if engine is not None else kernels
    out = {**cm.describe(), **({"backend": backend} if backend else {}), **({"kernels": kernels} if kernels else {}),
           **model_figures(cm), **b.as_ms()}
    notes = [n for n in (_past_context(cm, prefill_tokens, prefill_context, decode_batch, decode_context),
                         _step_room(cm, engine, prefill_tokens + prefill_context
                                    + decode_batch * (decode_context + 1))) if n]
    if notes:
        # A step is arithmetic on sizes, not a request a server takes or refuses (`estimate request` refuses
        # one past the context, as a run does): say so, still answer.
        out["warnings"] = notes
        for note in notes:
            warn(note)
    if json:
        print_json(out)
        return
    console.print(_table(f"{model} on {_replica(tp, dp, ep)} {gpu}: one iteration",
                         step_rows(out, prefill_tokens, prefill_context, decode_batch, decode_context,
                                   cm.model.is_mla)))
    if not roofline:
        for note in provenance_notes({cm.gpu.name: cm.gpu.provenance()}):
            console.print(f"[yellow]note:[/] {escape(note)}")


def _past_context(cm, prefill_tokens: int, prefill_context: int, decode_batch: int, decode_context: int) -> str:
    """Why the step's longest sequence is past the model's context, or "": the stacks refuse a
    request that long, as ``estimate request`` refuses its input + output."""
    longest = max(prefill_context + prefill_tokens, decode_context + 1 if decode_batch else 0)
    mp = cm.model.max_position_embeddings
    return f"a sequence of {longest:,} tokens exceeds {cm.model.name}'s context of {mp:,}" if longest > mp else ""


def _step_room(cm, engine, kv_tokens: int) -> str:
    """Why no replica could run the step priced (its weights, or its
    sequences' KV, exceed the GPUs' memory as the stack divides it), or ""."""
    from ..estimate import engine_pool

    try:
        mem = engine_pool(cm, engine)
    except LlmsimError as e:
        return e.message
    room = mem.usable_blocks * mem.block_size
    if kv_tokens > room:
        return (f"the step's sequences hold {kv_tokens:,} tokens of KV, more than the {room:,} "
                f"one replica's KV pool holds for requests: no replica runs this step")
    return ""


def _concurrency(out: dict, dp: int) -> list[tuple[str, object]]:
    """How many requests run at once: what the KV pool holds, the scheduler's cap on running requests (dp
    ranks of it, under the stack's own flag), and the smaller of the two, saying which binds."""
    seqs = out["scheduler_concurrent_requests"]
    cap = f"{seqs:,}" if dp == 1 else f"{dp} × {seqs // dp:,}"
    binds = "the KV binds" if out["concurrency_bound"] == "kv" else "the scheduler's cap binds"
    return [("concurrent requests the KV holds", out["kv_concurrent_requests"]),
            ("scheduler's cap (requests)", f"{cap} ({out['scheduler_cap_flag']})"),
            ("concurrent requests that fit", f"{out['max_concurrent_requests']:,}: {binds}")]


def _token_count(flag: str, text: str) -> int:
    """``text`` as a whole number of tokens, or a refusal saying what to write (``30k``: 30000)."""
    try:
        return int(text.strip().replace("_", ""))
    except ValueError:
        number = in_key_unit(text, "tokens")
        slip = f"write {number}" if number else None if re.fullmatch(r"[-+.\deE\s]*", text) else unit_slip(text, "tokens")
        raise LlmsimError(f"{text!r} is not a whole number of tokens" + (f"; {slip}" if slip else ""),
                          key_path=flag) from None


def _refuse_as_run_does(engine: Optional[EngineConfig], cm: Any, prompt: int, output: int, budget: int,
                        backend: Optional[str]) -> Optional[str]:
    """A request ``llmsim run`` refuses on this backend's pool (without one, on llmsim's own engine, as a
    pool naming none runs) is refused here in the run's words, not priced: one past the launch's length
    limit (engine/request_length.py, counted as the stack counts it), and a prompt past the token budget
    of a stack that does not chunk it (TensorRT-LLM). Priced, it gave a TTFT no server reaches. Returns
    why the run serves fewer output tokens than asked where the stack cuts them at its limit, else None."""
    # imported here: the engine's modules load the cost model, which the CLI's start must not (test_cli_plain)
    from ..engine.config import EngineConfig
    from ..engine.request_length import length_limit, over_budget, too_long

    engine = engine if engine is not None else EngineConfig()
    limit = engine.longest_request(cm.model)
    whose = f"engine.max_model_len (--backend {backend})" if engine.max_model_len else f"{cm.model.name}'s context"
    lim = length_limit(engine, None, limit)
    refusal = too_long(lim, prompt, output, whose)
    if refusal is not None:
        raise LlmsimError(refusal[0], key_path=f"--{refusal[1]}")
    cap = engine.model_copy(update={"max_num_batched_tokens": budget}).longest_prompt(cm.dp)
    if cap is not None and prompt > cap:
        per_rank = " per attention-DP rank" if cm.dp > 1 else ""
        raise LlmsimError(over_budget(f"input ({prompt})", cap, f"(--max-num-batched-tokens{per_rank})",
                                      engine.stack_label, "raise --max-num-batched-tokens or shorten the prompt"),
                          key_path="--input")
    if lim.cuts_output and prompt + output > lim.tokens:
        return (f"input + output = {prompt + output:,} tokens exceeds {whose} of {limit:,}{lim.said}: "
                f"{engine.stack_label} cuts the output there in a run, and this estimate prices all {output:,} "
                "output tokens asked for")
    return None


@estimate_app.command("request", epilog=epilog("estimate request"))
def request(gpu: str = GPU, model: str = MODEL, tp: int = TP, dp: int = DP, ep: int = EP,
            input_text: str = typer.Option(..., "--input", help="prompt tokens", metavar="<int>"),
            output_text: str = typer.Option(..., "--output", help="generated tokens", metavar="<int>"),
            mfu: Optional[float] = typer.Option(None, help="also give 2·params·I/(peak·tp·MFU)"),
            weight_dtype: Optional[str] = WD, kv_dtype: str = KD, roofline: bool = ROOF,
            max_num_batched_tokens: Optional[int] = typer.Option(
                None, help="prefill chunk size; default: --backend's, else 8192"),
            gpu_memory_utilization: Optional[float] = typer.Option(
                None, help="as in vLLM; default: --backend's, else 0.9"),
            kernels: Optional[str] = KERNELS, backend: Optional[str] = BACKEND,
            backend_version: Optional[str] = VERSION, cuda_graph_gib: Optional[float] = GRAPHS,
            moe_backend: Optional[str] = MOE_BACKEND, json: bool = JSON) -> None:
    """No-load TTFT and TPOT of one request, and the replica's memory division."""
    input, output = _token_count("--input", input_text), _token_count("--output", output_text)
    if input < 1 or output < 1:
        raise LlmsimError("--input and --output must be ≥ 1")
    if mfu is not None and not 0 < mfu <= 1:
        raise LlmsimError(f"--mfu must be in (0, 1] (got {mfu})")
    weight_dtype, kv_dtype = _dtypes(weight_dtype, kv_dtype)
    m, weight_dtype = _model(model, weight_dtype)
    _gpu(gpu)
    engine = _engine(gpu, m, weight_dtype, kv_dtype, kernels, backend, backend_version, roofline, cuda_graph_gib,
                     moe_backend)
    if max_num_batched_tokens is None:
        max_num_batched_tokens = engine.max_num_batched_tokens if engine is not None else 8192
    rule = engine.kv_memory.rule if engine is not None and engine.kv_memory is not None else "vllm"
    if gpu_memory_utilization is not None and rule != "vllm":
        # a pool sized by another stack's rule never reads it: both values gave the same pool
        raise LlmsimError(f"is vLLM's share of the GPU, and --backend {backend} sizes its KV pool by its own rule "
                          f"({rule}: engine.kv_memory.fraction in a scenario); drop it",
                          key_path="--gpu-memory-utilization")
    if gpu_memory_utilization is None:
        gpu_memory_utilization = engine.gpu_memory_utilization if engine is not None else 0.9
    if not 0 < gpu_memory_utilization <= 1:
        raise LlmsimError(f"--gpu-memory-utilization must be in (0, 1] (got {gpu_memory_utilization})")
    if max_num_batched_tokens < 1:
        raise LlmsimError("--max-num-batched-tokens must be ≥ 1")
    from ..profiles.model import MAX_CONTEXT

    for flag, tokens in (("--input", input), ("--output", output),
                         ("--max-num-batched-tokens", max_num_batched_tokens)):
        if tokens > MAX_CONTEXT:     # the prefill is priced chunk by chunk: a typo would loop for hours
            raise LlmsimError(f"{tokens:,} tokens, past any model's context (llmsim takes at most "
                              f"{MAX_CONTEXT:,})", key_path=flag)
    if input / max_num_batched_tokens > _MAX_CHUNKS:
        raise LlmsimError(f"a {input:,}-token prompt in chunks of {max_num_batched_tokens:,} is more than "
                          f"{_MAX_CHUNKS:,} prefill steps; raise --max-num-batched-tokens", key_path="--input")
    cm = _cost_model(gpu, m, tp, weight_dtype, kv_dtype, roofline, dp, ep, kernels, engine)
    from ..estimate import request_estimate

    cut = _refuse_as_run_does(engine, cm, input, output, max_num_batched_tokens, backend)
    out = request_estimate(cm, input, output, mfu, max_num_batched_tokens, gpu_memory_utilization,
                           engine.block_size if engine is not None else 16, engine)
    notes = out.pop("warnings", [])     # the estimate's own: a pool its stack would not start
    if cut is not None:
        notes.insert(0, cut)
    if notes:
        out["warnings"] = notes
        for note in notes:
            warn(note)
    if json:
        print_json(out)
        return
    from ..report.summary_format import weights_served

    rows = [("mode", out["mode"]), ("parameters (B)", out["params_b"]), ("active per token (B)", out["active_params_b"]),
            ("layout", out["layout"]),
            *((("backend", out["backend"]), *([("MoE backend", out["moe_backend"])] if "moe_backend" in out else []),
               ("prefill (ms)", out["prefill_ms"]), ("front end (ms)", out["front_end_ms"]))
              if engine is not None else ()),
            ("TTFT (ms)", out["ttft_ms"]), ("TPOT (ms)", out["tpot_ms"]),
            ("prefill tokens/s", out["prefill_tokens_per_s"]), ("decode tokens/s", out["decode_tokens_per_s"])]
    if mfu is not None:
        rows += [(f"prefill at {mfu:.0%} MFU (ms)", out["mfu_prefill_ms"]),
                 (f"tokens/s at {mfu:.0%} MFU", out["mfu_prefill_tokens_per_s"])]
    sliding = cm.model.num_sliding_layers > 0
    rows += [(kv_per_token_label(out["kv_copies"], cm.model.is_mla, sliding), _kib(out["kv_bytes_per_token"])),
             ("KV per request", _kv_gb(out["kv_bytes_per_request"], out.get("kv_window_bytes_per_request", 0.0))),
             ("weights", f"{_gb(out['weights_bytes'])} ({weights_served(out, noted='{weights}; {note}')})"),
             ("reserve", _gb(out["reserve_bytes"])),
             ("KV capacity", _kv_gb(out["kv_capacity_bytes"], out["kv_window_bytes"])),
             # the figure the stacks' start-up logs give (vLLM's "GPU KV cache size: N tokens")
             ("KV capacity (tokens)", out["kv_capacity_tokens"]),
             *_concurrency(out, dp)]
    console.print(_table(f"{model} on {_replica(tp, dp, ep)} {gpu}: {input} in / {output} out", rows))
