"""GPU profiles: datasheet peaks, prices, and the calibrated efficiencies.

The datasheet numbers say what the silicon could do; the ``calibration``
block says what vLLM's kernels actually get out of it, fitted by
``llmsim calibrate`` against measured kernel times. A profile without
measurements carries parameters transferred from a measured sibling and says
so (``status: transferred``), and every report repeats that flag.
"""
from __future__ import annotations

import math
import re
from typing import Annotated, ClassVar, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ..dtypes import QUANT_FORMATS, quant_format_name
from ..errors import KeyRefusal
from .loader import load_profile
from .moe_backend import own_sets_replace
from ..fields import leaf

GIB = 2**30


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class RooflineParams(_Strict):
    """One op family: time = softmax_s(F/(peak·η_c), B/(BW·η_m)) + fixed.

    ``sharpness`` s blends the compute and memory roofs: s = ∞ is the hard
    max of the textbook roofline; a finite s makes the knee gradual, as
    measured kernels are near the ridge point.
    """

    eta_compute: float = Field(default=1.0, gt=0, le=1.5)
    eta_memory: float = Field(default=1.0, gt=0, le=1.5)
    sharpness: float = Field(default=math.inf, gt=0, allow_inf_nan=True)   # .inf: the hard max
    fixed_us: float = Field(default=0.0, ge=0, le=1e6)
    # GEMMs only: compute efficiency ramps up with the token count m as
    # η_c · m / (m + m_half) (small-m tiles leave tensor cores idle).
    m_half: float = Field(default=0.0, ge=0, le=1e9)
    # GEMMs only, optional (0 = no ramp): narrow tensor-parallel shards leave
    # SMs idle too. Compute efficiency also ramps with the output width n
    # (few output tiles) and the reduction length k (each tile's prologue and
    # epilogue amortised over a short k loop): η_c · n/(n + n_half) ·
    # k/(k + k_half); streaming the weights needs enough columns to occupy
    # every SM: η_m · n/(n + n_half_memory). Each factor is ≤ 1, so a
    # calibrated GEMM is never faster than the roofline.
    n_half: float = Field(default=0.0, ge=0, le=1e9)
    k_half: float = Field(default=0.0, ge=0, le=1e9)
    n_half_memory: float = Field(default=0.0, ge=0, le=1e9)
    # GEMMs only, the wave form (``waves: true``, used instead of the η_c
    # ramps above): output tiles run in waves over the GPU's SMs, each tile
    # paying ``k_overhead`` extra k-steps (prologue/epilogue) and, for a
    # Tm×Tn tile, a reuse penalty 1 + tile_edge·(1/Tm + 1/Tn); the library
    # is assumed to pick the cheapest tile of a fixed candidate set
    # (components.GEMM_TILES). Needs the profile's ``num_sms``.
    waves: bool = False
    k_overhead: float = Field(default=0.0, ge=0, le=1e6)
    tile_edge: float = Field(default=0.0, ge=0, le=1e6)
    # GEMMs only: the fraction of the fitted (burst) compute rate a GEMM keeps
    # when the tensor cores stay busy for more than about a millisecond, as
    # a serving step's prefill keeps them: the GPU's power and clock
    # management, which the kernel rows show only where one measurement ran
    # that long (calibration/sustained.py). The kernel fit prices the burst
    # rate; the engine applies it (``HardwareProfile.under_sustained_load``).
    sustained: float = Field(default=1.0, gt=0, le=1)
    # decode attention only: per-sequence cost (split-KV reduction, q load).
    per_seq_us: float = Field(default=0.0, ge=0, le=1e6)
    # MoE layers and MLA prefill: work per token that no GEMM or attention
    # roof counts and that does not scale with experts or heads (gating,
    # quantising the input, norms, rotary embedding, the latent's cache
    # write, combining outputs), as multiples of one token's bf16 hidden row
    # read and written at η_m.
    token_traffic: float = Field(default=0.0, ge=0, le=1e6)


