"""Fitting from a dataset, held-out scores, save/load of the whole model, space checks."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from deepflow.datasets import load
from deepflow.errors import ConfigError
from deepflow.surrogate import SurrogateModel, fit_surrogate, score

FAST = {"max_iter": 30}


def test_fit_scores_and_round_trip(mapping_data: Path, tmp_path: Path) -> None:
    df = load(mapping_data)
    model, report = fit_surrogate(df, "gbt", targets=["y_step_time_s", "y_energy_per_step_J"],
                                  params=FAST)  # fmt: skip
    assert report["num_train"] == 240 and report["num_test"] == 60
    for m in report["metrics"].values():
        assert set(m) == {"mape", "r2", "spearman", "coverage95"}
    assert report["metrics"]["y_step_time_s"]["spearman"] > 0.8
    assert model.target_transform.log_ == [True, True]
    model.save(tmp_path / "m")
    meta = json.loads((tmp_path / "m" / "metadata.json").read_text())
    assert meta["space_sha256"] == df.attrs["deepflow"]["space_sha256"]
    assert {"torch", "scikit-learn", "deepflow"} <= set(meta["versions"])
    loaded = SurrogateModel.load(tmp_path / "m", space_sha256=meta["space_sha256"])
    a, b = model.predict(df.iloc[:20]), loaded.predict(df.iloc[:20])
    assert list(a.columns) == ["y_step_time_s", "y_step_time_s_std", "y_step_time_s_lo",
        "y_step_time_s_hi", "y_energy_per_step_J", "y_energy_per_step_J_std",
        "y_energy_per_step_J_lo", "y_energy_per_step_J_hi", "p_feasible"]  # fmt: skip
    np.testing.assert_array_equal(a.to_numpy(), b.to_numpy())
    assert (a["y_step_time_s_lo"] <= a["y_step_time_s"]).all()
    assert (a["y_step_time_s"] <= a["y_step_time_s_hi"]).all()


def test_mlp_model_round_trip(mapping_data: Path, tmp_path: Path) -> None:
    df = load(mapping_data)
    model, _ = fit_surrogate(df, "mlp", targets=["y_step_time_s"],
                             params={"epochs": 10, "num_members": 2})  # fmt: skip
    model.save(tmp_path / "m")
    loaded = SurrogateModel.load(tmp_path / "m")
    np.testing.assert_array_equal(model.predict(df).to_numpy(), loaded.predict(df).to_numpy())


def test_load_refuses_another_space(mapping_data: Path, other_space_data: Path,
                                    tmp_path: Path) -> None:  # fmt: skip
    model, _ = fit_surrogate(load(mapping_data), "gbt", targets=["y_step_time_s"], params=FAST)
    model.save(tmp_path / "m")
    other = load(other_space_data).attrs["deepflow"]["space_sha256"]
    fitted = model.space_sha256
    with pytest.raises(ConfigError, match=(
        f"the surrogate was fitted on design space {fitted[:12]}, but the points come from "
        f"space {other[:12]}; refit on data from this space.")):  # fmt: skip
        SurrogateModel.load(tmp_path / "m", space_sha256=other)


def test_load_corrupted(mapping_data: Path, tmp_path: Path) -> None:
    model, _ = fit_surrogate(load(mapping_data), "gbt", targets=["y_step_time_s"], params=FAST)
    model.save(tmp_path / "m")
    shutil.copytree(tmp_path / "m", tmp_path / "bad_json")
    (tmp_path / "bad_json" / "metadata.json").write_text("{not json", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"metadata.json: corrupted"):
        SurrogateModel.load(tmp_path / "bad_json")
    shutil.copytree(tmp_path / "m", tmp_path / "no_weights")
    (tmp_path / "no_weights" / "model" / "trees.npz").unlink()
    with pytest.raises(ConfigError, match="cannot read the surrogate's weights"):
        SurrogateModel.load(tmp_path / "no_weights")
    shutil.copytree(tmp_path / "m", tmp_path / "old")
    meta = json.loads((tmp_path / "old" / "metadata.json").read_text())
    (tmp_path / "old" / "metadata.json").write_text(json.dumps({**meta, "format": 99}))
    with pytest.raises(ConfigError, match="surrogate format 99 is not supported"):
        SurrogateModel.load(tmp_path / "old")


def test_fit_errors(mapping_data: Path) -> None:
    df = load(mapping_data)
    with pytest.raises(
        ConfigError, match=r"^unknown surrogate 'svm'\. Valid: gbt, gp, mlp, svgp\.$"
    ):
        fit_surrogate(df, "svm")
    with pytest.raises(ConfigError, match=r"^unknown target column 'y_nope'\. Valid: y_step"):
        fit_surrogate(df, "gbt", targets=["y_nope"])


def test_score_hand_computed() -> None:
    y = np.array([1.0, 2.0, 4.0])
    s = score(y, np.array([1.1, 2.0, 4.0]), y - 0.5, y + np.array([0.5, 0.5, -0.1]))
    assert s["mape"] == pytest.approx(0.1 / 3)
    assert s["spearman"] == pytest.approx(1.0)
    assert s["coverage95"] == pytest.approx(2 / 3)
    assert s["r2"] == pytest.approx(1 - 0.01 / np.sum((y - y.mean()) ** 2))
