"""Memory per device: a named breakdown of what a training framework holds at its peak.

Model states (weights, master weights, gradients, optimizer states) of a pipeline stage,
sharded as ZeRO, Megatron's distributed optimizer or FSDP shard them (over data × context
parallel ranks); FSDP's unsharded layer buffers; FP8 weight caches; the activations in flight;
the logits and loss buffers; then what the framework and the driver add around the caching
allocator (workspace, fragmentation, CUDA context, NCCL buffers), each a calibration constant
with its provenance (``configs/calibration/frameworks.yaml``, ``memory``).

Formulas: ``docs/model.md`` §C2 (§C2.1 model states, §C2.2 activations per layer, §C2.3
micro-batches in flight, §C2.4 logits, §C2.5 framework and driver terms).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

import numpy as np
from numpy.typing import NDArray

from deepflow.config.calibration import MemoryCalibration
from deepflow.config.specs import PIPELINE_BALANCE_MODES
from deepflow.oracle.hardware import DeviceCaps
from deepflow.oracle.workloads.transformer.columns import (
    DOTS_RECOMPUTE,
    FULL_RECOMPUTE,
    OP_RECOMPUTE,
    SELECTIVE_RECOMPUTE,
)
from deepflow.oracle.workloads.transformer.data_parallel import StageParams
from deepflow.oracle.workloads.transformer.layer import LayerTimes
from deepflow.oracle.workloads.transformer.ops import ArrayOps
from deepflow.oracle.workloads.transformer.shapes import Inputs, params_per_layer, recomputed_share

__all__ = [
    "MEMORY_TERMS",
    "STAGES",
    "Memory",
    "activation_bytes_per_layer",
    "activation_offload",
    "memory",
    "stage_layers",
]

F = NDArray[np.float64]

#: Megatron's estimator adds 5 % to activations for temporaries (§C2.3).
_ACTIVATION_OVERHEAD = 1.05
#: Bytes per parameter of the 16-bit working weights, the fp32 master weights and Adam's two
#: fp32 moments (Rajbhandari et al. 2020 §3.1: mixed-precision Adam keeps 2 + 2 + 12 bytes).
_WEIGHT_B, _MASTER_B, _ADAM_B = 2.0, 4.0, 8.0
#: Master-weight bytes per parameter of each ``master_weights`` mode: a full fp32 copy 4, or
#: the 16 low bits of the fp32 value 2 (Apex ``DistributedFusedAdam(store_param_remainders=
#: True)``, which NeMo 1.x selects for a bf16 model with fp32 optimizer state:
#: nemo/collections/nlp/models/language_modeling/megatron_base_model.py, setup_optimization).
_MASTER_BYTES = (_MASTER_B, 2.0)
#: FSDP / ZeRO-3 prefetch: the unit being computed and the next one's gathered parameters
#: (Zhao et al. 2023 §3.3: at most two in-flight all-gathers; FSDP2 prefetches one unit):
#: the largest unit (a block, or the embedding) and one more block.
_FSDP_UNITS_IN_FLIGHT = 2.0
#: Peak loss buffers per logit of each ``cross_entropy`` mode (§C2.4): vocab-parallel (Megatron
#: ``vocab_parallel_cross_entropy``, megatron/core/tensor_parallel/cross_entropy.py: forward,
#: the 16-bit logits 2 and their fp32 copy 4, shifted, exponentiated and normalised in place;
#: backward, that fp32 softmax turned into the gradient in place 4 and its 16-bit cast 2, the
#: 16-bit logits gone with the model's forward), unfused (PyTorch ``cross_entropy`` on an fp32
#: copy: logits 2 + saved log-softmax 4 + in backward its incoming and outgoing fp32 gradients
#: 4 + 4), fused (gradient written into the 16-bit logits: 2), vocab-parallel on the fp32 logits
#: the model returns (nanotron's ``cast_to_fp32`` then ``sharded_cross_entropy``, whose shift
#: ``sharded_logits - logits_max`` is a new tensor: 4 + 4).
_LOSS_BYTES_PER_LOGIT = (6.0, 14.0, 2.0, 8.0)
#: Transformer Engine keeps an FP8 copy of each weight, cast once per step and cached across
#: its micro-batches (TE ``Linear`` ``is_first_microbatch``; §C2.1); torchao's Float8Linear
#: casts per use (``fp8_weight_cache`` false).
_FP8_WEIGHT_CACHE_B = 1.0
#: DeepSpeed's ZeRO-3 gathers module by module and keeps at most ``stage3_max_live_parameters``
#: gathered (default 1e9 elements; DeepSpeed configuration docs, ZeRO section; §C2.1).
_DEEPSPEED_MAX_LIVE_PARAMS = 1e9
#: The ``pipeline_balance`` code of nanotron's compute-balanced stages.
_COMPUTE_BALANCED = float(PIPELINE_BALANCE_MODES.index("compute"))


def activation_bytes_per_layer(x: Mapping[str, Any]) -> F:
    """Activation bytes one layer keeps for backward, per micro-batch (16-bit, 1-byte masks).

    Korthikanti et al. 2022 §4 (docs/model.md §C2.2): s·b·h·(34 + 5·a·s/h) without
    parallelism; with tensor parallelism t the 24 + 5·a·s/h part is split and 10 is not; with
    sequence parallelism everything is split; selective recompute drops the 5·a·s/h score
    terms; full recompute keeps only the layer input 2·s·b·h (÷t with SP). Adjusted (§C2.2):
    GQA shrinks K and V by g = kv/a; SwiGLU's MLP keeps 6F/h instead of 4F/h; no dropout drops
    the masks and the dropout outputs; fused (flash) attention keeps only fp32 log-sum-exp
    (4·a·s·b) instead of the s² terms; context parallelism shortens s to s/c; FP8 linear
    layers (``fp8`` 1) keep their four GEMM inputs in one byte; an unfused SwiGLU
    (``fused_swiglu`` 0) keeps its SiLU output too. Per-op selective recompute
    (code 3) keeps the layer input, the attention output and every second matmul's output.
    """
    arrays = {k: np.asarray(v, dtype=float) for k, v in x.items()}
    arrays.setdefault("head_dim", np.asarray(0.0))  # 0: hidden / heads
    arrays.setdefault("fused_swiglu", np.asarray(1.0))
    fp8 = arrays.pop("fp8", np.asarray(0.0)) > 0
    return np.asarray(_activation_bytes(arrays, ArrayOps, fp8=fp8), dtype=float)


def _activation_bytes(x: Mapping[str, Any], o: Any, recompute: Any = None, fp8: Any = False) -> Any:
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
    # attention width over hidden: 1 unless the model states a wider (or narrower) head_dim
    w = o.where(x["head_dim"] > 0, a * x["head_dim"] / h, 1.0)
    f_h = x["ffn_hidden_size"] / h
    # FP8 GEMM inputs kept in 1 byte (TE Linear saves its FP8 cast): QKV and fc1 inputs
    # (unsplit) 1 each, projection input 1 and fc2 input F/h (split) (§C2.2)
    fp8_unsplit = o.where(fp8, 2.0, 0.0)
    fp8_split = o.where(fp8, w + f_h, 0.0)
    # split by t: Q 2, K 2g, V 2g, projection input 2 (× w), MLP inputs 2·(mats)·F/h (GeLU 16)
    split = 2 * w + 4 * g * w + 2 * w + 2 * mats * f_h - fp8_split
    # an unfused SwiGLU (nanotron's GLUActivation: act(gate) * up in eager PyTorch) also keeps
    # the SiLU output, 2F/h, which a fused kernel recomputes in backward (Megatron-Core's
    # bias_swiglu_fusion saves only its input)
    unfused_glu = (x["swiglu"] > 0) & (x["fused_swiglu"] <= 0)
    split = split + o.where(unfused_glu, 2.0 * f_h, 0.0)
    # not split without SP: 2 LayerNorm inputs 4, QKV and fc1 inputs 2 + 2, dropout masks 2
    unsplit = 4 + 2 + 2 + 2 * dropout - fp8_unsplit
    per_sbh = o.where(sp, (split + unsplit) / tp, unsplit + split / tp)
    # score terms: softmax output 2, dropout mask 1 and output 2 per a·s²·b, split by t
    scores = (2 + 3 * dropout) * a * s_loc * s * mb / tp
    scores = o.where(flash, 4 * a * s_loc * mb / tp, scores)
    scores = o.where((rc == SELECTIVE_RECOMPUTE) & o.not_(flash), 0.0, scores)
    kept = sbh * per_sbh + scores
    full = 2 * sbh / o.where(sp, tp, 1.0)
    # per-op selective (PyTorch SAC as in torchtitan's _apply_ac_to_transformer_block): the
    # layer input 2, the attention output 2 (+ fp32 log-sum-exp) and every second matmul's
    # output (Q 2, V 2g, MLP up 2F/h, MLP down 2), 16-bit, split by t
    ops = sbh * (2 + 2 * w + 2 * w + 2 * g * w + 2 * f_h + 2) / tp + 4 * a * s_loc * mb / tp
    # weight-matmul outputs (JAX checkpoint_dots_with_no_batch_dims, MaxText remat_policy
    # minimal): the layer input 2 (the scanned layer's carry), Q 2, K 2g, V 2g, the projection
    # 2, the MLP up projection(s) 2(mats - 1)F/h and down projection 2, 16-bit, split by t;
    # the attention core is recomputed, so no log-sum-exp is kept
    dots = sbh * (2 + 2 * w + 4 * g * w + 2 + 2 * (mats - 1) * f_h + 2) / tp
    return o.where(
        rc == FULL_RECOMPUTE,
        full,
        o.where(rc == OP_RECOMPUTE, ops, o.where(rc == DOTS_RECOMPUTE, dots, kept)),
    )


#: The breakdown's terms, in order: what the caching allocator holds (the first nine), then
#: what lies around it (fragmentation, freed blocks it holds for a stream, CUDA context and
#: NCCL buffers).
MEMORY_TERMS = (
    "weights",
    "master_weights",
    "gradients",
    "optimizer_states",
    "fsdp_buffers",
    "fp8_weight_cache",
    "activations",
    "logits",
    "workspace",
    "fragmentation",
    "recorded_blocks",
    "cuda_context",
    "nccl_buffers",
)
#: Terms the PyTorch caching allocator tracks (``torch.cuda.max_memory_allocated``).
ALLOCATED_TERMS = MEMORY_TERMS[:9]


class Memory(NamedTuple):
    """Bytes per device at the peak stage (the larger of the first and the last stage)."""

    terms: dict[str, Any]  #: every name of :data:`MEMORY_TERMS`
    allocated: Any  #: the allocator's peak (``max_memory_allocated``)
    reserved: Any  #: with the allocator's fragmentation (``max_memory_reserved``)
    total: Any  #: with the CUDA context and NCCL buffers: what must fit the device


def activation_offload(i: Inputs, o: Any, caps: DeviceCaps, layer: LayerTimes) -> LayerTimes:
    """``layer`` with the exposed seconds of activation offload (``activation_offload``; docs/
    model.md §C2.3): ``activation_offload_layers`` of a stage's layers copy their saved
    activations to host memory after their forward and back before their backward.
    Transformer Engine's offload handler overlaps each copy with the next layer's compute and
    waits for it before going on (Megatron-Core ``--cpu-offloading-num-layers``; TE
    ``get_cpu_offload_context``), so a layer whose copy takes longer than a layer's forward
    (device to host) or backward (host to device) exposes the difference. The copies run at
    the device's host link rates while every device of the node copies (``host_to_device_GBps``,
    ``device_to_host_GBps``); per layer here as the stage's offloaded share."""
    off = i.x["activation_offload_layers"]
    if not o.any(off > 0):
        return LayerTimes(parts={**layer.parts, "activation_offload": 0.0 * off},
                          fwd=layer.fwd, bwd=layer.bwd)  # fmt: skip
    act = _activation_bytes(i.x, o, fp8=i.fp8)
    out = o.maximum(act / caps.device_to_host_Bps - layer.fwd, 0.0)
    back = o.maximum(act / caps.host_to_device_Bps - layer.bwd, 0.0)
    share = o.minimum(off, i.layers_stage) / o.maximum(i.layers_stage, 1.0)
    exposed = o.where(off > 0, share * (out + back), 0.0)
    return LayerTimes(parts={**layer.parts, "activation_offload": exposed},
                      fwd=layer.fwd + share * out, bwd=layer.bwd + share * back)  # fmt: skip


