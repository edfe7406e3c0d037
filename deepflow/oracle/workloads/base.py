"""The workload protocol: what the oracle needs from a kind of workload, and the registry.

A workload kind (``transformer``, ``lstm``, ``gemm``, or one a user registers) is a
:class:`Workload`: its model spec class (the scenario YAML's ``workload.model`` with ``kind``),
the input columns a case is described by, and a step model over columns of n cases.
:func:`deepflow.oracle.evaluate.evaluate_table` evaluates any registered kind through it, and
``evaluate_one`` is its first row.

Example (a toy kind; tests/oracle/test_workload_protocol.py registers one)::

    @dataclass(frozen=True, kw_only=True)
    class ToySpec:
        name: str
        kind: str = key("kind", choices=("toy",))
        flops: float = key("flops", gt=0)

    class Toy(Workload):
        kind, spec_class = "toy", ToySpec
        def columns(self, workload, mapping): return {"flops": workload.model.flops}
        def step(self, caps, net, x, *, calibration): ...

    register_workload(Toy())
"""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, ClassVar, NamedTuple

import numpy as np
from numpy.typing import NDArray

from deepflow.config.calibration import Calibration
from deepflow.config.loader import register_model_kind
from deepflow.config.specs import MappingSpec, WorkloadSpec
from deepflow.errors import ConfigError
from deepflow.oracle.hardware import DeviceCaps
from deepflow.oracle.network import NetworkModel

__all__ = ["StepResult", "Workload", "register_serving_workload", "register_workload",
           "workload_for"]  # fmt: skip

F = NDArray[np.float64]

#: A kind without a memory breakdown.
NO_MEMORY_TERMS: Mapping[str, Any] = MappingProxyType({})


class StepResult(NamedTuple):
    """One step of n cases (arrays of n; floats from :meth:`Workload.step_one`)."""

    step_time_s: Any
    breakdown_s: dict[str, Any]  #: parts that sum to ``step_time_s``
    memory_per_device_B: Any
    model_flops_per_step: Any
    tokens_per_step: Any
    samples_per_step: Any
    #: named parts of ``memory_per_device_B`` that sum to it (kinds that model them)
    memory_breakdown_B: Mapping[str, Any] = NO_MEMORY_TERMS
    #: further outputs of a kind (serving: ``ttft_s``, ``tpot_s``, ``max_concurrency``)
    extra: Mapping[str, Any] = NO_MEMORY_TERMS


class Workload(ABC):
    """A kind of workload: its spec, its input columns and its step model."""

    #: the model's ``kind`` in scenario YAML
    kind: ClassVar[str]
    #: the frozen dataclass a model preset of this kind loads into (fields declared with key())
    spec_class: ClassVar[type]

    @abstractmethod
    def columns(self, workload: WorkloadSpec, mapping: MappingSpec) -> dict[str, float]:
        """The case's input columns (model, batch and mapping), as floats."""

    @abstractmethod
    def step(
        self, caps: DeviceCaps, net: NetworkModel, x: Mapping[str, F], *, calibration: Calibration
    ) -> StepResult:
        """The step of n cases: ``x`` holds an array of n for every name of :meth:`columns`;
        ``caps`` and ``net`` may hold arrays of n (design sweeps); ``calibration`` is what the
        device and network were built with (framework constants come from it)."""

    def step_one(
        self,
        caps: DeviceCaps,
        net: NetworkModel,
        values: Mapping[str, float],
        *,
        calibration: Calibration,
    ) -> StepResult:
        """The step of one case given as floats (a kind may have a faster scalar path)."""
        columns = {k: np.atleast_1d(float(v)) for k, v in values.items()}
        return _first_row(self.step(caps, net, columns, calibration=calibration))


def _first_row(batch: StepResult) -> StepResult:
    def first(v: Any) -> float:
        return float(np.asarray(v).reshape(-1)[0])

    return StepResult(
        step_time_s=first(batch.step_time_s),
        breakdown_s={k: first(v) for k, v in batch.breakdown_s.items()},
        memory_per_device_B=first(batch.memory_per_device_B),
        model_flops_per_step=first(batch.model_flops_per_step),
        tokens_per_step=first(batch.tokens_per_step),
        samples_per_step=first(batch.samples_per_step),
        memory_breakdown_B={k: first(v) for k, v in batch.memory_breakdown_B.items()},
        extra={k: first(v) for k, v in batch.extra.items()},
    )


_REGISTRY: dict[str, Workload] = {}


def register_workload(workload: Workload) -> Workload:
    """Add a workload kind: its spec class becomes loadable as ``workload.model`` of that kind,
    and :func:`workload_for` finds it. Registering a kind again replaces it."""
    if not dataclasses.is_dataclass(workload.spec_class):
        raise TypeError(f"{type(workload).__name__}.spec_class must be a dataclass")
    register_model_kind(workload.kind, workload.spec_class)
    _REGISTRY[workload.kind] = workload
    return workload


#: Serving workloads by model kind (``workload.kind: inference``).
_SERVING: dict[str, Workload] = {}


def register_serving_workload(workload: Workload) -> Workload:
    """Add the serving model of a model kind (``workload.kind: inference``)."""
    _SERVING[workload.kind] = workload
    return workload


def workload_for(model: Any, kind: str = "training") -> Workload:
    """The workload of a model spec: its training step, or with ``kind`` ``inference`` its
    serving model.

    Raises:
        ConfigError: no workload of that kind is registered.
    """
    if kind == "inference":
        serving = _SERVING.get(getattr(model, "kind", ""))
        if serving is None:
            raise ConfigError(
                f"no serving model for {getattr(model, 'kind', None)!r} models (serving is "
                f"modelled for: {', '.join(sorted(_SERVING))})."
            )
        return serving
    found = _REGISTRY.get(getattr(model, "kind", ""))
    if found is None:
        raise ConfigError(
            f"no workload of kind {getattr(model, 'kind', None)!r} is registered (known: "
            f"{', '.join(sorted(_REGISTRY))})."
        )
    return found
