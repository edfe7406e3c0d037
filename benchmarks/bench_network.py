"""Collective evaluations per second, and the calibrated model against the public NCCL sweeps.

Run: .venv/bin/python benchmarks/bench_network.py
Prints: the latency of one scalar call; batched evaluations per second (1e4–1e6 message
sizes, all-reduce on one DGX H100 node, and a mixed batch of group sizes, strides and node
sizes on DGX A100 for every collective); then, for both NCCL groups, the per-case table of
measured vs model bus bandwidth and error (the issue's acceptance: within 15 % at ≥ 1 MiB).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from functools import partial

import numpy as np
from fit_network import FITS, case_table, load_cases  # benchmarks/ is on sys.path when run

from deepflow.config import load_network
from deepflow.oracle.network import COLLECTIVES, NetworkModel, collective_time_s


def best_of(fn: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    h100 = NetworkModel.from_spec(load_network("dgx-h100"), 8)
    a100 = NetworkModel.from_spec(load_network("dgx-a100"), 8)
    single = best_of(lambda: collective_time_s("all_reduce", 2**26, 8, net=h100), 200)
    print(f"single all-reduce (scalar call): {single * 1e6:.0f} µs")
    rng = np.random.default_rng(0)
    for n in (10_000, 100_000, 1_000_000):
        sizes = 10 ** rng.uniform(3, 10, n)
        seconds = best_of(partial(collective_time_s, "all_reduce", sizes, 8, net=h100), 3)
        print(
            f"all_reduce, 8 ranks, n={n:>9,} sizes: {seconds:.3f} s -> {n / seconds:,.0f} evals/s"
        )
    n = 1_000_000
    sizes = 10 ** rng.uniform(3, 10, n)
    groups = rng.choice([2, 4, 8, 16, 32, 64, 128], n)
    strides = rng.choice([1, 2, 8, 64], n)
    nodes = rng.choice([4.0, 8.0], n)
    mixed = dataclasses.replace(a100, devices_per_node=nodes)
    for coll in COLLECTIVES:
        call = partial(collective_time_s, coll, sizes, groups, net=mixed, stride=strides)
        seconds = best_of(call, 2)
        print(
            f"{coll:>14}, mixed groups/strides/node sizes, n={n:,}: {seconds:.3f} s -> "
            f"{n / seconds:,.0f} evals/s"
        )
    nets = {"dgx-a100": a100, "dgx-h100": h100}
    for fit in FITS:
        print()
        lines, _ = case_table(fit, nets[fit.network], load_cases(fit.group))
        print("\n".join(lines))


if __name__ == "__main__":
    main()
