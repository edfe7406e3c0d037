"""The scikit-learn-style base every surrogate shares: input checks, fitted checks, save/load.

A surrogate works on encoded arrays (see :mod:`deepflow.surrogate.encoding`): ``X`` of shape
(n, p), ``Y`` of shape (n, q) or (n,). ``fit(X, Y)`` returns ``self``; ``predict(X)`` returns
the mean with ``Y``'s number of dimensions, ``predict(X, return_std=True)`` also the predictive
standard deviation in the same (transformed) space.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray
from sklearn.base import BaseEstimator
from sklearn.utils.validation import check_is_fitted

from deepflow.errors import ConfigError

__all__ = ["Surrogate", "check_X", "check_XY"]

Array = NDArray[np.float64]


def check_X(X: Any, num_features: int | None = None) -> Array:
    """``X`` as a finite 2-D float64 array (n, p).

    Raises:
        ConfigError: a 1-D array (with the reshape that fixes it), NaN/inf, or the wrong width.
    """
    arr = np.asarray(X, dtype=np.float64)
    if arr.ndim != 2:
        raise ConfigError(
            f"X must be 2-D (n_samples, n_features); got shape {arr.shape}. Use "
            "X.reshape(1, -1) for a single sample or X.reshape(-1, 1) for a single feature."
        )
    if not np.isfinite(arr).all():
        raise ConfigError("X has NaN or infinite values.")
    if num_features is not None and arr.shape[1] != num_features:
        raise ConfigError(f"X has {arr.shape[1]} features; the model was fitted on {num_features}.")
    return arr


def check_XY(X: Any, Y: Any) -> tuple[Array, Array, bool]:
    """``X`` (n, p) and ``Y`` as (n, q); the flag says ``Y`` was 1-D."""
    Xa = check_X(X)
    Ya = np.asarray(Y, dtype=np.float64)
    one_d = Ya.ndim == 1
    if one_d:
        Ya = Ya[:, None]
    if Ya.ndim != 2 or Ya.shape[0] != Xa.shape[0]:
        raise ConfigError(f"Y must be (n_samples,) or (n_samples, n_targets) with n = "
                          f"{Xa.shape[0]}; got shape {np.shape(Y)}.")  # fmt: skip
    if not np.isfinite(Ya).all():
        raise ConfigError("Y has NaN or infinite values; drop those rows first.")
    if Xa.shape[0] < 2:
        raise ConfigError(f"need at least 2 training rows; got {Xa.shape[0]}.")
    return Xa, Ya, one_d


class Surrogate(BaseEstimator, ABC):
    """Base class: subclasses implement ``_fit``, ``_predict`` and the state hooks."""

    #: Name used by the CLI and in saved metadata.
    kind: str = ""
    #: Whether :meth:`predict_torch` propagates gradients to its input (torch autograd).
    differentiable: bool = False

    def fit(self, X: Any, Y: Any) -> Surrogate:
        """Fit on ``X`` (n, p) and ``Y`` (n, q) or (n,); returns ``self``."""
        Xa, Ya, one_d = check_XY(X, Y)
        self._fit(Xa, Ya)
        self.n_features_in_ = Xa.shape[1]
        self.n_outputs_ = Ya.shape[1]
        self.y_1d_ = one_d
        return self

    def predict(self, X: Any, return_std: bool = False) -> Any:
        """Mean (n, q) (or (n,) if fitted on 1-D ``Y``); with ``return_std``, also the std.

        Raises:
            NotFittedError: before ``fit``.
            ConfigError: ``X`` not 2-D or of the wrong width.
        """
        check_is_fitted(self, "n_features_in_")
        Xa = check_X(X, self.n_features_in_)
        mean, std = self._predict(Xa, return_std)
        if self.y_1d_:
            mean = mean[:, 0]
            std = None if std is None else std[:, 0]
        return (mean, std) if return_std else mean

    def predict_torch(self, X: Any) -> tuple[Any, Any]:
        """Mean and std, each (n, q) (2-D even if fitted on 1-D ``Y``), as torch tensors.

        The values equal :meth:`predict`'s (``return_std=True``). Surrogates with
        ``differentiable = True`` (the MLP ensemble, the GPs) compute them with torch
        operations, so gradients flow back to ``X``; the others predict with numpy and return
        tensors without a gradient. ``X`` is an (n, p) float tensor of encoded features.

        Raises:
            NotFittedError: before ``fit``.
            ConfigError: ``X`` not 2-D or of the wrong width.
        """
        check_is_fitted(self, "n_features_in_")
        if X.ndim != 2 or X.shape[1] != self.n_features_in_:
            raise ConfigError(
                f"X must have shape (n, {self.n_features_in_}); got {tuple(X.shape)}."
            )
        mean, std = self._predict_torch(X)
        return mean.to(X.dtype), std.to(X.dtype)

    def _predict_torch(self, X: Any) -> tuple[Any, Any]:
        """Default: numpy :meth:`_predict`, no gradient."""
        import torch

        mean, std = self._predict(check_X(X.detach().cpu().numpy(), self.n_features_in_), True)
        return torch.as_tensor(mean), torch.as_tensor(std)

    # ---------------------------------------------------------------- subclass hooks
    @abstractmethod
    def _fit(self, X: Array, Y: Array) -> None: ...

    @abstractmethod
    def _predict(self, X: Array, return_std: bool) -> tuple[Array, Array | None]: ...

    @abstractmethod
    def _save_state(self, path: Path) -> None:
        """Write the learned state (weights) into the folder ``path``."""

    @abstractmethod
    def _load_state(self, path: Path) -> None:
        """Read what ``_save_state`` wrote; set the learned attributes."""

    # ---------------------------------------------------------------- persistence
    def save(self, path: str | Path) -> None:
        """Write hyperparameters (JSON) and weights into the folder ``path``."""
        check_is_fitted(self, "n_features_in_")
        p = Path(path)
        p.mkdir(parents=True, exist_ok=True)
        meta = {
            "kind": self.kind,
            "params": self.get_params(),
            "n_features_in": self.n_features_in_,
            "n_outputs": self.n_outputs_,
            "y_1d": self.y_1d_,
        }
        self._save_state(p)
        (p / "surrogate.json").write_text(json.dumps(meta, indent=2), encoding="utf-8")

    @classmethod
    def load(cls, path: str | Path) -> Surrogate:
        """Read a surrogate written by :meth:`save` (any kind, when called on the base).

        Raises:
            ConfigError: the folder is missing, incomplete or corrupted.
        """
        from deepflow.surrogate.registry import surrogate_class

        p = Path(path)
        meta = read_json(p / "surrogate.json")
        try:
            klass = surrogate_class(str(meta["kind"])) if cls is Surrogate else cls
            model = klass(**meta["params"])
            model.n_features_in_ = int(meta["n_features_in"])
            model.n_outputs_ = int(meta["n_outputs"])
            model.y_1d_ = bool(meta["y_1d"])
        except (KeyError, TypeError, ValueError) as exc:
            raise ConfigError(f"{p}: corrupted surrogate metadata ({exc}).") from exc
        try:
            model._load_state(p)
        except ConfigError:
            raise
        except Exception as exc:  # torch/joblib raise many types for damaged files
            raise ConfigError(
                f"{p}: cannot read the surrogate's weights ({str(exc) or type(exc).__name__}); "
                "the file is damaged: refit the model."
            ) from exc
        return model


def read_json(path: Path) -> dict[str, Any]:
    """A JSON object from ``path``, or a ConfigError naming the file."""
    if not path.parent.is_dir():
        raise ConfigError(f"{path.parent}: no such surrogate directory.")
    if not path.is_file():
        raise ConfigError(f"{path.parent}: not a saved surrogate (no {path.name}).")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: corrupted ({exc}).") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: corrupted (expected a JSON object).")
    return data


def column_range(X: Array) -> tuple[Array, Array]:
    """Per-column minimum and span (1 for constant columns), for unit-cube scaling."""
    lo = X.min(axis=0)
    span = X.max(axis=0) - lo
    return lo, np.where(span > 0, span, 1.0)


def standardise(Y: Array) -> tuple[Array, Array, Array]:
    """``(Y - mean) / std`` per column, with std 1 for constant columns."""
    mean = Y.mean(axis=0)
    std = Y.std(axis=0)
    std = np.where(std > 1e-12 * np.maximum(np.abs(mean), 1.0), std, 1.0)
    return (Y - mean) / std, mean, std
