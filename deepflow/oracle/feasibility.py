"""The one feasibility rule of every evaluation (show, evaluate, best-mapping, datasets, search).

A design is feasible when every constraint it has is ``<= 0`` (within the float slack of its
budget sums) and its outputs mean something: a NaN, an infinity or a non-positive step time (a
design with no clock, no memory bandwidth or no links) is never feasible, and says so in the
constraint ``invalid_output`` (the number of such outputs). NaN compares false, so a NaN
constraint is violated too. Works on floats and on arrays of n alike.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

__all__ = [
    "CONSTRAINT_TOLERANCES",
    "DESIGN_CONSTRAINTS",
    "INVALID_OUTPUT",
    "feasible",
    "invalid_output",
    "violated",
]

#: Design-budget constraints of a design-mode device (:func:`deepflow.oracle.hardware.derive`).
DESIGN_CONSTRAINTS = ("area_excess_mm2", "power_excess_W", "perimeter_excess",
                      "reticle_excess_mm2")  # fmt: skip
#: The constraint counting a result's NaN, infinite or non-positive outputs.
INVALID_OUTPUT = "invalid_output"
#: Every constraint (<= 0 feasible) and its slack: budget sums carry float noise (a split of
#: 0.3 + 0.7 parts of a budget may exceed it by an ulp), counts and capacities do not.
CONSTRAINT_TOLERANCES: Mapping[str, float] = {
    "memory_excess_B": 0.0,
    "sram_excess_B": 0.0,
    "area_excess_mm2": 1e-9,
    "power_excess_W": 1e-9,
    "perimeter_excess": 1e-12,
    "reticle_excess_mm2": 0.0,
    INVALID_OUTPUT: 0.0,
}
#: Outputs that must be finite and > 0, and those that must be finite and >= 0.
_POSITIVE = ("step_time_s",)
_NON_NEGATIVE = ("memory_per_device_B", "energy_per_step_J")


def invalid_output(outputs: Mapping[str, Any]) -> Any:
    """How many of a result's key outputs are NaN, infinite or out of sign (0: valid).

    Args:
        outputs: ``step_time_s`` (must be finite, > 0) and, where present,
            ``memory_per_device_B`` and ``energy_per_step_J`` (finite, >= 0); floats or arrays
            of n.

    Returns:
        A float, or an array of n floats.
    """
    count: Any = 0.0
    with np.errstate(invalid="ignore"):
        for name in _POSITIVE:
            v = np.asarray(outputs[name], dtype=float)
            count = count + ~(np.isfinite(v) & (v > 0))
        for name in _NON_NEGATIVE:
            if name in outputs:
                v = np.asarray(outputs[name], dtype=float)
                count = count + ~(np.isfinite(v) & (v >= 0))
    out = np.asarray(count, dtype=float)
    return float(out) if out.ndim == 0 else out


def feasible(constraints: Mapping[str, Any]) -> Any:
    """Whether every constraint in ``constraints`` (names of :data:`CONSTRAINT_TOLERANCES`,
    floats or arrays of n) holds; a NaN constraint does not. A bool, or an array of n bools."""
    ok: Any = True
    with np.errstate(invalid="ignore"):
        for name, value in constraints.items():
            ok = ok & (np.asarray(value, dtype=float) <= CONSTRAINT_TOLERANCES[name])
    out = np.asarray(ok, dtype=bool)
    return bool(out) if out.ndim == 0 else out


def violated(constraints: Mapping[str, float]) -> list[str]:
    """The names of the violated constraints of one design (empty when feasible)."""
    return [name for name, value in constraints.items() if not feasible({name: value})]
