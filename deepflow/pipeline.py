"""Studies end to end: search a study into a result folder, or run the whole pipeline.

``search_study``: (optional surrogate preparation) -> search -> verify -> result files.
``run_study`` (``deepflow run``): sample -> fit -> search -> verify -> report.

This module sits above the layers it strings together (datasets, surrogate, search, report);
none of them imports it.
The result folder's files are described in ``docs/results.md``; they are written to
temporary names and then renamed together, so a folder never holds a half-written file or a
mix of two runs' results. A failed search (a full disk, a storage error, an interrupt) leaves
only what the next run resumes from (:data:`RESUMABLE`), or no folder when there is none.
"""

from __future__ import annotations

import contextlib
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
from deepflow.errors import StorageError
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


#: What a result folder keeps after a failure, for the next run to resume from: the Optuna
#: storage (with SQLite's journal files, which a rollback needs) and the sampled dataset.
RESUMABLE = ("optuna.db", "optuna.db-journal", "optuna.db-wal", "optuna.db-shm",
             "dataset.parquet", "dataset.parquet.space.yaml", "dataset.parquet.parts")  # fmt: skip


def _write_files(out_dir: Path, texts: dict[str, str], table: Any = None) -> None:
    """Write files of ``out_dir`` as a set: each to a temporary name, then all renamed into
    place, so a failure (a full disk) leaves the previous set whole and no temporary file.

    Args:
        out_dir: the result folder.
        texts: file name -> UTF-8 text.
        table: a DataFrame written as ``trials.parquet`` (None: none).
    """
    pid = os.getpid()
    written: list[tuple[Path, Path]] = []
    try:
        if table is not None:
            written.append((out_dir / f".trials.parquet.tmp-{pid}", out_dir / "trials.parquet"))
            table.to_parquet(written[-1][0], index=False)
        for name, text in texts.items():
            written.append((out_dir / f".{name}.tmp-{pid}", out_dir / name))
            written[-1][0].write_text(text, encoding="utf-8")
    except BaseException:
        for tmp, _ in written:
            tmp.unlink(missing_ok=True)
        raise
    for tmp, path in written:
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
    texts = {
        "pareto.json": dumps(pareto),
        "pareto.yaml": yaml.safe_dump(json.loads(dumps(pareto)), sort_keys=False),
        "summary.json": dumps(summary),
        "study.yaml": yaml.safe_dump(json.loads(dumps(to_mapping(study))), sort_keys=False),
    }
    _write_files(out_dir, texts, rows.drop(columns=["z", "info"], errors="ignore"))
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
        StorageError: a disk, permission or storage error (an ``OSError`` becomes one): the
            message names the path and the cause, and what is kept for the next run to
            resume from, e.g. ``res/.trials.parquet.tmp-42: No space left on device; 96
            evaluation(s) in res/optuna.db are kept: run the command again to resume (delete
            res to start over).``
    """
    out = Path(out_dir)
    created = not out.exists()
    out.mkdir(parents=True, exist_ok=True)
    try:
        return _search_study(study, out, storage, progress, timings)
    except BaseException as exc:
        # Rejected input, a full disk, a storage that fails, an interrupt: keep only what
        # the next run resumes from (none of it in a folder this run created: no folder).
        kept = _keep_resumable(out, created=created, own_storage=storage is None)
        hint = f"; {kept} (delete {out} to start over)." if kept else "."
        if isinstance(exc, OSError):
            where = exc.filename if exc.filename is not None else out
            raise StorageError(f"{where}: {exc.strerror or exc}{hint}") from None
        if isinstance(exc, StorageError) and kept:
            raise StorageError(f"{str(exc).rstrip('.')}{hint}") from None
        raise


def _complete_trials(db: Path) -> int | None:
    """How many complete trials the SQLite storage file ``db`` holds, read without writing
    (a full disk does not refuse it); 0 without the file, None when it cannot be read."""
    import sqlite3

    if not db.is_file():
        return 0
    try:
        with contextlib.closing(sqlite3.connect(f"{db.resolve().as_uri()}?mode=ro",
                                                uri=True)) as con:  # fmt: skip
            tables = "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = 'trials'"
            if not con.execute(tables).fetchone()[0]:  # failed before Optuna made its tables
                return 0
            query = "SELECT COUNT(*) FROM trials WHERE state = 'COMPLETE'"  # Optuna's schema
            (count,) = con.execute(query).fetchone()
    except sqlite3.Error:
        return None
    return int(count)


def _keep_resumable(out: Path, *, created: bool, own_storage: bool) -> str:
    """After a failure: remove what the next run cannot resume from when this run created
    ``out`` (all of it when nothing is resumable); say what is kept ('' for nothing)."""
    evaluations = _complete_trials(out / "optuna.db") if own_storage else 0
    dataset = [p for p in (out / "dataset.parquet", out / "dataset.parquet.parts") if p.exists()]
    if created:
        if evaluations == 0 and not dataset:
            shutil.rmtree(out, ignore_errors=True)
            return ""
        for path in out.iterdir():
            if path.name in RESUMABLE and (evaluations != 0 or not path.name.startswith("optuna")):
                continue
            if path.is_dir():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
    counted = "the evaluations" if evaluations is None else f"{evaluations} evaluation(s)"
    kept = [f"{counted} in {out / 'optuna.db'}"] if evaluations != 0 else []
    kept += [f"the sampled designs in {dataset[0]}"] if dataset else []
    if not kept:
        return ""
    return f"{' and '.join(kept)} are kept: run the command again to resume"


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
        _write_files(outcome.out_dir, {"summary.json": dumps(outcome.summary)})
    return outcome
