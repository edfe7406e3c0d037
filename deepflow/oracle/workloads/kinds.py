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
    row_of,
)
from deepflow.oracle.workloads.gemm import gemm_step
from deepflow.oracle.workloads.lstm import lstm_step
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


_NET_PER_CASE = ("scale_up_bandwidth_Bps", "scale_out_bandwidth_Bps")


def _mapping_columns(kind: str, mapping: MappingSpec) -> dict[str, float]:
    """The mapping columns of a kind: its knobs of the knob table, encoded."""
    return {k.column: k.encode(getattr(mapping, k.name)) for k in knobs_of(kind)}


def _mapping_of(kind: str, row: Mapping[str, float]) -> MappingSpec:
    """A case's mapping from its kind's mapping columns (the other knobs at their default)."""
    return MappingSpec(**{k.name: k.decode(row[k.column]) for k in knobs_of(kind)})


def _by_rows(
    caps: DeviceCaps,
    net: NetworkModel,
    x: Mapping[str, F],
    one: Callable[[DeviceCaps, NetworkModel, dict[str, float]], dict[str, Any]],
) -> StepResult:
    """A scalar step model over n cases, one case at a time (per-case devices and links)."""
    n = max((np.size(v) for v in x.values()), default=1)
    cols = {k: np.broadcast_to(np.asarray(v, dtype=float), (n,)) for k, v in x.items()}
    rows = [
        one(
            row_of(caps, i),
            row_of(net, i, _NET_PER_CASE),
            {k: float(v[i]) for k, v in cols.items()},
        )
        for i in range(n)
    ]

    def column(key: str) -> F:
        return np.array([float(r[key]) for r in rows])

    breakdown = {
        k: np.array([float(r["breakdown_s"][k]) for r in rows])
        for k in (rows[0]["breakdown_s"] if rows else {})
    }
    return StepResult(
        step_time_s=column("step_time_s"),
        breakdown_s=breakdown,
        memory_per_device_B=column("memory_per_device_B"),
        model_flops_per_step=column("model_flops_per_step"),
        tokens_per_step=column("tokens_per_step"),
        samples_per_step=column("samples_per_step"),
    )


class _CaseByCase(Workload):
    """A CrossFlow kind: a scalar step model over its model's integer fields, run case by case.

    ``scalar_step(caps, net, model, mapping[, global_batch_size])`` is the kind's model; the
    global batch is an input column (and its last argument) when ``batched``.
    """

    #: the model spec's fields that are input columns
    fields: ClassVar[tuple[str, ...]]
    #: whether the global batch is an input column
    batched: ClassVar[bool] = False
    scalar_step: ClassVar[Callable[..., dict[str, Any]]]

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
        def one(c: DeviceCaps, nt: NetworkModel, row: dict[str, float]) -> dict[str, Any]:
            shape: dict[str, Any] = {f: int(row[f]) for f in self.fields}
            model = self.spec_class(name="", kind=self.kind, **shape)
            batch = (int(row["global_batch_size"]),) if self.batched else ()
            return type(self).scalar_step(c, nt, model, _mapping_of(self.kind, row), *batch)

        return _by_rows(caps, net, x, one)


class GemmWorkload(_CaseByCase):
    """One GEMM, split over devices as CrossFlow's kernel parallelism (:mod:`.gemm`)."""

    kind = "gemm"
    spec_class = GemmSpec
    fields = ("m", "k", "n")
    scalar_step = staticmethod(gemm_step)


class LstmWorkload(_CaseByCase):
    """The DeepFlow paper's LSTM language model (:mod:`.lstm`)."""

    kind = "lstm"
    spec_class = LstmSpec
    fields = ("num_layers", "hidden_size", "vocab_size", "seq_length", "projection_size",
              "num_gates")  # fmt: skip
    batched = True
    scalar_step = staticmethod(lstm_step)


for _kind in (TransformerWorkload(), GemmWorkload(), LstmWorkload()):
    register_workload(_kind)
