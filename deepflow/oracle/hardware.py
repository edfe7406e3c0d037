"""Technology + budgets -> device capabilities, area, power, energy and cost (design mode).

CrossFlow's derivation (docs/model.md §B3.2–3.5) with its bugs fixed (§B8 item 6): the
voltage floor keeps power within budget, DRAM above V_max clamps, and budget sums are
checked as constraint columns (≤ 0 feasible) instead of being ignored.

The derivation is pure and vectorised: :func:`derive` maps a table of n designs (a dict of
equal-length arrays, columns :data:`DESIGN_COLUMNS`) to a table of n results. A single
design is a batch of one (:func:`derive_one`), and a batch equals a loop of singles.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np
from numpy.typing import NDArray

from deepflow.config.calibration import Calibration, KernelCalibration, current_calibration
from deepflow.config.specs import (
    AREA_PARTS,
    ATTENTION_KERNELS,
    PEAK_PRECISIONS,
    PERIMETER_PARTS,
    POWER_PARTS,
    DesignDeviceSpec,
    DeviceSpec,
    LinkTechSpec,
    LogicTechSpec,
    SramTechSpec,
)
from deepflow.errors import ConfigError
from deepflow.oracle.feasibility import DESIGN_CONSTRAINTS, feasible
from deepflow.oracle.technology import (
    RETICLE_LIMIT_mm2,
    die_cost_usd,
    dies_per_wafer,
    negative_binomial_yield,
    operating_point,
)

__all__ = [
    "BYTES_PER_ELEMENT",
    "DESIGN_COLUMNS",
    "SRAM_LEVELS",
    "DeviceCaps",
    "derive",
    "derive_one",
    "derived_caps_fields",
    "design_table",
    "device_caps",
    "device_gemm_efficiency",
    "device_summary",
    "power_limit_clock_ratio",
    "power_limit_matrix_ratio",
    "spec_logic_technology",
]

F = NDArray[np.float64]
SRAM_LEVELS = ("l2", "l1", "register_file")
LINK_CLASSES = ("scale_up", "scale_out")
_SRAM_FIELDS = (
    "area_per_bit_mm2",
    "energy_per_bit_J",
    "static_power_per_bit_W",
    "bank_capacity_B",
    "overhead_fraction",
    "controller_area_per_bank_per_sm_mm2",
)
_LINK_FIELDS = (
    "energy_per_bit_J",
    "wires_per_mm",
    "area_per_wire_mm2",
    "nominal_rate_bps",
    "nominal_voltage_V",
    "threshold_voltage_V",
    "margin_voltage_V",
    "latency_s",
    "efficiency",
)
_DRAM_FIELDS = (
    "stack_capacity_B",
    "pins_per_stack",
    "nominal_pin_rate_bps",
    "energy_per_bit_J",
    "static_power_per_bit_W",
    "stack_footprint_mm2",
    "controller_area_mm2",
    "nominal_voltage_V",
    "threshold_voltage_V",
    "margin_voltage_V",
    "max_voltage_V",
    "wires_per_mm",
    "latency_s",
    "cost_usd_per_GiB",
)
_CORE_FIELDS = (
    "process_node_nm",
    "mcu_area_mm2",
    "mcu_flops_per_cycle",
    "mcu_nominal_power_W",
    "mcus_per_sm",
    "nominal_freq_Hz",
    "nominal_voltage_V",
    "threshold_voltage_V",
    "margin_voltage_V",
    "wafer_cost_usd",
    "defect_density_per_cm2",
    "yield_alpha",
)

#: Input columns of :func:`derive` (SI units, one array each).
DESIGN_COLUMNS: tuple[str, ...] = (
    *(f"core_{f}" for f in _CORE_FIELDS),
    *(f"ratio_{p}" for p in PEAK_PRECISIONS),
    *(f"{lvl}_{f}" for lvl in SRAM_LEVELS for f in _SRAM_FIELDS),
    *(f"dram_{f}" for f in _DRAM_FIELDS),
    *(f"{c}_{f}" for c in LINK_CLASSES for f in _LINK_FIELDS),
    *(f"{c}_neighbours" for c in LINK_CLASSES),
    "die_area_mm2",
    "package_area_mm2",
    "tdp_W",
    *(f"area_{p}_mm2" for p in AREA_PARTS),
    *(f"power_{p}_W" for p in POWER_PARTS),
    *(f"perimeter_{p}" for p in PERIMETER_PARTS),
)

# A link class a design does not have: zero wires, zero power, finite placeholders (no NaN).
_NO_LINK = {
    "energy_per_bit_J": 1e-12,
    "wires_per_mm": 0.0,
    "area_per_wire_mm2": 1.0,
    "nominal_rate_bps": 1.0,
    "nominal_voltage_V": 1.0,
    "threshold_voltage_V": 0.25,
    "margin_voltage_V": 0.45,
    "latency_s": 0.0,
    "efficiency": 1.0,
}


def _design_row(spec: DesignDeviceSpec) -> dict[str, float]:
    tech, dram = spec.technology, spec.dram_technology
    row: dict[str, float] = {f"core_{f}": float(getattr(tech, f)) for f in _CORE_FIELDS}
    for p in PEAK_PRECISIONS:
        row[f"ratio_{p}"] = float(tech.precision_ratio.get(p, 0.0))
    for lvl in SRAM_LEVELS:
        sram: SramTechSpec = getattr(tech.sram, lvl)
        for f in _SRAM_FIELDS:
            row[f"{lvl}_{f}"] = float(getattr(sram, f))
    for f in _DRAM_FIELDS:
        row[f"dram_{f}"] = float(getattr(dram, f))
    for c in LINK_CLASSES:
        link: LinkTechSpec | None = getattr(spec, f"{c}_link")
        for f in _LINK_FIELDS:
            row[f"{c}_{f}"] = float(getattr(link, f)) if link is not None else _NO_LINK[f]
        row[f"{c}_neighbours"] = float(getattr(spec, f"{c}_neighbours"))
    row["die_area_mm2"] = spec.die_area_mm2
    row["package_area_mm2"] = spec.package_area_mm2
    row["tdp_W"] = spec.tdp_W
    for p in AREA_PARTS:
        row[f"area_{p}_mm2"] = float(getattr(spec.area_mm2, p))
    for p in POWER_PARTS:
        row[f"power_{p}_W"] = float(getattr(spec.power_W, p))
    for p in PERIMETER_PARTS:
        row[f"perimeter_{p}"] = float(getattr(spec.perimeter_fraction, p))
    return row


def design_table(specs: Sequence[DesignDeviceSpec]) -> dict[str, F]:
    """Stack design-mode device specs into the column table :func:`derive` takes."""
    rows = [_design_row(s) for s in specs]
    return {c: np.array([r[c] for r in rows], dtype=float) for c in DESIGN_COLUMNS}


def _floor(x: F) -> F:
    """Floor that forgives float noise (435/1.0875 = 399.99999… counts as 400)."""
    return np.floor(x * (1.0 + 1e-12) + 1e-9)


def _sram_level(t: Mapping[str, F], lvl: str, num_sms: F) -> dict[str, F]:
    """One SRAM level: banks in the area budget, bandwidth from the power budget (§B3.4)."""
    cells = 1.0 - t[f"{lvl}_overhead_fraction"]
    bank_bits = t[f"{lvl}_bank_capacity_B"] * 8.0
    bank_area = bank_bits * t[f"{lvl}_area_per_bit_mm2"]
    per_bank = bank_area + cells * num_sms * t[f"{lvl}_controller_area_per_bank_per_sm_mm2"]
    banks = _floor(cells * t[f"area_{lvl}_mm2"] / per_bank)
    capacity = banks * t[f"{lvl}_bank_capacity_B"]
    static = t[f"{lvl}_static_power_per_bit_W"] * 8.0 * capacity
    budget = t[f"power_{lvl}_W"]
    dynamic = np.maximum(budget - static, 0.0)
    energy = t[f"{lvl}_energy_per_bit_J"]
    return {
        f"{lvl}_num_banks": banks,
        f"{lvl}_capacity_B": capacity,
        f"{lvl}_bandwidth_Bps": dynamic / (8.0 * energy),
        f"{lvl}_power_W": np.minimum(budget, static + dynamic),
        f"{lvl}_static_power_W": static,
        f"{lvl}_energy_per_bit_J": energy,
        f"{lvl}_power_shortfall_W": np.maximum(static - budget, 0.0),
    }


def _link_class(t: Mapping[str, F], c: str, perimeter_mm: F) -> dict[str, F]:
    """Wires in the area and die-edge budgets, rate from the power budget (§B3.5)."""
    by_area = np.divide(t[f"area_{c}_mm2"], t[f"{c}_area_per_wire_mm2"])
    by_edge = t[f"perimeter_{c}"] * perimeter_mm * t[f"{c}_wires_per_mm"]
    wires = _floor(np.minimum(by_area, by_edge))
    nominal = t[f"{c}_energy_per_bit_J"] * wires * t[f"{c}_nominal_rate_bps"]
    v, f, p = operating_point(
        t[f"power_{c}_W"],
        nominal,
        t[f"{c}_nominal_rate_bps"],
        t[f"{c}_nominal_voltage_V"],
        t[f"{c}_threshold_voltage_V"],
        t[f"{c}_margin_voltage_V"],
    )
    bandwidth = wires * f * t[f"{c}_efficiency"] / 8.0
    return {
        f"{c}_num_wires": wires,
        f"{c}_voltage_V": v,
        f"{c}_rate_bps": f,
        f"{c}_bandwidth_Bps": bandwidth,
        f"{c}_p2p_bandwidth_Bps": bandwidth / t[f"{c}_neighbours"],
        f"{c}_latency_s": t[f"{c}_latency_s"],
        f"{c}_power_W": p,
        f"{c}_energy_per_bit_J": np.where(
            wires > 0, t[f"{c}_energy_per_bit_J"] * (v / t[f"{c}_nominal_voltage_V"]) ** 2, 0.0
        ),
    }


def _total(parts: Iterable[F]) -> F:
    return np.asarray(np.sum(np.stack(list(parts)), axis=0), dtype=float)


def derive(table: Mapping[str, Any]) -> dict[str, F]:
    """Derive n devices from n (technology, budget) rows.

    Args:
        table: one array (or scalar, broadcast) per name in :data:`DESIGN_COLUMNS`, SI units.

    Returns:
        Result columns, each of shape (n,): capabilities (``peak_flops_<precision>``,
        ``clock_Hz``, ``num_mcus``, ``num_sms``, ``<level>_capacity_B``/``_bandwidth_Bps``,
        ``hbm_*``, ``<link>_bandwidth_Bps``), area and power by component, energy per FLOP
        and per bit at each level, cost, and constraint columns ``area_excess_mm2``,
        ``power_excess_W``, ``perimeter_excess``, ``reticle_excess_mm2`` (≤ 0 feasible) with
        ``feasible``.

    Raises:
        ConfigError: a column is missing.
    """
    missing = [c for c in DESIGN_COLUMNS if c not in table]
    if missing:
        raise ConfigError(f"design table is missing columns: {', '.join(missing)}.")
    with np.errstate(all="ignore"):  # a degenerate budget (0 W, 0 mm²) gives NaN/inf: data
        return _derive(table)


def _derive(table: Mapping[str, Any]) -> dict[str, F]:
    t = dict(
        zip(
            DESIGN_COLUMNS,
            np.broadcast_arrays(
                *(np.atleast_1d(np.asarray(table[c], dtype=float)) for c in DESIGN_COLUMNS)
            ),
            strict=True,
        )
    )
    out: dict[str, F] = {}
    die = t["die_area_mm2"]
    perimeter = 4.0 * np.sqrt(die)  # square die (docs/model.md §B3.5)
    out.update(_core(t))
    for lvl in SRAM_LEVELS:  # (§B3.4)
        out.update(_sram_level(t, lvl, out["num_sms"]))
    out.update(_hbm(t, die, perimeter))
    for c in LINK_CLASSES:  # (§B3.5)
        out.update(_link_class(t, c, perimeter))
    out.update(_budgets_and_cost(t, out, die, perimeter))
    return out


def _core(t: Mapping[str, F]) -> dict[str, F]:
    """The core (§B3.2): MCUs from the area budget, clock from the power budget."""
    mcus = _floor(t["area_core_mm2"] / t["core_mcu_area_mm2"])
    sms = _floor(mcus / t["core_mcus_per_sm"])
    nominal = t["core_mcu_nominal_power_W"] * mcus
    v, clock, p_core = operating_point(
        t["power_core_W"],
        nominal,
        t["core_nominal_freq_Hz"],
        t["core_nominal_voltage_V"],
        t["core_threshold_voltage_V"],
        t["core_margin_voltage_V"],
    )
    peak16 = t["core_mcu_flops_per_cycle"] * mcus * clock
    out = {
        "num_mcus": mcus,
        "num_sms": sms,
        "core_voltage_V": v,
        "clock_Hz": clock,
        "core_power_W": p_core,
    }
    for p in PEAK_PRECISIONS:
        out[f"peak_flops_{p}"] = peak16 * t[f"ratio_{p}"]
    e_flop = t["core_mcu_nominal_power_W"] / (
        t["core_mcu_flops_per_cycle"] * t["core_nominal_freq_Hz"]
    )
    out["energy_per_flop_J"] = e_flop * (v / t["core_nominal_voltage_V"]) ** 2  # fp16, §B3.2
    return out


def _hbm(t: Mapping[str, F], die: F, perimeter: F) -> dict[str, F]:
    """HBM (§B3.3): stacks fit the package and the controller area; wires fit the die edge."""
    by_package = _floor(
        np.maximum(t["package_area_mm2"] - die, 0.0) / t["dram_stack_footprint_mm2"]
    )
    by_ctrl = _floor(t["area_memory_controller_mm2"] / t["dram_controller_area_mm2"])
    stacks = np.minimum(by_package, by_ctrl)
    edge_wires = _floor(perimeter * t["perimeter_dram"] * t["dram_wires_per_mm"])
    wires = np.minimum(edge_wires, t["dram_pins_per_stack"] * stacks)
    capacity = stacks * t["dram_stack_capacity_B"]
    static = t["dram_static_power_per_bit_W"] * 8.0 * capacity
    dram_nominal = t["dram_energy_per_bit_J"] * wires * t["dram_nominal_pin_rate_bps"]
    dv, df, dp = operating_point(
        np.maximum(t["power_dram_W"] - static, 0.0),
        dram_nominal,
        t["dram_nominal_pin_rate_bps"],
        t["dram_nominal_voltage_V"],
        t["dram_threshold_voltage_V"],
        t["dram_margin_voltage_V"],
        t["dram_max_voltage_V"],
    )
    return {
        "hbm_num_stacks": stacks,
        "hbm_num_wires": wires,
        "hbm_capacity_B": capacity,
        "dram_voltage_V": dv,
        "dram_pin_rate_bps": df,
        "hbm_bandwidth_Bps": wires * df / 8.0,
        "hbm_latency_s": t["dram_latency_s"],
        "dram_power_W": np.minimum(t["power_dram_W"], dp + static),
        "dram_static_power_W": static,
        "dram_energy_per_bit_J": t["dram_energy_per_bit_J"]
        * (dv / t["dram_nominal_voltage_V"]) ** 2,
        "hbm_wire_limited": (edge_wires < t["dram_pins_per_stack"] * stacks).astype(float),
    }


def _budgets_and_cost(
    t: Mapping[str, F], out: Mapping[str, F], die: F, perimeter: F
) -> dict[str, F]:
    """Area, power, cost and the constraint columns (≤ 0 feasible) of derived parts ``out``."""
    die_budget = _total(t[f"area_{p}_mm2"] for p in AREA_PARTS)
    power_budget = _total(t[f"power_{p}_W"] for p in POWER_PARTS)
    sram_power = sum(out[f"{lvl}_power_W"] for lvl in SRAM_LEVELS)
    used_power = (
        out["core_power_W"]
        + out["dram_power_W"]
        + sram_power
        + out["scale_up_power_W"]
        + out["scale_out_power_W"]
    )
    stacks, capacity = out["hbm_num_stacks"], out["hbm_capacity_B"]
    package = die + stacks * t["dram_stack_footprint_mm2"]
    res: dict[str, F] = {
        "die_area_mm2": die,
        "die_area_allocated_mm2": die_budget,
        "package_area_mm2": package,
        "power_W": used_power,
        "power_allocated_W": power_budget,
        "tdp_W": t["tdp_W"],
        "perimeter_mm": perimeter,
        "area_excess_mm2": np.maximum(die_budget - die, package - t["package_area_mm2"]),
        "power_excess_W": power_budget - t["tdp_W"],
        "perimeter_excess": _total(t[f"perimeter_{p}"] for p in PERIMETER_PARTS) - 1.0,
        "reticle_excess_mm2": die - RETICLE_LIMIT_mm2,
    }
    res["feasible"] = np.asarray(feasible({c: res[c] for c in DESIGN_CONSTRAINTS}), dtype=float)
    res["dies_per_wafer"] = dies_per_wafer(die)
    res["die_yield"] = negative_binomial_yield(
        die, t["core_defect_density_per_cm2"], t["core_yield_alpha"]
    )
    res["die_cost_usd"] = die_cost_usd(
        die, t["core_wafer_cost_usd"], t["core_defect_density_per_cm2"], t["core_yield_alpha"]
    )
    res["hbm_cost_usd"] = capacity / 2**30 * t["dram_cost_usd_per_GiB"]
    res["device_cost_usd"] = res["die_cost_usd"] + res["hbm_cost_usd"]
    return res


def derive_one(spec: DesignDeviceSpec) -> dict[str, float]:
    """Derive one design-mode device (a batch of one)."""
    return {k: float(v[0]) for k, v in derive(design_table([spec])).items()}


def device_summary(device: DeviceSpec | DesignDeviceSpec) -> dict[str, Any]:
    """What a device can do, in SI units, for either mode (used by ``show`` and ``evaluate``).

    Design mode: derived by :func:`derive_one`. Spec mode: the datasheet.
    """
    if isinstance(device, DesignDeviceSpec):
        d = derive_one(device)
        peak = {p: d[f"peak_flops_{p}"] for p in PEAK_PRECISIONS if d[f"peak_flops_{p}"] > 0}
        return {
            "mode": "design",
            "peak_flops": peak,
            "clock_Hz": d["clock_Hz"],
            "core_voltage_V": d["core_voltage_V"],
            "num_mcus": int(d["num_mcus"]),
            "num_sms": int(d["num_sms"]),
            "l2_capacity_B": d["l2_capacity_B"],
            "l2_bandwidth_Bps": d["l2_bandwidth_Bps"],
            "l1_capacity_B": d["l1_capacity_B"],
            "l1_bandwidth_Bps": d["l1_bandwidth_Bps"],
            "register_file_capacity_B": d["register_file_capacity_B"],
            "register_file_bandwidth_Bps": d["register_file_bandwidth_Bps"],
            "hbm_num_stacks": int(d["hbm_num_stacks"]),
            "hbm_capacity_B": d["hbm_capacity_B"],
            "hbm_bandwidth_Bps": d["hbm_bandwidth_Bps"],
            "dram_voltage_V": d["dram_voltage_V"],
            "dram_pin_rate_bps": d["dram_pin_rate_bps"],
            "scale_up_bandwidth_Bps": d["scale_up_bandwidth_Bps"],
            "scale_out_bandwidth_Bps": d["scale_out_bandwidth_Bps"],
            "scale_out_num_wires": int(d["scale_out_num_wires"]),
            "area_mm2": d["die_area_mm2"],
            "package_area_mm2": d["package_area_mm2"],
            "power_W": d["power_W"],
            "power_by_component_W": {
                "core": d["core_power_W"],
                "dram": d["dram_power_W"],
                "l2": d["l2_power_W"],
                "l1": d["l1_power_W"],
                "register_file": d["register_file_power_W"],
                "scale_up": d["scale_up_power_W"],
                "scale_out": d["scale_out_power_W"],
            },
            "energy_per_flop_J": d["energy_per_flop_J"],
            "energy_per_bit_J": {
                "register_file": d["register_file_energy_per_bit_J"],
                "l1": d["l1_energy_per_bit_J"],
                "l2": d["l2_energy_per_bit_J"],
                "hbm": d["dram_energy_per_bit_J"],
                "scale_up": d["scale_up_energy_per_bit_J"],
                "scale_out": d["scale_out_energy_per_bit_J"],
            },
            "die_cost_usd": d["die_cost_usd"],
            "device_cost_usd": d["device_cost_usd"],
            "constraints": {
                "area_excess_mm2": d["area_excess_mm2"],
                "power_excess_W": d["power_excess_W"],
                "perimeter_excess": d["perimeter_excess"],
                "reticle_excess_mm2": d["reticle_excess_mm2"],
                "feasible": bool(d["feasible"]),
            },
        }
    return {
        "mode": "spec",
        "peak_flops": dict(device.peak_flops),
        "clock_Hz": device.clock_Hz,
        "num_sms": device.num_sms,
        "l2_capacity_B": device.l2_capacity_B,
        "hbm_num_stacks": device.hbm_num_stacks,
        "hbm_capacity_B": device.hbm_capacity_B,
        "hbm_bandwidth_Bps": device.hbm_bandwidth_Bps,
        "area_mm2": device.die_area_mm2,
        "power_W": device.power_W,
    }


#: Bytes per stored element for each training precision (tf32 is stored as fp32).
BYTES_PER_ELEMENT = {
    "fp64": 8.0,
    "fp32": 4.0,
    "tf32": 4.0,
    "bf16": 2.0,
    "fp16": 2.0,
    "fp8": 1.0,
    "fp4": 0.5,
    "int8": 1.0,
}


#: Host <-> device copy rates of a PCIe Gen5 x16 GPU, per direction (NVIDIA nvbandwidth on
#: Azure ND H100 v5: "Host to Device | 51", "Device to Host | 52" GB/s, https://github.com/
#: Azure/AI-benchmarking-guide/blob/f350e7e65b82cfcb9220b32b582bc34342d9c1a6/Azure%20Results/
#: ND_H100_v5_results.md): the devices without a host link of their own (docs/model.md §C2.3).
PCIE5_HOST_TO_DEVICE_Bps = 51e9
PCIE5_DEVICE_TO_HOST_Bps = 52e9


@dataclass(frozen=True, kw_only=True)
class DeviceCaps:
    """What the performance model needs from one device at one precision (SI units).

    Built by :func:`device_caps` from either device mode; hashable, so kernel results can be
    memoised per (device, shape).
    """

    name: str
    family: str
    precision: str
    bytes_per_element: float
    peak_flops: float  # dense matrix-unit FLOP/s at ``precision``
    peak_flops_16bit: float  # dense matrix-unit FLOP/s at 16 bits (FP8 training's attention)
    vector_flops: float  # non-matrix FP32 FLOP/s (elementwise work)
    num_sms: float
    clock_Hz: float
    hbm_bandwidth_Bps: float
    hbm_capacity_B: float
    hbm_latency_s: float
    l2_capacity_B: float
    l2_bandwidth_Bps: float
    l1_capacity_per_sm_B: float
    l1_bandwidth_Bps: float  # aggregate over all SMs
    register_file_capacity_per_sm_B: float
    register_file_bandwidth_Bps: float  # aggregate over all SMs (inf: not a limit)
    gemm_efficiency: float
    hbm_efficiency: float
    kernel_launch_s: float
    warp_tile_m: float = 64.0
    warp_tile_n: float = 64.0
    cluster_size: float = 1.0
    training_sustained_fraction: float = 1.0
    idle_power_fraction: float = 0.09
    attention_efficiency: float = 0.6  # FlashAttention-2-class kernels
    attention_efficiency_cudnn: float = 0.6
    attention_efficiency_fa3: float = 0.6
    attention_efficiency_trtllm: float = 0.6
    attention_efficiency_triton: float = 0.6
    attention_efficiency_mla: float = 0.0  # a latent decode kernel's (0: the server kernel's)
    # a fused-attention query block's fixed work, in key-block iterations (docs/model.md §C6.2)
    attention_block_overhead: float = 0.0
    attention_block_overhead_trtllm: float = 0.0  # TensorRT-LLM's context FMHA's (§D1)
    grouped_gemm_efficiency: float = 1.0  # MoE grouped GEMM's matrix rate / a dense GEMM's
    gemm_overlap_exponent: float = math.inf  # a serving GEMM's roofline p (inf: max of the two)
    # the p of a dense serving GEMM without block scales (grouped and block-scaled ones take
    # gemm_overlap_exponent; docs/model.md §D1)
    gemm_overlap_exponent_dense: float = math.inf
    gemm_pipeline_round_trip_s: float = 0.0  # a GEMM pipeline's load round trip (0: no floor)
    accumulators_in_l1: float = 0.0  # 1: GEMM accumulators live in L1 (TPU VMEM), not in RF
    # host <-> device copies (activation offload; docs/model.md §C2.3): PCIe Gen5 x16 unless
    # the device states its own link
    host_to_device_Bps: float = PCIE5_HOST_TO_DEVICE_Bps
    device_to_host_Bps: float = PCIE5_DEVICE_TO_HOST_Bps
    scale_up_bandwidth_Bps: float = 0.0  # the design's own links (0: use the network preset)
    scale_out_bandwidth_Bps: float = 0.0
    scale_up_latency_s: float = 0.0  # the design's own link latency (with its bandwidth)
    scale_out_latency_s: float = 0.0

    @property
    def attention_efficiencies(self) -> tuple[float, ...]:
        """The attention efficiency of each fused kernel, in ``ATTENTION_KERNELS`` order
        (FlashAttention-2, cuDNN, FlashAttention-3, TensorRT-LLM's, pre-MLIR Triton's;
        docs/model.md §C6.2)."""
        return (self.attention_efficiency, self.attention_efficiency_cudnn,
                self.attention_efficiency_fa3, self.attention_efficiency_trtllm,
                self.attention_efficiency_triton)  # fmt: skip


#: The DeviceCaps field of each fused attention kernel (``attention_kernel``'s choices).
_ATTENTION_FIELDS = {
    kernel: "attention_efficiency" if kernel == "fa2" else f"attention_efficiency_{kernel}"
    for kernel in ATTENTION_KERNELS
}

# DRAM access latency without a better source (docs/model.md §B2.3, [DF-CFG] 100 ns).
_SPEC_HBM_LATENCY_s = 100e-9


def _calibration_fields(cal: KernelCalibration, precision: str) -> dict[str, float]:
    """DeviceCaps fields that come from the family's kernel calibration."""
    return {
        "gemm_efficiency": cal.gemm_efficiency_for(precision),
        "hbm_efficiency": cal.hbm_efficiency,
        "kernel_launch_s": cal.kernel_launch_s,
        "warp_tile_m": cal.warp_tile_m,
        "warp_tile_n": cal.warp_tile_n,
        "cluster_size": cal.cluster_size,
        "training_sustained_fraction": cal.training_sustained_fraction,
        "idle_power_fraction": cal.idle_power_fraction,
        "attention_efficiency": cal.attention_efficiency,
        # a kernel without a microbenchmark of the family runs as its FlashAttention-2 class
        "attention_efficiency_cudnn": cal.attention_efficiency_cudnn or cal.attention_efficiency,
        "attention_efficiency_fa3": cal.attention_efficiency_fa3 or cal.attention_efficiency,
        "attention_efficiency_trtllm": cal.attention_efficiency_trtllm or cal.attention_efficiency,
        "attention_efficiency_triton": cal.attention_efficiency_triton or cal.attention_efficiency,
        "attention_efficiency_mla": cal.attention_efficiency_mla,
        "attention_block_overhead": cal.attention_block_overhead,
        "attention_block_overhead_trtllm": cal.attention_block_overhead_trtllm,
        # FP4 grouped GEMMs have their own rate where the family has a table of them
        "grouped_gemm_efficiency": (cal.grouped_gemm_efficiency_fp4 if precision == "fp4" else 0.0)
        or cal.grouped_gemm_efficiency,
        "gemm_overlap_exponent": cal.gemm_overlap_exponent,
        "gemm_overlap_exponent_dense": cal.gemm_overlap_exponent_dense or cal.gemm_overlap_exponent,
        "gemm_pipeline_round_trip_s": cal.gemm_pipeline_round_trip_s,
        "accumulators_in_l1": float(cal.accumulator_store == "l1"),
    }


