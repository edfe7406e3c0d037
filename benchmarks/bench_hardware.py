"""Device derivations per second (issue target: ≥ 1e5/s batched on 2 cores).

Run: .venv/bin/python benchmarks/bench_hardware.py
Prints: single-design latency (derive_one, includes building the table), batched
derivations per second for 1e4, 1e5 and 1e6 random H100-like budgets, and the ratio to the
target.
"""

from __future__ import annotations

import time

import numpy as np

from deepflow.config import DesignDeviceSpec, load_device
from deepflow.oracle.hardware import DESIGN_COLUMNS, derive, derive_one, design_table

TARGET_PER_S = 1e5


def random_table(n: int, seed: int = 0) -> dict[str, np.ndarray]:
    spec = load_device("h100-like-4nm")
    assert isinstance(spec, DesignDeviceSpec)
    one = design_table([spec])
    rng = np.random.default_rng(seed)
    t = {c: np.repeat(one[c], n) for c in DESIGN_COLUMNS}
    for part in ("core", "l2", "l1", "register_file", "memory_controller"):
        t[f"area_{part}_mm2"] = t[f"area_{part}_mm2"] * rng.uniform(0.5, 1.5, n)
    for part in ("core", "dram", "l2", "l1", "register_file", "scale_up"):
        t[f"power_{part}_W"] = t[f"power_{part}_W"] * rng.uniform(0.3, 2.0, n)
    return t


def best_of(fn: object, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()  # type: ignore[operator]
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    spec = load_device("v100-crossflow")
    assert isinstance(spec, DesignDeviceSpec)
    single = best_of(lambda: derive_one(spec), 50)
    print(f"single design (derive_one): {single * 1e3:.3f} ms")
    for n in (10_000, 100_000, 1_000_000):
        table = random_table(n)
        seconds = best_of(lambda table=table: derive(table), 3)
        rate = n / seconds
        print(
            f"batch n={n:>9,}: {seconds:.3f} s  ->  {rate:,.0f} derivations/s "
            f"({rate / TARGET_PER_S:.1f}x the 1e5/s target)"
        )


if __name__ == "__main__":
    main()
