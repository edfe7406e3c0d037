"""Exact Gaussian process: BoTorch ``SingleTaskGP`` in float64 (one batched multi-output GP).

For up to a few thousand rows (memory and time grow as n² and n³); inputs normalised to the
unit cube (``Normalize``), outputs standardised (``Standardize``). Input columns with a few
levels (3 to ``one_hot_levels`` distinct training values: small integer variables such as the
ZeRO stage or the micro-batch size) also get one indicator column per level, so the kernel can
place each level apart instead of on a line (one-hot encoding of categorical inputs
[Garrido-Merchán & Hernández-Lobato 2020, "Dealing with categorical and integer-valued
variables in Bayesian optimization with Gaussian processes"]). Each output has its own
hyperparameters: a Matérn-5/2 (or RBF) ARD kernel with BoTorch's dimension-scaled lengthscale
prior [Hvarfner et al. 2024, "Vanilla Bayesian optimization performs great in high
dimensions"], a constant mean and the observation noise. They maximise the exact log marginal
likelihood plus the log priors (MAP) of a random subset of ``hyperparameter_rows`` rows (the
subset-of-data trick [Rasmussen & Williams 2006, §8.3.3]), optionally refined on every row
(``refine_iter``). The likelihood's gradient comes from one Cholesky factorisation and its
inverse, ∂/∂K log p(y) = ½ (ααᵀ − K⁻¹) with α = K⁻¹r [Rasmussen & Williams 2006, eq. 5.9],
not from back-propagating through the factorisation (≈3–4× slower) nor from GPyTorch's
iterative solvers (slow and noisy here). The GP then conditions on every row (one Cholesky
factorisation per output). Predictions run in chunks and include the noise.
"""

from __future__ import annotations

import functools
import json
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from deepflow.errors import ConfigError
from deepflow.surrogate.base import Array, Surrogate, column_range, read_json
from deepflow.surrogate.weights import read_state, save_tensors

__all__ = ["ExactGP"]

#: Kernel names -> whether BoTorch's dimension-scaled kernel is the RBF (else Matérn-5/2).
KERNELS = {"matern52": False, "rbf": True}


