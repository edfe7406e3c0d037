"""Score the oracle against the public measurements (``deepflow.data``).

One scorer per kind of measurement; each returns rows with the measured value, the model's
value and the relative error. ``deepflow validate`` and the calibration scripts use these.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import numpy as np

from deepflow.config import load_device
from deepflow.data import load_measurements
from deepflow.errors import ConfigError
from deepflow.oracle.hardware import DeviceCaps, device_caps
from deepflow.oracle.kernels import gemm

__all__ = [
    "MAMF_DEVICES",
    "MAMF_SWEEP",
    "TRAINING_GROUPS",
    "gemm_case_caps",
    "measured_step_time_s",
    "score_collective_cases",
    "score_gemm_cases",
    "score_training_cases",
    "training_case_scenario",
    "validation_report",
]

#: Accelerator names in the MAMF group -> the preset with the same chip (peak taken from the case).
MAMF_DEVICES = {
    "NVIDIA A100 SXM": "a100-sxm4-80gb",
    "NVIDIA A100 PCIe": "a100-sxm4-80gb",  # same GA100 die and peak; PCIe power limit not modelled
    "NVIDIA H100 SXM": "h100-sxm5-80gb",
    "NVIDIA GH200 SXM": "h200-sxm-141gb",  # GH100 with 141 GiB HBM3e, as H200
    "NVIDIA H200 SXM": "h200-sxm-141gb",
    "NVIDIA B200 SXM": "b200",
    "NVIDIA B300 SXM": "b200",  # same dense BF16/FP8 peaks as B200 (the case's notes)
    "NVIDIA GB200 SXM": "gb200",
}
#: Shapes swept per device, as the maximum-achievable-matmul benchmark sweeps M, N, K and
#: reports the best (Bekman, ml-engineering, compute/accelerator/benchmarks/mamf-finder.py).
MAMF_SWEEP = (4096, 6144, 8192, 12288, 16384)
_PRECISION = {"bf16": "bf16", "fp8_e4m3fn": "fp8"}


def gemm_case_caps(case: dict[str, Any], *, gemm_efficiency: float | None = None) -> DeviceCaps:
    """Device capabilities for a MAMF case: its preset, the case's stated peak."""
    (precision_key, peak_tflops), *_ = case["hardware"]["peak_dense_tflops"].items()
    precision = _PRECISION[precision_key]
    caps = device_caps(load_device(MAMF_DEVICES[case["hardware"]["accelerator"]]), precision)
    caps = dataclasses.replace(caps, peak_flops=float(peak_tflops) * 1e12)
    if gemm_efficiency is not None:
        caps = dataclasses.replace(caps, gemm_efficiency=gemm_efficiency)
    return caps


def best_achievable_flops(caps: DeviceCaps) -> float:
    """The model's best FLOP/s over the MAMF-style shape sweep."""
    m, n, k = np.meshgrid(MAMF_SWEEP, MAMF_SWEEP, MAMF_SWEEP, indexing="ij")
    result = gemm(caps, m.ravel(), n.ravel(), k.ravel())
    return float(np.max(result["flops"] / result["time_s"]))


def score_gemm_cases(
    cases: list[dict[str, Any]] | None = None,
    *,
    efficiency_override: dict[tuple[str, str], float] | None = None,
) -> list[dict[str, Any]]:
    """Model vs measured best-achievable matmul TFLOP/s for every MAMF case."""
    rows = []
    for case in load_measurements("mamf_ml_engineering") if cases is None else cases:
        caps = gemm_case_caps(case)
        key = (caps.family, caps.precision)
        if efficiency_override and key in efficiency_override:
            caps = dataclasses.replace(caps, gemm_efficiency=efficiency_override[key])
        model = best_achievable_flops(caps) / 1e12
        measured = float(case["measured"]["tflops"])
        rows.append(
            {
                "id": case["id"],
                "family": caps.family,
                "precision": caps.precision,
                "measured_tflops": measured,
                "model_tflops": model,
                "error": model / measured - 1.0,
            }
        )
    return rows


