"""Small design spaces for the dataset tests (fast: 8 devices, llama3-8b)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

#: A design-mode space: H100-like budgets on N7/N5 with llama3-8b on one 8-device node.
DESIGN_SPACE: dict[str, Any] = {
    "description": "test: design budgets x mapping",
    "base": {
        "system": {"device": "h100-like-4nm", "network": "dgx-h100", "devices_per_node": 8},
        "workload": {"model": "llama3-8b", "global_batch_size": 64, "precision": "bf16"},
        "mapping": {"data_parallel": 8, "activation_recompute": "full", "zero_stage": 1},
    },
    "sampler": "sobol",
    "chunk_size": 64,
    "variables": {
        "technology": {"type": "categorical", "choices": ["n7", "n5"]},
        "die_area_mm2": {"type": "continuous", "low": 600, "high": 850},
        "tdp_W": {"type": "continuous", "low": 400, "high": 1000, "scale": "log"},
        "area_split": {
            "type": "simplex",
            "parts": {
                "core": [0.5, 0.75],
                "l2": [0.03, 0.12],
                "l1": [0.03, 0.08],
                "register_file": [0.03, 0.08],
                "memory_controller": [0.06, 0.15],
                "scale_up": [0.005, 0.02],
                "scale_out": [0.001, 0.005],
                "other": [0.0, 0.1],
            },
        },
        "tensor_parallel": {"type": "categorical", "choices": [1, 2, 4, 8]},
        "pipeline_parallel": {"type": "integer", "low": 1, "high": 4},
        "micro_batch_size": {"type": "categorical", "choices": [1, 2]},
        "zero_stage": {"type": "integer", "low": 0, "high": 3},
        "activation_recompute": {"type": "categorical", "choices": ["none", "full"]},
    },
}

#: A spec-mode mapping space over two system sizes.
MAPPING_SPACE: dict[str, Any] = {
    "base": {
        "system": {"device": "h100-sxm5-80gb", "network": "dgx-h100", "devices_per_node": 8},
        "workload": {"model": "llama3-8b", "global_batch_size": 64, "precision": "bf16"},
        "mapping": {"data_parallel": 8},
    },
    "sampler": "uniform",
    "chunk_size": 100,
    "variables": {
        "num_nodes": {"type": "categorical", "choices": [1, 2]},
        "tensor_parallel": {"type": "integer", "low": 1, "high": 8},
        "pipeline_parallel": {"type": "integer", "low": 1, "high": 8},
        "micro_batch_size": {"type": "categorical", "choices": [1, 2, 4]},
        "sequence_parallel": {"type": "categorical", "choices": [False, True]},
        "zero_stage": 1,
    },
}


@pytest.fixture
def design_space() -> dict[str, Any]:
    return copy.deepcopy(DESIGN_SPACE)


@pytest.fixture
def mapping_space() -> dict[str, Any]:
    return copy.deepcopy(MAPPING_SPACE)
