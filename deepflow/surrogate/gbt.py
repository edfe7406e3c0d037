"""Gradient-boosting baseline and the feasibility classifier (scikit-learn, joblib weights).

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

__all__ = ["FeasibilityClassifier", "GradientBoosting"]

_Z95 = 1.959963984540054


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
        import joblib

        joblib.dump({"models": self.models_, "quantile_models": self.quantile_models_},
                    path / "weights.joblib")  # fmt: skip

    def _load_state(self, path: Path) -> None:
        import joblib

        state = joblib.load(path / "weights.joblib")
        self.models_ = list(state["models"])
        self.quantile_models_ = list(state["quantile_models"])


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
