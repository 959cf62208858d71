"""Time of one engine iteration on one replica.

An iteration runs every layer once over all tokens scheduled in it: decode
tokens (one per running sequence) and prefill chunks (each with the context
already cached before it). Its time is the sum of op families — linear
layers, attention, tensor-parallel all-reduces, other elementwise work — plus
a fixed per-iteration overhead. The engine calls :meth:`CostModel.step_time`
once per scheduled iteration and :meth:`CostModel.decode_coefficients` to
integrate runs of decode-only iterations in closed form, so both are cheap:
everything that depends only on the token count is memoised.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Optional, Sequence

from ..dtypes import BYTES, EXPERT_ONLY_DTYPES, QUANT_FORMATS, WEIGHT_DTYPES, compute_dtype, linear_dtype, normalize
from ..errors import LlmsimError
from ..expert_layout import ExpertLayout
from ..parallelism import Parallelism
from ..profiles.hardware import Calibration, HardwareProfile
from ..profiles.model import ModelProfile
from ..profiles.moe_backend import backend_text, expert_backend, expert_kernel_refusal, resolved_backend
from . import components as C
from . import scalar
from .layout import LayoutOps, check_weight_dtype, gemm_format, needs_layout
from .mla import format_linear_time
from .eager import launches_per_forward
from .rank_load import RankLoad
from .lora import LoraCost

ROOFLINE = Calibration(status="roofline")
_US = 1e-6

# Elementwise bytes per token per layer (bf16), in units of hidden / ffn
# elements: two RMSNorms (read+write), residual adds, rotary on q/k, and the
# gated activation (read gate+up, write one).
_OTHER_HIDDEN_RW = 10.0
_OTHER_FFN_RW = 3.0


@dataclass(frozen=True)
class StepBreakdown:
    """Seconds per component, plus the roofline's FLOPs and bytes."""

    total_s: float
    linear_s: float
    attention_s: float
    comm_s: float
    other_s: float
    overhead_s: float
    flops: float
    bytes: float
    bound: str

    def as_ms(self) -> dict:
        d = asdict(self)
        out = {k.replace("_s", "_ms"): v * 1e3 for k, v in d.items() if k.endswith("_s")}
        out.update(flops=self.flops, bytes=self.bytes, bound=self.bound)
        return out


