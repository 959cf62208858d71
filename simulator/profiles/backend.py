"""Serving-stack backends: what vLLM, SGLang or TensorRT-LLM add to the kernels.

The same GPU and model served by two stacks give different TTFTs: each
stack schedules with its own defaults (token budget, chunking, whether a
prefill shares an iteration with decodes) and spends its own CPU time
outside the kernels (HTTP and tokenisation of each request, scheduling and
sampling of each iteration, streaming each token back). A backend profile
holds both, with its sources, so that ``pools[].engine.backend: vllm``
means "as ``vllm serve`` runs with default flags"; any engine key set beside
``backend`` overrides the profile's value.

Defaults that depend on the GPU (vLLM's token budget follows the GPU's
memory) are ordered rules, first match wins. Defaults that changed between
releases (vLLM schedules asynchronously from 0.14) are version rules:
``engine.backend_version`` names the release a pool runs, and every rule
whose range holds it applies; without it the profile's own keys apply: a
profile describes the stack's newest release it knows (its ``versions``),
which is what a deployment installed today runs, and its rules give older
releases their defaults.
"""
from __future__ import annotations

import datetime
import json
import re
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Any, ClassVar, Mapping, Optional, Protocol, Sequence, TypeVar

from packaging.version import InvalidVersion, Version
from pydantic import BaseModel, ConfigDict, Field, model_validator

from ..errors import KeyRefusal, LlmsimError
from ..expert_layout import ExpertLayout
from ..kv_memory import backend_defaults_beside, without_default_inputs
from .hardware import HardwareProfile
from .loader import list_profiles, load_profile, resolve
from .model import ModelProfile
from .model_rules import ModelCondition, ModelRule, model_rule_keys
from .moe_backend import check_moe_backend
from .stack_file import check_stack_keys


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class Overheads(_Strict):
    """A stack's CPU time outside the GPU kernels (the kernel data excludes it).

    Each is a physical cost with its own place in the request's path:
    ``request_ms`` and ``tokenize_us_per_token`` are spent one request at a
    time by the server's front-end process (HTTP, tokenisation, hand-off to
    the scheduler) before the scheduler can see the request, so a burst of
    arrivals reaches the engine spread out, as it does on a real server;
    ``iteration_overhead_ms`` and ``iteration_us_per_seq`` are the scheduler's and
    sampler's time per engine iteration; ``eager_launch_us`` the CPU's per
    kernel launch of an iteration run without a CUDA graph; ``response_ms`` is the time from a
    token leaving the engine to the client receiving it (detokenise, stream).
    """

    iteration_overhead_ms: float = Field(default=0.0, ge=0, le=1000)
    iteration_us_per_seq: float = Field(default=0.0, ge=0, le=10000)
    eager_launch_us: float = Field(default=0.0, ge=0, le=1000)
    request_ms: float = Field(default=0.0, ge=0, le=10000)
    tokenize_us_per_token: float = Field(default=0.0, ge=0, le=1000)
    response_ms: float = Field(default=0.0, ge=0, le=10000)


