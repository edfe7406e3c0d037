"""One transformer layer, per micro-batch: GEMMs, attention, elementwise kernels, and the
tensor-, context- and expert-parallel communication that is not hidden under them.

Each component is a function of ``(caps, inputs, ops)`` returning a small named result;
:func:`layer_times` sums them into the per-layer breakdown. Formulas: ``docs/model.md``
part C (§C1 FLOPs, §C3 communication, §C6 kernels).
"""

from __future__ import annotations

from typing import Any, NamedTuple

from deepflow.config.mapping import KNOB
from deepflow.config.specs import FP8_RECIPES
from deepflow.oracle.hardware import DeviceCaps
from deepflow.oracle.workloads.transformer.columns import (
    DOTS_RECOMPUTE,
    FULL_RECOMPUTE,
    OP_RECOMPUTE,
    SELECTIVE_RECOMPUTE,
)
from deepflow.oracle.workloads.transformer.shapes import Inputs, recomputed_share

__all__ = [
    "ATTENTION_REFERENCE_TOKENS",
    "Attention",
    "ContextComm",
    "Elementwise",
    "ExpertComm",
    "GemmTimes",
    "LayerGemms",
    "LayerTimes",
    "TensorComm",
    "attention",
    "attention_length_factor",
    "causal_executed_fraction",
    "context_comm",
    "elementwise",
    "expert_comm",
    "layer_gemms",
    "layer_times",
    "op_recompute",
    "tensor_comm",
]

#: FlashAttention skips KV tiles above the causal diagonal: executed fraction (1 + w/s)/2 with
#: KV tile width w = 128 (docs/model.md §C1.1).
_FLASH_KV_TILE = 128.0
#: FlashAttention backward runs 5 matmuls against 2 forward (it recomputes S): 2.5× (§C1.2).
_FLASH_BWD = 2.5
#: FlashAttention-2 holds a Q block of B_r rows and K and V blocks of B_c = B_r rows (d_h wide)
#: in shared memory, B_r ≤ 128 (Dao, arXiv 2307.08691, Algorithm 1; docs/model.md §C6.2).
_FLASH_MAX_BLOCK = 128.0
_FLASH_BLOCKS_IN_SRAM = 3.0
#: The keys per query at which the families' fused-attention efficiencies are stated: Shah et
#: al.'s Hopper figures and cudnn-frontend's Blackwell tables, 8k tokens (docs/model.md §C6.2).
ATTENTION_REFERENCE_TOKENS = 8192.0
#: The ``attention_kernel`` code of FlashAttention in pre-MLIR Triton, whose rate is fitted end
#: to end at its runs' length (no microbenchmark across lengths): it keeps that rate (§C6.2).
_TRITON = KNOB["attention_kernel"].codes["triton"]


def causal_executed_fraction(tokens: Any) -> Any:
    """The share of a causal attention's s × s score tiles that FlashAttention-class kernels
    run: the lower triangle and the diagonal's whole tiles, (1 + w/s)/2 (docs/model.md §C1.1)."""
    return (1.0 + _FLASH_KV_TILE / tokens) / 2.0


def attention_length_factor(tokens: Any, overhead: Any) -> Any:
    """Seconds per FLOP of a causal fused-attention kernel whose query blocks each visit the
    keys of ``tokens`` positions, over the same at :data:`ATTENTION_REFERENCE_TOKENS`
    (docs/model.md §C6.2). A query block (one CTA) runs n = (tokens/w + 1)/2 key blocks of
    w = 128 under the causal mask (the executed fraction of §C1.1) plus a fixed ``overhead`` of
    key-block iterations' worth of work beside its key loop (loading Q; the softmax's final
    rescale and the writes of O and the log-sum-exp; the backward's dQ, dK and dV stores; the
    pipeline's fill and drain), so its time is proportional to n + overhead for n's FLOPs.

    Example:
        >>> round(attention_length_factor(2048.0, 4.0), 3), attention_length_factor(8192.0, 4.0)
        (1.309, 1.0)
    """
    blocks = causal_executed_fraction(tokens) * tokens / _FLASH_KV_TILE
    reference = causal_executed_fraction(ATTENTION_REFERENCE_TOKENS) * (
        ATTENTION_REFERENCE_TOKENS / _FLASH_KV_TILE
    )
    return (1.0 + overhead / blocks) / (1.0 + overhead / reference)


