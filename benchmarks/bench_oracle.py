"""Transformer oracle speed: warm, first-of-a-mapping and fresh-process evaluations, batched
evaluations, best-mapping; optionally side by side with another commit, measured in one run.

Run: .venv/bin/python benchmarks/bench_oracle.py [--baseline REV] [--rounds N]

Targets: a single evaluation < 1 ms, also the first evaluation of a new mapping; the first
evaluation in a fresh process <= 5 ms after import; batched >= 1e5 evaluations/s on 2 cores;
best-mapping for GPT-3 175B on 1,024 A100s < 10 s for the full valid space. Per-evaluation
figures are medians over rounds in wall-clock time (judged against the targets) and in this
thread's CPU time, which other jobs on the machine disturb less.

With ``--baseline REV`` the commit REV is checked out into a temporary git worktree and this
same script measures its package in a subprocess, alternating with the working tree's, so both
columns see the same machine load; the last column is the ratio now / baseline (< 1: faster).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
SCENARIO = ROOT / "configs" / "scenarios" / "gpt3-175b-a100.yaml"

#: The fresh-process figures: import, then time loading the scenario and its first evaluation.
_FRESH = """
import time
from deepflow.config import load_scenario
from deepflow.oracle.evaluate import evaluate_one
t0 = time.perf_counter()
scenario = load_scenario({path!r})
t1 = time.perf_counter()
evaluate_one(scenario)
print(t1 - t0, time.perf_counter() - t1)
"""


def _forget() -> None:
    """Forget the memoised scalar kernel times (the API of this tree, or of older trees)."""
    from deepflow.oracle.workloads import transformer

    ops = getattr(transformer, "ops", None)
    if ops is not None and hasattr(ops, "clear_memos"):
        ops.clear_memos()
    else:  # before the transformer model became a package
        transformer._SCALAR_OPS.clear()  # type: ignore[attr-defined]


def _per_evaluation(scenarios: list[Any], rounds: int, setup: Callable[[], object]) -> float:
    """Median wall seconds per evaluation of ``scenarios`` over rounds, each after ``setup``."""
    from deepflow.oracle.evaluate import evaluate_one

    wall = []
    for _ in range(rounds):
        setup()
        t0 = time.perf_counter()
        for one in scenarios:
            evaluate_one(one)
        wall.append((time.perf_counter() - t0) / len(scenarios))
    return statistics.median(wall)


def measure(rounds: int) -> dict[str, float]:
    """Every figure of this tree's package (or the one on PYTHONPATH), seconds or per second."""
    from deepflow.config import load_scenario
    from deepflow.oracle.best_mapping import best_mappings, enumerate_mappings
    from deepflow.oracle.evaluate import evaluate_one, network_model
    from deepflow.oracle.hardware import device_caps
    from deepflow.oracle.workloads.transformer import transformer_columns, transformer_step

    fresh, fresh_load = [], []
    for _ in range(rounds):
        code = _FRESH.format(path=str(SCENARIO))
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             check=True, env=os.environ.copy())  # fmt: skip
        load_s, first_s = (float(v) for v in out.stdout.split()[-2:])
        fresh_load.append(load_s)
        fresh.append(first_s)
    scenario = load_scenario(SCENARIO)
    evaluate_one(scenario)  # warm caches (presets, calibration, GEMM memo)
    warm = _per_evaluation([scenario] * 200, rounds, setup=lambda: None)
    # A mapping never evaluated before also evaluates its new GEMM shapes and collectives
    # (memoised afterwards). Each round forgets the memoised kernel times, as a new process
    # would, and evaluates the base scenario first.
    cold = [replace(scenario, mapping=replace(scenario.mapping, micro_batch_size=mb,
                                              data_parallel=dp, pipeline_parallel=pp))
            for mb, dp, pp in ((1, 48, 4), (2, 24, 8), (4, 12, 16), (8, 6, 32), (3, 16, 12),
                               (6, 8, 24), (1, 96, 2), (2, 96, 2))]  # fmt: skip

    def forget() -> None:
        _forget()
        evaluate_one(scenario)

    first = _per_evaluation(cold, 3 * rounds, setup=forget)
    system = replace(scenario.system, num_nodes=128)  # 1,024 A100s
    scenario = replace(scenario, system=system,
                       mapping=replace(scenario.mapping, data_parallel=16))  # fmt: skip
    try:  # the scenario's own placement (a tree before the placement knobs has only that)
        mappings = enumerate_mappings(scenario, placements=False)
    except TypeError:
        mappings = enumerate_mappings(scenario)
    n = len(mappings["tensor_parallel"])
    model = scenario.workload.model
    base = transformer_columns(model, scenario.mapping, scenario.workload.global_batch_size)  # type: ignore[arg-type]
    x = {k: np.broadcast_to(v, (n,)) for k, v in base.items()} | mappings
    caps = device_caps(scenario.system.device, scenario.workload.precision)
    net = network_model(scenario)
    batched = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        transformer_step(caps, net, x)
        batched.append(n / (time.perf_counter() - t0))
    t0 = time.perf_counter()
    placed = best_mappings(scenario, top=5)["num_valid"]
    best = time.perf_counter() - t0
    return {
        "fresh_process_load_s": statistics.median(fresh_load),
        "fresh_process_first_s": statistics.median(fresh),
        "warm_s": warm,
        "first_of_mapping_s": first,
        "batched_per_s": statistics.median(batched),
        "best_mapping_s": best,
        "num_mappings": float(n),
        "num_placed_mappings": float(placed),
    }


