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
from deepflow.config.mapping import (
    KNOB,
    SERVING_KNOBS,
    STRUCTURAL,
    expert_groups,
    expert_replicas,
    knobs_of,
    valid_mappings,
)
from deepflow.config.specs import (
    GRID_AXES,
    RANK_ORDERS,
    DesignDeviceSpec,
    Scenario,
    TransformerSpec,
)
from deepflow.errors import ConfigError
from deepflow.oracle.evaluate import device_network
from deepflow.oracle.feasibility import DESIGN_CONSTRAINTS, INVALID_OUTPUT, invalid_output, violated
from deepflow.oracle.feasibility import feasible as is_feasible
from deepflow.oracle.hardware import device_caps, device_summary
from deepflow.oracle.kernels import sram_excess_B
from deepflow.oracle.network import NetworkModel
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
_CHOSEN = tuple(k for k in _KNOBS if not k.framework and k.name not in SERVING_KNOBS)


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def enumerate_mappings(scenario: Scenario, *, placements: bool = True) -> dict[str, F]:
    """Every valid mapping as the transformer's mapping columns (``MAPPING_COLUMNS``, from the
    knob table), one row per mapping.

    Valid: tensor × pipeline × context × data parallel = devices; tensor parallel divides the
    attention and KV heads; pipeline stages ≤ layers, interleaving divides the layers; context
    parallel divides the sequence; expert parallel divides the experts and data parallel; the
    micro-batch divides the per-replica batch; sequence parallelism only with tensor parallel.
    Each in every placement that differs (:func:`_placements`): the rank orders that give its
    groups distinct strides and the axis orders of a direct topology that change the extents.
    ``placements`` False: each in the scenario's own placement only. The framework switches
    (fused attention, communication overlap), and any knob not enumerated here, stay as in
    the scenario.
    """
    structural, chosen = _picks(scenario)
    distinct = _distinct_placements(scenario, structural) if placements else None
    placed = _placements(scenario, structural, chosen, distinct)
    return _columns(scenario, structural, *placed)


def _picks(scenario: Scenario) -> tuple[NDArray[np.int64], F]:
    """The valid structural degrees and the (row, sp, recompute, zero) picks over them."""
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
    structural = valid_mappings(
        n,
        model,
        batch,
        candidates,
        order=order,
        fixed={
            "pipeline_balance": base.pipeline_balance,
            "expert_tensor_parallel": base.expert_tensor_parallel,
            "data_parallel_replicas": base.data_parallel_replicas,
        },
    )
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
    return structural, np.array(picks, dtype=float).reshape(-1, 4)


def _distinct_placements(
    scenario: Scenario, structural: NDArray[np.int64]
) -> tuple[NDArray[np.int64], list[int]]:
    """The distinct placements of the structural rows: (row, rank-order code) pairs
    (:func:`_distinct_rank_orders`) and the grid-axes codes (:func:`_distinct_grid_axes`),
    the scenario's own first."""
    own_order = RANK_ORDERS.index(scenario.mapping.rank_order)
    return _distinct_rank_orders(structural, own_order), _distinct_grid_axes(scenario)


