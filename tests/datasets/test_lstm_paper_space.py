"""The paper's LSTM budget study (configs/spaces/lstm-paper.yaml) has DRAM capacity as a design
variable (HBM stacks x stack capacity), so its search finds memory-feasible designs."""

from __future__ import annotations

import numpy as np

from deepflow.config import builtin_config_dir
from deepflow.datasets import load_space, oracle_version
from deepflow.datasets.label import cube_rows, label_points
from deepflow.pipeline import search_study
from deepflow.search.study import study_from_mapping

SPACE = builtin_config_dir() / "spaces" / "lstm-paper.yaml"


def test_stack_count_and_capacity_set_the_dram_capacity() -> None:
    space = load_space(SPACE)
    assert {"hbm_num_stacks", "dram_stack_capacity_GiB"} <= set(space.by_name)
    u = cube_rows(space, seed=0, start=0, stop=64, num_samples=64)
    df = label_points(space, u, oracle_version=oracle_version()).to_pandas()
    capacity_GiB = df["y_memory_capacity_B"].to_numpy() / 2**30
    most = df["x_hbm_num_stacks"].to_numpy() * df["x_dram_stack_capacity_GiB"].to_numpy()
    assert np.all(capacity_GiB <= most + 1e-9)  # stacks may be cut by the controller area
    assert np.any(capacity_GiB == most)
    assert len(set(capacity_GiB)) > 5


def test_the_lstm_budget_search_returns_feasible_pareto_designs(tmp_path) -> None:
    study = study_from_mapping(
        {
            "name": "lstm-paper-test",
            "space": str(SPACE),
            "objectives": [
                {"name": "step_time_s", "direction": "minimize", "reference": 1000.0},
                {"name": "power_W", "direction": "minimize", "reference": 400.0},
            ],
            "search": {"strategy": "random", "budget": 48, "batch_size": 8, "seed": 0},
        },
        file="<test>",
    )
    outcome = search_study(study, tmp_path / "out")
    assert outcome.summary["num_feasible"] > 0
    assert outcome.designs, "no Pareto designs"
    for design in outcome.designs:
        assert design["feasible"], design
