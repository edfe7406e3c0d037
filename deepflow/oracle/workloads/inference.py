"""LLM serving: prefill (time to first token), decode (time per output token), throughput,
memory and cost of a batch of requests on a model replica of tp × pp devices. Vectorised.

A request brings ``input_tokens`` of prompt and asks for ``output_tokens``; ``global_batch_size``
requests run together on each of the ``data_parallel`` replicas (the decode batch of continuous
batching at steady state). The formulas (docs/model.md part D) reuse the training model's
shapes and kernels (:mod:`deepflow.oracle.workloads.transformer`):

* prefill: the layers' GEMMs over the batch's prompt tokens, causal attention over the prompt,
  two tensor-parallel all-reduces per layer, the pipeline's stage-to-stage sends, and the
  output layer for the last token of each prompt → ``ttft_s``;
* decode: per generated token, the same GEMMs with one token per request (weight reads
  dominate), attention over the KV cache at the mean context (prompt + half the output:
  decode time is linear in the context), small-message all-reduces whose latency dominates,
  the output layer → ``tpot_s``;
* one request: ``ttft_s + output_tokens × tpot_s`` (``step_time_s``); the system serves
  ``data_parallel × batch × output_tokens`` output tokens in that time (``tokens_per_s``);
* memory per device: the weights of its stage and tensor shard, the KV cache of the batch at
  full context, the prefill's transient activations, and the framework reserves of training
  (``configs/calibration/frameworks.yaml``, ``memory``) → ``max_concurrency`` (requests a
  replica holds); a batch beyond it waits (continuous batching: ``active_batch`` runs), so
  only weights that do not fit make a case infeasible.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial
from typing import Any

import numpy as np
from numpy.typing import NDArray

from deepflow.config.calibration import Calibration, MemoryCalibration
from deepflow.config.specs import MappingSpec, TransformerSpec, WorkloadSpec
from deepflow.oracle.hardware import BYTES_PER_ELEMENT, DeviceCaps
from deepflow.oracle.network import NetworkModel
from deepflow.oracle.workloads.base import StepResult, Workload
from deepflow.oracle.workloads.transformer.columns import transformer_values
from deepflow.oracle.workloads.transformer.ops import ArrayOps
from deepflow.oracle.workloads.transformer.shapes import params_per_layer

__all__ = ["INFERENCE_COLUMNS", "InferenceWorkload", "inference_step"]

F = NDArray[np.float64]

#: The input columns of a serving case: the model's shape, the requests, the KV cache's bytes
#: per element and the mapping's degrees.
INFERENCE_COLUMNS = (
    "num_layers", "hidden_size", "num_attention_heads", "num_kv_heads", "ffn_hidden_size",
    "swiglu", "vocab_size", "num_experts", "experts_per_token", "input_tokens",
    "output_tokens", "global_batch_size", "kv_cache_bytes", "tensor_parallel",
    "pipeline_parallel", "data_parallel", "expert_parallel",
)  # fmt: skip
#: FlashAttention's KV tile: the causal prefill executes (1 + w/s)/2 of the square (§C1.1).
_FLASH_KV_TILE = 128.0


def _active_batch(
    caps: DeviceCaps, x: Mapping[str, Any], cal: MemoryCalibration, layers: Any, p_act: float
) -> tuple[Any, Any]:
    """The KV-cache capacity in requests and the active batch: continuous batching holds what
    the cache fits and queues the rest (docs/model.md Part D)."""
    memory, per_request = _memory(caps, x, cal, layers, p_act)
    # total = (weights + workspace + B·per_request)·(1 + fragmentation) + context + NCCL
    fixed = (memory["weights"] + memory["workspace"]) * (1 + cal.fragmentation) + (
        memory["cuda_context"] + memory["nccl_buffers"]
    )
    free = (caps.hbm_capacity_B - fixed) / (1 + cal.fragmentation)
    capacity = np.floor(np.maximum(free, 0.0) / per_request)
    batch = np.where(capacity >= 1, np.minimum(x["global_batch_size"], capacity),
                     x["global_batch_size"])  # fmt: skip
    return capacity, batch


def _streamed_gemm(caps: DeviceCaps, m: Any, n: Any, k: Any, batch: Any = 1.0) -> Any:
    """A decode GEMM of a few rows: GEMV / split-K kernels (TensorRT-LLM's, cuBLASLt's
    stream-K) spread the weight over every SM, so it runs at the roofline of its bytes and
    FLOPs rather than on a handful of output tiles (docs/model.md §D1)."""
    nbytes = batch * (m * k + k * n + m * n) * caps.bytes_per_element
    flops = 2 * batch * m * n * k
    return np.maximum(flops / (caps.peak_flops * caps.gemm_efficiency),
                      nbytes / (caps.hbm_bandwidth_Bps * caps.hbm_efficiency)) + (
        caps.kernel_launch_s
    )  # fmt: skip


def inference_step(
    caps: DeviceCaps, net: NetworkModel, x: Mapping[str, Any], cal: MemoryCalibration
) -> dict[str, Any]:
    """Serving figures of n cases (arrays of n for every :data:`INFERENCE_COLUMNS` name)."""
    x = {k: np.asarray(v, dtype=float) for k, v in x.items()}
    o = ArrayOps(caps, net)
    L, h, a, kv = x["num_layers"], x["hidden_size"], x["num_attention_heads"], x["num_kv_heads"]
    ffn, vocab, experts, topk = (x[k] for k in ("ffn_hidden_size", "vocab_size", "num_experts",
                                                "experts_per_token"))  # fmt: skip
    tp, pp, dp, ep = (x[k] for k in ("tensor_parallel", "pipeline_parallel", "data_parallel",
                                     "expert_parallel"))  # fmt: skip
    s_in, s_out = x["input_tokens"], x["output_tokens"]
    d_h, mats, moe = h / a, 2.0 + x["swiglu"], experts > 1
    p_act = max(caps.bytes_per_element, 2.0)  # activations and messages stay 16-bit (§C6.4)
    layers = np.ceil(L / pp)
    # continuous batching holds what the KV cache fits and queues the rest: the active batch
    capacity, batch = _active_batch(caps, x, cal, layers, p_act)
    x = {**x, "global_batch_size": batch}
    memory, _ = _memory(caps, x, cal, layers, p_act)

    def layer_time(tokens: Any, context: Any, causal: Any, decode: bool) -> dict[str, Any]:
        """One layer on one device for ``tokens`` new tokens attending to ``context`` each."""
        mlp_tokens = np.where(moe, tokens * topk * ep / experts, tokens)
        local = np.maximum(experts / ep, 1.0)
        mm = partial(_streamed_gemm, caps) if decode else o.gemm
        gemm = (
            mm(tokens, (a + 2 * kv) * d_h / tp, h)
            + mm(tokens, h, a * d_h / tp)
            + mm(mlp_tokens, (mats - 1) * ffn / tp, h, np.where(moe, local, 1.0))
            + mm(mlp_tokens, h, ffn / tp, np.where(moe, local, 1.0))
            + np.where(moe, mm(tokens, experts, h), 0.0)
        )
        kv_bytes = 2 * batch * context * kv * d_h / tp * x["kv_cache_bytes"]
        flops = 4 * tokens * context * a * d_h / tp * causal
        rate = caps.peak_flops / _slow16(caps) * caps.attention_efficiency
        attention = np.maximum(flops / rate, kv_bytes / (caps.hbm_bandwidth_Bps *
                                                          caps.hbm_efficiency))  # fmt: skip
        attention = attention + caps.kernel_launch_s
        # two fused residual-add + norm kernels (read x and the residual, write both: 8 hidden
        # vectors a token), rotary on Q and K, the gated activation (read 2F, write F)
        rotary = 2 * tokens * (a + kv) * d_h / tp
        elementwise = o.mem((8 * tokens * h + rotary + 3 * mlp_tokens * ffn / tp) * p_act, 0.0, 4)
        comm = 2 * o.coll("all_reduce", tokens * h * p_act, tp, 1.0)
        comm = comm + np.where(moe, 2 * o.coll("all_to_all", tokens * topk * h * p_act, ep,
                                               tp), 0.0)  # fmt: skip
        return {"gemm": gemm, "attention": attention, "elementwise": elementwise, "comm": comm}

    def head_time(tokens: Any) -> Any:
        return _slow16(caps) * _streamed_gemm(caps, tokens, vocab / tp, h)

    send = o.coll("send_recv", batch * h * p_act / tp, 2.0, tp * dp)
    prompt = batch * s_in
    pre = layer_time(prompt, s_in, (1 + _FLASH_KV_TILE / s_in) / 2, decode=False)
    context = s_in + s_out / 2  # decode time is linear in the context: its mean
    dec = layer_time(batch, context, 1.0, decode=True)
    pre_p2p = (pp - 1) * o.coll("send_recv", prompt * h * p_act / tp, 2.0, tp * dp)
    dec_p2p = (pp - 1) * send
    ttft = pp * layers * sum(pre.values()) + pre_p2p + head_time(batch)
    tpot = pp * layers * sum(dec.values()) + dec_p2p + head_time(batch)
    breakdown = {f"prefill_{k}": pp * layers * v for k, v in pre.items()}
    breakdown["prefill_pipeline_p2p"] = pre_p2p
    breakdown["prefill_lm_head"] = head_time(batch)
    breakdown |= {f"decode_{k}": s_out * pp * layers * v for k, v in dec.items()}
    breakdown["decode_pipeline_p2p"] = s_out * dec_p2p
    breakdown["decode_lm_head"] = s_out * head_time(batch)
    params = L * params_per_layer(x, np) + 2 * vocab * h
    active = params - L * np.where(moe, mats * h * ffn * (experts - topk), 0.0)
    step = ttft + s_out * tpot
    return {
        "step_time_s": step,
        "breakdown_s": breakdown,
        "memory_per_device_B": sum(memory.values()),
        "memory_breakdown_B": memory,
        "model_flops_per_step": dp * 2 * active * batch * (s_in + s_out),
        "tokens_per_step": dp * batch * s_out,
        "samples_per_step": dp * batch,
        "ttft_s": ttft,
        "tpot_s": tpot,
        "max_concurrency": capacity,
        "active_batch": batch,
    }


def _slow16(caps: DeviceCaps) -> float:
    """FP8 serving runs attention and the output layer in 16 bits (§C6.4)."""
    if caps.bytes_per_element >= 2 or caps.peak_flops_16bit <= 0:
        return 1.0
    return float(caps.peak_flops / caps.peak_flops_16bit)


def _memory(
    caps: DeviceCaps, x: Mapping[str, F], cal: MemoryCalibration, layers: F, p_act: float
) -> tuple[dict[str, F], F]:
    """Bytes per device by term, and what one more request adds (its KV cache at full context
    and its share of the prefill transients)."""
    h, a, kv = x["hidden_size"], x["num_attention_heads"], x["num_kv_heads"]
    tp, pp, ep = x["tensor_parallel"], x["pipeline_parallel"], x["expert_parallel"]
    experts, mats = x["num_experts"], 2.0 + x["swiglu"]
    moe = experts > 1
    expert_params = np.where(moe, mats * h * x["ffn_hidden_size"] * experts, 0.0)
    dense = params_per_layer(x, np) - expert_params
    embedding = np.where(pp > 1, 1.0, 2.0) * x["vocab_size"] * h
    weights = (layers * (dense + expert_params / ep) + embedding) / tp * caps.bytes_per_element
    per_request = (
        2 * layers * (x["input_tokens"] + x["output_tokens"]) * kv * h / a / tp
        * x["kv_cache_bytes"]
    )  # fmt: skip
    batch = x["global_batch_size"]
    # prefill transients: a layer's widest activation (the MLP's up projection) and the
    # 16-bit hidden state of the prompt, once
    per_prompt = x["input_tokens"] * ((mats - 1) * x["ffn_hidden_size"] / tp + h) * p_act
    transient = batch * per_prompt
    allocated = weights + batch * per_request + transient + cal.workspace_B
    memory = {
        "weights": weights,
        "kv_cache": batch * per_request,
        "activations": transient,
        "workspace": np.broadcast_to(cal.workspace_B, weights.shape).astype(float),
        "fragmentation": cal.fragmentation * allocated,
        "cuda_context": np.broadcast_to(cal.cuda_context_B, weights.shape).astype(float),
        "nccl_buffers": np.broadcast_to(cal.nccl_buffers_B, weights.shape).astype(float),
    }
    return memory, per_request + per_prompt


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
        }
        return {k: values[k] for k in INFERENCE_COLUMNS}

    def step(
        self, caps: DeviceCaps, net: NetworkModel, x: Mapping[str, F], *, calibration: Calibration
    ) -> StepResult:
        out = inference_step(caps, net, x, calibration.memory)
        return StepResult(
            out["step_time_s"],
            out["breakdown_s"],
            out["memory_per_device_B"],
            out["model_flops_per_step"],
            out["tokens_per_step"],
            out["samples_per_step"],
            out["memory_breakdown_B"],
            {k: out[k] for k in ("ttft_s", "tpot_s", "max_concurrency", "active_batch")},
        )