class GpuCondition(_Strict):
    gpu_name_contains: Optional[str] = None
    min_hbm_gib: Optional[float] = Field(default=None, gt=0)
    max_hbm_gib: Optional[float] = Field(default=None, gt=0)
    # the compute-capability family (100: 10.x, data-center Blackwell), as vLLM's
    # is_device_capability_family tests it: the hardware profile's sm_version // 10 is this // 10
    sm_family: Optional[int] = Field(default=None, ge=10)
    # the compute capability is one of these exactly (100: 10.0 alone), as vLLM's
    # is_device_capability tests it where a release did not yet test the family
    sm_versions: Optional[tuple[Annotated[int, Field(ge=10)], ...]] = Field(default=None, min_length=1)
    # the hardware profile's architecture is one of these (cdna3, cdna4: AMD Instinct GPUs, which have no
    # compute capability and run the stacks' ROCm kernels)
    architectures: Optional[tuple[str, ...]] = Field(default=None, min_length=1)

    @model_validator(mode="after")
    def _some_gpu_may_hold(self) -> "GpuCondition":
        """A bound no GPU meets would turn the rule off without a word."""
        if self.min_hbm_gib is not None and self.max_hbm_gib is not None and self.min_hbm_gib > self.max_hbm_gib:
            raise ValueError(f"min_hbm_gib ({self.min_hbm_gib:g}) is above max_hbm_gib ({self.max_hbm_gib:g}): "
                             "no GPU holds the condition")
        return self

    def holds(self, gpu: HardwareProfile) -> bool:
        if self.gpu_name_contains is not None and self.gpu_name_contains.lower() not in gpu.name.lower():
            return False
        if self.sm_family is not None and (gpu.sm_version is None or gpu.sm_version // 10 != self.sm_family // 10):
            return False
        if self.sm_versions is not None and gpu.sm_version not in self.sm_versions:
            return False
        if self.architectures is not None and gpu.architecture not in self.architectures:
            return False
        if self.min_hbm_gib is not None and gpu.hbm_gib < self.min_hbm_gib:
            return False
        return self.max_hbm_gib is None or gpu.hbm_gib <= self.max_hbm_gib


class GpuRule(_Strict):
    when: GpuCondition = GpuCondition()
    set: dict[str, Any]


def gpu_rule_keys(rules: Sequence[GpuRule], gpu: HardwareProfile) -> dict[str, Any]:
    """The engine keys of the first of ``rules`` that holds on ``gpu`` (none: no keys)."""
    return dict(next((r.set for r in rules if r.when.holds(gpu)), {}))


class KernelCondition(_Strict):
    """Where a stack picks an attention kernel by default: the GPU, the model and whether a draft
    decodes beside it; every condition given must hold."""

    gpu: GpuCondition = GpuCondition()
    model: ModelCondition = ModelCondition()
    speculative: Optional[bool] = None
    # the pool's engine.kv_dtype is one of these (a kernel's cache types)
    kv_dtypes: Optional[tuple[str, ...]] = Field(default=None, min_length=1)

    def holds(self, gpu: HardwareProfile, model: ModelProfile, speculative: bool, kv_dtype: str) -> bool:
        return (self.gpu.holds(gpu) and self.model.holds(model)
                and (self.speculative is None or self.speculative == speculative)
                and (self.kv_dtypes is None or kv_dtype in self.kv_dtypes))


class KernelRule(_Strict):
    """An attention kernel a stack picks by default that takes only some KV block (page) sizes, and
    so decides the pool's: the first rule that holds on the pool's GPU and model wins."""

    when: KernelCondition = KernelCondition()
    kernel: str = Field(min_length=1, description="the stack's name for the kernel")
    block_sizes: tuple[int, ...] = Field(min_length=1, description="the block sizes the kernel takes")
    multiples: bool = Field(default=False, description="a multiple of one of block_sizes too (vLLM's "
                                                       "blocks of several kernel blocks)")
    block_size: Optional[int] = Field(default=None, ge=1, description="the size the stack sets for it (SGLang, "
                                                                      "TensorRT-LLM); unset: the stack's default "
                                                                      "where the kernel takes it, else the "
                                                                      "smallest it takes (vLLM)")
    other_kernels: Optional[int] = Field(default=None, ge=1, description="a size set by the pool that the kernel "
                                                                         "does not take runs another of the "
                                                                         "stack's kernels if a multiple of this "
                                                                         "(vLLM's Triton MLA); else refused")
    prefill_graphs_off_after_reserve: bool = Field(
        default=False, description="the stack turns its piecewise prefill CUDA graphs off on this kernel once its "
                                   "default reserve has made room for them (SGLang's DeepSeek-V3 on trtllm_mla): "
                                   "sets kv_memory.prefill_graphs_off_after_reserve")
    source: str = ""

    @model_validator(mode="after")
    def _sizes(self) -> "KernelRule":
        if any(b < 1 for b in self.block_sizes):
            raise ValueError("block_sizes are token counts of 1 or more")
        if self.block_size is not None and not self.takes(self.block_size):
            raise ValueError(f"block_size {self.block_size} is not one of block_sizes {list(self.block_sizes)}")
        return self

    def takes(self, size: int) -> bool:
        return any(size == b or (self.multiples and size % b == 0) for b in self.block_sizes)

    def chosen(self, default: int) -> int:
        """The block size the stack gives a pool that sets none, its own default being ``default``."""
        if self.block_size is not None:
            return self.block_size
        return default if self.takes(default) else min(self.block_sizes)

    def runs(self, size: int) -> bool:
        """Whether the stack runs a pool that sets ``size`` itself at that size."""
        return self.takes(size) or (self.other_kernels is not None and size % self.other_kernels == 0)

    def sizes_text(self) -> str:
        sizes = _either(self.block_sizes)
        return f"a multiple of {sizes}" if self.multiples else sizes


class _OnKernelCondition(Protocol):
    when: KernelCondition


_Rule = TypeVar("_Rule", bound=_OnKernelCondition)


def kernel_rule(rules: Sequence[_Rule], gpu: HardwareProfile, model: ModelProfile, speculative: bool,
                kv_dtype: str) -> Optional[_Rule]:
    """The first of ``rules`` (attention kernels, prefix-cache rules: whatever holds on a
    :class:`KernelCondition`) that holds for ``model`` on ``gpu`` (None: none does)."""
    return next((r for r in rules if r.when.holds(gpu, model, speculative, kv_dtype)), None)


class PrefixCacheRule(_Strict):
    """Where a stack keeps or turns off its prefix cache whatever the launch asked (TensorRT-LLM's
    KV block reuse for MLA models on some GPUs): the first rule that holds on the pool's GPU and
    model wins, and a pool under one that turns it off runs without it, or is refused where it
    sets ``prefix_cache: true`` itself, since the stack would not run what it asked for."""

    when: KernelCondition = KernelCondition()
    prefix_cache: bool = Field(description="whether the stack keeps its prefix cache there")
    why: str = Field(default="", description="what the stack says when it turns the cache off, for the refusal")
    source: str = ""


class PrefillServerLift(_Strict):
    """Where a stack's context server takes its own defaults after all: from release ``since`` on,
    beside the engine keys ``where`` (TensorRT-LLM from #10755: its overlap scheduler with KV block
    reuse off). Refusing there would refuse a launch the stack serves, and setting the rule's keys
    would run another than the one it serves."""

    since: str = Field(description="the first release whose context server takes the launch")
    where: dict[str, Any] = Field(default_factory=dict, description="engine keys the launch must run beside")
    source: str = ""

    @model_validator(mode="after")
    def _number(self) -> "PrefillServerLift":
        if version_number(self.since) is None:
            raise ValueError(f"{self.since!r} is not a release number such as 1.3.0rc1")
        return self


class PrefillServerRule(_Strict):
    """Engine keys a disaggregated prefill (context) server of the stack runs, whatever its own defaults:
    a pool with ``disaggregation`` takes them, and one that sets such a key otherwise is refused with
    ``why``, as the stack refuses that server's requests (TensorRT-LLM's worker, a context-only request
    under its overlap scheduler); except where ``lifted`` holds."""

    set: dict[str, Any] = Field(description="engine keys the prefill server runs")
    why: str = Field(description="why another value is refused, for the refusal")
    lifted: Optional[PrefillServerLift] = Field(default=None, description="where the rule does not hold")
    source: str = ""


class ExpertLayoutRule(_Strict):
    """The layout a stack holds MXFP4 experts in on some GPUs (the MoE kernel its quant method picks
    there by default, which creates and re-lays them): the first rule that holds on the pool's GPU
    wins, and sets ``engine.mxfp4_expert_layout`` unless the pool sets it itself."""

    when: GpuCondition = GpuCondition()
    # None: a layout llmsim does not read there, which leaves the experts to the calibrated MoE
    # kernel's padding, as on a GPU no rule holds for (a release's rule that ends a later one's reach)
    layout: Optional[ExpertLayout]
    source: str = ""


def expert_layout_rule(rules: Sequence[ExpertLayoutRule], gpu: HardwareProfile) -> Optional[ExpertLayoutRule]:
    """The first of ``rules`` that holds on ``gpu`` (None: none does)."""
    return next((r for r in rules if r.when.holds(gpu)), None)


class VersionRule(_Strict):
    """Engine keys a range of releases ran by default where the profile's own
    keys differ: from ``since`` (the first release with them) up to, not
    including, ``until``. A bound names a release line (``0.14.0``: its
    candidates and patches too), or one candidate of it (``1.3.0rc2``) where
    a change landed between the candidates of a line: TensorRT-LLM numbers a
    release line's months of work as ``1.3.0rc1`` to ``rc29``."""

    since: str
    until: Optional[str] = None
    set: dict[str, Any] = Field(default_factory=dict)
    # what those releases changed under speculative decoding, over the profile's ``speculative_engine``
    speculative_engine: dict[str, Any] = Field(default_factory=dict)
    # what those releases changed under a separate draft model, over the profile's ``draft_model_engine``
    draft_model_engine: dict[str, Any] = Field(default_factory=dict)
    # GPU-dependent defaults those releases set otherwise: tried before the profile's ``engine_by_gpu``
    # (a later rule's before an earlier one's), first match wins
    engine_by_gpu: list[GpuRule] = Field(default_factory=list)
    # model-dependent defaults of those releases (vLLM's model runner), over their other keys and
    # under speculative_engine and draft_model_engine; a later rule's before an earlier one's
    engine_by_model: list[ModelRule] = Field(default_factory=list)
    # the attention kernels those releases pick where they differ: tried before the profile's
    # ``attention_kernels`` (a later rule's before an earlier one's), first match wins
    attention_kernels: list[KernelRule] = Field(default_factory=list)
    # the MXFP4 expert layouts those releases hold where they differ: tried before the profile's
    # ``mxfp4_expert_layouts`` (a later rule's before an earlier one's), first match wins
    mxfp4_expert_layouts: list[ExpertLayoutRule] = Field(default_factory=list)
    # the block sizes those releases' launch takes at all, whatever the kernel (vLLM's --block-size choices,
    # its CacheConfig BlockSize Literal); a later rule's replace an earlier one's; none: any the kernel runs
    launch_block_sizes: Optional[tuple[Annotated[int, Field(ge=1)], ...]] = Field(default=None, min_length=1)
    source: str = ""

    @model_validator(mode="after")
    def _numbers(self) -> "VersionRule":
        for v in (self.since, self.until):
            if v is not None and version_number(v) is None:
                raise ValueError(f"{v!r} is not a release number such as 0.14.0")
        if self.until is not None and _bound(self.until) <= _bound(self.since):
            raise ValueError(f"since {self.since} is not before until {self.until}: the rule would hold for no "
                             f"release")
        return self


#: The date a nightly build's name carries (``nightly-20260301``).
_NIGHTLY = re.compile(r"(20\d{2})(\d{2})(\d{2})")


@lru_cache(maxsize=4096)    # every backend profile validated reads each rule's bounds, and a run validates several
def version_number(version: str) -> Optional[tuple[int, ...]]:
    """The release number (major, minor, patch[, ...]) of a release as the
    stacks spell them, PEP 440 with an optional ``v`` (``0.14.1``,
    ``v0.5.6.post2``, ``1.2.0rc6``, ``0.11.1rc2.dev123+gabc1234``); None for
    anything else. A pre-, post- or development release counts as its
    release number: a rule's ``since`` names the first release line with the
    change, and its candidates and patches carry it too. An epoch or a lone
    major number is None: no stack numbers releases so, and reading one
    would place it beside releases it has nothing to do with."""
    try:
        parsed = Version(version)
    except InvalidVersion:
        return None
    if parsed.epoch or len(parsed.release) < 2:
        return None
    return parsed.release + (0,) * (3 - len(parsed.release))


@lru_cache(maxsize=4096)
def _bound(bound: str) -> Version:
    """A version rule's bound (checked a release number on load) in PEP 440 order."""
    return Version(bound)


def _reached(version: str, number: tuple[int, ...], bound: str) -> bool:
    """Whether the release ``version`` (release number ``number``) is ``bound`` or later: by release
    number, and within ``bound``'s own line by candidate where ``bound`` names one (``1.3.0rc1`` is
    before ``1.3.0rc2``, ``1.3.0rc5.post1`` after it); a bound naming the line alone holds for all
    of it. A label that is no PEP 440 release (a row's ``1.3.0rc1 (notes)``) is read by its
    leading release."""
    limit = version_number(bound)
    assert limit is not None        # checked on load
    if number != limit or _bound(bound).pre is None:
        return number >= limit
    m = re.match(r"\s*(v?[\w.+!-]+)", version)
    try:
        return Version(m.group(1) if m else version) >= _bound(bound)
    except InvalidVersion:
        return True


def _label_number(label: str) -> Optional[tuple[int, ...]]:
    """The release number a measured row's version label names. Rows carry
    notes beside it (``0.6.0 (--num-scheduler-steps 10)``) and spellings
    outside PEP 440 (``0.5.1-rc0.pre1``), and a row is data to replay, not
    input to refuse, so its leading number counts; a version a user writes
    is checked whole first (:func:`check_backend_version`)."""
    number = version_number(label)
    if number is not None:
        return number
    m = re.match(r"\s*v?(\d+)\.(\d+)(?:\.(\d+))?", label)
    if m is None or _NIGHTLY.search(label):
        return None
    return int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)


