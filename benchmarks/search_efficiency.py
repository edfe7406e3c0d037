"""Search efficiency: hypervolume vs oracle evaluations for every strategy, against a
reference front from a large oracle sweep of the same design space.

    python benchmarks/search_efficiency.py                      # default study, 3 seeds
    python benchmarks/search_efficiency.py --quick              # a smoke run (minutes)
    python benchmarks/search_efficiency.py --json out.json      # histories for the report

The reference hypervolume is that of the feasible Pareto front of ``--reference-samples``
Sobol designs labelled by the oracle (normalised with the study's references and ideals).
For each strategy and seed the search runs in memory on the oracle; the table gives the
median number of oracle evaluations to reach 80 / 90 / 95 % of the reference hypervolume
('>B' when the budget B ran out) and the ratio to NSGA-II's. The surrogate-assisted strategy
trains only on its own evaluations here (``num_samples: 0``), so every oracle call counts; it
refits a ``--surrogate-model`` (default: the exact GP) each batch and scores ``--pool-size``
candidates (uniform, level sweeps and trust-region moves around its Pareto designs, see
:mod:`deepflow.search.assisted`) without an inner search on the surrogate
(``--inner-budget 0``: on this study it cost most of the time and added nothing measurable).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import time
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np

from deepflow.datasets.io import oracle_version
from deepflow.datasets.label import label_points
from deepflow.datasets.samplers import unit_cube
from deepflow.search.base import SearchConfig, run_search
from deepflow.search.objectives import constraint_matrix, normalise
from deepflow.search.pareto import hypervolume
from deepflow.search.problem import OracleProblem
from deepflow.search.study import load_study

LEVELS = (0.80, 0.90, 0.95)


def reference_hypervolume(study: Any, num: int, chunk: int = 65536) -> float:
    """Hypervolume of the feasible front of ``num`` Sobol designs (normalised)."""
    space = study.space
    version = oracle_version()
    best: list[np.ndarray] = []
    for start in range(0, num, chunk):
        stop = min(num, start + chunk)
        u = unit_cube(
            "sobol", seed=12345, start=start, stop=stop, num_samples=num, dims=space.num_dims
        )
        df = label_points(space, u, oracle_version=version).to_pandas()
        values = np.stack([df[o.column].to_numpy(float) for o in study.objectives], axis=1)
        cols = {c: df[c].to_numpy(float) for c in df.columns if c.startswith(("c_", "y_"))}
        _, c = constraint_matrix(cols, study.constraint_names, study.bounds)
        ok = df["feasible"].to_numpy(bool) & (c <= 0).all(axis=1)
        norm = normalise(values, study.objectives)[ok]
        best.append(norm)
    return hypervolume(np.vstack(best))


def evaluations_to(history: list[dict[str, float]], target: float) -> int | None:
    for h in history:
        if h["hypervolume"] >= target:
            return int(h["evaluations"])
    return None


def median_evaluations(runs: list[dict[str, Any]], ref: float) -> dict[float, float]:
    """Median evaluations to each level of ``ref`` (inf unless a majority of runs got there)."""
    out = {}
    for level in LEVELS:
        counts = [evaluations_to(r["hypervolume_history"], level * ref) for r in runs]
        reached = [c for c in counts if c is not None]
        if len(reached) * 2 > len(counts):
            out[level] = float(np.median([c if c is not None else np.inf for c in counts]))
        else:
            out[level] = np.inf
    return out


def summary_table(
    runs: list[dict[str, Any]], ref: float, strategies: list[str], *, cheap_budget: int
) -> list[str]:
    """The printed table: final hypervolume share and evaluations to each level (medians
    over seeds), and the share of NSGA-II's evaluations to 95 %."""
    mine = {s: [r for r in runs if r["strategy"] == s] for s in strategies}
    medians = {s: median_evaluations(mine[s], ref) for s in strategies}
    base = medians.get("nsga2", {}).get(0.95, np.inf)  # all medians first: any order works
    header = f"{'strategy':10s} {'final HV/ref':>13s}" + "".join(
        f" {f'evals to {int(level * 100)}%':>14s}" for level in LEVELS
    )
    lines = [header + f" {'vs NSGA-II @95%':>16s}"]
    for strategy in strategies:
        final = np.median(
            [r["hypervolume_history"][-1]["hypervolume"] / ref for r in mine[strategy]]
        )
        budget = mine[strategy][0]["budget"]
        cells = [
            f"{value:14.0f}" if np.isfinite(value) else f"{'>' + str(budget):>14s}"
            for value in medians[strategy].values()
        ]
        own = medians[strategy][0.95]
        ratio = ""
        if np.isfinite(own) and np.isfinite(base):
            ratio = f"1/{base / own:.1f}"
        elif np.isfinite(own):
            ratio = f"< 1/{cheap_budget / own:.1f}"
        lines.append(f"{strategy:10s} {final:13.1%}" + "".join(cells) + f" {ratio:>16s}")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--study", default="default")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument(
        "--strategies",
        nargs="+",
        default=["surrogate", "tpe", "nsga2", "random"],
        help="botorch is opt-in: > 2 min per batch of 8 on the default study's 25 dims",
    )
    parser.add_argument("--budget", type=int, default=192, help="model-based strategies")
    parser.add_argument("--cheap-budget", type=int, default=2048, help="nsga2 and random")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--reference-samples", type=int, default=262144)
    parser.add_argument("--surrogate-model", default="gp")
    parser.add_argument("--inner-budget", type=int, default=0, help="surrogate strategy")
    parser.add_argument("--pool-size", type=int, default=8000, help="surrogate strategy")
    parser.add_argument("--quick", action="store_true", help="tiny budgets (smoke test)")
    parser.add_argument("--json", default="", help="write the histories here")
    args = parser.parse_args()
    if args.quick:
        args.seeds, args.budget, args.cheap_budget = args.seeds[:1], 32, 128
        args.reference_samples = 16384

    study = load_study(args.study)
    start = time.perf_counter()
    ref = reference_hypervolume(study, args.reference_samples)
    print(
        f"reference: {args.reference_samples:,} Sobol designs, hypervolume {ref:.4f} "
        f"({time.perf_counter() - start:.0f} s)"
    )
    if "surrogate" in args.strategies:
        print(
            f"surrogate: {args.surrogate_model} on its own evaluations, inner budget "
            f"{args.inner_budget}, pool {args.pool_size}"
        )
    problem = OracleProblem(study.space)
    runs: list[dict[str, Any]] = []
    for strategy in args.strategies:
        budget = args.cheap_budget if strategy in ("nsga2", "random") else args.budget
        for seed in args.seeds:
            search = dataclasses.replace(
                study.search,
                strategy=strategy,
                budget=budget,
                seed=seed,
                batch_size=args.batch_size,
            )
            surrogate = dataclasses.replace(
                study.surrogate,
                num_samples=0,
                path="",
                model=args.surrogate_model,
                refit=True,
                inner_budget=args.inner_budget,
                pool_size=args.pool_size,
            )
            config = SearchConfig(
                name=f"{strategy}-{seed}",
                objectives=study.objectives,
                bounds=study.bounds,
                search=search,
                surrogate=surrogate,
            )
            t0 = time.perf_counter()
            result = run_search(problem, config, storage=None)
            seconds = time.perf_counter() - t0
            runs.append(
                {
                    "strategy": strategy,
                    "seed": seed,
                    "budget": budget,
                    "seconds": seconds,
                    "hypervolume_history": result.hypervolume_history,
                }
            )
            print(
                f"  {strategy:9s} seed {seed}: {result.hypervolume / ref:6.1%} of reference "
                f"after {budget} evaluations ({seconds:.0f} s)",
                flush=True,
            )

    print()
    for line in summary_table(runs, ref, args.strategies, cheap_budget=args.cheap_budget):
        print(line)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump({"reference_hypervolume": ref, "runs": runs}, fh, indent=1)


if __name__ == "__main__":
    main()
