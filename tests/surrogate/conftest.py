"""Small datasets for the surrogate tests (mapping space: fast to label)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.conftest import REPO

MAPPING_SPACE = REPO / "configs" / "spaces" / "mapping-spec.yaml"


@pytest.fixture(scope="session")
def mapping_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 300-row labelled dataset of configs/spaces/mapping-spec.yaml."""
    from deepflow.datasets import sample

    out = tmp_path_factory.mktemp("data") / "mapping.parquet"
    sample(MAPPING_SPACE, num_samples=300, out=out, seed=0, workers=1)
    return out


@pytest.fixture(scope="session")
def other_space_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A dataset of a different space (mapping space with a smaller pipeline range)."""
    from deepflow.datasets import sample

    tmp = tmp_path_factory.mktemp("other")
    text = MAPPING_SPACE.read_text(encoding="utf-8").replace(
        "pipeline_parallel: {type: integer, low: 1, high: 16}",
        "pipeline_parallel: {type: integer, low: 1, high: 8}",
    )
    space = tmp / "space.yaml"
    space.write_text(text, encoding="utf-8")
    out = tmp / "other.parquet"
    sample(space, num_samples=50, out=out, seed=1, workers=1)
    return out


def smooth_problem(n: int = 60, p: int = 4, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """X in [0, 1]^p and two smooth targets."""
    rng = np.random.default_rng(seed)
    X = rng.random((n, p))
    Y = np.column_stack([np.sin(3 * X[:, 0]) + X[:, 1] ** 2, X[:, :p].sum(axis=1)])
    return X, Y


LLM_SPACE = REPO / "configs" / "spaces" / "llm-pathfinding.yaml"


@pytest.fixture(scope="session")
def llm_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 256-row labelled dataset of configs/spaces/llm-pathfinding.yaml (continuous, simplex,
    integer, categorical variables and the mapping)."""
    from deepflow.datasets import sample

    out = tmp_path_factory.mktemp("llm") / "llm.parquet"
    sample(LLM_SPACE, num_samples=256, out=out, seed=0, workers=1)
    return out
