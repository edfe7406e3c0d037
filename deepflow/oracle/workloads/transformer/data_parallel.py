"""Data parallelism and the optimizer: a stage's parameters, gradient synchronisation under
plain data parallelism, ZeRO-1/2 (distributed optimizer) and ZeRO-3/FSDP, PyTorch FSDP's
copies beside its collectives, gradient accumulation outside the weight-gradient GEMM, the
Adam step, and the tied-embedding sync between the first and last stage.

Formulas: ``docs/model.md`` §C2.1 (bytes per parameter), §C3.1–§C3.3 (volumes, overlap, FSDP's
copies), §C6.3 (the accumulation's and the optimizer's memory-bound passes).
"""

from __future__ import annotations

from typing import Any, NamedTuple

from deepflow.config.calibration import Calibration
from deepflow.config.mapping import KNOB
from deepflow.oracle.workloads.transformer.columns import FULL_RECOMPUTE
from deepflow.oracle.workloads.transformer.layer import (
    Attention,
    Elementwise,
    LayerGemms,
    LayerTimes,
)
from deepflow.oracle.workloads.transformer.shapes import Inputs, params_per_layer, recomputed_share

__all__ = [
    "StageParams",
    "data_parallel_comm",
    "embedding_sync",
    "fsdp_copies",
    "grad_accumulation",
    "optimizer",
    "stage_params",
]

#: Adam step bytes per locally optimised parameter: read 16 B, write 14 B (§C6.3).
_ADAM_BYTES = 30.0
_ADAM_FLOPS = 11.0  # Calculon: 11 FLOPs per parameter (§C6.3)
#: Gradient-norm pass before the step (clipping): read the 4-byte main gradient (§C6.3).
_GRAD_NORM_BYTES = 4.0
#: The ``fsdp_implementation`` column's code of each implementation.
_FSDP = KNOB["fsdp_implementation"].codes
#: The ``grad_accumulation`` column's code of the unfused fp32 accumulation.
_UNFUSED_FP32 = KNOB["grad_accumulation"].codes["unfused_fp32"]
#: Bytes of the unfused fp32 accumulation per gradient element beside the 16-bit gradient it
#: reads: read and write the fp32 sum (§C6.3).
_FP32_SUM_BYTES = 8.0


class StageParams(NamedTuple):
    """Parameters of one pipeline stage on one tensor/expert-parallel rank."""

    stage: Any  #: elements held by the stage's rank (its layers, plus embeddings at the ends)
    embedding: Any  #: elements of the (tied) embedding, vocab × h
    grad_bytes: Any  #: bytes per gradient element: fp32 main grads (Megatron), bf16 (FSDP)


def stage_params(i: Inputs, o: Any) -> StageParams:
    """A stage's parameters: dense weights split by TP, experts by EP (docs/model.md §C2.1)."""
    h, ffn, experts, moe = i.h, i.ffn, i.experts, i.moe
    emb_params = i.vocab * h
    dense_layer_params = params_per_layer(i.x, o) - o.where(moe, i.mats * h * ffn * experts, 0.0)
    expert_params = o.where(moe, i.mats * h * ffn * experts / i.ep, 0.0)
    stage_layer_params = i.layers_stage * (dense_layer_params + expert_params) / i.tp
    # the input embedding and the output layer: one matrix each, or one for both where they
    # are tied on a single stage; pipeline stages hold one at either end (a tied model's last
    # stage its own copy of the shared weight: Megatron-Core LanguageModule,
    # setup_embeddings_and_output_layer)
    ends = o.where((i.pp == 1) & o.not_(i.tied), 2.0, 1.0)
    stage = stage_layer_params + ends * emb_params / i.tp
    # fp32 main grads (Megatron); FSDP reduce-scatters in 16 bits, or in fp32 where its mixed
    # precision's reduce_dtype says so (§C2.1, §C3.3)
    fsdp_grad = o.where(i.x["fsdp_reduce_fp32"] > 0, 4.0, i.p)
    grad_bytes = o.where(i.zero >= 3, fsdp_grad, 4.0)
    return StageParams(stage=stage, embedding=emb_params, grad_bytes=grad_bytes)


