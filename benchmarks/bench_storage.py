"""Storage overhead of a search: milliseconds per stored trial, beside the oracle's time per
evaluation.

Run: .venv/bin/python benchmarks/bench_storage.py [--budget N] [--batch-size B]
     [--postgres URL]   (or DEEPFLOW_TEST_POSTGRES_URL)
Issue target (#18): <= 10 ms per trial on SQLite and on a journal file.

One random search of the study's space (``configs/studies/default.yaml``) per storage: in
memory, SQLite and an Optuna journal file in a temporary folder, and PostgreSQL when a URL is
given. The search loop times its three parts: ``evaluate`` (the vectorised oracle), ``ask``
and ``store`` (reading the study, reserving and completing each batch); the figures are
those times divided by the number of trials. A random search is used so the searcher costs
nothing and the storage's share shows. The machine's load average is printed with them.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from deepflow.search.base import SearchConfig, run_search
from deepflow.search.problem import OracleProblem
from deepflow.search.study import load_study


def _run(storage: str | None, budget: int, batch: int) -> dict[str, float]:
    study = load_study("default")
    settings = study.replace(strategy="random", budget=budget).search
    settings = type(settings)(
        strategy="random", budget=budget, batch_size=batch, initial_points=batch, seed=0
    )
    name = f"bench-{os.getpid()}-{time.time_ns()}"
    config = SearchConfig(name, study.objectives, study.bounds, settings, study.surrogate)
    result = run_search(OracleProblem(study.space), config, storage=storage)
    n = len(result.rows)
    return {k: 1e3 * v / n for k, v in result.timings_s.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--budget", type=int, default=256)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--postgres", default=os.environ.get("DEEPFLOW_TEST_POSTGRES_URL"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        storages: list[tuple[str, str | None]] = [
            ("memory", None),
            ("sqlite", f"sqlite:///{Path(tmp) / 'bench.db'}"),
            ("journal", str(Path(tmp) / "bench.journal")),
        ]
        if args.postgres:
            storages.append(("postgres", args.postgres))
        print(
            f"random search of the default study, {args.budget} trials in batches of "
            f"{args.batch_size}; load average {os.getloadavg()[0]:.2f}"
        )
        print(
            f"{'storage':>9} {'store ms/trial':>15} {'oracle ms/eval':>15} {'total ms/trial':>15}"
        )
        for label, storage in storages:
            t = _run(storage, args.budget, args.batch_size)
            print(
                f"{label:>9} {t['store']:15.2f} {t['evaluate']:15.2f} {t['total']:15.2f}",
                flush=True,
            )


if __name__ == "__main__":
    main()