class GemmTimes(NamedTuple):
    """Seconds of one linear layer: forward GEMM(m, n, k), input-gradient GEMM(m, k, n) and
    weight-gradient GEMM(k, n, m)."""

    fwd: Any
    dgrad: Any
    wgrad: Any


class LayerGemms(NamedTuple):
    """The GEMMs of one layer (QKV, output projection, MLP up and down, MoE router)."""

    qkv: GemmTimes
    proj: GemmTimes
    up: GemmTimes
    down: GemmTimes
    router: Any  #: forward, input-gradient and weight-gradient each (MoE only)
    fwd: Any
    dgrad: Any
    wgrad: Any


def layer_gemms(i: Inputs, o: Any, mxfp8_gemm_time_ratio: float) -> LayerGemms:
    """Per-device GEMM shapes of a layer (docs/model.md §C1.1) and their times.

    Experts: the ep ranks exchange tokens (uniform routing); each holds E/ep experts and
    receives T·k tokens in total, T·k·ep/E per local expert (§C1.1, §C3.1). With the MXFP8
    recipe the linear layers' block-scaled GEMMs take ``mxfp8_gemm_time_ratio`` times the
    per-tensor FP8 GEMM's time (Transformer Engine's GEMM profile, §C6.4).
    """
    T, h, tp, moe = i.T, i.h, i.tp, i.moe
    tokens_mlp = o.where(moe, T * i.topk * i.ep / i.experts, T)  # per local expert with MoE
    mlp_batch = o.where(moe, i.local_experts, 1.0)
    qkv = (T, (i.a + 2 * i.kv) * i.d_h / tp, h)
    proj = (T, h, i.a * i.d_h / tp)
    up = (tokens_mlp, (i.mats - 1) * i.ffn / tp, h)  # GeLU fc1 or SwiGLU gate+up
    down = (tokens_mlp, h, i.ffn / tp)
    block = o.where(_mxfp8(i), mxfp8_gemm_time_ratio, 1.0)

    def times(shape: tuple[Any, Any, Any], batch: Any) -> GemmTimes:
        return GemmTimes(*(block * t for t in o.gemm3(*shape, batch)))

    g_qkv, g_proj = times(qkv, 1.0), times(proj, 1.0)
    g_up, g_down = times(up, mlp_batch), times(down, mlp_batch)
    router = o.where(moe, o.gemm(T, i.experts, h, 1.0), 0.0) if o.any(moe) else 0.0
    return LayerGemms(
        qkv=g_qkv,
        proj=g_proj,
        up=g_up,
        down=g_down,
        router=router,
        fwd=g_qkv.fwd + g_proj.fwd + g_up.fwd + g_down.fwd + router,
        dgrad=g_qkv.dgrad + g_proj.dgrad + g_up.dgrad + g_down.dgrad + router,
        wgrad=g_qkv.wgrad + g_proj.wgrad + g_up.wgrad + g_down.wgrad + router,
    )


class Attention(NamedTuple):
    """Seconds of the attention core (scores, softmax, dropout, context), forward and backward."""

    fwd: Any
    bwd: Any


