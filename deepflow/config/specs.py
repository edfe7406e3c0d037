"""Frozen, validated specs: the three orthogonal inputs (workload, mapping, system).

Field names are SI with the unit in the name (``hbm_bandwidth_Bps``); the YAML key of each
field (``hbm_bandwidth_GBps``) and its conversion factor are declared with :func:`key`.
Units are converted once, here, at load time.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from deepflow.config._schema import key, knob

__all__ = [
    "ATTENTION_KERNELS",
    "CROSS_ENTROPY_MODES",
    "FFN_ACTIVATIONS",
    "FP8_RECIPES",
    "FSDP_IMPLEMENTATIONS",
    "GRADIENT_BUFFER_MODES",
    "GRID_AXES",
    "MASTER_WEIGHTS_MODES",
    "PEAK_PRECISIONS",
    "PIPELINE_BALANCE_MODES",
    "RANK_ORDERS",
    "RECOMPUTE_MODES",
    "TOPOLOGIES",
    "WORKLOAD_PRECISIONS",
    "AnyDeviceSpec",
    "AreaBudgetSpec",
    "DesignDeviceSpec",
    "DeviceSpec",
    "DramTechSpec",
    "FrameworkSpec",
    "GemmSpec",
    "LinkTechSpec",
    "LogicTechSpec",
    "LstmSpec",
    "MappingSpec",
    "ModelSpec",
    "NetworkSpec",
    "PerimeterBudgetSpec",
    "PowerBudgetSpec",
    "ScaleOutSpec",
    "ScaleUpSpec",
    "Scenario",
    "SramLevelsSpec",
    "SramTechSpec",
    "SystemSpec",
    "TechSpec",
    "TransformerSpec",
    "WorkloadSpec",
]

GB = 1e9
GiB = 2**30
MiB = 2**20
KiB = 2**10
TERA = 1e12

#: Precisions a device may list a dense peak for (``int8`` in TOP/s).
PEAK_PRECISIONS = ("fp64", "fp32", "tf32", "bf16", "fp16", "fp8", "fp4", "int8")
#: Training precisions a workload may ask for (contract).
WORKLOAD_PRECISIONS = ("fp32", "fp16", "bf16", "fp8", "fp4")
#: What a workload runs (contract): training steps or serving requests.
WORKLOAD_KINDS = ("training", "inference")
#: How a server batches requests (``workload.batching``; docs/model.md §D2).
SERVING_BATCHING = ("continuous", "static")
#: How requests reach a server (``workload.arrivals``; docs/model.md §D2): a closed loop of
#: ``global_batch_size`` clients, each sending its next request when its last one ends, or an
#: offline run of ``global_batch_size`` requests queued at once that ends with its last.
SERVING_ARRIVALS = ("closed_loop", "offline", "poisson")
#: How a server's scheduler reserves KV cache for a running request (``workload.kv_cache_
#: reservation``; docs/model.md §D3): its whole context up front, or blocks as its tokens come.
KV_CACHE_RESERVATIONS = ("full_context", "on_demand")
#: How a decode step's attention kernel reads the KV cache of a grouped-query model (§D1).
DECODE_KV_READS = ("per_kv_head", "per_query_head")
TOPOLOGIES = ("switch", "fat-tree", "ring", "torus-2d", "torus-3d", "mesh-2d")
FFN_ACTIVATIONS = ("gelu", "swiglu")
#: Activation recompute: none; Megatron's selective (the attention core); full (the layer
#: input only); selective_op, PyTorch's per-op selective checkpointing as torchtitan applies
#: it (keeps attention and every second matmul's output; docs/model.md §C2.2); selective_dots,
#: JAX's ``checkpoint_dots_with_no_batch_dims`` as MaxText's ``remat_policy: minimal`` applies
#: it (keeps every weight matmul's output, recomputes the attention core and the elementwise
#: operations).
RECOMPUTE_MODES = ("none", "selective", "full", "selective_op", "selective_dots")
#: How the loss is computed over the logits (docs/model.md §C2.4): Megatron's vocab-parallel
#: cross-entropy (fp32 softmax in place), PyTorch's unfused log_softmax + nll_loss on an fp32
#: copy, a fused kernel that writes the gradient into the 16-bit logits, or the vocab-parallel
#: loss on an fp32 copy of the logits that the model returns (nanotron).
CROSS_ENTROPY_MODES = ("vocab_parallel", "unfused", "fused", "vocab_parallel_fp32")
#: How the optimizer keeps the master weights of a 16-bit model (docs/model.md §C2.1): a full
#: fp32 copy, or only the 16 low bits of each fp32 value (Apex's distributed Adam with
#: ``store_param_remainders``: the bf16 weights hold the high 16 bits).
MASTER_WEIGHTS_MODES = ("fp32", "remainders")
#: Where the gradients of a 16-bit model accumulate (docs/model.md §C2.1): in the main
#: gradient buffer (Megatron's ``main_grad``, FSDP's sharded gradients: ``fp32_main_grads``
#: says its dtype), or in nanotron's ``FP32GradientAccumulator``: an fp32 buffer of every
#: parameter besides the 16-bit ``.grad`` autograd writes each backward and, with data
#: parallelism, PyTorch DDP's 16-bit buckets.
GRADIENT_BUFFER_MODES = ("main", "fp32_accumulator")
#: How a 16-bit model's weight gradients join the step's sum over micro-batches (docs/model.md
#: §C6.3): in the weight-gradient GEMM itself (Megatron's ``gradient_accumulation_fusion``
#: into ``main_grad``; a single micro-batch's gradient as written), or in a kernel of its own
#: every micro-batch that adds the 16-bit gradient autograd wrote into an fp32 buffer (the
#: Llama 3 paper's "FP32 gradient accumulation during backward computation over multiple
#: micro-batches", §3.3.2; nanotron's ``FP32GradientAccumulator`` hooks).
GRAD_ACCUMULATION_MODES = ("fused", "unfused_fp32")
#: Which implementation shards the parameters under ZeRO-3 (docs/model.md §C3.3), for the
#: memory-bound copies it makes beside its collectives every micro-batch: none (Megatron-Core's
#: and DeepSpeed's contiguous buffers, XLA's compiled program), PyTorch's FSDP1
#: (``FlatParameter``: the flat gradient assembled from its views' gradients, cast to the
#: reduce dtype and pre-divided before the reduce-scatter) or FSDP2 (``fully_shard``, per
#: parameter: each all-gather copied out into the parameters, the gradients copied into the
#: reduce-scatter input).
FSDP_IMPLEMENTATIONS = ("none", "fsdp1", "fsdp2")
#: How layers are cut into pipeline stages (docs/model.md §C2.3): the same number of layers
#: per stage (Megatron); by compute cost with the output layer counted as vocab x h
#: (nanotron's ``build_model``: the first stages take more layers); or the same number of
#: layer slots, the embedding and the output layer taking one each (Llama 3 §3.3.2).
PIPELINE_BALANCE_MODES = ("layers", "compute", "ends_as_layers")
#: The fused attention kernel a framework runs (docs/model.md §C6.2): FlashAttention-2
#: (flash-attn, PyTorch SDPA's flash backend), cuDNN's fused attention (Transformer Engine's
#: FusedAttention), FlashAttention-3, TensorRT-LLM's own fused MHA (its context kernels on
#: Hopper, trtllm-gen on Blackwell; serving, docs/model.md §D1), or Tri Dao's FlashAttention in
#: Triton on the pre-MLIR Triton compiler (llm-foundry's MPT ``attn_impl: triton``).
ATTENTION_KERNELS = ("fa2", "cudnn", "fa3", "trtllm", "triton")
#: FP8 scaling recipes (docs/model.md §C6.4): one scale per tensor (Transformer Engine's delayed
#: and current scaling, torchao's tensorwise), one per row of each operand (torchao's rowwise,
#: axiswise; torchao/float8/config.py Float8LinearRecipeName), or one per 32-element block
#: (MXFP8, Transformer Engine's MXFP8BlockScaling on Blackwell)
FP8_RECIPES = ("tensorwise", "rowwise", "mxfp8")
#: The order in which the parallel dimensions take consecutive ranks, innermost first
#: (docs/model.md §C3): Megatron-Core's ``RankGenerator`` order, "tp-cp-ep-dp-pp" by default and
#: "tp-cp-ep-pp-dp" with ``--use-tp-pp-dp-mapping``; expert parallelism takes the inner ranks of
#: the data-parallel dimension as there, so it is not written. Every permutation (the default
#: first); devices are numbered node by node, so the innermost dimensions share a node.
RANK_ORDERS = tuple("-".join(p) for p in itertools.permutations(("tp", "cp", "dp", "pp")))
#: How ranks are laid on a direct topology's axes (ring, torus, mesh; docs/model.md §C3): the
#: axes of the network's ``shape`` from the fastest-varying to the slowest, x the first axis.
#: "xyz" is row-major over the shape as written; on a 2-D shape z has extent 1.
GRID_AXES = ("xyz", "xzy", "yxz", "yzx", "zxy", "zyx")
HBM_TECHNOLOGIES = ("hbm2", "hbm2e", "hbm3", "hbm3e", "hbm4")
#: Device families with kernel calibration in configs/calibration/kernels.yaml.
DEVICE_FAMILIES = ("volta", "ampere", "hopper", "blackwell", "tpu", "generic")


# ----------------------------------------------------------------------------------- devices
@dataclass(frozen=True, kw_only=True)
class DeviceSpec:
    """A device described by its datasheet (spec mode)."""

    name: str
    mode: str = key("mode", choices=("spec",), default="spec")
    description: str = key("description", default="")
    family: str = key(
        "family", choices=DEVICE_FAMILIES, default="generic", doc="kernel calibration"
    )
    process_node_nm: float = key("process_node_nm", gt=0, doc="logic process node")
    die_area_mm2: float = key("die_area_mm2", gt=0, doc="compute silicon, all dies")
    num_dies: int = key("num_dies", ge=1, default=1)
    tdp_W: float = key("tdp_W", gt=0)
    power_limit_W: float = key(
        "power_limit_W", gt=0, default=0.0,
        doc="enforced board power limit below the TDP (nvidia-smi -pl); absent: the TDP",
    )  # fmt: skip
    num_sms: int = key("num_sms", ge=1, doc="compute clusters (SMs, MXUs)")
    clock_Hz: float = key("clock_GHz", scale=1e9, gt=0)
    peak_flops: Mapping[str, float] = key(
        "peak_dense_TFLOPS", scale=TERA, gt=0, keys=PEAK_PRECISIONS, doc="dense FLOP/s by precision"
    )
    hbm_technology: str = key("hbm_technology", choices=HBM_TECHNOLOGIES)
    hbm_num_stacks: int = key("hbm_num_stacks", ge=1)
    hbm_capacity_B: float = key("hbm_capacity_GiB", scale=GiB, gt=0)
    hbm_bandwidth_Bps: float = key("hbm_bandwidth_GBps", scale=GB, gt=0)
    l2_capacity_B: float = key("l2_capacity_MiB", scale=MiB, ge=0)
    l1_capacity_per_sm_B: float = key("l1_capacity_per_sm_KiB", scale=KiB, ge=0)
    register_file_per_sm_B: float = key("register_file_per_sm_KiB", scale=KiB, ge=0)
    host_to_device_Bps: float = key(
        "host_to_device_GBps", scale=GB, ge=0, default=0.0,
        doc="host-to-device copy rate per device while every device of the node copies "
            "(nvbandwidth host_to_all); absent: PCIe Gen5 x16's measured rate",
    )  # fmt: skip
    device_to_host_Bps: float = key(
        "device_to_host_GBps", scale=GB, ge=0, default=0.0,
        doc="device-to-host copy rate per device while every device of the node copies "
            "(nvbandwidth all_to_host); absent: PCIe Gen5 x16's measured rate",
    )  # fmt: skip
    gemm_efficiency: Mapping[str, float] = key(
        "gemm_efficiency", gt=0, le=1, keys=PEAK_PRECISIONS, default={},
        doc="achieved/peak of large GEMMs measured on this device (its own matmul "
            "microbenchmark, fitted by benchmarks/fit_gemm.py); absent: the family's",
    )  # fmt: skip
    attention_speedup: Mapping[str, float] = key(
        "attention_speedup", gt=0, keys=ATTENTION_KERNELS, default={},
        doc="a fused attention kernel's rate on this device over its family's calibrated "
            "rate, measured with both on one software release (docs/model.md §C6.2); "
            "absent: 1",
    )  # fmt: skip

    @property
    def precisions(self) -> tuple[str, ...]:
        """Precisions with a datasheet dense peak."""
        return tuple(self.peak_flops)

    @property
    def power_W(self) -> float:
        """The board power the device runs at: its power limit where one is set below the
        TDP, else the TDP."""
        limit = self.power_limit_W
        return min(limit, self.tdp_W) if limit > 0 else self.tdp_W


# ---------------------------------------------------------------------------------- networks
@dataclass(frozen=True, kw_only=True)
class ScaleUpSpec:
    """The scale-up domain (one node of the scenario): NVSwitch, ICI torus, wafer mesh."""

    topology: str = key("topology", choices=TOPOLOGIES)
    domain_size: int = key("domain_size", ge=1)
    bandwidth_Bps: float = key("bandwidth_GBps", scale=GB, gt=0, doc="per device, per direction")
    latency_s: float = key("latency_us", scale=1e-6, ge=0)
    shape: tuple[int, ...] = key("shape", ge=1, default=())


@dataclass(frozen=True, kw_only=True)
class ScaleOutSpec:
    """The network between scale-up domains."""

    topology: str = key("topology", choices=TOPOLOGIES)
    bandwidth_Bps: float = key("bandwidth_GBps", scale=GB, gt=0, doc="per device, per direction")
    latency_s: float = key("latency_us", scale=1e-6, ge=0)
    shape: tuple[int, ...] = key("shape", ge=1, default=())


@dataclass(frozen=True, kw_only=True)
class NetworkSpec:
    name: str
    description: str = key("description", default="")
    scale_up: ScaleUpSpec = key("scale_up")
    scale_out: ScaleOutSpec = key("scale_out")


# ------------------------------------------------------------------------------------ models
@dataclass(frozen=True, kw_only=True)
class TransformerSpec:
    """Decoder-only transformer (GPT/Llama style), optionally mixture-of-experts."""

    name: str
    kind: str = key("kind", choices=("transformer",))
    description: str = key("description", default="")
    num_layers: int = key("num_layers", ge=1)
    hidden_size: int = key("hidden_size", ge=1)
    num_attention_heads: int = key("num_attention_heads", ge=1)
    num_kv_heads: int = key("num_kv_heads", ge=1, default=0, doc="0 = num_attention_heads")
    head_dim: int = key(
        "head_dim", ge=1, default=0,
        doc="width of one attention head; 0 = hidden_size / num_attention_heads (serving "
            "models a head wider than that, e.g. Qwen3's 128 at hidden 4096 and 64 heads)",
    )  # fmt: skip
    ffn_hidden_size: int = key("ffn_hidden_size", ge=1, default=0, doc="0 = 4 * hidden_size")
    ffn_activation: str = key("ffn_activation", choices=FFN_ACTIVATIONS, default="gelu")
    seq_length: int = key("seq_length", ge=1)
    vocab_size: int = key("vocab_size", ge=1)
    num_experts: int = key("num_experts", ge=1, default=1)
    experts_per_token: int = key("experts_per_token", ge=1, default=1)
    dropout: bool = key("dropout", default=False, doc="attention/hidden dropout (GPT-3 style)")
    tied_embeddings: bool = key(
        "tied_embeddings", default=False,
        doc="the output layer reuses the input embedding's vocab x hidden matrix (GPT-2/3, "
            "Megatron's GPT default, MPT, BLOOM); Llama-style models keep two",
    )  # fmt: skip
    # Serving only (docs/model.md §D7): DeepSeek-V2/V3's multi-head latent attention, shared
    # experts and dense layers before the MoE ones
    kv_lora_rank: int = key(
        "kv_lora_rank", ge=0, default=0,
        doc="serving: multi-head latent attention's compressed KV width, cached once a token "
            "for every head (DeepSeek-V3 512; 0: none); head_dim is then each head's no-RoPE "
            "query/key and value width",
    )  # fmt: skip
    q_lora_rank: int = key(
        "q_lora_rank", ge=0, default=0,
        doc="serving: with latent attention, the queries' compressed width (DeepSeek-V3 1536; "
            "0: queries projected from the hidden state)",
    )  # fmt: skip
    rope_head_dim: int = key(
        "rope_head_dim", ge=0, default=0,
        doc="serving: with latent attention, the decoupled RoPE query/key width a head adds, "
            "its key shared by the heads and cached beside the latent (DeepSeek-V3 64)",
    )  # fmt: skip
    moe_ffn_hidden_size: int = key(
        "moe_ffn_hidden_size", ge=0, default=0,
        doc="serving: each routed and shared expert's width (0: ffn_hidden_size, which the "
            "dense layers take)",
    )  # fmt: skip
    num_shared_experts: int = key(
        "num_shared_experts", ge=0, default=0,
        doc="serving: experts every token runs beside its routed ones (DeepSeek-V3 1)",
    )  # fmt: skip
    first_dense_layers: int = key(
        "first_dense_layers", ge=0, default=0,
        doc="serving: the first layers are dense MLPs of ffn_hidden_size before the MoE ones "
            "(DeepSeek-V3's first_k_dense_replace 3)",
    )  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class LstmSpec:
    """The DeepFlow paper's LSTM language model (docs/model.md §B4.7)."""

    name: str
    kind: str = key("kind", choices=("lstm",))
    description: str = key("description", default="")
    num_layers: int = key("num_layers", ge=1)
    hidden_size: int = key("hidden_size", ge=1)
    vocab_size: int = key("vocab_size", ge=1)
    seq_length: int = key("seq_length", ge=1)
    projection_size: int = key("projection_size", ge=0, default=0, doc="0 = no projection")
    num_gates: int = key("num_gates", ge=1, default=4)


