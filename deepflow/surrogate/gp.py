"""Exact Gaussian process: BoTorch ``SingleTaskGP`` in float64 (one batched multi-output GP).

For up to a few thousand rows (memory and time grow as n² and n³); inputs normalised to the
unit cube (``Normalize``), outputs standardised (``Standardize``). The hyperparameters maximise
the exact marginal likelihood (Cholesky, not GPyTorch's iterative solvers, which are slow and
noisy here) of a random subset of ``hyperparameter_rows`` rows, warm-started on half of them;
the GP then conditions on every row with them (one Cholesky factorisation), the usual
subset-of-data trick for hyperparameters [Rasmussen & Williams 2006, §8.3.3]. Predictions run
in chunks and include the observation noise.
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
    """Exact GP surrogate (BoTorch ``SingleTaskGP``: its default RBF ARD kernel with the
    dimension-scaled lengthscale prior [Hvarfner et al. 2024, "Vanilla Bayesian optimization
    performs great in high dimensions"]; in tests it beat Matérn kernels without the prior).

    Args:
        max_rows: refuse more training rows than this (exact GPs need O(n²) memory).
        max_iter: L-BFGS-B iterations for the hyperparameters on half of the
            ``hyperparameter_rows`` (a warm start; each iteration costs O(m³) for m rows).
        hyperparameter_rows: rows (a random subset) whose marginal likelihood sets the
            hyperparameters; None uses every row (slow beyond about 1,000).
        refine_iter: L-BFGS-B iterations on all ``hyperparameter_rows`` after the warm
            start (0: keep the warm start's hyperparameters).
        chunk_size: rows per prediction chunk.
        random_state: seed of the subset and the optimiser.
    """

    kind = "gp"
    differentiable = True

    def __init__(
        self,
        max_rows: int = 5000,
        max_iter: int = 100,
        *,
        hyperparameter_rows: int | None = 1000,
        refine_iter: int = 20,
        chunk_size: int = 2048,
        random_state: int | None = 0,
    ) -> None:
        self.max_rows = max_rows
        self.max_iter = max_iter
        self.hyperparameter_rows = hyperparameter_rows
        self.refine_iter = refine_iter
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
        import gpytorch
        import torch
        from botorch.fit import fit_gpytorch_mll
        from gpytorch.mlls import ExactMarginalLogLikelihood

        if X.shape[0] > self.max_rows:
            raise ConfigError(
                f"ExactGP: {X.shape[0]} rows exceed max_rows={self.max_rows} (an exact GP needs "
                "O(n²) memory); subsample (deepflow fit --max-rows 2000) or use svgp or mlp."
            )
        if self.hyperparameter_rows is not None and self.hyperparameter_rows < 2:
            raise ConfigError(
                "ExactGP: hyperparameter_rows must be >= 2 or None; got "
                f"{self.hyperparameter_rows}."
            )
        torch.set_num_threads(1)
        rng = np.random.default_rng(self.random_state)
        self.x_lo_, self.x_span_ = column_range(X)
        self.train_X_ = torch.as_tensor(X, dtype=torch.float64)
        self.train_Y_ = torch.as_tensor(Y, dtype=torch.float64)
        n = X.shape[0]
        m = n if self.hyperparameter_rows is None else min(n, self.hyperparameter_rows)
        rows = rng.permutation(n)[:m]
        # stages: half the subset (warm start), the subset, then every row (no fitting)
        stages = [(rows[: m // 2], self.max_iter), (rows, self.refine_iter), (None, 0)]
        if self.refine_iter <= 0 or m // 2 < 2:
            stages = [(rows, self.max_iter), (None, 0)]
        with (warnings.catch_warnings(), torch.random.fork_rng(),
              gpytorch.settings.max_cholesky_size(self.max_rows)):  # fmt: skip
            warnings.simplefilter("ignore")  # jitter / optimiser-retry notices (toolchain §3.1)
            torch.manual_seed(int(rng.integers(2**31)))
            model: Any = None
            for subset, iterations in stages:
                index = torch.as_tensor(np.sort(subset)) if subset is not None else slice(None)
                previous, model = model, self._build(self.train_X_[index], self.train_Y_[index])
                if previous is not None:
                    for part in ("mean_module", "covar_module", "likelihood"):
                        getattr(model, part).load_state_dict(getattr(previous, part).state_dict())
                if iterations:
                    fit_gpytorch_mll(  # one attempt: accept L-BFGS-B's best point (no refits)
                        ExactMarginalLogLikelihood(model.likelihood, model),
                        optimizer_kwargs={"options": {"maxiter": iterations}},
                        warning_handler=lambda w: True,
                    )
        model.eval()
        self.model_ = model

    def _predict(self, X: Array, return_std: bool) -> tuple[Array, Array | None]:
        import torch

        means, stds = [], []
        with torch.no_grad():
            for start in range(0, X.shape[0], self.chunk_size):
                x = torch.as_tensor(X[start : start + self.chunk_size], dtype=torch.float64)
                mean, std = self._predict_torch(x)
                means.append(mean.numpy())
                stds.append(std.numpy())
        mean = np.concatenate(means) if means else np.zeros((0, self.n_outputs_))
        std = np.concatenate(stds) if stds else np.zeros_like(mean)
        return mean, (std if return_std else None)

    def _predict_torch(self, X: Any) -> tuple[Any, Any]:
        import gpytorch
        import torch

        with warnings.catch_warnings(), gpytorch.settings.max_cholesky_size(self.max_rows):
            warnings.simplefilter("ignore")
            post = self.model_.posterior(X.to(torch.float64), observation_noise=True)
        # + 1e-30: a finite gradient of the std where the variance vanishes
        return post.mean, (post.variance.clamp_min(0) + 1e-30).sqrt()

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