class MoeParams(RooflineParams):
    """One MoE dtype's routed-expert kernels: two grouped GEMMs in the
    :class:`RooflineParams` form (``m_half`` ramps on tokens per active
    expert, ``fixed_us`` per grouped GEMM), plus what routing adds.

    ``pair_ns`` is paid per routed (token, expert) pair of the whole batch,
    remote experts' pairs included: top-k selection, sorting and permuting
    the pairs and the weighted finalize scan every pair, whichever rank owns
    the expert. ``layer_fixed_us`` is the routing kernels' floor per layer.
    ``tile_us``: each output tile the grouped GEMMs launch (a grid sized for
    every pair of the batch plus a padded tile per expert, in whole tiles of
    the shard's width: :func:`simulator.costmodel.moe.grid_tiles`), spread
    over the SMs; ``expert_us``: each distinct expert on this rank (the
    per-problem setup of a grouped GEMM); ``token_traffic``: multiples of
    one token's bf16 hidden row read and written, per token of the batch
    (gating, quantising the input, combining the k outputs).
    ``unaligned_compute``, ``unaligned_memory``: how much slower a grouped
    GEMM whose reduction width (hidden for gate+up, the shard's expert
    width for down) is not a multiple of 16 elements computes and streams,
    η_c / (1 + s) and η_m / (1 + s) (vLLM's Triton kernel then cannot prove
    aligned rows and issues narrow loads:
    :data:`simulator.costmodel.moe.K_ALIGN`). 0 = off.
    ``width_align``: the kernel computes each expert's shard in whole blocks
    of this many columns of the expert width, so a shard that is not a
    multiple costs as the next multiple (FlashInfer's TRT-LLM MoE kernels:
    128, their BlockMajorK weight layout; vLLM pads the weights to it). A
    property of the kernel, set by the calibration, not fitted. 1 = none.
    ``hidden_align``: the same for the hidden size, weights and activations
    alike (vLLM pads MXFP4 experts on Blackwell's FlashInfer TRT-LLM
    kernels to 256). 1 = none.
    ``row_padding``: the kernel computes each expert's rows in whole blocks
    whose height it picks from the tokens per expert it expects, so the
    grouped GEMMs run on the padded rows, not the routed pairs (OpenAI's
    Triton ``matmul_ogs`` kernels, vLLM's gpt-oss MXFP4 method on Hopper:
    :func:`simulator.costmodel.moe.row_block`). Set by the calibration, not
    fitted. ``ep_routing_us``: per layer at ep > 1, the kernels a family's
    expert-parallel path adds to routing (vLLM's OAITritonExperts maps
    global expert ids to local ones and builds its routing data from a
    packed bitmatrix, where ep = 1 runs one fused routing kernel);
    ``local_pair_traffic``: multiples of one pair's bf16 activation bytes
    per pair of *this rank* (that family gathers and scatters a pair's rows
    inside its GEMMs, so remote pairs cost it nothing there). Both fitted
    only for that family (with expert-parallel rows), 0 elsewhere. With
    ``row_padding`` the GEMMs' ``m_half`` counts rows per output tile, not
    per expert (:func:`simulator.costmodel.moe.rank_time`).
    ``token_tiles``: with ``row_padding``, the kernel's ladder of token
    tiles, ascending (FlashInfer's TRT-LLM-gen kernels: the block is the
    tile their launcher runs by default for the pairs per expert it
    expects, :func:`simulator.costmodel.moe.row_block`; a single entry is a
    fixed tile, FlashInfer's CUTLASS kernels' 128 rows); empty for
    ``matmul_ogs``'s own rule. ``tile_n``: with ``row_padding``, the
    output columns of one tile (``matmul_ogs`` on Hopper's MXFP4 layout:
    256; TRT-LLM-gen: 128 weight rows, their operands swapped; FlashInfer's
    CUTLASS kernels: 16 on Hopper, 64 or 128 on Blackwell). Set by the
    calibration, not fitted. ``pad_row_cost``: with ``row_padding``, rows
    of MMA time each padding row (an expert's tile rows beyond its pairs)
    adds to its tile: FlashInfer's CUTLASS grouped GEMM on Hopper runs an
    expert's last, part-filled tile longer the emptier it is (a tile of
    one real row takes about twice a full one). Fitted for that kernel
    only, 0 elsewhere.
    """

    pair_ns: float = Field(default=0.0, ge=0, le=1e6)
    pair_traffic: float = Field(default=0.0, ge=0, le=1e6)
    layer_fixed_us: float = Field(default=0.0, ge=0, le=1e6)
    tile_us: float = Field(default=0.0, ge=0, le=1e6)
    expert_us: float = Field(default=0.0, ge=0, le=1e6)
    unaligned_compute: float = Field(default=0.0, ge=0, le=1e6)
    unaligned_memory: float = Field(default=0.0, ge=0, le=1e6)
    width_align: int = Field(default=1, ge=1, le=1 << 18)
    hidden_align: int = Field(default=1, ge=1, le=1 << 18)
    row_padding: bool = False
    token_tiles: tuple[Annotated[int, Field(ge=1, le=1 << 18)], ...] = ()
    tile_n: int = Field(default=256, ge=1, le=1 << 18)
    ep_routing_us: float = Field(default=0.0, ge=0, le=1e6)
    local_pair_traffic: float = Field(default=0.0, ge=0, le=1e6)
    pad_row_cost: float = Field(default=0.0, ge=0, le=1e6)

    @field_validator("token_tiles")
    @classmethod
    def _ascending(cls, v: tuple[int, ...]) -> tuple[int, ...]:
        """row_block picks its tile by a binary search of the ladder: out of order, it would pick another."""
        if any(a >= b for a, b in zip(v, v[1:])):
            raise ValueError(f"token tiles must ascend, each entry larger than the one before (got {list(v)})")
        return v


class AllReduceParams(_Strict):
    """t = latency + 2(n−1)/n · bytes / (link_bw · η) (ring all-reduce bus traffic).

    Optional fields (defaults keep the single ring regime above) describe
    what vLLM actually runs: its custom all-reduce kernel below
    ``custom_max_bytes`` — one-shot (every GPU reads all n−1 peers' buffers)
    up to ``oneshot_max_bytes``, two-shot (ring traffic) above — and NCCL
    from ``custom_max_bytes`` on, whose bus-bandwidth efficiency depends on
    the group size (``eta_by_gpus``; NVLink SHARP on 8-GPU NVSwitch nodes).
    """

    eta_bandwidth: float = Field(default=1.0, gt=0, le=1.5)
    latency_us: float = Field(default=0.0, ge=0, le=1e6)
    # NCCL's low-latency protocol (LL), which its tuner picks for small
    # messages: ll_latency_us + ll_latency_per_peer_us·(n−1) + ring bytes at
    # ll_eta_bandwidth; NCCL time = min(LL, the bandwidth regime above).
    # ll_eta_bandwidth = 0 leaves it out.
    ll_latency_us: float = Field(default=0.0, ge=0, le=1e6)
    ll_latency_per_peer_us: float = Field(default=0.0, ge=0, le=1e6)
    ll_eta_bandwidth: float = Field(default=0.0, ge=0, le=1.5)
    # NCCL bus-bandwidth efficiency per group size; missing sizes use eta_bandwidth.
    eta_by_gpus: dict[int, float] = Field(default_factory=dict)
    # vLLM custom all-reduce regime (0 = not used).
    custom_max_bytes: float = Field(default=0.0, ge=0)
    custom_eta_bandwidth: float = Field(default=1.0, gt=0, le=1.5)
    custom_latency_us: float = Field(default=0.0, ge=0, le=1e6)
    oneshot_max_bytes: float = Field(default=0.0, ge=0)

    @field_validator("eta_by_gpus")
    @classmethod
    def _etas_in_range(cls, v: dict[int, float]) -> dict[int, float]:
        for n, eta in v.items():
            if n < 2 or not 0 < eta <= 1.5:
                raise ValueError(f"eta_by_gpus needs group sizes ≥ 2 and 0 < η ≤ 1.5 (got {n}: {eta})")
        return v


