"""Dataset generation speed: rows/s for the default LLM space with the local backend.

Run: .venv/bin/python benchmarks/bench_datasets.py [--num-samples N] [--workers 1 2]
Issue target: >= 5e4 rows/s with the local backend on 2 cores (large chunks, so the vectorised
oracle dominates); also prints the 1 -> 2 worker scaling, and where one chunk's time goes
(drawing + decoding the designs vs labelling them with the oracle).

Wall-clock rates depend on what else the machine runs, so each run also prints the load
average and the CPU seconds this process and its worker processes spent (Linux), whose ratio
to the rows gives a rate that other load disturbs less.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from deepflow.datasets import load_space, oracle_version, sample
from deepflow.datasets.label import decode, label_rows
from deepflow.datasets.samplers import unit_cube

SPACE = Path(__file__).resolve().parents[1] / "configs" / "spaces" / "llm-pathfinding.yaml"
TARGET = 5e4


def _tree_cpu_s() -> float:
    """CPU seconds of this process, its finished children and its live descendants."""
    ticks = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    t = os.times()
    total = t.user + t.system + t.children_user + t.children_system
    try:
        stats = {}
        for pid in os.listdir("/proc"):
            if pid.isdigit():
                with open(f"/proc/{pid}/stat") as fh:
                    fields = fh.read().rsplit(")", 1)[1].split()
                stats[int(pid)] = (int(fields[1]), int(fields[11]) + int(fields[12]))
    except OSError:
        return total
    tree = {os.getpid()}
    grew = True
    while grew:
        new = {p for p, (parent, _) in stats.items() if parent in tree and p not in tree}
        tree |= new
        grew = bool(new)
    return total + sum(stats[p][1] for p in tree - {os.getpid()}) / ticks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-samples", type=int, default=4 * 65536)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--space", type=Path, default=SPACE)
    args = parser.parse_args()
    space = load_space(args.space)
    chunk = space.chunk_size
    print(f"space {args.space.name}: {space.description}")
    print(f"  {space.num_dims} cube dimensions, {len(space.x_columns())} inputs, sampler "
          f"{space.sampler}, chunk {chunk:,} rows; {os.cpu_count()} CPUs, load average "
          f"{os.getloadavg()[0]:.1f}")  # fmt: skip

    n = min(chunk, args.num_samples)
    unit_cube(space.sampler, seed=0, start=0, stop=1, num_samples=n, dims=space.num_dims)
    t0 = time.perf_counter()
    u = unit_cube(space.sampler, seed=0, start=0, stop=n, num_samples=n, dims=space.num_dims)
    decode(space, u)
    drawn = time.perf_counter() - t0
    t0, c0 = time.perf_counter(), time.process_time()
    label_rows(space, seed=0, start=0, stop=n, num_samples=n, oracle_version=oracle_version())
    labelled, cpu = time.perf_counter() - t0, time.process_time() - c0
    print(
        f"one chunk of {n:,} rows in this process: {labelled:.2f} s -> {n / labelled:,.0f} "
        f"rows/s, {cpu:.2f} CPU s (draw + decode {drawn:.2f} s, the rest is the oracle)"
    )

    rates: dict[int, float] = {}
    with tempfile.TemporaryDirectory() as folder:
        for workers in args.workers:
            out = Path(folder) / f"w{workers}.parquet"
            cpu0, load0 = _tree_cpu_s(), os.getloadavg()[0]
            result = sample(space, num_samples=args.num_samples, out=out, workers=workers)
            cpu, load = _tree_cpu_s() - cpu0, max(load0, os.getloadavg()[0])
            rates[workers] = result.rows_per_s
            print(
                f"deepflow sample, local backend, {workers} worker(s): {result.num_rows:,} rows "
                f"in {result.seconds:.1f} s -> {result.rows_per_s:,.0f} rows/s "
                f"({result.num_feasible:,} feasible); {cpu:.1f} CPU s -> "
                f"{result.num_rows / cpu:,.0f} rows per CPU s; load average {load:.1f}"
            )
    if 1 in rates and len(rates) > 1:
        best = max(rates)
        print(f"scaling 1 -> {best} workers: {rates[best] / rates[1]:.2f}x")
    top = max(rates.values())
    verdict = "met" if top >= TARGET else "NOT met"
    print(f"target >= {TARGET:,.0f} rows/s on 2 cores: {verdict} ({top:,.0f} rows/s)")


if __name__ == "__main__":
    main()
