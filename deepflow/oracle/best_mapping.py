"""Enumerate every valid mapping of a scenario's model on its system and rank them.

The candidates are evaluated in one vectorised call of the transformer model, so the whole
valid space of a GPT-3-class model on ~1,000 devices takes seconds (benchmarks/bench_oracle.py).
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
from numpy.typing import NDArray

from deepflow.config.calibration import Calibration, current_calibration
from deepflow.config.mapping import KNOB, STRUCTURAL, knobs_of, valid_mappings
from deepflow.config.specs import DesignDeviceSpec, Scenario, TransformerSpec
from deepflow.errors import ConfigError
from deepflow.oracle.evaluate import device_network
from deepflow.oracle.feasibility import DESIGN_CONSTRAINTS, INVALID_OUTPUT, invalid_output, violated
from deepflow.oracle.feasibility import feasible as is_feasible
from deepflow.oracle.hardware import device_caps, device_summary
from deepflow.oracle.kernels import sram_excess_B
from deepflow.oracle.workloads.transformer import (
    FULL_RECOMPUTE,
    NO_RECOMPUTE,
    SELECTIVE_RECOMPUTE,
    transformer_columns,
    transformer_step,
)

__all__ = ["best_mappings", "enumerate_mappings"]

F = NDArray[np.float64]
#: The transformer's knobs (the knob table's); best-mapping chooses all but the framework
#: switches, and reports what it chose.
_KNOBS = knobs_of("transformer")
_CHOSEN = tuple(k for k in _KNOBS if not k.framework)


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def enumerate_mappings(scenario: Scenario) -> dict[str, F]:
    """Every valid mapping as the transformer's mapping columns (``MAPPING_COLUMNS``, from the
    knob table), one row per mapping.

    Valid: tensor × pipeline × context × data parallel = devices; tensor parallel divides the
    attention and KV heads; pipeline stages ≤ layers, interleaving divides the layers; context
    parallel divides the sequence; expert parallel divides the experts and data parallel; the
    micro-batch divides the per-replica batch; sequence parallelism only with tensor parallel.
    The framework switches (fused attention, communication overlap), and any knob not
    enumerated here, stay as in the scenario.
    """
    model = scenario.workload.model
    if not isinstance(model, TransformerSpec):
        raise ConfigError(
            f"{scenario.source}: best-mapping enumerates transformer mappings; workload.model "
            f"is a {model.kind} model."
        )
    n = scenario.system.num_devices
    batch = scenario.workload.global_batch_size
    base = scenario.mapping
    candidates = {
        "tensor_parallel": _divisors(n),
        "pipeline_parallel": _divisors(n),
        "context_parallel": _divisors(n),
        "data_parallel": None,
        "virtual_pipeline_stages": range(1, model.num_layers + 1),
        "expert_parallel": _divisors(n),
        "micro_batch_size": _divisors(batch),
    }
    order = (
        "tensor_parallel",
        "pipeline_parallel",
        "context_parallel",
        "virtual_pipeline_stages",
        "expert_parallel",
        "micro_batch_size",
    )
    structural = valid_mappings(n, model, batch, candidates, order=order)
    # Equivalent choices are enumerated once: with fused attention selective recompute
    # changes nothing (§C1.2), and without data parallelism every ZeRO stage is 0.
    none, selective, full = NO_RECOMPUTE, SELECTIVE_RECOMPUTE, FULL_RECOMPUTE
    recomputes = (none, full) if base.flash_attention else (none, selective, full)
    picks: list[tuple[int, float, float, float]] = []  # (structural row, sp, recompute, zero)
    tp_dp = structural[:, [STRUCTURAL.index("tensor_parallel"), STRUCTURAL.index("data_parallel")]]
    for row, (tp, dp) in enumerate(tp_dp.tolist()):
        zeros = range(4) if dp > 1 else (0,)
        for sp in (False, True) if tp > 1 else (False,):
            for rc, zero in itertools.product(recomputes, zeros):
                picks.append((row, float(sp), rc, float(zero)))
    chosen = np.array(picks, dtype=float).reshape(-1, 4)
    rows = chosen[:, 0].astype(np.int64)
    columns = {d: structural[rows, j].astype(float) for j, d in enumerate(STRUCTURAL)}
    columns["sequence_parallel"] = chosen[:, 1]
    columns[KNOB["activation_recompute"].column] = chosen[:, 2]
    columns["zero_stage"] = chosen[:, 3]
    return {
        k.column: columns[k.column]
        if k.column in columns
        else np.full(len(rows), k.encode(getattr(base, k.name)))
        for k in _KNOBS
    }


def _best_serving_mappings(
    scenario: Scenario, top: int, calibration: Calibration
) -> dict[str, Any]:
    """Serving: every tensor × pipeline × data-parallel split of the devices that the serving
    mapping rules admit (tensor parallel dividing the attention heads and dividing or
    replicating the KV heads, pipeline stages at most the layers, the scenario's expert
    parallelism dividing the replicas), ranked by system output tokens per second among the
    feasible ones (docs/model.md §D1, §D3)."""
    from deepflow.oracle.evaluate import evaluate_table

    model = scenario.workload.model
    assert isinstance(model, TransformerSpec)
    n = scenario.system.num_devices
    candidates = {"tensor_parallel": _divisors(n), "pipeline_parallel": _divisors(n),
                  "data_parallel": None, "context_parallel": (1,),
                  "expert_parallel": (scenario.mapping.expert_parallel,),
                  "micro_batch_size": (1,), "virtual_pipeline_stages": (1,)}  # fmt: skip
    valid = valid_mappings(n, model, scenario.workload.global_batch_size, candidates,
                           serving=True)  # fmt: skip
    degrees = [STRUCTURAL.index(d) for d in ("tensor_parallel", "pipeline_parallel",
                                             "data_parallel")]  # fmt: skip
    grid = valid[:, degrees].astype(float).reshape(-1, 3)
    columns = {"tensor_parallel": grid[:, 0], "pipeline_parallel": grid[:, 1],
               "data_parallel": grid[:, 2]}  # fmt: skip
    table = evaluate_table(scenario, columns, calibration=calibration)
    feasible = np.asarray(table["feasible"], dtype=bool)
    order = [i for i in np.argsort(-table["tokens_per_s"], kind="stable") if feasible[i]][:top]
    out = [
        {
            "mapping": {"tensor_parallel": int(grid[i, 0]), "pipeline_parallel": int(grid[i, 1]),
                        "data_parallel": int(grid[i, 2])},
            "tokens_per_s": float(table["tokens_per_s"][i]),
            "ttft_s": float(table["ttft_s"][i]),
            "tpot_s": float(table["tpot_s"][i]),
            "step_time_s": float(table["step_time_s"][i]),
            "memory_per_device_B": float(table["memory_per_device_B"][i]),
            "max_concurrency": float(table["max_concurrency"][i]),
        }
        for i in order
    ]  # fmt: skip
    return {"num_valid": len(grid), "num_feasible": int(feasible.sum()), "mappings": out}


def best_mappings(
    scenario: Scenario, *, top: int = 10, calibration: Calibration | None = None
) -> dict[str, Any]:
    """Evaluate every valid mapping and return the ``top`` fastest feasible ones
    (``calibration``: default the files in use).

    Returns:
        ``num_valid``, ``num_feasible`` and ``mappings``: a list of dicts, fastest first, with
        the mapping, ``step_time_s``, ``mfu``, ``memory_per_device_B``,
        ``memory_breakdown_B`` and ``breakdown_s``.
        Feasible follows :func:`deepflow.oracle.feasibility.feasible` (memory, valid outputs
        and, for a design-mode device, its budgets: then ``device_constraints`` and
        ``violated_device_constraints`` say which budget rules every mapping out). When none
        is feasible, ``violations`` counts the mappings breaking each constraint.
    """
    if scenario.workload.kind == "inference":
        return _best_serving_mappings(scenario, top, calibration or current_calibration())
    mappings = enumerate_mappings(scenario)
    count = len(mappings["tensor_parallel"])
    model = scenario.workload.model
    assert isinstance(model, TransformerSpec)
    base = transformer_columns(model, scenario.mapping, scenario.workload.global_batch_size)
    x = {k: np.broadcast_to(v, (count,)) for k, v in base.items()} | mappings
    cal = calibration or current_calibration()
    device = scenario.system.device
    with np.errstate(all="ignore"):  # a degenerate design gives NaN/inf: infeasible data
        caps = device_caps(device, scenario.workload.precision, calibration=cal)
        net = device_network(scenario, caps, calibration=cal)
        result = transformer_step(caps, net, x, calibration=cal)
    step = result["step_time_s"]
    memory = result["memory_per_device_B"]
    constraints = {"memory_excess_B": memory - caps.hbm_capacity_B,
                   "sram_excess_B": float(sram_excess_B(caps)),
                   INVALID_OUTPUT: invalid_output(result)}  # fmt: skip
    budgets: dict[str, float] = {}
    if isinstance(device, DesignDeviceSpec):  # the budgets, as ``show`` reports them
        summary = device_summary(device)["constraints"]
        budgets = {c: float(summary[c]) for c in DESIGN_CONSTRAINTS}
        constraints.update(budgets)
    feasible = np.broadcast_to(is_feasible(constraints), (count,))
    order = [i for i in np.argsort(step, kind="stable") if feasible[i]][:top]
    peak = caps.peak_flops * scenario.system.num_devices
    out = []
    for i in order:
        mapping = {k.name: k.decode(x[k.column][i]) for k in _CHOSEN}
        out.append(
            {
                "mapping": mapping,
                "step_time_s": float(step[i]),
                "mfu": float(result["model_flops_per_step"][i] / (step[i] * peak)),
                "memory_per_device_B": float(memory[i]),
                "memory_breakdown_B": {
                    k: float(np.broadcast_to(v, step.shape)[i])
                    for k, v in result["memory_breakdown_B"].items()
                },
                "breakdown_s": {k: float(v[i]) for k, v in result["breakdown_s"].items()},
            }
        )
    found: dict[str, Any] = {"num_valid": count, "num_feasible": int(feasible.sum()),
                             "mappings": out}  # fmt: skip
    if budgets:
        found["device_constraints"] = budgets
        found["violated_device_constraints"] = violated(budgets)
    if not feasible.any():  # why: how many mappings break each constraint
        found["violations"] = {
            name: int(np.broadcast_to(np.logical_not(is_feasible({name: value})), (count,)).sum())
            for name, value in constraints.items()
        }
    return found