def attention(caps: DeviceCaps, i: Inputs, o: Any) -> Attention:
    """The attention core of one layer.

    Fused (flash) attention keeps the s×s scores in SRAM: its FLOPs run at the family's
    attention-kernel efficiency (docs/model.md §C6.2) and only Q, K, V and O cross HBM;
    causal masking skips the tiles above the diagonal; the backward pass executes 2.5× the
    forward (§C1.2). Unfused: the two score-matrix GEMMs plus a fused scaled-masked softmax
    (read + write) and dropout (read, write, 1-byte mask); backward: dropout (read dy and
    mask, write) and softmax (read y and dy, write).
    """
    p, s, s_loc, d_h, mb = i.p, i.s, i.s_loc, i.d_h, i.mb
    heads_loc = mb * i.a / i.tp
    causal = causal_executed_fraction(s)
    attn_flops = 4.0 * heads_loc * s_loc * s * d_h * causal
    # 16-bit in FP8 training: Transformer Engine runs fused attention in BF16 unless FP8
    # attention is asked for (docs/model.md §C6.4)
    peak = caps.peak_flops / i.slow16
    # the kernel the framework runs (FlashAttention-2, cuDNN, FlashAttention-3, TensorRT-LLM's;
    # §C6.2)
    efficiency = o.choose(i.x["attention_kernel"], caps.attention_efficiencies)
    # the efficiencies are stated at 8k keys; a query block's fixed work weighs more over fewer
    # keys (the local queries' chunk under context parallelism), less over more (§C6.2)
    length = o.where(i.x["attention_kernel"] == _TRITON, 1.0,
                     attention_length_factor(s_loc, caps.attention_block_overhead))  # fmt: skip
    attn_rate = peak * efficiency * caps.training_sustained_fraction / length
    qkvo_bytes = (2 * s_loc * i.a + 2 * s * i.kv) * d_h * mb / i.tp * p
    hbm_rate = caps.hbm_bandwidth_Bps * caps.hbm_efficiency
    # The shared memory sizes the Q block: B_r = min(128, L1 / (3·d_h·p)); K and V stream
    # through L2 once per Q block (causal: the lower triangle).
    block = _FLASH_MAX_BLOCK / o.maximum(
        1.0,
        _FLASH_BLOCKS_IN_SRAM
        * d_h
        * p
        * _FLASH_MAX_BLOCK
        / o.maximum(caps.l1_capacity_per_sm_B, 4.0),
    )
    kv_reread = s_loc / block * 2 * s * i.kv * d_h * mb / i.tp * p * causal
    l2_rate = caps.l2_bandwidth_Bps
    flash_f = (
        o.maximum(o.maximum(attn_flops / attn_rate, qkvo_bytes / hbm_rate), kv_reread / l2_rate)
        + caps.kernel_launch_s
    )
    flash_b = (
        o.maximum(
            o.maximum(_FLASH_BWD * attn_flops / attn_rate, 2 * qkvo_bytes / hbm_rate),
            2 * kv_reread / l2_rate,
        )
        + caps.kernel_launch_s
    )
    scores = heads_loc * s_loc * s  # elements of the score matrix on this device
    drop = i.x["dropout"]
    soft_f = o.mem(scores * (2 * p + drop * (1 + 2 * p)), 5 * scores, 1 + drop)
    soft_b = o.mem(scores * (3 * p + drop * (1 + 2 * p)), 4 * scores, 1 + drop)
    if o.any(o.not_(i.flash)):  # unfused rows: the score-matrix GEMMs
        unfused_f = o.gemm(s_loc, s, d_h, heads_loc) + o.gemm(s_loc, d_h, s, heads_loc) + soft_f
    else:
        unfused_f = soft_f
    unfused_b = 2 * (unfused_f - soft_f) + soft_b
    return Attention(
        fwd=o.where(i.flash, flash_f, unfused_f), bwd=o.where(i.flash, flash_b, unfused_b)
    )


class Elementwise(NamedTuple):
    """Seconds of a layer's memory-bound kernels (norms, activation, residuals, rotary)."""

    fwd: Any
    bwd: Any


