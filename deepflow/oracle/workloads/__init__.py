"""Workloads through one protocol (:class:`Workload`) and a registry: transformer, lstm, gemm
(:mod:`.kinds`), and any kind a user registers with :func:`register_workload`; serving models
by model kind (:mod:`.inference`, :func:`register_serving_workload`)."""

from deepflow.oracle.workloads.base import (
    StepResult,
    Workload,
    register_serving_workload,
    register_workload,
    workload_for,
)
from deepflow.oracle.workloads.inference import InferenceWorkload
from deepflow.oracle.workloads.kinds import GemmWorkload, LstmWorkload, TransformerWorkload

register_serving_workload(InferenceWorkload())

__all__ = [
    "GemmWorkload",
    "InferenceWorkload",
    "LstmWorkload",
    "StepResult",
    "TransformerWorkload",
    "Workload",
    "register_serving_workload",
    "register_workload",
    "workload_for",
]
