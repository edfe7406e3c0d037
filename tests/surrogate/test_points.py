"""Query points from YAML: names or x_ columns, simplex mappings, exact error messages."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from deepflow.errors import ConfigError
from deepflow.surrogate import SurrogateModel, fit_surrogate, read_points

VARIABLES = [
    {"name": "technology", "type": "categorical", "columns": ["x_technology"],
     "choices": ["n7", "n5"]},
    {"name": "die_area_mm2", "type": "continuous", "columns": ["x_die_area_mm2"],
     "low": 500.0, "high": 850.0, "scale": "linear"},
    {"name": "area_split", "type": "simplex", "columns": ["x_area_split_core",
     "x_area_split_other"], "parts": ["core", "other"], "low": [0.4, 0.0], "high": [0.9, 0.6]},
    {"name": "tensor_parallel", "type": "integer", "columns": ["x_tensor_parallel"],
     "low": 1.0, "high": 32.0, "scale": "linear"},
    {"name": "sequence_parallel", "type": "categorical", "columns": ["x_sequence_parallel"],
     "choices": [False, True]},
    {"name": "zero_stage", "type": "fixed", "columns": ["x_zero_stage"], "choices": [1]},
]  # fmt: skip

POINT: dict[str, Any] = {
    "technology": "n5", "die_area_mm2": 800, "area_split": {"core": 0.7, "other": 0.3},
    "tensor_parallel": 8, "sequence_parallel": True, "data_parallel": 16,
}  # fmt: skip


@pytest.fixture(scope="module")
def model() -> SurrogateModel:
    """A small boosting model on a synthetic frame of the variables above (+ derived DP)."""
    rng = np.random.default_rng(0)
    n = 80
    core = rng.uniform(0.4, 0.9, n)
    df = pd.DataFrame({
        "x_technology": rng.choice(["n7", "n5"], n), "x_die_area_mm2": rng.uniform(500, 850, n),
        "x_area_split_core": core, "x_area_split_other": 1 - core,
        "x_tensor_parallel": rng.integers(1, 33, n), "x_sequence_parallel": rng.random(n) < 0.5,
        "x_zero_stage": np.ones(n, dtype=np.int64), "x_data_parallel": rng.integers(1, 65, n),
    })  # fmt: skip
    df["y_step_time_s"] = df["x_die_area_mm2"] / df["x_tensor_parallel"]
    df.attrs["deepflow"] = {"variables": VARIABLES, "space_sha256": "abc"}
    fitted, _ = fit_surrogate(df, "gbt", test_fraction=0.0, params={"max_iter": 5})
    return fitted


@pytest.fixture
def write(tmp_path: Path, write_yaml: Callable[..., Path]) -> Callable[..., Path]:
    return lambda data: write_yaml(data, "pts.yaml")


def test_names_columns_and_mapping_file(model: SurrogateModel, write: Callable[..., Path]) -> None:
    columns = {
        "x_technology": "n5", "x_die_area_mm2": 800.0, "x_area_split_core": 0.7,
        "x_area_split_other": 0.3, "x_tensor_parallel": 8, "x_sequence_parallel": True,
        "x_data_parallel": 16, "zero_stage": 1,
    }  # fmt: skip
    by_name = read_points(write([POINT, columns]), model)
    assert len(by_name) == 2
    assert by_name["x_sequence_parallel"].dtype == bool
    np.testing.assert_array_equal(model.predict(by_name.iloc[[0]]).to_numpy(),
                                  model.predict(by_name.iloc[[1]]).to_numpy())  # fmt: skip
    as_float = read_points(write([{**POINT, "tensor_parallel": 8.0}]), model)
    assert as_float["x_tensor_parallel"].tolist() == [8]
    wrapped = read_points(write({"points": [POINT]}), model)
    pd.testing.assert_frame_equal(wrapped, by_name.iloc[[0]].drop(columns="x_zero_stage"))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"tensor_paralel": 8},
            "points[0] has unknown variable 'tensor_paralel'; did you mean 'tensor_parallel'? "
            "Valid: area_split, data_parallel, die_area_mm2, sequence_parallel, technology, "
            "tensor_parallel, zero_stage (or their x_ column names).",
        ),
        (
            {"tensor_parallel": 64},
            "points[0].tensor_parallel must be an integer in [1, 32]; got 64.",
        ),
        (
            {"tensor_parallel": 2.5},
            "points[0].tensor_parallel must be an integer in [1, 32]; got 2.5.",
        ),
        (
            {"die_area_mm2": 900.5},
            "points[0].die_area_mm2 must be a number in [500, 850]; got 900.5.",
        ),
        (
            {"technology": "n5x"},
            "points[0].technology must be one of: 'n7', 'n5'; got 'n5x' (did you mean 'n5'?).",
        ),
        ({"technology": 5}, "points[0].technology must be one of: 'n7', 'n5'; got 5."),
        (
            {"sequence_parallel": 1},
            "points[0].sequence_parallel must be one of: false, true; got 1.",
        ),
        ({"zero_stage": 2}, "points[0].zero_stage must be 1 (fixed in the design space); got 2."),
        ({"data_parallel": 0}, "points[0].data_parallel must be an integer >= 1; got 0."),
        (
            {"area_split": {"core": 0.7, "other": 0.2}},
            "points[0].area_split parts must sum to 1; got 0.9.",
        ),
        (
            {"area_split": {"core": 0.95, "other": 0.05}},
            "points[0].area_split.core must be a share in [0.4, 0.9]; got 0.95.",
        ),
        ({"area_split": {"core": 0.7}}, "points[0].area_split is missing part(s) other."),
        (
            {"area_split": {"core": 0.7, "othr": 0.3}},
            "points[0].area_split has "
            "unknown part 'othr'; did you mean 'other'? Parts: core, other.",
        ),
        (
            {"area_split": 0.7},
            "points[0].area_split must be a mapping of parts (core, other); got 0.7.",
        ),
        ({"x_tensor_parallel": 8}, "points[0].x_tensor_parallel repeats tensor_parallel."),
        ({"x_area_split_core": 0.7}, "points[0].x_area_split_core repeats area_split."),
    ],
)
def test_bad_values(model: SurrogateModel, write: Callable[..., Path], change: dict[str, Any],
                    message: str) -> None:  # fmt: skip
    path = write([{**POINT, **change}])
    with pytest.raises(ConfigError) as info:
        read_points(path, model)
    assert str(info.value) == f"{path}: {message}"


def test_missing_values(model: SurrogateModel, write: Callable[..., Path]) -> None:
    point = {k: v for k, v in POINT.items() if k != "die_area_mm2"}
    parts = {k: v for k, v in POINT.items() if k != "area_split"} | {"x_area_split_core": 0.7}
    split = parts | {"x_area_split_other": 0.2}
    cases = [
        ([POINT, point], "points[1] is missing die_area_mm2 (the model needs it)."),
        ([parts], "points[0] is missing area_split part(s) other."),
        ([split], "points[0].area_split parts must sum to 1; got 0.9."),
    ]
    for points, message in cases:
        path = write(points)
        with pytest.raises(ConfigError) as info:
            read_points(path, model)
        assert str(info.value) == f"{path}: {message}"


def test_bad_files(model: SurrogateModel, tmp_path: Path, write: Callable[..., Path]) -> None:
    with pytest.raises(ConfigError) as info:
        read_points(tmp_path / "none.yaml", model)
    assert str(info.value) == f"{tmp_path / 'none.yaml'}: no such file."
    cases = {
        "[1, 2": "YAML syntax error at line 1, column 6",
        "{}": "expected a non-empty list of points (mappings of variable values), or 'points:' "
        "holding one; got null (empty).",
        "pts: []": "unknown key 'pts'. Valid keys: points.",
        "- 3": "points[0] must be a mapping of variable values; got 3.",
    }
    for text, message in cases.items():
        with pytest.raises(ConfigError) as info:
            read_points(write(text), model)
        assert str(info.value).startswith(f"{tmp_path / 'pts.yaml'}: {message}"), str(info.value)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"x_area_split_other": 0.2}, "rows[1].area_split parts must sum to 1; got 0.9."),
        ({"x_area_split_core": 0.95, "x_area_split_other": 0.05},
         "rows[1].x_area_split_core must be a share in [0.4, 0.9]; got 0.95."),
        ({"x_die_area_mm2": float("nan")},
         "rows[1].x_die_area_mm2 must be a number in [500, 850]; got nan."),
        ({"x_tensor_parallel": 64},
         "rows[1].x_tensor_parallel must be an integer in [1, 32]; got 64."),
    ],
)  # fmt: skip
def test_parquet_rows_are_checked_as_yaml_points(model: SurrogateModel, change: dict[str, Any],
                                                 message: str) -> None:  # fmt: skip
    """The Parquet path of ``query`` applies the YAML path's rules (simplex sums, ranges)."""
    from deepflow.surrogate.points import points_from_table

    row = {"x_technology": "n5", "x_die_area_mm2": 800.0, "x_area_split_core": 0.7,
           "x_area_split_other": 0.3, "x_tensor_parallel": 8, "x_sequence_parallel": True,
           "x_zero_stage": 1, "x_data_parallel": 16}  # fmt: skip
    table = pd.DataFrame([row, {**row, **change}])
    assert len(points_from_table(table.iloc[:1], model, file="p.parquet")) == 1
    with pytest.raises(ConfigError) as info:
        points_from_table(table, model, file="p.parquet")
    assert str(info.value) == f"p.parquet: {message}"