def device_gemm_efficiency(device: DeviceSpec | DesignDeviceSpec, precision: str) -> float | None:
    """The GEMM efficiency measured on this very device at ``precision`` (``gemm_efficiency``
    in its preset: its own matmul microbenchmark, fitted by ``benchmarks/fit_gemm.py``, whose
    family fit leaves those rows out), the two 16-bit formats standing in for each other (the
    same matrix units); None where the device has none (design mode: never), so the family's
    applies (docs/model.md §C6.1)."""
    own = getattr(device, "gemm_efficiency", None) or {}
    for p in (precision, *{"fp16": ("bf16",), "bf16": ("fp16",)}.get(precision, ())):
        if p in own:
            return float(own[p])
    return None


def derived_caps_fields(d: Mapping[str, Any], precision: str) -> dict[str, Any]:
    """DeviceCaps fields of design-mode devices from :func:`derive` output (scalars or arrays)."""
    sms = np.maximum(d["num_sms"], 1.0)
    peak = d[f"peak_flops_{precision}"]
    return {
        "peak_flops": peak,
        "peak_flops_16bit": d["peak_flops_bf16"],
        "vector_flops": np.where(d["peak_flops_fp32"] > 0, d["peak_flops_fp32"], peak / 16.0),
        "num_sms": sms,
        "clock_Hz": d["clock_Hz"],
        "hbm_bandwidth_Bps": d["hbm_bandwidth_Bps"],
        "hbm_capacity_B": d["hbm_capacity_B"],
        "hbm_latency_s": d["hbm_latency_s"],
        "l2_capacity_B": d["l2_capacity_B"],
        "l2_bandwidth_Bps": d["l2_bandwidth_Bps"],
        "l1_capacity_per_sm_B": d["l1_capacity_B"] / sms,
        "l1_bandwidth_Bps": d["l1_bandwidth_Bps"],
        "register_file_capacity_per_sm_B": d["register_file_capacity_B"] / sms,
        "register_file_bandwidth_Bps": d["register_file_bandwidth_Bps"],
        "scale_up_bandwidth_Bps": d["scale_up_bandwidth_Bps"],
        "scale_out_bandwidth_Bps": d["scale_out_bandwidth_Bps"],
        "scale_up_latency_s": d["scale_up_latency_s"],
        "scale_out_latency_s": d["scale_out_latency_s"],
    }


