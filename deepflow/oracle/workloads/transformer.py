"""Transformer (decoder-only LLM) training step: time, breakdown, memory, FLOPs. Vectorised.

Every input is an array over n cases (mappings, models or devices); one scenario can also be
evaluated on plain floats (:func:`transformer_step_one`), through the same formulas (one
:func:`_compose`, run with numpy or with scalar operations). The composition is additive, as
in Calculon (llm-training-model §4, §7.1):

    step = pipeline (micro-batches × slowest stage + bubble) + exposed data-parallel
           communication + optimizer step + tied-embedding sync,

with, per layer and micro-batch, GEMMs and the attention core on the matrix units
(:mod:`deepflow.oracle.kernels`), norms/activations/residuals at HBM bandwidth, and tensor-,
context- and expert-parallel collectives from :mod:`deepflow.oracle.network` on the links the
group crosses. Formulas cite llm-training-model.md (the project's sourced formula sheet).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from copy import copy
from dataclasses import replace
from functools import lru_cache
from typing import Any

import numpy as np
from numpy.typing import NDArray

from deepflow.config.specs import MappingSpec, TransformerSpec
from deepflow.oracle.calibration import framework_calibration
from deepflow.oracle.hardware import DeviceCaps
from deepflow.oracle.kernels import gemm, gemm_one, memory_op_time_s
from deepflow.oracle.network import NetworkModel, collective_time_s

__all__ = [
    "MAPPING_COLUMNS",
    "MODEL_COLUMNS",
    "activation_bytes_per_layer",
    "model_flops_per_step",
    "transformer_columns",
    "transformer_step",
    "transformer_step_one",
    "transformer_values",
]

F = NDArray[np.float64]

MODEL_COLUMNS = (
    "num_layers", "hidden_size", "num_attention_heads", "num_kv_heads", "ffn_hidden_size",
    "swiglu", "seq_length", "vocab_size", "num_experts", "experts_per_token", "dropout",
    "global_batch_size",
)  # fmt: skip
MAPPING_COLUMNS = (
    "tensor_parallel", "pipeline_parallel", "data_parallel", "context_parallel",
    "expert_parallel", "micro_batch_size", "virtual_pipeline_stages", "sequence_parallel",
    "recompute", "zero_stage", "flash_attention", "tp_comm_overlap", "overlap_grad_reduce",
)  # fmt: skip
_RECOMPUTE = {"none": 0.0, "selective": 1.0, "full": 2.0}

#: FlashAttention skips KV tiles above the causal diagonal: executed fraction (1 + w/s)/2 with
#: KV tile width w = 128 (llm-training-model §1.1).
_FLASH_KV_TILE = 128.0
#: FlashAttention backward runs 5 matmuls against 2 forward (it recomputes S): 2.5× (§1.2).
_FLASH_BWD = 2.5
#: Adam step bytes per locally optimised parameter: read 16 B, write 14 B (§6.3).
_ADAM_BYTES = 30.0
_ADAM_FLOPS = 11.0  # Calculon: 11 FLOPs per parameter (§6.3)
#: Gradient-norm pass before the step (clipping): read the 4-byte main gradient (§6.3).
_GRAD_NORM_BYTES = 4.0
#: Unfused softmax cross-entropy, fp32 bytes per logit (Megatron-LM
#: tensor_parallel/cross_entropy.py): forward writes the fp32 copy (4), max (read 4),
#: subtract (8), exp (8), sum (4), divide (8); backward scales the saved softmax (8) and
#: reads it for the cast back to 16 bits (4). The 16-bit logits read/written add p each.
_CE_FWD_BYTES_FP32 = 36.0
_CE_BWD_BYTES_FP32 = 12.0
#: Megatron's estimator adds 5 % to activations for temporaries (§2.5).
_ACTIVATION_OVERHEAD = 1.05


def transformer_values(model: TransformerSpec, mapping: MappingSpec,
                       global_batch_size: int) -> dict[str, float]:  # fmt: skip
    """One (model, mapping) as floats, keyed by the model and mapping column names."""
    return {
        "num_layers": float(model.num_layers),
        "hidden_size": float(model.hidden_size),
        "num_attention_heads": float(model.num_attention_heads),
        "num_kv_heads": float(model.num_kv_heads),
        "ffn_hidden_size": float(model.ffn_hidden_size),
        "swiglu": float(model.ffn_activation == "swiglu"),
        "seq_length": float(model.seq_length),
        "vocab_size": float(model.vocab_size),
        "num_experts": float(model.num_experts),
        "experts_per_token": float(model.experts_per_token),
        "dropout": float(model.dropout),
        "global_batch_size": float(global_batch_size),
        "tensor_parallel": float(mapping.tensor_parallel),
        "pipeline_parallel": float(mapping.pipeline_parallel),
        "data_parallel": float(mapping.data_parallel),
        "context_parallel": float(mapping.context_parallel),
        "expert_parallel": float(mapping.expert_parallel),
        "micro_batch_size": float(mapping.micro_batch_size),
        "virtual_pipeline_stages": float(mapping.virtual_pipeline_stages),
        "sequence_parallel": float(mapping.sequence_parallel),
        "recompute": _RECOMPUTE[mapping.activation_recompute],
        "zero_stage": float(mapping.zero_stage),
        "flash_attention": float(mapping.flash_attention),
        "tp_comm_overlap": float(mapping.tp_comm_overlap),
        "overlap_grad_reduce": float(mapping.overlap_grad_reduce),
    }


def transformer_columns(model: TransformerSpec, mapping: MappingSpec,
                        global_batch_size: int) -> dict[str, F]:  # fmt: skip
    """One (model, mapping) as a batch of one, in the columns :func:`transformer_step` takes."""
    values = transformer_values(model, mapping, global_batch_size)
    return {k: np.atleast_1d(np.asarray(v, dtype=float)) for k, v in values.items()}


# --------------------------------------------------------------------------- operations
# The formulas below are written once, over an ``ops`` object: numpy over arrays of n cases
# (:class:`_ArrayOps`) or plain Python floats with memoised kernels (:class:`_ScalarOps`, the
# fast path of one evaluation). IEEE arithmetic is the same in both, so a row of the batch
# equals the scalar evaluation (tested).


class _ArrayOps:
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

    def gemm(self, m: Any, n: Any, k: Any, batch: Any = 1.0) -> Any:
        return _gemm_s(self.caps, m, n, k, batch, self.varying)

    def gemm3(self, m: Any, n: Any, k: Any, batch: Any = 1.0) -> tuple[Any, Any, Any]:
        return _gemm3_s(self.caps, m, n, k, batch, self.varying)

    def mem(self, nbytes: Any, flops: Any = 0.0, launches: Any = 1.0) -> Any:
        return _mem_s(self.caps, nbytes, flops, launches)

    def coll(self, kind: str, msg: Any, size: Any, stride: Any) -> Any:
        return _coll(kind, msg, size, self.net, stride)


def _scalar_where(c: Any, a: Any, b: Any) -> Any:
    return a if c else b


class _ScalarOps:
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

    def coll(self, kind: str, msg: float, size: float, stride: float) -> float:
        if size <= 1 or msg <= 0:  # no communication (collective_time_s gives 0 too)
            return 0.0
        key = (_SAME_COST.get(kind, kind), msg, size, stride)
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

    def recorder(self) -> _ScalarOps:
        """A view on the same memos that collects misses instead of evaluating them."""
        if sum(map(len, (self._gemm, self._mem, self._coll))) > _SCALAR_MEMO_MAX:
            for memo in (self._gemm, self._mem, self._coll):
                memo.clear()
        view = copy(self)
        view._missing = ({}, {}, {})
        return view

    def flush(self, recorded: _ScalarOps) -> int:
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
            kinds, msg, size, stride = zip(*colls, strict=True)
            times = collective_time_s(kinds, np.array(msg), np.array(size), net=self.net,
                                      stride=np.array(stride))  # fmt: skip
            self._coll.update(zip(colls, times.tolist(), strict=True))
        return len(gemms) + len(mems) + len(colls)


#: Collectives with one cost model (the same ring and hierarchical algorithms in network.py;
#: tests/oracle/test_network.py checks it), memoised under one key.
_SAME_COST = {"all_gather": "reduce_scatter"}

#: Memoised kernel times per scalar operation set, all models together, before a reset.
_SCALAR_MEMO_MAX = 200_000

#: Scalar operation sets per (device, network); bounded so long sweeps do not grow it.
_SCALAR_OPS: dict[tuple[DeviceCaps, NetworkModel], _ScalarOps] = {}
_SCALAR_OPS_MAX = 256


def _training_caps(caps: DeviceCaps) -> DeviceCaps:
    """Matrix units sustain a family-wide fraction of their microbenchmark throughput over a
    whole training step (clocks under the power limit, framework overheads); fitted once per
    family by benchmarks/fit_training.py, never per case."""
    return replace(caps, gemm_efficiency=caps.gemm_efficiency * caps.training_sustained_fraction)


def _scalar_ops(caps: DeviceCaps, net: NetworkModel) -> _ScalarOps | None:
    """The memoised scalar operations for a device and network; None if either has arrays."""
    try:
        ops = _SCALAR_OPS.get((caps, net))
    except TypeError:  # array fields (design sweeps) are not hashable
        return None
    if ops is None:
        if len(_SCALAR_OPS) >= _SCALAR_OPS_MAX:
            _SCALAR_OPS.clear()
        ops = _SCALAR_OPS[(caps, net)] = _ScalarOps(_training_caps(caps), net)
    return ops


def _params_per_layer(x: Mapping[str, Any], o: Any) -> Any:
    """Weights of one transformer layer (attention + MLP or experts + norms), elements."""
    h, a, kv, ffn = (
        x["hidden_size"],
        x["num_attention_heads"],
        x["num_kv_heads"],
        x["ffn_hidden_size"],
    )
    d_h = h / a
    attn = h * (a + 2 * kv) * d_h + a * d_h * h
    mats = 2.0 + x["swiglu"]  # GeLU: 2 matrices; SwiGLU: gate, up, down (§1.1)
    mlp = mats * h * ffn * x["num_experts"]
    router = o.where(x["num_experts"] > 1, h * x["num_experts"], 0.0)
    return attn + mlp + router + 4 * h


def activation_bytes_per_layer(x: Mapping[str, Any]) -> F:
    """Activation bytes one layer keeps for backward, per micro-batch (16-bit, 1-byte masks).

    Korthikanti et al. 2022 §4 (llm-training-model §2.2): s·b·h·(34 + 5·a·s/h) without
    parallelism; with tensor parallelism t the 24 + 5·a·s/h part is split and 10 is not; with
    sequence parallelism everything is split; selective recompute drops the 5·a·s/h score
    terms; full recompute keeps only the layer input 2·s·b·h (÷t with SP). Adjusted (§2.2):
    GQA shrinks K and V by g = kv/a; SwiGLU's MLP keeps 6F/h instead of 4F/h; no dropout drops
    the masks and the dropout outputs; fused (flash) attention keeps only fp32 log-sum-exp
    (4·a·s·b) instead of the s² terms; context parallelism shortens s to s/c.
    """
    arrays = {k: np.asarray(v, dtype=float) for k, v in x.items()}
    return np.asarray(_activation_bytes(arrays, _ArrayOps), dtype=float)


def _activation_bytes(x: Mapping[str, Any], o: Any, recompute: Any = None) -> Any:
    """:func:`activation_bytes_per_layer` over ``o``'s operations (``recompute`` overrides)."""
    h, a, kv = x["hidden_size"], x["num_attention_heads"], x["num_kv_heads"]
    tp, mb = x["tensor_parallel"], x["micro_batch_size"]
    s = x["seq_length"]
    s_loc = s / x["context_parallel"]
    sp = x["sequence_parallel"] > 0
    rc = x["recompute"] if recompute is None else recompute
    flash, dropout = x["flash_attention"] > 0, x["dropout"]
    mats = 2.0 + x["swiglu"]
    sbh = s_loc * mb * h
    g = kv / a
    # split by t: Q 2, K 2g, V 2g, projection input 2, MLP inputs 2·(mats)·F/h (GeLU 16)
    split = 2 + 4 * g + 2 + 2 * mats * x["ffn_hidden_size"] / h
    # not split without SP: 2 LayerNorm inputs 4, QKV and fc1 inputs 2 + 2, dropout masks 2
    unsplit = 4 + 2 + 2 + 2 * dropout
    per_sbh = o.where(sp, (split + unsplit) / tp, unsplit + split / tp)
    # score terms: softmax output 2, dropout mask 1 and output 2 per a·s²·b, split by t
    scores = (2 + 3 * dropout) * a * s_loc * s * mb / tp
    scores = o.where(flash, 4 * a * s_loc * mb / tp, scores)
    scores = o.where((rc == 1) & o.not_(flash), 0.0, scores)
    kept = sbh * per_sbh + scores
    full = 2 * sbh / o.where(sp, tp, 1.0)
    return o.where(rc == 2, full, kept)


