"""LLM serving: prefill (time to first token), decode (time per output token), throughput,
memory and cost of requests served by a model replica of tp × pp devices. Vectorised.

A request brings ``input_tokens`` of prompt and asks for ``output_tokens``; ``global_batch_size``
requests are offered to each of the ``data_parallel`` replicas (a closed loop's concurrency, or
an offline run's queue). The server runs what its KV cache and its scheduler's caps admit
(``max_concurrency``, ``active_batch``) and queues the rest. The formulas (docs/model.md part D)
reuse the training model's kernels and collectives:

* an *iteration* is one forward pass of the running requests: their decode tokens, each
  attending to its KV cache, plus the prompt tokens the scheduler adds; the layers' GEMMs run
  once over all of them (one read of the weights), at the roofline of a stream-K kernel;
* **continuous batching** (vLLM, TensorRT-LLM's in-flight batching; the default): at steady
  state B running requests finish B / s_out requests per iteration, so that many prompts join
  each iteration (one every s_out / B iterations when fewer); a request's first token comes
  from the iteration that carries its prompt (``ttft_s``), the rest from the iterations it then
  shares with the others' decodes and prompts (``tpot_s``);
* **static batching**: the batch's prompts run together, then s_out − 1 decode iterations;
* a closed loop that offers more requests than run waits for a slot (``queue_wait_s``, in
  ``ttft_s``): N requests in a closed system of B slots each taking the cycle C wait
  C·(N/B − 1) (Little's law); an offline run of N requests queued at once (``arrivals:
  offline``) drains in floor(N/B) waves of B and a last one of N mod B, and lasts them all;
* memory per device: the weights of its stage and shard, the KV cache of the running requests
  (at full context where the scheduler reserves it on admission, TensorRT-LLM's
  ``GUARANTEED_NO_EVICT``; at their mean context s_in + s_out/2 where paged blocks are
  allocated as tokens come, vLLM's and LMDeploy TurboMind's), one iteration's activations
  and logits, and the framework reserves (``configs/calibration/frameworks.yaml``,
  ``memory``); only weights that leave room for no request make a case infeasible.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, NamedTuple

import numpy as np
from numpy.typing import NDArray

from deepflow.config.calibration import Calibration, MemoryCalibration
from deepflow.config.loader import SERVING_MODEL_KEYS
from deepflow.config.mapping import KNOB, expert_groups, expert_replicas
from deepflow.config.specs import MappingSpec, TransformerSpec, WorkloadSpec
from deepflow.oracle.hardware import BYTES_PER_ELEMENT, DeviceCaps
from deepflow.oracle.network import NetworkModel
from deepflow.oracle.workloads.base import StepResult, Workload
from deepflow.oracle.workloads.transformer.columns import transformer_values
from deepflow.oracle.workloads.transformer.layer import (
    attention_length_factor,
    causal_executed_fraction,
)
from deepflow.oracle.workloads.transformer.ops import ArrayOps

__all__ = [
    "INFERENCE_COLUMNS",
    "SERVING_OUTPUTS",
    "InferenceWorkload",
    "deepgemm_tiling",
    "deepgemm_time_s",
    "inference_step",
    "serving_gemm_time_s",
]

F = NDArray[np.float64]

#: The input columns of a serving case: the model's shape, the requests, the KV cache's bytes
#: per element, the scheduler, the framework's attention kernel and the mapping's degrees.
INFERENCE_COLUMNS = (
    "num_layers", "hidden_size", "num_attention_heads", "num_kv_heads", "head_dim",
    "ffn_hidden_size", "swiglu", "vocab_size", "tied_embeddings", "num_experts",
    "experts_per_token", "input_tokens", "output_tokens", "global_batch_size", "kv_cache_bytes",
    "static_batching", "offline", "kv_on_demand", "max_batch_size", "max_num_tokens",
    "prompt_tokens_per_iteration",
    "cuda_graph_padding", "host_s_per_request",
    "kv_reads_per_query_head", "first_token_from_decode", "weight_scale_block",
    "kv_cache_memory_fraction", "caching_allocator", "poisson", "request_rate",
    "attention_kernel",
    "tensor_parallel", "pipeline_parallel", "data_parallel", "expert_parallel",
    "expert_tensor_parallel", "prefill_replicas", "prefill_tensor_parallel",
    "kv_lora_rank", "q_lora_rank", "rope_head_dim", "moe_ffn_hidden_size", "num_shared_experts",
    "first_dense_layers",
)  # fmt: skip
#: A serving evaluation's own outputs (docs/model.md part D).
SERVING_OUTPUTS = ("ttft_s", "tpot_s", "queue_wait_s", "request_latency_s", "max_concurrency",
                   "active_batch")  # fmt: skip
#: Logits are upcast to fp32 for sampling (vLLM v1 Sampler: ``logits.to(torch.float32)``;
#: TensorRT-LLM's sampler keeps float logits): bytes per vocabulary entry of an emitting token.
_LOGIT_BYTES = 4.0
#: The CUDA-graph batch sizes TensorRT-LLM's performance overview captures (perf-overview.md,
#: ``llm_options.yml``: ``cuda_graph_config.batch_sizes`` with ``enable_padding: true``).
_GRAPH_BATCH_SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 384, 512, 1024, 2048, 4096, 8192)

#: The ``attention_kernel`` code of TensorRT-LLM's own kernels (its context FMHA in prefill).
_TRTLLM_KERNEL = KNOB["attention_kernel"].codes["trtllm"]


class _Shape(NamedTuple):
    """A replica's model shape and degrees (arrays of n), per device where it says so."""

    layers: F  # layers per pipeline stage
    h: F
    d_h: F  # head width
    q: F  # query heads per tensor-parallel rank
    kv: F  # KV heads per rank: a KV head is replicated when tp exceeds the KV heads
    ffn: F
    mats: F  # MLP matrices: 2 (GeLU) or 3 (SwiGLU)
    vocab: F
    experts: F
    topk: F
    moe: NDArray[np.bool_]
    tp: F
    pp: F
    dp: F
    ep: F
    etp: F  # ranks that split each expert's matrices (docs/model.md §D1)
    ep_tp: F  # expert-parallel ranks inside a tensor-parallel group (the same tokens)
    ep_dp: F  # expert-parallel ranks across data-parallel replicas (their own tokens)
    etp_dp: F  # data-parallel replicas each expert's split spans (their tokens gathered)
    p_act: float  # activations and messages stay 16-bit (§C6.4)
    w_bytes: F  # bytes a quantized layer weight takes with its block scale (§D1)
    blockwise: NDArray[np.bool_]  # the layer weights carry block scales (§D1)
    # DeepSeek-V3's layers (§D7): latent attention, shared experts, dense layers first
    mla: NDArray[np.bool_]  # multi-head latent attention
    c_kv: F  # its cached latent width
    rope: F  # its decoupled RoPE key/query width
    q_lora: F  # its compressed query width (0: none)
    moe_ffn: F  # each expert's width (ffn: the dense layers')
    shared: F  # shared experts
    dense: F  # the share of an MoE model's layers that are dense
    novel: NDArray[np.bool_]  # any of the above


def _shape(caps: DeviceCaps, x: Mapping[str, F]) -> _Shape:
    h, a, tp = x["hidden_size"], x["num_attention_heads"], x["tensor_parallel"]
    d_h = np.where(x["head_dim"] > 0, x["head_dim"], h / a)
    etp, ep_tp, ep_dp = (np.asarray(v, dtype=float) for v in expert_groups(x))
    mla = x["kv_lora_rank"] > 0
    moe_ffn = np.where(x["moe_ffn_hidden_size"] > 0, x["moe_ffn_hidden_size"], x["ffn_hidden_size"])
    dense = np.where(x["num_experts"] > 1, x["first_dense_layers"] / x["num_layers"], 0.0)
    return _Shape(
        layers=np.ceil(x["num_layers"] / x["pipeline_parallel"]), h=h, d_h=d_h, q=a / tp,
        # TensorRT-LLM bench/build/tuning.py: adjusted_num_kv_heads = max(tp, kv)
        kv=np.maximum(x["num_kv_heads"] / tp, 1.0), ffn=x["ffn_hidden_size"],
        mats=2.0 + x["swiglu"], vocab=x["vocab_size"], experts=x["num_experts"],
        topk=x["experts_per_token"], moe=x["num_experts"] > 1, tp=tp,
        pp=x["pipeline_parallel"], dp=x["data_parallel"], ep=x["expert_parallel"], etp=etp,
        ep_tp=ep_tp, ep_dp=ep_dp, etp_dp=np.asarray(expert_replicas(x), dtype=float),
        p_act=max(caps.bytes_per_element, 2.0),
        w_bytes=caps.bytes_per_element + _scale_bytes(caps, x["weight_scale_block"]),
        blockwise=_scale_bytes(caps, x["weight_scale_block"]) > 0,
        mla=mla, c_kv=x["kv_lora_rank"], rope=x["rope_head_dim"], q_lora=x["q_lora_rank"],
        moe_ffn=moe_ffn, shared=x["num_shared_experts"], dense=dense,
        novel=mla | (x["num_shared_experts"] > 0) | (dense > 0) | (moe_ffn != x["ffn_hidden_size"]),
    )  # fmt: skip


