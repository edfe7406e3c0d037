"""The gemm and lstm steps are vectorised: a batch of n cases equals the loop of single
evaluations bit for bit (mixed kernel partitions, pipeline depths with empty stages, design
devices), and the stage grid is :func:`lstm_stages`."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest

from deepflow.config import load_scenario
from deepflow.config.mapping import knobs_of
from deepflow.config.specs import Scenario
from deepflow.oracle.evaluate import evaluate_one, evaluate_table
from deepflow.oracle.workloads.lstm import _stage_grid, lstm_stages
from tests.conftest import REPO

SCENARIOS = REPO / "configs" / "scenarios"
N = 24


def _cases(kind: str, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """N cases of a kind: shapes, batch and mappings (RC and CR, with and without splits)."""
    tp = rng.choice([1.0, 2.0, 4.0], N)
    cols = {
        "data_parallel": rng.choice([1.0, 2.0, 4.0], N),
        "tensor_parallel": tp,
        "kernel_partition": rng.choice([0.0, 1.0], N),
        "kernel_parallel_dim2": np.where(rng.random(N) < 0.5, 1.0, tp),
    }
    if kind == "gemm":
        return cols | {s: np.floor(np.exp(rng.uniform(0, np.log(2**16), N))) for s in "mkn"}
    return cols | {
        "pipeline_parallel": rng.choice([1.0, 2.0, 3.0, 4.0, 6.0], N),
        "num_layers": rng.choice([1.0, 2.0, 5.0], N),
        "hidden_size": rng.choice([512.0, 1000.0, 2048.0], N),
        "vocab_size": rng.choice([1000.0, 32000.0], N),
        "seq_length": rng.choice([1.0, 20.0], N),
        "projection_size": rng.choice([0.0, 256.0], N),
        "num_gates": rng.choice([3.0, 4.0], N),
        "global_batch_size": rng.choice([7.0, 64.0, 2000.0], N),
    }


def _row_scenario(base: Scenario, cols: dict[str, np.ndarray], i: int) -> Scenario:
    """Row i of the columns as a scenario (model fields, batch, mapping knobs)."""
    model = base.workload.model
    fields = {f.name for f in dataclasses.fields(model)}
    shape = {k: int(v[i]) for k, v in cols.items() if k in fields}
    workload = dataclasses.replace(base.workload, model=dataclasses.replace(model, **shape))
    if "global_batch_size" in cols:
        batch = int(cols["global_batch_size"][i])
        workload = dataclasses.replace(workload, global_batch_size=batch)
    knobs = {k.name: k.decode(cols[k.column][i]) for k in knobs_of(model.kind) if k.column in cols}
    mapping = dataclasses.replace(base.mapping, **knobs)
    return dataclasses.replace(base, workload=workload, mapping=mapping)


def _flat(result: dict[str, Any]) -> dict[str, float]:
    out = {k: float(v) for k, v in result.items() if isinstance(v, int | float)}
    return out | {f"breakdown_{k}_s": float(v) for k, v in result["breakdown_s"].items()}


@pytest.mark.parametrize("name", ["gemm-a100", "lstm-a100", "lstm-waferscale-rc20"])
def test_batch_equals_the_loop_of_singles(name: str) -> None:
    base = load_scenario(SCENARIOS / f"{name}.yaml")
    cols = _cases(base.workload.model.kind, np.random.default_rng(7))
    table = evaluate_table(base, cols)
    for i in range(N):
        one = _flat(evaluate_one(_row_scenario(base, cols, i)))
        for key, value in one.items():
            if key in table:
                same = table[key][i] == value or (np.isnan(value) and np.isnan(table[key][i]))
                assert same, (key, i)


@pytest.mark.parametrize("name", ["gemm-waferscale-rc20", "lstm-waferscale-rc20"])
def test_design_device_rows_are_independent(name: str) -> None:
    base = load_scenario(SCENARIOS / f"{name}.yaml")
    rng = np.random.default_rng(3)
    cols = _cases(base.workload.model.kind, rng) | {"die_area_mm2": rng.uniform(600, 815, N)}
    table = evaluate_table(base, cols)
    for i in (0, 5, N - 1):
        alone = evaluate_table(base, {k: v[i : i + 1] for k, v in cols.items()})
        for key, value in alone.items():
            assert np.array_equal(value, table[key][i : i + 1], equal_nan=True), (key, i)


def test_the_stage_grid_is_lstm_stages() -> None:
    layers = np.array([l for l in range(1, 9) for _ in range(1, 12)])  # noqa: E741
    depths = np.array([pp for _ in range(1, 9) for pp in range(1, 12)])
    grid = _stage_grid(layers, depths)
    for i, (num_layers, pp) in enumerate(zip(layers.tolist(), depths.tolist(), strict=True)):
        stages = lstm_stages(num_layers, pp)
        assert grid.valid[i].sum() == len(stages) == pp
        for s, names in enumerate(stages):
            counts = {kind: int(grid.counts[kind][i, s]) for kind in grid.counts}
            assert counts == {
                "embedding": names.count("embedding"),
                "layer": sum(n.startswith("layer") for n in names),
                "softmax": names.count("softmax"),
            }
            # the order inside a stage: embedding, layers, softmax
            assert names == sorted(names, key=lambda n: ("embedding", "layer", "softmax").index(
                n.rstrip("0123456789")))  # fmt: skip
