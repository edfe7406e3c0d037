"""The DeepFlow paper's LSTM language model (docs/model.md §B4.7–4.8), bugs fixed.

One training step of an L-layer LSTM LM over S timesteps with data parallelism (dp), kernel
parallelism (tensor_parallel = kp1·kp2, RC or CR) and layer pipelining (pipeline_parallel).

Per timestep and layer (b = global batch / dp, D = hidden, G = gates, V = vocabulary):

* cell: GEMM(b, G·D, 2D) on [x_t, h_{t−1}] plus the fused gate pointwise kernel;
* softmax: GEMM(b, V, D) plus the fused softmax/cross-entropy kernel;
* embedding: a gather of b rows of D.

What differs from the original (docs/model.md §B8):

* memory-bound work (pointwise, embedding, weight update) streams from HBM, not the register
  file (§B8); pointwise bytes are counted from the tensors a fused LSTM cell reads and writes
  (gates 4D and c_{t−1} in; c_t, h_t and the activated gates kept for backward out:
  11·b·D elements), not the hard-coded 13·b·G·D (§B8);
* kernel-parallel backward communication follows the data (:func:`dist_gemm`); weight-gradient
  partial sums are reduced once per step, not per timestep;
* layer pipelining works for every pipeline_parallel ≥ 2 (HEAD crashes at 2, §B4.8): stages are
  [embedding | hidden layers | softmax] for ≥ 3 stages (as the original) and
  [embedding + hidden | softmax] for 2; the timesteps flow through the stages as a wavefront,
  (S + stages − 1) × the slowest stage;
* gradient all-reduces start as soon as a block's last backward timestep is done and overlap
  the rest of the backward pass (the original's DAG does the same with a FIFO scheduler);
  only what sticks out is exposed;
* the weight update (plain SGD with gradient clipping, as the original) and memory capacity
  are modelled: weights, gradients and the activations kept for backpropagation through time.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from deepflow.oracle.hardware import DeviceCaps
from deepflow.oracle.kernels import memory_op_time_s
from deepflow.oracle.network import NetworkModel
from deepflow.oracle.parallelism import (
    DistGemm,
    KernelMapping,
    collective_s,
    dist_gemm,
    group_layout,
)

__all__ = ["lstm_stages", "lstm_step"]

F = NDArray[np.float64]
I64 = NDArray[np.int64]

#: Bytes per parameter for SGD with gradient clipping: read w and g, write w, read g for the
#: norm (docs/model.md §B4.7 applyGrad: roofline(3ac, 4pac) + clip roofline(4ac, 3pac)).
_SGD_ELEMENT_PASSES = 4.0
#: Pointwise elements per (b, D) of a fused LSTM cell, forward (see module docstring);
#: backward reads and writes about twice as much.
_CELL_FWD_ELEMENTS = 11.0
_CELL_FLOPS = 20.0  # 3 sigmoids + 2 tanh (~4 FLOPs each) + 5 multiply/adds per unit (est.)
#: The model's input columns (LstmSpec fields) besides the batch and the mapping.
SHAPE_COLUMNS = ("num_layers", "hidden_size", "vocab_size", "seq_length", "projection_size",
                 "num_gates")  # fmt: skip


@dataclass(frozen=True)
class _Block:
    """One kind of pipeline unit (embedding, an LSTM layer, the softmax) per timestep, for n
    cases (arrays of n)."""

    fwd_s: F
    fwd_comm_s: F
    bwd_s: F
    bwd_comm_s: F
    params_local: F
    reduce_s: F  #: its gradient reductions (data parallel, RC weight-gradient partial sums)


def lstm_stages(num_layers: int, pipeline_parallel: int) -> list[list[str]]:
    """Block names per pipeline stage: [embedding | hidden layers … | softmax]."""
    hidden = [f"layer{i}" for i in range(num_layers)]
    if pipeline_parallel == 1:
        return [["embedding", *hidden, "softmax"]]
    if pipeline_parallel == 2:
        return [["embedding", *hidden], ["softmax"]]
    per = -(-num_layers // (pipeline_parallel - 2))
    middle = [hidden[i : i + per] for i in range(0, num_layers, per)]
    middle += [[] for _ in range(pipeline_parallel - 2 - len(middle))]
    return [["embedding"], *middle, ["softmax"]]


#: The block kinds in a stage's forward order.
_FORWARD = ("embedding", "layer", "softmax")


@dataclass(frozen=True)
class _Stages:
    """:func:`lstm_stages` of n cases on a (cases, stages) grid: how many blocks of each kind
    (:data:`_FORWARD`) each stage holds, in that order; ``valid`` marks a case's stages
    (s < pipeline_parallel)."""

    valid: NDArray[np.bool_]
    counts: dict[str, I64]

    def blocks(self, order: tuple[str, ...] = _FORWARD) -> Iterator[tuple[str, NDArray[np.bool_]]]:
        """Each block of the stages in ``order``: its kind and where a stage holds it."""
        for name in order:
            count = self.counts[name]
            for j in range(int(count.max(initial=0))):
                yield name, j < count


def _stage_grid(num_layers: I64, pipeline_parallel: I64) -> _Stages:
    """The stages of n cases (:func:`lstm_stages`, tested equal)."""
    pp = pipeline_parallel[:, None]
    layers_total = num_layers[:, None]
    s = np.arange(int(pipeline_parallel.max(initial=1)))[None, :]
    per = -(-layers_total // np.maximum(pp - 2, 1))  # layers per middle stage (pp >= 3)
    middle = np.clip(layers_total - per * (s - 1), 0, per) * ((s >= 1) & (s <= pp - 2))
    layers = np.where(pp <= 2, np.where(s == 0, layers_total, 0), middle)
    first = np.broadcast_to(s == 0, layers.shape)
    counts = {"embedding": first, "layer": layers, "softmax": s == pp - 1}
    return _Stages(valid=s < pp, counts={k: v.astype(np.int64) for k, v in counts.items()})


def _block_from_gemm(d: DistGemm, fwd_extra: F, bwd_extra: F, reduce_s: F) -> _Block:
    return _Block(d.forward_s + fwd_extra, d.forward_comm_s, d.backward_s + bwd_extra,
                  d.backward_comm_s, d.weight_elements_local, reduce_s)  # fmt: skip


def _reduce_s(net: NetworkModel, mapping: KernelMapping, params_local: F, wgrad_B: F,
              wgrad_group: tuple[I64, I64], p: Any) -> F:  # fmt: skip
    """A block's gradient reductions: the data-parallel all-reduce of its local parameters,
    then the RC weight-gradient partial sums over the M split."""
    dp = mapping.data_parallel
    layout = group_layout(mapping)
    size, stride = layout.data
    data_s = collective_s("all_reduce", params_local * p, size, net=net, stride=stride,
                          axes=layout.axes)  # fmt: skip
    reduce_s = np.where(dp > 1, data_s, 0.0)
    wgrad_s = collective_s("all_reduce", wgrad_B, wgrad_group[0], net=net,
                           stride=wgrad_group[1], axes=layout.axes)  # fmt: skip
    return np.where(wgrad_B > 0, reduce_s + wgrad_s, reduce_s)


def _blocks(caps: DeviceCaps, net: NetworkModel, shape: Mapping[str, I64],
            mapping: KernelMapping, b: I64) -> dict[str, _Block]:  # fmt: skip
    p = caps.bytes_per_element
    tp = mapping.tensor_parallel
    d_h, gates, vocab = shape["hidden_size"], shape["num_gates"], shape["vocab_size"]
    out_dim = np.where(shape["projection_size"] > 0, shape["projection_size"], d_h)
    cell = dist_gemm(caps, net, b, 2 * d_h, gates * d_h, mapping)
    units = b * d_h / tp
    cell_fwd_pw = memory_op_time_s(caps, _CELL_FWD_ELEMENTS * units * p, _CELL_FLOPS * units)
    cell_bwd_pw = memory_op_time_s(caps, 2 * _CELL_FWD_ELEMENTS * units * p,
                                   2 * _CELL_FLOPS * units)  # fmt: skip
    groups = (cell.wgrad_reduce_size, cell.wgrad_reduce_stride)
    layer = _block_from_gemm(cell, cell_fwd_pw, cell_bwd_pw, _reduce_s(
        net, mapping, cell.weight_elements_local, cell.wgrad_reduce_B, groups, p))  # fmt: skip
    soft = dist_gemm(caps, net, b, out_dim, vocab, mapping)
    logits = b * vocab / tp
    # fused softmax + cross-entropy: read logits twice (max/sum, normalise), write probabilities;
    # backward reads probabilities and writes dlogits (Calculon-style explicit bytes, §C6.3).
    soft_fwd_pw = memory_op_time_s(caps, 3 * logits * p, 5 * logits)
    soft_bwd_pw = memory_op_time_s(caps, 2 * logits * p, 2 * logits)
    groups = (soft.wgrad_reduce_size, soft.wgrad_reduce_stride)
    softmax = _block_from_gemm(soft, soft_fwd_pw, soft_bwd_pw, _reduce_s(
        net, mapping, soft.weight_elements_local, soft.wgrad_reduce_B, groups, p))  # fmt: skip
    # embedding gather/scatter-add of b rows of D, at HBM bandwidth (HEAD: register file).
    emb_s = memory_op_time_s(caps, 2 * b * d_h * p)
    emb_params = (vocab * d_h).astype(float)
    zero = np.zeros_like(emb_params)
    ones = np.ones_like(b)
    embedding = _Block(emb_s, zero, emb_s, zero, emb_params,
                       _reduce_s(net, mapping, emb_params, zero, (ones, ones), p))  # fmt: skip
    return {"embedding": embedding, "layer": layer, "softmax": softmax}


def _stage_sums(stages: _Stages, blocks: dict[str, _Block], field: str) -> F:
    """Per (case, stage): the sum of a block field over the stage's blocks, added in the
    stage's order, as the scalar model adds them."""
    total = np.zeros(stages.valid.shape)
    for name, here in stages.blocks():
        total = np.where(here, total + getattr(blocks[name], field)[:, None], total)
    return total