def elementwise(i: Inputs, o: Any, rowwise_cast_efficiency: float) -> Elementwise:
    """Bytes per layer (docs/model.md §C6.3), as Megatron's fused kernels move them.

    Forward: 2 norms (read x, write y) and 2 fused bias-dropout-residual-adds (read input and
    residual, write 1, plus a 1-byte mask with dropout; Megatron-LM fused_bias_dropout_add) in
    the SP region; fused bias-activation (read + write over F for GeLU, 2F -> F for SwiGLU) in
    the TP region; rotary on Q and K for SwiGLU (Llama-style) models. Backward, per kernel's
    autograd inputs and outputs: norm (read x and dy, write dx: 3), dropout-add (read dy and
    the mask, write dx: 2), the residual fork's gradient sum (read 2, write 1: 3); activation
    (read dy and the saved input, write dx: GeLU 3, SwiGLU 5); rotary (read dy, write dx: 2).
    FP8 training adds its casts (``rowwise_cast_efficiency``: :func:`fp8_operand_bytes`).
    """
    T, T_e, h, p, tp = i.T, i.T_e, i.h, i.p, i.tp
    swiglu = i.x["swiglu"]
    unit = T_e * h * p
    mask = i.x["dropout"] * T_e * h
    swi = swiglu > 0
    gated = T * i.ffn / tp * i.topk  # MLP activation elements (per expert pick)
    act_fwd = o.where(swi, 3.0, 2.0) * gated * p
    act_bwd = o.where(swi, 5.0, 3.0) * gated * p
    rotated = T * (i.a + i.kv) * i.d_h / tp  # Q and K elements
    rope = o.where(swi, 2 * rotated * p, 0.0)
    fwd_bytes = 2 * (2 + 3) * unit + 2 * mask + act_fwd + rope
    bwd_bytes = 2 * (3 + 2 + 3) * unit + 2 * mask + act_bwd + rope
    launches = 5 + swiglu
    bwd_launches = launches + 2
    # PyTorch eager kernels where the framework runs the ops unfused (§C6.3, _eager_bytes)
    eager_f, eager_b, eager_l, eager_bl = _eager_bytes(i, o, T_e * h, rotated, gated)
    fwd_bytes, bwd_bytes = fwd_bytes + eager_f, bwd_bytes + eager_b
    launches, bwd_launches = launches + eager_l, bwd_launches + eager_bl
    if i.fp8:  # FP8 casts with transposes of the GEMM operands (§C6.4)
        cast_f, cast_b = _fp8_casts(i, o, rowwise_cast_efficiency)
        # rowwise: each operand cast along two axes (twice the casts); the 8 backward GEMMs'
        # rescales, one kernel each
        rowwise = _rowwise(i)
        tensor_f, tensor_b = FP8_LINEAR_LAUNCHES["tensorwise"]
        row_f, row_b = FP8_LINEAR_LAUNCHES["rowwise"]
        fwd_bytes, bwd_bytes = fwd_bytes + cast_f, bwd_bytes + cast_b
        launches = launches + 4 * o.where(rowwise, row_f, tensor_f)
        bwd_launches = bwd_launches + 4 * o.where(rowwise, row_b, tensor_b)
    return Elementwise(
        fwd=o.mem(fwd_bytes, 2 * T_e * h * 5, launches),
        bwd=o.mem(bwd_bytes, 2 * T_e * h * 10, bwd_launches),
    )


def _eager_bytes(i: Inputs, o: Any, normed: Any, rotated: Any, gated: Any) -> tuple[Any, ...]:
    """Extra bytes (forward, backward) and kernels (forward, backward) of a layer's elementwise
    ops run by PyTorch eager instead of one fused kernel each (docs/model.md §C6.3), op by op
    as autograd runs them, with 16-bit (``p``-byte) activations and fp32 (4-byte) temporaries:

    * RMSNorm (``fused_norm`` 0; torchtitan's ``RMSNorm``: ``x.float()``, ``pow(2)``,
      ``mean(-1)``, ``rsqrt``, ``mul``, ``type_as``, ``* weight``, torchtitan/models/norms.py):
      forward 4p + 28 bytes an element (fused: read and write, 2p), backward 8p + 76 (the
      weight's ``mul`` and its gradient's product and sum, the casts back and forth, the
      ``mul``'s two gradients, ``mean``'s expand, ``pow``'s ``2·x·g``, the sum of the two input
      gradients; fused: read x and dy, write dx, 3p), on both norms' ``normed`` elements;
    * rotary (``fused_rotary`` 0; torchtitan's ``apply_rotary_emb``: ``float()``,
      ``view_as_complex`` multiply by ``freqs_cis``, ``type_as``): 2p + 16 bytes each way an
      element of Q and K (fused: 2p);
    * SwiGLU (``fused_swiglu`` 0; ``silu(w1(x)) * w3(x)``, nanotron's GLUActivation): ``silu``
      and ``mul`` forward 5p per gated element (fused: 3p), backward the ``mul``'s two products
      and ``silu``'s gradient 9p (fused: 5p).
    """
    p = i.p
    norm = o.where(i.x["fused_norm"] > 0, 0.0, 1.0)
    rope = o.where((i.x["fused_rotary"] > 0) | (i.x["swiglu"] <= 0), 0.0, 1.0)
    glu = o.where((i.x["fused_swiglu"] > 0) | (i.x["swiglu"] <= 0), 0.0, 1.0)
    fwd = norm * 2 * normed * (2 * p + 28) + rope * rotated * 16 + glu * gated * 2 * p
    bwd = norm * 2 * normed * (5 * p + 76) + rope * rotated * 16 + glu * gated * 4 * p
    return fwd, bwd, norm * 2 * 5 + rope * 4 + glu, norm * 2 * 10 + rope * 4 + glu * 2


