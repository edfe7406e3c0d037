"""Search efficiency: oracle evaluations and wall time each strategy needs to reach 90 / 95 /
99 % of the study's best-known hypervolume (``benchmarks/reference_fronts/<study>.json``).

    python benchmarks/search_efficiency.py                       # default study, 3 seeds
    python benchmarks/search_efficiency.py --quick               # a smoke run (minutes)
    python benchmarks/search_efficiency.py --strategies botorch --seeds 0 --budget 192
    python benchmarks/search_efficiency.py --json out.json       # histories for the report

The best-known front is read from the stored file (made by ``benchmarks/reference_front.py``:
a 16 M-design Sobol sweep and a long MOEA/D run; regenerate it when the oracle changes, the
script says when the file's oracle version differs). For each strategy and seed:

- ``sweep``: the plain vectorised Sobol sweep (the seed scrambles the sequence), labelled in
  growing chunks in one process; evaluations = designs labelled, wall time = labelling;
- ``moead``: the vectorised evolutionary run (:func:`deepflow.search.evolution.evolve`, one
  oracle call per generation);
- the loop's strategies (``surrogate``, ``botorch``, ``gradient``, ``tpe``, ``nsga2``,
  ``random``): :func:`~deepflow.search.base.run_search` in memory on the oracle, the wall
  time of each batch taken when the loop reports it. ``surrogate`` runs as the study
  configures it (``make run``: its dataset of ``surrogate.num_samples`` designs is sampled and
  the model fitted inside the timed run; those labels, and a prescreen's, are counted in the
  column ``extra labels``, not in the evaluations, which are the loop's trials).

The table gives medians over seeds (``>B`` when fewer than half the seeds got there within
the budget B; ``-`` for times then) and the final share of the best-known hypervolume. Wall
times are of this machine as it is loaded when the script runs: on a machine shared with
other jobs they are upper bounds.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np

from deepflow.datasets.io import oracle_version
from deepflow.search.objectives import normalise, outcomes
from deepflow.search.pareto import ParetoArchive
from deepflow.search.problem import OracleProblem
from deepflow.search.reference import ReferenceFront
from deepflow.search.study import load_study

LEVELS = (0.90, 0.95, 0.99)
HERE = Path(__file__).resolve().parent
#: Default budgets (oracle evaluations) per strategy.
BUDGETS = {
    "sweep": 2**22,
    "moead": 600_000,
    "gradient": 300_000,
    "nsga2": 4096,
    "random": 4096,
}
MODEL_BUDGET = 192
#: Designs per ask of the gradient strategy: 22 chains of 2 x 22 + 1 probes on the default
#: study (a batch of 8 would give one chain, handed out over six asks a move).
GRADIENT_BATCH = 1024


def sweep_history(study: Any, *, seed: int, num: int) -> list[dict[str, float]]:
    """The plain Sobol sweep: hypervolume after each chunk (chunks double from 1,024 to
    65,536 rows, so small counts are resolved), with evaluations and seconds."""
    from deepflow.datasets.label import label_points, output_names
    from deepflow.datasets.samplers import unit_cube

    space = study.space
    version = oracle_version()
    names = output_names(space)[1]
    archive = ParetoArchive(len(study.objectives))
    history: list[dict[str, float]] = []
    start_s = time.perf_counter()
    done, chunk = 0, 1024
    while done < num:
        stop = min(num, done + chunk)
        u = unit_cube("sobol", seed=seed, start=done, stop=stop, num_samples=num,
                      dims=space.num_dims)  # fmt: skip
        rows = label_points(space, u, oracle_version=version).to_pandas()
        values, _, _, ok = outcomes(rows, study.objectives, names, study.bounds)
        archive.add(normalise(values, study.objectives), ok)
        done = stop
        history.append({"evaluations": float(done), "seconds": time.perf_counter() - start_s,
                        "hypervolume": archive.hypervolume()})  # fmt: skip
        chunk = min(2 * chunk, 65536)
    return history


def moead_history(study: Any, *, seed: int, budget: int, population: int,
                  generations: int) -> list[dict[str, float]]:  # fmt: skip
    from deepflow.search.evolution import evolve

    run = evolve(OracleProblem(study.space), study.objectives, study.bounds,
                 population=population, generations=generations, seed=seed,
                 max_evaluations=budget)  # fmt: skip
    return [dict(h) for h in run.history]


def loop_history(
    study: Any,
    strategy: str,
    *,
    seed: int,
    budget: int,
    batch_size: int,
    prescreen: tuple[int, int] | None = None,
) -> tuple[list[dict[str, float]], dict[str, Any]]:
    """A loop strategy in memory: hypervolume, evaluations and seconds after each batch.
    ``surrogate`` keeps the study's prescreen, the others get ``prescreen`` (evaluations,
    points) or none."""
    from deepflow.pipeline import prepare_surrogate
    from deepflow.search.base import SearchConfig, run_search

    start_s = time.perf_counter()
    search = dataclasses.replace(study.search, strategy=strategy, budget=budget, seed=seed,
                                 batch_size=batch_size)  # fmt: skip
    if strategy != "surrogate":
        evaluations, points = prescreen or (0, 1)
        search = dataclasses.replace(
            search,
            prescreen_evaluations=evaluations,
            prescreen_population=1000,
            prescreen_points=points,
            initial_points=0 if prescreen else search.initial_points,
        )
    model, dataset, extra = None, None, 0
    if strategy == "surrogate":
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            model, dataset = prepare_surrogate(dataclasses.replace(study, search=search), Path(tmp))
        extra = 0 if dataset is None else len(dataset)
    config = SearchConfig(
        name=f"{strategy}-{seed}",
        objectives=study.objectives,
        bounds=study.bounds,
        search=search,
        surrogate=study.surrogate,
    )
    reports: list[tuple[int, float]] = []  # (evaluations done, seconds) as the loop reports

    def progress(done: int, total: int) -> None:
        reports.append((done, time.perf_counter() - start_s))

    result = run_search(OracleProblem(study.space), config, storage=None, progress=progress,
                        surrogate_model=model, dataset=dataset)  # fmt: skip
    total = time.perf_counter() - start_s
    # The loop reports its budget's evaluations; a prescreen's trials come first.
    outside = int((result.rows["source"] == "prescreen").sum()) if len(result.rows) else 0

    def seconds(evaluations: int) -> float:
        """When the loop first reported at least ``evaluations`` done (a strategy's asks
        may be shorter than the batch, so reports and checkpoints need not coincide)."""
        return next((t for done, t in reports if done >= evaluations), total)

    history = [
        dict(h, seconds=seconds(int(h["evaluations"]) - outside))
        for h in result.hypervolume_history
    ]
    timings = dict(result.timings_s)
    if outside:  # the prescreen's oracle labels (whole generations)
        population = search.prescreen_population
        extra += search.prescreen_evaluations // population * population
    return history, {"extra_labels": extra, "timings_s": timings}


def first_reaching(history: list[dict[str, float]], target: float) -> dict[str, float] | None:
    for h in history:
        if h["hypervolume"] >= target:
            return h
    return None


def medians(runs: list[dict[str, Any]], ref: float) -> dict[float, tuple[float, float]]:
    """Per level: median evaluations and seconds to reach it (inf unless most seeds did)."""
    out = {}
    for level in LEVELS:
        hits = [first_reaching(r["history"], level * ref) for r in runs]
        if sum(h is not None for h in hits) * 2 > len(hits):
            ev = [h["evaluations"] if h else np.inf for h in hits]
            s = [h["seconds"] if h else np.inf for h in hits]
            out[level] = (float(np.median(ev)), float(np.median(s)))
        else:
            out[level] = (np.inf, np.inf)
    return out


def _count(x: float) -> str:
    return f"{x:,.0f}"


def hypervolume_at(history: list[dict[str, float]], seconds: float) -> float:
    """The hypervolume a run had reached after ``seconds`` (0 before its first record)."""
    reached = [h["hypervolume"] for h in history if h["seconds"] <= seconds]
    return reached[-1] if reached else 0.0


def summary_table(runs: list[dict[str, Any]], ref: float, strategies: list[str]) -> list[str]:
    """The printed table (Markdown): per strategy, medians over seeds; the last column is
    the plain sweep's median hypervolume after the strategy's median final wall time."""
    sweeps = [r for r in runs if r["strategy"] == "sweep"]
    head = ["strategy", "seeds", "budget", "extra labels", "final HV", "final s"]
    head += [f"{round(lv * 100)} %: evals / s" for lv in LEVELS]
    head += ["sweep HV at final s"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for s in strategies:
        mine = [r for r in runs if r["strategy"] == s]
        if not mine:
            continue
        budget = mine[0]["budget"]
        final = np.median([r["history"][-1]["hypervolume"] / ref for r in mine])
        final_s = np.median([r["history"][-1]["seconds"] for r in mine])
        extra = np.median([r.get("extra_labels", 0) for r in mine])
        cells = [s, str(len(mine)), _count(budget), _count(extra), f"{final:.1%}",
                 f"{final_s:.1f}"]  # fmt: skip
        for ev, sec in medians(mine, ref).values():
            cells.append(f"{_count(ev)} / {sec:.1f}" if np.isfinite(ev) else f">{_count(budget)}")
        at = [hypervolume_at(r["history"], final_s) / ref for r in sweeps]
        cells.append(f"{np.median(at):.1%}" if at else "")
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def per_seed_lines(run: dict[str, Any], ref: float) -> str:
    last = run["history"][-1]
    parts = []
    for level in LEVELS:
        h = first_reaching(run["history"], level * ref)
        parts.append(
            f"{round(level * 100)}% "
            + (f"{h['evaluations']:,.0f} ev {h['seconds']:.1f} s" if h else "-")
        )
    return (
        f"  {run['strategy']:9s} seed {run['seed']}: {last['hypervolume'] / ref:6.1%} after "
        f"{last['evaluations']:,.0f} evaluations ({last['seconds']:.1f} s); " + ", ".join(parts)
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--study", default="default")
    parser.add_argument(
        "--front", default="", help="default: benchmarks/reference_fronts/STUDY.json"
    )
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument(
        "--strategies",
        nargs="+",
        default=["sweep", "moead", "surrogate", "gradient", "botorch", "tpe", "nsga2", "random"],
    )
    parser.add_argument("--budget", type=int, default=0,
                        help="evaluations per run (0: per strategy, see BUDGETS)")  # fmt: skip
    parser.add_argument("--batch-size", type=int, default=0, help="0: the study's")
    parser.add_argument("--population", type=int, default=1000, help="moead")
    parser.add_argument("--generations", type=int, default=0,
                        help="moead (0: as many as the budget allows)")  # fmt: skip
    parser.add_argument("--prescreen", type=int, nargs=2, default=None,
                        metavar=("EVALUATIONS", "POINTS"),
                        help="the loop strategies but surrogate (which runs the study's) "
                        "start from a MOEA/D prescreen of this many oracle evaluations "
                        "(population 1,000), thinned to POINTS designs")  # fmt: skip
    parser.add_argument("--gradient-batch", type=int, default=GRADIENT_BATCH)
    parser.add_argument("--quick", action="store_true", help="tiny budgets (smoke test)")
    parser.add_argument("--json", default="", help="write the histories here")
    parser.add_argument("--from-json", nargs="+", default=[],
                        help="print the table of these --json files (runs of several "
                        "processes) instead of running")  # fmt: skip
    args = parser.parse_args()
    if args.from_json:
        runs_read: list[dict[str, Any]] = []
        for name in args.from_json:
            with open(name, encoding="utf-8") as fh:
                data = json.load(fh)
            runs_read += data["runs"]
        order = list(dict.fromkeys([*args.strategies, *(r["strategy"] for r in runs_read)]))
        for line in summary_table(runs_read, data["best_known_hypervolume"], order):
            print(line)
        return

    import torch

    torch.set_num_threads(1)  # one thread per process: 2 shared cores (measured)
    study = load_study(args.study)
    path = Path(args.front) if args.front else HERE / "reference_fronts" / f"{study.name}.json"
    front = ReferenceFront.load(path)
    notes = front.check(study.name, study.objectives, space_sha256=study.space.sha256,
                        oracle_version=oracle_version())  # fmt: skip
    if any("objectives" in n or "study" in n or "space" in n for n in notes):
        sys.exit(f"error: {path}: {'; '.join(notes)}.")
    ref = front.hypervolume
    print(f"best-known front: {path.name}, {len(front.values)} points, hypervolume {ref:.4f}")
    for note in notes:
        print(f"  note: {note} (regenerate it: python benchmarks/reference_front.py)")
    print(f"wall times: {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f} at the start")
    batch = args.batch_size or study.search.batch_size
    runs: list[dict[str, Any]] = []
    for strategy in args.strategies:
        budget = args.budget or BUDGETS.get(strategy, MODEL_BUDGET)
        if strategy == "surrogate" and not args.budget:
            budget = study.search.budget
        if args.quick:
            budget = min(budget, 32 if budget <= 4096 else 20_000)
        for seed in args.seeds[: 1 if args.quick else None]:
            extra: dict[str, Any] = {}
            if strategy == "sweep":
                history = sweep_history(study, seed=seed, num=budget)
            elif strategy == "moead":
                generations = args.generations or budget // args.population - 1
                history = moead_history(study, seed=seed, budget=budget,
                                        population=args.population,
                                        generations=generations)  # fmt: skip
            else:
                size = args.gradient_batch if strategy == "gradient" else batch
                start = None if strategy == "surrogate" else args.prescreen
                history, extra = loop_history(study, strategy, seed=seed, budget=budget,
                                              batch_size=size, prescreen=start)  # fmt: skip
            label = strategy
            if args.prescreen and strategy not in ("sweep", "moead", "surrogate"):
                label = f"{strategy}+prescreen"
            run = {"strategy": label, "seed": seed, "budget": budget, "history": history,
                   **extra}  # fmt: skip
            runs.append(run)
            print(per_seed_lines(run, ref), flush=True)

    print()
    for line in summary_table(runs, ref, args.strategies):
        print(line)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump({"best_known_hypervolume": ref, "runs": runs}, fh, indent=1)


if __name__ == "__main__":
    main()
