"""Read a published measurement case (schema: ``docs/validation.md``) as oracle inputs.

A case names its hardware in words ("NVIDIA A100 SXM4 80GB"), its model and its parallel
layout in numbers, and its result in the source's own units (iteration time, tokens/s, TFLOP/s
under the source's FLOP convention, MFU). This module turns any such case into a scenario and
a measured step time, so that ``deepflow validate --cases FILE`` scores cases from sources the
package has never seen, not only the public groups:

* the accelerator by name patterns (:data:`ACCELERATORS`), with the case's stated memory and
  dense peak taken over the preset where they differ (an H100 PCIe, a 40 GB A100);
* the network from the accelerator's usual node, with the case's stated per-GPU scale-out
  bandwidth and GPUs per node;
* how the framework ran (fused attention, overlapped TP and DP communication, dropout): for
  the public groups from their sources (:data:`FRAMEWORKS`), otherwise inferred from the
  case's own text and year (:func:`framework`);
* the measured step time from whichever quantity the source gives (:func:`measured_step_time_s`).

Nothing here is fitted: every rule states the convention it follows.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from functools import cache
from typing import Any

from deepflow.errors import ConfigError

__all__ = [
    "ACCELERATORS",
    "CATEGORIES",
    "FRAMEWORKS",
    "accelerator_presets",
    "batch_scale",
    "case_category",
    "decode_kv_reads",
    "framework",
    "framework_profile",
    "inference_case_scenario",
    "measured_memory_stage",
    "measured_peak_memory",
    "measured_step_time_s",
    "serving_scheduler",
    "slice_shape",
    "software_date",
    "source_year",
    "stated_hbm_bandwidth_GBps",
    "training_case_scenario",
    "trtllm_bench_limits",
]

#: Case categories deepflow scores.
CATEGORIES = ("gemm_microbenchmark", "grouped_gemm_microbenchmark", "serving_gemm_microbenchmark",
              "collective_microbenchmark",
              "float8_linear_microbenchmark", "memory_bandwidth_microbenchmark",
              "attention_microbenchmark",
              "end_to_end_training", "peak_memory", "inference")  # fmt: skip

#: Categories of the public groups, for cases that omit ``category``.
_GROUP_CATEGORY = {
    "mamf_ml_engineering": "gemm_microbenchmark",
    "nccl_tests_a100_node": "collective_microbenchmark",
    "allreduce_bench_h200_node": "collective_microbenchmark",
}

#: Accelerator name patterns (lower case, first match wins) -> (device preset, network preset
#: of its usual node). Variants that share a die share a preset; the case's own memory and peak
#: override the preset's (:func:`_device`).
ACCELERATORS: tuple[tuple[str, str, str], ...] = (
    (r"gb300", "gb300", "gb200-nvl72"),  # GB300 NVL72: the same NVLink 5 rack fabric
    (r"gb200", "gb200", "gb200-nvl72"),
    (r"\bb[23]00", "b200", "dgx-b200"),
    (r"gh200|h200", "h200-sxm-141gb", "dgx-h100"),
    (r"h100|h800", "h100-sxm5-80gb", "dgx-h100"),
    (r"a100.*\b40 ?gb|a100-40", "a100-sxm4-40gb", "dgx-a100"),
    (r"a100|a800", "a100-sxm4-80gb", "dgx-a100"),
    (r"v100", "v100-sxm2-32gb", "dgx-v100"),
    (r"tpu ?-?v4", "tpu-v4", "tpu-v4-pod"),
    (r"tpu ?-?v5 ?(e|lite)", "tpu-v5e", "tpu-v5e-pod"),
    (r"tpu ?-?v5 ?p", "tpu-v5p", "tpu-v5p-pod"),
)

#: How the public groups' frameworks ran where the case leaves it unstated (each entry cites
#: the case's own text or docs/model.md §C3.2): fused attention, TP-communication overlap,
#: data-parallel overlap, dropout in the model. :func:`framework` infers the same flags for
#: other sources from their text and year; a test checks it reproduces this table.
#: The memory-relevant and late-added flags, the same for every public group (Megatron-style
#: fp32 main gradients, Transformer Engine's FP8 weight cache, no pipeline-send overlap).
_CLASSIC = {"p2p_overlap": False, "fp32_main_grads": True, "fp8_weight_cache": True,
            "tp_async_backward": True, "master_weights": "fp32", "recorded_tp_gradients": False,
            "attention_kernel": "fa2", "fp8_params": False, "gradient_buffers": "main",
            "grad_accumulation": "fused",
            "fused_swiglu": True, "fused_norm": True, "fused_rotary": True,
            "fp8_recipe": "tensorwise", "pipeline_balance": "layers"}  # fmt: skip
FRAMEWORKS: dict[str, dict[str, Any]] = {
    # Megatron-LM 2021: unfused attention, DP all-reduce after backward (exposed), GPT dropout;
    # fp32 main gradients (Megatron's mixed-precision optimizer), unfused fp32 cross-entropy.
    "narayanan2021_table1": {"flash": False, "tp_overlap": False, "dp_overlap": False,
                             "dropout": True, **_CLASSIC, "cross_entropy": "vocab_parallel"},
    # Table 2's ZeRO-3 rows ran DeepSpeed's ZeRO-3 of early 2021: every module's all_gather
    # synchronised the device (DeepSpeed PR #1188 and issue #1069, June 2021) and only the next
    # module's gather ran under a module's compute, so dp_overlap False (the oracle's
    # module-by-module ZeRO-3, re-gathering for the recompute forward, docs/model.md §C3.2);
    # the PTD-P rows are Megatron-LM 2021 as in Table 1.
    "narayanan2021_table2": {"flash": False, "tp_overlap": False, "dp_overlap": False,
                             "dropout": True, **_CLASSIC, "cross_entropy": "vocab_parallel"},
    # Megatron-LM 2022 (Korthikanti): unfused attention, DP = 1.
    "korthikanti2022_table5": {"flash": False, "tp_overlap": False, "dp_overlap": False,
                               "dropout": True, **_CLASSIC, "cross_entropy": "vocab_parallel"},
    # Megatron-Core 2024: TE fused attention; --tp-comm-overlap, --overlap-grad-reduce,
    # --overlap-param-gather listed in the case; distributed optimizer; bf16 training forces
    # fp32 gradient accumulation (Megatron-LM arguments.py); pipeline sends overlapped by
    # default (--overlap-p2p-communication; these runs do not interleave, so it hides nothing).
    "megatron_core_h100_2024": {"flash": True, "tp_overlap": True, "dp_overlap": True,
                                "dropout": False, **_CLASSIC, "p2p_overlap": True,
                                "cross_entropy": "vocab_parallel",
                                # TE's FusedAttention (cuDNN), preferred on Hopper
                                "attention_kernel": "cudnn"},
    # llm-foundry: FlashAttention in pre-MLIR Triton (attn_impl: triton, the benchmark
    # harness's default until v0.7.0: :func:`_attention_kernel`), FSDP prefetching, no dropout
    # in MPT runs; MPT's default loss is flash-attn's fused cross-entropy (llm-foundry
    # llm_foundry/models/mpt/modeling_mpt.py: loss_fn 'fused_crossentropy').
    "llm_foundry_a100_80": {"flash": True, "tp_overlap": False, "dp_overlap": True,
                            "dropout": False, **_CLASSIC, "cross_entropy": "fused",
                            "attention_kernel": "triton", "fp8_weight_cache": False},
}  # fmt: skip


@cache
def _preset_raw(kind: str, name: str) -> Mapping[str, Any]:
    """A shipped preset's raw YAML (read once; never mutated here)."""
    from deepflow.config.loader import preset_path, read_yaml

    path = preset_path(kind, name)
    assert path is not None, f"{kind} preset {name} ships with deepflow"
    return read_yaml(path)


def _where(case: dict[str, Any]) -> str:
    return f"case {case.get('id', '?')!r}"


def _devices(case: dict[str, Any]) -> float:
    """Accelerators of a run: ``training.num_gpus``, or ``num_devices`` (TPU cases)."""
    train = case.get("training") or {}
    for key in ("num_gpus", "num_devices"):
        if train.get(key) is not None:
            return _number(case, f"training.{key}", train[key])
    raise ConfigError(f"{_where(case)}: training.num_gpus (or num_devices) is missing.")


def _need(case: dict[str, Any], dotted: str) -> Any:
    value: Any = case
    for part in dotted.split("."):
        if not isinstance(value, dict) or value.get(part) is None:
            raise ConfigError(f"{_where(case)}: {dotted} is missing.")
        value = value[part]
    return value


