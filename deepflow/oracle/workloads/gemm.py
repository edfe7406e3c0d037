"""The ``gemm`` workload: one GEMM, on one device or split over many (CrossFlow GEMM mode).

Data parallelism splits the M rows into independent blocks (no communication); tensor
parallelism is CrossFlow's kernel parallelism (RC or CR, :func:`dist_gemm`). The "step" is one
forward GEMM, as in the original's GEMM mode (docs/model.md §B4.6).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from deepflow.config.specs import GemmSpec, MappingSpec
from deepflow.oracle.hardware import DeviceCaps
from deepflow.oracle.network import NetworkModel
from deepflow.oracle.parallelism import dist_gemm

__all__ = ["gemm_step"]


def gemm_step(
    caps: DeviceCaps, net: NetworkModel, model: GemmSpec, mapping: MappingSpec
) -> dict[str, Any]:
    """Step time, breakdown, FLOPs and memory of the gemm workload (scalars)."""
    p = caps.bytes_per_element
    m_local = -(-model.m // mapping.data_parallel)
    d = dist_gemm(caps, net, m_local, model.k, model.n, mapping)
    gemm_s = float(np.max(d.forward_s))
    comm_s = float(np.max(d.forward_comm_s))
    if mapping.kernel_partition == "rc":  # A and C row blocks; C gathered over the N split
        rows = -(-m_local // mapping.kernel_parallel_dim1)
        elements = rows * model.k + d.weight_elements_local + rows * model.n
    else:  # CR: A column block, W row block, full partial C
        elements = m_local * -(-model.k // mapping.tensor_parallel) + d.weight_elements_local
        elements += m_local * model.n
    memory = elements * p
    return {
        "step_time_s": gemm_s + comm_s,
        "breakdown_s": {"gemm": gemm_s, "communication_tensor": comm_s},
        "model_flops_per_step": 2.0 * model.m * model.n * model.k,
        "memory_per_device_B": float(memory),
        "tokens_per_step": 0.0,
        "samples_per_step": 1.0,
    }
