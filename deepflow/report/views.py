"""Plot-ready views of a result: the cloud of evaluations, the front, breakdowns, tables.

Both renderers (interactive plotly in the HTML page, matplotlib PNGs) draw from these, so the
two always agree on colours, scales and which designs are shown.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from deepflow.report.results import Result, benchmark_histories, check_history
from deepflow.report.style import axis_label, design_colors, fmt, humanize, use_log

__all__ = [
    "BREAKDOWNS",
    "Breakdown",
    "Cloud",
    "Front",
    "HypervolumeLine",
    "breakdown",
    "cloud",
    "component_label",
    "design_table",
    "front",
    "front_2d",
    "hypervolume_lines",
    "log_axes",
    "mapping_text",
    "pairs",
]

F = NDArray[np.float64]

#: pareto.json key -> (title, unit, value axis title, figure name)
BREAKDOWNS: dict[str, tuple[str, str, str, str]] = {
    "breakdown_s": ("Where the step time goes", "s", "step time (s)", "breakdown_step_time"),
    "area_breakdown_mm2": ("Die area by component", "mm²", "area (mm²)", "breakdown_area"),
    "power_breakdown_W": ("Power by component", "W", "power (W)", "breakdown_power"),
    "memory_breakdown_B": ("Memory per device", "GiB", "memory (GiB)", "breakdown_memory"),
}
#: Breakdowns stored in one unit and drawn in another (bytes in pareto.json, GiB in plots).
_DRAWN_SCALE = {"memory_breakdown_B": 2.0**-30}


@dataclass(frozen=True)
class Cloud:
    """Every oracle evaluation of the search with finite objective values.

    Attributes:
        values: (n, k) objective values, columns in objective order.
        trial, evaluation: (n,) Optuna trial number and 0-based evaluation order.
        feasible: (n,) bool.
    """

    values: F
    trial: NDArray[np.int64]
    evaluation: NDArray[np.int64]
    feasible: NDArray[np.bool_]


@dataclass(frozen=True)
class Front:
    """The Pareto designs of pareto.json (oracle values), in file order.

    Attributes:
        values: (m, k) objective values.
        trial: the trial numbers.
        labels: ``#<trial>`` as shown on axes and in the table.
        colors: one hex colour per design, the same in every plot.
    """

    values: F
    trial: list[int]
    labels: list[str]
    colors: list[str]


@dataclass(frozen=True)
class Breakdown:
    """A stacked-bar view: ``values[i, j]`` is component j of design ``designs[i]``."""

    key: str
    components: list[str]
    designs: list[int]
    values: F


@dataclass(frozen=True)
class HypervolumeLine:
    strategy: str
    name: str
    evaluations: NDArray[np.int64]
    hypervolume: F


def cloud(result: Result) -> Cloud:
    """The evaluated designs; rows with a non-finite objective (failed evaluations) left out."""
    df = result.trials
    values = np.column_stack(
        [df[o.column].to_numpy(dtype=np.float64) for o in result.objectives]
    ).reshape(len(df), len(result.objectives))
    keep = np.isfinite(values).all(axis=1)
    return Cloud(
        values=values[keep],
        trial=df["trial"].to_numpy(dtype=np.int64)[keep],
        evaluation=df["evaluation"].to_numpy(dtype=np.int64)[keep],
        feasible=df["feasible"].to_numpy(dtype=bool)[keep],
    )


def front(result: Result) -> Front:
    trials = [int(d["trial"]) for d in result.designs]
    values = np.array(
        [[float(d["objectives"][o.name]) for o in result.objectives] for d in result.designs],
        dtype=np.float64,
    ).reshape(len(trials), len(result.objectives))
    return Front(values, trials, [f"#{t}" for t in trials], design_colors(len(trials)))


def pairs(num_objectives: int) -> list[tuple[int, int]]:
    """Every pair (i, j), i < j, of objective indices."""
    return [(i, j) for i in range(num_objectives) for j in range(i + 1, num_objectives)]


def log_axes(result: Result, points: Cloud, pareto: Front) -> list[bool]:
    """Per objective: log scale when the study says so or its values span decades."""
    out = []
    for k, obj in enumerate(result.objectives):
        values = [*points.values[:, k].tolist(), *pareto.values[:, k].tolist()]
        positive = bool(values) and min(values) > 0
        out.append(use_log(values) or (obj.scale == "log" and positive))
    return out


def front_2d(x: F, y: F, *, minimize_x: bool, minimize_y: bool) -> NDArray[np.int64]:
    """Indices of the points no other point beats in both x and y, sorted by x.

    >>> front_2d(np.array([1.0, 2.0, 3.0]), np.array([3.0, 1.0, 2.0]),
    ...          minimize_x=True, minimize_y=True).tolist()
    [0, 1]
    """
    sx = np.where(minimize_x, x, -x)
    sy = np.where(minimize_y, y, -y)
    order = np.lexsort((sy, sx))  # best x first, ties by best y
    keep: list[int] = []
    best_y = np.inf
    for idx in order:
        if sy[idx] < best_y:
            keep.append(int(idx))
            best_y = sy[idx]
    out = np.array(keep, dtype=np.int64)
    return out[np.argsort(x[out], kind="stable")]


def breakdown(result: Result, key: str) -> Breakdown | None:
    """The ``key`` breakdown of the Pareto designs that have it; None when none has it.

    Components that are zero for every design are left out; the order is the first design's.
    """
    rows = [(i, d[key]) for i, d in enumerate(result.designs) if d.get(key)]
    if not rows:
        return None
    components: list[str] = []
    for _, parts in rows:
        components.extend(c for c in parts if c not in components)
    scale = _DRAWN_SCALE.get(key, 1.0)
    values = np.array([[scale * float(parts.get(c, 0.0)) for c in components] for _, parts in rows])
    nonzero = np.abs(values).sum(axis=0) > 0
    return Breakdown(
        key=key,
        components=[c for c, nz in zip(components, nonzero, strict=True) if nz],
        designs=[i for i, _ in rows],
        values=values[:, nonzero],
    )


def hypervolume_lines(result: Result) -> list[HypervolumeLine]:
    """One line per strategy (summary.json ``benchmark``), else the run's own history.

    When a benchmark is present and the run's strategy is not among its lines, the run's own
    history is added as one more line.
    """
    summary = result.summary
    where = f"{result.path / 'summary.json'}"
    own_strategy = str(summary.get("strategy", "this run"))
    own = check_history(summary["hypervolume_history"], f"{where}: hypervolume_history")
    lines = []
    if "benchmark" in summary:
        lines = benchmark_histories(summary["benchmark"], f"{where}: benchmark")
    if own and all(strategy != own_strategy for strategy, _, _ in lines):
        lines.insert(0, (own_strategy, own_strategy, own))
    out = []
    for strategy, name, history in lines:
        if not history:
            continue
        evals, hv = zip(*sorted(history), strict=True)
        out.append(
            HypervolumeLine(
                strategy, name, np.array(evals, dtype=np.int64), np.array(hv, dtype=np.float64)
            )
        )
    return out


# ---------------------------------------------------------------------------------- table
def _get(mapping: Any, *keys: str) -> Any:
    for key in keys:
        if not isinstance(mapping, dict):
            return None
        mapping = mapping.get(key)
    return mapping


def _name(value: Any) -> Any:
    """A preset given as a resolved mapping is shown by its name."""
    return value.get("name") if isinstance(value, dict) else value


def mapping_text(design: dict[str, Any]) -> str:
    """``TP8 PP8 DP16 mb1 SP selective ZeRO-1``: the mapping, from the config or x_ columns;
    a serving design's degrees and the requests offered to each replica (``TP4 DP2 64 req``).
    """
    mapping = dict(_get(design, "config", "mapping") or {})
    for key, value in (design.get("x") or {}).items():
        if key.startswith("x_"):
            mapping.setdefault(key[2:], value)
    if _get(design, "config", "workload", "kind") == "inference":
        tags = (("tensor_parallel", "TP"), ("pipeline_parallel", "PP"),
                ("data_parallel", "DP"), ("expert_parallel", "EP"))  # fmt: skip
        degrees = [f"{tag}{mapping[key]}" for key, tag in tags
                   if mapping.get(key) not in (None, 1) or tag == "TP"]  # fmt: skip
        requests = (design.get("x") or {}).get("x_global_batch_size") or _get(
            design, "config", "workload", "global_batch_size")  # fmt: skip
        return " ".join(degrees + ([f"{requests} req"] if requests else []))
    parts = []
    for key, tag, always in (
        ("tensor_parallel", "TP", True),
        ("pipeline_parallel", "PP", True),
        ("data_parallel", "DP", True),
        ("context_parallel", "CP", False),
        ("expert_parallel", "EP", False),
        ("virtual_pipeline_stages", "v", False),
        ("micro_batch_size", "mb", True),
    ):
        value = mapping.get(key)
        if value is not None and (always or value != 1):
            parts.append(f"{tag}{value}")
    if mapping.get("sequence_parallel") is True:
        parts.append("SP")
    recompute = mapping.get("activation_recompute")
    if recompute not in (None, "none"):
        parts.append(f"{recompute} recompute")
    if mapping.get("zero_stage") not in (None, 0):
        parts.append(f"ZeRO-{mapping['zero_stage']}")
    return " ".join(parts)


def _gib(value: Any) -> str | None:
    return fmt(value / 2**30, 3) if isinstance(value, int | float) else None


def design_table(result: Result) -> tuple[list[str], list[list[str]]]:
    """Headers and rows of the Pareto-design table; columns with no value anywhere dropped.

    Columns: trial, each objective, node/device, DRAM, die area, TDP, device power, HBM
    stacks, memory used / capacity, mapping, step time, MFU, energy per step, device cost.
    """
    columns: list[tuple[str, list[str | None]]] = [
        ("trial", [f"#{d['trial']}" for d in result.designs])
    ]
    for obj in result.objectives:
        columns.append(
            (
                axis_label(obj.name, obj.direction),
                [fmt(d["objectives"][obj.name]) for d in result.designs],
            )
        )
    objective_names = {o.name for o in result.objectives}

    def x_or(design: dict[str, Any], x_key: str, *config_path: str) -> Any:
        value = (design.get("x") or {}).get(x_key)
        return value if value is not None else _get(design, "config", *config_path)

    def device_name(d: dict[str, Any]) -> Any:
        tech = x_or(d, "x_technology", "system", "device", "technology")
        return _name(tech) if tech is not None else _name(_get(d, "config", "system", "device"))

    def memory(d: dict[str, Any]) -> str | None:
        used = _gib(_get(d, "outputs", "memory_per_device_B"))
        cap = _gib(_get(d, "outputs", "memory_capacity_B"))
        return None if used is None else f"{used} / {cap}" if cap else used

    def output(name: str, scale: float = 1.0, digits: int = 4) -> list[str | None]:
        values = [_get(d, "outputs", name) for d in result.designs]
        return [fmt(v * scale, digits) if isinstance(v, int | float) else None for v in values]

    def value(getter: Any) -> list[str | None]:
        out = []
        for d in result.designs:
            v = getter(d)
            out.append(None if v is None else fmt(v) if isinstance(v, int | float) else str(v))
        return out

    designs = result.designs
    serving = any(_get(d, "config", "workload", "kind") == "inference" for d in designs)
    for name, label, scale in (  # serving designs: their latencies and throughput first
        ("tpot_s", "TPOT (ms)", 1e3),
        ("ttft_s", "TTFT (s)", 1.0),
        ("tokens_per_s", "tokens/s", 1.0),
    ):
        if serving and name not in objective_names:
            columns.append((label, output(name, scale)))
    columns += [
        ("node / device", value(device_name)),
        (
            "DRAM",
            value(
                lambda d: _name(x_or(d, "x_dram_technology", "system", "device", "dram_technology"))
            ),
        ),
        (  # the area objective is the die area: one column
            "die area (mm²)",
            value(lambda d: x_or(d, "x_die_area_mm2", "system", "device", "die_area_mm2"))
            if "area_mm2" not in objective_names
            else [],
        ),
        ("TDP (W)", value(lambda d: x_or(d, "x_tdp_W", "system", "device", "tdp_W"))),
        ("device power (W)", output("power_W") if "power_W" not in objective_names else []),
        ("HBM stacks", value(lambda d: (d.get("x") or {}).get("x_hbm_num_stacks"))),
        ("memory used / capacity (GiB)", [memory(d) for d in designs]),
        ("mapping", [mapping_text(d) or None for d in designs]),
    ]
    for name, label, scale in (
        ("step_time_s", "step time (s)", 1.0),
        ("mfu", "MFU (%)", 100.0),
        ("energy_per_step_J", "energy per step (J)", 1.0),
        ("energy_per_step_ops_J", "energy per step, per operation (J)", 1.0),
        ("device_cost_usd", "device cost (USD)", 1.0),
    ):
        if name not in objective_names:
            columns.append((label, output(name, scale, 3 if name == "mfu" else 4)))
    kept = [(h, cells) for h, cells in columns if any(c is not None for c in cells)]
    headers = [h for h, _ in kept]
    rows = [[cells[i] or "–" for _, cells in kept] for i in range(len(designs))]
    return headers, rows


def component_label(name: str) -> str:
    """A breakdown component as a legend entry: ``tensor_parallel_comm_s`` -> ``tensor ...``."""
    return humanize(name.removesuffix("_s"))
