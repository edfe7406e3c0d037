"""Objectives and constraints of a search, declared once; every sign flip lives here.

Conventions:

- The oracle's outputs are stored as they are (``y_step_time_s`` in seconds, ...).
- **Minimisation form** (Optuna's hypervolume, Pareto masks): maximised objectives negated.
- **BoTorch form** (BoTorch maximises): minimised objectives negated.
- **Normalised form** (hypervolume we report): each objective mapped to [0, 1] by its
  ``reference`` (worst acceptable, -> 0) and ``ideal`` (-> 1) values, optionally in log
  space, larger is better; the reported hypervolume is the dominated share of the unit box.
- Constraints are ``<= 0`` feasible everywhere (the dataset's ``c_`` columns, user bounds
  turned into ``value - max`` or ``min - value``), scaled by :func:`constraint_scale` for
  models (a GP sees bytes and watts alike).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from deepflow.config._schema import key

__all__ = [
    "DIRECTIONS",
    "Bound",
    "Objective",
    "constraint_matrix",
    "constraint_scale",
    "from_botorch",
    "from_minimization",
    "normalise",
    "outcomes",
    "to_botorch",
    "to_minimization",
]

F = NDArray[np.float64]
DIRECTIONS = ("minimize", "maximize")

#: Scale of each oracle constraint for surrogate/GP modelling (a typical size of a violation).
_CONSTRAINT_SCALES = {
    "memory_excess_B": float(2**30),  # 1 GiB
    "area_excess_mm2": 1.0,
    "power_excess_W": 1.0,
    "perimeter_excess": 0.01,  # 1 % of the die edge
    "reticle_excess_mm2": 1.0,
    "sram_excess_B": 1024.0,  # 1 KiB
}


@dataclass(frozen=True)
class Objective:
    """One objective: an oracle output (``y_<name>`` column) and its direction.

    Attributes:
        name: the output, e.g. ``step_time_s``.
        direction: ``minimize`` or ``maximize``.
        reference: the worst acceptable value (hypervolume reference point), in its unit.
        ideal: the best value one could hope for (normalisation), in its unit.
        scale: ``linear`` or ``log``: how values are normalised for the hypervolume.
    """

    name: str = key("name", doc="an oracle output (its y_ column without the prefix)")
    direction: str = key("direction", choices=DIRECTIONS, default="minimize")
    reference: float = key("reference", default=math.nan, doc="worst acceptable value")
    ideal: float = key("ideal", default=math.nan, doc="best value hoped for")
    scale: str = key("scale", choices=("linear", "log"), default="linear")

    @property
    def column(self) -> str:
        return f"y_{self.name}"

    @property
    def sign(self) -> float:
        """+1 for minimised objectives, -1 for maximised ones (minimisation form)."""
        return 1.0 if self.direction == "minimize" else -1.0


@dataclass(frozen=True)
class Bound:
    """A user constraint on an oracle output: ``min <= y_<name> <= max`` (either may be nan)."""

    name: str = key("name", doc="an oracle output (its y_ column without the prefix)")
    min: float = key("min", default=math.nan)
    max: float = key("max", default=math.nan)

    @property
    def column(self) -> str:
        return f"y_{self.name}"

    @property
    def labels(self) -> list[str]:
        """Constraint names, one per finite side: ``<name>_max``, ``<name>_min``."""
        out = []
        if math.isfinite(self.max):
            out.append(f"{self.name}_max")
        if math.isfinite(self.min):
            out.append(f"{self.name}_min")
        return out


def _signs(objectives: Sequence[Objective]) -> F:
    return np.array([o.sign for o in objectives], dtype=float)


def to_minimization(values: F, objectives: Sequence[Objective]) -> F:
    """(n, k) objective values in their units -> minimisation form."""
    return np.asarray(values, dtype=float) * _signs(objectives)


def from_minimization(values: F, objectives: Sequence[Objective]) -> F:
    """Inverse of :func:`to_minimization`."""
    return np.asarray(values, dtype=float) * _signs(objectives)


def to_botorch(values: F, objectives: Sequence[Objective]) -> F:
    """(n, k) objective values in their units -> BoTorch's maximisation form."""
    return -to_minimization(values, objectives)


