"""Weights on disk without pickles: safetensors for tensors, numpy ``.npz`` for trees.

A surrogate folder holds JSON (hyperparameters, metadata), ``weights.safetensors`` (the torch
surrogates' tensors: `safetensors <https://huggingface.co/docs/safetensors>`_, a header of
names, dtypes and shapes followed by raw little-endian data) and ``*.npz`` for the gradient
boosting trees (numpy's format, read with ``allow_pickle=False``). Loading one runs no code
from the file. Folders from before (``weights.pt``, ``*.joblib``) still load.

:class:`TreeEnsemble` holds the fitted trees of a scikit-learn ``HistGradientBoosting*``
model as flat arrays and predicts what the model predicts, bit for bit: the same
comparisons (``x <= threshold``, NaN to the side learned for missing values) and the same
order of summation (the baseline, then tree by tree).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

__all__ = ["TreeEnsemble", "load_tensors", "read_state", "save_tensors"]

TENSORS = "weights.safetensors"


def save_tensors(path: Path, tensors: dict[str, Any]) -> None:
    """Write torch tensors (or arrays) to ``path/weights.safetensors``."""
    import torch
    from safetensors.torch import save_file

    save_file({k: torch.as_tensor(v).detach().cpu().contiguous() for k, v in tensors.items()},
              str(path / TENSORS))  # fmt: skip


def load_tensors(path: Path) -> dict[str, Any]:
    """The tensors of ``path/weights.safetensors`` (torch, CPU)."""
    from safetensors.torch import load_file

    return dict(load_file(str(path / TENSORS), device="cpu"))


def read_state(path: Path) -> dict[str, Any]:
    """A torch surrogate's tensors: ``weights.safetensors``, or ``weights.pt`` in a folder
    saved before (read with ``torch.load(weights_only=True)``)."""
    if (path / TENSORS).is_file() or not (path / "weights.pt").is_file():
        return load_tensors(path)
    import torch

    return dict(torch.load(path / "weights.pt", weights_only=True))


class TreeEnsemble:
    """The trees of a fitted ``HistGradientBoostingRegressor``/``Classifier`` (one output,
    binary classes), as arrays; ``predict`` and ``predict_proba`` as the model's.

    Args:
        nodes: every tree's nodes, concatenated (scikit-learn's predictor record dtype;
            children indices local to their tree).
        offsets: (num_trees + 1,) start of each tree in ``nodes``.
        baseline: the raw prediction before the first tree.
        classes: the classifier's classes (empty for a regressor).
    """

    def __init__(self, nodes: NDArray[Any], offsets: NDArray[np.int64], baseline: float,
                 classes: NDArray[Any] | None = None) -> None:  # fmt: skip
        self.nodes = nodes
        self.offsets = offsets
        self.baseline = float(baseline)
        self.classes_ = np.asarray(classes if classes is not None else [])

    @classmethod
    def from_sklearn(cls, model: Any) -> TreeEnsemble:
        """The trees of a fitted scikit-learn model (one tree per iteration: a regressor or a
        binary classifier, numeric features)."""
        if model.n_trees_per_iteration_ != 1:
            raise ValueError("only one tree per iteration (a regressor or two classes)")
        trees = [predictors[0].nodes for predictors in model._predictors]
        if any(t["is_categorical"].any() for t in trees):
            raise ValueError("categorical splits are not supported")
        sizes = np.array([0, *(len(t) for t in trees)], dtype=np.int64)
        nodes = np.concatenate(trees)
        classes = getattr(model, "classes_", None)
        return cls(nodes, np.cumsum(sizes), float(np.ravel(model._baseline_prediction)[0]),
                   classes)  # fmt: skip

    def arrays(self, prefix: str) -> dict[str, NDArray[Any]]:
        """The ensemble as named arrays (for :func:`numpy.savez`)."""
        return {f"{prefix}.nodes": self.nodes, f"{prefix}.offsets": self.offsets,
                f"{prefix}.baseline": np.array([self.baseline]),
                f"{prefix}.classes": self.classes_}  # fmt: skip

    @classmethod
    def from_arrays(cls, data: Any, prefix: str) -> TreeEnsemble:
        """Read what :meth:`arrays` wrote."""
        classes = data[f"{prefix}.classes"]
        return cls(data[f"{prefix}.nodes"], data[f"{prefix}.offsets"].astype(np.int64),
                   float(data[f"{prefix}.baseline"][0]),
                   classes if classes.size else None)  # fmt: skip

    def raw_predict(self, X: NDArray[np.float64]) -> NDArray[np.float64]:
        """The raw prediction (n,): the baseline plus each tree's leaf value, in tree order."""
        X = np.asarray(X, dtype=np.float64)
        n, num_trees = X.shape[0], len(self.offsets) - 1
        raw = np.full(n, self.baseline)
        if num_trees == 0 or n == 0:
            return raw
        nodes = self.nodes
        start = self.offsets[:-1]
        at = np.broadcast_to(start, (n, num_trees)).copy()  # global node index per (row, tree)
        rows = np.arange(n)[:, None]
        for _ in range(int(nodes["depth"].max()) + 1):
            leaf = nodes["is_leaf"][at].astype(bool)
            if leaf.all():
                break
            x = X[rows, nodes["feature_idx"][at]]
            left = np.where(np.isnan(x), nodes["missing_go_to_left"][at].astype(bool),
                            x <= nodes["num_threshold"][at])  # fmt: skip
            child = np.where(left, nodes["left"][at], nodes["right"][at]).astype(np.int64)
            at = np.where(leaf, at, start + child)
        values = nodes["value"][at]
        for t in range(num_trees):  # scikit-learn adds the trees one after the other
            raw += values[:, t]
        return raw

    def predict(self, X: NDArray[np.float64]) -> NDArray[np.float64]:
        """A regressor's prediction (identity link: squared error and quantile losses)."""
        return self.raw_predict(X)

    def predict_proba(self, X: NDArray[np.float64]) -> NDArray[np.float64]:
        """A binary classifier's (n, 2) class probabilities (logistic link)."""
        from scipy.special import expit

        p = expit(self.raw_predict(X))
        return np.column_stack([1.0 - p, p])
