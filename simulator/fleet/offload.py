"""A pool's KV offload tiers sized from its GPU's host side and its engine keys.

The tiers themselves live in the engine (:mod:`simulator.engine.kv_tiers`);
this is where ``engine.kv_offload`` meets the hardware profile: capacities
per replica in KV blocks, and the bandwidth a reload sees. A figure the
profile does not state and the scenario does not give is refused, as is a
capacity beyond what the replica's GPUs' share of the server has.
"""
from __future__ import annotations

from typing import Optional

from ..engine.config import EngineConfig
from ..engine.kv_tiers import OffloadPlan
from ..errors import LlmsimError
from ..memory import MemoryPlan
from ..profiles.hardware import HardwareProfile


#: Host memory per GPU no server exceeds (the largest 8-GPU hosts hold 8-12 TB of DRAM): the bound on a
#: host tier where the GPU profile states no server figure.
MAX_HOST_GB_PER_GPU = 2048


def plan_offload(e: EngineConfig, gpu: HardwareProfile, mem: MemoryPlan, tp: int, gpus: int,
                 where: str, source: object = None, window_share: float = 0.0) -> Optional[OffloadPlan]:
    """The offload tiers of one replica of ``gpus`` GPUs whose sequences each
    live on ``tp`` of them (None: no ``kv_offload``). ``window_share``: the
    sliding-window layers' bytes per full-attention byte
    (:func:`simulator.hybrid_kv.window_share`), whose windows a reload copies
    where the pool holds them apart (``mem.windows``); there the tiers' capacities
    count the windows' chunks they store beside each block
    (:attr:`simulator.hybrid_kv.SlidingGroups.stored_share`).

    A block's KV is spread over the tp GPUs holding its sequence (MLA's
    latent copied on each, as in HBM), and each copies its part over its
    own PCIe link, so a host reload runs at tp × the per-GPU link; a disk
    reload at tp × the per-GPU NVMe read, capped by those links."""
    o = e.kv_offload
    if o is None:
        return None
    key = f"{where}.engine.kv_offload"

    def figure(given: Optional[float], profile: Optional[float], name: str, field: str) -> float:
        if given is not None:
            return given
        if profile is None:
            raise LlmsimError(f"the GPU profile {gpu.name} states no {field}; give {name} in kv_offload",
                              source=source, key_path=f"{key}.{name}")
        return profile

    block_bytes = mem.kv_bytes_per_token * mem.block_size
    # a tier holds a block's sliding-window chunks beside it where vLLM's pool shares them
    stored = block_bytes * (1 + (0.0 if mem.windows is None else mem.windows.stored_share))
    tiers: list[tuple[str, int, float]] = []
    link = figure(o.host_gb_per_s, gpu.host_link_gb_s, "host_gb_per_s", "host_link_gb_s") * 1e9 * tp
    host_share = None if gpu.host_memory_gb_per_gpu is None else gpu.host_memory_gb_per_gpu * gpus
    host_gb = figure(o.host_gb, host_share, "host_gb", "host_memory_gb_per_gpu")
    if host_share is None and host_gb > MAX_HOST_GB_PER_GPU * gpus:
        # no server figure to hold it to: at least not to more DRAM than any server has (a petabyte passed)
        raise LlmsimError(f"host_gb {host_gb:g} is more than {MAX_HOST_GB_PER_GPU:,} GB of host memory per GPU, more "
                          f"than any server holds; the GPU profile {gpu.name} states no host_memory_gb_per_gpu to "
                          f"hold it to (add the server's figure to the profile)", source=source,
                          key_path=f"{key}.host_gb")
    if host_share is not None and host_gb > host_share:
        raise LlmsimError(f"host_gb {host_gb:g} exceeds the {host_share:g} GB of host memory of a replica's {gpus} × "
                          f"{gpu.name} ({gpu.host_memory_gb_per_gpu:g} GB per GPU in its profile)",
                          source=source, key_path=f"{key}.host_gb")
    if host_gb > 0:
        tiers.append(("host", int(host_gb * 1e9 // stored), link))
    if o.disk_gb > 0:
        disk_share = None if gpu.nvme_gb_per_gpu is None else gpu.nvme_gb_per_gpu * gpus
        if disk_share is None:
            raise LlmsimError(f"the GPU profile {gpu.name} states no nvme_gb_per_gpu, so a disk tier cannot be "
                              f"held to the server's drives; add it to the profile", source=source,
                              key_path=f"{key}.disk_gb")
        if o.disk_gb > disk_share:
            raise LlmsimError(f"disk_gb {o.disk_gb:g} exceeds the {disk_share:g} GB of local NVMe of a replica's "
                              f"{gpus} × {gpu.name} ({gpu.nvme_gb_per_gpu:g} GB per GPU in its profile)",
                              source=source, key_path=f"{key}.disk_gb")
        read = figure(o.disk_gb_per_s, gpu.nvme_read_gb_s_per_gpu, "disk_gb_per_s", "nvme_read_gb_s_per_gpu")
        tiers.append(("disk", int(o.disk_gb * 1e9 // stored), min(read * 1e9 * tp, link)))
    return OffloadPlan(block_bytes, tuple(tiers), 0.0 if mem.windows is None else block_bytes * window_share)