class FitError(_Strict):
    median_ape: float
    p90_ape: float
    n: int


def _known_format_keys(v: dict) -> dict:
    unknown = [k for k in v if quant_format_name(k) != k]
    if unknown:
        raise ValueError(f"unknown quantisation format(s) {', '.join(map(str, unknown))}; "
                         f"expected one of {', '.join(QUANT_FORMATS)}")
    return v


class StackKernels(_Strict):
    """One serving stack's kernels on this GPU where they differ from the
    profile's own (vLLM's) by more than the calibration's materiality rule:
    each field set replaces the profile's parameters for a backend whose
    ``engine.kernels`` names this stack; a field left out keeps them."""

    rule: str = ""
    gemm: Optional[RooflineParams] = None
    attention_prefill: Optional[RooflineParams] = None
    attention_decode: Optional[RooflineParams] = None
    # DeepSeek MLA's decode attention kernel, fitted on the stack's own
    # generation-module rows with the profile's projection GEMMs kept.
    mla_decode: Optional[RooflineParams] = None
    allreduce: Optional[AllReduceParams] = None
    fp8_gemm_efficiency: Optional[float] = Field(default=None, gt=0, le=1)
    # The stack's own MoE experts per format, without (``moe``) and with
    # (``moe_ep``) expert parallelism, each replacing the profile's set for
    # that regime only (:meth:`Calibration.moe_for` of the result): a regime
    # within the rule keeps what the profile prices it with.
    moe: dict[str, MoeParams] = {}
    moe_ep: dict[str, MoeParams] = {}
    error: dict[str, FitError] = {}

    @field_validator("moe", "moe_ep")
    @classmethod
    def _known_formats(cls, v: dict) -> dict:
        return _known_format_keys(v)


#: The parameter sets a stack override may replace, each named as the calibration field it replaces.
STACK_PARAMS = ("gemm", "attention_prefill", "attention_decode", "mla_decode", "allreduce")

#: The families every fit or transfer gives a value (``llmsim calibrate`` writes each, whatever it
#: fitted): their defaults are the roofline's (η = 1, no fixed cost), so a calibrated or transferred
#: block without one would price that family at the datasheet peak under a status that says measured.
#: MoE and MLA sets are apart: a format without one is refused where it runs, and MLA falls back to
#: the fitted attention on purpose.
FITTED_FAMILIES = ("gemm", "attention_prefill", "attention_decode", "allreduce", "other")
#: The η's every roofline family of such a block states, even where a fit lands on 1.
FITTED_ETAS = ("eta_compute", "eta_memory")


