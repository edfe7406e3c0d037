"""Studies end to end: search a study into a result folder, or run the whole pipeline.

``search_study``: (optional surrogate preparation) -> search -> verify -> result files.
``run_study`` (``deepflow run``): sample -> fit -> search -> verify -> report.

This module sits above the layers it strings together (datasets, surrogate, search, report);
none of them imports it.
The result folder's files are described in ``docs/results.md``; each is written to a
temporary name and renamed, so a folder never holds a half-written file.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from deepflow import __version__
from deepflow.datasets.io import oracle_version
from deepflow.errors import DeepflowError
from deepflow.search.base import SearchConfig, SearchResult, dumps, run_search
from deepflow.search.problem import OracleProblem
from deepflow.search.study import Study, to_mapping
from deepflow.search.verify import verify_pareto

__all__ = ["StudyOutcome", "prepare_surrogate", "run_study", "search_study", "write_results"]

Progress = Callable[[str, int, int], None]


@dataclass
class StudyOutcome:
    """What ``search_study``/``run_study`` produced."""

    out_dir: Path
    result: SearchResult
    designs: list[dict[str, Any]]
    summary: dict[str, Any]
    report: Path | None = None


def _write_text(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def default_storage(out_dir: Path) -> str:
    return f"sqlite:///{(out_dir / 'optuna.db').resolve()}"


def prepare_surrogate(
    study: Study,
    out_dir: Path,
    *,
    progress: Progress | None = None,
    timings: dict[str, float] | None = None,
) -> tuple[Any, Any]:
    """The surrogate and training data a surrogate-assisted search starts from.

    ``surrogate.path``: a folder from ``deepflow fit`` (must match the space). Else, with
    ``surrogate.num_samples`` > 0: that many oracle-labelled designs sampled into
    ``OUT/dataset.parquet`` (resumable) and a surrogate fitted on them, saved to
    ``OUT/surrogate/``. Else (None, None): the search fits on its own evaluations.
    """
    from deepflow.datasets import load, sample
    from deepflow.surrogate import SurrogateModel

    settings = study.surrogate
    timings = timings if timings is not None else {}
    if settings.path:
        model = SurrogateModel.load(settings.path, space_sha256=study.space.sha256)
        return model, None
    if settings.num_samples <= 0:
        return None, None
    data_path = out_dir / "dataset.parquet"
    start = time.perf_counter()
    if not data_path.exists():
        sample(
            study.space,
            num_samples=settings.num_samples,
            out=data_path,
            seed=study.search.seed,
            resume=True,
            progress=(lambda d, t: progress("sample", d, t)) if progress else None,
        )
    timings["sample"] = time.perf_counter() - start
    dataset = load(data_path)
    return None, dataset


def _pareto_error(designs: list[dict[str, Any]], study: Study) -> dict[str, float] | None:
    errors: dict[str, list[float]] = {}
    for d in designs:
        pred = d.get("surrogate")
        if not pred:
            continue
        for o in study.objectives:
            truth = d["objectives"].get(o.name)
            p = pred.get(o.name, {}).get("mean")
            if truth and p is not None and math.isfinite(p):
                errors.setdefault(o.name, []).append(abs(p - truth) / abs(truth))
    if not errors:
        return None
    return {k: float(np.mean(v)) for k, v in errors.items()}


def write_results(
    study: Study, result: SearchResult, out_dir: Path, timings: dict[str, float]
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Verify the Pareto set with the oracle and write the result folder's files."""
    import yaml

    rows = result.rows
    index = np.flatnonzero(result.pareto)
    start = time.perf_counter()
    problem_space = study.space
    from deepflow.search.space import SearchSpace

    u = SearchSpace(problem_space).to_unit(result.z[index])
    infos = [result.info[i] if i < len(result.info) else {} for i in index]
    designs, mismatch = verify_pareto(problem_space, u, rows.iloc[index], result.objectives, infos)
    timings["verify"] = time.perf_counter() - start
    objectives = [
        {
            "name": o.name,
            "direction": o.direction,
            "reference": o.reference,
            "ideal": o.ideal,
            "scale": o.scale,
        }
        for o in result.objectives
    ]
    pareto = {"objectives": objectives, "designs": designs}
    surrogate = result.surrogate
    previous = out_dir / "summary.json"
    if surrogate is None and previous.exists():
        # A resumed run that had nothing left to propose fitted no surrogate: keep the
        # held-out scores of the run that did (the predictions live with the trials).
        try:
            surrogate = json.loads(previous.read_text(encoding="utf-8")).get("surrogate")
        except (OSError, ValueError):
            surrogate = None
    if surrogate is not None:
        surrogate = dict(surrogate, pareto_error=_pareto_error(designs, study))
    summary = {
        "study": study.name,
        "description": study.description,
        "strategy": study.search.strategy,
        "seed": study.search.seed,
        "budget": study.search.budget,
        "num_evaluations": len(rows),
        "num_feasible": int(result.feasible.sum()),
        "num_pareto": len(designs),
        "objectives": objectives,
        "hypervolume": result.hypervolume,
        "hypervolume_history": result.hypervolume_history,
        "verification_max_relative_difference": mismatch,
        "surrogate": surrogate,
        "timings_s": dict(timings, **{f"search_{k}": v for k, v in result.timings_s.items()}),
        "versions": {
            "deepflow": __version__,
            "oracle": oracle_version(),
        },
    }
    table = rows.drop(columns=["z", "info"], errors="ignore")
    tmp = out_dir / f".trials.parquet.tmp-{os.getpid()}"
    table.to_parquet(tmp, index=False)
    os.replace(tmp, out_dir / "trials.parquet")
    _write_text(out_dir / "pareto.json", dumps(pareto))
    _write_text(out_dir / "pareto.yaml", yaml.safe_dump(json.loads(dumps(pareto)), sort_keys=False))
    _write_text(out_dir / "summary.json", dumps(summary))
    _write_text(
        out_dir / "study.yaml",
        yaml.safe_dump(json.loads(dumps(to_mapping(study))), sort_keys=False),
    )
    return designs, summary