def model_flops_per_step(x: Mapping[str, Any]) -> F:
    """Model FLOPs of one step, forward + backward, no recompute, full attention square.

    Megatron's convention before March 2025 (llm-training-model §1.1, §1.4): 3 × forward with
    forward = Σ layers (QKV 2·T·h·(a+2·kv)·d_h, projection 2·T·h², MLP 2·mats·T·h·F × top-k,
    router 2·T·h·E, attention 4·s²·h per sequence) + LM head 2·T·h·V. For a GPT-3-style model
    this is 72·B·s·L·h²·(1 + s/(6h) + V/(12·L·h)).
    """
    arrays = {k: np.asarray(v, dtype=float) for k, v in x.items()}
    return np.asarray(_model_flops(arrays, _ArrayOps), dtype=float)


def _model_flops(x: Mapping[str, Any], o: Any) -> Any:
    h, a, kv = x["hidden_size"], x["num_attention_heads"], x["num_kv_heads"]
    s, tokens = x["seq_length"], x["global_batch_size"] * x["seq_length"]
    d_h = h / a
    mats = 2.0 + x["swiglu"]
    per_token_layer = (
        2 * h * (a + 2 * kv) * d_h
        + 2 * a * d_h * h
        + 2 * mats * h * x["ffn_hidden_size"] * x["experts_per_token"]
        + o.where(x["num_experts"] > 1, 2 * h * x["num_experts"], 0.0)
        + 4 * s * a * d_h
    )
    forward = tokens * (x["num_layers"] * per_token_layer + 2 * h * x["vocab_size"])
    return 3.0 * forward


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
_GEMM_CAPS = (
    "bytes_per_element", "num_sms", "peak_flops", "gemm_efficiency", "l1_bandwidth_Bps",
    "l2_bandwidth_Bps", "l2_capacity_B", "hbm_bandwidth_Bps", "hbm_efficiency", "hbm_latency_s",
    "warp_tile_m", "warp_tile_n", "cluster_size", "kernel_launch_s",
)  # fmt: skip


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