class CostModel:
    """The iteration-time function for (model, GPU, TP, dtypes)."""

    def __init__(self, model: ModelProfile, gpu: HardwareProfile, tp: int = 1, weight_dtype: str = "bf16",
                 kv_dtype: str = "bf16", roofline: bool = False, iteration_overhead_ms: float | None = None,
                 iteration_us_per_seq: float = 0.0, dp: int = 1, ep: int = 1, mxfp4_activation: str | None = None,
                 async_scheduling: bool = False, kernels: str | None = None, eager_launch_us: float = 0.0,
                 graph_max_tokens: int = 0, mxfp4_expert_layout: ExpertLayout | None = None,
                 moe_backend: str | None = None):
        if kernels is not None and gpu.serving_stacks is not None and kernels not in gpu.serving_stacks:
            raise LlmsimError(f"the {kernels} serving stack does not run on {gpu.name} (its profile's "
                              f"serving_stacks: {', '.join(gpu.serving_stacks)}); llmsim cannot model it there",
                              key_path="engine.backend")
        setting = moe_backend
        try:    # what TensorRT-LLM's AUTO runs for this model on this GPU
            moe_backend = resolved_backend(moe_backend, model.model_type, gpu.name, gpu.sm_version)
        except ValueError as e:
            raise LlmsimError(str(e), key_path="engine.moe_backend") from None
        # A stack's own kernels where the GPU profile measured them apart.
        gpu = gpu.for_kernels(kernels, moe_backend)
        weight_dtype, kv_dtype = normalize(weight_dtype), normalize(kv_dtype)
        if weight_dtype not in WEIGHT_DTYPES:
            raise LlmsimError(f"unknown weight dtype {weight_dtype!r}; expected {', '.join(WEIGHT_DTYPES)}")
        check_weight_dtype(weight_dtype, gpu)
        if weight_dtype in EXPERT_ONLY_DTYPES and not model.is_moe:
            raise LlmsimError(f"weight_dtype {weight_dtype} quantises the routed experts of a MoE model only (the "
                              f"stacks run every other linear layer unquantised); {model.name} has no experts",
                              key_path="engine.weight_dtype")
        # what the experts run, said where the stack picks it: auto's choice varies by model and GPU
        self.moe_backend: str | None = None
        if moe_backend is not None and model.is_moe:
            fmt = gemm_format(weight_dtype, model.checkpoint_dtype, gpu.has_unit("fp4"), mxfp4_activation)
            if (why := expert_kernel_refusal(moe_backend, fmt, gpu.name, gpu.sm_version, setting,
                                             model.model_type)) is not None:
                raise LlmsimError(why, key_path="engine.moe_backend")
            self.moe_backend = backend_text(setting or moe_backend, expert_backend(moe_backend, fmt))
        if kv_dtype not in ("bf16", "fp16", "fp8"):
            raise LlmsimError(f"unknown KV dtype {kv_dtype!r}; expected bf16, fp16 or fp8")
        # Linear layers other than the routed experts (those follow
        # LayoutOps.fmt): all of them, unless the format quantises experts only.
        lin = linear_dtype(weight_dtype)
        cdt = compute_dtype(lin, gpu.units)
        if not roofline:   # a serving step's GEMMs run back to back, at the clocks the GPU holds under load
            gpu = gpu.under_sustained_load(cdt)
        self.par = Parallelism(tp, dp, ep)
        self.par.check(model, gpu)
        if mxfp4_expert_layout is not None and mxfp4_expert_layout.without_ep and ep > 1 and weight_dtype == "mxfp4":
            raise LlmsimError(f"ep {ep} with MXFP4 experts held by {mxfp4_expert_layout.kernel}: the stack runs that "
                              "kernel only without expert parallelism and upcasts the experts to bf16 otherwise, "
                              "which llmsim does not model; set ep: 1", key_path="ep")
        if mxfp4_expert_layout is not None and mxfp4_expert_layout.missing and weight_dtype == "mxfp4":
            raise LlmsimError(f"the stack does not start with MXFP4 experts on {gpu.name}: "
                              f"{mxfp4_expert_layout.missing}; name another backend_version",
                              key_path="engine.backend_version")
        self.model, self.gpu, self.tp, self.dp, self.ep = model, gpu, tp, dp, ep
        self.gpus = self.par.gpus
        self.weight_dtype, self.kv_dtype = weight_dtype, kv_dtype
        self.mxfp4_activation = mxfp4_activation
        self.mxfp4_expert_layout = mxfp4_expert_layout
        self.roofline = roofline
        self.cal = ROOFLINE if roofline else gpu.calibration
        if iteration_overhead_ms is None:
            iteration_overhead_ms = self.cal.iteration_overhead_ms
        self.overhead_s = 0.0 if roofline else iteration_overhead_ms * 1e-3
        # The serving stack's scheduler/sampler time grows with the sequences it handles.
        self.overhead_per_seq_s = 0.0 if roofline else iteration_us_per_seq * _US
        self.async_scheduling = async_scheduling

        m, L = model, model.num_hidden_layers
        self.layers = L
        self.heads = m.num_attention_heads // tp
        # vLLM replicates KV heads when there are fewer than TP ranks.
        self.kv_heads = max(1, m.kv_heads // tp)
        self.head_dim = m.dim_head
        self.w_bytes = BYTES[lin]
        self.a_bytes = 1.0 if cdt in ("fp8", "int8") else 2.0     # cdt is 8-bit only where the GPU has the unit
        if lin == "nvfp4":   # W4A4: activations quantised to NVFP4 too
            self.a_bytes = QUANT_FORMATS["nvfp4"].act_bytes
        self.kv_bytes = BYTES[kv_dtype]
        self.peak_linear = gpu.peak_flops(cdt) * gpu.linear_efficiency(cdt)
        # The LM head stays bf16 whatever the checkpoint (fp8, int8 and NVFP4 checkpoints leave
        # lm_head unquantised, and vLLM's ParallelLMHead runs it so): bf16 rate, bf16 activations.
        self.peak_lm_head = gpu.peak_flops("bf16") * gpu.linear_efficiency("bf16")
        self.peak_attn = gpu.peak_flops("bf16")
        self.hbm_bw = gpu.hbm_bandwidth
        self.link_bw = gpu.interconnect.bandwidth_gb_s * 1e9
        h, ffn = m.hidden_size, m.intermediate_size
        gate = 2 if m.is_gated else 1
        # (n, k) of each per-layer GEMM on one TP shard.
        self.layer_gemms = [
            (m.q_dim // tp + 2 * self.kv_heads * m.dim_head, h),   # fused QKV: a KV head per GPU at least
            (h, m.q_dim // tp),                     # output projection (row parallel)
            (gate * ffn // tp, h),                  # fused gate+up
            (h, ffn // tp),                         # down projection
        ]
        self.lm_head = (m.vocab_size // tp, h)
        # On vLLM (the kernels of the base calibration), a block-scaled fp8
        # checkpoint (128×128 weight blocks: DeepSeek, Qwen3-FP8, MiniMax-M2)
        # runs every linear layer it quantises in the block-fp8 kernels
        # (Fp8LinearMethod with weight_block_size): a per-token-group
        # activation quantisation plus a block-scaled GEMM, measured slower
        # than the per-tensor fp8 kernel at decode sizes. vLLM's measured
        # block-fp8 linear fit (calibration.mla_projection, fitted on vLLM's
        # MLA modules, whose projections are these kernels) prices them,
        # never below the per-tensor fit of the same shape. SGLang and
        # TensorRT-LLM run block-fp8 GEMMs of their own, unmeasured here.
        self.vllm_kernels = kernels in (None, "vllm")
        block = (not roofline and self.vllm_kernels and lin == "fp8"
                 and gemm_format(lin, m.checkpoint_dtype) == "fp8_block")
        self.block_linear = self.cal.mla_projection.get("fp8_block") if block else None
        self.other_bytes_per_token = (_OTHER_HIDDEN_RW * h + _OTHER_FFN_RW * ffn / tp) * 2.0

        self.decode_rate = L * C.decode_attention_per_context(
            self.heads, self.kv_heads, self.head_dim, self.peak_attn, self.hbm_bw, self.cal.attention_decode, self.kv_bytes)
        self.decode_per_seq = L * self.cal.attention_decode.per_seq_us * _US
        self.decode_fixed = L * self.cal.attention_decode.fixed_us * _US
        self._token_cache: dict = {}
        self._lm_cache: dict[int, float] = {}
        # MoE, MLA, sliding windows, dp or ep: priced layer kind by layer kind.
        self.ops = LayoutOps(self) if needs_layout(model, dp, ep) else None
        # The routed experts' memory against the checkpoint's shape, as the stack stores them (LayoutOps).
        self.expert_storage = self.ops.expert_storage if self.ops is not None else 1.0
        # LoRA adapters' kernels (costmodel/lora.py), set by a pool that serves them.
        self.lora: Optional[LoraCost] = None
        # An iteration holding prompt tokens beyond the largest captured graph
        # runs eagerly: it lasts at least as long as its launches (costmodel/eager.py).
        self.eager_launch_us, self.graph_max_tokens = eager_launch_us, graph_max_tokens
        self.eager_s = 0.0 if roofline else eager_launch_us * _US * launches_per_forward(model, tp, ep, self.a_bytes < 2.0)

    # --- components that depend only on token counts (memoised) -----------
    def _gemm(self, mtok: float, n: int, k: int, wbytes: float) -> float:
        return float(C.gemm_time(mtok, n, k, self.peak_linear, self.hbm_bw, self.cal.gemm, wbytes, self.a_bytes,
                                 self.gpu.num_sms))

    def linear_gemm(self, mtok: float, n: int, k: int) -> float:
        """One of the pool's quantised (non-expert) linear layers: the dense
        GEMM fit, or a block-fp8 checkpoint's kernel where that is slower."""
        t = self._gemm(mtok, n, k, self.w_bytes)
        if self.block_linear is not None:
            t = max(t, float(format_linear_time(mtok, n, k, self.gpu, self.block_linear, "fp8_block")))
        return t

    def linear_time(self, tokens: int, rank: int | None = None) -> float:
        """``rank``: the busiest attention-DP rank's tokens (:meth:`busiest_rank`); None: an even split."""
        if self.ops is not None:
            return self.ops.linear_time(tokens, rank)
        if tokens <= 0:
            return 0.0
        return self.layers * sum(self.linear_gemm(tokens, n, k) for n, k in self.layer_gemms)

    def lm_head_time(self, seqs: int) -> float:
        t = self._lm_cache.get(seqs)
        if t is None:
            n, k = self.lm_head
            m = seqs if self.ops is None else self.ops.lm_head_seqs(seqs)
            t = float(C.gemm_time(m, n, k, self.peak_lm_head, self.hbm_bw, self.cal.gemm, 2.0, 2.0,
                                  self.gpu.num_sms)) if seqs > 0 else 0.0
            self._lm_cache[seqs] = t
        return t

    def group_bw(self, gpus: int) -> float:
        """Bytes/s per GPU and direction a collective over ``gpus`` GPUs has (all
        of the link through a switch, n − 1 peer links of a mesh)."""
        return self.gpu.group_bandwidth_gb_s(gpus) * 1e9

    def comm_time(self, tokens: int, rank: int | None = None) -> float:
        if self.ops is not None:
            return self.ops.comm_time(tokens, rank)
        if tokens <= 0:
            return 0.0
        msg = tokens * self.model.hidden_size * 2.0
        return 2 * self.layers * float(C.allreduce_time(msg, self.tp, self.group_bw(self.tp), self.cal.allreduce))

    def other_time(self, tokens: int, rank: int | None = None) -> float:
        if self.ops is not None:
            return self.ops.other_time(tokens, rank)
        if tokens <= 0:
            return 0.0
        p = self.cal.other
        return self.layers * (tokens * self.other_bytes_per_token / (self.hbm_bw * p.eta_memory) + p.fixed_us * _US)

    def token_time(self, tokens: int, rank: int | None = None) -> float:
        """Linear + comm + other for ``tokens`` scheduled tokens, ``rank`` of them on the busiest
        attention-DP rank (None: spread evenly; memoised)."""
        key = tokens if rank is None else (tokens, rank)
        t = self._token_cache.get(key)
        if t is None:
            t = self.linear_time(tokens, rank) + self.comm_time(tokens, rank) + self.other_time(tokens, rank)
            self._token_cache[key] = t
        return t

    def busiest_rank(self, prefill_chunks: Sequence[tuple[int, int]], decode_batch: int,
                     load: RankLoad | None = None) -> int | None:
        """The busiest attention-DP rank's tokens in a step: by the ranks ``load`` places its chunks and
        decodes on, else with each chunk whole on a rank dealt in turn; None where the step is spread
        evenly (one rank, or decodes alone without a ``load``)."""
        if self.ops is None or self.ops.dp == 1 or not (prefill_chunks or load is not None):
            return None
        return self.ops.busiest_tokens(prefill_chunks, decode_batch, load)

    def prefill_attention_time(self, chunks: Sequence[tuple[int, int]], load: RankLoad | None = None) -> float:
        if not chunks:
            return 0.0
        if self.ops is not None:
            return self.ops.prefill_attention_time(chunks, load)
        p = self.cal.attention_prefill
        t = scalar.prefill_attention(chunks, self.heads, self.kv_heads, self.head_dim, self.kv_bytes,
                                     self.peak_attn * p.eta_compute, self.hbm_bw * p.eta_memory, p.sharpness)
        return self.layers * (t + p.fixed_us * _US)

    def decode_attention_time(self, batch: int, total_context: float, busiest: int = 0) -> float:
        """``busiest``: the most of the ``batch`` decodes one attention-DP rank runs (0: ⌈B/dp⌉)."""
        if batch <= 0:
            return 0.0
        if self.ops is not None:
            rest, rate = self.ops.decode_coefficients(batch, busiest)
            return rest + rate * total_context
        return self.decode_rate * total_context + self.decode_per_seq * batch + self.decode_fixed

    # --- the iteration ---------------------------------------------------
    def exposed_cpu(self, gpu_s: float, seqs: int) -> float:
        """The part of an iteration's CPU time (scheduling, input preparation,
        sampling and output handling for ``seqs`` sequences) the GPU waits for.

        Scheduled in turn, all of it: the GPU idles while the CPU prepares
        the next iteration. With async scheduling (vLLM's default from 0.14)
        the CPU prepares iteration N+1 while the GPU runs N, so only what
        exceeds the GPU's ``gpu_s`` shows. Callers pass the GPU time without
        the part that grows with the decode context, so an iteration stays
        affine in the context (``decode_coefficients``); that overstates
        the exposed CPU time only where the CPU outlasts the GPU anyway."""
        cpu = self.overhead_s + self.overhead_per_seq_s * seqs
        return max(0.0, cpu - gpu_s) if self.async_scheduling else cpu

    def launch_wait(self, gpu_s: float, prefill_chunks: Sequence[tuple[int, int]], tokens: int) -> float:
        """How long the GPU of an iteration waits on the CPU's kernel launches
        beyond its own ``gpu_s``: an eager iteration (prompt tokens, more of
        them than the largest captured graph holds) lasts its launches at
        least; a graph replay, nothing."""
        if not prefill_chunks or tokens <= self.graph_max_tokens:
            return 0.0
        return max(0.0, self.eager_s - gpu_s)

    def _decode_context_time(self, batch: int, context: float, busiest: int = 0) -> float:
        """The part of decode attention that grows with the attended context."""
        if batch <= 0:
            return 0.0
        rate = self.ops.decode_coefficients(batch, busiest)[1] if self.ops is not None else self.decode_rate
        return rate * context

    def lora_time(self, tokens: int, adapters: int) -> float:
        """The LoRA kernels' seconds over ``tokens`` tokens of ``adapters`` distinct adapters (0 without LoRA)."""
        return 0.0 if self.lora is None else self.lora.time(tokens, adapters)

    def step_time(self, prefill_chunks: Sequence[tuple[int, int]] = (), decode_batch: int = 0,
                  decode_context: float = 0.0, sampling_seqs: int | None = None, adapters: int = 0,
                  load: RankLoad | None = None) -> float:
        """Seconds for one iteration. ``decode_context`` is the total number of
        KV tokens the decode tokens attend to (Σ context over the batch);
        ``adapters``: distinct LoRA adapters of the batch; ``load``: the
        attention-DP rank each chunk and decode runs on (None: spread evenly)."""
        tokens = decode_batch + sum(c[0] for c in prefill_chunks)
        if tokens == 0:
            return 0.0
        if sampling_seqs is None:
            sampling_seqs = decode_batch + len(prefill_chunks)
        seqs = decode_batch + len(prefill_chunks)
        rank = self.busiest_rank(prefill_chunks, decode_batch, load)
        busiest = 0 if load is None else load.busiest_decodes
        gpu = self.token_time(tokens, rank) + self.lm_head_time(sampling_seqs)
        if load is not None and self.ops is not None and self.ops.dp > 1 and prefill_chunks and decode_batch:
            # chunks and decodes by rank: the slowest rank's attention, not the busiest of each summed
            gpu += self.ops.rank_attention_time(prefill_chunks, decode_batch, decode_context, load)
        else:   # (summed in this order, as the stored reference results were)
            gpu = gpu + self.prefill_attention_time(prefill_chunks, load) + self.decode_attention_time(
                decode_batch, decode_context, busiest)
        if adapters:
            gpu += self.lora_time(tokens, adapters)
        gpu += self.launch_wait(gpu, prefill_chunks, tokens)
        # In turn, the CPU time is added term by term as before the overlap
        # existed: folded through exposed_cpu the sums round differently in
        # the last bit and the stored reference results (bit for bit) move.
        if not self.async_scheduling:
            return gpu + self.overhead_s + self.overhead_per_seq_s * seqs
        return gpu + self.exposed_cpu(gpu - self._decode_context_time(decode_batch, decode_context, busiest), seqs)

    def decode_coefficients(self, batch: int, adapters: int = 0, busiest: int = 0) -> tuple[float, float]:
        """(a, b) with step_time(decode only, batch, S) == a + b·S exactly; ``busiest``: the
        most of them one attention-DP rank runs, as a ``load`` gives step_time (0: none given)."""
        if adapters:   # (LoRA pools are plain dense transformers: no layout ops)
            gpu = (self.token_time(batch) + self.lora_time(batch, adapters) + self.lm_head_time(batch)
                   + self.decode_per_seq * batch + self.decode_fixed)
            return gpu + (self.exposed_cpu(gpu, batch) if self.async_scheduling
                          else self.overhead_s + self.overhead_per_seq_s * batch), self.decode_rate
        if self.ops is not None:
            rest, rate = self.ops.decode_coefficients(batch, busiest)
            gpu = self.token_time(batch, busiest or None) + self.lm_head_time(batch) + rest
            if not self.async_scheduling:
                return gpu + self.overhead_s + self.overhead_per_seq_s * batch, rate
            return gpu + self.exposed_cpu(gpu, batch), rate
        if not self.async_scheduling:
            return (self.token_time(batch) + self.lm_head_time(batch)
                    + (self.decode_per_seq + self.overhead_per_seq_s) * batch + self.decode_fixed + self.overhead_s,
                    self.decode_rate)
        gpu = self.token_time(batch) + self.lm_head_time(batch) + self.decode_per_seq * batch + self.decode_fixed
        return gpu + self.exposed_cpu(gpu, batch), self.decode_rate

    def step(self, prefill_chunks: Sequence[tuple[int, int]] = (), decode_batch: int = 0,
             decode_context: float = 0.0, sampling_seqs: int | None = None) -> StepBreakdown:
        """The same iteration as :meth:`step_time`, itemised, with FLOPs and bytes."""
        tokens = decode_batch + sum(c[0] for c in prefill_chunks)
        if sampling_seqs is None:
            sampling_seqs = decode_batch + len(prefill_chunks)
        L = self.layers
        flops = nbytes = 0.0
        t_compute = t_memory = 0.0
        for n, k in (self.layer_gemms if self.ops is None else ()):
            f, b = C.gemm_flops_bytes(tokens, n, k, self.w_bytes, self.a_bytes)
            flops += L * f
            nbytes += L * b
            t_compute += L * f / self.peak_linear
            t_memory += L * b / self.hbm_bw
        rank = self.busiest_rank(prefill_chunks, decode_batch)
        if self.ops is not None and tokens:   # MoE/MLA/dp: FLOPs and weight bytes of the linear layers
            flops, nbytes = self.ops.flops_bytes(tokens, rank)
            t_compute, t_memory = flops / self.peak_linear, nbytes / self.hbm_bw
        if sampling_seqs:
            f, b = C.gemm_flops_bytes(sampling_seqs, *self.lm_head, 2.0, 2.0)
            flops += f
            nbytes += b
            t_compute += f / self.peak_lm_head
            t_memory += b / self.hbm_bw
        if self.ops is not None:   # MLA, sliding windows, dp ranks: each layer kind's own shape
            f, b = self.ops.attention_flops_bytes(prefill_chunks, decode_batch, decode_context)
        else:
            f = b = 0.0
            for new, cached in prefill_chunks:
                fc, bc = C.prefill_attention_flops_bytes(new, cached, self.heads, self.kv_heads, self.head_dim,
                                                         self.kv_bytes)
                f, b = f + L * fc, b + L * bc
            f += L * 4.0 * self.heads * self.head_dim * decode_context
            b += L * 2.0 * self.kv_heads * self.head_dim * self.kv_bytes * decode_context
        flops += f
        nbytes += b
        t_compute += f / self.peak_attn
        t_memory += b / self.hbm_bw
        nbytes += L * tokens * self.other_bytes_per_token
        t_memory += L * tokens * self.other_bytes_per_token / self.hbm_bw
        linear = self.linear_time(tokens, rank) + self.lm_head_time(sampling_seqs) if tokens else 0.0
        attention = self.prefill_attention_time(prefill_chunks) + self.decode_attention_time(decode_batch, decode_context)
        comm = self.comm_time(tokens, rank)
        other = self.other_time(tokens, rank)
        gpu = linear + attention + comm + other
        gpu_launched = gpu + self.launch_wait(gpu, prefill_chunks, tokens)
        fixed = gpu_launched - self._decode_context_time(decode_batch, decode_context)
        overhead = gpu_launched - gpu + (self.exposed_cpu(fixed, decode_batch + len(prefill_chunks)) if tokens else 0.0)
        total = gpu + overhead
        return StepBreakdown(total, linear, attention, comm, other, overhead, flops, nbytes,
                             "compute" if t_compute >= t_memory else "memory")

    def describe(self) -> dict:
        out = {"gpu": self.gpu.name, "model": self.model.name, "tp": self.tp,
               "weight_dtype": self.weight_dtype, "kv_dtype": self.kv_dtype,
               "mode": "roofline" if self.roofline else self.cal.status}
        if self.gpus != self.tp or self.ep > 1:
            out.update(dp=self.dp, ep=self.ep)
        if self.moe_backend is not None:
            out["moe_backend"] = self.moe_backend
        return out