#: An FP8 cast with its transpose (Transformer Engine's ``cast_transpose``): read 2 bytes,
#: write the FP8 copy and its transpose, 1 + 1 (docs/model.md §C6.4).
_FP8_CAST_BYTES = 4.0


#: MXFP8 (Transformer Engine's MXFP8 quantize: one kernel writes the row-wise and the
#: column-wise block-scaled copies, the latter for the transposed GEMM operand): the cast and
#: transpose's bytes plus one E8M0 scale byte per 32-element block of each copy, 2 / 32
#: (OCP Microscaling Formats (MX) v1.0 §5.3: k = 32, E8M0 scales; docs/model.md §C6.4).
_MXFP8_SCALE_BYTES = 2.0 / 32.0


#: torchao's rowwise recipe casts each operand twice, once per axis (a row-scaled copy for one
#: GEMM, a column-scaled one for the other; torchao/float8/float8_linear.py,
#: matmul_with_hp_or_float8_args): read 2 bytes and write 1, twice (docs/model.md §C6.4).
_FP8_ROWWISE_CAST_BYTES = 6.0
#: The rescale of a slow-accumulation backward GEMM's 16-bit output (``output *=
#: post_inverse_scale``, torchao/float8/float8_ops.py addmm_float8_unwrapped): read 2, write 2.
_FP8_RESCALE_BYTES = 4.0
#: Kernels per linear layer beyond its GEMMs, forward and backward: tensor-wise one cast (with
#: its transpose) each way; rowwise the two axes' casts each way and the two backward rescales.
FP8_LINEAR_LAUNCHES = {"tensorwise": (1.0, 1.0), "rowwise": (2.0, 4.0)}


def fp8_operand_bytes(rowwise: Any, rowwise_cast_efficiency: float, o: Any) -> tuple[Any, Any]:
    """Streaming-equivalent bytes per element of an FP8 linear layer's operands: each cast
    (its inputs and weights forward, its output gradients backward) and each rescaled backward
    output (input and weight gradients; rowwise only). torchao's rowwise kernels, which
    torch.compile generates (an amax reduction per row or column, casts, transposes, rescales),
    reach ``rowwise_cast_efficiency`` of the streaming bandwidth on these bytes, fitted to
    torchao's rowwise linear microbenchmark (benchmarks/fit_float8.py; docs/model.md §C6.4).

    Returns:
        (bytes per cast element, bytes per rescaled element).
    """
    return (
        o.where(rowwise, _FP8_ROWWISE_CAST_BYTES / rowwise_cast_efficiency, _FP8_CAST_BYTES),
        o.where(rowwise, _FP8_RESCALE_BYTES / rowwise_cast_efficiency, 0.0),
    )


def _fp8_casts(i: Inputs, o: Any, rowwise_cast_efficiency: float) -> tuple[Any, Any]:
    """Bytes of a layer's FP8 casts per micro-batch, forward and backward: the four linear
    layers' inputs (forward) and output gradients (backward), each cast with its transpose;
    the weights cast once per step (cached over its micro-batches).

    Tensor-wise scaling (torchtitan's float8 TP styles, ``Float8ColwiseParallel``) casts the
    sequence-parallel shard before the TP all-gather. torchao's rowwise recipe (axiswise
    scales, ``fp8_recipe``; torchao/float8/config.py) takes no float8 TP style
    (torchtitan ``parallelize_llama``: "For rowwise recipes, we use regular TP and all-gather
    happens in high precision", ``enable_float8_tensorwise_tp``,
    https://github.com/pytorch/torchtitan/blob/main/torchtitan/models/llama3/parallelize_llama.py),
    so it casts the gathered tensor, along both axes; and its backward GEMMs (slow
    accumulation) run cuBLAS tensor-wise with unit scales and rescale their output in a
    kernel of their own (pytorch/ao PR #1325, https://github.com/pytorch/ao/pull/1325; issue
    #2184, https://github.com/pytorch/ao/issues/2184): their outputs are the shapes of the
    GEMM inputs (input gradient) and the weights (weight gradient)."""
    T, T_e, h, tp = i.T, i.T_e, i.h, i.tp
    rowwise = _rowwise(i)
    mlp = T * i.ffn / tp * i.topk
    gathered = o.where(rowwise, T, T_e)  # the column-parallel inputs, row-parallel out-grads
    inputs = 2 * gathered * h + T * i.a * i.d_h / tp + mlp
    grads = T * (i.a + 2 * i.kv) * i.d_h / tp + 2 * gathered * h + (i.mats - 1) * mlp
    weights = (h * (i.a + 2 * i.kv) * i.d_h + i.a * i.d_h * h + i.mats * h * i.ffn) / tp
    # cached for the step (Transformer Engine) or cast again every micro-batch (torchao)
    casts = o.where(i.x["fp8_weight_cache"] > 0, 1.0 / o.maximum(i.m, 1.0), 1.0)
    cast_B, rescale_B = fp8_operand_bytes(rowwise, rowwise_cast_efficiency, o)
    # MXFP8: one E8M0 scale byte per 32 elements for each of the two copies
    cast_B = cast_B + o.where(_mxfp8(i), _MXFP8_SCALE_BYTES, 0.0)
    return cast_B * (inputs + weights * casts), cast_B * grads + rescale_B * (inputs + weights)


