"""Energy of one training step summed per operation (docs/model.md §A6.3).

E = Σ_devices [ F·e_FLOP + Σ_levels B_level·8·e_bit,level + Σ_links B_link·8·e_bit,link
+ P_static·t_step ]: the per-FLOP and per-bit energies the technology layer derives (design
mode, :func:`deepflow.oracle.hardware.derive`) or the technology presets of the device's node
and HBM generation (spec mode), times activity counts of the step. The counts come from the
step's result (FLOPs, breakdown seconds) and the GEMM tile model's traffic per FLOP:

* F: model FLOPs per device plus the recompute seconds at the sustained matrix rate;
* register file: the MMA operand reads, 3p/32 B per FLOP (``kernels._RF_OPERANDS_PER_OUTPUT_K``);
* L1 (shared memory -> registers): p·(1/warp_m + 1/warp_n)/2 B per FLOP (§B4.2);
* L2 -> SMs: p·(1/128 + 1/128)/2 B per FLOP (128 × 128 CTA tiles);
* HBM: GEMM operands re-read per wave block of √SMs·128 outputs a side, p/(√SMs·128) B per
  FLOP, plus the memory-bound parts of the breakdown streamed at η_HBM·BW_HBM;
* links: the exposed communication seconds at the level's η·BW (data-parallel and gradient
  synchronisation on scale-out when there are several nodes, the rest on scale-up);
  overlapped communication is not in the breakdown, so link energy is a lower bound;
* static: max(idle fraction × peak power, SRAM + DRAM static power) for the whole step.

The activity-weighted power × time (:func:`deepflow.oracle.evaluate.average_power_W`) stays
as the cross-check ``energy_per_step_J``.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache
from typing import Any

import numpy as np

from deepflow.config.specs import DeviceSpec, DramTechSpec, LinkTechSpec, LogicTechSpec
from deepflow.oracle.hardware import SRAM_LEVELS, DeviceCaps, spec_logic_technology
from deepflow.oracle.network import NetworkModel

__all__ = ["ENERGY_PARTS", "derived_energies", "ops_energy_J", "spec_energies"]

#: Parts of the per-operation energy, in the order of ``energy_ops_<part>_J``.
ENERGY_PARTS = ("compute", "register_file", "l1", "l2", "hbm", "scale_up", "scale_out", "static")
#: Breakdown parts that stream from HBM (memory-bound kernels).
_STREAMING = ("elementwise", "fsdp_copies", "grad_accumulation", "optimizer", "weight_update")
#: Breakdown parts that are communication; those in _SCALE_OUT go over scale-out links when
#: the system has several nodes.
_COMM_WORDS = ("comm", "sync", "p2p")
_SCALE_OUT = ("data_parallel", "gradient_sync", "embedding_sync")
#: Spec-mode link presets (configs/technologies/) standing for NVLink-class scale-up and
#: optical scale-out ports (docs/model.md §A4.2).
_SPEC_LINKS = ("nvlink-serdes", "optical-cpo")


def derived_energies(d: Mapping[str, Any], idle_fraction: float) -> dict[str, Any]:
    """Per-operation energies and static power of design-mode devices (:func:`derive` output;
    scalars or arrays). A link class the design does not have takes the spec-mode preset."""
    up, out = _spec_link_energies()
    static = sum(d[f"{lvl}_static_power_W"] for lvl in SRAM_LEVELS) + d["dram_static_power_W"]
    return {
        "flop_J": d["energy_per_flop_J"],
        "register_file_bit_J": d["register_file_energy_per_bit_J"],
        "l1_bit_J": d["l1_energy_per_bit_J"],
        "l2_bit_J": d["l2_energy_per_bit_J"],
        "hbm_bit_J": d["dram_energy_per_bit_J"],
        "scale_up_bit_J": np.where(d["scale_up_num_wires"] > 0, d["scale_up_energy_per_bit_J"], up),
        "scale_out_bit_J": np.where(
            d["scale_out_num_wires"] > 0, d["scale_out_energy_per_bit_J"], out
        ),
        "static_W": np.maximum(idle_fraction * d["power_W"], static),
    }


@lru_cache(maxsize=64)
def _spec_link_energies() -> tuple[float, float]:
    from deepflow.config.loader import load_technology

    links = [load_technology(name) for name in _SPEC_LINKS]
    assert all(isinstance(link, LinkTechSpec) for link in links)
    return links[0].energy_per_bit_J, links[1].energy_per_bit_J  # type: ignore[union-attr]


@lru_cache(maxsize=64)
def _spec_technologies(node_nm: float, hbm: str) -> tuple[LogicTechSpec, DramTechSpec]:
    from deepflow.config.loader import load_technology

    dram = load_technology(hbm if hbm != "hbm4" else "hbm3e")  # no HBM4 preset yet
    assert isinstance(dram, DramTechSpec)
    return spec_logic_technology(node_nm), dram


def spec_energies(device: DeviceSpec, idle_fraction: float) -> dict[str, float]:
    """Per-operation energies of a spec-mode device: the logic preset of the smallest node at
    or above its process node (4 nm -> n5), its HBM generation's preset, NVLink-class SerDes
    and co-packaged optics; static power = idle fraction × TDP (docs/model.md §A6.1)."""
    logic, dram = _spec_technologies(float(device.process_node_nm), device.hbm_technology)
    up, out = _spec_link_energies()
    sram = logic.sram
    return {
        # nominal-voltage energy per FLOP of the node's MCU (§B3.2)
        "flop_J": logic.mcu_nominal_power_W / (logic.mcu_flops_per_cycle * logic.nominal_freq_Hz),
        "register_file_bit_J": sram.register_file.energy_per_bit_J,
        "l1_bit_J": sram.l1.energy_per_bit_J,
        "l2_bit_J": sram.l2.energy_per_bit_J,
        "hbm_bit_J": dram.energy_per_bit_J,
        "scale_up_bit_J": up,
        "scale_out_bit_J": out,
        "static_W": idle_fraction * device.tdp_W,
    }


def ops_energy_J(
    caps: DeviceCaps,
    energies: Mapping[str, Any],
    breakdown_s: Mapping[str, Any],
    *,
    net: NetworkModel,
    step_time_s: Any,
    model_flops_per_step: Any,
    num_devices: int,
    num_nodes: int,
) -> dict[str, Any]:
    """Energy of one step for the whole system by part (J; floats or arrays of n).

    Returns:
        ``{part: J}`` for :data:`ENERGY_PARTS`; their sum is the per-operation energy.
    """
    p = caps.bytes_per_element
    sustained = caps.peak_flops * caps.gemm_efficiency * caps.training_sustained_fraction
    flops = model_flops_per_step / num_devices + breakdown_s.get("recompute", 0.0) * sustained
    sms = np.asarray(caps.num_sms, dtype=float)
    streamed_s = sum(breakdown_s.get(k, 0.0) for k in _STREAMING)
    hbm_B = flops * p / (np.sqrt(sms) * 128.0) + streamed_s * caps.hbm_efficiency * (
        caps.hbm_bandwidth_Bps
    )
    traffic_B = {
        "register_file": flops * p * 3.0 / 32.0,
        "l1": flops * p * (1.0 / caps.warp_tile_m + 1.0 / caps.warp_tile_n) / 2.0,
        "l2": flops * p / 128.0,
        "hbm": hbm_B,
    }
    comm_up = comm_out = 0.0
    for name, seconds in breakdown_s.items():
        if not any(w in name for w in _COMM_WORDS):
            continue
        if num_nodes > 1 and any(w in name for w in _SCALE_OUT):
            comm_out = comm_out + seconds
        else:
            comm_up = comm_up + seconds
    up_Bps = np.asarray(net.scale_up_bandwidth_Bps) * np.asarray(net.scale_up_efficiency)
    out_Bps = np.asarray(net.scale_out_bandwidth_Bps) * np.asarray(net.scale_out_efficiency)
    traffic_B["scale_up"] = comm_up * up_Bps
    traffic_B["scale_out"] = comm_out * out_Bps
    per_device = {"compute": flops * energies["flop_J"]}
    for part, nbytes in traffic_B.items():
        per_device[part] = nbytes * 8.0 * energies[f"{part}_bit_J"]
    per_device["static"] = energies["static_W"] * step_time_s
    return {part: per_device[part] * num_devices for part in ENERGY_PARTS}
