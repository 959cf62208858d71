"""Whether a disaggregated pair can hand its KV over NVLink at all.

The ``nvlink`` link preset prices every hand-off at NVLink's bandwidth, which
only GPUs of one NVLink domain (an HGX node's eight, an NVL72 rack's 72)
share: between two 8-GPU H200 replicas the KV crosses
the nodes' NICs, whatever the scenario calls the link. llmsim's front end
sends a prompt prefilled on any prefill replica to any decode replica, so the
preset holds only where both pools, at their largest, sit in one domain.
Anything larger is refused rather than priced at a bandwidth it cannot have,
and so are AMD's xGMI nodes: their GPUs form a mesh, each peer reached over
one link of the GPU's xGMI bandwidth / its links (448 / 7 = 64 GB/s on an
MI300X), not NVLink's switched bandwidth; such a link is given by its numbers.
"""
from __future__ import annotations

from typing import Any

from .schema import PoolSpec


def most_replicas(p: PoolSpec) -> int:
    """The most replicas a pool runs at once: its autoscaler's ceiling and warm standby, else its count."""
    a = p.autoscaling
    return p.replicas if a is None else a.max_replicas + a.warm_pool


def nvlink_refusal(prefill: PoolSpec, decode: PoolSpec, gpu_p: Any, gpu_d: Any) -> str:
    """Why the pair cannot use the ``nvlink`` preset's bandwidth ("" if it can, or if the link is
    another preset, or both its numbers are given and the preset's are unused)."""
    link = prefill.disaggregation.link if prefill.disaggregation is not None else None
    if link is None or link.preset != "nvlink" or (link.bandwidth_gb_per_s is not None
                                                    and link.latency_ms is not None):
        return ""
    fix = "use link.preset: infiniband (the scale-out network between domains)"
    if gpu_p.name != gpu_d.name:
        return (f"link preset nvlink joins GPUs of one NVLink domain, but pool {prefill.name!r} runs "
                f"{gpu_p.name} and pool {decode.name!r} {gpu_d.name}, which no NVLink connects; {fix}")
    ic = gpu_p.interconnect
    if ic.kind == "xgmi":
        peer = ic.bandwidth_gb_s / (ic.peer_links or 1)
        return (f"link preset nvlink prices NVLink's switched bandwidth, and {gpu_p.name}'s GPUs are an xGMI mesh "
                f"that reaches a peer over one link ({ic.bandwidth_gb_s:g} / {ic.peer_links or 1} = {peer:.0f} GB/s); "
                f"give the link's bandwidth_gb_per_s and latency_ms, or {fix}")
    domain = ic.max_tp if ic.kind == "nvlink" else 0
    if not domain:
        return f"link preset nvlink needs an NVLink domain, and {gpu_p.name} has none (interconnect {ic.kind}); {fix}"
    sizes = [(p.name, most_replicas(p), p.gpus_per_replica) for p in (prefill, decode)]
    total = sum(n * g for _, n, g in sizes)
    if total <= domain:
        return ""
    pools = " and ".join(f"pool {name!r} up to {n} × {g} GPUs" for name, n, g in sizes)
    return (f"link preset nvlink hands every prompt's KV over NVLink, and any prefill replica hands off to any "
            f"decode replica, so both pools must fit in one NVLink domain: {pools} make {total} GPUs, and "
            f"{gpu_p.name}'s domain holds {domain}; {fix}, or fewer or smaller replicas")
