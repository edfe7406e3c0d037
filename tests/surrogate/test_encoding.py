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
    enc = FeatureEncoder(both_scales=False).fit(df)
    assert enc.feature_names_ == ["x_kind=c", "x_kind=b", "x_kind=a", "x_flag", "log(x_wide)",
                                  "x_narrow"]  # fmt: skip
    X = enc.transform(df)
    np.testing.assert_array_equal(X[:, :3], [[0, 1, 0], [0, 0, 1], [1, 0, 0], [0, 0, 1]])
    np.testing.assert_allclose(X[:, 4], [0, 1 / 3, 1, 2 / 3])
    np.testing.assert_allclose(X[:, 5], [0, 0.5, 0.25, 1])
    assert X.min() >= 0 and X.max() <= 1


def test_positive_numbers_get_both_scales() -> None:
    df = _frame().assign(x_signed=[-1.0, 0.0, 1.0, 2.0])
    enc = FeatureEncoder().fit(df)
    assert enc.feature_names_ == ["x_kind=c", "x_kind=b", "x_kind=a", "x_flag", "x_wide",
        "log(x_wide)", "x_narrow", "log(x_narrow)", "x_signed"]  # fmt: skip
    X = enc.transform(df)
    np.testing.assert_allclose(X[:, 4], [0, 9 / 999, 1, 99 / 999])
    np.testing.assert_allclose(X[:, 5], [0, 1 / 3, 1, 2 / 3])
    np.testing.assert_allclose(X[:, 7], np.log([2, 4, 3, 6]) / np.log(3) - np.log(2) / np.log(3))
    assert enc.derivative("x_flag", [1.0]) == []
    (j1, d1), (j2, d2) = enc.derivative("x_wide", [10.0, 100.0])
    assert (j1, j2) == (4, 5)
    np.testing.assert_allclose(d1, [1 / 999, 1 / 999])
    np.testing.assert_allclose(d2, [1 / (10 * np.log(1000)), 1 / (100 * np.log(1000))])


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


def test_shares_that_may_be_zero_stay_linear() -> None:
    df = pd.DataFrame({"x_split_core": [0.6, 0.5, 0.7], "x_split_other": [0.0001, 0.05, 0.1],
                       "x_b": [1.0, 2.0, 3.0]})  # fmt: skip
    df.attrs["deepflow"] = {"variables": [
        {"name": "split", "type": "simplex", "columns": ["x_split_core", "x_split_other"],
         "parts": ["core", "other"], "low": [0.4, 0.0], "high": [0.9, 0.6]},
        {"name": "b", "type": "continuous", "columns": ["x_b"], "low": 0.0, "high": 4.0},
    ]}  # fmt: skip
    assert FeatureEncoder().fit(df).feature_names_ == [
        "x_split_core", "log(x_split_core)", "x_split_other", "x_b"]  # fmt: skip
    assert FeatureEncoder(both_scales=False).fit(df).feature_names_ == [
        "x_split_core", "x_split_other", "x_b"]  # fmt: skip