def stage_layers(i: Inputs, o: Any) -> tuple[Any, Any]:
    """Layers of the first and of the last pipeline stage (docs/model.md §C2.3).

    Even stages (``pipeline_balance`` layers): ceil(L/p) each; with the embedding and the output
    layer in a layer's slot each (``ends_as_layers``), ceil((L + 2)/p) − 1 at either end.
    Compute-balanced stages
    (nanotron ``build_model``, src/nanotron/models/base.py): the blocks in order, a decoder
    layer costing 4·a·d·h + mats·F·h and the output layer V·h
    (``LlamaForTraining.get_block_compute_costs``), each block goes to the current rank, which
    hands over once the cumulative cost exceeds its threshold (r+1)/p of the total: the first
    ⌊t/c⌋ + 1 layers go to rank 0 (t = total/p), and the last rank keeps what ranks 0..p−2 leave.
    """
    c = 4.0 * i.a * i.d_h * i.h + i.mats * i.ffn * i.h
    t = (i.L * c + i.vocab * i.h) / i.pp
    # floor(x) + 1 as 1 - ceil(-x): the layers up to and including the one that crosses t
    first = o.minimum(1.0 - o.ceil(-t / c), i.L)
    before_last = o.minimum(1.0 - o.ceil(-(i.pp - 1) * t / c), i.L)
    last = o.where(i.pp > 1, o.maximum(i.L - before_last, 0.0), i.L)
    compute_balanced = i.x["pipeline_balance"] == _COMPUTE_BALANCED
    return (o.where(compute_balanced, first, i.layers_ends),
            o.where(compute_balanced, last, i.layers_ends))  # fmt: skip