@dataclass(frozen=True, kw_only=True)
class GemmSpec:
    """One GEMM C[m, n] = A[m, k] @ B[k, n]."""

    name: str
    kind: str = key("kind", choices=("gemm",))
    description: str = key("description", default="")
    m: int = key("m", ge=1)
    k: int = key("k", ge=1)
    n: int = key("n", ge=1)


ModelSpec = TransformerSpec | LstmSpec | GemmSpec


# -------------------------------------------------------------------------- scenario parts
@dataclass(frozen=True, kw_only=True)
class WorkloadSpec:
    """What runs: training steps, or serving requests (``kind: inference``: ``global_batch_size``
    requests of ``input_tokens`` prompt and ``output_tokens`` output run together on each
    data-parallel replica)."""

    model: ModelSpec
    kind: str = key("kind", choices=WORKLOAD_KINDS, default="training")
    global_batch_size: int = key("global_batch_size", ge=1, default=1)
    precision: str = key("precision", choices=WORKLOAD_PRECISIONS, default="bf16")
    input_tokens: int = key("input_tokens", ge=1, default=1024, doc="serving: prompt length")
    output_tokens: int = key("output_tokens", ge=1, default=256, doc="serving: tokens generated")
    kv_cache_precision: str = key(
        "kv_cache_precision", choices=("", *WORKLOAD_PRECISIONS), default="",
        doc="serving: KV-cache element type (default: the workload's precision)",
    )  # fmt: skip
    # serving: how the server schedules requests (docs/model.md §D2)
    batching: str = key(
        "batching", choices=SERVING_BATCHING, default="continuous",
        doc="serving: continuous (in-flight batching, prompts join running decodes) or static "
            "(a batch starts together and finishes together)",
    )  # fmt: skip
    arrivals: str = key(
        "arrivals", choices=SERVING_ARRIVALS, default="closed_loop",
        doc="serving: closed_loop (global_batch_size clients, each sending its next request when "
            "its last ends: the server's steady state; with static batching lockstep rounds "
            "whose first request back runs alone) or offline (global_batch_size requests "
            "issued at once, the run ending with the last: trtllm-bench throughput, a static "
            "batch; requests beyond what runs at once follow in waves, the last one partial) "
            "or poisson (global_batch_size requests per replica arriving as a Poisson process "
            "at request_rate: vLLM's and SGLang's serving benchmarks at a finite rate)",
    )  # fmt: skip
    request_rate: float = key(
        "request_rate", ge=0, default=0.0,
        doc="serving: requests per second the whole system is offered (arrivals: poisson), "
            "spread evenly over the data-parallel replicas",
    )  # fmt: skip
    max_batch_size: int = key(
        "max_batch_size", ge=0, default=0,
        doc="serving: the scheduler's cap on requests running at once (0: what the KV cache holds)",
    )  # fmt: skip
    max_num_tokens: int = key(
        "max_num_tokens", ge=0, default=0,
        doc="serving: the scheduler's cap on tokens (prompt + decode) per iteration (0: none)",
    )  # fmt: skip
    prompt_tokens_per_iteration: int = key(
        "prompt_tokens_per_iteration", ge=0, default=0,
        doc="serving: prompt tokens the scheduler takes into one iteration when prompts wait "
            "together (fixed-length clients that start together, an offline queue): its token "
            "budget or chunked-prefill size, so such prompts join in bursts that stay in phase "
            "(docs/model.md §D2; Poisson arrivals only in a backlog); 0: prompts arrive apart "
            "and join one an iteration",
    )  # fmt: skip
    host_s_per_request: float = key(
        "host_us_per_request", scale=1e-6, ge=0, default=0.0,
        doc="serving: the framework's host time per running request and iteration (an iteration "
            "lasts at least that many; 0: none)",
    )  # fmt: skip
    kv_cache_reservation: str = key(
        "kv_cache_reservation", choices=KV_CACHE_RESERVATIONS, default="full_context",
        doc="serving: full_context (a request is admitted only with KV blocks for its prompt and "
            "all its output: TensorRT-LLM's GUARANTEED_NO_EVICT) or on_demand (paged blocks "
            "allocated as its tokens come, preempting when they run out: vLLM, LMDeploy "
            "TurboMind 2.x)",
    )  # fmt: skip
    kv_cache_memory_fraction: float = key(
        "kv_cache_memory_fraction", ge=0, lt=1, default=0.0,
        doc="serving: the share of the memory left free after the weights, one iteration's "
            "activations, the workspace, the CUDA context and NCCL's buffers that the server "
            "preallocates as its KV-cache pool (TensorRT-LLM's kv_cache_free_gpu_mem_fraction; "
            "0: the pool is what the caching allocator's fragmentation leaves)",
    )  # fmt: skip
    caching_allocator: bool = key(
        "caching_allocator", default=True,
        doc="serving: the server's device buffers come from PyTorch's caching allocator, whose "
            "fragmentation adds to the weights', activations' and KV cache's bytes; false for a "
            "C++ engine that allocates them once with cudaMalloc / cudaMallocAsync (TensorRT-LLM's "
            "TensorRT runtime, LMDeploy TurboMind)",
    )  # fmt: skip
    cuda_graph_padding: bool = key(
        "cuda_graph_padding", default=False,
        doc="serving: decode-only iterations run the CUDA graph captured for the smallest "
            "listed batch that holds them, at most the executor's min(max_batch_size, "
            "max_num_tokens) (TensorRT-LLM's cuda_graph_config enable_padding)",
    )  # fmt: skip
    first_token_from_decode: bool = key(
        "first_token_from_decode", default=False,
        doc="serving: the prefill pass skips each prompt's last token, which the next decode "
            "iteration runs, so the first token comes from that iteration (LMDeploy TurboMind "
            "before v0.1.0a2: ContextDecode over input_length - 1)",
    )  # fmt: skip
    weight_scale_block: int = key(
        "weight_scale_block", ge=0, default=0,
        doc="serving: quantized weight elements per 1-byte block scale (NVFP4 16, MXFP4 and "
            "MXFP8 32; 0: FP4 weights are NVFP4, wider ones carry per-tensor scales only)",
    )  # fmt: skip
    decode_kv_reads: str = key(
        "decode_kv_reads", choices=DECODE_KV_READS, default="per_kv_head",
        doc="serving: per_kv_head (a decode's attention kernel reads each KV head's cache once "
            "for its query heads: FlashAttention, XQA) or per_query_head (each query head's "
            "thread block streams its KV head's cache: TensorRT-LLM's masked MHA before "
            "v0.7.1)",
    )  # fmt: skip
    # serving cost inputs (docs/model.md §D4)
    electricity_usd_per_kWh: float = key(
        "electricity_usd_per_kWh", ge=0, default=0.08,
        doc="US industrial average 2024: 8.1 cents/kWh (EIA Electric Power Monthly, Table 5.6.A)",
    )  # fmt: skip
    amortization_years: float = key(
        "amortization_years",
        gt=0,
        default=4.0,
        doc="service life over which a device's cost is spread",
    )