#: The block of FP4 weights one scale covers where the workload does not say: NVFP4's 16
#: elements, each block with an FP8 (E4M3) scale (Blackwell's FP4 tensor-core format; ModelOpt
#: ``NVFP4_DEFAULT_CFG`` weight quantizer ``block_sizes {-1: 16, scale_bits (4, 3)}``).
_FP4_SCALE_BLOCK = 16.0


def _scale_bytes(caps: DeviceCaps, block: F) -> F:
    """Bytes of block scale per weight element: one 1-byte scale (E4M3 or E8M0) per ``block``
    elements (NVFP4 16, MXFP4/MXFP8 32: ModelOpt ``MXFP4_DEFAULT_CFG`` ``block_sizes {-1: 32,
    scale_bits (8, 0)}``); ``block`` 0: FP4 weights as NVFP4, wider ones with per-tensor or
    per-channel scales only (nothing per element)."""
    fp4 = caps.bytes_per_element < 1.0
    block = np.where(block > 0, block, np.where(fp4, _FP4_SCALE_BLOCK, 0.0))
    return np.where(block > 0, 1.0 / np.where(block > 0, block, 1.0), 0.0)


def _gemm(caps: DeviceCaps, s: _Shape, m: Any, n: Any, k: Any, batch: Any = 1.0,
          weights: Any = None, *, grouped: bool = False, w_bytes: Any = None) -> Any:  # fmt: skip
    """A serving GEMM (``batch`` of them, ``weights`` elements of B read; default all):
    stream-K / split-K kernels (cuBLASLt, TensorRT-LLM's) spread the MAC loop over every SM,
    so its FLOP and byte times are those of the whole GPU, with the rows padded to the MMA tile
    (Hopper wgmma m64, Blackwell tcgen05 m128: ``warp_tile_m``) and the matrix units at the
    family's sustained rate, overlapping in part (:func:`_overlapped`; docs/model.md §D1);
    ``grouped``: an MoE layer's grouped GEMM over ``batch`` experts, whose matrix units run at
    ``grouped_gemm_efficiency`` of the dense rate (:func:`serving_gemm_time_s`); ``w_bytes``:
    bytes per element of B (default: a quantized layer weight with its block scale; a weight
    given its own bytes, 16-bit, carries no block scales)."""
    blockwise = s.blockwise if w_bytes is None else False
    w_bytes = s.w_bytes if w_bytes is None else w_bytes
    times = _gemm_times(caps, m, n, k, batch, weights, s.p_act, _matrix_rate(caps), w_bytes)
    return _overlapped(caps, *times, grouped=grouped, blockwise=blockwise) + caps.kernel_launch_s


def _gemm_times(caps: DeviceCaps, m: Any, n: Any, k: Any, batch: Any, weights: Any,
                p_out: float, rate: Any, w_bytes: Any = None) -> tuple[Any, Any, Any]:  # fmt: skip
    """The FLOP seconds (at ``rate``, the rows padded to the MMA tile), the HBM seconds (A,
    the ``weights`` elements of B, default all, at ``w_bytes`` each, default the precision's,
    and ``p_out``-byte outputs) and the FLOP seconds of the rows alone of ``batch`` GEMMs
    (docs/model.md §D1)."""
    m = np.asarray(m, dtype=float)
    rows = np.ceil(m / caps.warp_tile_m) * caps.warp_tile_m
    read = batch * k * n if weights is None else weights
    w_bytes = caps.bytes_per_element if w_bytes is None else w_bytes
    nbytes = read * w_bytes + batch * m * k * caps.bytes_per_element + batch * m * n * p_out
    bandwidth = caps.hbm_bandwidth_Bps * caps.hbm_efficiency
    flops = 2 * batch * n * k / rate
    return flops * rows, nbytes / bandwidth, flops * m


def _overlapped(caps: DeviceCaps, flops_s: Any, bytes_s: Any, rows_s: Any, *,
                grouped: bool, blockwise: Any = False) -> Any:  # fmt: skip
    """A GEMM's time from its FLOP time (``flops_s``, the rows padded to the MMA tile; an MoE
    grouped GEMM's at ``grouped_gemm_efficiency`` of the dense rate) and its byte time, which
    overlap only in part: the max of the two bent as the p-norm
    (1 + r^p)^(1/p), r the smaller over the larger, the FLOPs counted for the GEMM's rows alone
    (``rows_s``: a tile's padding rows are issued with its rows, not waited for), p =
    ``gemm_overlap_exponent`` (p → ∞ is the plain roofline's max, p = 1 no overlap); so a GEMM
    near its ridge point runs slower than the max of the two. DeepGEMM's tables of dense and
    grouped FP8 GEMMs on H800 show it for both kinds (the plain roofline is 34 % too fast on
    them); p is fitted to the two together with ``grouped_gemm_efficiency``
    (``benchmarks/fit_moe_gemm.py``). That p holds for grouped GEMMs and for ``blockwise`` ones
    (weights with block scales: DeepGEMM's FP8 kernels promote each 128-deep block's partial
    sums from the tensor cores into CUDA-core registers, work a per-tensor kernel leaves to its
    epilogue); a dense GEMM without block scales (cuBLAS in 16 bits, CUTLASS's per-tensor FP8)
    overlaps its loads and MMAs further, at ``gemm_overlap_exponent_dense``, fitted to vLLM's
    H100 table of both (docs/model.md §D1)."""
    if grouped:
        flops_s = flops_s / caps.grouped_gemm_efficiency
        rows_s = rows_s / caps.grouped_gemm_efficiency
    p = np.where(grouped | np.asarray(blockwise, dtype=bool), caps.gemm_overlap_exponent,
                 caps.gemm_overlap_exponent_dense)  # fmt: skip
    top = np.maximum(flops_s, bytes_s)
    if np.all(np.isinf(p)):
        return top
    ratio = np.minimum(rows_s, bytes_s) / np.where(top > 0, top, 1.0)
    return top * (1.0 + ratio**p) ** (1.0 / p)


def serving_gemm_time_s(caps: DeviceCaps, m: Any, n: Any, k: Any, groups: Any = 1, *,
                        grouped: bool = True, sustained: bool = True, launch: bool = True,
                        blockwise: bool = False) -> Any:  # fmt: skip
    """Seconds of a serving GEMM: ``groups`` GEMMs of ``m`` rows × ``k`` by their own ``k`` ×
    ``n`` weights, read once; 16-bit outputs. ``grouped``: an MoE grouped GEMM (``groups``
    experts, ``m`` rows routed to each), else ``groups`` dense GEMMs. ``sustained``: at the
    clocks a whole serving job holds (the family's ``training_sustained_fraction``), else at a
    microbenchmark's; ``launch``: with the kernel's launch latency; ``blockwise``: weights with
    block scales (a dense GEMM without them overlaps at ``gemm_overlap_exponent_dense``).

    Example:
        >>> from deepflow.config.loader import load_device
        >>> from deepflow.oracle.hardware import device_caps
        >>> caps = device_caps(load_device("h100-sxm5-80gb"), "fp8")
        >>> t = serving_gemm_time_s(caps, 256, 4096, 7168, 4, sustained=False, launch=False)
        >>> 50e-6 < float(t) < 80e-6
        True
    """
    m, n, k, g = (np.asarray(v, dtype=float) for v in (m, n, k, groups))
    rate = _matrix_rate(caps) / (1.0 if sustained else caps.training_sustained_fraction)
    p_out = max(caps.bytes_per_element, 2.0)  # 16-bit outputs (as _Shape.p_act)
    time = _overlapped(caps, *_gemm_times(caps, m, n, k, g, None, p_out, rate), grouped=grouped,
                       blockwise=blockwise)  # fmt: skip
    return time + (caps.kernel_launch_s if launch else 0.0)


#: DeepGEMM's K block (BLOCK_K of its FP8 kernels) and the shared memory its stages fit in
#: (sm90_capacity), at deepseek-ai/DeepGEMM@55ab91f deep_gemm/jit_kernels/gemm.py.
_DEEPGEMM_BLOCK_K, _DEEPGEMM_SMEM_B = 128, 232448