#: Logic technology presets by process node (nm), for spec-mode devices.
_LOGIC_PRESETS = ((2, "n2"), (3, "n3"), (5, "n5"), (7, "n7"), (12, "n12"))


@lru_cache(maxsize=64)
def spec_logic_technology(node_nm: float) -> LogicTechSpec:
    """The logic preset of a spec-mode device's node: the smallest preset node at or above it
    (4 nm -> ``n5``; docs/model.md §A6.3)."""
    from deepflow.config.loader import load_technology

    name = next((n for nm, n in _LOGIC_PRESETS if nm >= node_nm), _LOGIC_PRESETS[-1][1])
    logic = load_technology(name)
    assert isinstance(logic, LogicTechSpec), f"{name} is a logic preset"
    return logic


def power_limit_clock_ratio(device: DeviceSpec, idle_power_fraction: float) -> float:
    """Sustained clock under an enforced power limit, relative to the clock at the TDP.

    A device busy with dense matrix work runs at its power limit (the calibrated GEMM
    efficiency is measured there). Below the TDP the firmware lowers voltage and clock until
    the dynamic power fits: the dynamic budget shrinks by r = (limit − static) / (TDP −
    static), static = idle fraction × TDP (§A6.1), and the clock follows the node's V–f–P law
    (:func:`deepflow.oracle.technology.operating_point`, alpha-power law with α = 2, the
    voltage floor V_t + V_m; docs/model.md §A6.2). HBM keeps its own clock. 1.0 without a
    limit below the TDP.
    """
    limit = device.power_W
    if limit >= device.tdp_W:
        return 1.0
    static = idle_power_fraction * device.tdp_W
    ratio = max(limit - static, 0.0) / (device.tdp_W - static)
    logic = spec_logic_technology(float(device.process_node_nm))
    _, freq, _ = operating_point(
        ratio, 1.0, 1.0, logic.nominal_voltage_V, logic.threshold_voltage_V,
        logic.margin_voltage_V,
    )  # fmt: skip
    return float(freq)