class ExactGP(Surrogate):
    """Exact GP surrogate (BoTorch ``SingleTaskGP``, one set of hyperparameters per output).

    On 2,000 rows of the default LLM space (``benchmarks/surrogate_accuracy.py``, two
    samples) the Matérn-5/2 kernel predicts step time with 5.1–5.2 % MAPE against 5.4–5.9 %
    for the RBF (step time has kinks: max of compute and exposed communication, node
    boundaries); the indicator columns and 200 iterations bring it to ≈4.7 % (the ZeRO stages
    differ in kind, not by degree). Refining on all 2,000 rows gained < 0.1 point per 20
    iterations at twice the fit time, hence ``refine_iter=0``.

    Args:
        max_rows: refuse more training rows than this (exact GPs need O(n²) memory).
        max_iter: L-BFGS-B iterations for the hyperparameters on the ``hyperparameter_rows``
            subset (each iteration costs O(m³) for m rows).
        kernel: ``matern52`` or ``rbf`` (each ARD, with the dimension-scaled prior).
        one_hot_levels: input columns with 3 to this many distinct training values also get
            an indicator column per value (below 3: none). A query between two levels gets
            zeros there (integer variables are decoded to whole levels).
        hyperparameter_rows: rows (a random subset) whose marginal likelihood first sets the
            hyperparameters; None fits on every row from the start (slow beyond ≈2,000).
        refine_iter: L-BFGS-B iterations on every row after the subset's fit (0: keep the
            subset's hyperparameters).
        chunk_size: rows per prediction chunk.
        random_state: seed of the subset and the optimiser.
    """

    kind = "gp"
    differentiable = True

    def __init__(
        self,
        max_rows: int = 5000,
        max_iter: int = 200,
        *,
        kernel: str = "matern52",
        one_hot_levels: int = 4,
        hyperparameter_rows: int | None = 1000,
        refine_iter: int = 0,
        chunk_size: int = 2048,
        random_state: int | None = 0,
    ) -> None:
        self.max_rows = max_rows
        self.max_iter = max_iter
        self.kernel = kernel
        self.one_hot_levels = one_hot_levels
        self.hyperparameter_rows = hyperparameter_rows
        self.refine_iter = refine_iter
        self.chunk_size = chunk_size
        self.random_state = random_state

    def _build(self, X: Any, Y: Any) -> Any:
        import torch
        from botorch.models import SingleTaskGP
        from botorch.models.transforms.input import Normalize
        from botorch.models.transforms.outcome import Standardize
        from botorch.models.utils.gpytorch_modules import (
            get_covar_module_with_dim_scaled_prior,
        )

        p, m = X.shape[1], Y.shape[1]
        covar = get_covar_module_with_dim_scaled_prior(
            ard_num_dims=p, batch_shape=torch.Size([m] if m > 1 else []),
            use_rbf_kernel=KERNELS[self.kernel],
        )  # fmt: skip
        return SingleTaskGP(
            X, Y, covar_module=covar, input_transform=Normalize(d=p, bounds=self._bounds()),
            outcome_transform=Standardize(m=m),
        )  # fmt: skip

    def _bounds(self) -> Any:
        import torch

        lo = torch.as_tensor(self.x_lo_, dtype=torch.float64)
        bounds = torch.stack([lo, lo + torch.as_tensor(self.x_span_, dtype=torch.float64)])
        num_indicators = sum(len(levels) for _, levels in self.levels_)
        unit = torch.tensor([[0.0], [1.0]], dtype=torch.float64).expand(2, num_indicators)
        return torch.cat([bounds, unit], dim=1)

    def _features(self, X: Any) -> Any:
        """``X`` (n, p) and, per column with few levels, one indicator column per level."""
        import torch

        parts = [X]
        for column, levels in self.levels_:
            tol = 1e-9 * (1.0 + levels.abs())  # encoded levels are exact; allow rounding
            parts.append(((X[:, column, None] - levels).abs() <= tol).to(X.dtype))
        return torch.cat(parts, dim=1)

    def _fit(self, X: Array, Y: Array) -> None:
        import gpytorch
        import torch

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
        if self.one_hot_levels < 0:
            raise ConfigError(f"ExactGP: one_hot_levels must be >= 0; got {self.one_hot_levels}.")
        if self.kernel not in KERNELS:
            raise ConfigError(
                f"ExactGP: unknown kernel '{self.kernel}'. Valid: {', '.join(KERNELS)}."
            )
        torch.set_num_threads(1)
        rng = np.random.default_rng(self.random_state)
        self.x_lo_, self.x_span_ = column_range(X)
        self.levels_ = _few_levels(X, self.one_hot_levels)
        self.train_X_ = torch.as_tensor(X, dtype=torch.float64)
        features = self._features(self.train_X_)
        self.train_Y_ = torch.as_tensor(Y, dtype=torch.float64)
        n = X.shape[0]
        m = n if self.hyperparameter_rows is None else min(n, self.hyperparameter_rows)
        subset = torch.as_tensor(np.sort(rng.permutation(n)[:m]))
        # stages: the subset, then every row (warm-started); one stage if the subset is all
        stages = [(subset, self.max_iter), (torch.arange(n), self.refine_iter)]
        if m == n:
            stages = [(torch.arange(n), self.max_iter)]
        with (warnings.catch_warnings(), torch.random.fork_rng(),
              gpytorch.settings.max_cholesky_size(self.max_rows)):  # fmt: skip
            warnings.simplefilter("ignore")  # jitter / optimiser notices (float64, small data)
            torch.manual_seed(int(rng.integers(2**31)))
            states = []
            for j in range(Y.shape[1]):
                model: Any = None
                for rows, iterations in stages:
                    y = self.train_Y_[rows, j : j + 1]
                    previous, model = model, self._build(features[rows], y)
                    if previous is not None:
                        model.load_state_dict(_hyperparameters(previous), strict=False)
                    if iterations > 0:
                        _fit_map(model, iterations)
                states.append(_hyperparameters(model))
            model = self._build(features, self.train_Y_)
            model.load_state_dict(_stack(states, model.state_dict()), strict=False)
        model.eval()
        self.model_ = model
        self.std_scale_ = _loo_std_scale(model)

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
            X = self._features(X.to(torch.float64))
            post = self.model_.posterior(X, observation_noise=True)
        # + 1e-30: a finite gradient of the std where the variance vanishes
        std = (post.variance.clamp_min(0) + 1e-30).sqrt()
        return post.mean, std * torch.as_tensor(self.std_scale_, dtype=std.dtype)

    def _save_state(self, path: Path) -> None:
        import torch

        tensors = {
            "train_X": self.train_X_, "train_Y": self.train_Y_,
            "x_lo": torch.as_tensor(self.x_lo_), "x_span": torch.as_tensor(self.x_span_),
            "std_scale": torch.as_tensor(self.std_scale_),
            **{f"model.{k}": v for k, v in self.model_.state_dict().items()},
            **{f"levels.{column}": levels for column, levels in self.levels_},
        }  # fmt: skip
        save_tensors(path, tensors)
        (path / "state.json").write_text(json.dumps({"kernel": self.kernel}), encoding="utf-8")

    def _load_state(self, path: Path) -> None:
        state = read_state(path)
        if "model" not in state:  # safetensors: flat names, the kernel in state.json
            state["model"] = {k.removeprefix("model."): v for k, v in state.items()
                              if k.startswith("model.")}  # fmt: skip
            levels = {int(k.removeprefix("levels.")): v for k, v in state.items()
                      if k.startswith("levels.")}  # fmt: skip
            state["levels"] = sorted(levels.items())
            state["kernel"] = read_json(path / "state.json").get("kernel")
        self.kernel = str(state.get("kernel", "rbf"))  # saved before the kernel was a choice
        if self.kernel not in KERNELS:
            raise ConfigError(f"{path}: unknown GP kernel '{self.kernel}' (corrupted).")
        self.x_lo_ = state["x_lo"].numpy()
        self.x_span_ = state["x_span"].numpy()
        self.levels_ = [(int(c), levels) for c, levels in state.get("levels", [])]
        self.train_X_, self.train_Y_ = state["train_X"], state["train_Y"]
        # saved before the interval calibration: the raw posterior std
        scale = state.get("std_scale")
        self.std_scale_ = np.ones(self.train_Y_.shape[1]) if scale is None else scale.numpy()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model = self._build(self._features(self.train_X_), self.train_Y_)
            model.load_state_dict(state["model"])
        model.eval()
        self.model_ = model


