"""A toy problem with a known constrained Pareto front (DTLZ2-like, mixed inputs).

Inputs: x0, x1 in [0, 1], an integer k in 0..4, a categorical in {a, b, c}.
g = (x1 - 0.5)² + (k - 2)²/4 + 0.5·[cat != b]; f1 = (1 + g)·cos(x0·π/2),
f2 = (1 + g)·sin(x0·π/2), both minimised; constraint f1 - 0.9 <= 0.
The feasible Pareto front is the quarter circle f1² + f2² = 1 with f1 <= 0.9 (g = 0).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from deepflow.search.objectives import Objective
from deepflow.search.space import Dim, SearchSpace

OBJECTIVES = (
    Objective("f1", reference=1.5, ideal=0.0),
    Objective("f2", reference=1.5, ideal=0.0),
)


def true_hypervolume() -> float:
    """Hypervolume of the feasible front in the normalised space (dense quadrature)."""
    # Normalised g = (1.5 - f) / 1.5; the front is f1 = cos t, f2 = sin t with cos t <= 0.9.
    t = np.linspace(math.acos(0.9), math.pi / 2, 200_001)
    f1, f2 = np.cos(t), np.sin(t)
    g1, g2 = (1.5 - f1) / 1.5, (1.5 - f2) / 1.5
    # Area dominated: integrate over g1 of the max g2 reachable with g1' >= g1.
    order = np.argsort(g1)
    g1s, g2s = g1[order], g2[order]
    best = np.maximum.accumulate(g2s[::-1])[::-1]
    widths = np.diff(np.concatenate([[0.0], g1s]))
    return float(np.sum(widths * best))


class ToyProblem:
    """The toy problem with the engine's Problem interface."""

    def __init__(self) -> None:
        levels5 = tuple((i + 0.5) / 5 for i in range(5))
        levels3 = tuple((i + 0.5) / 3 for i in range(3))
        self.search_space = SearchSpace.from_dims([
            Dim("x0", "continuous"),
            Dim("x1", "continuous"),
            Dim("k", "integer", levels5, tuple(range(5))),
            Dim("cat", "categorical", levels3, ("a", "b", "c")),
        ])  # fmt: skip
        self.constraint_names = ["limit"]
        self.calls = 0

    def inputs(self, u: Any) -> pd.DataFrame:
        u = np.atleast_2d(u)
        z = self.search_space.from_unit(u)
        return pd.DataFrame({
            "x_x0": u[:, 0], "x_x1": u[:, 1], "x_k": z[:, 2].astype(int),
            "x_cat": np.array(["a", "b", "c"])[z[:, 3].astype(int)],
        })  # fmt: skip

    def evaluate(self, u: Any) -> pd.DataFrame:
        self.calls += 1
        df = self.inputs(u)
        g = ((df.x_x1 - 0.5) ** 2 + (df.x_k - 2) ** 2 / 4 + 0.5 * (df.x_cat != "b")).to_numpy()
        f1 = (1 + g) * np.cos(df.x_x0.to_numpy() * np.pi / 2)
        f2 = (1 + g) * np.sin(df.x_x0.to_numpy() * np.pi / 2)
        df["y_f1"], df["y_f2"] = f1, f2
        df["c_limit"] = f1 - 0.9
        df["feasible"] = True
        return df

    def frame_attrs(self) -> dict[str, Any]:
        return {"deepflow": {"variables": []}}
