"""Gradient-boosting baseline and the feasibility classifier (scikit-learn; trees saved as
numpy arrays, :class:`~deepflow.surrogate.weights.TreeEnsemble`).

``GradientBoosting`` fits one ``HistGradientBoostingRegressor`` per output for the mean and,
with ``quantiles=True``, two quantile models (2.5 % and 97.5 %) whose gap gives the std of a
normal with the same 95 % interval.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray
from sklearn.base import BaseEstimator
from sklearn.utils.validation import check_is_fitted

from deepflow.errors import ConfigError
from deepflow.surrogate.base import Array, Surrogate, check_X
from deepflow.surrogate.weights import TreeEnsemble

__all__ = ["FeasibilityClassifier", "GradientBoosting"]

_Z95 = 1.959963984540054
#: The trees of a saved GradientBoosting / FeasibilityClassifier (numpy, no pickle).
TREES = "trees.npz"


class GradientBoosting(Surrogate):
    """One histogram gradient-boosting regressor per output (std from quantile models).

    Args:
        max_iter: boosting rounds.
        learning_rate: shrinkage.
        max_leaf_nodes: leaves per tree.
        quantiles: also fit the 2.5 %/97.5 % quantile models (needed for ``return_std``).
        random_state: seed.
    """

    kind = "gbt"

    def __init__(
        self,
        max_iter: int = 300,
        learning_rate: float = 0.1,
        *,
        max_leaf_nodes: int = 31,
        quantiles: bool = True,
        random_state: int | None = 0,
    ) -> None:
        self.max_iter = max_iter
        self.learning_rate = learning_rate
        self.max_leaf_nodes = max_leaf_nodes
        self.quantiles = quantiles
        self.random_state = random_state

    def _make(self, **kw: Any) -> Any:
        from sklearn.ensemble import HistGradientBoostingRegressor

        return HistGradientBoostingRegressor(
            max_iter=self.max_iter, learning_rate=self.learning_rate,
            max_leaf_nodes=self.max_leaf_nodes, early_stopping=False,
            random_state=self.random_state, **kw,
        )  # fmt: skip

    def _fit(self, X: Array, Y: Array) -> None:
        self.models_ = [self._make().fit(X, Y[:, j]) for j in range(Y.shape[1])]
        self.quantile_models_: list[tuple[Any, Any]] = []
        if self.quantiles:
            for j in range(Y.shape[1]):
                lo = self._make(loss="quantile", quantile=0.025).fit(X, Y[:, j])
                hi = self._make(loss="quantile", quantile=0.975).fit(X, Y[:, j])
                self.quantile_models_.append((lo, hi))

    def _predict(self, X: Array, return_std: bool) -> tuple[Array, Array | None]:
        mean = np.column_stack([m.predict(X) for m in self.models_])
        if not return_std:
            return mean, None
        if not self.quantile_models_:
            raise ConfigError("GradientBoosting(quantiles=False) has no std; refit with quantiles.")
        std = np.column_stack(
            [np.abs(hi.predict(X) - lo.predict(X)) / (2 * _Z95) for lo, hi in self.quantile_models_]
        )
        return mean, std

    def _save_state(self, path: Path) -> None:
        arrays: dict[str, Any] = {}
        for j, model in enumerate(self.models_):
            arrays.update(TreeEnsemble.from_sklearn(model).arrays(f"mean{j}"))
        for j, (lo, hi) in enumerate(self.quantile_models_):
            arrays.update(TreeEnsemble.from_sklearn(lo).arrays(f"lo{j}"))
            arrays.update(TreeEnsemble.from_sklearn(hi).arrays(f"hi{j}"))
        np.savez(path / TREES, **arrays)

    def _load_state(self, path: Path) -> None:
        if not (path / TREES).is_file() and (path / "weights.joblib").is_file():
            import joblib  # a folder saved before the weights were arrays

            state = joblib.load(path / "weights.joblib")
            self.models_ = list(state["models"])
            self.quantile_models_ = list(state["quantile_models"])
            return
        # np.load is handed an open file: it leaks its own on a damaged archive
        with open(path / TREES, "rb") as fh, np.load(fh, allow_pickle=False) as data:
            self.models_ = [TreeEnsemble.from_arrays(data, f"mean{j}")
                            for j in range(self.n_outputs_)]  # fmt: skip
            self.quantile_models_ = [
                (TreeEnsemble.from_arrays(data, f"lo{j}"), TreeEnsemble.from_arrays(data, f"hi{j}"))
                for j in range(self.n_outputs_) if f"lo{j}.nodes" in data.files
            ]  # fmt: skip


class FeasibilityClassifier(BaseEstimator):
    """P(feasible | x) with a histogram gradient-boosting classifier.

    ``predict(X)`` returns booleans, ``predict_proba(X)`` the probability of ``True``; a
    training set with one class only gives that class with probability 1 or 0.
    """

    def __init__(self, max_iter: int = 200, *, random_state: int | None = 0) -> None:
        self.max_iter = max_iter
        self.random_state = random_state

    def fit(self, X: Any, y: Any) -> FeasibilityClassifier:
        from sklearn.ensemble import HistGradientBoostingClassifier

        Xa = check_X(X)
        ya = np.asarray(y).astype(bool)
        if ya.ndim != 1 or ya.shape[0] != Xa.shape[0]:
            raise ConfigError(f"y must be 1-D of length {Xa.shape[0]}; got shape {ya.shape}.")
        self.n_features_in_ = Xa.shape[1]
        self.constant_: bool | None = bool(ya[0]) if ya.all() or not ya.any() else None
        self.model_ = None
        if self.constant_ is None:
            self.model_ = HistGradientBoostingClassifier(
                max_iter=self.max_iter, early_stopping=False, random_state=self.random_state
            ).fit(Xa, ya)
        return self

    def predict_proba(self, X: Any) -> NDArray[np.float64]:
        """P(feasible), shape (n,)."""
        check_is_fitted(self, "n_features_in_")
        Xa = check_X(X, self.n_features_in_)
        if self.model_ is None:
            return np.full(Xa.shape[0], 1.0 if self.constant_ else 0.0)
        classes = list(self.model_.classes_)
        return np.asarray(self.model_.predict_proba(Xa)[:, classes.index(True)], dtype=float)

    def predict(self, X: Any) -> NDArray[np.bool_]:
        return self.predict_proba(X) >= 0.5

    def save(self, path: Path) -> None:
        """Write the fitted classifier to the ``.npz`` file ``path`` (no pickle)."""
        check_is_fitted(self, "n_features_in_")
        arrays: dict[str, Any] = {
            "n_features_in": np.array([self.n_features_in_]),
            "constant": np.array([-1 if self.constant_ is None else int(self.constant_)]),
            "params": np.array([self.max_iter, -1 if self.random_state is None
                                else self.random_state]),
        }  # fmt: skip
        if self.model_ is not None:
            arrays.update(TreeEnsemble.from_sklearn(self.model_).arrays("model"))
        np.savez(path, **arrays)

    @classmethod
    def load(cls, path: Path) -> FeasibilityClassifier:
        """Read what :meth:`save` wrote."""
        with open(path, "rb") as fh, np.load(fh, allow_pickle=False) as data:
            max_iter, seed = (int(v) for v in data["params"])
            out = cls(max_iter, random_state=None if seed < 0 else seed)
            out.n_features_in_ = int(data["n_features_in"][0])
            constant = int(data["constant"][0])
            out.constant_ = None if constant < 0 else bool(constant)
            out.model_ = TreeEnsemble.from_arrays(data, "model") if (
                "model.nodes" in data.files) else None  # fmt: skip
        return out
