"""Score the oracle against the public measurements (``deepflow.data``).

One scorer per kind of measurement; each returns rows with the measured value, the model's
value and the relative error. ``deepflow validate`` and the calibration scripts use these.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from deepflow.config import load_device
from deepflow.data import load_measurements
from deepflow.oracle.hardware import DeviceCaps, device_caps
from deepflow.oracle.kernels import gemm

__all__ = ["MAMF_DEVICES", "MAMF_SWEEP", "gemm_case_caps", "score_gemm_cases"]

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
    *, efficiency_override: dict[tuple[str, str], float] | None = None
) -> list[dict[str, Any]]:
    """Model vs measured best-achievable matmul TFLOP/s for every MAMF case."""
    rows = []
    for case in load_measurements("mamf_ml_engineering"):
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