#: Workload kinds that read a mapping knob: all built-in ones, the transformer, CrossFlow's
#: GEMM and LSTM (kernel parallelism).
_ALL = ("transformer", "lstm", "gemm")
_LLM = ("transformer",)
_CROSSFLOW = ("lstm", "gemm")


@dataclass(frozen=True, kw_only=True)
class MappingSpec:
    """How the workload runs: parallel degrees, micro-batching, recompute, ZeRO (contract).

    Every field is a mapping knob (:func:`knob`): the knob table
    (:data:`deepflow.config.mapping.KNOBS`) and from it the oracle's mapping columns, the
    design-space labeller and best-mapping's result are derived from these declarations.
    """

    data_parallel: int = knob("data_parallel", workloads=_ALL, ge=1, default=1)
    tensor_parallel: int = knob("tensor_parallel", workloads=_ALL, ge=1, default=1)
    pipeline_parallel: int = knob("pipeline_parallel", workloads=_ALL, ge=1, default=1)
    context_parallel: int = knob("context_parallel", workloads=_LLM, ge=1, default=1)
    expert_parallel: int = knob("expert_parallel", workloads=_LLM, ge=1, default=1)
    expert_tensor_parallel: int = knob(
        "expert_tensor_parallel",
        workloads=_LLM,
        ge=0,
        default=0,
        doc="ranks that split each expert's matrices (Megatron-Core --expert-tensor-parallel-"
        "size, TensorRT-LLM moe_tensor_parallel_size); 0: tensor_parallel. Below "
        "tensor_parallel (serving only) the tensor_parallel / expert_tensor_parallel ranks of "
        "each tensor-parallel group hold different experts for the same tokens (vLLM "
        "--enable-expert-parallel, TensorRT-LLM moe_expert_parallel_size), and the "
        "expert-parallel group spans data-parallel replicas beyond them; a multiple of "
        "tensor_parallel (serving only) splits each expert over the ranks of that many / "
        "tensor_parallel data-parallel replicas, whose tokens are gathered (attention data "
        "parallelism with tensor-parallel experts)",
    )
    data_parallel_replicas: int = knob(
        "data_parallel_replicas",
        workloads=_LLM,
        ge=1,
        default=1,
        doc="hybrid sharding (HSDP; MaxText's ICI FSDP x DCN data parallelism): the "
        "data-parallel ranks form this many replicas, each sharding the model states over "
        "data_parallel / data_parallel_replicas contiguous ranks; the replicas all-reduce "
        "the sharded gradients (docs/model.md §C3.2)",
    )
    prefill_replicas: int = knob(
        "prefill_replicas",
        workloads=_LLM,
        ge=0,
        default=0,
        doc="serving: data-parallel replicas that run prompts only, sending each request's KV "
        "cache to the other replicas, which decode (disaggregated prefill and decode pools: "
        "DistServe, Splitwise, NVIDIA Dynamo; docs/model.md §D6); 0: every replica runs both",
    )
    prefill_tensor_parallel: int = knob(
        "prefill_tensor_parallel",
        workloads=_LLM,
        ge=0,
        default=0,
        doc="serving: the tensor-parallel degree of each prefill replica (0: tensor_parallel, "
        "which the decode replicas take); the devices are then pipeline_parallel × "
        "(prefill_replicas × prefill_tensor_parallel + decode replicas × tensor_parallel)",
    )
    micro_batch_size: int = knob("micro_batch_size", workloads=_LLM, ge=1, default=1)
    virtual_pipeline_stages: int = knob("virtual_pipeline_stages", workloads=_LLM, ge=1, default=1)
    sequence_parallel: bool = knob("sequence_parallel", workloads=_LLM, default=True)
    activation_recompute: str = knob(
        "activation_recompute",
        workloads=_LLM,
        column="recompute",
        choices=RECOMPUTE_MODES,
        default="selective",
    )
    zero_stage: int = knob("zero_stage", workloads=_LLM, ge=0, le=3, default=1)
    # Placement (docs/model.md §C3, §B4.10): which dimensions share a node, and how a direct
    # topology's axes hold the ranks (CrossFlow kinds: tp is the kernel-parallel group, no cp).
    rank_order: str = knob(
        "rank_order",
        workloads=_ALL,
        choices=RANK_ORDERS,
        default="tp-cp-dp-pp",
        doc="parallel dimensions from the innermost (consecutive ranks) outwards",
    )
    grid_axes: str = knob(
        "grid_axes",
        workloads=_ALL,
        choices=GRID_AXES,
        default="xyz",
        doc="a torus or mesh's axes from the fastest-varying rank index to the slowest",
    )
    # Partial recompute and activation offload (docs/model.md §C2.3): Megatron-Core's
    # --recompute-method block --recompute-num-layers N and --cpu-offloading-num-layers N
    recompute_num_layers: int = knob(
        "recompute_num_layers",
        workloads=_LLM,
        ge=0,
        default=0,
        doc="with full recompute: the layers of each model chunk recomputed (0: all)",
    )
    activation_offload_layers: int = knob(
        "activation_offload_layers",
        workloads=_LLM,
        ge=0,
        default=0,
        doc="layers of each stage whose activations are offloaded to host memory",
    )
    # CrossFlow kernel parallelism for gemm/lstm workloads (docs/model.md §B4.6):
    # tensor_parallel devices split each GEMM as CR (K split) or RC (M split kernel_parallel_dim1
    # = tensor_parallel / kernel_parallel_dim2 ways, N split kernel_parallel_dim2 ways).
    kernel_partition: str = knob(
        "kernel_partition", workloads=_CROSSFLOW, choices=("rc", "cr"), default="rc"
    )
    # How the framework runs (implementers' keys, docs/model.md §C1.2 and §3.2):
    flash_attention: bool = knob(
        "flash_attention",
        workloads=_LLM,
        framework=True,
        default=True,
        doc="fused attention kernel",
    )
    attention_kernel: str = knob(
        "attention_kernel",
        workloads=_LLM,
        framework=True,
        choices=ATTENTION_KERNELS,
        default="fa2",
        doc="the fused attention kernel: FlashAttention-2, cuDNN, FlashAttention-3, "
        "TensorRT-LLM's, FlashAttention in pre-MLIR Triton",
    )
    tp_comm_overlap: bool = knob(
        "tp_comm_overlap",
        workloads=_LLM,
        framework=True,
        default=False,
        doc="TP comm under GEMMs",
    )
    tp_async_backward: bool = knob(
        "tp_async_backward",
        workloads=_LLM,
        framework=True,
        default=True,
        doc="backward TP collectives under the other GEMM (Megatron) or waited on (DTensor)",
    )
    recorded_tp_gradients: bool = knob(
        "recorded_tp_gradients",
        workloads=_LLM,
        framework=True,
        default=False,
        doc="the backward's asynchronous TP reduce-scatters record their full-length input "
            "gradients on NCCL's stream, so the caching allocator holds each block until the "
            "GPU has run the collective (nanotron): reserved memory",
    )  # fmt: skip
    overlap_grad_reduce: bool = knob(
        "overlap_grad_reduce",
        workloads=_LLM,
        framework=True,
        default=True,
        doc="DP comm overlap",
    )
    fsdp_implementation: str = knob(
        "fsdp_implementation",
        workloads=_LLM,
        framework=True,
        choices=FSDP_IMPLEMENTATIONS,
        default="none",
        doc="ZeRO-3's implementation, for its per-micro-batch gradient and parameter copies: "
            "none (contiguous buffers, compiled), PyTorch FSDP1 (FlatParameter) or FSDP2",
    )  # fmt: skip
    fsdp_reduce_fp32: bool = knob(
        "fsdp_reduce_fp32",
        workloads=_LLM,
        framework=True,
        default=False,
        doc="FSDP reduce-scatters the gradients in fp32 (MixedPrecision reduce_dtype float32), "
            "cast from the 16-bit ones",
    )  # fmt: skip
    overlap_p2p_comm: bool = knob(
        "overlap_p2p_comm",
        workloads=_LLM,
        framework=True,
        default=False,
        doc="pipeline sends under the interleaved schedule's compute",
    )
    # What the framework keeps in memory (docs/model.md §C2.1, §C2.4):
    fp32_main_grads: bool = knob(
        "fp32_main_grads",
        workloads=_LLM,
        framework=True,
        default=True,
        doc="fp32 gradient buffers (Megatron) or 16-bit",
    )
    master_weights: str = knob(
        "master_weights",
        workloads=_LLM,
        framework=True,
        choices=MASTER_WEIGHTS_MODES,
        default="fp32",
        doc="the optimizer's master copy: fp32, or the low 16 bits of a bf16 model's",
    )
    gradient_buffers: str = knob(
        "gradient_buffers",
        workloads=_LLM,
        framework=True,
        choices=GRADIENT_BUFFER_MODES,
        default="main",
        doc="gradients accumulate in the main buffer, or nanotron's fp32 accumulator",
    )
    grad_accumulation: str = knob(
        "grad_accumulation",
        workloads=_LLM,
        framework=True,
        choices=GRAD_ACCUMULATION_MODES,
        default="fused",
        doc="gradients summed over micro-batches in the weight-gradient GEMM, or by a "
        "kernel of their own into fp32 buffers every micro-batch",
    )
    pipeline_balance: str = knob(
        "pipeline_balance",
        workloads=_LLM,
        framework=True,
        choices=PIPELINE_BALANCE_MODES,
        default="layers",
        doc="stages of equal layers; of equal compute with the output layer (nanotron); or of "
        "equal layer slots, the embedding and the output layer with its loss taking one "
        "each (Llama 3; Megatron-Core's account_for_embedding/loss_in_pipeline_split)",
    )
    fused_swiglu: bool = knob(
        "fused_swiglu",
        workloads=_LLM,
        framework=True,
        default=True,
        doc="SwiGLU one fused kernel saving its fc1 output, or eager SiLU and mul (the SiLU "
            "output kept too, more bytes moved)",
    )  # fmt: skip
    fused_norm: bool = knob(
        "fused_norm",
        workloads=_LLM,
        framework=True,
        default=True,
        doc="each norm one fused kernel, or PyTorch eager's composite RMSNorm (fp32 upcast, "
            "pow, mean, rsqrt, mul, cast, mul: docs/model.md §C6.3)",
    )  # fmt: skip
    fused_rotary: bool = knob(
        "fused_rotary",
        workloads=_LLM,
        framework=True,
        default=True,
        doc="rotary embedding one fused kernel, or PyTorch eager's fp32 complex multiply "
            "(cast, complex mul, cast)",
    )  # fmt: skip
    fp8_params: bool = knob(
        "fp8_params",
        workloads=_LLM,
        framework=True,
        default=False,
        doc="the weights themselves in FP8 (TE fp8_model_init, fp8_param_gather)",
    )
    fp8_weight_cache: bool = knob(
        "fp8_weight_cache",
        workloads=_LLM,
        framework=True,
        default=True,
        doc="FP8 weight copies kept per step (Transformer Engine)",
    )
    fp8_recipe: str = knob(
        "fp8_recipe",
        workloads=_LLM,
        framework=True,
        choices=FP8_RECIPES,
        default="tensorwise",
        doc="FP8 scales per tensor, per row of each operand (torchao rowwise), or per "
        "32-element block (MXFP8)",
    )
    cross_entropy: str = knob(
        "cross_entropy",
        workloads=_LLM,
        framework=True,
        choices=CROSS_ENTROPY_MODES,
        default="vocab_parallel",
        doc="the loss kernel: its logits buffers",
    )
    kernel_parallel_dim2: int = knob("kernel_parallel_dim2", workloads=_CROSSFLOW, ge=1, default=1)

    @property
    def kernel_parallel_dim1(self) -> int:
        """RC's M split (CR's K split): tensor_parallel / kernel_parallel_dim2."""
        return self.tensor_parallel // self.kernel_parallel_dim2

    @property
    def num_devices(self) -> int:
        """Devices the mapping occupies: data × tensor × pipeline × context parallel, or, for
        disaggregated pools of their own tensor-parallel degrees, each pool's replicas ×
        its degree, × pipeline × context parallel (docs/model.md §D6)."""
        return self.pipeline_parallel * self.context_parallel * self.replica_devices

    @property
    def replica_devices(self) -> int:
        """The tensor-parallel ranks of all replicas: data_parallel × tensor_parallel, with
        the prefill pool's at its own degree."""
        tp_p = self.prefill_tensor_parallel or self.tensor_parallel
        decode = self.data_parallel - self.prefill_replicas
        return self.prefill_replicas * tp_p + decode * self.tensor_parallel


