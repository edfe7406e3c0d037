"""A fitted surrogate as a BoTorch ``Model``, so it can drive BoTorch acquisition functions.

:class:`SurrogatePosteriorModel` takes points in the design space's unit cube ``[0, 1]^d``
(``d = space.num_dims``, the coordinates :func:`deepflow.datasets.label.decode` reads and the
search proposes), decodes them to the dataset's ``x_*`` columns, encodes those with the
surrogate's :class:`~deepflow.surrogate.encoding.FeatureEncoder` and predicts. The posterior is
Gaussian with independent (diagonal) entries, in the surrogate's *modelled* space: the log of
time, energy, power and area targets (their lognormal predictive distribution is exactly
normal there), the original units for the others (constraints ``c_*`` keep their sign, so
``<= 0`` is feasible). BoTorch maximises: put minimised objectives' sign flip in the
objective (``search/objectives.py``), not here.

Gradients: continuous dimensions (``continuous`` and ``simplex`` variables) reach the
features through the decode's Jacobian (central differences of the exact decode, step
:data:`STEP`), then through torch for differentiable surrogates (MLP ensemble, exact GP,
SVGP), so gradient-based acquisition optimisers work there; discrete dimensions (integers,
choices, the mapping) have zero gradient: optimise them with
``optimize_acqf_mixed_alternating(discrete_dims=...)`` or over candidate sets. Gradient
boosting returns no gradient: use raw samples / ``optimize_acqf_discrete``.

Joint samples over the q points are independent (the surrogates predict marginals), and the
model is not a GPyTorch model: pass ``cache_root=False`` to qLogNEHVI / qNEHVI.

Example:
    >>> from deepflow.datasets import load_space                       # doctest: +SKIP
    >>> from deepflow.surrogate import SurrogateModel, SurrogatePosteriorModel
    >>> space = load_space("configs/spaces/llm-pathfinding.yaml")
    >>> bo_model = SurrogatePosteriorModel(SurrogateModel.load("llm-mlp"), space,
    ...                                    targets=["y_step_time_s", "y_power_W"])
    >>> bo_model.posterior(torch.rand(8, 1, space.num_dims, dtype=torch.float64)).mean.shape
    torch.Size([8, 1, 2])
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from botorch.models.model import Model
from botorch.posteriors.gpytorch import GPyTorchPosterior
from gpytorch.distributions import MultitaskMultivariateNormal, MultivariateNormal
from linear_operator.operators import DiagLinearOperator
from numpy.typing import NDArray
from torch import Tensor

from deepflow.datasets.label import decode_x
from deepflow.datasets.samplers import decode_continuous, decode_simplex
from deepflow.datasets.space import DesignSpace, Variable, load_space
from deepflow.errors import ConfigError
from deepflow.surrogate.model import SurrogateModel

__all__ = ["STEP", "SurrogatePosteriorModel"]

#: Central-difference step (in cube units) of the decode's Jacobian; one-sided at the faces.
STEP = 1e-6
#: Smallest posterior variance (keeps the sampler's square root differentiable).
MIN_VARIANCE = 1e-12


class SurrogatePosteriorModel(Model):
    """BoTorch ``Model`` over a design space's unit cube, backed by a fitted surrogate.

    Args:
        model: the fitted surrogate (``SurrogateModel.load(dir)`` or from ``fit_surrogate``).
        space: the design space its data came from (a :class:`DesignSpace` or a YAML path);
            refused if its hash differs from the one the surrogate recorded.
        targets: the outputs, in order (default: all of the surrogate's targets).

    Attributes:
        num_outputs: ``len(targets)``.
        differentiable: whether gradients reach ``X`` (MLP ensemble, GPs: yes; boosting: no).

    Raises:
        ConfigError: another design space, or a target the surrogate does not model.
    """

    _supports_cache_root = False  # not a GPyTorch model: qNEHVI's cached root does not apply

    def __init__(
        self,
        model: SurrogateModel,
        space: DesignSpace | str | Path,
        *,
        targets: Sequence[str] | None = None,
    ) -> None:
        super().__init__()
        if not isinstance(space, DesignSpace):
            space = load_space(space)
        if model.space_sha256 and space.sha256 != model.space_sha256:
            raise ConfigError(
                f"{space.file}: the surrogate was fitted on design space "
                f"{model.space_sha256[:12]}, not on this one ({space.sha256[:12]}); refit on "
                "data from this space."
            )
        names = list(model.targets if targets is None else targets)
        for t in names:
            if t not in model.targets:
                raise ConfigError(
                    f"unknown target '{t}'; the surrogate models: {', '.join(model.targets)}."
                )
        if not names:
            raise ConfigError("targets must name at least one of the surrogate's targets.")
        self.surrogate = model
        self.space = space
        self.targets = names
        self._columns = [model.targets.index(t) for t in names]
        self._smooth = _smooth_blocks(space)

    # ------------------------------------------------------------------ Model API
    @property
    def num_outputs(self) -> int:
        return len(self.targets)

    @property
    def batch_shape(self) -> torch.Size:
        return torch.Size([])

    @property
    def differentiable(self) -> bool:
        return bool(self.surrogate.model.differentiable)

    def subset_output(self, idcs: list[int]) -> SurrogatePosteriorModel:
        """The same surrogate restricted to the outputs ``idcs`` (indices into ``targets``)."""
        return SurrogatePosteriorModel(
            self.surrogate, self.space, targets=[self.targets[i] for i in idcs]
        )

    def posterior(
        self,
        X: Tensor,
        output_indices: list[int] | None = None,
        observation_noise: bool | Tensor = False,
        posterior_transform: Any = None,
    ) -> Any:
        """Independent normal predictions at ``X``.

        Args:
            X: ``batch x q x d`` (or ``q x d``) points of the unit cube, ``d = space.num_dims``.
            output_indices: a subset of the outputs (indices into ``targets``).
            observation_noise: ``True``/``False`` give the same distribution (the oracle is
                deterministic; the variance is the surrogate's calibrated predictive
                variance); a tensor is added to the variance (BoTorch's observed noise).
            posterior_transform: applied to the result, e.g. a ``ScalarizedPosteriorTransform``.

        Returns:
            A ``GPyTorchPosterior``: mean and variance ``batch x q x m`` in the modelled space
            (log for log targets), a ``MultivariateNormal`` for one output, else a diagonal
            ``MultitaskMultivariateNormal``.

        Raises:
            ConfigError: ``X`` of the wrong width or outside the unit cube.
        """
        mean, std = self._predict(X)
        cols = range(len(self.targets)) if output_indices is None else list(output_indices)
        index = torch.as_tensor(list(cols), dtype=torch.long)
        mean = mean[:, index].reshape(*X.shape[:-1], len(index))
        var = (std[:, index] ** 2).clamp_min(MIN_VARIANCE).reshape(mean.shape)
        if isinstance(observation_noise, Tensor):
            var = var + observation_noise.to(var).expand_as(var)
        if len(index) == 1:
            mvn: MultivariateNormal = MultivariateNormal(
                mean[..., 0], DiagLinearOperator(var[..., 0])
            )
        else:
            mvn = MultitaskMultivariateNormal(
                mean, DiagLinearOperator(var.reshape(*mean.shape[:-2], -1)), interleaved=True
            )
        posterior = GPyTorchPosterior(mvn)
        return posterior if posterior_transform is None else posterior_transform(posterior)

    # ------------------------------------------------------------------ helpers
    def features(self, X: Tensor) -> Tensor:
        """The surrogate's encoded features of unit-cube points ``X`` (..., d) -> (..., p).

        Differentiable in the continuous dimensions when ``X`` requires a gradient.
        """
        u = self._check(X)
        flat = X.reshape(-1, X.shape[-1])
        xs = decode_x(self.space, u)
        feats = torch.as_tensor(self._encode(xs), dtype=X.dtype)
        if flat.requires_grad and torch.is_grad_enabled() and self._smooth:
            jac = torch.as_tensor(self._jacobian(u, xs), dtype=X.dtype)
            # value: exactly feats (the added term is 0); gradient: jac^T, the decode's chain
            feats = feats + torch.einsum("npd,nd->np", jac, flat - flat.detach())
        return feats.reshape(*X.shape[:-1], feats.shape[-1])

    def p_feasible(self, X: Tensor) -> Tensor:
        """P(feasible) from the surrogate's classifier at ``X`` (..., d) -> (...); no gradient.

        Raises:
            ConfigError: the surrogate was fitted without a ``feasible`` column.
        """
        if self.surrogate.classifier is None:
            raise ConfigError("the surrogate has no feasibility classifier (no 'feasible' data).")
        u = self._check(X)
        p = self.surrogate.classifier.predict_proba(self._encode(decode_x(self.space, u)))
        return torch.as_tensor(p, dtype=X.dtype).reshape(X.shape[:-1])

    def _predict(self, X: Tensor) -> tuple[Tensor, Tensor]:
        """Mean and std (n, len(targets)) of the flattened points, in X's dtype."""
        feats = self.features(X)
        flat = feats.reshape(-1, feats.shape[-1])
        mean, std = self.surrogate.model.predict_torch(flat)
        cols = torch.as_tensor(self._columns, dtype=torch.long)
        return mean[:, cols].to(X.dtype), std[:, cols].to(X.dtype)

    def _check(self, X: Tensor) -> NDArray[np.float64]:
        d = self.space.num_dims
        if not isinstance(X, Tensor) or X.ndim < 2 or X.shape[-1] != d:
            shape = tuple(X.shape) if isinstance(X, Tensor) else type(X).__name__
            raise ConfigError(
                f"X must be a (batch x) q x {d} tensor of unit-cube points of "
                f"{self.space.file}; got {shape}."
            )
        u = X.detach().reshape(-1, d).cpu().numpy().astype(np.float64)
        if u.size and not (np.isfinite(u).all() and u.min() >= 0.0 and u.max() <= 1.0):
            raise ConfigError(f"X must lie in the unit cube [0, 1]^{d}; got values outside it.")
        return u

    def _encode(self, xs: dict[str, Any]) -> NDArray[np.float64]:
        import pandas as pd

        return self.surrogate.encoder.transform(pd.DataFrame(xs))

    def _jacobian(self, u: NDArray[np.float64], xs: dict[str, Any]) -> NDArray[np.float64]:
        """d features / d u, (n, p, d): nonzero only for continuous dimensions."""
        enc = self.surrogate.encoder
        n = u.shape[0]
        jac = np.zeros((n, enc.num_features_, u.shape[1]))
        for var, start, width in self._smooth:
            targets = [(c, j, dfdx) for c, col in enumerate(var.columns)
                       for j, dfdx in enc.derivative(col, xs[col])]  # fmt: skip
            if not targets:
                continue
            block = u[:, start : start + width]
            # every dimension's +/- step in one decode call: (2, width, n, width) rows
            steps = np.broadcast_to(block, (2, width, n, width)).copy()
            dims = np.arange(width)
            steps[0, dims, :, dims] = np.minimum(block.T + STEP, 1.0)
            steps[1, dims, :, dims] = np.maximum(block.T - STEP, 0.0)
            delta = steps[0, dims, :, dims] - steps[1, dims, :, dims]  # (width, n)
            x = _decode(var, steps.reshape(-1, width)).reshape(2, width, n, -1)
            dx = (x[0] - x[1]) / delta[:, :, None]  # (width, n, columns)
            for c, j, dfdx in targets:
                jac[:, j, start : start + width] = dfdx[:, None] * dx[:, :, c].T
        return jac


def _smooth_blocks(space: DesignSpace) -> list[tuple[Variable, int, int]]:
    """(variable, first cube dimension, number of dimensions) of the continuous variables,
    in the order :func:`~deepflow.datasets.label.decode` reads the cube."""
    out = []
    col = 0
    for v in space.variables:
        if v.joint:
            continue
        if v.num_dims and v.type in ("continuous", "simplex"):
            out.append((v, col, v.num_dims))
        col += v.num_dims
    return out


def _decode(var: Variable, block: NDArray[np.float64]) -> NDArray[np.float64]:
    """A continuous variable's x columns (n, k) from its cube dimensions (as ``decode``)."""
    if var.type == "simplex":
        return decode_simplex(block, var.part_low, var.part_high)
    return decode_continuous(block[:, 0], var.low, var.high, log=var.scale == "log")[:, None]
