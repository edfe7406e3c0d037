"""The symbols of the transformer model: one case's shapes, degrees and group strides.

:class:`Inputs` names the quantities every component reads, in the notation of
``docs/model.md`` part C (Korthikanti et al. 2022, §3): ``h`` hidden size, ``a`` attention
heads, ``kv`` key/value heads, ``s`` sequence length, ``tp``/``pp``/``dp``/``cp``/``ep`` the
parallel degrees, ``mb`` the micro-batch, ``m`` micro-batches per pipeline, ``T`` tokens of a
micro-batch on one device. Each field is a float or an array over n cases.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

import numpy as np
from numpy.typing import NDArray

from deepflow.config.specs import PIPELINE_BALANCE_MODES
from deepflow.oracle.hardware import DeviceCaps
from deepflow.oracle.parallelism import group_strides
from deepflow.oracle.workloads.transformer.ops import ArrayOps

__all__ = ["Inputs", "inputs", "model_flops_per_step", "params_per_layer", "recomputed_share"]

F = NDArray[np.float64]

#: The ``pipeline_balance`` code of a split whose ends (embedding, output layer) take a slot.
_ENDS_AS_LAYERS = float(PIPELINE_BALANCE_MODES.index("ends_as_layers"))


class Inputs(NamedTuple):
    """One case (or n cases) of the transformer step, derived once from the input columns."""

    x: Mapping[str, Any]  #: the input columns themselves
    p: Any  #: bytes per activation element: 16 bits in FP8 training, else the precision's
    fp8: bool  #: FP8 training: the linear layers' GEMMs in FP8, everything else in 16 bits
    slow16: Any  #: FP8 peak / 16-bit peak in FP8 training (16-bit matmuls run that much slower); 1
    L: Any  #: layers
    h: Any  #: hidden size
    a: Any  #: attention heads
    kv: Any  #: key/value heads (GQA)
    ffn: Any  #: MLP hidden size
    s: Any  #: sequence length
    vocab: Any  #: vocabulary
    tied: Any  #: the output layer reuses the input embedding's matrix
    experts: Any  #: MoE experts (1: dense)
    topk: Any  #: experts per token
    tp: Any
    pp: Any
    dp: Any
    cp: Any
    ep: Any
    dp_rep: Any  #: hybrid-sharding (HSDP) replicas of the data-parallel ranks (1: none)
    dp_sh: Any  #: data-parallel ranks each replica shards the model states over, dp / dp_rep
    mb: Any  #: micro-batch size
    v: Any  #: virtual pipeline stages (interleaving)
    sp: Any  #: sequence parallelism on (bool)
    rc: Any  #: recompute code: 0 none, 1 selective, 2 full
    zero: Any  #: ZeRO stage (3: ZeRO-3 / FSDP)
    flash: Any  #: fused (flash) attention (bool)
    d_h: Any  #: head dimension: the model's ``head_dim``, else h / a
    moe: Any  #: a mixture-of-experts model (bool)
    mats: Any  #: MLP matrices: 2 (GeLU) or 3 (SwiGLU)
    m: Any  #: micro-batches per pipeline
    s_loc: Any  #: sequence on one context-parallel rank
    T: Any  #: tokens per micro-batch on one device (the full T enters each TP GEMM)
    T_e: Any  #: tokens in the elementwise regions (split by SP)
    local_experts: Any  #: experts held by one expert-parallel rank (≥ 1)
    layers_stage: Any  #: layers of one pipeline stage (the most any stage holds)
    layers_ends: Any  #: layers of the first and of the last stage (one fewer where the
    #: embedding and the output layer take a layer slot each, ``pipeline_balance``)
    logits: Any  #: logits of a micro-batch on one tensor-parallel rank
    st_tp: Any  #: group strides in the mapping's rank order (default tp-cp-ep-dp-pp: tp innermost)
    st_cp: Any
    st_dp: Any
    st_pp: Any
    axes: Any  #: the ``grid_axes`` code: how a direct topology's axes hold the ranks


def inputs(caps: DeviceCaps, x: Mapping[str, Any], o: Any) -> Inputs:
    """The symbols of one step from its input columns (``o``: the operations they run on)."""
    h, a, s, mb = x["hidden_size"], x["num_attention_heads"], x["seq_length"], x["micro_batch_size"]
    tp, pp, dp, cp = (
        x[k] for k in ("tensor_parallel", "pipeline_parallel", "data_parallel", "context_parallel")
    )
    experts, ep, vocab = x["num_experts"], x["expert_parallel"], x["vocab_size"]
    sp = x["sequence_parallel"] > 0
    s_loc = s / cp
    T = mb * s_loc
    # ``pipeline_balance: ends_as_layers`` (Llama 3 §3.3.2; Megatron-Core's
    # account_for_embedding/loss_in_pipeline_split): the split divides L + 2 layer slots, the
    # first stage's first slot the embedding, the last stage's last the output layer and loss
    ends = o.where((x["pipeline_balance"] == _ENDS_AS_LAYERS) & (pp > 1), 1.0, 0.0)
    layers_stage = o.ceil((x["num_layers"] + 2 * ends) / pp)
    return Inputs(
        x=x,
        # FP8 training (Transformer Engine, torchao) runs only the linear layers' GEMMs in
        # FP8; activations, attention and communication stay 16-bit (docs/model.md §C6.4)
        p=max(caps.bytes_per_element, 2.0),
        fp8=caps.bytes_per_element < 2,
        slow16=_slow16(caps),
        L=x["num_layers"],
        h=h,
        a=a,
        kv=x["num_kv_heads"],
        ffn=x["ffn_hidden_size"],
        s=s,
        vocab=vocab,
        tied=x["tied_embeddings"] > 0,
        experts=experts,
        topk=x["experts_per_token"],
        tp=tp,
        pp=pp,
        dp=dp,
        cp=cp,
        ep=ep,
        dp_rep=x["data_parallel_replicas"],
        dp_sh=dp / x["data_parallel_replicas"],
        mb=mb,
        v=x["virtual_pipeline_stages"],
        sp=sp,
        rc=x["recompute"],
        zero=x["zero_stage"],
        flash=x["flash_attention"] > 0,
        d_h=head_width(x, o),
        moe=experts > 1,
        mats=2.0 + x["swiglu"],
        m=x["global_batch_size"] / (mb * dp),
        s_loc=s_loc,
        T=T,
        T_e=o.where(sp, T / tp, T),
        local_experts=o.maximum(experts / ep, 1.0),
        layers_stage=layers_stage,
        layers_ends=layers_stage - ends,
        logits=T * vocab / tp,
        **group_strides((tp, cp, dp, pp), x["rank_order"], o),
        axes=x["grid_axes"],
    )


def _slow16(caps: DeviceCaps) -> Any:
    """How much slower the 16-bit matmuls of FP8 training (attention, the output layer) run
    than its FP8 GEMMs: the ratio of the two peaks (1 outside FP8 training)."""
    if caps.bytes_per_element >= 2:
        return 1.0
    peak16 = caps.peak_flops_16bit
    ratio = np.where(np.asarray(peak16) > 0, caps.peak_flops / np.where(peak16 > 0, peak16, 1), 1)
    return float(ratio) if np.ndim(ratio) == 0 else ratio


def recomputed_share(i: Inputs, o: Any) -> Any:
    """The share of a stage's layers that full recompute re-runs: all, or with
    ``recompute_num_layers`` N (Megatron-Core ``--recompute-method block
    --recompute-num-layers N``: N layers of each model chunk recomputed, the rest keeping
    their activations; megatron/training/arguments.py) N of its ⌈L/p⌉/v (docs/model.md §C2.3)."""
    n = i.x["recompute_num_layers"]
    return o.where(n > 0, o.minimum(n * i.v / i.layers_stage, 1.0), 1.0)


def head_width(x: Mapping[str, Any], o: Any) -> Any:
    """The width of one attention head: ``head_dim`` where the model states one (Qwen3,
    MaxText: heads × head_dim ≠ hidden), else hidden / heads."""
    h, a = x["hidden_size"], x["num_attention_heads"]
    return o.where(x["head_dim"] > 0, x["head_dim"], h / a)


def params_per_layer(x: Mapping[str, Any], o: Any) -> Any:
    """Weights of one transformer layer (attention + MLP or experts + norms), elements."""
    h, a, kv, ffn = (
        x["hidden_size"],
        x["num_attention_heads"],
        x["num_kv_heads"],
        x["ffn_hidden_size"],
    )
    d_h = head_width(x, o)
    attn = h * (a + 2 * kv) * d_h + a * d_h * h
    mats = 2.0 + x["swiglu"]  # GeLU: 2 matrices; SwiGLU: gate, up, down (docs/model.md §C1.1)
    mlp = mats * h * ffn * x["num_experts"]
    router = o.where(x["num_experts"] > 1, h * x["num_experts"], 0.0)
    return attn + mlp + router + 4 * h


def model_flops_per_step(x: Mapping[str, Any]) -> F:
    """Model FLOPs of one step, forward + backward, no recompute, full attention square.

    Megatron's convention before March 2025 (docs/model.md §C1.1, §C1.4): 3 × forward with
    forward = Σ layers (QKV 2·T·h·(a+2·kv)·d_h, projection 2·T·h², MLP 2·mats·T·h·F × top-k,
    router 2·T·h·E, attention 4·s²·h per sequence) + LM head 2·T·h·V. For a GPT-3-style model
    this is 72·B·s·L·h²·(1 + s/(6h) + V/(12·L·h)).
    """
    arrays = {k: np.asarray(v, dtype=float) for k, v in x.items()}
    return np.asarray(model_flops(arrays, ArrayOps), dtype=float)


def model_flops(x: Mapping[str, Any], o: Any) -> Any:
    """:func:`model_flops_per_step` over ``o``'s operations."""
    h, a, kv = x["hidden_size"], x["num_attention_heads"], x["num_kv_heads"]
    s, tokens = x["seq_length"], x["global_batch_size"] * x["seq_length"]
    d_h = head_width(x, o)
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