@dataclass(frozen=True, kw_only=True)
class SystemSpec:
    device: DeviceSpec | DesignDeviceSpec
    network: NetworkSpec
    devices_per_node: int = key("devices_per_node", ge=1)
    num_nodes: int = key("num_nodes", ge=1, default=1)

    @property
    def num_devices(self) -> int:
        return self.devices_per_node * self.num_nodes


@dataclass(frozen=True, kw_only=True)
class FrameworkSpec:
    """A training stack's documented behaviour (``configs/frameworks/``): the values its
    framework switches of the mapping take unless the scenario's mapping says otherwise."""

    name: str
    description: str = ""
    #: (knob, value) for framework switches of the knob table, in the profile's order
    mapping: tuple[tuple[str, Any], ...] = ()
    #: where each behaviour is documented (docs, code, papers)
    sources: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class Scenario:
    """One fully resolved evaluation input."""

    system: SystemSpec
    workload: WorkloadSpec
    mapping: MappingSpec
    source: str = ""
    #: the training stack's profile, when the scenario names one
    framework: FrameworkSpec | None = None


# ------------------------------------------------------------------------------ technology
@dataclass(frozen=True, kw_only=True)
class SramTechSpec:
    """One SRAM level's technology (docs/model.md §B3.4)."""

    area_per_bit_mm2: float = key("area_per_bit_mm2", gt=0, doc="incl. cache periphery")
    energy_per_bit_J: float = key("energy_per_bit_fJ", scale=1e-15, gt=0)
    static_power_per_bit_W: float = key("static_power_per_bit_pW", scale=1e-12, ge=0)
    bank_capacity_B: float = key("bank_capacity_KiB", scale=KiB, gt=0)
    overhead_fraction: float = key("overhead_fraction", ge=0, lt=1, doc="area that is not cells")
    controller_area_per_bank_per_sm_mm2: float = key(
        "controller_area_per_bank_per_sm_mm2", ge=0, default=0.0
    )


