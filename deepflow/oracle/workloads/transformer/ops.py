"""The operations the transformer formulas run on: numpy over arrays of n cases, or Python
floats with memoised kernel models (the fast path of one evaluation).

The formulas are written once, over an ``ops`` object (:class:`ArrayOps` or
:class:`ScalarOps`); IEEE arithmetic is the same in both, so a row of a batch equals the
scalar evaluation (tested). Kernel times come from :mod:`deepflow.oracle.kernels` (GEMMs,
memory-bound kernels) and :mod:`deepflow.oracle.network` (collectives).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace
from functools import lru_cache
from typing import Any

import numpy as np
from numpy.typing import NDArray

from deepflow.oracle.hardware import DeviceCaps
from deepflow.oracle.kernels import GEMM_CAPS_FIELDS, gemm, gemm_one, memory_op_time_s
from deepflow.oracle.network import NetworkModel, collective_time_s

__all__ = ["ArrayOps", "ScalarOps", "clear_memos", "scalar_ops", "training_caps"]

F = NDArray[np.float64]


class ArrayOps:
    """numpy operations and array kernel models (one device, or one device per row)."""

    where = staticmethod(np.where)
    maximum = staticmethod(np.maximum)
    minimum = staticmethod(np.minimum)
    ceil = staticmethod(np.ceil)

    def __init__(self, caps: DeviceCaps, net: NetworkModel) -> None:
        self.caps, self.net, self.varying = caps, net, _varying_caps(caps)

    @staticmethod
    def not_(c: Any) -> Any:
        return ~np.asarray(c)

    @staticmethod
    def any(c: Any) -> bool:
        return bool(np.any(c))

    @staticmethod
    def choose(i: Any, options: Sequence[Any]) -> Any:
        return np.choose(np.asarray(i).astype(int), options)

    @staticmethod
    def choose_parts(i: Any, options: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """Per key, the value of option ``i`` (options share their keys)."""
        index = np.asarray(i).astype(int)
        return {k: np.choose(index, [d[k] for d in options]) for k in options[0]}

    def gemm(self, m: Any, n: Any, k: Any, batch: Any = 1.0) -> Any:
        return _gemm_s(self.caps, m, n, k, batch, self.varying)

    def gemm3(self, m: Any, n: Any, k: Any, batch: Any = 1.0) -> tuple[Any, Any, Any]:
        return _gemm3_s(self.caps, m, n, k, batch, self.varying)

    def mem(self, nbytes: Any, flops: Any = 0.0, launches: Any = 1.0) -> Any:
        return _mem_s(self.caps, nbytes, flops, launches)

    def coll(self, kind: str, msg: Any, size: Any, stride: Any, axes: Any = 0.0) -> Any:
        return _coll(kind, msg, size, self.net, stride, axes)


def _scalar_where(c: Any, a: Any, b: Any) -> Any:
    return a if c else b


class ScalarOps:
    """Python-float operations and memoised kernel models for one (device, network).

    A first pass may *record*: no kernel's inputs depend on another kernel's result, so the
    misses are collected (answered with 0) and then evaluated together, one vectorised call
    per kernel model (:meth:`flush`), before the pass that uses the results.
    """

    where = staticmethod(_scalar_where)
    maximum = staticmethod(max)
    minimum = staticmethod(min)

    def __init__(self, caps: DeviceCaps, net: NetworkModel) -> None:
        self.caps, self.net = caps, net
        self._gemm: dict[tuple[float, ...], float] = {}
        self._mem: dict[tuple[float, ...], float] = {}
        self._coll: dict[tuple[Any, ...], float] = {}
        # misses of a recorder, per model (gemm, mem, coll), in the order first met
        self._missing: tuple[dict[Any, None], ...] | None = None

    @staticmethod
    def ceil(v: float) -> float:
        return float(math.ceil(v))

    @staticmethod
    def not_(c: Any) -> bool:
        return not c

    @staticmethod
    def any(c: Any) -> bool:
        return bool(c)

    @staticmethod
    def choose(i: Any, options: Sequence[Any]) -> Any:
        return options[int(i)]

    @staticmethod
    def choose_parts(i: Any, options: Sequence[Mapping[str, Any]]) -> Mapping[str, Any]:
        return options[int(i)]

    # The lookups below are the hot path of a warm evaluation: a dict hit, nothing else.
    def gemm(self, m: float, n: float, k: float, batch: float = 1.0) -> float:
        key = (m, n, k, batch)
        t = self._gemm.get(key)
        return self._miss(0, key) if t is None else t

    def gemm3(self, m: float, n: float, k: float, batch: float = 1.0) -> tuple[Any, Any, Any]:
        return self.gemm(m, n, k, batch), self.gemm(m, k, n, batch), self.gemm(k, n, m, batch)

    def mem(self, nbytes: float, flops: float = 0.0, launches: float = 1.0) -> float:
        key = (nbytes, flops, launches)
        t = self._mem.get(key)
        return self._miss(1, key) if t is None else t

    def coll(self, kind: str, msg: float, size: float, stride: float, axes: float = 0.0) -> float:
        if size <= 1 or msg <= 0:  # no communication (collective_time_s gives 0 too)
            return 0.0
        key = (_SAME_COST.get(kind, kind), msg, size, stride, axes)
        t = self._coll.get(key)
        return self._miss(2, key) if t is None else t

    def _miss(self, which: int, key: tuple[Any, ...]) -> float:
        """A kernel not memoised: a recorder collects it (answered 0), else it is evaluated."""
        if self._missing is not None:
            self._missing[which][key] = None
            return 0.0
        missing: tuple[dict[Any, None], ...] = ({}, {}, {})
        missing[which][key] = None
        self._evaluate(missing)
        return (self._gemm, self._mem, self._coll)[which][key]

    def recorder(self) -> ScalarOps:
        """A view on the same memos that collects misses instead of evaluating them."""
        if sum(map(len, (self._gemm, self._mem, self._coll))) > _SCALAR_MEMO_MAX:
            for memo in (self._gemm, self._mem, self._coll):
                memo.clear()
        view = ScalarOps.__new__(ScalarOps)  # a shallow copy, without copy.copy's cost
        view.__dict__.update(self.__dict__)
        view._missing = ({}, {}, {})
        return view

    def flush(self, recorded: ScalarOps) -> int:
        """Evaluate a recorder's misses, one vectorised call per model; how many there were."""
        if recorded._missing is None:
            return 0
        return self._evaluate(recorded._missing)

    def _evaluate(self, missing: Sequence[Mapping[tuple[Any, ...], None]]) -> int:
        """Memoise the times of the missing kernels, one vectorised call per model (every
        collective in one call); how many there were. Rows are independent: their order and
        company do not change a time."""
        gemms, mems, colls = (list(m) for m in missing)
        if gemms:
            m, n, k, b = (np.array(c, dtype=float) for c in zip(*gemms, strict=True))
            times = gemm(self.caps, m, n, k, b, detail=False)["time_s"]
            self._gemm.update(zip(gemms, times.tolist(), strict=True))
        if mems:
            nbytes, flops, launches = (np.array(c, dtype=float) for c in zip(*mems, strict=True))
            times = memory_op_time_s(self.caps, nbytes, flops, launches=launches)
            self._mem.update(zip(mems, times.tolist(), strict=True))
        if colls:
            kinds, msg, size, stride, axes = zip(*colls, strict=True)
            times = collective_time_s(
                kinds, np.array(msg), np.array(size), net=self.net, stride=np.array(stride),
                axes=np.array(axes),
            )  # fmt: skip
            self._coll.update(zip(colls, times.tolist(), strict=True))
        return len(gemms) + len(mems) + len(colls)


