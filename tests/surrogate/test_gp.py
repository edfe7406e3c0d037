"""The exact GP's own machinery: its likelihood gradient, indicator columns, kernels, stages."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch

from deepflow.errors import ConfigError
from deepflow.surrogate import ExactGP, Surrogate
from tests.surrogate.conftest import smooth_problem


def _levels_problem(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """A smooth input, a 4-level input whose top level differs in kind, and the log of the
    4-level input (as the encoder writes it next to the linear column)."""
    rng = np.random.default_rng(seed)
    level = rng.integers(0, 4, n)
    X = np.column_stack([rng.random(n), level / 3.0, np.log1p(level) / math.log(4.0)])
    y = np.sin(3 * X[:, 0]) + 2.0 * (level == 3)
    return X, y


def test_likelihood_and_gradient_equal_gpytorch() -> None:
    from gpytorch.mlls import ExactMarginalLogLikelihood

    from deepflow.surrogate.gp import _objective

    X, Y = smooth_problem(n=40)
    gp = ExactGP(max_iter=1).fit(X, Y[:, 0])
    model = gp._build(torch.as_tensor(X), torch.as_tensor(Y[:, :1]))
    with torch.no_grad():  # away from the prior's mode, so every gradient is non-zero
        model.covar_module.lengthscale = torch.tensor([[0.4, 0.9, 0.6, 1.3]], dtype=torch.float64)
        model.likelihood.noise = torch.tensor([0.05], dtype=torch.float64)
        model.mean_module.constant.fill_(0.3)
    mll = ExactMarginalLogLikelihood(model.likelihood, model)
    mll.train()
    params = [p for p in model.parameters() if p.requires_grad]
    reference = -mll(model(*model.train_inputs), model.train_targets)
    ref_grads = torch.autograd.grad(reference, params)
    ours = _objective(model)
    grads = torch.autograd.grad(ours, params)
    # GPyTorch keeps the constant ½ log 2π per row
    assert (reference - ours).item() == pytest.approx(0.5 * math.log(2 * math.pi), abs=1e-10)
    for a, b in zip(ref_grads, grads, strict=True):
        assert a.abs().min() > 1e-6
        torch.testing.assert_close(a, b, rtol=1e-8, atol=1e-10)


def test_few_level_columns_get_indicators() -> None:
    X, y = _levels_problem(60, 0)
    model = ExactGP(max_iter=5).fit(X, y)
    # column 1 has 4 levels; column 2 (its log) repeats them; column 0 is continuous
    assert [c for c, _ in model.levels_] == [1]
    assert model.model_.train_inputs[0].shape == (60, 3 + 4)
    query = torch.tensor([[0.5, 2 / 3, 0.5], [0.5, 0.5, 0.5]], dtype=torch.float64)
    features = model._features(query)
    np.testing.assert_array_equal(features[0, 3:].numpy(), [0, 0, 1, 0])
    np.testing.assert_array_equal(features[1, 3:].numpy(), [0, 0, 0, 0])  # between levels
    assert ExactGP(max_iter=5, one_hot_levels=3).fit(X, y).levels_ == []
    assert ExactGP(max_iter=5, one_hot_levels=0).fit(X, y).levels_ == []
    binary = np.column_stack([X[:, 0], X[:, 1] > 0.5])
    assert ExactGP(max_iter=5).fit(binary, y).levels_ == []  # 0/1 columns are indicators


def test_indicators_learn_a_level_that_differs_in_kind() -> None:
    X, y = _levels_problem(80, 0)
    Xt, yt = _levels_problem(200, 1)

    def rmse(levels: int) -> float:
        model = ExactGP(max_iter=50, one_hot_levels=levels).fit(X, y)
        return float(np.sqrt(np.mean((model.predict(Xt) - yt) ** 2)))

    assert rmse(4) < 0.7 * rmse(0)


def test_kernels_and_refinement_on_every_row() -> None:
    from gpytorch.kernels import MaternKernel, RBFKernel

    X, Y = smooth_problem(n=60)
    default = ExactGP(max_iter=10, hyperparameter_rows=30).fit(X, Y)
    assert isinstance(default.model_.covar_module, MaternKernel)
    assert default.model_.covar_module.nu == 2.5
    rbf = ExactGP(max_iter=10, kernel="rbf").fit(X, Y)
    assert isinstance(rbf.model_.covar_module, RBFKernel)
    refined = ExactGP(max_iter=10, hyperparameter_rows=30, refine_iter=10).fit(X, Y)
    a = default.model_.covar_module.lengthscale
    b = refined.model_.covar_module.lengthscale
    assert a.shape == b.shape == (2, 1, 4)  # one set per output
    assert not torch.allclose(a, b)  # the refinement on all 60 rows moved them
    rmse = np.sqrt(np.mean((refined.predict(X) - Y) ** 2))
    assert rmse < 0.1 * Y.std()


def test_bad_kernel_and_levels_rejected() -> None:
    X, Y = smooth_problem()
    with pytest.raises(ConfigError, match=r"^ExactGP: unknown kernel 'matern'\. "
                       r"Valid: matern52, rbf\.$"):  # fmt: skip
        ExactGP(kernel="matern").fit(X, Y)
    with pytest.raises(ConfigError, match=r"^ExactGP: one_hot_levels must be >= 0; got -1\.$"):
        ExactGP(one_hot_levels=-1).fit(X, Y)


def test_save_load_with_indicators(tmp_path: Path) -> None:
    X, y = _levels_problem(60, 0)
    model = ExactGP(max_iter=5).fit(X, y)
    model.save(tmp_path / "m")
    loaded = Surrogate.load(tmp_path / "m")
    assert [c for c, _ in loaded.levels_] == [1]
    for a, b in zip(model.predict(X, return_std=True), loaded.predict(X, return_std=True),
                    strict=True):  # fmt: skip
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)


def test_loads_a_gp_saved_before_kernels_and_indicators(tmp_path: Path) -> None:
    """Older files: an RBF kernel, no indicator columns, no such keys in the files."""
    import json

    X, Y = smooth_problem()
    model = ExactGP(max_iter=5, kernel="rbf", one_hot_levels=0).fit(X, Y)
    model.save(tmp_path / "m")
    from safetensors.torch import load_file

    tensors = load_file(tmp_path / "m" / "weights.safetensors")
    weights = {k: tensors[k] for k in ("train_X", "train_Y", "x_lo", "x_span")}
    weights["model"] = {k.removeprefix("model."): v for k, v in tensors.items()
                        if k.startswith("model.")}  # fmt: skip
    torch.save(weights, tmp_path / "m" / "weights.pt")  # the format before safetensors
    (tmp_path / "m" / "weights.safetensors").unlink()
    (tmp_path / "m" / "state.json").unlink()
    meta = json.loads((tmp_path / "m" / "surrogate.json").read_text())
    del meta["params"]["kernel"], meta["params"]["one_hot_levels"]
    (tmp_path / "m" / "surrogate.json").write_text(json.dumps(meta))
    loaded = Surrogate.load(tmp_path / "m")
    assert loaded.kernel == "rbf"
    np.testing.assert_allclose(loaded.predict(X), model.predict(X), rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(loaded.std_scale_, np.ones(Y.shape[1]))  # raw posterior std


def test_intervals_are_calibrated_by_leave_one_out() -> None:
    """A noise-free target's raw intervals sit at the likelihood's noise floor (coverage ~1);
    the leave-one-out scale brings both outputs' held-out coverage near 95 %."""
    rng = np.random.default_rng(0)

    def problem(n: int) -> tuple[np.ndarray, np.ndarray]:
        X = rng.random((n, 3))
        noisy = np.sin(6 * X[:, 0]) + 0.1 * rng.standard_normal(n)
        return X, np.column_stack([noisy, 2 * X[:, 1] + X[:, 2]])

    X, Y = problem(300)
    model = ExactGP().fit(X, Y)
    assert model.std_scale_[1] < 0.5 < model.std_scale_[0]
    Xt, Yt = problem(2000)
    mean, std = model.predict(Xt, return_std=True)
    coverage = (np.abs(Yt - mean) <= 1.96 * std).mean(axis=0)
    assert np.all((coverage > 0.90) & (coverage < 0.99)), coverage
    raw = std / model.std_scale_
    assert (np.abs(Yt - mean) <= 1.96 * raw).mean(axis=0)[1] > 0.99