@dataclass(frozen=True, kw_only=True)
class SramLevelsSpec:
    l2: SramTechSpec = key("l2")
    l1: SramTechSpec = key("l1")
    register_file: SramTechSpec = key("register_file")


@dataclass(frozen=True, kw_only=True)
class LogicTechSpec:
    """A logic process node: compute units, voltages and SRAM (docs/model.md §B3.1–3.4)."""

    name: str
    kind: str = key("kind", choices=("logic",))
    description: str = key("description", default="")
    process_node_nm: float = key("process_node_nm", gt=0)
    mcu_area_mm2: float = key("mcu_area_mm2", gt=0, doc="one matrix unit (tensor core) + SM share")
    mcu_flops_per_cycle: float = key("mcu_flops_per_cycle", gt=0, doc="dense fp16 FLOP/cycle")
    mcu_nominal_power_W: float = key("mcu_nominal_power_W", gt=0, doc="at nominal V and f")
    mcus_per_sm: int = key("mcus_per_sm", ge=1)
    nominal_freq_Hz: float = key("nominal_freq_GHz", scale=1e9, gt=0)
    nominal_voltage_V: float = key("nominal_voltage_V", gt=0)
    threshold_voltage_V: float = key("threshold_voltage_V", gt=0)
    margin_voltage_V: float = key("margin_voltage_V", ge=0)
    precision_ratio: Mapping[str, float] = key(
        "precision_ratio",
        gt=0,
        keys=PEAK_PRECISIONS,
        default={"fp16": 1.0, "bf16": 1.0},
        doc="dense FLOP/cycle of each precision relative to fp16",
    )
    sram: SramLevelsSpec = key("sram")
    wafer_cost_usd: float = key("wafer_cost_usd", gt=0)
    defect_density_per_cm2: float = key("defect_density_per_cm2", ge=0)
    yield_alpha: float = key("yield_alpha", gt=0, default=3.0, doc="negative-binomial clustering")


