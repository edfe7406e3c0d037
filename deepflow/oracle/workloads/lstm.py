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

from dataclasses import dataclass
from typing import Any

import numpy as np

from deepflow.config.specs import LstmSpec, MappingSpec
from deepflow.oracle.hardware import DeviceCaps
from deepflow.oracle.kernels import memory_op_time_s
from deepflow.oracle.network import NetworkModel, collective_time_s
from deepflow.oracle.parallelism import DistGemm, dist_gemm, group_layout

__all__ = ["lstm_stages", "lstm_step"]

#: Bytes per parameter for SGD with gradient clipping: read w and g, write w, read g for the
#: norm (docs/model.md §B4.7 applyGrad: roofline(3ac, 4pac) + clip roofline(4ac, 3pac)).
_SGD_ELEMENT_PASSES = 4.0
#: Pointwise elements per (b, D) of a fused LSTM cell, forward (see module docstring);
#: backward reads and writes about twice as much.
_CELL_FWD_ELEMENTS = 11.0
_CELL_FLOPS = 20.0  # 3 sigmoids + 2 tanh (~4 FLOPs each) + 5 multiply/adds per unit (est.)


@dataclass(frozen=True)
class _Block:
    """One pipeline unit (embedding, one LSTM layer, or the softmax) per timestep."""

    name: str
    fwd_s: float
    fwd_comm_s: float
    bwd_s: float
    bwd_comm_s: float
    params_local: float
    wgrad_reduce_B: float
    wgrad_reduce_group: tuple[int, int]


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


def _block_from_gemm(name: str, d: DistGemm, fwd_extra: float, bwd_extra: float) -> _Block:
    return _Block(
        name,
        float(np.max(d.forward_s)) + fwd_extra,
        float(np.max(d.forward_comm_s)),
        float(np.max(d.backward_s)) + bwd_extra,
        float(np.max(d.backward_comm_s)),
        d.weight_elements_local,
        d.wgrad_reduce_B,
        d.wgrad_reduce_group,
    )


def _blocks(
    caps: DeviceCaps, net: NetworkModel, model: LstmSpec, mapping: MappingSpec, b: int
) -> dict[str, _Block]:
    p = caps.bytes_per_element
    tp = mapping.tensor_parallel
    d_h, gates, vocab = model.hidden_size, model.num_gates, model.vocab_size
    out_dim = model.projection_size or d_h
    cell = dist_gemm(caps, net, b, 2 * d_h, gates * d_h, mapping)
    units = b * d_h / tp
    cell_fwd_pw = float(memory_op_time_s(caps, _CELL_FWD_ELEMENTS * units * p, _CELL_FLOPS * units))
    cell_bwd_pw = float(
        memory_op_time_s(caps, 2 * _CELL_FWD_ELEMENTS * units * p, 2 * _CELL_FLOPS * units)
    )
    blocks = {
        f"layer{i}": _block_from_gemm(f"layer{i}", cell, cell_fwd_pw, cell_bwd_pw)
        for i in range(model.num_layers)
    }
    soft = dist_gemm(caps, net, b, out_dim, vocab, mapping)
    logits = b * vocab / tp
    # fused softmax + cross-entropy: read logits twice (max/sum, normalise), write probabilities;
    # backward reads probabilities and writes dlogits (Calculon-style explicit bytes, §C6.3).
    soft_fwd_pw = float(memory_op_time_s(caps, 3 * logits * p, 5 * logits))
    soft_bwd_pw = float(memory_op_time_s(caps, 2 * logits * p, 2 * logits))
    blocks["softmax"] = _block_from_gemm("softmax", soft, soft_fwd_pw, soft_bwd_pw)
    # embedding gather/scatter-add of b rows of D, at HBM bandwidth (HEAD: register file).
    emb_s = float(memory_op_time_s(caps, 2 * b * d_h * p))
    blocks["embedding"] = _Block(
        "embedding", emb_s, 0.0, emb_s, 0.0, float(vocab * d_h), 0.0, (1, 1)
    )
    return blocks