def _few_levels(X: Array, max_levels: int) -> list[tuple[int, Any]]:
    """(column, its distinct values as a tensor) for columns with 3 to ``max_levels`` values.

    A column whose levels order the rows as an earlier one's do (a variable's log next to its
    linear encoding) is skipped: its indicators would repeat the earlier ones.
    """
    import torch

    out, seen = [], set()
    for j in range(X.shape[1]):
        levels, index = np.unique(X[:, j], return_inverse=True)
        if 3 <= len(levels) <= max_levels and index.tobytes() not in seen:
            seen.add(index.tobytes())
            out.append((j, torch.as_tensor(levels, dtype=torch.float64)))
    return out


#: Two-sided 95 % quantile of the standard normal.
_Z95 = 1.959963984540054


def _loo_std_scale(model: Any) -> Array:
    """One scale per output for the predictive std, so that 95 % of the training rows'
    leave-one-out residuals fall inside ±1.96 scaled std.

    Exact GP leave-one-out in closed form [Rasmussen & Williams 2006, eq. 5.12]: with
    A = K + σ²I, the LOO residual of row i is [A⁻¹r]_i / [A⁻¹]_ii and its predictive variance
    1 / [A⁻¹]_ii, r the standardised targets minus the mean. Near-exact targets (area, power)
    otherwise get intervals as wide as the likelihood's noise floor allows (coverage ≈ 1);
    step time's kinks can make them too narrow. The MLP ensemble calibrates its spread the
    same way on held-out rows (``mlp.py``).
    """
    import torch

    with torch.no_grad():
        x = model.train_inputs[0]
        n = x.shape[-2]
        k = model.covar_module(x).to_dense().reshape(-1, n, n)
        y = model.train_targets.reshape(-1, n)
        noise = model.likelihood.noise.reshape(-1, 1)
        mean = model.mean_module.constant.reshape(-1, 1)
        a = k + noise[..., None] * torch.eye(n, dtype=k.dtype)
        a_inv = torch.cholesky_inverse(torch.linalg.cholesky(a))
        diag = a_inv.diagonal(dim1=-2, dim2=-1)
        residual = (a_inv @ (y - mean)[..., None])[..., 0] / diag
        ratio = (residual.abs() * diag.sqrt()).numpy()  # |r_i| / σ_i
    return np.maximum(np.quantile(ratio, 0.95, axis=1) / _Z95, 1e-3)