@dataclass(frozen=True, kw_only=True)
class DramTechSpec:
    """A DRAM (HBM) generation per stack (docs/model.md §B3.3, docs/model.md §A3)."""

    name: str
    kind: str = key("kind", choices=("dram",))
    description: str = key("description", default="")
    stack_capacity_B: float = key("stack_capacity_GiB", scale=GiB, gt=0)
    pins_per_stack: int = key("pins_per_stack", ge=1)
    nominal_pin_rate_bps: float = key("nominal_pin_rate_Gbps", scale=1e9, gt=0)
    energy_per_bit_J: float = key("energy_per_bit_pJ", scale=1e-12, gt=0)
    static_power_per_bit_W: float = key("static_power_per_bit_pW", scale=1e-12, ge=0)
    stack_footprint_mm2: float = key("stack_footprint_mm2", gt=0, doc="package area per stack")
    controller_area_mm2: float = key("controller_area_mm2", gt=0, doc="PHY+controller on the die")
    nominal_voltage_V: float = key("nominal_voltage_V", gt=0)
    threshold_voltage_V: float = key("threshold_voltage_V", gt=0)
    margin_voltage_V: float = key("margin_voltage_V", ge=0)
    max_voltage_V: float = key("max_voltage_V", gt=0)
    wires_per_mm: float = key("wires_per_mm", gt=0, doc="die-edge wires per mm")
    latency_s: float = key("latency_ns", scale=1e-9, ge=0)
    cost_usd_per_GiB: float = key("cost_usd_per_GiB", ge=0)


