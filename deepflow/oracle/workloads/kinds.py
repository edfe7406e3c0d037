"""The built-in workload kinds (transformer, lstm, gemm) through the workload protocol."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import numpy as np
from numpy.typing import NDArray

from deepflow.config.calibration import Calibration
from deepflow.config.mapping import knobs_of
from deepflow.config.specs import GemmSpec, LstmSpec, MappingSpec, TransformerSpec, WorkloadSpec
from deepflow.oracle.hardware import DeviceCaps
from deepflow.oracle.network import NetworkModel
from deepflow.oracle.workloads.base import (
    NO_MEMORY_TERMS,
    StepResult,
    Workload,
    register_workload,
)
from deepflow.oracle.workloads.gemm import gemm_step
from deepflow.oracle.workloads.lstm import SHAPE_COLUMNS, lstm_step
from deepflow.oracle.workloads.transformer import (
    transformer_step,
    transformer_step_one,
    transformer_values,
)

__all__ = ["GemmWorkload", "LstmWorkload", "TransformerWorkload"]

F = NDArray[np.float64]


def _result(out: Mapping[str, Any]) -> StepResult:
    """A step model's result dict as a StepResult (its extra keys dropped)."""
    return StepResult(out["step_time_s"], out["breakdown_s"], out["memory_per_device_B"],
                      out["model_flops_per_step"], out["tokens_per_step"],
                      out["samples_per_step"],
                      out.get("memory_breakdown_B", NO_MEMORY_TERMS))  # fmt: skip


class TransformerWorkload(Workload):
    """Decoder-only transformer training (:mod:`deepflow.oracle.workloads.transformer`)."""

    kind = "transformer"
    spec_class = TransformerSpec

    def columns(self, workload: WorkloadSpec, mapping: MappingSpec) -> dict[str, float]:
        assert isinstance(workload.model, TransformerSpec)
        return transformer_values(workload.model, mapping, workload.global_batch_size)

    def step(
        self, caps: DeviceCaps, net: NetworkModel, x: Mapping[str, F], *, calibration: Calibration
    ) -> StepResult:
        return _result(transformer_step(caps, net, x, calibration=calibration))

    def step_one(
        self,
        caps: DeviceCaps,
        net: NetworkModel,
        values: Mapping[str, float],
        *,
        calibration: Calibration,
    ) -> StepResult:
        return _result(transformer_step_one(caps, net, values, calibration=calibration))


def _mapping_columns(kind: str, mapping: MappingSpec) -> dict[str, float]:
    """The mapping columns of a kind: its knobs of the knob table, encoded."""
    return {k.column: k.encode(getattr(mapping, k.name)) for k in knobs_of(kind)}


class _CrossFlowKind(Workload):
    """A CrossFlow kind: a step model over columns of n cases (the model's integer fields, the
    global batch when ``batched``, and the kind's mapping knobs); one case is a batch of one.

    ``step_model(caps, net, x)`` is the kind's model.
    """

    #: the model spec's fields that are input columns
    fields: ClassVar[tuple[str, ...]]
    #: whether the global batch is an input column
    batched: ClassVar[bool] = False
    step_model: ClassVar[Callable[..., dict[str, Any]]]

    def columns(self, workload: WorkloadSpec, mapping: MappingSpec) -> dict[str, float]:
        model = workload.model
        assert isinstance(model, self.spec_class)
        cols = {f: float(getattr(model, f)) for f in self.fields}
        if self.batched:
            cols["global_batch_size"] = float(workload.global_batch_size)
        return cols | _mapping_columns(self.kind, mapping)

    def step(
        self, caps: DeviceCaps, net: NetworkModel, x: Mapping[str, F], *, calibration: Calibration
    ) -> StepResult:
        return _result(type(self).step_model(caps, net, x))


class GemmWorkload(_CrossFlowKind):
    """One GEMM, split over devices as CrossFlow's kernel parallelism (:mod:`.gemm`)."""

    kind = "gemm"
    spec_class = GemmSpec
    fields = ("m", "k", "n")
    step_model = staticmethod(gemm_step)


class LstmWorkload(_CrossFlowKind):
    """The DeepFlow paper's LSTM language model (:mod:`.lstm`)."""

    kind = "lstm"
    spec_class = LstmSpec
    fields = SHAPE_COLUMNS
    batched = True
    step_model = staticmethod(lstm_step)


for _kind in (TransformerWorkload(), GemmWorkload(), LstmWorkload()):
    register_workload(_kind)