def deepgemm_tiling(m: int, n: int, k: int, groups: int = 1, *, num_sms: int = 132,
                    contiguous: bool = False) -> tuple[int, int, int, int]:  # fmt: skip
    """(block_m, block_n, waves, stages) of DeepGEMM's FP8 GEMM as its JIT picks them
    (deepseek-ai/DeepGEMM@55ab91f, deep_gemm/jit_kernels/gemm.py ``get_best_configs``):
    block_m 64 for m <= 64 else 128 (a contiguous grouped layout: 128, its M alignment), the
    block_n of 16 ... 128 by 8, 144 or 160 with the fewest waves of output tiles over the SMs,
    then the fullest last wave, then the narrowest; the most pipeline stages (8 ... 4; 4 only
    for a block_n sharing few factors with 128) whose operand buffers fit its shared memory.
    ``m`` is rows per group (the masked layout's expected rows; a contiguous layout's ``m`` is
    all groups' rows). docs/model.md §D1.

    Example:
        >>> deepgemm_tiling(64, 2112, 7168)  # one 64 x 16 tile per SM, a single wave
        (64, 16, 1, 8)
    """
    block_ms = (128,) if contiguous else (64 if m <= 64 else 128,)
    block_ns = (*range(16, 129, 8), 144, 160)
    count = 1 if contiguous else groups

    def tiles(bm: int, bn: int) -> int:
        return -(-m // bm) * -(-n // bn) * count

    def rank(bm: int, bn: int) -> tuple[int, int, int, int]:
        waves, last = -(-tiles(bm, bn) // num_sms), tiles(bm, bn) % num_sms or num_sms
        return (waves, -last, -bm, bn)  # fewest waves, fullest last wave, larger M, narrower N

    bm, bn = min(((bm, bn) for bm in block_ms for bn in block_ns), key=lambda t: rank(*t))
    stages_to_try: tuple[int, ...] = (8, 7, 6, 5, 4)
    if 128 % bn and 128 // math.gcd(128, bn) <= 4:
        stages_to_try = (4,)
    blocks_k = -(-k // _DEEPGEMM_BLOCK_K)
    scales_b = -(-blocks_k * 4 * (1 if _DEEPGEMM_BLOCK_K % bn == 0 else 2) // 8) * 8

    def smem(stages: int) -> int:
        per_stage = (bm + bn) * _DEEPGEMM_BLOCK_K + bm * 4 + 16
        return bm * bn * 2 + stages * per_stage + scales_b

    stages = next((st for st in stages_to_try if smem(st) <= _DEEPGEMM_SMEM_B), 4)
    return bm, bn, -(-tiles(bm, bn) // num_sms), stages


def deepgemm_time_s(caps: DeviceCaps, m: int, n: int, k: int, groups: int = 1, *,
                    grouped: bool = False, contiguous: bool = False, sustained: bool = True,
                    launch: bool = True) -> float:  # fmt: skip
    """Seconds of a DeepGEMM FP8 GEMM: the serving GEMM (:func:`serving_gemm_time_s`) or, where
    longer, its K-loop floor. DeepGEMM does not split K: each output tile's CTA runs the whole
    K loop, ⌈K/128⌉ blocks through its ``stages``-deep TMA pipeline, at most ``stages`` blocks
    per load round trip (Little's law on the pipeline: the family's
    ``gemm_pipeline_round_trip_s``), so a wave lasts at least ⌈K/128⌉ · round trip / stages
    (:func:`deepgemm_tiling`; docs/model.md §D1). It binds where one narrow tile per SM loops
    over a deep K (DeepSeek-V3's 2112 × 7168 projection at 64 and 128 rows)."""
    rows = m * groups if contiguous else m
    _, _, waves, stages = deepgemm_tiling(rows, n, k, groups, num_sms=int(caps.num_sms),
                                          contiguous=contiguous)  # fmt: skip
    blocks_k = -(-k // _DEEPGEMM_BLOCK_K)
    floor = waves * blocks_k * caps.gemm_pipeline_round_trip_s / stages
    body = float(serving_gemm_time_s(caps, m, n, k, groups, grouped=grouped, sustained=sustained,
                                     launch=False, blockwise=True))  # fmt: skip
    return max(body, floor) + (caps.kernel_launch_s if launch else 0.0)


def _matrix_rate(caps: DeviceCaps) -> Any:
    """GEMM FLOP/s a serving job sustains: the best-shape rate of the matrix microbenchmarks
    (``gemm_efficiency``) at the clocks a device holds through a whole job under its power
    limit (the family's ``training_sustained_fraction``, fitted on its public training runs and
    not refitted on serving ones; a family without any, Blackwell, on its serving rows;
    docs/model.md §C6.1, §D1)."""
    return caps.peak_flops * caps.gemm_efficiency * caps.training_sustained_fraction


def _layer_gemms(caps: DeviceCaps, s: _Shape, tokens: Any) -> Any:
    """The GEMMs of one layer over ``tokens`` rows on one device (TP shards; MoE experts
    sharded over the EP group, each reading only the experts its tokens are routed to)."""
    qkv = _gemm(caps, s, tokens, (s.q + 2 * s.kv) * s.d_h, s.h)
    proj = _gemm(caps, s, tokens, s.h, s.q * s.d_h)
    up = (s.mats - 1) * s.ffn / s.tp
    dense = _gemm(caps, s, tokens, up, s.h) + _gemm(caps, s, tokens, s.h, s.ffn / s.tp)
    # experts: the EP group's tokens × top-k picks over E experts, E/ep of them here, each
    # split etp ways; the group's ep_dp replicas bring their own tokens, its ep_tp ranks of
    # one tensor-parallel group share theirs, and where each expert's split spans etp_dp
    # replicas their tokens are gathered and every one of their ranks runs them all. Under
    # uniform routing an expert is used with probability 1 − (1 − k/E)^(tokens·replicas), so
    # a step touches E·(1 − (1 − k/E)^B) distinct experts of the E (Fedus et al., JMLR 2022
    # §2.2, the token-choice top-k router; the expected coverage of B·k uniform picks). A
    # grouped GEMM (TensorRT-LLM's and vLLM's fused-MoE kernels) runs only the experts with
    # rows, each padded to the MMA tile: the routed rows spread over the used experts
    replicas = s.ep_dp * s.etp_dp
    local = np.maximum(s.experts / s.ep, 1.0)
    used = local * -np.expm1(tokens * replicas * np.log1p(-s.topk / np.maximum(s.experts, 2.0)))
    rows = tokens * s.topk * replicas * local / np.maximum(s.experts, 1.0)  # routed here
    per_expert = rows / np.maximum(used, 1e-300)
    up_e, down_e = (s.mats - 1) * s.moe_ffn / s.etp, s.moe_ffn / s.etp
    experts = _gemm(caps, s, per_expert, up_e, s.h, used, used * up_e * s.h, grouped=True) + _gemm(
        caps, s, per_expert, s.h, down_e, used, used * down_e * s.h, grouped=True
    )
    # the router stays 16-bit (ModelOpt's default configs leave "*router*" unquantized)
    router = _gemm(caps, s, tokens, s.experts, s.h, w_bytes=s.p_act)
    moe = router + experts
    if np.any(s.novel):
        # §D7: shared experts every token runs (one dense GEMM pair, split as the dense
        # layers), the first layers dense, and latent attention's projections
        shared = s.shared * s.moe_ffn / s.tp
        moe = moe + np.where(s.shared > 0, _gemm(caps, s, tokens, (s.mats - 1) * shared, s.h)
                             + _gemm(caps, s, tokens, s.h, shared), 0.0)  # fmt: skip
        moe = np.where(s.dense > 0, (1 - s.dense) * moe + s.dense * dense, moe)
        qkv = np.where(s.mla, _latent_projections(caps, s, tokens), qkv)
    return qkv + proj + np.where(s.moe, moe, dense)


def _latent_weights(s: _Shape, heads: Any) -> Any:
    """A latent attention layer's weight elements for ``heads`` heads (§D7): the query's
    compression and expansion (or its projection from the hidden state), the latent and RoPE
    key's compression, the latent's expansion to keys and values, the output projection."""
    h, q_width = s.h, heads * (s.d_h + s.rope)
    query = np.where(s.q_lora > 0, h * s.q_lora + s.q_lora * q_width, h * q_width)
    return query + h * (s.c_kv + s.rope) + s.c_kv * 2 * heads * s.d_h + heads * s.d_h * h


def _latent_projections(caps: DeviceCaps, s: _Shape, tokens: Any) -> Any:
    """Multi-head latent attention's projections of ``tokens`` on one device (§D7; DeepSeek-V2,
    arXiv 2405.04434 §2.1.2-2.1.3): the query's compression to q_lora and its expansion to the
    rank's heads × (head_dim + rope) (or that expansion from the hidden state), the key-value
    latent and the shared RoPE key from the hidden state (c_kv + rope; both compressions
    replicated on the tensor-parallel ranks), and the latent's expansion to the heads' keys and
    values (2·head_dim a head): at prefill K and V from the latent, at decode the same weights
    absorbed into the query and the output (as many FLOPs and bytes a token)."""
    q_width = s.q * (s.d_h + s.rope)
    query = np.where(s.q_lora > 0, _gemm(caps, s, tokens, s.q_lora, s.h)
                     + _gemm(caps, s, tokens, q_width, np.maximum(s.q_lora, 1.0)),
                     _gemm(caps, s, tokens, q_width, s.h))  # fmt: skip
    latent = _gemm(caps, s, tokens, s.c_kv + s.rope, s.h)
    expand = _gemm(caps, s, tokens, 2 * s.q * s.d_h, np.maximum(s.c_kv, 1.0))
    return query + latent + expand


def _attention(caps: DeviceCaps, s: _Shape, x: Mapping[str, F], decode: Any, context: Any,
               prompt_tokens: Any) -> Any:  # fmt: skip
    """One layer's attention kernels: decode tokens over their KV cache (``context`` tokens
    each: bytes dominate), prompt tokens causally over their prompt (FLOPs dominate).

    The kernels run at the attention efficiency of the framework's kernel (``attention_kernel``:
    FlashAttention-2 by default; TensorRT-LLM's own fused MHA, its Hopper context kernels and
    Blackwell's trtllm-gen ones, at ``attention_efficiency_trtllm``; docs/model.md §D1).
    TensorRT-LLM's context kernels run a prompt's attention at that rate times the length
    factor of its query blocks' fixed work (``attention_block_overhead_trtllm``: 1 at 8k
    tokens, slower below; both fitted to its microbenchmarks, §D1); the others at their
    stated rate.

    A decode reads each KV head's cache once for the query heads that share it (grouped-query
    attention; FlashAttention's and TensorRT-LLM's XQA kernels), or once per query head where
    the kernel runs one thread block per query head and sequence, each streaming its KV head's
    cache (``kv_reads_per_query_head``: TensorRT-LLM's masked MHA kernel before v0.7.1, whose
    release notes add "MMHA optimization for MQA and GQA",
    https://github.com/NVIDIA/TensorRT-LLM/blob/main/docs/source/release-notes.md; docs/model.md
    §D1)."""
    kernel = np.asarray(x["attention_kernel"]).astype(int)
    efficiency = np.choose(kernel, caps.attention_efficiencies)
    rate = caps.peak_flops / _slow16(caps) * efficiency * caps.training_sustained_fraction
    # as training's attention (§C6.2)
    bandwidth = caps.hbm_bandwidth_Bps * caps.hbm_efficiency
    read_heads = np.where(x["kv_reads_per_query_head"] > 0, s.q, s.kv)
    kv_bytes = 2 * decode * context * read_heads * s.d_h * x["kv_cache_bytes"]
    dec = np.maximum(4 * decode * context * s.q * s.d_h / rate, kv_bytes / bandwidth)
    s_in = x["input_tokens"]
    causal = causal_executed_fraction(s_in)
    io = 2 * prompt_tokens * (s.q + 2 * s.kv) * s.d_h * s.p_act  # Q, K, V in; O out
    # TensorRT-LLM's context kernels: their rate over the prompt's length (§D1)
    length = np.where(
        kernel == _TRTLLM_KERNEL,
        attention_length_factor(s_in, caps.attention_block_overhead_trtllm),
        1.0,
    )
    pre = np.maximum(4 * prompt_tokens * s_in * causal * s.q * s.d_h / rate * length,
                     io / bandwidth)  # fmt: skip
    if np.any(s.mla):
        # latent attention (§D7): a decode attends, absorbed, over the cached latent and RoPE
        # key (c_kv + rope a token, read once for all heads, as multi-query attention) with
        # c_kv-wide values; a prompt over its expanded keys (head_dim + rope) and values
        # (at the family's latent decode kernel's rate where it has one: FlashMLA, §D7)
        latent_B = decode * context * (s.c_kv + s.rope) * x["kv_cache_bytes"]
        flops = 2 * decode * context * s.q * (2 * s.c_kv + s.rope)
        mla_rate = np.where(caps.attention_efficiency_mla > 0,
                            caps.peak_flops / _slow16(caps) * caps.attention_efficiency_mla
                            * caps.training_sustained_fraction, rate)  # fmt: skip
        dec = np.where(s.mla, np.maximum(flops / mla_rate, latent_B / bandwidth), dec)
        widths = 2 * s.d_h + s.rope  # query-key and value widths a head
        io = 2 * prompt_tokens * s.q * widths * s.p_act
        flops = 2 * prompt_tokens * s_in * causal * s.q * widths
        pre = np.where(s.mla, np.maximum(flops / rate * length, io / bandwidth), pre)
    launch = caps.kernel_launch_s
    return np.where(decode > 0, dec + launch, 0.0) + np.where(prompt_tokens > 0, pre + launch,
                                                              0.0)  # fmt: skip


def _iteration(
    caps: DeviceCaps, o: ArrayOps, s: _Shape, x: Mapping[str, F], decode: Any, context: Any,
    prompt_tokens: Any, prompts: Any, gemm_tokens: Any,
) -> dict[str, Any]:  # fmt: skip
    """One iteration of one micro-batch through the pp stages, by part: ``decode`` tokens at
    ``context`` plus ``prompt_tokens`` of ``prompts`` prompts (``gemm_tokens`` rows in the
    GEMMs: the tokens, or a CUDA graph's padded batch)."""
    tokens = decode + prompt_tokens
    expert_tokens = tokens * np.where(s.moe, s.topk, 1.0)
    # two fused residual-add + norm kernels (read x and the residual, write both: 8 hidden
    # vectors a token), rotary on Q and K, the gated activation (read 2F, write F); MoE
    # routing copies each token to its k experts' rows and sums them back (TensorRT-LLM's
    # expandInputRows and finalizeMoeRouting kernels: read h, write k·h; read k·h, write h)
    rotary = 2 * tokens * (s.q + s.kv) * s.d_h
    # (where each expert's split spans etp_dp replicas, a rank routes the gathered tokens of
    # all of them; its activation elements stay T·k·F/t: etp = t·etp_dp)
    routing = np.where(s.moe, 2 * (s.topk + 1) * tokens * s.etp_dp * s.h, 0.0)
    gated = 3 * expert_tokens * s.ffn / s.tp
    if np.any(s.novel):
        # §D7: RoPE on the heads' rope part and the shared key; the experts' and shared
        # experts' activations in the MoE layers, the dense MLP's in the first ones
        rotary = np.where(s.mla, 2 * tokens * (s.q + 1) * s.rope, rotary)
        moe = 3 * tokens * (s.topk + s.shared) * s.moe_ffn / s.tp
        blend = (1 - s.dense) * moe + s.dense * 3 * tokens * s.ffn / s.tp
        gated = np.where(s.novel & s.moe, blend, gated)
    elementwise = o.mem((8 * gemm_tokens * s.h + rotary + gated + routing) * s.p_act, 0.0,
                        np.where(s.moe, 6, 4))  # fmt: skip
    # the attention's and the MLP's all-reduces over the tensor-parallel group (which also sums
    # the expert outputs of its ep_tp expert-parallel ranks); an MoE's dispatch and combine
    # all-to-alls over the ep_dp replicas, each of the ep_tp ranks sending its share of the
    # tokens they hold alike; where each expert's split spans etp_dp replicas, their hidden
    # states all-gathered before the experts and the partial outputs reduce-scattered after
    # (TensorRT-LLM's attention-DP MoE, vLLM's data-parallel dispatch and combine)
    spans = np.where(s.moe & (s.etp_dp > 1), 1.0, 0.0)
    comm = 2 * o.coll("all_reduce", tokens * s.h * s.p_act, s.tp, 1.0)
    if np.any(s.moe):
        comm = comm + np.where(
            s.moe,
            2 * o.coll("all_to_all", tokens * s.topk * s.h * s.p_act / s.ep_tp, s.ep_dp, s.tp),
            0.0,
        )
    if np.any(spans > 0):
        gathered = tokens * s.etp_dp * s.h * s.p_act
        comm = comm + spans * (o.coll("all_gather", gathered, s.etp_dp, s.tp)
                               + o.coll("reduce_scatter", gathered, s.etp_dp, s.tp))  # fmt: skip
    stages = s.pp * s.layers
    # (no pipeline, no sends: a batch of single-stage replicas skips the collective model)
    send = o.coll("send_recv", tokens * s.h * s.p_act / s.tp, 2.0, s.tp * s.dp) if np.any(
        s.pp > 1) else 0.0  # fmt: skip
    # the output layer for every token that emits one: decodes and each prompt's last token
    emits = decode + prompts
    # the output layer in 16 bits (ModelOpt leaves "*lm_head*" unquantized): its time at the
    # precision's rate and bytes, scaled by the 16-bit/low-precision peak ratio
    head = _slow16(caps) * _gemm(caps, s, emits, s.vocab / s.tp, s.h,
                                 w_bytes=caps.bytes_per_element)  # fmt: skip
    head = np.where(emits > 0, head, 0.0)
    # an iteration with no tokens (a prefill pass left with none) runs no kernels
    busy = np.where(tokens > 0, 1.0, 0.0)
    return {
        "gemm": busy * stages * _layer_gemms(caps, s, gemm_tokens),
        "attention": busy * stages * _attention(caps, s, x, decode, context, prompt_tokens),
        "elementwise": busy * stages * elementwise,
        "comm": busy * stages * comm,
        "pipeline_p2p": busy * (s.pp - 1) * send,
        "lm_head": head,
    }


def _admitted(caps: DeviceCaps, x: Mapping[str, F], s: _Shape, cal: MemoryCalibration,
              phase: str = "serve") -> tuple[F, F]:  # fmt: skip
    """Requests the KV cache holds (``max_concurrency``) and the most that run at once
    (continuous batching admits what the cache and the scheduler's caps allow and queues the
    rest); ``phase``: a replica that serves both phases, or one of a disaggregated pool's
    (``prefill``: prompts in flight, ``decode``: requests decoding; :func:`_memory`)."""
    memory, per_request = _memory(caps, x, s, cal, np.zeros_like(x["global_batch_size"]), phase)
    # total = (fixed + B·per_request)·(1 + fragmentation) + context + NCCL
    frag = _fragmentation(x, cal)
    fixed = (
        (memory["weights"] + memory["activations"] + memory["workspace"]) * (1 + frag)
        + memory["cuda_context"]
        + memory["nccl_buffers"]
    )
    free = (caps.hbm_capacity_B - fixed) / (1 + frag)
    # a preallocated pool: the stated share of what is free once the model is loaded and one
    # iteration's activations have run (TensorRT-LLM's KvCacheCreator: the fraction of the
    # device's memory less the peak the allocator handed out in a profiling forward pass and
    # what lies outside it)
    fraction = x["kv_cache_memory_fraction"]
    used = sum(memory[k] for k in ("weights", "activations", "workspace", "cuda_context",
                                   "nccl_buffers"))  # fmt: skip
    free = np.where(fraction > 0, fraction * (caps.hbm_capacity_B - used), free)
    capacity = np.floor(np.maximum(free, 0.0) / per_request)
    limit = np.minimum(capacity, np.where(x["max_batch_size"] > 0, x["max_batch_size"], np.inf))
    # a token budget T per iteration holds B·(1 + s_in/s_out) tokens at steady state, or, when
    # a prompt joins only every few iterations, B + s_in (the two meet at B = s_out); a prefill
    # pool's iteration T / s_in whole prompts (at least one, chunked), a decode pool's T tokens
    budget, s_in, s_out = x["max_num_tokens"], x["input_tokens"], x["output_tokens"]
    if phase == "prefill":
        # (its prompts an iteration: the token budget, else the prompt tokens the scheduler
        # takes at once, §D2)
        budget = np.where(budget > 0, budget, x["prompt_tokens_per_iteration"])
        per_stage = np.maximum(np.floor(budget / s_in), 1.0)
    elif phase == "decode":
        per_stage = budget
    else:
        steady = budget / (1 + s_in / s_out)
        per_stage = np.where(steady >= s_out, steady, np.maximum(budget - s_in, 1.0))
    static = x["static_batching"] > 0
    limit = np.where((budget > 0) & ~static, np.minimum(limit, np.floor(per_stage) * s.pp), limit)
    return capacity, limit


class _Run(NamedTuple):
    """What ``batch`` requests running together take (arrays of n): time by part over a
    request's slot (its prompt and s_out tokens), that slot, the first token's and each later
    token's time."""

    breakdown: dict[str, Any]
    cycle: Any
    ttft: Any
    tpot: Any


def _run(caps: DeviceCaps, o: ArrayOps, s: _Shape, x: Mapping[str, F], batch: Any) -> _Run:
    """``batch`` requests on a replica: continuous batching's steady state, a static batch
    issued at once, or a closed loop's lockstep rounds of static batches."""
    s_in, s_out = x["input_tokens"], x["output_tokens"]
    static = x["static_batching"] > 0
    # pp micro-batches in flight; each iteration of one passes the pp stages
    micro = np.ceil(batch / s.pp)
    # prompts per iteration: continuous batching's steady state, or the whole static batch
    joining = micro / s_out
    # prompts that wait together (fixed-length clients that start together, an offline queue)
    # join in bursts of the scheduler's prompt tokens an iteration, which stay in phase: every
    # request lasts as long, so each burst's requests finish and come back together (§D2)
    tokens = x["prompt_tokens_per_iteration"]
    bursts = (tokens > 0) & ~static & (x["together"] > 0)
    burst = np.minimum(micro, np.maximum(np.floor(tokens / s_in), 1.0))
    prompts = np.where(static, micro, np.maximum(joining, np.where(bursts, burst, 1.0)))
    # iterations (of a request's s_out) that carry prompts
    carrying = np.where(static, 1.0, np.where(bursts, micro / prompts,
                                              s_out * np.minimum(joining, 1.0)))  # fmt: skip
    context = s_in + s_out / 2  # decode time is linear in the context: its mean
    padded = np.where(x["cuda_graph_padding"] > 0, _graph_batch(x, micro), micro)
    dec = _iteration(caps, o, s, x, micro, context, 0.0, 0.0, padded)
    others = np.where(static, 0.0, np.maximum(micro - prompts, 0.0))
    # a server whose prefill leaves each prompt's last token to the next decode iteration
    # (LMDeploy TurboMind before v0.1.0a2) takes its first token from that iteration: one
    # token less to prefill, no logits there, one decode iteration more (docs/model.md §D2)
    late = np.where(x["first_token_from_decode"] > 0, 1.0, 0.0)
    prompt_tokens = prompts * (s_in - late)
    pre = _iteration(caps, o, s, x, others, context, prompt_tokens, prompts * (1.0 - late),
                     others + prompt_tokens)  # fmt: skip
    for part in (dec, pre):
        _host_wait(part, micro, x)
    breakdown = {f"prefill_{k}": carrying * v for k, v in pre.items()}
    breakdown |= {f"decode_{k}": (s_out - carrying + late) * v for k, v in dec.items()}
    cycle = sum(breakdown.values())  # a request's slot: its prompt and s_out tokens
    ttft = sum(pre.values()) + late * sum(dec.values())
    tpot = np.where(s_out > 1, (cycle - ttft) / np.maximum(s_out - 1, 1.0), sum(dec.values()))
    # a closed loop of clients in lockstep rounds: the first request back finds the server idle
    # and runs alone, the rest join at the next iteration (docs/model.md §D2, lockstep rounds)
    lockstep = static & (x["offline"] <= 0) & (micro > 1)
    if np.any(lockstep):
        lone, group = _lockstep_iterations(caps, o, s, x, micro, context, late, dec)
        first = {k: lone[k] + group[k] for k in pre}
        rounds = {f"prefill_{k}": v for k, v in first.items()}
        rounds |= {f"decode_{k}": (s_out - 1.0) * v for k, v in dec.items()}
        breakdown = {k: np.where(lockstep, rounds[k], v) for k, v in breakdown.items()}
        cycle = np.where(lockstep, sum(rounds.values()), cycle)
        # the lone request's first token after its own iteration, the others' after both
        mean_first = sum(lone.values()) + sum(group.values()) * (micro - 1.0) / micro
        ttft = np.where(lockstep, mean_first, ttft)
        tpot = np.where(lockstep, sum(dec.values()), tpot)
    return _Run(breakdown, cycle, ttft, tpot)


def _host_wait(part: dict[str, Any], requests: Any, x: Mapping[str, F]) -> dict[str, Any]:
    """``part`` (an iteration by part) with its ``host`` time: the executor's host work on the
    iteration's ``requests`` runs behind the previous iteration's GPU work (TensorRT-LLM's
    overlap scheduler), so the GPU waits for what is left of it (docs/model.md §D2)."""
    part["host"] = np.maximum(requests * x["host_s_per_request"] - sum(part.values()), 0.0)
    return part


def _lockstep_iterations(
    caps: DeviceCaps, o: ArrayOps, s: _Shape, x: Mapping[str, F], micro: Any, context: Any,
    late: Any, dec: dict[str, Any],
) -> tuple[dict[str, Any], dict[str, Any]]:  # fmt: skip
    """The two iterations that open a lockstep round of ``micro`` clients (docs/model.md §D2):
    the first request back runs alone (its prompt, and where the first token comes from a
    decode iteration that iteration at batch 1), then the other micro − 1 prompts with the
    first request's decode (or, first token from decode, ``dec``: the decode iteration of all
    micro, host time included). A server that sleeps while it has no request wakes for the
    first one and takes what is queued then (LMDeploy TurboMind
    ``LlamaBatch::InternalThreadEntry``: ``RequestQueue::dequeue`` blocks while the batch is
    empty, then returns the requests queued at that moment)."""
    s_in = x["input_tokens"]
    one = np.ones_like(micro)
    rest = micro - 1.0
    lone = _iteration(caps, o, s, x, 0.0 * one, context, s_in - late, 1.0 - late, s_in - late)
    group = _iteration(caps, o, s, x, 1.0 - late, context, rest * (s_in - late),
                       rest * (1.0 - late), (1.0 - late) + rest * (s_in - late))  # fmt: skip
    dec1 = _iteration(caps, o, s, x, one, context, 0.0, 0.0,
                      np.where(x["cuda_graph_padding"] > 0, _graph_batch(x, one), one))  # fmt: skip
    for part, waiting in ((lone, one), (group, micro), (dec1, one)):
        _host_wait(part, waiting, x)
    lone = {k: v + late * dec1[k] for k, v in lone.items()}
    group = {k: v + late * dec[k] for k, v in group.items()}
    return lone, group


def inference_step(
    caps: DeviceCaps, net: NetworkModel, x: Mapping[str, Any], cal: MemoryCalibration
) -> dict[str, Any]:
    """Serving figures of n cases (arrays of n for every :data:`INFERENCE_COLUMNS` name)."""
    x = {k: np.asarray(v, dtype=float) for k, v in x.items()}
    o = ArrayOps(caps, net)
    s = _shape(caps, x)
    capacity, limit = _admitted(caps, x, s, cal)
    offered = x["global_batch_size"]
    batch = np.where(capacity >= 1, np.minimum(offered, limit), offered)
    poisson = x["poisson"] > 0
    # prompts wait together (§D2, bursts) in a closed loop, an offline queue, and a Poisson
    # stream the server cannot keep up with (its backlog); Poisson arrivals it serves come apart
    x = {**x, "together": np.where(poisson, 0.0, 1.0)}
    full: _Run | None = None
    if np.any(poisson):
        lone = _run(caps, o, s, x, np.ones_like(batch)).cycle  # a request alone: C(1)
        batch = np.where(poisson, _poisson_batch(caps, o, s, x, batch, lone), batch)
        full = _run(caps, o, s, x, batch)
        flood = poisson & (_arrival_rate(x, s) * full.cycle > batch)
        if np.any(flood):  # a backlog's prompts wait together: run them so
            x["together"] = np.where(flood, 1.0, x["together"])
            full = None
    memory, _ = _memory(caps, x, s, cal, batch)
    s_out = x["output_tokens"]
    if full is None:
        full = _run(caps, o, s, x, batch)
    offline = (x["offline"] > 0) & ~poisson
    # an offline run of N requests on B slots (docs/model.md §D2, arrivals): requests of equal
    # lengths admitted together finish together, so the queue drains in floor(N/B) full waves
    # and one of the r = N mod B left, which still reads every weight each iteration; the run
    # lasts them all. A closed loop of N clients keeps B running (a steady state)
    # (Poisson arrivals that outrun the server drain the same way, below)
    drained = offline | poisson
    waves = np.where(drained, np.floor(offered / batch), 0.0)
    rest = np.where(drained, offered - waves * batch, 0.0)
    if np.any(rest > 0):
        part = _run(caps, o, s, x, np.maximum(rest, 1.0))

        def kept(v: Any) -> Any:
            return np.where(rest > 0, v, 0.0)

        tail = _Run({k: kept(v) for k, v in part.breakdown.items()}, kept(part.cycle),
                    kept(part.ttft), kept(part.tpot))  # fmt: skip
    else:
        zero = np.zeros_like(offered)
        tail = _Run({k: zero for k in full.breakdown}, zero, zero, zero)
    breakdown = {k: np.where(offline, waves * v + tail.breakdown[k], v)
                 for k, v in full.breakdown.items()}  # fmt: skip
    drained_step = waves * full.cycle + tail.cycle
    step = np.where(offline, drained_step, full.cycle)
    served = np.where(offline, offered, batch)  # requests a step completes
    # queueing: a closed loop of N requests on B slots waits C·(N/B − 1) (Little's law); the
    # j-th offline wave waits j full cycles, averaged over the N requests
    closed_wait = full.cycle * np.maximum(offered / batch - 1, 0.0)
    drained_wait = full.cycle * (batch * waves * (waves - 1) / 2 + rest * waves) / offered
    wait = np.where(offline, drained_wait, closed_wait)

    def mean(full_v: Any, tail_v: Any) -> Any:  # over an offline run's requests
        return np.where(offline, (waves * batch * full_v + rest * tail_v) / offered, full_v)

    ttft, latency = wait + mean(full.ttft, tail.ttft), wait + mean(full.cycle, tail.cycle)
    idle = np.zeros_like(step)
    if np.any(poisson):
        # Poisson arrivals at λ a replica (docs/model.md §D2). A server that keeps up holds the
        # B its slots C(B) make it (Little's law, :func:`_poisson_batch`); the requests in
        # flight are Poisson with mean L = λ·C (an infinite-server queue: its occupancy does
        # not depend on how the slot times spread), so it runs a 1 − e^(−L) share of the time,
        # and a request finds it idle or waits half an iteration for the next one; the run
        # lasts until the last request, arriving at (N − 1)/λ, has run its slot while the
        # others drain (the mean of C(B) and a lone request's C(1)). A server that cannot keep
        # up (λ·C(B) > B at every B it admits) works through a backlog: its run is the offline
        # run of the N requests, or the last arrival and its lone slot where that is longer,
        # and the j-th request, starting j of the run's N service intervals in, waits that less
        # its arrival j/λ: (N − 1)/2 · (run/N − 1/λ) on average
        lam = _arrival_rate(x, s)
        keeps = lam * full.cycle <= batch
        arrive = (offered - 1) / lam
        iteration = full.cycle / s_out
        busy_share = np.where(keeps, -np.expm1(-lam * full.cycle), 1.0)
        last = np.where(keeps, (full.cycle + lone) / 2, lone)
        span = np.maximum(arrive + last, drained_step)
        backlog = np.where(
            keeps,
            busy_share * iteration / 2,
            np.maximum((offered - 1) / 2 * (span / offered - 1 / lam), 0.0),
        )
        busy = busy_share * span
        breakdown = {k: np.where(poisson, v * busy / full.cycle, breakdown[k])
                     for k, v in full.breakdown.items()}  # fmt: skip
        idle = np.where(poisson, span - busy, 0.0)
        step = np.where(poisson, span, step)
        served = np.where(poisson, offered, served)
        wait = np.where(poisson, backlog, wait)
        ttft = np.where(poisson, backlog + full.ttft, ttft)
        latency = np.where(poisson, backlog + full.cycle, latency)
    breakdown["kv_transfer"] = np.zeros_like(step)  # a disaggregated pool's (§D6)
    breakdown["idle"] = idle
    out = _served(s, x, step, breakdown, memory, served) | {
        "ttft_s": ttft,
        "tpot_s": mean(full.tpot, tail.tpot),
        "queue_wait_s": wait,
        "request_latency_s": latency,
        "max_concurrency": capacity,
        "active_batch": batch,
    }
    split = x["prefill_replicas"] > 0
    if np.any(split):
        pools = _disaggregated(caps, o, s, x, cal)
        out = {k: _where(split, pools[k], v) for k, v in out.items()}
    return out


def _where(mask: Any, a: Any, b: Any) -> Any:
    """``np.where`` over a result's values, term by term for a breakdown (a dict)."""
    if isinstance(b, dict):
        return {k: np.where(mask, a[k], v) for k, v in b.items()}
    return np.where(mask, a, b)


def _served(s: _Shape, x: Mapping[str, F], step: Any, breakdown: dict[str, Any],
            memory: dict[str, Any], served: Any) -> dict[str, Any]:  # fmt: skip
    """The step's figures shared by every serving mode: ``served`` requests a replica completes
    in a ``step`` (its time by part in ``breakdown``), the memory by term, the model FLOPs."""
    h, a = s.h, x["num_attention_heads"]
    attn = h * (a + 2 * x["num_kv_heads"]) * s.d_h + a * s.d_h * h
    active = x["num_layers"] * (attn + s.mats * h * s.ffn * np.where(s.moe, s.topk, 1.0)) + (
        2 * s.vocab * h
    )
    if np.any(s.novel):  # §D7: the parameters a token runs through
        latent = _latent_weights(s, a)
        mlp = np.where(s.moe, (1 - s.dense) * (s.topk + s.shared) * s.moe_ffn + s.dense * s.ffn,
                       s.ffn)  # fmt: skip
        novel = x["num_layers"] * (np.where(s.mla, latent, attn) + s.mats * h * mlp)
        active = np.where(s.novel, novel + 2 * s.vocab * h, active)
    s_in, s_out = x["input_tokens"], x["output_tokens"]
    return {
        "step_time_s": step,
        "breakdown_s": breakdown,
        "memory_per_device_B": sum(memory.values()),
        "memory_breakdown_B": memory,
        "model_flops_per_step": s.dp * 2 * active * served * (s_in + s_out),
        "tokens_per_step": s.dp * served * s_out,
        "samples_per_step": s.dp * served,
    }


def _disaggregated(caps: DeviceCaps, o: ArrayOps, s: _Shape, x: Mapping[str, F],
                   cal: MemoryCalibration) -> dict[str, Any]:  # fmt: skip
    """Serving figures where ``prefill_replicas`` P of the dp replicas run prompts only and the
    other D = dp − P decode (docs/model.md §D6; DistServe, Zhong et al. OSDI'24 §2-3;
    Splitwise, Patel et al. ISCA'24). A request's prompt runs in a prefill replica's iteration
    of the prompts in flight there (no decodes beside them), which emits its first token; its
    KV cache then goes to a decode replica, each device sending its shard to its counterpart
    (``send_recv`` over the placement's links at the distance of the prefill pool, placed
    first); the decode replica runs its s_out − 1 further tokens in decode-only iterations (no
    prompt stalls them). The client sees its first token once the cache has arrived (vLLM's
    NIXL connector and NVIDIA Dynamo stream every token from the decode worker).

    The system's throughput is the slowest of: the prefill pool's P·b/T_p(b) at the most
    prompts b its memory and token budget take at once, the decode pool's D·B/C_d(B) at the
    requests B it holds, the links' min(P, D)/t_x, and, in a closed loop, the N clients'
    N/(T_p + t_x + C_d). The clients wait the rest of N/X (Little's law); Poisson arrivals at
    λ hold the b and B Little's law gives each pool (:func:`_little_batch`), and wait half a
    busy prefill iteration (or a backlog, where a pool cannot keep up: as §D2); an offline
    queue flows through the slowest stage, the run lasting N/X and the other stages of one
    request."""
    s_in, s_out = x["input_tokens"], x["output_tokens"]
    zeros = np.zeros_like(s_in)
    # the prefill pool's replicas, of their own tensor-parallel degree where the mapping says
    given = x["prefill_tensor_parallel"]
    xp = {**x, "tensor_parallel": np.where(given > 0, given, x["tensor_parallel"])}
    sp = _shape(caps, xp)
    prefills = np.maximum(x["prefill_replicas"], 1.0)
    decoders = np.maximum(s.dp - x["prefill_replicas"], 1.0)
    # the requests the whole system is offered: global_batch_size per decode replica (the
    # pool that holds them through their lives)
    offered = decoders * x["global_batch_size"]
    after = np.maximum(s_out - 1.0, 0.0)  # tokens the decode pool runs
    context = s_in + s_out / 2  # as continuous batching's mean (§D2)

    def prefill(b: Any) -> dict[str, Any]:  # one pass of the ⌈b/pp⌉ prompts of a micro-batch
        micro = np.ceil(b / sp.pp)
        part = _iteration(caps, o, sp, xp, zeros, context, micro * s_in, micro, micro * s_in)
        return _host_wait(part, micro, x)

    def decode(b: Any) -> dict[str, Any]:  # one decode iteration of a micro-batch
        micro = np.ceil(b / s.pp)
        padded = np.where(x["cuda_graph_padding"] > 0, _graph_batch(x, micro), micro)
        part = _iteration(caps, o, s, x, micro, context, zeros, zeros, padded)
        return _host_wait(part, micro, x)

    def t_pre(b: Any) -> Any:
        return sum(prefill(b).values())

    def c_dec(b: Any) -> Any:  # a request's time in the decode pool among b
        return after * sum(decode(b).values())

    _, limit_p = _admitted(caps, xp, sp, cal, "prefill")
    cap_d, limit_d = _admitted(caps, x, s, cal, "decode")
    limit_p, limit_d = np.maximum(limit_p, 1.0), np.maximum(limit_d, 1.0)
    # the prompt's KV cache, each device's shard to its counterparts: the pool of fewer ranks
    # sends or takes the larger shards (§D6)
    kv_B = 2 * s.layers * s_in * np.maximum(s.kv, sp.kv) * s.d_h * x["kv_cache_bytes"]
    # (a latent attention's cache is one latent and RoPE key a token on every rank, §D7)
    kv_B = np.where(s.mla, s.layers * s_in * (s.c_kv + s.rope) * x["kv_cache_bytes"], kv_B)
    t_x = o.coll("send_recv", kv_B, 2.0, prefills * sp.tp)
    links = np.where(t_x > 0, np.minimum(prefills, decoders) / np.where(t_x > 0, t_x, 1.0),
                     np.inf)  # fmt: skip

    poisson, offline = x["poisson"] > 0, x["offline"] > 0
    closed = ~poisson & ~offline
    lam = np.where(poisson, x["request_rate"], 1.0)
    # each pool at its fullest: all it is offered, at most what it admits; the system's
    # capacity the slowest stage's there
    most_p = np.minimum(limit_p, np.ceil(offered / prefills))
    most_d = np.minimum(limit_d, np.ceil(offered / decoders))
    lone_p, lone_d, full_d = t_pre(np.ones_like(s_in)), c_dec(np.ones_like(s_in)), c_dec(most_d)
    rate_p = prefills * most_p / t_pre(most_p)
    rate_d = np.where(full_d > 0, decoders * most_d / np.where(full_d > 0, full_d, 1.0), np.inf)
    capacity = np.minimum(np.minimum(rate_p, rate_d), links)
    # the rate requests flow at: Poisson's λ, an offline queue's capacity, or a closed loop's
    # N clients over a request's path (its decode among the most requests first, then among
    # the requests that rate holds there: Little's law), where the capacity allows
    first = np.minimum(capacity, offered / (lone_p + t_x + full_d))
    rate = np.where(poisson, lam, np.where(offline, capacity, first))
    held_d = _little_batch(rate / decoders, c_dec, most_d, lone_d)
    slot_d = c_dec(held_d)
    through = np.minimum(capacity, offered / (lone_p + t_x + slot_d))
    rate = np.where(closed, through, rate)
    # the prompts in flight in a prefill replica: those that arrive while an iteration runs
    held_p = _little_batch(rate / prefills, t_pre, most_p, lone_p)
    pre = prefill(held_p)
    dec = decode(held_d)
    t_p = sum(pre.values())
    path = t_p + t_x + slot_d  # a request's prompt, transfer and decode
    # closed loop: N clients at throughput X each take N/X (Little's law)
    closed_latency = np.maximum(offered / through, path)
    # offline: the queue drains through the slowest stage; the others of one request add
    stage = np.where(capacity == rate_d, slot_d, np.where(capacity == rate_p, t_p, t_x))
    offline_span = offered / capacity + path - stage
    # Poisson (§D2): a prompt waits half a busy prefill iteration; a system that cannot keep
    # up works through a backlog
    keeps = lam <= capacity
    busy_p = -np.expm1(-lam / prefills * t_p)
    arrive = (offered - 1) / lam
    span = np.where(keeps, arrive + path,
                    np.maximum(arrive + lone_p + t_x + lone_d, offline_span))  # fmt: skip
    backlog = np.where(keeps, busy_p * t_p / 2,
                       np.maximum((offered - 1) / 2 * (span / offered - 1 / lam), 0.0))  # fmt: skip
    step = np.where(closed, path, np.where(offline, offline_span, span))
    wait = np.where(closed, closed_latency - path,
                    np.where(offline, (offline_span - path) / 2, backlog))  # fmt: skip
    served = np.where(closed, through * path, offered) / s.dp  # per replica, as §D2
    breakdown = {f"prefill_{k}": v for k, v in pre.items()}
    breakdown |= {f"decode_{k}": after * v for k, v in dec.items()}
    breakdown["kv_transfer"] = t_x
    breakdown["idle"] = step - path
    mem_p, _ = _memory(caps, xp, sp, cal, held_p, "prefill")
    mem_d, _ = _memory(caps, x, s, cal, held_d, "decode")
    larger = sum(mem_p.values()) > sum(mem_d.values())
    memory = {k: np.where(larger, mem_p[k], v) for k, v in mem_d.items()}
    ttft = wait + t_p + t_x
    return _served(s, x, step, breakdown, memory, served) | {
        "ttft_s": ttft,
        "tpot_s": sum(dec.values()),
        "queue_wait_s": wait,
        "request_latency_s": ttft + slot_d,
        "max_concurrency": cap_d,
        "active_batch": held_d,
    }


def _poisson_batch(caps: DeviceCaps, o: ArrayOps, s: _Shape, x: Mapping[str, F],
                   limit: F, lone: F) -> F:  # fmt: skip
    """The requests a replica holds in flight under Poisson arrivals at λ = request_rate / dp
    (docs/model.md §D2): by Little's law a server that keeps up holds B = λ·C(B), C(B) the slot
    of a request among B (:func:`_little_batch`); ``limit``: what the KV cache and the
    scheduler admit, where the server falls behind; ``lone`` is C(1)."""
    return _little_batch(_arrival_rate(x, s), lambda b: _run(caps, o, s, x, b).cycle, limit,
                         lone)  # fmt: skip


def _little_batch(rate: F, slot: Any, limit: F, lone: F) -> F:
    """The smallest whole B with rate·slot(B) <= B (Little's law: requests arriving at
    ``rate`` that each hold a place for ``slot(B)`` seconds among B keep B in flight; slot(B)/B
    falls as B requests share each weight read), at least one (``lone`` = slot(1)), at most
    ``limit``, which it returns where no B up to it keeps up. Bisection over whole requests."""
    high = np.maximum(limit, 1.0)
    low = np.ones_like(high)
    keeps_up = rate * lone <= low
    for _ in range(int(np.ceil(np.log2(float(np.max(high)) + 1.0))) + 1):
        mid = np.floor((low + high) / 2)
        ok = rate * slot(mid) <= mid
        high, low = np.where(ok, mid, high), np.where(ok, low, mid)
    return np.where(keeps_up, 1.0, high)


def _arrival_rate(x: Mapping[str, F], s: _Shape) -> F:
    """Requests per second a replica is offered under Poisson arrivals (one where a row has
    none, so that a table mixing arrival kinds divides by no zero)."""
    return np.where(x["poisson"] > 0, x["request_rate"], s.dp) / s.dp


def _graph_batch(x: Mapping[str, F], micro: F) -> F:
    """The batch a padded decode iteration runs (docs/model.md §D2, CUDA-graph padding): the
    smallest captured batch size that holds the iteration's requests, from the capture list
    of TensorRT-LLM's performance overview (``cuda_graph_config.batch_sizes``), where the
    executor replaces the sizes above its largest decode batch, min(max_batch_size,
    max_num_tokens), by that batch (``_filter_cuda_graph_batch_sizes``)."""
    sizes = np.asarray(_GRAPH_BATCH_SIZES)
    nxt = sizes[np.minimum(np.searchsorted(sizes, micro), sizes.size - 1)]
    nxt = np.where(micro > sizes[-1], micro, nxt)
    cap_b = np.where(x["max_batch_size"] > 0, x["max_batch_size"], np.inf)
    cap_t = np.where(x["max_num_tokens"] > 0, x["max_num_tokens"], np.inf)
    return np.maximum(np.minimum(nxt, np.minimum(cap_b, cap_t)), micro)


def _slow16(caps: DeviceCaps) -> Any:
    """FP8/FP4 serving runs attention and the output layer in 16 bits (§C6.4); one device or
    one per row (design sweeps)."""
    sixteen = np.asarray(caps.peak_flops_16bit, dtype=float)
    slower = (caps.bytes_per_element < 2) & (sixteen > 0)
    return np.where(slower, caps.peak_flops / np.where(slower, sixteen, 1.0), 1.0)


def _memory(
    caps: DeviceCaps,
    x: Mapping[str, F],
    s: _Shape,
    cal: MemoryCalibration,
    batch: F,
    phase: str = "serve",
) -> tuple[dict[str, F], F]:
    """Bytes per device by term for ``batch`` running requests, and what one more request adds
    (its KV cache, at full context or its mean context as the scheduler reserves it; its share
    of an iteration's activations and logits). ``phase``: ``serve`` (a replica running both
    phases), or a disaggregated pool's: ``prefill`` (``batch`` prompts in flight, each holding
    its prompt's KV cache until it is sent) or ``decode`` (requests decoding one token an
    iteration; docs/model.md §D6)."""
    h, d_h, tp = s.h, s.d_h, s.tp
    attn = h * (s.q + 2 * s.kv) * d_h + s.q * d_h * h
    mlp = s.mats * h * s.ffn / tp
    linear = attn + np.where(s.moe, s.mats * h * s.ffn / s.etp * s.experts / s.ep, mlp)
    # quantized linear layers with their block scales; the router, norms, embedding and
    # output layer in 16 bits (ModelOpt's _default_disabled_quantizer_cfg: "*lm_head*",
    # "*router*"; the embedding is a lookup table, no linear layer)
    sixteen = np.where(s.moe, h * s.experts, 0.0) + 4 * h
    if np.any(s.novel):
        # §D7: latent attention's projections; the routed experts of width moe_ffn and the
        # shared ones (split as the dense layers) in the MoE layers, the dense MLP in the first
        experts = s.mats * h * s.moe_ffn * (s.experts / s.ep / s.etp + s.shared / tp)
        per_layer = (np.where(s.mla, _latent_weights(s, s.q), attn)
                     + np.where(s.moe, (1 - s.dense) * experts + s.dense * mlp, mlp))  # fmt: skip
        linear = np.where(s.novel, per_layer, linear)
        sixteen = np.where(s.novel & s.moe, (1 - s.dense) * h * s.experts + 4 * h, sixteen)
    # the input embedding and the output layer, one matrix where they are tied on one stage
    embedding = np.where((s.pp > 1) | (x["tied_embeddings"] > 0), 1.0, 2.0) * s.vocab * h / tp
    weights = s.layers * (linear * s.w_bytes + sixteen * s.p_act) + embedding * s.p_act
    s_in, s_out = x["input_tokens"], x["output_tokens"]
    # KV tokens a running request holds: its whole context, reserved when it is admitted
    # (TensorRT-LLM's default GUARANTEED_NO_EVICT capacity scheduler), or, with blocks allocated
    # as its tokens come (vLLM's PagedAttention block manager, Kwon et al. SOSP'23 §4.2;
    # LMDeploy TurboMind 2.x's blocked cache), its mean over its life: requests at every stage of
    # their s_out tokens hold s_in + s_out/2 each on average, and the scheduler preempts the
    # newest when the blocks run out, so the pool holds that many requests at steady state
    held = s_in + np.where(x["kv_on_demand"] > 0, s_out / 2, s_out)
    if phase == "prefill":
        held = s_in
    kv = 2 * s.layers * held * s.kv * d_h * x["kv_cache_bytes"]
    # latent attention caches one latent and RoPE key a token for all heads, on every rank of
    # the tensor-parallel group (§D7)
    kv = np.where(s.mla, s.layers * held * (s.c_kv + s.rope) * x["kv_cache_bytes"], kv)
    # an iteration's widest activation (the MLP's up projection, per expert pick) and hidden
    # state, per token it carries: continuous batching's B(1 + s_in/s_out) + s_in, a static
    # batch's B·s_in, or the scheduler's token budget, which the framework allocates up front
    # an MoE layer runs the tokens of its ep_dp expert-parallel replicas together (attention
    # data parallelism gathers them), its expert rows sized for every pick of every one, each
    # as wide as an expert's share on a rank (ffn / etp); where each expert's split spans
    # etp_dp replicas, their gathered hidden states too
    wide = np.where(s.moe, s.topk * s.ep_dp * s.etp_dp * s.ffn / s.etp, s.ffn / tp)
    if np.any(s.novel):  # the experts' width; a dense first layer's where it is wider (§D7)
        routed = s.topk * s.ep_dp * s.etp_dp * s.moe_ffn / s.etp
        first = np.where(s.dense > 0, s.ffn / tp, 0.0)
        wide = np.where(s.novel & s.moe, np.maximum(routed, first), wide)
    act = ((s.mats - 1) * wide + h * np.where(s.moe, s.etp_dp, 1.0)) * s.p_act
    static, budget = x["static_batching"] > 0, x["max_num_tokens"]
    slope = np.where(static, s_in, 1 + s_in / s_out) / s.pp
    fixed = np.where(static, 0.0, s_in)
    if phase != "serve":  # a pool's iteration: its prompts' tokens, or one token a request
        slope, fixed = (s_in if phase == "prefill" else 1.0) / s.pp, 0.0 * s_in
    slope = np.where(budget > 0, 0.0, slope)
    fixed = np.where(budget > 0, budget, fixed)
    logits = s.vocab / tp * _LOGIT_BYTES / s.pp
    per_request = kv + act * slope + logits
    activations = act * (fixed + slope * batch) + logits * batch
    # the caching allocator's blocks; a preallocated KV pool and the weights loaded once
    # beside it are blocks of their own (fragmentation is then the activations')
    pooled = x["kv_cache_memory_fraction"] > 0
    allocated = np.where(pooled, 0.0, weights + batch * kv) + activations + cal.workspace_B
    shape = weights.shape
    # NCCL's buffers belong to communicators with peers: a replica on one device (no tensor or
    # pipeline ranks, no expert group across replicas) opens none (§C2.5)
    peers = (s.tp * s.pp > 1) | (s.moe & (s.ep_dp * s.etp_dp > 1))
    memory = {
        "weights": weights,
        "kv_cache": batch * kv,
        "activations": activations,
        "workspace": np.broadcast_to(cal.workspace_B, shape).astype(float),
        "fragmentation": _fragmentation(x, cal) * allocated,
        "cuda_context": np.broadcast_to(cal.cuda_context_B, shape).astype(float),
        "nccl_buffers": np.where(peers, cal.nccl_buffers_B, 0.0) + np.zeros(shape),
    }
    return memory, per_request


def _fragmentation(x: Mapping[str, F], cal: MemoryCalibration) -> F:
    """The caching allocator's reserved / allocated − 1 where the server's buffers come from
    PyTorch's caching allocator; none for a C++ engine that allocates its weights, KV cache and
    workspaces once with cudaMalloc / cudaMallocAsync (``caching_allocator`` false: TensorRT-LLM's
    TensorRT runtime, ``tllmBuffers.h`` CudaAllocator / CudaAllocatorAsync; LMDeploy TurboMind,
    ``Allocator<AllocatorType::CUDA>`` on the device's stream-ordered pool; §D3)."""
    return np.where(x["caching_allocator"] > 0, cal.fragmentation, 0.0)


class InferenceWorkload(Workload):
    """Serving a decoder-only transformer (``workload.kind: inference``)."""

    kind = "transformer"
    spec_class = TransformerSpec

    def columns(self, workload: WorkloadSpec, mapping: MappingSpec) -> dict[str, float]:
        model = workload.model
        assert isinstance(model, TransformerSpec)
        kv = workload.kv_cache_precision or workload.precision
        values = transformer_values(model, mapping, workload.global_batch_size) | {
            "input_tokens": float(workload.input_tokens),
            "output_tokens": float(workload.output_tokens),
            "kv_cache_bytes": BYTES_PER_ELEMENT[kv],
            "static_batching": float(workload.batching == "static"),
            "offline": float(workload.arrivals == "offline"),
            "kv_on_demand": float(workload.kv_cache_reservation == "on_demand"),
            "max_batch_size": float(workload.max_batch_size),
            "max_num_tokens": float(workload.max_num_tokens),
            "prompt_tokens_per_iteration": float(workload.prompt_tokens_per_iteration),
            "cuda_graph_padding": float(workload.cuda_graph_padding),
            "host_s_per_request": workload.host_s_per_request,
            "kv_reads_per_query_head": float(workload.decode_kv_reads == "per_query_head"),
            "first_token_from_decode": float(workload.first_token_from_decode),
            "weight_scale_block": float(workload.weight_scale_block),
            "kv_cache_memory_fraction": float(workload.kv_cache_memory_fraction),
            "caching_allocator": float(workload.caching_allocator),
            "poisson": float(workload.arrivals == "poisson"),
            "request_rate": float(workload.request_rate),
        }
        values |= {k: float(getattr(model, k)) for k in SERVING_MODEL_KEYS}  # §D7
        return {k: values[k] for k in INFERENCE_COLUMNS}

    def step(
        self, caps: DeviceCaps, net: NetworkModel, x: Mapping[str, F], *, calibration: Calibration
    ) -> StepResult:
        out = inference_step(caps, net, x, calibration.memory_of(caps.family))
        return StepResult(
            out["step_time_s"],
            out["breakdown_s"],
            out["memory_per_device_B"],
            out["model_flops_per_step"],
            out["tokens_per_step"],
            out["samples_per_step"],
            out["memory_breakdown_B"],
            {k: out[k] for k in SERVING_OUTPUTS},
        )