def from_botorch(values: F, objectives: Sequence[Objective]) -> F:
    """Inverse of :func:`to_botorch`."""
    return from_minimization(-np.asarray(values, dtype=float), objectives)


def normalise(values: F, objectives: Sequence[Objective]) -> F:
    """(n, k) values -> normalised form: reference -> 0, ideal -> 1, larger is better.

    Values worse than the reference come out negative; non-finite values map to -inf.
    """
    v = np.asarray(values, dtype=float)
    out = np.empty_like(v)
    for j, o in enumerate(objectives):
        ref, ideal, x = o.reference, o.ideal, v[:, j]
        if o.scale == "log":
            x = np.log(np.where(x > 0, x, np.nan))  # non-positive: not a valid value
            ref, ideal = math.log(ref), math.log(ideal)
        out[:, j] = (x - ref) / (ideal - ref)
    return np.where(np.isfinite(out), out, -np.inf)


def constraint_scale(name: str) -> float:
    """Typical violation size of a constraint (1 for user bounds, already relative)."""
    return _CONSTRAINT_SCALES.get(name, 1.0)


def constraint_matrix(
    outputs: Mapping[str, F], constraint_names: Sequence[str], bounds: Sequence[Bound]
) -> tuple[list[str], F]:
    """Every constraint (<= 0 feasible) of n designs as an (n, m) matrix in its unit.

    ``outputs`` holds the dataset's ``c_*`` and ``y_*`` columns; the oracle's constraints
    come first, then the user bounds as relative excesses ``(y - max) / |max|`` and
    ``(min - y) / |min|``. Non-finite values count as violated (+inf).
    """
    names: list[str] = []
    cols: list[F] = []
    for c in constraint_names:
        names.append(c)
        cols.append(np.asarray(outputs[f"c_{c}"], dtype=float))
    for b in bounds:
        y = np.asarray(outputs[b.column], dtype=float)
        if math.isfinite(b.max):
            names.append(f"{b.name}_max")
            cols.append((y - b.max) / max(abs(b.max), 1e-300))
        if math.isfinite(b.min):
            names.append(f"{b.name}_min")
            cols.append((b.min - y) / max(abs(b.min), 1e-300))
    if not cols:
        return names, np.zeros((0, 0))
    m = np.stack(cols, axis=1)
    return names, np.where(np.isnan(m), np.inf, m)


def outcomes(
    rows: Any,
    objectives: Sequence[Objective],
    constraint_names: Sequence[str],
    bounds: Sequence[Bound],
) -> tuple[F, list[str], F, NDArray[np.bool_]]:
    """Objective values, constraints and feasibility of evaluated designs.

    Args:
        rows: the dataset's columns of n designs (a DataFrame: ``y_*``, ``c_*``, ``feasible``).
        objectives: the k objectives.
        constraint_names: the oracle's constraints (``c_`` columns without the prefix).
        bounds: user bounds.

    Returns:
        (n, k) values in their units, the m constraint names, the (n, m) constraints
        (:func:`constraint_matrix`) and (n,) feasibility: the oracle's ``feasible`` and
        every constraint <= 0.
    """
    cols = {c: rows[c].to_numpy(dtype=float) for c in rows.columns if c.startswith(("c_", "y_"))}
    names, c = constraint_matrix(cols, constraint_names, bounds)
    c = c.reshape(len(rows), len(names))
    values = np.stack([rows[o.column].to_numpy(dtype=float) for o in objectives], axis=1)
    ok = rows["feasible"].to_numpy(dtype=bool).copy()
    if c.size:
        ok &= (c <= 0).all(axis=1)
    return values, names, c, ok
