"""The best-known front of a study: a large Sobol sweep and a long vectorised evolutionary
run on the batched oracle, merged into ``benchmarks/reference_fronts/<study>.json`` with
their provenance (sizes, seeds, seconds, the oracle version).

    python benchmarks/reference_front.py                          # default study: 16 M + 10^4 x 500
    python benchmarks/reference_front.py --sweep-samples 1048576 --generations 50   # quicker
    python benchmarks/reference_front.py --keep-strategies        # keep the strategies' fronts

``benchmarks/search_efficiency.py`` measures every strategy against the file, and with
``--update-reference`` merges the fronts its runs found into it (so the file holds every
strategy's front too). A new file is written from scratch unless ``--keep-strategies``
keeps the strategy fronts of the old one (same oracle and objectives only).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

from deepflow.datasets.io import oracle_version
from deepflow.search.evolution import evolve
from deepflow.search.problem import OracleProblem
from deepflow.search.reference import SWEEP_SEED, ReferenceFront, sweep_front
from deepflow.search.study import load_study

HERE = Path(__file__).resolve().parent
#: Points kept in the file (about 45 bytes each): the rest thinned (ReferenceFront.thinned).
MAX_POINTS = 4000


def default_path(study: str) -> Path:
    return HERE / "reference_fronts" / f"{study}.json"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--study", default="default")
    parser.add_argument("--out", default="", help="default: benchmarks/reference_fronts/STUDY.json")
    parser.add_argument("--sweep-samples", type=int, default=2**24)
    parser.add_argument("--sweep-seed", type=int, default=SWEEP_SEED)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--population", type=int, default=10_000)
    parser.add_argument("--generations", type=int, default=500)
    parser.add_argument("--evolution-seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--keep-strategies", action="store_true")
    parser.add_argument(
        "--max-points",
        type=int,
        default=MAX_POINTS,
        help="thin the stored front to this many points",
    )
    args = parser.parse_args()

    study = load_study(args.study)
    out = Path(args.out) if args.out else default_path(study.name)
    version = oracle_version()
    front = ReferenceFront.empty(
        study.name, study.objectives, oracle_version=version, space_sha256=study.space.sha256
    )
    if args.sweep_samples > 0:
        last = [0.0]

        def progress(done: int, total: int) -> None:
            if time.perf_counter() - last[0] > 30 or done == total:
                last[0] = time.perf_counter()
                print(f"  sweep {done:,}/{total:,}", flush=True)

        values, record = sweep_front(
            study.space,
            study.objectives,
            study.bounds,
            num_samples=args.sweep_samples,
            seed=args.sweep_seed,
            workers=args.workers,
            progress=progress,
        )
        front = front.merge(values, record)
        s = front.sources[-1]
        print(
            f"sweep: {s['num_samples']:,} designs in {s['seconds']:.0f} s, front of "
            f"{s['front_size']} points, hypervolume {s['hypervolume']:.4f}",
            flush=True,
        )
    problem = OracleProblem(study.space)
    for seed in args.evolution_seeds:
        if args.generations <= 0:
            break
        run = evolve(
            problem,
            front.objectives,
            study.bounds,
            population=args.population,
            generations=args.generations,
            seed=seed,
        )
        last = run.history[-1]
        record = {
            "kind": "evolution",
            "algorithm": "moead",
            "population": args.population,
            "generations": int(last["generation"]),
            "seed": seed,
            "evaluations": int(last["evaluations"]),
            "seconds": round(last["seconds"], 1),
        }
        front = front.merge(run.archive.data["values"], record)
        s = front.sources[-1]
        print(
            f"evolution seed {seed}: {s['evaluations']:,} evaluations in {s['seconds']:.0f} s, "
            f"front of {s['front_size']} points, hypervolume {s['hypervolume']:.4f}",
            flush=True,
        )
    if args.keep_strategies and out.exists():
        old = ReferenceFront.load(out)
        notes = old.check(
            study.name, front.objectives, space_sha256=study.space.sha256, oracle_version=version
        )
        if notes:
            sys.exit(f"error: {out}: cannot keep its strategy fronts: {'; '.join(notes)}.")
        for i, source in enumerate(old.sources):
            if source["kind"] == "strategy":
                front = front.merge(old.values[old.origin == i], source)
    merged = front.hypervolume
    front = front.thinned(args.max_points)
    if front.thinning:
        t = front.thinning
        print(
            f"thinned {t['points_before']} -> {t['points_after']} points: hypervolume "
            f"{merged:.5f} -> {front.hypervolume:.5f}"
        )
    path = front.save(out)
    shares = ", ".join(
        f"{s['kind']} {hv / front.hypervolume:.1%}"
        for s, hv in zip(front.sources, front.source_hypervolumes(), strict=True)
    )
    print(
        f"best known: {len(front.values)} points, hypervolume {front.hypervolume:.4f} "
        f"(hypervolume of each source's points on it: {shares}); wrote {path} "
        f"({path.stat().st_size / 1024:.0f} KiB)"
    )


if __name__ == "__main__":
    main()