#: Collectives with one cost model (the same ring and hierarchical algorithms in network.py;
#: tests/oracle/test_network.py checks it), memoised under one key.
_SAME_COST = {"all_gather": "reduce_scatter"}

#: Memoised kernel times per scalar operation set, all models together, before a reset.
_SCALAR_MEMO_MAX = 200_000

#: Scalar operation sets per (device, network); bounded so long sweeps do not grow it.
_SCALAR_OPS: dict[tuple[DeviceCaps, NetworkModel], ScalarOps] = {}
_SCALAR_OPS_MAX = 256


def training_caps(caps: DeviceCaps) -> DeviceCaps:
    """Matrix units sustain a family-wide fraction of their microbenchmark throughput over a
    whole training step (clocks under the power limit, framework overheads); fitted once per
    family by benchmarks/fit_training.py, never per case."""
    return replace(caps, gemm_efficiency=caps.gemm_efficiency * caps.training_sustained_fraction)


def scalar_ops(caps: DeviceCaps, net: NetworkModel) -> ScalarOps | None:
    """The memoised scalar operations for a device and network; None if either has arrays."""
    try:
        ops = _SCALAR_OPS.get((caps, net))
    except TypeError:  # array fields (design sweeps) are not hashable
        return None
    if ops is None:
        if len(_SCALAR_OPS) >= _SCALAR_OPS_MAX:
            _SCALAR_OPS.clear()
        ops = _SCALAR_OPS[(caps, net)] = ScalarOps(training_caps(caps), net)
    return ops