class Calibration(_Strict):
    status: Literal["calibrated", "transferred", "roofline"] = "roofline"
    source: str = ""
    fitted_on: str = ""
    transferred_from: Optional[str] = None
    rule: str = ""
    gemm: RooflineParams = RooflineParams()
    attention_prefill: RooflineParams = RooflineParams()
    attention_decode: RooflineParams = RooflineParams()
    allreduce: AllReduceParams = AllReduceParams()
    # Norms, activations, rotary, residuals, sampling: memory-bound
    # elementwise work the kernel data does not cover.
    other: RooflineParams = RooflineParams()
    # Scheduler, launch and sampling time per engine iteration that no kernel
    # timing under CUDA graphs shows. An engine setting may override it.
    iteration_overhead_ms: float = Field(default=0.0, ge=0, le=1000)   # as the backend's: a second at most
    # Mixture-of-Experts routed experts, per quantisation format (keys as in
    # simulator.dtypes.QUANT_FORMATS); a format without an entry is not
    # calibrated on this GPU.
    moe: dict[str, MoeParams] = {}
    # The kernel a format runs once its experts are split across GPUs (ep >
    # 1), where the stack then picks another one (Hopper block-FP8: Triton
    # without expert parallelism, FlashInfer's CUTLASS kernel with it, in
    # every measured row); absent, ``moe`` prices every layout.
    moe_ep: dict[str, MoeParams] = {}
    # DeepSeek MLA: the prefill and decode attention kernels, and the
    # module's projection GEMMs per linear format.
    mla_prefill: RooflineParams = RooflineParams()
    mla_decode: RooflineParams = RooflineParams()
    mla_projection: dict[str, RooflineParams] = {}
    error: dict[str, FitError] = {}
    # Per-stack kernel overrides (keys: the stack names backend profiles give
    # as ``engine.kernels``); absent, every stack runs the parameters above.
    stacks: dict[str, StackKernels] = {}

    @field_validator("moe", "moe_ep", "mla_projection")
    @classmethod
    def _known_formats(cls, v: dict) -> dict:
        return _known_format_keys(v)

    @model_validator(mode="before")
    @classmethod
    def _fitted_whole(cls, data: object) -> object:
        """A family left out of a fitted block would take the roofline's default without a word, and
        every report would still call the GPU measured: refused, so a hand-edited or truncated block
        is caught where it is read. The η's are held to it where a family is read from a file: a fit
        in code leaves an η it did not move at its default, and the writer states it."""
        if not isinstance(data, dict) or data.get("status") not in ("calibrated", "transferred"):
            return data
        status = data["status"]
        for fam in (*FITTED_FAMILIES, "iteration_overhead_ms"):
            if fam not in data:
                raise KeyRefusal(fam, f"missing: a calibration whose status is {status} gives every fitted "
                                      f"family ({', '.join(FITTED_FAMILIES)}, iteration_overhead_ms), as "
                                      "`llmsim calibrate` writes them, else that one would silently run at the "
                                      "roofline's default; give it, or remove the calibration block and run "
                                      "`llmsim calibrate --gpu FILE` to write it whole")
        for fam in FITTED_FAMILIES:
            given = data[fam]
            missing = [k for k in FITTED_ETAS if fam != "allreduce" and isinstance(given, dict) and k not in given]
            if missing:
                raise KeyRefusal((fam, missing[0]),
                                 f"missing: a calibration whose status is {status} states both η's of each "
                                 f"fitted family ({', '.join(FITTED_ETAS)}), else it would silently be 1, "
                                 "the roofline's; give it, or remove the calibration block and run "
                                 "`llmsim calibrate --gpu FILE` to write it whole")
        return data

    def with_moe(self, moe: dict[str, MoeParams], moe_ep: dict[str, MoeParams]) -> dict[str, dict[str, MoeParams]]:
        """``moe`` and ``moe_ep`` fields with these sets in place of this calibration's, each regime
        on its own: a format given only for ep = 1 keeps the set ep > 1 ran (its ``moe_ep``, or
        the ``moe`` it fell back to), and one given only for ep > 1 keeps its ``moe``."""
        spread = dict(self.moe_ep)
        for fmt in moe:
            if fmt not in moe_ep and fmt not in spread and fmt in self.moe:
                spread[fmt] = self.moe[fmt]
        return {"moe": {**self.moe, **moe}, "moe_ep": {**spread, **moe_ep}}

    def moe_for(self, fmt: str, ep: int) -> Optional[MoeParams]:
        """The parameter set a replica whose experts are split ``ep`` ways
        prices format ``fmt`` with (``moe_ep`` with expert parallelism where
        it has one, else ``moe``); None when ``fmt`` is not calibrated."""
        return (self.moe_ep.get(fmt) if ep > 1 else None) or self.moe.get(fmt)


class Interconnect(_Strict):
    # nvlink: a switched scale-up domain (NVSwitch); xgmi: AMD Infinity
    # Fabric, a point-to-point mesh of the node's GPUs (``peer_links``).
    kind: Literal["nvlink", "xgmi", "pcie", "none"] = "nvlink"
    bandwidth_gb_s: float = Field(gt=0, description="per GPU, per direction, GB/s (1e9)")
    max_tp: int = Field(default=8, ge=1, description="GPUs in one scale-up domain (8 in an HGX or xGMI node, 72 in an NVL72 rack)")
    # A mesh has no switch: each GPU reaches each peer over its own link of
    # bandwidth_gb_s / peer_links, so a group of n GPUs has n − 1 of them.
    peer_links: Optional[int] = Field(default=None, ge=1, description="point-to-point links per GPU (a mesh)")
    # Scale-out network between NVLink domains (one NIC per GPU): what expert
    # parallelism's all-to-all crosses when a replica spans several domains.
    scale_out_gb_s: Optional[float] = Field(default=None, gt=0, description="per GPU, per direction, GB/s")
    scale_out_latency_us: float = Field(default=0.0, ge=0, le=1e6,
                                        description="one all-to-all's latency floor across it")

    @field_validator("bandwidth_gb_s", "scale_out_gb_s")
    @classmethod
    def _in_gb_s(cls, v: Optional[float], info) -> Optional[float]:
        return within_unit(v, info.field_name)


#: The most each rate of a GPU profile takes, in its key's unit, and the figure written right beside a slip:
#: ten times past the fastest GPU of 2025 or more, so a figure in the wrong unit (989e12 FLOP/s for 989
#: TFLOP/s, 3350 GB/s for 3.35 TB/s), which would run a GPU a thousand times too fast without a word, is refused.
UNIT_BOUNDS: dict[str, tuple[float, str, str]] = {
    "peak_tflops": (100_000, "TFLOP/s", "989, not 989e12"),
    "hbm_bandwidth_tb_s": (100, "TB/s", "3.35, not 3350 or 3.35e12"),
    "bandwidth_gb_s": (100_000, "GB/s", "450, not 450e9"),
    "scale_out_gb_s": (100_000, "GB/s", "50, not 50e9"),
    "host_link_gb_s": (10_000, "GB/s", "64, not 64e9"),
    "nvme_read_gb_s_per_gpu": (10_000, "GB/s", "6.9, not 6.9e9"),
}


def within_unit(v: Optional[float], key: str, entry: Optional[str] = None) -> Optional[float]:
    """``v``, refused past :data:`UNIT_BOUNDS`' bound for ``key``, the unit and a real GPU's figure named;
    an ``entry`` of a mapping (``peak_tflops.bf16``) is refused as its own key, its value in the words (the
    message's "got" names only a key's own value)."""
    most, unit, example = UNIT_BOUNDS[key]
    if v is not None and v > most:
        why = f"more than any GPU has (at most {most:,g} {unit}): the key is in {unit} ({example})"
        if entry is not None:
            raise KeyRefusal(entry, f"{v:g} {unit} is {why}")
        raise ValueError(why)
    return v