def data_parallel_comm(
    i: Inputs,
    o: Any,
    params: StageParams,
    layer: LayerTimes,
    calibration: Calibration,
    modules: tuple[LayerGemms, Attention, Elementwise],
) -> Any:
    """Exposed data-parallel seconds of a step.

    Plain data parallelism all-reduces the gradients once per step; ZeRO-1/2 (distributed
    optimizer) reduce-scatters them and all-gathers the updated parameters; with
    ``overlap_grad_reduce`` they hide under the last micro-batch's backward (gathers under its
    forward), chunk by chunk where the stage holds v interleaved model chunks
    (:func:`_chunked_exposed`). ZeRO-3/FSDP: parameters gathered for forward and backward and
    gradients reduce-scattered every micro-batch, prefetched under compute; the first gather
    and last reduce-scatter of a layer unit stay exposed (§C3.1, §C3.2). With hybrid
    sharding (``data_parallel_replicas`` r) ZeRO's collectives run inside a replica of dp/r
    ranks and each reduce-scatter is followed by the replicas' all-reduce of the shard.
    ``calibration`` gives the framework rate and ``modules`` the layer's kernels, both read
    only where DeepSpeed 2021's ZeRO-3 applies (it overlaps module by module).
    """
    dp, st_dp, m, sh = i.dp, i.st_dp, i.m, i.dp_sh
    grads = params.stage * params.grad_bytes
    # the updated parameters travel in FP8 where the weights are FP8 (fp8_param_gather)
    params_b = params.stage * o.where(i.fp8 & (i.x["fp8_params"] > 0), 1.0, i.p)
    ar_dp = o.coll("all_reduce", grads, dp, st_dp, i.axes)
    # ZeRO's collectives run over one replica's sh contiguous ranks; hybrid sharding (HSDP)
    # then all-reduces each rank's gradient shard across the replicas (stride: a replica)
    rs_dp = o.coll("reduce_scatter", grads, sh, st_dp, i.axes)
    ag_dp = o.coll("all_gather", params_b, sh, st_dp, i.axes)
    ar_rep = o.coll("all_reduce", grads / sh, i.dp_rep, st_dp * sh, i.axes)  # 0: one replica
    t_f_stage = i.layers_stage * layer.fwd
    t_b_stage = i.layers_stage * layer.bwd
    overlap = i.x["overlap_grad_reduce"] > 0
    plain = o.where(overlap, o.maximum(ar_dp - t_b_stage, 0.0), ar_dp)
    dist = o.where(
        overlap,
        _chunked_exposed(o, rs_dp + ar_rep, t_b_stage, i.v, i.pp)
        + _chunked_exposed(o, ag_dp, t_f_stage, i.v, i.pp),
        rs_dp + ar_rep + ag_dp,
    )
    reduce = rs_dp + ar_rep  # a unit's gradients: reduce-scattered, then across replicas
    per_mb = o.maximum(ag_dp - t_f_stage, 0.0) + o.maximum(ag_dp + reduce - t_b_stage, 0.0)
    zero3 = m * per_mb + (ag_dp + reduce) / o.maximum(i.layers_stage, 1.0)
    sync = (i.zero >= 3) & o.not_(overlap) & (dp > 1)
    if o.any(sync):
        rate = calibration.framework.deepspeed_zero3_2021_rate_Bps
        ds = _zero3_deepspeed_2021(i, o, params, modules, rate) + m * ar_rep
        zero3 = o.where(sync, ds, zero3)
    sharded = o.where(i.zero >= 3, zero3, o.where(i.zero >= 1, dist, plain))
    return o.where(dp > 1, sharded, 0.0)


def _chunked_exposed(o: Any, comm: Any, compute: Any, v: Any, pp: Any) -> Any:
    """Exposed seconds of a distributed optimizer's gradient reduce-scatter (``compute``:
    one micro-batch's backward through the stage) or parameter all-gather (its forward) of
    ``comm`` seconds, overlapped model chunk by model chunk (docs/model.md §C3.2).

    Megatron-Core's interleaved 1F1B launches a chunk's gradient synchronisation with that
    chunk's last micro-batch backward (``schedules.py``,
    ``forward_backward_pipelining_with_interleaving``: ``enable_grad_sync()`` where
    ``is_last_microbatch_for_model_chunk``), and its parameter all-gather for the next step
    as the chunk before it starts its first forward (``param_sync_func`` per chunk). The
    cool-down runs each chunk's backward for the last pp micro-batches in turn, so the v
    chunks' grads are final pp·t_c apart (t_c = ``compute`` / v, a chunk's share) and their
    reductions, comm / v each, queue on the links: the last finishes max(comm / v − t_c,
    comm − ((v − 1)·pp + 1)·t_c) after the backward ends. One chunk (v = 1) leaves
    comm − ``compute`` (buckets reduced as the last backward frees them); the forward's
    gathers mirror it."""
    v = o.maximum(v, 1.0)
    chunk = compute / v
    last = comm / v - chunk
    queued = comm - ((v - 1.0) * pp + 1.0) * chunk
    return o.maximum(o.maximum(last, queued), 0.0)


