"""The pipeline: stages of layers plus the embedding (first) and LM head and loss (last),
point-to-point sends between stages, and the 1F1B / interleaved 1F1B bubble.

Formulas: ``docs/model.md`` §C4 (step composition), §C3.1 (the boundary exchange), §C6.3
(memory-bound kernels).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from deepflow.oracle.workloads.transformer.layer import LayerTimes, TensorComm
from deepflow.oracle.workloads.transformer.shapes import Inputs

__all__ = ["pipeline_breakdown"]

#: Unfused softmax cross-entropy, fp32 bytes per logit (Megatron-LM
#: tensor_parallel/cross_entropy.py): forward writes the fp32 copy (4), max (read 4),
#: subtract (8), exp (8), sum (4), divide (8); backward scales the saved softmax (8) and
#: reads it for the cast back to 16 bits (4). The 16-bit logits read/written add p each.
_CE_FWD_BYTES_FP32 = 36.0
_CE_BWD_BYTES_FP32 = 12.0


def _ends(i: Inputs, o: Any, tp: TensorComm) -> tuple[dict[str, Any], dict[str, Any]]:
    """What the first stage (embedding) and the last (LM head, loss) add, per micro-batch."""
    T, T_e, h, p = i.T, i.T_e, i.h, i.p
    # vocab-parallel embedding: gather + all-reduce (reduce-scatter with SP) over TP (§C3.1)
    emb_f = o.mem(2 * T_e * h * p) + o.where(i.sp, tp.reduce_scatter, tp.all_reduce)
    emb_b = o.mem(2 * T_e * h * p)
    # the output layer is no FP8 module (Megatron's ColumnParallelLinear): 16-bit rate (§C6.4)
    head_f, head_dg, head_wg = (i.slow16 * t for t in o.gemm3(T, i.vocab / i.tp, h, 1.0))
    logits = i.logits
    # final norm, then the unfused vocab-parallel softmax cross-entropy over fp32 logits
    # (Megatron-LM tensor_parallel/cross_entropy.py; PyTorch's under autocast moves as much):
    # forward cast to fp32, max, subtract, exp, sum, divide; backward scale, cast back.
    ce_f = o.mem(_CE_FWD_BYTES_FP32 * logits + (logits + 2 * T_e * h) * p, 5 * logits, 7.0)
    ce_b = o.mem(_CE_BWD_BYTES_FP32 * logits + logits * p, 2 * logits, 2.0)
    first = {"elementwise": emb_f + emb_b}
    last = {"gemm": head_f + head_dg + head_wg, "elementwise": ce_f + ce_b}
    return first, last


def _p2p(i: Inputs, o: Any, tp: TensorComm, layer: LayerTimes) -> Any:
    """Exposed seconds of a stage's boundary sends per micro-batch (forward and backward, v
    chunks).

    Megatron's scatter/gather optimisation (default since Narayanan et al. 2021 §4.1): each of
    the t ranks sends 1/t of the boundary activation; the receiving node all-gathers it over
    its scale-up links (§C3.1). With SP the activation is already split. With
    ``overlap_p2p_comm`` (Megatron-Core's interleaved schedule, ``--overlap-p2p-communication``)
    each chunk's sends run under the next chunk's compute: only what exceeds it stays exposed.
    """
    p2p_msg = i.T * i.h * i.p / i.tp
    regather = o.where(i.sp, 0.0, tp.all_gather)
    send = o.coll("send_recv", p2p_msg, 2.0, i.st_pp, i.axes)
    exposed = 2 * i.v * (send + regather)
    chunk = i.layers_stage / i.v * (layer.fwd + layer.bwd)  # one chunk, forward and backward
    hidden = o.maximum(2 * (send + regather) - chunk, 0.0) * i.v
    overlap = (i.x["overlap_p2p_comm"] > 0) & (i.v > 1)
    return o.where(i.pp > 1, o.where(overlap, hidden, exposed), 0.0)


def pipeline_breakdown(i: Inputs, o: Any, layer: LayerTimes, tp: TensorComm) -> dict[str, Any]:
    """The pipelined part of a step, seconds: m micro-batches through the slowest stage, per
    breakdown part, plus ``pipeline_bubble`` = (p − 1)/v × the mean stage (§C4)."""
    first_extra, last_extra = _ends(i, o, tp)
    p2p = _p2p(i, o, tp, layer)
    pp = i.pp

    per_layer = {k: i.layers_stage * val for k, val in layer.parts.items()}
    # the end stages hold one layer fewer where the embedding and the output layer take a
    # layer's slot each (``pipeline_balance: ends_as_layers``; docs/model.md §C4)
    end_layers = {k: i.layers_ends * val for k, val in layer.parts.items()}

    def stage(extra: Mapping[str, Any], layers: Mapping[str, Any]) -> dict[str, Any]:
        parts = dict(layers)
        for k, val in extra.items():
            parts[k] = parts[k] + val
        parts["pipeline_p2p"] = p2p
        return parts

    first, last = stage(first_extra, end_layers), stage(last_extra, end_layers)
    single = stage(
        {
            "elementwise": first_extra["elementwise"] + last_extra["elementwise"],
            "gemm": last_extra["gemm"],
        },
        per_layer,
    )
    middle = stage({}, per_layer)
    t_first, t_last = sum(first.values()), sum(last.values())
    t_single, t_mid = sum(single.values()), sum(middle.values())
    one_stage = pp == 1
    which = o.where(
        one_stage,
        0,
        o.where(t_first >= o.maximum(t_last, t_mid), 1, o.where(t_last >= t_mid, 2, 3)),
    )
    t_mean = o.where(one_stage, t_single, (t_first + t_last + o.maximum(pp - 2, 0) * t_mid) / pp)
    slowest = o.choose_parts(which, (single, first, last, middle))
    breakdown = {key: i.m * part for key, part in slowest.items()}
    breakdown["pipeline_bubble"] = (pp - 1) / i.v * t_mean  # 1F1B / interleaved 1F1B (§C4)
    return breakdown
