"""Write serving_holdout_aiconfigurator.json: NVIDIA's measured serving runs of one co-located
replica from ai-dynamo/aiconfigurator's silicon sample, as serving cases (docs/validation.md).

Run: python benchmarks/data/make_aiconfigurator_silicon.py CSV [--out FILE]

CSV is ``aic-core/src/aiconfigurator_core/systems/silicon_sample.csv`` of
https://github.com/ai-dynamo/aiconfigurator at commit :data:`COMMIT` ("real e2e measurements
with provenance; a 2026-04 dump of the internal benchmark DB", its
``docs/design/prediction_regression_gate_design.md`` §2.5): ``git show COMMIT:PATH`` in a clone,
or the raw file at that commit. Each row is one deployment measured by NVIDIA: its backend
(TensorRT-LLM, vLLM, SGLang) and version, model, system, precision, ISL/OSL, the engine's batch
size and tensor / MoE parallelism, the concurrency its client held (in the row's
``silicon_data_source``), and the measured TTFT and TPOT in ms.

Kept: aggregated rows (``mode`` agg) of the models whose shapes the serving model represents
(Llama 3.1 8B and 70B, Qwen3-32B, Qwen3-235B-A22B; DeepSeek-V3 and -R1 with latent attention,
shared experts and dense first layers, docs/model.md §D7; no sliding windows; their shapes from
the same commit's ``model_configs``), one pipeline stage on one node (at most 8 GPUs), no
attention data parallelism, and a stated concurrency equal to the engine's batch size (one
replica: a concurrency above it does not say how many replicas shared it).
Everything the row does not state is listed under ``inferred``. A check only: no constant is
fitted on these rows (benchmarks/data/README.md).
"""

from __future__ import annotations

import argparse
import csv
import json
import re
from pathlib import Path
from typing import Any

COMMIT = "095f58a51c4ca8e61b66ec108d86f223f8d559ce"
CSV_PATH = "aic-core/src/aiconfigurator_core/systems/silicon_sample.csv"
CONFIGS = "aic-core/src/aiconfigurator_core/model_configs"
URL = f"https://github.com/ai-dynamo/aiconfigurator/blob/{COMMIT}/{CSV_PATH}"
OUT = Path(__file__).with_name("serving_holdout_aiconfigurator.json")

