"""The BoTorch adapter: shapes, values equal to predict, gradients, a real acquisition."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from deepflow.datasets import DesignSpace, load, load_space, space_from_text
from deepflow.datasets.label import decode_x
from deepflow.errors import ConfigError
from deepflow.surrogate import SurrogateModel, SurrogatePosteriorModel, fit_surrogate
from tests.surrogate.conftest import LLM_SPACE

TARGETS = ["y_step_time_s", "y_power_W", "c_memory_excess_B"]


@pytest.fixture(scope="module")
def space() -> DesignSpace:
    return load_space(LLM_SPACE)


@pytest.fixture(scope="module")
def mlp(llm_data: Path) -> SurrogateModel:
    model, _ = fit_surrogate(load(llm_data), "mlp", targets=TARGETS, test_fraction=0.0,
                             params={"epochs": 30, "num_members": 3, "width": 16})  # fmt: skip
    return model


@pytest.fixture(scope="module")
def gp(llm_data: Path) -> SurrogateModel:
    model, _ = fit_surrogate(load(llm_data), "gp", targets=TARGETS[:2], test_fraction=0.0,
                             max_train_rows=120, params={"max_iter": 15})  # fmt: skip
    return model


def _cube(space: DesignSpace, *shape: int, seed: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.rand(*shape, space.num_dims, generator=gen, dtype=torch.float64)


def test_shapes_and_values_equal_predict(mlp: SurrogateModel, space: DesignSpace) -> None:
    bo = SurrogatePosteriorModel(mlp, space)
    assert bo.num_outputs == 3 and bo.differentiable and bo.batch_shape == torch.Size([])
    X = _cube(space, 4, 3)
    post = bo.posterior(X)
    assert post.mean.shape == post.variance.shape == (4, 3, 3)
    assert bo.posterior(X[0]).mean.shape == (3, 3)
    assert post.rsample(torch.Size([5])).shape == (5, 4, 3, 3)
    frame = pd.DataFrame(decode_x(space, X.reshape(-1, space.num_dims).numpy()))
    mean, std = mlp.predict_transformed(frame)
    np.testing.assert_allclose(post.mean.reshape(-1, 3).numpy(), mean, rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(post.variance.reshape(-1, 3).numpy(), std**2, rtol=1e-5)
    sub = bo.posterior(X, output_indices=[1])
    assert sub.mean.shape == (4, 3, 1)
    np.testing.assert_array_equal(sub.mean[..., 0].numpy(), post.mean[..., 1].numpy())
    one = bo.subset_output([2])
    assert one.targets == ["c_memory_excess_B"]
    np.testing.assert_array_equal(one.posterior(X).mean[..., 0].numpy(), post.mean[..., 2].numpy())
    noisy = bo.posterior(X, observation_noise=torch.full((1, 3), 0.5, dtype=torch.float64))
    np.testing.assert_allclose(noisy.variance.numpy(), post.variance.numpy() + 0.5)


def test_gradients_match_finite_differences(gp: SurrogateModel, space: DesignSpace) -> None:
    bo = SurrogatePosteriorModel(gp, space)
    X = _cube(space, 2, 1, seed=1).clamp(0.05, 0.95).requires_grad_()
    (grad,) = torch.autograd.grad(bo.posterior(X).mean[..., 0].sum(), X)
    continuous = [i for i in range(space.num_dims) if grad[..., i].abs().max() > 0]
    # technology and dram_technology (dims 0, 1) and hbm stacks (4) are discrete: no gradient
    assert grad[..., [0, 1, 4]].abs().max() == 0
    assert {2, 3, 5, 6, 13} <= set(continuous)  # die area, tdp, area and power splits
    h = 1e-5
    for i in (2, 3, 6, 13):
        up, down = X.detach().clone(), X.detach().clone()
        up[..., i] += h
        down[..., i] -= h
        with torch.no_grad():
            fd = (bo.posterior(up).mean[..., 0] - bo.posterior(down).mean[..., 0]) / (2 * h)
        np.testing.assert_allclose(grad[..., i].numpy(), fd.numpy(), rtol=1e-4, atol=1e-8)


def test_drives_botorch_acquisitions(mlp: SurrogateModel, space: DesignSpace) -> None:
    from botorch.acquisition import qUpperConfidenceBound
    from botorch.acquisition.multi_objective.logei import (
        qLogNoisyExpectedHypervolumeImprovement,
    )
    from botorch.acquisition.multi_objective.objective import WeightedMCMultiOutputObjective
    from botorch.optim import optimize_acqf
    from botorch.sampling import SobolQMCNormalSampler

    bo = SurrogatePosteriorModel(mlp, space, targets=TARGETS[:2])
    baseline = _cube(space, 6, seed=2)
    minimise = WeightedMCMultiOutputObjective(torch.tensor([-1.0, -1.0], dtype=torch.float64))
    ref = minimise(bo.posterior(baseline).mean).min(dim=0).values - 0.5
    acq = qLogNoisyExpectedHypervolumeImprovement(
        bo, ref_point=ref.tolist(), X_baseline=baseline, objective=minimise,
        sampler=SobolQMCNormalSampler(torch.Size([16]), seed=0), prune_baseline=False,
        cache_root=False,
    )  # fmt: skip
    X = _cube(space, 5, 2, seed=3).requires_grad_()
    values = acq(X)
    assert values.shape == (5,) and torch.isfinite(values).all()
    values.sum().backward()
    assert X.grad is not None and X.grad.abs().sum() > 0
    # optimise the continuous dimensions with L-BFGS-B, the discrete ones fixed
    start = _cube(space, 1, seed=4)[0]
    smooth = {i for i in range(space.num_dims) if X.grad[..., i].abs().max() > 0}
    fixed = {i: float(start[i]) for i in range(space.num_dims) if i not in smooth}
    bounds = torch.stack([torch.zeros(space.num_dims), torch.ones(space.num_dims)]).double()
    torch.manual_seed(0)  # the raw samples
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # L-BFGS-B's early-stop notices
        cand, value = optimize_acqf(acq, bounds=bounds, q=1, num_restarts=2, raw_samples=16,
                                    fixed_features=fixed, options={"maxiter": 15},
                                    retry_on_optimization_warning=False)  # fmt: skip
    assert cand.shape == (1, space.num_dims)
    assert all(float(cand[0, i]) == v for i, v in fixed.items())
    assert float(value) == pytest.approx(float(acq(cand[None]).item()), rel=1e-6)  # float32
    ucb = qUpperConfidenceBound(bo.subset_output([0]), beta=0.2)
    assert ucb(_cube(space, 3, 2)).shape == (3,)


def test_boosting_has_no_gradient(llm_data: Path, space: DesignSpace) -> None:
    model, _ = fit_surrogate(load(llm_data), "gbt", targets=TARGETS[:1], test_fraction=0.0,
                             params={"max_iter": 5})  # fmt: skip
    bo = SurrogatePosteriorModel(model, space)
    assert not bo.differentiable
    X = _cube(space, 3, 1).requires_grad_()
    mean = bo.posterior(X).mean
    assert mean.shape == (3, 1, 1) and not mean.requires_grad
    p = bo.p_feasible(X)
    assert p.shape == (3, 1) and ((p >= 0) & (p <= 1)).all()


def test_errors(mlp: SurrogateModel, space: DesignSpace) -> None:
    other = space_from_text(space.text.replace("low: 400, high: 850", "low: 400, high: 800"),
                            file="other.yaml", base_dir=LLM_SPACE.parent)  # fmt: skip
    with pytest.raises(ConfigError, match=(
        rf"^other\.yaml: the surrogate was fitted on design space {space.sha256[:12]}, not on "
        rf"this one \({other.sha256[:12]}\); refit on data from this space\.$")):  # fmt: skip
        SurrogatePosteriorModel(mlp, other)
    with pytest.raises(ConfigError, match=r"^unknown target 'y_mfu'; the surrogate models: "
                       r"y_step_time_s, y_power_W, c_memory_excess_B\.$"):  # fmt: skip
        SurrogatePosteriorModel(mlp, space, targets=["y_mfu"])
    bo = SurrogatePosteriorModel(mlp, space)
    d = space.num_dims
    with pytest.raises(ConfigError, match=rf"X must be a \(batch x\) q x {d} tensor of "
                       r"unit-cube points of .*llm-pathfinding\.yaml; got \(2, 3\)\."):  # fmt: skip
        bo.posterior(torch.rand(2, 3, dtype=torch.float64))
    with pytest.raises(ConfigError, match=rf"X must lie in the unit cube \[0, 1\]\^{d}"):
        bo.posterior(_cube(space, 2, 1) + 1.0)
    bare = SurrogateModel(
        encoder=mlp.encoder, target_transform=mlp.target_transform, model=mlp.model,
        classifier=None, space_sha256=mlp.space_sha256,
    )  # fmt: skip
    with pytest.raises(ConfigError, match=r"^the surrogate has no feasibility classifier"):
        SurrogatePosteriorModel(bare, space).p_feasible(_cube(space, 2, 1))