def _gemm3_s(caps: DeviceCaps, m: F, n: F, k: F, batch: F | float,
             varying: tuple[str, ...]) -> tuple[F, F, F]:  # fmt: skip
    """Forward GEMM(m, n, k), input-gradient GEMM(m, k, n) and weight-gradient GEMM(k, n, m)
    of arrays of shapes; many rows: the three on the distinct shapes, found once."""
    values = (m, n, k, batch)
    if varying or all(np.size(v) == 1 for v in values):
        return (_gemm_s(caps, m, n, k, batch, varying), _gemm_s(caps, m, k, n, batch, varying),
                _gemm_s(caps, k, n, m, batch, varying))  # fmt: skip
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
            t = _mem_one(caps, float(np.asarray(nbytes).item()), float(np.asarray(flops).item()),
                         float(np.asarray(launches).item()))  # fmt: skip
            return np.full(np.shape(nbytes), t)
        except TypeError:  # a device with array fields is not hashable
            pass
    return np.asarray(memory_op_time_s(caps, nbytes, flops, launches=launches), dtype=float)


@lru_cache(maxsize=65536)
def _coll_one(kind: str, msg: float, size: float, net: NetworkModel, stride: float) -> float:
    return float(collective_time_s(kind, msg, size, net=net, stride=stride))


