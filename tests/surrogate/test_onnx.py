"""The MLP ensemble exported to ONNX predicts what the torch model predicts."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from deepflow.datasets import load as load_data
from deepflow.errors import ConfigError
from deepflow.surrogate import fit_surrogate
from deepflow.surrogate.onnx_export import export_onnx

pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")


def test_onnx_matches_torch(mapping_data: Path, tmp_path: Path) -> None:
    df = load_data(mapping_data)
    model, _ = fit_surrogate(df, "mlp", targets=["y_step_time_s", "y_memory_per_device_B"],
                             params={"num_members": 3, "width": 16, "epochs": 20})  # fmt: skip
    path = export_onnx(model, tmp_path / "mlp.onnx")
    X = model.encoder.transform(df).astype(np.float32)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    mean, std = session.run(["mean", "std"], {"features": X})
    want_mean, want_std = model.predict_transformed(df)
    assert mean.shape == want_mean.shape == (len(df), 2)
    np.testing.assert_allclose(mean, want_mean, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(std, want_std, rtol=1e-4, atol=1e-6)


def test_onnx_is_for_the_mlp(mapping_data: Path, tmp_path: Path) -> None:
    model, _ = fit_surrogate(load_data(mapping_data), "gbt", targets=["y_step_time_s"],
                             params={"max_iter": 5})  # fmt: skip
    with pytest.raises(ConfigError, match=r"^ONNX export is for the mlp surrogate; this one is "
                       r"gbt\.$"):  # fmt: skip
        export_onnx(model, tmp_path / "x.onnx")
