"""What a run draws from the grid: GPU power, the rest of the node, the building, the carbon.

The ``llmsim.energy`` block of results.json, built from what the engines
already counted (no per-token guess of its own):

* **GPU power.** A provisioned GPU (ready, starting, warm or draining: what
  the bill counts) draws its profile's ``power.idle_w``. While its replica
  iterates it draws more, in proportion to how hard the iterations drive its
  two roofs::

      P = idle_w + (tdp_w − idle_w) · a,    a = min(1, u_compute + u_memory)

  ``u_compute`` is the FLOPs the replica ran over the FLOP/s its GEMMs
  reach (the datasheet peak × the calibrated GEMM ``eta_compute``) × its
  busy seconds: 2 × active parameters per token processed, the numerator
  ``compute_utilization`` uses (attention FLOPs left out). ``u_memory`` is
  the HBM bytes it moved over the bandwidth its kernels stream at (HBM ×
  the GEMM ``eta_memory``) × busy seconds: every iteration reads the
  weights once and the KV cache its sequences hold (the KV blocks held,
  time-averaged over the busy time). The calibrated efficiencies are what
  the kernels reach running flat out, at the board's power limit, so a
  long prefill and a large decode batch streaming HBM both sit near TDP,
  while the per-iteration CPU overhead, small batches and
  collectives lower ``a``. ``a`` is capped at 1: the board's power limit
  (a GPU that would need more slows its clocks, which the calibration's
  efficiencies already carry). The model is linear in activity, the
  common first-order model of GPU power; it counts a byte-bound roof as
  drawing as much as a FLOP-bound one, where measured memory-bound decode
  draws somewhat less (Patel et al., Splitwise, ISCA 2024), so a
  decode-heavy fleet's figure is an upper estimate. MoE weights are counted
  whole per iteration (an upper bound at small batches).
* **Node.** CPUs, host DRAM, NICs and fans: ``node_overhead`` × the GPU
  energy. Default 0.43, Google's measured host CPU and DRAM energy against
  its accelerators' serving Gemini (0.06 against 0.14 Wh per median prompt;
  Elsworth et al., "Measuring the environmental impact of delivering AI at
  Google scale", arXiv:2508.15734, 2025).
* **Facility.** × ``pue`` (cooling, power conversion). Default 1.56, the
  average annual PUE of the Uptime Institute Global Data Center Survey 2024;
  hyperscale fleets report ~1.1 (Google 1.09 in 2024).
* **Carbon.** facility kWh × the grid's intensity (g CO2e per kWh), a named
  grid of :data:`GRIDS` or ``grid_g_per_kwh``; default ``world``.
* **Month.** The window's energy scales to a month by the rule that scales
  the bill (``cost.monthly``, :class:`simulator.metrics.monthly.MonthRule`):
  each pool's energy per GPU-hour stands in for its price.
* ``joules_per_output_token``: the window's facility energy over the
  output tokens of finished requests (prefill energy included: it is what
  an output token costs); ``joules_per_token`` divides by input + output.

Where the scenario gives ``energy.usd_per_kwh`` (a GPU-hour price that
excludes power: owned or colocated hardware), ``llmsim.cost.power`` prices
the facility energy and ``monthly_total_usd`` adds it to the GPU bill.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Optional, Sequence

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from ..fields import block, leaf

__all__ = ["GRIDS", "DEFAULT_GRID", "DEFAULT_PUE", "DEFAULT_NODE_OVERHEAD", "EnergySpec", "PoolPower",
           "activity", "energy_block", "power_cost"]

#: Lifecycle carbon intensity of electricity generation in 2023, g CO2e per
#: kWh: Ember Yearly Electricity Data via Our World in Data
#: (ourworldindata.org/grapher/carbon-intensity-electricity); world: Ember,
#: Global Electricity Review 2024 (481). A contract for clean power or a
#: local grid's hourly figure belongs in ``grid_g_per_kwh``.
GRIDS: dict[str, float] = {
    "world": 481.0,
    "us": 369.0,
    "canada": 170.0,
    "brazil": 98.0,
    "france": 56.0,
    "germany": 381.0,
    "ireland": 291.0,
    "finland": 79.0,
    "norway": 30.0,
    "india": 713.0,
    "china": 582.0,
    "australia": 549.0,
}
GRID_SOURCE = "Ember Yearly Electricity Data, 2023 (via ourworldindata.org/grapher/carbon-intensity-electricity)"
DEFAULT_GRID = "world"
DEFAULT_PUE = 1.56
DEFAULT_NODE_OVERHEAD = 0.43


#: The dirtiest grid accepted (lignite burns ~1,100 g CO2e/kWh) and the dearest kWh: past them a figure
#: is a slip of units or digits, and 1e308 would make the month's energy infinite.
MAX_G_PER_KWH = 10_000.0
MAX_USD_PER_KWH = 100.0


#: A facility's PUE above this is no facility (twice the worst surveyed, ~2.5).
MAX_PUE = 5.0


class EnergySpec(BaseModel):
    """The scenario's ``energy`` block: what surrounds the GPUs, the grid, the price of a kWh."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    pue: float = Field(default=DEFAULT_PUE, allow_inf_nan=False,
                       description="facility energy / IT energy (1 to 5); default 1.56, the Uptime Institute 2024 "
                                   "survey's average")
    node_overhead: float = Field(default=DEFAULT_NODE_OVERHEAD, ge=0, le=5, allow_inf_nan=False,
                                 description="the rest of the server (CPUs, DRAM, NICs, fans) as a fraction of the "
                                             "GPUs' energy; default 0.43 (Google 2025, host CPU+DRAM vs accelerators)")
    grid: Optional[str] = Field(default=None, description=f"a named grid ({', '.join(GRIDS)}); default "
                                                          f"{DEFAULT_GRID} unless grid_g_per_kwh is given")
    grid_g_per_kwh: Optional[float] = Field(default=None, ge=0, le=MAX_G_PER_KWH, allow_inf_nan=False,
                                            description="the grid's carbon intensity, g CO2e/kWh (instead of grid)")
    usd_per_kwh: Optional[float] = Field(default=None, ge=0, le=MAX_USD_PER_KWH, allow_inf_nan=False,
                                         description="price of a facility kWh where the GPU-hour price excludes "
                                                     "power: adds llmsim.cost.power")

    @field_validator("pue")
    @classmethod
    def _pue_at_least_one(cls, v: float) -> float:
        if v < 1.0:
            raise ValueError("PUE is the facility's energy over its IT equipment's, so at least 1")
        if v > MAX_PUE:
            raise ValueError(f"expected a PUE of at most {MAX_PUE:g}: the least efficient data centres surveyed "
                             f"run about 2.5 (Uptime Institute, 2007), so a larger value is a typo")
        return v

    @field_validator("grid")
    @classmethod
    def _known_grid(cls, v: Optional[str]) -> Optional[str]:
        if v is not None and v not in GRIDS:
            raise ValueError(f"unknown grid {v!r}; expected one of {', '.join(GRIDS)}, "
                             f"or give grid_g_per_kwh (g CO2e per kWh)")
        return v

    @model_validator(mode="after")
    def _one_grid(self) -> "EnergySpec":
        if self.grid is not None and self.grid_g_per_kwh is not None:
            raise ValueError("give grid (a named grid) or grid_g_per_kwh (a number), not both")
        return self

    def carbon(self) -> tuple[float, str]:
        """(g CO2e per kWh, where it comes from)."""
        if self.grid_g_per_kwh is not None:
            return self.grid_g_per_kwh, "scenario (energy.grid_g_per_kwh)"
        name = self.grid or DEFAULT_GRID
        return GRIDS[name], f"{name}: {GRID_SOURCE}"