@dataclass(frozen=True, kw_only=True)
class LinkTechSpec:
    """A link (PHY) technology: die-to-die, wafer-scale, SerDes, optical (docs/model.md §A4)."""

    name: str
    kind: str = key("kind", choices=("link",))
    description: str = key("description", default="")
    energy_per_bit_J: float = key("energy_per_bit_pJ", scale=1e-12, gt=0)
    wires_per_mm: float = key("wires_per_mm", gt=0, doc="die-edge wires (lanes) per mm")
    area_per_wire_mm2: float = key("area_per_wire_mm2", gt=0, doc="PHY area per wire")
    nominal_rate_bps: float = key("nominal_rate_Gbps", scale=1e9, gt=0, doc="per wire")
    nominal_voltage_V: float = key("nominal_voltage_V", gt=0)
    threshold_voltage_V: float = key("threshold_voltage_V", gt=0)
    margin_voltage_V: float = key("margin_voltage_V", ge=0)
    latency_s: float = key("latency_us", scale=1e-6, ge=0)
    efficiency: float = key("efficiency", gt=0, le=1, doc="payload fraction (util)")


TechSpec = LogicTechSpec | DramTechSpec | LinkTechSpec


# --------------------------------------------------------------------------- design devices
@dataclass(frozen=True, kw_only=True)
class AreaBudgetSpec:
    """Die area per component, mm² (CrossFlow area_breakdown at HEAD)."""

    core: float = key("core", ge=0)
    l2: float = key("l2", ge=0)
    l1: float = key("l1", ge=0)
    register_file: float = key("register_file", ge=0)
    memory_controller: float = key("memory_controller", ge=0)
    scale_up: float = key("scale_up", ge=0, default=0.0)
    scale_out: float = key("scale_out", ge=0, default=0.0)