_ROWS = (
    ("fresh_process_load_s", "fresh process: load_scenario (presets, validation)", 5e-3),
    ("fresh_process_first_s", "fresh process: first evaluate_one (calibration read)", 5e-3),
    ("warm_s", "single evaluation, warm (GPT-3 175B on 1,536 A100)", 1e-3),
    ("first_of_mapping_s", "first evaluation of a new mapping", 1e-3),
    ("batched_per_s", "batched evaluations per second", 1e5),
    ("best_mapping_s", "best-mapping, GPT-3 175B on 1,024 A100", 10.0),
)


def _show(name: str, value: float) -> str:
    return f"{value:,.0f}/s" if name.endswith("per_s") else f"{value * 1e3:,.3f} ms"


def _subprocess_measure(tree: Path, rounds: int) -> dict[str, float]:
    env = os.environ | {"PYTHONPATH": str(tree), "DEEPFLOW_BENCH_CHILD": "1"}
    out = subprocess.run([sys.executable, __file__, "--measure", "--rounds", str(rounds)],
                         capture_output=True, text=True, check=True, env=env, cwd=tree)  # fmt: skip
    package, result = out.stdout.splitlines()[-2:]
    if not Path(package).resolve().is_relative_to(tree.resolve()):
        raise SystemExit(f"the child measured {package}, not the tree {tree}")
    return dict(json.loads(result))


def _median_of(runs: list[dict[str, float]]) -> dict[str, float]:
    return {k: statistics.median(r[k] for r in runs) for k in runs[0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", help="a git revision to measure side by side")
    parser.add_argument("--rounds", type=int, default=5, help="rounds per figure (default 5)")
    parser.add_argument("--repeats", type=int, default=3,
                        help="with --baseline: alternating runs of each tree")  # fmt: skip
    parser.add_argument("--measure", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:  # a child: measure the package on PYTHONPATH, print JSON
        import deepflow

        print(deepflow.__file__)
        print(json.dumps(measure(args.rounds)))
        return
    if not args.baseline:
        now = measure(args.rounds)
        print(
            f"{int(now['num_mappings']):,} valid mappings in the batched row; best-mapping "
            f"searches them in every placement: {int(now['num_placed_mappings']):,}"
        )
        for key, label, target in _ROWS:
            ok = now[key] >= target if key.endswith("per_s") else now[key] <= target
            print(f"{label}: {_show(key, now[key])} (target {_show(key, target)}: "
                  f"{'met' if ok else 'NOT met'})")  # fmt: skip
        return
    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp) / "baseline"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(tree),
                        args.baseline], check=True, capture_output=True)  # fmt: skip
        try:
            base_runs, now_runs = [], []
            for _ in range(args.repeats):
                base_runs.append(_subprocess_measure(tree, args.rounds))
                now_runs.append(_subprocess_measure(ROOT, args.rounds))
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)],
                           check=False, capture_output=True)  # fmt: skip
    base, now = _median_of(base_runs), _median_of(now_runs)
    print(f"median of {args.repeats} alternating runs each; baseline {args.baseline}")
    print(f"{'figure':58s} {'baseline':>12s} {'now':>12s} {'now/base':>9s}")
    for key, label, _ in _ROWS:
        ratio = now[key] / base[key]
        print(f"{label:58s} {_show(key, base[key]):>12s} {_show(key, now[key]):>12s} "
              f"{ratio:9.3f}")  # fmt: skip


if __name__ == "__main__":
    main()
