"""GEMM and LSTM oracle speed: rows/s of batched evaluations and of LSTM dataset labelling.

Run: .venv/bin/python benchmarks/bench_workloads.py [--rows N] [--repeats R]

Measures, for the CrossFlow workload kinds:

- ``evaluate_table`` of the gemm-a100 scenario over N random GEMM shapes and mappings (data
  and tensor parallel, RC/CR kernel partition);
- the same on the gemm-waferscale-rc20 scenario (a design-mode device: every row its own
  device through the design columns);
- ``evaluate_table`` of the lstm-a100 scenario over N random batches, hidden sizes and
  mappings;
- ``label_rows`` of the lstm-paper design space (area/power/perimeter splits of a V100-class
  design), the dataset path;
- one ``evaluate_one`` of each of the gemm-a100 and lstm-a100 scenarios (a batch of one).

Each figure is the best of R repeats in wall-clock time (other load on the machine only slows
a run down), printed with the load average. To compare with another commit, run this script
with that commit's package first on ``PYTHONPATH`` (the script only uses public functions).
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from deepflow.config import load_scenario
from deepflow.datasets import load_space
from deepflow.datasets.label import label_rows
from deepflow.oracle.evaluate import evaluate_one, evaluate_table

ROOT = Path(__file__).resolve().parents[1]
SCENARIOS = ROOT / "configs" / "scenarios"


def best_s(run: Callable[[], object], repeats: int) -> float:
    """The shortest wall-clock time of ``repeats`` runs (other load only slows a run down)."""
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - start)
    return best


def _gemm_columns(n: int, rng: np.random.Generator, tp: tuple[int, ...]) -> dict[str, np.ndarray]:
    """N GEMM shapes (64 to 2**17 per side, log-uniform) and mappings."""
    m, k, nn = (np.floor(np.exp(rng.uniform(np.log(64), np.log(2**17), n))) for _ in range(3))
    return {
        "m": m,
        "k": k,
        "n": nn,
        "data_parallel": rng.choice([1.0, 2.0], n),
        "tensor_parallel": rng.choice(np.asarray(tp, dtype=float), n),
        "kernel_partition": rng.choice([0.0, 1.0], n),
    }


def _lstm_columns(n: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """N LSTM batches, hidden sizes and mappings (RC with an N split where it divides)."""
    tp = rng.choice([1.0, 2.0, 4.0], n)
    return {
        "global_batch_size": rng.choice([64.0, 500.0, 2000.0], n),
        "hidden_size": rng.choice([1024.0, 2048.0, 4096.0], n),
        "data_parallel": rng.choice([1.0, 2.0], n),
        "tensor_parallel": tp,
        "pipeline_parallel": rng.choice([1.0, 2.0, 3.0], n),
        "kernel_partition": rng.choice([0.0, 1.0], n),
        "kernel_parallel_dim2": np.where(rng.random(n) < 0.5, 1.0, tp),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    n, repeats = args.rows, args.repeats
    rng = np.random.default_rng(0)
    print(f"load average {os.getloadavg()[0]:.2f}; {n} rows, best of {repeats}")

    cases = {
        "gemm-a100 evaluate_table": (
            load_scenario(SCENARIOS / "gemm-a100.yaml"), _gemm_columns(n, rng, (1, 2, 4, 8))),
        "gemm-waferscale-rc20 evaluate_table (design device)": (
            load_scenario(SCENARIOS / "gemm-waferscale-rc20.yaml"),
            _gemm_columns(n, rng, (1, 4, 20)) | {"die_area_mm2": rng.uniform(600, 815, n)}),
        "lstm-a100 evaluate_table": (
            load_scenario(SCENARIOS / "lstm-a100.yaml"), _lstm_columns(n, rng)),
    }  # fmt: skip
    for name, (scenario, columns) in cases.items():
        evaluate_table(scenario, {k: v[:8] for k, v in columns.items()})  # warm caches
        seconds = best_s(lambda s=scenario, c=columns: evaluate_table(s, c), repeats)
        print(f"{name:55s} {n / seconds:12,.0f} rows/s")

    space = load_space("lstm-paper")
    label_rows(space, seed=0, start=0, stop=8, num_samples=n, oracle_version="")
    seconds = best_s(
        lambda: label_rows(space, seed=0, start=0, stop=n, num_samples=n, oracle_version=""),
        repeats,
    )
    print(f"{'lstm-paper label_rows (design space)':55s} {n / seconds:12,.0f} rows/s")

    for name in ("gemm-a100", "lstm-a100"):
        scenario = load_scenario(SCENARIOS / f"{name}.yaml")
        evaluate_one(scenario)
        seconds = best_s(lambda s=scenario: [evaluate_one(s) for _ in range(200)], repeats)
        print(f"{name + ' evaluate_one':55s} {seconds / 200 * 1e6:12,.0f} us")


if __name__ == "__main__":
    main()