def _zero3_deepspeed_2021(
    i: Inputs,
    o: Any,
    params: StageParams,
    modules: tuple[LayerGemms, Attention, Elementwise],
    rate_Bps: float,
) -> Any:
    """DeepSpeed's ZeRO-3 of early 2021 (v0.3.13-v0.3.16, stage3.py; docs/model.md §C3.2):
    module by module. Before a module runs, its parameters are waited for and the device
    synchronised (``fetch_sub_module``: every all_gather synchronised, DeepSpeed PR #1188,
    issue #1069); then the next module's are prefetched (``prefetch_next_sub_modules``, one
    prefetch in flight, on a stream of its own: ``overlap_comm`` defaults to true for stage 3)
    and the module's kernels run. So a module lasts the longer of its compute and the next
    module's gather, and a layer's forward the sum of those; the backward (modules in reverse,
    the attention core's backward with the output projection's) is the longer of a module's
    backward and the next module's gather plus its own gradient's reduce-scatter (on the
    reduction stream, the same links). The recompute forward gathers again; the backward of a
    layer's last module reuses what its recompute forward fetched (reuse distance 0 <
    ``stage3_max_reuse_distance``). The tied embedding's gathers and reduce-scatter stay
    exposed. Each collective moves at most the framework's per-GPU rate (per-parameter calls,
    a device sync and a copy each; configs/calibration/frameworks.yaml): the longer of NCCL's
    time and that. Returns the exposed seconds: the step's compute is counted elsewhere."""
    gemms, attn, elem = modules
    h, a, kv, d_h, dp = i.h, i.a, i.kv, i.d_h, i.dp_sh

    def comm(kind: str, elements: Any) -> Any:
        t = elements / i.tp * i.p
        return o.maximum(o.coll(kind, t, dp, i.st_dp, i.axes), t * (dp - 1) / dp / rate_Bps)

    # QKV, output projection, the MLP up (GeLU fc1 or SwiGLU gate+up) and down matrices
    sizes = (
        h * (a + 2 * kv) * d_h,
        a * d_h * h,
        (i.mats - 1) * h * i.ffn * i.local_experts,
        h * i.ffn * i.local_experts,
    )
    ag = [comm("all_gather", n) for n in sizes]
    rs = [comm("reduce_scatter", n) for n in sizes]
    linear = (gemms.qkv, gemms.proj, gemms.up, gemms.down)
    # the memory-bound kernels spread evenly over the four modules; the attention core runs
    # between QKV and the projection (forward), the projection's and QKV's backward (backward)
    fwd = [g.fwd + elem.fwd / 4 for g in linear]
    fwd[0] = fwd[0] + attn.fwd
    bwd = [g.dgrad + g.wgrad + elem.bwd / 4 for g in linear]
    bwd[1] = bwd[1] + attn.bwd

    def exposed(slots: list[tuple[Any, Any]]) -> Any:
        return sum(o.maximum(compute, wire) - compute for compute, wire in slots)

    # forward: module k under the gather of k + 1 (the next layer's QKV after the down matrix)
    forward = exposed([(fwd[k], ag[(k + 1) % 4]) for k in range(4)])
    # backward, modules in reverse: k under the gather of k - 1 (the layer below's down matrix
    # after QKV) and its own gradient's reduce-scatter
    backward = exposed([(bwd[k], ag[(k - 1) % 4] + rs[k]) for k in range(4)])
    # with full recompute a layer's backward starts with its forward again: QKV, projection and
    # up under the next one's gather; the down matrix stays gathered for its backward (reuse
    # distance 0 < stage3_max_reuse_distance), so its recompute forward and backward run under
    # the up matrix's gather, and QKV's backward under the layer below's recomputed QKV's
    recomputed = exposed(
        [(fwd[k], ag[k + 1]) for k in range(3)]
        + [(fwd[3] + bwd[3], ag[2] + rs[3]), (bwd[2], ag[1] + rs[2]), (bwd[1], ag[0] + rs[1])]
        + [(bwd[0], ag[0] + rs[0])]
    )
    share = o.where(i.rc == FULL_RECOMPUTE, recomputed_share(i, o), 0.0)
    per_layer = forward + share * recomputed + (1.0 - share) * backward
    gathers = 2.0 + share
    embedding = gathers * comm("all_gather", params.embedding) + comm(
        "reduce_scatter", params.embedding
    )
    return i.m * (i.layers_stage * per_layer + embedding)


