"""Serving oracle speed: inference evaluations per second, batched and one by one.

Run: .venv/bin/python benchmarks/bench_inference.py [--rows N] [--repeats R]

Measures, for ``workload.kind: inference`` (docs/model.md part D):

- ``evaluate_table`` of the llama3-70b-serving-h100 scenario (a spec device) over N random
  requests offered (1 to 4,096), prompt and output lengths (128 to 20,000 / 1 to 4,096),
  serving mappings of the 8 GPUs (tensor × pipeline × data parallel), continuous or static
  batching, scheduler token budgets and CUDA-graph padding (target: 10⁵ rows/s);
- the same over disaggregated prefill and decode pools (random splits of the 8 GPUs into
  prefill and decode replicas of their own tensor parallelism, continuous batching; §D6);
- ``label_rows`` of the inference-pathfinding design space (every row its own chip, derived
  from technology and budgets, then served), the dataset path;
- one ``evaluate_one`` of the llama3-70b-serving-h100 scenario (a batch of one).

Each figure is the best of R repeats in wall-clock time (other load on the machine only slows
a run down), printed with the load average.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import numpy as np
from bench_workloads import best_s  # benchmarks/ is on sys.path when run

from deepflow.config import load_scenario
from deepflow.datasets import load_space
from deepflow.datasets.label import label_rows
from deepflow.oracle.evaluate import evaluate_one, evaluate_table

ROOT = Path(__file__).resolve().parents[1]
SCENARIOS = ROOT / "configs" / "scenarios"


def _serving_columns(n: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """N random serving cases of Llama 3 70B on 8 GPUs: requests, lengths, mapping, scheduler."""
    split = rng.choice(np.array([(8, 1, 1), (4, 2, 1), (4, 1, 2), (2, 2, 2), (2, 1, 4),
                                 (1, 1, 8), (2, 4, 1), (1, 8, 1)], dtype=float), n)  # fmt: skip
    return {
        "global_batch_size": np.floor(np.exp(rng.uniform(0, np.log(4096), n))),
        "input_tokens": np.floor(np.exp(rng.uniform(np.log(128), np.log(20000), n))),
        "output_tokens": np.floor(np.exp(rng.uniform(0, np.log(4096), n))),
        "tensor_parallel": split[:, 0],
        "pipeline_parallel": split[:, 1],
        "data_parallel": split[:, 2],
        "static_batching": rng.choice([0.0, 1.0], n),
        "max_num_tokens": rng.choice([0.0, 8192.0, 32768.0], n),
        "cuda_graph_padding": rng.choice([0.0, 1.0], n),
    }


def _pool_columns(n: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """N random disaggregated cases on the 8 GPUs (docs/model.md §D6): the serving columns with
    continuous batching and a split into P prefill replicas of TP t_p and decode ones of TP t."""
    # (tp, dp, prefill replicas, prefill tp): prefill_replicas·t_p + (dp − P)·tp = 8
    pools = rng.choice(np.array([(4, 5, 4, 1), (2, 4, 2, 0), (1, 8, 4, 0), (4, 3, 2, 2),
                                 (2, 6, 4, 1), (1, 5, 1, 4)], dtype=float), n)  # fmt: skip
    columns = _serving_columns(n, rng)
    columns |= {"tensor_parallel": pools[:, 0], "pipeline_parallel": np.ones(n),
                "data_parallel": pools[:, 1], "prefill_replicas": pools[:, 2],
                "prefill_tensor_parallel": pools[:, 3], "static_batching": np.zeros(n)}  # fmt: skip
    return columns


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    n, repeats = args.rows, args.repeats
    rng = np.random.default_rng(0)
    print(f"load average {os.getloadavg()[0]:.2f}; {n:,} rows, best of {repeats}")

    scenario = load_scenario(SCENARIOS / "llama3-70b-serving-h100.yaml")
    columns = _serving_columns(n, rng)
    evaluate_table(scenario, {k: v[:8] for k, v in columns.items()})  # warm caches
    seconds = best_s(lambda: evaluate_table(scenario, columns), repeats)
    print(f"{'llama3-70b-serving-h100 evaluate_table (spec device)':58s} "
          f"{n / seconds:12,.0f} rows/s")  # fmt: skip

    pools = _pool_columns(n, rng)
    evaluate_table(scenario, {k: v[:8] for k, v in pools.items()})
    seconds = best_s(lambda: evaluate_table(scenario, pools), repeats)
    print(f"{'  the same, disaggregated prefill and decode pools':58s} {n / seconds:12,.0f} rows/s")

    space = load_space("inference-pathfinding")
    label_rows(space, seed=0, start=0, stop=8, num_samples=n, oracle_version="")
    seconds = best_s(
        lambda: label_rows(space, seed=0, start=0, stop=n, num_samples=n, oracle_version=""),
        repeats,
    )
    print(f"{'inference-pathfinding label_rows (design space)':58s} {n / seconds:12,.0f} rows/s")

    evaluate_one(scenario)
    seconds = best_s(lambda: [evaluate_one(scenario) for _ in range(200)], repeats)
    print(f"{'llama3-70b-serving-h100 evaluate_one':58s} {seconds / 200 * 1e6:12,.0f} us")


if __name__ == "__main__":
    main()
