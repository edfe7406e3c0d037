"""Feature encoding and target transforms derived from the data."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from sklearn.exceptions import NotFittedError

from deepflow.errors import ConfigError
from deepflow.surrogate import FeatureEncoder, TargetTransform


def _frame() -> pd.DataFrame:
    df = pd.DataFrame({
        "x_kind": ["b", "a", "c", "a"],
        "x_flag": [True, False, True, False],
        "x_wide": [1.0, 10.0, 1000.0, 100.0],      # 3 decades -> log
        "x_narrow": [2.0, 4.0, 3.0, 6.0],          # linear
        "x_const": [7, 7, 7, 7],                   # dropped
        "y_step_time_s": [1.0, 2.0, 3.0, 4.0],
    })  # fmt: skip
    df.attrs["deepflow"] = {"variables": [
        {"name": "kind", "type": "categorical", "columns": ["x_kind"], "choices": ["c", "b", "a"]},
    ]}  # fmt: skip
    return df


def test_encoding_one_hot_log_unit_cube() -> None:
    df = _frame()
    enc = FeatureEncoder().fit(df)
    assert enc.feature_names_ == ["x_kind=c", "x_kind=b", "x_kind=a", "x_flag", "log(x_wide)",
                                  "x_narrow"]  # fmt: skip
    X = enc.transform(df)
    np.testing.assert_array_equal(X[:, :3], [[0, 1, 0], [0, 0, 1], [1, 0, 0], [0, 0, 1]])
    np.testing.assert_allclose(X[:, 4], [0, 1 / 3, 1, 2 / 3])
    np.testing.assert_allclose(X[:, 5], [0, 0.5, 0.25, 1])
    assert X.min() >= 0 and X.max() <= 1


def test_encoder_round_trip_and_errors() -> None:
    df = _frame()
    enc = FeatureEncoder().fit(df)
    again = FeatureEncoder.from_dict(enc.to_dict())
    np.testing.assert_array_equal(again.transform(df), enc.transform(df))
    with pytest.raises(ConfigError, match=r"column 'x_kind' has value\(s\) 'z' the model never "
                       r"saw; known: 'c', 'b', 'a'\."):  # fmt: skip
        enc.transform(df.assign(x_kind=["z", "a", "a", "a"]))
    with pytest.raises(ConfigError, match=r"the points lack input column\(s\) x_flag"):
        enc.transform(df.drop(columns="x_flag"))
    with pytest.raises(NotFittedError):
        FeatureEncoder().transform(df)


def test_target_transform_logs_times_only() -> None:
    Y = np.array([[1.0, -1.0, 5.0], [100.0, 2.0, 6.0]])
    t = TargetTransform(["y_step_time_s", "c_memory_excess_B", "y_mfu"]).fit(Y)
    assert t.log_ == [True, False, False]
    np.testing.assert_allclose(t.inverse(t.transform(Y)), Y)
    assert TargetTransform.from_dict(t.to_dict()).log_ == t.log_


def test_simplex_shares_stay_linear() -> None:
    df = pd.DataFrame({"x_split_other": [0.0001, 0.05, 0.1], "x_b": [1.0, 2.0, 3.0]})
    df.attrs["deepflow"] = {"variables": [
        {"name": "split", "type": "simplex", "columns": ["x_split_other"]},
    ]}  # fmt: skip
    assert FeatureEncoder().fit(df).feature_names_ == ["x_split_other", "x_b"]