def recorded_tp_blocks(
    i: Inputs, o: Any, first_layers: Any, last_layers: Any, last_is_peak: Any, free: Any,
    ahead: float,
) -> Any:  # fmt: skip
    """Blocks the caching allocator holds for NCCL's stream in the backward (docs/model.md
    §C2.5, ``recorded_tp_gradients``): with sequence parallelism, nanotron's column-parallel
    linears (QKV and the MLP's up projection) compute their input gradient at full sequence
    length, s·b·h, and reduce-scatter it asynchronously (``_ColumnLinearAsyncCommunication.
    backward``: ``dist.reduce_scatter_tensor(..., async_op=True)``), whose tensors PyTorch's
    ProcessGroupNCCL records on its stream (only synchronous collectives skip it:
    ``avoidRecordStreams = avoidRecordStreams_ || !opts.asyncOp``), so a freed gradient's
    block is not reused until the GPU has run the collective (``Tensor.record_stream``). The
    autograd thread enqueues the stage's backward ahead of the GPU, two such blocks a layer
    for the ``ahead`` layers it leads by (``recorded_layers_ahead``, fitted by
    benchmarks/fit_memory.py), up to the memory the device has left: there a failed
    ``cudaMalloc`` makes the allocator wait for those collectives and free their blocks
    (``release_cached_blocks`` -> ``synchronize_and_free_events``), so they are reserved
    memory, never a reason not to fit.
    """
    layers = o.minimum(o.where(last_is_peak, last_layers, first_layers), ahead)
    full = 2.0 * i.s_loc * i.mb * i.h * i.p
    on = (i.x["recorded_tp_gradients"] > 0) & (i.tp > 1) & i.sp
    return o.where(on, o.minimum(layers * full, o.maximum(free, 0.0)), 0.0)


