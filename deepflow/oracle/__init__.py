"""The analytical CrossFlow model: pure, vectorised functions of specs.

The public face: evaluate a scenario (:func:`evaluate_one`) or n variants of it
(:func:`evaluate_table`), rank its mappings (:func:`best_mappings`), derive a device's
capabilities (:func:`device_caps`), and add a workload kind (:class:`Workload`,
:func:`register_workload`). ``docs/architecture.md`` says how the layers fit together.
"""

from deepflow.oracle.best_mapping import best_mappings, enumerate_mappings
from deepflow.oracle.evaluate import evaluate_one, evaluate_table, network_model
from deepflow.oracle.hardware import DeviceCaps, device_caps, device_summary
from deepflow.oracle.network import NetworkModel, collective_time_s
from deepflow.oracle.workloads import StepResult, Workload, register_workload, workload_for

__all__ = [
    "DeviceCaps",
    "NetworkModel",
    "StepResult",
    "Workload",
    "best_mappings",
    "collective_time_s",
    "device_caps",
    "device_summary",
    "enumerate_mappings",
    "evaluate_one",
    "evaluate_table",
    "network_model",
    "register_workload",
    "workload_for",
]