def _nightly_day(version: str) -> Optional[str]:
    """The build day (ISO) of a nightly tag written whole: ``nightly``, then
    parts joined by ``-``, ``_`` or ``.``, the first run of a date among them a
    part of its own and a real day (``nightly-dev-20260216-d3bae71e``).
    The same first run of a date is the one :meth:`BackendProfile.released`
    reads, so the check and the reading agree."""
    if not re.fullmatch(r"nightly(?:[-_.][A-Za-z0-9]+)+", version, re.IGNORECASE):
        return None
    m = _NIGHTLY.search(version)
    if m is None or version[m.start() - 1] not in "-_." or version[m.end():m.end() + 1] not in ("", "-", "_", "."):
        return None
    try:
        return datetime.date(*map(int, m.groups())).isoformat()
    except ValueError:
        return None


def _names_a_release(version: str) -> bool:
    return version_number(version) is not None or _nightly_day(version) is not None


def check_backend_version(version: str) -> str:
    """``version`` when it names one release of a serving stack, else a
    ValueError saying what would: the one check of ``engine.backend_version``,
    ``llmsim estimate --backend-version`` and ``llmsim validate
    --backend-version``, so that no spelling one of them takes is read
    another way (or not at all) by another. Taken: a PEP 440 release as
    the stacks tag them, ``v`` prefix allowed (its release number decides
    the by_version rules), or a nightly tag carrying its build day (the
    release days in the profile's ``releases`` place it). Anything else,
    such as ``0.19junk`` or ``latest``, names no release llmsim could place."""
    if not _names_a_release(version):
        raise ValueError(f"{version!r} names no release: expected the release as the stack tags it (PEP 440, "
                         f"such as 0.19.0, v0.5.10.post1 or 1.2.0rc6.post3) or a nightly tag with its build day "
                         f"(such as nightly-dev-20260216-d3bae71e)")
    return version


class GeneratedLaunch(_Strict):
    """How NVIDIA AIConfigurator's generator launches this stack for a
    benchmark at concurrency C and prompt length ISL (``llmsim validate``
    replays its rows so: :mod:`simulator.validation.deployment`). Every stack
    gets a batch of C and a token budget of C + ISL + 1,500 (one prompt beside
    the running decodes); these are the ways a stack's launch differs."""

    engine: dict[str, Any] = Field(default_factory=dict, description="engine keys its rules and templates set "
                                                                     "besides the batch and budget (SGLang: mixed "
                                                                     "chunks; TensorRT-LLM: the CUTLASS MoE "
                                                                     "backend), in the evaluation pipeline too "
                                                                     "where it wrote the engine config "
                                                                     "(in_evaluation)")
    prefill_engine: dict[str, Any] = Field(default_factory=dict, description="engine keys its rule sets on a "
                                                                             "disaggregated prefill worker alone "
                                                                             "(TensorRT-LLM: no overlap scheduler)")
    budget_block: int = Field(default=1, ge=1, description="the budget is rounded up to a multiple of this "
                                                           "(TensorRT-LLM's 32-token blocks)")
    graphs_to_concurrency: bool = Field(default=False, description="CUDA graphs captured for batches 1..C "
                                                                   "(kv_memory.cuda_graph_max_bs = C)")
    default_prefill_chunk: bool = Field(default=False, description="the generator's ISL + 1,500 is SGLang's "
                                                                   "--max-prefill-tokens (engine.max_prefill_tokens) "
                                                                   "and the stack's prefill chunk stays at its GPU "
                                                                   "default, the token budget, which the memory "
                                                                   "reserve follows "
                                                                   "(kv_memory.chunked_prefill_size = default)")
    max_len_to_request: bool = Field(default=False, description="its rule sets the longest request to ISL + "
                                                                "OSL + 1,500 (engine.max_model_len: vLLM's "
                                                                "--max-model-len); else the model's context")
    in_evaluation: bool = Field(default=False, description="the 2025 evaluation pipeline (aic-eval, "
                                                           "aic-genai-perf) wrote this stack's engine config "
                                                           "too, block reuse off; else it ran the defaults")
    eval_kv_cache: bool = Field(default=False, description="the evaluation pipeline ran this stack with its "
                                                           "quantisation profile's KV dtype (fp8 for fp8/fp4); "
                                                           "else the model's 16-bit cache")