def fsdp_copies(i: Inputs, o: Any, params: StageParams) -> Any:
    """Seconds of PyTorch FSDP's memory-bound copies beside its collectives, every micro-batch,
    over the stage's unsharded parameters (docs/model.md §C3.3), where it shards the gradients
    (ZeRO-2: FSDP1 ``SHARD_GRAD_OP``, FSDP2 without resharding after the forward) or the
    parameters too (ZeRO-3); 0 for ``fsdp_implementation`` none (contiguous buffers, a
    compiled program) and without sharding.

    FSDP1 (``FlatParameter``; torch/distributed/fsdp/_runtime_utils.py
    ``_post_backward_hook``): autograd assembles the flat gradient from its views' gradients
    (the backward of ``split``: read and write the 16-bit gradient, 2p), casts it to an fp32
    reduce dtype where the mixed precision says so (read p, write 4) and pre-divides it in
    place before the reduce-scatter (read and write, 2r; ``_div_if_needed``, its
    ``gradient_predivide_factor`` > 1 for any world size > 1). FSDP2 (``fully_shard``;
    torch/distributed/_composable/fsdp/_fsdp_collectives.py): every all-gather is copied out
    into the parameters (``split_with_sizes_copy``: read and write the gathered bytes, after
    the forward's gather and, under ZeRO-3, the backward's re-gather) and the gradients are
    copied into the reduce-scatter input in the reduce dtype (``_chunk_cat``: read p, write
    r); it divides in NCCL (``ReduceOp.AVG`` for fp32 and bf16, pytorch/pytorch PRs #120919,
    #123362), no kernel of its own. The copies run on the compute stream, FSDP1's cast and
    pre-divide on its high-priority post-backward stream, whose blocks the GPU issues ahead of
    the backward's: all counted exposed, one kernel each per layer. p: 16-bit; r: the reduce
    dtype's bytes.
    """
    impl = i.x["fsdp_implementation"]
    p = i.p
    r = o.where(i.x["fsdp_reduce_fp32"] > 0, 4.0, p)
    cast = o.where(r > p, 1.0, 0.0)
    flat = 2.0 * p + cast * (p + 4.0) + 2.0 * r
    gathered = o.where(i.fp8 & (i.x["fp8_params"] > 0), 1.0, p)
    gathers = o.where(i.zero >= 3, 2.0, 1.0)
    per_param = gathers * 2.0 * gathered + p + r
    fsdp2 = impl == _FSDP["fsdp2"]
    per_element = o.where(fsdp2, per_param, flat)
    kernels = o.where(fsdp2, gathers + 1.0, 2.0 + cast)  # copy-outs + copy-in; cat, cast, divide
    copies = o.mem(per_element * params.stage, 0.0, kernels * i.layers_stage)
    sharded = (i.zero >= 2) & (i.dp_sh > 1) & (impl != _FSDP["none"])
    return o.where(sharded, i.m * copies, 0.0)


def grad_accumulation(i: Inputs, o: Any, params: StageParams) -> Any:
    """Seconds of summing the weight gradients over the step's micro-batches outside the
    weight-gradient GEMM (docs/model.md §C6.3): every micro-batch a kernel per weight reads the
    16-bit gradient autograd wrote (p) and adds it into an fp32 buffer (read and write, 8 B)
    over the stage's parameters, or their shard where ZeRO-3 reduce-scatters each micro-batch's
    gradients. 0 where the GEMM accumulates itself (``grad_accumulation: fused``)."""
    local = o.where(i.zero >= 3, params.stage / o.maximum(i.dp_sh, 1.0), params.stage)
    # one kernel per weight of a layer: QKV, the projection, the MLP's matrices, two norms
    kernels = (i.mats + 4.0) * i.layers_stage
    summed = o.mem((i.p + _FP32_SUM_BYTES) * local, local, kernels)
    return o.where(i.x["grad_accumulation"] == _UNFUSED_FP32, i.m * summed, 0.0)


def optimizer(i: Inputs, o: Any, params: StageParams) -> Any:
    """Adam and the gradient-norm pass over the locally optimised parameters, and zeroing the
    local gradient buffer for the next step's accumulation (§C6.3; ZeRO-3/FSDP frees it)."""
    opt_params = o.where(i.zero >= 1, params.stage / i.dp_sh, params.stage)
    zeroing = o.where(i.zero >= 3, 0.0, params.grad_bytes * params.stage)
    opt_bytes = (_ADAM_BYTES + _GRAD_NORM_BYTES) * opt_params + zeroing
    return o.mem(opt_bytes, _ADAM_FLOPS * opt_params, 6.0)


def embedding_sync(i: Inputs, o: Any, params: StageParams) -> Any:
    """The tied embedding's gradient all-reduce between the first and the last stage (only a
    tied model's two copies are kept equal: Megatron-Core finalize_model_grads,
    ``_allreduce_word_embedding_grads`` under ``share_embeddings_and_output_weights``)."""
    msg = params.embedding / i.tp * params.grad_bytes
    return o.where((i.pp > 1) & i.tied, o.coll("all_reduce", msg, 2.0, i.st_pp, i.axes), 0.0)
