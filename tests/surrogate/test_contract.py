"""The contract every surrogate honours (scikit-learn style), run for each implementation."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from sklearn.exceptions import NotFittedError

from deepflow.errors import ConfigError
from deepflow.surrogate import SVGP, ExactGP, GradientBoosting, MLPEnsemble, Surrogate
from tests.surrogate.conftest import smooth_problem

FACTORIES: dict[str, Callable[..., Surrogate]] = {
    "mlp": lambda seed=0: MLPEnsemble(
        num_members=3, width=16, epochs=80, batch_size=16, random_state=seed
    ),
    "gp": lambda seed=0: ExactGP(max_iter=20, random_state=seed),
    "gbt": lambda seed=0: GradientBoosting(max_iter=20, random_state=seed),
    "svgp": lambda seed=0: SVGP(num_inducing=16, epochs=40, batch_size=32, random_state=seed),
}


@pytest.fixture(params=sorted(FACTORIES))
def make(request: pytest.FixtureRequest) -> Callable[..., Surrogate]:
    return FACTORIES[request.param]


def test_fit_returns_self(make: Callable[..., Surrogate]) -> None:
    X, Y = smooth_problem()
    model = make()
    assert model.fit(X, Y) is model
    assert model.n_features_in_ == 4
    assert model.n_outputs_ == 2


def test_shapes(make: Callable[..., Surrogate]) -> None:
    X, Y = smooth_problem()
    model = make().fit(X, Y)
    mean = model.predict(X[:7])
    assert mean.shape == (7, 2)
    mean, std = model.predict(X[:7], return_std=True)
    assert mean.shape == std.shape == (7, 2)
    assert (std >= 0).all() and np.isfinite(std).all()
    one = make().fit(X, Y[:, 0])
    assert one.predict(X[:5]).shape == (5,)
    assert one.predict(X[:5], return_std=True)[1].shape == (5,)


def test_unfitted_predict_raises(make: Callable[..., Surrogate]) -> None:
    with pytest.raises(NotFittedError):
        make().predict(np.zeros((3, 4)))


def test_one_dimensional_input_rejected_with_advice(make: Callable[..., Surrogate]) -> None:
    X, Y = smooth_problem()
    with pytest.raises(ConfigError, match=r"X must be 2-D .* Use X\.reshape\(1, -1\)"):
        make().fit(X[:, 0], Y)
    model = make().fit(X, Y)
    with pytest.raises(ConfigError, match=r"got shape \(4,\)\. Use X\.reshape\(1, -1\)"):
        model.predict(X[0])
    with pytest.raises(ConfigError, match=r"X has 3 features; the model was fitted on 4\."):
        model.predict(X[:, :3])


def test_same_seed_same_predictions(make: Callable[..., Surrogate]) -> None:
    X, Y = smooth_problem()
    a = make(seed=3).fit(X, Y).predict(X, return_std=True)
    b = make(seed=3).fit(X, Y).predict(X, return_std=True)
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])


def test_save_load_round_trip(make: Callable[..., Surrogate], tmp_path: Path) -> None:
    X, Y = smooth_problem()
    model = make().fit(X, Y)
    model.save(tmp_path / "m")
    loaded = Surrogate.load(tmp_path / "m")
    assert type(loaded) is type(model)
    assert loaded.get_params() == model.get_params()
    for a, b in zip(model.predict(X, return_std=True), loaded.predict(X, return_std=True),
                    strict=True):  # fmt: skip
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)


def test_learns_a_smooth_function(make: Callable[..., Surrogate]) -> None:
    X, Y = smooth_problem(n=120)
    Xt, Yt = smooth_problem(n=40, seed=1)
    model = make().fit(X, Y)
    rmse = np.sqrt(np.mean((model.predict(Xt) - Yt) ** 2, axis=0))
    assert (rmse < 0.75 * Yt.std(axis=0)).all()  # loose: 20 boosting rounds, 120 rows


def test_mlp_different_seed_differs() -> None:
    X, Y = smooth_problem()
    a = FACTORIES["mlp"](seed=0).fit(X, Y).predict(X)
    b = FACTORIES["mlp"](seed=1).fit(X, Y).predict(X)
    assert not np.array_equal(a, b)


def test_gp_refuses_too_many_rows() -> None:
    X, Y = smooth_problem(n=30)
    with pytest.raises(ConfigError, match="30 rows exceed max_rows=20"):
        ExactGP(max_rows=20).fit(X, Y)


def test_load_missing_or_corrupted(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no such surrogate directory"):
        Surrogate.load(tmp_path / "nope")
    (tmp_path / "m").mkdir()
    with pytest.raises(ConfigError, match=r"not a saved surrogate \(no surrogate.json\)"):
        Surrogate.load(tmp_path / "m")
    X, Y = smooth_problem()
    FACTORIES["mlp"]().fit(X, Y).save(tmp_path / "m")
    (tmp_path / "m" / "weights.safetensors").write_bytes(b"garbage")
    with pytest.raises(ConfigError, match="cannot read the surrogate's weights"):
        Surrogate.load(tmp_path / "m")


def test_gp_hyperparameters_from_a_subset_condition_on_every_row() -> None:
    X, Y = smooth_problem(n=60)
    model = ExactGP(max_iter=20, hyperparameter_rows=25).fit(X, Y)
    assert model.model_.train_targets.shape[-1] == 60
    mean = model.predict(X)
    assert np.sqrt(np.mean((mean - Y) ** 2)) < 0.1 * Y.std()  # interpolates its training rows
    with pytest.raises(ConfigError, match=r"^ExactGP: hyperparameter_rows must be >= 2 or None; "
                       r"got 1\.$"):  # fmt: skip
        ExactGP(hyperparameter_rows=1).fit(X, Y)


@pytest.mark.parametrize("kind", ["mlp", "gp", "svgp", "gbt"])
def test_predict_torch_equals_predict(kind: str) -> None:
    import torch

    X, Y = smooth_problem()
    model = FACTORIES[kind]().fit(X, Y[:, 0])
    mean, std = model.predict(X[:9], return_std=True)
    x = torch.tensor(X[:9], dtype=torch.float64, requires_grad=True)
    t_mean, t_std = model.predict_torch(x)
    assert t_mean.shape == t_std.shape == (9, 1)
    np.testing.assert_allclose(t_mean.detach().numpy()[:, 0], mean, rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(t_std.detach().numpy()[:, 0], std, rtol=1e-6, atol=1e-9)
    assert t_mean.requires_grad == model.differentiable
    if model.differentiable:
        (grad,) = torch.autograd.grad(t_mean.sum(), x)
        assert grad.abs().sum() > 0
    with pytest.raises(ConfigError, match=r"X must have shape \(n, 4\); got \(9, 3\)\."):
        model.predict_torch(x[:, :3])


def test_mlp_batched_prediction_is_independent_of_threads() -> None:
    import torch

    X, Y = smooth_problem()
    model = FACTORIES["mlp"]().fit(X, Y)
    Xq = np.random.default_rng(1).random((5000, 4))  # three chunks
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = model.predict(Xq, return_std=True)
        torch.set_num_threads(2)
        two = model.predict(Xq, return_std=True)
        assert torch.get_num_threads() == 2  # restored after the threaded prediction
    finally:
        torch.set_num_threads(threads)
    np.testing.assert_array_equal(one[0], two[0])
    np.testing.assert_array_equal(one[1], two[1])
    np.testing.assert_allclose(one[0][:7], model.predict(Xq[:7]), rtol=1e-6)  # float32 GEMMs