@dataclass(frozen=True, kw_only=True)
class PowerBudgetSpec:
    """Power per component, W (CrossFlow power_breakdown at HEAD)."""

    core: float = key("core", ge=0)
    dram: float = key("dram", ge=0)
    l2: float = key("l2", ge=0)
    l1: float = key("l1", ge=0)
    register_file: float = key("register_file", ge=0)
    scale_up: float = key("scale_up", ge=0, default=0.0)
    scale_out: float = key("scale_out", ge=0, default=0.0)


@dataclass(frozen=True, kw_only=True)
class PerimeterBudgetSpec:
    """Fraction of the die edge given to each I/O class."""

    dram: float = key("dram", ge=0, le=1)
    scale_up: float = key("scale_up", ge=0, le=1, default=0.0)
    scale_out: float = key("scale_out", ge=0, le=1, default=0.0)


#: The parts of each design budget, in declaration order (the only list of them).
AREA_PARTS = tuple(f.name for f in dataclasses.fields(AreaBudgetSpec))
POWER_PARTS = tuple(f.name for f in dataclasses.fields(PowerBudgetSpec))
PERIMETER_PARTS = tuple(f.name for f in dataclasses.fields(PerimeterBudgetSpec))


@dataclass(frozen=True, kw_only=True)
class DesignDeviceSpec:
    """A device derived from a technology and area/power/perimeter budgets (design mode)."""

    name: str
    mode: str = key("mode", choices=("design",))
    description: str = key("description", default="")
    family: str = key(
        "family", choices=DEVICE_FAMILIES, default="generic", doc="kernel calibration"
    )
    technology: LogicTechSpec
    dram_technology: DramTechSpec
    scale_up_link: LinkTechSpec | None = None
    scale_out_link: LinkTechSpec | None = None
    die_area_mm2: float = key("die_area_mm2", gt=0)
    package_area_mm2: float = key("package_area_mm2", gt=0)
    tdp_W: float = key("tdp_W", gt=0)
    scale_up_neighbours: int = key("scale_up_neighbours", ge=1, default=1)
    scale_out_neighbours: int = key("scale_out_neighbours", ge=1, default=1)
    area_mm2: AreaBudgetSpec = key("area_mm2")
    power_W: PowerBudgetSpec = key("power_W")
    perimeter_fraction: PerimeterBudgetSpec = key("perimeter_fraction")

    @property
    def precisions(self) -> tuple[str, ...]:
        """Precisions the design's matrix units support."""
        return tuple(self.technology.precision_ratio)


AnyDeviceSpec = DeviceSpec | DesignDeviceSpec