_LLAMA_8B = {
    "config": "meta-llama--Meta-Llama-3.1-8B_config.json", "type": "decoder-only dense, GQA",
    "layers": 32, "hidden": 4096, "heads": 32, "kv_heads": 8, "head_dim": 128,
    "ffn_hidden": 14336, "vocab": 128256, "params_billion": 8.03,
}  # fmt: skip
_QWEN3_32B = {
    "config": "Qwen--Qwen3-32B_config.json", "type": "decoder-only dense, GQA (qk-norm)",
    "layers": 64, "hidden": 5120, "heads": 64, "kv_heads": 8, "head_dim": 128,
    "ffn_hidden": 25600, "vocab": 151936, "params_billion": 32.8,
}  # fmt: skip
_DEEPSEEK_V3 = {
    "config": "deepseek-ai--DeepSeek-V3_config.json",
    "type": "decoder-only MoE, multi-head latent attention, 1 shared + 256 routed experts, the "
            "first 3 layers dense",
    "layers": 61, "hidden": 7168, "heads": 128, "kv_heads": None, "head_dim": 192,
    "kv_lora_rank": 512, "q_lora_rank": 1536, "qk_rope_head_dim": 64, "qk_nope_head_dim": 128,
    "v_head_dim": 128, "ffn_hidden": 18432, "moe_ffn_hidden": 2048, "num_experts": 256,
    "num_shared_experts": 1, "experts_per_token": 8, "dense_layers": 3, "vocab": 129280,
    "params_billion": 671, "active_params_billion": 37,
}  # fmt: skip
#: The models kept, their shapes as the commit's model_configs state them (config file; an
#: NVIDIA-quantized checkpoint has its base model's shapes).
MODELS: dict[str, dict[str, Any]] = {
    "meta-llama/Llama-3.1-70B": {
        "config": "meta-llama--Meta-Llama-3.1-70B_config.json", "type": "decoder-only dense, GQA",
        "layers": 80, "hidden": 8192, "heads": 64, "kv_heads": 8, "head_dim": 128,
        "ffn_hidden": 28672, "vocab": 128256, "params_billion": 70.6,
    },
    "meta-llama/Llama-3.1-8B-Instruct": _LLAMA_8B,
    "nvidia/Llama-3.1-8B-Instruct-FP8": _LLAMA_8B,
    "Qwen/Qwen3-32B": _QWEN3_32B,
    "nvidia/Qwen3-32B-NVFP4": _QWEN3_32B,
    "deepseek-ai/DeepSeek-V3": _DEEPSEEK_V3,
    "deepseek-ai/DeepSeek-R1": _DEEPSEEK_V3 | {"config": "deepseek-ai--DeepSeek-R1_config.json"},
    "Qwen/Qwen3-235B-A22B-FP8": {
        "config": "Qwen--Qwen3-235B-A22B-FP8_config.json",
        "type": "decoder-only MoE, GQA, 128 routed experts top-8, no shared expert",
        "layers": 94, "hidden": 4096, "heads": 64, "kv_heads": 4, "head_dim": 128,
        "ffn_hidden": None, "moe_ffn_hidden": 1536, "num_experts": 128, "experts_per_token": 8,
        "vocab": 151936, "params_billion": 235, "active_params_billion": 22,
    },
}  # fmt: skip
#: aiconfigurator's system names: (accelerator as the reader knows it, memory GB, GPUs a node).
SYSTEMS = {
    "h100_sxm": ("NVIDIA H100 SXM 80GB", 80, 8),
    "h200_sxm": ("NVIDIA H200 SXM 141GB", 141, 8),
    "b200_sxm": ("NVIDIA B200 SXM 180GB", 180, 8),
    "b300_sxm": ("NVIDIA B300 SXM 288GB", 288, 8),
    "gb200": ("NVIDIA GB200 (Grace Blackwell, 186GB HBM3e)", 186, 4),
}
BACKENDS = {"trtllm": "TensorRT-LLM", "vllm": "vLLM", "sglang": "SGLang"}


def _precision(row: dict[str, str]) -> tuple[str, list[str]]:
    """The weights' precision and what was inferred about it."""
    gemm = row["gemm_quant_mode"]
    if gemm in ("fp8", "fp8_block"):
        return "fp8", [f"FP8 weights (gemm_quant_mode {gemm})"]
    if gemm == "nvfp4":
        return "nvfp4", []
    if gemm == "" and row["precision"] == "":
        return "bf16", ["weight precision bf16: the row records no quantization and the "
                        "checkpoint's torch_dtype is bfloat16"]  # fmt: skip
    raise ValueError(f"row {row['id']}: unexpected precision {row['precision']!r} / {gemm!r}")


def _kv_precision(weights: str) -> tuple[str, str]:
    """The KV cache's precision, inferred: none of the rows records it. aiconfigurator, which
    generates the deployments it benchmarks, gives a model with FP8 or NVFP4 weights an FP8 KV
    cache and FP8 attention (aic-core/src/aiconfigurator_core/sdk/models/helpers.py at the
    commit, "FMHA quant mode": kvcache_quant_mode fp8 for quant_algo fp8, fp8_block, nvfp4)."""
    if weights != "bf16":
        return "fp8", ("kv_cache_precision fp8 inferred: aiconfigurator's default for "
                       "quantized weights (sdk/models/helpers.py, FMHA quant mode); not "
                       "recorded")  # fmt: skip
    return "bf16", ("kv_cache_precision bf16 inferred: the checkpoint's 16-bit dtype (KV-cache "
                    "dtype 'auto'); not recorded")  # fmt: skip


