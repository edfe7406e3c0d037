"""ONNX export of the MLP ensemble, for serving it without deepflow or torch.

The graph is the ensemble's forward pass (:meth:`MLPEnsemble._core` and the targets' scaling),
written operator by operator with ``onnx.helper`` (opset 18: MatMul, Add, Sigmoid, Mul,
ReduceMean, Sqrt, Transpose, Unsqueeze):

    input  ``features`` (n, p) float32: the encoded inputs, ``SurrogateModel.encoder.transform(df)``
    output ``mean`` (n, q) float32: each target in the model's space (log for log targets)
    output ``std``  (n, q) float32: its calibrated standard deviation in that space

The encoding (``metadata.json``, ``features``) and the log transform of the targets
(``target_transform``) stay outside the graph, as in :meth:`SurrogateModel.predict_transformed`.
``onnx`` is needed to export; ``onnxruntime`` (or any ONNX runtime) to run the file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from deepflow.errors import ConfigError

__all__ = ["ONNX_IR_VERSION", "ONNX_OPSET", "export_onnx"]

ONNX_OPSET = 18
#: The file format version: 8 (ONNX 1.13) reads opset 18 and every runtime since 2022 reads it.
ONNX_IR_VERSION = 8


def export_onnx(model: Any, path: str | Path) -> Path:
    """Write a fitted :class:`~deepflow.surrogate.mlp.MLPEnsemble` (or the MLP of a
    :class:`~deepflow.surrogate.model.SurrogateModel`) as an ONNX file.

    Args:
        model: the fitted ensemble, or a surrogate model holding one.
        path: the ``.onnx`` file to write.

    Returns:
        The path.

    Raises:
        ConfigError: not an MLP ensemble, or ``onnx`` is not installed.
    """
    from deepflow.surrogate.mlp import MLPEnsemble

    mlp = getattr(model, "model", model)
    if not isinstance(mlp, MLPEnsemble):
        kind = getattr(mlp, "kind", type(mlp).__name__)
        raise ConfigError(f"ONNX export is for the mlp surrogate; this one is {kind}.")
    try:
        import onnx
        from onnx import TensorProto, helper, numpy_helper
    except ImportError as exc:
        raise ConfigError("ONNX export needs the onnx package: pip install onnx.") from exc

    def const(name: str, value: Any) -> Any:
        return numpy_helper.from_array(np.asarray(value, dtype=np.float32), name)

    weights = [np.asarray(t.detach().cpu().numpy(), dtype=np.float32) for t in mlp.params_]
    m = mlp.num_members
    inits = [const("x_lo", mlp.x_lo_), const("x_inv_span", 1.0 / mlp.x_span_),
             const("y_mean", mlp.y_mean_), const("y_std", mlp.y_std_),
             const("std_scale", np.asarray(mlp.y_std_) * np.asarray(mlp.std_scale_)),
             numpy_helper.from_array(np.array([0], dtype=np.int64), "axis0"),
             const("tiny", 1e-30)]  # fmt: skip
    nodes = [helper.make_node("Sub", ["features", "x_lo"], ["x0"]),
             helper.make_node("Mul", ["x0", "x_inv_span"], ["x"]),
             helper.make_node("Unsqueeze", ["x", "axis0"], ["h0"])]  # fmt: skip
    h = "h0"  # (1, n, p), broadcast against (members, p, width)
    last = len(weights) // 2 - 1
    for layer in range(len(weights) // 2):
        w, b = weights[2 * layer], weights[2 * layer + 1]  # (m, in, out), (m, 1, out)
        inits += [const(f"w{layer}", w), const(f"b{layer}", b.reshape(m, 1, -1))]
        nodes += [helper.make_node("MatMul", [h, f"w{layer}"], [f"z{layer}"]),
                  helper.make_node("Add", [f"z{layer}", f"b{layer}"], [f"a{layer}"])]  # fmt: skip
        h = f"a{layer}"
        if layer < last:  # SiLU: x * sigmoid(x)
            nodes += [helper.make_node("Sigmoid", [h], [f"s{layer}"]),
                      helper.make_node("Mul", [h, f"s{layer}"], [f"g{layer}"])]  # fmt: skip
            h = f"g{layer}"
    nodes += [
        helper.make_node("ReduceMean", [h, "axis0"], ["mu"], keepdims=1),
        helper.make_node("Sub", [h, "mu"], ["dev"]),
        helper.make_node("Mul", ["dev", "dev"], ["dev2"]),
        helper.make_node("ReduceMean", ["dev2", "axis0"], ["var"], keepdims=0),
        helper.make_node("Add", ["var", "tiny"], ["var1"]),
        helper.make_node("Sqrt", ["var1"], ["spread"]),
        helper.make_node("ReduceMean", [h, "axis0"], ["mu0"], keepdims=0),
        helper.make_node("Mul", ["mu0", "y_std"], ["mu1"]),
        helper.make_node("Add", ["mu1", "y_mean"], ["mean"]),
        helper.make_node("Mul", ["spread", "std_scale"], ["std"]),
    ]  # fmt: skip
    p, q = int(mlp.n_features_in_), int(mlp.n_outputs_)
    graph = helper.make_graph(
        nodes, "deepflow_mlp_ensemble",
        [helper.make_tensor_value_info("features", TensorProto.FLOAT, ["n", p])],
        [helper.make_tensor_value_info("mean", TensorProto.FLOAT, ["n", q]),
         helper.make_tensor_value_info("std", TensorProto.FLOAT, ["n", q])],
        initializer=inits,
    )  # fmt: skip
    opset = [helper.make_opsetid("", ONNX_OPSET)]
    onnx_model = helper.make_model(graph, opset_imports=opset, producer_name="deepflow",
                                   ir_version=ONNX_IR_VERSION)  # fmt: skip
    onnx.checker.check_model(onnx_model)
    out = Path(path)
    onnx.save(onnx_model, str(out))
    return out