class TensorComm(NamedTuple):
    """Tensor-parallel collectives of one activation tensor and a layer's exposed share."""

    all_reduce: Any
    all_gather: Any
    reduce_scatter: Any
    fwd: Any  #: exposed seconds, forward
    bwd: Any  #: exposed seconds, backward


def tensor_comm(i: Inputs, o: Any, gemms: LayerGemms) -> TensorComm:
    """Tensor (and sequence) parallel communication of a layer (docs/model.md §C3.1, §C3.2).

    Forward: 2 all-reduces (SP: 2 all-gathers + 2 reduce-scatters). Backward, as Megatron-LM's
    tensor_parallel layers issue it (``tp_async_backward``): the column-parallel GEMMs (QKV,
    fc1) all-reduce (SP: reduce-scatter) their input gradient asynchronously under their
    weight-gradient GEMM (since 2021-09), and with SP re-gather their input asynchronously
    under their input-gradient GEMM; with SP the row-parallel GEMMs (projection, fc2) must
    all-gather the output gradient before either GEMM starts (exposed). PyTorch's DTensor
    (torchtitan) waits on each collective before the op that uses it: all exposed.

    With overlap (``tp_comm_overlap``: Transformer Engine's userbuffers, PyTorch's async TP)
    a collective is decomposed into tp chunks with the GEMM that consumes or produces it
    (Wang et al., ASPLOS 2023; TorchTitan, arXiv 2410.06511 §2.3): forward, the all-gathers
    with QKV and fc1, the reduce-scatters with the projection's and fc2's outputs (no SP: the
    all-reduces); backward, the output-gradient all-gathers with the row-parallel
    input-gradient GEMMs, the column-parallel collectives as without overlap. (PyTorch's
    pass fuses an all-gather with the matmuls that take it as their left operand and a
    reduce-scatter of one matmul's output: the column-parallel input gradient is a sum of
    matmuls, so it is not fused; torch/_inductor/fx_passes/micro_pipeline_tp.py.)
    """
    sp, tp = i.sp, i.tp
    act_msg = i.T * i.h * i.p  # one activation tensor, nccl 'size' (§C3.1)
    ar = o.coll("all_reduce", act_msg, tp, i.st_tp, i.axes)
    ag = o.coll("all_gather", act_msg, tp, i.st_tp, i.axes)
    rs = o.coll("reduce_scatter", act_msg, tp, i.st_tp, i.axes)
    overlap = i.x["tp_comm_overlap"] > 0
    gather_overlap = overlap & o.not_(_rowwise(i))
    q, pr, up, dn = gemms.qkv, gemms.proj, gemms.up, gemms.down
    # the column-parallel backward: its input-gradient reduction (and SP re-gather) each
    # under the layer's other GEMM (Megatron), or waited on (DTensor)
    col_async = o.where(
        sp,
        o.maximum(ag - q.dgrad, 0.0) + o.maximum(ag - up.dgrad, 0.0)
        + o.maximum(rs - q.wgrad, 0.0) + o.maximum(rs - up.wgrad, 0.0),
        o.maximum(ar - q.wgrad, 0.0) + o.maximum(ar - up.wgrad, 0.0),
    )  # fmt: skip
    col = o.where(i.x["tp_async_backward"] > 0, col_async, o.where(sp, 2 * (ag + rs), 2 * ar))
    row_f, row_b = o.where(sp, 2 * rs, 2 * ar), o.where(sp, 2 * ag, 0.0)
    if o.any(overlap):
        row_f = o.where(
            overlap,
            o.where(
                sp,
                _decomposed(rs, pr.fwd, tp, o) + _decomposed(rs, dn.fwd, tp, o),
                _decomposed(ar, pr.fwd, tp, o) + _decomposed(ar, dn.fwd, tp, o),
            ),
            row_f,
        )
        row_b = o.where(
            gather_overlap & sp,
            _decomposed(ag, pr.dgrad, tp, o) + _decomposed(ag, dn.dgrad, tp, o),
            row_b,
        )
        col_f = o.where(
            gather_overlap, _decomposed(ag, q.fwd, tp, o) + _decomposed(ag, up.fwd, tp, o), 2 * ag
        )
    else:
        col_f = 2 * ag
    fwd = o.where(sp, col_f, 0.0) + row_f
    return TensorComm(all_reduce=ar, all_gather=ag, reduce_scatter=rs, fwd=fwd, bwd=col + row_b)