def activity(flops: float, hbm_bytes: float, busy_s: float, peak_flops: float,
             hbm_bandwidth: float) -> tuple[float, float, float]:
    """(u_compute, u_memory, a) of ``busy_s`` seconds that ran ``flops`` and
    moved ``hbm_bytes`` on a device of ``peak_flops`` FLOP/s and
    ``hbm_bandwidth`` B/s; a = min(1, u_compute + u_memory), 0 without busy time."""
    if busy_s <= 0:
        return 0.0, 0.0, 0.0
    uc = flops / (peak_flops * busy_s)
    um = hbm_bytes / (hbm_bandwidth * busy_s)
    return uc, um, min(1.0, uc + um)


@dataclass(frozen=True)
class PoolPower:
    """One pool's GPU power over the window: provisioned and busy GPU-seconds,
    the busy time's activity, the board's idle and TDP."""

    name: str
    gpu: str
    idle_w: float
    tdp_w: float
    gpu_seconds: float          # provisioned (billed) GPU-seconds
    busy_gpu_seconds: float     # of which iterating
    u_compute: float
    u_memory: float

    @property
    def activity(self) -> float:
        return min(1.0, self.u_compute + self.u_memory)

    @property
    def busy_w(self) -> float:
        """One GPU's draw while its replica iterates."""
        return self.idle_w + (self.tdp_w - self.idle_w) * self.activity

    @property
    def gpu_joules(self) -> float:
        busy = min(self.busy_gpu_seconds, self.gpu_seconds)
        return self.idle_w * self.gpu_seconds + (self.busy_w - self.idle_w) * busy

    def as_dict(self, node_overhead: float, pue: float) -> dict[str, Any]:
        gs = self.gpu_seconds
        return {"gpu": self.gpu, "idle_w": self.idle_w, "tdp_w": self.tdp_w,
                "busy_fraction": self.busy_gpu_seconds / gs if gs else None,
                "compute_activity": self.u_compute, "memory_activity": self.u_memory,
                "activity": self.activity, "busy_w_per_gpu": self.busy_w,
                "mean_w_per_gpu": self.gpu_joules / gs if gs else None,
                "gpu_kwh": self.gpu_joules / 3.6e6,
                "facility_kwh": self.gpu_joules * (1 + node_overhead) * pue / 3.6e6}