def _coll(kind: str, msg: F, size: F, net: NetworkModel, stride: F) -> F:
    """Collective seconds; a scalar case is memoised per (collective, size, group, network)."""
    arrays = np.broadcast_arrays(*(np.asarray(v, dtype=float) for v in (msg, size, stride)))
    if arrays[0].size == 1:
        try:
            t = _coll_one(kind, float(arrays[0].ravel()[0]), float(arrays[1].ravel()[0]), net,
                          float(arrays[2].ravel()[0]))  # fmt: skip
            return np.full(arrays[0].shape, t)
        except TypeError:  # a network with array fields is not hashable
            pass
    if arrays[0].size > _DEDUP_MIN_ROWS and not net._prepared.batch_shape:
        # One network, many mappings: few distinct (message, group, stride); evaluate those.
        unique, inverse = _unique_columns(np.stack([a.ravel() for a in arrays]))
        times = collective_time_s(kind, unique[0], unique[1], net=net, stride=unique[2])
        return np.asarray(times[inverse].reshape(arrays[0].shape), dtype=float)
    return np.asarray(collective_time_s(kind, msg, size, net=net, stride=stride), dtype=float)


def transformer_step(
    caps: DeviceCaps,
    net: NetworkModel,
    x: Mapping[str, Any],
) -> dict[str, Any]:
    """Step time, breakdown (sums to it), memory per device and FLOPs for n cases.

    Args:
        caps: the device at the workload's precision.
        net: the network (its numbers may be arrays of n).
        x: arrays of n for every name in :data:`MODEL_COLUMNS` and :data:`MAPPING_COLUMNS`.
            ``overlap_grad_reduce`` 0 means no data-parallel communication hides under compute;
            with ZeRO-3 it is DeepSpeed's 2021 ZeRO-3: blocking per-module gathers, again for
            the recompute forward.

    Returns:
        ``step_time_s``, ``breakdown_s`` (dict of arrays), ``memory_per_device_B``,
        ``model_flops_per_step``, ``tokens_per_step``, ``samples_per_step``,
        ``num_micro_batches`` — arrays of n.
    """
    arrays = {k: np.asarray(v, dtype=float) for k, v in x.items()}
    tcaps = _training_caps(caps)
    out = _compose(tcaps, arrays, _ArrayOps(tcaps, net))
    for key in ("step_time_s", "memory_per_device_B", "model_flops_per_step"):
        out[key] = np.asarray(out[key], dtype=float)
    return out


def transformer_step_one(
    caps: DeviceCaps,
    net: NetworkModel,
    values: Mapping[str, float],
) -> dict[str, Any]:
    """:func:`transformer_step` of one case given as floats; the same keys, as floats.

    The fast path of one evaluation: plain float arithmetic with kernels and collectives
    memoised per (device, network). A device or network with array fields (design sweeps)
    takes the array path.
    """
    ops = _scalar_ops(caps, net)
    if ops is None:
        batch = transformer_step(caps, net, {k: np.atleast_1d(v) for k, v in values.items()})
        return {k: ({n: float(np.asarray(t)[0]) for n, t in val.items()} if isinstance(val, dict)
                    else float(np.asarray(val)[0])) for k, val in batch.items()}  # fmt: skip
    x = {k: float(v) for k, v in values.items()}
    recorder = ops.recorder()
    result = _compose(ops.caps, x, recorder)
    if ops.flush(recorder):  # kernels not seen before were recorded, evaluated together
        result = _compose(ops.caps, x, ops)
    return result