#: Dearest GPU-hour accepted (a price is a rate: a digit slip of 10³⁰⁰ would make every cost infinite).
MAX_USD_PER_GPU_HOUR = 1_000_000.0


class Price(_Strict):
    usd_per_gpu_hour: float = Field(gt=0, le=MAX_USD_PER_GPU_HOUR)
    source: str = ""


class Power(_Strict):
    """What one GPU draws (board power, watts): ``idle_w`` provisioned and
    holding its weights with nothing to run, ``tdp_w`` at full activity
    (the board's power limit). Between the two, power follows the activity
    of the busy time (:mod:`simulator.metrics.energy`). ``source`` cites
    the TDP, ``idle_source`` says where the idle figure comes from (an
    assumption unless measured)."""

    tdp_w: float = Field(gt=0, le=1e6, allow_inf_nan=False, description="board power limit (TDP / TBP), W")
    idle_w: float = Field(ge=0, allow_inf_nan=False, description="idle with the model loaded, W")
    source: str = ""
    idle_source: str = ""

    @model_validator(mode="after")
    def _idle_below_tdp(self) -> "Power":
        if self.idle_w >= self.tdp_w:
            raise ValueError(f"idle_w ({self.idle_w:g} W) must be below tdp_w ({self.tdp_w:g} W)")
        return self


class DataNames(_Strict):
    """How the shared data's tables name this GPU (``shared/data/README.md``):
    the rows ``llmsim calibrate`` fits it on and the benchmark rows
    ``llmsim validate`` replays on it. A GPU the data does not know leaves
    them out, and so must a profile copied from one it knows: the rows
    measure the original, and ``llmsim calibrate`` refuses to fit them
    against other datasheet figures."""

    # ``gpu`` of kernels/gemm.csv, attention.csv, allreduce.csv.
    kernels: Optional[str] = None
    # ``system`` of kernels/*_h200_b200.csv.gz and e2e/aic_silicon_sample.csv.gz;
    # ``gpu`` of kernels/moe.csv.gz and mla.csv.gz.
    system: Optional[str] = None
    # ``gpu`` of hardware_datasheets.csv (its measured ceilings feed the transfer rule).
    datasheet: Optional[str] = None
    # A regular expression (case-insensitive) for the ``gpu`` text of the
    # end-to-end tables; where several profiles' patterns match, the longest
    # match wins (``gb200`` over ``b200``).
    benchmarks: Optional[str] = None


class Transfer(_Strict):
    """Where ``llmsim calibrate`` takes this GPU's calibration from when the
    kernel tables have no rows of its own: a measured sibling, by a rule.

    ``scaled``: the sibling's dense-kernel η's, each scaled by the ratio of
    the two GPUs' measured-ceiling fractions of their peaks where both are
    known (else copied: the same fraction of this GPU's own peaks), fixed
    costs copied, no per-stack or MoE/MLA parameters. ``copy``: the
    sibling's whole calibration (same kernels on a die of the same
    architecture), MoE, MLA and per-stack parameters included."""

    sibling: str
    rule: Literal["scaled", "copy"] = "scaled"
    why: str = Field(default="", description="why this sibling is the nearest measured one")

#: What :meth:`HardwareProfile.provenance` writes (``llmsim.calibration``).
PROVENANCE_FIELDS = {
    "status": leaf("text", "the GPU's calibration status: calibrated, transferred or uncalibrated"),
    "calibrated": leaf("bool", "its kernels were fitted to measurements of this GPU"),
    "transferred_from": leaf("text", "the measured sibling its calibration was transferred from",
                             when="the calibration is transferred"),
}


# The most of nvidia-smi's total a driver may keep from CUDA, GiB: the GPUs measured keep 0.4-0.7
# (hardware_profiles/*.yaml cuda_total_gib), so more is a profile whose two totals disagree.
MAX_DRIVER_RESERVE_GIB = 2.0