def _placements(
    scenario: Scenario, structural: NDArray[np.int64], chosen: F,
    distinct: tuple[NDArray[np.int64], list[int]] | None, *, own: bool = True,
) -> tuple[F, F, F]:  # fmt: skip
    """``chosen``'s picks repeated over their placements: (picks, rank-order codes, grid-axes
    codes). ``distinct`` None: the scenario's own placement only; else every distinct one
    (:func:`_distinct_placements`), the own first for each pick unless ``own`` is False
    (docs/model.md §C3)."""
    if distinct is None:  # the own placement is every pick's first (_distinct_rank_orders)
        n = len(chosen)
        own_order = RANK_ORDERS.index(scenario.mapping.rank_order)
        own_axes = GRID_AXES.index(scenario.mapping.grid_axes)
        return chosen, np.full(n, float(own_order)), np.full(n, float(own_axes))
    orders, axes = distinct
    per_row = np.bincount(orders[:, 0], minlength=len(structural))
    first = np.concatenate(([0], np.cumsum(per_row)[:-1]))
    pick_rows = chosen[:, 0].astype(np.int64)
    repeat = per_row[pick_rows]
    index = np.repeat(first[pick_rows], repeat) + _ranges(repeat)
    picks = np.repeat(chosen, repeat, axis=0)
    order_codes = orders[index, 1].astype(float)
    is_own = np.repeat(np.arange(len(index)) == np.repeat(np.cumsum(repeat) - repeat, repeat),
                       len(axes)) & np.tile(np.arange(len(axes)) == 0, len(index))  # fmt: skip
    picks = np.repeat(picks, len(axes), axis=0)
    order_codes = np.repeat(order_codes, len(axes))
    axis_codes = np.tile(np.asarray(axes, dtype=float), len(index))
    keep = np.ones_like(is_own) if own else ~is_own
    return picks[keep], order_codes[keep], axis_codes[keep]


def _columns(
    scenario: Scenario, structural: NDArray[np.int64], picks: F, order_codes: F, axis_codes: F
) -> dict[str, F]:
    """The mapping columns of picks in their placements (the other knobs as the scenario)."""
    rows = picks[:, 0].astype(np.int64)
    columns = {d: structural[rows, j].astype(float) for j, d in enumerate(STRUCTURAL)}
    columns["sequence_parallel"] = picks[:, 1]
    columns[KNOB["activation_recompute"].column] = picks[:, 2]
    columns["zero_stage"] = picks[:, 3]
    columns[KNOB["rank_order"].column] = order_codes
    columns[KNOB["grid_axes"].column] = axis_codes
    base = scenario.mapping
    return {
        k.column: columns[k.column]
        if k.column in columns
        else np.full(len(rows), k.encode(getattr(base, k.name)))
        for k in _KNOBS
    }


def _ranges(counts: NDArray[np.int64]) -> NDArray[np.int64]:
    """0..c-1 for every count c, concatenated."""
    ends = np.cumsum(counts)
    return np.arange(int(ends[-1]) if len(ends) else 0) - np.repeat(ends - counts, counts)


def _distinct_rank_orders(structural: NDArray[np.int64], own: int) -> NDArray[np.int64]:
    """(structural row, rank-order code) of every rank order that gives a row's groups other
    strides than the orders before it (code ``own`` first, then the table's order): orders
    that differ only in where dimensions of degree 1 sit place every group alike."""
    degrees = structural[:, [STRUCTURAL.index(f"{d}_parallel") for d in
                             ("tensor", "context", "data", "pipeline")]].astype(float)  # fmt: skip
    codes = np.array([own, *(c for c in range(len(RANK_ORDERS)) if c != own)])
    positions = np.array([[RANK_ORDERS[c].split("-").index(d) for d in ("tp", "cp", "dp", "pp")]
                          for c in codes])  # fmt: skip
    # strides[c, row, d]: the product of the degrees placed inside dimension d in order c
    inside = positions[:, None, None, :] < positions[:, None, :, None]  # (c, 1, d, j)
    strides = np.prod(np.where(inside, degrees[None, :, None, :], 1.0), axis=-1)
    strides = np.where(degrees > 1, strides, 0.0)  # a group of one rank has no placement
    new = np.ones(strides.shape[:2], dtype=bool)
    for c in range(1, len(RANK_ORDERS)):
        new[c] = ~np.any(np.all(strides[:c] == strides[c], axis=-1), axis=0)
    rank, row = np.nonzero(new)
    by_row = np.lexsort((rank, row))
    return np.stack([row[by_row], codes[rank[by_row]]], axis=1)