def _number(case: dict[str, Any], dotted: str, value: Any) -> float:
    try:
        out = float(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{_where(case)}: {dotted} must be a number, got {value!r}.") from None
    if not math.isfinite(out) or out <= 0:
        raise ConfigError(f"{_where(case)}: {dotted} must be a positive number, got {value!r}.")
    return out


def _get(mapping: Any, *keys: str) -> Any:
    """The first of ``keys`` present (not null) in ``mapping``."""
    if not isinstance(mapping, dict):
        return None
    for k in keys:
        if mapping.get(k) is not None:
            return mapping[k]
    return None


def case_category(case: dict[str, Any]) -> str:
    """The case's ``category`` (or that of its public group); unknown ones are rejected."""
    category = case.get("category") or _GROUP_CATEGORY.get(str(case.get("group")))
    if category is None and case.get("group") in FRAMEWORKS:
        category = "end_to_end_training"
    if category not in CATEGORIES:
        raise ConfigError(
            f"{_where(case)}: category {category!r} is not one deepflow scores "
            f"(known: {', '.join(CATEGORIES)})."
        )
    return str(category)


def accelerator_presets(case: dict[str, Any]) -> tuple[str, str]:
    """(device preset, network preset) for ``hardware.accelerator`` (:data:`ACCELERATORS`).

    An accelerator without a pattern but with a stated dense 16-bit peak takes the GPU preset
    nearest in peak (log scale), whose memory and peak :func:`_device` then replaces with the
    case's: the roofline, kernel efficiencies and node network of that generation stand in.
    """
    name = str(_need(case, "hardware.accelerator"))
    lowered = name.lower()
    for pattern, device, network in ACCELERATORS:
        if re.search(pattern, lowered):
            return device, network
    peak = _stated_peak_tflops(case, "bf16") or _stated_peak_tflops(case, "fp16")
    if peak is not None and peak > 0:
        gpus = [(d, n) for _, d, n in ACCELERATORS if n.startswith("dgx-") and "40gb" not in d]
        peaks = [float(_preset_raw("devices", d)["peak_dense_TFLOPS"]["fp16"]) for d, _ in gpus]
        best = min(range(len(gpus)), key=lambda i: abs(math.log(peak / peaks[i])))
        return gpus[best]
    known = "A100, H100/H800, H200/GH200, B200/B300, GB200, V100, TPU v4, TPU v5e, TPU v5p"
    raise ConfigError(
        f"{_where(case)}: hardware.accelerator {name!r} is not an accelerator deepflow has a "
        f"preset for (known: {known}), and hardware.peak_dense_tflops states no 16-bit peak "
        "to approximate it with."
    )


# ------------------------------------------------------------------------------ conventions
def source_year(case: dict[str, Any]) -> int | None:
    """The year of the case's source: an arXiv id in its URL (yymm.nnnnn), a year in its title,
    location, id or group, or an abbreviated one ("SC'21") in its title."""
    source: dict[str, Any] = case["source"] if isinstance(case.get("source"), dict) else {}
    if isinstance(source.get("year"), int):
        return int(source["year"])
    match = re.search(r"arxiv\.org/(?:abs|pdf)/(\d{2})(\d{2})\.\d{4,5}", str(source.get("url")))
    if match:
        return 2000 + int(match.group(1))
    for text in (source.get("title"), source.get("location"), case.get("id"), case.get("group")):
        match = re.search(r"(?<!\d)(20[12]\d)(?!\d)", str(text or ""))
        if match:
            return int(match.group(1))
    match = re.search(r"'(\d{2})\b", str(source.get("title") or ""))
    return 2000 + int(match.group(1)) if match else None


def _framework_text(case: dict[str, Any]) -> str:
    training, model = case.get("training") or {}, case.get("model") or {}
    source: dict[str, Any] = case["source"] if isinstance(case.get("source"), dict) else {}
    parts = [
        training.get("framework"), training.get("comm_overlap"), training.get("attention"),
        training.get("techniques"), "torch.compile" if training.get("torch_compile") else None,
        model.get("attention"), model.get("type"), case.get("notes"), source.get("title"),
        source.get("location"),
    ]  # fmt: skip
    return " ".join(json.dumps(p) if not isinstance(p, str) else p for p in parts if p).lower()


def framework(case: dict[str, Any]) -> dict[str, Any]:
    """How the case's framework ran: fused attention, TP and DP overlap, dropout.

    The public groups use :data:`FRAMEWORKS`. Other cases: what their text says, else what
    was usual in their source's year (docs/model.md §C3.2): FlashAttention (2022) was the
    default of Megatron-Core/TE, FSDP, llm-foundry and NeMo by 2023; DP communication
    overlapped with backward (PyTorch DDP and DeepSpeed buckets, FSDP prefetch) in everything
    but Megatron-LM before its 2023 ``--overlap-grad-reduce`` and DeepSpeed's ZeRO-3 before
    its mid-2021 rewrite; TP overlap only where stated (``--tp-comm-overlap``); dropout
    in GPT-style training up to 2022, none in the LLaMA/MPT era.
    """
    known = FRAMEWORKS.get(str(case.get("group")))
    if known is not None:
        return dict(known)
    text = _framework_text(case)
    year = source_year(case) or 2023
    zero = zero_stage(case)
    unfused = bool(re.search(r"unfused|no flash|without flash|flash[-_ ]?attention: ?(false|no)",
                             text))  # fmt: skip
    fused = bool(re.search(r"flash|fused attention|transformer engine|cudnn attention|sdpa|"
                           r"fused_attn|attn_impl: ?(flash|triton)", text))  # fmt: skip
    flash = not unfused and (fused or year >= 2023)
    tp_overlap = bool(re.search(r"tp[-_ ]comm[-_ ]overlap|tp communication overlap|userbuffers",
                                text)) or _async_tp(case, text)  # fmt: skip
    deepspeed_2021_zero3 = "deepspeed" in text and zero >= 3 and year <= 2021
    no_overlap = bool(re.search(r"no (dp |data[- ]parallel )?overlap|overlap: ?(false|no)", text))
    old_megatron = "megatron" in text and year <= 2022 and "overlap-grad-reduce" not in text
    dp_overlap = not (deepspeed_2021_zero3 or no_overlap or old_megatron)
    stated = _stated_dropout(case)
    no_dropout = bool(re.search(r"no dropout|dropout:? ?(0(\.0)?|false|none)\b", text))
    dropout = (not no_dropout and (year <= 2022 or bool(re.search(r"dropout:? ?0\.[1-9]", text)))
               if stated is None else stated)  # fmt: skip
    # 16-bit gradient buffers: NeMo 1.x (to 24.07) trains with Apex's distributed_fused_adam
    # and grad_sync_dtype bf16 (NeMo-Framework-Launcher training configs and performance
    # scripts); DeepSpeed ZeRO-1/2 keeps 16-bit gradients (ZeRO paper §5). Megatron keeps
    # fp32 main gradients (docs/model.md §C2.1).
    apex_adam = "nemo" in text and year <= 2024
    # 16-bit gradient reduction where the text says so (Megatron-Core's
    # ``grad_reduce_in_fp32: false``), and in Megatron-Bridge's performance recipes, whose
    # benchmark defaults set it (scripts/performance configs of 25.09-26.02: the llama3/llama31/
    # qwen3/deepseek pretrain recipes; perf_recipes/_common.py ``_benchmark_common`` since)
    # unless the text says otherwise
    bf16_reduce = bool(re.search(r"grad[_ ]reduce[_ ]in[_ ]fp32:? ?(false|no|0)\b", text))
    fp32_reduce = bool(re.search(r"grad[_ ]reduce[_ ]in[_ ]fp32:? ?(true|yes|1)\b", text))
    bf16_reduce = bf16_reduce or (
        (_bridge_performance(text) or _nemo2_performance(case, text)) and not fp32_reduce
    )
    bf16_grads = apex_adam or bf16_reduce or ("deepspeed" in text and zero in (1, 2))
    # Apex's distributed Adam on a bf16 model keeps only the low 16 bits of the fp32 master
    # weights (NeMo 1.x megatron_base_model.py, setup_optimization: store_param_remainders)
    fp16 = "fp16" in str((case.get("training") or {}).get("precision") or "").lower()
    # nanotron: gradients accumulate in its FP32GradientAccumulator where
    # ``accumulate_grad_in_fp32`` is on (src/nanotron/helpers.py,
    # init_optimizer_and_grad_accumulator), and build_model balances the pipeline stages by
    # compute cost (src/nanotron/models/base.py); docs/model.md §C2.1, §C2.3
    nanotron = "nanotron" in text
    eager = _eager_torchtitan(case, text)
    date = software_date(case)
    optimizer = f"{text} {(case.get('training') or {}).get('optimizer') or ''}".lower()
    fp32_accumulator = nanotron and not re.search(r"accumulate_grad_in_fp32\W{0,3}(false|0)\b",
                                                  optimizer)  # fmt: skip
    # Megatron-Core's interleaved schedule overlaps its pipeline sends with compute
    # (--overlap-p2p-communication, on by default since 2023; NeMo: overlap_p2p_comm);
    # elsewhere where the text says so ("asynchronous point-to-point communication in PP",
    # the Llama 3 paper §3.3.2)
    p2p_overlap = (bool(re.search(r"megatron|nemo", text)) and year >= 2023) or bool(
        re.search(r"asynchronous point-to-point|async(hronous)? p2p|overlap[-_ ]p2p", text)
    )
    return {"flash": flash, "tp_overlap": tp_overlap, "dp_overlap": dp_overlap,
            "dropout": dropout, "fp32_main_grads": not bf16_grads,
            "master_weights": "remainders" if apex_adam and not fp16 else "fp32",
            "attention_kernel": _attention_kernel(text, date, flash),
            "fp8_params": _fp8_params(case, text),
            "fp8_recipe": _fp8_recipe(case),
            "p2p_overlap": p2p_overlap,
            # FP8 weight copies cached per step: Transformer Engine where the framework passes
            # is_first_microbatch (Megatron, NeMo); PyTorch float8 (torchao, torchtitan) casts
            # per use, and so does TE under Composer (llm-foundry), which never passes it
            # (TE module/linear.py: update_fp8_weights = is_first_microbatch is None or ...)
            "fp8_weight_cache": not re.search(r"torchtitan|torchao|composer|llm[- ]foundry",
                                              text),
            # Megatron's asynchronous backward TP collectives; DTensor (torchtitan) waits
            # on each before its consumer (docs/model.md §C3.2)
            "tp_async_backward": "torchtitan" not in text,
            "cross_entropy": _cross_entropy(text, date),
            "gradient_buffers": "fp32_accumulator" if fp32_accumulator else "main",
            # gradients summed into fp32 buffers by a kernel of their own every micro-batch:
            # nanotron's accumulator hooks, or where the text says so (the Llama 3 paper's "FP32
            # gradient accumulation during backward computation over multiple micro-batches",
            # §3.3.2); Megatron's fp32 main_grad accumulates inside the wgrad GEMM
            "grad_accumulation": "unfused_fp32" if fp32_accumulator or re.search(
                r"fp32 gradient accumulation|gradient accumulation in fp32", text) else "fused",
            "pipeline_balance": _pipeline_balance(text, nanotron),
            # nanotron's MLP runs GLUActivation (act(gate) * up) unfused in eager PyTorch
            # (src/nanotron/models/llama.py); torchtitan without torch.compile runs its block in
            # eager PyTorch too (:func:`_eager_torchtitan`)
            "fused_swiglu": not nanotron and not eager,
            # nanotron's asynchronous TP linears (tp_linear_async_communication) reduce-scatter
            # the backward's full-length input gradients with async_op=True
            # (src/nanotron/parallel/tensor_parallel/functional.py), which PyTorch records on
            # NCCL's stream (docs/model.md §C2.5)
            "recorded_tp_gradients": nanotron and _async_tp_linears(case),
            "fused_norm": not (eager and date >= (2024, 5)),
            "fused_rotary": not eager,
            **_compiled_stack_flags(case)}  # fmt: skip


def _fsdp(case: dict[str, Any]) -> tuple[str, bool]:
    """The ZeRO-3 implementation and whether it reduce-scatters in fp32
    (``fsdp_implementation``, ``fsdp_reduce_fp32``; docs/model.md §C3.3): torchtitan shards
    with FSDP2 (``fully_shard`` since its first release, reducing in fp32:
    torchtitan/parallelisms/parallelize_llama.py ``MixedPrecisionPolicy(param_dtype=bfloat16,
    reduce_dtype=float32)``, April 2024); Composer (llm-foundry) with FSDP1
    (composer/trainer/dist_strategy.py ``prepare_fsdp_module``), whose ``mixed_precision:
    DEFAULT`` reduces in fp32 and ``PURE`` in the 16-bit precision
    (composer/trainer/mosaic_fsdp_utils.py ``get_mixed_precision``, from v0.16.4, October 2023;
    DEFAULT reduced in the parameters' 16 bits from v0.14 to v0.16.3, but the llm-foundry
    tables that name it were run with llm-foundry v0.3.0, which requires 0.16.4); a case that
    names FSDP2 (``fully_shard``) or PyTorch's FSDP1 (``FullyShardedDataParallel``) likewise;
    else none."""
    precision = str((case.get("training") or {}).get("precision") or "").lower()
    text = f"{_framework_text(case)} {precision}"
    fp32 = bool(re.search(r"reduce[_ ]?(dtype)?[ =:]*(fp32|float32)|fp32 reduce", text))
    if re.search(r"torchtitan|fsdp2|fully_shard", text):
        return "fsdp2", fp32 or "torchtitan" in text
    if re.search(r"composer|llm[- ]foundry|fullyshardeddataparallel|pytorch fsdp", text):
        return "fsdp1", fp32 or bool(re.search(r"mixed_precision[ =:]*(default|full)\b", text))
    return "none", False


def _async_tp_linears(case: dict[str, Any]) -> bool:
    """Whether a nanotron case's TP linears communicate asynchronously: its ``tp_mode`` text
    says so (``tp_linear_async_communication``, which nanotron honours in REDUCE_SCATTER mode
    only)."""
    mode = str((case.get("training") or {}).get("tp_mode") or "").lower()
    return "reduce_scatter" in mode and bool(re.search(r"\basync", mode))


def _pipeline_balance(text: str, nanotron: bool) -> str:
    """How the pipeline split places the layers (``pipeline_balance``, docs/model.md §C2.3):
    nanotron balances stages by compute (src/nanotron/models/base.py); a split whose ends hold
    the embedding and the output layer in a layer's slot each where the text says so
    (Megatron-Core's ``account_for_embedding_in_pipeline_split`` /
    ``account_for_loss_in_pipeline_split``; the Llama 3 paper §3.3.2: "we reduce one
    Transformer layer each from the first and the last stages ... the first model chunk on the
    first stage has only the embedding"); else even stages of layers."""
    if nanotron:
        return "compute"
    ends = re.search(r"account[-_ ]for[-_ ](embedding|loss)[-_ ]in[-_ ]pipeline[-_ ]split|"
                     r"(embedding|output layer)[^.;]{0,80}(a|one) (transformer )?layer'?s? "
                     r"(slot|place)", text)  # fmt: skip
    return "ends_as_layers" if ends else "layers"


def _eager_torchtitan(case: dict[str, Any], text: str) -> bool:
    """Whether a torchtitan case ran its blocks in eager PyTorch: the case states
    ``torch_compile: false`` (torchtitan's ``compile`` option, off by default in its train
    configs). Eager, its SwiGLU is ``silu`` and ``mul``, its rotary an fp32 complex multiply
    (``apply_rotary_emb``) and, from May 2024 (pytorch/torchtitan PR #297 switched the train
    configs' ``norm_type`` from the Triton ``fused_rmsnorm`` to ``rmsnorm``), its RMSNorm the
    composite of torchtitan/models/norms.py; compiled, Inductor fuses each (docs/model.md
    §C6.3)."""
    return "torchtitan" in text and (case.get("training") or {}).get("torch_compile") is False


#: The reader's flags that a compiled (JAX/XLA) stack's profile sets instead of the text
#: heuristics above, which describe PyTorch stacks (CUDA kernels, NCCL, Megatron switches).
_PROFILE_FLAGS = {
    "flash_attention": "flash",
    "tp_comm_overlap": "tp_overlap",
    "overlap_grad_reduce": "dp_overlap",
    "overlap_p2p_comm": "p2p_overlap",
    "fp8_weight_cache": "fp8_weight_cache",
    "cross_entropy": "cross_entropy",
}


def _compiled_stack_flags(case: dict[str, Any]) -> dict[str, Any]:
    """The profile's switches for a case run by a compiled stack (``maxtext-tpu``): XLA
    schedules every collective asynchronously (its latency-hiding scheduler) and fuses the
    loss, whatever the PyTorch-era rules of :func:`framework` would infer from the text
    (``configs/frameworks/maxtext-tpu.yaml`` cites both)."""
    if framework_profile(case) != "maxtext-tpu":
        return {}
    mapping = _preset_raw("frameworks", "maxtext-tpu")["mapping"]
    return {flag: mapping[knob] for knob, flag in _PROFILE_FLAGS.items() if knob in mapping}


def _attention_kernel(text: str, date: tuple[int, int], flash: bool) -> str:
    """The fused attention kernel (docs/model.md §C6.2): FlashAttention-3 where named;
    FlashAttention in pre-MLIR Triton where ``attn_impl: triton`` is named and in llm-foundry
    before v0.7.0 (March 2024), whose benchmark harness
    (scripts/train/benchmarking/submit_benchmarks.py) overwrote every run's ``attn_impl`` with
    its ``--attn_impl`` default ``triton`` (MPT's own default, ``configuration_mpt.py``) until
    v0.7.0 removed it (llm-foundry PR #1062); Transformer Engine's cuDNN FusedAttention in
    TE-based stacks (Megatron-Core, NeMo, Megatron-Bridge) from June 2024 (TE 1.8's
    get_attention_backend and its documented order, NVIDIA/TransformerEngine#889; TE preferred
    it on sm90 from 1.2, PR #497, but NeMo 24.03's runs, the earlier ones in hand, are slower
    than the model with it for another reason: docs/model.md §C6.2); else FlashAttention-2
    (flash-attn, PyTorch SDPA's flash backend)."""
    if not flash:
        return "fa2"
    if re.search(r"flash[- _]?attention[- _]?3|\bfa3\b|flash_attn_3", text):
        return "fa3"
    foundry = re.search(r"llm[- ]foundry|\bmpt\b", text) and date < (2024, 4)
    if foundry or re.search(r"attn_impl: ?triton", text):
        return "triton"
    te = re.search(r"transformer engine|megatron[- ]core|\bmcore\b|nemo|megatron[- ]bridge", text)
    return "cudnn" if te and date >= (2024, 6) else "fa2"


def _fp8_params(case: dict[str, Any], text: str) -> bool:
    """FP8 weights (TE's fp8_model_init, Megatron-Core's ``fp8_param_gather``): where stated,
    and in NeMo 2 / Megatron-Bridge FP8 recipes (from December 2024), whose delayed, per-tensor
    current-scaling and MXFP8 mixed-precision recipes set ``fp8_param_gather = True`` (their
    blockwise and NVFP4 recipes do not: megatron/bridge/training/mixed_precision.py)."""
    precision = str((case.get("training") or {}).get("precision") or "").lower()
    if not re.search(r"fp8|float8", precision) or re.search(r"blockwise|subchannel", precision):
        return False
    if re.search(r"fp8[_ ]param", f"{text} {precision}"):
        return True
    # NeMo 2's performance scripts from v2.3.0 (the 25.04 container) turn it off under
    # Megatron-Core FSDP ("Currently FSDP does not support FP8 param gather",
    # scripts/performance/utils.py); Megatron-Bridge's keep it (scripts/performance at fa0315ae)
    date = software_date(case)
    nemo_fsdp = ("nemo" in text and "megatron-bridge" not in text and zero_stage(case) >= 3
                 and date >= (2025, 4))  # fmt: skip
    nemo2 = bool(re.search(r"megatron[- ]bridge|nemo", text)) and date >= (2024, 12)
    return nemo2 and not nemo_fsdp


def _fp8_recipe(case: dict[str, Any]) -> str:
    """The float8 scaling recipe: torchao's ``rowwise`` (axiswise scales,
    ``Float8LinearConfig.from_recipe_name("rowwise")``, torchao/float8/config.py) or MXFP8
    (Transformer Engine's ``MXFP8BlockScaling``; Megatron-Bridge's ``fp8_recipe: mxfp8``,
    its tables' "FP8-MX") where the case's precision names it, else one scale per tensor
    (docs/model.md §C6.4)."""
    precision = str((case.get("training") or {}).get("precision") or "").lower()
    if re.search(r"\bmx[-_ ]?fp8\b|fp8[-_ ]mx\b", precision):
        return "mxfp8"
    return "rowwise" if re.search(r"row[- _]?wise|axiswise", precision) else "tensorwise"


def _async_tp(case: dict[str, Any], text: str) -> bool:
    """PyTorch's async tensor parallelism (torchtitan ``enable_async_tensor_parallel``; the
    all-gather/reduce-scatter decomposed with the matmuls, docs/model.md §C3.2): the case's
    ``training.async_tp`` where it says, else its text."""
    stated = (case.get("training") or {}).get("async_tp")
    if isinstance(stated, bool):
        return stated
    return bool(re.search(r"async ?tp\b|asynctp|async[_ -]tensor[_ -]parallel", text))


def software_date(case: dict[str, Any]) -> tuple[int, int]:
    """(year, month) of the software a case ran: a nightly's date (``dev20250811``) or an ISO
    date in ``training.framework_version``; else a PyTorch release (2.7: April 2025, 2.8:
    August 2025; a pre-release ``a0`` counts as the month before); else a year-month in the
    source's URL or title (``..._2025-06_...``), or a date in its location; else the source's year
    (January), else 2023."""
    version = str((case.get("training") or {}).get("framework_version") or "")
    match = re.search(r"(20[12]\d)-?([01]\d)-?[0-3]\d", version)
    if match:
        return int(match.group(1)), int(match.group(2))
    # an NGC / NeMo container release YY.MM ("NeMo 24.03.01 container")
    match = re.search(r"(?:nemo|container|ngc)\D{0,20}\b(2\d)\.(0[1-9]|1[0-2])\b", version.lower())
    if match:
        return 2000 + int(match.group(1)), int(match.group(2))
    match = re.search(r"torch (\d+)\.(\d+)\.\d+(a0)?", version)
    if match and (int(match.group(1)), int(match.group(2))) in _TORCH_RELEASES:
        year, month = _TORCH_RELEASES[(int(match.group(1)), int(match.group(2)))]
        return (year, month - 1) if match.group(3) else (year, month)
    source: dict[str, Any] = case["source"] if isinstance(case.get("source"), dict) else {}
    stated = f"{source.get('url') or ''} {source.get('title') or ''}"
    match = re.search(r"(?<!\d)(20[12]\d)-([01]\d)(?!\d)", stated)
    if match and 1 <= int(match.group(2)) <= 12:
        return int(match.group(1)), int(match.group(2))
    # a date in the location ("added in commit ..., 2024-07-15")
    location = str(source.get("location") or "")
    match = re.search(r"(?<!\d)(20[12]\d)-([01]\d)-[0-3]\d(?!\d)", location)
    if match and 1 <= int(match.group(2)) <= 12:
        return int(match.group(1)), int(match.group(2))
    return (source_year(case) or 2023, 1)


#: PyTorch releases (year, month) by (major, minor): pytorch.org/blog release posts.
_TORCH_RELEASES = {(2, 4): (2024, 7), (2, 5): (2024, 10), (2, 6): (2025, 1), (2, 7): (2025, 4),
                   (2, 8): (2025, 8), (2, 9): (2025, 10)}  # fmt: skip


def _bridge_performance(text: str) -> bool:
    """A run of Megatron-Bridge's performance recipes (its performance summary's tables)."""
    return "megatron-bridge" in text and "performance" in text


def _nemo2_performance(case: dict[str, Any], text: str) -> bool:
    """A run of NeMo 2's performance recipes (the NeMo 25.xx performance summary's tables):
    their scripts set ``grad_reduce_in_fp32 = False`` (NeMo v2.2.0
    scripts/llm/performance/pretrain_*.py for FP8; the recipes' ``performance_mode``
    optimizations for every precision, nemo/collections/llm/recipes/llama3_70b.py), the
    16-bit gradient buffers Megatron-Bridge's performance recipes kept."""
    return ("nemo" in text and "performance summary" in text
            and software_date(case) >= (2025, 1))  # fmt: skip


def _cross_entropy(text: str, date: tuple[int, int]) -> str:
    """The loss kernel (docs/model.md §C2.4): fused where stated or where it is the framework's
    default (llm-foundry's MPT: flash-attn's fused cross-entropy, ``loss_fn`` default in
    ``llm_foundry/models/mpt/modeling_mpt.py``; Megatron-Core's ``cross_entropy_fusion_impl
    te``); Megatron's vocab-parallel one in Megatron and NeMo, ``--cross-entropy-loss-fusion``
    included (its default ``native`` implementation, megatron/core/fusions/
    fused_cross_entropy.py, fuses the same in-place steps); nanotron's on the fp32 logits its
    model returns; PyTorch's unfused ``cross_entropy`` in PyTorch-native trainers (torchtitan's
    ``cross_entropy_loss`` upcasts the logits to fp32; FSDP, Hugging Face)."""
    if re.search(r"fused[_ -]?cross[_ -]?entropy|cross[_-]entropy[_-]fusion[_-]impl\W{0,3}te\b|"
                 r"llm[- ]foundry|\bmpt\b|composer", text):  # fmt: skip
        return "fused"
    if _bridge_performance(text):
        # Megatron-Bridge's benchmark defaults: cross_entropy_fusion_impl "te" (25.09
        # scripts/performance/configs/*_llm_pretrain.yaml; utils/overrides.py from 25.11;
        # perf_recipes/_common.py ``_benchmark_common`` since)
        return "fused"
    if "torchtitan" in text and re.search(r"torch\.?compile|\bcompile", text) and date >= (2025, 4):
        # torchtitan compiles its loss with the model since April 2025 (pytorch/torchtitan
        # PR #1033, build_loss_fn): one Inductor kernel, no fp32 copy of the logits
        return "fused"
    if "nanotron" in text:
        # nanotron's LlamaModel returns ``cast_to_fp32`` of the logits and sharded_cross_entropy
        # shifts them into a new fp32 tensor (src/nanotron/models/llama.py; src/nanotron/
        # parallel/tensor_parallel/functional.py, _ShardedCrossEntropy)
        return "vocab_parallel_fp32"
    if re.search(r"megatron|nemo|deepspeed", text):
        return "vocab_parallel"
    if re.search(r"torchtitan|fsdp|hugging ?face|transformers|pytorch", text):
        return "unfused"
    return "vocab_parallel"


def framework_profile(case: dict[str, Any]) -> str | None:
    """The framework profile (``configs/frameworks/``) a case's text and date name, if any.

    The case's own flags (:func:`framework`) still override the profile's switches: the
    profile names the stack, the flags say how this run used it.
    """
    text, date = _framework_text(case), software_date(case)
    rules = (
        ("torchtitan", "torchtitan-2025" if date >= (2025, 4) else "torchtitan-2024"),
        # NeMo 2's performance recipes (25.xx containers) and their successor Megatron-Bridge;
        # NeMo 1.x (the NeMo-Framework-Launcher) before
        ("megatron[- ]bridge", "megatron-bridge-2025"),
        ("nemo", "megatron-bridge-2025" if date >= (2025, 1) else "nemo-24.07"),
        ("llm-foundry|llm foundry|composer|\\bmpt\\b", "llm-foundry"),
        ("maxtext|\\btpu\\b", "maxtext-tpu"),
        ("deepspeed", "deepspeed-zero3-2021" if zero_stage(case) >= 3 and date < (2022, 1)
         else None),
        ("megatron", "megatron-core-2024" if date >= (2023, 1) else "megatron-lm-2021"),
    )  # fmt: skip
    for pattern, profile in rules:
        if re.search(pattern, text):
            return profile
    return None


def zero_stage(case: dict[str, Any]) -> int:
    """ZeRO stage: a number, FSDP's sharding strategy, or a distributed optimizer (ZeRO-1)."""
    training = case.get("training") or {}
    value = training.get("zero_stage")
    if isinstance(value, int | float) and not isinstance(value, bool):
        return int(value)
    fsdp, cp = training.get("fsdp"), training.get("cp") or 1
    if isinstance(fsdp, int | float) and not isinstance(fsdp, bool) and fsdp * cp > 1:
        # an FSDP degree: FSDP2's fully_shard over the FSDP x context-parallel ranks
        # (torchtitan's dp_shard_cp mesh)
        return 3
    text = f"{value or ''} {training.get('fsdp_sharding') or ''}".lower()
    if re.search(r"full_shard|zero[- ]?3|stage 3|hybrid_shard", text):
        return 3
    if re.search(r"shard_grad_op|zero[- ]?2|stage 2", text):
        return 2
    if re.search(r"distributed optimi[sz]er|zero[- ]?1|stage 1", text):
        return 1
    return 0


def _recompute(text: object, zero: int, framework_text: str = "") -> str:
    """The recompute mode; torchtitan's "selective" is per-op checkpointing (its shipped
    Llama configs set ``selective_ac_option = "op"``); MaxText's ``remat_policy: minimal`` is
    JAX's ``checkpoint_dots_with_no_batch_dims`` (MaxText/layers/models.py), which keeps the
    weight matmuls' outputs (``selective_dots``)."""
    value = str(text or "").lower()
    if re.search(r"remat_policy\W{0,3}minimal|checkpoint_dots", value):
        return "selective_dots"
    if value.startswith("selective"):
        op = re.search(r"\bop\b|per[- ]op", value) or "torchtitan" in framework_text
        return "selective_op" if op else "selective"
    if value.startswith("full") or value in ("true", "yes") or "checkpoint" in value:
        return "full"
    if value.startswith("not stated") and zero >= 3:
        # DeepSpeed ZeRO-3 baseline of a 175B/530B model with micro-batch 1-4 on 80 GB cannot
        # run without activation checkpointing; Eq. 3 (the source's FLOP count) assumes it.
        return "full"
    return "none"


def _layer_checkpointed(case: dict[str, Any], stage_layers: int) -> int:
    """The layers of a stage that torchtitan's layer-wise selective checkpointing recomputes
    in full (0 where the case does not use it): ``selective_ac_option`` an integer k wraps
    every k-th transformer block in a full checkpoint (``_apply_ac_to_transformer_block``,
    torchtitan/models/llama3/parallelize_llama.py), k = 2 where the case does not state it
    (the option's default, "2 = checkpoint every other layer", torchtitan/config_manager.py
    since April 2024)."""
    text = str((case.get("training") or {}).get("activation_recompute") or "").lower()
    if "torchtitan" not in _framework_text(case) or not re.search(r"selective[ _-]*layer", text):
        return 0
    stated = re.search(
        r"selective_ac_option\s*=\s*'?(\d+)|every (\d+)(?:st|nd|rd|th)? (?:layer|block)", text
    )
    k = int(stated[1] or stated[2]) if stated else 2
    return max(stage_layers // k, 1)


def _stated_layers(case: dict[str, Any], name: str) -> int:
    """A Megatron-Core layer count the case states for its own run (0 where none):
    ``training.<name>``, else ``<name> N`` or ``--<name with dashes> N`` in its
    ``activation_recompute`` or ``techniques`` text (``recompute_num_layers``:
    --recompute-num-layers; ``cpu_offloading_num_layers``: --cpu-offloading-num-layers).
    Notes that list several recipes' values are not read: they do not say which is this run's.
    """
    training = case.get("training") or {}
    stated = training.get(name)
    if stated is not None:
        if isinstance(stated, bool) or not isinstance(stated, int) or stated < 0:
            raise ConfigError(f"{_where(case)}: training.{name} must be a whole number >= 0; "
                              f"got {stated!r}.")  # fmt: skip
        return stated
    text = " ".join(str(training.get(k) or "") for k in ("activation_recompute", "techniques"))
    flag = name.replace("_", "[_-]")
    found = {int(v) for v in re.findall(rf"(?:--)?{flag}\W{{0,3}}(\d+)", text.lower())}
    return found.pop() if len(found) == 1 else 0


#: Fields in which a case states its dropout probabilities (Megatron's --hidden-dropout and
#: --attention-dropout, 0.1 unless set: megatron/training/arguments.py).
_DROPOUT_FIELDS = (("training", "dropout"), ("model", "dropout"), ("model", "hidden_dropout"),
                   ("model", "attention_dropout"))  # fmt: skip


def _stated_dropout(case: dict[str, Any]) -> bool | None:
    """Whether the case's run drops out, from the probabilities it states (any above 0), or
    ``None`` where it states none."""
    stated = []
    for block, name in _DROPOUT_FIELDS:
        value = (case.get(block) or {}).get(name)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1:
            raise ConfigError(f"{_where(case)}: {block}.{name} must be a probability in "
                              f"[0, 1); got {value!r}.")  # fmt: skip
        stated.append(value > 0)
    return any(stated) if stated else None


def _precision(case: dict[str, Any], device_raw: Mapping[str, Any]) -> str:
    text = str((case.get("training") or {}).get("precision") or "").lower()
    peaks = device_raw.get("peak_dense_TFLOPS") or {}
    if re.search(r"fp4|float4", text) and "fp4" in peaks:  # nvfp4, mxfp4
        return "fp4"
    if re.search(r"fp8|float8", text) and "fp8" in peaks:  # mxfp8 too
        return "fp8"
    if "bf16" in peaks and not ("fp16" in text and "bf16" not in text):
        return "bf16"
    return "fp16"


# ------------------------------------------------------------------------------ hardware
def _stated_peak_tflops(case: dict[str, Any], precision: str) -> float | None:
    """The case's dense peak for ``precision`` (the key naming it, else the one it used)."""
    hardware = case.get("hardware") or {}
    peaks = hardware.get("peak_dense_tflops")
    if not isinstance(peaks, dict):
        return None
    for key, value in peaks.items():
        if precision in str(key).lower() and isinstance(value, int | float):
            return float(value)
    used = hardware.get("peak_dense_tflops_precision_used")
    key = str(hardware.get("peak_precision_key") or "").lower()
    if key and precision not in key:  # the peak of another precision
        return None
    return float(used) if isinstance(used, int | float) else None


def _hardware_text(case: dict[str, Any]) -> str:
    hardware = case.get("hardware") or {}
    return " ".join(str(hardware.get(k) or "") for k in ("accelerator", "system", "notes")).lower()


def _number_or_none(value: Any) -> float | None:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and value > 0
    return float(value) if ok else None


def _power_limit_W(case: dict[str, Any]) -> float | None:
    """An enforced power limit the case states (``hardware.power_limit_W``, or "500W power
    limit", "power capped at 450 W" in its hardware text); a TDP is not a limit."""
    stated = _number_or_none(_get(case.get("hardware"), "power_limit_W", "power_limit_w"))
    if stated is not None:
        return stated
    text, watts = _hardware_text(case), r"(\d{2,4}(?:\.\d+)?) ?w"
    match = re.search(watts + r"(?:atts?)? (?:power[- ]?)?(?:limit|cap)\b", text) or re.search(
        r"power[- ]?(?:limit(?:ed)?|cap(?:ped)?)(?: of| at| to)? " + watts + r"\b", text
    )
    return float(match.group(1)) if match else None


def stated_hbm_bandwidth_GBps(case: dict[str, Any]) -> float | None:
    """The memory bandwidth the case states (``hardware.memory_bandwidth_TBps`` / ``_GBps``,
    or "2.4 TB/s" in its hardware text)."""
    hardware = case.get("hardware") or {}
    tbps = _number_or_none(_get(hardware, "memory_bandwidth_TBps", "hbm_bandwidth_TBps"))
    if tbps is not None:
        return 1000.0 * tbps
    gbps = _number_or_none(_get(hardware, "memory_bandwidth_GBps", "hbm_bandwidth_GBps"))
    if gbps is not None:
        return gbps
    match = re.search(r"(\d+(?:\.\d+)?) ?tb/s", _hardware_text(case))
    return 1000.0 * float(match.group(1)) if match else None


def _device(case: dict[str, Any], preset: str, precision: str) -> str | dict[str, Any]:
    """The preset, or the preset with the case's stated memory, memory bandwidth, peak and
    power limit where they differ."""
    raw = _preset_raw("devices", preset)
    hardware = case.get("hardware") or {}
    override: dict[str, Any] = {}
    memory = _get(hardware, "memory_gb", "memory_GB", "hbm_gb")
    if isinstance(memory, int | float) and abs(memory - raw["hbm_capacity_GiB"]) > 1:
        override["hbm_capacity_GiB"] = float(memory)  # vendor "GB" are binary-sized (presets)
    bandwidth = stated_hbm_bandwidth_GBps(case)
    if bandwidth is not None and abs(bandwidth / raw["hbm_bandwidth_GBps"] - 1) > 0.02:
        override["hbm_bandwidth_GBps"] = bandwidth
    peak = _stated_peak_tflops(case, precision)
    preset_peak = float((raw.get("peak_dense_TFLOPS") or {}).get(precision, 0) or 0)
    if peak is not None and preset_peak > 0 and abs(peak / preset_peak - 1) > 0.02:
        override["peak_dense_TFLOPS"] = {precision: peak}
    limit = _power_limit_W(case)
    if limit is not None and limit < raw["tdp_W"]:
        override["power_limit_W"] = limit
    return {"base": preset, **override} if override else preset


def _scale_out_GBps(case: dict[str, Any], per_node: int) -> float | None:
    """Per-GPU scale-out bandwidth stated by the case (Gb/s per GPU, per node or per NIC)."""
    inter = (case.get("hardware") or {}).get("inter_node")
    if not isinstance(inter, dict):
        return None
    per_gpu = _get(inter, "gbps_per_gpu")
    if isinstance(per_gpu, int | float) and per_gpu > 0:
        return float(per_gpu) / 8.0
    per_node_gbps = _get(inter, "gbps_per_node")
    if isinstance(per_node_gbps, int | float) and per_node_gbps > 0:
        return float(per_node_gbps) / 8.0 / per_node
    nics, per_nic = _get(inter, "nics_per_node"), _get(inter, "gbps_per_nic")
    if isinstance(nics, int | float) and isinstance(per_nic, int | float) and nics * per_nic > 0:
        return float(nics * per_nic) / 8.0 / per_node
    return None


def slice_shape(chips: int, dims: int) -> tuple[int, ...]:
    """The torus of a TPU slice of ``chips`` chips: the most nearly cubic ``dims``-way
    factorisation, largest side first (Google's v4 / v5p slice shapes: 4x4x4, 4x4x8, 4x8x8,
    ..., 16x16x24; v5e: 4x4, 4x8, 8x8, 8x16, 16x16; https://docs.cloud.google.com/tpu/docs/v5p,
    .../v5e). Largest first, so the innermost (tensor-parallel) ranks fill whole sides, as
    JAX's ``mesh_utils.create_device_mesh`` assigns each mesh axis to whole physical axes.
    """

    def split(n: int, k: int) -> list[tuple[int, ...]]:
        if k == 1:
            return [(n,)]
        return [(d, *rest) for d in range(1, n + 1) if n % d == 0 for rest in split(n // d, k - 1)]

    best = min(split(max(chips, 1), dims), key=lambda f: (max(f) / min(f), -min(f)))
    return tuple(sorted(best, reverse=True))


def _network(case: dict[str, Any], preset: str, per_node: int) -> str | dict[str, Any]:
    """The node's network preset, with the case's stated scale-up/-out bandwidths."""
    raw = _preset_raw("networks", preset)
    override: dict[str, Any] = {}
    out = _scale_out_GBps(case, per_node)
    if out is not None and abs(out / raw["scale_out"]["bandwidth_GBps"] - 1) > 0.01:
        override["scale_out"] = {"bandwidth_GBps": out}
    intra = (case.get("hardware") or {}).get("intra_node")
    up = _get(intra, "bw_GBps_per_gpu_unidirectional")
    scale_up: dict[str, Any] = {}
    if isinstance(up, int | float) and abs(up / raw["scale_up"]["bandwidth_GBps"] - 1) > 0.01:
        scale_up["bandwidth_GBps"] = float(up)
    if per_node > raw["scale_up"]["domain_size"]:
        # a larger node of the same fabric (DGX-2: 16 V100s on NVSwitch)
        scale_up["domain_size"] = per_node
    torus = str(raw["scale_up"]["topology"]).startswith("torus")
    if torus and raw["scale_up"].get("shape") and per_node < raw["scale_up"]["domain_size"]:
        # a TPU slice is a torus of its own shape, not a corner of the pod's
        scale_up["domain_size"] = per_node
        scale_up["shape"] = list(slice_shape(per_node, len(raw["scale_up"]["shape"])))
    if scale_up:
        override["scale_up"] = scale_up
    return {"base": preset, **override} if override else preset


# ------------------------------------------------------------------------------ training
#: Architecture features a case's model may state that the transformer model does not
#: represent (docs/validation.md): key -> what it is. A case stating one is skipped with the
#: reason rather than modelled as the plain architecture it would otherwise be read as.
_UNMODELLED_ARCHITECTURE = {
    "sliding_window": "sliding-window attention",
    "shared_expert_intermediate_size": "a shared expert of a width of its own",
    "shared_ffn_hidden": "a shared expert of a width of its own",
}


def _check_architecture(case: dict[str, Any], model: dict[str, Any]) -> None:
    """Refuse a model whose stated architecture the transformer model does not represent."""
    for key, what in _UNMODELLED_ARCHITECTURE.items():
        value = model.get(key)
        if value is not None and value is not False and value != 0:
            raise ConfigError(f"{_where(case)}: model.{key} ({value!r}) states {what}, which "
                              "deepflow's transformer model does not represent.")  # fmt: skip


def _model(
    case: dict[str, Any], flags: dict[str, Any], seq_len: int | None = None
) -> dict[str, Any]:
    model = _need(case, "model")
    _check_architecture(case, model)
    hidden = int(_need(case, "model.hidden"))
    text = f"{model.get('type') or ''} {model.get('activation') or ''} " \
           f"{model.get('ffn_activation') or ''} {model.get('mlp') or ''}".lower()  # fmt: skip
    swiglu = bool(re.search(r"swiglu|silu|swish|geglu|llama|mistral|qwen|mixtral", text))
    out: dict[str, Any] = {
        "kind": "transformer",
        "num_layers": int(_need(case, "model.layers")),
        "hidden_size": hidden,
        "num_attention_heads": int(_need(case, "model.heads")),
        # an all-MoE model states its experts' width alone (Qwen3's moe_ffn_hidden), or beside
        # a dense width its experts do not have
        "ffn_hidden_size": int(
            (_get(model, "moe_ffn_hidden") if _is_moe(model) else None)
            or _get(model, "ffn_hidden", "ffn_hidden_size", "moe_ffn_hidden")
            or 4 * hidden
        ),
        "ffn_activation": "swiglu" if swiglu else "gelu",
        "seq_length": seq_len or int(_need(case, "model.seq_len")),
        "vocab_size": int(_need(case, "model.vocab")),
        "dropout": flags["dropout"],
        "tied_embeddings": _tied_embeddings(case),
    }
    kv = _get(model, "kv_heads", "num_kv_heads", "num_query_groups", "n_kv_heads",
              "num_key_value_heads")  # fmt: skip
    if kv is not None:
        out["num_kv_heads"] = int(kv)
    head_dim = _get(model, "head_dim")
    if head_dim is not None and int(head_dim) * out["num_attention_heads"] != hidden:
        out["head_dim"] = int(head_dim)
    experts = _get(model, "num_experts", "experts", "moe_experts")
    if experts is not None and int(experts) > 1:
        out["num_experts"] = int(experts)
        out["experts_per_token"] = int(_get(model, "experts_per_token", "top_k", "moe_top_k",
                                            "topk") or 1)  # fmt: skip
    return out | _deepseek_layers(case, model, out)


def _deepseek_layers(case: dict[str, Any], model: dict[str, Any],
                     out: dict[str, Any]) -> dict[str, Any]:  # fmt: skip
    """The serving-only model keys of a DeepSeek-V2/V3-style model (docs/model.md §D7), from its
    Hugging Face config names: latent attention (``kv_lora_rank``, ``q_lora_rank``,
    ``qk_rope_head_dim``; each head's no-RoPE width ``qk_nope_head_dim``, its value width
    ``v_head_dim``, which the model takes equal), shared experts (``n_shared_experts``) and dense
    first layers (``first_k_dense_replace``) of ``ffn_hidden`` beside experts of
    ``moe_ffn_hidden``; nothing for another model."""
    keys: dict[str, Any] = {}
    latent = _count(_get(model, "kv_lora_rank"))
    if latent:
        rope = int(_get(model, "qk_rope_head_dim", "rope_head_dim") or 0)
        nope, value = _get(model, "qk_nope_head_dim"), _get(model, "v_head_dim")
        if nope is not None and value is not None and int(nope) != int(value):
            raise ConfigError(f"{_where(case)}: model.qk_nope_head_dim ({nope}) and v_head_dim "
                              f"({value}) differ; latent attention is modelled with equal "
                              "widths (DeepSeek-V2/V3).")  # fmt: skip
        width = nope or value or int(_need(case, "model.head_dim")) - rope
        keys |= {"kv_lora_rank": latent, "q_lora_rank": int(_get(model, "q_lora_rank") or 0),
                 "rope_head_dim": rope, "head_dim": int(width)}  # fmt: skip
    shared = _count(_get(model, "num_shared_experts", "n_shared_experts"))
    dense = _count(_get(model, "dense_layers", "first_k_dense_replace"))
    if shared:
        keys["num_shared_experts"] = shared
    if dense:
        keys["first_dense_layers"] = dense
    dense_width, expert_width = _get(model, "ffn_hidden"), _get(model, "moe_ffn_hidden")
    if (shared or dense) and dense_width and expert_width and out.get("num_experts"):
        keys |= {"ffn_hidden_size": int(dense_width), "moe_ffn_hidden_size": int(expert_width)}
    return keys


def _is_moe(model: dict[str, Any]) -> bool:
    """Whether the model states more than one expert."""
    experts = _get(model, "num_experts", "experts", "moe_experts")
    return isinstance(experts, int | float) and not isinstance(experts, bool) and experts > 1


def _tied_embeddings(case: dict[str, Any]) -> bool:
    """Whether the output layer reuses the input embedding: ``model.tied_embeddings`` where
    stated, else by the model's family: GPT-2/3 style (Megatron's GPT default,
    ``--untie-embeddings-and-output-weights`` off; MPT's ``wte`` as its output layer; BLOOM)
    tie, Llama-style and the others do not."""
    model = case.get("model") or {}
    stated = model.get("tied_embeddings")
    if stated is not None:
        if not isinstance(stated, bool):
            raise ConfigError(f"{_where(case)}: model.tied_embeddings must be true or false; "
                              f"got {stated!r}.")  # fmt: skip
        return stated
    return bool(re.search(r"\bgpt|\bmpt\b|bloom", str(model.get("type") or "").lower()))


def _case_batch(case: dict[str, Any]) -> float:
    """Sequences per step: ``global_batch_size``, else ``global_batch_tokens`` / seq_len."""
    train = _need(case, "training")
    if train.get("global_batch_size") is not None:
        return _number(case, "training.global_batch_size", train["global_batch_size"])
    if train.get("global_batch_tokens") is not None:
        tokens = _number(case, "training.global_batch_tokens", train["global_batch_tokens"])
        return tokens / _number(case, "model.seq_len", _need(case, "model.seq_len"))
    raise ConfigError(f"{_where(case)}: training.global_batch_size is missing.")


def _micro_batch(case: dict[str, Any], pp: int) -> int:
    """The micro-batch: as stated; else, without pipelining, the per-rank ``local_batch_size``
    (torchtitan runs one forward over it and accumulates gradients over global / (local × data
    parallel) of them: ``training.local_batch_size``); else 1, the Megatron-LM examples'."""
    train = case.get("training") or {}
    if train.get("micro_batch_size"):
        return int(train["micro_batch_size"])
    local = train.get("local_batch_size")
    if pp == 1 and isinstance(local, int | float) and local >= 1:
        return int(local)
    return 1


def _modelled_batch(case: dict[str, Any], dp: int, mb: int) -> int:
    """The case's batch, or the nearest multiple of dp × micro-batch when a source's batch
    does not divide evenly (e.g. 2M tokens on 124 data-parallel ranks)."""
    unit = dp * mb
    return max(1, round(_case_batch(case) / unit)) * unit


def batch_scale(case: dict[str, Any], scenario: Any) -> float:
    """Case batch / modelled batch (``scenario`` from :func:`training_case_scenario`): the
    factor that takes the modelled step to the case's (the step time scales with the number
    of micro-batches)."""
    return _case_batch(case) / scenario.workload.global_batch_size


def training_case_scenario(case: dict[str, Any]) -> Any:
    """A measured training run as a deepflow scenario (unstated inputs: :func:`framework`)."""
    from deepflow.config import scenario_from_mapping

    device_preset, network_preset = accelerator_presets(case)
    train = _need(case, "training")
    flags = framework(case)
    gpus = int(_devices(case))
    stated_per_node = _get(case.get("hardware"), "gpus_per_node")
    node = int(stated_per_node) if isinstance(stated_per_node, int | float) else None
    if node is None:
        # the preset's scale-up domain; a job that does not fill whole domains (128 GPUs of
        # 72-GPU NVL72 racks) takes as many GPUs of each as divide it evenly (2 x 64)
        domain = int(_preset_raw("networks", network_preset)["scale_up"]["domain_size"])
        node = max(d for d in range(1, min(domain, gpus) + 1) if gpus % d == 0)
    per_node = max(1, min(node, gpus))
    if gpus % per_node:
        raise ConfigError(
            f"{_where(case)}: training.num_gpus {gpus} is not a multiple of "
            f"hardware.gpus_per_node {per_node}."
        )
    zero = zero_stage(case)
    tp, pp = int(train.get("tp") or 1), int(train.get("pp") or 1)
    if zero >= 3 and pp > 1 and "torchtitan" in _framework_text(case):
        # PyTorch's pipelining keeps FSDP2's parameters unsharded and its gradients
        # accumulating unsharded (fp32 reduce dtype) until a step's last micro-batch
        # (torch/distributed/pipelining/stage.py, backward_maybe_with_nosync): ZeRO-1 memory
        zero, flags = 1, {**flags, "fp32_main_grads": True}
    cp = int(train.get("cp") or 1)
    if gpus % (tp * pp * cp):
        raise ConfigError(
            f"{_where(case)}: training.num_gpus {gpus} is not a multiple of tp {tp} x pp {pp} "
            f"x cp {cp}."
        )
    # the GPU count is the hardware fact: a stated dp that disagrees with it (expert
    # parallelism counted apart, a typo) gives way to num_gpus / (tp x pp x cp)
    dp = gpus // (tp * pp * cp)
    model = _model(case, flags)
    # the largest interleave up to the stated one that the mapping rules admit
    vp = int(train.get("virtual_pipeline_stages") or 1) if pp > 1 else 1
    while vp > 1 and not _interleave_ok(model, pp, vp, flags["pipeline_balance"]):
        vp -= 1
    mb = _micro_batch(case, pp)
    batch = _modelled_batch(case, dp, mb)
    precision = _precision(case, _preset_raw("devices", device_preset))
    profile = framework_profile(case)
    fsdp, fsdp_fp32 = _fsdp(case)
    layer_sac = _layer_checkpointed(case, int(_need(case, "model.layers")) // pp)
    raw = {
        **({"framework": profile} if profile else {}),
        "system": {"device": _device(case, device_preset, precision),
                   "network": _network(case, network_preset, per_node),
                   "devices_per_node": per_node, "num_nodes": gpus // per_node},
        "workload": {"model": model, "global_batch_size": int(batch), "precision": precision},
        "mapping": {
            "data_parallel": dp,
            "tensor_parallel": tp,
            "pipeline_parallel": pp,
            "context_parallel": cp,
            "expert_parallel": int(train.get("ep") or 1),
            "micro_batch_size": mb,
            "virtual_pipeline_stages": vp,
            # Megatron-Core's TP comm overlap requires sequence parallelism; torchtitan's TP
            # plan shards the norms' sequence (SequenceParallel, parallelize_llama.apply_tp)
            "sequence_parallel": bool(train.get("sp")) or (
                (flags["tp_overlap"] or "torchtitan" in _framework_text(case)) and tp > 1),
            "activation_recompute": "full" if layer_sac else _recompute(
                train.get("activation_recompute"), zero, _framework_text(case)),
            "zero_stage": zero,
            "recompute_num_layers": layer_sac or _stated_layers(case, "recompute_num_layers"),
            "activation_offload_layers": _stated_layers(case, "cpu_offloading_num_layers"),
            "flash_attention": flags["flash"],
            "tp_comm_overlap": flags["tp_overlap"] and tp > 1,
            "tp_async_backward": flags["tp_async_backward"],
            "recorded_tp_gradients": flags["recorded_tp_gradients"] and tp > 1,
            "master_weights": flags["master_weights"],
            "attention_kernel": flags["attention_kernel"],
            "fp8_params": flags["fp8_params"],
            "fp8_recipe": flags["fp8_recipe"],
            "overlap_grad_reduce": flags["dp_overlap"],
            "fsdp_implementation": fsdp,
            "fsdp_reduce_fp32": fsdp_fp32,
            "fp32_main_grads": flags["fp32_main_grads"],
            "gradient_buffers": flags["gradient_buffers"],
            "grad_accumulation": flags["grad_accumulation"],
            "pipeline_balance": flags["pipeline_balance"],
            "fused_swiglu": flags["fused_swiglu"],
            "fused_norm": flags["fused_norm"],
            "fused_rotary": flags["fused_rotary"],
            "cross_entropy": flags["cross_entropy"],
            "fp8_weight_cache": flags["fp8_weight_cache"],
            "overlap_p2p_comm": flags["p2p_overlap"],
        },
    }  # fmt: skip
    scenario = scenario_from_mapping(raw, file=f"<case {case.get('id')}>")
    if _sharding_unstated(case) and dp > 1:
        scenario = _least_sharding_that_fits(scenario)
    return scenario


def _sharding_unstated(case: dict[str, Any]) -> bool:
    training = case.get("training") or {}
    stated = (training.get(k) for k in ("zero_stage", "fsdp", "fsdp_sharding",
                                        "distributed_optimizer"))  # fmt: skip
    return all(v is None or v == "" for v in stated)


def _least_sharding_that_fits(scenario: Any) -> Any:
    """A run that happened fit its devices: where the source does not state how the model
    states were sharded, the lowest ZeRO stage (0 to 3) at which the modelled run fits (a
    run that fits at none keeps stage 0; docs/validation.md)."""
    from dataclasses import replace

    from deepflow.oracle.evaluate import evaluate_one

    for stage in range(4):
        candidate = replace(scenario, mapping=replace(scenario.mapping, zero_stage=stage))
        if evaluate_one(candidate)["memory_excess_B"] <= 0:
            return candidate
    return scenario


# ------------------------------------------------------------------------------ serving
#: Weight precisions a serving case may state, as the workload's precision.
_SERVING_PRECISIONS = {"fp16": "fp16", "bf16": "bf16", "fp8": "fp8", "fp4": "fp4",
                       "nvfp4": "fp4", "mxfp4": "fp4"}  # fmt: skip
#: Elements per block scale of a stated weight format (``workload.weight_scale_block``; 0:
#: the precision's default, FP4 as NVFP4): the OCP microscaling formats scale 32 elements
#: with an E8M0 byte (ModelOpt ``MXFP4_DEFAULT_CFG``).
_SCALE_BLOCKS = {"mxfp4": 32}
#: What a serving case's measurement is compared with: (measured key, model output, label);
#: the first the case states per quantity (docs/validation.md). A deterministic model's mean
#: and median are one figure; keys in milliseconds (``ttft_ms``, ``tpot_ms_median``, ...) are
#: read in seconds (:data:`SERVING_MS_KEY`).
SERVING_QUANTITIES = (
    (("output_tokens_per_s_total", "output_tokens_per_s_per_gpu", "output_tokens_per_s"),
     "tokens_per_s", "throughput"),
    (("ttft_s", "ttft_s_mean", "ttft_s_median", "ttft_s_p50"), "ttft_s", "ttft"),
    (("tpot_s", "tpot_s_p50", "itl_s", "tpot_s_mean", "tpot_s_median", "itl_s_mean",
      "itl_s_median", "itl_s_p50"), "tpot_s", "tpot"),
    (("request_latency_s", "request_latency_s_mean", "request_latency_s_median",
      "e2e_latency_s", "e2e_latency_s_mean", "e2e_latency_s_median"),
     "request_latency_s", "latency"),
    (("requests_per_s", "request_throughput_per_s", "requests_per_s_total"), "samples_per_s",
     "requests"),
)  # fmt: skip
#: A serving measurement stated in milliseconds, e.g. vLLM's ``median_ttft_ms`` transcribed as
#: ``ttft_ms_median``: its quantity, the statistic after it.
SERVING_MS_KEY = re.compile(r"^(ttft|tpot|itl|request_latency|e2e_latency)_ms(_\w+)?$")


def inference_case_scenario(case: dict[str, Any], batch: int | None = None) -> Any:
    """A measured serving run as a scenario (``workload.kind: inference``): the case's model,
    accelerator, mapping, precisions, prompt and output lengths, how its server scheduled the
    requests (:func:`serving_scheduler`), and the requests offered: its stated batch or
    concurrency, else the number of requests of an offline run, else ``batch`` (the caller's
    choice for runs that state neither)."""
    from deepflow.config import scenario_from_mapping

    device_preset, network_preset = accelerator_presets(case)
    inf = case.get("inference")
    if not isinstance(inf, dict):
        raise ConfigError(f"{_where(case)}: inference is missing.")
    stated = str(inf.get("weight_precision") or "").lower()
    precision = _SERVING_PRECISIONS.get(stated)
    if precision is None:
        raise ConfigError(f"{_where(case)}: inference.weight_precision "
                          f"{inf.get('weight_precision')!r} is not one deepflow serves "
                          f"(known: {', '.join(sorted(_SERVING_PRECISIONS))}).")  # fmt: skip
    kv = _SERVING_PRECISIONS.get(str(inf.get("kv_cache_precision") or "").lower(), "")
    lengths = []
    for name in ("input_len", "output_len"):
        value = inf.get(name)
        if not isinstance(value, int | float) or isinstance(value, bool) or value < 1:
            raise ConfigError(f"{_where(case)}: inference.{name} must be a number >= 1; got "
                              f"{value!r} (variable lengths are not modelled).")  # fmt: skip
        lengths.append(int(value))
    requests = _count(_get(inf, "batch_size", "max_concurrency")) or _count(
        inf.get("num_requests"))  # fmt: skip
    if poisson_rate(case) is not None:
        # Poisson arrivals: the run's requests are offered, its concurrency (if any) caps them
        requests = _count(inf.get("num_requests")) or requests
    if requests is None and batch is None:
        raise ConfigError(f"{_where(case)}: inference.batch_size (or max_concurrency) is "
                          "missing.")  # fmt: skip
    tp, pp = int(inf.get("tp") or 1), int(inf.get("pp") or 1)
    gpus = serving_gpus(case)
    stated_per_node = _get(case.get("hardware"), "gpus_per_node")
    node = int(stated_per_node) if isinstance(stated_per_node, int | float) else 8
    per_node = max(1, min(node, gpus))
    model = _model(case, {"dropout": False}, seq_len=lengths[0] + lengths[1])
    ep = int(inf.get("ep") or 1)
    etp = 0
    if inf.get("attention_dp"):
        # attention data-parallel (TensorRT-LLM enable_attention_dp): every GPU runs attention
        # for its own requests with the whole attention block. The MoE layers span its GPUs as
        # tp_size = moe_tensor_parallel_size × moe_expert_parallel_size: whole experts sharded
        # over them where the case states the expert parallelism, else TensorRT-LLM's default,
        # every expert split over all of them (trtllm-bench --ep default None, so
        # tensorrt_llm/mapping.py Mapping sets moe_tp_size = tp_size, moe_ep_size = 1; their
        # tokens all-gathered and the outputs reduce-scattered: docs/model.md §D1)
        if not inf.get("ep"):
            etp = gpus // pp
        tp = 1
    elif _count(inf.get("moe_tp")) and ep > 1:
        # a stated MoE tensor-parallel degree (TensorRT-LLM's moe_tensor_parallel_size, with
        # moe_tp × moe_ep = tp_size): each expert split over that many ranks, whole experts
        # over the others of the tensor-parallel group (docs/model.md §D1)
        etp = _count(inf.get("moe_tp")) or 0
    dp = max(1, gpus // (tp * pp))
    pools = disaggregated_pools(case)
    if requests is not None and pools is None:
        # the client's requests (its concurrency, or an offline run's queue) spread over the
        # data-parallel replicas, each request on one (a router's round robin; TensorRT-LLM's
        # attention-DP scheduler hands them out round-robin too: https://github.com/NVIDIA/
        # TensorRT-LLM/blob/main/docs/source/blogs/tech_blog/blog10_ADP_Balance_Strategy.md,
        # "Baseline: Round-Robin Token Distribution"), and global_batch_size is what each
        # replica is offered (docs/model.md part D)
        requests = math.ceil(requests / dp)
    prefill: dict[str, int] = {}
    if pools is not None:
        # a prefill pool and a decode pool (docs/model.md §D6): the decode replicas' degree is
        # the mapping's, the requests are offered per decode replica (the pool that holds them
        # through their lives)
        (replicas_p, tp_p), (replicas_d, tp), pp = pools
        dp, gpus = replicas_p + replicas_d, pp * (replicas_p * tp_p + replicas_d * tp)
        per_node = max(1, min(node, gpus))
        prefill = {"prefill_replicas": replicas_p,
                   "prefill_tensor_parallel": tp_p if tp_p != tp else 0}  # fmt: skip
        if requests is not None:
            requests = math.ceil(requests / replicas_d)
    offered = requests if requests is not None else batch
    raw = {
        "system": {"device": _device(case, device_preset, precision),
                   "network": _network(case, network_preset, per_node),
                   "devices_per_node": per_node, "num_nodes": max(1, gpus // per_node)},
        "workload": {"kind": "inference", "model": model, "precision": precision,
                     "global_batch_size": offered, "input_tokens": lengths[0],
                     "output_tokens": lengths[1], "kv_cache_precision": kv,
                     "weight_scale_block": _SCALE_BLOCKS.get(stated, 0)},
        "mapping": {"tensor_parallel": tp, "pipeline_parallel": pp, "data_parallel": dp,
                    "expert_parallel": ep, "expert_tensor_parallel": etp,
                    "sequence_parallel": False,
                    "attention_kernel": serving_attention_kernel(case)} | prefill,
    }  # fmt: skip
    scenario = scenario_from_mapping(raw, file=f"<case {case.get('id')}>")
    return _replace_workload(scenario, serving_scheduler(case, scenario))


def disaggregated_pools(
    case: dict[str, Any],
) -> tuple[tuple[int, int], tuple[int, int], int] | None:
    """((prefill replicas, their tensor parallelism), (decode replicas, theirs), pipeline
    stages) of a case served by disaggregated pools (its ``disaggregation``), None for a
    co-located one. Pools of different pipeline depths, with expert parallelism or with
    attention data parallelism are not modelled (docs/model.md §D6): ConfigError."""
    pools = case.get("disaggregation")
    if not isinstance(pools, dict):
        return None
    counts = {k: _count(pools.get(k)) for k in ("prefill_instances", "decode_instances")}
    missing = [k for k, v in counts.items() if v is None]
    if missing:
        raise ConfigError(f"{_where(case)}: disaggregation.{missing[0]} must be a count >= 1.")
    pp_p, pp_d = (_count(pools.get(k)) or 1 for k in ("prefill_pp", "decode_pp"))
    if pp_p != pp_d:
        raise ConfigError(f"{_where(case)}: its prefill and decode pools have {pp_p} and "
                          f"{pp_d} pipeline stages; pools of different pipeline depths are not "
                          "modelled.")  # fmt: skip
    # (an attention data-parallel degree of 1, or false, is none)
    if any((_count(pools.get(k)) or 1) > 1 for k in ("prefill_ep", "decode_ep",
                                                      "prefill_attention_dp",
                                                      "decode_attention_dp")):  # fmt: skip
        raise ConfigError(f"{_where(case)}: its pools run expert or attention data "
                          "parallelism; a disaggregated pool of either is not "
                          "modelled.")  # fmt: skip
    tp_p, tp_d = (_count(pools.get(k)) or 1 for k in ("prefill_tp", "decode_tp"))
    return ((counts["prefill_instances"] or 1, tp_p), (counts["decode_instances"] or 1, tp_d),
            pp_p)  # fmt: skip


def serving_gpus(case: dict[str, Any]) -> int:
    """The GPUs a serving case ran on: ``inference.num_gpus``, else ``hardware.num_gpus``, else
    one replica's tensor × pipeline ranks."""
    inf = case.get("inference") or {}
    stated = _get(inf, "num_gpus") or _get(case.get("hardware"), "num_gpus")
    return int(stated or int(inf.get("tp") or 1) * int(inf.get("pp") or 1))


def _count(value: Any) -> int | None:
    """A stated count (a number >= 1), else None."""
    if isinstance(value, int | float) and not isinstance(value, bool) and value >= 1:
        return int(value)
    return None


def _replace_workload(scenario: Any, changes: Mapping[str, Any]) -> Any:
    import dataclasses

    return dataclasses.replace(scenario, workload=dataclasses.replace(scenario.workload, **changes))


def serving_scheduler(case: dict[str, Any], scenario: Any) -> dict[str, Any]:
    """How the case's server batched requests, as workload keys (docs/validation.md):

    * static batching where the case says so, runs TensorRT-LLM's C++ session benchmark
      (``gptSessionBenchmark`` starts a batch together and ends it together), or runs a closed
      loop of fixed-length requests (sessions that start together with equal lengths stay in
      lockstep whatever the scheduler: each round's prompts arrive together and finish
      together); continuous (in-flight) batching otherwise;
    * an offline run (``arrivals: offline``) where all the case's requests were issued at once
      (trtllm-bench throughput: "infinite request rate"; a static batch started together),
      Poisson arrivals where it states a finite request rate (:func:`poisson_arrivals`), a
      closed loop of clients otherwise (:func:`offline_run`);
    * CUDA-graph padding of decode iterations where the case states padding is on
      (TensorRT-LLM ``cuda_graph_config.enable_padding``; trtllm-bench turns it on);
    * trtllm-bench's own engine limits where it picked them (:func:`trtllm_bench_limits`);
    * TensorRT-LLM's PyTorch-backend executor's host time per running request and iteration
      (``configs/calibration/frameworks.yaml``, ``tensorrt_llm_pytorch``);
    * the share of free memory trtllm-bench's KV-cache pool takes
      (:func:`kv_cache_memory_fraction`);
    * how the scheduler reserves KV cache (:func:`kv_cache_reservation`);
    * whether the server's buffers come from PyTorch's caching allocator
      (:func:`caching_allocator`);
    * how its decode attention kernel reads a grouped-query model's KV cache
      (:func:`decode_kv_reads`);
    * whether its first token comes from a decode iteration (:func:`first_token_from_decode`).
    """
    inf = case.get("inference") or {}
    text = " ".join(str(inf.get(k) or "") for k in ("framework", "mode")).lower()
    graphs = str(inf.get("cuda_graphs") or "").lower()
    # fixed-length sessions of a closed loop stay in lockstep rounds where the server prefills
    # every waiting prompt in the pass that admits it (LMDeploy TurboMind v0.1's ContextDecode);
    # a per-iteration token budget (TensorRT-LLM's max_num_tokens, vLLM's max_num_batched_tokens,
    # SGLang's chunked prefill) staggers the resubmitted prompts, and the loop runs continuous
    # batching's steady state (docs/model.md §D2)
    rounds = re.search(r"closed loop.*fixed.length", text) and re.search(r"lmdeploy|turbomind",
                                                                          text)  # fmt: skip
    lockstep = re.search(r"static|gptsessionbenchmark", text) or rounds
    out: dict[str, Any] = {
        "batching": "static" if lockstep else "continuous",
        "arrivals": "offline" if offline_run(case) else "closed_loop",
        "cuda_graph_padding": "padding on" in graphs or "enable_padding" in graphs,
        "kv_cache_reservation": kv_cache_reservation(case),
        "caching_allocator": caching_allocator(case),
        "decode_kv_reads": decode_kv_reads(case),
        "first_token_from_decode": first_token_from_decode(case),
    }
    if "tensorrt-llm" in text and "pytorch backend" in text:
        from deepflow.config.calibration import current_calibration

        # the PyTorch executor's host time per running request and iteration (measured,
        # configs/calibration/frameworks.yaml tensorrt_llm_pytorch)
        out["host_s_per_request"] = current_calibration().serving.host_s_per_request
    stated_limits = _count(inf.get("max_batch_size")), _count(inf.get("max_num_tokens"))
    if "trtllm-bench" in text:
        # TensorRT-LLM's executor preallocates its KV-cache pool as a share of the free memory
        # (KvCacheConfig.free_gpu_memory_fraction)
        out["kv_cache_memory_fraction"] = kv_cache_memory_fraction(case)
    if "trtllm-bench" in text and not any(stated_limits):
        out["max_batch_size"], out["max_num_tokens"] = trtllm_bench_limits(case, scenario)
    else:
        out["max_batch_size"], out["max_num_tokens"] = (v or 0 for v in stated_limits)
    out["prompt_tokens_per_iteration"] = out["max_num_tokens"] or prompt_tokens_per_iteration(case)
    poisson = poisson_arrivals(case)
    if poisson.get("max_batch_size") and out["max_batch_size"]:
        poisson["max_batch_size"] = min(poisson["max_batch_size"], out["max_batch_size"])
    return out | poisson


def _tensorrt_llm(text: str) -> bool:
    """Whether a framework's name is TensorRT-LLM's, as sources spell it ("TensorRT-LLM", NVIDIA
    Dynamo's "trtllm" backend and its "tensorrtllm-runtime" container)."""
    return re.search(r"tensorrt-llm|tensorrtllm|\btrtllm\b", text.lower()) is not None


def serving_attention_kernel(case: dict[str, Any]) -> str:
    """The fused attention kernel the case's server runs (docs/validation.md): TensorRT-LLM's
    own (``trtllm``: its context FMHA kernels, warp-specialized on Hopper "since the first
    public release", https://github.com/NVIDIA/TensorRT-LLM/issues/1947, and trtllm-gen on
    Blackwell; it does not call flash-attn, https://github.com/NVIDIA/TensorRT-LLM/issues/2238)
    where its framework is TensorRT-LLM, a FlashAttention-2-class kernel (``fa2``) otherwise."""
    inf = case.get("inference") or {}
    return "trtllm" if _tensorrt_llm(str(inf.get("framework") or "")) else "fa2"


def poisson_rate(case: dict[str, Any]) -> float | None:
    """The requests per second a case's client offered as a Poisson process, where it states a
    finite ``request_rate``: vLLM's ``benchmarks/benchmark_serving.py`` and SGLang's
    ``bench_serving`` draw the gaps between requests from an exponential distribution at
    ``--request-rate`` (``burstiness`` 1, their default), not all at once; None otherwise."""
    rate = (case.get("inference") or {}).get("request_rate")
    if isinstance(rate, int | float) and not isinstance(rate, bool) and 0 < rate < math.inf:
        return float(rate)
    return None


def poisson_arrivals(case: dict[str, Any]) -> dict[str, Any]:
    """Workload keys of a Poisson-arrival case (:func:`poisson_rate`): ``arrivals: poisson`` at
    its rate, continuous batching, and the concurrency it caps the requests in flight at (per
    data-parallel replica, as ``max_batch_size``); nothing for another case."""
    rate = poisson_rate(case)
    if rate is None:
        return {}
    inf = case.get("inference") or {}
    out: dict[str, Any] = {"arrivals": "poisson", "request_rate": rate,
                           "batching": "continuous"}  # fmt: skip
    cap = _count(inf.get("max_concurrency"))
    if cap is not None:
        replicas = max(1, _count(inf.get("dp_replicas")) or 1)
        out["max_batch_size"] = math.ceil(cap / replicas)
    return out


def offline_run(case: dict[str, Any]) -> bool:
    """Whether the case issued all its requests at once and timed the run to its last, as its
    mode or request rate states: trtllm-bench ``throughput`` ("a local inference client is fed
    requests at an infinite rate"; TensorRT-LLM perf-overview.md) and a static batch started
    together (TensorRT-LLM's ``gptSessionBenchmark``), not a closed loop of clients."""
    inf = case.get("inference") or {}
    text = " ".join(str(inf.get(k) or "") for k in ("framework", "mode")).lower()
    rate = str(inf.get("request_rate") or "").lower()
    # an infinite rate with a concurrency cap is a closed loop of that many clients (AIPerf's
    # --concurrency, vLLM benchmark_serving's --max-concurrency with --request-rate inf)
    closed = "closed loop" in text or _count(inf.get("max_concurrency")) is not None
    together = re.search(r"gptsessionbenchmark|static batch", text) and not closed
    flood = rate in ("inf", "infinite") and not closed
    return bool(re.search(r"\boffline\b", text) or together or flood)


def kv_cache_reservation(case: dict[str, Any]) -> str:
    """How the case's server reserves KV cache for a request it admits (docs/model.md §D3):

    * ``on_demand`` for vLLM (PagedAttention: "blocks are allocated on demand" as tokens are
      generated, and requests are preempted when they run out; Kwon et al., SOSP'23, §4.2-4.5,
      https://arxiv.org/abs/2309.06180), SGLang (token-level pool, retracting requests when it
      runs out) and LMDeploy's TurboMind from v0.1 on (TurboMind 2.x "has implemented Paged
      Attention, managing the k/v cache in blocks" of ``cache_block_seq_len`` tokens,
      https://github.com/InternLM/lmdeploy/blob/main/docs/en/inference/turbomind_config.md);
    * ``full_context`` otherwise: TensorRT-LLM's default capacity scheduler policy
      ``GUARANTEED_NO_EVICT`` admits a request only when blocks for its prompt and all its
      output tokens are free (https://nvidia.github.io/TensorRT-LLM/performance/performance-tuning-guide/useful-runtime-flags.html,
      "Capacity Scheduler Policy"), and LMDeploy 0.0.x (TurboMind 1.0) kept a cache entry of a
      whole session per sequence.
    """
    inf = case.get("inference") or {}
    text = str(inf.get("framework") or "").lower()
    if re.search(r"\bvllm\b|\bsglang\b", text):
        return "on_demand"
    if re.search(r"lmdeploy|turbomind", text):
        version = re.search(r"(\d+)\.(\d+)", str(inf.get("framework_version") or ""))
        if version is None or (int(version[1]), int(version[2])) >= (0, 1):
            return "on_demand"
    return "full_context"


def caching_allocator(case: dict[str, Any]) -> bool:
    """Whether the case's server takes its device buffers from PyTorch's caching allocator
    (whose fragmentation the memory model adds, docs/model.md §C2.5, §D3): true for a Python
    server (TensorRT-LLM's PyTorch backend, vLLM, SGLang); false for a C++ engine that
    allocates its weights, KV cache and workspaces once with cudaMalloc or cudaMallocAsync:
    TensorRT-LLM's TensorRT runtime (gptSessionBenchmark / gptManagerBenchmark, a TensorRT
    engine; NVIDIA/TensorRT-LLM v0.6.1 ``cpp/include/tensorrt_llm/runtime/tllmBuffers.h``,
    ``CudaAllocator`` and ``CudaAllocatorAsync``) and LMDeploy's TurboMind
    (``src/turbomind/utils/allocator.h`` at v0.1.0, ``Allocator<AllocatorType::CUDA>`` on the
    device's default stream-ordered pool; its ``BlockManager`` allocates the KV blocks in
    chunks)."""
    inf = case.get("inference") or {}
    text = str(inf.get("framework") or "").lower()
    engine = (r"tensorrt (engine|backend)|c\+\+ (runtime|backend|executor)|gptsessionbenchmark|"
              r"gptmanagerbenchmark|turbomind")  # fmt: skip
    return not re.search(engine, text)


def first_token_from_decode(case: dict[str, Any]) -> bool:
    """Whether the case's server takes a request's first token from a decode iteration: LMDeploy
    TurboMind before v0.1.0a2, whose ``LlamaBatch::ContextDecode`` prefills ``input_length - 1``
    tokens ("subtract input/context len by 1 to skip last input token (will process with
    decoder later)", src/turbomind/models/llama/LlamaBatch.cc at v0.1.0a1; TurboMind 1.0's
    ``contextDecode`` likewise, v0.0.x) and runs the last one in the next ``Generate`` step with
    the running decodes; v0.1.0a2 fused both into one ``Forward`` whose prefill emits the first
    token (docs/model.md §D2)."""
    inf = case.get("inference") or {}
    if not re.search(r"lmdeploy|turbomind", str(inf.get("framework") or "").lower()):
        return False
    version = str(inf.get("framework_version") or "")
    found = re.search(r"(\d+)\.(\d+)\.(\d+)(?:a(\d+))?", version)
    if found is None:
        return False
    release = (int(found[1]), int(found[2]), int(found[3]))
    # a pre-release sorts before its release: 0.1.0a1 < 0.1.0a2 < 0.1.0
    alpha = int(found[4]) if found[4] is not None else 10**9
    return (release, alpha) < ((0, 1, 0), 2)


def decode_kv_reads(case: dict[str, Any]) -> str:
    """How the case's decode attention kernel reads the KV cache (docs/model.md §D1):

    * ``per_query_head`` for TensorRT-LLM before v0.7.1: its generation-phase masked MHA
      kernel runs one thread block per query head and sequence (``blockIdx.x`` the query head
      ``hi``, its KV head ``hi_kv = hi / qhead_per_kv``), each streaming that KV head's cache,
      so a grouped-query model's cache is read once per query head; v0.7.1's release notes add
      "MMHA optimization for MQA and GQA" and FP8 KV caches for the XQA kernel, which loads a
      KV head once for its query heads
      (https://github.com/NVIDIA/TensorRT-LLM/blob/main/docs/source/release-notes.md,
      "TensorRT-LLM Release 0.7.1");
    * ``per_kv_head`` otherwise (XQA, FlashAttention/FlashInfer decode kernels).
    """
    inf = case.get("inference") or {}
    if not _tensorrt_llm(str(inf.get("framework") or "")):
        return "per_kv_head"
    version = re.match(r"v?(\d+)\.(\d+)(?:\.(\d+))?", str(inf.get("framework_version") or ""))
    if version is None:
        return "per_kv_head"
    release = tuple(int(v or 0) for v in version.groups())
    return "per_query_head" if release < (0, 7, 1) else "per_kv_head"


#: trtllm-bench's bytes per weight and KV element by quantisation (TensorRT-LLM
#: bench/build/tuning.py BYTES_PER_ELEM; NVFP4 checkpoints get an FP8 KV cache, utils/general.py
#: _KV_CACHE_MAP).
_TRTLLM_BYTES = {"fp8": 1.0, "fp4": 0.5}


def trtllm_bench_limits(case: dict[str, Any], scenario: Any) -> tuple[int, int]:
    """The max batch size and max tokens per iteration trtllm-bench gives an engine when the
    user does not (TensorRT-LLM ``tensorrt_llm/bench/build/tuning.py`` ``calc_engine_setting``
    and ``finetune_setting``; ``bench/benchmark/utils/general.py`` ``get_settings``): the
    requests its KV estimate holds, capped at 4,096 per pipeline stage and rounded up
    optimistically; B·(1 + ISL/OSL) tokens capped at 32,768 and rounded up, at least ISL + B
    without chunked prefill (its default)."""
    inf = case.get("inference") or {}
    model, wl = scenario.workload.model, scenario.workload
    tp, pp = int(inf.get("tp") or 1), int(inf.get("pp") or 1)
    isl, osl = wl.input_tokens, wl.output_tokens
    weight_B = _TRTLLM_BYTES.get(wl.precision, 2.0)
    kv_B = _TRTLLM_BYTES.get(wl.kv_cache_precision or wl.precision, 2.0)
    head = model.head_dim or model.hidden_size / model.num_attention_heads
    per_token_GiB = 2 * model.num_layers * max(tp, model.num_kv_heads) * head * kv_B / 2**30
    params = _serving_params(model)
    available_GiB = scenario.system.device.hbm_capacity_B / 2**30 * tp * pp - (
        params * weight_B / 2**30
    )
    requests = available_GiB * kv_cache_memory_fraction(case) / (per_token_GiB * (isl + osl))
    raw_bs = min(requests, 4096) / pp
    raw_tokens = min(raw_bs * (1 + isl / osl), 32768)
    max_bs = max(64, _round_up(raw_bs, ((256, 32), (1024, 128), (math.inf, 256))))
    max_tokens = max(2048, _round_up(raw_tokens, ((4096, 256), (8192, 512), (math.inf, 1024))))
    return max_bs, max(max_tokens, isl + max_bs)


def prompt_tokens_per_iteration(case: dict[str, Any]) -> int:
    """The prompt tokens the case's server takes into one iteration where the case states no
    budget (docs/model.md §D2, bursts): its stated ``chunked_prefill_size``, else the
    framework's default per-iteration budget on the case's GPU —

    * TensorRT-LLM: ``max_num_tokens`` 8192 (its ``BuildConfig`` default, which trtllm-serve
      and NVIDIA Dynamo's TensorRT-LLM worker pass on: https://nvidia.github.io/TensorRT-LLM/
      performance/performance-tuning-guide/tuning-max-batch-size-and-max-num-tokens.html);
    * vLLM's V1 engine (0.8 on): ``max_num_batched_tokens`` 8192 for the OpenAI server on a GPU
      of 70 GiB or more (16,384 for the offline ``LLM`` class), 2048 for the server on smaller
      ones (https://github.com/vllm-project/vllm/blob/v0.19.1/vllm/engine/arg_utils.py,
      ``get_batch_defaults``; v0.8.0's matched H100 and H200 by name); before 0.8 (V0,
      ``max(max_model_len, 2048)`` without chunked prefill) not known here: 0;
    * SGLang: ``chunked_prefill_size`` 8192, from 0.4.7 16384 on a GPU of 160 GiB or more
      (B200; https://github.com/sgl-project/sglang/blob/v0.5.3/python/sglang/srt/server_args.py,
      ``_handle_gpu_memory_settings``; v0.4.0's 8192 on every GPU of 25 GB or more);

    0 (prompts arriving apart, one an iteration) for any other server."""
    inf = case.get("inference") or {}
    stated = _count(inf.get("chunked_prefill_size"))
    if stated:
        return stated
    text = str(inf.get("framework") or "")
    memory_gb = _number_or_none(_get(case.get("hardware"), "memory_gb")) or 0.0
    if _tensorrt_llm(text):
        return 8192
    if re.search(r"\bvllm\b", text.lower()):
        version = re.search(r"(\d+)\.(\d+)", str(inf.get("framework_version") or text))
        if version is not None and (int(version[1]), int(version[2])) < (0, 8):
            return 0
        if memory_gb < 70 * 2**30 / 1e9:
            return 2048
        return 16384 if offline_run(case) else 8192
    if re.search(r"\bsglang\b", text.lower()):
        version = re.search(r"(\d+)\.(\d+)\.(\d+)", str(inf.get("framework_version") or text))
        early = version is not None and tuple(int(v) for v in version.groups()) < (0, 4, 7)
        return 16384 if memory_gb >= 160 * 2**30 / 1e9 and not early else 8192
    return 0


def kv_cache_memory_fraction(case: dict[str, Any]) -> float:
    """The share of free memory a trtllm-bench run gave its KV-cache pool: the case's
    ``kv_cache_free_gpu_mem_fraction`` where it states a number, else 0.95, which TensorRT-LLM's
    performance overview ran "in many cases" (docs/source/performance/perf-overview.md: "we
    also use a higher KV cache percentage by setting --kv_cache_free_gpu_mem_fraction 0.95")."""
    fraction = (case.get("inference") or {}).get("kv_cache_free_gpu_mem_fraction")
    return float(fraction) if isinstance(fraction, int | float) else 0.95


def _round_up(value: float, steps: tuple[tuple[float, int], ...]) -> int:
    """``value`` rounded up to the step of the first (below, step) it is below
    (trtllm-bench's ``finetune_setting``: a slightly optimistic setting)."""
    step = next(step for below, step in steps if value < below)
    return int(step * math.ceil(value / step))


def _serving_params(model: Any) -> float:
    """Parameters of a serving model (embedding and output layer included), as a Hugging Face
    checkpoint counts them."""
    h, a = model.hidden_size, model.num_attention_heads
    kv = model.num_kv_heads or a
    head = model.head_dim or h / a
    mats = 3 if model.ffn_activation == "swiglu" else 2
    experts = model.num_experts
    layer = h * (a + 2 * kv) * head + a * head * h + mats * h * model.ffn_hidden_size * experts
    layer += (h * experts if experts > 1 else 0) + 2 * h
    return model.num_layers * layer + 2 * model.vocab_size * h


def _model_flops(case: dict[str, Any], definition: str) -> float:
    """FLOPs per step under the source's convention (``measured.flops_definition``).

    Narayanan et al. 2021 Eq. 3 (counts the recompute forward) where the definition cites it;
    else model FLOPs 6·N·T + 12·L·h·s·T (Kaplan et al. 2020 / PaLM appendix B, as Megatron
    and llm-foundry count them), with 8·N·T + 16·L·h·s·T for hardware FLOPs under full
    recompute when the quantity is an HFU. For a GPT with FFN 4h this equals Megatron's
    72·B·s·L·h²·(1 + s/(6h) + V/(12·L·h)).
    """
    model, train = case["model"], case["training"]
    layers, h = float(model["layers"]), float(model["hidden"])
    s, vocab = float(model["seq_len"]), float(model["vocab"])
    batch = train.get("global_batch_size") or float(train["global_batch_tokens"]) / s
    tokens = float(batch) * s
    if re.search(r"eq\.? ?3|96 ?\*? ?b", definition):
        return 96 * tokens * layers * h**2 * (1 + s / (6 * h) + vocab / (16 * layers * h))
    if re.search(r"megatron", definition) and not _get(model, "kv_heads", "num_kv_heads",
                                                       "num_query_groups"):  # fmt: skip
        return 72 * tokens * layers * h**2 * (1 + s / (6 * h) + vocab / (12 * layers * h))
    flags = framework(case)
    n_params = _active_params(case, flags)
    hardware = "hfu" in definition or "hardware flops" in definition
    mult = 8.0 if hardware else 6.0
    return mult * n_params * tokens + 2 * mult * layers * h * s * tokens


def _active_params(case: dict[str, Any], flags: dict[str, bool]) -> float:
    """Parameters a token passes through: attention (GQA), FFN (GeLU/SwiGLU, top-k experts),
    the embedding and LM head (untied counted once, as 6·N conventions do)."""
    m = _model(case, flags)
    h, ffn = float(m["hidden_size"]), float(m["ffn_hidden_size"])
    heads = float(m["num_attention_heads"])
    kv = float(m.get("num_kv_heads") or heads)
    d_head = float(m.get("head_dim") or h / heads)
    attn = h * heads * d_head * 2 + h * kv * d_head * 2
    mats = 3.0 if m["ffn_activation"] == "swiglu" else 2.0
    ffn_params = mats * h * ffn * float(m.get("experts_per_token", 1))
    return float(m["num_layers"]) * (attn + ffn_params) + float(m["vocab_size"]) * h


def measured_peak_memory(case: dict[str, Any]) -> tuple[float, str]:
    """The case's measured peak memory in bytes and what it counts: ``allocated`` (the
    caching allocator's tensors, ``torch.cuda.max_memory_allocated``), ``reserved`` (with
    its cached blocks, ``max_memory_reserved``) or ``device`` (nvidia-smi: with the CUDA
    context). Unknown kinds are scored as reserved, what training logs usually print."""
    measured = case.get("measured") or {}
    gib = measured.get("peak_memory_gib")
    if not isinstance(gib, int | float) or isinstance(gib, bool) or gib <= 0:
        gb = measured.get("peak_memory_gb")
        if not isinstance(gb, int | float) or isinstance(gb, bool) or gb <= 0:
            raise ConfigError(f"{_where(case)}: measured.peak_memory_gib is missing.")
        gib = gb * 1e9 / 2**30
    kind = str(measured.get("memory_kind") or "reserved").lower()
    kind = kind if kind in ("allocated", "reserved", "device") else "reserved"
    return float(gib) * 2**30, kind


def measured_memory_stage(case: dict[str, Any]) -> str:
    """The pipeline stage whose rank the case's memory was read on: ``first``, ``last``, or
    ``peak`` (unknown: the stage that holds the most, what must fit). ``measured.
    rank_measured`` where stated (Megatron-LM logs on rank world_size − 1, the last stage);
    nanotron's benchmark CSV is written by world rank 0 (src/nanotron/helpers.py,
    log_throughput), pipeline rank 0, since its ParallelContext lays ranks out as
    (ep, pp, dp, cp, tp) (src/nanotron/parallel/context.py)."""
    stated = str((case.get("measured") or {}).get("rank_measured") or "").lower()
    if re.search(r"last (pp|pipeline) stage|world_size ?- ?1|\blast stage", stated):
        return "last"
    if re.search(r"first (pp|pipeline) stage|\brank 0\b|\bfirst stage", stated):
        return "first"
    if not stated and "nanotron" in _framework_text(case):
        return "first"
    return "peak"


def measured_step_time_s(case: dict[str, Any]) -> float:
    """The case's step time from what the source states, in this order: an iteration time
    (measured, else derived), tokens/s (global or per GPU), samples/s, TFLOP/s per GPU under
    the source's FLOP convention (:func:`_model_flops`), MFU against the stated peak."""
    measured = _need(case, "measured")
    derived = case.get("derived") or {}
    train = case.get("training") or {}
    for where, block in (("measured", measured), ("derived", derived)):
        value = _get(block, "iteration_time_s", "step_time_s")
        if value is not None:
            return _number(case, f"{where}.iteration_time_s", value)
    model = case.get("model") or {}
    gpus = _devices(case)
    seq = _number(case, "model.seq_len", _need(case, "model.seq_len"))
    batch = train.get("global_batch_size")
    tokens = float(batch) * seq if batch else _get(train, "global_batch_tokens")
    if tokens:
        if _get(measured, "tokens_per_s") is not None:
            return float(tokens) / _number(case, "measured.tokens_per_s", measured["tokens_per_s"])
        if _get(measured, "tokens_per_s_per_gpu") is not None:
            rate = _number(case, "measured.tokens_per_s_per_gpu", measured["tokens_per_s_per_gpu"])
            return float(tokens) / (rate * gpus)
        if batch and _get(measured, "samples_per_s") is not None:
            return float(batch) / _number(case, "measured.samples_per_s", measured["samples_per_s"])
    definition = str(measured.get("flops_definition") or "").lower()
    if str(case.get("group") or "").startswith("narayanan2021") and not definition:
        definition = "eq. 3"
    if model and _get(measured, "tflops_per_gpu") is not None:
        tflops = _number(case, "measured.tflops_per_gpu", measured["tflops_per_gpu"])
        return _model_flops(case, definition) / (gpus * tflops * 1e12)
    mfu = _get(measured, "mfu_pct")
    hardware = case.get("hardware") or {}
    peak = _get(hardware, "peak_dense_tflops_precision_used")
    if model and mfu is not None and isinstance(peak, int | float):
        rate = _number(case, "measured.mfu_pct", mfu) / 100 * float(peak) * 1e12
        return _model_flops(case, definition) / (gpus * rate)
    raise ConfigError(
        f"{_where(case)}: measured has none of iteration_time_s, tokens_per_s, "
        "tokens_per_s_per_gpu, samples_per_s, tflops_per_gpu or mfu_pct (with "
        "hardware.peak_dense_tflops_precision_used)."
    )


def _interleave_ok(model: dict[str, Any], pp: int, vp: int, balance: str = "layers") -> bool:
    """Whether the mapping rules on interleaving (deepflow.config.mapping) admit pp × vp with
    the pipeline split ``balance``."""
    from types import SimpleNamespace

    from deepflow.config.mapping import RULES

    shape = SimpleNamespace(**model)  # the rules read the model's shape by attribute
    values = {"pipeline_parallel": pp, "virtual_pipeline_stages": vp,
              "pipeline_balance": balance}  # fmt: skip
    return all(bool(rule.ok(values, shape)) for rule in RULES  # type: ignore[arg-type]
               if rule.key == "virtual_pipeline_stages")  # fmt: skip
