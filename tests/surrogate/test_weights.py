"""Saved surrogates hold no pickle: safetensors, numpy trees, JSON; the public load API."""

from __future__ import annotations

import json
import pickle
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import deepflow.surrogate as ds
from deepflow.datasets import load as load_data
from deepflow.errors import ConfigError
from deepflow.surrogate import fit_surrogate
from deepflow.surrogate.weights import TreeEnsemble
from tests.surrogate.conftest import MAPPING_SPACE

MLP_FAST = {"num_members": 2, "width": 16, "epochs": 20}


@pytest.fixture
def no_pickle(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any unpickling fails (pickle, joblib and torch.load all go through these)."""

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("a pickle was read")

    monkeypatch.setattr(pickle, "load", refuse)
    monkeypatch.setattr(pickle, "loads", refuse)
    monkeypatch.setattr(pickle._Unpickler, "load", refuse)  # joblib's unpickler


def test_tree_ensemble_predicts_what_scikit_learn_predicts() -> None:
    from sklearn.ensemble import HistGradientBoostingClassifier, HistGradientBoostingRegressor

    rng = np.random.default_rng(0)
    X = rng.random((400, 5))
    X[rng.random(X.shape) < 0.05] = np.nan  # missing values take the learned side
    y = np.nan_to_num(X[:, 0]) + np.sin(5 * np.nan_to_num(X[:, 1]))
    Xt = rng.random((200, 5))
    Xt[rng.random(Xt.shape) < 0.1] = np.nan
    for model in (HistGradientBoostingRegressor(max_iter=40, early_stopping=False),
                  HistGradientBoostingRegressor(max_iter=20, loss="quantile", quantile=0.025,
                                                early_stopping=False)):  # fmt: skip
        model.fit(X, y)
        np.testing.assert_array_equal(TreeEnsemble.from_sklearn(model).predict(Xt),
                                      model.predict(Xt))  # fmt: skip
    clf = HistGradientBoostingClassifier(max_iter=30, early_stopping=False).fit(X, y > 1)
    trees = TreeEnsemble.from_sklearn(clf)
    np.testing.assert_array_equal(trees.predict_proba(Xt), clf.predict_proba(Xt))
    copy = TreeEnsemble.from_arrays(trees.arrays("c"), "c")
    np.testing.assert_array_equal(copy.predict_proba(Xt), clf.predict_proba(Xt))
    assert list(copy.classes_) == [False, True]


@pytest.mark.parametrize(("kind", "params"), [("mlp", MLP_FAST), ("gbt", {"max_iter": 20})])
def test_saved_folder_loads_without_unpickling(mapping_data: Path, tmp_path: Path, kind: str,
                                               params: dict[str, int],
                                               no_pickle: None) -> None:  # fmt: skip
    df = load_data(mapping_data)
    model, _ = fit_surrogate(df, kind, targets=["y_step_time_s", "y_memory_per_device_B"],
                             params=params)  # fmt: skip
    folder = model.save(tmp_path / "m")
    names = sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())
    weights = "model/weights.safetensors" if kind == "mlp" else "model/trees.npz"
    assert names == sorted(["metadata.json", "feasibility.npz", "model/surrogate.json", weights])
    loaded = ds.load(folder, space=MAPPING_SPACE)
    pd.testing.assert_frame_equal(loaded.predict(df), model.predict(df), rtol=1e-12, atol=0)
    medians = loaded.predict(df, return_std=False)
    assert list(medians.columns) == ["y_step_time_s", "y_memory_per_device_B", "p_feasible"]


def test_load_checks_the_space(mapping_data: Path, other_space_data: Path,
                               tmp_path: Path) -> None:  # fmt: skip
    model, _ = fit_surrogate(load_data(mapping_data), "gbt", targets=["y_step_time_s"],
                             params={"max_iter": 10})  # fmt: skip
    folder = model.save(tmp_path / "m")
    other = load_data(other_space_data)
    fitted, theirs = model.space_sha256, other.attrs["deepflow"]["space_sha256"]
    message = (f"the surrogate was fitted on design space {fitted[:12]}, but the points come "
               f"from space {theirs[:12]}; refit on data from this space.")  # fmt: skip
    space_yaml = tmp_path / "other.yaml"
    space_yaml.write_text(other.attrs["deepflow"]["space_yaml"], encoding="utf-8")
    with pytest.raises(ConfigError, match=re.escape(f"{folder}: {message}")):
        ds.load(folder, space=space_yaml)
    with pytest.raises(ConfigError, match=f"^{re.escape(message)}$"):
        ds.load(folder).predict(other)


def test_folders_saved_with_joblib_still_load(mapping_data: Path, tmp_path: Path) -> None:
    import joblib

    df = load_data(mapping_data)
    model, _ = fit_surrogate(df, "gbt", targets=["y_step_time_s"], params={"max_iter": 10})
    folder = model.save(tmp_path / "m")
    old = model.model  # the format before: scikit-learn objects in joblib pickles
    joblib.dump({"models": old.models_, "quantile_models": old.quantile_models_},
                folder / "model" / "weights.joblib")  # fmt: skip
    joblib.dump(model.classifier, folder / "feasibility.joblib")
    (folder / "model" / "trees.npz").unlink()
    (folder / "feasibility.npz").unlink()
    pd.testing.assert_frame_equal(ds.load(folder).predict(df), model.predict(df))
    assert json.loads((folder / "metadata.json").read_text())["kind"] == "gbt"
