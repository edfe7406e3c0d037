"""Exact Gaussian process: BoTorch ``SingleTaskGP`` in float64 (one batched multi-output GP).

For up to about 2,000 rows (memory and time grow as n² and n³); inputs normalised to the unit
cube (``Normalize``), outputs standardised (``Standardize``), hyperparameters by maximising the
exact marginal likelihood. Predictions run in chunks and include the observation noise.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np

from deepflow.errors import ConfigError
from deepflow.surrogate.base import Array, Surrogate, column_range

__all__ = ["ExactGP"]


class ExactGP(Surrogate):
    """Exact GP surrogate (BoTorch ``SingleTaskGP``, Matérn-5/2 ARD kernel).

    Args:
        max_rows: refuse more training rows than this (exact GPs need O(n²) memory).
        max_iter: L-BFGS-B iterations for the hyperparameters (each costs O(n³)).
        chunk_size: rows per prediction chunk.
        random_state: seed for the optimiser's restarts.
    """

    kind = "gp"

    def __init__(
        self,
        max_rows: int = 5000,
        max_iter: int = 100,
        *,
        chunk_size: int = 2048,
        random_state: int | None = 0,
    ) -> None:
        self.max_rows = max_rows
        self.max_iter = max_iter
        self.chunk_size = chunk_size
        self.random_state = random_state

    def _build(self, X: Any, Y: Any) -> Any:
        from botorch.models import SingleTaskGP
        from botorch.models.transforms.input import Normalize
        from botorch.models.transforms.outcome import Standardize

        bounds = self._bounds(X.shape[1])
        return SingleTaskGP(
            X, Y, input_transform=Normalize(d=X.shape[1], bounds=bounds),
            outcome_transform=Standardize(m=Y.shape[1]),
        )  # fmt: skip

    def _bounds(self, p: int) -> Any:
        import torch

        lo = torch.as_tensor(self.x_lo_, dtype=torch.float64)
        return torch.stack([lo, lo + torch.as_tensor(self.x_span_, dtype=torch.float64)])

    def _fit(self, X: Array, Y: Array) -> None:
        import torch
        from botorch.fit import fit_gpytorch_mll
        from gpytorch.mlls import ExactMarginalLogLikelihood

        if X.shape[0] > self.max_rows:
            raise ConfigError(
                f"ExactGP: {X.shape[0]} rows exceed max_rows={self.max_rows} (an exact GP needs "
                "O(n²) memory); subsample (deepflow fit --max-rows 2000) or use svgp or mlp."
            )
        torch.set_num_threads(1)
        self.x_lo_, self.x_span_ = column_range(X)
        self.train_X_ = torch.as_tensor(X, dtype=torch.float64)
        self.train_Y_ = torch.as_tensor(Y, dtype=torch.float64)
        with warnings.catch_warnings(), torch.random.fork_rng():
            warnings.simplefilter("ignore")  # jitter / optimiser-retry notices (toolchain §3.1)
            torch.manual_seed(0 if self.random_state is None else self.random_state)
            model = self._build(self.train_X_, self.train_Y_)
            fit_gpytorch_mll(
                ExactMarginalLogLikelihood(model.likelihood, model),
                optimizer_kwargs={"options": {"maxiter": self.max_iter}},
            )
        model.eval()
        self.model_ = model

    def _predict(self, X: Array, return_std: bool) -> tuple[Array, Array | None]:
        import torch

        means, stds = [], []
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for start in range(0, X.shape[0], self.chunk_size):
                x = torch.as_tensor(X[start : start + self.chunk_size], dtype=torch.float64)
                post = self.model_.posterior(x, observation_noise=return_std)
                means.append(post.mean.numpy())
                if return_std:
                    stds.append(post.variance.clamp_min(0).sqrt().numpy())
        mean = np.concatenate(means) if means else np.zeros((0, self.n_outputs_))
        std = (np.concatenate(stds) if stds else np.zeros_like(mean)) if return_std else None
        return mean, std

    def _save_state(self, path: Path) -> None:
        import torch

        torch.save(
            {
                "train_X": self.train_X_, "train_Y": self.train_Y_,
                "x_lo": torch.as_tensor(self.x_lo_), "x_span": torch.as_tensor(self.x_span_),
                "model": self.model_.state_dict(),
            },
            path / "weights.pt",
        )  # fmt: skip

    def _load_state(self, path: Path) -> None:
        import torch

        state = torch.load(path / "weights.pt", weights_only=True)
        self.x_lo_ = state["x_lo"].numpy()
        self.x_span_ = state["x_span"].numpy()
        self.train_X_, self.train_Y_ = state["train_X"], state["train_Y"]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model = self._build(self.train_X_, self.train_Y_)
            model.load_state_dict(state["model"])
        model.eval()
        self.model_ = model