def _rowwise(i: Inputs) -> Any:
    """FP8 training with torchao's rowwise recipe (``fp8_recipe``), per row."""
    return (i.x["fp8_recipe"] == FP8_RECIPES.index("rowwise")) & i.fp8


def _mxfp8(i: Inputs) -> Any:
    """FP8 training with Transformer Engine's MXFP8 recipe (``fp8_recipe``), per row."""
    return (i.x["fp8_recipe"] == FP8_RECIPES.index("mxfp8")) & i.fp8


def _decomposed(comm: Any, gemm: Any, tp: Any, o: Any) -> Any:
    """Exposed seconds of a collective decomposed with its GEMM into tp chunks: the chunk on
    the local shard (all-gather) or the last chunk's send (reduce-scatter) cannot overlap,
    so the GEMM hides at most (tp − 1)/tp of itself (docs/model.md §C3.2)."""
    return o.maximum(comm - gemm * (1.0 - 1.0 / tp), 0.0)


class ContextComm(NamedTuple):
    """Exposed context-parallel seconds of a layer (K and V of the sequence, ring)."""

    fwd: Any
    bwd: Any


def context_comm(i: Inputs, o: Any, attn: Attention) -> ContextComm:
    """K and V of the whole sequence gathered over the context-parallel ring, overlapped with
    the chunk in hand (docs/model.md §C3.1, §C3.2). A tensor-parallel rank exchanges only its
    own K/V heads (kv/tp, at least one: heads replicate when tp exceeds them)."""
    kv_msg = 2 * i.mb * i.s * o.maximum(i.kv / i.tp, 1.0) * i.d_h * i.p
    cp_ag = o.coll("all_gather", kv_msg, i.cp, i.st_cp, i.axes)
    return ContextComm(
        fwd=o.maximum(cp_ag - attn.fwd, 0.0), bwd=o.maximum(2 * cp_ag - attn.bwd, 0.0)
    )


class ExpertComm(NamedTuple):
    """Expert-parallel all-to-alls of a layer (dispatch + combine), exposed by default."""

    fwd: Any
    bwd: Any


def expert_comm(i: Inputs, o: Any) -> ExpertComm:
    """Expert parallelism is carved out of data parallelism (contract): EP ranks are DP ranks;
    each token's hidden state goes to its top-k experts and back (docs/model.md §C3.2)."""
    a2a = o.where(i.moe, o.coll("all_to_all", i.T * i.topk * i.h * i.p, i.ep, i.st_dp, i.axes), 0.0)
    return ExpertComm(fwd=2 * a2a, bwd=2 * a2a)


