"""Data shipped with the package: the public measurement set used for calibration and scoring.

``measurements_public.json`` is a copy of the project's published measurements (Megatron-LM,
Korthikanti et al., Megatron-Core H100, llm-foundry, NeMo 24.07 FP8, torchtitan async TP, GEMM
and NCCL microbenchmarks), each with its source; the schema is in ``docs/validation.md``.
``measurements_memory.json`` holds measured per-device peak memory of published training runs
(category ``peak_memory``), and ``measurements_inference.json`` measured serving figures
(category ``inference``: throughput, time to first token, time per output token), in the
same schema. ``measurements_kernels.json`` holds kernel microbenchmarks added by the project
beyond the shared set (torchao's NVFP4 GEMMs on B200, DeepGEMM's grouped MoE GEMMs on H800,
torchao's rowwise float8 linear layers on H100, OpenCL-Benchmark's HBM streams),
so that ``measurements_public.json`` stays the shared copy as published.
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import Any

__all__ = ["load_measurements"]


@cache
def _all() -> tuple[dict[str, Any], ...]:
    files = resources.files(__package__)
    return tuple(
        case
        for name in (
            "measurements_public.json",
            "measurements_kernels.json",
            "measurements_memory.json",
            "measurements_inference.json",
        )
        for case in json.loads(files.joinpath(name).read_text("utf-8"))
    )


def load_measurements(group: str | None = None) -> list[dict[str, Any]]:
    """The public measurements, optionally one group (e.g. ``nccl_tests_a100_node``)."""
    cases = _all()
    return [dict(c) for c in cases if group is None or c["group"] == group]
