"""One oracle evaluation of a scenario: step time with breakdown, throughput, memory, energy.

``evaluate_one(scenario)`` returns the contract's ``evaluate --json`` keys (SI units).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from deepflow.config.specs import DesignDeviceSpec, GemmSpec, LstmSpec, Scenario, TransformerSpec
from deepflow.errors import DeepflowError
from deepflow.oracle.hardware import device_caps, device_summary
from deepflow.oracle.network import NetworkModel
from deepflow.oracle.workloads.gemm import gemm_step
from deepflow.oracle.workloads.lstm import lstm_step
from deepflow.oracle.workloads.transformer import transformer_columns, transformer_step

__all__ = ["average_power_W", "evaluate_one", "network_model"]


def network_model(scenario: Scenario, scale_up_Bps: float = 0.0,
                  scale_out_Bps: float = 0.0) -> NetworkModel:  # fmt: skip
    """The scenario's network; a design-mode device's own link bandwidths override the preset's."""
    return NetworkModel.from_spec(
        scenario.system.network,
        scenario.system.devices_per_node,
        scale_up_bandwidth_Bps=scale_up_Bps or None,
        scale_out_bandwidth_Bps=scale_out_Bps or None,
    )


#: Breakdown components during which the device's matrix units and memory are busy; the rest
#: (exposed communication, pipeline bubbles) leaves the device waiting near idle power.
_BUSY = ("compute", "gemm", "attention", "elementwise", "recompute", "optimizer",
         "weight_update", "forward_compute", "backward_compute")  # fmt: skip


def average_power_W(peak_power_W: float, idle_fraction: float,
                    breakdown_s: dict[str, float], step_time_s: float) -> float:  # fmt: skip
    """Average device power over a step by activity.

    P = P_idle + (P_peak − P_idle) × busy / step, with P_peak the TDP (spec mode) or the
    derived draw (design mode), P_idle = idle_power_fraction × P_peak (calibration data), and
    busy the compute and memory-bound parts of the breakdown; communication waits and pipeline
    bubbles count as idle (technology-facts §6.1: P = P_const + P_static + Σ P_dyn).
    """
    busy = sum(v for k, v in breakdown_s.items() if k in _BUSY)
    share = min(busy / step_time_s, 1.0) if step_time_s > 0 else 0.0
    idle = idle_fraction * peak_power_W
    return idle + (peak_power_W - idle) * share


def evaluate_one(scenario: Scenario) -> dict[str, Any]:
    """Evaluate one scenario.

    Returns:
        The contract keys: ``step_time_s``, ``tokens_per_s``, ``samples_per_s``,
        ``model_flops_per_step``, ``mfu``, ``memory_per_device_B``, ``memory_capacity_B``,
        ``memory_excess_B``, ``feasible``, ``breakdown_s`` (sums to ``step_time_s``),
        ``device`` (``peak_flops``, ``hbm_bandwidth_Bps``, ``area_mm2``, ``power_W``),
        ``system_power_W`` and ``energy_per_step_J`` (every device at its activity-weighted
        average power, :func:`average_power_W`, for the whole step).

    Raises:
        DeepflowError: a workload kind this oracle does not evaluate yet.
    """
    system, workload, mapping = scenario.system, scenario.workload, scenario.mapping
    caps = device_caps(system.device, workload.precision)
    net = network_model(scenario, caps.scale_up_bandwidth_Bps, caps.scale_out_bandwidth_Bps)
    model = workload.model
    if isinstance(model, GemmSpec):
        result = gemm_step(caps, net, model, mapping)
    elif isinstance(model, LstmSpec):
        result = lstm_step(caps, net, model, mapping, workload.global_batch_size)
    elif isinstance(model, TransformerSpec):
        columns = transformer_columns(model, mapping, workload.global_batch_size)
        batch = transformer_step(caps, net, columns)
        result = {
            k: (float(np.asarray(val)[0]) if not isinstance(val, dict)
                else {n: float(np.asarray(t)[0]) for n, t in val.items()})
            for k, val in batch.items()
        }  # fmt: skip
    else:  # pragma: no cover - the loader admits no other kind
        raise DeepflowError(f"evaluate does not model {model.kind} workloads.")
    summary = device_summary(system.device)
    step = result["step_time_s"]
    devices = system.num_devices
    capacity = caps.hbm_capacity_B
    memory = result["memory_per_device_B"]
    peak_power = float(summary["power_W"])
    power = average_power_W(peak_power, caps.idle_power_fraction, result["breakdown_s"], step)
    return {
        "step_time_s": step,
        "tokens_per_s": result["tokens_per_step"] / step,
        "samples_per_s": result["samples_per_step"] / step,
        "model_flops_per_step": result["model_flops_per_step"],
        "mfu": result["model_flops_per_step"] / (step * devices * caps.peak_flops),
        "memory_per_device_B": memory,
        "memory_capacity_B": capacity,
        "memory_excess_B": memory - capacity,
        "feasible": bool(memory <= capacity),
        "breakdown_s": result["breakdown_s"],
        "device": {
            "name": system.device.name,
            "mode": "design" if isinstance(system.device, DesignDeviceSpec) else "spec",
            "peak_flops": caps.peak_flops,
            "hbm_bandwidth_Bps": caps.hbm_bandwidth_Bps,
            "area_mm2": float(summary["area_mm2"]),
            "power_W": peak_power,
            "average_power_W": power,
        },
        "num_devices": devices,
        "system_power_W": power * devices,
        "energy_per_step_J": power * devices * step,
    }