class HardwareProfile(_Strict):
    # `llmsim schema` is a scenario's: a GPU file's keys are a built-in's (named by none here: GPU names
    # live in the profiles, tests/test_gpu_profiles.py)
    KEYS_SHOWN_BY: ClassVar[str] = ("a built-in GPU's file, `llmsim profiles show NAME` for a GPU "
                                    "`llmsim profiles list` shows")

    name: str
    display_name: str = ""
    source: str = ""
    hbm_gib: float = Field(gt=0, le=1e6, description="HBM capacity, GiB (at most a PiB), as nvidia-smi (rocm-smi) "
                                                     "reports it: what SGLang picks its memory defaults by")
    # The stacks size their KV pools from what CUDA reports (torch.cuda.mem_get_info), which is less than
    # nvidia-smi's total by what the driver keeps for itself: 0.4-0.7 GiB on the GPUs measured.
    cuda_total_gib: Optional[float] = Field(
        default=None, gt=0, le=1e6,
        description="total memory as CUDA reports it (torch.cuda.mem_get_info, the 'total_gpu_memory' of vLLM's "
                    "profiling log), GiB: less than hbm_gib by what the driver reserves, and what vLLM's "
                    "gpu_memory_utilization, SGLang's mem_fraction_static and TensorRT-LLM's "
                    "free_gpu_memory_fraction apply to; at most hbm_gib, and at most 2 below it; default: hbm_gib "
                    "(nothing reserved)")
    hbm_bandwidth_tb_s: float = Field(gt=0, description="TB/s (1e12)")
    # fp4: dense FP4 tensor-core peak (Blackwell, CDNA 4), used by NVFP4 MoE
    # experts; fp6: dense FP6 peak (CDNA 4 runs MXFP6 at its FP4 rate), stated
    # for the record: no weight format of llmsim computes in it yet.
    peak_tflops: dict[Literal["bf16", "fp16", "fp8", "int8", "fp6", "fp4"],
                      Annotated[float, Field(gt=0, allow_inf_nan=False)]]
    interconnect: Interconnect
    host_link_gb_s: float = Field(gt=0, description="host-to-GPU bandwidth per GPU and direction (weight "
                                                     "loading, KV offload reloads), GB/s")
    # The reference server's host side, per GPU (a DGX's totals / 8): what
    # engine.kv_offload's host and disk tiers default to and are held to.
    host_memory_gb_per_gpu: Optional[float] = Field(default=None, gt=0, description="host DRAM per GPU, GB")
    nvme_gb_per_gpu: Optional[float] = Field(default=None, gt=0, description="local NVMe capacity per GPU, GB")
    nvme_read_gb_s_per_gpu: Optional[float] = Field(default=None, gt=0,
                                                    description="local NVMe sequential read per GPU, GB/s")
    # Streaming multiprocessors: GEMM tiles run in waves over them (the wave form of the GEMM fit).
    num_sms: Optional[int] = Field(default=None, ge=1, le=1_000_000)
    # Dense fp8 GEMMs run at this fraction of the compute efficiency the bf16
    # GEMM fit measures: the datasheet doubles the peak, but at twice the math
    # rate the GPU runs into its power cap (lower clocks), and a per-tensor fp8
    # linear layer first quantises its activations. Fitted on end-to-end fp8
    # rows (benchmarks/fp8_efficiency.py); 1 where nothing measured it.
    fp8_gemm_efficiency: float = Field(default=1.0, gt=0, le=1)
    # The same for dense FP4 (NVFP4, W4A4) GEMMs against the bf16 fit: the
    # datasheet quadruples the peak, but the FP4 GEMMs a stack runs reach far
    # less. Fitted on the measured NVFP4 GEMMs (benchmarks/fp4_efficiency.py).
    fp4_gemm_efficiency: float = Field(default=1.0, gt=0, le=1)
    # Each serving stack's MLA prefill (attention) kernel against the one
    # calibration.mla_prefill was fitted on, as a compute-efficiency ratio read
    # off the measured kernels (benchmarks/mla_stack_kernels.py): SGLang's
    # FlashAttention-3 MLA prefill on Hopper runs at about a third of the
    # rate of vLLM's and TensorRT-LLM's. A stack not named runs at 1. Kept
    # beside, not inside, the calibration block, which `llmsim calibrate` rewrites.
    mla_prefill_efficiency: dict[str, Annotated[float, Field(gt=0, le=1.5)]] = {}
    price: Price
    # Board power, idle to TDP: the energy block's GPU power (none: no energy figures).
    power: Optional[Power] = None
    # Architecture generation (hopper, blackwell, cdna3, ...): the error
    # model's ``family`` dimension.
    architecture: Optional[str] = None
    # CUDA compute capability (90, 100): which tiles FlashInfer's CUTLASS MoE
    # kernels pick (calibration.fit.CUTLASS_TILE_N). None off CUDA.
    sm_version: Optional[int] = Field(default=None, ge=10)
    # The serving stacks whose builds run on this GPU (backend profiles'
    # ``engine.kernels``); a pool naming another is refused. None: every stack.
    serving_stacks: Optional[tuple[str, ...]] = None
    # FP4 formats the FP4 units take natively (NVFP4: E4M3 scales per 16
    # values, NVIDIA only; MXFP4: E8M0 per 32, the OCP format AMD runs).
    fp4_formats: tuple[Literal["nvfp4", "mxfp4"], ...] = ("nvfp4", "mxfp4")
    data_names: DataNames = DataNames()
    transfer: Optional[Transfer] = None
    calibration: Calibration = Calibration()

    @field_validator("mla_prefill_efficiency")
    @classmethod
    def _known_stacks(cls, v: dict[str, float]) -> dict[str, float]:
        if not v:
            return v
        from .backend import check_serving_stack   # here: the backend profiles read hardware profiles

        for stack in sorted(v):
            check_serving_stack(stack)
        return v

    @field_validator("peak_tflops")
    @classmethod
    def _bf16_peak(cls, v: dict[str, float]) -> dict[str, float]:
        # every dtype without a unit of its own is priced at the bf16 peak
        if "bf16" not in v:
            raise ValueError("needs a bf16 entry (the dense bf16 tensor-core peak, TFLOP/s): every compute dtype "
                             "without a peak of its own runs at it")
        for dtype, peak in v.items():
            within_unit(peak, "peak_tflops", dtype)
        return v

    @field_validator("hbm_bandwidth_tb_s", "host_link_gb_s", "nvme_read_gb_s_per_gpu")
    @classmethod
    def _in_unit(cls, v: Optional[float], info) -> Optional[float]:
        return within_unit(v, info.field_name)

    @model_validator(mode="after")
    def _cuda_within_hbm(self) -> "HardwareProfile":
        # CUDA sees the board's memory less the driver's share, never more; a share above what any GPU
        # measured is a profile copied with a new hbm_gib and the old cuda_total_gib
        gap = None if self.cuda_total_gib is None else self.hbm_gib - self.cuda_total_gib
        if gap is not None and not 0 <= gap <= MAX_DRIVER_RESERVE_GIB:
            raise KeyRefusal("cuda_total_gib", f"{self.cuda_total_gib} is {'above' if gap < 0 else 'far below'} "
                             f"hbm_gib {self.hbm_gib}: CUDA reports the memory nvidia-smi counts less what the driver "
                             f"keeps (0.4-0.7 GiB on the GPUs measured, at most {MAX_DRIVER_RESERVE_GIB} taken); "
                             "set it with hbm_gib, or remove it to take hbm_gib")
        return self

    @model_validator(mode="after")
    def _waves_need_sms(self) -> "HardwareProfile":
        if self.calibration.gemm.waves and not self.num_sms:
            raise ValueError("calibration.gemm.waves needs num_sms (the GPU's streaming multiprocessor count)")
        cal = self.calibration
        tiled = sorted(f for f, m in [*cal.moe.items(), *cal.moe_ep.items()] if m.tile_us > 0)
        if tiled and not self.num_sms:
            raise ValueError(f"calibration.moe.{tiled[0]}.tile_us needs num_sms (the tile grid spreads over the SMs)")
        return self

    def for_kernels(self, stack: Optional[str], moe_backend: Optional[str] = None) -> "HardwareProfile":
        """This GPU as ``stack``'s kernels run on it: its per-stack overrides
        applied (``calibration.stacks``) and its MLA prefill rate folded into
        ``calibration.mla_prefill`` (then dropped, so a copy made from it does
        not scale twice); itself when it has none for ``stack``. The stack's
        MoE sets apply to the formats its ``moe_backend`` runs on the kernels
        they were fitted on (:func:`.moe_backend.own_sets_replace`)."""
        over = self.calibration.stacks.get(stack) if stack else None
        mla = self.mla_prefill_efficiency.get(stack) if stack else None
        if over is None and mla is None:
            return self
        fields = {} if over is None else {f: getattr(over, f) for f in STACK_PARAMS if getattr(over, f) is not None}
        if over is not None and (over.moe or over.moe_ep):
            moe, moe_ep = ({f: p for f, p in sets.items() if own_sets_replace(moe_backend, f)}
                           for sets in (over.moe, over.moe_ep))
            fields.update(self.calibration.with_moe(moe, moe_ep))
        if "gemm" in fields:   # the clocks under load are the GPU's, read over every stack's rows
            fields["gemm"] = fields["gemm"].model_copy(update={"sustained": self.calibration.gemm.sustained})
        if mla is not None:
            p = self.calibration.mla_prefill
            fields["mla_prefill"] = p.model_copy(update={"eta_compute": p.eta_compute * mla})
        update: dict = {"calibration": self.calibration.model_copy(update=fields)}
        if mla is not None:
            update["mla_prefill_efficiency"] = {}
        if over is not None and over.fp8_gemm_efficiency is not None:
            update["fp8_gemm_efficiency"] = over.fp8_gemm_efficiency
        return self.model_copy(update=update)

    def under_sustained_load(self, compute_dtype: str) -> "HardwareProfile":
        """This GPU as a serving loop runs its GEMMs of ``compute_dtype``:
        ``calibration.gemm.sustained`` folded into η_c (then 1, so a copy
        made from it does not apply it twice). fp8 on fp8 tensor cores keeps
        its efficiency as it is: fitted on compute-bound rows, most of them
        a millisecond or longer, or on end-to-end runs, it carries the
        sustained rate already; the FP4 one is fitted on compute-bound rows
        three quarters of which run under a millisecond, at burst clocks,
        and does not."""
        g = self.calibration.gemm
        if g.sustained == 1.0 or (compute_dtype == "fp8" and self.has_unit("fp8")):
            return self
        gemm = g.model_copy(update={"eta_compute": g.eta_compute * g.sustained, "sustained": 1.0})
        return self.model_copy(update={"calibration": self.calibration.model_copy(update={"gemm": gemm})})

    def group_bandwidth_gb_s(self, gpus: int) -> float:
        """Per-GPU, per-direction link bandwidth a collective over ``gpus`` of
        this node's GPUs can use: all of it through a switch, n − 1 peer links
        of a mesh."""
        ic = self.interconnect
        if ic.peer_links is None or gpus < 2:
            return ic.bandwidth_gb_s
        return ic.bandwidth_gb_s * min(gpus - 1, ic.peer_links) / ic.peer_links

    @property
    def hbm_bytes(self) -> float:
        return self.hbm_gib * GIB

    @property
    def cuda_total_bytes(self) -> float:
        """The memory the stacks' fractions apply to (CUDA's total), nvidia-smi's where unstated."""
        return (self.cuda_total_gib if self.cuda_total_gib is not None else self.hbm_gib) * GIB

    @property
    def hbm_bandwidth(self) -> float:
        return self.hbm_bandwidth_tb_s * 1e12

    def peak_flops(self, compute_dtype: str) -> float:
        """Dense tensor-core FLOP/s; falls back to bf16 where the GPU lacks the unit."""
        d = "bf16" if compute_dtype == "fp16" else compute_dtype
        tf = self.peak_tflops.get(d) or self.peak_tflops.get("bf16") or self.peak_tflops["fp16"]
        return tf * 1e12

    def linear_efficiency(self, compute_dtype: str) -> float:
        """The fraction of the bf16 GEMM fit's compute efficiency a dense linear
        layer reaches at this compute dtype: one rule for every place that
        prices a GEMM at an fp8 or fp4 peak without a kernel fit of its own."""
        return {"fp8": self.fp8_gemm_efficiency, "fp4": self.fp4_gemm_efficiency}.get(compute_dtype, 1.0)

    def has_unit(self, compute_dtype: str) -> bool:
        return compute_dtype in self.peak_tflops

    @property
    def units(self) -> tuple[str, ...]:
        """The tensor-core formats with a peak of their own: a format not among
        them runs weight-only, computing in 16 bits (dtypes.compute_dtype)."""
        return tuple(self.peak_tflops)

    @property
    def calibrated(self) -> bool:
        return self.calibration.status == "calibrated"

    def provenance(self) -> dict:
        """Where this GPU's cost model comes from, as results and plans report it:
        its calibration status and, when transferred, the measured sibling."""
        c = self.calibration
        out: dict = {"status": c.status, "calibrated": self.calibrated}
        if c.transferred_from:
            out["transferred_from"] = c.transferred_from
        return out

    def summary(self) -> dict:
        return {
            "name": self.name,
            "hbm_gib": self.hbm_gib,
            "hbm_tb_s": self.hbm_bandwidth_tb_s,
            "bf16_tflops": self.peak_tflops.get("bf16"),
            "fp8_tflops": self.peak_tflops.get("fp8"),
            "int8_tops": self.peak_tflops.get("int8"),
            "fp4_tflops": self.peak_tflops.get("fp4"),
            "link": self.interconnect.kind,
            "link_gb_s": self.interconnect.bandwidth_gb_s,
            "nvlink_gpus": self.interconnect.max_tp if self.interconnect.kind in ("nvlink", "xgmi") else None,
            "usd_per_gpu_hour": self.price.usd_per_gpu_hour,
            "calibration": self.calibration.status,
            "transferred_from": self.calibration.transferred_from,
        }