class BackendProfile(_Strict):
    # `llmsim schema` lists only its engine keys (pools[].engine): its own are a built-in's
    KEYS_SHOWN_BY: ClassVar[str] = "a built-in stack's file, `llmsim profiles show vllm --kind backend`"

    name: str
    stack: str = Field(description="vllm, sglang or trtllm")
    versions: str = ""
    source: str = ""
    engine: dict[str, Any] = Field(default_factory=dict, description="engine keys the stack's defaults set")
    engine_by_gpu: list[GpuRule] = Field(default_factory=list)
    attention_kernels: list[KernelRule] = Field(
        default_factory=list, description="attention kernels the stack picks by default that decide the KV block "
                                          "size, first match on the pool's GPU and model wins")
    prefix_cache_rules: list[PrefixCacheRule] = Field(
        default_factory=list, description="where the stack keeps or turns off its prefix cache whatever the "
                                          "launch asked, first match on the pool's GPU and model wins")
    mxfp4_expert_layouts: list[ExpertLayoutRule] = Field(
        default_factory=list, description="the layout the stack holds MXFP4 experts in (engine.mxfp4_expert_layout), "
                                          "first match on the pool's GPU wins")
    overheads: Overheads = Overheads()
    fitted_on: str = ""
    first_token_fitted_on: str = Field(default="", description="where response_ms and tokenize_us_per_token "
                                                                "come from (benchmarks/first_token.py)")
    by_version: list[VersionRule] = Field(default_factory=list)
    releases: dict[str, str] = Field(
        default_factory=dict, description="release -> first upload day (ISO), to place nightlies by date")
    newest_release: Optional[str] = Field(
        default=None, description="the newest release whose source the profile's keys and rules were read from: "
                                  "a later backend_version is refused (its defaults are unknown); unset: not checked")
    oldest_release: Optional[str] = Field(
        default=None, description="the oldest release whose defaults the profile's keys and by_version rules "
                                  "describe: an earlier backend_version is refused (it ran defaults, or an "
                                  "engine, the rules do not know); unset: not checked")
    default_release: Optional[str] = Field(
        default=None, description="the release whose defaults the profile's own keys are, which a pool naming no "
                                  "backend_version runs, where it is not newest_release (vLLM's 0.19.1: later "
                                  "releases size the KV pool after a figure the pool must state); unset: "
                                  "newest_release")
    lora_modelled: bool = Field(default=False, description="llmsim models this stack's LoRA serving (vLLM's "
                                                            "adapter batch limit and cache); else pools[].lora is refused")
    handoff_hash_since: Optional[str] = Field(
        default=None, description="the release from which a disaggregated pair's decode server refuses a prefill "
                                  "server of another release, or running another attention kernel "
                                  "(attention_kernels), as they connect (vLLM's NIXL handshake: 'NIXL compatibility "
                                  "hash mismatch', from 0.13.0); unset: nothing is compared")
    fp8_weight_only: bool = Field(
        default=True, description="on a GPU without fp8 tensor cores the stack runs fp8 weights weight-only "
                                  "(W8A16: vLLM's and SGLang's FP8 Marlin); false: it multiplies fp8 "
                                  "activations alone (TensorRT-LLM's FP8QDQLinearMethod), so such a pool is "
                                  "refused")
    w8a8_int8: bool = Field(
        default=True, description="the stack runs int8 weights with int8 activations (W8A8, SmoothQuant: vLLM's "
                                  "compressed-tensors, SGLang's w8a8_int8), llmsim's int8; false: its linear "
                                  "layers take int8 weights only weight-only (TensorRT-LLM's PyTorch backend), so "
                                  "weight_dtype int8 is refused")
    online_fp8: bool = Field(
        default=True, description="the stack quantises a 16-bit checkpoint to fp8 as it loads it (vLLM's "
                                  "Fp8Config with is_checkpoint_fp8_serialized false, SGLang's --quantization "
                                  "fp8); false: it serves fp8 only from a checkpoint already in fp8 (TensorRT-LLM's "
                                  "PyTorch backend reads a ModelOpt export's quantization), so a 16-bit "
                                  "checkpoint served as fp8 is refused")
    upcasts_checkpoints: tuple[str, ...] = Field(
        default=(), description="quantised checkpoint formats whose weights the stack can serve in 16 bits, "
                                "upcasting them as it loads (SGLang's Mxfp4MoEMethod.process_weights_after_loading "
                                "turns MXFP4 experts to bf16 where its MoE runner has no MXFP4 kernel); a pool "
                                "naming 16-bit weights for any other quantised checkpoint is refused")
    ep_spans_replica: bool = Field(
        default=False, description="expert parallelism, when on, spans the whole replica: each GPU holds whole "
                                   "experts and none is split by width (vLLM's --enable-expert-parallel: "
                                   "FusedMoEParallelConfig.make sets ep_size to tp × dp and the MoE tp to 1), so "
                                   "ep is 1 or tp × dp and any other ep is refused; false: ep may be any divisor "
                                   "of tp × dp (SGLang's --ep-size, TensorRT-LLM's moe_expert_parallel_size)")
    speculation_batch_limit: bool = Field(
        default=False, description="a launch can turn the stack's speculation off above a batch size "
                                   "(TensorRT-LLM's decoding config max_concurrency), which "
                                   "pools[].speculative.disable_above_batch models; else that key is refused")
    draft_model_beside_dp: bool = Field(
        default=True, description="a separate draft model (pools[].speculative naming a model) runs beside "
                                  "attention data parallelism (dp > 1); false: such a pool is refused, as "
                                  "SGLang refuses its launch (STANDALONE with --enable-dp-attention)")
    pp_modelled: bool = Field(default=True, description="llmsim models this stack's pipeline-parallel loop (vLLM V1's "
                                                        "and SGLang's micro-batches); else pp > 1 is refused")
    speculative_engine: dict[str, Any] = Field(
        default_factory=dict, description="engine keys the stack changes when it decodes speculatively")
    draft_model_engine: dict[str, Any] = Field(
        default_factory=dict, description="engine defaults the stack changes when a separate draft model (not the "
                                          "model's own MTP layers) speculates; keys the pool writes win")
    aiconfigurator: GeneratedLaunch = GeneratedLaunch()
    prefill_server: Optional[PrefillServerRule] = Field(
        default=None, description="engine keys a disaggregated prefill (context) server runs, which a pool with "
                                  "disaggregation takes and may not set otherwise; unset: its own defaults")

    @model_validator(mode="after")
    def _newest_a_release(self) -> "BackendProfile":
        for key, v in (("newest_release", self.newest_release), ("default_release", self.default_release),
                       ("oldest_release", self.oldest_release),
                       ("handoff_hash_since", self.handoff_hash_since)):
            if v is not None and version_number(v) is None:
                raise KeyRefusal(key, f"{v!r} is not a release number such as 0.5.13")
        return self

    @model_validator(mode="after")
    def _release_days(self) -> "BackendProfile":
        # Compared as ISO text with measurement days: anything else would order wrongly, silently.
        for release, day in self.releases.items():
            try:
                ok = datetime.date.fromisoformat(day).isoformat() == day
            except ValueError:
                ok = False
            if not ok:
                raise KeyRefusal(("releases", release), f"expected the day it came out as YYYY-MM-DD, got {day!r}")
        return self

    def released(self, version: str) -> Optional[str]:
        """The day a release came out (ISO date) where known; a nightly's own date."""
        nightly = _NIGHTLY.search(version)
        if nightly:
            return "-".join(nightly.groups())
        return self.releases.get(version.strip())

    def version_keys(self, version: str, measured_before: Optional[str] = None) -> Optional[dict[str, Any]]:
        """Engine keys ``version`` ran by default where the profile differs;
        None when the version is neither a release number nor a release or
        nightly whose day is known.

        ``measured_before`` (an ISO day) bounds an unknown version from
        above: the run's release came out before that day. That decides only
        the rules that hold for every release up to one published after the
        day (``since`` the first release, ``until`` a release of known day
        later than it); the others stay undecided and the profile's own keys
        hold for them, as for any unknown version.

        What the releases changed under speculative decoding comes under the
        key ``speculative_engine`` (the rules' own), for :meth:`speculative_keys`,
        under a separate draft model under ``draft_model_engine``, for
        :meth:`draft_model_keys`;
        their GPU-dependent defaults under ``engine_by_gpu`` (a list of
        :class:`GpuRule`, the latest release rule's first), for
        :meth:`engine_defaults`."""
        number = _label_number(version)
        day = None if number is not None else self.released(version)
        if number is None and day is None:
            if measured_before is None:
                return None
            decided: dict[str, Any] = {}
            for rule in self.by_version:
                if self._before_until(rule, measured_before):
                    decided = _with_rule(decided, rule)
            return decided
        keys: dict[str, Any] = {}
        for rule in self.by_version:
            if self.reached(version, rule.since) and (rule.until is None or not self.reached(version, rule.until)):
                keys = _with_rule(keys, rule)
        return keys

    def reached(self, version: str, bound: str) -> bool:
        """Whether ``version`` (a release, a measured row's label or a dated nightly) is the release
        ``bound`` or later, as a rule's ``since`` holds for it and its ``until`` no longer does: by
        release number and candidate (:func:`_reached`), a nightly by the day ``bound`` came out (not
        where that day is unknown)."""
        number = _label_number(version)
        if number is not None:
            return _reached(version, number, bound)
        day, out = self.released(version), self.releases.get(bound)
        return day is not None and out is not None and day >= out

    def speculative_keys(self, version_keys: Mapping[str, Any]) -> dict[str, Any]:
        """Engine keys the stack changes when it decodes speculatively, in the release
        ``version_keys`` (:meth:`version_keys`' answer) describes."""
        return {**self.speculative_engine, **(version_keys.get("speculative_engine") or {})}

    def draft_model_keys(self, version_keys: Mapping[str, Any]) -> dict[str, Any]:
        """Engine defaults the stack changes when a separate draft model speculates, in the
        release ``version_keys`` (:meth:`version_keys`' answer) describes."""
        return {**self.draft_model_engine, **(version_keys.get("draft_model_engine") or {})}

    def release_run(self, version: Optional[str]) -> Optional[str]:
        """The release whose defaults a pool naming ``version`` (None: it names none) runs, so a
        run can say which it assumed; None when a profile file names no release at all."""
        return version or self.default_release or self.newest_release

    def attention_kernel(self, release: Mapping[str, Any], gpu: HardwareProfile, model: ModelProfile,
                         speculative: bool, kv_dtype: str) -> Optional[KernelRule]:
        """The attention kernel the stack runs by default for ``model`` on ``gpu`` in the release whose
        keys are ``release`` (:meth:`version_keys`' answer; empty: the profile's own): that release's
        ``attention_kernels`` first, then the profile's; None where no rule says."""
        return kernel_rule([*release.get("attention_kernels", ()), *self.attention_kernels], gpu, model,
                           speculative, kv_dtype)

    def hashes_handoff(self, release: Optional[str]) -> bool:
        """Whether a server of ``release`` (:meth:`release_run`; None where a profile file names none)
        sends or checks the hand-off's compatibility hash (``handoff_hash_since``): a nightly, whose
        number says nothing, is taken to."""
        if self.handoff_hash_since is None or release is None:
            return False
        since, n = version_number(self.handoff_hash_since), version_number(release)
        assert since is not None        # checked on load
        return n is None or n >= since

    def newer_than_described(self, version: str) -> bool:
        """Whether ``version`` (a checked release or nightly) came after the newest release
        this profile's rules were read from (``newest_release``), so none of them can be
        said to hold for it."""
        return self.newest_release is not None and self._read_order(version, self.newest_release) == 1

    def _read_order(self, version: str, read: str) -> Optional[int]:
        """:meth:`_release_order` against a release the profile was read from (``newest_release``,
        ``oldest_release``): within one release line its candidates and patches came out in PEP 440
        order (TensorRT-LLM's 1.0.0rc3 before 1.0.0, 1.3.0rc22 after 1.3.0rc15), which the release
        number alone cannot tell, and the release read is that one build, not its line."""
        order = self._release_order(version, read)
        if order == 0 and version_number(version) is not None:
            mine, theirs = Version(version), Version(read)
            return (mine > theirs) - (mine < theirs)
        return order

    def _release_order(self, version: str, bound: str) -> Optional[int]:
        """-1, 0 or 1 as ``version`` (a checked release or nightly) comes before, with or after the
        release ``bound``: by release number (0: the same line), a nightly by the day ``bound`` came
        out; None where neither can tell (a nightly beside a release with no known day)."""
        number = version_number(version)
        if number is not None:
            limit = version_number(bound)
            assert limit is not None        # checked on load
            return (number > limit) - (number < limit)
        day, out = self.released(version), self.releases.get(bound)
        if day is None or out is None:
            return None
        return (day > out) - (day < out)

    @property
    def describes_releases(self) -> bool:
        """Whether the profile places any release: one its keys were read from (newest_release,
        default_release), a bound (oldest_release) or a rule by release (by_version). Without any, its
        keys are its one set of defaults, and a backend_version could only relabel them."""
        return bool(self.by_version) or any(r is not None for r in (self.newest_release, self.oldest_release,
                                                                     self.default_release))

    def older_than_described(self, version: str) -> bool:
        """Whether ``version`` (a checked release or nightly) came before the oldest release this
        profile's rules describe (``oldest_release``), so its defaults are not the ones they give."""
        return self.oldest_release is not None and self._read_order(version, self.oldest_release) == -1

    def came_before(self, version: str, bound: str) -> bool:
        """Whether ``version`` (a checked release or nightly) came out before the release ``bound``
        (a nightly whose day is unknown is not said to)."""
        return self._release_order(version, bound) == -1

    def _before_until(self, rule: VersionRule, day: str) -> bool:
        """Whether every release out by ``day`` (a measurement day) falls inside ``rule``."""
        last = self.releases.get(rule.until) if rule.until else None
        return version_number(rule.since) == (0, 0, 0) and last is not None and day < last

    def engine_defaults(self, gpu: HardwareProfile, release_rules: "tuple[GpuRule, ...] | list[GpuRule]" = ()) -> dict[str, Any]:
        """The engine keys this stack sets on ``gpu``, overheads included; ``release_rules``: a
        release's own GPU rules (:meth:`version_keys`' ``engine_by_gpu``), tried before the profile's."""
        out = dict(self.engine)
        out.update(gpu_rule_keys([*release_rules, *self.engine_by_gpu], gpu))
        out.update(self.overheads.model_dump())
        return out

    def prefill_server_keys(self, merged: dict[str, Any], written: Mapping[str, Any],
                            replayed: bool = False) -> dict[str, Any]:
        """``merged`` (a pool's engine with this stack's defaults) as a disaggregated prefill server of
        the stack runs it (``prefill_server``); a key the pool wrote (``written``) otherwise is refused,
        unless the release it runs (:meth:`release_run` of its ``backend_version``) takes the launch
        (``prefill_server.lifted``). A ``replayed`` row's release, known by its keys alone, is not
        placed against ``lifted.since`` unless the pool names one."""
        rule = self.prefill_server
        if rule is None:
            return merged
        lift, version = rule.lifted, written.get("backend_version")
        named = version if isinstance(version, str) and _names_a_release(version) else None
        release = self.release_run(named) if named or not replayed else None
        if (lift is not None and release is not None and self.reached(release, lift.since)
                and all(merged.get(k) == v for k, v in lift.where.items())):
            return merged
        for key, value in rule.set.items():
            if key in written and written[key] != value:
                raise KeyRefusal(f"engine.{key}", f"{json.dumps(written[key])} on a disaggregated prefill pool: "
                                                  f"{rule.why}; remove it (a prefill pool of {self.name} runs "
                                                  f"{key}: {json.dumps(value)})")
        return {**merged, **rule.set}

    def summary(self) -> dict:
        o = self.overheads
        # the release a pool naming no backend_version runs, whose defaults (TensorRT-LLM's MoE backend,
        # vLLM's async scheduling) a plan assumes: said beside the range, not only after a run
        return {"name": self.name, "stack": self.stack, "versions": self.versions,
                "default_release": self.release_run(None),
                "chunked_prefill": self.engine.get("chunked_prefill"),
                "mixed_prefill": self.engine.get("mixed_prefill"),
                "async_scheduling": bool(self.engine.get("async_scheduling", False)),
                "iteration_ms": o.iteration_overhead_ms, "iteration_us_per_seq": o.iteration_us_per_seq,
                "request_ms": o.request_ms, "response_ms": o.response_ms}