def op_recompute(i: Inputs, o: Any, gemms: LayerGemms, tp: TensorComm) -> Any:
    """The GEMM and collective seconds a layer's backward re-runs under per-op selective
    checkpointing as torchtitan applies it (docs/model.md §C2.2).

    Its policy (``_apply_ac_to_transformer_block``, ``selective_ac_option = "op"``,
    torchtitan/models/llama3/parallelize_llama.py at 820504e; ``_get_default_save_ops`` in
    torchtitan/distributed/activation_checkpoint.py since) saves the attention kernel's output,
    reduce-scatters and every second ``mm`` of the block (wq, wv, w1, w2 of wq, wk, wv, wo,
    w1, w3, w2 in forward order) and recomputes the rest where the backward needs it: K (the
    attention's input), the up projection w3 (its output feeds the gated product and w2's
    input; a 2-matrix MLP's second matrix, fc2, is needed by no backward), and the output
    projection wo only without sequence parallelism (its output then rebuilds the residual
    stream the norm's backward reads; with SP its reduce-scatter output is saved). All-gathers
    are not saved: with SP the two that gather the QKV and MLP inputs run again (decomposed
    with the recomputed K and w3 GEMMs under async TP); without SP the all-reduce after wo."""
    wk = gemms.qkv.fwd * i.kv / (i.a + 2 * i.kv)
    w3 = o.where(i.x["swiglu"] > 0, 0.5 * gemms.up.fwd, 0.0)
    wo = o.where(i.sp, 0.0, gemms.proj.fwd)
    ag = tp.all_gather
    gathers = o.where(
        (i.x["tp_comm_overlap"] > 0) & o.not_(_rowwise(i)),
        _decomposed(ag, wk, i.tp, o) + _decomposed(ag, w3, i.tp, o),
        2 * ag,
    )
    return wk + w3 + wo + o.where(i.sp, gathers, tp.all_reduce)


class LayerTimes(NamedTuple):
    """One layer's seconds per micro-batch: the breakdown ``parts`` (sums to fwd + bwd)."""

    parts: dict[str, Any]
    fwd: Any
    bwd: Any


def layer_times(
    i: Inputs,
    o: Any,
    gemms: LayerGemms,
    attn: Attention,
    elem: Elementwise,
    tp: TensorComm,
    cp: ContextComm,
    ep: ExpertComm,
) -> LayerTimes:
    """A layer's breakdown per micro-batch. Full recompute re-runs the forward (its TP
    communication included; with ``recompute_num_layers`` on that share of the layers, the
    per-layer average); selective recompute re-runs the unfused attention core
    (docs/model.md §C1.2); per-op selective recompute every second matmul and the
    elementwise operations; keeping the weight matmuls' outputs (``selective_dots``) the
    attention core, the elementwise operations and the forward's TP collectives."""
    compute_f = gemms.fwd + attn.fwd + elem.fwd
    rc = i.rc
    # partial full recompute (recompute_num_layers): that share of the layers re-runs
    full = compute_f + tp.fwd
    full = o.where(i.x["recompute_num_layers"] > 0, full * recomputed_share(i, o), full)
    recompute = o.where(
        rc == FULL_RECOMPUTE,
        full,
        o.where((rc == SELECTIVE_RECOMPUTE) & o.not_(i.flash), attn.fwd, 0.0),
    )
    # per-op selective: the unsaved matmuls the backward needs, the elementwise ops and the
    # unsaved collectives run again (§C2.2)
    recompute = o.where(rc == OP_RECOMPUTE, op_recompute(i, o, gemms, tp) + elem.fwd, recompute)
    # weight-matmul outputs kept (JAX checkpoint_dots_with_no_batch_dims): the attention core,
    # the elementwise operations and the collectives that feed the matmuls run again
    recompute = o.where(rc == DOTS_RECOMPUTE, attn.fwd + elem.fwd + tp.fwd, recompute)
    parts = {
        "gemm": gemms.fwd + gemms.dgrad + gemms.wgrad,
        "attention": attn.fwd + attn.bwd,
        "elementwise": elem.fwd + elem.bwd,
        "recompute": recompute,
        "tensor_parallel_comm": tp.fwd + tp.bwd,
        "context_parallel_comm": cp.fwd + cp.bwd,
        "expert_parallel_comm": ep.fwd + ep.bwd,
    }
    fwd = compute_f + tp.fwd + cp.fwd + ep.fwd
    return LayerTimes(parts=parts, fwd=fwd, bwd=sum(parts.values()) - fwd)
