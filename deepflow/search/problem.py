"""What a search evaluates: the oracle over a design space (the surrogate-assisted strategy
puts its fitted surrogate in the oracle's place, ``assisted.py``).

A problem maps (n, d) points of its unit cube to a table of the dataset's columns (``x_*``
inputs, ``y_*`` outputs, ``c_*`` constraints <= 0 feasible, ``feasible``). The oracle problem
labels them with :func:`deepflow.datasets.label.label_points`, in one vectorised call.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np
from numpy.typing import NDArray

from deepflow.datasets.io import oracle_version
from deepflow.datasets.label import decode, label_points, output_names, x_columns
from deepflow.datasets.space import DesignSpace
from deepflow.search.space import SearchSpace

__all__ = ["OracleProblem", "Problem"]

F = NDArray[np.float64]


class Problem(Protocol):
    """The interface the search engine needs."""

    search_space: SearchSpace
    constraint_names: list[str]

    def inputs(self, u: F) -> Any:
        """``x_*`` columns (a DataFrame) of (n, d) unit-cube points."""

    def evaluate(self, u: F) -> Any:
        """The dataset's columns (a DataFrame, n rows) of (n, d) unit-cube points."""

    def frame_attrs(self) -> dict[str, Any]:
        """``DataFrame.attrs`` for training data (the variables, for the surrogate encoder)."""


class OracleProblem:
    """The analytical oracle over a design space.

    Args:
        space: the design space.
    """

    def __init__(self, space: DesignSpace) -> None:
        self.space = space
        self.search_space = SearchSpace(space)
        self.constraint_names = list(output_names(space)[1])
        self.oracle_version = oracle_version()

    def inputs(self, u: F) -> Any:
        import pandas as pd

        u = np.atleast_2d(np.asarray(u, dtype=float))
        return pd.DataFrame(x_columns(self.space, decode(self.space, u), len(u)))

    def evaluate(self, u: F) -> Any:
        u = np.atleast_2d(np.asarray(u, dtype=float))
        table = label_points(self.space, u, oracle_version=self.oracle_version)
        df = table.to_pandas()
        return df.drop(columns=["sample_index", "oracle_version", "space_sha256", "seed"])

    def frame_attrs(self) -> dict[str, Any]:
        return {
            "deepflow": {
                "variables": [v.describe() for v in self.space.variables],
                "space_sha256": self.space.sha256,
                "oracle_version": self.oracle_version,
            }
        }
