"""One oracle evaluation of a scenario: step time with breakdown, throughput, memory, energy.

``evaluate_one(scenario)`` returns the contract's ``evaluate --json`` keys (SI units).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from functools import lru_cache
from typing import Any

import numpy as np
from numpy.typing import NDArray

from deepflow.config.calibration import Calibration, current_calibration
from deepflow.config.specs import (
    RANK_ORDERS,
    DesignDeviceSpec,
    NetworkSpec,
    Scenario,
    TransformerSpec,
)
from deepflow.errors import ConfigError
from deepflow.oracle.energy import ENERGY_PARTS, derived_energies, ops_energy_J, spec_energies
from deepflow.oracle.feasibility import (
    DESIGN_CONSTRAINTS,
    INVALID_OUTPUT,
    feasible,
    invalid_output,
    violated,
)
from deepflow.oracle.hardware import (
    DESIGN_COLUMNS,
    DeviceCaps,
    derive,
    derive_one,
    derived_caps_fields,
    design_table,
    device_caps,
    device_summary,
)
from deepflow.oracle.kernels import sram_excess_B
from deepflow.oracle.network import NetworkModel, group_placement
from deepflow.oracle.parallelism import group_strides
from deepflow.oracle.workloads import StepResult, Workload, workload_for

__all__ = [
    "average_power_W",
    "device_network",
    "evaluate_one",
    "evaluate_table",
    "network_model",
    "stage_memory_B",
]

F = NDArray[np.float64]


def network_model(
    scenario: Scenario,
    scale_up_Bps: float = 0.0,
    scale_out_Bps: float = 0.0,
    *,
    scale_up_latency_s: float | None = None,
    scale_out_latency_s: float | None = None,
    calibration: Calibration | None = None,
) -> NetworkModel:
    """The scenario's network; a design-mode device's own link bandwidths override the preset's,
    and with them (where given) the links' latencies replace the preset's per-step latency
    (docs/model.md §B3.5). ``calibration`` defaults to the files in use."""
    return _network_model(
        scenario.system.network, scenario.system.devices_per_node, scale_up_Bps, scale_out_Bps,
        scale_up_latency_s if scale_up_Bps else None,
        scale_out_latency_s if scale_out_Bps else None,
        calibration or current_calibration(),
    )  # fmt: skip


def device_network(
    scenario: Scenario, caps: DeviceCaps, *, calibration: Calibration | None = None
) -> NetworkModel:
    """The network of ``scenario`` with the links of a design-mode device ``caps`` (bandwidth
    and latency; spec-mode devices have none and get the preset)."""
    return network_model(
        scenario,
        caps.scale_up_bandwidth_Bps,
        caps.scale_out_bandwidth_Bps,
        scale_up_latency_s=caps.scale_up_latency_s,
        scale_out_latency_s=caps.scale_out_latency_s,
        calibration=calibration,
    )


@lru_cache(maxsize=1024)
def _network_model(
    network: NetworkSpec, devices_per_node: int, scale_up_Bps: float, scale_out_Bps: float,
    scale_up_latency_s: float | None, scale_out_latency_s: float | None, calibration: Calibration,
) -> NetworkModel:  # fmt: skip
    net = NetworkModel.from_spec(
        network,
        devices_per_node,
        scale_up_bandwidth_Bps=scale_up_Bps or None,
        scale_out_bandwidth_Bps=scale_out_Bps or None,
        calibration=calibration.network,
    )
    if scale_up_latency_s is not None:
        net = replace(net, scale_up_latency_s=scale_up_latency_s)
    if scale_out_latency_s is not None:
        net = replace(net, scale_out_latency_s=scale_out_latency_s)
    return net


#: Breakdown components during which the device's matrix units and memory are busy; the rest
#: (exposed communication, pipeline bubbles) leaves the device waiting near idle power.
_BUSY = (
    "compute",
    "gemm",
    "attention",
    "elementwise",
    "recompute",
    "optimizer",
    "weight_update",
    "forward_compute",
    "backward_compute",
    "lm_head",
)


def average_power_W(
    peak_power_W: Any, idle_fraction: float, breakdown_s: Mapping[str, Any], step_time_s: Any
) -> Any:
    """Average device power over a step by activity.

    P = P_idle + (P_peak − P_idle) × busy / step, with P_peak the TDP (spec mode) or the
    derived draw (design mode), P_idle = idle_power_fraction × P_peak (calibration data), and
    busy the compute and memory-bound parts of the breakdown; communication waits and pipeline
    bubbles count as idle (docs/model.md §A6.1: P = P_const + P_static + Σ P_dyn).
    Scalars or equal-length arrays.
    """
    # serving breakdowns name their phase first (prefill_gemm, decode_attention, ...)
    busy = sum(v for k, v in breakdown_s.items() if k in _BUSY or k.split("_", 1)[-1] in _BUSY)
    if isinstance(step_time_s, float) and isinstance(peak_power_W, float):  # one evaluation
        share_one = min(busy / step_time_s, 1.0) if step_time_s > 0 else 0.0  # same IEEE ops
        idle_one = idle_fraction * peak_power_W
        return float(idle_one + (peak_power_W - idle_one) * share_one)
    step = np.asarray(step_time_s, dtype=float)
    share = np.where(step > 0, np.minimum(busy / np.where(step > 0, step, 1.0), 1.0), 0.0)
    idle = idle_fraction * peak_power_W
    power = idle + (peak_power_W - idle) * share
    return float(power) if np.ndim(power) == 0 else power


def evaluate_one(scenario: Scenario, *, calibration: Calibration | None = None) -> dict[str, Any]:
    """Evaluate one scenario (any registered workload kind): row 0 of :func:`evaluate_table`,
    through the kind's scalar fast path.

    Returns:
        The contract keys: ``step_time_s``, ``tokens_per_s``, ``samples_per_s``,
        ``model_flops_per_step``, ``mfu``, ``memory_per_device_B``, ``memory_capacity_B``,
        ``memory_excess_B``, ``sram_excess_B`` (the smallest GEMM tile vs the L1 and register
        file per SM, :func:`deepflow.oracle.kernels.sram_excess_B`), ``feasible`` (every
        constraint holds: :func:`deepflow.oracle.feasibility.feasible`), ``constraints`` (name
        -> value, <= 0 feasible: memory, SRAM, the design budgets as ``show`` reports them,
        ``invalid_output``), ``violated_constraints`` (their names where violated),
        ``breakdown_s`` (sums to ``step_time_s``), ``memory_breakdown_B`` (sums to
        ``memory_per_device_B``; empty for kinds without one),
        ``device`` (``peak_flops``, ``hbm_bandwidth_Bps``, ``area_mm2``, ``power_W``),
        ``system_power_W`` and ``energy_per_step_J`` (every device at its activity-weighted
        average power, :func:`average_power_W`, for the whole step), the per-operation
        energy ``energy_per_step_ops_J`` with its parts ``energy_ops_breakdown_J``
        (:func:`deepflow.oracle.energy.ops_energy_J`; the activity estimate is its
        cross-check); ``framework`` (name, description, behaviours) when the scenario names a
        framework profile; serving adds ``ttft_s``, ``tpot_s``, ``max_concurrency``,
        ``active_batch``, ``tokens_per_J``, ``usd_per_Mtoken``. ``calibration``
        defaults to the files in use (:func:`deepflow.config.calibration.current_calibration`).

    Raises:
        ConfigError: a workload kind no registered workload evaluates.
    """
    system, workload, mapping = scenario.system, scenario.workload, scenario.mapping
    kind = workload_for(workload.model, workload.kind)
    cal = calibration or current_calibration()
    with np.errstate(all="ignore"):  # a degenerate design gives NaN/inf: infeasible data
        caps = device_caps(system.device, workload.precision, calibration=cal)
        net = device_network(scenario, caps, calibration=cal)
        summary = device_summary(system.device)
        peak_power = float(summary["power_W"])
        values = kind.columns(workload, mapping)
        try:
            result = kind.step_one(caps, net, values, calibration=cal)
            out = _outputs(result, caps, peak_power, system.num_devices)
        except ArithmeticError:  # a zero clock or bandwidth: IEEE NaN/inf as in a table
            result = _ieee(Workload.step_one(kind, caps, net, values, calibration=cal))
            out = {k: float(v) for k, v in _outputs(
                result, caps, peak_power, system.num_devices).items()}  # fmt: skip
        sram_excess = float(sram_excess_B(caps))
        device = system.device
        energies = (
            derived_energies(derive_one(device), caps.idle_power_fraction)
            if isinstance(device, DesignDeviceSpec)
            else spec_energies(device, caps.idle_power_fraction)
        )
        ops = ops_energy_J(caps, energies, result.breakdown_s, net=net,
                           step_time_s=result.step_time_s,
                           model_flops_per_step=result.model_flops_per_step,
                           num_devices=system.num_devices, num_nodes=system.num_nodes)  # fmt: skip
    power = out["average_power_W"]
    constraints = {"memory_excess_B": out["memory_excess_B"], "sram_excess_B": sram_excess}
    if "constraints" in summary:  # design mode: the budgets, as ``show`` reports them
        constraints.update({c: summary["constraints"][c] for c in DESIGN_CONSTRAINTS})
    constraints[INVALID_OUTPUT] = invalid_output(out)
    return {
        "step_time_s": out["step_time_s"],
        "tokens_per_s": out["tokens_per_s"],
        "samples_per_s": out["samples_per_s"],
        "model_flops_per_step": out["model_flops_per_step"],
        "mfu": out["mfu"],
        "memory_per_device_B": out["memory_per_device_B"],
        "memory_capacity_B": out["memory_capacity_B"],
        "memory_excess_B": out["memory_excess_B"],
        "sram_excess_B": sram_excess,
        "feasible": feasible(constraints),
        "constraints": constraints,
        "violated_constraints": violated(constraints),
        "breakdown_s": result.breakdown_s,
        "memory_breakdown_B": dict(result.memory_breakdown_B),
        "device": {
            "name": system.device.name,
            "mode": "design" if isinstance(system.device, DesignDeviceSpec) else "spec",
            "peak_flops": caps.peak_flops,
            "hbm_bandwidth_Bps": caps.hbm_bandwidth_Bps,
            "area_mm2": float(summary["area_mm2"]),
            "power_W": peak_power,
            "average_power_W": power,
        },
        "num_devices": system.num_devices,
        "system_power_W": out["system_power_W"],
        "energy_per_step_J": out["energy_per_step_J"],
        "energy_per_step_ops_J": float(sum(ops.values())),
        "energy_ops_breakdown_J": {k: float(v) for k, v in ops.items()},
        **({"framework": _framework_summary(scenario)} if scenario.framework else {}),
        **_placement(scenario),
        **_serving(result, out, summary, workload, system.num_devices),
        **_pools(scenario),
    }


def _pools(scenario: Scenario) -> dict[str, Any]:
    """Disaggregated serving's pools (docs/model.md §D6): replicas and tensor parallelism of
    the prefill and of the decode pool; nothing for a co-located mapping."""
    m = scenario.mapping
    if scenario.workload.kind != "inference" or m.prefill_replicas == 0:
        return {}
    return {"pools": {"prefill_replicas": m.prefill_replicas,
                      "prefill_tensor_parallel": m.prefill_tensor_parallel or m.tensor_parallel,
                      "decode_replicas": m.data_parallel - m.prefill_replicas,
                      "decode_tensor_parallel": m.tensor_parallel}}  # fmt: skip


#: The transformer's parallel dimensions (mapping key, symbol in the rank order).
_GROUPS = (("tensor_parallel", "tp"), ("context_parallel", "cp"), ("data_parallel", "dp"),
           ("pipeline_parallel", "pp"))  # fmt: skip


def _placement(scenario: Scenario) -> dict[str, Any]:
    """Where a training step's parallel groups sit (docs/model.md §C3): the rank order,
    the grid axes, and per group of more than one rank its size, stride, members per node and
    nodes spanned (:func:`deepflow.oracle.network.group_placement`)."""
    if scenario.workload.kind != "training":  # serving places its groups itself (§D1)
        return {}
    mapping = scenario.mapping
    degrees = tuple(getattr(mapping, key) for key, _ in _GROUPS)
    strides = group_strides(degrees, RANK_ORDERS.index(mapping.rank_order))
    groups = {}
    for (key, sym), size in zip(_GROUPS, degrees, strict=True):
        if size > 1:
            stride = int(strides[f"st_{sym}"])
            members, nodes = group_placement(size, stride, scenario.system.devices_per_node)
            groups[key] = {"size": size, "stride": stride, "members_per_node": int(members),
                           "nodes": int(nodes)}  # fmt: skip
    return {"placement": {"rank_order": mapping.rank_order, "grid_axes": mapping.grid_axes,
                          "groups": groups}}  # fmt: skip


def stage_memory_B(
    scenario: Scenario, stage: str, *, calibration: Calibration | None = None
) -> dict[str, float]:
    """The memory breakdown of the first or last pipeline stage of a training scenario
    (``memory_breakdown_B`` is the peak stage's): what a source that logs one rank measured
    (docs/model.md §C2.6).

    Raises:
        ConfigError: a workload other than transformer training.
    """
    from deepflow.oracle.workloads.transformer import stage_memory_B as transformer_stage

    workload = scenario.workload
    if not isinstance(workload.model, TransformerSpec) or workload.kind != "training":
        raise ConfigError(
            f"stage memory is modelled for transformer training; got a {workload.kind} "
            f"{type(workload.model).__name__} workload."
        )
    cal = calibration or current_calibration()
    with np.errstate(all="ignore"):
        caps = device_caps(scenario.system.device, workload.precision, calibration=cal)
        net = device_network(scenario, caps, calibration=cal)
        values = workload_for(workload.model, workload.kind).columns(workload, scenario.mapping)
        return transformer_stage(caps, net, values, stage=stage, calibration=cal)


def _serving(
    result: StepResult, out: Mapping[str, Any], summary: Mapping[str, Any], workload: Any,
    devices: int,
) -> dict[str, Any]:  # fmt: skip
    """A serving evaluation's own outputs: ``ttft_s``, ``tpot_s``, ``max_concurrency``,
    output tokens per joule, and the cost of a million output tokens (docs/model.md §D4):
    electricity at ``workload.electricity_usd_per_kWh`` plus, for a design-mode device, its
    cost amortised over ``workload.amortization_years`` of continuous service."""
    if not result.extra:
        return {}
    hardware = float(summary.get("device_cost_usd", 0.0)) * devices
    costs = _serving_costs(out["tokens_per_s"], out["system_power_W"], hardware, workload)
    return {**dict(result.extra), **costs}


def _serving_costs(
    tokens_per_s: Any, system_power_W: Any, hardware_usd: Any, workload: Any
) -> dict[str, Any]:
    """Output tokens per joule and the dollars of a million output tokens (docs/model.md §D4):
    electricity, plus the hardware's cost spread over its service life (floats or arrays)."""
    energy_per_token_J = system_power_W / tokens_per_s
    usd = energy_per_token_J * 1e6 / 3.6e6 * workload.electricity_usd_per_kWh
    usd = usd + hardware_usd / (workload.amortization_years * 365.25 * 86400 * tokens_per_s) * 1e6
    return {"tokens_per_J": 1.0 / energy_per_token_J, "usd_per_Mtoken": usd}


def _framework_summary(scenario: Scenario) -> dict[str, Any]:
    """The scenario's framework profile: its name, description, and the framework switches
    the evaluation ran with (the profile's, or the scenario mapping's where it overrides)."""
    profile = scenario.framework
    assert profile is not None
    return {
        "name": profile.name,
        "description": profile.description,
        "behaviours": {k: getattr(scenario.mapping, k) for k, _ in profile.mapping},
    }


def _ieee(result: StepResult) -> StepResult:
    """A scalar step as numpy floats, so that the outputs divide by zero as IEEE does."""
    return StepResult(
        np.float64(result.step_time_s),
        {k: float(v) for k, v in result.breakdown_s.items()},
        np.float64(result.memory_per_device_B),
        np.float64(result.model_flops_per_step),
        np.float64(result.tokens_per_step),
        np.float64(result.samples_per_step),
    )


def _outputs(
    result: StepResult,
    caps: DeviceCaps,
    peak_power_W: Any,
    devices: int,
    *,
    peak_flops: Any = None,
    capacity_B: Any = None,
) -> dict[str, Any]:
    """The result columns every evaluation derives from a step (floats or arrays of n);
    ``peak_flops`` and ``capacity_B`` default to the device's."""
    step = result.step_time_s
    memory = result.memory_per_device_B
    capacity = caps.hbm_capacity_B if capacity_B is None else capacity_B
    peak = caps.peak_flops if peak_flops is None else peak_flops
    power = average_power_W(peak_power_W, caps.idle_power_fraction, result.breakdown_s, step)
    return {
        "step_time_s": step,
        "tokens_per_s": result.tokens_per_step / step,
        "samples_per_s": result.samples_per_step / step,
        "model_flops_per_step": result.model_flops_per_step,
        "mfu": result.model_flops_per_step / (step * devices * peak),
        "memory_per_device_B": memory,
        "memory_capacity_B": capacity,
        "memory_excess_B": memory - capacity,
        "memory_fits": memory <= capacity,
        "average_power_W": power,
        "system_power_W": power * devices,
        "energy_per_step_J": power * devices * step,
    }


#: The leading result keys of both evaluations, in the contract's order.
_HEAD = ("step_time_s", "tokens_per_s", "samples_per_s", "model_flops_per_step", "mfu",
         "memory_per_device_B", "memory_capacity_B", "memory_excess_B")  # fmt: skip
#: Design-mode outputs of :func:`derive` a table carries.
_DESIGN_OUTPUTS = ("die_cost_usd", "device_cost_usd", "area_excess_mm2", "power_excess_W",
                   "perimeter_excess", "reticle_excess_mm2")  # fmt: skip


def _design_caps(
    device: DesignDeviceSpec, precision: str, overrides: Mapping[str, Any], n: int,
    calibration: Calibration,
) -> tuple[DeviceCaps, dict[str, F]]:  # fmt: skip
    """Capabilities of n variants of a design-mode device (DESIGN_COLUMNS overridden)."""
    base = design_table([device])
    table = {
        c: np.broadcast_to(np.asarray(overrides.get(c, base[c]), dtype=float), (n,))
        for c in DESIGN_COLUMNS
    }
    d = derive(table)
    scalar = device_caps(device, precision, calibration=calibration)  # calibration constants
    return replace(scalar, **derived_caps_fields(d, precision)), d


def evaluate_table(
    scenario: Scenario, columns: Mapping[str, Any], *, calibration: Calibration | None = None
) -> dict[str, F]:
    """Evaluate n variants of a scenario (any registered workload kind) in one call.

    Args:
        scenario: the base scenario.
        columns: equal-length arrays overriding the base: any input column of the workload
            kind (``Workload.columns``: for transformers ``transformer.MODEL_COLUMNS`` and
            ``MAPPING_COLUMNS``) and, for a design-mode device, any of
            ``hardware.DESIGN_COLUMNS`` (budgets, technology).

    Returns:
        Columns of n: ``step_time_s``, ``tokens_per_s``, ``samples_per_s``, ``mfu``,
        ``model_flops_per_step``, ``memory_per_device_B``, ``memory_capacity_B``,
        ``memory_excess_B``, ``sram_excess_B``, ``invalid_output`` (NaN, infinite or
        non-positive outputs, :mod:`deepflow.oracle.feasibility`), ``feasible`` (memory, SRAM,
        valid outputs and, for designs, area/power/perimeter/reticle:
        :func:`~deepflow.oracle.feasibility.feasible`), ``peak_flops``, ``hbm_bandwidth_Bps``,
        ``area_mm2``, ``power_W``, ``system_power_W``, ``energy_per_step_J``,
        ``energy_per_step_ops_J`` with its parts ``energy_ops_<part>_J``
        (:data:`deepflow.oracle.energy.ENERGY_PARTS`), a kind's own outputs (serving:
        ``ttft_s``, ``tpot_s``, ...), ``breakdown_<part>_s`` and, for design
        devices, ``die_cost_usd``, ``device_cost_usd`` and the constraint columns
        ``area_excess_mm2``, ``power_excess_W``, ``perimeter_excess``, ``reticle_excess_mm2``.
        Row i equals ``evaluate_one`` of the scenario with row i's values.

        ``calibration`` defaults to the files in use, as for :func:`evaluate_one`.

    Raises:
        ConfigError: an unknown column name, or a workload kind no workload evaluates.
    """
    kind = workload_for(scenario.workload.model, scenario.workload.kind)
    base = kind.columns(scenario.workload, scenario.mapping)
    unknown = sorted(set(columns) - set(base) - set(DESIGN_COLUMNS))
    if unknown:
        raise ConfigError(f"evaluate_table: unknown columns {', '.join(unknown)}.")
    n = max({np.size(v) for v in columns.values()} or {1})
    x = {
        k: np.broadcast_to(np.asarray(columns.get(k, v), dtype=float), (n,))
        for k, v in base.items()
    }
    with np.errstate(all="ignore"):  # degenerate designs give NaN/inf: infeasible data
        return _evaluate_table(scenario, kind, x, n, columns, calibration)


def _evaluate_table(
    scenario: Scenario, kind: Workload, x: dict[str, F], n: int, columns: Mapping[str, Any],
    calibration: Calibration | None,
) -> dict[str, F]:  # fmt: skip
    cal = calibration or current_calibration()
    caps, net, derived = _table_system(scenario, columns, n, cal)
    if derived:
        peak_power, area = derived["power_W"], derived["die_area_mm2"]
    else:
        device = scenario.system.device
        assert not isinstance(device, DesignDeviceSpec)
        peak_power, area = np.full(n, device.power_W), np.full(n, device.die_area_mm2)
    result = kind.step(caps, net, x, calibration=cal)
    peak = _per_case(caps.peak_flops, n)
    out = _outputs(result, caps, peak_power, scenario.system.num_devices, peak_flops=peak,
                   capacity_B=_per_case(caps.hbm_capacity_B, n))  # fmt: skip
    cols: dict[str, Any] = {k: out[k] for k in _HEAD}
    cols.update(peak_flops=peak, hbm_bandwidth_Bps=_per_case(caps.hbm_bandwidth_Bps, n),
                area_mm2=area, power_W=peak_power, system_power_W=out["system_power_W"],
                energy_per_step_J=out["energy_per_step_J"])  # fmt: skip
    device = scenario.system.device
    energies = (
        derived_energies(derived, caps.idle_power_fraction)
        if isinstance(device, DesignDeviceSpec)
        else spec_energies(device, caps.idle_power_fraction)
    )
    ops = ops_energy_J(caps, energies, result.breakdown_s, net=net,
                       step_time_s=result.step_time_s,
                       model_flops_per_step=result.model_flops_per_step,
                       num_devices=scenario.system.num_devices,
                       num_nodes=scenario.system.num_nodes)  # fmt: skip
    cols["energy_per_step_ops_J"] = sum(ops[k] for k in ENERGY_PARTS)
    for name in ENERGY_PARTS:
        cols[f"energy_ops_{name}_J"] = ops[name]
    for name, value in result.extra.items():  # a kind's own outputs (serving: ttft_s, ...)
        cols[name] = np.asarray(value, dtype=float)
    if result.extra:  # serving: per joule and per dollar, as evaluate_one reports them
        hardware = derived["device_cost_usd"] * scenario.system.num_devices if derived else 0.0
        cols.update(_serving_costs(out["tokens_per_s"], out["system_power_W"], hardware,
                                   scenario.workload))  # fmt: skip
    for name, value in result.breakdown_s.items():
        cols[f"breakdown_{name}_s"] = np.asarray(value, dtype=float)
    cols["sram_excess_B"] = _per_case(sram_excess_B(caps), n)
    constraints = {"memory_excess_B": out["memory_excess_B"],
                   "sram_excess_B": cols["sram_excess_B"]}  # fmt: skip
    if derived:
        cols.update({name: derived[name] for name in _DESIGN_OUTPUTS})
        constraints.update({c: derived[c] for c in DESIGN_CONSTRAINTS})
    cols[INVALID_OUTPUT] = constraints[INVALID_OUTPUT] = invalid_output(cols)
    cols["feasible"] = np.asarray(feasible(constraints)).astype(bool)
    return {k: _column(v, n) for k, v in cols.items()}


def _column(value: Any, n: int) -> NDArray[Any]:
    """A result column of n (a kind may give a constant as a scalar)."""
    column = np.asarray(value)
    return column if column.shape == (n,) else np.broadcast_to(column, (n,)).copy()


def _per_case(value: Any, n: int) -> F:
    return np.broadcast_to(np.asarray(value, dtype=float), (n,))


def _table_system(
    scenario: Scenario, columns: Mapping[str, Any], n: int, calibration: Calibration
) -> tuple[DeviceCaps, NetworkModel, dict[str, F]]:
    """The device (n design variants, or one spec device) and network of a table."""
    device, precision = scenario.system.device, scenario.workload.precision
    net = network_model(scenario, calibration=calibration)
    if not isinstance(device, DesignDeviceSpec):
        return device_caps(device, precision, calibration=calibration), net, {}
    caps, derived = _design_caps(device, precision, columns, n, calibration)
    up, out = derived["scale_up_bandwidth_Bps"], derived["scale_out_bandwidth_Bps"]
    net = replace(
        net,
        scale_up_bandwidth_Bps=np.where(up > 0, up, net.scale_up_bandwidth_Bps),
        scale_out_bandwidth_Bps=np.where(out > 0, out, net.scale_out_bandwidth_Bps),
        scale_up_latency_s=np.where(up > 0, derived["scale_up_latency_s"], net.scale_up_latency_s),
        scale_out_latency_s=np.where(
            out > 0, derived["scale_out_latency_s"], net.scale_out_latency_s
        ),
    )
    return caps, net, derived