@lru_cache(maxsize=64)
def _load(path: Path, mtime: float) -> BackendProfile:
    prof = load_profile("backend_profiles", str(path), BackendProfile, "backend")
    _check_dated_bounds(prof, path)
    _check_engine_keys(prof, path)
    check_stack_keys(prof, path)
    return prof


def _check_dated_bounds(prof: BackendProfile, path: Path) -> None:
    """Every release a rule or a range starts or ends at has its day in ``releases``: a nightly
    (``backend_version: nightly-...-YYYYMMDD``) is placed against them by day alone, so beside an undated
    ``until`` every later nightly was held inside the rule, beside an undated ``since`` none reached it,
    and an undated newest or oldest release refused no nightly however far outside."""
    lift = prof.prefill_server.lifted if prof.prefill_server else None
    bounds = [*((f"by_version[{i}].{end}", b) for i, r in enumerate(prof.by_version)
                for end, b in (("since", r.since), ("until", r.until)) if b),
              *((("prefill_server.lifted.since", lift.since),) if lift else ()),
              *((key, b) for key, b in (("newest_release", prof.newest_release),
                                        ("oldest_release", prof.oldest_release),
                                        ("default_release", prof.default_release)) if b)]
    for key, release in bounds:
        if release not in prof.releases:
            raise LlmsimError(f"release {release} has no day in releases, so a nightly build cannot be placed "
                              f"before or after it; give the release's upload day, e.g. releases: "
                              f"{{\"{release}\": \"2026-01-30\"}} (its first upload to the package index)",
                              source=path, key_path=key)