def _unique_columns(flat: F) -> tuple[F, NDArray[np.intp]]:
    """Unique columns of a (rows, n) array and the inverse index (lexsort; fast for n ~ 1e6).

    Rows that are constant do not take part in the sort.
    """
    keys = [row for row in flat if row[0] != row[-1] or np.any(row != row[0])]
    if not keys:
        return flat[:, :1], np.zeros(flat.shape[1], dtype=np.intp)
    order = np.lexsort(keys[::-1])
    ordered = flat[:, order]
    new = np.zeros(ordered.shape[1], dtype=bool)
    new[0] = True
    for row in keys:
        sorted_row = row[order]
        new[1:] |= sorted_row[1:] != sorted_row[:-1]
    ids = np.cumsum(new) - 1
    inverse = np.empty_like(ids)
    inverse[order] = ids
    return ordered[:, new], inverse


#: Batches above this many rows evaluate collectives on their distinct inputs only.
_DEDUP_MIN_ROWS = 256

#: DeviceCaps fields the GEMM model reads (kernels.gemm); when any is given per row (design
#: sweeps) the shapes are not de-duplicated.
_GEMM_CAPS = (*GEMM_CAPS_FIELDS, "kernel_launch_s")


def _varying_caps(caps: DeviceCaps) -> tuple[str, ...]:
    """The GEMM-relevant device fields given per row (arrays: design sweeps, even of one row)."""
    return tuple(f for f in _GEMM_CAPS if np.ndim(getattr(caps, f)) > 0)


def _gemm_s(
    caps: DeviceCaps,
    m: F,
    n: F,
    k: F,
    batch: F | float = 1.0,
    varying: tuple[str, ...] | None = None,
) -> F:
    """GEMM seconds for arrays of shapes.

    On one device many mappings share GEMM shapes (best-mapping evaluates ~1e5 of them), so
    the tile search runs on the distinct shapes only; a single shape uses the memoised path.
    With one device per row (design sweeps) rows rarely repeat and are evaluated directly.
    """
    values = (m, n, k, batch)
    if varying is None:
        varying = _varying_caps(caps)
    if not varying and all(np.size(v) == 1 for v in values):
        mm, nn, kk, bb = (float(np.asarray(v).item()) for v in values)
        if mm.is_integer() and nn.is_integer() and kk.is_integer() and bb.is_integer():
            shape = np.broadcast_shapes(*(np.shape(v) for v in values))
            return np.full(shape, gemm_one(caps, int(mm), int(nn), int(kk), int(bb)))
    if varying:  # one device per row (design sweeps): rows rarely repeat, skip the sort
        return np.asarray(gemm(caps, *values, detail=False)["time_s"], dtype=float)
    stacked = np.stack(np.broadcast_arrays(*(np.asarray(v, dtype=float) for v in values)))
    unique, inverse = _unique_columns(stacked.reshape(4, -1))
    times = gemm(caps, *unique, detail=False)["time_s"]
    return np.asarray(times[inverse].reshape(stacked.shape[1:]), dtype=float)