def _per(num: float, den: float) -> Optional[float]:
    return num / den if den else None


_POOL = {
    "gpu": leaf("text", "the pool's GPU"), "idle_w": leaf("W", "the profile's idle power per GPU"),
    "tdp_w": leaf("W", "the profile's board power per GPU"),
    "busy_fraction": leaf("fraction", "GPU-seconds iterating / GPU-seconds billed"),
    "compute_activity": leaf("fraction", "FLOPs / (busy time × attainable FLOP/s)"),
    "memory_activity": leaf("fraction", "HBM bytes / (busy time × attainable bandwidth)"),
    "activity": leaf("fraction", "min(1, compute + memory activity)"),
    "busy_w_per_gpu": leaf("W", "idle_w + (tdp_w − idle_w) × activity: a GPU's draw while iterating"),
    "mean_w_per_gpu": leaf("W", "a billed GPU's mean draw over the window"),
    "gpu_kwh": leaf("kWh", "the pool's GPUs over the window"),
    "facility_kwh": leaf("kWh", "gpu_kwh × (1 + node_overhead) × pue"),
}

#: ``llmsim.energy`` (the model is the module docstring's): every key but
#: ``why_none`` is written only when the power is known.
_KNOWN = {
    "kwh_per_month": ("kWh/month", "facility energy extrapolated to a month as the bill is"),
    "co2e_kg_per_month": ("kg CO2e/month", "kwh_per_month × the grid's intensity"),
    "joules_per_output_token": ("J/token", "facility energy / output tokens of finished requests"),
    "joules_per_token": ("J/token", "facility energy / (input + output tokens)"),
    "mean_facility_kw": ("kW", "facility energy / the window"),
    "window_kwh": ("kWh", "facility energy over the window: GPUs, node, × PUE"),
    "window_co2e_kg": ("kg CO2e", "window_kwh × the grid's intensity"),
    "gpu_kwh": ("kWh", "the GPUs' energy"),
    "node_kwh": ("kWh", "the rest of the node: gpu_kwh × node_overhead"),
    "facility_overhead_kwh": ("kWh", "cooling and power delivery: what the PUE adds"),
    "pue": ("ratio", "energy.pue"),
    "node_overhead": ("ratio", "energy.node_overhead: node power beyond the GPUs / the GPUs'"),
    "grid_g_co2e_per_kwh": ("g CO2e/kWh", "the grid's carbon intensity"),
    "grid_source": ("text", "where the intensity comes from"),
    "model": ("text", "the power model in one line"),
}
FIELDS = {
    "why_none": leaf("text", "why there are no energy figures (a GPU profile without a power block)",
                     when="a pool's GPU profile has no power block (then the only key)"),
    **{key: leaf(unit, meaning, when="power known") for key, (unit, meaning) in _KNOWN.items()},
    "pools": block("per pool", {"<pool>": block("one pool's power", _POOL)}, when="power known"),
}