def _check_engine_keys(prof: BackendProfile, path: Path) -> None:
    """Each engine mapping the profile sets is valid engine settings, so a
    typo or a number written as text is this file's error, named here,
    not a pool's that never wrote the key."""
    from ..engine.config import EngineConfig
    from ..scenario.strict import validate_strict

    lift = prof.prefill_server.lifted if prof.prefill_server else None
    mappings = [("engine", prof.engine), *((f"engine_by_gpu[{i}].set", r.set) for i, r in enumerate(prof.engine_by_gpu)),
                # a release's mapping refines the profile's own (kv_memory: a knob under its rule)
                *((f"by_version[{i}].set", _release_engine(prof.engine, r.set))
                  for i, r in enumerate(prof.by_version)),
                *((f"by_version[{i}].speculative_engine", r.speculative_engine)
                  for i, r in enumerate(prof.by_version) if r.speculative_engine),
                *((f"by_version[{i}].draft_model_engine", r.draft_model_engine)
                  for i, r in enumerate(prof.by_version) if r.draft_model_engine),
                *((f"by_version[{i}].engine_by_gpu[{j}].set", g.set)
                  for i, r in enumerate(prof.by_version) for j, g in enumerate(r.engine_by_gpu)),
                *((f"by_version[{i}].engine_by_model[{j}].set", _release_engine(prof.engine, m.set))
                  for i, r in enumerate(prof.by_version) for j, m in enumerate(r.engine_by_model)),
                ("speculative_engine", prof.speculative_engine), ("draft_model_engine", prof.draft_model_engine),
                ("aiconfigurator.engine", prof.aiconfigurator.engine),
                ("aiconfigurator.prefill_engine", prof.aiconfigurator.prefill_engine),
                *((("prefill_server.set", prof.prefill_server.set),) if prof.prefill_server else ()),
                *((("prefill_server.lifted.where", lift.where),) if lift else ())]
    for where, mapping in mappings:
        # `kernels` is checked against the built-in profiles' stacks, which would load this one again;
        # `moe_backend` against the stack's kernels (the profile's where the mapping names none)
        settings = {k: v for k, v in mapping.items() if k not in ("kernels", "moe_backend")}
        if "moe_backend" in mapping:
            try:
                check_moe_backend(mapping["moe_backend"], mapping.get("kernels", prof.engine.get("kernels")))
            except ValueError as e:
                raise LlmsimError(str(e), source=path, key_path=f"{where}.moe_backend") from None
        try:
            validate_strict(EngineConfig, settings, path)
        except LlmsimError as e:
            key = e.key_path if e.key_path and e.key_path != "(top level)" else ""
            raise LlmsimError(e.message, source=path, key_path=f"{where}.{key}" if key else where) from None


def load_backend(name_or_path: str) -> BackendProfile:
    """A built-in backend (``vllm``, ``sglang``, ``trtllm``) or a profile file,
    such as one ``llmsim validate --fit`` wrote (cached until the file changes)."""
    path = resolve("backend_profiles", name_or_path)
    profile = _load(path, path.stat().st_mtime)
    if name_or_path not in backend_names() and profile.stack not in serving_stacks():
        # a file of one's own describes a release of a known stack (its kernels, KV rule and per-stack
        # calibration are read by that name); an unknown one would fall back to the defaults unannounced
        raise LlmsimError(f"unknown stack {profile.stack!r}; expected one of {', '.join(serving_stacks())} "
                          f"(the stack of a built-in or installed backend profile)", source=path, key_path="stack")
    return profile


def backend_names() -> list[str]:
    """Every backend a pool's ``engine.backend`` may name: the built-in
    profiles and the installed plug-ins' (a new stack is one profile file)."""
    return list_profiles("backend_profiles")


def serving_stacks() -> list[str]:
    """The serving stacks the backend profiles belong to (their ``stack``):
    what ``engine.kernels`` names and whose measured kernels calibration reads."""
    return sorted({load_backend(n).stack for n in backend_names()})