def load_hardware(name_or_path: str) -> HardwareProfile:
    return load_profile("hardware_profiles", name_or_path, HardwareProfile, "hardware")


def builtin_hardware() -> dict[str, HardwareProfile]:
    """Every built-in GPU profile by name."""
    from .loader import list_builtin

    return {n: load_hardware(n) for n in list_builtin("hardware_profiles")}


#: The ``data_names`` fields whose rows ``llmsim calibrate`` reads: the kernel
#: tables (``kernels``, ``system``) and the datasheet's measured ceilings.
#: A table's row belongs to one profile, so two profiles naming the same rows
#: is either a renamed copy or a mistake (:func:`shared_data_names`).
CALIBRATION_DATA_NAMES = ("kernels", "system", "datasheet")

#: The figures a kernel fit divides measured times by (the roofline and the
#: links): profiles fitted on the same rows must agree on them, or one of them
#: gets efficiencies that are another GPU's times over its own peaks.
FIT_FIGURES = ("hbm_bandwidth_tb_s", "peak_tflops", "num_sms", "interconnect.kind", "interconnect.bandwidth_gb_s",
               "interconnect.peer_links")


def shared_data_names(gpu: HardwareProfile, other: HardwareProfile) -> dict[str, str]:
    """The calibration data names ``gpu`` and ``other`` both give, field ->
    name: the rows each would claim (a copied profile keeps its original's)."""
    return {f: getattr(gpu.data_names, f) for f in CALIBRATION_DATA_NAMES
            if getattr(gpu.data_names, f) and getattr(gpu.data_names, f) == getattr(other.data_names, f)}


