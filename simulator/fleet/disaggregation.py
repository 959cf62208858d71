"""Disaggregated prefill and decode (DistServe, Splitwise, vLLM's P/D connectors).

A prefill pool computes each prompt's KV and hands it to a decode pool over
a link; the decode replica receives the KV of all prompt tokens but the
last, computes that one (its first iteration, which samples the first
token the client sees) and decodes the rest, as vLLM's connectors do; under
``engine.first_token_from_prefill`` (SGLang) it receives the whole prompt's
KV with the prefill's sampled token and streams that token as the request
joins its batch, computing nothing for it. A decode replica with a prefix
cache (vLLM's, ``engine.decode_prefix_reuse``) shares the prompt blocks it
already holds and is sent only the others, choosing the replica (and the
attention-DP rank whose cache that is) first. So

* TTFT = queue + prefill on the prefill pool + KV transfer + the decode
  replica's wait and first step (``ttft_budget`` shows each part);
* TPOT is set by the decode pool alone: no prefill chunk ever shares its
  iterations, which is the point of disaggregating;
* the prefill pool's sampled token is discarded where the decode replica
  samples its own (vLLM runs the prefill leg with ``max_tokens=1``).

The transfer takes ``latency + KV bytes on the busiest link / per-GPU
bandwidth`` (:class:`HandoffBytes`): each GPU sends (or receives) what it holds over its own link,
so with heads split over TP a shard's slice, over the smaller of the two
pools' TP (a decode GPU receiving four prefill shards takes them over its
one link), and with MLA the whole latent, which every GPU keeps
(:func:`simulator.scenario.compile._pairs`). A
decode replica preempted by recompute prefills the whole prompt locally
(the transferred KV is gone); SGLang's decode server (``kv_admission:
decode_reservation``, which an SGLang decode pool runs) keeps a retracted
request's KV in host memory and recomputes its last token only, and admits
a handed-over request only beside a reserve of decode tokens per running
request, after the transfer where SGLang allocates before the prefill. The links are a queue
(:mod:`simulator.fleet.kv_link`): hand-offs out of one prefill rank or into one decode rank take turns, so
the decode replica is chosen as the prompt finishes (the pair's router has chosen it by then; here the
decode pool's, on its load with the hand-offs already on their way to each replica counted), and a
hand-off's time is its wait for the links, the move and the latency. The prefill replica keeps the
prompt's KV until then (the engine's ``holds_handoffs``: vLLM's NIXL connector frees the blocks on the
decode side's notice, SGLang's prefill server once the transfer polls ``Success``, TensorRT-LLM's
context server once it completed), so a congested link fills the prefill pool's memory and holds
back the prompts behind it, as it does the stacks'.

Presets (per GPU, effective, assumptions stated here), read from the pair's
GPU profiles so a preset means that hardware's link: ``nvlink`` 90 % of the
GPU's NVLink bandwidth per direction (``interconnect.bandwidth_gb_s``: 405
GB/s on H100, 810 on B200 and GB200, 270 on A100; NCCL reaches ~90 %) and
10 µs; ``infiniband`` 90 % of its scale-out NIC (``interconnect.scale_out_gb_s``:
45 GB/s for one NDR 400 Gb/s HCA per GPU as in DGX H100 and B200, 90 for
ConnectX-8's 800 Gb/s on B300 and GB300, 22.5 for DGX A100's HDR) and 20 µs,
one NDR HCA's where the profile states no NIC; ``ethernet`` 3 GB/s and 100
µs (a 200 GbE NIC shared by a node's 8 GPUs, RoCE at ~95 %). Between pools
of two GPUs the slower side's link bounds the transfer.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Literal, Optional, Sequence

from pydantic import BaseModel, ConfigDict, Field, model_validator

from workloads.request import Request, Status

from .kv_link import KvLinks

#: The share of a link's line rate a KV transfer reaches (NCCL's and NIXL's bulk copies, ~90 %).
LINK_EFFICIENCY = 0.9
#: One NDR 400 Gb/s HCA per GPU (DGX H100), for a GPU whose profile states no scale-out NIC.
NDR_GB_S = 50.0
#: Each preset's latency (ms) and, for ethernet, its bandwidth (GB/s per GPU, a shared 200 GbE NIC).
LATENCY_MS = {"nvlink": 0.010, "infiniband": 0.020, "ethernet": 0.100}
ETHERNET_GB_S = 3.0


def preset_gb_s(preset: str, gpus: Sequence[Any]) -> float:
    """A preset's bandwidth per GPU over the pair's GPUs (the slower side bounds the transfer)."""
    if preset == "ethernet":
        return ETHERNET_GB_S
    if preset == "nvlink":
        return LINK_EFFICIENCY * min(g.interconnect.bandwidth_gb_s for g in gpus)
    return LINK_EFFICIENCY * min(g.interconnect.scale_out_gb_s or NDR_GB_S for g in gpus)


class KvLinkSpec(BaseModel):
    """The prefill → decode link: a preset, or explicit numbers that override it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    preset: Literal["nvlink", "infiniband", "ethernet"] = Field(
        default="infiniband", description="nvlink only where both pools run one GPU and, at their most replicas "
                                          "(autoscaling's max_replicas + warm_pool), fit in one NVLink domain of it "
                                          "(8 on HGX boards, 72 on an NVL72 rack; not AMD's xGMI mesh), unless "
                                          "bandwidth_gb_per_s and latency_ms are both given. Each reads the pair's GPU "
                                          "profiles: nvlink 90 % of interconnect.bandwidth_gb_s and 10 µs, infiniband "
                                          "90 % of interconnect.scale_out_gb_s (of 50 GB/s where unstated) and 20 µs, "
                                          "ethernet 3 GB/s and 100 µs; between two GPUs, the slower one's")
    # Bounded as the network delays are (an hour; 10 MB/s, slower than any datacenter link): past them
    # a hand-off stretched the run for minutes before the clock's limit stopped it, on another key.
    bandwidth_gb_per_s: Optional[float] = Field(default=None, ge=0.01, allow_inf_nan=False,
                                                description="per GPU (each GPU sends what it holds: a TP shard "
                                                            "its heads' slice, MLA the whole latent), at least 0.01")
    latency_ms: Optional[float] = Field(default=None, ge=0, le=3_600_000, allow_inf_nan=False,
                                        description="per hand-off, at most an hour")

    def numbers(self, gpus: Sequence[Any]) -> tuple[float, float]:
        """(bytes per second per GPU, latency seconds) between pools on ``gpus`` (their GPU profiles):
        a 400 GB/s NVLink figure read off H100 priced B200's NVLink 5 at half its rate."""
        bw = self.bandwidth_gb_per_s if self.bandwidth_gb_per_s is not None else preset_gb_s(self.preset, gpus)
        lat = self.latency_ms if self.latency_ms is not None else LATENCY_MS[self.preset]
        return bw * 1e9, lat / 1000.0


