"""Arrow columns built from buffers equal pa.array's (which imports pandas on first use)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from deepflow.datasets.label import _arrow_array, _string_array


@pytest.mark.parametrize(("values", "type_"), [
    (np.array([1.5, np.nan, -0.0, np.inf]), pa.float64()),
    (np.array([3, 1, 2]), pa.float64()),
    (np.array([3, -1, 2**40]), pa.int64()),
    (np.array([True, False, True, True, False, False, True, False, True]), pa.bool_()),
    (np.array(["n7", "n5", "n7", "", "ünï"]), pa.string()),
    (np.array([], dtype=float), pa.float64()),
])  # fmt: skip
def test_arrow_columns_equal_pa_array(values: np.ndarray, type_: pa.DataType) -> None:
    built = _arrow_array(values, type_)
    built.validate(full=True)
    expected = pa.array(values if values.dtype.kind in "fiub" else values.tolist(), type=type_)
    assert built.type == expected.type and built.null_count == expected.null_count == 0
    assert np.array_equal(built.to_numpy(zero_copy_only=False),
                          expected.to_numpy(zero_copy_only=False),
                          equal_nan=values.dtype.kind == "f")  # fmt: skip


def test_string_column_from_choice_codes() -> None:
    choices = np.array(["none", "selective", "full"])
    codes = np.array([2, 0, 0, 1, 2], dtype=np.int64)
    built = _string_array(codes, choices)
    built.validate(full=True)
    assert built.to_pylist() == ["full", "none", "none", "selective", "full"]
    assert _string_array(codes, np.array([1, 2, 4]).astype(str)).to_pylist()[0] == "4"
    one = _string_array(np.zeros(4, dtype=np.int64), np.array(["0.1+abc"]))
    one.validate(full=True)
    assert one.to_pylist() == ["0.1+abc"] * 4
    with_none = _string_array(codes, np.array(["a", None, "c"], dtype=object))
    assert with_none.to_pylist() == ["c", "a", "a", None, "c"]