def _figures(gpu: HardwareProfile) -> dict[str, object]:
    out: dict[str, object] = {}
    for key in FIT_FIGURES:
        if key == "peak_tflops":
            out.update({f"peak_tflops.{d}": v for d, v in gpu.peak_tflops.items()})
            continue
        value: object = gpu
        for part in key.split("."):
            value = getattr(value, part)
        out[key] = value
    return out


def fit_figure_differences(gpu: HardwareProfile, other: HardwareProfile) -> list[str]:
    """``key value (other: value)`` for each fit figure (:data:`FIT_FIGURES`)
    where ``gpu`` differs from ``other``; empty when a fit on the same rows
    would give both the same parameters."""
    mine, theirs = _figures(gpu), _figures(other)
    show = lambda v: "none" if v is None else f"{v:g}" if isinstance(v, float) else str(v)  # noqa: E731
    keys = [*mine, *(k for k in theirs if k not in mine)]
    return [f"{k} {show(mine.get(k))} ({other.name}: {show(theirs.get(k))})" for k in keys
            if mine.get(k) != theirs.get(k)]


def data_name_map(field: str, gpus: Optional[dict[str, HardwareProfile]] = None) -> dict[str, str]:
    """The shared data's name for each GPU -> its profile name, for one
    :class:`DataNames` field (``kernels``, ``system``, ``datasheet``), over
    ``gpus`` (default: the built-in profiles)."""
    gpus = builtin_hardware() if gpus is None else gpus
    return {getattr(g.data_names, field): n for n, g in gpus.items() if getattr(g.data_names, field)}


def match_benchmark_gpu(text: str, gpus: Optional[dict[str, HardwareProfile]] = None) -> Optional[str]:
    """The profile a benchmark table's GPU text names: its ``system`` name
    exactly, else the profile whose ``data_names.benchmarks`` pattern matches
    the longest stretch of it (``gb200`` before ``b200``); None if none does."""
    gpus = builtin_hardware() if gpus is None else gpus
    exact = data_name_map("system", gpus).get(text)
    if exact:
        return exact
    best: tuple[int, str] | None = None
    for name in sorted(gpus):
        pat = gpus[name].data_names.benchmarks
        m = re.search(pat, text, re.IGNORECASE) if pat else None
        if m and (best is None or len(m.group(0)) > best[0]):
            best = (len(m.group(0)), name)
    return best[1] if best else None