class DisaggregationSpec(BaseModel):
    """On a prefill pool: where its requests decode, and over what link."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    decode_pool: str = Field(description="name of the pool that decodes this pool's requests")
    link: KvLinkSpec = KvLinkSpec()

    @model_validator(mode="after")
    def _named(self) -> "DisaggregationSpec":
        if not self.decode_pool:
            raise ValueError("decode_pool must name a pool")
        return self


@dataclass(frozen=True)
class HandoffBytes:
    """What a hand-off moves over the busiest link: ``full`` bytes for every prompt token
    sent (the layers the pool keeps every token of: the full-attention ones, and the
    sliding-window ones too where it keeps their every token, as TensorRT-LLM's one pool does),
    and ``window`` bytes a token for the sliding-window layers' last ``window_tokens`` at most,
    which vLLM's NIXL connector with the hybrid KV cache manager on and SGLang's hybrid SWA pool
    move where the rest of those layers' prompt has left the window
    (:func:`simulator.scenario.compile._handoff_bytes`); 0 for a model without them."""

    full: float
    window: float = 0.0
    window_tokens: int = 0

    def of(self, tokens: int) -> float:
        return tokens * self.full + min(tokens, self.window_tokens) * self.window


class PrefillDecode:
    """A prefill pool and a decode pool acting as one pool to the front end."""

    def __init__(self, env, prefill, decode, link_bytes: HandoffBytes, link: tuple[float, float],
                 link_shares: tuple[float, float] = (1.0, 1.0)) -> None:
        self.env = env
        self.prefill = prefill
        self.decode = decode
        self.link_bytes = link_bytes
        self.bandwidth, self.latency = link     # KvLinkSpec.numbers: bytes/s per GPU, seconds
        self.links = KvLinks(link_shares)
        self.first_token_from_prefill = decode.cfg.first_token_from_prefill
        self.decode_prefix_reuse = decode.cfg.decode_prefix_reuse and decode.cfg.prefix_cache
        self.on_done: Optional[Callable[[Request], None]] = None
        self.legs: dict[int, tuple[Request, Request]] = {}     # id -> (client request, leg in flight)
        # ids whose KV is in transfer -> the decode replica it was placed on ahead (place_ahead), or None
        self.on_link: dict[int, Optional[Any]] = {}
        self.decoding: set[int] = set()                         # ids on the decode pool
        prefill.on_done = self._prefilled
        prefill.hold_handoffs()
        decode_done = decode.on_done
        decode.on_done = lambda r: self._decoded(r) if r.id in self.legs else decode_done(r)

    def transfer_s(self, tokens: int) -> float:
        """A hand-off of ``tokens`` prompt tokens on free links: the move and the latency."""
        return self.latency + self.link_bytes.of(tokens) / self.bandwidth

    def submit(self, req: Request) -> None:
        leg = Request(req.id, req.arrival, req.input_tokens, 1, req.session, req.klass, req.priority, req.blocks,
                      req.shared_ids)
        leg.queued = req.queued
        self.legs[req.id] = (req, leg)
        self.prefill.submit(leg)

    def cancel(self, req: Request) -> None:
        pair = self.legs.get(req.id)
        if pair is None:
            return
        req, leg = pair
        if req.id in self.on_link:              # its KV is on the link: it ends now
            target = self.on_link.pop(req.id)
            if target is not None:
                target.unplace(leg)
                self.decode.landed(target, leg)
            self.prefill.release_handoff(req)
            self._end(req, leg, Status.CANCELLED, self.env.now)
        else:
            (self.decode if req.id in self.decoding else self.prefill).cancel(leg)

    def _prefilled(self, leg: Request) -> None:
        req, _ = self.legs[leg.id]
        req.admitted, req.cached_tokens, req.replica = leg.admitted, leg.cached_tokens, leg.replica
        req.preemptions += leg.preemptions
        if leg.status is not Status.FINISHED:
            self._end(req, leg, leg.status, leg.finish)
            return
        req.prefill_done = leg.first_token
        if req.output_tokens == 1:              # nothing left to decode: the prefill's token is the answer
            self.prefill.release_handoff(req)
            req.first_token = leg.first_token
            self._end(req, leg, Status.FINISHED, leg.finish)
            return
        reuse = self.decode_prefix_reuse and req.blocks is not None
        dec = Request(req.id, self.env.now, req.input_tokens, req.output_tokens, req.session, req.klass,
                      req.priority, req.blocks if reuse else None, req.shared_ids if reuse else None)
        # the decode replica computes the last prompt token to sample the first (vLLM), or takes the
        # prefill's token and emits it as the request joins its batch (SGLang: a prompt chunk of none)
        dec.preloaded = req.input_tokens - (0 if self.first_token_from_prefill else 1)
        # the decode replica is chosen before the KV moves, whose links it takes turns on; one that keeps
        # a prefix cache pulls only the blocks it lacks (vLLM's NIXL connector: get_num_new_matched_tokens
        # counts its local hit), the request placed on one of its attention-DP ranks, whose cache that hit is
        target = self.decode.route(dec)
        # its rank too, where the decode replica's DP front end places on arrival (not where its ranks
        # fetch from a central queue as they free up, TensorRT-LLM's): the move lands in that rank's
        # memory over its links, out of the links of the prefill rank that holds the KV
        ahead = target is not None and target.placement is not None and not target.placement.fetches
        held = target.place_ahead(dec) if target is not None and (reuse or ahead) else 0   # (none without blocks)
        move = self.link_bytes.of(req.input_tokens - held) / self.bandwidth
        sender = self.prefill.replicas[leg.replica]
        req.kv_wait = self.links.book(self.env.now, sender, target, move, sender.handoff_rank(leg.id),
                                      target.ahead.get(dec.id, -1) if ahead else -1)
        req.kv_transfer = req.kv_wait + move + self.latency
        if target is not None:
            self.decode.expect(target, dec)
        self.legs[req.id] = (req, dec)
        self.on_link[req.id] = target
        ev = self.env.timeout(req.kv_transfer)
        ev.callbacks.append(lambda _ev: self._arrived(dec, target))

    def _arrived(self, dec: Request, target=None) -> None:
        if dec.id in self.on_link:
            del self.on_link[dec.id]
            self.prefill.release_handoff(self.legs[dec.id][0])     # the prefill replica's copy is read
            if target is not None:
                self.decode.landed(target, dec)
            dec.queued = self.env.now
            self.decoding.add(dec.id)
            self.decode.submit(dec, target)

    def _decoded(self, dec: Request) -> None:
        req, _ = self.legs[dec.id]
        req.first_token = dec.first_token
        req.output_tokens = dec.output_tokens      # as the decode pool served it: its stack may cut it to its pool
        req.preemptions += dec.preemptions
        self._end(req, dec, dec.status, dec.finish)

    def _end(self, req: Request, leg: Request, status: Status, t: float) -> None:
        del self.legs[req.id]
        self.decoding.discard(req.id)
        leg.status = status
        req.status = status
        req.reject_reason = leg.reject_reason      # a leg's pool refused it: the request's reason
        req.finish = t
        if self.on_done:
            self.on_done(req)

    # the front end and reports read these from the pool a class routes to
    @property
    def name(self) -> str:
        return self.prefill.name

    def end_time(self) -> float:
        return max(self.prefill.end_time(), self.decode.end_time())
