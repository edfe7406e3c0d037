"""Re-verify the final Pareto set with the oracle and describe each design in full.

Each Pareto design is rebuilt as a complete scenario (:func:`point_scenarios`) and
evaluated alone with :func:`~deepflow.oracle.evaluate.evaluate_one`; the reported values are
these oracle values. The largest relative difference from the search's (batched) values is
returned too: the batch equals the loop of singles, so it is ~0 unless something is broken.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

from deepflow.search.objectives import Objective

__all__ = ["verify_pareto"]

F = NDArray[np.float64]


def _finite(x: Any) -> Any:
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


def _area_breakdown(device: Any) -> dict[str, float] | None:
    area = getattr(device, "area_mm2", None)
    if area is None or not hasattr(area, "__dataclass_fields__"):
        return None
    from dataclasses import asdict

    return {k: float(v) for k, v in asdict(area).items()}


def verify_pareto(
    space: Any, u: F, rows: Any, objectives: Sequence[Objective], infos: Sequence[dict[str, Any]]
) -> tuple[list[dict[str, Any]], float]:
    """Oracle re-evaluation of Pareto designs.

    Args:
        space: the design space.
        u: (n, d) unit-cube points of the Pareto designs.
        rows: their rows of the trials table (DataFrame, same order).
        objectives: the study's objectives.
        infos: per design, what proposed it (``surrogate`` predictions, if any).

    Returns:
        The designs as ``pareto.json`` lists them (sorted by the first objective) and the
        largest relative difference between the search's values and the re-evaluation.
    """
    from deepflow.config.serialize import resolved_scenario, scenario_yaml
    from deepflow.datasets.label import point_scenarios
    from deepflow.oracle.evaluate import evaluate_one
    from deepflow.oracle.hardware import device_summary

    scenarios = point_scenarios(space, u)
    designs: list[dict[str, Any]] = []
    worst = 0.0
    for i, scenario in enumerate(scenarios):
        result = evaluate_one(scenario)
        row = rows.iloc[i]
        summary = device_summary(scenario.system.device)
        outputs = {
            k: float(v)
            for k, v in result.items()
            if isinstance(v, int | float) and not isinstance(v, bool)
        }
        outputs["area_mm2"] = float(result["device"]["area_mm2"])
        outputs["power_W"] = float(result["device"]["power_W"])
        for k in ("die_cost_usd", "device_cost_usd"):
            if k in summary:
                outputs[k] = float(summary[k])
        values = {}
        for o in objectives:
            value = outputs.get(o.name, float(row[o.column]))
            values[o.name] = value
            searched = float(row[o.column])
            if math.isfinite(searched) and searched != 0:
                worst = max(worst, abs(value / searched - 1.0))
        design: dict[str, Any] = {
            "trial": int(row["trial"]),
            "objectives": values,
            "outputs": outputs,
            "constraints": {c[2:]: float(row[c]) for c in rows.columns if c.startswith("c_")},
            "feasible": bool(result["feasible"]) and bool(row["feasible"]),
            "x": {
                c: (v.item() if isinstance(v, np.generic) else v)
                for c, v in row.items()
                if str(c).startswith("x_")
            },
            "breakdown_s": {k: float(v) for k, v in result["breakdown_s"].items()},
            "config": resolved_scenario(scenario),
            "scenario": scenario_yaml(scenario),
        }
        if result["memory_breakdown_B"]:
            design["memory_breakdown_B"] = dict(result["memory_breakdown_B"])
        area = _area_breakdown(scenario.system.device)
        if area is not None:
            design["area_breakdown_mm2"] = area
        power = summary.get("power_by_component_W")
        if power:
            design["power_breakdown_W"] = {k: float(v) for k, v in power.items()}
        prediction = (infos[i] or {}).get("surrogate")
        if prediction:
            design["surrogate"] = prediction
        designs.append(_finite(design))
    first = objectives[0]
    designs.sort(key=lambda d: first.sign * (d["objectives"][first.name] or math.inf))
    return designs, worst