def _case(row: dict[str, str]) -> dict[str, Any] | None:
    """A serving case from one CSV row, or None where the row is not kept (docstring)."""
    shape = MODELS.get(row["model_path"])
    concurrency = re.search(r"silicon_concurrency=(\d+)", row["silicon_data_source"])
    if (row["mode"] != "agg" or shape is None or row["pp_size"] not in ("", "1")
            or int(row["tp_size"]) > 8
            or row["attention_dp_size"] not in ("", "0", "1") or concurrency is None
            or int(concurrency[1]) != int(row["batch_size"] or -1)):  # fmt: skip
        return None
    tp, clients = int(row["tp_size"]), int(concurrency[1])
    accelerator, memory_gb, per_node = SYSTEMS[row["system"]]
    weights, precision_notes = _precision(row)
    kv, kv_note = _kv_precision(weights)
    backend = BACKENDS[row["backend"]]
    version = row["backend_version"] or None
    framework = f"{backend} {version}" if version else backend
    notes = [kv_note, *precision_notes,
             "one replica of tp_size GPUs: the client's concurrency equals the engine's batch "
             "size (batch_size column)",
             "closed loop of the stated concurrency (aiconfigurator's benchmarks drive the "
             "deployment with a fixed number of concurrent streaming requests); request count "
             "not recorded",
             "fixed input and output lengths (isl, osl): synthetic requests"]  # fmt: skip
    if row["backend"] == "trtllm":
        framework += " (PyTorch backend)"
        notes.append("TensorRT-LLM's PyTorch backend: trtllm-serve's default since 1.0; the row "
                     "records no backend")  # fmt: skip
    moe = shape.get("num_experts")
    model = {k: v for k, v in shape.items() if k != "config"}
    model |= {"name": row["model_path"], "activation": "swiglu",
              "num_experts": moe, "experts_per_token": shape.get("experts_per_token"),
              "inferred": [f"shapes from model_configs/{shape['config']} at the pinned "
                           "commit"]}  # fmt: skip
    inference: dict[str, Any] = {
        "framework": framework, "framework_version": version,
        "mode": "online streaming, closed loop at fixed concurrency", "tp": tp, "pp": 1,
        "ep": int(row["moe_ep_size"] or 1) if moe else 1, "dp_replicas": 1, "num_gpus": tp,
        "weight_precision": weights, "kv_cache_precision": kv,
        "input_len": int(row["isl"]), "output_len": int(row["osl"]),
        "input_output_len_fixed": True, "num_requests": None, "request_rate": None,
        "max_concurrency": clients, "max_batch_size": int(row["batch_size"]),
        "max_num_tokens": None, "inferred": notes,
    }  # fmt: skip
    if moe and row["moe_tp_size"]:
        inference["moe_tp"] = int(row["moe_tp_size"])
    return {
        "id": f"aic_silicon_{row['id']}",
        "category": "inference",
        "group": f"aiconfigurator_silicon_{row['model_path'].split('/')[-1].lower()}_"
        f"{row['system']}_{row['backend']}",
        "source": {
            "title": "ai-dynamo/aiconfigurator, systems/silicon_sample.csv (NVIDIA's measured "
            "end-to-end serving runs, a 2026-04 dump of its benchmark database)",
            "url": URL,
            "location": f"row id {row['id']}",
            "verification": "transcribed by benchmarks/data/make_aiconfigurator_silicon.py "
            f"from the CSV at the pinned commit; the row's own provenance: "
            f"{row['silicon_data_source'][:240]}",
        },
        "hardware": {
            "accelerator": accelerator,
            "memory_gb": memory_gb,
            "num_gpus": tp,
            "gpus_per_node": per_node,
            "system": row["system"],
            "inferred": ["SXM form factor and memory from aiconfigurator's system name"],
        },
        "model": model,
        "inference": inference,
        "measured": {
            "ttft_ms": float(row["silicon_ttft_ms"]),
            "tpot_ms": float(row["silicon_tpot_ms"]),
            "metric_definition": "silicon_ttft_ms and silicon_tpot_ms of the CSV: time "
            "to first token and time per output token of the streamed requests; "
            "whether a mean or a median is not recorded",
        },
        "inputs_complete": False,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("csv", type=Path)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    with args.csv.open(newline="") as f:
        cases = [c for c in map(_case, csv.DictReader(f)) if c is not None]
    args.out.write_text("[\n" + ",\n".join(json.dumps(c, ensure_ascii=False) for c in cases)
                        + "\n]\n")  # fmt: skip
    groups = {c["group"] for c in cases}
    print(f"wrote {args.out}: {len(cases)} cases in {len(groups)} groups")


if __name__ == "__main__":
    main()