def lstm_step(
    caps: DeviceCaps,
    net: NetworkModel,
    model: LstmSpec,
    mapping: MappingSpec,
    global_batch_size: int,
) -> dict[str, Any]:
    """Step time with a breakdown that sums to it, model FLOPs and memory per device."""
    p = caps.bytes_per_element
    dp, pp = mapping.data_parallel, mapping.pipeline_parallel
    b = -(-global_batch_size // dp)
    steps = model.seq_length
    blocks = _blocks(caps, net, model, mapping, b)
    stages = lstm_stages(model.num_layers, pp)
    layout = group_layout(mapping)
    transfer = (
        float(
            collective_time_s(
                "send_recv",
                b * model.hidden_size * p / mapping.tensor_parallel,
                2,
                net=net,
                stride=layout.pipeline[1],
            )
        )
        if pp > 1
        else 0.0
    )

    def stage_time(names: list[str], phase: str) -> tuple[float, float]:
        compute = sum(getattr(blocks[n], f"{phase}_s") for n in names)
        comm = sum(getattr(blocks[n], f"{phase}_comm_s") for n in names)
        return compute, comm + (transfer if pp > 1 else 0.0)

    breakdown: dict[str, float] = {}
    phase_end: dict[str, float] = {}
    for phase in ("fwd", "bwd"):
        per_stage = [stage_time(s, phase) for s in stages]
        slowest = max(range(len(stages)), key=lambda i: sum(per_stage[i]))
        compute, comm = per_stage[slowest]
        label = "forward" if phase == "fwd" else "backward"
        breakdown[f"{label}_compute"] = steps * compute
        breakdown[f"{label}_communication"] = steps * comm
        breakdown[f"{label}_pipeline_bubble"] = (len(stages) - 1) * (compute + comm)
        phase_end[phase] = (steps + len(stages) - 1) * (compute + comm)

    exposed, update_s = _gradient_sync(
        caps,
        net,
        mapping,
        blocks,
        stages,
        [sum(stage_time(s, "bwd")) for s in stages],
        phase_end["bwd"],
    )
    breakdown["gradient_sync_exposed"] = max(exposed, 0.0)
    breakdown["weight_update"] = update_s
    step = phase_end["fwd"] + phase_end["bwd"] + breakdown["gradient_sync_exposed"] + update_s

    fwd_flops = _forward_flops(model, global_batch_size)
    memory = _memory(model, mapping, blocks, stages, b, p)
    return {
        "step_time_s": step,
        "breakdown_s": breakdown,
        "model_flops_per_step": 3.0 * fwd_flops,
        "memory_per_device_B": memory,
        "tokens_per_step": float(global_batch_size * steps),
        "samples_per_step": float(global_batch_size),
    }


def _gradient_sync(
    caps: DeviceCaps,
    net: NetworkModel,
    mapping: MappingSpec,
    blocks: dict[str, _Block],
    stages: list[list[str]],
    bwd_stage: list[float],
    bwd_end: float,
) -> tuple[float, float]:
    """Exposed gradient reduction and the weight update, seconds.

    Gradient reduction is overlapped with the rest of backward. A block's weight gradient is
    complete after its timestep-0 backward. In the reversed wavefront the softmax stage
    finishes first and the embedding stage (stage 0) last: stage k finishes k slowest-stage
    times before the end of the backward pass.
    """
    p = caps.bytes_per_element
    dp = mapping.data_parallel
    layout = group_layout(mapping)
    slowest_bwd = max(bwd_stage)
    exposed = 0.0
    update_s = 0.0
    for k, names in enumerate(stages):
        finish = bwd_end - k * slowest_bwd  # stage k's last backward timestep ends
        net_free = 0.0
        clock = finish - bwd_stage[k]  # the stage's final timestep starts here
        params = 0.0
        for name in reversed(names):  # backward order inside a stage: softmax side first
            blk = blocks[name]
            clock += blk.bwd_s + blk.bwd_comm_s
            params += blk.params_local
            reduce_s = 0.0
            if dp > 1:
                reduce_s += float(
                    collective_time_s(
                        "all_reduce", blk.params_local * p, dp, net=net, stride=layout.data[1]
                    )
                )
            if blk.wgrad_reduce_B > 0:
                size, stride = blk.wgrad_reduce_group
                reduce_s += float(
                    collective_time_s(
                        "all_reduce", blk.wgrad_reduce_B, size, net=net, stride=stride
                    )
                )
            net_free = max(net_free, clock) + reduce_s
        if net_free > clock:  # some reduction is still running after the stage's backward
            exposed = max(exposed, net_free - bwd_end)
        update_s = max(
            update_s,
            float(memory_op_time_s(caps, _SGD_ELEMENT_PASSES * params * p, 5 * params, launches=2)),
        )
    return exposed, update_s


def _forward_flops(model: LstmSpec, global_batch_size: int) -> float:
    """Model FLOPs of the forward pass (whole system, no recompute): per timestep the cell
    2·b·2D·GD per layer and the softmax 2·b·D·V; backward is twice the forward."""
    d_h = model.hidden_size
    out_dim = model.projection_size or d_h
    return float(
        model.seq_length
        * global_batch_size
        * (model.num_layers * 2 * 2 * d_h * model.num_gates * d_h + 2 * out_dim * model.vocab_size)
    )


def _memory(
    model: LstmSpec,
    mapping: MappingSpec,
    blocks: dict[str, _Block],
    stages: list[list[str]],
    b: int,
    p: float,
) -> float:
    """Memory per device: local weights and gradients of the largest stage, plus activations
    kept for backpropagation through time (gates, c, h per layer-timestep; probabilities for
    the softmax; embeddings)."""
    steps, d_h, tp = model.seq_length, model.hidden_size, mapping.tensor_parallel
    memory = 0.0
    for names in stages:
        params = sum(blocks[n].params_local for n in names)
        layers = sum(n.startswith("layer") for n in names)
        acts = (
            steps
            * b
            / tp
            * (
                layers * (model.num_gates + 2) * d_h
                + ("softmax" in names) * model.vocab_size
                + ("embedding" in names) * d_h * tp
            )
        )
        memory = max(memory, (2 * params + acts) * p)
    return memory
