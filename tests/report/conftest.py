"""A synthetic result directory that follows docs/results.md (no search needed to build it)."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

#: name -> (direction, reference)
OBJECTIVES: dict[str, tuple[str, float]] = {
    "step_time_s": ("minimize", 600.0),
    "area_mm2": ("minimize", 900.0),
    "power_W": ("minimize", 1300.0),
    "energy_per_step_J": ("minimize", 5e8),
    "tokens_per_s": ("maximize", 1e3),
}


def _pareto_mask(values: np.ndarray, minimize: Sequence[bool]) -> np.ndarray:
    signed = np.where(np.array(minimize), values, -values)
    n = len(signed)
    mask = np.ones(n, dtype=bool)
    for i in range(n):
        dominated = (signed <= signed[i]).all(axis=1) & (signed < signed[i]).any(axis=1)
        mask[i] = not dominated.any()
    return mask


def make_result_dir(
    folder: Path,
    *,
    objectives: Sequence[str] = ("step_time_s", "area_mm2", "power_W"),
    num_trials: int = 48,
    surrogate: bool = True,
    benchmark: bool = True,
    seed: int = 0,
) -> Path:
    """Write trials.parquet, pareto.json, pareto.yaml, summary.json and study.yaml."""
    import yaml

    rng = np.random.default_rng(seed)
    n = num_trials
    tech = [str(t) for t in rng.choice(["n7", "n5", "n3"], n)]
    die = rng.uniform(500, 850, n)
    tdp = np.exp(rng.uniform(np.log(400), np.log(1200), n))
    tp = rng.choice([1, 2, 4, 8], n)
    pp = rng.choice([1, 2, 4, 8, 16], n)
    dp = 1024 // (tp * pp)
    mb = rng.choice([1, 2, 4], n)
    speed = {"n7": 1.0, "n5": 1.4, "n3": 1.8}
    step = 2000.0 / (np.array([speed[t] for t in tech]) * die * tdp**0.5) * (pp**0.8) * 40
    step *= np.exp(rng.normal(0, 0.6, n))  # spans decades: log axis
    power = tdp * rng.uniform(0.7, 1.0, n)
    energy = step * power * 1024
    tokens = 1536 * 2048 / step
    memory = rng.uniform(20e9, 160e9, n)
    capacity = np.full(n, 96 * 2**30)
    feasible = memory <= capacity
    columns = {
        "step_time_s": step,
        "area_mm2": die,
        "power_W": power,
        "energy_per_step_J": energy,
        "tokens_per_s": tokens,
    }
    values = np.column_stack([columns[o] for o in objectives])
    minimize = [OBJECTIVES[o][0] == "minimize" for o in objectives]
    pareto = np.zeros(n, dtype=bool)
    pareto[feasible] = _pareto_mask(values[feasible], minimize)
    trials = pd.DataFrame(
        {
            "evaluation": np.arange(n, dtype=np.int64),
            "trial": np.arange(n, dtype=np.int64) + 3,
            "strategy": "botorch",
            "round": np.zeros(n, dtype=np.int64),
            "source": np.where(np.arange(n) < 8, "initial", "search"),
            "x_technology": tech,
            "x_die_area_mm2": die,
            "x_tdp_W": tdp,
            "x_tensor_parallel": tp.astype(np.int64),
            "x_pipeline_parallel": pp.astype(np.int64),
            "x_data_parallel": dp.astype(np.int64),
            "x_micro_batch_size": mb.astype(np.int64),
            "y_step_time_s": step,
            "y_area_mm2": die,
            "y_power_W": power,
            "y_energy_per_step_J": energy,
            "y_tokens_per_s": tokens,
            "y_memory_per_device_B": memory,
            "c_memory_excess_B": memory - capacity,
            "feasible": feasible,
            "pareto": pareto,
        }
    )
    trials.to_parquet(folder / "trials.parquet", index=False)

    designs = []
    for i in np.flatnonzero(pareto):
        t = float(step[i])
        split = np.array([0.55, 0.08, 0.12, 0.1, 0.1, 0.05])
        x = {
            c: (v.item() if hasattr(v, "item") else v)
            for c, v in trials.iloc[i].items()
            if c.startswith("x_")
        }
        design: dict[str, Any] = {
            "trial": int(trials["trial"][i]),
            "objectives": {o: float(columns[o][i]) for o in objectives},
            "outputs": {
                "step_time_s": t,
                "mfu": float(rng.uniform(0.2, 0.6)),
                "energy_per_step_J": float(energy[i]),
                "energy_per_step_ops_J": 0.45 * float(energy[i]),  # per-operation sum (§A6.3)
                "power_W": float(power[i]),
                "area_mm2": float(die[i]),
                "memory_per_device_B": float(memory[i]),
                "memory_capacity_B": float(capacity[i]),
                "device_cost_usd": float(die[i] * 3.1),
                "tokens_per_s": float(tokens[i]),
            },
            "constraints": {
                "memory_excess_B": float(memory[i] - capacity[i]),
                "area_excess_mm2": -3.0,
            },
            "x": x,
            "breakdown_s": dict(
                zip(
                    [
                        "gemm",
                        "attention",
                        "tensor_parallel_comm",
                        "pipeline_bubble",
                        "data_parallel_comm",
                        "optimizer",
                    ],
                    (t * split).tolist(),
                    strict=True,
                )
            ),
            "area_breakdown_mm2": {
                "core": 0.65 * die[i],
                "l2": 0.08 * die[i],
                "memory_controller": 0.12 * die[i],
                "other": 0.15 * die[i],
            },
            "power_breakdown_W": {
                "core": 0.5 * power[i],
                "dram": 0.2 * power[i],
                "l2": 0.05 * power[i],
                "other": 0.25 * power[i],
            },
            "memory_breakdown_B": {
                "weights": 0.15 * memory[i],
                "optimizer_states": 0.3 * memory[i],
                "activations": 0.45 * memory[i],
                "cuda_context": 0.1 * memory[i],
            },
            "config": {
                "system": {
                    "device": {
                        "name": f"design-{tech[i]}",
                        "technology": {"name": tech[i]},
                        "die_area_mm2": float(die[i]),
                        "tdp_W": float(tdp[i]),
                    },
                    "network": "dgx-h100",
                    "devices_per_node": 8,
                    "num_nodes": 128,
                },
                "workload": {"model": "gpt3-175b", "global_batch_size": 1536, "precision": "bf16"},
                "mapping": {
                    "data_parallel": int(dp[i]),
                    "tensor_parallel": int(tp[i]),
                    "pipeline_parallel": int(pp[i]),
                    "micro_batch_size": int(mb[i]),
                    "sequence_parallel": True,
                    "activation_recompute": "selective",
                    "zero_stage": 1,
                },
            },
        }
        for key in ("area_breakdown_mm2", "power_breakdown_W", "memory_breakdown_B"):
            design[key] = {k: float(v) for k, v in design[key].items()}
        if surrogate and trials["source"][i] == "search":
            design["surrogate"] = {
                o: {
                    "mean": float(columns[o][i] * rng.uniform(0.95, 1.05)),
                    "std": float(0.02 * columns[o][i]),
                }
                for o in objectives
            }
        designs.append(design)
    designs.sort(key=lambda d: d["objectives"][objectives[0]])
    objective_list = [
        {"name": o, "direction": OBJECTIVES[o][0], "reference": OBJECTIVES[o][1]}
        for o in objectives
    ]
    pareto_doc = {"objectives": objective_list, "designs": designs}
    (folder / "pareto.json").write_text(json.dumps(pareto_doc, indent=2), encoding="utf-8")
    (folder / "pareto.yaml").write_text(
        yaml.safe_dump(pareto_doc, sort_keys=False), encoding="utf-8"
    )

    def history(scale: float) -> list[dict[str, Any]]:
        return [
            {"evaluations": e, "hypervolume": round(scale * (1 - np.exp(-e / 20)), 4)}
            for e in range(8, n + 1, 8)
        ]

    summary: dict[str, Any] = {
        "study": "synthetic",
        "strategy": "botorch",
        "seed": seed,
        "budget": n,
        "num_evaluations": n,
        "num_feasible": int(feasible.sum()),
        "num_pareto": len(designs),
        "objectives": objective_list,
        "hypervolume": history(0.7)[-1]["hypervolume"],
        "hypervolume_history": history(0.7),
        "surrogate": {
            "kind": "mlp",
            "held_out": {
                f"y_{o}": {"mape": 0.021, "r2": 0.99, "spearman": 0.99, "coverage_95": 0.95}
                for o in objectives
            },
            "pareto_error": {o: 0.018 for o in objectives},
        }
        if surrogate
        else None,
        "timings_s": {"sample": 12.0, "fit": 40.0, "search": 80.0, "verify": 1.0},
        "versions": {"deepflow": "0.1.0", "oracle": "0.1.0+synthetic"},
    }
    if benchmark:
        summary["benchmark"] = {
            "botorch": history(0.7),
            "optuna-tpe": history(0.55),
            "random": history(0.4),
        }
    (folder / "summary.json").write_text(json.dumps(summary, indent=2), encoding="utf-8")
    (folder / "study.yaml").write_text("study: synthetic\n", encoding="utf-8")
    return folder


@pytest.fixture
def result_dir(tmp_path: Path) -> Path:
    """Three objectives, surrogate and a three-strategy benchmark."""
    folder = tmp_path / "result"
    folder.mkdir()
    return make_result_dir(folder)


@pytest.fixture
def make_result(tmp_path: Path) -> Callable[..., Path]:
    """Build a result directory with other options: ``make_result(objectives=[...])``."""

    def _make(name: str = "result", **kwargs: Any) -> Path:
        folder = tmp_path / name
        folder.mkdir()
        return make_result_dir(folder, **kwargs)

    return _make


@pytest.fixture(scope="session")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Path]:
    """One report written through the CLI (figures included), shared by the read-only tests.

    Returns the typer ``Result`` of ``deepflow report DIR`` and DIR.
    """
    from typer.testing import CliRunner

    from deepflow.cli import app

    folder = make_result_dir(tmp_path_factory.mktemp("rendered"))
    return CliRunner().invoke(app, ["report", str(folder)]), folder