def _distinct_grid_axes(scenario: Scenario) -> list[int]:
    """The ``grid_axes`` codes that lay the ranks over distinct axis extents on the scenario's
    direct-topology levels (the scenario's own code first); one code on switched networks."""
    network = scenario.system.network
    grid = ("torus-2d", "torus-3d", "mesh-2d")  # ring: one axis
    levels = (network.scale_up, network.scale_out)
    grids = [tuple(lv.shape) for lv in levels if lv.topology in grid and len(lv.shape) > 1]
    own = GRID_AXES.index(scenario.mapping.grid_axes)
    seen: dict[tuple[tuple[int, ...], ...], int] = {}
    for code in (own, *range(len(GRID_AXES))):
        extents = tuple(tuple(shape[a] for a in ("xyz".index(c) for c in GRID_AXES[code])
                              if a < len(shape)) for shape in grids)  # fmt: skip
        seen.setdefault(extents, code)
    return list(seen.values())


def _best_serving_mappings(
    scenario: Scenario, top: int, calibration: Calibration, slo: dict[str, float]
) -> dict[str, Any]:
    """Serving: every tensor × pipeline × data-parallel split of the devices that the serving
    mapping rules admit (tensor parallel dividing the attention heads and dividing or
    replicating the KV heads, pipeline stages at most the layers, the scenario's expert
    parallelism sharded as the rules allow), ranked by system output tokens per second among
    the feasible ones (docs/model.md §D1, §D3). A MoE model with expert parallelism is also
    laid out both ways: experts split as the dense layers with EP across replicas
    (``expert_tensor_parallel`` 0) and whole experts with EP inside the tensor-parallel group
    first (1); and any MoE model with every expert split over all the devices of a stage
    (``expert_parallel`` 1, ``expert_tensor_parallel`` the devices: attention data parallelism
    with tensor-parallel experts, TensorRT-LLM's default without ``--ep``); a split two
    layouts make the same is listed once. With continuous batching, each split of the devices
    into a prefill pool and a decode pool too (:func:`_disaggregated_layouts`; §D6)."""
    from deepflow.oracle.evaluate import evaluate_table

    model = scenario.workload.model
    assert isinstance(model, TransformerSpec)
    n, base = scenario.system.num_devices, scenario.mapping
    layouts = [(base.expert_parallel, base.expert_tensor_parallel)]  # (ep, etp)
    if model.num_experts > 1 and base.expert_parallel > 1:
        layouts = sorted({*layouts, (base.expert_parallel, 0), (base.expert_parallel, 1)})
    if model.num_experts > 1:
        layouts = sorted({*layouts, (1, n)})
    degrees = [STRUCTURAL.index(d) for d in ("tensor_parallel", "pipeline_parallel",
                                             "data_parallel")]  # fmt: skip
    rows: dict[tuple[int, ...], tuple[int, ...]] = {}  # (tp, pp, dp, ep, etp in effect) -> row
    for ep, etp in layouts:
        candidates = {"tensor_parallel": _divisors(n), "pipeline_parallel": _divisors(n),
                      "data_parallel": None, "context_parallel": (1,), "expert_parallel": (ep,),
                      "micro_batch_size": (1,), "virtual_pipeline_stages": (1,)}  # fmt: skip
        valid = valid_mappings(n, model, scenario.workload.global_batch_size, candidates,
                               serving=True, fixed={"expert_tensor_parallel": etp})  # fmt: skip
        for tp, pp, dp in valid[:, degrees].tolist():
            rows.setdefault((tp, pp, dp, ep, etp or tp), (tp, pp, dp, ep, etp))
    colocated = [(*row, 0, 0) for row in rows.values()]
    grid = np.array(colocated + _disaggregated_layouts(scenario, colocated),
                    dtype=float).reshape(-1, 7)  # fmt: skip
    names = ("tensor_parallel", "pipeline_parallel", "data_parallel", "expert_parallel",
             "expert_tensor_parallel", "prefill_replicas", "prefill_tensor_parallel")  # fmt: skip
    columns = {name: grid[:, j] for j, name in enumerate(names)}
    table = evaluate_table(scenario, columns, calibration=calibration)
    feasible = np.asarray(table["feasible"], dtype=bool)
    # a latency SLO keeps the mappings within it (DistServe's goodput: throughput within it)
    within = feasible.copy()
    for name, bound in slo.items():
        within &= np.asarray(table[name]) <= bound
    order = [i for i in np.argsort(-table["tokens_per_s"], kind="stable") if within[i]][:top]
    out = [
        {
            "mapping": {name: int(grid[i, j]) for j, name in enumerate(names)},
            "tokens_per_s": float(table["tokens_per_s"][i]),
            "ttft_s": float(table["ttft_s"][i]),
            "tpot_s": float(table["tpot_s"][i]),
            "step_time_s": float(table["step_time_s"][i]),
            "memory_per_device_B": float(table["memory_per_device_B"][i]),
            "max_concurrency": float(table["max_concurrency"][i]),
        }
        for i in order
    ]  # fmt: skip
    result = {"num_valid": len(grid), "num_feasible": int(feasible.sum()), "mappings": out}
    if slo:
        result |= {"slo": {f"max_{k}": v for k, v in slo.items()},
                   "num_within_slo": int(within.sum())}  # fmt: skip
    return result


