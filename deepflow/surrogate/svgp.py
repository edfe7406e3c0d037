"""Scalable GP: stochastic variational GP with inducing points (GPyTorch, float64).

One SVGP per output [Hensman et al. 2013, "Gaussian processes for big data"], trained on
minibatches of the ELBO with Adam; memory O(n·m) for m inducing points instead of the exact
GP's O(n²), so tens of thousands of rows fit. Inputs are scaled to the unit cube and outputs
standardised inside the model.
"""

from __future__ import annotations

import functools
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from deepflow.errors import ConfigError
from deepflow.surrogate.base import Array, Surrogate, column_range, standardise
from deepflow.surrogate.weights import read_state, save_tensors

__all__ = ["SVGP"]


@functools.cache
def _model_class() -> Any:
    import gpytorch

    class _Model(gpytorch.models.ApproximateGP):
        def __init__(self, inducing: Any) -> None:
            dist = gpytorch.variational.CholeskyVariationalDistribution(inducing.shape[0])
            strategy = gpytorch.variational.VariationalStrategy(
                self, inducing, dist, learn_inducing_locations=True
            )
            super().__init__(strategy)
            self.mean_module = gpytorch.means.ConstantMean()
            self.covar_module = gpytorch.kernels.ScaleKernel(
                gpytorch.kernels.MaternKernel(nu=2.5, ard_num_dims=inducing.shape[1])
            )

        def forward(self, x: Any) -> Any:
            return gpytorch.distributions.MultivariateNormal(
                self.mean_module(x), self.covar_module(x)
            )

    return _Model


