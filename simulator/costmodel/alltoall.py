"""Expert parallelism's all-to-all: dispatch tokens to their experts' GPUs, combine back.

With ``ep`` expert-parallel ranks, each of a replica's GPUs sends its share
of the step's tokens (tokens / GPUs, each with ``topk`` routed copies of
``hidden`` values) to the ranks owning the chosen experts; with uniform
routing a fraction (ep − 1)/ep of the copies leaves the GPU. The combine
sends the expert outputs back the same way. Peers inside the GPU's NVLink
domain are reached over NVLink, the others over the scale-out NIC; both
links run at once, so a phase lasts as long as the slower of the two, plus
a latency floor.
"""
from __future__ import annotations

from ..errors import LlmsimError
from ..profiles.hardware import HardwareProfile

_US = 1e-6


def alltoall_time(tokens: float, gpus: int, ep: int, topk: int, hidden: int, bytes_per_value: float,
                  gpu: HardwareProfile, nvlink_eta: float, nvlink_latency_us: float) -> float:
    """Seconds of one all-to-all phase (dispatch or combine) of one MoE layer.

    ``tokens``: the step's tokens on the whole replica of ``gpus`` GPUs;
    ``nvlink_eta`` and ``nvlink_latency_us``: the NVLink efficiency and
    floor measured for peer-to-peer collectives (the custom all-reduce's).
    """
    if ep <= 1 or tokens <= 0:
        return 0.0
    ic = gpu.interconnect
    sent = tokens / gpus * topk * hidden * bytes_per_value       # copies leaving one GPU if all were remote
    per_domain = ep * min(ic.max_tp, gpus) // gpus                # ep ranks sharing one NVLink domain
    near = sent * (per_domain - 1) / ep
    far = sent * (ep - per_domain) / ep
    t = near / (gpu.group_bandwidth_gb_s(per_domain) * 1e9 * nvlink_eta)
    latency = nvlink_latency_us
    if far > 0:
        if ic.scale_out_gb_s is None:
            raise LlmsimError(f"ep={ep} over {gpus} GPUs spans several NVLink domains of {gpu.name}, whose "
                              "profile has no interconnect.scale_out_gb_s for the all-to-all between them")
        t = max(t, far / (ic.scale_out_gb_s * 1e9))
        latency = max(latency, ic.scale_out_latency_us)
    return latency * _US + t
