"""GEMM evaluations per second, and the ratio to the original CrossFlow (0.7/s).

Run: .venv/bin/python benchmarks/bench_gemm.py
The original's getGEMMTime searches 48,000 (tile, order) candidates in pure Python:
1.40–1.54 s per GEMM, ~0.65–0.71 evaluations/s on this kind of machine
(measured by running nanocad-lab/DeepFlow, docs/crossflow-differences.md). Target: >= 1e4 × that.
"""

from __future__ import annotations

import time

import numpy as np

from deepflow.config import load_device
from deepflow.oracle.hardware import device_caps
from deepflow.oracle.kernels import TILE_SHAPES, gemm, gemm_one

ORIGINAL_PER_S = 0.7


def main() -> None:
    caps = device_caps(load_device("a100-sxm4-80gb"), "bf16")
    rng = np.random.default_rng(0)

    t0 = time.perf_counter()
    repeats = 200
    for i in range(repeats):
        gemm(caps, 4096 + i, 4096, 4096)
    single = (time.perf_counter() - t0) / repeats
    print(f"one GEMM, uncached ({len(TILE_SHAPES)} tiles searched): {single * 1e6:.0f} µs")

    gemm_one(caps, 8192, 8192, 8192)
    t0 = time.perf_counter()
    for _ in range(100_000):
        gemm_one(caps, 8192, 8192, 8192)
    cached = (time.perf_counter() - t0) / 100_000
    print(f"one GEMM, memoised per (device, shape): {cached * 1e9:.0f} ns")

    for n in (10_000, 100_000, 1_000_000):
        m, nn, k = (rng.integers(1, 1 << 15, n) for _ in range(3))
        best = float("inf")
        for _ in range(3):
            t0 = time.perf_counter()
            gemm(caps, m, nn, k)
            best = min(best, time.perf_counter() - t0)
        rate = n / best
        print(
            f"batch of {n:>9,} shapes: {best:.3f} s -> {rate:,.0f} GEMM evaluations/s "
            f"= {rate / ORIGINAL_PER_S:,.0f}x the original's {ORIGINAL_PER_S}/s "
            f"(target 1e4x: {'met' if rate / ORIGINAL_PER_S >= 1e4 else 'NOT met'})"
        )


if __name__ == "__main__":
    main()
