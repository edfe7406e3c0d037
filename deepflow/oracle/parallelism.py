"""Device placement of parallel groups and CrossFlow's distributed GEMM (kernel parallelism).

Placement follows Megatron-LM's rank order "tp-cp-ep-dp-pp": tensor (kernel) parallel ranks
are innermost (adjacent devices, stride 1), then context, data, and pipeline outermost
(Megatron-LM ``parallel_state.RankGenerator``; docs/model.md §C3). A group's stride is
the product of the degrees placed inside it; :mod:`deepflow.oracle.network` turns
(group size, stride, devices per node) into the links the group crosses.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from deepflow.config.specs import MappingSpec
from deepflow.oracle.hardware import DeviceCaps
from deepflow.oracle.kernels import gemm
from deepflow.oracle.network import NetworkModel, collective_time_s

__all__ = ["DistGemm", "GroupLayout", "dist_gemm", "group_layout"]

F = NDArray[np.float64]


@dataclass(frozen=True)
class GroupLayout:
    """Size and stride of each parallel group of a mapping."""

    tensor: tuple[int, int]
    kernel_dim1: tuple[int, int]  # RC's M-split group (CR: the whole tensor group)
    kernel_dim2: tuple[int, int]  # RC's N-split group (innermost)
    context: tuple[int, int]
    data: tuple[int, int]
    pipeline: tuple[int, int]


def group_layout(m: MappingSpec) -> GroupLayout:
    """(size, stride) of every parallel group, tensor-parallel innermost."""
    tp, cp, dp, pp = m.tensor_parallel, m.context_parallel, m.data_parallel, m.pipeline_parallel
    kp2 = m.kernel_parallel_dim2 if m.kernel_partition == "rc" else 1
    return GroupLayout(
        tensor=(tp, 1),
        kernel_dim1=(tp // kp2, kp2),
        kernel_dim2=(kp2, 1),
        context=(cp, tp),
        data=(dp, tp * cp),
        pipeline=(pp, tp * cp * dp),
    )


@dataclass(frozen=True)
class DistGemm:
    """One linear layer C[m, n] = A[m, k] · W[k, n] split over a kernel-parallel group.

    Times in seconds (arrays); ``wgrad_reduce_B`` is the weight-gradient partial sum that must
    still be reduced over ``wgrad_reduce_group`` once per step (with the data-parallel sync).
    """

    forward_s: F
    forward_comm_s: F
    backward_s: F  # dgrad + wgrad GEMMs
    backward_comm_s: F
    weight_elements_local: float
    wgrad_reduce_B: float
    wgrad_reduce_group: tuple[int, int]


def dist_gemm(
    caps: DeviceCaps | Mapping[str, Any],
    net: NetworkModel,
    m: int,
    k: int,
    n: int,
    mapping: MappingSpec,
) -> DistGemm:
    """A linear layer under CrossFlow's kernel parallelism (docs/model.md §B4.6), fixed.

    * none (tensor_parallel 1): forward GEMM(m, n, k); backward dgrad GEMM(m, k, n) and wgrad
      GEMM(k, n, m).
    * RC (M split kp1 ways, N split kp2 ways): forward local GEMM(m/kp1, n/kp2, k) then an
      all-gather of the output over kp2; backward dgrad partial sums all-reduced over kp2, and
      wgrad partial sums over the M split reduced once per step over kp1 (CrossFlow instead
      runs four all-gathers per call).
    * CR (K split kp1 ways): forward local GEMM(m, n, k/kp1) then a reduce-scatter of the
      output over kp1; backward all-gathers dC, then local dgrad/wgrad (no weight reduction).

    Non-divisible splits use the largest share (ceil), never CrossFlow's truncation (§B4.6).
    """
    p = float(caps["bytes_per_element"] if isinstance(caps, Mapping) else caps.bytes_per_element)
    tp = mapping.tensor_parallel
    layout = group_layout(mapping)
    zero = np.zeros(1)
    if tp == 1:
        fwd = gemm(caps, m, n, k)["time_s"]
        bwd = gemm(caps, m, k, n)["time_s"] + gemm(caps, k, n, m)["time_s"]
        return DistGemm(fwd, zero, bwd, zero, float(k * n), 0.0, (1, 1))
    if mapping.kernel_partition == "rc":
        kp1, kp2 = mapping.kernel_parallel_dim1, mapping.kernel_parallel_dim2
        ml, nl = -(-m // kp1), -(-n // kp2)
        fwd = gemm(caps, ml, nl, k)["time_s"]
        fwd_comm = collective_time_s(
            "all_gather", ml * n * p, kp2, net=net, stride=layout.kernel_dim2[1]
        )
        bwd = gemm(caps, ml, k, nl)["time_s"] + gemm(caps, k, nl, ml)["time_s"]
        bwd_comm = collective_time_s(
            "all_reduce", ml * k * p, kp2, net=net, stride=layout.kernel_dim2[1]
        )
        return DistGemm(
            fwd,
            fwd_comm,
            bwd,
            bwd_comm,
            float(k * nl),
            k * nl * p if kp1 > 1 else 0.0,
            layout.kernel_dim1,
        )
    kp1 = tp
    kl = -(-k // kp1)
    fwd = gemm(caps, m, n, kl)["time_s"]
    fwd_comm = collective_time_s("reduce_scatter", m * n * p, kp1, net=net, stride=1)
    bwd = gemm(caps, m, kl, n)["time_s"] + gemm(caps, kl, n, m)["time_s"]
    bwd_comm = collective_time_s("all_gather", m * n * p, kp1, net=net, stride=1)
    return DistGemm(fwd, fwd_comm, bwd, bwd_comm, float(kl * n), 0.0, (1, 1))
