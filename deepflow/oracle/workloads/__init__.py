"""Workloads through one protocol (:class:`Workload`) and a registry: transformer, lstm, gemm
(:mod:`.kinds`), and any kind a user registers with :func:`register_workload`."""

from deepflow.oracle.workloads.base import (
    StepResult,
    Workload,
    register_workload,
    workload_for,
)
from deepflow.oracle.workloads.kinds import GemmWorkload, LstmWorkload, TransformerWorkload

__all__ = [
    "GemmWorkload",
    "LstmWorkload",
    "StepResult",
    "TransformerWorkload",
    "Workload",
    "register_workload",
    "workload_for",
]
