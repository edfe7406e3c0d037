"""Shared test set-up: one torch thread (toolchain pitfall 5.1), helpers for scenario files."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

os.environ.setdefault("OMP_NUM_THREADS", "1")

REPO = Path(__file__).resolve().parents[1]

#: A valid scenario (GPT-3 175B on 1,536 A100s; Narayanan et al. 2021, Table 1).
BASE_SCENARIO: dict[str, Any] = {
    "system": {
        "device": "a100-sxm4-80gb",
        "network": "dgx-a100",
        "devices_per_node": 8,
        "num_nodes": 192,
    },
    "workload": {"model": "gpt3-175b", "global_batch_size": 1536, "precision": "bf16"},
    "mapping": {"data_parallel": 24, "tensor_parallel": 8, "pipeline_parallel": 8},
}


@pytest.fixture
def write_yaml(tmp_path: Path) -> Callable[..., Path]:
    """Write data (or raw text) to a YAML file under tmp_path and return its path."""

    def _write(data: Any, name: str = "scenario.yaml") -> Path:
        path = tmp_path / name
        text = data if isinstance(data, str) else yaml.safe_dump(data, sort_keys=False)
        path.write_text(text, encoding="utf-8")
        return path

    return _write