def _compose(caps: DeviceCaps, x: Mapping[str, Any], o: Any) -> dict[str, Any]:
    """The step model over ``o``'s operations; ``caps`` already at training efficiency."""
    p = caps.bytes_per_element
    L, h, a, kv = x["num_layers"], x["hidden_size"], x["num_attention_heads"], x["num_kv_heads"]
    ffn, s, vocab = x["ffn_hidden_size"], x["seq_length"], x["vocab_size"]
    experts, topk = x["num_experts"], x["experts_per_token"]
    tp, pp, dp, cp = (x[k] for k in ("tensor_parallel", "pipeline_parallel", "data_parallel",
                                     "context_parallel"))  # fmt: skip
    ep, mb, v = x["expert_parallel"], x["micro_batch_size"], x["virtual_pipeline_stages"]
    sp, rc, zero = x["sequence_parallel"] > 0, x["recompute"], x["zero_stage"]
    flash = x["flash_attention"] > 0
    d_h = h / a
    moe = experts > 1
    mats = 2.0 + x["swiglu"]

    m = x["global_batch_size"] / (mb * dp)  # micro-batches per pipeline
    s_loc = s / cp
    T = mb * s_loc  # tokens per micro-batch on one device (the full T enters each TP GEMM)
    T_e = o.where(sp, T / tp, T)  # tokens in the elementwise regions (split by SP)

    # Group strides, tensor parallel innermost (Megatron order tp-cp-ep-dp-pp).
    st_tp, st_cp, st_dp, st_pp = 1.0, tp, tp * cp, tp * cp * dp

    # ------------------------------------------------------------------ GEMMs per layer
    # forward shapes (m, n, k) per device; backward: dgrad (m, k, n) + wgrad (k, n, m).
    qkv = (T, (a + 2 * kv) * d_h / tp, h)
    proj = (T, h, a * d_h / tp)
    dense_up = (T, (mats - 1) * ffn / tp, h)  # GeLU fc1 or SwiGLU gate+up
    dense_down = (T, h, ffn / tp)
    local_experts = o.maximum(experts / ep, 1.0)
    # Experts: the ep ranks exchange tokens (uniform routing); each holds E/ep experts and
    # receives T·k tokens in total, T·k·ep/E per local expert (§1.1, §3.1).
    tok_expert = o.where(moe, T * topk * ep / experts, T)
    up = tuple(
        o.where(moe, e, d)
        for e, d in zip((tok_expert, (mats - 1) * ffn / tp, h), dense_up, strict=True)
    )
    down = tuple(o.where(moe, e, d) for e, d in zip((tok_expert, h, ffn / tp), dense_down,
                                                      strict=True))  # fmt: skip
    mlp_batch = o.where(moe, local_experts, 1.0)

    def fwd_bwd(shape: tuple[Any, Any, Any], batch: Any = 1.0) -> tuple[Any, Any, Any]:
        mm, nn, kk = shape
        return o.gemm3(mm, nn, kk, batch)

    g = [fwd_bwd(qkv), fwd_bwd(proj), fwd_bwd(up, mlp_batch), fwd_bwd(down, mlp_batch)]
    router_f = o.where(moe, o.gemm(T, experts, h, 1.0), 0.0) if o.any(moe) else 0.0
    gemm_f = g[0][0] + g[1][0] + g[2][0] + g[3][0] + router_f
    gemm_dgrad = g[0][1] + g[1][1] + g[2][1] + g[3][1] + router_f
    gemm_wgrad = g[0][2] + g[1][2] + g[2][2] + g[3][2] + router_f

    # ------------------------------------------------------------------ attention core
    # Fused (flash) attention keeps the s×s scores in SRAM: its FLOPs run at the family's
    # attention-kernel efficiency (§6.2) and only Q, K, V and O cross HBM; causal masking
    # skips the tiles above the diagonal; the backward pass executes 2.5× the forward (§1.2).
    heads_loc = mb * a / tp
    causal = (1.0 + _FLASH_KV_TILE / s) / 2.0
    attn_flops = 4.0 * heads_loc * s_loc * s * d_h * causal
    attn_rate = caps.peak_flops * caps.attention_efficiency * caps.training_sustained_fraction
    qkvo_bytes = (2 * s_loc * a + 2 * s * kv) * d_h * mb / tp * p
    hbm_rate = caps.hbm_bandwidth_Bps * caps.hbm_efficiency
    attn_flash_f = o.maximum(attn_flops / attn_rate, qkvo_bytes / hbm_rate) + caps.kernel_launch_s
    attn_flash_b = o.maximum(_FLASH_BWD * attn_flops / attn_rate, 2 * qkvo_bytes / hbm_rate) + (
        caps.kernel_launch_s
    )
    scores = heads_loc * s_loc * s  # elements of the score matrix on this device
    # fused scaled-masked softmax (read + write) then dropout (read, write, 1-byte mask);
    # backward: dropout (read dy and mask, write) and softmax (read y and dy, write)
    drop = x["dropout"]
    soft_f = o.mem(scores * (2 * p + drop * (1 + 2 * p)), 5 * scores, 1 + drop)
    soft_b = o.mem(scores * (3 * p + drop * (1 + 2 * p)), 4 * scores, 1 + drop)
    if o.any(o.not_(flash)):  # unfused rows: the score-matrix GEMMs
        attn_unfused_f = (
            o.gemm(s_loc, s, d_h, heads_loc) + o.gemm(s_loc, d_h, s, heads_loc) + (soft_f)
        )
    else:
        attn_unfused_f = soft_f
    attn_unfused_b = 2 * (attn_unfused_f - soft_f) + soft_b
    attn_f = o.where(flash, attn_flash_f, attn_unfused_f)
    attn_b = o.where(flash, attn_flash_b, attn_unfused_b)

    # ------------------------------------------------------------------ elementwise
    # Bytes per layer (§6.3), as Megatron's fused kernels move them. Forward: 2 norms (read x,
    # write y) and 2 fused bias-dropout-residual-adds (read input and residual, write 1, plus a
    # 1-byte mask with dropout; Megatron-LM fused_bias_dropout_add) in the SP region; fused
    # bias-activation (read + write over F for GeLU, 2F -> F for SwiGLU) in the TP region;
    # rotary on Q and K for SwiGLU (Llama-style) models. Backward, per kernel's autograd
    # inputs and outputs: norm (read x and dy, write dx: 3), dropout-add (read dy and the mask,
    # write dx: 2), the residual fork's gradient sum (read 2, write 1: 3); activation (read dy
    # and the saved input, write dx: GeLU 3, SwiGLU 5); rotary (read dy, write dx: 2).
    unit = T_e * h * p
    mask = drop * T_e * h
    swi = x["swiglu"] > 0
    act_fwd = o.where(swi, 3.0, 2.0) * T * ffn / tp * topk * p
    act_bwd = o.where(swi, 5.0, 3.0) * T * ffn / tp * topk * p
    rope = o.where(swi, 2 * T * (a + kv) * d_h / tp * p, 0.0)
    elem_fwd_bytes = 2 * (2 + 3) * unit + 2 * mask + act_fwd + rope
    elem_bwd_bytes = 2 * (3 + 2 + 3) * unit + 2 * mask + act_bwd + rope
    launches = 5 + x["swiglu"]
    elem_f = o.mem(elem_fwd_bytes, 2 * T_e * h * 5, launches)
    elem_b = o.mem(elem_bwd_bytes, 2 * T_e * h * 10, launches + 2)

    # ------------------------------------------------------------------ TP / CP / EP comm
    act_msg = T * h * p  # one activation tensor, nccl 'size' (§3.1)
    ar = o.coll("all_reduce", act_msg, tp, st_tp)
    ag = o.coll("all_gather", act_msg, tp, st_tp)
    rs = o.coll("reduce_scatter", act_msg, tp, st_tp)
    tp_f = o.where(sp, 2 * (ag + rs), 2 * ar)
    tp_b = o.where(sp, 2 * (ag + rs) + 2 * ag, 2 * ar)
    overlap_tp = x["tp_comm_overlap"] > 0
    # Backward, as Megatron-LM's tensor_parallel layers issue it (§3.1, §3.2): the column-
    # parallel GEMMs (QKV, fc1) all-reduce (SP: reduce-scatter) their input gradient
    # asynchronously under their weight-gradient GEMM (since 2021-09), and with SP re-gather
    # their input asynchronously under their input-gradient GEMM; with SP the row-parallel
    # GEMMs (projection, fc2) must all-gather the output gradient before either GEMM starts
    # (exposed). With --tp-comm-overlap (TE userbuffers) all of it hides under the GEMMs, the
    # forward included.
    col_dgrad, col_wgrad = g[0][1] + g[2][1], g[0][2] + g[2][2]
    tp_b_plain = o.where(
        sp,
        2 * ag + o.maximum(2 * ag - col_dgrad, 0.0) + o.maximum(2 * rs - col_wgrad, 0.0),
        o.maximum(2 * ar - col_wgrad, 0.0),
    )
    tp_f_exp = o.where(overlap_tp, o.maximum(tp_f - gemm_f, 0.0), tp_f)
    tp_b_exp = o.where(overlap_tp, o.maximum(tp_b - gemm_dgrad - gemm_wgrad, 0.0), tp_b_plain)
    kv_msg = 2 * mb * s * kv * d_h * p  # K and V of the whole sequence (§3.1, CP ring)
    cp_ag = o.coll("all_gather", kv_msg, cp, st_cp)
    cp_f_exp = o.maximum(cp_ag - attn_f, 0.0)  # overlapped with the chunk in hand (§3.2)
    cp_b_exp = o.maximum(2 * cp_ag - attn_b, 0.0)
    # expert parallelism is carved out of data parallelism (contract): EP ranks are DP ranks
    a2a = o.where(moe, o.coll("all_to_all", T * topk * h * p, ep, st_dp), 0.0)
    ep_f, ep_b = 2 * a2a, 2 * a2a  # dispatch + combine, exposed by default (§3.2)

    # ------------------------------------------------------------------ per layer, per micro-batch
    layer_f_compute = gemm_f + attn_f + elem_f
    recompute = o.where(rc == 2, layer_f_compute + tp_f_exp,
                        o.where((rc == 1) & o.not_(flash), attn_f, 0.0))  # fmt: skip
    layer = {
        "gemm": gemm_f + gemm_dgrad + gemm_wgrad,
        "attention": attn_f + attn_b,
        "elementwise": elem_f + elem_b,
        "recompute": recompute,
        "tensor_parallel_comm": tp_f_exp + tp_b_exp,
        "context_parallel_comm": cp_f_exp + cp_b_exp,
        "expert_parallel_comm": ep_f + ep_b,
    }
    layer_fwd = layer_f_compute + tp_f_exp + cp_f_exp + ep_f
    layer_bwd = sum(layer.values()) - layer_fwd

    # ------------------------------------------------------------------ stages
    layers_stage = o.ceil(L / pp)
    # vocab-parallel embedding: gather + all-reduce (reduce-scatter with SP) over TP (§3.1)
    emb_f = o.mem(2 * T_e * h * p) + o.where(sp, rs, ar)
    emb_b = o.mem(2 * T_e * h * p)
    head_f, head_dg, head_wg = fwd_bwd((T, vocab / tp, h))
    logits = T * vocab / tp
    # final norm, then the unfused vocab-parallel softmax cross-entropy over fp32 logits
    # (Megatron-LM tensor_parallel/cross_entropy.py; PyTorch's under autocast moves as much):
    # forward cast to fp32, max, subtract, exp, sum, divide; backward scale, cast back.
    ce_f = o.mem(_CE_FWD_BYTES_FP32 * logits + (logits + 2 * T_e * h) * p, 5 * logits, 7.0)
    ce_b = o.mem(_CE_BWD_BYTES_FP32 * logits + logits * p, 2 * logits, 2.0)
    first_extra = {"elementwise": emb_f + emb_b}
    last_extra = {"gemm": head_f + head_dg + head_wg, "elementwise": ce_f + ce_b}
    # Megatron's scatter/gather optimisation (default since Narayanan et al. 2021 §4.1): each
    # of the t ranks sends 1/t of the boundary activation; the receiving node all-gathers it
    # over its scale-up links (§3.1). With SP the activation is already split.
    p2p_msg = act_msg / tp
    regather = o.where(sp, 0.0, ag)
    p2p = o.where(pp > 1, 2 * v * (o.coll("send_recv", p2p_msg, 2.0, st_pp) + regather), 0.0)

    def stage(extra: Mapping[str, Any]) -> dict[str, Any]:
        parts = {k: layers_stage * val for k, val in layer.items()}
        for k, val in extra.items():
            parts[k] = parts[k] + val
        parts["pipeline_p2p"] = p2p
        return parts

    first, last = stage(first_extra), stage(last_extra)
    single = stage({"elementwise": first_extra["elementwise"] + last_extra["elementwise"],
                    "gemm": last_extra["gemm"]})  # fmt: skip
    middle = stage({})
    t_first, t_last = sum(first.values()), sum(last.values())
    t_single, t_mid = sum(single.values()), sum(middle.values())
    one_stage = pp == 1
    which = o.where(one_stage, 0, o.where(t_first >= o.maximum(t_last, t_mid), 1,
                                          o.where(t_last >= t_mid, 2, 3)))  # fmt: skip
    t_mean = o.where(one_stage, t_single,
                     (t_first + t_last + o.maximum(pp - 2, 0) * t_mid) / pp)  # fmt: skip
    bubble = (pp - 1) / v * t_mean  # 1F1B / interleaved 1F1B (§4)
    breakdown: dict[str, Any] = {}
    for key in first:
        breakdown[key] = m * o.choose(which, [single[key], first[key], last[key], middle[key]])
    breakdown["pipeline_bubble"] = bubble

    # ------------------------------------------------------------------ data parallel
    params_layer = _params_per_layer(x, o)
    emb_params = vocab * h
    dense_layer_params = params_layer - o.where(moe, mats * h * ffn * experts, 0.0)
    expert_params = o.where(moe, mats * h * ffn * experts / ep, 0.0)
    stage_layer_params = layers_stage * (dense_layer_params + expert_params) / tp
    stage_params = stage_layer_params + o.where(pp == 1, 2 * emb_params, emb_params) / tp
    grad_bytes = o.where(zero >= 3, p, 4.0)  # fp32 main grads (Megatron), bf16 FSDP (§2.1)
    grads = stage_params * grad_bytes
    params_b = stage_params * p
    ar_dp = o.coll("all_reduce", grads, dp, st_dp)
    rs_dp = o.coll("reduce_scatter", grads, dp, st_dp)
    ag_dp = o.coll("all_gather", params_b, dp, st_dp)
    t_f_stage = layers_stage * layer_fwd
    t_b_stage = layers_stage * layer_bwd
    overlap = x["overlap_grad_reduce"] > 0
    dp_plain = o.where(overlap, o.maximum(ar_dp - t_b_stage, 0.0), ar_dp)
    dp_dist = o.where(overlap, o.maximum(rs_dp - t_b_stage, 0.0) + o.maximum(
        ag_dp - t_f_stage, 0.0), rs_dp + ag_dp)  # fmt: skip
    # ZeRO-3/FSDP: parameters gathered for forward and backward and gradients reduce-scattered
    # every micro-batch, prefetched under compute; the first gather and last reduce-scatter of
    # a layer unit stay exposed (§3.1, §3.2).
    per_mb = o.maximum(ag_dp - t_f_stage, 0.0) + o.maximum(ag_dp + rs_dp - t_b_stage, 0.0)
    dp_zero3 = m * per_mb + (ag_dp + rs_dp) / o.maximum(layers_stage, 1.0)
    # Without overlap (DeepSpeed's ZeRO-3 of 2021): each module fetches its parameters with a
    # blocking all-gather of its own (every all_gather synchronised the device: DeepSpeed PR
    # #1188, issue #1069), so no gather hides under compute; the recompute forward fetches
    # them again (parameters are released after each module's forward); gradients are
    # reduce-scattered per module, on the critical path too (§3.1 ZeRO-3: 3Ψ, plus Ψ with
    # full recompute). Each of those collectives moved at most the framework's own rate per
    # GPU (per-parameter calls, a device sync and a Python-side copy each), measured on one
    # NVLink node (configs/calibration/frameworks.yaml): the longer of NCCL's time and that.
    sync = (zero >= 3) & o.not_(overlap) & (dp > 1)
    if o.any(sync):
        rate = framework_calibration().deepspeed_zero3_2021_rate_Bps
        gathers = o.where(rc == 2, 3.0, 2.0)
        # QKV, projection, the two MLP matrices, and the (tied) embedding spread over layers
        tensors_B = [
            t / tp * p
            for t in (
                h * (a + 2 * kv) * d_h,
                a * d_h * h,
                (mats - 1) * h * ffn * local_experts,
                h * ffn * local_experts,
                emb_params / layers_stage,
            )
        ]

        def blocking(kind: str, t: Any) -> Any:
            return o.maximum(o.coll(kind, t, dp, st_dp), t * (dp - 1) / dp / rate)

        per_layer = sum(
            gathers * blocking("all_gather", t) + blocking("reduce_scatter", t) for t in tensors_B
        )
        dp_zero3 = o.where(sync, m * layers_stage * per_layer, dp_zero3)
    dp_sharded = o.where(zero >= 3, dp_zero3, o.where(zero >= 1, dp_dist, dp_plain))
    breakdown["data_parallel_comm"] = o.where(dp > 1, dp_sharded, 0.0)
    opt_params = o.where(zero >= 1, stage_params / dp, stage_params)
    # Adam and the gradient-norm pass over the locally optimised parameters, and zeroing the
    # local gradient buffer for the next step's accumulation (§6.3; ZeRO-3/FSDP frees it).
    zeroing = o.where(zero >= 3, 0.0, grad_bytes * stage_params)
    opt_bytes = (_ADAM_BYTES + _GRAD_NORM_BYTES) * opt_params + zeroing
    breakdown["optimizer"] = o.mem(opt_bytes, _ADAM_FLOPS * opt_params, 6.0)
    breakdown["embedding_sync"] = o.where(
        pp > 1, o.coll("all_reduce", emb_params / tp * grad_bytes, 2.0, st_pp), 0.0
    )
    step = sum(breakdown.values())

    # ------------------------------------------------------------------ memory (§2)
    # bytes per parameter (§2.1): bf16 weights + fp32 main grads + Adam 12 B (Megatron, 18);
    # ZeRO-1 / distributed optimizer 6 + 12/D, ZeRO-2 2 + 16/D, ZeRO-3 / FSDP 16/D.
    sharded = o.where(zero == 2, 2 + 16.0 / dp, o.where(zero == 1, 6 + 12.0 / dp, 18.0))
    states = o.where(zero >= 3, 16.0 / dp, sharded)
    model_states = stage_params * states
    layer_act = _activation_bytes(x, o)
    # 1F1B: stage 0 holds p micro-batches of L/p layers = L layers; interleaved adds
    # (p − 1)/(p·v) (§2.3); fewer micro-batches than stages scale it by m/p.
    interleave = o.where(v > 1, 1 + (pp - 1) / (pp * v), 1.0)
    in_flight = o.minimum(m, pp) / pp * interleave
    act = L * in_flight * layer_act
    # full recompute re-materialises one layer's activations at a time in backward
    act = act + o.where(rc == 2, _activation_bytes(x, o, recompute=0.0 * rc), 0.0)
    logits_mem = o.where(pp == 1, 2 * logits * 4, 0.0)
    memory = model_states + _ACTIVATION_OVERHEAD * act + logits_mem
    last_memory = stage_params * states + _ACTIVATION_OVERHEAD * (
        layers_stage * o.minimum(m, 1) * layer_act) + 2 * logits * 4  # fmt: skip
    memory = o.where(pp > 1, o.maximum(memory, last_memory), memory)

    return {
        "step_time_s": step,
        "breakdown_s": breakdown,
        "memory_per_device_B": memory,
        "model_flops_per_step": _model_flops(x, o),
        "tokens_per_step": x["global_batch_size"] * s,
        "samples_per_step": x["global_batch_size"],
        "num_micro_batches": m,
    }