def search_study(
    study: Study,
    out_dir: str | Path,
    *,
    storage: str | None = None,
    progress: Progress | None = None,
    timings: dict[str, float] | None = None,
) -> StudyOutcome:
    """Search a study to its budget (resuming what ``out_dir``/``storage`` holds) and write
    the result folder.

    Raises:
        ConfigError: the storage holds this study run with other settings; a surrogate
            folder fitted on another space.
    """
    out = Path(out_dir)
    created = not out.exists()
    out.mkdir(parents=True, exist_ok=True)
    try:
        return _search_study(study, out, storage, progress, timings)
    except DeepflowError:
        # Rejected input (a storage holding another study, bad credentials) or a storage
        # that cannot be reached: leave nothing behind.
        if created:
            shutil.rmtree(out, ignore_errors=True)
        raise


def _search_study(
    study: Study,
    out: Path,
    storage: str | None,
    progress: Progress | None,
    timings: dict[str, float] | None,
) -> StudyOutcome:
    timings = timings if timings is not None else {}
    problem = OracleProblem(study.space)
    model, dataset = (
        prepare_surrogate(study, out, progress=progress, timings=timings)
        if study.search.strategy == "surrogate"
        else (None, None)
    )
    config = SearchConfig(
        name=study.name,
        objectives=study.objectives,
        bounds=study.bounds,
        search=study.search,
        surrogate=study.surrogate,
    )
    start = time.perf_counter()
    result = run_search(
        problem,
        config,
        storage=storage or default_storage(out),
        progress=(lambda d, t: progress("search", d, t)) if progress else None,
        surrogate_model=model,
        dataset=dataset,
    )
    timings["search"] = time.perf_counter() - start
    designs, summary = write_results(study, result, out, timings)
    return StudyOutcome(out, result, designs, summary)


def run_study(
    study: Study,
    out_dir: str | Path,
    *,
    storage: str | None = None,
    progress: Progress | None = None,
    report: bool = True,
) -> StudyOutcome:
    """``deepflow run``: sample -> fit -> search -> verify -> report.

    The study's strategy is used as it is; a study without a ``surrogate`` section runs the
    search alone. The report is written to ``OUT/report.html``.
    """
    timings: dict[str, float] = {}
    outcome = search_study(study, out_dir, storage=storage, progress=progress, timings=timings)
    if report:
        from deepflow.report import write_report

        start = time.perf_counter()
        outcome.report = write_report(outcome.out_dir)
        timings["report"] = time.perf_counter() - start
        outcome.summary["timings_s"]["report"] = timings["report"]
        _write_text(outcome.out_dir / "summary.json", dumps(outcome.summary))
    return outcome
