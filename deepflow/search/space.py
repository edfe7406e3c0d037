"""A design space as searchers see it: one dimension per unit-cube coordinate, typed.

The design space (:mod:`deepflow.datasets.space`) maps its unit cube [0, 1]^d to designs. A
searcher works in the **native** coordinates ``z`` of the same d dimensions:

- ``continuous`` (continuous variables, simplex coordinates, a mapping index whose number of
  valid mappings varies across designs): ``z = u`` in [0, 1];
- ``integer`` (integer variables, the mapping index over a fixed table of valid mappings):
  ``z`` = level index 0..L-1, ordered;
- ``categorical`` (categorical variables): ``z`` = choice index 0..L-1, unordered.

Level i of a discrete dimension is the unit-cube value at the middle of the interval that
decodes to it, so ``decode(to_unit(z))`` gives exactly level i. Ordered (integer) dims also
carry each level's **coordinates**, what the level means as numbers, for local moves: an
integer variable's unit-cube value, and for the mapping index the log2 of each degree that
varies in the table (tensor, pipeline, data parallel, micro-batch), scaled so the table's
widest degree spans 1 (the index order when the tables differ between designs). Neighbouring
mappings (one degree doubled, another halved) are then close, although their indices are far
apart. Optuna sees the same dimensions as parameters (floats in [0, 1], integers by their
values, categoricals by their labels); BoTorch sees ``z`` with ``discrete_dims`` and
``cat_dims``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from deepflow.datasets.space import STRUCTURAL as _STRUCTURAL
from deepflow.datasets.space import DesignSpace

__all__ = ["Budgets", "Dim", "SearchSpace"]

F = NDArray[np.float64]


@dataclass(frozen=True)
class Dim:
    """One searched dimension.

    Attributes:
        name: the Optuna parameter name (the variable's name; ``split[j]`` for simplex
            coordinates; ``mapping`` for the index over valid mappings).
        kind: ``continuous``, ``integer`` or ``categorical``.
        levels_u: discrete dims: the unit-cube value of each level.
        labels: discrete dims: the value shown to Optuna for each level (the integer, or the
            choice as a string/bool/number).
        coords: integer dims: one tuple of numbers per level, the level's meaning (see the
            module docstring); empty for continuous and categorical dims (and for integer
            dims made with :meth:`SearchSpace.from_dims` without them: their cube values).
    """

    name: str
    kind: str
    levels_u: tuple[float, ...] = ()
    labels: tuple[Any, ...] = ()
    coords: tuple[tuple[float, ...], ...] = ()

    @property
    def num_levels(self) -> int:
        return len(self.levels_u)


def _integer_levels(low: int, high: int, log: bool) -> tuple[float, ...]:
    """Middle of the unit-cube interval that decode_integer maps to each of low..high."""
    if not log:
        count = high - low + 1
        return tuple((i + 0.5) / count for i in range(count))
    span = math.log(high + 1.0) - math.log(low)
    return tuple(
        (0.5 * (math.log(v) + math.log(v + 1.0)) - math.log(low)) / span
        for v in range(low, high + 1)
    )


def _mapping_coords(table: NDArray[np.int64]) -> tuple[tuple[float, ...], ...]:
    """Per row of a mapping table: log2 of each degree that varies, scaled so that the
    widest degree spans [0, 1] (a doubling is the same step for every degree)."""
    logs = np.log2(np.maximum(np.asarray(table, dtype=float), 1.0))
    logs = logs[:, np.ptp(logs, axis=0) > 0]
    if logs.shape[1] == 0:
        return tuple(() for _ in range(len(table)))
    logs = (logs - logs.min(axis=0)) / np.ptp(logs, axis=0).max()
    return tuple(tuple(float(v) for v in row) for row in logs)


def _label(choice: Any) -> Any:
    """A categorical choice as Optuna stores it (None, bool, int, float or str)."""
    if choice is None or isinstance(choice, bool | int | float | str):
        return choice
    return str(getattr(choice, "name", choice))


class SearchSpace:
    """The typed dimensions of a :class:`DesignSpace`'s unit cube.

    Args:
        space: the design space.
    """

    def __init__(self, space: DesignSpace) -> None:
        self.space = space
        dims: list[Dim] = []
        for v in space.variables:
            d = v.num_dims
            if d == 0:
                continue
            if v.type == "continuous":
                dims.append(Dim(v.name, "continuous"))
            elif v.type == "simplex":
                dims.extend(Dim(f"{v.name}[{j}]", "continuous") for j in range(d))
            elif v.type == "integer":
                low, high = int(v.low), int(v.high)
                levels = _integer_levels(low, high, v.scale == "log")
                coords = tuple((u,) for u in levels)
                dims.append(Dim(v.name, "integer", levels, tuple(range(low, high + 1)), coords))
            else:
                count = len(v.choices)
                levels = tuple((i + 0.5) / count for i in range(count))
                dims.append(Dim(v.name, "categorical", levels, tuple(_label(c) for c in v.choices)))
        if space.base_is_transformer and space.has_mapping_dim:
            sizes = {len(t) for t in space.mapping_tables.values()}
            if len(sizes) == 1:
                count = sizes.pop()
                levels = tuple((i + 0.5) / count for i in range(count))
                # Coordinates only when every table holds the same rows (then index i means
                # the same mapping in every design); otherwise the index order.
                tables = list(space.mapping_tables.values())
                same = all(np.array_equal(t, tables[0]) for t in tables[1:])
                mapping_coords = _mapping_coords(tables[0]) if same else tuple((u,) for u in levels)
                dims.append(Dim("mapping", "integer", levels, tuple(range(count)), mapping_coords))
            else:
                dims.append(Dim("mapping", "continuous"))
        if len(dims) != space.num_dims:  # pragma: no cover - a bug, not user input
            raise RuntimeError(f"search space has {len(dims)} dims, the cube {space.num_dims}")
        self.dims: tuple[Dim, ...] = tuple(dims)
        self._physical: dict[str, Any] | None = None

    @classmethod
    def from_dims(cls, dims: Sequence[Dim]) -> SearchSpace:
        """A search space of given dimensions (no design space: toy problems, tests)."""
        obj = cls.__new__(cls)
        obj.space = None  # type: ignore[assignment]
        obj.dims = tuple(dims)
        obj._physical = None
        return obj

    @property
    def num_dims(self) -> int:
        return len(self.dims)

    # ------------------------------------------------------------------ z <-> u
    def to_unit(self, z: F) -> F:
        """(n, d) native coordinates -> unit cube (discrete levels snapped)."""
        z = np.atleast_2d(np.asarray(z, dtype=float))
        u = np.empty_like(z)
        for j, dim in enumerate(self.dims):
            if dim.kind == "continuous":
                u[:, j] = np.clip(z[:, j], 0.0, 1.0)
            else:
                idx = np.clip(np.rint(z[:, j]), 0, dim.num_levels - 1).astype(np.int64)
                u[:, j] = np.asarray(dim.levels_u)[idx]
        return u

    def from_unit(self, u: F) -> F:
        """(n, d) unit cube -> native coordinates (discrete dims: the level decoded)."""
        u = np.atleast_2d(np.asarray(u, dtype=float))
        z = np.empty_like(u)
        for j, dim in enumerate(self.dims):
            if dim.kind == "continuous":
                z[:, j] = u[:, j]
            else:
                edges = np.asarray(dim.levels_u)
                # the level whose middle is closest (levels tile [0, 1] in order)
                z[:, j] = np.abs(u[:, j][:, None] - edges[None, :]).argmin(axis=1)
        return z

    # ------------------------------------------------------------------ BoTorch
    def bounds(self) -> F:
        """(2, d) bounds of the native coordinates."""
        hi = [1.0 if d.kind == "continuous" else float(d.num_levels - 1) for d in self.dims]
        return np.array([[0.0] * self.num_dims, hi])

    def discrete_dims(self) -> dict[int, list[float]]:
        """Ordered integer dims -> their allowed values (BoTorch ``discrete_dims``)."""
        return {
            j: [float(i) for i in range(d.num_levels)]
            for j, d in enumerate(self.dims)
            if d.kind == "integer"
        }

    def cat_dims(self) -> dict[int, list[float]]:
        """Categorical dims -> their allowed values (BoTorch ``cat_dims``)."""
        return {
            j: [float(i) for i in range(d.num_levels)]
            for j, d in enumerate(self.dims)
            if d.kind == "categorical"
        }

    # ------------------------------------------------------------------ Optuna
    def distributions(self) -> dict[str, Any]:
        """Optuna distributions, one per dimension."""
        from optuna.distributions import (
            CategoricalDistribution,
            FloatDistribution,
            IntDistribution,
        )

        out: dict[str, Any] = {}
        for d in self.dims:
            if d.kind == "continuous":
                out[d.name] = FloatDistribution(0.0, 1.0)
            elif d.kind == "integer":
                out[d.name] = IntDistribution(int(d.labels[0]), int(d.labels[-1]))
            else:
                out[d.name] = CategoricalDistribution(list(d.labels))
        return out

    def param_distributions(self) -> dict[str, Any]:
        """Optuna distributions of the stored trials: the design's physical values, one per
        ``x_`` column without the prefix (``die_area_mm2`` in mm², ``tdp_W`` log-scaled,
        ``technology`` by name, each mapping degree on its own: ``tensor_parallel``, ...).
        A space without a design space (toy problems) stores its native parameters."""
        from optuna.distributions import (
            CategoricalDistribution,
            FloatDistribution,
            IntDistribution,
        )

        if self.space is None:
            return self.distributions()
        if self._physical is not None:
            return self._physical
        space = self.space
        by_name = space.by_name
        tables = list(space.mapping_tables.values())
        out: dict[str, Any] = {}
        for column in space.x_columns():
            name = column.removeprefix("x_")
            v = by_name.get(name)
            if v is None or v.type == "simplex":
                if name in _STRUCTURAL and tables:
                    col = _STRUCTURAL.index(name)
                    low = int(min(t[:, col].min() for t in tables))
                    high = int(max(t[:, col].max() for t in tables))
                    out[name] = IntDistribution(low, high, log=low >= 1 and high > low)
                else:  # a simplex part: a fraction
                    out[name] = FloatDistribution(0.0, 1.0)
            elif v.type == "continuous":
                out[name] = FloatDistribution(float(v.low), float(v.high), log=v.scale == "log")
            elif v.type == "integer":
                low, high = int(v.low), int(v.high)
                out[name] = IntDistribution(low, high, log=v.scale == "log" and low >= 1)
            else:
                out[name] = CategoricalDistribution([_label(c) for c in v.candidates()])
        self._physical = out
        return out

    def physical_params(self, z: F, inputs: Any) -> list[dict[str, Any]]:
        """Per design, the stored trial's parameters (see :meth:`param_distributions`).

        Args:
            z: (n, d) native coordinates.
            inputs: the designs' ``x_`` columns (a DataFrame of n rows), as
                :meth:`~deepflow.search.problem.Problem.inputs` gives them.
        """
        from optuna.distributions import CategoricalDistribution, IntDistribution

        if self.space is None:
            return [self.to_params(row) for row in np.atleast_2d(z)]
        dists = self.param_distributions()
        out = []
        for record in inputs.to_dict("records"):
            params: dict[str, Any] = {}
            for name, dist in dists.items():
                value = record[f"x_{name}"]
                if isinstance(value, np.generic):
                    value = value.item()
                if isinstance(dist, CategoricalDistribution):
                    value = _label(value)
                elif isinstance(dist, IntDistribution):
                    value = int(value)
                else:
                    value = float(value)
                params[name] = value
            out.append(params)
        return out

    def to_params(self, z_row: Sequence[float]) -> dict[str, Any]:
        """One native point -> Optuna parameters."""
        out: dict[str, Any] = {}
        for d, value in zip(self.dims, z_row, strict=True):
            if d.kind == "continuous":
                out[d.name] = float(min(max(value, 0.0), 1.0))
            else:
                out[d.name] = d.labels[int(np.clip(round(float(value)), 0, d.num_levels - 1))]
        return out

    def from_params(self, params: Mapping[str, Any]) -> F:
        """Optuna parameters -> one native point (d,)."""
        z = np.empty(self.num_dims)
        for j, d in enumerate(self.dims):
            value = params[d.name]
            z[j] = float(value) if d.kind == "continuous" else float(d.labels.index(value))
        return z


class Budgets:
    """The continuous variables of a search space as budget coordinates θ.

    Box coordinates are the continuous dims' unit-cube values (clipped to [0, 1]); each
    simplex variable contributes its k parts (their own bounds, summing to 1). A search space
    without a design space (toy problems) has box coordinates only. A continuous ``mapping``
    index is not a budget (it selects a mapping).

    Args:
        search_space: the typed dims.
    """

    def __init__(self, search_space: SearchSpace) -> None:
        self.search_space = search_space
        #: (kind, z columns, low, high) per block: "box" (one column) or "simplex".
        self.blocks: list[tuple[str, list[int], F, F]] = []
        space = search_space.space
        col = 0
        if space is not None:
            for v in space.variables:
                d = v.num_dims
                if v.type == "simplex" and d:
                    lo, hi = np.asarray(v.part_low, float), np.asarray(v.part_high, float)
                    self.blocks.append(("simplex", list(range(col, col + d)), lo, hi))
                elif v.type == "continuous" and d:
                    self.blocks.append(("box", [col], np.zeros(1), np.ones(1)))
                col += d
        else:
            for j, dim in enumerate(search_space.dims):
                if dim.kind == "continuous":
                    self.blocks.append(("box", [j], np.zeros(1), np.ones(1)))
        self.width = sum(1 if k == "box" else len(lo) for k, _, lo, _ in self.blocks)
        #: z columns that are budget coordinates' (the rest are the design's family)
        self.columns = sorted(c for _, cols, _, _ in self.blocks for c in cols)

    def theta(self, z: F) -> F:
        """(n, d) native coordinates -> (n, width) budget coordinates."""
        from deepflow.datasets.samplers import decode_simplex

        z = np.atleast_2d(z)
        parts = []
        for kind, cols, lo, hi in self.blocks:
            u = np.clip(z[:, cols], 0.0, 1.0)
            parts.append(u if kind == "box" else decode_simplex(u, lo.tolist(), hi.tolist()))
        return np.hstack(parts) if parts else np.empty((len(z), 0))

    def to_z(self, theta: F, base: F) -> F:
        """Budget coordinates (n, width) into copies of native rows ``base`` (n, d)."""
        from deepflow.datasets.samplers import encode_simplex

        z = np.array(np.atleast_2d(base), dtype=float)
        at = 0
        for kind, cols, lo, hi in self.blocks:
            k = 1 if kind == "box" else len(lo)
            block = theta[:, at : at + k]
            z[:, cols] = (
                np.clip(block, 0.0, 1.0)
                if kind == "box"
                else encode_simplex(block, lo.tolist(), hi.tolist())
            )
            at += k
        return z

    def project(self, theta: F) -> F:
        """Rows of θ onto the box and the bounded simplices."""
        from deepflow.datasets.samplers import project_simplex

        out = np.array(np.atleast_2d(theta), dtype=float)
        at = 0
        for kind, _, lo, hi in self.blocks:
            k = 1 if kind == "box" else len(lo)
            block = out[:, at : at + k]
            out[:, at : at + k] = np.clip(block, 0.0, 1.0) if kind == "box" else (
                project_simplex(block, lo.tolist(), hi.tolist()))  # fmt: skip
            at += k
        return out

    def scales(self) -> F:
        """(width,) each coordinate's range: 1 for box coordinates, high - low for parts."""
        return np.concatenate([np.ones(1) if kind == "box" else hi - lo
                               for kind, _, lo, hi in self.blocks] or [np.zeros(0)])  # fmt: skip

    def descent(self, gradient: F) -> F:
        """The steepest-descent direction for a gradient (width,) in range units: −S²g with
        S the ranges, each simplex block's sum removed in the same metric (the parts keep
        summing to 1), of unit length ``|S⁻¹ δ| = 1`` (all zeros without a descent)."""
        scales = self.scales()
        delta = -(scales**2) * gradient
        at = 0
        for kind, _, lo, _ in self.blocks:
            k = 1 if kind == "box" else len(lo)
            if kind == "simplex":
                s2 = scales[at : at + k] ** 2
                block = delta[at : at + k]
                delta[at : at + k] = block - s2 * block.sum() / max(s2.sum(), 1e-300)
            at += k
        size = float(np.linalg.norm(np.divide(delta, scales, out=np.zeros_like(delta),
                                              where=scales > 0)))  # fmt: skip
        return delta / size if size > 1e-300 and np.isfinite(size) else np.zeros_like(delta)

    def directions(self) -> F:
        """(width, width) probe directions: e_j for box coordinates, e_i − 1/k for the k
        parts of a simplex (they sum to the projector onto its plane)."""
        out = np.zeros((self.width, self.width))
        at = 0
        for kind, _, lo, _ in self.blocks:
            k = 1 if kind == "box" else len(lo)
            out[at : at + k, at : at + k] = np.eye(k) - (0.0 if kind == "box" else 1.0 / k)
            at += k
        return out