def check_serving_stack(name: str) -> None:
    """Refuse a stack name no backend profile belongs to (``engine.kernels``,
    a GPU profile's per-stack keys, ``llmsim estimate --kernels``): an unknown
    name would otherwise fall back to the profile's own kernels unannounced."""
    stacks = serving_stacks()
    if name not in stacks:
        raise ValueError(f"{name!r} names no serving stack; expected one of {', '.join(stacks)} "
                         "(the stack of a built-in or installed backend profile)")


def apply_backend(engine: dict[str, Any], gpu_name: str, draft: str = "",
                  model: Optional[ModelProfile] = None,
                  release: Optional[Mapping[str, Any]] = None) -> dict[str, Any]:
    """``engine`` (a pool's engine mapping as written) with its backend's
    defaults for ``gpu_name`` under the keys the user set. ``draft``: what
    decodes beside the model (:func:`simulator.costmodel.speculative.draft_kind`):
    any draft makes a stack schedule differently (``speculative_engine``:
    SGLang's EAGLE path turns its overlap scheduler and mixed chunks off and
    caps running requests at 48), a separate draft model ("draft", not the
    model's own MTP layers) may change its defaults too
    (``draft_model_engine``). ``model``: the pool's model, which a release's
    ``engine_by_model`` rules read (vLLM's model runner); a release with such
    rules is refused without it, where they would be skipped unseen.

    A ``backend_version`` that names no release (or is not text) adds no
    keys here and stays in the mapping, for the engine settings built from
    it to refuse (:class:`~simulator.engine.config.EngineConfig`, whose
    message names the pool's engine and the key): refused here, inside the
    pool's own validation, the message would name the pool alone.

    ``release``: the release's keys (:meth:`BackendProfile.version_keys`' answer) where the caller
    knows them otherwise than by a name ``backend_version`` takes: a measured row's version label,
    which may be a nightly without its day, or no label, whose measurement day then decides what it
    can (:func:`simulator.validation.deployment.version_keys`). They stand for ``backend_version``'s,
    so that a replayed row runs its release's rules as a pool naming it does (its attention kernel's
    forced block size among them, not a block size of the pool's own)."""
    from .hardware import load_hardware

    name = engine.get("backend")
    if not isinstance(name, str):
        return engine
    prof = load_backend(name)
    version = engine.get("backend_version")
    keys: dict[str, Any] = {}
    if release is not None:
        keys = dict(release)
    elif isinstance(version, str) and _names_a_release(version):
        keys = prof.version_keys(version)
        assert keys is not None        # a checked version is a release number or a dated nightly
    gpu = load_hardware(gpu_name)
    merged = prof.engine_defaults(gpu, keys.get("engine_by_gpu", ()))
    if keys:
        merged = refine(merged, {k: v for k, v in keys.items() if k not in RELEASE_MAPPINGS})
        merged = refine(merged, _release_model_keys(keys, model, version))
        if isinstance(merged.get("kv_memory"), dict):     # a release's defaults beside the profile's fraction
            merged["kv_memory"] = without_default_inputs(merged["kv_memory"])
    if draft:
        merged = refine(merged, prof.speculative_keys(keys))
    if draft == "draft":
        merged = refine(merged, prof.draft_model_keys(keys))
    if model is not None:
        kernel = prof.attention_kernel(keys, gpu, model, bool(draft), _kv_dtype(merged, engine))
        merged = _kernel_prefill_graphs(_kernel_block_size(merged, engine, prof, kernel, gpu, model), kernel)
        _launch_block_size(engine, keys, prof, kernel, merged)
        merged = _stack_prefix_cache(merged, engine, prof, gpu, model, bool(draft))
    if engine.get("weight_dtype", getattr(model, "checkpoint_dtype", None)) == "mxfp4":   # the layout of its experts
        layout = expert_layout_rule([*keys.get("mxfp4_expert_layouts", ()), *prof.mxfp4_expert_layouts], gpu)
        if layout is not None and layout.layout is not None:
            merged["mxfp4_expert_layout"] = layout.layout.model_dump()
    # A mapping set beside the backend (kv_memory: {fraction: 0.8}) refines the profile's, key by key.
    out = _running_cap_beside(_prompt_kv_beside(refine(backend_defaults_beside(merged, engine), engine), engine),
                              engine)
    return out if model is None else _unchunked_budget(out, engine, model)


def _unchunked_budget(out: dict[str, Any], engine: Mapping[str, Any], model: ModelProfile) -> dict[str, Any]:
    """The budget a stack takes without chunked prefill where the launch sets none (``unchunked_budget``):
    vLLM raises its default to the longest request it takes (engine/arg_utils.py: ``max(max_model_len,
    default)``), where the default would refuse to start, and one the pool sets is checked, not raised
    (:func:`simulator.fleet.setup.setup_pool`); SGLang's prefill batch is capped by --max-prefill-tokens
    instead of the chunk size."""
    rule = out.get("unchunked_budget")
    if rule is None or out.get("chunked_prefill", True) is not False or "max_num_batched_tokens" in engine:
        return out
    budget = out.get("max_num_batched_tokens")
    if rule == "context":
        rule = out.get("max_model_len") or model.max_position_embeddings
        if isinstance(budget, int) and isinstance(rule, int) and budget >= rule:
            return out
    return {**out, "max_num_batched_tokens": rule} if isinstance(rule, int) else out


def _running_cap_beside(out: dict[str, Any], engine: Mapping[str, Any]) -> dict[str, Any]:
    """A stack that derives its running-request cap from the pool unless the launch gives one (SGLang's
    --max-running-requests, or the one it sets itself beside a draft) caps the pool's own ``max_num_seqs``
    instead (``running_cap: given``), a rank's as the pool states it."""
    if out.get("running_cap") in ("pool", "server") and "max_num_seqs" in engine and "running_cap" not in engine:
        return {**out, "running_cap": "given"}
    return out


def _prompt_kv_beside(out: dict[str, Any], engine: Mapping[str, Any]) -> dict[str, Any]:
    """The stack's ``prompt_kv`` and ``kv_admission`` give way where the pool's own keys describe another
    server's KV (static batching, contiguous KV, and for ``prompt_kv`` an admission reserving more than
    the prompt): vLLM's chunk-by-chunk allocation and TensorRT-LLM's output reservation mean nothing
    where each request's maximum is reserved at admission. Set by the pool itself beside them, they are
    refused."""
    if "kv_admission" not in engine and (out.get("scheduler") == "static" or out.get("kv_allocation") == "contiguous"):
        out.pop("kv_admission", None)
    if "prompt_kv" not in engine and (out.get("scheduler") == "static" or out.get("kv_allocation") == "contiguous"
                                      or out.get("kv_admission", "on_demand") != "on_demand"):
        out.pop("prompt_kv", None)
    return out


def _kv_dtype(merged: Mapping[str, Any], engine: Mapping[str, Any]) -> str:
    """The KV dtype the pool runs, for the rules that depend on it (a value the engine settings will
    refuse reads as bf16 here)."""
    kv_dtype = engine.get("kv_dtype", merged.get("kv_dtype", "bf16"))
    return kv_dtype if isinstance(kv_dtype, str) else "bf16"