#: ``llmsim.cost.power``: the energy's bill.
POWER_FIELDS = {
    "usd_per_kwh": leaf("USD/kWh", "energy.usd_per_kwh"),
    "window_usd": leaf("USD", "window_kwh × usd_per_kwh"),
    "monthly_usd": leaf("USD/month", "kwh_per_month × usd_per_kwh"),
    "monthly_total_usd": leaf("USD/month", "the GPU-hour bill's monthly_usd + this monthly_usd"),
    "basis": leaf("text", "what the power bill counts"),
}


def energy_block(pools: Sequence[PoolPower], spec: EnergySpec, window_s: float, output_tokens: int,
                 input_tokens: int, monthly_kwh: Optional[float]) -> dict[str, Any]:
    """The ``llmsim.energy`` block (definitions in the module docstring);
    ``monthly_kwh`` is the window's facility kWh extrapolated by the bill's rule."""
    gpu_j = sum(p.gpu_joules for p in pools)
    node_j = gpu_j * spec.node_overhead
    facility_j = (gpu_j + node_j) * spec.pue
    g_per_kwh, grid_source = spec.carbon()
    window_kwh = facility_j / 3.6e6
    return {
        "kwh_per_month": monthly_kwh,
        "co2e_kg_per_month": None if monthly_kwh is None else monthly_kwh * g_per_kwh / 1e3,
        "joules_per_output_token": _per(facility_j, output_tokens),
        "joules_per_token": _per(facility_j, output_tokens + input_tokens),
        "mean_facility_kw": _per(facility_j, window_s * 1e3),
        "window_kwh": window_kwh,
        "window_co2e_kg": window_kwh * g_per_kwh / 1e3,
        "gpu_kwh": gpu_j / 3.6e6,
        "node_kwh": node_j / 3.6e6,
        "facility_overhead_kwh": (facility_j - gpu_j - node_j) / 3.6e6,
        "pue": spec.pue,
        "node_overhead": spec.node_overhead,
        "grid_g_co2e_per_kwh": g_per_kwh,
        "grid_source": grid_source,
        "model": "per GPU: idle_w + (tdp_w - idle_w) x min(1, compute + memory activity) while iterating, "
                 "idle_w while provisioned; x (1 + node_overhead) x pue",
        "pools": {p.name: p.as_dict(spec.node_overhead, spec.pue) for p in pools},
    }


def monthly_kwh(pools: Sequence[PoolPower], bills: Sequence, spec: EnergySpec, window_s: float,
                month) -> Optional[float]:
    """The window's facility kWh as a month, by ``month`` (the bill's
    :class:`~simulator.metrics.monthly.MonthRule`): each pool billed at its
    facility kWh per GPU-hour instead of dollars (``bills``: the pools'
    :class:`~simulator.metrics.cost.PoolBilling`, same order as ``pools``)."""
    scale = (1 + spec.node_overhead) * spec.pue / 3.6e6
    priced = [replace(b, usd_per_gpu_hour=_per(p.gpu_joules * scale, b.gpu_seconds / 3600.0) or 0.0)
              for p, b in zip(pools, bills)]
    window = sum(p.gpu_joules for p in pools) * scale
    return month.apply(priced, window, window_s)["monthly_usd"]


def power_cost(spec: EnergySpec, energy: dict[str, Any], cost: dict[str, Any]) -> Optional[dict[str, Any]]:
    """``llmsim.cost.power``: the facility energy at ``energy.usd_per_kwh``
    (None without a price: the GPU-hour price is taken to include power)."""
    if spec.usd_per_kwh is None:
        return None
    month = energy["kwh_per_month"]
    monthly = None if month is None else month * spec.usd_per_kwh
    gpu_month = cost.get("monthly_usd")
    return {"usd_per_kwh": spec.usd_per_kwh, "window_usd": energy["window_kwh"] * spec.usd_per_kwh,
            "monthly_usd": monthly,
            "monthly_total_usd": None if monthly is None or gpu_month is None else gpu_month + monthly,
            "basis": "facility energy (GPUs, node, x PUE) at energy.usd_per_kwh, on top of the GPU-hour bill"}
