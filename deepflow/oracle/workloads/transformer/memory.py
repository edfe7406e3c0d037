"""Memory per device: model states (weights, gradients, optimizer) of a pipeline stage and
the activations it keeps in flight, as Megatron-LM and ZeRO/FSDP hold them.

Formulas: ``docs/model.md`` §C2 (§C2.1 model states, §C2.2 activations per layer, §C2.3
micro-batches in flight, §C2.4 logits, §C2.5 transients).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

import numpy as np
from numpy.typing import NDArray

from deepflow.oracle.workloads.transformer.columns import FULL_RECOMPUTE, SELECTIVE_RECOMPUTE
from deepflow.oracle.workloads.transformer.data_parallel import StageParams
from deepflow.oracle.workloads.transformer.ops import ArrayOps
from deepflow.oracle.workloads.transformer.shapes import Inputs

__all__ = ["Memory", "activation_bytes_per_layer", "memory"]

F = NDArray[np.float64]

#: Megatron's estimator adds 5 % to activations for temporaries (§C2.5).
_ACTIVATION_OVERHEAD = 1.05


def activation_bytes_per_layer(x: Mapping[str, Any]) -> F:
    """Activation bytes one layer keeps for backward, per micro-batch (16-bit, 1-byte masks).

    Korthikanti et al. 2022 §4 (docs/model.md §C2.2): s·b·h·(34 + 5·a·s/h) without
    parallelism; with tensor parallelism t the 24 + 5·a·s/h part is split and 10 is not; with
    sequence parallelism everything is split; selective recompute drops the 5·a·s/h score
    terms; full recompute keeps only the layer input 2·s·b·h (÷t with SP). Adjusted (§C2.2):
    GQA shrinks K and V by g = kv/a; SwiGLU's MLP keeps 6F/h instead of 4F/h; no dropout drops
    the masks and the dropout outputs; fused (flash) attention keeps only fp32 log-sum-exp
    (4·a·s·b) instead of the s² terms; context parallelism shortens s to s/c.
    """
    arrays = {k: np.asarray(v, dtype=float) for k, v in x.items()}
    return np.asarray(_activation_bytes(arrays, ArrayOps), dtype=float)


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
    scores = o.where((rc == SELECTIVE_RECOMPUTE) & o.not_(flash), 0.0, scores)
    kept = sbh * per_sbh + scores
    full = 2 * sbh / o.where(sp, tp, 1.0)
    return o.where(rc == FULL_RECOMPUTE, full, kept)


class Memory(NamedTuple):
    """Bytes per device: the first stage's parts and the peak over first and last stage."""

    model_states: Any  #: weights, gradients and optimizer states of a stage (§C2.1)
    activations: Any  #: activations in flight on the first stage, with the 5 % overhead
    logits: Any  #: fp32 logits and their gradient (one-stage pipelines: on the first stage)
    last_stage: Any  #: the last stage's total (pipelines: its logits, one micro-batch)
    total: Any  #: the peak over the stages: what must fit the device


def memory(i: Inputs, o: Any, params: StageParams) -> Memory:
    """Peak memory of a device.

    Bytes per parameter (§C2.1): bf16 weights + fp32 main grads + Adam 12 B (Megatron, 18);
    ZeRO-1 / distributed optimizer 6 + 12/D, ZeRO-2 2 + 16/D, ZeRO-3 / FSDP 16/D. Activations:
    1F1B holds on stage 0 p micro-batches of L/p layers = L layers; interleaving adds
    (p − 1)/(p·v) (§C2.3); fewer micro-batches than stages scale it by m/p; full recompute
    re-materialises one layer's activations at a time in backward.
    """
    dp, pp, rc, zero, m = i.dp, i.pp, i.rc, i.zero, i.m
    sharded = o.where(zero == 2, 2 + 16.0 / dp, o.where(zero == 1, 6 + 12.0 / dp, 18.0))
    states = o.where(zero >= 3, 16.0 / dp, sharded)
    model_states = params.stage * states
    layer_act = _activation_bytes(i.x, o)
    interleave = o.where(i.v > 1, 1 + (pp - 1) / (pp * i.v), 1.0)
    in_flight = o.minimum(m, pp) / pp * interleave
    act = i.L * in_flight * layer_act
    full = rc == FULL_RECOMPUTE
    if o.any(full):  # one layer re-materialised at a time in backward
        act = act + o.where(full, _activation_bytes(i.x, o, recompute=0.0 * rc), 0.0)
    logits_mem = o.where(pp == 1, 2 * i.logits * 4, 0.0)
    activations = _ACTIVATION_OVERHEAD * act
    first = model_states + activations + logits_mem
    last = (
        model_states
        + _ACTIVATION_OVERHEAD * (i.layers_stage * o.minimum(m, 1) * layer_act)
        + 2 * i.logits * 4
    )
    total = o.where(pp > 1, o.maximum(first, last), first)
    return Memory(
        model_states=model_states,
        activations=activations,
        logits=logits_mem,
        last_stage=last,
        total=total,
    )
