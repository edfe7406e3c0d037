"""The ``gemm`` workload: one GEMM, on one device or split over many (CrossFlow GEMM mode).

Data parallelism splits the M rows into independent blocks (no communication); tensor
parallelism is CrossFlow's kernel parallelism (RC or CR, :func:`dist_gemm`). The "step" is one
forward GEMM, as in the original's GEMM mode (docs/model.md §B4.6).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from numpy.typing import NDArray

from deepflow.oracle.hardware import DeviceCaps
from deepflow.oracle.network import NetworkModel
from deepflow.oracle.parallelism import KernelMapping, dist_gemm

__all__ = ["gemm_step"]

F = NDArray[np.float64]


def gemm_step(caps: DeviceCaps, net: NetworkModel, x: Mapping[str, F]) -> dict[str, Any]:
    """Step time, breakdown, FLOPs and memory of n cases of the gemm workload.

    Args:
        caps: the device (fields scalars or arrays of n).
        net: the network (link bandwidths scalars or arrays of n).
        x: arrays of n: the GEMM's ``m``, ``k``, ``n`` and the kind's mapping columns
            (:class:`~deepflow.oracle.parallelism.KernelMapping`).
    """
    mapping = KernelMapping.from_columns(x)
    p = caps.bytes_per_element
    m, k, n = (np.broadcast_to(np.asarray(x[c], dtype=float), mapping.rc.shape).astype(np.int64)
               for c in ("m", "k", "n"))  # fmt: skip
    m_local = -(-m // mapping.data_parallel)
    d = dist_gemm(caps, net, m_local, k, n, mapping, backward=False)
    gemm_s, comm_s = d.forward_s, d.forward_comm_s
    # RC: A and C row blocks, C gathered over the N split; CR: A column block, W row block,
    # full partial C.
    rows = -(-m_local // mapping.kernel_parallel_dim1)
    rc_elements = rows * k + d.weight_elements_local + rows * n
    cr_elements = m_local * -(-k // mapping.tensor_parallel) + d.weight_elements_local
    cr_elements += m_local * n
    memory = np.where(mapping.rc, rc_elements, cr_elements) * p
    return {
        "step_time_s": gemm_s + comm_s,
        "breakdown_s": {"gemm": gemm_s, "communication_tensor": comm_s},
        "model_flops_per_step": 2.0 * m * n * k,
        "memory_per_device_B": memory,
        "tokens_per_step": 0.0,
        "samples_per_step": 1.0,
    }