def _hyperparameters(model: Any) -> dict[str, Any]:
    """The learned (raw) hyperparameters, by state-dict name (no priors, data or buffers)."""
    return {k: v.detach().clone() for k, v in model.named_parameters()}


def _stack(states: list[dict[str, Any]], target: dict[str, Any]) -> dict[str, Any]:
    """Single-output hyperparameters -> the batched model's (batch = output index)."""
    import torch

    out = {}
    for key in states[0]:
        shape = target[key].shape
        if len(states) == 1:
            out[key] = states[0][key].reshape(shape)
        else:
            out[key] = torch.stack([s[key].reshape(shape[1:]) for s in states])
    return out


def _fit_map(model: Any, iterations: int) -> None:
    """Minimise :func:`_objective` of a single-output model in training mode (L-BFGS-B)."""
    from botorch.optim.closures import ForwardBackwardClosure
    from botorch.optim.fit import fit_gpytorch_mll_scipy
    from gpytorch.mlls import ExactMarginalLogLikelihood

    mll = ExactMarginalLogLikelihood(model.likelihood, model)
    mll.train()
    parameters = {k: p for k, p in mll.named_parameters() if p.requires_grad}
    fit_gpytorch_mll_scipy(
        mll, closure=ForwardBackwardClosure(lambda: _objective(model), parameters),
        options={"maxiter": iterations},
    )  # fmt: skip
    mll.eval()


def _objective(model: Any) -> Any:
    """−(log marginal likelihood + log priors) / n of a single-output model in training mode.

    GPyTorch's ``ExactMarginalLogLikelihood`` negated, less its constant ½ log 2π per row;
    the Cholesky gradient comes from :func:`_log_density`.
    """
    inputs = model.train_inputs
    marginal = model.likelihood(model(*inputs), *inputs)
    residual = model.train_targets - marginal.mean
    value = _log_density()(marginal.covariance_matrix, residual)
    for _, module, prior, closure, _ in model.named_priors():
        value = value + prior.log_prob(closure(module)).sum()
    return -value / residual.shape[-1]


@functools.cache
def _log_density() -> Any:
    """``f(K, r) = -½ rᵀK⁻¹r − ½ log|K|`` with the gradient ½ (ααᵀ − K⁻¹), α = K⁻¹r."""
    import torch
    from linear_operator.utils.cholesky import psd_safe_cholesky

    class LogDensity(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, K: Any, r: Any) -> Any:
            L = psd_safe_cholesky(K)  # adds jitter if K is numerically indefinite
            alpha = torch.cholesky_solve(r[:, None], L)
            ctx.save_for_backward(L, alpha)
            return -0.5 * (r[:, None] * alpha).sum() - L.diagonal().log().sum()

        @staticmethod
        def backward(ctx: Any, grad: Any) -> Any:
            L, alpha = ctx.saved_tensors
            dK = 0.5 * grad * (alpha @ alpha.T - torch.cholesky_inverse(L))
            return dK, -grad * alpha[:, 0]

    return LogDensity.apply