def _gemm3_s(
    caps: DeviceCaps, m: F, n: F, k: F, batch: F | float, varying: tuple[str, ...]
) -> tuple[F, F, F]:
    """Forward GEMM(m, n, k), input-gradient GEMM(m, k, n) and weight-gradient GEMM(k, n, m)
    of arrays of shapes; many rows: the three on the distinct shapes, found once."""
    values = (m, n, k, batch)
    if varying or all(np.size(v) == 1 for v in values):
        return (
            _gemm_s(caps, m, n, k, batch, varying),
            _gemm_s(caps, m, k, n, batch, varying),
            _gemm_s(caps, k, n, m, batch, varying),
        )
    stacked = np.stack(np.broadcast_arrays(*(np.asarray(v, dtype=float) for v in values)))
    (um, un, uk, ub), inverse = _unique_columns(stacked.reshape(4, -1))
    shape = stacked.shape[1:]
    return tuple(  # type: ignore[return-value]
        np.asarray(gemm(caps, a, b, c, ub, detail=False)["time_s"][inverse].reshape(shape))
        for a, b, c in ((um, un, uk), (um, uk, un), (uk, un, um))
    )


@lru_cache(maxsize=65536)
def _mem_one(caps: DeviceCaps, nbytes: float, flops: float, launches: float) -> float:
    return float(memory_op_time_s(caps, nbytes, flops, launches=launches))


def _mem_s(caps: DeviceCaps, nbytes: F, flops: F | float = 0.0, launches: F | float = 1) -> F:
    """Memory-bound kernel seconds; a scalar case on a scalar device is memoised."""
    if all(np.size(v) == 1 for v in (nbytes, flops, launches)):
        try:
            t = _mem_one(
                caps,
                float(np.asarray(nbytes).item()),
                float(np.asarray(flops).item()),
                float(np.asarray(launches).item()),
            )
            return np.full(np.shape(nbytes), t)
        except TypeError:  # a device with array fields is not hashable
            pass
    return np.asarray(memory_op_time_s(caps, nbytes, flops, launches=launches), dtype=float)


@lru_cache(maxsize=65536)
def _coll_one(
    kind: str, msg: float, size: float, net: NetworkModel, stride: float, axes: float
) -> float:
    return float(collective_time_s(kind, msg, size, net=net, stride=stride, axes=axes))


def _coll(kind: str, msg: F, size: F, net: NetworkModel, stride: F, axes: F | float) -> F:
    """Collective seconds; a scalar case is memoised per (collective, size, group, network)."""
    values = (msg, size, stride, axes)
    arrays = np.broadcast_arrays(*(np.asarray(v, dtype=float) for v in values))
    if arrays[0].size == 1:
        try:
            t = _coll_one(kind, *(float(a.ravel()[0]) for a in arrays[:2]), net,
                          *(float(a.ravel()[0]) for a in arrays[2:]))  # fmt: skip
            return np.full(arrays[0].shape, t)
        except TypeError:  # a network with array fields is not hashable
            pass
    if arrays[0].size > _DEDUP_MIN_ROWS and not net._prepared.batch_shape:
        # One network, many mappings: few distinct (message, group, stride, axes); evaluate those
        # (an empty message or a group of one takes 0 s, as collective_time_s gives)
        flat = np.stack([a.ravel() for a in arrays])
        talks = ~((np.maximum(flat[1], 1.0) <= 1) | (flat[0] <= 0))
        out = np.zeros(flat.shape[1])
        if np.any(talks):
            unique, inverse = _unique_columns(flat[:, talks])
            times = collective_time_s(kind, unique[0], unique[1], net=net, stride=unique[2],
                                      axes=unique[3])  # fmt: skip
            out[talks] = times[inverse]
        return out.reshape(arrays[0].shape)
    return np.asarray(
        collective_time_s(kind, msg, size, net=net, stride=stride, axes=axes), dtype=float
    )


def clear_memos() -> None:
    """Forget the memoised scalar kernel times, as a fresh process starts (benchmarks)."""
    _SCALAR_OPS.clear()