#: Which pipeline stage :func:`memory` counts: the peak one, or the first or last stage.
STAGES = ("peak", "first", "last")


def memory(
    i: Inputs, o: Any, params: StageParams, cal: MemoryCalibration, stage: str = "peak"
) -> Memory:
    """Peak memory of a device and its breakdown (docs/model.md §C2).

    Model states (§C2.1) per parameter of the stage, sharded over D = data × context parallel
    ranks (Megatron-Core's distributed optimizer and torchtitan's FSDP mesh both include the
    context-parallel ranks): 16-bit weights 2 (÷D at ZeRO-3), fp32 master weights 4 (÷D from
    ZeRO-1; 2 as Apex's 16-bit remainders), gradients 4 as fp32 main gradients (Megatron) or 2
    in the 16-bit reduce dtype (÷D from ZeRO-2), Adam moments 8 (÷D from ZeRO-1): 18, 6 + 12/D,
    2 + 16/D, 16/D with fp32 main gradients; 16, 4 + 12/D, 2 + 14/D, 16/D without (ZeRO paper
    §5). ZeRO-3/FSDP also gathers the computed and the prefetched unit's weights and holds one
    unit's unsharded gradients. Activations: 1F1B holds on stage 0 p micro-batches of L/p layers
    = L layers; interleaving adds (p − 1)/(p·v) (§C2.3); fewer micro-batches than stages scale
    it by m/p; full recompute re-materialises one layer at a time. nanotron's fp32 gradient
    accumulator adds the 16-bit ``.grad`` (2) and, with data parallelism, DDP's 16-bit
    buckets (2) or, under ZeRO-1, the optimizer step's gather buffers (2 + 2/D, on top of
    the backward's cached blocks where the device holds both, else in the memory the backward
    freed) to its unsharded fp32 buffer; its compute-balanced stages give the first stage
    more layers (:func:`stage_layers`).
    """
    # ZeRO shards over the data × context ranks of one hybrid-sharding replica (all of them
    # without HSDP, data_parallel_replicas 1; §C3.2)
    dp_cp = i.dp_sh * i.cp
    zero = i.zero
    grad_b = o.where(i.x["fp32_main_grads"] > 0, 4.0, 2.0)
    fp8 = i.fp8
    shard_w = o.where(zero >= 3, dp_cp, 1.0)
    shard_opt = o.where(zero >= 1, dp_cp, 1.0)
    shard_g = o.where(zero >= 2, dp_cp, 1.0)
    # ZeRO-3: 16/D whatever the gradient dtype (DeepSpeed 2 + 2 + 12; FSDP fp32 4 + 4 + 8)
    grad_b = o.where(zero >= 3, 2.0, grad_b)
    layer = params_per_layer(i.x, o) / i.tp
    # compute-balanced or ends-as-layers stages: the end stages' own layer counts
    uneven = i.x["pipeline_balance"] > 0
    first_layers, last_layers = stage_layers(i, o)
    # the stage's parameters with its own layers (the same for both ends with even stages)
    n_first = params.stage + (first_layers - i.layers_stage) * layer
    n_last = params.stage + (last_layers - i.layers_stage) * layer
    unit = o.maximum(layer, params.embedding / i.tp)  # the largest unit: a block or the embedding
    # FSDP: the computed and the prefetched block's 16-bit weights, one block's fp32
    # gradients; DeepSpeed 2021 (ZeRO-3 without overlap): module by module, 16-bit weights
    # and gradients of at most max-live parameters
    in_flight = unit + (_FSDP_UNITS_IN_FLIGHT - 1) * layer
    fsdp_units = in_flight * _WEIGHT_B + unit * 4.0
    deepspeed = o.minimum(in_flight, _DEEPSPEED_MAX_LIVE_PARAMS) * 4.0
    blocking = i.x["overlap_grad_reduce"] <= 0
    # a compiled program (XLA, cal.buffer_lifetime): each weight is its own parameter array,
    # cast to the 16-bit compute dtype before its einsum (MaxText layers/linears.py,
    # DenseGeneral: ``jnp.asarray(kernel, self.dtype)``), so the SPMD partitioner gathers it
    # alone and its transpose reduce-scatters the 16-bit gradient as soon as it is produced;
    # buffer assignment frees each at its last use (https://openxla.org/xla/architecture):
    # the largest weight being computed on, the next one prefetched by the latency-hiding
    # scheduler, and the gradient of the first, 16-bit each
    compiled = cal.buffer_lifetime == "compiled_program"
    if compiled:
        largest = o.maximum(o.maximum(i.h * i.a * i.d_h, i.h * i.ffn), params.embedding) / i.tp
        fsdp_units = 3.0 * _WEIGHT_B * largest + 0.0 * in_flight
    fsdp = o.where((zero >= 3) & (dp_cp > 1), o.where(blocking, deepspeed, fsdp_units), 0.0)
    # FP8 parameters (Transformer Engine's fp8_model_init; Megatron-Core fp8_param_gather): the
    # working weights are the FP8 copy itself, 1 byte, and nothing is cached besides them
    fp8_params = fp8 & (i.x["fp8_params"] > 0)
    weight_b = o.where(fp8_params, _FP8_WEIGHT_CACHE_B, _WEIGHT_B)
    cached = fp8 & (zero < 3) & (i.x["fp8_weight_cache"] > 0) & o.not_(fp8_params)
    master_b = o.choose(i.x["master_weights"], _MASTER_BYTES)
    # nanotron's FP32GradientAccumulator (src/nanotron/optim/gradient_accumulator.py): fp32
    # buffers of every parameter, ZeRO-1 or not (grad_buckets_named_params). With data
    # parallelism and ZeRO-0 PyTorch DDP also holds 16-bit buckets as large as the gradients
    # (trainer.py init_model: make_ddp = dp > 1 and not (accumulate_grad_in_fp32 and
    # zero_stage > 0); gradient_as_bucket_view is off by default:
    # https://pytorch.org/docs/stable/generated/torch.nn.parallel.DistributedDataParallel.html).
    # Under ZeRO-1 there is no DDP; instead the optimizer step all-gathers the updated
    # parameters through flattened 16-bit copies of every rank's slices and of its own
    # (optim/zero.py _all_gather_params -> distributed.py all_gather_coalesced:
    # _flatten_dense_tensors), 2·(1 + 1/D) bytes a parameter, allocated after the backward:
    # the caching allocator keeps the backward's blocks, so they add to the reserved peak
    accumulator = i.x["gradient_buffers"] > 0
    gathered = _WEIGHT_B * (1.0 + 1.0 / o.maximum(dp_cp, 1.0))
    # DDP's buckets live through the step; ZeRO-1's gather buffers only after the backward
    grad16_b = o.where(accumulator & (i.dp > 1) & (zero < 1), _WEIGHT_B, 0.0)
    after_b = o.where(accumulator & (i.dp > 1) & (zero >= 1), gathered, 0.0)

    layer_act = _activation_bytes(i.x, o, fp8=fp8)
    full = (i.rc == FULL_RECOMPUTE) | (i.rc == OP_RECOMPUTE) | (i.rc == DOTS_RECOMPUTE)
    plain_act = _activation_bytes(i.x, o, recompute=0.0 * i.rc, fp8=fp8) if o.any(full) else 0.0
    # partial full recompute (recompute_num_layers): the other layers keep all activations
    partial = (i.rc == FULL_RECOMPUTE) & (i.x["recompute_num_layers"] > 0)
    if o.any(partial):
        share = recomputed_share(i, o)
        layer_act = o.where(partial, share * layer_act + (1.0 - share) * plain_act, layer_act)
    interleave = o.where(i.v > 1, 1 + (i.pp - 1) / (i.pp * i.v), 1.0)
    held = o.minimum(i.m, i.pp)
    # 1F1B: the first stage holds min(m, p) micro-batches of its layers (L/p when even)
    first_mb_layers = o.where(uneven, first_layers * held * interleave,
                              i.L * (held / i.pp * interleave))  # fmt: skip
    act = first_mb_layers * layer_act
    last_act = last_layers * o.minimum(i.m, 1.0)
    # interleaved 1F1B: the last rank warms up (v − 1)·p chunks of ⌈L/p⌉/v layers before its
    # first backward (Megatron-Core pipeline_parallel/schedules.py,
    # forward_backward_pipelining_with_interleaving: num_warmup_microbatches)
    last_chunks = o.minimum((i.v - 1.0) * i.pp + 1.0, i.m * i.v)
    last_act = o.where(i.v > 1, last_chunks * (i.layers_stage / i.v), last_act) * layer_act
    # activation offload (Megatron-Core --cpu-offloading-num-layers N, Megatron-Bridge
    # cpu_offloading_num_layers: https://docs.nvidia.com/nemo/megatron-bridge/latest/training/
    # cpu-offloading.html): N of a stage's layers keep their activations in host memory, one
    # more layer's in flight on the device while it is copied out or back (Transformer
    # Engine's asynchronous offload handler overlaps the copies with the next layer)
    off = i.x["activation_offload_layers"]
    if o.any(off > 0):
        first_n, last_n = first_layers, last_layers
        # (offloading every layer still holds the one in flight)
        first_keep = o.minimum((o.maximum(first_n - off, 0.0) + 1.0) / o.maximum(first_n, 1.0), 1.0)
        last_keep = o.minimum((o.maximum(last_n - off, 0.0) + 1.0) / o.maximum(last_n, 1.0), 1.0)
        act = o.where(off > 0, act * first_keep, act)
        last_act = o.where(off > 0, last_act * last_keep, last_act)
    remat = o.where(full, plain_act, 0.0) if o.any(full) else 0.0
    act = act + remat  # one layer re-materialised at a time in backward
    logit_b = o.choose(i.x["cross_entropy"], _LOSS_BYTES_PER_LOGIT)
    logits = logit_b * i.logits
    first_logits = o.where(i.pp == 1, logits, 0.0)
    if compiled:
        # the loss buffers die (last use: the output layer's backward) before the first
        # layer is re-materialised, and buffer assignment gives both the same memory: only
        # what exceeds the re-materialised layer adds to the peak
        first_logits = o.maximum(first_logits - _ACTIVATION_OVERHEAD * remat, 0.0)
    first_act = _ACTIVATION_OVERHEAD * act + first_logits
    last_total_act = _ACTIVATION_OVERHEAD * last_act + logits
    # the model states per parameter; the two ends differ only in their layers' states
    state_b = (weight_b / shard_w + master_b / shard_opt + grad_b / shard_g
               + _ADAM_B / shard_opt + grad16_b + after_b)  # fmt: skip
    last_is_peak = (i.pp > 1) & (last_total_act - first_act > state_b * (n_first - n_last))
    if stage != "peak":  # the stage a source measured on (its rank)
        last_is_peak = (i.pp > 1) & (stage == "last")
    n = o.where(last_is_peak, n_last, n_first)
    fp8_cache = o.where(cached, _FP8_WEIGHT_CACHE_B * n, 0.0)
    activations = _ACTIVATION_OVERHEAD * o.where(last_is_peak, last_act, act)
    # the accumulator's 16-bit ``.grad`` of one backward (added into the fp32 buffer, then
    # freed: FP32GradientAccumulator._accumulate_grad) fills as that micro-batch's
    # activations are freed: only what exceeds them adds to the peak
    one_mb = activations / o.where(last_is_peak, 1.0, o.maximum(held, 1.0))
    grad16 = o.where(accumulator, o.maximum(_WEIGHT_B * n - one_mb, 0.0), 0.0)
    terms: dict[str, Any] = {
        "weights": weight_b * n / shard_w,
        "master_weights": master_b * n / shard_opt,
        "gradients": grad_b * n / shard_g + grad16_b * n + grad16,
        "optimizer_states": _ADAM_B * n / shard_opt,
        "fsdp_buffers": fsdp,
        "fp8_weight_cache": fp8_cache,
        "activations": activations,
        "logits": o.where(last_is_peak, logits, first_logits),
        "workspace": cal.workspace_B + 0.0 * n,
    }
    # the optimizer step's buffers, allocated once the backward has freed its activations:
    # on the cached blocks the allocator keeps, unless the device cannot hold both, when a
    # failed cudaMalloc makes it release its free cached blocks and retry (PyTorch
    # c10/cuda/CUDACachingAllocator.cpp, DeviceCachingAllocator::malloc), so the buffers add
    # only what exceeds the memory the backward freed
    after = after_b * n
    # NCCL's buffers belong to communicators with peers: a run on one device opens none
    nccl = o.where(i.tp * i.pp * i.dp * i.cp > 1, cal.nccl_buffers_B, 0.0) + 0.0 * n
    around = cal.cuda_context_B + nccl  # outside the allocator
    with_cache = (sum(terms.values()) + after) * (1.0 + cal.fragmentation) + around
    freed = terms["activations"] + terms["logits"] + grad16
    fits = with_cache <= o.caps.hbm_capacity_B
    terms["gradients"] = terms["gradients"] + o.where(fits, after, o.maximum(after - freed, 0.0))
    allocated = sum(terms.values())
    terms["fragmentation"] = cal.fragmentation * allocated
    terms["recorded_blocks"] = recorded_tp_blocks(
        i, o, first_layers, last_layers, last_is_peak,
        free=o.caps.hbm_capacity_B - (allocated + terms["fragmentation"] + around),
        ahead=cal.recorded_layers_ahead,
    )  # fmt: skip
    terms["cuda_context"] = cal.cuda_context_B + 0.0 * n
    terms["nccl_buffers"] = nccl
    reserved = allocated + terms["fragmentation"] + terms["recorded_blocks"]
    total = reserved + terms["cuda_context"] + terms["nccl_buffers"]
    return Memory(terms=terms, allocated=allocated, reserved=reserved, total=total)
