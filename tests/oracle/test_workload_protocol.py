"""A workload kind registered through the protocol alone is evaluated, sampled and searched
(no edit anywhere else); the built-in kinds go through the same registry."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from deepflow.config import load_scenario
from deepflow.config._schema import key
from deepflow.config.calibration import Calibration
from deepflow.config.loader import MODEL_CLASSES
from deepflow.config.specs import MappingSpec, WorkloadSpec
from deepflow.datasets import load, sample
from deepflow.errors import ConfigError
from deepflow.oracle.evaluate import evaluate_one, evaluate_table
from deepflow.oracle.hardware import DeviceCaps
from deepflow.oracle.network import NetworkModel
from deepflow.oracle.workloads import StepResult, Workload, register_workload, workload_for
from deepflow.oracle.workloads.base import _REGISTRY
from deepflow.pipeline import search_study
from deepflow.search.study import load_study

F = np.ndarray


@dataclass(frozen=True, kw_only=True)
class ToySpec:
    """A workload that is one matrix-unit-bound kernel of ``flops`` per sample."""

    name: str
    kind: str = key("kind", choices=("toy",))
    description: str = key("description", default="")
    flops: float = key("flops", gt=0)


class Toy(Workload):
    kind = "toy"
    spec_class = ToySpec

    def columns(self, workload: WorkloadSpec, mapping: MappingSpec) -> dict[str, float]:
        assert isinstance(workload.model, ToySpec)
        return {"flops": workload.model.flops, "global_batch_size": workload.global_batch_size}

    def step(
        self, caps: DeviceCaps, net: NetworkModel, x: Mapping[str, F], *, calibration: Calibration
    ) -> StepResult:
        work = x["flops"] * x["global_batch_size"]
        t = work / (np.asarray(caps.peak_flops) * np.asarray(caps.gemm_efficiency))
        return StepResult(step_time_s=t, breakdown_s={"compute": t},
                          memory_per_device_B=np.full(np.shape(t), 1e9),
                          model_flops_per_step=work, tokens_per_step=np.zeros(np.shape(t)),
                          samples_per_step=x["global_batch_size"])  # fmt: skip


@pytest.fixture
def toy() -> Iterator[Toy]:
    kind = register_workload(Toy())
    assert isinstance(kind, Toy)
    yield kind
    _REGISTRY.pop("toy")
    MODEL_CLASSES.pop("toy")


@pytest.fixture
def toy_scenario(write_yaml: Callable[..., Path]) -> Path:
    return write_yaml({
        "system": {"device": "h100-like-4nm", "network": "dgx-h100", "devices_per_node": 8},
        "workload": {"model": {"kind": "toy", "flops": 1.0e12}, "global_batch_size": 64},
        "mapping": {"data_parallel": 8},
    }, "toy.yaml")  # fmt: skip


def test_builtin_kinds_are_registered() -> None:
    scenario = load_scenario(Path("configs/scenarios/lstm-a100.yaml"))
    assert workload_for(scenario.workload.model).kind == "lstm"
    with pytest.raises(ConfigError, match="no workload of kind 'nope' is registered"):
        workload_for(type("M", (), {"kind": "nope"})())


def test_toy_evaluates_one_and_as_a_table(toy: Toy, toy_scenario: Path) -> None:
    scenario = load_scenario(toy_scenario)
    one = evaluate_one(scenario)
    assert one["breakdown_s"] == {"compute": one["step_time_s"]}
    assert one["samples_per_s"] == pytest.approx(64 / one["step_time_s"])
    table = evaluate_table(scenario, {"global_batch_size": np.array([64.0, 128.0])})
    assert table["step_time_s"][0] == one["step_time_s"]
    assert table["step_time_s"][1] == pytest.approx(2 * one["step_time_s"])
    assert table["feasible"].tolist() == [True, True]
    assert "die_cost_usd" in table  # a design-mode device: budgets and costs come along
    with pytest.raises(ConfigError, match="unknown columns tensor_parallel"):
        evaluate_table(scenario, {"tensor_parallel": np.array([2.0])})


def test_toy_is_sampled_and_searched(
    toy: Toy, toy_scenario: Path, write_yaml: Callable[..., Path], tmp_path: Path
) -> None:
    space = write_yaml({
        "base": str(toy_scenario),
        "sampler": "sobol",
        "variables": {
            "global_batch_size": {"type": "categorical", "choices": [64, 128, 256]},
            "tdp_W": {"type": "continuous", "low": 300, "high": 900},
        },
    }, "toy-space.yaml")  # fmt: skip
    result = sample(space, num_samples=32, out=tmp_path / "toy.parquet", workers=1)
    df = load(result.path)
    assert len(df) == 32 and df["y_step_time_s"].gt(0).all()
    study = write_yaml({
        "name": "toy",
        "space": str(space),
        "objectives": ["step_time_s", "power_W"],
        "search": {"strategy": "random", "budget": 8, "batch_size": 4, "initial_points": 4},
    }, "toy-study.yaml")  # fmt: skip
    outcome = search_study(load_study(study), tmp_path / "res")
    assert outcome.summary["num_evaluations"] == 8
    assert outcome.summary["verification_max_relative_difference"] < 1e-9