# ------------------------------------------------------------------------ end-to-end training
#: Accelerator names of the training cases -> device and network presets.
_TRAINING_SYSTEMS = {
    "NVIDIA A100 SXM4 80GB": ("a100-sxm4-80gb", "dgx-a100"),
    "NVIDIA A100 80GB": ("a100-sxm4-80gb", "dgx-a100"),  # MosaicML: 8 GPUs, 200 Gb/s RoCE each
    "NVIDIA H100 (variant not stated)": ("h100-sxm5-80gb", "dgx-h100"),
}

#: How each source's framework ran, where the case leaves it unstated (each entry cites the
#: case's own text or llm-training-model §3.2): fused attention, TP-communication overlap,
#: data-parallel overlap, dropout in the model, and the ZeRO stage meant by the source.
_FRAMEWORK = {
    # Megatron-LM 2021: unfused attention, DP all-reduce after backward (exposed), GPT dropout.
    "narayanan2021_table1": {"flash": False, "tp_overlap": False, "dp_overlap": False,
                             "dropout": True},
    # Table 2's ZeRO-3 rows ran DeepSpeed's ZeRO-3 of early 2021, which overlapped nothing:
    # every module's all_gather synchronised the device (DeepSpeed PR #1188 and issue #1069,
    # June 2021), so dp_overlap False (the oracle's blocking per-module ZeRO-3, re-gathering
    # for the recompute forward); the PTD-P rows are Megatron-LM 2021 as in Table 1.
    "narayanan2021_table2": {"flash": False, "tp_overlap": False, "dp_overlap": False,
                             "dropout": True},
    # Megatron-LM 2022 (Korthikanti): unfused attention, DP = 1.
    "korthikanti2022_table5": {"flash": False, "tp_overlap": False, "dp_overlap": False,
                               "dropout": True},
    # Megatron-Core 2024: TE fused attention; --tp-comm-overlap, --overlap-grad-reduce,
    # --overlap-param-gather listed in the case; distributed optimizer.
    "megatron_core_h100_2024": {"flash": True, "tp_overlap": True, "dp_overlap": True,
                                "dropout": False},
    # llm-foundry: FlashAttention (attn_impl: flash), FSDP prefetching, no dropout in MPT runs.
    "llm_foundry_a100_80": {"flash": True, "tp_overlap": False, "dp_overlap": True,
                            "dropout": False},
}  # fmt: skip


def _recompute(text: object, zero_stage: int) -> str:
    value = str(text or "").lower()
    if value.startswith("full"):
        return "full"
    if value.startswith("selective"):
        return "selective"
    if value.startswith("not stated") and zero_stage >= 3:
        # DeepSpeed ZeRO-3 baseline of a 175B/530B model with micro-batch 1-4 on 80 GB cannot
        # run without activation checkpointing; Eq. 3 (the source's FLOP count) assumes it.
        return "full"
    return "none"


def _zero_stage(value: object) -> int:
    if isinstance(value, int):
        return value
    return 1 if "distributed optimizer" in str(value) else 0


