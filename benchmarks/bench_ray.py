"""Ray sweep scaling: rows/s per worker and the driver's share of the work.

Run: .venv/bin/python benchmarks/bench_ray.py [--num-samples N] [--workers W] [--chunk-rows R]
     [--address HOST:PORT] [--layout file|parts]

Without ``--address`` a private local Ray cluster with W CPUs is started. Ray tasks write
their part files themselves; the driver only records the manifest and (layout ``file``)
assembles the final file, so its CPU seconds per row bound how many workers one driver can
keep up with: ``rows/s the driver sustains = rows / driver CPU s``. docs/scaling.md
extrapolates from these figures. Wall-clock rates depend on what else the machine runs: the
load average is printed.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from deepflow.datasets import sample

SPACE = Path(__file__).resolve().parents[1] / "configs" / "spaces" / "llm-pathfinding.yaml"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-samples", type=int, default=400_000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--chunk-rows", type=int, default=8192)
    parser.add_argument("--address", default=None)
    parser.add_argument("--layout", choices=["file", "parts"], default="file")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "d.parquet"
        load0 = os.getloadavg()[0]
        cpu0, wall0 = time.process_time(), time.perf_counter()
        result = sample(SPACE, num_samples=args.num_samples, out=out, backend="ray",
                        workers=args.workers, chunk_size=args.chunk_rows,
                        address=args.address, layout=args.layout)  # fmt: skip
        driver_cpu_s = time.process_time() - cpu0
        wall_s = time.perf_counter() - wall0
        files = sorted(out.glob("*.parquet")) if out.is_dir() else [out]
        size_MB = sum(f.stat().st_size for f in files) / 1e6
    rate = result.num_rows / result.seconds
    print(f"{result.num_rows:,} rows in {result.num_chunks} chunks of {args.chunk_rows:,} on "
          f"{args.workers} Ray workers: {rate:,.0f} rows/s ({rate / args.workers:,.0f} per "
          f"worker), {wall_s:.1f} s wall with Ray's start; layout {args.layout}: "
          f"{len(files)} file(s), {size_MB:.1f} MB")  # fmt: skip
    print(f"driver: {driver_cpu_s:.2f} CPU s ({driver_cpu_s / wall_s:.0%} of one core; "
          f"{result.num_rows / driver_cpu_s:,.0f} rows per driver CPU second, the ceiling of "
          f"one driver)")  # fmt: skip
    print(f"load average {load0:.2f} -> {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