class SVGP(Surrogate):
    """Sparse variational GP per output (Matérn-5/2 ARD, learned inducing points).

    Args:
        num_inducing: inducing points (taken from the training rows at random).
        epochs: passes over the data.
        batch_size: rows per Adam step.
        learning_rate: Adam step.
        chunk_size: rows per prediction chunk.
        random_state: seed (inducing points, minibatches).
    """

    kind = "svgp"
    differentiable = True

    def __init__(
        self,
        num_inducing: int = 256,
        epochs: int = 30,
        *,
        batch_size: int = 512,
        learning_rate: float = 0.02,
        chunk_size: int = 4096,
        random_state: int | None = 0,
    ) -> None:
        self.num_inducing = num_inducing
        self.epochs = epochs
        self.batch_size = batch_size
        self.learning_rate = learning_rate
        self.chunk_size = chunk_size
        self.random_state = random_state

    def _new(self, p: int) -> tuple[Any, Any]:
        import gpytorch
        import torch

        inducing = torch.zeros(self.n_inducing_, p, dtype=torch.float64)
        model = _model_class()(inducing).double()
        likelihood = gpytorch.likelihoods.GaussianLikelihood().double()
        return model, likelihood

    def _fit(self, X: Array, Y: Array) -> None:
        import torch

        if self.num_inducing < 1 or self.epochs < 1:
            raise ConfigError("SVGP: num_inducing and epochs must be >= 1.")
        torch.set_num_threads(1)
        self.__dict__.pop("_cache", None)
        rng = np.random.default_rng(self.random_state)
        self.x_lo_, self.x_span_ = column_range(X)
        Z, self.y_mean_, self.y_std_ = standardise(Y)
        xt = torch.as_tensor((X - self.x_lo_) / self.x_span_, dtype=torch.float64)
        n = xt.shape[0]
        self.n_inducing_ = min(self.num_inducing, n)
        self.states_: list[dict[str, Any]] = []
        gen = torch.Generator().manual_seed(int(rng.integers(2**62)))
        with torch.random.fork_rng():
            torch.manual_seed(int(rng.integers(2**62)))  # variational initialisation
            for j in range(Y.shape[1]):
                self._fit_one(xt, torch.as_tensor(Z[:, j], dtype=torch.float64), rng, gen)

    def _fit_one(self, xt: Any, yt: Any, rng: np.random.Generator, gen: Any) -> None:
        import gpytorch
        import torch

        n = xt.shape[0]
        batch = min(self.batch_size, n)
        model, likelihood = self._new(xt.shape[1])
        start = xt[torch.as_tensor(rng.choice(n, self.n_inducing_, replace=False))]
        model.variational_strategy.inducing_points.data.copy_(start)
        model.train()
        likelihood.train()
        params = list(model.parameters()) + list(likelihood.parameters())
        opt = torch.optim.Adam(params, lr=self.learning_rate)
        elbo = gpytorch.mlls.VariationalELBO(likelihood, model, num_data=n)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # jitter notices
            for _ in range(self.epochs):
                perm = torch.randperm(n, generator=gen)
                for s in range(0, n, batch):
                    idx = perm[s : s + batch]
                    opt.zero_grad(set_to_none=True)
                    loss = -elbo(model(xt[idx]), yt[idx])
                    loss.backward()
                    opt.step()
        self.states_.append({"model": model.state_dict(), "lik": likelihood.state_dict()})

    def _models(self) -> list[tuple[Any, Any]]:
        if not hasattr(self, "_cache"):
            built = []
            for state in self.states_:
                model, likelihood = self._new(self.n_features_in_)
                model.load_state_dict(state["model"])
                likelihood.load_state_dict(state["lik"])
                model.eval()
                likelihood.eval()
                built.append((model, likelihood))
            self._cache = built
        return self._cache

    def _predict(self, X: Array, return_std: bool) -> tuple[Array, Array | None]:
        import torch

        means, stds = [], []
        with torch.no_grad():
            for s in range(0, X.shape[0], self.chunk_size):
                mean, std = self._predict_torch(torch.as_tensor(X[s : s + self.chunk_size]))
                means.append(mean.numpy())
                stds.append(std.numpy())
        mean = np.concatenate(means) if means else np.zeros((0, len(self.states_)))
        std = np.concatenate(stds) if stds else np.zeros_like(mean)
        return mean, (std if return_std else None)

    def _predict_torch(self, X: Any) -> tuple[Any, Any]:
        import torch

        lo = torch.as_tensor(self.x_lo_, dtype=torch.float64)
        span = torch.as_tensor(self.x_span_, dtype=torch.float64)
        x = (X.to(torch.float64) - lo) / span
        means, variances = [], []
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for model, likelihood in self._models():
                post = likelihood(model(x))
                means.append(post.mean)
                variances.append(post.variance.clamp_min(0))
        y_mean = torch.as_tensor(self.y_mean_, dtype=torch.float64)
        y_std = torch.as_tensor(self.y_std_, dtype=torch.float64)
        # + 1e-30: a finite gradient of the std where the variance vanishes
        std = (torch.stack(variances, dim=-1) + 1e-30).sqrt()
        return torch.stack(means, dim=-1) * y_std + y_mean, std * y_std

    def _save_state(self, path: Path) -> None:
        import torch

        state: dict[str, Any] = {
            "x_lo": torch.as_tensor(self.x_lo_), "x_span": torch.as_tensor(self.x_span_),
            "y_mean": torch.as_tensor(self.y_mean_), "y_std": torch.as_tensor(self.y_std_),
            "n_inducing": torch.tensor(self.n_inducing_),
        }  # fmt: skip
        for j, s in enumerate(self.states_):
            state.update({f"m{j}.{k}": v for k, v in s["model"].items()})
            state.update({f"l{j}.{k}": v for k, v in s["lik"].items()})
        save_tensors(path, state)

    def _load_state(self, path: Path) -> None:
        state = read_state(path)
        self.x_lo_, self.x_span_ = state["x_lo"].numpy(), state["x_span"].numpy()
        self.y_mean_, self.y_std_ = state["y_mean"].numpy(), state["y_std"].numpy()
        self.n_inducing_ = int(state["n_inducing"])
        self.states_ = []
        for j in range(self.n_outputs_):
            model = {k.split(".", 1)[1]: v for k, v in state.items() if k.startswith(f"m{j}.")}
            lik = {k.split(".", 1)[1]: v for k, v in state.items() if k.startswith(f"l{j}.")}
            self.states_.append({"model": model, "lik": lik})