def training_case_scenario(case: dict[str, Any]) -> Any:
    """A measured training run as a deepflow scenario (unstated inputs: see _FRAMEWORK)."""
    from deepflow.config import scenario_from_mapping

    device, network = _TRAINING_SYSTEMS[case["hardware"]["accelerator"]]
    model, train = case["model"], case["training"]
    frame = _FRAMEWORK[case["group"]]
    gpus = int(train["num_gpus"])
    per_node = min(8, gpus)
    zero = _zero_stage(train.get("zero_stage"))
    tp = int(train["tp"])
    raw = {
        "system": {"device": device, "network": network, "devices_per_node": per_node,
                   "num_nodes": gpus // per_node},
        "workload": {
            "model": {
                "kind": "transformer",
                "num_layers": model["layers"],
                "hidden_size": model["hidden"],
                "num_attention_heads": model["heads"],
                "ffn_hidden_size": model.get("ffn_hidden") or 4 * model["hidden"],
                "seq_length": model["seq_len"],
                "vocab_size": model["vocab"],
                "dropout": frame["dropout"],
            },
            "global_batch_size": int(train["global_batch_size"]),
            "precision": "bf16",
        },
        "mapping": {
            "data_parallel": int(train["dp"]),
            "tensor_parallel": tp,
            "pipeline_parallel": int(train["pp"]),
            "context_parallel": int(train.get("cp") or 1),
            # unstated micro-batch: 1, the Megatron-LM examples' value for these model sizes
            "micro_batch_size": int(train.get("micro_batch_size") or 1),
            "virtual_pipeline_stages": int(train.get("virtual_pipeline_stages") or 1),
            # Megatron-Core's TP comm overlap requires sequence parallelism
            "sequence_parallel": bool(train.get("sp")) or (frame["tp_overlap"] and tp > 1),
            "activation_recompute": _recompute(train.get("activation_recompute"), zero),
            "zero_stage": zero,
            "flash_attention": frame["flash"],
            "tp_comm_overlap": frame["tp_overlap"] and tp > 1,
            "overlap_grad_reduce": frame["dp_overlap"],
        },
    }  # fmt: skip
    return scenario_from_mapping(raw, file=f"<case {case['id']}>")


def measured_step_time_s(case: dict[str, Any]) -> float:
    """The case's step time, converted with the source's own FLOP convention (README)."""
    measured, derived = case["measured"], case.get("derived") or {}
    if measured.get("iteration_time_s"):
        return float(measured["iteration_time_s"])
    if "iteration_time_s" in derived:
        return float(derived["iteration_time_s"])
    model, train = case["model"], case["training"]
    big_b, s, layers, h, vocab = (
        train["global_batch_size"], model["seq_len"], model["layers"], model["hidden"],
        model["vocab"],
    )  # fmt: skip
    gpus = train["num_gpus"]
    if case["group"].startswith("narayanan2021"):
        # Narayanan et al. 2021 Eq. 3 (counts the recompute forward).
        flops = 96 * big_b * s * layers * h**2 * (1 + s / (6 * h) + vocab / (16 * layers * h))
    else:
        # Megatron model FLOPs before March 2025: 72·B·s·L·h²·(1 + s/(6h) + V/(12·L·h)).
        flops = 72 * big_b * s * layers * h**2 * (1 + s / (6 * h) + vocab / (12 * layers * h))
    return float(flops / (gpus * measured["tflops_per_gpu"] * 1e12))


TRAINING_GROUPS = tuple(_FRAMEWORK)


def score_training_cases(cases: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """Model vs measured step time for every end-to-end training case."""
    from deepflow.oracle.evaluate import evaluate_one

    if cases is None:
        cases = [c for g in TRAINING_GROUPS for c in load_measurements(g)]
    rows = []
    for case in cases:
        result = evaluate_one(training_case_scenario(case))
        measured = measured_step_time_s(case)
        rows.append({
            "id": case["id"], "group": case["group"], "measured_s": measured,
            "model_s": result["step_time_s"],
            "error": result["step_time_s"] / measured - 1.0,
            "feasible": result["feasible"],
            "memory_GiB": result["memory_per_device_B"] / 2**30,
        })  # fmt: skip
    return rows


# ------------------------------------------------------------------------ collectives
#: Collective benchmark nodes -> network presets (H200 has H100's NVLink4 + NVSwitch).
_COLLECTIVE_NETWORKS = {"nccl_tests_a100_node": "dgx-a100", "allreduce_bench_h200_node": "dgx-h100"}


def score_collective_cases(cases: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """Model vs measured bus bandwidth (nccl-tests convention) for every collective case."""
    from deepflow.config import load_network
    from deepflow.oracle.network import NetworkModel, bus_bandwidth_Bps, collective_time_s

    if cases is None:
        cases = [c for g in _COLLECTIVE_NETWORKS for c in load_measurements(g)]
    rows = []
    for case in cases:
        coll = case["collective"]
        net = NetworkModel.from_spec(
            load_network(_COLLECTIVE_NETWORKS[case["group"]]), int(coll["gpus_per_node"])
        )
        size, ranks = float(coll["payload_bytes"]), int(coll["ranks"])
        t = collective_time_s(coll["op"], size, ranks, net=net)
        model = float(bus_bandwidth_Bps(coll["op"], size, t, ranks)) / 1e9
        measured = float(case["measured"]["busbw_GBps"])
        rows.append({"id": case["id"], "group": case["group"], "payload_B": size,
                     "measured_GBps": measured, "model_GBps": model,
                     "error": model / measured - 1.0})  # fmt: skip
    return rows


def _load_cases(path: Path | None) -> list[dict[str, Any]]:
    if path is None:
        return load_measurements()
    shown = str(path)
    if not path.is_file():
        raise ConfigError(f"{shown}: no such file.")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{shown}: invalid JSON at line {exc.lineno}: {exc.msg}.") from exc
    if not isinstance(data, list) or not all(isinstance(c, dict) and "group" in c for c in data):
        raise ConfigError(f"{shown}: must be a JSON list of measurement cases with a 'group'.")
    known = {"mamf_ml_engineering", *_COLLECTIVE_NETWORKS, *TRAINING_GROUPS}
    for i, case in enumerate(data):
        if case["group"] not in known:
            raise ConfigError(
                f"{shown}: case {i} has group {case['group']!r}, which deepflow cannot score "
                f"(known: {', '.join(sorted(known))})."
            )
    return data


def validation_report(path: Path | None = None) -> dict[str, Any]:
    """Score every case; per-case rows, per-group mean/max |error|, group-weighted mean."""
    cases = _load_cases(path)
    rows: list[dict[str, Any]] = []
    gemm_cases = [c for c in cases if c["group"] == "mamf_ml_engineering"]
    coll_cases = [c for c in cases if c["group"] in _COLLECTIVE_NETWORKS]
    train_cases = [c for c in cases if c["group"] in TRAINING_GROUPS]
    for r in score_gemm_cases(gemm_cases) if gemm_cases else []:
        rows.append({"id": r["id"], "group": "mamf_ml_engineering", "quantity": "TFLOP/s",
                     "measured": r["measured_tflops"], "model": r["model_tflops"],
                     "error": r["error"]})  # fmt: skip
    for r in score_collective_cases(coll_cases) if coll_cases else []:
        rows.append({"id": r["id"], "group": r["group"], "quantity": "busbw GB/s",
                     "measured": r["measured_GBps"], "model": r["model_GBps"],
                     "error": r["error"]})  # fmt: skip
    for r in score_training_cases(train_cases) if train_cases else []:
        rows.append({"id": r["id"], "group": r["group"], "quantity": "step s",
                     "measured": r["measured_s"], "model": r["model_s"], "error": r["error"],
                     "feasible": r["feasible"]})  # fmt: skip
    groups: dict[str, dict[str, Any]] = {}
    for row in rows:
        groups.setdefault(row["group"], {"errors": []})["errors"].append(abs(row["error"]))
    summary = {
        name: {"cases": len(g["errors"]), "mean_abs_error": float(np.mean(g["errors"])),
               "max_abs_error": float(np.max(g["errors"]))}
        for name, g in groups.items()
    }  # fmt: skip
    weighted = float(np.mean([g["mean_abs_error"] for g in summary.values()])) if rows else 0.0
    return {"cases": rows, "groups": summary, "group_weighted_mean_abs_error": weighted}