#: Disaggregated layouts best-mapping enumerates at most: beyond, the pools take one
#: tensor-parallel degree (the decode replicas', as co-located serving's).
_MAX_POOL_LAYOUTS = 20_000


def _disaggregated_layouts(
    scenario: Scenario, colocated: list[tuple[int, ...]]
) -> list[tuple[int, ...]]:
    """Serving layouts with a prefill pool and a decode pool (docs/model.md §D6): rows (tp,
    pp, dp, ep, etp, prefill replicas, prefill tp; prefill tp 0 where it is the decode's) of
    P prefill replicas at tensor parallelism t_p and D decode replicas at t, pp stages each,
    pp·(P·t_p + D·t) = the devices, P, D >= 1; t and t_p among the tensor-parallel degrees
    the co-located rows take at pp, an MoE's experts inside each replica (expert parallelism
    inside its tensor-parallel group, no split across replicas; with t_p ≠ t, split as the
    dense layers: expert_parallel 1, expert_tensor_parallel 0). Where they would exceed
    :data:`_MAX_POOL_LAYOUTS`, both pools take one degree."""
    if scenario.workload.batching != "continuous":
        return []
    n = scenario.system.num_devices
    moe = isinstance(scenario.workload.model, TransformerSpec) and (
        scenario.workload.model.num_experts > 1
    )
    inside: dict[int, set[tuple[int, int, int]]] = {}  # pp -> {(tp, ep, etp)}
    for tp, pp, _, ep, etp, _, _ in colocated:
        values = {"tensor_parallel": tp, "expert_parallel": ep, "expert_tensor_parallel": etp}
        _, _, ep_dp = expert_groups(values)
        if not moe or int(ep_dp) * int(expert_replicas(values)) == 1:
            inside.setdefault(pp, set()).add((tp, ep, etp))

    def layouts(same: bool) -> list[tuple[int, ...]]:
        out: list[tuple[int, ...]] = []
        for pp, shapes in sorted(inside.items()):
            width = n // pp
            dense = sorted({tp for tp, ep, etp in shapes if not moe or (ep, etp) == (1, 0)})
            for tp, ep, etp in sorted(shapes):
                prefill_tps = [tp] if same or (moe and (ep, etp) != (1, 0)) else dense
                for tp_p in prefill_tps:
                    for p in range(1, width // tp_p + 1):
                        rest = width - p * tp_p
                        if rest >= tp and rest % tp == 0:
                            d = rest // tp
                            out.append((tp, pp, p + d, ep, etp, p, 0 if tp_p == tp else tp_p))
        return out

    rows = layouts(same=False)
    return rows if len(rows) <= _MAX_POOL_LAYOUTS else layouts(same=True)


def best_mappings(
    scenario: Scenario, *, top: int = 10, calibration: Calibration | None = None,
    max_ttft_s: float | None = None, max_tpot_s: float | None = None,
) -> dict[str, Any]:  # fmt: skip
    """Evaluate every valid mapping and return the ``top`` fastest feasible ones
    (``calibration``: default the files in use). A serving scenario may set a latency SLO:
    ``max_ttft_s`` and ``max_tpot_s`` keep only the mappings within it (the result then says
    ``num_within_slo``).

    Returns:
        ``num_valid``, ``num_feasible`` and ``mappings``: a list of dicts, fastest first, with
        the mapping, ``step_time_s``, ``mfu``, ``memory_per_device_B``,
        ``memory_breakdown_B`` and ``breakdown_s``.
        Feasible follows :func:`deepflow.oracle.feasibility.feasible` (memory, valid outputs
        and, for a design-mode device, its budgets: then ``device_constraints`` and
        ``violated_device_constraints`` say which budget rules every mapping out). When none
        is feasible, ``violations`` counts the mappings breaking each constraint.
    """
    slo = {k: v for k, v in (("ttft_s", max_ttft_s), ("tpot_s", max_tpot_s)) if v is not None}
    for name, bound in slo.items():
        if not bound > 0:
            raise ConfigError(f"max_{name} must be > 0; got {bound:g}.")
    if scenario.workload.kind == "inference":
        return _best_serving_mappings(scenario, top, calibration or current_calibration(), slo)
    if slo:
        raise ConfigError(
            f"{scenario.source}: a latency SLO (max_{next(iter(slo))}) applies to serving "
            "scenarios (workload.kind: inference); this one trains."
        )
    structural, chosen = _picks(scenario)
    cal = calibration or current_calibration()
    device = scenario.system.device
    with np.errstate(all="ignore"):  # a degenerate design gives NaN/inf: infeasible data
        caps = device_caps(device, scenario.workload.precision, calibration=cal)
        net = device_network(scenario, caps, calibration=cal)
    # Every pick in the scenario's own placement; then, by branch and bound, the other
    # placements of the picks whose step without any communication (a bound on every
    # placement's: a placement changes only collective times) could still enter the top.
    own = _Evaluated(scenario, _columns(scenario, structural, *_placements(
        scenario, structural, chosen, None)), caps, net, cal)  # fmt: skip
    ranked = np.sort(own.step[own.feasible])
    threshold = ranked[top - 1] if len(ranked) >= top else np.inf
    bound = _Evaluated(scenario, own.x, caps, _without_communication(net), cal).step
    open_ = own.feasible & (bound <= threshold)
    distinct = _distinct_placements(scenario, structural)
    rest = _columns(scenario, structural, *_placements(scenario, structural, chosen[open_],
                                                        distinct, own=False))  # fmt: skip
    stages = (own,) if not len(rest["tensor_parallel"]) else (
        own, _Evaluated(scenario, rest, caps, net, cal))  # fmt: skip
    steps = np.concatenate([e.step for e in stages])
    feasible = np.concatenate([e.feasible for e in stages])
    order = [i for i in np.argsort(steps, kind="stable") if feasible[i]][:top]
    peak = caps.peak_flops * scenario.system.num_devices
    n_own = len(own.step)
    out = [stages[int(i >= n_own)].entry(int(i) - n_own * int(i >= n_own), peak) for i in order]
    # every pick has as many placements as _placements gives it; memory and the budgets
    # do not depend on the placement, so a pick's feasibility is its placements'
    count_each = _placement_counts(structural, chosen, distinct)
    count = int(count_each.sum())
    constraints = own.constraints
    found: dict[str, Any] = {"num_valid": count,
                             "num_feasible": int(count_each[own.feasible].sum()),
                             "mappings": out}  # fmt: skip
    if own.budgets:
        found["device_constraints"] = own.budgets
        found["violated_device_constraints"] = violated(own.budgets)
    if not own.feasible.any():  # why: how many mappings break each constraint
        found["violations"] = {
            name: int(count_each[np.broadcast_to(np.logical_not(is_feasible({name: value})),
                                                 own.step.shape)].sum())
            for name, value in constraints.items()
        }  # fmt: skip
    return found


class _Evaluated:
    """One vectorised evaluation of mapping columns on the scenario's device and network."""

    def __init__(self, scenario: Scenario, mappings: dict[str, F], caps: Any, net: NetworkModel,
                 cal: Calibration) -> None:  # fmt: skip
        model = scenario.workload.model
        assert isinstance(model, TransformerSpec)
        count = len(mappings["tensor_parallel"])
        base = transformer_columns(model, scenario.mapping, scenario.workload.global_batch_size)
        self.x = {k: np.broadcast_to(v, (count,)) for k, v in base.items()} | mappings
        with np.errstate(all="ignore"):  # a degenerate design gives NaN/inf: infeasible data
            self.result = transformer_step(caps, net, self.x, calibration=cal)
        self.step = self.result["step_time_s"]
        memory = self.result["memory_per_device_B"]
        self.constraints = {"memory_excess_B": memory - caps.hbm_capacity_B,
                            "sram_excess_B": float(sram_excess_B(caps)),
                            INVALID_OUTPUT: invalid_output(self.result)}  # fmt: skip
        self.budgets: dict[str, float] = {}
        device = scenario.system.device
        if isinstance(device, DesignDeviceSpec):  # the budgets, as ``show`` reports them
            summary = device_summary(device)["constraints"]
            self.budgets = {c: float(summary[c]) for c in DESIGN_CONSTRAINTS}
            self.constraints.update(self.budgets)
        self.feasible = np.broadcast_to(is_feasible(self.constraints), (count,))

    def entry(self, i: int, peak: Any) -> dict[str, Any]:
        """Best-mapping's record of row ``i``."""
        r, step = self.result, self.step
        return {
            "mapping": {k.name: k.decode(self.x[k.column][i]) for k in _CHOSEN},
            "step_time_s": float(step[i]),
            "mfu": float(r["model_flops_per_step"][i] / (step[i] * peak)),
            "memory_per_device_B": float(r["memory_per_device_B"][i]),
            "memory_breakdown_B": {
                k: float(np.broadcast_to(v, step.shape)[i])
                for k, v in r["memory_breakdown_B"].items()
            },
            "breakdown_s": {k: float(v[i]) for k, v in r["breakdown_s"].items()},
        }


def _without_communication(net: NetworkModel) -> NetworkModel:
    """``net`` with every collective free (infinite bandwidth, no latency): each mapping's
    step on it bounds the step of its every placement from below."""
    every = (1.0, 1.0, 1.0)  # every protocol available (none matters: no bytes take time)
    return NetworkModel(devices_per_node=net.devices_per_node, scale_up_topology="switch",
                        scale_up_bandwidth_Bps=np.inf, scale_up_latency_s=0.0,
                        scale_up_efficiency=1.0, scale_up_protocol_efficiency=every,
                        scale_out_topology="switch", scale_out_bandwidth_Bps=np.inf,
                        scale_out_latency_s=0.0, scale_out_efficiency=1.0,
                        scale_out_protocol_efficiency=every)  # fmt: skip


def _placement_counts(
    structural: NDArray[np.int64], chosen: F, distinct: tuple[NDArray[np.int64], list[int]]
) -> NDArray[np.int64]:
    """The number of distinct placements of each pick (:func:`_placements`)."""
    orders, axes = distinct
    per_row = np.bincount(orders[:, 0], minlength=len(structural))
    return np.asarray(per_row[chosen[:, 0].astype(np.int64)] * len(axes))