def _kernel_block_size(merged: dict[str, Any], engine: Mapping[str, Any], prof: BackendProfile,
                       rule: Optional[KernelRule], gpu: HardwareProfile, model: ModelProfile) -> dict[str, Any]:
    """``merged`` with the block size the attention kernel the stack picks for ``model`` on ``gpu``
    (``rule``: its ``attention_kernels``' match, a release's first) forces; a block size the pool sets
    itself stays, unless the stack would not run it (refused, naming the sizes it takes)."""
    if rule is None:
        return merged
    default = rule.chosen(merged.get("block_size", 16))
    own = engine.get("block_size")
    if own is None:
        return {**merged, "block_size": default}
    if isinstance(own, int) and not isinstance(own, bool) and own >= 1 and not rule.runs(own):
        other = (f", and another of its kernels a multiple of {rule.other_kernels}" if rule.other_kernels
                 else f", and runs any other at {rule.block_size}" if rule.block_size is not None else "")
        allowed = (f"a multiple of {rule.other_kernels}" if rule.other_kernels
                   else rule.sizes_text())
        raise KeyRefusal("engine.block_size",
                         f"{own} tokens: {prof.stack}'s {rule.kernel} attention, which it runs for {model.name} on "
                         f"{gpu.name}, takes blocks of {rule.sizes_text()} tokens{other}; set {allowed}, or leave "
                         f"block_size unset ({default})")
    return merged


def _launch_block_size(engine: Mapping[str, Any], keys: Mapping[str, Any], prof: BackendProfile,
                       rule: Optional[KernelRule], merged: Mapping[str, Any]) -> None:
    """Refuse a block size the pool sets that its release's launch does not take at all (``keys``'
    ``launch_block_sizes``: vLLM before 0.18.0 offers --block-size only from its CacheConfig BlockSize
    Literal, so argparse refuses 48 though FlashAttention runs any multiple of 16), naming the sizes both
    the launch and the kernel (``rule``) take."""
    taken, own = keys.get("launch_block_sizes"), engine.get("block_size")
    if taken is None or not isinstance(own, int) or isinstance(own, bool) or own < 1 or own in taken:
        return
    runs = [b for b in taken if rule is None or rule.runs(b)] or list(taken)
    default = merged.get("block_size", 16) if rule is None else rule.chosen(merged.get("block_size", 16))
    release = engine.get("backend_version") or "this release"
    kernel = "" if rule is None else f", of which its {rule.kernel} attention runs {_either(runs)}"
    raise KeyRefusal("engine.block_size",
                     f"{own} tokens: {prof.stack} {release}'s launch takes --block-size {_either(taken)} only (its "
                     f"CacheConfig BlockSize){kernel}; set {_either(runs)}, or leave block_size unset ({default})")


def _either(sizes: Sequence[int]) -> str:
    *rest, last = [str(b) for b in sizes]
    return f"{', '.join(rest)} or {last}" if rest else last


def _kernel_prefill_graphs(merged: dict[str, Any], rule: Optional[KernelRule]) -> dict[str, Any]:
    """``merged`` telling the KV accounting that the stack drops its prefill graphs on the attention
    kernel of ``rule`` after its reserve made room for them: the kernel is picked after the memory
    settings (SGLang's arg_groups/pipeline.py), so the reserve cannot know, and the cost model must."""
    if rule is None or not rule.prefill_graphs_off_after_reserve or not isinstance(merged.get("kv_memory"), dict):
        return merged
    return {**merged, "kv_memory": {**merged["kv_memory"], "prefill_graphs_off_after_reserve": True}}


def _stack_prefix_cache(merged: dict[str, Any], engine: Mapping[str, Any], prof: BackendProfile,
                        gpu: HardwareProfile, model: ModelProfile, speculative: bool) -> dict[str, Any]:
    """``merged`` without the prefix cache where the stack turns it off for ``model`` on ``gpu``
    (its ``prefix_cache_rules``); a pool that sets ``prefix_cache: true`` there is refused, naming
    the stack's rule, rather than simulated with a cache the stack would not keep."""
    rule = kernel_rule(prof.prefix_cache_rules, gpu, model, speculative, _kv_dtype(merged, engine))
    if rule is None or rule.prefix_cache:
        return merged
    if engine.get("prefix_cache") is True:
        raise KeyRefusal("engine.prefix_cache",
                         f"true: {prof.stack} turns its prefix cache off for {model.name} on {gpu.name} "
                         f"({rule.why}); set prefix_cache: false, or leave it unset")
    return {**merged, "prefix_cache": False}


def _release_model_keys(keys: Mapping[str, Any], model: Optional[ModelProfile], version: Any) -> dict[str, Any]:
    """The keys a release's ``engine_by_model`` rules (:meth:`BackendProfile.version_keys`' answer)
    give ``model``."""
    rules = keys.get("engine_by_model", ())
    if not rules:
        return {}
    if model is None:
        raise LlmsimError(f"release {version}'s defaults depend on the model a pool serves (engine_by_model); "
                          "they were asked for without one")
    return model_rule_keys(rules, model)


def _release_engine(engine: Mapping[str, Any], keys: Mapping[str, Any]) -> dict[str, Any]:
    """The keys a release rule sets, each as it refines the profile's ``engine`` (kv_memory: a knob
    under the profile's rule, less the default-fraction inputs a fixed fraction makes moot)."""
    out = {k: refine(engine, keys)[k] for k in keys}
    if isinstance(out.get("kv_memory"), dict):
        out["kv_memory"] = without_default_inputs(out["kv_memory"])
    return out


def _with_rule(keys: Mapping[str, Any], rule: VersionRule) -> dict[str, Any]:
    """``keys`` (the earlier release rules') refined by ``rule``'s, its GPU rules before theirs."""
    out = refine(keys, _rule_keys(rule))
    for rules in ("engine_by_gpu", "engine_by_model", "attention_kernels", "mxfp4_expert_layouts"):
        if getattr(rule, rules):
            out[rules] = [*getattr(rule, rules), *keys.get(rules, [])]
    if rule.launch_block_sizes is not None:
        out["launch_block_sizes"] = rule.launch_block_sizes
    return out


#: What a release's keys (:meth:`BackendProfile.version_keys`) hold beside engine keys: its
#: defaults under speculation, under a separate draft model, on particular GPUs and for particular models,
#: and the block sizes its launch takes.
RELEASE_MAPPINGS = ("speculative_engine", "draft_model_engine", "engine_by_gpu", "engine_by_model",
                    "attention_kernels", "mxfp4_expert_layouts", "launch_block_sizes")


def _rule_keys(rule: VersionRule) -> dict[str, Any]:
    """A release rule's engine keys, what it changes under speculation under ``speculative_engine``
    and under a separate draft model under ``draft_model_engine``."""
    return {**rule.set, **({"speculative_engine": rule.speculative_engine} if rule.speculative_engine else {}),
            **({"draft_model_engine": rule.draft_model_engine} if rule.draft_model_engine else {})}


def refine(base: Mapping[str, Any], keys: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` with ``keys`` over it, a mapping refining a mapping key by key
    (a release's ``kv_memory: {sampler_logit_bytes: 28}`` keeps the profile's
    rule; a user's ``kv_memory: {fraction: 0.8}`` keeps both)."""
    out = dict(base)
    for key, value in keys.items():
        old = out.get(key)
        out[key] = {**old, **value} if isinstance(old, dict) and isinstance(value, dict) else value
    return out
