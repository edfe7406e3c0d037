"""Transformer (decoder-only LLM) training step: time, breakdown, memory, FLOPs. Vectorised.

Every input is an array over n cases (mappings, models or devices); one evaluation is a batch
of one. The composition is additive, as in Calculon (llm-training-model §4, §7.1):

    step = pipeline (micro-batches × slowest stage + bubble) + exposed data-parallel
           communication + optimizer step + tied-embedding sync,

with, per layer and micro-batch, GEMMs and the attention core on the matrix units
(:mod:`deepflow.oracle.kernels`), norms/activations/residuals at HBM bandwidth, and tensor-,
context- and expert-parallel collectives from :mod:`deepflow.oracle.network` on the links the
group crosses. Formulas cite llm-training-model.md (the project's sourced formula sheet).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from functools import lru_cache
from typing import Any

import numpy as np
from numpy.typing import NDArray

from deepflow.config.specs import MappingSpec, TransformerSpec
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
#: Megatron's estimator adds 5 % to activations for temporaries (§2.5).
_ACTIVATION_OVERHEAD = 1.05


def transformer_columns(model: TransformerSpec, mapping: MappingSpec,
                        global_batch_size: int) -> dict[str, F]:  # fmt: skip
    """One (model, mapping) as a batch of one, in the columns :func:`transformer_step` takes."""
    values = {
        "num_layers": model.num_layers,
        "hidden_size": model.hidden_size,
        "num_attention_heads": model.num_attention_heads,
        "num_kv_heads": model.num_kv_heads,
        "ffn_hidden_size": model.ffn_hidden_size,
        "swiglu": float(model.ffn_activation == "swiglu"),
        "seq_length": model.seq_length,
        "vocab_size": model.vocab_size,
        "num_experts": model.num_experts,
        "experts_per_token": model.experts_per_token,
        "dropout": float(model.dropout),
        "global_batch_size": global_batch_size,
        "tensor_parallel": mapping.tensor_parallel,
        "pipeline_parallel": mapping.pipeline_parallel,
        "data_parallel": mapping.data_parallel,
        "context_parallel": mapping.context_parallel,
        "expert_parallel": mapping.expert_parallel,
        "micro_batch_size": mapping.micro_batch_size,
        "virtual_pipeline_stages": mapping.virtual_pipeline_stages,
        "sequence_parallel": float(mapping.sequence_parallel),
        "recompute": _RECOMPUTE[mapping.activation_recompute],
        "zero_stage": mapping.zero_stage,
        "flash_attention": float(mapping.flash_attention),
        "tp_comm_overlap": float(mapping.tp_comm_overlap),
        "overlap_grad_reduce": float(mapping.overlap_grad_reduce),
    }
    return {k: np.atleast_1d(np.asarray(v, dtype=float)) for k, v in values.items()}


def _params_per_layer(x: Mapping[str, F]) -> F:
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
    router = np.where(x["num_experts"] > 1, h * x["num_experts"], 0.0)
    return np.asarray(attn + mlp + router + 4 * h, dtype=float)


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
    x = {k: np.asarray(v, dtype=float) for k, v in x.items()}
    h, a, kv = x["hidden_size"], x["num_attention_heads"], x["num_kv_heads"]
    tp, mb = x["tensor_parallel"], x["micro_batch_size"]
    s = x["seq_length"]
    s_loc = s / x["context_parallel"]
    sp, rc = x["sequence_parallel"] > 0, x["recompute"]
    flash, dropout = x["flash_attention"] > 0, x["dropout"]
    mats = 2.0 + x["swiglu"]
    sbh = s_loc * mb * h
    g = kv / a
    # split by t: Q 2, K 2g, V 2g, projection input 2, MLP inputs 2·(mats)·F/h (GeLU 16)
    split = 2 + 4 * g + 2 + 2 * mats * x["ffn_hidden_size"] / h
    # not split without SP: 2 LayerNorm inputs 4, QKV and fc1 inputs 2 + 2, dropout masks 2
    unsplit = 4 + 2 + 2 + 2 * dropout
    per_sbh = np.where(sp, (split + unsplit) / tp, unsplit + split / tp)
    # score terms: softmax output 2, dropout mask 1 and output 2 per a·s²·b, split by t
    scores = (2 + 3 * dropout) * a * s_loc * s * mb / tp
    scores = np.where(flash, 4 * a * s_loc * mb / tp, scores)
    scores = np.where((rc == 1) & ~flash, 0.0, scores)
    kept = sbh * per_sbh + scores
    full = 2 * sbh / np.where(sp, tp, 1.0)
    return np.asarray(np.where(rc == 2, full, kept), dtype=float)


def model_flops_per_step(x: Mapping[str, F]) -> F:
    """Model FLOPs of one step, forward + backward, no recompute, full attention square.

    Megatron's convention before March 2025 (llm-training-model §1.1, §1.4): 3 × forward with
    forward = Σ layers (QKV 2·T·h·(a+2·kv)·d_h, projection 2·T·h², MLP 2·mats·T·h·F × top-k,
    router 2·T·h·E, attention 4·s²·h per sequence) + LM head 2·T·h·V. For a GPT-3-style model
    this is 72·B·s·L·h²·(1 + s/(6h) + V/(12·L·h)).
    """
    h, a, kv = x["hidden_size"], x["num_attention_heads"], x["num_kv_heads"]
    s, tokens = x["seq_length"], x["global_batch_size"] * x["seq_length"]
    d_h = h / a
    mats = 2.0 + x["swiglu"]
    per_token_layer = (
        2 * h * (a + 2 * kv) * d_h
        + 2 * a * d_h * h
        + 2 * mats * h * x["ffn_hidden_size"] * x["experts_per_token"]
        + np.where(x["num_experts"] > 1, 2 * h * x["num_experts"], 0.0)
        + 4 * s * a * d_h
    )
    forward = tokens * (x["num_layers"] * per_token_layer + 2 * h * x["vocab_size"])
    return np.asarray(3.0 * forward, dtype=float)


def _unique_columns(flat: F) -> tuple[F, NDArray[np.intp]]:
    """Unique columns of a (rows, n) array and the inverse index (lexsort; fast for n ~ 1e6)."""
    order = np.lexsort(flat[::-1])
    ordered = flat[:, order]
    new = np.ones(ordered.shape[1], dtype=bool)
    new[1:] = np.any(ordered[:, 1:] != ordered[:, :-1], axis=0)
    ids = np.cumsum(new) - 1
    inverse = np.empty_like(ids)
    inverse[order] = ids
    return ordered[:, new], inverse


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

    Returns:
        ``step_time_s``, ``breakdown_s`` (dict of arrays), ``memory_per_device_B``,
        ``model_flops_per_step``, ``executed_flops_per_device`` — arrays of n.
    """
    x = {k: np.asarray(v, dtype=float) for k, v in x.items()}
    # Matrix units sustain a family-wide fraction of their microbenchmark throughput over a
    # whole training step (clocks under the power limit, framework overheads); fitted once per
    # family by benchmarks/fit_training.py, never per case.
    caps = replace(caps, gemm_efficiency=caps.gemm_efficiency * caps.training_sustained_fraction)
    varying = _varying_caps(caps)
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
    T_e = np.where(sp, T / tp, T)  # tokens in the elementwise regions (split by SP)

    # Group strides, tensor parallel innermost (Megatron order tp-cp-ep-dp-pp).
    st_tp, st_cp, st_dp, st_pp = np.ones_like(tp), tp, tp * cp, tp * cp * dp

    # ------------------------------------------------------------------ GEMMs per layer
    # forward shapes (m, n, k) per device; backward: dgrad (m, k, n) + wgrad (k, n, m).
    qkv = (T, (a + 2 * kv) * d_h / tp, h)
    proj = (T, h, a * d_h / tp)
    dense_up = (T, (mats - 1) * ffn / tp, h)  # GeLU fc1 or SwiGLU gate+up
    dense_down = (T, h, ffn / tp)
    local_experts = np.maximum(experts / ep, 1.0)
    # Experts: the ep ranks exchange tokens (uniform routing); each holds E/ep experts and
    # receives T·k tokens in total, T·k·ep/E per local expert (§1.1, §3.1).
    tok_expert = np.where(moe, T * topk * ep / experts, T)
    up = tuple(
        np.where(moe, e, d)
        for e, d in zip((tok_expert, (mats - 1) * ffn / tp, h), dense_up, strict=True)
    )
    down = tuple(np.where(moe, e, d) for e, d in zip((tok_expert, h, ffn / tp), dense_down,
                                                       strict=True))  # fmt: skip
    mlp_batch = np.where(moe, local_experts, 1.0)

    def fwd_bwd(shape: tuple[F, F, F], batch: F | float = 1.0) -> tuple[F, F, F]:
        mm, nn, kk = shape
        f = _gemm_s(caps, mm, nn, kk, batch, varying)
        dgrad = _gemm_s(caps, mm, kk, nn, batch, varying)
        wgrad = _gemm_s(caps, kk, nn, mm, batch, varying)
        return f, dgrad, wgrad

    g = [fwd_bwd(qkv), fwd_bwd(proj), fwd_bwd(up, mlp_batch), fwd_bwd(down, mlp_batch)]
    router_f = (
        np.where(moe, _gemm_s(caps, T, experts, h, 1.0, varying), 0.0) if np.any(moe) else 0.0
    )
    gemm_f = sum(t[0] for t in g) + router_f
    gemm_dgrad = sum(t[1] for t in g) + router_f
    gemm_wgrad = sum(t[2] for t in g) + router_f

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
    attn_flash_f = np.maximum(attn_flops / attn_rate, qkvo_bytes / hbm_rate) + caps.kernel_launch_s
    attn_flash_b = np.maximum(_FLASH_BWD * attn_flops / attn_rate, 2 * qkvo_bytes / hbm_rate) + (
        caps.kernel_launch_s
    )
    scores = heads_loc * s_loc * s  # elements of the score matrix on this device
    soft_f = _mem_s(caps, scores * (2 * p + x["dropout"] * (1 + p)), 5 * scores,
                              launches=1 + x["dropout"])  # fmt: skip
    soft_b = _mem_s(caps, scores * (3 * p + x["dropout"] * (1 + 2 * p)), 4 * scores,
                              launches=1 + x["dropout"])  # fmt: skip
    if np.all(flash):  # no unfused rows: skip the score-matrix GEMMs
        attn_unfused_f = soft_f
    else:
        attn_unfused_f = _gemm_s(caps, s_loc, s, d_h, heads_loc, varying) + _gemm_s(
            caps, s_loc, d_h, s, heads_loc, varying) + soft_f  # fmt: skip
    attn_unfused_b = 2 * (attn_unfused_f - soft_f) + soft_b
    attn_f = np.where(flash, attn_flash_f, attn_unfused_f)
    attn_b = np.where(flash, attn_flash_b, attn_unfused_b)

    # ------------------------------------------------------------------ elementwise
    # Forward bytes per layer (§6.3), as Megatron's fused kernels move them: 2 norms (read +
    # write), 2 fused bias-dropout-residual-adds (read 2, write 1, plus a 1-byte mask with
    # dropout; Megatron-LM fused_bias_dropout_add) in the SP region; fused bias-activation
    # (read + write over F for GeLU, 2F -> F for SwiGLU) in the TP region; rotary on Q and K
    # for SwiGLU (Llama-style) models.
    elem_units = (4 + 6) * T_e * h * p + 2 * x["dropout"] * T_e * h
    act_units = np.where(x["swiglu"] > 0, 3.0, 2.0) * T * ffn / tp * topk * p
    rope = np.where(x["swiglu"] > 0, 2 * T * (a + kv) * d_h / tp * p, 0.0)
    elem_fwd_bytes = elem_units + act_units + rope
    launches = 5 + x["swiglu"]
    elem_f = _mem_s(caps, elem_fwd_bytes, 2 * T_e * h * 5, launches=launches)
    elem_b = _mem_s(caps, 2 * elem_fwd_bytes, 2 * T_e * h * 10, launches=launches)

    # ------------------------------------------------------------------ TP / CP / EP comm
    act_msg = T * h * p  # one activation tensor, nccl 'size' (§3.1)
    ar = _coll("all_reduce", act_msg, tp, net, st_tp)
    ag = _coll("all_gather", act_msg, tp, net, st_tp)
    rs = _coll("reduce_scatter", act_msg, tp, net, st_tp)
    tp_f = np.where(sp, 2 * (ag + rs), 2 * ar)
    tp_b = np.where(sp, 2 * (ag + rs) + 2 * ag, 2 * ar)
    overlap_tp = x["tp_comm_overlap"] > 0
    # Backward TP comm runs under the weight-gradient GEMMs (async since Megatron 2021-09,
    # §3.2); with --tp-comm-overlap the forward comm also hides under the GEMMs.
    tp_f_exp = np.where(overlap_tp, np.maximum(tp_f - gemm_f, 0.0), tp_f)
    tp_b_exp = np.maximum(tp_b - gemm_wgrad, 0.0)
    kv_msg = 2 * mb * s * kv * d_h * p  # K and V of the whole sequence (§3.1, CP ring)
    cp_ag = _coll("all_gather", kv_msg, cp, net, st_cp)
    cp_f_exp = np.maximum(cp_ag - attn_f, 0.0)  # overlapped with the chunk in hand (§3.2)
    cp_b_exp = np.maximum(2 * cp_ag - attn_b, 0.0)
    # expert parallelism is carved out of data parallelism (contract): EP ranks are DP ranks
    a2a = np.where(moe, _coll("all_to_all", T * topk * h * p, ep, net, st_dp), 0.0)
    ep_f, ep_b = 2 * a2a, 2 * a2a  # dispatch + combine, exposed by default (§3.2)

    # ------------------------------------------------------------------ per layer, per micro-batch
    layer_f_compute = gemm_f + attn_f + elem_f
    recompute = np.where(rc == 2, layer_f_compute + tp_f_exp,
                         np.where((rc == 1) & ~flash, attn_f, 0.0))  # fmt: skip
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
    layers_stage = np.ceil(L / pp)
    # vocab-parallel embedding: gather + all-reduce (reduce-scatter with SP) over TP (§3.1)
    emb_f = _mem_s(caps, 2 * T_e * h * p) + np.where(sp, rs, ar)
    emb_b = _mem_s(caps, 2 * T_e * h * p)
    head_f, head_dg, head_wg = fwd_bwd((T, vocab / tp, h))
    logits = T * vocab / tp
    ce_f = _mem_s(caps, 3 * logits * 4 + 2 * T_e * h * p, 5 * logits, launches=3)
    ce_b = _mem_s(caps, 2 * logits * 4, 2 * logits, launches=2)
    first_extra = {"elementwise": emb_f + emb_b}
    last_extra = {"gemm": head_f + head_dg + head_wg, "elementwise": ce_f + ce_b}
    # Megatron's scatter/gather optimisation (default since Narayanan et al. 2021 §4.1): each
    # of the t ranks sends 1/t of the boundary activation; the receiving node all-gathers it
    # over its scale-up links (§3.1). With SP the activation is already split.
    p2p_msg = act_msg / tp
    regather = np.where(sp, 0.0, _coll("all_gather", act_msg, tp, net, st_tp))
    p2p = np.where(pp > 1, 2 * v * (_coll("send_recv", p2p_msg, np.full_like(pp, 2.0), net,
                                          st_pp) + regather), 0.0)  # fmt: skip

    def stage(extra: Mapping[str, F]) -> dict[str, F]:
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
    which = np.where(one_stage, 0, np.where(t_first >= np.maximum(t_last, t_mid), 1,
                                            np.where(t_last >= t_mid, 2, 3)))  # fmt: skip
    t_mean = np.where(one_stage, t_single,
                      (t_first + t_last + np.maximum(pp - 2, 0) * t_mid) / pp)  # fmt: skip
    bubble = (pp - 1) / v * t_mean  # 1F1B / interleaved 1F1B (§4)
    breakdown: dict[str, F] = {}
    for key in first:
        chosen = np.choose(which.astype(int), [single[key], first[key], last[key], middle[key]])
        breakdown[key] = m * chosen
    breakdown["pipeline_bubble"] = bubble

    # ------------------------------------------------------------------ data parallel
    params_layer = _params_per_layer(x)
    emb_params = vocab * h
    dense_layer_params = params_layer - np.where(moe, mats * h * ffn * experts, 0.0)
    expert_params = np.where(moe, mats * h * ffn * experts / ep, 0.0)
    stage_layer_params = layers_stage * (dense_layer_params + expert_params) / tp
    stage_params = stage_layer_params + np.where(pp == 1, 2 * emb_params, emb_params) / tp
    grad_bytes = np.where(zero >= 3, p, 4.0)  # fp32 main grads (Megatron), bf16 FSDP (§2.1)
    grads = stage_params * grad_bytes
    params_b = stage_params * p
    ar_dp = _coll("all_reduce", grads, dp, net, st_dp)
    rs_dp = _coll("reduce_scatter", grads, dp, net, st_dp)
    ag_dp = _coll("all_gather", params_b, dp, net, st_dp)
    t_f_stage = layers_stage * layer_fwd
    t_b_stage = layers_stage * layer_bwd
    overlap = x["overlap_grad_reduce"] > 0
    dp_plain = np.where(overlap, np.maximum(ar_dp - t_b_stage, 0.0), ar_dp)
    dp_dist = np.where(overlap, np.maximum(rs_dp - t_b_stage, 0.0) + np.maximum(
        ag_dp - t_f_stage, 0.0), rs_dp + ag_dp)  # fmt: skip
    # ZeRO-3/FSDP: parameters gathered for forward and backward and gradients reduce-scattered
    # every micro-batch, prefetched under compute; the first gather and last reduce-scatter of
    # a layer unit stay exposed (§3.1, §3.2).
    per_mb = np.maximum(ag_dp - t_f_stage, 0.0) + np.maximum(ag_dp + rs_dp - t_b_stage, 0.0)
    dp_zero3 = m * per_mb + (ag_dp + rs_dp) / np.maximum(layers_stage, 1.0)
    dp_sharded = np.where(zero >= 3, dp_zero3, np.where(zero >= 1, dp_dist, dp_plain))
    dp_exposed = np.where(dp > 1, dp_sharded, 0.0)
    breakdown["data_parallel_comm"] = dp_exposed
    opt_params = np.where(zero >= 1, stage_params / dp, stage_params)
    breakdown["optimizer"] = _mem_s(caps, _ADAM_BYTES * opt_params,
                                              _ADAM_FLOPS * opt_params, launches=4)  # fmt: skip
    breakdown["embedding_sync"] = np.where(
        pp > 1, _coll("all_reduce", emb_params / tp * grad_bytes, np.full_like(pp, 2.0), net,
                      st_pp), 0.0)  # fmt: skip
    step = sum(breakdown.values())

    # ------------------------------------------------------------------ memory (§2)
    # bytes per parameter (§2.1): bf16 weights + fp32 main grads + Adam 12 B (Megatron, 18);
    # ZeRO-1 / distributed optimizer 6 + 12/D, ZeRO-2 2 + 16/D, ZeRO-3 / FSDP 16/D.
    sharded = np.where(zero == 2, 2 + 16.0 / dp, np.where(zero == 1, 6 + 12.0 / dp, 18.0))
    states = np.where(zero >= 3, 16.0 / dp, sharded)
    model_states = stage_params * states
    layer_act = activation_bytes_per_layer(x)
    # 1F1B: stage 0 holds p micro-batches of L/p layers = L layers; interleaved adds
    # (p − 1)/(p·v) (§2.3); fewer micro-batches than stages scale it by m/p.
    interleave = np.where(v > 1, 1 + (pp - 1) / (pp * v), 1.0)
    in_flight = np.minimum(m, pp) / pp * interleave
    act = L * in_flight * layer_act
    # full recompute re-materialises one layer's activations at a time in backward
    act = act + np.where(rc == 2, activation_bytes_per_layer({**x, "recompute": 0 * rc}), 0.0)
    logits_mem = np.where(pp == 1, 2 * logits * 4, 0.0)
    memory = model_states + _ACTIVATION_OVERHEAD * act + logits_mem
    last_memory = stage_params * states + _ACTIVATION_OVERHEAD * (
        layers_stage * np.minimum(m, 1) * layer_act) + 2 * logits * 4  # fmt: skip
    memory = np.where(pp > 1, np.maximum(memory, last_memory), memory)

    return {
        "step_time_s": np.asarray(step, dtype=float),
        "breakdown_s": breakdown,
        "memory_per_device_B": np.asarray(memory, dtype=float),
        "model_flops_per_step": model_flops_per_step(x),
        "tokens_per_step": x["global_batch_size"] * s,
        "samples_per_step": x["global_batch_size"],
        "num_micro_batches": m,
    }
