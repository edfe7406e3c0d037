"""Device placement of parallel groups and CrossFlow's distributed GEMM (kernel parallelism).

Placement follows the mapping's rank order (``rank_order``), by default Megatron-Core's
"tp-cp-ep-dp-pp": tensor (kernel) parallel ranks innermost (adjacent devices, stride 1), then
context, data, and pipeline outermost (``parallel_state.RankGenerator``; docs/model.md §C3).
A group's stride is the product of the degrees placed inside it (:func:`group_strides`);
:mod:`deepflow.oracle.network` turns (group size, stride, devices per node, the grid's axis
order ``grid_axes``) into the links the group crosses.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from deepflow.config.mapping import KNOB
from deepflow.config.specs import RANK_ORDERS
from deepflow.oracle.hardware import DeviceCaps
from deepflow.oracle.kernels import gemm
from deepflow.oracle.network import NetworkModel, collective_time_s

__all__ = [
    "DistGemm",
    "GroupLayout",
    "KernelMapping",
    "collective_s",
    "dist_gemm",
    "group_layout",
    "group_strides",
]

F = NDArray[np.float64]
I64 = NDArray[np.int64]
_RC = KNOB["kernel_partition"].codes["rc"]

#: The parallel dimensions in the order of :func:`group_strides`' degrees, and each rank
#: order's position of every dimension (0 innermost), by dimension: _POSITIONS[d][code].
_DIMS = ("tp", "cp", "dp", "pp")
_POSITIONS = tuple(tuple(float(order.split("-").index(d)) for order in RANK_ORDERS) for d in _DIMS)


class _NumpyOps:
    """The operations :func:`group_strides` needs, on numpy arrays."""

    where = staticmethod(np.where)

    @staticmethod
    def any(c: Any) -> bool:
        return bool(np.any(c))

    @staticmethod
    def choose(i: Any, options: Any) -> Any:
        return np.choose(np.asarray(i).astype(int), options)


def group_strides(
    degrees: tuple[Any, Any, Any, Any], order: Any, o: Any = _NumpyOps
) -> dict[str, Any]:
    """The stride of each parallel group (``st_tp``, ``st_cp``, ``st_dp``, ``st_pp``) of the
    degrees (tp, cp, dp, pp) in the rank order of code ``order`` (:data:`RANK_ORDERS`): the
    product of the degrees of the dimensions placed inside it (docs/model.md §C3;
    Megatron-Core ``RankGenerator``: rank r's coordinate along a dimension is
    r // stride % degree). ``o``: the operations (numpy, or the transformer's scalar or array
    operations)."""
    tp, cp, dp, _ = degrees
    if not o.any(order != 0):  # the default order everywhere (code 0)
        return {"st_tp": 1.0, "st_cp": tp, "st_dp": tp * cp, "st_pp": tp * cp * dp}
    pos = [o.choose(order, p) for p in _POSITIONS]
    out = {}
    for d, (name, mine) in enumerate(zip(_DIMS, pos, strict=True)):
        stride: Any = 1.0
        for j, (degree, theirs) in enumerate(zip(degrees, pos, strict=True)):
            if j != d:
                stride = stride * o.where(theirs < mine, degree, 1.0)
        out[f"st_{name}"] = stride
    return out


@dataclass(frozen=True)
class KernelMapping:
    """The mapping of n cases of a CrossFlow kind (gemm, lstm): integer arrays of n."""

    data_parallel: I64
    tensor_parallel: I64
    pipeline_parallel: I64
    kernel_parallel_dim2: I64
    rc: NDArray[np.bool_]  #: RC kernel partition (M and N split); False: CR (K split)
    rank_order: I64  #: the ``rank_order`` code (:data:`RANK_ORDERS`)
    grid_axes: I64  #: the ``grid_axes`` code (:data:`deepflow.config.specs.GRID_AXES`)

    @classmethod
    def from_columns(cls, x: Mapping[str, Any]) -> KernelMapping:
        """From the kinds' mapping columns (the knob table's; broadcast to a common length)."""
        names = ("data_parallel", "tensor_parallel", "pipeline_parallel", "kernel_parallel_dim2",
                 "kernel_partition", "rank_order", "grid_axes")  # fmt: skip
        cols = np.broadcast_arrays(*(np.asarray(x[KNOB[k].column], dtype=float) for k in names))
        dp, tp, pp, kp2, partition, order, axes = (np.atleast_1d(c) for c in cols)
        return cls(
            data_parallel=dp.astype(np.int64),
            tensor_parallel=tp.astype(np.int64),
            pipeline_parallel=pp.astype(np.int64),
            kernel_parallel_dim2=kp2.astype(np.int64),
            rc=partition == _RC,
            rank_order=order.astype(np.int64),
            grid_axes=axes.astype(np.int64),
        )

    @property
    def kernel_parallel_dim1(self) -> I64:
        """RC's M split, tensor_parallel / kernel_parallel_dim2 (CR's K split: tensor_parallel)."""
        return np.where(self.rc, self.tensor_parallel // self.kernel_parallel_dim2,
                        self.tensor_parallel)  # fmt: skip


@dataclass(frozen=True)
class GroupLayout:
    """Size and stride of each parallel group of a mapping (integer arrays of n)."""

    tensor: tuple[I64, I64]
    kernel_dim1: tuple[I64, I64]  # RC's M-split group (CR: the whole tensor group)
    kernel_dim2: tuple[I64, I64]  # RC's N-split group (innermost)
    data: tuple[I64, I64]
    pipeline: tuple[I64, I64]
    axes: I64  #: the grid-axes code every group's collectives take


def group_layout(m: KernelMapping) -> GroupLayout:
    """(size, stride) of every parallel group in the mapping's rank order (no context split;
    the kernel-parallel group is the tensor-parallel one, its N split innermost)."""
    tp, dp, pp = m.tensor_parallel, m.data_parallel, m.pipeline_parallel
    kp2 = np.where(m.rc, m.kernel_parallel_dim2, 1)
    one = np.ones_like(tp)
    st = group_strides((tp, one, dp, pp), m.rank_order)
    st_tp, st_dp, st_pp = (np.asarray(st[k]).astype(np.int64) * one
                           for k in ("st_tp", "st_dp", "st_pp"))  # fmt: skip
    return GroupLayout(
        tensor=(tp, st_tp),
        kernel_dim1=(tp // kp2, kp2 * st_tp),
        kernel_dim2=(kp2, st_tp),
        data=(dp, st_dp),
        pipeline=(pp, st_pp),
        axes=m.grid_axes,
    )


@dataclass(frozen=True)
class DistGemm:
    """n linear layers C[m, n] = A[m, k] · W[k, n], each split over its kernel-parallel group.

    Times in seconds (arrays of n); ``wgrad_reduce_B`` is the weight-gradient partial sum that
    must still be reduced over the group of ``wgrad_reduce_size`` ranks at stride
    ``wgrad_reduce_stride`` once per step (with the data-parallel sync).
    """

    forward_s: F
    forward_comm_s: F
    backward_s: F  # dgrad + wgrad GEMMs
    backward_comm_s: F
    weight_elements_local: F
    wgrad_reduce_B: F
    wgrad_reduce_size: I64
    wgrad_reduce_stride: I64


def _ceil_div(a: I64, b: I64) -> I64:
    return -(-a // b)


def dist_gemm(
    caps: DeviceCaps | Mapping[str, Any],
    net: NetworkModel,
    m: I64,
    k: I64,
    n: I64,
    mapping: KernelMapping,
    *,
    backward: bool = True,
) -> DistGemm:
    """Linear layers under CrossFlow's kernel parallelism (docs/model.md §B4.6), fixed; every
    argument may hold n cases (integer shapes, ``caps`` and ``net`` fields of n).

    * none (tensor_parallel 1): forward GEMM(m, n, k); backward dgrad GEMM(m, k, n) and wgrad
      GEMM(k, n, m).
    * RC (M split kp1 ways, N split kp2 ways): forward local GEMM(m/kp1, n/kp2, k) then an
      all-gather of the output over kp2; backward dgrad partial sums all-reduced over kp2, and
      wgrad partial sums over the M split reduced once per step over kp1 (CrossFlow instead
      runs four all-gathers per call).
    * CR (K split kp1 ways): forward local GEMM(m, n, k/kp1) then a reduce-scatter of the
      output over kp1; backward all-gathers dC, then local dgrad/wgrad (no weight reduction).

    Each is a local GEMM (M, N, K) — (m, n, k), (m/kp1, n/kp2, k) or (m, n, k/kp1) — with dgrad
    (M, K, N) and wgrad (K, N, M), all in one batched kernel-model call. Non-divisible splits
    use the largest share (ceil), never CrossFlow's truncation (§B4.6). With ``backward``
    False only the forward pass is modelled (the backward fields are NaN).
    """
    p = np.asarray(caps["bytes_per_element"] if isinstance(caps, Mapping)
                   else caps.bytes_per_element, dtype=float)  # fmt: skip
    tp, rc = mapping.tensor_parallel, mapping.rc
    split = tp > 1
    layout = group_layout(mapping)
    kp1, kp2 = mapping.kernel_parallel_dim1, mapping.kernel_parallel_dim2
    ml, nl, kl = _ceil_div(m, kp1), _ceil_div(n, kp2), _ceil_div(k, tp)
    rc_split, cr_split = split & rc, split & ~rc
    m_loc = np.where(rc_split, ml, m)
    n_loc = np.where(rc_split, nl, n)
    k_loc = np.where(cr_split, kl, k)
    # RC: all-gather of the output (ml·n) and all-reduce of dgrad (ml·k) over kp2 (innermost);
    # CR: reduce-scatter of the output and all-gather of dC (m·n) over kp1 (the tensor group).
    group = np.where(rc_split, kp2, np.where(cr_split, tp, 1))
    place = (layout.tensor[1], layout.axes)  # both groups start at the tensor group's stride
    fwd_comm = _collective(("all_gather", "reduce_scatter"), rc, np.where(rc, ml * n, m * n) * p,
                           group, net, place)  # fmt: skip
    if not backward:
        fwd = gemm(caps, m_loc, n_loc, k_loc, detail=False)["time_s"]
        bwd = bwd_comm = np.full(fwd.shape, np.nan)
    else:  # forward, dgrad and wgrad GEMMs as one batch (rows are independent)
        times = gemm(caps, np.stack([m_loc, m_loc, k_loc]), np.stack([n_loc, k_loc, n_loc]),
                     np.stack([k_loc, n_loc, m_loc]), detail=False)["time_s"]  # fmt: skip
        fwd, bwd = times[0], times[1] + times[2]
        bwd_comm = _collective(("all_reduce", "all_gather"), rc,
                               np.where(rc, ml * k, m * n) * p, group, net, place)  # fmt: skip
    wgrad = np.where(rc_split & (kp1 > 1), k * nl * p, 0.0)
    size, stride = (np.where(rc_split, v, 1) for v in layout.kernel_dim1)
    return DistGemm(fwd, fwd_comm, bwd, bwd_comm, (k_loc * n_loc).astype(float), wgrad, size,
                    stride)  # fmt: skip


def _collective(names: tuple[str, str], first: NDArray[np.bool_], message_B: F, group: I64,
                net: NetworkModel, place: tuple[I64, I64]) -> F:  # fmt: skip
    """Each case's collective: ``names[0]`` where ``first``, else ``names[1]``, at ``place``
    (stride, grid-axes code)."""
    if first.all() or not first.any():
        kind: str | list[str] = names[0] if first.all() else names[1]
    else:
        kind = [names[0] if f else names[1] for f in first.tolist()]
    return collective_s(kind, message_B, group, net=net, stride=place[0], axes=place[1])


def collective_s(kind: str | list[str], message_B: Any, group_size: Any, *, net: NetworkModel,
                 stride: Any = 1, axes: Any = 0) -> F:  # fmt: skip
    """:func:`~deepflow.oracle.network.collective_time_s`, not called when no case
    communicates (every group of one rank or every message empty: 0 s, as it returns)."""
    message = np.asarray(message_B, dtype=float)
    group = np.asarray(group_size)
    if not np.any((group > 1) & (message > 0)):
        return np.zeros(np.broadcast(message, group).shape)
    return collective_time_s(kind, message, group, net=net, stride=stride, axes=axes)