def power_limit_matrix_ratio(
    device: DeviceSpec, idle_power_fraction: float, full_clock_power: float
) -> float:
    """Sustained matrix-unit rate under an enforced power limit, relative to the rate at the
    TDP (docs/model.md §A6.2).

    A large GEMM at the TDP's clock draws ``full_clock_power`` × TDP (above 1: it is already
    power-bound at the TDP). Below that power the clock sits on the voltage floor, where the
    dynamic power is linear in the clock (§B3.1: f = (P_b / P_n)·f_n·(V_n / V_min)²), so the
    rate scales with the dynamic power, limit − static, static = idle fraction × TDP; at the
    TDP it is 1. ``full_clock_power`` per family and precision is fitted to GEMM
    microbenchmarks run under a power limit (``benchmarks/fit_power.py``).
    """
    limit = device.power_W
    if limit >= device.tdp_W:
        return 1.0
    static = idle_power_fraction * device.tdp_W
    full = min(full_clock_power, 1.0) * device.tdp_W
    return float(min(1.0, max(limit - static, 0.0) / max(full - static, 1e-9)))


def device_caps(
    device: DeviceSpec | DesignDeviceSpec, precision: str, *, calibration: Calibration | None = None
) -> DeviceCaps:
    """Capabilities of ``device`` at ``precision`` with its family's kernel calibration.

    Spec mode: the datasheet, plus L2/L1 bandwidth per clock from the family calibration.
    Design mode: derived from technology and budgets (:func:`derive_one`). ``calibration``
    defaults to the files in use (:func:`deepflow.config.calibration.current_calibration`).

    Raises:
        ConfigError: the device has no peak at ``precision``.
    """
    if precision not in device.precisions:
        raise ConfigError(
            f"device {device.name} has no {precision} peak (it lists: "
            f"{', '.join(device.precisions)})."
        )
    cal = (calibration or current_calibration()).kernel(device.family)
    common: dict[str, Any] = {
        "name": device.name,
        "family": device.family,
        "precision": precision,
        "bytes_per_element": BYTES_PER_ELEMENT[precision],
        **_calibration_fields(cal, precision),
    }
    own = device_gemm_efficiency(device, precision)
    if own is not None:  # the device's own matmul microbenchmark, not its family's
        common["gemm_efficiency"] = own
    for kernel, factor in (getattr(device, "attention_speedup", None) or {}).items():
        # the device's attention over its family's, both measured on one software release
        field = _ATTENTION_FIELDS[kernel]
        common[field] = min(common[field] * factor, 1.0)
    if isinstance(device, DesignDeviceSpec):
        derived = derived_caps_fields(derive_one(device), precision)
        scalars: dict[str, Any] = {k: float(v) for k, v in derived.items()}
        return DeviceCaps(**common, **scalars)
    # under a power limit the on-chip clock scales the vector rates and the SRAM bandwidths,
    # and the matrix units run at the rate their power allows (1.0 at the TDP; §A6.2)
    clock = power_limit_clock_ratio(device, cal.idle_power_fraction)
    matrix = power_limit_matrix_ratio(device, cal.idle_power_fraction,
                                      cal.gemm_full_clock_power_for(precision))  # fmt: skip
    matrix16 = power_limit_matrix_ratio(device, cal.idle_power_fraction,
                                        cal.gemm_full_clock_power_for("bf16"))  # fmt: skip
    at_tdp = device.peak_flops[precision]
    peak16 = device.peak_flops.get("bf16", device.peak_flops.get("fp16", at_tdp))
    return DeviceCaps(
        **common,
        peak_flops=at_tdp * matrix,
        peak_flops_16bit=peak16 * matrix16,
        vector_flops=device.peak_flops.get("fp32", at_tdp / 16.0) * clock,
        num_sms=float(device.num_sms),
        clock_Hz=device.clock_Hz * clock,
        hbm_bandwidth_Bps=device.hbm_bandwidth_Bps,
        hbm_capacity_B=device.hbm_capacity_B,
        hbm_latency_s=_SPEC_HBM_LATENCY_s,
        l2_capacity_B=device.l2_capacity_B,
        l2_bandwidth_Bps=cal.l2_bytes_per_clock * device.clock_Hz * clock,
        l1_capacity_per_sm_B=device.l1_capacity_per_sm_B,
        l1_bandwidth_Bps=cal.l1_bytes_per_clock_per_sm * device.num_sms * device.clock_Hz * clock,
        register_file_capacity_per_sm_B=device.register_file_per_sm_B,
        # Datasheets do not publish register-file bandwidth; the calibrated GEMM efficiency
        # of a shipped part already includes it (docs/model.md §C6.1a).
        register_file_bandwidth_Bps=math.inf,
        host_to_device_Bps=device.host_to_device_Bps or PCIE5_HOST_TO_DEVICE_Bps,
        device_to_host_Bps=device.device_to_host_Bps or PCIE5_DEVICE_TO_HOST_Bps,
    )