def lstm_step(caps: DeviceCaps, net: NetworkModel, x: Mapping[str, F]) -> dict[str, Any]:
    """Step time with a breakdown that sums to it, model FLOPs and memory per device, of n
    cases.

    Args:
        caps: the device (fields scalars or arrays of n).
        net: the network (link bandwidths scalars or arrays of n).
        x: arrays of n: the model's :data:`SHAPE_COLUMNS`, ``global_batch_size`` and the kind's
            mapping columns (:class:`~deepflow.oracle.parallelism.KernelMapping`).
    """
    mapping = KernelMapping.from_columns(x)
    cases = mapping.rc.shape
    shape = {c: np.broadcast_to(np.asarray(x[c], dtype=float), cases).astype(np.int64)
             for c in (*SHAPE_COLUMNS, "global_batch_size")}  # fmt: skip
    p = caps.bytes_per_element
    dp, pp, tp = mapping.data_parallel, mapping.pipeline_parallel, mapping.tensor_parallel
    batch = shape["global_batch_size"]
    b = -(-batch // dp)
    steps = shape["seq_length"]
    blocks = _blocks(caps, net, shape, mapping, b)
    stages = _stage_grid(shape["num_layers"], pp)
    layout = group_layout(mapping)
    # activations (b × D / kp per timestep) sent to the next stage: a pair of ranks
    pairs = np.where(pp > 1, 2, 1)
    send = collective_s("send_recv", b * shape["hidden_size"] * p / tp, pairs, net=net,
                        stride=layout.pipeline[1], axes=layout.axes)  # fmt: skip
    transfer = np.where(pp > 1, send, 0.0)[:, None]

    breakdown: dict[str, F] = {}
    phase_end: dict[str, F] = {}
    stage_total: dict[str, F] = {}
    for phase, label in (("fwd", "forward"), ("bwd", "backward")):
        compute = _stage_sums(stages, blocks, f"{phase}_s")
        comm = _stage_sums(stages, blocks, f"{phase}_comm_s") + transfer
        total = compute + comm
        # the first slowest stage (as max over the stages in order)
        slowest = np.argmax(np.where(stages.valid, total, -np.inf), axis=1)[:, None]
        compute_s = np.take_along_axis(compute, slowest, axis=1)[:, 0]
        comm_s = np.take_along_axis(comm, slowest, axis=1)[:, 0]
        breakdown[f"{label}_compute"] = steps * compute_s
        breakdown[f"{label}_communication"] = steps * comm_s
        breakdown[f"{label}_pipeline_bubble"] = (pp - 1) * (compute_s + comm_s)
        phase_end[phase] = (steps + pp - 1) * (compute_s + comm_s)
        stage_total[phase] = total

    exposed, update_s = _gradient_sync(caps, stages, blocks, stage_total["bwd"], phase_end["bwd"],
                                       p)  # fmt: skip
    breakdown["gradient_sync_exposed"] = np.maximum(exposed, 0.0)
    breakdown["weight_update"] = update_s
    step = phase_end["fwd"] + phase_end["bwd"] + breakdown["gradient_sync_exposed"] + update_s

    fwd_flops = _forward_flops(shape, batch)
    memory = _memory(shape, tp, stages, blocks, b, p)
    return {
        "step_time_s": step,
        "breakdown_s": breakdown,
        "model_flops_per_step": 3.0 * fwd_flops,
        "memory_per_device_B": memory,
        "tokens_per_step": (batch * steps).astype(float),
        "samples_per_step": batch.astype(float),
    }


def _gradient_sync(caps: DeviceCaps, stages: _Stages, blocks: dict[str, _Block], bwd_stage: F,
                   bwd_end: F, p: Any) -> tuple[F, F]:  # fmt: skip
    """Exposed gradient reduction and the weight update, seconds (arrays of n).

    Gradient reduction is overlapped with the rest of backward. A block's weight gradient is
    complete after its timestep-0 backward. In the reversed wavefront the softmax stage
    finishes first and the embedding stage (stage 0) last: stage k finishes k slowest-stage
    times before the end of the backward pass.
    """
    valid = stages.valid
    slowest_bwd = np.max(np.where(valid, bwd_stage, -np.inf), axis=1)[:, None]
    k = np.arange(valid.shape[1])[None, :]
    finish = bwd_end[:, None] - k * slowest_bwd  # stage k's last backward timestep ends
    clock = finish - bwd_stage  # the stage's final timestep starts here
    net_free = np.zeros(valid.shape)
    params = np.zeros(valid.shape)
    for name, here in stages.blocks(_FORWARD[::-1]):  # backward: softmax side first
        blk = blocks[name]
        clock = np.where(here, clock + (blk.bwd_s + blk.bwd_comm_s)[:, None], clock)
        params = np.where(here, params + blk.params_local[:, None], params)
        net_free = np.where(here, np.maximum(net_free, clock) + blk.reduce_s[:, None], net_free)
    # some reduction is still running after the stage's backward
    late = valid & (net_free > clock)
    exposed = np.max(np.where(late, net_free - bwd_end[:, None], 0.0), axis=1, initial=0.0)
    update = memory_op_time_s(_per_stage(caps), _SGD_ELEMENT_PASSES * params * p, 5 * params,
                              launches=2)  # fmt: skip
    update_s = np.max(np.where(valid, update, 0.0), axis=1, initial=0.0)
    return exposed, update_s


def _per_stage(caps: DeviceCaps) -> dict[str, Any]:
    """The device fields of :func:`memory_op_time_s`, arrays of n as (n, 1) columns that
    broadcast over the stages."""
    names = ("l2_capacity_B", "l2_bandwidth_Bps", "hbm_bandwidth_Bps", "hbm_efficiency",
             "hbm_latency_s", "vector_flops", "kernel_launch_s")  # fmt: skip
    out = {}
    for name in names:
        v = np.asarray(getattr(caps, name), dtype=float)
        out[name] = v[:, None] if v.ndim == 1 else v
    return out


def _forward_flops(shape: Mapping[str, I64], batch: I64) -> F:
    """Model FLOPs of the forward pass (whole system, no recompute): per timestep the cell
    2·b·2D·GD per layer and the softmax 2·b·D·V; backward is twice the forward. Counted in
    Python integers (exact), then rounded once."""
    ints = {k: v.astype(object) for k, v in shape.items()}
    d_h = ints["hidden_size"]
    out_dim = np.where(shape["projection_size"] > 0, ints["projection_size"], d_h)
    flops = (
        ints["seq_length"]
        * batch.astype(object)
        * (
            ints["num_layers"] * 2 * 2 * d_h * ints["num_gates"] * d_h
            + 2 * out_dim * ints["vocab_size"]
        )
    )
    return np.asarray(flops, dtype=float)


def _memory(shape: Mapping[str, I64], tp: I64, stages: _Stages, blocks: dict[str, _Block],
            b: I64, p: Any) -> F:  # fmt: skip
    """Memory per device: local weights and gradients of the largest stage, plus activations
    kept for backpropagation through time (gates, c, h per layer-timestep; probabilities for
    the softmax; embeddings)."""
    params = _stage_sums(stages, blocks, "params_local")
    col = {k: v[:, None] for k, v in shape.items()}
    count = stages.counts
    per_unit = (count["layer"] * (col["num_gates"] + 2) * col["hidden_size"]
                + count["softmax"] * col["vocab_size"]
                + count["embedding"] * col["hidden_size"] * tp[:, None])  # fmt: skip
    acts = (col["seq_length"] * b[:, None]) / tp[:, None] * per_unit
    memory = (2 * params + acts) * p
    return np.max(np.where(stages.valid, memory, 0.0), axis=1, initial=0.0)
